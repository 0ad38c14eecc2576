/* Per-pod deltas and per-service aggregation of scraped engine metrics (see signals.h). */
#include "autoscaler/signals.h"

#include <math.h>
#include <string.h>

double signals_counter_delta(double prev, double cur)
{
    return cur < prev ? cur : cur - prev;
}

static const struct signals_pod *find_prev(const struct signals_pod *prev, size_t n_prev,
                                           const char *key)
{
    for (size_t i = 0; i < n_prev; i++)
        if (prev[i].ok && prev[i].key && key && strcmp(prev[i].key, key) == 0) return &prev[i];
    return NULL;
}

/* True when any counter of `cur` went below its value in `prev`: the engine restarted, so every
 * counter restarted together (a partial reset is not something an engine does). */
static bool restarted(const struct scrape_metrics *p, const struct scrape_metrics *c)
{
    unsigned both = p->have & c->have;
    return ((both & SCRAPE_HAVE_REQUESTS) && c->requests < p->requests) ||
           ((both & SCRAPE_HAVE_PROMPT) && c->prompt_tokens < p->prompt_tokens) ||
           ((both & SCRAPE_HAVE_GEN) && c->gen_tokens < p->gen_tokens) ||
           ((both & SCRAPE_HAVE_PREFIX) &&
            (c->prefix_queries < p->prefix_queries || c->prefix_hits < p->prefix_hits)) ||
           ((both & SCRAPE_HAVE_TTFT) && c->ttft.n > 0 && p->ttft.n > 0 &&
            c->ttft.count[c->ttft.n - 1] < p->ttft.count[p->ttft.n - 1]);
}

/* Accumulates the bucket deltas of one histogram over all pods against the bounds of the first
 * contributing pod; pods whose bounds differ are left out (a mixed-version rollout). */
static void hist_add(struct policy_hist *acc, const struct policy_hist *p,
                     const struct policy_hist *c, bool have_p, bool reset)
{
    if (c->n == 0) return;
    if (!reset && (!have_p || p->n != c->n || memcmp(p->le, c->le, c->n * sizeof(double)) != 0))
        return;
    if (acc->n == 0) {
        acc->n = c->n;
        memcpy(acc->le, c->le, c->n * sizeof(double));
    } else if (acc->n != c->n || memcmp(acc->le, c->le, c->n * sizeof(double)) != 0) {
        return;
    }
    for (size_t b = 0; b < c->n; b++) {
        double d = reset ? c->count[b] : c->count[b] - p->count[b];
        acc->count[b] += d > 0 ? d : 0;
    }
}

/* Per-bucket deltas can break monotonicity by a scrape race; keep them cumulative. */
static void hist_monotone(struct policy_hist *h)
{
    double running_max = 0;
    for (size_t i = 0; i < h->n; i++) {
        running_max = h->count[i] > running_max ? h->count[i] : running_max;
        h->count[i] = running_max;
    }
}

void signals_compute(const struct signals_pod *prev, size_t n_prev, const struct signals_pod *cur,
                     size_t n_cur, int extra_unready, double now_s, struct policy_signals *out)
{
    memset(out, 0, sizeof(*out));
    out->time_s = now_s;
    out->unready_pods = extra_unready > 0 ? extra_unready : 0;
    out->ttft_p99_s = -1;
    double kv_sum = 0, hits = 0, queries = 0, prefill = 0;
    int kv_n = 0, prefill_n = 0;
    for (size_t i = 0; i < n_cur; i++) {
        const struct signals_pod *c = &cur[i];
        const struct scrape_metrics *cm = &c->m;
        if (!c->ok || !(cm->have & (SCRAPE_HAVE_WAITING | SCRAPE_HAVE_RUNNING))) {
            out->unready_pods++;
            continue;
        }
        out->ready_pods++;
        out->metrics_ok = true;
        out->waiting += cm->waiting;
        out->running += cm->running;
        if (cm->have & SCRAPE_HAVE_KV) {
            kv_sum += cm->kv_usage;
            kv_n++;
        }
        if (cm->have & SCRAPE_HAVE_PREFILL) {
            prefill += cm->prefill_waiting;
            prefill_n++;
        }
        const struct signals_pod *p = find_prev(prev, n_prev, c->key);
        double dt = p ? c->time_s - p->time_s : 0;
        if (!p || !(dt > 0)) continue;
        const struct scrape_metrics *pm = &p->m;
        bool reset = restarted(pm, cm);
        unsigned both = reset ? cm->have : pm->have & cm->have;
        if (both & SCRAPE_HAVE_PROMPT)
            out->prompt_tok_rate +=
                (reset ? cm->prompt_tokens : cm->prompt_tokens - pm->prompt_tokens) / dt;
        if (both & SCRAPE_HAVE_GEN)
            out->gen_tok_rate += (reset ? cm->gen_tokens : cm->gen_tokens - pm->gen_tokens) / dt;
        if (both & SCRAPE_HAVE_PREFIX) {
            queries += reset ? cm->prefix_queries : cm->prefix_queries - pm->prefix_queries;
            hits += reset ? cm->prefix_hits : cm->prefix_hits - pm->prefix_hits;
        }
        if (both & SCRAPE_HAVE_REQUESTS) {
            double in_now = cm->running + cm->waiting;
            double arrivals =
                reset ? cm->requests + in_now
                      : cm->requests - pm->requests + in_now - (pm->running + pm->waiting);
            out->arrival_rate += arrivals > 0 ? arrivals / dt : 0;
        }
        hist_add(&out->ttft, &pm->ttft, &cm->ttft,
                 (pm->have & SCRAPE_HAVE_TTFT) && (cm->have & SCRAPE_HAVE_TTFT), reset);
        if (cm->have & SCRAPE_HAVE_ITL)
            hist_add(&out->itl, &pm->itl, &cm->itl, pm->have & SCRAPE_HAVE_ITL, reset);
    }
    out->kv_usage = kv_n ? kv_sum / kv_n : 0;
    out->prefix_hit_rate = queries > 0 ? fmin(1.0, hits / queries) : 0;
    out->prefill_waiting = prefill_n ? prefill : -1;
    hist_monotone(&out->ttft);
    hist_monotone(&out->itl);
    out->ttft_p99_s = policy_hist_quantile(&out->ttft, 0.99);
}
