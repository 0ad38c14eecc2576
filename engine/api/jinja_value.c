/* Values of the Jinja interpreter with Python's semantics: the arena they live in, strings, lists
 * and dicts, conversion from JSON, truthiness, ==, <, str(), repr() (floats as Python's shortest
 * round-trip repr, strings with Python's quoting and escapes), markupsafe's escape and json.dumps
 * as transformers' tojson calls it. No I/O; everything allocates from the render's arena. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK    (64u << 10)
#define JSON_MAX_DEPTH 1000 /* Python's recursion limit would stop json.dumps near here too */
#define DICT_INDEX_AT  8    /* entries before string keys get a hash index */

struct jinja_chunk {
    struct jinja_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jinja_alloc(struct jinja_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    struct jinja_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        if (cap < a->total / 4) cap = a->total / 4 & ~(size_t)15; /* fewer, larger chunks */
        if (a->max && a->total + cap > a->max) {
            if (a->total + n > a->max) {
                a->over = true;
                return NULL;
            }
            cap = n;
        }
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void jinja_arena_free(struct jinja_arena *a)
{
    struct jinja_chunk *c = a->head;
    while (c) {
        struct jinja_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- strings */

bool jinja_is_space(uint32_t c)
{
    /* CPython's _PyUnicode_IsWhitespace: White_Space plus the information separators 1C-1F. */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t jinja_utf8_count(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((uint8_t)p[i] & 0xC0) != 0x80;
    return n;
}

size_t jinja_utf8_offset(const char *p, size_t len, size_t i)
{
    size_t off = 0;
    while (i > 0 && off < len) {
        off++;
        while (off < len && ((uint8_t)p[off] & 0xC0) == 0x80) off++;
        i--;
    }
    return off;
}

int jinja_str_new(struct jinja_ctx *c, const char *p, size_t len, struct jinja_val *out)
{
    if (len > UINT32_MAX) return jinja_fail(c, ERR_TOO_BIG, "string too long");
    char *s = jinja_alloc(&c->arena, len + 1);
    if (!s) return jinja_fail_alloc(c);
    if (len) memcpy(s, p, len);
    s[len] = '\0';
    *out = jinja_str(s, len);
    return 0;
}

int jinja_sb_put(struct jinja_ctx *c, struct jinja_sb *sb, const char *p, size_t n)
{
    if (sb->len + n > sb->cap) {
        size_t cap = sb->cap ? sb->cap * 2 : 64;
        while (cap < sb->len + n) cap *= 2;
        if (cap > UINT32_MAX) return jinja_fail(c, ERR_TOO_BIG, "string too long");
        char *np = jinja_alloc(&c->arena, cap);
        if (!np) return jinja_fail_alloc(c);
        if (sb->len) memcpy(np, sb->p, sb->len);
        sb->p = np;
        sb->cap = cap;
    }
    if (n) memcpy(sb->p + sb->len, p, n);
    sb->len += n;
    return 0;
}

int jinja_sb_putc(struct jinja_ctx *c, struct jinja_sb *sb, char ch)
{
    return jinja_sb_put(c, sb, &ch, 1);
}

int jinja_sb_cpt(struct jinja_ctx *c, struct jinja_sb *sb, uint32_t cpt)
{
    char b[4];
    return jinja_sb_put(c, sb, b, unicode_encode(cpt, b));
}

int jinja_sb_printf(struct jinja_ctx *c, struct jinja_sb *sb, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return jinja_fail(c, ERR_INTERNAL, "format error");
    return jinja_sb_put(c, sb, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

struct jinja_val jinja_sb_val(const struct jinja_sb *sb)
{
    return jinja_str(sb->p ? sb->p : "", sb->len);
}

/* ---------------------------------------------------------------- lists and dicts */

struct jinja_list *jinja_list_new(struct jinja_ctx *c, size_t cap)
{
    struct jinja_list *l = jinja_alloc(&c->arena, sizeof(*l));
    if (!l) return NULL;
    l->n = l->pos = 0;
    l->cap = cap;
    l->v = cap ? jinja_alloc(&c->arena, cap * sizeof(*l->v)) : NULL;
    if (cap && !l->v) return NULL;
    return l;
}

int jinja_list_push(struct jinja_ctx *c, struct jinja_list *l, struct jinja_val v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct jinja_val *nv = jinja_alloc(&c->arena, cap * sizeof(*nv));
        if (!nv) return jinja_fail_alloc(c);
        if (l->n) memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

struct jinja_val jinja_list_val(struct jinja_list *l, enum jinja_type type)
{
    return (struct jinja_val){.type = (uint8_t)type, .l = l};
}

struct jinja_dict *jinja_dict_new(struct jinja_arena *a)
{
    struct jinja_dict *d = jinja_alloc(a, sizeof(*d));
    if (d) memset(d, 0, sizeof(*d));
    return d;
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h;
}

static int dict_reindex(struct jinja_arena *a, struct jinja_dict *d)
{
    size_t cap = 16;
    while (cap < d->cap * 2) cap *= 2;
    int32_t *idx = jinja_alloc(a, cap * sizeof(*idx));
    if (!idx) return ERR_NOMEM;
    memset(idx, 0xff, cap * sizeof(*idx));
    for (size_t i = 0; i < d->n; i++) {
        if (d->v[i].k.type != JV_STR) continue;
        size_t h = (size_t)hash_bytes(d->v[i].k.s, d->v[i].k.len) & (cap - 1);
        while (idx[h] >= 0) h = (h + 1) & (cap - 1);
        idx[h] = (int32_t)i;
    }
    d->index = idx;
    d->index_mask = cap - 1;
    return 0;
}

struct jinja_val *jinja_dict_get_str(const struct jinja_dict *d, const char *p, size_t len)
{
    if (d->index) {
        for (size_t h = (size_t)hash_bytes(p, len) & d->index_mask;; h = (h + 1) & d->index_mask) {
            int32_t i = d->index[h];
            if (i < 0) return NULL;
            const struct jinja_val *k = &d->v[i].k;
            if (k->len == len && memcmp(k->s, p, len) == 0) return &d->v[i].v;
        }
    }
    for (size_t i = 0; i < d->n; i++) {
        const struct jinja_val *k = &d->v[i].k;
        if (k->type == JV_STR && k->len == len && memcmp(k->s, p, len) == 0) return &d->v[i].v;
    }
    return NULL;
}

struct jinja_val *jinja_dict_get(const struct jinja_dict *d, const struct jinja_val *k)
{
    if (k->type == JV_STR) return jinja_dict_get_str(d, k->s, k->len);
    for (size_t i = 0; i < d->n; i++)
        if (jinja_equal(&d->v[i].k, k)) return &d->v[i].v;
    return NULL;
}

int jinja_dict_set(struct jinja_arena *a, struct jinja_dict *d, struct jinja_val k,
                   struct jinja_val v)
{
    struct jinja_val *old = jinja_dict_get(d, &k);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jinja_pair *nv = jinja_alloc(a, cap * sizeof(*nv));
        if (!nv) return ERR_NOMEM;
        if (d->n) memcpy(nv, d->v, d->n * sizeof(*nv));
        d->v = nv;
        d->cap = cap;
        d->index = NULL;
    }
    d->v[d->n++] = (struct jinja_pair){k, v};
    if (d->n >= DICT_INDEX_AT) {
        if (!d->index) return dict_reindex(a, d);
        if (k.type == JV_STR) {
            size_t h = (size_t)hash_bytes(k.s, k.len) & d->index_mask;
            while (d->index[h] >= 0) h = (h + 1) & d->index_mask;
            d->index[h] = (int32_t)(d->n - 1);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- JSON input */

static int from_json(struct jinja_ctx *c, const json_t *j, struct jinja_val *out, int depth)
{
    if (depth > JSON_MAX_DEPTH) return jinja_fail(c, ERR_INVAL, "input nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jinja_none(); return 0;
    case JSON_TRUE: *out = jinja_bool(true); return 0;
    case JSON_FALSE: *out = jinja_bool(false); return 0;
    case JSON_INTEGER: *out = jinja_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jinja_float(json_real_value(j)); return 0;
    case JSON_STRING: /* borrowed: the caller's JSON outlives the render */
        if (json_string_length(j) > UINT32_MAX)
            return jinja_fail(c, ERR_TOO_BIG, "string too long");
        *out = jinja_str(json_string_value(j), json_string_length(j));
        return 0;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct jinja_list *l = jinja_list_new(c, n);
        if (!l) return jinja_fail_alloc(c);
        for (size_t i = 0; i < n; i++) {
            int rc = from_json(c, json_array_get(j, i), &l->v[i], depth + 1);
            if (rc) return rc;
            l->n = i + 1;
        }
        *out = jinja_list_val(l, JV_LIST);
        return 0;
    }
    case JSON_OBJECT: {
        struct jinja_dict *d = jinja_dict_new(&c->arena);
        if (!d) return jinja_fail_alloc(c);
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v)
        {
            struct jinja_val jv;
            int rc = from_json(c, v, &jv, depth + 1);
            if (rc) return rc;
            if (jinja_dict_set(&c->arena, d, jinja_str(key, strlen(key)), jv))
                return jinja_fail_alloc(c);
        }
        *out = (struct jinja_val){.type = JV_DICT, .d = d};
        return 0;
    }
    }
    return jinja_fail(c, ERR_INVAL, "unknown JSON type");
}

int jinja_from_json(struct jinja_ctx *c, const json_t *j, struct jinja_val *out)
{
    return from_json(c, j, out, 0);
}

/* ---------------------------------------------------------------- Python semantics */

bool jinja_truthy(const struct jinja_val *v)
{
    switch (v->type) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0.0;
    case JV_STR: return v->len != 0;
    case JV_LIST:
    case JV_TUPLE: return v->view == JV_VIEW_GEN || v->l->n != 0; /* a generator is truthy */
    case JV_DICT: return v->d->n != 0;
    case JV_LOOP: return v->loop->length != 0;
    default: return true;
    }
}

static bool is_number(const struct jinja_val *v)
{
    return v->type == JV_INT || v->type == JV_BOOL || v->type == JV_FLOAT;
}

static int64_t int_of(const struct jinja_val *v)
{
    return v->type == JV_BOOL ? (int64_t)v->b : v->i;
}

/* Exact comparison of an int with a float, as Python does it (no rounding of the int): -1, 0, 1,
 * or 2 for NaN. */
static int cmp_int_float(int64_t i, double f)
{
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double t = trunc(f);
    int64_t ti = (int64_t)t;
    if (i != ti) return i < ti ? -1 : 1;
    return t == f ? 0 : (f > t ? -1 : 1);
}

/* Numeric comparison: -1, 0, 1, or 2 when unordered (NaN). */
static int cmp_num(const struct jinja_val *a, const struct jinja_val *b)
{
    if (a->type != JV_FLOAT && b->type != JV_FLOAT) {
        int64_t x = int_of(a), y = int_of(b);
        return x < y ? -1 : x > y;
    }
    if (a->type == JV_FLOAT && b->type == JV_FLOAT) {
        if (isnan(a->f) || isnan(b->f)) return 2;
        return a->f < b->f ? -1 : a->f > b->f;
    }
    if (a->type == JV_FLOAT) {
        int r = cmp_int_float(int_of(b), a->f);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(int_of(a), b->f);
}

bool jinja_equal(const struct jinja_val *a, const struct jinja_val *b)
{
    if (is_number(a) && is_number(b)) return cmp_num(a, b) == 0;
    if (a->type != b->type) return false;
    switch (a->type) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
    case JV_LIST:
    case JV_TUPLE:
        if (a->view == JV_VIEW_GEN || b->view == JV_VIEW_GEN) return a->l == b->l;
        if (a->view != b->view || a->l->n != b->l->n) return false;
        for (size_t i = 0; i < a->l->n; i++)
            if (!jinja_equal(&a->l->v[i], &b->l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a->d->n != b->d->n) return false;
        for (size_t i = 0; i < a->d->n; i++) {
            const struct jinja_val *bv = jinja_dict_get(b->d, &a->d->v[i].k);
            if (!bv || !jinja_equal(&a->d->v[i].v, bv)) return false;
        }
        return true;
    case JV_NS: return a->d == b->d;
    case JV_FUNC: return a->fn == b->fn;
    case JV_LOOP: return a->loop == b->loop;
    default: return false;
    }
}

const char *jinja_type_name(const struct jinja_val *v)
{
    switch (v->type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v->flags & JV_F_SAFE ? "Markup" : "str";
    case JV_LIST:
        return v->view == JV_VIEW_ITEMS    ? "dict_items"
               : v->view == JV_VIEW_KEYS   ? "dict_keys"
               : v->view == JV_VIEW_VALUES ? "dict_values"
               : v->view == JV_VIEW_GEN    ? "generator"
                                           : "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return v->fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

int jinja_order(struct jinja_ctx *c, char op, const struct jinja_val *a, const struct jinja_val *b,
                bool *out)
{
    if (a->type == JV_UNDEF) return jinja_fail_undef(c, a);
    if (b->type == JV_UNDEF) return jinja_fail_undef(c, b);
    int r;
    if (is_number(a) && is_number(b)) {
        r = cmp_num(a, b);
        if (r == 2) { /* NaN: every ordering is false */
            *out = false;
            return 0;
        }
    } else if (a->type == JV_STR && b->type == JV_STR) {
        size_t n = a->len < b->len ? a->len : b->len;
        r = memcmp(a->s, b->s, n); /* UTF-8 byte order is code point order */
        r = r < 0 ? -1 : r > 0 ? 1 : a->len < b->len ? -1 : a->len > b->len;
    } else if ((a->type == JV_LIST || a->type == JV_TUPLE) && a->type == b->type && !a->view &&
               !b->view) {
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
            if (jinja_equal(&a->l->v[i], &b->l->v[i])) continue;
            return jinja_order(c, op, &a->l->v[i], &b->l->v[i], out);
        }
        r = a->l->n < b->l->n ? -1 : a->l->n > b->l->n;
    } else {
        const char *sym = op == '<' ? "<" : op == 'l' ? "<=" : op == '>' ? ">" : ">=";
        return jinja_fail(c, ERR_INVAL, "'%s' not supported between instances of '%s' and '%s'",
                          sym, jinja_type_name(a), jinja_type_name(b));
    }
    *out = op == '<' ? r < 0 : op == 'l' ? r <= 0 : op == '>' ? r > 0 : r >= 0;
    return 0;
}

int jinja_less(struct jinja_ctx *c, const struct jinja_val *a, const struct jinja_val *b, bool *lt)
{
    return jinja_order(c, '<', a, b, lt);
}

/* ---------------------------------------------------------------- str() and repr() */

size_t jinja_float_repr(double f, char *buf, size_t n)
{
    if (isnan(f)) return (size_t)snprintf(buf, n, "nan");
    if (isinf(f)) return (size_t)snprintf(buf, n, f < 0 ? "-inf" : "inf");
    if (f == 0) return (size_t)snprintf(buf, n, signbit(f) ? "-0.0" : "0.0");
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) { /* the shortest digits that read back exactly */
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX: split into digits and decimal exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = (int)strtol(p + 1, NULL, 10); /* first digit's power of ten */
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) { /* Python's 'r' format switches to exponent outside this */
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -decpt; k++) out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t k = nd; k < (size_t)decpt; k++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", decpt - 1 < 0 ? '-' : '+',
                              abs(decpt - 1));
    }
    out[o] = '\0';
    return (size_t)snprintf(buf, n, "%s", out);
}

/* Python's str.isprintable() for a non-ASCII code point. */
static bool printable(uint32_t cpt)
{
    enum unicode_cat cat = unicode_cat(cpt);
    return cat != UNICODE_CAT_OTHER && cat != UNICODE_CAT_UNDEFINED && cat != UNICODE_CAT_SEPARATOR;
}

static int repr_str(struct jinja_ctx *c, struct jinja_sb *sb, const char *s, size_t len)
{
    bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = jinja_sb_putc(c, sb, q);
    for (size_t i = 0; i < len && !rc;) {
        size_t start = i;
        uint32_t cpt = unicode_decode(s, len, &i);
        if (cpt == (uint32_t)q || cpt == '\\') {
            char e[2] = {'\\', (char)cpt};
            rc = jinja_sb_put(c, sb, e, 2);
        } else if (cpt == '\t' || cpt == '\n' || cpt == '\r') {
            rc = jinja_sb_put(c, sb, cpt == '\t' ? "\\t" : cpt == '\n' ? "\\n" : "\\r", 2);
        } else if (cpt < 0x20 || cpt == 0x7F) {
            rc = jinja_sb_printf(c, sb, "\\x%02x", (unsigned)cpt);
        } else if (cpt < 0x7F || printable(cpt)) {
            rc = jinja_sb_put(c, sb, s + start, i - start);
        } else {
            rc = jinja_sb_printf(c, sb,
                                 cpt < 0x100     ? "\\x%02x"
                                 : cpt < 0x10000 ? "\\u%04x"
                                                 : "\\U%08x",
                                 (unsigned)cpt);
        }
    }
    return rc ? rc : jinja_sb_putc(c, sb, q);
}

static int str_items(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_list *l,
                     const char *open, const char *close, bool tuple)
{
    int rc = jinja_sb_put(c, sb, open, strlen(open));
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, ", ", 2);
        if (!rc) rc = jinja_repr(c, sb, &l->v[i]);
    }
    if (!rc && tuple && l->n == 1) rc = jinja_sb_putc(c, sb, ',');
    return rc ? rc : jinja_sb_put(c, sb, close, strlen(close));
}

static int str_dict(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_dict *d)
{
    int rc = jinja_sb_putc(c, sb, '{');
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, ", ", 2);
        if (!rc) rc = jinja_repr(c, sb, &d->v[i].k);
        if (!rc) rc = jinja_sb_put(c, sb, ": ", 2);
        if (!rc) rc = jinja_repr(c, sb, &d->v[i].v);
    }
    return rc ? rc : jinja_sb_putc(c, sb, '}');
}

static int str_common(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      bool repr)
{
    char num[64];
    if (++c->depth > JSON_MAX_DEPTH) {
        c->depth--;
        return jinja_fail(c, ERR_INVAL, "value nested too deeply to print");
    }
    int rc = 0;
    switch (v->type) {
    case JV_UNDEF: rc = repr ? jinja_sb_put(c, sb, "Undefined", 9) : 0; break;
    case JV_NONE: rc = jinja_sb_put(c, sb, "None", 4); break;
    case JV_BOOL:
        rc = v->b ? jinja_sb_put(c, sb, "True", 4) : jinja_sb_put(c, sb, "False", 5);
        break;
    case JV_INT: rc = jinja_sb_printf(c, sb, "%" PRId64, v->i); break;
    case JV_FLOAT: rc = jinja_sb_put(c, sb, num, jinja_float_repr(v->f, num, sizeof(num))); break;
    case JV_STR:
        if (!repr) {
            rc = jinja_sb_put(c, sb, v->s, v->len);
        } else if (v->flags & JV_F_SAFE) {
            rc = jinja_sb_put(c, sb, "Markup(", 7);
            if (!rc) rc = repr_str(c, sb, v->s, v->len);
            if (!rc) rc = jinja_sb_putc(c, sb, ')');
        } else {
            rc = repr_str(c, sb, v->s, v->len);
        }
        break;
    case JV_LIST:
        if (v->view == JV_VIEW_GEN) { /* Python prints an address: nothing to reproduce */
            rc = jinja_fail(c, ERR_INVAL, "cannot convert a generator to a string (add |list)");
        } else if (v->view) {
            const char *open = v->view == JV_VIEW_ITEMS  ? "dict_items(["
                               : v->view == JV_VIEW_KEYS ? "dict_keys(["
                                                         : "dict_values([";
            rc = str_items(c, sb, v->l, open, "])", false);
        } else {
            rc = str_items(c, sb, v->l, "[", "]", false);
        }
        break;
    case JV_TUPLE: rc = str_items(c, sb, v->l, "(", ")", true); break;
    case JV_DICT: rc = str_dict(c, sb, v->d); break;
    case JV_NS:
        rc = jinja_sb_put(c, sb, "<Namespace ", 11);
        if (!rc) rc = str_dict(c, sb, v->d);
        if (!rc) rc = jinja_sb_putc(c, sb, '>');
        break;
    case JV_LOOP:
        rc = jinja_sb_printf(c, sb, "<LoopContext %" PRId64 "/%" PRId64 ">", v->loop->index0 + 1,
                             v->loop->length);
        break;
    case JV_FUNC:
        if (v->fn->kind == JF_MACRO) {
            rc = jinja_sb_put(c, sb, "<Macro ", 7);
            if (!rc)
                rc = v->fn->name.len ? repr_str(c, sb, v->fn->name.p, v->fn->name.len)
                                     : jinja_sb_put(c, sb, "anonymous", 9);
            if (!rc) rc = jinja_sb_putc(c, sb, '>');
        } else { /* Python prints an object address here: nothing to reproduce */
            rc = jinja_fail(c, ERR_INVAL, "cannot convert the function '%.*s' to a string",
                            (int)v->fn->name.len, v->fn->name.p);
        }
        break;
    }
    c->depth--;
    return rc;
}

int jinja_to_str(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    return str_common(c, sb, v, false);
}

int jinja_repr(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    return str_common(c, sb, v, true);
}

int jinja_str_of(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out)
{
    if (v->type == JV_STR) {
        *out = *v;
        return 0;
    }
    struct jinja_sb sb = {0};
    int rc = jinja_to_str(c, &sb, v);
    if (!rc) *out = jinja_sb_val(&sb);
    return rc;
}

int jinja_escape_into(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    if (v->type == JV_STR && (v->flags & JV_F_SAFE)) return jinja_sb_put(c, sb, v->s, v->len);
    struct jinja_val s;
    int rc = jinja_str_of(c, v, &s);
    size_t from = 0;
    for (size_t i = 0; i < s.len && !rc; i++) {
        const char *e = NULL;
        switch (s.s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '\'': e = "&#39;"; break;
        case '"': e = "&#34;"; break;
        default: continue;
        }
        rc = jinja_sb_put(c, sb, s.s + from, i - from);
        if (!rc) rc = jinja_sb_put(c, sb, e, strlen(e));
        from = i + 1;
    }
    return rc ? rc : jinja_sb_put(c, sb, s.s + from, s.len - from);
}

/* ---------------------------------------------------------------- json.dumps */

static int json_str(struct jinja_ctx *c, struct jinja_sb *sb, const char *s, size_t len,
                    bool ensure_ascii)
{
    int rc = jinja_sb_putc(c, sb, '"');
    size_t from = 0;
    for (size_t i = 0; i < len && !rc;) {
        uint8_t b = (uint8_t)s[i];
        if (b >= 0x20 && b != '"' && b != '\\' && (b < 0x80 || !ensure_ascii)) {
            i++;
            continue;
        }
        rc = jinja_sb_put(c, sb, s + from, i - from);
        if (rc) break;
        if (b >= 0x80) {
            uint32_t cpt = unicode_decode(s, len, &i);
            if (cpt >= 0x10000) {
                uint32_t v = cpt - 0x10000;
                rc = jinja_sb_printf(c, sb, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)),
                                     (unsigned)(0xDC00 | (v & 0x3FF)));
            } else {
                rc = jinja_sb_printf(c, sb, "\\u%04x", (unsigned)cpt);
            }
        } else {
            const char *e = b == '"'    ? "\\\""
                            : b == '\\' ? "\\\\"
                            : b == '\n' ? "\\n"
                            : b == '\r' ? "\\r"
                            : b == '\t' ? "\\t"
                            : b == '\b' ? "\\b"
                            : b == '\f' ? "\\f"
                                        : NULL;
            rc = e ? jinja_sb_put(c, sb, e, 2) : jinja_sb_printf(c, sb, "\\u%04x", (unsigned)b);
            i++;
        }
        from = i;
    }
    if (!rc) rc = jinja_sb_put(c, sb, s + from, len - from);
    return rc ? rc : jinja_sb_putc(c, sb, '"');
}

