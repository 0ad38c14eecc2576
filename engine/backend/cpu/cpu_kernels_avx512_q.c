/* AVX-512 VNNI kernels over packed weights (cpu_qpack.c) of the 32-element formats Q4_1, Q5_0, Q5_1,
 * IQ4_NL (Q8_0 activations) and the K formats Q2_K..Q6_K, IQ4_XS (Q8_K activations). Per group of 16
 * rows each 32-bit lane of a vector is one row: the weights are unpacked in registers to unsigned
 * bytes (nibbles, fifth or high bits merged in, the IQ4 codebook looked up + 128), vpdpbusd forms the
 * 4-product sums against each token's broadcast activation bytes, offsets (q - 16, q - 32, ...) enter
 * as the chain's initial value times the activation sums, and scales are applied to the exact int32
 * sub-block sums. The float operations are cpu_qdot.c's in the same order, so outputs equal the
 * scalar kernels' bit for bit, for any tile of tokens or rows. */
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)

#include <string.h>

/* Chains a token's dot product of n vectors (k0 .. k0 + n - 1) is split into at small T: the
 * vpdpbusd latency, not the throughput, bounds a lone token. */
#define QK_CHAINS(T) ((T) >= 4 ? 1 : (T) == 2 ? 2 : 4)

/* sum over vectors k0..k0+n-1 of w[k] . x[4k..4k+3] (broadcast), starting from init; C chains. */
AVX512_INLINE __m512i qk_dot_512(__m512i init, const __m512i *w, const int8_t *x, int k0, int n,
                                 const int C)
{
    __m512i s[4];
    s[0] = init;
    UNROLL_ALL
    for (int c = 1; c < C; c++) s[c] = _mm512_setzero_si512();
    UNROLL_ALL
    for (int k = 0; k < n; k++) s[k % C] = dpbusd_bcast_512(s[k % C], w[k0 + k], x + 4 * (k0 + k));
    UNROLL_ALL
    for (int c = 1; c < C; c++) s[0] = _mm512_add_epi32(s[0], s[c]);
    return s[0];
}

/* Bit `from` of every byte of v moved to bit `to` (other bits garbage: mask afterwards). */
AVX512_INLINE __m512i qk_bit_512(__m512i v, const int from, const int to)
{
    if (from < to) return _mm512_slli_epi16(v, to - from);
    if (from > to) return _mm512_srli_epi16(v, from - to);
    return v;
}

/* a | (b & mask) per bit */
AVX512_INLINE __m512i qk_merge_512(__m512i a, __m512i b, __m512i mask)
{
    return _mm512_ternarylogic_epi32(a, b, mask, 0xF8);
}

/* The IQ4 codebook + 128 (unsigned, 1..241) in each 128-bit lane, for vpshufb. */
AVX512_INLINE __m512i qk_iq4_lut_512(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241));
}

/* ---- 32-element formats ------------------------------------------------------------------- */

/* T tokens of one packed group (Q4_1, Q5_0, Q5_1 or IQ4_NL): per block 8 unsigned vectors, one
 * sum per token (the offset's -16 or -128 times the activation sum starting it), then
 * acc = fma(s, d_w * d_x, acc) (+ fma(m_w, s_x, acc), s_x Q8_1's f16 s). */
