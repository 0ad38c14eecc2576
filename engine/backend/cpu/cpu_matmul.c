/* Matrix multiplication y (n_tokens, rows) = x (n_tokens, cols) @ W^T for every weight type.
 * Work is split over output rows in chunks of whole row tiles that threads claim dynamically; a chunk
 * streams its rows once per token block. Two kernel families:
 *  - float: F32 rows are used in place; F16/BF16/Q4_K/Q6_K rows are converted into a per-thread scratch
 *    tile of CPU_GEMM_ROWS rows, once per token block, and reused across every token of the block;
 *  - integer: Q8_0/Q4_0 weights against activations quantized to Q8_0 once per call (as ggml does),
 *    from the weight's packed copy (groups of CPU_QPACK_ROWS interleaved rows) when it has one.
 * Tokens are processed in blocks of MM_TOKEN_BLOCK so the activations stay in L2 while the weights
 * stream past. */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"

#include <stdatomic.h>
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

struct mm_job {
    struct cpu_backend *cb;
    const struct backend_weight *w;
    const float *x;
    float *y;
    int n_tokens;
    struct cpu_act_q8 xq; /* integer path only */
    float *tiles;         /* float path: (n_threads, CPU_GEMM_ROWS, cols) conversion tiles */
    int64_t chunk_rows;   /* rows per claimed chunk, a multiple of CPU_GEMM_ROWS */
    atomic_llong next_chunk;
    atomic_llong next_tokens; /* quantization claims */
};

static int mm_is_integer(enum quant_type t)
{
    return t == QUANT_Q8_0 || t == QUANT_Q4_0;
}

/* Claims token rows in chunks of MM_QUANT_TOKENS (see cpu_pool.h: work is never tied to ith). */
static void mm_quantize_task(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    int cols = (int)j->w->desc.cols;
    (void)ith;
    (void)nth;
    for (;;) {
        int64_t t0 =
            atomic_fetch_add_explicit(&j->next_tokens, MM_QUANT_TOKENS, memory_order_relaxed);
        if (t0 >= j->n_tokens) break;
        int64_t t1 = t0 + MM_QUANT_TOKENS < j->n_tokens ? t0 + MM_QUANT_TOKENS : j->n_tokens;
        for (int64_t t = t0; t < t1; t++)
            j->cb->kern.quantize_q8_0(j->x + t * cols, cols, j->xq.qs + t * cols,
                                      j->xq.d + t * j->xq.nb, j->xq.sum + t * j->xq.nb);
    }
}

