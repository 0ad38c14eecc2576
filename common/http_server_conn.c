/* One HTTP/1.1 connection's requests, on the service thread: head -> routing -> body (Content-Length
 * or chunked) -> handler -> answer serialised into the connection's output, then the next request
 * (keep-alive, pipelining in order) or the close. Answers before a handler (404, 405, 413, parse
 * errors) use the OpenAI error shape. CORS headers and preflights are answered here too. The event
 * loop, sockets and limits are in http_server.c; cross-thread streams in http_server_stream.c. */
#include "common/assert.h"
#include "common/http_server_priv.h"
#include "common/json_util.h"
#include "common/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct http_req {
    struct http_conn *c;
    bool answered;
};

#define HTTP_MAX_JSON_RESPONSE (64u << 20)
#define HTTP_PATH_MAX          4096

const char *http_method_str(enum http_method m)
{
    switch (m) {
    case HTTP_GET: return "GET";
    case HTTP_POST: return "POST";
    case HTTP_PUT: return "PUT";
    case HTTP_DELETE: return "DELETE";
    case HTTP_PATCH: return "PATCH";
    case HTTP_OPTIONS: return "OPTIONS";
    case HTTP_HEAD: return "HEAD";
    }
    return "?";
}

/* ---- Responses --------------------------------------------------------------------------------- */

void http_resp_free(struct http_resp *r)
{
    if (!r) return;
    buf_fini(&r->ctype);
    buf_fini(&r->headers);
    buf_fini(&r->body);
    free(r);
}

static bool http_header_name_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 64) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s)) return false;
    return true;
}

static bool http_header_value_ok(const char *s)
{
    if (!s || strlen(s) >= 1024) return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\t') return false;
    return true;
}

/* Headers whose framing or connection handling the server owns. */
static bool http_header_reserved(const char *name)
{
    static const char *const reserved[] = {
        "content-length", "transfer-encoding", "connection", "content-type", "date",
        "server",         "keep-alive",        "upgrade"};
    for (size_t i = 0; i < ARRAY_LEN(reserved); i++)
        if (strcasecmp(name, reserved[i]) == 0) return true;
    return false;
}

struct http_resp *http_resp_new(int status, const char *content_type, const void *body, size_t len,
                                const struct http_header *headers, size_t n_headers)
{
    if (status < 200 || status > 599 || n_headers > HTTP_MAX_RESP_HEADERS ||
        (content_type && !http_header_value_ok(content_type))) {
        log_error("invalid response", LOG_I("status", status));
        return NULL;
    }
    for (size_t i = 0; i < n_headers; i++) {
        if (!http_header_name_ok(headers[i].name) || !http_header_value_ok(headers[i].value) ||
            http_header_reserved(headers[i].name)) {
            log_error("invalid response header", LOG_S("name", headers[i].name));
            return NULL;
        }
    }
    struct http_resp *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->status = status;
    buf_init(&r->ctype, 0);
    buf_init(&r->headers, 0);
    buf_init(&r->body, 0);
    int rc = 0;
    if (content_type) rc = buf_puts(&r->ctype, content_type);
    for (size_t i = 0; i < n_headers && !rc; i++) {
        rc = buf_append(&r->headers, headers[i].name, strlen(headers[i].name) + 1);
        if (!rc) rc = buf_append(&r->headers, headers[i].value, strlen(headers[i].value) + 1);
    }
    r->n_headers = n_headers;
    if (!rc && len) rc = buf_append(&r->body, body, len);
    if (rc) {
        http_resp_free(r);
        return NULL;
    }
    return r;
}

struct http_resp *http_error_resp(int status, const char *message,
                                  const struct http_header *headers, size_t n_headers)
{
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", message, "type", type,
                          "param", "code");
    if (!j) /* the message was not valid UTF-8 */
        j = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", "invalid request", "type", type,
                      "param", "code");
    struct buf b;
    buf_init(&b, 0);
    struct http_resp *r = NULL;
    if (j && json_util_dump(j, &b) == 0)
        r = http_resp_new(status, "application/json", b.data, b.len, headers, n_headers);
    json_decref(j);
    buf_fini(&b);
    return r;
}

static const char *http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
    }
}

size_t http_conn_pending(const struct http_conn *c)
{
    return c->out.len - c->out_off;
}

