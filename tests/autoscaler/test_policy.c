/* Reactive policy against tables mirroring the HPA's own tests (replica_calculator_test.go,
 * horizontal_test.go): tolerance, min/max, missing and unready pods, stabilisation windows and
 * rate policies; then the predictive half (capacity override, learning, forecast never lowers). */
#include "autoscaler/policy.h"

#include <check.h>
#include <math.h>
#include <string.h>

/* Queue-depth metric only (target 1/replica), no windows, no rate limits unless a case sets them. */
static void plain_spec(struct policy_spec *sp)
{
    policy_spec_defaults(sp, POLICY_REACTIVE);
    sp->min_replicas = 1;
    sp->max_replicas = 20;
    sp->target_queue_depth = 1;
    sp->target_kv_usage = 0;
    sp->scale_down_window_s = 0;
    sp->up_pods_per_period = 1000;
    sp->down_percent_per_period = 100;
}

static struct policy_signals sig_q(double t, int ready, int unready, double waiting_per_ready)
{
    struct policy_signals s = {0};
    s.time_s = t;
    s.ready_pods = ready;
    s.unready_pods = unready;
    s.metrics_ok = true;
    s.waiting = waiting_per_ready * ready;
    s.ttft_p99_s = -1;
    return s;
}

struct calc_case {
    const char *name;
    int current, ready, unready;
    double ratio; /* waiting per ready pod over the target */
    int min, max;
    int want;
};

