/* Regular expressions -> GBNF (grammar_regex.h): a recursive-descent parser into a small tree
 * (character sets, concatenation, alternation, repetition), then one GBNF expression written from
 * it. Not a matcher: the grammar compiler and the pushdown matcher run what is written here.
 *
 * GBNF refuses a repetition of something that can be empty (x* with x nullable never stops
 * expanding), which regexes allow ((a?)*, (a|)+). Such a repetition is written over the
 * non-empty part of its body, ne(x) = L(x) minus the empty string: x{m,n} = ne(x){0,n} and
 * x* = ne(x)* when x is nullable, with ne pushed down the tree (ne(ab) = ne(a) b | ne(b) when both
 * are nullable). Every emission writes bytes, so the output bound also bounds the time. */
#include "engine/grammar/grammar_regex.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/utf8.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_build.h"
#include "engine/text/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RX_SET, RX_EMPTY, RX_CAT, RX_ALT, RX_REP };

#define RX_INF    (-1L)
#define RX_LENCAP (1LL << 40) /* lengths saturate here (the repeat bound keeps them finite) */

struct rx_node {
    int type;
    struct gb_range *r; /* RX_SET: normalised code point ranges (nr of them; 0: matches nothing) */
    size_t nr;
    struct rx_node **kid; /* RX_CAT, RX_ALT: nk children; RX_REP: kid[0] */
    size_t nk, capk;
    long min, max; /* RX_REP; max RX_INF: unbounded */
};

struct rx {
    const char *s;
    size_t len, pos;
    size_t n_nodes;
    bool json;
    char *err;
    size_t errlen;
    int rc;
};

static int rx_fail(struct rx *p, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int rx_fail(struct rx *p, int rc, const char *fmt, ...)
{
    if (p->rc) return p->rc;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    (void)err_vfmt(msg, sizeof(msg), rc, fmt, ap);
    va_end(ap);
    p->rc = rc;
    if (rc == ERR_NOMEM) return err_fmt(p->err, p->errlen, rc, "regex: out of memory");
    return err_fmt(p->err, p->errlen, rc, "regex at offset %zu: %s", p->pos, msg);
}

static void rx_free(struct rx_node *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->nk; i++) rx_free(n->kid[i]);
    free(n->kid);
    free(n->r);
    free(n);
}

static struct rx_node *rx_new(struct rx *p, int type)
{
    if (++p->n_nodes > GRAMMAR_REGEX_MAX_NODES) {
        rx_fail(p, ERR_TOO_BIG, "more than %d characters, classes and groups",
                GRAMMAR_REGEX_MAX_NODES);
        return NULL;
    }
    struct rx_node *n = calloc(1, sizeof(*n));
    if (!n) rx_fail(p, ERR_NOMEM, "%s", "");
    if (n) n->type = type;
    return n;
}

/* Appends child k to n (takes k, freed on error). */
static int rx_add(struct rx *p, struct rx_node *n, struct rx_node *k)
{
    if (n->nk == n->capk) {
        size_t cap = n->capk ? n->capk * 2 : 4;
        struct rx_node **v = realloc(n->kid, cap * sizeof(*v));
        if (!v) {
            rx_free(k);
            return rx_fail(p, ERR_NOMEM, "%s", "");
        }
        n->kid = v;
        n->capk = cap;
    }
    n->kid[n->nk++] = k;
    return 0;
}

/* ---------------------------------------------------------------- code point ranges */

struct rx_ranges {
    struct gb_range *v;
    size_t n, cap;
};

