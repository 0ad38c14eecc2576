/* The router's client-facing HTTP API on common/http_server: POST /v1/completions and
 * /v1/chat/completions (routed by "model" through the proxy), GET /v1/models (every model the
 * router serves). Handlers run on the HTTP service thread: they read the model field
 * (router_request.h), hash the prompt with the model's engine code when its tokenizer is known
 * (router_model.h), defer the answer and hand the request to the proxy thread. Errors the router
 * answers itself (no model, an unknown model, a body it cannot read when several models exist)
 * have the engine's OpenAI error shape; everything else the engine answers. */
#ifndef CINFER_ROUTER_SERVER_H
#define CINFER_ROUTER_SERVER_H

#include "router/router_policy.h"

#include <stdbool.h>
#include <stddef.h>

struct router_proxy;
struct router_server;

struct router_server_cfg {
    const char *host; /* borrowed for start */
    int port;         /* 0 = ephemeral */
    size_t max_body_bytes;
    const char *session_header; /* NULL/"": no session affinity; borrowed, must outlive */
    bool hash_prompts;          /* compute block hashes (the prefix policy needs them) */
    struct router_proxy *proxy; /* borrowed; must outlive the server */
};

/* Starts serving. *out is new. 0, ERR_INVAL, ERR_IO (cannot bind), ERR_NOMEM. Main thread. */
int router_server_start(const struct router_server_cfg *cfg, struct router_server **out);
int router_server_port(const struct router_server *s);
/* Refuses new requests and waits up to grace_ms for those in flight; ERR_TIMEOUT when some were
 * cut. Main thread. */
int router_server_shutdown(struct router_server *s, int grace_ms);
void router_server_free(struct router_server *s); /* NULL-safe; main thread */

#endif
