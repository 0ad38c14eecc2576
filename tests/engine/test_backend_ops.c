/* The backend ops the architectures beyond llama need (backend.h): rope with YaRN, attn_factor and
 * frequency factors; attention with soft-capping and sliding windows; GeGLU; scale; soft-capping of
 * logits; mixture-of-experts routing and combination; the sigmoid row gate; and the model's expert
 * plan (model_moe_plan). Each against a double-precision reference of llama.cpp's formulas, at
 * every SIMD level the CPU has, with 1 and 2 threads, plus their input checks. */
#include "common/err.h"
#include "engine/backend/backend.h"
#include "engine/gguf/quant.h"
#include "engine/model/model_priv.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

/* Uniform in [-1, 1). */
static float rng_f(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 16) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static void fill_f(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_f();
}

static const char *const isas[] = {"scalar", "avx2", "avx512"};

static struct backend *make_backend(const char *isa, int n_threads)
{
    struct backend_options o = {.n_threads = n_threads, .cpu_isa = isa};
    struct backend *b = NULL;
    int rc = backend_create("cpu", &o, &b);
    if (rc == ERR_UNSUPPORTED) return NULL;
    ck_assert_int_eq(rc, 0);
    return b;
}

/* ---- rope ---------------------------------------------------------------------------------- */

/* ggml's rope_yarn in double: the angle of pair i at `pos`. */
static void ref_rope_angle(const struct backend_rope_params *p, int pos, int i, double *c,
                           double *s)
{
    double theta = pos * pow(p->freq_base, -2.0 * i / p->n_rot);
    if (p->freq_factors) theta /= p->freq_factors[i];
    double th = p->freq_scale * theta, mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) {
        double lb = 2 * log(p->freq_base), two_pi = 2 * M_PI;
        double lo = floor(p->n_rot * log(p->n_ctx_orig / (p->beta_fast * two_pi)) / lb);
        double hi = ceil(p->n_rot * log(p->n_ctx_orig / (p->beta_slow * two_pi)) / lb);
        lo = fmax(0, lo);
        hi = fmin(p->n_rot - 1, hi);
        double y = (i - lo) / fmax(0.001, hi - lo);
        double mix = (1 - fmin(1, fmax(0, y))) * p->ext_factor;
        th = th * (1 - mix) + theta * mix;
        mscale *= 1 + 0.1 * log(1.0 / p->freq_scale);
    }
    *c = cos(th) * mscale;
    *s = sin(th) * mscale;
}

START_TEST(test_rope_yarn_factors_and_attn_factor)
{
    enum { NT = 5, NH = 3, HD = 32 };
    float factors[HD / 2];
    for (int i = 0; i < HD / 2; i++) factors[i] = 1.0f + 0.5f * (float)i;
    const int32_t pos[NT] = {0, 1, 17, 300, 4095};
    struct backend_rope_params cases[] = {
        {.mode = BACKEND_ROPE_NEOX,
         .n_rot = HD,
         .freq_base = 1e6f,
         .freq_scale = 0.25f,
         .ext_factor = 1.0f,
         .attn_factor = 0.88f,
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
         .n_rot = 16,
         .freq_base = 1e4f,
         .freq_scale = 1.0f,
         .attn_factor = 1.19f,
         .freq_factors = factors},
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const struct backend_rope_params *p = &cases[ci];
        float x0[NT * NH * HD], x[NT * NH * HD];
        fill_f(x0, NT * NH * HD, 1.0f);
        for (size_t li = 0; li < 3; li++) {
            struct backend *b = make_backend(isas[li], 2);
            if (!b) continue;
            memcpy(x, x0, sizeof(x));
            ck_assert_int_eq(b->ops->rope(b, x, pos, NT, NH, HD, p), 0);
            for (int t = 0; t < NT; t++)
                for (int h = 0; h < NH; h++)
                    for (int i = 0; i < p->n_rot / 2; i++) {
                        int a = p->mode == BACKEND_ROPE_NEOX ? i : 2 * i;
                        int c = p->mode == BACKEND_ROPE_NEOX ? i + p->n_rot / 2 : 2 * i + 1;
                        const float *in = x0 + (t * NH + h) * HD;
                        const float *out = x + (t * NH + h) * HD;
                        double co, si;
                        ref_rope_angle(p, pos[t], i, &co, &si);
                        double w0 = in[a] * co - in[c] * si, w1 = in[a] * si + in[c] * co;
                        /* float angles of positions up to 4095: a few ulp of a large angle */
                        double tol = 2e-5 * (1 + pos[t] / 64.0);
                        ck_assert_msg(fabs(out[a] - w0) < tol && fabs(out[c] - w1) < tol,
                                      "case %zu isa %s t %d pair %d: (%g %g) want (%g %g)", ci,
                                      isas[li], t, i, out[a], out[c], w0, w1);
                    }
            /* dimensions past n_rot are kept */
            if (p->n_rot < HD) ck_assert_float_eq(x[HD - 1], x0[HD - 1]);
            b->ops->destroy(b);
        }
    }
    /* the angle table is not reused across different frequency factors or attn factors */
    struct backend *b = make_backend(NULL, 1);
    float y1[NT * NH * HD], y2[NT * NH * HD];
    fill_f(y1, NT * NH * HD, 1.0f);
    memcpy(y2, y1, sizeof(y1));
    struct backend_rope_params p = cases[1];
    ck_assert_int_eq(b->ops->rope(b, y1, pos, NT, NH, HD, &p), 0);
    p.freq_factors = NULL;
    ck_assert_int_eq(b->ops->rope(b, y2, pos, NT, NH, HD, &p), 0);
    ck_assert(memcmp(y1, y2, sizeof(y1)) != 0);
    /* bad YaRN parameters */
    p = cases[0];
    p.n_ctx_orig = 0;
    ck_assert_int_eq(b->ops->rope(b, y1, pos, NT, NH, HD, &p), ERR_INVAL);
    p = cases[0];
    p.beta_fast = 0;
    ck_assert_int_eq(b->ops->rope(b, y1, pos, NT, NH, HD, &p), ERR_INVAL);
    p = cases[1];
    p.attn_factor = NAN;
    ck_assert_int_eq(b->ops->rope(b, y1, pos, NT, NH, HD, &p), ERR_INVAL);
    b->ops->destroy(b);
}
END_TEST

