/* Tensor element types: block sizes, scalar half/bfloat conversions and the reference row codecs.
 * Every function reproduces ggml's scalar reference bit for bit (ggml-impl.h, ggml-quants.c), so a
 * file quantized here is byte-identical to one written by llama.cpp. Blocks are read and written
 * through memcpy: tensor data in a GGUF mapping is only as aligned as the file says (possibly 1). */
#include "engine/gguf/quant.h"

#include "common/assert.h"
#include "common/err.h"

#include <math.h>
#include <string.h>

bool quant_type_known(uint32_t id)
{
    switch (id) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_Q4_0:
    case QUANT_Q8_0:
    case QUANT_Q4_K:
    case QUANT_Q6_K:
    case QUANT_BF16: return true;
    default: return false;
    }
}

const char *quant_type_name(enum quant_type t)
{
    switch (t) {
    case QUANT_F32: return "f32";
    case QUANT_F16: return "f16";
    case QUANT_Q4_0: return "q4_0";
    case QUANT_Q8_0: return "q8_0";
    case QUANT_Q4_K: return "q4_K";
    case QUANT_Q6_K: return "q6_K";
    case QUANT_Q8_K: return "q8_K";
    case QUANT_BF16: return "bf16";
    }
    return "unknown";
}

size_t quant_block_elems(enum quant_type t)
{
    switch (t) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16: return 1;
    case QUANT_Q4_0: return QUANT_QK4_0;
    case QUANT_Q8_0: return QUANT_QK8_0;
    case QUANT_Q4_K:
    case QUANT_Q6_K:
    case QUANT_Q8_K: return QUANT_QK_K;
    }
    return 0;
}

size_t quant_block_bytes(enum quant_type t)
{
    switch (t) {
    case QUANT_F32: return sizeof(float);
    case QUANT_F16:
    case QUANT_BF16: return sizeof(uint16_t);
    case QUANT_Q4_0: return sizeof(struct quant_block_q4_0);
    case QUANT_Q8_0: return sizeof(struct quant_block_q8_0);
    case QUANT_Q4_K: return sizeof(struct quant_block_q4_k);
    case QUANT_Q6_K: return sizeof(struct quant_block_q6_k);
    case QUANT_Q8_K: return sizeof(struct quant_block_q8_k);
    }
    return 0;
}

size_t quant_row_bytes(enum quant_type t, uint64_t n)
{
    size_t be = quant_block_elems(t), bb = quant_block_bytes(t);
    if (be == 0 || n % be != 0) return 0;
    uint64_t blocks = n / be;
    if (blocks > SIZE_MAX / bb) return 0; /* would overflow: as malformed as a partial block */
    return (size_t)(blocks * bb);
}

static inline uint32_t quant_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float quant_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ggml_compute_fp16_to_fp32 (from the FP16 library): exact for every input, NaN payloads kept. */
float quant_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;

    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = quant_bits_f32((two_w >> 4) + exp_offset) * exp_scale;

    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float magic_bias = 0.5f;
    const float denormalized = quant_bits_f32((two_w >> 17) | magic_mask) - magic_bias;

    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? quant_f32_bits(denormalized)
                                                                : quant_f32_bits(normalized));
    return quant_bits_f32(result);
}

/* ggml_compute_fp32_to_fp16: round to nearest even through float arithmetic; overflow gives inf,
 * every NaN becomes the quiet NaN 0x7E00 (with the input's sign). */
uint16_t quant_f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;

    const uint32_t w = quant_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);

    base = quant_bits_f32((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = quant_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

float quant_bf16_to_f32(uint16_t h)
{
    return quant_bits_f32((uint32_t)h << 16);
}

/* ggml_compute_fp32_to_bf16: NaN is forced quiet, everything else rounds to nearest even. */
uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u = quant_f32_bits(f);
    if ((u & UINT32_C(0x7fffffff)) > UINT32_C(0x7f800000)) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (UINT32_C(0x7fff) + ((u >> 16) & 1))) >> 16);
}

/* ggml's nearest_int: round half to even via the 1.5 * 2^23 trick; valid for |x| <= 4194303. */
static inline int quant_nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

static void quant_dequant_q4_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q4_0 b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        float *y = dst + i * QUANT_QK4_0;
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            y[j] = (float)((b.qs[j] & 0x0F) - 8) * d;
            y[j + QUANT_QK4_0 / 2] = (float)((b.qs[j] >> 4) - 8) * d;
        }
    }
}

static void quant_dequant_q8_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q8_0 b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        float *y = dst + i * QUANT_QK8_0;
        for (int j = 0; j < QUANT_QK8_0; j++) y[j] = (float)b.qs[j] * d;
    }
}

