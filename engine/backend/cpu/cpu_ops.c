/* The small ops of the forward pass: embedding lookup, bias and residual adds, scaling, RMS norms,
 * rotary embeddings (ggml's formulas, YaRN and frequency factors included), SwiGLU and GeGLU,
 * soft-capping, row gathers, and the mixture-of-experts routing and combination. Cheap next to
 * matmul and attention: RMS norm, rope, the GLUs and soft-capping are spread over the pool for
 * prefill-sized inputs, the rest run on the caller. */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements an op runs on the caller alone: waking the pool costs more. */
#define OPS_PARALLEL_MIN 32768
/* Elements per claimed chunk of silu_mul. */
#define OPS_SILU_CHUNK 8192

enum ops_kind { OPS_RMSNORM, OPS_ROPE, OPS_SILU, OPS_GELU, OPS_SOFTCAP };

/* One row-parallel elementwise op; threads claim `chunk` rows at a time (see cpu_pool.h). */
struct ops_job {
    enum ops_kind kind;
    const struct cpu_backend *cb;
    atomic_llong next;
    int64_t n_rows, chunk;
    const float *x; /* rmsnorm input, silu/gelu up */
    float *y;       /* rmsnorm output, rope in/out, silu/gelu gate, softcap in/out */
    const float *gain;
    int dim;
    float eps;
    const int32_t *pos;
    int n_heads;
    const struct backend_rope_params *rope;
    const float *cs; /* rope: (n_rows, n_rot) cos/sin of each token's angles */
    float cap;       /* softcap */
};

int cpu_ops_get_rows(struct backend *b, const struct backend_weight *w, const int32_t *ids, int n,
                     float *out)
{
    const struct cpu_kernels *k = &cpu_backend_of(b)->kern;
    if (!w || (n > 0 && (!ids || !out)) || n < 0) return ERR_INVAL;
    if (!w->desc.data) return ERR_UNSUPPORTED; /* packed for matmul only (desc.lookup unset) */
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->desc.rows) return ERR_RANGE;
    for (int i = 0; i < n; i++) {
        const char *src = (const char *)w->desc.data + (size_t)ids[i] * w->row_bytes;
        k->dequant_row(w->desc.type, src, out + (size_t)i * w->desc.cols, w->desc.cols);
    }
    return 0;
}

int cpu_ops_add_bias(struct backend *b, float *y, const struct backend_weight *bias, int n_tokens)
{
    (void)b;
    if (!y || !bias || !bias->f32 || n_tokens < 0) return ERR_INVAL;
    int64_t dim = bias->desc.cols;
    for (int t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < dim; i++) y[t * dim + i] += bias->f32[i];
    return 0;
}

int cpu_ops_add(struct backend *b, float *y, const float *x, size_t n)
{
    (void)b;
    if (n > 0 && (!y || !x)) return ERR_INVAL;
    for (size_t i = 0; i < n; i++) y[i] += x[i];
    return 0;
}

/* Rows whose sums of squares run side by side in rmsnorm_rows. */
#define OPS_RMSNORM_ROWS 8

/* y = x / sqrt(mean(x^2) + eps) * g for rows [r0, r1) of n elements; as ggml, each row's float
 * squares summed in double in element order. That sum is one long chain of dependent adds, so
 * OPS_RMSNORM_ROWS rows' chains are interleaved (each row's order, and result, unchanged). */
static void rmsnorm_rows(const float *x, const float *g, float *y, int64_t r0, int64_t r1, int n,
                         float eps)
{
    for (int64_t t = r0; t < r1; t += OPS_RMSNORM_ROWS) {
        int nr = r1 - t < OPS_RMSNORM_ROWS ? (int)(r1 - t) : OPS_RMSNORM_ROWS;
        const float *xt = x + t * n;
        double ss[OPS_RMSNORM_ROWS] = {0};
        if (nr == OPS_RMSNORM_ROWS) {
            for (int i = 0; i < n; i++)
                for (int r = 0; r < OPS_RMSNORM_ROWS; r++) {
                    float v = xt[(size_t)r * n + i];
                    ss[r] += (double)(v * v);
                }
        } else {
            for (int r = 0; r < nr; r++)
                for (int i = 0; i < n; i++) {
                    float v = xt[(size_t)r * n + i];
                    ss[r] += (double)(v * v);
                }
        }
        for (int r = 0; r < nr; r++) {
            float scale = 1.0f / sqrtf((float)(ss[r] / n) + eps);
            const float *xr = xt + (size_t)r * n;
            float *yr = y + (t + r) * n;
            for (int i = 0; i < n; i++) yr[i] = xr[i] * scale * g[i];
        }
    }
}

