/* Multiples of k in an integer range -> GBNF (grammar_range.h grammar_range_multiple_gbnf). An
 * n-digit string s is a multiple's tail when s = t (mod k), t what the digits before it leave; so
 * the range recursion of grammar_range.c carries t: a digit d at place n turns t into
 * t - d * 10^(n-1) (mod k), and a free tail of m digits is the rule G(m, t) ::= one alternative
 * per class of digits that leave the same t', each followed by G(m-1, t'), G(0, 0) empty. G(m, t)
 * has a sentence iff t < 10^m (t is the least residue, and the m-digit strings are 0..10^m-1),
 * and a range part [lo, hi] one iff the least s >= lo with s = t is <= hi: dead alternatives are
 * never written. Rules are written once, when first named; there are at most
 * GRAMMAR_RANGE_MULTIPLE_RULES (k up to 10 per digit count when k has other prime factors than 2
 * and 5, fewer otherwise: 10^m = 0 mod 1000 once m >= 3). Pure. */
#include "engine/grammar/grammar_range.h"

#include "common/buf.h"
#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MULT_DIGITS 19                                 /* places of an 18-digit bound, and one */
#define MULT_SLOTS  (2 * GRAMMAR_RANGE_MULTIPLE_RULES) /* hash set of the rules written */

typedef unsigned long long ull;

struct mult {
    ull k;
    const char *prefix;
    struct buf *rules;
    ull pow[MULT_DIGITS]; /* 10^i mod k */
    ull ten[MULT_DIGITS]; /* 10^i */
    /* (MULT_SLOTS) a hash set of the rules written: G(len, t) at some slot; len 0: empty */
    ull *seen_t;
    unsigned char *seen_len;
    size_t n_rules;
};

/* t - d * 10^place (mod k). */
static ull mult_step(const struct mult *m, ull t, int d, size_t place)
{
    ull x = (ull)d * m->pow[place] % m->k;
    return (t + m->k - x) % m->k;
}

/* Whether some s in [lo, hi] is t mod k. */
static bool mult_exists(const struct mult *m, ull lo, ull hi, ull t)
{
    ull first = lo + (t + m->k - lo % m->k) % m->k;
    return first >= lo && first <= hi;
}

static ull mult_value(const char *s, size_t n)
{
    ull v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (ull)(s[i] - '0');
    return v;
}

static int mult_rule(struct mult *m, size_t len, ull t);

/* The alternatives of G(len, t) restricted to first digits [s, e]: a class per t' left, each
 * followed by G(len - 1, t'), written (rules first) to a. */
static int mult_classes(struct mult *m, struct grammar_range_alts *a, int s, int e, size_t len,
                        ull t)
{
    bool used[10] = {false};
    for (int d = s; d <= e; d++) {
        if (used[d]) continue;
        ull t2 = mult_step(m, t, d, len - 1);
        if (t2 >= m->ten[len - 1]) continue; /* no tail leaves 0 */
        int rc = len > 1 ? mult_rule(m, len - 1, t2) : 0;
        if (rc || (rc = grammar_range_alt(a)) || (rc = buf_putc(a->b, '['))) return rc;
        for (int x = d; x <= e; x++)
            if (!used[x] && mult_step(m, t, x, len - 1) == t2) {
                used[x] = true;
                if ((rc = buf_putc(a->b, (char)('0' + x)))) return rc;
            }
        if ((rc = buf_putc(a->b, ']'))) return rc;
        if (len > 1 && (rc = buf_printf(a->b, " %s-%zu-%llu", m->prefix, len - 1, t2))) return rc;
    }
    return 0;
}

/* Writes rule G(len, t) (len >= 1, t < 10^len) unless it exists. */
static int mult_rule(struct mult *m, size_t len, ull t)
{
    size_t h = (size_t)((t * 0x9E3779B97F4A7C15ull + len) % MULT_SLOTS);
    while (m->seen_len[h] && (m->seen_len[h] != len || m->seen_t[h] != t)) h = (h + 1) % MULT_SLOTS;
    if (m->seen_len[h]) return 0;
    if (m->n_rules == GRAMMAR_RANGE_MULTIPLE_RULES) return ERR_UNSUPPORTED;
    m->seen_len[h] = (unsigned char)len;
    m->seen_t[h] = t;
    m->n_rules++;
    struct buf body;
    buf_init(&body, m->rules->max);
    struct grammar_range_alts a = {&body, 0};
    int rc = mult_classes(m, &a, 0, 9, len, t);
    if (!rc) rc = buf_printf(m->rules, "%s-%zu-%llu ::=%s\n", m->prefix, len, t, buf_cstr(&body));
    buf_fini(&body);
    return rc;
}

/* The n-digit strings (leading zeros allowed) lo..hi that are t mod k, as one expression; one
 * exists (mult_exists). */
