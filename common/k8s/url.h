/* URL building for Kubernetes API requests: the path of a resource reference
 * (/api/v1/namespaces/NS/pods/NAME/status, /apis/GROUP/VERSION/RESOURCE) and escaped query
 * parameters. Pure functions: no I/O, any thread. */
#ifndef CINFER_COMMON_K8S_URL_H
#define CINFER_COMMON_K8S_URL_H

#include "common/buf.h"
#include "common/k8s/resource.h"

#include <stddef.h>

/* Appends `s` (borrowed) percent-encoded: RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~)
 * stay, every other byte becomes %XX. Returns 0, ERR_TOO_BIG or ERR_NOMEM. */
int k8s_url_escape(struct buf *out, const char *s);

/* Appends `server` (borrowed, no trailing slash) and the path of `ref` (borrowed) to `out`.
 * Returns ERR_INVAL with a message in `err` when the reference is inconsistent: no resource, a
 * namespace on a cluster-scoped kind, a named namespaced object without a namespace, a
 * subresource without a name, or an empty / "." / ".." name or namespace. */
int k8s_url_build(struct buf *out, const char *server, const struct k8s_ref *ref, char *err,
                  size_t errlen);

/* Appends "?key=value" (or "&key=value" when `out` already has a query), both escaped. A NULL
 * value appends nothing. Returns 0, ERR_TOO_BIG or ERR_NOMEM. */
int k8s_url_query(struct buf *out, const char *key, const char *value);

#endif
