/* KV slots for the scheduler: the block pool (kv_cache.h) and its optional prefix cache
 * (prefix_cache.h) behind the few calls admission and decoding make. Reserving slots evicts cached
 * blocks when the free list is short and performs the copy-on-write of a shared partial block in
 * one call; attaching a sequence's cached prefix and publishing its newly full blocks keep the
 * sequence's hash chain (struct kv_chain) in step. Bookkeeping only: K/V tensors stay in the
 * backend, reached through the copy callback.
 *
 * Not thread-safe: owned by the one inference thread, like the pool it borrows. */
#ifndef CINFER_ENGINE_KV_SLOTS_H
#define CINFER_ENGINE_KV_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kv/prefix_cache.h"

struct kv_cache;
struct kv_slots;

/* A sequence's place in the prefix cache: the chain root of its tenant salt (prefix_cache_root)
 * and the chained hash of each full block it has computed, hashes[0..n_hashed). Owned by the
 * caller, one per sequence; `hashes` must have room for every block of the sequence. */
struct kv_chain {
    uint64_t root;
    uint64_t *hashes;
    int n_hashed;
    int n_prompt;    /* the sequence's prompt tokens: blocks wholly inside are prompt blocks */
    int n_loaded[2]; /* of the tokens the last attach returned, those loaded from tier 2, 3 */
};

/* Creates the slots of `kv` (borrowed; must outlive them), with a prefix cache over it when
 * prefix_caching. *out is new (kv_slots_free). ERR_NOMEM. */
int kv_slots_new(struct kv_cache *kv, bool prefix_caching, struct kv_slots **out);
/* Drops the prefix cache's references (blocks no sequence uses return to the free list) and
 * frees. With offload tiers, the blocks the prefix cache still holds are first offered to them
 * (gated, waiting for the offload queue, so a graceful stop leaves the pool's prefixes to the next
 * engine); the store and the block I/O's context must still be alive. NULL-safe. */
void kv_slots_free(struct kv_slots *ks);

bool kv_slots_prefix_caching(const struct kv_slots *ks);

/* Sets the listener of blocks the prefix cache stores and drops (the router's block events; fn
 * NULL: none). The slots are the prefix cache's one observer and forward to it; nothing is ever
 * called without prefix caching. */
void kv_slots_set_observer(struct kv_slots *ks, prefix_cache_observer_fn fn, void *ctx);

/* Blocks a reservation can obtain now: the free list plus the cached blocks only the prefix cache
 * holds (evictable). */
int kv_slots_available(const struct kv_slots *ks);

/* Share of the pool's blocks in use by sequences, in [0, 1]: evictable cached blocks count as
 * free, since any reservation may take them. */
double kv_slots_usage(const struct kv_slots *ks);

/* Copies the K/V data of block src to block dst (the backend's copy-on-write); 0 or an error. */
typedef int (*kv_slots_copy_fn)(void *ctx, int32_t src, int32_t dst);

/* Which blocks evicted from the pool are written to the offload tiers: blocks of a prompt or ones
 * reused since they were cached (the default), only reused ones, or all. */
enum kv_slots_gate { KV_SLOTS_GATE_PROMPT = 0, KV_SLOTS_GATE_REUSED, KV_SLOTS_GATE_ALL };

/* Copies one pool block's K/V to a host buffer of `bytes` (read) or back (write); 0 or an error. */
typedef int (*kv_slots_block_read_fn)(void *ctx, int32_t block, void *dst, size_t bytes);
typedef int (*kv_slots_block_write_fn)(void *ctx, int32_t block, const void *src, size_t bytes);

struct kv_slots_offload {
    struct kv_offload *store; /* borrowed; must outlive the slots */
    enum kv_slots_gate gate;
    kv_slots_block_read_fn read;
    kv_slots_block_write_fn write;
    void *ctx;
};

/* Connects the offload tiers (o copied): blocks the prefix cache evicts are offered to the store
 * (gated), and kv_slots_attach_prefix loads blocks that miss the pool back from it. ERR_INVAL
 * without prefix caching or when the store's block size is not the pool's; ERR_NOMEM. */
int kv_slots_set_offload(struct kv_slots *ks, const struct kv_slots_offload *o);

/* The cost model for tier 3: whether reading a block from the directory, at the measured
 * disk_s_per_block, is expected to beat recomputing its block_size tokens at the measured
 * prefill_s_per_token. An estimate not yet measured (<= 0) says yes. Pure; any thread. */
bool kv_slots_disk_pays(double disk_s_per_block, double prefill_s_per_token, int block_size);
/* Tells the slots what prefilling one token costs now (seconds, the scheduler's measurement);
 * tier-3 prefetches stop while the disk is slower than that, except one probe in
 * KV_SLOTS_DISK_PROBE sequences that keeps the disk's estimate fresh. Tier 2 (a memory copy) is
 * always loaded. */
#define KV_SLOTS_DISK_PROBE 16
void kv_slots_set_prefill_cost(struct kv_slots *ks, double s_per_token);

