/* Microbenchmarks of the CPU backend's kernels through the public ops table, so what is measured is
 * what the model calls. Weights are random but well-formed (finite scales); timings are the best of
 * repeated runs after one warm-up. */
#include "engine/backend/cpu/cpu_bench.h"

#include "common/err.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wall clock, or with --cputime the process CPU time: on a loaded shared machine a 1-thread run's CPU
 * time is the kernel's own cost, undisturbed by the time it spent descheduled. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t bench_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

/* Random weights of `type`: BENCH_DISTINCT_ROWS rows of normal(0, 0.02)-like values encoded by the
 * reference quantizer (real scales and quants; the K-quant searches are too slow for a 32000-row
 * matrix), repeated down the matrix, which streams the same bytes from memory as distinct rows
 * would. Returns new memory or NULL. */
#define BENCH_DISTINCT_ROWS 64
static void *bench_weights(enum quant_type type, int64_t rows, int64_t cols, size_t *bytes)
{
    size_t rb = quant_row_bytes(type, (uint64_t)cols), n = rb * (size_t)rows;
    uint8_t *p = malloc(n);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!p || !row || rb == 0) {
        free(p);
        free(row);
        return NULL;
    }
    uint64_t s = 0x1234567ull + (uint64_t)type;
    for (int64_t r = 0; r < rows; r++) {
        if (r >= BENCH_DISTINCT_ROWS) {
            memcpy(p + (size_t)r * rb, p + (size_t)(r % BENCH_DISTINCT_ROWS) * rb, rb);
            continue;
        }
        for (int64_t i = 0; i < cols; i++) /* sum of 4 uniforms: roughly normal, std 0.02 */
            row[i] = ((float)(bench_rand(&s) % 2001) + (float)(bench_rand(&s) % 2001) +
                      (float)(bench_rand(&s) % 2001) + (float)(bench_rand(&s) % 2001) - 4000.0f) *
                     (0.02f / 1155.0f);
        quant_quantize_row(type, row, p + (size_t)r * rb, (size_t)cols);
    }
    free(row);
    *bytes = n;
    return p;
}

/* Best (minimum) seconds of one matmul over repeated runs (at least 3, about `budget` seconds): the
 * machine is shared, and the minimum is the least disturbed estimate of what the kernel can do. */
static double bench_time(struct backend *b, const struct backend_weight *w, const float *x,
                         float *y, int nt, double budget)
{
    double t[64];
    int n = 0;
    b->ops->matmul(b, w, x, y, nt);
    double start = bench_now();
    while (n < 64 && (n < 3 || bench_now() - start < budget)) {
        double t0 = bench_now();
        b->ops->matmul(b, w, x, y, nt);
        t[n++] = bench_now() - t0;
    }
    double best = t[0];
    for (int i = 1; i < n; i++) best = t[i] < best ? t[i] : best;
    return best;
}

/* The types benchmarked without --types: every weight type published GGUFs use. */
static const enum quant_type bench_types[] = {
    QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,   QUANT_Q4_0,
    QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q2_K,   QUANT_Q3_K,
    QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_IQ4_NL, QUANT_IQ4_XS,
};

/* Shapes (rows, cols) of the 134M llama: wq/wk/wv/wo, w1/w3, w2, classifier. */
static const int64_t bench_shapes[][2] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
static const int bench_tokens[] = {1, 16, 512};

