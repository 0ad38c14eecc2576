/* Tests for engine/gguf/quant.c: half/bfloat conversions at their edges, block sizes, the reference
 * quantizers against hand-computed blocks, the K-quant layouts against independent packers, and
 * bit-exact agreement with llama.cpp's own F16/Q8_0/Q4_0 conversions of stories260K. */
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

START_TEST(test_quant_f16_edges)
{
    ck_assert_uint_eq(quant_f32_to_f16(0.0f), 0x0000);
    ck_assert_uint_eq(quant_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(quant_f32_to_f16(1.0f), 0x3C00);
    ck_assert_uint_eq(quant_f32_to_f16(-2.0f), 0xC000);
    ck_assert_uint_eq(quant_f32_to_f16(65504.0f), 0x7BFF); /* largest half */
    ck_assert_uint_eq(quant_f32_to_f16(65520.0f), 0x7C00); /* halfway to 2^16 rounds to inf */
    ck_assert_uint_eq(quant_f32_to_f16(65519.0f), 0x7BFF);
    ck_assert_uint_eq(quant_f32_to_f16(1e10f), 0x7C00);
    ck_assert_uint_eq(quant_f32_to_f16(INFINITY), 0x7C00);
    ck_assert_uint_eq(quant_f32_to_f16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(quant_f32_to_f16(NAN), 0x7E00);
    ck_assert_uint_eq(quant_f32_to_f16(-NAN), 0xFE00);
    /* Subnormals: 2^-24 is the smallest; exactly half of it ties to even (0). */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.0p-24f), 0x0001);
    ck_assert_uint_eq(quant_f32_to_f16(0x1.0p-25f), 0x0000);
    ck_assert_uint_eq(quant_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 units: tie to even 2 */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.8p-25f), 0x0001); /* 0.75 units */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.ffcp-15f),
                      0x0400); /* 1023.5 units: even 1024 is normal */
    ck_assert_uint_eq(quant_f32_to_f16(1e-10f), 0x0000);
    /* Round to nearest even between 1 and 1 + 2^-10. */
    ck_assert_uint_eq(quant_f32_to_f16(1.0f + 0x1.0p-11f), 0x3C00);
    ck_assert_uint_eq(quant_f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02);
    ck_assert_uint_eq(quant_f32_to_f16(1.0f + 0x1.0p-11f + 0x1.0p-20f), 0x3C01);

    ck_assert_float_eq(quant_f16_to_f32(0x0001), 0x1.0p-24f);
    ck_assert_float_eq(quant_f16_to_f32(0x03FF), 1023 * 0x1.0p-24f);
    ck_assert_float_eq(quant_f16_to_f32(0x0400), 0x1.0p-14f);
    ck_assert_float_eq(quant_f16_to_f32(0x7BFF), 65504.0f);
    ck_assert_float_eq(quant_f16_to_f32(0x3555), 0x1.554p-2f);
    ck_assert(isinf(quant_f16_to_f32(0x7C00)) && quant_f16_to_f32(0x7C00) > 0);
    ck_assert(isinf(quant_f16_to_f32(0xFC00)) && quant_f16_to_f32(0xFC00) < 0);
    ck_assert(isnan(quant_f16_to_f32(0x7E00)));
    ck_assert(isnan(quant_f16_to_f32(0x7C01)));
    ck_assert(signbit(quant_f16_to_f32(0x8000)) && quant_f16_to_f32(0x8000) == 0.0f);
}
END_TEST

START_TEST(test_quant_f16_round_trip_all)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        uint16_t back = quant_f32_to_f16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF)) /* NaN: any NaN comes back as the quiet one */
            ck_assert_uint_eq(back, (h & 0x8000) | 0x7E00);
        else
            ck_assert_uint_eq(back, h);
    }
}
END_TEST

