/* Elementwise and row kernels: add, biases, scale, soft-capping, SiLU and GeGLU gates, RMSNorm,
 * rotary embedding, gather_rows and the mixture-of-experts routing ops. Each follows the CPU
 * backend's formula (cpu_ops.c) in float; libm-style functions (expf, tanhf, cosf) are CUDA's,
 * which differ from glibc's in the last bit or two. */
#include "engine/backend/cuda/cuda_common.cuh"

#define EW_THREADS 256

/* A grid-stride loop over n elements, so a launch of at most 65535 * 16 blocks covers any n. */
#define EW_FOR(i, n)                                                                               \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

static unsigned ew_blocks(size_t n)
{
    const unsigned b = cuda_blocks(n, EW_THREADS);
    return b < 65535u * 16u ? b : 65535u * 16u;
}

__global__ void k_add(float *y, const float *x, size_t n)
{
    EW_FOR(i, n) y[i] += x[i];
}

__global__ void k_add_bias(float *y, const float *bias, size_t n, int dim)
{
    EW_FOR(i, n) y[i] += bias[i % dim];
}

__global__ void k_scale(float *x, size_t n, float v)
{
    EW_FOR(i, n) x[i] *= v;
}

__global__ void k_softcap(float *x, size_t n, float cap)
{
    const float inv = 1.0f / cap;
    EW_FOR(i, n) x[i] = tanhf(x[i] * inv) * cap;
}

__global__ void k_silu_mul(float *gate, const float *up, size_t n)
{
    EW_FOR(i, n)
    {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* ggml's GELU_FP16 path as cpu_ops.c's gelu_mul_range: the table at gate rounded to f16. */
__global__ void k_gelu_mul(float *gate, const float *up, size_t n, const uint16_t *table)
{
    EW_FOR(i, n)
    {
        const float x = gate[i];
        const float g = cuda_h2f(table[__half_as_ushort(__float2half_rn(x))]);
        gate[i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * up[i] : g * up[i];
    }
}

extern "C" cudaError_t cuda_launch_add(cudaStream_t s, float *y, const float *x, size_t n)
{
    if (n) k_add<<<ew_blocks(n), EW_THREADS, 0, s>>>(y, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_add_bias(cudaStream_t s, float *y, const float *bias,
                                            int n_tokens, int dim)
{
    const size_t n = (size_t)n_tokens * (size_t)dim;
    if (n) k_add_bias<<<ew_blocks(n), EW_THREADS, 0, s>>>(y, bias, n, dim);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_scale(cudaStream_t s, float *x, size_t n, float v)
{
    if (n) k_scale<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, n, v);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_softcap(cudaStream_t s, float *x, size_t n, float cap)
{
    if (n) k_softcap<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, n, cap);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_silu_mul(cudaStream_t s, float *gate, const float *up, size_t n)
{
    if (n) k_silu_mul<<<ew_blocks(n), EW_THREADS, 0, s>>>(gate, up, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_launch_gelu_mul(cudaStream_t s, float *gate, const float *up, size_t n,
                                            const uint16_t *table)
{
    if (n) k_gelu_mul<<<ew_blocks(n), EW_THREADS, 0, s>>>(gate, up, n, table);
    return cudaGetLastError();
}

/* ---- RMSNorm ------------------------------------------------------------------------------------- */

#define NORM_THREADS 256

/* One block per row: the float squares summed in double (as ggml, in a different order), then
 * y = x * (1 / sqrt(mean + eps)) * g. y may equal x: every x of the row is read before any y is
 * written (the reduction's barrier separates them). */
__global__ void __launch_bounds__(NORM_THREADS)
    k_rmsnorm(const float *x, const float *__restrict__ g, float *y, int dim, float eps)
{
    __shared__ double part[NORM_THREADS / CUDA_WARP];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) {
        const float v = xr[i];
        ss += (double)(v * v);
    }
    for (int o = CUDA_WARP / 2; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % CUDA_WARP == 0) part[threadIdx.x / CUDA_WARP] = ss;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < NORM_THREADS / CUDA_WARP; w++) total += part[w];
    const float scale = 1.0f / sqrtf((float)(total / dim) + eps);
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) yr[i] = xr[i] * scale * g[i];
}

extern "C" cudaError_t cuda_launch_rmsnorm(cudaStream_t s, const float *x, const float *gain,
                                           float *y, int n_rows, int dim, float eps)
{
    if (n_rows > 0) k_rmsnorm<<<(unsigned)n_rows, NORM_THREADS, 0, s>>>(x, gain, y, dim, eps);
    return cudaGetLastError();
}

/* ---- RoPE ---------------------------------------------------------------------------------------- */

/* One thread per (token, head, pair): the angle as cpu_ops.c's rope_angles computes it (theta as
 * the running float product of theta_scale, so the same roundings), then the pair rotated. */
__global__ void k_rope(float *x, struct cuda_rope_args a)
{
    const int half = a.n_rot / 2;
    const size_t n = (size_t)a.n_tokens * a.n_heads * half;
    EW_FOR(idx, n)
    {
        const int i = (int)(idx % half);
        const size_t th_idx = idx / half;
        const int t = (int)(th_idx / a.n_heads), h = (int)(th_idx % a.n_heads);
        float theta = (float)a.pos[t];
        for (int k = 0; k < i; k++) theta *= a.theta_scale;
        const float extrap = a.freq_factors ? theta / a.freq_factors[i] : theta;
        float th = a.freq_scale * extrap;
        if (a.ext_factor != 0.0f) {
            const float yv = ((float)i - a.corr0) / fmaxf(0.001f, a.corr1 - a.corr0);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, yv))) * a.ext_factor;
            /* rounded products and sum, as the CPU computes them: a fused multiply-add here
             * would move an angle of thousands of radians by an ulp (1e-3 rad) */
            th = __fadd_rn(__fmul_rn(th, 1.0f - mix), __fmul_rn(extrap, mix));
        }
        const float c = cosf(th) * a.mscale, sn = sinf(th) * a.mscale;
        float *v = x + ((size_t)t * a.n_heads + h) * a.head_dim;
        const int p0 = a.mode == BACKEND_ROPE_NEOX ? i : 2 * i;
        const int p1 = a.mode == BACKEND_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = v[p0], x1 = v[p1];
        v[p0] = x0 * c - x1 * sn;
        v[p1] = x0 * sn + x1 * c;
    }
}

extern "C" cudaError_t cuda_launch_rope(cudaStream_t s, float *x, const struct cuda_rope_args *a)
{
    const size_t n = (size_t)a->n_tokens * a->n_heads * (a->n_rot / 2);
    if (n) k_rope<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, *a);
    return cudaGetLastError();
}

/* ---- gather_rows --------------------------------------------------------------------------------- */

__global__ void k_gather_rows(const float *src, const int32_t *idx, int dim, size_t n, float *dst)
{
    EW_FOR(i, n) dst[i] = src[(size_t)idx[i / dim] * dim + i % dim];
}

extern "C" cudaError_t cuda_launch_gather_rows(cudaStream_t s, const float *src, const int32_t *idx,
                                               int n, int dim, float *dst)
{
    const size_t total = (size_t)n * (size_t)dim;
    if (total) k_gather_rows<<<ew_blocks(total), EW_THREADS, 0, s>>>(src, idx, dim, total, dst);
    return cudaGetLastError();
}

/* ---- mixture of experts -------------------------------------------------------------------------- */

/* One thread per row (n_expert is small: 8 to 256): softmax into p (the row's slice of the
 * routing workspace), then the top k by selection, ties to the lower index, as cpu_ops.c. */
__global__ void k_moe_route(const float *logits, int n_rows, int n_expert, int k, bool norm,
                            float *p_all, int32_t *ids, float *w)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    const float *l = logits + (size_t)r * n_expert;
    float *p = p_all + (size_t)r * n_expert;
    float mx = -INFINITY;
    for (int e = 0; e < n_expert; e++) mx = fmaxf(mx, l[e]);
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++) {
        p[e] = expf(l[e] - mx);
        sum += (double)p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++) p[e] *= inv;
    int32_t *id = ids + (size_t)r * k;
    float *wr = w + (size_t)r * k;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken = taken || id[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        id[j] = best;
        wr[j] = p[best];
    }
    if (norm) {
        double ws = 0.0;
        for (int j = 0; j < k; j++) ws += (double)wr[j];
        float sv = (float)ws;
        if (sv < 6.103515625e-5f) sv = 6.103515625e-5f;
        for (int j = 0; j < k; j++) wr[j] /= sv;
    }
}