static void rope_token(float *x, int n_heads, int head_dim, const struct backend_rope_params *p,
                       const float *cs);

/* GeGLU over elements [i0, i1) as ggml_vec_geglu_f32 with GGML_GELU_FP16: gelu from the f16 table
 * (cpu_backend.h: gelu_f16) at x rounded to f16, 0 at or below -10, x at or above 10. The
 * conversions run through the level's f16 kernels, 64 elements at a time (the same roundings as
 * quant_f32_to_f16 / quant_f16_to_f32; a scalar pass was 8 ns per element). */
static void gelu_mul_range(const struct cpu_backend *cb, float *gate, const float *up, int64_t i0,
                           int64_t i1)
{
    const uint16_t *table = cb->gelu_f16;
    uint16_t h[64];
    float g[64];
    for (int64_t i = i0; i < i1; i += 64) {
        int n = i1 - i < 64 ? (int)(i1 - i) : 64;
        cb->kern.f32_to_f16(gate + i, h, n);
        for (int j = 0; j < n; j++) h[j] = table[h[j]];
        cb->kern.f16_to_f32(h, g, n);
        for (int j = 0; j < n; j++) {
            float x = gate[i + j];
            gate[i + j] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * up[i + j] : g[j] * up[i + j];
        }
    }
}

/* x = cap * tanh(x * (1 / cap)): ggml_scale, ggml_tanh, ggml_scale as llama.cpp chains them. */
static void softcap_range(float *x, int64_t i0, int64_t i1, float cap)
{
    float inv = 1.0f / cap;
    for (int64_t i = i0; i < i1; i++) x[i] = tanhf(x[i] * inv) * cap;
}

static void ops_rows(const struct ops_job *j, int64_t r0, int64_t r1)
{
    switch (j->kind) {
    case OPS_RMSNORM: rmsnorm_rows(j->x, j->gain, j->y, r0, r1, j->dim, j->eps); break;
    case OPS_ROPE:
        for (int64_t t = r0; t < r1; t++)
            rope_token(j->y + t * j->n_heads * j->dim, j->n_heads, j->dim, j->rope,
                       j->cs + (size_t)t * j->rope->n_rot);
        break;
    case OPS_SILU: j->cb->kern.silu_mul(j->y + r0, j->x + r0, (size_t)(r1 - r0)); break;
    case OPS_GELU: gelu_mul_range(j->cb, j->y, j->x, r0, r1); break;
    case OPS_SOFTCAP: softcap_range(j->y, r0, r1, j->cap); break;
    }
}

static void ops_task(void *ctx, int ith, int nth)
{
    struct ops_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        int64_t r0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (r0 >= j->n_rows) break;
        ops_rows(j, r0, r0 + j->chunk < j->n_rows ? r0 + j->chunk : j->n_rows);
    }
}

/* Runs the job over all rows: on the pool when there are `elems` >= OPS_PARALLEL_MIN elements
 * (every row's result is the same either way), else on the calling thread. */
static void ops_run(struct cpu_backend *cb, struct ops_job *j, size_t elems)
{
    int nth = cpu_backend_threads(cb);
    if (elems < OPS_PARALLEL_MIN || nth == 1) {
        ops_rows(j, 0, j->n_rows);
        return;
    }
    int64_t per = (int64_t)nth * 4;
    if (j->kind == OPS_RMSNORM || j->kind == OPS_ROPE) j->chunk = (j->n_rows + per - 1) / per;
    atomic_init(&j->next, 0);
    cpu_backend_run(cb, ops_task, j);
}

