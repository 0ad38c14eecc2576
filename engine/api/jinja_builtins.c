/* Jinja2's builtin filters, tests and globals, with the argument names and defaults of
 * jinja2/filters.py and tests.py so keyword calls bind the same, plus transformers' tojson,
 * raise_exception and strftime_now. Filters that return generators in jinja2 (map, select,
 * reject, selectattr, rejectattr, items, unique, batch, slice, reverse of a sequence) return
 * generator values here too: truthy even when empty, no len(), consumed by one iteration. Builtins
 * that real templates do not use are known by name but refused (parse time, or when they run
 * inside an if), never approximated. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANGE 100000 /* jinja2.sandbox.MAX_RANGE */

/* ---------------------------------------------------------------- argument binding */

static bool sv_is(struct jinja_sv a, const char *b)
{
    size_t n = strlen(b);
    return a.len == n && memcmp(a.p, b, n) == 0;
}

int jinja_bind(struct jinja_ctx *c, const char *what, const struct jinja_param *params,
               size_t n_params, const struct jinja_val *args, size_t n_args,
               const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
               struct jinja_val *out)
{
    bool given[16] = {false};
    if (n_params > 16) return jinja_fail(c, ERR_INTERNAL, "%s: too many parameters", what);
    if (n_args > n_params)
        return jinja_fail(c, ERR_INVAL, "%s() takes at most %zu argument(s) (%zu given)", what,
                          n_params, n_args);
    for (size_t i = 0; i < n_params; i++) {
        out[i] = i < n_args ? args[i] : jinja_undef();
        given[i] = i < n_args;
    }
    for (size_t k = 0; k < n_kw; k++) {
        size_t i = 0;
        while (i < n_params && !sv_is(kw[k], params[i].name)) i++;
        if (i == n_params)
            return jinja_fail(c, ERR_INVAL, "%s() got an unexpected keyword argument '%.*s'", what,
                              (int)kw[k].len, kw[k].p);
        if (given[i])
            return jinja_fail(c, ERR_INVAL, "%s() got multiple values for argument '%s'", what,
                              params[i].name);
        out[i] = kwv[k];
        given[i] = true;
    }
    for (size_t i = 0; i < n_params; i++)
        if (params[i].required && !given[i])
            return jinja_fail(c, ERR_INVAL, "%s() missing required argument '%s'", what,
                              params[i].name);
    return 0;
}

/* An optional argument left out (jinja_bind leaves it undefined; an undefined value passed on
 * purpose means the same to every filter here). */
static bool absent(const struct jinja_val *v)
{
    return v->type == JV_UNDEF;
}

static int want_int(struct jinja_ctx *c, const char *what, const struct jinja_val *v, int64_t *out)
{
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_BOOL ? v->b : v->i;
        return 0;
    }
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "%s: '%s' object cannot be interpreted as an integer", what,
                      jinja_type_name(v));
}

static int want_str(struct jinja_ctx *c, const char *what, const struct jinja_val *v)
{
    if (v->type == JV_STR) return 0;
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "%s: expected a string, got '%s'", what, jinja_type_name(v));
}

/* jinja2's soft_str: strings (Markup too) stay as they are, other values become str(v). */
static int soft_str(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out)
{
    if (v->type == JV_UNDEF && (v->flags & JV_F_UNSAFE)) return jinja_fail_undef(c, v);
    return jinja_str_of(c, v, out);
}

static struct jinja_val gen_of(struct jinja_list *l)
{
    struct jinja_val v = jinja_list_val(l, JV_LIST);
    v.view = JV_VIEW_GEN;
    return v;
}

/* ---------------------------------------------------------------- attribute paths */

/* make_attrgetter: "a.b.0" looked up part by part with getitem (digits as integers); a default
 * replaces undefined results. */
static int attr_path(struct jinja_ctx *c, const struct jinja_val *attr,
                     const struct jinja_val *item, const struct jinja_val *def,
                     struct jinja_val *out)
{
    struct jinja_val v = *item;
    if (attr->type != JV_STR) {
        int rc = jinja_getitem(c, &v, attr, &v);
        if (rc) return rc;
        if (def && v.type == JV_UNDEF) v = *def;
        *out = v;
        return 0;
    }
    size_t start = 0;
    for (size_t i = 0; i <= attr->len; i++) {
        if (i < attr->len && attr->s[i] != '.') continue;
        struct jinja_val key = jinja_str(attr->s + start, i - start);
        bool digits = i > start;
        int64_t n = 0;
        for (size_t k = start; k < i && digits; k++) {
            if (attr->s[k] < '0' || attr->s[k] > '9' || n > INT64_MAX / 10)
                digits = false;
            else
                n = n * 10 + (attr->s[k] - '0');
        }
        if (digits) key = jinja_int(n);
        int rc = jinja_getitem(c, &v, &key, &v);
        if (rc) return rc;
        if (def && v.type == JV_UNDEF) v = *def;
        start = i + 1;
    }
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- sorting */

struct sort_item {
    struct jinja_val key, val;
};

/* Stable merge sort; reverse keeps equal items in order, as Python's sorted(reverse=True). */
static int sort_items(struct jinja_ctx *c, struct sort_item *v, size_t n, bool reverse)
{
    if (n < 2) return 0;
    struct sort_item *tmp = jinja_alloc(&c->arena, n * sizeof(*tmp));
    if (!tmp) return jinja_fail_alloc(c);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n,
                   hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                bool take_right;
                int rc = reverse ? jinja_less(c, &v[i].key, &v[j].key, &take_right)
                                 : jinja_less(c, &v[j].key, &v[i].key, &take_right);
                if (rc) return rc;
                tmp[k++] = take_right ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(*v));
        if (jinja_step(c, n)) return c->rc;
    }
    return 0;
}

