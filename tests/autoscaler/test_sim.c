/* Simulator: the replica service model on hand-computable cases, the prefix cache, determinism,
 * sanity of policies on synthetic loads (static at peak meets the objective; a long start-up hurts
 * reactive scaling; predictive scaling runs the real policy), the PNG writer and the subcommand. */
#include "autoscaler/sim/cmd_simulate.h"
#include "autoscaler/sim/frontier.h"
#include "autoscaler/sim/plot.h"
#include "autoscaler/sim/sim.h"
#include "autoscaler/sim/sim_cache.h"
#include "autoscaler/sim/trace.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Mooncake-format trace text: `n` requests at `rps` (constant), or a step to `rps2` after `t_step`
 * seconds; prompt/output tokens fixed; hashes [0, i % groups + 1] when groups > 0. */
static struct trace *synth(size_t n, double rps, double t_step, double rps2, unsigned prompt,
                           unsigned output, unsigned groups)
{
    size_t cap = n * 128 + 64, len = 0;
    char *s = malloc(cap);
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(s + len, cap - len,
                                "{\"timestamp\":%.3f,\"input_length\":%u,\"output_length\":%u",
                                t * 1000, prompt, output);
        if (groups)
            len += (size_t)snprintf(s + len, cap - len, ",\"hash_ids\":[0,%u]",
                                    (unsigned)(i % groups) + 1);
        len += (size_t)snprintf(s + len, cap - len, "}\n");
        t += 1.0 / (t < t_step ? rps : rps2);
    }
    struct trace *tr = NULL;
    char err[256];
    int rc = trace_parse(s, len, TRACE_MOONCAKE, &tr, err, sizeof(err));
    free(s);
    ck_assert_msg(rc == 0, "%s", err);
    return tr;
}

