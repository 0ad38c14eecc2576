/* Private to common/http_server*.c: the structures shared by the event loop (http_server.c), the
 * per-connection request/response code (http_server_conn.c) and the cross-thread stream code
 * (http_server_stream.c). Not a public API. Everything here belongs to the service thread except
 * the fields of struct http_stream marked "under mu" and the atomics of struct http_server. */
#ifndef CINFER_COMMON_HTTP_SERVER_PRIV_H
#define CINFER_COMMON_HTTP_SERVER_PRIV_H

#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/http_server_parse.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Most stream bytes framed into a connection's output per refill. */
#define HTTP_WRITE_SLICE 65536
/* Unsent output above which a connection reads no further pipelined request and streams wait. */
#define HTTP_OUT_LOW (64u << 10)
/* Input buffered beyond a request head: a pipelined request's head may be this much larger. */
#define HTTP_IN_EXTRA         16384
#define HTTP_MAX_RESP_HEADERS 16
/* After a closing answer, how long the connection keeps reading and dropping what the client
 * still sends, so that it reads the answer instead of a reset (RFC 9112 section 9.6). */
#define HTTP_LINGER_MS      2000
#define HTTP_CLIENT_BUCKETS 256
#define HTTP_ORIGIN_MAX     256

/* A whole response, or the head of a streamed one (body unused). Owned by whoever holds it. */
struct http_resp {
    int status;
    struct buf ctype;   /* empty: no Content-Type */
    struct buf headers; /* "name\0value\0" pairs, n_headers of them */
    size_t n_headers;
    struct buf body;
};

enum http_conn_state {
    CONN_HEAD = 0,   /* idle between requests, or reading a request head */
    CONN_BODY,       /* reading a request body */
    CONN_RESPONDING, /* dispatched to a handler that deferred: its answer is not all queued yet */
    CONN_CLOSING,    /* the last answer is queued: flush it, half-close, drain input, close */
};

/* Connections from one client address, for the per-client limit. */
struct http_client {
    uint8_t addr[16]; /* IPv6, or IPv4-mapped */
    int n;
    struct http_client *next;
};

struct http_conn {
    struct http_server *srv;
    int fd;
    struct http_conn *prev, *next; /* srv->conns */
    struct http_client *client;
    enum http_conn_state state;
    bool dead;     /* closed: on srv->dead until the loop iteration ends, then freed */
    bool peer_eof; /* the client shut its sending side */
    bool write_shut;
    uint32_t events; /* epoll interest */
    /* Input not yet consumed: a head, body bytes, pipelined requests. */
    char *in;
    size_t in_len, in_cap;
    /* The request being served (valid from its head until its answer is queued). */
    char *hbuf; /* a copy of the head; c->head's spans index it */
    struct http_head head;
    enum http_method method;
    char *path;
    const struct http_route *route;
    bool head_only;  /* HEAD served by the GET route: no body is sent */
    bool keep_alive; /* another request may follow this one */
    bool http10;     /* the request said HTTP/1.0: no chunked answers */
    bool answered;   /* the handler queued a whole answer (finished once it returns) */
    bool in_handler;
    char origin[HTTP_ORIGIN_MAX]; /* an allowed Origin: CORS headers go on the answer */
    bool origin_any;              /* allowed by "*" */
    uint64_t body_left;
    struct http_chunked chunk;
    struct buf body;
    struct http_stream *stream;
    /* Output: answers serialised, sent from out_off. */
    struct buf out;
    size_t out_off;
    /* Monotonic milliseconds: */
    int64_t t_idle;  /* accepted, or the last answer queued */
    int64_t t_head;  /* first byte of the current head; 0 while idle */
    int64_t t_read;  /* last body bytes read */
    int64_t t_write; /* last bytes sent, or output became pending */
    int64_t t_close; /* CLOSING began */
    unsigned requests;
    bool inflight; /* counted in srv->inflight: a request not yet answered or not yet sent */
};

