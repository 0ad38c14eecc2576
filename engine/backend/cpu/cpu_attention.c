/* Paged attention and KV stores over the CPU cache. Each token attends to positions 0..pos of its
 * sequence, found block by block through the sequence's block table. A work item is up to 16 query
 * rows: consecutive tokens of a sequence (prefill) times the query heads of one KV head (GQA), so
 * every K and V row loaded serves all of them; or, for a lone token (decode), the query heads of
 * several consecutive KV heads, so each block's K and V are read as one contiguous stretch and the
 * softmax fills its 16 lanes. Scores are computed for 16 rows (queries transposed) or a few rows
 * (dot products) with the same sums either way, so a row's result does not depend on its item;
 * softmax subtracts each row's maximum and masks positions after the row's own (causal). Threads
 * claim items from a shared counter because causal contexts make later tokens more expensive. K/V
 * are F32, F16 or Q8_0 (read at their exact dequantized values). F16 caches with short heads follow
 * llama.cpp's CPU arithmetic instead (attn_item_run_ggml), so cached values round to the same f16s
 * as there. There is no software prefetch: the hardware prefetchers follow each block's contiguous
 * stretch, and requesting whole blocks ahead (as this file once did) made 16-way decode serving 9%
 * slower (engine/BENCHMARKS.md, session 6). */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* F16 caches with heads shorter than this take attn_item_run_ggml: there ggml's f16 dot product is
 * its scalar loop (its SIMD loop covers multiples of 64), which that function reproduces, and the
 * scalar cost is small. Longer heads keep the vector kernels. */
#define ATTN_GGML_MAX_HD 64

/* Whether items take attn_item_run_ggml. */
static bool cpu_attn_ggml(const struct cpu_backend *cb)
{
    return cb->kv.type == QUANT_F16 && cb->kv.head_dim < ATTN_GGML_MAX_HD;
}

/* One work item: up to CPU_ATTN_ROWS query rows, nt consecutive batch tokens of one sequence times
 * nh KV heads h0.. times their query heads g0..g0+ng-1; nt > 1 only with nh == 1. Row r is token
 * t0 + r / (nh ng), KV head h0 + (r / ng) % nh, query head g0 + r % ng of that KV head's group. */
struct attn_item {
    int t0, nt;
    int h0, nh;
    int g0, ng;
};

struct attn_job {
    struct cpu_backend *cb;
    const struct backend_batch *batch;
    const float *q;
    float *out;
    int n_heads;
    float scale;
    float softcap; /* > 0: scores soft-capped before the scale (backend_attn_params) */
    int window;    /* > 0: sliding window */
    const char *k_base, *v_base; /* this layer's K and V */
    const struct attn_item *items;
    int group; /* query heads per KV head */
    int n_items;
    atomic_int next_item; /* items are claimed dynamically: their costs differ a lot */
    float *scratch;       /* per thread: thread_floats floats */
    size_t max_ctx;       /* positions a token can attend to: max_blocks * block_size */
    size_t thread_floats;
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

/* One KV head's row of head_dim floats into the cache's element type: copied, rounded to f16, or
 * quantized into ggml Q8_0 blocks (scale as f16, then 32 quants) by the Q8_0 activation quantizer,
 * which matches ggml-cpu's (set_rows runs its x86 quantize_row_q8_0) bit for bit. */
static void kv_store_row(const struct cpu_backend *cb, const float *x, char *dst)
{
    int hd = cb->kv.head_dim;
    if (cb->kv.type == QUANT_F32) {
        memcpy(dst, x, (size_t)hd * sizeof(float));
    } else if (cb->kv.type == QUANT_F16) {
        cb->kern.f32_to_f16(x, (uint16_t *)dst, hd);
    } else {
        for (int b = 0; b < hd / QUANT_QK8_0; b++) {
            char *blk = dst + (size_t)b * (2 + QUANT_QK8_0); /* f16 scale, then the quants */
            float d, s;
            int32_t sum;
            cb->kern.quantize_q8_0(x + b * QUANT_QK8_0, QUANT_QK8_0, (int8_t *)(blk + 2), &d, &sum,
                                   &s);
            uint16_t dh = quant_f32_to_f16(d); /* d is already an f16 value */
            memcpy(blk, &dh, sizeof(dh));
        }
    }
}

int cpu_attention_kv_store(struct backend *b, int layer, const float *k, const float *v,
                           const struct backend_batch *batch)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !k || !v || !batch) return ERR_INVAL;
    if (batch->n_tokens > 0 && !batch->slots) return ERR_INVAL;
    int64_t n_slots = (int64_t)cb->kv.n_blocks * cb->kv.block_size;
    for (int t = 0; t < batch->n_tokens; t++)
        if (batch->slots[t] < 0 || batch->slots[t] >= n_slots) return ERR_RANGE;

    size_t hd = (size_t)cb->kv.head_dim, row = (size_t)cb->kv.n_kv_heads * hd;
    char *kl = (char *)cb->kv_mem + (size_t)layer * 2 * cb->kv_layer_bytes;
    char *vl = kl + cb->kv_layer_bytes;
    for (int t = 0; t < batch->n_tokens; t++) {
        for (int h = 0; h < cb->kv.n_kv_heads; h++) {
            size_t off = cpu_kv_offset(cb, batch->slots[t], h);
            const float *ks = k + (size_t)t * row + h * hd, *vs = v + (size_t)t * row + h * hd;
            kv_store_row(cb, ks, kl + off);
            kv_store_row(cb, vs, vl + off);
        }
    }
    return 0;
}

