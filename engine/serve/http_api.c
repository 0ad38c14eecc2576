/* Engine HTTP routes and the metrics they expose. Handlers run on the HTTP service thread; the
 * state flag and the prom registry are the only things shared with other threads. */
#include "engine/serve/http_api.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "common/probe_server.h"
#include "common/prom/prom.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_router.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_API_METRICS_MAX (16u << 20)

struct http_api {
    struct http_server *srv;
    struct prom_registry *reg;
    struct serve_metrics *metrics;
    const char *model_name;
    atomic_int state;
    _Atomic(const struct serve_api *) serve;
    char *model_path; /* "/v1/models/<model name>" */
    struct http_route routes[9];
    _Atomic(struct serve_router *) router;
};

/* True once the inference loop gave up on a broken backend (serve_loop_faulted). */
static bool http_api_faulted(const struct http_api *a)
{
    const struct serve_api *api = atomic_load(&a->serve);
    return api && api->loop && serve_loop_faulted(api->loop);
}

static void http_api_respond_faulted(struct http_req *req)
{
    static const char body[] = "{\"status\":\"faulted\"}";
    http_respond(req, 503, "application/json", body, sizeof(body) - 1, NULL, 0);
}

static void http_api_health(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    if (http_api_faulted(a)) {
        http_api_respond_faulted(req);
        return;
    }
    switch (http_api_state(a)) {
    case HTTP_API_SERVING:
        http_respond(req, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, 0);
        break;
    case HTTP_API_STARTING:
        http_respond(req, 503, "application/json", "{\"status\":\"starting\"}", 21, NULL, 0);
        break;
    case HTTP_API_UNREADY:
    case HTTP_API_DRAINING:
        http_respond(req, 503, "application/json", "{\"status\":\"draining\"}", 21, NULL, 0);
        break;
    }
}

/* Liveness: the process answers, unless the engine is faulted for good. A faulted engine cannot
 * recover by itself, so /live fails too and the kubelet's liveness probe restarts the container
 * (the operator sets livenessProbe /live, readinessProbe /health: operator/desired.c). */
static void http_api_live(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    if (http_api_faulted(a)) {
        http_api_respond_faulted(req);
        return;
    }
    http_respond(req, 200, "application/json", "{\"status\":\"alive\"}", 18, NULL, 0);
}

static void http_api_render_metrics(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    struct buf b;
    buf_init(&b, HTTP_API_METRICS_MAX);
    int rc = prom_registry_render(a->reg, &b);
    if (rc) {
        log_warn("cannot render metrics", LOG_S("err", err_str(rc)));
        http_respond_error(req, 500, "server_error", "cannot render metrics");
    } else {
        http_respond(req, 200, PROM_CONTENT_TYPE, b.data, b.len, NULL, 0);
    }
    buf_fini(&b);
}

static enum serve_api_gate http_api_gate(const struct http_api *a)
{
    if (http_api_faulted(a)) return SERVE_API_FAULTED;
    switch (http_api_state(a)) {
    case HTTP_API_SERVING:
    case HTTP_API_UNREADY: return SERVE_API_OPEN;
    case HTTP_API_DRAINING: return SERVE_API_DRAINING;
    case HTTP_API_STARTING: break;
    }
    return SERVE_API_LOADING;
}

static void http_api_completions(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_api_completions(atomic_load(&a->serve), http_api_gate(a), req);
}

static void http_api_chat(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_api_chat(atomic_load(&a->serve), http_api_gate(a), req);
}

static void http_api_models(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_api_models(atomic_load(&a->serve), a->model_name, req);
}

/* GET /v1/models/{id}. Routes match exact paths: other ids get the server's 404. */
static void http_api_model(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_api_model(atomic_load(&a->serve), a->model_name, req);
}

static void http_api_router_tokenizer(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_router_tokenizer(atomic_load(&a->router), req);
}

static void http_api_router_events(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    serve_router_events(atomic_load(&a->router), req);
}

