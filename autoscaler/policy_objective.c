/* Objective judgement and the capacity model (policy_priv.h): how much work one replica carries
 * while the latency objective holds, learned per InferenceService from the engines' counters and
 * latency histograms. Pure arithmetic: no clock, no I/O.
 *
 * Judgement. Each interval's TTFT and inter-token histograms (deltas, as the engine exports them)
 * give the observations above the objective. Counts are smoothed (EWMA, alpha 0.3, about three
 * intervals), since an interval of 75 first tokens cannot tell 1% from 2%: the objective is MET when
 * at most (1 - percentile) of the smoothed observations are above it, MISSED otherwise. Prompts
 * whose prefill alone exceeds the TTFT objective violate it at any replica count; their share is
 * the lowest smoothed share seen (relaxing 2% per interval), and when it exceeds the
 * budget the objective is INFEASIBLE and the policy aims at that floor (x 1.5) instead of scaling
 * to maxReplicas for nothing.
 *
 * Capacity. work = generated tokens + prefill_cost_ratio x prompt tokens missing the prefix cache
 * (the hit rate is measured), per ready replica:
 *  - the first interval with traffic seeds the estimate with the observed work per replica;
 *  - objective met: the observed work is a lower bound of capacity (the estimate rises towards it,
 *    alpha 0.2, never falls); replicas loaded at >= 70% of the estimate and fine mean the estimate
 *    is probably low (the fleet was sized from it, so observed load cannot exceed it): it grows
 *    3% per such interval, 1% once the smoothed violations use half the budget;
 *  - objective missed in this interval and in the smoothed view, on loaded replicas: the work they
 *    carried is more than they can hold: the estimate moves towards it (alpha 0.2).
 * This is additive-increase, multiplicative-decrease on the capacity at the objective, so the
 * fleet settles where the objective is just met, and re-learns when the model or the prompts
 * change. */
#include "autoscaler/policy_priv.h"

#include "common/prom/prom.h"

#include <math.h>
#include <stdio.h>

#define MIX_ALPHA          0.1  /* work per request, prompt per request, hit rate */
#define JUDGE_ALPHA        0.3  /* observation counts for the objective judgement */
#define FLOOR_RELAX        0.02 /* the violation floor relaxes this much per interval */
#define LEARN_ALPHA        0.2  /* capacity towards an observed bound */
#define TYPICAL_ALPHA      0.05 /* no objective: TTFT p99 while the targets hold */
#define TARGETS_PROBE_LOAD 0.7  /* no objective: probe upwards when loaded at this fraction */
#define TARGETS_PROBE_STEP 0.02
#define PROBE_START        0.10  /* plan beyond the best load seen fine, until the first miss */
#define PROBE_FAST         0.03  /* and after it */
#define BACKOFF            0.9   /* plan at most this fraction of the load seen missing */
#define MISS_LOAD          0.8   /* a miss below this fraction of cap_lb does not bound capacity */
#define UB_RELAX           0.005 /* the upper bound relaxes this much per interval without a miss */
#define LIGHT_LOAD         0.5   /* below this fraction of capacity a replica queues little */
#define FLOOR_MARGIN       1.5 /* aim at the measured floor x this when the objective is infeasible */
#define MIN_JUDGED         20.0 /* smoothed observations needed before judging */

double policy_hist_total(const struct policy_hist *h)
{
    return h->n ? h->count[h->n - 1] : 0;
}

double policy_hist_above(const struct policy_hist *h, double x)
{
    if (h->n == 0) return 0;
    double total = h->count[h->n - 1], below = 0, lo = 0, clo = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (x < h->le[i]) {
            /* x inside (lo, le[i]]: linear within the bucket; the +Inf bucket has no width, so
             * everything in it counts as above (histogram_quantile's convention as well). */
            double frac = isinf(h->le[i]) ? 0 : (x - lo) / (h->le[i] - lo);
            below = clo + frac * (h->count[i] - clo);
            return fmax(0, total - below);
        }
        lo = h->le[i];
        clo = h->count[i];
    }
    return 0;
}

