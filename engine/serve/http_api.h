/* The engine's HTTP surface (ARCHITECTURE.md "Engine ports and paths"): /health, /live, /metrics and
 * the OpenAI routes (/v1/completions, /v1/chat/completions, /v1/models, engine/serve/serve_api.h), which
 * answer 503 until a model is attached, and the routes for routers (/cinfer/tokenizer,
 * /cinfer/kv-events: engine/serve/serve_router.h). Owns the HTTP server, the metrics registry and the engine
 * metrics (engine/serve/serve_metrics.h); JSON stays in this layer and the inference thread only ever
 * sees structs (STYLE.md "Concurrency"). */
#ifndef CINFER_ENGINE_HTTP_API_H
#define CINFER_ENGINE_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>

struct prom_registry;
struct serve_api;
struct serve_metrics;

/* /health answers 200 only while SERVING. UNREADY (the shutdown delay) still serves requests so
 * that load balancers can take the pod out first; DRAINING refuses new ones with 503. */
enum http_api_state {
    HTTP_API_STARTING = 0,
    HTTP_API_SERVING,
    HTTP_API_UNREADY,
    HTTP_API_DRAINING
};

struct http_api_cfg {
    const char *host;      /* borrowed for http_api_start only */
    int port;              /* 0 = ephemeral */
    size_t max_body_bytes; /* request bodies above get 413 */
    /* common/http_server.h's connection settings; 0 (or NULL) keeps its default: */
    const char *allowed_origins; /* CORS; borrowed for http_api_start only */
    int keep_alive_s, header_timeout_s, max_connections, max_connections_per_client;
    const char *model_name; /* the model_name label on every engine metric; borrowed, must
                                 outlive the api */
    bool vllm_compat;       /* also expose each engine metric under its vLLM name */
};

struct http_api; /* opaque */

/* Registers the engine metrics (names from common/metric_names.h, with their vLLM twins, gauges at 0)
 * and process_start_time_seconds, then starts serving in state STARTING. Writes a new api to *out.
 * Returns 0, ERR_INVAL, ERR_IO (cannot bind) or ERR_NOMEM. Main thread. */
int http_api_start(const struct http_api_cfg *cfg, struct http_api **out);

/* Sets the state /health reports. Any thread. */
void http_api_set_state(struct http_api *a, enum http_api_state st);
enum http_api_state http_api_state(const struct http_api *a);

/* The bound port. Any thread. */
int http_api_port(const struct http_api *a);

/* The metrics registry and the engine metrics on it (borrowed; live until http_api_free). Any
 * thread (the registry locks). */
struct prom_registry *http_api_registry(struct http_api *a);
struct serve_metrics *http_api_metrics(struct http_api *a);

/* Attaches the OpenAI handlers' context (borrowed; must stay valid until http_api_shutdown) once
 * the model is loaded; until then the /v1 routes answer 503. Main thread, once. */
void http_api_attach(struct http_api *a, const struct serve_api *api);

/* Attaches the router endpoints (engine/serve/serve_router.h; borrowed, valid until
 * http_api_shutdown) or detaches them (NULL: 503) before they are freed. Main thread. */
struct serve_router;
void http_api_attach_router(struct http_api *a, struct serve_router *sr);

/* Marks DRAINING, refuses new requests and waits up to grace_ms for in-flight ones; returns 0 or
 * ERR_TIMEOUT (the rest were cancelled). Main thread. */
int http_api_shutdown(struct http_api *a, int grace_ms);

/* Shuts down (no grace) if needed and frees. NULL-safe. Main thread. */
void http_api_free(struct http_api *a);

#endif
