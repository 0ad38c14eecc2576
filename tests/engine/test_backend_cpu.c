/* CPU backend: every op against a naive double-precision reference on random data, every SIMD level
 * against the scalar kernels, and 1 vs 2 threads bit for bit. Weights are random blocks of each
 * format; engine/gguf/quant.c's scalar dequantizer is the independent reference for their values. */
#include "common/assert.h"
#include "common/err.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/cpu/cpu_pool.h"
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Attention parameters with only a scale (no soft-cap, no sliding window). */
#define ATTN_SCALE(s) (&(struct backend_attn_params){.scale = (s)})

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Uniform in [-1, 1). */
static float rng_f(void)
{
    return (float)(rng_u32() & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static void fill_f(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = rng_f();
}

static const char *isa_levels[] = {"scalar", "avx2", "avx512"};

/* Creates a backend at `isa` with n threads, or returns NULL when the CPU lacks the level. */
static struct backend *make_backend(const char *isa, int n_threads)
{
    struct backend_options o = {.n_threads = n_threads, .cpu_isa = isa};
    struct backend *b = NULL;
    int rc = backend_create("cpu", &o, &b);
    if (rc == ERR_UNSUPPORTED) return NULL;
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(b);
    return b;
}

static size_t type_row_bytes(enum quant_type t, int64_t cols)
{
    return quant_row_bytes(t, (uint64_t)cols);
}

/* Overwrites the f16 at byte `off` of every `bsz`-byte block with a random small scale. */
static void fix_scales(uint8_t *p, size_t total, size_t bsz, size_t off, float lo, float span)
{
    for (size_t i = 0; i < total / bsz; i++) {
        uint16_t h = quant_f32_to_f16(lo + span * fabsf(rng_f()));
        memcpy(p + i * bsz + off, &h, sizeof(h));
    }
}

/* Random row data of `type`: every quant and sub-block scale bit pattern uniform (random bytes),
 * the f16 super-scales small and positive like real models' (mins and Q4_1/Q5_1 offsets signed). */
static void *random_weights(enum quant_type type, int64_t rows, int64_t cols)
{
    size_t rb = type_row_bytes(type, cols), total = rb * (size_t)rows;
    ck_assert_uint_gt(rb, 0);
    uint8_t *p = malloc(total);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < total; i++) p[i] = (uint8_t)rng_u32();
    size_t n = (size_t)rows * (size_t)cols;
    switch (type) {
    case QUANT_F32: fill_f((float *)p, n); break;
    case QUANT_F16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = quant_f32_to_f16(rng_f());
        break;
    case QUANT_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = quant_f32_to_bf16(rng_f());
        break;
    case QUANT_Q8_0:
        fix_scales(p, total, 34, 0, 0.001f, 0.01f);
        for (size_t i = 0; i < total / 34; i++) {
            struct quant_block_q8_0 *b = (struct quant_block_q8_0 *)p + i;
            for (int j = 0; j < 32; j++)
                if (b->qs[j] == -128) b->qs[j] = -127; /* ggml's quantizer never emits -128 */
        }
        break;
    case QUANT_Q4_0: fix_scales(p, total, 18, 0, -0.05f, 0.1f); break;
    case QUANT_Q4_1:
        fix_scales(p, total, 20, 0, 0.001f, 0.01f);
        fix_scales(p, total, 20, 2, -0.08f, 0.04f);
        break;
    case QUANT_Q5_0: fix_scales(p, total, 22, 0, -0.02f, 0.04f); break;
    case QUANT_Q5_1:
        fix_scales(p, total, 24, 0, 0.0005f, 0.005f);
        fix_scales(p, total, 24, 2, -0.08f, 0.04f);
        break;
    case QUANT_Q2_K:
        fix_scales(p, total, 84, 80, 0.0005f, 0.005f);
        fix_scales(p, total, 84, 82, 0.0005f, 0.002f);
        break;
    case QUANT_Q3_K: fix_scales(p, total, 110, 108, 0.0002f, 0.001f); break;
    case QUANT_Q4_K:
    case QUANT_Q5_K: {
        size_t bsz = type == QUANT_Q4_K ? 144 : 176;
        fix_scales(p, total, bsz, 0, 0.0005f, 0.002f);
        fix_scales(p, total, bsz, 2, 0.0f, 0.002f);
        break;
    }
    case QUANT_Q6_K: fix_scales(p, total, 210, 208, -0.0005f, 0.0015f); break;
    case QUANT_Q8_K:
        for (size_t i = 0; i < total / 292; i++) {
            float d = 0.0001f + 0.001f * fabsf(rng_f());
            memcpy(p + i * 292, &d, sizeof(d));
        }
        break;
    case QUANT_IQ4_NL: fix_scales(p, total, 18, 0, -0.0005f, 0.001f); break;
    case QUANT_IQ4_XS: fix_scales(p, total, 136, 0, 0.00005f, 0.0002f); break;
    default: ck_abort_msg("unexpected type");
    }
    return p;
}

/* The error bound of one output from quantizing the activations (cpu_act_of): per block of the
 * activation format, half a quantization step amax/127 times sum |w| of the block's weights. Q8_0
 * stores its scale as f16 (a relative 2^-11 more: 0.6 for 0.5); Q8_K keeps a float scale and
 * rounds to nearest (0.51). The weights are exact in both (the dequantized values themselves). */
static double act_bound(enum quant_type type, const float *w, const float *x, int64_t cols)
{
    enum cpu_act act = cpu_act_of(type);
    if (act == CPU_ACT_FLOAT) return 0.0;
    int blk = act == CPU_ACT_Q8_K ? 256 : 32;
    double f = act == CPU_ACT_Q8_K ? 0.51 : 0.6, bound = 0.0;
    for (int64_t b = 0; b < cols / blk; b++) {
        double amax = 0.0, sw = 0.0;
        for (int j = 0; j < blk; j++) {
            amax = fmax(amax, fabs(x[b * blk + j]));
            sw += fabs(w[b * blk + j]);
        }
        bound += f * amax / 127.0 * sw;
    }
    return bound;
}

/* ---- matmul ------------------------------------------------------------------------------- */

struct mm_case {
    enum quant_type type;
    int64_t rows, cols;
    int n_tokens;
};

static float *run_matmul(const char *isa, int n_threads, const struct backend_weight_desc *d,
                         const float *x, int n_tokens)
{
    struct backend *b = make_backend(isa, n_threads);
    if (!b) return NULL;
    struct backend_weight *w = NULL;
    ck_assert_int_eq(b->ops->weight_prepare(b, d, &w), 0);
    float *y = b->ops->alloc(b, sizeof(float) * (size_t)n_tokens * (size_t)d->rows);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(b->ops->matmul(b, w, x, y, n_tokens), 0);
    float *out = malloc(sizeof(float) * (size_t)n_tokens * (size_t)d->rows);
    ck_assert_int_eq(b->ops->download(b, out, y, sizeof(float) * (size_t)n_tokens * d->rows), 0);
    b->ops->free(b, y);
    b->ops->weight_free(b, w);
    b->ops->destroy(b);
    return out;
}

static void check_matmul_case(const struct mm_case *c)
{
    int64_t rows = c->rows, cols = c->cols;
    int nt = c->n_tokens;
    void *wdata = random_weights(c->type, rows, cols);
    struct backend_weight_desc d = {.type = c->type, .rows = rows, .cols = cols, .data = wdata};
    float *x = malloc(sizeof(float) * (size_t)nt * cols);
    fill_f(x, (size_t)nt * cols);
    for (int i = 0; i < cols; i += 7) x[i] *= 4.0f; /* uneven magnitudes within blocks */
    float *wf = malloc(sizeof(float) * (size_t)rows * cols);
    size_t rb = type_row_bytes(c->type, cols);
    for (int64_t r = 0; r < rows; r++)
        quant_dequantize_row(c->type, (const char *)wdata + r * rb, wf + r * cols, (size_t)cols);

    float *ref_scalar = run_matmul("scalar", 1, &d, x, nt);
    bool exact =
        cpu_act_of(c->type) != CPU_ACT_FLOAT && c->type != QUANT_Q8_0 && c->type != QUANT_Q4_0;
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        for (int th = 1; th <= 2; th++) {
            float *y = run_matmul(isa_levels[li], th, &d, x, nt);
            if (!y) continue;
            float *y1 = th == 2 ? run_matmul(isa_levels[li], 1, &d, x, nt) : NULL;
            if (y1) {
                ck_assert_msg(memcmp(y, y1, sizeof(float) * nt * rows) == 0,
                              "type %d isa %s: 1 and 2 threads differ", c->type, isa_levels[li]);
                free(y1);
            }
            for (int t = 0; t < nt; t++) {
                for (int64_t r = 0; r < rows; r++) {
                    const float *wr = wf + r * cols, *xt = x + (size_t)t * cols;
                    double ref = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < cols; i++) {
                        ref += (double)wr[i] * xt[i];
                        mag += fabs((double)wr[i] * xt[i]);
                    }
                    double tol = 1e-4 * mag + 1e-5 + act_bound(c->type, wr, xt, cols);
                    double got = y[(size_t)t * rows + r];
                    ck_assert_msg(fabs(got - ref) <= tol,
                                  "type %d %lldx%lld nt %d isa %s: y[%d][%lld] = %g, ref %g",
                                  c->type, (long long)rows, (long long)cols, nt, isa_levels[li], t,
                                  (long long)r, got, ref);
                    /* every level agrees with the scalar kernels far more tightly, and
                     * bit for bit where the integer sums are exact (cpu_qdot.c) */
                    double s = ref_scalar[(size_t)t * rows + r];
                    if (exact)
                        ck_assert_msg(memcmp(&y[(size_t)t * rows + r],
                                             &ref_scalar[(size_t)t * rows + r], 4) == 0,
                                      "type %d isa %s threads %d: y[%d][%lld] = %.9g, scalar %.9g",
                                      c->type, isa_levels[li], th, t, (long long)r, got, s);
                    ck_assert_msg(fabs(got - s) <= 2e-5 * mag + 1e-6,
                                  "type %d isa %s: y[%d][%lld] = %.9g, scalar %.9g", c->type,
                                  isa_levels[li], t, (long long)r, got, s);
                }
            }
            free(y);
        }
    }
    free(ref_scalar);
    free(wf);
    free(x);
    free(wdata);
}

