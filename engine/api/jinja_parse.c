/* Jinja parser: tokens -> syntax tree, a recursive descent that follows jinja2's Parser function
 * by function (parse_tuple, parse_condexpr ... parse_unary, parse_postfix, parse_filter_expr), so
 * precedence and the odd corners (filters bind tighter than '-', `is` tests take one bare
 * argument, `if` tests are tuples without conditional expressions) come out the same. Filters and
 * tests are resolved here: an unknown one is an error now, as jinja2's compiler reports it, except
 * inside an if or a conditional expression, where jinja2 defers the error to when it runs.
 * Nesting is bounded so a hostile template cannot overflow the stack. One file although it is
 * long: the statement and expression grammars share the token cursor and the node builders, as
 * jinja2's parser.py does. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PARSE_MAX_DEPTH 200

struct parser {
    struct jinja_template *t;
    const struct jinja_tok *tok;
    size_t n, pos;
    int depth;
    int loops; /* enclosing for bodies in the current frame (break/continue) */
    char *err;
    size_t errlen;
    int rc;
};

static int pfail(struct parser *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int pfail(struct parser *p, int code, const char *fmt, ...)
{
    if (p->rc) return p->rc;
    if (p->err && p->errlen) {
        char msg[200];
        va_list ap;
        va_start(ap, fmt);
        err_vfmt(msg, sizeof(msg), code, fmt, ap);
        va_end(ap);
        snprintf(p->err, p->errlen, "line %d: %s", p->tok[p->pos].line, msg);
    }
    p->rc = code;
    return code;
}

static const struct jinja_tok *cur(const struct parser *p)
{
    return &p->tok[p->pos];
}

static const struct jinja_tok *peek(const struct parser *p)
{
    return &p->tok[p->pos + 1 < p->n ? p->pos + 1 : p->pos];
}

static void advance(struct parser *p)
{
    if (p->pos + 1 < p->n) p->pos++;
}

static bool is_op(const struct jinja_tok *t, char op)
{
    return t->type == JT_OP && t->op == (uint8_t)op;
}

static bool is_name(const struct jinja_tok *t, const char *name)
{
    size_t n = strlen(name);
    return t->type == JT_NAME && t->text.len == n && memcmp(t->text.p, name, n) == 0;
}

static bool skip_op(struct parser *p, char op)
{
    if (!is_op(cur(p), op)) return false;
    advance(p);
    return true;
}

static bool skip_name(struct parser *p, const char *name)
{
    if (!is_name(cur(p), name)) return false;
    advance(p);
    return true;
}

static const char *describe(const struct jinja_tok *t, char *buf, size_t n)
{
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_BLOCK_END: return "end of statement block";
    case JT_NAME:
        snprintf(buf, n, "%.*s", (int)(t->text.len > 40 ? 40 : t->text.len), t->text.p);
        return buf;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    default: break;
    }
    static const char *const ops[] = {"//", "**", "==", "=", "!=", "<=", ">="};
    static const char codes[] = {JINJA_OP_FLOORDIV, JINJA_OP_POW, JINJA_OP_EQ, JINJA_OP_ASSIGN,
                                 JINJA_OP_NE,       JINJA_OP_LE,  JINJA_OP_GE};
    for (size_t i = 0; i < sizeof(codes); i++)
        if (t->op == (uint8_t)codes[i]) return ops[i];
    snprintf(buf, n, "%c", t->op);
    return buf;
}

static int expect_op(struct parser *p, char op, const char *what)
{
    if (skip_op(p, op)) return 0;
    char b[64];
    return pfail(p, ERR_PARSE, "expected '%s', got '%s'", what, describe(cur(p), b, sizeof(b)));
}

static int expect_type(struct parser *p, enum jinja_tok_type type, const char *what)
{
    if (cur(p)->type == type) {
        advance(p);
        return 0;
    }
    char b[64];
    return pfail(p, ERR_PARSE, "expected %s, got '%s'", what, describe(cur(p), b, sizeof(b)));
}

/* The end of the template inside a block: name the tags that would close it. */
static int fail_eof(struct parser *p, const char *const *end)
{
    char want[128] = "";
    size_t o = 0;
    for (size_t i = 0; end[i] && o < sizeof(want); i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "%s'%s'", i ? " or " : "", end[i]);
    return pfail(p, ERR_PARSE, "unexpected end of template, expected %s", want);
}

