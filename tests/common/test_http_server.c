/* Tests for common/http_server: an in-process server on an ephemeral loopback port, driven by a raw
 * socket client so every byte on the wire (status lines, chunk framing, partial requests) is under
 * the test's control. */
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/probe_server.h"
#include "common/prom/prom.h"
#include "tests/testutil.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- Raw client -------------------------------------------------------------------------------- */

struct tresp {
    int status;
    char headers[4096]; /* raw header block, lower-cased names */
    char *body;         /* decoded (chunked framing removed); malloc'd */
    size_t body_len;
    bool chunked;
    bool closed; /* the server closed the connection after the response */
};

static void tresp_fini(struct tresp *r)
{
    free(r->body);
    r->body = NULL;
}

static int tc_connect_family(int family, int port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int rc;
    if (family == AF_INET) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    } else {
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        inet_pton(AF_INET6, "::1", &a.sin6_addr);
        rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int tc_connect(int port)
{
    return tc_connect_family(AF_INET, port);
}

static bool tc_send(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Buffered reader over the socket. */
struct trd {
    int fd;
    char buf[65536];
    size_t len, off;
};

static int trd_byte(struct trd *r)
{
    if (r->off == r->len) {
        ssize_t n = recv(r->fd, r->buf, sizeof(r->buf), 0);
        if (n <= 0) return -1;
        r->len = (size_t)n;
        r->off = 0;
    }
    return (unsigned char)r->buf[r->off++];
}

/* Reads a line without its CRLF into out; false at EOF. */
static bool trd_line(struct trd *r, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        int c = trd_byte(r);
        if (c < 0) return false;
        if (c == '\n') break;
        if (n + 1 < cap) out[n++] = (char)c;
    }
    if (n && out[n - 1] == '\r') n--;
    out[n] = 0;
    return true;
}

static bool trd_bytes(struct trd *r, char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int c = trd_byte(r);
        if (c < 0) return false;
        out[i] = (char)c;
    }
    return true;
}

static const char *tresp_header(const struct tresp *r, const char *lname)
{
    static char v[1024];
    char key[128];
    snprintf(key, sizeof(key), "\n%s:", lname);
    const char *p = strstr(r->headers, key);
    if (!p) return NULL;
    p += strlen(key);
    while (*p == ' ') p++;
    size_t n = strcspn(p, "\n");
    if (n >= sizeof(v)) n = sizeof(v) - 1;
    memcpy(v, p, n);
    v[n] = 0;
    return v;
}

/* Reads one response. Returns false on EOF/timeout before a complete response. */
static bool tc_read_response(struct trd *rd, struct tresp *out)
{
    memset(out, 0, sizeof(*out));
    char line[8192];
    if (!trd_line(rd, line, sizeof(line))) return false;
    if (sscanf(line, "HTTP/1.%*d %d", &out->status) != 1) return false;
    size_t hl = 1;
    out->headers[0] = '\n';
    long long clen = -1;
    for (;;) {
        if (!trd_line(rd, line, sizeof(line))) return false;
        if (!line[0]) break;
        for (char *p = line; *p && *p != ':'; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        int w = snprintf(out->headers + hl, sizeof(out->headers) - hl, "%s\n", line);
        if (w > 0 && (size_t)w < sizeof(out->headers) - hl) hl += (size_t)w;
    }
    const char *te = tresp_header(out, "transfer-encoding");
    const char *cl = tresp_header(out, "content-length");
    if (cl) clen = strtoll(cl, NULL, 10);
    out->chunked = te && strstr(te, "chunked");
    const char *conn = tresp_header(out, "connection");
    out->closed = conn && strstr(conn, "close");
    if (out->chunked) {
        size_t cap = 1024, len = 0;
        out->body = malloc(cap);
        for (;;) {
            if (!trd_line(rd, line, sizeof(line))) return false;
            size_t n = strtoul(line, NULL, 16);
            if (n == 0) {
                if (!trd_line(rd, line, sizeof(line))) return false; /* final CRLF */
                break;
            }
            while (len + n + 1 > cap) cap *= 2;
            out->body = realloc(out->body, cap);
            if (!trd_bytes(rd, out->body + len, n)) return false;
            len += n;
            if (!trd_line(rd, line, sizeof(line))) return false;
        }
        out->body[len] = 0;
        out->body_len = len;
    } else if (clen >= 0) {
        out->body = malloc((size_t)clen + 1);
        if (!trd_bytes(rd, out->body, (size_t)clen)) return false;
        out->body[clen] = 0;
        out->body_len = (size_t)clen;
    } else {
        out->body = calloc(1, 1);
    }
    return true;
}

/* One request on a fresh connection. */
static bool tc_roundtrip(int port, const char *req, size_t reqlen, struct tresp *out)
{
    int fd = tc_connect(port);
    if (fd < 0) return false;
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    bool ok = tc_send(fd, req, reqlen) && tc_read_response(rd, out);
    free(rd);
    close(fd);
    return ok;
}

static bool tc_get(int port, const char *path, struct tresp *out)
{
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    return tc_roundtrip(port, req, (size_t)n, out);
}

/* True when the peer closes the connection (EOF or reset) before the receive timeout. */
static bool tc_wait_closed(int fd)
{
    char b[4096];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n == 0) return true;
        if (n < 0) return errno == ECONNRESET;
    }
}

/* ---- Server fixture ---------------------------------------------------------------------------- */

static struct http_server *srv;
static int port;

static void h_hello(struct http_req *req, void *ud)
{
    (void)ud;
    struct http_header h[] = {{"Retry-After", "7"}, {"X-Custom", "yes"}};
    http_respond(req, 200, "text/plain", "hello\n", 6, h, 2);
}

/* Echoes selected request headers and the body length as JSON. */
static void h_echo(struct http_req *req, void *ud)
{
    (void)ud;
    char ct[128] = "", auth[128] = "", rid[128] = "";
    int a = http_req_header(req, "Content-Type", ct, sizeof(ct));
    int b = http_req_header(req, "authorization", auth, sizeof(auth));
    int c = http_req_header(req, "X-Request-Id", rid, sizeof(rid));
    int d = http_req_header(req, "X-Absent", rid + 100, 10);
    char tiny[2];
    int e = http_req_header(req, "X-Request-Id", tiny, sizeof(tiny));
    size_t len = 0;
    http_req_body(req, &len);
    json_t *j =
        json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:s}", "content_type", a > 0 ? ct : "",
                  "authorization", b > 0 ? auth : "", "request_id", c > 0 ? rid : "", "absent_rc",
                  d, "tiny_rc", e, "ct_rc", a, "auth_rc", b, "rid_rc", c, "body_len", (int)len,
                  "method", http_method_str(http_req_method(req)));
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}

static void h_json(struct http_req *req, void *ud)
{
    (void)ud;
    json_t *j = NULL;
    if (http_req_json(req, &j) != 0) return;
    json_t *r = json_pack("{s:O}", "got", j);
    http_respond_json(req, 201, r, NULL, 0);
    json_decref(r);
    json_decref(j);
}

/* A body far larger than the socket buffers: the server buffers what the kernel refuses. */
#define BIG_LEN (3u << 20)
static void h_big(struct http_req *req, void *ud)
{
    (void)ud;
    char *b = malloc(BIG_LEN);
    for (size_t i = 0; i < BIG_LEN; i++) b[i] = (char)('a' + i % 26);
    http_respond(req, 200, "application/octet-stream", b, BIG_LEN, NULL, 0);
    free(b);
}

static void h_silent(struct http_req *req, void *ud)
{
    (void)req;
    (void)ud;
}

static void h_bad_header(struct http_req *req, void *ud)
{
    (void)ud;
    struct http_header bad[] = {{"X-Evil", "a\r\nInjected: 1"}};
    struct http_header reserved[] = {{"Content-Length", "5"}};
    int a = http_respond(req, 200, "text/plain", "x", 1, bad, 1);
    int b = http_respond(req, 200, "text/plain", "x", 1, reserved, 1);
    int c = http_respond(req, 42, "text/plain", "x", 1, NULL, 0);
    char msg[64];
    snprintf(msg, sizeof(msg), "%d %d %d", a, b, c);
    http_respond(req, 200, "text/plain", msg, strlen(msg), NULL, 0);
    /* A second answer is refused. */
    ck_assert_int_eq(http_respond(req, 200, NULL, "y", 1, NULL, 0), ERR_INVAL);
}