/* ignore_case: strings compare lowercased. */
static int fold_key(struct jinja_ctx *c, bool case_sensitive, struct jinja_val *k)
{
    if (case_sensitive || k->type != JV_STR) return 0;
    return jinja_str_lower(c, k, k);
}

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
        if (sv_is(name, filters[i].name)) return filters[i].id;
    return -1;
}

static int filter_by_name(struct jinja_ctx *c, const struct jinja_val *name, int *id)
{
    if (name->type != JV_STR) return jinja_fail(c, ERR_INVAL, "a filter name must be a string");
    *id = jinja_filter_find(jinja_sv_of(name));
    if (*id >= 0) return 0;
    return jinja_fail(c, *id == -2 ? ERR_UNSUPPORTED : ERR_INVAL,
                      *id == -2 ? "the filter '%.*s' is not supported" : "no filter named '%.*s'",
                      (int)name->len, name->s);
}

/* select / reject / selectattr / rejectattr. */
static int select_reject(struct jinja_ctx *c, const struct jinja_val *in, bool by_attr, bool keep,
                         const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                         const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    *out = gen_of(res);
    if (!jinja_truthy(in)) return 0; /* `if value:` */
    size_t off = 0;
    if (by_attr) {
        if (n_args < 1) return jinja_fail(c, ERR_INVAL, "Missing parameter for attribute name");
        off = 1;
    }
    int test = -1;
    if (n_args > off) {
        if (args[off].type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "a test name must be a string");
        test = jinja_test_find(jinja_sv_of(&args[off]));
        if (test < 0)
            return jinja_fail(c, ERR_INVAL, "no test named '%.*s'", (int)args[off].len,
                              args[off].s);
    }
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (by_attr && (rc = attr_path(c, &args[0], &v, NULL, &v))) return rc;
        bool ok;
        if (test >= 0) {
            if ((rc = jinja_test_apply(c, test, &v, args + off + 1, n_args - off - 1, kw, kwv, n_kw,
                                       &ok)))
                return rc;
        } else {
            ok = jinja_truthy(&v);
        }
        if (ok == keep && (rc = jinja_list_push(c, res, items->v[i]))) return rc;
    }
    return 0;
}

static int filter_map(struct jinja_ctx *c, const struct jinja_val *in, const struct jinja_val *args,
                      size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                      size_t n_kw, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    *out = gen_of(res);
    if (!jinja_truthy(in)) return 0;
    const struct jinja_val *attr = NULL, *def = NULL;
    int filter = -1, rc;
    if (n_args == 0) {
        for (size_t k = 0; k < n_kw; k++) {
            if (sv_is(kw[k], "attribute"))
                attr = &kwv[k];
            else if (sv_is(kw[k], "default"))
                def = &kwv[k];
            else
                return jinja_fail(c, ERR_INVAL, "Unexpected keyword argument '%.*s'",
                                  (int)kw[k].len, kw[k].p);
        }
        if (!attr) return jinja_fail(c, ERR_INVAL, "map requires a filter argument");
        if (def && def->type == JV_NONE) def = NULL;
    } else if ((rc = filter_by_name(c, &args[0], &filter))) {
        return rc;
    }
    struct jinja_list *items;
    if ((rc = jinja_iterate(c, in, &items))) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v;
        rc = attr ? attr_path(c, attr, &items->v[i], def, &v)
                  : jinja_filter_apply(c, filter, &items->v[i], args + 1, n_args - 1, kw, kwv, n_kw,
                                       &v);
        if (rc || (rc = jinja_list_push(c, res, v))) return rc;
    }
    return 0;
}

static int filter_indent(struct jinja_ctx *c, const struct jinja_val *bound, struct jinja_val *out)
{
    const struct jinja_val *s = &bound[0];
    if (s->type != JV_STR) return want_str(c, "indent", s);
    struct jinja_val ind;
    int rc;
    if (absent(&bound[1])) {
        ind = jinja_str("    ", 4);
    } else if (bound[1].type == JV_STR) {
        ind = bound[1];
    } else {
        int64_t w;
        if ((rc = want_int(c, "indent", &bound[1], &w))) return rc;
        struct jinja_sb sp = {0};
        for (int64_t i = 0; i < w; i++)
            if ((rc = jinja_sb_putc(c, &sp, ' '))) return rc;
        ind = jinja_sb_val(&sp);
    }
    bool first = !absent(&bound[2]) && jinja_truthy(&bound[2]);
    bool blank = !absent(&bound[3]) && jinja_truthy(&bound[3]);
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

static int filter_first_last(struct jinja_ctx *c, const struct jinja_val *in, bool last,
                             struct jinja_val *out)
{
    if (last && in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE))
        return jinja_fail(c, ERR_INVAL, "'generator' object is not reversible");
    if (!last && in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE)) {
        struct jinja_list *l = in->l;
        if (l->pos < l->n) {
            *out = l->v[l->pos++];
            return 0;
        }
        *out = jinja_undef_msg(c, false, "No first item, sequence was empty.");
        return 0;
    }
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    if (items->n == 0) {
        *out = jinja_undef_msg(c, false,
                               last ? "No last item, sequence was empty."
                                    : "No first item, sequence was empty.");
        return 0;
    }
    *out = items->v[last ? items->n - 1 : 0];
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
    if (!absent(&b[1])) {
        if (b[1].type != JV_INT && b[1].type != JV_BOOL) {
            *out = b[1]; /* any default is returned as it is */
            def = INT64_MIN;
        } else {
            def = b[1].type == JV_BOOL ? b[1].b : b[1].i;
        }
    }
    if (!absent(&b[2]) && (rc = want_int(c, "int", &b[2], &base))) return rc;
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
        *out = absent(&b[1]) ? jinja_float(0.0) : b[1];
    }
    return 0;
}

