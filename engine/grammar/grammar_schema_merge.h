/* Combining JSON schemas for the schema compiler (grammar_schema.c): allOf, and the constraining
 * keywords a schema has beside anyOf / oneOf / $ref, which each branch (or the target) must obey
 * too. Real schemas write "an object with these properties, one of which is required" as
 * {"type":"object","properties":{..},"oneOf":[{"required":["a"]},{"required":["b"]}]}: compiling
 * the branches alone would admit any value with "a" (any string, any number). The merge computes
 * one schema whose instances satisfy both inputs, for the keywords the compiler implements; what
 * it cannot intersect exactly (two different patterns, tuples, anyOf on both sides) is refused,
 * never relaxed. Pure code, any thread. */
#ifndef CINFER_ENGINE_GRAMMAR_SCHEMA_MERGE_H
#define CINFER_ENGINE_GRAMMAR_SCHEMA_MERGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define GRAMMAR_SCHEMA_MERGE_DEPTH 32 /* nested merges (allOf of allOf, merged properties) */

/* True for keywords that only annotate (title, description, $comment, id, x-*, editor hints such
 * as markdownDescription, $defs / definitions, ...): they never constrain an instance. */
bool grammar_schema_annotation(const char *key);

/* The target of a local $ref under root (borrowed): "#", "#/$defs/NAME" or "#/definitions/NAME";
 * NULL with *supported false for any other form, NULL with *supported true when it names
 * nothing. */
const json_t *grammar_schema_ref_target(const json_t *root, const char *ref, bool *supported);

/* Whether JSON value v is of schema `type` (a string or a list; NULL: any; an integer literal is
 * also a number, a real one only a number). */
bool grammar_schema_value_is(const json_t *v, const json_t *type);

/* Whether `key` is in schema m's `required` list. */
bool grammar_schema_requires(const json_t *m, const char *key);

/* Whether sch (an object) has keywords that constrain instances besides `except` (NULL: any). */
bool grammar_schema_constrains(const json_t *sch, const char *except);

/* *out (new reference): a schema whose instances are exactly those of both a and b (borrowed;
 * $ref resolved against root, allOf folded in), or json false when no instance satisfies both.
 * ERR_UNSUPPORTED with the reason in `why` for what cannot be intersected, ERR_NOMEM. */
int grammar_schema_merge(const json_t *root, const json_t *a, const json_t *b, int depth,
                         json_t **out, char *why, size_t whylen);

/* *out (new reference): sch (borrowed) with its allOf merged in and, when it has a $ref beside
 * constraining keywords, the target merged with them; sch itself (a new reference) when there is
 * neither. Errors as grammar_schema_merge. */
int grammar_schema_flatten(const json_t *root, const json_t *sch, int depth, json_t **out,
                           char *why, size_t whylen);

/* ---- patternProperties (grammar_schema_props.c) ---- */

struct buf;

/* Appends to out the whole-string regex equivalent to JSON Schema's search of pattern p[0..n)
 * (".*(?:p).*", the ends kept where p anchors them). ERR_UNSUPPORTED for an anchored pattern with
 * '|' (its anchors would bind to one alternative), ERR_TOO_BIG / ERR_NOMEM from out. */
int grammar_schema_pattern_wrap(const char *p, size_t n, struct buf *out, char *why, size_t whylen);

/* *match: whether key (NUL-terminated) has a match of pattern p[0..n) (a search). Errors of the
 * regex (ERR_PARSE, ERR_UNSUPPORTED: a construct not supported, named in why). */
int grammar_schema_pattern_search(const char *p, size_t n, const char *key, bool *match, char *why,
                                  size_t whylen);

/* *out (new): object schema sch (borrowed; has patternProperties) without patternProperties,
 * each declared property merged with the schema of every pattern that matches its name (a
 * property no value can satisfy then is dropped; json false when it is required). What is
 * generated is declared properties only, so that is all the patterns constrain. */
int grammar_schema_patterns_apply(const json_t *root, const json_t *sch, json_t **out, char *why,
                                  size_t whylen);

#endif
