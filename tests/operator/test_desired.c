/* Desired Deployment/Service: golden JSON per example, owned-field rules, model sources, errors. */
#include "common/err.h"
#include "operator/desired.h"
#include "tests/operator/golden.h"

#include <check.h>
#include <string.h>

static const struct desired_settings settings = {
    .engine_image = "ghcr.io/cinfer/cinfer-engine:0.1.0",
    .image_pull_policy = "IfNotPresent",
    .shutdown_timeout_seconds = 30,
};

static void check_example(const char *in, const char *dep_golden, const char *svc_golden)
{
    json_t *isvc = golden_load(in), *dep = NULL, *svc = NULL;
    char err[256] = "";
    ck_assert_msg(desired_deployment(isvc, &settings, &dep, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(desired_service(isvc, &svc), 0);
    golden_check(dep, dep_golden);
    golden_check(svc, svc_golden);
    json_decref(dep);
    json_decref(svc);
    json_decref(isvc);
}

START_TEST(test_desired_minimal_golden)
{
    check_example("isvc-minimal.json", "minimal.deployment.json", "minimal.service.json");
}
END_TEST

START_TEST(test_desired_gpu_hf_golden)
{
    check_example("isvc-gpu-hf.json", "gpu-hf.deployment.json", "gpu-hf.service.json");
}
END_TEST

START_TEST(test_desired_pvc_golden)
{
    check_example("isvc-pvc.json", "pvc.deployment.json", "pvc.service.json");
}
END_TEST

/* Invariants that must hold whatever the goldens say. */
START_TEST(test_desired_deployment_invariants)
{
    json_t *isvc = golden_load("isvc-gpu-hf.json"), *dep = NULL;
    char err[256];
    ck_assert_int_eq(desired_deployment(isvc, &settings, &dep, err, sizeof(err)), 0);
    json_t *spec = json_object_get(dep, "spec");
    json_t *tmpl = json_object_get(spec, "template");
    json_t *sel = json_object_get(json_object_get(spec, "selector"), "matchLabels");
    json_t *pod_labels = json_object_get(json_object_get(tmpl, "metadata"), "labels");
    const char *k;
    json_t *v;
    json_object_foreach(sel, k, v)
    {
        ck_assert_msg(json_equal(json_object_get(pod_labels, k), v), "selector label %s", k);
    }
    /* Users can add pod labels but never override the contract labels. */
    ck_assert_str_eq(json_string_value(json_object_get(pod_labels, "app.kubernetes.io/name")),
                     "cinfer-engine");
    ck_assert_str_eq(json_string_value(json_object_get(pod_labels, "team")), "search");
    ck_assert_int_eq(json_integer_value(json_object_get(spec, "replicas")), 2);
    json_t *owner =
        json_array_get(json_object_get(json_object_get(dep, "metadata"), "ownerReferences"), 0);
    ck_assert(json_is_true(json_object_get(owner, "controller")));
    ck_assert_str_eq(json_string_value(json_object_get(owner, "uid")),
                     "0a1b2c3d-0000-4000-8000-000000000002");
    json_t *pod = json_object_get(tmpl, "spec");
    /* Grace period covers the engine's drain deadline. */
    ck_assert_int_gt(json_integer_value(json_object_get(pod, "terminationGracePeriodSeconds")), 30);
    json_t *c = json_array_get(json_object_get(pod, "containers"), 0);
    json_t *sc = json_object_get(c, "securityContext");
    ck_assert(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
    ck_assert(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
    ck_assert(
        json_is_true(json_object_get(json_object_get(pod, "securityContext"), "runAsNonRoot")));
    json_decref(dep);
    json_decref(isvc);
}
END_TEST

START_TEST(test_desired_deployment_rejects_bad_specs)
{
    static const struct {
        const char *uri, *want;
    } cases[] = {
        {"s3://bucket/m.gguf", "unsupported model URI scheme"},
        {"http://example.com/m.gguf", "plain http://"},
        {"file://relative/m.gguf", "absolute path"},
        {"file:///models/../etc/passwd", "'..'"},
        {"pvc://Bad_Claim/m.gguf", "valid claim name"},
        {"pvc://models", "file path inside the claim"},
        {"hf://org/repo", "hf://org/repo/file.gguf"},
        {"https://host", "host and a file path"},
        {"file:///models/a b.gguf", "whitespace"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *isvc = json_pack("{s:{s:s, s:s}, s:{s:{s:s}}}", "metadata", "name", "x",
                                 "namespace", "default", "spec", "model", "uri", cases[i].uri);
        json_t *dep = NULL;
        char err[256] = "";
        ck_assert_int_eq(desired_deployment(isvc, &settings, &dep, err, sizeof(err)), ERR_INVAL);
        ck_assert_msg(strstr(err, cases[i].want), "case %zu (%s): \"%s\"", i, cases[i].uri, err);
        ck_assert_ptr_null(dep);
        json_decref(isvc);
    }
    json_t *isvc = json_pack("{s:{s:s}, s:{s:{s:s}, s:{s:s}}}", "metadata", "name", "x", "spec",
                             "model", "uri", "file:///m.gguf", "engine", "kvCacheBytes", "lots");
    json_t *dep = NULL;
    char err[256] = "";
    ck_assert_int_eq(desired_deployment(isvc, &settings, &dep, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "kvCacheBytes"));
    json_decref(isvc);
}
END_TEST

START_TEST(test_desired_quantity_bytes)
{
    unsigned long long b;
    json_t *q;
    static const struct {
        const char *s;
        unsigned long long want;
    } ok[] = {
        {"2Gi", 2ull << 30}, {"1500M", 1500000000ull}, {"123", 123}, {"1.5Ki", 1536}, {"3k", 3000}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        q = json_string(ok[i].s);
        ck_assert_int_eq(desired_quantity_bytes(q, &b), 0);
        ck_assert_uint_eq(b, ok[i].want);
        json_decref(q);
    }
    static const char *const bad[] = {"", "Gi", "2Gb", "-1", "1e3x", "abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        q = json_string(bad[i]);
        ck_assert_msg(desired_quantity_bytes(q, &b) != 0, "accepted \"%s\"", bad[i]);
        json_decref(q);
    }
    q = json_integer(-5);
    ck_assert_int_eq(desired_quantity_bytes(q, &b), ERR_RANGE);
    json_decref(q);
}
END_TEST

START_TEST(test_desired_selector_matches_labels)
{
    char sel[256];
    ck_assert_int_eq(desired_selector("chat", sel, sizeof(sel)), 0);
    ck_assert_str_eq(sel, "app.kubernetes.io/name=cinfer-engine,"
                          "serving.cinfer.io/inferenceservice=chat");
    ck_assert_int_eq(desired_selector("chat", sel, 10), ERR_TOO_BIG);
}
END_TEST

Suite *desired_suite(void)
{
    Suite *s = suite_create("desired");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_desired_minimal_golden);
    tcase_add_test(tc, test_desired_gpu_hf_golden);
    tcase_add_test(tc, test_desired_pvc_golden);
    tcase_add_test(tc, test_desired_deployment_invariants);
    tcase_add_test(tc, test_desired_deployment_rejects_bad_specs);
    tcase_add_test(tc, test_desired_quantity_bytes);
    tcase_add_test(tc, test_desired_selector_matches_labels);
    suite_add_tcase(s, tc);
    return s;
}
