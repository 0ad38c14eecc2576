/* Reconcile one InferenceService (see reconcile.h). */
#include "operator/reconcile.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/conditions.h"
#include "operator/model_uri.h"
#include "operator/status.h"

#include <stdio.h>
#include <string.h>

const struct k8s_resource reconcile_resource_isvcs = {"serving.cinfer.io", "v1alpha1",
                                                      "inferenceservices", true};

static void fail(struct reconcile_outcome *out, int rc, const char *what, const char *detail)
{
    out->result = RECONCILE_ERROR;
    out->rc = rc;
    snprintf(out->message, sizeof(out->message), "%s: %s", what, detail);
}

/* True when `obj` has a controller ownerReference to the InferenceService with `uid`. */
static bool owned_by(const json_t *obj, const char *uid)
{
    size_t i;
    json_t *ref;
    json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "ownerReferences"), i, ref)
    {
        const char *u = json_string_value(json_object_get(ref, "uid"));
        if (json_is_true(json_object_get(ref, "controller")) && u && uid && strcmp(u, uid) == 0)
            return true;
    }
    return false;
}

/* Server-side apply of `obj` (borrowed) as the operator's field manager. */
static int apply(struct k8s_client *c, const struct k8s_resource *res, const char *ns,
                 const char *name, const json_t *obj)
{
    struct k8s_ref ref = {res, ns, name, NULL};
    struct k8s_patch_opts po = {.field_manager = DESIRED_FIELD_MANAGER, .force = true};
    return k8s_client_patch(c, &ref, K8S_PATCH_APPLY, obj, &po, NULL);
}

/* Applies the NetworkPolicy `np` (borrowed) when there is one, else deletes the cached `live`
 * policy (borrowed) if this InferenceService owns it: turning the operator's network policies off
 * removes the ones it made. A policy already gone is success. */
static int sync_network_policy(struct k8s_client *c, const char *ns, const char *name,
                               const json_t *np, const json_t *live, const char *uid)
{
    if (np) return apply(c, &k8s_resource_networkpolicies, ns, name, np);
    if (!live || !owned_by(live, uid)) return 0;
    struct k8s_ref ref = {&k8s_resource_networkpolicies, ns, name, NULL};
    struct k8s_delete_opts o = {.precondition_uid = json_string_value(
                                    json_object_get(json_object_get(live, "metadata"), "uid"))};
    int rc = k8s_client_delete(c, &ref, &o, NULL);
    return rc == ERR_NOT_FOUND ? 0 : rc;
}

/* The live NetworkPolicy named `name`, or NULL: from the cache, which holds only objects with the
 * operator's label; and when `lookup` (a policy is about to be applied) from the API server if the
 * cache has none, so that a policy someone else made under that name is reported as a NameConflict
 * instead of being taken over by the forced apply. *out is new. */
static int live_network_policy(struct k8s_client *c, const struct reconcile_caches *caches,
                               const char *ns, const char *name, bool lookup, json_t **out)
{
    *out = caches->networkpolicies ? informer_get(caches->networkpolicies, ns, name) : NULL;
    if (*out || !lookup) return 0;
    struct k8s_ref ref = {&k8s_resource_networkpolicies, ns, name, NULL};
    int rc = k8s_client_get(c, &ref, out);
    if (rc == ERR_NOT_FOUND) {
        *out = NULL;
        return 0;
    }
    return rc;
}

