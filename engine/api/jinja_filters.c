/* Jinja2's builtin filters with the argument names and defaults of jinja2/filters.py, so keyword
 * calls bind the same, plus transformers' tojson: the table (filters real templates do not use
 * are known by name but refused, never approximated), the dispatcher, and the string and number
 * filters. The sequence filters (map, select, sort, unique, join, ...) are in jinja_filters_seq.c. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- filters */

enum {
    F_ABS,
    F_ATTR,
    F_BATCH,
    F_CAPITALIZE,
    F_CENTER,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SLICE,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_TRUNCATE,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    int id; /* -2: a jinja2 builtin not supported here */
} filters[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"batch", F_BATCH},
    {"capitalize", F_CAPITALIZE},
    {"center", F_CENTER},
    {"count", F_LENGTH},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"filesizeformat", -2},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"forceescape", F_FORCEESCAPE},
    {"format", F_FORMAT},
    {"groupby", -2},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"pprint", -2},
    {"random", -2},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"slice", F_SLICE},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"striptags", -2},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"truncate", F_TRUNCATE},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"urlencode", -2},
    {"urlize", -2},
    {"wordcount", F_WORDCOUNT},
    {"wordwrap", -2},
    {"xmlattr", -2},
};

int jinja_filter_find(struct jinja_sv name)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (jinja_sv_eq(name, filters[i].name)) return filters[i].id;
    return -1;
}

