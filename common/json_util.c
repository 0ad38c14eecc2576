/* jansson helpers: bounded parse with line/column errors, typed and path getters, bounded dump. */
#include "common/json_util.h"

#include "common/err.h"

#include <math.h>
#include <stdio.h>

/* fmt has exactly one %s, for the key. */
static void json_util_msg(char *err, size_t errlen, const char *fmt, const char *key)
{
    err_fmt(err, errlen, 0, fmt, key);
}

int json_util_parse(const char *data, size_t len, json_t **out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j =
        json_loadb(data ? data : "", data ? len : 0, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j) {
        if (err && errlen)
            snprintf(err, errlen, "invalid JSON at line %d, column %d: %s", je.line, je.column,
                     je.text);
        return ERR_PARSE;
    }
    *out = j;
    return 0;
}

int json_util_parse_object(const char *data, size_t len, json_t **out, char *err, size_t errlen)
{
    json_t *j = NULL;
    int rc = json_util_parse(data, len, &j, err, errlen);
    if (rc) return rc;
    if (!json_is_object(j)) {
        json_decref(j);
        if (err && errlen) snprintf(err, errlen, "request body must be a JSON object");
        return ERR_PARSE;
    }
    *out = j;
    return 0;
}

const json_t *json_util_field(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

const json_t *json_util_at(const json_t *obj, const char *a, const char *b)
{
    const json_t *v = json_object_get(obj, a); /* NULL for a NULL or non-object obj */
    return b ? json_object_get(v, b) : v;
}

const char *json_util_str_at(const json_t *obj, const char *a, const char *b)
{
    return json_string_value(json_util_at(obj, a, b));
}

long long json_util_int_at(const json_t *obj, const char *a, const char *b, long long def)
{
    const json_t *v = json_util_at(obj, a, b);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

int json_util_get_str(const json_t *obj, const char *key, const char **out, char *err,
                      size_t errlen)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_string(v)) {
        json_util_msg(err, errlen, "field \"%s\" must be a string", key);
        return ERR_INVAL;
    }
    *out = json_string_value(v);
    return 0;
}

int json_util_get_bool(const json_t *obj, const char *key, bool *out, char *err, size_t errlen)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_boolean(v)) {
        json_util_msg(err, errlen, "field \"%s\" must be a boolean", key);
        return ERR_INVAL;
    }
    *out = json_is_true(v);
    return 0;
}

int json_util_get_int(const json_t *obj, const char *key, long long min, long long max,
                      long long *out, char *err, size_t errlen)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        if (err && errlen)
            snprintf(err, errlen, "field \"%s\" must be an integer between %lld and %lld", key, min,
                     max);
        return ERR_INVAL;
    }
    *out = json_integer_value(v);
    return 0;
}

int json_util_get_double(const json_t *obj, const char *key, double min, double max, double *out,
                         char *err, size_t errlen)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v) || !(d >= min && d <= max)) {
        if (err && errlen)
            snprintf(err, errlen, "field \"%s\" must be a number between %g and %g", key, min, max);
        return ERR_INVAL;
    }
    *out = d;
    return 0;
}

struct json_util_sink {
    struct buf *b;
    int rc;
};

static int json_util_dump_cb(const char *buffer, size_t size, void *data)
{
    struct json_util_sink *s = data;
    s->rc = buf_append(s->b, buffer, size);
    return s->rc ? -1 : 0;
}

int json_util_dump(const json_t *j, struct buf *out)
{
    if (!j) return ERR_INVAL;
    size_t start = out->len;
    struct json_util_sink s = {.b = out, .rc = 0};
    if (json_dump_callback(j, json_util_dump_cb, &s,
                           JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) != 0) {
        if (out->data) {
            out->len = start;
            out->data[start] = 0;
        }
        return s.rc ? s.rc : ERR_NOMEM;
    }
    return 0;
}