double policy_hist_quantile(const struct policy_hist *h, double q)
{
    if (h->n == 0 || !(policy_hist_total(h) > 0)) return -1;
    struct prom_bucket b[POLICY_HIST_MAX];
    for (size_t i = 0; i < h->n; i++) b[i] = (struct prom_bucket){h->le[i], h->count[i]};
    struct prom_histogram ph = {.buckets = b, .n_buckets = h->n, .sum = NAN, .count = NAN};
    double v = prom_histogram_quantile(&ph, q);
    return isnan(v) ? -1 : v;
}

const char *policy_objective_state_name(enum policy_objective_state s)
{
    switch (s) {
    case POLICY_OBJECTIVE_UNKNOWN: return "Unknown";
    case POLICY_OBJECTIVE_MET: return "Met";
    case POLICY_OBJECTIVE_MISSED: return "Missed";
    case POLICY_OBJECTIVE_INFEASIBLE: return "Infeasible";
    default: return "None";
    }
}

static double ewma(double old, double x, double a, bool first)
{
    return first ? x : old + a * (x - old);
}

static double budget_of(const struct policy_spec *sp)
{
    double p = sp->objective_percentile > 0 && sp->objective_percentile < 1
                   ? sp->objective_percentile
                   : 0.99;
    return fmax(1e-4, 1 - p);
}

double policy_capacity_rps(const struct policy_capacity *c, const struct policy_spec *spec)
{
    if (spec->capacity_rps > 0) return spec->capacity_rps;
    return c->cap_work > 0 && c->work_per_req > 0 ? c->cap_work / c->work_per_req : 0;
}

/* Smooths one latency objective's interval: observations, those above the objective, the
 * quantile. Writes this interval's fraction above to *now_frac (0 when nothing was observed). */
static void judge(const struct policy_hist *h, double objective, double pct, double *n,
                  double *over, double *q, bool first, double *now_frac)
{
    double tot = policy_hist_total(h);
    double above = tot > 0 ? policy_hist_above(h, objective) : 0;
    *n = ewma(*n, tot > 0 ? tot : 0, JUDGE_ALPHA, first);
    *over = ewma(*over, above, JUDGE_ALPHA, first);
    double qv = tot > 0 ? policy_hist_quantile(h, pct) : -1;
    if (qv >= 0) *q = ewma(*q, qv, JUDGE_ALPHA, *q <= 0);
    *now_frac = tot > 0 ? above / tot : 0;
}

/* No objective: the old gate (the targets hold and the TTFT p99 is at its typical level). */
static void observe_targets(struct policy_capacity *c, const struct policy_spec *sp,
                            const struct policy_signals *sig, double per_pod)
{
    if (sig->ttft_p99_s < 0) return;
    double qtarget = sp->target_queue_depth > 0 ? sp->target_queue_depth : 1;
    bool content = sig->waiting / sig->ready_pods <= qtarget &&
                   (sp->target_kv_usage <= 0 || sig->kv_usage <= sp->target_kv_usage);
    if (content)
        c->p99_typical = ewma(c->p99_typical, sig->ttft_p99_s, TYPICAL_ALPHA, c->p99_typical <= 0);
    bool ok = c->p99_typical > 0 && sig->ttft_p99_s <= c->p99_typical;
    if (ok && content) {
        if (per_pod > c->cap_work)
            c->cap_work = ewma(c->cap_work, per_pod, LEARN_ALPHA, c->cap_work <= 0);
        else if (per_pod >= TARGETS_PROBE_LOAD * c->cap_work)
            c->cap_work *= 1 + TARGETS_PROBE_STEP;
    } else if (!ok && !content) {
        c->cap_work = ewma(c->cap_work, per_pod, LEARN_ALPHA, c->cap_work <= 0);
    }
}

