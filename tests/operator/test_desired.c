/* Desired Deployment/Service: golden JSON per example, owned-field rules, model sources, errors. */
#include "common/err.h"
#include "operator/desired.h"
#include "tests/operator/golden.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const struct desired_settings settings = {
    .engine_image = "ghcr.io/cinfer/cinfer-engine:0.1.0",
    .image_pull_policy = "IfNotPresent",
    .shutdown_timeout_seconds = 30,
    .shutdown_delay_seconds = 10,
    .network_policy = true,
    .system_namespace = "cinfer-system",
    .allowed_namespaces = "monitoring",
    .download_limit_bytes = 64ull << 30,
};

static void check_example(const char *in, const char *dep_golden, const char *svc_golden,
                          const char *np_golden)
{
    json_t *isvc = golden_load(in), *dep = NULL, *svc = NULL, *np = NULL;
    char err[256] = "";
    ck_assert_msg(desired_deployment(isvc, &settings, &dep, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(desired_service(isvc, &svc), 0);
    ck_assert_msg(desired_network_policy(isvc, &settings, &np, err, sizeof(err)) == 0, "%s", err);
    golden_check(dep, dep_golden);
    if (svc_golden) golden_check(svc, svc_golden);
    if (np_golden) golden_check(np, np_golden);
    json_decref(dep);
    json_decref(svc);
    json_decref(np);
    json_decref(isvc);
}

START_TEST(test_desired_minimal_golden)
{
    check_example("isvc-minimal.json", "minimal.deployment.json", "minimal.service.json",
                  "minimal.networkpolicy.json");
}
END_TEST

START_TEST(test_desired_gpu_hf_golden)
{
    check_example("isvc-gpu-hf.json", "gpu-hf.deployment.json", "gpu-hf.service.json", NULL);
}
END_TEST

START_TEST(test_desired_pvc_golden)
{
    check_example("isvc-pvc.json", "pvc.deployment.json", "pvc.service.json", NULL);
}
END_TEST

/* spec.engine.kvOffload: a shared PVC for tier 3 plus host memory (counted in the memory
 * request); an emptyDir when no claim is named. */
START_TEST(test_desired_kv_offload_golden)
{
    check_example("isvc-kvoffload.json", "kvoffload.deployment.json", NULL, NULL);
    check_example("isvc-kvoffload-emptydir.json", "kvoffload-emptydir.deployment.json", NULL, NULL);
}
END_TEST

/* A hardened service: API key from a Secret, listed namespaces, a checksum on a volume model, sizes
 * from sizeBytes and kvCacheBytes; and a sized download. */
START_TEST(test_desired_secure_golden)
{
    check_example("isvc-secure.json", "secure.deployment.json", NULL, "secure.networkpolicy.json");
    check_example("isvc-download-sized.json", "download-sized.deployment.json", NULL, NULL);
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

/* desired_deployment on a JSON spec; returns its rc, the Deployment in *dep (or NULL). */
static int build(const char *spec_json, json_t **dep, char *err, size_t errlen)
{
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    ck_assert_msg(spec != NULL, "%s: %s", spec_json, je.text);
    json_t *isvc = json_pack("{s:{s:s, s:s, s:s}, s:o}", "metadata", "name", "x", "namespace", "ns",
                             "uid", "u-1", "spec", spec);
    *dep = NULL;
    int rc = desired_deployment(isvc, &settings, dep, err, errlen);
    json_decref(isvc);
    return rc;
}

static json_t *pod_spec_of(const json_t *dep)
{
    return json_object_get(json_object_get(json_object_get(dep, "spec"), "template"), "spec");
}

static json_t *engine_of(const json_t *dep)
{
    return json_array_get(json_object_get(pod_spec_of(dep), "containers"), 0);
}

/* The value at requests/limits `map` for `res` in the engine container, or NULL. */
static const char *resource(const json_t *dep, const char *map, const char *res)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(engine_of(dep), "resources"), map), res));
}

static bool args_have(const json_t *args, const char *a, const char *b)
{
    for (size_t i = 0; i + 1 < json_array_size(args); i++)
        if (strcmp(json_string_value(json_array_get(args, i)), a) == 0 &&
            strcmp(json_string_value(json_array_get(args, i + 1)), b) == 0)
            return true;
    return false;
}