START_TEST(test_quant_bf16_edges)
{
    ck_assert_uint_eq(quant_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(quant_f32_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x3F808000)), 0x3F80); /* tie to even */
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x3F818000)), 0x3F82);
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x3F808001)), 0x3F81);
    ck_assert_uint_eq(quant_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x7F7FFFFF)), 0x7F80); /* FLT_MAX rounds to inf */
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x7F800001)), 0x7FC0); /* signalling NaN quieted */
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0xFFC12345)), 0xFFC1);
    ck_assert_uint_eq(quant_f32_to_bf16(bits_f32(0x00010000)), 0x0001); /* subnormals kept */
    ck_assert_uint_eq(f32_bits(quant_bf16_to_f32(0x3F80)), 0x3F800000);
    ck_assert(isnan(quant_bf16_to_f32(0x7FC0)));
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue;
        ck_assert_uint_eq(quant_f32_to_bf16(quant_bf16_to_f32((uint16_t)h)), h);
    }
}
END_TEST

START_TEST(test_quant_sizes)
{
    ck_assert(quant_type_known(QUANT_F32) && quant_type_known(QUANT_BF16));
    ck_assert(quant_type_known(QUANT_Q4_K) && quant_type_known(QUANT_Q6_K));
    ck_assert(quant_type_known(QUANT_Q4_1) && quant_type_known(QUANT_IQ4_XS));
    ck_assert(quant_type_known(QUANT_Q8_K));
    ck_assert(!quant_type_known(4) && !quant_type_known(9) && !quant_type_known(16));
    ck_assert(!quant_type_known(31) && !quant_type_known(UINT32_MAX));
    ck_assert_str_eq(quant_type_name(QUANT_Q4_K), "q4_K");
    ck_assert_str_eq(quant_type_name(QUANT_IQ4_NL), "iq4_nl");
    ck_assert_str_eq(quant_type_name((enum quant_type)77), "unknown");
    ck_assert_uint_eq(quant_row_bytes(QUANT_F32, 3), 12);
    ck_assert_uint_eq(quant_row_bytes(QUANT_F16, 3), 6);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q8_0, 64), 68);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q4_0, 64), 36);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q4_K, 512), 288);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q6_K, 256), 210);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q8_0, 33), 0);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q4_K, 32), 0);
    ck_assert_uint_eq(quant_row_bytes((enum quant_type)9, 32), 0);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q4_1, 64), 40);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q5_0, 32), 22);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q5_1, 32), 24);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q2_K, 256), 84);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q3_K, 512), 220);
    ck_assert_uint_eq(quant_row_bytes(QUANT_Q5_K, 256), 176);
    ck_assert_uint_eq(quant_row_bytes(QUANT_IQ4_NL, 64), 36);
    ck_assert_uint_eq(quant_row_bytes(QUANT_IQ4_XS, 256), 136);
    ck_assert_uint_eq(quant_row_bytes(QUANT_IQ4_XS, 32), 0);
    ck_assert_uint_eq(quant_row_bytes(QUANT_F32, UINT64_MAX / 2), 0); /* overflow */
    ck_assert_uint_eq(quant_block_elems((enum quant_type)99), 0);
    ck_assert_uint_eq(quant_block_bytes(QUANT_Q8_K), 292);
}
END_TEST

START_TEST(test_quant_q8_0_reference)
{
    float x[32], y[32];
    struct quant_block_q8_0 b;
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    ck_assert_int_eq(quant_quantize_row(QUANT_Q8_0, x, &b, 32), 0);
    ck_assert_uint_eq(b.d, quant_f32_to_f16(16.0f / 127));
    ck_assert_int_eq(b.qs[0], -127);
    ck_assert_int_eq(b.qs[16], 0);
    ck_assert_int_eq(b.qs[31], 119); /* roundf(15 * 127 / 16 = 119.06) */
    ck_assert_int_eq(b.qs[8], -64);  /* roundf(-8 * 127 / 16 = -63.5) rounds away from zero */
    quant_dequantize_row(QUANT_Q8_0, &b, y, 32);
    float d = quant_f16_to_f32(b.d);
    for (int j = 0; j < 32; j++) ck_assert_float_eq_tol(y[j], x[j], 0.6f * d);
    /* An all-zero block has d = 0 and zero quants. */
    memset(x, 0, sizeof(x));
    quant_quantize_row(QUANT_Q8_0, x, &b, 32);
    ck_assert_uint_eq(b.d, 0);
    for (int j = 0; j < 32; j++) ck_assert_int_eq(b.qs[j], 0);
}
END_TEST

