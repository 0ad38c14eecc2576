/* The portable scalar kernels (the reference every SIMD level is tested against) and the selection
 * of a kernel table for an ISA level. */
#include "engine/backend/cpu/cpu_backend.h"

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

static void gemm_q8_0_scalar(const void *w, size_t row_bytes, int nr, const struct cpu_act_q8 *xq,
                             int t0, int nt, float *y, size_t ldy)
{
    int nb = xq->nb;
    for (int t = 0; t < nt; t++) {
        const int8_t *xs = xq->qs + (size_t)(t0 + t) * nb * QUANT_QK8_0;
        const float *xd = xq->d + (size_t)(t0 + t) * nb;
        for (int r = 0; r < nr; r++) {
            const struct quant_block_q8_0 *wb =
                (const struct quant_block_q8_0 *)((const char *)w + (size_t)r * row_bytes);
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t is = 0;
                for (int j = 0; j < QUANT_QK8_0; j++) is += wb[b].qs[j] * xs[b * QUANT_QK8_0 + j];
                s += cpu_quant_f16_to_f32(wb[b].d) * xd[b] * (float)is;
            }
            y[(size_t)t * ldy + r] = s;
        }
    }
}

static void gemm_q4_0_scalar(const void *w, size_t row_bytes, int nr, const struct cpu_act_q8 *xq,
                             int t0, int nt, float *y, size_t ldy)
{
    int nb = xq->nb;
    for (int t = 0; t < nt; t++) {
        const int8_t *xs = xq->qs + (size_t)(t0 + t) * nb * QUANT_QK8_0;
        const float *xd = xq->d + (size_t)(t0 + t) * nb;
        for (int r = 0; r < nr; r++) {
            const struct quant_block_q4_0 *wb =
                (const struct quant_block_q4_0 *)((const char *)w + (size_t)r * row_bytes);
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                const int8_t *xb = xs + b * QUANT_QK8_0;
                int32_t is = 0;
                for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
                    is += ((wb[b].qs[j] & 0x0f) - 8) * xb[j];
                    is += ((wb[b].qs[j] >> 4) - 8) * xb[j + QUANT_QK4_0 / 2];
                }
                s += cpu_quant_f16_to_f32(wb[b].d) * xd[b] * (float)is;
            }
            y[(size_t)t * ldy + r] = s;
        }
    }
}

static void f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_quant_f16_to_f32(src[i]);
}

static float dot_f32_scalar(const float *q, const float *k, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += q[i] * k[i];
    return s;
}

static float dot_f16_scalar(const float *q, const uint16_t *k, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += q[i] * cpu_quant_f16_to_f32(k[i]);
    return s;
}

static void axpy_f32_scalar(float a, const float *v, float *y, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * v[i];
}

static void axpy_f16_scalar(float a, const uint16_t *v, float *y, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * cpu_quant_f16_to_f32(v[i]);
}

void cpu_kernels_scalar(struct cpu_kernels *k)
{
    k->gemm_f32 = gemm_f32_scalar;
    k->gemm_q8_0 = gemm_q8_0_scalar;
    k->gemm_q4_0 = gemm_q4_0_scalar;
    k->f16_to_f32 = f16_to_f32_scalar;
    k->dot_f32 = dot_f32_scalar;
    k->dot_f16 = dot_f16_scalar;
    k->axpy_f32 = axpy_f32_scalar;
    k->axpy_f16 = axpy_f16_scalar;
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
