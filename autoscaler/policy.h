/* Scaling policy: pure functions from observed signals to a desired replica count, shared by the
 * control loop (autoscaler/loop.c) and the simulator (autoscaler/sim*.c) so that the simulator
 * benchmarks exactly the code that runs in production. No I/O, no clock: time is an input.
 *
 * Reactive: the HorizontalPodAutoscaler's algorithm (k8s.io/kubernetes/pkg/controller/podautoscaler):
 * per metric desired = ceil(current * usage / target), skipped inside the tolerance (10%), the
 * maximum over metrics, clamped to [min, max], then scale-up / scale-down rate policies and
 * stabilisation windows (up 0 s, down 300 s by default) applied over the recommendation history.
 * Missing metrics never cause a scale-down; unready pods count as the HPA counts them.
 * Predictive: forecasts of arrival and token rates (forecast.h) at a horizon of pod start-up plus one
 * interval, divided by a learned per-replica capacity; max(reactive, predictive) for scale-up,
 * scale-down only from the reactive side. */
#ifndef CINFER_AUTOSCALER_POLICY_H
#define CINFER_AUTOSCALER_POLICY_H

#include <stdbool.h>
#include <stddef.h>

enum policy_kind { POLICY_STATIC = 0, POLICY_REACTIVE, POLICY_PREDICTIVE, POLICY_EXTERNAL };

/* One scrape interval's signals for one InferenceService, aggregated over its ready pods. */
struct policy_signals {
    double time_s;          /* when observed (monotonic seconds) */
    int ready_pods;         /* pods whose metrics were scraped this interval */
    int unready_pods;       /* pods that exist but are not ready or failed to scrape */
    bool metrics_ok;        /* false: no usable metrics this interval (never scale down then) */
    double waiting;         /* sum of requests waiting (queue depth) */
    double running;         /* sum of requests running */
    double kv_usage;        /* mean KV-cache usage ratio 0..1 over ready pods */
    double prefix_hit_rate; /* prefix-cache hits / queries over the interval, 0..1 */
    double arrival_rate;    /* requests/s arriving over the interval (from counter deltas) */
    double prompt_tok_rate; /* prompt tokens/s */
    double gen_tok_rate;    /* generated tokens/s */
    double ttft_p99_s;      /* TTFT p99 over the interval from histogram deltas, or < 0 if none */
};

struct policy_spec {
    enum policy_kind kind;
    int min_replicas, max_replicas;
    double target_queue_depth; /* waiting requests per replica; <= 0 disables the metric */
    double target_kv_usage;    /* 0..1 per replica; <= 0 disables */
    double tolerance;          /* 0.1 */
    double scale_up_window_s;  /* stabilisation window for scale-up (0) */
    double
        scale_down_window_s; /* stabilisation window for scale-down (300, scaleDownDelaySeconds) */
    /* Rate policies (HPA defaults: up max(4 pods, 100%) per 15 s; down 100% per 15 s). */
    int up_pods_per_period;
    double up_percent_per_period;
    int down_pods_per_period;
    double down_percent_per_period;
    double period_s;
    /* Predictive */
    double startup_s;    /* pod start-up time (model load) */
    double interval_s;   /* scrape / decision interval */
    double season_s;     /* seasonal period for Holt-Winters; 0 = Holt's damped trend only */
    double slo_ttft_s;   /* latency objective used to learn capacity */
    double capacity_rps; /* configured per-replica request capacity; 0 = learn it */
    /* Added with policy.c (defaults in policy_spec_defaults): */
    double headroom;            /* predictive plans for this fraction of learned capacity (0.8) */
    double prefill_cost_ratio;  /* cost of one uncached prompt token relative to one generated
                                  * token (0.35 = 700 decode tok/s / 2000 prefill tok/s) */
    int forecast_fit_intervals; /* > 0: after this many intervals, refit the forecast's
                                 * parameters by grid search over them (forecast_fit); 0 keeps
                                 * the fixed defaults of forecast.h (0) */
};

/* Fills `spec` with the defaults above for `kind`. */
void policy_spec_defaults(struct policy_spec *spec, enum policy_kind kind);

struct policy_state; /* per-InferenceService history: recommendations, forecasts, capacity */

/* Returns new state or NULL. */
struct policy_state *policy_state_new(const struct policy_spec *spec);
void policy_state_free(struct policy_state *st); /* NULL-safe */

struct policy_decision {
    int desired;         /* replicas to set (already clamped, stabilised, rate limited) */
    int reactive;        /* the reactive recommendation before stabilisation */
    int predictive;      /* the predictive recommendation (or 0 when not predictive) */
    double forecast_rps; /* forecast arrival rate at the horizon */
    double capacity_rps; /* per-replica capacity in use */
    char reason[160];    /* one line for status.autoscaling.reason and the Event */
};

/* Feeds one interval's signals and decides, given the current replica count. Not thread-safe per
 * state; different states are independent. */
void policy_decide(struct policy_state *st, const struct policy_signals *sig, int current,
                   struct policy_decision *out);

#endif
