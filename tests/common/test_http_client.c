/* Tests for common/http_client against a real HTTPS server on loopback: the suite generates a CA,
 * a server and a client certificate with openssl (tests/testdata/k8s/gen_certs.sh) and starts
 * tests/testdata/k8s/https_server.py once; every test then talks TLS to it. */
#include "common/err.h"
#include "common/http_client.h"
#include "common/shutdown.h"
#include "tests/testutil.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_dir[512];
static pid_t srv_pid = -1;
static int srv_port;

static const char *root_dir(void)
{
    const char *r = getenv("CINFER_ROOT");
    return r && *r ? r : ".";
}

static const char *tmp_path(const char *name)
{
    static char path[4][1024];
    static int i;
    i = (i + 1) % 4;
    snprintf(path[i], sizeof(path[i]), "%s/%s", tmp_dir, name);
    return path[i];
}

static void srv_start(void)
{
    char cmd[2048];
    int fds[2];

    snprintf(tmp_dir, sizeof(tmp_dir), "%s/cinfer-http-XXXXXX", test_tmpdir());
    if (!mkdtemp(tmp_dir)) return;
    snprintf(cmd, sizeof(cmd), "bash %s/tests/testdata/k8s/gen_certs.sh %s", root_dir(), tmp_dir);
    if (system(cmd) != 0) return;
    if (pipe(fds) != 0) return;
    srv_pid = fork();
    if (srv_pid == 0) {
        char script[1024];
        snprintf(script, sizeof(script), "%s/tests/testdata/k8s/https_server.py", root_dir());
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp("python3", "python3", script, tmp_path("server.crt"), tmp_path("server.key"),
               tmp_path("ca.crt"), (char *)NULL);
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
    if (srv_pid > 0) {
        kill(srv_pid, SIGTERM);
        waitpid(srv_pid, NULL, 0);
    }
    if (tmp_dir[0]) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
    }
}

