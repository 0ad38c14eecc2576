/* Paged KV-cache manager: block pool with a free list, reference counts and per-sequence block tables.
 * Bookkeeping only; the K/V data lives in the backend. See kv_cache.h for the model. */
#include "engine/kv/kv_cache.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/sysmem.h"

#include <stdlib.h>

struct kv_seq {
    bool open;
    int len; /* reserved tokens */
    int32_t
        *blocks; /* (max_blocks_per_seq) block table; the first ceil(len/bs) entries are valid */
    int n_blocks;
};

struct kv_cache {
    struct kv_cache_config cfg;
    int32_t *refcount;  /* (n_blocks) owners of each block; 0 = on the free list */
    bool *held;         /* (n_blocks) one of the owners is the external hold (the prefix cache) */
    int n_held_alone;   /* blocks whose only owner is the hold: evictable, counted as it changes */
    int32_t *fill;      /* (n_blocks) slots written in each block */
    int32_t *free_list; /* stack of free block ids */
    int n_free;
    struct kv_seq *seqs; /* (max_seqs) */
};

int64_t kv_cache_blocks_for_budget(uint64_t budget_bytes, uint64_t bytes_per_token, int block_size)
{
    if (bytes_per_token == 0 || block_size <= 0) return 0;
    uint64_t per_block = bytes_per_token * (uint64_t)block_size;
    if (per_block / (uint64_t)block_size != bytes_per_token) return 0; /* overflow */
    uint64_t n = budget_bytes / per_block;
    return n > INT32_MAX ? INT32_MAX : (int64_t)n;
}

int64_t kv_cache_blocks_for_pools(uint64_t budget_bytes, const uint64_t *bytes_per_token, int n,
                                  int block_size)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (bytes_per_token[i] > UINT64_MAX - sum) return 0; /* overflow */
        sum += bytes_per_token[i];
    }
    return kv_cache_blocks_for_budget(budget_bytes, sum, block_size);
}

uint64_t kv_cache_ram_budget(double fraction)
{
    if (!(fraction > 0.0 && fraction <= 1.0)) return 0;
    uint64_t limit = sysmem_limit_bytes();
    return (uint64_t)((double)limit * fraction);
}

int kv_cache_new(const struct kv_cache_config *cfg, struct kv_cache **out)
{
    if (!cfg || cfg->n_blocks <= 0 || cfg->block_size <= 0 || cfg->max_seqs <= 0 ||
        cfg->max_blocks_per_seq <= 0)
        return ERR_INVAL;
    int rc = ERR_NOMEM;
    struct kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv) goto out;
    kv->cfg = *cfg;
    kv->refcount = calloc((size_t)cfg->n_blocks, sizeof(*kv->refcount));
    kv->held = calloc((size_t)cfg->n_blocks, sizeof(*kv->held));
    kv->fill = calloc((size_t)cfg->n_blocks, sizeof(*kv->fill));
    kv->free_list = calloc((size_t)cfg->n_blocks, sizeof(*kv->free_list));
    kv->seqs = calloc((size_t)cfg->max_seqs, sizeof(*kv->seqs));
    if (!kv->refcount || !kv->held || !kv->fill || !kv->free_list || !kv->seqs) goto out;
    for (int i = 0; i < cfg->max_seqs; i++) {
        kv->seqs[i].blocks = calloc((size_t)cfg->max_blocks_per_seq, sizeof(int32_t));
        if (!kv->seqs[i].blocks) goto out;
    }
    /* Pop order: block 0 first, so small tests see predictable ids. */
    for (int i = 0; i < cfg->n_blocks; i++) kv->free_list[i] = cfg->n_blocks - 1 - i;
    kv->n_free = cfg->n_blocks;
    *out = kv;
    kv = NULL;
    rc = 0;
out:
    kv_cache_free(kv);
    return rc;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv) return;
    if (kv->seqs)
        for (int i = 0; i < kv->cfg.max_seqs; i++) free(kv->seqs[i].blocks);
    free(kv->seqs);
    free(kv->free_list);
    free(kv->fill);
    free(kv->refcount);
    free(kv->held);
    free(kv);
}

int kv_cache_block_size(const struct kv_cache *kv)
{
    return kv->cfg.block_size;
}

int kv_cache_n_blocks(const struct kv_cache *kv)
{
    return kv->cfg.n_blocks;
}

int kv_cache_max_seqs(const struct kv_cache *kv)
{
    return kv->cfg.max_seqs;
}

int kv_cache_max_blocks_per_seq(const struct kv_cache *kv)
{
    return kv->cfg.max_blocks_per_seq;
}

int kv_cache_blocks_free(const struct kv_cache *kv)
{
    return kv->n_free;
}

int kv_cache_blocks_used(const struct kv_cache *kv)
{
    return kv->cfg.n_blocks - kv->n_free;
}

double kv_cache_usage(const struct kv_cache *kv)
{
    return (double)kv_cache_blocks_used(kv) / (double)kv->cfg.n_blocks;
}