static int json_newline(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_json_opts *o,
                        int level)
{
    int rc = jinja_sb_putc(c, sb, '\n');
    for (int k = 0; k < level && !rc; k++) rc = jinja_sb_put(c, sb, o->indent->p, o->indent->len);
    return rc;
}

/* A dict key as json.dumps converts it. */
static int json_key(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *k,
                    const struct jinja_json_opts *o)
{
    char num[64];
    switch (k->type) {
    case JV_STR: return json_str(c, sb, k->s, k->len, o->ensure_ascii);
    case JV_INT: snprintf(num, sizeof(num), "%" PRId64, k->i); break;
    case JV_BOOL: snprintf(num, sizeof(num), "%s", k->b ? "true" : "false"); break;
    case JV_NONE: snprintf(num, sizeof(num), "null"); break;
    case JV_FLOAT:
        if (isnan(k->f))
            snprintf(num, sizeof(num), "NaN");
        else if (isinf(k->f))
            snprintf(num, sizeof(num), k->f < 0 ? "-Infinity" : "Infinity");
        else
            jinja_float_repr(k->f, num, sizeof(num));
        break;
    default:
        return jinja_fail(c, ERR_INVAL, "keys must be str, int, float, bool or None, not %s",
                          jinja_type_name(k));
    }
    return json_str(c, sb, num, strlen(num), false);
}

