/* Jinja evaluator: runs the syntax tree over values with jinja2's semantics. Scoping follows what
 * jinja2's compiled code does: every for-loop iteration, macro call and with block gets a fresh
 * scope whose parent is the scope it appears in (so `set` inside a loop never leaks out, which is
 * why templates use namespace()), if blocks share their parent's. Lookups fall through the scopes
 * to the render variables and then the globals. Attribute access is the sandbox's: a Python
 * attribute first (methods; mutating ones are blocked), then the item; item access the other way
 * round. Every node and loop iteration counts against the step limit. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define JX_BREAK    1
#define JX_CONTINUE 2
#define MAX_ARGS    64

static int exec_body(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_nodes *body);

static struct jinja_scope *scope_new(struct jinja_ctx *c, struct jinja_scope *parent)
{
    struct jinja_scope *s = jinja_alloc(&c->arena, sizeof(*s));
    if (!s) return NULL;
    memset(s, 0, sizeof(*s));
    s->parent = parent;
    return s;
}

static int scope_set(struct jinja_ctx *c, struct jinja_scope *s, struct jinja_sv name,
                     struct jinja_val v)
{
    if (jinja_dict_set(&c->arena, &s->vars, jinja_str(name.p, name.len), v))
        return jinja_fail_alloc(c);
    return 0;
}

static struct jinja_val *scope_find(struct jinja_scope *s, struct jinja_sv name)
{
    for (; s; s = s->parent) {
        struct jinja_val *v = jinja_dict_get_str(&s->vars, name.p, name.len);
        if (v) return v;
    }
    return NULL;
}

static int emit(struct jinja_ctx *c, const char *p, size_t n)
{
    if (c->sb) return jinja_sb_put(c, c->sb, p, n);
    int rc = buf_append(c->out, p, n);
    if (rc == ERR_TOO_BIG)
        return jinja_fail(c, ERR_TOO_BIG, "the rendered text is longer than %zu bytes",
                          c->out->max);
    if (rc) return jinja_fail(c, rc, "out of memory");
    return 0;
}

static int emit_val(struct jinja_ctx *c, const struct jinja_val *v)
{
    if (v->type == JV_STR) return emit(c, v->s, v->len);
    if (v->type == JV_UNDEF) return 0;
    struct jinja_sb sb = {0};
    int rc = jinja_to_str(c, &sb, v);
    return rc ? rc : emit(c, sb.p, sb.len);
}

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

static int get_slice(struct jinja_ctx *c, const struct jinja_val *obj,
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

/* ---------------------------------------------------------------- operators */

static bool is_num(const struct jinja_val *v)
{
    return v->type == JV_INT || v->type == JV_BOOL || v->type == JV_FLOAT;
}

static double num_f(const struct jinja_val *v)
{
    return v->type == JV_FLOAT ? v->f : v->type == JV_BOOL ? (double)v->b : (double)v->i;
}

static int64_t num_i(const struct jinja_val *v)
{
    return v->type == JV_BOOL ? (int64_t)v->b : v->i;
}

static const char *op_name(char op)
{
    switch (op) {
    case JINJA_OP_FLOORDIV: return "//";
    case JINJA_OP_POW: return "**";
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    default: return "%";
    }
}

static int type_error(struct jinja_ctx *c, char op, const struct jinja_val *a,
                      const struct jinja_val *b)
{
    if (a->type == JV_UNDEF) return jinja_fail_undef(c, a);
    if (b->type == JV_UNDEF) return jinja_fail_undef(c, b);
    if (op == '+' && a->type == JV_STR)
        return jinja_fail(c, ERR_INVAL, "can only concatenate str (not \"%s\") to str",
                          jinja_type_name(b));
    return jinja_fail(c, ERR_INVAL, "unsupported operand type(s) for %s: '%s' and '%s'",
                      op_name(op), jinja_type_name(a), jinja_type_name(b));
}

static int overflow(struct jinja_ctx *c)
{
    return jinja_fail(c, ERR_INVAL, "integer overflow (Python would use a big integer)");
}