START_TEST(test_policy_decide_replica_calculator_table)
{
    static const struct calc_case cases[] = {
        {"inside tolerance up", 3, 3, 0, 1.09, 1, 20, 3},
        {"inside tolerance down", 3, 3, 0, 0.91, 1, 20, 3},
        {"just outside tolerance", 10, 10, 0, 1.11, 1, 20, 12},
        {"scale up ceil", 3, 3, 0, 1.5, 1, 20, 5},
        {"scale down ceil", 3, 3, 0, 0.5, 1, 20, 2},
        {"exact ratio is not rounded up by float error", 10, 10, 0, 0.3, 1, 20, 3},
        {"idle clamps to min", 4, 4, 0, 0.0, 2, 20, 2},
        {"overload clamps to max", 4, 4, 0, 10.0, 1, 7, 7},
        {"unready count as 0 on scale-up: adjusted ratio 1 holds", 4, 2, 2, 2.0, 1, 20, 4},
        {"unready count as 0 on scale-up", 4, 2, 2, 3.0, 1, 20, 6},
        {"missing count as target on scale-down", 4, 2, 2, 0.5, 1, 20, 3},
        {"missing on scale-down never scales up", 5, 3, 2, 0.8, 1, 20, 5},
        {"current above max goes to max", 25, 25, 0, 1.0, 1, 20, 20},
        {"current below min goes to min", 1, 1, 0, 1.0, 3, 20, 3},
        {"zero replicas: autoscaling disabled", 0, 0, 0, 5.0, 1, 20, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct calc_case *c = &cases[i];
        struct policy_spec sp;
        plain_spec(&sp);
        sp.min_replicas = c->min;
        sp.max_replicas = c->max;
        struct policy_state *st = policy_state_new(&sp);
        ck_assert_ptr_nonnull(st);
        struct policy_signals s = sig_q(100, c->ready, c->unready, c->ratio);
        struct policy_decision d;
        policy_decide(st, &s, c->current, &d);
        ck_assert_msg(d.desired == c->want, "%s: desired %d, want %d (%s)", c->name, d.desired,
                      c->want, d.reason);
        ck_assert(strlen(d.reason) > 0);
        policy_state_free(st);
    }
}
END_TEST

START_TEST(test_policy_decide_missing_metrics_hold)
{
    struct policy_spec sp;
    plain_spec(&sp);
    struct policy_state *st = policy_state_new(&sp);
    struct policy_signals s = sig_q(0, 4, 0, 0.0);
    s.metrics_ok = false;
    struct policy_decision d;
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 6);
    ck_assert_ptr_nonnull(strstr(d.reason, "metrics unavailable"));
    s = sig_q(15, 0, 6, 0.0); /* no ready pod scraped */
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 6);
    s = sig_q(30, 6, 0, 0.0); /* a garbage value is no metric either */
    s.waiting = NAN;
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 6);
    ck_assert_ptr_nonnull(strstr(d.reason, "no usable metric"));
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_max_over_metrics)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.target_kv_usage = 0.5;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_signals s = sig_q(0, 4, 0, 0.5); /* queue says 2 */
    s.kv_usage = 0.75;                             /* KV says ceil(4 * 1.5) = 6 */
    struct policy_decision d;
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.desired, 6);
    ck_assert_ptr_nonnull(strstr(d.reason, "KV usage"));
    s.kv_usage = 0.1; /* both say down: the larger of ceil(0.8)=1 and 2 */
    s.time_s = 15;
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 2);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_scale_down_stabilisation_window)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.scale_down_window_s = 300;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_q(0, 10, 0, 1.0);
    policy_decide(st, &s, 10, &d);
    ck_assert_int_eq(d.desired, 10);
    for (double t = 15; t < 300; t += 15) {
        s = sig_q(t, 10, 0, 0.5); /* raw 5, but 10 is in the window */
        policy_decide(st, &s, 10, &d);
        ck_assert_int_eq(d.reactive, 5);
        ck_assert_msg(d.desired == 10, "t=%g desired %d", t, d.desired);
    }
    s = sig_q(300, 10, 0, 0.5); /* the t=0 sample left the window (strictly after now - 300) */
    policy_decide(st, &s, 10, &d);
    ck_assert_int_eq(d.desired, 5);
    ck_assert_ptr_nonnull(strstr(d.reason, "queue depth"));
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_scale_up_stabilisation_window)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.scale_up_window_s = 60;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_q(0, 4, 0, 1.0);
    policy_decide(st, &s, 4, &d);
    for (double t = 15; t < 60; t += 15) {
        s = sig_q(t, 4, 0, 2.0);
        policy_decide(st, &s, 4, &d);
        ck_assert_msg(d.desired == 4, "t=%g desired %d", t, d.desired);
    }
    s = sig_q(60, 4, 0, 2.0); /* min over (0, 60] is 8 */
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.desired, 8);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_default_scale_up_rate)
{
    /* HPA default: max(4 pods, 100%) per 15 s, counted from the period's starting replicas. */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.target_kv_usage = 0;
    sp.target_queue_depth = 1;
    sp.max_replicas = 100;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_q(0, 2, 0, 20.0);
    policy_decide(st, &s, 2, &d);
    ck_assert_int_eq(d.desired, 6); /* 2 + 4 > 2 * 2 */
    ck_assert_ptr_nonnull(strstr(d.reason, "rate limit"));
    s = sig_q(5, 6, 0, 20.0); /* same period: starts at 2, limit still 6 */
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 6);
    s = sig_q(16, 6, 0, 20.0); /* new period: max(6 + 4, 12) */
    policy_decide(st, &s, 6, &d);
    ck_assert_int_eq(d.desired, 12);
    s = sig_q(32, 12, 0, 20.0);
    policy_decide(st, &s, 12, &d);
    ck_assert_int_eq(d.desired, 24);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_scale_down_rate_pods)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.down_pods_per_period = 1;
    sp.down_percent_per_period = 0;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_q(0, 5, 0, 0.1);
    policy_decide(st, &s, 5, &d);
    ck_assert_int_eq(d.desired, 4);
    s = sig_q(10, 4, 0, 0.1);
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.desired, 4);
    s = sig_q(16, 4, 0, 0.1);
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.desired, 3);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_scale_down_rate_percent)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.down_percent_per_period = 50;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_q(0, 9, 0, 0.0);
    policy_decide(st, &s, 9, &d);
    ck_assert_int_eq(d.desired, 4); /* int(9 * 0.5) truncates like the HPA */
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_decide_static_keeps_replicas)
{
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_STATIC);
    struct policy_state *st = policy_state_new(&sp);
    struct policy_signals s = sig_q(0, 3, 0, 50.0);
    struct policy_decision d;
    policy_decide(st, &s, 3, &d);
    ck_assert_int_eq(d.desired, 3);
    policy_state_free(st);
    ck_assert_ptr_null(policy_state_new(NULL));
    sp.min_replicas = 5;
    sp.max_replicas = 2;
    ck_assert_ptr_null(policy_state_new(&sp));
    policy_state_free(NULL);
}
END_TEST

/* Predictive: arrivals ramp 1 req/s per interval; capacity fixed at 2 req/s per replica. The
 * reactive metric sits at target (hold), so any rise comes from the forecast. */