static int filter_round(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    int64_t prec = 0;
    int rc;
    if (!absent(&b[1]) && (rc = want_int(c, "round", &b[1], &prec))) return rc;
    const char *method = "common";
    if (!absent(&b[2])) {
        if ((rc = want_str(c, "round", &b[2]))) return rc;
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
    o.ensure_ascii = !absent(&b[1]) && jinja_truthy(&b[1]);
    if (!absent(&b[2]) && b[2].type != JV_NONE) {
        if (b[2].type == JV_STR) {
            indent = jinja_sv_of(&b[2]);
        } else {
            int64_t w;
            if ((rc = want_int(c, "tojson", &b[2], &w))) return rc;
            struct jinja_sb sp = {0};
            for (int64_t i = 0; i < w; i++)
                if ((rc = jinja_sb_putc(c, &sp, ' '))) return rc;
            indent = (struct jinja_sv){sp.p ? sp.p : "", (uint32_t)sp.len};
        }
        o.indent = &indent;
    }
    if (!absent(&b[3]) && b[3].type != JV_NONE) {
        const struct jinja_val *s = &b[3];
        if ((s->type != JV_LIST && s->type != JV_TUPLE) || s->view || s->l->n != 2 ||
            s->l->v[0].type != JV_STR || s->l->v[1].type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "tojson: separators must be a pair of strings");
        isep = jinja_sv_of(&s->l->v[0]);
        ksep = jinja_sv_of(&s->l->v[1]);
        o.item_sep = &isep;
        o.key_sep = &ksep;
    }
    o.sort_keys = !absent(&b[4]) && jinja_truthy(&b[4]);
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
    if (!absent(&b[1]) && (rc = want_int(c, "truncate", &b[1], &length))) return rc;
    bool killwords = !absent(&b[2]) && jinja_truthy(&b[2]);
    struct jinja_val end = jinja_str("...", 3), s;
    if (!absent(&b[3])) {
        if ((rc = want_str(c, "truncate", &b[3]))) return rc;
        end = b[3];
    }
    if (!absent(&b[4]) && b[4].type != JV_NONE && (rc = want_int(c, "truncate", &b[4], &leeway)))
        return rc;
    if ((rc = soft_str(c, &b[0], &s))) return rc;
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
    int rc = soft_str(c, in, &s);
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
    if ((rc = soft_str(c, &b[0], &s))) return rc;
    if (!absent(&b[1]) && (rc = want_int(c, "center", &b[1], &width))) return rc;
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

static int filter_unique(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    bool cs = !absent(&b[1]) && jinja_truthy(&b[1]);
    struct jinja_list *items, *res = jinja_list_new(c, 0), *seen = jinja_list_new(c, 0);
    int rc;
    if (!res || !seen) return jinja_fail_alloc(c);
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (!absent(&b[2]) && b[2].type != JV_NONE && (rc = attr_path(c, &b[2], &k, NULL, &k)))
            return rc;
        if ((rc = fold_key(c, cs, &k))) return rc;
        if (k.type == JV_LIST || k.type == JV_DICT)
            return jinja_fail(c, ERR_INVAL, "unhashable type: '%s'", jinja_type_name(&k));
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = jinja_equal(&seen->v[j], &k);
        if ((rc = jinja_step(c, seen->n))) return rc;
        if (!dup &&
            ((rc = jinja_list_push(c, seen, k)) || (rc = jinja_list_push(c, res, items->v[i]))))
            return rc;
    }
    *out = gen_of(res);
    return 0;
}

static int filter_minmax(struct jinja_ctx *c, const struct jinja_val *b, bool max,
                         struct jinja_val *out)
{
    bool cs = !absent(&b[1]) && jinja_truthy(&b[1]);
    struct jinja_list *items;
    int rc = jinja_iterate(c, &b[0], &items);
    if (rc) return rc;
    if (items->n == 0) {
        *out = jinja_undef_msg(c, false, "No aggregated item, sequence was empty.");
        return 0;
    }
    struct jinja_val best = items->v[0], best_key = best;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (!absent(&b[2]) && b[2].type != JV_NONE && (rc = attr_path(c, &b[2], &k, NULL, &k)))
            return rc;
        if ((rc = fold_key(c, cs, &k))) return rc;
        bool better = i == 0;
        if (!better && (rc = max ? jinja_less(c, &best_key, &k, &better)
                                 : jinja_less(c, &k, &best_key, &better)))
            return rc;
        if (better) best = items->v[i], best_key = k;
    }
    *out = best;
    return 0;
}

