/* Deferred and streamed responses: the bounded queue between a producer thread (the engine's
 * responder thread) and the service thread. Producers lock, queue, mark the stream dirty and wake
 * the loop (http_server_wake); the service thread frames queued bytes as HTTP/1.1 chunks (or, for
 * an HTTP/1.0 client, sends them raw and closes at the end) into the connection's output. The
 * stream is reference-counted: one reference for the connection, one for the producer. */
#include "common/assert.h"
#include "common/http_server_priv.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct http_stream *http_stream_new_attached(struct http_conn *c)
{
    struct http_stream *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->refs = 2;
    s->srv = c->srv;
    s->conn = c;
    s->q_max = c->srv->cfg.stream_queue_bytes;
    buf_init(&s->q, 0);
    return s;
}

void http_stream_unref(struct http_stream *s)
{
    pthread_mutex_lock(&s->mu);
    ASSERT(s->refs > 0);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) return;
    http_resp_free(s->resp);
    buf_fini(&s->q);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Under s->mu: tells the service thread there is work. A stream already dirty has a wake pending
 * (the service thread clears the flag under mu before it looks at the stream), so one wake covers
 * every token queued meanwhile. */
static void http_stream_kick(struct http_stream *s)
{
    if (s->dirty) return;
    s->dirty = true;
    if (s->srv) http_server_wake(s->srv);
}

void http_stream_detach(struct http_stream *s, bool completed)
{
    void (*fn)(void *) = NULL;
    void *ud = NULL;
    pthread_mutex_lock(&s->mu);
    if (!completed) {
        if (!s->ended && !s->aborted) {
            fn = s->on_cancel;
            ud = s->cancel_ud;
        }
        s->cancelled = true;
    }
    s->on_cancel = NULL;
    s->srv = NULL;
    s->conn = NULL;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (fn) fn(ud);
    http_stream_unref(s);
}

int http_stream_service(struct http_stream *s)
{
    struct http_conn *c = s->conn;
    pthread_mutex_lock(&s->mu);
    if (s->aborted) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    if (s->whole && s->resp) {
        struct http_resp *r = s->resp;
        s->resp = NULL;
        pthread_mutex_unlock(&s->mu);
        int rc = http_conn_queue_resp(c, r);
        http_resp_free(r);
        return rc ? -1 : 1;
    }
    if (!s->begun) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    int rc = 0;
    if (!s->head_sent) {
        struct http_resp *r = s->resp;
        s->resp = NULL;
        s->head_sent = true;
        rc = http_conn_queue_head(c, r, c->http10 ? HTTP_FRAME_CLOSE : HTTP_FRAME_CHUNKED, 0);
        http_resp_free(r);
    }
    /* Move at most a slice per call, so one stream cannot fill the output without bound. */
    if (!rc && s->q.len) {
        size_t n = s->q.len > HTTP_WRITE_SLICE ? HTTP_WRITE_SLICE : s->q.len;
        if (!c->head_only) {
            char hl[24];
            int hn = snprintf(hl, sizeof(hl), "%zx\r\n", n);
            if (!c->http10) rc = http_conn_out(c, hl, (size_t)hn);
            if (!rc) rc = http_conn_out(c, s->q.data, n);
            if (!rc && !c->http10) rc = http_conn_out(c, "\r\n", 2);
        }
        memmove(s->q.data, s->q.data + n, s->q.len - n);
        s->q.len -= n;
        s->q.data[s->q.len] = 0;
        pthread_cond_broadcast(&s->cv);
    }
    bool done = !rc && s->ended && s->q.len == 0;
    pthread_mutex_unlock(&s->mu);
    if (rc) return -1;
    if (!done) return 0;
    if (!c->http10 && !c->head_only && http_conn_out(c, "0\r\n\r\n", 5) != 0) return -1;
    return 1;
}

/* ---- Producer side (any thread) ---------------------------------------------------------------- */

int http_stream_respond(struct http_stream *s, int status, const char *content_type,
                        const void *body, size_t len, const struct http_header *headers,
                        size_t n_headers)
{
    struct http_resp *r = http_resp_new(status, content_type, body, len, headers, n_headers);
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    ASSERT(!s->begun && !s->ended && !s->aborted);
    if (s->cancelled) {
        rc = ERR_CANCELLED;
        http_resp_free(r);
    } else if (!r) {
        rc = ERR_NOMEM;
        s->aborted = true;
        http_stream_kick(s);
    } else {
        s->resp = r;
        s->whole = true;
        s->ended = true;
        http_stream_kick(s);
    }
    pthread_mutex_unlock(&s->mu);
    http_stream_unref(s);
    return rc;
}

