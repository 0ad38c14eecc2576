/* AVX-512 kernels (F/BW/DQ/VL + VNNI), installed over the AVX2 table when cpuid reports them.
 * Float GEMM tiles are 4 rows x 4 tokens of zmm FMA chains with masked tails. Integer dot products
 * use vpdpbusd on 256-bit vectors (one Q8_0 block): weights become unsigned (Q8_0: w + 128 by an xor;
 * Q4_0: the raw nibbles) and the offset times sum(x) enters as the dot product's initial lane 0. */
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

AVX512_INLINE float hsum256_512(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX512_INLINE float hsum512(__m512 v)
{
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return hsum256_512(s);
}

AVX512_INLINE float f16_512(const void *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return _cvtsh_ss(h);
}

#define W_PREFETCH 4096

/* 16 weights at w[idx] (F32, or F16 widened exactly), masked loads zero the lanes outside `m`. */
AVX512_INLINE __m512 wload_512(const void *w, size_t idx, const int f16)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + idx)));
    return _mm512_loadu_ps((const float *)w + idx);
}

AVX512_INLINE __m512 wload_mask_512(const void *w, size_t idx, __mmask16 m, const int f16)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + idx));
    return _mm512_maskz_loadu_ps(m, (const float *)w + idx);
}

/* R rows x T tokens; every output is one FMA chain over k in steps of 16 (the tail masked, zeros
 * beyond k) and the same horizontal sum, so results do not depend on R, T, the thread split, or
 * whether F16 weights were widened here or beforehand. */
AVX512_INLINE void wtile_512(const void *w, size_t ldw, const float *x, size_t ldx, int k, float *y,
                             size_t ldy, const int f16, const int R, const int T)
{
    __m512 acc[4][4];
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    }
    int i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 wv[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            wv[r] = wload_512(w, r * ldw + i, f16);
            /* decode: request the row well ahead of the FMA chain (one line per 64 bytes) */
            if (T == 1 && (!f16 || i % 32 == 0))
                _mm_prefetch((const char *)w + (r * ldw + i) * (f16 ? 2 : 4) + W_PREFETCH,
                             _MM_HINT_T0);
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * ldx + i);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (i < k) {
        __mmask16 m = (__mmask16)((1u << (k - i)) - 1);
        __m512 wv[4];
        UNROLL
        for (int r = 0; r < R; r++) wv[r] = wload_mask_512(w, r * ldw + i, m, f16);
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + i);
            UNROLL
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum512(acc[r][t]);
    }
}

#define TILE_BY_ROWS(fn, nr, T, ...)                                                               \
    do {                                                                                           \
        switch (nr) {                                                                              \
        case 4: fn(__VA_ARGS__, 4, T); break;                                                      \
        case 3: fn(__VA_ARGS__, 3, T); break;                                                      \
        case 2: fn(__VA_ARGS__, 2, T); break;                                                      \
        default: fn(__VA_ARGS__, 1, T); break;                                                     \
        }                                                                                          \
    } while (0)

AVX512_INLINE void wgemm_512(const void *w, size_t ldw, int nr, const float *x, size_t ldx, int nt,
                             int k, float *y, size_t ldy, const int f16)
{
    int t = 0;
    for (; t + 4 <= nt; t += 4)
        TILE_BY_ROWS(wtile_512, nr, 4, w, ldw, x + t * ldx, ldx, k, y + t * ldy, ldy, f16);
    for (; t < nt; t++)
        TILE_BY_ROWS(wtile_512, nr, 1, w, ldw, x + t * ldx, ldx, k, y + t * ldy, ldy, f16);
}

/* One dot product in the order of ggml's ggml_vec_dot_f32 on AVX-512 (4 accumulators over 64-element
 * steps, pairwise reduction, then a scalar tail). ggml uses it for F32 rows whose length is not a
 * multiple of 16, where llamafile's tinyBLAS (whose order wtile_512 already follows) declines. The
 * same order keeps F32 models within llama.cpp's rounding: a different summation order changes
 * results by an ulp, which an F16 KV cache can turn into a visible flip. */
AVX512_INLINE float dot_ggml_order_512(const void *w, size_t off, const float *x, int k,
                                       const int f16)
{
    __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int np = k & ~63;
    for (int i = 0; i < np; i += 64) {
        UNROLL
        for (int j = 0; j < 4; j++)
            sum[j] = _mm512_fmadd_ps(wload_512(w, off + i + 16 * j, f16),
                                     _mm512_loadu_ps(x + i + 16 * j), sum[j]);
    }
    sum[0] = _mm512_add_ps(sum[0], sum[2]);
    sum[1] = _mm512_add_ps(sum[1], sum[3]);
    sum[0] = _mm512_add_ps(sum[0], sum[1]);
    float s = hsum512(sum[0]);
    for (int i = np; i < k; i++)
        s += (f16 ? f16_512((const uint16_t *)w + off + i) : ((const float *)w)[off + i]) * x[i];
    return s;
}

