/* Paged attention and KV stores over the CPU cache. Each token attends to positions 0..pos of its
 * sequence, found block by block through the sequence's block table. Work is one (token, KV head) pair:
 * every K and V row is loaded once for all query heads that share the KV head (GQA), scores go to a
 * per-thread buffer, softmax subtracts the maximum for stability. Pairs are dealt round-robin to the
 * threads because causal contexts make later tokens more expensive. */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"

#include <math.h>
#include <string.h>

struct attn_job {
    struct cpu_backend *cb;
    const struct backend_batch *batch;
    const float *q;
    float *out;
    int n_heads;
    float scale;
    const char *k_base, *v_base; /* this layer's K and V */
    float *scores;               /* (n_threads, group, max_ctx) */
    size_t max_ctx;
};

/* Checks every token's sequence, position and the blocks its context reads. */
static int attn_batch_check(const struct cpu_backend *cb, const struct backend_batch *bt)
{
    if (!bt || bt->n_tokens < 0) return ERR_INVAL;
    if (bt->n_tokens == 0) return 0;
    if (!bt->pos || !bt->seq) return ERR_INVAL;
    int bs = cb->kv.block_size;
    if (!bt->block_tables || bt->n_seqs <= 0 || bt->max_blocks <= 0) return ERR_INVAL;
    for (int t = 0; t < bt->n_tokens; t++) {
        if (bt->pos[t] < 0) return ERR_RANGE;
        if (bt->seq[t] < 0 || bt->seq[t] >= bt->n_seqs) return ERR_RANGE;
        int64_t nblk = (int64_t)bt->pos[t] / bs + 1;
        if (nblk > bt->max_blocks) return ERR_RANGE;
        const int32_t *tab = bt->block_tables + (size_t)bt->seq[t] * bt->max_blocks;
        for (int64_t i = 0; i < nblk; i++)
            if (tab[i] < 0 || tab[i] >= cb->kv.n_blocks) return ERR_RANGE;
    }
    return 0;
}

int cpu_attention_kv_store(struct backend *b, int layer, const float *k, const float *v,
                           const struct backend_batch *batch)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!cb->kv_ready) return ERR_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !k || !v || !batch) return ERR_INVAL;
    if (batch->n_tokens > 0 && !batch->slots) return ERR_INVAL;
    int64_t n_slots = (int64_t)cb->kv.n_blocks * cb->kv.block_size;
    for (int t = 0; t < batch->n_tokens; t++)
        if (batch->slots[t] < 0 || batch->slots[t] >= n_slots) return ERR_RANGE;

    size_t row = cb->kv_row_elems, eb = cb->kv_elem_bytes;
    char *kl = (char *)cb->kv_mem + (size_t)layer * 2 * cb->kv_layer_elems * eb;
    char *vl = kl + cb->kv_layer_elems * eb;
    for (int t = 0; t < batch->n_tokens; t++) {
        size_t off = (size_t)batch->slots[t] * row * eb;
        const float *ks = k + (size_t)t * row, *vs = v + (size_t)t * row;
        if (cb->kv.type == QUANT_F32) {
            memcpy(kl + off, ks, row * sizeof(float));
            memcpy(vl + off, vs, row * sizeof(float));
        } else {
            uint16_t *kd = (uint16_t *)(kl + off), *vd = (uint16_t *)(vl + off);
            for (size_t i = 0; i < row; i++) {
                kd[i] = cpu_quant_f32_to_f16(ks[i]);
                vd[i] = cpu_quant_f32_to_f16(vs[i]);
            }
        }
    }
    return 0;
}