START_TEST(test_policy_predictive_ramp_scales_ahead)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.kind = POLICY_PREDICTIVE;
    sp.capacity_rps = 2;
    sp.headroom = 1;
    sp.startup_s = 60;
    sp.interval_s = 15;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    int current = 1;
    for (int i = 0; i < 20; i++) {
        struct policy_signals s = sig_q(15.0 * i, current, 0, 1.0);
        s.arrival_rate = 1 + i;
        policy_decide(st, &s, current, &d);
        ck_assert_int_ge(d.desired, current);
        current = d.desired;
    }
    /* At step 19 the rate is 20 req/s and 25 five steps ahead; the damped trend (defaults, only
     * 20 samples) lands between: above the rate now, so 11+ replicas against 10. */
    ck_assert_double_gt(d.forecast_rps, 20);
    ck_assert_double_lt(d.forecast_rps, 26);
    ck_assert_double_eq(d.capacity_rps, 2);
    ck_assert_int_ge(d.predictive, 11);
    ck_assert_int_eq(d.desired, d.predictive);
    ck_assert_int_lt(d.reactive, d.desired);
    ck_assert_ptr_nonnull(strstr(d.reason, "forecast"));
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_predictive_never_scales_down_on_forecast)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.kind = POLICY_PREDICTIVE;
    sp.capacity_rps = 10;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    for (int i = 0; i < 20; i++) {
        struct policy_signals s = sig_q(15.0 * i, 8, 0, 1.0); /* reactive: hold at 8 */
        s.arrival_rate = 40 - 2 * i;                          /* forecast falls to ~1 replica */
        policy_decide(st, &s, 8, &d);
        ck_assert_int_eq(d.desired, 8);
    }
    ck_assert_int_lt(d.predictive, 8);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_predictive_learns_capacity_and_hit_rate_raises_it)
{
    struct policy_spec sp;
    plain_spec(&sp);
    sp.kind = POLICY_PREDICTIVE;
    sp.prefill_cost_ratio = 0.5;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    /* 4 replicas meet the objective at 8 req/s of 100 prompt + 10 generated tokens each: work per
     * request 60, per replica 120/s, i.e. 2 req/s per replica after the first interval. */
    double cap1 = 0;
    for (int i = 0; i < 40; i++) {
        struct policy_signals s = sig_q(15.0 * i, 4, 0, 0.5);
        s.arrival_rate = 8;
        s.prompt_tok_rate = 800;
        s.gen_tok_rate = 80;
        s.ttft_p99_s = 0.5;
        policy_decide(st, &s, 4, &d);
        if (i == 0) {
            ck_assert_double_eq_tol(d.capacity_rps, 2.0, 1e-9);
            ck_assert_int_eq(d.predictive, 5); /* ceil(8 / (2 * 0.9)) */
        }
    }
    /* Loaded near the estimate and fine: the estimate probes upwards, 2% per interval, until the
     * observed load falls under 70% of it (2 / 0.7 = 2.86 req/s). */
    cap1 = d.capacity_rps;
    ck_assert_double_gt(cap1, 2.5);
    ck_assert_double_le(cap1, 2.0 / 0.7 * 1.02);
    /* The same traffic with half its prompt tokens cached: 35 work per request, ~3.4 req/s. */
    for (int i = 40; i < 80; i++) {
        struct policy_signals s = sig_q(15.0 * i, 4, 0, 0.5);
        s.arrival_rate = 8;
        s.prompt_tok_rate = 800;
        s.gen_tok_rate = 80;
        s.prefix_hit_rate = 0.5;
        s.ttft_p99_s = 0.5;
        policy_decide(st, &s, 4, &d);
    }
    ck_assert_double_gt(d.capacity_rps, cap1 * 1.5); /* 60 -> 35 work per request */
    /* A saturated interval (objective missed, queue long) pulls capacity down to throughput. */
    for (int i = 80; i < 120; i++) {
        struct policy_signals s = sig_q(15.0 * i, 4, 0, 5.0);
        s.arrival_rate = 8;
        s.prompt_tok_rate = 400;
        s.gen_tok_rate = 40;
        s.prefix_hit_rate = 0.5;
        s.ttft_p99_s = 3;
        policy_decide(st, &s, 4, &d);
    }
    ck_assert_double_lt(d.capacity_rps, 2.0);
    policy_state_free(st);
}
END_TEST

/* With forecast_fit_intervals the forecast refits on its warm-up window: on a clean ramp the fitted
 * model extrapolates closer to the truth than the fixed defaults. */
