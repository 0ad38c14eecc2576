/* Tests for common/k8s: URL building and escaping, Status parsing and HTTP status -> err.h mapping
 * (pure), and the client's requests over real TLS against the fake API in
 * tests/testdata/k8s/https_server.py (method, path, query, content type, token, body; error
 * answers; watch streams split mid-line, ERROR 410, over-long and cut lines). The same client
 * against a real API server is tests/common/test_k8s_live.c. */
#include "common/err.h"
#include "common/k8s/client.h"
#include "common/k8s/url.h"
#include "tests/testutil.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- pure: URLs ---- */

static const struct k8s_resource res_isvc = {"serving.cinfer.dev", "v1alpha1", "inferenceservices",
                                             true};

START_TEST(test_k8s_url_build_paths)
{
    static const struct {
        struct k8s_ref ref;
        const char *want;
    } cases[] = {
        {{&k8s_resource_pods, "ns1", "p", NULL}, "https://h:6443/api/v1/namespaces/ns1/pods/p"},
        {{&k8s_resource_pods, "ns1", NULL, NULL}, "https://h:6443/api/v1/namespaces/ns1/pods"},
        {{&k8s_resource_pods, NULL, NULL, NULL}, "https://h:6443/api/v1/pods"},
        {{&k8s_resource_namespaces, NULL, "kube-system", NULL},
         "https://h:6443/api/v1/namespaces/kube-system"},
        {{&k8s_resource_deployments, "a", "web", "scale"},
         "https://h:6443/apis/apps/v1/namespaces/a/deployments/web/scale"},
        {{&k8s_resource_leases, "a", "lock", NULL},
         "https://h:6443/apis/coordination.k8s.io/v1/namespaces/a/leases/lock"},
        {{&k8s_resource_crds, NULL, "x.serving.cinfer.dev", NULL},
         "https://h:6443/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
         "x.serving.cinfer.dev"},
        {{&res_isvc, "a", "llm", "status"},
         "https://h:6443/apis/serving.cinfer.dev/v1alpha1/namespaces/a/inferenceservices/llm/"
         "status"},
        {{&k8s_resource_configmaps, "a", "we ird/na?me", NULL},
         "https://h:6443/api/v1/namespaces/a/configmaps/we%20ird%2Fna%3Fme"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        char err[256];
        buf_init(&b, 4096);
        ck_assert_int_eq(k8s_url_build(&b, "https://h:6443", &cases[i].ref, err, sizeof(err)), 0);
        ck_assert_str_eq(buf_cstr(&b), cases[i].want);
        buf_fini(&b);
    }
}
END_TEST

START_TEST(test_k8s_url_build_rejects_bad_refs)
{
    static const struct {
        struct k8s_ref ref;
        const char *msg;
    } cases[] = {
        {{NULL, "a", "b", NULL}, "no resource"},
        {{&k8s_resource_namespaces, "a", "b", NULL}, "cluster-scoped"},
        {{&k8s_resource_pods, NULL, "p", NULL}, "without a namespace"},
        {{&k8s_resource_pods, "a", NULL, "status"}, "subresource without"},
        {{&k8s_resource_pods, "..", "p", NULL}, "invalid namespace"},
        {{&k8s_resource_pods, "", "p", NULL}, "invalid namespace"},
        {{&k8s_resource_pods, "a", ".", NULL}, "invalid name"},
        {{&k8s_resource_pods, "a", "", NULL}, "invalid name"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        char err[256];
        buf_init(&b, 4096);
        ck_assert_int_eq(k8s_url_build(&b, "https://h", &cases[i].ref, err, sizeof(err)),
                         ERR_INVAL);
        ck_assert_msg(strstr(err, cases[i].msg), "case %zu: %s", i, err);
        buf_fini(&b);
    }
}
END_TEST

START_TEST(test_k8s_url_query_escapes_selectors)
{
    struct buf b;
    buf_init(&b, 4096);
    ck_assert_int_eq(buf_puts(&b, "https://h/api/v1/pods"), 0);
    ck_assert_int_eq(k8s_url_query(&b, "labelSelector", "app=web,tier!=cache,env in (a,b)"), 0);
    ck_assert_int_eq(k8s_url_query(&b, "fieldSelector", "metadata.name=x&y"), 0);
    ck_assert_int_eq(k8s_url_query(&b, "limit", NULL), 0);
    ck_assert_int_eq(k8s_url_query(&b, "continue", "eyJ2Ijoi+/="), 0);
    ck_assert_str_eq(buf_cstr(&b),
                     "https://h/api/v1/pods"
                     "?labelSelector=app%3Dweb%2Ctier%21%3Dcache%2Cenv%20in%20%28a%2Cb%29"
                     "&fieldSelector=metadata.name%3Dx%26y"
                     "&continue=eyJ2Ijoi%2B%2F%3D");
    buf_fini(&b);

    buf_init(&b, 8); /* bounded: a URL that does not fit fails instead of growing */
    ck_assert_int_eq(k8s_url_escape(&b, "0123456789"), ERR_TOO_BIG);
    buf_fini(&b);
}
END_TEST

/* ---- pure: Status ---- */

START_TEST(test_k8s_status_to_err_mapping)
{
    static const struct {
        long code;
        const char *reason;
        int want;
    } cases[] = {
        {200, NULL, 0},
        {201, NULL, 0},
        {400, "BadRequest", ERR_INVAL},
        {401, "Unauthorized", ERR_AUTH},
        {403, "Forbidden", ERR_AUTH},
        {404, "NotFound", ERR_NOT_FOUND},
        {405, "MethodNotAllowed", ERR_UNSUPPORTED},
        {409, "AlreadyExists", ERR_EXISTS},
        {409, "Conflict", ERR_CONFLICT},
        {409, NULL, ERR_CONFLICT},
        {410, "Expired", ERR_GONE},
        {410, "Gone", ERR_GONE},
        {413, "RequestEntityTooLarge", ERR_TOO_BIG},
        {415, "UnsupportedMediaType", ERR_UNSUPPORTED},
        {422, "Invalid", ERR_INVAL},
        {429, "TooManyRequests", ERR_AGAIN},
        {500, "InternalError", ERR_HTTP},
        {503, "ServiceUnavailable", ERR_AGAIN},
        {504, "Timeout", ERR_TIMEOUT},
        {302, NULL, ERR_HTTP},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(k8s_status_to_err(cases[i].code, cases[i].reason) == cases[i].want, "%ld %s",
                      cases[i].code, cases[i].reason ? cases[i].reason : "");
}
END_TEST

START_TEST(test_k8s_status_parse_bodies)
{
    struct k8s_status st;
    const char *s = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                    "\"message\":\"Deployment.apps \\\"w\\\" is invalid: spec.replicas: Invalid "
                    "value: -1\",\"reason\":\"Invalid\",\"code\":422}";
    k8s_status_parse(422, s, strlen(s), &st);
    ck_assert_int_eq(st.code, 422);
    ck_assert_str_eq(st.reason, "Invalid");
    ck_assert_str_eq(st.message,
                     "Deployment.apps \"w\" is invalid: spec.replicas: Invalid value: -1");

    k8s_status_parse(502, "<html>\r\nbad gateway\x01</html>", 27, &st);
    ck_assert_int_eq(st.code, 502);
    ck_assert_str_eq(st.reason, "");
    ck_assert_str_eq(st.message, "<html>  bad gateway </html>");

    k8s_status_parse(500, "", 0, &st);
    ck_assert_str_eq(st.message, "");

    char big[5000];
    memset(big, 'y', sizeof(big));
    k8s_status_parse(500, big, sizeof(big), &st);
    ck_assert_uint_eq(strlen(st.message), K8S_STATUS_MSG_MAX - 1);

    /* A JSON body that is not a Status is shown as text. */
    k8s_status_parse(400, "{\"kind\":\"Pod\"}", 14, &st);
    ck_assert_str_eq(st.message, "{\"kind\":\"Pod\"}");
}
END_TEST

/* ---- client against the fake API server over TLS ---- */

static char tmp_dir[512];
static pid_t srv_pid = -1;
static int srv_port;

static const char *root_dir(void)
{
    const char *r = getenv("CINFER_ROOT");
    return r && *r ? r : ".";
}

static void srv_start(void)
{
    char cmd[2048], a[1024], b[1024], c[1024];
    int fds[2];

    snprintf(tmp_dir, sizeof(tmp_dir), "%s/cinfer-k8s-client-XXXXXX", test_tmpdir());
    if (!mkdtemp(tmp_dir)) return;
    snprintf(cmd, sizeof(cmd), "bash %s/tests/testdata/k8s/gen_certs.sh %s", root_dir(), tmp_dir);
    if (system(cmd) != 0 || pipe(fds) != 0) return;
    snprintf(a, sizeof(a), "%s/server.crt", tmp_dir);
    snprintf(b, sizeof(b), "%s/server.key", tmp_dir);
    snprintf(c, sizeof(c), "%s/ca.crt", tmp_dir);
    snprintf(cmd, sizeof(cmd), "%s/tests/testdata/k8s/https_server.py", root_dir());
    srv_pid = fork();
    if (srv_pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("python3", "python3", cmd, a, b, c, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    if (f) {
        if (fscanf(f, "PORT %d", &srv_port) != 1) srv_port = 0;
        fclose(f);
    }
}

static void srv_stop(void)
{
    char cmd[1024];
    if (srv_pid > 0) {
        kill(srv_pid, SIGTERM);
        waitpid(srv_pid, NULL, 0);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
    if (tmp_dir[0] && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
}

/* A client from a kubeconfig that trusts the test CA (by relative file) and uses a token file,
 * re-read every `refresh_s` seconds. */
static struct k8s_client *client_new_refresh(const char *field_manager, int refresh_s)
{
    char path[1024], kc[2048], err[K8S_ERRMSG_MAX] = "";
    struct k8s_config *cfg = NULL;
    struct k8s_client *c = NULL;
    FILE *f;

    ck_assert_msg(srv_port > 0, "fake API server did not start (python3 and openssl needed)");
    snprintf(path, sizeof(path), "%s/token", tmp_dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("tok-1\n", f);
    fclose(f);
    snprintf(kc, sizeof(kc),
             "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:%d', "
             "certificate-authority: ca.crt}}]\n"
             "users: [{name: u, user: {tokenFile: token}}]\n"
             "contexts: [{name: x, context: {cluster: c, user: u, namespace: echo}}]\n"
             "current-context: x\n",
             srv_port);
    snprintf(path, sizeof(path), "%s/kubeconfig", tmp_dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(kc, f);
    fclose(f);
    ck_assert_msg(k8s_config_load_kubeconfig(path, NULL, &cfg, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(cfg->token_refresh_s, K8S_TOKEN_REFRESH_S_DEF);
    cfg->token_refresh_s = refresh_s;
    struct k8s_client_opts o = {.field_manager = field_manager, .timeout_ms = 10000};
    ck_assert_msg(k8s_client_new(cfg, &o, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(k8s_client_config(c)->ns, "echo");
    return c;
}

static struct k8s_client *client_new(const char *field_manager)
{
    return client_new_refresh(field_manager, K8S_TOKEN_REFRESH_S_DEF);
}

static const char *jstr(const json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));
    ck_assert_msg(s != NULL, "no string %s", key);
    return s;
}

START_TEST(test_k8s_client_get_and_list)
{
    struct k8s_client *c = client_new(NULL);
    struct k8s_ref ref = {&k8s_resource_configmaps, "echo", "cm1", NULL};
    json_t *out = NULL;
    ck_assert_int_eq(k8s_client_get(c, &ref, &out), 0);
    ck_assert_str_eq(jstr(out, "method"), "GET");
    ck_assert_str_eq(jstr(out, "path"), "/api/v1/namespaces/echo/configmaps/cm1");
    ck_assert_str_eq(jstr(out, "accept"), "application/json");
    ck_assert_str_eq(jstr(out, "auth"), "Bearer tok-1");
    ck_assert_str_eq(k8s_client_errmsg(c), "");
    json_decref(out);

    ref.name = NULL;
    struct k8s_list_opts lo = {.label_selector = "app=web,tier!=cache",
                               .limit = 50,
                               .continue_token = "abc=",
                               .resource_version = "0",
                               .resource_version_match = "NotOlderThan"};
    ck_assert_int_eq(k8s_client_list(c, &ref, &lo, &out), 0);
    ck_assert_str_eq(jstr(out, "query"), "labelSelector=app%3Dweb%2Ctier%21%3Dcache&limit=50"
                                         "&continue=abc%3D&resourceVersion=0"
                                         "&resourceVersionMatch=NotOlderThan");
    json_decref(out);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_client_writes)
{
    struct k8s_client *c = client_new("cinfer-test");
    struct k8s_ref coll = {&k8s_resource_configmaps, "echo", NULL, NULL};
    struct k8s_ref one = {&k8s_resource_configmaps, "echo", "cm1", NULL};
    json_t *obj = json_pack("{s:s, s:{s:s}}", "kind", "ConfigMap", "metadata", "name", "cm1");
    json_t *out = NULL;

    ck_assert_int_eq(k8s_client_create(c, &coll, obj, &out), 0);
    ck_assert_str_eq(jstr(out, "method"), "POST");
    ck_assert_str_eq(jstr(out, "path"), "/api/v1/namespaces/echo/configmaps");
    ck_assert_str_eq(jstr(out, "query"), "fieldManager=cinfer-test");
    ck_assert_str_eq(jstr(out, "contentType"), "application/json");
    ck_assert(json_equal(json_object_get(out, "body"), obj));
    json_decref(out);

    struct k8s_ref st = {&k8s_resource_deployments, "echo", "web", "status"};
    ck_assert_int_eq(k8s_client_update(c, &st, obj, &out), 0);
    ck_assert_str_eq(jstr(out, "method"), "PUT");
    ck_assert_str_eq(jstr(out, "path"), "/apis/apps/v1/namespaces/echo/deployments/web/status");
    json_decref(out);
    ck_assert_int_eq(k8s_client_update(c, &one, obj, NULL), 0); /* result not wanted */

    static const char *const cts[] = {"application/merge-patch+json", "application/json-patch+json",
                                      "application/strategic-merge-patch+json",
                                      "application/apply-patch+yaml"};
    for (int t = K8S_PATCH_MERGE; t <= K8S_PATCH_APPLY; t++) {
        ck_assert_int_eq(k8s_client_patch(c, &one, t, obj, NULL, &out), 0);
        ck_assert_str_eq(jstr(out, "method"), "PATCH");
        ck_assert_str_eq(jstr(out, "contentType"), cts[t]);
        json_decref(out);
    }
    struct k8s_patch_opts po = {.field_manager = "autoscaler", .force = true};
    ck_assert_int_eq(k8s_client_patch(c, &one, K8S_PATCH_APPLY, obj, &po, &out), 0);
    ck_assert_str_eq(jstr(out, "query"), "fieldManager=autoscaler&force=true");
    json_decref(out);

    struct k8s_delete_opts d = {
        .propagation_policy = "Foreground", .set_grace_period = true, .precondition_uid = "u-1"};
    ck_assert_int_eq(k8s_client_delete(c, &one, &d, &out), 0);
    ck_assert_str_eq(jstr(out, "method"), "DELETE");
    json_t *body = json_object_get(out, "body");
    ck_assert_str_eq(jstr(body, "kind"), "DeleteOptions");
    ck_assert_str_eq(jstr(body, "propagationPolicy"), "Foreground");
    ck_assert_int_eq(json_integer_value(json_object_get(body, "gracePeriodSeconds")), 0);
    ck_assert_str_eq(jstr(json_object_get(body, "preconditions"), "uid"), "u-1");
    json_decref(out);
    ck_assert_int_eq(k8s_client_delete(c, &one, NULL, &out), 0);
    ck_assert(json_is_null(json_object_get(out, "body")));
    json_decref(out);
    json_decref(obj);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_client_apply_needs_field_manager)
{
    struct k8s_client *c = client_new(NULL);
    struct k8s_ref one = {&k8s_resource_configmaps, "echo", "cm1", NULL};
    json_t *obj = json_object();
    ck_assert_int_eq(k8s_client_patch(c, &one, K8S_PATCH_APPLY, obj, NULL, NULL), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "field manager"));
    /* Collection vs object references are checked before anything is sent. */
    ck_assert_int_eq(k8s_client_create(c, &one, obj, NULL), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "takes no name"));
    one.name = NULL;
    ck_assert_int_eq(k8s_client_get(c, &one, NULL), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "name is required"));
    json_decref(obj);
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_client_error_answers)
{
    static const struct {
        const char *ns;
        int rc;
        long code;
        const char *msg;
    } cases[] = {
        {"exists", ERR_EXISTS, 409, "already exists"},
        {"conflict", ERR_CONFLICT, 409, "the object has been modified"},
        {"invalid", ERR_INVAL, 422, "metadata.name: Invalid value"},
        {"gone", ERR_GONE, 410, "too old resource version"},
        {"forbidden", ERR_AUTH, 403, "cannot list"},
        {"missing", ERR_NOT_FOUND, 404, "not found"},
        {"text", ERR_HTTP, 500, "boom"},
    };
    struct k8s_client *c = client_new(NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct k8s_ref ref = {&k8s_resource_configmaps, cases[i].ns, "a", NULL};
        json_t *out = NULL;
        ck_assert_int_eq(k8s_client_get(c, &ref, &out), cases[i].rc);
        ck_assert_ptr_null(out);
        ck_assert_int_eq(k8s_client_status(c)->code, cases[i].code);
        ck_assert_msg(strstr(k8s_client_status(c)->message, cases[i].msg), "%s: %s", cases[i].ns,
                      k8s_client_status(c)->message);
        ck_assert_msg(strstr(k8s_client_errmsg(c), "GET /api/v1/namespaces/"), "%s",
                      k8s_client_errmsg(c));
    }
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_client_token_file_reread)
{
    /* The refresh interval is a config field; 0 re-reads before every request. */
    struct k8s_client *c = client_new_refresh(NULL, 0);
    struct k8s_ref ref = {&k8s_resource_configmaps, "echo", "cm1", NULL};
    json_t *out = NULL;
    char path[1024];
    snprintf(path, sizeof(path), "%s/token", tmp_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("tok-2", f);
    fclose(f);
    ck_assert_int_eq(k8s_client_get(c, &ref, &out), 0);
    ck_assert_str_eq(jstr(out, "auth"), "Bearer tok-2");
    json_decref(out);
    /* A vanished token file keeps the last good token. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(k8s_client_get(c, &ref, &out), 0);
    ck_assert_str_eq(jstr(out, "auth"), "Bearer tok-2");
    json_decref(out);
    k8s_client_free(c);
}
END_TEST

struct seen {
    char log[1024];
    int n;
    int stop_after;
};

static int on_event(void *ctx, const struct k8s_watch_event *ev)
{
    struct seen *s = ctx;
    const char *rv = json_string_value(
        json_object_get(json_object_get(ev->object, "metadata"), "resourceVersion"));
    size_t used = strlen(s->log);
    snprintf(s->log + used, sizeof(s->log) - used, "%s%s:%s", s->n ? " " : "",
             k8s_watch_type_str(ev->type), rv ? rv : "?");
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? K8S_WATCH_STOP : 0;
}

START_TEST(test_k8s_client_watch_streams)
{
    struct k8s_client *c = client_new(NULL);
    struct k8s_ref ref = {&k8s_resource_configmaps, "watch", NULL, NULL};
    struct k8s_watch_opts wo = {
        .resource_version = "1", .allow_bookmarks = true, .timeout_seconds = 30};
    struct seen s = {.n = 0};

    ck_assert_int_eq(k8s_client_watch(c, &ref, &wo, on_event, &s), 0);
    ck_assert_str_eq(s.log, "ADDED:1 MODIFIED:2 BOOKMARK:3 DELETED:4");

    struct seen one = {.stop_after = 1};
    ck_assert_int_eq(k8s_client_watch(c, &ref, &wo, on_event, &one), 0);
    ck_assert_str_eq(one.log, "ADDED:1");

    ref.ns = "watch410";
    struct seen g = {.n = 0};
    ck_assert_int_eq(k8s_client_watch(c, &ref, &wo, on_event, &g), ERR_GONE);
    ck_assert_str_eq(g.log, "ADDED:1");
    ck_assert_int_eq(k8s_client_status(c)->code, 410);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "too old resource version"));

    ref.ns = "watchlong";
    struct k8s_watch_opts small = {.max_line = 1000};
    struct seen l = {.n = 0};
    ck_assert_int_eq(k8s_client_watch(c, &ref, &small, on_event, &l), ERR_TOO_BIG);
    ck_assert_int_eq(l.n, 0);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "longer than 1000 bytes"));

    ref.ns = "watchcut";
    struct seen cut = {.n = 0};
    ck_assert_int_eq(k8s_client_watch(c, &ref, NULL, on_event, &cut), ERR_IO);
    ck_assert_str_eq(cut.log, "ADDED:1");
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "middle of an event"));

    ref.ns = "forbidden"; /* an error answer instead of a stream */
    ck_assert_int_eq(k8s_client_watch(c, &ref, NULL, on_event, &cut), ERR_AUTH);
    ck_assert_ptr_nonnull(strstr(k8s_client_errmsg(c), "403"));
    k8s_client_free(c);
}
END_TEST

START_TEST(test_k8s_client_new_rejects_empty_config)
{
    struct k8s_client *c = NULL;
    char err[K8S_ERRMSG_MAX];
    struct k8s_config *cfg = calloc(1, sizeof(*cfg)); /* taken even on failure */
    ck_assert_int_eq(k8s_client_new(cfg, NULL, &c, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "no server"));
    ck_assert_ptr_null(c);
    k8s_client_free(NULL);
}
END_TEST

Suite *k8s_client_suite(void)
{
    Suite *s = suite_create("k8s_client");
    TCase *pure = tcase_create("pure");
    tcase_add_test(pure, test_k8s_url_build_paths);
    tcase_add_test(pure, test_k8s_url_build_rejects_bad_refs);
    tcase_add_test(pure, test_k8s_url_query_escapes_selectors);
    tcase_add_test(pure, test_k8s_status_to_err_mapping);
    tcase_add_test(pure, test_k8s_status_parse_bodies);
    tcase_add_test(pure, test_k8s_client_new_rejects_empty_config);
    suite_add_tcase(s, pure);

    TCase *wire = tcase_create("fake_api");
    tcase_add_unchecked_fixture(wire, srv_start, srv_stop);
    tcase_set_timeout(wire, 30);
    tcase_add_test(wire, test_k8s_client_get_and_list);
    tcase_add_test(wire, test_k8s_client_writes);
    tcase_add_test(wire, test_k8s_client_apply_needs_field_manager);
    tcase_add_test(wire, test_k8s_client_error_answers);
    tcase_add_test(wire, test_k8s_client_token_file_reread);
    tcase_add_test(wire, test_k8s_client_watch_streams);
    suite_add_tcase(s, wire);
    return s;
}
