/* Python methods of template values: str (strip, split, startswith, replace, format, ...), dict
 * (get, items, keys, values), list and tuple (count, index), the loop's cycle() and changed():
 * which names exist per type, argument binding, and the calls (the string algorithms are in
 * jinja_str.c, the formatters in jinja_format.c). The sandbox's rules apply: a method that would
 * mutate (list.append, dict.update) is an unsafe attribute, and a Markup receiver escapes string
 * arguments as markupsafe does. Methods that exist in Python but not here are values that fail
 * with a message naming them when called. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum method_id {
    M_UNSUPPORTED = 0,
    /* str */
    M_CAPITALIZE,
    M_CENTER,
    M_COUNT,
    M_ENDSWITH,
    M_FIND,
    M_FORMAT,
    M_INDEX,
    M_ISALNUM,
    M_ISALPHA,
    M_ISASCII,
    M_ISDIGIT,
    M_ISLOWER,
    M_ISSPACE,
    M_ISUPPER,
    M_JOIN,
    M_LJUST,
    M_LOWER,
    M_LSTRIP,
    M_PARTITION,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_REPLACE,
    M_RFIND,
    M_RINDEX,
    M_RJUST,
    M_RPARTITION,
    M_RSPLIT,
    M_RSTRIP,
    M_SPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_STRIP,
    M_TITLE,
    M_UPPER,
    M_ZFILL,
    /* dict */
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_COPY,
    /* list / tuple */
    M_LCOUNT,
    M_LINDEX,
};

#define MF_MUTATES 1 /* the sandbox blocks it */
#define MF_ESCAPES 2 /* on a Markup receiver: string arguments escaped, the result Markup */
#define MF_MARKUP  4 /* on a Markup receiver: the results are Markup, arguments as they are */

struct method {
    const char *name;
    int id;
    int flags;
};

static const struct method str_methods[] = {
    {"capitalize", M_CAPITALIZE, MF_ESCAPES},
    {"casefold", M_UNSUPPORTED, 0},
    {"center", M_CENTER, MF_ESCAPES},
    {"count", M_COUNT, 0},
    {"encode", M_UNSUPPORTED, 0},
    {"endswith", M_ENDSWITH, 0},
    {"expandtabs", M_UNSUPPORTED, 0},
    {"find", M_FIND, 0},
    {"format", M_FORMAT, 0},
    {"format_map", M_UNSUPPORTED, 0},
    {"index", M_INDEX, 0},
    {"isalnum", M_ISALNUM, 0},
    {"isalpha", M_ISALPHA, 0},
    {"isascii", M_ISASCII, 0},
    {"isdecimal", M_ISDIGIT, 0},
    {"isdigit", M_ISDIGIT, 0},
    {"isidentifier", M_UNSUPPORTED, 0},
    {"islower", M_ISLOWER, 0},
    {"isnumeric", M_ISDIGIT, 0},
    {"isprintable", M_UNSUPPORTED, 0},
    {"isspace", M_ISSPACE, 0},
    {"istitle", M_UNSUPPORTED, 0},
    {"isupper", M_ISUPPER, 0},
    {"join", M_JOIN, MF_ESCAPES},
    {"ljust", M_LJUST, MF_ESCAPES},
    {"lower", M_LOWER, MF_ESCAPES},
    {"lstrip", M_LSTRIP, MF_ESCAPES},
    {"maketrans", M_UNSUPPORTED, 0},
    {"partition", M_PARTITION, MF_ESCAPES},
    {"removeprefix", M_REMOVEPREFIX, 0},
    {"removesuffix", M_REMOVESUFFIX, 0},
    {"replace", M_REPLACE, MF_ESCAPES},
    {"rfind", M_RFIND, 0},
    {"rindex", M_RINDEX, 0},
    {"rjust", M_RJUST, MF_ESCAPES},
    {"rpartition", M_RPARTITION, MF_ESCAPES},
    {"rsplit", M_RSPLIT, MF_MARKUP},
    {"rstrip", M_RSTRIP, MF_ESCAPES},
    {"split", M_SPLIT, MF_MARKUP},
    {"splitlines", M_SPLITLINES, MF_MARKUP},
    {"startswith", M_STARTSWITH, 0},
    {"strip", M_STRIP, MF_ESCAPES},
    {"swapcase", M_UNSUPPORTED, 0},
    {"title", M_TITLE, MF_ESCAPES},
    {"translate", M_UNSUPPORTED, 0},
    {"upper", M_UPPER, MF_ESCAPES},
    {"zfill", M_ZFILL, MF_ESCAPES},
    {"striptags", M_UNSUPPORTED, 0}, /* Markup only */
    {"unescape", M_UNSUPPORTED, 0},  /* Markup only */
};