static int json_value(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      const struct jinja_json_opts *o, int level);

static int json_dict(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_dict *d,
                     const struct jinja_json_opts *o, int level)
{
    if (d->n == 0) return jinja_sb_put(c, sb, "{}", 2);
    const struct jinja_pair **order = jinja_alloc(&c->arena, d->n * sizeof(*order));
    if (!order) return jinja_fail_alloc(c);
    for (size_t i = 0; i < d->n; i++) order[i] = &d->v[i];
    if (o->sort_keys) { /* insertion sort: stable, and keys are few */
        for (size_t i = 1; i < d->n; i++) {
            const struct jinja_pair *x = order[i];
            size_t j = i;
            while (j > 0) {
                bool lt;
                int rc = jinja_less(c, &x->k, &order[j - 1]->k, &lt);
                if (rc) return rc;
                if (!lt) break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
    }
    const char *isep = o->item_sep ? o->item_sep->p : o->indent ? "," : ", ";
    size_t isep_len = o->item_sep ? o->item_sep->len : strlen(isep);
    const char *ksep = o->key_sep ? o->key_sep->p : ": ";
    size_t ksep_len = o->key_sep ? o->key_sep->len : 2;
    int rc = jinja_sb_putc(c, sb, '{');
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, isep, isep_len);
        if (!rc && o->indent) rc = json_newline(c, sb, o, level + 1);
        if (!rc) rc = json_key(c, sb, &order[i]->k, o);
        if (!rc) rc = jinja_sb_put(c, sb, ksep, ksep_len);
        if (!rc) rc = json_value(c, sb, &order[i]->v, o, level + 1);
    }
    if (!rc && o->indent) rc = json_newline(c, sb, o, level);
    return rc ? rc : jinja_sb_putc(c, sb, '}');
}

