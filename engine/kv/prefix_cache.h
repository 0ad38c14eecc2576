/* Automatic prefix caching over the paged KV cache (vLLM-style): every FULL block is named by a 64-bit
 * hash chained over (parent hash, the block's block_size token ids) from a per-salt root, and the
 * cache keeps one kv_cache reference on each block it indexes so that a prompt sharing a prefix with
 * an earlier one reuses its K/V instead of recomputing it. Bookkeeping only: no tensors, no clock.
 *
 * Safety against hash collisions: an entry stores its parent hash, its tokens AND the identity of the
 * parent entry it was computed after (block id + incarnation). A lookup follows identities from the
 * root, so two different prefixes whose chain hashes collide can only cause a miss or a refused
 * insert, never another prefix's K/V. Roots have the top bit set and block hashes never do, so a
 * block hash can never pose as a root.
 *
 * Eviction: a cached block held only by the cache (refcount 1) is evictable, least recently used
 * first; eviction drops the cache's reference and the block returns to kv_cache's free list.
 *
 * Not thread-safe: owned by the one inference thread, like the kv_cache it borrows. */
#ifndef CINFER_ENGINE_PREFIX_CACHE_H
#define CINFER_ENGINE_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kv_cache;
struct prefix_cache;

/* Names the hash rules below (prefix_cache_root, prefix_cache_block_hash) for those who compare
 * hashes computed elsewhere (cinfer-router): a change to either function changes this name. */
#define PREFIX_CACHE_HASH_NAME "cinfer-chain-v1"

/* Creates a cache over `kv` (borrowed; must outlive the cache and stay the same pool). Sizes its tables
 * from kv's n_blocks and block_size. *out is new (prefix_cache_free). ERR_NOMEM. Inference thread. */
int prefix_cache_new(struct kv_cache *kv, struct prefix_cache **out);
/* Drops every reference the cache holds (blocks no sequence uses return to the free list) and frees
 * the cache. NULL-safe. Inference thread. */
void prefix_cache_free(struct prefix_cache *pc);

/* Root of a hash chain for a tenant salt (borrowed bytes; NULL or len 0 = no salt, a fixed root):
 * the first 64 bits of SHA-256(salt) with the top bit set, so different salts give disjoint chains
 * and a chosen salt cannot be made to collide with another tenant's root. Pure; any thread. */
uint64_t prefix_cache_root(const char *salt, size_t len);
/* Hash of a full block: its chain parent (a root or a block hash) and its block_size tokens
 * (borrowed). Pure, stable across runs and machines (no pointer or seed input); top bit always clear.
 * Not cryptographic: a collision costs a cache miss, never wrong K/V (see above). Any thread. */
uint64_t prefix_cache_block_hash(uint64_t parent, const int32_t *tokens, int block_size);

/* Longest run of cached blocks for the full blocks of tokens[0 .. max_blocks*block_size) (borrowed)
 * under chain `root`: writes their block ids to blocks_out[0..n) (caller's array of max_blocks) and
 * returns n (0..max_blocks). The ids are borrowed: the caller attaches them with
 * kv_cache_seq_attach (which takes its own references) before any call that may evict. Every hit
 * becomes most recently used (the first block most of all, so chains are evicted tail first).
 * Counts nothing itself (the caller owns the query/hit metrics). Inference thread. */
int prefix_cache_lookup(struct prefix_cache *pc, uint64_t root, const int32_t *tokens,
                        int max_blocks, int32_t *blocks_out);
/* The same run as prefix_cache_lookup, changing nothing: no hit becomes more recent, none counts
 * as a reuse or loses its parked mark (a look ahead, e.g. where a prompt's chain leaves the
 * pool). Inference thread. */
int prefix_cache_match(const struct prefix_cache *pc, uint64_t root, const int32_t *tokens,
                       int max_blocks, int32_t *blocks_out);