/* Streaming: the handler defers and a producer thread writes. */
struct producer {
    struct http_stream *s;
    int mode; /* 0 chunked text, 1 SSE until cancelled, 2 whole deferred response, 3 hold */
    int n_events;
    atomic_int cancel_cb;
    atomic_int saw_cancel; /* the producer got ERR_CANCELLED */
    atomic_int done;
    atomic_int release; /* mode 3: end the stream when set */
    int end_rc;
    pthread_t th;
};

static struct producer prod;

static void *producer_main(void *arg)
{
    struct producer *p = arg;
    int rc = 0;
    switch (p->mode) {
    case 0:
        rc = http_stream_begin(p->s, 200, "text/plain", NULL, 0);
        for (int i = 0; i < 100 && rc == 0; i++) {
            char line[32];
            int n = snprintf(line, sizeof(line), "line %d\n", i);
            rc = http_stream_write(p->s, line, (size_t)n, 5000);
        }
        /* A large write in many pieces forces the queue bound and back-pressure. */
        static char big[200000];
        memset(big, 'x', sizeof(big));
        for (size_t off = 0; off < sizeof(big) && rc == 0; off += 50000)
            rc = http_stream_write(p->s, big + off, 50000, 5000);
        p->end_rc = http_stream_end(p->s);
        break;
    case 1:
        rc = http_stream_begin(p->s, 200, "text/event-stream", NULL, 0);
        for (int i = 0; rc == 0; i++) {
            char data[64];
            snprintf(data, sizeof(data), "{\"n\":%d}\nsecond line", i);
            rc = http_stream_sse(p->s, i == 0 ? "first" : NULL, data, 1000);
            if (rc == ERR_AGAIN) rc = 0;
            if (rc == 0) p->n_events++;
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            if (i > 100000) break;
        }
        if (rc == ERR_CANCELLED) p->saw_cancel = 1;
        ck_assert(http_stream_cancelled(p->s));
        p->end_rc = http_stream_end(p->s);
        break;
    case 2: {
        struct http_header h = {"X-From", "producer"};
        p->end_rc =
            http_stream_respond(p->s, 202, "application/json", "{\"late\":true}", 13, &h, 1);
        break;
    }
    case 3:
        rc = http_stream_begin(p->s, 200, "text/event-stream", NULL, 0);
        if (rc == 0) rc = http_stream_sse(p->s, NULL, "hello", 0);
        while (!p->release && !http_stream_cancelled(p->s)) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        if (http_stream_cancelled(p->s)) p->saw_cancel = 1;
        if (!p->saw_cancel) http_stream_sse(p->s, NULL, "bye", 1000);
        p->end_rc = http_stream_end(p->s);
        break;
    }
    p->done = 1;
    return NULL;
}

static void on_cancel(void *ud)
{
    struct producer *p = ud;
    p->cancel_cb++;
}

static void start_producer(struct http_req *req, int mode)
{
    prod.s = http_req_defer(req);
    ck_assert_ptr_nonnull(prod.s);
    prod.mode = mode;
    http_stream_on_cancel(prod.s, on_cancel, &prod);
    ck_assert_int_eq(pthread_create(&prod.th, NULL, producer_main, &prod), 0);
}

static void h_chunked(struct http_req *req, void *ud)
{
    start_producer(req, (int)(intptr_t)ud);
}

static void h_sse_inline(struct http_req *req, void *ud)
{
    (void)ud;
    /* A stream begun, written and ended entirely on the service thread. */
    struct http_stream *s = http_req_defer(req);
    ck_assert_int_eq(http_stream_begin(s, 200, "text/event-stream", NULL, 0), 0);
    ck_assert_int_eq(http_stream_sse(s, "message", "a\r\nb\rc", 0), 0);
    ck_assert_int_eq(http_stream_sse(s, NULL, "[DONE]", 0), 0);
    ck_assert_int_eq(http_stream_sse(s, "bad\nname", "x", 0), ERR_INVAL);
    ck_assert_int_eq(http_stream_end(s), 0);
}

/* Many concurrent streams, each fed by its own producer thread. */
#define N_STREAMS 16
#define N_EVENTS  200
static pthread_t multi_th[N_STREAMS];
static atomic_int multi_n;

static void *multi_producer(void *arg)
{
    struct http_stream *s = arg;
    int rc = http_stream_begin(s, 200, "text/event-stream", NULL, 0);
    for (int i = 0; i < N_EVENTS && rc == 0; i++) {
        char data[32];
        snprintf(data, sizeof(data), "%d", i);
        rc = http_stream_sse(s, NULL, data, 5000);
    }
    http_stream_end(s);
    return NULL;
}

static void h_multi(struct http_req *req, void *ud)
{
    (void)ud;
    int k = atomic_fetch_add(&multi_n, 1);
    struct http_stream *s = http_req_defer(req);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_lt(k, N_STREAMS);
    ck_assert_int_eq(pthread_create(&multi_th[k], NULL, multi_producer, s), 0);
}

static const struct http_route routes[] = {
    {HTTP_GET, "/hello", h_hello, NULL},
    {HTTP_GET, "/echo", h_echo, NULL},
    {HTTP_POST, "/echo", h_echo, NULL},
    {HTTP_PUT, "/echo", h_echo, NULL},
    {HTTP_POST, "/json", h_json, NULL},
    {HTTP_GET, "/silent", h_silent, NULL},
    {HTTP_GET, "/big", h_big, NULL},
    {HTTP_GET, "/multi", h_multi, NULL},
    {HTTP_GET, "/badheader", h_bad_header, NULL},
    {HTTP_GET, "/chunked", h_chunked, (void *)0},
    {HTTP_GET, "/sse", h_chunked, (void *)1},
    {HTTP_GET, "/late", h_chunked, (void *)2},
    {HTTP_GET, "/hold", h_chunked, (void *)3},
    {HTTP_GET, "/inline", h_sse_inline, NULL},
};

static void server_start_cfg(struct http_server_cfg *cfg)
{
    memset(&prod, 0, sizeof(prod));
    ck_assert_int_eq(http_server_start(cfg, routes, sizeof(routes) / sizeof(routes[0]), &srv), 0);
    port = http_server_port(srv);
    ck_assert_int_gt(port, 0);
}

static void setup(void)
{
    log_setup("test", LOG_ERROR, LOG_FORMAT_TEXT);
    signal(SIGPIPE, SIG_IGN);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.max_body_bytes = 1000;
    cfg.stream_queue_bytes = 64 * 1024;
    cfg.request_timeout_s = 2;
    cfg.header_timeout_s = 2;
    cfg.name = "test";
    server_start_cfg(&cfg);
}

static void teardown(void)
{
    http_server_free(srv);
    srv = NULL;
    if (prod.s) pthread_join(prod.th, NULL);
}

/* Asserts an early error answer: `status`, the OpenAI error shape as application/json, and
 * "Connection: close". */
static void assert_error_answer(const struct tresp *r, int status)
{
    ck_assert_int_eq(r->status, status);
    ck_assert_str_eq(tresp_header(r, "content-type"), "application/json");
    ck_assert(r->closed);
    json_t *j = json_loads(r->body, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", r->body);
    json_t *e = json_object_get(j, "error");
    ck_assert(json_is_object(e));
    ck_assert(json_is_string(json_object_get(e, "message")));
    ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    ck_assert(json_is_null(json_object_get(e, "param")));
    ck_assert(json_is_null(json_object_get(e, "code")));
    json_decref(j);
}

/* Sends `req` on a new connection; reads exactly one response into *out, then asserts that the
 * server closes the connection without sending anything more. */
static void tc_exchange_once(const char *req, size_t len, struct tresp *out)
{
    int fd = tc_connect(port);
    ck_assert_int_ge(fd, 0);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    ck_assert(tc_send(fd, req, len));
    ck_assert_msg(tc_read_response(rd, out), "no response to: %.60s", req);
    ck_assert_msg(rd->off == rd->len, "bytes after the response to: %.60s", req);
    ck_assert_msg(tc_wait_closed(fd), "connection not closed after: %.60s", req);
    free(rd);
    close(fd);
}

/* Sends `req` on a new connection; reads exactly one response into *out, then asserts that the
 * connection carries on: a next request on it is answered. */
static void tc_exchange_keep(const char *req, size_t len, struct tresp *out)
{
    int fd = tc_connect(port);
    ck_assert_int_ge(fd, 0);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    ck_assert(tc_send(fd, req, len));
    ck_assert_msg(tc_read_response(rd, out), "no response to: %.60s", req);
    ck_assert_msg(!out->closed, "connection closed after: %.60s", req);
    const char *next = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, next, strlen(next)));
    struct tresp r;
    ck_assert_msg(tc_read_response(rd, &r), "no second response after: %.60s", req);
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    free(rd);
    close(fd);
}