static const struct method dict_methods[] = {
    {"clear", 0, MF_MUTATES},  {"copy", M_COPY, 0},        {"fromkeys", M_UNSUPPORTED, 0},
    {"get", M_GET, 0},         {"items", M_ITEMS, 0},      {"keys", M_KEYS, 0},
    {"pop", 0, MF_MUTATES},    {"popitem", 0, MF_MUTATES}, {"setdefault", 0, MF_MUTATES},
    {"update", 0, MF_MUTATES}, {"values", M_VALUES, 0},
};

static const struct method list_methods[] = {
    {"append", 0, MF_MUTATES},  {"clear", 0, MF_MUTATES},  {"copy", M_COPY, 0},
    {"count", M_LCOUNT, 0},     {"extend", 0, MF_MUTATES}, {"index", M_LINDEX, 0},
    {"insert", 0, MF_MUTATES},  {"pop", 0, MF_MUTATES},    {"remove", 0, MF_MUTATES},
    {"reverse", 0, MF_MUTATES}, {"sort", 0, MF_MUTATES},
};

static const struct method tuple_methods[] = {{"count", M_LCOUNT, 0}, {"index", M_LINDEX, 0}};

static const struct method int_attrs[] = {
    {"as_integer_ratio", 0, 0},
    {"bit_count", 0, 0},
    {"bit_length", 0, 0},
    {"conjugate", 0, 0},
    {"denominator", 0, 0},
    {"from_bytes", 0, 0},
    {"imag", 0, 0},
    {"numerator", 0, 0},
    {"real", 0, 0},
    {"to_bytes", 0, 0},
    {"is_integer", 0, 0},
    {"hex", 0, 0},
    {"fromhex", 0, 0},
};

static const struct method view_attrs[] = {{"isdisjoint", 0, 0}, {"mapping", 0, 0}};
static const struct method gen_attrs[] = {{"close", 0, 0}, {"send", 0, 0}, {"throw", 0, 0}};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct method *find_method(const struct method *t, size_t n, struct jinja_sv name)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(t[i].name) == name.len && memcmp(t[i].name, name.p, name.len) == 0) return &t[i];
    return NULL;
}

int jinja_method_lookup(struct jinja_ctx *c, const struct jinja_val *self, struct jinja_sv name,
                        struct jinja_val *out)
{
    const struct method *m = NULL;
    switch (self->type) {
    case JV_STR: m = find_method(str_methods, N(str_methods), name); break;
    case JV_DICT: m = find_method(dict_methods, N(dict_methods), name); break;
    case JV_LIST:
        if (self->view == JV_VIEW_GEN)
            m = find_method(gen_attrs, N(gen_attrs), name);
        else if (self->view)
            m = find_method(view_attrs, N(view_attrs), name);
        else
            m = find_method(list_methods, N(list_methods), name);
        break;
    case JV_TUPLE: m = find_method(tuple_methods, N(tuple_methods), name); break;
    case JV_INT:
    case JV_BOOL:
    case JV_FLOAT: m = find_method(int_attrs, N(int_attrs), name); break;
    default: break;
    }
    if (!m) return 0;
    if (m->flags & MF_MUTATES) {
        *out = jinja_undef_msg(c, true, "access to attribute '%s' of '%s' object is unsafe.",
                               m->name, jinja_type_name(self));
        return 1;
    }
    struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
    if (!f) return jinja_fail_alloc(c);
    memset(f, 0, sizeof(*f));
    f->kind = JF_METHOD;
    f->id = m->id;
    f->name = name;
    f->self = *self;
    *out = (struct jinja_val){.type = JV_FUNC, .fn = f};
    return 1;
}

