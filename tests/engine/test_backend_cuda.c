/* The CUDA backend against the CPU backend, op by op, in the style of ggml's test-backend-ops:
 * every op of backend.h, every weight type and KV type, odd shapes (1 token, partly filled blocks,
 * GQA ratios, head sizes 64 to 256), each output compared by its normalized mean squared error
 * NMSE = sum (cuda - cpu)^2 / sum cpu^2 with a bound per op (justified where it is set).
 *
 * Without a GPU (or in a build without CUDA=1) every device check prints SKIP naming what is
 * missing; the host check of the kernels' block decoder (cuda_quant.cuh compiled for the host)
 * runs wherever the backend is built, so `make test` verifies the decoding formulas of every
 * quantized type without a device. */
#include "common/err.h"
#include "engine/backend/backend.h"
#include "engine/gguf/quant.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/tools/gen_model.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CINFER_CUDA
/* engine/backend/cuda/cuda_matmul.cu (the header includes CUDA's, which tests do not see) */
int cuda_host_dequant_row(enum quant_type type, const void *row, float *dst, int n);
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1). */
static float rng_f(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 16) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static float *rand_floats(size_t n, float scale)
{
    float *x = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_f();
    return x;
}

static const enum quant_type all_types[] = {
    QUANT_F32,  QUANT_F16,  QUANT_BF16,   QUANT_Q4_0,   QUANT_Q4_1, QUANT_Q5_0,
    QUANT_Q5_1, QUANT_Q8_0, QUANT_Q2_K,   QUANT_Q3_K,   QUANT_Q4_K, QUANT_Q5_K,
    QUANT_Q6_K, QUANT_Q8_K, QUANT_IQ4_NL, QUANT_IQ4_XS,
};
#define N_TYPES (sizeof(all_types) / sizeof(all_types[0]))

/* rows of `cols` random floats encoded as `type` (quant.c's encoder, llama.cpp's bytes) */
static void *rand_weight(enum quant_type type, int rows, int cols, size_t *row_bytes)
{
    *row_bytes = quant_row_bytes(type, (uint64_t)cols);
    ck_assert_uint_gt(*row_bytes, 0);
    char *w = malloc(*row_bytes * (size_t)rows);
    float *f = rand_floats((size_t)cols, 1.0f);
    ck_assert_ptr_nonnull(w);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < cols; i++) f[i] = rng_f();
        ck_assert_int_eq(quant_quantize_row(type, f, w + (size_t)r * *row_bytes, (size_t)cols), 0);
    }
    free(f);
    return w;
}

/* ---- the decoder on the host (no device needed) ------------------------------------------------- */

START_TEST(test_cuda_decoder_matches_quant_c)
{
#ifndef CINFER_CUDA
    test_skip("built without CUDA=1: the CUDA decoder is not compiled in this build");
#else
    enum { COLS = 512 };
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum quant_type t = all_types[ti];
        size_t rb;
        void *w = rand_weight(t, 3, COLS, &rb);
        float want[COLS], got[COLS];
        for (int r = 0; r < 3; r++) {
            const char *row = (const char *)w + (size_t)r * rb;
            quant_dequantize_row(t, row, want, COLS);
            ck_assert_int_eq(cuda_host_dequant_row(t, row, got, COLS), 0);
            for (int i = 0; i < COLS; i++)
                ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                              "%s row %d elem %d: cuda %.9g quant.c %.9g", quant_type_name(t), r, i,
                              got[i], want[i]);
        }
        free(w);
    }
    /* float rows whose length is no multiple of 8 are read element by element */
    const enum quant_type ft[] = {QUANT_F32, QUANT_F16, QUANT_BF16};
    for (size_t ti = 0; ti < 3; ti++) {
        size_t rb;
        void *w = rand_weight(ft[ti], 1, 13, &rb);
        float want[13], got[13];
        quant_dequantize_row(ft[ti], w, want, 13);
        ck_assert_int_eq(cuda_host_dequant_row(ft[ti], w, got, 13), 0);
        ck_assert_int_eq(memcmp(got, want, sizeof(got)), 0);
        free(w);
    }
    float dummy[32];
    char blk[64] = {0};
    ck_assert_int_eq(cuda_host_dequant_row((enum quant_type)4, blk, dummy, 32), ERR_UNSUPPORTED);
#endif
}
END_TEST

/* ---- device fixtures ---------------------------------------------------------------------------- */

/* The CUDA backend, or NULL after test_skip() naming why there is none (the backend's log line,
 * printed just before, says which: no driver library, no device, or the runtime's error). */
static struct backend *gpu_backend(void)
{
#ifndef CINFER_CUDA
    test_skip("built without CUDA=1 (make test also builds build-cuda/ when a toolkit is there)");
    return NULL;
#else
    struct backend_options o = {0};
    struct backend *g = NULL;
    int rc = backend_create("cuda", &o, &g);
    if (rc == ERR_UNSUPPORTED) {
        test_skip("no usable CUDA GPU (no NVIDIA driver or no device; see the log line above)");
        return NULL;
    }
    ck_assert_msg(rc == 0, "cuda backend: %s", err_str(rc));
    ck_assert_str_eq(g->ops->name, "cuda");
    return g;
#endif
}

