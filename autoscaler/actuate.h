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
#include <stdbool.h>
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
    /* For conditions[]: */
    const json_t *prev_conditions; /* borrowed: status.autoscaling.conditions as stored, or NULL */
    bool scale_failed;             /* the /scale write for this decision failed */
    bool held;                     /* a scale-down was held because metrics were missing */
    time_t now;                    /* for lastTransitionTime */
};

/* Condition types of status.autoscaling.conditions, as the HorizontalPodAutoscaler names its own
 * (AbleToScale, ScalingActive, ScalingLimited) plus ObjectiveMet when an objective is set. */
#define ACTUATE_COND_ABLE      "AbleToScale"
#define ACTUATE_COND_ACTIVE    "ScalingActive"
#define ACTUATE_COND_LIMITED   "ScalingLimited"
#define ACTUATE_COND_OBJECTIVE "ObjectiveMet"

/* Returns the new conditions array for `st` (merged with st->prev_conditions so that
 * lastTransitionTime moves only when a status flips), or NULL on ERR_NOMEM. Pure:
 *  AbleToScale    True ReadyForNewScale | False FailedUpdateScale (the /scale write failed)
 *  ScalingActive  True ValidMetricFound | False FailedGetMetrics (no usable engine metrics)
 *  ScalingLimited True TooManyReplicas (maxReplicas) | TooFewReplicas (minReplicas) |
 *                 ScaleUpLimit | ScaleDownLimit (rate policies) | MissingMetrics (a scale-down
 *                 held) | False DesiredWithinRange
 *  ObjectiveMet   True ObjectiveMet | False ObjectiveMissed | ObjectiveInfeasible |
 *                 Unknown TooFewObservations (only with an objective and a decision). */
json_t *actuate_conditions(const struct actuate_status *st);

/* Returns a new merge patch {"status":{"autoscaling":{...}}} (NULL on ERR_NOMEM):
 * observedGeneration, desiredReplicas, reason, lastScaleTime, conditions[] (actuate_conditions),
 * signals{...} and, with `dec`,
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