static int rx_range(struct rx *p, struct rx_ranges *r, uint32_t lo, uint32_t hi)
{
    if (r->n + 1 >= r->cap) { /* one spare slot: the complement may need n + 1 */
        size_t cap = r->cap ? r->cap * 2 : 8;
        struct gb_range *v = realloc(r->v, cap * sizeof(*v));
        if (!v) return rx_fail(p, ERR_NOMEM, "%s", "");
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (struct gb_range){lo, hi};
    return 0;
}

/* Replaces r by its complement over U+0000..U+10FFFF. */
static int rx_negate(struct rx *p, struct rx_ranges *r)
{
    r->n = gb_range_normalise(r->v, r->n);
    struct gb_range *c = malloc((r->n + 1) * sizeof(*c));
    if (!c) return rx_fail(p, ERR_NOMEM, "%s", "");
    size_t n = gb_range_complement(r->v, r->n, c);
    free(r->v);
    r->v = c;
    r->n = n;
    r->cap = n + 1;
    return 0;
}

/* ECMA-262 \d \w \s (WhiteSpace and LineTerminator), and their complements for upper case. */
static int rx_class_escape(struct rx *p, struct rx_ranges *r, int cls)
{
    static const struct gb_range d[] = {{'0', '9'}};
    static const struct gb_range w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const struct gb_range s[] = {
        {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    const struct gb_range *t = d;
    size_t n = 1;
    int lower = cls | 0x20;
    if (lower == 'w') t = w, n = sizeof(w) / sizeof(w[0]);
    if (lower == 's') t = s, n = sizeof(s) / sizeof(s[0]);
    if (cls == lower) {
        for (size_t i = 0; i < n; i++)
            if (rx_range(p, r, t[i].lo, t[i].hi)) return p->rc;
        return 0;
    }
    struct rx_ranges tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) rc = rx_range(p, &tmp, t[i].lo, t[i].hi);
    if (!rc) rc = rx_negate(p, &tmp);
    for (size_t i = 0; i < tmp.n && !rc; i++) rc = rx_range(p, r, tmp.v[i].lo, tmp.v[i].hi);
    free(tmp.v);
    return rc;
}

/* A set node of ranges r (taken). */
static struct rx_node *rx_set(struct rx *p, struct rx_ranges *r)
{
    struct rx_node *n = rx_new(p, RX_SET);
    if (!n) {
        free(r->v);
        return NULL;
    }
    n->nr = gb_range_normalise(r->v, r->n);
    n->r = r->v;
    r->v = NULL;
    return n;
}

static struct rx_node *rx_char(struct rx *p, uint32_t c)
{
    struct rx_ranges r = {0};
    if (rx_range(p, &r, c, c)) return NULL;
    return rx_set(p, &r);
}

/* ---------------------------------------------------------------- parser */

static int rx_peek(const struct rx *p, size_t ahead)
{
    return p->pos + ahead < p->len ? (unsigned char)p->s[p->pos + ahead] : -1;
}

static int rx_hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static int rx_hex(struct rx *p, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int d = rx_hexval(rx_peek(p, 0));
        if (d < 0) return rx_fail(p, ERR_PARSE, "%s", "expected a hexadecimal digit");
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* Exactly `digits` hex digits at p->pos + at, without consuming them; -1 when not there. */
static long rx_hex_at(const struct rx *p, size_t at, int digits)
{
    long v = 0;
    for (int i = 0; i < digits; i++) {
        int d = rx_hexval(rx_peek(p, at + (size_t)i));
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* \uHHHH, \u{H..}, and a surrogate pair \uD83D\uDE00 as one code point. */
static int rx_unicode(struct rx *p, uint32_t *out)
{
    uint32_t v = 0;
    int rc;
    if (rx_peek(p, 0) == '{') {
        p->pos++;
        int n = 0;
        for (int d; (d = rx_hexval(rx_peek(p, 0))) >= 0 && n < 7; n++, p->pos++)
            v = v * 16 + (uint32_t)d;
        if (!n || n > 6 || rx_peek(p, 0) != '}' || v > 0x10FFFF)
            return rx_fail(p, ERR_PARSE, "%s", "\\u{...} must hold 1 to 6 hex digits up to 10FFFF");
        p->pos++;
    } else if ((rc = rx_hex(p, 4, &v))) {
        return rc;
    }
    if (v >= 0xD800 && v <= 0xDBFF && rx_peek(p, 0) == '\\' && rx_peek(p, 1) == 'u') {
        long lo = rx_hex_at(p, 2, 4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            p->pos += 6;
            *out = 0x10000 + ((v - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            return 0;
        }
    }
    if (v >= 0xD800 && v <= 0xDFFF)
        return rx_fail(p, ERR_UNSUPPORTED, "a lone surrogate \\u%04X", (unsigned)v);
    *out = v;
    return 0;
}

/* One escape after '\' (p->pos past it): a character into *cp, or a class letter into *cls. */
static int rx_escape(struct rx *p, bool in_class, uint32_t *cp, int *cls)
{
    int e = rx_peek(p, 0);
    *cls = 0;
    if (e < 0) return rx_fail(p, ERR_PARSE, "%s", "a trailing backslash");
    p->pos++;
    switch (e) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S': *cls = e; return 0;
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'x': return rx_hex(p, 2, cp);
    case 'u': return rx_unicode(p, cp);
    case 'c': {
        int l = rx_peek(p, 0);
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
            return rx_fail(p, ERR_PARSE, "%s", "\\c must be followed by a letter");
        p->pos++;
        *cp = (uint32_t)(l % 32);
        return 0;
    }
    case '0':
        if (rx_peek(p, 0) >= '0' && rx_peek(p, 0) <= '9')
            return rx_fail(p, ERR_UNSUPPORTED, "%s", "octal escapes are not supported");
        *cp = 0;
        return 0;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 0;
        }
        return rx_fail(p, ERR_UNSUPPORTED, "%s", "word boundaries (\\b) are not supported");
    case 'B': return rx_fail(p, ERR_UNSUPPORTED, "%s", "word boundaries (\\B) are not supported");
    case 'k':
        return rx_fail(p, ERR_UNSUPPORTED, "%s", "backreferences (\\k<name>) are not supported");
    case 'p':
    case 'P':
        return rx_fail(p, ERR_UNSUPPORTED, "unicode property escapes (\\%c{...}) are not supported",
                       e);
    default: break;
    }
    if (e >= '1' && e <= '9')
        return rx_fail(p, ERR_UNSUPPORTED, "backreferences (\\%c) are not supported", e);
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || e >= 0x80)
        return rx_fail(p, ERR_PARSE, "unknown escape \\%c", e < 0x80 ? e : '?');
    *cp = (uint32_t)e; /* escaped punctuation: itself */
    return 0;
}

/* One UTF-8 character of the pattern. */
static int rx_utf8(struct rx *p, uint32_t *cp)
{
    if (utf8_seq_check((const uint8_t *)p->s + p->pos, p->len - p->pos) <= 0)
        return rx_fail(p, ERR_PARSE, "%s", "invalid UTF-8");
    *cp = unicode_decode(p->s, p->len, &p->pos);
    return 0;
}

/* [...] (p->pos at '['). ECMA: [] matches nothing, [^] anything, '-' first or last is literal. */
static struct rx_node *rx_class(struct rx *p)
{
    struct rx_ranges r = {0};
    bool negate = false;
    p->pos++;
    if (rx_peek(p, 0) == '^') negate = true, p->pos++;
    while (rx_peek(p, 0) != ']') {
        if (rx_peek(p, 0) < 0) {
            rx_fail(p, ERR_PARSE, "%s", "an unterminated character class");
            goto fail;
        }
        uint32_t lo = 0, hi;
        int cls = 0, cls2 = 0;
        if (rx_peek(p, 0) == '\\') {
            p->pos++;
            if (rx_escape(p, true, &lo, &cls)) goto fail;
        } else if (rx_utf8(p, &lo)) {
            goto fail;
        }
        if (cls) {
            if (rx_class_escape(p, &r, cls)) goto fail;
            if (rx_peek(p, 0) == '-' && rx_peek(p, 1) != ']' && rx_peek(p, 1) >= 0) {
                rx_fail(p, ERR_PARSE, "%s", "a range cannot start at a class escape");
                goto fail;
            }
            continue;
        }
        hi = lo;
        if (rx_peek(p, 0) == '-' && rx_peek(p, 1) != ']' && rx_peek(p, 1) >= 0) {
            p->pos++;
            if (rx_peek(p, 0) == '\\') {
                p->pos++;
                if (rx_escape(p, true, &hi, &cls2)) goto fail;
            } else if (rx_utf8(p, &hi)) {
                goto fail;
            }
            if (cls2) {
                rx_fail(p, ERR_PARSE, "%s", "a range cannot end at a class escape");
                goto fail;
            }
            if (hi < lo) {
                rx_fail(p, ERR_PARSE, "%s", "a character range out of order");
                goto fail;
            }
        }
        if (rx_range(p, &r, lo, hi)) goto fail;
    }
    p->pos++;
    if (negate && rx_negate(p, &r)) goto fail;
    return rx_set(p, &r);
fail:
    free(r.v);
    return NULL;
}

/* A count of {n,m} (saturated above GRAMMAR_MAX_REPEAT); -2 when the text there is no number. */
static long rx_count(struct rx *p)
{
    long v = 0;
    size_t start = p->pos;
    while (rx_peek(p, 0) >= '0' && rx_peek(p, 0) <= '9') {
        if (v <= GRAMMAR_MAX_REPEAT) v = v * 10 + (rx_peek(p, 0) - '0');
        p->pos++;
    }
    return p->pos == start ? -2 : v;
}

/* {n}, {n,} or {n,m} at p->pos ('{'): 1 with the bounds (p->pos past '}'), 0 when the text is
 * not one (a literal '{', as in ECMA-262 Annex B; p->pos unchanged), or the error. */
static int rx_braces(struct rx *p, long *min, long *max)
{
    size_t at = p->pos++;
    long lo = rx_count(p), hi = lo;
    if (lo != -2 && rx_peek(p, 0) == ',') {
        p->pos++;
        hi = rx_peek(p, 0) == '}' ? RX_INF : rx_count(p);
    }
    if (lo == -2 || hi == -2 || rx_peek(p, 0) != '}') {
        p->pos = at;
        return 0;
    }
    p->pos++;
    if (lo > GRAMMAR_MAX_REPEAT || hi > GRAMMAR_MAX_REPEAT) {
        p->pos = at;
        return rx_fail(p, ERR_TOO_BIG, "a repetition count above %d", GRAMMAR_MAX_REPEAT);
    }
    if (hi != RX_INF && hi < lo) {
        p->pos = at;
        return rx_fail(p, ERR_PARSE, "%s", "{n,m} with m < n");
    }
    *min = lo;
    *max = hi;
    return 1;
}

/* A quantifier at p->pos: 1 with *min, *max set (p->pos past it, and past a lazy '?': the
 * language is the same), 0 when there is none, or the error. */
static int rx_quant(struct rx *p, long *min, long *max)
{
    int c = rx_peek(p, 0);
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        *min = c == '+';
        *max = c == '?' ? 1 : RX_INF;
    } else if (c == '{') {
        int rc = rx_braces(p, min, max);
        if (rc <= 0) return rc;
    } else {
        return 0;
    }
    if (rx_peek(p, 0) == '?') p->pos++;
    return 1;
}

static struct rx_node *rx_alt(struct rx *p, int depth);

/* ( ... ), (?: ... ), (?<name> ... ) at p->pos. */
static struct rx_node *rx_group(struct rx *p, int depth)
{
    if (depth >= GRAMMAR_REGEX_MAX_DEPTH) {
        rx_fail(p, ERR_TOO_BIG, "groups nested deeper than %d", GRAMMAR_REGEX_MAX_DEPTH);
        return NULL;
    }
    p->pos++;
    if (rx_peek(p, 0) == '?') {
        int c = rx_peek(p, 1), d = rx_peek(p, 2);
        if (c == ':') {
            p->pos += 2;
        } else if (c == '=' || c == '!' || (c == '<' && (d == '=' || d == '!'))) {
            rx_fail(p, ERR_UNSUPPORTED, "%s", "lookahead and lookbehind are not supported");
            return NULL;
        } else if (c == '<') {
            p->pos += 2;
            while (rx_peek(p, 0) >= 0 && rx_peek(p, 0) != '>' && rx_peek(p, 0) != ')') p->pos++;
            if (rx_peek(p, 0) != '>' || p->s[p->pos - 1] == '<') {
                rx_fail(p, ERR_PARSE, "%s", "a malformed group name (?<name>...)");
                return NULL;
            }
            p->pos++;
        } else {
            rx_fail(p, ERR_UNSUPPORTED, "%s",
                    "inline flags and other (?...) groups are not supported");
            return NULL;
        }
    }
    struct rx_node *n = rx_alt(p, depth + 1);
    if (!n) return NULL;
    if (rx_peek(p, 0) != ')') {
        rx_free(n);
        rx_fail(p, ERR_PARSE, "%s", "an unterminated group (missing ')')");
        return NULL;
    }
    p->pos++;
    return n;
}

/* One atom at p->pos (not a quantifier); NULL on error. */
static struct rx_node *rx_atom(struct rx *p, int depth)
{
    int c = rx_peek(p, 0);
    if (c == '(') return rx_group(p, depth);
    if (c == '[') return rx_class(p);
    if (c == '.') { /* any character but the ECMA line terminators */
        struct rx_ranges r = {0};
        p->pos++;
        if (rx_range(p, &r, '\n', '\n') || rx_range(p, &r, '\r', '\r') ||
            rx_range(p, &r, 0x2028, 0x2029) || rx_negate(p, &r)) {
            free(r.v);
            return NULL;
        }
        return rx_set(p, &r);
    }
    uint32_t cp = 0;
    if (c == '\\') {
        int cls;
        p->pos++;
        if (rx_escape(p, false, &cp, &cls)) return NULL;
        if (cls) {
            struct rx_ranges r = {0};
            if (rx_class_escape(p, &r, cls)) {
                free(r.v);
                return NULL;
            }
            return rx_set(p, &r);
        }
        return rx_char(p, cp);
    }
    if (rx_utf8(p, &cp)) return NULL;
    return rx_char(p, cp);
}

/* A concatenation up to '|', ')' or the end. ^ and $ are accepted only where they stand for the
 * ends of the whole string: at the start / end of a top-level alternative. */
static struct rx_node *rx_cat(struct rx *p, int depth)
{
    struct rx_node *cat = rx_new(p, RX_CAT);
    if (!cat) return NULL;
    for (;;) {
        int c = rx_peek(p, 0);
        if (c < 0 || c == '|' || c == ')') return cat;
        if (c == '^') {
            if (depth == 0 && cat->nk == 0 && p->pos == 0) {
                p->pos++;
                continue;
            }
            if (depth == 0 && cat->nk == 0 && p->s[p->pos - 1] == '|') {
                p->pos++;
                continue;
            }
            rx_fail(p, ERR_UNSUPPORTED, "%s", "'^' is supported only at the start of the pattern");
            break;
        }
        if (c == '$') {
            int d = rx_peek(p, 1);
            if (depth == 0 && (d < 0 || d == '|')) {
                p->pos++;
                continue;
            }
            rx_fail(p, ERR_UNSUPPORTED, "%s", "'$' is supported only at the end of the pattern");
            break;
        }
        long min, max;
        if (c == '*' || c == '+' || c == '?') {
            rx_fail(p, ERR_PARSE, "'%c' has nothing to repeat", c);
            break;
        }
        if (c == '{') {
            size_t at = p->pos;
            int q = rx_braces(p, &min, &max);
            if (q < 0) break;
            if (q > 0) {
                p->pos = at;
                rx_fail(p, ERR_PARSE, "%s", "'{' has nothing to repeat");
                break;
            }
        }
        struct rx_node *a = rx_atom(p, depth);
        if (!a) break;
        int q = rx_quant(p, &min, &max);
        if (q > 0) {
            struct rx_node *r = rx_new(p, RX_REP);
            if (!r || rx_add(p, r, a)) {
                if (!r) rx_free(a);
                free(r);
                break;
            }
            r->min = min;
            r->max = max;
            a = r;
            int n = rx_peek(p, 0);
            if (n == '*' || n == '+' || n == '?' || (n == '{' && rx_braces(p, &min, &max) != 0)) {
                rx_free(a);
                rx_fail(p, ERR_PARSE, "%s", "a quantifier has nothing to repeat");
                break;
            }
        }
        if (q < 0 || p->rc) {
            rx_free(a);
            break;
        }
        if (rx_add(p, cat, a)) break;
    }
    rx_free(cat);
    return NULL;
}

static struct rx_node *rx_alt(struct rx *p, int depth)
{
    struct rx_node *first = rx_cat(p, depth);
    if (!first || rx_peek(p, 0) != '|') return first;
    struct rx_node *alt = rx_new(p, RX_ALT);
    if (!alt || rx_add(p, alt, first)) {
        if (!alt) rx_free(first);
        return NULL;
    }
    while (rx_peek(p, 0) == '|') {
        p->pos++;
        struct rx_node *k = rx_cat(p, depth);
        if (!k || rx_add(p, alt, k)) {
            rx_free(alt);
            return NULL;
        }
    }
    return alt;
}

/* ---------------------------------------------------------------- properties */

static bool rx_nullable(const struct rx_node *n)
{
    switch (n->type) {
    case RX_SET: return false;
    case RX_EMPTY: return true;
    case RX_REP: return n->min == 0 || rx_nullable(n->kid[0]);
    case RX_CAT:
        for (size_t i = 0; i < n->nk; i++)
            if (!rx_nullable(n->kid[i])) return false;
        return true;
    default:
        for (size_t i = 0; i < n->nk; i++)
            if (rx_nullable(n->kid[i])) return true;
        return false;
    }
}

/* Whether n may match a non-empty string (an over-approximation is harmless: see rx_emit). */
static bool rx_canne(const struct rx_node *n)
{
    switch (n->type) {
    case RX_SET: return n->nr > 0;
    case RX_EMPTY: return false;
    case RX_REP: return n->max != 0 && rx_canne(n->kid[0]);
    default:
        for (size_t i = 0; i < n->nk; i++)
            if (rx_canne(n->kid[i])) return true;
        return false;
    }
}

static long long rx_sat(long long v)
{
    return v > RX_LENCAP ? RX_LENCAP : v;
}

/* Shortest and longest match in characters (*hi -1: unbounded). */
static void rx_lengths(const struct rx_node *n, long long *lo, long long *hi)
{
    long long a, b;
    switch (n->type) {
    case RX_SET: *lo = *hi = 1; return;
    case RX_EMPTY: *lo = *hi = 0; return;
    case RX_REP:
        rx_lengths(n->kid[0], &a, &b);
        *lo = rx_sat(a * n->min);
        *hi = n->max == RX_INF ? (b == 0 ? 0 : -1) : b < 0 ? -1 : rx_sat(b * n->max);
        return;
    case RX_CAT:
        *lo = *hi = 0;
        for (size_t i = 0; i < n->nk; i++) {
            rx_lengths(n->kid[i], &a, &b);
            *lo = rx_sat(*lo + a);
            *hi = *hi < 0 || b < 0 ? -1 : rx_sat(*hi + b);
        }
        return;
    default:
        *lo = RX_LENCAP;
        *hi = 0;
        for (size_t i = 0; i < n->nk; i++) {
            rx_lengths(n->kid[i], &a, &b);
            if (a < *lo) *lo = a;
            if (*hi >= 0 && (b < 0 || b > *hi)) *hi = b;
        }
        if (!n->nk) *lo = 0;
    }
}

/* minLength / maxLength against the regex (grammar_regex_opts). */
static int rx_bound_lengths(struct rx *p, struct rx_node *root, long long min, long long max)
{
    if (min < 0 && max < 0) return 0;
    long long lo, hi;
    rx_lengths(root, &lo, &hi);
    if ((min < 0 || lo >= min) && (max < 0 || (hi >= 0 && hi <= max))) return 0;
    struct rx_node *n = root;
    while ((n->type == RX_CAT || n->type == RX_ALT) && n->nk == 1) n = n->kid[0];
    long long a, b;
    if (n->type == RX_REP) rx_lengths(n->kid[0], &a, &b);
    if (n->type != RX_REP || a != 1 || b != 1)
        return rx_fail(p, ERR_UNSUPPORTED,
                       "minLength/maxLength together with a pattern whose matches are not all "
                       "within them (supported: a pattern that fits them, or one repetition of "
                       "one character such as [a-z]+)");
    long nmin = n->min, nmax = n->max;
    if (min > nmin) nmin = (long)min;
    if (max >= 0 && (nmax == RX_INF || max < nmax)) nmax = (long)max;
    if (nmax != RX_INF && nmax < nmin)
        return rx_fail(p, ERR_INVAL, "%s", "no string matches both the pattern and the lengths");
    n->min = nmin;
    n->max = nmax;
    return 0;
}

/* ---------------------------------------------------------------- emission */

/* One code point inside "..." or [...] of GBNF. */
static int rx_put_cp(struct buf *b, uint32_t c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ' ||
        c == '_' || c == ',' || c == ':' || c == '@' || c == '#' || c == '=' || c == '!' ||
        c == '%' || c == '&' || c == '~' || c == '<' || c == '>' || c == '\'' || c == ';')
        return buf_putc(b, (char)c);
    if (c < 0x80) return buf_printf(b, "\\x%02X", c);
    if (c <= 0xFFFF) return buf_printf(b, "\\u%04X", c);
    return buf_printf(b, "\\U%08X", c);
}

static int rx_put_class(struct buf *b, const struct gb_range *r, size_t n)
{
    if (n == 1 && r[0].lo == r[0].hi) {
        int rc = buf_putc(b, '"');
        if (!rc) rc = rx_put_cp(b, r[0].lo);
        return rc ? rc : buf_putc(b, '"');
    }
    int rc = buf_putc(b, '[');
    for (size_t i = 0; i < n && !rc; i++) {
        rc = rx_put_cp(b, r[i].lo);
        if (!rc && r[i].hi != r[i].lo) {
            if (!(rc = buf_putc(b, '-'))) rc = rx_put_cp(b, r[i].hi);
        }
    }
    return rc ? rc : buf_putc(b, ']');
}

static bool rx_set_has(const struct rx_node *n, uint32_t c)
{
    for (size_t i = 0; i < n->nr; i++)
        if (c >= n->r[i].lo && c <= n->r[i].hi) return true;
    return false;
}

/* A set as JSON string content: the characters a JSON string holds as themselves in one class,
 * '"', '\' and control characters as their escapes. */
static int rx_put_json_set(struct buf *b, const struct rx_node *n)
{
    struct gb_range *plain = malloc((n->nr * 3 + 1) * sizeof(*plain));
    if (!plain) return ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n->nr; i++) {
        uint32_t lo = n->r[i].lo, hi = n->r[i].hi;
        if (lo < 0x20) lo = 0x20;
        /* cut out 0x22 and 0x5C */
        static const uint32_t cut[] = {0x22, 0x5C};
        for (int j = 0; j < 2 && lo <= hi; j++) {
            if (cut[j] < lo || cut[j] > hi) continue;
            if (cut[j] > lo) plain[k++] = (struct gb_range){lo, cut[j] - 1};
            lo = cut[j] + 1;
        }
        if (lo <= hi) plain[k++] = (struct gb_range){lo, hi};
    }
    int rc = 0, alts = 0;
    bool paren = false;
    char esc[40][8];
    int n_esc = 0;
    static const char shortform[] = {'b', 't', 'n', 0, 'f', 'r'}; /* 0x08 .. 0x0D */
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!rx_set_has(n, c)) continue;
        if (c >= 0x08 && c <= 0x0D && shortform[c - 8])
            snprintf(esc[n_esc++], 8, "\\\\%c", shortform[c - 8]);
        else
            snprintf(esc[n_esc++], 8, "\\\\u%04x", c);
    }
    if (rx_set_has(n, '"')) snprintf(esc[n_esc++], 8, "\\\\\\\"");
    if (rx_set_has(n, '\\')) snprintf(esc[n_esc++], 8, "\\\\\\\\");
    if ((k > 0) + n_esc > 1) paren = true, rc = buf_puts(b, "( ");
    if (!rc && (k > 0 || n_esc == 0)) rc = rx_put_class(b, plain, k), alts++;
    for (int i = 0; i < n_esc && !rc; i++)
        rc = buf_printf(b, "%s\"%s\"", alts++ ? " | " : "", esc[i]);
    if (!rc && paren) rc = buf_puts(b, " )");
    free(plain);
    return rc;
}