static const char *url(const char *path)
{
    static char u[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(u[i], sizeof(u[i]), "https://127.0.0.1:%d%s", srv_port, path);
    return u[i];
}

/* A client trusting the test CA (from its file) with optional overrides. */
static struct http_client *client_with(struct http_client_opts o)
{
    struct http_client *c = NULL;
    char err[HTTP_CLIENT_ERRMSG_MAX];
    ck_assert_msg(srv_port > 0, "test HTTPS server did not start (python3 and openssl needed)");
    ck_assert_int_eq(http_client_new(&o, &c, err), 0);
    return c;
}

static struct http_client *client_default(void)
{
    return client_with((struct http_client_opts){.tls.ca_file = tmp_path("ca.crt")});
}

static int get(struct http_client *c, const char *path, struct http_response *r)
{
    struct http_request req = {.url = url(path)};
    return http_client_do(c, &req, r);
}

START_TEST(test_http_client_do_ca_file_ok)
{
    struct http_client *c = client_default();
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/hello", &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(buf_cstr(&r.body), "hello");
    ck_assert_str_eq(http_client_errmsg(c), "");
    /* A second request on the same client (connection reuse) replaces the body. */
    ck_assert_int_eq(get(c, "/status?code=404", &r), 0);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(buf_cstr(&r.body), "status 404");
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_ca_pem_ok)
{
    char *pem = test_read_file(tmp_path("ca.crt"), NULL);
    ck_assert_ptr_nonnull(pem);
    struct http_client *c = client_with((struct http_client_opts){.tls.ca_pem = pem});
    free(pem); /* the client keeps its own copy */
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/hello", &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_wrong_ca_fails)
{
    struct http_client *c =
        client_with((struct http_client_opts){.tls.ca_file = tmp_path("other-ca.crt")});
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/hello", &r), ERR_AUTH);
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "certificate"));
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "/hello"));
    http_response_fini(&r);
    http_client_free(c);

    /* The system store does not know the test CA either. */
    c = client_with((struct http_client_opts){0});
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/hello", &r), ERR_AUTH);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_insecure_skips_verify)
{
    struct http_client *c = client_with((struct http_client_opts){
        .tls = {.ca_file = tmp_path("other-ca.crt"), .insecure_skip_verify = true}});
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/hello", &r), 0);
    ck_assert_int_eq(r.status, 200);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_timeout)
{
    struct http_client *c = client_with(
        (struct http_client_opts){.tls.ca_file = tmp_path("ca.crt"), .timeout_ms = 300});
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/slow?ms=3000", &r), ERR_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "timed out"));
    /* A per-request limit overrides the client default. */
    struct http_request req = {.url = url("/slow?ms=500"), .timeout_ms = 5000};
    ck_assert_int_eq(http_client_do(c, &req, &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "slow");
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_too_big)
{
    struct http_client *c = client_with(
        (struct http_client_opts){.tls.ca_file = tmp_path("ca.crt"), .max_response = 1000});
    struct http_response r;
    http_response_init(&r);
    ck_assert_int_eq(get(c, "/big?n=1000", &r), 0); /* exactly at the limit */
    ck_assert_uint_eq(r.body.len, 1000);
    ck_assert_int_eq(get(c, "/big?n=1001", &r), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "larger than 1000 bytes"));
    ck_assert_int_eq(get(c, "/big?n=5000000", &r), ERR_TOO_BIG);
    ck_assert_uint_le(r.body.len, 1000);
    struct http_request req = {.url = url("/big?n=5000"), .max_response = 8192};
    ck_assert_int_eq(http_client_do(c, &req, &r), 0);
    ck_assert_uint_eq(r.body.len, 5000);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_methods_body_token)
{
    struct http_client *c = client_default();
    struct http_response r;
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    const char *methods[] = {"POST", "PUT", "PATCH", "DELETE"};
    http_response_init(&r);
    for (size_t i = 0; i < 4; i++) {
        struct http_request req = {.method = methods[i],
                                   .url = url("/echo"),
                                   .headers = hdrs,
                                   .body = "{\"a\":1}",
                                   .body_len = 7,
                                   .bearer_token = "s3cret"};
        char want[128];
        ck_assert_int_eq(http_client_do(c, &req, &r), 0);
        snprintf(want, sizeof(want), "%s|Bearer s3cret|application/json|{\"a\":1}", methods[i]);
        ck_assert_str_eq(buf_cstr(&r.body), want);
    }
    struct http_request del = {.method = "DELETE", .url = url("/echo")};
    ck_assert_int_eq(http_client_do(c, &del, &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "DELETE|||");
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_rejects_header_injection)
{
    struct http_client *c = client_default();
    struct http_response r;
    http_response_init(&r);
    struct http_request req = {.url = url("/echo"), .bearer_token = "s3cr3tvalue\r\nX-Evil: 1"};
    ck_assert_int_eq(http_client_do(c, &req, &r), ERR_INVAL);
    ck_assert_ptr_null(strstr(http_client_errmsg(c), "s3cr3t"));
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "line break"));
    const char *hdrs[] = {"X-A: b\nX-Evil: 1", NULL};
    struct http_request req2 = {.url = url("/echo"), .headers = hdrs};
    ck_assert_int_eq(http_client_do(c, &req2, &r), ERR_INVAL);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_client_cert)
{
    struct http_response r;
    http_response_init(&r);

    struct http_client *c = client_default();
    ck_assert_int_eq(get(c, "/whoami", &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "anonymous");
    http_client_free(c);

    c = client_with((struct http_client_opts){.tls = {.ca_file = tmp_path("ca.crt"),
                                                      .cert_file = tmp_path("client.crt"),
                                                      .key_file = tmp_path("client.key")}});
    ck_assert_int_eq(get(c, "/whoami", &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "cinfer-test-client");
    http_client_free(c);

    char *cert = test_read_file(tmp_path("client.crt"), NULL),
         *key = test_read_file(tmp_path("client.key"), NULL);
    ck_assert_ptr_nonnull(cert);
    ck_assert_ptr_nonnull(key);
    c = client_with((struct http_client_opts){
        .tls = {.ca_file = tmp_path("ca.crt"), .cert_pem = cert, .key_pem = key}});
    free(cert);
    free(key);
    ck_assert_int_eq(get(c, "/whoami", &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "cinfer-test-client");
    http_client_free(c);
    http_response_fini(&r);
}
END_TEST

START_TEST(test_http_client_new_rejects_bad_tls_opts)
{
    struct http_client *c = NULL;
    char err[HTTP_CLIENT_ERRMSG_MAX];
    struct http_client_opts both = {.tls = {.ca_file = "a", .ca_pem = "b"}};
    ck_assert_int_eq(http_client_new(&both, &c, err), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "not both"));
    struct http_client_opts no_key = {.tls = {.cert_file = "a"}};
    ck_assert_int_eq(http_client_new(&no_key, &c, err), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "key"));
    ck_assert_ptr_null(c);
    http_client_free(NULL);
}
END_TEST

START_TEST(test_http_client_do_connection_refused)
{
    struct http_client *c = client_default();
    struct http_response r;
    http_response_init(&r);
    /* Port 1 on loopback: nothing listens there and only root could bind it. */
    struct http_request req = {.url = "https://127.0.0.1:1/"};
    ck_assert_int_eq(http_client_do(c, &req, &r), ERR_IO);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "127.0.0.1"));
    struct http_request bad = {.url = "not a url"};
    ck_assert_int_ne(http_client_do(c, &bad, &r), 0);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_do_cancelled_by_shutdown)
{
    struct http_client *c = client_default();
    struct http_response r;
    http_response_init(&r);
    shutdown_request(); /* this test runs in its own process (Check forks) */
    struct http_request req = {.url = url("/slow?ms=5000"), .timeout_ms = 20000};
    ck_assert_int_eq(http_client_do(c, &req, &r), ERR_CANCELLED);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

struct collect {
    struct buf data;
    int calls;
    int stop_after; /* return HTTP_STREAM_STOP after this many calls; 0 = never */
    int fail_with;  /* return this code on the first call; 0 = never */
};

static int collect_fn(void *ctx, const char *data, size_t len)
{
    struct collect *s = ctx;
    s->calls++;
    if (s->fail_with) return s->fail_with;
    if (buf_append(&s->data, data, len)) return ERR_TOO_BIG;
    return s->stop_after && s->calls >= s->stop_after ? HTTP_STREAM_STOP : 0;
}

START_TEST(test_http_client_stream_delivers_chunks)
{
    struct http_client *c = client_default();
    struct http_response r;
    struct collect s = {.stop_after = 0};
    http_response_init(&r);
    buf_init(&s.data, 4096);
    struct http_request req = {.url = url("/stream?lines=4&split=1&delay_ms=5"), .timeout_ms = -1};
    ck_assert_int_eq(http_client_stream(c, &req, collect_fn, &s, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(buf_cstr(&s.data), "line 0\nline 1\nline 2\nline 3\n");
    ck_assert_int_ge(s.calls, 2);
    ck_assert_uint_eq(r.body.len, 0);
    buf_fini(&s.data);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_stream_stop_and_error)
{
    struct http_client *c = client_default();
    struct http_response r;
    struct collect s = {.stop_after = 1};
    http_response_init(&r);
    buf_init(&s.data, 4096);
    struct http_request req = {.url = url("/stream?lines=100&delay_ms=20")};
    ck_assert_int_eq(http_client_stream(c, &req, collect_fn, &s, &r), 0);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_str_eq(buf_cstr(&s.data), "line 0\n");

    struct collect e = {.fail_with = ERR_PARSE};
    buf_init(&e.data, 16);
    ck_assert_int_eq(http_client_stream(c, &req, collect_fn, &e, &r), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(http_client_errmsg(c), "parse error"));
    buf_fini(&e.data);

    /* The client still works after an aborted stream. */
    ck_assert_int_eq(get(c, "/hello", &r), 0);
    ck_assert_str_eq(buf_cstr(&r.body), "hello");
    buf_fini(&s.data);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

START_TEST(test_http_client_stream_error_status_collects_body)
{
    struct http_client *c = client_default();
    struct http_response r;
    struct collect s = {0};
    http_response_init(&r);
    buf_init(&s.data, 4096);
    struct http_request req = {.url = url("/status?code=410")};
    ck_assert_int_eq(http_client_stream(c, &req, collect_fn, &s, &r), 0);
    ck_assert_int_eq(r.status, 410);
    ck_assert_int_eq(s.calls, 0);
    ck_assert_str_eq(buf_cstr(&r.body), "status 410");
    buf_fini(&s.data);
    http_response_fini(&r);
    http_client_free(c);
}
END_TEST

Suite *http_client_suite(void)
{
    Suite *s = suite_create("http_client");
    TCase *tc = tcase_create("https");
    tcase_add_unchecked_fixture(tc, srv_start, srv_stop);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_http_client_do_ca_file_ok);
    tcase_add_test(tc, test_http_client_do_ca_pem_ok);
    tcase_add_test(tc, test_http_client_do_wrong_ca_fails);
    tcase_add_test(tc, test_http_client_do_insecure_skips_verify);
    tcase_add_test(tc, test_http_client_do_timeout);
    tcase_add_test(tc, test_http_client_do_too_big);
    tcase_add_test(tc, test_http_client_do_methods_body_token);
    tcase_add_test(tc, test_http_client_do_rejects_header_injection);
    tcase_add_test(tc, test_http_client_do_client_cert);
    tcase_add_test(tc, test_http_client_new_rejects_bad_tls_opts);
    tcase_add_test(tc, test_http_client_do_connection_refused);
    tcase_add_test(tc, test_http_client_do_cancelled_by_shutdown);
    tcase_add_test(tc, test_http_client_stream_delivers_chunks);
    tcase_add_test(tc, test_http_client_stream_stop_and_error);
    tcase_add_test(tc, test_http_client_stream_error_status_collects_body);
    suite_add_tcase(s, tc);
    return s;
}
