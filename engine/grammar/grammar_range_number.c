/* Number ranges with decimal bounds -> GBNF (grammar_range.h grammar_range_number_*). A number
 * is "-"? then its magnitude m, and the magnitudes of [a, z] are, by integer part I:
 *   I = A = Z:     the fractions f with a.frac <= 0.f <= z.frac
 *   I = A < Z:     the fractions with 0.f >= a.frac;   A < I < Z: any fraction;
 *   I = Z > A:     the fractions with 0.f <= z.frac
 * (< where a side is exclusive; no fraction counts as 0.f = 0). The fractions against a bound's
 * digits are the integer recursion of grammar_range.c read left to right: a first digit strictly
 * between the bounds' takes any rest, one equal to a bound's takes the rest constrained by the
 * bound's next digits, so each level spawns at most two constrained children and the text is
 * O(GRAMMAR_RANGE_FRAC^2). Pure. */
#include "engine/grammar/grammar_range.h"

#include "common/buf.h"
#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One side of a fraction constraint: the bound's fraction digits still to compare (trailing
 * zeros cut), whether equal passes; on false: this side no longer constrains. */
struct frac_side {
    const char *d;
    bool excl, on;
};

static const struct frac_side frac_off = {"", false, false};

/* Whether no more digits (the rest of the fraction is 0) satisfies lo and hi. */
static bool frac_zero_ok(struct frac_side lo, struct frac_side hi)
{
    return (!lo.on || (!lo.d[0] && !lo.excl)) && (!hi.on || hi.d[0] || !hi.excl);
}

/* The side after a first digit equal to its bound's. */
static struct frac_side frac_next(struct frac_side f)
{
    return (struct frac_side){f.d[0] ? f.d + 1 : f.d, f.excl, true};
}

/* Appends to a, as alternatives, the digit strings of 1..r digits whose value as a fraction lies
 * within lo and hi (nothing when there is none). */
static int frac_alts(struct grammar_range_alts *a, struct frac_side lo, struct frac_side hi, int r)
{
    if (r == 0) return 0;
    if (lo.on && !lo.d[0] && !lo.excl) lo = frac_off; /* >= 0: no constraint */
    int l1 = lo.on ? (lo.d[0] ? lo.d[0] - '0' : 0) : -1;
    int h1 = hi.on ? (hi.d[0] ? hi.d[0] - '0' : 0) : 10;
    int rc = 0, s = l1 + 1, e = h1 - 1;
    if (s <= e) { /* strictly between the bounds' digits: any rest */
        if ((rc = grammar_range_alt(a))) return rc;
        rc = s == e ? buf_printf(a->b, "\"%d\"", s) : buf_printf(a->b, "[%d-%d]", s, e);
        if (!rc && r > 1) rc = buf_printf(a->b, " [0-9]{0,%d}", r - 1);
        if (rc) return rc;
    }
    for (int k = 0; k < 2; k++) { /* a bound's own digit: the rest against its next digits */
        int c = k ? h1 : l1;
        if (c < 0 || c > 9 || (k && lo.on && l1 == h1) || l1 > h1) continue;
        struct frac_side nlo = lo.on && c == l1 ? frac_next(lo) : frac_off;
        struct frac_side nhi = hi.on && c == h1 ? frac_next(hi) : frac_off;
        struct buf cb;
        buf_init(&cb, a->b->max);
        struct grammar_range_alts ca = {&cb, 0};
        bool zero = frac_zero_ok(nlo, nhi);
        rc = frac_alts(&ca, nlo, nhi, r - 1);
        if (!rc && (zero || ca.n) && !(rc = grammar_range_alt(a)) &&
            !(rc = buf_printf(a->b, "\"%d\"", c)) && ca.n)
            rc = buf_printf(a->b, zero ? " (%s )?" : " (%s )", buf_cstr(&cb));
        buf_fini(&cb);
        if (rc) return rc;
    }
    return 0;
}

/* An alternative of a: the integer part `ip` then the fractions lo and hi allow, when any. */
static int int_frac(struct grammar_range_alts *a, unsigned long long ip, struct frac_side lo,
                    struct frac_side hi)
{
    struct buf fb;
    buf_init(&fb, a->b->max);
    struct grammar_range_alts fa = {&fb, 0};
    bool zero = frac_zero_ok(lo, hi);
    int rc = frac_alts(&fa, lo, hi, GRAMMAR_RANGE_FRAC);
    if (!rc && (zero || fa.n) && !(rc = grammar_range_alt(a)) &&
        !(rc = buf_printf(a->b, "\"%llu\"", ip)) && fa.n)
        rc = buf_printf(a->b, zero ? " ( \".\" (%s ) )?" : " \".\" (%s )", buf_cstr(&fb));
    buf_fini(&fb);
    return rc;
}

/* A side of a magnitude range: the value ip.frac, exclusive or not. */
struct mag {
    unsigned long long ip;
    const char *frac;
    bool excl;
};