/* ---------------------------------------------------------------- calls */

static int arg_str(struct jinja_ctx *c, const char *what, const struct jinja_val *v)
{
    if (v->type == JV_STR) return 0;
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "%s arg must be None or str, not %s", what, jinja_type_name(v));
}

static int arg_int(struct jinja_ctx *c, const struct jinja_val *v, int64_t *out)
{
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_BOOL ? v->b : v->i;
        return 0;
    }
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    return jinja_fail(c, ERR_INVAL, "'%s' object cannot be interpreted as an integer",
                      jinja_type_name(v));
}

/* startswith / endswith with a str or a tuple of str, and optional start/end (code points). */
static int str_affix(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *args,
                     size_t n_args, bool end_side, bool *out)
{
    if (n_args < 1 || n_args > 3)
        return jinja_fail(c, ERR_INVAL, "startswith/endswith takes 1 to 3 arguments");
    size_t a = 0, b = s->len;
    int rc;
    size_t ncp = jinja_utf8_count(s->s, s->len);
    for (size_t k = 1; k < n_args; k++) {
        if (args[k].type == JV_NONE) continue;
        int64_t x;
        if ((rc = arg_int(c, &args[k], &x))) return rc;
        if (x < 0) x += (int64_t)ncp;
        if (x < 0) x = 0;
        if ((size_t)x > ncp) x = (int64_t)ncp;
        size_t off = jinja_utf8_offset(s->s, s->len, (size_t)x);
        if (k == 1)
            a = off;
        else
            b = off;
    }
    const struct jinja_val *opts = &args[0];
    size_t n_opts = 1;
    if (opts->type == JV_TUPLE) {
        n_opts = opts->l->n;
        opts = opts->l->v;
    } else if (opts->type != JV_STR) {
        return jinja_fail(c, ERR_INVAL, "%s first arg must be str or a tuple of str, not %s",
                          end_side ? "endswith" : "startswith", jinja_type_name(opts));
    }
    *out = false;
    for (size_t k = 0; k < n_opts && !*out; k++) {
        const struct jinja_val *p = &opts[k];
        if (p->type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "tuple for startswith/endswith must only contain str");
        if (b < a || b - a < p->len) continue;
        *out = memcmp(end_side ? s->s + b - p->len : s->s + a, p->s, p->len) == 0;
    }
    return 0;
}