static struct backend *cpu_backend(void)
{
    struct backend_options o = {.n_threads = 2};
    struct backend *c = NULL;
    ck_assert_int_eq(backend_create("cpu", &o, &c), 0);
    return c;
}

/* Backend memory holding a copy of the host floats, or zeros for h NULL (n may be 0). */
static float *put(struct backend *b, const float *h, size_t n)
{
    float *d = b->ops->alloc(b, (n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(d);
    if (n && h) ck_assert_int_eq(b->ops->upload(b, d, h, n * sizeof(float)), 0);
    return d;
}

static float *get(struct backend *b, const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(b->ops->download(b, h, d, n * sizeof(float)), 0);
    return h;
}

static double nmse(const float *got, const float *want, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        if (!isfinite(got[i])) return INFINITY;
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0.0 ? num / den : num;
}

#define ASSERT_NMSE(got, want, n, bound, fmt, ...)                                                 \
    do {                                                                                           \
        double e_ = nmse(got, want, n);                                                            \
        ck_assert_msg(e_ <= (bound), fmt ": nmse %.3g > %.3g", __VA_ARGS__, e_, (double)(bound));  \
    } while (0)

/* Both backends, a pair of buffers of one host array on each, and the two results. */
struct pair {
    struct backend *c, *g;
};

static bool pair_open(struct pair *p)
{
    p->g = gpu_backend();
    if (!p->g) return false;
    p->c = cpu_backend();
    return true;
}

static void pair_close(struct pair *p)
{
    p->g->ops->destroy(p->g);
    p->c->ops->destroy(p->c);
}

/* Prepared weights on both backends (the host bytes must outlive them). */
static void weight_both(struct pair *p, const struct backend_weight_desc *d,
                        struct backend_weight **wc, struct backend_weight **wg)
{
    ck_assert_int_eq(p->c->ops->weight_prepare(p->c, d, wc), 0);
    ck_assert_int_eq(p->g->ops->weight_prepare(p->g, d, wg), 0);
}

/* ---- matmul and get_rows ----------------------------------------------------------------------- */

/* matmul against the CPU for every type and token counts on both sides of the mat-vec limit (8)
 * and above it (cuBLAS with f16 activations). Bounds: the CPU multiplies quantized weights with
 * activations quantized to Q8_0/Q8_K (relative error about 2^-8 per element), CUDA with float or
 * f16 activations, so their results differ by that rounding: ggml's test-backend-ops allows NMSE
 * 5e-4 for quantized mat-muls; we allow the same. F16/BF16 weights: the CPU converts rows to
 * float, CUDA's cuBLAS path rounds activations to f16 (2^-11) or bf16 (2^-8): 1e-4. F32: float
 * against float (no TF32), different summation orders only: 1e-9. */
START_TEST(test_cuda_matmul_every_type)
{
    struct pair p;
    if (!pair_open(&p)) return;
    const int ntoks[] = {1, 3, 8, 9, 40};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum quant_type t = all_types[ti];
        /* one row: a gate vector (Qwen2-MoE's shared-expert gate is a 1 x dim matmul) */
        const int shapes[][2] = {{67, 512}, {5, 256}, {1, 256}, {33, 100}, {1, 100}};
        for (int si = 0; si < 5; si++) {
            int rows = shapes[si][0], cols = shapes[si][1];
            if (cols % 256 != 0 && quant_block_elems(t) > 1) continue; /* whole blocks */
            size_t rb;
            void *wd = rand_weight(t, rows, cols, &rb);
            struct backend_weight_desc d = {.type = t, .rows = rows, .cols = cols, .data = wd};
            struct backend_weight *wc, *wg;
            weight_both(&p, &d, &wc, &wg);
            for (size_t ni = 0; ni < sizeof(ntoks) / sizeof(ntoks[0]); ni++) {
                int nt = ntoks[ni];
                float *x = rand_floats((size_t)nt * cols, 1.0f);
                float *xc = put(p.c, x, (size_t)nt * cols), *xg = put(p.g, x, (size_t)nt * cols);
                float *yc = put(p.c, NULL, (size_t)nt * rows),
                      *yg = put(p.g, NULL, (size_t)nt * rows);
                ck_assert_int_eq(p.c->ops->matmul(p.c, wc, xc, yc, nt), 0);
                ck_assert_int_eq(p.g->ops->matmul(p.g, wg, xg, yg, nt), 0);
                float *hc = get(p.c, yc, (size_t)nt * rows), *hg = get(p.g, yg, (size_t)nt * rows);
                double bound = t == QUANT_F32                      ? 1e-9
                               : t == QUANT_F16 || t == QUANT_BF16 ? 1e-4
                                                                   : 5e-4;
                ASSERT_NMSE(hg, hc, (size_t)nt * rows, bound, "%s %dx%d nt %d", quant_type_name(t),
                            rows, cols, nt);
                free(hc);
                free(hg);
                free(x);
                p.c->ops->free(p.c, xc);
                p.c->ops->free(p.c, yc);
                p.g->ops->free(p.g, xg);
                p.g->ops->free(p.g, yg);
            }
            p.c->ops->weight_free(p.c, wc);
            p.g->ops->weight_free(p.g, wg);
            free(wd);
        }
    }
    pair_close(&p);
}
END_TEST

/* get_rows decodes the same values (the decoder is exact, see the host check): 1e-12. */
START_TEST(test_cuda_get_rows_every_type)
{
    struct pair p;
    if (!pair_open(&p)) return;
    enum { ROWS = 40, COLS = 256, N = 5 };
    const int32_t ids[N] = {0, 39, 7, 7, 12};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        enum quant_type t = all_types[ti];
        size_t rb;
        void *wd = rand_weight(t, ROWS, COLS, &rb);
        struct backend_weight_desc d = {
            .type = t, .rows = ROWS, .cols = COLS, .data = wd, .lookup_only = true};
        struct backend_weight *wc, *wg;
        weight_both(&p, &d, &wc, &wg);
        float *oc = put(p.c, NULL, N * COLS), *og = put(p.g, NULL, N * COLS);
        ck_assert_int_eq(p.c->ops->get_rows(p.c, wc, ids, N, oc), 0);
        ck_assert_int_eq(p.g->ops->get_rows(p.g, wg, ids, N, og), 0);
        float *hc = get(p.c, oc, N * COLS), *hg = get(p.g, og, N * COLS);
        ASSERT_NMSE(hg, hc, N * COLS, 1e-12, "get_rows %s", quant_type_name(t));
        const int32_t bad[1] = {ROWS};
        ck_assert_int_eq(p.g->ops->get_rows(p.g, wg, bad, 1, og), ERR_RANGE);
        free(hc);
        free(hg);
        p.c->ops->free(p.c, oc);
        p.g->ops->free(p.g, og);
        p.c->ops->weight_free(p.c, wc);
        p.g->ops->weight_free(p.g, wg);
        free(wd);
    }
    pair_close(&p);
}
END_TEST