/* F16 weights go through the F32 kernel after conversion in large batches, so both must use the
 * same order for odd row lengths too: a token must get the same result alone and in a batch. */
AVX512_INLINE void gemm_ggml_order_512(const void *w, size_t ldw, int nr, const float *x,
                                       size_t ldx, int nt, int k, float *y, size_t ldy,
                                       const int f16)
{
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            y[t * ldy + r] = dot_ggml_order_512(w, (size_t)r * ldw, x + t * ldx, k, f16);
}

static AVX512 void gemm_f32_512(const float *w, size_t ldw, int nr, const float *x, size_t ldx,
                                int nt, int k, float *y, size_t ldy)
{
    if (k % 16)
        gemm_ggml_order_512(w, ldw, nr, x, ldx, nt, k, y, ldy, 0);
    else
        wgemm_512(w, ldw, nr, x, ldx, nt, k, y, ldy, 0);
}

static AVX512 void gemm_f16_512(const uint16_t *w, size_t ldw, int nr, const float *x, size_t ldx,
                                int nt, int k, float *y, size_t ldy)
{
    if (k % 16)
        gemm_ggml_order_512(w, ldw, nr, x, ldx, nt, k, y, ldy, 1);
    else
        wgemm_512(w, ldw, nr, x, ldx, nt, k, y, ldy, 1);
}

/* At least this many bytes ahead, the pass that first reads a row tile prefetches the tiles after it:
 * the ROB covers only a few hundred bytes of a quantized row, far less than DRAM latency times
 * bandwidth, and the hardware prefetchers stop at 4 KiB pages (the weights are a file mapping).
 * Tuned on Zen 4. */
#define QINT_PREFETCH 4096

/* Integer tile for Q8_0 (q4 = 0) or Q4_0 (q4 = 1) weights, R rows x T tokens. With pf != 0 it also
 * sweeps the 4-row tile that starts pf bytes past w into L1 in address order, a 1/nb of it per
 * block step: one sequential stream (which the hardware prefetcher extends) instead of four
 * interleaved row streams, each line requested about once. */
AVX512_INLINE void qint_tile_512(const char *w, size_t rb, const struct cpu_act_q8 *xq, int t0,
                                 float *y, size_t ldy, size_t pf, const int q4, const int R,
                                 const int T)
{
    int nb = xq->nb;
    const size_t bsz = q4 ? 18 : 34;
    const int off = q4 ? 8 : 128;
    const __m256i flip = _mm256_set1_epi8((char)0x80), low = _mm256_set1_epi8(0x0f);
    __m256 acc[4][4];
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        __m256i u[4];
        __m256 dw[4];
        UNROLL
        for (int r = 0; r < R; r++) {
            const char *blk = w + r * rb + (size_t)b * bsz;
            if (q4) {
                __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
                u[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
            } else {
                u[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), flip);
            }
            dw[r] = _mm256_set1_ps(f16_512(blk));
        }
        if (pf) {
            const char *p = w + pf + (size_t)b * CPU_GEMM_ROWS * bsz;
            _mm_prefetch(p, _MM_HINT_T0);
            _mm_prefetch(p + 64, _MM_HINT_T0);
            if (!q4) _mm_prefetch(p + 128, _MM_HINT_T0);
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            size_t xb = (size_t)(t0 + t) * nb + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq->qs + xb * 32));
            __m256i bias = _mm256_castsi128_si256(_mm_cvtsi32_si128(-off * xq->sum[xb]));
            bias = _mm256_zextsi128_si256(_mm256_castsi256_si128(bias));
            __m256 dx = _mm256_set1_ps(xq->d[xb]);
            UNROLL
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_dpbusd_epi32(bias, u[r], xv);
                acc[r][t] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw[r], dx), acc[r][t]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum256_512(acc[r][t]);
    }
}

/* The first token tile streams the row tile from memory and prefetches a later one (whole tiles
 * ahead, at least QINT_PREFETCH bytes); the other token tiles find the rows in L1, so each weight
 * block is loaded from memory once per call. Prefetches past the matrix end are harmless hints. */
