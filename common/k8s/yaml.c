/* YAML -> jansson conversion with libyaml's event API (see yaml.h for what is accepted). An explicit
 * stack of open containers replaces recursion, so depth is bounded by K8S_YAML_MAX_DEPTH and not by
 * the C stack. */
#include "common/k8s/yaml.h"

#include "common/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

struct yaml_frame {
    json_t *node; /* borrowed: owned by its parent (or by root) */
    char *key;    /* mapping only: the key waiting for its value (owned), or NULL */
};

struct yaml_conv {
    struct yaml_frame stack[K8S_YAML_MAX_DEPTH];
    int depth;
    json_t *root; /* owned */
    bool have_doc;
    char *err;
    size_t errlen;
};

static int yaml_fail(struct yaml_conv *y, int rc, const yaml_mark_t *m, const char *what)
{
    snprintf(y->err, y->errlen, "YAML line %zu, column %zu: %s", m->line + 1, m->column + 1, what);
    return rc;
}

static bool yaml_plain_null(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    return n == 0 || (n == 1 && v[0] == '~') ||
           (n == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

/* Attaches `v` (taken) to the innermost open container, or makes it the root. A mapping without a
 * pending key takes `v` as the key, which must then be a string. */
static int yaml_attach(struct yaml_conv *y, json_t *v, const yaml_mark_t *m)
{
    if (y->depth == 0) {
        y->root = v;
        return 0;
    }
    struct yaml_frame *f = &y->stack[y->depth - 1];
    if (json_is_array(f->node)) {
        if (json_array_append_new(f->node, v)) return yaml_fail(y, ERR_NOMEM, m, "out of memory");
        return 0;
    }
    if (!f->key) {
        if (!json_is_string(v)) {
            json_decref(v);
            return yaml_fail(y, ERR_PARSE, m, "mapping key must be a non-null scalar");
        }
        f->key = strdup(json_string_value(v));
        json_decref(v);
        return f->key ? 0 : yaml_fail(y, ERR_NOMEM, m, "out of memory");
    }
    if (json_object_get(f->node, f->key)) {
        char what[320];
        snprintf(what, sizeof(what), "duplicate key \"%.200s\"", f->key);
        json_decref(v);
        return yaml_fail(y, ERR_PARSE, m, what);
    }
    int r = json_object_set_new(f->node, f->key, v);
    free(f->key);
    f->key = NULL;
    return r ? yaml_fail(y, ERR_NOMEM, m, "out of memory") : 0;
}

static int yaml_on_scalar(struct yaml_conv *y, const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (memchr(v, 0, n))
        return yaml_fail(y, ERR_PARSE, &ev->start_mark, "scalar contains a NUL byte");
    json_t *j = yaml_plain_null(ev) ? json_null() : json_stringn(v, n);
    if (!j) return yaml_fail(y, ERR_PARSE, &ev->start_mark, "scalar is not valid UTF-8");
    return yaml_attach(y, j, &ev->start_mark);
}

static int yaml_on_open(struct yaml_conv *y, const yaml_event_t *ev, bool mapping)
{
    const yaml_mark_t *m = &ev->start_mark;
    if (y->depth == K8S_YAML_MAX_DEPTH) return yaml_fail(y, ERR_PARSE, m, "nested too deeply");
    if (y->depth > 0 && json_is_object(y->stack[y->depth - 1].node) && !y->stack[y->depth - 1].key)
        return yaml_fail(y, ERR_PARSE, m, "mapping key must be a non-null scalar");
    json_t *c = mapping ? json_object() : json_array();
    if (!c) return yaml_fail(y, ERR_NOMEM, m, "out of memory");
    int rc = yaml_attach(y, c, m); /* the parent (or root) now owns c */
    if (rc) return rc;
    y->stack[y->depth++] = (struct yaml_frame){.node = c, .key = NULL};
    return 0;
}

/* Handles one event; *done is set at the end of the stream. */
static int yaml_on_event(struct yaml_conv *y, const yaml_event_t *ev, bool *done)
{
    const yaml_mark_t *m = &ev->start_mark;
    switch (ev->type) {
    case YAML_STREAM_START_EVENT:
    case YAML_NO_EVENT: return 0;
    case YAML_STREAM_END_EVENT: *done = true; return 0;
    case YAML_DOCUMENT_START_EVENT:
        if (y->have_doc) return yaml_fail(y, ERR_PARSE, m, "more than one YAML document");
        y->have_doc = true;
        return 0;
    case YAML_DOCUMENT_END_EVENT: return 0;
    case YAML_ALIAS_EVENT:
        return yaml_fail(y, ERR_UNSUPPORTED, m, "YAML aliases are not supported");
    case YAML_SCALAR_EVENT:
        if (ev->data.scalar.anchor)
            return yaml_fail(y, ERR_UNSUPPORTED, m, "YAML anchors are not supported");
        return yaml_on_scalar(y, ev);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool mapping = ev->type == YAML_MAPPING_START_EVENT;
        const yaml_char_t *anchor =
            mapping ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
        if (anchor) return yaml_fail(y, ERR_UNSUPPORTED, m, "YAML anchors are not supported");
        return yaml_on_open(y, ev, mapping);
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        /* libyaml emits balanced events; checked anyway rather than trusted. */
        if (y->depth == 0) return yaml_fail(y, ERR_PARSE, m, "unbalanced end of collection");
        y->depth--;
        free(y->stack[y->depth].key);
        y->stack[y->depth].key = NULL;
        return 0;
    }
    return 0;
}

int k8s_yaml_to_json(const char *data, size_t len, json_t **out, char *err, size_t errlen)
{
    struct yaml_conv y = {.err = err, .errlen = errlen};
    yaml_parser_t parser;
    int rc = ERR_NOMEM;
    bool done = false;

    if (errlen) err[0] = 0;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return ERR_NOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            char what[256];
            snprintf(what, sizeof(what), "%s%s%s", parser.problem ? parser.problem : "syntax error",
                     parser.context ? " " : "", parser.context ? parser.context : "");
            rc = parser.error == YAML_MEMORY_ERROR
                     ? ERR_NOMEM
                     : yaml_fail(&y, ERR_PARSE, &parser.problem_mark, what);
            goto out;
        }
        rc = yaml_on_event(&y, &ev, &done);
        yaml_event_delete(&ev);
        if (rc) goto out;
    }
    if (!y.root) {
        snprintf(err, errlen, "YAML: empty document");
        rc = ERR_PARSE;
        goto out;
    }
    *out = y.root;
    y.root = NULL;
    rc = 0;
out:
    for (int i = 0; i < y.depth; i++) free(y.stack[i].key);
    json_decref(y.root);
    yaml_parser_delete(&parser);
    return rc;
}
