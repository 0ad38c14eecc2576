/* KV slots for the scheduler: reservation with eviction and copy-on-write, prefix attach and
 * publish (see kv_slots.h). */
#include "engine/kv/kv_slots.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_cache.h"

#include <stdlib.h>

struct kv_slots {
    struct kv_cache *kv;
    struct prefix_cache *pc; /* NULL when prefix caching is off */
    int32_t *scratch;        /* (max_blocks_per_seq) block ids of a lookup */
};

int kv_slots_new(struct kv_cache *kv, bool prefix_caching, struct kv_slots **out)
{
    int rc = ERR_NOMEM;
    struct kv_slots *ks = calloc(1, sizeof(*ks));
    if (!ks) goto out;
    ks->kv = kv;
    ks->scratch = calloc((size_t)kv_cache_max_blocks_per_seq(kv), sizeof(*ks->scratch));
    if (!ks->scratch) goto out;
    if (prefix_caching && (rc = prefix_cache_new(kv, &ks->pc)) != 0) goto out;
    *out = ks;
    ks = NULL;
    rc = 0;
out:
    kv_slots_free(ks);
    return rc;
}

void kv_slots_free(struct kv_slots *ks)
{
    if (!ks) return;
    prefix_cache_free(ks->pc);
    free(ks->scratch);
    free(ks);
}

bool kv_slots_prefix_caching(const struct kv_slots *ks)
{
    return ks->pc != NULL;
}

void kv_slots_set_observer(struct kv_slots *ks, prefix_cache_observer_fn fn, void *ctx)
{
    if (ks->pc) prefix_cache_set_observer(ks->pc, fn, ctx);
}

int kv_slots_available(const struct kv_slots *ks)
{
    int n = kv_cache_blocks_free(ks->kv);
    if (ks->pc) n += prefix_cache_evictable(ks->pc);
    return n;
}

double kv_slots_usage(const struct kv_slots *ks)
{
    int used = kv_cache_blocks_used(ks->kv) - (ks->pc ? prefix_cache_evictable(ks->pc) : 0);
    return (double)used / (double)kv_cache_n_blocks(ks->kv);
}

int kv_slots_reserve(struct kv_slots *ks, int seq, int n, kv_slots_copy_fn copy, void *ctx)
{
    int need = kv_cache_seq_blocks_needed(ks->kv, seq, n);
    if (need > kv_slots_available(ks)) return ERR_AGAIN;
    int free_blocks = kv_cache_blocks_free(ks->kv);
    if (need > free_blocks) prefix_cache_evict(ks->pc, need - free_blocks);
    struct kv_cache_copy cp;
    int rc = kv_cache_seq_append(ks->kv, seq, n, &cp);
    if (rc == 0 && cp.n) rc = copy(ctx, cp.src, cp.dst);
    return rc;
}

int kv_slots_attach_prefix(struct kv_slots *ks, int seq, const int32_t *tokens, int n_tokens,
                           struct kv_chain *chain)
{
    chain->n_hashed = 0;
    if (!ks->pc) return 0;
    int bs = kv_cache_block_size(ks->kv);
    int max_blocks = (n_tokens - 1) / bs;
    int k =
        max_blocks ? prefix_cache_lookup(ks->pc, chain->root, tokens, max_blocks, ks->scratch) : 0;
    if (k > 0 && kv_cache_seq_attach(ks->kv, seq, ks->scratch, k) != 0) k = 0;
    uint64_t parent = chain->root;
    for (int b = 0; b < k; b++) {
        parent = prefix_cache_block_hash(parent, tokens + (size_t)b * bs, bs);
        chain->hashes[b] = parent;
    }
    chain->n_hashed = k;
    return k * bs;
}

void kv_slots_publish(struct kv_slots *ks, int seq, const int32_t *tokens, int n_computed,
                      struct kv_chain *chain)
{
    if (!ks->pc) return;
    int bs = kv_cache_block_size(ks->kv), n_table = 0;
    const int32_t *table = kv_cache_seq_blocks(ks->kv, seq, &n_table);
    int full = n_computed / bs;
    for (int b = chain->n_hashed; b < full && b < n_table; b++) {
        uint64_t parent = b ? chain->hashes[b - 1] : chain->root;
        if (prefix_cache_insert(ks->pc, parent, tokens + (size_t)b * bs, table[b],
                                &chain->hashes[b]) != 0)
            break;
        chain->n_hashed = b + 1;
    }
}