/* Offers `block` (owned by an open sequence; kv_cache_block_is_full must be true) whose chain parent
 * is `parent` (the root for the sequence's first block, else the hash *hash_out gave for the block
 * before it) and whose tokens are tokens[0..block_size) (borrowed, copied). Writes the block's hash to
 * *hash_out (the caller chains the next block from it) and returns 0 whether or not it was indexed:
 * - no block with that hash is cached: the cache takes one reference and indexes it, ranked just
 *   less recently used than its parent (a first block: most recently used), so tails go first;
 * - the same prefix is already cached (another sequence computed it) or `block` itself is cached:
 *   nothing changes, and the sequence's next block can still be indexed after the cached one;
 * - not indexed either when the block before it in its sequence is neither cached nor a verified
 *   duplicate of a cached block, or when a different prefix holds that hash (a collision): such an
 *   entry could never be found safely.
 * Callers offer a sequence's full blocks in order (block i before block i+1; blocks attached from
 * prefix_cache_lookup are already cached). Cost: O(max_seqs) to find the block in its sequence.
 * ERR_INVAL (nothing written) when the block is not full or not allocated. Inference thread. */
int prefix_cache_insert(struct prefix_cache *pc, uint64_t parent, const int32_t *tokens,
                        int32_t block, uint64_t *hash_out);

/* A block about to leave the cache by eviction (its K/V is still intact in the pool while the
 * observer runs). Pointers borrowed for the call. */
struct prefix_cache_evicted {
    int32_t block;
    uint64_t hash, parent_hash; /* the chain hash and the value it was computed from */
    const int32_t *tokens;      /* (block_size) */
    uint32_t reuses;            /* lookups that hit it + later sequences that computed it again */
    bool prompt;                /* prefix_cache_mark_prompt was called for it */
    bool parked;                /* prefix_cache_mark_parked, and no lookup hit it since */
};

/* The cache's one observer (engine/kv/kv_slots.c, which forwards to the router's block events and
 * the offload tiers). Called on the inference thread inside insert / evict / clear; callbacks must
 * not call back into the cache and should be cheap. Any may be NULL. */
struct prefix_cache_observer {
    void (*stored)(void *ctx, uint64_t hash); /* a block entered the index under hash */
    /* a block is being evicted (before its reference is released: the offload tiers' copy) */
    void (*evicting)(void *ctx, const struct prefix_cache_evicted *ev);
    void (*removed)(void *ctx, uint64_t hash); /* a block left the index (eviction, clear) */
    void *ctx;
};
/* Sets the observer (copied; NULL: none). Inference thread, or before the cache is shared. */
void prefix_cache_set_observer(struct prefix_cache *pc, const struct prefix_cache_observer *obs);

/* A listener of blocks entering (stored) and leaving the index, by chain hash: the shape of
 * engine/kv/kv_events.h's kv_events_record, which kv_slots_set_observer forwards to. */
typedef void (*prefix_cache_observer_fn)(void *ctx, bool stored, uint64_t hash);

/* Marks cached `block` as computed from prompt tokens (the offload gate); no-op when not cached. */
void prefix_cache_mark_prompt(struct prefix_cache *pc, int32_t block);
/* Marks cached `block` as one of a preempted sequence's (parked: the offload hook keeps it in tier
 * 2 whatever the gate) until a lookup hits it or it is evicted; no-op when not cached. */
void prefix_cache_mark_parked(struct prefix_cache *pc, int32_t block);

/* Evicts up to n evictable blocks (refcount 1), least recently used first; returns how many were
 * freed to kv_cache's free list. Blocks still used by a sequence are skipped. Inference thread. */
int prefix_cache_evict(struct prefix_cache *pc, int n);
/* Blocks currently evictable (held only by the cache): what admission may count as available
 * beyond kv_cache_blocks_free. O(1) (kv_cache counts them). Inference thread. */
int prefix_cache_evictable(const struct prefix_cache *pc);
/* Blocks currently indexed. O(1). Inference thread. */
int prefix_cache_size(const struct prefix_cache *pc);
/* Evicts everything evictable (tests, reset); blocks used by a sequence stay cached. */
void prefix_cache_clear(struct prefix_cache *pc);

#endif