int cpu_ops_rmsnorm(struct backend *b, const float *x, const struct backend_weight *gain, float *y,
                    int n_tokens, int dim, float eps)
{
    if (!x || !y || !gain || !gain->f32 || n_tokens < 0 || dim <= 0) return ERR_INVAL;
    if (gain->desc.cols != dim) return ERR_INVAL;
    struct cpu_backend *cb = cpu_backend_of(b);
    struct ops_job j = {.kind = OPS_RMSNORM,
                        .cb = cb,
                        .n_rows = n_tokens,
                        .x = x,
                        .y = y,
                        .gain = gain->f32,
                        .dim = dim,
                        .eps = eps};
    ops_run(cb, &j, (size_t)n_tokens * dim);
    return 0;
}

int cpu_ops_rmsnorm_heads(struct backend *b, float *x, const struct backend_weight *gain,
                          int n_rows, int head_dim, float eps)
{
    (void)b;
    if (!x || !gain || !gain->f32 || n_rows < 0 || head_dim <= 0) return ERR_INVAL;
    if (gain->desc.cols != head_dim) return ERR_INVAL;
    rmsnorm_rows(x, gain->f32, x, 0, n_rows, head_dim, eps); /* in place: each row read first */
    return 0;
}

/* ggml_rope_yarn_corr_dims: the first and last dimension pair YaRN blends (from where a pair turns
 * fewer than beta_fast, up to beta_slow, times over the original context). */
static void rope_corr_dims(const struct backend_rope_params *p, float dims[2])
{
    const float two_pi = 6.283185307179586f;
    float n = (float)p->n_rot, lb = 2.0f * logf(p->freq_base), ctx = (float)p->n_ctx_orig;
    float start = floorf(n * logf(ctx / (p->beta_fast * two_pi)) / lb);
    float end = ceilf(n * logf(ctx / (p->beta_slow * two_pi)) / lb);
    dims[0] = start > 0.0f ? start : 0.0f;
    dims[1] = end < n - 1.0f ? end : n - 1.0f;
}

/* cos/sin of one token's rotation angles into cs (n_rot floats), as ggml_rope_cache_init and
 * rope_yarn compute them: theta_i = pos * base^(-2i/n_rot) as a running product of theta_scale in
 * float, divided by the pair's frequency factor, scaled by freq_scale (blended with the unscaled
 * angle by YaRN's ramp when ext_factor is set), cos and sin times attn_factor (and YaRN's
 * magnitude correction), so results match llama.cpp's to the last bit or two. */