/* ---- elementwise and row ops -------------------------------------------------------------------- */

/* Elementwise ops compute the same float formulas; CUDA's expf/tanhf/cosf differ from glibc's in
 * the last bit or two (2^-22 relative): bound 1e-10 on NMSE (an ulp is 1.4e-14). */
#define EW_BOUND 1e-10

START_TEST(test_cuda_elementwise_ops)
{
    struct pair p;
    if (!pair_open(&p)) return;
    enum { NT = 7, DIM = 320, N = NT * DIM };
    float *a = rand_floats(N, 12.0f), *bv = rand_floats(N, 3.0f);
    float *gain_h = rand_floats(DIM, 1.0f);
    struct backend_weight_desc gd = {.type = QUANT_F32, .rows = 1, .cols = DIM, .data = gain_h};
    struct backend_weight *gc, *gg;
    weight_both(&p, &gd, &gc, &gg);
    for (int op = 0; op < 9; op++) {
        float *ac = put(p.c, a, N), *ag = put(p.g, a, N);
        float *bc = put(p.c, bv, N), *bg = put(p.g, bv, N);
        int rc_c = 0, rc_g = 0;
        const char *name = "";
        struct backend *c = p.c, *g = p.g;
        switch (op) {
        case 0:
            name = "add";
            rc_c = c->ops->add(c, ac, bc, N), rc_g = g->ops->add(g, ag, bg, N);
            break;
        case 1:
            name = "add_bias";
            rc_c = c->ops->add_bias(c, ac, gc, NT), rc_g = g->ops->add_bias(g, ag, gg, NT);
            break;
        case 2:
            name = "scale";
            rc_c = c->ops->scale(c, ac, N, 0.37f), rc_g = g->ops->scale(g, ag, N, 0.37f);
            break;
        case 3:
            name = "softcap";
            rc_c = c->ops->softcap(c, ac, N, 5.0f), rc_g = g->ops->softcap(g, ag, N, 5.0f);
            break;
        case 4:
            name = "silu_mul";
            rc_c = c->ops->silu_mul(c, ac, bc, N), rc_g = g->ops->silu_mul(g, ag, bg, N);
            break;
        case 5:
            name = "gelu_mul"; /* gate in [-12, 12): both table ends and the table */
            rc_c = c->ops->gelu_mul(c, ac, bc, N), rc_g = g->ops->gelu_mul(g, ag, bg, N);
            break;
        case 6:
            name = "rmsnorm";
            rc_c = c->ops->rmsnorm(c, ac, gc, bc, NT, DIM, 1e-5f);
            rc_g = g->ops->rmsnorm(g, ag, gg, bg, NT, DIM, 1e-5f);
            break;
        case 7:
            name = "rmsnorm in place";
            rc_c = c->ops->rmsnorm(c, ac, gc, ac, NT, DIM, 1e-6f);
            rc_g = g->ops->rmsnorm(g, ag, gg, ag, NT, DIM, 1e-6f);
            break;
        case 8:
            name = "scale_rows_sigmoid"; /* the first NT gate values of bv */
            rc_c = c->ops->scale_rows_sigmoid(c, ac, bc, NT, DIM);
            rc_g = g->ops->scale_rows_sigmoid(g, ag, bg, NT, DIM);
            break;
        }
        ck_assert_int_eq(rc_c, 0);
        ck_assert_int_eq(rc_g, 0);
        const float *oc = op == 6 ? bc : ac, *og = op == 6 ? bg : ag;
        float *hc = get(c, oc, N), *hg = get(g, og, N);
        ASSERT_NMSE(hg, hc, N, EW_BOUND, "%s", name);
        free(hc);
        free(hg);
        c->ops->free(c, ac);
        c->ops->free(c, bc);
        g->ops->free(g, ag);
        g->ops->free(g, bg);
    }
    /* rmsnorm_heads on rows of one head each */
    {
        enum { HD = 64, ROWS = N / HD };
        float *hgain = rand_floats(HD, 1.0f);
        struct backend_weight_desc hd = {.type = QUANT_F32, .rows = 1, .cols = HD, .data = hgain};
        struct backend_weight *hc_w, *hg_w;
        weight_both(&p, &hd, &hc_w, &hg_w);
        float *ac = put(p.c, a, N), *ag = put(p.g, a, N);
        ck_assert_int_eq(p.c->ops->rmsnorm_heads(p.c, ac, hc_w, ROWS, HD, 1e-6f), 0);
        ck_assert_int_eq(p.g->ops->rmsnorm_heads(p.g, ag, hg_w, ROWS, HD, 1e-6f), 0);
        float *rc = get(p.c, ac, N), *rg = get(p.g, ag, N);
        ASSERT_NMSE(rg, rc, N, EW_BOUND, "%s", "rmsnorm_heads");
        ck_assert_int_eq(p.g->ops->rmsnorm_heads(p.g, ag, hg_w, ROWS, HD + 1, 1e-6f), ERR_INVAL);
        free(rc);
        free(rg);
        free(hgain);
        p.c->ops->free(p.c, ac);
        p.g->ops->free(p.g, ag);
        p.c->ops->weight_free(p.c, hc_w);
        p.g->ops->weight_free(p.g, hg_w);
    }
    /* gather_rows: exact copies */
    {
        const int32_t idx[4] = {6, 0, 6, 3};
        float *ac = put(p.c, a, N), *ag = put(p.g, a, N);
        float *oc = put(p.c, NULL, 4 * DIM), *og = put(p.g, NULL, 4 * DIM);
        ck_assert_int_eq(p.c->ops->gather_rows(p.c, ac, idx, 4, DIM, oc), 0);
        ck_assert_int_eq(p.g->ops->gather_rows(p.g, ag, idx, 4, DIM, og), 0);
        float *hc = get(p.c, oc, 4 * DIM), *hg = get(p.g, og, 4 * DIM);
        ck_assert_int_eq(memcmp(hc, hg, 4 * DIM * sizeof(float)), 0);
        const int32_t neg[1] = {-1};
        ck_assert_int_eq(p.g->ops->gather_rows(p.g, ag, neg, 1, DIM, og), ERR_RANGE);
        free(hc);
        free(hg);
        p.c->ops->free(p.c, ac);
        p.c->ops->free(p.c, oc);
        p.g->ops->free(p.g, ag);
        p.g->ops->free(p.g, og);
    }
    /* the same input checks as the CPU */
    ck_assert_int_eq(p.g->ops->softcap(p.g, NULL, 0, 0.0f), ERR_INVAL);
    ck_assert_int_eq(p.g->ops->rmsnorm(p.g, NULL, gg, NULL, 1, DIM, 1e-5f), ERR_INVAL);
    p.c->ops->weight_free(p.c, gc);
    p.g->ops->weight_free(p.g, gg);
    free(a);
    free(bv);
    free(gain_h);
    pair_close(&p);
}
END_TEST

