/* AVX2 + FMA + F16C kernels. Compiled with per-function target attributes (no global -m flags) and
 * installed by cpu_kernels_init only when cpuid reports the features. Integer dot products use
 * maddubs: Q8_0 weights with the sign trick (|w| times sign(w)*x fits int16 pairs), Q4_0 weights as
 * unsigned nibbles with the -8 offset folded into the per-block sum of the activation quants. */
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

AVX2_INLINE float hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2_INLINE float f16_avx2(const void *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
}

/* One (R rows) x (T tokens) tile; every output is one FMA chain over k in steps of 8, a fixed
 * horizontal sum, then the scalar tail, so the result does not depend on R or T. */
AVX2_INLINE __m256 wload_avx2(const void *w, size_t idx, const int f16)
{
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + idx)));
    return _mm256_loadu_ps((const float *)w + idx);
}

AVX2_INLINE float wget_avx2(const void *w, size_t idx, const int f16)
{
    return f16 ? _cvtsh_ss(((const uint16_t *)w)[idx]) : ((const float *)w)[idx];
}

AVX2_INLINE void f32_tile_avx2(const void *w, size_t ldw, const float *x, size_t ldx, int k,
                               float *y, size_t ldy, const int f16, const int R, const int T)
{
    __m256 acc[4][2];
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    }
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 wv[4];
        UNROLL
        for (int r = 0; r < R; r++) wv[r] = wload_avx2(w, r * ldw + i, f16);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) {
            float s = hsum_avx2(acc[r][t]);
            for (int j = i; j < k; j++) s += wget_avx2(w, r * ldw + j, f16) * x[t * ldx + j];
            y[t * ldy + r] = s;
        }
    }
}

AVX2_INLINE void wgemm_avx2(const void *w, size_t ldw, int nr, const float *x, size_t ldx, int nt,
                            int k, float *y, size_t ldy, const int f16)
{
    int t = 0;
    for (; t + 2 <= nt; t += 2) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 4, 2); break;
        case 3: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 3, 2); break;
        case 2: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 2, 2); break;
        default: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 1, 2); break;
        }
    }
    if (t < nt) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 4, 1); break;
        case 3: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 3, 1); break;
        case 2: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 2, 1); break;
        default: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, f16, 1, 1); break;
        }
    }
}

static AVX2 void gemm_f32_avx2(const float *w, size_t ldw, int nr, const float *x, size_t ldx,
                               int nt, int k, float *y, size_t ldy)
{
    wgemm_avx2(w, ldw, nr, x, ldx, nt, k, y, ldy, 0);
}

static AVX2 void gemm_f16_avx2(const uint16_t *w, size_t ldw, int nr, const float *x, size_t ldx,
                               int nt, int k, float *y, size_t ldy)
{
    wgemm_avx2(w, ldw, nr, x, ldx, nt, k, y, ldy, 1);
}

/* Q8_0 x Q8_0, R rows x 1 token: per block, maddubs(|w|, sign(x, w)) summed to int32 lanes, scaled
 * by d_w * d_x into a float accumulator per output. */
AVX2_INLINE void q8_0_tile_avx2(const char *w, size_t rb, const struct cpu_act_q8 *xq, int tok,
                                float *y, const int R)
{
    int nb = xq->nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const int8_t *xs = xq->qs + (size_t)tok * nb * 32;
    const float *xd = xq->d + (size_t)tok * nb;
    for (int b = 0; b < nb; b++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xs + b * 32));
        UNROLL
        for (int r = 0; r < R; r++) {
            const char *blk = w + r * rb + (size_t)b * 34;
            __m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(f16_avx2(blk) * xd[b]), acc[r]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) y[r] = hsum_avx2(acc[r]);
}

static AVX2 void gemm_q8_0_avx2(const void *w, size_t row_bytes, int nr,
                                const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    for (int t = 0; t < nt; t++) {
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: q8_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, 4); break;
        case 3: q8_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, 3); break;
        case 2: q8_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, 2); break;
        default: q8_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, 1); break;
        }
    }
}

/* Q4_0 x Q8_0, R rows x T tokens: nibbles u in 0..15 against signed x (maddubs cannot saturate:
 * 2 * 15 * 127 < 32767); sum(w * x) = sum(u * x) - 8 * sum(x), the correction added to lane 0. */
