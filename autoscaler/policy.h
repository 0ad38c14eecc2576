/* Scaling policy: pure functions from observed signals to a desired replica count, shared by the
 * control loop (autoscaler/loop.c) and the simulator (autoscaler/sim/) so that the simulator
 * benchmarks exactly the code that runs in production. No I/O, no clock: time is an input.
 *
 * Two ways to say what "enough replicas" means, combined by taking the maximum:
 *  - Objectives (spec.scaling.objectives: TTFT and/or inter-token latency at a percentile). A
 *    capacity model (policy_objective.c, policy_curve.c) learns, per InferenceService, how much
 *    work one replica carries while the objective holds, and the recommendation is the work
 *    arriving now (with the typical rise within the horizon and burst headroom, policy_burst.c)
 *    plus the prefill work queued, over that capacity. The default whenever an objective is set.
 *  - Explicit targets (queue depth, KV usage per replica): the HorizontalPodAutoscaler's algorithm
 *    (k8s.io/kubernetes/pkg/controller/podautoscaler): per metric desired = ceil(current * usage /
 *    target), skipped inside the tolerance (10%), unready pods counted as the HPA counts them.
 *    Without an objective and without targets, the HPA defaults apply (queue depth 2, KV 0.7).
 * Then min/max, the scale-up / scale-down rate policies and stabilisation windows (up 0 s, down
 * start-up + interval by default, policy_down_window) over the recommendation history; a fresh
 * state counts the current replicas as its first recommendation. Missing metrics never cause a
 * scale-down.
 * Predictive adds forecasts of the arrival rate (forecast.h) at a horizon of pod start-up plus one
 * interval, through the same capacity model: max(reactive, predictive) for scale-up; it never
 * scales down on a forecast alone. */
#ifndef CINFER_AUTOSCALER_POLICY_H
#define CINFER_AUTOSCALER_POLICY_H

#include <stdbool.h>
#include <stddef.h>

enum policy_kind { POLICY_STATIC = 0, POLICY_REACTIVE, POLICY_PREDICTIVE, POLICY_EXTERNAL };

#define POLICY_HIST_MAX 64 /* buckets of one latency histogram (the engine exports 20-23) */

/* A latency histogram over one interval: cumulative counts of observations <= le[i], le ascending,
 * the last le +Inf. n == 0: nothing observed (or no pod exports it). */
struct policy_hist {
    size_t n;
    double le[POLICY_HIST_MAX];
    double count[POLICY_HIST_MAX];
};

/* Observations in `h` (its +Inf bucket). */
double policy_hist_total(const struct policy_hist *h);
/* Observations above `x` seconds, interpolating linearly inside the bucket that holds x (as
 * Prometheus' histogram_quantile does); 0 when empty. Pure. */
double policy_hist_above(const struct policy_hist *h, double x);
/* The q-quantile (0 < q < 1) as histogram_quantile computes it, or -1 when empty. Pure. */
double policy_hist_quantile(const struct policy_hist *h, double q);

/* One scrape interval's signals for one InferenceService, aggregated over its ready pods. */
struct policy_signals {
    double time_s;           /* when observed (monotonic seconds) */
    int ready_pods;          /* pods whose metrics were scraped this interval */
    int unready_pods;        /* pods that exist but are not ready or failed to scrape */
    bool metrics_ok;         /* false: no usable metrics this interval (never scale down then) */
    double waiting;          /* sum of requests waiting (queue depth) */
    double running;          /* sum of requests running */
    double kv_usage;         /* mean KV-cache usage ratio 0..1 over ready pods */
    double prefix_hit_rate;  /* prefix-cache hits / queries over the interval, 0..1 */
    double arrival_rate;     /* requests/s arriving over the interval (from counter deltas) */
    double prompt_tok_rate;  /* prompt tokens/s */
    double gen_tok_rate;     /* generated tokens/s */
    double ttft_p99_s;       /* TTFT p99 over the interval from histogram deltas, or < 0 if none */
    double prefill_waiting;  /* prompt tokens not yet prefilled, summed over ready pods
                             * (cinfer_requests_waiting_prefill_tokens); < 0 when none exports it */
    struct policy_hist ttft; /* interval deltas of cinfer_time_to_first_token_seconds */
    struct policy_hist itl;  /* interval deltas of cinfer_inter_token_latency_seconds */
};