static bool block_valid(const struct kv_cache *kv, int32_t b)
{
    return b >= 0 && b < kv->cfg.n_blocks;
}

/* Every change to a block's owners (reference count, hold flag) goes through here, keeping
 * n_held_alone exact. */
static void owners_set(struct kv_cache *kv, int32_t b, int32_t refcount, bool held)
{
    bool was = kv->held[b] && kv->refcount[b] == 1;
    kv->refcount[b] = refcount;
    kv->held[b] = held;
    kv->n_held_alone += (int)(held && refcount == 1) - (int)was;
}

static void ref_add(struct kv_cache *kv, int32_t b, int delta)
{
    owners_set(kv, b, kv->refcount[b] + delta, kv->held[b]);
}

static int32_t block_pop(struct kv_cache *kv)
{
    ASSERT(kv->n_free > 0);
    int32_t b = kv->free_list[--kv->n_free];
    ASSERT(kv->refcount[b] == 0 && !kv->held[b]);
    ref_add(kv, b, 1);
    kv->fill[b] = 0;
    return b;
}

/* Drops one owner; the block returns to the free list at zero. */
static void block_unref(struct kv_cache *kv, int32_t b)
{
    ASSERT(block_valid(kv, b) && kv->refcount[b] > 0);
    ref_add(kv, b, -1);
    if (kv->refcount[b] == 0) {
        kv->fill[b] = 0;
        kv->free_list[kv->n_free++] = b;
    }
}

int kv_cache_block_hold(struct kv_cache *kv, int32_t b)
{
    if (!block_valid(kv, b) || kv->refcount[b] == 0 || kv->held[b]) return ERR_INVAL;
    owners_set(kv, b, kv->refcount[b] + 1, true);
    return 0;
}

void kv_cache_block_release(struct kv_cache *kv, int32_t b)
{
    ASSERT(block_valid(kv, b) && kv->held[b]);
    owners_set(kv, b, kv->refcount[b], false);
    block_unref(kv, b);
}

int kv_cache_blocks_held_alone(const struct kv_cache *kv)
{
    return kv->n_held_alone;
}

int kv_cache_block_refcount(const struct kv_cache *kv, int32_t b)
{
    return block_valid(kv, b) ? kv->refcount[b] : 0;
}

bool kv_cache_block_is_full(const struct kv_cache *kv, int32_t b)
{
    return block_valid(kv, b) && kv->refcount[b] > 0 && kv->fill[b] == kv->cfg.block_size;
}

static struct kv_seq *seq_get(const struct kv_cache *kv, int seq)
{
    ASSERT(seq >= 0 && seq < kv->cfg.max_seqs && kv->seqs[seq].open);
    return &kv->seqs[seq];
}

bool kv_cache_seq_is_open(const struct kv_cache *kv, int seq)
{
    return seq >= 0 && seq < kv->cfg.max_seqs && kv->seqs[seq].open;
}

int kv_cache_seq_open(struct kv_cache *kv, int *seq_out)
{
    for (int i = 0; i < kv->cfg.max_seqs; i++) {
        if (kv->seqs[i].open) continue;
        kv->seqs[i].open = true;
        kv->seqs[i].len = 0;
        kv->seqs[i].n_blocks = 0;
        *seq_out = i;
        return 0;
    }
    return ERR_AGAIN;
}

void kv_cache_seq_close(struct kv_cache *kv, int seq)
{
    struct kv_seq *s = seq_get(kv, seq);
    for (int i = 0; i < s->n_blocks; i++) block_unref(kv, s->blocks[i]);
    s->n_blocks = 0;
    s->len = 0;
    s->open = false;
}

int kv_cache_seq_len(const struct kv_cache *kv, int seq)
{
    return seq_get(kv, seq)->len;
}

const int32_t *kv_cache_seq_blocks(const struct kv_cache *kv, int seq, int *n_blocks)
{
    const struct kv_seq *s = seq_get(kv, seq);
    *n_blocks = s->n_blocks;
    return s->blocks;
}

/* True when the next append must copy the last block first: it is partial and shared. */
static bool needs_cow(const struct kv_cache *kv, const struct kv_seq *s)
{
    if (s->len % kv->cfg.block_size == 0) return false;
    return kv->refcount[s->blocks[s->n_blocks - 1]] > 1;
}

int kv_cache_seq_blocks_needed(const struct kv_cache *kv, int seq, int n_new)
{
    const struct kv_seq *s = seq_get(kv, seq);
    if (n_new <= 0) return 0;
    int64_t bs = kv->cfg.block_size;
    int64_t total = ((int64_t)s->len + n_new + bs - 1) / bs;
    int64_t extra = total - s->n_blocks;
    if (needs_cow(kv, s)) extra++;
    return extra > INT32_MAX ? INT32_MAX : (int)extra;
}

