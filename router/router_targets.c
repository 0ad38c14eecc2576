/* --target parsing (see router_targets.h). */
#include "router/router_targets.h"

#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void router_targets_fini(struct router_targets *t)
{
    if (!t) return;
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

int router_targets_parse(const char *text, struct router_targets *out, char *err, size_t errlen)
{
    struct router_targets t = {0};
    char model[ROUTER_MODEL_MAX] = "";
    int rc = ERR_INVAL;
    const char *p = text ? text : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) {
            err_fmt(err, errlen, rc, "--target: empty entry");
            goto out;
        }
        const char *url = p;
        size_t ulen = len;
        const char *eq = memchr(p, '=', len);
        const char *scheme = strstr(p, "://");
        if (eq && (!scheme || eq < scheme)) {
            size_t nlen = (size_t)(eq - p);
            if (nlen == 0 || nlen >= sizeof(model)) {
                err_fmt(err, errlen, rc, "--target: bad model name in %.*s", (int)len, p);
                goto out;
            }
            memcpy(model, p, nlen);
            model[nlen] = '\0';
            url = eq + 1;
            ulen = len - nlen - 1;
        }
        if (!model[0]) {
            err_fmt(err, errlen, rc, "--target: %.*s comes before any model= name", (int)len, p);
            goto out;
        }
        bool http = ulen > 7 && strncmp(url, "http://", 7) == 0;
        bool https = ulen > 8 && strncmp(url, "https://", 8) == 0;
        if (!http && !https) {
            err_fmt(err, errlen, rc,
                    "--target: URL %.*s for %s must start with http:// or https://", (int)ulen, url,
                    model);
            goto out;
        }
        while (ulen > 0 && url[ulen - 1] == '/') ulen--;
        const char *host = url + (http ? 7 : 8);
        if (memchr(host, '/', ulen - (size_t)(host - url)) || ulen >= ROUTER_URL_MAX ||
            host == url + ulen) {
            err_fmt(err, errlen, rc, "--target: %.*s must be an engine's base URL (no path)",
                    (int)ulen, url);
            goto out;
        }
        for (size_t i = 0; i < t.n; i++)
            if (strcmp(t.v[i].model, model) == 0 && strlen(t.v[i].ep.url) == ulen &&
                memcmp(t.v[i].ep.url, url, ulen) == 0) {
                err_fmt(err, errlen, rc, "--target: %.*s is listed twice for %s", (int)ulen, url,
                        model);
                goto out;
            }
        struct router_target *v = realloc(t.v, (t.n + 1) * sizeof(*v));
        if (!v) {
            rc = ERR_NOMEM;
            goto out;
        }
        t.v = v;
        struct router_target *e = &t.v[t.n++];
        memset(e, 0, sizeof(*e));
        snprintf(e->model, sizeof(e->model), "%s", model);
        memcpy(e->ep.url, url, ulen);
        e->ep.url[ulen] = '\0';
        snprintf(e->ep.key, sizeof(e->ep.key), "%s", e->ep.url);
        e->ep.ready = true;
        p = end ? end + 1 : p + len;
        if (end && !*p) {
            err_fmt(err, errlen, rc, "--target: trailing comma");
            goto out;
        }
    }
    *out = t;
    t.v = NULL;
    rc = 0;
out:
    free(t.v);
    return rc;
}
