/* Scraping engine /metrics: fetch many endpoints in parallel (libcurl multi, per-scrape timeout,
 * bounded bodies) and extract the contract metrics (common/metric_names.h) of one engine into a
 * flat snapshot. No Kubernetes here and no rates: signals.c turns two snapshots into rates. */
#ifndef CINFER_AUTOSCALER_SCRAPE_H
#define CINFER_AUTOSCALER_SCRAPE_H

#include "autoscaler/policy.h"
#include "common/prom/prom.h"

#include <stdbool.h>
#include <stddef.h>

/* Which values a snapshot holds (bit set in scrape_metrics.have). */
enum {
    SCRAPE_HAVE_RUNNING = 1u << 0,
    SCRAPE_HAVE_WAITING = 1u << 1,
    SCRAPE_HAVE_KV = 1u << 2,
    SCRAPE_HAVE_PREFIX = 1u << 3, /* both queries and hits */
    SCRAPE_HAVE_PROMPT = 1u << 4,
    SCRAPE_HAVE_GEN = 1u << 5,
    SCRAPE_HAVE_REQUESTS = 1u << 6,
    SCRAPE_HAVE_TTFT = 1u << 7,
    SCRAPE_HAVE_PREFILL = 1u << 8, /* cinfer_requests_waiting_prefill_tokens */
    SCRAPE_HAVE_ITL = 1u << 9,
};

#define SCRAPE_MAX_BUCKETS POLICY_HIST_MAX

/* The contract metrics of one engine at one instant. Values of series with several model_name
 * (or finished_reason) labels are summed; histograms use the first series. */
struct scrape_metrics {
    unsigned have; /* SCRAPE_HAVE_* */
    double running, waiting, kv_usage;
    double prefill_waiting; /* prompt tokens not yet prefilled */
    double prefix_queries, prefix_hits;
    double prompt_tokens, gen_tokens;
    double requests;         /* cinfer_requests_total over every finished_reason */
    struct policy_hist ttft; /* cumulative buckets since the engine started; the last le +Inf */
    struct policy_hist itl;
};

/* Fills *out from a parsed exposition (borrowed). Each value is read from its cinfer_* name, or
 * from the vLLM twin when the native name is absent. Values that are NaN, negative or (for the KV
 * ratio) above 1 are treated as absent. A histogram without a +Inf bucket or with more than
 * SCRAPE_MAX_BUCKETS buckets is absent. Pure; any thread. */
void scrape_extract(const struct prom_exposition *e, struct scrape_metrics *out);

/* Parses a body (borrowed, `len` bytes, bounded by `max_body`) and extracts it into *out. Returns
 * 0, or ERR_PARSE / ERR_TOO_BIG / ERR_NOMEM with the parser's message in `err`. A body that parses
 * but holds none of the contract metrics returns 0 with out->have == 0. Any thread. */
int scrape_parse_body(const char *body, size_t len, size_t max_body, struct scrape_metrics *out,
                      char *err, size_t errlen);

/* One endpoint to scrape and what came back. */
struct scrape_target {
    const char *url; /* borrowed: "http://10.0.0.7:8000/metrics" */
    /* results, written by scrape_run */
    int rc;           /* 0, ERR_TIMEOUT, ERR_HTTP (status != 200), ERR_TOO_BIG, ERR_IO, ERR_PARSE */
    long http_status; /* 0 when no answer */
    char error[160];  /* "" on success, else one line for logs */
    struct scrape_metrics metrics; /* valid when rc == 0 */
};

struct scrape_opts {
    long timeout_ms; /* whole exchange per target; 0 = 2000 */
    size_t max_body; /* per body; 0 = 4 MiB */
};

/* Scrapes every target in parallel (one libcurl multi handle, at most 128 connections open at
 * once; the rest wait for a free one within their own timeout) and writes
 * each target's results. Returns 0 when the scrape round ran (individual targets may have failed:
 * see their rc), or ERR_NOMEM / ERR_INTERNAL when libcurl could not be set up. Returns early with
 * ERR_CANCELLED on shutdown. Any thread (uses no shared state; curl_global_init must have run, as
 * the process's first libcurl call does). */
int scrape_run(struct scrape_target *targets, size_t n, const struct scrape_opts *opts);

#endif