/* ---- attention: sliding window and soft-cap ------------------------------------------------ */

enum { AT_NKV = 2, AT_GROUP = 2, AT_LEN = 40, AT_BS = 16 };

/* One sequence of AT_LEN positions; the step is positions [first, AT_LEN) (a prefill chunk whose
 * tokens are windowed from position `window` on). Returns the output (n, heads, hd). */
static float *window_attention(const char *isa, int n_threads, enum quant_type kv, int hd,
                               const float *k, const float *v, const float *q, int first,
                               const struct backend_attn_params *ap)
{
    struct backend *b = make_backend(isa, n_threads);
    if (!b) return NULL;
    struct backend_kv_desc kd = {1, 8, AT_BS, AT_NKV, hd, kv};
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
    int32_t pos[AT_LEN], seq[AT_LEN] = {0}, tab[8] = {3, 0, 5, 1, 2, 4, 6, 7};
    int64_t slots[AT_LEN];
    for (int p = 0; p < AT_LEN; p++) {
        pos[p] = p;
        slots[p] = (int64_t)tab[p / AT_BS] * AT_BS + p % AT_BS;
    }
    struct backend_batch all = {AT_LEN, pos, seq, tab, 1, 8, slots};
    ck_assert_int_eq(b->ops->kv_store(b, 0, k, v, &all), 0);
    int n = AT_LEN - first, nh = AT_NKV * AT_GROUP;
    struct backend_batch bt = {n, pos + first, seq, tab, 1, 8, slots + first};
    float *out = malloc(sizeof(float) * (size_t)n * nh * hd);
    ck_assert_int_eq(b->ops->attention(b, 0, q + (size_t)first * nh * hd, out, &bt, nh, ap), 0);
    b->ops->kv_free(b);
    b->ops->destroy(b);
    return out;
}

static double rnd(double x, bool f16)
{
    return f16 ? quant_f16_to_f32(quant_f32_to_f16((float)x)) : x;
}

