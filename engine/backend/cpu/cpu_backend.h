/* Internals shared by the CPU backend's files: the backend struct, prepared weights, the KV cache,
 * and the per-ISA kernel table. Nothing outside engine/backend/cpu/ includes this header; the rest of
 * the engine sees only engine/backend/backend.h. */
#ifndef CINFER_ENGINE_BACKEND_CPU_BACKEND_H
#define CINFER_ENGINE_BACKEND_CPU_BACKEND_H

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/cpu/cpu_memory.h"
#include "engine/backend/cpu/cpu_pool.h"

#include <stddef.h>
#include <stdint.h>

/* Quantized activations for the integer dot products, in the format each weight type pairs with (as
 * ggml's vec_dot_type): matmul quantizes every token row of `cols` floats once per call into
 *  - Q8_0 (the partner of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): nb = cols / 32 blocks of an f16
 *    scale (held as a float) and 32 quants, with the quants' sum per block;
 *  - Q8_K (the partner of Q2_K..Q6_K and IQ4_XS): nb = cols / 256 blocks exactly as ggml's
 *    quantize_row_q8_K_ref (a float scale, 256 quants), with the sums of every 16 quants (ggml's
 *    bsums) and of every 32. */
enum cpu_act {
    CPU_ACT_FLOAT, /* no integer kernel: rows are converted to floats (cpu_matmul.c's float path) */
    CPU_ACT_Q8_0,
    CPU_ACT_Q8_K,
};
struct cpu_act_q8 {
    int8_t *qs;     /* (n_tokens, cols) */
    float *d;       /* (n_tokens, nb) block scales */
    int32_t *sum;   /* Q8_0: (n_tokens, nb) sum of the 32 quants of each block */
    float *s;       /* Q8_0: (n_tokens, nb) ggml's Q8_1 s: amax / 127 * sum, rounded to f16 */
    int16_t *sum16; /* Q8_K: (n_tokens, cols / 16) sums of each 16 quants */
    int16_t *sum32; /* Q8_K: (n_tokens, cols / 32) sums of each 32 quants */
    int nb;         /* blocks per token row */
};

/* The activation format weights of `type` are multiplied with (cpu_qdot.c). */
enum cpu_act cpu_act_of(enum quant_type type);

/* Dot-product GEMM kernels. Each computes y[t * ldy + r] = <row r of W, token t of x> for r < nr
 * (nr <= CPU_GEMM_ROWS) and t < nt. Every output is computed by the same sequence of operations
 * whatever nr, nt and the thread split are, so results do not depend on the thread count. */
#define CPU_GEMM_ROWS 4
#define CPU_ATTN_ROWS 16
/* Items with at most this many query rows (decode) use the dot-product score kernels: the 16-row
 * transposed kernel would compute mostly padding. */
#define ATTN_DOT_MAX_ROWS 4
typedef void (*cpu_gemm_f32_fn)(const float *w, size_t ldw, int nr, const float *x, size_t ldx,
                                int nt, int k, float *y, size_t ldy);
/* The same with F16 weights widened in registers (no conversion pass; results identical). */
typedef void (*cpu_gemm_f16_fn)(const uint16_t *w, size_t ldw, int nr, const float *x, size_t ldx,
                                int nt, int k, float *y, size_t ldy);
/* W rows are raw blocks of the kernel's type, `row_bytes` apart; activations are tokens
 * t0..t0+nt-1 of xq, in the type's cpu_act_of format. */
typedef void (*cpu_gemm_q_fn)(const void *w, size_t row_bytes, int nr, const struct cpu_act_q8 *xq,
                              int t0, int nt, float *y, size_t ldy);
/* The same over packed rows (cpu_qpack.c's layout): `groups` is the first group of CPU_QPACK_ROWS
 * rows, group_bytes apart, nr rows in all. `warm` asks the kernel to prefetch ahead of the groups
 * (set on the first pass over them). */
#define CPU_QPACK_ROWS 16
typedef void (*cpu_gemm_qpack_fn)(const void *groups, size_t group_bytes, int nr,
                                  const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy,
                                  int warm);

