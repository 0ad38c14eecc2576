/* HTTP server on libwebsockets: context and service thread, the protocol callback (request head,
 * bounded body, routing, early error answers), whole responses and graceful shutdown. The stream
 * queue shared with producer threads lives in http_server_stream.c. Everything here runs on the
 * service thread except http_server_start/shutdown/free/port/inflight (owning thread). */
#include "common/http_server.h"

#include "common/assert.h"
#include "common/http_server_priv.h"
#include "common/json_util.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct http_req {
    struct http_conn *c;
    bool answered;
};

/* How long an early answer (413, 404 with a body...) keeps reading and discarding the request body
 * so the client sees the answer instead of a reset. */
#define HTTP_DISCARD_LINGER_S  2
#define HTTP_MAX_JSON_RESPONSE (64u << 20)

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

static enum http_method http_method_from_lws(int m)
{
    switch (m) {
    case LWSHUMETH_GET: return HTTP_GET;
    case LWSHUMETH_POST: return HTTP_POST;
    case LWSHUMETH_PUT: return HTTP_PUT;
    case LWSHUMETH_DELETE: return HTTP_DELETE;
    case LWSHUMETH_PATCH: return HTTP_PATCH;
    case LWSHUMETH_OPTIONS: return HTTP_OPTIONS;
    case LWSHUMETH_HEAD: return HTTP_HEAD;
    default: return 0;
    }
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
    return s && strlen(s) < 1024 && !strpbrk(s, "\r\n");
}

/* Headers whose framing the server owns. */
static bool http_header_reserved(const char *name)
{
    static const char *const reserved[] = {"content-length", "transfer-encoding", "connection",
                                           "content-type"};
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
        /* lws wants "name:" in lower case. */
        for (const char *p = headers[i].name; *p && !rc; p++)
            rc = buf_putc(&r->headers, (char)tolower((unsigned char)*p));
        if (!rc) rc = buf_append(&r->headers, ":", 2);
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

int http_conn_write_head(struct http_conn *c, const struct http_resp *r, bool chunked)
{
    struct http_server *srv = c->srv;
    unsigned char *start = srv->scratch + LWS_PRE, *p = start;
    unsigned char *end = srv->scratch + sizeof(srv->scratch) - 1;
    struct lws *wsi = c->wsi;
    if (lws_add_http_header_status(wsi, (unsigned)r->status, &p, end)) return -1;
    if (r->ctype.len && lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE,
                                                     (const unsigned char *)r->ctype.data,
                                                     (int)r->ctype.len, &p, end))
        return -1;
    if (chunked) {
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING,
                                         (const unsigned char *)"chunked", 7, &p, end))
            return -1;
    } else if (lws_add_http_header_content_length(wsi, r->body.len, &p, end)) {
        return -1;
    }
    const char *h = r->headers.data;
    for (size_t i = 0; i < r->n_headers; i++) {
        const char *v = h + strlen(h) + 1;
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)h, (const unsigned char *)v,
                                        (int)strlen(v), &p, end))
            return -1;
        h = v + strlen(v) + 1;
    }
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5,
                                     &p, end))
        return -1;
    return lws_finalize_write_http_header(wsi, start, &p, end) ? -1 : 0;
}