START_TEST(test_quant_q4_0_reference)
{
    float x[32], y[32];
    struct quant_block_q4_0 b;
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16); /* max magnitude -16 -> d = 2 */
    ck_assert_int_eq(quant_quantize_row(QUANT_Q4_0, x, &b, 32), 0);
    ck_assert_uint_eq(b.d, 0x4000);
    /* x = -16 -> -8 + 8.5 -> 0; x = 0 (j = 16) -> 8; x = 15 -> 7.5 + 8.5 = 16 -> clamped 15;
     * x = -15 -> -7.5 + 8.5 = 1. */
    ck_assert_uint_eq(b.qs[0] & 0xF, 0);
    ck_assert_uint_eq(b.qs[0] >> 4, 8);
    ck_assert_uint_eq(b.qs[15] >> 4, 15);
    ck_assert_uint_eq(b.qs[1] & 0xF, 1);
    quant_dequantize_row(QUANT_Q4_0, &b, y, 32);
    ck_assert_float_eq(y[0], -16.0f);
    ck_assert_float_eq(y[16], 0.0f);
    ck_assert_float_eq(y[31], 14.0f);
    /* A positive extreme gives a negative scale. */
    for (int j = 0; j < 32; j++) x[j] = j == 5 ? 4.0f : 0.5f;
    quant_quantize_row(QUANT_Q4_0, x, &b, 32);
    ck_assert_float_eq(quant_f16_to_f32(b.d), -0.5f);
    quant_dequantize_row(QUANT_Q4_0, &b, y, 32);
    ck_assert_float_eq(y[5], 4.0f);
    ck_assert_float_eq(y[0], 0.5f);
}
END_TEST

START_TEST(test_quant_q8_k_reference)
{
    float x[512], y[512];
    struct quant_block_q8_k b[2];
    for (int j = 0; j < 256; j++) x[j] = sinf((float)j * 0.37f) * 3.0f;
    x[100] = 5.0f; /* the extreme maps to -127 */
    for (int j = 256; j < 512; j++) x[j] = 0.0f;
    ck_assert_int_eq(quant_quantize_row(QUANT_Q8_K, x, b, 512), 0);
    ck_assert_int_eq(b[0].qs[100], -127);
    ck_assert_float_eq(b[0].d, 1.0f / (-127.0f / 5.0f));
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int k = 0; k < 16; k++) sum += b[0].qs[g * 16 + k];
        ck_assert_int_eq(b[0].bsums[g], sum);
    }
    ck_assert_float_eq(b[1].d, 0.0f);
    for (int g = 0; g < 16; g++) ck_assert_int_eq(b[1].bsums[g], 0);
    quant_dequantize_row(QUANT_Q8_K, b, y, 512);
    for (int j = 0; j < 512; j++) ck_assert_float_eq_tol(y[j], x[j], 5.0f / 127 * 0.51f);
}
END_TEST

/* Packs 8 scales and 8 mins (6 bits each) as ggml's quantize_row_q4_K_ref does. */
static void pack_scales_k4(const uint8_t *sc, const uint8_t *m, uint8_t *out)
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

START_TEST(test_quant_q4_k_layout)
{
    const uint8_t sc[8] = {1, 7, 15, 16, 33, 47, 63, 20};
    const uint8_t mn[8] = {0, 5, 63, 17, 40, 2, 31, 50};
    struct quant_block_q4_k b;
    uint8_t nib[256];
    b.d = quant_f32_to_f16(0.25f);
    b.dmin = quant_f32_to_f16(0.125f);
    pack_scales_k4(sc, mn, b.scales);
    /* Element e: chunk c = e / 64 uses qs[32c .. 32c+31]; the first 32 take low nibbles. */
    for (int e = 0; e < 256; e++) nib[e] = (uint8_t)((e * 7 + 3) % 16);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b.qs[32 * c + l] = (uint8_t)(nib[64 * c + l] | (nib[64 * c + 32 + l] << 4));
    float y[256];
    quant_dequantize_row(QUANT_Q4_K, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        float want = 0.25f * sc[s] * nib[e] - 0.125f * mn[s];
        ck_assert_float_eq_tol(y[e], want, 1e-5f);
    }
}
END_TEST

