/* The scaling pipeline of policy.h: the objective-driven recommendation (policy_objective.c), the
 * HorizontalPodAutoscaler's algorithm for explicit targets, transcribed from
 * k8s.io/kubernetes pkg/controller/podautoscaler (replica_calculator.go calcPlainMetricReplicas,
 * horizontal.go stabilizeRecommendationWithBehaviors / convertDesiredReplicasWithBehaviorRate /
 * calculateScale{Up,Down}Limit), plus the predictive recommendation from policy_predictive.c.
 *
 * Mapping of signals to HPA pods: ready_pods are pods with metrics; unready_pods have none and
 * are what the HPA calls "missing" pods: when the metric says scale down they count as exactly at
 * target, when it says scale up they count as 0 usage (the HPA's treatment of unready pods too);
 * the tolerance and "direction flipped" checks are then redone on the adjusted ratio. */
#include "autoscaler/policy.h"
#include "autoscaler/policy_priv.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC_MAX   4096 /* recommendations kept (one per decide() within the longest window) */
#define EVENT_MAX 4096 /* scale events kept (within one rate-limit period) */

struct timed {
    double t;
    int v;
};

struct series {
    struct timed *a;
    size_t n;
};

struct policy_state {
    struct policy_spec spec;
    struct series recs;  /* raw recommendations, oldest first */
    struct series ups;   /* scale-up events: replicas added */
    struct series downs; /* scale-down events: replicas removed */
    struct policy_capacity cap;
    struct policy_predictor pred;
    bool pred_on;
};

void policy_spec_defaults(struct policy_spec *spec, enum policy_kind kind)
{
    memset(spec, 0, sizeof(*spec));
    spec->kind = kind;
    spec->min_replicas = 1;
    spec->max_replicas = 16;
    spec->target_queue_depth = 2;
    spec->target_kv_usage = 0.7;
    spec->tolerance = 0.1;
    spec->scale_up_window_s = 0;
    spec->scale_down_window_s = POLICY_DOWN_WINDOW_AUTO;
    spec->up_pods_per_period = 4;
    spec->up_percent_per_period = 100;
    spec->down_pods_per_period = 0; /* the HPA's default scale-down has only the percent policy */
    spec->down_percent_per_period = 100;
    spec->period_s = 15;
    spec->startup_s = 60;
    spec->interval_s = 15;
    spec->season_s = 0;
    spec->objective_ttft_s = 0;
    spec->objective_itl_s = 0;
    spec->objective_percentile = 0.99;
    spec->capacity_rps = 0;
    spec->headroom = 0.9;
    spec->prefill_cost_ratio = 0.35;
}

double policy_down_window(const struct policy_spec *spec)
{
    if (spec->scale_down_window_s >= 0) return spec->scale_down_window_s;
    double w = spec->startup_s + (spec->interval_s > 0 ? spec->interval_s : 15);
    return w > POLICY_DOWN_WINDOW_MIN ? w : POLICY_DOWN_WINDOW_MIN;
}

bool policy_spec_has_objective(const struct policy_spec *spec)
{
    return spec->objective_ttft_s > 0 || spec->objective_itl_s > 0;
}

struct policy_state *policy_state_new(const struct policy_spec *spec)
{
    if (!spec || spec->min_replicas < 0 || spec->max_replicas < spec->min_replicas) return NULL;
    struct policy_state *st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    st->spec = *spec;
    st->recs.a = calloc(REC_MAX, sizeof(struct timed));
    st->ups.a = calloc(EVENT_MAX, sizeof(struct timed));
    st->downs.a = calloc(EVENT_MAX, sizeof(struct timed));
    if (!st->recs.a || !st->ups.a || !st->downs.a) goto fail;
    if (spec->kind == POLICY_PREDICTIVE) {
        st->pred_on = true; /* fini also undoes a partial init */
        if (policy_predictor_init(&st->pred, spec) != 0) goto fail;
    }
    return st;
fail:
    policy_state_free(st);
    return NULL;
}

