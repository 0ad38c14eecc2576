/* Internals shared by policy.c (the pipeline), policy_objective.c (objective judgement and the
 * capacity model) and policy_predictive.c (forecast). Not part of the public interface: the control
 * loop and the simulator include policy.h only. */
#ifndef CINFER_AUTOSCALER_POLICY_PRIV_H
#define CINFER_AUTOSCALER_POLICY_PRIV_H

#include "autoscaler/policy.h"

#include <stdbool.h>

struct forecast;

/* The violation curve (policy_curve.c): observations and those above the objective per bin of
 * work per replica (log-spaced, 2.5% wide), decaying over about two hours. */
#define POLICY_CURVE_BINS 1100
struct policy_curve {
    double obs[POLICY_CURVE_BINS], over[POLICY_CURVE_BINS];
    int lo, hi; /* the occupied bins, when any */
    bool any;
};

/* What the curve says at a given aim. */
struct policy_curve_fit {
    double capacity; /* work/s per replica where the share above crosses the aim; 0 when empty */
    bool confirmed;  /* loads above the capacity were seen missing (else it is a lower bound) */
    double mass;     /* observations (decayed) in the curve */
};

/* Adds one interval: `n` observations of which `over` above the objective, at `per_pod` work/s
 * per ready replica; decays the older ones by one interval of `interval_s`. */
void policy_curve_add(struct policy_curve *c, double per_pod, double n, double over,
                      double interval_s);
/* Reads the curve at share `aim` (0..1). */
void policy_curve_read(const struct policy_curve *c, double aim, struct policy_curve_fit *out);

/* Burst headroom (policy_burst.c): a burst is the smoothed load rising by half or more within
 * the horizon (a replica ordered at its start is not ready before it is over) and falling back
 * within ten minutes (a rise that stays is a new level, not a burst). When the bursts of about the
 * last hour carried more than the violation budget's share of the work, the fleet keeps headroom
 * for their typical amplitude over the load between bursts. */
#define POLICY_BURST_RING 256 /* intervals of smoothed load kept (the horizon, at most) */
#define POLICY_RISE_BINS  280 /* rises 1.00x .. 16x in 1% bins */
struct policy_burst {
    double ring[POLICY_BURST_RING];
    size_t n, head;           /* values in the ring; next slot */
    size_t seen;              /* intervals observed in all */
    double work_all, work_in; /* decayed work, all and of past bursts */
    double amp;               /* EWMA of the peak over the base of past bursts; 0 before one */
    double base;              /* the load between bursts: the least smoothed load in the horizon */
    /* The episode in progress (since the load rose by half), until it falls back or expires. */
    bool in;
    double ep_base, ep_peak, ep_work, ep_age_s;
    /* Rises: how much the smoothed arrivals rose within one horizon, log-binned (1%), decaying
     * over about an hour. */
    double rise[POLICY_RISE_BINS];
    double rise_mass;
};

/* Feeds one interval's smoothed load `load_s` and work arriving `work`; `h` intervals span the
 * horizon (start-up + interval). A rise counts with weight 1 - e^(-k / seed_tau) for a window
 * starting k intervals after the first (`seed_tau`: the smoother's time constant in intervals;
 * <= 0 counts every rise fully). */
void policy_burst_observe(struct policy_burst *b, double load_s, double work, int h,
                          double seed_tau, double interval_s);
/* The load to hold capacity for (base x amplitude) when bursts carry more than `budget` of the
 * work, else 0. */
double policy_burst_plan(const struct policy_burst *b, double budget);
/* Share of the recent work that arrived during bursts (0 when none). */
double policy_burst_share(const struct policy_burst *b);
/* The q-quantile of the rises within one horizon (>= 1; 1 before any was seen). */
double policy_burst_rise(const struct policy_burst *b, double q);

/* The capacity model of one InferenceService. Load is measured in work units/s: one generated
 * token = 1, one prompt token that misses the prefix cache = prefill_cost_ratio, a cached prompt
 * token = 0, so a higher hit rate means less work per request and more requests per replica. */
struct policy_capacity {
    double cap_work; /* work/s one ready replica carries while the objective holds; 0 unknown */
    bool confirmed;  /* the crossing of the aim was seen (else cap_work is a lower bound) */
    double ceiling;  /* the last crossing seen, relaxing slowly while none is: a lower bound
                      * probes no further than this; 0 before the first */
    struct policy_curve ttft_curve, itl_curve;
    double last_x;         /* the curve's abscissa of the previous interval */
    int light_run;         /* consecutive light intervals (see the floor), up to 2 */
    double work_per_req;   /* EWMA of work per arriving request; 0 until seen */
    double prompt_per_req; /* EWMA of prompt tokens per arriving request */
    double hit_rate;       /* EWMA of the prefix-cache hit rate */
    bool hit_seen;
    /* Objective judgement: EWMAs of observations and of those above the objective. */
    double ttft_n, ttft_over, itl_n, itl_over;
    double ttft_q, itl_q; /* EWMA of the interval quantile at the objective percentile */
    /* The floor: observations and those above the objective in light intervals (queued prefill
     * drains in under half the objective), decaying like the curve. */
    double floor_n, floor_over, ifloor_n, ifloor_over;
    double floor;       /* the TTFT floor (share above with little queueing); 0 while unknown */
    double p99_typical; /* no objective: EWMA of TTFT p99 while the targets hold */
    enum policy_objective_state state;
    double frac, aim; /* smoothed violation fraction and the share aimed at */
    struct policy_burst burst;
    double headroom; /* planned load over the smoothed load (burst headroom), >= 1 */
    bool probing;    /* the last plan probed one replica past a lower bound (no tolerance) */
    /* Of the last decide(): what policy.c reports and plans with. */
    double load_work, backlog_work;
    double load_s;   /* EWMA of load_work */
    double arrive_s; /* EWMA of the work arriving (arrivals x work per request) */
};

/* Learns from one interval's signals (metrics_ok, ready pods > 0). Pure. */
void policy_capacity_observe(struct policy_capacity *c, const struct policy_spec *spec,
                             const struct policy_signals *sig);

/* Replicas the current load (plus the queued prefill work, drained over the start-up horizon,
 * and the burst headroom) needs at the learned capacity, or -1 while the capacity is unknown;
 * never above `current` while the capacity is only a lower bound and the objective is not under
 * threat. Records the headroom in c->headroom; writes the reason. */
int policy_capacity_replicas(struct policy_capacity *c, const struct policy_spec *spec, int current,
                             char *why, size_t whylen);

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
