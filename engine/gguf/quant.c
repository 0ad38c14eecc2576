/* Tensor element types: the type table (names, block sizes, codecs), the half/bfloat conversions and
 * the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0). Every function reproduces ggml's scalar code
 * bit for bit (ggml-impl.h, ggml-quants.c), so a file quantized here is byte-identical to one written
 * by llama.cpp. Blocks are read and written through memcpy: tensor data in a GGUF mapping is only as
 * aligned as the file says (possibly 1). The K-quants are in quant_k.c, IQ4_NL/IQ4_XS in quant_iq.c. */
#include "engine/gguf/quant.h"

#include "common/assert.h"
#include "common/err.h"
#include "engine/gguf/quant_priv.h"

#include <float.h>
#include <math.h>
#include <strings.h>

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

/* ---- float rows (a "block" is one element) ---------------------------------------------------- */

static void quant_dequant_f32(const uint8_t *src, float *dst, size_t n)
{
    memcpy(dst, src, n * sizeof(float));
}

static void quant_quant_f32(const float *x, uint8_t *dst, size_t n)
{
    memcpy(dst, x, n * sizeof(float));
}

static void quant_dequant_f16(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(quant_load_u16(src + 2 * i));
}

static void quant_quant_f16(const float *x, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h = quant_f32_to_f16(x[i]);
        memcpy(dst + 2 * i, &h, sizeof(h));
    }
}

static void quant_dequant_bf16(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(quant_load_u16(src + 2 * i));
}

static void quant_quant_bf16(const float *x, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h = quant_f32_to_bf16(x[i]);
        memcpy(dst + 2 * i, &h, sizeof(h));
    }
}

/* ---- 32-element formats -------------------------------------------------------------------------
 * Each row of qs holds element j in the low nibble of byte j and element j + 16 in the high one.
 * The Q5 formats keep the fifth bit of element j in bit j of the little-endian uint32 qh. */

static inline uint32_t quant_load_qh(const uint8_t *qh)
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void quant_store_qh(uint8_t *qh, uint32_t v)
{
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(v >> (8 * i));
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

static void quant_dequant_q4_1(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q4_1 b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d), m = quant_f16_to_f32(b.m);
        float *y = dst + i * QUANT_QK4_1;
        for (int j = 0; j < QUANT_QK4_1 / 2; j++) {
            y[j] = (float)(b.qs[j] & 0x0F) * d + m;
            y[j + QUANT_QK4_1 / 2] = (float)(b.qs[j] >> 4) * d + m;
        }
    }
}

