/* Actuation: the only writes the autoscaler makes to the API server. spec.replicas through the
 * InferenceService /scale subresource, status.autoscaling through a merge patch on /status (other
 * status fields belong to the operator and are left alone), core/v1 Events on scale decisions, and
 * the pod-deletion-cost annotation on engine pods before a scale-down. The JSON builders are pure
 * and tested; the writers are transport (one k8s_client, the caller's thread). */
#ifndef CINFER_AUTOSCALER_ACTUATE_H
#define CINFER_AUTOSCALER_ACTUATE_H

#include "autoscaler/policy.h"
#include "common/k8s/client.h"

#include <jansson.h>
#include <time.h>

#define ACTUATE_FIELD_MANAGER "cinfer-autoscaler"
#define ACTUATE_DELETION_COST "controller.kubernetes.io/pod-deletion-cost"

/* The InferenceService custom resource (serving.cinfer.io/v1alpha1, inferenceservices). */
extern const struct k8s_resource actuate_resource_isvcs;

/* What one decision wrote into status.autoscaling. */
struct actuate_status {
    int desired;                       /* desiredReplicas */
    const char *reason;                /* borrowed */
    time_t last_scale;                 /* lastScaleTime; 0 = leave the stored value alone */
    const struct policy_signals *sig;  /* borrowed; signals{...} */
    const struct policy_decision *dec; /* borrowed or NULL; objective{...}, capacity{...} */
    const struct policy_spec *spec;    /* borrowed or NULL; the objectives echoed */
    long long generation;              /* observedGeneration: the spec this decision used */
};

/* Returns a new merge patch {"status":{"autoscaling":{...}}} (NULL on ERR_NOMEM):
 * observedGeneration, desiredReplicas, reason, lastScaleTime, signals{...} and, with `dec`,
 * objective{ttftSeconds, interTokenSeconds, percentile (the spec's), state (Met, Missed,
 * Infeasible, Unknown, None), observedTTFTSeconds, observedInterTokenSeconds (at the percentile,
 * smoothed over ~3 intervals), ttftAboveFraction, interTokenAboveFraction} and capacity{
 * workPerReplica, requestsPerReplica (learned), loadWork, backlogWork}. Values that are not
 * meaningful (unknown, no objective) are written as null so a stale value does not linger. Pure. */
json_t *actuate_status_patch(const struct actuate_status *st);

/* Returns a new Event object about InferenceService ns/name/uid (borrowed): type "Normal", reason
 * `reason`, message `message`, at `now`. NULL on ERR_NOMEM. Pure. */
json_t *actuate_event_new(const char *ns, const char *name, const char *uid, const char *reason,
                          const char *message, time_t now);

/* Formats `t` as RFC 3339 UTC ("2026-11-29T09:04:41Z") into out (at least 21 bytes). */
void actuate_format_time(time_t t, char *out, size_t outlen);

/* PATCHes /scale of ns/name to `replicas`. Returns 0 or the client's error (message from
 * k8s_client_errmsg). */
int actuate_scale(struct k8s_client *c, const char *ns, const char *name, int replicas);

/* Merge-patches /status of ns/name with `patch` (borrowed). Returns 0 or the client's error. */
int actuate_status_write(struct k8s_client *c, const char *ns, const char *name,
                         const json_t *patch);

/* Creates `event` (borrowed) in ns. Returns 0 or the client's error. */
int actuate_event_record(struct k8s_client *c, const char *ns, const json_t *event);

/* Sets the pod-deletion-cost annotation of pod ns/pod to `cost` (borrowed decimal int32 text, as
 * victims_costs() writes it). Returns 0 or the client's error. */
int actuate_deletion_cost(struct k8s_client *c, const char *ns, const char *pod, const char *cost);

#endif