static int bench_matmul_type(struct backend *b, const struct cpu_bench_opts *o, const char *name,
                             enum quant_type type)
{
    double t_shape[4][3] = {{0}};
    int rc = 0;
    float *x = b->ops->alloc(b, sizeof(float) * 512 * 2048);
    float *y = b->ops->alloc(b, sizeof(float) * 512 * 32000);
    if (!x || !y) {
        rc = ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < 512 * 2048; i++) x[i] = sinf((float)i * 0.37f);
    for (size_t si = 0; si < sizeof(bench_shapes) / sizeof(bench_shapes[0]); si++) {
        int64_t rows = bench_shapes[si][0], cols = bench_shapes[si][1];
        size_t bytes = 0;
        void *data = bench_weights(type, rows, cols, &bytes);
        if (!data) {
            rc = ERR_NOMEM;
            goto out;
        }
        struct backend_weight_desc d = {type, rows, cols, data, false, false};
        struct backend_weight *w = NULL;
        rc = b->ops->weight_prepare(b, &d, &w);
        if (rc != 0) {
            free(data);
            goto out;
        }
        for (size_t ti = 0; ti < sizeof(bench_tokens) / sizeof(bench_tokens[0]); ti++) {
            int nt = bench_tokens[ti];
            if (o->quick && nt == 512 && rows == 32000) continue;
            double s = bench_time(b, w, x, y, nt, o->quick ? 0.05 : 0.3);
            t_shape[si][ti] = s;
            double flop = 2.0 * (double)rows * (double)cols * nt;
            printf(
                "matmul %-6s %5lldx%-5lld n=%-4d %9.1f us %8.1f GFLOP/s %7.1f GB/s %9.0f tok/s\n",
                name, (long long)rows, (long long)cols, nt, s * 1e6, flop / s * 1e-9,
                (double)bytes / s * 1e-9, nt / s);
        }
        b->ops->weight_free(b, w);
        free(data);
    }
    /* 134M llama: 12 layers x (4 x 768x768 + 2 x 2048x768 + 768x2048) + classifier (one token) */
    for (size_t ti = 0; ti < 3; ti++) {
        double layer = 4 * t_shape[0][ti] + 2 * t_shape[1][ti] + t_shape[2][ti];
        double step = 12 * layer + t_shape[3][0];
        printf("model %-6s 134M llama, matmuls only: n=%-4d %8.1f tok/s\n", name, bench_tokens[ti],
               bench_tokens[ti] / step);
    }
out:
    b->ops->free(b, x);
    b->ops->free(b, y);
    return rc;
}

/* The matmuls of a whole 134M llama forward step with every weight in its own buffer (about 0.1-0.45
 * GB, far beyond L3), so decode streams the weights from DRAM as it does in the engine. */
static int bench_model_type(struct backend *b, const struct cpu_bench_opts *o, const char *name,
                            enum quant_type type)
{
    enum { N_LAYERS = 12, PER_LAYER = 7 };
    const int shape[PER_LAYER] = {0, 0, 0, 0, 1, 1, 2}; /* wq wk wv wo w1 w3 w2 */
    struct backend_weight *w[N_LAYERS * PER_LAYER + 1] = {0};
    void *data[N_LAYERS * PER_LAYER + 1] = {0};
    int n_w = N_LAYERS * PER_LAYER + 1, rc = ERR_NOMEM;
    float *x = b->ops->alloc(b, sizeof(float) * 512 * 2048);
    float *y = b->ops->alloc(b, sizeof(float) * 512 * 32000);
    if (!x || !y) goto out;
    for (size_t i = 0; i < 512 * 2048; i++) x[i] = sinf((float)i * 0.37f);
    for (int i = 0; i < n_w; i++) {
        int si = i == n_w - 1 ? 3 : shape[i % PER_LAYER];
        size_t bytes;
        data[i] = bench_weights(type, bench_shapes[si][0], bench_shapes[si][1], &bytes);
        if (!data[i]) goto out;
        struct backend_weight_desc d = {
            type, bench_shapes[si][0], bench_shapes[si][1], data[i], false, false};
        rc = b->ops->weight_prepare(b, &d, &w[i]);
        if (rc != 0) goto out;
    }
    const int tokens[] = {1, 16, 512};
    for (size_t ti = 0; ti < 3; ti++) {
        int nt = tokens[ti], reps = nt == 512 ? 1 : o->quick ? 3 : 10;
        double best = 1e9;
        for (int rep = 0; rep < reps + 1; rep++) {
            double t0 = bench_now();
            for (int i = 0; i < n_w; i++) {
                int last = i == n_w - 1; /* classifier: only the last token's logits */
                rc = b->ops->matmul(b, w[i], x, y, last && nt == 512 ? 1 : nt);
                if (rc != 0) goto out;
            }
            if (rep > 0 || reps == 1) best = fmin(best, bench_now() - t0);
        }
        printf("model %-6s 134M llama, all weights resident in DRAM, matmuls only: n=%-4d %8.1f "
               "tok/s (%.2f ms/step)\n",
               name, nt, nt / best, best * 1e3);
    }
    rc = 0;
out:
    for (int i = 0; i < n_w; i++) {
        if (w[i]) b->ops->weight_free(b, w[i]);
        free(data[i]);
    }
    b->ops->free(b, x);
    b->ops->free(b, y);
    return rc;
}

