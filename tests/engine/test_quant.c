/* Tests for engine/gguf/quant*.c: half/bfloat conversions at their edges, block sizes and names, the
 * reference quantizers against hand-computed blocks, the K-quant layouts against independent packers,
 * and, against the oracle's committed outputs (hack/gen-quant-refs.py): every encoder byte for byte
 * against ggml's quantizer on normal and edge-case rows, every decoder bit for bit against gguf-py on
 * random blocks with extreme scales, the real published tensors of ../shared/testdata/quant against
 * gguf-py's decoding and their expected products, and whole files quantized by llama.cpp. */
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"
#include "engine/tools/gen_model.h"

#include "common/err.h"
#include "common/sha256.h"
#include "tests/testutil.h"

#include <check.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- against the oracle's outputs (tests/testdata/quant, hack/gen-quant-refs.py) ------------- */

#define QUANT_REF "tests/testdata/quant/quant-ref.gguf"

/* Every type the reference file covers, in its order (ggml's names as gguf-py spells them). */
static const struct {
    enum quant_type type;
    const char *ref_name;
} ref_types[] = {
    {QUANT_F16, "F16"},   {QUANT_BF16, "BF16"},     {QUANT_Q4_0, "Q4_0"},     {QUANT_Q4_1, "Q4_1"},
    {QUANT_Q5_0, "Q5_0"}, {QUANT_Q5_1, "Q5_1"},     {QUANT_Q8_0, "Q8_0"},     {QUANT_Q2_K, "Q2_K"},
    {QUANT_Q3_K, "Q3_K"}, {QUANT_Q4_K, "Q4_K"},     {QUANT_Q5_K, "Q5_K"},     {QUANT_Q6_K, "Q6_K"},
    {QUANT_Q8_K, "Q8_K"}, {QUANT_IQ4_NL, "IQ4_NL"}, {QUANT_IQ4_XS, "IQ4_XS"},
};

static struct gguf *open_ref(void)
{
    char err[256];
    struct gguf *g = NULL;
    ck_assert_msg(gguf_open(QUANT_REF, &g, err, sizeof(err)) == 0, "%s", err);
    return g;
}

static const struct gguf_tensor *ref_tensor(const struct gguf *g, const char *prefix,
                                            const char *type)
{
    char name[64];
    snprintf(name, sizeof(name), "%s.%s", prefix, type);
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    ck_assert_msg(t != NULL, "%s missing from %s", name, QUANT_REF);
    return t;
}

/* Bit-identical floats, any NaN matching any NaN (gguf-py and ggml agree on these bits; the payload
 * of a NaN product is the hardware's). */
