/* Request transfers to engines (see router_proxy.h): the POST as the client sent it (plus
 * X-Request-Id), the engine's status and headers held back until the first body byte, so that a
 * refusal (503, 429) or a failure before it can still go to another replica; then the body
 * streamed to the client with back-pressure, and the usage it reports read on the way. */
#include "router/router_proxy_priv.h"

#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/prom/prom.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RP_BUFFER_SIZE (64L << 10) /* libcurl's receive buffer per transfer */

CURL *rp_easy_new(struct router_proxy *p, struct rp_xfer *x, const char *base, const char *path)
{
    char url[ROUTER_URL_MAX + 64];
    snprintf(url, sizeof(url), "%s%s", base, path);
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)p->cfg.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "cinfer-router");
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, RP_BUFFER_SIZE);
    x->easy = e;
    return e;
}

void rp_xfer_release(struct router_proxy *p, struct rp_xfer *x)
{
    if (x->easy) {
        curl_multi_remove_handle(p->multi, x->easy);
        curl_easy_cleanup(x->easy);
        x->easy = NULL;
    }
    curl_slist_free_all(x->headers);
    x->headers = NULL;
}

/* ---- usage ----------------------------------------------------------------------------------- */

/* Reads usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens from one response
 * object (the whole non-streamed body, or one SSE event's data). */
static void usage_read(struct router_job_state *st, const char *json, size_t len)
{
    json_t *o = json_loadb(json, len, 0, NULL);
    json_t *u = json_object_get(o, "usage");
    json_t *pt = json_object_get(u, "prompt_tokens");
    json_t *ct = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    if (json_is_integer(pt)) {
        st->usage_prompt = (long)json_integer_value(pt);
        st->usage_cached = json_is_integer(ct) ? (long)json_integer_value(ct) : 0;
        st->usage_known = true;
    }
    json_decref(o);
}

/* SSE: keeps the current line; an event's "data: {...}" line that mentions usage is parsed. */
static void usage_feed_sse(struct router_job_state *st, const char *data, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (buf_append(&st->usage, data, take) != 0) buf_reset(&st->usage); /* too long: skip */
        if (!nl) return;
        const char *line = st->usage.data ? st->usage.data : "";
        size_t ll = st->usage.len;
        if (ll > 6 && memcmp(line, "data: ", 6) == 0 && memmem(line, ll, "\"usage\"", 7) &&
            memmem(line, ll, "\"prompt_tokens\"", 15))
            usage_read(st, line + 6, ll - 6);
        buf_reset(&st->usage);
        data += take + 1;
        len -= take + 1;
    }
}

/* ---- callbacks (inside curl_multi_perform) ----------------------------------------------------- */

static bool retryable_status(long status)
{
    return status == 503 || status == 429;
}

/* Whether another replica could take the request now. */
static bool can_retry(struct router_proxy *p, struct router_job *job)
{
    struct router_job_state *st = job->st;
    if (st->attempts >= p->cfg.max_attempts || st->client_gone) return false;
    double now = rp_now();
    for (size_t i = 0; i < st->m->n_reps; i++) {
        struct rp_replica *r = st->m->reps[i];
        bool was = false;
        for (int a = 0; a < st->attempts; a++) was |= st->tried[a] == r;
        if (!was && rp_replica_eligible(p, r, now)) return true;
    }
    return false;
}

static void copy_header_value(const char *line, size_t n, size_t name_len, char *dst, size_t cap)
{
    const char *v = line + name_len;
    size_t vl = n - name_len;
    while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) vl--;
    if (vl >= cap) vl = cap - 1;
    memcpy(dst, v, vl);
    dst[vl] = '\0';
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ud)
{
    struct router_job *job = ud;
    struct router_job_state *st = job->st;
    size_t n = size * nmemb;
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        st->content_type[0] = st->retry_after[0] = '\0'; /* a new response (after a 100) */
        return n;
    }
    if (n > 13 && strncasecmp(line, "Content-Type:", 13) == 0)
        copy_header_value(line, n, 13, st->content_type, sizeof(st->content_type));
    else if (n > 12 && strncasecmp(line, "Retry-After:", 12) == 0)
        copy_header_value(line, n, 12, st->retry_after, sizeof(st->retry_after));
    else if ((n == 2 && line[0] == '\r') || (n == 1 && line[0] == '\n')) {
        long status = 0;
        curl_easy_getinfo(st->x.easy, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 100 && status < 200) return n; /* interim response: more headers follow */
        st->status = status;
        st->t_first = rp_now();
        if (retryable_status(status) && job->st->m && can_retry(st->p, job)) {
            st->retry = true;
            return 0; /* aborts the transfer: rp_upstream_done sends it elsewhere */
        }
    }
    return n;
}

