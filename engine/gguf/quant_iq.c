/* The non-linear 4-bit formats IQ4_NL (blocks of 32, one f16 scale) and IQ4_XS (super-blocks of
 * 256 with 6-bit scales per 32): each nibble indexes a fixed 16-value codebook. The encoder is
 * ggml's quantize_row_iq4_nl_impl as llama.cpp's quantizer calls it without an importance matrix
 * (quantize_iq4_nl / quantize_iq4_xs: 7 scale trials each side). ggml's quantize_row_iq4_nl_ref
 * runs no trials and gives other bytes; files in the wild come from the quantizer, so we match it. */
#include "engine/gguf/quant_priv.h"

#include <math.h>

#define QUANT_GROUP_MAX_EPS 1e-15f
#define QUANT_IQ4_NTRY      7

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

void quant_dequant_iq4_nl(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_iq4_nl b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        float *y = dst + i * QUANT_QK4_NL;
        for (int j = 0; j < QUANT_QK4_NL / 2; ++j) {
            y[j] = d * (float)quant_iq4nl_values[b.qs[j] & 0xf];
            y[j + QUANT_QK4_NL / 2] = d * (float)quant_iq4nl_values[b.qs[j] >> 4];
        }
    }
}

void quant_dequant_iq4_xs(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_iq4_xs b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        const uint8_t *qs = b.qs;
        float *y = dst + i * QUANT_QK_K;
        for (int ib = 0; ib < QUANT_QK_K / 32; ++ib, y += 32, qs += 16) {
            const float dl = d * (float)quant_scale_iq4_xs(b.scales_h, b.scales_l, ib);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * (float)quant_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)quant_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ggml's best_index_int8: the codebook index nearest x (ties to the lower; NaN gives 15). */
static int quant_best_index(const int8_t *val, float x)
{
    const int n = 16;
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* The best scale for one block of 32 (weights x^2): the start d = max / 127, then 15 trial
 * scales around it, by weighted least squares. 0 for an (almost) all-zero block. L gets the
 * start's indices (IQ4_NL recomputes them from the rounded scale, IQ4_XS from its 6-bit one). */
static float quant_iq4_block_scale(const float *xb, uint8_t *Lb)
{
    const int8_t *values = quant_iq4nl_values;
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) return 0;
    float d = -max / (float)values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        int l = quant_best_index(values, id * xb[j]);
        Lb[j] = (uint8_t)l;
        float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -QUANT_IQ4_NTRY; itry <= QUANT_IQ4_NTRY; ++itry) {
        id = (float)(itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            int l = quant_best_index(values, id * xb[j]);
            float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Nibbles of 32 elements: element j low in byte j, element j + 16 high. */
static void quant_iq4_pack(const uint8_t *L, uint8_t *qs, int n)
{
    for (int i = 0; i < n / 32; ++i)
        for (int j = 0; j < 16; ++j)
            qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

/* quantize_iq4_nl without weights: the block's scale stored as is, indices recomputed from it. */
void quant_quant_iq4_nl(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK4_NL) {
        struct quant_block_iq4_nl y;
        uint8_t L[QUANT_QK4_NL];
        const float scale = quant_iq4_block_scale(x, L);
        y.d = quant_f32_to_f16(scale);
        float id = scale != 0.0f ? 1 / scale : 0;
        for (int j = 0; j < QUANT_QK4_NL; ++j)
            L[j] = (uint8_t)quant_best_index(quant_iq4nl_values, id * x[j]);
        quant_iq4_pack(L, y.qs, QUANT_QK4_NL);
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}

/* quantize_iq4_xs without weights: per 32 a scale, then d = -max_scale / 32 and 6-bit scales. */
void quant_quant_iq4_xs(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        struct quant_block_iq4_xs y;
        uint8_t L[QUANT_QK_K];
        float scales[QUANT_QK_K / 32];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QUANT_QK_K / 32; ++ib) {
            scales[ib] = quant_iq4_block_scale(x + 32 * ib, L + 32 * ib);
            float abs_d = fabsf(scales[ib]);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = scales[ib];
            }
        }
        y.scales_h = 0;
        memset(y.scales_l, 0, sizeof(y.scales_l));
        float d = -max_scale / 32;
        y.d = quant_f32_to_f16(d);
        float id = d != 0.0f ? 1 / d : 0.f;
        for (int ib = 0; ib < QUANT_QK_K / 32; ++ib) {
            int l = quant_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            float dl = d * (float)l;
            float idl = dl != 0.0f ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j)
                L[32 * ib + j] =
                    (uint8_t)quant_best_index(quant_iq4nl_values, idl * x[32 * ib + j]);
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                y.scales_l[ib / 2] = l_l;
            else
                y.scales_l[ib / 2] = (uint8_t)(y.scales_l[ib / 2] | (l_l << 4));
            y.scales_h = (uint16_t)(y.scales_h | (l_h << 2 * (ib % 8)));
        }
        quant_iq4_pack(L, y.qs, QUANT_QK_K);
        memcpy(dst + i * sizeof(y), &y, sizeof(y));
    }
}