void policy_state_free(struct policy_state *st)
{
    if (!st) return;
    if (st->pred_on) policy_predictor_fini(&st->pred);
    free(st->recs.a);
    free(st->ups.a);
    free(st->downs.a);
    free(st);
}

/* Drops entries at or before `cutoff`, then appends (t, v), dropping the oldest when full. */
static void series_push(struct series *s, size_t cap, double cutoff, double t, int v)
{
    size_t keep = 0;
    while (keep < s->n && s->a[keep].t <= cutoff) keep++;
    if (s->n - keep >= cap) keep = s->n - cap + 1;
    memmove(s->a, s->a + keep, (s->n - keep) * sizeof(*s->a));
    s->n -= keep;
    s->a[s->n++] = (struct timed){t, v};
}

static int sum_after(const struct series *s, double cutoff)
{
    int sum = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->a[i].t > cutoff) sum += s->a[i].v;
    return sum;
}

static int ceil_int(double x)
{
    double c = ceil(x - 1e-9); /* 3.0000000001 from a division is 3, not 4 */
    if (c > 1e6) return 1000000;
    return c < 0 ? 0 : (int)c;
}

/* calcPlainMetricReplicas for an AverageValue target: `sum` over `ready` pods with metrics,
 * `missing` pods without. Returns the replica count this metric asks for. */
static int metric_replicas(double sum, double target, int ready, int missing, int current,
                           double tol)
{
    double ratio = sum / ready / target;
    if (missing == 0) {
        if (fabs(1.0 - ratio) <= tol) return current;
        return ceil_int(ratio * ready);
    }
    double all = ready + missing;
    double adjusted = ratio < 1.0 ? (sum / target + missing) / all : (sum / target) / all;
    if (fabs(1.0 - adjusted) <= tol || (ratio < 1.0 && adjusted > 1.0) ||
        (ratio > 1.0 && adjusted < 1.0))
        return current;
    int n = ceil_int(adjusted * all);
    if ((adjusted < 1.0 && n > current) || (adjusted > 1.0 && n < current)) return current;
    return n;
}

/* Returns the reactive recommendation, or -1 when no metric is usable (hold). */
static int reactive_replicas(const struct policy_spec *sp, const struct policy_signals *sig,
                             int current, char *why, size_t whylen)
{
    int best = -1;
    int missing = sig->unready_pods > 0 ? sig->unready_pods : 0;
    if (sp->target_queue_depth > 0 && sig->waiting >= 0) {
        int n = metric_replicas(sig->waiting, sp->target_queue_depth, sig->ready_pods, missing,
                                current, sp->tolerance);
        best = n;
        snprintf(why, whylen, "queue depth %.2f/replica (target %.2f) -> %d",
                 sig->waiting / sig->ready_pods, sp->target_queue_depth, n);
    }
    if (sp->target_kv_usage > 0 && sig->kv_usage >= 0) {
        int n = metric_replicas(sig->kv_usage * sig->ready_pods, sp->target_kv_usage,
                                sig->ready_pods, missing, current, sp->tolerance);
        if (n > best) {
            best = n;
            snprintf(why, whylen, "KV usage %.2f (target %.2f) -> %d", sig->kv_usage,
                     sp->target_kv_usage, n);
        }
    }
    if (best < 0) snprintf(why, whylen, "no usable metric");
    return best;
}

/* stabilizeRecommendationWithBehaviors: up = min over the up window, down = max over the down
 * window (both including `raw`), result = current clamped into [up, down]. Records `raw`. */
static int stabilise(struct policy_state *st, double now, int raw, int current)
{
    const struct policy_spec *sp = &st->spec;
    double up_cut = now - sp->scale_up_window_s, down_cut = now - policy_down_window(sp);
    int up = raw, down = raw;
    for (size_t i = 0; i < st->recs.n; i++) {
        const struct timed *r = &st->recs.a[i];
        if (r->t > up_cut && r->v < up) up = r->v;
        if (r->t > down_cut && r->v > down) down = r->v;
    }
    double oldest = up_cut < down_cut ? up_cut : down_cut;
    series_push(&st->recs, REC_MAX, oldest, now, raw);
    int rec = current;
    if (rec < up) rec = up;
    if (rec > down) rec = down;
    return rec;
}

