/* reconcile_key against a REAL API server (run by tests/e2e/operator.sh, which sets
 * CINFER_K8S_LIVE_KUBECONFIG and installs the CRD; SKIP otherwise): one reconcile creates the
 * Deployment, Service and status; a reconcile from a stale cache gets 409 Conflict on its status
 * write and reports it for a retry instead of overwriting newer state; a fresh cache converges.
 * Informers over a namespace list, and the NetworkPolicy applied, refused on a name conflict and
 * deleted when turned off. */
#include "common/err.h"
#include "common/informer.h"
#include "common/k8s/client.h"
#include "operator/reconcile.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct desired_settings settings = {.engine_image = "cinfer-engine:live",
                                                 .image_pull_policy = "IfNotPresent",
                                                 .shutdown_timeout_seconds = 30};
static char ns[160]; /* the test's namespace (or list of them, for start()) */

static int live_client(void *ctx, struct k8s_client **out)
{
    (void)ctx;
    struct k8s_config *cfg = NULL;
    char err[K8S_ERRMSG_MAX];
    int rc = k8s_config_load_kubeconfig(getenv("CINFER_K8S_LIVE_KUBECONFIG"), NULL, &cfg, err,
                                        sizeof(err));
    struct k8s_client_opts o = {.field_manager = "reconcile-live-test"};
    if (!rc) rc = k8s_client_new(cfg, &o, out, err, sizeof(err));
    if (rc) fprintf(stderr, "client: %s\n", err);
    return rc;
}

static struct informer *start_selected(const char *name, const struct k8s_resource *res,
                                       const char *selector)
{
    struct informer_opts o = {.name = name,
                              .res = res,
                              .ns = ns,
                              .label_selector = selector,
                              .new_client = live_client,
                              .watch_timeout_s = 2};
    struct informer *inf = NULL;
    ck_assert_int_eq(informer_start(&o, &inf), 0);
    ck_assert_msg(informer_wait_synced(inf, 20000), "%s informer did not sync", name);
    return inf;
}

static struct informer *start(const char *name, const struct k8s_resource *res)
{
    return start_selected(name, res, NULL);
}

static json_t *wait_cached(struct informer *inf, const char *name, bool with_status)
{
    for (int i = 0; i < 200; i++) {
        json_t *o = informer_get(inf, ns, name);
        if (o && (!with_status || json_object_get(o, "status"))) return o;
        json_decref(o);
        usleep(50 * 1000);
    }
    ck_abort_msg("%s/%s never reached the cache", ns, name);
    return NULL;
}

START_TEST(test_reconcile_live_conflict_is_reported_and_fresh_cache_converges)
{
    const char *kc = getenv("CINFER_K8S_LIVE_KUBECONFIG");
    if (!kc || !*kc) {
        test_skip("reconcile_live needs CINFER_K8S_LIVE_KUBECONFIG (tests/e2e/operator.sh)");
        return;
    }
    struct k8s_client *c = NULL;
    ck_assert_int_eq(live_client(NULL, &c), 0);
    snprintf(ns, sizeof(ns), "reconcile-live-%d", (int)getpid());
    json_t *nsobj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace",
                              "metadata", "name", ns);
    struct k8s_ref nsref = {&k8s_resource_namespaces, NULL, NULL, NULL};
    ck_assert_msg(k8s_client_create(c, &nsref, nsobj, NULL) == 0, "%s", k8s_client_errmsg(c));
    json_t *isvc = json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:s}}}", "apiVersion",
                             "serving.cinfer.io/v1alpha1", "kind", "InferenceService", "metadata",
                             "name", "conflict", "spec", "model", "uri", "file:///m.gguf");
    struct k8s_ref coll = {&reconcile_resource_isvcs, ns, NULL, NULL};
    ck_assert_msg(k8s_client_create(c, &coll, isvc, NULL) == 0, "%s", k8s_client_errmsg(c));

    struct reconcile_caches caches = {
        .isvcs = start("isvcs", &reconcile_resource_isvcs),
        .deployments = start("deployments", &k8s_resource_deployments),
        .services = start("services", &k8s_resource_services),
        .pods = start("pods", &k8s_resource_pods),
    };
    json_decref(wait_cached(caches.isvcs, "conflict", false));
    /* Freeze the InferenceService cache: from now on it is stale on purpose. */
    informer_stop(caches.isvcs);

    char key[200];
    snprintf(key, sizeof(key), "%s/conflict", ns);
    struct reconcile_outcome out;
    reconcile_key(c, &caches, &settings, key, time(NULL), &out);
    ck_assert_msg(out.result == RECONCILE_DONE, "first reconcile: %s", out.message);
    struct k8s_ref dep = {&k8s_resource_deployments, ns, "conflict", NULL};
    json_t *got = NULL;
    ck_assert_int_eq(k8s_client_get(c, &dep, &got), 0);
    json_decref(got);

    /* Same stale cache again: the object it holds has an old resourceVersion and no status, so
     * the status write must be refused with 409 rather than clobber the newer object. */
    reconcile_key(c, &caches, &settings, key, time(NULL), &out);
    ck_assert_int_eq(out.result, RECONCILE_ERROR);
    ck_assert_msg(out.rc == ERR_CONFLICT, "rc %s: %s", err_str(out.rc), out.message);
    ck_assert_ptr_nonnull(strstr(out.message, "409"));

    /* A fresh cache sees the written status: reconciling converges without writing. */
    informer_free(caches.isvcs);
    caches.isvcs = start("isvcs", &reconcile_resource_isvcs);
    json_decref(wait_cached(caches.isvcs, "conflict", true));
    reconcile_key(c, &caches, &settings, key, time(NULL), &out);
    ck_assert_msg(out.result == RECONCILE_DONE, "after refresh: %s", out.message);
    ck_assert_uint_ge(informer_relists(caches.deployments), 1);

    informer_free(caches.isvcs);
    informer_free(caches.deployments);
    informer_free(caches.services);
    informer_free(caches.pods);
    struct k8s_ref del = {&k8s_resource_namespaces, NULL, ns, NULL};
    k8s_client_delete(c, &del, NULL, NULL);
    json_decref(isvc);
    json_decref(nsobj);
    k8s_client_free(c);
}
END_TEST

