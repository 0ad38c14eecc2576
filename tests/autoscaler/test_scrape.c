/* Scraping: extraction of the contract metrics from real engine expositions (native names, vLLM
 * twins, several models), rejection of unusable values and malformed bodies, and parallel fetches
 * against a local HTTP server whose paths misbehave on purpose (slow, huge, 500, not Prometheus,
 * connection refused). */
#include "autoscaler/scrape.h"

#include "common/err.h"

#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *root_dir(void)
{
    const char *r = getenv("CINFER_ROOT");
    return r && *r ? r : ".";
}

static char *read_testdata(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/testdata/autoscaler/%s", root_dir(), name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char data[16384];
    *len = fread(data, 1, sizeof(data) - 1, f);
    data[*len] = '\0';
    fclose(f);
    return data;
}

static int parse(const char *text, struct scrape_metrics *m)
{
    char err[160];
    return scrape_parse_body(text, strlen(text), 0, m, err, sizeof(err));
}

START_TEST(test_scrape_extract_engine_exposition)
{
    size_t len;
    const char *body = read_testdata("engine.prom", &len);
    struct scrape_metrics m;
    char err[160];
    ck_assert_int_eq(scrape_parse_body(body, len, 0, &m, err, sizeof(err)), 0);
    unsigned all = SCRAPE_HAVE_RUNNING | SCRAPE_HAVE_WAITING | SCRAPE_HAVE_KV | SCRAPE_HAVE_PREFIX |
                   SCRAPE_HAVE_PROMPT | SCRAPE_HAVE_GEN | SCRAPE_HAVE_REQUESTS | SCRAPE_HAVE_TTFT;
    ck_assert_uint_eq(m.have, all);
    /* Native names only: the vLLM twins must not be added on top. */
    ck_assert_double_eq(m.running, 3);
    ck_assert_double_eq(m.waiting, 7);
    ck_assert_double_eq(m.kv_usage, 0.625);
    ck_assert_double_eq(m.prefix_queries, 1000);
    ck_assert_double_eq(m.prefix_hits, 250);
    ck_assert_double_eq(m.prompt_tokens, 5000);
    ck_assert_double_eq(m.gen_tokens, 12000);
    ck_assert_double_eq(m.requests, 50); /* stop + length + abort */
    ck_assert_uint_eq(m.ttft.n, 4);
    ck_assert_double_eq(m.ttft.le[0], 0.01);
    ck_assert(isinf(m.ttft.le[3]));
    ck_assert_double_eq(m.ttft.count[2], 49);
    ck_assert_double_eq(m.ttft.count[3], 50);
}
END_TEST

START_TEST(test_scrape_extract_vllm_fallback)
{
    size_t len;
    const char *body = read_testdata("vllm_only.prom", &len);
    struct scrape_metrics m;
    ck_assert_int_eq(scrape_parse_body(body, len, 0, &m, NULL, 0), 0);
    ck_assert(m.have & SCRAPE_HAVE_RUNNING);
    ck_assert(m.have & SCRAPE_HAVE_WAITING);
    ck_assert(m.have & SCRAPE_HAVE_KV);
    ck_assert(m.have & SCRAPE_HAVE_REQUESTS);
    ck_assert(m.have & SCRAPE_HAVE_TTFT);
    ck_assert(!(m.have & (SCRAPE_HAVE_PREFIX | SCRAPE_HAVE_PROMPT | SCRAPE_HAVE_GEN)));
    ck_assert_double_eq(m.waiting, 5);
    ck_assert_double_eq(m.kv_usage, 0.5);
    ck_assert_double_eq(m.requests, 11);
    ck_assert_uint_eq(m.ttft.n, 2);
}
END_TEST

START_TEST(test_scrape_extract_sums_models)
{
    struct scrape_metrics m;
    ck_assert_int_eq(parse("cinfer_requests_waiting{model_name=\"a\"} 2\n"
                           "cinfer_requests_waiting{model_name=\"b\"} 3\n",
                           &m),
                     0);
    ck_assert_uint_eq(m.have, SCRAPE_HAVE_WAITING);
    ck_assert_double_eq(m.waiting, 5);
}
END_TEST

START_TEST(test_scrape_extract_rejects_unusable_values)
{
    struct scrape_metrics m;
    ck_assert_int_eq(parse("cinfer_requests_waiting NaN\n"
                           "cinfer_requests_running -1\n"
                           "cinfer_kv_cache_usage_ratio 1.5\n"
                           "cinfer_prompt_tokens_total +Inf\n"
                           "cinfer_prefix_cache_queries_total 10\n", /* hits missing */
                           &m),
                     0);
    ck_assert_uint_eq(m.have, 0);
    ck_assert_double_eq(m.kv_usage, 0);
    ck_assert_double_eq(m.prefix_queries, 0);
}
END_TEST

