/* What the JSON Schema converter's files share (grammar_schema.c: the schema walk, types, objects,
 * arrays, strings, $ref; grammar_schema_number.c: the numeric keywords): its state, its error
 * message, and the numeric part's entry. Internal to engine/grammar/. */
#ifndef CINFER_ENGINE_GRAMMAR_SCHEMA_PRIV_H
#define CINFER_ENGINE_GRAMMAR_SCHEMA_PRIV_H

#include "common/err.h"
#include "engine/grammar/grammar_schema.h"

#include <stdbool.h>
#include <stdio.h>

struct buf;

#define GS_NAME 24 /* bytes of a rule name */

/* One conversion: the schema, the grammar being written (one rule per subschema "s<N>", per
 * $ref target "r<N>"), the error message. */
struct gs {
    const json_t *root;
    struct buf *out;
    int n_rules;
    const char *refs[GRAMMAR_SCHEMA_MAX_REFS]; /* borrowed from the schema */
    int n_refs;
    char *err;
    size_t errlen;
    int depth;
    json_t *keep; /* schemas merged while compiling (an array): their strings are borrowed */
};

/* Writes "schema: <fmt with what> (at '<path>')" to s->err and returns rc. */
static inline int gs_fail(struct gs *s, int rc, const char *path, const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, what);
    return err_fmt(s->err, s->errlen, rc, "schema: %s (at '%s')", msg, path);
}

/* The body of an 'integer' (integer) or 'number' schema sch at `path` into b: in its range when
 * bounds are given, a multiple of multipleOf (rules it needs go to s->out). 0, or an error with
 * s->err set (ERR_INVAL, ERR_UNSUPPORTED naming the keyword, ERR_TOO_BIG, ERR_NOMEM). */
int grammar_schema_number_gbnf(struct gs *s, const json_t *sch, const char *path, bool integer,
                               struct buf *b);

#endif
