/* Numeric ranges -> GBNF for JSON Schema's minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum and multipleOf (grammar_schema.c): decimal strings without leading zeros whose
 * value lies in a range, built digit by digit as llama.cpp's json-schema-to-grammar does, and the
 * integers of a range that are multiples of k. Internal to engine/grammar/. Pure code, any thread.
 *
 * The spellings: an optional "-" (never on a zero: "-0", "-0.0" are not written), an integer part
 * without leading zeros (at most GRAMMAR_RANGE_DIGITS digits where a side is unbounded, else the
 * bound's count), and for numbers an optional fraction of 1..GRAMMAR_RANGE_FRAC digits (trailing
 * zeros allowed: "1.50" is 1.5); no exponent. Each expression admits exactly the spellings of that
 * form whose value is in the range (and, for multiples, divisible by k). */
#ifndef CINFER_ENGINE_GRAMMAR_RANGE_H
#define CINFER_ENGINE_GRAMMAR_RANGE_H

#include <stdbool.h>
#include <stddef.h>

struct buf;

/* Bounds must lie within +-GRAMMAR_RANGE_MAX (18 digits). */
#define GRAMMAR_RANGE_MAX    999999999999999999LL
#define GRAMMAR_RANGE_DIGITS 16 /* integer digits written for an unbounded side, as j-int */
#define GRAMMAR_RANGE_FRAC   16 /* fraction digits a number may have, as j-number */
/* Rules a multiples grammar may write (grammar_range_multiple_gbnf): at most ~10 alternatives
 * each, so its text stays under ~1 MB. */
#define GRAMMAR_RANGE_MULTIPLE_RULES 4096

/* One side of an integer range: absent (unbounded), or a value, inclusive or exclusive. */
struct grammar_bound {
    bool set;
    bool exclusive;
    long long v;
};

/* One side of a number range: absent, or the decimal (-1)^neg * ip.frac, inclusive or exclusive.
 * frac holds the fraction's digits without trailing zeros ("" for an integer, "05" for .05); zero
 * is never neg. */
struct grammar_dec {
    bool set;
    bool exclusive;
    bool neg;
    unsigned long long ip; /* <= GRAMMAR_RANGE_MAX */
    char frac[GRAMMAR_RANGE_FRAC + 1];
};

/* Appends one parenthesised GBNF expression matching the JSON integers n with lo <= n <= hi
 * (inclusive; an unset side is unbounded, then at most 16 digits or the other bound's count are
 * written). 0, ERR_INVAL (an empty range), ERR_TOO_BIG (buffer bound), ERR_NOMEM. */
int grammar_range_int_gbnf(struct grammar_bound lo, struct grammar_bound hi, struct buf *out);

/* ------------------------------------------------------------- numbers (grammar_range_number.c) */

/* Appends one parenthesised GBNF expression matching the JSON numbers in the range given by
 * decimal bounds (each inclusive or exclusive; sets only lo/hi's set, exclusive, neg, ip, frac).
 * 0, ERR_INVAL (no value in range has a spelling), ERR_TOO_BIG, ERR_NOMEM. */
int grammar_range_number_gbnf(struct grammar_dec lo, struct grammar_dec hi, struct buf *out);

/* The decimal a JSON writer spells d with (the shortest that reads back as d: 0.1 is "0.1", not
 * 0.1000000000000000055...) into out->neg, ip and frac. 0, or ERR_UNSUPPORTED: not finite,
 * |d| > 1e15, or more than GRAMMAR_RANGE_FRAC decimals. */
int grammar_range_number_dec(double d, struct grammar_dec *out);

/* The sign of a - b (values only; set and exclusive are not read). */
int grammar_range_number_cmp(const struct grammar_dec *a, const struct grammar_dec *b);

/* The integer bound the decimal bound d makes (lower: the least integer >= d, > d when exclusive;
 * else the greatest <=, <), inclusive; unset when d is. */
struct grammar_bound grammar_range_number_int(const struct grammar_dec *d, bool lower);

/* ---------------------------------------------------------- multiples (grammar_range_multiple.c) */

/* Appends one parenthesised GBNF expression matching the JSON integers in [lo, hi] (as
 * grammar_range_int_gbnf) that are multiples of k (2 <= k <= GRAMMAR_RANGE_MAX). The digit
 * strings it needs are rules "<prefix>-<m>-<t>" (the m-digit strings equal to t mod k) that it
 * writes to `rules` (prefix: a rule name nothing else begins with). 0, ERR_INVAL (no multiple in
 * range), ERR_UNSUPPORTED (more than GRAMMAR_RANGE_MULTIPLE_RULES rules), ERR_TOO_BIG, ERR_NOMEM. */
int grammar_range_multiple_gbnf(struct grammar_bound lo, struct grammar_bound hi, long long k,
                                const char *prefix, struct buf *rules, struct buf *out);

/* ------------------------------------------------------- shared by the grammar_range*.c files */

/* A list of alternatives being appended to b: grammar_range_alt writes the separator before the
 * next (" " before the first, " | " after) and counts it. 0 or the buffer's error. */
struct grammar_range_alts {
    struct buf *b;
    int n;
};
int grammar_range_alt(struct grammar_range_alts *a);

/* Decimal digits of v. */
size_t grammar_range_ndigits(unsigned long long v);

/* Appends "( ... )" matching the decimal integers lo..hi without leading zeros (hi_inf: lo and up,
 * to GRAMMAR_RANGE_DIGITS digits or lo's count). 0 or the buffer's error. */
int grammar_range_nonneg(struct buf *b, unsigned long long lo, unsigned long long hi, bool hi_inf);

#endif