static int filter_sort(struct jinja_ctx *c, const struct jinja_val *b, bool dictsort,
                       struct jinja_val *out)
{
    bool reverse, cs;
    struct jinja_list *items;
    int rc, by_value = 0;
    if (dictsort) { /* dictsort(value, case_sensitive, by, reverse) */
        cs = !absent(&b[1]) && jinja_truthy(&b[1]);
        if (!absent(&b[2])) {
            if ((rc = want_str(c, "dictsort", &b[2]))) return rc;
            if (!strcmp(b[2].s, "value"))
                by_value = 1;
            else if (strcmp(b[2].s, "key"))
                return jinja_fail(c, ERR_INVAL, "You can only sort by either \"key\" or \"value\"");
        }
        reverse = !absent(&b[3]) && jinja_truthy(&b[3]);
        if (b[0].type != JV_DICT)
            return jinja_fail(c, ERR_INVAL, "dictsort: '%s' is not a mapping",
                              jinja_type_name(&b[0]));
        items = jinja_list_new(c, b[0].d->n);
        if (!items) return jinja_fail_alloc(c);
        for (size_t i = 0; i < b[0].d->n; i++) {
            struct jinja_list *pair = jinja_list_new(c, 2);
            if (!pair) return jinja_fail_alloc(c);
            pair->v[0] = b[0].d->v[i].k;
            pair->v[1] = b[0].d->v[i].v;
            pair->n = 2;
            items->v[items->n++] = jinja_list_val(pair, JV_TUPLE);
        }
    } else { /* sort(value, reverse, case_sensitive, attribute) */
        reverse = !absent(&b[1]) && jinja_truthy(&b[1]);
        cs = !absent(&b[2]) && jinja_truthy(&b[2]);
        if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    }
    struct sort_item *v = jinja_alloc(&c->arena, (items->n ? items->n : 1) * sizeof(*v));
    if (!v) return jinja_fail_alloc(c);
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (dictsort) {
            k = k.l->v[by_value];
        } else if (!absent(&b[3]) && b[3].type != JV_NONE) {
            /* make_multi_attrgetter: "a,b" gives a list of keys */
            const struct jinja_val *attr = &b[3];
            struct jinja_list *parts = jinja_list_new(c, 0);
            if (!parts) return jinja_fail_alloc(c);
            size_t start = 0, alen = attr->type == JV_STR ? attr->len : 0;
            for (size_t e = 0; attr->type == JV_STR && e <= alen; e++) {
                if (e < alen && attr->s[e] != ',') continue;
                struct jinja_val one = jinja_str(attr->s + start, e - start), got;
                if ((rc = attr_path(c, &one, &items->v[i], NULL, &got)) ||
                    (rc = fold_key(c, cs, &got)) || (rc = jinja_list_push(c, parts, got)))
                    return rc;
                start = e + 1;
            }
            if (attr->type != JV_STR) {
                struct jinja_val got;
                if ((rc = attr_path(c, attr, &items->v[i], NULL, &got)) ||
                    (rc = fold_key(c, cs, &got)) || (rc = jinja_list_push(c, parts, got)))
                    return rc;
            }
            k = jinja_list_val(parts, JV_LIST);
            v[i] = (struct sort_item){k, items->v[i]};
            continue;
        } else {
            /* no attribute: make_multi_attrgetter still wraps the item in a one-element list */
            struct jinja_list *parts = jinja_list_new(c, 1);
            if (!parts) return jinja_fail_alloc(c);
            if ((rc = fold_key(c, cs, &k))) return rc;
            parts->v[0] = k;
            parts->n = 1;
            k = jinja_list_val(parts, JV_LIST);
        }
        if (dictsort && (rc = fold_key(c, cs, &k))) return rc;
        v[i] = (struct sort_item){k, items->v[i]};
    }
    if ((rc = sort_items(c, v, items->n, reverse))) return rc;
    struct jinja_list *res = jinja_list_new(c, items->n);
    if (!res) return jinja_fail_alloc(c);
    for (size_t i = 0; i < items->n; i++) res->v[res->n++] = v[i].val;
    *out = jinja_list_val(res, JV_LIST);
    return 0;
}

static int filter_batch_slice(struct jinja_ctx *c, const struct jinja_val *b, bool slice,
                              struct jinja_val *out)
{
    int64_t count;
    int rc = want_int(c, slice ? "slice" : "batch", &b[1], &count);
    if (rc) return rc;
    bool fill = !absent(&b[2]) && b[2].type != JV_NONE;
    struct jinja_list *items, *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    if (count <= 0)
        return jinja_fail(c, ERR_INVAL, "%s: the count must be positive",
                          slice ? "slice" : "batch");
    if (!slice) {
        for (size_t i = 0; i < items->n; i += (size_t)count) {
            struct jinja_list *part = jinja_list_new(c, 0);
            if (!part) return jinja_fail_alloc(c);
            for (size_t k = i; k < items->n && k < i + (size_t)count; k++)
                if ((rc = jinja_list_push(c, part, items->v[k]))) return rc;
            while (fill && part->n < (size_t)count)
                if ((rc = jinja_list_push(c, part, b[2]))) return rc;
            if ((rc = jinja_list_push(c, res, jinja_list_val(part, JV_LIST)))) return rc;
        }
    } else {
        size_t len = items->n, per = len / (size_t)count, extra = len % (size_t)count, off = 0;
        for (size_t s = 0; s < (size_t)count; s++) {
            size_t start = off + s * per;
            if (s < extra) off++;
            size_t end = off + (s + 1) * per;
            struct jinja_list *part = jinja_list_new(c, 0);
            if (!part) return jinja_fail_alloc(c);
            for (size_t k = start; k < end && k < len; k++)
                if ((rc = jinja_list_push(c, part, items->v[k]))) return rc;
            if (fill && s >= extra && (rc = jinja_list_push(c, part, b[2]))) return rc;
            if ((rc = jinja_list_push(c, res, jinja_list_val(part, JV_LIST)))) return rc;
        }
    }
    *out = gen_of(res);
    return 0;
}

