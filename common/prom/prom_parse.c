/* Prometheus text-format 0.0.4 parser (see common/prom/prom.h for what is accepted): one pass over the
 * body, line by line, with every limit checked before memory is committed. Strings live in an arena
 * owned by the exposition (prom_store.c); lexical helpers are in prom_text.c, lookups in
 * prom_query.c. Not an OpenMetrics parser. */
#include "common/prom/prom_priv.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parser state ---------------------------------------------------------------------------- */

struct parser {
    const char *text;
    struct prom_limits lim;
    struct prom_exposition *e;
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
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(msg, sizeof(msg), 0, fmt, ap);
    va_end(ap);
    return err_fmt(p->err, p->err_len, rc, "line %zu, column %zu: %s", p->line_no, pos - p->ls + 1,
                   msg);
}

/* At most this many bytes of a name are quoted in an error message. */
#define QUOTE_MAX   64
#define QUOTE(s, n) (int)((n) < QUOTE_MAX ? (n) : QUOTE_MAX), (s)

/* True when the NUL-terminated `name` is exactly s[0..n). */
static bool name_is(const char *name, const char *s, size_t n)
{
    return strncmp(name, s, n) == 0 && name[n] == 0;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static size_t skip_blanks(const struct parser *p, size_t i)
{
    while (i < p->le && is_blank(p->text[i])) i++;
    return i;
}

/* Returns the end of the name starting at `i` (== i when there is none). */
static size_t scan_name(const struct parser *p, size_t i, bool colon_ok)
{
    size_t start = i;
    while (i < p->le && prom_name_char(p->text[i], i == start, colon_ok)) i++;
    return i;
}

/* Returns the end of the token (non-blank run) starting at `i`. */
static size_t scan_token(const struct parser *p, size_t i)
{
    while (i < p->le && !is_blank(p->text[i])) i++;
    return i;
}

/* Scans escaped text from `i` to `end` (exclusive) or, when `quote`, to the first unescaped '"'.
 * Allowed escapes: \\ and \n, plus \" when `quote`; the rest must be valid UTF-8. On success writes
 * the end position (the closing quote when `quote`). */
static int scan_escaped(struct parser *p, size_t i, bool quote, size_t *end, const char *what)
{
    size_t open = i - 1; /* the opening quote when `quote` */
    while (i < p->le) {
        unsigned char c = (unsigned char)p->text[i];
        if (quote && c == '"') break;
        /* HELP text runs to the end of the line and has no escape for CR, so a CR in it could not
         * be told from a CRLF line ending: reject it rather than guess. */
        if (!quote && c == '\r') return fail(p, ERR_PARSE, i, "carriage return in %s", what);
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
            int k = utf8_seq_check((const uint8_t *)p->text + i, p->le - i);
            if (k <= 0) return fail(p, ERR_PARSE, i, "invalid UTF-8 in %s", what);
            i += (size_t)k;
        }
    }
    if (quote && i >= p->le) return fail(p, ERR_PARSE, open, "unterminated %s", what);
    *end = i;
    return 0;
}