static int filter_indent(struct jinja_ctx *c, const struct jinja_val *bound, struct jinja_val *out)
{
    const struct jinja_val *s = &bound[0];
    if (s->type != JV_STR) return jinja_want_str(c, "indent", s);
    struct jinja_val ind;
    int rc;
    if (jinja_absent(&bound[1])) {
        ind = jinja_str("    ", 4);
    } else if (bound[1].type == JV_STR) {
        ind = bound[1];
    } else {
        int64_t w;
        if ((rc = jinja_want_int(c, "indent", &bound[1], &w))) return rc;
        struct jinja_sb sp = {0};
        for (int64_t i = 0; i < w; i++)
            if ((rc = jinja_sb_putc(c, &sp, ' '))) return rc;
        ind = jinja_sb_val(&sp);
    }
    bool first = !jinja_absent(&bound[2]) && jinja_truthy(&bound[2]);
    bool blank = !jinja_absent(&bound[3]) && jinja_truthy(&bound[3]);
    /* s + "\n", then splitlines(): a trailing newline never yields an empty last line */
    struct jinja_sb sb = {0};
    if (first && (rc = jinja_sb_put(c, &sb, ind.s, ind.len))) return rc;
    size_t i = 0, n_line = 0;
    const char *p = s->s;
    size_t len = s->len;
    while (i <= len) {
        size_t e = i, next;
        /* the end of this line (Python's line boundaries) */
        for (;;) {
            if (e >= len) {
                next = len + 1;
                break;
            }
            size_t q = e;
            uint32_t cp = unicode_decode(p, len, &q);
            if (cp == '\n' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                next = q;
                break;
            }
            if (cp == '\r') {
                next = q < len && p[q] == '\n' ? q + 1 : q;
                break;
            }
            e = q;
        }
        if (n_line > 0) {
            if ((rc = jinja_sb_putc(c, &sb, '\n'))) return rc;
            if ((blank || e > i) && (rc = jinja_sb_put(c, &sb, ind.s, ind.len))) return rc;
        }
        if ((rc = jinja_sb_put(c, &sb, p + i, e - i))) return rc;
        n_line++;
        if (next > len) break; /* s + "\n" splits into the lines of s, a last empty one included */
        i = next;
    }
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

/* Python's int(str, base) for base 10 and float(str): whitespace, sign and underscores. */
static bool parse_py_int(const char *s, size_t len, int64_t base, int64_t *out)
{
    size_t i = 0;
    while (i < len && jinja_is_space((uint8_t)s[i])) i++;
    while (len > i && jinja_is_space((uint8_t)s[len - 1])) len--;
    bool neg = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    /* a 0x / 0o / 0b prefix is allowed for its base, and picks the base when base is 0 */
    if (len - i >= 2 && s[i] == '0') {
        char k = (char)(s[i + 1] | 0x20);
        int64_t pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            i += 2;
            if (i < len && s[i] == '_') i++;
        }
    }
    if (base == 0) {
        base = 10;
        if (len - i >= 2 && s[i] == '0') /* base 0: no leading zeros in a decimal */
            for (size_t k = i; k < len; k++)
                if (s[k] != '0' && s[k] != '_') return false;
    }
    if (i == len || base < 2 || base > 36) return false;
    int64_t v = 0;
    bool prev_digit = false;
    for (; i < len; i++) {
        char ch = s[i];
        if (ch == '_' && prev_digit && i + 1 < len && s[i + 1] != '_') {
            prev_digit = false;
            continue;
        }
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10
                                         : 99;
        if (d >= base || v > (INT64_MAX - d) / base) return false;
        v = v * base + d;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    *out = neg ? -v : v;
    return true;
}

static bool parse_py_float(const char *s, size_t len, double *out)
{
    char buf[128];
    size_t i = 0, o = 0;
    while (i < len && jinja_is_space((uint8_t)s[i])) i++;
    while (len > i && jinja_is_space((uint8_t)s[len - 1])) len--;
    if (len - i == 0 || len - i >= sizeof(buf)) return false;
    for (; i < len; i++) {
        if (s[i] == '_') {
            if (o == 0 || i + 1 >= len || !(s[i - 1] >= '0' && s[i - 1] <= '9') ||
                !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return false;
            continue;
        }
        buf[o++] = s[i];
    }
    buf[o] = '\0';
    if (o >= 2 && (buf[o - 1] | 0x20) == 'x') return false; /* strtod takes hex, Python not */
    for (size_t k = 0; k + 1 < o; k++)
        if (buf[k] == '0' && (buf[k + 1] | 0x20) == 'x') return false;
    char *end;
    double d = strtod(buf, &end);
    if (*end) return false;
    *out = d;
    return true;
}

static int filter_int(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    const struct jinja_val *v = &b[0];
    int64_t def = 0, base = 10;
    int rc;
    if (!jinja_absent(&b[1])) {
        if (b[1].type != JV_INT && b[1].type != JV_BOOL) {
            *out = b[1]; /* any default is returned as it is */
            def = INT64_MIN;
        } else {
            def = b[1].type == JV_BOOL ? b[1].b : b[1].i;
        }
    }
    if (!jinja_absent(&b[2]) && (rc = jinja_want_int(c, "int", &b[2], &base))) return rc;
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = jinja_int(v->type == JV_BOOL ? v->b : v->i);
        return 0;
    }
    if (v->type == JV_FLOAT) {
        if (isfinite(v->f) && fabs(v->f) < 9.2e18) {
            *out = jinja_int((int64_t)v->f);
            return 0;
        }
        if (isnan(v->f)) goto fallback;
        return jinja_fail(c, ERR_INVAL, "int: value too large");
    }
    if (v->type == JV_STR) {
        int64_t r;
        double d;
        if (parse_py_int(v->s, v->len, base, &r)) {
            *out = jinja_int(r);
            return 0;
        }
        if (parse_py_float(v->s, v->len, &d) && isfinite(d) && fabs(d) < 9.2e18) {
            *out = jinja_int((int64_t)d);
            return 0;
        }
    }
fallback:
    if (def != INT64_MIN)
        *out = jinja_int(def);
    else
        *out = b[1];
    return 0;
}

static int filter_float(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    const struct jinja_val *v = &b[0];
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    double d;
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = jinja_float(v->type == JV_BOOL ? v->b : (double)v->i);
    } else if (v->type == JV_FLOAT) {
        *out = *v;
    } else if (v->type == JV_STR && parse_py_float(v->s, v->len, &d)) {
        *out = jinja_float(d);
    } else {
        *out = jinja_absent(&b[1]) ? jinja_float(0.0) : b[1];
    }
    return 0;
}

