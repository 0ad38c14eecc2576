/* The router's proxy: one thread running a libcurl multi handle that owns everything that moves
 * (ARCHITECTURE.md, router contract): per model its replicas (from discovery), each replica's KV
 * block index (followed from its /cinfer/kv-events stream), its load (the engine's load lines and
 * our own requests in flight) and health (/health), the model's tokenizer document, the requests
 * in flight to engines, and the requests held while a model has no eligible replica.
 *
 * A request (struct router_job) comes from the HTTP thread (router/router_server.c) with its
 * deferred client stream and, when the model's tokenizer is known, its chained block hashes. The
 * proxy thread picks a replica (router/router_policy.h), streams the engine's answer to the client
 * with back-pressure (a full client queue pauses the transfer), retries on another replica when
 * the engine refused or failed before the first byte reached the client (connection refused or
 * reset, 503, 429; at most max_attempts in all), never after, and closes the upstream connection
 * at once when the client goes away (the engine then cancels the request).
 *
 * Why libcurl's multi interface and not a client of our own: it gives the event loop, keep-alive
 * connection reuse, chunked decoding, connect timeouts, pause/resume per transfer (back-pressure)
 * and removal of a transfer at any moment (cancellation), all already used by common/ and tested.
 *
 * Threads: router_proxy_* functions are thread-safe unless noted; the job's fields after the first
 * block are the proxy thread's. */
#ifndef CINFER_ROUTER_PROXY_H
#define CINFER_ROUTER_PROXY_H

#include "router/router_model.h"
#include "router/router_policy.h"
#include "router/router_request.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_stream;
struct router_metrics;
struct router_proxy;

#define ROUTER_URL_MAX      512
#define ROUTER_KEY_MAX      512
#define ROUTER_MAX_ATTEMPTS 8
#define ROUTER_PATH_MAX     32

struct router_proxy_cfg {
    struct router_policy_cfg policy;
    int max_attempts;               /* attempts per request, 1..ROUTER_MAX_ATTEMPTS */
    int connect_timeout_ms;         /* to an engine */
    int health_interval_ms;         /* between /health probes of each replica */
    int failure_backoff_ms;         /* a replica that refused a connection rests this long */
    int hold_timeout_ms;            /* a held request gets 503 after this long */
    int hold_max;                   /* held requests per model; more get 503 at once */
    size_t index_max_blocks;        /* hashes kept per replica */
    const char *engine_api_key;     /* for the router's own engine requests; borrowed; NULL: none */
    struct router_metrics *metrics; /* borrowed */
};

/* One replica of a model as discovery sees it. */
struct router_endpoint {
    char key[ROUTER_KEY_MAX]; /* stable identity: pod name (or UID), or the URL */
    char url[ROUTER_URL_MAX]; /* "http://10.0.0.7:8000", no trailing slash */
    bool ready;               /* Kubernetes says Ready (always true with --target) */
    bool terminating;         /* being deleted: no new requests */
};

/* A client request. The HTTP thread fills the first block, then hands it over. */
struct router_job {
    struct http_stream *stream; /* owned: the deferred answer */
    char model[ROUTER_MODEL_MAX];
    char path[ROUTER_PATH_MAX]; /* "/v1/completions" or "/v1/chat/completions" */
    char *body;                 /* owned, body_len bytes */
    size_t body_len;
    struct router_prompt prompt; /* n_blocks 0 when not hashed */
    char request_id[ROUTER_REQUEST_ID_MAX];
    char *authorization; /* the client's Authorization header value, owned, or NULL */
    uint64_t session;    /* hash of the session header, 0 = none */
    double arrival;      /* monotonic seconds */

    struct router_job_state *st; /* the proxy thread's (router_proxy.c) */
};

/* Creates the proxy and starts its thread. `cfg` borrowed (copied). *out is new. */
int router_proxy_start(const struct router_proxy_cfg *cfg, struct router_proxy **out);
/* Stops the thread: every request in flight or held is ended (held ones with 503), transfers
 * closed. Idempotent. Owning thread, after the HTTP server stopped taking requests. */
void router_proxy_stop(struct router_proxy *p);
void router_proxy_free(struct router_proxy *p); /* stops; NULL-safe */

/* Sets model `name`'s replicas to eps[0..n) (copied; replaces the previous set, creating the model
 * when new). 0, ERR_INVAL (empty or over-long name), ERR_NOMEM. */
int router_proxy_set_model(struct router_proxy *p, const char *name,
                           const struct router_endpoint *eps, size_t n);
/* Forgets a model: its held requests get 404, requests in flight finish. */
int router_proxy_remove_model(struct router_proxy *p, const char *name);

/* A new empty job (the proxy's part allocated), or NULL on ERR_NOMEM. Any thread. */
struct router_job *router_job_new(void);
/* Hands a job over (taken, even on failure: the proxy answers it). */
void router_proxy_submit(struct router_proxy *p, struct router_job *job);
/* Frees a job that was never submitted. NULL-safe. */
void router_job_free(struct router_job *job);

/* The http_stream_on_cancel hook of every client stream (ud = the proxy): wakes the proxy thread,
 * which ends the requests whose clients are gone. Service thread; never blocks. */
void router_proxy_client_gone(void *proxy);

/* Whether `name` is a model the router serves: 0 and a new reference to its model info in *info
 * (NULL while not fetched yet), or ERR_NOT_FOUND. Any thread. */
int router_proxy_model_info(struct router_proxy *p, const char *name,
                            struct router_model_info **info);
/* The only model's name into out when exactly one is known (requests without "model"); false
 * otherwise. */
bool router_proxy_only_model(struct router_proxy *p, char *out, size_t outlen);
/* The /v1/models object listing every model (new reference), or NULL on ERR_NOMEM. */
json_t *router_proxy_models_json(struct router_proxy *p);
/* Models known, and models with at least one eligible replica (for /readyz and tests). */
void router_proxy_counts(struct router_proxy *p, int *models, int *serving);

#endif