/* find / rfind / index / rindex / count of sub in s (results in code points). */
static int str_find(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *args,
                    size_t n_args, int id, struct jinja_val *out)
{
    if (n_args < 1 || n_args > 3) return jinja_fail(c, ERR_INVAL, "find takes 1 to 3 arguments");
    int rc = arg_str(c, "find", &args[0]);
    if (rc) return rc;
    size_t ncp = jinja_utf8_count(s->s, s->len);
    int64_t lo = 0, hi = (int64_t)ncp;
    for (size_t k = 1; k < n_args; k++) {
        if (args[k].type == JV_NONE) continue;
        int64_t x;
        if ((rc = arg_int(c, &args[k], &x))) return rc;
        if (x < 0) x += (int64_t)ncp;
        if (x < 0) x = 0;
        if (x > (int64_t)ncp) x = (int64_t)ncp;
        if (k == 1)
            lo = x;
        else
            hi = x;
    }
    const struct jinja_val *sub = &args[0];
    size_t a = jinja_utf8_offset(s->s, s->len, (size_t)lo);
    size_t b = hi > lo ? jinja_utf8_offset(s->s, s->len, (size_t)hi) : a;
    if (id == M_COUNT) {
        int64_t n = 0;
        if (sub->len == 0) {
            n = hi >= lo ? hi - lo + 1 : 0;
        } else {
            for (size_t i = a; i + sub->len <= b;) {
                const char *h = memmem(s->s + i, b - i, sub->s, sub->len);
                if (!h) break;
                n++;
                i = (size_t)(h - s->s) + sub->len;
            }
        }
        *out = jinja_int(n);
        return 0;
    }
    bool right = id == M_RFIND || id == M_RINDEX;
    int64_t found = -1;
    if (hi - lo >= 0 && b - a >= sub->len) {
        if (!right) {
            const char *h = memmem(s->s + a, b - a, sub->s, sub->len);
            if (h) found = (int64_t)jinja_utf8_count(s->s, (size_t)(h - s->s));
        } else {
            for (size_t k = b - sub->len + 1; k-- > a;)
                if (memcmp(s->s + k, sub->s, sub->len) == 0) {
                    found = (int64_t)jinja_utf8_count(s->s, k);
                    break;
                }
        }
    }
    if (found < 0 && (id == M_INDEX || id == M_RINDEX))
        return jinja_fail(c, ERR_INVAL, "substring not found");
    *out = jinja_int(found);
    return 0;
}

static int str_justify(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *args,
                       size_t n_args, int id, struct jinja_val *out)
{
    int64_t width;
    uint32_t fill = id == M_ZFILL ? '0' : ' ';
    if (n_args < 1 || n_args > (id == M_ZFILL ? 1u : 2u))
        return jinja_fail(c, ERR_INVAL, "wrong number of arguments");
    int rc = arg_int(c, &args[0], &width);
    if (rc) return rc;
    if (n_args == 2) {
        if (args[1].type != JV_STR || jinja_utf8_count(args[1].s, args[1].len) != 1)
            return jinja_fail(c, ERR_INVAL,
                              "The fill character must be exactly one character long");
        size_t q = 0;
        fill = unicode_decode(args[1].s, args[1].len, &q);
    }
    size_t n = jinja_utf8_count(s->s, s->len);
    if (width <= (int64_t)n) {
        *out = *s;
        return 0;
    }
    if (width > 1000000) return jinja_fail(c, ERR_TOO_BIG, "width too large");
    size_t marg = (size_t)width - n, left;
    if (id == M_LJUST)
        left = 0;
    else if (id == M_RJUST || id == M_ZFILL)
        left = marg;
    else
        left = marg / 2 + (marg & (size_t)width & 1);
    struct jinja_sb sb = {0};
    size_t start = 0;
    if (id == M_ZFILL && s->len && (s->s[0] == '+' || s->s[0] == '-')) {
        rc = jinja_sb_putc(c, &sb, s->s[0]);
        start = 1;
    }
    for (size_t i = 0; i < left && !rc; i++) rc = jinja_sb_cpt(c, &sb, fill);
    if (!rc) rc = jinja_sb_put(c, &sb, s->s + start, s->len - start);
    for (size_t i = left; i < marg && !rc; i++) rc = jinja_sb_cpt(c, &sb, fill);
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    return 0;
}

static int str_partition(struct jinja_ctx *c, const struct jinja_val *s,
                         const struct jinja_val *sep, bool right, struct jinja_val *out)
{
    if (sep->len == 0) return jinja_fail(c, ERR_INVAL, "empty separator");
    struct jinja_list *l = jinja_list_new(c, 3);
    if (!l) return jinja_fail_alloc(c);
    size_t at = SIZE_MAX;
    if (!right) {
        const char *h = memmem(s->s, s->len, sep->s, sep->len);
        if (h) at = (size_t)(h - s->s);
    } else if (s->len >= sep->len) {
        for (size_t k = s->len - sep->len + 1; k-- > 0;)
            if (memcmp(s->s + k, sep->s, sep->len) == 0) {
                at = k;
                break;
            }
    }
    uint8_t fl = s->flags & JV_F_SAFE;
    if (at == SIZE_MAX) {
        l->v[0] = right ? jinja_str("", 0) : *s;
        l->v[1] = jinja_str("", 0);
        l->v[2] = right ? *s : jinja_str("", 0);
    } else {
        l->v[0] = jinja_str(s->s, at);
        l->v[1] = jinja_str(s->s + at, sep->len);
        l->v[2] = jinja_str(s->s + at + sep->len, s->len - at - sep->len);
    }
    for (int k = 0; k < 3; k++) l->v[k].flags = fl;
    l->n = 3;
    *out = jinja_list_val(l, JV_TUPLE);
    return 0;
}

