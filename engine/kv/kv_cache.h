/* Paged KV-cache manager: the bookkeeping half of the KV cache (which physical block holds which
 * tokens of which sequence). Pure logic, no tensors: the K/V storage itself lives in the backend
 * (backend_ops.kv_alloc) and is addressed through the block tables and slots this module hands out.
 *
 * Model: a pool of n_blocks fixed-size blocks (block_size tokens each) with a free list; each open
 * sequence has a block table (logical block i -> physical block id). Blocks are reference counted so
 * that sequences (and, later, a prefix cache) can share them. A block whose block_size slots have all
 * been written is "full" and immutable from then on; a block with refcount > 1 is never written:
 * appending to a sequence whose last block is shared and partial copies it first (copy-on-write; the
 * caller copies the K/V data with backend_ops.kv_copy_block).
 *
 * Not thread-safe: owned by the one inference thread. */
#ifndef CINFER_ENGINE_KV_CACHE_H
#define CINFER_ENGINE_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_CACHE_DEFAULT_BLOCK_SIZE 16

struct kv_cache_config {
    int n_blocks;           /* physical blocks in the pool (>= 1) */
    int block_size;         /* tokens per block (>= 1) */
    int max_seqs;           /* sequences that can be open at once (>= 1) */
    int max_blocks_per_seq; /* block-table capacity: ceil(context_length / block_size) */
};

/* A copy the caller must perform before writing the new tokens: K/V of block `src` -> block `dst`
 * (copy-on-write of a shared partial block). n == 0 when nothing is to be copied. */
struct kv_cache_copy {
    int n;
    int32_t src, dst;
};

struct kv_cache;

/* Number of blocks that fit in `budget_bytes` for a model needing `bytes_per_token` of K/V per token
 * (all layers, K and V). 0 when even one block does not fit. Pure; any thread. */
int64_t kv_cache_blocks_for_budget(uint64_t budget_bytes, uint64_t bytes_per_token, int block_size);
/* The same for n pools that hold the same sequences' tokens block for block (a target model's and
 * its draft model's), each needing bytes_per_token[i] per token: every pool gets the returned
 * number of blocks, so pool i gets the share bytes_per_token[i] / sum of the budget and the total,
 * blocks x block_size x sum, stays within budget_bytes. 0 when one block each does not fit or the
 * sum overflows. Pure; any thread. */
int64_t kv_cache_blocks_for_pools(uint64_t budget_bytes, const uint64_t *bytes_per_token, int n,
                                  int block_size);

/* Bytes that `fraction` (0, 1] of the memory this process may use amounts to (physical memory, or
 * the container's cgroup limit when lower: common/sysmem.h); 0 when unknown or the fraction is out
 * of range. Any thread. */
uint64_t kv_cache_ram_budget(double fraction);

/* Creates a pool (cfg borrowed). *out is new (kv_cache_free). ERR_INVAL on a bad config, ERR_NOMEM. */
int kv_cache_new(const struct kv_cache_config *cfg, struct kv_cache **out);
/* Frees the pool and every block table. NULL-safe. */
void kv_cache_free(struct kv_cache *kv);

/* Geometry and occupancy; pure reads of the borrowed pool (inference thread). */
int kv_cache_block_size(const struct kv_cache *kv);
int kv_cache_n_blocks(const struct kv_cache *kv);
int kv_cache_max_seqs(const struct kv_cache *kv);
int kv_cache_max_blocks_per_seq(const struct kv_cache *kv);
/* Blocks on the free list / referenced by at least one owner, and used / n_blocks in [0, 1]. */
int kv_cache_blocks_free(const struct kv_cache *kv);
int kv_cache_blocks_used(const struct kv_cache *kv);
double kv_cache_usage(const struct kv_cache *kv);

/* Opens an empty sequence; *seq_out is its id in [0, max_seqs). ERR_AGAIN when all ids are in use. */
int kv_cache_seq_open(struct kv_cache *kv, int *seq_out);
/* Releases the sequence's references to its blocks (a block returns to the free list when its
 * refcount drops to 0) and frees the id. Closing a closed or invalid id is a programmer error. */
