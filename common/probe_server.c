/* /healthz, /readyz and /metrics for the control-plane programs, on common/http_server. */
#include "common/probe_server.h"

#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/prom/prom.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_METRICS_MAX (16u << 20)

struct probe_server {
    struct http_server *http;
    atomic_bool ready;
    probe_metrics_fn metrics;
    void *ud;
    struct http_route routes[3];
};

int probe_metrics_prom(struct buf *out, void *registry)
{
    return prom_registry_render(registry, out);
}

int probe_register_process_metrics(struct prom_registry *registry)
{
    struct prom_metric *m = NULL;
    struct prom_series *s = NULL;
    int rc = prom_registry_add(registry,
                               &(struct prom_desc){.type = PROM_GAUGE,
                                                   .name = "process_start_time_seconds",
                                                   .help = "Start time of the process since unix "
                                                           "epoch in seconds."},
                               &m);
    if (!rc) rc = prom_series_get(m, NULL, 0, &s);
    if (rc) return rc;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    prom_gauge_set(s, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return 0;
}

int probe_addr_parse(const char *addr, char *host, size_t hostlen, int *port)
{
    if (!addr || hostlen == 0) return ERR_INVAL;
    const char *colon, *h = addr;
    size_t hl;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') return ERR_INVAL;
        h = addr + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || memchr(addr, ':', (size_t)(colon - addr))) return ERR_INVAL;
        hl = (size_t)(colon - addr);
    }
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p)) return ERR_INVAL;
    long v = strtol(p, NULL, 10);
    if (v > 65535 || hl >= hostlen) return ERR_INVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (int)v;
    return 0;
}

static void probe_healthz(struct http_req *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "text/plain", "ok\n", 3, NULL, 0);
}

static void probe_readyz(struct http_req *req, void *ud)
{
    struct probe_server *p = ud;
    if (atomic_load(&p->ready))
        http_respond(req, 200, "text/plain", "ok\n", 3, NULL, 0);
    else
        http_respond(req, 503, "text/plain", "not ready\n", 10, NULL, 0);
}

static void probe_metrics(struct http_req *req, void *ud)
{
    struct probe_server *p = ud;
    struct buf b;
    buf_init(&b, PROBE_METRICS_MAX);
    int rc = p->metrics ? p->metrics(&b, p->ud) : 0;
    if (rc) {
        log_warn("cannot render metrics", LOG_S("err", err_str(rc)));
        http_respond(req, 500, "text/plain", "cannot render metrics\n", 22, NULL, 0);
    } else {
        http_respond(req, 200, PROM_CONTENT_TYPE, b.data, b.len, NULL, 0);
    }
    buf_fini(&b);
}

int probe_server_start(const char *addr, probe_metrics_fn metrics, void *ud,
                       struct probe_server **out)
{
    char host[256];
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    if (probe_addr_parse(addr, host, sizeof(host), &cfg.port) != 0) {
        log_error("invalid probe address (want host:port)", LOG_S("addr", addr));
        return ERR_INVAL;
    }
    struct probe_server *p = calloc(1, sizeof(*p));
    if (!p) return ERR_NOMEM;
    p->metrics = metrics;
    p->ud = ud;
    p->routes[0] = (struct http_route){HTTP_GET, "/healthz", probe_healthz, p};
    p->routes[1] = (struct http_route){HTTP_GET, "/readyz", probe_readyz, p};
    p->routes[2] = (struct http_route){HTTP_GET, "/metrics", probe_metrics, p};
    cfg.host = host;
    cfg.max_body_bytes = 4096;
    /* Few clients (kubelet, Prometheus): small bounds. Idle or slow connections give way to new ones
     * (http_server.h "Limits"), so a probe always gets through. */
    cfg.max_connections = 256;
    cfg.max_connections_per_client = 128;
    cfg.header_timeout_s = 5;
    cfg.request_timeout_s = 10;
    cfg.name = "probe";
    int rc = http_server_start(&cfg, p->routes, 3, &p->http);
    if (rc) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int probe_server_start_standard(const char *addr, struct prom_registry **metrics,
                                struct probe_server **probe)
{
    struct prom_registry *reg = prom_registry_new();
    struct probe_server *p = NULL;
    int rc = reg ? probe_register_process_metrics(reg) : ERR_NOMEM;
    if (rc) {
        log_error("cannot create metrics registry", LOG_S("error", err_str(rc)));
    } else if ((rc = probe_server_start(addr, probe_metrics_prom, reg, &p)) != 0) {
        log_error("cannot serve probes", LOG_S("probe_addr", addr), LOG_S("error", err_str(rc)));
    }
    if (rc) {
        prom_registry_free(reg);
        return rc;
    }
    log_info("started", LOG_S("probe_addr", addr), LOG_I("probe_port", probe_server_port(p)));
    *metrics = reg;
    *probe = p;
    return 0;
}

void probe_server_set_ready(struct probe_server *p, bool ready)
{
    atomic_store(&p->ready, ready);
}

int probe_server_port(const struct probe_server *p)
{
    return http_server_port(p->http);
}

void probe_server_free(struct probe_server *p)
{
    if (!p) return;
    atomic_store(&p->ready, false);
    http_server_shutdown(p->http, 1000);
    http_server_free(p->http);
    free(p);
}
