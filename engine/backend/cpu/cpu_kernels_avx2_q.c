/* AVX2 kernels over row-major blocks of Q4_1, Q5_0, Q5_1, IQ4_NL (Q8_0 activations) and Q2_K..Q6_K,
 * IQ4_XS (Q8_K activations). A row's block is unpacked once into bytes (nibbles, fifth or high bits
 * merged in, IQ4 codebook values by vpshufb) and then serves every token: vpmaddubsw forms pair sums
 * (unsigned quants against signed activations, or |w| against sign-adjusted x for the signed IQ4
 * values: no pair can saturate), vpmaddwd adds the pairs, for the K formats times the sub-block
 * scales, and one horizontal sum gives the exact int32 block sum; offsets and mins come from the
 * activation sums. The float operations are cpu_qdot.c's, so outputs equal the scalar kernels. */
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

/* Tokens per pass over a row's blocks (matmul passes at most 16 per call). */
#define QA_TOKENS 16

AVX2_INLINE int32_t qa_hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

AVX2_INLINE float qa_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
}

/* 32 nibbles of 16 bytes: element j low in byte j, j + 16 high. */
AVX2_INLINE __m256i qa_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* Byte j = 0x10 where bit j of the little-endian uint32 at p is set (ggml's bytes_from_bits_32). */
AVX2_INLINE __m256i qa_bits_to_0x10(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, sizeof(x));
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

/* The IQ4 codebook as signed bytes in both 128-bit lanes. */
AVX2_INLINE __m256i qa_iq4_lut(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
}

/* sum of pairs of u8 w * s8 x as int16, or of signed w (|w| * sign-adjusted x): exact for every
 * quant these formats hold (|pair| <= 2 * 127 * 127 or 2 * 63 * 127). */
AVX2_INLINE __m256i qa_pairs(__m256i w, __m256i x, const int is_signed)
{
    if (is_signed) return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_maddubs_epi16(w, x);
}

/* ---- 32-element formats ------------------------------------------------------------------- */

AVX2_INLINE void qa_block32(const enum quant_type type, const uint8_t *row, size_t row_bytes,
                            int nr, const struct cpu_act_q8 *xq, int t0, int nt, float *y,
                            size_t ldy)
{
    const int has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1;
    const int q5 = type == QUANT_Q5_0 || type == QUANT_Q5_1, sgn = type == QUANT_IQ4_NL;
    const int off = type == QUANT_Q5_0 ? 16 : 0;
    const size_t bsz = quant_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    int nb = xq->nb;
    for (int r = 0; r < nr; r++) {
        const uint8_t *w = row + (size_t)r * row_bytes;
        for (int tc = 0; tc < nt; tc += QA_TOKENS) {
            int n = nt - tc < QA_TOKENS ? nt - tc : QA_TOKENS;
            float acc[QA_TOKENS] = {0};
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = w + (size_t)b * bsz;
                const uint8_t *qs = blk + (has_m ? 4 : 2) + (q5 ? 4 : 0);
                __m256i wv = qa_nibbles(qs);
                if (q5) wv = _mm256_or_si256(wv, qa_bits_to_0x10(blk + (has_m ? 4 : 2)));
                if (sgn) wv = _mm256_shuffle_epi8(qa_iq4_lut(), wv);
                float d = qa_f16(blk), m = has_m ? qa_f16(blk + 2) : 0.0f;
                for (int t = 0; t < n; t++) {
                    size_t xb = (size_t)(t0 + tc + t) * nb + b;
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xq->qs + xb * 32));
                    int32_t s = qa_hsum_epi32(_mm256_madd_epi16(qa_pairs(wv, xv, sgn), ones));
                    s -= off * xq->sum[xb];
                    float dx = xq->d[xb];
                    acc[t] = fmaf((float)s, d * dx, acc[t]);
                    if (has_m) acc[t] = fmaf(m, xq->s[xb], acc[t]);
                }
            }
            for (int t = 0; t < n; t++) y[(size_t)(tc + t) * ldy + r] = acc[t];
        }
    }
}

/* ---- K formats ------------------------------------------------------------------------------ */

/* One super-block of one row, unpacked: vector j = elements 32j..32j+31 (unsigned quants, or the
 * signed IQ4 values), sv[j] the scales of its two halves as int16 (8 each), sc16/mn16 the scales
 * and mins per 16 for the activation-sum terms. */
struct qa_super {
    __m256i u[8], sv[8];
    int16_t sc16[16], mn16[16];
    float d, dmin;
};

