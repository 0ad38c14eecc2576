/* Entry points of the cinfer-engine subcommands, one per engine/cmd/cmd_<name>.c.
 * Each takes the subcommand's argv (argv[0] is the subcommand name) and returns the process exit
 * status: 0 success, 1 runtime failure, 2 usage error. Called from main.c on the main thread. */
#ifndef CINFER_ENGINE_CMD_H
#define CINFER_ENGINE_CMD_H

int cmd_serve_main(int argc, char **argv);
int cmd_tokenize_main(int argc, char **argv);
int cmd_perplexity_main(int argc, char **argv);
int cmd_gen_model_main(int argc, char **argv);
int cmd_quantize_main(int argc, char **argv);
int cmd_generate_main(int argc, char **argv);
int cmd_bench_main(int argc, char **argv);
int cmd_fetch_model_main(int argc, char **argv);
int cmd_bench_kernels_main(int argc, char **argv);
int cmd_bench_grammar_main(int argc, char **argv);

#endif
