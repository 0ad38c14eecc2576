/* GBNF text -> the grammar builder. The syntax of llama.cpp's grammars (grammars/README.md): rules
 * `name ::= alternatives` ending at a newline outside parentheses, `|`, "literals", [classes],
 * `.`, ( groups ), postfix * + ? {m} {m,} {m,n}, and # comments. Repetitions are rewritten into
 * right-recursive rules as llama.cpp does (x* -> r ::= x r | ""), which the matcher runs in
 * constant stack depth because a reference at the end of an alternative is a tail call. */
#include "engine/grammar/grammar_build.h"

#include "common/err.h"
#include "common/utf8.h"
#include "engine/text/unicode.h"

#include <stdlib.h>
#include <string.h>

struct gp {
    struct gb *b;
    const char *s;
    size_t len, pos;
    int line;
    size_t line_start;
};

static int gp_fail(struct gp *p, const char *what)
{
    return gb_fail(p->b, ERR_PARSE, "grammar line %d, column %zu: %s", p->line,
                   p->pos - p->line_start + 1, what);
}

static int gp_peek(const struct gp *p, size_t ahead)
{
    return p->pos + ahead < p->len ? (unsigned char)p->s[p->pos + ahead] : -1;
}

static void gp_newline(struct gp *p)
{
    p->line++;
    p->line_start = p->pos;
}

/* Skips blanks and comments, and newlines too when newline_ok. */
static void gp_space(struct gp *p, bool newline_ok)
{
    while (p->pos < p->len) {
        int c = gp_peek(p, 0);
        if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n') p->pos++;
        } else if (c == '\n' && newline_ok) {
            p->pos++;
            gp_newline(p);
        } else {
            break;
        }
    }
}

