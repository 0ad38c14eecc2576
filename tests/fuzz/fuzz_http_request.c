/* Fuzz target for common/http_server: sends arbitrary bytes as one client connection's input to an
 * in-process server (started once, on an ephemeral loopback port), half-closes, reads whatever comes
 * back, then checks the server still answers a well-formed request. A crash, a sanitizer report or a
 * server that stops answering aborts, so libFuzzer reports it. Routes cover bodies, JSON parsing,
 * header lookups and a stream answered on the service thread. */
#include "common/http_server.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
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

static const struct http_route routes[] = {
    {HTTP_GET, "/echo", h_echo, NULL},
    {HTTP_POST, "/echo", h_echo, NULL},
    {HTTP_POST, "/json", h_json, NULL},
    {HTTP_GET, "/stream", h_stream, NULL},
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
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) abort();
    return fd;
}

/* Sends `n` bytes, half-closes and drains the answer until the server closes (or 5 s pass). */
static size_t exchange(const void *p, size_t n, char *out, size_t cap)
{
    int fd = connect_server();
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may close early (413, garbage) */
        c += w;
        n -= (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    char sink[4096];
    for (;;) {
        ssize_t r = recv(fd, got < cap ? out + got : sink, got < cap ? cap - got : sizeof(sink), 0);
        if (r <= 0) break;
        if (got < cap) got += (size_t)r;
    }
    close(fd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) start_server();
    if (size > 65536) return 0;
    char out[512];
    exchange(data, size, out, sizeof(out));
    /* The server must still answer. */
    static const char ping[] = "GET /echo HTTP/1.1\r\nHost: f\r\nX-Echo: alive\r\n\r\n";
    size_t got = exchange(ping, sizeof(ping) - 1, out, sizeof(out) - 1);
    out[got] = 0;
    if (strncmp(out, "HTTP/1.1 200", 12) != 0 || !strstr(out, "alive")) {
        fprintf(stderr, "fuzz_http_request: server stopped answering: %s\n", out);
        abort();
    }
    return 0;
}
