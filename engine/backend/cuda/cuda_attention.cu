/* KV stores and paged attention over the device cache. The cache layout is the CPU backend's
 * (cpu_kv_offset): per layer K then V, each (n_blocks, n_kv_heads, block_size, head_bytes), a row
 * in F32, F16 or ggml Q8_0 blocks. Attention is one thread block per (query head, token) with an
 * online softmax over tiles of ATTN_TILE positions read through the sequence's block table: simple
 * and exact in float, not yet the GQA-shared, split-K kernel a fast decode needs (see the note in
 * engine/backend/cuda/README.md). */
#include "engine/backend/cuda/cuda_common.cuh"

#define ATTN_TILE   128 /* positions per tile = threads per block */
#define ATTN_MAX_HD CUDA_ATTN_MAX_HEAD_DIM
#define ATTN_HD_PER (ATTN_MAX_HD / ATTN_TILE) /* output dims per thread */

static __device__ __forceinline__ size_t kv_off(const struct cuda_kv_args &kv, int64_t slot, int h)
{
    const size_t bs = (size_t)kv.block_size;
    const size_t blk = (size_t)slot / bs, i = (size_t)slot % bs;
    return ((blk * (size_t)kv.n_kv_heads + (size_t)h) * bs + i) * kv.head_bytes;
}

/* Element d of a cache row. */
static __device__ __forceinline__ float kv_elem(enum quant_type type, const char *row, int d)
{
    if (type == QUANT_F32) return reinterpret_cast<const float *>(row)[d];
    if (type == QUANT_F16) return cuda_h2f(reinterpret_cast<const uint16_t *>(row)[d]);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(row) + (size_t)(d / QUANT_QK8_0) * 34;
    return cuda_h2f(cuda_ld16(b)) * (float)(int8_t)b[2 + d % QUANT_QK8_0];
}

/* ---- kv_store ------------------------------------------------------------------------------------ */

/* One row (head_dim floats) into the cache's type by one warp: F32 copied, F16 rounded to nearest
 * even, Q8_0 as cpu_quant_q8_0_row (amax / 127, its inverse, roundf; the scale stored as f16). */
static __device__ void kv_store_row(const struct cuda_kv_args &kv, const float *x, char *dst)
{
    const int lane = threadIdx.x % CUDA_WARP;
    if (kv.type == QUANT_F32) {
        for (int i = lane; i < kv.head_dim; i += CUDA_WARP)
            reinterpret_cast<float *>(dst)[i] = x[i];
    } else if (kv.type == QUANT_F16) {
        for (int i = lane; i < kv.head_dim; i += CUDA_WARP)
            reinterpret_cast<uint16_t *>(dst)[i] = __half_as_ushort(__float2half_rn(x[i]));
    } else {
        for (int b = 0; b < kv.head_dim / QUANT_QK8_0; b++) {
            const float v = x[b * QUANT_QK8_0 + lane];
            const float amax = cuda_warp_max(fabsf(v));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            const float q = roundf(v * id);
            uint8_t *blk = reinterpret_cast<uint8_t *>(dst) + (size_t)b * 34;
            blk[2 + lane] = (uint8_t)(int8_t)(q >= -127.0f && q <= 127.0f ? (int)q : 0);
            if (lane == 0) {
                const uint16_t h = __half_as_ushort(__float2half_rn(d));
                blk[0] = (uint8_t)(h & 0xff);
                blk[1] = (uint8_t)(h >> 8);
            }
        }
    }
}

/* blockIdx.x = token, one warp per KV head (blockDim.y heads at a time). */
__global__ void k_kv_store(struct cuda_kv_args kv, const float *k, const float *v,
                           const int64_t *slots)
{
    const int t = blockIdx.x;
    const int h = blockIdx.y * blockDim.y + threadIdx.y;
    if (h >= kv.n_kv_heads) return;
    const size_t row = (size_t)kv.n_kv_heads * kv.head_dim;
    const size_t off = kv_off(kv, slots[t], h);
    kv_store_row(kv, k + (size_t)t * row + (size_t)h * kv.head_dim, kv.k + off);
    kv_store_row(kv, v + (size_t)t * row + (size_t)h * kv.head_dim, kv.v + off);
}

extern "C" cudaError_t cuda_launch_kv_store(cudaStream_t s, const struct cuda_kv_args *kv,
                                            const float *k, const float *v, const int64_t *slots,
                                            int n_tokens)
{
    if (n_tokens <= 0) return cudaSuccess;
    const int hy = kv->n_kv_heads < 8 ? kv->n_kv_heads : 8;
    dim3 grid((unsigned)n_tokens, cuda_blocks((size_t)kv->n_kv_heads, (unsigned)hy));
    k_kv_store<<<grid, dim3(CUDA_WARP, (unsigned)hy), 0, s>>>(*kv, k, v, slots);
    return cudaGetLastError();
}