/* The API key reaches the engine only through its environment, from the Secret. */
START_TEST(test_desired_api_key_from_secret)
{
    json_t *dep;
    char err[256] = "";
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"file:///m.gguf\"},"
                           "\"security\":{\"apiKeySecretRef\":{\"name\":\"k\"}}}",
                           &dep, err, sizeof(err)),
                     0);
    json_t *c = engine_of(dep);
    json_t *env = json_array_get(json_object_get(c, "env"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(env, "name")), "CINFER_ENGINE_API_KEY");
    ck_assert_ptr_null(json_object_get(env, "value"));
    json_t *ref = json_object_get(json_object_get(env, "valueFrom"), "secretKeyRef");
    ck_assert_str_eq(json_string_value(json_object_get(ref, "name")), "k");
    ck_assert_str_eq(json_string_value(json_object_get(ref, "key")), "api-key"); /* CRD default */
    ck_assert(json_is_false(json_object_get(ref, "optional")));
    char *args = json_dumps(json_object_get(c, "args"), 0);
    ck_assert_ptr_null(strstr(args, "api-key"));
    ck_assert_ptr_null(strstr(args, "API_KEY"));
    free(args);
    json_decref(dep);
    /* Without the reference nothing is added. */
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"file:///m.gguf\"}}", &dep, err, sizeof(err)), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(engine_of(dep), "env")), 0);
    json_decref(dep);
    /* A second source of the same variable, or a reference without a name, is refused. */
    ck_assert_int_eq(
        build("{\"model\":{\"uri\":\"file:///m.gguf\"},"
              "\"engine\":{\"env\":[{\"name\":\"CINFER_ENGINE_API_KEY\",\"value\":\"x\"}]},"
              "\"security\":{\"apiKeySecretRef\":{\"name\":\"k\"}}}",
              &dep, err, sizeof(err)),
        ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "spec.security.apiKeySecretRef provides"));
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"file:///m.gguf\"},"
                           "\"security\":{\"apiKeySecretRef\":{\"key\":\"k\"}}}",
                           &dep, err, sizeof(err)),
                     ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "apiKeySecretRef.name"));
}
END_TEST

/* Defaults for each resource the spec leaves out, never next to one it sets. */
START_TEST(test_desired_resources_defaults)
{
    static const struct {
        const char *spec;
        const char *cpu_req, *mem_req, *mem_lim, *eph_req;
    } cases[] = {
        /* size unknown: a cpu request only */
        {"{\"model\":{\"uri\":\"file:///m.gguf\"}}", "1", NULL, NULL, NULL},
        /* threads; 1Gi model, automatic KV: (1024 + 512 + 64) * 4/3 = 2133.3 -> 2134Mi */
        {"{\"model\":{\"uri\":\"pvc://c/"
         "m.gguf\",\"sizeBytes\":\"1Gi\"},\"engine\":{\"threads\":8}}",
         "8", "2134Mi", "2134Mi", NULL},
        /* explicit KV: 1024 + 2048 + 576 = 3648Mi */
        {"{\"model\":{\"uri\":\"file:///m.gguf\",\"sizeBytes\":1073741824},"
         "\"engine\":{\"kvCacheBytes\":\"2Gi\"}}",
         "1", "3648Mi", "3648Mi", NULL},
        /* whole GiB stay GiB: 8Gi + 4Gi + (512Mi + 512Mi) = 13Gi */
        {"{\"model\":{\"uri\":\"file:///m.gguf\",\"sizeBytes\":\"8Gi\"},"
         "\"engine\":{\"kvCacheBytes\":\"4Gi\"}}",
         "1", "13Gi", "13Gi", NULL},
        /* a download of known size asks for its disk */
        {"{\"model\":{\"uri\":\"https://h/m.gguf\",\"sizeBytes\":\"1000Mi\"},"
         "\"engine\":{\"kvCacheBytes\":\"1Gi\"}}",
         "1", "2599Mi", "2599Mi", "1100Mi"},
        /* a download of unknown size: no disk request (the fallback limit is only a backstop) */
        {"{\"model\":{\"uri\":\"https://h/m.gguf\"}}", "1", NULL, NULL, NULL},
        /* the user's memory limit alone: no memory default (it would exceed or undercut it) */
        {"{\"model\":{\"uri\":\"file:///m.gguf\",\"sizeBytes\":\"1Gi\"},"
         "\"resources\":{\"limits\":{\"memory\":\"1Gi\"}}}",
         "1", NULL, "1Gi", NULL},
        /* the user's cpu limit alone: no cpu request default */
        {"{\"model\":{\"uri\":\"file:///m.gguf\"},\"resources\":{\"limits\":{\"cpu\":\"500m\"}}}",
         NULL, NULL, NULL, NULL},
        /* the user's own values win */
        {"{\"model\":{\"uri\":\"https://h/m.gguf\",\"sizeBytes\":\"1Gi\"},"
         "\"resources\":{\"requests\":{\"cpu\":\"3\",\"memory\":\"5Gi\","
         "\"ephemeral-storage\":\"9Gi\"}}}",
         "3", "5Gi", NULL, "9Gi"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *dep;
        char err[256] = "";
        ck_assert_msg(build(cases[i].spec, &dep, err, sizeof(err)) == 0, "case %zu: %s", i, err);
        const char *got[] = {resource(dep, "requests", "cpu"), resource(dep, "requests", "memory"),
                             resource(dep, "limits", "memory"),
                             resource(dep, "requests", "ephemeral-storage")};
        const char *want[] = {cases[i].cpu_req, cases[i].mem_req, cases[i].mem_lim,
                              cases[i].eph_req};
        for (int j = 0; j < 4; j++)
            ck_assert_msg(want[j] ? got[j] && strcmp(got[j], want[j]) == 0 : !got[j],
                          "case %zu field %d: got %s, want %s", i, j, got[j] ? got[j] : "(none)",
                          want[j] ? want[j] : "(none)");
        if (!strstr(cases[i].spec, "500m")) /* never a default cpu limit */
            ck_assert_ptr_null(resource(dep, "limits", "cpu"));
        json_decref(dep);
    }
}
END_TEST

/* The download volume and fetch-model's byte limit follow sizeBytes, else the operator's limit;
 * sizes are validated. */
START_TEST(test_desired_download_limits)
{
    json_t *dep;
    char err[256] = "";
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"hf://o/r/m.gguf\",\"sizeBytes\":\"10Gi\"}}", &dep,
                           err, sizeof(err)),
                     0);
    json_t *pod = pod_spec_of(dep);
    json_t *fetch = json_array_get(json_object_get(pod, "initContainers"), 0);
    ck_assert(args_have(json_object_get(fetch, "args"), "--max-bytes", "10737418240"));
    json_t *vol = json_array_get(json_object_get(pod, "volumes"), 0);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(vol, "emptyDir"), "sizeLimit")),
        "11Gi"); /* + 10% */
    json_decref(dep);
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"https://h/m.gguf\"}}", &dep, err, sizeof(err)),
                     0);
    fetch = json_array_get(json_object_get(pod_spec_of(dep), "initContainers"), 0);
    ck_assert(args_have(json_object_get(fetch, "args"), "--max-bytes", "68719476736"));
    json_decref(dep);
    static const char *const bad[] = {"0", "\"0Gi\"", "\"lots\"", "-5", "\"2Pi\"", "\"-1Gi\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char spec[256];
        snprintf(spec, sizeof(spec), "{\"model\":{\"uri\":\"https://h/m.gguf\",\"sizeBytes\":%s}}",
                 bad[i]);
        ck_assert_msg(build(spec, &dep, err, sizeof(err)) == ERR_INVAL, "accepted %s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err, "spec.model.sizeBytes"));
        ck_assert_ptr_null(dep);
    }
}
END_TEST