/* Pointer to row `p` (a position of the item's sequence) of this layer's K or V for KV head h. */
static const char *attn_row(const struct attn_job *j, const char *base, const int32_t *tab, int p,
                            int h)
{
    const struct cpu_backend *cb = j->cb;
    int bs = cb->kv.block_size;
    int64_t slot = (int64_t)tab[p / bs] * bs + p % bs;
    return base + cpu_kv_offset(cb, slot, h);
}

/* Batch token and query head of row r of item `it`. */
static void attn_row_of(const struct attn_job *j, const struct attn_item *it, int r, int *t,
                        int *head)
{
    *t = it->t0 + r / (it->nh * it->ng);
    *head = (it->h0 + (r / it->ng) % it->nh) * j->group + it->g0 + r % it->ng;
}

/* The first position a token at `pos` attends to: 0, or the start of its sliding window. */
static int attn_first_pos(const struct attn_job *j, int pos)
{
    return j->window > 0 && pos >= j->window ? pos - j->window + 1 : 0;
}

/* Scores (is_v = 0) or P @ V accumulated (is_v = 1) over the positions [0, np) for one KV head's
 * nq rows: s and vec point at the head's first row (its lane in s; its queries or outputs in vec). */
static void attn_head_run(const struct attn_job *j, const char *row, int run, float *conv,
                          float *sp, float *vec, int nq, int is_v)
{
    const struct cpu_backend *cb = j->cb;
    const struct cpu_kernels *kern = &cb->kern;
    int hd = cb->kv.head_dim;
    const float *rows = (const float *)row; /* the run's rows are hd apart */
    size_t ld = (size_t)hd;
    if (cb->kv.type == QUANT_F16 && nq <= ATTN_DOT_MAX_ROWS && kern->attn_pv_f16) {
        /* few rows: widen in registers instead of a conversion pass (same results) */
        const uint16_t *h16 = (const uint16_t *)row;
        if (is_v)
            kern->attn_pv_f16(sp, nq, h16, ld, run, vec, hd);
        else
            kern->attn_scores_dot_f16(vec, nq, hd, h16, ld, run, sp);
        return;
    }
    if (cb->kv.type == QUANT_Q8_0 && nq <= ATTN_DOT_MAX_ROWS && kern->attn_pv_q8) {
        /* few rows: dequantize in registers (the same exact values as the conversion pass) */
        if (is_v)
            kern->attn_pv_q8(sp, nq, row, cb->kv_head_bytes, run, vec, hd);
        else
            kern->attn_scores_dot_q8(vec, nq, hd, row, cb->kv_head_bytes, run, sp);
        return;
    }
    if (cb->kv.type == QUANT_F16) {
        kern->f16_to_f32((const uint16_t *)row, conv, (int64_t)run * hd);
        rows = conv;
    } else if (cb->kv.type == QUANT_Q8_0) {
        for (int p = 0; p < run; p++)
            kern->dequant_row(QUANT_Q8_0, row + (size_t)p * cb->kv_head_bytes, conv + p * ld, hd);
        rows = conv;
    }
    if (is_v)
        kern->attn_pv(sp, nq, rows, ld, run, vec, hd); /* vec: the (nq, hd) output */
    else if (nq <= ATTN_DOT_MAX_ROWS)
        kern->attn_scores_dot(vec, nq, hd, rows, ld, run, sp); /* vec: (nq, hd) queries */
    else
        kern->attn_scores(vec, hd, rows, ld, run, sp); /* vec: (hd, ROWS) queries */
}

