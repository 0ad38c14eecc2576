/* LRU set of prefix-block keys for the simulator's replicas: longest cached leading prefix of a
 * request, insert-or-touch of its blocks, eviction of the least recently used block. Fixed
 * capacity, no allocation after init. An optional shared index (struct sim_cache_index) lists,
 * per key, every cache holding it: what the engines' KV block events (stored / evicted) tell a
 * router, so it finds the replicas holding a prefix without asking every replica. Keys are then
 * dense ids below the index's n_keys. */
#ifndef CINFER_AUTOSCALER_SIM_CACHE_H
#define CINFER_AUTOSCALER_SIM_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct sim_cache_node;
struct sim_cache_link {
    int64_t prev, next; /* holders of the same key: slot << 24 | node, -1 = none */
};

struct sim_cache_index {
    int64_t *head; /* n_keys lists of holders, -1 = empty */
    size_t n_keys;
    struct sim_cache_link **links; /* per slot: the registered cache's links, NULL when none */
    size_t n_slots;
};

struct sim_cache {
    size_t cap, n;
    struct sim_cache_node *nodes; /* cap slots */
    int32_t *buckets;             /* nb chain heads, -1 = empty */
    size_t nb;
    int32_t head, tail;           /* most / least recently used */
    struct sim_cache_index *ix;   /* borrowed; NULL when not indexed */
    struct sim_cache_link *links; /* cap entries when indexed */
    uint32_t slot;
};

/* An index for keys < n_keys and caches in slots < n_slots. Returns 0 or ERR_NOMEM. */
int sim_cache_index_init(struct sim_cache_index *ix, size_t n_keys, size_t n_slots);
void sim_cache_index_fini(struct sim_cache_index *ix);
/* First holder of `key` (slot << 24 | node), or -1; then the next after `it`, or -1. */
int64_t sim_cache_index_first(const struct sim_cache_index *ix, uint64_t key);
int64_t sim_cache_index_next(const struct sim_cache_index *ix, int64_t it);
#define SIM_CACHE_SLOT(it) ((uint32_t)((it) >> 24))

/* cap_blocks 0 = a cache that holds nothing (and is never indexed). `ix` (borrowed, may be NULL)
 * lists this cache's keys under `slot` (< n_slots, not used by another cache until this one's
 * sim_cache_fini); an indexed cache holds fewer than 2^24 blocks. Returns 0, ERR_RANGE or
 * ERR_NOMEM. */
int sim_cache_init(struct sim_cache *c, size_t cap_blocks, struct sim_cache_index *ix,
                   uint32_t slot);
/* Frees the cache and removes its keys from its index. */
void sim_cache_fini(struct sim_cache *c);

/* Number of leading blocks of h[0..n) present (does not touch recency). */
size_t sim_cache_match(const struct sim_cache *c, const uint64_t *h, size_t n);

/* Inserts or touches every block of h[0..n) (leading blocks most recent), evicting LRU blocks
 * when full. */
void sim_cache_insert(struct sim_cache *c, const uint64_t *h, size_t n);

#endif