/* Records a core/v1 Event about the InferenceService; failures are logged, never fatal. */
static void emit_event(struct k8s_client *c, const json_t *isvc, const char *type,
                       const char *reason, const char *message, time_t now)
{
    char ts[32];
    conditions_format_time(now, ts, sizeof(ts));
    const char *ns = json_util_str_at(isvc, "metadata", "namespace"),
               *name = json_util_str_at(isvc, "metadata", "name");
    char gen_name[300];
    snprintf(gen_name, sizeof(gen_name), "%s.", name);
    json_t *ev = json_pack(
        "{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s*}, s:s, s:s, s:s, s:{s:s}, "
        "s:s, s:s, s:i, s:s}",
        "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen_name, "namespace", ns,
        "involvedObject", "apiVersion", DESIRED_API_VERSION, "kind", DESIRED_KIND, "name", name,
        "namespace", ns, "uid", json_util_str_at(isvc, "metadata", "uid"), "type", type, "reason",
        reason, "message", message ? message : "", "source", "component", DESIRED_FIELD_MANAGER,
        "firstTimestamp", ts, "lastTimestamp", ts, "count", 1, "reportingComponent",
        DESIRED_FIELD_MANAGER);
    struct k8s_ref ref = {&k8s_resource_events, ns, NULL, NULL};
    if (!ev || k8s_client_create(c, &ref, ev, NULL) != 0)
        log_warn("cannot record event", LOG_S("isvc", name), LOG_S("reason", reason),
                 LOG_S("error", k8s_client_errmsg(c)));
    json_decref(ev);
}

/* Events for condition flips: Degraded turning True is a Warning, everything else Normal. */
static void emit_transitions(struct k8s_client *c, const json_t *isvc, const json_t *prev,
                             const json_t *next, time_t now)
{
    static const char *const types[] = {"Ready", "Degraded"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (!conditions_flipped(prev, next, types[i])) continue;
        const json_t *cnd = conditions_find(next, types[i]);
        bool is_true = strcmp(json_string_value(json_object_get(cnd, "status")), "True") == 0;
        if (!prev && !is_true) continue; /* first status: only report what is good or bad news */
        bool warning = strcmp(types[i], "Degraded") == 0 && is_true;
        emit_event(c, isvc, warning ? "Warning" : "Normal",
                   json_string_value(json_object_get(cnd, "reason")),
                   json_string_value(json_object_get(cnd, "message")), now);
    }
}

/* Writes `status` (borrowed) through the /status subresource with optimistic concurrency. */
static int write_status(struct k8s_client *c, const json_t *isvc, json_t *status)
{
    json_t *obj = json_deep_copy(isvc);
    if (!obj) return ERR_NOMEM;
    json_object_set(obj, "status", status);
    struct k8s_ref ref = {&reconcile_resource_isvcs,
                          json_util_str_at(isvc, "metadata", "namespace"),
                          json_util_str_at(isvc, "metadata", "name"), "status"};
    int rc = k8s_client_update(c, &ref, obj, NULL);
    json_decref(obj);
    return rc;
}

