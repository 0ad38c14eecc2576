/* --target (out-of-cluster mode): fixed engines per model instead of discovery, as
 * "model=url,url,other=url": a name= starts a model's list, bare URLs continue it. URLs are the
 * engine's base (http://host:port, no path). Pure. */
#ifndef CINFER_ROUTER_TARGETS_H
#define CINFER_ROUTER_TARGETS_H

#include "router/router_proxy.h"

#include <stddef.h>

struct router_target {
    char model[ROUTER_MODEL_MAX];
    struct router_endpoint ep;
};

struct router_targets {
    struct router_target *v; /* owned */
    size_t n;
};

/* Parses `text` (borrowed; NULL or "" gives none) into *out (router_targets_fini). Returns 0,
 * ERR_INVAL with a message in err (a URL before any model, an empty entry, a URL that is not
 * http:// or https://, a path after the host, a name or URL too long, the same URL twice for a
 * model), or ERR_NOMEM. */
int router_targets_parse(const char *text, struct router_targets *out, char *err, size_t errlen);
void router_targets_fini(struct router_targets *t); /* NULL-safe */

#endif