START_TEST(test_sim_run_single_request_exact_times)
{
    /* 2000 prompt tokens at 2000 tok/s: TTFT 1 s; then 60 tokens at 60 tok/s: done at 2 s. */
    struct trace *tr = synth(1, 1, 1e9, 1, 2000, 61, 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.replicas = 1;
    struct sim_result r;
    char err[256];
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_uint_eq(r.requests, 1);
    ck_assert_double_eq_tol(r.ttft_p50_s, 1.0, 1e-9);
    ck_assert_double_eq_tol(r.duration_s, 2.0, 1e-6);
    ck_assert_double_eq_tol(r.replica_seconds, 2.0, 1e-6);
    ck_assert_double_eq(r.slo_violation_rate, 0);
    ck_assert_str_eq(r.policy, "static");
    sim_result_fini(&r);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_run_prefill_queues_fifo_and_batches_decode)
{
    /* Two simultaneous 1000-token prompts on one replica: TTFTs 0.5 s and 1.0 s (prefill is one
     * at a time); with 2 decoding, each runs at 60 / (1 + k) tok/s. */
    const char *s = "{\"timestamp\":0,\"input_length\":1000,\"output_length\":1}\n"
                    "{\"timestamp\":0,\"input_length\":1000,\"output_length\":1}\n";
    struct trace *tr = NULL;
    char err[256];
    ck_assert_int_eq(trace_parse(s, strlen(s), TRACE_MOONCAKE, &tr, err, sizeof(err)), 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.spread_ties = false;
    struct sim_result r;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_eq_tol(r.ttft_p50_s, 0.5, 1e-9);
    ck_assert_double_eq_tol(r.ttft_p99_s, 1.0, 1e-9);
    ck_assert_double_eq_tol(r.ttft_mean_s, 0.75, 1e-9);
    sim_result_fini(&r);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_run_itl_gaps_include_prefill_pauses)
{
    /* A: 2000-token prompt (1 s of prefill), 61 output tokens: 60 gaps of 1/60 s alone. B arrives
     * at 1.5 s with a 1000-token prompt: its 0.5 s prefill pauses A, whose gap spanning it is
     * 0.5 + 1/60 s; B emits only its first token. So 60 gaps, exactly one above 0.4 s. */
    const char *s = "{\"timestamp\":0,\"input_length\":2000,\"output_length\":61}\n"
                    "{\"timestamp\":1500,\"input_length\":1000,\"output_length\":1}\n";
    struct trace *tr = NULL;
    char err[256];
    ck_assert_int_eq(trace_parse(s, strlen(s), TRACE_MOONCAKE, &tr, err, sizeof(err)), 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.spread_ties = false;
    cfg.slo_itl_s = 0.4;
    struct sim_result r;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_eq_tol(r.itl_gaps, 60, 1e-6);
    ck_assert_double_eq_tol(r.itl_violation_rate, 1.0 / 60, 1e-9);
    ck_assert_double_eq_tol(r.itl_p50_s, 1.0 / 60, 0.03 / 60); /* the bin's upper edge */
    ck_assert_double_eq_tol(r.duration_s, 1 + 60.0 / 60 + 0.5, 1e-6);
    cfg.slo_itl_s = 0; /* not counted */
    sim_result_fini(&r);
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_eq(r.itl_violation_rate, 0);
    sim_result_fini(&r);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_run_prefix_cache_hits)
{
    /* Same 2-block prefix (1024 tokens of 1024) twice, 10 s apart: the second prefill is cached
     * except its last position, so half the prompt tokens hit. */
    const char *s =
        "{\"timestamp\":0,\"input_length\":1024,\"output_length\":2,\"hash_ids\":[5,6]}\n"
        "{\"timestamp\":10000,\"input_length\":1024,\"output_length\":2,"
        "\"hash_ids\":[5,6]}\n";
    struct trace *tr = NULL;
    char err[256];
    ck_assert_int_eq(trace_parse(s, strlen(s), TRACE_MOONCAKE, &tr, err, sizeof(err)), 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    struct sim_result r;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_eq_tol(r.prefix_hit_rate, 0.5, 1e-9);
    ck_assert_double_eq_tol(r.ttft_p50_s, 1.0 / 2000, 1e-9); /* one token to compute */
    cfg.model.cache_tokens = 0;                              /* disabled: no hits */
    sim_result_fini(&r);
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_eq(r.prefix_hit_rate, 0);
    sim_result_fini(&r);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_cache_lru_eviction_keeps_leading_blocks)
{
    struct sim_cache c;
    ck_assert_int_eq(sim_cache_init(&c, 3, NULL, 0), 0);
    const uint64_t a[] = {1, 2, 3}, b[] = {1, 9};
    sim_cache_insert(&c, a, 3);
    ck_assert_uint_eq(sim_cache_match(&c, a, 3), 3);
    sim_cache_insert(&c, b, 2); /* evicts 3, the least recently used (tail block of a) */
    ck_assert_uint_eq(sim_cache_match(&c, a, 3), 2);
    ck_assert_uint_eq(sim_cache_match(&c, b, 2), 2);
    const uint64_t d[] = {7};
    ck_assert_uint_eq(sim_cache_match(&c, d, 1), 0);
    for (uint64_t k = 100; k < 1000; k++) sim_cache_insert(&c, &k, 1);
    ck_assert_uint_eq(c.n, 3);
    sim_cache_fini(&c);
    ck_assert_int_eq(sim_cache_init(&c, 0, NULL, 0), 0); /* holds nothing */
    sim_cache_insert(&c, a, 3);
    ck_assert_uint_eq(sim_cache_match(&c, a, 3), 0);
    sim_cache_fini(&c);
}
END_TEST

START_TEST(test_sim_run_same_seed_identical_json)
{
    struct trace *tr = synth(3000, 4, 300, 12, 800, 60, 50);
    char j1[1024], j2[1024], err[256];
    for (int pass = 0; pass < 2; pass++) {
        struct sim_config cfg;
        sim_config_defaults(&cfg, POLICY_PREDICTIVE);
        cfg.spec.startup_s = 30;
        cfg.seed = 7;
        struct sim_result r;
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
        sim_result_json(&r, pass == 0 ? j1 : j2, sizeof(j1));
        sim_result_fini(&r);
    }
    ck_assert_str_eq(j1, j2);
    ck_assert_ptr_nonnull(strstr(j1, "{\"policy\":\"predictive\",\"requests\":3000,"));
    ck_assert_ptr_nonnull(strstr(j1, "\"prefix_hit_rate\":"));
    trace_free(tr);
}
END_TEST

/* A step from 2 to 8 req/s (prefill 0.25 s each: one replica serves ~4 req/s). */
START_TEST(test_sim_run_policy_sanity_on_step)
{
    struct trace *tr = synth(6000, 2, 300, 8, 500, 20, 0);
    char err[256];
    struct sim_config cfg;
    struct sim_result st, fast, slow, pred;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.replicas = 4; /* at peak: 8 req/s x 0.25 s = 2 busy replicas + headroom */
    ck_assert_int_eq(sim_run(tr, &cfg, &st, err, sizeof(err)), 0);
    ck_assert_double_lt(st.slo_violation_rate, 0.001);
    sim_config_defaults(&cfg, POLICY_REACTIVE);
    cfg.spec.target_kv_usage = 0.05;
    cfg.spec.startup_s = 5;
    ck_assert_int_eq(sim_run(tr, &cfg, &fast, err, sizeof(err)), 0);
    cfg.spec.startup_s = 600;
    ck_assert_int_eq(sim_run(tr, &cfg, &slow, err, sizeof(err)), 0);
    ck_assert_msg(slow.slo_violation_rate > fast.slo_violation_rate + 0.05,
                  "slow start-up %g vs fast %g", slow.slo_violation_rate, fast.slo_violation_rate);
    ck_assert_int_gt(fast.scale_events, 0);
    ck_assert_int_gt(fast.max_replicas_seen, 1);
    cfg.spec.kind = POLICY_PREDICTIVE;
    cfg.spec.startup_s = 5;
    ck_assert_int_eq(sim_run(tr, &cfg, &pred, err, sizeof(err)), 0);
    ck_assert_str_eq(pred.policy, "predictive");
    ck_assert_int_gt(pred.scale_events, 0);
    ck_assert_uint_gt(pred.n_samples, 10);
    sim_result_fini(&st);
    sim_result_fini(&fast);
    sim_result_fini(&slow);
    sim_result_fini(&pred);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_run_rejects_bad_config)
{
    struct trace *tr = synth(2, 1, 1e9, 1, 10, 10, 0);
    struct sim_config cfg;
    struct sim_result r;
    char err[256];
    sim_config_defaults(&cfg, POLICY_REACTIVE);
    cfg.spec.min_replicas = 0;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "min replicas"));
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.model.decode_batch_tps = 10000; /* more than 16 x 60 */
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), ERR_INVAL);
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.time_scale = 0;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), ERR_INVAL);
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.routing = SIM_ROUTE_ROUTER_LATE;
    cfg.late_hold = 0;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "late-binding hold"));
    static const struct sim_replica_model bad_spec[] = {
        {.spec_tokens = 17, .spec_accept = 0.5},
        {.spec_tokens = -1, .spec_accept = 0.5},
        {.spec_tokens = 4, .spec_accept = 1},
        {.spec_tokens = 4, .spec_accept = -0.1},
        {.spec_tokens = 4, .spec_accept = NAN},
        {.spec_tokens = 4, .spec_accept = 0.5, .spec_draft_cost = -1},
        {.spec_tokens = 4, .spec_accept = 0.5, .spec_draft_cost = 1e9},
    };
    for (size_t i = 0; i < sizeof(bad_spec) / sizeof(bad_spec[0]); i++) {
        sim_config_defaults(&cfg, POLICY_STATIC);
        cfg.model.spec_tokens = bad_spec[i].spec_tokens;
        cfg.model.spec_accept = bad_spec[i].spec_accept;
        cfg.model.spec_draft_cost = bad_spec[i].spec_draft_cost;
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), ERR_INVAL);
        ck_assert_msg(strstr(err, "speculation") != NULL, "case %zu: %s", i, err);
    }
    enum sim_routing m = SIM_ROUTE_RANDOM;
    ck_assert_int_eq(sim_routing_parse("router-late", &m), 0);
    ck_assert_int_eq(m, SIM_ROUTE_ROUTER_LATE);
    ck_assert_int_eq(sim_routing_parse("router", &m), 0);
    ck_assert_int_eq(m, SIM_ROUTE_ROUTER);
    ck_assert_int_eq(sim_routing_parse("Router", &m), ERR_INVAL);
    ck_assert_int_eq(sim_routing_parse("", &m), ERR_INVAL);
    ck_assert_int_eq(sim_routing_parse(NULL, &m), ERR_INVAL);
    ck_assert_int_eq(m, SIM_ROUTE_ROUTER); /* untouched on error */
    trace_free(tr);
}
END_TEST

