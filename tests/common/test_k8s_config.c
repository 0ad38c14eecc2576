/* Tests for common/k8s/yaml.c and common/k8s/config.c: YAML -> JSON conversion, kubeconfig
 * parsing (valid variants and a table of malformed files, each with the message it must give),
 * token files and the in-cluster config from a temporary directory. */
#include "common/err.h"
#include "common/k8s/config.h"
#include "common/k8s/yaml.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* base64 of small PEM-shaped texts (the parser checks shape, TLS checks content later). */
#define CERT_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define KEY_B64  "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUUKLS0tLS1FTkQgUFJJVkFURSBLRVktLS0tLQo="
#define CERT_PEM "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

static const char kubeconfig_ok[] = "apiVersion: v1\n"
                                    "kind: Config\n"
                                    "clusters:\n"
                                    "- name: prod\n"
                                    "  cluster:\n"
                                    "    server: https://10.0.0.1:6443/\n"
                                    "    certificate-authority-data: " CERT_B64 "\n"
                                    "- name: dev\n"
                                    "  cluster:\n"
                                    "    server: https://dev.example:443\n"
                                    "    insecure-skip-tls-verify: true\n"
                                    "users:\n"
                                    "- name: admin\n"
                                    "  user:\n"
                                    "    client-certificate-data: " CERT_B64 "\n"
                                    "    client-key-data: " KEY_B64 "\n"
                                    "- name: bot\n"
                                    "  user:\n"
                                    "    token: abc.def\n"
                                    "contexts:\n"
                                    "- name: prod-admin\n"
                                    "  context: {cluster: prod, user: admin, namespace: serving}\n"
                                    "- name: dev-bot\n"
                                    "  context:\n"
                                    "    cluster: dev\n"
                                    "    user: bot\n"
                                    "- name: anon\n"
                                    "  context:\n"
                                    "    cluster: dev\n"
                                    "current-context: prod-admin\n";

static struct k8s_config *parse_ok(const char *yaml, const char *context)
{
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    int rc = k8s_config_parse_kubeconfig(yaml, strlen(yaml), context, NULL, &c, err, sizeof(err));
    ck_assert_msg(rc == 0, "parse failed: %s (%s)", err_str(rc), err);
    ck_assert_ptr_nonnull(c);
    return c;
}

START_TEST(test_k8s_config_kubeconfig_current_context)
{
    struct k8s_config *c = parse_ok(kubeconfig_ok, NULL);
    ck_assert_str_eq(c->server, "https://10.0.0.1:6443"); /* trailing slash dropped */
    ck_assert_str_eq(c->ca_pem, CERT_PEM);
    ck_assert(!c->insecure_skip_verify);
    ck_assert_ptr_nonnull(strstr(c->cert_pem, "BEGIN CERTIFICATE"));
    ck_assert_ptr_nonnull(strstr(c->key_pem, "BEGIN PRIVATE KEY"));
    ck_assert_ptr_null(c->token);
    ck_assert_str_eq(c->ns, "serving");
    ck_assert_str_eq(c->context, "prod-admin");
    k8s_config_free(c);
}
END_TEST

START_TEST(test_k8s_config_kubeconfig_named_context)
{
    struct k8s_config *c = parse_ok(kubeconfig_ok, "dev-bot");
    ck_assert_str_eq(c->server, "https://dev.example:443");
    ck_assert(c->insecure_skip_verify);
    ck_assert_ptr_null(c->ca_pem);
    ck_assert_str_eq(c->token, "abc.def");
    ck_assert_ptr_null(c->cert_pem);
    ck_assert_str_eq(c->ns, "default");
    k8s_config_free(c);

    c = parse_ok(kubeconfig_ok, "anon"); /* a context without a user is anonymous */
    ck_assert_ptr_null(c->token);
    ck_assert_ptr_null(c->cert_pem);
    k8s_config_free(c);
}
END_TEST

START_TEST(test_k8s_config_kubeconfig_flow_style_and_quotes)
{
    /* kubectl writes block style, but JSON is YAML too and some tools write it. */
    const char *json =
        "{\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"http://127.0.0.1:8080\","
        "\"insecure-skip-tls-verify\":\"false\"}}],"
        "\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\"}}],"
        "\"current-context\":\"x\", \"users\": null}";
    struct k8s_config *c = parse_ok(json, NULL);
    ck_assert_str_eq(c->server, "http://127.0.0.1:8080");
    ck_assert(!c->insecure_skip_verify);
    k8s_config_free(c);
}
END_TEST

static char tmp_dir[512];