static int filter_sum(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_val acc = absent(&b[2]) ? jinja_int(0) : b[2];
    if (acc.type == JV_STR)
        return jinja_fail(c, ERR_INVAL, "sum() can't sum strings [use ''.join(seq) instead]");
    struct jinja_list *items;
    int rc = jinja_iterate(c, &b[0], &items);
    if (rc) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (!absent(&b[1]) && b[1].type != JV_NONE && (rc = attr_path(c, &b[1], &v, NULL, &v)))
            return rc;
        if (acc.type == JV_INT && (v.type == JV_INT || v.type == JV_BOOL)) {
            int64_t r;
            if (__builtin_add_overflow(acc.i, v.type == JV_BOOL ? v.b : v.i, &r))
                return jinja_fail(c, ERR_INVAL, "integer overflow");
            acc = jinja_int(r);
        } else if ((acc.type == JV_INT || acc.type == JV_FLOAT || acc.type == JV_BOOL) &&
                   (v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL)) {
            double x = acc.type == JV_FLOAT ? acc.f : acc.type == JV_BOOL ? acc.b : (double)acc.i;
            double y = v.type == JV_FLOAT ? v.f : v.type == JV_BOOL ? v.b : (double)v.i;
            acc = jinja_float(x + y);
        } else {
            return jinja_fail(c, ERR_INVAL, "unsupported operand type(s) for +: '%s' and '%s'",
                              jinja_type_name(&acc), jinja_type_name(&v));
        }
    }
    *out = acc;
    return 0;
}

static int filter_reverse(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out)
{
    if (in->type == JV_STR) {
        struct jinja_sb sb = {0};
        for (size_t e = in->len; e > 0;) {
            size_t s = e - 1;
            while (s > 0 && ((uint8_t)in->s[s] & 0xC0) == 0x80) s--;
            int rc = jinja_sb_put(c, &sb, in->s + s, e - s);
            if (rc) return rc;
            e = s;
        }
        *out = jinja_sb_val(&sb);
        out->flags = in->flags & JV_F_SAFE;
        return 0;
    }
    bool gen = in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE);
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    struct jinja_list *res = jinja_list_new(c, items->n);
    if (!res) return jinja_fail_alloc(c);
    for (size_t i = items->n; i > 0; i--) res->v[res->n++] = items->v[i - 1];
    *out = gen ? jinja_list_val(res, JV_LIST) : gen_of(res); /* reversed() of a sequence */
    return 0;
}

static int filter_join(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_val d = jinja_str("", 0);
    struct jinja_list *items;
    int rc;
    if (!absent(&b[1]) && (rc = jinja_str_of(c, &b[1], &d))) return rc;
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    struct jinja_sb sb = {0};
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (!absent(&b[2]) && b[2].type != JV_NONE && (rc = attr_path(c, &b[2], &v, NULL, &v)))
            return rc;
        if (i && (rc = jinja_sb_put(c, &sb, d.s, d.len))) return rc;
        if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &v);
        if ((rc = jinja_to_str(c, &sb, &v))) return rc;
    }
    *out = jinja_sb_val(&sb);
    return 0;
}