START_TEST(test_policy_predictive_forecast_fit_tracks_ramp_better)
{
    double fc[2];
    for (int fit = 0; fit < 2; fit++) {
        struct policy_spec sp;
        plain_spec(&sp);
        sp.kind = POLICY_PREDICTIVE;
        sp.capacity_rps = 1;
        sp.forecast_fit_intervals = fit ? 20 : 0;
        struct policy_state *st = policy_state_new(&sp);
        ck_assert_ptr_nonnull(st);
        struct policy_decision d;
        for (int i = 0; i < 40; i++) {
            struct policy_signals s = sig_q(15.0 * i, 4, 0, 1.0);
            s.arrival_rate = 10 + i;
            policy_decide(st, &s, 4, &d);
        }
        fc[fit] = d.forecast_rps;
        policy_state_free(st);
    }
    double truth = 10 + 39 + 5; /* horizon (60 + 15) / 15 = 5 intervals */
    ck_assert_msg(fabs(fc[1] - truth) < fabs(fc[0] - truth), "fitted %g, default %g", fc[1], fc[0]);
    ck_assert_double_eq_tol(fc[1], truth, 1.0);
}
END_TEST

/* ---- objective-driven decisions ---- */

/* A TTFT histogram of `n` first tokens, `over` of them above 3 s (in the 5 s bucket), the rest at
 * 0.5 s. */
static void ttft_hist(struct policy_hist *h, double n, double over)
{
    static const double le[] = {0.5, 1, 2.5, 5, 10, INFINITY};
    h->n = 6;
    for (size_t i = 0; i < 6; i++) {
        h->le[i] = le[i];
        h->count[i] = i < 3 ? n - over : n;
    }
}

START_TEST(test_policy_hist_above_and_quantile)
{
    struct policy_hist h;
    ttft_hist(&h, 100, 10); /* 90 at <= 0.5 s, 10 in (2.5, 5] */
    ck_assert_double_eq(policy_hist_total(&h), 100);
    ck_assert_double_eq_tol(policy_hist_above(&h, 2.5), 10, 1e-9);
    ck_assert_double_eq_tol(policy_hist_above(&h, 3.75), 5, 1e-9); /* linear in the bucket */
    ck_assert_double_eq_tol(policy_hist_above(&h, 5), 0, 1e-9);
    ck_assert_double_eq_tol(policy_hist_above(&h, 0.25), 55, 1e-9);
    ck_assert_double_eq_tol(policy_hist_quantile(&h, 0.95), 3.75, 1e-9);
    struct policy_hist empty = {0};
    ck_assert_double_eq(policy_hist_above(&empty, 1), 0);
    ck_assert_double_eq(policy_hist_quantile(&empty, 0.5), -1);
}
END_TEST

static void objective_spec(struct policy_spec *sp)
{
    plain_spec(sp);
    sp->target_queue_depth = 0;
    sp->objective_ttft_s = 3;
    sp->startup_s = 30;
}

/* One interval: `ready` pods, each carrying `per_pod` work/s (generated tokens only), `over` of
 * 100 first tokens above the objective, `waiting` queued prefill tokens. */
static struct policy_signals sig_obj(double t, int ready, double per_pod, double over,
                                     double prefill_waiting)
{
    struct policy_signals s = sig_q(t, ready, 0, 0);
    s.gen_tok_rate = per_pod * ready;
    s.arrival_rate = s.gen_tok_rate / 100; /* 100 work per request */
    s.prefill_waiting = prefill_waiting;
    ttft_hist(&s.ttft, 100, over);
    return s;
}

struct obj_case {
    const char *name;
    int current;
    int n_warm;            /* intervals at (warm_load, 0 over) first */
    double warm_load;      /* work/s per pod while warming */
    double load, over, pw; /* then one interval at this */
    int n_last;            /* times */
    int min_want, max_want;
};