AVX512_INLINE void bpack_tile_512(const uint8_t *g, int nb, const struct cpu_act_q8 *xq, int t0,
                                  float *y, size_t ldy, __mmask16 m, const uint8_t *pf,
                                  const enum quant_type type, const int T)
{
    const int has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1;
    const int q5 = type == QUANT_Q5_0 || type == QUANT_Q5_1;
    const int off = type == QUANT_Q5_0 ? 16 : type == QUANT_IQ4_NL ? 128 : 0;
    const size_t rec = q5 ? 320 : 256, share = (size_t)CPU_QPACK_ROWS * 2 * (has_m ? 2 : 1);
    const uint16_t *dsc = (const uint16_t *)g, *msc = dsc + (size_t)nb * CPU_QPACK_ROWS;
    const uint8_t *q = g + (size_t)nb * CPU_QPACK_ROWS * 2 * (has_m ? 2 : 1);
    const int C = QK_CHAINS(T);
    const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
    __m512 acc[8];
    UNROLL_ALL
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *qb = q + (size_t)b * rec;
        __m512i w[8];
        __m512i h = q5 ? _mm512_loadu_si512((const void *)(qb + 256)) : _mm512_setzero_si512();
        UNROLL_ALL
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_loadu_si512((const void *)(qb + 64 * k));
            w[k] = _mm512_and_si512(v, low);
            w[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            if (q5) {
                w[k] = qk_merge_512(w[k], qk_bit_512(h, k, 4), bit4);
                w[4 + k] = qk_merge_512(w[4 + k], qk_bit_512(h, 4 + k, 4), bit4);
            } else if (type == QUANT_IQ4_NL) {
                w[k] = _mm512_shuffle_epi8(qk_iq4_lut_512(), w[k]);
                w[4 + k] = _mm512_shuffle_epi8(qk_iq4_lut_512(), w[4 + k]);
            }
        }
        if (pf) /* this block's share of the group: its quants and scales */
            for (size_t o = 0; o < rec + share; o += 64)
                _mm_prefetch((const char *)pf + (size_t)b * (rec + share) + o, _MM_HINT_T0);
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dsc + (size_t)b * 16)));
        __m512 mw = has_m ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(msc + b * 16)))
                          : _mm512_setzero_ps();
        UNROLL_ALL
        for (int t = 0; t < T; t++) {
            size_t xb = (size_t)(t0 + t) * nb + b;
            const int8_t *xs = xq->qs + xb * 32;
            __m512i s = qk_dot_512(_mm512_set1_epi32(-off * xq->sum[xb]), w, xs, 0, 8, C);
            float dx = xq->d[xb];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                     acc[t]);
            if (has_m) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xq->s[xb]), acc[t]);
        }
    }
    UNROLL_ALL
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy, m, acc[t]);
}

/* ---- K formats ------------------------------------------------------------------------------ */

/* Record bytes per super-block of a group (cpu_qpack.c). */
#define KREC(type)                                                                                 \
    ((type) == QUANT_Q4_K   ? 2368                                                                 \
     : (type) == QUANT_Q5_K ? 2880                                                                 \
     : (type) == QUANT_Q6_K ? 3360                                                                 \
     : (type) == QUANT_Q3_K ? 1824                                                                 \
     : (type) == QUANT_Q2_K ? 1344                                                                 \
                            : 2208)

/* Sub-block j (32 elements) of record r as 8 unsigned vectors (vector k: elements 32j + 4k..). */
AVX512_INLINE void kpack_unpack_512(const uint8_t *r, int j, __m512i *w, const enum quant_type type)
{
    const __m512i low = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(0x03);
    if (type == QUANT_Q4_K || type == QUANT_Q5_K) {
        const uint8_t *qs = r + (type == QUANT_Q4_K ? 320 : 832) + (size_t)(j / 2) * 512;
        const int hi = j % 2;
        UNROLL_ALL
        for (int k = 0; k < 8; k++) {
            __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * k));
            w[k] = _mm512_and_si512(hi ? _mm512_srli_epi16(v, 4) : v, low);
            if (type == QUANT_Q5_K) {
                __m512i h = _mm512_loadu_si512((const void *)(r + 320 + 64 * k));
                w[k] = qk_merge_512(w[k], qk_bit_512(h, j, 4), _mm512_set1_epi8(0x10));
            }
        }
    } else if (type == QUANT_Q6_K) {
        const int h = j / 4, s = j % 4;
        const uint8_t *ql = r + 288 + (size_t)(2 * h + (s & 1)) * 512, *qh = r + 2336 + h * 512;
        UNROLL_ALL
        for (int k = 0; k < 8; k++) {
            __m512i v = _mm512_loadu_si512((const void *)(ql + 64 * k));
            __m512i hb = _mm512_loadu_si512((const void *)(qh + 64 * k));
            w[k] = _mm512_and_si512((s >> 1) ? _mm512_srli_epi16(v, 4) : v, low);
            w[k] = qk_merge_512(w[k], qk_bit_512(hb, 2 * s, 4), _mm512_set1_epi8(0x30));
        }
    } else if (type == QUANT_Q3_K || type == QUANT_Q2_K) {
        const int h = j / 4, s = j % 4;
        const uint8_t *qs = r + (type == QUANT_Q3_K ? 288 : 320) + (size_t)h * 512;
        UNROLL_ALL
        for (int k = 0; k < 8; k++) {
            __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * k));
            w[k] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * s), two);
            if (type == QUANT_Q3_K) {
                __m512i hm = _mm512_loadu_si512((const void *)(r + 1312 + 64 * k));
                w[k] = qk_merge_512(w[k], qk_bit_512(hm, j, 2), _mm512_set1_epi8(0x04));
            }
        }
    } else { /* IQ4_XS */
        const uint8_t *qs = r + 160 + (size_t)j * 256;
        const __m512i lut = qk_iq4_lut_512();
        UNROLL_ALL
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * k));
            w[k] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
            w[4 + k] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        }
    }
}