static int filter_items(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, in->type == JV_DICT ? in->d->n : 0);
    if (!res) return jinja_fail_alloc(c);
    if (in->type == JV_UNDEF) {
        *out = gen_of(res);
        return 0;
    }
    if (in->type != JV_DICT)
        return jinja_fail(c, ERR_INVAL, "Can only get item pairs from a mapping.");
    for (size_t i = 0; i < in->d->n; i++) {
        struct jinja_list *pair = jinja_list_new(c, 2);
        if (!pair) return jinja_fail_alloc(c);
        pair->v[0] = in->d->v[i].k;
        pair->v[1] = in->d->v[i].v;
        pair->n = 2;
        res->v[res->n++] = jinja_list_val(pair, JV_TUPLE);
    }
    *out = gen_of(res);
    return jinja_step(c, res->n);
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
        if ((rc = want_str(c, "attr", &b[1]))) return rc;
        if (in->type == JV_UNDEF) return jinja_fail_undef(c, in);
        rc = jinja_pyattr(c, in, jinja_sv_of(&b[1]), out);
        if (rc < 0) return rc;
        if (rc == 0)
            *out = jinja_undef_msg(c, false, "'%s object' has no attribute '%.*s'",
                                   jinja_type_name(in), (int)b[1].len, b[1].s);
        return 0;
    case F_BATCH: return filter_batch_slice(c, b, false, out);
    case F_SLICE: return filter_batch_slice(c, b, true, out);
    case F_CAPITALIZE:
        if ((rc = soft_str(c, in, &s))) return rc;
        return jinja_str_capitalize(c, &s, out);
    case F_CENTER: return filter_center(c, b, out);
    case F_DEFAULT: {
        bool boolean = !absent(&b[2]) && jinja_truthy(&b[2]);
        bool use = in->type == JV_UNDEF || (boolean && !jinja_truthy(in));
        bool has_default = n_args >= 1;
        for (size_t k = 0; k < n_kw; k++) has_default |= sv_is(kw[k], "default_value");
        *out = !use ? *in : has_default ? b[1] : jinja_str("", 0);
        return 0;
    }
    case F_DICTSORT: return filter_sort(c, b, true, out);
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
    case F_FIRST: return filter_first_last(c, in, false, out);
    case F_LAST: return filter_first_last(c, in, true, out);
    case F_FLOAT: return filter_float(c, b, out);
    case F_FORMAT: {
        if (n_args && n_kw)
            return jinja_fail(c, ERR_INVAL,
                              "can't handle positional and keyword arguments at "
                              "the same time");
        if ((rc = soft_str(c, in, &s))) return rc;
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
    case F_ITEMS: return filter_items(c, in, out);
    case F_JOIN: return filter_join(c, b, out);
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
        if ((rc = soft_str(c, in, &s))) return rc;
        return id == F_LOWER ? jinja_str_lower(c, &s, out) : jinja_str_upper(c, &s, out);
    case F_MAP: return filter_map(c, in, args, n_args, kw, kwv, n_kw, out);
    case F_MAX: return filter_minmax(c, b, true, out);
    case F_MIN: return filter_minmax(c, b, false, out);
    case F_SELECT: return select_reject(c, in, false, true, args, n_args, kw, kwv, n_kw, out);
    case F_REJECT: return select_reject(c, in, false, false, args, n_args, kw, kwv, n_kw, out);
    case F_SELECTATTR: return select_reject(c, in, true, true, args, n_args, kw, kwv, n_kw, out);
    case F_REJECTATTR: return select_reject(c, in, true, false, args, n_args, kw, kwv, n_kw, out);
    case F_REPLACE: {
        /* without autoescape: str(s).replace(str(old), str(new), count): plain strings */
        struct jinja_val old, new_;
        int64_t count = -1;
        if ((rc = jinja_str_of(c, in, &s)) || (rc = jinja_str_of(c, &b[1], &old)) ||
            (rc = jinja_str_of(c, &b[2], &new_)))
            return rc;
        if (!absent(&b[3]) && b[3].type != JV_NONE && (rc = want_int(c, "replace", &b[3], &count)))
            return rc;
        s.flags = old.flags = new_.flags = 0;
        return jinja_str_replace(c, &s, &old, &new_, count, out);
    }
    case F_REVERSE: return filter_reverse(c, in, out);
    case F_ROUND: return filter_round(c, b, out);
    case F_SAFE:
        if (in->type == JV_UNDEF && (in->flags & JV_F_UNSAFE)) return jinja_fail_undef(c, in);
        if ((rc = jinja_str_of(c, in, out))) return rc;
        out->flags = JV_F_SAFE;
        return 0;
    case F_SORT: return filter_sort(c, b, false, out);
    case F_STRING: return soft_str(c, in, out);
    case F_SUM: return filter_sum(c, b, out);
    case F_TITLE:
        if ((rc = soft_str(c, in, &s))) return rc;
        return filter_title(c, &s, out);
    case F_TOJSON: return filter_tojson(c, b, out);
    case F_TRIM:
        if ((rc = soft_str(c, in, &s))) return rc;
        if (!absent(&b[1]) && b[1].type != JV_NONE && (rc = want_str(c, "trim", &b[1]))) return rc;
        return jinja_str_strip(c, &s, absent(&b[1]) || b[1].type == JV_NONE ? NULL : &b[1], 3, out);
    case F_TRUNCATE: return filter_truncate(c, b, out);
    case F_UNIQUE: return filter_unique(c, b, out);
    case F_WORDCOUNT: return filter_wordcount(c, in, out);
    default: break;
    }
    return jinja_fail(c, ERR_INTERNAL, "filter %d has no implementation", id);
}

/* ---------------------------------------------------------------- tests */

enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const struct {
    const char *name;
    int id;
} tests[] = {
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"==", T_EQ},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOAT},
    {">=", T_GE},
    {"ge", T_GE},
    {">", T_GT},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"<=", T_LE},
    {"le", T_LE},
    {"lower", T_LOWER},
    {"<", T_LT},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"mapping", T_MAPPING},
    {"!=", T_NE},
    {"ne", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRING},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int jinja_test_find(struct jinja_sv name)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (sv_is(name, tests[i].name)) return tests[i].id;
    return -1;
}

/* str(v).islower() / isupper(): some cased character, and every cased one of that case. */
static int case_test(struct jinja_ctx *c, const struct jinja_val *v, bool upper, bool *out)
{
    struct jinja_val s;
    int rc = jinja_str_of(c, v, &s);
    if (rc) return rc;
    bool cased = false, same = true;
    for (size_t i = 0; i < s.len && same;) {
        uint32_t cp = unicode_decode(s.s, s.len, &i);
        if (!unicode_is_cased(cp)) continue;
        cased = true;
        same = upper ? unicode_is_upper(cp) : unicode_is_lower(cp);
    }
    *out = cased && same;
    return 0;
}

/* v % m with Python's sign rule, for divisibleby / even / odd. */
static int mod_num(struct jinja_ctx *c, const struct jinja_val *v, int64_t m, double *out)
{
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    if (m == 0) return jinja_fail(c, ERR_INVAL, "integer division or modulo by zero");
    if (v->type == JV_INT || v->type == JV_BOOL) {
        int64_t x = v->type == JV_BOOL ? v->b : v->i;
        int64_t r = m == -1 ? 0 : x % m;
        if (r != 0 && ((r < 0) != (m < 0))) r += m;
        *out = (double)r;
        return 0;
    }
    if (v->type == JV_FLOAT) {
        double r = fmod(v->f, (double)m);
        if (r != 0 && ((r < 0) != (m < 0))) r += (double)m;
        *out = r;
        return 0;
    }
    return jinja_fail(c, ERR_INVAL, "unsupported operand type(s) for %%: '%s' and 'int'",
                      jinja_type_name(v));
}

