/* JSON-lines / text logger. Formats into a fixed stack buffer and writes it in one call. */
#include "common/log.h"

#include "common/err.h"

#include <stdarg.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define LOG_LINE_MAX 4096

static struct {
    const char *component;
    enum log_level level;
    enum log_format format;
    FILE *sink;
} log_settings = {"cinfer", LOG_INFO, LOG_FORMAT_JSON, NULL};

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void log_setup(const char *component, enum log_level level, enum log_format format)
{
    if (component) log_settings.component = component;
    log_settings.level = level;
    log_settings.format = format;
}

void log_set_sink(FILE *sink)
{
    log_settings.sink = sink;
}

bool log_enabled(enum log_level level)
{
    return level >= log_settings.level && level < LOG_OFF;
}

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i <= LOG_OFF; i++) {
        if (s && strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    if (s && strcmp(s, "warning") == 0) {
        *out = LOG_WARN;
        return 0;
    }
    return ERR_INVAL;
}

int log_format_parse(const char *s, enum log_format *out)
{
    if (s && strcmp(s, "json") == 0) {
        *out = LOG_FORMAT_JSON;
        return 0;
    }
    if (s && strcmp(s, "text") == 0) {
        *out = LOG_FORMAT_TEXT;
        return 0;
    }
    return ERR_INVAL;
}

/* A bounded line under construction; writes past the end are dropped and remembered. */
struct line {
    char buf[LOG_LINE_MAX];
    size_t len;
    bool truncated;
};

static void line_put(struct line *l, const char *s, size_t n)
{
    size_t room = sizeof(l->buf) - 2 - l->len; /* keep space for '\n' and NUL */
    if (n > room) {
        n = room;
        l->truncated = true;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void line_puts(struct line *l, const char *s)
{
    line_put(l, s, strlen(s));
}

static void line_printf(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line_printf(struct line *l, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) line_put(l, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* JSON string body escaping (RFC 8259): quotes, backslash and control characters. */
static void line_put_json_escaped(struct line *l, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': line_puts(l, "\\\""); break;
        case '\\': line_puts(l, "\\\\"); break;
        case '\n': line_puts(l, "\\n"); break;
        case '\r': line_puts(l, "\\r"); break;
        case '\t': line_puts(l, "\\t"); break;
        default:
            if (*p < 0x20)
                line_printf(l, "\\u%04x", *p);
            else
                line_put(l, (const char *)p, 1);
        }
    }
}

static void line_put_value(struct line *l, const struct log_field *f, bool json)
{
    switch (f->type) {
    case LOG_FIELD_STR:
        if (!f->v.s) {
            line_puts(l, json ? "null" : "(null)");
        } else if (json) {
            line_puts(l, "\"");
            line_put_json_escaped(l, f->v.s);
            line_puts(l, "\"");
        } else {
            line_puts(l, f->v.s);
        }
        break;
    case LOG_FIELD_INT: line_printf(l, "%lld", f->v.i); break;
    case LOG_FIELD_DBL:
        /* JSON has no NaN/Inf literals. */
        if (json && (f->v.d != f->v.d || f->v.d > 1e308 || f->v.d < -1e308))
            line_puts(l, "null");
        else
            line_printf(l, "%.6g", f->v.d);
        break;
    case LOG_FIELD_BOOL: line_puts(l, f->v.b ? "true" : "false"); break;
    case LOG_FIELD_END: break;
    }
}

static void format_timestamp(char *out, size_t n)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%03dZ", (int)(tv.tv_usec / 1000));
}

static void format_json(struct line *l, const char *ts, enum log_level level, const char *msg,
                        const struct log_field *fields)
{
    line_printf(l, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"", ts, level_names[level]);
    line_put_json_escaped(l, log_settings.component);
    line_puts(l, "\",\"msg\":\"");
    line_put_json_escaped(l, msg);
    line_puts(l, "\"");
    for (const struct log_field *f = fields; f && f->type != LOG_FIELD_END; f++) {
        line_puts(l, ",\"");
        line_put_json_escaped(l, f->key);
        line_puts(l, "\":");
        line_put_value(l, f, true);
    }
    line_puts(l, "}");
}

void log_emit(enum log_level level, const char *msg, const struct log_field *fields)
{
    struct line l = {.len = 0, .truncated = false};
    char ts[40];
    bool json = log_settings.format == LOG_FORMAT_JSON;
    format_timestamp(ts, sizeof(ts));

    if (json) {
        format_json(&l, ts, level, msg, fields);
        /* An over-long line must still be valid JSON: keep the header and a UTF-8-safe prefix of the
         * message, drop the fields, and say so. */
        if (l.truncated) {
            char shortmsg[512];
            size_t n = strlen(msg);
            if (n >= sizeof(shortmsg)) n = sizeof(shortmsg) - 1;
            while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80) n--;
            memcpy(shortmsg, msg, n);
            shortmsg[n] = 0;
            l.len = 0;
            l.truncated = false;
            format_json(&l, ts, level, shortmsg, NULL);
            l.len--; /* reopen the object */
            line_puts(&l, ",\"truncated\":true}");
        }
    } else {
        char lvl[8];
        snprintf(lvl, sizeof(lvl), "%-5s", level_names[level]);
        for (char *p = lvl; *p; p++)
            if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
        line_printf(&l, "%s %s %s: ", ts, lvl, log_settings.component);
        line_puts(&l, msg);
        for (const struct log_field *f = fields; f && f->type != LOG_FIELD_END; f++) {
            line_puts(&l, " ");
            line_puts(&l, f->key);
            line_puts(&l, "=");
            line_put_value(&l, f, false);
        }
    }
    l.buf[l.len++] = '\n';
    FILE *out = log_settings.sink ? log_settings.sink : stderr;
    fwrite(l.buf, 1, l.len, out);
    fflush(out);
}
