/* The K-quant formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and Q8_K): super-blocks of 256 elements whose
 * sub-blocks of 16 or 32 carry quantized scales (and mins). Decoders are ggml's dequantize_row_*;
 * encoders are its quantize_row_*_ref with the search helpers they call (make_qx_quants,
 * make_q3_quants, make_qkx2_quants), transcribed expression for expression: the scale searches
 * compare float sums, so any reordering, fused multiply-add or different rounding changes which
 * candidate wins and with it the bytes. (The Makefile's -std=c11 keeps GCC from contracting.) */
#include "engine/gguf/quant_priv.h"

#include <math.h>

#define QUANT_GROUP_MAX_EPS 1e-15f

static inline int quant_clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- decoders ------------------------------------------------------------------------------- */

void quant_dequant_q2_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q2_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d), min = quant_f16_to_f32(b.dmin);
        const uint8_t *q = b.qs;
        float *y = dst + i * QUANT_QK_K;
        int is = 0;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = b.scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

void quant_dequant_q3_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q3_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d_all = quant_f16_to_f32(b.d);
        const uint8_t *q = b.qs;
        float *y = dst + i * QUANT_QK_K;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (float)quant_scale_q3_k(b.scales, is++);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
            q += 32;
        }
    }
}

void quant_dequant_q4_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q4_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d), min = quant_f16_to_f32(b.dmin);
        const uint8_t *q = b.qs;
        float *y = dst + i * QUANT_QK_K;
        for (int j = 0; j < QUANT_QK_K / 64; j++, q += 32) {
            uint8_t sc, m;
            quant_scale_min_k4(2 * j, b.scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_scale_min_k4(2 * j + 1, b.scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void quant_dequant_q5_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q5_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d), min = quant_f16_to_f32(b.dmin);
        const uint8_t *ql = b.qs;
        float *y = dst + i * QUANT_QK_K;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QUANT_QK_K / 64; j++, ql += 32) {
            uint8_t sc, m;
            quant_scale_min_k4(2 * j, b.scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_scale_min_k4(2 * j + 1, b.scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* Q6_K: each half (128 elements) uses 64 bytes of ql (low nibbles of elements l and l+64 share a
 * byte, as do l+32 and l+96), 32 bytes of qh (2 high bits of four elements) and 8 scales of 16. */
void quant_dequant_q6_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q6_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        const uint8_t *ql = b.ql, *qh = b.qh;
        const int8_t *sc = b.scales;
        float *y = dst + i * QUANT_QK_K;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quant_dequant_q8_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q8_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        float *y = dst + i * QUANT_QK_K;
        for (int j = 0; j < QUANT_QK_K; j++) y[j] = b.d * (float)b.qs[j];
    }
}

/* ---- ggml's scale searches ------------------------------------------------------------------- */

/* make_qx_quants with rmse_type 1 and no importance weights (the only use, Q6_K): symmetric quants
 * in [-nmax, nmax) stored + nmax in L, scale chosen among 19 candidates by weighted (x^2) error. */
static float quant_make_qx(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = quant_clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = quant_clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = quant_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + quant_clampi(l, -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse (Q3_K): symmetric quants refined by up to five coordinate passes. */
static float quant_make_q3(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = quant_clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = quant_clampi(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* make_qkx2_quants: asymmetric quants in [0, nmax] with a min, the scale and min chosen by weighted
 * least squares over nstep + 1 candidate ranges (squared or, with use_mad, absolute error). */
struct quant_qkx2 {
    int nmax;
    float rmin, rdelta;
    int nstep;
    bool use_mad;
};

static float quant_make_qkx2(const struct quant_qkx2 *p, int n, const float *x,
                             const float *weights, uint8_t *L, float *the_min, uint8_t *Laux)
{
    const int nmax = p->nmax;
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = quant_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)quant_clampi(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = p->use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= p->nstep; ++is) {
        iscale = (p->rmin + p->rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = quant_clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = p->use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- encoders ------------------------------------------------------------------------------- */

/* Byte l of each 32 of qs holds the 2-bit quants of elements l, l + 32, l + 64, l + 96 of each 128. */
static void quant_pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QUANT_QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

/* quantize_row_q2_K_ref */
void quant_quant_q2_k(const float *x, uint8_t *dst, size_t nb)
{
    static const struct quant_qkx2 p = {3, -0.5f, 0.1f, 15, true};
    const float q4scale = 15.f;
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q2_k y;
        uint8_t L[QUANT_QK_K], Laux[16];
        float weights[16], mins[QUANT_QK_K / 16], scales[QUANT_QK_K / 16];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = quant_make_qkx2(&p, 16, x + 16 * j, weights, L + 16 * j, &mins[j], Laux);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; ++j)
                y.scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y.d = quant_f32_to_f16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QUANT_QK_K / 16; ++j) y.scales[j] = 0;
            y.d = quant_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QUANT_QK_K / 16; ++j) {
                int l = quant_nearest_int(iscale * mins[j]);
                y.scales[j] = (uint8_t)(y.scales[j] | ((unsigned)l << 4)); /* NaN: any l */
            }
            y.dmin = quant_f32_to_f16(max_min / q4scale);
        } else {
            y.dmin = quant_f32_to_f16(0.f);
        }
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            const float d = quant_f16_to_f32(y.d) * (float)(y.scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = quant_f16_to_f32(y.dmin) * (float)(y.scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = quant_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)quant_clampi(l, 0, 3);
            }
        }
        quant_pack_2bit(L, y.qs);
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* quantize_row_q3_K_ref */
void quant_quant_q3_k(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q3_k y;
        int8_t L[QUANT_QK_K];
        float scales[QUANT_QK_K / 16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            scales[j] = quant_make_q3(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y.scales, 0, sizeof(y.scales));
        if (max_scale != 0.0f) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; ++j) {
                int8_t l = (int8_t)quant_nearest_int(iscale * scales[j]);
                l = (int8_t)(quant_clampi(l, -32, 31) + 32);
                if (j < 8)
                    y.scales[j] = (uint8_t)(l & 0xF);
                else
                    y.scales[j - 8] = (uint8_t)(y.scales[j - 8] | ((l & 0xF) << 4));
                l = (int8_t)(l >> 4);
                y.scales[j % 4 + 8] = (uint8_t)(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
            }
            y.d = quant_f32_to_f16(1 / iscale);
        } else {
            y.d = quant_f32_to_f16(0.f);
        }
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            const float d = quant_f16_to_f32(y.d) * (float)quant_scale_q3_k(y.scales, j);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = quant_clampi(quant_nearest_int(x[16 * j + ii] / d), -4, 3);
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        /* the high bit of element 32k + l goes to bit k of hmask[l] */
        memset(y.hmask, 0, sizeof(y.hmask));
        uint8_t Lu[QUANT_QK_K];
        for (int j = 0; j < QUANT_QK_K; ++j) {
            Lu[j] = (uint8_t)L[j];
            if (L[j] > 3) {
                y.hmask[j % 32] = (uint8_t)(y.hmask[j % 32] | (1u << (j / 32)));
                Lu[j] = (uint8_t)(L[j] - 4);
            }
        }
        quant_pack_2bit(Lu, y.qs);
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* The shared part of quantize_row_q4_K_ref and quantize_row_q5_K_ref: per 32 elements an
 * asymmetric fit with weights av_x + |x|, then 6-bit scales and mins packed as get_scale_min_k4
 * reads them, then quants recomputed from the rounded scales. Fills scales, d, dmin and L. */
static void quant_quant_k4_scales(const float *x, const struct quant_qkx2 *p, uint8_t *packed,
                                  uint16_t *d_out, uint16_t *dmin_out, uint8_t *L)
{
    uint8_t Laux[32];
    float weights[32], mins[QUANT_QK_K / 32], scales[QUANT_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = quant_make_qkx2(p, 32, x + 32 * j, weights, L + 32 * j, &mins[j], Laux);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] = (uint8_t)(packed[j - 4] | ((ls >> 4) << 6));
            packed[j - 0] = (uint8_t)(packed[j - 0] | ((lm >> 4) << 6));
        }
    }
    *d_out = quant_f32_to_f16(max_scale / 63.f);
    *dmin_out = quant_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        uint8_t sc, m;
        quant_scale_min_k4(j, packed, &sc, &m);
        const float d = quant_f16_to_f32(*d_out) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = quant_f16_to_f32(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = quant_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)quant_clampi(l, 0, p->nmax);
        }
    }
}

/* quantize_row_q4_K_ref */
void quant_quant_q4_k(const float *x, uint8_t *dst, size_t nb)
{
    static const struct quant_qkx2 p = {15, -1.f, 0.1f, 20, false};
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q4_k y;
        uint8_t L[QUANT_QK_K];
        quant_quant_k4_scales(x, &p, y.scales, &y.d, &y.dmin, L);
        uint8_t *q = y.qs;
        for (int j = 0; j < QUANT_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* quantize_row_q5_K_ref */
void quant_quant_q5_k(const float *x, uint8_t *dst, size_t nb)
{
    static const struct quant_qkx2 p = {31, -0.5f, 0.1f, 15, false};
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q5_k y;
        uint8_t L[QUANT_QK_K];
        quant_quant_k4_scales(x, &p, y.scales, &y.d, &y.dmin, L);
        memset(y.qh, 0, sizeof(y.qh));
        uint8_t *ql = y.qs, m1 = 1, m2 = 2;
        for (int n = 0; n < QUANT_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* quantize_row_q6_K_ref */
void quant_quant_q6_k(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q6_k y;
        int8_t L[QUANT_QK_K];
        float scales[QUANT_QK_K / 16];
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QUANT_QK_K / 16; ++ib) {
            const float scale = quant_make_qx(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < QUANT_GROUP_MAX_EPS) {
            memset(&y, 0, sizeof(y));
            y.d = quant_f32_to_f16(0.f);
            memcpy(dst + i * sizeof(y), &y, sizeof(y));
            continue;
        }
        float iscale = -128.f / max_scale;
        y.d = quant_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QUANT_QK_K / 16; ++ib) {
            int v = quant_nearest_int(iscale * scales[ib]);
            y.scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            float d = quant_f16_to_f32(y.d) * (float)y.scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = quant_clampi(quant_nearest_int(x[16 * j + ii] / d), -32, 31);
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y.ql, *qh = y.qh;
        for (int j = 0; j < QUANT_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* quantize_row_q8_K_ref: the signed value of largest magnitude maps to -127 (iscale = -127 / max),
 * quants are clamped to 127, and bsums hold the sums of each 16-quant group for the K-quant dots.
 * An all-zero block gets d = 0 and zero quants (ggml leaves its bsums unset; we zero them). */
void quant_quant_q8_k(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_q8_k b;
        memset(&b, 0, sizeof(b));
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QUANT_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax != 0.0f) {
            const float iscale = -127.f / max;
            for (int j = 0; j < QUANT_QK_K; j++) {
                int v = quant_nearest_int(iscale * x[j]);
                b.qs[j] = (int8_t)(v < 127 ? v : 127);
            }
            for (int j = 0; j < QUANT_QK_K / 16; j++) {
                int sum = 0;
                for (int k = 0; k < 16; k++) sum += b.qs[j * 16 + k];
                b.bsums[j] = (int16_t)sum;
            }
            b.d = 1 / iscale;
        }
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}