/* spec.model.sha256 is checked for every source: fetch-model for downloads, verify-model before
 * the engine for file:// and pvc://; nothing to check without it. */
START_TEST(test_desired_sha256_every_source)
{
    static const char *const sha =
        "4f9a1c2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
    static const struct {
        const char *uri, *container, *path;
    } cases[] = {
        {"file:///models/m.gguf", "verify-model", "/models/m.gguf"},
        {"pvc://claim/dir/m.gguf", "verify-model", "/models/dir/m.gguf"},
        {"https://h/m.gguf", "fetch-model", NULL},
        {"hf://o/r/m.gguf", "fetch-model", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char spec[512], err[256] = "";
        json_t *dep;
        snprintf(spec, sizeof(spec), "{\"model\":{\"uri\":\"%s\",\"sha256\":\"%s\"}}", cases[i].uri,
                 sha);
        ck_assert_int_eq(build(spec, &dep, err, sizeof(err)), 0);
        json_t *inits = json_object_get(pod_spec_of(dep), "initContainers");
        ck_assert_uint_eq(json_array_size(inits), 1);
        json_t *c = json_array_get(inits, 0), *args = json_object_get(c, "args");
        ck_assert_str_eq(json_string_value(json_object_get(c, "name")), cases[i].container);
        ck_assert(args_have(args, "--sha256", sha));
        if (cases[i].path) {
            ck_assert(args_have(args, "--verify", cases[i].path));
            /* the engine maps the file that was checked */
            ck_assert(args_have(json_object_get(engine_of(dep), "args"), "--model", cases[i].path));
            ck_assert(json_equal(json_object_get(c, "volumeMounts"),
                                 json_object_get(engine_of(dep), "volumeMounts")));
        }
        json_decref(dep);
        snprintf(spec, sizeof(spec), "{\"model\":{\"uri\":\"%s\"}}", cases[i].uri);
        ck_assert_int_eq(build(spec, &dep, err, sizeof(err)), 0);
        ck_assert_uint_eq(json_array_size(json_object_get(pod_spec_of(dep), "initContainers")),
                          cases[i].path ? 0 : 1);
        json_decref(dep);
    }
}
END_TEST

/* Shutdown: the engine serves on for the delay, drains for the timeout; the grace period covers
 * both; no preStop hook adds to them. */
START_TEST(test_desired_shutdown_timing)
{
    json_t *dep;
    char err[256] = "";
    ck_assert_int_eq(build("{\"model\":{\"uri\":\"file:///m.gguf\"}}", &dep, err, sizeof(err)), 0);
    json_t *c = engine_of(dep), *args = json_object_get(c, "args");
    ck_assert(args_have(args, "--shutdown-delay-seconds", "10"));
    ck_assert(args_have(args, "--shutdown-timeout", "30"));
    ck_assert_int_eq(
        json_integer_value(json_object_get(pod_spec_of(dep), "terminationGracePeriodSeconds")),
        10 + 30 + 15);
    ck_assert_ptr_null(json_object_get(c, "lifecycle"));
    json_decref(dep);
}
END_TEST

/* The policy admits the router and the autoscaler of the system namespace and whole listed
 * namespaces, on the engine port only; malformed namespace names are refused. */
START_TEST(test_desired_network_policy_peers)
{
    json_t *isvc = golden_load("isvc-minimal.json"), *np = NULL;
    char err[256] = "";
    struct desired_settings s = settings;
    s.allowed_namespaces = NULL;
    ck_assert_int_eq(desired_network_policy(isvc, &s, &np, err, sizeof(err)), 0);
    json_t *rule = json_array_get(json_object_get(json_object_get(np, "spec"), "ingress"), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(rule, "from")), 2); /* router, autoscaler */
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(rule, "ports"), 0), "port")),
                     DESIRED_ENGINE_PORT);
    json_decref(np);
    static const char *const bad_settings[] = {"a,", "A", "a,,b", "a b"};
    for (size_t i = 0; i < sizeof(bad_settings) / sizeof(bad_settings[0]); i++) {
        s.allowed_namespaces = bad_settings[i];
        ck_assert_int_eq(desired_network_policy(isvc, &s, &np, err, sizeof(err)), ERR_INVAL);
        ck_assert_ptr_nonnull(strstr(err, "--network-policy-allow-namespaces"));
    }
    s = settings;
    s.system_namespace = NULL;
    ck_assert_int_eq(desired_network_policy(isvc, &s, &np, err, sizeof(err)), ERR_INVAL);
    json_decref(isvc);
    isvc = json_pack("{s:{s:s, s:s}, s:{s:{s:s}, s:{s:[s]}}}", "metadata", "name", "x", "namespace",
                     "ns", "spec", "model", "uri", "file:///m.gguf", "security",
                     "allowedNamespaces", "Bad_NS");
    ck_assert_int_eq(desired_network_policy(isvc, &settings, &np, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "spec.security.allowedNamespaces"));
    ck_assert_ptr_nonnull(strstr(err, "Bad_NS"));
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

