/* Signals from two scrape rounds: gauges, counter rates, resets, the arrival estimator, TTFT p99
 * from bucket deltas, pods appearing and disappearing, and missing metrics. Inputs are
 * hand-written exposition texts parsed by the real parser. */
#include "autoscaler/signals.h"

#include "common/err.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An engine exposition with the given values (one model; TTFT buckets 0.1, 1, +Inf). */
static struct signals_pod pod(const char *key, double t, double running, double waiting, double kv,
                              double requests, double prompt, double gen, double queries,
                              double hits, double b01, double b1, double binf)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "# TYPE cinfer_requests_running gauge\n"
             "cinfer_requests_running{model_name=\"m\"} %g\n"
             "# TYPE cinfer_requests_waiting gauge\n"
             "cinfer_requests_waiting{model_name=\"m\"} %g\n"
             "cinfer_kv_cache_usage_ratio{model_name=\"m\"} %g\n"
             "# TYPE cinfer_requests_total counter\n"
             "cinfer_requests_total{model_name=\"m\",finished_reason=\"stop\"} %g\n"
             "cinfer_requests_total{model_name=\"m\",finished_reason=\"length\"} 0\n"
             "cinfer_prompt_tokens_total{model_name=\"m\"} %g\n"
             "cinfer_generation_tokens_total{model_name=\"m\"} %g\n"
             "cinfer_prefix_cache_queries_total{model_name=\"m\"} %g\n"
             "cinfer_prefix_cache_hits_total{model_name=\"m\"} %g\n"
             "# TYPE cinfer_time_to_first_token_seconds histogram\n"
             "cinfer_time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} %g\n"
             "cinfer_time_to_first_token_seconds_bucket{model_name=\"m\",le=\"1\"} %g\n"
             "cinfer_time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} %g\n"
             "cinfer_time_to_first_token_seconds_sum{model_name=\"m\"} 0\n"
             "cinfer_time_to_first_token_seconds_count{model_name=\"m\"} %g\n",
             running, waiting, kv, requests, prompt, gen, queries, hits, b01, b1, binf, binf);
    struct signals_pod p = {.key = key, .time_s = t, .ok = true};
    char err[128];
    int rc = scrape_parse_body(text, strlen(text), 0, &p.m, err, sizeof(err));
    ck_assert_msg(rc == 0, "fixture does not parse: %s", err);
    return p;
}

static struct signals_pod gauges_only(const char *key, double t, double running, double waiting)
{
    char text[256];
    snprintf(
        text, sizeof(text),
        "cinfer_requests_running{model_name=\"m\"} %g\ncinfer_requests_waiting{model_name=\"m\"} "
        "%g\n",
        running, waiting);
    struct signals_pod p = {.key = key, .time_s = t, .ok = true};
    ck_assert_int_eq(scrape_parse_body(text, strlen(text), 0, &p.m, NULL, 0), 0);
    return p;
}