AVX512_INLINE void qint_gemm_512(const void *w, size_t row_bytes, int nr,
                                 const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy,
                                 const int q4)
{
    size_t tile = (size_t)CPU_GEMM_ROWS * row_bytes;
    size_t pf = (QINT_PREFETCH + tile - 1) / tile * tile;
    int t = 0;
    for (; t + 4 <= nt; t += 4, pf = 0)
        TILE_BY_ROWS(qint_tile_512, nr, 4, w, row_bytes, xq, t0 + t, y + t * ldy, ldy, pf, q4);
    for (; t < nt; t++, pf = 0)
        TILE_BY_ROWS(qint_tile_512, nr, 1, w, row_bytes, xq, t0 + t, y + t * ldy, ldy, pf, q4);
}

static AVX512 void gemm_q8_0_512(const void *w, size_t row_bytes, int nr,
                                 const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    qint_gemm_512(w, row_bytes, nr, xq, t0, nt, y, ldy, 0);
}

static AVX512 void gemm_q4_0_512(const void *w, size_t row_bytes, int nr,
                                 const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy)
{
    qint_gemm_512(w, row_bytes, nr, xq, t0, nt, y, ldy, 1);
}

/* T tokens of one packed group of 16 rows (cpu_qpack.c): per block the rows' quants are 8 vectors
 * (Q8_0; Q4_0: 4 vectors, low and high nibbles) whose 32-bit lane r belongs to row r, and every
 * token's activation block is broadcast against them 4 bytes at a time. The int32 block sums are
 * exact, so splitting a token's block into C independent chains (latency, at small T) does not
 * change them; the float work per (row, token, block) is the same at every T, so results do not
 * depend on the batch. The quant offset times the activation sum starts the first chain. */
AVX512_INLINE void qpack_tile_512(const uint8_t *g, int nb, const struct cpu_act_q8 *xq, int t0,
                                  float *y, size_t ldy, __mmask16 m, const uint8_t *pf,
                                  const int q4, const int T)
{
    const size_t bq = q4 ? 256 : 512, stride = bq + 2 * CPU_QPACK_ROWS;
    const uint16_t *sc = (const uint16_t *)g;
    g += (size_t)nb * 2 * CPU_QPACK_ROWS;
    const int shift = q4 ? 3 : 7;
    enum { C_MAX = 4 };
    const int C = T >= 4 ? 1 : (T == 2 ? 2 : 4);
    __m512 acc[16];
    UNROLL_ALL
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * bq;
        __m512i wv[8];
        if (q4) {
            const __m512i low = _mm512_set1_epi8(0x0f);
            UNROLL_ALL
            for (int k = 0; k < 4; k++) {
                __m512i v = _mm512_loadu_si512((const void *)(q + 64 * k));
                wv[k] = _mm512_and_si512(v, low);
                wv[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            }
        } else {
            UNROLL_ALL
            for (int k = 0; k < 8; k++) wv[k] = _mm512_loadu_si512((const void *)(q + 64 * k));
        }
        if (pf) {
            const uint8_t *p = pf + (size_t)b * stride;
            if (T >= 8) /* into L2 only: see QPACK_PREFETCH_MANY */
                for (size_t o = 0; o < stride; o += 64)
                    _mm_prefetch((const char *)p + o, _MM_HINT_T1);
            else
                for (size_t o = 0; o < stride; o += 64)
                    _mm_prefetch((const char *)p + o, _MM_HINT_T0);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + (size_t)b * 16)));
        UNROLL_ALL
        for (int t = 0; t < T; t++) {
            size_t xb = (size_t)(t0 + t) * nb + b;
            const int8_t *xs = xq->qs + xb * 32;
            __m512i s[C_MAX];
            s[0] = _mm512_set1_epi32(-(xq->sum[xb] * (1 << shift)));
            UNROLL_ALL
            for (int c = 1; c < C; c++) s[c] = _mm512_setzero_si512();
            UNROLL_ALL
            for (int k = 0; k < 8; k++) s[k % C] = dpbusd_bcast_512(s[k % C], wv[k], xs + 4 * k);
            UNROLL_ALL
            for (int c = 1; c < C; c++) s[0] = _mm512_add_epi32(s[0], s[c]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(xq->d[xb])), acc[t]);
        }
    }
    UNROLL_ALL
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy, m, acc[t]);
}

/* Token tiles of 16, 8, 4, 2, 1 over one group; only the first reads the group from memory (and,
 * with pf, prefetches ahead of it), the others find it in L1/L2. */