/* Bit `from` of every byte moved to bit `to` (other bits garbage: mask afterwards). */
AVX2_INLINE __m256i qa_bit(__m256i v, const int from, const int to)
{
    if (from < to) return _mm256_slli_epi16(v, to - from);
    if (from > to) return _mm256_srli_epi16(v, from - to);
    return v;
}

AVX2_INLINE __m256i qa_masked(__m256i v, int mask)
{
    return _mm256_and_si256(v, _mm256_set1_epi8((char)mask));
}

AVX2_INLINE void qa_unpack_k(const enum quant_type type, const uint8_t *blk, struct qa_super *o)
{
    memset(o->mn16, 0, sizeof(o->mn16));
    o->dmin = 0.0f;
    switch (type) {
    case QUANT_Q4_K:
    case QUANT_Q5_K: {
        const uint8_t *qs = blk + (type == QUANT_Q4_K ? 16 : 48);
        __m256i h = type == QUANT_Q5_K ? _mm256_loadu_si256((const __m256i *)(blk + 16))
                                       : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            o->u[2 * c] = qa_masked(v, 0x0f);
            o->u[2 * c + 1] = qa_masked(_mm256_srli_epi16(v, 4), 0x0f);
        }
        if (type == QUANT_Q5_K) {
            o->u[0] = _mm256_or_si256(o->u[0], qa_masked(qa_bit(h, 0, 4), 0x10));
            o->u[1] = _mm256_or_si256(o->u[1], qa_masked(qa_bit(h, 1, 4), 0x10));
            o->u[2] = _mm256_or_si256(o->u[2], qa_masked(qa_bit(h, 2, 4), 0x10));
            o->u[3] = _mm256_or_si256(o->u[3], qa_masked(qa_bit(h, 3, 4), 0x10));
            o->u[4] = _mm256_or_si256(o->u[4], qa_masked(qa_bit(h, 4, 4), 0x10));
            o->u[5] = _mm256_or_si256(o->u[5], qa_masked(qa_bit(h, 5, 4), 0x10));
            o->u[6] = _mm256_or_si256(o->u[6], qa_masked(qa_bit(h, 6, 4), 0x10));
            o->u[7] = _mm256_or_si256(o->u[7], qa_masked(qa_bit(h, 7, 4), 0x10));
        }
        o->d = qa_f16(blk), o->dmin = qa_f16(blk + 2);
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_scale_min_k4(j, blk + 4, &s, &m);
            o->sc16[2 * j] = o->sc16[2 * j + 1] = s;
            o->mn16[2 * j] = o->mn16[2 * j + 1] = m;
        }
        break;
    }
    case QUANT_Q6_K: {
        const struct quant_block_q6_k *b = (const void *)blk;
        for (int hh = 0; hh < 2; hh++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * hh));
            __m256i c = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * hh + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * hh));
            o->u[4 * hh + 0] =
                _mm256_or_si256(qa_masked(a, 0x0f), qa_masked(qa_bit(h, 0, 4), 0x30));
            o->u[4 * hh + 1] =
                _mm256_or_si256(qa_masked(c, 0x0f), qa_masked(qa_bit(h, 2, 4), 0x30));
            o->u[4 * hh + 2] = _mm256_or_si256(qa_masked(_mm256_srli_epi16(a, 4), 0x0f),
                                               qa_masked(qa_bit(h, 4, 4), 0x30));
            o->u[4 * hh + 3] = _mm256_or_si256(qa_masked(_mm256_srli_epi16(c, 4), 0x0f),
                                               qa_masked(qa_bit(h, 6, 4), 0x30));
        }
        o->d = qa_f16(blk + 208);
        for (int k = 0; k < 16; k++) o->sc16[k] = b->scales[k];
        break;
    }
    case QUANT_Q3_K:
    case QUANT_Q2_K: {
        const uint8_t *qs = blk + (type == QUANT_Q3_K ? 32 : 16);
        __m256i m =
            type == QUANT_Q3_K ? _mm256_loadu_si256((const __m256i *)blk) : _mm256_setzero_si256();
        for (int hh = 0; hh < 2; hh++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * hh));
            o->u[4 * hh + 0] = qa_masked(q, 0x03);
            o->u[4 * hh + 1] = qa_masked(_mm256_srli_epi16(q, 2), 0x03);
            o->u[4 * hh + 2] = qa_masked(_mm256_srli_epi16(q, 4), 0x03);
            o->u[4 * hh + 3] = qa_masked(_mm256_srli_epi16(q, 6), 0x03);
        }
        if (type == QUANT_Q3_K) {
            o->u[0] = _mm256_or_si256(o->u[0], qa_masked(qa_bit(m, 0, 2), 0x04));
            o->u[1] = _mm256_or_si256(o->u[1], qa_masked(qa_bit(m, 1, 2), 0x04));
            o->u[2] = _mm256_or_si256(o->u[2], qa_masked(qa_bit(m, 2, 2), 0x04));
            o->u[3] = _mm256_or_si256(o->u[3], qa_masked(qa_bit(m, 3, 2), 0x04));
            o->u[4] = _mm256_or_si256(o->u[4], qa_masked(qa_bit(m, 4, 2), 0x04));
            o->u[5] = _mm256_or_si256(o->u[5], qa_masked(qa_bit(m, 5, 2), 0x04));
            o->u[6] = _mm256_or_si256(o->u[6], qa_masked(qa_bit(m, 6, 2), 0x04));
            o->u[7] = _mm256_or_si256(o->u[7], qa_masked(qa_bit(m, 7, 2), 0x04));
            o->d = qa_f16(blk + 108);
            for (int k = 0; k < 16; k++) o->sc16[k] = (int16_t)quant_scale_q3_k(blk + 96, k);
        } else {
            o->d = qa_f16(blk + 80), o->dmin = qa_f16(blk + 82);
            for (int k = 0; k < 16; k++) o->sc16[k] = blk[k] & 0xF, o->mn16[k] = blk[k] >> 4;
        }
        break;
    }
    default: { /* IQ4_XS */
        const struct quant_block_iq4_xs *b = (const void *)blk;
        for (int j = 0; j < 8; j++)
            o->u[j] = _mm256_shuffle_epi8(qa_iq4_lut(), qa_nibbles(b->qs + 16 * j));
        o->d = qa_f16(blk);
        for (int j = 0; j < 8; j++)
            o->sc16[2 * j] = o->sc16[2 * j + 1] =
                (int16_t)quant_scale_iq4_xs(b->scales_h, b->scales_l, j);
        break;
    }
    }
    for (int j = 0; j < 8; j++)
        o->sv[j] =
            _mm256_set_m128i(_mm_set1_epi16(o->sc16[2 * j + 1]), _mm_set1_epi16(o->sc16[2 * j]));
}