static void assert_still_serving(void)
{
    struct tresp r;
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
}

/* ---- Tests ------------------------------------------------------------------------------------- */

START_TEST(test_http_server_routes_and_headers)
{
    struct tresp r;
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "hello\n");
    ck_assert_str_eq(tresp_header(&r, "content-type"), "text/plain");
    ck_assert_str_eq(tresp_header(&r, "retry-after"), "7");
    ck_assert_str_eq(tresp_header(&r, "x-custom"), "yes");
    ck_assert_str_eq(tresp_header(&r, "content-length"), "6");
    tresp_fini(&r);

    /* Query strings do not take part in routing. */
    ck_assert(tc_get(port, "/hello?x=1&y=2", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);

    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                      "Authorization: Bearer s3cret\r\nX-Request-Id: abc-123\r\n"
                      "Content-Length: 5\r\n\r\nhello";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "content_type")), "application/json");
    ck_assert_str_eq(json_string_value(json_object_get(j, "authorization")), "Bearer s3cret");
    ck_assert_str_eq(json_string_value(json_object_get(j, "request_id")), "abc-123");
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "POST");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "rid_rc")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "absent_rc")), ERR_NOT_FOUND);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "tiny_rc")), ERR_TOO_BIG);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "body_len")), 5);
    json_decref(j);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_404_405)
{
    struct tresp r;
    ck_assert(tc_get(port, "/nope", &r));
    ck_assert_int_eq(r.status, 404);
    ck_assert_ptr_nonnull(strstr(r.body, "\"error\""));
    tresp_fini(&r);

    const char *req = "DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(tresp_header(&r, "allow"), "GET, POST, PUT");
    tresp_fini(&r);

    /* A wrong method with a body: answered, then closed (the body is not read into memory). */
    req = "POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(tresp_header(&r, "allow"), "GET");
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_body_limit_413)
{
    struct tresp r;
    /* Declared too large: answered at once, without the body ever being sent. */
    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n";
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    ck_assert(tc_send(fd, req, strlen(req)));
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 413);
    ck_assert(r.closed);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(fd)); /* closed after the linger period, not after 100 MB */
    close(fd);
    free(rd);

    /* Exactly at the limit is fine; one byte over is not. */
    char big[1200];
    memset(big, 'a', sizeof(big));
    char head[128];
    for (int n = 1000; n <= 1001; n++) {
        int hl = snprintf(head, sizeof(head),
                          "PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n", n);
        char *full = malloc((size_t)hl + (size_t)n);
        memcpy(full, head, (size_t)hl);
        memcpy(full + hl, big, (size_t)n);
        ck_assert(tc_roundtrip(port, full, (size_t)hl + (size_t)n, &r));
        ck_assert_int_eq(r.status, n == 1000 ? 200 : 413);
        tresp_fini(&r);
        free(full);
    }
    /* Invalid Content-Length values. */
    static const char *const bad[] = {"abc", "-1", "1 2", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char q[256];
        int n = snprintf(q, sizeof(q),
                         "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %s\r\n\r\n", bad[i]);
        struct tresp rr;
        bool ok = tc_roundtrip(port, q, (size_t)n, &rr);
        ck_assert(ok);
        ck_assert_int_eq(rr.status, 400);
        tresp_fini(&rr);
    }
    /* A chunked upload is decoded (more in test_http_server_chunked_body). */
    req = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
          "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"body_len\":5"));
    tresp_fini(&r);
    /* The server still serves. */
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_json_400)
{
    struct tresp r;
    const char *req = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\n{\"a\": 1,}";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 400);
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    ck_assert_ptr_nonnull(msg);
    ck_assert_msg(strstr(msg, "invalid JSON at line 1") != NULL, "%s", msg);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                     "invalid_request_error");
    json_decref(j);
    tresp_fini(&r);

    req = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n[1]";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 400);
    tresp_fini(&r);

    req = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"; /* empty body */
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 400);
    tresp_fini(&r);

    req = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 8\r\n\r\n{\"a\":[]}";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 201);
    ck_assert_str_eq(r.body, "{\"got\":{\"a\":[]}}");
    ck_assert_str_eq(tresp_header(&r, "content-type"), "application/json");
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_handler_errors)
{
    struct tresp r;
    ck_assert(tc_get(port, "/silent", &r));
    ck_assert_int_eq(r.status, 500);
    tresp_fini(&r);
    ck_assert(tc_get(port, "/badheader", &r));
    ck_assert_int_eq(r.status, 200);
    char want[64];
    snprintf(want, sizeof(want), "%d %d %d", ERR_INVAL, ERR_INVAL, ERR_INVAL);
    ck_assert_str_eq(r.body, want);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_keep_alive)
{
    /* Several requests on one connection, with a length or chunked, each answered in turn; the
     * connection stays open until the client says "Connection: close". */
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    for (int i = 0; i < 6; i++) {
        const char *req = i % 2 ? "GET /inline HTTP/1.1\r\nHost: t\r\n\r\n"
                                : "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
        ck_assert(tc_send(fd, req, strlen(req)));
        struct tresp r;
        ck_assert(tc_read_response(rd, &r));
        ck_assert_int_eq(r.status, 200);
        ck_assert(!r.closed);
        ck_assert_ptr_nonnull(tresp_header(&r, "date"));
        if (i % 2) {
            ck_assert(r.chunked);
            ck_assert_str_eq(r.body,
                             "event: message\ndata: a\ndata: b\ndata: c\n\ndata: [DONE]\n\n");
            ck_assert_str_eq(tresp_header(&r, "content-type"), "text/event-stream");
            ck_assert_str_eq(tresp_header(&r, "cache-control"), "no-cache");
        } else {
            ck_assert_str_eq(r.body, "hello\n");
        }
        tresp_fini(&r);
    }
    const char *last = "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    ck_assert(tc_send(fd, last, strlen(last)));
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert(r.closed);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(fd));
    free(rd);
    close(fd);
    for (int i = 0; i < 100 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
}
END_TEST

START_TEST(test_http_server_keep_alive_limits)
{
    /* A bound on requests per connection, and an idle timeout. */
    http_server_free(srv);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.max_requests_per_conn = 3;
    cfg.idle_timeout_s = 1;
    cfg.name = "test";
    server_start_cfg(&cfg);
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    for (int i = 0; i < 3; i++) {
        const char *req = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
        ck_assert(tc_send(fd, req, strlen(req)));
        struct tresp r;
        ck_assert(tc_read_response(rd, &r));
        ck_assert_int_eq(r.status, 200);
        ck_assert_msg(r.closed == (i == 2), "request %d: closed %d", i, r.closed);
        tresp_fini(&r);
    }
    ck_assert(tc_wait_closed(fd));
    close(fd);
    /* Idle: closed by the server after about a second, without an answer. */
    fd = tc_connect(port);
    memset(rd, 0, sizeof(*rd));
    rd->fd = fd;
    const char *req = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert(!r.closed);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(fd));
    close(fd);
    free(rd);
}
END_TEST