static void check_window(enum quant_type kv, int hd, float softcap, int window)
{
    int nh = AT_NKV * AT_GROUP, row = AT_NKV * hd;
    float *k = malloc(sizeof(float) * AT_LEN * row), *v = malloc(sizeof(float) * AT_LEN * row);
    float *q = malloc(sizeof(float) * AT_LEN * nh * hd);
    fill_f(k, (size_t)AT_LEN * row, 1.0f);
    fill_f(v, (size_t)AT_LEN * row, 1.0f);
    fill_f(q, (size_t)AT_LEN * nh * hd, 2.0f);
    /* a Q8_0 cache holds the quantized values: compare with those */
    float *kc = malloc(sizeof(float) * AT_LEN * row), *vc = malloc(sizeof(float) * AT_LEN * row);
    memcpy(kc, k, sizeof(float) * AT_LEN * row);
    memcpy(vc, v, sizeof(float) * AT_LEN * row);
    if (kv == QUANT_Q8_0) {
        void *blk = malloc(quant_row_bytes(QUANT_Q8_0, (uint64_t)hd));
        for (int r = 0; r < AT_LEN * AT_NKV; r++) {
            quant_quantize_row(QUANT_Q8_0, k + (size_t)r * hd, blk, (size_t)hd);
            quant_dequantize_row(QUANT_Q8_0, blk, kc + (size_t)r * hd, (size_t)hd);
            quant_quantize_row(QUANT_Q8_0, v + (size_t)r * hd, blk, (size_t)hd);
            quant_dequantize_row(QUANT_Q8_0, blk, vc + (size_t)r * hd, (size_t)hd);
        }
        free(blk);
    }
    bool f16 = kv == QUANT_F16;
    struct backend_attn_params ap = {1.0f / sqrtf((float)hd), softcap, window};
    for (size_t li = 0; li < 3; li++) {
        float *one_thread = NULL;
        for (int th = 1; th <= 2; th++) {
            float *out = window_attention(isas[li], th, kv, hd, k, v, q, 0, &ap);
            if (!out) continue;
            for (int t = 0; t < AT_LEN; t++)
                for (int h = 0; h < nh; h++) {
                    int kvh = h / AT_GROUP, lo = window && t >= window ? t - window + 1 : 0;
                    const float *qh = q + ((size_t)t * nh + h) * hd;
                    double w[AT_LEN], mx = -INFINITY, sum = 0;
                    for (int p = lo; p <= t; p++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++)
                            d += rnd(qh[i], f16) * rnd(kc[(size_t)p * row + kvh * hd + i], f16);
                        if (softcap > 0) d = softcap * tanh(d / softcap);
                        w[p] = d * ap.scale;
                        mx = fmax(mx, w[p]);
                    }
                    for (int p = lo; p <= t; p++) sum += (w[p] = exp(w[p] - mx));
                    for (int i = 0; i < hd; i++) {
                        double o = 0;
                        for (int p = lo; p <= t; p++)
                            o +=
                                rnd(w[p] / sum, f16) * rnd(vc[(size_t)p * row + kvh * hd + i], f16);
                        float got = out[((size_t)t * nh + h) * hd + i];
                        ck_assert_msg(
                            fabs(got - o) < 2e-4,
                            "kv %s hd %d cap %g window %d isa %s: t %d h %d i %d: %g vs %g",
                            quant_type_name(kv), hd, softcap, window, isas[li], t, h, i, got, o);
                    }
                }
            /* the thread count changes no bit */
            if (!one_thread) {
                one_thread = out;
            } else {
                ck_assert(memcmp(out, one_thread, sizeof(float) * AT_LEN * nh * hd) == 0);
                free(out);
            }
        }
        free(one_thread);
    }
    /* a chunk that starts inside the window gives its tokens the same bits as the whole prefill
     * (items group different tokens then) */
    for (int first = 1; first < AT_LEN; first += 13) {
        float *part = window_attention(NULL, 2, kv, hd, k, v, q, first, &ap);
        float *full = window_attention(NULL, 2, kv, hd, k, v, q, 0, &ap);
        ck_assert_msg(memcmp(part, full + (size_t)first * nh * hd,
                             sizeof(float) * (size_t)(AT_LEN - first) * nh * hd) == 0,
                      "kv %s hd %d window %d: chunk from %d differs", quant_type_name(kv), hd,
                      window, first);
        free(part);
        free(full);
    }
    free(k);
    free(v);
    free(q);
    free(kc);
    free(vc);
}

/* hd 16 takes llama.cpp's scalar f16 arithmetic with an F16 cache, hd 64 the vector kernels. */
START_TEST(test_attention_window_and_softcap)
{
    static const enum quant_type kvs[] = {QUANT_F32, QUANT_F16, QUANT_Q8_0};
    static const int hds[] = {32, 64};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 2; j++) {
            check_window(kvs[i], hds[j], 0.0f, 7);
            check_window(kvs[i], hds[j], 0.5f, 0);
            check_window(kvs[i], hds[j], 1.5f, 16);
        }
    check_window(QUANT_F16, 16, 2.0f, 5);
}
END_TEST

