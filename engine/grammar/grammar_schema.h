/* JSON Schema -> GBNF (engine/grammar/grammar.h compiles the result), for OpenAI's response_format
 * (json_object, json_schema) and tool parameters. The subset: type (one or a list), properties,
 * required, additionalProperties, items, minItems / maxItems, minLength / maxLength, pattern
 * (grammar_regex.h: the whole string must match), format (date-time, date, time, uuid, email,
 * hostname, ipv4, ipv6, uri: practical subsets; any other format is an annotation, not
 * enforced), minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers or draft 4's
 * booleans; exact, fractional bounds on a number included: grammar_range.h), multipleOf (an
 * integer, on integers and on numbers' integral values), enum, const, anyOf / oneOf
 * (oneOf is generated as anyOf), $ref into #/$defs/ or #/definitions/ (recursion allowed),
 * nullable, and annotations (title, description, default, examples, ...). Any other keyword
 * that constrains instances (patternProperties, ...) is refused with ERR_UNSUPPORTED
 * naming it and its place, as are pattern / format / bounds without a 'type' or next to $ref,
 * const, enum, anyOf or oneOf: a schema is never silently relaxed.
 *
 * The language generated is a subset of the schema's instances: properties come in the schema's
 * order (required ones always, optional ones each maybe), properties not declared are not
 * generated even where additionalProperties allows them, whitespace is at most one space between
 * tokens, numbers are bounded to 16 digits (bounded numbers have no exponent), and patterns
 * match whole strings, so a model (even one with random weights) always writes an instance that
 * validates. Pure code, any thread. */
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