int kv_cache_seq_append(struct kv_cache *kv, int seq, int n_new, struct kv_cache_copy *copy)
{
    struct kv_seq *s = seq_get(kv, seq);
    if (copy) copy->n = 0;
    if (n_new < 0) return ERR_INVAL;
    if (n_new == 0) return 0;
    int bs = kv->cfg.block_size;
    int64_t total = ((int64_t)s->len + n_new + bs - 1) / bs;
    if (total > kv->cfg.max_blocks_per_seq) return ERR_RANGE;
    bool cow = needs_cow(kv, s);
    if (cow && !copy) return ERR_INVAL;
    int64_t fresh = total - s->n_blocks + (cow ? 1 : 0);
    if (fresh > kv->n_free) return ERR_AGAIN;

    if (cow) {
        int32_t old = s->blocks[s->n_blocks - 1];
        int32_t nb = block_pop(kv);
        kv->fill[nb] = kv->fill[old];
        block_unref(kv, old);
        s->blocks[s->n_blocks - 1] = nb;
        copy->n = 1;
        copy->src = old;
        copy->dst = nb;
    }
    while (s->n_blocks < total) s->blocks[s->n_blocks++] = block_pop(kv);
    /* Mark the slots as written: every block up to the new length is filled to its end or to len. */
    int new_len = s->len + n_new;
    for (int i = s->len / bs; i < s->n_blocks; i++) {
        int end = (i + 1) * bs < new_len ? (i + 1) * bs : new_len;
        int32_t b = s->blocks[i];
        ASSERT(kv->refcount[b] == 1); /* a shared block is never written */
        kv->fill[b] = end - i * bs;
    }
    s->len = new_len;
    return 0;
}

int kv_cache_seq_truncate(struct kv_cache *kv, int seq, int len)
{
    struct kv_seq *s = seq_get(kv, seq);
    if (len < 0 || len > s->len) return ERR_INVAL;
    int bs = kv->cfg.block_size;
    int keep = (len + bs - 1) / bs;
    if (len % bs != 0 && kv->refcount[s->blocks[keep - 1]] > 1 && len < s->len) return ERR_INVAL;
    while (s->n_blocks > keep) block_unref(kv, s->blocks[--s->n_blocks]);
    if (len % bs != 0) kv->fill[s->blocks[keep - 1]] = len % bs;
    s->len = len;
    return 0;
}

int kv_cache_seq_evict(struct kv_cache *kv, int seq, int first, int n)
{
    struct kv_seq *s = seq_get(kv, seq);
    if (n == 0) return 0;
    if (first < 0 || n < 0 || first > s->n_blocks - n) return ERR_INVAL;
    for (int i = first; i < first + n; i++)
        if (kv->fill[s->blocks[i]] != kv->cfg.block_size) return ERR_INVAL;
    for (int i = first + n; i < s->n_blocks; i++)
        if (kv->refcount[s->blocks[i]] > 1) return ERR_INVAL; /* its keys are about to move */
    for (int i = first; i < first + n; i++) block_unref(kv, s->blocks[i]);
    for (int i = first + n; i < s->n_blocks; i++) s->blocks[i - n] = s->blocks[i];
    s->n_blocks -= n;
    s->len -= n * kv->cfg.block_size;
    return 0;
}

int64_t kv_cache_seq_slot(const struct kv_cache *kv, int seq, int pos)
{
    const struct kv_seq *s = seq_get(kv, seq);
    ASSERT(pos >= 0 && pos < s->len);
    int bs = kv->cfg.block_size;
    return (int64_t)s->blocks[pos / bs] * bs + pos % bs;
}

int kv_cache_seq_fork(struct kv_cache *kv, int src, int *seq_out)
{
    const struct kv_seq *s = seq_get(kv, src);
    int dst;
    int rc = kv_cache_seq_open(kv, &dst);
    if (rc) return rc;
    struct kv_seq *d = &kv->seqs[dst];
    for (int i = 0; i < s->n_blocks; i++) {
        d->blocks[i] = s->blocks[i];
        ref_add(kv, s->blocks[i], 1);
    }
    d->n_blocks = s->n_blocks;
    d->len = s->len;
    *seq_out = dst;
    return 0;
}

int kv_cache_seq_attach(struct kv_cache *kv, int seq, const int32_t *blocks, int n)
{
    struct kv_seq *s = seq_get(kv, seq);
    if (n < 0 || s->len % kv->cfg.block_size != 0) return ERR_INVAL;
    if ((int64_t)s->n_blocks + n > kv->cfg.max_blocks_per_seq) return ERR_RANGE;
    for (int i = 0; i < n; i++)
        if (!kv_cache_block_is_full(kv, blocks[i])) return ERR_INVAL;
    for (int i = 0; i < n; i++) {
        ref_add(kv, blocks[i], 1);
        s->blocks[s->n_blocks++] = blocks[i];
    }
    s->len += n * kv->cfg.block_size;
    return 0;
}
