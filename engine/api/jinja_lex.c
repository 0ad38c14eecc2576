/* Jinja lexer: template source -> tokens, with the whitespace rules of jinja2's Lexer as
 * transformers configures it (trim_blocks and lstrip_blocks on): `{%-` / `-%}` strip all
 * whitespace before / after a tag, `+` turns lstrip / trim off, lstrip_blocks removes the spaces
 * between a line's start and a block or comment tag, trim_blocks removes the newline after one.
 * Inside tags the rules run in jinja2's order (end of tag, whitespace, float, integer, name,
 * string, operator) and an end delimiter only counts while brackets are balanced. String literals
 * are unescaped as Python's unicode-escape codec does. The source arrives newline-normalized. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LEX_MAX_BRACKETS 256

struct lexer {
    struct jinja_arena *a;
    const char *s;
    size_t len, pos;
    int line;
    bool line_starting; /* the previous match ended with a newline (jinja2's line_starting) */
    struct jinja_toks *out;
    char bal[LEX_MAX_BRACKETS];
    int n_bal;
    char *err;
    size_t errlen;
};

static int lex_fail(struct lexer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int lex_fail(struct lexer *l, const char *fmt, ...)
{
    if (l->err && l->errlen) {
        char msg[200];
        va_list ap;
        va_start(ap, fmt);
        err_vfmt(msg, sizeof(msg), ERR_PARSE, fmt, ap);
        va_end(ap);
        snprintf(l->err, l->errlen, "line %d: %s", l->line, msg);
    }
    return ERR_PARSE;
}

static int push(struct lexer *l, struct jinja_tok t)
{
    struct jinja_toks *o = l->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        struct jinja_tok *v = jinja_alloc(l->a, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        if (o->n) memcpy(v, o->v, o->n * sizeof(*v));
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = t;
    return 0;
}

static int push_simple(struct lexer *l, enum jinja_tok_type type, uint8_t op)
{
    return push(l, (struct jinja_tok){.type = (uint8_t)type, .op = op, .line = l->line});
}

static void count_lines(struct lexer *l, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) l->line += p[i] == '\n';
}

/* Python's \s / str.isspace at s[i] (the source is valid UTF-8): its byte length, 0 if not. */
static size_t space_at(const char *s, size_t len, size_t i)
{
    if (i >= len) return 0;
    uint8_t b = (uint8_t)s[i];
    if (b < 0x80) return jinja_is_space(b) ? 1 : 0;
    size_t p = i;
    uint32_t c = unicode_decode(s, len, &p);
    return jinja_is_space(c) ? p - i : 0;
}

/* Length of the whitespace run at s[i..). */
static size_t space_run(const char *s, size_t len, size_t i)
{
    size_t j = i, k;
    while ((k = space_at(s, len, j)) != 0) j += k;
    return j - i;
}

/* Start of the trailing whitespace of s[0..n) (Python's rstrip). */
static size_t rstrip_at(const char *s, size_t n)
{
    while (n > 0) {
        size_t b = n - 1; /* back to the start of the last code point */
        while (b > 0 && ((uint8_t)s[b] & 0xC0) == 0x80) b--;
        if (space_at(s, n, b) != n - b) break;
        n = b;
    }
    return n;
}

/* The text before a tag, stripped as the tag's sign and lstrip_blocks ask. */
static size_t strip_before(struct lexer *l, const char *text, size_t n, char sign, bool is_var)
{
    if (sign == '-') return rstrip_at(text, n);
    if (sign == '+' || is_var) return n;
    size_t lpos = n;
    while (lpos > 0 && text[lpos - 1] != '\n') lpos--;
    if (lpos > 0 || l->line_starting) {
        if (lpos < n && space_run(text, n, lpos) == n - lpos) return lpos;
    }
    return n;
}

static int emit_data(struct lexer *l, const char *p, size_t n, int line)
{
    if (n == 0) return 0;
    return push(l, (struct jinja_tok){.type = JT_DATA, .line = line, .text = {p, (uint32_t)n}});
}

/* `{%` sign? \s* raw \s* (-%}\s* | %}) at s[q]: its length, or 0. */
static size_t match_raw_begin(const struct lexer *l, size_t q, char *sign)
{
    size_t i = q + 2;
    *sign = 0;
    if (i < l->len && (l->s[i] == '-' || l->s[i] == '+')) *sign = l->s[i++];
    i += space_run(l->s, l->len, i);
    if (l->len - i < 3 || memcmp(l->s + i, "raw", 3) != 0) return 0;
    i += 3;
    i += space_run(l->s, l->len, i);
    if (l->len - i >= 3 && memcmp(l->s + i, "-%}", 3) == 0) {
        i += 3;
        return i + space_run(l->s, l->len, i) - q;
    }
    if (l->len - i >= 2 && memcmp(l->s + i, "%}", 2) == 0) return i + 2 - q;
    return 0;
}

/* `{%` sign? \s* endraw \s* (+%} | -%}\s* | %}\n?) at s[q]: its length, or 0. */
static size_t match_raw_end(const struct lexer *l, size_t q, char *sign)
{
    size_t i = q + 2;
    *sign = 0;
    if (i < l->len && (l->s[i] == '-' || l->s[i] == '+')) *sign = l->s[i++];
    i += space_run(l->s, l->len, i);
    if (l->len - i < 6 || memcmp(l->s + i, "endraw", 6) != 0) return 0;
    i += 6;
    i += space_run(l->s, l->len, i);
    if (l->len - i >= 3 && memcmp(l->s + i, "+%}", 3) == 0) return i + 3 - q;
    if (l->len - i >= 3 && memcmp(l->s + i, "-%}", 3) == 0) {
        i += 3;
        return i + space_run(l->s, l->len, i) - q;
    }
    if (l->len - i >= 2 && memcmp(l->s + i, "%}", 2) == 0) {
        i += 2;
        return i + (i < l->len && l->s[i] == '\n') - q;
    }
    return 0;
}

static int lex_raw(struct lexer *l)
{
    for (size_t q = l->pos; q + 1 < l->len; q++) {
        if (l->s[q] != '{' || l->s[q + 1] != '%') continue;
        char sign;
        size_t m = match_raw_end(l, q, &sign);
        if (!m) continue;
        const char *text = l->s + l->pos;
        size_t n = strip_before(l, text, q - l->pos, sign, false);
        int rc = emit_data(l, text, n, l->line);
        if (rc) return rc;
        count_lines(l, l->s + l->pos, q + m - l->pos);
        l->pos = q + m;
        l->line_starting = l->s[l->pos - 1] == '\n';
        return 0;
    }
    return lex_fail(l, "missing end of raw directive");
}

static int lex_comment(struct lexer *l)
{
    const char *end = memmem(l->s + l->pos, l->len - l->pos, "#}", 2);
    if (!end) return lex_fail(l, "missing end of comment tag");
    size_t e = (size_t)(end - l->s), after = e + 2;
    char sign = (e > l->pos && (l->s[e - 1] == '-' || l->s[e - 1] == '+')) ? l->s[e - 1] : 0;
    if (sign == '-')
        after += space_run(l->s, l->len, after);
    else if (!sign && after < l->len && l->s[after] == '\n')
        after++; /* trim_blocks */
    count_lines(l, l->s + l->pos, after - l->pos);
    l->pos = after;
    l->line_starting = l->s[after - 1] == '\n';
    return 0;
}

/* (\d+_)*\d+ at s[i]: its length (0: no digit there). */
static size_t digits_us(const char *s, size_t len, size_t i)
{
    size_t j = i;
    if (j >= len || s[j] < '0' || s[j] > '9') return 0;
    for (;;) {
        while (j < len && s[j] >= '0' && s[j] <= '9') j++;
        if (j + 1 < len && s[j] == '_' && s[j + 1] >= '0' && s[j + 1] <= '9')
            j++;
        else
            return j - i;
    }
}

/* jinja2's float_re at s[i] (not after a '.'): its length or 0. */
static size_t match_float(const struct lexer *l, size_t i)
{
    const char *s = l->s;
    size_t len = l->len;
    if (i > 0 && s[i - 1] == '.') return 0;
    size_t n = digits_us(s, len, i);
    if (!n) return 0;
    size_t j = i + n, frac = 0;
    if (j < len && s[j] == '.') {
        size_t f = digits_us(s, len, j + 1);
        if (f) frac = 1 + f;
    }
    /* exponent after the fraction, then right after the integer part, then the fraction alone */
    for (int pass = 0; pass < 2; pass++) {
        size_t k = j + (pass == 0 ? frac : 0);
        if (pass == 0 && !frac) continue;
        if (k < len && (s[k] == 'e' || s[k] == 'E')) {
            size_t m = k + 1;
            if (m < len && (s[m] == '+' || s[m] == '-')) m++;
            size_t d = digits_us(s, len, m);
            if (d) return m + d - i;
        }
    }
    return frac ? n + frac : 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* jinja2's integer_re at s[i]: its length and value, 0 when it does not match. */
static size_t match_int(struct lexer *l, size_t i, int64_t *val, bool *overflow)
{
    const char *s = l->s;
    size_t len = l->len, j = i;
    int base = 10;
    *overflow = false;
    if (j + 1 < len && s[j] == '0' &&
        (s[j + 1] == 'b' || s[j + 1] == 'B' || s[j + 1] == 'o' || s[j + 1] == 'O' ||
         s[j + 1] == 'x' || s[j + 1] == 'X')) {
        char k = (char)(s[j + 1] | 0x20);
        base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
        size_t m = j + 2, digits = 0;
        for (;;) { /* (_?digit)+ */
            size_t d = m < len && s[m] == '_' ? m + 1 : m;
            int v = d < len ? hexval(s[d]) : -1;
            if (v < 0 || v >= base) break;
            m = d + 1;
            digits++;
        }
        if (digits) {
            j = m;
            goto value;
        }
        base = 10; /* "0x" alone: just the decimal zero */
    }
    if (j >= len || s[j] < '0' || s[j] > '9') return 0;
    if (s[j] == '0') { /* 0(_?0)* */
        j++;
        for (;;) {
            size_t d = j < len && s[j] == '_' ? j + 1 : j;
            if (d < len && s[d] == '0')
                j = d + 1;
            else
                break;
        }
        *val = 0;
        return j - i;
    }
    for (j++;;) { /* [1-9](_?\d)* */
        size_t d = j < len && s[j] == '_' ? j + 1 : j;
        if (d < len && s[d] >= '0' && s[d] <= '9')
            j = d + 1;
        else
            break;
    }
value:;
    int64_t v = 0;
    for (size_t k = (base == 10 ? i : i + 2); k < j; k++) {
        if (s[k] == '_') continue;
        int dv = hexval(s[k]);
        if (v > (INT64_MAX - dv) / base) {
            *overflow = true;
            return j - i;
        }
        v = v * base + dv;
    }
    *val = v;
    return j - i;
}

static int put_cpt(struct lexer *l, char *dst, size_t *n, uint32_t cpt)
{
    if (cpt >= 0xD800 && cpt <= 0xDFFF)
        return lex_fail(l, "string literal has a surrogate escape (\\u%04X)", (unsigned)cpt);
    if (cpt > 0x10FFFF) return lex_fail(l, "illegal Unicode character in string literal");
    *n += unicode_encode(cpt, dst + *n);
    return 0;
}

/* Python's unicode-escape decoding of a literal's body s[0..n) (after backslashreplace, so a
 * backslash before a non-ASCII character escapes the backslash of its \x / \u form). */
static int unescape(struct lexer *l, const char *s, size_t n, struct jinja_sv *out)
{
    char *dst = jinja_alloc(l->a, n * 3 + 1); /* \777 (4 bytes) -> 2; \x -> up to 2; \U -> 4 */
    if (!dst) return ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            dst[o++] = s[i++];
            continue;
        }
        char e = s[i + 1]; /* the regex guarantees a character after a backslash */
        i += 2;
        int v = 0, rc = 0;
        switch (e) {
        case '\n': break;
        case '\\': dst[o++] = '\\'; break;
        case '\'': dst[o++] = '\''; break;
        case '"': dst[o++] = '"'; break;
        case 'a': dst[o++] = '\a'; break;
        case 'b': dst[o++] = '\b'; break;
        case 'f': dst[o++] = '\f'; break;
        case 'n': dst[o++] = '\n'; break;
        case 'r': dst[o++] = '\r'; break;
        case 't': dst[o++] = '\t'; break;
        case 'v': dst[o++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cpt = 0;
            for (int k = 0; k < want; k++) {
                int h = i < n ? hexval(s[i]) : -1;
                if (h < 0) return lex_fail(l, "truncated \\%c escape in string literal", e);
                cpt = cpt * 16 + (uint32_t)h;
                i++;
            }
            rc = put_cpt(l, dst, &o, cpt);
            break;
        }
        case 'N': return lex_fail(l, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                v = e - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    v = v * 8 + (s[i++] - '0');
                rc = put_cpt(l, dst, &o, (uint32_t)v);
            } else if ((uint8_t)e >= 0x80) {
                size_t p = i - 1;
                uint32_t cpt = unicode_decode(s, n, &p);
                i = p;
                int k = snprintf(dst + o, 12,
                                 cpt < 0x100     ? "\\x%02x"
                                 : cpt < 0x10000 ? "\\u%04x"
                                                 : "\\U%08x",
                                 (unsigned)cpt);
                o += (size_t)k;
            } else { /* unknown escape: kept as written */
                dst[o++] = '\\';
                dst[o++] = e;
            }
        }
        if (rc) return rc;
    }
    dst[o] = '\0';
    *out = (struct jinja_sv){dst, (uint32_t)o};
    return 0;
}

