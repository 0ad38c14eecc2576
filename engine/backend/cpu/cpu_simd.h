/* Target attributes and small helpers shared by the CPU backend's SIMD kernel files. Functions are
 * compiled per function for their level (the build has no global -m flags) and only called after
 * cpu_isa_detect(); this header defines nothing outside x86-64. */
#ifndef CINFER_ENGINE_BACKEND_CPU_SIMD_H
#define CINFER_ENGINE_BACKEND_CPU_SIMD_H

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>

/* Tile loops have compile-time trip counts; unrolling them keeps accumulators in registers. */
#define UNROLL _Pragma("GCC unroll 4")
/* The packed kernels' loops (up to 16 tokens, 8 vectors) must unroll fully to stay in registers. */
#define UNROLL_ALL _Pragma("GCC unroll 16")

#define AVX2        __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

#define AVX512_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#define AVX512        __attribute__((target(AVX512_TARGET)))
#define AVX512_INLINE static inline __attribute__((always_inline, target(AVX512_TARGET)))

/* Bytes ahead of the block it works on that the first pass over packed groups prefetches, in
 * address order. Measured on Zen 4 (cinfer-engine bench, Q8_0): with up to 4 tokens per tile
 * (memory-bound decode) about one block ahead into L1 is best, the hardware prefetchers doing the
 * rest (256 B: -10%, 1 KiB: -15%, 4 KiB: -20% at batch 1 and 4); 16-token tiles spend longer on each
 * block and are 8% faster with 8 KiB than with 512 B. Tiles of 8 or more tokens prefetch into L2
 * only: a block's weights are loaded into registers once and then serve every token, while the
 * tokens' activations (37 KiB for 16 tokens of a 2048-wide row) need L1; `bench-kernels --model`,
 * 16 tokens from DRAM: 2531 -> 2754 tok/s, 4 alternations. */
#define QPACK_PREFETCH_FEW  512
#define QPACK_PREFETCH_MANY 8192

/* acc += u8 w . s8 (4 bytes at p, broadcast), with the broadcast in the instruction's memory operand
 * ({1to16}): GCC emits a separate vpbroadcastd for the intrinsic form, one more instruction per
 * vpdpbusd in the hottest loop. */
AVX512_INLINE __m512i dpbusd_bcast_512(__m512i acc, __m512i w, const int8_t *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* acc += s16 pairs of w . s16 pair at p (broadcast), the same way (vpdpwssd). */
AVX512_INLINE __m512i dpwssd_bcast_512(__m512i acc, __m512i w, const int16_t *p)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

#endif

#endif