/* rope in both modes, with frequency factors, YaRN and partial rotation, at positions up to 32k.
 * Angles are the same float products; CUDA's cosf/sinf of angles up to 32k radians differ from
 * glibc's by an ulp of the angle's reduction: bound 1e-9. */
START_TEST(test_cuda_rope_modes)
{
    struct pair p;
    if (!pair_open(&p)) return;
    enum { NT = 6, NH = 4, HD = 128, N = NT * NH * HD };
    const int32_t pos[NT] = {0, 1, 2, 100, 4095, 32000};
    float factors[HD / 2];
    for (int i = 0; i < HD / 2; i++) factors[i] = 1.0f + 0.25f * (float)i;
    const struct backend_rope_params cases[] = {
        {.mode = BACKEND_ROPE_NORMAL,
         .n_rot = HD,
         .freq_base = 1e4f,
         .freq_scale = 1.0f,
         .attn_factor = 1.0f},
        {.mode = BACKEND_ROPE_NEOX,
         .n_rot = HD,
         .freq_base = 1e6f,
         .freq_scale = 0.25f,
         .ext_factor = 1.0f,
         .attn_factor = 0.9f,
         .beta_fast = 32,
         .beta_slow = 1,
         .n_ctx_orig = 4096},
        {.mode = BACKEND_ROPE_NORMAL,
         .n_rot = HD,
         .freq_base = 5e5f,
         .freq_scale = 1.0f,
         .attn_factor = 1.0f,
         .freq_factors = factors},
        {.mode = BACKEND_ROPE_NEOX,
         .n_rot = 64,
         .freq_base = 1e4f,
         .freq_scale = 0.5f,
         .attn_factor = 1.1f},
    };
    float *x = rand_floats(N, 2.0f);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        float *xc = put(p.c, x, N), *xg = put(p.g, x, N);
        ck_assert_int_eq(p.c->ops->rope(p.c, xc, pos, NT, NH, HD, &cases[ci]), 0);
        ck_assert_int_eq(p.g->ops->rope(p.g, xg, pos, NT, NH, HD, &cases[ci]), 0);
        float *hc = get(p.c, xc, N), *hg = get(p.g, xg, N);
        ASSERT_NMSE(hg, hc, N, 1e-9, "rope case %zu", ci);
        free(hc);
        free(hg);
        p.c->ops->free(p.c, xc);
        p.g->ops->free(p.g, xg);
    }
    struct backend_rope_params bad = cases[0];
    bad.n_rot = 3;
    ck_assert_int_eq(p.g->ops->rope(p.g, (float *)x, pos, NT, NH, HD, &bad), ERR_INVAL);
    free(x);
    pair_close(&p);
}
END_TEST

