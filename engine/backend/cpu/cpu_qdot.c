/* Scalar integer dot products of every quantized weight type with its activation format (ggml's
 * pairing: Q8_0 activations for the 32-element formats, Q8_K for the K-quants and IQ4_XS). They are
 * the reference the SIMD kernels are tested against, and each fixes the arithmetic those follow:
 *  - 32-element formats: per block the exact int32 sum s = sum q_w * q_x (q_w the signed value:
 *    Q5_0 q - 16, IQ4_NL its codebook value; Q4_1/Q5_1 the unsigned quant), then
 *    acc = fma(s, d_w * d_x, acc), and for Q4_1/Q5_1 acc = fma(m_w, s_x, acc) with s_x the block's
 *    Q8_1 s (d_x * sum(q_x) rounded to f16, as ggml's Q8_1 stores it: the Q4_1/Q5_1 offset term is
 *    as llama.cpp computes it, not exact);
 *  - K formats: per super-block the exact int32 sums isum = sum_k scale_k * sum q_w * q_x over its
 *    sub-blocks and msum = sum_k min_k * sum(q_x of sub-block k), then
 *    acc = fma(d_x, fma(d, isum, -(dmin * msum)), acc), or acc = fma(d_x, d * isum, acc) without
 *    mins.
 * The integer sums are exact, so a SIMD kernel that forms them in any order and then runs the same
 * float operations gives bit-identical outputs (the tests check this for every level). Q8_0 and
 * Q4_0 keep their older float arithmetic (acc += d_w * d_x * s), which their SIMD kernels follow
 * only to within rounding. */
#include "engine/backend/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

enum cpu_act cpu_act_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q8_0:
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_IQ4_NL: return CPU_ACT_Q8_0;
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
    case QUANT_IQ4_XS: return CPU_ACT_Q8_K;
    default: return CPU_ACT_FLOAT;
    }
}

/* Tokens a kernel keeps accumulators for at once (matmul passes at most 16 per call). */
#define QDOT_TOKENS 16

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
                s += quant_f16_to_f32(wb[b].d) * xd[b] * (float)is;
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
                s += quant_f16_to_f32(wb[b].d) * xd[b] * (float)is;
            }
            y[(size_t)t * ldy + r] = s;
        }
    }
}

/* ---- 32-element formats with the exact-sum arithmetic --------------------------------------- */

/* One block's signed weight values q[32], its scale and (Q4_1/Q5_1) offset. */
struct qdot_block32 {
    int8_t q[32];
    float d, m;
    int has_m;
};

static void qdot_unpack32(enum quant_type type, const uint8_t *blk, struct qdot_block32 *o)
{
    uint16_t h;
    memcpy(&h, blk, sizeof(h));
    o->d = quant_f16_to_f32(h);
    o->m = 0.0f;
    o->has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1;
    if (o->has_m) {
        memcpy(&h, blk + 2, sizeof(h));
        o->m = quant_f16_to_f32(h);
    }
    const uint8_t *qs = blk + (o->has_m ? 4 : 2);
    uint32_t qh = 0;
    if (type == QUANT_Q5_0 || type == QUANT_Q5_1) {
        for (int i = 0; i < 4; i++) qh |= (uint32_t)qs[i] << (8 * i);
        qs += 4;
    }
    for (int j = 0; j < 16; j++) {
        int lo = qs[j] & 0xF, hi = qs[j] >> 4;
        switch (type) {
        case QUANT_Q4_1: break;
        case QUANT_Q5_0:
        case QUANT_Q5_1:
            lo |= (int)((qh >> j) & 1) << 4;
            hi |= (int)((qh >> (j + 16)) & 1) << 4;
            if (type == QUANT_Q5_0) {
                lo -= 16;
                hi -= 16;
            }
            break;
        default: /* IQ4_NL */
            lo = quant_iq4nl_values[lo];
            hi = quant_iq4nl_values[hi];
            break;
        }
        o->q[j] = (int8_t)lo;
        o->q[j + 16] = (int8_t)hi;
    }
}