/* Writes the next part of c->resp. Returns 0 (more to write), 1 (written) or -1 (close). */
static int http_conn_write_resp(struct http_conn *c)
{
    struct http_resp *r = c->resp;
    if (!c->head_sent) {
        if (http_conn_write_head(c, r, false)) return -1;
        c->head_sent = true;
        if (r->body.len == 0) return 1;
        lws_callback_on_writable(c->wsi);
        return 0;
    }
    size_t n = r->body.len - c->resp_off;
    if (n > HTTP_WRITE_SLICE) n = HTTP_WRITE_SLICE;
    bool last = c->resp_off + n == r->body.len;
    unsigned char *p = c->srv->scratch + LWS_PRE;
    memcpy(p, r->body.data + c->resp_off, n);
    if (lws_write(c->wsi, p, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n) return -1;
    c->resp_off += n;
    if (last) return 1;
    lws_callback_on_writable(c->wsi);
    return 0;
}

/* ---- Connection state -------------------------------------------------------------------------- */

static void http_inflight_add(struct http_server *srv, int d)
{
    pthread_mutex_lock(&srv->mu);
    atomic_fetch_add(&srv->inflight, d);
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

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

/* Ends the current transaction's state; `completed` says whether its response was fully written. */
static void http_conn_clear(struct http_conn *c, bool completed)
{
    if (c->stream) {
        struct http_stream *s = c->stream;
        c->stream = NULL;
        http_streams_unlink(c->srv, s);
        http_stream_detach(s, completed);
    }
    http_resp_free(c->resp);
    c->resp = NULL;
    c->resp_off = 0;
    c->head_sent = false;
    c->resp_done = false;
    c->body_done = false;
    buf_fini(&c->body);
    free(c->path);
    c->path = NULL;
    c->route = NULL;
    if (c->inflight) {
        c->inflight = false;
        http_inflight_add(c->srv, -1);
    }
    c->state = CONN_IDLE;
}

/* An early answer is written while the request body is still being discarded: half-close (RFC 9112
 * section 9.6) so that a client reading to the end of the connection sees the end of the answer at
 * once, while the body it is still sending is read and dropped until the linger timeout. */
static void http_conn_half_close(struct http_conn *c)
{
    int fd = (int)lws_get_socket_fd(c->wsi);
    if (fd >= 0) shutdown(fd, SHUT_WR);
}

/* The response is written: close the connection once lws has flushed it.
 *
 * One request per connection (every answer says "Connection: close"): lws 4.1 mishandles requests
 * that it parses from its own input buffer after a completed transaction, i.e. pipelined ones. The
 * fuzz target found a use-after-free of the body bytes of such a request, and busy loops (see
 * tests/fuzz/corpus/http_request/crash_*). Keep-alive would reach that path with any client that
 * pipelines, so it stays off until lws is fixed or replaced; the cost is a TCP handshake per
 * request. */
static int http_conn_complete(struct http_conn *c)
{
    if (c->state == CONN_DISCARD && !c->body_done) {
        /* Early answer: keep reading and dropping the body for a moment (bounded by a timeout) so
         * the client reads the answer instead of a connection reset. */
        http_resp_free(c->resp);
        c->resp = NULL;
        c->resp_done = true;
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_HTTP_CONTENT, HTTP_DISCARD_LINGER_S);
        if (lws_partial_buffered(c->wsi))
            lws_callback_on_writable(c->wsi); /* half-closed once lws has drained its buffer */
        else
            http_conn_half_close(c);
        return 0;
    }
    http_conn_clear(c, true);
    c->closing = true;
    if (!lws_partial_buffered(c->wsi)) return -1;
    lws_callback_on_writable(c->wsi); /* called back once lws has drained its buffer */
    return 0;
}

/* Queues a whole response on the connection and asks for a writable callback. */
static int http_conn_answer(struct http_conn *c, struct http_resp *r)
{
    if (!r) return -1;
    http_resp_free(c->resp);
    c->resp = r;
    c->resp_off = 0;
    c->head_sent = false;
    if (c->state != CONN_DISCARD) c->state = CONN_WRITING;
    lws_callback_on_writable(c->wsi);
    return 0;
}

static struct http_resp *http_error_resp(int status, const char *type, const char *message,
                                         const struct http_header *headers, size_t n_headers)
{
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

/* Answers an error before the handler runs; closes the connection afterwards when the request
 * body is not consumed. */
static int http_conn_reject(struct http_conn *c, int status, const char *message,
                            const struct http_header *headers, size_t n_headers, bool close)
{
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    struct http_resp *r = http_error_resp(status, type, message, headers, n_headers);
    if (!r) return -1;
    r->close = close;
    if (close && !c->body_done) c->state = CONN_DISCARD;
    return http_conn_answer(c, r);
}

/* ---- Requests ---------------------------------------------------------------------------------- */

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
    char key[72];
    size_t n = name ? strlen(name) : 0;
    if (!http_header_name_ok(name) || n + 2 > sizeof(key) || outlen == 0) return ERR_INVAL;
    for (size_t i = 0; i < n; i++) key[i] = (char)tolower((unsigned char)name[i]);
    key[n] = ':';
    key[n + 1] = 0;
    struct lws *wsi = req->c->wsi;
    int len = -1, outl = outlen > INT32_MAX ? INT32_MAX : (int)outlen;
    for (int t = 0; t <= WSI_TOKEN_X_AUTH_TOKEN; t++) {
        const unsigned char *ts = lws_token_to_string((enum lws_token_indexes)t);
        if (!ts || strcmp((const char *)ts, key) != 0) continue;
        len = lws_hdr_total_length(wsi, (enum lws_token_indexes)t);
        if (len <= 0) return ERR_NOT_FOUND;
        if ((size_t)len >= outlen) return ERR_TOO_BIG;
        return lws_hdr_copy(wsi, out, outl, (enum lws_token_indexes)t) < 0 ? ERR_TOO_BIG : len;
    }
    len = lws_hdr_custom_length(wsi, key, (int)n + 1);
    if (len < 0) return ERR_NOT_FOUND;
    if ((size_t)len >= outlen) return ERR_TOO_BIG;
    return lws_hdr_custom_copy(wsi, out, outl, key, (int)n + 1) < 0 ? ERR_TOO_BIG : len;
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
    http_conn_answer(req->c, r);
    return 0;
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
    struct http_resp *r = http_error_resp(status, type, message, NULL, 0);
    return r ? http_req_take(req, r) : ERR_NOMEM;
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

/* Runs the route's handler once the request (and its body) is complete. */
static int http_conn_dispatch(struct http_conn *c)
{
    c->body_done = true;
    struct http_req req = {.c = c, .answered = false};
    c->route->fn(&req, c->route->ud);
    if (!req.answered) {
        log_error("handler did not answer", LOG_S("path", c->path));
        return http_conn_reject(c, 500, "internal error: no response", NULL, 0, false);
    }
    if (c->stream && !c->resp) {
        c->state = CONN_DEFERRED;
        lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
        lws_callback_on_writable(c->wsi);
    }
    return 0;
}

/* Parses a Content-Length value; -1 when malformed. */
static long long http_parse_length(const char *s)
{
    if (!*s) return -1;
    long long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (LLONG_MAX - 9) / 10) return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* Whether lws 4.1 reads a request body after LWS_CALLBACK_HTTP, i.e. calls HTTP_BODY and then
 * HTTP_BODY_COMPLETION (lws_http_action in roles/http/server/server.c): with a positive
 * Content-Length; with an explicit zero one on POST (an empty HTTP_BODY and HTTP_BODY_COMPLETION
 * at once, right after LWS_CALLBACK_HTTP returns); and without a Content-Length on POST, PUT and
 * PATCH, whatever the framing (lws does not decode chunked uploads: it assumes a 100 MB body that
 * only the end of the connection ends). `clen` is -1 for a malformed header, which lws reads with
 * atoll(): a body may then follow or not, so this says yes and the caller lingers. */
static bool http_lws_reads_body(enum http_method m, bool has_clen, long long clen)
{
    if (!has_clen) return m == HTTP_POST || m == HTTP_PUT || m == HTTP_PATCH;
    return clen != 0 || m == HTTP_POST;
}

static int http_on_request(struct http_server *srv, struct http_conn *c, struct lws *wsi,
                           const char *in, size_t len)
{
    if (c->state != CONN_IDLE || c->closing) return -1; /* pipelined: one request per connection */
    c->srv = srv;
    c->wsi = wsi;
    c->inflight = true;
    http_inflight_add(srv, 1);
    buf_init(&c->body, srv->cfg.max_body_bytes);
    char *uri = NULL;
    int ulen = 0;
    c->method = http_method_from_lws(lws_http_get_uri_and_method(wsi, &uri, &ulen));
    c->path = strndup(in ? in : "/", in ? len : 1);
    if (!c->path) return -1;

    char cl[32] = "";
    long long clen = 0;
    bool has_clen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
    if (has_clen && (lws_hdr_copy(wsi, cl, sizeof(cl), WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0 ||
                     (clen = http_parse_length(cl)) < 0))
        clen = -1;
    /* Every early answer below closes the connection after it; while lws still reads a body, the
     * answer first lingers, discarding it (CONN_DISCARD; see http_conn_complete). */
    c->body_done = !http_lws_reads_body(c->method, has_clen, clen);
    if (clen < 0) return http_conn_reject(c, 400, "invalid Content-Length", NULL, 0, true);
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0)
        return http_conn_reject(c, 411,
                                "Transfer-Encoding is not supported: send the request body with "
                                "a Content-Length",
                                NULL, 0, true);
    if (atomic_load(&srv->draining))
        return http_conn_reject(c, 503, "server is shutting down", NULL, 0, true);
    if (c->method == 0) return http_conn_reject(c, 405, "method not supported", NULL, 0, true);

    const struct http_route *match = NULL;
    bool path_known = false;
    char allow[64] = "";
    size_t alen = 0;
    for (size_t i = 0; i < srv->n_routes; i++) {
        const struct http_route *r = &srv->routes[i];
        if (strcmp(r->path, c->path) != 0) continue;
        path_known = true;
        if (r->method == c->method) match = r;
        int w = snprintf(allow + alen, sizeof(allow) - alen, "%s%s", alen ? ", " : "",
                         http_method_str(r->method));
        if (w > 0 && (size_t)w < sizeof(allow) - alen) alen += (size_t)w;
    }
    if (!match && !path_known) return http_conn_reject(c, 404, "not found", NULL, 0, true);
    if (!match) {
        struct http_header h = {"Allow", allow};
        return http_conn_reject(c, 405, "method not allowed", &h, 1, true);
    }
    /* lws would read everything up to the end of the connection as the body (RFC 9112 section 6.3
     * makes it empty, but a client that sends one anyway would see its JSON as a next request). */
    if (!has_clen && !c->body_done)
        return http_conn_reject(c, 411, "a request body needs a Content-Length", NULL, 0, true);
    if ((unsigned long long)clen > srv->cfg.max_body_bytes)
        return http_conn_reject(c, 413, "request body too large", NULL, 0, true);
    c->route = match;
    if (!c->body_done) { /* dispatched on HTTP_BODY_COMPLETION, even for an empty POST body */
        c->state = CONN_BODY;
        return 0;
    }
    return http_conn_dispatch(c);
}

static int http_on_body(struct http_conn *c, const void *in, size_t len)
{
    if (c->closing) return -1;
    if (c->state == CONN_DISCARD || len == 0) return 0; /* len 0: lws's empty POST body */
    if (c->state != CONN_BODY) return -1;
    if (buf_append(&c->body, in, len) != 0) /* more than Content-Length promised, or no memory */
        return http_conn_reject(c, 413, "request body too large", NULL, 0, true);
    return 0;
}

/* The body is complete. lws 4.1 announces that again on every service pass while bytes that follow
 * the body (a pipelined request, or junk) wait in its input buffer, and it never reaches our writable
 * callback meanwhile; completing the transaction from inside this callback spins as well (both found
 * by fuzz_http_request). So a repeat closes the connection: pipelining after a request body is not
 * supported (RFC 9112 section 9.3.2: clients should not pipeline non-idempotent methods). */
static int http_on_body_done(struct http_conn *c)
{
    if (c->closing) return -1;
    if (c->state == CONN_BODY) return http_conn_dispatch(c);
    if (c->state == CONN_DISCARD && !c->body_done && !c->resp_done) {
        c->body_done = true; /* the early answer is still being written; close after it */
        return 0;
    }
    return -1;
}

static int http_on_writable(struct http_conn *c)
{
    int rc = 0;
    if (c->closing) return -1;
    if (c->state == CONN_DISCARD && c->resp_done) {
        if (!lws_partial_buffered(c->wsi)) http_conn_half_close(c);
        return 0;
    }
    if (c->resp)
        rc = http_conn_write_resp(c);
    else if (c->state == CONN_DEFERRED && c->stream)
        rc = http_stream_service(c->stream);
    if (rc == 1) return http_conn_complete(c);
    return rc;
}

/* A producer called lws_cancel_service(): give every stream with news a writable callback. */
static void http_on_wake(struct http_server *srv)
{
    for (struct http_stream *s = srv->streams; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        bool dirty = s->dirty;
        s->dirty = false;
        pthread_mutex_unlock(&s->mu);
        if (dirty && s->conn) lws_callback_on_writable(s->conn->wsi);
    }
}

static int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    struct lws_context *ctx = wsi ? lws_get_context(wsi) : NULL;
    struct http_server *srv = ctx ? lws_context_user(ctx) : NULL;
    struct http_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: return srv && atomic_load(&srv->draining) ? -1 : 0;
    case LWS_CALLBACK_HTTP: return srv && c ? http_on_request(srv, c, wsi, in, len) : -1;
    case LWS_CALLBACK_HTTP_BODY: return c && c->srv ? http_on_body(c, in, len) : -1;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION: return c && c->srv ? http_on_body_done(c) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE: return c && c->srv ? http_on_writable(c) : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (c && c->srv) http_conn_clear(c, false);
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (srv) http_on_wake(srv);
        return 0;
    default: break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* ---- Requests lws cannot parse ----------------------------------------------------------------- *
 * A request line whose method lws does not know ("HELLO", binary junk, a TLS ClientHello) would get
 * lws's own "403 Forbidden" text/html answer from inside its parser, before any callback. With
 * LWS_SERVER_OPTION_FALLBACK_TO_APPLY_LISTEN_ACCEPT_CONFIG lws instead hands such a connection to
 * the listen-accept protocol below as a raw socket, which answers 400 in the OpenAI error shape.
 *
 * Not covered, because lws 4.1 answers them inside lws_parse() with no hook (lws_return_http_status
 * writes directly; roles/http/parsers.c, label "forbid"): a known method with a bad %-escape in the
 * URI ("GET /%zz"), or one that leaves an escape unfinished at '?', CR or the end of the head. Those
 * still get lws's "HTTP/1.0 403 Forbidden" text/html. Other parse failures (a duplicated method
 * token, an over-long head) close the connection without an answer. */

struct http_raw {
    bool written; /* the 400 was handed to lws */
};

static int http_raw_write(struct lws *wsi, struct http_raw *r)
{
    struct http_resp *resp =
        http_error_resp(400, "invalid_request_error",
                        "malformed HTTP request: unknown method or not HTTP/1.x", NULL, 0);
    if (!resp) return -1;
    unsigned char out[LWS_PRE + 512];
    char *p = (char *)out + LWS_PRE;
    size_t cap = sizeof(out) - LWS_PRE;
    int n =
        snprintf(p, cap,
                 "HTTP/1.1 400 Bad Request\r\nserver: cinfer\r\ncontent-type: application/json\r\n"
                 "content-length: %zu\r\nconnection: close\r\n\r\n",
                 resp->body.len);
    int rc = -1;
    if (n <= 0 || (size_t)n + resp->body.len > cap) goto out;
    memcpy(p + n, resp->body.data, resp->body.len);
    size_t total = (size_t)n + resp->body.len;
    if (lws_write(wsi, (unsigned char *)p, total, LWS_WRITE_RAW) < (int)total) goto out;
    r->written = true;
    rc = 0;
out:
    http_resp_free(resp);
    return rc;
}

static int http_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                             void *in, size_t len)
{
    struct http_raw *r = user;
    (void)in;
    (void)len;
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT:
        if (!r) return -1;
        /* Bounds the whole exchange: answer, then read and drop until the client closes. */
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, HTTP_DISCARD_LINGER_S);
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_RAW_RX: return 0; /* the rest of whatever this is: dropped */
    case LWS_CALLBACK_RAW_WRITEABLE:
        if (!r) return -1;
        if (!r->written && http_raw_write(wsi, r)) return -1;
        if (lws_partial_buffered(wsi)) {
            lws_callback_on_writable(wsi); /* half-close once lws has drained it */
            return 0;
        }
        /* Half-close (as http_conn_half_close): the client sees the end of the answer at once. */
        if (lws_get_socket_fd(wsi) >= 0) shutdown((int)lws_get_socket_fd(wsi), SHUT_WR);
        return 0;
    default: return 0;
    }
}

