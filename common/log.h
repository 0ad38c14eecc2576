/* Structured logging: one line per event on stderr, JSON lines by default or text for people.
 * A constant message plus typed key/value fields; the level is checked before any formatting.
 *
 *   log_info("server listening", LOG_S("addr", host), LOG_I("port", port));
 *
 * Settings are process-wide (one of the two globals STYLE.md allows); set them once at start-up. */
#ifndef CINFER_COMMON_LOG_H
#define CINFER_COMMON_LOG_H

#include <stdbool.h>
#include <stdio.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };
enum log_format { LOG_FORMAT_JSON = 0, LOG_FORMAT_TEXT };
enum log_field_type {
    LOG_FIELD_END = 0,
    LOG_FIELD_STR,
    LOG_FIELD_INT,
    LOG_FIELD_DBL,
    LOG_FIELD_BOOL
};

struct log_field {
    const char *key;
    enum log_field_type type;
    union {
        const char *s;
        long long i;
        double d;
        bool b;
    } v;
};

#define LOG_S(k, x) ((struct log_field){.key = (k), .type = LOG_FIELD_STR, .v.s = (x)})
#define LOG_I(k, x) ((struct log_field){.key = (k), .type = LOG_FIELD_INT, .v.i = (long long)(x)})
#define LOG_F(k, x) ((struct log_field){.key = (k), .type = LOG_FIELD_DBL, .v.d = (double)(x)})
#define LOG_B(k, x) ((struct log_field){.key = (k), .type = LOG_FIELD_BOOL, .v.b = (x)})
#define LOG_END     ((struct log_field){.key = NULL, .type = LOG_FIELD_END})

#define LOG_AT(lvl, msg, ...)                                                                      \
    do {                                                                                           \
        if (log_enabled(lvl))                                                                      \
            log_emit((lvl), (msg),                                                                 \
                     (const struct log_field[]){__VA_ARGS__ __VA_OPT__(, ) LOG_END});              \
    } while (0)
#define log_debug(msg, ...) LOG_AT(LOG_DEBUG, msg, __VA_ARGS__)
#define log_info(msg, ...)  LOG_AT(LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...)  LOG_AT(LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) LOG_AT(LOG_ERROR, msg, __VA_ARGS__)

/* Sets the component name (borrowed; must outlive logging), minimum level and format.
 * Call once from main before threads start. */
void log_setup(const char *component, enum log_level level, enum log_format format);

/* Redirects output (default stderr) to `sink` (borrowed); for tests. NULL restores stderr. */
void log_set_sink(FILE *sink);

/* True when an event at `level` would be written; any thread. */
bool log_enabled(enum log_level level);

/* Parses "debug|info|warn|error|off" / "json|text"; returns 0 or ERR_INVAL. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);

/* Writes one line for `msg` and the LOG_END-terminated `fields` (all borrowed). The line is formatted
 * into a bounded buffer and written with one call, so lines from different threads never interleave;
 * an over-long line is truncated. Any thread. */
void log_emit(enum log_level level, const char *msg, const struct log_field *fields);

#endif