static void tmp_setup(void)
{
    snprintf(tmp_dir, sizeof(tmp_dir), "%s/cinfer-k8s-cfg-XXXXXX", test_tmpdir());
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void tmp_teardown(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_k8s_config_kubeconfig_files_relative_to_kubeconfig)
{
    char path[1024];
    write_file("ca.crt", CERT_PEM);
    write_file("tls.crt", CERT_PEM);
    write_file("tls.key", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n");
    write_file("token", "  file-token\n");
    write_file("config",
               "clusters:\n"
               "- name: c\n"
               "  cluster: {server: 'https://h:1', certificate-authority: ca.crt}\n"
               "users:\n"
               "- name: u\n"
               "  user: {client-certificate: tls.crt, client-key: tls.key, tokenFile: token}\n"
               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
               "current-context: x\n");
    snprintf(path, sizeof(path), "%s/config", tmp_dir);
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    ck_assert_int_eq(k8s_config_load_kubeconfig(path, NULL, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->ca_pem, CERT_PEM);
    ck_assert_str_eq(c->cert_pem, CERT_PEM);
    ck_assert_ptr_nonnull(strstr(c->key_pem, "PRIVATE KEY"));
    ck_assert_str_eq(c->token, "file-token");
    snprintf(path, sizeof(path), "%s/token", tmp_dir);
    ck_assert_str_eq(c->token_file, path);
    k8s_config_free(c);

    /* Through $KUBECONFIG, with a second (ignored) entry. */
    snprintf(path, sizeof(path), "%s/config:/nonexistent", tmp_dir);
    setenv("KUBECONFIG", path, 1);
    ck_assert_int_eq(k8s_config_load_default(NULL, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->server, "https://h:1");
    k8s_config_free(c);
    unsetenv("KUBECONFIG");
}
END_TEST

START_TEST(test_k8s_config_kubeconfig_missing_file)
{
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    ck_assert_int_eq(
        k8s_config_load_kubeconfig("/nonexistent/kubeconfig", NULL, &c, err, sizeof(err)), ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/kubeconfig"));
    ck_assert_ptr_null(c);
}
END_TEST

/* Malformed kubeconfigs: each must fail with `rc` and a message containing `msg`. */
static const struct {
    const char *name, *yaml;
    int rc;
    const char *msg;
} malformed[] = {
    {"not yaml", "clusters: [unclosed\n", ERR_PARSE, "YAML line"},
    {"tab indentation", "clusters:\n\t- name: x\n", ERR_PARSE, "YAML line 2"},
    {"empty file", "", ERR_PARSE, "empty document"},
    {"top level is a list", "- a\n- b\n", ERR_PARSE, "top level is not a mapping"},
    {"top level is a scalar", "just text\n", ERR_PARSE, "top level is not a mapping"},
    {"two documents", "a: 1\n---\nb: 2\n", ERR_PARSE, "more than one YAML document"},
    {"alias", "x: &a {server: s}\ny: *a\n", ERR_UNSUPPORTED, "anchors are not supported"},
    {"duplicate key", "current-context: a\ncurrent-context: b\n", ERR_PARSE,
     "duplicate key \"current-context\""},
    {"mapping as key", "? {a: 1}\n: x\n", ERR_PARSE, "mapping key must be a non-null scalar"},
    {"missing current-context",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\n",
     ERR_INVAL, "current-context is not set"},
    {"current-context not a string", "current-context: [a]\n", ERR_INVAL,
     "current-context must be a string"},
    {"context not defined",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: y\n",
     ERR_NOT_FOUND, "context \"y\" is not defined"},
    {"context to missing cluster",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "contexts: [{name: x, context: {cluster: nope}}]\ncurrent-context: x\n",
     ERR_NOT_FOUND, "context \"x\" refers to cluster \"nope\", which is not defined"},
    {"context to missing user",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: ghost}}]\ncurrent-context: x\n",
     ERR_NOT_FOUND, "refers to user \"ghost\", which is not defined"},
    {"context without cluster", "contexts: [{name: x, context: {user: u}}]\ncurrent-context: x\n",
     ERR_INVAL, "context \"x\" names no cluster"},
    {"context entry without mapping", "contexts: [{name: x}]\ncurrent-context: x\n", ERR_PARSE,
     "context \"x\" has no context mapping"},
    {"contexts not a list", "contexts: {x: 1}\ncurrent-context: x\n", ERR_PARSE,
     "contexts must be a list"},
    {"context without name", "contexts: [{context: {cluster: c}}]\ncurrent-context: x\n", ERR_PARSE,
     "contexts[0] has no name"},
    {"missing server",
     "clusters: [{name: c, cluster: {certificate-authority-data: " CERT_B64 "}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "cluster \"c\" has no server"},
    {"server not a URL",
     "clusters: [{name: c, cluster: {server: 'h:6443'}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "is not an http(s) URL"},
    {"server is a list",
     "clusters: [{name: c, cluster: {server: [a]}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "cluster \"c\": server must be a string"},
    {"bad base64",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: 'a$b='}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "certificate-authority-data is not valid base64"},
    {"base64 missing padding",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: 'YWJj"
     "ZA'}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "not valid base64"},
    {"CA data not PEM",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: "
     "bm90IGEgcGVt}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "certificate-authority-data is not PEM"},
    {"CA file missing",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: "
     "/nonexistent/ca.crt}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_IO, "/nonexistent/ca.crt"},
    {"CA data and file",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: f, "
     "certificate-authority-data: " CERT_B64 "}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "both certificate-authority and certificate-authority-data"},
    {"insecure with CA",
     "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true, "
     "certificate-authority-data: " CERT_B64 "}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "insecure-skip-tls-verify is not allowed"},
    {"insecure not a bool",
     "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: yes-please}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_INVAL, "insecure-skip-tls-verify must be true or false"},
    {"cert without key",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "users: [{name: u, user: {client-certificate-data: " CERT_B64 "}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
     ERR_INVAL, "user \"u\": a client certificate needs a client key"},
    {"bad key base64",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "users: [{name: u, user: {client-certificate-data: " CERT_B64 ", client-key-data: '!!'}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
     ERR_INVAL, "user \"u\": client-key-data is not valid base64"},
    {"exec plugin",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "users: [{name: u, user: {exec: {command: aws}}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
     ERR_UNSUPPORTED, "user \"u\": exec is not supported"},
    {"token file missing",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "users: [{name: u, user: {tokenFile: /nonexistent/token}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
     ERR_IO, "user \"u\": tokenFile: cannot open /nonexistent/token"},
    {"token file is a device",
     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
     "users: [{name: u, user: {tokenFile: /dev/zero}}]\n"
     "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
     ERR_IO, "/dev/zero is not a regular file"},
    {"CA file is a directory",
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: /}}]\n"
     "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
     ERR_IO, "/ is not a regular file"},
    {"NUL in scalar", "current-context: \"a\\0b\"\n", ERR_PARSE, "NUL byte"},
};

START_TEST(test_k8s_config_kubeconfig_malformed)
{
    const char *yaml = malformed[_i].yaml;
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    int rc = k8s_config_parse_kubeconfig(yaml, strlen(yaml), NULL, NULL, &c, err, sizeof(err));
    ck_assert_msg(rc == malformed[_i].rc, "case \"%s\": got %s (%s), want %s", malformed[_i].name,
                  err_str(rc), err, err_str(malformed[_i].rc));
    ck_assert_msg(strstr(err, malformed[_i].msg) != NULL,
                  "case \"%s\": message \"%s\" lacks \"%s\"", malformed[_i].name, err,
                  malformed[_i].msg);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_k8s_config_kubeconfig_path_too_long)
{
    static char yaml[8192];
    char longpath[5000];
    memset(longpath, 'd', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = 0;
    snprintf(yaml, sizeof(yaml),
             "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: %s}}]\n"
             "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
             longpath);
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    ck_assert_int_eq(
        k8s_config_parse_kubeconfig(yaml, strlen(yaml), NULL, "/base", &c, err, sizeof(err)),
        ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "certificate-authority: path too long"));
}
END_TEST

START_TEST(test_k8s_yaml_to_json_values)
{
    const char *y =
        "a: 1\nb: ~\nc: ''\nd: [x, 'null', null]\ne: {f: true}\ng:\nh: |\n  two\n  lines\n";
    json_t *j = NULL;
    char err[256];
    ck_assert_int_eq(k8s_yaml_to_json(y, strlen(y), &j, err, sizeof(err)), 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "a")), "1");
    ck_assert(json_is_null(json_object_get(j, "b")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "c")), ""); /* quoted: a string */
    json_t *d = json_object_get(j, "d");
    ck_assert_uint_eq(json_array_size(d), 3);
    ck_assert_str_eq(json_string_value(json_array_get(d, 1)), "null");
    ck_assert(json_is_null(json_array_get(d, 2)));
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "e"), "f")), "true");
    ck_assert(json_is_null(json_object_get(j, "g")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "h")), "two\nlines\n");
    json_decref(j);
}
END_TEST