START_TEST(test_http_server_head_and_options)
{
    /* HEAD runs the GET route and sends its head only; the connection carries on. */
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    const char *req =
        "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    char line[256];
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "HTTP/1.1 200 OK");
    bool len6 = false;
    while (trd_line(rd, line, sizeof(line)) && line[0])
        if (strcasecmp(line, "Content-Length: 6") == 0) len6 = true;
    ck_assert(len6);
    struct tresp r;
    ck_assert(tc_read_response(rd, &r)); /* the next answer follows the head at once */
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "hello\n");
    tresp_fini(&r);
    free(rd);
    close(fd);

    /* OPTIONS: 204 with Allow for a routed path, "*" lists every method, unknown paths 404. */
    req = "OPTIONS /echo HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 204);
    ck_assert_str_eq(tresp_header(&r, "allow"), "GET, POST, PUT");
    ck_assert_ptr_null(tresp_header(&r, "access-control-allow-origin")); /* no CORS configured */
    tresp_fini(&r);
    req = "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 204);
    ck_assert_str_eq(tresp_header(&r, "allow"), "GET, POST, PUT");
    tresp_fini(&r);
    req = "OPTIONS /nope HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 404);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_large_response_delivered_before_close)
{
    struct tresp r;
    ck_assert(tc_get(port, "/big", &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, BIG_LEN);
    for (size_t i = 0; i < BIG_LEN; i += 4099) ck_assert_int_eq(r.body[i], 'a' + (int)(i % 26));
    ck_assert_int_eq(r.body[BIG_LEN - 1], 'a' + (int)((BIG_LEN - 1) % 26));
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_chunked_from_thread)
{
    struct tresp r;
    ck_assert(tc_get(port, "/chunked", &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert(r.chunked);
    ck_assert_ptr_null(tresp_header(&r, "content-length"));
    ck_assert_uint_eq(r.body_len, 790 + 200000); /* "line 0\n".."line 99\n" + 200000 x */
    ck_assert(strncmp(r.body, "line 0\nline 1\n", 14) == 0);
    ck_assert_int_eq(r.body[r.body_len - 1], 'x');
    tresp_fini(&r);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.end_rc, 0);
    ck_assert_int_eq(prod.cancel_cb, 0);
}
END_TEST

START_TEST(test_http_server_deferred_whole_response)
{
    struct tresp r;
    ck_assert(tc_get(port, "/late", &r));
    ck_assert_int_eq(r.status, 202);
    ck_assert_str_eq(r.body, "{\"late\":true}");
    ck_assert_str_eq(tresp_header(&r, "x-from"), "producer");
    tresp_fini(&r);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.end_rc, 0);
}
END_TEST

START_TEST(test_http_server_sse_disconnect_detected)
{
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    const char *req = "GET /sse HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    char line[512];
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "HTTP/1.1 200 OK");
    /* Read a few events' worth of lines, then hang up mid-stream. */
    int data_lines = 0;
    while (data_lines < 10 && trd_line(rd, line, sizeof(line)))
        if (strncmp(line, "data: {\"n\":", 11) == 0) data_lines++;
    ck_assert_int_eq(data_lines, 10);
    close(fd);
    free(rd);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.saw_cancel, 1);
    ck_assert_int_eq(prod.cancel_cb, 1);
    ck_assert_int_eq(prod.end_rc, ERR_CANCELLED);
    ck_assert_int_ge(prod.n_events, 10);
    /* Nothing is left in flight and the server keeps serving. */
    for (int i = 0; i < 100 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
    struct tresp r;
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
}
END_TEST

#define N_CONC 64

START_TEST(test_http_server_many_concurrent_connections)
{
    int fds[N_CONC];
    for (int i = 0; i < N_CONC; i++) {
        fds[i] = tc_connect(port);
        ck_assert_int_ge(fds[i], 0);
    }
    /* Every connection sends its request before any response is read. */
    for (int i = 0; i < N_CONC; i++) {
        char req[128];
        int n = snprintf(req, sizeof(req),
                         "GET /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: r%d\r\n\r\n", i);
        ck_assert(tc_send(fds[i], req, (size_t)n));
    }
    struct trd *rd = calloc(1, sizeof(*rd));
    for (int i = N_CONC - 1; i >= 0; i--) {
        memset(rd, 0, sizeof(*rd));
        rd->fd = fds[i];
        struct tresp r;
        ck_assert(tc_read_response(rd, &r));
        ck_assert_int_eq(r.status, 200);
        char want[32];
        snprintf(want, sizeof(want), "\"request_id\":\"r%d\"", i);
        ck_assert_msg(strstr(r.body, want) != NULL, "%s", r.body);
        tresp_fini(&r);
        close(fds[i]);
    }
    free(rd);
}
END_TEST

START_TEST(test_http_server_concurrent_streams_from_threads)
{
    atomic_store(&multi_n, 0);
    int fds[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        fds[i] = tc_connect(port);
        const char *req = "GET /multi HTTP/1.1\r\nHost: t\r\n\r\n";
        ck_assert(tc_send(fds[i], req, strlen(req)));
    }
    struct trd *rd = calloc(1, sizeof(*rd));
    for (int i = 0; i < N_STREAMS; i++) {
        memset(rd, 0, sizeof(*rd));
        rd->fd = fds[i];
        struct tresp r;
        ck_assert(tc_read_response(rd, &r));
        ck_assert_int_eq(r.status, 200);
        /* Every event, in order, nothing interleaved from another stream. */
        const char *p = r.body;
        for (int e = 0; e < N_EVENTS; e++) {
            char want[32];
            int n = snprintf(want, sizeof(want), "data: %d\n\n", e);
            ck_assert_msg(strncmp(p, want, (size_t)n) == 0, "stream %d event %d", i, e);
            p += n;
        }
        ck_assert_int_eq(*p, 0);
        tresp_fini(&r);
        close(fds[i]);
    }
    free(rd);
    ck_assert_int_eq(atomic_load(&multi_n), N_STREAMS);
    for (int i = 0; i < N_STREAMS; i++) pthread_join(multi_th[i], NULL);
}
END_TEST

START_TEST(test_http_server_deferred_outlives_request_timeout)
{
    /* A deferred answer may take longer than request_timeout_s (2 s here): generation is slow. */
    int fd = tc_connect(port);
    const char *req = "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    sleep(4);
    ck_assert(!http_stream_cancelled(prod.s));
    prod.release = 1;
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "data: hello\n\ndata: bye\n\n");
    tresp_fini(&r);
    free(rd);
    close(fd);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.end_rc, 0);
}
END_TEST

START_TEST(test_http_server_slowloris_does_not_block)
{
    /* Several connections send part of a request head, one a part of a body, and stall. */
    int slow[4];
    for (int i = 0; i < 4; i++) {
        slow[i] = tc_connect(port);
        const char *part = i < 3
                               ? "GET /hello HTTP/1.1\r\nHost: t\r\nX-Slow: "
                               : "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nab";
        ck_assert(tc_send(slow[i], part, strlen(part)));
    }
    /* A normal request is served meanwhile. */
    struct tresp r;
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    /* The stalled ones are closed by the header and request timeouts (2 s here; the client waits
     * up to 10 s). */
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(tc_wait_closed(slow[i]), "slow connection %d not closed", i);
        close(slow[i]);
    }
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_malformed_input_survives)
{
    static const char *const junk[] = {
        "\x00\x01\x02\x03\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost t\r\n\r\n",
        "GET /hello HTTP/1.1\r\n: novalue\r\n\r\n",
        "GET /%zz%00 HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /../../etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n",
        "BREW /hello HTTP/1.1\r\nHost: t\r\n\r\n",
        "\r\n\r\n\r\n\r\n",
        "GET /hello HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    };
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        struct tresp r;
        size_t n = i == 0 ? 8 : strlen(junk[i]);
        if (tc_roundtrip(port, junk[i], n, &r)) {
            ck_assert_msg(r.status >= 400 || r.status == 200, "junk %zu -> %d", i, r.status);
            tresp_fini(&r);
        }
    }
    /* An over-long header line. */
    size_t big = 70000;
    char *req = malloc(big + 64);
    int hl = snprintf(req, 64, "GET /hello HTTP/1.1\r\nX-Big: ");
    memset(req + hl, 'a', big);
    memcpy(req + hl + big, "\r\n\r\n", 4);
    struct tresp r;
    if (tc_roundtrip(port, req, (size_t)hl + big + 4, &r)) {
        ck_assert_int_ge(r.status, 400);
        tresp_fini(&r);
    }
    free(req);
    ck_assert(tc_get(port, "/hello", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_pipelining_in_order)
{
    /* Requests sent back to back in one write, bodies included, are answered in order. */
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    char all[16384];
    size_t n = 0;
    for (int i = 0; i < 40; i++) {
        int w = i % 3 == 1 ? snprintf(all + n, sizeof(all) - n,
                                      "POST /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: r%d\r\n"
                                      "Content-Length: 5\r\n\r\nhello",
                                      i)
                : i % 3 == 2
                    ? snprintf(all + n, sizeof(all) - n,
                               "PUT /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: r%d\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                               i)
                    : snprintf(all + n, sizeof(all) - n,
                               "GET /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: r%d\r\n\r\n", i);
        n += (size_t)w;
    }
    ck_assert(tc_send(fd, all, n));
    for (int i = 0; i < 40; i++) {
        struct tresp r;
        ck_assert_msg(tc_read_response(rd, &r), "response %d", i);
        ck_assert_int_eq(r.status, 200);
        char want[64];
        snprintf(want, sizeof(want), "\"request_id\":\"r%d\"", i);
        ck_assert_msg(strstr(r.body, want) != NULL, "%d: %s", i, r.body);
        snprintf(want, sizeof(want), "\"body_len\":%d", i % 3 == 1 ? 5 : i % 3 == 2 ? 3 : 0);
        ck_assert_msg(strstr(r.body, want) != NULL, "%d: %s", i, r.body);
        tresp_fini(&r);
    }
    /* Behind a deferred (streamed) answer: served after it, in order. */
    const char *two = "GET /hold HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, two, strlen(two)));
    usleep(100000);
    prod.release = 1;
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "data: hello\n\ndata: bye\n\n");
    tresp_fini(&r);
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "hello\n");
    tresp_fini(&r);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.end_rc, 0);
    /* Junk after a body: the request is answered, then the junk gets a 400 and the close. */
    const char *junk = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}<junk>\r\n";
    ck_assert(tc_send(fd, junk, strlen(junk)));
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 201);
    tresp_fini(&r);
    ck_assert(tc_read_response(rd, &r));
    assert_error_answer(&r, 400);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(fd));
    free(rd);
    close(fd);
    for (int i = 0; i < 100 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
}
END_TEST

