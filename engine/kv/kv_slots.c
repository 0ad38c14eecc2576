/* KV slots for the scheduler: reservation with eviction and copy-on-write, prefix attach and
 * publish (see kv_slots.h). */
#include "engine/kv/kv_slots.h"

#include "common/err.h"
#include "common/assert.h"
#include "common/clock.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_offload.h"
#include "engine/kv/prefix_cache.h"

#include <stdlib.h>

struct kv_slots {
    struct kv_cache *kv;
    struct prefix_cache *pc;         /* NULL when prefix caching is off */
    int32_t *scratch;                /* (max_blocks_per_seq) block ids of a lookup */
    struct kv_slots_offload off;     /* off.store NULL: no offload tiers */
    uint8_t *load_buf;               /* (payload bytes) a block loaded back from a tier */
    struct kv_block_meta *metas;     /* (max_blocks_per_seq) a prefetch's chain */
    double disk_s_per_block;         /* EWMA of tier-3 reads (the offload thread's); 0: unknown */
    double prefill_s_per_token;      /* the scheduler's measurement; 0 until told */
    unsigned disk_probe;             /* lookups that skipped tier 3, for the probe */
    bool draining;                   /* kv_slots_free: every gated block is worth tier 3 */
    prefix_cache_observer_fn events; /* the router's block events, or NULL */
    void *events_ctx;
};

static void offload_evicted(void *ctx, const struct prefix_cache_evicted *ev);

/* The prefix cache's observer: block events to the router's listener, evictions to the tiers. */
static void slots_stored(void *ctx, uint64_t hash)
{
    struct kv_slots *ks = ctx;
    if (ks->events) ks->events(ks->events_ctx, true, hash);
}

static void slots_evicting(void *ctx, const struct prefix_cache_evicted *ev)
{
    struct kv_slots *ks = ctx;
    if (ks->off.store) offload_evicted(ks, ev);
}

static void slots_removed(void *ctx, uint64_t hash)
{
    struct kv_slots *ks = ctx;
    if (ks->events) ks->events(ks->events_ctx, false, hash);
}

#define KV_SLOTS_EWMA 0.2 /* weight of a new tier-3 load time */

int kv_slots_new(struct kv_cache *kv, bool prefix_caching, struct kv_slots **out)
{
    int rc = ERR_NOMEM;
    struct kv_slots *ks = calloc(1, sizeof(*ks));
    if (!ks) goto out;
    ks->kv = kv;
    ks->scratch = calloc((size_t)kv_cache_max_blocks_per_seq(kv), sizeof(*ks->scratch));
    if (!ks->scratch) goto out;
    if (prefix_caching && (rc = prefix_cache_new(kv, &ks->pc)) != 0) goto out;
    if (ks->pc)
        prefix_cache_set_observer(ks->pc, &(struct prefix_cache_observer){
                                              slots_stored, slots_evicting, slots_removed, ks});
    *out = ks;
    ks = NULL;
    rc = 0;
out:
    kv_slots_free(ks);
    return rc;
}

/* Batches of evictions between waits for the offload queue, below its default length. */
#define KV_SLOTS_DRAIN_BATCH (KV_OFFLOAD_QUEUE_DEFAULT / 2)

void kv_slots_free(struct kv_slots *ks)
{
    if (!ks) return;
    /* Offload what the pool still caches (through the gate), so that a restarted engine, or a
     * replica sharing the directory, finds it: evict in batches the queue can take. */
    ks->draining = true;
    while (ks->off.store && prefix_cache_evictable(ks->pc) > 0) {
        kv_offload_flush(ks->off.store);
        if (prefix_cache_evict(ks->pc, KV_SLOTS_DRAIN_BATCH) == 0) break;
    }
    prefix_cache_free(ks->pc);
    free(ks->load_buf);
    free(ks->metas);
    free(ks->scratch);
    free(ks);
}

bool kv_slots_prefix_caching(const struct kv_slots *ks)
{
    return ks->pc != NULL;
}

