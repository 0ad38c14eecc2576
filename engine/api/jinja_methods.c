/* Python methods of template values: str (strip, split, startswith, replace, format, ...), dict
 * (get, items, keys, values), list and tuple (count, index), the loop's cycle() and changed(),
 * Python's case mappings (full, with the final-sigma rule), and printf-style str % args. The
 * sandbox's rules apply: a method that would mutate (list.append, dict.update) is an unsafe
 * attribute, and a Markup receiver escapes string arguments as markupsafe does. Methods that exist
 * in Python but not here are values that fail with a message naming them when called. */
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

/* ---------------------------------------------------------------- case mappings */

/* CPython's final-sigma test at s[i] (the sigma's offset) of s[0..len). */
static bool final_sigma(const char *s, size_t len, size_t i, size_t next)
{
    bool before = false;
    for (size_t j = i; j > 0;) {
        size_t k = j - 1;
        while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
        size_t q = k;
        uint32_t cp = unicode_decode(s, len, &q);
        j = k;
        if (unicode_is_case_ignorable(cp)) continue;
        before = unicode_is_cased(cp);
        break;
    }
    if (!before) return false;
    for (size_t j = next; j < len;) {
        uint32_t cp = unicode_decode(s, len, &j);
        if (unicode_is_case_ignorable(cp)) continue;
        return !unicode_is_cased(cp);
    }
    return true;
}

static int put_cases(struct jinja_ctx *c, struct jinja_sb *sb, uint32_t cp, enum unicode_case kind,
                     const char *s, size_t len, size_t at, size_t next)
{
    uint32_t m[3];
    size_t n;
    if (cp == 0x3A3 && kind == UNICODE_CASE_LOWER) {
        m[0] = final_sigma(s, len, at, next) ? 0x3C2 : 0x3C3;
        n = 1;
    } else {
        n = unicode_case_full(cp, kind, m);
    }
    for (size_t k = 0; k < n; k++) {
        int rc = jinja_sb_cpt(c, sb, m[k]);
        if (rc) return rc;
    }
    return 0;
}

/* mode: 0 lower, 1 upper, 2 title (str.title), 3 capitalize */
static int map_case(struct jinja_ctx *c, const struct jinja_val *s, int mode, struct jinja_val *out)
{
    bool ascii = true;
    for (size_t i = 0; i < s->len && ascii; i++) ascii = (uint8_t)s->s[i] < 0x80;
    struct jinja_sb sb = {0};
    int rc = 0;
    if (ascii) {
        char *p = jinja_alloc(&c->arena, s->len + 1);
        if (!p) return jinja_fail_alloc(c);
        bool prev_cased = false;
        for (size_t i = 0; i < s->len; i++) {
            char ch = s->s[i];
            bool lower = ch >= 'a' && ch <= 'z', upper = ch >= 'A' && ch <= 'Z';
            bool to_upper = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && i == 0);
            p[i] = to_upper ? (lower ? (char)(ch - 32) : ch) : (upper ? (char)(ch + 32) : ch);
            prev_cased = lower || upper;
        }
        p[s->len] = '\0';
        *out = jinja_str(p, s->len);
        out->flags = s->flags & JV_F_SAFE;
        return 0;
    }
    bool prev_cased = false;
    for (size_t i = 0, first = 1; i < s->len && !rc; first = 0) {
        size_t at = i;
        uint32_t cp = unicode_decode(s->s, s->len, &i);
        enum unicode_case kind = mode == 0   ? UNICODE_CASE_LOWER
                                 : mode == 1 ? UNICODE_CASE_UPPER
                                 : mode == 2
                                     ? (prev_cased ? UNICODE_CASE_LOWER : UNICODE_CASE_TITLE)
                                     : (first ? UNICODE_CASE_TITLE : UNICODE_CASE_LOWER);
        rc = put_cases(c, &sb, cp, kind, s->s, s->len, at, i);
        prev_cased = unicode_is_cased(cp);
    }
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