static int rx_emit(struct rx *p, struct buf *b, const struct rx_node *n, bool ne);

/* Repetition "( x ){min,max}" in GBNF's spelling. */
static int rx_put_rep(struct rx *p, struct buf *b, const struct rx_node *x, bool ne, long min,
                      long max)
{
    int rc = buf_puts(b, "( ");
    if (!rc) rc = rx_emit(p, b, x, ne);
    if (rc) return rc;
    if (max == RX_INF)
        return min == 0   ? buf_puts(b, " )*")
               : min == 1 ? buf_puts(b, " )+")
                          : buf_printf(b, " ){%ld,}", min);
    if (min == 0 && max == 1) return buf_puts(b, " )?");
    if (min == 1 && max == 1) return buf_puts(b, " )");
    if (min == max) return buf_printf(b, " ){%ld}", min);
    return buf_printf(b, " ){%ld,%ld}", min, max);
}

/* Writes n (ne: only its non-empty strings; the caller checked rx_canne). */
static int rx_emit(struct rx *p, struct buf *b, const struct rx_node *n, bool ne)
{
    int rc = 0;
    if (ne && !rx_nullable(n)) ne = false;
    switch (n->type) {
    case RX_SET: return p->json ? rx_put_json_set(b, n) : rx_put_class(b, n->r, n->nr);
    case RX_EMPTY: return buf_puts(b, "\"\"");
    case RX_REP: {
        const struct rx_node *x = n->kid[0];
        if (n->max == 0 || !rx_canne(x)) return buf_puts(b, "\"\"");
        if (rx_nullable(x)) /* x{m,n} = ne(x){0,n} */
            return rx_put_rep(p, b, x, true, ne ? 1 : 0, n->max);
        return rx_put_rep(p, b, x, false, ne && n->min == 0 ? 1 : n->min, n->max);
    }
    case RX_CAT:
        if (n->nk == 0) return buf_puts(b, "\"\"");
        if (!ne) {
            rc = buf_puts(b, "(");
            for (size_t i = 0; i < n->nk && !rc; i++)
                if (!(rc = buf_putc(b, ' '))) rc = rx_emit(p, b, n->kid[i], false);
            return rc ? rc : buf_puts(b, " )");
        }
        /* every child nullable: ne(c_i) c_{i+1} .. c_n for each i */
        rc = buf_puts(b, "(");
        for (size_t i = 0, alts = 0; i < n->nk && !rc; i++) {
            if (!rx_canne(n->kid[i])) continue;
            rc = buf_puts(b, alts++ ? " | " : " ");
            if (!rc) rc = rx_emit(p, b, n->kid[i], true);
            for (size_t j = i + 1; j < n->nk && !rc; j++)
                if (!(rc = buf_putc(b, ' '))) rc = rx_emit(p, b, n->kid[j], false);
        }
        return rc ? rc : buf_puts(b, " )");
    default:
        rc = buf_puts(b, "(");
        for (size_t i = 0, alts = 0; i < n->nk && !rc; i++) {
            if (ne && !rx_canne(n->kid[i])) continue;
            rc = buf_puts(b, alts++ ? " | " : " ");
            if (!rc) rc = rx_emit(p, b, n->kid[i], ne);
        }
        return rc ? rc : buf_puts(b, " )");
    }
}