START_TEST(test_http_server_empty_post_body)
{
    /* An explicit "Content-Length: 0": the handler runs with an empty body; keep-alive goes on. */
    struct tresp r;
    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "body_len")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "POST");
    json_decref(j);
    tresp_fini(&r);

    /* The handler's own 400 for an empty JSON body (the body was read: the connection goes on). */
    req = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 400);
    ck_assert_ptr_nonnull(strstr(r.body, "invalid JSON"));
    tresp_fini(&r);

    /* Answers before any handler: wrong method (with Allow), unknown path; with no body left to
     * read, the connection goes on. */
    req = "POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(tresp_header(&r, "allow"), "GET");
    tresp_fini(&r);
    req = "POST /nope HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 404);
    tresp_fini(&r);

    /* PUT with an empty body and a GET saying 0. */
    req = "PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"body_len\":0"));
    tresp_fini(&r);
    req = "GET /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);

    /* Malformed lengths: always a 400, and the close (the framing is unknown). */
    static const char *const bad[] = {"abc", "0x10", "-1", "1 2", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char q[256];
        int n = snprintf(q, sizeof(q),
                         "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %s\r\n\r\n", bad[i]);
        tc_exchange_once(q, (size_t)n, &r);
        assert_error_answer(&r, 400);
        ck_assert_ptr_nonnull(strstr(r.body, "Content-Length"));
        tresp_fini(&r);
    }
    for (int i = 0; i < 100 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
    assert_still_serving();
}
END_TEST

START_TEST(test_http_server_chunked_body)
{
    /* Decoded: sizes in either case, extensions and trailers dropped; the connection goes on. */
    static const char *const ok[] = {
        "POST /json HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        "4\r\n{\"a\"\r\n4;ext=1;x\r\n:[1]\r\n1 ; e=\"q\"\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n",
        "POST /json HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n"
        "9\r\n{\"a\":[1]}\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct tresp r;
        tc_exchange_keep(ok[i], strlen(ok[i]), &r);
        ck_assert_int_eq(r.status, 201);
        ck_assert_msg(strcmp(r.body, "{\"got\":{\"a\":[1]}}") == 0 ||
                          strcmp(r.body, "{\"got\":{\"a\":[1] }}") == 0,
                      "%s", r.body);
        tresp_fini(&r);
    }
    /* Sent a byte at a time: the decoder is incremental. */
    const char *slow = "PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
    int fd = tc_connect(port);
    for (const char *p = slow; *p; p++) ck_assert(tc_send(fd, p, 1));
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"body_len\":19"));
    tresp_fini(&r);
    free(rd);
    close(fd);

    /* Over the body limit (1000 here), by one chunk or by their sum: 413, then closed. */
    char big[2048];
    int n = snprintf(big, sizeof(big),
                     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n");
    ck_assert(n > 0);
    tc_exchange_once(big, (size_t)n, &r);
    assert_error_answer(&r, 413);
    tresp_fini(&r);
    n = snprintf(big, sizeof(big),
                 "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1f4\r\n");
    memset(big + n, 'x', 500);
    n += 500;
    n += snprintf(big + n, sizeof(big) - (size_t)n, "\r\n1f5\r\n");
    tc_exchange_once(big, (size_t)n, &r);
    assert_error_answer(&r, 413);
    tresp_fini(&r);

    /* Malformed chunk sizes and framing: 400, then closed. */
    static const char *const bad[] = {
        "zz\r\nab\r\n0\r\n\r\n",            /* not hex */
        "-1\r\n",                           /* sign */
        "\r\n",                             /* empty size */
        "ffffffffffffffffff\r\n",           /* overflows 64 bits */
        "3\nabc\r\n0\r\n\r\n",              /* bare LF */
        "3\r\nabcd\r\n0\r\n\r\n",           /* data longer than its size */
        "3x\r\nabc\r\n0\r\n\r\n",           /* junk after the size */
        "3\r\nabc\r\n0\r\nBad\x01\r\n\r\n", /* control character in a trailer */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = snprintf(big, sizeof(big),
                     "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n%s",
                     bad[i]);
        tc_exchange_once(big, (size_t)n, &r);
        assert_error_answer(&r, 400);
        ck_assert_msg(strstr(r.body, "chunk") != NULL, "%zu: %s", i, r.body);
        tresp_fini(&r);
    }
    /* Framings refused before the body: both at once (a smuggling shape), another coding,
     * chunked not last, Transfer-Encoding with HTTP/1.0. */
    static const struct {
        const char *req;
        int status;
    } refused[] = {
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
         "\r\n0\r\n\r\n",
         400},
        {"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n"
         "0\r\n\r\n",
         501},
        {"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501},
        {"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
         "chunked\r\n\r\n",
         501},
        {"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        tc_exchange_once(refused[i].req, strlen(refused[i].req), &r);
        ck_assert_int_eq(r.status, refused[i].status);
        ck_assert(r.closed);
        ck_assert_ptr_nonnull(strstr(r.body, "Transfer-Encoding"));
        tresp_fini(&r);
    }
    for (int i = 0; i < 100 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
    assert_still_serving();
}
END_TEST

START_TEST(test_http_server_post_without_length_411)
{
    /* A POST/PUT/PATCH head with neither Content-Length nor chunked framing: 411, whether a body
     * follows or not, then closed (what follows could be a body or a request). */
    static const char *const reqs[] = {
        "POST /json HTTP/1.1\r\nHost: t\r\n\r\n{\"prompt\":\"x\"}",
        "POST /json HTTP/1.1\r\nHost: t\r\n\r\n",
        "PUT /echo HTTP/1.1\r\nHost: t\r\n\r\nhello",
        /* What follows is never served as a second request. */
        "POST /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n",
        "POST /echo HTTP/1.0\r\n\r\nabc",
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        struct tresp r;
        tc_exchange_once(reqs[i], strlen(reqs[i]), &r);
        assert_error_answer(&r, 411);
        ck_assert_ptr_nonnull(strstr(r.body, "Content-Length"));
        tresp_fini(&r);
    }
    /* Routing answers come first: a wrong method or an unknown path say so. */
    struct tresp r;
    const char *req = "POST /hello HTTP/1.1\r\nHost: t\r\n\r\nxyz";
    tc_exchange_once(req, strlen(req), &r);
    assert_error_answer(&r, 405);
    tresp_fini(&r);
    req = "PATCH /nope HTTP/1.1\r\nHost: t\r\n\r\n";
    tc_exchange_once(req, strlen(req), &r);
    assert_error_answer(&r, 404);
    tresp_fini(&r);

    /* A client that keeps sending after the answer is read and dropped until it stops. */
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    req = "POST /echo HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    ck_assert(tc_read_response(rd, &r));
    assert_error_answer(&r, 411);
    tresp_fini(&r);
    char chunk[4096];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 16; i++) ck_assert(tc_send(fd, chunk, sizeof(chunk)));
    ck_assert(tc_wait_closed(fd));
    free(rd);
    close(fd);

    for (int i = 0; i < 300 && http_server_inflight(srv) != 0; i++) usleep(10000);
    ck_assert_int_eq(http_server_inflight(srv), 0);
    assert_still_serving();
}
END_TEST

/* A string literal and its length, embedded NULs included. */
#define RAW_REQ(s) s, sizeof(s) - 1

START_TEST(test_http_server_garbage_request_line_400)
{
    /* Request lines that are not HTTP/1.x (binary junk, a TLS ClientHello, a bad version) get a
     * JSON 400 at once, methods we do not serve a 501, HTTP/2 a 505: never silence. */
    static const struct {
        const char *data;
        size_t len;
        int status;
    } reqs[] = {
        {RAW_REQ("\x00\x01\x02\x03\r\n\r\n"), 400},
        {RAW_REQ("\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"), 400},
        {RAW_REQ("GET\r\n\r\n"), 400},
        {RAW_REQ("GET /hello\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1 extra\r\n\r\n"), 400},
        {RAW_REQ("GET  /hello HTTP/1.1\r\n\r\n"), 400},
        {RAW_REQ("GET /hello http/1.1\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\nHost: t\n\n"), 400},
        {RAW_REQ("HELLO\r\n\r\n"), 400},
        {RAW_REQ("hello"), 400}, /* no line end at all: the token alone decides */
        {RAW_REQ("GARBAGE / HTTP/1.1\r\nHost: t\r\n\r\n"), 501},
        {RAW_REQ("BREW /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"), 501},
        {RAW_REQ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n"), 501},
        {RAW_REQ("GET /hello HTTP/2.0\r\nHost: t\r\n\r\n"), 505},
        {RAW_REQ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505},
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        struct tresp r;
        tc_exchange_once(reqs[i].data, reqs[i].len, &r);
        ck_assert_msg(r.status == reqs[i].status, "%zu: %d", i, r.status);
        ck_assert(r.closed);
        ck_assert_str_eq(tresp_header(&r, "content-type"), "application/json");
        ck_assert_ptr_nonnull(strstr(r.body, "\"error\""));
        tresp_fini(&r);
        assert_still_serving(); /* and the next connection is plain HTTP again */
    }
}
END_TEST

START_TEST(test_http_server_expect_continue)
{
    /* "Expect: 100-continue": the interim answer comes before the body is sent. */
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    const char *head = "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                       "Content-Length: 5\r\n\r\n";
    ck_assert(tc_send(fd, head, strlen(head)));
    char line[256];
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "HTTP/1.1 100 Continue");
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "");
    ck_assert(tc_send(fd, "hello", 5));
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"body_len\":5"));
    ck_assert(!r.closed);
    tresp_fini(&r);
    /* Chunked, same. */
    head = "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-Continue\r\n"
           "Transfer-Encoding: chunked\r\n\r\n";
    ck_assert(tc_send(fd, head, strlen(head)));
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "HTTP/1.1 100 Continue");
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert(tc_send(fd, "2\r\nab\r\n0\r\n\r\n", 12));
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"body_len\":2"));
    tresp_fini(&r);
    free(rd);
    close(fd);

    /* Refused without the body ever being sent: the final answer instead of 100, then closed. */
    const char *reqs[] = {
        "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
        "POST /nope HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    };
    int want[] = {413, 404};
    for (int i = 0; i < 2; i++) {
        tc_exchange_once(reqs[i], strlen(reqs[i]), &r);
        assert_error_answer(&r, want[i]);
        tresp_fini(&r);
    }
    /* Any other expectation: 417. */
    const char *other =
        "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: coffee\r\nContent-Length: 1\r\n\r\nx";
    tc_exchange_once(other, strlen(other), &r);
    assert_error_answer(&r, 417);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_http10)
{
    /* HTTP/1.0: a length-framed answer, then closed, unless the client asked for keep-alive. */
    struct tresp r;
    const char *req = "GET /hello HTTP/1.0\r\n\r\n";
    tc_exchange_once(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(tresp_header(&r, "content-length"), "6");
    tresp_fini(&r);
    req = "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    for (int i = 0; i < 2; i++) {
        ck_assert(tc_send(fd, req, strlen(req)));
        ck_assert(tc_read_response(rd, &r));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(tresp_header(&r, "connection"), "keep-alive");
        tresp_fini(&r);
    }
    /* A streamed answer to HTTP/1.0 is never chunked: the end of the connection frames it, even
     * on a keep-alive connection. */
    const char *sse = "GET /inline HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    ck_assert(tc_send(fd, sse, strlen(sse)));
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert(r.closed);
    ck_assert(!r.chunked);
    ck_assert_ptr_null(tresp_header(&r, "content-length"));
    tresp_fini(&r);
    char rest[256];
    size_t n = rd->len - rd->off;
    memcpy(rest, rd->buf + rd->off, n);
    for (ssize_t k; n < sizeof(rest) - 1 && (k = recv(fd, rest + n, sizeof(rest) - 1 - n, 0)) > 0;)
        n += (size_t)k;
    rest[n] = 0;
    ck_assert_str_eq(rest, "event: message\ndata: a\ndata: b\ndata: c\n\ndata: [DONE]\n\n");
    free(rd);
    close(fd);
}
END_TEST

