/* Matrix multiplication y (n_tokens, rows) = x (n_tokens, cols) @ W^T for every weight type.
 * Work is split over output rows in chunks of whole row tiles that threads claim dynamically; a chunk
 * streams its rows once per token block. Two kernel families:
 *  - float: F32 rows are used in place; F16/BF16 (and Q8_K) rows are converted into a per-thread
 *    scratch tile of CPU_GEMM_ROWS rows, once per token block, and reused across every token of it;
 *  - integer: every quantized type against activations quantized once per call to Q8_0 or Q8_K
 *    (cpu_act_of: ggml's pairing), from the weight's packed copy (groups of CPU_QPACK_ROWS
 *    interleaved rows) when the level has packed kernels for its type.
 * Tokens are processed in blocks of MM_TOKEN_BLOCK so the activations stay in L2 while the weights
 * stream past. A group of weights sharing one input (Q/K/V, gate/up) is one job: the activations are
 * quantized once, and threads claim chunks across all the weights' rows, so the step has two thread
 * hand-offs instead of two per weight. */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define MM_TOKEN_BLOCK 64
/* Integer path: 16 tokens of int8 activations (12-32 KiB) stay in L1 while a row tile passes. */
#define MM_TOKEN_BLOCK_INT 16
/* About this many chunks per thread: enough to absorb a late thread, few enough to stream rows. */
#define MM_CHUNKS_PER_THREAD 4
/* Integer path: bytes at the start of a claimed chunk requested before its first tile. */
#define MM_CHUNK_WARM_BYTES 8192
/* Tokens per claimed activation-quantization chunk. */
#define MM_QUANT_TOKENS 8
/* Up to this many tokens, F16 weights are widened inside the GEMM kernel (decode: one pass over the
 * weights); beyond it a converted tile is reused across the token block. */
#define MM_F16_DIRECT_TOKENS 8

/* Weights one job multiplies with the same input, at most. */
#define MM_MAX_PARTS 4

/* One weight of a job and its output. */
struct mm_part {
    const struct backend_weight *w;
    float *y;
    int64_t chunk_rows; /* rows per claimed chunk, a multiple of the weight's row tile */
    /* the job's chunks from first_chunk up to the next part's are this part's */
    int64_t first_chunk;
};

struct mm_job {
    struct cpu_backend *cb;
    const float *x;
    int64_t cols; /* of x and of every part's weight */
    int n_tokens;
    struct mm_part parts[MM_MAX_PARTS];
    int n_parts;
    int64_t n_chunks;
    enum cpu_act act;     /* of every part's weight type */
    struct cpu_act_q8 xq; /* integer path only */
    float *tiles;         /* float path: (n_threads, CPU_GEMM_ROWS, cols) conversion tiles */
    atomic_llong next_chunk;
    atomic_llong next_tokens; /* quantization claims */
};

static bool mm_is_integer(enum quant_type t)
{
    return cpu_act_of(t) != CPU_ACT_FLOAT;
}

/* Claims token rows in chunks of MM_QUANT_TOKENS (see cpu_pool.h: work is never tied to ith). */
static void mm_quantize_task(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    int cols = (int)j->cols;
    (void)ith;
    (void)nth;
    for (;;) {
        int64_t t0 =
            atomic_fetch_add_explicit(&j->next_tokens, MM_QUANT_TOKENS, memory_order_relaxed);
        if (t0 >= j->n_tokens) break;
        int64_t t1 = t0 + MM_QUANT_TOKENS < j->n_tokens ? t0 + MM_QUANT_TOKENS : j->n_tokens;
        for (int64_t t = t0; t < t1; t++) {
            const float *x = j->x + t * cols;
            int8_t *qs = j->xq.qs + t * cols;
            float *d = j->xq.d + t * j->xq.nb;
            if (j->act == CPU_ACT_Q8_K)
                j->cb->kern.quantize_q8_k(x, cols, qs, d, j->xq.sum16 + t * (cols / 16),
                                          j->xq.sum32 + t * (cols / 32));
            else
                j->cb->kern.quantize_q8_0(x, cols, qs, d, j->xq.sum + t * j->xq.nb,
                                          j->xq.s + t * j->xq.nb);
        }
    }
}

/* Converts nr rows starting at `row` to floats in `tile`, or points into the weight when F32. */
static const float *mm_rows_f32(const struct mm_job *j, const struct backend_weight *w, int64_t row,
                                int nr, float *tile)
{
    const char *src = (const char *)w->desc.data + (size_t)row * w->row_bytes;
    if (w->desc.type == QUANT_F32) return (const float *)src;
    int64_t cols = w->desc.cols;
    for (int r = 0; r < nr; r++) {
        const void *s = src + (size_t)r * w->row_bytes;
        j->cb->kern.dequant_row(w->desc.type, s, tile + r * cols, cols);
    }
    return tile;
}