static struct jinja_node *node_new(struct parser *p, enum jinja_node_kind kind, int line)
{
    struct jinja_node *n = jinja_alloc(&p->t->arena, sizeof(*n));
    if (!n) {
        pfail(p, ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

/* A growable node list, copied into the arena when complete. */
struct vec {
    struct jinja_node **v;
    uint32_t n, cap;
};

static int vec_push(struct parser *p, struct vec *v, struct jinja_node *x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        struct jinja_node **nv = jinja_alloc(&p->t->arena, cap * sizeof(*nv));
        if (!nv) return pfail(p, ERR_NOMEM, "out of memory");
        if (v->n) memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static struct jinja_nodes vec_done(const struct vec *v)
{
    return (struct jinja_nodes){v->v, v->n};
}

struct names {
    struct jinja_sv *v;
    uint32_t n, cap;
};

static int names_push(struct parser *p, struct names *v, struct jinja_sv x)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        struct jinja_sv *nv = jinja_alloc(&p->t->arena, cap * sizeof(*nv));
        if (!nv) return pfail(p, ERR_NOMEM, "out of memory");
        if (v->n) memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int enter(struct parser *p)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        return pfail(p, ERR_PARSE, "template nested too deeply (over %d levels)", PARSE_MAX_DEPTH);
    return 0;
}

static struct jinja_node *parse_expression(struct parser *p, bool with_condexpr);
static struct jinja_node *parse_tuple(struct parser *p, bool simplified, bool with_condexpr,
                                      const char *extra_end, bool explicit_parens,
                                      bool with_namespace);
static struct jinja_node *parse_unary(struct parser *p, bool with_filter);
static struct jinja_node *parse_primary(struct parser *p, bool with_namespace);
static struct jinja_node *parse_postfix(struct parser *p, struct jinja_node *node);
static struct jinja_node *parse_filter(struct parser *p, struct jinja_node *node,
                                       bool start_inline);
static int subparse(struct parser *p, const char *const *end, struct vec *body);

/* Call arguments: positional, name=value, *args, **kwargs (jinja2's parse_call_args). */
static int parse_call_args(struct parser *p, struct jinja_node *n)
{
    struct vec args = {0}, kwv = {0};
    struct names kw = {0};
    bool require_comma = false;
    if (expect_op(p, '(', "(")) return p->rc;
    while (!is_op(cur(p), ')')) {
        if (require_comma) {
            if (expect_op(p, ',', ",")) return p->rc;
            if (is_op(cur(p), ')')) break;
        }
        if (is_op(cur(p), '*') || is_op(cur(p), JINJA_OP_POW)) {
            bool star = is_op(cur(p), '*');
            if ((star && (n->c || n->d)) || (!star && n->d))
                return pfail(p, ERR_PARSE, "invalid syntax for function call expression");
            advance(p);
            struct jinja_node *e = parse_expression(p, true);
            if (!e) return p->rc;
            if (star)
                n->c = e;
            else
                n->d = e;
            n->flags |= JN_F_DYN_CALL_ARGS;
        } else if (cur(p)->type == JT_NAME && is_op(peek(p), JINJA_OP_ASSIGN)) {
            if (n->d) return pfail(p, ERR_PARSE, "invalid syntax for function call expression");
            struct jinja_sv key = cur(p)->text;
            advance(p);
            advance(p);
            struct jinja_node *e = parse_expression(p, true);
            if (!e || names_push(p, &kw, key) || vec_push(p, &kwv, e)) return p->rc;
        } else {
            if (n->c || n->d || kw.n)
                return pfail(p, ERR_PARSE, "invalid syntax for function call expression");
            struct jinja_node *e = parse_expression(p, true);
            if (!e || vec_push(p, &args, e)) return p->rc;
        }
        require_comma = true;
    }
    if (expect_op(p, ')', ")")) return p->rc;
    n->l0 = vec_done(&args);
    n->l1 = vec_done(&kwv);
    n->kw = kw.v;
    n->n_kw = kw.n;
    return 0;
}

static struct jinja_node *parse_call(struct parser *p, struct jinja_node *callee)
{
    struct jinja_node *n = node_new(p, JN_CALL, cur(p)->line);
    if (!n) return NULL;
    n->a = callee;
    return parse_call_args(p, n) ? NULL : n;
}

/* A dotted name after '|' or 'is'. */
static int parse_dotted(struct parser *p, struct jinja_sv *out)
{
    if (cur(p)->type != JT_NAME) {
        char b[64];
        return pfail(p, ERR_PARSE, "expected a name, got '%s'", describe(cur(p), b, sizeof(b)));
    }
    const char *start = cur(p)->text.p;
    const char *end = start + cur(p)->text.len;
    advance(p);
    while (is_op(cur(p), '.') && peek(p)->type == JT_NAME) {
        advance(p);
        end = cur(p)->text.p + cur(p)->text.len;
        advance(p);
    }
    *out = (struct jinja_sv){start, (uint32_t)(end - start)};
    return 0;
}

/* Looks a filter or test up (id -1: unknown, -2: not supported here); check_tree reports the
 * failures where jinja2's compiler would. */
static void resolve(struct jinja_node *n, bool is_filter)
{
    n->id = is_filter ? jinja_filter_find(n->name) : jinja_test_find(n->name);
}

static struct jinja_node *parse_filter(struct parser *p, struct jinja_node *node, bool start_inline)
{
    while (is_op(cur(p), '|') || start_inline) {
        if (!start_inline) advance(p);
        struct jinja_node *f = node_new(p, JN_FILTER, cur(p)->line);
        if (!f || parse_dotted(p, &f->name)) return NULL;
        f->a = node;
        if (is_op(cur(p), '(') && parse_call_args(p, f)) return NULL;
        resolve(f, true);
        node = f;
        start_inline = false;
    }
    return node;
}

static struct jinja_node *parse_test(struct parser *p, struct jinja_node *node)
{
    int line = cur(p)->line;
    advance(p); /* is */
    bool negated = skip_name(p, "not");
    struct jinja_node *t = node_new(p, JN_TEST, line);
    if (!t || parse_dotted(p, &t->name)) return NULL;
    t->a = node;
    const struct jinja_tok *c = cur(p);
    if (is_op(c, '(')) {
        if (parse_call_args(p, t)) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || is_op(c, '[') || is_op(c, '{')) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            pfail(p, ERR_PARSE, "you cannot chain multiple tests with is");
            return NULL;
        }
        struct jinja_node *arg = parse_primary(p, false);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        struct vec args = {0};
        if (vec_push(p, &args, arg)) return NULL;
        t->l0 = vec_done(&args);
    }
    resolve(t, false);
    if (!negated) return t;
    struct jinja_node *n = node_new(p, JN_NOT, line);
    if (n) n->a = t;
    return n;
}

static struct jinja_node *parse_subscribed(struct parser *p)
{
    int line = cur(p)->line;
    struct jinja_node *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), ':')) {
        advance(p);
    } else {
        struct jinja_node *e = parse_expression(p, true);
        if (!e) return NULL;
        if (!is_op(cur(p), ':')) return e;
        advance(p);
        parts[0] = e;
    }
    if (!is_op(cur(p), ':') && !is_op(cur(p), ']') && !is_op(cur(p), ',')) {
        if (!(parts[1] = parse_expression(p, true))) return NULL;
    }
    if (is_op(cur(p), ':')) {
        advance(p);
        if (!is_op(cur(p), ']') && !is_op(cur(p), ',')) {
            if (!(parts[2] = parse_expression(p, true))) return NULL;
        }
    }
    struct jinja_node *s = node_new(p, JN_SLICE, line);
    if (s) s->a = parts[0], s->b = parts[1], s->c = parts[2];
    return s;
}