/* The receiver's class test: ASCII-only predicates; other text is refused rather than guessed. */
static int str_is(struct jinja_ctx *c, const struct jinja_val *s, int id, struct jinja_val *out)
{
    bool all = s->len > 0, cased = false, upper_ok = true, lower_ok = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp = unicode_decode(s->s, s->len, &i);
        bool digit = cp >= '0' && cp <= '9';
        bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
        if (cp >= 0x80) {
            enum unicode_cat cat = unicode_cat(cp);
            if (id == M_ISDIGIT || (id == M_ISALNUM && cat == UNICODE_CAT_NUMBER))
                return jinja_fail(c, ERR_UNSUPPORTED,
                                  "str.isdigit() and friends are supported on "
                                  "ASCII text only");
            alpha = cat == UNICODE_CAT_LETTER;
        }
        switch (id) {
        case M_ISALNUM: all &= alpha || digit; break;
        case M_ISALPHA: all &= alpha; break;
        case M_ISASCII: all &= cp < 0x80; break;
        case M_ISDIGIT: all &= digit; break;
        case M_ISSPACE: all &= jinja_is_space(cp); break;
        default:
            if (unicode_is_cased(cp)) {
                cased = true;
                upper_ok &= unicode_is_upper(cp);
                lower_ok &= unicode_is_lower(cp);
            }
        }
    }
    if (id == M_ISASCII && s->len == 0) all = true;
    if (id == M_ISLOWER) all = cased && lower_ok;
    if (id == M_ISUPPER) all = cased && upper_ok;
    *out = jinja_bool(all);
    return 0;
}

/* Markup receivers escape string arguments (markupsafe's _simple_escaping_wrapper). */
static int escape_args(struct jinja_ctx *c, const struct jinja_val *args, size_t n,
                       struct jinja_val *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = args[i];
        if (args[i].type != JV_STR || (args[i].flags & JV_F_SAFE)) continue;
        struct jinja_sb sb = {0};
        int rc = jinja_escape_into(c, &sb, &args[i]);
        if (rc) return rc;
        out[i] = jinja_sb_val(&sb);
        out[i].flags = JV_F_SAFE;
    }
    return 0;
}

