/* Engine HTTP routes and the metrics they expose. Handlers run on the HTTP service thread; the
 * state flag and the prom registry are the only things shared with other threads. */
#include "engine/http_api.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "common/probe_server.h"
#include "common/prom.h"

#include <stdatomic.h>
#include <stdlib.h>

#define HTTP_API_METRICS_MAX (16u << 20)

struct http_api {
    struct http_server *srv;
    struct prom_registry *reg;
    atomic_int state;
    struct http_route routes[3];
};

static void http_api_health(struct http_req *req, void *ud)
{
    struct http_api *a = ud;
    switch (http_api_state(a)) {
    case HTTP_API_SERVING:
        http_respond(req, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, 0);
        break;
    case HTTP_API_STARTING:
        http_respond(req, 503, "application/json", "{\"status\":\"starting\"}", 21, NULL, 0);
        break;
    case HTTP_API_DRAINING:
        http_respond(req, 503, "application/json", "{\"status\":\"draining\"}", 21, NULL, 0);
        break;
    }
}

static void http_api_live(struct http_req *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "application/json", "{\"status\":\"alive\"}", 18, NULL, 0);
}

static void http_api_metrics(struct http_req *req, void *ud)
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

/* Registers one gauge under its native and vLLM names with the model_name series at 0. */
static int http_api_gauge(struct prom_registry *reg, const char *name, const char *vllm,
                          const char *help, const char *model)
{
    static const char *const labels[] = {METRIC_LABEL_MODEL_NAME};
    struct prom_metric *m = NULL;
    struct prom_series *s = NULL;
    int rc = prom_registry_add(
        reg,
        &(struct prom_desc){
            .type = PROM_GAUGE, .name = name, .help = help, .labels = labels, .n_labels = 1},
        &m);
    if (!rc) rc = prom_metric_alias(m, vllm, NULL);
    if (!rc) rc = prom_series_get(m, (const char *const[]){model}, 1, &s);
    if (!rc) prom_gauge_set(s, 0);
    return rc;
}

static int http_api_register_metrics(struct prom_registry *reg, const char *model)
{
    int rc = probe_register_process_metrics(reg);
    if (!rc)
        rc = http_api_gauge(reg, METRIC_REQUESTS_RUNNING, METRIC_VLLM_REQUESTS_RUNNING,
                            METRIC_HELP_REQUESTS_RUNNING, model);
    if (!rc)
        rc = http_api_gauge(reg, METRIC_REQUESTS_WAITING, METRIC_VLLM_REQUESTS_WAITING,
                            METRIC_HELP_REQUESTS_WAITING, model);
    if (!rc)
        rc = http_api_gauge(reg, METRIC_KV_CACHE_USAGE, METRIC_VLLM_KV_CACHE_USAGE,
                            METRIC_HELP_KV_CACHE_USAGE, model);
    return rc;
}

int http_api_start(const struct http_api_cfg *cfg, struct http_api **out)
{
    if (!cfg->model_name) return ERR_INVAL;
    struct http_api *a = calloc(1, sizeof(*a));
    if (!a) return ERR_NOMEM;
    int rc = ERR_NOMEM;
    a->reg = prom_registry_new();
    if (!a->reg) goto fail;
    if ((rc = http_api_register_metrics(a->reg, cfg->model_name)) != 0) goto fail;
    a->routes[0] = (struct http_route){HTTP_GET, "/health", http_api_health, a};
    a->routes[1] = (struct http_route){HTTP_GET, "/live", http_api_live, a};
    a->routes[2] = (struct http_route){HTTP_GET, "/metrics", http_api_metrics, a};
    struct http_server_cfg hc = HTTP_SERVER_CFG_DEFAULT;
    hc.host = cfg->host;
    hc.port = cfg->port;
    hc.max_body_bytes = cfg->max_body_bytes;
    hc.name = "engine";
    atomic_store(&a->state, HTTP_API_STARTING);
    if ((rc = http_server_start(&hc, a->routes, ARRAY_LEN(a->routes), &a->srv)) != 0) goto fail;
    *out = a;
    return 0;
fail:
    prom_registry_free(a->reg);
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
    prom_registry_free(a->reg);
    free(a);
}
