/* Jinja entry points (see jinja.h): source checks and newline normalization before lexing, the
 * render context with its arena and limits, and the error helpers every jinja file uses. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "common/utf8.h"
#include "engine/text/unicode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jinja_limits_default(struct jinja_limits *l)
{
    l->max_memory = 64u << 20;
    l->max_steps = 50000000;
    l->max_depth = 64;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, 0, fmt, ap);
    va_end(ap);
}

int jinja_parse(const char *src, size_t len, struct jinja_template **out, char *err, size_t errlen)
{
    if (len > JINJA_SOURCE_MAX) {
        seterr(err, errlen, "template is %zu bytes (at most %u)", len, JINJA_SOURCE_MAX);
        return ERR_TOO_BIG;
    }
    if (!utf8_valid(src, len)) {
        seterr(err, errlen, "template is not valid UTF-8");
        return ERR_PARSE;
    }
    if (memchr(src, '\0', len)) {
        seterr(err, errlen, "template contains a NUL byte");
        return ERR_PARSE;
    }
    struct jinja_template *t = calloc(1, sizeof(*t));
    if (!t) {
        seterr(err, errlen, "out of memory");
        return ERR_NOMEM;
    }
    int rc = ERR_NOMEM;
    /* jinja2 turns \r\n and \r into \n and drops one trailing newline before lexing */
    char *s = jinja_alloc(&t->arena, len + 1);
    if (!s) goto out;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = '\0';
    struct jinja_toks toks = {0};
    if ((rc = jinja_lex(&t->arena, s, n, &toks, err, errlen))) goto out;
    if ((rc = jinja_parse_tokens(t, &toks, err, errlen))) goto out;
    *out = t;
    t = NULL;
out:
    if (rc == ERR_NOMEM) seterr(err, errlen, "out of memory");
    jinja_free(t);
    return rc;
}

void jinja_free(struct jinja_template *t)
{
    if (!t) return;
    jinja_arena_free(&t->arena);
    free(t);
}

bool jinja_loops_over_content(const struct jinja_template *t)
{
    return t->loops_over_content;
}

int jinja_fail(struct jinja_ctx *c, int code, const char *fmt, ...)
{
    if (c->rc) return c->rc;
    c->rc = code;
    if (c->err && c->errlen) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        err_vfmt(msg, sizeof(msg), code, fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errlen, "line %d: %s", c->line, msg);
    }
    return code;
}

int jinja_fail_alloc(struct jinja_ctx *c)
{
    if (c->arena.over)
        return jinja_fail(c, ERR_TOO_BIG, "the template needed more than %zu bytes of memory",
                          c->arena.max);
    return jinja_fail(c, ERR_NOMEM, "out of memory");
}

int jinja_step(struct jinja_ctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps <= c->max_steps) return 0;
    return jinja_fail(c, ERR_TOO_BIG, "the template ran more than %llu steps",
                      (unsigned long long)c->max_steps);
}

struct jinja_val jinja_undef_msg(struct jinja_ctx *c, bool unsafe, const char *fmt, ...)
{
    struct jinja_val v = jinja_undef();
    if (unsafe) v.flags = JV_F_UNSAFE;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(msg, sizeof(msg), 0, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    struct jinja_undef *u = jinja_alloc(&c->arena, sizeof(*u) + len + 1);
    if (!u) return v; /* the message is lost; the value is still undefined */
    char *p = (char *)(u + 1);
    memcpy(p, msg, len + 1);
    u->msg = p;
    v.u = u;
    return v;
}

int jinja_fail_undef(struct jinja_ctx *c, const struct jinja_val *u)
{
    const char *msg = u->u ? u->u->msg : "a value is undefined";
    if (u->flags & JV_F_UNSAFE) return jinja_fail(c, ERR_INVAL, "SecurityError: %s", msg);
    return jinja_fail(c, ERR_INVAL, "UndefinedError: %s", msg);
}

int jinja_render(const struct jinja_template *t, const json_t *vars, time_t now,
                 const struct jinja_limits *lim, struct buf *out, char *err, size_t errlen)
{
    struct jinja_limits def;
    if (!lim) {
        jinja_limits_default(&def);
        lim = &def;
    }
    if (err && errlen) err[0] = '\0';
    struct jinja_ctx c = {.t = t,
                          .out = out,
                          .max_steps = lim->max_steps,
                          .max_depth = lim->max_depth,
                          .now = now,
                          .err = err,
                          .errlen = errlen};
    c.arena.max = lim->max_memory;
    size_t before = out->len;
    int rc;
    struct jinja_scope *root = jinja_alloc(&c.arena, sizeof(*root));
    if (!root) {
        rc = jinja_fail_alloc(&c);
        goto out;
    }
    memset(root, 0, sizeof(*root));
    if (vars && !json_is_object(vars)) {
        rc = jinja_fail(&c, ERR_INVAL, "template variables must be a JSON object");
        goto out;
    }
    if (vars) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)vars, key, v)
        {
            struct jinja_val jv;
            if ((rc = jinja_from_json(&c, v, &jv))) goto out;
            if (jinja_dict_set(&c.arena, &root->vars, jinja_str(key, strlen(key)), jv)) {
                rc = jinja_fail_alloc(&c);
                goto out;
            }
        }
    }
    rc = jinja_exec_template(&c, root);
out:
    if (rc && out->data) { /* the caller's buffer as it was */
        out->len = before;
        out->data[before] = '\0';
    }
    jinja_arena_free(&c.arena);
    return rc;
}