START_TEST(test_k8s_yaml_to_json_depth_limit)
{
    char y[400];
    size_t n = 0;
    for (int i = 0; i < 100; i++) y[n++] = '[';
    for (int i = 0; i < 100; i++) y[n++] = ']';
    json_t *j = NULL;
    char err[256];
    ck_assert_int_eq(k8s_yaml_to_json(y, n, &j, err, sizeof(err)), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err, "nested too deeply"));
    ck_assert_ptr_null(j);
    /* 64 levels are fine. */
    n = 0;
    for (int i = 0; i < K8S_YAML_MAX_DEPTH; i++) y[n++] = '[';
    for (int i = 0; i < K8S_YAML_MAX_DEPTH; i++) y[n++] = ']';
    ck_assert_int_eq(k8s_yaml_to_json(y, n, &j, err, sizeof(err)), 0);
    json_decref(j);
}
END_TEST

START_TEST(test_k8s_config_read_token)
{
    char path[1024], *tok = NULL, err[K8S_ERRMSG_MAX];
    snprintf(path, sizeof(path), "%s/token", tmp_dir);
    write_file("token", "\n\teyJhbGciOi.x-y_z\r\n");
    ck_assert_int_eq(k8s_config_read_token(path, &tok, err, sizeof(err)), 0);
    ck_assert_str_eq(tok, "eyJhbGciOi.x-y_z");
    free(tok);
    write_file("token", " \n");
    ck_assert_int_eq(k8s_config_read_token(path, &tok, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "is empty"));
    write_file("token", "abc\ndef");
    ck_assert_int_eq(k8s_config_read_token(path, &tok, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "non-printable"));
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 70000; i++) fputc('a', f);
    fclose(f);
    ck_assert_int_eq(k8s_config_read_token(path, &tok, err, sizeof(err)), ERR_TOO_BIG);
}
END_TEST

