/* HTTP/1.1 server with one service thread (epoll) and a strict incremental parser
 * (common/http_server_parse.h): exact-path routing by method, bounded request bodies (Content-Length
 * or chunked), JSON helpers, and deferred/streaming responses (chunked or Server-Sent Events) that
 * another thread produces through a bounded, thread-safe per-connection queue.
 *
 * Protocol: HTTP/1.1 persistent connections (idle timeout, a bound on requests per connection),
 * pipelined requests answered in order, "100 Continue" for "Expect: 100-continue", HTTP/1.0 answers
 * framed by Content-Length or by closing (never chunked). Plain HTTP/1.x only: no TLS, no HTTP/2
 * (a prior-knowledge preface gets 505), and Upgrade (h2c, WebSocket) is ignored as RFC 9110 section
 * 7.8 allows: the request is answered as HTTP/1.1 and never with 101. Every request read is
 * answered, errors in the OpenAI error shape, or the connection is closed after a logged reason.
 * The end of the client's input (FIN) between requests or after an answered one is the normal end
 * of the connection (what is queued is still sent); while a deferred answer is still being
 * produced it means the client is gone (a server cannot tell a half-close from a close), so the
 * stream is cancelled.
 *
 * Limits: a request head must arrive whole within header_timeout_s; a body or a write that makes no
 * progress for request_timeout_s is closed; at most max_connections connections, at most
 * max_connections_per_client from one address. A new connection over a limit takes the place of the
 * longest-idle connection that has no request in flight (idle keep-alive, unfinished head), so idle
 * or slow connections can never lock out a probe; only when every connection is busy with a request
 * is the new one answered 503 and closed.
 *
 * Threads (STYLE.md "Concurrency"):
 *   - http_server_start/port/shutdown/free: the owning thread (main), never from a handler.
 *   - Handlers and every http_req_* / http_respond* function: the service thread, inside the handler
 *     call only. A struct http_req is invalid once the handler returns.
 *   - http_stream_*: any thread (they lock), except http_stream_on_cancel (the handler only) and
 *     waiting writes (timeout_ms > 0), which must not run on the service thread.
 *
 *   static void health(struct http_req *req, void *ud) {
 *       http_respond(req, 200, "text/plain", "ok\n", 3, NULL, 0);
 *   }
 *   static const struct http_route routes[] = {{HTTP_GET, "/health", health, NULL}};
 *   struct http_server_cfg cfg = HTTP_SERVER_CFG_DEFAULT;
 *   cfg.port = 8000;
 *   rc = http_server_start(&cfg, routes, ARRAY_LEN(routes), &srv);
 *   ...
 *   http_server_shutdown(srv, 30000);   // drain: new requests refused, in-flight ones finish
 *   http_server_free(srv);
 */
#ifndef CINFER_COMMON_HTTP_SERVER_H
#define CINFER_COMMON_HTTP_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum http_method {
    HTTP_GET = 1,
    HTTP_POST,
    HTTP_PUT,
    HTTP_DELETE,
    HTTP_PATCH,
    HTTP_OPTIONS,
    HTTP_HEAD,
};

/* Returns "GET", "POST", ... (static), or "?" for an unknown value; any thread. */
const char *http_method_str(enum http_method m);

struct http_server; /* opaque: listener, connections, routes, service thread */
struct http_req;    /* opaque: one request, valid during its handler call on the service thread */
struct http_stream; /* opaque: a deferred response that any thread can complete or stream */

/* A response header; both strings are borrowed for the duration of the call that takes them.
 * Names are case-insensitive ("Retry-After"); values must not contain CR or LF. */
struct http_header {
    const char *name;
    const char *value;
};

/* Runs on the service thread. Must answer with exactly one of http_respond*() or http_req_defer()
 * before returning; a handler that does neither gets a 500 answered for it (and an error log). */
typedef void (*http_handler_fn)(struct http_req *req, void *ud);

struct http_route {
    enum http_method method;
    /* Exact match on the decoded path without the query string, e.g. "/v1/models". A HEAD request
     * with no HEAD route runs the GET route and gets its head only; OPTIONS with no OPTIONS route
     * gets 204 with Allow (and the CORS preflight headers for an allowed origin). */
    const char *path;
    http_handler_fn fn;
    void *ud; /* passed to fn; borrowed, must outlive the server */
};

