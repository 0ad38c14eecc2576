/* Integration tests for common/k8s against a REAL kube-apiserver (hack/control-plane.sh; run by
 * tests/e2e/k8s_client.sh). Opt-in: the suite runs only when CINFER_K8S_LIVE_KUBECONFIG names a
 * kubeconfig, and prints SKIP otherwise, so a developer's own KUBECONFIG is never written to by
 * `make test`. Everything happens in a fresh namespace that the suite deletes at the end. */
#include "common/err.h"
#include "common/k8s/client.h"
#include "common/k8s/config.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char ns[64];
static bool live;

static struct k8s_client *live_client(void)
{
    struct k8s_config *cfg = NULL;
    struct k8s_client *c = NULL;
    char err[K8S_ERRMSG_MAX];
    const char *kc = getenv("CINFER_K8S_LIVE_KUBECONFIG");
    ck_assert_msg(k8s_config_load_kubeconfig(kc, NULL, &cfg, err, sizeof(err)) == 0, "%s", err);
    struct k8s_client_opts o = {.field_manager = "cinfer-live-test", .timeout_ms = 30000};
    ck_assert_msg(k8s_client_new(cfg, &o, &c, err, sizeof(err)) == 0, "%s", err);
    return c;
}

#define LIVE_OR_SKIP()                                                                             \
    do {                                                                                           \
        if (!live) {                                                                               \
            test_skip("k8s_live needs CINFER_K8S_LIVE_KUBECONFIG (tests/e2e/k8s_client.sh sets "   \
                      "it)");                                                                      \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Asserts rc == want and prints the client's message otherwise. */
#define CK_K8S(c, call, want)                                                                      \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        ck_assert_msg(rc_ == (want), "%s = %s, want %s: %s", #call, err_str(rc_), err_str(want),   \
                      k8s_client_errmsg(c));                                                       \
    } while (0)

static void live_setup(void)
{
    const char *kc = getenv("CINFER_K8S_LIVE_KUBECONFIG");
    if (!kc || !*kc) return; /* every check then skips (LIVE_OR_SKIP) */
    snprintf(ns, sizeof(ns), "k8s-live-%ld-%d", (long)time(NULL) % 100000, (int)getpid());
    struct k8s_client *c = live_client();
    json_t *obj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace",
                            "metadata", "name", ns);
    struct k8s_ref ref = {&k8s_resource_namespaces, NULL, NULL, NULL};
    int rc = k8s_client_create(c, &ref, obj, NULL);
    if (rc) fprintf(stderr, "creating namespace %s: %s\n", ns, k8s_client_errmsg(c));
    live = rc == 0;
    json_decref(obj);
    k8s_client_free(c);
}

static void live_teardown(void)
{
    if (!live) return;
    struct k8s_client *c = live_client();
    struct k8s_ref ref = {&k8s_resource_namespaces, NULL, ns, NULL};
    if (k8s_client_delete(c, &ref, NULL, NULL))
        fprintf(stderr, "deleting namespace %s: %s\n", ns, k8s_client_errmsg(c));
    k8s_client_free(c);
}

static json_t *configmap(const char *name, const char *app)
{
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s}}", "apiVersion", "v1", "kind",
                     "ConfigMap", "metadata", "name", name, "labels", "app", app, "data", "k", "v");
}

static const char *meta_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

static const char *data_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(json_object_get(obj, "data"), key));
}

