/* Attribute and item access as jinja2's sandbox does it: obj.name tries a Python attribute first
 * (methods; mutating and dunder ones are blocked as unsafe), then the item; obj[key] the other way
 * round; a miss is an undefined value that says what was missing. Slicing, iteration and len()
 * with Python's rules (strings by code point, dicts by key, generators once). */
#include "engine/api/jinja_priv.h"

#include "common/err.h"

#include <string.h>

/* ---------------------------------------------------------------- attribute and item access */

/* jinja2's object_type_repr: "dict object", "None", ... */
static const char *object_type(const struct jinja_val *v)
{
    switch (v->type) {
    case JV_NONE: return "None";
    case JV_STR: return v->flags & JV_F_SAFE ? "markupsafe.Markup object" : "str object";
    case JV_BOOL: return "bool object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_LIST: return "list object";
    case JV_TUPLE: return "tuple object";
    case JV_DICT: return "dict object";
    case JV_NS: return "jinja2.utils.Namespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_FUNC:
        return v->fn->kind == JF_MACRO ? "jinja2.runtime.Macro object"
                                       : "builtin_function_or_method object";
    default: return "object";
    }
}

static struct jinja_val no_attr(struct jinja_ctx *c, const struct jinja_val *obj,
                                struct jinja_sv name)
{
    return jinja_undef_msg(c, false, "'%s' has no attribute '%.*s'", object_type(obj),
                           (int)name.len, name.p);
}

/* Attributes of the loop variable. */
static int loop_attr(struct jinja_ctx *c, const struct jinja_loop *l, struct jinja_sv name,
                     struct jinja_val *out, bool *found)
{
    *found = true;
#define IS(s) (name.len == sizeof(s) - 1 && memcmp(name.p, s, sizeof(s) - 1) == 0)
    if (IS("index"))
        *out = jinja_int(l->index0 + 1);
    else if (IS("index0"))
        *out = jinja_int(l->index0);
    else if (IS("revindex"))
        *out = jinja_int(l->length - l->index0);
    else if (IS("revindex0"))
        *out = jinja_int(l->length - l->index0 - 1);
    else if (IS("first"))
        *out = jinja_bool(l->index0 == 0);
    else if (IS("last"))
        *out = jinja_bool(l->index0 == l->length - 1);
    else if (IS("length"))
        *out = jinja_int(l->length);
    else if (IS("depth"))
        *out = jinja_int(l->depth);
    else if (IS("depth0"))
        *out = jinja_int(l->depth - 1);
    else if (IS("previtem"))
        *out = l->index0 > 0 ? l->items->v[l->index0 - 1]
                             : jinja_undef_msg(c, false, "there is no previous item");
    else if (IS("nextitem"))
        *out = l->index0 + 1 < l->length ? l->items->v[l->index0 + 1]
                                         : jinja_undef_msg(c, false, "there is no next item");
    else if (IS("cycle") || IS("changed")) {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_METHOD;
        f->id = -1; /* loop methods: told apart by name */
        f->name = name;
        f->self = (struct jinja_val){.type = JV_LOOP, .loop = (struct jinja_loop *)l};
        *out = (struct jinja_val){.type = JV_FUNC, .fn = f};
    } else
        *found = false;
#undef IS
    return 0;
}

static bool is_dunder(struct jinja_sv name)
{
    return name.len > 4 && name.p[0] == '_' && name.p[1] == '_' && name.p[name.len - 1] == '_' &&
           name.p[name.len - 2] == '_';
}

int jinja_pyattr(struct jinja_ctx *c, const struct jinja_val *obj, struct jinja_sv name,
                 struct jinja_val *out)
{
    if (is_dunder(name)) {
        *out = jinja_undef_msg(c, true, "access to attribute '%.*s' of '%s' object is unsafe.",
                               (int)name.len, name.p, jinja_type_name(obj));
        return 1;
    }
    if (obj->type == JV_NS) {
        const struct jinja_val *v = jinja_dict_get_str(obj->d, name.p, name.len);
        if (!v) return 0;
        *out = *v;
        return 1;
    }
    if (obj->type == JV_LOOP) {
        bool found;
        int rc = loop_attr(c, obj->loop, name, out, &found);
        if (rc) return rc;
        return found ? 1 : 0;
    }
    return jinja_method_lookup(c, obj, name, out);
}