START_TEST(test_scrape_extract_bad_histograms)
{
    struct scrape_metrics m;
    /* No +Inf bucket. */
    ck_assert_int_eq(parse("# TYPE cinfer_time_to_first_token_seconds histogram\n"
                           "cinfer_time_to_first_token_seconds_bucket{le=\"1\"} 3\n",
                           &m),
                     0);
    ck_assert(!(m.have & SCRAPE_HAVE_TTFT));
    /* Cumulative counts that decrease along le. */
    ck_assert_int_eq(parse("# TYPE cinfer_time_to_first_token_seconds histogram\n"
                           "cinfer_time_to_first_token_seconds_bucket{le=\"1\"} 5\n"
                           "cinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n",
                           &m),
                     0);
    ck_assert(!(m.have & SCRAPE_HAVE_TTFT));
    /* Not typed histogram: no buckets gathered. */
    ck_assert_int_eq(parse("cinfer_time_to_first_token_seconds 3\n", &m), 0);
    ck_assert(!(m.have & SCRAPE_HAVE_TTFT));
    /* More buckets than SCRAPE_MAX_BUCKETS. */
    char big[16384];
    size_t off =
        (size_t)snprintf(big, sizeof(big), "# TYPE cinfer_time_to_first_token_seconds histogram\n");
    for (int i = 0; i <= SCRAPE_MAX_BUCKETS; i++)
        off += (size_t)snprintf(big + off, sizeof(big) - off,
                                "cinfer_time_to_first_token_seconds_bucket{le=\"%d\"} 1\n", i + 1);
    snprintf(big + off, sizeof(big) - off,
             "cinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n");
    ck_assert_int_eq(parse(big, &m), 0);
    ck_assert(!(m.have & SCRAPE_HAVE_TTFT));
}
END_TEST

START_TEST(test_scrape_parse_body_malformed)
{
    struct scrape_metrics m;
    char err[160] = "";
    const char *bad[] = {
        "cinfer_requests_waiting{model_name=\"a} 1\n", /* unterminated quote */
        "cinfer_requests_waiting 1 2 3\n",             /* trailing garbage */
        "cinfer_requests_waiting\n",                   /* no value */
        "# TYPE cinfer_requests_waiting bogus\n",      /* unknown type */
        "{} 1\n",                                      /* no name */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_int_eq(scrape_parse_body(bad[i], strlen(bad[i]), 0, &m, err, sizeof(err)),
                         ERR_PARSE);
        ck_assert_msg(strstr(err, "line 1") != NULL, "message without position: %s", err);
    }
    /* A NUL byte inside the body. */
    ck_assert_int_eq(scrape_parse_body("a 1\n\0b 2\n", 9, 0, &m, err, sizeof(err)), ERR_PARSE);
    /* Over the body limit. */
    const char *text = "cinfer_requests_waiting 1\n";
    ck_assert_int_eq(scrape_parse_body(text, strlen(text), 8, &m, err, sizeof(err)), ERR_TOO_BIG);
    /* Truncated mid-line still parses what is complete or fails cleanly, never reads past len. */
    for (size_t n = 0; n < strlen(text); n++) {
        char *copy = malloc(n ? n : 1);
        memcpy(copy, text, n);
        int rc = scrape_parse_body(copy, n, 0, &m, err, sizeof(err));
        ck_assert(rc == 0 || rc == ERR_PARSE);
        free(copy);
    }
    /* Empty body: parses, nothing usable. */
    ck_assert_int_eq(scrape_parse_body("", 0, 0, &m, err, sizeof(err)), 0);
    ck_assert_uint_eq(m.have, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------------
 * A local HTTP server: one thread per connection; the path picks the behaviour.
 * ---------------------------------------------------------------------------------------------- */

static int srv_fd = -1;
static int srv_port;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char req[2048];
    size_t len = 0;
    while (len < sizeof(req) - 1) {
        ssize_t r = recv(fd, req + len, sizeof(req) - 1 - len, 0);
        if (r <= 0) break;
        len += (size_t)r;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n")) break;
    }
    req[len] = '\0';
    char head[256];
    const char *ok_body = "# TYPE cinfer_requests_waiting gauge\ncinfer_requests_waiting 4\n"
                          "cinfer_requests_running 1\n";
    if (strncmp(req, "GET /ok ", 8) == 0) {
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                 strlen(ok_body));
        send_all(fd, head, strlen(head));
        send_all(fd, ok_body, strlen(ok_body));
    } else if (strncmp(req, "GET /slow ", 10) == 0) {
        usleep(6000 * 1000); /* past the 2 s timeout below by far, on any machine */
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                 strlen(ok_body));
        send_all(fd, head, strlen(head));
        send_all(fd, ok_body, strlen(ok_body));
    } else if (strncmp(req, "GET /big ", 9) == 0) {
        /* No Content-Length: the bound must hold while the body streams. */
        const char *h = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
        send_all(fd, h, strlen(h));
        char line[64];
        snprintf(line, sizeof(line), "cinfer_requests_waiting 1\n");
        for (int i = 0; i < 20000; i++) send_all(fd, line, strlen(line));
    } else if (strncmp(req, "GET /biglen ", 12) == 0) {
        /* A Content-Length over the bound: refused before any byte of the body is stored. */
        const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n";
        send_all(fd, h, strlen(h));
        send_all(fd, ok_body, strlen(ok_body));
    } else if (strncmp(req, "GET /garbage ", 13) == 0) {
        const char *b = "<html>not metrics</html>\n";
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", strlen(b));
        send_all(fd, head, strlen(head));
        send_all(fd, b, strlen(b));
    } else {
        const char *h = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
        send_all(fd, h, strlen(h));
    }
    close(fd);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(srv_fd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_t t;
        if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

static void server_start(void)
{
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(srv_fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(srv_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(srv_fd, 64), 0);
    socklen_t al = sizeof(a);
    ck_assert_int_eq(getsockname(srv_fd, (struct sockaddr *)&a, &al), 0);
    srv_port = ntohs(a.sin_port);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, accept_main, NULL), 0);
    pthread_detach(t);
}