int http_api_start(const struct http_api_cfg *cfg, struct http_api **out)
{
    if (!cfg->model_name) return ERR_INVAL;
    struct http_api *a = calloc(1, sizeof(*a));
    if (!a) return ERR_NOMEM;
    int rc = ERR_NOMEM;
    a->model_name = cfg->model_name;
    atomic_init(&a->serve, NULL);
    size_t mp = strlen(SERVE_API_MODELS_PREFIX) + strlen(cfg->model_name) + 1;
    a->model_path = malloc(mp);
    if (!a->model_path) goto fail;
    snprintf(a->model_path, mp, "%s%s", SERVE_API_MODELS_PREFIX, cfg->model_name);
    atomic_init(&a->router, NULL);
    a->reg = prom_registry_new();
    if (!a->reg) goto fail;
    if ((rc = probe_register_process_metrics(a->reg)) != 0 ||
        (rc = serve_metrics_new(a->reg, cfg->model_name, cfg->vllm_compat, &a->metrics)) != 0)
        goto fail;
    a->routes[0] = (struct http_route){HTTP_GET, "/health", http_api_health, a};
    a->routes[1] = (struct http_route){HTTP_GET, "/live", http_api_live, a};
    a->routes[2] = (struct http_route){HTTP_GET, "/metrics", http_api_render_metrics, a};
    a->routes[3] = (struct http_route){HTTP_POST, "/v1/completions", http_api_completions, a};
    a->routes[4] = (struct http_route){HTTP_POST, "/v1/chat/completions", http_api_chat, a};
    a->routes[5] = (struct http_route){HTTP_GET, "/v1/models", http_api_models, a};
    a->routes[6] = (struct http_route){HTTP_GET, a->model_path, http_api_model, a};
    a->routes[7] =
        (struct http_route){HTTP_GET, SERVE_ROUTER_TOKENIZER_PATH, http_api_router_tokenizer, a};
    a->routes[8] =
        (struct http_route){HTTP_GET, SERVE_ROUTER_EVENTS_PATH, http_api_router_events, a};
    struct http_server_cfg hc = HTTP_SERVER_CFG_DEFAULT;
    hc.host = cfg->host;
    hc.port = cfg->port;
    hc.max_body_bytes = cfg->max_body_bytes;
    hc.allowed_origins = cfg->allowed_origins;
    if (cfg->keep_alive_s) hc.idle_timeout_s = cfg->keep_alive_s;
    if (cfg->header_timeout_s) hc.header_timeout_s = cfg->header_timeout_s;
    if (cfg->max_connections) hc.max_connections = cfg->max_connections;
    if (cfg->max_connections_per_client)
        hc.max_connections_per_client = cfg->max_connections_per_client;
    hc.name = "engine";
    atomic_store(&a->state, HTTP_API_STARTING);
    if ((rc = http_server_start(&hc, a->routes, ARRAY_LEN(a->routes), &a->srv)) != 0) goto fail;
    *out = a;
    return 0;
fail:
    serve_metrics_free(a->metrics);
    prom_registry_free(a->reg);
    free(a->model_path);
    free(a);
    return rc;
}

void http_api_set_state(struct http_api *a, enum http_api_state st)
{
    atomic_store(&a->state, (int)st);
}

enum http_api_state http_api_state(const struct http_api *a)
{
    return (enum http_api_state)atomic_load(&a->state);
}

int http_api_port(const struct http_api *a)
{
    return http_server_port(a->srv);
}

struct prom_registry *http_api_registry(struct http_api *a)
{
    return a->reg;
}

struct serve_metrics *http_api_metrics(struct http_api *a)
{
    return a->metrics;
}

void http_api_attach(struct http_api *a, const struct serve_api *api)
{
    atomic_store(&a->serve, api);
}

void http_api_attach_router(struct http_api *a, struct serve_router *sr)
{
    atomic_store(&a->router, sr);
}

int http_api_shutdown(struct http_api *a, int grace_ms)
{
    http_api_set_state(a, HTTP_API_DRAINING);
    return http_server_shutdown(a->srv, grace_ms);
}

void http_api_free(struct http_api *a)
{
    if (!a) return;
    http_api_set_state(a, HTTP_API_DRAINING);
    http_server_free(a->srv);
    serve_metrics_free(a->metrics);
    prom_registry_free(a->reg);
    free(a->model_path);
    free(a);
}