static struct jinja_node *parse_subscript(struct parser *p, struct jinja_node *node)
{
    int line = cur(p)->line;
    if (skip_op(p, '.')) {
        const struct jinja_tok *a = cur(p);
        if (a->type == JT_NAME) {
            struct jinja_node *n = node_new(p, JN_GETATTR, line);
            if (!n) return NULL;
            n->a = node;
            n->name = a->text;
            advance(p);
            return n;
        }
        if (a->type != JT_INT) {
            pfail(p, ERR_PARSE, "expected name or number after '.'");
            return NULL;
        }
        struct jinja_node *k = node_new(p, JN_CONST, line), *n = node_new(p, JN_GETITEM, line);
        if (!k || !n) return NULL;
        k->val = jinja_int(a->i);
        advance(p);
        n->a = node;
        n->b = k;
        return n;
    }
    advance(p); /* [ */
    struct vec args = {0};
    while (!is_op(cur(p), ']')) {
        if (args.n && expect_op(p, ',', ",")) return NULL;
        struct jinja_node *e = parse_subscribed(p);
        if (!e || vec_push(p, &args, e)) return NULL;
    }
    if (expect_op(p, ']', "]")) return NULL;
    if (args.n == 0) {
        pfail(p, ERR_PARSE, "expected subscript expression");
        return NULL;
    }
    struct jinja_node *n = node_new(p, JN_GETITEM, line);
    if (!n) return NULL;
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        struct jinja_node *tup = node_new(p, JN_TUPLE, line);
        if (!tup) return NULL;
        tup->l0 = vec_done(&args);
        n->b = tup;
    }
    return n;
}

static struct jinja_node *parse_postfix(struct parser *p, struct jinja_node *node)
{
    while (node) {
        if (is_op(cur(p), '.') || is_op(cur(p), '['))
            node = parse_subscript(p, node);
        else if (is_op(cur(p), '('))
            node = parse_call(p, node);
        else
            break;
    }
    return node;
}

static struct jinja_node *parse_filter_expr(struct parser *p, struct jinja_node *node)
{
    while (node) {
        if (is_op(cur(p), '|'))
            node = parse_filter(p, node, false);
        else if (is_name(cur(p), "is"))
            node = parse_test(p, node);
        else if (is_op(cur(p), '('))
            node = parse_call(p, node);
        else
            break;
    }
    return node;
}

static struct jinja_node *parse_list(struct parser *p)
{
    struct jinja_node *n = node_new(p, JN_LIST, cur(p)->line);
    struct vec items = {0};
    if (!n) return NULL;
    advance(p);
    while (!is_op(cur(p), ']')) {
        if (items.n && expect_op(p, ',', ",")) return NULL;
        if (is_op(cur(p), ']')) break;
        struct jinja_node *e = parse_expression(p, true);
        if (!e || vec_push(p, &items, e)) return NULL;
    }
    if (expect_op(p, ']', "]")) return NULL;
    n->l0 = vec_done(&items);
    return n;
}

static struct jinja_node *parse_dict(struct parser *p)
{
    struct jinja_node *n = node_new(p, JN_DICT, cur(p)->line);
    struct vec keys = {0}, vals = {0};
    if (!n) return NULL;
    advance(p);
    while (!is_op(cur(p), '}')) {
        if (keys.n && expect_op(p, ',', ",")) return NULL;
        if (is_op(cur(p), '}')) break;
        struct jinja_node *k = parse_expression(p, true);
        if (!k || expect_op(p, ':', ":")) return NULL;
        struct jinja_node *v = parse_expression(p, true);
        if (!v || vec_push(p, &keys, k) || vec_push(p, &vals, v)) return NULL;
    }
    if (expect_op(p, '}', "}")) return NULL;
    n->l0 = vec_done(&keys);
    n->l1 = vec_done(&vals);
    return n;
}

