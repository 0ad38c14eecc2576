/* cinfer-engine: dispatches to a subcommand. Everything else lives in modules that link into tests. */
#include "engine/cmd/cmd.h"

#include <stdio.h>
#include <string.h>

#ifndef CINFER_VERSION
#define CINFER_VERSION "0.1.0"
#endif

static const struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"serve", cmd_serve_main, "Serve a GGUF model over an OpenAI-compatible HTTP API"},
    {"tokenize", cmd_tokenize_main, "Print the token ids of a text for a GGUF model's tokenizer"},
    {"gen-model", cmd_gen_model_main, "Write a random-weight llama GGUF model (tests, benchmarks)"},
    {"quantize", cmd_quantize_main, "Quantize a GGUF model's weights to one tensor type"},
    {"generate", cmd_generate_main, "Generate a continuation of a prompt (text to stdout)"},
    {"perplexity", cmd_perplexity_main,
     "Perplexity of a model over a text (full KV cache or sink-window eviction)"},
    {"bench", cmd_bench_main, "Measure prefill and decode throughput of a GGUF model"},
    {"fetch-model", cmd_fetch_model_main,
     "Download a model (https://, hf://) with resume and sha256"},
    {"bench-kernels", cmd_bench_kernels_main,
     "CPU kernel microbenchmarks (GFLOP/s, GB/s per weight type)"},
    {"bench-grammar", cmd_bench_grammar_main,
     "Token-mask cost of constrained decoding (GBNF or JSON schema)"},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: cinfer-engine COMMAND [options]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-14s %s\n", "version", "Print the version and exit");
    fprintf(f, "\nRun 'cinfer-engine COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("cinfer-engine %s\n", CINFER_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "cinfer-engine: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
