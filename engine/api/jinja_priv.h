/* Internals of the Jinja interpreter (engine/api/jinja*.c): the arena, values, the syntax tree and
 * the render context. jinja_lex.c + jinja_parse.c build the tree; jinja_value.c and jinja_repr.c
 * hold Python's value semantics (==, ordering, truthiness; str, repr, json.dumps); jinja_eval.c,
 * jinja_access.c and jinja_exec.c run the tree; jinja_filters.c, jinja_filters_seq.c and
 * jinja_tests.c are the builtins; jinja_methods.c, jinja_str.c and jinja_format.c the str, dict
 * and list methods. Not part of the engine's API: include engine/api/jinja.h instead. */
#ifndef CINFER_ENGINE_JINJA_PRIV_H
#define CINFER_ENGINE_JINJA_PRIV_H

#include "engine/api/jinja.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

/* Bump allocator: everything a template or a render allocates lives until the arena is freed,
 * which makes reference cycles (a namespace holding itself) and error paths leak-free. `max` bounds
 * the total (0: unbounded, for the parsed template, whose size the source bounds). */
struct jinja_chunk;
struct jinja_arena {
    struct jinja_chunk *head;
    size_t total, max;
    bool over; /* an allocation failed because of max (not of malloc) */
};

void *jinja_alloc(struct jinja_arena *a, size_t n); /* NULL on ERR_NOMEM or past max */
void jinja_arena_free(struct jinja_arena *a);

/* A string view: UTF-8 bytes, not NUL-terminated. */
struct jinja_sv {
    const char *p;
    uint32_t len;
};

static inline bool jinja_sv_eq(struct jinja_sv a, const char *b)
{
    size_t n = strlen(b);
    return a.len == n && memcmp(a.p, b, n) == 0;
}

/* Growable string in an arena. */
struct jinja_sb {
    char *p;
    size_t len, cap;
};

/* ---------------------------------------------------------------- values */

enum jinja_type {
    JV_UNDEF = 0, /* jinja2's Undefined: prints "", iterates empty, fails when used otherwise */
    JV_NONE,
    JV_BOOL,
    JV_INT, /* Python int within int64 (overflow is an error, not a bigint) */
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,
    JV_DICT,
    JV_NS,   /* namespace(): a dict whose attributes may be assigned */
    JV_FUNC, /* macro, global function or bound method */
    JV_LOOP, /* the `loop` variable of a for loop */
};

#define JV_F_SAFE   1 /* JV_STR: markupsafe.Markup (from |safe): '+' escapes the other side */
#define JV_F_UNSAFE 2 /* JV_UNDEF: a sandbox-blocked attribute (SecurityError when used) */

/* JV_LIST views: what Python object the list stands for (printing, len(), indexing differ). */
enum jinja_view {
    JV_VIEW_NONE = 0,
    JV_VIEW_ITEMS,  /* dict.items() */
    JV_VIEW_KEYS,   /* dict.keys() */
    JV_VIEW_VALUES, /* dict.values() */
    JV_VIEW_GEN,    /* a generator (map, select, items filter, ...): iterates once, no len() */
};

struct jinja_list;
struct jinja_dict;
struct jinja_func;
struct jinja_loop;
struct jinja_undef;

struct jinja_val {
    uint8_t type;  /* enum jinja_type */
    uint8_t flags; /* JV_F_* */
    uint8_t view;  /* enum jinja_view (JV_LIST) */
    uint32_t len;  /* JV_STR: bytes */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;               /* JV_STR */
        struct jinja_list *l;        /* JV_LIST, JV_TUPLE */
        struct jinja_dict *d;        /* JV_DICT, JV_NS */
        struct jinja_func *fn;       /* JV_FUNC */
        struct jinja_loop *loop;     /* JV_LOOP */
        const struct jinja_undef *u; /* JV_UNDEF: why (NULL: a plain missing value) */
    };
};

struct jinja_list {
    size_t n, cap;
    struct jinja_val *v;
    size_t pos; /* JV_VIEW_GEN: items before pos were consumed */
};

struct jinja_pair {
    struct jinja_val k, v;
};

/* Insertion-ordered dict; string keys are hashed once the dict grows past a few entries. */
struct jinja_dict {
    size_t n, cap;
    struct jinja_pair *v;
    int32_t *index; /* open addressing over v (string keys only), -1 empty; NULL when small */
    size_t index_mask;
};

