/* The static frontier (autoscaler/sim/frontier.c) on hand-computed cases: the Pareto envelope,
 * interpolation and its ends, the best static fleet, the verdict; and the bench calibration
 * (autoscaler/sim/calibrate.c) on real and malformed bench output. */
#include "autoscaler/sim/calibrate.h"
#include "autoscaler/sim/frontier.h"

#include "common/err.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

START_TEST(test_frontier_envelope_drops_dominated_points)
{
    /* Out of order; fleet 5 costs more than 4 and violates more (noise): not on the frontier. */
    struct frontier_point p[] = {
        {3, 300, 0.10}, {1, 100, 0.90}, {5, 500, 0.021},
        {4, 400, 0.02}, {2, 200, 0.40}, {6, 600, 0.02}, /* equal to 4's: no better, not on it */
    };
    size_t k = frontier_envelope(p, 6);
    ck_assert_uint_eq(k, 4);
    static const int want[] = {1, 2, 3, 4};
    for (size_t i = 0; i < k; i++) ck_assert_int_eq(p[i].replicas, want[i]);
}
END_TEST

START_TEST(test_frontier_at_interpolates_and_clamps)
{
    struct frontier_point env[] = {{1, 100, 0.9}, {2, 200, 0.4}, {3, 300, 0.1}};
    ck_assert_double_eq_tol(frontier_at(env, 3, 150), 0.65, 1e-12);
    ck_assert_double_eq_tol(frontier_at(env, 3, 275), 0.175, 1e-12);
    ck_assert_double_eq(frontier_at(env, 3, 200), 0.4);
    ck_assert_double_eq(frontier_at(env, 3, 50), 0.9);  /* cheaper than any fleet */
    ck_assert_double_eq(frontier_at(env, 3, 900), 0.1); /* beyond the last */
    ck_assert_double_eq(frontier_at(env, 0, 100), -1);
}
END_TEST

START_TEST(test_frontier_best_is_cheapest_near_the_minimum)
{
    /* Minimum 0.0012 at 12; 10 is within 0.1 point (0.0019), 9 is not (0.0023). */
    struct frontier_point p[] = {{9, 900, 0.0023},
                                 {12, 1200, 0.0012},
                                 {10, 1000, 0.0019},
                                 {11, 1100, 0.0012},
                                 {14, 1400, 0.0013}};
    ck_assert_uint_eq(frontier_best(p, 5), 2);
    ck_assert_uint_eq(frontier_best(p, 0), 0);
}
END_TEST