START_TEST(test_signals_compute_two_pods)
{
    struct signals_pod prev[2] = {
        pod("a", 100, 2, 1, 0.5, 10, 1000, 2000, 100, 50, 5, 9, 10),
        pod("b", 100, 1, 0, 0.1, 20, 500, 1000, 200, 0, 10, 10, 10),
    };
    struct signals_pod cur[2] = {
        /* a: 10 finished, in-system 3 -> 5: 12 arrivals over 10 s */
        pod("a", 110, 3, 2, 0.7, 20, 1500, 2600, 300, 150, 5, 9, 10),
        /* b: 5 finished, in-system 1 -> 0: 4 arrivals; 100 TTFT observations, 99 under 0.1 s */
        pod("b", 110, 0, 0, 0.3, 25, 600, 1400, 400, 100, 109, 110, 110),
    };
    struct policy_signals s;
    signals_compute(prev, 2, cur, 2, 1, 110, &s);
    ck_assert(s.metrics_ok);
    ck_assert_int_eq(s.ready_pods, 2);
    ck_assert_int_eq(s.unready_pods, 1);
    ck_assert_double_eq_tol(s.time_s, 110, 1e-9);
    ck_assert_double_eq_tol(s.running, 3, 1e-9);
    ck_assert_double_eq_tol(s.waiting, 2, 1e-9);
    ck_assert_double_eq_tol(s.kv_usage, 0.5, 1e-9);
    ck_assert_double_eq_tol(s.arrival_rate, (12 + 4) / 10.0, 1e-9);
    ck_assert_double_eq_tol(s.prompt_tok_rate, (500 + 100) / 10.0, 1e-9);
    ck_assert_double_eq_tol(s.gen_tok_rate, (600 + 400) / 10.0, 1e-9);
    /* hits 100 + 100 over queries 200 + 200 */
    ck_assert_double_eq_tol(s.prefix_hit_rate, 0.5, 1e-9);
    /* 100 new observations: 99 <= 0.1, 1 in (0.1, 1]: the 99th is at the top of the first bucket. */
    ck_assert_double_eq_tol(s.ttft_p99_s, 0.1, 1e-9);
}
END_TEST

START_TEST(test_signals_compute_ttft_from_deltas_not_totals)
{
    /* The lifetime histogram is fast, the last interval slow: p99 must reflect the interval. */
    struct signals_pod prev = pod("a", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1000, 1000, 1000);
    struct signals_pod cur = pod("a", 5, 0, 0, 0, 0, 0, 0, 0, 0, 1000, 1000, 1010);
    struct policy_signals s;
    signals_compute(&prev, 1, &cur, 1, 0, 5, &s);
    /* All 10 new observations above 1 s: the quantile is the largest finite bound. */
    ck_assert_double_eq_tol(s.ttft_p99_s, 1.0, 1e-9);
}
END_TEST

START_TEST(test_signals_compute_no_observations_ttft_negative)
{
    struct signals_pod prev = pod("a", 0, 1, 0, 0, 3, 0, 0, 0, 0, 4, 4, 4);
    struct signals_pod cur = pod("a", 5, 1, 0, 0, 3, 0, 0, 0, 0, 4, 4, 4);
    struct policy_signals s;
    signals_compute(&prev, 1, &cur, 1, 0, 5, &s);
    ck_assert(s.ttft_p99_s < 0);
    ck_assert_double_eq_tol(s.arrival_rate, 0, 1e-12);
    ck_assert_double_eq_tol(s.prefix_hit_rate, 0, 1e-12);
}
END_TEST

START_TEST(test_signals_compute_counter_reset)
{
    /* The engine restarted between rounds: counters start again from 0. */
    struct signals_pod prev = pod("a", 0, 4, 6, 0.9, 1000, 90000, 50000, 800, 400, 10, 10, 10);
    struct signals_pod cur = pod("a", 10, 1, 1, 0.1, 30, 2000, 1000, 100, 20, 3, 3, 3);
    struct policy_signals s;
    signals_compute(&prev, 1, &cur, 1, 0, 10, &s);
    /* New value is the whole delta; arrivals = finished since restart + in the engine now. */
    ck_assert_double_eq_tol(s.arrival_rate, (30 + 2) / 10.0, 1e-9);
    ck_assert_double_eq_tol(s.prompt_tok_rate, 200, 1e-9);
    ck_assert_double_eq_tol(s.gen_tok_rate, 100, 1e-9);
    ck_assert_double_eq_tol(s.prefix_hit_rate, 0.2, 1e-9);
    /* 3 new observations, all <= 0.1: rank 2.97 of 3 interpolated inside [0, 0.1]. */
    ck_assert_double_eq_tol(s.ttft_p99_s, 0.099, 1e-9);
    ck_assert(s.arrival_rate >= 0 && s.prompt_tok_rate >= 0 && s.gen_tok_rate >= 0);
}
END_TEST