/* Why a value is undefined, for the UndefinedError message. */
struct jinja_undef {
    const char *msg; /* complete message ("'foo' is undefined") */
};

enum jinja_func_kind {
    JF_MACRO = 0, /* {% macro %} or the caller of a {% call %} block */
    JF_GLOBAL,    /* range, namespace, dict, raise_exception, strftime_now */
    JF_METHOD,    /* a bound method: self.name(...) */
};

struct jinja_node;
struct jinja_scope;

struct jinja_func {
    uint8_t kind;
    int id;                      /* JF_GLOBAL / JF_METHOD: which */
    struct jinja_sv name;        /* for messages and repr */
    struct jinja_val self;       /* JF_METHOD: receiver */
    const struct jinja_node *mn; /* JF_MACRO: the macro or call-block node */
    struct jinja_scope *scope;   /* JF_MACRO: the scope it was defined in */
};

struct jinja_loop {
    int64_t index0, length;
    int depth;                      /* 1 for the outer loop, +1 per recursive call */
    const struct jinja_list *items; /* the (filtered) sequence, for previtem/nextitem */
    struct jinja_val last_changed;  /* loop.changed() */
    bool changed_called;
    const struct jinja_node *node; /* recursive loops: the for node */
    struct jinja_scope *scope;     /* recursive loops: the scope the for runs in */
};

/* Variables of one block of the template: a for-loop iteration, a macro call, a with block. */
struct jinja_scope {
    struct jinja_scope *parent;
    struct jinja_dict vars;
};

/* ---------------------------------------------------------------- syntax tree */

enum jinja_node_kind {
    /* expressions */
    JN_CONST = 0, /* val */
    JN_NAME,      /* name */
    JN_NSREF,     /* name.attr as an assignment target (set ns.attr = ...) */
    JN_LIST,      /* l0: items */
    JN_TUPLE,     /* l0: items */
    JN_DICT,      /* l0: keys, l1: values */
    JN_GETATTR,   /* a.name */
    JN_GETITEM,   /* a[b] */
    JN_SLICE,  /* a[b:c:d] as the subscript b (NULL parts omitted): a, b, c = start, stop, step */
    JN_CALL,   /* a(l0..., kw=l1...), *c, **d */
    JN_FILTER, /* a | name(l0..., kw=l1...); a NULL: the text of a filter block */
    JN_TEST,   /* a is name(l0..., kw=l1...) */
    JN_NOT,
    JN_NEG,
    JN_POS,
    JN_AND,
    JN_OR,
    JN_BINOP,    /* a op b: op is '+', '-', '*', '/', 'f' (//), '%', 'p' (**) */
    JN_CONCAT,   /* l0 joined with ~ */
    JN_COMPARE,  /* a then l0 operands (JN_OPERAND, op: '=', '!', '<', 'l', '>', 'g', 'i', 'n') */
    JN_OPERAND,  /* op a */
    JN_CONDEXPR, /* a if b else c (c NULL: undefined) */
    /* statements */
    JN_OUTPUT,      /* l0: JN_CONST texts and expressions, printed in order */
    JN_IF,          /* if a: l0 else l1 (an elif is a JN_IF alone in l1) */
    JN_FOR,         /* for a in b if c: l0 else l1; flags JN_F_RECURSIVE */
    JN_SET,         /* a = b */
    JN_SETBLOCK,    /* a = (l0 rendered) | c */
    JN_MACRO,       /* macro name(params...): l0; params in kw with defaults l1 (last ones) */
    JN_CALLBLOCK,   /* call(params) a: l0 */
    JN_FILTERBLOCK, /* filter c: l0 */
    JN_WITH,        /* with l1 targets = l2 values: l0 */
    JN_BREAK,
    JN_CONTINUE,
    JN_SCOPE, /* l0 run as they are ({% generation %} and friends) */
};

#define JN_F_RECURSIVE     1 /* for ... recursive */
#define JN_F_USES_CALLER   2 /* macro body refers to caller */
#define JN_F_USES_VARARGS  4
#define JN_F_USES_KWARGS   8
#define JN_F_DYN_CALL_ARGS 16 /* call with *args or **kwargs */

struct jinja_nodes {
    struct jinja_node **v;
    uint32_t n;
};