AVX2_INLINE void q4_0_tile_avx2(const char *w, size_t rb, const struct cpu_act_q8 *xq, int t0,
                                float *y, size_t ldy, const int R, const int T)
{
    int nb = xq->nb;
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0f);
    __m256 acc[4][2];
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        __m256i u[4];
        float dw[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const char *blk = w + r * rb + (size_t)b * 18;
            __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
            u[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
            dw[r] = f16_avx2(blk);
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            size_t xb = (size_t)(t0 + t) * nb + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq->qs + xb * 32));
            __m256i bias = _mm256_setr_epi32(-8 * xq->sum[xb], 0, 0, 0, 0, 0, 0, 0);
            float dx = xq->d[xb];
            UNROLL
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xv), ones);
                __m256 pf = _mm256_cvtepi32_ps(_mm256_add_epi32(p, bias));
                acc[r][t] = _mm256_fmadd_ps(pf, _mm256_set1_ps(dw[r] * dx), acc[r][t]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum_avx2(acc[r][t]);
    }
}

static AVX2 void gemm_q4_0_avx2(const void *w, size_t row_bytes, int nr,
                                const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    int t = 0;
    for (; t + 2 <= nt; t += 2) {
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 4, 2); break;
        case 3: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 3, 2); break;
        case 2: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 2, 2); break;
        default: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 1, 2); break;
        }
    }
    if (t < nt) {
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 4, 1); break;
        case 3: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 3, 1); break;
        case 2: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 2, 1); break;
        default: q4_0_tile_avx2(w, row_bytes, xq, t0 + t, yt, ldy, 1, 1); break;
        }
    }
}

static AVX2 void f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

/* F16C's conversion rounds to nearest even like quant_f32_to_f16 (NaN payloads may differ) */
static AVX2 void f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

AVX2_INLINE float dot_f32_avx2(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum_avx2(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* exp(x): Cephes' range reduction and polynomial, relative error ~2 ulp; inputs are clamped to
 * [-87, 88] (below: effectively 0; above: ~1.6e38, which is all silu and softmax need). */
AVX2_INLINE __m256 exp_avx2(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Scores for 16 rows (queries transposed) in exactly the arithmetic of dot_f32_avx2 for each row
 * (see attn_scores_512 for why), eight rows at a time: lane l of the dot's accumulator becomes
 * vector a[l], reduced by hsum_avx2's tree, then the scalar tail's products added one by one. */
static AVX2 void attn_scores_avx2(const float *qt, int hd, const float *k, size_t ldk, int np,
                                  float *s)
{
    int body = hd & ~7;
    for (int p = 0; p < np; p++) {
        const float *kp = k + p * ldk;
        for (int h = 0; h < 16; h += 8) {
            __m256 a[8];
            for (int l = 0; l < 8; l++) a[l] = _mm256_setzero_ps();
            for (int i = 0; i < body; i += 8)
                for (int l = 0; l < 8; l++)
                    a[l] = _mm256_fmadd_ps(_mm256_loadu_ps(qt + (i + l) * 16 + h),
                                           _mm256_broadcast_ss(kp + i + l), a[l]);
            for (int l = 0; l < 4; l++) a[l] = _mm256_add_ps(a[l], a[l + 4]);
            __m256 sum = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
            for (int i = body; i < hd; i++)
                sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_loadu_ps(qt + i * 16 + h),
                                                       _mm256_broadcast_ss(kp + i)));
            _mm256_storeu_ps(s + p * 16 + h, sum);
        }
    }
}

static AVX2 void attn_scores_dot_avx2(const float *q, int nq, int hd, const float *k, size_t ldk,
                                      int np, float *s)
{
    for (int p = 0; p < np; p++)
        for (int r = 0; r < nq; r++) s[p * 16 + r] = dot_f32_avx2(q + r * hd, k + p * ldk, hd);
}

static AVX2 void attn_softmax_avx2(float *s, int np, const int32_t *lim, float *inv)
{
    for (int h = 0; h < 2; h++) {
        __m256i lv = _mm256_loadu_si256((const __m256i *)(lim + 8 * h));
        __m256 mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
        for (int p = 0; p < np; p++) {
            __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lv, _mm256_set1_epi32(p)));
            mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, _mm256_loadu_ps(s + p * 16 + 8 * h)), m);
        }
        for (int p = 0; p < np; p++) {
            __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lv, _mm256_set1_epi32(p)));
            __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + p * 16 + 8 * h), mx));
            e = _mm256_and_ps(e, m);
            _mm256_storeu_ps(s + p * 16 + 8 * h, e);
            sum = _mm256_add_ps(sum, e);
        }
        _mm256_storeu_ps(inv + 8 * h, _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
    }
}