static struct jinja_node *parse_primary(struct parser *p, bool with_namespace)
{
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n;
    if (enter(p)) return NULL;
    if (t->type == JT_NAME) {
        advance(p);
        if (!(n = node_new(p, JN_CONST, t->line))) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) {
            n->val = jinja_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            n->val = jinja_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->val = jinja_none();
        } else if (with_namespace && is_op(cur(p), '.')) {
            advance(p);
            if (cur(p)->type != JT_NAME) {
                pfail(p, ERR_PARSE, "expected a name after '.'");
                return NULL;
            }
            n->kind = JN_NSREF;
            n->name = t->text;
            n->attr = cur(p)->text;
            advance(p);
        } else {
            n->kind = JN_NAME;
            n->name = t->text;
        }
    } else if (t->type == JT_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, k = p->pos;
        for (; p->tok[k].type == JT_STRING; k++) total += p->tok[k].text.len;
        char *s = jinja_alloc(&p->t->arena, total + 1);
        if (!s || !(n = node_new(p, JN_CONST, t->line))) {
            pfail(p, ERR_NOMEM, "out of memory");
            return NULL;
        }
        size_t o = 0;
        for (; cur(p)->type == JT_STRING; advance(p)) {
            memcpy(s + o, cur(p)->text.p, cur(p)->text.len);
            o += cur(p)->text.len;
        }
        s[o] = '\0';
        n->val = jinja_str(s, o);
    } else if (t->type == JT_INT || t->type == JT_FLOAT) {
        if (!(n = node_new(p, JN_CONST, t->line))) return NULL;
        n->val = t->type == JT_INT ? jinja_int(t->i) : jinja_float(t->f);
        advance(p);
    } else if (is_op(t, '(')) {
        advance(p);
        n = parse_tuple(p, false, true, NULL, true, false);
        if (!n || expect_op(p, ')', ")")) return NULL;
    } else if (is_op(t, '[')) {
        n = parse_list(p);
    } else if (is_op(t, '{')) {
        n = parse_dict(p);
    } else {
        char b[64];
        pfail(p, ERR_PARSE, "unexpected '%s'", describe(t, b, sizeof(b)));
        return NULL;
    }
    p->depth--;
    return n;
}

static struct jinja_node *parse_unary(struct parser *p, bool with_filter)
{
    const struct jinja_tok *t = cur(p);
    struct jinja_node *n;
    if (enter(p)) return NULL;
    if (is_op(t, '-') || is_op(t, '+')) {
        advance(p);
        if (!(n = node_new(p, is_op(t, '-') ? JN_NEG : JN_POS, t->line))) return NULL;
        if (!(n->a = parse_unary(p, false))) return NULL;
    } else {
        n = parse_primary(p, false);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static struct jinja_node *binop(struct parser *p, struct jinja_node *l, struct jinja_node *r,
                                enum jinja_node_kind kind, char op, int line)
{
    if (!l || !r) return NULL;
    struct jinja_node *n = node_new(p, kind, line);
    if (n) n->a = l, n->b = r, n->op = (uint8_t)op;
    return n;
}

static struct jinja_node *parse_pow(struct parser *p)
{
    struct jinja_node *l = parse_unary(p, true);
    while (l && is_op(cur(p), JINJA_OP_POW)) {
        int line = cur(p)->line;
        advance(p);
        l = binop(p, l, parse_unary(p, true), JN_BINOP, JINJA_OP_POW, line);
    }
    return l;
}

static struct jinja_node *parse_math2(struct parser *p)
{
    struct jinja_node *l = parse_pow(p);
    while (l && (is_op(cur(p), '*') || is_op(cur(p), '/') || is_op(cur(p), JINJA_OP_FLOORDIV) ||
                 is_op(cur(p), '%'))) {
        char op = (char)cur(p)->op;
        int line = cur(p)->line;
        advance(p);
        l = binop(p, l, parse_pow(p), JN_BINOP, op, line);
    }
    return l;
}

static struct jinja_node *parse_concat(struct parser *p)
{
    struct jinja_node *first = parse_math2(p);
    if (!first || !is_op(cur(p), '~')) return first;
    struct jinja_node *n = node_new(p, JN_CONCAT, cur(p)->line);
    struct vec args = {0};
    if (!n || vec_push(p, &args, first)) return NULL;
    while (skip_op(p, '~')) {
        struct jinja_node *e = parse_math2(p);
        if (!e || vec_push(p, &args, e)) return NULL;
    }
    n->l0 = vec_done(&args);
    return n;
}

static struct jinja_node *parse_math1(struct parser *p)
{
    struct jinja_node *l = parse_concat(p);
    while (l && (is_op(cur(p), '+') || is_op(cur(p), '-'))) {
        char op = (char)cur(p)->op;
        int line = cur(p)->line;
        advance(p);
        l = binop(p, l, parse_concat(p), JN_BINOP, op, line);
    }
    return l;
}

static struct jinja_node *parse_compare(struct parser *p)
{
    int line = cur(p)->line;
    struct jinja_node *e = parse_math1(p);
    struct vec ops = {0};
    while (e) {
        const struct jinja_tok *t = cur(p);
        char op;
        if (is_op(t, JINJA_OP_EQ) || is_op(t, JINJA_OP_NE) || is_op(t, '<') ||
            is_op(t, JINJA_OP_LE) || is_op(t, '>') || is_op(t, JINJA_OP_GE)) {
            op = (char)t->op;
            advance(p);
        } else if (is_name(t, "in")) {
            op = 'i';
            advance(p);
        } else if (is_name(t, "not") && is_name(peek(p), "in")) {
            op = 'n';
            advance(p);
            advance(p);
        } else {
            break;
        }
        struct jinja_node *o = node_new(p, JN_OPERAND, t->line);
        if (!o || !(o->a = parse_math1(p)) || vec_push(p, &ops, o)) return NULL;
        o->op = (uint8_t)op;
    }
    if (!e || ops.n == 0) return e;
    struct jinja_node *n = node_new(p, JN_COMPARE, line);
    if (n) n->a = e, n->l0 = vec_done(&ops);
    return n;
}

static struct jinja_node *parse_not(struct parser *p)
{
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        advance(p);
        if (enter(p)) return NULL;
        struct jinja_node *n = node_new(p, JN_NOT, line);
        if (!n || !(n->a = parse_not(p))) return NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static struct jinja_node *parse_and(struct parser *p)
{
    struct jinja_node *l = parse_not(p);
    while (l && is_name(cur(p), "and")) {
        int line = cur(p)->line;
        advance(p);
        l = binop(p, l, parse_not(p), JN_AND, 0, line);
    }
    return l;
}

static struct jinja_node *parse_or(struct parser *p)
{
    struct jinja_node *l = parse_and(p);
    while (l && is_name(cur(p), "or")) {
        int line = cur(p)->line;
        advance(p);
        l = binop(p, l, parse_and(p), JN_OR, 0, line);
    }
    return l;
}

static struct jinja_node *parse_condexpr(struct parser *p)
{
    int line = cur(p)->line;
    struct jinja_node *e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        advance(p);
        struct jinja_node *n = node_new(p, JN_CONDEXPR, line);
        if (!n) return NULL;
        n->a = e1;
        if (!(n->b = parse_or(p))) return NULL;
        if (skip_name(p, "else") && !(n->c = parse_condexpr(p))) return NULL;
        e1 = n;
        line = cur(p)->line;
    }
    return e1;
}

static struct jinja_node *parse_expression(struct parser *p, bool with_condexpr)
{
    if (enter(p)) return NULL;
    struct jinja_node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

static bool is_tuple_end(const struct parser *p, const char *extra_end)
{
    const struct jinja_tok *t = cur(p);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || is_op(t, ')')) return true;
    return extra_end && is_name(t, extra_end);
}

static struct jinja_node *parse_tuple(struct parser *p, bool simplified, bool with_condexpr,
                                      const char *extra_end, bool explicit_parens,
                                      bool with_namespace)
{
    int line = cur(p)->line;
    struct vec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && expect_op(p, ',', ",")) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        struct jinja_node *e =
            simplified ? parse_primary(p, with_namespace) : parse_expression(p, with_condexpr);
        if (!e || vec_push(p, &args, e)) return NULL;
        if (!is_op(cur(p), ',')) break;
        is_tuple = true;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char b[64];
            pfail(p, ERR_PARSE, "expected an expression, got '%s'", describe(cur(p), b, sizeof(b)));
            return NULL;
        }
    }
    struct jinja_node *n = node_new(p, JN_TUPLE, line);
    if (n) n->l0 = vec_done(&args);
    return n;
}