/* Alternatives of a for the magnitudes m with a <= m <= z (z_inf: no upper side). */
static int magnitude(struct grammar_range_alts *a, struct mag lo, struct mag z, bool z_inf)
{
    struct frac_side flo = {lo.frac, lo.excl, true}, fhi = {z.frac, z.excl, true};
    if (!z_inf && lo.ip == z.ip) return int_frac(a, lo.ip, flo, fhi);
    int rc = int_frac(a, lo.ip, flo, frac_off);
    if (!rc && (z_inf || lo.ip + 1 < z.ip)) { /* integer parts strictly between: any fraction */
        if (!(rc = grammar_range_alt(a)) &&
            !(rc = grammar_range_nonneg(a->b, lo.ip + 1, z_inf ? 0 : z.ip - 1, z_inf)))
            rc = buf_printf(a->b, " ( \".\" [0-9]{1,%d} )?", GRAMMAR_RANGE_FRAC);
    }
    return !rc && !z_inf ? int_frac(a, z.ip, frac_off, fhi) : rc;
}

/* Appends "sign ( alternatives )" to out's list when the magnitudes lo..z have any. */
static int branch(struct grammar_range_alts *out, const char *sign, struct mag lo, struct mag z,
                  bool z_inf)
{
    struct buf b;
    buf_init(&b, out->b->max);
    struct grammar_range_alts a = {&b, 0};
    int rc = magnitude(&a, lo, z, z_inf);
    if (!rc && a.n && !(rc = grammar_range_alt(out)))
        rc = buf_printf(out->b, "%s(%s )", sign, buf_cstr(&b));
    buf_fini(&b);
    return rc;
}

int grammar_range_number_gbnf(struct grammar_dec lo, struct grammar_dec hi, struct buf *out)
{
    if (lo.set && hi.set) {
        int c = grammar_range_number_cmp(&lo, &hi);
        if (c > 0 || (c == 0 && (lo.exclusive || hi.exclusive))) return ERR_INVAL;
    }
    struct grammar_range_alts a = {out, 0};
    int rc = buf_putc(out, '(');
    if (!rc && (!lo.set || lo.neg)) { /* x = -m, m > 0: m from -hi (or above 0) to -lo */
        bool top = !hi.set || !hi.neg;
        struct mag m_lo =
            top ? (struct mag){0, "", true} : (struct mag){hi.ip, hi.frac, hi.exclusive};
        rc = branch(&a, "\"-\" ", m_lo, (struct mag){lo.ip, lo.frac, lo.exclusive}, !lo.set);
    }
    if (!rc && (!hi.set || !hi.neg)) { /* x = m >= 0 */
        bool low = !lo.set || lo.neg;
        struct mag m_lo =
            low ? (struct mag){0, "", false} : (struct mag){lo.ip, lo.frac, lo.exclusive};
        rc = branch(&a, "", m_lo, (struct mag){hi.ip, hi.frac, hi.exclusive}, !hi.set);
    }
    if (!rc && !a.n) return ERR_INVAL; /* the values in range all need more fraction digits */
    return rc ? rc : buf_puts(out, " )");
}

int grammar_range_number_dec(double d, struct grammar_dec *out)
{
    if (!isfinite(d) || fabs(d) > 1e15) return ERR_UNSUPPORTED;
    char s[40];
    for (int p = 1; p <= 17; p++) { /* the shortest spelling that reads back as d */
        snprintf(s, sizeof(s), "%.*e", p - 1, d);
        if (strtod(s, NULL) == d) break;
    }
    /* s is "-"? D[.DDD]e(+|-)X: the digits, then where the point goes */
    char digits[24];
    size_t n = 0;
    const char *p = s + (s[0] == '-');
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && n < sizeof(digits) - 1) digits[n++] = *p;
    digits[n] = 0;
    long point = 1 + strtol(p + (*p == 'e'), NULL, 10); /* digits before the point */
    char ip[24] = "0";
    size_t k = 0, f = 0;
    for (long i = 0; i < point; i++) ip[k++] = i < (long)n ? digits[i] : '0';
    if (k) ip[k] = 0;
    /* the fraction: zeros up to the first digit, then the digits after the point (the shortest
     * spelling ends in a non-zero digit: every one counts) */
    char frac[GRAMMAR_RANGE_FRAC + 1];
    for (long i = point < (long)n ? point : (long)n; i < (long)n; i++) {
        if (f == GRAMMAR_RANGE_FRAC) return ERR_UNSUPPORTED;
        frac[f++] = i < 0 ? '0' : digits[i];
    }
    frac[f] = 0;
    memcpy(out->frac, frac, f + 1);
    out->ip = strtoull(ip, NULL, 10);
    out->neg = d < 0 && (out->ip || f);
    return 0;
}

int grammar_range_number_cmp(const struct grammar_dec *a, const struct grammar_dec *b)
{
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = a->ip < b->ip ? -1 : a->ip > b->ip;
    size_t la = strlen(a->frac), lb = strlen(b->frac);
    for (size_t i = 0; !c && (i < la || i < lb); i++) {
        char x = i < la ? a->frac[i] : '0', y = i < lb ? b->frac[i] : '0';
        c = x < y ? -1 : x > y;
    }
    return a->neg ? -c : c;
}

struct grammar_bound grammar_range_number_int(const struct grammar_dec *d, bool lower)
{
    if (!d->set) return (struct grammar_bound){0};
    long long v = d->neg ? -(long long)d->ip : (long long)d->ip; /* truncated toward 0 */
    bool frac = d->frac[0] != 0;
    /* the first integer beyond d: past the fraction in the bound's direction, else past d */
    if (lower && ((frac && !d->neg) || (!frac && d->exclusive))) v++;
    if (!lower && ((frac && d->neg) || (!frac && d->exclusive))) v--;
    return (struct grammar_bound){true, false, v};
}
