/* AVX-512 kernels (placeholder until the SIMD kernels land: scalar table kept). */
#include "engine/backend/cpu/cpu_backend.h"

void cpu_kernels_avx512(struct cpu_kernels *k)
{
    (void)k;
}
