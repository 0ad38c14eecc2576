/* Private to common/http_server*.c: the structures shared by the connection code
 * (http_server.c) and the cross-thread stream code (http_server_stream.c). Not a public API. */
#ifndef CINFER_COMMON_HTTP_SERVER_PRIV_H
#define CINFER_COMMON_HTTP_SERVER_PRIV_H

#include <libwebsockets.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include <pthread.h>
#include <stdatomic.h>

/* Largest slice written per writable callback; bounds the scratch buffer. */
#define HTTP_WRITE_SLICE 16384
/* Room for "<hex len>\r\n" before a chunk and "\r\n" after it. */
#define HTTP_CHUNK_HEAD       18
#define HTTP_MAX_RESP_HEADERS 16

/* A whole response, or the head of a streamed one (body unused). Owned by whoever holds it. */
struct http_resp {
    int status;
    struct buf ctype;   /* empty: no Content-Type */
    struct buf headers; /* "name\0value\0" pairs, n_headers of them */
    size_t n_headers;
    struct buf body;
    bool close; /* the request body is not consumed: linger to drain it before closing */
};

enum http_conn_state {
    CONN_IDLE = 0, /* between requests */
    CONN_BODY,     /* reading a request body */
    CONN_DISCARD,  /* answered early (413/503...): ignoring the rest of the body */
    CONN_DEFERRED, /* a stream (deferred response) is attached */
    CONN_WRITING,  /* writing conn->resp */
};

/* Per-connection state: lws's per-session data for our protocol (zeroed by lws at connect). */
struct http_conn {
    struct http_server *srv;
    struct lws *wsi;
    enum http_conn_state state;
    enum http_method method;
    const struct http_route *route;
    char *path;
    struct buf body;
    struct http_resp *resp; /* whole response being written */
    size_t resp_off;        /* body bytes already written */
    bool head_sent;
    bool resp_done; /* an early answer was written; the body is being discarded */
    bool body_done; /* the request body was fully received (or there was none) */
    bool inflight;  /* counted in srv->inflight */
    bool closing;   /* the answer is written: close once lws has flushed it */
    struct http_stream *stream;
};

struct http_server {
    struct http_server_cfg cfg;
    const struct http_route *routes;
    size_t n_routes;
    struct lws_context *ctx;
    struct lws_vhost *vhost;
    int port;
    pthread_t thread;
    bool thread_started;
    atomic_bool draining; /* refuse new connections and requests */
    atomic_bool stopping; /* service loop exits */
    atomic_int inflight;
    pthread_mutex_t mu; /* guards ctx_alive and signals inflight changes through cv */
    pthread_cond_t cv;
    bool ctx_alive;
    bool shut_down;
    struct http_stream *streams; /* attached streams; service thread only */
    unsigned char scratch[LWS_PRE + HTTP_WRITE_SLICE + HTTP_CHUNK_HEAD]; /* service thread only */
};

struct http_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* queue space freed, or cancelled */
    int refs;          /* the connection's and the producer's */
    /* Under mu: */
    struct http_server *srv; /* NULL once the connection is gone (then cancelled is set) */
    struct http_resp *resp;  /* head (begun) or whole response waiting for the service thread */
    bool whole;              /* resp is a whole response */
    bool begun, ended, aborted, cancelled;
    bool dirty; /* the service thread has work: new head, data, end or abort */
    struct buf q;
    size_t q_max;
    void (*on_cancel)(void *ud);
    void *cancel_ud;
    /* Service thread only: */
    struct http_conn *conn;
    bool head_sent;
    struct http_stream *next;
};

void http_resp_free(struct http_resp *r);
/* Builds a response copying every argument; NULL on ERR_NOMEM or a bad header (logged). */
struct http_resp *http_resp_new(int status, const char *content_type, const void *body, size_t len,
                                const struct http_header *headers, size_t n_headers);

/* Creates a stream attached to `c` (refs: connection + producer). */
struct http_stream *http_stream_new_attached(struct http_conn *c);
/* Service thread: the connection is gone or the server stops; marks the stream cancelled unless it
 * ended, detaches it, runs the cancel callback and drops the connection's reference. `completed`:
 * the response was fully written (not a cancellation). */
void http_stream_detach(struct http_stream *s, bool completed);
/* Service thread: writes what the stream has ready on its connection. Returns 0, 1 when the
 * transaction finished (the caller completes it), or -1 to close the connection. */
int http_stream_service(struct http_stream *s);
/* Drops one reference; frees at zero. */
void http_stream_unref(struct http_stream *s);
/* Service thread: writes `r`'s head with lws. Returns 0 or -1 (close). chunked: no length. */
int http_conn_write_head(struct http_conn *c, const struct http_resp *r, bool chunked);

#endif
