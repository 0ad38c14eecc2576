/* LRU set of prefix-block hashes for the simulator's replicas: longest cached leading prefix of a
 * request, insert-or-touch of its blocks, eviction of the least recently used block. Fixed
 * capacity, no allocation after init. */
#ifndef CINFER_AUTOSCALER_SIM_CACHE_H
#define CINFER_AUTOSCALER_SIM_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct sim_cache_node;

struct sim_cache {
    size_t cap, n;
    struct sim_cache_node *nodes; /* cap slots */
    int32_t *buckets;             /* nb chain heads, -1 = empty */
    size_t nb;
    int32_t head, tail; /* most / least recently used */
};

/* cap_blocks 0 = a cache that holds nothing. Returns 0 or ERR_NOMEM. */
int sim_cache_init(struct sim_cache *c, size_t cap_blocks);
void sim_cache_fini(struct sim_cache *c);

/* Number of leading blocks of h[0..n) present (does not touch recency). */
size_t sim_cache_match(const struct sim_cache *c, const uint64_t *h, size_t n);

/* Inserts or touches every block of h[0..n) (leading blocks most recent), evicting LRU blocks
 * when full. */
void sim_cache_insert(struct sim_cache *c, const uint64_t *h, size_t n);

#endif