/* 16 one-byte scales at p widened to int32 lanes (signed or unsigned). */
AVX512_INLINE __m512i kpack_scales_512(const uint8_t *p, const int is_signed)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}

/* T tokens of one packed group of a K format: per super-block the exact isum (and msum) per row
 * lane and token, then cpu_qdot.c's float combination. */
AVX512_INLINE void kpack_tile_512(const uint8_t *g, int nsb, const struct cpu_act_q8 *xq, int t0,
                                  float *y, size_t ldy, __mmask16 m, const uint8_t *pf,
                                  const enum quant_type type, const int T)
{
    const size_t rec = KREC(type), cols = (size_t)nsb * QUANT_QK_K;
    const int per16 = type == QUANT_Q6_K || type == QUANT_Q3_K || type == QUANT_Q2_K;
    const int has_min = type == QUANT_Q4_K || type == QUANT_Q5_K || type == QUANT_Q2_K;
    /* offset of the unsigned quants: added back as -off * (activation sum) */
    const int off = type == QUANT_Q6_K     ? 32
                    : type == QUANT_Q3_K   ? 4
                    : type == QUANT_IQ4_XS ? 128
                                           : 0;
    /* where each record keeps its per-sub-block scales */
    const size_t sc_at = type == QUANT_Q4_K || type == QUANT_Q5_K || type == QUANT_Q2_K ? 64 : 32;
    const int sc_signed = type == QUANT_Q6_K || type == QUANT_Q3_K || type == QUANT_IQ4_XS;
    /* One chain per dot even for a lone token: a super-block has 8-16 independent dots in flight
     * (split chains cost their adds: 2048x768 n=1, --cputime, 3 runs each: q4_K 20.6 -> 16.1 us,
     * q6_K 42.0 -> 30.4 us with C = 1 instead of 4; the 32-element kernels showed no difference). */
    const int C = 1;
    float accs[8][16] __attribute__((aligned(64)));
    UNROLL_ALL
    for (int t = 0; t < T; t++) _mm512_store_ps(accs[t], _mm512_setzero_ps());
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *r = g + (size_t)sb * rec;
        /* the hint must be a constant expression for clang: one call per hint */
        for (size_t o = 0; pf && o < rec; o += 64) {
            if (T >= 8)
                _mm_prefetch((const char *)pf + (size_t)sb * rec + o, _MM_HINT_T1);
            else
                _mm_prefetch((const char *)pf + (size_t)sb * rec + o, _MM_HINT_T0);
        }
        __m512i isum[8];
        UNROLL_ALL
        for (int t = 0; t < T; t++) isum[t] = _mm512_setzero_si512();
        /* j must be a constant in each copy of the body: it picks the shifts and the nibble */
        UNROLL_ALL
        for (int j = 0; j < 8; j++) {
            __m512i w[8];
            kpack_unpack_512(r, j, w, type);
            if (per16) {
                __m512i s0 = kpack_scales_512(r + sc_at + (size_t)(2 * j) * 16, sc_signed);
                __m512i s1 = kpack_scales_512(r + sc_at + (size_t)(2 * j + 1) * 16, sc_signed);
                if (type == QUANT_Q2_K) {
                    s0 = _mm512_and_si512(s0, _mm512_set1_epi32(15));
                    s1 = _mm512_and_si512(s1, _mm512_set1_epi32(15));
                }
                UNROLL_ALL
                for (int t = 0; t < T; t++) {
                    size_t tok = (size_t)(t0 + t);
                    const int8_t *xs = xq->qs + tok * cols + (size_t)sb * 256 + 32 * j;
                    const int16_t *s16 = xq->sum16 + tok * (cols / 16) + (size_t)sb * 16 + 2 * j;
                    __m512i a0 = qk_dot_512(_mm512_set1_epi32(-off * s16[0]), w, xs, 0, 4, C);
                    __m512i a1 = qk_dot_512(_mm512_set1_epi32(-off * s16[1]), w, xs, 4, 4, C);
                    isum[t] =
                        _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(a0, s0),
                                                                   _mm512_mullo_epi32(a1, s1)));
                }
            } else {
                __m512i s = kpack_scales_512(r + sc_at + (size_t)j * 16, sc_signed);
                UNROLL_ALL
                for (int t = 0; t < T; t++) {
                    size_t tok = (size_t)(t0 + t);
                    const int8_t *xs = xq->qs + tok * cols + (size_t)sb * 256 + 32 * j;
                    int init = off ? -off * xq->sum32[tok * (cols / 32) + (size_t)sb * 8 + j] : 0;
                    __m512i a = qk_dot_512(_mm512_set1_epi32(init), w, xs, 0, 8, C);
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(a, s));
                }
            }
        }
        __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)r));
        if (has_min) {
            /* msum per row: mins as int16 pairs against the activation sums' pairs */
            __m512i mp[8];
            const int npairs = type == QUANT_Q2_K ? 8 : 4;
            UNROLL_ALL
            for (int p = 0; p < npairs; p++) {
                if (type == QUANT_Q2_K) {
                    const uint8_t *sc = r + 64 + (size_t)(2 * p) * 16;
                    __m128i a = _mm_loadu_si128((const __m128i *)sc);
                    __m128i b = _mm_loadu_si128((const __m128i *)(sc + 16));
                    __m256i ab = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
                    ab = _mm256_and_si256(_mm256_srli_epi16(ab, 4), _mm256_set1_epi8(0x0f));
                    mp[p] = _mm512_cvtepu8_epi16(ab);
                } else {
                    mp[p] = _mm512_cvtepu8_epi16(
                        _mm256_loadu_si256((const __m256i *)(r + 192 + (size_t)p * 32)));
                }
            }
            __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + 32)));
            UNROLL_ALL
            for (int t = 0; t < T; t++) {
                size_t tok = (size_t)(t0 + t);
                const int16_t *sp = type == QUANT_Q2_K ? xq->sum16 + tok * (cols / 16) + sb * 16
                                                       : xq->sum32 + tok * (cols / 32) + sb * 8;
                __m512i ms = _mm512_setzero_si512();
                UNROLL_ALL
                for (int p = 0; p < npairs; p++) ms = dpwssd_bcast_512(ms, mp[p], sp + 2 * p);
                __m512 dx = _mm512_set1_ps(xq->d[tok * (size_t)nsb + (size_t)sb]);
                __m512 v = _mm512_fmsub_ps(dv, _mm512_cvtepi32_ps(isum[t]),
                                           _mm512_mul_ps(mv, _mm512_cvtepi32_ps(ms)));
                _mm512_store_ps(accs[t], _mm512_fmadd_ps(dx, v, _mm512_load_ps(accs[t])));
            }
        } else {
            UNROLL_ALL
            for (int t = 0; t < T; t++) {
                __m512 dx = _mm512_set1_ps(xq->d[(size_t)(t0 + t) * nsb + (size_t)sb]);
                __m512 v = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(isum[t]));
                _mm512_store_ps(accs[t], _mm512_fmadd_ps(dx, v, _mm512_load_ps(accs[t])));
            }
        }
    }
    UNROLL_ALL
    for (int t = 0; t < T; t++)
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, m, _mm512_load_ps(accs[t]));
}