struct cpu_kernels {
    cpu_gemm_f32_fn gemm_f32;
    cpu_gemm_f16_fn gemm_f16;
    /* Integer kernels by weight type: set at every level for each type whose cpu_act_of is not
     * CPU_ACT_FLOAT (the scalar ones in cpu_qdot.c), NULL for the others. */
    cpu_gemm_q_fn gemm_q[QUANT_TYPE_END];
    /* Packed-weight kernels; NULL at levels without them (weights then stay row-major). */
    cpu_gemm_qpack_fn gemm_qpack[QUANT_TYPE_END];
    /* Activation quantization for the integer GEMMs; same results as cpu_quant_q8_0_row and
     * cpu_quant_q8_k_row. */
    void (*quantize_q8_0)(const float *x, int k, int8_t *qs, float *d, int32_t *sum, float *s);
    void (*quantize_q8_k)(const float *x, int k, int8_t *qs, float *d, int16_t *sum16,
                          int16_t *sum32);
    /* gate (n) = silu(gate) * up */
    void (*silu_mul)(float *gate, const float *up, size_t n);
    /* Dequantizes a row of any weight type (as quant_dequantize_row, to within rounding). */
    void (*dequant_row)(enum quant_type type, const void *src, float *dst, int64_t n);
    /* dst (n) = f16 src (n) converted */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    /* dst (n) = src (n) rounded to f16 as quant_f32_to_f16 (nearest even; NaN stays NaN) */
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* Attention over one (KV head, up to CPU_ATTN_ROWS query rows) item; s is position-major
     * (np, CPU_ATTN_ROWS), qt is the scaled queries transposed (hd, CPU_ATTN_ROWS), o (CPU_ATTN_ROWS, hd).
     * scores: s[p][r] = sum_i qt[i][r] * k[p * ldk + i] for p < np.
     * softmax: for each row r, over p < lim[r]: s[p][r] = exp(s[p][r] - max), 0 for p >= lim[r];
     *          inv[r] = 1 / sum (rows with lim 0 are padding; inv is then unspecified).
     * pv: o[r][i] += sum_{p < np} s[p][r] * v[p * ldv + i] for r < nq.
     * A row's score is bit-identical from attn_scores and attn_scores_dot (the same products
     * summed in the same order), so results do not depend on which rows share an item. */
    void (*attn_scores)(const float *qt, int hd, const float *k, size_t ldk, int np, float *s);
    /* The same scores for few rows (decode): q is (nq <= 4, hd) row-major, only rows < nq written. */
    void (*attn_scores_dot)(const float *q, int nq, int hd, const float *k, size_t ldk, int np,
                            float *s);
    void (*attn_softmax)(float *s, int np, const int32_t *lim, float *inv);
    void (*attn_pv)(const float *s, int nq, const float *v, size_t ldv, int np, float *o, int hd);
    /* attn_scores_dot and attn_pv reading F16 K/V rows directly, with results identical to widening
     * the rows first; NULL at levels without them (attention then widens). */
    void (*attn_scores_dot_f16)(const float *q, int nq, int hd, const uint16_t *k, size_t ldk,
                                int np, float *s);
    void (*attn_pv_f16)(const float *s, int nq, const uint16_t *v, size_t ldv, int np, float *o,
                        int hd);
    /* attn_scores_dot and attn_pv reading Q8_0 K/V rows (head_dim / 32 ggml blocks, ldk and ldv in
     * bytes) at their exact dequantized values d * q, so results are identical to dequantizing the
     * rows first; NULL at levels without them. */
    void (*attn_scores_dot_q8)(const float *q, int nq, int hd, const void *k, size_t ldk, int np,
                               float *s);
    void (*attn_pv_q8)(const float *s, int nq, const void *v, size_t ldv, int np, float *o, int hd);
    /* Decode scores of nh <= 16 rows with one KV head each (no query heads sharing one): row r's K
     * rows start at k + r * head_stride; s[p][r] as attn_scores_dot_f16 gives it for that row,
     * lanes from nh on set to 0. NULL at levels without it (one attn_scores_dot_f16 per head). */
    void (*attn_scores_heads_f16)(const float *q, int nh, int hd, const uint16_t *k,
                                  size_t head_stride, size_t ldk, int np, float *s);
    /* The same over Q8_0 rows (head_stride and ldk in bytes), as attn_scores_dot_q8 per row. */
    void (*attn_scores_heads_q8)(const float *q, int nh, int hd, const void *k, size_t head_stride,
                                 size_t ldk, int np, float *s);
    /* F16 caches (llama.cpp's arithmetic): s[p][r] = f16(s[p][r] * inv[r]) for p < np, all rows. */
    void (*attn_probs_f16)(float *s, int np, const float *inv);
    /* F16 caches with short heads, in llama.cpp's arithmetic (cpu_attention.c's
     * attn_item_run_ggml), one query row at a time:
     * ggml_exp_sum: x[p] = cpu_ggml_expf(x[p] - mx) for lo <= p < np, in 16-position chunks aligned
     *   to position 0, each chunk's lanes in range summed by cpu_ggml_reduce16 (the others count 0)
     *   and the chunk sums accumulated in double; returns the sum. Only x[lo..np) is touched.
     * ggml_pv: acc[((p0 + p) % 16) * hd + i] = fmaf(pr[p], v[p * hd + i], itself) for p < n, i < hd,
     *   in p order: acc is (16 lanes, hd), position p0 + p on lane (p0 + p) % 16.
     * ggml_scores: s[p] = (float)(sum over i < hd in order of (double)(q[i] * kt[i * ldk + p])) for
     *   p < n: K transposed (hd, ldk), each product exact in float (f16 operands), summed in double.
     * Every level gives the scalar kernels' bits. */
    void (*ggml_scores)(const float *q, int hd, const float *kt, size_t ldk, int n, float *s);
    double (*ggml_exp_sum)(float *x, int lo, int np, float mx);
    void (*ggml_pv)(const float *pr, int p0, int n, const float *v, int hd, float *acc);
};

