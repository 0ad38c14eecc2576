/* The control loop's pure parts: --target parsing, which InferenceServices are managed and with
 * what spec, pod endpoints, and the JSON of status.autoscaling and of scale Events. */
#include "autoscaler/actuate.h"
#include "autoscaler/loop.h"

#include "common/conditions.h"
#include "common/err.h"

#include <check.h>
#include <math.h>
#include <string.h>

START_TEST(test_loop_targets_parse_valid)
{
    struct loop_targets t;
    char err[256] = "";
    ck_assert_int_eq(loop_targets_parse("chat=http://127.0.0.1:1/metrics,chat=http://h:2/m,"
                                        "other=https://x/metrics?a=b",
                                        &t, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(t.n, 3);
    ck_assert_str_eq(t.v[0].name, "chat");
    ck_assert_str_eq(t.v[0].url, "http://127.0.0.1:1/metrics");
    ck_assert_str_eq(t.v[1].url, "http://h:2/m");
    ck_assert_str_eq(t.v[2].name, "other");
    ck_assert_str_eq(t.v[2].url, "https://x/metrics?a=b"); /* '=' inside the URL is kept */
    loop_targets_fini(&t);
    /* A bare base URL scrapes /metrics, as Prometheus would. */
    ck_assert_int_eq(loop_targets_parse("chat=http://127.0.0.1:8000", &t, err, sizeof(err)), 0);
    ck_assert_str_eq(t.v[0].url, "http://127.0.0.1:8000/metrics");
    loop_targets_fini(&t);
    ck_assert_ptr_null(t.v);
    loop_targets_fini(NULL);

    ck_assert_int_eq(loop_targets_parse(NULL, &t, err, sizeof(err)), 0);
    ck_assert_uint_eq(t.n, 0);
    ck_assert_int_eq(loop_targets_parse("", &t, err, sizeof(err)), 0);
    ck_assert_uint_eq(t.n, 0);
}
END_TEST

START_TEST(test_loop_targets_parse_invalid)
{
    struct {
        const char *text, *msg;
    } cases[] = {
        {"chat", "is not name=url"},
        {"=http://x/", "is not name=url"},
        {"chat=http://x/,", "trailing comma"},
        {",chat=http://x/", "empty entry"},
        {"a=http://x/,,b=http://y/", "empty entry"},
        {"chat=ftp://x/", "must start with http"},
        {"chat=", "must start with http"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct loop_targets t = {0};
        char err[256] = "";
        ck_assert_int_eq(loop_targets_parse(cases[i].text, &t, err, sizeof(err)), ERR_INVAL);
        ck_assert_msg(strstr(err, cases[i].msg) != NULL, "%s: %s", cases[i].text, err);
        ck_assert_ptr_null(t.v);
    }
    char long_name[400];
    memset(long_name, 'a', sizeof(long_name));
    memcpy(long_name + 300, "=http://x/", 11);
    struct loop_targets t = {0};
    char err[256] = "";
    ck_assert_int_eq(loop_targets_parse(long_name, &t, err, sizeof(err)), ERR_INVAL);
    ck_assert_msg(strstr(err, "too long") != NULL, "%s", err);
}
END_TEST

static json_t *isvc(const char *scaling_json)
{
    json_error_t e;
    json_t *sc = scaling_json ? json_loads(scaling_json, 0, &e) : NULL;
    ck_assert(!scaling_json || sc);
    json_t *o = json_pack("{s:{s:s, s:s}, s:{s:i}}", "metadata", "name", "chat", "namespace", "ml",
                          "spec", "replicas", 2);
    if (sc) json_object_set_new(json_object_get(o, "spec"), "scaling", sc);
    return o;
}

START_TEST(test_loop_spec_from_isvc_policies)
{
    struct policy_spec sp;
    json_t *o = isvc(NULL);
    ck_assert(!loop_spec_from_isvc(o, 5, &sp)); /* no spec.scaling: someone else owns replicas */
    json_decref(o);
    o = isvc("{\"policy\":\"external\"}");
    ck_assert(!loop_spec_from_isvc(o, 5, &sp));
    json_decref(o);
    o = isvc("{\"policy\":\"bogus\"}");
    ck_assert(!loop_spec_from_isvc(o, 5, &sp));
    json_decref(o);
    o = isvc("{\"minReplicas\":2}"); /* policy omitted: the CRD default, reactive */
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert_int_eq(sp.kind, POLICY_REACTIVE);
    ck_assert_int_eq(sp.min_replicas, 2);
    ck_assert(sp.target_queue_depth > 0 || sp.target_kv_usage > 0); /* policy defaults kept */
    json_decref(o);
    o = isvc("{\"policy\":\"predictive\"}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert_int_eq(sp.kind, POLICY_PREDICTIVE);
    json_decref(o);
}
END_TEST

START_TEST(test_loop_spec_from_isvc_fields)
{
    struct policy_spec sp;
    json_t *o = isvc("{\"policy\":\"reactive\",\"minReplicas\":1,\"maxReplicas\":5,"
                     "\"targetQueueDepth\":2,\"scaleDownDelaySeconds\":10}");
    ck_assert(loop_spec_from_isvc(o, 1.5, &sp));
    ck_assert_int_eq(sp.min_replicas, 1);
    ck_assert_int_eq(sp.max_replicas, 5);
    ck_assert_double_eq(sp.target_queue_depth, 2);
    ck_assert_double_eq(sp.target_kv_usage, 0); /* only the listed metric is used */
    ck_assert_double_eq(sp.scale_down_window_s, 10);
    ck_assert_double_eq(sp.interval_s, 1.5);
    json_decref(o);
    o = isvc("{\"targetKVCacheUsage\":0.8,\"targetQueueDepth\":4}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert_double_eq(sp.target_kv_usage, 0.8);
    ck_assert_double_eq(sp.target_queue_depth, 4);
    json_decref(o);
    /* Objectives: an objective alone turns the default targets off; named targets stay. */
    o = isvc("{\"objectives\":{\"ttftSeconds\":3,\"interTokenSeconds\":0.2,\"percentile\":0.95}}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert(policy_spec_has_objective(&sp));
    ck_assert_double_eq(sp.objective_ttft_s, 3);
    ck_assert_double_eq(sp.objective_itl_s, 0.2);
    ck_assert_double_eq(sp.objective_percentile, 0.95);
    ck_assert_double_eq(sp.target_queue_depth, 0);
    ck_assert_double_eq(sp.target_kv_usage, 0);
    json_decref(o);
    o = isvc("{\"objectives\":{\"ttftSeconds\":2},\"targetQueueDepth\":3}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert_double_eq(sp.objective_ttft_s, 2);
    ck_assert_double_eq(sp.objective_itl_s, 0);
    ck_assert_double_eq(sp.objective_percentile, 0.99); /* the default */
    ck_assert_double_eq(sp.target_queue_depth, 3);
    json_decref(o);
    /* Nonsense the API server would refuse is ignored, not trusted. */
    o = isvc("{\"objectives\":{\"ttftSeconds\":-1,\"percentile\":1.5}}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert(!policy_spec_has_objective(&sp));
    ck_assert_double_eq(sp.objective_percentile, 0.99);
    ck_assert_double_eq(sp.target_queue_depth, 2); /* HPA defaults: no objective, no target */
    json_decref(o);
    /* Values the API server would refuse still give a usable spec (max raised to min). */
    o = isvc("{\"minReplicas\":-3,\"maxReplicas\":-5,\"targetQueueDepth\":\"x\"}");
    ck_assert(loop_spec_from_isvc(o, 5, &sp));
    ck_assert_int_eq(sp.min_replicas, 0);
    ck_assert_int_eq(sp.max_replicas, 0);
    json_decref(o);
}
END_TEST

static json_t *pod_obj(const char *ip, const char *phase, const char *ready, bool deleting)
{
    json_t *p = json_pack("{s:{s:s}, s:{s:s, s:[{s:s, s:s}]}}", "metadata", "name", "chat-1",
                          "status", "phase", phase, "conditions", "type", "Ready", "status", ready);
    if (ip) json_object_set_new(json_object_get(p, "status"), "podIP", json_string(ip));
    if (deleting)
        json_object_set_new(json_object_get(p, "metadata"), "deletionTimestamp",
                            json_string("2026-01-01T00:00:00Z"));
    return p;
}

START_TEST(test_loop_pod_endpoint)
{
    char url[128];
    json_t *p = pod_obj("10.1.2.3", "Running", "True", false);
    ck_assert(loop_pod_endpoint(p, url, sizeof(url)));
    ck_assert_str_eq(url, "http://10.1.2.3:8000/metrics");
    json_decref(p);
    p = pod_obj("fd00::7", "Running", "True", false);
    ck_assert(loop_pod_endpoint(p, url, sizeof(url)));
    ck_assert_str_eq(url, "http://[fd00::7]:8000/metrics");
    json_decref(p);
    p = pod_obj("10.1.2.3", "Running", "False", false);
    ck_assert(!loop_pod_endpoint(p, url, sizeof(url)));
    json_decref(p);
    p = pod_obj(NULL, "Running", "True", false);
    ck_assert(!loop_pod_endpoint(p, url, sizeof(url)));
    json_decref(p);
    p = pod_obj("10.1.2.3", "Pending", "True", false);
    ck_assert(!loop_pod_endpoint(p, url, sizeof(url)));
    json_decref(p);
    p = pod_obj("10.1.2.3", "Running", "True", true);
    ck_assert(!loop_pod_endpoint(p, url, sizeof(url)));
    json_decref(p);
    p = pod_obj("10.1.2.3", "Running", "True", false);
    char small[10];
    ck_assert(!loop_pod_endpoint(p, small, sizeof(small))); /* never truncated silently */
    json_decref(p);
    json_t *junk = json_pack("{s:i}", "status", 3);
    ck_assert(!loop_pod_endpoint(junk, url, sizeof(url)));
    json_decref(junk);
}
END_TEST

START_TEST(test_loop_zero_decide)
{
    char why[160];
    struct loop_zero_in in = {.current = 0,
                              .policy_desired = 1,
                              .zero_allowed = true,
                              .held = 0,
                              .idle_s = 0,
                              .scale_to_zero_s = 60};
    /* At zero: nothing held stays at zero, a held request scales to one. */
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 0);
    ck_assert(strstr(why, "no requests held"));
    in.held = 3;
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 1);
    ck_assert(strstr(why, "scale from zero: 3 requests held"));
    in.held = -1; /* the routers could not be read: never scale up blind either */
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 0);
    /* Above zero: to zero only when idle long enough, nothing held, and the policy wants <= 1. */
    in = (struct loop_zero_in){.current = 1,
                               .policy_desired = 1,
                               .zero_allowed = true,
                               .held = 0,
                               .idle_s = 61,
                               .scale_to_zero_s = 60};
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 0);
    ck_assert(strstr(why, "idle for 61 s"));
    in.idle_s = 59;
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 1);
    ck_assert_str_eq(why, "");
    in.idle_s = 61;
    in.busy = true;
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 1);
    in.busy = false;
    in.held = 1;
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 1);
    in.held = -1; /* unknown held requests: never to zero */
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 1);
    in.held = 0;
    in.policy_desired = 3;
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 3);
    /* Not a scale-to-zero service: the policy's answer as it is. */
    in = (struct loop_zero_in){.current = 0, .policy_desired = 2, .zero_allowed = false, .held = 5};
    ck_assert_int_eq(loop_zero_decide(&in, why, sizeof(why)), 2);
}
END_TEST