static int mult_digits(struct mult *m, struct buf *b, const char *lo, const char *hi, size_t n,
                       ull t)
{
    static const char zeros[] = "0000000000000000000", nines[] = "9999999999999999999";
    int rc, l0 = lo[0] - '0', h0 = hi[0] - '0';
    if (l0 == h0) {
        ull t2 = mult_step(m, t, l0, n - 1);
        if ((rc = buf_printf(b, "\"%d\"", l0)) || n == 1) return rc;
        return (rc = buf_putc(b, ' ')) ? rc : mult_digits(m, b, lo + 1, hi + 1, n - 1, t2);
    }
    bool all0 = !strncmp(lo + 1, zeros, n - 1), all9 = !strncmp(hi + 1, nines, n - 1);
    struct grammar_range_alts a = {b, 0};
    if ((rc = buf_putc(b, '('))) return rc;
    /* each outer digit with its constrained rest, when some rest leaves 0 */
    for (int side = 0; side < 2; side++) {
        if (side ? all9 : all0) continue;
        int d = side ? h0 : l0;
        ull t2 = mult_step(m, t, d, n - 1);
        ull rl = side ? 0 : mult_value(lo + 1, n - 1),
            rh = side ? mult_value(hi + 1, n - 1) : m->ten[n - 1] - 1;
        if (!mult_exists(m, rl, rh, t2)) continue;
        if ((rc = grammar_range_alt(&a)) || (rc = buf_printf(b, "\"%d\" ", d)) ||
            (rc = mult_digits(m, b, side ? zeros : lo + 1, side ? hi + 1 : nines, n - 1, t2)))
            return rc;
    }
    int s = all0 ? l0 : l0 + 1, e = all9 ? h0 : h0 - 1;
    if (s <= e && (rc = mult_classes(m, &a, s, e, n, t))) return rc;
    return buf_puts(b, " )");
}

/* The multiples lo..hi (hi_inf: lo and up, to GRAMMAR_RANGE_DIGITS digits or lo's count) into
 * a's list, a part per digit count that has one. */
static int mult_nonneg(struct mult *m, struct grammar_range_alts *a, ull lo, ull hi, bool hi_inf)
{
    size_t n_lo = grammar_range_ndigits(lo), n_hi = hi_inf ? n_lo : grammar_range_ndigits(hi);
    size_t cap = n_lo > GRAMMAR_RANGE_DIGITS ? n_lo : GRAMMAR_RANGE_DIGITS;
    if (hi_inf) n_hi = cap;
    int rc = 0;
    for (size_t n = n_lo; n <= n_hi && !rc; n++) {
        ull first = n == 1 ? 0 : m->ten[n - 1], last = m->ten[n] - 1;
        ull x = lo > first ? lo : first, y = !hi_inf && hi < last ? hi : last;
        if (x > y || !mult_exists(m, x, y, 0)) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof(xs), "%llu", x);
        snprintf(ys, sizeof(ys), "%llu", y);
        if (!(rc = grammar_range_alt(a))) rc = mult_digits(m, a->b, xs, ys, n, 0);
    }
    return rc;
}

/* Appends "sign ( multiples lo..hi )" to out's list when there is one. */
static int mult_branch(struct mult *m, struct grammar_range_alts *out, const char *sign, ull lo,
                       ull hi, bool hi_inf)
{
    struct buf b;
    buf_init(&b, out->b->max);
    struct grammar_range_alts a = {&b, 0};
    int rc = mult_nonneg(m, &a, lo, hi, hi_inf);
    if (!rc && a.n && !(rc = grammar_range_alt(out)))
        rc = buf_printf(out->b, "%s(%s )", sign, buf_cstr(&b));
    buf_fini(&b);
    return rc;
}

int grammar_range_multiple_gbnf(struct grammar_bound lo, struct grammar_bound hi, long long k,
                                const char *prefix, struct buf *rules, struct buf *out)
{
    if (k < 2 || k > GRAMMAR_RANGE_MAX) return ERR_INVAL;
    long long l = lo.v + (lo.exclusive ? 1 : 0), h = hi.v - (hi.exclusive ? 1 : 0);
    if (lo.set && hi.set && l > h) return ERR_INVAL;
    struct mult m = {.k = (ull)k, .prefix = prefix, .rules = rules};
    m.seen_t = calloc(MULT_SLOTS, sizeof(*m.seen_t));
    m.seen_len = calloc(MULT_SLOTS, sizeof(*m.seen_len));
    if (!m.seen_t || !m.seen_len) {
        free(m.seen_t);
        free(m.seen_len);
        return ERR_NOMEM;
    }
    m.pow[0] = 1 % m.k;
    m.ten[0] = 1;
    for (size_t i = 1; i < MULT_DIGITS; i++) {
        m.pow[i] = m.pow[i - 1] * 10 % m.k;
        m.ten[i] = m.ten[i - 1] * 10; /* up to 10^18: fits */
    }
    struct grammar_range_alts a = {out, 0};
    int rc = buf_putc(out, '(');
    if (!rc && (!lo.set || l < 0)) /* "-" and the magnitudes (never "-0") */
        rc = mult_branch(&m, &a, "\"-\" ", hi.set && h < 0 ? (ull)-h : 1, lo.set ? (ull)-l : 0,
                         !lo.set);
    if (!rc && (!hi.set || h >= 0))
        rc = mult_branch(&m, &a, "", lo.set && l > 0 ? (ull)l : 0, hi.set ? (ull)h : 0, !hi.set);
    free(m.seen_t);
    free(m.seen_len);
    if (!rc && !a.n) return ERR_INVAL;
    return rc ? rc : buf_puts(out, " )");
}