/* Fills the table for `isa`; levels above scalar fall back to scalar for kernels they lack. */
void cpu_kernels_init(struct cpu_kernels *k, enum cpu_isa isa);
void cpu_kernels_scalar(struct cpu_kernels *k);
void cpu_kernels_avx2(struct cpu_kernels *k);
void cpu_kernels_avx512(struct cpu_kernels *k);
/* The kernels of the types added after Q8_0/Q4_0, installed by the level functions above:
 * row-major ones at AVX2 (cpu_kernels_avx2_q.c), packed ones at AVX-512 (cpu_kernels_avx512_q.c). */
void cpu_kernels_avx2_q(struct cpu_kernels *k);
void cpu_kernels_avx512_q(struct cpu_kernels *k);

/* A prepared weight: nothing in it borrows the caller's memory (backend.h). An owned F32 copy for
 * 1-D weights (norm gains, biases), so elementwise ops always read floats; for quantized matrices
 * at a level with packed kernels for the type, a packed copy that matmul reads; and a row-major
 * copy of the rows in the file's type (desc.data points at it) for whatever else reads rows: the
 * float path, the row-major kernels and get_rows. A packed matrix has no row copy (desc.data NULL)
 * unless desc.lookup says get_rows reads it. */
struct backend_weight {
    struct backend_weight_desc desc; /* desc.data: `rows`, `owned` (1-D F32) or NULL */
    size_t row_bytes;                /* bytes of one row in desc.type */
    const float *f32; /* `rows` for an F32 matrix, `owned` for 1-D weights, else NULL */
    float *owned;
    void *rows;                /* (rows, row_bytes) in the weight arena, or NULL */
    void *packed;              /* cpu_qpack layout in the weight arena, or NULL */
    size_t packed_group_bytes; /* bytes from one packed group of rows to the next */
};