int jinja_test_apply(struct jinja_ctx *c, int id, const struct jinja_val *in,
                     const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                     const struct jinja_val *kwv, size_t n_kw, bool *out)
{
    int rc = jinja_step(c, 1);
    if (rc) return rc;
    bool two = id == T_DIVISIBLEBY || id == T_EQ || id == T_GE || id == T_GT || id == T_IN ||
               id == T_LE || id == T_LT || id == T_NE || id == T_SAMEAS;
    size_t want = two ? 1 : 0;
    if (n_kw || n_args != want)
        return jinja_fail(c, ERR_INVAL, "test takes %zu argument(s) (%zu given)", want,
                          n_args + n_kw);
    const struct jinja_val *v = in, *o = two ? &args[0] : NULL;
    bool seq = v->type == JV_LIST || v->type == JV_TUPLE;
    double r;
    switch (id) {
    case T_BOOLEAN: *out = v->type == JV_BOOL; return 0;
    case T_CALLABLE:
        *out = v->type == JV_FUNC || v->type == JV_LOOP || v->type == JV_UNDEF;
        return 0;
    case T_DEFINED: *out = v->type != JV_UNDEF; return 0;
    case T_UNDEFINED: *out = v->type == JV_UNDEF; return 0;
    case T_DIVISIBLEBY: {
        int64_t m;
        if ((rc = want_int(c, "divisibleby", o, &m)) || (rc = mod_num(c, v, m, &r))) return rc;
        *out = r == 0;
        return 0;
    }
    case T_EVEN:
    case T_ODD:
        if ((rc = mod_num(c, v, 2, &r))) return rc;
        *out = id == T_EVEN ? r == 0 : r == 1;
        return 0;
    case T_EQ: *out = jinja_equal(v, o); return 0;
    case T_NE: *out = !jinja_equal(v, o); return 0;
    case T_GE: return jinja_order(c, 'g', v, o, out);
    case T_GT: return jinja_order(c, '>', v, o, out);
    case T_LE: return jinja_order(c, 'l', v, o, out);
    case T_LT: return jinja_order(c, '<', v, o, out);
    case T_ESCAPED: *out = v->type == JV_STR && (v->flags & JV_F_SAFE); return 0;
    case T_FALSE: *out = v->type == JV_BOOL && !v->b; return 0;
    case T_TRUE: *out = v->type == JV_BOOL && v->b; return 0;
    case T_FILTER:
    case T_TEST:
        *out = v->type == JV_STR && (id == T_FILTER ? jinja_filter_find(jinja_sv_of(v))
                                                    : jinja_test_find(jinja_sv_of(v))) != -1;
        return 0;
    case T_FLOAT: *out = v->type == JV_FLOAT; return 0;
    case T_INTEGER: *out = v->type == JV_INT; return 0;
    case T_NUMBER: *out = v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL; return 0;
    case T_IN: {
        if (o->type == JV_STR) {
            if (v->type != JV_STR)
                return jinja_fail(c, ERR_INVAL,
                                  "'in <string>' requires string as left operand, "
                                  "not %s",
                                  jinja_type_name(v));
            *out = v->len == 0 || memmem(o->s, o->len, v->s, v->len) != NULL;
            return 0;
        }
        if (o->type == JV_DICT) {
            *out = jinja_dict_get(o->d, v) != NULL;
            return 0;
        }
        struct jinja_list *items;
        if ((rc = jinja_iterate(c, o, &items))) return rc;
        *out = false;
        for (size_t i = 0; i < items->n && !*out; i++) *out = jinja_equal(v, &items->v[i]);
        return 0;
    }
    case T_ITERABLE:
        *out = v->type == JV_STR || seq || v->type == JV_DICT || v->type == JV_LOOP ||
               v->type == JV_UNDEF;
        return 0;
    case T_LOWER: return case_test(c, v, false, out);
    case T_UPPER: return case_test(c, v, true, out);
    case T_MAPPING: *out = v->type == JV_DICT; return 0;
    case T_NONE: *out = v->type == JV_NONE; return 0;
    case T_SAMEAS:
        if (v->type != o->type)
            *out = false;
        else if (v->type == JV_NONE || v->type == JV_UNDEF)
            *out = v->type == JV_NONE;
        else if (v->type == JV_BOOL)
            *out = v->b == o->b;
        else if (v->type == JV_INT)
            *out = v->i == o->i && v->i >= -5 && v->i <= 256;
        else if (v->type == JV_STR)
            *out = v->s == o->s && v->len == o->len;
        else
            *out = jinja_equal(v, o) && v->l == o->l;
        return 0;
    case T_SEQUENCE:
        *out = v->type == JV_STR ||
               (seq && v->view != JV_VIEW_GEN && v->view != JV_VIEW_ITEMS &&
                v->view != JV_VIEW_KEYS && v->view != JV_VIEW_VALUES) ||
               v->type == JV_DICT || v->type == JV_UNDEF;
        return 0;
    case T_STRING: *out = v->type == JV_STR; return 0;
    default: break;
    }
    return jinja_fail(c, ERR_INTERNAL, "test %d has no implementation", id);
}

/* ---------------------------------------------------------------- globals */

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME, G_CYCLER, G_JOINER, G_LIPSUM };

static const char *const globals[] = {
    [G_RANGE] = "range",           [G_DICT] = "dict",
    [G_NAMESPACE] = "namespace",   [G_RAISE] = "raise_exception",
    [G_STRFTIME] = "strftime_now", [G_CYCLER] = "cycler",
    [G_JOINER] = "joiner",         [G_LIPSUM] = "lipsum",
};

int jinja_global_find(struct jinja_sv name)
{
    for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
        if (sv_is(name, globals[i])) return (int)i;
    return -1;
}

const char *jinja_global_name(int id)
{
    return id >= 0 && (size_t)id < sizeof(globals) / sizeof(globals[0]) ? globals[id] : "?";
}