static bool can_assign(const struct jinja_node *n)
{
    if (n->kind == JN_NAME || n->kind == JN_NSREF) return true;
    if (n->kind != JN_TUPLE) return false;
    for (uint32_t i = 0; i < n->l0.n; i++)
        if (!can_assign(n->l0.v[i])) return false;
    return true;
}

static struct jinja_node *parse_assign_target(struct parser *p, const char *extra_end,
                                              bool with_namespace)
{
    struct jinja_node *t = parse_tuple(p, true, true, extra_end, false, with_namespace);
    if (t && !can_assign(t)) {
        pfail(p, ERR_PARSE, "can't assign to this expression");
        return NULL;
    }
    return t;
}

/* Body until one of `end` (NULL-terminated names); the end name stays current unless
 * drop_needle. */
static int parse_statements(struct parser *p, const char *const *end, bool drop_needle,
                            struct jinja_nodes *out)
{
    struct vec body = {0};
    skip_op(p, ':');
    if (expect_type(p, JT_BLOCK_END, "end of statement block")) return p->rc;
    if (subparse(p, end, &body)) return p->rc;
    if (cur(p)->type == JT_EOF) return fail_eof(p, end);
    if (drop_needle) advance(p);
    *out = vec_done(&body);
    return 0;
}

/* Names the body reads before it assigns them (jinja2's find_undeclared), for macros. */
static void scan_names(const struct jinja_node *n, uint16_t *flags, uint16_t *stored);

/* Names an assignment target stores. */
static void scan_stores(const struct jinja_node *t, uint16_t *stored)
{
    if (t && t->kind == JN_TUPLE) {
        for (uint32_t i = 0; i < t->l0.n; i++) scan_stores(t->l0.v[i], stored);
    } else if (t && t->kind == JN_NAME) {
        uint16_t none = 0, flags = 0;
        scan_names(t, &flags, &none);
        *stored |= flags;
    }
}