void reconcile_key(struct k8s_client *c, const struct reconcile_caches *caches,
                   const struct desired_settings *settings, const char *key, time_t now,
                   struct reconcile_outcome *out)
{
    memset(out, 0, sizeof(*out));
    char ns[254], name[254];
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof(ns) || strlen(slash + 1) >= sizeof(name)) return;
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
    snprintf(name, sizeof(name), "%s", slash + 1);

    json_t *isvc = informer_get(caches->isvcs, ns, name);
    json_t *dep_desired = NULL, *svc_desired = NULL, *dep = NULL, *pods = NULL, *status = NULL;
    json_t *match = NULL, *np_desired = NULL, *np = NULL;
    /* Deleted (or being deleted): owned objects go through garbage collection. */
    if (!isvc || json_object_get(json_object_get(isvc, "metadata"), "deletionTimestamp")) goto out;

    const char *uid = json_util_str_at(isvc, "metadata", "uid");
    const char *spec_reason = NULL;
    char spec_msg[512] = "";
    struct model_uri m;
    const char *uri = json_string_value(
        json_object_get(json_object_get(json_object_get(isvc, "spec"), "model"), "uri"));
    if (model_uri_parse(uri, &m, spec_msg, sizeof(spec_msg)) != 0) {
        spec_reason = "InvalidModelURI";
    } else if (desired_deployment(isvc, settings, &dep_desired, spec_msg, sizeof(spec_msg)) != 0 ||
               (settings->network_policy &&
                desired_network_policy(isvc, settings, &np_desired, spec_msg, sizeof(spec_msg)) !=
                    0)) {
        spec_reason = "InvalidSpec";
    }
    int rc = live_network_policy(c, caches, ns, name, np_desired != NULL, &np);
    if (rc) {
        fail(out, rc, "get NetworkPolicy", k8s_client_errmsg(c));
        goto out;
    }
    dep = informer_get(caches->deployments, ns, name);
    json_t *svc = informer_get(caches->services, ns, name);
    bool np_foreign = np_desired && np && !owned_by(np, uid);
    if (!spec_reason &&
        ((dep && !owned_by(dep, uid)) || (svc && !owned_by(svc, uid)) || np_foreign)) {
        spec_reason = "NameConflict";
        snprintf(spec_msg, sizeof(spec_msg),
                 "a %s named %s exists and is not owned by this InferenceService",
                 dep && !owned_by(dep, uid)   ? "Deployment"
                 : svc && !owned_by(svc, uid) ? "Service"
                                              : "NetworkPolicy",
                 name);
    }
    json_decref(svc);

    const char *apply_reason = NULL;
    char apply_msg[K8S_STATUS_MSG_MAX + 64] = "";
    if (!spec_reason) {
        rc = apply(c, &k8s_resource_deployments, ns, name, dep_desired);
        if (rc) {
            apply_reason = "DeploymentApplyFailed";
        } else {
            rc = desired_service(isvc, &svc_desired);
            if (!rc) rc = apply(c, &k8s_resource_services, ns, name, svc_desired);
            if (rc) apply_reason = "ServiceApplyFailed";
        }
        if (!rc) {
            rc = sync_network_policy(c, ns, name, np_desired, np, uid);
            if (rc) apply_reason = "NetworkPolicyApplyFailed";
        }
        if (rc) {
            fail(out, rc, apply_reason, k8s_client_errmsg(c));
            /* Transient failures (conflicts, API down) just retry; anything the API server
             * refused is also reported in status so that `kubectl describe` says what is wrong. */
            if (rc == ERR_CONFLICT || rc == ERR_IO || rc == ERR_TIMEOUT || rc == ERR_CANCELLED ||
                k8s_client_status(c)->code == 0)
                goto out;
            snprintf(apply_msg, sizeof(apply_msg), "%s", k8s_client_status(c)->message);
        }
    }

    match = json_pack("{s:s}", "serving.cinfer.io/inferenceservice", name);
    pods = informer_list(caches->pods, ns, match);
    struct status_input in = {.isvc = isvc,
                              .deployment = spec_reason ? NULL : dep,
                              .pods = pods,
                              .spec_error_reason = spec_reason,
                              .spec_error_message = spec_msg,
                              .apply_error_reason = apply_reason,
                              .apply_error_message = apply_msg,
                              .now = now};
    status = status_compute(&in);
    if (!status) {
        fail(out, ERR_NOMEM, "status", "out of memory");
        goto out;
    }
    const json_t *old = json_object_get(isvc, "status");
    if (!json_equal((json_t *)old, status)) {
        int src = write_status(c, isvc, status);
        if (src) {
            rc = src;
            /* 409: the object changed since our cache saw it; the watch brings the new one. */
            fail(out, rc, "update status", k8s_client_errmsg(c));
            goto out;
        }
        emit_transitions(c, isvc, json_object_get(old, "conditions"),
                         json_object_get(status, "conditions"), now);
    }
out:
    json_decref(status);
    json_decref(match);
    json_decref(pods);
    json_decref(dep);
    json_decref(dep_desired);
    json_decref(svc_desired);
    json_decref(np_desired);
    json_decref(np);
    json_decref(isvc);
}
