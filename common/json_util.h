/* Small jansson helpers for the HTTP layers: parsing a request body with a precise error, typed field
 * getters whose errors name the field ("field \"max_tokens\" must be an integer between 1 and 4096"),
 * path getters for nested objects (json_util_str_at(pod, "metadata", "name")), and dumping a value
 * into a bounded struct buf. Not a schema validator, and nothing here owns state:
 * every function may be called from any thread on values that thread owns.
 *
 * Getters treat an absent key and a JSON null the same way (ERR_NOT_FOUND), since OpenAI clients send
 * null for "use the default"; callers decide whether a missing field is an error. */
#ifndef CINFER_COMMON_JSON_UTIL_H
#define CINFER_COMMON_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

/* Parses `len` bytes at `data` (borrowed; need not be NUL-terminated) as one JSON value. Duplicate
 * object keys and NUL bytes inside strings are rejected. On success writes a new reference to *out
 * (caller json_decref()s). On failure writes "invalid JSON at line L, column C: reason" into `err`
 * (errlen bytes, always NUL-terminated when errlen > 0) and returns ERR_PARSE. */
int json_util_parse(const char *data, size_t len, json_t **out, char *err, size_t errlen);

/* Like json_util_parse but the value must be an object ("request body must be a JSON object"). */
int json_util_parse_object(const char *data, size_t len, json_t **out, char *err, size_t errlen);

/* The value of `key` in `obj` (borrowed from obj), or NULL when obj is not an object, the key is
 * absent or its value is null. */
const json_t *json_util_field(const json_t *obj, const char *key);

/* Path getters for nested objects (Kubernetes objects: "metadata", "name"): the value at obj.a, or
 * obj.a.b when `b` is not NULL, borrowed from obj; NULL when a step is absent or not an object.
 * They never fail and never log: callers decide what a missing field means. */
const json_t *json_util_at(const json_t *obj, const char *a, const char *b);
/* The string at obj.a[.b] (borrowed), or NULL when absent or not a string. */
const char *json_util_str_at(const json_t *obj, const char *a, const char *b);
/* The integer at obj.a[.b], or `def` when absent or not an integer. */
long long json_util_int_at(const json_t *obj, const char *a, const char *b, long long def);

/* Typed getters on object `obj` (borrowed). Each returns 0 and writes *out, ERR_NOT_FOUND when the key
 * is absent or null (*out untouched, no message), or ERR_INVAL with a message naming `key` in `err`.
 * get_str: *out is borrowed from `obj` and lives as long as the value does. */
int json_util_get_str(const json_t *obj, const char *key, const char **out, char *err,
                      size_t errlen);
int json_util_get_bool(const json_t *obj, const char *key, bool *out, char *err, size_t errlen);
/* An integer within [min, max]; reals are rejected even when integral (2.0), as OpenAI does. */
int json_util_get_int(const json_t *obj, const char *key, long long min, long long max,
                      long long *out, char *err, size_t errlen);
/* A number (integer or real) within [min, max]. */
int json_util_get_double(const json_t *obj, const char *key, double min, double max, double *out,
                         char *err, size_t errlen);

/* Appends the compact encoding of `j` (borrowed) to `out` (borrowed; its max bounds the size),
 * keeping object key order. Returns 0, ERR_TOO_BIG or ERR_NOMEM; on failure `out` is restored to
 * the length it had before the call. */
int json_util_dump(const json_t *j, struct buf *out); /* NULL j: ERR_INVAL */

#endif