/* ---- Q8_K activations ---------------------------------------------------------------------- */

/* ggml's quantize_row_q8_K_ref, 16 lanes at a time and bit for bit: the first element of largest
 * magnitude (NaN never is one) sets iscale = -127 / max; quants are nearest_int's own bit trick
 * (so even NaN payloads map as there), clamped to 127 and truncated to bytes; then the sums. */
static AVX512 void quantize_q8_k_512(const float *x, int k, int8_t *qs, float *d, int16_t *sum16,
                                     int16_t *sum32)
{
    for (int b = 0; b < k / QUANT_QK_K; b++) {
        const float *xb = x + b * QUANT_QK_K;
        int8_t *q = qs + b * QUANT_QK_K;
        __m512 amax = _mm512_setzero_ps();
        for (int i = 0; i < QUANT_QK_K; i += 16) /* NaN lanes keep the running max */
            amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), amax);
        float am = _mm512_reduce_max_ps(amax);
        if (am == 0.0f) {
            memset(q, 0, QUANT_QK_K);
            d[b] = 0.0f;
            memset(sum16 + b * 16, 0, 16 * sizeof(int16_t));
            memset(sum32 + b * 8, 0, 8 * sizeof(int16_t));
            continue;
        }
        float max = 0.0f;
        for (int i = 0; i < QUANT_QK_K; i += 16) {
            __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + i)),
                                              _mm512_set1_ps(am), _CMP_EQ_OQ);
            if (eq) {
                max = xb[i + __builtin_ctz(eq)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 is = _mm512_set1_ps(iscale), magic = _mm512_set1_ps(12582912.f);
        for (int i = 0; i < QUANT_QK_K; i += 16) {
            __m512i bits = _mm512_castps_si512(
                _mm512_add_ps(_mm512_mul_ps(is, _mm512_loadu_ps(xb + i)), magic));
            __m512i v = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)),
                                         _mm512_set1_epi32(0x00400000));
            v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(v));
        }
        for (int j = 0; j < 16; j++) {
            int s = _mm512_reduce_add_epi32(
                _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * j))));
            sum16[b * 16 + j] = (int16_t)s;
            if (j % 2) sum32[b * 8 + j / 2] = (int16_t)(sum16[b * 16 + j - 1] + s);
        }
        d[b] = 1 / iscale;
    }
}