/* Malformed kvOffload fields are refused with the field's name. */
START_TEST(test_desired_kv_offload_invalid)
{
    static const char *const bad[] = {
        "\"lots\"",
        "{\"hostBytes\":\"2Gb\"}",
        "{\"hostBytes\":-1}",
        "{\"disk\":{}}",
        "{\"disk\":{\"sizeBytes\":\"10k\"}}",
        "{\"disk\":{\"sizeBytes\":\"1Gi\",\"volume\":{\"claimName\":\"\"}}}",
        "{\"disk\":{\"sizeBytes\":\"1Gi\",\"volume\":{\"claimName\":3}}}",
        "{\"disk\":{\"sizeBytes\":\"1Gi\",\"volume\":{\"claimName\":\"c\",\"emptyDir\":{}}}}",
        "{\"disk\":\"yes\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char spec[512], err[256] = "";
        json_t *dep;
        snprintf(spec, sizeof(spec),
                 "{\"model\":{\"uri\":\"file:///m.gguf\"},\"engine\":{\"kvOffload\":%s}}", bad[i]);
        ck_assert_msg(build(spec, &dep, err, sizeof(err)) == ERR_INVAL, "accepted %s", bad[i]);
        ck_assert_msg(strstr(err, "spec.engine.kvOffload") != NULL, "%s: %s", bad[i], err);
        ck_assert_ptr_null(dep);
    }
}
END_TEST

/* The engine container's volume mount named `name`, or NULL. */
static json_t *mount_named(const json_t *dep, const char *name)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(engine_of(dep), "volumeMounts"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0) return m;
    }
    return NULL;
}

static json_t *volume_named(const json_t *dep, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(pod_spec_of(dep), "volumes"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0) return v;
    }
    return NULL;
}

static bool args_contain(const json_t *args, const char *a)
{
    for (size_t i = 0; i < json_array_size(args); i++)
        if (strcmp(json_string_value(json_array_get(args, i)), a) == 0) return true;
    return false;
}

/* spec.engine.speculative: a draft model downloaded like the model (hf://, its own emptyDir, its
 * checksum and token), ngram on a pvc:// model, a draft on a second claim checked by
 * verify-draft-model. */
START_TEST(test_desired_speculative_golden)
{
    check_example("isvc-speculative-draft.json", "speculative-draft.deployment.json", NULL, NULL);
    check_example("isvc-speculative-ngram.json", "speculative-ngram.deployment.json", NULL, NULL);
    check_example("isvc-speculative-pvc.json", "speculative-pvc.deployment.json", NULL, NULL);
}
END_TEST