/* Packing (cpu_qpack.c). Whether `type` has a packed layout; bytes of one group of CPU_QPACK_ROWS
 * rows and of a whole (rows, cols) matrix; and the conversion of row-major blocks (`row_bytes`
 * apart) into `dst`, which must hold cpu_qpack_bytes. cols is a multiple of 32. */
int cpu_qpack_supported(enum quant_type type);
size_t cpu_qpack_group_bytes(enum quant_type type, int64_t cols);
size_t cpu_qpack_bytes(enum quant_type type, int64_t rows, int64_t cols);
void cpu_qpack_weights(enum quant_type type, const void *src, size_t row_bytes, int64_t rows,
                       int64_t cols, void *dst);

/* Rotary angles of the current step (cpu_ops.c): cos/sin of each token's angles, computed by the
 * step's first rope call and reused by the others, which rotate q and k of every layer at the same
 * positions. One per lane. */
struct cpu_rope_table {
    float *cs;    /* (n_tokens, n_rot) */
    int32_t *pos; /* (n_tokens) the positions they belong to */
    int n_tokens;
    struct backend_rope_params params; /* they were computed with (the mode aside) */
    size_t cap_cs, cap_pos;            /* allocated elements */
};

/* What an op mutates besides its outputs, one per lane (run_lanes): ops running side by side in
 * different lanes each use their own. Lane 0 also serves ops called outside run_lanes. */
struct cpu_lane {
    void *scratch; /* grown on demand, never shrunk (cpu_backend_scratch) */
    size_t scratch_cap;
    struct cpu_rope_table rope;
};

struct cpu_backend {
    struct backend base; /* first member: (struct backend *) casts to and from */
    struct cpu_pool *pool;
    int n_threads;
    struct cpu_lane *lanes; /* (n_threads) */
    enum cpu_isa isa;
    struct cpu_kernels kern;

    /* Paged KV cache: per layer, K then V, each (n_blocks, n_kv_heads, block_size, head_dim): a
     * block's positions of one head are contiguous, so attention streams them (position-major, a
     * head read hd of every n_kv_heads * hd elements of each row; 16-stream serving was 8% slower
     * that way). */
    struct backend_kv_desc kv;
    int kv_ready;
    void *kv_mem;          /* calloc'ed and committed: 4 KiB pages (see cpu_memory.h) */
    size_t kv_head_bytes;  /* one position of one KV head: head_dim elements (F32, F16) or
                            * head_dim / 32 ggml Q8_0 blocks */
    size_t kv_layer_bytes; /* K (or V) of one layer: n_blocks * block_size * n_kv_heads positions */

    struct cpu_arena weights; /* packed weight copies */
    /* ggml's GELU table: gelu (tanh approximation) of every f16 value, rounded to f16 (gelu_mul) */
    uint16_t *gelu_f16; /* (65536) */
};

static inline struct cpu_backend *cpu_backend_of(struct backend *b)
{
    return (struct cpu_backend *)b;
}

/* Byte offset within one layer's K (or V) of KV head h at cache slot `slot` (block * block_size +
 * position in block): blocks, then KV heads, then the block's positions, so one head's positions
 * in a block are contiguous and so are a block's heads. */
static inline size_t cpu_kv_offset(const struct cpu_backend *cb, int64_t slot, int h)
{
    size_t bs = (size_t)cb->kv.block_size;
    size_t blk = (size_t)slot / bs, i = (size_t)slot % bs;
    return ((blk * (size_t)cb->kv.n_kv_heads + (size_t)h) * bs + i) * cb->kv_head_bytes;
}

/* The lane the calling thread runs ops in: its lane inside run_lanes, else lane 0. */
struct cpu_lane *cpu_backend_lane(struct cpu_backend *cb);
/* Threads an op called from this thread may use: 1 inside a lane, else all of them. */
int cpu_backend_threads(const struct cpu_backend *cb);
/* Runs an op's job over those threads: the pool, or fn(ctx, 0, 1) inline inside a lane. */
void cpu_backend_run(struct cpu_backend *cb, cpu_pool_fn fn, void *ctx);
/* Grows the calling lane's scratch buffer to at least `bytes` (64-byte aligned); returns it (owned
 * by the backend, valid until the lane's next call) or NULL. */