START_TEST(test_policy_objective_decisions_table)
{
    static const struct obj_case cases[] = {
        /* Before a miss the capacity is only a lower bound: hold, never scale up on it. */
        {"first interval holds", 4, 0, 0, 100, 0, 0, 1, 4, 4},
        {"load rising while met: no scale-up on a lower bound", 4, 5, 100, 200, 0, 0, 3, 4, 4},
        /* A miss under load bounds capacity: the fleet grows past the load that missed. */
        {"missed under load scales up", 4, 10, 100, 300, 20, 0, 3, 5, 20},
        /* Met at half the load seen fine: the fleet shrinks (no window in these cases). */
        {"met at half load scales down", 8, 10, 100, 50, 0, 0, 3, 3, 6},
        /* Queued prefill work counts: a backlog to drain over start-up + interval adds replicas. */
        {"backlog after a miss adds replicas", 4, 10, 100, 100, 20, 2e6, 3, 6, 20},
        /* Violations that do not go away whatever the load: infeasible, not a reason to grow. */
        {"infeasible floor does not scale to max", 4, 20, 100, 100, 5, 0, 20, 1, 6},
        {"idle goes to min (the load is smoothed)", 4, 10, 100, 0.001, 0, 0, 12, 1, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct obj_case *c = &cases[i];
        struct policy_spec sp;
        objective_spec(&sp);
        struct policy_state *st = policy_state_new(&sp);
        ck_assert_ptr_nonnull(st);
        struct policy_decision d = {0};
        int cur = c->current;
        double t = 0;
        for (int k = 0; k < c->n_warm; k++, t += 15) {
            /* The infeasible case misses in every interval, loaded or not. */
            double over = strstr(c->name, "infeasible") ? c->over : 0;
            struct policy_signals s = sig_obj(t, cur, c->warm_load * c->current / cur, over, 0);
            policy_decide(st, &s, cur, &d);
            cur = d.desired;
        }
        for (int k = 0; k < c->n_last; k++, t += 15) {
            struct policy_signals s = sig_obj(t, cur, c->load * c->current / cur, c->over, c->pw);
            policy_decide(st, &s, cur, &d);
            cur = d.desired;
        }
        ck_assert_msg(cur >= c->min_want && cur <= c->max_want, "%s: %d replicas, want %d..%d (%s)",
                      c->name, cur, c->min_want, c->max_want, d.reason);
        ck_assert(d.objective != POLICY_OBJECTIVE_NONE);
        policy_state_free(st);
    }
}
END_TEST

/* The probe past a lower bound: a fleet at a constant total load (100 work/s a replica at the
 * start) that never misses by more than `over` per 100 first tokens. Sized by its lower bound
 * (5% past the load seen) the fleet would stay where it is forever (8 x 100 over 107 is still
 * 8); with the budget to spare it probes down. */
struct probe_case {
    const char *name;
    int current;
    double over, pw; /* per interval: first tokens over the objective (of 100), queued prefill */
    int intervals;
    int min_want, max_want;
    bool probing; /* the last reason says it probes */
};

START_TEST(test_policy_objective_probe_table)
{
    static const struct probe_case cases[] = {
        {"nothing misses: probes down while the reach allows", 8, 0, 0, 2, 6, 6, true},
        /* One replica per decision (2000 over the reach would allow 17), inside the 10%
         * tolerance (20 -> 19 is 5%). */
        {"one replica a decision, not held by the tolerance", 20, 0, 0, 2, 18, 18, true},
        /* 0.5% over with a queue (not the floor): half the budget used, so no probe. */
        {"half the budget used: holds on the lower bound", 8, 0.5, 6000, 10, 8, 8, false},
        /* The same 0.5% without queueing is the floor (prompts too long on their own): the
         * comfort is judged over the floor, so the fleet still probes. */
        {"the floor is not the budget: probes (until the reach holds it)", 8, 0.5, 0, 24, 2, 7,
         false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct probe_case *c = &cases[i];
        struct policy_spec sp;
        objective_spec(&sp);
        struct policy_state *st = policy_state_new(&sp);
        ck_assert_ptr_nonnull(st);
        struct policy_decision d = {0};
        int cur = c->current;
        for (int k = 0; k < c->intervals; k++) {
            struct policy_signals s =
                sig_obj(15.0 * k, cur, 100.0 * c->current / cur, c->over, c->pw);
            policy_decide(st, &s, cur, &d);
            cur = d.desired;
        }
        ck_assert_msg(cur >= c->min_want && cur <= c->max_want, "%s: %d replicas, want %d..%d (%s)",
                      c->name, cur, c->min_want, c->max_want, d.reason);
        ck_assert_msg((strstr(d.reason, "probing") != NULL) == c->probing, "%s: %s", c->name,
                      d.reason);
        policy_state_free(st);
    }
}
END_TEST

START_TEST(test_policy_objective_state_reported)
{
    struct policy_spec sp;
    objective_spec(&sp);
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    struct policy_signals s = sig_obj(0, 4, 100, 0, 0);
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_MET); /* 100 first tokens: enough to judge */
    ck_assert_double_eq_tol(d.ttft_over, 0, 1e-12);
    ck_assert_double_gt(d.capacity_work, 0);
    ck_assert_str_eq(policy_objective_state_name(d.objective), "Met");
    for (int k = 1; k < 4; k++) { /* missing with a queue: not the floor */
        s = sig_obj(15.0 * k, 4, 100, 30, 2e5);
        policy_decide(st, &s, 4, &d);
    }
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_MISSED);
    ck_assert_double_gt(d.ttft_over, 0.1);
    ck_assert_double_gt(d.ttft_s, 2.5); /* p99 inside the (2.5, 5] bucket */
    /* Without an objective there is no judgement. */
    policy_state_free(st);
    plain_spec(&sp);
    st = policy_state_new(&sp);
    s = sig_obj(0, 4, 100, 0, 0);
    policy_decide(st, &s, 4, &d);
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_NONE);
    policy_state_free(st);
}
END_TEST

