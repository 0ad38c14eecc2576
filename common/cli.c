/* Shared command-line glue: parse with a cfg table, print help or the error, set up logging. */
#include "common/cli.h"

#include "common/log.h"

enum cli_parse_result cli_parse(const struct cfg_spec *spec, void *out, int argc, char **argv,
                                struct cfg_result *res)
{
    char err[512];
    if (cfg_parse(spec, out, argc, argv, res, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", spec->program, err);
        return CLI_EXIT_USAGE;
    }
    if (res->help) {
        cfg_usage(spec, stdout);
        return CLI_EXIT_OK;
    }
    return CLI_RUN;
}

void cli_log_setup(const char *component, const char *level, const char *format)
{
    enum log_level lvl = LOG_INFO;
    enum log_format fmt = LOG_FORMAT_JSON;
    log_level_parse(level, &lvl);
    log_format_parse(format, &fmt);
    log_setup(component, lvl, fmt);
}