static void check_matmul_type(enum quant_type type, int64_t block)
{
    /* odd row counts (tile remainders), n_tokens 1 and > 1 (token tile remainders, > one block) */
    const int64_t rows[] = {1, 7, 33};
    /* 27 = packed token tiles of 16 + 8 + 2 + 1; 70 = 4 x 16 + 4 + 2 */
    const int n_tokens[] = {1, 3, 27, 70};
    int64_t cols_list[] = {block == 1 ? 37 : block, block == 1 ? 96 : 3 * block};
    for (size_t r = 0; r < ARRAY_LEN(rows); r++)
        for (size_t c = 0; c < ARRAY_LEN(cols_list); c++)
            for (size_t n = 0; n < ARRAY_LEN(n_tokens); n++) {
                struct mm_case mc = {type, rows[r], cols_list[c], n_tokens[n]};
                check_matmul_case(&mc);
            }
}

/* Every weight type, one loop iteration each (block: elements per block, 1 for float types). */
static const struct {
    enum quant_type type;
    int64_t block;
} matmul_types[] = {
    {QUANT_F32, 1},     {QUANT_F16, 1},    {QUANT_BF16, 1},   {QUANT_Q8_0, 32},
    {QUANT_Q4_0, 32},   {QUANT_Q4_1, 32},  {QUANT_Q5_0, 32},  {QUANT_Q5_1, 32},
    {QUANT_IQ4_NL, 32}, {QUANT_Q2_K, 256}, {QUANT_Q3_K, 256}, {QUANT_Q4_K, 256},
    {QUANT_Q5_K, 256},  {QUANT_Q6_K, 256}, {QUANT_Q8_K, 256}, {QUANT_IQ4_XS, 256},
};

START_TEST(test_matmul_every_type)
{
    check_matmul_type(matmul_types[_i].type, matmul_types[_i].block);
}
END_TEST

/* Each token's outputs are bit-identical whether it is multiplied alone or inside a batch (the model
 * relies on this for batch-invariant logits). */
START_TEST(test_matmul_batch_invariant)
{
    int64_t rows = 37;
    int nt = 100;
    enum quant_type types[ARRAY_LEN(matmul_types)];
    for (size_t ti = 0; ti < ARRAY_LEN(matmul_types); ti++) {
        types[ti] = matmul_types[ti].type;
        int64_t cols = matmul_types[ti].block == 1 ? 172 : 3 * matmul_types[ti].block;
        void *wd = random_weights(types[ti], rows, cols);
        struct backend_weight_desc d = {types[ti], rows, cols, wd, false, false};
        float *x = malloc(sizeof(float) * nt * cols);
        fill_f(x, (size_t)nt * cols);
        for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
            float *all = run_matmul(isa_levels[li], 2, &d, x, nt);
            if (!all) continue;
            const int picks[] = {0, 5, 63, 64, 99};
            for (size_t pi = 0; pi < ARRAY_LEN(picks); pi++) {
                int t = picks[pi];
                float *one = run_matmul(isa_levels[li], 1, &d, x + (size_t)t * cols, 1);
                float *three =
                    run_matmul(isa_levels[li], 1, &d, x + (size_t)(t > 2 ? t - 2 : 0) * cols, 3);
                /* 9 tokens: the 8-token tile of the packed kernels */
                float *nine =
                    run_matmul(isa_levels[li], 1, &d, x + (size_t)(t > 8 ? t - 8 : 0) * cols, 9);
                ck_assert_msg(memcmp(nine + (size_t)(t > 8 ? 8 : t) * rows, all + (size_t)t * rows,
                                     sizeof(float) * rows) == 0,
                              "type %d isa %s token %d: 9-token batch differs", types[ti],
                              isa_levels[li], t);
                free(nine);
                ck_assert_msg(memcmp(one, all + (size_t)t * rows, sizeof(float) * rows) == 0,
                              "type %d isa %s token %d: alone differs from batch", types[ti],
                              isa_levels[li], t);
                ck_assert_msg(memcmp(three + (size_t)(t > 2 ? 2 : t) * rows, all + (size_t)t * rows,
                                     sizeof(float) * rows) == 0,
                              "type %d isa %s token %d: 3-token batch differs", types[ti],
                              isa_levels[li], t);
                free(one);
                free(three);
            }
            free(all);
        }
        free(x);
        free(wd);
    }
}
END_TEST

/* matmul_group gives each weight exactly what its own matmul gives, whatever the group's mix of
 * types (runs of integer and float weights become separate jobs), sizes (packed groups and row
 * tiles of different weights in one claim sequence) and thread count; bad groups are refused. */
START_TEST(test_matmul_group_matches_single)
{
    /* five integer weights in a row (more than one job holds), then float ones */
    const enum quant_type types[] = {QUANT_Q8_0, QUANT_Q4_0, QUANT_Q8_0, QUANT_Q4_0,
                                     QUANT_Q8_0, QUANT_F16,  QUANT_F32,  QUANT_Q6_K};
    const int64_t rows[] = {96, 40, 33, 16, 257, 33, 17, 8};
    const int64_t cols = 256;
    const int n_tokens[] = {1, 16, 27};
    enum { N = 8, F32_WEIGHT = 6 };
    void *wd[N];
    struct backend_weight_desc d[N];
    for (int i = 0; i < N; i++) {
        wd[i] = random_weights(types[i], rows[i], cols);
        d[i] = (struct backend_weight_desc){types[i], rows[i], cols, wd[i], false, false};
    }
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        for (int th = 1; th <= 2; th++) {
            struct backend *b = make_backend(isa_levels[li], th);
            if (!b) continue;
            struct backend_weight *w[N];
            for (int i = 0; i < N; i++)
                ck_assert_int_eq(b->ops->weight_prepare(b, &d[i], &w[i]), 0);
            for (size_t ni = 0; ni < ARRAY_LEN(n_tokens); ni++) {
                int nt = n_tokens[ni];
                float *x = malloc(sizeof(float) * nt * cols);
                fill_f(x, (size_t)nt * cols);
                float *single[N], *grouped[N];
                for (int i = 0; i < N; i++) {
                    single[i] = malloc(sizeof(float) * nt * rows[i]);
                    grouped[i] = malloc(sizeof(float) * nt * rows[i]);
                    ck_assert_int_eq(b->ops->matmul(b, w[i], x, single[i], nt), 0);
                }
                /* every run of consecutive weights */
                for (int first = 0; first < N; first++)
                    for (int n = 1; first + n <= N; n++) {
                        const struct backend_weight *gw[N];
                        float *gy[N];
                        for (int i = 0; i < n; i++) {
                            gw[i] = w[first + i];
                            gy[i] = grouped[first + i];
                            memset(gy[i], 0xff, sizeof(float) * nt * rows[first + i]);
                        }
                        ck_assert_int_eq(b->ops->matmul_group(b, gw, n, x, gy, nt), 0);
                        for (int i = 0; i < n; i++)
                            ck_assert_msg(memcmp(gy[i], single[first + i],
                                                 sizeof(float) * nt * rows[first + i]) == 0,
                                          "isa %s threads %d tokens %d: group [%d, %d) weight %d",
                                          isa_levels[li], th, nt, first, first + n, first + i);
                    }
                for (int i = 0; i < N; i++) {
                    free(single[i]);
                    free(grouped[i]);
                }
                free(x);
            }
            /* refused: no weights, a NULL output, different column counts */
            float x[512] = {0}, y0[1024], y1[1024];
            float *ys[2] = {y0, y1}, *ynull[2] = {y0, NULL};
            const struct backend_weight *pair[2] = {w[0], w[1]};
            ck_assert_int_eq(b->ops->matmul_group(b, pair, 0, x, ys, 1), ERR_INVAL);
            ck_assert_int_eq(b->ops->matmul_group(b, pair, 2, x, ynull, 1), ERR_INVAL);
            struct backend_weight_desc narrow = {QUANT_F32, 2, 32, wd[F32_WEIGHT], false, false};
            struct backend_weight *wn;
            ck_assert_int_eq(b->ops->weight_prepare(b, &narrow, &wn), 0);
            const struct backend_weight *mixed[2] = {w[0], wn};
            ck_assert_int_eq(b->ops->matmul_group(b, mixed, 2, x, ys, 1), ERR_INVAL);
            b->ops->weight_free(b, wn);
            for (int i = 0; i < N; i++) b->ops->weight_free(b, w[i]);
            b->ops->destroy(b);
        }
    }
    for (int i = 0; i < N; i++) free(wd[i]);
}
END_TEST

/* A weight marked lookup_only is not repacked, yet matmul on it still agrees with the repacked one
 * (bit for bit for the exact-sum types),
 * get_rows reads it, and preparing (which repacks and advises the kernel to drop the original's
 * pages) never changes the caller's data. */
START_TEST(test_weight_lookup_only_and_source_untouched)
{
    int64_t rows = 40, cols = 256;
    int nt = 5;
    enum quant_type types[ARRAY_LEN(matmul_types)];
    for (size_t ti = 0; ti < ARRAY_LEN(matmul_types); ti++) {
        types[ti] = matmul_types[ti].type;
        if (cpu_act_of(types[ti]) == CPU_ACT_FLOAT) continue;
        bool exact = types[ti] != QUANT_Q8_0 && types[ti] != QUANT_Q4_0;
        size_t bytes = type_row_bytes(types[ti], cols) * (size_t)rows;
        void *wd = random_weights(types[ti], rows, cols);
        void *copy = malloc(bytes);
        memcpy(copy, wd, bytes);
        float *x = malloc(sizeof(float) * nt * cols);
        fill_f(x, (size_t)nt * cols);
        for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
            struct backend_weight_desc d = {types[ti], rows, cols, wd, false, false};
            float *packed = run_matmul(isa_levels[li], 2, &d, x, nt);
            if (!packed) continue;
            d.lookup_only = true;
            float *plain = run_matmul(isa_levels[li], 2, &d, x, nt);
            for (int i = 0; i < nt * rows; i++)
                ck_assert_msg(exact ? memcmp(&packed[i], &plain[i], 4) == 0
                                    : fabs(packed[i] - plain[i]) <= 1e-4 * (fabs(plain[i]) + 1.0),
                              "type %d isa %s [%d]: %g vs %g", types[ti], isa_levels[li], i,
                              packed[i], plain[i]);
            ck_assert_int_eq(memcmp(wd, copy, bytes), 0);
            free(packed);
            free(plain);
        }
        free(x);
        free(copy);
        free(wd);
    }
}
END_TEST

/* The real published matrices of ../shared/testdata/quant (Q6_K, Q4_K, Q5_0, Q8_0, Q4_1) times their
 * fixture inputs, at every level and 1 and 2 threads, against the fixture's y = dequant(W) @ x in
 * float64: within the activation-quantization bound of each output (act_bound: the inputs are
 * rounded to Q8_0 or Q8_K as ggml does), plus 1e-5 of sum |w x| for float summation order. The
 * same x repeated as 3 tokens checks each token alone gives the same output. */
