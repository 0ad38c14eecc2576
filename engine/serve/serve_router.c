/* The engine's endpoints for routers: the tokenizer document and the KV block event stream, with
 * the publisher thread that writes every subscriber (see serve_router.h). */
#include "engine/serve/serve_router.h"
#include "engine/serve/serve_auth.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv_events.h"
#include "engine/kv/prefix_cache.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_loop.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SR_MAX_SUBS        64          /* streams at once; more get 503 */
#define SR_BATCH_HASHES    256         /* hashes per stored / evicted line */
#define SR_WRITE_MAX       (48u << 10) /* bytes per stream write (< the stream queue bound) */
#define SR_IDLE_WAIT_MS    100
#define SR_BACKOFF_WAIT_MS 10 /* a subscriber's queue was full: look again soon */
#define SR_TOKENIZER_MAX   (512u << 20)

struct sr_sub {
    struct http_stream *s;
    uint64_t cursor; /* last event seq written (or snapshotted) */
    uint64_t *snap;  /* snapshot hashes still to write, from snap_off; NULL when none */
    size_t n_snap, snap_off;
    size_t snap_tier[KV_EVENTS_N_TIERS]; /* how many of snap are each tier's, tier after tier */
    bool hello_sent, snap_pending; /* snap_pending: the snapshot line itself is not written yet */
    struct timespec next_load;
};

struct serve_router {
    struct buf tokenizer; /* the GGUF document, immutable after start */
    char *hello;          /* the first line of every stream */
    const char *model_name;
    struct serve_auth *auth;
    int block_size, load_interval_ms;
    struct kv_events *events;
    struct serve_loop *loop;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards pending[], n_pending, stop */
    pthread_cond_t cond;
    struct http_stream *pending[SR_MAX_SUBS];
    int n_pending;
    bool stop;
    atomic_int n_subs; /* pending + active */

    struct sr_sub subs[SR_MAX_SUBS]; /* publisher thread only */
    int n_active;
};

/* ---- tokenizer document ---------------------------------------------------------------------- */

static bool sr_copied_key(const char *key)
{
    return strncmp(key, "tokenizer.", 10) == 0 || strcmp(key, "general.name") == 0 ||
           strcmp(key, "general.architecture") == 0;
}

int serve_router_tokenizer_doc(const struct serve_router_cfg *cfg, struct buf *out)
{
    struct gguf_writer *w = gguf_writer_new();
    if (!w) return ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; rc == 0 && cfg->model && i < gguf_kv_count(cfg->model); i++) {
        const struct gguf_kv *kv = gguf_kv_at(cfg->model, i);
        if (!sr_copied_key(kv->key)) continue;
        if (cfg->chat_template && strcmp(kv->key, "tokenizer.chat_template") == 0) continue;
        rc = gguf_writer_set_kv(w, kv);
    }
    if (!rc && cfg->chat_template)
        rc = gguf_writer_set_str(w, "tokenizer.chat_template", cfg->chat_template);
    if (!rc) rc = gguf_writer_set_str(w, "cinfer.model_name", cfg->model_name);
    if (!rc) rc = gguf_writer_set_str(w, "cinfer.block_hash", PREFIX_CACHE_HASH_NAME);
    if (!rc) rc = gguf_writer_set_u32(w, "cinfer.block_size", (uint32_t)cfg->block_size);
    if (!rc) rc = gguf_writer_set_u32(w, "cinfer.max_context", (uint32_t)cfg->max_context);
    if (!rc) rc = gguf_writer_set_u32(w, "cinfer.n_vocab", (uint32_t)cfg->n_vocab);
    if (!rc) rc = gguf_writer_set_bool(w, "cinfer.prefix_caching", cfg->events != NULL);
    if (!rc) rc = gguf_writer_write_buf(w, out);
    gguf_writer_free(w);
    return rc;
}

/* ---- stream lines ---------------------------------------------------------------------------- */

static void sr_deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

