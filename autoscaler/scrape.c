/* Parallel /metrics scrapes over one libcurl multi handle and extraction of the contract metrics
 * (see scrape.h). The body of each target is bounded while it arrives, so a misbehaving endpoint
 * costs at most max_body bytes and timeout_ms. */
#include "autoscaler/scrape.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/metric_names.h"
#include "common/shutdown.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCRAPE_DEFAULT_TIMEOUT_MS 2000
#define SCRAPE_DEFAULT_MAX_BODY   (4u << 20)
/* Open connections at once: bounds file descriptors with thousands of pods; curl queues the rest. */
#define SCRAPE_MAX_CONNECTIONS 128L

/* ------------------------------------------------------------------------------------------------
 * Extraction
 * ---------------------------------------------------------------------------------------------- */

/* Sums every series of `name`, else of `twin`; true when a usable value was found. */
static bool sum_of(const struct prom_exposition *e, const char *name, const char *twin, double *out)
{
    const char *names[2] = {name, twin};
    for (size_t i = 0; i < 2; i++) {
        double v = 0;
        if (!names[i] || prom_exposition_sum(e, names[i], NULL, 0, &v) == 0) continue;
        if (isnan(v) || v < 0 || isinf(v)) return false;
        *out = v;
        return true;
    }
    return false;
}

/* The first series of histogram `name` (else `twin`) copied into *out. */
static bool hist_of(const struct prom_exposition *e, const char *name, const char *twin,
                    struct policy_hist *out)
{
    const char *names[2] = {name, twin};
    for (size_t i = 0; i < 2; i++) {
        struct prom_histogram h = {0};
        if (prom_histogram_get(e, names[i], NULL, 0, &h) != 0) continue;
        bool ok = h.n_buckets > 0 && h.n_buckets <= SCRAPE_MAX_BUCKETS &&
                  isinf(h.buckets[h.n_buckets - 1].le) && h.buckets[h.n_buckets - 1].le > 0;
        for (size_t b = 0; ok && b < h.n_buckets; b++) {
            double c = h.buckets[b].count;
            /* Cumulative counts never decrease along le; anything else is a broken exposition. */
            if (isnan(c) || c < 0 || isinf(c) || (b > 0 && c < h.buckets[b - 1].count)) ok = false;
        }
        if (ok) {
            out->n = h.n_buckets;
            for (size_t b = 0; b < h.n_buckets; b++) {
                out->le[b] = h.buckets[b].le;
                out->count[b] = h.buckets[b].count;
            }
        }
        prom_histogram_fini(&h);
        return ok;
    }
    return false;
}

void scrape_extract(const struct prom_exposition *e, struct scrape_metrics *out)
{
    memset(out, 0, sizeof(*out));
    if (sum_of(e, METRIC_REQUESTS_RUNNING, METRIC_VLLM_REQUESTS_RUNNING, &out->running))
        out->have |= SCRAPE_HAVE_RUNNING;
    if (sum_of(e, METRIC_REQUESTS_WAITING, METRIC_VLLM_REQUESTS_WAITING, &out->waiting))
        out->have |= SCRAPE_HAVE_WAITING;
    if (sum_of(e, METRIC_KV_CACHE_USAGE, METRIC_VLLM_KV_CACHE_USAGE, &out->kv_usage) &&
        out->kv_usage <= 1.0)
        out->have |= SCRAPE_HAVE_KV;
    else
        out->kv_usage = 0;
    if (sum_of(e, METRIC_PREFIX_CACHE_QUERIES, METRIC_VLLM_PREFIX_CACHE_QUERIES,
               &out->prefix_queries) &&
        sum_of(e, METRIC_PREFIX_CACHE_HITS, METRIC_VLLM_PREFIX_CACHE_HITS, &out->prefix_hits))
        out->have |= SCRAPE_HAVE_PREFIX;
    else
        out->prefix_queries = out->prefix_hits = 0;
    if (sum_of(e, METRIC_PROMPT_TOKENS, METRIC_VLLM_PROMPT_TOKENS, &out->prompt_tokens))
        out->have |= SCRAPE_HAVE_PROMPT;
    if (sum_of(e, METRIC_GENERATION_TOKENS, METRIC_VLLM_GENERATION_TOKENS, &out->gen_tokens))
        out->have |= SCRAPE_HAVE_GEN;
    if (sum_of(e, METRIC_REQUESTS, METRIC_VLLM_REQUESTS, &out->requests))
        out->have |= SCRAPE_HAVE_REQUESTS;
    if (hist_of(e, METRIC_TIME_TO_FIRST_TOKEN, METRIC_VLLM_TIME_TO_FIRST_TOKEN, &out->ttft))
        out->have |= SCRAPE_HAVE_TTFT;
    if (hist_of(e, METRIC_INTER_TOKEN_LATENCY, METRIC_VLLM_INTER_TOKEN_LATENCY, &out->itl))
        out->have |= SCRAPE_HAVE_ITL;
    if (sum_of(e, METRIC_PREFILL_TOKENS_WAITING, NULL, &out->prefill_waiting))
        out->have |= SCRAPE_HAVE_PREFILL;
}