int http_conn_out(struct http_conn *c, const void *p, size_t n)
{
    if (!http_conn_pending(c)) {
        c->t_write = c->srv->now;
        if (c->out_off) {
            buf_reset(&c->out);
            c->out_off = 0;
        }
    }
    return buf_append(&c->out, p, n);
}

/* The Date header's value (RFC 9110 section 6.6.1), formatted once a second. */
static const char *http_date(struct http_server *srv)
{
    time_t t = time(NULL);
    if (t != srv->date_s) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(srv->date, sizeof(srv->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        srv->date_s = t;
    }
    return srv->date;
}

int http_conn_queue_head(struct http_conn *c, const struct http_resp *r, enum http_framing fr,
                         uint64_t length)
{
    struct http_server *srv = c->srv;
    if (atomic_load(&srv->draining) || fr == HTTP_FRAME_CLOSE) c->keep_alive = false;
    char line[512];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: cinfer\r\n",
                     r->status, http_reason(r->status), http_date(srv));
    int rc = http_conn_out(c, line, (size_t)n);
    if (!rc && r->ctype.len) {
        n = snprintf(line, sizeof(line), "Content-Type: %s\r\n", r->ctype.data);
        rc = http_conn_out(c, line, (size_t)n);
    }
    if (!rc && fr == HTTP_FRAME_LENGTH && r->status != 204) {
        n = snprintf(line, sizeof(line), "Content-Length: %llu\r\n", (unsigned long long)length);
        rc = http_conn_out(c, line, (size_t)n);
    } else if (!rc && fr == HTTP_FRAME_CHUNKED) {
        rc = http_conn_out(c, "Transfer-Encoding: chunked\r\n", 28);
    }
    const char *h = r->headers.data;
    for (size_t i = 0; i < r->n_headers && !rc; i++) {
        const char *v = h + strlen(h) + 1;
        rc = http_conn_out(c, h, strlen(h));
        if (!rc) rc = http_conn_out(c, ": ", 2);
        if (!rc) rc = http_conn_out(c, v, strlen(v));
        if (!rc) rc = http_conn_out(c, "\r\n", 2);
        h = v + strlen(v) + 1;
    }
    if (!rc && c->origin[0]) {
        n = snprintf(line, sizeof(line), "Access-Control-Allow-Origin: %s\r\n%s",
                     c->origin_any ? "*" : c->origin, c->origin_any ? "" : "Vary: Origin\r\n");
        rc = http_conn_out(c, line, (size_t)n);
    }
    if (!rc) {
        const char *conn = !c->keep_alive ? "Connection: close\r\n\r\n"
                           : c->http10    ? "Connection: keep-alive\r\n\r\n"
                                          : "\r\n";
        rc = http_conn_out(c, conn, strlen(conn));
    }
    return rc;
}

int http_conn_queue_resp(struct http_conn *c, const struct http_resp *r)
{
    int rc = http_conn_queue_head(c, r, HTTP_FRAME_LENGTH, r->body.len);
    if (!rc && !c->head_only && r->body.len && r->status != 204)
        rc = http_conn_out(c, r->body.data, r->body.len);
    return rc;
}

/* ---- Transactions ------------------------------------------------------------------------------ */

static void http_streams_unlink(struct http_server *srv, struct http_stream *s)
{
    for (struct http_stream **pp = &srv->streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
    }
}

static void http_conn_reset_request(struct http_conn *c)
{
    if (c->stream) {
        struct http_stream *s = c->stream;
        c->stream = NULL;
        http_streams_unlink(c->srv, s);
        http_stream_detach(s, true);
    }
    free(c->hbuf);
    c->hbuf = NULL;
    free(c->path);
    c->path = NULL;
    buf_fini(&c->body);
    c->route = NULL;
    c->method = 0;
    c->head_only = false;
    c->answered = false;
    c->origin[0] = 0;
    c->origin_any = false;
    c->body_left = 0;
    memset(&c->chunk, 0, sizeof(c->chunk));
    c->t_head = 0;
}

void http_conn_txn_done(struct http_conn *c)
{
    http_conn_reset_request(c);
    c->requests++;
    c->t_idle = c->srv->now;
    if (!c->keep_alive) {
        c->state = CONN_CLOSING;
        c->t_close = c->srv->now;
        c->in_len = 0; /* nothing more is read as a request */
    } else {
        c->state = CONN_HEAD;
    }
}

