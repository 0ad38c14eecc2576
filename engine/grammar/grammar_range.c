/* Numeric ranges -> GBNF (grammar_range.h). The integers of [lo, hi] with the same digit count n
 * are a digit-wise recursion: equal leading digits are a literal then the rest; otherwise
 *   lo[0] (lo[1..] .. 9..9) | [lo[0]+1 - hi[0]-1] [0-9]{n-1} | hi[0] (0..0 .. hi[1..])
 * with the outer alternatives folded into the middle class when lo[1..] is all zeros or hi[1..]
 * all nines. Each level spawns only one-sided ranges, so the text is O(n^2) for n digits. A range
 * over several digit counts is one such range per count (no leading zeros: a count n > 1 starts
 * at 10^(n-1)), a negative range is "-" and the range of magnitudes (never "-0").
 * Decimal ranges (numbers) are the same recursion over the integer part, and over the fraction's
 * digits where the integer part equals a bound's (grammar_range_number.c). Multiples of k
 * (grammar_range_multiple.c) run it with the remainder mod k as state. */
#include "engine/grammar/grammar_range.h"

#include "common/buf.h"
#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int grammar_range_alt(struct grammar_range_alts *a)
{
    return buf_puts(a->b, a->n++ ? " | " : " ");
}

static bool all_of(const char *s, size_t n, char c)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* The n-digit strings from lo to hi (both n digits, lo <= hi). */
static int digits(struct buf *b, const char *lo, const char *hi, size_t n)
{
    static const char zeros[] = "0000000000000000000", nines[] = "9999999999999999999";
    int rc;
    if (lo[0] == hi[0]) {
        if ((rc = buf_printf(b, "\"%c\"", lo[0]))) return rc;
        if (n == 1) return 0;
        return (rc = buf_putc(b, ' ')) ? rc : digits(b, lo + 1, hi + 1, n - 1);
    }
    bool all0 = all_of(lo + 1, n - 1, '0'), all9 = all_of(hi + 1, n - 1, '9');
    char s = lo[0], e = hi[0];
    struct grammar_range_alts a = {b, 0};
    if ((rc = buf_putc(b, '('))) return rc;
    if (!all0) {
        if ((rc = grammar_range_alt(&a)) || (rc = buf_printf(b, "\"%c\" ", s)) ||
            (rc = digits(b, lo + 1, nines, n - 1)))
            return rc;
        s++;
    }
    if (!all9) e--;
    if (s <= e) {
        if ((rc = grammar_range_alt(&a))) return rc;
        rc = s == e ? buf_printf(b, "\"%c\"", s) : buf_printf(b, "[%c-%c]", s, e);
        if (!rc && n > 1) rc = buf_printf(b, " [0-9]{%zu}", n - 1);
        if (rc) return rc;
    }
    if (!all9) {
        if ((rc = grammar_range_alt(&a)) || (rc = buf_printf(b, "\"%c\" ", hi[0])) ||
            (rc = digits(b, zeros, hi + 1, n - 1)))
            return rc;
    }
    return buf_puts(b, " )");
}

size_t grammar_range_ndigits(unsigned long long v)
{
    size_t n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

int grammar_range_nonneg(struct buf *b, unsigned long long lo, unsigned long long hi, bool hi_inf)
{
    size_t n_lo = grammar_range_ndigits(lo), n_hi = hi_inf ? n_lo : grammar_range_ndigits(hi);
    struct grammar_range_alts a = {b, 0};
    int rc = buf_putc(b, '(');
    unsigned long long p = 1; /* 10^(n-1) */
    for (size_t i = 1; i < n_lo; i++) p *= 10;
    for (size_t n = n_lo; n <= n_hi && !rc; n++, p *= 10) {
        unsigned long long first = n == 1 ? 0 : p, last = p * 10 - 1;
        unsigned long long x = lo > first ? lo : first, y = !hi_inf && hi < last ? hi : last;
        if (x > y) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof(xs), "%llu", x);
        snprintf(ys, sizeof(ys), "%llu", y);
        if (!(rc = grammar_range_alt(&a))) rc = digits(b, xs, ys, n);
    }
    size_t cap = n_lo > GRAMMAR_RANGE_DIGITS ? n_lo : GRAMMAR_RANGE_DIGITS;
    if (!rc && hi_inf && n_lo < cap) /* every longer number */
        if (!(rc = grammar_range_alt(&a)))
            rc = buf_printf(b, "[1-9] [0-9]{%zu,%zu}", n_lo, cap - 1);
    return rc ? rc : buf_puts(b, " )");
}

int grammar_range_int_gbnf(struct grammar_bound lo, struct grammar_bound hi, struct buf *out)
{
    long long l = lo.v + (lo.exclusive ? 1 : 0), h = hi.v - (hi.exclusive ? 1 : 0);
    if (lo.set && hi.set && l > h) return ERR_INVAL;
    struct grammar_range_alts a = {out, 0};
    int rc = buf_putc(out, '(');
    if (!rc && (!lo.set || l < 0)) { /* negative: "-" and the magnitudes */
        unsigned long long m_lo = hi.set && h < 0 ? (unsigned long long)-h : 1;
        if (!(rc = grammar_range_alt(&a)) && !(rc = buf_puts(out, "\"-\" ")))
            rc = grammar_range_nonneg(out, m_lo, lo.set ? (unsigned long long)-l : 0, !lo.set);
    }
    if (!rc && (!hi.set || h >= 0)) {
        unsigned long long n_lo = lo.set && l > 0 ? (unsigned long long)l : 0;
        if (!(rc = grammar_range_alt(&a)))
            rc = grammar_range_nonneg(out, n_lo, hi.set ? (unsigned long long)h : 0, !hi.set);
    }
    return rc ? rc : buf_puts(out, " )");
}