/* moe_route gives the same experts (inputs spread so no two probabilities tie within float
 * error) and weights within EW_BOUND; moe_combine adds in the CPU's order. */
START_TEST(test_cuda_moe_ops)
{
    struct pair p;
    if (!pair_open(&p)) return;
    enum { ROWS = 9, NE = 16, K = 4, DIM = 96 };
    float *l = rand_floats(ROWS * NE, 4.0f);
    float *lc = put(p.c, l, ROWS * NE), *lg = put(p.g, l, ROWS * NE);
    for (int norm = 0; norm < 2; norm++) {
        int32_t ic[ROWS * K], ig[ROWS * K];
        float wc[ROWS * K], wg[ROWS * K];
        ck_assert_int_eq(p.c->ops->moe_route(p.c, lc, ROWS, NE, K, norm, ic, wc), 0);
        ck_assert_int_eq(p.g->ops->moe_route(p.g, lg, ROWS, NE, K, norm, ig, wg), 0);
        ck_assert_int_eq(memcmp(ic, ig, sizeof(ic)), 0);
        ASSERT_NMSE(wg, wc, ROWS * K, EW_BOUND, "moe_route norm %d", norm);
        float *x = rand_floats(ROWS * K * DIM, 1.0f);
        float *xc = put(p.c, x, ROWS * K * DIM), *xg = put(p.g, x, ROWS * K * DIM);
        float *oc = put(p.c, NULL, ROWS * DIM), *og = put(p.g, NULL, ROWS * DIM);
        ck_assert_int_eq(p.c->ops->moe_combine(p.c, xc, wc, ROWS, K, DIM, oc), 0);
        ck_assert_int_eq(p.g->ops->moe_combine(p.g, xg, wc, ROWS, K, DIM, og), 0);
        float *hc = get(p.c, oc, ROWS * DIM), *hg = get(p.g, og, ROWS * DIM);
        ASSERT_NMSE(hg, hc, ROWS * DIM, 1e-12, "%s", "moe_combine");
        free(hc);
        free(hg);
        free(x);
        p.c->ops->free(p.c, xc);
        p.c->ops->free(p.c, oc);
        p.g->ops->free(p.g, xg);
        p.g->ops->free(p.g, og);
    }
    int32_t ids[1];
    float w[1];
    ck_assert_int_eq(p.g->ops->moe_route(p.g, lg, 1, NE, NE + 1, false, ids, w), ERR_INVAL);
    p.c->ops->free(p.c, lc);
    p.g->ops->free(p.g, lg);
    free(l);
    pair_close(&p);
}
END_TEST

/* ---- KV cache and paged attention -------------------------------------------------------------- */

enum { KV_LAYERS = 2, KV_BLOCKS = 12, KV_BS = 16, KV_NKV = 2 };

/* Prefill of two sequences (37 positions over blocks 3, 7, 1 — the last partly filled — and 5 in
 * block 9), then one decode token each, on both backends, for one geometry; with the given
 * attention parameters. Then block 1 is copied to block 11 (kv_copy_block) and the decode repeated
 * through a table naming 11. Bound: K, V and q are the same values on both sides (the CUDA
 * kv_store rounds and quantizes as the CPU does); the CPU rounds an F16 cache's probabilities to
 * f16 before they meet V while the online softmax here cannot (2^-11 relative per probability,
 * NMSE about 1e-7), and the sums run in different orders: 1e-4 (F16) and 1e-9 otherwise. A wrong
 * block, position or head gives NMSE of order 1. */
