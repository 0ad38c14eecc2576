/* The grammar builder shared by the GBNF parser (grammar_gbnf.c) and the character-class lowering
 * (grammar_class.c): rules of alternatives of byte-level elements, grown while parsing, then
 * checked and frozen into a struct grammar (grammar_build_finish). Internal to engine/grammar/. */
#ifndef CINFER_ENGINE_GRAMMAR_BUILD_H
#define CINFER_ENGINE_GRAMMAR_BUILD_H

#include "engine/grammar/grammar_priv.h"

#include <stddef.h>
#include <stdint.h>

struct gb_alt {
    struct grammar_elem *e;
    int32_t n, cap;
};

struct gb_rule {
    char *name; /* owned */
    struct gb_alt *alts;
    int32_t n_alts, cap_alts;
    int line;     /* where it was defined (0: generated or undefined) */
    int ref_line; /* first reference, for "undefined rule" */
    bool defined;
};

/* A code point range [lo, hi]. */
struct gb_range {
    uint32_t lo, hi;
};

/* Sorts and merges r[0..n) in place, clipped to U+10FFFF; returns the new count. */
size_t gb_range_normalise(struct gb_range *r, size_t n);
/* Writes into out (capacity n + 1) the complement of normalised r[0..n); returns the count. */
size_t gb_range_complement(const struct gb_range *r, size_t n, struct gb_range *out);

struct gb {
    struct gb_rule *rules;
    int32_t n_rules, cap_rules;
    struct grammar_byteset *sets;
    int32_t n_sets, cap_sets;
    int32_t byte_set[256]; /* set index of each single-byte set, -1 until made */
    size_t n_elems;        /* elements so far, bounded by GRAMMAR_MAX_ELEMS */
    char *err;
    size_t errlen;
    int rc; /* first error */
};

void gb_init(struct gb *b, char *err, size_t errlen);
void gb_fini(struct gb *b);
/* Records the first error (formatted into b->err) and returns its code. */
int gb_fail(struct gb *b, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The rule named name[0..len) (created undefined when new); -1 on error. */
int32_t gb_rule_named(struct gb *b, const char *name, size_t len);
/* A new generated rule named "<base>_<n>"; -1 on error. */
int32_t gb_rule_new(struct gb *b, const char *base);
/* Starts a new alternative of rule r; returns it or NULL on error. The pointer is valid until the
 * next gb_alt_new on r. */
struct gb_alt *gb_alt_new(struct gb *b, int32_t r);
/* Appends an element; 0 or the error. */
int gb_push(struct gb *b, struct gb_alt *a, int32_t type, int32_t arg);
/* The index of set s (deduplicated); -1 on error. */
int32_t gb_set(struct gb *b, const struct grammar_byteset *s);
int32_t gb_byte(struct gb *b, unsigned byte);

/* Appends to alternative `a` of rule `owner` the element(s) matching one character of the code
 * point ranges (sorted, disjoint, or not: normalised here; negate: their complement): one byte set
 * for ASCII-only classes, else a reference to a generated rule of UTF-8 byte sequences. 0 or the
 * error. `a` may move: the caller re-fetches it through *a_io. */
int gb_class(struct gb *b, int32_t owner, struct gb_alt **a_io, struct gb_range *r, size_t n,
             bool negate);

/* Checks the rules (all defined, root present, no left recursion or empty repetition) and writes
 * the frozen grammar for vocabulary v to *out. 0 or the error (message in b->err). */
int gb_finish(struct gb *b, const struct grammar_vocab *v, struct grammar **out);

#endif