struct jinja_node {
    uint8_t kind; /* enum jinja_node_kind */
    uint8_t op;
    uint16_t flags;
    int line;
    int id; /* JN_FILTER / JN_TEST: builtin index */
    struct jinja_node *a, *b, *c, *d;
    struct jinja_nodes l0, l1, l2;
    struct jinja_sv *kw; /* JN_CALL/FILTER/TEST: l1's keyword names; JN_MACRO/CALLBLOCK: params */
    uint32_t n_kw;
    struct jinja_sv name; /* JN_NAME, JN_NSREF (namespace), JN_GETATTR, JN_FILTER, JN_TEST, macro */
    struct jinja_sv attr; /* JN_NSREF */
    struct jinja_val val; /* JN_CONST */
};

struct jinja_template {
    struct jinja_arena arena;
    struct jinja_nodes body;
    bool loops_over_content;
};

/* ---------------------------------------------------------------- lexer (jinja_lex.c) */

enum jinja_tok_type {
    JT_EOF = 0,
    JT_DATA,        /* text between tags */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING, /* unescaped value in text */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* op: one of the operator codes below */
};

/* Operator codes (JT_OP): the character itself where it is one, else these. */
#define JINJA_OP_FLOORDIV 'f' /* // */
#define JINJA_OP_POW      'p' /* ** */
#define JINJA_OP_EQ       '=' /* == (assignment is 'a') */
#define JINJA_OP_ASSIGN   'a'
#define JINJA_OP_NE       '!'
#define JINJA_OP_LE       'l'
#define JINJA_OP_GE       'g'

struct jinja_tok {
    uint8_t type; /* enum jinja_tok_type */
    uint8_t op;
    int line;
    struct jinja_sv text; /* JT_DATA, JT_NAME, JT_STRING (unescaped) */
    int64_t i;
    double f;
};

struct jinja_toks {
    struct jinja_tok *v;
    size_t n, cap;
};

/* Tokenizes the (already newline-normalized, UTF-8 validated) source with trim_blocks and
 * lstrip_blocks on, into `out` (its storage in `a`). Returns 0, or ERR_PARSE / ERR_NOMEM with a
 * message in err. */
int jinja_lex(struct jinja_arena *a, const char *src, size_t len, struct jinja_toks *out, char *err,
              size_t errlen);

/* Parses the tokens into t->body (jinja_parse.c). */
int jinja_parse_tokens(struct jinja_template *t, const struct jinja_toks *toks, char *err,
                       size_t errlen);

/* ---------------------------------------------------------------- render context (jinja_eval.c) */

struct jinja_ctx {
    const struct jinja_template *t;
    struct jinja_arena arena;
    struct buf *out;     /* the caller's buffer, when no capture is active */
    struct jinja_sb *sb; /* active capture (block set, macro call, filter block), or NULL */
    uint64_t steps, max_steps;
    int depth, max_depth; /* macro calls and recursive loops in progress */
    time_t now;
    int line; /* of the node being evaluated, for messages */
    int rc;   /* first error */
    char *err;
    size_t errlen;
};