static bool gp_is_name(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static size_t gp_name(struct gp *p)
{
    size_t start = p->pos;
    while (p->pos < p->len && gp_is_name(gp_peek(p, 0))) p->pos++;
    return p->pos - start;
}

static int gp_hex(struct gp *p, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = gp_peek(p, 0);
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return gp_fail(p, "expected a hexadecimal digit in an escape");
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* One character of a literal or class: an escape or one UTF-8 character. *raw is set when the
 * value is a single byte given as \xHH (which may be any byte, not a code point). */
static int gp_char(struct gp *p, uint32_t *out, bool *raw)
{
    *raw = false;
    int c = gp_peek(p, 0);
    if (c < 0) return gp_fail(p, "unexpected end of the grammar");
    if (c == '\\') {
        p->pos++;
        int e = gp_peek(p, 0);
        p->pos++;
        switch (e) {
        case 'n': *out = '\n'; return 0;
        case 'r': *out = '\r'; return 0;
        case 't': *out = '\t'; return 0;
        case 'x': *raw = true; return gp_hex(p, 2, out);
        case 'u': return gp_hex(p, 4, out);
        case 'U': return gp_hex(p, 8, out);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '.':
        case '(':
        case ')':
        case '|': *out = (uint32_t)e; return 0;
        default: p->pos--; return gp_fail(p, "unknown escape");
        }
    }
    if (c == '\n') return gp_fail(p, "unterminated literal or class");
    if (utf8_seq_check((const uint8_t *)p->s + p->pos, p->len - p->pos) <= 0)
        return gp_fail(p, "invalid UTF-8");
    *out = unicode_decode(p->s, p->len, &p->pos);
    return 0;
}

static int gp_literal(struct gp *p, struct gb_alt *a)
{
    p->pos++; /* opening quote */
    while (gp_peek(p, 0) != '"') {
        uint32_t c;
        bool raw;
        int rc = gp_char(p, &c, &raw);
        if (rc) return rc;
        if (c > 0x10FFFF) return gp_fail(p, "code point above U+10FFFF");
        if (!raw && c >= 0xD800 && c <= 0xDFFF) return gp_fail(p, "surrogate code point");
        char buf[4];
        size_t n = 1;
        if (raw || c < 0x80)
            buf[0] = (char)c;
        else
            n = unicode_encode(c, buf);
        for (size_t i = 0; i < n; i++) {
            int32_t set = gb_byte(p->b, (uint8_t)buf[i]);
            if (set < 0 || gb_push(p->b, a, GRAMMAR_E_BYTES, set)) return p->b->rc;
        }
    }
    p->pos++;
    return 0;
}

#define GP_MAX_RANGES 4096

static int gp_class(struct gp *p, int32_t rule, struct gb_alt **a, bool dot)
{
    struct gb_range r[GP_MAX_RANGES];
    size_t n = 0;
    bool negate = false;
    if (dot) {
        p->pos++;
        r[n++] = (struct gb_range){0, 0x10FFFF};
        return gb_class(p->b, rule, a, r, n, false);
    }
    p->pos++; /* [ */
    if (gp_peek(p, 0) == '^') negate = true, p->pos++;
    while (gp_peek(p, 0) != ']') {
        if (n == GP_MAX_RANGES) return gp_fail(p, "character class too long");
        uint32_t lo, hi;
        bool raw;
        int rc = gp_char(p, &lo, &raw);
        if (rc) return rc;
        hi = lo;
        if (gp_peek(p, 0) == '-' && gp_peek(p, 1) != ']' && gp_peek(p, 1) >= 0) {
            p->pos++;
            if ((rc = gp_char(p, &hi, &raw))) return rc;
            if (hi < lo) return gp_fail(p, "character range out of order");
        }
        r[n++] = (struct gb_range){lo, hi};
    }
    p->pos++;
    return gb_class(p->b, rule, a, r, n, negate);
}

static int gp_alternates(struct gp *p, int32_t rule, bool nested, int depth);

/* Moves elements [from, a->n) of *a into a new rule and leaves one reference; returns the element
 * now standing for the item. */
static int gp_wrap(struct gp *p, int32_t rule, struct gb_alt **a, int32_t from,
                   struct grammar_elem *item)
{
    struct gb_alt *cur = *a;
    if (cur->n - from == 1) {
        *item = cur->e[from];
        return 0;
    }
    size_t ai = (size_t)(cur - p->b->rules[rule].alts);
    int32_t sub = gb_rule_new(p->b, p->b->rules[rule].name);
    if (sub < 0) return p->b->rc;
    cur = *a = &p->b->rules[rule].alts[ai];
    struct gb_alt *na = gb_alt_new(p->b, sub);
    if (!na) return p->b->rc;
    for (int32_t i = from; i < cur->n; i++)
        if (gb_push(p->b, na, cur->e[i].type, cur->e[i].arg)) return p->b->rc;
    p->b->n_elems -= (size_t)(cur->n - from);
    cur->n = from;
    *item = (struct grammar_elem){GRAMMAR_E_RULE, sub};
    return gb_push(p->b, cur, GRAMMAR_E_RULE, sub);
}

/* r ::= x r | ""  (x*), appended as a reference to r. */
static int32_t gp_star(struct gp *p, int32_t rule, struct grammar_elem x)
{
    int32_t r = gb_rule_new(p->b, p->b->rules[rule].name);
    if (r < 0) return -1;
    struct gb_alt *a = gb_alt_new(p->b, r);
    if (!a || gb_push(p->b, a, x.type, x.arg) || gb_push(p->b, a, GRAMMAR_E_RULE, r)) return -1;
    if (!gb_alt_new(p->b, r)) return -1;
    return r;
}

static int gp_repeat(struct gp *p, int32_t rule, struct gb_alt **a, int32_t from, long min,
                     long max)
{
    struct grammar_elem x = {0};
    int rc = gp_wrap(p, rule, a, from, &x);
    if (rc) return rc;
    size_t ai = (size_t)(*a - p->b->rules[rule].alts);
    (*a)->n--; /* the item itself; re-emitted min times below */
    p->b->n_elems--;
    for (long i = 0; i < min; i++)
        if (gb_push(p->b, *a, x.type, x.arg)) return p->b->rc;
    int32_t tail = -1;
    if (max < 0) {
        tail = gp_star(p, rule, x);
    } else {
        /* o_1 ::= x | "" ; o_k ::= x o_(k-1) | "" */
        for (long k = 1; k <= max - min; k++) {
            int32_t o = gb_rule_new(p->b, p->b->rules[rule].name);
            if (o < 0) return p->b->rc;
            struct gb_alt *oa = gb_alt_new(p->b, o);
            if (!oa || gb_push(p->b, oa, x.type, x.arg) ||
                (tail >= 0 && gb_push(p->b, oa, GRAMMAR_E_RULE, tail)) || !gb_alt_new(p->b, o))
                return p->b->rc;
            tail = o;
        }
        if (max == min) return 0;
    }
    if (tail < 0) return p->b->rc;
    *a = &p->b->rules[rule].alts[ai];
    return gb_push(p->b, *a, GRAMMAR_E_RULE, tail);
}

static int gp_count(struct gp *p, long *out)
{
    long v = 0;
    size_t start = p->pos;
    while (gp_peek(p, 0) >= '0' && gp_peek(p, 0) <= '9') {
        v = v * 10 + (gp_peek(p, 0) - '0');
        if (v > GRAMMAR_MAX_REPEAT)
            return gb_fail(p->b, ERR_TOO_BIG, "grammar line %d: repetition bound above %d", p->line,
                           GRAMMAR_MAX_REPEAT);
        p->pos++;
    }
    if (p->pos == start) return gp_fail(p, "expected a number in {m,n}");
    *out = v;
    return 0;
}

static int gp_quant(struct gp *p, int32_t rule, struct gb_alt **a, int32_t from)
{
    int c = gp_peek(p, 0);
    long min = 0, max = -1;
    int rc;
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        min = c == '+';
        max = c == '?' ? 1 : -1;
    } else {
        p->pos++;
        gp_space(p, true);
        if ((rc = gp_count(p, &min))) return rc;
        gp_space(p, true);
        if (gp_peek(p, 0) == ',') {
            p->pos++;
            gp_space(p, true);
            if (gp_peek(p, 0) != '}' && (rc = gp_count(p, &max))) return rc;
            gp_space(p, true);
        } else {
            max = min;
        }
        if (gp_peek(p, 0) != '}') return gp_fail(p, "expected '}'");
        p->pos++;
        if (max >= 0 && max < min) return gp_fail(p, "{m,n} with n < m");
    }
    return gp_repeat(p, rule, a, from, min, max);
}

static int gp_sequence(struct gp *p, int32_t rule, struct gb_alt *a, bool nested, int depth)
{
    int32_t last = -1; /* first element of the last item */
    for (;;) {
        int c = gp_peek(p, 0);
        int rc = 0;
        int32_t start = a->n;
        if (c == '"') {
            rc = gp_literal(p, a);
        } else if (c == '[' || c == '.') {
            rc = gp_class(p, rule, &a, c == '.');
        } else if (c == '(') {
            if (depth > 64) return gp_fail(p, "groups nested too deeply");
            p->pos++;
            size_t ai = (size_t)(a - p->b->rules[rule].alts);
            int32_t sub = gb_rule_new(p->b, p->b->rules[rule].name);
            if (sub < 0) return p->b->rc;
            gp_space(p, true);
            if ((rc = gp_alternates(p, sub, true, depth + 1))) return rc;
            a = &p->b->rules[rule].alts[ai];
            if (gp_peek(p, 0) != ')') return gp_fail(p, "expected ')'");
            p->pos++;
            rc = gb_push(p->b, a, GRAMMAR_E_RULE, sub);
        } else if (gp_is_name(c)) {
            size_t at = p->pos, n = gp_name(p);
            size_t ai = (size_t)(a - p->b->rules[rule].alts);
            int32_t ref = gb_rule_named(p->b, p->s + at, n);
            if (ref < 0) return p->b->rc;
            a = &p->b->rules[rule].alts[ai];
            if (!p->b->rules[ref].ref_line) p->b->rules[ref].ref_line = p->line;
            rc = gb_push(p->b, a, GRAMMAR_E_RULE, ref);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return gp_fail(p, "a repetition operator needs something to repeat");
            rc = gp_quant(p, rule, &a, last);
            start = -1; /* a repeated item cannot be repeated again directly */
        } else {
            return 0;
        }
        if (rc) return rc;
        last = start;
        gp_space(p, nested);
    }
}

static int gp_alternates(struct gp *p, int32_t rule, bool nested, int depth)
{
    for (;;) {
        struct gb_alt *a = gb_alt_new(p->b, rule);
        if (!a) return p->b->rc;
        int rc = gp_sequence(p, rule, a, nested, depth);
        if (rc) return rc;
        if (gp_peek(p, 0) != '|') return 0;
        p->pos++;
        gp_space(p, true);
    }
}

static int gp_rule(struct gp *p)
{
    size_t at = p->pos, n = gp_name(p);
    if (!n) return gp_fail(p, "expected a rule name");
    int32_t r = gb_rule_named(p->b, p->s + at, n);
    if (r < 0) return p->b->rc;
    if (p->b->rules[r].defined) return gp_fail(p, "rule defined twice");
    p->b->rules[r].defined = true;
    p->b->rules[r].line = p->line;
    gp_space(p, false);
    if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
        return gp_fail(p, "expected '::='");
    p->pos += 3;
    gp_space(p, true);
    int rc = gp_alternates(p, r, false, 0);
    if (rc) return rc;
    int c = gp_peek(p, 0);
    if (c == '\n') {
        p->pos++;
        gp_newline(p);
    } else if (c >= 0) {
        return gp_fail(p, "unexpected character");
    }
    return 0;
}

int grammar_compile(const char *text, size_t len, const struct grammar_vocab *v,
                    struct grammar **out, char *err, size_t errlen)
{
    struct gb b;
    gb_init(&b, err, errlen);
    int rc;
    if (len > GRAMMAR_MAX_TEXT) {
        rc = gb_fail(&b, ERR_TOO_BIG, "the grammar is longer than %u bytes", GRAMMAR_MAX_TEXT);
        goto out;
    }
    struct gp p = {.b = &b, .s = text ? text : "", .len = text ? len : 0, .line = 1};
    gp_space(&p, true);
    while (p.pos < p.len) {
        if ((rc = gp_rule(&p))) goto out;
        gp_space(&p, true);
    }
    rc = gb_finish(&b, v, out);
out:
    gb_fini(&b);
    return rc;
}