int grammar_regex_gbnf(const char *re, size_t len, const struct grammar_regex_opts *o,
                       struct buf *out, char *err, size_t errlen)
{
    struct rx p = {.s = re ? re : "",
                   .len = re ? len : 0,
                   .json = o->json_string,
                   .err = err,
                   .errlen = errlen};
    if (err && errlen) err[0] = 0;
    if (p.len > GRAMMAR_REGEX_MAX_LEN)
        return err_fmt(err, errlen, ERR_TOO_BIG, "regex: longer than %u bytes",
                       GRAMMAR_REGEX_MAX_LEN);
    struct rx_node *root = rx_alt(&p, 0);
    struct buf b;
    size_t room = out->max ? (out->max > out->len ? out->max - out->len : 1) : GRAMMAR_MAX_TEXT;
    buf_init(&b, room);
    int rc = p.rc;
    if (!rc && p.pos < p.len) rc = rx_fail(&p, ERR_PARSE, "%s", "an unmatched ')'");
    if (!rc) rc = rx_bound_lengths(&p, root, o->min_chars, o->max_chars);
    if (!rc) rc = rx_emit(&p, &b, root, false);
    if (!rc) rc = buf_append(out, b.data ? b.data : "", b.len);
    if (rc == ERR_TOO_BIG && !(err && err[0]))
        err_fmt(err, errlen, rc, "regex: the grammar is larger than %zu bytes", room);
    else if (rc == ERR_NOMEM && !(err && err[0]))
        err_fmt(err, errlen, rc, "regex: out of memory");
    buf_fini(&b);
    rx_free(root);
    return rc;
}

int grammar_regex_root_gbnf(const char *re, size_t len, struct buf *out, char *err, size_t errlen)
{
    struct grammar_regex_opts o = {.json_string = false, .min_chars = -1, .max_chars = -1};
    int rc = buf_puts(out, "root ::= ");
    if (!rc) rc = grammar_regex_gbnf(re, len, &o, out, err, errlen);
    if (!rc) rc = buf_putc(out, '\n');
    if (rc == ERR_TOO_BIG && err && !err[0])
        err_fmt(err, errlen, rc, "regex: the grammar is too large");
    return rc;
}