/* ---- drivers -------------------------------------------------------------------------------- */

/* Token tiles of 8, 4, 2, 1 over one group; only the first reads the group from memory (and, with
 * pf, prefetches ahead of it), the others find it in L1/L2. */
#define QK_GROUP(tile, g, nb, xq, t0, nt, y, ldy, m, pf, type)                                     \
    do {                                                                                           \
        int t_ = 0;                                                                                \
        const uint8_t *pf_ = (pf);                                                                 \
        for (; t_ + 8 <= (nt); t_ += 8, pf_ = NULL)                                                \
            tile(g, nb, xq, (t0) + t_, (y) + (size_t)t_ * (ldy), ldy, m, pf_, type, 8);            \
        if (t_ + 4 <= (nt)) {                                                                      \
            tile(g, nb, xq, (t0) + t_, (y) + (size_t)t_ * (ldy), ldy, m, pf_, type, 4);            \
            t_ += 4;                                                                               \
            pf_ = NULL;                                                                            \
        }                                                                                          \
        if (t_ + 2 <= (nt)) {                                                                      \
            tile(g, nb, xq, (t0) + t_, (y) + (size_t)t_ * (ldy), ldy, m, pf_, type, 2);            \
            t_ += 2;                                                                               \
            pf_ = NULL;                                                                            \
        }                                                                                          \
        if (t_ < (nt)) tile(g, nb, xq, (t0) + t_, (y) + (size_t)t_ * (ldy), ldy, m, pf_, type, 1); \
    } while (0)