static void gemm_block32_scalar(enum quant_type type, const void *w, size_t row_bytes, int nr,
                                const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    int nb = xq->nb;
    size_t bsz = quant_block_bytes(type);
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        for (int tc = 0; tc < nt; tc += QDOT_TOKENS) {
            int n = nt - tc < QDOT_TOKENS ? nt - tc : QDOT_TOKENS;
            float acc[QDOT_TOKENS] = {0};
            for (int b = 0; b < nb; b++) {
                struct qdot_block32 wb;
                qdot_unpack32(type, row + (size_t)b * bsz, &wb);
                for (int t = 0; t < n; t++) {
                    size_t xb = (size_t)(t0 + tc + t) * nb + b;
                    const int8_t *xs = xq->qs + xb * 32;
                    int32_t s = 0;
                    for (int j = 0; j < 32; j++) s += wb.q[j] * xs[j];
                    acc[t] = fmaf((float)s, wb.d * xq->d[xb], acc[t]);
                    if (wb.has_m) acc[t] = fmaf(wb.m, xq->s[xb], acc[t]);
                }
            }
            for (int t = 0; t < n; t++) y[(size_t)(tc + t) * ldy + r] = acc[t];
        }
    }
}

#define QDOT_BLOCK32(name, type)                                                                   \
    static void gemm_##name##_scalar(const void *w, size_t row_bytes, int nr,                      \
                                     const struct cpu_act_q8 *xq, int t0, int nt, float *y,        \
                                     size_t ldy)                                                   \
    {                                                                                              \
        gemm_block32_scalar(type, w, row_bytes, nr, xq, t0, nt, y, ldy);                           \
    }
QDOT_BLOCK32(q4_1, QUANT_Q4_1)
QDOT_BLOCK32(q5_0, QUANT_Q5_0)
QDOT_BLOCK32(q5_1, QUANT_Q5_1)
QDOT_BLOCK32(iq4_nl, QUANT_IQ4_NL)

/* ---- K formats ------------------------------------------------------------------------------ */

/* One super-block's signed weight values, and its scales and mins per 16 elements (a sub-block of
 * 32 repeats its scale and min for both halves). */
struct qdot_super {
    int8_t q[QUANT_QK_K];
    int16_t scale[16], min[16];
    float d, dmin;
    int has_min;
};

static float qdot_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return quant_f16_to_f32(h);
}