/* Scores of an item with one row per KV head for the run at p0, all heads position by position
 * together, where the level has a kernel for the cache type; false otherwise. */
static bool attn_heads_together(const struct attn_job *j, const struct attn_item *it, int run,
                                int p0, const char *base, const int32_t *tab, const float *q,
                                float *s)
{
    const struct cpu_backend *cb = j->cb;
    const struct cpu_kernels *kern = &cb->kern;
    int bs = cb->kv.block_size, hd = cb->kv.head_dim;
    const char *k0 = attn_row(j, base, tab, p0, it->h0);
    float *sp = s + (size_t)p0 * CPU_ATTN_ROWS;
    if (cb->kv.type == QUANT_F16 && kern->attn_scores_heads_f16) {
        kern->attn_scores_heads_f16(q, it->nh, hd, (const uint16_t *)k0, (size_t)bs * hd,
                                    (size_t)hd, run, sp);
        return true;
    }
    if (cb->kv.type == QUANT_Q8_0 && kern->attn_scores_heads_q8) {
        kern->attn_scores_heads_q8(q, it->nh, hd, k0, (size_t)bs * cb->kv_head_bytes,
                                   cb->kv_head_bytes, run, sp);
        return true;
    }
    return false;
}

/* Computes scores (is_v = 0) or accumulates P @ V (is_v = 1) over the positions [lo, np), in runs
 * that are contiguous in the cache (within one block), KV head by KV head of the item (kq rows
 * each), converting F16 or Q8_0 rows to floats in `conv` where no kernel reads them directly. */
static void attn_runs(const struct attn_job *j, const char *base, const int32_t *tab, int lo,
                      int np, const struct attn_item *it, int kq, float *conv, float *s, float *vec,
                      int is_v)
{
    const struct cpu_backend *cb = j->cb;
    int bs = cb->kv.block_size, hd = cb->kv.head_dim;
    for (int p0 = lo; p0 < np;) {
        int run = bs - p0 % bs;
        if (run > np - p0) run = np - p0;
        if (!is_v && kq == 1 && it->nh > 1 &&
            attn_heads_together(j, it, run, p0, base, tab, vec, s)) {
            p0 += run;
            continue;
        }
        for (int hi = 0; hi < it->nh; hi++) {
            const char *row = attn_row(j, base, tab, p0, it->h0 + hi);
            float *sp = s + (size_t)p0 * CPU_ATTN_ROWS + hi * kq;
            attn_head_run(j, row, run, conv, sp, vec + (size_t)hi * kq * hd, kq, is_v);
        }
        p0 += run;
    }
}

/* One item: scaled queries transposed into qt, scores for every position up to the latest one in
 * the item (from the start of its sliding window: every row of an item with a window start shares
 * it, attn_items_build), soft-capped where asked, a masked softmax per row (each row stops at its
 * own position), then P @ V. */
