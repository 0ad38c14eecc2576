/* Objective judgement and the capacity model (policy_priv.h): how much work one replica carries
 * while the latency objective holds, learned per InferenceService from the engines' counters and
 * latency histograms. Pure arithmetic: no clock, no I/O.
 *
 * Judgement. Each interval's TTFT and inter-token histograms (deltas, as the engine exports them)
 * give the observations above the objective. Counts are smoothed (EWMA, time constant 45 s:
 * three 15 s intervals), since an interval of 75 first tokens cannot tell 1% from 2%: the
 * objective is MET when at most floor + (1 - percentile) of the smoothed observations are above
 * it, MISSED otherwise. The floor is the share above in light intervals (queued prefill drains in
 * under half the objective): prompts whose prefill alone exceeds the TTFT objective violate it at
 * any replica count, so when the floor exceeds the budget the objective is INFEASIBLE and the
 * policy aims at floor + budget instead of scaling to maxReplicas for nothing.
 *
 * Capacity. work = generated tokens + prefill_cost_ratio x prompt tokens missing the prefix cache
 * (the hit rate is measured). Every judged interval adds its observations to the violation curve
 * (policy_curve.c) at the smoothed offered work per ready replica (the larger of this interval's
 * and the last one's: queues seen now were built then); the capacity is where the curve crosses
 * the aim. Until loads above it were seen missing it is a lower bound, 5% past the load most
 * observations were seen at: it may lower the fleet, and raise it only when the objective is
 * under threat. A crossing once seen stays a ceiling that relaxes slowly.
 *
 * Plan. Replicas = (smoothed offered load x its median rise within the horizon, or the current
 * load when the objective is under threat, or the burst headroom of policy_burst.c, the largest,
 * + queued prefill work drained over the horizon) / capacity. */
#include "autoscaler/policy_priv.h"

#include "common/prom/prom.h"

#include <math.h>
#include <stdio.h>

/* Smoothing time constants (EWMA weights follow from the interval: 1 - e^(-interval / tau), so
 * a 1 s interval judges on as many observations as a 15 s one). */
#define MIX_TAU_S          150 /* work and prompt per request, hit rate (alpha 0.1 at 15 s) */
#define JUDGE_TAU_S        45  /* observation counts for the objective judgement; the load (0.28) */
#define TYPICAL_TAU_S      300 /* no objective: TTFT p99 while the targets hold (0.05) */
#define LEARN_TAU_S        67  /* no objective: capacity towards an observed bound (0.2) */
#define TARGETS_PROBE_LOAD 0.7 /* no objective: probe upwards when loaded at this fraction */
#define TARGETS_PROBE_STEP 0.02
#define FLOOR_DECAY_S      7200  /* the floor's observations weigh about the last two hours */
#define FLOOR_MIN_OBS      200.0 /* observations in light intervals before the floor counts */
#define RISE_QUANTILE      0.5   /* plan for this quantile of the rises within one horizon */
#define CEILING_RELAX      0.002 /* a crossing seen once relaxes this much per interval */
#define MIN_JUDGED         20.0  /* smoothed observations needed before judging */
#define COMFORT                                                                                    \
    0.25 /* a lower bound probes further while violations over the floor
                                  * stay under this share of the budget */

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

