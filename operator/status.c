/* InferenceService status and conditions from observed state (see status.h). */
#include "operator/status.h"

#include "common/conditions.h"
#include "common/json_util.h"
#include "operator/desired.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Container waiting reasons that will not fix themselves without a person. */
static const char *const failing_reasons[] = {
    "ImagePullBackOff", "ErrImagePull",         "CrashLoopBackOff",  "CreateContainerConfigError",
    "InvalidImageName", "CreateContainerError", "RunContainerError",
};

struct pod_problem {
    const char *reason;
    char message[512];
};

static bool is_failing_reason(const char *r)
{
    for (size_t i = 0; r && i < sizeof(failing_reasons) / sizeof(failing_reasons[0]); i++)
        if (strcmp(r, failing_reasons[i]) == 0) return true;
    return false;
}

/* Looks through one container status list for a failure; fills `p` and returns true on the first. */
static bool container_problem(const char *pod, const json_t *statuses, bool init,
                              struct pod_problem *p)
{
    size_t i;
    json_t *cs;
    json_array_foreach(statuses, i, cs)
    {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const json_t *waiting = json_object_get(json_object_get(cs, "state"), "waiting");
        const json_t *term = json_object_get(json_object_get(cs, "state"), "terminated");
        const char *reason = json_string_value(json_object_get(waiting, "reason"));
        const char *msg = json_string_value(json_object_get(waiting, "message"));
        if (!reason) { /* an init container that failed and is being retried */
            const json_t *last = json_object_get(json_object_get(cs, "lastState"), "terminated");
            if (init && (json_util_int_at(term, "exitCode", NULL, 0) != 0 ||
                         json_util_int_at(last, "exitCode", NULL, 0)))
                reason = "CrashLoopBackOff";
        }
        if (!is_failing_reason(reason)) continue;
        /* The download or the checksum itself failed (it ran and exited non-zero); an image that
         * cannot be pulled keeps its own reason, whichever container it is for. */
        bool ran = init && name && strcmp(reason, "CrashLoopBackOff") == 0;
        p->reason = ran && strcmp(name, "fetch-model") == 0          ? "ModelFetchFailed"
                    : ran && strcmp(name, "verify-model") == 0       ? "ModelVerifyFailed"
                    : ran && strcmp(name, "fetch-draft-model") == 0  ? "DraftModelFetchFailed"
                    : ran && strcmp(name, "verify-draft-model") == 0 ? "DraftModelVerifyFailed"
                                                                     : reason;
        snprintf(p->message, sizeof(p->message), "pod %s: container %s: %s%s%s", pod,
                 name ? name : "?", reason, msg ? ": " : "", msg ? msg : "");
        return true;
    }
    return false;
}

static bool find_pod_problem(const json_t *pods, struct pod_problem *p)
{
    size_t i;
    json_t *pod;
    json_array_foreach(pods, i, pod)
    {
        const char *name =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
        const json_t *st = json_object_get(pod, "status");
        if (!name) name = "?";
        if (container_problem(name, json_object_get(st, "initContainerStatuses"), true, p) ||
            container_problem(name, json_object_get(st, "containerStatuses"), false, p))
            return true;
        size_t j;
        json_t *c;
        json_array_foreach(json_object_get(st, "conditions"), j, c)
        {
            const char *type = json_string_value(json_object_get(c, "type"));
            const char *reason = json_string_value(json_object_get(c, "reason"));
            if (type && reason && strcmp(type, "PodScheduled") == 0 &&
                strcmp(reason, "Unschedulable") == 0) {
                const char *msg = json_string_value(json_object_get(c, "message"));
                p->reason = "Unschedulable";
                snprintf(p->message, sizeof(p->message), "pod %s: %s", name,
                         msg ? msg : "cannot be scheduled");
                return true;
            }
        }
    }
    return false;
}

/* The Deployment's own condition of `type` when its status is `status`, else NULL. */
static const json_t *deployment_condition(const json_t *dep, const char *type, const char *status)
{
    const json_t *c =
        conditions_find(json_object_get(json_object_get(dep, "status"), "conditions"), type);
    const char *s = json_string_value(json_object_get(c, "status"));
    return s && strcmp(s, status) == 0 ? c : NULL;
}

