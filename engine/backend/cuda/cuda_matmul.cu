/* Weight-reading kernels: the mat-vec that multiplies activations by a weight's blocks directly
 * (decode and, without cuBLAS, everything), the dequantizer that turns a chunk of weight rows into
 * f16/bf16 for cuBLAS (prefill), activations rounded to f16/bf16, and get_rows. Every weight is
 * read through cuda_quant.cuh's decoder, in groups of 8 consecutive elements. */
#include "engine/backend/cuda/cuda_quant.cuh"

/* Whether a row of `cols` elements of type T is read in groups of 8: every quantized format (its
 * blocks are multiples of 8), float formats when cols is a multiple of 8 (rows stay 16-byte
 * aligned for the vector loads). Other float rows are read element by element. */
template <int T> static __host__ __device__ bool grouped(int cols)
{
    return cuda_qtraits<T>::QK > 1 || cols % 8 == 0;
}

/* ---- mat-vec ------------------------------------------------------------------------------------- */

#define MV_WARPS 4 /* rows per block: one warp each */

/* y[t * ldy + r] = x[t * cols ..] . W[r] for t < nt <= CUDA_MATVEC_MAX_TOKENS: a warp per row, each
 * lane decodes groups lane, lane + 32, ... once and multiplies them with every token, then the
 * warp sums its lanes. */
