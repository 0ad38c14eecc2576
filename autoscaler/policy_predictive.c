/* Predictive half of the policy: forecasts the arrival rate at a horizon of pod start-up plus one
 * interval and converts it to replicas through a learned per-replica capacity. It only ever raises
 * the recommendation (policy.c takes max(reactive, predictive)); it never scales down on its own.
 *
 * Capacity model. Load is measured in work units: one generated token = 1, one prompt token that
 * misses the prefix cache = prefill_cost_ratio (0.35: a replica prefills ~2000 tok/s and decodes
 * ~700 tok/s at batch 16), a cached prompt token = 0. A higher hit rate thus means less work per
 * request and more requests per replica: capacity_rps = cap_work / work_per_request.
 * cap_work is learned from the engine's token counters (throughput) per ready replica:
 *  - in intervals where the objective holds (ttft_p99 <= slo, waiting per replica <= the queue
 *    target) the observed throughput is a lower bound of capacity: cap_work rises towards it
 *    (EWMA, alpha 0.2) and never falls; when the replicas already carry >= 70% of the estimate
 *    and the objective still holds, the estimate is probably low (the forecast sized the fleet
 *    from it, so observed load can never exceed it): it grows 2% per such interval. Without
 *    this probe an early low estimate over-provisions forever, since an over-provisioned fleet
 *    never shows a higher per-replica throughput;
 *  - in saturated intervals (ttft_p99 > slo and waiting per replica above the target) the replicas
 *    run flat out, so throughput is the capacity itself: cap_work moves towards it either way.
 * The recommendation plans for `headroom` (0.8) of capacity. spec->capacity_rps > 0 overrides the
 * learned value (taken at the currently observed token mix and hit rate). */
#include "autoscaler/forecast.h"
#include "autoscaler/policy_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LEARN_ALPHA   0.2
#define MIX_ALPHA     0.1
#define TYPICAL_ALPHA 0.05 /* EWMA of the interval p99 while the reactive targets hold */
#define PROBE_LOAD    0.7  /* fraction of cap_work a good interval must carry to probe upwards */
#define PROBE_STEP    0.02 /* upward probe per such interval */

int policy_predictor_init(struct policy_predictor *p, const struct policy_spec *spec)
{
    memset(p, 0, sizeof(*p));
    struct forecast_params fp;
    int season = 0;
    if (spec->season_s > 0 && spec->interval_s > 0)
        season = (int)lround(spec->season_s / spec->interval_s);
    if (season > FORECAST_MAX_SEASON) return ERR_RANGE;
    forecast_params_defaults(&fp, season);
    p->rps = forecast_new(&fp);
    if (!p->rps) return ERR_NOMEM;
    if (spec->forecast_fit_intervals > 0) {
        if (spec->forecast_fit_intervals > 100000) return ERR_RANGE;
        p->history = calloc((size_t)spec->forecast_fit_intervals, sizeof(double));
        if (!p->history) return ERR_NOMEM;
    }
    return 0;
}

void policy_predictor_fini(struct policy_predictor *p)
{
    forecast_free(p->rps);
    p->rps = NULL;
    free(p->history);
    p->history = NULL;
}

/* Keeps the warm-up window; once full, refits alpha/beta/phi(/gamma) on it and replays it into a
 * model with the fitted parameters. A failed fit keeps the defaults. */
static void maybe_fit(struct policy_predictor *p, const struct policy_spec *spec, double y)
{
    if (!p->history || p->fitted) return;
    p->history[p->n_history++] = y;
    if (p->n_history < (size_t)spec->forecast_fit_intervals) return;
    p->fitted = true;
    struct forecast_params fp;
    int season = 0;
    if (spec->season_s > 0 && spec->interval_s > 0)
        season = (int)lround(spec->season_s / spec->interval_s);
    forecast_params_defaults(&fp, season);
    struct forecast *f = NULL;
    if (forecast_fit(p->history, p->n_history, &fp) == 0 && (f = forecast_new(&fp)) != NULL) {
        for (size_t i = 0; i < p->n_history; i++) forecast_update(f, p->history[i]);
        forecast_free(p->rps);
        p->rps = f;
    }
    free(p->history);
    p->history = NULL;
}