START_TEST(test_http_server_cors)
{
    http_server_free(srv);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.allowed_origins = "https://app.example.com, http://localhost:3000";
    cfg.name = "test";
    server_start_cfg(&cfg);
    struct tresp r;
    /* An allowed origin: the answer names it (and varies on it). */
    const char *req = "GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: http://localhost:3000\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-origin"), "http://localhost:3000");
    ck_assert_str_eq(tresp_header(&r, "vary"), "Origin");
    tresp_fini(&r);
    /* Errors and streams carry it too. */
    req = "GET /nope HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example.com\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-origin"), "https://app.example.com");
    tresp_fini(&r);
    req = "GET /inline HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example.com\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert(r.chunked);
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-origin"), "https://app.example.com");
    tresp_fini(&r);
    /* Another origin, or none: no CORS headers. */
    req = "GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: https://evil.example.com\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(tresp_header(&r, "access-control-allow-origin"));
    tresp_fini(&r);
    /* A preflight: 204 with the methods of the path and the headers asked for. */
    req = "OPTIONS /echo HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example.com\r\n"
          "Access-Control-Request-Method: POST\r\n"
          "Access-Control-Request-Headers: authorization, content-type\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 204);
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-origin"), "https://app.example.com");
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-methods"), "GET, POST, PUT");
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-headers"),
                     "authorization, content-type");
    ck_assert_str_eq(tresp_header(&r, "access-control-max-age"), "600");
    ck_assert_ptr_null(tresp_header(&r, "content-length"));
    tresp_fini(&r);
    /* A preflight from an origin not allowed: no grant. */
    req = "OPTIONS /echo HTTP/1.1\r\nHost: t\r\nOrigin: https://evil.example.com\r\n"
          "Access-Control-Request-Method: POST\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_int_eq(r.status, 204);
    ck_assert_ptr_null(tresp_header(&r, "access-control-allow-origin"));
    ck_assert_ptr_null(tresp_header(&r, "access-control-allow-methods"));
    tresp_fini(&r);
    http_server_free(srv);
    /* "*": any origin, answered with "*". */
    cfg.allowed_origins = "*";
    server_start_cfg(&cfg);
    req = "GET /hello HTTP/1.1\r\nHost: t\r\nOrigin: https://whoever.example\r\n\r\n";
    ck_assert(tc_roundtrip(port, req, strlen(req), &r));
    ck_assert_str_eq(tresp_header(&r, "access-control-allow-origin"), "*");
    ck_assert_ptr_null(tresp_header(&r, "vary"));
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_upgrade_refused)
{
    /* WebSocket and h2c upgrades are ignored (RFC 9110 section 7.8): a plain HTTP/1.1 answer,
     * never 101, and the connection stays HTTP/1.1 (a next request is served on it). */
    static const char *const reqs[] = {
        "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    };
    for (size_t i = 0; i < 2; i++) {
        struct tresp r;
        tc_exchange_keep(reqs[i], strlen(reqs[i]), &r);
        ck_assert_int_eq(r.status, 200);
        ck_assert_ptr_null(tresp_header(&r, "upgrade"));
        tresp_fini(&r);
    }
    /* An upgrade to an unknown path is a plain 404. */
    struct tresp r;
    const char *ws =
        "GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    tc_exchange_keep(ws, strlen(ws), &r);
    ck_assert_int_eq(r.status, 404);
    tresp_fini(&r);
}
END_TEST

START_TEST(test_http_server_header_timeout)
{
    http_server_free(srv);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.header_timeout_s = 1;
    cfg.name = "test";
    server_start_cfg(&cfg);
    /* An unfinished head gets 408 and the close; a connection that never sends is closed. */
    int part = tc_connect(port), quiet = tc_connect(port);
    const char *p = "GET /hello HTTP/1.1\r\nHost: t\r\nX-Slow: ";
    ck_assert(tc_send(part, p, strlen(p)));
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = part;
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    assert_error_answer(&r, 408);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(part));
    ck_assert(tc_wait_closed(quiet));
    close(part);
    close(quiet);
    /* A head sent a byte at a time still has to be whole within the timeout (slowloris). */
    int slow = tc_connect(port);
    const char *head = "GET /hello HTTP/1.1\r\nHost: t\r\nX-A: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    bool cut = false;
    for (size_t i = 0; head[i]; i++) {
        if (!tc_send(slow, head + i, 1)) {
            cut = true;
            break;
        }
        usleep(100000);
        struct pollfd pf = {.fd = slow, .events = POLLIN};
        if (poll(&pf, 1, 0) == 1) {
            cut = true;
            break;
        }
    }
    ck_assert(cut);
    memset(rd, 0, sizeof(*rd));
    rd->fd = slow;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 408);
    tresp_fini(&r);
    free(rd);
    close(slow);
    assert_still_serving();
}
END_TEST