static void attention_case(struct pair *p, enum quant_type kt, int hd, int group,
                           const struct backend_attn_params *ap)
{
    struct backend_kv_desc kd = {.n_layers = KV_LAYERS,
                                 .n_blocks = KV_BLOCKS,
                                 .block_size = KV_BS,
                                 .n_kv_heads = KV_NKV,
                                 .head_dim = hd,
                                 .type = kt};
    ck_assert_int_eq(p->c->ops->kv_alloc(p->c, &kd), 0);
    ck_assert_int_eq(p->g->ops->kv_alloc(p->g, &kd), 0);
    const int n_heads = KV_NKV * group, qrow = n_heads * hd, kvrow = KV_NKV * hd;
    int32_t tables[2 * 4] = {3, 7, 1, 0, 9, 0, 0, 0};
    enum { N0 = 37, N1 = 5, NP = N0 + N1 };
    int32_t pos[NP], seq[NP];
    int64_t slots[NP];
    for (int t = 0; t < NP; t++) {
        seq[t] = t < N0 ? 0 : 1;
        pos[t] = t < N0 ? t : t - N0;
        slots[t] = (int64_t)tables[seq[t] * 4 + pos[t] / KV_BS] * KV_BS + pos[t] % KV_BS;
    }
    struct backend_batch bt = {.n_tokens = NP,
                               .pos = pos,
                               .seq = seq,
                               .block_tables = tables,
                               .n_seqs = 2,
                               .max_blocks = 4,
                               .slots = slots};
    double bound = kt == QUANT_F16 ? 1e-4 : 1e-9;
    for (int step = 0; step < 3; step++) {
        int n = step == 0 ? NP : 2;
        if (step > 0) {
            /* decode: position 37 of seq 0 (block 1, still partly filled) and 5 of seq 1 */
            bt.n_tokens = 2;
            pos[0] = N0, seq[0] = 0, pos[1] = N1, seq[1] = 1;
            if (step == 2) {
                ck_assert_int_eq(p->c->ops->kv_copy_block(p->c, 1, 11), 0);
                ck_assert_int_eq(p->g->ops->kv_copy_block(p->g, 1, 11), 0);
                tables[2] = 11;
            }
            for (int t = 0; t < 2; t++)
                slots[t] = (int64_t)tables[seq[t] * 4 + pos[t] / KV_BS] * KV_BS + pos[t] % KV_BS;
        }
        float *k = rand_floats((size_t)n * kvrow, 1.0f), *v = rand_floats((size_t)n * kvrow, 1.0f);
        float *q = rand_floats((size_t)n * qrow, 1.0f);
        for (int layer = 0; layer < KV_LAYERS; layer++) {
            float *kc = put(p->c, k, (size_t)n * kvrow), *kg = put(p->g, k, (size_t)n * kvrow);
            float *vc = put(p->c, v, (size_t)n * kvrow), *vg = put(p->g, v, (size_t)n * kvrow);
            float *qc = put(p->c, q, (size_t)n * qrow), *qg = put(p->g, q, (size_t)n * qrow);
            float *oc = put(p->c, NULL, (size_t)n * qrow), *og = put(p->g, NULL, (size_t)n * qrow);
            ck_assert_int_eq(p->c->ops->kv_store(p->c, layer, kc, vc, &bt), 0);
            ck_assert_int_eq(p->g->ops->kv_store(p->g, layer, kg, vg, &bt), 0);
            ck_assert_int_eq(p->c->ops->attention(p->c, layer, qc, oc, &bt, n_heads, ap), 0);
            ck_assert_int_eq(p->g->ops->attention(p->g, layer, qg, og, &bt, n_heads, ap), 0);
            float *hc = get(p->c, oc, (size_t)n * qrow), *hg = get(p->g, og, (size_t)n * qrow);
            ASSERT_NMSE(hg, hc, (size_t)n * qrow, bound,
                        "attention %s hd %d group %d softcap %g window %d step %d layer %d",
                        quant_type_name(kt), hd, group, (double)ap->softcap, ap->window, step,
                        layer);
            free(hc);
            free(hg);
            float *bufs_c[] = {kc, vc, qc, oc}, *bufs_g[] = {kg, vg, qg, og};
            for (int i = 0; i < 4; i++) {
                p->c->ops->free(p->c, bufs_c[i]);
                p->g->ops->free(p->g, bufs_g[i]);
            }
        }
        free(k);
        free(v);
        free(q);
    }
    p->c->ops->kv_free(p->c);
    p->g->ops->kv_free(p->g);
}

START_TEST(test_cuda_attention_kv_types_and_shapes)
{
    struct pair p;
    if (!pair_open(&p)) return;
    const enum quant_type kts[] = {QUANT_F32, QUANT_F16, QUANT_Q8_0};
    const int hds[] = {64, 80, 96, 128, 256};
    for (size_t ki = 0; ki < 3; ki++)
        for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++) {
            if (kts[ki] == QUANT_Q8_0 && hds[hi] % 32 != 0) continue;
            for (int group = 1; group <= 4; group *= 4) {
                struct backend_attn_params ap = {.scale = 1.0f / sqrtf((float)hds[hi])};
                attention_case(&p, kts[ki], hds[hi], group, &ap);
            }
        }
    pair_close(&p);
}
END_TEST

START_TEST(test_cuda_attention_window_and_softcap)
{
    struct pair p;
    if (!pair_open(&p)) return;
    const struct backend_attn_params aps[] = {
        {.scale = 0.125f, .softcap = 20.0f},
        {.scale = 0.125f, .window = 8},
        {.scale = 0.125f, .softcap = 30.0f, .window = 20},
    };
    for (size_t i = 0; i < 3; i++) {
        attention_case(&p, QUANT_F16, 64, 2, &aps[i]);
        attention_case(&p, QUANT_F32, 128, 1, &aps[i]);
    }
    pair_close(&p);
}
END_TEST

/* The errors of backend.h, with the CPU's codes: before kv_alloc, a slot or block outside the
 * cache, bad parameters, an unsupported cache type. */