/* Requests the first bytes of a claimed chunk: the kernels prefetch a few KiB ahead of the tile they
 * work on, which is not yet under way at a chunk's start (dynamic claiming puts another thread's
 * rows before it). */
static void mm_warm(const char *p, size_t n)
{
    n = n < MM_CHUNK_WARM_BYTES ? n : MM_CHUNK_WARM_BYTES;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* Packed rows [r0, r1) (r0 a multiple of CPU_QPACK_ROWS) of part `pt` against every token. */
static void mm_gemm_packed(const struct mm_job *j, const struct mm_part *pt, int64_t r0, int64_t r1)
{
    const struct backend_weight *w = pt->w;
    const struct cpu_kernels *k = &j->cb->kern;
    cpu_gemm_qpack_fn gq = k->gemm_qpack[w->desc.type];
    int64_t rows = w->desc.rows, g0 = r0 / CPU_QPACK_ROWS;
    size_t gb = w->packed_group_bytes;
    const char *base = (const char *)w->packed;
    mm_warm(base + (size_t)g0 * gb, (size_t)((r1 - r0 + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS) * gb);
    for (int t0 = 0; t0 < j->n_tokens; t0 += MM_TOKEN_BLOCK_INT) {
        int nt = j->n_tokens - t0 < MM_TOKEN_BLOCK_INT ? j->n_tokens - t0 : MM_TOKEN_BLOCK_INT;
        gq(base + (size_t)g0 * gb, gb, (int)(r1 - r0), &j->xq, t0, nt,
           pt->y + (size_t)t0 * rows + r0, (size_t)rows, t0 == 0);
    }
}

/* Rows [r0, r1) of part `pt` against every token: token blocks outside, row tiles inside. */
static void mm_gemm_rows(const struct mm_job *j, const struct mm_part *pt, int64_t r0, int64_t r1,
                         float *tile)
{
    const struct backend_weight *w = pt->w;
    const struct cpu_kernels *k = &j->cb->kern;
    int64_t rows = w->desc.rows, cols = w->desc.cols;
    cpu_gemm_q_fn gq = k->gemm_q[w->desc.type];
    int tb = mm_is_integer(w->desc.type) ? MM_TOKEN_BLOCK_INT : MM_TOKEN_BLOCK;

    if (w->packed) {
        mm_gemm_packed(j, pt, r0, r1);
        return;
    }
    if (mm_is_integer(w->desc.type))
        mm_warm((const char *)w->desc.data + (size_t)r0 * w->row_bytes,
                (size_t)(r1 - r0) * w->row_bytes);
    for (int t0 = 0; t0 < j->n_tokens; t0 += tb) {
        int nt = j->n_tokens - t0 < tb ? j->n_tokens - t0 : tb;
        for (int64_t r = r0; r < r1; r += CPU_GEMM_ROWS) {
            int nr = r1 - r < CPU_GEMM_ROWS ? (int)(r1 - r) : CPU_GEMM_ROWS;
            float *y = pt->y + (size_t)t0 * rows + r;
            if (mm_is_integer(w->desc.type)) {
                const char *wr = (const char *)w->desc.data + (size_t)r * w->row_bytes;
                gq(wr, w->row_bytes, nr, &j->xq, t0, nt, y, (size_t)rows);
            } else if (w->desc.type == QUANT_F16 && j->n_tokens <= MM_F16_DIRECT_TOKENS) {
                const uint16_t *wr =
                    (const uint16_t *)((const char *)w->desc.data + (size_t)r * w->row_bytes);
                k->gemm_f16(wr, (size_t)cols, nr, j->x + (size_t)t0 * cols, (size_t)cols, nt,
                            (int)cols, y, (size_t)rows);
            } else {
                const float *wf = mm_rows_f32(j, w, r, nr, tile);
                k->gemm_f32(wf, (size_t)cols, nr, j->x + (size_t)t0 * cols, (size_t)cols, nt,
                            (int)cols, y, (size_t)rows);
            }
        }
    }
}

/* Threads claim row chunks from a shared counter, so a thread that starts late (the machine is
 * shared, a worker may be descheduled) costs one chunk, not a fixed share. Chunks are whole row
 * tiles, and each output's arithmetic does not depend on its tile, so results are the same for any
 * thread count, claiming order or grouping of weights. */
static void mm_gemm_task(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    (void)nth;
    float *tile = j->tiles ? j->tiles + (size_t)ith * CPU_GEMM_ROWS * j->cols : NULL;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed);
        if (c >= j->n_chunks) break;
        const struct mm_part *pt = &j->parts[0];
        while (pt + 1 < j->parts + j->n_parts && c >= pt[1].first_chunk) pt++;
        int64_t rows = pt->w->desc.rows, r0 = (c - pt->first_chunk) * pt->chunk_rows;
        mm_gemm_rows(j, pt, r0, r0 + pt->chunk_rows < rows ? r0 + pt->chunk_rows : rows, tile);
    }
}

