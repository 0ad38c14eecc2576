/* Pieces every cinfer command line shares: the --log-level / --log-format options (as cfg table
 * rows) and the parse-or-exit sequence, so each subcommand's main stays a table plus a call. */
#ifndef CINFER_COMMON_CLI_H
#define CINFER_COMMON_CLI_H

#include "common/cfg.h"

/* Rows for a cfg table whose struct has `const char *log_level, *log_format` fields. */
#define CLI_LOG_OPTS(type)                                                                         \
    {"log-level",                                                                                  \
     CFG_STRING,                                                                                   \
     offsetof(type, log_level),                                                                    \
     "info",                                                                                       \
     1,                                                                                            \
     0,                                                                                            \
     "Minimum level of log lines",                                                                 \
     "debug|info|warn|error",                                                                      \
     0},                                                                                           \
    {                                                                                              \
        "log-format", CFG_STRING, offsetof(type, log_format), "json", 1, 0,                        \
            "Log line format: json for machines, text for people", "json|text", 0                  \
    }

enum cli_parse_result { CLI_RUN = 0, CLI_EXIT_OK = 1, CLI_EXIT_USAGE = 2 };

/* Parses argv into `out` with `spec`; prints --help to stdout or the error to stderr.
 * Returns CLI_RUN to go on, CLI_EXIT_OK after --help, CLI_EXIT_USAGE (exit status 2) on bad input. */
enum cli_parse_result cli_parse(const struct cfg_spec *spec, void *out, int argc, char **argv,
                                struct cfg_result *res);

/* Applies the log options (already validated by the table's choices) for `component` (borrowed,
 * static). */
void cli_log_setup(const char *component, const char *level, const char *format);

#endif