START_TEST(test_matmul_real_tensors)
{
    const char *p = test_shared_path("testdata/quant/quant-fixtures-real-tensors.gguf");
    if (!p) return;
    char err[256];
    struct gguf *f = NULL;
    ck_assert_msg(gguf_open(p, &f, err, sizeof(err)) == 0, "%s", err);
    int checked = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->type == QUANT_F32) continue;
        char name[160];
        snprintf(name, sizeof(name), "%s.x", t->name);
        const struct gguf_tensor *tx = gguf_find_tensor(f, name);
        snprintf(name, sizeof(name), "%s.y", t->name);
        const struct gguf_tensor *ty = gguf_find_tensor(f, name);
        ck_assert(tx && ty);
        int64_t cols = (int64_t)t->ne[0], rows = (int64_t)t->ne[1];
        float *x = malloc(sizeof(float) * 3 * (size_t)cols), *w = malloc(sizeof(float) * cols);
        for (int k = 0; k < 3; k++) memcpy(x + k * cols, tx->data, sizeof(float) * cols);
        struct backend_weight_desc d = {t->type, rows, cols, t->data, false, false};
        size_t rb = quant_row_bytes(t->type, (uint64_t)cols);
        for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++)
            for (int th = 1; th <= 2; th++) {
                float *y = run_matmul(isa_levels[li], th, &d, x, 3);
                if (!y) continue;
                for (int64_t r = 0; r < rows; r++) {
                    quant_dequantize_row(t->type, (const char *)t->data + r * rb, w, (size_t)cols);
                    double mag = 0.0;
                    for (int64_t c = 0; c < cols; c++) mag += fabs((double)w[c] * x[c]);
                    float want;
                    memcpy(&want, (const char *)ty->data + r * 4, 4);
                    double tol = act_bound(t->type, w, x, cols) + 1e-5 * mag + 1e-6;
                    ck_assert_msg(fabs(y[r] - want) <= tol,
                                  "%s (%s) isa %s: y[%lld] = %.7g, fixture %.7g (bound %.3g)",
                                  t->name, quant_type_name(t->type), isa_levels[li], (long long)r,
                                  y[r], want, tol);
                    ck_assert(memcmp(&y[r], &y[rows + r], 4) == 0);
                    ck_assert(memcmp(&y[r], &y[2 * rows + r], 4) == 0);
                }
                free(y);
            }
        free(x);
        free(w);
        checked++;
    }
    ck_assert_int_ge(checked, 6);
    gguf_close(f);
}
END_TEST

START_TEST(test_matmul_model_shapes)
{
    /* the 134M model's projections at decode and small prefill sizes */
    const struct mm_case cases[] = {
        {QUANT_Q8_0, 768, 768, 1},
        {QUANT_Q4_0, 2048, 768, 5},
        {QUANT_F16, 768, 2048, 2},
        {QUANT_F32, 96, 768, 17},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) check_matmul_case(&cases[i]);
}
END_TEST

/* The attention kernels that read F16 rows directly (decode) give exactly what widening the rows
 * first and running the float kernels gives, at every level that has them. */
/* The kernels of llama.cpp's short-head F16 attention give the scalar level's bits at every level:
 * exp sums over ranges that start and end inside 16-position chunks, with scores from 0 down past
 * the subnormal range of exp (-87..-104) and below -192 * ln 2, and chunks holding -inf or NaN
 * (the vector levels hand those chunks to the scalar function); scores and P @ V on heads of 8,
 * 13 and 40. */
START_TEST(test_attention_ggml_kernels_levels_match)
{
    enum { N = 200 };
    float src[N], ref[N], got[N];
    for (int i = 0; i < N; i++) src[i] = -fabsf(rng_f()) * (float)(i % 7 == 0 ? 150 : 30);
    src[33] = -88.5f, src[34] = -100.0f, src[35] = -103.9f, src[36] = -140.0f, src[37] = -1e30f;
    src[130] = -INFINITY;
    src[150] = NAN;
    struct cpu_kernels sk;
    cpu_kernels_scalar(&sk);
    const int ranges[][2] = {{0, 200}, {5, 37},    {17, 18},  {0, 16},
                             {3, 129}, {120, 140}, {144, 160}};
    for (int lvl = CPU_ISA_SCALAR + 1; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        for (size_t c = 0; c < ARRAY_LEN(ranges); c++) {
            int lo = ranges[c][0], np = ranges[c][1];
            memcpy(ref, src, sizeof(src));
            memcpy(got, src, sizeof(src));
            double a = sk.ggml_exp_sum(ref, lo, np, 0.0f), b = k.ggml_exp_sum(got, lo, np, 0.0f);
            ck_assert_msg(memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b)),
                          "level %d range %d..%d: sum %.17g vs %.17g", lvl, lo, np, b, a);
            for (int p = 0; p < N; p++)
                ck_assert_msg(memcmp(&ref[p], &got[p], 4) == 0 || (isnan(ref[p]) && isnan(got[p])),
                              "level %d range %d..%d position %d: %a vs %a", lvl, lo, np, p,
                              (double)got[p], (double)ref[p]);
        }
        /* a maximum below the scores' and a chunk of nothing but tiny exps */
        memcpy(ref, src, sizeof(src));
        memcpy(got, src, sizeof(src));
        double a = sk.ggml_exp_sum(ref, 40, 120, -5.0f), b = k.ggml_exp_sum(got, 40, 120, -5.0f);
        ck_assert(memcmp(&a, &b, sizeof(a)) == 0);
        ck_assert(memcmp(ref, got, sizeof(ref)) == 0);

        const int hds[] = {8, 13, 40};
        for (size_t h = 0; h < ARRAY_LEN(hds); h++) {
            /* scores over f16 values (exact products), 37 positions: 4 vectors and a tail */
            int hd = hds[h], n = 37, p0 = 11;
            float q[40], kt[40 * 41], s_ref[37], s_got[37];
            for (int i = 0; i < hd; i++) q[i] = quant_f16_to_f32(quant_f32_to_f16(rng_f() * 4));
            for (int i = 0; i < hd * 41; i++)
                kt[i] = quant_f16_to_f32(quant_f32_to_f16(rng_f() * (i % 5 ? 3.0f : 3e4f)));
            sk.ggml_scores(q, hd, kt + 2, 41, n, s_ref);
            k.ggml_scores(q, hd, kt + 2, 41, n, s_got);
            ck_assert_msg(memcmp(s_ref, s_got, sizeof(s_ref)) == 0, "level %d hd %d", lvl, hd);

            float pr[37], v[37 * 40], acc_ref[16 * 40], acc_got[16 * 40];
            fill_f(pr, (size_t)n);
            fill_f(v, (size_t)n * hd);
            fill_f(acc_ref, (size_t)16 * hd);
            memcpy(acc_got, acc_ref, sizeof(float) * 16 * (size_t)hd);
            sk.ggml_pv(pr, p0, n, v, hd, acc_ref);
            k.ggml_pv(pr, p0, n, v, hd, acc_got);
            ck_assert_msg(memcmp(acc_ref, acc_got, sizeof(float) * 16 * (size_t)hd) == 0,
                          "level %d hd %d", lvl, hd);
        }
    }
}
END_TEST

START_TEST(test_attention_f16_kernels_match_widening)
{
    enum { NP = 37, LD = 3 * 80 };
    const int hds[] = {64, 80, 128};
    uint16_t *kv16 = malloc(sizeof(uint16_t) * NP * 3 * 128);
    float *kv32 = malloc(sizeof(float) * NP * 128);
    float q[4 * 128], s_ref[NP * 16], s_got[NP * 16], o_ref[4 * 128], o_got[4 * 128];
    for (int i = 0; i < NP * 3 * 128; i++) kv16[i] = quant_f32_to_f16(2.0f * rng_f() - 1.0f);
    fill_f(q, 4 * 128);
    for (int lvl = CPU_ISA_SCALAR; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        if (!k.attn_scores_dot_f16) continue;
        for (size_t hi = 0; hi < ARRAY_LEN(hds); hi++) {
            int hd = hds[hi];
            size_t ld = hd == 128 ? 2 * 128 : LD;
            for (int p = 0; p < NP; p++)
                k.f16_to_f32(kv16 + (size_t)p * ld, kv32 + (size_t)p * hd, hd);
            for (int nq = 1; nq <= ATTN_DOT_MAX_ROWS; nq++) {
                memset(s_ref, 0, sizeof(s_ref));
                memset(s_got, 0, sizeof(s_got));
                k.attn_scores_dot(q, nq, hd, kv32, (size_t)hd, NP, s_ref);
                k.attn_scores_dot_f16(q, nq, hd, kv16, ld, NP, s_got);
                ck_assert_mem_eq(s_got, s_ref, sizeof(s_ref));
                for (int i = 0; i < NP * 16; i++) s_ref[i] = rng_f();
                memset(o_ref, 0, sizeof(o_ref));
                memset(o_got, 0, sizeof(o_got));
                k.attn_pv(s_ref, nq, kv32, (size_t)hd, NP, o_ref, hd);
                k.attn_pv_f16(s_ref, nq, kv16, ld, NP, o_got, hd);
                ck_assert_mem_eq(o_got, o_ref, sizeof(float) * (size_t)nq * hd);
            }
        }
    }
    free(kv16);
    free(kv32);
}
END_TEST

START_TEST(test_quantize_q8_0_levels_agree)
{
    enum { K = 32 * 12 };
    float x[K];
    fill_f(x, K);
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f; /* amax 16.5: exact .5 ties */
    x[31] = 127.0f;                                             /* scale 1: x * id = x */
    for (int i = 32; i < 64; i++) x[i] = 0.0f;                  /* all-zero block */
    x[64] = NAN;
    x[97] = INFINITY;
    x[130] = -INFINITY;
    int8_t q_ref[K], q[K];
    float d_ref[K / 32], d[K / 32];
    int32_t s_ref[K / 32], sm[K / 32];
    float s1_ref[K / 32], s1[K / 32];
    cpu_quant_q8_0_row(x, K, q_ref, d_ref, s_ref, s1_ref);
    /* halves to even, as ggml-cpu's SIMD quantizer (its reference rounds them away from zero) */
    ck_assert_int_eq(q_ref[0], -16); /* -15.5 */
    ck_assert_int_eq(q_ref[1], -14); /* -14.5 */
    ck_assert_int_eq(q_ref[18], 2);  /* 2.5 */
    ck_assert_int_eq(q_ref[19], 4);  /* 3.5 */
    for (int i = 0; i < K; i++) ck_assert(q_ref[i] >= -127 && q_ref[i] <= 127);
    for (int lvl = CPU_ISA_SCALAR; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        k.quantize_q8_0(x, K, q, d, sm, s1);
        ck_assert_mem_eq(q, q_ref, sizeof(q));
        for (int b = 0; b < K / 32; b++) {
            ck_assert_int_eq(sm[b], s_ref[b]);
            if (!isnan(d_ref[b])) ck_assert_float_eq(d[b], d_ref[b]);
            if (!isnan(s1_ref[b])) ck_assert_float_eq(s1[b], s1_ref[b]);
        }
    }
}
END_TEST

