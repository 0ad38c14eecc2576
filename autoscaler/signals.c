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
           ((both & SCRAPE_HAVE_TTFT) && c->n_ttft > 0 && p->n_ttft > 0 &&
            c->ttft_count[c->n_ttft - 1] < p->ttft_count[p->n_ttft - 1]);
}

/* Accumulates the TTFT bucket deltas of all pods against the bounds of the first contributing
 * pod; pods whose bounds differ are left out (a mixed-version rollout). */
struct ttft_acc {
    size_t n;
    double le[SCRAPE_MAX_BUCKETS];
    double count[SCRAPE_MAX_BUCKETS];
};

static void ttft_add(struct ttft_acc *acc, const struct scrape_metrics *p,
                     const struct scrape_metrics *c, bool reset)
{
    if (!(c->have & SCRAPE_HAVE_TTFT)) return;
    if (!reset && (!(p->have & SCRAPE_HAVE_TTFT) || p->n_ttft != c->n_ttft)) return;
    if (!reset && memcmp(p->ttft_le, c->ttft_le, c->n_ttft * sizeof(double)) != 0) return;
    if (acc->n == 0) {
        acc->n = c->n_ttft;
        memcpy(acc->le, c->ttft_le, c->n_ttft * sizeof(double));
    } else if (acc->n != c->n_ttft || memcmp(acc->le, c->ttft_le, c->n_ttft * sizeof(double))) {
        return;
    }
    for (size_t b = 0; b < c->n_ttft; b++) {
        double d = reset ? c->ttft_count[b] : c->ttft_count[b] - p->ttft_count[b];
        acc->count[b] += d > 0 ? d : 0;
    }
}

static double ttft_p99(const struct ttft_acc *acc)
{
    if (acc->n == 0) return -1;
    struct prom_bucket b[SCRAPE_MAX_BUCKETS];
    double running_max = 0;
    for (size_t i = 0; i < acc->n; i++) {
        /* Per-bucket deltas can break monotonicity by a scrape race; keep them cumulative. */
        running_max = acc->count[i] > running_max ? acc->count[i] : running_max;
        b[i] = (struct prom_bucket){.le = acc->le[i], .count = running_max};
    }
    struct prom_histogram h = {.buckets = b, .n_buckets = acc->n, .sum = NAN, .count = NAN};
    double q = prom_histogram_quantile(&h, 0.99);
    return isnan(q) ? -1 : q;
}

void signals_compute(const struct signals_pod *prev, size_t n_prev, const struct signals_pod *cur,
                     size_t n_cur, int extra_unready, double now_s, struct policy_signals *out)
{
    memset(out, 0, sizeof(*out));
    out->time_s = now_s;
    out->unready_pods = extra_unready > 0 ? extra_unready : 0;
    out->ttft_p99_s = -1;
    double kv_sum = 0, hits = 0, queries = 0;
    int kv_n = 0;
    struct ttft_acc ttft = {0};
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
        ttft_add(&ttft, pm, cm, reset);
    }
    out->kv_usage = kv_n ? kv_sum / kv_n : 0;
    out->prefix_hit_rate = queries > 0 ? fmin(1.0, hits / queries) : 0;
    out->ttft_p99_s = ttft_p99(&ttft);
}