int jinja_str_upper(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 1, out);
}

int jinja_str_lower(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 0, out);
}

int jinja_str_title(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 2, out);
}

int jinja_str_capitalize(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 3, out);
}

/* ---------------------------------------------------------------- strip, split, replace */

static bool in_chars(const struct jinja_val *chars, uint32_t cp)
{
    if (!chars) return jinja_is_space(cp);
    for (size_t i = 0; i < chars->len;)
        if (unicode_decode(chars->s, chars->len, &i) == cp) return true;
    return false;
}

/* Byte offset where the code point before `end` starts. */
static size_t prev_cp(const char *s, size_t end)
{
    size_t k = end - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    return k;
}

int jinja_str_strip(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *chars,
                    int which, struct jinja_val *out)
{
    (void)c;
    size_t a = 0, b = s->len;
    if (which & 1)
        while (a < b) {
            size_t q = a;
            if (!in_chars(chars, unicode_decode(s->s, s->len, &q))) break;
            a = q;
        }
    if (which & 2)
        while (b > a) {
            size_t k = prev_cp(s->s, b), q = k;
            if (!in_chars(chars, unicode_decode(s->s, s->len, &q))) break;
            b = k;
        }
    *out = jinja_str(s->s + a, b - a);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

int jinja_str_replace(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *old,
                      const struct jinja_val *new_, int64_t count, struct jinja_val *out)
{
    struct jinja_sb sb = {0};
    int rc = 0;
    if (count < 0) count = INT64_MAX;
    if (old->len == 0) { /* Python inserts `new` before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (!rc) {
            if (done < count) {
                rc = jinja_sb_put(c, &sb, new_->s, new_->len);
                done++;
            }
            if (rc || i >= s->len) break;
            size_t q = i;
            unicode_decode(s->s, s->len, &q);
            rc = jinja_sb_put(c, &sb, s->s + i, q - i);
            i = q;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (!rc && i <= s->len) {
            const char *hit = done < count ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!hit) {
                rc = jinja_sb_put(c, &sb, s->s + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->s);
            rc = jinja_sb_put(c, &sb, s->s + i, at - i);
            if (!rc) rc = jinja_sb_put(c, &sb, new_->s, new_->len);
            i = at + old->len;
            done++;
            if (!rc) rc = jinja_step(c, 1);
        }
    }
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

static int push_str(struct jinja_ctx *c, struct jinja_list *l, const char *p, size_t n,
                    uint8_t flags)
{
    struct jinja_val v = jinja_str(p, n);
    v.flags = flags;
    int rc = jinja_list_push(c, l, v);
    return rc ? rc : jinja_step(c, 1);
}

static int str_split(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *sep,
                     int64_t maxsplit, bool right, struct jinja_val *out)
{
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    uint8_t fl = s->flags & JV_F_SAFE;
    int rc = 0;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep && sep->len == 0) return jinja_fail(c, ERR_INVAL, "empty separator");
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (i < s->len) { /* skip whitespace */
                    size_t q = i;
                    if (!jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    i = q;
                }
                if (i >= s->len) break;
                if (splits == maxsplit) {
                    rc = push_str(c, l, s->s + i, s->len - i, fl);
                    break;
                }
                size_t e = i;
                while (e < s->len) {
                    size_t q = e;
                    if (jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    e = q;
                }
                if ((rc = push_str(c, l, s->s + i, e - i, fl))) break;
                splits++;
                i = e;
            }
        } else {
            for (;;) {
                const char *hit =
                    splits < maxsplit ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
                if (!hit) {
                    rc = push_str(c, l, s->s + i, s->len - i, fl);
                    break;
                }
                size_t at = (size_t)(hit - s->s);
                if ((rc = push_str(c, l, s->s + i, at - i, fl))) break;
                i = at + sep->len;
                splits++;
            }
        }
    } else { /* rsplit: collect from the right, then reverse */
        size_t e = s->len;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (e > 0) {
                    size_t k = prev_cp(s->s, e), q = k;
                    if (!jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    e = k;
                }
                if (e == 0) break;
                if (splits == maxsplit) {
                    rc = push_str(c, l, s->s, e, fl);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t k = prev_cp(s->s, b), q = k;
                    if (jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    b = k;
                }
                if ((rc = push_str(c, l, s->s + b, e - b, fl))) break;
                splits++;
                e = b;
            }
        } else {
            for (;;) {
                size_t at = SIZE_MAX;
                if (splits < maxsplit && e >= sep->len)
                    for (size_t k = e - sep->len + 1; k-- > 0;)
                        if (memcmp(s->s + k, sep->s, sep->len) == 0) {
                            at = k;
                            break;
                        }
                if (at == SIZE_MAX) {
                    rc = push_str(c, l, s->s, e, fl);
                    break;
                }
                if ((rc = push_str(c, l, s->s + at + sep->len, e - at - sep->len, fl))) break;
                e = at;
                splits++;
            }
        }
        for (size_t i = 0; !rc && i < l->n / 2; i++) {
            struct jinja_val t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    if (rc) return rc;
    *out = jinja_list_val(l, JV_LIST);
    return 0;
}

static int str_splitlines(struct jinja_ctx *c, const struct jinja_val *s, bool keepends,
                          struct jinja_val *out)
{
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    size_t i = 0;
    while (i < s->len) {
        size_t e = i, next = s->len;
        while (e < s->len) {
            size_t q = e;
            uint32_t cp = unicode_decode(s->s, s->len, &q);
            if (cp == '\n' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                next = q;
                break;
            }
            if (cp == '\r') {
                next = q < s->len && s->s[q] == '\n' ? q + 1 : q;
                break;
            }
            e = q;
        }
        int rc = push_str(c, l, s->s + i, (keepends ? next : e) - i, s->flags & JV_F_SAFE);
        if (rc) return rc;
        i = next;
    }
    *out = jinja_list_val(l, JV_LIST);
    return 0;
}

/* ---------------------------------------------------------------- str % args */

/* One %-conversion with flags, width and precision as Python applies them. */
struct pct_spec {
    bool left, plus, space, alt, zero;
    int64_t width, prec; /* -1: none */
    char type;
};

static int pad(struct jinja_ctx *c, struct jinja_sb *sb, const char *p, size_t n, size_t ncp,
               const struct pct_spec *sp)
{
    int rc = 0;
    size_t fill = sp->width > 0 && (size_t)sp->width > ncp ? (size_t)sp->width - ncp : 0;
    for (size_t i = 0; i < fill && !sp->left && !rc; i++) rc = jinja_sb_putc(c, sb, ' ');
    if (!rc) rc = jinja_sb_put(c, sb, p, n);
    for (size_t i = 0; i < fill && sp->left && !rc; i++) rc = jinja_sb_putc(c, sb, ' ');
    return rc;
}

static int pct_one(struct jinja_ctx *c, struct jinja_sb *sb, const struct pct_spec *sp,
                   const struct jinja_val *v)
{
    char fmt[32], buf[512];
    int rc;
    if (v->type == JV_UNDEF && sp->type != 's') return jinja_fail_undef(c, v);
    switch (sp->type) {
    case 's':
    case 'r': {
        struct jinja_sb tmp = {0};
        if ((rc = sp->type == 's' ? jinja_to_str(c, &tmp, v) : jinja_repr(c, &tmp, v))) return rc;
        size_t n = tmp.len;
        if (sp->prec >= 0) n = jinja_utf8_offset(tmp.p, tmp.len, (size_t)sp->prec);
        return pad(c, sb, tmp.p, n, jinja_utf8_count(tmp.p, n), sp);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
        int64_t x;
        if (v->type == JV_INT || v->type == JV_BOOL)
            x = v->type == JV_BOOL ? v->b : v->i;
        else if (v->type == JV_FLOAT && isfinite(v->f) && fabs(v->f) < 9.2e18)
            x = (int64_t)v->f;
        else
            return jinja_fail(c, ERR_INVAL, "%%%c format: a real number is required, not %s",
                              sp->type, jinja_type_name(v));
        char t = sp->type == 'i' || sp->type == 'u' ? 'd' : sp->type;
        snprintf(fmt, sizeof(fmt), "%%%s%s%s%s%s*.*" PRId64, sp->left ? "-" : "",
                 sp->plus ? "+" : "", sp->space ? " " : "", sp->alt ? "#" : "",
                 sp->zero && !sp->left ? "0" : "");
        fmt[strlen(fmt) - 1] = t; /* replace PRId64's last letter */
        if (t != 'd') {           /* x / o take the magnitude; Python prints the sign itself */
            bool neg = x < 0;
            uint64_t mag = neg ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
            char digits[80];
            snprintf(digits, sizeof(digits),
                     t == 'x'   ? "%" PRIx64
                     : t == 'X' ? "%" PRIX64
                                : "%" PRIo64,
                     mag);
            const char *prefix = sp->alt ? (t == 'x' ? "0x" : t == 'X' ? "0X" : "0o") : "";
            snprintf(buf, sizeof(buf), "%s%s%s",
                     neg         ? "-"
                     : sp->plus  ? "+"
                     : sp->space ? " "
                                 : "",
                     prefix, digits);
            return pad(c, sb, buf, strlen(buf), strlen(buf), sp);
        }
        int n = snprintf(buf, sizeof(buf), fmt, (int)(sp->width > 400 ? 400 : sp->width),
                         (int)(sp->prec > 400 ? 400 : sp->prec), x);
        return jinja_sb_put(c, sb, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
        double x;
        if (v->type == JV_FLOAT)
            x = v->f;
        else if (v->type == JV_INT || v->type == JV_BOOL)
            x = v->type == JV_BOOL ? v->b : (double)v->i;
        else
            return jinja_fail(c, ERR_INVAL, "must be real number, not %s", jinja_type_name(v));
        snprintf(fmt, sizeof(fmt), "%%%s%s%s%s%s*.*%c", sp->left ? "-" : "", sp->plus ? "+" : "",
                 sp->space ? " " : "", sp->alt ? "#" : "", sp->zero && !sp->left ? "0" : "",
                 sp->type);
        int n = snprintf(buf, sizeof(buf), fmt, (int)(sp->width > 400 ? 400 : sp->width),
                         (int)(sp->prec < 0     ? 6
                               : sp->prec > 100 ? 100
                                                : sp->prec),
                         x);
        return jinja_sb_put(c, sb, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
    }
    case 'c': {
        if (v->type == JV_STR && jinja_utf8_count(v->s, v->len) == 1)
            return pad(c, sb, v->s, v->len, 1, sp);
        if (v->type != JV_INT || v->i < 0 || v->i > 0x10FFFF)
            return jinja_fail(c, ERR_INVAL, "%%c requires int or char");
        char b[4];
        size_t n = unicode_encode((uint32_t)v->i, b);
        return pad(c, sb, b, n, 1, sp);
    }
    default:
        return jinja_fail(c, ERR_UNSUPPORTED, "the %%%c conversion is not supported", sp->type);
    }
}

int jinja_str_percent(struct jinja_ctx *c, const struct jinja_val *fmt,
                      const struct jinja_val *args, struct jinja_val *out)
{
    bool tuple = args->type == JV_TUPLE, mapping = args->type == JV_DICT;
    size_t next = 0, n_args = tuple ? args->l->n : 1;
    bool used_mapping = false;
    struct jinja_sb sb = {0};
    const char *s = fmt->s;
    size_t len = fmt->len;
    int rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        const char *pc = memchr(s + i, '%', len - i);
        size_t stop = pc ? (size_t)(pc - s) : len;
        if ((rc = jinja_sb_put(c, &sb, s + i, stop - i)) || !pc) break;
        i = stop + 1;
        if (i >= len) return jinja_fail(c, ERR_INVAL, "incomplete format");
        struct pct_spec sp = {.width = -1, .prec = -1};
        const struct jinja_val *v = NULL;
        struct jinja_val key_val;
        if (s[i] == '(') { /* %(name)s */
            size_t e = i + 1;
            while (e < len && s[e] != ')') e++;
            if (e >= len) return jinja_fail(c, ERR_INVAL, "incomplete format key");
            if (!mapping) return jinja_fail(c, ERR_INVAL, "format requires a mapping");
            key_val = jinja_str(s + i + 1, e - i - 1);
            v = jinja_dict_get(args->d, &key_val);
            if (!v)
                return jinja_fail(c, ERR_INVAL, "KeyError: '%.*s'", (int)(e - i - 1), s + i + 1);
            used_mapping = true;
            i = e + 1;
        }
        for (; i < len && strchr("-+ #0", s[i]); i++) {
            if (s[i] == '-')
                sp.left = true;
            else if (s[i] == '+')
                sp.plus = true;
            else if (s[i] == ' ')
                sp.space = true;
            else if (s[i] == '#')
                sp.alt = true;
            else
                sp.zero = true;
        }
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            sp.width = (sp.width < 0 ? 0 : sp.width) * 10 + (s[i] - '0');
        if (i < len && s[i] == '*')
            return jinja_fail(c, ERR_UNSUPPORTED, "'*' widths are not supported");
        if (i < len && s[i] == '.') {
            sp.prec = 0;
            for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
                sp.prec = sp.prec * 10 + (s[i] - '0');
        }
        while (i < len && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= len) return jinja_fail(c, ERR_INVAL, "incomplete format");
        sp.type = s[i++];
        if (sp.width > 100000 || sp.prec > 100000)
            return jinja_fail(c, ERR_TOO_BIG, "width too large");
        if (sp.type == '%') {
            rc = jinja_sb_putc(c, &sb, '%');
            continue;
        }
        if (!v) {
            if (next >= n_args && !(mapping && !tuple && next == 0))
                return jinja_fail(c, ERR_INVAL, "not enough arguments for format string");
            v = tuple ? &args->l->v[next] : args;
            next++;
        }
        rc = pct_one(c, &sb, &sp, v);
    }
    if (rc) return rc;
    if (!used_mapping && !mapping && next < n_args)
        return jinja_fail(c, ERR_INVAL, "not all arguments converted during string formatting");
    *out = jinja_sb_val(&sb);
    out->flags = fmt->flags & JV_F_SAFE;
    return 0;
}

/* ---------------------------------------------------------------- str.format */

/* format(value, spec) for the spec mini-language's common subset. */
static int format_spec(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                       const char *sp, size_t n)
{
    if (n == 0) return jinja_to_str(c, sb, v);
    uint32_t fill = ' ';
    char align = 0, sign = '-', type = 0;
    bool alt = false, zero = false;
    int64_t width = -1, prec = -1;
    char group = 0;
    size_t i = 0, q = 0;
    if (n >= 2) { /* fill then align? */
        q = 0;
        uint32_t f = unicode_decode(sp, n, &q);
        if (q < n && strchr("<>=^", sp[q])) {
            fill = f;
            align = sp[q];
            i = q + 1;
        }
    }
    if (!align && i < n && strchr("<>=^", sp[i])) align = sp[i++];
    if (i < n && strchr("+- ", sp[i])) sign = sp[i++];
    if (i < n && sp[i] == '#') alt = true, i++;
    if (i < n && sp[i] == '0') zero = true, i++;
    for (; i < n && sp[i] >= '0' && sp[i] <= '9'; i++)
        width = (width < 0 ? 0 : width) * 10 + (sp[i] - '0');
    if (i < n && (sp[i] == ',' || sp[i] == '_')) group = sp[i++];
    if (i < n && sp[i] == '.') {
        prec = 0;
        for (i++; i < n && sp[i] >= '0' && sp[i] <= '9'; i++) prec = prec * 10 + (sp[i] - '0');
    }
    if (i < n) type = sp[i++];
    if (i != n || width > 100000 || prec > 100000)
        return jinja_fail(c, ERR_INVAL, "Invalid format specifier '%.*s'", (int)n, sp);
    if (zero && !align) fill = '0', align = '=';
    char buf[512];
    struct jinja_sb body = {0};
    int rc = 0;
    bool numeric = false;
    if (v->type == JV_STR && (type == 0 || type == 's')) {
        size_t len = v->len;
        if (prec >= 0) len = jinja_utf8_offset(v->s, v->len, (size_t)prec);
        rc = jinja_sb_put(c, &body, v->s, len);
        if (!align) align = '<';
    } else if ((v->type == JV_INT || v->type == JV_BOOL) && type != 'e' && type != 'f' &&
               type != 'g' && type != '%' && type != 'E' && type != 'F' && type != 'G' &&
               !(v->type == JV_BOOL && type == 0)) {
        int64_t x = v->type == JV_BOOL ? v->b : v->i;
        if (prec >= 0)
            return jinja_fail(c, ERR_INVAL, "Precision not allowed in integer format specifier");
        uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        const char *pre = "";
        switch (type) {
        case 0:
        case 'd':
        case 'n': snprintf(buf, sizeof(buf), "%" PRIu64, mag); break;
        case 'x': snprintf(buf, sizeof(buf), "%" PRIx64, mag), pre = alt ? "0x" : ""; break;
        case 'X': snprintf(buf, sizeof(buf), "%" PRIX64, mag), pre = alt ? "0X" : ""; break;
        case 'o': snprintf(buf, sizeof(buf), "%" PRIo64, mag), pre = alt ? "0o" : ""; break;
        case 'b': {
            size_t k = 0;
            char tmp[70];
            do tmp[k++] = (char)('0' + (mag & 1));
            while (mag >>= 1);
            for (size_t j = 0; j < k; j++) buf[j] = tmp[k - 1 - j];
            buf[k] = '\0';
            pre = alt ? "0b" : "";
            break;
        }
        default:
            return jinja_fail(c, ERR_UNSUPPORTED, "format type '%c' is not supported for int",
                              type);
        }
        if (x < 0)
            rc = jinja_sb_putc(c, &body, '-');
        else if (sign == '+' || sign == ' ')
            rc = jinja_sb_putc(c, &body, sign);
        if (!rc) rc = jinja_sb_put(c, &body, pre, strlen(pre));
        size_t nd = strlen(buf);
        for (size_t k = 0; k < nd && !rc; k++) {
            if (group && k &&
                (nd - k) % (type == 'x' || type == 'X' || type == 'o' || type == 'b' ? 4 : 3) == 0)
                rc = jinja_sb_putc(c, &body, group);
            if (!rc) rc = jinja_sb_putc(c, &body, buf[k]);
        }
        numeric = true;
    } else if ((v->type == JV_FLOAT || v->type == JV_INT || v->type == JV_BOOL) && type &&
               strchr("eEfFgG%", type)) {
        double x = v->type == JV_FLOAT ? v->f : v->type == JV_BOOL ? v->b : (double)v->i;
        if (group)
            return jinja_fail(c, ERR_UNSUPPORTED, "grouping in float formats is not supported");
        char f[16];
        if (type == '%') x *= 100;
        snprintf(f, sizeof(f), "%%%s%s.*%c",
                 sign == '+'   ? "+"
                 : sign == ' ' ? " "
                               : "",
                 alt ? "#" : "", type == '%' ? 'f' : type);
        snprintf(buf, sizeof(buf), f, (int)(prec < 0 ? 6 : prec > 100 ? 100 : prec), x);
        rc = jinja_sb_put(c, &body, buf, strlen(buf));
        if (!rc && type == '%') rc = jinja_sb_putc(c, &body, '%');
        numeric = true;
    } else {
        return jinja_fail(c, ERR_UNSUPPORTED, "format spec '%.*s' for a %s value is not supported",
                          (int)n, sp, jinja_type_name(v));
    }
    if (rc) return rc;
    if (!align) align = numeric ? '>' : '<';
    size_t ncp = jinja_utf8_count(body.p ? body.p : "", body.len);
    size_t fillc = width > 0 && (size_t)width > ncp ? (size_t)width - ncp : 0;
    size_t left = align == '<' ? 0 : align == '^' ? fillc / 2 : fillc;
    size_t sign_len = 0;
    if (align == '=' && numeric && body.len && strchr("+- ", body.p[0])) sign_len = 1;
    if (sign_len && (rc = jinja_sb_put(c, sb, body.p, 1))) return rc;
    for (size_t k = 0; k < left && !rc; k++) rc = jinja_sb_cpt(c, sb, fill);
    if (!rc) rc = jinja_sb_put(c, sb, body.p + sign_len, body.len - sign_len);
    for (size_t k = left; k < fillc && !rc; k++) rc = jinja_sb_cpt(c, sb, fill);
    return rc;
}

static bool is_ident_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static int str_format(struct jinja_ctx *c, const struct jinja_val *fmt,
                      const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                      const struct jinja_val *kwv, size_t n_kw, int depth, struct jinja_sb *sb)
{
    const char *s = fmt->s;
    size_t len = fmt->len, auto_idx = 0;
    int numbering = 0; /* 1 auto, 2 manual */
    int rc = 0;
    if (depth > 2) return jinja_fail(c, ERR_INVAL, "Max string recursion exceeded");
    for (size_t i = 0; i < len && !rc;) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < len && s[i + 1] == '}') {
                rc = jinja_sb_putc(c, sb, '}');
                i += 2;
                continue;
            }
            return jinja_fail(c, ERR_INVAL, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            rc = jinja_sb_putc(c, sb, ch);
            i++;
            continue;
        }
        if (i + 1 < len && s[i + 1] == '{') {
            rc = jinja_sb_putc(c, sb, '{');
            i += 2;
            continue;
        }
        /* the field up to its matching brace */
        size_t e = i + 1;
        int nest = 1;
        while (e < len && nest) {
            if (s[e] == '{')
                nest++;
            else if (s[e] == '}')
                nest--;
            if (nest) e++;
        }
        if (e >= len) return jinja_fail(c, ERR_INVAL, "expected '}' before end of string");
        const char *f = s + i + 1;
        size_t flen = e - i - 1, k = 0;
        while (k < flen && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
        struct jinja_val v;
        if (k == 0) {
            if (numbering == 2)
                return jinja_fail(c, ERR_INVAL,
                                  "cannot switch from manual field specification to "
                                  "automatic field numbering");
            numbering = 1;
            if (auto_idx >= n_args)
                return jinja_fail(c, ERR_INVAL,
                                  "Replacement index %zu out of range for positional "
                                  "args tuple",
                                  auto_idx);
            v = args[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            if (numbering == 1)
                return jinja_fail(c, ERR_INVAL,
                                  "cannot switch from automatic field numbering to "
                                  "manual field specification");
            numbering = 2;
            size_t idx = 0;
            for (size_t j = 0; j < k; j++) {
                if (f[j] < '0' || f[j] > '9' || idx > 1000000)
                    return jinja_fail(c, ERR_INVAL, "bad field name in format string");
                idx = idx * 10 + (size_t)(f[j] - '0');
            }
            if (idx >= n_args)
                return jinja_fail(c, ERR_INVAL,
                                  "Replacement index %zu out of range for positional "
                                  "args tuple",
                                  idx);
            v = args[idx];
        } else {
            size_t j = 0;
            while (j < n_kw && !(kw[j].len == k && memcmp(kw[j].p, f, k) == 0)) j++;
            if (j == n_kw) return jinja_fail(c, ERR_INVAL, "KeyError: '%.*s'", (int)k, f);
            v = kwv[j];
        }
        while (k < flen && (f[k] == '.' || f[k] == '[')) { /* .attr and [key] chains */
            if (f[k] == '.') {
                size_t a = ++k;
                while (k < flen && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
                if (k == a || !is_ident_start(f[a]))
                    return jinja_fail(c, ERR_INVAL, "Empty attribute in format string");
                if ((rc = jinja_getattr(c, &v, (struct jinja_sv){f + a, (uint32_t)(k - a)}, &v)))
                    return rc;
            } else {
                size_t a = ++k;
                while (k < flen && f[k] != ']') k++;
                if (k >= flen) return jinja_fail(c, ERR_INVAL, "Missing ']' in format string");
                struct jinja_val key = jinja_str(f + a, k - a);
                bool digits = k > a;
                int64_t num = 0;
                for (size_t d = a; d < k && digits; d++)
                    digits =
                        f[d] >= '0' && f[d] <= '9' && (num = num * 10 + (f[d] - '0')) < 1000000000;
                if (digits) key = jinja_int(num);
                if ((rc = jinja_getitem(c, &v, &key, &v))) return rc;
                k++;
            }
        }
        char conv = 0;
        if (k < flen && f[k] == '!') {
            if (k + 1 >= flen)
                return jinja_fail(c, ERR_INVAL,
                                  "end of string while looking for conversion specifier");
            conv = f[k + 1];
            k += 2;
            if (conv != 's' && conv != 'r')
                return jinja_fail(c, ERR_UNSUPPORTED, "format conversion '!%c' is not supported",
                                  conv);
        }
        if (k < flen && f[k] != ':')
            return jinja_fail(c, ERR_INVAL, "expected ':' after conversion specifier");
        struct jinja_sb spec = {0};
        if (k < flen) { /* the spec may hold nested fields */
            struct jinja_val inner = jinja_str(f + k + 1, flen - k - 1);
            if ((rc = str_format(c, &inner, args, n_args, kw, kwv, n_kw, depth + 1, &spec)))
                return rc;
        }
        if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &v);
        if (conv) {
            struct jinja_sb t = {0};
            if ((rc = conv == 's' ? jinja_to_str(c, &t, &v) : jinja_repr(c, &t, &v))) return rc;
            v = jinja_sb_val(&t);
        }
        rc = format_spec(c, sb, &v, spec.p ? spec.p : "", spec.len);
        i = e + 1;
    }
    return rc;
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
        if ((rc = str_format(c, s, args0, n_args, kw, kwv, n_kw, 0, &sb))) return rc;
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
        return str_split(c, s, b[0].type == JV_STR ? &b[0] : NULL, maxsplit, m->id == M_RSPLIT,
                         out);
    }
    case M_SPLITLINES:
        if ((rc = jinja_bind(c, "splitlines", p_lines, 1, args, n_args, kw, kwv, n_kw, b)))
            return rc;
        return str_splitlines(c, s, jinja_truthy(&b[0]), out);
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
                      : map_case(c, s, 1, out);
    case M_LOWER:
        return n_args ? jinja_fail(c, ERR_INVAL, "lower() takes no arguments")
                      : map_case(c, s, 0, out);
    case M_TITLE:
        return n_args ? jinja_fail(c, ERR_INVAL, "title() takes no arguments")
                      : map_case(c, s, 2, out);
    case M_CAPITALIZE:
        return n_args ? jinja_fail(c, ERR_INVAL, "capitalize() takes no arguments")
                      : map_case(c, s, 3, out);
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
