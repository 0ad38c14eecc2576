/* The router's metrics (on its probe address's /metrics), per model (label model_name) and for the
 * requests per replica: routing decisions by reason, predicted vs delivered cached tokens (over the
 * requests whose usage the engine reported), held requests, retries, upstream latency. Families are
 * registered once at start; series are looked up once per model or replica and kept. Any thread
 * (the registry locks), but in practice the proxy thread. */
#ifndef CINFER_ROUTER_METRICS_H
#define CINFER_ROUTER_METRICS_H

#include "router/router_policy.h"

struct prom_registry;
struct prom_series;
struct router_metrics; /* the families */

enum router_retry_reason {
    ROUTER_RETRY_CONNECT = 0, /* refused, reset or timed out before any answer */
    ROUTER_RETRY_UNAVAILABLE, /* 503: loading, draining, faulted */
    ROUTER_RETRY_BUSY,        /* 429: the engine's queue is full */
    ROUTER_RETRY_COUNT
};

/* One model's series. */
struct router_model_metrics {
    struct prom_series *held, *hold_timeouts, *hold_rejected;
    struct prom_series *decisions[ROUTER_REASON_COUNT];
    struct prom_series *retries[ROUTER_RETRY_COUNT];
    struct prom_series *usage_reports, *prompt_tokens, *cached_predicted, *cached_delivered;
    struct prom_series *ttfb, *duration, *broken, *index_blocks;
    struct prom_series *eligible, *ineligible;
};

/* Registers the families in `r` (borrowed; must outlive the result). *out is new. */
int router_metrics_new(struct prom_registry *r, struct router_metrics **out);
void router_metrics_free(struct router_metrics *m); /* NULL-safe */

/* Fills *out with the series of `model` (borrowed). 0 or ERR_NOMEM / ERR_INVAL. */
int router_metrics_model(struct router_metrics *m, const char *model,
                         struct router_model_metrics *out);
/* The requests counter and the in-flight gauge of (model, replica); the response counter of
 * (model, HTTP status). */
int router_metrics_replica(struct router_metrics *m, const char *model, const char *replica,
                           struct prom_series **requests, struct prom_series **inflight);
int router_metrics_response(struct router_metrics *m, const char *model, int status,
                            struct prom_series **out);

#endif