/* obj[key] as Python does it: 1 found, 0 missing (a LookupError or TypeError). */
static int python_item(struct jinja_ctx *c, const struct jinja_val *obj,
                       const struct jinja_val *key, struct jinja_val *out)
{
    if (obj->type == JV_DICT) {
        if (key->type == JV_LIST || key->type == JV_DICT || key->type == JV_NS) return 0;
        const struct jinja_val *v = jinja_dict_get(obj->d, key);
        if (!v) return 0;
        *out = *v;
        return 1;
    }
    bool seq =
        obj->type == JV_STR || ((obj->type == JV_LIST || obj->type == JV_TUPLE) && !obj->view);
    if (!seq || (key->type != JV_INT && key->type != JV_BOOL)) return 0;
    int64_t i = key->type == JV_BOOL ? key->b : key->i;
    if (obj->type == JV_STR) {
        int64_t n = (int64_t)jinja_utf8_count(obj->s, obj->len);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return 0;
        size_t a = jinja_utf8_offset(obj->s, obj->len, (size_t)i);
        size_t b = jinja_utf8_offset(obj->s + a, obj->len - a, 1) + a;
        *out = jinja_str(obj->s + a, b - a);
        return 1;
    }
    int64_t n = (int64_t)obj->l->n;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return 0;
    *out = obj->l->v[i];
    return 1;
}

int jinja_getattr(struct jinja_ctx *c, const struct jinja_val *obj, struct jinja_sv name,
                  struct jinja_val *out)
{
    if (obj->type == JV_UNDEF) return jinja_fail_undef(c, obj);
    int r = jinja_pyattr(c, obj, name, out);
    if (r) return r < 0 ? r : 0;
    struct jinja_val key = jinja_str(name.p, name.len);
    if (python_item(c, obj, &key, out)) return 0;
    *out = no_attr(c, obj, name);
    return 0;
}

static int slice_index(struct jinja_ctx *c, const struct jinja_val *v, bool *ok, int64_t *out)
{
    (void)c;
    if (!v || v->type == JV_NONE) return 0;
    if (v->type == JV_INT || v->type == JV_BOOL) {
        *out = v->type == JV_BOOL ? v->b : v->i;
        return 1;
    }
    *ok = false;
    return 0;
}

/* Python's slice.indices(): clamps start/stop for length n and step. */
static void slice_bounds(int64_t n, int64_t step, bool has_start, int64_t start, bool has_stop,
                         int64_t stop, int64_t *b, int64_t *e)
{
    if (step > 0) {
        *b =
            has_start ? (start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start)) : 0;
        *e = has_stop ? (stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop)) : n;
    } else {
        *b = has_start
                 ? (start < 0 ? (start + n < 0 ? -1 : start + n) : (start >= n ? n - 1 : start))
                 : n - 1;
        *e = has_stop ? (stop < 0 ? (stop + n < 0 ? -1 : stop + n) : (stop >= n ? n - 1 : stop))
                      : -1;
    }
}

int jinja_get_slice(struct jinja_ctx *c, const struct jinja_val *obj,
                    const struct jinja_val parts[3], const bool given[3], struct jinja_val *out)
{
    bool ok = true;
    int64_t start = 0, stop = 0, step = 1;
    bool hs = slice_index(c, given[0] ? &parts[0] : NULL, &ok, &start);
    bool he = slice_index(c, given[1] ? &parts[1] : NULL, &ok, &stop);
    slice_index(c, given[2] ? &parts[2] : NULL, &ok, &step);
    bool seq =
        obj->type == JV_STR || ((obj->type == JV_LIST || obj->type == JV_TUPLE) && !obj->view);
    if (!ok || !seq) { /* a TypeError, which the sandbox's getitem turns into undefined */
        *out = jinja_undef_msg(c, false, "%s object has no element slice", object_type(obj));
        return 0;
    }
    if (step == 0) return jinja_fail(c, ERR_INVAL, "slice step cannot be zero");
    if (obj->type == JV_STR) {
        /* code points: index the string's code point offsets */
        size_t n = jinja_utf8_count(obj->s, obj->len);
        int64_t b, e;
        slice_bounds((int64_t)n, step, hs, start, he, stop, &b, &e);
        struct jinja_sb sb = {0};
        bool ascii = n == obj->len;
        int rc = 0;
        for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
            if (ascii) {
                rc = jinja_sb_putc(c, &sb, obj->s[i]);
            } else {
                size_t a = jinja_utf8_offset(obj->s, obj->len, (size_t)i);
                size_t z = jinja_utf8_offset(obj->s + a, obj->len - a, 1) + a;
                rc = jinja_sb_put(c, &sb, obj->s + a, z - a);
            }
            if (rc || (rc = jinja_step(c, 1))) return rc;
        }
        *out = jinja_sb_val(&sb);
        return 0;
    }
    int64_t b, e;
    slice_bounds((int64_t)obj->l->n, step, hs, start, he, stop, &b, &e);
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
        int rc = jinja_list_push(c, l, obj->l->v[i]);
        if (rc || (rc = jinja_step(c, 1))) return rc;
    }
    *out = jinja_list_val(l, obj->type);
    return 0;
}