/* The flags each method renders, and where the draft model is found in the pod. */
START_TEST(test_desired_speculative_flags)
{
    static const char *const sha =
        "4f9a1c2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
    static const struct {
        const char *model, *speculative; /* speculative NULL: the field is absent */
        const char *method, *tokens, *draft_path;
        const char *draft_init;   /* the draft's init container, or NULL for none */
        const char *draft_volume; /* "pvc", "emptyDir" or NULL: no volume "draft-model" */
    } cases[] = {
        {"file:///m.gguf", NULL, NULL, NULL, NULL, NULL, NULL},
        {"file:///m.gguf", "{\"method\":\"none\"}", "none", NULL, NULL, NULL, NULL},
        /* numTokens means nothing with none: not passed */
        {"file:///m.gguf", "{\"method\":\"none\",\"numTokens\":3}", "none", NULL, NULL, NULL, NULL},
        {"file:///m.gguf", "{\"method\":\"ngram\"}", "ngram", NULL, NULL, NULL, NULL},
        {"file:///m.gguf", "{\"method\":\"ngram\",\"numTokens\":16}", "ngram", "16", NULL, NULL,
         NULL},
        {"file:///m.gguf", "{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d/s.gguf\"}}",
         "draft", NULL, "/d/s.gguf", NULL, NULL},
        {"file:///m.gguf",
         "{\"method\":\"draft\",\"numTokens\":1,\"draftModel\":{\"uri\":\"file:///d/s.gguf\","
         "\"sha256\":\"SHA\"}}",
         "draft", "1", "/d/s.gguf", "verify-draft-model", NULL},
        /* the model's own claim: read through its mount, no second volume */
        {"pvc://models/big.gguf",
         "{\"method\":\"draft\",\"draftModel\":{\"uri\":\"pvc://models/small/s.gguf\"}}", "draft",
         NULL, "/models/small/s.gguf", NULL, NULL},
        {"pvc://models/big.gguf",
         "{\"method\":\"draft\",\"draftModel\":{\"uri\":\"pvc://drafts/"
         "s.gguf\",\"sha256\":\"SHA\"}}",
         "draft", NULL, "/draft-model/s.gguf", "verify-draft-model", "pvc"},
        {"https://h/m.gguf", "{\"method\":\"draft\",\"draftModel\":{\"uri\":\"https://h/s.gguf\"}}",
         "draft", NULL, "/draft-model/draft.gguf", "fetch-draft-model", "emptyDir"},
        {"file:///m.gguf",
         "{\"method\":\"draft\",\"draftModel\":{\"uri\":\"hf://o/r/s.gguf\",\"sha256\":\"SHA\"}}",
         "draft", NULL, "/draft-model/draft.gguf", "fetch-draft-model", "emptyDir"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char spec[1024], sp[512] = "", err[256] = "";
        const char *sha_at = cases[i].speculative ? strstr(cases[i].speculative, "SHA") : NULL;
        if (sha_at)
            snprintf(sp, sizeof(sp), "%.*s%s%s", (int)(sha_at - cases[i].speculative),
                     cases[i].speculative, sha, sha_at + 3);
        else if (cases[i].speculative)
            snprintf(sp, sizeof(sp), "%s", cases[i].speculative);
        if (cases[i].speculative)
            snprintf(spec, sizeof(spec),
                     "{\"model\":{\"uri\":\"%s\"},\"engine\":{\"speculative\":%s}}", cases[i].model,
                     sp);
        else
            snprintf(spec, sizeof(spec), "{\"model\":{\"uri\":\"%s\"}}", cases[i].model);
        json_t *dep;
        ck_assert_msg(build(spec, &dep, err, sizeof(err)) == 0, "case %zu: %s", i, err);
        json_t *args = json_object_get(engine_of(dep), "args");
        if (cases[i].method)
            ck_assert_msg(args_have(args, "--speculative", cases[i].method), "case %zu", i);
        else
            ck_assert_msg(!args_contain(args, "--speculative"), "case %zu", i);
        if (cases[i].tokens)
            ck_assert_msg(args_have(args, "--num-speculative-tokens", cases[i].tokens), "case %zu",
                          i);
        else
            ck_assert_msg(!args_contain(args, "--num-speculative-tokens"), "case %zu", i);
        if (cases[i].draft_path)
            ck_assert_msg(args_have(args, "--draft-model", cases[i].draft_path), "case %zu", i);
        else
            ck_assert_msg(!args_contain(args, "--draft-model"), "case %zu", i);
        /* the model's own check comes first; the draft's (if any) after it */
        json_t *inits = json_object_get(pod_spec_of(dep), "initContainers");
        size_t model_inits = strncmp(cases[i].model, "https://", 8) == 0 ? 1 : 0;
        ck_assert_uint_eq(json_array_size(inits), model_inits + (cases[i].draft_init ? 1 : 0));
        if (cases[i].draft_init) {
            json_t *c = json_array_get(inits, model_inits), *cargs = json_object_get(c, "args");
            ck_assert_str_eq(json_string_value(json_object_get(c, "name")), cases[i].draft_init);
            if (strcmp(cases[i].draft_init, "verify-draft-model") == 0) {
                /* it hashes the very file the engine maps, through the engine's mounts */
                ck_assert(args_have(cargs, "--verify", cases[i].draft_path));
                ck_assert(args_have(cargs, "--sha256", sha));
                ck_assert(json_equal(json_object_get(c, "volumeMounts"),
                                     json_object_get(engine_of(dep), "volumeMounts")));
            } else {
                ck_assert_str_eq(json_string_value(json_array_get(cargs, 2)), cases[i].draft_path);
                ck_assert(args_have(cargs, "--max-bytes", "68719476736")); /* no sizeBytes */
                ck_assert(sha_at ? args_have(cargs, "--sha256", sha)
                                 : !args_contain(cargs, "--sha256"));
                json_t *m = json_array_get(json_object_get(c, "volumeMounts"), 0);
                ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "draft-model");
                ck_assert_ptr_null(json_object_get(m, "readOnly")); /* it writes there */
            }
        }
        json_t *v = volume_named(dep, "draft-model"), *m = mount_named(dep, "draft-model");
        if (cases[i].draft_volume) {
            ck_assert_msg(v && m, "case %zu: no draft-model volume", i);
            ck_assert(json_is_true(json_object_get(m, "readOnly")));
            ck_assert_str_eq(json_string_value(json_object_get(m, "mountPath")), "/draft-model");
            if (strcmp(cases[i].draft_volume, "pvc") == 0) {
                json_t *pvc = json_object_get(v, "persistentVolumeClaim");
                ck_assert_str_eq(json_string_value(json_object_get(pvc, "claimName")), "drafts");
                ck_assert(json_is_true(json_object_get(pvc, "readOnly")));
            } else {
                ck_assert_str_eq(
                    json_string_value(json_object_get(json_object_get(v, "emptyDir"), "sizeLimit")),
                    "72090Mi"); /* the operator's limit + 10% */
            }
        } else {
            ck_assert_msg(!v && !m, "case %zu: unexpected draft-model volume", i);
        }
        json_decref(dep);
    }
}
END_TEST