struct http_server {
    struct http_server_cfg cfg;
    char *origins; /* cfg.allowed_origins, copied; NULL: no CORS */
    const struct http_route *routes;
    size_t n_routes;
    int port;
    int lfd;  /* listening socket; -1 once draining */
    int ep;   /* epoll */
    int wake; /* eventfd: producers and shutdown wake the loop */
    pthread_t thread;
    bool thread_started;
    atomic_bool draining; /* refuse new connections and requests */
    atomic_bool stopping; /* the loop exits */
    atomic_int inflight;
    pthread_mutex_t mu; /* guards loop_alive and signals inflight changes through cv */
    pthread_cond_t cv;
    bool loop_alive;
    bool shut_down;
    /* Service thread only: */
    bool drain_done;             /* the listener is closed and idle connections too */
    struct http_stream *streams; /* attached streams */
    struct http_conn *conns, *dead;
    int n_conns;
    struct http_client *clients[HTTP_CLIENT_BUCKETS];
    struct http_conn **woken; /* scratch for http_on_wake */
    size_t woken_cap;
    int64_t now; /* the loop's clock, ms */
    int64_t date_s;
    char date[40]; /* "Date:" value for date_s */
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

/* How an answer's body is delimited. */
enum http_framing {
    HTTP_FRAME_LENGTH = 0, /* Content-Length */
    HTTP_FRAME_CHUNKED,    /* Transfer-Encoding: chunked */
    HTTP_FRAME_CLOSE,      /* the end of the connection (HTTP/1.0 streams) */
};

/* ---- http_server_conn.c ---- */
void http_resp_free(struct http_resp *r);
/* Builds a response copying every argument; NULL on ERR_NOMEM or a bad header (logged). */
struct http_resp *http_resp_new(int status, const char *content_type, const void *body, size_t len,
                                const struct http_header *headers, size_t n_headers);
/* A response in the OpenAI error shape; NULL when out of memory. */
struct http_resp *http_error_resp(int status, const char *message,
                                  const struct http_header *headers, size_t n_headers);
/* Serialises `r`'s status line and headers into c->out. Returns 0 or ERR_NOMEM. */
int http_conn_queue_head(struct http_conn *c, const struct http_resp *r, enum http_framing fr,
                         uint64_t length);
/* Serialises a whole response (head and, unless HEAD, body) into c->out. Returns 0 or ERR_NOMEM. */
int http_conn_queue_resp(struct http_conn *c, const struct http_resp *r);
/* Appends bytes to c->out. Returns 0 or ERR_NOMEM. */
int http_conn_out(struct http_conn *c, const void *p, size_t n);
/* The current request is answered (all of it queued): resets it, then reads the next request or
 * closes, as the framing and the limits allow. */
void http_conn_txn_done(struct http_conn *c);
/* Parses and serves what c->in holds, as far as the connection's state allows. */
void http_conn_process(struct http_conn *c);
/* Answers an error in the OpenAI shape before or instead of a handler, then closes when `close`
 * (always when the request body is not consumed). */
void http_conn_reject(struct http_conn *c, int status, const char *message,
                      const struct http_header *headers, size_t n_headers, bool close);
/* Unsent output bytes. */
size_t http_conn_pending(const struct http_conn *c);

/* ---- http_server.c ---- */
/* Closes the connection now (a stream still attached is cancelled); freed later by the loop. */
void http_conn_close(struct http_conn *c);
void http_inflight_add(struct http_server *srv, int d);
/* Wakes the service loop; any thread while the loop is alive. */
void http_server_wake(struct http_server *srv);

/* ---- http_server_stream.c ---- */
/* Creates a stream attached to `c` (refs: connection + producer). */
struct http_stream *http_stream_new_attached(struct http_conn *c);
/* Service thread: the connection is gone, the answer was sent, or the server stops; marks the
 * stream cancelled unless it ended or `completed`, detaches it, runs the cancel callback and drops
 * the connection's reference. */
void http_stream_detach(struct http_stream *s, bool completed);
/* Service thread: moves what the stream has ready into its connection's output. Returns 0, 1 when
 * the answer is all queued (the caller completes the transaction), or -1 to close the connection. */
int http_stream_service(struct http_stream *s);
/* Drops one reference; frees at zero. */
void http_stream_unref(struct http_stream *s);

#endif