static int json_value(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      const struct jinja_json_opts *o, int level)
{
    char num[64];
    if (level > JSON_MAX_DEPTH)
        return jinja_fail(c, ERR_INVAL, "value nested too deeply for tojson");
    switch (v->type) {
    case JV_NONE: return jinja_sb_put(c, sb, "null", 4);
    case JV_BOOL: return v->b ? jinja_sb_put(c, sb, "true", 4) : jinja_sb_put(c, sb, "false", 5);
    case JV_INT: return jinja_sb_printf(c, sb, "%" PRId64, v->i);
    case JV_FLOAT:
        if (isnan(v->f)) return jinja_sb_put(c, sb, "NaN", 3);
        if (isinf(v->f))
            return v->f < 0 ? jinja_sb_put(c, sb, "-Infinity", 9)
                            : jinja_sb_put(c, sb, "Infinity", 8);
        return jinja_sb_put(c, sb, num, jinja_float_repr(v->f, num, sizeof(num)));
    case JV_STR: return json_str(c, sb, v->s, v->len, o->ensure_ascii);
    case JV_LIST:
    case JV_TUPLE: {
        if (v->view) break;
        if (v->l->n == 0) return jinja_sb_put(c, sb, "[]", 2);
        const char *isep = o->item_sep ? o->item_sep->p : o->indent ? "," : ", ";
        size_t isep_len = o->item_sep ? o->item_sep->len : strlen(isep);
        int rc = jinja_sb_putc(c, sb, '[');
        for (size_t i = 0; i < v->l->n && !rc; i++) {
            if (i) rc = jinja_sb_put(c, sb, isep, isep_len);
            if (!rc && o->indent) rc = json_newline(c, sb, o, level + 1);
            if (!rc) rc = json_value(c, sb, &v->l->v[i], o, level + 1);
        }
        if (!rc && o->indent) rc = json_newline(c, sb, o, level);
        return rc ? rc : jinja_sb_putc(c, sb, ']');
    }
    case JV_DICT: return json_dict(c, sb, v->d, o, level);
    default: break;
    }
    return jinja_fail(c, ERR_INVAL, "Object of type %s is not JSON serializable",
                      jinja_type_name(v));
}

int jinja_to_json(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                  const struct jinja_json_opts *o)
{
    return json_value(c, sb, v, o, 0);
}
