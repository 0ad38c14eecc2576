/* The capacity model's parts (policy_priv.h): the violation curve and where it crosses the aim
 * (tables of shapes: fine everywhere, a cliff, noise under it, missing everywhere), the burst
 * detector and its headroom (recurring bursts, a level step, rare bursts), the rises within the
 * horizon, the default scale-down window, and decisions that use them: the floor is not a reason
 * to scale, a freshly started policy holds for a window, burst headroom is held between bursts. */
#include "autoscaler/policy.h"
#include "autoscaler/policy_priv.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Adds `k` intervals of 100 observations at load x with `over` above. */
static void add(struct policy_curve *c, int k, double x, double over)
{
    for (int i = 0; i < k; i++) policy_curve_add(c, x, 100, over, 15);
}

struct curve_case {
    const char *name;
    double lo, hi, step; /* loads visited, each 3 intervals */
    double cliff;        /* above it 10 of 100 miss; 0: none */
    double noise_at;     /* one interval with 3 of 100 over at this load; 0: none */
    bool confirmed;
    double cap_min, cap_max;
};

START_TEST(test_policy_curve_crossing_table)
{
    static const struct curve_case cases[] = {
        /* Fine wherever seen: a lower bound 5% past the load most observations were at. */
        {"fine everywhere", 100, 200, 10, 0, 0, false, 190, 220},
        /* A cliff at 300: the crossing, known. */
        {"cliff", 100, 400, 10, 300, 0, true, 280, 305},
        /* One noisy interval under the cliff moves nothing: not significant. */
        {"noise under the cliff", 100, 400, 10, 300, 150, true, 280, 305},
        /* Missing at every load seen: the capacity is below the lightest. */
        {"missing everywhere", 100, 200, 10, 1, 0, true, 90, 100},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct curve_case *k = &cases[i];
        struct policy_curve *c = calloc(1, sizeof(*c));
        for (double x = k->lo; x <= k->hi; x += k->step)
            add(c, 3, x, k->cliff > 0 && x >= k->cliff ? 10 : 0);
        if (k->noise_at > 0) add(c, 1, k->noise_at, 3);
        struct policy_curve_fit f;
        policy_curve_read(c, 0.01, &f);
        ck_assert_msg(f.confirmed == k->confirmed, "%s: confirmed %d", k->name, f.confirmed);
        ck_assert_msg(f.capacity >= k->cap_min && f.capacity <= k->cap_max,
                      "%s: capacity %.1f, want %.0f..%.0f", k->name, f.capacity, k->cap_min,
                      k->cap_max);
        free(c);
    }
    /* Empty: nothing known. */
    struct policy_curve *c = calloc(1, sizeof(*c));
    struct policy_curve_fit f;
    policy_curve_read(c, 0.01, &f);
    ck_assert_double_eq(f.capacity, 0);
    /* A 2% floor everywhere: over an aim of 1%, fine at floor + budget. */
    for (double x = 100; x <= 300; x += 10) add(c, 5, x, 2);
    policy_curve_read(c, 0.01, &f);
    ck_assert(f.confirmed);
    ck_assert_double_lt(f.capacity, 101);
    policy_curve_read(c, 0.03, &f);
    ck_assert(!f.confirmed);
    ck_assert_double_gt(f.capacity, 290);
    free(c);
}
END_TEST

START_TEST(test_policy_curve_decays_old_evidence)
{
    /* A cliff at 300 seen two hours ago, fine since at up to 400: the old misses weigh e^-1, then
     * less; the crossing moves up once the new evidence outweighs them. */
    struct policy_curve *c = calloc(1, sizeof(*c));
    for (double x = 100; x <= 400; x += 10) add(c, 3, x, x >= 300 ? 10 : 0);
    struct policy_curve_fit f;
    policy_curve_read(c, 0.01, &f);
    ck_assert_double_lt(f.capacity, 305);
    for (int round = 0; round < 30; round++)
        for (double x = 300; x <= 400; x += 10) add(c, 2, x, 0);
    policy_curve_read(c, 0.01, &f);
    ck_assert_double_gt(f.capacity, 330);
    free(c);
}
END_TEST

/* Feeds `n` intervals of a smoothed load: `base`, times `factor` during [b0, b0 + len) of every
 * `period` intervals (period 0: a step to base x factor at b0, for good). */
static void feed(struct policy_burst *b, int n, double base, double factor, int b0, int len,
                 int period, int h)
{
    for (int i = 0; i < n; i++) {
        bool in = period > 0 ? i % period >= b0 && i % period < b0 + len : i >= b0;
        double x = base * (in ? factor : 1);
        policy_burst_observe(b, x, x, h, 0, 15);
    }
}