extern "C" cudaError_t cuda_launch_moe_route(cudaStream_t s, const float *logits, int n_rows,
                                             int n_expert, int k, bool norm, float *p, int32_t *ids,
                                             float *w)
{
    if (n_rows > 0)
        k_moe_route<<<cuda_blocks((size_t)n_rows, 64), 64, 0, s>>>(logits, n_rows, n_expert, k,
                                                                   norm, p, ids, w);
    return cudaGetLastError();
}

/* out[r, i] = sum over j in order of w[r k + j] * x[(r k + j), i], as cpu_ops.c (first product,
 * then the others added). */
__global__ void k_moe_combine(const float *x, const float *w, int k, int dim, size_t n, float *out)
{
    EW_FOR(idx, n)
    {
        const size_t r = idx / dim, i = idx % dim;
        const float *xr = x + r * k * dim + i;
        const float *wr = w + r * k;
        float o = xr[0] * wr[0];
        for (int j = 1; j < k; j++) o += xr[(size_t)j * dim] * wr[j];
        out[idx] = o;
    }
}

extern "C" cudaError_t cuda_launch_moe_combine(cudaStream_t s, const float *x, const float *w,
                                               int n_rows, int k, int dim, float *out)
{
    const size_t n = (size_t)n_rows * (size_t)dim;
    if (n) k_moe_combine<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, w, k, dim, n, out);
    return cudaGetLastError();
}

__global__ void k_scale_rows_sigmoid(float *x, const float *g, int dim, size_t n)
{
    EW_FOR(idx, n)
    {
        const float gv = g[idx / dim];
        const float silu = gv / (1.0f + expf(-gv));
        x[idx] *= silu / gv;
    }
}

extern "C" cudaError_t cuda_launch_scale_rows_sigmoid(cudaStream_t s, float *x, const float *g,
                                                      int n_rows, int dim)
{
    const size_t n = (size_t)n_rows * (size_t)dim;
    if (n) k_scale_rows_sigmoid<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, g, dim, n);
    return cudaGetLastError();
}