START_TEST(test_http_server_connection_limits)
{
    http_server_free(srv);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.max_connections = 8;
    cfg.max_connections_per_client = 4;
    cfg.name = "test";
    server_start_cfg(&cfg);
    /* Idle and unfinished connections fill the limits; new ones still get in, each taking the
     * place of the longest idle one (an unfinished head is told why). */
    int idle[12];
    for (int i = 0; i < 12; i++) {
        idle[i] = tc_connect(port);
        ck_assert_int_ge(idle[i], 0);
        if (i % 2) ck_assert(tc_send(idle[i], "GET /hello HTTP/1.1\r\n", 21));
        usleep(20000);
    }
    for (int i = 0; i < 5; i++) {
        struct tresp r;
        ck_assert(tc_get(port, "/hello", &r));
        ck_assert_int_eq(r.status, 200);
        tresp_fini(&r);
    }
    /* The oldest were closed to make room, the unfinished one with a 503 saying so. */
    ck_assert(tc_wait_closed(idle[0]));
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = idle[1];
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "make room"));
    tresp_fini(&r);
    for (int i = 0; i < 12; i++) close(idle[i]);
    usleep(100000);

    /* Busy connections (requests in flight) are never closed to make room: at the per-client
     * limit, a new connection gets 503 and is closed. */
    atomic_store(&multi_n, 0);
    int busy[4];
    for (int i = 0; i < 4; i++) {
        busy[i] = tc_connect(port);
        const char *req = "GET /late HTTP/1.1\r\nHost: t\r\n\r\n";
        if (i == 0) {
            ck_assert(tc_send(busy[i], "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n", 31));
            for (int k = 0; k < 200 && !prod.s; k++) usleep(5000);
        } else {
            /* Half a head: in flight only once complete, so make these complete but slow to
             * answer by keeping them in a body. */
            req = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nab";
            ck_assert(tc_send(busy[i], req, strlen(req)));
        }
    }
    usleep(100000);
    int extra = tc_connect(port);
    memset(rd, 0, sizeof(*rd));
    rd->fd = extra;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "too many connections"));
    tresp_fini(&r);
    close(extra);
    prod.release = 1;
    for (int i = 0; i < 4; i++) close(busy[i]);
    free(rd);
}
END_TEST

START_TEST(test_http_server_malformed_heads)
{
    struct tresp r;
    /* A stray CRLF after a POST body (as some clients send) is skipped, not an error. */
    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab\r\n"
                      "GET /echo HTTP/1.1\r\nHost: t\r\nX-Request-Id: second\r\n\r\n";
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    ck_assert(tc_send(fd, req, strlen(req)));
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "second"));
    tresp_fini(&r);
    close(fd);
    /* A client that half-closes after its request still gets the answer. */
    fd = tc_connect(port);
    memset(rd, 0, sizeof(*rd));
    rd->fd = fd;
    req = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    shutdown(fd, SHUT_WR);
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    ck_assert(tc_wait_closed(fd));
    close(fd);
    /* ... and one that half-closes inside its head is told so. */
    fd = tc_connect(port);
    memset(rd, 0, sizeof(*rd));
    rd->fd = fd;
    ck_assert(tc_send(fd, "GET /hello HTTP/1.1\r\nHo", 23));
    shutdown(fd, SHUT_WR);
    ck_assert(tc_read_response(rd, &r));
    assert_error_answer(&r, 400);
    tresp_fini(&r);
    close(fd);
    free(rd);
    /* Absolute-form targets are served (RFC 9112 section 3.2.2). */
    req = "GET http://t:8000/hello?x=1 HTTP/1.1\r\nHost: t\r\n\r\n";
    tc_exchange_keep(req, strlen(req), &r);
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    /* Each of these gets a JSON error and the close; the server carries on. */
    static const struct {
        const char *data;
        size_t len;
        int status;
    } bad[] = {
        {RAW_REQ("GET /%zz HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET /a%00b HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET /hello%2 HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET hello HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET * HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET http:// HTTP/1.1\r\nHost: t\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nHost : t\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nHost t\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\n: novalue\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nX-Key: a\x00junk\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nX-Key: a\rb\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nHost: t\nX: y\r\n\r\n"), 400},
        {RAW_REQ("GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400},
        {RAW_REQ("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
         400},
        {RAW_REQ("POST /echo HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello"), 400},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tc_exchange_once(bad[i].data, bad[i].len, &r);
        ck_assert_msg(r.status == bad[i].status, "%zu: %d %s", i, r.status, r.body);
        ck_assert(r.closed);
        ck_assert_ptr_nonnull(strstr(r.body, "\"error\""));
        tresp_fini(&r);
    }
    /* Over-long heads: 431, or 414 for the request line. */
    char *big = malloc(20000);
    int n = snprintf(big, 64, "GET /hello HTTP/1.1\r\nX-Big: ");
    memset(big + n, 'a', 17000);
    memcpy(big + n + 17000, "\r\n\r\n", 4);
    tc_exchange_once(big, (size_t)n + 17004, &r);
    assert_error_answer(&r, 431);
    tresp_fini(&r);
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', 17000);
    memcpy(big + 17005, " HTTP/1.1\r\n\r\n", 13);
    tc_exchange_once(big, 17018, &r);
    assert_error_answer(&r, 414);
    tresp_fini(&r);
    free(big);
    assert_still_serving();
}
END_TEST

START_TEST(test_http_server_shutdown_cancels_open_stream)
{
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    const char *req = "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    char line[256];
    while (trd_line(rd, line, sizeof(line)) && strcmp(line, "data: hello") != 0) {
    }
    ck_assert_str_eq(line, "data: hello");
    ck_assert_int_eq(http_server_inflight(srv), 1);
    /* The producer never ends on its own: the grace period runs out and the stream is cancelled. */
    ck_assert_int_eq(http_server_shutdown(srv, 200), ERR_TIMEOUT);
    ck_assert(tc_wait_closed(fd));
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.saw_cancel, 1);
    ck_assert_int_eq(prod.cancel_cb, 1);
    ck_assert_int_eq(prod.end_rc, ERR_CANCELLED);
    /* Stopped: nothing listens any more. */
    int fd2 = tc_connect(port);
    ck_assert_int_lt(fd2, 0);
    ck_assert_int_eq(http_server_shutdown(srv, 0), 0); /* idempotent */
    free(rd);
    close(fd);
}
END_TEST

struct shutdown_arg {
    struct http_server *srv;
    int rc;
};

static void *shutdown_main(void *arg)
{
    struct shutdown_arg *a = arg;
    a->rc = http_server_shutdown(a->srv, 10000);
    return NULL;
}

START_TEST(test_http_server_shutdown_drains_in_flight)
{
    int fd = tc_connect(port);
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    const char *req = "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    char line[256];
    while (trd_line(rd, line, sizeof(line)) && strcmp(line, "data: hello") != 0) {
    }
    /* An idle keep-alive connection opened before the drain. */
    int idle = tc_connect(port);
    ck_assert_int_ge(idle, 0);
    struct shutdown_arg a = {.srv = srv, .rc = 1};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, shutdown_main, &a), 0);
    /* While draining, a new request is refused (503 + close, or the connection is dropped). */
    for (int i = 0; i < 100 && !http_server_draining(srv); i++) usleep(5000);
    const char *hello = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    struct trd *rd2 = calloc(1, sizeof(*rd2));
    rd2->fd = idle;
    struct tresp r;
    if (tc_send(idle, hello, strlen(hello)) && tc_read_response(rd2, &r)) {
        ck_assert_int_eq(r.status, 503);
        ck_assert(r.closed);
        tresp_fini(&r);
    }
    free(rd2);
    close(idle);
    /* The in-flight stream finishes normally. */
    prod.release = 1;
    do { /* the blank line ending "hello" and the CRLF ending its chunk */
        ck_assert(trd_line(rd, line, sizeof(line)));
    } while (!line[0]);
    ck_assert_str_eq(line, "b"); /* chunk size of "data: bye\n\n" */
    ck_assert(trd_line(rd, line, sizeof(line)));
    ck_assert_str_eq(line, "data: bye");
    pthread_join(th, NULL);
    ck_assert_int_eq(a.rc, 0);
    pthread_join(prod.th, NULL);
    prod.s = NULL;
    ck_assert_int_eq(prod.saw_cancel, 0);
    ck_assert_int_eq(prod.end_rc, 0);
    free(rd);
    close(fd);
}
END_TEST