START_TEST(test_loop_served_name)
{
    json_t *a = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "svc", "spec", "model",
                          "servedName", "llama");
    json_t *b = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "svc", "spec", "model",
                          "servedName", "");
    ck_assert_str_eq(loop_served_name(a), "llama");
    ck_assert_str_eq(loop_served_name(b), "svc");
    json_decref(a);
    json_decref(b);
}
END_TEST

START_TEST(test_actuate_status_patch)
{
    struct policy_signals sig = {.ready_pods = 3,
                                 .unready_pods = 1,
                                 .metrics_ok = true,
                                 .waiting = 9,
                                 .running = 3,
                                 .kv_usage = 0.25,
                                 .prefix_hit_rate = 0.5,
                                 .arrival_rate = 1.5,
                                 .prompt_tok_rate = 100,
                                 .gen_tok_rate = NAN,
                                 .ttft_p99_s = -1};
    struct actuate_status st = {.desired = 5,
                                .reason = "queue depth 3.00/replica",
                                .last_scale = 1796000000,
                                .sig = &sig,
                                .now = 1796000000};
    json_t *p = actuate_status_patch(&st);
    ck_assert_ptr_nonnull(p);
    /* conditions[] (tested below): three without an objective. */
    json_t *conds =
        json_object_get(json_object_get(json_object_get(p, "status"), "autoscaling"), "conditions");
    ck_assert_uint_eq(json_array_size(conds), 3);
    json_object_del(json_object_get(json_object_get(p, "status"), "autoscaling"), "conditions");
    char *s = json_dumps(p, JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_str_eq(
        s, "{\"status\":{\"autoscaling\":{\"desiredReplicas\":5,\"lastScaleTime\":"
           "\"2026-11-30T00:53:20Z\",\"observedGeneration\":0,\"reason\":\"queue depth "
           "3.00/replica\",\"signals\":{"
           "\"arrivalRate\":1.5,\"generationTokenRate\":null,\"kvCacheUsage\":0.25,\"metricsOk\":"
           "true,\"prefixHitRate\":0.5,\"promptTokenRate\":100.0,\"readyPods\":3,\"running\":3.0,"
           "\"ttftP99Seconds\":null,\"unreadyPods\":1,\"waiting\":9.0}}}}");
    free(s);
    json_decref(p);
    /* No scale yet: lastScaleTime is left out so the stored value stays. */
    st.last_scale = 0;
    sig.ttft_p99_s = 0.25;
    p = actuate_status_patch(&st);
    json_t *as = json_object_get(json_object_get(p, "status"), "autoscaling");
    ck_assert_ptr_null(json_object_get(as, "lastScaleTime"));
    ck_assert_double_eq(
        json_real_value(json_object_get(json_object_get(as, "signals"), "ttftP99Seconds")), 0.25);
    ck_assert_ptr_null(json_object_get(as, "objective")); /* no decision given */
    json_decref(p);
    /* With the decision: the objective echoed with its state and the learned capacity; what is
     * unknown (no ITL objective, no ITL observed) is null. */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.objective_ttft_s = 3;
    struct policy_decision d = {.objective = POLICY_OBJECTIVE_MET,
                                .ttft_s = 2.5,
                                .itl_s = -1,
                                .ttft_over = 0.004,
                                .itl_over = -1,
                                .capacity_work = 600,
                                .capacity_rps = 1.5,
                                .load_work = 3000,
                                .backlog_work = 0};
    st.dec = &d;
    st.spec = &sp;
    st.generation = 7;
    p = actuate_status_patch(&st);
    as = json_object_get(json_object_get(p, "status"), "autoscaling");
    /* As the client sends it: 0.99, not 0.98999999999999999. */
    s = json_dumps(json_object_get(as, "objective"), JSON_SORT_KEYS | K8S_JSON_DUMP_FLAGS);
    ck_assert_str_eq(s, "{\"interTokenAboveFraction\":null,\"interTokenSeconds\":null,"
                        "\"observedInterTokenSeconds\":null,\"observedTTFTSeconds\":2.5,"
                        "\"percentile\":0.99,\"state\":\"Met\","
                        "\"ttftAboveFraction\":0.004,\"ttftSeconds\":3.0}");
    free(s);
    s = json_dumps(json_object_get(as, "capacity"), JSON_SORT_KEYS | JSON_COMPACT);
    ck_assert_str_eq(s, "{\"backlogWork\":0.0,\"loadWork\":3000.0,\"requestsPerReplica\":1.5,"
                        "\"workPerReplica\":600.0}");
    free(s);
    ck_assert_int_eq(json_integer_value(json_object_get(as, "observedGeneration")), 7);
    json_decref(p);
}
END_TEST

/* The condition of `type` in the patch's conditions: "status/reason". */
static const char *cond(const json_t *conds, const char *type)
{
    static char buf[128];
    const json_t *c = conditions_find(conds, type);
    if (!c) return "absent";
    snprintf(buf, sizeof(buf), "%s/%s", json_string_value(json_object_get(c, "status")),
             json_string_value(json_object_get(c, "reason")));
    return buf;
}

START_TEST(test_actuate_conditions_table)
{
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.objective_ttft_s = 3;
    struct policy_signals ok = {.ready_pods = 3, .metrics_ok = true};
    struct policy_signals none = {.unready_pods = 2, .metrics_ok = false};
    struct policy_decision met = {.objective = POLICY_OBJECTIVE_MET, .ttft_over = 0.002};
    struct policy_decision capped = {
        .objective = POLICY_OBJECTIVE_MISSED, .ttft_over = 0.05, .limit = POLICY_LIMIT_MAX};
    struct policy_decision rate = {.objective = POLICY_OBJECTIVE_INFEASIBLE,
                                   .limit = POLICY_LIMIT_UP_RATE};
    struct policy_decision unknown = {.objective = POLICY_OBJECTIVE_UNKNOWN, .ttft_over = -1};
    static const struct {
        const char *name;
        int sig; /* 0 ok, 1 none */
        int dec; /* 0 met, 1 capped, 2 rate, 3 unknown */
        bool failed, held, objective;
        const char *able, *active, *limited, *obj;
    } cases[] = {
        {"all well", 0, 0, false, false, true, "True/ReadyForNewScale", "True/ValidMetricFound",
         "False/DesiredWithinRange", "True/ObjectiveMet"},
        {"at maxReplicas, missing", 0, 1, false, false, true, "True/ReadyForNewScale",
         "True/ValidMetricFound", "True/TooManyReplicas", "False/ObjectiveMissed"},
        {"rate limited, infeasible", 0, 2, false, false, true, "True/ReadyForNewScale",
         "True/ValidMetricFound", "True/ScaleUpLimit", "False/ObjectiveInfeasible"},
        {"scale write failed", 0, 0, true, false, true, "False/FailedUpdateScale",
         "True/ValidMetricFound", "False/DesiredWithinRange", "True/ObjectiveMet"},
        {"no metrics, held", 1, 3, false, true, true, "True/ReadyForNewScale",
         "False/FailedGetMetrics", "True/MissingMetrics", "Unknown/TooFewObservations"},
        {"no objective", 0, 0, false, false, false, "True/ReadyForNewScale",
         "True/ValidMetricFound", "False/DesiredWithinRange", "absent"},
    };
    const struct policy_decision *decs[] = {&met, &capped, &rate, &unknown};
    struct policy_spec plain;
    policy_spec_defaults(&plain, POLICY_REACTIVE);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct actuate_status st = {.desired = 2,
                                    .reason = "r",
                                    .sig = cases[i].sig ? &none : &ok,
                                    .dec = decs[cases[i].dec],
                                    .spec = cases[i].objective ? &sp : &plain,
                                    .generation = 4,
                                    .scale_failed = cases[i].failed,
                                    .held = cases[i].held,
                                    .now = 1796000000};
        json_t *c = actuate_conditions(&st);
        ck_assert_ptr_nonnull(c);
        ck_assert_msg(strcmp(cond(c, "AbleToScale"), cases[i].able) == 0, "%s: %s", cases[i].name,
                      cond(c, "AbleToScale"));
        ck_assert_msg(strcmp(cond(c, "ScalingActive"), cases[i].active) == 0, "%s: %s",
                      cases[i].name, cond(c, "ScalingActive"));
        ck_assert_msg(strcmp(cond(c, "ScalingLimited"), cases[i].limited) == 0, "%s: %s",
                      cases[i].name, cond(c, "ScalingLimited"));
        ck_assert_msg(strcmp(cond(c, "ObjectiveMet"), cases[i].obj) == 0, "%s: %s", cases[i].name,
                      cond(c, "ObjectiveMet"));
        json_decref(c);
    }
    /* lastTransitionTime: kept while a status holds, moved when it flips. */
    struct actuate_status st = {
        .desired = 2, .sig = &ok, .dec = &met, .spec = &sp, .generation = 4, .now = 1796000000};
    json_t *first = actuate_conditions(&st);
    st.prev_conditions = first;
    st.now += 60;
    st.scale_failed = true;
    json_t *second = actuate_conditions(&st);
    const char *t_active = json_string_value(
        json_object_get(conditions_find(second, "ScalingActive"), "lastTransitionTime"));
    const char *t_able = json_string_value(
        json_object_get(conditions_find(second, "AbleToScale"), "lastTransitionTime"));
    ck_assert_str_eq(t_active, "2026-11-30T00:53:20Z");
    ck_assert_str_eq(t_able, "2026-11-30T00:54:20Z");
    ck_assert_int_eq(json_integer_value(json_object_get(conditions_find(second, "AbleToScale"),
                                                        "observedGeneration")),
                     4);
    json_decref(first);
    json_decref(second);
}
END_TEST