/* Tier 3 is read off the inference thread: before a waiting sequence is admitted, its blocks that
 * only the directory holds are read ahead by the store's offload thread (kv_offload_prefetch), and
 * the sequence waits for them (others are admitted meanwhile) while they arrive faster than they
 * could be recomputed (kv_slots_prefetch_keeps_waiting); then kv_slots_attach_prefix loads what
 * arrived (a memory copy) and the rest is recomputed. The state is the caller's, one per
 * sequence, zeroed (or reset by kv_slots_prefetch_end). */
#define KV_SLOTS_PREFETCH_WAIT_S 1.0 /* the longest wait while the prefill cost is unmeasured */
struct kv_fetch {
    uint64_t id;              /* the store's prefetch; 0: none */
    double started, deadline; /* clock_mono_s; deadline: started + KV_SLOTS_PREFETCH_WAIT_S */
    bool asked;               /* kv_slots_prefetch decided, for this admission */
    bool measured;            /* done waiting: the reads' cost went to the cost model */
    bool counted;             /* the caller's: its wait is in its statistics */
};

/* The wait rule: a sequence that has waited waited_s for a prefetch that has read `reads` blocks
 * keeps waiting while that is less than recomputing reads + 1 blocks would take at the measured
 * prefill cost: the reads keep ahead of recomputation (a stalled or slow disk is given up within
 * about one block's recompute time per block read, and the whole wait never exceeds recomputing
 * the blocks read plus one). Unmeasured (<= 0): up to KV_SLOTS_PREFETCH_WAIT_S. Pure. */
bool kv_slots_prefetch_keeps_waiting(double waited_s, int reads, double prefill_s_per_token,
                                     int block_size);

/* Whether the waiting sequence with tokens[0..n_tokens) (borrowed) under chain `root` should keep
 * waiting for its prefetch. The first call decides: with offload tiers, a directory, and the cost
 * model's leave (kv_slots_disk_pays, or the probe), it starts reading the blocks after the pool's
 * cached run; false when nothing is to be read. Later calls: true until the reads are done or the
 * wait rule gives up; the reads' time (the offload thread's measurement, or the time waited per
 * block read when it gave up) then updates the disk's estimate. Call kv_slots_prefetch_end once the sequence has
 * attached its prefix (or goes away). */
bool kv_slots_prefetch(struct kv_slots *ks, const int32_t *tokens, int n_tokens, uint64_t root,
                       struct kv_fetch *f);
/* Waits up to max_s (never past f's deadline) for f's prefetch: for a step with nothing else to
 * run (it blocks on the store's condition variable, not on a file). */
void kv_slots_prefetch_wait(struct kv_slots *ks, const struct kv_fetch *f, double max_s);
/* Ends f's prefetch (its staged blocks that no attach loaded are freed) and resets f, so that a
 * later admission (after a preemption) decides again. A no-op on a reset f. */
void kv_slots_prefetch_end(struct kv_slots *ks, struct kv_fetch *f);

/* Reserves n more slots for the open sequence seq: evicts least recently used cached blocks when
 * the free list is short, appends, and has `copy` duplicate a shared partial last block before it
 * is written. ERR_AGAIN, with nothing changed (nothing evicted either), when the pool cannot
 * provide the blocks even after eviction; ERR_RANGE for a length past the sequence's block
 * table; the copy's error (the slots stay reserved: the caller abandons the
 * sequence). */
int kv_slots_reserve(struct kv_slots *ks, int seq, int n, kv_slots_copy_fn copy, void *ctx);

/* Attaches to the open, empty sequence seq the longest cached run of full blocks of
 * tokens[0..n_tokens) (borrowed) under chain->root, never the block holding the last token (it
 * must be computed to give logits), and records their hashes in chain (n_hashed = blocks
 * attached). With offload tiers, the run continues with blocks loaded back from them into fresh
 * pool blocks (indexed in the prefix cache; chain->n_loaded counts them): from tier 2, and from
 * tier 3 what a prefetch (kv_slots_prefetch) staged, memory copies only; loading stops at the
 * first miss or when the pool has no block to spare. Returns the tokens attached: a multiple of
 * the block size, 0 without prefix caching or when nothing matched. Every hit becomes most
 * recently used. */
int kv_slots_attach_prefix(struct kv_slots *ks, int seq, const int32_t *tokens, int n_tokens,
                           struct kv_chain *chain);

/* Offers the prefix cache seq's full blocks among its first n_computed tokens (borrowed, the
 * sequence's tokens) that chain has not recorded yet, in order, and extends chain with their
 * hashes; stops at the first block the cache cannot index (see prefix_cache_insert). No-op without
 * prefix caching. */
void kv_slots_publish(struct kv_slots *ks, int seq, const int32_t *tokens, int n_computed,
                      struct kv_chain *chain);

/* Parks seq, about to be preempted (call before closing it): with offload tiers, its full blocks
 * the prefix cache indexes (chain's, published) are offered to the store when evicted whatever
 * the gate, so the sequence's re-admission (kv_slots_attach_prefix) loads them from tier 2
 * instead of recomputing them. A no-op without offload tiers. */
void kv_slots_park(struct kv_slots *ks, int seq, const struct kv_chain *chain);

#endif