START_TEST(test_k8s_live_create_get_list_delete)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_configmaps, ns, NULL, NULL};
    json_t *a = configmap("a", "x"), *b = configmap("b", "y"), *out = NULL;

    CK_K8S(c, k8s_client_create(c, &coll, a, &out), 0);
    ck_assert_ptr_nonnull(meta_str(out, "uid"));
    json_decref(out);
    CK_K8S(c, k8s_client_create(c, &coll, b, NULL), 0);
    CK_K8S(c, k8s_client_create(c, &coll, a, NULL), ERR_EXISTS);
    ck_assert_str_eq(k8s_client_status(c)->reason, "AlreadyExists");

    struct k8s_ref ra = {&k8s_resource_configmaps, ns, "a", NULL};
    CK_K8S(c, k8s_client_get(c, &ra, &out), 0);
    ck_assert_str_eq(data_str(out, "k"), "v");
    json_decref(out);

    struct k8s_list_opts sel = {.label_selector = "app in (x),app!=y"};
    CK_K8S(c, k8s_client_list(c, &coll, &sel, &out), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "items")), 1);
    ck_assert_str_eq(meta_str(json_array_get(json_object_get(out, "items"), 0), "name"), "a");
    json_decref(out);

    struct k8s_list_opts fs = {.field_selector = "metadata.name=b"};
    CK_K8S(c, k8s_client_list(c, &coll, &fs, &out), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "items")), 1);
    json_decref(out);

    /* Paging: limit 1 gives a continue token that fetches the rest. */
    struct k8s_list_opts page = {.limit = 1};
    CK_K8S(c, k8s_client_list(c, &coll, &page, &out), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(out, "items")), 1);
    const char *cont = meta_str(out, "continue");
    ck_assert_ptr_nonnull(cont);
    char token[4096];
    snprintf(token, sizeof(token), "%s", cont);
    json_decref(out);
    page.continue_token = token;
    CK_K8S(c, k8s_client_list(c, &coll, &page, &out), 0);
    ck_assert_uint_ge(json_array_size(json_object_get(out, "items")), 1);
    json_decref(out);

    CK_K8S(c, k8s_client_delete(c, &ra, NULL, NULL), 0);
    CK_K8S(c, k8s_client_get(c, &ra, &out), ERR_NOT_FOUND);
    ck_assert_int_eq(k8s_client_status(c)->code, 404);
    CK_K8S(c, k8s_client_delete(c, &ra, NULL, NULL), ERR_NOT_FOUND);

    /* Cluster-scoped: the namespace itself. */
    struct k8s_ref rns = {&k8s_resource_namespaces, NULL, ns, NULL};
    CK_K8S(c, k8s_client_get(c, &rns, &out), 0);
    ck_assert_str_eq(meta_str(out, "name"), ns);
    json_decref(out);
    json_decref(a);
    json_decref(b);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_patch_kinds)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_configmaps, ns, NULL, NULL};
    struct k8s_ref r = {&k8s_resource_configmaps, ns, "p", NULL};
    json_t *cm = configmap("p", "p"), *out = NULL;
    CK_K8S(c, k8s_client_create(c, &coll, cm, NULL), 0);

    json_t *merge = json_pack("{s:{s:s, s:n}}", "data", "m", "1", "k");
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_MERGE, merge, NULL, &out), 0);
    ck_assert_str_eq(data_str(out, "m"), "1");
    ck_assert_ptr_null(data_str(out, "k")); /* null deletes in a merge patch */
    json_decref(out);

    json_t *jp = json_pack("[{s:s, s:s, s:s}]", "op", "add", "path", "/data/j", "value", "2");
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_JSON, jp, NULL, &out), 0);
    ck_assert_str_eq(data_str(out, "j"), "2");
    json_decref(out);
    /* A failing JSON-patch test op is rejected by the server. */
    json_t *bad = json_pack("[{s:s, s:s, s:s}]", "op", "test", "path", "/data/j", "value", "9");
    ck_assert_int_ne(k8s_client_patch(c, &r, K8S_PATCH_JSON, bad, NULL, NULL), 0);

    json_t *smp = json_pack("{s:{s:s}}", "data", "s", "3");
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_STRATEGIC, smp, NULL, &out), 0);
    ck_assert_str_eq(data_str(out, "s"), "3");
    json_decref(out);

    /* Server-side apply: two managers conflict on a field until one forces. */
    json_t *ap1 = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                            "metadata", "name", "p", "data", "owned", "one");
    json_t *ap2 = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                            "metadata", "name", "p", "data", "owned", "two");
    struct k8s_patch_opts m1 = {.field_manager = "manager-one"};
    struct k8s_patch_opts m2 = {.field_manager = "manager-two"};
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_APPLY, ap1, &m1, &out), 0);
    ck_assert_str_eq(data_str(out, "owned"), "one");
    json_decref(out);
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_APPLY, ap2, &m2, NULL), ERR_CONFLICT);
    ck_assert_ptr_nonnull(strstr(k8s_client_status(c)->message, "manager-one"));
    m2.force = true;
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_APPLY, ap2, &m2, &out), 0);
    ck_assert_str_eq(data_str(out, "owned"), "two");
    json_decref(out);

    json_decref(cm);
    json_decref(merge);
    json_decref(jp);
    json_decref(bad);
    json_decref(smp);
    json_decref(ap1);
    json_decref(ap2);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_update_conflict)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_configmaps, ns, NULL, NULL};
    struct k8s_ref r = {&k8s_resource_configmaps, ns, "u", NULL};
    json_t *cm = configmap("u", "u"), *stale = NULL, *fresh = NULL;
    CK_K8S(c, k8s_client_create(c, &coll, cm, &stale), 0);
    fresh = json_deep_copy(stale);
    json_object_set_new(json_object_get(fresh, "data"), "k", json_string("v2"));
    CK_K8S(c, k8s_client_update(c, &r, fresh, NULL), 0);
    /* The first copy still carries the old resourceVersion. */
    json_object_set_new(json_object_get(stale, "data"), "k", json_string("v3"));
    CK_K8S(c, k8s_client_update(c, &r, stale, NULL), ERR_CONFLICT);
    ck_assert_str_eq(k8s_client_status(c)->reason, "Conflict");
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "409"));
    json_decref(cm);
    json_decref(stale);
    json_decref(fresh);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_validation_message)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_configmaps, ns, NULL, NULL};
    json_t *cm = configmap("Bad_Name", "v");
    CK_K8S(c, k8s_client_create(c, &coll, cm, NULL), ERR_INVAL);
    ck_assert_int_eq(k8s_client_status(c)->code, 422);
    ck_assert_str_eq(k8s_client_status(c)->reason, "Invalid");
    ck_assert_msg(strstr(k8s_client_status(c)->message, "metadata.name"), "%s",
                  k8s_client_status(c)->message);
    json_decref(cm);
    k8s_client_free(c);
}
END_TEST

