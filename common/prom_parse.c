/* Prometheus text-format 0.0.4 parser (see common/prom.h for what is accepted): one pass over the
 * body, line by line, with every limit checked before memory is committed. Strings live in an arena
 * owned by the exposition; families are indexed by a hash of their name. Lookups are in prom_query.c.
 * Not an OpenMetrics parser. */
#include "common/prom_priv.h"

#include "common/assert.h"
#include "common/err.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- arena ------------------------------------------------------------------------------------- */

struct prom_arena_chunk {
    struct prom_arena_chunk *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
};

#define ARENA_CHUNK_MIN ((size_t)16 << 10)

static void *arena_alloc(struct prom_parse_priv *pp, size_t n)
{
    const size_t align = alignof(max_align_t);
    n = (n + align - 1) & ~(align - 1);
    struct prom_arena_chunk *c = pp->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_MIN ? n : ARENA_CHUNK_MIN;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->next = pp->arena;
        c->used = 0;
        c->cap = cap;
        pp->arena = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static char *arena_strndup(struct prom_parse_priv *pp, const char *s, size_t n)
{
    char *d = arena_alloc(pp, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- family index ------------------------------------------------------------------------------ */

static size_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static bool name_is(const char *name, const char *s, size_t n)
{
    return strncmp(name, s, n) == 0 && name[n] == 0;
}

size_t prom_family_index(const struct prom_exposition *e, const char *name, size_t len)
{
    const struct prom_parse_priv *pp = e->priv;
    if (!pp || !pp->index_cap) return SIZE_MAX;
    size_t mask = pp->index_cap - 1;
    for (size_t i = name_hash(name, len) & mask;; i = (i + 1) & mask) {
        size_t slot = pp->index[i];
        if (!slot) return SIZE_MAX;
        if (name_is(e->families[slot - 1].name, name, len)) return slot - 1;
    }
}

/* Makes room for one more family in the index (kept at most half full). */
static int index_reserve(struct prom_exposition *e)
{
    struct prom_parse_priv *pp = e->priv;
    if (pp->index_cap && (e->n_families + 1) * 2 <= pp->index_cap) return 0;
    size_t cap = pp->index_cap ? pp->index_cap * 2 : 64;
    size_t *index = calloc(cap, sizeof(*index));
    if (!index) return ERR_NOMEM;
    for (size_t f = 0; f < e->n_families; f++) {
        const char *name = e->families[f].name;
        size_t i = name_hash(name, strlen(name)) & (cap - 1);
        while (index[i]) i = (i + 1) & (cap - 1);
        index[i] = f + 1;
    }
    free(pp->index);
    pp->index = index;
    pp->index_cap = cap;
    return 0;
}

/* ---- parser state ------------------------------------------------------------------------------ */

struct parser {
    const char *text;
    size_t len;
    struct prom_limits lim;
    struct prom_exposition *e;
    size_t cap_families;
    size_t n_samples;
    size_t cur;             /* family of the previous HELP, TYPE or sample line; SIZE_MAX: none */
    size_t line_no;         /* 1-based */
    size_t ls, le;          /* current line: text[ls..le), without "\n" and a final "\r" */
    struct prom_label *lbl; /* scratch labels of the sample being parsed */
    size_t cap_lbl;
    char *err;
    size_t err_len;
};

/* Records "line L, column C: <message>" for the byte at `pos` and returns `rc`. */
__attribute__((format(printf, 4, 5))) static int fail(struct parser *p, int rc, size_t pos,
                                                      const char *fmt, ...)
{
    if (p->err && p->err_len) {
        int n = snprintf(p->err, p->err_len, "line %zu, column %zu: ", p->line_no, pos - p->ls + 1);
        if (n >= 0 && (size_t)n < p->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

/* At most this many bytes of a name are quoted in an error message. */
#define QUOTE_MAX   64
#define QUOTE(s, n) (int)((n) < QUOTE_MAX ? (n) : QUOTE_MAX), (s)

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static size_t skip_blanks(const struct parser *p, size_t i)
{
    while (i < p->le && is_blank(p->text[i])) i++;
    return i;
}

static bool is_name_char(char c, bool first, bool colon_ok)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
    if (c == ':') return colon_ok;
    return !first && c >= '0' && c <= '9';
}

/* Returns the end of the name starting at `i` (== i when there is none). */
static size_t scan_name(const struct parser *p, size_t i, bool colon_ok)
{
    size_t start = i;
    while (i < p->le && is_name_char(p->text[i], i == start, colon_ok)) i++;
    return i;
}

/* Returns the end of the token (non-blank run) starting at `i`. */
static size_t scan_token(const struct parser *p, size_t i)
{
    while (i < p->le && !is_blank(p->text[i])) i++;
    return i;
}

/* Returns the length of the valid UTF-8 sequence at s[0..n) (n > 0), or 0 when it is invalid
 * (truncated, overlong, surrogate, above U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((s[0] & 0xe0) == 0xc0)
        len = 2, cp = s[0] & 0x1f, min = 0x80;
    else if ((s[0] & 0xf0) == 0xe0)
        len = 3, cp = s[0] & 0x0f, min = 0x800;
    else if ((s[0] & 0xf8) == 0xf0)
        len = 4, cp = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* Scans escaped text from `i` to `end` (exclusive) or, when `quote`, to the first unescaped '"'.
 * Allowed escapes: \\ and \n, plus \" when `quote`. On success writes the end position (the closing
 * quote when `quote`) and the unescaped length. */
static int scan_escaped(struct parser *p, size_t i, bool quote, size_t *end, size_t *n_out,
                        const char *what)
{
    size_t n = 0, open = i - 1;
    while (i < p->le) {
        unsigned char c = (unsigned char)p->text[i];
        if (quote && c == '"') break;
        if (c == '\\') {
            if (i + 1 >= p->le)
                return quote ? fail(p, ERR_PARSE, open, "unterminated %s", what)
                             : fail(p, ERR_PARSE, i, "backslash at end of %s", what);
            char x = p->text[i + 1];
            if (x != '\\' && x != 'n' && !(quote && x == '"'))
                return fail(p, ERR_PARSE, i, "invalid escape sequence '\\%c' in %s (allowed: %s)",
                            x >= 0x20 && x < 0x7f ? x : '?', what,
                            quote ? "\\\\ \\\" \\n" : "\\\\ \\n");
            i += 2;
        } else {
            size_t k = utf8_seq((const unsigned char *)p->text + i, p->le - i);
            if (!k) return fail(p, ERR_PARSE, i, "invalid UTF-8 in %s", what);
            i += k;
        }
        n++;
    }
    if (quote && i >= p->le) return fail(p, ERR_PARSE, open, "unterminated %s", what);
    *end = i;
    *n_out = n;
    return 0;
}

/* Copies text[i..end), already validated by scan_escaped, into a new arena string, unescaping. */
static char *unescape(struct parser *p, size_t i, size_t end)
{
    char *d = arena_alloc(p->e->priv, end - i + 1), *o = d;
    if (!d) return NULL;
    while (i < end) {
        char c = p->text[i++];
        if (c == '\\') {
            c = p->text[i++];
            if (c == 'n') c = '\n';
        }
        *o++ = c;
    }
    *o = 0;
    return d;
}

/* Parses a float token: [+-] then digits with an optional fraction and exponent, or Inf, Infinity,
 * NaN (any case). Hexadecimal and out-of-range values are rejected. */
static bool parse_double(const char *s, size_t n, double *out)
{
    char tmp[128];
    if (n == 0 || n >= sizeof(tmp)) return false;
    size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    const char *w = s + i;
    size_t wn = n - i;
    if ((wn == 3 && strncasecmp(w, "inf", 3) == 0) ||
        (wn == 8 && strncasecmp(w, "infinity", 8) == 0)) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    if (wn == 3 && strncasecmp(w, "nan", 3) == 0) {
        *out = NAN;
        return true;
    }
    size_t digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
    }
    if (!digits) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp_digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++, exp_digits++;
        if (!exp_digits) return false;
    }
    if (i != n) return false;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    double v = strtod(tmp, NULL);
    if (errno == ERANGE && isinf(v)) return false;
    *out = v;
    return true;
}

static bool parse_int64(const char *s, size_t n, int64_t *out)
{
    size_t i = (n && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    bool neg = n && s[0] == '-';
    if (i == n) return false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return true;
}

/* ---- families ---------------------------------------------------------------------------------- */

/* Creates family name[0..n) (untyped, no help) and returns its index in *out. */
static int family_new(struct parser *p, size_t pos, const char *name, size_t n, size_t *out)
{
    struct prom_exposition *e = p->e;
    if (e->n_families >= p->lim.max_series)
        return fail(p, ERR_TOO_BIG, pos, "more than %zu metric families", p->lim.max_series);
    if (e->n_families == p->cap_families) {
        size_t cap = p->cap_families ? p->cap_families * 2 : 16;
        struct prom_family *f = realloc(e->families, cap * sizeof(*f));
        if (!f) return ERR_NOMEM;
        e->families = f;
        p->cap_families = cap;
    }
    int rc = index_reserve(e);
    if (rc) return rc;
    char *copy = arena_strndup(e->priv, name, n);
    if (!copy) return ERR_NOMEM;
    e->families[e->n_families] = (struct prom_family){.name = copy, .type = PROM_UNTYPED};
    struct prom_parse_priv *pp = e->priv;
    size_t i = name_hash(name, n) & (pp->index_cap - 1);
    while (pp->index[i]) i = (i + 1) & (pp->index_cap - 1);
    pp->index[i] = ++e->n_families;
    *out = e->n_families - 1;
    return 0;
}

static int family_get(struct parser *p, size_t pos, const char *name, size_t n, size_t *out)
{
    size_t f = prom_family_index(p->e, name, n);
    if (f != SIZE_MAX) {
        *out = f;
        return 0;
    }
    return family_new(p, pos, name, n, out);
}

/* True when `name` is `base` followed by `suffix` (name has length n). */
static bool has_suffix(const char *name, size_t n, const char *base, const char *suffix)
{
    size_t nb = strlen(base), ns = strlen(suffix);
    return n == nb + ns && memcmp(name, base, nb) == 0 && memcmp(name + nb, suffix, ns) == 0;
}

/* True when a sample called name[0..n) belongs to family `f`. */
static bool family_accepts(const struct prom_family *f, const char *name, size_t n)
{
    if (f->type == PROM_HISTOGRAM)
        return has_suffix(name, n, f->name, "_bucket") || has_suffix(name, n, f->name, "_sum") ||
               has_suffix(name, n, f->name, "_count");
    if (f->type == PROM_SUMMARY &&
        (has_suffix(name, n, f->name, "_sum") || has_suffix(name, n, f->name, "_count")))
        return true;
    return name_is(f->name, name, n);
}

/* Finds the family a sample called name[0..n) belongs to, creating an untyped one if needed. */
static int family_of_sample(struct parser *p, size_t pos, const char *name, size_t n, size_t *out)
{
    const struct prom_exposition *e = p->e;
    if (p->cur != SIZE_MAX && family_accepts(&e->families[p->cur], name, n)) {
        *out = p->cur;
        return 0;
    }
    size_t f = prom_family_index(e, name, n);
    if (f != SIZE_MAX && family_accepts(&e->families[f], name, n)) {
        *out = f;
        return 0;
    }
    if (f != SIZE_MAX)
        return fail(p, ERR_PARSE, pos,
                    "sample '%.*s' of histogram family '%.*s' needs a "
                    "_bucket, _sum or _count suffix",
                    QUOTE(name, n), QUOTE(name, n));
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < ARRAY_LEN(suffixes); i++) {
        size_t ns = strlen(suffixes[i]);
        if (n <= ns || memcmp(name + n - ns, suffixes[i], ns) != 0) continue;
        size_t base = prom_family_index(e, name, n - ns);
        if (base != SIZE_MAX && family_accepts(&e->families[base], name, n)) {
            *out = base;
            return 0;
        }
    }
    return family_new(p, pos, name, n, out);
}

/* ---- lines ------------------------------------------------------------------------------------- */

static const struct {
    const char *word;
    enum prom_type type;
} type_words[] = {{"counter", PROM_COUNTER},
                  {"gauge", PROM_GAUGE},
                  {"histogram", PROM_HISTOGRAM},
                  {"summary", PROM_SUMMARY},
                  {"untyped", PROM_UNTYPED}};

/* "# HELP name text" or "# TYPE name type"; `i` is just past the keyword and its blank. */
static int parse_meta(struct parser *p, size_t i, bool help)
{
    const char *t = p->text;
    const char *kw = help ? "HELP" : "TYPE";
    i = skip_blanks(p, i);
    size_t name_end = scan_name(p, i, true);
    if (name_end == i || (name_end < p->le && !is_blank(t[name_end])))
        return fail(p, ERR_PARSE, name_end == i ? i : name_end, "invalid metric name in # %s line",
                    kw);
    size_t f;
    int rc = family_get(p, i, t + i, name_end - i, &f);
    if (rc) return rc;
    struct prom_family *fam = &p->e->families[f];
    size_t v = skip_blanks(p, name_end);
    if (help) {
        if (fam->help) return fail(p, ERR_PARSE, i, "second HELP line for '%s'", fam->name);
        size_t end, n;
        if ((rc = scan_escaped(p, v, false, &end, &n, "HELP text"))) return rc;
        if (!(fam->help = unescape(p, v, end))) return ERR_NOMEM;
    } else {
        size_t w_end = scan_token(p, v);
        size_t k = 0;
        while (k < ARRAY_LEN(type_words) && !name_is(type_words[k].word, t + v, w_end - v)) k++;
        if (k == ARRAY_LEN(type_words))
            return fail(p, ERR_PARSE, v,
                        "unknown metric type '%.*s' (want counter, gauge, "
                        "histogram, summary or untyped)",
                        QUOTE(t + v, w_end - v));
        if (skip_blanks(p, w_end) != p->le)
            return fail(p, ERR_PARSE, skip_blanks(p, w_end), "unexpected text after the type");
        if (fam->has_type) return fail(p, ERR_PARSE, i, "second TYPE line for '%s'", fam->name);
        if (fam->n_samples)
            return fail(p, ERR_PARSE, i, "TYPE line for '%s' after its samples", fam->name);
        fam->type = type_words[k].type;
        fam->has_type = true;
    }
    p->cur = f;
    return 0;
}

static int parse_comment(struct parser *p, size_t i)
{
    i = skip_blanks(p, i + 1); /* past '#' */
    size_t w_end = scan_token(p, i);
    bool help = name_is("HELP", p->text + i, w_end - i);
    if (!help && !name_is("TYPE", p->text + i, w_end - i)) return 0; /* a plain comment */
    return parse_meta(p, w_end, help);
}

/* Parses `{name="value",...}` starting at the '{' at `i`; writes the position after '}'. */
static int parse_labels(struct parser *p, size_t i, size_t *n_out, size_t *end_out)
{
    const char *t = p->text;
    size_t n = 0;
    i++;
    for (;;) {
        i = skip_blanks(p, i);
        if (i < p->le && t[i] == '}') break;
        size_t name_end = scan_name(p, i, false);
        if (name_end == i)
            return fail(p, ERR_PARSE, i,
                        i < p->le ? "invalid label name" : "unterminated label set");
        if (name_is("__name__", t + i, name_end - i))
            return fail(p, ERR_PARSE, i, "label name '__name__' is reserved");
        size_t j = skip_blanks(p, name_end);
        if (j >= p->le || t[j] != '=')
            return fail(p, ERR_PARSE, j, "expected '=' after label name '%.*s'",
                        QUOTE(t + i, name_end - i));
        j = skip_blanks(p, j + 1);
        if (j >= p->le || t[j] != '"')
            return fail(p, ERR_PARSE, j, "expected '\"' to open the value of label '%.*s'",
                        QUOTE(t + i, name_end - i));
        size_t v_end, v_len;
        int rc = scan_escaped(p, j + 1, true, &v_end, &v_len, "label value");
        if (rc) return rc;
        for (size_t k = 0; k < n; k++)
            if (name_is(p->lbl[k].name, t + i, name_end - i))
                return fail(p, ERR_PARSE, i, "duplicate label name '%s'", p->lbl[k].name);
        if (n >= p->lim.max_labels)
            return fail(p, ERR_TOO_BIG, i, "more than %zu labels", p->lim.max_labels);
        if (n == p->cap_lbl) {
            size_t cap = p->cap_lbl ? p->cap_lbl * 2 : 8;
            struct prom_label *l = realloc(p->lbl, cap * sizeof(*l));
            if (!l) return ERR_NOMEM;
            p->lbl = l;
            p->cap_lbl = cap;
        }
        p->lbl[n].name = arena_strndup(p->e->priv, t + i, name_end - i);
        p->lbl[n].value = unescape(p, j + 1, v_end);
        if (!p->lbl[n].name || !p->lbl[n].value) return ERR_NOMEM;
        n++;
        i = skip_blanks(p, v_end + 1);
        if (i < p->le && t[i] == ',') {
            i++;
            continue;
        }
        if (i < p->le && t[i] == '}') break;
        return fail(p, ERR_PARSE, i,
                    i < p->le ? "expected ',' or '}' after label value" : "unterminated label set");
    }
    *n_out = n;
    *end_out = i + 1;
    return 0;
}

/* Checks what the family type requires of a sample: a float "le" on histogram buckets, a float
 * "quantile" on summary quantiles. */
static int check_special_labels(struct parser *p, size_t pos, const struct prom_family *f,
                                const char *name, size_t name_len, size_t n_labels)
{
    const char *want = NULL;
    if (f->type == PROM_HISTOGRAM && has_suffix(name, name_len, f->name, "_bucket")) want = "le";
    if (f->type == PROM_SUMMARY && name_is(f->name, name, name_len)) want = "quantile";
    if (!want) return 0;
    for (size_t k = 0; k < n_labels; k++) {
        if (strcmp(p->lbl[k].name, want) != 0) continue;
        double v;
        const char *s = p->lbl[k].value;
        if (parse_double(s, strlen(s), &v) && !isnan(v)) return 0;
        return fail(p, ERR_PARSE, pos, "label %s=\"%.*s\" is not a number", want,
                    QUOTE(s, strlen(s)));
    }
    return fail(p, ERR_PARSE, pos, "%s sample '%s' has no '%s' label",
                f->type == PROM_HISTOGRAM ? "histogram bucket" : "summary quantile", f->name, want);
}

static int sample_append(struct parser *p, struct prom_family *f, const struct prom_sample *s)
{
    if (f->n_samples == f->cap_samples) {
        size_t cap = f->cap_samples ? f->cap_samples * 2 : 4;
        struct prom_sample *a = realloc(f->samples, cap * sizeof(*a));
        if (!a) return ERR_NOMEM;
        f->samples = a;
        f->cap_samples = cap;
    }
    f->samples[f->n_samples++] = *s;
    return 0;
}

static int parse_sample(struct parser *p, size_t i)
{
    const char *t = p->text;
    size_t start = i, name_end = scan_name(p, i, true);
    if (name_end == i) return fail(p, ERR_PARSE, i, "expected a metric name or '#'");
    if (p->n_samples >= p->lim.max_series)
        return fail(p, ERR_TOO_BIG, i, "more than %zu samples", p->lim.max_series);
    size_t n_labels = 0;
    i = skip_blanks(p, name_end);
    if (i < p->le && t[i] == '{') {
        int rc = parse_labels(p, i, &n_labels, &i);
        if (rc) return rc;
        i = skip_blanks(p, i);
    } else if (i == name_end && i < p->le) {
        return fail(p, ERR_PARSE, i, "unexpected character after metric name");
    }
    size_t v_end = scan_token(p, i);
    struct prom_sample s = {.n_labels = n_labels};
    if (v_end == i) return fail(p, ERR_PARSE, i, "missing value");
    if (!parse_double(t + i, v_end - i, &s.value))
        return fail(p, ERR_PARSE, i, "invalid value '%.*s'", QUOTE(t + i, v_end - i));
    i = skip_blanks(p, v_end);
    if (i < p->le) {
        size_t ts_end = scan_token(p, i);
        if (!parse_int64(t + i, ts_end - i, &s.timestamp_ms))
            return fail(p, ERR_PARSE, i, "invalid timestamp '%.*s' (want integer milliseconds)",
                        QUOTE(t + i, ts_end - i));
        s.has_timestamp = true;
        i = skip_blanks(p, ts_end);
        if (i < p->le) return fail(p, ERR_PARSE, i, "unexpected text after the timestamp");
    }
    size_t fi;
    int rc = family_of_sample(p, start, t + start, name_end - start, &fi);
    if (rc) return rc;
    struct prom_family *f = &p->e->families[fi];
    if ((rc = check_special_labels(p, start, f, t + start, name_end - start, n_labels))) return rc;
    const struct prom_sample *prev = f->n_samples ? &f->samples[f->n_samples - 1] : NULL;
    if (name_is(f->name, t + start, name_end - start))
        s.name = f->name;
    else if (prev && name_is(prev->name, t + start, name_end - start))
        s.name = prev->name;
    else if (!(s.name = arena_strndup(p->e->priv, t + start, name_end - start)))
        return ERR_NOMEM;
    if (n_labels) {
        struct prom_label *l = arena_alloc(p->e->priv, n_labels * sizeof(*l));
        if (!l) return ERR_NOMEM;
        memcpy(l, p->lbl, n_labels * sizeof(*l));
        s.labels = l;
    }
    if ((rc = sample_append(p, f, &s))) return rc;
    p->n_samples++;
    p->cur = fi;
    return 0;
}

/* Parses the line text[ls..le). */
static int parse_line(struct parser *p)
{
    const char *nul = memchr(p->text + p->ls, 0, p->le - p->ls);
    if (nul) return fail(p, ERR_PARSE, (size_t)(nul - p->text), "NUL byte");
    size_t i = skip_blanks(p, p->ls);
    if (i == p->le) return 0;
    if (p->text[i] == '#') return parse_comment(p, i);
    return parse_sample(p, i);
}

/* ---- entry points ------------------------------------------------------------------------------ */

void prom_exposition_free(struct prom_exposition *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n_families; i++) free(e->families[i].samples);
    free(e->families);
    if (e->priv) {
        for (struct prom_arena_chunk *c = e->priv->arena, *next; c; c = next) {
            next = c->next;
            free(c);
        }
        free(e->priv->index);
        free(e->priv);
    }
    free(e);
}

static void limits_resolve(struct prom_limits *lim, const struct prom_limits *in)
{
    *lim = in ? *in : (struct prom_limits){0};
    if (!lim->max_body) lim->max_body = PROM_DEFAULT_MAX_BODY;
    if (!lim->max_line) lim->max_line = PROM_DEFAULT_MAX_LINE;
    if (!lim->max_series) lim->max_series = PROM_DEFAULT_MAX_SERIES;
    if (!lim->max_labels) lim->max_labels = PROM_DEFAULT_MAX_LABELS;
}

int prom_parse(const char *text, size_t len, const struct prom_limits *limits,
               struct prom_exposition **out, char *err, size_t err_len)
{
    ASSERT(out && (text || len == 0));
    struct parser p = {.text = text, .len = len, .cur = SIZE_MAX, .err = err, .err_len = err_len};
    limits_resolve(&p.lim, limits);
    if (err && err_len) err[0] = 0;
    if (len > p.lim.max_body) {
        if (err && err_len)
            snprintf(err, err_len, "body of %zu bytes exceeds the limit of %zu bytes", len,
                     p.lim.max_body);
        return ERR_TOO_BIG;
    }
    int rc = ERR_NOMEM;
    if (!(p.e = calloc(1, sizeof(*p.e))) || !(p.e->priv = calloc(1, sizeof(*p.e->priv)))) goto out;
    for (size_t pos = 0; pos < len; pos = p.le + 1) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        p.line_no++;
        p.ls = pos;
        p.le = nl ? (size_t)(nl - text) : len;
        size_t next = p.le; /* where the next line starts, minus one */
        if (p.le > p.ls && text[p.le - 1] == '\r') p.le--;
        if (p.le - p.ls > p.lim.max_line) {
            rc = fail(&p, ERR_TOO_BIG, p.ls + p.lim.max_line,
                      "line longer than the limit of %zu bytes", p.lim.max_line);
            goto out;
        }
        if ((rc = parse_line(&p))) goto out;
        p.le = next;
    }
    *out = p.e;
    p.e = NULL;
    rc = 0;
out:
    if (rc == ERR_NOMEM && err && err_len) snprintf(err, err_len, "out of memory");
    prom_exposition_free(p.e);
    free(p.lbl);
    return rc;
}