void *cpu_backend_scratch(struct cpu_backend *cb, size_t bytes);

/* Quantizes one row of `k` floats (k % 32 == 0) into Q8_0 blocks as ggml-cpu's x86 quantizer
 * (quantize_row_q8_0; its quantize_row_q8_1 gives the same quants and scales), split into quants,
 * scales, per-block quant sums and Q8_1's s (the scale before its f16 rounding times the sum, then
 * rounded to f16: the offset term of Q4_1 and Q5_1, which llama.cpp multiplies by f16 m). */
void cpu_quant_q8_0_row(const float *x, int k, int8_t *qs, float *d, int32_t *sum, float *s);
/* The same into Q8_K blocks (k % 256 == 0) as quant_quantize_row(QUANT_Q8_K), split into quants,
 * scales and the sums of each 16 and each 32 quants. */
void cpu_quant_q8_k_row(const float *x, int k, int8_t *qs, float *d, int16_t *sum16,
                        int16_t *sum32);
/* Installs the scalar integer kernels of every type (cpu_qdot.c). */
void cpu_qdot_scalar(struct cpu_kernels *k);

/* Ops implemented in separate files (see backend.h for their contracts). */
int cpu_matmul_run(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                   int n_tokens);
int cpu_matmul_group_run(struct backend *b, const struct backend_weight *const *w, int n,
                         const float *x, float *const *y, int n_tokens);
int cpu_attention_run(struct backend *b, int layer, const float *q, float *out,
                      const struct backend_batch *batch, int n_heads,
                      const struct backend_attn_params *p);
int cpu_attention_kv_store(struct backend *b, int layer, const float *k, const float *v,
                           const struct backend_batch *batch);
int cpu_ops_get_rows(struct backend *b, const struct backend_weight *w, const int32_t *ids, int n,
                     float *out);
int cpu_ops_add_bias(struct backend *b, float *y, const struct backend_weight *bias, int n_tokens);
int cpu_ops_add(struct backend *b, float *y, const float *x, size_t n);
int cpu_ops_rmsnorm(struct backend *b, const float *x, const struct backend_weight *gain, float *y,
                    int n_tokens, int dim, float eps);
int cpu_ops_rmsnorm_heads(struct backend *b, float *x, const struct backend_weight *gain,
                          int n_rows, int head_dim, float eps);
int cpu_ops_rope(struct backend *b, float *x, const int32_t *pos, int n_tokens, int n_heads,
                 int head_dim, const struct backend_rope_params *p);
int cpu_ops_silu_mul(struct backend *b, float *gate, const float *up, size_t n);
int cpu_ops_gather_rows(struct backend *b, const float *src, const int32_t *idx, int n, int dim,
                        float *dst);
int cpu_ops_gelu_mul(struct backend *b, float *gate, const float *up, size_t n);
int cpu_ops_scale(struct backend *b, float *x, size_t n, float s);
int cpu_ops_softcap(struct backend *b, float *x, size_t n, float cap);
int cpu_ops_moe_route(struct backend *b, const float *logits, int n_rows, int n_expert, int k,
                      bool norm, int32_t *ids, float *w);
int cpu_ops_moe_combine(struct backend *b, const float *x, const float *w, int n_rows, int k,
                        int dim, float *out);
int cpu_ops_scale_rows_sigmoid(struct backend *b, float *x, const float *g, int n_rows, int dim);
/* Fills the GELU table (65536 entries) as ggml_cpu_init fills ggml_table_gelu_f16. */
void cpu_ops_gelu_table(uint16_t *table);
/* ggml_v_expf (llama.cpp's vector exp on AVX-512) lane by lane, and the sum of 16 floats in the
 * order of _mm512_reduce_add_ps (cpu_attention.c): ggml's softmax arithmetic. */
float cpu_ggml_expf(float x);
float cpu_ggml_reduce16(const float *v);

/* Creates the CPU backend (see backend_create). */
int cpu_backend_create(const struct backend_options *opt, struct backend **out);

#endif
