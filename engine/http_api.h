/* The engine's HTTP surface (ARCHITECTURE.md "Engine ports and paths"): /health, /live and /metrics
 * now; the OpenAI routes (/v1/completions, /v1/chat/completions, /v1/models) plug into the same route
 * table when inference lands. Owns the HTTP server and the metrics registry; JSON stays in this layer
 * and the inference thread only ever sees structs (STYLE.md "Concurrency"). */
#ifndef CINFER_ENGINE_HTTP_API_H
#define CINFER_ENGINE_HTTP_API_H

#include <stddef.h>

struct prom_registry;

/* /health answers 200 only while SERVING. */
enum http_api_state { HTTP_API_STARTING = 0, HTTP_API_SERVING, HTTP_API_DRAINING };

struct http_api_cfg {
    const char *host;       /* borrowed for http_api_start only */
    int port;               /* 0 = ephemeral */
    size_t max_body_bytes;  /* request bodies above get 413 */
    const char *model_name; /* the model_name label on every engine metric; borrowed, must
                                 outlive the api */
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

/* The metrics registry (borrowed; lives until http_api_free) for the scheduler to register and update
 * its series. Any thread (the registry locks). */
struct prom_registry *http_api_registry(struct http_api *a);

/* Marks DRAINING, refuses new requests and waits up to grace_ms for in-flight ones; returns 0 or
 * ERR_TIMEOUT (the rest were cancelled). Main thread. */
int http_api_shutdown(struct http_api *a, int grace_ms);

/* Shuts down (no grace) if needed and frees. NULL-safe. Main thread. */
void http_api_free(struct http_api *a);

#endif