AVX2_INLINE void qa_k(const enum quant_type type, const uint8_t *row, size_t row_bytes, int nr,
                      const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    const int has_min = type == QUANT_Q4_K || type == QUANT_Q5_K || type == QUANT_Q2_K;
    const int off = type == QUANT_Q6_K ? 32 : type == QUANT_Q3_K ? 4 : 0;
    const int sgn = type == QUANT_IQ4_XS;
    const size_t bsz = quant_block_bytes(type), cols = (size_t)xq->nb * QUANT_QK_K;
    int nb = xq->nb;
    for (int r = 0; r < nr; r++) {
        const uint8_t *w = row + (size_t)r * row_bytes;
        for (int tc = 0; tc < nt; tc += QA_TOKENS) {
            int n = nt - tc < QA_TOKENS ? nt - tc : QA_TOKENS;
            float acc[QA_TOKENS] = {0};
            for (int b = 0; b < nb; b++) {
                struct qa_super s;
                qa_unpack_k(type, w + (size_t)b * bsz, &s);
                __m256i scv = _mm256_loadu_si256((const __m256i *)s.sc16);
                __m256i mnv = _mm256_loadu_si256((const __m256i *)s.mn16);
                for (int t = 0; t < n; t++) {
                    size_t tok = (size_t)(t0 + tc + t);
                    const int8_t *xs = xq->qs + tok * cols + (size_t)b * QUANT_QK_K;
                    __m256i s16 = _mm256_loadu_si256(
                        (const __m256i *)(xq->sum16 + tok * (cols / 16) + b * 16));
                    __m256i iv = _mm256_setzero_si256();
                    for (int j = 0; j < 8; j++) {
                        __m256i xv = _mm256_loadu_si256((const __m256i *)(xs + 32 * j));
                        iv = _mm256_add_epi32(
                            iv, _mm256_madd_epi16(qa_pairs(s.u[j], xv, sgn), s.sv[j]));
                    }
                    int32_t isum = qa_hsum_epi32(iv);
                    if (off) isum -= off * qa_hsum_epi32(_mm256_madd_epi16(scv, s16));
                    float dx = xq->d[tok * (size_t)nb + (size_t)b];
                    if (has_min) {
                        int32_t msum = qa_hsum_epi32(_mm256_madd_epi16(mnv, s16));
                        acc[t] = fmaf(dx, fmaf(s.d, (float)isum, -(s.dmin * (float)msum)), acc[t]);
                    } else {
                        acc[t] = fmaf(dx, s.d * (float)isum, acc[t]);
                    }
                }
            }
            for (int t = 0; t < n; t++) y[(size_t)(tc + t) * ldy + r] = acc[t];
        }
    }
}