/* A port nothing listens on: bound and closed again. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

START_TEST(test_scrape_run_mixed_targets)
{
    server_start();
    char urls[8][128];
    const char *paths[] = {"ok", "slow", "big", "error", "garbage", "ok", "biglen"};
    for (int i = 0; i < 7; i++)
        snprintf(urls[i], sizeof(urls[i]), "http://127.0.0.1:%d/%s", srv_port, paths[i]);
    snprintf(urls[7], sizeof(urls[7]), "http://127.0.0.1:%d/metrics", closed_port());
    struct scrape_target t[8];
    memset(t, 0, sizeof(t));
    for (int i = 0; i < 8; i++) t[i].url = urls[i];
    struct scrape_opts o = {.timeout_ms = 2000, .max_body = 64 * 1024};
    ck_assert_int_eq(scrape_run(t, 8, &o), 0);

    ck_assert_int_eq(t[0].rc, 0);
    ck_assert_str_eq(t[0].error, "");
    ck_assert_int_eq(t[0].http_status, 200);
    ck_assert_double_eq(t[0].metrics.waiting, 4);
    ck_assert_double_eq(t[0].metrics.running, 1);
    ck_assert_int_eq(t[5].rc, 0); /* a second target on the same server, in the same round */

    ck_assert_int_eq(t[1].rc, ERR_TIMEOUT);
    ck_assert_int_eq(t[2].rc, ERR_TOO_BIG);
    ck_assert_msg(strstr(t[2].error, "65536") != NULL, "%s", t[2].error);
    ck_assert_int_eq(t[3].rc, ERR_HTTP);
    ck_assert_int_eq(t[3].http_status, 500);
    ck_assert_str_eq(t[3].error, "HTTP status 500");
    ck_assert_int_eq(t[4].rc, ERR_PARSE);
    ck_assert_msg(strncmp(t[4].error, "bad exposition: line 1", 22) == 0, "%s", t[4].error);
    ck_assert_int_eq(t[6].rc, ERR_TOO_BIG);
    ck_assert_int_eq(t[7].rc, ERR_IO);
    ck_assert_str_ne(t[7].error, "");
    for (int i = 1; i <= 7; i++)
        if (i != 5) ck_assert_uint_eq(t[i].metrics.have, 0);
}
END_TEST

START_TEST(test_scrape_run_many_targets)
{
    /* More targets than open connections at once: every one is scraped, none starves. */
    server_start();
    enum { N = 300 };
    static char urls[N][64];
    static struct scrape_target t[N];
    for (int i = 0; i < N; i++) {
        snprintf(urls[i], sizeof(urls[i]), "http://127.0.0.1:%d/ok", srv_port);
        t[i] = (struct scrape_target){.url = urls[i]};
    }
    struct scrape_opts o = {.timeout_ms = 10000};
    ck_assert_int_eq(scrape_run(t, N, &o), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(t[i].rc == 0, "target %d: %s", i, t[i].error);
        ck_assert_double_eq(t[i].metrics.waiting, 4);
    }
}
END_TEST

START_TEST(test_scrape_run_empty_and_bad_url)
{
    ck_assert_int_eq(scrape_run(NULL, 0, NULL), 0);
    struct scrape_target t = {.url = "gopher://127.0.0.1/x"};
    ck_assert_int_eq(scrape_run(&t, 1, NULL), 0);
    ck_assert_int_eq(t.rc, ERR_IO); /* protocol not allowed */
    ck_assert_uint_eq(t.metrics.have, 0);
}
END_TEST

Suite *scrape_suite(void)
{
    Suite *s = suite_create("scrape");
    TCase *tc = tcase_create("extract");
    tcase_add_test(tc, test_scrape_extract_engine_exposition);
    tcase_add_test(tc, test_scrape_extract_vllm_fallback);
    tcase_add_test(tc, test_scrape_extract_sums_models);
    tcase_add_test(tc, test_scrape_extract_rejects_unusable_values);
    tcase_add_test(tc, test_scrape_extract_bad_histograms);
    tcase_add_test(tc, test_scrape_parse_body_malformed);
    suite_add_tcase(s, tc);
    TCase *net = tcase_create("fetch");
    tcase_set_timeout(net, 30);
    tcase_add_test(net, test_scrape_run_mixed_targets);
    tcase_add_test(net, test_scrape_run_many_targets);
    tcase_add_test(net, test_scrape_run_empty_and_bad_url);
    suite_add_tcase(s, net);
    return s;
}