START_TEST(test_attention_rejects_bad_params)
{
    struct backend *b = make_backend(NULL, 1);
    struct backend_kv_desc kd = {1, 2, AT_BS, 1, 16, QUANT_F32};
    ck_assert_int_eq(b->ops->kv_alloc(b, &kd), 0);
    float q[16] = {0}, out[16];
    int32_t pos = 0, seq = 0, tab[2] = {0, 1};
    int64_t slot = 0;
    struct backend_batch bt = {1, &pos, &seq, tab, 1, 2, &slot};
    ck_assert_int_eq(b->ops->kv_store(b, 0, q, q, &bt), 0);
    struct backend_attn_params bad[] = {{NAN, 0, 0}, {1, -1, 0}, {1, INFINITY, 0}, {1, 0, -3}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 1, &bad[i]), ERR_INVAL);
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 1, NULL), ERR_INVAL);
    struct backend_attn_params ok = {1, 0, 1};
    ck_assert_int_eq(b->ops->attention(b, 0, q, out, &bt, 1, &ok), 0);
    b->ops->kv_free(b);
    b->ops->destroy(b);
}
END_TEST

/* ---- elementwise ops ------------------------------------------------------------------------ */

START_TEST(test_gelu_mul_scale_softcap)
{
    enum { N = 40000 }; /* over the size that spreads an op over the pool */
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N),
          *y = malloc(sizeof(float) * N);
    fill_f(g, N, 12.0f); /* beyond +-10, where ggml's GELU leaves the table */
    fill_f(u, N, 1.0f);
    g[0] = -10.0f;
    g[1] = 10.0f;
    g[2] = 0.0f;
    for (size_t li = 0; li < 3; li++)
        for (int th = 1; th <= 2; th++) {
            struct backend *b = make_backend(isas[li], th);
            if (!b) continue;
            memcpy(y, g, sizeof(float) * N);
            ck_assert_int_eq(b->ops->gelu_mul(b, y, u, N), 0);
            for (int i = 0; i < N; i++) {
                double x = g[i], want;
                if (x <= -10)
                    want = 0;
                else if (x >= 10)
                    want = x * u[i];
                else { /* tanh GELU at x rounded to f16, rounded to f16 (ggml's table) */
                    double xh = quant_f16_to_f32(quant_f32_to_f16((float)x));
                    double ge =
                        0.5 * xh * (1 + tanh(0.7978845608028654 * xh * (1 + 0.044715 * xh * xh)));
                    want = quant_f16_to_f32(quant_f32_to_f16((float)ge)) * u[i];
                }
                /* one f16 ulp where float and double GELU round to neighbours */
                ck_assert_msg(fabs(y[i] - want) <= 1e-3 * fabs(want) + 1e-6,
                              "gelu_mul %d: x %g: %g want %g", i, x, y[i], want);
            }
            memcpy(y, g, sizeof(float) * N);
            ck_assert_int_eq(b->ops->softcap(b, y, N, 3.0f), 0);
            for (int i = 0; i < N; i++) ck_assert(fabs(y[i] - 3.0 * tanh(g[i] / 3.0)) < 2e-6);
            memcpy(y, g, sizeof(float) * N);
            ck_assert_int_eq(b->ops->scale(b, y, N, 0.125f), 0);
            for (int i = 0; i < N; i++) ck_assert_float_eq(y[i], g[i] * 0.125f);
            ck_assert_int_eq(b->ops->softcap(b, y, N, 0.0f), ERR_INVAL);
            ck_assert_int_eq(b->ops->softcap(b, y, N, NAN), ERR_INVAL);
            ck_assert_int_eq(b->ops->gelu_mul(b, NULL, u, 4), ERR_INVAL);
            ck_assert_int_eq(b->ops->scale(b, NULL, 4, 1.0f), ERR_INVAL);
            ck_assert_int_eq(b->ops->gelu_mul(b, NULL, NULL, 0), 0);
            b->ops->destroy(b);
        }
    free(g);
    free(u);
    free(y);
}
END_TEST

/* ---- mixture of experts --------------------------------------------------------------------- */

