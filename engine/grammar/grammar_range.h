/* Numeric ranges -> GBNF for JSON Schema's minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (grammar_schema.c): decimal strings without leading zeros whose value lies in
 * a range, built digit by digit as llama.cpp's json-schema-to-grammar does. Internal to
 * engine/grammar/. Pure code, any thread. */
#ifndef CINFER_ENGINE_GRAMMAR_RANGE_H
#define CINFER_ENGINE_GRAMMAR_RANGE_H

#include <stdbool.h>

struct buf;

/* Bounds must lie within +-GRAMMAR_RANGE_MAX (18 digits). */
#define GRAMMAR_RANGE_MAX 999999999999999999LL

/* One side of a range: absent (unbounded), or a value, inclusive or exclusive. */
struct grammar_bound {
    bool set;
    bool exclusive;
    long long v;
};

/* Appends one parenthesised GBNF expression matching the JSON integers n with lo <= n <= hi
 * (inclusive; an unset side is unbounded, then at most 16 digits or the other bound's count are
 * written). 0, ERR_INVAL (an empty range), ERR_TOO_BIG (buffer bound), ERR_NOMEM. */
int grammar_range_int_gbnf(struct grammar_bound lo, struct grammar_bound hi, struct buf *out);

/* Appends one parenthesised GBNF expression matching JSON numbers in the range given by integer
 * bounds (each inclusive or exclusive): an integer part in range, then a fraction of up to 16
 * digits where the bounds allow one; no exponent. 0, ERR_INVAL (empty), ERR_TOO_BIG, ERR_NOMEM. */
int grammar_range_number_gbnf(struct grammar_bound lo, struct grammar_bound hi, struct buf *out);

#endif