void http_conn_reject(struct http_conn *c, int status, const char *message,
                      const struct http_header *headers, size_t n_headers, bool close)
{
    if (close || c->state == CONN_BODY || c->body_left || c->head.chunked) c->keep_alive = false;
    struct http_resp *r = http_error_resp(status, message, headers, n_headers);
    if (!r || http_conn_queue_resp(c, r) != 0) {
        http_resp_free(r);
        http_conn_close(c);
        return;
    }
    http_resp_free(r);
    http_conn_txn_done(c);
}

/* ---- Requests (the handler's view) ------------------------------------------------------------- */

enum http_method http_req_method(const struct http_req *req)
{
    return req->c->method;
}

const char *http_req_path(const struct http_req *req)
{
    return req->c->path;
}

const char *http_req_body(const struct http_req *req, size_t *len)
{
    if (len) *len = req->c->body.len;
    return buf_cstr(&req->c->body);
}

int http_req_header(struct http_req *req, const char *name, char *out, size_t outlen)
{
    if (!http_header_name_ok(name) || outlen == 0) return ERR_INVAL;
    return http_head_field(&req->c->head, req->c->hbuf, name, out, outlen);
}

static int http_req_take(struct http_req *req, struct http_resp *r)
{
    if (req->answered) {
        http_resp_free(r);
        log_error("handler answered twice", LOG_S("path", req->c->path));
        return ERR_INVAL;
    }
    if (!r) return ERR_NOMEM;
    req->answered = true;
    int rc = http_conn_queue_resp(req->c, r);
    http_resp_free(r);
    req->c->answered = true;
    if (rc) req->c->keep_alive = false; /* out of memory: what was queued is sent, then closed */
    return rc;
}

int http_respond(struct http_req *req, int status, const char *content_type, const void *body,
                 size_t len, const struct http_header *headers, size_t n_headers)
{
    if (req->answered) return http_req_take(req, NULL);
    struct http_resp *r = http_resp_new(status, content_type, body, len, headers, n_headers);
    if (!r) return ERR_INVAL;
    return http_req_take(req, r);
}

int http_respond_json(struct http_req *req, int status, const json_t *j,
                      const struct http_header *headers, size_t n_headers)
{
    struct buf b;
    buf_init(&b, HTTP_MAX_JSON_RESPONSE);
    int rc = json_util_dump(j, &b);
    if (rc == 0)
        rc = http_respond(req, status, "application/json", b.data, b.len, headers, n_headers);
    buf_fini(&b);
    return rc;
}

int http_respond_error(struct http_req *req, int status, const char *type, const char *message)
{
    if (req->answered) return ERR_INVAL;
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", message, "type", type,
                          "param", "code");
    if (!j) return http_req_take(req, http_error_resp(status, "invalid request", NULL, 0));
    int rc = http_respond_json(req, status, j, NULL, 0);
    json_decref(j);
    return rc;
}

int http_req_json(struct http_req *req, json_t **out)
{
    char err[256];
    int rc = json_util_parse_object(req->c->body.data, req->c->body.len, out, err, sizeof(err));
    if (rc) http_respond_error(req, 400, "invalid_request_error", err);
    return rc;
}

struct http_stream *http_req_defer(struct http_req *req)
{
    if (req->answered) return NULL;
    struct http_stream *s = http_stream_new_attached(req->c);
    if (!s) return NULL;
    s->next = req->c->srv->streams;
    req->c->srv->streams = s;
    req->c->stream = s;
    req->answered = true;
    return s;
}

/* ---- Serving a request ------------------------------------------------------------------------- */

static void http_conn_dispatch(struct http_conn *c)
{
    struct http_req req = {.c = c, .answered = false};
    c->in_handler = true;
    c->route->fn(&req, c->route->ud);
    c->in_handler = false;
    if (c->dead) return;
    if (!req.answered) {
        log_error("handler did not answer", LOG_S("path", c->path));
        http_conn_reject(c, 500, "internal error: no response", NULL, 0, false);
        return;
    }
    if (c->answered) { /* a whole answer, queued */
        http_conn_txn_done(c);
        return;
    }
    c->state = CONN_RESPONDING; /* deferred: http_stream_service picks it up */
    int rc = http_stream_service(c->stream);
    if (rc < 0)
        http_conn_close(c);
    else if (rc == 1)
        http_conn_txn_done(c);
}

/* Whether `origin` (NUL-terminated) is allowed by the comma-separated list. */
static bool http_origin_allowed(const char *list, const char *origin, bool *any)
{
    size_t on = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t n = strcspn(p, ", ");
        if (n == 1 && *p == '*') {
            *any = true;
            return true;
        }
        if (n && n == on && strncasecmp(p, origin, n) == 0) return true;
        p += n;
    }
    return false;
}