/* Python's % and // on ints (floor semantics). */
static int64_t floordiv_i(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* CPython's float_divmod: floor division and modulo with Python's signs. */
static void float_divmod(double vx, double wx, double *floordiv, double *mod)
{
    double m = fmod(vx, wx), div = (vx - m) / wx;
    if (m != 0) {
        if ((wx < 0) != (m < 0)) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    double fd;
    if (div != 0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *mod = m;
}

static int repeat(struct jinja_ctx *c, const struct jinja_val *seq, int64_t times,
                  struct jinja_val *out)
{
    if (times < 0) times = 0;
    if (seq->type == JV_STR) {
        if (seq->len && (uint64_t)times > UINT32_MAX / seq->len)
            return jinja_fail(c, ERR_TOO_BIG, "string too long");
        struct jinja_sb sb = {0};
        for (int64_t i = 0; i < times; i++) {
            int rc = jinja_sb_put(c, &sb, seq->s, seq->len);
            if (rc || (rc = jinja_step(c, 1))) return rc;
        }
        *out = jinja_sb_val(&sb);
        out->flags = seq->flags & JV_F_SAFE;
        return 0;
    }
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq->l->n; k++) {
            int rc = jinja_list_push(c, l, seq->l->v[k]);
            if (rc || (rc = jinja_step(c, 1))) return rc;
        }
    *out = jinja_list_val(l, seq->type);
    return 0;
}

/* str + str where one side is Markup: the other side is escaped (markupsafe's __add__). */
static int add_str(struct jinja_ctx *c, const struct jinja_val *a, const struct jinja_val *b,
                   struct jinja_val *out)
{
    bool safe = (a->flags | b->flags) & JV_F_SAFE;
    struct jinja_sb sb = {0};
    int rc = safe ? jinja_escape_into(c, &sb, a) : jinja_sb_put(c, &sb, a->s, a->len);
    if (!rc) rc = safe ? jinja_escape_into(c, &sb, b) : jinja_sb_put(c, &sb, b->s, b->len);
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    if (safe) out->flags = JV_F_SAFE;
    return 0;
}

static int binop(struct jinja_ctx *c, char op, const struct jinja_val *a, const struct jinja_val *b,
                 struct jinja_val *out)
{
    if (a->type == JV_UNDEF || b->type == JV_UNDEF) return type_error(c, op, a, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a->type == JV_FLOAT || b->type == JV_FLOAT;
        int64_t x = num_i(a), y = num_i(b), r;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case '+':
            if (fl)
                *out = jinja_float(fx + fy);
            else if (__builtin_add_overflow(x, y, &r))
                return overflow(c);
            else
                *out = jinja_int(r);
            return 0;
        case '-':
            if (fl)
                *out = jinja_float(fx - fy);
            else if (__builtin_sub_overflow(x, y, &r))
                return overflow(c);
            else
                *out = jinja_int(r);
            return 0;
        case '*':
            if (fl)
                *out = jinja_float(fx * fy);
            else if (__builtin_mul_overflow(x, y, &r))
                return overflow(c);
            else
                *out = jinja_int(r);
            return 0;
        case '/':
            if (fy == 0) return jinja_fail(c, ERR_INVAL, "division by zero");
            *out = jinja_float(fx / fy);
            return 0;
        case JINJA_OP_FLOORDIV:
        case '%':
            if (fl ? fy == 0 : y == 0)
                return jinja_fail(c, ERR_INVAL,
                                  op == '%' ? "modulo by zero"
                                            : "integer division or modulo by zero");
            if (fl) {
                double fd, m;
                float_divmod(fx, fy, &fd, &m);
                *out = jinja_float(op == '%' ? m : fd);
                return 0;
            }
            if (x == INT64_MIN && y == -1) return overflow(c);
            r = floordiv_i(x, y);
            *out = op == '%' ? jinja_int(x - r * y) : jinja_int(r);
            return 0;
        case JINJA_OP_POW:
            if (!fl && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow(c);
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow(c);
                }
                *out = jinja_int(acc);
                return 0;
            }
            if (fx == 0 && fy < 0)
                return jinja_fail(c, ERR_INVAL, "0.0 cannot be raised to a negative power");
            *out = jinja_float(pow(fx, fy));
            return 0;
        }
    }
    if (op == '+') {
        if (a->type == JV_STR && b->type == JV_STR) return add_str(c, a, b, out);
        if ((a->type == JV_LIST || a->type == JV_TUPLE) && a->type == b->type && !a->view &&
            !b->view) {
            struct jinja_list *l = jinja_list_new(c, a->l->n + b->l->n);
            if (!l) return jinja_fail_alloc(c);
            if (a->l->n) memcpy(l->v, a->l->v, a->l->n * sizeof(*l->v));
            if (b->l->n) memcpy(l->v + a->l->n, b->l->v, b->l->n * sizeof(*l->v));
            l->n = a->l->n + b->l->n;
            *out = jinja_list_val(l, a->type);
            return jinja_step(c, l->n);
        }
    }
    if (op == '*') {
        bool seq_a = a->type == JV_STR || ((a->type == JV_LIST || a->type == JV_TUPLE) && !a->view);
        bool seq_b = b->type == JV_STR || ((b->type == JV_LIST || b->type == JV_TUPLE) && !b->view);
        if (seq_a && (b->type == JV_INT || b->type == JV_BOOL)) return repeat(c, a, num_i(b), out);
        if (seq_b && (a->type == JV_INT || a->type == JV_BOOL)) return repeat(c, b, num_i(a), out);
    }
    if (op == '%' && a->type == JV_STR) return jinja_str_percent(c, a, b, out);
    return type_error(c, op, a, b);
}

