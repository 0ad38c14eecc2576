/* One replica's own transfers (see router_proxy.h): its KV block event stream (the index and the
 * engine's load), its /health probe (eligibility), and the model's tokenizer document fetched from
 * it when the model has none yet. Reconnects with backoff; nothing here blocks. */
#include "router/router_proxy_priv.h"

#include "common/err.h"
#include "common/log.h"
#include "engine/kv/prefix_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RR_EVENTS_BACKOFF_MIN_MS 200
#define RR_EVENTS_BACKOFF_MAX_MS 5000
#define RR_EVENTS_STALL_S        5 /* engines send a load line every 250 ms */
#define RR_HEALTH_TIMEOUT_MS     2000
#define RR_TOKENIZER_MAX         (256u << 20)
#define RR_TOKENIZER_TIMEOUT_MS  60000
#define RR_TOKENIZER_RETRY_S     5.0

struct rp_replica *rp_replica_new(struct rp_model *m, const struct router_endpoint *ep,
                                  size_t index_max)
{
    struct rp_replica *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->model = m;
    snprintf(r->key, sizeof(r->key), "%s", ep->key);
    snprintf(r->url, sizeof(r->url), "%s", ep->url);
    size_t ul = strlen(r->url);
    while (ul > 0 && r->url[ul - 1] == '/') r->url[--ul] = '\0';
    r->id_hash = router_policy_hash(r->key, strlen(r->key));
    for (int t = 0; t < ROUTER_TIER_OTHER; t++) u64set_init(&r->held[t], index_max);
    router_lines_init(&r->ev_lines, ROUTER_EVENTS_MAX_LINE);
    buf_init(&r->tk_body, RR_TOKENIZER_MAX);
    r->ev_backoff_ms = RR_EVENTS_BACKOFF_MIN_MS;
    r->eng_prefill = -1;
    return r;
}

void rp_replica_stop(struct router_proxy *p, struct rp_replica *r)
{
    rp_xfer_release(p, &r->ev);
    rp_xfer_release(p, &r->hc);
    if (r->tk.easy) {
        rp_xfer_release(p, &r->tk);
        r->model->info_fetching = false;
    }
    r->index_live = false;
    for (int t = 0; t < ROUTER_TIER_OTHER; t++) u64set_clear(&r->held[t]);
    r->eng_load_known = false;
}

void rp_replica_free(struct router_proxy *p, struct rp_replica *r)
{
    if (!r) return;
    rp_replica_stop(p, r);
    for (int t = 0; t < ROUTER_TIER_OTHER; t++) u64set_fini(&r->held[t]);
    router_lines_fini(&r->ev_lines);
    buf_fini(&r->tk_body);
    free(r);
}

bool rp_replica_busy(const struct rp_replica *r)
{
    return r->inflight > 0 || r->ev.easy || r->hc.easy || r->tk.easy;
}

int rp_replica_evicts(const struct rp_replica *r, const struct router_prompt *pr, int block_size,
                      int reused)
{
    if (!r->index_live || r->kv_blocks <= 0 || block_size <= 0) return 0;
    long fresh = pr->n_blocks - reused / block_size;
    long over = (long)r->held[ROUTER_TIER_DEVICE].n + fresh - r->kv_blocks;
    if (over > fresh) over = fresh;
    return over > 0 ? (int)(over * block_size) : 0;
}

long rp_replica_queued_prefill(const struct rp_replica *r)
{
    if (r->eng_load_known && r->eng_prefill >= 0) return r->eng_prefill + r->prefill_sent;
    return r->prefill_unanswered > 0 ? r->prefill_unanswered : 0;
}