START_TEST(test_moe_route_softmax_topk)
{
    enum { R = 5, NE = 20, K = 4 };
    struct backend *b = make_backend(NULL, 2);
    float logits[R * NE], w[R * K];
    int32_t ids[R * K];
    fill_f(logits, R * NE, 3.0f);
    logits[NE + 7] = logits[NE + 8] = 50.0f; /* a tie at the top: the lower index first */
    for (int norm = 0; norm <= 1; norm++) {
        ck_assert_int_eq(b->ops->moe_route(b, logits, R, NE, K, norm, ids, w), 0);
        for (int r = 0; r < R; r++) {
            const float *l = logits + r * NE;
            double mx = -INFINITY, sum = 0, p[NE], sel = 0;
            for (int e = 0; e < NE; e++) mx = fmax(mx, l[e]);
            for (int e = 0; e < NE; e++) sum += (p[e] = exp(l[e] - mx));
            for (int j = 0; j < K; j++) sel += p[ids[r * K + j]] / sum;
            for (int j = 0; j < K; j++) {
                int e = ids[r * K + j];
                ck_assert(e >= 0 && e < NE);
                for (int i = 0; i < j; i++) ck_assert_int_ne(ids[r * K + i], e);
                /* descending, and nothing left out beats the last one chosen */
                if (j > 0) ck_assert(p[e] <= p[ids[r * K + j - 1]]);
                double want = p[e] / sum / (norm ? sel : 1.0);
                ck_assert_msg(fabs(w[r * K + j] - want) < 1e-6, "row %d slot %d: %g want %g", r, j,
                              w[r * K + j], want);
            }
            for (int e = 0; e < NE; e++) {
                bool chosen = false;
                for (int j = 0; j < K; j++) chosen = chosen || ids[r * K + j] == e;
                if (!chosen) ck_assert(p[e] <= p[ids[r * K + K - 1]]);
            }
        }
        ck_assert_int_eq(ids[K], 7);
        ck_assert_int_eq(ids[K + 1], 8);
    }
    ck_assert_int_eq(b->ops->moe_route(b, logits, R, NE, NE + 1, true, ids, w), ERR_INVAL);
    ck_assert_int_eq(b->ops->moe_route(b, logits, R, NE, 0, true, ids, w), ERR_INVAL);
    ck_assert_int_eq(b->ops->moe_route(b, NULL, R, NE, K, true, ids, w), ERR_INVAL);
    ck_assert_int_eq(b->ops->moe_route(b, logits, 0, NE, K, true, NULL, NULL), 0);

    /* combine: slot-order weighted sums; the shared expert's sigmoid gate */
    enum { DIM = 7 };
    float x[R * K * DIM], out[R * DIM], g[R], y[R * DIM];
    fill_f(x, R * K * DIM, 1.0f);
    fill_f(g, R, 4.0f);
    ck_assert_int_eq(b->ops->moe_combine(b, x, w, R, K, DIM, out), 0);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < DIM; i++) {
            float want = x[(r * K) * DIM + i] * w[r * K];
            for (int j = 1; j < K; j++) want += x[(r * K + j) * DIM + i] * w[r * K + j];
            ck_assert_float_eq(out[r * DIM + i], want);
        }
    memcpy(y, out, sizeof(out));
    ck_assert_int_eq(b->ops->scale_rows_sigmoid(b, y, g, R, DIM), 0);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < DIM; i++)
            ck_assert(fabs(y[r * DIM + i] - out[r * DIM + i] / (1 + exp(-g[r]))) < 1e-6);
    ck_assert_int_eq(b->ops->moe_combine(b, x, w, R, 0, DIM, out), ERR_INVAL);
    ck_assert_int_eq(b->ops->scale_rows_sigmoid(b, y, NULL, R, DIM), ERR_INVAL);
    b->ops->destroy(b);
}
END_TEST

START_TEST(test_moe_plan_groups_rows_by_expert)
{
    enum { R = 6, K = 2, NE = 5 };
    const int32_t ids[R * K] = {3, 1, 0, 3, 1, 4, 3, 0, 1, 3, 4, 1};
    int32_t start[NE + 1], rows[R * K], slot[R * K];
    model_moe_plan(ids, R, K, NE, start, rows, slot);
    const int32_t want_start[NE + 1] = {0, 2, 6, 6, 10, 12};
    for (int e = 0; e <= NE; e++) ck_assert_int_eq(start[e], want_start[e]);
    for (int e = 0; e < NE; e++)
        for (int i = start[e]; i < start[e + 1]; i++) {
            if (i > start[e]) ck_assert_int_lt(rows[i - 1], rows[i]); /* rows ascending */
        }
    for (int i = 0; i < R * K; i++) {
        int e = ids[i];
        ck_assert(slot[i] >= start[e] && slot[i] < start[e + 1]);
        ck_assert_int_eq(rows[slot[i]], i / K);
    }
}
END_TEST

Suite *backend_ops_suite(void);
Suite *backend_ops_suite(void)
{
    Suite *s = suite_create("backend_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rope_yarn_factors_and_attn_factor);
    tcase_add_test(tc, test_attention_window_and_softcap);
    tcase_add_test(tc, test_attention_rejects_bad_params);
    tcase_add_test(tc, test_gelu_mul_scale_softcap);
    tcase_add_test(tc, test_moe_route_softmax_topk);
    tcase_add_test(tc, test_moe_plan_groups_rows_by_expert);
    suite_add_tcase(s, tc);
    return s;
}