/* Q4_K packs 8 six-bit scales and 8 six-bit mins into 12 bytes: entries 0-3 sit in the low 6 bits
 * of bytes 0-3 (scales) and 4-7 (mins); entries 4-7 take their low nibble from bytes 8-11 and their
 * top two bits from the spare high bits of bytes 0-7 (ggml's get_scale_min_k4). */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

static void quant_dequant_q4_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q4_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        const float min = quant_f16_to_f32(b.dmin);
        const uint8_t *q = b.qs;
        float *y = dst + i * QUANT_QK_K;
        int is = 0;
        for (int j = 0; j < QUANT_QK_K; j += 64) {
            uint8_t sc, m;
            quant_scale_min_k4(is + 0, b.scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_scale_min_k4(is + 1, b.scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* Q6_K: each half (128 elements) uses 64 bytes of ql (low nibbles of elements l and l+64 share a
 * byte, as do l+32 and l+96), 32 bytes of qh (2 high bits of four elements) and 8 scales of 16. */
static void quant_dequant_q6_k(const uint8_t *src, float *dst, size_t nb)
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
                int is = l / 16;
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

static void quant_dequant_q8_k(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q8_k b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        float *y = dst + i * QUANT_QK_K;
        for (int j = 0; j < QUANT_QK_K; j++) y[j] = b.d * (float)b.qs[j];
    }
}

void quant_dequantize_row(enum quant_type t, const void *src, float *dst, size_t n)
{
    const uint8_t *s = src;
    size_t be = quant_block_elems(t);
    ASSERT(be != 0 && n % be == 0);
    size_t nb = n / be;
    switch (t) {
    case QUANT_F32: memcpy(dst, s, n * sizeof(float)); return;
    case QUANT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, sizeof(h));
            dst[i] = quant_f16_to_f32(h);
        }
        return;
    case QUANT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, sizeof(h));
            dst[i] = quant_bf16_to_f32(h);
        }
        return;
    case QUANT_Q4_0: quant_dequant_q4_0(s, dst, nb); return;
    case QUANT_Q8_0: quant_dequant_q8_0(s, dst, nb); return;
    case QUANT_Q4_K: quant_dequant_q4_k(s, dst, nb); return;
    case QUANT_Q6_K: quant_dequant_q6_k(s, dst, nb); return;
    case QUANT_Q8_K: quant_dequant_q8_k(s, dst, nb); return;
    }
}

/* quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d). */
static void quant_quant_q8_0(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK8_0) {
        struct quant_block_q8_0 b;
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK8_0; j++) b.qs[j] = (int8_t)roundf(x[j] * id);
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8, so d = max / -8, and
 * each nibble is min(15, (int8_t)(x / d + 8.5)) (truncation after the +8.5 offset). */
static void quant_quant_q4_0(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK4_0) {
        struct quant_block_q4_0 b;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QUANT_QK4_0; j++) {
            const float v = x[j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[QUANT_QK4_0 / 2 + j] * id;
            const int8_t i0 = (int8_t)(x0 + 8.5f), i1 = (int8_t)(x1 + 8.5f);
            const uint8_t xi0 = (uint8_t)(i0 < 15 ? i0 : 15);
            const uint8_t xi1 = (uint8_t)(i1 < 15 ? i1 : 15);
            b.qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q8_K_ref: the signed value of largest magnitude maps to -127 (iscale = -127 / max),
 * quants are clamped to 127, and bsums hold the sums of each 16-quant group for the K-quant dots.
 * An all-zero block gets d = 0 and zero quants (ggml leaves its bsums unset; we zero them). */
static void quant_quant_q8_k(const float *x, uint8_t *dst, size_t nb)
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

int quant_quantize_row(enum quant_type t, const float *src, void *dst, size_t n)
{
    uint8_t *d = dst;
    size_t be = quant_block_elems(t);
    ASSERT(be != 0 && n % be == 0);
    switch (t) {
    case QUANT_F32: memcpy(d, src, n * sizeof(float)); return 0;
    case QUANT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, sizeof(h));
        }
        return 0;
    case QUANT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = quant_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, sizeof(h));
        }
        return 0;
    case QUANT_Q8_0: quant_quant_q8_0(src, d, n / be); return 0;
    case QUANT_Q4_0: quant_quant_q4_0(src, d, n / be); return 0;
    case QUANT_Q8_K: quant_quant_q8_k(src, d, n / be); return 0;
    case QUANT_Q4_K:
    case QUANT_Q6_K: return ERR_UNSUPPORTED;
    }
    return ERR_UNSUPPORTED;
}
