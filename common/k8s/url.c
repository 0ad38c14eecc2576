/* Kubernetes API request URLs (url.h). Paths follow
 * https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris */
#include "common/k8s/url.h"

#include "common/err.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int k8s_url_escape(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            rc = buf_putc(out, (char)*p);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = buf_append(out, e, 3);
        }
    }
    return rc;
}

/* A path segment taken from the caller: non-empty and not a dot segment (which a server or proxy
 * could resolve to another path). */
static bool url_segment_ok(const char *s)
{
    return *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int url_fail(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "bad resource reference: %s", what);
    return ERR_INVAL;
}

int k8s_url_build(struct buf *out, const char *server, const struct k8s_ref *ref, char *err,
                  size_t errlen)
{
    const struct k8s_resource *r = ref->res;
    int rc;

    if (errlen) err[0] = 0;
    if (!r || !r->version || !r->resource || !*r->resource)
        return url_fail(err, errlen, "no resource");
    if (ref->ns && !r->namespaced)
        return url_fail(err, errlen, "namespace given for a cluster-scoped resource");
    if (ref->ns && !url_segment_ok(ref->ns)) return url_fail(err, errlen, "invalid namespace");
    if (ref->name && !url_segment_ok(ref->name)) return url_fail(err, errlen, "invalid name");
    if (ref->name && r->namespaced && !ref->ns)
        return url_fail(err, errlen, "namespaced object without a namespace");
    if (ref->subresource && (!ref->name || !url_segment_ok(ref->subresource)))
        return url_fail(err, errlen, "subresource without an object name");

    if (r->group && *r->group)
        rc = buf_printf(out, "%s/apis/%s/%s", server, r->group, r->version);
    else
        rc = buf_printf(out, "%s/api/%s", server, r->version);
    if (!rc && ref->ns) rc = buf_puts(out, "/namespaces/");
    if (!rc && ref->ns) rc = k8s_url_escape(out, ref->ns);
    if (!rc) rc = buf_printf(out, "/%s", r->resource);
    if (!rc && ref->name) rc = buf_putc(out, '/');
    if (!rc && ref->name) rc = k8s_url_escape(out, ref->name);
    if (!rc && ref->subresource) rc = buf_putc(out, '/');
    if (!rc && ref->subresource) rc = k8s_url_escape(out, ref->subresource);
    if (rc) snprintf(err, errlen, "building URL: %s", err_str(rc));
    return rc;
}

int k8s_url_query(struct buf *out, const char *key, const char *value)
{
    if (!value) return 0;
    int rc = buf_putc(out, strchr(buf_cstr(out), '?') ? '&' : '?');
    if (!rc) rc = k8s_url_escape(out, key);
    if (!rc) rc = buf_putc(out, '=');
    if (!rc) rc = k8s_url_escape(out, value);
    return rc;
}