static AVX2 void attn_pv_avx2(const float *s, int nq, const float *v, size_t ldv, int np, float *o,
                              int hd)
{
    int c = 0;
    for (; c + 16 <= hd; c += 16)
        for (int r = 0; r < nq; r++) {
            float *orow = o + r * hd + c;
            __m256 a0 = _mm256_loadu_ps(orow), a1 = _mm256_loadu_ps(orow + 8);
            for (int p = 0; p < np; p++) {
                __m256 w = _mm256_broadcast_ss(s + p * 16 + r);
                a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + p * ldv + c), a0);
                a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + p * ldv + c + 8), a1);
            }
            _mm256_storeu_ps(orow, a0);
            _mm256_storeu_ps(orow + 8, a1);
        }
    for (; c < hd; c++)
        for (int r = 0; r < nq; r++) {
            float a = o[r * hd + c];
            for (int p = 0; p < np; p++) a += s[p * 16 + r] * v[p * ldv + c];
            o[r * hd + c] = a;
        }
}

static AVX2 void attn_probs_f16_avx2(float *s, int np, const float *inv)
{
    __m256 i0 = _mm256_loadu_ps(inv), i1 = _mm256_loadu_ps(inv + 8);
    for (int p = 0; p < np; p++) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(s + p * 16), i0);
        __m256 b = _mm256_mul_ps(_mm256_loadu_ps(s + p * 16 + 8), i1);
        _mm256_storeu_ps(s + p * 16,
                         _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)));
        _mm256_storeu_ps(s + p * 16 + 8,
                         _mm256_cvtph_ps(_mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT)));
    }
}

/* cpu_ggml_expf on 8 lanes; false (nothing stored) when a lane is NaN or its n exceeds 127 (the
 * scalar function then takes the chunk). ldexpf(j, n) is the correctly rounded j * 2^n: the product
 * is exact in double (j has 24 bits) and its conversion to float rounds once, subnormals included;
 * n below -192 gives 0 as there. */
AVX2_INLINE bool ggml_expf8_avx2(__m256 x, __m256 *out)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift), shift);
    if (_mm256_movemask_ps(_mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ)) != 0xff)
        return false;
    __m256 zero = _mm256_cmp_ps(n, _mm256_set1_ps(-192.0f), _CMP_LT_OQ);
    __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    __m256 u = _mm256_mul_ps(b, b);
    __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    __m256 low = _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f));
    __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u, low);
    __m256i ni = _mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)));
    __m256i bias = _mm256_set1_epi64x(1023);
    __m256d e0 = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(ni)), bias), 52));
    __m256d e1 = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(ni, 1)), bias), 52));
    __m128 r0 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(j)), e0));
    __m128 r1 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(j, 1)), e1));
    *out = _mm256_andnot_ps(zero, _mm256_set_m128(r1, r0));
    return true;
}

/* ggml_exp_sum: chunks of 16 positions as two vectors; a partial chunk through a copy with the
 * lanes out of range at x - mx = 0 and zeroed before the sum (cpu_ggml_reduce16's order). */
static AVX2 double ggml_exp_sum_avx2(float *x, int lo, int np, float mx)
{
    double sum = 0.0;
    __m256 m = _mm256_set1_ps(mx);
    for (int c = lo & ~15; c < np; c += 16) {
        int a = lo > c ? lo - c : 0, e = np - c < 16 ? np - c : 16;
        float buf[16], *src = x + c;
        if (a > 0 || e < 16) {
            for (int l = 0; l < 16; l++) buf[l] = l >= a && l < e ? x[c + l] : mx;
            src = buf;
        }
        __m256 y0, y1;
        if (!ggml_expf8_avx2(_mm256_sub_ps(_mm256_loadu_ps(src), m), &y0) ||
            !ggml_expf8_avx2(_mm256_sub_ps(_mm256_loadu_ps(src + 8), m), &y1)) {
            float lane[16] = {0};
            for (int l = a; l < e; l++) lane[l] = x[c + l] = cpu_ggml_expf(x[c + l] - mx);
            sum += (double)cpu_ggml_reduce16(lane);
            continue;
        }
        if (src == buf) {
            __m256i idx0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            __m256i idx1 = _mm256_add_epi32(idx0, _mm256_set1_epi32(8));
            __m256i va = _mm256_set1_epi32(a - 1), ve = _mm256_set1_epi32(e);
            __m256 k0 = _mm256_castsi256_ps(
                _mm256_and_si256(_mm256_cmpgt_epi32(idx0, va), _mm256_cmpgt_epi32(ve, idx0)));
            __m256 k1 = _mm256_castsi256_ps(
                _mm256_and_si256(_mm256_cmpgt_epi32(idx1, va), _mm256_cmpgt_epi32(ve, idx1)));
            y0 = _mm256_and_ps(y0, k0);
            y1 = _mm256_and_ps(y1, k1);
            _mm256_storeu_ps(buf, y0);
            _mm256_storeu_ps(buf + 8, y1);
            for (int l = a; l < e; l++) x[c + l] = buf[l];
        } else {
            _mm256_storeu_ps(x + c, y0);
            _mm256_storeu_ps(x + c + 8, y1);
        }
        __m256 h = _mm256_add_ps(y0, y1);
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        __m128 t = _mm_add_ps(q, _mm_movehl_ps(q, q));
        sum += (double)_mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
    }
    return sum;
}

