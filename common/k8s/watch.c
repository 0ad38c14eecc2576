/* Watch stream line splitting and event decoding (watch.h). Complete lines inside one chunk are
 * handed out in place; only a line that spans chunks is copied, into a buffer bounded by max_line,
 * so memory stays bounded whatever the server sends. */
#include "common/k8s/watch.h"

#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void k8s_watch_lines_init(struct k8s_watch_lines *l, size_t max_line)
{
    l->max_line = max_line ? max_line : K8S_WATCH_LINE_MAX_DEF;
    buf_init(&l->partial, l->max_line + 1); /* + a "\r" before the "\n" */
}

void k8s_watch_lines_fini(struct k8s_watch_lines *l)
{
    buf_fini(&l->partial);
}

/* Delivers one complete line (without "\n"), dropping a trailing "\r" and skipping empty lines. */
static int lines_emit(const struct k8s_watch_lines *l, const char *p, size_t n,
                      k8s_watch_line_fn fn, void *ctx)
{
    if (n && p[n - 1] == '\r') n--;
    if (n > l->max_line) return ERR_TOO_BIG;
    return n ? fn(ctx, p, n) : 0;
}

int k8s_watch_lines_feed(struct k8s_watch_lines *l, const char *data, size_t len,
                         k8s_watch_line_fn fn, void *ctx)
{
    int rc = 0;
    while (len && !rc) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        if (!nl) return buf_append(&l->partial, data, n); /* continues in a later chunk */
        if (l->partial.len) {
            /* The end of a line that started in an earlier chunk. */
            rc = buf_append(&l->partial, data, n);
            if (rc) return rc;
            rc = lines_emit(l, l->partial.data, l->partial.len, fn, ctx);
            buf_reset(&l->partial);
        } else {
            rc = lines_emit(l, data, n, fn, ctx); /* whole line inside this chunk: no copy */
        }
        data = nl + 1;
        len -= n + 1;
    }
    return rc;
}

int k8s_watch_lines_finish(const struct k8s_watch_lines *l)
{
    return l->partial.len ? ERR_IO : 0;
}

static const char *const watch_type_names[] = {
    [K8S_WATCH_ADDED] = "ADDED",     [K8S_WATCH_MODIFIED] = "MODIFIED",
    [K8S_WATCH_DELETED] = "DELETED", [K8S_WATCH_BOOKMARK] = "BOOKMARK",
    [K8S_WATCH_ERROR] = "ERROR",
};

const char *k8s_watch_type_str(enum k8s_watch_type t)
{
    return (unsigned)t < sizeof(watch_type_names) / sizeof(watch_type_names[0])
               ? watch_type_names[t]
               : "UNKNOWN";
}

int k8s_watch_event_parse(const char *line, size_t len, struct k8s_watch_event *ev,
                          struct k8s_status *st)
{
    json_error_t jerr;
    int rc = ERR_PARSE;
    size_t i;

    memset(st, 0, sizeof(*st));
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        snprintf(st->message, sizeof(st->message), "watch event is not JSON: %s", jerr.text);
        return ERR_PARSE;
    }
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *obj = json_object_get(j, "object");
    if (!type) {
        snprintf(st->message, sizeof(st->message), "watch event has no type");
        goto out;
    }
    for (i = 0; i < sizeof(watch_type_names) / sizeof(watch_type_names[0]); i++)
        if (strcmp(type, watch_type_names[i]) == 0) break;
    if (i == sizeof(watch_type_names) / sizeof(watch_type_names[0])) {
        snprintf(st->message, sizeof(st->message), "unknown watch event type \"%.64s\"", type);
        goto out;
    }
    if (!json_is_object(obj)) {
        snprintf(st->message, sizeof(st->message), "watch event %s has no object", type);
        goto out;
    }
    if (i == K8S_WATCH_ERROR) {
        char *s = json_dumps(obj, JSON_COMPACT);
        k8s_status_parse(0, s ? s : "", s ? strlen(s) : 0, st);
        free(s);
    }
    ev->type = (enum k8s_watch_type)i;
    ev->object = json_incref(obj);
    rc = 0;
out:
    json_decref(j);
    return rc;
}