/* Every level's Q8_K activation quantizer is ggml's quantize_row_q8_K_ref (quant.c's encoder) bit
 * for bit, with the sums of 16 and 32: normal rows, ties, an all-zero block, equal magnitudes of
 * both signs (the first wins), NaN (skipped by the max, quantized as ggml's bit trick does) and
 * infinities. */
START_TEST(test_quantize_q8_k_levels_agree)
{
    enum { K = 256 * 6 };
    float *x = malloc(sizeof(float) * K);
    fill_f(x, K);
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 64 - 32) * 0.5f; /* many exact ties */
    for (int i = 256; i < 512; i++) x[i] = 0.0f;
    x[512 + 7] = 3.0f, x[512 + 100] = -3.0f; /* same magnitude: the first sets the sign */
    x[768 + 3] = NAN;
    x[1024 + 9] = INFINITY;
    x[1280 + 200] = -INFINITY, x[1280 + 201] = NAN;
    int8_t *q = malloc(K);
    float d[K / 256];
    int16_t s16[K / 16], s32[K / 32];
    struct quant_block_q8_k ref[K / 256];
    ck_assert_int_eq(quant_quantize_row(QUANT_Q8_K, x, ref, K), 0);
    ck_assert_int_eq(ref[2].qs[7], -127);
    for (int lvl = CPU_ISA_SCALAR; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        memset(q, 0x55, K);
        k.quantize_q8_k(x, K, q, d, s16, s32);
        for (int b = 0; b < K / 256; b++) {
            ck_assert_msg(memcmp(q + 256 * b, ref[b].qs, 256) == 0, "level %d block %d", lvl, b);
            ck_assert_msg(memcmp(&d[b], &ref[b].d, 4) == 0 || (isnan(d[b]) && isnan(ref[b].d)),
                          "level %d block %d: d %g vs %g", lvl, b, d[b], ref[b].d);
            for (int j = 0; j < 16; j++) {
                ck_assert_int_eq(s16[b * 16 + j], ref[b].bsums[j]);
                if (j % 2)
                    ck_assert_int_eq(s32[b * 8 + j / 2], ref[b].bsums[j - 1] + ref[b].bsums[j]);
            }
        }
    }
    free(q);
    free(x);
}
END_TEST

/* ---- weights, get_rows, conversions ------------------------------------------------------- */

START_TEST(test_weight_prepare_rejects_bad_desc)
{
    struct backend *b = make_backend("scalar", 1);
    struct backend_weight *w = NULL;
    uint8_t buf[256] = {0};
    struct backend_weight_desc d = {.type = QUANT_Q8_0, .rows = 1, .cols = 33, .data = buf};
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_INVAL); /* partial block */
    d.cols = 32;
    d.type = (enum quant_type)16; /* IQ2_XXS: a ggml type this engine does not read */
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_UNSUPPORTED);
    d.type = (enum quant_type)99;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_UNSUPPORTED);
    d.type = QUANT_F32;
    d.rows = 0;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_INVAL);
    d.rows = 1;
    d.data = NULL;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_INVAL);
    d.data = buf;
    d.rows = INT64_MAX / 2;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), ERR_TOO_BIG);
    ck_assert_ptr_null(w);
    b->ops->weight_free(b, NULL);
    b->ops->destroy(b);
}
END_TEST

START_TEST(test_get_rows_every_type)
{
    enum quant_type types[ARRAY_LEN(matmul_types)];
    struct backend *b = make_backend(NULL, 2);
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        types[ti] = matmul_types[ti].type;
        int64_t rows = 9, cols = 512;
        void *data = random_weights(types[ti], rows, cols);
        struct backend_weight_desc d = {types[ti], rows, cols, data, false, true};
        struct backend_weight *w;
        ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), 0);
        const int32_t ids[] = {8, 0, 3, 3};
        float out[4 * 512], ref[512];
        ck_assert_int_eq(b->ops->get_rows(b, w, ids, 4, out), 0);
        size_t rb = type_row_bytes(types[ti], cols);
        for (int i = 0; i < 4; i++) {
            quant_dequantize_row(types[ti], (const char *)data + ids[i] * rb, ref, (size_t)cols);
            for (int j = 0; j < cols; j++)
                ck_assert_msg(out[i * cols + j] == ref[j], "type %d row %d col %d: %g vs %g",
                              types[ti], ids[i], j, out[i * cols + j], ref[j]);
        }
        const int32_t bad[] = {0, 9};
        ck_assert_int_eq(b->ops->get_rows(b, w, bad, 2, out), ERR_RANGE);
        const int32_t neg[] = {-1};
        ck_assert_int_eq(b->ops->get_rows(b, w, neg, 1, out), ERR_RANGE);
        b->ops->weight_free(b, w);
        free(data);
    }
    b->ops->destroy(b);
}
END_TEST

/* Every level's vector f32 -> f16 conversion rounds exactly as the scalar one: random bit patterns
 * (subnormal, normal, overflowing), ties, the largest finite values, infinities; NaN stays NaN. */
START_TEST(test_f32_to_f16_levels_match_scalar)
{
    enum { N = 4099 }; /* not a multiple of the vector width: the tails run too */
    float *x = malloc(sizeof(float) * N);
    uint16_t *got = malloc(sizeof(uint16_t) * N);
    for (int i = 0; i < N; i++) {
        uint32_t bits = rng_u32() ^ (rng_u32() << 16);
        memcpy(&x[i], &bits, 4);
    }
    const float special[] = {
        0.0f, -0.0f,    65504.0f, 65519.99f, 65520.0f, -65520.0f,       INFINITY,        -INFINITY,
        NAN,  5.96e-8f, 2.98e-8f, 2.99e-8f,  6.1e-5f,  1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 1e-10f};
    for (size_t i = 0; i < ARRAY_LEN(special); i++) x[i] = special[i];
    for (int lvl = CPU_ISA_SCALAR; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        k.f32_to_f16(x, got, N);
        for (int i = 0; i < N; i++) {
            uint16_t want = quant_f32_to_f16(x[i]);
            if (isnan(x[i]))
                ck_assert_msg((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff) != 0,
                              "level %d: NaN became %#x", lvl, got[i]);
            else
                ck_assert_msg(got[i] == want, "level %d x=%a: %#x, scalar %#x", lvl, x[i], got[i],
                              want);
        }
    }
    free(x);
    free(got);
}
END_TEST

/* Every level widens all 65536 half floats exactly as the reference conversion does. */
START_TEST(test_f16_to_f32_levels_match_quant)
{
    uint16_t *h = malloc(sizeof(uint16_t) * 65536);
    float *got = malloc(sizeof(float) * 65536);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int lvl = CPU_ISA_SCALAR; lvl <= (int)cpu_isa_detect(); lvl++) {
        struct cpu_kernels k;
        cpu_kernels_init(&k, (enum cpu_isa)lvl);
        k.f16_to_f32(h, got, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            float r = quant_f16_to_f32((uint16_t)i);
            if (isnan(r))
                ck_assert(isnan(got[i]));
            else
                ck_assert_msg(memcmp(&got[i], &r, 4) == 0, "level %d h=%#x: %g vs %g", lvl, i,
                              got[i], r);
        }
    }
    free(h);
    free(got);
}
END_TEST

/* ---- elementwise ops ---------------------------------------------------------------------- */

static struct backend_weight *f32_weight(struct backend *b, const float *data, int64_t cols)
{
    struct backend_weight_desc d = {QUANT_F32, 1, cols, data, false, false};
    struct backend_weight *w = NULL;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), 0);
    return w;
}

START_TEST(test_rmsnorm_matches_reference)
{
    struct backend *b = make_backend(NULL, 2);
    const int dims[] = {1, 37, 768};
    for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
        int dim = dims[di], nt = 3;
        float *x = malloc(sizeof(float) * nt * dim), *y = malloc(sizeof(float) * nt * dim);
        float *g = malloc(sizeof(float) * dim);
        fill_f(x, (size_t)nt * dim);
        fill_f(g, (size_t)dim);
        struct backend_weight *w = f32_weight(b, g, dim);
        ck_assert_int_eq(b->ops->rmsnorm(b, x, w, y, nt, dim, 1e-5f), 0);
        for (int t = 0; t < nt; t++) {
            double ss = 0;
            for (int i = 0; i < dim; i++) ss += (double)x[t * dim + i] * x[t * dim + i];
            double sc = 1.0 / sqrt(ss / dim + 1e-5);
            for (int i = 0; i < dim; i++)
                ck_assert_double_eq_tol(y[t * dim + i], x[t * dim + i] * sc * g[i], 1e-5);
        }
        /* in place (y == x) gives the same result */
        ck_assert_int_eq(b->ops->rmsnorm(b, x, w, x, nt, dim, 1e-5f), 0);
        ck_assert_mem_eq(x, y, sizeof(float) * nt * dim);
        ck_assert_int_eq(b->ops->rmsnorm(b, x, w, y, nt, dim + 1, 1e-5f), ERR_INVAL);
        b->ops->weight_free(b, w);
        free(x);
        free(y);
        free(g);
    }
    b->ops->destroy(b);
}
END_TEST

/* Prefill-sized inputs go through the pool: 1 and 2 threads give the same bits, and match the
 * single-row results. */
