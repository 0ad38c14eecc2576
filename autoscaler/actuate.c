/* The autoscaler's API writes and their JSON (see actuate.h). */
#include "autoscaler/actuate.h"

#include "common/conditions.h"
#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const struct k8s_resource actuate_resource_isvcs = {"serving.cinfer.io", "v1alpha1",
                                                    "inferenceservices", true};

/* A finite number, or JSON null (NaN and infinities are not JSON). */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* A positive finite number, or null (0 and negatives mean "none" or "unknown"). */
static json_t *pos(double v)
{
    return isfinite(v) && v > 0 ? json_real(v) : json_null();
}

/* A finite number >= 0, or null (negatives mean "unknown"). */
static json_t *nonneg(double v)
{
    return isfinite(v) && v >= 0 ? json_real(v) : json_null();
}

/* CamelCase reason of a policy limit. */
static const char *limit_reason(const char *limit)
{
    if (!limit) return "DesiredWithinRange";
    if (strcmp(limit, POLICY_LIMIT_MAX) == 0) return "TooManyReplicas";
    if (strcmp(limit, POLICY_LIMIT_MIN) == 0) return "TooFewReplicas";
    if (strcmp(limit, POLICY_LIMIT_UP_RATE) == 0) return "ScaleUpLimit";
    return "ScaleDownLimit";
}

json_t *actuate_conditions(const struct actuate_status *st)
{
    const struct policy_signals *s = st->sig;
    const struct policy_decision *d = st->dec;
    char able[96], active[96], limited[192], objective[192];
    snprintf(able, sizeof(able),
             st->scale_failed ? "the /scale write failed; will retry"
                              : "the /scale subresource accepts writes");
    if (s->metrics_ok)
        snprintf(active, sizeof(active), "engine metrics from %d ready pods", s->ready_pods);
    else
        snprintf(active, sizeof(active), "no usable engine metrics (%d pods not ready)",
                 s->unready_pods);
    const char *lim = d ? d->limit : NULL;
    if (st->held)
        snprintf(limited, sizeof(limited), "scale-down held: metrics missing from some engines");
    else if (lim)
        snprintf(limited, sizeof(limited), "the desired count was bounded by the %s", lim);
    else
        snprintf(limited, sizeof(limited), "the desired count is within range");
    struct condition c[4] = {
        {ACTUATE_COND_ABLE, !st->scale_failed,
         st->scale_failed ? "FailedUpdateScale" : "ReadyForNewScale", able},
        {ACTUATE_COND_ACTIVE, s->metrics_ok,
         s->metrics_ok ? "ValidMetricFound" : "FailedGetMetrics", active},
        {ACTUATE_COND_LIMITED, st->held || lim != NULL,
         st->held ? "MissingMetrics" : limit_reason(lim), limited},
    };
    size_t n = 3;
    if (d && st->spec && policy_spec_has_objective(st->spec)) {
        enum condition_status cs = CONDITION_UNKNOWN;
        const char *reason = "TooFewObservations";
        switch (d->objective) {
        case POLICY_OBJECTIVE_MET:
            cs = CONDITION_TRUE;
            reason = "ObjectiveMet";
            break;
        case POLICY_OBJECTIVE_MISSED:
            cs = CONDITION_FALSE;
            reason = "ObjectiveMissed";
            break;
        case POLICY_OBJECTIVE_INFEASIBLE:
            cs = CONDITION_FALSE;
            reason = "ObjectiveInfeasible";
            break;
        default: break;
        }
        double over = st->spec->objective_ttft_s > 0 ? d->ttft_over : d->itl_over;
        if (over >= 0)
            snprintf(objective, sizeof(objective),
                     "%.2f%% of observations over the objective "
                     "(budget %.2f%%)",
                     100 * over, 100 * (1 - st->spec->objective_percentile));
        else
            snprintf(objective, sizeof(objective), "not enough observations yet");
        c[n++] = (struct condition){ACTUATE_COND_OBJECTIVE, cs, reason, objective};
    }
    return conditions_merge(st->prev_conditions, c, n, st->generation, st->now);
}