struct http_server_cfg {
    /* An IPv4/IPv6 literal or "localhost" (no other names); NULL, "", "0.0.0.0", "::" or "*" listen
     * on every address. Borrowed for the start call only. */
    const char *host;
    int port;                       /* 0 = an ephemeral port (read it with http_server_port) */
    size_t max_body_bytes;          /* larger request bodies get 413 */
    size_t stream_queue_bytes;      /* per-stream queue bound between producer and socket */
    int request_timeout_s;          /* a request body or an answer's write that stalls this long */
    int header_timeout_s;           /* a request head not complete this long after its first byte
                                  (or after the connection opened) gets 408 and is closed */
    int idle_timeout_s;             /* a keep-alive connection idle this long is closed */
    int max_header_bytes;           /* request line + headers; larger get 431 (or 414) */
    int max_connections;            /* open connections at once (see "Limits" above) */
    int max_connections_per_client; /* from one client address */
    int max_requests_per_conn; /* the answer to the last one says "Connection: close"; 0 = none */
    /* CORS: a comma-separated list of allowed origins ("https://app.example.com"), or "*" for any;
     * NULL or "" for none (no Access-Control-* headers). Borrowed for the start call only. */
    const char *allowed_origins;
    const char *name; /* for log lines ("engine", "probe"); borrowed, static */
};

#define HTTP_SERVER_CFG_DEFAULT                                                                    \
    ((struct http_server_cfg){.host = "127.0.0.1",                                                 \
                              .port = 8000,                                                        \
                              .max_body_bytes = 1u << 20,                                          \
                              .stream_queue_bytes = 256u << 10,                                    \
                              .request_timeout_s = 30,                                             \
                              .header_timeout_s = 10,                                              \
                              .idle_timeout_s = 60,                                                \
                              .max_header_bytes = 16384,                                           \
                              .max_connections = 4096,                                             \
                              .max_connections_per_client = 1024,                                  \
                              .max_requests_per_conn = 1000,                                       \
                              .allowed_origins = NULL,                                             \
                              .name = "http"})

/* Validates `cfg` (borrowed; copied) and `routes` (borrowed: the array and its strings must outlive
 * the server), binds the listening socket and starts the service thread. Writes a new server to *out
 * (free with http_server_free). Returns 0, ERR_INVAL (bad config or duplicate route), ERR_IO (cannot
 * bind; logged with the address) or ERR_NOMEM. Raises the process's soft RLIMIT_NOFILE towards its
 * hard limit when max_connections needs it, and lowers max_connections (logged) when even that is
 * short. Owning thread. */
int http_server_start(const struct http_server_cfg *cfg, const struct http_route *routes,
                      size_t n_routes, struct http_server **out);

/* The TCP port the server listens on (the kernel's choice when cfg.port was 0). Any thread. */
int http_server_port(const struct http_server *srv);

/* Number of requests in flight: handlers answered late (deferred) or streams not yet finished, plus
 * responses still being written. Any thread. */
int http_server_inflight(const struct http_server *srv);

/* True once http_server_shutdown began (new requests are refused). Any thread. */
bool http_server_draining(const struct http_server *srv);

/* Graceful stop: from now on the listening socket is closed, idle keep-alive connections too, and
 * new requests on open connections get 503 with "Connection: close"; waits up to `grace_ms` for in-flight requests to finish, then
 * cancels the rest (their producers see ERR_CANCELLED and their cancel callbacks run), closes every
 * connection and joins the service thread. Returns 0 when everything finished in time, ERR_TIMEOUT
 * when streams had to be cancelled. Idempotent. Owning thread, never a handler. */
int http_server_shutdown(struct http_server *srv, int grace_ms);

/* Shuts down (grace 0) if still running and frees the server. Streams still held by producers stay
 * valid (cancelled) until they are ended. NULL-safe. Owning thread. */
void http_server_free(struct http_server *srv);

/* ---- Requests: service thread, inside the handler only ---------------------------------------- */

enum http_method http_req_method(const struct http_req *req);
/* The decoded path without the query string (borrowed from req). */
const char *http_req_path(const struct http_req *req);
/* The body (borrowed, NUL-terminated for convenience; the length excludes the terminator). An empty
 * body is "" with *len = 0. len may be NULL. */
const char *http_req_body(const struct http_req *req, size_t *len);

/* Copies request header `name` (case-insensitive, without ':'; e.g. "Content-Type",
 * "Authorization", "X-Request-Id") into `out` (outlen bytes, NUL-terminated). Returns the value's
 * length, ERR_NOT_FOUND when absent, ERR_TOO_BIG when it does not fit, or ERR_INVAL for a bad name. */
