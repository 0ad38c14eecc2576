/* Jinja evaluator: expressions over values with jinja2's semantics. Lookups fall through the
 * scopes to the render variables and then the globals; operators follow Python (int overflow is
 * an error, '+' with a Markup escapes the other side, % formats strings); calls go to macros
 * (jinja_exec.c), globals, filters and methods. Attribute and item access is in jinja_access.c.
 * Every node counts against the step limit. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

struct jinja_scope *jinja_scope_new(struct jinja_ctx *c, struct jinja_scope *parent)
{
    struct jinja_scope *s = jinja_alloc(&c->arena, sizeof(*s));
    if (!s) return NULL;
    memset(s, 0, sizeof(*s));
    s->parent = parent;
    return s;
}

int jinja_scope_set(struct jinja_ctx *c, struct jinja_scope *s, struct jinja_sv name,
                    struct jinja_val v)
{
    if (jinja_dict_set(&c->arena, &s->vars, jinja_str(name.p, name.len), v))
        return jinja_fail_alloc(c);
    return 0;
}

struct jinja_val *jinja_scope_find(struct jinja_scope *s, struct jinja_sv name)
{
    for (; s; s = s->parent) {
        struct jinja_val *v = jinja_dict_get_str(&s->vars, name.p, name.len);
        if (v) return v;
    }
    return NULL;
}

int jinja_emit(struct jinja_ctx *c, const char *p, size_t n)
{
    if (c->sb) return jinja_sb_put(c, c->sb, p, n);
    int rc = buf_append(c->out, p, n);
    if (rc == ERR_TOO_BIG)
        return jinja_fail(c, ERR_TOO_BIG, "the rendered text is longer than %zu bytes",
                          c->out->max);
    if (rc) return jinja_fail(c, rc, "out of memory");
    return 0;
}

int jinja_emit_val(struct jinja_ctx *c, const struct jinja_val *v)
{
    if (v->type == JV_STR) return jinja_emit(c, v->s, v->len);
    if (v->type == JV_UNDEF) return 0;
    struct jinja_sb sb = {0};
    int rc = jinja_to_str(c, &sb, v);
    return rc ? rc : jinja_emit(c, sb.p, sb.len);
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

int jinja_args_eval(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                    struct jinja_args *a)
{
    a->n_pos = a->n_kw = 0;
    for (uint32_t i = 0; i < n->l0.n; i++) {
        if (a->n_pos == JINJA_MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
        int rc = jinja_eval(c, s, n->l0.v[i], &a->pos[a->n_pos++]);
        if (rc) return rc;
    }
    if (n->c) { /* *args */
        struct jinja_val v;
        struct jinja_list *l;
        int rc = jinja_eval(c, s, n->c, &v);
        if (rc || (rc = jinja_iterate(c, &v, &l))) return rc;
        for (size_t i = 0; i < l->n; i++) {
            if (a->n_pos == JINJA_MAX_ARGS)
                return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
            a->pos[a->n_pos++] = l->v[i];
        }
    }
    for (uint32_t i = 0; i < n->l1.n; i++) {
        if (a->n_kw == JINJA_MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
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
            if (a->n_kw == JINJA_MAX_ARGS)
                return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
            a->kw[a->n_kw] = jinja_sv_of(&v.d->v[i].k);
            a->kwv[a->n_kw++] = v.d->v[i].v;
        }
    }
    return 0;
}

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
        int rc = jinja_exec_for(c, l->scope, l->node, &args[0], l->depth + 1);
        c->depth--;
        c->sb = saved;
        if (rc) return rc;
        *out = jinja_sb_val(&sb);
        return 0;
    }
    if (fn->type != JV_FUNC)
        return jinja_fail(c, ERR_INVAL, "'%s' object is not callable", jinja_type_name(fn));
    switch (fn->fn->kind) {
    case JF_MACRO: return jinja_macro_call(c, fn->fn, args, n_args, kw, kwv, n_kw, out);
    case JF_GLOBAL: return jinja_global_call(c, fn->fn->id, args, n_args, kw, kwv, n_kw, out);
    default: return jinja_method_call(c, fn->fn, args, n_args, kw, kwv, n_kw, out);
    }
}

/* ---------------------------------------------------------------- expressions */

int jinja_eval_filter(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                      const struct jinja_val *block_text, struct jinja_val *out)
{
    struct jinja_val in;
    int rc;
    if (n->a && n->a->kind == JN_FILTER)
        rc = jinja_eval_filter(c, s, n->a, block_text, &in);
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
    struct jinja_args a;
    if ((rc = jinja_args_eval(c, s, n, &a))) return rc;
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
    const struct jinja_val *v = jinja_scope_find(s, n->name);
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
            return jinja_get_slice(c, &a, parts, given, out);
        }
        if ((rc = jinja_eval(c, s, n->b, &b))) return rc;
        c->line = n->line;
        return jinja_getitem(c, &a, &b, out);
    case JN_CALL: {
        struct jinja_args args;
        if ((rc = jinja_eval(c, s, n->a, &a)) || (rc = jinja_args_eval(c, s, n, &args))) return rc;
        c->line = n->line;
        return jinja_call(c, &a, args.pos, args.n_pos, args.kw, args.kwv, args.n_kw, out);
    }
    case JN_FILTER: return jinja_eval_filter(c, s, n, NULL, out);
    case JN_TEST: {
        struct jinja_args args;
        bool r;
        if ((rc = jinja_eval(c, s, n->a, &a))) return rc;
        if (n->id < 0)
            return jinja_fail(c, n->id == -2 ? ERR_UNSUPPORTED : ERR_INVAL,
                              n->id == -2 ? "the test '%.*s' is not supported"
                                          : "no test named '%.*s'",
                              (int)n->name.len, n->name.p);
        if ((rc = jinja_args_eval(c, s, n, &args)) ||
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