static bool sr_due(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static int sr_hashes_line(struct buf *b, const char *type, uint64_t seq, enum kv_events_tier tier,
                          const uint64_t *h, size_t n)
{
    int rc = buf_printf(b, "{\"type\":\"%s\",\"seq\":%llu,\"tier\":\"%s\",\"hashes\":[", type,
                        (unsigned long long)seq, kv_events_tier_name(tier));
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = buf_printf(b, "%s\"%016llx\"", i ? "," : "", (unsigned long long)h[i]);
    return rc ? rc : buf_puts(b, "]}\n");
}

/* Writes `b` whole or not at all; true when written. A cancelled or failed stream is marked for
 * removal by the caller (http_stream_cancelled). */
static bool sr_flush(struct sr_sub *sub, struct buf *b)
{
    if (b->len == 0) return true;
    int rc = http_stream_write(sub->s, b->data, b->len, 0);
    buf_reset(b);
    return rc == 0;
}

/* Starts a new snapshot for `sub`: the held set and the seq it reflects. */
static int sr_snapshot(struct serve_router *sr, struct sr_sub *sub)
{
    free(sub->snap);
    sub->snap = NULL;
    sub->n_snap = sub->snap_off = 0;
    memset(sub->snap_tier, 0, sizeof(sub->snap_tier));
    uint64_t seq = 0;
    if (sr->events) {
        int rc = kv_events_snapshot(sr->events, &sub->snap, sub->snap_tier, &seq);
        if (rc) return rc;
        for (int t = 0; t < KV_EVENTS_N_TIERS; t++) sub->n_snap += sub->snap_tier[t];
    }
    sub->cursor = seq;
    sub->snap_pending = true;
    return 0;
}

/* Writes what `sub` can take now; returns false when it was back-pressured (its queue is full). */
static bool sr_serve(struct serve_router *sr, struct sr_sub *sub, struct buf *b)
{
    if (!sub->hello_sent) {
        buf_puts(b, sr->hello);
        if (!sr_flush(sub, b)) return false;
        sub->hello_sent = true;
        if (sr_snapshot(sr, sub) != 0) return false;
    }
    if (sub->snap_pending) {
        buf_printf(b, "{\"type\":\"snapshot\",\"seq\":%llu,\"blocks\":%zu}\n",
                   (unsigned long long)sub->cursor, sub->n_snap);
        if (!sr_flush(sub, b)) return false;
        sub->snap_pending = false;
    }
    while (sub->snap_off < sub->n_snap) {
        /* The tier of snap[snap_off], and where its run ends. */
        size_t end = 0;
        int t = 0;
        while (t < KV_EVENTS_N_TIERS && sub->snap_off >= end + sub->snap_tier[t])
            end += sub->snap_tier[t++];
        end += sub->snap_tier[t];
        size_t k = end - sub->snap_off;
        if (k > SR_BATCH_HASHES) k = SR_BATCH_HASHES;
        sr_hashes_line(b, "stored", sub->cursor, (enum kv_events_tier)t, sub->snap + sub->snap_off,
                       k);
        if (!sr_flush(sub, b)) return false;
        sub->snap_off += k;
    }
    free(sub->snap);
    sub->snap = NULL;
    sub->n_snap = sub->snap_off = 0;
    if (sr->events) {
        struct kv_event evs[SR_BATCH_HASHES];
        uint64_t hashes[SR_BATCH_HASHES];
        for (;;) {
            size_t n = 0;
            int rc = kv_events_read(sr->events, sub->cursor, evs, SR_BATCH_HASHES, &n);
            if (rc == ERR_RANGE) {
                /* Fell behind the ring: start over from a snapshot, written on the next turn. */
                (void)sr_snapshot(sr, sub);
                return false;
            }
            if (n == 0) break;
            /* Lines of consecutive events with the same op and tier, all written at once or not
             * at all. */
            for (size_t i = 0; i < n;) {
                size_t j = i;
                while (j < n && evs[j].op == evs[i].op && evs[j].tier == evs[i].tier)
                    hashes[j - i] = evs[j].hash, j++;
                sr_hashes_line(b, evs[i].op == KV_EVENT_STORED ? "stored" : "evicted",
                               evs[j - 1].seq, evs[i].tier, hashes, j - i);
                i = j;
            }
            if (!sr_flush(sub, b)) return false;
            sub->cursor = evs[n - 1].seq;
        }
    }
    if (sr_due(&sub->next_load)) {
        int inflight = sr->loop ? serve_loop_inflight(sr->loop) : 0;
        int waiting = sr->loop ? serve_loop_waiting(sr->loop) : 0;
        int running = inflight > waiting ? inflight - waiting : 0;
        long prefill = sr->loop ? serve_loop_prefill_waiting(sr->loop) : 0;
        buf_printf(b,
                   "{\"type\":\"load\",\"seq\":%llu,\"running\":%d,\"waiting\":%d,"
                   "\"prefill_waiting\":%ld}\n",
                   (unsigned long long)sub->cursor, running, waiting, prefill);
        if (!sr_flush(sub, b)) return false;
        sr_deadline_in(&sub->next_load, sr->load_interval_ms);
    }
    return true;
}

static void sr_sub_end(struct sr_sub *sub)
{
    http_stream_end(sub->s);
    free(sub->snap);
    *sub = (struct sr_sub){0};
}

static void *sr_main(void *arg)
{
    struct serve_router *sr = arg;
    struct buf b;
    buf_init(&b, 0); /* our own lines, each under SR_WRITE_MAX: see SR_BATCH_HASHES */
    for (;;) {
        pthread_mutex_lock(&sr->mu);
        bool stop = sr->stop;
        for (int i = 0; i < sr->n_pending; i++) {
            struct sr_sub *sub = &sr->subs[sr->n_active++];
            *sub = (struct sr_sub){.s = sr->pending[i]};
            clock_gettime(CLOCK_MONOTONIC, &sub->next_load);
        }
        sr->n_pending = 0;
        if (!stop && sr->n_active == 0) {
            struct timespec dl;
            sr_deadline_in(&dl, SR_IDLE_WAIT_MS);
            pthread_cond_timedwait(&sr->cond, &sr->mu, &dl);
            pthread_mutex_unlock(&sr->mu);
            continue;
        }
        pthread_mutex_unlock(&sr->mu);
        if (stop) break;
        bool pressured = false;
        uint64_t min_cursor = UINT64_MAX;
        for (int i = 0; i < sr->n_active;) {
            struct sr_sub *sub = &sr->subs[i];
            if (!http_stream_cancelled(sub->s)) {
                if (!sr_serve(sr, sub, &b)) pressured = true;
                buf_reset(&b);
            }
            if (http_stream_cancelled(sub->s)) {
                sr_sub_end(sub);
                sr->subs[i] = sr->subs[--sr->n_active];
                atomic_fetch_sub(&sr->n_subs, 1);
                continue;
            }
            if (sub->cursor < min_cursor) min_cursor = sub->cursor;
            i++;
        }
        int wait_ms = pressured ? SR_BACKOFF_WAIT_MS : sr->load_interval_ms;
        if (sr->events && sr->n_active > 0)
            kv_events_wait(sr->events, min_cursor, wait_ms);
        else {
            struct timespec ts = {0, (long)wait_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < sr->n_active; i++) sr_sub_end(&sr->subs[i]);
    sr->n_active = 0;
    buf_fini(&b);
    return NULL;
}

/* ---- lifecycle and handlers -------------------------------------------------------------------- */

int serve_router_start(const struct serve_router_cfg *cfg, struct serve_router **out)
{
    struct serve_router *sr = calloc(1, sizeof(*sr));
    if (!sr) return ERR_NOMEM;
    sr->model_name = cfg->model_name;
    sr->auth = cfg->auth;
    sr->block_size = cfg->block_size;
    sr->load_interval_ms = cfg->load_interval_ms > 0 ? cfg->load_interval_ms : 250;
    sr->events = cfg->events;
    sr->loop = cfg->loop;
    pthread_mutex_init(&sr->mu, NULL);
    pthread_condattr_t ca; /* sr_deadline_in's deadlines are on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sr->cond, &ca);
    pthread_condattr_destroy(&ca);
    buf_init(&sr->tokenizer, SR_TOKENIZER_MAX);
    int rc = serve_router_tokenizer_doc(cfg, &sr->tokenizer);
    if (rc) goto fail;
    rc = ERR_NOMEM;
    json_t *hello =
        json_pack("{s:s,s:s,s:i,s:s,s:b,s:i}", "type", "hello", "model", cfg->model_name,
                  "block_size", cfg->block_size, "hash", PREFIX_CACHE_HASH_NAME, "prefix_caching",
                  cfg->events != NULL, "kv_blocks", cfg->kv_blocks);
    char *line = hello ? json_dumps(hello, JSON_COMPACT) : NULL;
    json_decref(hello);
    if (!line) goto fail;
    size_t ll = strlen(line);
    sr->hello = malloc(ll + 2);
    if (sr->hello) memcpy(sr->hello, line, ll), memcpy(sr->hello + ll, "\n", 2);
    free(line);
    if (!sr->hello) goto fail;
    if (pthread_create(&sr->thread, NULL, sr_main, sr) != 0) {
        rc = ERR_NOMEM;
        goto fail;
    }
    sr->started = true;
    *out = sr;
    return 0;
fail:
    serve_router_free(sr);
    return rc;
}

void serve_router_stop(struct serve_router *sr)
{
    if (!sr) return;
    pthread_mutex_lock(&sr->mu);
    sr->stop = true;
    pthread_cond_signal(&sr->cond);
    pthread_mutex_unlock(&sr->mu);
    if (sr->started) pthread_join(sr->thread, NULL);
    sr->started = false;
    /* Streams handed over after the thread's last look (it takes pending ones before it stops). */
    pthread_mutex_lock(&sr->mu);
    for (int i = 0; i < sr->n_pending; i++) http_stream_end(sr->pending[i]);
    sr->n_pending = 0;
    pthread_mutex_unlock(&sr->mu);
}

void serve_router_free(struct serve_router *sr)
{
    if (!sr) return;
    serve_router_stop(sr);
    pthread_cond_destroy(&sr->cond);
    pthread_mutex_destroy(&sr->mu);
    buf_fini(&sr->tokenizer);
    free(sr->hello);
    free(sr);
}

int serve_router_subscribers(struct serve_router *sr)
{
    return sr ? atomic_load(&sr->n_subs) : 0;
}

/* 503 while loading, 401 without the key; true when the request may go on. */
static bool sr_admit(const struct serve_router *sr, struct http_req *req)
{
    if (!sr) {
        static const struct http_header ra = {"Retry-After", "5"};
        static const char body[] = "{\"error\":{\"message\":\"the model is still loading; retry "
                                   "shortly\",\"type\":\"server_error\",\"param\":null,"
                                   "\"code\":null}}";
        http_respond(req, 503, "application/json", body, sizeof(body) - 1, &ra, 1);
        return false;
    }
    if (!sr->auth) return true;
    char value[SERVE_AUTH_MAX_KEY + 64];
    int n = http_req_header(req, "Authorization", value, sizeof(value));
    enum serve_auth_result why = n >= 0 ? serve_auth_check(sr->auth, value, (size_t)n, NULL)
                                 : n == ERR_NOT_FOUND ? SERVE_AUTH_MISSING
                                                      : SERVE_AUTH_WRONG;
    if (why == SERVE_AUTH_OK) return true;
    serve_auth_log_failure(sr->auth, why, http_req_path(req));
    http_respond_error(req, 401, "invalid_request_error", "Incorrect API key provided");
    return false;
}

void serve_router_tokenizer(const struct serve_router *sr, struct http_req *req)
{
    if (!sr_admit(sr, req)) return;
    http_respond(req, 200, "application/octet-stream", sr->tokenizer.data, sr->tokenizer.len, NULL,
                 0);
}

void serve_router_events(struct serve_router *sr, struct http_req *req)
{
    if (!sr_admit(sr, req)) return;
    if (atomic_fetch_add(&sr->n_subs, 1) >= SR_MAX_SUBS) {
        atomic_fetch_sub(&sr->n_subs, 1);
        http_respond_error(req, 503, "server_error", "too many event subscribers");
        return;
    }
    struct http_stream *s = http_req_defer(req);
    if (!s) {
        atomic_fetch_sub(&sr->n_subs, 1);
        return;
    }
    if (http_stream_begin(s, 200, "application/x-ndjson", NULL, 0) != 0) {
        http_stream_abort(s);
        atomic_fetch_sub(&sr->n_subs, 1);
        return;
    }
    pthread_mutex_lock(&sr->mu);
    if (sr->stop) {
        pthread_mutex_unlock(&sr->mu);
        http_stream_end(s); /* stopping: an empty stream, the reader reconnects elsewhere */
        atomic_fetch_sub(&sr->n_subs, 1);
        return;
    }
    sr->pending[sr->n_pending++] = s; /* n_subs bounds pending + active by SR_MAX_SUBS */
    pthread_cond_signal(&sr->cond);
    pthread_mutex_unlock(&sr->mu);
}