/* dict(**kw) / dict(mapping) / dict(pairs) into d. */
static int dict_args(struct jinja_ctx *c, struct jinja_dict *d, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, const char *what)
{
    if (n_args > 1)
        return jinja_fail(c, ERR_INVAL, "%s expected at most 1 argument, got %zu", what, n_args);
    if (n_args == 1) {
        const struct jinja_val *a = &args[0];
        if (a->type == JV_DICT || a->type == JV_NS) {
            for (size_t i = 0; i < a->d->n; i++)
                if (jinja_dict_set(&c->arena, d, a->d->v[i].k, a->d->v[i].v))
                    return jinja_fail_alloc(c);
        } else {
            struct jinja_list *items;
            int rc = jinja_iterate(c, a, &items);
            if (rc) return rc;
            for (size_t i = 0; i < items->n; i++) {
                const struct jinja_val *p = &items->v[i];
                if ((p->type != JV_LIST && p->type != JV_TUPLE) || p->view || p->l->n != 2)
                    return jinja_fail(c, ERR_INVAL, "%s: each item must be a pair", what);
                if (jinja_dict_set(&c->arena, d, p->l->v[0], p->l->v[1]))
                    return jinja_fail_alloc(c);
            }
        }
    }
    for (size_t k = 0; k < n_kw; k++)
        if (jinja_dict_set(&c->arena, d, jinja_str(kw[k].p, kw[k].len), kwv[k]))
            return jinja_fail_alloc(c);
    return 0;
}

static int global_range(struct jinja_ctx *c, const struct jinja_val *args, size_t n_args,
                        size_t n_kw, struct jinja_val *out)
{
    int64_t v[3] = {0, 0, 1};
    if (n_kw) return jinja_fail(c, ERR_INVAL, "range() takes no keyword arguments");
    if (n_args < 1 || n_args > 3)
        return jinja_fail(c, ERR_INVAL, "range expected 1 to 3 arguments, got %zu", n_args);
    for (size_t i = 0; i < n_args; i++) {
        int rc = want_int(c, "range", &args[i], &v[n_args == 1 ? 1 : i]);
        if (rc) return rc;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0) return jinja_fail(c, ERR_INVAL, "range() arg 3 must not be zero");
    int64_t n = 0;
    if (step > 0 && stop > start)
        n = (int64_t)(((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step) + 1;
    if (step < 0 && stop < start)
        n = (int64_t)(((uint64_t)start - (uint64_t)stop - 1) / (uint64_t)(-(step + 1) + 1)) + 1;
    if (n > MAX_RANGE)
        return jinja_fail(c, ERR_INVAL,
                          "Range too big. The sandbox blocks ranges larger than "
                          "MAX_RANGE (%d).",
                          MAX_RANGE);
    struct jinja_list *l = jinja_list_new(c, (size_t)n);
    if (!l) return jinja_fail_alloc(c);
    for (int64_t i = 0; i < n; i++) l->v[l->n++] = jinja_int(start + i * step);
    *out = jinja_list_val(l, JV_LIST);
    return jinja_step(c, (uint64_t)n);
}

int jinja_global_call(struct jinja_ctx *c, int id, const struct jinja_val *args, size_t n_args,
                      const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
                      struct jinja_val *out)
{
    int rc;
    switch (id) {
    case G_RANGE: return global_range(c, args, n_args, n_kw, out);
    case G_DICT:
    case G_NAMESPACE: {
        struct jinja_dict *d = jinja_dict_new(&c->arena);
        if (!d) return jinja_fail_alloc(c);
        if ((rc = dict_args(c, d, args, n_args, kw, kwv, n_kw, jinja_global_name(id)))) return rc;
        *out = (struct jinja_val){.type = id == G_DICT ? JV_DICT : JV_NS, .d = d};
        return 0;
    }
    case G_RAISE: {
        struct jinja_val m = jinja_str("", 0);
        static const struct jinja_param p[] = {{"message", true}};
        struct jinja_val b[1];
        if ((rc = jinja_bind(c, "raise_exception", p, 1, args, n_args, kw, kwv, n_kw, b)) ||
            (rc = jinja_str_of(c, &b[0], &m)))
            return rc;
        return jinja_fail(c, ERR_INVAL, "%.*s", (int)m.len, m.s);
    }
    case G_STRFTIME: {
        static const struct jinja_param p[] = {{"format", true}};
        struct jinja_val b[1];
        if ((rc = jinja_bind(c, "strftime_now", p, 1, args, n_args, kw, kwv, n_kw, b)) ||
            (rc = want_str(c, "strftime_now", &b[0])))
            return rc;
        struct tm tm;
        time_t now = c->now;
        if (!localtime_r(&now, &tm)) return jinja_fail(c, ERR_INVAL, "strftime_now: bad time");
        char buf[512];
        char fmt[256];
        if (b[0].len >= sizeof(fmt))
            return jinja_fail(c, ERR_INVAL, "strftime_now: format too long");
        memcpy(fmt, b[0].s, b[0].len);
        fmt[b[0].len] = '\0';
        size_t n = b[0].len ? strftime(buf, sizeof(buf), fmt, &tm) : 0;
        if (n == 0 && b[0].len)
            return jinja_fail(c, ERR_INVAL,
                              "strftime_now: the formatted time is empty or too long");
        return jinja_str_new(c, buf, n, out);
    }
    default: break;
    }
    return jinja_fail(c, ERR_UNSUPPORTED, "the global '%s' is not supported",
                      jinja_global_name(id));
}