static int str_method(struct jinja_ctx *c, const struct jinja_func *m,
                      const struct jinja_val *args0, size_t n_args, const struct jinja_sv *kw,
                      const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out)
{
    const struct jinja_val *s = &m->self;
    struct jinja_val args[8], b[4];
    int rc;
    bool safe = s->flags & JV_F_SAFE;
    if (m->id == M_FORMAT) {
        if (safe) return jinja_fail(c, ERR_UNSUPPORTED, "Markup.format() is not supported");
        struct jinja_sb sb = {0};
        if ((rc = jinja_str_format(c, s, args0, n_args, kw, kwv, n_kw, 0, &sb))) return rc;
        *out = jinja_sb_val(&sb);
        return 0;
    }
    if (n_args > 8) return jinja_fail(c, ERR_INVAL, "too many arguments");
    const struct method *info = NULL;
    for (size_t i = 0; i < N(str_methods); i++)
        if (str_methods[i].id == m->id) info = &str_methods[i];
    if (safe && info && (info->flags & MF_ESCAPES)) {
        if ((rc = escape_args(c, args0, n_args, args))) return rc;
    } else if (n_args) {
        memcpy(args, args0, n_args * sizeof(*args));
    }
    static const struct jinja_param p_strip[] = {{"chars", false}};
    static const struct jinja_param p_split[] = {{"sep", false}, {"maxsplit", false}};
    static const struct jinja_param p_replace[] = {{"old", true}, {"new", true}, {"count", false}};
    static const struct jinja_param p_lines[] = {{"keepends", false}};
    switch (m->id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        if ((rc = jinja_bind(c, "strip", p_strip, 1, args, n_args, kw, kwv, n_kw, b))) return rc;
        if (b[0].type != JV_UNDEF && b[0].type != JV_NONE && (rc = arg_str(c, "strip", &b[0])))
            return rc;
        return jinja_str_strip(c, s, b[0].type == JV_STR ? &b[0] : NULL,
                               m->id == M_STRIP    ? 3
                               : m->id == M_LSTRIP ? 1
                                                   : 2,
                               out);
    case M_SPLIT:
    case M_RSPLIT: {
        int64_t maxsplit = -1;
        if ((rc = jinja_bind(c, "split", p_split, 2, args, n_args, kw, kwv, n_kw, b))) return rc;
        if (b[0].type != JV_UNDEF && b[0].type != JV_NONE && (rc = arg_str(c, "split", &b[0])))
            return rc;
        if (b[1].type != JV_UNDEF && (rc = arg_int(c, &b[1], &maxsplit))) return rc;
        return jinja_str_split(c, s, b[0].type == JV_STR ? &b[0] : NULL, maxsplit,
                               m->id == M_RSPLIT, out);
    }
    case M_SPLITLINES:
        if ((rc = jinja_bind(c, "splitlines", p_lines, 1, args, n_args, kw, kwv, n_kw, b)))
            return rc;
        return jinja_str_splitlines(c, s, jinja_truthy(&b[0]), out);
    case M_REPLACE: {
        int64_t count = -1;
        if ((rc = jinja_bind(c, "replace", p_replace, 3, args, n_args, kw, kwv, n_kw, b)) ||
            (rc = arg_str(c, "replace", &b[0])) || (rc = arg_str(c, "replace", &b[1])))
            return rc;
        if (b[2].type != JV_UNDEF && (rc = arg_int(c, &b[2], &count))) return rc;
        return jinja_str_replace(c, s, &b[0], &b[1], count, out);
    }
    default: break;
    }
    if (n_kw)
        return jinja_fail(c, ERR_INVAL, "str.%.*s() takes no keyword arguments", (int)m->name.len,
                          m->name.p);
    bool r;
    switch (m->id) {
    case M_UPPER:
        return n_args ? jinja_fail(c, ERR_INVAL, "upper() takes no arguments")
                      : jinja_str_upper(c, s, out);
    case M_LOWER:
        return n_args ? jinja_fail(c, ERR_INVAL, "lower() takes no arguments")
                      : jinja_str_lower(c, s, out);
    case M_TITLE:
        return n_args ? jinja_fail(c, ERR_INVAL, "title() takes no arguments")
                      : jinja_str_title(c, s, out);
    case M_CAPITALIZE:
        return n_args ? jinja_fail(c, ERR_INVAL, "capitalize() takes no arguments")
                      : jinja_str_capitalize(c, s, out);
    case M_STARTSWITH:
    case M_ENDSWITH:
        if ((rc = str_affix(c, s, args, n_args, m->id == M_ENDSWITH, &r))) return rc;
        *out = jinja_bool(r);
        return 0;
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: return str_find(c, s, args, n_args, m->id, out);
    case M_ISALNUM:
    case M_ISALPHA:
    case M_ISASCII:
    case M_ISDIGIT:
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER:
        if (n_args) return jinja_fail(c, ERR_INVAL, "takes no arguments");
        return str_is(c, s, m->id, out);
    case M_JOIN: {
        if (n_args != 1) return jinja_fail(c, ERR_INVAL, "join() takes exactly one argument");
        struct jinja_list *items;
        if ((rc = jinja_iterate(c, &args0[0], &items))) return rc;
        struct jinja_sb sb = {0};
        for (size_t i = 0; i < items->n; i++) {
            struct jinja_val it = items->v[i];
            if (it.type != JV_STR)
                return jinja_fail(c, ERR_INVAL,
                                  "sequence item %zu: expected str instance, %s found", i,
                                  jinja_type_name(&it));
            if (i && (rc = jinja_sb_put(c, &sb, s->s, s->len))) return rc;
            if ((rc = safe ? jinja_escape_into(c, &sb, &it) : jinja_sb_put(c, &sb, it.s, it.len)))
                return rc;
        }
        *out = jinja_sb_val(&sb);
        out->flags = s->flags & JV_F_SAFE;
        return 0;
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST:
    case M_ZFILL:
        if ((rc = str_justify(c, s, args, n_args, m->id, out))) return rc;
        out->flags = s->flags & JV_F_SAFE;
        return 0;
    case M_PARTITION:
    case M_RPARTITION:
        if (n_args != 1 || (rc = arg_str(c, "partition", &args[0])))
            return n_args != 1 ? jinja_fail(c, ERR_INVAL, "partition() takes exactly one argument")
                               : rc;
        return str_partition(c, s, &args[0], m->id == M_RPARTITION, out);
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        if (n_args != 1 || (rc = arg_str(c, "removeprefix", &args[0])))
            return n_args != 1 ? jinja_fail(c, ERR_INVAL, "takes exactly one argument") : rc;
        const struct jinja_val *a = &args[0];
        bool pre = m->id == M_REMOVEPREFIX;
        *out = *s;
        if (a->len <= s->len && memcmp(pre ? s->s : s->s + s->len - a->len, a->s, a->len) == 0)
            *out = jinja_str(pre ? s->s + a->len : s->s, s->len - a->len);
        out->flags = s->flags & JV_F_SAFE;
        return 0;
    }
    default: break;
    }
    return jinja_fail(c, ERR_INTERNAL, "str method %d has no implementation", m->id);
}