/* The draft's sizeBytes bounds its download and adds to the memory and disk defaults; a draft of
 * unknown size leaves memory without a default. */
START_TEST(test_desired_speculative_sizes)
{
    static const struct {
        const char *spec, *mem, *eph, *draft_max;
    } cases[] = {
        /* 1Gi model + 1Gi KV + 512Mi draft: 1024 + 512 + 1024 + (512 + 96) = 3168Mi;
         * disk: (1024 + 512) * 1.1 = 1689.6 -> 1690Mi */
        {"{\"model\":{\"uri\":\"https://h/m.gguf\",\"sizeBytes\":\"1Gi\"},\"engine\":{"
         "\"kvCacheBytes\":\"1Gi\",\"speculative\":{\"method\":\"draft\",\"draftModel\":{"
         "\"uri\":\"https://h/d.gguf\",\"sizeBytes\":\"512Mi\"}}}}",
         "3168Mi", "1690Mi", "536870912"},
        /* the draft's size unknown: no memory default; only the model's download is counted */
        {"{\"model\":{\"uri\":\"https://h/m.gguf\",\"sizeBytes\":\"1000Mi\"},\"engine\":{"
         "\"speculative\":{\"method\":\"draft\",\"draftModel\":{\"uri\":\"hf://o/r/d.gguf\"}}}}",
         NULL, "1100Mi", "68719476736"},
        /* a draft download of known size next to a model on a claim: its disk alone */
        {"{\"model\":{\"uri\":\"pvc://c/m.gguf\",\"sizeBytes\":\"2Gi\"},\"engine\":{"
         "\"speculative\":{\"method\":\"draft\",\"draftModel\":{\"uri\":\"hf://o/r/d.gguf\","
         "\"sizeBytes\":1000000000}}}}",
         /* (2048 + 953.67 + 512 + 187.6) * 4/3 = 4935.6 -> 4936Mi; 1.1e9 B -> 1050Mi */
         "4936Mi", "1050Mi", "1000000000"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *dep;
        char err[256] = "";
        ck_assert_msg(build(cases[i].spec, &dep, err, sizeof(err)) == 0, "case %zu: %s", i, err);
        const char *mem = resource(dep, "limits", "memory");
        const char *eph = resource(dep, "requests", "ephemeral-storage");
        ck_assert_msg(cases[i].mem ? mem && strcmp(mem, cases[i].mem) == 0 : !mem,
                      "case %zu: memory %s", i, mem ? mem : "(none)");
        ck_assert_msg(eph && strcmp(eph, cases[i].eph) == 0, "case %zu: disk %s", i,
                      eph ? eph : "(none)");
        json_t *inits = json_object_get(pod_spec_of(dep), "initContainers");
        json_t *c = json_array_get(inits, json_array_size(inits) - 1);
        ck_assert_str_eq(json_string_value(json_object_get(c, "name")), "fetch-draft-model");
        ck_assert(args_have(json_object_get(c, "args"), "--max-bytes", cases[i].draft_max));
        json_decref(dep);
    }
}
END_TEST

/* Malformed spec.engine.speculative is refused with the field named, never a pod. */
START_TEST(test_desired_speculative_invalid)
{
    static const struct {
        const char *speculative, *want;
    } bad[] = {
        {"\"ngram\"", "spec.engine.speculative must be an object"},
        {"[]", "spec.engine.speculative must be an object"},
        {"{}", "spec.engine.speculative.method is missing"},
        {"{\"method\":3}", "spec.engine.speculative.method is missing"},
        {"{\"method\":\"eagle\"}", "method must be none, ngram or draft, not \"eagle\""},
        {"{\"method\":\"NGRAM\"}", "method must be none, ngram or draft"},
        {"{\"method\":\"ngram\",\"numTokens\":0}", "numTokens must be an integer from 1 to 16"},
        {"{\"method\":\"ngram\",\"numTokens\":17}", "numTokens must be an integer from 1 to 16"},
        {"{\"method\":\"ngram\",\"numTokens\":-1}", "numTokens"},
        {"{\"method\":\"ngram\",\"numTokens\":4.0}", "numTokens"},
        {"{\"method\":\"ngram\",\"numTokens\":\"4\"}", "numTokens"},
        {"{\"method\":\"draft\"}", "draftModel is required with method draft"},
        {"{\"method\":\"draft\",\"draftModel\":null}", "draftModel is required with method draft"},
        {"{\"method\":\"ngram\",\"draftModel\":{\"uri\":\"file:///d.gguf\"}}",
         "draftModel is only allowed with method draft (method is ngram)"},
        {"{\"method\":\"none\",\"draftModel\":{\"uri\":\"file:///d.gguf\"}}",
         "only allowed with method draft"},
        {"{\"method\":\"draft\",\"draftModel\":\"file:///d.gguf\"}",
         "draftModel must be an object"},
        {"{\"method\":\"draft\",\"draftModel\":{}}", "draftModel.uri is missing"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":7}}", "draftModel.uri is missing"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"\"}}",
         "spec.engine.speculative.draftModel.uri is empty"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"s3://b/d.gguf\"}}",
         "spec.engine.speculative.draftModel.uri: unsupported model URI scheme"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"http://h/d.gguf\"}}",
         "draftModel.uri: plain http://"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///a/../etc/shadow\"}}",
         "draftModel.uri: file:// path must not contain '..'"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"pvc://Bad_Claim/d.gguf\"}}",
         "draftModel.uri: pvc:// URI needs a valid claim name"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"hf://o/r\"}}",
         "draftModel.uri: hf:// URI must be"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d d.gguf\"}}",
         "draftModel.uri contains whitespace"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sha256\":\"abc\"}}",
         "draftModel.sha256 must be 64 lowercase hex digits"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sha256\":"
         "\"0F5B4C2A3D1E6F7A8B9C0D1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F1A\"}}",
         "draftModel.sha256"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sha256\":"
         "\"0f5b4c2a3d1e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a00\"}}",
         "draftModel.sha256"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sha256\":5}}",
         "draftModel.sha256"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sizeBytes\":0}}",
         "draftModel.sizeBytes must be a byte quantity above 0"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sizeBytes\":\"2Pi\"}}",
         "draftModel.sizeBytes"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"file:///d.gguf\",\"sizeBytes\":\"big\"}}",
         "draftModel.sizeBytes"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"https://h/d.gguf\","
         "\"tokenSecretRef\":{}}}",
         "draftModel.tokenSecretRef needs a Secret name"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"https://h/d.gguf\","
         "\"tokenSecretRef\":{\"name\":\"s\",\"key\":1}}}",
         "draftModel.tokenSecretRef"},
        {"{\"method\":\"draft\",\"draftModel\":{\"uri\":\"https://h/d.gguf\","
         "\"tokenSecretRef\":\"s\"}}",
         "draftModel.tokenSecretRef"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char spec[1024], err[256] = "";
        json_t *dep;
        snprintf(spec, sizeof(spec),
                 "{\"model\":{\"uri\":\"file:///m.gguf\"},\"engine\":{\"speculative\":%s}}",
                 bad[i].speculative);
        ck_assert_msg(build(spec, &dep, err, sizeof(err)) == ERR_INVAL, "accepted %s",
                      bad[i].speculative);
        ck_assert_msg(strstr(err, bad[i].want) != NULL, "%s: \"%s\", want \"%s\"",
                      bad[i].speculative, err, bad[i].want);
        ck_assert_ptr_null(dep);
        /* the sizes refuse it too (the reconciler's other entry point) */
        json_error_t je;
        json_t *isvc =
            json_pack("{s:{s:s}, s:o}", "metadata", "name", "x", "spec", json_loads(spec, 0, &je));
        struct desired_sizes sz;
        char err2[256] = "";
        ck_assert_int_eq(desired_sizes_compute(isvc, &settings, &sz, err2, sizeof(err2)),
                         ERR_INVAL);
        ck_assert_str_eq(err2, err);
        json_decref(isvc);
    }
    /* a file:// path inside the other model's mounted volume would be hidden by the mount */
    static const struct {
        const char *model, *draft, *want;
    } hidden[] = {
        {"pvc://c/m.gguf", "file:///models/d.gguf", "draftModel.uri: /models/d.gguf is hidden"},
        {"https://h/m.gguf", "file:///models", "is hidden by the model's volume at /models"},
        {"file:///draft-model/m.gguf", "hf://o/r/d.gguf",
         "spec.model.uri: /draft-model/m.gguf is hidden by the draft model's volume"},
        {"file:///draft-model/m.gguf", "pvc://c/d.gguf", "is hidden by the draft model's volume"},
    };
    for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++) {
        char spec[512], e[256] = "";
        json_t *d;
        snprintf(spec, sizeof(spec),
                 "{\"model\":{\"uri\":\"%s\"},\"engine\":{\"speculative\":{\"method\":"
                 "\"draft\",\"draftModel\":{\"uri\":\"%s\"}}}}",
                 hidden[i].model, hidden[i].draft);
        ck_assert_msg(build(spec, &d, e, sizeof(e)) == ERR_INVAL, "accepted %s", spec);
        ck_assert_msg(strstr(e, hidden[i].want) != NULL, "%s: \"%s\"", spec, e);
    }
    /* ... but not where nothing is mounted over it */
    static const struct {
        const char *model, *draft;
    } fine[] = {
        {"file:///models/m.gguf", "file:///models/d.gguf"},
        {"pvc://c/m.gguf", "file:///models-extra/d.gguf"},
        {"pvc://c/m.gguf", "pvc://c/d.gguf"},
        {"file:///draft-model/m.gguf", "file:///draft-model/d.gguf"},
        {"file:///draft-modelx/m.gguf", "hf://o/r/d.gguf"},
    };
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        char spec[512], e[256] = "";
        json_t *d;
        snprintf(spec, sizeof(spec),
                 "{\"model\":{\"uri\":\"%s\"},\"engine\":{\"speculative\":{\"method\":"
                 "\"draft\",\"draftModel\":{\"uri\":\"%s\"}}}}",
                 fine[i].model, fine[i].draft);
        ck_assert_msg(build(spec, &d, e, sizeof(e)) == 0, "%s: %s", spec, e);
        json_decref(d);
    }
    /* null is "not set", as an absent field */
    json_t *dep;
    char err[256] = "";
    ck_assert_int_eq(
        build("{\"model\":{\"uri\":\"file:///m.gguf\"},\"engine\":{\"speculative\":null}}", &dep,
              err, sizeof(err)),
        0);
    ck_assert(!args_contain(json_object_get(engine_of(dep), "args"), "--speculative"));
    json_decref(dep);
}
END_TEST

