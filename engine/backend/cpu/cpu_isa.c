/* CPU feature detection through GCC's __builtin_cpu_supports (cpuid), and the names of the levels.
 * The level is chosen once per backend; kernels never test features themselves. */
#include "engine/backend/cpu/cpu_isa.h"

#include "common/err.h"

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* F16C straight from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c". */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

enum cpu_isa cpu_isa_detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (!avx2) return CPU_ISA_SCALAR;
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512vnni");
    return avx512 ? CPU_ISA_AVX512 : CPU_ISA_AVX2;
#else
    return CPU_ISA_SCALAR;
#endif
}

int cpu_isa_parse(const char *name, enum cpu_isa *out)
{
    enum cpu_isa best = cpu_isa_detect(), want;
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
        want = best;
    else if (strcmp(name, "scalar") == 0)
        want = CPU_ISA_SCALAR;
    else if (strcmp(name, "avx2") == 0)
        want = CPU_ISA_AVX2;
    else if (strcmp(name, "avx512") == 0)
        want = CPU_ISA_AVX512;
    else
        return ERR_INVAL;
    if (want > best) return ERR_UNSUPPORTED;
    *out = want;
    return 0;
}

const char *cpu_isa_name(enum cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    }
    return "unknown";
}