START_TEST(test_policy_burst_headroom_table)
{
    struct policy_burst *b = calloc(1, sizeof(*b));
    /* Bursts of 6 intervals at 2.5x every 40: a quarter of the work, far over a 1% budget. */
    feed(b, 200, 1000, 2.5, 10, 6, 40, 9);
    ck_assert_double_gt(b->amp, 2.2);
    ck_assert_double_le(b->amp, 2.5);
    ck_assert_double_gt(policy_burst_share(b), 0.1);
    ck_assert_double_gt(policy_burst_plan(b, 0.01), 2200); /* base x amplitude */
    ck_assert_double_lt(policy_burst_plan(b, 0.01), 2600);
    /* ... but not when the budget exceeds their share. */
    ck_assert_double_eq(policy_burst_plan(b, 0.5), 0);
    free(b);
    /* A step that stays: a new level, never a burst. */
    b = calloc(1, sizeof(*b));
    feed(b, 200, 1000, 3, 50, 0, 0, 9);
    ck_assert_double_eq(b->amp, 0);
    ck_assert_double_eq(policy_burst_plan(b, 0.01), 0);
    free(b);
    /* One short burst in 2000 intervals: its share decays under the budget. */
    b = calloc(1, sizeof(*b));
    feed(b, 2000, 1000, 2.5, 10, 3, 0 + 100000, 9);
    ck_assert_double_gt(b->amp, 0);
    ck_assert_double_eq(policy_burst_plan(b, 0.01), 0);
    free(b);
}
END_TEST

START_TEST(test_policy_burst_rise_quantiles)
{
    struct policy_burst *b = calloc(1, sizeof(*b));
    ck_assert_double_eq(policy_burst_rise(b, 0.5), 1); /* nothing seen */
    feed(b, 100, 1000, 1, 0, 0, 100000, 4);
    ck_assert_double_le(policy_burst_rise(b, 0.9), 1.011); /* flat: no rise */
    free(b);
    /* A ramp of 1% per interval over a 4-interval horizon: about 4%. */
    b = calloc(1, sizeof(*b));
    for (int i = 0; i < 200; i++) policy_burst_observe(b, 1000 * pow(1.01, i), 1, 4, 0, 15);
    double r = policy_burst_rise(b, 0.5);
    ck_assert_double_gt(r, 1.03);
    ck_assert_double_lt(r, 1.06);
    free(b);
}
END_TEST

START_TEST(test_policy_down_window_from_startup)
{
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    ck_assert_double_eq(sp.scale_down_window_s, POLICY_DOWN_WINDOW_AUTO);
    sp.startup_s = 120;
    sp.interval_s = 15;
    ck_assert_double_eq(policy_down_window(&sp), 135);
    sp.startup_s = 10; /* at least a minute */
    ck_assert_double_eq(policy_down_window(&sp), 60);
    sp.scale_down_window_s = 300; /* scaleDownDelaySeconds set: as given */
    ck_assert_double_eq(policy_down_window(&sp), 300);
    sp.scale_down_window_s = 0;
    ck_assert_double_eq(policy_down_window(&sp), 0);
}
END_TEST

START_TEST(test_policy_decide_fresh_state_holds_a_window)
{
    /* A (re)started autoscaler sees half the load it is sized for: it waits a window (the HPA
     * seeds its history with the current count) before scaling down. */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.scale_down_window_s = 60;
    sp.down_percent_per_period = 100;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    int cur = 8;
    for (int k = 0; k < 6; k++) {
        struct policy_signals s = {.time_s = 15.0 * (k + 1), .ready_pods = cur, .metrics_ok = true};
        s.waiting = cur * 1.0; /* queue depth 1 against the default target of 2 */
        s.kv_usage = 0;
        s.ttft_p99_s = -1;
        policy_decide(st, &s, cur, &d);
        if (k < 3) ck_assert_int_eq(d.desired, 8);
        cur = d.desired;
    }
    ck_assert_int_eq(cur, 4);
    policy_state_free(st);
}
END_TEST

/* One interval of an objective-driven service: `ready` pods at `per_pod` work/s each (generated
 * tokens, 100 per request), `over` of 100 first tokens above the objective, `backlog` queued
 * prefill tokens. */