START_TEST(test_cuda_kv_errors_match_cpu)
{
    struct pair p;
    if (!pair_open(&p)) return;
    struct backend *bs[2] = {p.c, p.g};
    float *bufs[2];
    for (int i = 0; i < 2; i++) bufs[i] = put(bs[i], NULL, 4 * 64);
    int32_t pos[1] = {0}, seq[1] = {0}, tab[1] = {0};
    int64_t slot[1] = {0};
    struct backend_batch bt = {.n_tokens = 1,
                               .pos = pos,
                               .seq = seq,
                               .block_tables = tab,
                               .n_seqs = 1,
                               .max_blocks = 1,
                               .slots = slot};
    struct backend_attn_params ap = {.scale = 0.125f};
    int got[2][8];
    for (int i = 0; i < 2; i++) {
        struct backend *b = bs[i];
        float *x = bufs[i];
        got[i][0] = b->ops->kv_store(b, 0, x, x, &bt);
        struct backend_kv_desc kd = {.n_layers = 1,
                                     .n_blocks = 2,
                                     .block_size = 4,
                                     .n_kv_heads = 1,
                                     .head_dim = 64,
                                     .type = QUANT_F16};
        struct backend_kv_desc bad = kd;
        bad.type = QUANT_Q4_K;
        got[i][1] = b->ops->kv_alloc(b, &bad);
        ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
        slot[0] = 8; /* 2 blocks of 4 slots */
        got[i][2] = b->ops->kv_store(b, 0, x, x, &bt);
        slot[0] = 0;
        got[i][3] = b->ops->kv_store(b, 1, x, x, &bt);
        tab[0] = 2;
        got[i][4] = b->ops->attention(b, 0, x, x + 64, &bt, 1, &ap);
        tab[0] = 0;
        pos[0] = 4; /* needs a second block the table does not have */
        got[i][5] = b->ops->attention(b, 0, x, x + 64, &bt, 1, &ap);
        pos[0] = 0;
        struct backend_attn_params nan_scale = {.scale = NAN};
        got[i][6] = b->ops->attention(b, 0, x, x + 64, &bt, 1, &nan_scale);
        got[i][7] = b->ops->kv_copy_block(b, 0, 2);
        b->ops->kv_free(b);
        b->ops->free(b, x);
    }
    for (int j = 0; j < 8; j++)
        ck_assert_msg(got[0][j] == got[1][j] && got[0][j] != 0, "case %d: cpu %s cuda %s", j,
                      err_str(got[0][j]), err_str(got[1][j]));
    pair_close(&p);
}
END_TEST

/* mem_info reports the device's memory, and an allocation shows in it; a device index past the
 * last is ERR_RANGE, not a crash. The CPU has no mem_info (its memory is the host's). */
START_TEST(test_cuda_mem_info_and_bad_device)
{
    struct backend *g = gpu_backend();
    if (!g) return;
    size_t free0 = 0, total = 0, free1 = 0;
    ck_assert_ptr_nonnull(g->ops->mem_info);
    ck_assert_int_eq(g->ops->mem_info(g, &free0, &total), 0);
    ck_assert_uint_gt(total, 0);
    ck_assert_uint_le(free0, total);
    void *big = g->ops->alloc(g, 256u << 20);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(g->ops->mem_info(g, &free1, &total), 0);
    ck_assert_uint_le(free1 + (256u << 20),
                      free0 + (2u << 20)); /* within the allocator's rounding */
    g->ops->free(g, big);
    ck_assert_int_eq(g->ops->mem_info(g, NULL, &total), ERR_INVAL);
    g->ops->destroy(g);
    struct backend *c = cpu_backend();
    ck_assert_ptr_null(c->ops->mem_info);
    c->ops->destroy(c);
    struct backend_options o = {.device = 1 << 20};
    struct backend *b = NULL;
    ck_assert_int_eq(backend_create("cuda", &o, &b), ERR_RANGE);
    ck_assert_ptr_null(b);
}
END_TEST

/* ---- whole model -------------------------------------------------------------------------------- */

enum { WM_VOCAB = 512, WM_PROMPT = 20, WM_DECODE = 6 };

struct wm_run {
    struct model *m;
    struct kv_cache *kv;
    int seq;
};

static void wm_open(struct wm_run *r, const char *path, const char *backend, enum quant_type kv)
{
    struct model_options o;
    model_options_default(&o);
    o.backend = backend;
    o.n_threads = 2;
    o.kv_type = kv;
    char err[256];
    ck_assert_msg(model_load(path, &o, &r->m, err, sizeof(err)) == 0, "%s: %s", backend, err);
    struct kv_cache_config kc = {8, 16, 1, 8};
    ck_assert_int_eq(kv_cache_new(&kc, &r->kv), 0);
    ck_assert_int_eq(model_kv_init(r->m, r->kv), 0);
    ck_assert_int_eq(kv_cache_seq_open(r->kv, &r->seq), 0);
}

static void wm_close(struct wm_run *r)
{
    kv_cache_seq_close(r->kv, r->seq);
    kv_cache_free(r->kv);
    model_free(r->m);
}