/* The EWMA weight of one interval for time constant `tau_s`. */
static double alpha(const struct policy_spec *sp, double tau_s)
{
    return 1 - exp(-(sp->interval_s > 0 ? sp->interval_s : 15) / tau_s);
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
 * quantile. */
static void judge(const struct policy_hist *h, double objective, double pct, double a, double *n,
                  double *over, double *q, bool first)
{
    double tot = policy_hist_total(h);
    double above = tot > 0 ? policy_hist_above(h, objective) : 0;
    *n = ewma(*n, tot > 0 ? tot : 0, a, first);
    *over = ewma(*over, above, a, first);
    double qv = tot > 0 ? policy_hist_quantile(h, pct) : -1;
    if (qv >= 0) *q = ewma(*q, qv, a, *q <= 0);
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
        c->p99_typical =
            ewma(c->p99_typical, sig->ttft_p99_s, alpha(sp, TYPICAL_TAU_S), c->p99_typical <= 0);
    bool ok = c->p99_typical > 0 && sig->ttft_p99_s <= c->p99_typical;
    if (ok && content) {
        if (per_pod > c->cap_work)
            c->cap_work = ewma(c->cap_work, per_pod, alpha(sp, LEARN_TAU_S), c->cap_work <= 0);
        else if (per_pod >= TARGETS_PROBE_LOAD * c->cap_work)
            c->cap_work *= 1 + TARGETS_PROBE_STEP;
    } else if (!ok && !content) {
        c->cap_work = ewma(c->cap_work, per_pod, alpha(sp, LEARN_TAU_S), c->cap_work <= 0);
    }
}

/* Adds the interval to the curve of one objective and reads it at the aim. */
static void learn(struct policy_curve *curve, const struct policy_spec *sp, double per_pod,
                  double n, double over, double aim, struct policy_curve_fit *fit)
{
    if (n > 0) policy_curve_add(curve, per_pod, n, over, sp->interval_s);
    policy_curve_read(curve, aim, fit);
}

void policy_capacity_observe(struct policy_capacity *c, const struct policy_spec *sp,
                             const struct policy_signals *sig)
{
    if (!sig->metrics_ok || sig->ready_pods <= 0) return;
    double hit = sig->prefix_hit_rate >= 0 && sig->prefix_hit_rate <= 1 ? sig->prefix_hit_rate : 0;
    double amix = alpha(sp, MIX_TAU_S), aj = alpha(sp, JUDGE_TAU_S);
    c->hit_rate = ewma(c->hit_rate, hit, amix, !c->hit_seen);
    c->hit_seen = true;
    double ratio = sp->prefill_cost_ratio;
    double prompt =
        isfinite(sig->prompt_tok_rate) && sig->prompt_tok_rate > 0 ? sig->prompt_tok_rate : 0;
    double gen = isfinite(sig->gen_tok_rate) && sig->gen_tok_rate > 0 ? sig->gen_tok_rate : 0;
    double work = gen + ratio * prompt * (1 - hit);
    double arr = isfinite(sig->arrival_rate) && sig->arrival_rate > 0 ? sig->arrival_rate : 0;
    if (arr > 0 && work > 0) {
        c->work_per_req = ewma(c->work_per_req, work / arr, amix, c->work_per_req <= 0);
        c->prompt_per_req = ewma(c->prompt_per_req, prompt / arr, amix, c->prompt_per_req <= 0);
    }
    /* Offered load: served work lags arrivals when replicas are saturated. */
    c->load_work = fmax(work, arr * c->work_per_req);
    c->load_s = ewma(c->load_s, c->load_work, aj, c->load_s <= 0);
    double gen_per_req = fmax(0, c->work_per_req - ratio * c->prompt_per_req * (1 - c->hit_rate));
    double waiting = isfinite(sig->waiting) && sig->waiting > 0 ? sig->waiting : 0;
    double pending = sig->prefill_waiting >= 0 && isfinite(sig->prefill_waiting)
                         ? sig->prefill_waiting
                         : waiting * c->prompt_per_req;
    c->backlog_work = ratio * pending * (1 - c->hit_rate) + waiting * gen_per_req;
    double per_pod = c->load_work / sig->ready_pods;

    if (!policy_spec_has_objective(sp)) {
        c->state = POLICY_OBJECTIVE_NONE;
        observe_targets(c, sp, sig, work / sig->ready_pods);
        return;
    }
    double budget = budget_of(sp), pct = 1 - budget;
    double interval = sp->interval_s > 0 ? sp->interval_s : 15;
    int h = (int)ceil((sp->startup_s + interval) / interval - 1e-9);
    /* Bursts are seen in arrivals (served work lags them, then drains a backlog). */
    double offered = arr * c->work_per_req;
    c->arrive_s = ewma(c->arrive_s, offered, aj, c->arrive_s <= 0);
    /* The EWMA is seeded with its first value, whose weight after k intervals is e^(-k interval /
     * tau): rises from the warm-up count with the measurements' share of their start. */
    policy_burst_observe(&c->burst, c->arrive_s, offered, h, JUDGE_TAU_S / interval, interval);
    bool first = c->state == POLICY_OBJECTIVE_NONE;
    double frac = 0, n = 0;
    if (sp->objective_ttft_s > 0) {
        judge(&sig->ttft, sp->objective_ttft_s, pct, aj, &c->ttft_n, &c->ttft_over, &c->ttft_q,
              first);
        if (c->ttft_n > 0) frac = c->ttft_over / c->ttft_n;
        n = c->ttft_n;
    }
    if (sp->objective_itl_s > 0) {
        judge(&sig->itl, sp->objective_itl_s, pct, aj, &c->itl_n, &c->itl_over, &c->itl_q, first);
        if (c->itl_n > 0) frac = fmax(frac, c->itl_over / c->itl_n);
        n = fmax(n, c->itl_n);
    }
    /* The curve's abscissa is what the fleet is planned with: the smoothed offered load per ready
     * replica (so the noise around it is part of the share it shows), the larger of this
     * interval's and the last one's (queues seen now were built then). */
    double xs = c->load_s / sig->ready_pods;
    double x = fmax(xs, c->last_x);
    c->last_x = xs;
    /* Light: the queued prefill drains in under half the objective, in this interval and the
     * last one (a first token now may have queued through the last interval: after a burst the
     * queue is gone before the requests that waited in it are counted); what misses then is the
     * floor (prompts too long for the objective on their own), which no replica count fixes.
     * The aim is the floor plus the budget: the budget applies to what scaling can fix. Requests
     * waiting for a batch slot (under half a request per replica) make no interval light, however
     * small the backlog's estimate: a request that queued is never the floor (the estimate needs
     * minutes to learn what a new load's requests cost, and their misses must not become it). */
    double rate = fmax(c->cap_work, per_pod);
    bool light_now = rate > 0 && waiting / sig->ready_pods < 0.5 &&
                     c->backlog_work / sig->ready_pods / rate <
                         0.5 * (sp->objective_ttft_s > 0 ? sp->objective_ttft_s : 1);
    c->light_run = light_now ? (c->light_run < 2 ? c->light_run + 1 : 2) : 0;
    bool light = c->light_run >= 2;
    double fd = exp(-interval / FLOOR_DECAY_S);
    struct policy_curve_fit ft = {0}, fi = {0};
    double cap = 0, aim = budget;
    bool confirmed = false;
    if (sp->objective_ttft_s > 0) {
        double tot = policy_hist_total(&sig->ttft);
        double above = tot > 0 ? policy_hist_above(&sig->ttft, sp->objective_ttft_s) : 0;
        c->floor_n = c->floor_n * fd + (light ? tot : 0);
        c->floor_over = c->floor_over * fd + (light ? above : 0);
        c->floor = c->floor_n >= FLOOR_MIN_OBS ? c->floor_over / c->floor_n : 0;
        aim = c->floor + budget;
        learn(&c->ttft_curve, sp, x, tot, above, aim, &ft);
        cap = ft.capacity;
        confirmed = ft.confirmed;
    }
    if (sp->objective_itl_s > 0) {
        double tot = policy_hist_total(&sig->itl);
        double above = tot > 0 ? policy_hist_above(&sig->itl, sp->objective_itl_s) : 0;
        c->ifloor_n = c->ifloor_n * fd + (light ? tot : 0);
        c->ifloor_over = c->ifloor_over * fd + (light ? above : 0);
        double ifloor = c->ifloor_n >= FLOOR_MIN_OBS ? c->ifloor_over / c->ifloor_n : 0;
        learn(&c->itl_curve, sp, x, tot, above, ifloor + budget, &fi);
        if (fi.capacity > 0 && (!(cap > 0) || fi.capacity < cap)) {
            cap = fi.capacity;
            confirmed = fi.confirmed;
        }
        if (ifloor > c->floor) c->floor = ifloor;
        aim = fmax(aim, ifloor + budget);
    }
    /* A crossing once seen stays a ceiling, relaxing 0.2% per interval (10% in about 12 minutes
     * at 15 s): the evidence of it decays or is pooled away, the cliff usually has not moved. */
    if (confirmed) {
        c->ceiling = cap;
    } else if (c->ceiling > 0) {
        c->ceiling *= 1 + CEILING_RELAX;
        if (cap >= c->ceiling) {
            cap = c->ceiling;
            confirmed = true;
        }
    }
    c->cap_work = cap;
    c->confirmed = confirmed;
    if (n / aj < MIN_JUDGED)
        c->state = POLICY_OBJECTIVE_UNKNOWN;
    else if (c->floor > budget)
        c->state = POLICY_OBJECTIVE_INFEASIBLE;
    else
        c->state = frac > aim ? POLICY_OBJECTIVE_MISSED : POLICY_OBJECTIVE_MET;
    c->frac = frac;
    c->aim = aim;
}

int policy_capacity_replicas(struct policy_capacity *c, const struct policy_spec *sp, int current,
                             char *why, size_t whylen)
{
    double cap = c->cap_work;
    if (sp->capacity_rps > 0 && c->work_per_req > 0) cap = sp->capacity_rps * c->work_per_req;
    if (!(cap > 0)) {
        snprintf(why, whylen, "capacity not learned yet");
        return -1;
    }
    double horizon = sp->startup_s + (sp->interval_s > 0 ? sp->interval_s : 15);
    /* Smoothed load (15 s of arrivals are noisy), the current one when the objective is at risk
     * (violations past half the budget over the floor: the floor itself is no risk), and the
     * burst headroom when bursts are part of the traffic. */
    bool risk = c->state == POLICY_OBJECTIVE_MISSED || c->frac > c->aim - budget_of(sp) / 2;
    double load = risk ? fmax(c->load_work, c->load_s) : c->load_s;
    /* What the load typically does before a replica ordered now is ready. */
    double rise = policy_spec_has_objective(sp) ? policy_burst_rise(&c->burst, RISE_QUANTILE) : 1;
    load *= rise;
    double burst = policy_spec_has_objective(sp) ? policy_burst_plan(&c->burst, budget_of(sp)) : 0;
    c->headroom = load > 0 && burst > load ? burst / load : 1;
    if (burst > load) load = burst;
    /* Before the crossing is seen the estimate is a lower bound of capacity, so load over it is
     * an upper bound of the replicas needed: it may lower the fleet, and raise it only when the
     * objective is under threat (violations past half the aim) or for the burst headroom. A
     * burst plans for load that is not here yet and comes faster than a start-up: waiting for
     * the threat is waiting for the burst's misses, and a bound that never saw a burst this big
     * cannot say the fleet carries it (the synthetic diurnal trace, seeds 1-5: median
     * violations 1.27% -> 0.18% at 30 s start-up, 6.12% -> 3.01% at 120 s; BENCHMARKS.md). */
    bool bound = !c->confirmed && sp->capacity_rps <= 0 && !risk;
    /* A lower bound only moves when replicas carry more than it: sized by it, the fleet never
     * does (the bound probes 5% past the load seen, less than the 10% tolerance lets the fleet
     * shrink by). While the objective holds with most of the budget to spare, the plan probes
     * one tolerance step further (never past a crossing once seen): a fleet that can shrink
     * does, and learns from the higher load per replica whether the capacity is larger. */
    bool probe = bound && c->frac <= c->floor + COMFORT * budget_of(sp);
    double work = load + c->backlog_work / horizon;
    double need = fmin(work / cap, 1e6);
    int n = (int)ceil(need - 1e-9);
    if (bound && n > current && !(c->headroom > 1)) n = current;
    /* A scale-down the bound itself asks for is no probe (and not held to one replica), unless
     * the tolerance would hold it. */
    double tol = sp->tolerance > 0 && sp->tolerance < 0.5 ? sp->tolerance : 0.1;
    double pcap = cap;
    c->probing = false;
    if (probe && current > 0 && (double)n / current >= 1 - tol - 1e-9) {
        pcap = cap / (1 - tol);
        if (c->ceiling > 0 && pcap > c->ceiling) pcap = fmax(cap, c->ceiling);
        int np = (int)ceil(fmin(work / pcap, 1e6) - 1e-9);
        /* One replica at a time, whatever the fleet (and inside the tolerance): a probe
         * learns, it is no plan to shrink by. A 10% probe of a 700-replica fleet on a bound
         * that was already close cost 1.5% violations in the 100x run; one replica cost none. */
        if (np < current) {
            n = current - 1;
            c->probing = true;
        }
    }
    snprintf(why, whylen,
             "load %.0f%s + backlog %.0f/%.0fs work/s over %.0f/replica%s (objective %s) -> %d",
             load, c->headroom > 1 ? " (burst headroom)" : "", c->backlog_work, horizon, pcap,
             c->probing ? " (probing past a lower bound)"
             : bound    ? " (a lower bound)"
                        : "",
             policy_objective_state_name(c->state), n);
    return n;
}