static void scan_names(const struct jinja_node *n, uint16_t *flags, uint16_t *stored)
{
    if (!n) return;
    if (n->kind == JN_SET || n->kind == JN_SETBLOCK) {
        scan_names(n->b, flags, stored);
        for (uint32_t i = 0; i < n->l0.n; i++) scan_names(n->l0.v[i], flags, stored);
        scan_stores(n->a, stored);
        return;
    }
    if (n->kind == JN_NAME) {
        static const struct {
            const char *name;
            uint16_t flag;
        } special[] = {{"caller", JN_F_USES_CALLER},
                       {"varargs", JN_F_USES_VARARGS},
                       {"kwargs", JN_F_USES_KWARGS}};
        for (size_t i = 0; i < 3; i++) {
            size_t len = strlen(special[i].name);
            if (n->name.len == len && memcmp(n->name.p, special[i].name, len) == 0 &&
                !(*stored & special[i].flag))
                *flags |= special[i].flag;
        }
        return;
    }
    scan_names(n->a, flags, stored);
    scan_names(n->b, flags, stored);
    scan_names(n->c, flags, stored);
    scan_names(n->d, flags, stored);
    const struct jinja_nodes *ls[3] = {&n->l0, &n->l1, &n->l2};
    for (int k = 0; k < 3; k++)
        for (uint32_t i = 0; i < ls[k]->n; i++) scan_names(ls[k]->v[i], flags, stored);
}

/* (name, name=default, ...) of a macro or call block: params in n->kw, defaults in n->l1. */
static int parse_signature(struct parser *p, struct jinja_node *n)
{
    struct names params = {0};
    struct vec defaults = {0};
    if (expect_op(p, '(', "(")) return p->rc;
    while (!is_op(cur(p), ')')) {
        if (params.n && expect_op(p, ',', ",")) return p->rc;
        if (cur(p)->type != JT_NAME) return pfail(p, ERR_PARSE, "expected a parameter name");
        if (names_push(p, &params, cur(p)->text)) return p->rc;
        advance(p);
        if (skip_op(p, JINJA_OP_ASSIGN)) {
            struct jinja_node *e = parse_expression(p, true);
            if (!e || vec_push(p, &defaults, e)) return p->rc;
        } else if (defaults.n) {
            return pfail(p, ERR_PARSE, "non-default argument follows default argument");
        }
    }
    if (expect_op(p, ')', ")")) return p->rc;
    n->kw = params.v;
    n->n_kw = params.n;
    n->l1 = vec_done(&defaults);
    return 0;
}

/* The body of a block that starts a new frame (macro, call, filter, set): a break or continue
 * there cannot reach an enclosing loop. */
static int frame_body(struct parser *p, const char *const *end, struct jinja_nodes *out)
{
    int loops = p->loops;
    p->loops = 0;
    int rc = parse_statements(p, end, true, out);
    p->loops = loops;
    return rc;
}

static struct jinja_node *parse_macro_like(struct parser *p, enum jinja_node_kind kind, int line)
{
    struct jinja_node *n = node_new(p, kind, line);
    if (!n) return NULL;
    if (kind == JN_MACRO) {
        if (cur(p)->type != JT_NAME) {
            pfail(p, ERR_PARSE, "expected a macro name");
            return NULL;
        }
        n->name = cur(p)->text;
        advance(p);
        if (parse_signature(p, n)) return NULL;
    } else if (is_op(cur(p), '(') && parse_signature(p, n)) {
        return NULL;
    }
    if (kind == JN_CALLBLOCK) {
        if (!(n->a = parse_expression(p, true))) return NULL;
        if (n->a->kind != JN_CALL) {
            pfail(p, ERR_PARSE, "expected call");
            return NULL;
        }
    }
    static const char *const end_macro[] = {"endmacro", NULL}, *const end_call[] = {"endcall",
                                                                                    NULL};
    if (frame_body(p, kind == JN_MACRO ? end_macro : end_call, &n->l0)) return NULL;
    uint16_t stored = 0;
    for (uint32_t i = 0; i < n->n_kw; i++) {
        if (n->kw[i].len == 6 && memcmp(n->kw[i].p, "caller", 6) == 0) stored |= JN_F_USES_CALLER;
        if (n->kw[i].len == 7 && memcmp(n->kw[i].p, "varargs", 7) == 0) stored |= JN_F_USES_VARARGS;
        if (n->kw[i].len == 6 && memcmp(n->kw[i].p, "kwargs", 6) == 0) stored |= JN_F_USES_KWARGS;
    }
    for (uint32_t i = 0; i < n->l0.n; i++) scan_names(n->l0.v[i], &n->flags, &stored);
    return n;
}

static struct jinja_node *parse_for(struct parser *p, int line)
{
    static const char *const end_body[] = {"endfor", "else", NULL}, *const end_else[] = {"endfor",
                                                                                         NULL};
    struct jinja_node *n = node_new(p, JN_FOR, line);
    if (!n || !(n->a = parse_assign_target(p, "in", false))) return NULL;
    if (!skip_name(p, "in")) {
        pfail(p, ERR_PARSE, "expected 'in' in a for loop");
        return NULL;
    }
    if (!(n->b = parse_tuple(p, false, false, "recursive", false, false))) return NULL;
    if (skip_name(p, "if") && !(n->c = parse_expression(p, true))) return NULL;
    if (skip_name(p, "recursive")) n->flags |= JN_F_RECURSIVE;
    p->loops++;
    int rc = parse_statements(p, end_body, false, &n->l0);
    p->loops--;
    if (!rc) {
        bool has_else = is_name(cur(p), "else");
        advance(p);
        if (has_else) rc = parse_statements(p, end_else, true, &n->l1);
    }
    return rc ? NULL : n;
}

