/* The portable scalar kernels (the reference every SIMD level is tested against) and the selection
 * of a kernel table for an ISA level. */
#include "engine/backend/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

static void gemm_f32_scalar(const float *w, size_t ldw, int nr, const float *x, size_t ldx, int nt,
                            int k, float *y, size_t ldy)
{
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int r = 0; r < nr; r++) {
            const float *wr = w + (size_t)r * ldw;
            float s = 0.0f;
            for (int i = 0; i < k; i++) s += wr[i] * xt[i];
            y[(size_t)t * ldy + r] = s;
        }
    }
}

static void gemm_f16_scalar(const uint16_t *w, size_t ldw, int nr, const float *x, size_t ldx,
                            int nt, int k, float *y, size_t ldy)
{
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int r = 0; r < nr; r++) {
            const uint16_t *wr = w + (size_t)r * ldw;
            float s = 0.0f;
            for (int i = 0; i < k; i++) s += quant_f16_to_f32(wr[i]) * xt[i];
            y[(size_t)t * ldy + r] = s;
        }
    }
}

static void f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

static void f32_to_f16_scalar(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

static void attn_scores_scalar(const float *qt, int hd, const float *k, size_t ldk, int np,
                               float *s)
{
    for (int p = 0; p < np; p++) {
        float acc[CPU_ATTN_ROWS] = {0};
        for (int i = 0; i < hd; i++)
            for (int r = 0; r < CPU_ATTN_ROWS; r++)
                acc[r] += qt[i * CPU_ATTN_ROWS + r] * k[p * ldk + i];
        memcpy(s + (size_t)p * CPU_ATTN_ROWS, acc, sizeof(acc));
    }
}

static void attn_scores_dot_scalar(const float *q, int nq, int hd, const float *k, size_t ldk,
                                   int np, float *s)
{
    for (int p = 0; p < np; p++)
        for (int r = 0; r < nq; r++) {
            float acc = 0.0f;
            for (int i = 0; i < hd; i++) acc += q[r * hd + i] * k[p * ldk + i];
            s[p * CPU_ATTN_ROWS + r] = acc;
        }
}

static void attn_softmax_scalar(float *s, int np, const int32_t *lim, float *inv)
{
    for (int r = 0; r < CPU_ATTN_ROWS; r++) {
        float mx = -INFINITY, sum = 0.0f;
        for (int p = 0; p < lim[r] && p < np; p++) mx = fmaxf(mx, s[p * CPU_ATTN_ROWS + r]);
        for (int p = 0; p < np; p++) {
            float e = p < lim[r] ? expf(s[p * CPU_ATTN_ROWS + r] - mx) : 0.0f;
            s[p * CPU_ATTN_ROWS + r] = e;
            sum += e;
        }
        inv[r] = 1.0f / sum;
    }
}

static void attn_pv_scalar(const float *s, int nq, const float *v, size_t ldv, int np, float *o,
                           int hd)
{
    for (int r = 0; r < nq; r++)
        for (int p = 0; p < np; p++) {
            float w = s[p * CPU_ATTN_ROWS + r];
            for (int i = 0; i < hd; i++) o[r * hd + i] += w * v[p * ldv + i];
        }
}

static void attn_probs_f16_scalar(float *s, int np, const float *inv)
{
    for (int p = 0; p < np; p++)
        for (int r = 0; r < CPU_ATTN_ROWS; r++) {
            float v = s[p * CPU_ATTN_ROWS + r] * inv[r];
            s[p * CPU_ATTN_ROWS + r] = quant_f16_to_f32(quant_f32_to_f16(v));
        }
}

static void ggml_scores_scalar(const float *q, int hd, const float *kt, size_t ldk, int n, float *s)
{
    for (int p = 0; p < n; p++) {
        double dot = 0.0;
        for (int i = 0; i < hd; i++) dot += (double)(q[i] * kt[(size_t)i * ldk + p]);
        s[p] = (float)dot;
    }
}

static double ggml_exp_sum_scalar(float *x, int lo, int np, float mx)
{
    double sum = 0.0;
    for (int c = lo & ~15; c < np; c += 16) {
        float lane[16] = {0};
        for (int l = 0; l < 16 && c + l < np; l++) {
            if (c + l < lo) continue;
            x[c + l] = cpu_ggml_expf(x[c + l] - mx);
            lane[l] = x[c + l];
        }
        sum += (double)cpu_ggml_reduce16(lane);
    }
    return sum;
}

static void ggml_pv_scalar(const float *pr, int p0, int n, const float *v, int hd, float *acc)
{
    for (int p = 0; p < n; p++) {
        float *a = acc + (size_t)((p0 + p) & 15) * hd;
        for (int i = 0; i < hd; i++) a[i] = fmaf(pr[p], v[(size_t)p * hd + i], a[i]);
    }
}

static void silu_mul_scalar(float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void dequant_row_scalar(enum quant_type type, const void *src, float *dst, int64_t n)
{
    quant_dequantize_row(type, src, dst, (size_t)n);
}

void cpu_kernels_scalar(struct cpu_kernels *k)
{
    memset(k, 0, sizeof(*k)); /* optional kernels the scalar level lacks stay NULL */
    k->gemm_f32 = gemm_f32_scalar;
    k->gemm_f16 = gemm_f16_scalar;
    cpu_qdot_scalar(k);
    k->f16_to_f32 = f16_to_f32_scalar;
    k->f32_to_f16 = f32_to_f16_scalar;
    k->silu_mul = silu_mul_scalar;
    k->dequant_row = dequant_row_scalar;
    k->attn_scores = attn_scores_scalar;
    k->attn_scores_dot = attn_scores_dot_scalar;
    k->attn_softmax = attn_softmax_scalar;
    k->attn_pv = attn_pv_scalar;
    k->attn_probs_f16 = attn_probs_f16_scalar;
    k->ggml_scores = ggml_scores_scalar;
    k->ggml_exp_sum = ggml_exp_sum_scalar;
    k->ggml_pv = ggml_pv_scalar;
}

void cpu_kernels_init(struct cpu_kernels *k, enum cpu_isa isa)
{
    cpu_kernels_scalar(k);
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX2) cpu_kernels_avx2(k);
    if (isa >= CPU_ISA_AVX512) cpu_kernels_avx512(k);
#else
    (void)isa;
#endif
}