START_TEST(test_small_ops_parallel_match_serial)
{
    int nt = 70, dim = 768, nh = 12, hd = 64;
    size_t n = (size_t)nt * dim;
    float *x = malloc(n * sizeof(float)), *g = malloc(dim * sizeof(float));
    float *out[2], *up = malloc(n * sizeof(float));
    int32_t pos[70];
    fill_f(x, n);
    fill_f(g, (size_t)dim);
    fill_f(up, n);
    for (int t = 0; t < nt; t++) pos[t] = t * 7;
    struct backend_rope_params rp = {.mode = BACKEND_ROPE_NEOX,
                                     .n_rot = hd,
                                     .freq_base = 10000.0f,
                                     .freq_scale = 1.0f,
                                     .attn_factor = 1.0f};
    for (int th = 1; th <= 2; th++) {
        struct backend *b = make_backend(NULL, th);
        struct backend_weight *w = f32_weight(b, g, dim);
        float *y = malloc(3 * n * sizeof(float));
        ck_assert_int_eq(b->ops->rmsnorm(b, x, w, y, nt, dim, 1e-5f), 0);
        memcpy(y + n, x, n * sizeof(float));
        ck_assert_int_eq(b->ops->rope(b, y + n, pos, nt, nh, hd, &rp), 0);
        memcpy(y + 2 * n, x, n * sizeof(float));
        ck_assert_int_eq(b->ops->silu_mul(b, y + 2 * n, up, n), 0);
        /* row by row (below the parallel threshold) gives the same bits */
        for (int t = 0; t < nt; t += 23) {
            float row[768];
            ck_assert_int_eq(b->ops->rmsnorm(b, x + t * dim, w, row, 1, dim, 1e-5f), 0);
            ck_assert_mem_eq(row, y + (size_t)t * dim, sizeof(row));
            memcpy(row, x + t * dim, sizeof(row));
            ck_assert_int_eq(b->ops->rope(b, row, pos + t, 1, nh, hd, &rp), 0);
            ck_assert_mem_eq(row, y + n + (size_t)t * dim, sizeof(row));
        }
        out[th - 1] = y;
        b->ops->weight_free(b, w);
        b->ops->destroy(b);
    }
    ck_assert_mem_eq(out[0], out[1], 3 * n * sizeof(float));
    free(out[0]);
    free(out[1]);
    free(x);
    free(g);
    free(up);
}
END_TEST

START_TEST(test_rmsnorm_heads_per_row_and_f16_gain)
{
    struct backend *b = make_backend(NULL, 1);
    int hd = 64, rows = 6;
    float x[6 * 64], x0[6 * 64], g[64];
    uint16_t g16[64];
    fill_f(x, ARRAY_LEN(x));
    memcpy(x0, x, sizeof(x));
    for (int i = 0; i < hd; i++) {
        g16[i] = quant_f32_to_f16(rng_f());
        g[i] = quant_f16_to_f32(g16[i]);
    }
    struct backend_weight_desc d = {QUANT_F16, 1, hd, g16, false, false};
    struct backend_weight *w;
    ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), 0);
    ck_assert_int_eq(b->ops->rmsnorm_heads(b, x, w, rows, hd, 1e-6f), 0);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < hd; i++) ss += (double)x0[r * hd + i] * x0[r * hd + i];
        double sc = 1.0 / sqrt(ss / hd + 1e-6);
        for (int i = 0; i < hd; i++)
            ck_assert_double_eq_tol(x[r * hd + i], x0[r * hd + i] * sc * g[i], 1e-5);
    }
    ck_assert_int_eq(b->ops->rmsnorm_heads(b, x, w, rows, hd / 2, 1e-6f), ERR_INVAL);
    b->ops->weight_free(b, w);
    b->ops->destroy(b);
}
END_TEST

static void check_rope(enum backend_rope_mode mode, int head_dim, int n_rot, float scale)
{
    struct backend *b = make_backend(NULL, 1);
    int nt = 4, nh = 3;
    const int32_t pos[] = {0, 1, 17, 300};
    size_t n = (size_t)nt * nh * head_dim;
    float *x = malloc(n * sizeof(float)), *x0 = malloc(n * sizeof(float));
    fill_f(x, n);
    memcpy(x0, x, n * sizeof(float));
    struct backend_rope_params p = {.mode = mode,
                                    .n_rot = n_rot,
                                    .freq_base = 10000.0f,
                                    .freq_scale = scale,
                                    .attn_factor = 1.0f};
    ck_assert_int_eq(b->ops->rope(b, x, pos, nt, nh, head_dim, &p), 0);
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) {
            const float *in = x0 + ((size_t)t * nh + h) * head_dim;
            const float *out = x + ((size_t)t * nh + h) * head_dim;
            for (int i = 0; i < n_rot / 2; i++) {
                double th = pos[t] * pow(10000.0, -2.0 * i / n_rot) * scale;
                int a = mode == BACKEND_ROPE_NEOX ? i : 2 * i;
                int c = mode == BACKEND_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                double ra = in[a] * cos(th) - in[c] * sin(th);
                double rc = in[a] * sin(th) + in[c] * cos(th);
                ck_assert_double_eq_tol(out[a], ra, 2e-3);
                ck_assert_double_eq_tol(out[c], rc, 2e-3);
            }
            for (int i = n_rot; i < head_dim; i++) ck_assert_float_eq(out[i], in[i]);
        }
    p.n_rot = head_dim + 2;
    ck_assert_int_eq(b->ops->rope(b, x, pos, nt, nh, head_dim, &p), ERR_INVAL);
    p.n_rot = n_rot;
    p.mode = (enum backend_rope_mode)1;
    ck_assert_int_eq(b->ops->rope(b, x, pos, nt, nh, head_dim, &p), ERR_INVAL);
    free(x);
    free(x0);
    b->ops->destroy(b);
}

START_TEST(test_rope_normal_and_neox)
{
    check_rope(BACKEND_ROPE_NORMAL, 64, 64, 1.0f);
    check_rope(BACKEND_ROPE_NEOX, 64, 64, 1.0f);
    check_rope(BACKEND_ROPE_NORMAL, 48, 32, 0.25f); /* partial rotation, linear scaling */
    check_rope(BACKEND_ROPE_NEOX, 48, 16, 0.5f);
}
END_TEST

/* rope on a fresh backend: the reference for the angle table's reuse below. */
static void rope_fresh(float *x, const int32_t *pos, int nt, int nh, int hd,
                       const struct backend_rope_params *p)
{
    struct backend *b = make_backend(NULL, 1);
    ck_assert_int_eq(b->ops->rope(b, x, pos, nt, nh, hd, p), 0);
    b->ops->destroy(b);
}

/* One backend reuses a step's angles across rope calls: calls that change the positions (values or
 * count, even in place in the same buffer) or the parameters must not see stale ones. Each call's
 * result equals a fresh backend's bit for bit. */
START_TEST(test_rope_reuses_angles_only_for_the_same_positions)
{
    enum { NH = 2, HD = 32, MAXT = 40 };
    struct backend *b = make_backend(NULL, 2);
    int32_t pos[MAXT];
    struct {
        int nt, first, n_rot;
        float base, scale;
        enum backend_rope_mode mode;
    } calls[] = {
        {3, 5, 32, 10000.0f, 1.0f, BACKEND_ROPE_NORMAL},
        {3, 5, 32, 10000.0f, 1.0f, BACKEND_ROPE_NEOX},
        {3, 6, 32, 10000.0f, 1.0f, BACKEND_ROPE_NORMAL},
        {2, 6, 32, 10000.0f, 1.0f, BACKEND_ROPE_NORMAL},
        {2, 6, 16, 10000.0f, 1.0f, BACKEND_ROPE_NORMAL},
        {2, 6, 16, 500000.0f, 1.0f, BACKEND_ROPE_NORMAL},
        {2, 6, 16, 500000.0f, 0.5f, BACKEND_ROPE_NORMAL},
        {MAXT, 0, 32, 10000.0f, 1.0f, BACKEND_ROPE_NEOX},
        {3, 5, 32, 10000.0f, 1.0f, BACKEND_ROPE_NORMAL},
    };
    for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
        int nt = calls[c].nt;
        for (int t = 0; t < nt; t++)
            pos[t] = calls[c].first + 3 * t; /* the same buffer each time */
        struct backend_rope_params p = {.mode = calls[c].mode,
                                        .n_rot = calls[c].n_rot,
                                        .freq_base = calls[c].base,
                                        .freq_scale = calls[c].scale,
                                        .attn_factor = 1.0f};
        float x[MAXT * NH * HD], want[MAXT * NH * HD];
        fill_f(x, (size_t)nt * NH * HD);
        memcpy(want, x, sizeof(float) * (size_t)nt * NH * HD);
        rope_fresh(want, pos, nt, NH, HD, &p);
        ck_assert_int_eq(b->ops->rope(b, x, pos, nt, NH, HD, &p), 0);
        ck_assert_msg(memcmp(x, want, sizeof(float) * (size_t)nt * NH * HD) == 0,
                      "call %zu differs from a fresh backend's", c);
    }
    ck_assert_int_eq(b->ops->rope(b, NULL, pos, 0, NH, HD,
                                  &(struct backend_rope_params){.mode = BACKEND_ROPE_NORMAL,
                                                                .n_rot = 32,
                                                                .freq_base = 1e4f,
                                                                .freq_scale = 1.0f,
                                                                .attn_factor = 1.0f}),
                     ERR_INVAL);
    b->ops->destroy(b);
}
END_TEST

START_TEST(test_silu_mul_every_level_wide_range)
{
    float g0[203], up[203], g[203];
    for (int i = 0; i < 203; i++) {
        g0[i] = (float)(i - 101) * 1.19f; /* -120 .. 120: exp overflow and underflow */
        up[i] = rng_f();
    }
    g0[0] = -1000.0f;
    g0[202] = 1000.0f;
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        struct backend *b = make_backend(isa_levels[li], 1);
        if (!b) continue;
        memcpy(g, g0, sizeof(g));
        ck_assert_int_eq(b->ops->silu_mul(b, g, up, 203), 0);
        /* an element's result does not depend on the array length (vector body vs tail) */
        for (size_t n = 1; n <= 17; n++) {
            float part[17];
            memcpy(part, g0 + 90, n * sizeof(float));
            ck_assert_int_eq(b->ops->silu_mul(b, part, up + 90, n), 0);
            ck_assert_mem_eq(part, g + 90, n * sizeof(float));
        }
        for (int i = 0; i < 203; i++) {
            double ref = g0[i] / (1.0 + exp(-(double)g0[i])) * up[i];
            ck_assert_msg(fabs(g[i] - ref) <= 1e-6 * fabs(ref) + 1e-30, "isa %s g=%g: %g vs %g",
                          isa_levels[li], g0[i], g[i], ref);
        }
        b->ops->destroy(b);
    }
}
END_TEST