int rp_replica_cached(const struct rp_replica *r, const struct router_prompt *pr, int block_size,
                      int *offload)
{
    *offload = 0;
    if (!r->index_live || r->index_block_size != block_size) return 0;
    int k = 0;
    while (k < pr->n_blocks && u64set_has(&r->held[ROUTER_TIER_DEVICE], pr->hashes[k])) k++;
    int m = k;
    while (m < pr->n_blocks && (u64set_has(&r->held[ROUTER_TIER_HOST], pr->hashes[m]) ||
                                u64set_has(&r->held[ROUTER_TIER_DISK], pr->hashes[m]) ||
                                u64set_has(&r->held[ROUTER_TIER_DEVICE], pr->hashes[m])))
        m++;
    *offload = (m - k) * block_size;
    return k * block_size;
}

static int add_auth(struct router_proxy *p, struct rp_xfer *x)
{
    if (!p->cfg.engine_api_key) return 0;
    size_t n = strlen(p->cfg.engine_api_key) + 32;
    char *line = malloc(n);
    if (!line) return ERR_NOMEM;
    snprintf(line, n, "Authorization: Bearer %s", p->cfg.engine_api_key);
    x->headers = curl_slist_append(NULL, line);
    free(line);
    if (!x->headers) return ERR_NOMEM;
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
    return 0;
}

/* ---- the event stream ------------------------------------------------------------------------ */

static int on_event_line(void *ctx, const char *line, size_t len)
{
    struct rp_replica *r = ctx;
    static uint64_t hashes[ROUTER_EVENTS_MAX_HASHES]; /* proxy thread only */
    struct router_event ev;
    char err[160];
    int rc =
        router_events_parse(line, len, &ev, hashes, ROUTER_EVENTS_MAX_HASHES, err, sizeof(err));
    if (rc == ERR_UNSUPPORTED) return 0;
    if (rc) {
        log_warn("bad KV event line; reconnecting", LOG_S("replica", r->key), LOG_S("error", err));
        return rc;
    }
    switch (ev.type) {
    case ROUTER_EVENT_HELLO:
        if (strcmp(ev.hash, PREFIX_CACHE_HASH_NAME) != 0) {
            log_warn("engine hashes KV blocks with other rules; its cache is not indexed",
                     LOG_S("replica", r->key), LOG_S("hash", ev.hash));
            r->index_block_size = 0;
        } else {
            r->index_block_size = ev.block_size;
        }
        r->kv_blocks = (long)ev.kv_blocks;
        r->ev_backoff_ms = RR_EVENTS_BACKOFF_MIN_MS;
        break;
    case ROUTER_EVENT_SNAPSHOT:
        for (int t = 0; t < ROUTER_TIER_OTHER; t++) u64set_clear(&r->held[t]);
        r->index_full = false;
        r->index_live = r->index_block_size > 0;
        break;
    case ROUTER_EVENT_STORED:
        for (size_t i = 0; ev.tier != ROUTER_TIER_OTHER && i < ev.n_hashes; i++)
            if (u64set_add(&r->held[ev.tier], ev.hashes[i]) == ERR_TOO_BIG && !r->index_full) {
                r->index_full = true;
                log_warn("prefix index full for a replica; new blocks are not indexed",
                         LOG_S("replica", r->key), LOG_S("tier", router_tier_name(ev.tier)),
                         LOG_I("blocks", (long long)r->held[ev.tier].n));
            }
        break;
    case ROUTER_EVENT_EVICTED:
        for (size_t i = 0; ev.tier != ROUTER_TIER_OTHER && i < ev.n_hashes; i++)
            u64set_del(&r->held[ev.tier], ev.hashes[i]);
        break;
    case ROUTER_EVENT_LOAD:
        /* Our own requests are counted exactly (and at once); the line tells us what else the
         * engine carries. It lags by up to a load interval, so taking the larger of the two
         * counts would penalise a replica whose requests just finished. */
        r->eng_others =
            ev.running + ev.waiting > r->inflight ? ev.running + ev.waiting - r->inflight : 0;
        r->eng_load_known = true;
        /* The line counts what reached the engine by then; what we sent since is added on top
         * (rp_replica_queued_prefill). */
        r->eng_prefill = ev.prefill_waiting;
        r->prefill_sent = 0;
        r->load_lines++;
        break;
    }
    return 0;
}