static void attn_item_run(const struct attn_job *j, const struct attn_item *it, float *scratch)
{
    const struct cpu_backend *cb = j->cb;
    const struct backend_batch *bt = j->batch;
    int hd = cb->kv.head_dim;
    float *qt = scratch;                              /* (hd, ROWS) */
    float *o = qt + (size_t)hd * CPU_ATTN_ROWS;       /* (ROWS, hd) */
    float *conv = o + (size_t)hd * CPU_ATTN_ROWS;     /* (block_size, hd) */
    float *s = conv + (size_t)cb->kv.block_size * hd; /* (max_ctx, ROWS), then 2 hd for q */
    int32_t lim[CPU_ATTN_ROWS] = {0};
    float inv[CPU_ATTN_ROWS];
    int nq = it->nt * it->nh * it->ng, np = 0;
    int kq = it->nt * it->ng; /* rows per KV head */

    int dot = kq <= ATTN_DOT_MAX_ROWS, f16 = cb->kv.type == QUANT_F16;
    /* with soft-capping the scale comes after the cap (llama.cpp: softmax(scale * cap(q.k))) */
    float qscale = j->softcap > 0.0f ? 1.0f : j->scale;
    int lo = attn_first_pos(j, bt->pos[it->t0]);
    if (!dot) memset(qt, 0, sizeof(float) * (size_t)hd * CPU_ATTN_ROWS);
    memset(o, 0, sizeof(float) * (size_t)hd * CPU_ATTN_ROWS);
    for (int r = 0; r < nq; r++) {
        int t, head;
        attn_row_of(j, it, r, &t, &head);
        const float *qr = j->q + ((size_t)t * j->n_heads + head) * hd;
        if (f16) {
            /* q rounded to f16 as llama.cpp does (see attention in backend.h) */
            float *rounded = s + j->max_ctx * CPU_ATTN_ROWS; /* (hd), then hd halves */
            uint16_t *h16 = (uint16_t *)(rounded + hd);
            cb->kern.f32_to_f16(qr, h16, hd);
            cb->kern.f16_to_f32(h16, rounded, hd);
            qr = rounded;
        }
        for (int i = 0; i < hd; i++) {
            float v = qr[i];
            if (dot)
                qt[r * hd + i] = v * qscale; /* row-major for the dot kernel */
            else
                qt[i * CPU_ATTN_ROWS + r] = v * qscale;
        }
        lim[r] = bt->pos[t] + 1;
        np = lim[r] > np ? lim[r] : np;
    }
    const int32_t *tab = bt->block_tables + (size_t)bt->seq[it->t0] * bt->max_blocks;
    attn_runs(j, j->k_base, tab, lo, np, it, kq, conv, s, qt, 0);
    if (j->softcap > 0.0f) {
        float cap = j->softcap, inv_cap = 1.0f / cap;
        for (int r = 0; r < nq; r++)
            for (int p = lo; p < lim[r]; p++) {
                float *v = s + (size_t)p * CPU_ATTN_ROWS + r;
                *v = tanhf(*v * inv_cap) * cap * j->scale;
            }
    }
    /* the softmax sees positions lo.. only (lo 0 without a window) */
    float *sl = s + (size_t)lo * CPU_ATTN_ROWS;
    int32_t liml[CPU_ATTN_ROWS];
    for (int r = 0; r < CPU_ATTN_ROWS; r++) liml[r] = lim[r] - lo;
    cb->kern.attn_softmax(sl, np - lo, liml, inv);
    if (f16) {
        /* llama.cpp multiplies F16 K/V by F16 copies of q and of the normalized probabilities */
        cb->kern.attn_probs_f16(sl, np - lo, inv);
        for (int r = 0; r < CPU_ATTN_ROWS; r++) inv[r] = 1.0f;
    }
    attn_runs(j, j->v_base, tab, lo, np, it, kq, conv, s, o, 1);
    for (int r = 0; r < nq; r++) {
        int t, head;
        attn_row_of(j, it, r, &t, &head);
        float *dst = j->out + ((size_t)t * j->n_heads + head) * hd;
        for (int i = 0; i < hd; i++) dst[i] = o[r * hd + i] * inv[r];
    }
}

/* llama.cpp's CPU exp for softmax (ggml_v_expf on AVX-512, lane by lane): x = n ln2 + b with n
 * rounded by the 1.5 * 2^23 shift, exp(b) by a degree-5 polynomial, then scaled by 2^n; |n| > 192
 * saturates to 0 or infinity. fmaf is fused by definition, so this matches the vector form bit for
 * bit. */
float cpu_ggml_expf(float x)
{
    const float shift = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, shift);
    float n = z - shift;
    if (isnan(n)) return n;
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