struct policy_spec {
    enum policy_kind kind;
    int min_replicas, max_replicas;
    double target_queue_depth; /* waiting requests per replica; <= 0 disables the metric */
    double target_kv_usage;    /* 0..1 per replica; <= 0 disables */
    double tolerance;          /* 0.1 */
    double scale_up_window_s;  /* stabilisation window for scale-up (0) */
    /* Stabilisation window for scale-down (scaleDownDelaySeconds); POLICY_DOWN_WINDOW_AUTO (the
     * default) derives it from the start-up: see policy_down_window(). */
    double scale_down_window_s;
    /* Rate policies (HPA defaults: up max(4 pods, 100%) per 15 s; down 100% per 15 s). */
    int up_pods_per_period;
    double up_percent_per_period;
    int down_pods_per_period;
    double down_percent_per_period;
    double period_s;
    /* Objectives (spec.scaling.objectives); both latencies 0 = no objective (targets only). */
    double objective_ttft_s;     /* time to first token at the percentile (0 = none) */
    double objective_itl_s;      /* inter-token latency at the percentile (0 = none) */
    double objective_percentile; /* 0.99: at most 1% of first tokens / token gaps above */
    /* Predictive and the capacity model */
    double startup_s;    /* pod start-up time (model load) */
    double interval_s;   /* scrape / decision interval */
    double season_s;     /* seasonal period for Holt-Winters; 0 = Holt's damped trend only */
    double capacity_rps; /* configured per-replica request capacity; 0 = learn it */
    /* Added with policy.c (defaults in policy_spec_defaults): */
    double headroom;            /* predictive plans for this fraction of learned capacity (0.9) */
    double prefill_cost_ratio;  /* cost of one uncached prompt token relative to one generated
                                  * token (0.35 = 700 decode tok/s / 2000 prefill tok/s) */
    int forecast_fit_intervals; /* > 0: after this many intervals, refit the forecast's
                                 * parameters by grid search over them (forecast_fit); 0 keeps
                                 * the fixed defaults of forecast.h (0) */
};

/* The default scale-down window: a replica is kept as long as a new one would take to be ready
 * again (start-up + one interval), at least a minute, not the HPA's five minutes: at 120 s
 * start-up the five minutes cost 12-14% more replica-seconds for the same violations
 * (autoscaler/BENCHMARKS.md). */
#define POLICY_DOWN_WINDOW_AUTO (-1.0)
#define POLICY_DOWN_WINDOW_MIN  60.0

/* The scale-down window in effect for `spec` (seconds). Pure. */
double policy_down_window(const struct policy_spec *spec);

/* Fills `spec` with the defaults above for `kind` (no objective; queue depth 2 and KV 0.7 targets). */
void policy_spec_defaults(struct policy_spec *spec, enum policy_kind kind);

/* True when `spec` sets a TTFT or inter-token objective. */
bool policy_spec_has_objective(const struct policy_spec *spec);

struct policy_state; /* per-InferenceService history: recommendations, forecasts, capacity */

/* Returns new state or NULL. */
struct policy_state *policy_state_new(const struct policy_spec *spec);
void policy_state_free(struct policy_state *st); /* NULL-safe */

/* How the objective fared over the last intervals (smoothed, see policy_objective.c). */
enum policy_objective_state {
    POLICY_OBJECTIVE_NONE = 0,   /* no objective set */
    POLICY_OBJECTIVE_UNKNOWN,    /* too few observations yet */
    POLICY_OBJECTIVE_MET,        /* at most (1 - percentile) of observations above the objective */
    POLICY_OBJECTIVE_MISSED,     /* more than that */
    POLICY_OBJECTIVE_INFEASIBLE, /* missed even on lightly loaded replicas: prompts whose prefill
                                  * alone exceeds the objective; the policy aims at that floor */
};

/* Status name of a state ("Met", "Missed", ...); static string. */
const char *policy_objective_state_name(enum policy_objective_state s);

struct policy_decision {
    int desired;         /* replicas to set (already clamped, stabilised, rate limited) */
    int reactive;        /* the reactive recommendation before stabilisation */
    int predictive;      /* the predictive recommendation (or 0 when not predictive) */
    double forecast_rps; /* forecast arrival rate at the horizon */
    double capacity_rps; /* per-replica capacity in use (requests/s) */
    /* The objective and the capacity model, for status.autoscaling (0 / -1 when unknown). */
    enum policy_objective_state objective;
    double ttft_s, itl_s;       /* observed at the objective percentile (smoothed); -1 unknown */
    double ttft_over, itl_over; /* smoothed fraction of observations above the objective */
    double capacity_work;       /* learned work/s per replica while the objective holds */
    double load_work;           /* work/s arriving now (served or offered, the larger) */
    double backlog_work;        /* queued prefill work, in work units */
    double headroom;            /* planned load over the smoothed load (burst headroom), >= 1 */
    double burst_share;         /* share of the recent work that arrived in bursts */
    double burst_amplitude;     /* typical peak of past bursts over the load before them; 0 none */
    /* What bounded the decision: POLICY_LIMIT_* (a static string), or NULL when nothing did. */
    const char *limit;
    char reason[160]; /* one line for status.autoscaling.reason and the Event */
};

#define POLICY_LIMIT_MAX       "max replicas"
#define POLICY_LIMIT_MIN       "min replicas"
#define POLICY_LIMIT_UP_RATE   "scale-up rate limit"
#define POLICY_LIMIT_DOWN_RATE "scale-down rate limit"

/* Feeds one interval's signals and decides, given the current replica count. Not thread-safe per
 * state; different states are independent. */
void policy_decide(struct policy_state *st, const struct policy_signals *sig, int current,
                   struct policy_decision *out);

#endif