static size_t on_events(char *data, size_t size, size_t nmemb, void *ud)
{
    struct rp_replica *r = ud;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(r->ev.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) return n; /* an error body: the transfer ends, we reconnect later */
    return router_lines_feed(&r->ev_lines, data, n, on_event_line, r) == 0 ? n : 0;
}

static void events_start(struct router_proxy *p, struct rp_replica *r, double now)
{
    r->ev = (struct rp_xfer){.kind = RP_XFER_EVENTS, .owner = r};
    CURL *e = rp_easy_new(p, &r->ev, r->url, "/cinfer/kv-events");
    if (!e || add_auth(p, &r->ev) != 0) goto fail;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_events);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)RR_EVENTS_STALL_S);
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK) goto fail;
    router_lines_fini(&r->ev_lines);
    router_lines_init(&r->ev_lines, ROUTER_EVENTS_MAX_LINE);
    r->ev_started = now;
    return;
fail:
    rp_xfer_release(p, &r->ev);
    r->ev_retry_at = now + r->ev_backoff_ms / 1000.0;
}

static void events_done(struct router_proxy *p, struct rp_replica *r, CURLcode cc)
{
    long status = 0;
    curl_easy_getinfo(r->ev.easy, CURLINFO_RESPONSE_CODE, &status);
    rp_xfer_release(p, &r->ev);
    /* A stream that worked, or the first failure of an outage, is news; the retries are not. */
    bool news = r->index_live || r->ev_backoff_ms == RR_EVENTS_BACKOFF_MIN_MS;
    LOG_AT(news ? LOG_INFO : LOG_DEBUG, "KV event stream ended", LOG_S("replica", r->key),
           LOG_I("status", status), LOG_S("error", cc == CURLE_OK ? "" : curl_easy_strerror(cc)));
    /* What we knew of its cache may be gone with it (a restart): forget it until the snapshot. */
    r->index_live = false;
    for (int t = 0; t < ROUTER_TIER_OTHER; t++) u64set_clear(&r->held[t]);
    r->eng_load_known = false;
    r->ev_retry_at = rp_now() + r->ev_backoff_ms / 1000.0;
    r->ev_backoff_ms *= 2;
    if (r->ev_backoff_ms > RR_EVENTS_BACKOFF_MAX_MS) r->ev_backoff_ms = RR_EVENTS_BACKOFF_MAX_MS;
}

/* ---- health ---------------------------------------------------------------------------------- */

static size_t discard(char *data, size_t size, size_t nmemb, void *ud)
{
    (void)data, (void)ud;
    return size * nmemb;
}

static void health_start(struct router_proxy *p, struct rp_replica *r, double now)
{
    r->hc = (struct rp_xfer){.kind = RP_XFER_HEALTH, .owner = r};
    r->hc_next = now + p->cfg.health_interval_ms / 1000.0;
    CURL *e = rp_easy_new(p, &r->hc, r->url, "/health");
    if (!e) return;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)RR_HEALTH_TIMEOUT_MS);
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK) rp_xfer_release(p, &r->hc);
}

static void health_done(struct router_proxy *p, struct rp_replica *r, CURLcode cc)
{
    long status = 0;
    curl_easy_getinfo(r->hc.easy, CURLINFO_RESPONSE_CODE, &status);
    rp_xfer_release(p, &r->hc);
    bool healthy = cc == CURLE_OK && status == 200;
    if (healthy != r->healthy)
        log_info(healthy ? "replica healthy" : "replica unhealthy", LOG_S("model", r->model->name),
                 LOG_S("replica", r->key), LOG_I("status", status),
                 LOG_S("error", cc == CURLE_OK ? "" : curl_easy_strerror(cc)));
    bool was = r->healthy;
    r->healthy = healthy;
    if (healthy) r->down_until = 0;
    if (healthy && !was) {
        r->ev_backoff_ms = RR_EVENTS_BACKOFF_MIN_MS;
        r->ev_retry_at = 0; /* a restarted engine: follow its events at once */
        rp_model_kick(p, r->model);
    } else if (!healthy && was) {
        rp_catalog_update(p, r->model);
    }
}