static bool same_float(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

/* Our encoders reproduce ggml_quantize_chunk's bytes for every row of the reference input: normal
 * weights, huge, tiny, zero, constant, one-signed, spikes, exact ties, NaN, infinities, scales that
 * underflow and overflow f16. */
START_TEST(test_quant_encoders_match_ggml)
{
    struct gguf *g = open_ref();
    const struct gguf_tensor *in = gguf_find_tensor(g, "input");
    ck_assert_ptr_nonnull(in);
    ck_assert_int_eq(in->type, QUANT_F32);
    size_t cols = (size_t)in->ne[0], rows = (size_t)in->ne[1];
    float *x = malloc(in->size);
    memcpy(x, in->data, in->size);
    for (size_t ti = 0; ti < sizeof(ref_types) / sizeof(ref_types[0]); ti++) {
        enum quant_type t = ref_types[ti].type;
        const struct gguf_tensor *enc = ref_tensor(g, "enc", ref_types[ti].ref_name);
        ck_assert_int_eq(enc->type, t);
        size_t rb = quant_row_bytes(t, cols);
        ck_assert_uint_eq(enc->size, rb * rows);
        uint8_t *out = malloc(rb);
        for (size_t r = 0; r < rows; r++) {
            ck_assert_int_eq(quant_quantize_row(t, x + r * cols, out, cols), 0);
            const uint8_t *want = (const uint8_t *)enc->data + r * rb;
            size_t at = 0;
            while (at < rb && out[at] == want[at]) at++;
            ck_assert_msg(at == rb, "%s row %zu: byte %zu is %#x, ggml wrote %#x",
                          quant_type_name(t), r, at, at < rb ? out[at] : 0, at < rb ? want[at] : 0);
        }
        free(out);
    }
    free(x);
    gguf_close(g);
}
END_TEST

/* Our decoders reproduce gguf-py's dequantization (which the generator checked equals ggml's) of
 * random blocks, including blocks whose scales are 0, -0, the smallest subnormal, the largest
 * finite half, infinities and NaN. */
START_TEST(test_quant_decoders_match_gguf_py)
{
    struct gguf *g = open_ref();
    for (size_t ti = 0; ti < sizeof(ref_types) / sizeof(ref_types[0]); ti++) {
        enum quant_type t = ref_types[ti].type;
        const struct gguf_tensor *blk = ref_tensor(g, "blocks", ref_types[ti].ref_name);
        const struct gguf_tensor *dec = ref_tensor(g, "dec", ref_types[ti].ref_name);
        ck_assert_int_eq(blk->type, t);
        ck_assert_int_eq(dec->type, QUANT_F32);
        size_t n = (size_t)blk->ne[0] * (size_t)blk->ne[1];
        ck_assert_uint_eq(dec->size, n * sizeof(float));
        float *y = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
        quant_dequantize_row(t, blk->data, y, n);
        memcpy(want, dec->data, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(same_float(y[i], want[i]), "%s element %zu (block %zu): %a, gguf-py %a",
                          quant_type_name(t), i, i / quant_block_elems(t), y[i], want[i]);
        free(y);
        free(want);
    }
    gguf_close(g);
}
END_TEST

/* The real published matrices of ../shared/testdata/quant (Q6_K, Q4_K, Q5_0, Q8_0, Q4_1 from
 * Qwen2.5-Coder and SmolLM2 Q4_K_M/Q4_1 files): our decoding hashes as gguf-py's does, and
 * dequant(W) @ x accumulated in double matches the fixture's y (gguf-py's weights, float64
 * accumulation, rounded to float32) to within the rounding of the two summation orders: a few
 * float32 ulps of y plus 1e-12 of sum |w x|. */
START_TEST(test_quant_real_tensors)
{
    const char *p = test_shared_path("testdata/quant/quant-fixtures-real-tensors.gguf");
    if (!p) return;
    char err[256];
    struct gguf *f = NULL, *ref = open_ref();
    ck_assert_msg(gguf_open(p, &f, err, sizeof(err)) == 0, "%s", err);
    int checked = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const struct gguf_tensor *w = gguf_tensor_at(f, i);
        if (w->type == QUANT_F32) continue;
        char key[160], want_hex[SHA256_HEX_LEN], got_hex[SHA256_HEX_LEN];
        snprintf(key, sizeof(key), "real.%s.sha256", w->name);
        ck_assert_msg(gguf_get_cstr(ref, key, want_hex, sizeof(want_hex)) == 0, "%s missing", key);
        size_t cols = (size_t)w->ne[0], rows = (size_t)w->ne[1];
        float *deq = malloc(rows * cols * sizeof(float));
        quant_dequantize_row(w->type, w->data, deq, rows * cols);
        ck_assert_int_eq(sha256_hex(deq, rows * cols * sizeof(float), got_hex), 0);
        ck_assert_msg(strcmp(got_hex, want_hex) == 0, "%s (%s): decoding differs from gguf-py's",
                      w->name, quant_type_name(w->type));
        snprintf(key, sizeof(key), "%s.x", w->name);
        const struct gguf_tensor *x = gguf_find_tensor(f, key);
        snprintf(key, sizeof(key), "%s.y", w->name);
        const struct gguf_tensor *y = gguf_find_tensor(f, key);
        ck_assert(x && y && x->type == QUANT_F32 && y->type == QUANT_F32);
        ck_assert_uint_eq(x->ne[0], cols);
        ck_assert_uint_eq(y->ne[0], rows);
        for (size_t r = 0; r < rows; r++) {
            double acc = 0.0, mag = 0.0;
            for (size_t c = 0; c < cols; c++) {
                float xv;
                memcpy(&xv, (const char *)x->data + c * 4, 4);
                acc += (double)deq[r * cols + c] * xv;
                mag += fabs((double)deq[r * cols + c] * xv);
            }
            float want;
            memcpy(&want, (const char *)y->data + r * 4, 4);
            double tol = 4.0 * FLT_EPSILON * fabs(want) + 1e-12 * mag + 1e-30;
            ck_assert_msg(fabs((float)acc - want) <= tol, "%s row %zu: %.9g, fixture %.9g", w->name,
                          r, (float)acc, want);
        }
        free(deq);
        checked++;
    }
    ck_assert_int_ge(checked, 6);
    gguf_close(f);
    gguf_close(ref);
}
END_TEST

/* Whole files: llama.cpp's quantizer (llama_model_quantize, no importance matrix) turned a tiny
 * random llama into every file type, Q4_K_M and the other mixtures included; quantizing the same
 * F32 tensors here, each to the type llama.cpp chose for it, gives the same bytes. */
START_TEST(test_quant_matches_llamacpp_quantize)
{
    json_error_t je;
    json_t *ref = json_load_file("tests/testdata/quant/llamacpp-quantize.json", 0, &je);
    ck_assert_msg(ref != NULL, "%s", je.text);
    json_t *gm = json_object_get(ref, "gen_model");
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.type = QUANT_F32;
    o.dim = (uint32_t)json_integer_value(json_object_get(gm, "dim"));
    o.layers = (uint32_t)json_integer_value(json_object_get(gm, "layers"));
    o.heads = (uint32_t)json_integer_value(json_object_get(gm, "heads"));
    o.kv_heads = (uint32_t)json_integer_value(json_object_get(gm, "kv_heads"));
    o.ffn = (uint32_t)json_integer_value(json_object_get(gm, "ffn"));
    o.vocab_size = (uint32_t)json_integer_value(json_object_get(gm, "vocab_size"));
    o.context_length = (uint32_t)json_integer_value(json_object_get(gm, "context_length"));
    o.seed = (uint64_t)json_integer_value(json_object_get(gm, "seed"));
    char path[512], err[256], hex[SHA256_HEX_LEN];
    snprintf(path, sizeof(path), "%s/cinfer-quant-llamacpp-%d.gguf", test_tmpdir(), (int)getpid());
    ck_assert_msg(gen_model_write(&o, path, err, sizeof(err)) == 0, "%s", err);
    struct gguf *src = NULL;
    ck_assert_msg(gguf_open(path, &src, err, sizeof(err)) == 0, "%s", err);
    /* the source itself first: a change in gen-model's output needs new references */
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(ref, "source"), name, v)
    {
        const struct gguf_tensor *t = gguf_find_tensor(src, name);
        ck_assert_msg(t != NULL, "source tensor %s missing", name);
        ck_assert_int_eq(sha256_hex(t->data, t->size, hex), 0);
        ck_assert_msg(strcmp(hex, json_string_value(v)) == 0,
                      "gen-model's %s changed: rerun hack/gen-quant-refs.py", name);
    }
    size_t checked = 0;
    const char *file;
    json_t *tensors;
    json_object_foreach(json_object_get(ref, "files"), file, tensors)
    {
        json_object_foreach(tensors, name, v)
        {
            enum quant_type type;
            const char *tn = json_string_value(json_object_get(v, "type"));
            ck_assert_msg(quant_type_parse(tn, &type), "%s %s: type %s", file, name, tn);
            const struct gguf_tensor *t = gguf_find_tensor(src, name);
            ck_assert_msg(t != NULL && t->type == QUANT_F32, "%s: source tensor %s", file, name);
            size_t n = (size_t)(t->size / sizeof(float));
            float *x = malloc(t->size);
            memcpy(x, t->data, t->size);
            size_t bytes = quant_row_bytes(type, t->ne[0]) * (n / (size_t)t->ne[0]);
            uint8_t *q = malloc(bytes);
            ck_assert_int_eq(quant_quantize_row(type, x, q, n), 0);
            ck_assert_int_eq(sha256_hex(q, bytes, hex), 0);
            ck_assert_msg(strcmp(hex, json_string_value(json_object_get(v, "sha256"))) == 0,
                          "%s: %s as %s differs from llama.cpp's bytes", file, name, tn);
            free(q);
            free(x);
            checked++;
        }
    }
    ck_assert_uint_ge(checked, 100);
    gguf_close(src);
    unlink(path);
    json_decref(ref);
}
END_TEST

