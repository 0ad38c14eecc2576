/* AVX2 + FMA + F16C kernels. Compiled with per-function target attributes (no global -m flags) and
 * installed by cpu_kernels_init only when cpuid reports the features. Integer dot products use
 * maddubs: Q8_0 weights with the sign trick (|w| times sign(w)*x fits int16 pairs), Q4_0 weights as
 * unsigned nibbles with the -8 offset folded into the per-block sum of the activation quants. */
#include "engine/backend/cpu/cpu_backend.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define AVX2        __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

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
AVX2_INLINE void f32_tile_avx2(const float *w, size_t ldw, const float *x, size_t ldx, int k,
                               float *y, size_t ldy, const int R, const int T)
{
    __m256 acc[4][2];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 wv[4];
        for (int r = 0; r < R; r++) wv[r] = _mm256_loadu_ps(w + r * ldw + i);
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum_avx2(acc[r][t]);
            for (int j = i; j < k; j++) s += w[r * ldw + j] * x[t * ldx + j];
            y[t * ldy + r] = s;
        }
}

static AVX2 void gemm_f32_avx2(const float *w, size_t ldw, int nr, const float *x, size_t ldx,
                               int nt, int k, float *y, size_t ldy)
{
    int t = 0;
    for (; t + 2 <= nt; t += 2) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 4, 2); break;
        case 3: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 3, 2); break;
        case 2: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 2, 2); break;
        default: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 1, 2); break;
        }
    }
    if (t < nt) {
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        switch (nr) {
        case 4: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 4, 1); break;
        case 3: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 3, 1); break;
        case 2: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 2, 1); break;
        default: f32_tile_avx2(w, ldw, xt, ldx, k, yt, ldy, 1, 1); break;
        }
    }
}

/* Q8_0 x Q8_0, R rows x 1 token: per block, maddubs(|w|, sign(x, w)) summed to int32 lanes, scaled
 * by d_w * d_x into a float accumulator per output. */
AVX2_INLINE void q8_0_tile_avx2(const char *w, size_t rb, const struct cpu_act_q8 *xq, int tok,
                                float *y, const int R)
{
    int nb = xq->nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const int8_t *xs = xq->qs + (size_t)tok * nb * 32;
    const float *xd = xq->d + (size_t)tok * nb;
    for (int b = 0; b < nb; b++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xs + b * 32));
        for (int r = 0; r < R; r++) {
            const char *blk = w + r * rb + (size_t)b * 34;
            __m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
            __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(f16_avx2(blk) * xd[b]), acc[r]);
        }
    }
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
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i u[4];
        float dw[4];
        for (int r = 0; r < R; r++) {
            const char *blk = w + r * rb + (size_t)b * 18;
            __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
            u[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
            dw[r] = f16_avx2(blk);
        }
        for (int t = 0; t < T; t++) {
            size_t xb = (size_t)(t0 + t) * nb + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq->qs + xb * 32));
            __m256i bias = _mm256_setr_epi32(-8 * xq->sum[xb], 0, 0, 0, 0, 0, 0, 0);
            float dx = xq->d[xb];
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], xv), ones);
                __m256 pf = _mm256_cvtepi32_ps(_mm256_add_epi32(p, bias));
                acc[r][t] = _mm256_fmadd_ps(pf, _mm256_set1_ps(dw[r] * dx), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum_avx2(acc[r][t]);
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

static AVX2 float dot_f32_avx2(const float *q, const float *k, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
    float s = hsum_avx2(acc);
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}

static AVX2 float dot_f16_avx2(const float *q, const uint16_t *k, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    float s = hsum_avx2(acc);
    for (; i < n; i++) s += q[i] * _cvtsh_ss(k[i]);
    return s;
}

static AVX2 void axpy_f32_avx2(float a, const float *v, float *y, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * v[i];
}

static AVX2 void axpy_f16_avx2(float a, const uint16_t *v, float *y, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, vv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * _cvtsh_ss(v[i]);
}

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    k->gemm_f32 = gemm_f32_avx2;
    k->gemm_q8_0 = gemm_q8_0_avx2;
    k->gemm_q4_0 = gemm_q4_0_avx2;
    k->f16_to_f32 = f16_to_f32_avx2;
    k->dot_f32 = dot_f32_avx2;
    k->dot_f16 = dot_f16_avx2;
    k->axpy_f32 = axpy_f32_avx2;
    k->axpy_f16 = axpy_f16_avx2;
}

#else

void cpu_kernels_avx2(struct cpu_kernels *k)
{
    (void)k; /* not an x86-64 build: the scalar kernels stay */
}

#endif