int scrape_parse_body(const char *body, size_t len, size_t max_body, struct scrape_metrics *out,
                      char *err, size_t errlen)
{
    struct prom_limits lim = {.max_body = max_body};
    struct prom_exposition *e = NULL;
    int rc = prom_parse(body, len, &lim, &e, err, errlen);
    if (rc) return rc;
    scrape_extract(e, out);
    prom_exposition_free(e);
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Fetching
 * ---------------------------------------------------------------------------------------------- */

struct transfer {
    struct scrape_target *t;
    CURL *easy;
    struct buf body;
    bool too_big;
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct transfer *x = ud;
    size_t n = size * nmemb;
    if (buf_append(&x->body, p, n) != 0) {
        x->too_big = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    return n;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void fail(struct scrape_target *t, int rc, const char *what)
{
    t->rc = rc;
    snprintf(t->error, sizeof(t->error), "%s", what);
}

/* Records the outcome of one finished transfer in its target. */
static void finish(struct transfer *x, CURLcode cc, size_t max_body)
{
    struct scrape_target *t = x->t;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &t->http_status);
    if (x->too_big || cc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(t->error, sizeof(t->error), "body exceeds %zu bytes", max_body);
        t->rc = ERR_TOO_BIG;
        return;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        fail(t, ERR_TIMEOUT, "timed out");
        return;
    }
    if (cc != CURLE_OK) {
        fail(t, ERR_IO, curl_easy_strerror(cc));
        return;
    }
    if (t->http_status != 200) {
        snprintf(t->error, sizeof(t->error), "HTTP status %ld", t->http_status);
        t->rc = ERR_HTTP;
        return;
    }
    char perr[128] = "";
    int rc = scrape_parse_body(x->body.data ? x->body.data : "", x->body.len, max_body, &t->metrics,
                               perr, sizeof(perr));
    if (rc) {
        snprintf(t->error, sizeof(t->error), "bad exposition: %s", perr);
        t->rc = rc == ERR_NOMEM ? ERR_NOMEM : ERR_PARSE;
        return;
    }
    t->rc = 0;
    t->error[0] = '\0';
}

int scrape_run(struct scrape_target *targets, size_t n, const struct scrape_opts *opts)
{
    long timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : SCRAPE_DEFAULT_TIMEOUT_MS;
    size_t max_body = opts && opts->max_body > 0 ? opts->max_body : SCRAPE_DEFAULT_MAX_BODY;
    for (size_t i = 0; i < n; i++) {
        targets[i].rc = ERR_CANCELLED;
        targets[i].http_status = 0;
        snprintf(targets[i].error, sizeof(targets[i].error), "not scraped");
        memset(&targets[i].metrics, 0, sizeof(targets[i].metrics));
    }
    if (n == 0) return 0;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) return ERR_INTERNAL;

    int rc = ERR_NOMEM;
    struct transfer *xs = calloc(n, sizeof(*xs));
    CURLM *multi = curl_multi_init();
    if (!xs || !multi) goto out;
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, SCRAPE_MAX_CONNECTIONS);
    for (size_t i = 0; i < n; i++) {
        struct transfer *x = &xs[i];
        x->t = &targets[i];
        buf_init(&x->body, max_body);
        x->easy = curl_easy_init();
        if (!x->easy) goto out;
        curl_easy_setopt(x->easy, CURLOPT_URL, targets[i].url);
        curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
        curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
        curl_easy_setopt(x->easy, CURLOPT_USERAGENT, "cinfer-autoscaler");
        curl_easy_setopt(x->easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_body);
        if (curl_multi_add_handle(multi, x->easy) != CURLM_OK) {
            rc = ERR_INTERNAL;
            goto out;
        }
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK) {
            rc = ERR_INTERNAL;
            goto out;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            struct transfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            if (x) finish(x, msg->data.result, max_body);
        }
        if (!running) break;
        if (shutdown_requested()) {
            rc = ERR_CANCELLED;
            goto out;
        }
        /* Bounded wait so a shutdown request is seen within 100 ms. */
        if (curl_multi_poll(multi, NULL, 0, 100, NULL) != CURLM_OK) {
            rc = ERR_INTERNAL;
            goto out;
        }
    }
    rc = 0;
out:
    if (xs) {
        for (size_t i = 0; i < n; i++) {
            if (xs[i].easy) {
                if (multi) curl_multi_remove_handle(multi, xs[i].easy);
                curl_easy_cleanup(xs[i].easy);
            }
            buf_fini(&xs[i].body);
        }
    }
    if (multi) curl_multi_cleanup(multi);
    free(xs);
    return rc;
}