static struct jinja_node *parse_if(struct parser *p, int line)
{
    static const char *const end_body[] = {"elif", "else", "endif", NULL}, *const end_else[] = {
                                                                               "endif", NULL};
    struct jinja_node *n = node_new(p, JN_IF, line);
    if (!n) return NULL;
    if (!(n->a = parse_tuple(p, false, false, NULL, false, false)) ||
        parse_statements(p, end_body, false, &n->l0))
        return NULL;
    if (is_name(cur(p), "elif")) {
        int eline = cur(p)->line;
        advance(p);
        struct jinja_node *e = parse_if(p, eline); /* consumes through endif */
        struct vec els = {0};
        if (!e || vec_push(p, &els, e)) return NULL;
        n->l1 = vec_done(&els);
        return n;
    }
    bool has_else = is_name(cur(p), "else");
    advance(p);
    if (has_else && parse_statements(p, end_else, true, &n->l1)) return NULL;
    return n;
}

static struct jinja_node *parse_set(struct parser *p, int line)
{
    static const char *const end_set[] = {"endset", NULL};
    struct jinja_node *target = parse_assign_target(p, NULL, true);
    if (!target) return NULL;
    if (skip_op(p, JINJA_OP_ASSIGN)) {
        struct jinja_node *n = node_new(p, JN_SET, line);
        if (!n || !(n->b = parse_tuple(p, false, true, NULL, false, false))) return NULL;
        n->a = target;
        return n;
    }
    struct jinja_node *n = node_new(p, JN_SETBLOCK, line);
    if (!n) return NULL;
    n->a = target;
    if (is_op(cur(p), '|') && !(n->c = parse_filter(p, NULL, false))) return NULL;
    return frame_body(p, end_set, &n->l0) ? NULL : n;
}

static struct jinja_node *parse_with(struct parser *p, int line)
{
    static const char *const end_with[] = {"endwith", NULL};
    struct jinja_node *n = node_new(p, JN_WITH, line);
    struct vec targets = {0}, values = {0};
    if (!n) return NULL;
    while (cur(p)->type != JT_BLOCK_END) {
        if (targets.n && expect_op(p, ',', ",")) return NULL;
        struct jinja_node *t = parse_assign_target(p, NULL, false);
        if (!t || expect_op(p, JINJA_OP_ASSIGN, "=")) return NULL;
        struct jinja_node *v = parse_expression(p, true);
        if (!v || vec_push(p, &targets, t) || vec_push(p, &values, v)) return NULL;
    }
    n->l1 = vec_done(&targets);
    n->l2 = vec_done(&values);
    return parse_statements(p, end_with, true, &n->l0) ? NULL : n;
}

static struct jinja_node *parse_statement(struct parser *p)
{
    const struct jinja_tok *t = cur(p);
    int line = t->line;
    if (t->type != JT_NAME) {
        pfail(p, ERR_PARSE, "tag name expected");
        return NULL;
    }
    if (enter(p)) return NULL;
    struct jinja_node *n = NULL;
    advance(p);
    if (is_name(t, "for")) {
        n = parse_for(p, line);
    } else if (is_name(t, "if")) {
        n = parse_if(p, line);
    } else if (is_name(t, "set")) {
        n = parse_set(p, line);
    } else if (is_name(t, "macro")) {
        n = parse_macro_like(p, JN_MACRO, line);
    } else if (is_name(t, "call")) {
        n = parse_macro_like(p, JN_CALLBLOCK, line);
    } else if (is_name(t, "with")) {
        n = parse_with(p, line);
    } else if (is_name(t, "filter")) {
        static const char *const end_filter[] = {"endfilter", NULL};
        if (!(n = node_new(p, JN_FILTERBLOCK, line)) || !(n->c = parse_filter(p, NULL, true)) ||
            frame_body(p, end_filter, &n->l0))
            n = NULL;
    } else if (is_name(t, "print")) {
        struct vec items = {0};
        if ((n = node_new(p, JN_OUTPUT, line))) {
            while (cur(p)->type != JT_BLOCK_END) {
                if (items.n && expect_op(p, ',', ",")) return NULL;
                struct jinja_node *e = parse_expression(p, true);
                if (!e || vec_push(p, &items, e)) return NULL;
            }
            n->l0 = vec_done(&items);
        }
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (p->loops == 0) {
            pfail(p, ERR_PARSE, "'%.*s' outside of a loop", (int)t->text.len, t->text.p);
            return NULL;
        }
        n = node_new(p, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, line);
    } else if (is_name(t, "generation")) { /* transformers' AssistantTracker: renders the body */
        static const char *const end_gen[] = {"endgeneration", NULL};
        if ((n = node_new(p, JN_SCOPE, line)) && parse_statements(p, end_gen, true, &n->l0))
            n = NULL;
    } else if (is_name(t, "include") || is_name(t, "import") || is_name(t, "from") ||
               is_name(t, "extends") || is_name(t, "block") || is_name(t, "autoescape")) {
        p->pos--;
        pfail(p, ERR_UNSUPPORTED, "the '%.*s' tag is not supported", (int)t->text.len, t->text.p);
        return NULL;
    } else {
        p->pos--;
        pfail(p, ERR_PARSE, "unknown tag '%.*s'", (int)t->text.len, t->text.p);
        return NULL;
    }
    if (n) p->depth--;
    return n;
}

static bool is_end(const struct parser *p, const char *const *end)
{
    for (; end && *end; end++)
        if (is_name(cur(p), *end)) return true;
    return false;
}