/* Starts the client's answer with the engine's status and headers (first body byte, or the end of
 * an empty body). False when the client is gone. */
static bool begin_client(struct router_job *job)
{
    struct router_job_state *st = job->st;
    struct http_header h[2] = {{"X-Request-Id", job->request_id}, {"Retry-After", st->retry_after}};
    size_t nh = st->retry_after[0] ? 2 : 1;
    const char *ct = st->content_type[0] ? st->content_type : NULL;
    st->sse = ct && strncasecmp(ct, "text/event-stream", 17) == 0;
    st->began = true;
    int status = st->status >= 200 && st->status <= 599 ? (int)st->status : 502;
    if (http_stream_begin(job->stream, status, ct, h, nh) != 0) {
        st->client_gone = true;
        return false;
    }
    return true;
}

/* The engine answers: the prompt is prefilled (a stream's first byte is its first token), or it
 * was refused. Its tokens leave the replica's queue at once, not a load line later: sent after
 * the last line they were counted on top of it, sent before it they are in its number. */
static void answered(struct router_job_state *st)
{
    struct rp_replica *r = st->rep;
    long owed = st->prefill_owed;
    st->prefill_owed = 0;
    if (!r || owed == 0) return;
    r->prefill_unanswered -= owed;
    if (st->sent_after == r->load_lines)
        r->prefill_sent = r->prefill_sent > owed ? r->prefill_sent - owed : 0;
    else if (r->eng_prefill >= 0)
        r->eng_prefill = r->eng_prefill > owed ? r->eng_prefill - owed : 0;
}

void rp_upstream_leave(struct router_job *job)
{
    struct router_job_state *st = job->st;
    struct rp_replica *rep = st->rep;
    if (!rep) return;
    answered(st);
    rep->inflight--;
    if (rep->m_inflight) prom_gauge_set(rep->m_inflight, rep->inflight);
    st->rep = NULL;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    struct router_job *job = ud;
    struct router_job_state *st = job->st;
    size_t n = size * nmemb;
    if (st->retry || st->client_gone) return 0;
    answered(st);
    if (!st->began && !begin_client(job)) return 0;
    int rc = http_stream_write(job->stream, data, n, 0);
    if (rc == ERR_AGAIN) {
        /* The client reads slower than the engine writes: stop reading from the engine until
         * its queue drains (libcurl delivers these bytes again on resume). */
        if (!st->paused) st->p->n_paused++;
        st->paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (rc != 0) {
        if (rc != ERR_CANCELLED)
            log_warn("cannot write to the client", LOG_S("request_id", job->request_id),
                     LOG_S("err", err_str(rc)));
        st->client_gone = true;
        return 0;
    }
    if (st->sse)
        usage_feed_sse(st, data, n);
    else if (st->status == 200 && !st->usage_overflow && buf_append(&st->usage, data, n) != 0) {
        st->usage_overflow = true; /* too long to keep: its usage goes unread */
        buf_reset(&st->usage);
    }
    return n;
}

/* ---- starting, ending ------------------------------------------------------------------------ */

int rp_upstream_start(struct router_proxy *p, struct router_job *job, struct rp_replica *rep)
{
    struct router_job_state *st = job->st;
    st->x = (struct rp_xfer){.kind = RP_XFER_REQUEST, .owner = job};
    st->status = 0;
    st->retry = false;
    st->content_type[0] = st->retry_after[0] = '\0';
    st->usage_overflow = false;
    buf_reset(&st->usage);
    CURL *e = rp_easy_new(p, &st->x, rep->url, job->path);
    if (!e) return ERR_NOMEM;
    char rid[ROUTER_REQUEST_ID_MAX + 16];
    snprintf(rid, sizeof(rid), "X-Request-Id: %s", job->request_id);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (h) h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
    if (h) h = curl_slist_append(h, rid);
    if (h && job->authorization) {
        size_t al = strlen(job->authorization) + 32;
        char *line = malloc(al);
        if (line) {
            snprintf(line, al, "Authorization: %s", job->authorization);
            h = curl_slist_append(h, line);
            free(line);
        }
    }
    if (!h) {
        rp_xfer_release(p, &st->x);
        return ERR_NOMEM;
    }
    st->x.headers = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, job->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)job->body_len);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, job);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, job);
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK) {
        rp_xfer_release(p, &st->x);
        return ERR_INTERNAL;
    }
    st->rep = rep;
    rep->inflight++;
    if (rep->m_inflight) prom_gauge_set(rep->m_inflight, rep->inflight);
    long n_prompt = job->prompt.n_prompt;
    st->prefill_owed = n_prompt > st->predicted_cached ? n_prompt - st->predicted_cached : 0;
    st->sent_after = rep->load_lines;
    rep->prefill_unanswered += st->prefill_owed;
    rep->prefill_sent += st->prefill_owed;
    st->t_sent = rp_now();
    if (rep->m_requests) prom_counter_inc(rep->m_requests, 1);
    return 0;
}