START_TEST(test_frontier_judge_table)
{
    struct frontier_point st[] = {
        {7, 700, 0.10}, {8, 800, 0.005}, {9, 900, 0.0025}, {10, 1000, 0.0014}, {11, 1100, 0.0012}};
    /* Best static: 10 (0.0014 <= 0.0012 + 0.001; 9's 0.0025 is not). */
    static const struct {
        const char *name;
        double rs, viol;
        bool below, goal;
    } cases[] = {
        {"between 7 and 8, far under the line, cheap enough", 750, 0.01, true, true},
        {"on the line is not below", 800, 0.005, false, true},
        {"below but too expensive for the goal", 950, 0.0015, true, false},
        {"cheap but more than 1 point above the best", 700, 0.02, true, false},
        {"above the frontier", 900, 0.004, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct frontier_point p = {0, cases[i].rs, cases[i].viol};
        struct frontier_verdict v;
        ck_assert_int_eq(frontier_judge(st, 5, &p, &v), 0);
        ck_assert_msg(v.below == cases[i].below, "%s: below %d", cases[i].name, v.below);
        ck_assert_msg(v.goal == cases[i].goal, "%s: goal %d", cases[i].name, v.goal);
        ck_assert_double_eq(v.best_replica_seconds, 1000);
        ck_assert_double_eq_tol(v.cost_ratio, cases[i].rs / 1000, 1e-12);
    }
    struct frontier_point p = {0, 1, 0};
    struct frontier_verdict v;
    ck_assert_int_eq(frontier_judge(st, 0, &p, &v), -1);
}
END_TEST

/* The shape `cinfer-engine bench` prints (engine/cmd/cmd_bench.c). */
static const char bench_out[] =
    "# build/bench/bench-q8_0.gguf: q8_0, 12 layers, dim 768, ffn 2048, vocab 32000, 111.0 MiB "
    "of weights per token, threads 2, decode depth 0\n"
    "type    batch       pp     pp_tok_s       tg     tg_tok_s    rss_MiB pp_cpu_tok_s\n"
    "q8_0        1      512      2353.00      128       261.90      181.0      2360.00\n"
    "{\"batch\":1,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2353.00,\"tg_tok_s\":261.90,"
    "\"rss_bytes\":189792256}\n"
    "{\"batch\":4,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2350.00,\"tg_tok_s\":667.00,"
    "\"rss_bytes\":190000000}\n"
    "{\"batch\":16,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2351.00,\"tg_tok_s\":1048.00,"
    "\"rss_bytes\":191000000}\n";

START_TEST(test_calibrate_from_bench_output)
{
    struct sim_replica_model m = {.prefill_tps = 1, .max_running = 16};
    char desc[256], err[160];
    ck_assert_int_eq(calibrate_from_bench(bench_out, strlen(bench_out), &m, desc, sizeof(desc), err,
                                          sizeof(err)),
                     0);
    ck_assert_double_eq(m.prefill_tps, 2353);
    ck_assert_double_eq(m.decode_tps, 261.9);
    ck_assert_int_eq(m.decode_batch, 16);
    ck_assert_double_eq(m.decode_batch_tps, 1048);
    ck_assert_int_eq(m.max_running, 16); /* not the bench's to say */
    ck_assert_ptr_nonnull(strstr(desc, "bench-q8_0.gguf: q8_0, 12 layers"));
}
END_TEST

/* bench_out plus speculative runs of the same replica (batch 4 and 1, the smaller one counts). */
static const char spec_line_b4[] =
    "{\"batch\":4,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2350.00,\"tg_tok_s\":900.00,"
    "\"rss_bytes\":1,\"speculative\":\"ngram\",\"num_speculative_tokens\":3,\"spec_adaptive\":true,"
    "\"spec_proposed\":10,\"spec_accepted\":5,\"spec_accept_rate\":0.5,"
    "\"spec_tokens_per_step\":1.5000}\n";

START_TEST(test_calibrate_from_bench_speculative_lines)
{
    /* n-gram, K 5, 2.94117 tokens per step: (1 - a^6) / (1 - a) at a = 0.7. */
    char text[4096], err[160];
    double per_step = (1 - pow(0.7, 6)) / 0.3;
    snprintf(text, sizeof(text),
             "%s%s{\"batch\":1,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2000,"
             "\"tg_tok_s\":500,\"rss_bytes\":1,\"speculative\":\"ngram\","
             "\"num_speculative_tokens\":5,\"spec_tokens_per_step\":%.6f}\n",
             bench_out, spec_line_b4, per_step);
    struct sim_replica_model m = {.max_running = 16, .spec_accept = 0.1};
    ck_assert_int_eq(calibrate_from_bench(text, strlen(text), &m, NULL, 0, err, sizeof(err)), 0);
    ck_assert_double_eq(m.prefill_tps, 2353); /* the plain curve, not the speculative lines */
    ck_assert_double_eq(m.decode_tps, 261.9);
    ck_assert_double_eq(m.decode_batch_tps, 1048);
    ck_assert_int_eq(m.spec_tokens, 5);
    ck_assert_double_eq_tol(m.spec_accept, 0.7, 1e-5);
    ck_assert_double_eq(m.spec_draft_cost, 0);

    /* A draft model at batch 1: K 4, a 0.6, its steps 0.2 of the target's: the rate that gives. */
    double k = (16 * 261.9 / 1048 - 1) / 15;
    double t1 = 1 / 261.9, t5 = (1 + 4 * k) / 261.9;
    double e = (1 - pow(0.6, 5)) / 0.4, rate = e / (t5 + 4 * 0.2 * t1);
    snprintf(text, sizeof(text),
             "%s{\"batch\":1,\"prompt_tokens\":512,\"depth\":0,\"pp_tok_s\":2000,"
             "\"tg_tok_s\":%.6f,\"rss_bytes\":1,\"speculative\":\"draft\","
             "\"num_speculative_tokens\":4,\"spec_tokens_per_step\":%.6f}\n",
             bench_out, rate, e);
    memset(&m, 0, sizeof(m));
    ck_assert_int_eq(calibrate_from_bench(text, strlen(text), &m, NULL, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(m.spec_tokens, 4);
    ck_assert_double_eq_tol(m.spec_accept, 0.6, 1e-5);
    ck_assert_double_eq_tol(m.spec_draft_cost, 0.2, 1e-4);

    /* Without speculative lines the spec fields are the caller's. */
    m = (struct sim_replica_model){.spec_tokens = 2, .spec_accept = 0.5};
    ck_assert_int_eq(
        calibrate_from_bench(bench_out, strlen(bench_out), &m, NULL, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(m.spec_tokens, 2);
    ck_assert_double_eq(m.spec_accept, 0.5);

    static const char *const bad[] = {
        "\"speculative\":\"eagle\",\"num_speculative_tokens\":4,\"spec_tokens_per_step\":2",
        "\"speculative\":\"ngram\",\"num_speculative_tokens\":0,\"spec_tokens_per_step\":1",
        "\"speculative\":\"ngram\",\"num_speculative_tokens\":17,\"spec_tokens_per_step\":2",
        "\"speculative\":\"ngram\",\"num_speculative_tokens\":4,\"spec_tokens_per_step\":0.5",
        "\"speculative\":\"ngram\",\"num_speculative_tokens\":4,\"spec_tokens_per_step\":5.5",
        "\"speculative\":\"ngram\",\"num_speculative_tokens\":4",
        "\"speculative\":7,\"num_speculative_tokens\":4,\"spec_tokens_per_step\":2",
        "\"speculative\":\"draft\",\"num_speculative_tokens\":2.5,\"spec_tokens_per_step\":2",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text),
                 "%s{\"batch\":1,\"prompt_tokens\":512,\"pp_tok_s\":2000,\"tg_tok_s\":500,%s}\n",
                 bench_out, bad[i]);
        m = (struct sim_replica_model){.prefill_tps = 7};
        err[0] = 0;
        ck_assert_int_eq(calibrate_from_bench(text, strlen(text), &m, NULL, 0, err, sizeof(err)),
                         ERR_PARSE);
        ck_assert_msg(strstr(err, "line 7") && strstr(err, "speculative"), "case %zu: %s", i, err);
        ck_assert_double_eq(m.prefill_tps, 7);
    }
}
END_TEST

START_TEST(test_calibrate_from_bench_rejects_bad_output)
{
    static const struct {
        const char *text, *why;
        int rc;
    } bad[] = {
        {"", "no batch-1", ERR_INVAL},
        {"# only a header\n", "no batch-1", ERR_INVAL},
        {"{\"batch\":4,\"pp_tok_s\":10,\"tg_tok_s\":20}\n", "no batch-1", ERR_INVAL},
        {"{\"batch\":1,\"pp_tok_s\":10}\n", "line 1", ERR_PARSE},
        {"x\n{\"batch\":1,\"pp_tok_s\":-5,\"tg_tok_s\":20}\n", "line 2", ERR_PARSE},
        {"{\"batch\":1.5,\"pp_tok_s\":5,\"tg_tok_s\":20}\n", "line 1", ERR_PARSE},
        {"{\"batch\":1,\"pp_tok_s\":5,\"tg_tok_s\":20\n", "line 1", ERR_PARSE}, /* truncated */
        {"{\"batch\":1,\"pp_tok_s\":5,\"tg_tok_s\":20}\n{\"batch\":4,\"pp_tok_s\":5,\"tg_tok_s\":"
         "100}\n",
         "outside", ERR_INVAL}, /* 4 streams cannot decode 5x one */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sim_replica_model m = {.prefill_tps = 7};
        char err[160] = "";
        int rc =
            calibrate_from_bench(bad[i].text, strlen(bad[i].text), &m, NULL, 0, err, sizeof(err));
        ck_assert_msg(rc == bad[i].rc, "case %zu: rc %d (%s)", i, rc, err);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "case %zu: %s", i, err);
        ck_assert_double_eq(m.prefill_tps, 7); /* untouched on error */
    }
    static char huge[CALIBRATE_MAX_BYTES + 2];
    memset(huge, '#', sizeof(huge) - 1);
    struct sim_replica_model m = {0};
    char err[160];
    ck_assert_int_eq(calibrate_from_bench(huge, sizeof(huge) - 1, &m, NULL, 0, err, sizeof(err)),
                     ERR_TOO_BIG);
}
END_TEST

Suite *frontier_suite(void)
{
    Suite *s = suite_create("frontier");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_frontier_envelope_drops_dominated_points);
    tcase_add_test(tc, test_frontier_at_interpolates_and_clamps);
    tcase_add_test(tc, test_frontier_best_is_cheapest_near_the_minimum);
    tcase_add_test(tc, test_frontier_judge_table);
    tcase_add_test(tc, test_calibrate_from_bench_output);
    tcase_add_test(tc, test_calibrate_from_bench_rejects_bad_output);
    tcase_add_test(tc, test_calibrate_from_bench_speculative_lines);
    suite_add_tcase(s, tc);
    return s;
}