/* ggml_scores: 8 positions at a time, their double sums in two vectors (the scalar order per lane). */
static AVX2 void ggml_scores_avx2(const float *q, int hd, const float *kt, size_t ldk, int n,
                                  float *s)
{
    int p = 0;
    for (; p + 8 <= n; p += 8) {
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
        for (int i = 0; i < hd; i++) {
            __m256 x =
                _mm256_mul_ps(_mm256_set1_ps(q[i]), _mm256_loadu_ps(kt + (size_t)i * ldk + p));
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
        }
        _mm256_storeu_ps(s + p, _mm256_set_m128(_mm256_cvtpd_ps(a1), _mm256_cvtpd_ps(a0)));
    }
    for (; p < n; p++) {
        double dot = 0.0;
        for (int i = 0; i < hd; i++) dot += (double)(q[i] * kt[(size_t)i * ldk + p]);
        s[p] = (float)dot;
    }
}

/* ggml_pv: each position's row fused into its lane's hd accumulators, 8 at a time. */
static AVX2 void ggml_pv_avx2(const float *pr, int p0, int n, const float *v, int hd, float *acc)
{
    for (int p = 0; p < n; p++) {
        float *a = acc + (size_t)((p0 + p) & 15) * hd;
        const float *vr = v + (size_t)p * hd;
        __m256 w = _mm256_set1_ps(pr[p]);
        int i = 0;
        for (; i + 8 <= hd; i += 8)
            _mm256_storeu_ps(a + i,
                             _mm256_fmadd_ps(w, _mm256_loadu_ps(vr + i), _mm256_loadu_ps(a + i)));
        for (; i < hd; i++) a[i] = fmaf(pr[p], vr[i], a[i]);
    }
}

AVX2_INLINE __m256 silu_mul8_avx2(__m256 g, __m256 u)
{
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* The tail goes through the same vector arithmetic under a mask, so an element's result does not
 * depend on where it sits in the array (batch invariance: n varies with the batch). Masked stores are
 * slow on AMD, hence only for the tail. */
static AVX2 void silu_mul_avx2(float *gate, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i,
                         silu_mul8_avx2(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 r = silu_mul8_avx2(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m));
        _mm256_maskstore_ps(gate + i, m, r);
    }
}