AVX512_INLINE void qpack_group_512(const uint8_t *g, __mmask16 m, const struct cpu_act_q8 *xq,
                                   int t0, int nt, float *y, size_t ldy, const uint8_t *pf,
                                   const int q4)
{
    int nb = xq->nb, t = 0;
    for (; t + 16 <= nt; t += 16, pf = NULL)
        qpack_tile_512(g, nb, xq, t0 + t, y + (size_t)t * ldy, ldy, m, pf, q4, 16);
    if (t + 8 <= nt) {
        qpack_tile_512(g, nb, xq, t0 + t, y + (size_t)t * ldy, ldy, m, pf, q4, 8);
        t += 8;
        pf = NULL;
    }
    if (t + 4 <= nt) {
        qpack_tile_512(g, nb, xq, t0 + t, y + (size_t)t * ldy, ldy, m, pf, q4, 4);
        t += 4;
        pf = NULL;
    }
    if (t + 2 <= nt) {
        qpack_tile_512(g, nb, xq, t0 + t, y + (size_t)t * ldy, ldy, m, pf, q4, 2);
        t += 2;
        pf = NULL;
    }
    if (t < nt) qpack_tile_512(g, nb, xq, t0 + t, y + (size_t)t * ldy, ldy, m, pf, q4, 1);
}

AVX512_INLINE void qpack_gemm_512(const void *groups, size_t gb, int nr,
                                  const struct cpu_act_q8 *xq, int t0, int nt, float *y, size_t ldy,
                                  int warm, const int q4)
{
    const uint8_t *g = groups;
    size_t dist = nt < 8 ? QPACK_PREFETCH_FEW : QPACK_PREFETCH_MANY;
    for (int r = 0; r < nr; r += CPU_QPACK_ROWS, g += gb, y += CPU_QPACK_ROWS) {
        int n = nr - r < CPU_QPACK_ROWS ? nr - r : CPU_QPACK_ROWS;
        qpack_group_512(g, (__mmask16)((1u << n) - 1u), xq, t0, nt, y, ldy, warm ? g + dist : NULL,
                        q4);
    }
}

static AVX512 void gemm_q8_0_packed_512(const void *groups, size_t group_bytes, int nr,
                                        const struct cpu_act_q8 *xq, int t0, int nt, float *y,
                                        size_t ldy, int warm)
{
    qpack_gemm_512(groups, group_bytes, nr, xq, t0, nt, y, ldy, warm, 0);
}

static AVX512 void gemm_q4_0_packed_512(const void *groups, size_t group_bytes, int nr,
                                        const struct cpu_act_q8 *xq, int t0, int nt, float *y,
                                        size_t ldy, int warm)
{
    qpack_gemm_512(groups, group_bytes, nr, xq, t0, nt, y, ldy, warm, 1);
}

static AVX512 void f16_to_f32_512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