template <int T>
__global__ void __launch_bounds__(MV_WARPS *CUDA_WARP)
    k_matvec(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
             const float *__restrict__ x, float *__restrict__ y, int ldy, int nt)
{
    const int lane = threadIdx.x % CUDA_WARP;
    const int r = blockIdx.x * MV_WARPS + threadIdx.x / CUDA_WARP;
    if (r >= rows) return;
    const uint8_t *row = w + (size_t)r * row_bytes;
    float acc[CUDA_MATVEC_MAX_TOKENS];
#pragma unroll
    for (int t = 0; t < CUDA_MATVEC_MAX_TOKENS; t++) acc[t] = 0.0f;
    if (grouped<T>(cols)) {
        const int ng = cols / 8;
        for (int g = lane; g < ng; g += CUDA_WARP) {
            float v[8];
            cuda_dq8<T>(row, g, v);
#pragma unroll
            for (int t = 0; t < CUDA_MATVEC_MAX_TOKENS; t++) {
                if (t >= nt) break;
                const float *xt = x + (size_t)t * cols + 8 * g;
#pragma unroll
                for (int i = 0; i < 8; i++) acc[t] = fmaf(v[i], xt[i], acc[t]);
            }
        }
    } else {
        if constexpr (cuda_qtraits<T>::QK == 1) {
            for (int i = lane; i < cols; i += CUDA_WARP) {
                const float v = cuda_dq1<T>(row, i);
                for (int t = 0; t < nt; t++) acc[t] = fmaf(v, x[(size_t)t * cols + i], acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < CUDA_MATVEC_MAX_TOKENS; t++) {
        if (t >= nt) break;
        const float s = cuda_warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * ldy + r] = s;
    }
}

extern "C" cudaError_t cuda_launch_matvec(cudaStream_t s, enum quant_type type, const void *w,
                                          size_t row_bytes, int rows, int cols, const float *x,
                                          float *y, int nt)
{
    if (nt <= 0 || rows <= 0) return cudaSuccess;
    bool ok = true;
    for (int t0 = 0; ok && t0 < nt; t0 += CUDA_MATVEC_MAX_TOKENS) {
        const int n = nt - t0 < CUDA_MATVEC_MAX_TOKENS ? nt - t0 : CUDA_MATVEC_MAX_TOKENS;
        const float *xt = x + (size_t)t0 * cols;
        float *yt = y + (size_t)t0 * rows;
        ok = cuda_type_dispatch(type, [&]<int T>() {
            k_matvec<T><<<cuda_blocks((size_t)rows, MV_WARPS), MV_WARPS * CUDA_WARP, 0, s>>>(
                (const uint8_t *)w, row_bytes, rows, cols, xt, yt, rows, n);
        });
        if (ok && cudaPeekAtLastError() != cudaSuccess) break;
    }
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

/* ---- dequantization for cuBLAS ------------------------------------------------------------------- */

template <bool BF16> static __device__ __forceinline__ uint16_t to_half_bits(float v)
{
    if constexpr (BF16) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    } else {
        return __half_as_ushort(__float2half_rn(v));
    }
}

/* dst (rows, cols) = W's rows dequantized and rounded to f16 or bf16: a thread per group of 8. */
template <int T, bool BF16>
__global__ void k_dequant_rows(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
                               uint16_t *__restrict__ dst)
{
    const int ng = cols / 8;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * ng) return;
    const int r = (int)(i / ng), g = (int)(i % ng);
    float v[8];
    cuda_dq8<T>(w + (size_t)r * row_bytes, g, v);
    uint16_t *o = dst + (size_t)r * cols + 8 * g;
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = to_half_bits<BF16>(v[k]);
}

extern "C" cudaError_t cuda_launch_dequant_rows(cudaStream_t s, enum quant_type type, const void *w,
                                                size_t row_bytes, int rows, int cols, void *dst,
                                                bool bf16)
{
    if (rows <= 0) return cudaSuccess;
    if (cols % 8 != 0) return cudaErrorInvalidValue; /* only quantized weights come here */
    const size_t n = (size_t)rows * (size_t)(cols / 8);
    const bool ok = cuda_type_dispatch(type, [&]<int T>() {
        if (bf16)
            k_dequant_rows<T, true><<<cuda_blocks(n, 256), 256, 0, s>>>(
                (const uint8_t *)w, row_bytes, rows, cols, (uint16_t *)dst);
        else
            k_dequant_rows<T, false><<<cuda_blocks(n, 256), 256, 0, s>>>(
                (const uint8_t *)w, row_bytes, rows, cols, (uint16_t *)dst);
    });
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

template <bool BF16>
__global__ void k_to_half(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_half_bits<BF16>(src[i]);
}

extern "C" cudaError_t cuda_launch_to_half(cudaStream_t s, const float *src, void *dst, size_t n,
                                           bool bf16)
{
    if (n == 0) return cudaSuccess;
    if (bf16)
        k_to_half<true><<<cuda_blocks(n, 256), 256, 0, s>>>(src, (uint16_t *)dst, n);
    else
        k_to_half<false><<<cuda_blocks(n, 256), 256, 0, s>>>(src, (uint16_t *)dst, n);
    return cudaGetLastError();
}

/* ---- get_rows ------------------------------------------------------------------------------------ */

/* out (n, cols) = rows ids of W as floats: blockIdx.y is the output row, threads its groups (or
 * elements, for float rows that are not grouped). ids were range-checked on the host. */
template <int T>
__global__ void k_get_rows(const uint8_t *__restrict__ w, size_t row_bytes, int cols,
                           const int32_t *__restrict__ ids, float *__restrict__ out)
{
    const int i = blockIdx.y;
    const uint8_t *row = w + (size_t)ids[i] * row_bytes;
    float *o = out + (size_t)i * cols;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (grouped<T>(cols)) {
        if (j >= cols / 8) return;
        float v[8];
        cuda_dq8<T>(row, j, v);
#pragma unroll
        for (int k = 0; k < 8; k++) o[8 * j + k] = v[k];
    } else if constexpr (cuda_qtraits<T>::QK == 1) {
        if (j < cols) o[j] = cuda_dq1<T>(row, j);
    }
}

extern "C" cudaError_t cuda_launch_get_rows(cudaStream_t s, enum quant_type type, const void *w,
                                            size_t row_bytes, int cols, const int32_t *ids, int n,
                                            float *out)
{
    bool ok = true;
    for (int i0 = 0; ok && i0 < n; i0 += 65535) { /* gridDim.y's limit */
        const int m = n - i0 < 65535 ? n - i0 : 65535;
        ok = cuda_type_dispatch(type, [&]<int T>() {
            const int per = grouped<T>(cols) ? cols / 8 : cols;
            dim3 grid(cuda_blocks((size_t)per, 128), (unsigned)m);
            k_get_rows<T><<<grid, 128, 0, s>>>((const uint8_t *)w, row_bytes, cols, ids + i0,
                                               out + (size_t)i0 * cols);
        });
    }
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

/* ---- the decoder on the host (tests) ------------------------------------------------------------- */

extern "C" int cuda_host_dequant_row(enum quant_type type, const void *row, float *dst, int n)
{
    const bool ok = cuda_type_dispatch(type, [&]<int T>() {
        const uint8_t *r = (const uint8_t *)row;
        if (grouped<T>(n)) {
            for (int g = 0; g < n / 8; g++) cuda_dq8<T>(r, g, dst + 8 * g);
        } else if constexpr (cuda_qtraits<T>::QK == 1) {
            for (int i = 0; i < n; i++) dst[i] = cuda_dq1<T>(r, i);
        }
    });
    return ok ? 0 : ERR_UNSUPPORTED;
}