/* The default curve's step time of n tokens, T(n) = (1 + (n-1) k) / 60, k through D(16) = 700. */
static double step_s(double n)
{
    double k = (16.0 * 60 / 700 - 1) / 15;
    return (1 + (n - 1) * k) / 60;
}

/* One stream's rate under the engine's rule, computed here by hand: the p proposals in
 * 0..K maximising (1 + a + .. + a^p) / (T(1 + p) + draft rounds), kept over p = 0 only when 5%
 * better. */
static double single_stream_rate(int K, double a, double draft_cost)
{
    double base = 1 / step_s(1), best = base * 1.05, rate = base, tokens = 1, g = 1;
    for (int p = 1; p <= K; p++) {
        g *= a;
        tokens += g;
        double r = tokens / (step_s(1 + p) + p * draft_cost * step_s(1));
        if (r > best) best = rate = r;
    }
    return rate;
}

START_TEST(test_sim_spec_single_stream_rate_is_the_controllers_plan)
{
    /* 2000 prompt tokens (1 s), then 600 more output tokens at the planned rate. */
    struct trace *tr = synth(1, 1, 1e9, 1, 2000, 601, 0);
    static const struct {
        int k;
        double accept, draft;
    } cases[] = {{4, 0.6, 0},     {5, 0.8, 0}, {5, 0.8, 0.1},
                 {16, 0.9, 0.05}, {3, 0.2, 0}, {3, 0.03, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sim_config cfg;
        sim_config_defaults(&cfg, POLICY_STATIC);
        cfg.model.spec_tokens = cases[i].k;
        cfg.model.spec_accept = cases[i].accept;
        cfg.model.spec_draft_cost = cases[i].draft;
        struct sim_result r;
        char err[256];
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
        double rate = single_stream_rate(cases[i].k, cases[i].accept, cases[i].draft);
        ck_assert_msg(fabs(r.duration_s - (1 + 600 / rate)) < 1e-6, "case %zu: %.6f s, want %.6f",
                      i, r.duration_s, 1 + 600 / rate);
        ck_assert_double_eq_tol(r.ttft_p50_s, 1.0, 1e-9); /* prefill is not speculated */
        sim_result_fini(&r);
    }
    /* on this weight-bound curve even acceptance 0.2 pays (1.2 tokens for 1.025 steps), 0.03
     * does not beat the 5% margin: exactly the plain rate */
    ck_assert_double_gt(single_stream_rate(3, 0.2, 0), 1.1 * 60);
    ck_assert_double_eq(single_stream_rate(3, 0.03, 0), 60);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_spec_nothing_proposed_is_the_plain_replica)
{
    /* A compute-bound curve (16 streams decode only 100 tok/s together): one extra token costs
     * nearly a whole step, so the controller never proposes and the run is byte-identical to the
     * one without speculation; with the default, batch-friendly curve it is faster. */
    struct trace *tr = synth(400, 4, 1e9, 4, 300, 200, 8);
    char a[1024], b[1024], err[256];
    struct sim_config cfg;
    struct sim_result r;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.replicas = 3;
    cfg.model.decode_batch_tps = 100;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    sim_result_json(&r, a, sizeof(a));
    sim_result_fini(&r);
    cfg.model.spec_tokens = 5;
    cfg.model.spec_accept = 0.6;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    sim_result_json(&r, b, sizeof(b));
    sim_result_fini(&r);
    ck_assert_str_eq(a, b);

    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.replicas = 3;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    double plain_itl = r.itl_p50_s, plain_end = r.duration_s;
    sim_result_fini(&r);
    cfg.model.spec_tokens = 5;
    cfg.model.spec_accept = 0.7;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_double_lt(r.itl_p50_s, plain_itl / 1.5);
    ck_assert_double_lt(r.duration_s, plain_end);
    ck_assert_uint_eq(r.requests, 400);
    sim_result_fini(&r);
    trace_free(tr);
}
END_TEST

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

START_TEST(test_plot_png_encode_structure)
{
    struct plot_canvas c;
    ck_assert_int_eq(plot_canvas_init(&c, 300, 200), 0);
    plot_line(&c, 0, 0, 299, 199, PLOT_RED);
    plot_text(&c, 10, 10, "TTFT 1.5", PLOT_BLACK);
    ck_assert_int_eq(c.px[0], PLOT_RED);
    ck_assert_int_eq(c.px[199 * 300 + 299], PLOT_RED);
    uint8_t *png;
    size_t len;
    ck_assert_int_eq(plot_png_encode(&c, &png, &len), 0);
    ck_assert_int_eq(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0);
    ck_assert_int_eq(memcmp(png + 12, "IHDR", 4), 0);
    ck_assert_uint_eq(rd32(png + 16), 300);
    ck_assert_uint_eq(rd32(png + 20), 200);
    ck_assert_int_eq(memcmp(png + len - 8, "IEND", 4), 0);
    ck_assert_uint_eq(rd32(png + len - 4), 0xAE426082u); /* the well-known CRC of IEND */
    /* IDAT (after IHDR's and PLTE's chunks) inflates to the scanlines: filter byte 0, then the
     * palette indices; the mostly white canvas compresses to well under a tenth. */
    size_t idat = 8 + 25 + 12 + 3 * PLOT_N_COLORS;
    ck_assert_int_eq(memcmp(png + idat + 4, "IDAT", 4), 0);
    uint32_t zn = rd32(png + idat);
    ck_assert_uint_lt(zn, 301 * 200 / 10);
    uLongf rawn = 301 * 200;
    uint8_t *raw = malloc(rawn);
    ck_assert_int_eq(uncompress(raw, &rawn, png + idat + 8, zn), Z_OK);
    ck_assert_uint_eq(rawn, 301 * 200);
    for (int y = 0; y < 200; y++) {
        ck_assert_int_eq(raw[(size_t)y * 301], 0);
        ck_assert_int_eq(memcmp(raw + (size_t)y * 301 + 1, c.px + (size_t)y * 300, 300), 0);
    }
    free(raw);
    free(png);
    plot_canvas_fini(&c);
    ck_assert_int_eq(plot_canvas_init(&c, 0, 10), ERR_RANGE);
}
END_TEST

START_TEST(test_cmd_simulate_main_prints_one_json_line_and_plot)
{
    char trace[512], png[512], out[512];
    snprintf(trace, sizeof(trace), "%s/cinfer_test_sim_%d.jsonl", test_tmpdir(), (int)getpid());
    snprintf(png, sizeof(png), "%s/cinfer_test_sim_%d.png", test_tmpdir(), (int)getpid());
    snprintf(out, sizeof(out), "%s/cinfer_test_sim_%d.out", test_tmpdir(), (int)getpid());
    FILE *f = fopen(trace, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 400; i++)
        fprintf(f, "{\"timestamp\":%d,\"input_length\":300,\"output_length\":10}\n", i * 250);
    fclose(f);
    char *argv[] = {"simulate", "--trace", trace, "--policy",     "reactive", "--interval",
                    "5",        "--plot",  png,   "--log-format", "text",     NULL};
    fflush(stdout);
    FILE *saved = fdopen(dup(fileno(stdout)), "w");
    ck_assert_ptr_nonnull(freopen(out, "w", stdout));
    int rc = cmd_simulate_main(11, argv);
    fflush(stdout);
    dup2(fileno(saved), fileno(stdout));
    fclose(saved);
    ck_assert_int_eq(rc, 0);
    f = fopen(out, "r");
    char line[1024];
    int json_lines = 0;
    while (fgets(line, sizeof(line), f))
        if (line[0] == '{') {
            json_lines++;
            ck_assert_ptr_nonnull(strstr(line, "\"policy\":\"reactive\",\"requests\":400"));
        }
    fclose(f);
    ck_assert_int_eq(json_lines, 1);
    f = fopen(png, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char sig[8];
    ck_assert_uint_eq(fread(sig, 1, 8, f), 8);
    ck_assert_int_eq(memcmp(sig, "\x89PNG", 4), 0);
    fclose(f);
    char *bad[] = {"simulate", "--trace", "/nonexistent.csv", "--log-level", "error", NULL};
    ck_assert_int_eq(cmd_simulate_main(5, bad), 1);
    char *usage[] = {"simulate", "--policy", "magic", "--trace", trace, NULL};
    ck_assert_int_eq(cmd_simulate_main(5, usage), 2);
    char *too_many[] = {"simulate", "--spec-tokens", "17", "--trace", trace, NULL};
    ck_assert_int_eq(cmd_simulate_main(5, too_many), 2);
    /* the speculation flags reach the model, and the run says so */
    char *spec[] = {"simulate", "--trace",           trace, "--spec-tokens",
                    "4",        "--spec-acceptance", "0.8", NULL};
    fflush(stdout);
    saved = fdopen(dup(fileno(stdout)), "w");
    ck_assert_ptr_nonnull(freopen(out, "w", stdout));
    rc = cmd_simulate_main(7, spec);
    fflush(stdout);
    dup2(fileno(saved), fileno(stdout));
    fclose(saved);
    ck_assert_int_eq(rc, 0);
    f = fopen(out, "r");
    bool said = false;
    while (fgets(line, sizeof(line), f))
        said |= strstr(line, "up to 4 proposals per sequence, acceptance 0.800, n-gram") != NULL;
    fclose(f);
    ck_assert(said);
    remove(trace);
    remove(png);
    remove(out);
}
END_TEST

/* Late binding against binding at arrival: 30 requests of 1 s prefill arrive at once while one
 * replica (max_running 1) is ready; the first scrape (t = 15 s) sees 14 waiting (in the engine,
 * or held at the router: the signal is the same) and orders a second replica, ready at 25 s.
 * Bound at arrival, all 30 wait at replica 0 and the last first token comes at 30 s; held at the
 * router, replica 0 takes one at a time and the new replica takes the held ones from 25 s: the
 * last 5 are shared and the last first token comes at 28 s. A hold as large as the burst binds
 * everything at once again. */
START_TEST(test_sim_run_late_binding_new_replica_takes_held)
{
    static const struct {
        enum sim_routing routing;
        int late_hold;
        double last_ttft_s, mean_ttft_s;
        int held; /* violations (TTFT > 2 s: requests 3..30) caused by waiting at the router */
    } cases[] = {
        {SIM_ROUTE_ROUTER, 1, 30, 15.5, 0},        /* cinfer-router: binds at arrival */
        {SIM_ROUTE_LEAST_PREFILL, 1, 30, 15.5, 0}, /* so does the idealised router */
        /* Request k is sent when replica 0 has answered k - 1: held k - 1 s, 0 s at the replica. */
        {SIM_ROUTE_ROUTER_LATE, 1, 28, (325 + 26 + 26 + 27 + 27 + 28) / 30.0, 28},
        /* Sent when k - 2 is answered: held k - 2 s, then 1 s at the replica (held from k = 4). */
        {SIM_ROUTE_ROUTER_LATE, 2, 28, (325 + 26 + 26 + 27 + 27 + 28) / 30.0, 27},
        {SIM_ROUTE_ROUTER_LATE, 30, 30, 15.5, 0},
    };
    struct trace *tr = synth(30, 1e9, 1e9, 1, 2000, 1, 0); /* all at t = 0 */
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct sim_config cfg;
        sim_config_defaults(&cfg, POLICY_REACTIVE);
        cfg.routing = cases[k].routing;
        cfg.late_hold = cases[k].late_hold;
        cfg.replicas = 1;
        cfg.spec.max_replicas = 2;
        cfg.spec.startup_s = 10;
        cfg.spec.objective_ttft_s = 0; /* the queue-depth target alone: a decision at 15 s */
        cfg.spec.target_queue_depth = 1;
        cfg.spec.target_kv_usage = 0;
        cfg.model.max_running = 1;
        cfg.spread_ties = false;
        struct sim_result r;
        char err[256];
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
        ck_assert_msg(r.max_replicas_seen == 2 && r.scale_events == 1, "case %zu: %d replicas", k,
                      r.max_replicas_seen);
        ck_assert_msg(fabs(r.ttft_p99_s - cases[k].last_ttft_s) < 1e-6, "case %zu: last %g", k,
                      r.ttft_p99_s);
        ck_assert_msg(fabs(r.ttft_mean_s - cases[k].mean_ttft_s) < 1e-6, "case %zu: mean %g", k,
                      r.ttft_mean_s);
        ck_assert_double_eq_tol(r.slo_violation_rate, 28 / 30.0, 1e-9);
        ck_assert_msg(fabs(r.cause_rate[SIM_CAUSE_HELD] * 30 - cases[k].held) < 1e-6,
                      "case %zu: held %g", k, r.cause_rate[SIM_CAUSE_HELD] * 30);
        /* Nothing was ordered when they arrived: the rest queued at replica 0. */
        ck_assert_double_eq_tol(r.cause_rate[SIM_CAUSE_QUEUED] * 30, 28 - cases[k].held, 1e-6);
        sim_result_fini(&r);
    }
    trace_free(tr);
}
END_TEST

/* Runs `cmd_simulate_main` on argv and returns its stdout (malloc'd, NUL-terminated). */
static char *simulate_stdout(char **argv, int argc, int *rc)
{
    char out[512];
    snprintf(out, sizeof(out), "%s/cinfer_test_sim_out_%d.txt", test_tmpdir(), (int)getpid());
    fflush(stdout);
    FILE *saved = fdopen(dup(fileno(stdout)), "w");
    ck_assert_ptr_nonnull(freopen(out, "w", stdout));
    *rc = cmd_simulate_main(argc, argv);
    fflush(stdout);
    dup2(fileno(saved), fileno(stdout));
    fclose(saved);
    FILE *f = fopen(out, "rb");
    ck_assert_ptr_nonnull(f);
    char *buf = calloc(1, 1 << 20);
    ck_assert_ptr_nonnull(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    remove(out);
    return buf;
}

/* --frontier under each router model: the static fleets it prints make the frontier, and each
 * policy's "frontier there" is that frontier at the policy's replica-seconds (recomputed here
 * from the printed points with frontier.h), its below/ABOVE verdict consistent with it. */
START_TEST(test_cmd_simulate_frontier_matches_printed_fleets)
{
    char trace[512];
    snprintf(trace, sizeof(trace), "%s/cinfer_test_fr_%d.jsonl", test_tmpdir(), (int)getpid());
    FILE *f = fopen(trace, "w");
    ck_assert_ptr_nonnull(f);
    /* 1 req/s of 1500-token prompts, a 3x burst in the middle; two prefix groups. */
    for (int i = 0, t = 0; i < 900; i++, t += (i > 300 && i < 600) ? 333 : 1000)
        fprintf(f,
                "{\"timestamp\":%d,\"input_length\":1500,\"output_length\":40,"
                "\"hash_ids\":[%d,%d,%d]}\n",
                t, i % 2, 10 + i % 2, 100 + i);
    fclose(f);
    const char *modes[] = {"router", "router-late", "least-prefill"};
    for (size_t m = 0; m < 3; m++) {
        char *argv[] = {"simulate",
                        "--trace",
                        trace,
                        "--frontier",
                        "--routing",
                        (char *)modes[m],
                        "--slo-ttft-seconds",
                        "2",
                        "--startup-seconds",
                        "20",
                        "--log-format",
                        "text",
                        NULL};
        int rc;
        char *out = simulate_stdout(argv, 12, &rc);
        ck_assert_int_eq(rc, 0);
        ck_assert_ptr_nonnull(strstr(out, "routing          "));
        struct frontier_point pts[64];
        size_t n = 0;
        int policies = 0;
        for (char *line = out, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            int k;
            double v, rs;
            if (sscanf(line, "static %d %lf%% %lf", &k, &v, &rs) == 3) {
                ck_assert_uint_lt(n, 64);
                ck_assert_int_eq(k, (int)n + 1); /* fleets 1, 2, ... in order */
                pts[n++] = (struct frontier_point){k, rs, v / 100};
                continue;
            }
            char name[16], verdict[8];
            double fv;
            if (sscanf(line, "%15s %lf%% %lf %*f %*d %*d %7s %lf%%", name, &v, &rs, verdict, &fv) ==
                    5 &&
                (strcmp(name, "reactive") == 0 || strcmp(name, "predictive") == 0)) {
                policies++;
                struct frontier_point env[64];
                memcpy(env, pts, n * sizeof(*pts));
                size_t ne = frontier_envelope(env, n);
                /* The printed points are rounded (3 decimals, whole replica-seconds). */
                ck_assert_msg(fabs(100 * frontier_at(env, ne, rs) - fv) < 0.002,
                              "%s %s: frontier %g printed %g", modes[m], name,
                              100 * frontier_at(env, ne, rs), fv);
                if (fabs(v - fv) > 0.001) ck_assert_str_eq(verdict, v < fv ? "below" : "ABOVE");
            }
        }
        ck_assert_uint_ge(n, 4);
        ck_assert_int_eq(policies, 2);
        free(out);
    }
    char *bad[] = {"simulate", "--trace", trace, "--routing", "late", "--log-level", "error", NULL};
    int rc;
    free(simulate_stdout(bad, 7, &rc));
    ck_assert_int_eq(rc, 2);
    char *hold0[] = {"simulate",    "--trace", trace,         "--routing", "router-late",
                     "--late-hold", "0",       "--log-level", "error",     NULL};
    free(simulate_stdout(hold0, 9, &rc));
    ck_assert_int_eq(rc, 2);
    remove(trace);
}
END_TEST

/* The real Azure trace under every policy: runs, deterministic, static-at-peak near the floor. */
START_TEST(test_sim_run_shared_azure_trace)
{
    const char *p = test_shared_path("traces/AzureLLMInferenceTrace_conv.csv");
    if (!p) return;
    struct trace *tr = NULL;
    char err[256], a[1024], b[1024];
    ck_assert_int_eq(trace_load(p, TRACE_AZURE, &tr, err, sizeof(err)), 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    cfg.replicas = 14;
    cfg.slo_ttft_s = cfg.spec.objective_ttft_s = 3;
    struct sim_result r;
    ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
    ck_assert_uint_eq(r.requests, 19366);
    /* 1% of prompts alone take > 3 s to prefill at 2000 tok/s: that is the floor. */
    ck_assert_double_lt(r.slo_violation_rate, 0.02);
    sim_result_fini(&r);
    sim_config_defaults(&cfg, POLICY_PREDICTIVE);
    cfg.slo_ttft_s = cfg.spec.objective_ttft_s = 3;
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
        sim_result_json(&r, k ? b : a, sizeof(a));
        sim_result_fini(&r);
    }
    ck_assert_str_eq(a, b);
    trace_free(tr);
}
END_TEST

/* Mooncake with block hashes: prefix hits happen, runs repeat exactly, and the seed (which spreads
 * the 3 s timestamp ticks) changes the replay. */
START_TEST(test_sim_run_shared_mooncake_trace)
{
    const char *p = test_shared_path("traces/mooncake_conversation_trace.jsonl");
    if (!p) return;
    struct trace *tr = NULL;
    char err[256], a[1024], b[1024], c[1024];
    ck_assert_int_eq(trace_load(p, TRACE_MOONCAKE, &tr, err, sizeof(err)), 0);
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_PREDICTIVE);
    cfg.token_scale = 0.1;
    cfg.time_scale = 0.5;
    cfg.replicas = 10;
    cfg.slo_ttft_s = cfg.spec.objective_ttft_s = 3;
    cfg.spec.target_kv_usage = 0.15;
    struct sim_result r;
    for (int k = 0; k < 3; k++) {
        cfg.seed = k < 2 ? 1 : 2;
        ck_assert_int_eq(sim_run(tr, &cfg, &r, err, sizeof(err)), 0);
        ck_assert_uint_eq(r.requests, 12031);
        ck_assert_double_gt(r.prefix_hit_rate, 0.05);
        ck_assert_double_lt(r.prefix_hit_rate, 0.374); /* the infinite-cache bound (SOURCE.md) */
        sim_result_json(&r, k == 0 ? a : k == 1 ? b : c, sizeof(a));
        sim_result_fini(&r);
    }
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
    trace_free(tr);
}
END_TEST

Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sim_run_single_request_exact_times);
    tcase_add_test(tc, test_sim_run_prefill_queues_fifo_and_batches_decode);
    tcase_add_test(tc, test_sim_run_itl_gaps_include_prefill_pauses);
    tcase_add_test(tc, test_sim_run_prefix_cache_hits);
    tcase_add_test(tc, test_sim_cache_lru_eviction_keeps_leading_blocks);
    tcase_add_test(tc, test_sim_run_same_seed_identical_json);
    tcase_add_test(tc, test_sim_run_policy_sanity_on_step);
    tcase_add_test(tc, test_sim_run_rejects_bad_config);
    tcase_add_test(tc, test_sim_spec_single_stream_rate_is_the_controllers_plan);
    tcase_add_test(tc, test_sim_spec_nothing_proposed_is_the_plain_replica);
    tcase_add_test(tc, test_plot_png_encode_structure);
    tcase_add_test(tc, test_cmd_simulate_main_prints_one_json_line_and_plot);
    tcase_add_test(tc, test_sim_run_late_binding_new_replica_takes_held);
    tcase_add_test(tc, test_cmd_simulate_frontier_matches_printed_fleets);
    tcase_add_test(tc, test_sim_run_shared_azure_trace);
    tcase_add_test(tc, test_sim_run_shared_mooncake_trace);
    suite_add_tcase(s, tc);
    return s;
}