START_TEST(test_signals_counter_delta_rule)
{
    ck_assert_double_eq(signals_counter_delta(10, 15), 5);
    ck_assert_double_eq(signals_counter_delta(10, 10), 0);
    ck_assert_double_eq(signals_counter_delta(10, 3), 3);
    ck_assert_double_eq(signals_counter_delta(0, 0), 0);
}
END_TEST

START_TEST(test_signals_compute_pod_appears_and_disappears)
{
    /* Round 1: a, b. Round 2: a, c (b was deleted, c is new). */
    struct signals_pod prev[2] = {
        pod("a", 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0),
        pod("b", 0, 0, 0, 0, 500, 0, 0, 0, 0, 0, 0, 0),
    };
    struct signals_pod cur[2] = {
        pod("a", 10, 0, 1, 0.2, 110, 0, 0, 0, 0, 0, 0, 0),
        pod("c", 10, 2, 3, 0.4, 7000, 0, 0, 0, 0, 0, 0, 0),
    };
    struct policy_signals s;
    signals_compute(prev, 2, cur, 2, 0, 10, &s);
    ck_assert_int_eq(s.ready_pods, 2);
    ck_assert_double_eq_tol(s.waiting, 4, 1e-9); /* gauges count the new pod */
    ck_assert_double_eq_tol(s.kv_usage, 0.3, 1e-9);
    /* Rates only from a (seen twice): 10 finished + 1 more in the engine over 10 s. The vanished b
     * and the new c (whose counter is lifetime, not this interval) add nothing. */
    ck_assert_double_eq_tol(s.arrival_rate, 1.1, 1e-9);
}
END_TEST

START_TEST(test_signals_compute_first_round_has_no_rates)
{
    struct signals_pod cur = pod("a", 10, 1, 2, 0.5, 1000, 1000, 1000, 10, 5, 1, 1, 1);
    struct policy_signals s;
    signals_compute(NULL, 0, &cur, 1, 0, 10, &s);
    ck_assert(s.metrics_ok);
    ck_assert_double_eq_tol(s.waiting, 2, 1e-9);
    ck_assert_double_eq_tol(s.arrival_rate, 0, 1e-12);
    ck_assert_double_eq_tol(s.gen_tok_rate, 0, 1e-12);
    ck_assert(s.ttft_p99_s < 0);
}
END_TEST

