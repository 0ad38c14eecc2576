/* Declarative configuration: one table per program (or subcommand) drives its flags, environment
 * variables, defaults, range checks and --help. Precedence: flag, then environment variable
 * (<env_prefix><NAME>, dashes become underscores), then the default. Everything is validated before
 * the program starts any thread; afterwards the filled struct is treated as immutable.
 *
 *   static const struct cfg_opt opts[] = {
 *       {"port", CFG_INT, offsetof(struct my_cfg, port), "8000", 1, 65535, "TCP port to listen on"},
 *       ...
 *   };
 */
#ifndef CINFER_COMMON_CFG_H
#define CINFER_COMMON_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum cfg_type {
    CFG_BOOL,   /* bool:        --x, --x=true|false, --no-x */
    CFG_INT,    /* int:         decimal, checked against [min, max] */
    CFG_DOUBLE, /* double:      checked against [min, max] */
    CFG_SIZE,   /* uint64_t:    bytes, with optional K/M/G/T (x1024) or KB/MB/GB (x1000) suffix */
    CFG_STRING, /* const char*: borrowed from argv, the environment or the default; NULL if none */
};

#define CFG_REQUIRED 1u /* must be set by flag or environment */
#define CFG_SECRET   2u /* never echoed in errors or dumps */

struct cfg_opt {
    const char *name; /* long flag without "--" */
    enum cfg_type type;
    size_t offset;       /* offsetof() the field in the program's config struct */
    const char *def;     /* default as text; NULL = unset (0 / false / NULL) */
    double min, max;     /* numeric range; ignored when min > max */
    const char *help;    /* one line for --help */
    const char *choices; /* CFG_STRING only: "a|b|c" allowed values, or NULL */
    unsigned flags;
};

#define CFG_MAX_POSITIONAL 8

struct cfg_spec {
    const char *program;    /* "cinfer-engine serve" */
    const char *usage;      /* positional synopsis, e.g. "URI DEST", or NULL */
    const char *summary;    /* one line describing the command */
    const char *env_prefix; /* "CINFER_ENGINE_" */
    const struct cfg_opt *opts;
    size_t n_opts;
    int min_positional, max_positional;
};

struct cfg_result {
    const char *positional[CFG_MAX_POSITIONAL]; /* borrowed from argv */
    int n_positional;
    bool help; /* --help or -h was given: print cfg_usage() and exit 0 */
};

/* Fills the config struct at `out` from defaults, the environment and argv[1..argc-1] (borrowed;
 * strings must outlive `out`). Returns 0, or ERR_INVAL / ERR_RANGE with a message naming the flag
 * in `err` (size `errlen`). On --help returns 0 with res->help set and `out` partly filled. */
int cfg_parse(const struct cfg_spec *spec, void *out, int argc, char **argv, struct cfg_result *res,
              char *err, size_t errlen);

/* Writes the --help text (flags, env names, defaults, ranges) to `f`. */
void cfg_usage(const struct cfg_spec *spec, FILE *f);

/* Parses a byte size such as "512M", "2GiB", "1.5G", "1000000"; returns 0 or ERR_INVAL/ERR_RANGE. */
int cfg_parse_size(const char *s, unsigned long long *out);

#endif