static int contains(struct jinja_ctx *c, const struct jinja_val *item,
                    const struct jinja_val *container, bool *out)
{
    switch (container->type) {
    case JV_STR:
        if (item->type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "'in <string>' requires string as left operand, not %s",
                              jinja_type_name(item));
        *out = item->len == 0 || memmem(container->s, container->len, item->s, item->len) != NULL;
        return 0;
    case JV_LIST:
    case JV_TUPLE: {
        struct jinja_list *l = container->l;
        size_t i = container->view == JV_VIEW_GEN ? l->pos : 0;
        *out = false;
        for (; i < l->n && !*out; i++) *out = jinja_equal(item, &l->v[i]);
        if (container->view == JV_VIEW_GEN) l->pos = i; /* `in` consumes a generator */
        return jinja_step(c, l->n);
    }
    case JV_DICT:
        if (item->type == JV_LIST || item->type == JV_DICT)
            return jinja_fail(c, ERR_INVAL, "unhashable type: '%s'", jinja_type_name(item));
        *out = jinja_dict_get(container->d, item) != NULL;
        return 0;
    case JV_UNDEF:
        if (container->flags & JV_F_UNSAFE) return jinja_fail_undef(c, container);
        *out = false; /* Undefined iterates as empty */
        return 0;
    default:
        return jinja_fail(c, ERR_INVAL, "argument of type '%s' is not iterable",
                          jinja_type_name(container));
    }
}

static int compare(struct jinja_ctx *c, char op, const struct jinja_val *a,
                   const struct jinja_val *b, bool *out)
{
    switch (op) {
    case JINJA_OP_EQ: *out = jinja_equal(a, b); return 0;
    case JINJA_OP_NE: *out = !jinja_equal(a, b); return 0;
    case 'i': return contains(c, a, b, out);
    case 'n': {
        int rc = contains(c, a, b, out);
        *out = !*out;
        return rc;
    }
    case '<': return jinja_order(c, '<', a, b, out);
    case JINJA_OP_LE: return jinja_order(c, 'l', a, b, out);
    case '>': return jinja_order(c, '>', a, b, out);
    default: return jinja_order(c, 'g', a, b, out);
    }
}

/* ---------------------------------------------------------------- calls */

struct args {
    struct jinja_val pos[MAX_ARGS];
    size_t n_pos;
    struct jinja_sv kw[MAX_ARGS];
    struct jinja_val kwv[MAX_ARGS];
    size_t n_kw;
};

