/* Registration of the router's metric families and per-model series (see router_metrics.h). */
#include "router/router_metrics.h"

#include "common/err.h"
#include "common/metric_names.h"
#include "common/prom/prom.h"

#include <stdio.h>
#include <stdlib.h>

struct router_metrics {
    struct prom_metric *held, *hold_timeouts, *hold_rejected, *decisions, *retries, *usage_reports,
        *prompt_tokens, *cached, *ttfb, *duration, *broken, *index_blocks, *replicas, *requests,
        *inflight, *responses;
};

static const char *const l_model[] = {"model_name"};
static const char *const l_reason[] = {"model_name", "reason"};
static const char *const l_source[] = {"model_name", "source"};
static const char *const l_state[] = {"model_name", "state"};
static const char *const l_replica[] = {"model_name", "replica"};
static const char *const l_code[] = {"model_name", "code"};

static const char *const retry_names[ROUTER_RETRY_COUNT] = {"connect", "unavailable", "busy"};

static int add(struct prom_registry *r, enum prom_type t, const char *name, const char *help,
               const char *const *labels, size_t n, struct prom_metric **out)
{
    static const double latency[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
    bool h = t == PROM_HISTOGRAM;
    struct prom_desc d = {
        t, name, help, labels, n, h ? latency : NULL, h ? sizeof(latency) / sizeof(latency[0]) : 0};
    return prom_registry_add(r, &d, out);
}

int router_metrics_new(struct prom_registry *r, struct router_metrics **out)
{
    struct router_metrics *m = calloc(1, sizeof(*m));
    if (!m) return ERR_NOMEM;
    int rc = add(r, PROM_GAUGE, METRIC_ROUTER_REQUESTS_HELD, METRIC_HELP_ROUTER_REQUESTS_HELD,
                 l_model, 1, &m->held);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_hold_timeouts_total",
                 "Held requests answered 503 because no replica became ready in time.", l_model, 1,
                 &m->hold_timeouts);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_hold_rejected_total",
                 "Requests answered 503 at once because the hold queue was full.", l_model, 1,
                 &m->hold_rejected);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_routing_decisions_total",
                 "Replica choices by reason (prefix, load, bounded, session, random).", l_reason, 2,
                 &m->decisions);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_retries_total",
                 "Requests sent again to another replica before their first byte, by reason.",
                 l_reason, 2, &m->retries);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_usage_reports_total",
                 "Responses whose usage the router read (the cached-token counters cover these).",
                 l_model, 1, &m->usage_reports);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_prompt_tokens_total",
                 "Prompt tokens of the responses with a usage report.", l_model, 1,
                 &m->prompt_tokens);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_cached_tokens_total",
                 "Cached prompt tokens of the responses with a usage report: source=predicted (the "
                 "router's index when it chose the replica) or delivered (the engine's "
                 "usage.prompt_tokens_details.cached_tokens).",
                 l_source, 2, &m->cached);
    if (!rc)
        rc = add(r, PROM_HISTOGRAM, "cinfer_router_upstream_first_byte_seconds",
                 "Seconds from sending a request to an engine to its first response byte.", l_model,
                 1, &m->ttfb);
    if (!rc)
        rc = add(r, PROM_HISTOGRAM, "cinfer_router_request_duration_seconds",
                 "Seconds from a request's arrival at the router to the end of its response.",
                 l_model, 1, &m->duration);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_upstream_broken_total",
                 "Responses cut because the engine failed after streaming had begun.", l_model, 1,
                 &m->broken);
    if (!rc)
        rc = add(r, PROM_GAUGE, "cinfer_router_index_blocks",
                 "KV blocks the router's prefix index holds for the model's replicas.", l_model, 1,
                 &m->index_blocks);
    if (!rc)
        rc = add(r, PROM_GAUGE, "cinfer_router_replicas",
                 "Replicas by state: eligible (ready, healthy, not terminating) or ineligible.",
                 l_state, 2, &m->replicas);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_upstream_requests_total",
                 "Requests sent to each replica (every attempt).", l_replica, 2, &m->requests);
    if (!rc)
        rc = add(r, PROM_GAUGE, "cinfer_router_upstream_inflight",
                 "Requests this router has in flight to each replica.", l_replica, 2, &m->inflight);
    if (!rc)
        rc = add(r, PROM_COUNTER, "cinfer_router_responses_total",
                 "Responses to clients by HTTP status.", l_code, 2, &m->responses);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void router_metrics_free(struct router_metrics *m)
{
    free(m);
}

static int get1(struct prom_metric *f, const char *model, struct prom_series **out)
{
    return prom_series_get(f, (const char *const[]){model}, 1, out);
}

static int get2(struct prom_metric *f, const char *model, const char *v, struct prom_series **out)
{
    return prom_series_get(f, (const char *const[]){model, v}, 2, out);
}

int router_metrics_model(struct router_metrics *m, const char *model,
                         struct router_model_metrics *out)
{
    int rc = get1(m->held, model, &out->held);
    if (!rc) rc = get1(m->hold_timeouts, model, &out->hold_timeouts);
    if (!rc) rc = get1(m->hold_rejected, model, &out->hold_rejected);
    for (int i = 0; !rc && i < ROUTER_REASON_COUNT; i++)
        rc = get2(m->decisions, model, router_reason_name(i), &out->decisions[i]);
    for (int i = 0; !rc && i < ROUTER_RETRY_COUNT; i++)
        rc = get2(m->retries, model, retry_names[i], &out->retries[i]);
    if (!rc) rc = get1(m->usage_reports, model, &out->usage_reports);
    if (!rc) rc = get1(m->prompt_tokens, model, &out->prompt_tokens);
    if (!rc) rc = get2(m->cached, model, "predicted", &out->cached_predicted);
    if (!rc) rc = get2(m->cached, model, "delivered", &out->cached_delivered);
    if (!rc) rc = get1(m->ttfb, model, &out->ttfb);
    if (!rc) rc = get1(m->duration, model, &out->duration);
    if (!rc) rc = get1(m->broken, model, &out->broken);
    if (!rc) rc = get1(m->index_blocks, model, &out->index_blocks);
    if (!rc) rc = get2(m->replicas, model, "eligible", &out->eligible);
    if (!rc) rc = get2(m->replicas, model, "ineligible", &out->ineligible);
    return rc;
}

int router_metrics_replica(struct router_metrics *m, const char *model, const char *replica,
                           struct prom_series **requests, struct prom_series **inflight)
{
    int rc = get2(m->requests, model, replica, requests);
    return rc ? rc : get2(m->inflight, model, replica, inflight);
}

int router_metrics_response(struct router_metrics *m, const char *model, int status,
                            struct prom_series **out)
{
    char code[8];
    snprintf(code, sizeof(code), "%d", status);
    return get2(m->responses, model, code, out);
}
