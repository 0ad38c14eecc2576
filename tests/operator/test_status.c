/* InferenceService status from observed state: conditions, reasons, transition times. */
#include "common/conditions.h"
#include "operator/status.h"

#include <check.h>
#include <string.h>

#define T0 1796000000 /* a fixed "now" */

static json_t *isvc_with(int replicas, json_t *prev_conditions)
{
    json_t *isvc = json_pack("{s:{s:s, s:s, s:i}, s:{s:{s:s}, s:i}}", "metadata", "name", "chat",
                             "namespace", "ml", "generation", 4, "spec", "model", "uri",
                             "file:///m.gguf", "replicas", replicas);
    if (prev_conditions)
        json_object_set_new(isvc, "status", json_pack("{s:o}", "conditions", prev_conditions));
    return isvc;
}

static json_t *deployment(int gen, int observed, int replicas, int updated, int ready)
{
    return json_pack("{s:{s:i}, s:{s:i, s:i, s:i, s:i, s:[]}}", "metadata", "generation", gen,
                     "status", "observedGeneration", observed, "replicas", replicas,
                     "updatedReplicas", updated, "readyReplicas", ready, "conditions");
}

static json_t *pod_waiting(const char *list, const char *container, const char *reason)
{
    return json_pack("[{s:{s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}}]", "metadata", "name",
                     "chat-7d9f-abc", "status", list, "name", container, "state", "waiting",
                     "reason", reason, "message", "details here");
}

static const json_t *cond(const json_t *status, const char *type)
{
    const json_t *c = conditions_find(json_object_get(status, "conditions"), type);
    ck_assert_msg(c != NULL, "no %s condition", type);
    return c;
}

static void expect(const json_t *status, const char *type, const char *want_status,
                   const char *want_reason)
{
    const json_t *c = cond(status, type);
    ck_assert_str_eq(json_string_value(json_object_get(c, "status")), want_status);
    ck_assert_str_eq(json_string_value(json_object_get(c, "reason")), want_reason);
}

static json_t *compute(json_t *isvc, json_t *dep, json_t *pods)
{
    struct status_input in = {.isvc = isvc, .deployment = dep, .pods = pods, .now = T0};
    json_t *st = status_compute(&in);
    ck_assert_ptr_nonnull(st);
    return st;
}

