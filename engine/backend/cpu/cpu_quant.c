/* Scalar element conversions and row dequantization for the CPU backend (ggml's formats, bit for
 * bit). These are the backend's own copies so the kernels never depend on engine/gguf/quant.c internals;
 * the tests check them against quant.c. Fast paths live in the per-ISA kernel files. */
#include "engine/backend/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

float cpu_quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* signed zero */
    } else {
        /* subnormal: value = man * 2^-24, exact in float */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, sizeof(bits));
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof(out));
    return out;
}

uint16_t cpu_quant_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: round ax * 2^24 to an integer, nearest even */
        float a;
        memcpy(&a, &ax, sizeof(a));
        float m = nearbyintf(a * 0x1p24f);
        return (uint16_t)(sign | (uint16_t)m);
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xfff + mant_odd; /* round to nearest even on the 13 dropped bits */
    return (uint16_t)(sign | (((ax >> 13) - (112u << 10)) & 0x7fff));
}

float cpu_quant_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, sizeof(out));
    return out;
}

size_t cpu_quant_row_bytes(enum quant_type type, int64_t n)
{
    if (n <= 0) return 0;
    switch (type) {
    case QUANT_F32: return (size_t)n * 4;
    case QUANT_F16:
    case QUANT_BF16: return (size_t)n * 2;
    case QUANT_Q8_0: return n % QUANT_QK8_0 ? 0 : (size_t)(n / QUANT_QK8_0) * 34;
    case QUANT_Q4_0: return n % QUANT_QK4_0 ? 0 : (size_t)(n / QUANT_QK4_0) * 18;
    case QUANT_Q4_K: return n % QUANT_QK_K ? 0 : (size_t)(n / QUANT_QK_K) * 144;
    case QUANT_Q6_K: return n % QUANT_QK_K ? 0 : (size_t)(n / QUANT_QK_K) * 210;
    default: return 0;
    }
}

static void dequant_q8_0(const struct quant_block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_quant_f16_to_f32(b[i].d);
        for (int j = 0; j < QUANT_QK8_0; j++) y[i * QUANT_QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

static void dequant_q4_0(const struct quant_block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_quant_f16_to_f32(b[i].d);
        float *o = y + i * QUANT_QK4_0;
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            o[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            o[j + QUANT_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K block, as ggml's get_scale_min_k4. */
static void q4_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_k(const struct quant_block_q4_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_quant_f16_to_f32(b[i].d), dmin = cpu_quant_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int j = 0; j < QUANT_QK_K; j += 64) {
            uint8_t sc, m;
            q4_k_scale_min(is + 0, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            q4_k_scale_min(is + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

static void dequant_q6_k(const struct quant_block_q6_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = cpu_quant_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void cpu_quant_dequant_row(enum quant_type type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case QUANT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case QUANT_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_quant_f16_to_f32(h[i]);
        break;
    }
    case QUANT_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_quant_bf16_to_f32(h[i]);
        break;
    }
    case QUANT_Q8_0: dequant_q8_0(src, dst, n / QUANT_QK8_0); break;
    case QUANT_Q4_0: dequant_q4_0(src, dst, n / QUANT_QK4_0); break;
    case QUANT_Q4_K: dequant_q4_k(src, dst, n / QUANT_QK_K); break;
    case QUANT_Q6_K: dequant_q6_k(src, dst, n / QUANT_QK_K); break;
    default: break; /* rejected at weight_prepare */
    }
}

void cpu_quant_q8_0_row(const float *x, int k, int8_t *qs, float *d, int32_t *sum)
{
    for (int b = 0; b < k / QUANT_QK8_0; b++) {
        const float *xb = x + b * QUANT_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        /* the scale is stored as f16 in ggml's block; round-trip it so products match ggml */
        d[b] = cpu_quant_f16_to_f32(cpu_quant_f32_to_f16(db));
        int32_t s = 0;
        for (int j = 0; j < QUANT_QK8_0; j++) {
            float v = roundf(xb[j] * id);
            /* |v| <= 127 for finite input; NaN/inf activations must not reach the int conversion */
            int q = v >= -127.0f && v <= 127.0f ? (int)v : 0;
            qs[b * QUANT_QK8_0 + j] = (int8_t)q;
            s += q;
        }
        sum[b] = s;
    }
}