START_TEST(test_silu_mul_add_bias_gather)
{
    struct backend *b = make_backend(NULL, 2);
    float gate[50], up[50], g0[50], x[50], y[50], y0[50];
    fill_f(gate, 50);
    fill_f(up, 50);
    fill_f(x, 50);
    fill_f(y, 50);
    memcpy(g0, gate, sizeof(g0));
    memcpy(y0, y, sizeof(y0));
    ck_assert_int_eq(b->ops->silu_mul(b, gate, up, 50), 0);
    for (int i = 0; i < 50; i++)
        ck_assert_double_eq_tol(gate[i], g0[i] / (1.0 + exp(-g0[i])) * up[i], 1e-6);
    ck_assert_int_eq(b->ops->add(b, y, x, 50), 0);
    for (int i = 0; i < 50; i++) ck_assert_float_eq(y[i], y0[i] + x[i]);

    float bias[10];
    fill_f(bias, 10);
    struct backend_weight *w = f32_weight(b, bias, 10);
    memcpy(y0, y, sizeof(y0));
    ck_assert_int_eq(b->ops->add_bias(b, y, w, 5), 0);
    for (int i = 0; i < 50; i++) ck_assert_float_eq(y[i], y0[i] + bias[i % 10]);
    b->ops->weight_free(b, w);

    const int32_t idx[] = {4, 0, 4};
    float dst[3 * 10];
    ck_assert_int_eq(b->ops->gather_rows(b, y, idx, 3, 10, dst), 0);
    ck_assert_mem_eq(dst, y + 40, 10 * sizeof(float));
    ck_assert_mem_eq(dst + 10, y, 10 * sizeof(float));
    ck_assert_mem_eq(dst + 20, y + 40, 10 * sizeof(float));
    const int32_t bad[] = {-1};
    ck_assert_int_eq(b->ops->gather_rows(b, y, bad, 1, 10, dst), ERR_RANGE);
    b->ops->destroy(b);
}
END_TEST

/* ---- KV cache and attention --------------------------------------------------------------- */

#define ATT_BS 16

struct att_scene {
    int n_kv, group, hd, n_seqs, max_blocks;
    int len[3]; /* tokens of each sequence already in the cache after the step */
    int32_t tab[3 * 8];
    float *k, *v; /* (n_seqs, 8 * ATT_BS, n_kv * hd) the full K/V history per sequence */
};

static void scene_init(struct att_scene *s, int n_kv, int group, int hd)
{
    memset(s, 0, sizeof(*s));
    s->n_kv = n_kv;
    s->group = group;
    s->hd = hd;
    s->n_seqs = 3;
    s->max_blocks = 8;
    s->len[0] = 41; /* spans 3 blocks, decodes one token */
    s->len[1] = 20; /* prefill of 20 tokens across a block boundary */
    s->len[2] = 35; /* 5 new tokens after 30 cached */
    /* scrambled physical blocks, disjoint between sequences */
    const int32_t phys[] = {7,  2,  11, 0,  5,  9,  3,  12, 1,  8,  4,  6,
                            10, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
    memcpy(s->tab, phys, sizeof(s->tab));
    size_t n = (size_t)s->n_seqs * 8 * ATT_BS * n_kv * hd;
    s->k = malloc(n * sizeof(float));
    s->v = malloc(n * sizeof(float));
    fill_f(s->k, n);
    fill_f(s->v, n);
}

static void scene_fini(struct att_scene *s)
{
    free(s->k);
    free(s->v);
}

static const float *scene_row(const struct att_scene *s, const float *kv, int seq, int p)
{
    return kv + ((size_t)seq * 8 * ATT_BS + p) * s->n_kv * s->hd;
}

/* Stores positions [from, to) of `seq` through kv_store, one call for the range. */
static void scene_store(struct backend *b, const struct att_scene *s, int layer, int seq, int from,
                        int to, int f16)
{
    int n = to - from, row = s->n_kv * s->hd;
    int32_t *pos = malloc(sizeof(int32_t) * n), *sq = malloc(sizeof(int32_t) * n);
    int64_t *slots = malloc(sizeof(int64_t) * n);
    float *k = malloc(sizeof(float) * n * row), *v = malloc(sizeof(float) * n * row);
    for (int i = 0; i < n; i++) {
        int p = from + i;
        pos[i] = p;
        sq[i] = seq;
        slots[i] = (int64_t)s->tab[seq * 8 + p / ATT_BS] * ATT_BS + p % ATT_BS;
        memcpy(k + (size_t)i * row, scene_row(s, s->k, seq, p), sizeof(float) * row);
        memcpy(v + (size_t)i * row, scene_row(s, s->v, seq, p), sizeof(float) * row);
    }
    (void)f16;
    struct backend_batch bt = {.n_tokens = n,
                               .pos = pos,
                               .seq = sq,
                               .block_tables = s->tab,
                               .n_seqs = s->n_seqs,
                               .max_blocks = 8,
                               .slots = slots};
    ck_assert_int_eq(b->ops->kv_store(b, layer, k, v, &bt), 0);
    free(pos);
    free(sq);
    free(slots);
    free(k);
    free(v);
}

/* Cache kinds of the attention tests (the `f16` argument): 0 F32, 1 F16, 2 Q8_0. */
enum { KV_KIND_F32, KV_KIND_F16, KV_KIND_Q8_0 };

/* With an F16 cache the backend follows llama.cpp: K, V, q and the normalized probabilities are
 * rounded to f16 before the products. */
static double kv_round(double x, int f16)
{
    return f16 == KV_KIND_F16 ? quant_f16_to_f32(quant_f32_to_f16((float)x)) : x;
}

/* A copy of a scene's K or V history with every KV head's row replaced by its Q8_0 round trip
 * (the activation quantizer, as ggml-cpu's set_rows quantizes llama.cpp's cache): what a Q8_0 cache
 * holds. */
static float *q8_round_trip(const struct att_scene *s, const float *kv)
{
    size_t rows = (size_t)s->n_seqs * 8 * ATT_BS * s->n_kv;
    float *out = malloc(sizeof(float) * rows * s->hd);
    int8_t *qs = malloc((size_t)s->hd);
    int nb = s->hd / QUANT_QK8_0;
    float d[8], s1[8];
    int32_t sum[8];
    ck_assert_int_le(nb, 8);
    for (size_t r = 0; r < rows; r++) {
        cpu_quant_q8_0_row(kv + r * s->hd, s->hd, qs, d, sum, s1);
        for (int i = 0; i < s->hd; i++) out[r * s->hd + i] = (float)qs[i] * d[i / QUANT_QK8_0];
    }
    free(qs);
    return out;
}

/* The step: seq0 token at 40, seq1 tokens 0..19, seq2 tokens 30..34; interleaved in the batch, or
 * each sequence's tokens contiguous (prefill chunks longer than one work item). */
static int scene_batch(int contiguous, int32_t *pos, int32_t *seq)
{
    int n = 0;
    if (contiguous) {
        for (int p = 0; p < 20; p++) pos[n] = p, seq[n++] = 1;
        pos[n] = 40, seq[n++] = 0;
        for (int p = 30; p < 35; p++) pos[n] = p, seq[n++] = 2;
        return n;
    }
    for (int p = 0; p < 20; p++) {
        if (p == 3) pos[n] = 40, seq[n++] = 0;
        if (p < 5) pos[n] = 30 + p, seq[n++] = 2;
        pos[n] = p, seq[n++] = 1;
    }
    return n;
}

static float *scene_attention(const char *isa, int n_threads, const struct att_scene *s, int f16,
                              const float *q, int nt, const int32_t *pos, const int32_t *seq)
{
    struct backend *b = make_backend(isa, n_threads);
    if (!b) return NULL;
    enum quant_type kt = f16 == KV_KIND_F16    ? QUANT_F16
                         : f16 == KV_KIND_Q8_0 ? QUANT_Q8_0
                                               : QUANT_F32;
    struct backend_kv_desc kd = {2, 32, ATT_BS, s->n_kv, s->hd, kt};
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
    for (int sq = 0; sq < s->n_seqs; sq++) scene_store(b, s, 1, sq, 0, s->len[sq], f16);
    int nh = s->n_kv * s->group;
    float *out = malloc(sizeof(float) * nt * nh * s->hd);
    struct backend_batch bt = {.n_tokens = nt,
                               .pos = pos,
                               .seq = seq,
                               .block_tables = s->tab,
                               .n_seqs = s->n_seqs,
                               .max_blocks = s->max_blocks};
    ck_assert_int_eq(
        b->ops->attention(b, 1, q, out, &bt, nh, ATTN_SCALE(1.0f / sqrtf((float)s->hd))), 0);
    b->ops->kv_free(b);
    b->ops->destroy(b);
    return out;
}

static void check_attention(int n_kv, int group, int hd, int f16, int contiguous)
{
    struct att_scene s;
    scene_init(&s, n_kv, group, hd);
    int32_t pos[32], seq[32];
    int nt = scene_batch(contiguous, pos, seq), nh = n_kv * group;
    float *q = malloc(sizeof(float) * nt * nh * hd);
    fill_f(q, (size_t)nt * nh * hd);
    for (size_t i = 0; i < (size_t)nt * nh * hd; i++) q[i] *= 3.0f; /* peaky softmax */
    float *ref_scalar = scene_attention("scalar", 1, &s, f16, q, nt, pos, seq);
    double scale = 1.0 / sqrt((double)hd);
    /* the values the cache holds */
    float *kc = f16 == KV_KIND_Q8_0 ? q8_round_trip(&s, s.k) : s.k;
    float *vc = f16 == KV_KIND_Q8_0 ? q8_round_trip(&s, s.v) : s.v;
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        for (int th = 1; th <= 2; th++) {
            float *out = scene_attention(isa_levels[li], th, &s, f16, q, nt, pos, seq);
            if (!out) continue;
            for (int t = 0; t < nt; t++)
                for (int h = 0; h < nh; h++) {
                    int kvh = h / group, n_ctx = pos[t] + 1;
                    const float *qh = q + ((size_t)t * nh + h) * hd;
                    double *w = malloc(sizeof(double) * n_ctx), mx = -INFINITY, sum = 0;
                    for (int p = 0; p < n_ctx; p++) {
                        const float *kr = scene_row(&s, kc, seq[t], p) + kvh * hd;
                        double d = 0;
                        for (int i = 0; i < hd; i++)
                            d += kv_round(qh[i], f16) * kv_round(kr[i], f16);
                        w[p] = d * scale;
                        mx = fmax(mx, w[p]);
                    }
                    for (int p = 0; p < n_ctx; p++) sum += (w[p] = exp(w[p] - mx));
                    for (int i = 0; i < hd; i++) {
                        double o = 0;
                        for (int p = 0; p < n_ctx; p++)
                            o += kv_round(w[p] / sum, f16) *
                                 kv_round(scene_row(&s, vc, seq[t], p)[kvh * hd + i], f16);
                        float got = out[((size_t)t * nh + h) * hd + i];
                        ck_assert_msg(fabs(got - o) < 1e-4,
                                      "isa %s kv %d group %d f16 %d: t %d h %d i %d: %g vs %g",
                                      isa_levels[li], n_kv, group, f16, t, h, i, got, o);
                        ck_assert(fabs(got - ref_scalar[((size_t)t * nh + h) * hd + i]) < 1e-5);
                    }
                    free(w);
                }
            free(out);
        }
    }
    if (kc != s.k) free(kc);
    if (vc != s.v) free(vc);
    free(ref_scalar);
    free(q);
    scene_fini(&s);
}