/* Copies text[i..end), already validated by scan_escaped, into a new arena string, unescaping. */
static char *unescape(struct parser *p, size_t i, size_t end)
{
    char *d = prom_arena_alloc(p->e->priv, end - i + 1), *o = d;
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

/* ---- families -------------------------------------------------------------------------------- */

/* Creates family name[0..n) (untyped, no help) and returns its index in *out. */
static int family_new(struct parser *p, size_t pos, const char *name, size_t n, size_t *out)
{
    if (p->e->n_families >= p->lim.max_series)
        return fail(p, ERR_TOO_BIG, pos, "more than %zu metric families", p->lim.max_series);
    return prom_family_append(p->e, name, n, out);
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
    if (f != SIZE_MAX)
        return fail(p, ERR_PARSE, pos,
                    "sample '%.*s' of histogram family '%.*s' needs a "
                    "_bucket, _sum or _count suffix",
                    QUOTE(name, n), QUOTE(name, n));
    return family_new(p, pos, name, n, out);
}

/* ---- lines ----------------------------------------------------------------------------------- */

static const struct {
    const char *word;
    enum prom_type type;
} type_words[] = {{"counter", PROM_COUNTER},
                  {"gauge", PROM_GAUGE},
                  {"histogram", PROM_HISTOGRAM},
                  {"summary", PROM_SUMMARY},
                  {"untyped", PROM_UNTYPED}};

/* A histogram (summary) family also owns the samples <name>_bucket, _sum and _count (_sum, _count).
 * Samples under those names seen before its TYPE line were grouped as untyped families of their
 * own; a TYPE line now would regroup later ones, so it counts as a TYPE after samples. Writes the
 * name of such an earlier family with samples to *found (NULL when there is none). */
static int suffixed_with_samples(struct parser *p, const char *name, enum prom_type type,
                                 const char **found)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    *found = NULL;
    if (type != PROM_HISTOGRAM && type != PROM_SUMMARY) return 0;
    size_t n = strlen(name);
    char *tmp = malloc(n + sizeof("_bucket"));
    if (!tmp) return ERR_NOMEM;
    memcpy(tmp, name, n);
    for (size_t k = type == PROM_HISTOGRAM ? 0 : 1; k < ARRAY_LEN(suffixes) && !*found; k++) {
        size_t ns = strlen(suffixes[k]);
        memcpy(tmp + n, suffixes[k], ns);
        size_t f = prom_family_index(p->e, tmp, n + ns);
        if (f != SIZE_MAX && p->e->families[f].n_samples) *found = p->e->families[f].name;
    }
    free(tmp);
    return 0;
}

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
        size_t end;
        if ((rc = scan_escaped(p, v, false, &end, "HELP text"))) return rc;
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
        const char *early = NULL;
        if ((rc = suffixed_with_samples(p, fam->name, type_words[k].type, &early))) return rc;
        if (early)
            return fail(p, ERR_PARSE, i, "TYPE line for '%s' after its samples ('%s')", fam->name,
                        early);
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
        size_t v_end;
        int rc = scan_escaped(p, j + 1, true, &v_end, "label value");
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
        p->lbl[n].name = prom_arena_strndup(p->e->priv, t + i, name_end - i);
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
        if (prom_double_parse(s, strlen(s), &v) && !isnan(v)) return 0;
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
    if (!prom_double_parse(t + i, v_end - i, &s.value))
        return fail(p, ERR_PARSE, i, "invalid value '%.*s'", QUOTE(t + i, v_end - i));
    i = skip_blanks(p, v_end);
    if (i < p->le) {
        size_t ts_end = scan_token(p, i);
        if (!prom_int64_parse(t + i, ts_end - i, &s.timestamp_ms))
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
    else if (!(s.name = prom_arena_strndup(p->e->priv, t + start, name_end - start)))
        return ERR_NOMEM;
    if (n_labels) {
        struct prom_label *l = prom_arena_alloc(p->e->priv, n_labels * sizeof(*l));
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

/* ---- entry points ---------------------------------------------------------------------------- */

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
    struct parser p = {.text = text, .cur = SIZE_MAX, .err = err, .err_len = err_len};
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
    for (size_t pos = 0, eol; pos < len; pos = eol + 1) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        eol = nl ? (size_t)(nl - text) : len;
        p.line_no++;
        p.ls = pos;
        p.le = eol;
        if (p.le > p.ls && text[p.le - 1] == '\r') p.le--;
        if (p.le - p.ls > p.lim.max_line) {
            rc = fail(&p, ERR_TOO_BIG, p.ls + p.lim.max_line,
                      "line longer than the limit of %zu bytes", p.lim.max_line);
            goto out;
        }
        if ((rc = parse_line(&p))) goto out;
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
