/* Kernel microbenchmarks of the CPU backend (`cinfer-engine bench-kernels`): matmul per weight type
 * and shape at 1, 16 and 512 tokens (GFLOP/s, weight GB/s), paged attention, and a projection of a
 * 134M llama's decode/prefill rate from the measured matmuls. Not a test: it asserts nothing. */
#ifndef CINFER_ENGINE_BACKEND_CPU_BENCH_H
#define CINFER_ENGINE_BACKEND_CPU_BENCH_H

/* argv[0] is the subcommand name. Options: --threads N, --isa scalar|avx2|avx512, --types LIST
 * (comma-separated: f32,f16,bf16,q8_0,q4_0,q4_K,q6_K), --quick, --cputime (process CPU time instead
 * of wall time: meaningful with --threads 1 on a loaded machine), --model (the matmuls of a whole
 * 134M llama step, weights streamed from DRAM, instead of per-shape runs). Returns the exit
 * status (0, 1 runtime failure, 2 usage). Main thread. */
int cpu_bench_main(int argc, char **argv);

#endif