/* Creates namespace `name`; returns 0 or the client's error. */
static int make_namespace(struct k8s_client *c, const char *name)
{
    json_t *o = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace",
                          "metadata", "name", name);
    struct k8s_ref ref = {&k8s_resource_namespaces, NULL, NULL, NULL};
    int rc = k8s_client_create(c, &ref, o, NULL);
    json_decref(o);
    return rc;
}

static void make_isvc(struct k8s_client *c, const char *in, const char *name)
{
    json_t *o = json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:s}, s:{s:[s]}}}", "apiVersion",
                          "serving.cinfer.io/v1alpha1", "kind", "InferenceService", "metadata",
                          "name", name, "spec", "model", "uri", "file:///m.gguf", "security",
                          "allowedNamespaces", "apps");
    struct k8s_ref ref = {&reconcile_resource_isvcs, in, NULL, NULL};
    ck_assert_msg(k8s_client_create(c, &ref, o, NULL) == 0, "%s", k8s_client_errmsg(c));
    json_decref(o);
}

/* An informer over a namespace list sees those namespaces only; the NetworkPolicy is created and
 * owned when enabled, deleted when disabled, and a policy of the same name that is not ours is a
 * NameConflict the status reports. */
START_TEST(test_reconcile_live_namespace_list_and_network_policy)
{
    const char *kc = getenv("CINFER_K8S_LIVE_KUBECONFIG");
    if (!kc || !*kc) {
        printf("SKIP: reconcile_live needs CINFER_K8S_LIVE_KUBECONFIG (tests/e2e/operator.sh)\n");
        return;
    }
    struct k8s_client *c = NULL;
    ck_assert_int_eq(live_client(NULL, &c), 0);
    char a[64], b[64], other[64], list[160];
    snprintf(a, sizeof(a), "np-live-a-%d", (int)getpid());
    snprintf(b, sizeof(b), "np-live-b-%d", (int)getpid());
    snprintf(other, sizeof(other), "np-live-c-%d", (int)getpid());
    snprintf(list, sizeof(list), "%s,%s", a, b);
    ck_assert_int_eq(make_namespace(c, a), 0);
    ck_assert_int_eq(make_namespace(c, b), 0);
    ck_assert_int_eq(make_namespace(c, other), 0);
    make_isvc(c, a, "np");
    make_isvc(c, b, "clash");
    make_isvc(c, other, "elsewhere");
    /* A NetworkPolicy named like "clash" that someone else made (without the operator's label, so
     * its cache never sees it: the reconcile must look it up before applying). */
    json_t *foreign =
        json_pack("{s:s, s:s, s:{s:s}, s:{s:{}}}", "apiVersion", "networking.k8s.io/v1", "kind",
                  "NetworkPolicy", "metadata", "name", "clash", "spec", "podSelector");
    struct k8s_ref npcoll = {&k8s_resource_networkpolicies, b, NULL, NULL};
    ck_assert_msg(k8s_client_create(c, &npcoll, foreign, NULL) == 0, "%s", k8s_client_errmsg(c));
    json_decref(foreign);

    snprintf(ns, sizeof(ns), "%s", list); /* start() watches the list */
    struct reconcile_caches caches = {
        .isvcs = start("isvcs", &reconcile_resource_isvcs),
        .deployments = start("deployments", &k8s_resource_deployments),
        .services = start("services", &k8s_resource_services),
        /* as the controller watches them: the operator's own objects only */
        .networkpolicies = start_selected("networkpolicies", &k8s_resource_networkpolicies,
                                          "app.kubernetes.io/managed-by=cinfer-operator"),
        .pods = start("pods", &k8s_resource_pods),
    };
    snprintf(ns, sizeof(ns), "%s", a);
    json_decref(wait_cached(caches.isvcs, "np", false));
    snprintf(ns, sizeof(ns), "%s", b);
    json_decref(wait_cached(caches.isvcs, "clash", false));
    ck_assert_ptr_null(informer_get(caches.networkpolicies, b, "clash"));
    ck_assert_uint_eq(informer_len(caches.isvcs), 2); /* not the one in the third namespace */
    ck_assert_ptr_null(informer_get(caches.isvcs, other, "elsewhere"));
    json_t *both = informer_list(caches.isvcs, NULL, NULL);
    ck_assert_uint_eq(json_array_size(both), 2);
    json_decref(both);

    struct desired_settings s = settings;
    s.network_policy = true;
    s.system_namespace = "cinfer-system";
    char key[160];
    struct reconcile_outcome out;
    snprintf(key, sizeof(key), "%s/np", a);
    reconcile_key(c, &caches, &s, key, time(NULL), &out);
    ck_assert_msg(out.result == RECONCILE_DONE, "reconcile np: %s", out.message);
    struct k8s_ref npref = {&k8s_resource_networkpolicies, a, "np", NULL};
    json_t *np = NULL;
    ck_assert_msg(k8s_client_get(c, &npref, &np) == 0, "%s", k8s_client_errmsg(c));
    json_t *owner =
        json_array_get(json_object_get(json_object_get(np, "metadata"), "ownerReferences"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(owner, "kind")), "InferenceService");
    json_t *from = json_object_get(
        json_array_get(json_object_get(json_object_get(np, "spec"), "ingress"), 0), "from");
    ck_assert_uint_eq(json_array_size(from), 3); /* router, autoscaler, "apps" */
    json_decref(np);

    snprintf(key, sizeof(key), "%s/clash", b);
    reconcile_key(c, &caches, &s, key, time(NULL), &out);
    ck_assert_msg(out.result == RECONCILE_DONE, "reconcile clash: %s", out.message);
    struct k8s_ref clash = {&reconcile_resource_isvcs, b, "clash", NULL};
    json_t *isvc = NULL;
    ck_assert_int_eq(k8s_client_get(c, &clash, &isvc), 0);
    char *st = json_dumps(json_object_get(isvc, "status"), 0);
    ck_assert_msg(st && strstr(st, "NameConflict") && strstr(st, "NetworkPolicy"), "status: %s",
                  st ? st : "(none)");
    free(st);
    json_decref(isvc);
    struct k8s_ref dep = {&k8s_resource_deployments, b, "clash", NULL};
    json_t *none = NULL;
    ck_assert_int_eq(k8s_client_get(c, &dep, &none), ERR_NOT_FOUND); /* nothing applied */

    /* Turned off: the policy it made goes, once the cache has seen it. */
    snprintf(ns, sizeof(ns), "%s", a);
    json_decref(wait_cached(caches.networkpolicies, "np", false));
    s.network_policy = false;
    snprintf(key, sizeof(key), "%s/np", a);
    reconcile_key(c, &caches, &s, key, time(NULL), &out);
    ck_assert_msg(out.result == RECONCILE_DONE, "reconcile np (off): %s", out.message);
    ck_assert_int_eq(k8s_client_get(c, &npref, &np), ERR_NOT_FOUND);
    /* ... and the foreign one stays as it was: not taken over by the forced apply. */
    struct k8s_ref fref = {&k8s_resource_networkpolicies, b, "clash", NULL};
    ck_assert_int_eq(k8s_client_get(c, &fref, &np), 0);
    ck_assert_ptr_null(json_object_get(json_object_get(np, "metadata"), "ownerReferences"));
    ck_assert_ptr_null(json_object_get(json_object_get(np, "spec"), "ingress"));
    json_decref(np);

    informer_free(caches.isvcs);
    informer_free(caches.deployments);
    informer_free(caches.services);
    informer_free(caches.networkpolicies);
    informer_free(caches.pods);
    const char *all[] = {a, b, other};
    for (size_t i = 0; i < 3; i++) {
        struct k8s_ref del = {&k8s_resource_namespaces, NULL, all[i], NULL};
        k8s_client_delete(c, &del, NULL, NULL);
    }
    k8s_client_free(c);
}
END_TEST

Suite *reconcile_live_suite(void)
{
    Suite *s = suite_create("reconcile_live");
    TCase *tc = tcase_create("live");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reconcile_live_conflict_is_reported_and_fresh_cache_converges);
    tcase_add_test(tc, test_reconcile_live_namespace_list_and_network_policy);
    suite_add_tcase(s, tc);
    return s;
}