/* ---- attention ----------------------------------------------------------------------------------- */

/* blockIdx.x = query head, blockIdx.y = token. Scores as the CPU backend: q (rounded to f16 for
 * an F16 cache) times scale, dotted with K; with soft-capping tanh(q.k / cap) * cap * scale. Each
 * tile's scores go to shared memory, the running maximum and sum are rescaled (online softmax),
 * and each thread accumulates its output dimensions over the tile's V rows (coalesced). */
__global__ void __launch_bounds__(ATTN_TILE) k_attention(struct cuda_attn_args a)
{
    __shared__ float q[ATTN_MAX_HD];
    __shared__ float sc[ATTN_TILE];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int hd = a.kv.head_dim, bs = a.kv.block_size, kvh = h / a.group;
    const int pos = a.pos[t];
    const int lo = a.window > 0 && pos >= a.window ? pos - a.window + 1 : 0, hi = pos + 1;
    const int32_t *tab = a.bt + (size_t)a.seq[t] * a.max_blocks;
    const float qscale = a.softcap > 0.0f ? 1.0f : a.scale;
    const float *qr = a.q + ((size_t)t * a.n_heads + h) * hd;
    for (int i = tid; i < hd; i += ATTN_TILE) {
        float v = qr[i];
        if (a.kv.type == QUANT_F16) v = __half2float(__float2half_rn(v));
        q[i] = v * qscale;
    }
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc[ATTN_HD_PER] = {0.0f, 0.0f};
    for (int p0 = lo; p0 < hi; p0 += ATTN_TILE) {
        const int n = hi - p0 < ATTN_TILE ? hi - p0 : ATTN_TILE;
        float s = -INFINITY;
        if (tid < n) {
            const int p = p0 + tid;
            const int64_t slot = (int64_t)tab[p / bs] * bs + p % bs;
            const char *kr = a.kv.k + kv_off(a.kv, slot, kvh);
            float dot = 0.0f;
            for (int i = 0; i < hd; i++) dot = fmaf(q[i], kv_elem(a.kv.type, kr, i), dot);
            s = a.softcap > 0.0f ? tanhf(dot * (1.0f / a.softcap)) * a.softcap * a.scale : dot;
        }
        sc[tid] = s;
        __syncthreads();
        float tmax = -INFINITY;
        for (int j = 0; j < n; j++) tmax = fmaxf(tmax, sc[j]);
        const float m_new = fmaxf(m, tmax);
        const float corr = expf(m - m_new); /* 0 on the first tile (m = -inf) */
        __syncthreads();
        if (tid < n) sc[tid] = expf(sc[tid] - m_new);
        __syncthreads();
        float tsum = 0.0f;
        for (int j = 0; j < n; j++) tsum += sc[j];
        l = l * corr + tsum;
#pragma unroll
        for (int k = 0; k < ATTN_HD_PER; k++) {
            const int d = tid + k * ATTN_TILE;
            if (d >= hd) break;
            float o = acc[k] * corr;
            for (int j = 0; j < n; j++) {
                const int p = p0 + j;
                const int64_t slot = (int64_t)tab[p / bs] * bs + p % bs;
                o = fmaf(sc[j], kv_elem(a.kv.type, a.kv.v + kv_off(a.kv, slot, kvh), d), o);
            }
            acc[k] = o;
        }
        m = m_new;
        __syncthreads();
    }
    float *out = a.out + ((size_t)t * a.n_heads + h) * hd;
    const float inv = 1.0f / l;
#pragma unroll
    for (int k = 0; k < ATTN_HD_PER; k++) {
        const int d = tid + k * ATTN_TILE;
        if (d < hd) out[d] = acc[k] * inv;
    }
}

extern "C" cudaError_t cuda_launch_attention(cudaStream_t s, const struct cuda_attn_args *a)
{
    if (a->n_tokens <= 0) return cudaSuccess;
    if (a->kv.head_dim > ATTN_MAX_HD) return cudaErrorInvalidValue;
    for (int t0 = 0; t0 < a->n_tokens; t0 += 65535) { /* gridDim.y's limit */
        struct cuda_attn_args c = *a;
        const size_t off = (size_t)t0 * a->n_heads * a->kv.head_dim;
        c.n_tokens = a->n_tokens - t0 < 65535 ? a->n_tokens - t0 : 65535;
        c.q += off;
        c.out += off;
        c.pos += t0;
        c.seq += t0;
        k_attention<<<dim3((unsigned)a->n_heads, (unsigned)c.n_tokens), ATTN_TILE, 0, s>>>(c);
    }
    return cudaGetLastError();
}
