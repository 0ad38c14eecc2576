/* Values of the Jinja interpreter with Python's semantics: the arena they live in, strings, lists
 * and dicts, conversion from JSON, truthiness, == and ordering (str(), repr() and json.dumps are in
 * jinja_repr.c). No I/O; everything allocates from the render's arena. */
#include "engine/api/jinja_priv.h"

#include "common/buf.h"
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
    struct buf tmp; /* numbers and short pieces (the output's own bound applies after) */
    buf_init(&tmp, 1u << 16);
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(&tmp, fmt, ap);
    va_end(ap);
    if (rc == 0)
        rc = jinja_sb_put(c, sb, tmp.data ? tmp.data : "", tmp.len);
    else
        rc = jinja_fail(c, rc, "format error");
    buf_fini(&tmp);
    return rc;
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