static void qdot_unpack_k(enum quant_type type, const uint8_t *blk, struct qdot_super *o)
{
    memset(o, 0, sizeof(*o));
    switch (type) {
    case QUANT_Q2_K: {
        struct quant_block_q2_k b;
        memcpy(&b, blk, sizeof(b));
        o->d = quant_f16_to_f32(b.d), o->dmin = quant_f16_to_f32(b.dmin), o->has_min = 1;
        for (int e = 0; e < QUANT_QK_K; e++)
            o->q[e] = (int8_t)((b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3);
        for (int k = 0; k < 16; k++) o->scale[k] = b.scales[k] & 0xF, o->min[k] = b.scales[k] >> 4;
        break;
    }
    case QUANT_Q3_K: {
        struct quant_block_q3_k b;
        memcpy(&b, blk, sizeof(b));
        o->d = quant_f16_to_f32(b.d);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
            o->q[e] = (int8_t)(lo - ((b.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
        }
        for (int k = 0; k < 16; k++) o->scale[k] = (int16_t)quant_scale_q3_k(b.scales, k);
        break;
    }
    case QUANT_Q4_K:
    case QUANT_Q5_K: {
        const uint8_t *sc = blk + 4, *qh = blk + 16, *qs = blk + (type == QUANT_Q4_K ? 16 : 48);
        o->d = qdot_f16(blk), o->dmin = qdot_f16(blk + 2), o->has_min = 1;
        for (int e = 0; e < QUANT_QK_K; e++) {
            int j = e / 32, v = (qs[32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 0xF;
            if (type == QUANT_Q5_K) v |= ((qh[e % 32] >> j) & 1) << 4;
            o->q[e] = (int8_t)v;
        }
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_scale_min_k4(j, sc, &s, &m);
            o->scale[2 * j] = o->scale[2 * j + 1] = s;
            o->min[2 * j] = o->min[2 * j + 1] = m;
        }
        break;
    }
    case QUANT_Q6_K: {
        struct quant_block_q6_k b;
        memcpy(&b, blk, sizeof(b));
        o->d = quant_f16_to_f32(b.d);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int h = e / 128, s = e % 128 / 32, l = e % 32;
            int lo = (b.ql[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0xF;
            int hi = (b.qh[32 * h + l] >> (2 * s)) & 3;
            o->q[e] = (int8_t)((lo | hi << 4) - 32);
        }
        for (int k = 0; k < 16; k++) o->scale[k] = b.scales[k];
        break;
    }
    default: { /* IQ4_XS */
        struct quant_block_iq4_xs b;
        memcpy(&b, blk, sizeof(b));
        o->d = quant_f16_to_f32(b.d);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int j = e / 32, i = e % 32;
            o->q[e] = quant_iq4nl_values[(b.qs[16 * j + i % 16] >> (4 * (i / 16))) & 0xF];
        }
        for (int j = 0; j < 8; j++)
            o->scale[2 * j] = o->scale[2 * j + 1] =
                (int16_t)quant_scale_iq4_xs(b.scales_h, b.scales_l, j);
        break;
    }
    }
}

static void gemm_k_scalar(enum quant_type type, const void *w, size_t row_bytes, int nr,
                          const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    int nb = xq->nb;
    size_t bsz = quant_block_bytes(type);
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        for (int tc = 0; tc < nt; tc += QDOT_TOKENS) {
            int n = nt - tc < QDOT_TOKENS ? nt - tc : QDOT_TOKENS;
            float acc[QDOT_TOKENS] = {0};
            for (int b = 0; b < nb; b++) {
                struct qdot_super wb;
                qdot_unpack_k(type, row + (size_t)b * bsz, &wb);
                for (int t = 0; t < n; t++) {
                    size_t xb = (size_t)(t0 + tc + t) * nb + b;
                    const int8_t *xs = xq->qs + xb * QUANT_QK_K;
                    const int16_t *s16 = xq->sum16 + xb * 16;
                    int32_t isum = 0, msum = 0;
                    for (int k = 0; k < 16; k++) {
                        int32_t s = 0;
                        for (int i = 0; i < 16; i++) s += wb.q[16 * k + i] * xs[16 * k + i];
                        isum += wb.scale[k] * s;
                        msum += wb.min[k] * s16[k];
                    }
                    float dx = xq->d[xb];
                    if (wb.has_min)
                        acc[t] =
                            fmaf(dx, fmaf(wb.d, (float)isum, -(wb.dmin * (float)msum)), acc[t]);
                    else
                        acc[t] = fmaf(dx, wb.d * (float)isum, acc[t]);
                }
            }
            for (int t = 0; t < n; t++) y[(size_t)(tc + t) * ldy + r] = acc[t];
        }
    }
}

#define QDOT_K(name, type)                                                                         \
    static void gemm_##name##_scalar(const void *w, size_t row_bytes, int nr,                      \
                                     const struct cpu_act_q8 *xq, int t0, int nt, float *y,        \
                                     size_t ldy)                                                   \
    {                                                                                              \
        gemm_k_scalar(type, w, row_bytes, nr, xq, t0, nt, y, ldy);                                 \
    }
QDOT_K(q2_k, QUANT_Q2_K)
QDOT_K(q3_k, QUANT_Q3_K)
QDOT_K(q4_k, QUANT_Q4_K)
QDOT_K(q5_k, QUANT_Q5_K)
QDOT_K(q6_k, QUANT_Q6_K)
QDOT_K(iq4_xs, QUANT_IQ4_XS)

void cpu_qdot_scalar(struct cpu_kernels *k)
{
    k->gemm_q[QUANT_Q8_0] = gemm_q8_0_scalar;
    k->gemm_q[QUANT_Q4_0] = gemm_q4_0_scalar;
    k->gemm_q[QUANT_Q4_1] = gemm_q4_1_scalar;
    k->gemm_q[QUANT_Q5_0] = gemm_q5_0_scalar;
    k->gemm_q[QUANT_Q5_1] = gemm_q5_1_scalar;
    k->gemm_q[QUANT_IQ4_NL] = gemm_iq4_nl_scalar;
    k->gemm_q[QUANT_Q2_K] = gemm_q2_k_scalar;
    k->gemm_q[QUANT_Q3_K] = gemm_q3_k_scalar;
    k->gemm_q[QUANT_Q4_K] = gemm_q4_k_scalar;
    k->gemm_q[QUANT_Q5_K] = gemm_q5_k_scalar;
    k->gemm_q[QUANT_Q6_K] = gemm_q6_k_scalar;
    k->gemm_q[QUANT_IQ4_XS] = gemm_iq4_xs_scalar;
    k->quantize_q8_0 = cpu_quant_q8_0_row;
    k->quantize_q8_k = cpu_quant_q8_k_row;
}
