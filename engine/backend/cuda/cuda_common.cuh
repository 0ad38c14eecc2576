/* What every kernel file of the CUDA backend includes: the engine's C headers with C linkage (quant.h
 * is C11: its _Static_asserts are C++'s static_assert here), the half types, and small helpers for
 * reading f16/bf16 bits and reducing across a warp. */
#ifndef CINFER_ENGINE_BACKEND_CUDA_COMMON_CUH
#define CINFER_ENGINE_BACKEND_CUDA_COMMON_CUH

#define _Static_assert static_assert
extern "C" {
#include "common/err.h"
#include "engine/gguf/quant.h"
}
#include "engine/backend/cuda/cuda_backend.h"
#undef _Static_assert

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define CUDA_WARP 32

/* IEEE half bits to float, exactly (every f16 is a float). */
static __host__ __device__ __forceinline__ float cuda_h2f(uint16_t bits)
{
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

/* bfloat16 bits to float: the top half of a float. */
static __host__ __device__ __forceinline__ float cuda_bf2f(uint16_t bits)
{
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Little-endian loads at addresses aligned to their size (the block layouts guarantee it where
 * they are used). */
static __host__ __device__ __forceinline__ uint16_t cuda_ld16(const uint8_t *p)
{
    return *reinterpret_cast<const uint16_t *>(p);
}
static __host__ __device__ __forceinline__ uint32_t cuda_ld32(const uint8_t *p)
{
    return *reinterpret_cast<const uint32_t *>(p);
}

static __device__ __forceinline__ float cuda_warp_sum(float v)
{
    for (int o = CUDA_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float cuda_warp_max(float v)
{
    for (int o = CUDA_WARP / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned cuda_blocks(size_t n, unsigned per)
{
    return (unsigned)((n + per - 1) / per);
}

#endif