/* vcvtps2ph rounds to nearest even like quant_f32_to_f16 (NaN payloads may differ) */
static AVX512 void f32_to_f16_512(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

/* exp(x) for softmax inputs (x <= 0): Cephes' reduction and polynomial, 2^n applied with scalef so
 * very negative inputs become exactly 0. */
AVX512_INLINE __m512 exp_512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* s[p] (16 query rows) = qt^T k[p]: four positions at a time so four FMA chains are in flight. */
/* Lane partial sums of J positions' scores (rows in lanes): out[j] += sum over chunks c, in order,
 * of qt[16c + lane] * k_j[16c + lane], fused, where a lane past hd adds the zero that the dot kernel's
 * masked loads give it. Each qt vector is loaded once for the J positions. */
AVX512_INLINE void attn_lane_512(const float *qt, int hd, const float *k, size_t ldk, int lane,
                                 __m512 *out, const int J)
{
    __m512 a[4];
    UNROLL_ALL
    for (int j = 0; j < J; j++) a[j] = _mm512_setzero_ps();
    const int chunks_end = (hd + 15) / 16 * 16; /* the dot kernel's chunks, the last one masked */
    for (int i = lane; i < chunks_end; i += 16) {
        if (i >= hd) {
            UNROLL_ALL
            for (int j = 0; j < J; j++) a[j] = _mm512_add_ps(a[j], _mm512_setzero_ps());
            break;
        }
        __m512 q = _mm512_loadu_ps(qt + (size_t)i * 16);
        UNROLL_ALL
        for (int j = 0; j < J; j++) a[j] = _mm512_fmadd_ps(q, _mm512_set1_ps(k[j * ldk + i]), a[j]);
    }
    UNROLL_ALL
    for (int j = 0; j < J; j++) out[j] = a[j];
}

/* Quarter l (< 4) of hsum512's tree for J positions: (lane l + lane l+8) + (lane l+4 + lane l+12). */
AVX512_INLINE void attn_quarter_512(const float *qt, int hd, const float *k, size_t ldk, int l,
                                    __m512 *q, const int J)
{
    __m512 x[4], y[4];
    attn_lane_512(qt, hd, k, ldk, l, x, J);
    attn_lane_512(qt, hd, k, ldk, l + 8, y, J);
    UNROLL_ALL
    for (int j = 0; j < J; j++) x[j] = _mm512_add_ps(x[j], y[j]);
    __m512 z[4];
    attn_lane_512(qt, hd, k, ldk, l + 4, z, J);
    attn_lane_512(qt, hd, k, ldk, l + 12, y, J);
    UNROLL_ALL
    for (int j = 0; j < J; j++) q[j] = _mm512_add_ps(x[j], _mm512_add_ps(z[j], y[j]));
}

/* J positions' scores for 16 rows: hsum512's tree ((q0 + q2) + (q1 + q3)) over the lane partials. */
AVX512_INLINE void attn_scores_tile_512(const float *qt, int hd, const float *k, size_t ldk,
                                        float *s, const int J)
{
    __m512 q0[4], q1[4], r0[4];
    attn_quarter_512(qt, hd, k, ldk, 0, q0, J);
    attn_quarter_512(qt, hd, k, ldk, 2, q1, J);
    UNROLL_ALL
    for (int j = 0; j < J; j++) r0[j] = _mm512_add_ps(q0[j], q1[j]);
    attn_quarter_512(qt, hd, k, ldk, 1, q0, J);
    attn_quarter_512(qt, hd, k, ldk, 3, q1, J);
    UNROLL_ALL
    for (int j = 0; j < J; j++)
        _mm512_storeu_ps(s + j * 16, _mm512_add_ps(r0[j], _mm512_add_ps(q0[j], q1[j])));
}

/* Scores for 16 rows (queries transposed: rows in lanes) in exactly the arithmetic of
 * attn_scores_dot_any_512 for each row, so a token scores the same whichever kernel its item takes
 * (batch invariance: a prefill chunk's last tokens, a preempted sequence's recompute): lane l of the
 * dot kernel's accumulator becomes vector l here, then hsum512's halving tree runs across those
 * vectors. Four positions at a time share the query loads. */
static AVX512 void attn_scores_512(const float *qt, int hd, const float *k, size_t ldk, int np,
                                   float *s)
{
    int p = 0;
    for (; p + 4 <= np; p += 4) attn_scores_tile_512(qt, hd, k + p * ldk, ldk, s + p * 16, 4);
    for (; p < np; p++) attn_scores_tile_512(qt, hd, k + p * ldk, ldk, s + p * 16, 1);
}

/* Few-row scores with F32 or (half) F16 K rows, widened in registers: one masked FMA chain per
 * (row, position) and a horizontal sum. Each K chunk is loaded once for all rows, and the operations
 * per row are the same either way, so widening an F16 cache here gives exactly what widening it
 * first gave (decode reads each K row once: a separate widening pass cost as much as the dots). */
/* Element types of K/V rows the attention kernels read. */
enum { KV_F32, KV_F16, KV_Q8_0 };

/* Elements i..i+15 (lanes outside m zero) of row p of K or V as floats: F32 rows ld elements apart,
 * F16 rows widened, Q8_0 rows (ld bytes apart, ggml blocks of an f16 scale and 32 quants) at their
 * exact values d * q (at most 18 significant bits: no rounding), as the conversion passes give. */
AVX512_INLINE __m512 kv_chunk_512(const void *kv, size_t p, size_t ld, int i, __mmask16 m,
                                  const int kind)
{
    if (kind == KV_F32) return _mm512_maskz_loadu_ps(m, (const float *)kv + p * ld + i);
    if (kind == KV_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)kv + p * ld + i));
    if (!m) return _mm512_setzero_ps(); /* past the row (P @ V's column tail): no scale to read */
    const char *blk = (const char *)kv + p * ld + (size_t)(i / 32) * (2 + 32);
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, blk + 2 + i % 32)));
    return _mm512_mul_ps(q, _mm512_set1_ps(f16_512(blk)));
}

AVX512_INLINE void attn_scores_dot_any_512(const float *q, int nq, int hd, const void *k,
                                           size_t ldk, int np, float *s, const int kind)
{
    for (int p = 0; p < np; p++) {
        __m512 acc[ATTN_DOT_MAX_ROWS];
        for (int r = 0; r < nq; r++) acc[r] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 16) {
            __mmask16 m = hd - i >= 16 ? 0xffff : (__mmask16)((1u << (hd - i)) - 1);
            __m512 kv = kv_chunk_512(k, (size_t)p, ldk, i, m, kind);
            for (int r = 0; r < nq; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + r * hd + i), kv, acc[r]);
        }
        for (int r = 0; r < nq; r++) s[p * 16 + r] = hsum512(acc[r]);
    }
}