static size_t mm_align(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Splits part `pt` into chunks of whole row tiles, about MM_CHUNKS_PER_THREAD per thread. */
static int64_t mm_part_chunks(const struct cpu_backend *cb, struct mm_part *pt)
{
    const struct backend_weight *w = pt->w;
    int64_t per = (int64_t)cpu_backend_threads(cb) * MM_CHUNKS_PER_THREAD;
    int64_t tile_rows = w->packed ? CPU_QPACK_ROWS : CPU_GEMM_ROWS;
    pt->chunk_rows = (w->desc.rows + per - 1) / per;
    pt->chunk_rows = (pt->chunk_rows + tile_rows - 1) / tile_rows * tile_rows;
    /* at least four row tiles per claim (packed claims are whole groups by the rounding above) */
    if (pt->chunk_rows < 4 * CPU_GEMM_ROWS) pt->chunk_rows = 4 * CPU_GEMM_ROWS;
    return (w->desc.rows + pt->chunk_rows - 1) / pt->chunk_rows;
}

/* One job for n weights that all take the float path or all the integer one with one activation
 * format. */
static int mm_job_run(struct cpu_backend *cb, const struct backend_weight *const *w, int n,
                      const float *x, float *const *y, int n_tokens)
{
    struct mm_job j = {.cb = cb, .x = x, .cols = w[0]->desc.cols, .n_tokens = n_tokens};
    size_t cols = (size_t)j.cols;
    char *s;
    bool integer = mm_is_integer(w[0]->desc.type), floats = false;
    for (int i = 0; i < n; i++) floats = floats || w[i]->desc.type != QUANT_F32;
    j.act = cpu_act_of(w[0]->desc.type);
    if (integer) {
        /* Q8_0: per 32 a scale, an int32 sum and Q8_1's s; Q8_K: per 256 a scale, int16 sums per 16
         * and 32 */
        bool k = j.act == CPU_ACT_Q8_K;
        size_t nt = (size_t)n_tokens, nb = cols / (k ? QUANT_QK_K : QUANT_QK8_0);
        size_t b_qs = mm_align(nt * cols), b_d = mm_align(nt * nb * sizeof(float));
        size_t b_s = mm_align(nt * (k ? cols / 16 * sizeof(int16_t) : nb * sizeof(int32_t)));
        size_t b_s32 = mm_align(nt * (k ? cols / 32 * sizeof(int16_t) : nb * sizeof(float)));
        s = cpu_backend_scratch(cb, b_qs + b_d + b_s + b_s32);
        if (!s) return ERR_NOMEM;
        j.xq = (struct cpu_act_q8){.qs = (int8_t *)s, .d = (float *)(s + b_qs), .nb = (int)nb};
        if (k) {
            j.xq.sum16 = (int16_t *)(s + b_qs + b_d);
            j.xq.sum32 = (int16_t *)(s + b_qs + b_d + b_s);
        } else {
            j.xq.sum = (int32_t *)(s + b_qs + b_d);
            j.xq.s = (float *)(s + b_qs + b_d + b_s);
        }
        atomic_init(&j.next_tokens, 0);
        cpu_backend_run(cb, mm_quantize_task, &j);
    } else if (floats) {
        s = cpu_backend_scratch(cb, (size_t)cpu_backend_threads(cb) * CPU_GEMM_ROWS * cols *
                                        sizeof(float));
        if (!s) return ERR_NOMEM;
        j.tiles = (float *)s;
    }
    for (int i = 0; i < n; i++) {
        struct mm_part *pt = &j.parts[j.n_parts++];
        *pt = (struct mm_part){.w = w[i], .y = y[i], .first_chunk = j.n_chunks};
        j.n_chunks += mm_part_chunks(cb, pt);
    }
    atomic_init(&j.next_chunk, 0);
    cpu_backend_run(cb, mm_gemm_task, &j);
    return 0;
}

int cpu_matmul_group_run(struct backend *b, const struct backend_weight *const *w, int n,
                         const float *x, float *const *y, int n_tokens)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!w || !y || !x || n < 1 || n_tokens < 0) return ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (!w[i] || !y[i] || w[i]->desc.cols != w[0]->desc.cols) return ERR_INVAL;
    if (n_tokens == 0) return 0;
    /* Runs of consecutive weights on the same path (float, or integer with the same activation
     * format) share a job. */
    for (int i = 0; i < n;) {
        int k = 1;
        enum cpu_act act = cpu_act_of(w[i]->desc.type);
        while (i + k < n && k < MM_MAX_PARTS && cpu_act_of(w[i + k]->desc.type) == act) k++;
        int rc = mm_job_run(cb, w + i, k, x, y + i, n_tokens);
        if (rc) return rc;
        i += k;
    }
    return 0;
}

int cpu_matmul_run(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                   int n_tokens)
{
    return cpu_matmul_group_run(b, &w, 1, x, &y, n_tokens);
}