static int filter_round(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    int64_t prec = 0;
    int rc;
    if (!jinja_absent(&b[1]) && (rc = jinja_want_int(c, "round", &b[1], &prec))) return rc;
    const char *method = "common";
    if (!jinja_absent(&b[2])) {
        if ((rc = jinja_want_str(c, "round", &b[2]))) return rc;
        method = b[2].s;
    }
    bool common = !strcmp(method, "common"), ceil_ = !strcmp(method, "ceil");
    if (!common && !ceil_ && strcmp(method, "floor"))
        return jinja_fail(c, ERR_INVAL, "method must be common, ceil or floor");
    const struct jinja_val *v = &b[0];
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    if (v->type != JV_INT && v->type != JV_BOOL && v->type != JV_FLOAT)
        return jinja_fail(c, ERR_INVAL, "round: '%s' is not a number", jinja_type_name(v));
    if (common && v->type != JV_FLOAT && prec >= 0) { /* round(int, n) stays an int */
        *out = jinja_int(v->type == JV_BOOL ? v->b : v->i);
        return 0;
    }
    double x = v->type == JV_FLOAT ? v->f : v->type == JV_BOOL ? v->b : (double)v->i;
    if (prec < -308 || prec > 308) return jinja_fail(c, ERR_INVAL, "round: precision out of range");
    if (common) {
        if (!isfinite(x)) {
            *out = jinja_float(x);
            return 0;
        }
        /* correctly rounded decimal, ties to even, as Python's round() */
        char buf[400];
        if (prec >= 0) {
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, x);
            *out = jinja_float(strtod(buf, NULL));
        } else {
            double p10 = pow(10.0, (double)-prec);
            double y = x / p10, r = nearbyint(y);
            *out = jinja_float(r * p10);
        }
        return 0;
    }
    double p10 = pow(10.0, (double)prec);
    *out = jinja_float((ceil_ ? ceil(x * p10) : floor(x * p10)) / p10);
    return 0;
}

static int filter_tojson(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_json_opts o = {0};
    struct jinja_sv indent, isep, ksep;
    int rc;
    o.ensure_ascii = !jinja_absent(&b[1]) && jinja_truthy(&b[1]);
    if (!jinja_absent(&b[2]) && b[2].type != JV_NONE) {
        if (b[2].type == JV_STR) {
            indent = jinja_sv_of(&b[2]);
        } else {
            int64_t w;
            if ((rc = jinja_want_int(c, "tojson", &b[2], &w))) return rc;
            struct jinja_sb sp = {0};
            for (int64_t i = 0; i < w; i++)
                if ((rc = jinja_sb_putc(c, &sp, ' '))) return rc;
            indent = (struct jinja_sv){sp.p ? sp.p : "", (uint32_t)sp.len};
        }
        o.indent = &indent;
    }
    if (!jinja_absent(&b[3]) && b[3].type != JV_NONE) {
        const struct jinja_val *s = &b[3];
        if ((s->type != JV_LIST && s->type != JV_TUPLE) || s->view || s->l->n != 2 ||
            s->l->v[0].type != JV_STR || s->l->v[1].type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "tojson: separators must be a pair of strings");
        isep = jinja_sv_of(&s->l->v[0]);
        ksep = jinja_sv_of(&s->l->v[1]);
        o.item_sep = &isep;
        o.key_sep = &ksep;
    }
    o.sort_keys = !jinja_absent(&b[4]) && jinja_truthy(&b[4]);
    struct jinja_sb sb = {0};
    if ((rc = jinja_to_json(c, &sb, &b[0], &o))) return rc;
    *out = jinja_sb_val(&sb);
    return 0;
}

/* The title filter: words split at runs of -, whitespace, (, {, [ and <; each gets an upper-case
 * first character and a lower-case rest (not str.title()). */