/* Prefill of one 512-token sequence and a batch-1 decode at position 511: 12 heads, head_dim 64. */
static int bench_attention(struct backend *b, enum quant_type kv_type)
{
    int n = 512, nh = 12, hd = 64, bs = 16, rc;
    struct backend_kv_desc kd = {1, n / bs, bs, nh, hd, kv_type};
    rc = b->ops->kv_alloc(b, &kd);
    if (rc != 0) return rc;
    int32_t *pos = malloc(sizeof(int32_t) * n), *seq = calloc((size_t)n, sizeof(int32_t));
    int32_t *tab = malloc(sizeof(int32_t) * (n / bs));
    int64_t *slots = malloc(sizeof(int64_t) * n);
    float *q = malloc(sizeof(float) * n * nh * hd), *out = malloc(sizeof(float) * n * nh * hd);
    rc = ERR_NOMEM;
    if (!pos || !seq || !tab || !slots || !q || !out) goto out;
    for (int i = 0; i < n / bs; i++) tab[i] = i;
    for (int i = 0; i < n; i++) pos[i] = i, slots[i] = i;
    for (int i = 0; i < n * nh * hd; i++) q[i] = sinf((float)i * 0.1f);
    struct backend_batch bt = {n, pos, seq, tab, 1, n / bs, slots};
    struct backend_attn_params ap = {.scale = 0.125f};
    rc = b->ops->kv_store(b, 0, q, q, &bt);
    if (rc != 0) goto out;
    double t0 = bench_now();
    int reps = 0;
    while (reps < 2 || bench_now() - t0 < 0.3) {
        rc = b->ops->attention(b, 0, q, out, &bt, nh, &ap);
        if (rc != 0) goto out;
        reps++;
    }
    double pre = (bench_now() - t0) / reps;
    struct backend_batch one = {1, pos + n - 1, seq, tab, 1, n / bs, slots + n - 1};
    t0 = bench_now();
    reps = 0;
    while (reps < 10 || bench_now() - t0 < 0.2) {
        rc = b->ops->attention(b, 0, q, out, &one, nh, &ap);
        if (rc != 0) goto out;
        reps++;
    }
    double dec = (bench_now() - t0) / reps;
    printf("attention kv=%s 12 heads x 64: prefill 512 tokens %8.2f ms/layer (x12 = %.1f ms), "
           "decode at 512 %6.1f us/layer\n",
           kv_type == QUANT_F16 ? "f16" : "f32", pre * 1e3, pre * 12e3, dec * 1e6);
out:
    b->ops->kv_free(b);
    free(pos);
    free(seq);
    free(tab);
    free(slots);
    free(q);
    free(out);
    return rc;
}