static void rope_angles(int32_t pos, const struct backend_rope_params *p, const float dims[2],
                        float *cs)
{
    int half = p->n_rot / 2;
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    float mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    for (int i = 0; i < half; i++) {
        float extrap = p->freq_factors ? theta / p->freq_factors[i] : theta;
        float th = p->freq_scale * extrap;
        if (p->ext_factor != 0.0f) {
            float y = ((float)i - dims[0]) / fmaxf(0.001f, dims[1] - dims[0]);
            float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p->ext_factor;
            th = th * (1.0f - mix) + extrap * mix;
        }
        cs[2 * i] = cosf(th) * mscale;
        cs[2 * i + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

/* Rotary embedding of one token's heads by the angles in cs. NORMAL rotates pairs (2i, 2i+1); NEOX
 * rotates (i, i + n_rot/2). Dimensions >= n_rot are kept. */
static void rope_token(float *x, int n_heads, int head_dim, const struct backend_rope_params *p,
                       const float *cs)
{
    int half = p->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = p->mode == BACKEND_ROPE_NEOX ? i : 2 * i;
            int c = p->mode == BACKEND_ROPE_NEOX ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[c];
            v[a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
            v[c] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
        }
    }
}

/* The angles of `pos` under p: the table of the step's earlier rope calls when they were for the
 * same positions and parameters (each layer rotates q and k at the step's positions, so one step
 * computes them once instead of twice per layer: 64 cosf/sinf per token each time), else computed
 * now. NULL when out of memory. */
static bool rope_same(const struct backend_rope_params *a, const struct backend_rope_params *b)
{
    return a->n_rot == b->n_rot && a->freq_base == b->freq_base && a->freq_scale == b->freq_scale &&
           a->ext_factor == b->ext_factor && a->attn_factor == b->attn_factor &&
           a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow &&
           a->n_ctx_orig == b->n_ctx_orig && a->freq_factors == b->freq_factors;
}

static const float *rope_table(struct cpu_backend *cb, const int32_t *pos, int n,
                               const struct backend_rope_params *p)
{
    struct cpu_rope_table *t = &cpu_backend_lane(cb)->rope;
    if (t->cs && t->n_tokens == n && rope_same(&t->params, p) &&
        memcmp(t->pos, pos, (size_t)n * sizeof(*pos)) == 0)
        return t->cs;
    size_t need = (size_t)n * (size_t)p->n_rot;
    if (need > t->cap_cs || (size_t)n > t->cap_pos) {
        float *cs = malloc(need * sizeof(float));
        int32_t *ps = malloc((size_t)n * sizeof(int32_t));
        if (!cs || !ps) {
            free(cs);
            free(ps);
            return NULL;
        }
        free(t->cs);
        free(t->pos);
        t->cs = cs;
        t->pos = ps;
        t->cap_cs = need;
        t->cap_pos = (size_t)n;
    }
    float dims[2] = {0.0f, 0.0f};
    if (p->ext_factor != 0.0f) rope_corr_dims(p, dims);
    for (int i = 0; i < n; i++) rope_angles(pos[i], p, dims, t->cs + (size_t)i * p->n_rot);
    memcpy(t->pos, pos, (size_t)n * sizeof(*pos));
    t->n_tokens = n;
    t->params = *p;
    return t->cs;
}

int cpu_ops_rope(struct backend *b, float *x, const int32_t *pos, int n_tokens, int n_heads,
                 int head_dim, const struct backend_rope_params *p)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!x || !pos || !p || n_tokens < 0 || n_heads <= 0 || head_dim <= 0) return ERR_INVAL;
    if (p->mode != BACKEND_ROPE_NORMAL && p->mode != BACKEND_ROPE_NEOX) return ERR_INVAL;
    if (p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 != 0) return ERR_INVAL;
    if (!(p->freq_base > 0.0f) || !(p->freq_scale > 0.0f) || !isfinite(p->attn_factor))
        return ERR_INVAL;
    if (p->ext_factor != 0.0f && (!isfinite(p->ext_factor) || !(p->beta_fast > 0.0f) ||
                                  !(p->beta_slow > 0.0f) || p->n_ctx_orig <= 0))
        return ERR_INVAL;
    if (n_tokens == 0) return 0;
    const float *cs = rope_table(cb, pos, n_tokens, p);
    if (!cs) return ERR_NOMEM;
    struct ops_job j = {.kind = OPS_ROPE,
                        .cb = cb,
                        .n_rows = n_tokens,
                        .y = x,
                        .dim = head_dim,
                        .pos = pos,
                        .n_heads = n_heads,
                        .rope = p,
                        .cs = cs};
    ops_run(cb, &j, (size_t)n_tokens * n_heads * head_dim);
    return 0;
}

int cpu_ops_silu_mul(struct backend *b, float *gate, const float *up, size_t n)
{
    if (n > 0 && (!gate || !up)) return ERR_INVAL;
    struct cpu_backend *cb = cpu_backend_of(b);
    struct ops_job j = {.kind = OPS_SILU,
                        .cb = cb,
                        .n_rows = (int64_t)n,
                        .chunk = OPS_SILU_CHUNK,
                        .x = up,
                        .y = gate};
    ops_run(cb, &j, n);
    return 0;
}

int cpu_ops_gather_rows(struct backend *b, const float *src, const int32_t *idx, int n, int dim,
                        float *dst)
{
    (void)b;
    if (n < 0 || dim <= 0 || (n > 0 && (!src || !idx || !dst))) return ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (idx[i] < 0) return ERR_RANGE;
    for (int i = 0; i < n; i++)
        memmove(dst + (size_t)i * dim, src + (size_t)idx[i] * dim, (size_t)dim * sizeof(float));
    return 0;
}

int cpu_ops_gelu_mul(struct backend *b, float *gate, const float *up, size_t n)
{
    if (n > 0 && (!gate || !up)) return ERR_INVAL;
    struct cpu_backend *cb = cpu_backend_of(b);
    struct ops_job j = {.kind = OPS_GELU,
                        .cb = cb,
                        .n_rows = (int64_t)n,
                        .chunk = OPS_SILU_CHUNK,
                        .x = up,
                        .y = gate};
    ops_run(cb, &j, n);
    return 0;
}