static struct policy_signals obj_sig(double t, int ready, double per_pod, double over,
                                     double backlog)
{
    struct policy_signals s = {.time_s = t, .ready_pods = ready, .metrics_ok = true};
    s.gen_tok_rate = per_pod * ready;
    s.arrival_rate = s.gen_tok_rate / 100;
    s.prefill_waiting = backlog;
    s.ttft_p99_s = -1;
    s.ttft.n = 3;
    s.ttft.le[0] = 0.5;
    s.ttft.le[1] = 5;
    s.ttft.le[2] = INFINITY;
    s.ttft.count[0] = 100 - over;
    s.ttft.count[1] = s.ttft.count[2] = 100;
    return s;
}

START_TEST(test_policy_objective_floor_is_no_reason_to_scale)
{
    /* 5% of first tokens late at every load without a queue: the floor (prompts too long for the
     * objective). The policy reports Infeasible and does not add replicas for it. */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.objective_ttft_s = 3;
    sp.target_queue_depth = sp.target_kv_usage = 0;
    sp.scale_down_window_s = 0;
    sp.max_replicas = 50;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    int cur = 6;
    for (int k = 0; k < 80; k++) {
        struct policy_signals s = obj_sig(15.0 * k, cur, 600.0 / cur * 6, 5, 0);
        policy_decide(st, &s, cur, &d);
        cur = d.desired;
    }
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_INFEASIBLE);
    ck_assert_int_le(cur, 6);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_objective_drained_queue_is_not_the_floor)
{
    /* Queues that build and drain: an interval with prefill queued (0.5 s of it a replica at
     * the capacity learned) is followed by one without, whose first tokens (20 of 100 late)
     * are the requests that waited in it. That is queueing, not the floor: only intervals light
     * for two in a row measure the floor, so the objective is Missed, never Infeasible. The
     * same 20% late in intervals light two in a row is the floor. */
    static const struct {
        const char *name;
        int queued_every; /* an interval with a queue every this many (0: never) */
        enum policy_objective_state want;
    } cases[] = {
        {"queue, then its waiters in a light interval", 2, POLICY_OBJECTIVE_MISSED},
        {"late without a queue for intervals on end", 0, POLICY_OBJECTIVE_INFEASIBLE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct policy_spec sp;
        policy_spec_defaults(&sp, POLICY_REACTIVE);
        sp.objective_ttft_s = 3;
        sp.target_queue_depth = sp.target_kv_usage = 0;
        sp.scale_down_window_s = 0;
        sp.max_replicas = 6; /* judged at a fixed fleet */
        struct policy_state *st = policy_state_new(&sp);
        struct policy_decision d;
        for (int k = 0; k < 60; k++) {
            bool queued = cases[i].queued_every > 0 && k % cases[i].queued_every == 0;
            struct policy_signals s = obj_sig(15.0 * k, 6, 100, queued ? 0 : 20, queued ? 2e5 : 0);
            policy_decide(st, &s, 6, &d);
        }
        ck_assert_msg(d.objective == cases[i].want, "%s: %s (%s)", cases[i].name,
                      policy_objective_state_name(d.objective), d.reason);
        policy_state_free(st);
    }
}
END_TEST

START_TEST(test_policy_objective_burst_headroom_raises_a_lower_bound)
{
    /* A base load growing 1% an interval with 90 s bursts at 2.5x every 5 minutes, always met at
     * 6 replicas: the capacity never crosses (a lower bound), yet each burst is bigger than any
     * seen. Between bursts the plan's burst headroom raises the fleet on the bound (it used to
     * hold at 6 until the burst's own misses). */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.objective_ttft_s = 3;
    sp.target_queue_depth = sp.target_kv_usage = 0;
    sp.startup_s = 30;
    sp.interval_s = 15;
    sp.max_replicas = 100;
    struct policy_state *st = policy_state_new(&sp);
    ck_assert_ptr_nonnull(st);
    struct policy_decision d;
    int raised = 0;
    for (int k = 0; k < 120; k++) {
        bool burst = k % 20 >= 10 && k % 20 < 16;
        double total = 6 * 100 * pow(1.01, k) * (burst ? 2.5 : 1);
        struct policy_signals s = obj_sig(15.0 * k, 6, total / 6, 0, 0);
        policy_decide(st, &s, 6, &d);
        ck_assert_msg(d.objective != POLICY_OBJECTIVE_MISSED, "interval %d: %s", k, d.reason);
        if (!burst && k >= 60 && d.desired > 6) {
            ck_assert_msg(strstr(d.reason, "burst headroom") && strstr(d.reason, "lower bound"),
                          "interval %d: %s", k, d.reason);
            raised++;
        }
    }
    ck_assert_int_gt(raised, 0);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_objective_judged_on_time_not_intervals)
{
    /* 3 first tokens per 1 s interval: judged after a few seconds (the smoothing spans ~45 s of
     * observations, not three intervals of them). */
    struct policy_spec sp;
    policy_spec_defaults(&sp, POLICY_REACTIVE);
    sp.objective_ttft_s = 0.5;
    sp.target_queue_depth = sp.target_kv_usage = 0;
    sp.interval_s = 1;
    struct policy_state *st = policy_state_new(&sp);
    struct policy_decision d;
    for (int k = 0; k < 10; k++) {
        struct policy_signals s = obj_sig(k + 1, 3, 100, 0, 0);
        s.ttft.count[0] = 3;
        s.ttft.count[1] = s.ttft.count[2] = 3;
        policy_decide(st, &s, 3, &d);
    }
    ck_assert_int_eq(d.objective, POLICY_OBJECTIVE_MET);
    policy_state_free(st);
}
END_TEST

START_TEST(test_policy_objective_rise_discounts_the_warm_up)
{
    /* The load's EWMA starts at its first interval: when that one is light (a service coming up,
     * the first scrape of a trace) the smoothed load climbs for a few time constants, and a rise
     * measured from then is the smoother converging (Azure conv at 120 s: 3-4x at t = 150 s, a
     * scale-up to 32 replicas with the least-requests router). A rise counts with the weight of
     * the measurements in the value its window starts from (1 - the seed's weight, e^(-k x 15 /
     * 45) after k intervals): the window starting at the seed not at all, and the median falls
     * under 1.1 within three time constants of the first window; a later ramp is measured. */
    static const struct {
        const char *name;
        double startup_s;
        double first;              /* work/s a pod in the first interval (then 100) */
        int ramp_from;             /* from this interval the load grows 2% an interval (0: never) */
        double rise_min, rise_max; /* the median rise: from three time constants in / at the end */
    } cases[] = {
        {"a light first interval, 120 s start-up", 120, 33, 0, 1, 1.11},
        {"a light first interval, 30 s start-up", 30, 33, 0, 1, 1.11},
        {"an idle first interval, 120 s start-up", 120, 1, 0, 1, 1.11},
        {"a ramp after the warm-up is measured", 120, 100, 20, 1.1, 1.25},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct policy_spec sp;
        policy_spec_defaults(&sp, POLICY_REACTIVE);
        sp.objective_ttft_s = 3;
        sp.target_queue_depth = sp.target_kv_usage = 0;
        sp.startup_s = cases[i].startup_s;
        sp.interval_s = 15;
        int h = (int)(sp.startup_s / 15) + 1; /* intervals in the horizon */
        struct policy_capacity *c = calloc(1, sizeof(*c));
        ck_assert_ptr_nonnull(c);
        double per_pod = 100, r = 1;
        for (int k = 0; k < 60; k++) {
            if (cases[i].ramp_from > 0 && k >= cases[i].ramp_from) per_pod *= 1.02;
            struct policy_signals s = obj_sig(15.0 * k, 8, k == 0 ? cases[i].first : per_pod, 0, 0);
            policy_capacity_observe(c, &sp, &s);
            r = policy_burst_rise(&c->burst, 0.5);
            if (k == h) /* the first window starts at the seed: weight 0 */
                ck_assert_msg(r == 1, "%s: rise %.2f from the seed", cases[i].name, r);
            if (cases[i].ramp_from == 0 && k >= h + 1 + 9)
                ck_assert_msg(r <= cases[i].rise_max, "%s: rise %.2f at interval %d", cases[i].name,
                              r, k);
        }
        ck_assert_msg(r >= cases[i].rise_min && r <= cases[i].rise_max, "%s: rise %.2f at the end",
                      cases[i].name, r);
        free(c);
    }
}
END_TEST

Suite *policy_curve_suite(void)
{
    Suite *s = suite_create("policy_curve");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_policy_curve_crossing_table);
    tcase_add_test(tc, test_policy_objective_burst_headroom_raises_a_lower_bound);
    tcase_add_test(tc, test_policy_curve_decays_old_evidence);
    tcase_add_test(tc, test_policy_burst_headroom_table);
    tcase_add_test(tc, test_policy_burst_rise_quantiles);
    tcase_add_test(tc, test_policy_down_window_from_startup);
    tcase_add_test(tc, test_policy_decide_fresh_state_holds_a_window);
    tcase_add_test(tc, test_policy_objective_floor_is_no_reason_to_scale);
    tcase_add_test(tc, test_policy_objective_rise_discounts_the_warm_up);
    tcase_add_test(tc, test_policy_objective_drained_queue_is_not_the_floor);
    tcase_add_test(tc, test_policy_objective_judged_on_time_not_intervals);
    suite_add_tcase(s, tc);
    return s;
}