/* The methods routed for `path`, as an Allow value. Returns whether the path is routed at all. */
static bool http_path_methods(const struct http_server *srv, const char *path, char *allow,
                              size_t cap, bool all)
{
    size_t n = 0;
    bool known = false;
    allow[0] = 0;
    for (size_t i = 0; i < srv->n_routes; i++) {
        const struct http_route *r = &srv->routes[i];
        if (!all && strcmp(r->path, path) != 0) continue;
        const char *m = http_method_str(r->method);
        known = true;
        if (strstr(allow, m)) continue;
        int w = snprintf(allow + n, cap - n, "%s%s", n ? ", " : "", m);
        if (w > 0 && (size_t)w < cap - n) n += (size_t)w;
    }
    return known;
}

/* OPTIONS without an OPTIONS route: 204 with Allow, and for a CORS preflight from an allowed
 * origin the Access-Control-Allow-* headers (https://fetch.spec.whatwg.org/#http-cors-protocol). */
static void http_conn_options(struct http_conn *c, bool asterisk)
{
    char allow[96], req_headers[512];
    if (!http_path_methods(c->srv, c->path, allow, sizeof(allow), asterisk)) {
        http_conn_reject(c, 404, "not found", NULL, 0, false);
        return;
    }
    struct http_header h[4];
    size_t n = 0;
    h[n++] = (struct http_header){"Allow", allow};
    char method[32];
    if (c->origin[0] && http_head_field(&c->head, c->hbuf, "Access-Control-Request-Method", method,
                                        sizeof(method)) > 0) {
        h[n++] = (struct http_header){"Access-Control-Allow-Methods", allow};
        int rh = http_head_field(&c->head, c->hbuf, "Access-Control-Request-Headers", req_headers,
                                 sizeof(req_headers));
        if (rh > 0 && http_header_value_ok(req_headers))
            h[n++] = (struct http_header){"Access-Control-Allow-Headers", req_headers};
        h[n++] = (struct http_header){"Access-Control-Max-Age", "600"};
    }
    struct http_resp *r = http_resp_new(204, NULL, NULL, 0, h, n);
    if (!r || http_conn_queue_resp(c, r)) {
        http_resp_free(r);
        http_conn_close(c);
        return;
    }
    http_resp_free(r);
    http_conn_txn_done(c);
}

/* A complete head of `n` bytes at the start of c->in: decides routing, framing and keep-alive,
 * then reads the body or dispatches. */