/* ---- Q8_K activations ---------------------------------------------------------------------- */

/* quantize_row_q8_K_ref bit for bit, 8 lanes at a time (see quantize_q8_k_512). */
static AVX2 void quantize_q8_k_avx2(const float *x, int k, int8_t *qs, float *d, int16_t *sum16,
                                    int16_t *sum32)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b = 0; b < k / QUANT_QK_K; b++) {
        const float *xb = x + b * QUANT_QK_K;
        int8_t *q = qs + b * QUANT_QK_K;
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < QUANT_QK_K; i += 8) /* NaN lanes keep the running max */
            amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + i), absmask), amax);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float am = _mm_cvtss_f32(m4);
        if (am == 0.0f) {
            memset(q, 0, QUANT_QK_K);
            d[b] = 0.0f;
            memset(sum16 + b * 16, 0, 16 * sizeof(int16_t));
            memset(sum32 + b * 8, 0, 8 * sizeof(int16_t));
            continue;
        }
        float max = 0.0f;
        for (int i = 0; i < QUANT_QK_K; i += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + i), absmask);
            int eq = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(am), _CMP_EQ_OQ));
            if (eq) {
                max = xb[i + __builtin_ctz((unsigned)eq)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
        for (int i = 0; i < QUANT_QK_K; i += 8) {
            __m256i bits = _mm256_castps_si256(
                _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(xb + i)), magic));
            __m256i v = _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                         _mm256_set1_epi32(0x00400000));
            v = _mm256_min_epi32(v, _mm256_set1_epi32(127));
            int32_t lanes[8];
            _mm256_storeu_si256((__m256i *)lanes, v);
            for (int l = 0; l < 8; l++) q[i + l] = (int8_t)(uint8_t)lanes[l];
        }
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q[16 * j + l];
            sum16[b * 16 + j] = (int16_t)s;
            if (j % 2) sum32[b * 8 + j / 2] = (int16_t)(sum16[b * 16 + j - 1] + s);
        }
        d[b] = 1 / iscale;
    }
}

#define QA_KERNEL(name, type, impl)                                                                \
    static AVX2 void gemm_##name##_avx2(const void *w, size_t row_bytes, int nr,                   \
                                        const struct cpu_act_q8 *xq, int t0, int nt, float *y,     \
                                        size_t ldy)                                                \
    {                                                                                              \
        impl(type, w, row_bytes, nr, xq, t0, nt, y, ldy);                                          \
    }
QA_KERNEL(q4_1, QUANT_Q4_1, qa_block32)
QA_KERNEL(q5_0, QUANT_Q5_0, qa_block32)
QA_KERNEL(q5_1, QUANT_Q5_1, qa_block32)
QA_KERNEL(iq4_nl, QUANT_IQ4_NL, qa_block32)
QA_KERNEL(q2_k, QUANT_Q2_K, qa_k)
QA_KERNEL(q3_k, QUANT_Q3_K, qa_k)
QA_KERNEL(q4_k, QUANT_Q4_K, qa_k)
QA_KERNEL(q5_k, QUANT_Q5_K, qa_k)
QA_KERNEL(q6_k, QUANT_Q6_K, qa_k)
QA_KERNEL(iq4_xs, QUANT_IQ4_XS, qa_k)

void cpu_kernels_avx2_q(struct cpu_kernels *k)
{
    k->gemm_q[QUANT_Q4_1] = gemm_q4_1_avx2;
    k->gemm_q[QUANT_Q5_0] = gemm_q5_0_avx2;
    k->gemm_q[QUANT_Q5_1] = gemm_q5_1_avx2;
    k->gemm_q[QUANT_IQ4_NL] = gemm_iq4_nl_avx2;
    k->gemm_q[QUANT_Q2_K] = gemm_q2_k_avx2;
    k->gemm_q[QUANT_Q3_K] = gemm_q3_k_avx2;
    k->gemm_q[QUANT_Q4_K] = gemm_q4_k_avx2;
    k->gemm_q[QUANT_Q5_K] = gemm_q5_k_avx2;
    k->gemm_q[QUANT_Q6_K] = gemm_q6_k_avx2;
    k->gemm_q[QUANT_IQ4_XS] = gemm_iq4_xs_avx2;
    k->quantize_q8_k = quantize_q8_k_avx2;
}

#else

void cpu_kernels_avx2_q(struct cpu_kernels *k)
{
    (void)k; /* not an x86-64 build */
}

#endif
