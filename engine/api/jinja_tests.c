/* Jinja2's tests (defined, none, string, mapping, iterable, sequence, equalto, ...) and globals
 * (range with the sandbox's bound, dict, namespace, and transformers' raise_exception and
 * strftime_now), and the argument binder the builtins share. */
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
        while (i < n_params && !jinja_sv_eq(kw[k], params[i].name)) i++;
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
bool jinja_absent(const struct jinja_val *v)
{
    return v->type == JV_UNDEF;
}

int jinja_want_int(struct jinja_ctx *c, const char *what, const struct jinja_val *v, int64_t *out)
{
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_BOOL ? v->b : v->i;
        return 0;
    }
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "%s: '%s' object cannot be interpreted as an integer", what,
                      jinja_type_name(v));
}

int jinja_want_str(struct jinja_ctx *c, const char *what, const struct jinja_val *v)
{
    if (v->type == JV_STR) return 0;
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "%s: expected a string, got '%s'", what, jinja_type_name(v));
}

/* jinja2's soft_str: strings (Markup too) stay as they are, other values become str(v). */
int jinja_soft_str(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out)
{
    if (v->type == JV_UNDEF && (v->flags & JV_F_UNSAFE)) return jinja_fail_undef(c, v);
    return jinja_str_of(c, v, out);
}

struct jinja_val jinja_gen_of(struct jinja_list *l)
{
    struct jinja_val v = jinja_list_val(l, JV_LIST);
    v.view = JV_VIEW_GEN;
    return v;
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
        if (jinja_sv_eq(name, tests[i].name)) return tests[i].id;
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
        if ((rc = jinja_want_int(c, "divisibleby", o, &m)) || (rc = mod_num(c, v, m, &r)))
            return rc;
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
        if (jinja_sv_eq(name, globals[i])) return (int)i;
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
        int rc = jinja_want_int(c, "range", &args[i], &v[n_args == 1 ? 1 : i]);
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
            (rc = jinja_want_str(c, "strftime_now", &b[0])))
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