/* The small ops at prefill size (512 tokens of the 134M llama), per call. */
static int bench_small_ops(struct backend *b)
{
    int n = 512, dim = 768, ffn = 2048, nh = 12, hd = 64, rc = ERR_NOMEM;
    float *x = malloc(sizeof(float) * n * ffn), *y = malloc(sizeof(float) * n * ffn);
    float *g = malloc(sizeof(float) * dim);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    struct backend_weight *w = NULL;
    if (!x || !y || !g || !pos) goto out;
    for (int i = 0; i < n * ffn; i++) x[i] = y[i] = sinf((float)i * 0.01f);
    for (int i = 0; i < dim; i++) g[i] = 1.0f;
    for (int i = 0; i < n; i++) pos[i] = i;
    struct backend_weight_desc d = {QUANT_F32, 1, dim, g, false, false};
    rc = b->ops->weight_prepare(b, &d, &w);
    if (rc != 0) goto out;
    struct backend_rope_params rp = {.mode = BACKEND_ROPE_NORMAL,
                                     .n_rot = hd,
                                     .freq_base = 10000.0f,
                                     .freq_scale = 1.0f,
                                     .attn_factor = 1.0f};
    double t[3] = {1e9, 1e9, 1e9};
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bench_now();
        b->ops->rmsnorm(b, x, w, y, n, dim, 1e-5f);
        double t1 = bench_now();
        b->ops->rope(b, y, pos, n, nh, hd, &rp);
        double t2 = bench_now();
        b->ops->silu_mul(b, x, y, (size_t)n * ffn);
        double t3 = bench_now();
        t[0] = fmin(t[0], t1 - t0);
        t[1] = fmin(t[1], t2 - t1);
        t[2] = fmin(t[2], t3 - t2);
    }
    printf("small ops, 512 tokens: rmsnorm(768) %.0f us, rope(12x64) %.0f us, silu_mul(2048) %.0f "
           "us\n",
           t[0] * 1e6, t[1] * 1e6, t[2] * 1e6);
out:
    if (w) b->ops->weight_free(b, w);
    free(x);
    free(y);
    free(g);
    free(pos);
    return rc;
}

int cpu_bench_types(const char *list, enum quant_type *out, int max)
{
    int n = 0;
    if (!list) {
        for (size_t i = 0; i < sizeof(bench_types) / sizeof(bench_types[0]); i++)
            out[n++] = bench_types[i];
        return n;
    }
    for (const char *p = list; *p && n < max;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[16];
        if (len == 0 || len >= sizeof(name)) {
            fprintf(stderr, "bench: bad --types entry in \"%s\"\n", list);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (!quant_type_parse(name, &out[n])) {
            fprintf(stderr, "bench: unknown type \"%s\" (types: %s)\n", name, quant_type_names());
            return -1;
        }
        n++;
        p += len + (e ? 1 : 0);
    }
    return n;
}

int cpu_bench_run(const struct cpu_bench_opts *opts)
{
    const struct cpu_bench_opts o = *opts;
    bench_clock = o.cputime ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    enum quant_type types[QUANT_TYPE_END];
    int n_types = cpu_bench_types(o.types, types, QUANT_TYPE_END);
    if (n_types < 0) return ERR_INVAL;
    struct backend_options bo = {.n_threads = o.n_threads, .cpu_isa = o.isa};
    struct backend *b = NULL;
    int rc = backend_create("cpu", &bo, &b);
    if (rc != 0) {
        fprintf(stderr, "bench: cpu backend: %s\n", err_str(rc));
        return 1;
    }
    struct cpu_backend *cb = cpu_backend_of(b);
    printf("cpu backend: isa %s, %d threads\n", cpu_isa_name(cb->isa), cb->n_threads);
    for (int i = 0; rc == 0 && i < n_types; i++)
        rc = (o.model ? bench_model_type : bench_matmul_type)(b, &o, quant_type_name(types[i]),
                                                              types[i]);
    if (rc == 0) rc = bench_small_ops(b);
    if (rc == 0) rc = bench_attention(b, QUANT_F32);
    if (rc == 0) rc = bench_attention(b, QUANT_F16);
    b->ops->destroy(b);
    if (rc != 0) fprintf(stderr, "bench: %s\n", err_str(rc));
    return rc;
}