struct events {
    char log[512];
    int n;
};

static int on_event(void *ctx, const struct k8s_watch_event *ev)
{
    struct events *e = ctx;
    size_t used = strlen(e->log);
    snprintf(e->log + used, sizeof(e->log) - used, "%s%s", e->n++ ? " " : "",
             k8s_watch_type_str(ev->type));
    return ev->type == K8S_WATCH_DELETED ? K8S_WATCH_STOP : 0;
}

START_TEST(test_k8s_live_watch)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_configmaps, ns, NULL, NULL};
    struct k8s_ref r = {&k8s_resource_configmaps, ns, "w", NULL};
    json_t *list = NULL, *cm = configmap("w", "w");
    char rv[64];

    CK_K8S(c, k8s_client_list(c, &coll, NULL, &list), 0);
    snprintf(rv, sizeof(rv), "%s", meta_str(list, "resourceVersion"));
    json_decref(list);
    CK_K8S(c, k8s_client_create(c, &coll, cm, NULL), 0);
    json_t *patch = json_pack("{s:{s:s}}", "data", "k", "changed");
    CK_K8S(c, k8s_client_patch(c, &r, K8S_PATCH_MERGE, patch, NULL, NULL), 0);
    CK_K8S(c, k8s_client_delete(c, &r, NULL, NULL), 0);

    /* Replayed from the list's resourceVersion: exactly the three changes, in order. */
    struct k8s_watch_opts wo = {.field_selector = "metadata.name=w",
                                .resource_version = rv,
                                .allow_bookmarks = true,
                                .timeout_seconds = 20};
    struct events e = {.n = 0};
    CK_K8S(c, k8s_client_watch(c, &coll, &wo, on_event, &e), 0);
    ck_assert_str_eq(e.log, "ADDED MODIFIED DELETED");

    /* The server ends a watch after timeoutSeconds; that is a normal end (0). */
    struct k8s_watch_opts quiet = {.field_selector = "metadata.name=nothing", .timeout_seconds = 1};
    struct events q = {.n = 0};
    CK_K8S(c, k8s_client_watch(c, &coll, &quiet, on_event, &q), 0);
    ck_assert_int_eq(q.n, 0);
    json_decref(cm);
    json_decref(patch);
    k8s_client_free(c);
}
END_TEST