/* `cinfer-engine quantize IN OUT q5_K` and `gen-model --type`-style generation (gen_model_write) give
 * every 2-D tensor whose rows fill whole blocks the requested type, with the reference encoder's
 * bytes; 1-D tensors stay F32 and the file type is recorded. */
START_TEST(test_quant_cli_and_gen_model_types)
{
    char src[512], dst[512], err[256];
    snprintf(src, sizeof(src), "%s/cinfer-quant-cli-%d.gguf", test_tmpdir(), (int)getpid());
    snprintf(dst, sizeof(dst), "%s/cinfer-quant-cli-%d-q.gguf", test_tmpdir(), (int)getpid());
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.dim = 256, o.layers = 1, o.heads = 4, o.kv_heads = 4, o.ffn = 256, o.vocab_size = 300;
    o.context_length = 64;
    const enum quant_type kinds[] = {QUANT_Q5_K, QUANT_IQ4_NL};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        enum quant_type want = kinds[k];
        o.type = QUANT_F32;
        ck_assert_msg(gen_model_write(&o, src, err, sizeof(err)) == 0, "%s", err);
        char *argv[] = {"quantize",    src,     dst, (char *)quant_type_name(want),
                        "--log-level", "error", NULL};
        ck_assert_int_eq(cmd_quantize_main(6, argv), 0);
        /* the same model generated directly in the type */
        o.type = want;
        char direct[600];
        snprintf(direct, sizeof(direct), "%s.direct", dst);
        ck_assert_msg(gen_model_write(&o, direct, err, sizeof(err)) == 0, "%s", err);
        struct gguf *gs = NULL, *gq = NULL, *gd = NULL;
        ck_assert(gguf_open(src, &gs, err, sizeof(err)) == 0);
        ck_assert(gguf_open(dst, &gq, err, sizeof(err)) == 0);
        ck_assert(gguf_open(direct, &gd, err, sizeof(err)) == 0);
        uint32_t ft = 0;
        ck_assert_int_eq(gguf_get_u32(gq, "general.file_type", &ft), 0);
        ck_assert_uint_eq(ft, quant_type_file_type(want));
        for (size_t i = 0; i < gguf_tensor_count(gq); i++) {
            const struct gguf_tensor *q = gguf_tensor_at(gq, i), *f = gguf_find_tensor(gs, q->name);
            const struct gguf_tensor *d = gguf_find_tensor(gd, q->name);
            ck_assert(f && d && f->type == QUANT_F32);
            ck_assert_msg(q->type == (q->n_dims == 2 ? want : QUANT_F32), "%s is %s", q->name,
                          quant_type_name(q->type));
            ck_assert_int_eq(d->type, q->type);
            float *x = malloc(f->size);
            memcpy(x, f->data, f->size);
            uint8_t *enc = malloc(q->size);
            ck_assert_int_eq(quant_quantize_row(q->type, x, enc, f->size / sizeof(float)), 0);
            ck_assert_msg(memcmp(enc, q->data, q->size) == 0, "%s: quantize's bytes", q->name);
            ck_assert_msg(q->size == d->size && memcmp(enc, d->data, q->size) == 0,
                          "%s: gen-model's bytes", q->name);
            free(enc);
            free(x);
        }
        gguf_close(gs);
        gguf_close(gq);
        gguf_close(gd);
        unlink(direct);
    }
    unlink(src);
    unlink(dst);
}
END_TEST

Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300); /* the K-quant searches of whole files take seconds under ASan */
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
    tcase_add_test(tc, test_quant_encoders_match_ggml);
    tcase_add_test(tc, test_quant_decoders_match_gguf_py);
    tcase_add_test(tc, test_quant_real_tensors);
    tcase_add_test(tc, test_quant_matches_llamacpp_quantize);
    tcase_add_test(tc, test_quant_cli_and_gen_model_types);
    suite_add_tcase(s, tc);
    return s;
}