/* Converts nr rows starting at `row` to floats in `tile`, or points into the weight when F32. */
static const float *mm_rows_f32(const struct mm_job *j, int64_t row, int nr, float *tile)
{
    const struct backend_weight *w = j->w;
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

/* Packed rows [r0, r1) (r0 a multiple of CPU_QPACK_ROWS) against every token. */
static void mm_gemm_packed(const struct mm_job *j, int64_t r0, int64_t r1)
{
    const struct backend_weight *w = j->w;
    const struct cpu_kernels *k = &j->cb->kern;
    cpu_gemm_qpack_fn gq = w->desc.type == QUANT_Q8_0 ? k->gemm_q8_0_packed : k->gemm_q4_0_packed;
    int64_t rows = w->desc.rows, g0 = r0 / CPU_QPACK_ROWS;
    size_t gb = w->packed_group_bytes;
    const char *base = (const char *)w->packed;
    mm_warm(base + (size_t)g0 * gb, (size_t)((r1 - r0 + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS) * gb);
    for (int t0 = 0; t0 < j->n_tokens; t0 += MM_TOKEN_BLOCK_INT) {
        int nt = j->n_tokens - t0 < MM_TOKEN_BLOCK_INT ? j->n_tokens - t0 : MM_TOKEN_BLOCK_INT;
        gq(base + (size_t)g0 * gb, gb, (int)(r1 - r0), &j->xq, t0, nt,
           j->y + (size_t)t0 * rows + r0, (size_t)rows, t0 == 0);
    }
}

/* Rows [r0, r1) against every token: token blocks outside, row tiles inside. */
static void mm_gemm_rows(const struct mm_job *j, int64_t r0, int64_t r1, float *tile)
{
    const struct backend_weight *w = j->w;
    const struct cpu_kernels *k = &j->cb->kern;
    int64_t rows = w->desc.rows, cols = w->desc.cols;
    cpu_gemm_q_fn gq = w->desc.type == QUANT_Q8_0 ? k->gemm_q8_0 : k->gemm_q4_0;
    int tb = mm_is_integer(w->desc.type) ? MM_TOKEN_BLOCK_INT : MM_TOKEN_BLOCK;

    if (w->packed) {
        mm_gemm_packed(j, r0, r1);
        return;
    }
    if (mm_is_integer(w->desc.type))
        mm_warm((const char *)w->desc.data + (size_t)r0 * w->row_bytes,
                (size_t)(r1 - r0) * w->row_bytes);
    for (int t0 = 0; t0 < j->n_tokens; t0 += tb) {
        int nt = j->n_tokens - t0 < tb ? j->n_tokens - t0 : tb;
        for (int64_t r = r0; r < r1; r += CPU_GEMM_ROWS) {
            int nr = r1 - r < CPU_GEMM_ROWS ? (int)(r1 - r) : CPU_GEMM_ROWS;
            float *y = j->y + (size_t)t0 * rows + r;
            if (mm_is_integer(w->desc.type)) {
                const char *wr = (const char *)w->desc.data + (size_t)r * w->row_bytes;
                gq(wr, w->row_bytes, nr, &j->xq, t0, nt, y, (size_t)rows);
            } else if (w->desc.type == QUANT_F16 && j->n_tokens <= MM_F16_DIRECT_TOKENS) {
                const uint16_t *wr =
                    (const uint16_t *)((const char *)w->desc.data + (size_t)r * w->row_bytes);
                k->gemm_f16(wr, (size_t)cols, nr, j->x + (size_t)t0 * cols, (size_t)cols, nt,
                            (int)cols, y, (size_t)rows);
            } else {
                const float *wf = mm_rows_f32(j, r, nr, tile);
                k->gemm_f32(wf, (size_t)cols, nr, j->x + (size_t)t0 * cols, (size_t)cols, nt,
                            (int)cols, y, (size_t)rows);
            }
        }
    }
}

/* Threads claim row chunks from a shared counter, so a thread that starts late (the machine is
 * shared, a worker may be descheduled) costs one chunk, not a fixed share. Chunks are whole row
 * tiles, and each output's arithmetic does not depend on its tile, so results are the same for any
 * thread count and any claiming order. */
static void mm_gemm_task(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    (void)nth;
    int64_t rows = j->w->desc.rows;
    float *tile = j->tiles ? j->tiles + (size_t)ith * CPU_GEMM_ROWS * j->w->desc.cols : NULL;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed);
        int64_t r0 = c * j->chunk_rows;
        if (r0 >= rows) break;
        mm_gemm_rows(j, r0, r0 + j->chunk_rows < rows ? r0 + j->chunk_rows : rows, tile);
    }
}

static size_t mm_align(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int cpu_matmul_run(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                   int n_tokens)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!w || !x || !y || n_tokens < 0) return ERR_INVAL;
    if (n_tokens == 0) return 0;
    struct mm_job j = {.cb = cb, .w = w, .x = x, .y = y, .n_tokens = n_tokens};
    size_t cols = (size_t)w->desc.cols;
    char *s;
    if (mm_is_integer(w->desc.type)) {
        size_t nb = cols / QUANT_QK8_0, nq = (size_t)n_tokens * nb;
        size_t b_qs = mm_align((size_t)n_tokens * cols), b_d = mm_align(nq * sizeof(float));
        s = cpu_backend_scratch(cb, b_qs + b_d + mm_align(nq * sizeof(int32_t)));
        if (!s) return ERR_NOMEM;
        j.xq.qs = (int8_t *)s;
        j.xq.d = (float *)(s + b_qs);
        j.xq.sum = (int32_t *)(s + b_qs + b_d);
        j.xq.nb = (int)nb;
        atomic_init(&j.next_tokens, 0);
        cpu_pool_run(cb->pool, mm_quantize_task, &j);
    } else if (w->desc.type != QUANT_F32) {
        s = cpu_backend_scratch(cb, (size_t)cb->n_threads * CPU_GEMM_ROWS * cols * sizeof(float));
        if (!s) return ERR_NOMEM;
        j.tiles = (float *)s;
    }
    int64_t per = (int64_t)cb->n_threads * MM_CHUNKS_PER_THREAD;
    int64_t tile_rows = w->packed ? CPU_QPACK_ROWS : CPU_GEMM_ROWS;
    j.chunk_rows = (w->desc.rows + per - 1) / per;
    j.chunk_rows = (j.chunk_rows + tile_rows - 1) / tile_rows * tile_rows;
    /* at least four row tiles per claim (packed claims are whole groups by the rounding above) */
    if (j.chunk_rows < 4 * CPU_GEMM_ROWS) j.chunk_rows = 4 * CPU_GEMM_ROWS;
    atomic_init(&j.next_chunk, 0);
    cpu_pool_run(cb->pool, mm_gemm_task, &j);
    return 0;
}