/* Requests waiting for a batch slot make no interval light, whatever the backlog's estimate: many
 * short requests (60/s, ~17 tokens of work each by the estimate) with four waiting on one engine
 * and half their first tokens late is a queue the fleet can fix (Missed), not a floor of prompts
 * too long on their own (Infeasible, which would stop the scaling). The estimate matters: a load
 * of long requests starts with arrivals and little work, and tests/e2e/autoscaler_engines.sh saw
 * Infeasible for five minutes while its requests waited for slots. Once nothing waits the
 * objective is Met. */
START_TEST(test_policy_objective_queue_for_slots_is_no_floor)
{
    struct policy_spec sp;
    objective_spec(&sp);
    sp.objective_ttft_s = 0.5;
    sp.interval_s = 1;
    sp.startup_s = 5;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    for (int t = 0; t < 300; t++) {
        struct policy_signals s = sig_q(t, 1, 0, 4);
        s.arrival_rate = 60;
        s.gen_tok_rate = 1000;
        s.prompt_tok_rate = 600;
        s.prefill_waiting = 40;
        s.running = 2;
        ttft_hist(&s.ttft, 2, 1);
        policy_decide(st, &s, 1, &d);
        ck_assert_int_ne(d.objective, POLICY_OBJECTIVE_INFEASIBLE);
    }
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_MISSED);
    int met_at = -1;
    for (int t = 300; t < 700 && met_at < 0; t++) {
        struct policy_signals s = sig_q(t, 3, 0, 0);
        s.arrival_rate = 60;
        s.gen_tok_rate = 1000;
        s.prompt_tok_rate = 600;
        s.running = 2;
        ttft_hist(&s.ttft, 2, 0);
        policy_decide(st, &s, 3, &d);
        ck_assert_int_ne(d.objective, POLICY_OBJECTIVE_INFEASIBLE);
        if (d.objective == POLICY_OBJECTIVE_MET) met_at = t;
    }
    ck_assert_int_gt(met_at, 0);
    policy_state_free(st);
}
END_TEST

Suite *policy_suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_policy_decide_replica_calculator_table);
    tcase_add_test(tc, test_policy_hist_above_and_quantile);
    tcase_add_test(tc, test_policy_objective_decisions_table);
    tcase_add_test(tc, test_policy_objective_probe_table);
    tcase_add_test(tc, test_policy_objective_state_reported);
    tcase_add_test(tc, test_policy_objective_queue_for_slots_is_no_floor);
    tcase_add_test(tc, test_policy_decide_missing_metrics_hold);
    tcase_add_test(tc, test_policy_decide_max_over_metrics);
    tcase_add_test(tc, test_policy_decide_scale_down_stabilisation_window);
    tcase_add_test(tc, test_policy_decide_scale_up_stabilisation_window);
    tcase_add_test(tc, test_policy_decide_default_scale_up_rate);
    tcase_add_test(tc, test_policy_decide_scale_down_rate_pods);
    tcase_add_test(tc, test_policy_decide_scale_down_rate_percent);
    tcase_add_test(tc, test_policy_decide_static_keeps_replicas);
    tcase_add_test(tc, test_policy_predictive_ramp_scales_ahead);
    tcase_add_test(tc, test_policy_predictive_never_scales_down_on_forecast);
    tcase_add_test(tc, test_policy_predictive_learns_capacity_and_hit_rate_raises_it);
    tcase_add_test(tc, test_policy_predictive_forecast_fit_tracks_ramp_better);
    suite_add_tcase(s, tc);
    return s;
}