/* convertDesiredReplicasWithBehaviorRate with selectPolicy Max in both directions. */
static int rate_limit(const struct policy_state *st, double now, int want, int current,
                      const char **limited)
{
    const struct policy_spec *sp = &st->spec;
    double cut = now - sp->period_s;
    int start = current - sum_after(&st->ups, cut) + sum_after(&st->downs, cut);
    *limited = NULL;
    if (want > current) {
        long lim = -1;
        if (sp->up_pods_per_period > 0) lim = (long)start + sp->up_pods_per_period;
        if (sp->up_percent_per_period > 0) {
            long p = (long)ceil(start * (1 + sp->up_percent_per_period / 100.0));
            if (p > lim) lim = p;
        }
        if (lim < current) lim = current; /* no policy, or already used up: hold */
        long hi = sp->max_replicas;
        if (hi > lim) {
            hi = lim;
            if (want > hi) *limited = POLICY_LIMIT_UP_RATE;
        } else if (want > hi) {
            *limited = POLICY_LIMIT_MAX;
        }
        return want > hi ? (int)hi : want;
    }
    if (want < current) {
        long lim = -1;
        bool any = false;
        if (sp->down_pods_per_period > 0) {
            lim = (long)start - sp->down_pods_per_period;
            any = true;
        }
        if (sp->down_percent_per_period > 0) {
            long p = (long)(start * (1 - sp->down_percent_per_period / 100.0));
            if (!any || p < lim) lim = p;
            any = true;
        }
        if (!any || lim > current) lim = current;
        long lo = sp->min_replicas;
        if (lo < lim) {
            lo = lim;
            if (want < lo) *limited = POLICY_LIMIT_DOWN_RATE;
        } else if (want < lo) {
            *limited = POLICY_LIMIT_MIN;
        }
        return want < lo ? (int)lo : want;
    }
    return want;
}

/* Truncation of the reason is fine (it is one human line); vsnprintf keeps it bounded. */
static void reasonf(struct policy_decision *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof(out->reason), fmt, ap);
    va_end(ap);
}

static void record_event(struct policy_state *st, double now, int from, int to)
{
    double cut = now - st->spec.period_s;
    if (to > from) series_push(&st->ups, EVENT_MAX, cut, now, to - from);
    if (to < from) series_push(&st->downs, EVENT_MAX, cut, now, from - to);
}

/* The objective-driven recommendation with the HPA's tolerance (no change inside 10%), or -1. */
static int objective_replicas(struct policy_state *st, const struct policy_signals *sig,
                              int current, char *why, size_t whylen)
{
    (void)sig;
    int n = policy_capacity_replicas(&st->cap, &st->spec, current, why, whylen);
    if (n < 0 || current <= 0) return n;
    double ratio = (double)n / current;
    if (n != current && !st->cap.probing && fabs(1.0 - ratio) <= st->spec.tolerance) return current;
    return n;
}

static bool has_targets(const struct policy_spec *sp)
{
    return sp->target_queue_depth > 0 || sp->target_kv_usage > 0;
}

static void report(const struct policy_state *st, struct policy_decision *out)
{
    const struct policy_capacity *c = &st->cap;
    out->objective = c->state;
    out->ttft_s = st->spec.objective_ttft_s > 0 && c->ttft_q > 0 ? c->ttft_q : -1;
    out->itl_s = st->spec.objective_itl_s > 0 && c->itl_q > 0 ? c->itl_q : -1;
    out->ttft_over = c->ttft_n > 0 ? c->ttft_over / c->ttft_n : -1;
    out->itl_over = c->itl_n > 0 ? c->itl_over / c->itl_n : -1;
    out->capacity_work = c->cap_work;
    out->load_work = c->load_work;
    out->backlog_work = c->backlog_work;
    out->headroom = c->headroom >= 1 ? c->headroom : 1;
    out->burst_share = policy_burst_share(&c->burst);
    out->burst_amplitude = c->burst.amp;
    if (out->capacity_rps <= 0) out->capacity_rps = policy_capacity_rps(c, &st->spec);
}