/* The capacity bounds (see the top of the file) from one interval's work per replica. */
static void learn(struct policy_capacity *c, const struct policy_spec *sp, double now,
                  double per_pod, bool missed, bool met)
{
    if (!(per_pod > 0)) return;
    bool first = c->per_pod_s <= 0;
    c->per_pod_s = ewma(c->per_pod_s, per_pod, JUDGE_ALPHA, first);
    double x = c->per_pod_s;
    if (first) c->cap_lb = x;
    if (met && x > c->cap_lb) c->cap_lb = x;
    if (missed && now >= c->hold_until && x < MISS_LOAD * c->cap_lb) {
        /* Missed well below a load seen fine: a burst of long prompts or an overload draining,
         * not capacity; only a repeated one wears the lower bound down (a slower model). */
        c->cap_lb *= BACKOFF + (1 - BACKOFF) / 2;
        c->hold_until = now + sp->startup_s + 2 * (sp->interval_s > 0 ? sp->interval_s : 15);
    } else if (missed && now >= c->hold_until) {
        /* Once per episode: the fleet resized from the new bound needs a start-up to show
         * whether it holds; a second bound meanwhile would count one overload many times. */
        c->cap_ub = c->cap_ub > 0 ? fmin(c->cap_ub, x) : x;
        c->hold_until = now + sp->startup_s + 2 * (sp->interval_s > 0 ? sp->interval_s : 15);
    }
    if (c->cap_ub > 0) {
        if (!missed) c->cap_ub *= 1 + UB_RELAX; /* probe again, slowly, after an overload */
        if (c->cap_lb > BACKOFF * c->cap_ub) c->cap_lb = BACKOFF * c->cap_ub;
        c->cap_work = fmin(c->cap_lb * (1 + PROBE_FAST), BACKOFF * c->cap_ub);
    } else {
        c->cap_work = c->cap_lb * (1 + PROBE_START);
    }
    c->confirmed = c->cap_ub > 0;
}

void policy_capacity_observe(struct policy_capacity *c, const struct policy_spec *sp,
                             const struct policy_signals *sig)
{
    if (!sig->metrics_ok || sig->ready_pods <= 0) return;
    double hit = sig->prefix_hit_rate >= 0 && sig->prefix_hit_rate <= 1 ? sig->prefix_hit_rate : 0;
    c->hit_rate = ewma(c->hit_rate, hit, MIX_ALPHA, !c->hit_seen);
    c->hit_seen = true;
    double ratio = sp->prefill_cost_ratio;
    double prompt =
        isfinite(sig->prompt_tok_rate) && sig->prompt_tok_rate > 0 ? sig->prompt_tok_rate : 0;
    double gen = isfinite(sig->gen_tok_rate) && sig->gen_tok_rate > 0 ? sig->gen_tok_rate : 0;
    double work = gen + ratio * prompt * (1 - hit);
    double arr = isfinite(sig->arrival_rate) && sig->arrival_rate > 0 ? sig->arrival_rate : 0;
    if (arr > 0 && work > 0) {
        c->work_per_req = ewma(c->work_per_req, work / arr, MIX_ALPHA, c->work_per_req <= 0);
        c->prompt_per_req =
            ewma(c->prompt_per_req, prompt / arr, MIX_ALPHA, c->prompt_per_req <= 0);
    }
    /* Offered load: served work lags arrivals when replicas are saturated. */
    c->load_work = fmax(work, arr * c->work_per_req);
    c->load_s = ewma(c->load_s, c->load_work, JUDGE_ALPHA, c->load_s <= 0);
    double gen_per_req = fmax(0, c->work_per_req - ratio * c->prompt_per_req * (1 - c->hit_rate));
    double waiting = isfinite(sig->waiting) && sig->waiting > 0 ? sig->waiting : 0;
    double pending = sig->prefill_waiting >= 0 && isfinite(sig->prefill_waiting)
                         ? sig->prefill_waiting
                         : waiting * c->prompt_per_req;
    c->backlog_work = ratio * pending * (1 - c->hit_rate) + waiting * gen_per_req;
    double per_pod = work / sig->ready_pods;

    if (!policy_spec_has_objective(sp)) {
        c->state = POLICY_OBJECTIVE_NONE;
        observe_targets(c, sp, sig, per_pod);
        return;
    }
    double budget = budget_of(sp), pct = 1 - budget;
    bool first = c->state == POLICY_OBJECTIVE_NONE;
    bool light = c->cap_work > 0 && per_pod < LIGHT_LOAD * c->cap_work &&
                 c->backlog_work < LIGHT_LOAD * c->cap_work * sig->ready_pods;
    /* The budget the fleet can be held to: the objective's, or the floor of long prompts. */
    double aim = fmax(budget, c->floor_seen ? c->floor_over * FLOOR_MARGIN : 0);
    double frac = 0, n = 0, now_t = 0, now_i = 0;
    if (sp->objective_ttft_s > 0) {
        judge(&sig->ttft, sp->objective_ttft_s, pct, &c->ttft_n, &c->ttft_over, &c->ttft_q, first,
              &now_t);
        if (c->ttft_n > 0) frac = c->ttft_over / c->ttft_n;
        n = c->ttft_n;
    }
    if (sp->objective_itl_s > 0) {
        judge(&sig->itl, sp->objective_itl_s, pct, &c->itl_n, &c->itl_over, &c->itl_q, first,
              &now_i);
        if (c->itl_n > 0) frac = fmax(frac, c->itl_over / c->itl_n);
        n = fmax(n, c->itl_n);
    }
    /* The floor: the lowest smoothed share above the objective seen so far, relaxing upwards
     * slowly. Scaling cannot go below it (prompts whose prefill alone exceeds the objective), so
     * when it exceeds the budget the policy aims at it instead of adding replicas for nothing. */
    if (n * (1 / JUDGE_ALPHA) >= MIN_JUDGED && sp->objective_ttft_s > 0) {
        double f = c->ttft_over / c->ttft_n;
        c->floor_over = c->floor_seen ? fmin(c->floor_over * (1 + FLOOR_RELAX), f) : f;
        c->floor_seen = true;
    }
    aim = fmax(budget, c->floor_seen ? c->floor_over * FLOOR_MARGIN : 0);
    bool missed = frac > aim, missed_now = fmax(now_t, now_i) > aim;
    if (n * (1 / JUDGE_ALPHA) < MIN_JUDGED)
        c->state = POLICY_OBJECTIVE_UNKNOWN;
    else if (c->floor_seen && c->floor_over > budget)
        c->state = POLICY_OBJECTIVE_INFEASIBLE;
    else
        c->state = missed ? POLICY_OBJECTIVE_MISSED : POLICY_OBJECTIVE_MET;

    c->frac = frac;
    c->aim = aim;
    /* An infeasible objective is missed at any load: only the intervals that meet the floor's aim
     * teach capacity then. */
    bool infeasible = c->state == POLICY_OBJECTIVE_INFEASIBLE;
    learn(c, sp, sig->time_s, per_pod, missed && missed_now && !light && !infeasible,
          !missed && !missed_now);
}