static struct k8s_incluster_paths incluster_paths(void)
{
    static char tok[1024], ca[1024], ns[1024];
    snprintf(tok, sizeof(tok), "%s/token", tmp_dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", tmp_dir);
    snprintf(ns, sizeof(ns), "%s/namespace", tmp_dir);
    return (struct k8s_incluster_paths){tok, ca, ns};
}

START_TEST(test_k8s_config_incluster_ok)
{
    struct k8s_incluster_paths p = incluster_paths();
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    write_file("token", "sa-token\n");
    write_file("ca.crt", CERT_PEM);
    write_file("namespace", "inference\n");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->server, "https://10.96.0.1:443");
    ck_assert_str_eq(c->token, "sa-token");
    ck_assert_str_eq(c->token_file, p.token_file);
    ck_assert_int_eq(c->token_refresh_s, K8S_TOKEN_REFRESH_S_DEF);
    ck_assert_str_eq(c->ca_pem, CERT_PEM);
    ck_assert_str_eq(c->ns, "inference");
    ck_assert_ptr_null(c->context);
    k8s_config_free(c);

    /* IPv6 service address; no namespace file. */
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    ck_assert_int_eq(unlink(p.namespace_file), 0);
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->server, "https://[fd00::1]:443");
    ck_assert_str_eq(c->ns, "default");
    k8s_config_free(c);
}
END_TEST

START_TEST(test_k8s_config_incluster_errors)
{
    struct k8s_incluster_paths p = incluster_paths();
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX] = "";
    unsetenv("KUBERNETES_SERVICE_HOST");
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "not a port number"));
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, p.token_file));
    write_file("token", "sa-token\n");
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, p.ca_file));
    write_file("ca.crt", "garbage");
    ck_assert_int_eq(k8s_config_load_incluster(&p, &c, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "not a PEM file"));
    ck_assert_ptr_null(c);
}
END_TEST

Suite *k8s_config_suite(void)
{
    Suite *s = suite_create("k8s_config");
    TCase *tc = tcase_create("kubeconfig");
    tcase_add_test(tc, test_k8s_config_kubeconfig_current_context);
    tcase_add_test(tc, test_k8s_config_kubeconfig_named_context);
    tcase_add_test(tc, test_k8s_config_kubeconfig_flow_style_and_quotes);
    tcase_add_test(tc, test_k8s_config_kubeconfig_missing_file);
    tcase_add_loop_test(tc, test_k8s_config_kubeconfig_malformed, 0,
                        (int)(sizeof(malformed) / sizeof(malformed[0])));
    tcase_add_test(tc, test_k8s_config_kubeconfig_path_too_long);
    tcase_add_test(tc, test_k8s_yaml_to_json_values);
    tcase_add_test(tc, test_k8s_yaml_to_json_depth_limit);
    suite_add_tcase(s, tc);

    TCase *files = tcase_create("files");
    tcase_add_checked_fixture(files, tmp_setup, tmp_teardown);
    tcase_add_test(files, test_k8s_config_kubeconfig_files_relative_to_kubeconfig);
    tcase_add_test(files, test_k8s_config_read_token);
    tcase_add_test(files, test_k8s_config_incluster_ok);
    tcase_add_test(files, test_k8s_config_incluster_errors);
    suite_add_tcase(s, files);
    return s;
}