static int args_eval(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                     struct args *a)
{
    a->n_pos = a->n_kw = 0;
    for (uint32_t i = 0; i < n->l0.n; i++) {
        if (a->n_pos == MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
        int rc = jinja_eval(c, s, n->l0.v[i], &a->pos[a->n_pos++]);
        if (rc) return rc;
    }
    if (n->c) { /* *args */
        struct jinja_val v;
        struct jinja_list *l;
        int rc = jinja_eval(c, s, n->c, &v);
        if (rc || (rc = jinja_iterate(c, &v, &l))) return rc;
        for (size_t i = 0; i < l->n; i++) {
            if (a->n_pos == MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
            a->pos[a->n_pos++] = l->v[i];
        }
    }
    for (uint32_t i = 0; i < n->l1.n; i++) {
        if (a->n_kw == MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
        a->kw[a->n_kw] = n->kw[i];
        int rc = jinja_eval(c, s, n->l1.v[i], &a->kwv[a->n_kw++]);
        if (rc) return rc;
    }
    if (n->d) { /* **kwargs */
        struct jinja_val v;
        int rc = jinja_eval(c, s, n->d, &v);
        if (rc) return rc;
        if (v.type != JV_DICT)
            return jinja_fail(c, ERR_INVAL, "argument after ** must be a mapping, not %s",
                              jinja_type_name(&v));
        for (size_t i = 0; i < v.d->n; i++) {
            if (v.d->v[i].k.type != JV_STR)
                return jinja_fail(c, ERR_INVAL, "keywords must be strings");
            if (a->n_kw == MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
            a->kw[a->n_kw] = jinja_sv_of(&v.d->v[i].k);
            a->kwv[a->n_kw++] = v.d->v[i].v;
        }
    }
    return 0;
}

/* Renders `body` in scope s into a new string (block set, macro call, filter block). */
static int capture(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_nodes *body,
                   struct jinja_val *out)
{
    struct jinja_sb sb = {0}, *saved = c->sb;
    c->sb = &sb;
    int rc = exec_body(c, s, body);
    c->sb = saved;
    if (rc > 0) rc = 0; /* break/continue cannot cross a block: the parser refuses them */
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    return 0;
}

static bool sv_eq(struct jinja_sv a, const char *b)
{
    size_t n = strlen(b);
    return a.len == n && memcmp(a.p, b, n) == 0;
}

/* A macro call with jinja2's Macro.__call__ rules for positional, keyword, default, varargs,
 * kwargs and caller arguments. */
static int macro_call(struct jinja_ctx *c, const struct jinja_func *fn,
                      const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                      const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out)
{
    const struct jinja_node *m = fn->mn;
    const char *name = m->kind == JN_MACRO ? "macro" : "call block";
    size_t n_params = m->n_kw, n_defaults = m->l1.n;
    if (c->depth >= c->max_depth)
        return jinja_fail(c, ERR_RANGE, "macro calls nested deeper than %d", c->max_depth);
    struct jinja_scope *s = scope_new(c, fn->scope);
    if (!s) return jinja_fail_alloc(c);
    bool used[MAX_ARGS] = {false};
    if (n_args > n_params && !(m->flags & JN_F_USES_VARARGS))
        return jinja_fail(c, ERR_INVAL, "%s '%.*s' takes not more than %zu argument(s)", name,
                          (int)fn->name.len, fn->name.p, n_params);
    int rc;
    for (size_t i = 0; i < n_params; i++) {
        struct jinja_val v = jinja_undef();
        bool have = false;
        if (i < n_args) {
            v = args[i];
            have = true;
        } else {
            for (size_t k = 0; k < n_kw && !have; k++)
                if (!used[k] && kw[k].len == m->kw[i].len &&
                    memcmp(kw[k].p, m->kw[i].p, kw[k].len) == 0) {
                    used[k] = true;
                    v = kwv[k];
                    have = true;
                }
        }
        if (!have) {
            size_t first_default = n_params - n_defaults;
            if (i >= first_default) {
                if ((rc = jinja_eval(c, s, m->l1.v[i - first_default], &v))) return rc;
            } else {
                v = jinja_undef_msg(c, false, "parameter '%.*s' was not provided",
                                    (int)m->kw[i].len, m->kw[i].p);
            }
        }
        if ((rc = scope_set(c, s, m->kw[i], v))) return rc;
    }
    if (m->flags & JN_F_USES_CALLER) {
        struct jinja_val caller = jinja_undef_msg(c, false, "No caller defined");
        for (size_t k = 0; k < n_kw; k++)
            if (!used[k] && sv_eq(kw[k], "caller")) {
                used[k] = true;
                caller = kwv[k];
            }
        if ((rc = scope_set(c, s, (struct jinja_sv){"caller", 6}, caller))) return rc;
    }
    struct jinja_dict *extra = jinja_dict_new(&c->arena);
    if (!extra) return jinja_fail_alloc(c);
    for (size_t k = 0; k < n_kw; k++) {
        if (used[k]) continue;
        if (!(m->flags & JN_F_USES_KWARGS))
            return jinja_fail(c, ERR_INVAL, "%s '%.*s' takes no keyword argument '%.*s'", name,
                              (int)fn->name.len, fn->name.p, (int)kw[k].len, kw[k].p);
        if (jinja_dict_set(&c->arena, extra, jinja_str(kw[k].p, kw[k].len), kwv[k]))
            return jinja_fail_alloc(c);
    }
    if (m->flags & JN_F_USES_KWARGS &&
        (rc = scope_set(c, s, (struct jinja_sv){"kwargs", 6},
                        (struct jinja_val){.type = JV_DICT, .d = extra})))
        return rc;
    if (m->flags & JN_F_USES_VARARGS) {
        struct jinja_list *l = jinja_list_new(c, 0);
        if (!l) return jinja_fail_alloc(c);
        for (size_t i = n_params; i < n_args; i++)
            if ((rc = jinja_list_push(c, l, args[i]))) return rc;
        if ((rc = scope_set(c, s, (struct jinja_sv){"varargs", 7}, jinja_list_val(l, JV_TUPLE))))
            return rc;
    }
    c->depth++;
    rc = capture(c, s, &m->l0, out);
    c->depth--;
    return rc;
}

static int exec_for(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                    const struct jinja_val *iter, int depth);

int jinja_call(struct jinja_ctx *c, const struct jinja_val *fn, const struct jinja_val *args,
               size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
               struct jinja_val *out)
{
    if (fn->type == JV_UNDEF) return jinja_fail_undef(c, fn);
    if (fn->type == JV_LOOP) { /* loop(children) in a recursive loop */
        const struct jinja_loop *l = fn->loop;
        if (!l->node || !(l->node->flags & JN_F_RECURSIVE))
            return jinja_fail(c, ERR_INVAL,
                              "Tried to call non recursive loop. Maybe you forgot "
                              "the 'recursive' modifier.");
        if (n_args != 1 || n_kw)
            return jinja_fail(c, ERR_INVAL, "a recursive loop takes one argument");
        if (c->depth >= c->max_depth)
            return jinja_fail(c, ERR_RANGE, "recursive loops nested deeper than %d", c->max_depth);
        struct jinja_sb sb = {0}, *saved = c->sb;
        c->sb = &sb;
        c->depth++;
        int rc = exec_for(c, l->scope, l->node, &args[0], l->depth + 1);
        c->depth--;
        c->sb = saved;
        if (rc) return rc;
        *out = jinja_sb_val(&sb);
        return 0;
    }
    if (fn->type != JV_FUNC)
        return jinja_fail(c, ERR_INVAL, "'%s' object is not callable", jinja_type_name(fn));
    switch (fn->fn->kind) {
    case JF_MACRO: return macro_call(c, fn->fn, args, n_args, kw, kwv, n_kw, out);
    case JF_GLOBAL: return jinja_global_call(c, fn->fn->id, args, n_args, kw, kwv, n_kw, out);
    default: return jinja_method_call(c, fn->fn, args, n_args, kw, kwv, n_kw, out);
    }
}

/* ---------------------------------------------------------------- expressions */

static int eval_filter(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                       const struct jinja_val *block_text, struct jinja_val *out)
{
    struct jinja_val in;
    int rc;
    if (n->a && n->a->kind == JN_FILTER)
        rc = eval_filter(c, s, n->a, block_text, &in);
    else if (n->a)
        rc = jinja_eval(c, s, n->a, &in);
    else
        in = *block_text, rc = 0;
    if (rc) return rc;
    if (n->id < 0)
        return jinja_fail(c, n->id == -2 ? ERR_UNSUPPORTED : ERR_INVAL,
                          n->id == -2 ? "the filter '%.*s' is not supported"
                                      : "no filter named '%.*s'",
                          (int)n->name.len, n->name.p);
    struct args a;
    if ((rc = args_eval(c, s, n, &a))) return rc;
    return jinja_filter_apply(c, n->id, &in, a.pos, a.n_pos, a.kw, a.kwv, a.n_kw, out);
}

static int eval_compare(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                        struct jinja_val *out)
{
    struct jinja_val left, right;
    int rc = jinja_eval(c, s, n->a, &left);
    for (uint32_t i = 0; !rc && i < n->l0.n; i++) {
        const struct jinja_node *o = n->l0.v[i];
        bool r;
        if ((rc = jinja_eval(c, s, o->a, &right)) ||
            (rc = compare(c, (char)o->op, &left, &right, &r)))
            break;
        if (!r) {
            *out = jinja_bool(false);
            return 0;
        }
        left = right;
    }
    if (!rc) *out = jinja_bool(true);
    return rc;
}

static int eval_name(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                     struct jinja_val *out)
{
    const struct jinja_val *v = scope_find(s, n->name);
    if (v) {
        *out = *v;
        return 0;
    }
    int g = jinja_global_find(n->name);
    if (g >= 0) {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_GLOBAL;
        f->id = g;
        f->name = n->name;
        *out = (struct jinja_val){.type = JV_FUNC, .fn = f};
        return 0;
    }
    *out = jinja_undef_msg(c, false, "'%.*s' is undefined", (int)n->name.len, n->name.p);
    return 0;
}

static int eval_seq(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                    struct jinja_val *out)
{
    struct jinja_list *l = jinja_list_new(c, n->l0.n);
    if (!l) return jinja_fail_alloc(c);
    for (uint32_t i = 0; i < n->l0.n; i++) {
        int rc = jinja_eval(c, s, n->l0.v[i], &l->v[i]);
        if (rc) return rc;
        l->n = i + 1;
    }
    *out = jinja_list_val(l, n->kind == JN_LIST ? JV_LIST : JV_TUPLE);
    return 0;
}

static int eval_dict(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                     struct jinja_val *out)
{
    struct jinja_dict *d = jinja_dict_new(&c->arena);
    if (!d) return jinja_fail_alloc(c);
    for (uint32_t i = 0; i < n->l0.n; i++) {
        struct jinja_val k, v;
        int rc = jinja_eval(c, s, n->l0.v[i], &k);
        if (rc || (rc = jinja_eval(c, s, n->l1.v[i], &v))) return rc;
        if (k.type == JV_LIST || k.type == JV_DICT || k.type == JV_NS)
            return jinja_fail(c, ERR_INVAL, "unhashable type: '%s'", jinja_type_name(&k));
        if (jinja_dict_set(&c->arena, d, k, v)) return jinja_fail_alloc(c);
    }
    *out = (struct jinja_val){.type = JV_DICT, .d = d};
    return 0;
}

static int eval_unary(struct jinja_ctx *c, const struct jinja_node *n, struct jinja_val *v,
                      struct jinja_val *out)
{
    if (v->type == JV_UNDEF) return jinja_fail_undef(c, v);
    if (v->type == JV_FLOAT) {
        *out = jinja_float(n->kind == JN_NEG ? -v->f : v->f);
        return 0;
    }
    if (v->type == JV_INT || v->type == JV_BOOL) {
        int64_t i = num_i(v);
        if (n->kind == JN_NEG && i == INT64_MIN) return overflow(c);
        *out = jinja_int(n->kind == JN_NEG ? -i : i);
        return 0;
    }
    return jinja_fail(c, ERR_INVAL, "bad operand type for unary %c: '%s'",
                      n->kind == JN_NEG ? '-' : '+', jinja_type_name(v));
}

int jinja_eval(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
               struct jinja_val *out)
{
    int rc = jinja_step(c, 1);
    if (rc) return rc;
    c->line = n->line;
    struct jinja_val a, b;
    switch (n->kind) {
    case JN_CONST: *out = n->val; return 0;
    case JN_NAME: return eval_name(c, s, n, out);
    case JN_LIST:
    case JN_TUPLE: return eval_seq(c, s, n, out);
    case JN_DICT: return eval_dict(c, s, n, out);
    case JN_GETATTR:
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        c->line = n->line;
        return jinja_getattr(c, &a, n->name, out);
    case JN_GETITEM:
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        if (n->b->kind == JN_SLICE) {
            struct jinja_val parts[3];
            bool given[3] = {n->b->a != NULL, n->b->b != NULL, n->b->c != NULL};
            const struct jinja_node *pn[3] = {n->b->a, n->b->b, n->b->c};
            for (int k = 0; k < 3; k++)
                if (pn[k] && (rc = jinja_eval(c, s, pn[k], &parts[k]))) return rc;
            if (a.type == JV_UNDEF) return jinja_fail_undef(c, &a);
            return get_slice(c, &a, parts, given, out);
        }
        if ((rc = jinja_eval(c, s, n->b, &b))) return rc;
        c->line = n->line;
        return jinja_getitem(c, &a, &b, out);
    case JN_CALL: {
        struct args args;
        if ((rc = jinja_eval(c, s, n->a, &a)) || (rc = args_eval(c, s, n, &args))) return rc;
        c->line = n->line;
        return jinja_call(c, &a, args.pos, args.n_pos, args.kw, args.kwv, args.n_kw, out);
    }
    case JN_FILTER: return eval_filter(c, s, n, NULL, out);
    case JN_TEST: {
        struct args args;
        bool r;
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        if (n->id < 0)
            return jinja_fail(c, n->id == -2 ? ERR_UNSUPPORTED : ERR_INVAL,
                              n->id == -2 ? "the test '%.*s' is not supported"
                                          : "no test named '%.*s'",
                              (int)n->name.len, n->name.p);
        if ((rc = args_eval(c, s, n, &args)) ||
            (rc = jinja_test_apply(c, n->id, &a, args.pos, args.n_pos, args.kw, args.kwv, args.n_kw,
                                   &r)))
            return rc;
        *out = jinja_bool(r);
        return 0;
    }
    case JN_NOT:
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        if (a.type == JV_UNDEF && (a.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &a);
        *out = jinja_bool(!jinja_truthy(&a));
        return 0;
    case JN_NEG:
    case JN_POS:
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        return eval_unary(c, n, &a, out);
    case JN_AND:
    case JN_OR:
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        if (jinja_truthy(&a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return jinja_eval(c, s, n->b, out);
    case JN_BINOP:
        if ((rc = jinja_eval(c, s, n->a, &a)) || (rc = jinja_eval(c, s, n->b, &b))) return rc;
        c->line = n->line;
        return binop(c, (char)n->op, &a, &b, out);
    case JN_CONCAT: {
        struct jinja_sb sb = {0};
        for (uint32_t i = 0; i < n->l0.n; i++) {
            if ((rc = jinja_eval(c, s, n->l0.v[i], &a))) return rc;
            if (a.type == JV_UNDEF && (a.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &a);
            if ((rc = jinja_to_str(c, &sb, &a))) return rc;
        }
        *out = jinja_sb_val(&sb);
        return 0;
    }
    case JN_COMPARE: return eval_compare(c, s, n, out);
    case JN_CONDEXPR:
        if ((rc = jinja_eval(c, s, n->b, &a))) return rc;
        if (jinja_truthy(&a)) return jinja_eval(c, s, n->a, out);
        if (n->c) return jinja_eval(c, s, n->c, out);
        *out = jinja_undef_msg(c, false,
                               "the inline if-expression evaluated to false and no "
                               "else section was defined.");
        return 0;
    default: break;
    }
    return jinja_fail(c, ERR_INVAL, "this expression cannot be evaluated here");
}

/* ---------------------------------------------------------------- statements */

static int assign(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *target,
                  const struct jinja_val *v)
{
    if (target->kind == JN_NAME) return scope_set(c, s, target->name, *v);
    if (target->kind == JN_NSREF) {
        const struct jinja_val *ns = scope_find(s, target->name);
        if (!ns || ns->type != JV_NS)
            return jinja_fail(c, ERR_INVAL, "cannot assign attribute on non-namespace object");
        if (jinja_dict_set(&c->arena, ns->d, jinja_str(target->attr.p, target->attr.len), *v))
            return jinja_fail_alloc(c);
        return 0;
    }
    /* tuple unpacking */
    if (v->type == JV_NONE || v->type == JV_BOOL || v->type == JV_INT || v->type == JV_FLOAT ||
        v->type == JV_FUNC || v->type == JV_NS)
        return jinja_fail(c, ERR_INVAL, "cannot unpack non-iterable %s object", jinja_type_name(v));
    struct jinja_list *items;
    int rc = jinja_iterate(c, v, &items);
    if (rc) return rc;
    if (items->n < target->l0.n)
        return jinja_fail(c, ERR_INVAL, "not enough values to unpack (expected %u, got %zu)",
                          target->l0.n, items->n);
    if (items->n > target->l0.n)
        return jinja_fail(c, ERR_INVAL, "too many values to unpack (expected %u)", target->l0.n);
    for (uint32_t i = 0; i < target->l0.n; i++)
        if ((rc = assign(c, s, target->l0.v[i], &items->v[i]))) return rc;
    return 0;
}

static int exec_for(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                    const struct jinja_val *iter, int depth)
{
    struct jinja_list *items;
    int rc = jinja_iterate(c, iter, &items);
    if (rc) return rc;
    if (n->c) { /* for x in seq if cond: the loop sees only the items that pass */
        struct jinja_list *kept = jinja_list_new(c, 0);
        if (!kept) return jinja_fail_alloc(c);
        for (size_t i = 0; i < items->n; i++) {
            struct jinja_scope *ts = scope_new(c, s);
            struct jinja_val cond;
            if (!ts) return jinja_fail_alloc(c);
            if ((rc = assign(c, ts, n->a, &items->v[i])) || (rc = jinja_eval(c, ts, n->c, &cond)))
                return rc;
            if (jinja_truthy(&cond) && (rc = jinja_list_push(c, kept, items->v[i]))) return rc;
        }
        items = kept;
    }
    if (items->n == 0) {
        struct jinja_scope *es = scope_new(c, s);
        if (!es) return jinja_fail_alloc(c);
        return exec_body(c, es, &n->l1);
    }
    struct jinja_loop *loop = jinja_alloc(&c->arena, sizeof(*loop));
    if (!loop) return jinja_fail_alloc(c);
    *loop = (struct jinja_loop){
        .length = (int64_t)items->n, .depth = depth, .items = items, .node = n, .scope = s};
    struct jinja_val lv = {.type = JV_LOOP, .loop = loop};
    for (size_t i = 0; i < items->n; i++) {
        loop->index0 = (int64_t)i;
        struct jinja_scope *is = scope_new(c, s);
        if (!is) return jinja_fail_alloc(c);
        if ((rc = jinja_step(c, 1)) || (rc = assign(c, is, n->a, &items->v[i])) ||
            (rc = scope_set(c, is, (struct jinja_sv){"loop", 4}, lv)))
            return rc;
        rc = exec_body(c, is, &n->l0);
        if (rc == JX_BREAK) break;
        if (rc == JX_CONTINUE) continue;
        if (rc) return rc;
    }
    return 0;
}

static int exec_node(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n)
{
    int rc = jinja_step(c, 1);
    if (rc) return rc;
    c->line = n->line;
    struct jinja_val v;
    switch (n->kind) {
    case JN_OUTPUT:
        for (uint32_t i = 0; i < n->l0.n; i++) {
            const struct jinja_node *e = n->l0.v[i];
            if (e->kind == JN_CONST && e->val.type == JV_STR) {
                rc = emit(c, e->val.s, e->val.len);
            } else {
                if ((rc = jinja_eval(c, s, e, &v))) return rc;
                if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) v = jinja_undef();
                rc = emit_val(c, &v);
            }
            if (rc) return rc;
        }
        return 0;
    case JN_IF:
        if ((rc = jinja_eval(c, s, n->a, &v))) return rc;
        return exec_body(c, s, jinja_truthy(&v) ? &n->l0 : &n->l1);
    case JN_FOR:
        if ((rc = jinja_eval(c, s, n->b, &v))) return rc;
        return exec_for(c, s, n, &v, 1);
    case JN_SET:
        if ((rc = jinja_eval(c, s, n->b, &v))) return rc;
        return assign(c, s, n->a, &v);
    case JN_SETBLOCK: {
        struct jinja_scope *bs = scope_new(c, s);
        if (!bs) return jinja_fail_alloc(c);
        if ((rc = capture(c, bs, &n->l0, &v))) return rc;
        if (n->c && (rc = eval_filter(c, bs, n->c, &v, &v))) return rc;
        return assign(c, s, n->a, &v);
    }
    case JN_FILTERBLOCK: {
        struct jinja_scope *bs = scope_new(c, s);
        if (!bs) return jinja_fail_alloc(c);
        if ((rc = capture(c, bs, &n->l0, &v)) || (rc = eval_filter(c, bs, n->c, &v, &v))) return rc;
        return emit_val(c, &v);
    }
    case JN_MACRO: {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_MACRO;
        f->name = n->name;
        f->mn = n;
        f->scope = s;
        return scope_set(c, s, n->name, (struct jinja_val){.type = JV_FUNC, .fn = f});
    }
    case JN_CALLBLOCK: {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        struct args a;
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_MACRO;
        f->name = (struct jinja_sv){"caller", 6};
        f->mn = n;
        f->scope = s;
        const struct jinja_node *call = n->a;
        struct jinja_val callee;
        if ((rc = jinja_eval(c, s, call->a, &callee)) || (rc = args_eval(c, s, call, &a)))
            return rc;
        if (a.n_kw == MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
        a.kw[a.n_kw] = (struct jinja_sv){"caller", 6};
        a.kwv[a.n_kw++] = (struct jinja_val){.type = JV_FUNC, .fn = f};
        if ((rc = jinja_call(c, &callee, a.pos, a.n_pos, a.kw, a.kwv, a.n_kw, &v))) return rc;
        return emit_val(c, &v);
    }
    case JN_WITH: {
        struct jinja_scope *ws = scope_new(c, s);
        if (!ws) return jinja_fail_alloc(c);
        for (uint32_t i = 0; i < n->l1.n; i++)
            if ((rc = jinja_eval(c, s, n->l2.v[i], &v)) || (rc = assign(c, ws, n->l1.v[i], &v)))
                return rc;
        return exec_body(c, ws, &n->l0);
    }
    case JN_BREAK: return JX_BREAK;
    case JN_CONTINUE: return JX_CONTINUE;
    case JN_SCOPE: return exec_body(c, s, &n->l0);
    default: break;
    }
    return jinja_fail(c, ERR_INVAL, "this statement cannot run here");
}

static int exec_body(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_nodes *body)
{
    for (uint32_t i = 0; i < body->n; i++) {
        int rc = exec_node(c, s, body->v[i]);
        if (rc) return rc;
    }
    return 0;
}

int jinja_exec_template(struct jinja_ctx *c, struct jinja_scope *root)
{
    struct jinja_scope *top = scope_new(c, root);
    if (!top) return jinja_fail_alloc(c);
    int rc = exec_body(c, top, &c->t->body);
    return rc > 0 ? 0 : rc;
}
