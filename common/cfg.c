/* Table-driven flag / environment / default parsing with range checks and --help. */
#include "common/cfg.h"

#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CFG_ENV_NAME_MAX 128

static void *field(void *base, const struct cfg_opt *o)
{
    return (char *)base + o->offset;
}

static bool has_range(const struct cfg_opt *o)
{
    return o->min <= o->max;
}

int cfg_parse_size(const char *s, unsigned long long *out)
{
    if (!s || !*s) return ERR_INVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0) return ERR_INVAL;
    double mult = 1;
    char unit = (char)toupper((unsigned char)*end);
    if (unit) {
        const char *units = "KMGT";
        const char *u = strchr(units, unit);
        if (!u) return ERR_INVAL;
        end++;
        int power = (int)(u - units) + 1;
        double base = 1024;
        if (*end == 'B' || *end == 'b') { /* "KB" = 1000, "KiB" = 1024, "K" = 1024 */
            base = 1000;
            end++;
        } else if (*end == 'i' && (end[1] == 'B' || end[1] == 'b')) {
            end += 2;
        }
        mult = pow(base, power);
    }
    if (*end) return ERR_INVAL;
    v *= mult;
    if (v >= 18446744073709551615.0) return ERR_RANGE;
    *out = (unsigned long long)v;
    return 0;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return (*out = true), true;
        if (strcasecmp(s, no[i]) == 0) return (*out = false), true;
    }
    return false;
}

static bool choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

/* Stores text value `v` (from `source`, for messages) into the option's field. */
static int set_value(const struct cfg_opt *o, void *out, const char *v, const char *source,
                     char *err, size_t errlen)
{
    const char *shown = (o->flags & CFG_SECRET) ? "(secret)" : v;
    char *end;
    switch (o->type) {
    case CFG_BOOL: {
        bool b;
        if (!parse_bool(v, &b)) {
            snprintf(err, errlen, "%s --%s: expected true or false, got \"%s\"", source, o->name,
                     shown);
            return ERR_INVAL;
        }
        *(bool *)field(out, o) = b;
        return 0;
    }
    case CFG_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno == ERANGE || x < INT32_MIN || x > INT32_MAX) {
            snprintf(err, errlen, "%s --%s: expected an integer, got \"%s\"", source, o->name,
                     shown);
            return ERR_INVAL;
        }
        if (has_range(o) && (x < o->min || x > o->max)) {
            snprintf(err, errlen, "%s --%s: %ld is out of range [%.0f, %.0f]", source, o->name, x,
                     o->min, o->max);
            return ERR_RANGE;
        }
        *(int *)field(out, o) = (int)x;
        return 0;
    }
    case CFG_DOUBLE: {
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno == ERANGE || !isfinite(x)) {
            snprintf(err, errlen, "%s --%s: expected a number, got \"%s\"", source, o->name, shown);
            return ERR_INVAL;
        }
        if (has_range(o) && (x < o->min || x > o->max)) {
            snprintf(err, errlen, "%s --%s: %g is out of range [%g, %g]", source, o->name, x,
                     o->min, o->max);
            return ERR_RANGE;
        }
        *(double *)field(out, o) = x;
        return 0;
    }
    case CFG_SIZE: {
        unsigned long long x;
        if (cfg_parse_size(v, &x)) {
            snprintf(err, errlen, "%s --%s: expected a size in bytes (e.g. 512M, 2G), got \"%s\"",
                     source, o->name, shown);
            return ERR_INVAL;
        }
        if (has_range(o) && ((double)x < o->min || (double)x > o->max)) {
            snprintf(err, errlen, "%s --%s: %llu is out of range [%.0f, %.0f]", source, o->name, x,
                     o->min, o->max);
            return ERR_RANGE;
        }
        *(uint64_t *)field(out, o) = x;
        return 0;
    }
    case CFG_STRING:
        if (o->choices && !choice_ok(o->choices, v)) {
            snprintf(err, errlen, "%s --%s: \"%s\" is not one of %s", source, o->name, shown,
                     o->choices);
            return ERR_INVAL;
        }
        *(const char **)field(out, o) = v;
        return 0;
    }
    return ERR_INVAL;
}

static void env_name(const struct cfg_spec *spec, const struct cfg_opt *o, char *name, size_t n)
{
    snprintf(name, n, "%s%s", spec->env_prefix ? spec->env_prefix : "", o->name);
    for (char *p = name; *p; p++) *p = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
}

static const struct cfg_opt *find_opt(const struct cfg_spec *spec, const char *name, size_t len)
{
    for (size_t i = 0; i < spec->n_opts; i++) {
        const char *n = spec->opts[i].name;
        if (strlen(n) == len && strncmp(n, name, len) == 0) return &spec->opts[i];
    }
    return NULL;
}