Suite *desired_suite(void)
{
    Suite *s = suite_create("desired");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_desired_minimal_golden);
    tcase_add_test(tc, test_desired_gpu_hf_golden);
    tcase_add_test(tc, test_desired_pvc_golden);
    tcase_add_test(tc, test_desired_kv_offload_golden);
    tcase_add_test(tc, test_desired_kv_offload_invalid);
    tcase_add_test(tc, test_desired_secure_golden);
    tcase_add_test(tc, test_desired_deployment_invariants);
    tcase_add_test(tc, test_desired_deployment_rejects_bad_specs);
    tcase_add_test(tc, test_desired_api_key_from_secret);
    tcase_add_test(tc, test_desired_resources_defaults);
    tcase_add_test(tc, test_desired_download_limits);
    tcase_add_test(tc, test_desired_sha256_every_source);
    tcase_add_test(tc, test_desired_shutdown_timing);
    tcase_add_test(tc, test_desired_network_policy_peers);
    tcase_add_test(tc, test_desired_quantity_bytes);
    tcase_add_test(tc, test_desired_selector_matches_labels);
    tcase_add_test(tc, test_desired_speculative_golden);
    tcase_add_test(tc, test_desired_speculative_flags);
    tcase_add_test(tc, test_desired_speculative_sizes);
    tcase_add_test(tc, test_desired_speculative_invalid);
    suite_add_tcase(s, tc);
    return s;
}