static AVX512 void attn_scores_dot_512(const float *q, int nq, int hd, const float *k, size_t ldk,
                                       int np, float *s)
{
    attn_scores_dot_any_512(q, nq, hd, k, ldk, np, s, KV_F32);
}

static AVX512 void attn_scores_dot_f16_512(const float *q, int nq, int hd, const uint16_t *k,
                                           size_t ldk, int np, float *s)
{
    attn_scores_dot_any_512(q, nq, hd, k, ldk, np, s, KV_F16);
}

static AVX512 void attn_scores_dot_q8_512(const float *q, int nq, int hd, const void *k, size_t ldk,
                                          int np, float *s)
{
    attn_scores_dot_any_512(q, nq, hd, k, ldk, np, s, KV_Q8_0);
}

/* Sixteen vectors' horizontal sums as one vector, lane r = hsum512(v[r]) bit for bit: hsum512's
 * halving tree (halves, quarters, pairs, then the last pair) run across the vectors with shuffles,
 * 46 operations instead of 16 separate reductions and scalar stores. */
AVX512_INLINE __m512 hsum16_512(const __m512 *v)
{
    __m512 c[8], f[4];
    UNROLL_ALL
    for (int i = 0; i < 8; i++) /* halves: lanes 0-7 of c[i] from v[2i], 8-15 from v[2i+1] */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    UNROLL_ALL
    for (int i = 0; i < 4; i++) /* quarters: 128-bit chunk j of f[i] from v[4i + j] */
        f[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* pairs (lane 0 + lane 2, lane 1 + lane 3), then the last pair */
    __m512 i0 = _mm512_add_ps(_mm512_shuffle_ps(f[0], f[1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(f[0], f[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 i1 = _mm512_add_ps(_mm512_shuffle_ps(f[2], f[3], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(f[2], f[3], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(i0, i1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(i0, i1, _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4c + j now holds vector 4j + c */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, r);
}

/* Decode scores of nh <= 16 rows, one per KV head, whose K rows (F16 or Q8_0) lie head_stride bytes
 * apart: per position every row's dot product exactly as attn_scores_dot_any_512 computes it (one
 * masked FMA chain, then hsum512's tree), the sixteen reductions done together by hsum16_512 and
 * stored as one vector (lanes from nh on get zeros). */
AVX512_INLINE void attn_scores_heads_any_512(const float *q, int nh, int hd, const char *k,
                                             size_t head_stride, size_t ldk, int np, float *s,
                                             const int kind)
{
    for (int p = 0; p < np; p++) {
        __m512 acc[16];
        UNROLL_ALL
        for (int r = 0; r < 16; r++) {
            acc[r] = _mm512_setzero_ps();
            if (r >= nh) continue;
            const char *kr = k + r * head_stride + p * ldk;
            for (int i = 0; i < hd; i += 16) {
                __mmask16 m = hd - i >= 16 ? 0xffff : (__mmask16)((1u << (hd - i)) - 1);
                __m512 kv = kv_chunk_512(kr, 0, 0, i, m, kind);
                acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + r * hd + i), kv, acc[r]);
            }
        }
        _mm512_storeu_ps(s + p * 16, hsum16_512(acc));
    }
}

/* The same scores for a head width HD known at compile time (a multiple of 16, at most 128), head by
 * head: the head's query stays in registers while up to sixteen positions' FMA chains run side by
 * side (each chain exactly as above: chunks in order from zero), then one hsum16_512 gives the
 * sixteen positions' sums (lane p = hsum512 of position p's chain, so the same bits) and a scatter
 * puts them in the head's lane of each position's row. Unlike the position-by-position form it
 * reads each head's rows in address order, reloads no query and computes no masks: 16-way decode
 * attention at depth 192 took 12% less time with an F16 cache (where it now reads K/V at about the
 * VM's DRAM bandwidth) and 28% less with Q8_0 (engine/BENCHMARKS.md). */
AVX512_INLINE void attn_scores_heads_pos_512(const float *q, int nh, const char *k,
                                             size_t head_stride, size_t ldk, int np, float *s,
                                             const int kind, const int HD)
{
    enum { C_MAX = 8 };
    const int C = HD / 16;
    for (int p = 0; p < np; p++)
        _mm512_storeu_ps(s + p * 16, _mm512_setzero_ps()); /* lanes >= nh */
    const __m512i row_stride = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176,
                                                 192, 208, 224, 240); /* position p's row: 16 p */
    for (int r = 0; r < nh; r++) {
        __m512 qv[C_MAX];
        UNROLL_ALL
        for (int c = 0; c < C; c++) qv[c] = _mm512_loadu_ps(q + r * HD + 16 * c);
        const char *kr = k + r * head_stride;
        for (int p0 = 0; p0 < np; p0 += 16) {
            int n = np - p0 < 16 ? np - p0 : 16;
            __m512 acc[16];
            UNROLL_ALL
            for (int i = 0; i < 16; i++) {
                acc[i] = _mm512_setzero_ps();
                if (i >= n) continue;
                const char *row = kr + (size_t)(p0 + i) * ldk; /* ldk in bytes */
                UNROLL_ALL
                for (int c = 0; c < C; c++)
                    acc[i] = _mm512_fmadd_ps(qv[c], kv_chunk_512(row, 0, 0, 16 * c, 0xffff, kind),
                                             acc[i]);
            }
            _mm512_mask_i32scatter_ps(s + (size_t)p0 * 16 + r, (__mmask16)((1u << n) - 1u),
                                      row_stride, hsum16_512(acc), 4);
        }
    }
}

static AVX512 void attn_scores_heads_f16_512(const float *q, int nh, int hd, const uint16_t *k,
                                             size_t head_stride, size_t ldk, int np, float *s)
{
    const char *kb = (const char *)k;
    if (hd == 64)
        attn_scores_heads_pos_512(q, nh, kb, head_stride * 2, ldk * 2, np, s, KV_F16, 64);
    else if (hd == 128)
        attn_scores_heads_pos_512(q, nh, kb, head_stride * 2, ldk * 2, np, s, KV_F16, 128);
    else
        attn_scores_heads_any_512(q, nh, hd, kb, head_stride * 2, ldk * 2, np, s, KV_F16);
}

static AVX512 void attn_scores_heads_q8_512(const float *q, int nh, int hd, const void *k,
                                            size_t head_stride, size_t ldk, int np, float *s)
{
    if (hd == 64)
        attn_scores_heads_pos_512(q, nh, k, head_stride, ldk, np, s, KV_Q8_0, 64);
    else if (hd == 128)
        attn_scores_heads_pos_512(q, nh, k, head_stride, ldk, np, s, KV_Q8_0, 128);
    else
        attn_scores_heads_any_512(q, nh, hd, k, head_stride, ldk, np, s, KV_Q8_0);
}

static AVX512 void attn_softmax_512(float *s, int np, const int32_t *lim, float *inv)
{
    __m512i lv = _mm512_loadu_si512(lim);
    __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    for (int p = 0; p < np; p++) {
        __mmask16 m = _mm512_cmpgt_epi32_mask(lv, _mm512_set1_epi32(p));
        mx = _mm512_mask_max_ps(mx, m, mx, _mm512_loadu_ps(s + p * 16));
    }
    for (int p = 0; p < np; p++) {
        __mmask16 m = _mm512_cmpgt_epi32_mask(lv, _mm512_set1_epi32(p));
        __m512 e = _mm512_maskz_mov_ps(m, exp_512(_mm512_sub_ps(_mm512_loadu_ps(s + p * 16), mx)));
        _mm512_storeu_ps(s + p * 16, e);
        sum = _mm512_add_ps(sum, e);
    }
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
}

/* o[r] += sum_p s[p][r] v[p] over 64 columns at a time (masked tail), two rows per pass so every V
 * load feeds eight FMA chains; V rows F32, F16 or Q8_0 (kv_chunk_512), converted in registers:
 * identical results either way. */
AVX512_INLINE void attn_pv_any_512(const float *s, int nq, const void *v, size_t ldv, int np,
                                   float *o, int hd, const int kind)
{
    for (int c = 0; c < hd; c += 64) {
        __mmask16 m[4];
        UNROLL
        for (int j = 0; j < 4; j++) {
            int left = hd - c - 16 * j;
            m[j] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        }
        int r = 0;
        for (; r < nq; r += 2) {
            int two = r + 1 < nq;
            float *o0 = o + r * hd + c, *o1 = o0 + hd;
            __m512 a[4], b[4];
            UNROLL
            for (int j = 0; j < 4; j++) {
                a[j] = _mm512_maskz_loadu_ps(m[j], o0 + 16 * j);
                b[j] = two ? _mm512_maskz_loadu_ps(m[j], o1 + 16 * j) : _mm512_setzero_ps();
            }
            for (int p = 0; p < np; p++) {
                __m512 w0 = _mm512_set1_ps(s[p * 16 + r]);
                __m512 w1 = _mm512_set1_ps(two ? s[p * 16 + r + 1] : 0.0f);
                UNROLL
                for (int j = 0; j < 4; j++) {
                    __m512 vv = kv_chunk_512(v, (size_t)p, ldv, c + 16 * j, m[j], kind);
                    a[j] = _mm512_fmadd_ps(w0, vv, a[j]);
                    if (two) b[j] = _mm512_fmadd_ps(w1, vv, b[j]); /* a lone last row: skip */
                }
            }
            UNROLL
            for (int j = 0; j < 4; j++) {
                _mm512_mask_storeu_ps(o0 + 16 * j, m[j], a[j]);
                if (two) _mm512_mask_storeu_ps(o1 + 16 * j, m[j], b[j]);
            }
        }
    }
}

static AVX512 void attn_pv_512(const float *s, int nq, const float *v, size_t ldv, int np, float *o,
                               int hd)
{
    attn_pv_any_512(s, nq, v, ldv, np, o, hd, KV_F32);
}

static AVX512 void attn_pv_f16_512(const float *s, int nq, const uint16_t *v, size_t ldv, int np,
                                   float *o, int hd)
{
    attn_pv_any_512(s, nq, v, ldv, np, o, hd, KV_F16);
}

static AVX512 void attn_pv_q8_512(const float *s, int nq, const void *v, size_t ldv, int np,
                                  float *o, int hd)
{
    attn_pv_any_512(s, nq, v, ldv, np, o, hd, KV_Q8_0);
}

/* cpu_quant_q8_0_row's arithmetic: 127 / amax, halves to even (the NaN lanes' quants become 0). */
static AVX512 void quantize_q8_0_512(const float *x, int k, int8_t *qs, float *d, int32_t *sum,
                                     float *s)
{
    for (int b = 0; b < k / 32; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        float db = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[b] = _cvtsh_ss(_cvtss_sh(db, _MM_FROUND_TO_NEAREST_INT));
        __m512 lim = _mm512_set1_ps(127.0f), v0, v1;
/* halves to even; a macro, since clang wants the immediate as a constant expression */
#define Q8_EVEN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
        v0 = _mm512_roundscale_ps(_mm512_mul_ps(x0, _mm512_set1_ps(id)), Q8_EVEN);
        v1 = _mm512_roundscale_ps(_mm512_mul_ps(x1, _mm512_set1_ps(id)), Q8_EVEN);
#undef Q8_EVEN
        /* NaN/inf lanes become 0 as in the scalar code */
        __mmask16 ok0 = _mm512_cmp_ps_mask(_mm512_abs_ps(v0), lim, _CMP_LE_OQ);
        __mmask16 ok1 = _mm512_cmp_ps_mask(_mm512_abs_ps(v1), lim, _CMP_LE_OQ);
        __m512i q0 = _mm512_maskz_cvttps_epi32(ok0, v0), q1 = _mm512_maskz_cvttps_epi32(ok1, v1);
        _mm_storeu_si128((__m128i *)(qs + b * 32), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        s[b] = _cvtsh_ss(_cvtss_sh(db * (float)sum[b], _MM_FROUND_TO_NEAREST_INT));
    }
}

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    k->gemm_f32 = gemm_f32_512;
    k->gemm_f16 = gemm_f16_512;
    k->gemm_q[QUANT_Q8_0] = gemm_q8_0_512;
    k->gemm_q[QUANT_Q4_0] = gemm_q4_0_512;
    k->gemm_qpack[QUANT_Q8_0] = gemm_q8_0_packed_512;
    k->gemm_qpack[QUANT_Q4_0] = gemm_q4_0_packed_512;
    cpu_kernels_avx512_q(k);
    k->f16_to_f32 = f16_to_f32_512;
    k->f32_to_f16 = f32_to_f16_512;
    k->quantize_q8_0 = quantize_q8_0_512;
    k->attn_scores = attn_scores_512;
    k->attn_scores_dot = attn_scores_dot_512;
    k->attn_softmax = attn_softmax_512;
    k->attn_pv = attn_pv_512;
    k->attn_scores_dot_f16 = attn_scores_dot_f16_512;
    k->attn_pv_f16 = attn_pv_f16_512;
    k->attn_scores_heads_f16 = attn_scores_heads_f16_512;
    k->attn_scores_heads_q8 = attn_scores_heads_q8_512;
    k->attn_scores_dot_q8 = attn_scores_dot_q8_512;
    k->attn_pv_q8 = attn_pv_q8_512;
}

#else

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    (void)k; /* not an x86-64 build: the scalar kernels stay */
}

#endif