void kv_cache_seq_close(struct kv_cache *kv, int seq);
/* True when `seq` is a valid, open sequence id (any int may be asked). */
bool kv_cache_seq_is_open(const struct kv_cache *kv, int seq);
/* Tokens of the sequence whose slots have been reserved (the next position to write). */
int kv_cache_seq_len(const struct kv_cache *kv, int seq);
/* The block table of the sequence (borrowed, valid until the next call that changes it). */
const int32_t *kv_cache_seq_blocks(const struct kv_cache *kv, int seq, int *n_blocks);

/* Fresh blocks that kv_cache_seq_append(seq, n_new) would take from the free list (for admission). */
int kv_cache_seq_blocks_needed(const struct kv_cache *kv, int seq, int n_new);
/* Reserves slots for n_new more tokens at positions len .. len+n_new-1, allocating blocks as needed,
 * and advances len. All or nothing: ERR_AGAIN (nothing changed) when the pool has too few free blocks,
 * ERR_RANGE when the block table would overflow. When the last block is shared and partial it is
 * replaced by a private copy first, reported in *copy (may be NULL only if the caller never shares). */
int kv_cache_seq_append(struct kv_cache *kv, int seq, int n_new, struct kv_cache_copy *copy);
/* Shortens the sequence to `len` tokens (0 <= len <= its length): the blocks past the one holding
 * position len - 1 are released (each returns to the free list when no other owner holds it) and
 * the fill of the last kept block drops to len's place in it, so the cut slots count as unwritten
 * and the next append writes them again. Speculative decoding's rollback of rejected positions.
 * ERR_INVAL, with nothing changed, for a len out of range or one that cuts inside a block another
 * owner shares (a shared block is immutable). */
int kv_cache_seq_truncate(struct kv_cache *kv, int seq, int len);
/* Sink-window eviction (kv_window.h): drops the n whole blocks at table indices first ..
 * first+n-1 (each returns to the free list when no other owner holds it), moves the later entries
 * down and shortens the sequence by n * block_size, so every token after the range now sits
 * n * block_size positions earlier. The caller re-rotates those moved blocks' keys (model_kv_shift.c);
 * a shared block is immutable, so ERR_INVAL, with nothing changed, when one of the moved blocks has
 * another owner, when a dropped block is not full, or for a range outside the table. n == 0 is a
 * no-op. Inference thread. */
int kv_cache_seq_evict(struct kv_cache *kv, int seq, int first, int n);
/* Cache slot of position `pos` (< len) of the sequence: block_id * block_size + pos % block_size. */
int64_t kv_cache_seq_slot(const struct kv_cache *kv, int seq, int pos);

/* Opens a new sequence sharing every block of `src` (refcounts incremented), with the same length.
 * A shared partial last block is copied on the next append of whichever sequence appends first.
 * ERR_AGAIN when no sequence id is free. */
int kv_cache_seq_fork(struct kv_cache *kv, int src, int *seq_out);
/* Appends already-full blocks (e.g. from a prefix cache; borrowed ids, refcounts incremented) to an
 * empty-or-block-aligned sequence; its length grows by n * block_size. ERR_INVAL when a block is not
 * full or not allocated or the sequence is not block aligned; ERR_RANGE when the table overflows. */
int kv_cache_seq_attach(struct kv_cache *kv, int seq, const int32_t *blocks, int n);

/* The hold: one extra reference per block kept outside sequences (the prefix cache's). ERR_INVAL for
 * a free or invalid block, or one already held. */
int kv_cache_block_hold(struct kv_cache *kv, int32_t block);
/* Drops the hold's reference; the block returns to the free list at zero. Releasing a block that is
 * not held is a programmer error (ASSERT). */
void kv_cache_block_release(struct kv_cache *kv, int32_t block);
/* Held blocks no sequence uses (refcount 1: evictable), kept up to date as references change, so
 * this is O(1). */
int kv_cache_blocks_held_alone(const struct kv_cache *kv);
/* Owners of the block (0 when free or out of range). */
int kv_cache_block_refcount(const struct kv_cache *kv, int32_t block);
/* True once all block_size slots have been written: the block's contents are immutable. */
bool kv_cache_block_is_full(const struct kv_cache *kv, int32_t block);

#endif