int policy_capacity_replicas(const struct policy_capacity *c, const struct policy_spec *sp,
                             int current, char *why, size_t whylen)
{
    double cap = c->cap_work;
    if (sp->capacity_rps > 0 && c->work_per_req > 0) cap = sp->capacity_rps * c->work_per_req;
    if (!(cap > 0)) {
        snprintf(why, whylen, "capacity not learned yet");
        return -1;
    }
    double horizon = sp->startup_s + (sp->interval_s > 0 ? sp->interval_s : 15);
    /* Smoothed load (15 s of arrivals are noisy), the current one when the objective is at risk. */
    bool risk = c->state == POLICY_OBJECTIVE_MISSED || c->frac > c->aim / 2;
    double load = risk ? fmax(c->load_work, c->load_s) : c->load_s;
    double need = (load + c->backlog_work / horizon) / cap;
    if (need > 1e6) need = 1e6;
    int n = (int)ceil(need - 1e-9);
    /* Before the first miss the estimate is a lower bound of capacity, so load over it is an
     * upper bound of the replicas needed: it may lower the fleet, and raise it only when the
     * objective is under threat (violations past half the budget). */
    bool bound = !c->confirmed && sp->capacity_rps <= 0 && !risk;
    if (bound && n > current) n = current;
    snprintf(why, whylen,
             "load %.0f + backlog %.0f/%.0fs work/s over %.0f/replica%s (objective %s) -> %d", load,
             c->backlog_work, horizon, cap, bound ? " (a lower bound)" : "",
             policy_objective_state_name(c->state), n);
    return n;
}