int cpu_ops_scale(struct backend *b, float *x, size_t n, float s)
{
    (void)b;
    if (n > 0 && !x) return ERR_INVAL;
    for (size_t i = 0; i < n; i++) x[i] *= s;
    return 0;
}

int cpu_ops_softcap(struct backend *b, float *x, size_t n, float cap)
{
    if ((n > 0 && !x) || !(cap > 0.0f) || !isfinite(cap)) return ERR_INVAL;
    struct cpu_backend *cb = cpu_backend_of(b);
    struct ops_job j = {.kind = OPS_SOFTCAP,
                        .cb = cb,
                        .n_rows = (int64_t)n,
                        .chunk = OPS_SILU_CHUNK,
                        .y = x,
                        .cap = cap};
    ops_run(cb, &j, n);
    return 0;
}

/* ggml_soft_max_f32 of one row in place (scale 1, no mask): exp of x - max by ggml_v_expf over
 * 16-element chunks (each chunk summed as one vector reduction) and expf for the tail, the sum in
 * double, then every element times (float)(1 / sum). */
static void ops_softmax_row(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    double sum = 0.0;
    int i = 0;
    for (; i + 15 < n; i += 16) {
        for (int l = 0; l < 16; l++) x[i + l] = cpu_ggml_expf(x[i + l] - mx);
        sum += (double)cpu_ggml_reduce16(x + i);
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += (double)x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int k = 0; k < n; k++) x[k] *= inv;
}

int cpu_ops_moe_route(struct backend *b, const float *logits, int n_rows, int n_expert, int k,
                      bool norm, int32_t *ids, float *w)
{
    if (n_rows < 0 || n_expert <= 0 || k < 1 || k > n_expert) return ERR_INVAL;
    if (n_rows > 0 && (!logits || !ids || !w)) return ERR_INVAL;
    float *p = cpu_backend_scratch(cpu_backend_of(b), (size_t)n_expert * sizeof(float));
    if (!p) return ERR_NOMEM;
    for (int r = 0; r < n_rows; r++) {
        memcpy(p, logits + (size_t)r * n_expert, (size_t)n_expert * sizeof(float));
        ops_softmax_row(p, n_expert);
        int32_t *id = ids + (size_t)r * k;
        float *wr = w + (size_t)r * k;
        /* top k by selection: the highest remaining probability, the lower index on ties */
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n_expert; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++) taken = taken || id[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            id[j] = best;
            wr[j] = p[best];
        }
        if (norm) {
            double sum = 0.0; /* ggml_sum_rows: a double accumulator, rounded to float */
            for (int j = 0; j < k; j++) sum += (double)wr[j];
            float s = (float)sum;
            if (s < 6.103515625e-5f) s = 6.103515625e-5f;
            for (int j = 0; j < k; j++) wr[j] /= s;
        }
    }
    return 0;
}

int cpu_ops_moe_combine(struct backend *b, const float *x, const float *w, int n_rows, int k,
                        int dim, float *out)
{
    (void)b;
    if (n_rows < 0 || k < 1 || dim <= 0 || (n_rows > 0 && (!x || !w || !out))) return ERR_INVAL;
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * k * dim;
        const float *wr = w + (size_t)r * k;
        float *o = out + (size_t)r * dim;
        for (int i = 0; i < dim; i++) o[i] = xr[i] * wr[0];
        for (int j = 1; j < k; j++)
            for (int i = 0; i < dim; i++) o[i] += xr[(size_t)j * dim + i] * wr[j];
    }
    return 0;
}

int cpu_ops_scale_rows_sigmoid(struct backend *b, float *x, const float *g, int n_rows, int dim)
{
    (void)b;
    if (n_rows < 0 || dim <= 0 || (n_rows > 0 && (!x || !g))) return ERR_INVAL;
    for (int r = 0; r < n_rows; r++) {
        float silu = g[r] / (1.0f + expf(-g[r])); /* ggml_silu_f32 (a one-element row) */
        float s = silu / g[r];
        float *xr = x + (size_t)r * dim;
        for (int i = 0; i < dim; i++) xr[i] *= s;
    }
    return 0;
}

void cpu_ops_gelu_table(uint16_t *table)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
    for (uint32_t i = 0; i < 65536; i++) {
        float x = quant_f16_to_f32((uint16_t)i);
        float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
        table[i] = quant_f32_to_f16(g);
    }
}