int cfg_parse(const struct cfg_spec *spec, void *out, int argc, char **argv, struct cfg_result *res,
              char *err, size_t errlen)
{
    bool seen[256] = {false};
    int rc;
    if (spec->n_opts > sizeof(seen) / sizeof(seen[0])) return ERR_INTERNAL;
    memset(res, 0, sizeof(*res));

    /* Defaults first, then the environment. */
    for (size_t i = 0; i < spec->n_opts; i++) {
        const struct cfg_opt *o = &spec->opts[i];
        if (o->def && (rc = set_value(o, out, o->def, "default", err, errlen))) return ERR_INTERNAL;
        if (!o->def) {
            switch (o->type) {
            case CFG_BOOL: *(bool *)field(out, o) = false; break;
            case CFG_INT: *(int *)field(out, o) = 0; break;
            case CFG_DOUBLE: *(double *)field(out, o) = 0; break;
            case CFG_SIZE: *(uint64_t *)field(out, o) = 0; break;
            case CFG_STRING: *(const char **)field(out, o) = NULL; break;
            }
        }
        char name[CFG_ENV_NAME_MAX];
        env_name(spec, o, name, sizeof(name));
        const char *v = getenv(name);
        if (v) {
            char source[CFG_ENV_NAME_MAX + 16];
            snprintf(source, sizeof(source), "environment %s:", name);
            if ((rc = set_value(o, out, v, source, err, errlen))) return rc;
            seen[i] = true;
        }
    }

    bool only_positional = false;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (only_positional || arg[0] != '-' || arg[1] == 0) {
            if (res->n_positional >= CFG_MAX_POSITIONAL ||
                (spec->max_positional >= 0 && res->n_positional >= spec->max_positional)) {
                snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", arg);
                return ERR_INVAL;
            }
            res->positional[res->n_positional++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            res->help = true;
            return 0;
        }
        if (arg[1] != '-') {
            snprintf(err, errlen, "unknown option \"%s\" (options are --long-names; see --help)",
                     arg);
            return ERR_INVAL;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct cfg_opt *o = find_opt(spec, name, len);
        bool negated = false;
        if (!o && len > 3 && strncmp(name, "no-", 3) == 0) {
            o = find_opt(spec, name + 3, len - 3);
            negated = o && o->type == CFG_BOOL && !eq;
            if (!negated) o = NULL;
        }
        if (!o) {
            snprintf(err, errlen, "unknown option \"--%.*s\" (see --help)", (int)len, name);
            return ERR_INVAL;
        }
        const char *v;
        if (negated)
            v = "false";
        else if (eq)
            v = eq + 1;
        else if (o->type == CFG_BOOL)
            v = "true";
        else if (a + 1 < argc)
            v = argv[++a];
        else {
            snprintf(err, errlen, "option --%s needs a value", o->name);
            return ERR_INVAL;
        }
        if ((rc = set_value(o, out, v, "flag", err, errlen))) return rc;
        seen[o - spec->opts] = true;
    }

    for (size_t i = 0; i < spec->n_opts; i++) {
        if ((spec->opts[i].flags & CFG_REQUIRED) && !seen[i]) {
            char name[CFG_ENV_NAME_MAX];
            env_name(spec, &spec->opts[i], name, sizeof(name));
            snprintf(err, errlen, "missing required option --%s (or %s)", spec->opts[i].name, name);
            return ERR_INVAL;
        }
    }
    if (res->n_positional < spec->min_positional) {
        snprintf(err, errlen, "missing argument: usage: %s %s", spec->program,
                 spec->usage ? spec->usage : "");
        return ERR_INVAL;
    }
    return 0;
}

void cfg_usage(const struct cfg_spec *spec, FILE *f)
{
    fprintf(f, "Usage: %s%s%s [options]\n", spec->program, spec->usage ? " " : "",
            spec->usage ? spec->usage : "");
    if (spec->summary) fprintf(f, "%s\n", spec->summary);
    if (spec->n_opts) fprintf(f, "\nOptions (environment variable in brackets):\n");
    for (size_t i = 0; i < spec->n_opts; i++) {
        const struct cfg_opt *o = &spec->opts[i];
        char env[CFG_ENV_NAME_MAX];
        env_name(spec, o, env, sizeof(env));
        static const char *const metavar[] = {"", " N", " X", " BYTES", " S"};
        fprintf(f, "  --%s%s  [%s]\n      %s", o->name, metavar[o->type], env, o->help);
        if (o->choices) fprintf(f, " (%s)", o->choices);
        if (o->def && !(o->flags & CFG_SECRET)) fprintf(f, " (default: %s)", o->def);
        if (has_range(o) && o->type != CFG_STRING && o->type != CFG_BOOL)
            fprintf(f, " (range: %g..%g)", o->min, o->max);
        if (o->flags & CFG_REQUIRED) fprintf(f, " (required)");
        fputc('\n', f);
    }
    fprintf(f, "  -h, --help\n      Show this help and exit.\n");
}