/* Records the first error ("line N: ..."), returns `code`. */
int jinja_fail(struct jinja_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ERR_TOO_BIG / ERR_NOMEM after a failed jinja_alloc, with the right message. */
int jinja_fail_alloc(struct jinja_ctx *c);
/* Counts n steps; fails past the limit. */
int jinja_step(struct jinja_ctx *c, uint64_t n);

/* ---------------------------------------------------------------- values (jinja_value.c) */

static inline struct jinja_val jinja_undef(void)
{
    return (struct jinja_val){.type = JV_UNDEF};
}
static inline struct jinja_val jinja_none(void)
{
    return (struct jinja_val){.type = JV_NONE};
}
static inline struct jinja_val jinja_bool(bool b)
{
    return (struct jinja_val){.type = JV_BOOL, .b = b};
}
static inline struct jinja_val jinja_int(int64_t i)
{
    return (struct jinja_val){.type = JV_INT, .i = i};
}
static inline struct jinja_val jinja_float(double f)
{
    return (struct jinja_val){.type = JV_FLOAT, .f = f};
}
static inline struct jinja_val jinja_str(const char *p, size_t len)
{
    return (struct jinja_val){.type = JV_STR, .len = (uint32_t)len, .s = p};
}
static inline struct jinja_sv jinja_sv_of(const struct jinja_val *v)
{
    return (struct jinja_sv){v->s, v->len};
}

/* Undefined with a message ("'x' is undefined"), formatted into the arena. */
struct jinja_val jinja_undef_msg(struct jinja_ctx *c, bool unsafe, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fails with the undefined value's message (UndefinedError or SecurityError). */
int jinja_fail_undef(struct jinja_ctx *c, const struct jinja_val *u);

/* Copies bytes into the arena as a str value; NULL-free on failure (returns rc via *rc). */
int jinja_str_new(struct jinja_ctx *c, const char *p, size_t len, struct jinja_val *out);
int jinja_sb_put(struct jinja_ctx *c, struct jinja_sb *sb, const char *p, size_t n);
int jinja_sb_putc(struct jinja_ctx *c, struct jinja_sb *sb, char ch);
int jinja_sb_cpt(struct jinja_ctx *c, struct jinja_sb *sb, uint32_t cpt); /* UTF-8 */
int jinja_sb_printf(struct jinja_ctx *c, struct jinja_sb *sb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct jinja_val jinja_sb_val(const struct jinja_sb *sb);

struct jinja_list *jinja_list_new(struct jinja_ctx *c, size_t cap);
int jinja_list_push(struct jinja_ctx *c, struct jinja_list *l, struct jinja_val v);
struct jinja_val jinja_list_val(struct jinja_list *l, enum jinja_type type);

struct jinja_dict *jinja_dict_new(struct jinja_arena *a);
/* Inserts or replaces (Python dict assignment: an equal key keeps its position). */
int jinja_dict_set(struct jinja_arena *a, struct jinja_dict *d, struct jinja_val k,
                   struct jinja_val v);
/* Lookup; NULL when absent. */
struct jinja_val *jinja_dict_get(const struct jinja_dict *d, const struct jinja_val *k);
struct jinja_val *jinja_dict_get_str(const struct jinja_dict *d, const char *p, size_t len);

/* JSON -> value: containers copied into the arena, strings borrowed from the JSON (which must
 * outlive the render). */
int jinja_from_json(struct jinja_ctx *c, const json_t *j, struct jinja_val *out);

/* Python semantics. */
bool jinja_truthy(const struct jinja_val *v);
bool jinja_equal(const struct jinja_val *a, const struct jinja_val *b);
/* Python's <, <=, >, >= (op '<', 'l', '>', 'g'): sets *out. Fails with a TypeError for
 * unorderable types, an UndefinedError for undefined ones. jinja_less is op '<'. */
int jinja_order(struct jinja_ctx *c, char op, const struct jinja_val *a, const struct jinja_val *b,
                bool *out);
int jinja_less(struct jinja_ctx *c, const struct jinja_val *a, const struct jinja_val *b, bool *lt);
/* Python's type(v).__name__ ("str", "int", "NoneType", "Undefined", ...); static. */
const char *jinja_type_name(const struct jinja_val *v);
/* Appends str(v) / repr(v) to sb. */
int jinja_to_str(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v);
int jinja_repr(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v);
/* str(v) as a value (itself for a str). */
int jinja_str_of(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out);
/* Python float repr ("1.0", "1e-05", "inf") into buf (>= 32 bytes); returns its length. */
size_t jinja_float_repr(double f, char *buf, size_t n);
/* markupsafe.escape(str(v)) appended to sb. */
int jinja_escape_into(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
 * indent: NULL for none, else the string each level adds; item_sep / key_sep NULL for defaults. */
struct jinja_json_opts {
    bool ensure_ascii;
    bool sort_keys;
    const struct jinja_sv *indent;
    const struct jinja_sv *item_sep, *key_sep;
};
int jinja_to_json(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                  const struct jinja_json_opts *o);

/* Code points of a str; the byte offset of code point `i` (i <= count). */
size_t jinja_utf8_count(const char *p, size_t len);
size_t jinja_utf8_offset(const char *p, size_t len, size_t i);
/* Python's str.isspace() for one code point. */
bool jinja_is_space(uint32_t cpt);

/* ---------------------------------------------------------------- evaluation (jinja_eval.c,
 * jinja_access.c, jinja_exec.c) */

/* Runs the template body in a new scope under `root` (the render variables) (jinja_exec.c). */
int jinja_exec_template(struct jinja_ctx *c, struct jinja_scope *root);

/* Scopes: a new one under parent; a variable set in s; a lookup through s and its parents. */
struct jinja_scope *jinja_scope_new(struct jinja_ctx *c, struct jinja_scope *parent);
int jinja_scope_set(struct jinja_ctx *c, struct jinja_scope *s, struct jinja_sv name,
                    struct jinja_val v);
struct jinja_val *jinja_scope_find(struct jinja_scope *s, struct jinja_sv name);
/* Output: text or str(v) to the active capture or the caller's buffer. */
int jinja_emit(struct jinja_ctx *c, const char *p, size_t n);
int jinja_emit_val(struct jinja_ctx *c, const struct jinja_val *v);

/* A call's evaluated arguments (*args and **kwargs spread). */
#define JINJA_MAX_ARGS 64
struct jinja_args {
    struct jinja_val pos[JINJA_MAX_ARGS];
    size_t n_pos;
    struct jinja_sv kw[JINJA_MAX_ARGS];
    struct jinja_val kwv[JINJA_MAX_ARGS];
    size_t n_kw;
};

int jinja_args_eval(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                    struct jinja_args *a);
/* The filter chain n applied to its input, or to block_text for filter and set blocks. */
int jinja_eval_filter(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                      const struct jinja_val *block_text, struct jinja_val *out);
/* A macro or call-block caller called (jinja_exec.c). */
int jinja_macro_call(struct jinja_ctx *c, const struct jinja_func *fn, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, struct jinja_val *out);
/* The for loop n over iter at recursion depth `depth`, writing to the current output. */
int jinja_exec_for(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
                   const struct jinja_val *iter, int depth);

int jinja_eval(struct jinja_ctx *c, struct jinja_scope *s, const struct jinja_node *n,
               struct jinja_val *out);
/* Calls a function value with positional and keyword arguments. */
int jinja_call(struct jinja_ctx *c, const struct jinja_val *fn, const struct jinja_val *args,
               size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
               struct jinja_val *out);
/* The sandbox's getattr (attribute, then item) and getitem (item, then attribute). */
int jinja_getattr(struct jinja_ctx *c, const struct jinja_val *obj, struct jinja_sv name,
                  struct jinja_val *out);
int jinja_getitem(struct jinja_ctx *c, const struct jinja_val *obj, const struct jinja_val *key,
                  struct jinja_val *out);
/* The Python attribute `name` of obj alone (no item fallback; jinja2's attr filter): 1 and *out,
 * 0 when obj has none, or an error. */
int jinja_pyattr(struct jinja_ctx *c, const struct jinja_val *obj, struct jinja_sv name,
                 struct jinja_val *out);
/* obj[start:stop:step] (parts[i] used where given[i]), Python's slice semantics; a type Python
 * cannot slice gives undefined, as the sandbox's getitem does. */
int jinja_get_slice(struct jinja_ctx *c, const struct jinja_val *obj,
                    const struct jinja_val parts[3], const bool given[3], struct jinja_val *out);
/* A value's items as a list (iteration: dict -> keys, str -> characters); fails when not
 * iterable. */
int jinja_iterate(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_list **out);
/* Python's len(); fails for values without one. */
int jinja_length(struct jinja_ctx *c, const struct jinja_val *v, int64_t *out);

/* ---------------------------------------------------------------- builtins (jinja_filters.c,
 * jinja_filters_seq.c, jinja_tests.c) */

/* Index of a filter / test by name; -1 unknown, -2 known to Jinja2 but not supported here. */
int jinja_filter_find(struct jinja_sv name);
int jinja_test_find(struct jinja_sv name);
int jinja_filter_apply(struct jinja_ctx *c, int id, const struct jinja_val *in,
                       const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                       const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out);
int jinja_test_apply(struct jinja_ctx *c, int id, const struct jinja_val *in,
                     const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                     const struct jinja_val *kwv, size_t n_kw, bool *out);
/* Global functions: the names the root scope defines. */
int jinja_global_find(struct jinja_sv name);
const char *jinja_global_name(int id);
int jinja_global_call(struct jinja_ctx *c, int id, const struct jinja_val *args, size_t n_args,
                      const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
                      struct jinja_val *out);

/* Binds positional and keyword call arguments to the parameters (Python's rules: no argument
 * twice, no unknown keyword, every required one given); writes out[n_params], JV_UNDEF for the
 * optional ones left out. Fails with a TypeError naming `what`. */
struct jinja_param {
    const char *name;
    bool required;
};
int jinja_bind(struct jinja_ctx *c, const char *what, const struct jinja_param *params,
               size_t n_params, const struct jinja_val *args, size_t n_args,
               const struct jinja_sv *kw, const struct jinja_val *kwv, size_t n_kw,
               struct jinja_val *out);

/* An optional argument left out (an undefined value passed on purpose means the same here). */
bool jinja_absent(const struct jinja_val *v);
/* An int (bool counts) / a str argument of `what`, or a TypeError. */
int jinja_want_int(struct jinja_ctx *c, const char *what, const struct jinja_val *v, int64_t *out);
int jinja_want_str(struct jinja_ctx *c, const char *what, const struct jinja_val *v);
/* jinja2's soft_str: strings (Markup too) as they are, anything else str(v). */
int jinja_soft_str(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out);
/* A generator value over l's items. */
struct jinja_val jinja_gen_of(struct jinja_list *l);

/* The sequence filters (jinja_filters_seq.c); b is the bound argument list of jinja_filter_apply,
 * b[0] the filtered value. */
int jinja_filter_select(struct jinja_ctx *c, const struct jinja_val *in, bool by_attr, bool keep,
                        const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                        const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out);
int jinja_filter_map(struct jinja_ctx *c, const struct jinja_val *in, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, struct jinja_val *out);
int jinja_filter_first_last(struct jinja_ctx *c, const struct jinja_val *in, bool last,
                            struct jinja_val *out);
int jinja_filter_unique(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out);
int jinja_filter_minmax(struct jinja_ctx *c, const struct jinja_val *b, bool max,
                        struct jinja_val *out);
int jinja_filter_sort(struct jinja_ctx *c, const struct jinja_val *b, bool dictsort,
                      struct jinja_val *out);
int jinja_filter_batch_slice(struct jinja_ctx *c, const struct jinja_val *b, bool slice,
                             struct jinja_val *out);
int jinja_filter_sum(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out);
int jinja_filter_reverse(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out);
int jinja_filter_join(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out);
int jinja_filter_items(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out);

/* ---------------------------------------------------------------- methods (jinja_methods.c) */

/* Attribute lookup of a Python method on a value: 1 and a bound method in *out when `name` is a
 * method of the value's Python type (a mutating one gives an unsafe undefined, as the sandbox
 * does), 0 when the type has no such attribute. */
int jinja_method_lookup(struct jinja_ctx *c, const struct jinja_val *self, struct jinja_sv name,
                        struct jinja_val *out);
int jinja_method_call(struct jinja_ctx *c, const struct jinja_func *m, const struct jinja_val *args,
                      size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                      size_t n_kw, struct jinja_val *out);

/* ---------------------------------------------------------------- strings (jinja_str.c) */

/* Python string operations shared by filters and methods. */
int jinja_str_upper(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out);
int jinja_str_lower(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out);
int jinja_str_title(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out);
int jinja_str_capitalize(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out);
/* strip(chars): which = 1 left, 2 right, 3 both; chars NULL: whitespace. */
int jinja_str_strip(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *chars,
                    int which, struct jinja_val *out);
int jinja_str_replace(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *old,
                      const struct jinja_val *new_, int64_t count, struct jinja_val *out);
/* str.split / rsplit (sep NULL: on whitespace runs; maxsplit < 0: no limit) and splitlines. */
int jinja_str_split(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *sep,
                    int64_t maxsplit, bool right, struct jinja_val *out);
int jinja_str_splitlines(struct jinja_ctx *c, const struct jinja_val *s, bool keepends,
                         struct jinja_val *out);

/* ---------------------------------------------------------------- formatting (jinja_format.c) */

/* Python's str % args (printf-style), for the `format` filter and the % operator. */
int jinja_str_percent(struct jinja_ctx *c, const struct jinja_val *fmt,
                      const struct jinja_val *args, struct jinja_val *out);
/* str.format(*args, **kwargs) appended to sb; depth counts nested fields in specs. */
int jinja_str_format(struct jinja_ctx *c, const struct jinja_val *fmt, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, int depth, struct jinja_sb *sb);

#endif