START_TEST(test_signals_compute_failed_scrapes_are_unready)
{
    struct signals_pod prev = pod("a", 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    struct signals_pod cur[2] = {{.key = "a", .time_s = 5, .ok = false},
                                 {.key = "b", .time_s = 5, .ok = false}};
    struct policy_signals s;
    signals_compute(&prev, 1, cur, 2, 1, 5, &s);
    ck_assert(!s.metrics_ok);
    ck_assert_int_eq(s.ready_pods, 0);
    ck_assert_int_eq(s.unready_pods, 3);
    ck_assert_double_eq(s.waiting, 0);
}
END_TEST

START_TEST(test_signals_compute_body_without_contract_metrics)
{
    /* A pod answers, but with something that is not an engine (a sidecar, a wrong port). */
    const char *text = "# TYPE go_goroutines gauge\ngo_goroutines 12\n";
    struct signals_pod cur = {.key = "a", .time_s = 1, .ok = true};
    ck_assert_int_eq(scrape_parse_body(text, strlen(text), 0, &cur.m, NULL, 0), 0);
    ck_assert_uint_eq(cur.m.have, 0);
    struct policy_signals s;
    signals_compute(NULL, 0, &cur, 1, 0, 1, &s);
    ck_assert(!s.metrics_ok);
    ck_assert_int_eq(s.unready_pods, 1);
}
END_TEST

START_TEST(test_signals_compute_gauges_only_engine)
{
    /* An engine with queue gauges but no counters or histogram still drives the queue metric. */
    struct signals_pod prev = gauges_only("a", 0, 1, 1);
    struct signals_pod cur = gauges_only("a", 5, 2, 8);
    struct policy_signals s;
    signals_compute(&prev, 1, &cur, 1, 0, 5, &s);
    ck_assert(s.metrics_ok);
    ck_assert_double_eq_tol(s.waiting, 8, 1e-9);
    ck_assert_double_eq_tol(s.kv_usage, 0, 1e-12);
    ck_assert_double_eq_tol(s.arrival_rate, 0, 1e-12); /* no requests counter: no estimate */
    ck_assert(s.ttft_p99_s < 0);
}
END_TEST

START_TEST(test_signals_compute_same_time_no_division)
{
    /* Two rounds with the same timestamp (clock did not advance): no rates, no inf/nan. */
    struct signals_pod prev = pod("a", 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    struct signals_pod cur = pod("a", 7, 0, 0, 0, 50, 50, 50, 50, 50, 5, 5, 5);
    struct policy_signals s;
    signals_compute(&prev, 1, &cur, 1, 0, 7, &s);
    ck_assert(isfinite(s.arrival_rate) && s.arrival_rate == 0);
    ck_assert(isfinite(s.gen_tok_rate) && s.gen_tok_rate == 0);
}
END_TEST

START_TEST(test_signals_compute_mismatched_buckets_skipped)
{
    /* Pod b exposes other TTFT bounds (mixed engine versions): its buckets are left out. */
    struct signals_pod prev[2] = {pod("a", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                                  {.key = "b", .time_s = 0, .ok = true}};
    struct signals_pod cur[2] = {pod("a", 5, 0, 0, 0, 0, 0, 0, 0, 0, 10, 10, 10),
                                 {.key = "b", .time_s = 5, .ok = true}};
    const char *b0 = "cinfer_requests_running 0\n# TYPE cinfer_time_to_first_token_seconds "
                     "histogram\ncinfer_time_to_first_token_seconds_bucket{le=\"5\"} 0\n"
                     "cinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"} 0\n";
    const char *b1 = "cinfer_requests_running 0\n# TYPE cinfer_time_to_first_token_seconds "
                     "histogram\ncinfer_time_to_first_token_seconds_bucket{le=\"5\"} 0\n"
                     "cinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"} 100\n";
    ck_assert_int_eq(scrape_parse_body(b0, strlen(b0), 0, &prev[1].m, NULL, 0), 0);
    ck_assert_int_eq(scrape_parse_body(b1, strlen(b1), 0, &cur[1].m, NULL, 0), 0);
    struct policy_signals s;
    signals_compute(prev, 2, cur, 2, 0, 5, &s);
    /* Only a's 10 fast observations: rank 9.9 of 10 inside [0, 0.1]. */
    ck_assert_double_eq_tol(s.ttft_p99_s, 0.099, 1e-9);
}
END_TEST

Suite *signals_suite(void)
{
    Suite *s = suite_create("signals");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_signals_compute_two_pods);
    tcase_add_test(tc, test_signals_compute_ttft_from_deltas_not_totals);
    tcase_add_test(tc, test_signals_compute_no_observations_ttft_negative);
    tcase_add_test(tc, test_signals_compute_counter_reset);
    tcase_add_test(tc, test_signals_counter_delta_rule);
    tcase_add_test(tc, test_signals_compute_pod_appears_and_disappears);
    tcase_add_test(tc, test_signals_compute_first_round_has_no_rates);
    tcase_add_test(tc, test_signals_compute_failed_scrapes_are_unready);
    tcase_add_test(tc, test_signals_compute_body_without_contract_metrics);
    tcase_add_test(tc, test_signals_compute_gauges_only_engine);
    tcase_add_test(tc, test_signals_compute_same_time_no_division);
    tcase_add_test(tc, test_signals_compute_mismatched_buckets_skipped);
    suite_add_tcase(s, tc);
    return s;
}
