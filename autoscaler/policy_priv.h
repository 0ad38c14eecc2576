/* Internals shared by policy.c (HPA pipeline) and policy_predictive.c (forecast + capacity). Not
 * part of the public interface: the control loop and the simulator include policy.h only. */
#ifndef CINFER_AUTOSCALER_POLICY_PRIV_H
#define CINFER_AUTOSCALER_POLICY_PRIV_H

#include "autoscaler/policy.h"

#include <stdbool.h>

struct forecast;

/* Predictive half of a policy_state: arrival-rate forecast and learned per-replica capacity in
 * work units/s, where work = generated tokens + prefill_cost_ratio * uncached prompt tokens. */
struct policy_predictor {
    struct forecast *rps; /* arrival-rate model, one observation per decide() */
    double cap_work;      /* learned capacity per ready replica (work/s); 0 until learned */
    double work_per_req;  /* EWMA of work per arriving request; 0 until seen */
    double hit_rate;      /* EWMA of the prefix-cache hit rate */
    bool hit_seen;
    double p99_typical; /* EWMA of TTFT p99 over intervals inside the reactive targets */
    double *history;    /* arrival rates until the one-time fit (forecast_fit_intervals) */
    size_t n_history;
    bool fitted;
};

int policy_predictor_init(struct policy_predictor *p, const struct policy_spec *spec);
void policy_predictor_fini(struct policy_predictor *p);

/* Learns from `sig` and returns the predictive recommendation (0 when it cannot recommend yet:
 * no capacity known or no observation). Fills forecast_rps / capacity_rps of `out`. */
int policy_predictor_step(struct policy_predictor *p, const struct policy_spec *spec,
                          const struct policy_signals *sig, struct policy_decision *out);

#endif