START_TEST(test_attention_gqa_ratios)
{
    check_attention(2, 1, 64, 0, 0);
    check_attention(2, 2, 64, 0, 0);
    check_attention(1, 4, 40, 0, 0);
    check_attention(3, 4, 128, 0, 0);
    /* contiguous prefill: multi-token items (16 rows of one head, 4 tokens x 4 heads, ...) */
    check_attention(2, 1, 64, 0, 1);
    check_attention(1, 4, 72, 0, 1);
    check_attention(1, 20, 16, 0, 1); /* group > 16 rows: heads split across items */
    check_attention(2, 3, 33, 0, 1);  /* odd head_dim and group */
}
END_TEST

/* Every token's attention is bit-identical alone and in a batch, whatever item shape the batch
 * gives it: alone a decoding token's KV heads are split one per item, beside other sequences' tokens
 * one item covers several KV heads, and a prefill token shares an item of up to 16 rows with its
 * neighbours (the transposed score kernel) or, at a chunk's end, takes the few-row kernel. */
static void check_alone_equals_batched(const struct att_scene *s, int f16, int nt,
                                       const int32_t *pos, const int32_t *seq)
{
    size_t per_token = (size_t)s->n_kv * s->group * s->hd;
    float *q = malloc(sizeof(float) * nt * per_token);
    fill_f(q, (size_t)nt * per_token);
    for (size_t i = 0; i < nt * per_token; i++) q[i] *= 3.0f; /* peaky softmax */
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        float *all = scene_attention(isa_levels[li], 1, s, f16, q, nt, pos, seq);
        if (!all) continue;
        for (int t = 0; t < nt; t++) {
            float *one =
                scene_attention(isa_levels[li], 1, s, f16, q + t * per_token, 1, &pos[t], &seq[t]);
            ck_assert_msg(memcmp(one, all + t * per_token, sizeof(float) * per_token) == 0,
                          "isa %s kv %d group %d hd %d f16 %d: token %d (pos %d) differs alone",
                          isa_levels[li], s->n_kv, s->group, s->hd, f16, t, pos[t]);
            free(one);
        }
        free(all);
    }
    free(q);
}

static void check_attention_alone_equals_batched(int n_kv, int group, int hd, int f16)
{
    struct att_scene s;
    scene_init(&s, n_kv, group, hd);
    int32_t dpos[3] = {40, 19, 34}, dseq[3] = {0, 1, 2}; /* each sequence's last cached token */
    check_alone_equals_batched(&s, f16, 3, dpos, dseq);
    int32_t pos[32], seq[32];
    for (int contiguous = 0; contiguous <= 1; contiguous++) {
        int nt = scene_batch(contiguous, pos, seq);
        check_alone_equals_batched(&s, f16, nt, pos, seq);
    }
    scene_fini(&s);
}

START_TEST(test_attention_alone_equals_batched)
{
    check_attention_alone_equals_batched(6, 1, 64, 1);
    check_attention_alone_equals_batched(6, 1, 64, 0);
    check_attention_alone_equals_batched(4, 2, 96, 1);
    check_attention_alone_equals_batched(3, 4, 64, 0);
    check_attention_alone_equals_batched(2, 1, 40, 0); /* head_dim tails: 40 = 2 x 16 + 8 */
    check_attention_alone_equals_batched(2, 2, 68, 1); /* 68 = 8 x 8 + 4 (AVX2 scalar tail) */
    /* decode items of several KV heads: the head-by-head score kernel for widths 64 and 128, the
     * position-by-position one for other widths */
    check_attention_alone_equals_batched(5, 1, 128, 1);
    check_attention_alone_equals_batched(3, 1, 96, 1);
    check_attention_alone_equals_batched(3, 1, 48, 1);
}
END_TEST

/* A Q8_0 cache: K/V rows quantized per 32 at kv_store and read at their exact dequantized values,
 * by the few-row kernels in registers and by the conversion pass elsewhere (the same bits). */
START_TEST(test_attention_q8_0_cache)
{
    check_attention(2, 2, 64, KV_KIND_Q8_0, 0);
    check_attention(1, 4, 32, KV_KIND_Q8_0, 1);
    check_attention(4, 1, 96, KV_KIND_Q8_0, 1); /* a 64-column P @ V pass with a masked tail */
    check_attention_alone_equals_batched(6, 1, 64, KV_KIND_Q8_0);
    check_attention_alone_equals_batched(5, 1, 128, KV_KIND_Q8_0);
    check_attention_alone_equals_batched(2, 4, 96, KV_KIND_Q8_0);
}
END_TEST

START_TEST(test_attention_f16_cache)
{
    check_attention(2, 2, 64, 1, 0);
    check_attention(1, 4, 24, 1, 1);
    check_attention(4, 1, 80, 1, 1);
}
END_TEST

START_TEST(test_kv_copy_block_copies_every_layer)
{
    const enum quant_type types[] = {QUANT_F32, QUANT_F16, QUANT_Q8_0};
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        struct att_scene s;
        scene_init(&s, 2, 2, 32);
        struct backend *b = make_backend(NULL, 2);
        struct backend_kv_desc kd = {2, 32, ATT_BS, 2, 32, types[ti]};
        ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
        for (int layer = 0; layer < 2; layer++) scene_store(b, &s, layer, 0, 0, 41, 0);
        /* copy block 2 of seq 0 (physical 11) to physical 30, then attend through either table */
        ck_assert_int_eq(b->ops->kv_copy_block(b, 11, 30), 0);
        int32_t tab2[8];
        memcpy(tab2, s.tab, sizeof(tab2));
        tab2[2] = 30;
        float q[4 * 32], o1[4 * 32], o2[4 * 32], o3[4 * 32];
        fill_f(q, ARRAY_LEN(q));
        int32_t pos[] = {40}, seq[] = {0};
        for (int layer = 0; layer < 2; layer++) {
            struct backend_batch bt = {1, pos, seq, s.tab, 1, 8, NULL};
            ck_assert_int_eq(b->ops->attention(b, layer, q, o1, &bt, 4, ATTN_SCALE(0.2f)), 0);
            bt.block_tables = tab2;
            ck_assert_int_eq(b->ops->attention(b, layer, q, o2, &bt, 4, ATTN_SCALE(0.2f)), 0);
            ck_assert_mem_eq(o1, o2, sizeof(o1));
            tab2[2] = 29; /* never written: the copy is what made o2 right */
            ck_assert_int_eq(b->ops->attention(b, layer, q, o3, &bt, 4, ATTN_SCALE(0.2f)), 0);
            ck_assert(memcmp(o1, o3, sizeof(o1)) != 0);
            tab2[2] = 30;
        }
        ck_assert_int_eq(b->ops->kv_copy_block(b, 11, 32), ERR_RANGE);
        ck_assert_int_eq(b->ops->kv_copy_block(b, -1, 3), ERR_RANGE);
        b->ops->destroy(b); /* frees the cache too */
        scene_fini(&s);
    }
}
END_TEST

/* A Q8_0 cache needs whole 32-element blocks per head; unknown element types are refused. */
START_TEST(test_kv_alloc_rejects_unsupported_types)
{
    struct backend *b = make_backend(NULL, 1);
    struct backend_kv_desc q8_40 = {1, 4, ATT_BS, 1, 40, QUANT_Q8_0};
    ck_assert_int_eq(b->ops->kv_alloc(b, &q8_40), ERR_UNSUPPORTED);
    struct backend_kv_desc q4 = {1, 4, ATT_BS, 1, 64, QUANT_Q4_0};
    ck_assert_int_eq(b->ops->kv_alloc(b, &q4), ERR_UNSUPPORTED);
    struct backend_kv_desc q8_64 = {1, 4, ATT_BS, 1, 64, QUANT_Q8_0};
    ck_assert_int_eq(b->ops->kv_alloc(b, &q8_64), 0);
    b->ops->destroy(b);
}
END_TEST

START_TEST(test_attention_rejects_bad_batches)
{
    struct backend *b = make_backend(NULL, 1);
    float q[4 * 16] = {0}, out[4 * 16], k[2 * 16] = {0};
    int32_t pos[] = {3}, seq[] = {0}, tab[] = {0, 1};
    int64_t slots[] = {3};
    struct backend_batch bt = {1, pos, seq, tab, 1, 2, slots};
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), ERR_BAD_STATE);
    ck_assert_int_eq(b->ops->kv_store(b, 0, k, k, &bt), ERR_BAD_STATE);
    struct backend_kv_desc kd = {1, 4, 4, 2, 16, QUANT_F32};
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
    ck_assert_int_eq(b->ops->kv_store(b, 0, k, k, &bt), 0);
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), 0);
    ck_assert_int_eq(b->ops->attention(b, 1, q, out, &bt, 4, ATTN_SCALE(1.0f)),
                     ERR_INVAL); /* layer */
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 3, ATTN_SCALE(1.0f)),
                     ERR_INVAL); /* heads */
    slots[0] = 16;
    ck_assert_int_eq(b->ops->kv_store(b, 0, k, k, &bt), ERR_RANGE);
    pos[0] = 8; /* needs a third block */
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), ERR_RANGE);
    pos[0] = -1;
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), ERR_RANGE);
    pos[0] = 5;
    tab[1] = 4; /* physical block out of range */
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), ERR_RANGE);
    tab[1] = 1;
    seq[0] = 1;
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 4, ATTN_SCALE(1.0f)), ERR_RANGE);
    kd.type = QUANT_Q8_0;
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), ERR_UNSUPPORTED);
    kd.type = QUANT_F32;
    kd.n_blocks = INT32_MAX;
    kd.n_layers = INT32_MAX;
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), ERR_TOO_BIG);
    b->ops->destroy(b);
}
END_TEST

/* ---- backend creation, memory, thread pool ------------------------------------------------ */

START_TEST(test_backend_create_names_and_options)
{
    struct backend *b = NULL;
    ck_assert_int_eq(backend_create("nope", NULL, &b), ERR_NOT_FOUND);
#ifndef CINFER_CUDA
    ck_assert_int_eq(backend_create("cuda", NULL, &b), ERR_UNSUPPORTED);
#endif
    struct backend_options o = {.cpu_isa = "sse9"};
    ck_assert_int_eq(backend_create("cpu", &o, &b), ERR_INVAL);
    o.cpu_isa = NULL;
    o.n_threads = -1;
    ck_assert_int_eq(backend_create("cpu", &o, &b), ERR_RANGE);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(backend_create(NULL, NULL, &b), 0);
    ck_assert_str_eq(b->ops->name, "cpu");
    unsigned char *p = b->ops->alloc(b, 100), host[100];
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 100; i++) ck_assert_uint_eq(p[i], 0);
    for (int i = 0; i < 100; i++) host[i] = (unsigned char)i;
    ck_assert_int_eq(b->ops->upload(b, p, host, 100), 0);
    memset(host, 0, sizeof(host));
    ck_assert_int_eq(b->ops->download(b, host, p, 100), 0);
    for (int i = 0; i < 100; i++) ck_assert_uint_eq(host[i], i);
    ck_assert_int_eq(b->ops->sync(b), 0);
    b->ops->free(b, p);
    b->ops->free(b, NULL);
    b->ops->destroy(b);
}
END_TEST