int http_stream_begin(struct http_stream *s, int status, const char *content_type,
                      const struct http_header *headers, size_t n_headers)
{
    struct http_header all[HTTP_MAX_RESP_HEADERS];
    size_t n = 0;
    if (n_headers + 1 > ARRAY_LEN(all)) return ERR_INVAL;
    if (content_type && strncmp(content_type, "text/event-stream", 17) == 0)
        all[n++] = (struct http_header){"Cache-Control", "no-cache"};
    for (size_t i = 0; i < n_headers; i++) all[n++] = headers[i];
    struct http_resp *r = http_resp_new(status, content_type, NULL, 0, all, n);
    if (!r) return ERR_INVAL; /* logged; or out of memory */
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    ASSERT(!s->begun && !s->ended && !s->aborted);
    if (s->cancelled) {
        rc = ERR_CANCELLED;
        http_resp_free(r);
    } else {
        s->resp = r;
        s->begun = true;
        http_stream_kick(s);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void http_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int http_stream_write(struct http_stream *s, const void *data, size_t len, int timeout_ms)
{
    struct timespec deadline;
    if (timeout_ms > 0) http_deadline(&deadline, timeout_ms);
    int rc;
    pthread_mutex_lock(&s->mu);
    ASSERT(s->begun && !s->ended && !s->aborted);
    for (;;) {
        if (s->cancelled || !s->srv) {
            rc = ERR_CANCELLED;
            break;
        }
        if (len > s->q_max) {
            rc = ERR_TOO_BIG;
            break;
        }
        if (len == 0) {
            rc = 0;
            break;
        }
        if (s->q.len + len <= s->q_max) {
            rc = buf_append(&s->q, data, len);
            if (rc == 0) http_stream_kick(s);
            break;
        }
        if (timeout_ms <= 0 || pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT) {
            rc = ERR_AGAIN;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int http_stream_sse(struct http_stream *s, const char *event, const char *data, int timeout_ms)
{
    if ((event && strpbrk(event, "\r\n")) || !data) return ERR_INVAL;
    struct buf b;
    buf_init(&b, s->q_max);
    int rc = 0;
    if (event) rc = buf_printf(&b, "event: %s\n", event);
    /* Every CR, LF or CRLF in the data starts a new "data:" line, so data cannot end the event. */
    const char *p = data;
    while (!rc) {
        size_t n = strcspn(p, "\r\n");
        rc = buf_puts(&b, "data: ");
        if (!rc) rc = buf_append(&b, p, n);
        if (!rc) rc = buf_putc(&b, '\n');
        p += n;
        if (!*p) break;
        p += (p[0] == '\r' && p[1] == '\n') ? 2 : 1;
    }
    if (!rc) rc = buf_putc(&b, '\n');
    if (!rc) rc = http_stream_write(s, b.data, b.len, timeout_ms);
    buf_fini(&b);
    return rc;
}

int http_stream_end(struct http_stream *s)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    ASSERT(!s->ended && !s->aborted);
    if (!s->begun) {
        log_error("stream ended without a response");
        s->resp = http_resp_new(500, "text/plain", "internal error: no response\n", 28, NULL, 0);
        s->whole = true;
        if (!s->resp) s->aborted = true;
    }
    s->ended = true;
    if (s->cancelled) rc = ERR_CANCELLED;
    http_stream_kick(s);
    pthread_mutex_unlock(&s->mu);
    http_stream_unref(s);
    return rc;
}

void http_stream_abort(struct http_stream *s)
{
    pthread_mutex_lock(&s->mu);
    s->aborted = true;
    http_stream_kick(s);
    pthread_mutex_unlock(&s->mu);
    http_stream_unref(s);
}

bool http_stream_cancelled(struct http_stream *s)
{
    pthread_mutex_lock(&s->mu);
    bool c = s->cancelled;
    pthread_mutex_unlock(&s->mu);
    return c;
}

void http_stream_on_cancel(struct http_stream *s, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&s->mu);
    s->on_cancel = fn;
    s->cancel_ud = ud;
    pthread_mutex_unlock(&s->mu);
}