/* One step of n tokens; the logits of every token (ALL) or the last. */
static const float *wm_step(struct wm_run *r, const int32_t *tok, int n, bool all)
{
    struct kv_cache_copy cp;
    int pos = kv_cache_seq_len(r->kv, r->seq);
    ck_assert_int_eq(kv_cache_seq_append(r->kv, r->seq, n, &cp), 0);
    struct model_batch_entry e = {r->seq, pos, n, tok, all ? MODEL_LOGITS_ALL : MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(r->m, r->kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, all ? n : 1);
    return logits;
}

/* The CPU's top token of a row and its margin over the second. */
static int top1(const float *row, float *margin)
{
    int a = 0, b = -1;
    for (int i = 1; i < WM_VOCAB; i++) {
        if (row[i] > row[a]) {
            b = a;
            a = i;
        } else if (b < 0 || row[i] > row[b]) {
            b = i;
        }
    }
    *margin = row[a] - row[b];
    return a;
}

/* Random-weight models run on both backends: a 20-token prefill (cuBLAS-sized matmuls, every
 * token's logits), then 6 decode steps fed the CPU's greedy tokens (mat-vec matmuls), each logits
 * row compared by NMSE and the top token where the CPU's top-2 margin exceeds 0.1 (issue #18's
 * rule). Bound 1e-3: the per-op differences above (quantized activations on the CPU, f16 ones in
 * cuBLAS, f16 probabilities) compound over the layers but stay orders below a wrong op's ~1. */
START_TEST(test_cuda_whole_model_matches_cpu)
{
    struct backend *g = gpu_backend();
    if (!g) return;
    g->ops->destroy(g);
    const struct {
        const char *arch;
        enum quant_type type, kv;
        uint32_t experts;
    } cases[] = {
        {"llama", QUANT_F16, QUANT_F16, 0},   {"llama", QUANT_Q8_0, QUANT_Q8_0, 0},
        {"llama", QUANT_Q4_K, QUANT_F32, 0},  {"qwen3", QUANT_BF16, QUANT_F16, 0},
        {"gemma2", QUANT_Q6_K, QUANT_F16, 0}, {"qwen2moe", QUANT_Q8_0, QUANT_F16, 4},
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        struct gen_model_opts o;
        gen_model_defaults(&o);
        o.arch = cases[ci].arch;
        o.type = cases[ci].type;
        o.dim = 256, o.layers = 3, o.heads = 4, o.kv_heads = 2, o.ffn = 512;
        o.vocab_size = WM_VOCAB, o.context_length = 128, o.std = 0.05f;
        o.experts = cases[ci].experts, o.experts_used = 2;
        o.seed = 7 + ci;
        char path[512], err[256];
        snprintf(path, sizeof(path), "%s/cinfer-cuda-wm-%d-%zu.gguf", test_tmpdir(), (int)getpid(),
                 ci);
        ck_assert_msg(gen_model_write(&o, path, err, sizeof(err)) == 0, "%s", err);
        struct wm_run c, d;
        wm_open(&c, path, "cpu", cases[ci].kv);
        wm_open(&d, path, "cuda", cases[ci].kv);
        unlink(path); /* the mappings stay valid */
        int32_t prompt[WM_PROMPT];
        for (int i = 0; i < WM_PROMPT; i++) prompt[i] = (int32_t)((i * 37 + 11) % WM_VOCAB);
        const float *lc = wm_step(&c, prompt, WM_PROMPT, true);
        float *hc = malloc(sizeof(float) * WM_PROMPT * WM_VOCAB);
        ck_assert_ptr_nonnull(hc);
        memcpy(hc, lc, sizeof(float) * WM_PROMPT * WM_VOCAB);
        const float *ld = wm_step(&d, prompt, WM_PROMPT, true);
        for (int step = 0; step <= WM_DECODE; step++) {
            int rows = step == 0 ? WM_PROMPT : 1;
            for (int r = 0; r < rows; r++) {
                const float *rc = hc + (size_t)r * WM_VOCAB, *rd = ld + (size_t)r * WM_VOCAB;
                ASSERT_NMSE(rd, rc, WM_VOCAB, 1e-3, "%s %s step %d row %d", cases[ci].arch,
                            quant_type_name(cases[ci].type), step, r);
                float margin;
                int tc = top1(rc, &margin), td;
                float md;
                td = top1(rd, &md);
                if (margin > 0.1f)
                    ck_assert_msg(tc == td, "%s %s step %d row %d: top token cpu %d cuda %d",
                                  cases[ci].arch, quant_type_name(cases[ci].type), step, r, tc, td);
            }
            if (step == WM_DECODE) break;
            float margin;
            int32_t next = (int32_t)top1(hc + (size_t)(rows - 1) * WM_VOCAB, &margin);
            memcpy(hc, wm_step(&c, &next, 1, false), sizeof(float) * WM_VOCAB);
            ld = wm_step(&d, &next, 1, false);
        }
        free(hc);
        wm_close(&c);
        wm_close(&d);
    }
}
END_TEST

Suite *backend_cuda_suite(void);
Suite *backend_cuda_suite(void)
{
    Suite *s = suite_create("backend_cuda");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cuda_decoder_matches_quant_c);
    tcase_add_test(tc, test_cuda_matmul_every_type);
    tcase_add_test(tc, test_cuda_get_rows_every_type);
    tcase_add_test(tc, test_cuda_elementwise_ops);
    tcase_add_test(tc, test_cuda_rope_modes);
    tcase_add_test(tc, test_cuda_moe_ops);
    tcase_add_test(tc, test_cuda_attention_kv_types_and_shapes);
    tcase_add_test(tc, test_cuda_attention_window_and_softcap);
    tcase_add_test(tc, test_cuda_kv_errors_match_cpu);
    tcase_add_test(tc, test_cuda_mem_info_and_bad_device);
    tcase_add_test(tc, test_cuda_whole_model_matches_cpu);
    suite_add_tcase(s, tc);
    return s;
}
