/* reconcile_key against a REAL API server (run by tests/e2e/operator.sh, which sets
 * CINFER_K8S_LIVE_KUBECONFIG and installs the CRD; SKIP otherwise): one reconcile creates the
 * Deployment, Service and status; a reconcile from a stale cache gets 409 Conflict on its status
 * write and reports it for a retry instead of overwriting newer state; a fresh cache converges. */
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

static const struct desired_settings settings = {"cinfer-engine:live", "IfNotPresent", 30};
static char ns[64];

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

static struct informer *start(const char *name, const struct k8s_resource *res)
{
    struct informer_opts o = {
        .name = name, .res = res, .ns = ns, .new_client = live_client, .watch_timeout_s = 2};
    struct informer *inf = NULL;
    ck_assert_int_eq(informer_start(&o, &inf), 0);
    ck_assert_msg(informer_wait_synced(inf, 20000), "%s informer did not sync", name);
    return inf;
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

    char key[128];
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

Suite *reconcile_live_suite(void)
{
    Suite *s = suite_create("reconcile_live");
    TCase *tc = tcase_create("live");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reconcile_live_conflict_is_reported_and_fresh_cache_converges);
    suite_add_tcase(s, tc);
    return s;
}