START_TEST(test_status_serving_when_rollout_complete)
{
    json_t *isvc = isvc_with(2, NULL), *dep = deployment(5, 5, 2, 2, 2);
    json_t *st = compute(isvc, dep, NULL);
    expect(st, "Ready", "True", "Serving");
    expect(st, "Progressing", "False", "RolloutComplete");
    expect(st, "Degraded", "False", "AsExpected");
    ck_assert_int_eq(json_integer_value(json_object_get(st, "readyReplicas")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(st, "observedGeneration")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(st, "url")),
                     "http://chat.ml.svc.cluster.local");
    ck_assert_str_eq(
        json_string_value(json_object_get(st, "selector")),
        "app.kubernetes.io/name=cinfer-engine,serving.cinfer.io/inferenceservice=chat");
    ck_assert_int_eq(json_integer_value(json_object_get(cond(st, "Ready"), "observedGeneration")),
                     4);
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_progressing_reasons)
{
    json_t *isvc = isvc_with(3, NULL);
    struct {
        int gen, obs, have, upd, ready;
        const char *ready_status, *prog_reason;
    } cases[] = {
        {2, 1, 3, 3, 3, "True", "ScalingUp"},     /* Deployment controller not caught up */
        {2, 2, 4, 1, 3, "True", "ScalingDown"},   /* surge pod during a rollout */
        {2, 2, 3, 1, 3, "True", "RollingUpdate"}, /* old pods still being replaced */
        {2, 2, 1, 1, 1, "True", "ScalingUp"},     /* scaling 1 -> 3 */
        {2, 2, 3, 3, 0, "False", "ScalingUp"},    /* none ready yet: model loading */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *dep =
            deployment(cases[i].gen, cases[i].obs, cases[i].have, cases[i].upd, cases[i].ready);
        json_t *st = compute(isvc, dep, NULL);
        expect(st, "Progressing", "True", cases[i].prog_reason);
        const json_t *r = cond(st, "Ready");
        ck_assert_str_eq(json_string_value(json_object_get(r, "status")), cases[i].ready_status);
        json_decref(st);
        json_decref(dep);
    }
    json_t *dep = deployment(2, 2, 3, 3, 0);
    json_t *st = compute(isvc, dep, NULL);
    expect(st, "Ready", "False", "WaitingForReplicas");
    expect(st, "Degraded", "False", "AsExpected");
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_degraded_pod_failures_name_the_pod)
{
    static const struct {
        const char *list, *container, *reason, *want;
    } cases[] = {
        {"containerStatuses", "engine", "ImagePullBackOff", "ImagePullBackOff"},
        {"containerStatuses", "engine", "ErrImagePull", "ErrImagePull"},
        {"containerStatuses", "engine", "CrashLoopBackOff", "CrashLoopBackOff"},
        {"initContainerStatuses", "fetch-model", "CrashLoopBackOff", "ModelFetchFailed"},
        {"initContainerStatuses", "fetch-model", "ImagePullBackOff", "ImagePullBackOff"},
        {"initContainerStatuses", "verify-model", "CrashLoopBackOff", "ModelVerifyFailed"},
        {"initContainerStatuses", "verify-model", "ErrImagePull", "ErrImagePull"},
        {"initContainerStatuses", "fetch-draft-model", "CrashLoopBackOff", "DraftModelFetchFailed"},
        {"initContainerStatuses", "verify-draft-model", "CrashLoopBackOff",
         "DraftModelVerifyFailed"},
        {"initContainerStatuses", "fetch-draft-model", "ImagePullBackOff", "ImagePullBackOff"},
        {"containerStatuses", "engine", "CreateContainerConfigError", "CreateContainerConfigError"},
    };
    json_t *isvc = isvc_with(1, NULL), *dep = deployment(1, 1, 1, 1, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *pods = pod_waiting(cases[i].list, cases[i].container, cases[i].reason);
        json_t *st = compute(isvc, dep, pods);
        expect(st, "Degraded", "True", cases[i].want);
        expect(st, "Ready", "False", cases[i].want);
        const char *msg = json_string_value(json_object_get(cond(st, "Degraded"), "message"));
        ck_assert_msg(strstr(msg, "chat-7d9f-abc") && strstr(msg, cases[i].container) &&
                          strstr(msg, "details here"),
                      "message: %s", msg);
        json_decref(st);
        json_decref(pods);
    }
    /* A benign waiting reason (still creating) is not degraded. */
    json_t *pods = pod_waiting("containerStatuses", "engine", "ContainerCreating");
    json_t *st = compute(isvc, dep, pods);
    expect(st, "Degraded", "False", "AsExpected");
    json_decref(st);
    json_decref(pods);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_unschedulable_and_deadline)
{
    json_t *isvc = isvc_with(1, NULL), *dep = deployment(1, 1, 1, 1, 0);
    json_t *pods = json_pack("[{s:{s:s}, s:{s:[{s:s, s:s, s:s, s:s}]}}]", "metadata", "name", "p1",
                             "status", "conditions", "type", "PodScheduled", "status", "False",
                             "reason", "Unschedulable", "message",
                             "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");
    json_t *st = compute(isvc, dep, pods);
    expect(st, "Degraded", "True", "Unschedulable");
    ck_assert_ptr_nonnull(
        strstr(json_string_value(json_object_get(cond(st, "Degraded"), "message")),
               "Insufficient nvidia.com/gpu"));
    json_decref(st);
    json_array_append_new(json_object_get(json_object_get(dep, "status"), "conditions"),
                          json_pack("{s:s, s:s, s:s, s:s}", "type", "Progressing", "status",
                                    "False", "reason", "ProgressDeadlineExceeded", "message",
                                    "ReplicaSet \"chat-7d9f\" has timed out progressing."));
    st = compute(isvc, dep, NULL);
    expect(st, "Progressing", "False", "ProgressDeadlineExceeded");
    expect(st, "Degraded", "True", "ProgressDeadlineExceeded");
    json_decref(st);
    json_decref(pods);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_spec_error_missing_deployment_and_zero)
{
    json_t *isvc = isvc_with(1, NULL);
    struct status_input in = {.isvc = isvc,
                              .spec_error_reason = "InvalidModelURI",
                              .spec_error_message = "spec.model.uri: unsupported scheme",
                              .now = T0};
    json_t *st = status_compute(&in);
    expect(st, "Ready", "False", "InvalidModelURI");
    expect(st, "Degraded", "True", "InvalidModelURI");
    expect(st, "Progressing", "False", "InvalidModelURI");
    json_decref(st);
    st = compute(isvc, NULL, NULL);
    expect(st, "Ready", "False", "Creating");
    expect(st, "Progressing", "True", "Creating");
    json_decref(st);
    json_decref(isvc);
    isvc = isvc_with(0, NULL);
    json_t *dep = deployment(1, 1, 0, 0, 0);
    st = compute(isvc, dep, NULL);
    expect(st, "Ready", "False", "ScaledToZero");
    expect(st, "Progressing", "False", "RolloutComplete");
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_transition_time_changes_only_on_flip)
{
    json_t *prev = json_pack("[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]", "type", "Ready",
                             "status", "True", "reason", "Serving", "lastTransitionTime",
                             "2026-01-01T00:00:00Z", "type", "Degraded", "status", "True", "reason",
                             "CrashLoopBackOff", "lastTransitionTime", "2026-01-02T00:00:00Z");
    json_t *isvc = isvc_with(2, prev), *dep = deployment(1, 1, 2, 2, 2);
    json_t *st = compute(isvc, dep, NULL);
    char now_s[32];
    conditions_format_time(T0, now_s, sizeof(now_s));
    /* Ready stayed True: time kept. Degraded flipped to False: time is now. */
    ck_assert_str_eq(json_string_value(json_object_get(cond(st, "Ready"), "lastTransitionTime")),
                     "2026-01-01T00:00:00Z");
    ck_assert_str_eq(json_string_value(json_object_get(cond(st, "Degraded"), "lastTransitionTime")),
                     now_s);
    ck_assert_str_eq(
        json_string_value(json_object_get(cond(st, "Progressing"), "lastTransitionTime")), now_s);
    ck_assert(!conditions_flipped(prev, json_object_get(st, "conditions"), "Ready"));
    ck_assert(conditions_flipped(prev, json_object_get(st, "conditions"), "Degraded"));
    ck_assert(conditions_flipped(prev, json_object_get(st, "conditions"), "Progressing"));
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_apply_error_is_degraded)
{
    json_t *isvc = isvc_with(1, NULL), *dep = deployment(1, 1, 1, 1, 1);
    struct status_input in = {.isvc = isvc,
                              .deployment = dep,
                              .apply_error_reason = "ServiceApplyFailed",
                              .apply_error_message =
                                  "failed to allocate a serviceIP: range is full",
                              .now = T0};
    json_t *st = status_compute(&in);
    expect(st, "Degraded", "True", "ServiceApplyFailed");
    expect(st, "Ready", "True", "Serving"); /* the pods that exist still serve */
    ck_assert_ptr_nonnull(strstr(
        json_string_value(json_object_get(cond(st, "Degraded"), "message")), "range is full"));
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_status_keeps_the_autoscalers_record)
{
    json_t *isvc = isvc_with(3, NULL), *dep = deployment(2, 2, 3, 3, 3);
    json_t *as = json_pack("{s:i, s:s, s:s}", "desiredReplicas", 3, "reason",
                           "queue depth 6.0 > target 1.0", "lastScaleTime", "2026-11-29T10:00:00Z");
    json_object_set_new(isvc, "status", json_pack("{s:o}", "autoscaling", as));
    json_t *st = compute(isvc, dep, NULL);
    ck_assert(json_equal(json_object_get(st, "autoscaling"), as));
    json_decref(st);
    /* Without one, none is invented. */
    json_object_del(isvc, "status");
    st = compute(isvc, dep, NULL);
    ck_assert_ptr_null(json_object_get(st, "autoscaling"));
    json_decref(st);
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_status_serving_when_rollout_complete);
    tcase_add_test(tc, test_status_progressing_reasons);
    tcase_add_test(tc, test_status_degraded_pod_failures_name_the_pod);
    tcase_add_test(tc, test_status_unschedulable_and_deadline);
    tcase_add_test(tc, test_status_spec_error_missing_deployment_and_zero);
    tcase_add_test(tc, test_status_transition_time_changes_only_on_flip);
    tcase_add_test(tc, test_status_apply_error_is_degraded);
    tcase_add_test(tc, test_status_keeps_the_autoscalers_record);
    suite_add_tcase(s, tc);
    return s;
}