START_TEST(test_quant_q6_k_layout)
{
    struct quant_block_q6_k b;
    uint8_t q[256];
    memset(&b, 0, sizeof(b));
    b.d = quant_f32_to_f16(0.5f);
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)(s * 9 - 70);
    for (int e = 0; e < 256; e++) q[e] = (uint8_t)((e * 37 + 11) % 64);
    /* Element e: half h = e / 128, r = e % 128, l = r % 32, quarter k = r / 32. Its low 4 bits are
     * the low (k < 2) or high (k >= 2) nibble of ql[64h + l + 32(k & 1)], its top 2 bits sit at
     * bit 2k of qh[32h + l], and its scale is scales[8h + 2k + l / 16]. */
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = e % 128, l = r % 32, k = r / 32;
        int qi = 64 * h + l + 32 * (k & 1);
        b.ql[qi] |= (uint8_t)(k < 2 ? (q[e] & 0xF) : (q[e] & 0xF) << 4);
        b.qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * k));
    }
    float y[256];
    quant_dequantize_row(QUANT_Q6_K, &b, y, 256);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = e % 128, l = r % 32, k = r / 32;
        float want = 0.5f * b.scales[8 * h + 2 * k + l / 16] * (float)(q[e] - 32);
        ck_assert_float_eq(y[e], want);
    }
}
END_TEST

/* Names parse whatever their case; unknown ids and names are refused; ggml's other types are named
 * for error messages. */
START_TEST(test_quant_names_and_unknown_types)
{
    enum quant_type t = QUANT_F32;
    ck_assert(quant_type_parse("q4_k", &t) && t == QUANT_Q4_K);
    ck_assert(quant_type_parse("Q6_K", &t) && t == QUANT_Q6_K);
    ck_assert(quant_type_parse("IQ4_NL", &t) && t == QUANT_IQ4_NL);
    ck_assert(quant_type_parse("bf16", &t) && t == QUANT_BF16);
    ck_assert(!quant_type_parse("q4_2", &t) && !quant_type_parse("", &t));
    ck_assert(!quant_type_parse("iq2_xxs", &t) && !quant_type_parse(NULL, &t));
    ck_assert_int_eq(t, QUANT_BF16); /* untouched on failure */
    /* every name in the list parses back to a known type of that name */
    char names[256];
    snprintf(names, sizeof(names), "%s", quant_type_names());
    int n = 0;
    for (char *save = NULL, *p = strtok_r(names, "|", &save); p; p = strtok_r(NULL, "|", &save)) {
        ck_assert_msg(quant_type_parse(p, &t), "%s", p);
        ck_assert_str_eq(quant_type_name(t), p);
        n++;
    }
    ck_assert_int_eq(n, 16);
    ck_assert_str_eq(quant_ggml_type_name(16), "iq2_xxs");
    ck_assert_str_eq(quant_ggml_type_name(39), "mxfp4");
    ck_assert_ptr_null(quant_ggml_type_name(4));
    ck_assert_ptr_null(quant_ggml_type_name(1000));
    ck_assert_uint_eq(quant_type_file_type(QUANT_Q4_K), 14);
    ck_assert_uint_eq(quant_type_file_type(QUANT_Q6_K), 18);
    ck_assert_uint_eq(quant_type_file_type(QUANT_F32), 0);
    float x[32] = {0};
    uint8_t out[64];
    ck_assert_int_eq(quant_quantize_row((enum quant_type)16, x, out, 32), ERR_UNSUPPORTED);
    ck_assert_int_eq(quant_quantize_row((enum quant_type)99, x, out, 32), ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_quant_float_rows)
{
    float x[4] = {1.5f, -2.25f, 65504.0f, 3e-8f}, y[4];
    uint16_t h[4];
    quant_quantize_row(QUANT_F16, x, h, 4);
    quant_dequantize_row(QUANT_F16, h, y, 4);
    ck_assert_float_eq(y[0], 1.5f);
    ck_assert_float_eq(y[2], 65504.0f);
    ck_assert_float_eq(y[3], 0x1.0p-25f * 2); /* 3e-8 rounds to one subnormal unit */
    quant_quantize_row(QUANT_BF16, x, h, 4);
    quant_dequantize_row(QUANT_BF16, h, y, 4);
    ck_assert_float_eq(y[1], -2.25f);
    /* Unaligned source: rows inside a GGUF mapping may sit at any byte. */
    uint8_t raw[1 + sizeof(x)];
    memcpy(raw + 1, x, sizeof(x));
    quant_dequantize_row(QUANT_F32, raw + 1, y, 4);
    ck_assert_float_eq(y[1], -2.25f);
}
END_TEST

/* Quantizing the F32 model here reproduces llama.cpp's F16/Q8_0/Q4_0 files byte for byte. */
static void check_model_bytes(const char *variant, enum quant_type want)
{
    char rel[128], err[256];
    snprintf(rel, sizeof(rel), "models/tinyllamas/stories260K-%s.gguf", variant);
    const char *p = test_shared_path("models/tinyllamas/stories260K.gguf");
    if (!p) return;
    struct gguf *f32 = NULL, *q = NULL;
    ck_assert_msg(gguf_open(p, &f32, err, sizeof(err)) == 0, "%s", err);
    p = test_shared_path(rel);
    if (!p) {
        gguf_close(f32);
        return;
    }
    ck_assert_msg(gguf_open(p, &q, err, sizeof(err)) == 0, "%s", err);
    size_t checked = 0;
    for (size_t i = 0; i < gguf_tensor_count(q); i++) {
        const struct gguf_tensor *tq = gguf_tensor_at(q, i);
        const struct gguf_tensor *tf = gguf_find_tensor(f32, tq->name);
        ck_assert_ptr_nonnull(tf);
        ck_assert_int_eq(tf->type, QUANT_F32);
        if (tq->type != want) continue;
        uint64_t n = tf->size / sizeof(float);
        float *src = malloc(tf->size), *deq = malloc(tf->size);
        uint8_t *enc = malloc(tq->size);
        ck_assert(src && deq && enc);
        memcpy(src, tf->data, tf->size);
        ck_assert_int_eq(quant_quantize_row(want, src, enc, n), 0);
        ck_assert_msg(memcmp(enc, tq->data, tq->size) == 0, "%s: %s bytes differ", tq->name,
                      variant);
        /* And the decoded values sit within the format's error of the originals. */
        quant_dequantize_row(tq->type, tq->data, deq, n);
        for (uint64_t b = 0; b < n / 32 && want != QUANT_F16; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[b * 32 + j]));
            float bound = want == QUANT_Q8_0 ? amax / 127 * 0.6f : amax / 8 * 1.1f;
            for (int j = 0; j < 32; j++)
                ck_assert_float_eq_tol(deq[b * 32 + j], src[b * 32 + j], bound + 1e-7f);
        }
        checked++;
        free(src);
        free(deq);
        free(enc);
    }
    ck_assert_uint_ge(checked, 30);
    gguf_close(f32);
    gguf_close(q);
}