static void http_conn_begin(struct http_conn *c, size_t n)
{
    struct http_server *srv = c->srv;
    c->hbuf = malloc(n + 1);
    if (!c->hbuf) {
        http_conn_close(c);
        return;
    }
    memcpy(c->hbuf, c->in, n);
    c->hbuf[n] = 0;
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
    struct http_head *h = &c->head;
    c->method = h->method;
    c->http10 = h->minor == 0;
    c->keep_alive = c->http10 ? h->conn_keep_alive && !h->conn_close : !h->conn_close;
    if (srv->cfg.max_requests_per_conn &&
        c->requests + 1 >= (unsigned)srv->cfg.max_requests_per_conn)
        c->keep_alive = false;
    c->body_left = h->has_length ? h->length : 0;
    buf_init(&c->body, srv->cfg.max_body_bytes);
    if (!c->inflight) {
        c->inflight = true;
        http_inflight_add(srv, 1);
    }
    if (srv->origins) {
        char origin[HTTP_ORIGIN_MAX];
        bool any = false;
        if (http_head_field(h, c->hbuf, "Origin", origin, sizeof(origin)) > 0 &&
            http_origin_allowed(srv->origins, origin, &any)) {
            memcpy(c->origin, origin, sizeof(origin));
            c->origin_any = any;
        }
    }
    struct http_parse_err err;
    char *path = malloc(HTTP_PATH_MAX);
    if (!path) {
        http_conn_close(c);
        return;
    }
    if (h->form == HTTP_TARGET_ASTERISK) {
        memcpy(path, "*", 2);
    } else if (http_parse_path(c->hbuf + h->target.off, h->target.len, h->form, path, HTTP_PATH_MAX,
                               &err) != 0) {
        free(path);
        http_conn_reject(c, err.status, err.message, NULL, 0, true);
        return;
    }
    c->path = path;
    if (atomic_load(&srv->draining)) {
        http_conn_reject(c, 503, "server is shutting down", NULL, 0, true);
        return;
    }
    bool has_body = h->chunked || c->body_left > 0;
    /* A POST, PUT or PATCH without Content-Length or Transfer-Encoding has an empty body (RFC 9112
     * section 6.3), but a client that sends one anyway would see its body read as a next request:
     * 411, and every early answer closes. */
    bool unframed = !h->has_length && !h->chunked &&
                    (c->method == HTTP_POST || c->method == HTTP_PUT || c->method == HTTP_PATCH);
    if (c->body_left > srv->cfg.max_body_bytes) {
        http_conn_reject(c, 413, "request body too large", NULL, 0, true);
        return;
    }
    const struct http_route *match = NULL, *get = NULL;
    for (size_t i = 0; i < srv->n_routes; i++) {
        const struct http_route *r = &srv->routes[i];
        if (strcmp(r->path, c->path) != 0) continue;
        if (r->method == c->method) match = r;
        if (r->method == HTTP_GET) get = r;
    }
    if (!match && c->method == HTTP_HEAD && get) { /* RFC 9110 section 9.3.2 */
        match = get;
        c->head_only = true;
    }
    if (!match && c->method == HTTP_OPTIONS && !has_body && !unframed) {
        http_conn_options(c, h->form == HTTP_TARGET_ASTERISK);
        return;
    }
    if (!match) {
        char allow[96];
        if (!http_path_methods(srv, c->path, allow, sizeof(allow), false)) {
            http_conn_reject(c, 404, "not found", NULL, 0, has_body || unframed);
            return;
        }
        struct http_header ah = {"Allow", allow};
        http_conn_reject(c, 405, "method not allowed", &ah, 1, has_body || unframed);
        return;
    }
    if (unframed) {
        http_conn_reject(c, 411, "a request body needs a Content-Length (or chunked framing)", NULL,
                         0, true);
        return;
    }
    c->route = match;
    if (!has_body) {
        http_conn_dispatch(c);
        return;
    }
    /* RFC 9110 section 10.1.1: a client waiting for "100 Continue" sends the body once it comes.
     * Bytes already here mean it did not wait. */
    if (h->expect_continue && !c->http10 && c->in_len == 0 &&
        http_conn_out(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0) {
        http_conn_close(c);
        return;
    }
    c->state = CONN_BODY;
    c->t_read = srv->now;
}

/* Moves body bytes from c->in into c->body; dispatches once the body is complete. */
static void http_conn_body(struct http_conn *c)
{
    size_t used;
    if (c->head.chunked) {
        struct http_parse_err err;
        int rc = http_chunked_feed(&c->chunk, c->in, c->in_len, &used, &c->body, &err);
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
        if (rc < 0) {
            http_conn_reject(c, err.status, err.message, NULL, 0, true);
            return;
        }
        if (rc == 0) return;
    } else {
        used = c->in_len < c->body_left ? c->in_len : (size_t)c->body_left;
        if (buf_append(&c->body, c->in, used) != 0) {
            http_conn_reject(c, 500, "out of memory", NULL, 0, true);
            return;
        }
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
        c->body_left -= used;
        if (c->body_left) return;
    }
    http_conn_dispatch(c);
}

void http_conn_process(struct http_conn *c)
{
    struct http_server *srv = c->srv;
    while (!c->dead) {
        if (c->state == CONN_HEAD) {
            if (c->in_len == 0 || http_conn_pending(c) > HTTP_OUT_LOW) return;
            if (!c->t_head) c->t_head = srv->now;
            struct http_parse_err err;
            long n = http_parse_head(c->in, c->in_len, (size_t)srv->cfg.max_header_bytes, &c->head,
                                     &err);
            if (n == 0) {
                if (c->peer_eof) http_conn_reject(c, 400, "incomplete request head", NULL, 0, true);
                return;
            }
            if (n < 0) {
                c->http10 = false;
                http_conn_reject(c, err.status, err.message, NULL, 0, true);
                return;
            }
            http_conn_begin(c, (size_t)n);
        } else if (c->state == CONN_BODY) {
            size_t before = c->in_len;
            if (before) c->t_read = srv->now;
            http_conn_body(c);
            if (c->state == CONN_BODY) {
                if (c->peer_eof) http_conn_reject(c, 400, "incomplete request body", NULL, 0, true);
                return;
            }
        } else {
            return;
        }
    }
}