START_TEST(test_actuate_event_new)
{
    json_t *ev = actuate_event_new("ml", "chat", "uid-1", "ScaledUp", "Scaled from 1 to 5", 0);
    ck_assert_ptr_nonnull(ev);
    ck_assert_str_eq(json_string_value(json_object_get(ev, "reason")), "ScaledUp");
    ck_assert_str_eq(json_string_value(json_object_get(ev, "type")), "Normal");
    ck_assert_str_eq(json_string_value(json_object_get(ev, "message")), "Scaled from 1 to 5");
    ck_assert_str_eq(json_string_value(json_object_get(ev, "firstTimestamp")),
                     "1970-01-01T00:00:00Z");
    json_t *io = json_object_get(ev, "involvedObject");
    ck_assert_str_eq(json_string_value(json_object_get(io, "kind")), "InferenceService");
    ck_assert_str_eq(json_string_value(json_object_get(io, "apiVersion")),
                     "serving.cinfer.io/v1alpha1");
    ck_assert_str_eq(json_string_value(json_object_get(io, "uid")), "uid-1");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(ev, "metadata"), "generateName")),
        "chat.");
    json_decref(ev);
    /* A missing uid (not yet known) leaves the field out instead of failing. */
    ev = actuate_event_new("ml", "chat", NULL, "ScaledDown", NULL, 0);
    ck_assert_ptr_nonnull(ev);
    ck_assert_ptr_null(json_object_get(json_object_get(ev, "involvedObject"), "uid"));
    json_decref(ev);
}
END_TEST

Suite *loop_suite(void)
{
    Suite *s = suite_create("loop");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_loop_targets_parse_valid);
    tcase_add_test(tc, test_loop_targets_parse_invalid);
    tcase_add_test(tc, test_loop_spec_from_isvc_policies);
    tcase_add_test(tc, test_loop_spec_from_isvc_fields);
    tcase_add_test(tc, test_loop_pod_endpoint);
    tcase_add_test(tc, test_loop_zero_decide);
    tcase_add_test(tc, test_loop_served_name);
    tcase_add_test(tc, test_actuate_status_patch);
    tcase_add_test(tc, test_actuate_conditions_table);
    tcase_add_test(tc, test_actuate_event_new);
    suite_add_tcase(s, tc);
    return s;
}