AVX512_INLINE void qk_gemm_512(const void *groups, size_t gb, int nr, const struct cpu_act_q8 *xq,
                               int t0, int nt, float *y, size_t ldy, int warm,
                               const enum quant_type type)
{
    const uint8_t *g = groups;
    const int k = cpu_act_of(type) == CPU_ACT_Q8_K;
    size_t dist = nt < 8 ? QPACK_PREFETCH_FEW : QPACK_PREFETCH_MANY;
    for (int r = 0; r < nr; r += CPU_QPACK_ROWS, g += gb, y += CPU_QPACK_ROWS) {
        int n = nr - r < CPU_QPACK_ROWS ? nr - r : CPU_QPACK_ROWS;
        __mmask16 m = (__mmask16)((1u << n) - 1u);
        const uint8_t *pf = warm ? g + dist : NULL;
        if (k)
            QK_GROUP(kpack_tile_512, g, xq->nb, xq, t0, nt, y, ldy, m, pf, type);
        else
            QK_GROUP(bpack_tile_512, g, xq->nb, xq, t0, nt, y, ldy, m, pf, type);
    }
}

#define QK_KERNEL(name, type)                                                                      \
    static AVX512 void gemm_##name##_packed_512(const void *groups, size_t group_bytes, int nr,    \
                                                const struct cpu_act_q8 *xq, int t0, int nt,       \
                                                float *y, size_t ldy, int warm)                    \
    {                                                                                              \
        qk_gemm_512(groups, group_bytes, nr, xq, t0, nt, y, ldy, warm, type);                      \
    }
QK_KERNEL(q4_1, QUANT_Q4_1)
QK_KERNEL(q5_0, QUANT_Q5_0)
QK_KERNEL(q5_1, QUANT_Q5_1)
QK_KERNEL(iq4_nl, QUANT_IQ4_NL)
QK_KERNEL(q2_k, QUANT_Q2_K)
QK_KERNEL(q3_k, QUANT_Q3_K)
QK_KERNEL(q4_k, QUANT_Q4_K)
QK_KERNEL(q5_k, QUANT_Q5_K)
QK_KERNEL(q6_k, QUANT_Q6_K)
QK_KERNEL(iq4_xs, QUANT_IQ4_XS)

void cpu_kernels_avx512_q(struct cpu_kernels *k)
{
    k->gemm_qpack[QUANT_Q4_1] = gemm_q4_1_packed_512;
    k->gemm_qpack[QUANT_Q5_0] = gemm_q5_0_packed_512;
    k->gemm_qpack[QUANT_Q5_1] = gemm_q5_1_packed_512;
    k->gemm_qpack[QUANT_IQ4_NL] = gemm_iq4_nl_packed_512;
    k->gemm_qpack[QUANT_Q2_K] = gemm_q2_k_packed_512;
    k->gemm_qpack[QUANT_Q3_K] = gemm_q3_k_packed_512;
    k->gemm_qpack[QUANT_Q4_K] = gemm_q4_k_packed_512;
    k->gemm_qpack[QUANT_Q5_K] = gemm_q5_k_packed_512;
    k->gemm_qpack[QUANT_Q6_K] = gemm_q6_k_packed_512;
    k->gemm_qpack[QUANT_IQ4_XS] = gemm_iq4_xs_packed_512;
    k->quantize_q8_k = quantize_q8_k_512;
}

#else

void cpu_kernels_avx512_q(struct cpu_kernels *k)
{
    (void)k; /* not an x86-64 build */
}

#endif