/* ---- Server lifecycle -------------------------------------------------------------------------- */

#define HTTP_RAW_PROTOCOL "cinfer-raw"

static const struct lws_protocols http_protocols[] = {
    {"cinfer-http", http_callback, sizeof(struct http_conn), 0, 0, NULL, 0},
    {HTTP_RAW_PROTOCOL, http_raw_callback, sizeof(struct http_raw), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static const struct lws_protocol_vhost_options http_raw_pvo_raw = {NULL, NULL, "raw", ""};
static const struct lws_protocol_vhost_options http_raw_pvo = {NULL, &http_raw_pvo_raw,
                                                               HTTP_RAW_PROTOCOL, ""};

/* lws log lines go through common/log at warn level; lws's notices and below are silenced. */
static void http_lws_log(int level, const char *line)
{
    char msg[256];
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    if (n >= sizeof(msg)) n = sizeof(msg) - 1;
    memcpy(msg, line, n);
    msg[n] = 0;
    log_warn("libwebsockets", LOG_S("lws", msg), LOG_I("lws_level", level));
}

static pthread_once_t http_log_once = PTHREAD_ONCE_INIT;
static void http_log_init(void)
{
    lws_set_log_level(LLL_ERR | LLL_WARN, http_lws_log);
}

static void *http_service_main(void *arg)
{
    struct http_server *srv = arg;
    while (!atomic_load(&srv->stopping))
        if (lws_service(srv->ctx, 0) < 0) break;
    /* Producers must no longer wake the loop: detach every stream before the context goes. A
     * stream cancelled here gets its cancel callback now, on this (the service) thread: its
     * producer may see the flag and end the stream before lws_context_destroy reaches it, and the
     * callback is owed to every stream cancelled before it ended. */
    for (struct http_stream *s = srv->streams; s; s = s->next) {
        void (*fn)(void *) = NULL;
        void *ud = NULL;
        pthread_mutex_lock(&s->mu);
        s->srv = NULL;
        if (!s->ended && !s->aborted) {
            s->cancelled = true;
            fn = s->on_cancel;
            ud = s->cancel_ud;
            s->on_cancel = NULL;
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (fn) fn(ud);
    }
    pthread_mutex_lock(&srv->mu);
    srv->ctx_alive = false;
    pthread_mutex_unlock(&srv->mu);
    lws_context_destroy(srv->ctx); /* closes every connection: CLOSED_HTTP runs here */
    srv->ctx = NULL;
    return NULL;
}

static bool http_host_is_any(const char *h)
{
    return !h || !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") || !strcmp(h, "*");
}

int http_server_start(const struct http_server_cfg *cfg, const struct http_route *routes,
                      size_t n_routes, struct http_server **out)
{
    if (cfg->port < 0 || cfg->port > 65535 || cfg->max_body_bytes == 0 ||
        cfg->stream_queue_bytes < 64 || cfg->request_timeout_s <= 0 ||
        cfg->max_header_bytes < 1024 || cfg->max_header_bytes > 65535 ||
        cfg->max_pending_headers <= 0) {
        log_error("invalid http server config", LOG_S("server", cfg->name));
        return ERR_INVAL;
    }
    for (size_t i = 0; i < n_routes; i++) {
        if (!routes[i].fn || !routes[i].path || routes[i].path[0] != '/' ||
            !http_method_str(routes[i].method)[1])
            return ERR_INVAL;
        for (size_t j = 0; j < i; j++)
            if (routes[j].method == routes[i].method && !strcmp(routes[j].path, routes[i].path)) {
                log_error("duplicate route", LOG_S("path", routes[i].path));
                return ERR_INVAL;
            }
    }
    const char *host = cfg->host;
    bool any = http_host_is_any(host);
    if (host && !strcmp(host, "localhost")) host = "127.0.0.1";
    unsigned char addr[sizeof(struct in6_addr)];
    bool v4 = !any && inet_pton(AF_INET, host, addr) == 1;
    if (!any && !v4 && inet_pton(AF_INET6, host, addr) != 1) {
        log_error("listen host must be an IP address or localhost", LOG_S("host", cfg->host));
        return ERR_INVAL;
    }
    pthread_once(&http_log_once, http_log_init);
    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) return ERR_NOMEM;
    srv->cfg = *cfg;
    srv->routes = routes;
    srv->n_routes = n_routes;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    /* An IPv4 literal (or 0.0.0.0) binds an AF_INET socket; IPv6 literals and "::" use AF_INET6. */
    if (v4 || (host && !strcmp(host, "0.0.0.0"))) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    info.user = srv;
    info.timeout_secs = (unsigned)cfg->request_timeout_s;
    info.max_http_header_data = (unsigned short)cfg->max_header_bytes;
    info.max_http_header_pool = (unsigned short)cfg->max_pending_headers;
    info.timeout_secs_ah_idle = (unsigned)cfg->request_timeout_s;
    info.server_string = "cinfer";
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    srv->ctx = lws_create_context(&info);
    int rc = ERR_NOMEM;
    if (!srv->ctx) goto out;
    info.port = cfg->port;
    info.iface = any ? NULL : host;
    info.protocols = http_protocols;
    info.vhost_name = "default";
    /* Unparseable request lines go to the raw-skt role, bound to the protocol that the per-vhost
     * option "raw" names. Not through .listen_accept_protocol: lws 4.1 would also bind every
     * accepted HTTP connection's user space to that protocol (adopt.c), the wrong size. */
    info.options |= LWS_SERVER_OPTION_FALLBACK_TO_APPLY_LISTEN_ACCEPT_CONFIG;
    info.pvo = &http_raw_pvo;
    srv->vhost = lws_create_vhost(srv->ctx, &info);
    if (!srv->vhost) {
        log_error("cannot listen", LOG_S("server", cfg->name), LOG_S("host", cfg->host),
                  LOG_I("port", cfg->port));
        rc = ERR_IO;
        goto out;
    }
    srv->port = lws_get_vhost_listen_port(srv->vhost);
    srv->ctx_alive = true;
    if (pthread_create(&srv->thread, NULL, http_service_main, srv) != 0) {
        rc = ERR_NOMEM;
        goto out;
    }
    srv->thread_started = true;
    log_info("http server listening", LOG_S("server", cfg->name), LOG_S("host", cfg->host),
             LOG_I("port", srv->port));
    srv->cfg.host = NULL; /* borrowed for this call only */
    *out = srv;
    return 0;
out:
    if (srv->ctx) lws_context_destroy(srv->ctx);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
    return rc;
}

int http_server_port(const struct http_server *srv)
{
    return srv->port;
}

int http_server_inflight(const struct http_server *srv)
{
    return atomic_load(&srv->inflight);
}

bool http_server_draining(const struct http_server *srv)
{
    return atomic_load(&srv->draining);
}

static void http_server_wake(struct http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    if (srv->ctx_alive) lws_cancel_service(srv->ctx);
    pthread_mutex_unlock(&srv->mu);
}

int http_server_shutdown(struct http_server *srv, int grace_ms)
{
    if (srv->shut_down) return 0;
    atomic_store(&srv->draining, true);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += grace_ms / 1000;
    deadline.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&srv->mu);
    while (atomic_load(&srv->inflight) > 0 && srv->ctx_alive) {
        if (pthread_cond_timedwait(&srv->cv, &srv->mu, &deadline) == ETIMEDOUT) break;
    }
    if (atomic_load(&srv->inflight) > 0) rc = ERR_TIMEOUT;
    pthread_mutex_unlock(&srv->mu);
    if (rc)
        log_warn("http server grace period over: cancelling", LOG_S("server", srv->cfg.name),
                 LOG_I("inflight", atomic_load(&srv->inflight)));
    atomic_store(&srv->stopping, true);
    http_server_wake(srv);
    if (srv->thread_started) pthread_join(srv->thread, NULL);
    srv->thread_started = false;
    srv->shut_down = true;
    log_info("http server stopped", LOG_S("server", srv->cfg.name));
    return rc;
}

void http_server_free(struct http_server *srv)
{
    if (!srv) return;
    http_server_shutdown(srv, 0);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
}