START_TEST(test_http_server_config_and_bind_errors)
{
    struct http_server *s2 = NULL;
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = port; /* taken by the fixture */
    ck_assert_int_eq(http_server_start(&cfg, routes, 1, &s2), ERR_IO);
    cfg.port = -1;
    ck_assert_int_eq(http_server_start(&cfg, routes, 1, &s2), ERR_INVAL);
    cfg.port = 0;
    cfg.max_body_bytes = 0;
    ck_assert_int_eq(http_server_start(&cfg, routes, 1, &s2), ERR_INVAL);
    cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    struct http_route dup[] = {routes[0], routes[0]};
    ck_assert_int_eq(http_server_start(&cfg, dup, 2, &s2), ERR_INVAL);
    cfg.host = "not-an-address";
    ck_assert_int_eq(http_server_start(&cfg, routes, 1, &s2), ERR_INVAL);
    cfg.host = "127.0.0.1:80";
    ck_assert_int_eq(http_server_start(&cfg, routes, 1, &s2), ERR_INVAL);
    http_server_free(NULL);
}
END_TEST

START_TEST(test_http_server_ipv6_loopback)
{
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    if (probe < 0) {
        test_skip("no IPv6 on this machine");
        return;
    }
    close(probe);
    struct http_server *s6 = NULL;
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.host = "::1";
    cfg.port = 0;
    int rc = http_server_start(&cfg, routes, 1, &s6);
    if (rc == ERR_IO) {
        test_skip("cannot bind ::1");
        return;
    }
    ck_assert_int_eq(rc, 0);
    int fd = tc_connect_family(AF_INET6, http_server_port(s6));
    ck_assert_int_ge(fd, 0);
    const char *req = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
    ck_assert(tc_send(fd, req, strlen(req)));
    struct trd *rd = calloc(1, sizeof(*rd));
    rd->fd = fd;
    struct tresp r;
    ck_assert(tc_read_response(rd, &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    free(rd);
    close(fd);
    http_server_free(s6);
}
END_TEST

/* ---- Probe server ------------------------------------------------------------------------------ */

START_TEST(test_probe_addr_parse_forms)
{
    char host[64];
    int p = -1;
    ck_assert_int_eq(probe_addr_parse("127.0.0.1:8081", host, sizeof(host), &p), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_eq(p, 8081);
    ck_assert_int_eq(probe_addr_parse(":9090", host, sizeof(host), &p), 0);
    ck_assert_str_eq(host, "");
    ck_assert_int_eq(p, 9090);
    ck_assert_int_eq(probe_addr_parse("[::1]:0", host, sizeof(host), &p), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(p, 0);
    static const char *const bad[] = {"",       "8081",    "host:",   "h:65536",  "h:-1", "h:80x",
                                      "::1:80", "[::1]80", "[::1:80", "h:123456", "h: 80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(probe_addr_parse(bad[i], host, sizeof(host), &p) == ERR_INVAL, "%s", bad[i]);
    ck_assert_int_eq(probe_addr_parse("127.0.0.1:1", host, 4, &p), ERR_INVAL); /* host too long */
    ck_assert_int_eq(probe_addr_parse(NULL, host, sizeof(host), &p), ERR_INVAL);
}
END_TEST

static int failing_metrics(struct buf *out, void *ud)
{
    (void)out;
    (void)ud;
    return ERR_INTERNAL;
}

START_TEST(test_probe_server_endpoints)
{
    log_setup("test", LOG_ERROR, LOG_FORMAT_TEXT);
    struct prom_registry *reg = prom_registry_new();
    ck_assert_int_eq(probe_register_process_metrics(reg), 0);
    struct probe_server *p = NULL;
    ck_assert_int_eq(probe_server_start("127.0.0.1:0", probe_metrics_prom, reg, &p), 0);
    int pp = probe_server_port(p);
    struct tresp r;
    ck_assert(tc_get(pp, "/healthz", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    ck_assert(tc_get(pp, "/readyz", &r));
    ck_assert_int_eq(r.status, 503);
    tresp_fini(&r);
    probe_server_set_ready(p, true);
    ck_assert(tc_get(pp, "/readyz", &r));
    ck_assert_int_eq(r.status, 200);
    tresp_fini(&r);
    ck_assert(tc_get(pp, "/metrics", &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(tresp_header(&r, "content-type"), PROM_CONTENT_TYPE);
    struct prom_exposition *e = NULL;
    char err[128];
    ck_assert_int_eq(prom_parse(r.body, r.body_len, NULL, &e, err, sizeof(err)), 0);
    const struct prom_sample *st = prom_exposition_sample(e, "process_start_time_seconds", NULL, 0);
    ck_assert_ptr_nonnull(st);
    ck_assert(st->value > 1.6e9);
    prom_exposition_free(e);
    tresp_fini(&r);
    ck_assert(tc_get(pp, "/other", &r));
    ck_assert_int_eq(r.status, 404);
    tresp_fini(&r);
    probe_server_free(p);
    prom_registry_free(reg);

    /* A failing renderer answers 500; a NULL one an empty body. */
    ck_assert_int_eq(probe_server_start(":0", failing_metrics, NULL, &p), 0);
    ck_assert(tc_get(probe_server_port(p), "/metrics", &r));
    ck_assert_int_eq(r.status, 500);
    tresp_fini(&r);
    probe_server_free(p);
    ck_assert_int_eq(probe_server_start("127.0.0.1:0", NULL, NULL, &p), 0);
    ck_assert(tc_get(probe_server_port(p), "/metrics", &r));
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, 0);
    tresp_fini(&r);
    probe_server_free(p);
    probe_server_free(NULL);
    ck_assert_int_eq(probe_server_start("localhost", NULL, NULL, &p), ERR_INVAL);
    ck_assert_int_eq(probe_server_start("example.com:80", NULL, NULL, &p), ERR_INVAL);
}
END_TEST

Suite *http_server_suite(void)
{
    Suite *s = suite_create("http_server");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_http_server_routes_and_headers);
    tcase_add_test(tc, test_http_server_404_405);
    tcase_add_test(tc, test_http_server_body_limit_413);
    tcase_add_test(tc, test_http_server_json_400);
    tcase_add_test(tc, test_http_server_handler_errors);
    tcase_add_test(tc, test_http_server_keep_alive);
    tcase_add_test(tc, test_http_server_keep_alive_limits);
    tcase_add_test(tc, test_http_server_head_and_options);
    tcase_add_test(tc, test_http_server_large_response_delivered_before_close);
    tcase_add_test(tc, test_http_server_chunked_from_thread);
    tcase_add_test(tc, test_http_server_deferred_whole_response);
    tcase_add_test(tc, test_http_server_sse_disconnect_detected);
    tcase_add_test(tc, test_http_server_many_concurrent_connections);
    tcase_add_test(tc, test_http_server_concurrent_streams_from_threads);
    tcase_add_test(tc, test_http_server_deferred_outlives_request_timeout);
    tcase_add_test(tc, test_http_server_slowloris_does_not_block);
    tcase_add_test(tc, test_http_server_malformed_input_survives);
    tcase_add_test(tc, test_http_server_pipelining_in_order);
    tcase_add_test(tc, test_http_server_empty_post_body);
    tcase_add_test(tc, test_http_server_chunked_body);
    tcase_add_test(tc, test_http_server_expect_continue);
    tcase_add_test(tc, test_http_server_http10);
    tcase_add_test(tc, test_http_server_cors);
    tcase_add_test(tc, test_http_server_upgrade_refused);
    tcase_add_test(tc, test_http_server_header_timeout);
    tcase_add_test(tc, test_http_server_connection_limits);
    tcase_add_test(tc, test_http_server_malformed_heads);
    tcase_add_test(tc, test_http_server_post_without_length_411);
    tcase_add_test(tc, test_http_server_garbage_request_line_400);
    tcase_add_test(tc, test_http_server_shutdown_cancels_open_stream);
    tcase_add_test(tc, test_http_server_shutdown_drains_in_flight);
    tcase_add_test(tc, test_http_server_config_and_bind_errors);
    tcase_add_test(tc, test_http_server_ipv6_loopback);
    suite_add_tcase(s, tc);
    TCase *probe = tcase_create("probe");
    tcase_set_timeout(probe, 30);
    tcase_add_test(probe, test_probe_addr_parse_forms);
    tcase_add_test(probe, test_probe_server_endpoints);
    suite_add_tcase(s, probe);
    return s;
}