START_TEST(test_quant_matches_llamacpp_q8_0)
{
    check_model_bytes("Q8_0", QUANT_Q8_0);
}
END_TEST

START_TEST(test_quant_matches_llamacpp_q4_0)
{
    check_model_bytes("Q4_0", QUANT_Q4_0);
}
END_TEST

START_TEST(test_quant_matches_llamacpp_f16)
{
    check_model_bytes("F16", QUANT_F16);
}
END_TEST

Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_quant_f16_edges);
    tcase_add_test(tc, test_quant_f16_round_trip_all);
    tcase_add_test(tc, test_quant_bf16_edges);
    tcase_add_test(tc, test_quant_sizes);
    tcase_add_test(tc, test_quant_q8_0_reference);
    tcase_add_test(tc, test_quant_q4_0_reference);
    tcase_add_test(tc, test_quant_q8_k_reference);
    tcase_add_test(tc, test_quant_q4_k_layout);
    tcase_add_test(tc, test_quant_q6_k_layout);
    tcase_add_test(tc, test_quant_names_and_unknown_types);
    tcase_add_test(tc, test_quant_float_rows);
    tcase_add_test(tc, test_quant_matches_llamacpp_q8_0);
    tcase_add_test(tc, test_quant_matches_llamacpp_q4_0);
    tcase_add_test(tc, test_quant_matches_llamacpp_f16);
    suite_add_tcase(s, tc);
    return s;
}