static double ewma(double old, double x, double a, bool first)
{
    return first ? x : old + a * (x - old);
}

static void learn(struct policy_predictor *p, const struct policy_spec *spec,
                  const struct policy_signals *sig)
{
    double hit = sig->prefix_hit_rate >= 0 && sig->prefix_hit_rate <= 1 ? sig->prefix_hit_rate : 0;
    p->hit_rate = ewma(p->hit_rate, hit, MIX_ALPHA, !p->hit_seen);
    p->hit_seen = true;
    double work = sig->gen_tok_rate + spec->prefill_cost_ratio * sig->prompt_tok_rate * (1 - hit);
    if (!(work > 0) || !isfinite(work)) return;
    if (sig->arrival_rate > 0)
        p->work_per_req =
            ewma(p->work_per_req, work / sig->arrival_rate, MIX_ALPHA, p->work_per_req <= 0);
    if (sig->ready_pods <= 0 || sig->ttft_p99_s < 0) return;
    double per_pod = work / sig->ready_pods;
    double qtarget = spec->target_queue_depth > 0 ? spec->target_queue_depth : 1;
    bool content = sig->waiting / sig->ready_pods <= qtarget &&
                   (spec->target_kv_usage <= 0 || sig->kv_usage <= spec->target_kv_usage);
    /* The p99 of the intervals where the reactive targets hold: when the prompts alone put it
     * above the objective (long prompts prefill longer than the objective at any load), that
     * level, not the objective, is what "the objective holds" can mean for capacity. */
    if (content)
        p->p99_typical = ewma(p->p99_typical, sig->ttft_p99_s, TYPICAL_ALPHA, p->p99_typical <= 0);
    double objective = fmax(spec->slo_ttft_s, p->p99_typical);
    bool slo_ok = sig->ttft_p99_s <= objective;
    if (slo_ok && content) {
        if (per_pod > p->cap_work)
            p->cap_work = ewma(p->cap_work, per_pod, LEARN_ALPHA, p->cap_work <= 0);
        else if (per_pod >= PROBE_LOAD * p->cap_work)
            p->cap_work *= 1 + PROBE_STEP; /* loaded near the estimate and fine: probe upwards */
    } else if (!slo_ok && !content) {
        p->cap_work = ewma(p->cap_work, per_pod, LEARN_ALPHA, p->cap_work <= 0);
    }
}

int policy_predictor_step(struct policy_predictor *p, const struct policy_spec *spec,
                          const struct policy_signals *sig, struct policy_decision *out)
{
    if (sig->metrics_ok && isfinite(sig->arrival_rate) && sig->arrival_rate >= 0) {
        forecast_update(p->rps, sig->arrival_rate);
        maybe_fit(p, spec, sig->arrival_rate);
        learn(p, spec, sig);
    }
    if (forecast_count(p->rps) == 0) return 0;
    double interval = spec->interval_s > 0 ? spec->interval_s : 15;
    int h = (int)ceil((spec->startup_s + interval) / interval - 1e-9);
    if (h < 1) h = 1;
    if (h > 100000) h = 100000;
    /* The peak over the horizon: replicas ordered now serve every interval until it. */
    double peak = 0;
    for (int k = 1; k <= h; k++) {
        double y = forecast_predict(p->rps, k);
        if (y > peak) peak = y;
    }
    out->forecast_rps = peak;
    double cap_rps = 0;
    if (spec->capacity_rps > 0)
        cap_rps = spec->capacity_rps;
    else if (p->cap_work > 0 && p->work_per_req > 0)
        cap_rps = p->cap_work / p->work_per_req;
    out->capacity_rps = cap_rps;
    if (!(cap_rps > 0)) return 0;
    double headroom = spec->headroom > 0 && spec->headroom <= 1 ? spec->headroom : 1;
    double want = ceil(peak / (cap_rps * headroom) - 1e-9);
    if (want > 1e6) want = 1e6;
    return (int)want;
}