static int lex_string(struct lexer *l, bool *matched)
{
    char q = l->s[l->pos];
    size_t i = l->pos + 1;
    *matched = false;
    while (i < l->len && l->s[i] != q) {
        if (l->s[i] == '\\') {
            if (i + 1 >= l->len) return 0;
            i++;
        }
        i++;
    }
    if (i >= l->len) return 0;
    *matched = true;
    struct jinja_tok t = {.type = JT_STRING, .line = l->line};
    int rc = unescape(l, l->s + l->pos + 1, i - l->pos - 1, &t.text);
    if (rc) return rc;
    count_lines(l, l->s + l->pos, i + 1 - l->pos);
    l->pos = i + 1;
    return push(l, t);
}

static const struct {
    const char *s;
    uint8_t op;
} lex_ops[] = {
    {"//", JINJA_OP_FLOORDIV}, {"**", JINJA_OP_POW}, {"==", JINJA_OP_EQ},    {"!=", JINJA_OP_NE},
    {">=", JINJA_OP_GE},       {"<=", JINJA_OP_LE},  {"=", JINJA_OP_ASSIGN},
};

static int lex_operator(struct lexer *l)
{
    const char *p = l->s + l->pos;
    size_t left = l->len - l->pos;
    for (size_t k = 0; k < sizeof(lex_ops) / sizeof(lex_ops[0]); k++) {
        size_t n = strlen(lex_ops[k].s);
        if (left >= n && memcmp(p, lex_ops[k].s, n) == 0) {
            l->pos += n;
            return push_simple(l, JT_OP, lex_ops[k].op);
        }
    }
    char ch = *p;
    if (!strchr("+-/*%~[](){}<>.:|,;", ch) || ch == '\0') {
        if ((uint8_t)ch >= 0x80 || (ch > ' ' && ch < 0x7f))
            return lex_fail(l, "unexpected char '%.*s'", (int)unicode_utf8_len((uint8_t)ch), p);
        return lex_fail(l, "unexpected char 0x%02x", (unsigned)(uint8_t)ch);
    }
    if (ch == '{' || ch == '(' || ch == '[') {
        if (l->n_bal == LEX_MAX_BRACKETS) return lex_fail(l, "brackets nested too deeply");
        l->bal[l->n_bal++] = ch == '{' ? '}' : ch == '(' ? ')' : ']';
    } else if (ch == '}' || ch == ')' || ch == ']') {
        if (l->n_bal == 0) return lex_fail(l, "unexpected '%c'", ch);
        char want = l->bal[--l->n_bal];
        if (want != ch) return lex_fail(l, "unexpected '%c', expected '%c'", ch, want);
    }
    l->pos++;
    return push_simple(l, JT_OP, (uint8_t)ch);
}