/* Polls the CRD until its Established condition is True (at most ~30 s). */
static bool crd_established(struct k8s_client *c, const struct k8s_ref *crd)
{
    for (int i = 0; i < 60; i++) {
        json_t *got = NULL, *cond;
        size_t k;
        bool ok = false;
        if (k8s_client_get(c, crd, &got) == 0) {
            json_array_foreach(json_object_get(json_object_get(got, "status"), "conditions"), k,
                               cond)
            {
                const char *type = json_string_value(json_object_get(cond, "type"));
                const char *st = json_string_value(json_object_get(cond, "status"));
                if (type && st && !strcmp(type, "Established") && !strcmp(st, "True")) ok = true;
            }
        }
        json_decref(got);
        if (ok) return true;
        usleep(500 * 1000);
    }
    return false;
}

START_TEST(test_k8s_live_custom_resource_and_watch_410)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    char group[128], crd_name[160];
    snprintf(group, sizeof(group), "%s.live.cinfer.dev", ns);
    snprintf(crd_name, sizeof(crd_name), "widgets.%s", group);
    json_t *crd =
        json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:{s:s, s:s, s:s}, s:[{s:s, s:b, s:b, "
                  "s:{s:{s:s, s:b}}}]}}",
                  "apiVersion", "apiextensions.k8s.io/v1", "kind", "CustomResourceDefinition",
                  "metadata", "name", crd_name, "spec", "group", group, "scope", "Namespaced",
                  "names", "plural", "widgets", "singular", "widget", "kind", "Widget", "versions",
                  "name", "v1", "served", 1, "storage", 1, "schema", "openAPIV3Schema", "type",
                  "object", "x-kubernetes-preserve-unknown-fields", 1);
    struct k8s_ref crds = {&k8s_resource_crds, NULL, NULL, NULL};
    struct k8s_ref crd_ref = {&k8s_resource_crds, NULL, crd_name, NULL};
    CK_K8S(c, k8s_client_create(c, &crds, crd, NULL), 0);
    ck_assert_msg(crd_established(c, &crd_ref), "CRD %s not established", crd_name);

    /* CRUD on the custom resource through a descriptor defined here. */
    const struct k8s_resource widgets = {group, "v1", "widgets", true};
    struct k8s_ref coll = {&widgets, ns, NULL, NULL};
    struct k8s_ref one = {&widgets, ns, "w1", NULL};
    char api_version[160];
    snprintf(api_version, sizeof(api_version), "%s/v1", group);
    json_t *w = json_pack("{s:s, s:s, s:{s:s}, s:{s:i}}", "apiVersion", api_version, "kind",
                          "Widget", "metadata", "name", "w1", "spec", "size", 3);
    json_t *out = NULL;
    int rc = 0;
    /* Right after Established the API may still answer 404 for a moment. */
    for (int i = 0; i < 20 && (rc = k8s_client_create(c, &coll, w, NULL)) == ERR_NOT_FOUND; i++)
        usleep(250 * 1000);
    ck_assert_msg(rc == 0, "create widget: %s", k8s_client_errmsg(c));
    CK_K8S(c, k8s_client_get(c, &one, &out), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(out, "spec"), "size")), 3);
    json_decref(out);

    /* The CRD's watch cache starts at its creation, far after resourceVersion 1: the server
     * answers with an ERROR event 410 Expired, which must surface as ERR_GONE (relist). */
    struct k8s_watch_opts old = {.resource_version = "1", .timeout_seconds = 10};
    struct events g = {.n = 0};
    CK_K8S(c, k8s_client_watch(c, &coll, &old, on_event, &g), ERR_GONE);
    ck_assert_int_eq(k8s_client_status(c)->code, 410);
    ck_assert_str_eq(k8s_client_status(c)->reason, "Expired");
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "too old resource version"));
    ck_assert_int_eq(g.n, 0);

    CK_K8S(c, k8s_client_delete(c, &one, NULL, NULL), 0);
    CK_K8S(c, k8s_client_delete(c, &crd_ref, NULL, NULL), 0);
    json_decref(w);
    json_decref(crd);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_deployment_scale_and_status)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_deployments, ns, NULL, NULL};
    struct k8s_ref dep = {&k8s_resource_deployments, ns, "web", NULL};
    struct k8s_ref scale = {&k8s_resource_deployments, ns, "web", "scale"};
    struct k8s_ref status = {&k8s_resource_deployments, ns, "web", "status"};
    json_t *d = json_pack(
        "{s:s, s:s, s:{s:s}, s:{s:i, s:{s:{s:s}}, s:{s:{s:{s:s}}, s:{s:[{s:s, s:s}]}}}}",
        "apiVersion", "apps/v1", "kind", "Deployment", "metadata", "name", "web", "spec",
        "replicas", 1, "selector", "matchLabels", "app", "web", "template", "metadata", "labels",
        "app", "web", "spec", "containers", "name", "c", "image", "registry.invalid/none:0");
    json_t *out = NULL;

    CK_K8S(c, k8s_client_create(c, &coll, d, NULL), 0);
    /* Read-modify-write of /scale. The deployment controller writes the object concurrently,
     * so a 409 on the carried resourceVersion is expected now and then: re-read and retry, as
     * every real caller must. */
    int rc = ERR_CONFLICT;
    for (int attempt = 0; attempt < 10 && rc == ERR_CONFLICT; attempt++) {
        CK_K8S(c, k8s_client_get(c, &scale, &out), 0);
        ck_assert_str_eq(json_string_value(json_object_get(out, "kind")), "Scale");
        ck_assert_ptr_nonnull(meta_str(out, "resourceVersion"));
        if (attempt == 0)
            ck_assert_int_eq(
                json_integer_value(json_object_get(json_object_get(out, "spec"), "replicas")), 1);
        json_object_set_new(json_object_get(out, "spec"), "replicas", json_integer(3));
        rc = k8s_client_update(c, &scale, out, NULL);
        json_decref(out);
    }
    ck_assert_msg(rc == 0, "update scale: %s", k8s_client_errmsg(c));
    CK_K8S(c, k8s_client_get(c, &dep, &out), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(out, "spec"), "replicas")),
                     3);
    json_decref(out);
    json_t *p = json_pack("{s:{s:i}}", "spec", "replicas", 2);
    CK_K8S(c, k8s_client_patch(c, &scale, K8S_PATCH_MERGE, p, NULL, &out), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(out, "spec"), "replicas")),
                     2);
    json_decref(out);

    CK_K8S(c, k8s_client_get(c, &status, &out), 0);
    ck_assert_ptr_nonnull(json_object_get(out, "status"));
    json_decref(out);

    /* Validation on a grouped kind names the field. */
    json_t *neg = json_pack("{s:{s:i}}", "spec", "replicas", -1);
    CK_K8S(c, k8s_client_patch(c, &dep, K8S_PATCH_MERGE, neg, NULL, NULL), ERR_INVAL);
    ck_assert_msg(strstr(k8s_client_status(c)->message, "spec.replicas"), "%s",
                  k8s_client_status(c)->message);

    struct k8s_delete_opts fg = {.propagation_policy = "Foreground"};
    CK_K8S(c, k8s_client_delete(c, &dep, &fg, NULL), 0);
    json_decref(d);
    json_decref(p);
    json_decref(neg);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_lease)
{
    LIVE_OR_SKIP();
    struct k8s_client *c = live_client();
    struct k8s_ref coll = {&k8s_resource_leases, ns, NULL, NULL};
    struct k8s_ref r = {&k8s_resource_leases, ns, "lock", NULL};
    json_t *lease =
        json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:i, s:s, s:s}}", "apiVersion",
                  "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", "lock", "spec",
                  "holderIdentity", "pod-a", "leaseDurationSeconds", 15, "acquireTime",
                  "2026-01-01T00:00:00.000000Z", "renewTime", "2026-01-01T00:00:00.000000Z");
    json_t *got = NULL, *stale = NULL;
    CK_K8S(c, k8s_client_create(c, &coll, lease, &got), 0);
    stale = json_deep_copy(got);
    json_t *spec = json_object_get(got, "spec");
    json_object_set_new(spec, "holderIdentity", json_string("pod-b"));
    json_object_set_new(spec, "renewTime", json_string("2026-01-01T00:00:10.000000Z"));
    CK_K8S(c, k8s_client_update(c, &r, got, NULL), 0);
    json_decref(got);
    CK_K8S(c, k8s_client_get(c, &r, &got), 0);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(got, "spec"), "holderIdentity")),
        "pod-b");
    /* A contender holding the old version loses: this is what leader election relies on. */
    json_object_set_new(json_object_get(stale, "spec"), "holderIdentity", json_string("pod-c"));
    CK_K8S(c, k8s_client_update(c, &r, stale, NULL), ERR_CONFLICT);
    json_decref(got);
    json_decref(stale);
    json_decref(lease);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_live_anonymous_is_refused)
{
    LIVE_OR_SKIP();
    struct k8s_config *cfg = NULL;
    struct k8s_client *c = NULL;
    char err[K8S_ERRMSG_MAX];
    ck_assert_int_eq(k8s_config_load_kubeconfig(getenv("CINFER_K8S_LIVE_KUBECONFIG"), NULL, &cfg,
                                                err, sizeof(err)),
                     0);
    free(cfg->cert_pem);
    free(cfg->key_pem);
    cfg->cert_pem = cfg->key_pem = NULL;
    ck_assert_int_eq(k8s_client_new(cfg, NULL, &c, err, sizeof(err)), 0);
    struct k8s_ref r = {&k8s_resource_configmaps, ns, NULL, NULL};
    CK_K8S(c, k8s_client_list(c, &r, NULL, NULL), ERR_AUTH);
    ck_assert(k8s_client_status(c)->code == 401 || k8s_client_status(c)->code == 403);
    k8s_client_free(c);
}
END_TEST

Suite *k8s_live_suite(void)
{
    Suite *s = suite_create("k8s_live");
    TCase *tc = tcase_create("apiserver");
    tcase_add_unchecked_fixture(tc, live_setup, live_teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_k8s_live_create_get_list_delete);
    tcase_add_test(tc, test_k8s_live_patch_kinds);
    tcase_add_test(tc, test_k8s_live_update_conflict);
    tcase_add_test(tc, test_k8s_live_validation_message);
    tcase_add_test(tc, test_k8s_live_watch);
    tcase_add_test(tc, test_k8s_live_custom_resource_and_watch_410);
    tcase_add_test(tc, test_k8s_live_deployment_scale_and_status);
    tcase_add_test(tc, test_k8s_live_lease);
    tcase_add_test(tc, test_k8s_live_anonymous_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