/* Ends the transfer now (the client is gone or the router stops); closes its connection. */
void rp_upstream_abort(struct router_proxy *p, struct router_job *job)
{
    struct router_job_state *st = job->st;
    if (st->paused) p->n_paused--;
    st->paused = false;
    rp_xfer_release(p, &st->x);
}

void rp_upstream_unpause(struct router_proxy *p)
{
    for (struct router_job *job = p->jobs; job; job = job->st->next) {
        struct router_job_state *st = job->st;
        if (!st->paused || !st->x.easy) continue;
        st->paused = false;
        p->n_paused--;
        /* May call on_body at once, which pauses again when the client is still full. */
        curl_easy_pause(st->x.easy, CURLPAUSE_CONT);
    }
}

static bool connect_error(CURLcode cc)
{
    return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
           cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR ||
           cc == CURLE_GOT_NOTHING || cc == CURLE_PARTIAL_FILE;
}

void rp_upstream_done(struct router_proxy *p, struct router_job *job, CURLcode cc)
{
    struct router_job_state *st = job->st;
    struct rp_replica *rep = st->rep;
    struct rp_model *m = st->m;
    if (st->paused) p->n_paused--;
    st->paused = false;
    rp_xfer_release(p, &st->x);
    rp_upstream_leave(job);
    if (st->t_first > 0) prom_histogram_observe(m->mm.ttfb, st->t_first - st->t_sent);
    st->t_first = 0;

    if (st->client_gone) {
        if (job->stream) http_stream_abort(job->stream);
        job->stream = NULL;
        rp_job_finish(p, job, 499);
        return;
    }
    if (!st->began && (st->retry || (cc != CURLE_OK && connect_error(cc)))) {
        enum router_retry_reason why = st->status == 429   ? ROUTER_RETRY_BUSY
                                       : st->status == 503 ? ROUTER_RETRY_UNAVAILABLE
                                                           : ROUTER_RETRY_CONNECT;
        if (rep && why == ROUTER_RETRY_CONNECT) {
            rep->down_until = rp_now() + p->cfg.failure_backoff_ms / 1000.0;
            rep->healthy = false; /* until its next /health answers */
        }
        if (rep && why == ROUTER_RETRY_UNAVAILABLE) rep->healthy = false; /* draining, loading */
        log_info("retrying on another replica", LOG_S("request_id", job->request_id),
                 LOG_S("replica", rep ? rep->key : ""), LOG_I("status", st->status),
                 LOG_S("error", cc == CURLE_OK ? "" : curl_easy_strerror(cc)));
        if (st->attempts < p->cfg.max_attempts) {
            prom_counter_inc(m->mm.retries[why], 1);
            rp_catalog_update(p, m);
            st->retry = false;
            rp_job_dispatch(p, job);
            return;
        }
        rp_job_fail(p, job, 503, "server_error", "upstream_unavailable",
                    "no replica of this model could take the request; retry shortly", 1);
        return;
    }
    if (cc != CURLE_OK) {
        if (st->began) {
            /* Streaming had begun: the client sees its connection cut, never a silent end. */
            prom_counter_inc(m->mm.broken, 1);
            log_warn("engine failed mid-response", LOG_S("request_id", job->request_id),
                     LOG_S("replica", rep ? rep->key : ""), LOG_S("error", curl_easy_strerror(cc)));
            http_stream_abort(job->stream);
            job->stream = NULL;
            rp_job_finish(p, job, 502);
            return;
        }
        rp_job_fail(p, job, 502, "server_error", "upstream_error",
                    "the engine failed before answering", 1);
        return;
    }
    if (!st->began && !begin_client(job)) {
        http_stream_abort(job->stream);
        job->stream = NULL;
        rp_job_finish(p, job, 499);
        return;
    }
    if (!st->sse && st->status == 200 && !st->usage_overflow && st->usage.len)
        usage_read(st, st->usage.data, st->usage.len);
    int status = (int)st->status;
    http_stream_end(job->stream);
    job->stream = NULL;
    rp_job_finish(p, job, status);
}