/* Lanes (run_lanes): every lane's matmul and rope equal the same ops run over all threads outside
 * lanes (each lane on its own scratch and rope table, side by side); n outside 1..lanes_max and
 * nested lanes are refused; a lane's error is returned. */
struct lanes_probe {
    struct backend *b;
    const struct backend_weight *w;
    const float *x;     /* (LANES_N, LANES_T, cols) inputs, one slab per lane */
    float *y;           /* (LANES_N, LANES_T, rows) */
    const int32_t *pos; /* (LANES_N, LANES_T) */
    int fail_lane;      /* this lane returns ERR_IO; -1: none */
    bool try_nesting;   /* each lane also calls run_lanes, which must refuse */
    atomic_int nested_rc;
};
enum { LANES_N = 2, LANES_T = 5, LANES_ROWS = 64, LANES_COLS = 128, LANES_HEADS = 2 };

static int lanes_probe_fn(void *ctx, int lane)
{
    struct lanes_probe *p = ctx;
    if (lane == p->fail_lane) return ERR_IO;
    if (p->try_nesting)
        atomic_store(&p->nested_rc, p->b->ops->run_lanes(p->b, 1, lanes_probe_fn, ctx));
    float *y = p->y + (size_t)lane * LANES_T * LANES_ROWS;
    int rc = p->b->ops->matmul(p->b, p->w, p->x + (size_t)lane * LANES_T * LANES_COLS, y, LANES_T);
    struct backend_rope_params rp = {.mode = BACKEND_ROPE_NORMAL,
                                     .n_rot = LANES_ROWS / LANES_HEADS,
                                     .freq_base = 10000.0f,
                                     .freq_scale = 1.0f,
                                     .attn_factor = 1.0f};
    return rc ? rc
              : p->b->ops->rope(p->b, y, p->pos + lane * LANES_T, LANES_T, LANES_HEADS,
                                LANES_ROWS / LANES_HEADS, &rp);
}

START_TEST(test_run_lanes_match_op_parallel)
{
    void *wd = random_weights(QUANT_Q8_0, LANES_ROWS, LANES_COLS);
    struct backend_weight_desc d = {QUANT_Q8_0, LANES_ROWS, LANES_COLS, wd, false, false};
    float *x = malloc(sizeof(float) * LANES_N * LANES_T * LANES_COLS);
    fill_f(x, (size_t)LANES_N * LANES_T * LANES_COLS);
    int32_t pos[LANES_N * LANES_T];
    for (int i = 0; i < LANES_N * LANES_T; i++) pos[i] = 3 * i + (i >= LANES_T ? 100 : 0);
    size_t ny = (size_t)LANES_N * LANES_T * LANES_ROWS;
    float *want = malloc(sizeof(float) * ny), *got = malloc(sizeof(float) * ny);
    for (size_t li = 0; li < ARRAY_LEN(isa_levels); li++) {
        struct backend *b = make_backend(isa_levels[li], 2);
        if (!b) continue;
        ck_assert_int_eq(b->ops->lanes_max(b), 2);
        struct backend_weight *w;
        ck_assert_int_eq(b->ops->weight_prepare(b, &d, &w), 0);
        struct lanes_probe p = {.b = b, .w = w, .x = x, .y = want, .pos = pos, .fail_lane = -1};
        for (int lane = 0; lane < LANES_N; lane++) /* outside lanes: the reference */
            ck_assert_int_eq(lanes_probe_fn(&p, lane), 0);
        p.try_nesting = true;
        for (int rep = 0; rep < 20; rep++) {
            atomic_store(&p.nested_rc, 0);
            memset(got, 0xff, sizeof(float) * ny);
            p.y = got;
            ck_assert_int_eq(b->ops->run_lanes(b, LANES_N, lanes_probe_fn, &p), 0);
            ck_assert_int_eq(atomic_load(&p.nested_rc), ERR_BAD_STATE);
            ck_assert_msg(memcmp(got, want, sizeof(float) * ny) == 0, "isa %s rep %d",
                          isa_levels[li], rep);
        }
        p.fail_lane = 1;
        ck_assert_int_eq(b->ops->run_lanes(b, LANES_N, lanes_probe_fn, &p), ERR_IO);
        ck_assert_int_eq(b->ops->run_lanes(b, 0, lanes_probe_fn, &p), ERR_INVAL);
        ck_assert_int_eq(b->ops->run_lanes(b, 3, lanes_probe_fn, &p), ERR_INVAL);
        ck_assert_int_eq(b->ops->run_lanes(b, 1, NULL, &p), ERR_INVAL);
        b->ops->weight_free(b, w);
        b->ops->destroy(b);
    }
    free(want);
    free(got);
    free(x);
    free(wd);
}
END_TEST

struct pool_probe {
    atomic_int next;
    atomic_int hits[997];
    atomic_int callers[4]; /* calls per ith */
    int caller_ran;
};

static void pool_probe_fn(void *ctx, int ith, int nth)
{
    struct pool_probe *p = ctx;
    ck_assert(ith >= 0 && ith < nth && nth <= 4);
    atomic_fetch_add(&p->callers[ith], 1);
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < 997;) atomic_fetch_add(&p->hits[i], 1);
}

START_TEST(test_pool_claims_every_item_once)
{
    for (int n = 1; n <= 4; n++) {
        struct cpu_pool *pool;
        ck_assert_int_eq(cpu_pool_new(n, &pool), 0);
        ck_assert_int_eq(cpu_pool_size(pool), n);
        for (int rep = 0; rep < 2000; rep++) {
            static struct pool_probe pr;
            memset(&pr, 0, sizeof(pr));
            cpu_pool_run(pool, pool_probe_fn, &pr);
            for (int i = 0; i < 997; i++) ck_assert_int_eq(atomic_load(&pr.hits[i]), 1);
            ck_assert_int_eq(atomic_load(&pr.callers[0]), 1); /* the caller always runs */
            for (int t = 1; t < 4; t++) ck_assert_int_le(atomic_load(&pr.callers[t]), 1);
        }
        cpu_pool_free(pool);
    }
    ck_assert_int_eq(cpu_pool_new(0, &(struct cpu_pool *){NULL}), ERR_INVAL);
}
END_TEST

START_TEST(test_bench_rejects_bad_arguments)
{
    char *a1[] = {"bench-kernels", "--threads", "x"};
    char *a2[] = {"bench-kernels", "--threads", "-3"};
    char *a3[] = {"bench-kernels", "--bogus"};
    char *a4[] = {"bench-kernels", "--threads"};
    char *a5[] = {"bench-kernels", "--isa", "sse9"};
    char *a6[] = {"bench-kernels", "--types", "q4_K,q9_Z"};
    char *a7[] = {"bench-kernels", "--types", "q4_K,,f32"};
    ck_assert_int_eq(cmd_bench_kernels_main(3, a6), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(3, a7), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(3, a1), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(3, a2), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(2, a3), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(2, a4), 2);
    ck_assert_int_eq(cmd_bench_kernels_main(3, a5), 1);
}
END_TEST

START_TEST(test_isa_parse)
{
    enum cpu_isa isa;
    ck_assert_int_eq(cpu_isa_parse("scalar", &isa), 0);
    ck_assert_int_eq(isa, CPU_ISA_SCALAR);
    ck_assert_int_eq(cpu_isa_parse(NULL, &isa), 0);
    ck_assert_int_eq(isa, cpu_isa_detect());
    ck_assert_int_eq(cpu_isa_parse("AVX2x", &isa), ERR_INVAL);
    ck_assert_str_eq(cpu_isa_name(CPU_ISA_AVX512), "avx512");
}
END_TEST

Suite *backend_cpu_suite(void)
{
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_backend_create_names_and_options);
    tcase_add_test(tc, test_run_lanes_match_op_parallel);
    tcase_add_test(tc, test_isa_parse);
    tcase_add_test(tc, test_bench_rejects_bad_arguments);
    tcase_add_test(tc, test_pool_claims_every_item_once);
    tcase_add_test(tc, test_f16_to_f32_levels_match_quant);
    tcase_add_test(tc, test_f32_to_f16_levels_match_scalar);
    tcase_add_test(tc, test_weight_prepare_rejects_bad_desc);
    tcase_add_test(tc, test_get_rows_every_type);
    tcase_add_test(tc, test_rmsnorm_matches_reference);
    tcase_add_test(tc, test_rmsnorm_heads_per_row_and_f16_gain);
    tcase_add_test(tc, test_rope_normal_and_neox);
    tcase_add_test(tc, test_rope_reuses_angles_only_for_the_same_positions);
    tcase_add_test(tc, test_small_ops_parallel_match_serial);
    tcase_add_test(tc, test_silu_mul_add_bias_gather);
    tcase_add_test(tc, test_silu_mul_every_level_wide_range);
    tcase_add_test(tc, test_quantize_q8_0_levels_agree);
    tcase_add_test(tc, test_quantize_q8_k_levels_agree);
    tcase_add_test(tc, test_attention_f16_kernels_match_widening);
    tcase_add_test(tc, test_attention_ggml_kernels_levels_match);
    tcase_add_test(tc, test_matmul_model_shapes);
    tcase_add_test(tc, test_matmul_real_tensors);
    tcase_add_test(tc, test_weight_lookup_only_and_source_untouched);
    tcase_add_loop_test(tc, test_matmul_every_type, 0, (int)ARRAY_LEN(matmul_types));
    tcase_add_test(tc, test_matmul_batch_invariant);
    tcase_add_test(tc, test_matmul_group_matches_single);
    tcase_add_test(tc, test_attention_gqa_ratios);
    tcase_add_test(tc, test_attention_alone_equals_batched);
    tcase_add_test(tc, test_attention_f16_cache);
    tcase_add_test(tc, test_attention_q8_0_cache);
    tcase_add_test(tc, test_kv_alloc_rejects_unsupported_types);
    tcase_add_test(tc, test_kv_copy_block_copies_every_layer);
    tcase_add_test(tc, test_attention_rejects_bad_batches);
    suite_add_tcase(s, tc);
    return s;
}