/* ---- the tokenizer document ------------------------------------------------------------------ */

static size_t on_tokenizer(char *data, size_t size, size_t nmemb, void *ud)
{
    struct rp_replica *r = ud;
    size_t n = size * nmemb;
    return buf_append(&r->tk_body, data, n) == 0 ? n : 0;
}

static void tokenizer_start(struct router_proxy *p, struct rp_replica *r)
{
    r->tk = (struct rp_xfer){.kind = RP_XFER_TOKENIZER, .owner = r};
    buf_reset(&r->tk_body);
    CURL *e = rp_easy_new(p, &r->tk, r->url, "/cinfer/tokenizer");
    if (!e || add_auth(p, &r->tk) != 0) goto fail;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_tokenizer);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)RR_TOKENIZER_TIMEOUT_MS);
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK) goto fail;
    r->model->info_fetching = true;
    return;
fail:
    rp_xfer_release(p, &r->tk);
    r->model->info_retry_at = rp_now() + RR_TOKENIZER_RETRY_S;
}

static void tokenizer_done(struct router_proxy *p, struct rp_replica *r, CURLcode cc)
{
    struct rp_model *m = r->model;
    long status = 0;
    curl_easy_getinfo(r->tk.easy, CURLINFO_RESPONSE_CODE, &status);
    rp_xfer_release(p, &r->tk);
    m->info_fetching = false;
    char err[256] = "";
    struct router_model_info *mi = NULL;
    int rc = ERR_HTTP;
    if (cc == CURLE_OK && status == 200)
        rc = router_model_info_parse(r->tk_body.data, r->tk_body.len, &mi, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "HTTP %ld %s", status, cc ? curl_easy_strerror(cc) : "");
    buf_fini(&r->tk_body);
    buf_init(&r->tk_body, RR_TOKENIZER_MAX);
    if (rc) {
        log_warn("cannot read the model's tokenizer; routing it by load only for now",
                 LOG_S("model", m->name), LOG_S("replica", r->key), LOG_S("error", err));
        m->info_retry_at = rp_now() + RR_TOKENIZER_RETRY_S;
        return;
    }
    router_model_info_unref(m->info);
    m->info = mi;
    log_info("model tokenizer loaded", LOG_S("model", m->name), LOG_S("replica", r->key),
             LOG_I("block_size", router_model_info_block_size(mi)),
             LOG_B("tokenizer", router_model_info_has_tokenizer(mi)));
    rp_catalog_update(p, m);
}

/* ---- timers and completions ------------------------------------------------------------------ */

void rp_replica_tick(struct router_proxy *p, struct rp_replica *r, double now)
{
    if (!r->present || !r->ready) return;
    if (!r->hc.easy && now >= r->hc_next) health_start(p, r, now);
    if (!r->ev.easy && now >= r->ev_retry_at) events_start(p, r, now);
    struct rp_model *m = r->model;
    if (!m->info && !m->info_fetching && now >= m->info_retry_at && r->healthy && !r->terminating)
        tokenizer_start(p, r);
}

void rp_replica_done(struct router_proxy *p, struct rp_xfer *x, CURLcode cc)
{
    struct rp_replica *r = x->owner;
    switch (x->kind) {
    case RP_XFER_EVENTS: events_done(p, r, cc); break;
    case RP_XFER_HEALTH: health_done(p, r, cc); break;
    case RP_XFER_TOKENIZER: tokenizer_done(p, r, cc); break;
    case RP_XFER_REQUEST: break;
    }
}
