/* Jinja statements: output, if, for (loop variable, else, filters, recursion, break/continue),
 * set (names, tuples, namespace attributes, blocks), macros and call blocks with jinja2's argument
 * rules, filter and with blocks. Scoping is what jinja2's compiled code does: every for-loop
 * iteration, macro call and with block gets a fresh scope whose parent is the scope it appears in
 * (so `set` inside a loop never leaks out, which is why templates use namespace()); if blocks
 * share their parent's. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"

#include <string.h>

#define JX_BREAK    1
#define JX_CONTINUE 2

static int exec_body(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_nodes *body);

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

/* A macro call with jinja2's Macro.__call__ rules for positional, keyword, default, varargs,
 * kwargs and caller arguments. */
int jinja_macro_call(struct jinja_ctx *c, const struct jinja_func *fn, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, struct jinja_val *out)
{
    const struct jinja_node *m = fn->mn;
    const char *name = m->kind == JN_MACRO ? "macro" : "call block";
    size_t n_params = m->n_kw, n_defaults = m->l1.n;
    if (c->depth >= c->max_depth)
        return jinja_fail(c, ERR_RANGE, "macro calls nested deeper than %d", c->max_depth);
    struct jinja_scope *s = jinja_scope_new(c, fn->scope);
    if (!s) return jinja_fail_alloc(c);
    bool used[JINJA_MAX_ARGS] = {false};
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
        if ((rc = jinja_scope_set(c, s, m->kw[i], v))) return rc;
    }
    if (m->flags & JN_F_USES_CALLER) {
        struct jinja_val caller = jinja_undef_msg(c, false, "No caller defined");
        for (size_t k = 0; k < n_kw; k++)
            if (!used[k] && jinja_sv_eq(kw[k], "caller")) {
                used[k] = true;
                caller = kwv[k];
            }
        if ((rc = jinja_scope_set(c, s, (struct jinja_sv){"caller", 6}, caller))) return rc;
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
        (rc = jinja_scope_set(c, s, (struct jinja_sv){"kwargs", 6},
                              (struct jinja_val){.type = JV_DICT, .d = extra})))
        return rc;
    if (m->flags & JN_F_USES_VARARGS) {
        struct jinja_list *l = jinja_list_new(c, 0);
        if (!l) return jinja_fail_alloc(c);
        for (size_t i = n_params; i < n_args; i++)
            if ((rc = jinja_list_push(c, l, args[i]))) return rc;
        if ((rc = jinja_scope_set(c, s, (struct jinja_sv){"varargs", 7},
                                  jinja_list_val(l, JV_TUPLE))))
            return rc;
    }
    c->depth++;
    rc = capture(c, s, &m->l0, out);
    c->depth--;
    return rc;
}

/* ---------------------------------------------------------------- statements */

static int assign(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *target,
                  const struct jinja_val *v)
{
    if (target->kind == JN_NAME) return jinja_scope_set(c, s, target->name, *v);
    if (target->kind == JN_NSREF) {
        const struct jinja_val *ns = jinja_scope_find(s, target->name);
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

int jinja_exec_for(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                   const struct jinja_val *iter, int depth)
{
    struct jinja_list *items;
    int rc = jinja_iterate(c, iter, &items);
    if (rc) return rc;
    if (n->c) { /* for x in seq if cond: the loop sees only the items that pass */
        struct jinja_list *kept = jinja_list_new(c, 0);
        if (!kept) return jinja_fail_alloc(c);
        for (size_t i = 0; i < items->n; i++) {
            struct jinja_scope *ts = jinja_scope_new(c, s);
            struct jinja_val cond;
            if (!ts) return jinja_fail_alloc(c);
            if ((rc = assign(c, ts, n->a, &items->v[i])) || (rc = jinja_eval(c, ts, n->c, &cond)))
                return rc;
            if (jinja_truthy(&cond) && (rc = jinja_list_push(c, kept, items->v[i]))) return rc;
        }
        items = kept;
    }
    if (items->n == 0) {
        struct jinja_scope *es = jinja_scope_new(c, s);
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
        struct jinja_scope *is = jinja_scope_new(c, s);
        if (!is) return jinja_fail_alloc(c);
        if ((rc = jinja_step(c, 1)) || (rc = assign(c, is, n->a, &items->v[i])) ||
            (rc = jinja_scope_set(c, is, (struct jinja_sv){"loop", 4}, lv)))
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
                rc = jinja_emit(c, e->val.s, e->val.len);
            } else {
                if ((rc = jinja_eval(c, s, e, &v))) return rc;
                if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) v = jinja_undef();
                rc = jinja_emit_val(c, &v);
            }
            if (rc) return rc;
        }
        return 0;
    case JN_IF:
        if ((rc = jinja_eval(c, s, n->a, &v))) return rc;
        return exec_body(c, s, jinja_truthy(&v) ? &n->l0 : &n->l1);
    case JN_FOR:
        if ((rc = jinja_eval(c, s, n->b, &v))) return rc;
        return jinja_exec_for(c, s, n, &v, 1);
    case JN_SET:
        if ((rc = jinja_eval(c, s, n->b, &v))) return rc;
        return assign(c, s, n->a, &v);
    case JN_SETBLOCK: {
        struct jinja_scope *bs = jinja_scope_new(c, s);
        if (!bs) return jinja_fail_alloc(c);
        if ((rc = capture(c, bs, &n->l0, &v))) return rc;
        if (n->c && (rc = jinja_eval_filter(c, bs, n->c, &v, &v))) return rc;
        return assign(c, s, n->a, &v);
    }
    case JN_FILTERBLOCK: {
        struct jinja_scope *bs = jinja_scope_new(c, s);
        if (!bs) return jinja_fail_alloc(c);
        if ((rc = capture(c, bs, &n->l0, &v)) || (rc = jinja_eval_filter(c, bs, n->c, &v, &v)))
            return rc;
        return jinja_emit_val(c, &v);
    }
    case JN_MACRO: {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_MACRO;
        f->name = n->name;
        f->mn = n;
        f->scope = s;
        return jinja_scope_set(c, s, n->name, (struct jinja_val){.type = JV_FUNC, .fn = f});
    }
    case JN_CALLBLOCK: {
        struct jinja_func *f = jinja_alloc(&c->arena, sizeof(*f));
        struct jinja_args a;
        if (!f) return jinja_fail_alloc(c);
        memset(f, 0, sizeof(*f));
        f->kind = JF_MACRO;
        f->name = (struct jinja_sv){"caller", 6};
        f->mn = n;
        f->scope = s;
        const struct jinja_node *call = n->a;
        struct jinja_val callee;
        if ((rc = jinja_eval(c, s, call->a, &callee)) || (rc = jinja_args_eval(c, s, call, &a)))
            return rc;
        if (a.n_kw == JINJA_MAX_ARGS) return jinja_fail(c, ERR_UNSUPPORTED, "too many arguments");
        a.kw[a.n_kw] = (struct jinja_sv){"caller", 6};
        a.kwv[a.n_kw++] = (struct jinja_val){.type = JV_FUNC, .fn = f};
        if ((rc = jinja_call(c, &callee, a.pos, a.n_pos, a.kw, a.kwv, a.n_kw, &v))) return rc;
        return jinja_emit_val(c, &v);
    }
    case JN_WITH: {
        struct jinja_scope *ws = jinja_scope_new(c, s);
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
    struct jinja_scope *top = jinja_scope_new(c, root);
    if (!top) return jinja_fail_alloc(c);
    int rc = exec_body(c, top, &c->t->body);
    return rc > 0 ? 0 : rc;
}