/* Attention of the `group` query heads of KV head `h` for token `t`. */
static void attn_one(const struct attn_job *j, int t, int h, float *scores)
{
    const struct cpu_backend *cb = j->cb;
    const struct cpu_kernels *kern = &cb->kern;
    const struct backend_batch *bt = j->batch;
    int hd = cb->kv.head_dim, bs = cb->kv.block_size;
    int group = j->n_heads / cb->kv.n_kv_heads;
    int n_ctx = bt->pos[t] + 1;
    const int32_t *tab = bt->block_tables + (size_t)bt->seq[t] * bt->max_blocks;
    size_t eb = cb->kv_elem_bytes, row = cb->kv_row_elems;
    int f16 = cb->kv.type == QUANT_F16;
    const float *q = j->q + ((size_t)t * j->n_heads + (size_t)h * group) * hd;
    float *out = j->out + ((size_t)t * j->n_heads + (size_t)h * group) * hd;

    for (int p = 0; p < n_ctx; p++) {
        size_t slot = (size_t)tab[p / bs] * bs + (size_t)(p % bs);
        const char *kr = j->k_base + (slot * row + (size_t)h * hd) * eb;
        for (int g = 0; g < group; g++) {
            const float *qg = q + (size_t)g * hd;
            float s = f16 ? kern->dot_f16(qg, (const uint16_t *)kr, hd)
                          : kern->dot_f32(qg, (const float *)kr, hd);
            scores[(size_t)g * n_ctx + p] = s * j->scale;
        }
    }
    for (int g = 0; g < group; g++) {
        float *sg = scores + (size_t)g * n_ctx, mx = -INFINITY, sum = 0.0f;
        for (int p = 0; p < n_ctx; p++) mx = sg[p] > mx ? sg[p] : mx;
        for (int p = 0; p < n_ctx; p++) {
            sg[p] = expf(sg[p] - mx);
            sum += sg[p];
        }
        float inv = 1.0f / sum;
        for (int p = 0; p < n_ctx; p++) sg[p] *= inv;
        memset(out + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int p = 0; p < n_ctx; p++) {
        size_t slot = (size_t)tab[p / bs] * bs + (size_t)(p % bs);
        const char *vr = j->v_base + (slot * row + (size_t)h * hd) * eb;
        for (int g = 0; g < group; g++) {
            float a = scores[(size_t)g * n_ctx + p];
            if (f16)
                kern->axpy_f16(a, (const uint16_t *)vr, out + (size_t)g * hd, hd);
            else
                kern->axpy_f32(a, (const float *)vr, out + (size_t)g * hd, hd);
        }
    }
}

static void attn_task(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    int n_kv = j->cb->kv.n_kv_heads, group = j->n_heads / n_kv;
    float *scores = j->scores + (size_t)ith * group * j->max_ctx;
    int64_t items = (int64_t)j->batch->n_tokens * n_kv;
    for (int64_t i = ith; i < items; i += nth)
        attn_one(j, (int)(i / n_kv), (int)(i % n_kv), scores);
}

int cpu_attention_run(struct backend *b, int layer, const float *q, float *out,
                      const struct backend_batch *batch, int n_heads, float scale)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!cb->kv_ready) return ERR_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !q || !out || !batch) return ERR_INVAL;
    if (n_heads <= 0 || n_heads % cb->kv.n_kv_heads != 0) return ERR_INVAL;
    int rc = attn_batch_check(cb, batch);
    if (rc != 0 || batch->n_tokens == 0) return rc;

    struct attn_job j = {
        .cb = cb, .batch = batch, .q = q, .out = out, .n_heads = n_heads, .scale = scale};
    size_t eb = cb->kv_elem_bytes;
    j.k_base = (const char *)cb->kv_mem + (size_t)layer * 2 * cb->kv_layer_elems * eb;
    j.v_base = j.k_base + cb->kv_layer_elems * eb;
    j.max_ctx = (size_t)batch->max_blocks * cb->kv.block_size;
    size_t group = (size_t)(n_heads / cb->kv.n_kv_heads);
    j.scores = cpu_backend_scratch(cb, (size_t)cb->n_threads * group * j.max_ctx * sizeof(float));
    if (!j.scores) return ERR_NOMEM;
    cpu_pool_run(cb->pool, attn_task, &j);
    return 0;
}
