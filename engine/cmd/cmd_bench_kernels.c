/* cinfer-engine bench-kernels: the CPU backend's kernel microbenchmarks (engine/backend/cpu/
 * cpu_bench.h measures; this file is the command line). Not a test: it asserts nothing. */
#include "common/cli.h"
#include "engine/backend/cpu/cpu_bench.h"
#include "engine/cmd/cmd.h"

#include <stdbool.h>
#include <stddef.h>

struct bench_kernels_cfg {
    int threads;
    const char *isa, *types;
    bool quick, cputime, model;
    const char *log_level, *log_format;
};

#define O(f) offsetof(struct bench_kernels_cfg, f)
static const struct cfg_opt bench_kernels_opts[] = {
    {"threads", CFG_INT, O(threads), "0", 0, 256, "Compute threads; 0 = all cores", NULL, 0},
    /* No choices: an ISA the CPU lacks is refused by the backend (exit status 1). */
    {"isa", CFG_STRING, O(isa), NULL, 1, 0,
     "Kernel set: scalar, avx2 or avx512 (default: the best this CPU runs)", NULL, 0},
    {"types", CFG_STRING, O(types), NULL, 1, 0,
     "Weight types to measure, comma-separated (f32, q8_0, q4_K, iq4_xs, ...; default all)", NULL,
     0},
    {"quick", CFG_BOOL, O(quick), "false", 1, 0, "Fewer repetitions and shapes", NULL, 0},
    {"cputime", CFG_BOOL, O(cputime), "false", 1, 0,
     "Time with the process CPU clock instead of wall time (meaningful with --threads 1 on a "
     "loaded machine)",
     NULL, 0},
    {"model", CFG_BOOL, O(model), "false", 1, 0,
     "The matmuls of a whole 134M llama step, weights streamed from DRAM, instead of per-shape "
     "runs",
     NULL, 0},
    CLI_LOG_OPTS(struct bench_kernels_cfg),
};
#undef O

static const struct cfg_spec bench_kernels_spec = {
    .program = "cinfer-engine bench-kernels",
    .summary = "CPU kernel microbenchmarks: matmul GFLOP/s and GB/s per weight type and shape, "
               "paged attention, small ops",
    /* Its own prefix: --model is a flag here, CINFER_ENGINE_MODEL the model path of serve and bench. */
    .env_prefix = "CINFER_ENGINE_BENCH_KERNELS_",
    .opts = bench_kernels_opts,
    .n_opts = sizeof(bench_kernels_opts) / sizeof(bench_kernels_opts[0]),
};

int cmd_bench_kernels_main(int argc, char **argv)
{
    struct bench_kernels_cfg cfg = {0};
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&bench_kernels_spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("bench-kernels", cfg.log_level, cfg.log_format);
    enum quant_type types[QUANT_TYPE_END];
    if (cpu_bench_types(cfg.types, types, QUANT_TYPE_END) < 0) return 2;
    struct cpu_bench_opts o = {
        .n_threads = cfg.threads,
        .isa = cfg.isa,
        .types = cfg.types,
        .quick = cfg.quick,
        .cputime = cfg.cputime,
        .model = cfg.model,
    };
    return cpu_bench_run(&o) == 0 ? 0 : 1;
}