void kv_slots_set_observer(struct kv_slots *ks, prefix_cache_observer_fn fn, void *ctx)
{
    ks->events = fn;
    ks->events_ctx = ctx;
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

/* Eviction, for the tiers: offers the gated block (or a parked one) to the store, copying
 * its K/V out of the pool now (the block is reused as soon as the hook returns). A block reused
 * while cached, or any at a graceful stop, is durable: written to tier 3 on its first offer; so
 * is a parked one when there is no tier 2 to keep it (its sequence resumes from tier 3 instead
 * of recomputing). */
static void offload_evicted(void *ctx, const struct prefix_cache_evicted *ev)
{
    struct kv_slots *ks = ctx;
    bool pass = ks->off.gate == KV_SLOTS_GATE_ALL || ev->parked ||
                (ks->off.gate == KV_SLOTS_GATE_PROMPT && (ev->prompt || ev->reuses)) ||
                (ks->off.gate == KV_SLOTS_GATE_REUSED && ev->reuses);
    if (!pass) return;
    uint64_t bytes = kv_offload_payload_bytes(ks->off.store);
    struct kv_block_meta m = {kv_offload_namespace(ks->off.store), ev->hash,   ev->parent_hash,
                              kv_cache_block_size(ks->kv),         ev->tokens, bytes};
    bool durable =
        ks->draining || ev->reuses > 0 || (ev->parked && !kv_offload_has_host(ks->off.store));
    uint8_t *payload = kv_offload_job_new(ks->off.store, &m, durable);
    if (!payload) return;
    if (ks->off.read(ks->off.ctx, ev->block, payload, (size_t)bytes) != 0)
        kv_offload_job_cancel(ks->off.store, payload);
    else
        kv_offload_job_submit(ks->off.store, payload);
}

int kv_slots_set_offload(struct kv_slots *ks, const struct kv_slots_offload *o)
{
    if (!ks->pc || !o->store || !o->read || !o->write ||
        kv_offload_block_size(o->store) != kv_cache_block_size(ks->kv))
        return ERR_INVAL;
    uint8_t *buf = malloc((size_t)kv_offload_payload_bytes(o->store));
    struct kv_block_meta *metas =
        calloc((size_t)kv_cache_max_blocks_per_seq(ks->kv), sizeof(*metas));
    if (!buf || !metas) {
        free(buf);
        free(metas);
        return ERR_NOMEM;
    }
    free(ks->load_buf);
    free(ks->metas);
    ks->load_buf = buf;
    ks->metas = metas;
    ks->off = *o;
    return 0;
}

bool kv_slots_disk_pays(double disk_s_per_block, double prefill_s_per_token, int block_size)
{
    if (disk_s_per_block <= 0 || prefill_s_per_token <= 0) return true;
    return disk_s_per_block < prefill_s_per_token * block_size;
}

void kv_slots_set_prefill_cost(struct kv_slots *ks, double s_per_token)
{
    ks->prefill_s_per_token = s_per_token;
}

/* Whether this sequence may read tier 3 (prefetch): when the cost model says it pays, and for one
 * probe in KV_SLOTS_DISK_PROBE otherwise. */
static bool disk_allowed(struct kv_slots *ks)
{
    if (kv_slots_disk_pays(ks->disk_s_per_block, ks->prefill_s_per_token,
                           kv_cache_block_size(ks->kv)))
        return true;
    return ++ks->disk_probe % KV_SLOTS_DISK_PROBE == 0;
}

/* Folds one tier-3 read time (seconds per block) into the cost model's estimate. */
static void disk_observe(struct kv_slots *ks, double s_per_block)
{
    ks->disk_s_per_block =
        ks->disk_s_per_block > 0
            ? ks->disk_s_per_block + KV_SLOTS_EWMA * (s_per_block - ks->disk_s_per_block)
            : s_per_block;
}

bool kv_slots_prefetch_keeps_waiting(double waited_s, int reads, double prefill_s_per_token,
                                     int block_size)
{
    if (prefill_s_per_token <= 0) return waited_s < KV_SLOTS_PREFETCH_WAIT_S;
    return waited_s < (reads + 1) * prefill_s_per_token * block_size;
}

/* Starts f's prefetch: the blocks of tokens after the pool's cached run, when tier 3 may be read.
 * Returns whether one is in flight. */
static bool prefetch_start(struct kv_slots *ks, const int32_t *tokens, int n_tokens, uint64_t root,
                           struct kv_fetch *f)
{
    int bs = kv_cache_block_size(ks->kv);
    int max_blocks = (n_tokens - 1) / bs;
    if (max_blocks <= 0) return false;
    int k = prefix_cache_match(ks->pc, root, tokens, max_blocks, ks->scratch);
    if (k == max_blocks || !disk_allowed(ks)) return false;
    uint64_t parent = root, bytes = kv_offload_payload_bytes(ks->off.store);
    for (int b = 0; b < max_blocks; b++) {
        const int32_t *t = tokens + (size_t)b * bs;
        uint64_t h = prefix_cache_block_hash(parent, t, bs);
        ks->metas[b] =
            (struct kv_block_meta){kv_offload_namespace(ks->off.store), h, parent, bs, t, bytes};
        parent = h;
    }
    uint64_t id = 0;
    if (kv_offload_prefetch(ks->off.store, ks->metas + k, max_blocks - k, &id) != 0 || !id)
        return false; /* no memory: the blocks are recomputed, as without tier 3 */
    f->id = id;
    f->started = clock_mono_s();
    f->deadline = f->started + KV_SLOTS_PREFETCH_WAIT_S;
    return true;
}

bool kv_slots_prefetch(struct kv_slots *ks, const int32_t *tokens, int n_tokens, uint64_t root,
                       struct kv_fetch *f)
{
    if (!f->asked) {
        f->asked = true;
        if (!ks->pc || !ks->off.store || !kv_offload_has_disk(ks->off.store) ||
            !prefetch_start(ks, tokens, n_tokens, root, f))
            return false;
    }
    if (!f->id || f->measured) return false;
    struct kv_offload_prefetch_info info;
    bool pending = kv_offload_prefetch_pending(ks->off.store, f->id, &info);
    double waited = clock_mono_s() - f->started;
    if (pending && kv_slots_prefetch_keeps_waiting(waited, info.reads, ks->prefill_s_per_token,
                                                   kv_cache_block_size(ks->kv)))
        return true;
    /* Done or given up: what the reads cost feeds the cost model; a wait given up counts the
     * time waited per block read (at least one), so a stalled disk turns tier 3 off too. */
    f->measured = true;
    double per = info.reads > 0 ? info.read_s / info.reads : 0;
    if (pending && waited / (info.reads + 1) > per) per = waited / (info.reads + 1);
    if (per > 0) disk_observe(ks, per);
    return false;
}

void kv_slots_prefetch_wait(struct kv_slots *ks, const struct kv_fetch *f, double max_s)
{
    if (!ks->off.store || !f->id || f->measured) return;
    double left = f->deadline - clock_mono_s();
    if (left > max_s) left = max_s;
    if (left > 0) (void)kv_offload_prefetch_wait(ks->off.store, f->id, left);
}

void kv_slots_prefetch_end(struct kv_slots *ks, struct kv_fetch *f)
{
    if (ks->off.store && f->id) kv_offload_prefetch_end(ks->off.store, f->id);
    *f = (struct kv_fetch){0};
}

/* Continues seq (block aligned, blocks [0, k) attached, `parent` the chain value after them) with
 * blocks of tokens loaded back from the offload tiers, up to max_blocks; returns the new k. */
static int attach_offloaded(struct kv_slots *ks, int seq, const int32_t *tokens, int k,
                            int max_blocks, uint64_t parent, struct kv_chain *chain)
{
    int bs = kv_cache_block_size(ks->kv);
    uint64_t bytes = kv_offload_payload_bytes(ks->off.store);
    for (; k < max_blocks; k++) {
        const int32_t *t = tokens + (size_t)k * bs;
        uint64_t h = prefix_cache_block_hash(parent, t, bs);
        struct kv_block_meta m = {kv_offload_namespace(ks->off.store), h, parent, bs, t, bytes};
        enum kv_offload_tier tier;
        /* Memory only: tier 2, or a tier-3 block kv_slots_prefetch had read ahead. */
        if (kv_offload_load(ks->off.store, &m, ks->load_buf, &tier) != 0) break;
        /* One fresh block; the sequence is block aligned, so nothing is copied. */
        if (kv_slots_reserve(ks, seq, bs, NULL, NULL) != 0) break;
        int n;
        int32_t blk = kv_cache_seq_blocks(ks->kv, seq, &n)[k];
        /* The block id is the pool's own and the size the store's, checked against the model
         * when the tiers were connected: a failure here is a programmer error. */
        int rc = ks->off.write(ks->off.ctx, blk, ks->load_buf, (size_t)bytes);
        ASSERT(rc == 0);
        uint64_t hh;
        prefix_cache_insert(ks->pc, parent, t, blk, &hh); /* best effort: the chain holds h */
        prefix_cache_mark_prompt(ks->pc, blk); /* reused: offered again when evicted again */
        chain->hashes[k] = h;
        chain->n_loaded[tier == KV_OFFLOAD_HOST ? 0 : 1] += bs;
        parent = h;
    }
    return k;
}

int kv_slots_reserve(struct kv_slots *ks, int seq, int n, kv_slots_copy_fn copy, void *ctx)
{
    int need = kv_cache_seq_blocks_needed(ks->kv, seq, n);
    if (need > kv_slots_available(ks)) return ERR_AGAIN;
    int free_blocks = kv_cache_blocks_free(ks->kv);
    if (need > free_blocks) prefix_cache_evict(ks->pc, need - free_blocks);
    struct kv_cache_copy cp;
    int rc = kv_cache_seq_append(ks->kv, seq, n, &cp);
    if (rc == 0 && cp.n) rc = copy ? copy(ctx, cp.src, cp.dst) : ERR_INVAL;
    return rc;
}

int kv_slots_attach_prefix(struct kv_slots *ks, int seq, const int32_t *tokens, int n_tokens,
                           struct kv_chain *chain)
{
    chain->n_hashed = 0;
    chain->n_loaded[0] = chain->n_loaded[1] = 0;
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
    if (ks->off.store && k < max_blocks && kv_cache_seq_len(ks->kv, seq) == k * bs)
        k = attach_offloaded(ks, seq, tokens, k, max_blocks, parent, chain);
    chain->n_hashed = k;
    return k * bs;
}

void kv_slots_park(struct kv_slots *ks, int seq, const struct kv_chain *chain)
{
    if (!ks->pc || !ks->off.store) return;
    int n_table = 0;
    const int32_t *table = kv_cache_seq_blocks(ks->kv, seq, &n_table);
    for (int b = 0; b < chain->n_hashed && b < n_table; b++)
        prefix_cache_mark_parked(ks->pc, table[b]);
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
        if ((b + 1) * bs <= chain->n_prompt) prefix_cache_mark_prompt(ks->pc, table[b]);
    }
}
