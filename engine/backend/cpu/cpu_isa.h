/* Run-time selection of the CPU instruction-set level. Every kernel has a portable scalar version;
 * the AVX2 and AVX-512 versions are compiled with per-function target attributes (the build uses no
 * global -m flags) and are only called after cpu_isa_detect() has confirmed the CPU supports them. */
#ifndef CINFER_ENGINE_BACKEND_CPU_ISA_H
#define CINFER_ENGINE_BACKEND_CPU_ISA_H

enum cpu_isa {
    CPU_ISA_SCALAR = 0, /* portable C */
    CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512 = 2, /* the AVX2 level plus AVX-512 F/BW/DQ/VL and AVX512-VNNI */
};

/* The best level this CPU supports. Pure; any thread. */
enum cpu_isa cpu_isa_detect(void);

/* Parses "scalar", "avx2", "avx512" (or "auto" / "" -> *out = detected level). Returns 0, ERR_INVAL for
 * an unknown name, or ERR_UNSUPPORTED when the CPU lacks the requested level. */
int cpu_isa_parse(const char *name, enum cpu_isa *out);

/* "scalar", "avx2", "avx512". Static string. */
const char *cpu_isa_name(enum cpu_isa isa);

#endif
