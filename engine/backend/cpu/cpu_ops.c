/* The small ops of the forward pass: embedding lookup, bias and residual adds, RMS norms, rotary
 * embeddings (ggml's formulas), SwiGLU and row gathers. Cheap next to matmul and attention: RMS norm,
 * rope and SwiGLU are spread over the pool for prefill-sized inputs, the rest run on the caller. */
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

enum ops_kind { OPS_RMSNORM, OPS_ROPE, OPS_SILU };

/* One row-parallel elementwise op; threads claim `chunk` rows at a time (see cpu_pool.h). */
struct ops_job {
    enum ops_kind kind;
    const struct cpu_backend *cb;
    atomic_llong next;
    int64_t n_rows, chunk;
    const float *x; /* rmsnorm input, silu up */
    float *y;       /* rmsnorm output, rope in/out, silu gate */
    const float *gain;
    int dim;
    float eps;
    const int32_t *pos;
    int n_heads;
    const struct backend_rope_params *rope;
    const float *cs; /* rope: (n_rows, n_rot) cos/sin of each token's angles */
};

int cpu_ops_get_rows(struct backend *b, const struct backend_weight *w, const int32_t *ids, int n,
                     float *out)
{
    const struct cpu_kernels *k = &cpu_backend_of(b)->kern;
    if (!w || (n > 0 && (!ids || !out)) || n < 0) return ERR_INVAL;
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
    if (j->kind != OPS_SILU) j->chunk = (j->n_rows + per - 1) / per;
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

/* cos/sin of one token's rotation angles into cs (n_rot floats). theta_i = pos * base^(-2i/n_rot) *
 * freq_scale, computed as ggml does (a running product of theta_scale in float) so results match
 * llama.cpp's to the last bit or two. */
static void rope_angles(int32_t pos, const struct backend_rope_params *p, float *cs)
{
    int half = p->n_rot / 2;
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        float th = theta * p->freq_scale;
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
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
static const float *rope_table(struct cpu_backend *cb, const int32_t *pos, int n,
                               const struct backend_rope_params *p)
{
    struct cpu_rope_table *t = &cpu_backend_lane(cb)->rope;
    if (t->cs && t->n_tokens == n && t->n_rot == p->n_rot && t->freq_base == p->freq_base &&
        t->freq_scale == p->freq_scale && memcmp(t->pos, pos, (size_t)n * sizeof(*pos)) == 0)
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
    for (int i = 0; i < n; i++) rope_angles(pos[i], p, t->cs + (size_t)i * p->n_rot);
    memcpy(t->pos, pos, (size_t)n * sizeof(*pos));
    t->n_tokens = n;
    t->n_rot = p->n_rot;
    t->freq_base = p->freq_base;
    t->freq_scale = p->freq_scale;
    return t->cs;
}

int cpu_ops_rope(struct backend *b, float *x, const int32_t *pos, int n_tokens, int n_heads,
                 int head_dim, const struct backend_rope_params *p)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!x || !pos || !p || n_tokens < 0 || n_heads <= 0 || head_dim <= 0) return ERR_INVAL;
    if (p->mode != BACKEND_ROPE_NORMAL && p->mode != BACKEND_ROPE_NEOX) return ERR_INVAL;
    if (p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 != 0) return ERR_INVAL;
    if (!(p->freq_base > 0.0f) || !(p->freq_scale > 0.0f)) return ERR_INVAL;
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