int http_req_header(struct http_req *req, const char *name, char *out, size_t outlen);

/* Parses the body as a JSON object. On success writes a new reference to *out (caller decrefs) and
 * returns 0. On malformed JSON or a non-object it answers 400 itself (message with line and column)
 * and returns ERR_PARSE: the handler just returns. */
int http_req_json(struct http_req *req, json_t **out);

/* Answers with `status`, `content_type` (NULL = none), `body` (len bytes, borrowed; copied) and
 * extra headers (borrowed; copied). Returns 0, ERR_INVAL (already answered, bad header, bad status)
 * or ERR_NOMEM (the connection is then closed). */
int http_respond(struct http_req *req, int status, const char *content_type, const void *body,
                 size_t len, const struct http_header *headers, size_t n_headers);

/* Answers with `j` (borrowed) as application/json. */
int http_respond_json(struct http_req *req, int status, const json_t *j,
                      const struct http_header *headers, size_t n_headers);

/* Answers with the OpenAI error shape {"error":{"message","type","param":null,"code":null}};
 * `type` e.g. "invalid_request_error", `message` borrowed. */
int http_respond_error(struct http_req *req, int status, const char *type, const char *message);

/* Defers the answer: returns a new stream handle owned by the caller (the producer), which must
 * eventually call http_stream_respond, http_stream_end or http_stream_abort exactly once, from any
 * thread. Returns NULL when out of memory (a 500 is then answered). Nothing is sent until the
 * producer acts; the request has no timeout meanwhile. */
struct http_stream *http_req_defer(struct http_req *req);

/* ---- Streams: any thread unless noted ----------------------------------------------------------- *
 * Lifecycle: defer -> (respond | begin -> write/sse ... -> end) or abort at any point. Calls out of
 * that order (write before begin, begin twice, respond after begin, any call after the handle was
 * released) are programmer errors: ASSERTed where detectable. */

/* Completes a deferred request with a whole response (arguments as http_respond, copied) and
 * releases the handle. Returns 0, ERR_CANCELLED (client gone; handle released all the same) or
 * ERR_NOMEM (the connection is closed; handle released). */
int http_stream_respond(struct http_stream *s, int status, const char *content_type,
                        const void *body, size_t len, const struct http_header *headers,
                        size_t n_headers);

/* Starts a streamed response: status line and headers with "Transfer-Encoding: chunked", no
 * Content-Length. For Server-Sent Events pass content_type "text/event-stream" ("Cache-Control:
 * no-cache" is added). Returns 0, ERR_CANCELLED, ERR_INVAL (bad header or status) or ERR_NOMEM;
 * the handle stays owned by the caller either way (end or abort it). */
int http_stream_begin(struct http_stream *s, int status, const char *content_type,
                      const struct http_header *headers, size_t n_headers);

/* Queues `len` bytes (borrowed; copied) as one chunk. When the queue lacks room it waits up to
 * `timeout_ms` for the socket to drain (0: no wait; must be 0 on the service thread). Returns 0,
 * ERR_AGAIN (queue full: nothing queued), ERR_CANCELLED (client gone or server stopping: stop
 * producing), ERR_TOO_BIG (len exceeds the whole queue bound) or ERR_NOMEM. */
int http_stream_write(struct http_stream *s, const void *data, size_t len, int timeout_ms);

/* Queues one SSE event: optional "event: <event>" line, then `data` (borrowed) split on newlines into
 * "data: " lines, then a blank line. Same returns as http_stream_write, plus ERR_INVAL for an event
 * name with a line break. */
int http_stream_sse(struct http_stream *s, const char *event, const char *data, int timeout_ms);

/* Finishes a begun stream (the queued bytes and the terminating chunk are still sent) and releases
 * the handle. On a stream never begun, answers 500. Returns 0 or ERR_CANCELLED (released anyway). */
int http_stream_end(struct http_stream *s);

/* Gives up: closes the connection (whatever was queued may not be sent) and releases the handle. */
void http_stream_abort(struct http_stream *s);

/* True once the client disconnected or the server began cancelling streams; the producer should
 * stop work and end the stream. */
bool http_stream_cancelled(struct http_stream *s);

/* Registers `fn(ud)` to run once on the service thread when the stream is cancelled before it
 * ended (client disconnect or shutdown). Call it from the handler that deferred, before handing
 * the stream to another thread. `fn` must not block and must not call http_stream_* on `s` with a
 * wait. */
void http_stream_on_cancel(struct http_stream *s, void (*fn)(void *ud), void *ud);

#endif