void policy_decide(struct policy_state *st, const struct policy_signals *sig, int current,
                   struct policy_decision *out)
{
    const struct policy_spec *sp = &st->spec;
    memset(out, 0, sizeof(*out));
    char why[128] = "", owhy[128] = "";
    double now = sig->time_s;
    if (sp->kind == POLICY_STATIC || sp->kind == POLICY_EXTERNAL) {
        out->desired = out->reactive = current;
        out->ttft_s = out->itl_s = out->ttft_over = out->itl_over = -1;
        reasonf(out, "%s policy: replicas left at %d",
                sp->kind == POLICY_STATIC ? "static" : "external", current);
        return;
    }
    /* Learning sees every interval, even those decided by the guards below. */
    policy_capacity_observe(&st->cap, sp, sig);
    int pred = st->pred_on ? policy_predictor_step(&st->pred, &st->cap, sp, sig, out) : 0;
    out->predictive = pred;
    report(st, out);
    if (current <= 0) {
        out->desired = out->reactive = 0;
        reasonf(out, "scaled to zero: autoscaling disabled");
        return;
    }
    if (current > sp->max_replicas || current < sp->min_replicas) {
        int d = current > sp->max_replicas ? sp->max_replicas : sp->min_replicas;
        out->desired = out->reactive = d;
        out->limit = current > sp->max_replicas ? POLICY_LIMIT_MAX : POLICY_LIMIT_MIN;
        record_event(st, now, current, d);
        reasonf(out, "%d replicas outside [%d, %d]: set to %d", current, sp->min_replicas,
                sp->max_replicas, d);
        return;
    }
    if (!sig->metrics_ok || sig->ready_pods <= 0) { /* the HPA skips a reconcile on errors */
        out->desired = out->reactive = current;
        reasonf(out, "metrics unavailable: holding at %d", current);
        return;
    }
    int reactive = -1;
    bool objective = policy_spec_has_objective(sp);
    if (objective) reactive = objective_replicas(st, sig, current, owhy, sizeof(owhy));
    if (!objective || has_targets(sp)) {
        int t = reactive_replicas(sp, sig, current, why, sizeof(why));
        if (t > reactive) {
            reactive = t;
        } else if (objective) {
            snprintf(why, sizeof(why), "%s", owhy);
        }
    } else {
        snprintf(why, sizeof(why), "%s", owhy);
    }
    if (reactive < 0) {
        out->desired = out->reactive = current;
        reasonf(out, "%s: holding at %d", why[0] ? why : "no usable metric", current);
        return;
    }
    out->reactive = reactive;
    int raw = reactive;
    bool from_forecast = false;
    /* As policy.h specifies: max(reactive, predictive) when the forecast asks for a scale-up;
     * scale-down only from the reactive side (the forecast never lowers the recommendation, nor
     * floors a reactive scale-down). */
    if (pred > raw && pred > current) {
        raw = pred;
        from_forecast = true;
    }
    /* As the HPA does for an autoscaler it has not seen before: the current count is the first
     * recommendation, so a (re)started autoscaler scales down only after a full window. */
    if (st->recs.n == 0) series_push(&st->recs, REC_MAX, -INFINITY, now, current);
    int stable = stabilise(st, now, raw, current);
    const char *limited;
    int desired = rate_limit(st, now, stable, current, &limited);
    out->desired = desired;
    out->limit = limited;
    record_event(st, now, current, desired);
    if (from_forecast)
        reasonf(out,
                "forecast %.2f req/s at %.0fs over %.2f req/s/replica -> %d (reactive: %s)%s%s",
                out->forecast_rps, sp->startup_s + sp->interval_s, out->capacity_rps, pred, why,
                limited ? "; " : "", limited ? limited : "");
    else if (stable != raw)
        reasonf(out, "%s; stabilised at %d%s%s", why, stable, limited ? "; " : "",
                limited ? limited : "");
    else
        reasonf(out, "%s%s%s", why, limited ? "; " : "", limited ? limited : "");
}