/* The end of a tag at pos, when brackets are balanced: its length (trailing whitespace it eats
 * included), or 0. */
static size_t match_tag_end(const struct lexer *l, bool is_var)
{
    const char *p = l->s + l->pos;
    size_t left = l->len - l->pos;
    const char *close = is_var ? "}}" : "%}";
    if (left >= 3 && p[0] == '-' && memcmp(p + 1, close, 2) == 0)
        return 3 + space_run(l->s, l->len, l->pos + 3);
    if (!is_var && left >= 3 && p[0] == '+' && memcmp(p + 1, close, 2) == 0) return 3;
    if (left >= 2 && memcmp(p, close, 2) == 0)
        return 2 + (!is_var && left > 2 && p[2] == '\n'); /* trim_blocks */
    return 0;
}

static int lex_tag(struct lexer *l, bool is_var)
{
    l->n_bal = 0;
    while (l->pos < l->len) {
        size_t n;
        int rc;
        if (l->n_bal == 0 && (n = match_tag_end(l, is_var)) != 0) {
            if ((rc = push_simple(l, is_var ? JT_VAR_END : JT_BLOCK_END, 0))) return rc;
            count_lines(l, l->s + l->pos, n);
            l->pos += n;
            l->line_starting = l->s[l->pos - 1] == '\n';
            return 0;
        }
        char ch = l->s[l->pos];
        if ((n = space_run(l->s, l->len, l->pos)) != 0) {
            count_lines(l, l->s + l->pos, n);
            l->pos += n;
            continue;
        }
        if ((n = match_float(l, l->pos)) != 0) {
            char num[64];
            size_t k = 0;
            for (size_t i = 0; i < n && k < sizeof(num) - 1; i++)
                if (l->s[l->pos + i] != '_') num[k++] = l->s[l->pos + i];
            num[k] = '\0';
            struct jinja_tok t = {.type = JT_FLOAT, .line = l->line};
            t.f = strtod(num, NULL);
            l->pos += n;
            if ((rc = push(l, t))) return rc;
            continue;
        }
        bool overflow;
        int64_t iv;
        if ((n = match_int(l, l->pos, &iv, &overflow)) != 0) {
            if (overflow) return lex_fail(l, "integer literal too large");
            l->pos += n;
            if ((rc = push(l, (struct jinja_tok){.type = JT_INT, .line = l->line, .i = iv})))
                return rc;
            continue;
        }
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t e = l->pos + 1;
            while (e < l->len &&
                   ((l->s[e] >= 'a' && l->s[e] <= 'z') || (l->s[e] >= 'A' && l->s[e] <= 'Z') ||
                    (l->s[e] >= '0' && l->s[e] <= '9') || l->s[e] == '_'))
                e++;
            if (e < l->len && (uint8_t)l->s[e] >= 0x80)
                return lex_fail(l, "non-ASCII identifiers are not supported");
            struct jinja_tok t = {.type = JT_NAME, .line = l->line};
            t.text = (struct jinja_sv){l->s + l->pos, (uint32_t)(e - l->pos)};
            l->pos = e;
            if ((rc = push(l, t))) return rc;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            bool matched;
            if ((rc = lex_string(l, &matched))) return rc;
            if (matched) continue;
        }
        if ((rc = lex_operator(l))) return rc;
    }
    return 0; /* unterminated tag: the parser meets the end of the template */
}