json_t *actuate_status_patch(const struct actuate_status *st)
{
    const struct policy_signals *s = st->sig;
    json_t *sig = json_pack(
        "{s:b, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "metricsOk", s->metrics_ok,
        "readyPods", s->ready_pods, "unreadyPods", s->unready_pods, "waiting", num(s->waiting),
        "running", num(s->running), "kvCacheUsage", num(s->kv_usage), "prefixHitRate",
        num(s->prefix_hit_rate), "arrivalRate", num(s->arrival_rate), "promptTokenRate",
        num(s->prompt_tok_rate), "generationTokenRate", num(s->gen_tok_rate), "ttftP99Seconds",
        s->ttft_p99_s >= 0 ? num(s->ttft_p99_s) : json_null());
    if (!sig) return NULL;
    json_t *as = json_pack("{s:I, s:i, s:s, s:o}", "observedGeneration", (json_int_t)st->generation,
                           "desiredReplicas", st->desired, "reason", st->reason ? st->reason : "",
                           "signals", sig);
    if (!as) return NULL;
    json_t *conds = actuate_conditions(st);
    if (!conds || json_object_set_new(as, "conditions", conds) != 0) {
        json_decref(as);
        return NULL;
    }
    if (st->dec && st->spec) {
        const struct policy_decision *d = st->dec;
        const struct policy_spec *sp = st->spec;
        json_t *obj = json_pack(
            "{s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o}", "ttftSeconds", pos(sp->objective_ttft_s),
            "interTokenSeconds", pos(sp->objective_itl_s), "percentile",
            num(sp->objective_percentile), "state", policy_objective_state_name(d->objective),
            "observedTTFTSeconds", pos(d->ttft_s), "observedInterTokenSeconds", pos(d->itl_s),
            "ttftAboveFraction", nonneg(sp->objective_ttft_s > 0 ? d->ttft_over : -1),
            "interTokenAboveFraction", nonneg(sp->objective_itl_s > 0 ? d->itl_over : -1));
        if (!obj || json_object_set_new(as, "objective", obj) != 0) {
            json_decref(as);
            return NULL;
        }
        json_t *cap = json_pack("{s:o, s:o, s:o, s:o}", "workPerReplica", pos(d->capacity_work),
                                "requestsPerReplica", pos(d->capacity_rps), "loadWork",
                                nonneg(d->load_work), "backlogWork", nonneg(d->backlog_work));
        if (!cap || json_object_set_new(as, "capacity", cap) != 0) {
            json_decref(as);
            return NULL;
        }
    }
    if (st->last_scale) {
        char ts[32];
        conditions_format_time(st->last_scale, ts, sizeof(ts));
        if (json_object_set_new(as, "lastScaleTime", json_string(ts)) != 0) {
            json_decref(as);
            return NULL;
        }
    }
    return json_pack("{s:{s:o}}", "status", "autoscaling", as);
}

json_t *actuate_event_new(const char *ns, const char *name, const char *uid, const char *reason,
                          const char *message, time_t now)
{
    char ts[32], gen_name[300];
    conditions_format_time(now, ts, sizeof(ts));
    snprintf(gen_name, sizeof(gen_name), "%s.", name);
    return json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s*}, s:s, s:s, s:s, "
                     "s:{s:s}, s:s, s:s, s:i, s:s}",
                     "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen_name,
                     "namespace", ns, "involvedObject", "apiVersion", "serving.cinfer.io/v1alpha1",
                     "kind", "InferenceService", "name", name, "namespace", ns, "uid", uid, "type",
                     "Normal", "reason", reason, "message", message ? message : "", "source",
                     "component", ACTUATE_FIELD_MANAGER, "firstTimestamp", ts, "lastTimestamp", ts,
                     "count", 1, "reportingComponent", ACTUATE_FIELD_MANAGER);
}

int actuate_scale(struct k8s_client *c, const char *ns, const char *name, int replicas)
{
    struct k8s_ref ref = {&actuate_resource_isvcs, ns, name, "scale"};
    json_t *patch = json_pack("{s:{s:i}}", "spec", "replicas", replicas);
    if (!patch) return ERR_NOMEM;
    int rc = k8s_client_patch(c, &ref, K8S_PATCH_MERGE, patch, NULL, NULL);
    json_decref(patch);
    return rc;
}

int actuate_status_write(struct k8s_client *c, const char *ns, const char *name,
                         const json_t *patch)
{
    struct k8s_ref ref = {&actuate_resource_isvcs, ns, name, "status"};
    return k8s_client_patch(c, &ref, K8S_PATCH_MERGE, patch, NULL, NULL);
}

int actuate_event_record(struct k8s_client *c, const char *ns, const json_t *event)
{
    struct k8s_ref ref = {&k8s_resource_events, ns, NULL, NULL};
    return k8s_client_create(c, &ref, event, NULL);
}

int actuate_deletion_cost(struct k8s_client *c, const char *ns, const char *pod, const char *cost)
{
    struct k8s_ref ref = {&k8s_resource_pods, ns, pod, NULL};
    json_t *patch =
        json_pack("{s:{s:{s:s}}}", "metadata", "annotations", ACTUATE_DELETION_COST, cost);
    if (!patch) return ERR_NOMEM;
    int rc = k8s_client_patch(c, &ref, K8S_PATCH_MERGE, patch, NULL, NULL);
    json_decref(patch);
    return rc;
}
