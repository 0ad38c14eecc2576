/* JSON Schema -> GBNF (engine/grammar/grammar.h compiles the result), for OpenAI's response_format
 * (json_object, json_schema) and tool parameters. The subset: type (one or a list), properties,
 * required, additionalProperties, items, minItems / maxItems, minLength / maxLength, enum, const,
 * anyOf / oneOf (oneOf is generated as anyOf), $ref into #/$defs/ or #/definitions/ (recursion
 * allowed), nullable, and annotations (title, description, default, examples, ...). Any other
 * keyword that constrains instances (pattern, format, minimum, multipleOf, ...) is refused with
 * ERR_UNSUPPORTED naming it and its place: a schema is never silently relaxed.
 *
 * The language generated is a subset of the schema's instances: properties come in the schema's
 * order (required ones always, optional ones each maybe), properties not declared are not
 * generated even where additionalProperties allows them, whitespace is at most one space between
 * tokens, and numbers are bounded to 16 digits, so a model (even one with random weights) always
 * writes an instance that validates. Pure code, any thread. */
#ifndef CINFER_ENGINE_GRAMMAR_SCHEMA_H
#define CINFER_ENGINE_GRAMMAR_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

struct buf;
struct grammar;
struct grammar_vocab;

#define GRAMMAR_SCHEMA_MAX_DEPTH 64  /* nesting of subschemas */
#define GRAMMAR_SCHEMA_MAX_REFS  256 /* distinct $ref targets */

/* Appends to `out` (borrowed; its bound limits the grammar's size) the GBNF of `schema`
 * (borrowed). 0, or ERR_UNSUPPORTED / ERR_INVAL (a keyword not supported, a malformed schema:
 * message in err naming the keyword and its JSON pointer), ERR_TOO_BIG, ERR_NOMEM. */
int grammar_schema_gbnf(const json_t *schema, struct buf *out, char *err, size_t errlen);

/* Appends the GBNF of any JSON object (response_format json_object). 0, ERR_TOO_BIG, ERR_NOMEM. */
int grammar_schema_object_gbnf(struct buf *out);

/* Appends the GBNF of exactly one of the n strings `choices` (borrowed; vLLM's guided_choice).
 * 0, ERR_INVAL (n == 0), ERR_TOO_BIG, ERR_NOMEM. */
int grammar_schema_choice_gbnf(const char *const *choices, size_t n, struct buf *out);

/* Parses `text` (len bytes, borrowed) as a JSON schema and compiles it for `v` (borrowed) into
 * *out (new, one reference). Errors as grammar_schema_gbnf and grammar_compile, ERR_PARSE for
 * JSON that does not parse. Any thread. */
int grammar_schema_compile_text(const char *text, size_t len, const struct grammar_vocab *v,
                                struct grammar **out, char *err, size_t errlen);

#endif