static int subparse(struct parser *p, const char *const *end, struct vec *body)
{
    struct jinja_node *out = NULL; /* the Output node collecting data and expressions */
    struct vec items = {0};
    for (;;) {
        const struct jinja_tok *t = cur(p);
        if (t->type == JT_EOF) break;
        if (t->type == JT_DATA || t->type == JT_VAR_BEGIN) {
            if (!out) {
                if (!(out = node_new(p, JN_OUTPUT, t->line)) || vec_push(p, body, out))
                    return p->rc;
                items = (struct vec){0};
            }
            struct jinja_node *e;
            if (t->type == JT_DATA) {
                if (!(e = node_new(p, JN_CONST, t->line))) return p->rc;
                e->val = jinja_str(t->text.p, t->text.len);
                advance(p);
            } else {
                advance(p);
                e = parse_tuple(p, false, true, NULL, false, false);
                if (!e || expect_type(p, JT_VAR_END, "end of print statement")) return p->rc;
            }
            if (vec_push(p, &items, e)) return p->rc;
            out->l0 = vec_done(&items);
            continue;
        }
        if (t->type != JT_BLOCK_BEGIN) {
            char b[64];
            return pfail(p, ERR_PARSE, "unexpected '%s'", describe(t, b, sizeof(b)));
        }
        out = NULL;
        advance(p);
        if (is_end(p, end)) return 0;
        struct jinja_node *s = parse_statement(p);
        if (!s || vec_push(p, body, s)) return p->rc ? p->rc : ERR_PARSE;
        if (expect_type(p, JT_BLOCK_END, "end of statement block")) return p->rc;
    }
    return end ? fail_eof(p, end) : 0;
}

/* Whether a subtree loops over `x.content` / `x['content']`. */
static bool loops_over_content(const struct jinja_node *n)
{
    if (!n) return false;
    if (n->kind == JN_FOR) {
        const struct jinja_node *it = n->b;
        while (it && it->kind == JN_FILTER) it = it->a;
        if (it && it->kind == JN_GETATTR && it->name.len == 7 &&
            memcmp(it->name.p, "content", 7) == 0)
            return true;
        if (it && it->kind == JN_GETITEM && it->b && it->b->kind == JN_CONST &&
            it->b->val.type == JV_STR && it->b->val.len == 7 &&
            memcmp(it->b->val.s, "content", 7) == 0)
            return true;
    }
    if (loops_over_content(n->a) || loops_over_content(n->b) || loops_over_content(n->c) ||
        loops_over_content(n->d))
        return true;
    const struct jinja_nodes *ls[3] = {&n->l0, &n->l1, &n->l2};
    for (int k = 0; k < 3; k++)
        for (uint32_t i = 0; i < ls[k]->n; i++)
            if (loops_over_content(ls[k]->v[i])) return true;
    return false;
}

/* Reports unknown or unsupported filters and tests where jinja2 does at compile time: anywhere
 * but inside an if statement or a conditional expression of the same frame, where jinja2 defers
 * the error until the filter or test runs (jinja_eval then fails). */
static int check_tree(struct parser *p, const struct jinja_node *n, bool soft)
{
    if (!n || p->rc) return p->rc;
    if ((n->kind == JN_FILTER || n->kind == JN_TEST) && n->id < 0 && !soft) {
        const char *what = n->kind == JN_FILTER ? "filter" : "test";
        int code = n->id == -2 ? ERR_UNSUPPORTED : ERR_PARSE;
        if (p->err && p->errlen)
            snprintf(p->err, p->errlen,
                     n->id == -2 ? "line %d: the %s '%.*s' is not supported"
                                 : "line %d: no %s named '%.*s'",
                     n->line, what, (int)n->name.len, n->name.p);
        return p->rc = code;
    }
    bool kids = soft, lists = soft; /* softness of a, b, c, d and of l0, l1, l2 */
    bool soft_b = soft, soft_l2 = soft;
    switch (n->kind) {
    case JN_IF:
    case JN_CONDEXPR: kids = lists = soft_b = soft_l2 = true; break;
    case JN_FOR: kids = lists = soft_l2 = false; break; /* the iterable (b) keeps the parent's */
    case JN_MACRO:
    case JN_FILTERBLOCK:
    case JN_SETBLOCK: kids = lists = soft_b = soft_l2 = false; break;
    case JN_CALLBLOCK: lists = soft_b = soft_l2 = false; break; /* the call (a) keeps it */
    case JN_WITH: kids = lists = soft_b = false; break;         /* the values (l2) keep it */
    default: break;
    }
    check_tree(p, n->a, kids);
    check_tree(p, n->b, soft_b);
    check_tree(p, n->c, kids);
    check_tree(p, n->d, kids);
    for (uint32_t i = 0; i < n->l0.n; i++) check_tree(p, n->l0.v[i], lists);
    for (uint32_t i = 0; i < n->l1.n; i++) check_tree(p, n->l1.v[i], lists);
    for (uint32_t i = 0; i < n->l2.n; i++) check_tree(p, n->l2.v[i], soft_l2);
    return p->rc;
}

int jinja_parse_tokens(struct jinja_template *t, const struct jinja_toks *toks, char *err,
                       size_t errlen)
{
    struct parser p = {.t = t, .tok = toks->v, .n = toks->n, .err = err, .errlen = errlen};
    struct vec body = {0};
    if (subparse(&p, NULL, &body)) return p.rc ? p.rc : ERR_PARSE;
    t->body = vec_done(&body);
    for (uint32_t i = 0; i < t->body.n; i++)
        if (check_tree(&p, t->body.v[i], false)) return p.rc;
    for (uint32_t i = 0; i < t->body.n; i++)
        if (loops_over_content(t->body.v[i])) t->loops_over_content = true;
    return 0;
}