int jinja_getitem(struct jinja_ctx *c, const struct jinja_val *obj, const struct jinja_val *key,
                  struct jinja_val *out)
{
    if (obj->type == JV_UNDEF) return jinja_fail_undef(c, obj);
    if (key->type == JV_UNDEF && obj->type == JV_DICT) return jinja_fail_undef(c, key);
    if (python_item(c, obj, key, out)) return 0;
    if (key->type == JV_STR) {
        struct jinja_sv name = jinja_sv_of(key);
        int r = jinja_pyattr(c, obj, name, out);
        if (r) return r < 0 ? r : 0;
        *out = no_attr(c, obj, name);
        return 0;
    }
    struct jinja_sb sb = {0};
    int rc = jinja_repr(c, &sb, key);
    if (rc) return rc;
    *out = jinja_undef_msg(c, false, "%s has no element %.*s", object_type(obj), (int)sb.len, sb.p);
    return 0;
}

int jinja_iterate(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_list **out)
{
    struct jinja_list *l;
    switch (v->type) {
    case JV_UNDEF:
        if (v->flags & JV_F_UNSAFE) return jinja_fail_undef(c, v);
        l = jinja_list_new(c, 0);
        break;
    case JV_LIST:
    case JV_TUPLE:
        if (v->view == JV_VIEW_GEN) { /* the items not consumed yet; now all are */
            if (!(l = jinja_list_new(c, 0))) break;
            l->v = v->l->v + v->l->pos;
            l->n = l->cap = v->l->n - v->l->pos;
            v->l->pos = v->l->n;
            *out = l;
            return jinja_step(c, l->n);
        }
        *out = v->l;
        return jinja_step(c, v->l->n);
    case JV_DICT:
        l = jinja_list_new(c, v->d->n);
        if (l)
            for (size_t i = 0; i < v->d->n; i++) l->v[l->n++] = v->d->v[i].k;
        break;
    case JV_STR: {
        size_t n = jinja_utf8_count(v->s, v->len);
        l = jinja_list_new(c, n);
        for (size_t i = 0, off = 0; l && i < n; i++) {
            size_t len = jinja_utf8_offset(v->s + off, v->len - off, 1);
            l->v[l->n++] = jinja_str(v->s + off, len);
            off += len;
        }
        break;
    }
    default: return jinja_fail(c, ERR_INVAL, "'%s' object is not iterable", jinja_type_name(v));
    }
    if (!l) return jinja_fail_alloc(c);
    *out = l;
    return jinja_step(c, l->n);
}

int jinja_length(struct jinja_ctx *c, const struct jinja_val *v, int64_t *out)
{
    switch (v->type) {
    case JV_UNDEF: *out = 0; return 0;
    case JV_STR: *out = (int64_t)jinja_utf8_count(v->s, v->len); return 0;
    case JV_LIST:
    case JV_TUPLE:
        if (v->view == JV_VIEW_GEN) break;
        *out = (int64_t)v->l->n;
        return 0;
    case JV_DICT: *out = (int64_t)v->d->n; return 0;
    case JV_LOOP: *out = v->loop->length; return 0;
    default: break;
    }
    return jinja_fail(c, ERR_INVAL, "object of type '%s' has no len()", jinja_type_name(v));
}
