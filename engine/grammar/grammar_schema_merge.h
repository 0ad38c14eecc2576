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

#endif