static void quant_dequant_q5_0(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q5_0 b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d);
        const uint32_t qh = quant_load_qh(b.qh);
        float *y = dst + i * QUANT_QK5_0;
        for (int j = 0; j < QUANT_QK5_0 / 2; j++) {
            const int h0 = (int)(((qh >> j) << 4) & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)(((b.qs[j] & 0x0F) | h0) - 16) * d;
            y[j + QUANT_QK5_0 / 2] = (float)(((b.qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void quant_dequant_q5_1(const uint8_t *src, float *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++) {
        struct quant_block_q5_1 b;
        memcpy(&b, src + i * sizeof(b), sizeof(b));
        const float d = quant_f16_to_f32(b.d), m = quant_f16_to_f32(b.m);
        const uint32_t qh = quant_load_qh(b.qh);
        float *y = dst + i * QUANT_QK5_1;
        for (int j = 0; j < QUANT_QK5_1 / 2; j++) {
            const int h0 = (int)(((qh >> j) << 4) & 0x10), h1 = (int)((qh >> (j + 12)) & 0x10);
            y[j] = (float)((b.qs[j] & 0x0F) | h0) * d + m;
            y[j + QUANT_QK5_1 / 2] = (float)((b.qs[j] >> 4) | h1) * d + m;
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

/* The value of largest magnitude, with its sign (the first such in index order), and its magnitude:
 * the symmetric formats map it to their most negative quant. */
static float quant_signed_max(const float *x, int n, float *amax_out)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    *amax_out = amax;
    return max;
}

/* quantize_row_q4_0_ref: d = max / -8, each nibble min(15, (int8_t)(x / d + 8.5)) (truncation). */
static void quant_quant_q4_0(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK4_0) {
        struct quant_block_q4_0 b;
        float amax;
        const float d = quant_signed_max(x, QUANT_QK4_0, &amax) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            const int8_t i0 = (int8_t)quant_trunc_u8(x[j] * id + 8.5f);
            const int8_t i1 = (int8_t)quant_trunc_u8(x[QUANT_QK4_0 / 2 + j] * id + 8.5f);
            const uint8_t xi0 = (uint8_t)(i0 < 15 ? i0 : 15), xi1 = (uint8_t)(i1 < 15 ? i1 : 15);
            b.qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q4_1_ref: d = (max - min) / 15, m = min, nibbles min(15, (int8_t)((x - min) / d + .5)). */
static void quant_quant_q4_1(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK4_1) {
        struct quant_block_q4_1 b;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QUANT_QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        b.m = quant_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK4_1 / 2; j++) {
            const int8_t i0 = (int8_t)quant_trunc_u8((x[j] - min) * id + 0.5f);
            const int8_t i1 = (int8_t)quant_trunc_u8((x[QUANT_QK4_1 / 2 + j] - min) * id + 0.5f);
            const uint8_t xi0 = (uint8_t)(i0 < 15 ? i0 : 15), xi1 = (uint8_t)(i1 < 15 ? i1 : 15);
            b.qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q5_0_ref: d = max / -16, quants min(31, (int8_t)(x / d + 16.5)). */
static void quant_quant_q5_0(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK5_0) {
        struct quant_block_q5_0 b;
        float amax;
        const float d = quant_signed_max(x, QUANT_QK5_0, &amax) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK5_0 / 2; j++) {
            const int8_t i0 = (int8_t)quant_trunc_u8(x[j] * id + 16.5f);
            const int8_t i1 = (int8_t)quant_trunc_u8(x[QUANT_QK5_0 / 2 + j] * id + 16.5f);
            const uint8_t xi0 = (uint8_t)(i0 < 31 ? i0 : 31), xi1 = (uint8_t)(i1 < 31 ? i1 : 31);
            b.qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK5_0 / 2);
        }
        quant_store_qh(b.qh, qh);
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q5_1_ref: d = (max - min) / 31, m = min, quants (uint8_t)((x - min) / d + .5). */
static void quant_quant_q5_1(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK5_1) {
        struct quant_block_q5_1 b;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QUANT_QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        b.m = quant_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK5_1 / 2; j++) {
            const uint8_t xi0 = quant_trunc_u8((x[j] - min) * id + 0.5f);
            const uint8_t xi1 = quant_trunc_u8((x[QUANT_QK5_1 / 2 + j] - min) * id + 0.5f);
            b.qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK5_1 / 2);
        }
        quant_store_qh(b.qh, qh);
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (stored as ggml's cast stores it). */
static void quant_quant_q8_0(const float *x, uint8_t *dst, size_t nb)
{
    for (size_t i = 0; i < nb; i++, x += QUANT_QK8_0) {
        struct quant_block_q8_0 b;
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK8_0; j++) /* ggml's MAX(a, b): a NaN lasts one element */
            amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK8_0; j++) b.qs[j] = (int8_t)quant_trunc_u8(roundf(x[j] * id));
        memcpy(dst + i * sizeof(b), &b, sizeof(b));
    }
}

/* ---- the type table ------------------------------------------------------------------------- */

struct quant_type_info {
    const char *name;
    uint16_t block_elems, block_bytes;
    uint32_t file_type; /* enum llama_ftype of an all-this-type file */
    quant_dequant_fn dequant;
    quant_quant_fn quant;
};

#define QUANT_BLOCK(s) ((uint16_t)sizeof(struct s))
static const struct quant_type_info quant_types[QUANT_TYPE_END] = {
    [QUANT_F32] = {"f32", 1, 4, 0, quant_dequant_f32, quant_quant_f32},
    [QUANT_F16] = {"f16", 1, 2, 1, quant_dequant_f16, quant_quant_f16},
    [QUANT_Q4_0] = {"q4_0", QUANT_QK4_0, QUANT_BLOCK(quant_block_q4_0), 2, quant_dequant_q4_0,
                    quant_quant_q4_0},
    [QUANT_Q4_1] = {"q4_1", QUANT_QK4_1, QUANT_BLOCK(quant_block_q4_1), 3, quant_dequant_q4_1,
                    quant_quant_q4_1},
    [QUANT_Q5_0] = {"q5_0", QUANT_QK5_0, QUANT_BLOCK(quant_block_q5_0), 8, quant_dequant_q5_0,
                    quant_quant_q5_0},
    [QUANT_Q5_1] = {"q5_1", QUANT_QK5_1, QUANT_BLOCK(quant_block_q5_1), 9, quant_dequant_q5_1,
                    quant_quant_q5_1},
    [QUANT_Q8_0] = {"q8_0", QUANT_QK8_0, QUANT_BLOCK(quant_block_q8_0), 7, quant_dequant_q8_0,
                    quant_quant_q8_0},
    [QUANT_Q2_K] = {"q2_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q2_k), 10, quant_dequant_q2_k,
                    quant_quant_q2_k},
    [QUANT_Q3_K] = {"q3_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q3_k), 11, quant_dequant_q3_k,
                    quant_quant_q3_k},
    [QUANT_Q4_K] = {"q4_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q4_k), 14, quant_dequant_q4_k,
                    quant_quant_q4_k},
    [QUANT_Q5_K] = {"q5_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q5_k), 16, quant_dequant_q5_k,
                    quant_quant_q5_k},
    [QUANT_Q6_K] = {"q6_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q6_k), 18, quant_dequant_q6_k,
                    quant_quant_q6_k},
    [QUANT_Q8_K] = {"q8_K", QUANT_QK_K, QUANT_BLOCK(quant_block_q8_k), 0, quant_dequant_q8_k,
                    quant_quant_q8_k},
    [QUANT_IQ4_NL] = {"iq4_nl", QUANT_QK4_NL, QUANT_BLOCK(quant_block_iq4_nl), 25,
                      quant_dequant_iq4_nl, quant_quant_iq4_nl},
    [QUANT_IQ4_XS] = {"iq4_xs", QUANT_QK_K, QUANT_BLOCK(quant_block_iq4_xs), 30,
                      quant_dequant_iq4_xs, quant_quant_iq4_xs},
    [QUANT_BF16] = {"bf16", 1, 2, 32, quant_dequant_bf16, quant_quant_bf16},
};

static const struct quant_type_info *quant_info(uint32_t id)
{
    if (id >= QUANT_TYPE_END || !quant_types[id].name) return NULL;
    return &quant_types[id];
}

bool quant_type_known(uint32_t id)
{
    return quant_info(id) != NULL;
}

const char *quant_type_name(enum quant_type t)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    return q ? q->name : "unknown";
}

const char *quant_ggml_type_name(uint32_t id)
{
    static const char *const names[] = {
        "f32",     "f16",   "q4_0",   "q4_1",  NULL,    NULL,     "q5_0", "q5_1",    "q8_0",
        "q8_1",    "q2_K",  "q3_K",   "q4_K",  "q5_K",  "q6_K",   "q8_K", "iq2_xxs", "iq2_xs",
        "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",   "i16",     "i32",
        "i64",     "f64",   "iq1_m",  "bf16",  NULL,    NULL,     NULL,   "tq1_0",   "tq2_0",
        NULL,      NULL,    NULL,     "mxfp4", "nvfp4", "q1_0",   "q2_0",
    };
    return id < sizeof(names) / sizeof(names[0]) ? names[id] : NULL;
}

bool quant_type_parse(const char *name, enum quant_type *out)
{
    for (uint32_t id = 0; name && id < QUANT_TYPE_END; id++) {
        if (!quant_types[id].name || strcasecmp(quant_types[id].name, name) != 0) continue;
        *out = (enum quant_type)id;
        return true;
    }
    return false;
}

const char *quant_type_names(void)
{
    return QUANT_TYPE_NAMES;
}

uint32_t quant_type_file_type(enum quant_type t)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    return q ? q->file_type : 0;
}

size_t quant_block_elems(enum quant_type t)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    return q ? q->block_elems : 0;
}

size_t quant_block_bytes(enum quant_type t)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    return q ? q->block_bytes : 0;
}

size_t quant_row_bytes(enum quant_type t, uint64_t n)
{
    size_t be = quant_block_elems(t), bb = quant_block_bytes(t);
    if (be == 0 || n % be != 0) return 0;
    uint64_t blocks = n / be;
    if (blocks > SIZE_MAX / bb) return 0; /* would overflow: as malformed as a partial block */
    return (size_t)(blocks * bb);
}

void quant_dequantize_row(enum quant_type t, const void *src, float *dst, size_t n)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    ASSERT(q && n % q->block_elems == 0);
    q->dequant(src, dst, n / q->block_elems);
}

int quant_quantize_row(enum quant_type t, const float *src, void *dst, size_t n)
{
    const struct quant_type_info *q = quant_info((uint32_t)t);
    if (!q) return ERR_UNSUPPORTED;
    ASSERT(n % q->block_elems == 0);
    q->quant(src, dst, n / q->block_elems);
    return 0;
}