/* Sum of 16 lanes in the order of _mm512_reduce_add_ps: halves, quarters, then pairs. */
float cpu_ggml_reduce16(const float *v)
{
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* x (n) rounded to f16 and back in place, through `tmp` (n halves). */
static void attn_f16_round(const struct cpu_kernels *kern, float *x, uint16_t *tmp, int n)
{
    kern->f32_to_f16(x, tmp, n);
    kern->f16_to_f32(tmp, x, n);
}

/* One item with an F16 cache, in the arithmetic of llama.cpp's CPU path (non-flash attention):
 * - scores: q rounded to f16, q.k summed in double over exact f16 products, rounded to float, then
 *   multiplied by the scale;
 * - softmax: exp as cpu_ggml_expf over 16-position chunks from position 0, each chunk summed as one
 *   vector reduction and accumulated in double, probabilities scaled by (float)(1 / sum) and rounded
 *   to f16 (kernel ggml_exp_sum);
 * - P @ V: per output element, 16 lanes (position p on lane p % 16) accumulate fused products chunk
 *   by chunk, then one vector reduction (the tinyBLAS kernel ggml uses when the context is a multiple
 *   of 16, which llama.cpp's padding of the KV length to 32 guarantees; kernel ggml_pv).
 * Positions after a row's own contribute exact zeros there, so they are skipped here. Every row's
 * numbers are computed on their own (results do not depend on the batch); the item only shares the
 * work of widening each block's K and V rows to floats among its rows. */
static void attn_item_run_ggml(const struct attn_job *j, const struct attn_item *it, float *scratch)
{
    const struct cpu_backend *cb = j->cb;
    const struct cpu_kernels *kern = &cb->kern;
    const struct backend_batch *bt = j->batch;
    int hd = cb->kv.head_dim, bs = cb->kv.block_size;
    float *qh = scratch;                                 /* (ROWS, hd) queries rounded to f16 */
    float *acc = qh + (size_t)hd * CPU_ATTN_ROWS;        /* (ROWS, 16, hd) P @ V lanes */
    float *conv = acc + (size_t)hd * 16 * CPU_ATTN_ROWS; /* (block_size, hd) widened K or V */
    float *kt = conv + (size_t)bs * hd;                  /* (hd, block_size) K transposed */
    float *pr = kt + (size_t)bs * hd;                    /* (ROWS, max_ctx) scores, probabilities */
    uint16_t *h16 = (uint16_t *)conv;                    /* halves while conv is free */
    const int32_t *tab = bt->block_tables + (size_t)bt->seq[it->t0] * bt->max_blocks;
    int nq = it->nt * it->nh * it->ng, lo[CPU_ATTN_ROWS], np[CPU_ATTN_ROWS], kvh[CPU_ATTN_ROWS];
    int p_lo = INT32_MAX, p_hi = 0;
    float inv_cap = j->softcap > 0.0f ? 1.0f / j->softcap : 0.0f;

    for (int r = 0; r < nq; r++) {
        int t, head;
        attn_row_of(j, it, r, &t, &head);
        kvh[r] = head / j->group;
        np[r] = bt->pos[t] + 1;
        lo[r] = attn_first_pos(j, bt->pos[t]);
        p_lo = lo[r] < p_lo ? lo[r] : p_lo;
        p_hi = np[r] > p_hi ? np[r] : p_hi;
        memcpy(qh + (size_t)r * hd, j->q + ((size_t)t * j->n_heads + head) * hd,
               (size_t)hd * sizeof(float));
        attn_f16_round(kern, qh + (size_t)r * hd, h16, hd);
    }

    /* scores, block by block: the block's K rows widened once for all the item's rows */
    for (int hi = 0; hi < it->nh; hi++) {
        int h = it->h0 + hi;
        for (int p0 = p_lo; p0 < p_hi;) {
            int run = bs - p0 % bs;
            if (run > p_hi - p0) run = p_hi - p0;
            kern->f16_to_f32((const uint16_t *)attn_row(j, j->k_base, tab, p0, h), conv,
                             (int64_t)run * hd);
            for (int p = 0; p < run; p++)
                for (int i = 0; i < hd; i++) kt[(size_t)i * bs + p] = conv[(size_t)p * hd + i];
            for (int r = 0; r < nq; r++) {
                if (kvh[r] != h) continue;
                float *pp = pr + (size_t)r * j->max_ctx;
                int a = lo[r] > p0 ? lo[r] : p0, e = np[r] < p0 + run ? np[r] : p0 + run;
                if (a >= e) continue;
                kern->ggml_scores(qh + (size_t)r * hd, hd, kt + (a - p0), (size_t)bs, e - a,
                                  pp + a);
                for (int p = a; p < e; p++) {
                    float sc = pp[p];
                    if (j->softcap > 0.0f) sc = tanhf(sc * inv_cap) * j->softcap;
                    pp[p] = sc * j->scale;
                }
            }
            p0 += run;
        }
    }

    /* softmax row by row */
    for (int r = 0; r < nq; r++) {
        float *pp = pr + (size_t)r * j->max_ctx, mx = -INFINITY;
        for (int p = lo[r]; p < np[r]; p++) mx = pp[p] > mx ? pp[p] : mx;
        float inv = (float)(1.0 / kern->ggml_exp_sum(pp, lo[r], np[r], mx));
        for (int p = lo[r]; p < np[r]; p++) pp[p] *= inv;
        for (int p = lo[r]; p < np[r]; p += bs * hd) {
            int n = np[r] - p < bs * hd ? np[r] - p : bs * hd; /* conv holds 2 bs hd halves */
            attn_f16_round(kern, pp + p, h16, n);
        }
    }

    /* P @ V, block by block as the scores */
    memset(acc, 0, sizeof(float) * (size_t)nq * 16 * hd);
    for (int hi = 0; hi < it->nh; hi++) {
        int h = it->h0 + hi;
        for (int p0 = p_lo; p0 < p_hi;) {
            int run = bs - p0 % bs;
            if (run > p_hi - p0) run = p_hi - p0;
            kern->f16_to_f32((const uint16_t *)attn_row(j, j->v_base, tab, p0, h), conv,
                             (int64_t)run * hd);
            for (int r = 0; r < nq; r++) {
                if (kvh[r] != h) continue;
                int a = lo[r] > p0 ? lo[r] : p0, e = np[r] < p0 + run ? np[r] : p0 + run;
                if (a < e)
                    kern->ggml_pv(pr + (size_t)r * j->max_ctx + a, a, e - a,
                                  conv + (size_t)(a - p0) * hd, hd, acc + (size_t)r * 16 * hd);
            }
            p0 += run;
        }
    }
    for (int r = 0; r < nq; r++) {
        int t, head;
        attn_row_of(j, it, r, &t, &head);
        float *dst = j->out + ((size_t)t * j->n_heads + head) * hd;
        const float *a = acc + (size_t)r * 16 * hd;
        for (int i = 0; i < hd; i++) {
            float lane[16];
            for (int l = 0; l < 16; l++) lane[l] = a[(size_t)l * hd + i];
            dst[i] = cpu_ggml_reduce16(lane);
        }
    }
}

static void attn_task(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    float *scratch = j->scratch + (size_t)ith * j->thread_floats;
    (void)nth;
    for (;;) {
        int i = atomic_fetch_add_explicit(&j->next_item, 1, memory_order_relaxed);
        if (i >= j->n_items) break;
        if (cpu_attn_ggml(j->cb))
            attn_item_run_ggml(j, &j->items[i], scratch);
        else
            attn_item_run(j, &j->items[i], scratch);
    }
}

/* KV heads per item for lone tokens: as many as fill CPU_ATTN_ROWS rows, fewer when the batch would
 * then give each thread fewer than 4 items to balance (single-sequence decode). */
static int attn_heads_per_item(int n_tokens, int n_kv, int group, int n_threads)
{
    if (group > ATTN_DOT_MAX_ROWS) return 1; /* one KV head's rows take the transposed kernel */
    int nh = CPU_ATTN_ROWS / group, want = 4 * n_threads;
    if (nh > n_kv) nh = n_kv;
    if ((int64_t)n_tokens * ((n_kv + nh - 1) / nh) < want) {
        nh = (int)((int64_t)n_kv * n_tokens / want);
        if (nh < 1) nh = 1;
    }
    return nh;
}

/* Splits the batch into items: runs of consecutive tokens of one sequence, times slices of the query
 * heads of each KV head, at most CPU_ATTN_ROWS rows each; a lone token's items take heads_per_item
 * KV heads at once. Returns the count written to `items` (capacity
 * n_tokens * n_kv * ceil(group / ROWS)). */
static int attn_items_build(const struct attn_job *j, int n_kv, int group, int heads_per_item,
                            struct attn_item *items)
{
    const struct backend_batch *bt = j->batch;
    int ng = group < CPU_ATTN_ROWS ? group : CPU_ATTN_ROWS;
    int max_nt = CPU_ATTN_ROWS / ng, n = 0;
    for (int t0 = 0; t0 < bt->n_tokens;) {
        /* a token whose window starts after position 0 is its item's only token, so the rows of
         * an item share their first position */
        int nt = 1;
        if (attn_first_pos(j, bt->pos[t0]) == 0)
            while (nt < max_nt && t0 + nt < bt->n_tokens && bt->seq[t0 + nt] == bt->seq[t0] &&
                   attn_first_pos(j, bt->pos[t0 + nt]) == 0)
                nt++;
        int step = nt == 1 ? heads_per_item : 1;
        for (int h = 0; h < n_kv; h += step)
            for (int g0 = 0; g0 < group; g0 += ng)
                items[n++] = (struct attn_item){t0, nt,
                                                h,  n_kv - h < step ? n_kv - h : step,
                                                g0, group - g0 < ng ? group - g0 : ng};
        t0 += nt;
    }
    return n;
}

int cpu_attention_run(struct backend *b, int layer, const float *q, float *out,
                      const struct backend_batch *batch, int n_heads,
                      const struct backend_attn_params *p)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !q || !out || !batch || !p) return ERR_INVAL;
    if (!isfinite(p->scale) || !(p->softcap >= 0.0f) || !isfinite(p->softcap) || p->window < 0)
        return ERR_INVAL;
    if (n_heads <= 0 || n_heads % cb->kv.n_kv_heads != 0) return ERR_INVAL;
    int rc = attn_batch_check(cb, batch);
    if (rc != 0 || batch->n_tokens == 0) return rc;

    int n_kv = cb->kv.n_kv_heads, group = n_heads / n_kv, hd = cb->kv.head_dim;
    struct attn_job j = {.cb = cb,
                         .batch = batch,
                         .q = q,
                         .out = out,
                         .n_heads = n_heads,
                         .scale = p->scale,
                         .softcap = p->softcap,
                         .window = p->window};
    j.k_base = (const char *)cb->kv_mem + (size_t)layer * 2 * cb->kv_layer_bytes;
    j.v_base = j.k_base + cb->kv_layer_bytes;
    j.max_ctx = (size_t)batch->max_blocks * cb->kv.block_size;
    /* attn_item_run's layout, or attn_item_run_ggml's (16 lanes of P @ V per row, K transposed) */
    size_t ggml_lanes =
        cpu_attn_ggml(cb) ? (size_t)hd * 16 * CPU_ATTN_ROWS + (size_t)cb->kv.block_size * hd : 0;
    j.thread_floats = (2 * (size_t)hd * CPU_ATTN_ROWS + (size_t)cb->kv.block_size * hd +
                       j.max_ctx * CPU_ATTN_ROWS + 2 * (size_t)hd + ggml_lanes + 15) &
                      ~(size_t)15;
    size_t max_items =
        (size_t)batch->n_tokens * n_kv * ((group + CPU_ATTN_ROWS - 1) / CPU_ATTN_ROWS);
    size_t items_bytes = (max_items * sizeof(struct attn_item) + 63) & ~(size_t)63;
    int nth = cpu_backend_threads(cb);
    char *mem =
        cpu_backend_scratch(cb, items_bytes + (size_t)nth * j.thread_floats * sizeof(float));
    if (!mem) return ERR_NOMEM;
    j.group = group;
    int hpi = attn_heads_per_item(batch->n_tokens, n_kv, group, nth);
    j.n_items = attn_items_build(&j, n_kv, group, hpi, (struct attn_item *)mem);
    j.items = (const struct attn_item *)mem;
    j.scratch = (float *)(mem + items_bytes);
    atomic_init(&j.next_item, 0);
    cpu_backend_run(cb, attn_task, &j);
    return 0;
}
