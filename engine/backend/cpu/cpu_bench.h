/* Kernel microbenchmarks of the CPU backend (`cinfer-engine bench-kernels`): matmul per weight type
 * and shape at 1, 16 and 512 tokens (GFLOP/s, weight GB/s), paged attention, and a projection of a
 * 134M llama's decode/prefill rate from the measured matmuls. Not a test: it asserts nothing. */
#ifndef CINFER_ENGINE_BACKEND_CPU_BENCH_H
#define CINFER_ENGINE_BACKEND_CPU_BENCH_H

#include "engine/gguf/quant.h"

#include <stdbool.h>

struct cpu_bench_opts {
    int n_threads;     /* 0: the backend's default (the CPUs this process may use) */
    const char *isa;   /* "scalar", "avx2", "avx512" or NULL (the best available) */
    const char *types; /* comma-separated weight types (quant_type_parse names); NULL: all */
    bool quick;        /* fewer repetitions and shapes */
    bool cputime;      /* time with the process CPU clock (meaningful with n_threads 1) */
    bool model;        /* the matmuls of a whole 134M llama step instead of per-shape runs */
};

/* The types of a comma-separated --types list (quant_type_parse names) into out (room for max),
 * or the default list when list is NULL. Returns the count, or -1 after naming the first unknown
 * or empty entry on stderr. Pure apart from that message. */
int cpu_bench_types(const char *list, enum quant_type *out, int max);

/* Runs the benchmarks `o` selects (borrowed), printing tables on stdout and failures on stderr.
 * Returns 0, or the error that stopped it (ERR_INVAL for an ISA this CPU lacks, ERR_NOMEM).
 * Main thread; not reentrant (the clock choice is file state). The command line is
 * engine/cmd/cmd_bench_kernels.c. */
int cpu_bench_run(const struct cpu_bench_opts *o);

#endif