json_t *status_compute(const struct status_input *in)
{
    const json_t *meta = json_object_get(in->isvc, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    long long generation = json_util_int_at(in->isvc, "metadata", "generation", 0);
    long long want = json_util_int_at(in->isvc, "spec", "replicas", 1);
    const json_t *dst = json_object_get(in->deployment, "status");
    long long have = json_util_int_at(dst, "replicas", NULL, 0),
              ready = json_util_int_at(dst, "readyReplicas", NULL, 0);
    long long updated = json_util_int_at(dst, "updatedReplicas", NULL, 0);
    bool dep_current =
        in->deployment && json_util_int_at(dst, "observedGeneration", NULL, 0) >=
                              json_util_int_at(in->deployment, "metadata", "generation", 0);

    char ready_msg[160], prog_msg[160], selector[512], url[600];
    struct condition ready_c, prog_c,
        degr_c = {
            "Degraded",
            false,
            "AsExpected",
            "",
        };
    struct pod_problem problem = {NULL, ""};
    bool pod_failing = find_pod_problem(in->pods, &problem);
    const json_t *deadline = deployment_condition(in->deployment, "Progressing", "False");
    const json_t *replica_failure = deployment_condition(in->deployment, "ReplicaFailure", "True");

    snprintf(ready_msg, sizeof(ready_msg), "%lld/%lld replicas ready", ready, want);
    ready_c = (struct condition){"Ready", ready > 0, "Serving", ready_msg};
    prog_c = (struct condition){"Progressing", false, "RolloutComplete", ready_msg};

    if (in->spec_error_reason) {
        ready_c = (struct condition){"Ready", false, in->spec_error_reason, in->spec_error_message};
        prog_c = (struct condition){"Progressing", false, in->spec_error_reason,
                                    "waiting for a valid spec"};
        degr_c =
            (struct condition){"Degraded", true, in->spec_error_reason, in->spec_error_message};
    } else if (!in->deployment) {
        ready_c.reason = "Creating";
        ready_c.message = "the engine Deployment is being created";
        prog_c = (struct condition){"Progressing", true, "Creating", ready_c.message};
    } else {
        if (want == 0) {
            ready_c = (struct condition){"Ready", false, "ScaledToZero", "spec.replicas is 0"};
        } else if (ready == 0) {
            ready_c.reason = pod_failing ? problem.reason : "WaitingForReplicas";
            ready_c.message = pod_failing ? problem.message : ready_msg;
        }
        bool rolling = !dep_current || updated < want || ready < want || have > want;
        if (deadline) {
            const char *msg = json_string_value(json_object_get(deadline, "message"));
            prog_c = (struct condition){"Progressing", false, "ProgressDeadlineExceeded",
                                        msg ? msg : "the rollout did not finish in time"};
        } else if (rolling) {
            const char *why = have > want      ? "ScalingDown"
                              : updated < have ? "RollingUpdate"
                                               : "ScalingUp";
            snprintf(prog_msg, sizeof(prog_msg), "%lld/%lld replicas updated, %lld ready", updated,
                     want, ready);
            prog_c = (struct condition){"Progressing", true, why, prog_msg};
        }
        if (in->apply_error_reason) {
            /* The operator itself cannot bring the objects to the spec (quota, RBAC, IP range). */
            degr_c = (struct condition){"Degraded", true, in->apply_error_reason,
                                        in->apply_error_message};
        } else if (pod_failing) {
            degr_c = (struct condition){"Degraded", true, problem.reason, problem.message};
        } else if (replica_failure) {
            const char *r = json_string_value(json_object_get(replica_failure, "reason"));
            const char *msg = json_string_value(json_object_get(replica_failure, "message"));
            degr_c = (struct condition){"Degraded", true, r ? r : "ReplicaFailure", msg};
        } else if (deadline) {
            degr_c = (struct condition){"Degraded", true, prog_c.reason, prog_c.message};
        }
    }

    struct condition next[3] = {ready_c, prog_c, degr_c};
    const json_t *prev = json_object_get(json_object_get(in->isvc, "status"), "conditions");
    json_t *conds = conditions_merge(prev, next, 3, generation, in->now);
    desired_selector(name ? name : "", selector, sizeof(selector));
    snprintf(url, sizeof(url), "http://%s.%s.svc.cluster.local", name ? name : "",
             ns ? ns : "default");
    json_t *st =
        json_pack("{s:I, s:I, s:I, s:s, s:s, s:o}", "observedGeneration", (json_int_t)generation,
                  "replicas", (json_int_t)have, "readyReplicas", (json_int_t)ready, "selector",
                  selector, "url", url, "conditions", conds);
    /* status.autoscaling belongs to the autoscaler: the status write replaces the whole status, so
     * carry it over or every reconcile would erase the autoscaler's record. */
    const json_t *as = json_object_get(json_object_get(in->isvc, "status"), "autoscaling");
    if (st && as && json_object_set(st, "autoscaling", (json_t *)as) != 0) {
        json_decref(st);
        return NULL;
    }
    return st;
}