/* 8 unsigned bytes widened to floats. */
AVX2_INLINE __m256 u8_to_ps_avx2(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Q4_K rows: y = (d * sc) * q - dmin * m per 32-element group, the same two roundings as scalar. */
static AVX2 void dequant_q4_k_avx2(const struct quant_block_q4_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = f16_avx2(&b[i].d), dmin = f16_avx2(&b[i].dmin);
        const uint8_t *q = b[i].qs, *sc = b[i].scales;
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            if (j < 4) {
                s = sc[j] & 63;
                m = sc[j + 4] & 63;
            } else {
                s = (uint8_t)((sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4));
                m = (uint8_t)((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
            }
            __m256 dv = _mm256_set1_ps(d * s), mv = _mm256_set1_ps(dmin * m);
            const uint8_t *qq = q + (j / 2) * 32;
            uint8_t nib[32];
            __m256i raw = _mm256_loadu_si256((const __m256i *)qq);
            raw = j % 2 ? _mm256_srli_epi16(raw, 4) : raw;
            _mm256_storeu_si256((__m256i *)nib, _mm256_and_si256(raw, _mm256_set1_epi8(0x0f)));
            for (int l = 0; l < 32; l += 8)
                _mm256_storeu_ps(y + l,
                                 _mm256_sub_ps(_mm256_mul_ps(dv, u8_to_ps_avx2(nib + l)), mv));
            y += 32;
        }
    }
}

/* Q6_K rows: 6-bit quants from 4 low + 2 high bits, minus 32, times d * scale. */
static AVX2 void dequant_q6_k_avx2(const struct quant_block_q6_k *b, float *y, int64_t nb)
{
    const __m256i low = _mm256_set1_epi32(0x0f), three = _mm256_set1_epi32(3);
    const __m256i off = _mm256_set1_epi32(32);
    for (int64_t i = 0; i < nb; i++) {
        float d = f16_avx2(&b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int l = 0; l < 32; l += 8) {
                int is = l / 16;
                __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l + 32)));
                __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                __m256i q1 = _mm256_or_si256(_mm256_and_si256(a, low),
                                             _mm256_slli_epi32(_mm256_and_si256(h, three), 4));
                __m256i q2 = _mm256_or_si256(
                    _mm256_and_si256(c, low),
                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), three), 4));
                __m256i q3 = _mm256_or_si256(
                    _mm256_srli_epi32(a, 4),
                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), three), 4));
                __m256i q4 = _mm256_or_si256(
                    _mm256_srli_epi32(c, 4),
                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 6), three), 4));
                __m256i qs[4] = {q1, q2, q3, q4};
                for (int g = 0; g < 4; g++) {
                    __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(qs[g], off));
                    __m256 sv = _mm256_set1_ps(d * sc[is + 2 * g]);
                    _mm256_storeu_ps(y + l + 32 * g, _mm256_mul_ps(sv, f));
                }
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* Q8_0 blocks (an f16 scale, 32 quants) to floats d * q: exact products, as the scalar code. */
static AVX2 void dequant_q8_0_avx2(const void *src, float *dst, int64_t n_blocks)
{
    const char *blk = src;
    for (int64_t b = 0; b < n_blocks; b++, blk += 2 + QUANT_QK8_0, dst += QUANT_QK8_0) {
        __m256 d = _mm256_set1_ps(f16_avx2(blk));
        for (int j = 0; j < QUANT_QK8_0; j += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(blk + 2 + j));
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
            _mm256_storeu_ps(dst + j, _mm256_mul_ps(q, d));
        }
    }
}

static AVX2 void dequant_row_avx2(enum quant_type type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case QUANT_Q8_0: dequant_q8_0_avx2(src, dst, n / QUANT_QK8_0); break;
    case QUANT_F16: f16_to_f32_avx2(src, dst, n); break;
    case QUANT_BF16: {
        const uint16_t *h = src;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
        for (; i < n; i++) dst[i] = quant_bf16_to_f32(h[i]);
        break;
    }
    case QUANT_Q4_K: dequant_q4_k_avx2(src, dst, n / QUANT_QK_K); break;
    case QUANT_Q6_K: dequant_q6_k_avx2(src, dst, n / QUANT_QK_K); break;
    default: quant_dequantize_row(type, src, dst, (size_t)n); break;
    }
}

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    k->gemm_f32 = gemm_f32_avx2;
    k->gemm_f16 = gemm_f16_avx2;
    k->gemm_q[QUANT_Q8_0] = gemm_q8_0_avx2;
    k->gemm_q[QUANT_Q4_0] = gemm_q4_0_avx2;
    cpu_kernels_avx2_q(k);
    k->f16_to_f32 = f16_to_f32_avx2;
    k->f32_to_f16 = f32_to_f16_avx2;
    k->silu_mul = silu_mul_avx2;
    k->dequant_row = dequant_row_avx2;
    k->attn_scores = attn_scores_avx2;
    k->attn_scores_dot = attn_scores_dot_avx2;
    k->attn_softmax = attn_softmax_avx2;
    k->attn_pv = attn_pv_avx2;
    k->attn_probs_f16 = attn_probs_f16_avx2;
    k->ggml_scores = ggml_scores_avx2;
    k->ggml_exp_sum = ggml_exp_sum_avx2;
    k->ggml_pv = ggml_pv_avx2;
}

#else

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    (void)k; /* not an x86-64 build: the scalar kernels stay */
}

#endif
