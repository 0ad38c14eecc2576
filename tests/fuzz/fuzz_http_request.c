/* Fuzz target for common/http_server: sends arbitrary bytes as one client connection's input to an
 * in-process server (started once, on an ephemeral loopback port), in two writes split where the
 * first byte says (so heads and bodies arrive in pieces), half-closes, reads whatever comes back,
 * then checks the server still answers a well-formed request on a new keep-alive connection, twice.
 * A crash, a sanitizer report, an answer that is not HTTP/1.1, or a server that stops answering
 * aborts, so libFuzzer reports it. Routes cover bodies (Content-Length and chunked), JSON parsing,
 * header lookups, HEAD and OPTIONS, CORS, and streams answered on the service thread and from
 * another thread. The pure parser has its own target (fuzz_http_parse). */
#include "common/http_server.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http_server *srv;
static int port;

static void h_echo(struct http_req *req, void *ud)
{
    (void)ud;
    char v[256];
    int n = http_req_header(req, "X-Echo", v, sizeof(v));
    size_t len = 0;
    const char *body = http_req_body(req, &len);
    http_respond(req, 200, "text/plain", n > 0 ? v : body, n > 0 ? (size_t)n : len, NULL, 0);
}

static void h_json(struct http_req *req, void *ud)
{
    (void)ud;
    json_t *j = NULL;
    if (http_req_json(req, &j) != 0) return;
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}

static void h_stream(struct http_req *req, void *ud)
{
    (void)ud;
    struct http_stream *s = http_req_defer(req);
    if (!s) return;
    if (http_stream_begin(s, 200, "text/event-stream", NULL, 0) == 0)
        http_stream_sse(s, "x", "a\nb", 0);
    http_stream_end(s);
}

static void *late_main(void *arg)
{
    struct http_stream *s = arg;
    if (http_stream_begin(s, 200, "text/event-stream", NULL, 0) == 0)
        http_stream_sse(s, NULL, "late", 1000);
    http_stream_end(s);
    return NULL;
}

/* A stream fed from another thread, as the engine's responder does. */
static void h_late(struct http_req *req, void *ud)
{
    (void)ud;
    struct http_stream *s = http_req_defer(req);
    if (!s) return;
    pthread_t th;
    if (pthread_create(&th, NULL, late_main, s) != 0) {
        http_stream_abort(s);
        return;
    }
    pthread_detach(th);
}

static const struct http_route routes[] = {
    {HTTP_GET, "/echo", h_echo, NULL},     {HTTP_POST, "/echo", h_echo, NULL},
    {HTTP_PUT, "/echo", h_echo, NULL},     {HTTP_POST, "/json", h_json, NULL},
    {HTTP_GET, "/stream", h_stream, NULL}, {HTTP_GET, "/late", h_late, NULL},
};

static void stop_server(void)
{
    http_server_free(srv);
}

static void start_server(void)
{
    log_setup("fuzz", LOG_OFF, LOG_FORMAT_TEXT);
    signal(SIGPIPE, SIG_IGN);
    struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
    cfg.port = 0;
    cfg.max_body_bytes = 4096;
    cfg.request_timeout_s = 2;
    cfg.header_timeout_s = 2;
    cfg.allowed_origins = "http://a.example, *";
    cfg.name = "fuzz";
    if (http_server_start(&cfg, routes, sizeof(routes) / sizeof(routes[0]), &srv) != 0) abort();
    port = http_server_port(srv);
    atexit(stop_server);
}

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    /* libFuzzer's timer signal may interrupt a blocking connect: it then completes on its own. */
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int err = errno;
        socklen_t el = sizeof(err);
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (err == EINTR) {
            while (poll(&pf, 1, 5000) < 0 && errno == EINTR) {
            }
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
        }
        if (err) {
            fprintf(stderr, "fuzz_http_request: connect: %s\n", strerror(err));
            abort();
        }
    }
    /* Closed with a reset (after the exchange is over): thousands of inputs a second would
     * otherwise fill the ephemeral ports with TIME_WAIT sockets. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    return fd;
}

static bool send_all(int fd, const char *c, size_t n)
{
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false; /* the server may close early (413, garbage) */
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Sends `n` bytes in two writes (split at `split`), half-closes and drains the answer until the
 * server closes (or 5 s pass). */
static size_t exchange(const void *p, size_t n, size_t split, char *out, size_t cap)
{
    int fd = connect_server();
    const char *c = p;
    if (split > n) split = n;
    if (send_all(fd, c, split)) {
        if (split && split < n) usleep(1000); /* let the server see the first piece alone */
        send_all(fd, c + split, n - split);
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    char sink[4096];
    for (;;) {
        ssize_t r = recv(fd, got < cap ? out + got : sink, got < cap ? cap - got : sizeof(sink), 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (got < cap) got += (size_t)r;
    }
    close(fd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) start_server();
    if (size < 1 || size > 65536) return 0;
    char out[512];
    /* The first byte is the split point (0: one write), the rest the client's bytes. */
    size_t got = exchange(data + 1, size - 1, data[0], out, sizeof(out) - 1);
    out[got] = 0;
    if (got && strncmp(out, "HTTP/1.1 ", 9) != 0) {
        fprintf(stderr, "fuzz_http_request: not an HTTP/1.1 answer: %s\n", out);
        abort();
    }
    /* The server must still answer, twice on one connection. */
    static const char ping[] = "GET /echo HTTP/1.1\r\nHost: f\r\nX-Echo: alive\r\n\r\n"
                               "GET /echo HTTP/1.1\r\nHost: f\r\nX-Echo: again\r\n\r\n";
    got = exchange(ping, sizeof(ping) - 1, 0, out, sizeof(out) - 1);
    out[got] = 0;
    if (strncmp(out, "HTTP/1.1 200", 12) != 0 || !strstr(out, "alive") || !strstr(out, "again")) {
        fprintf(stderr, "fuzz_http_request: server stopped answering: %s\n", out);
        abort();
    }
    return 0;
}