static int filter_title(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    struct jinja_sb sb = {0};
    const char *p = s->s;
    size_t len = s->len, i = 0;
    int rc = 0;
    while (i < len && !rc) {
        size_t q = i;
        uint32_t cp = unicode_decode(p, len, &q);
        bool sep =
            cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jinja_is_space(cp);
        size_t e = q;
        while (e < len) { /* the run of separators or of word characters */
            size_t r = e;
            uint32_t d = unicode_decode(p, len, &r);
            bool dsep =
                d == '-' || d == '(' || d == '{' || d == '[' || d == '<' || jinja_is_space(d);
            if (dsep != sep) break;
            e = r;
        }
        if (sep) {
            rc = jinja_sb_put(c, &sb, p + i, e - i);
        } else {
            struct jinja_val head = jinja_str(p + i, q - i), tail = jinja_str(p + q, e - q), u, l;
            if (!(rc = jinja_str_upper(c, &head, &u)) && !(rc = jinja_str_lower(c, &tail, &l)) &&
                !(rc = jinja_sb_put(c, &sb, u.s, u.len)))
                rc = jinja_sb_put(c, &sb, l.s, l.len);
        }
        i = e;
    }
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

static int filter_truncate(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    int64_t length = 255, leeway = 5;
    int rc;
    if (!jinja_absent(&b[1]) && (rc = jinja_want_int(c, "truncate", &b[1], &length))) return rc;
    bool killwords = !jinja_absent(&b[2]) && jinja_truthy(&b[2]);
    struct jinja_val end = jinja_str("...", 3), s;
    if (!jinja_absent(&b[3])) {
        if ((rc = jinja_want_str(c, "truncate", &b[3]))) return rc;
        end = b[3];
    }
    if (!jinja_absent(&b[4]) && b[4].type != JV_NONE &&
        (rc = jinja_want_int(c, "truncate", &b[4], &leeway)))
        return rc;
    if ((rc = jinja_soft_str(c, &b[0], &s))) return rc;
    int64_t n = (int64_t)jinja_utf8_count(s.s, s.len),
            ne = (int64_t)jinja_utf8_count(end.s, end.len);
    if (length < ne || leeway < 0)
        return jinja_fail(c, ERR_INVAL, "truncate: bad length or leeway");
    if (n <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = jinja_utf8_offset(s.s, s.len, (size_t)(length - ne));
    if (!killwords) { /* rsplit(" ", 1)[0] */
        size_t sp = cut;
        while (sp > 0 && s.s[sp - 1] != ' ') sp--;
        if (sp > 0) cut = sp - 1;
    }
    struct jinja_sb sb = {0};
    if ((rc = jinja_sb_put(c, &sb, s.s, cut)) || (rc = jinja_sb_put(c, &sb, end.s, end.len)))
        return rc;
    *out = jinja_sb_val(&sb);
    return 0;
}

static int filter_wordcount(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out)
{
    struct jinja_val s;
    int rc = jinja_soft_str(c, in, &s);
    if (rc) return rc;
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.len;) {
        uint32_t cp = unicode_decode(s.s, s.len, &i);
        enum unicode_cat cat = unicode_cat(cp);
        bool w = cp == '_' || cat == UNICODE_CAT_LETTER || cat == UNICODE_CAT_NUMBER;
        if (w && !in_word) words++;
        in_word = w;
    }
    *out = jinja_int(words);
    return 0;
}

static int filter_center(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_val s;
    int64_t width = 80;
    int rc;
    if ((rc = jinja_soft_str(c, &b[0], &s))) return rc;
    if (!jinja_absent(&b[1]) && (rc = jinja_want_int(c, "center", &b[1], &width))) return rc;
    int64_t n = (int64_t)jinja_utf8_count(s.s, s.len);
    if (width <= n) {
        *out = s;
        return 0;
    }
    int64_t marg = width - n, left = marg / 2 + (marg & width & 1);
    struct jinja_sb sb = {0};
    for (int64_t i = 0; i < marg && !rc; i++) {
        if (i == left) rc = jinja_sb_put(c, &sb, s.s, s.len);
        if (!rc) rc = jinja_sb_putc(c, &sb, ' ');
    }
    if (!rc && left == marg) rc = jinja_sb_put(c, &sb, s.s, s.len);
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    return 0;
}

/* Parameter lists, after the filtered value (params[0] is the value itself). */
#define P(name)                                                                                    \
    {                                                                                              \
        name, false                                                                                \
    }
#define R(name)                                                                                    \
    {                                                                                              \
        name, true                                                                                 \
    }
static const struct jinja_param p_attr[] = {R("obj"), R("name")};
static const struct jinja_param p_batch[] = {R("value"), R("linecount"), P("fill_with")};
static const struct jinja_param p_slice[] = {R("value"), R("slices"), P("fill_with")};
static const struct jinja_param p_center[] = {R("value"), P("width")};
static const struct jinja_param p_default[] = {P("value"), P("default_value"), P("boolean")};
static const struct jinja_param p_dictsort[] = {R("value"), P("case_sensitive"), P("by"),
                                                P("reverse")};
static const struct jinja_param p_float[] = {P("value"), P("default")};
static const struct jinja_param p_indent[] = {R("s"), P("width"), P("first"), P("blank")};
static const struct jinja_param p_int[] = {P("value"), P("default"), P("base")};
static const struct jinja_param p_join[] = {R("value"), P("d"), P("attribute")};
static const struct jinja_param p_minmax[] = {R("value"), P("case_sensitive"), P("attribute")};
static const struct jinja_param p_replace[] = {R("s"), R("old"), R("new"), P("count")};
static const struct jinja_param p_round[] = {R("value"), P("precision"), P("method")};
static const struct jinja_param p_sort[] = {R("value"), P("reverse"), P("case_sensitive"),
                                            P("attribute")};
static const struct jinja_param p_sum[] = {R("iterable"), P("attribute"), P("start")};
static const struct jinja_param p_tojson[] = {R("x"), P("ensure_ascii"), P("indent"),
                                              P("separators"), P("sort_keys")};
static const struct jinja_param p_trim[] = {R("value"), P("chars")};
static const struct jinja_param p_truncate[] = {R("s"), P("length"), P("killwords"), P("end"),
                                                P("leeway")};
static const struct jinja_param p_unique[] = {R("value"), P("case_sensitive"), P("attribute")};
static const struct jinja_param p_value[] = {P("value")};
#undef P
#undef R

#define NP(a) (sizeof(a) / sizeof((a)[0]))

int jinja_filter_apply(struct jinja_ctx *c, int id, const struct jinja_val *in,
                       const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                       const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out)
{
    struct jinja_val b[8], s, all[65];
    int rc = jinja_step(c, 1);
    if (rc) return rc;
    if (n_args > 64) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
    all[0] = *in;
    if (n_args) memcpy(all + 1, args, n_args * sizeof(*args));
    const struct jinja_param *params = p_value;
    size_t np = 1;
    const char *name = "filter";
    switch (id) {
    case F_ATTR: params = p_attr, np = NP(p_attr), name = "attr"; break;
    case F_BATCH: params = p_batch, np = NP(p_batch), name = "batch"; break;
    case F_SLICE: params = p_slice, np = NP(p_slice), name = "slice"; break;
    case F_CENTER: params = p_center, np = NP(p_center), name = "center"; break;
    case F_DEFAULT: params = p_default, np = NP(p_default), name = "default"; break;
    case F_DICTSORT: params = p_dictsort, np = NP(p_dictsort), name = "dictsort"; break;
    case F_FLOAT: params = p_float, np = NP(p_float), name = "float"; break;
    case F_INDENT: params = p_indent, np = NP(p_indent), name = "indent"; break;
    case F_INT: params = p_int, np = NP(p_int), name = "int"; break;
    case F_JOIN: params = p_join, np = NP(p_join), name = "join"; break;
    case F_MAX:
    case F_MIN: params = p_minmax, np = NP(p_minmax), name = id == F_MAX ? "max" : "min"; break;
    case F_REPLACE: params = p_replace, np = NP(p_replace), name = "replace"; break;
    case F_ROUND: params = p_round, np = NP(p_round), name = "round"; break;
    case F_SORT: params = p_sort, np = NP(p_sort), name = "sort"; break;
    case F_SUM: params = p_sum, np = NP(p_sum), name = "sum"; break;
    case F_TOJSON: params = p_tojson, np = NP(p_tojson), name = "tojson"; break;
    case F_TRIM: params = p_trim, np = NP(p_trim), name = "trim"; break;
    case F_TRUNCATE: params = p_truncate, np = NP(p_truncate), name = "truncate"; break;
    case F_UNIQUE: params = p_unique, np = NP(p_unique), name = "unique"; break;
    case F_MAP:
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
    case F_FORMAT: np = 0; break; /* *args, **kwargs */
    default: break;
    }
    if (np && (rc = jinja_bind(c, name, params, np, all, n_args + 1, kw, kwv, n_kw, b))) return rc;
    if (np) b[0] = *in; /* the value, undefined or not */

    switch (id) {
    case F_ABS:
        if (in->type == JV_FLOAT)
            *out = jinja_float(fabs(in->f));
        else if (in->type == JV_INT && in->i != INT64_MIN)
            *out = jinja_int(in->i < 0 ? -in->i : in->i);
        else if (in->type == JV_BOOL)
            *out = jinja_int(in->b);
        else if (in->type == JV_UNDEF)
            return jinja_fail_undef(c, in);
        else
            return jinja_fail(c, ERR_INVAL, "bad operand type for abs(): '%s'",
                              jinja_type_name(in));
        return 0;
    case F_ATTR:
        if ((rc = jinja_want_str(c, "attr", &b[1]))) return rc;
        if (in->type == JV_UNDEF) return jinja_fail_undef(c, in);
        rc = jinja_pyattr(c, in, jinja_sv_of(&b[1]), out);
        if (rc < 0) return rc;
        if (rc == 0)
            *out = jinja_undef_msg(c, false, "'%s object' has no attribute '%.*s'",
                                   jinja_type_name(in), (int)b[1].len, b[1].s);
        return 0;
    case F_BATCH: return jinja_filter_batch_slice(c, b, false, out);
    case F_SLICE: return jinja_filter_batch_slice(c, b, true, out);
    case F_CAPITALIZE:
        if ((rc = jinja_soft_str(c, in, &s))) return rc;
        return jinja_str_capitalize(c, &s, out);
    case F_CENTER: return filter_center(c, b, out);
    case F_DEFAULT: {
        bool boolean = !jinja_absent(&b[2]) && jinja_truthy(&b[2]);
        bool use = in->type == JV_UNDEF || (boolean && !jinja_truthy(in));
        bool has_default = n_args >= 1;
        for (size_t k = 0; k < n_kw; k++) has_default |= jinja_sv_eq(kw[k], "default_value");
        *out = !use ? *in : has_default ? b[1] : jinja_str("", 0);
        return 0;
    }
    case F_DICTSORT: return jinja_filter_sort(c, b, true, out);
    case F_ESCAPE:
    case F_FORCEESCAPE: {
        struct jinja_sb sb = {0};
        s = *in;
        if (id == F_FORCEESCAPE || s.type != JV_STR) {
            if ((rc = jinja_str_of(c, in, &s))) return rc;
            s.flags = 0;
        }
        if ((rc = jinja_escape_into(c, &sb, &s))) return rc;
        *out = jinja_sb_val(&sb);
        out->flags = JV_F_SAFE;
        return 0;
    }
    case F_FIRST: return jinja_filter_first_last(c, in, false, out);
    case F_LAST: return jinja_filter_first_last(c, in, true, out);
    case F_FLOAT: return filter_float(c, b, out);
    case F_FORMAT: {
        if (n_args && n_kw)
            return jinja_fail(c, ERR_INVAL,
                              "can't handle positional and keyword arguments at "
                              "the same time");
        if ((rc = jinja_soft_str(c, in, &s))) return rc;
        struct jinja_val fargs;
        if (n_kw) {
            struct jinja_dict *d = jinja_dict_new(&c->arena);
            if (!d) return jinja_fail_alloc(c);
            for (size_t k = 0; k < n_kw; k++)
                if (jinja_dict_set(&c->arena, d, jinja_str(kw[k].p, kw[k].len), kwv[k]))
                    return jinja_fail_alloc(c);
            fargs = (struct jinja_val){.type = JV_DICT, .d = d};
        } else {
            struct jinja_list *l = jinja_list_new(c, n_args);
            if (!l) return jinja_fail_alloc(c);
            if (n_args) memcpy(l->v, args, n_args * sizeof(*args));
            l->n = n_args;
            fargs = jinja_list_val(l, JV_TUPLE);
        }
        return jinja_str_percent(c, &s, &fargs, out);
    }
    case F_INDENT: return filter_indent(c, b, out);
    case F_INT: return filter_int(c, b, out);
    case F_ITEMS: return jinja_filter_items(c, in, out);
    case F_JOIN: return jinja_filter_join(c, b, out);
    case F_LENGTH: {
        int64_t n;
        if ((rc = jinja_length(c, in, &n))) return rc;
        *out = jinja_int(n);
        return 0;
    }
    case F_LIST: {
        struct jinja_list *items;
        if ((rc = jinja_iterate(c, in, &items))) return rc;
        struct jinja_list *l = jinja_list_new(c, items->n);
        if (!l) return jinja_fail_alloc(c);
        if (items->n) memcpy(l->v, items->v, items->n * sizeof(*l->v));
        l->n = items->n;
        *out = jinja_list_val(l, JV_LIST);
        return 0;
    }
    case F_LOWER:
    case F_UPPER:
        if ((rc = jinja_soft_str(c, in, &s))) return rc;
        return id == F_LOWER ? jinja_str_lower(c, &s, out) : jinja_str_upper(c, &s, out);
    case F_MAP: return jinja_filter_map(c, in, args, n_args, kw, kwv, n_kw, out);
    case F_MAX: return jinja_filter_minmax(c, b, true, out);
    case F_MIN: return jinja_filter_minmax(c, b, false, out);
    case F_SELECT: return jinja_filter_select(c, in, false, true, args, n_args, kw, kwv, n_kw, out);
    case F_REJECT:
        return jinja_filter_select(c, in, false, false, args, n_args, kw, kwv, n_kw, out);
    case F_SELECTATTR:
        return jinja_filter_select(c, in, true, true, args, n_args, kw, kwv, n_kw, out);
    case F_REJECTATTR:
        return jinja_filter_select(c, in, true, false, args, n_args, kw, kwv, n_kw, out);
    case F_REPLACE: {
        /* without autoescape: str(s).replace(str(old), str(new), count): plain strings */
        struct jinja_val old, new_;
        int64_t count = -1;
        if ((rc = jinja_str_of(c, in, &s)) || (rc = jinja_str_of(c, &b[1], &old)) ||
            (rc = jinja_str_of(c, &b[2], &new_)))
            return rc;
        if (!jinja_absent(&b[3]) && b[3].type != JV_NONE &&
            (rc = jinja_want_int(c, "replace", &b[3], &count)))
            return rc;
        s.flags = old.flags = new_.flags = 0;
        return jinja_str_replace(c, &s, &old, &new_, count, out);
    }
    case F_REVERSE: return jinja_filter_reverse(c, in, out);
    case F_ROUND: return filter_round(c, b, out);
    case F_SAFE:
        if (in->type == JV_UNDEF && (in->flags & JV_F_UNSAFE)) return jinja_fail_undef(c, in);
        if ((rc = jinja_str_of(c, in, out))) return rc;
        out->flags = JV_F_SAFE;
        return 0;
    case F_SORT: return jinja_filter_sort(c, b, false, out);
    case F_STRING: return jinja_soft_str(c, in, out);
    case F_SUM: return jinja_filter_sum(c, b, out);
    case F_TITLE:
        if ((rc = jinja_soft_str(c, in, &s))) return rc;
        return filter_title(c, &s, out);
    case F_TOJSON: return filter_tojson(c, b, out);
    case F_TRIM:
        if ((rc = jinja_soft_str(c, in, &s))) return rc;
        if (!jinja_absent(&b[1]) && b[1].type != JV_NONE && (rc = jinja_want_str(c, "trim", &b[1])))
            return rc;
        return jinja_str_strip(c, &s, jinja_absent(&b[1]) || b[1].type == JV_NONE ? NULL : &b[1], 3,
                               out);
    case F_TRUNCATE: return filter_truncate(c, b, out);
    case F_UNIQUE: return jinja_filter_unique(c, b, out);
    case F_WORDCOUNT: return filter_wordcount(c, in, out);
    default: break;
    }
    return jinja_fail(c, ERR_INTERNAL, "filter %d has no implementation", id);
}
