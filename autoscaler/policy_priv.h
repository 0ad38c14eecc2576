/* Internals shared by policy.c (the pipeline), policy_objective.c (objective judgement and the
 * capacity model) and policy_predictive.c (forecast). Not part of the public interface: the control
 * loop and the simulator include policy.h only. */
#ifndef CINFER_AUTOSCALER_POLICY_PRIV_H
#define CINFER_AUTOSCALER_POLICY_PRIV_H

#include "autoscaler/policy.h"

#include <stdbool.h>

struct forecast;

/* The capacity model of one InferenceService. Load is measured in work units/s: one generated
 * token = 1, one prompt token that misses the prefix cache = prefill_cost_ratio, a cached prompt
 * token = 0, so a higher hit rate means less work per request and more requests per replica. */
struct policy_capacity {
    double cap_work;       /* work/s one ready replica carries while the objective holds; 0 unknown:
                          * what the fleet is sized by, between the two bounds below */
    double cap_lb;         /* the most work per replica (smoothed) seen with the objective met */
    double cap_ub;         /* the work per replica seen missing it, relaxing slowly; 0 = none */
    double per_pod_s;      /* EWMA of the work per ready replica */
    double work_per_req;   /* EWMA of work per arriving request; 0 until seen */
    double prompt_per_req; /* EWMA of prompt tokens per arriving request */
    double hit_rate;       /* EWMA of the prefix-cache hit rate */
    bool hit_seen;
    /* Objective judgement: EWMAs of observations and of those above the objective. */
    double ttft_n, ttft_over, itl_n, itl_over;
    double ttft_q, itl_q; /* EWMA of the interval quantile at the objective percentile */
    double floor_over;    /* EWMA of the TTFT violation fraction on lightly loaded replicas */
    bool floor_seen;
    double p99_typical; /* no objective: EWMA of TTFT p99 while the targets hold */
    enum policy_objective_state state;
    bool confirmed;    /* a miss under load has bounded cap_work from above */
    double frac, aim;  /* smoothed violation fraction and the budget aimed at */
    double hold_until; /* no second back-off before this time (a resize takes effect first) */
    /* Of the last decide(): what policy.c reports and plans with. */
    double load_work, backlog_work;
    double load_s; /* EWMA of load_work */
};

/* Learns from one interval's signals (metrics_ok, ready pods > 0). Pure. */
void policy_capacity_observe(struct policy_capacity *c, const struct policy_spec *spec,
                             const struct policy_signals *sig);

/* Replicas the current load (plus the queued prefill work, drained over the start-up horizon)
 * needs at the learned capacity, or -1 while the capacity is unknown; never above `current` while
 * the capacity is only a lower bound and the objective is not under threat. Writes the reason. */
int policy_capacity_replicas(const struct policy_capacity *c, const struct policy_spec *spec,
                             int current, char *why, size_t whylen);

/* Per-replica capacity in requests/s at the current work mix (0 while unknown); the configured
 * spec->capacity_rps when set. */
double policy_capacity_rps(const struct policy_capacity *c, const struct policy_spec *spec);

/* Predictive half of a policy_state: the arrival-rate forecast. */
struct policy_predictor {
    struct forecast *rps; /* arrival-rate model, one observation per decide() */
    double *history;      /* arrival rates until the one-time fit (forecast_fit_intervals) */
    size_t n_history;
    bool fitted;
};

int policy_predictor_init(struct policy_predictor *p, const struct policy_spec *spec);
void policy_predictor_fini(struct policy_predictor *p);

/* Feeds `sig` to the forecast and returns the predictive recommendation through the capacity
 * model `c` (0 when it cannot recommend yet: no capacity known or no observation). Fills
 * forecast_rps / capacity_rps of `out`. */
int policy_predictor_step(struct policy_predictor *p, const struct policy_capacity *c,
                          const struct policy_spec *spec, const struct policy_signals *sig,
                          struct policy_decision *out);

#endif