int jinja_lex(struct jinja_arena *a, const char *src, size_t len, struct jinja_toks *out, char *err,
              size_t errlen)
{
    struct lexer l = {.a = a,
                      .s = src,
                      .len = len,
                      .line = 1,
                      .line_starting = true,
                      .out = out,
                      .err = err,
                      .errlen = errlen};
    int rc;
    while (l.pos < len) {
        size_t q = l.pos;
        for (; q + 1 < len; q++)
            if (src[q] == '{' && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#'))
                break;
        if (q + 1 >= len) { /* no more tags: the rest is text */
            if ((rc = emit_data(&l, src + l.pos, len - l.pos, l.line))) return rc;
            count_lines(&l, src + l.pos, len - l.pos);
            l.pos = len;
            break;
        }
        char kind = src[q + 1], sign = 0;
        size_t raw = kind == '%' ? match_raw_begin(&l, q, &sign) : 0;
        if (!raw && q + 2 < len && (src[q + 2] == '-' || src[q + 2] == '+')) sign = src[q + 2];
        const char *text = src + l.pos;
        size_t n = strip_before(&l, text, q - l.pos, sign, kind == '{');
        if ((rc = emit_data(&l, text, n, l.line))) return rc;
        count_lines(&l, text, q - l.pos);
        l.line_starting = false;
        if (raw) {
            count_lines(&l, src + q, raw);
            l.pos = q + raw;
            l.line_starting = src[l.pos - 1] == '\n';
            rc = lex_raw(&l);
        } else {
            l.pos = q + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                rc = lex_comment(&l);
            } else {
                rc = push_simple(&l, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, 0);
                if (!rc) rc = lex_tag(&l, kind == '{');
            }
        }
        if (rc) return rc;
    }
    return push_simple(&l, JT_EOF, 0);
}