static int loop_method(struct jinja_ctx *c, const struct jinja_func *m,
                       const struct jinja_val *args, size_t n_args, size_t n_kw,
                       struct jinja_val *out)
{
    struct jinja_loop *l = m->self.loop;
    if (n_kw) return jinja_fail(c, ERR_INVAL, "loop methods take no keyword arguments");
    if (m->name.len == 5 && memcmp(m->name.p, "cycle", 5) == 0) {
        if (n_args == 0) return jinja_fail(c, ERR_INVAL, "no items for cycling given");
        *out = args[l->index0 % (int64_t)n_args];
        return 0;
    }
    /* changed(*values): true when the values differ from the previous call's */
    struct jinja_list *now = jinja_list_new(c, n_args);
    if (!now) return jinja_fail_alloc(c);
    if (n_args) memcpy(now->v, args, n_args * sizeof(*args));
    now->n = n_args;
    struct jinja_val nv = jinja_list_val(now, JV_LIST);
    bool changed = !l->changed_called || !jinja_equal(&l->last_changed, &nv);
    l->changed_called = true;
    l->last_changed = nv;
    *out = jinja_bool(changed);
    return 0;
}

int jinja_method_call(struct jinja_ctx *c, const struct jinja_func *m, const struct jinja_val *args,
                      size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                      size_t n_kw, struct jinja_val *out)
{
    const struct jinja_val *self = &m->self;
    int rc = jinja_step(c, 1);
    if (rc) return rc;
    if (self->type == JV_LOOP) return loop_method(c, m, args, n_args, n_kw, out);
    if (m->id == M_UNSUPPORTED)
        return jinja_fail(c, ERR_UNSUPPORTED, "%s.%.*s() is not supported", jinja_type_name(self),
                          (int)m->name.len, m->name.p);
    if (self->type == JV_STR) return str_method(c, m, args, n_args, kw, kwv, n_kw, out);
    if (m->id == M_GET) {
        static const struct jinja_param p[] = {{"key", true}, {"default", false}};
        struct jinja_val b[2];
        if ((rc = jinja_bind(c, "get", p, 2, args, n_args, kw, kwv, n_kw, b))) return rc;
        if (b[0].type == JV_LIST || b[0].type == JV_DICT)
            return jinja_fail(c, ERR_INVAL, "unhashable type: '%s'", jinja_type_name(&b[0]));
        const struct jinja_val *v = jinja_dict_get(self->d, &b[0]);
        *out = v ? *v : n_args + n_kw >= 2 ? b[1] : jinja_none();
        return 0;
    }
    if (n_kw)
        return jinja_fail(c, ERR_INVAL, "%.*s() takes no keyword arguments", (int)m->name.len,
                          m->name.p);
    switch (m->id) {
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        if (n_args) return jinja_fail(c, ERR_INVAL, "takes no arguments");
        struct jinja_list *l = jinja_list_new(c, self->d->n);
        if (!l) return jinja_fail_alloc(c);
        for (size_t i = 0; i < self->d->n; i++) {
            if (m->id == M_ITEMS) {
                struct jinja_list *pair = jinja_list_new(c, 2);
                if (!pair) return jinja_fail_alloc(c);
                pair->v[0] = self->d->v[i].k;
                pair->v[1] = self->d->v[i].v;
                pair->n = 2;
                l->v[l->n++] = jinja_list_val(pair, JV_TUPLE);
            } else {
                l->v[l->n++] = m->id == M_KEYS ? self->d->v[i].k : self->d->v[i].v;
            }
        }
        *out = jinja_list_val(l, JV_LIST);
        out->view = m->id == M_ITEMS  ? JV_VIEW_ITEMS
                    : m->id == M_KEYS ? JV_VIEW_KEYS
                                      : JV_VIEW_VALUES;
        return jinja_step(c, l->n);
    }
    case M_COPY:
        if (n_args) return jinja_fail(c, ERR_INVAL, "copy() takes no arguments");
        if (self->type == JV_DICT) {
            struct jinja_dict *d = jinja_dict_new(&c->arena);
            if (!d) return jinja_fail_alloc(c);
            for (size_t i = 0; i < self->d->n; i++)
                if (jinja_dict_set(&c->arena, d, self->d->v[i].k, self->d->v[i].v))
                    return jinja_fail_alloc(c);
            *out = (struct jinja_val){.type = JV_DICT, .d = d};
        } else {
            struct jinja_list *l = jinja_list_new(c, self->l->n);
            if (!l) return jinja_fail_alloc(c);
            if (self->l->n) memcpy(l->v, self->l->v, self->l->n * sizeof(*l->v));
            l->n = self->l->n;
            *out = jinja_list_val(l, JV_LIST);
        }
        return 0;
    case M_LCOUNT:
    case M_LINDEX: {
        if (n_args < 1 || (m->id == M_LCOUNT && n_args != 1) || n_args > 3)
            return jinja_fail(c, ERR_INVAL, "wrong number of arguments");
        int64_t n = (int64_t)self->l->n, lo = 0, hi = n, count = 0;
        for (size_t k = 1; k < n_args; k++) {
            int64_t x;
            if ((rc = arg_int(c, &args[k], &x))) return rc;
            if (x < 0) x += n;
            if (x < 0) x = 0;
            if (x > n) x = n;
            if (k == 1)
                lo = x;
            else
                hi = x;
        }
        for (int64_t i = lo; i < hi; i++) {
            if (!jinja_equal(&self->l->v[i], &args[0])) continue;
            if (m->id == M_LINDEX) {
                *out = jinja_int(i);
                return 0;
            }
            count++;
        }
        if (m->id == M_LINDEX) return jinja_fail(c, ERR_INVAL, "x not in list");
        *out = jinja_int(count);
        return jinja_step(c, (uint64_t)n);
    }
    default: break;
    }
    return jinja_fail(c, ERR_INTERNAL, "method %d has no implementation", m->id);
}
