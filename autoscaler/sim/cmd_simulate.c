/* `cinfer-autoscaler simulate`: flags -> sim_config, load the trace, run, print a readable summary
 * and exactly one JSON line on stdout, optionally a PNG of load, replicas and TTFT over time. */
#include "autoscaler/sim/cmd_simulate.h"
#include "autoscaler/sim/calibrate.h"
#include "autoscaler/sim/frontier.h"
#include "autoscaler/sim/plot.h"
#include "autoscaler/sim/sim.h"
#include "autoscaler/sim/trace.h"

#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct simulate_cfg {
    const char *trace, *format, *policy, *plot, *routing, *calibrate, *synthetic, *metric;
    int replicas, min_replicas, max_replicas, seed, max_running, fit_intervals, amplify, late_hold;
    bool frontier;
    double time_scale, token_scale, startup_s, slo_s, slo_itl_s, slo_pct, interval_s;
    double target_queue, target_kv, down_window_s, capacity_rps, headroom, season_s;
    double prefill_tps, decode_tps, decode_batch_tps, kv_tokens, cache_tokens;
    int spec_tokens;
    double spec_accept, spec_draft_cost;
    bool prefix_routing, objective_driven, decisions;
    const char *log_level, *log_format;
};

#define F(field) offsetof(struct simulate_cfg, field)
static const struct cfg_opt opts[] = {
    {"trace", CFG_STRING, F(trace), NULL, 1, 0, "Trace file (Azure CSV or Mooncake JSONL)", NULL,
     CFG_REQUIRED},
    {"format", CFG_STRING, F(format), NULL, 1, 0,
     "Trace format; default from the extension (azure: any CSV whose header names TIMESTAMP / "
     "Timestamp, ContextTokens / Request tokens, GeneratedTokens / Response tokens)",
     "azure|mooncake", 0},
    {"policy", CFG_STRING, F(policy), "reactive", 1, 0, "Scaling policy",
     "static|reactive|predictive", 0},
    {"replicas", CFG_INT, F(replicas), "0", 0, 4096,
     "Replicas for static (0 = 1); initial replicas otherwise (0 = sized for the first 5 minutes "
     "at 60% utilisation, a service already running)",
     NULL, 0},
    {"min-replicas", CFG_INT, F(min_replicas), "1", 1, 4096, "Lower bound for scaling", NULL, 0},
    {"max-replicas", CFG_INT, F(max_replicas), "64", 1, 4096, "Upper bound for scaling", NULL, 0},
    {"time-scale", CFG_DOUBLE, F(time_scale), "1", 1e-6, 1e6,
     "Simulated time = trace time x this (<1 compresses)", NULL, 0},
    {"token-scale", CFG_DOUBLE, F(token_scale), "1", 1e-6, 1e3,
     "Prompt/output tokens (and the 512-token hash block) x this", NULL, 0},
    {"startup-seconds", CFG_DOUBLE, F(startup_s), "60", 0, 86400, "Replica start-up delay", NULL,
     0},
    {"slo-ttft-seconds", CFG_DOUBLE, F(slo_s), "2", 1e-6, 86400,
     "TTFT objective (violations are counted against it; the policy scales to it)", NULL, 0},
    {"slo-itl-seconds", CFG_DOUBLE, F(slo_itl_s), "0", 0, 86400,
     "Inter-token latency objective (0 = none): token gaps above it are counted, and the policy "
     "scales to it as well",
     NULL, 0},
    {"frontier-metric", CFG_STRING, F(metric), "ttft", 1, 0,
     "What --frontier judges: the share of requests over the TTFT objective, or of token gaps "
     "over the ITL objective",
     "ttft|itl", 0},
    {"slo-percentile", CFG_DOUBLE, F(slo_pct), "0.99", 0.5, 0.9999,
     "Percentile of the objective (at most 1 - this of first tokens above it)", NULL, 0},
    {"objective-driven", CFG_BOOL, F(objective_driven), "true", 1, 0,
     "Scale to the objective (false: queue-depth and KV targets only, the HPA defaults)", NULL, 0},
    {"routing", CFG_STRING, F(routing), "router", 1, 0,
     "Router model: cinfer-router as the chart installs it (prefix and load, binds at arrival); "
     "the same with late binding (held centrally while every replica has --late-hold requests "
     "before their first token: not what cinfer-router does); or binding at arrival to the "
     "least queued prefill work, least requests in flight, or at random",
     "router|router-late|least-prefill|least-requests|random", 0},
    {"late-hold", CFG_INT, F(late_hold), "1", 1, 4096,
     "--routing router-late: a replica with this many requests before their first token takes "
     "no more until one has it; the rest wait at the router",
     NULL, 0},
    {"interval", CFG_DOUBLE, F(interval_s), "15", 0.01, 3600, "Scrape and decision interval (s)",
     NULL, 0},
    {"seed", CFG_INT, F(seed), "1", 0, 2147483647, "Seed for spreading quantised timestamps", NULL,
     0},
    {"plot", CFG_STRING, F(plot), NULL, 1, 0, "Write a PNG of load, replicas and TTFT here", NULL,
     0},
    {"frontier", CFG_BOOL, F(frontier), "false", 1, 0,
     "Run static fleets 1..N (until more replicas stop helping) and the reactive and predictive "
     "defaults; print where each policy lies against the static frontier (--plot draws it)",
     NULL, 0},
    {"synthetic", CFG_STRING, F(synthetic), "none", 1, 0,
     "Replace the trace by a synthetic one drawing its tokens from it: a diurnal ramp (trough to "
     "4x over one hour) with 90 s bursts at 2.5x every ~10 minutes",
     "none|diurnal", 0},
    {"amplify", CFG_INT, F(amplify), "1", 1, 10000,
     "Merge this many copies of the trace in time (the rate x this, the same shape)", NULL, 0},
    {"calibrate-from", CFG_STRING, F(calibrate), NULL, 1, 0,
     "Replica model from the stdout of a `cinfer-engine bench --batch 1,...` run (prefill, "
     "single-stream and batched decode rates; overrides --prefill-tps and the decode rates)",
     NULL, 0},
    {"decisions", CFG_BOOL, F(decisions), "false", 1, 0,
     "Print every interval's signals, decision and reason to stderr", NULL, 0},
    {"target-queue-depth", CFG_DOUBLE, F(target_queue), "-1", -1, 1e6,
     "Waiting requests per replica (0 disables; -1: off with an objective, else 2)", NULL, 0},
    {"target-kv-usage", CFG_DOUBLE, F(target_kv), "-1", -1, 1,
     "KV usage per replica (0 disables; -1: off with an objective, else 0.7)", NULL, 0},
    {"scale-down-window", CFG_DOUBLE, F(down_window_s), "-1", -1, 86400,
     "Scale-down stabilisation window (s; -1: start-up + interval, at least 60 s)", NULL, 0},
    {"capacity-rps", CFG_DOUBLE, F(capacity_rps), "0", 0, 1e6,
     "Predictive: per-replica capacity (0 = learn it)", NULL, 0},
    {"headroom", CFG_DOUBLE, F(headroom), "0.9", 0.05, 1,
     "Predictive: plan for this fraction of capacity", NULL, 0},
    {"season-seconds", CFG_DOUBLE, F(season_s), "0", 0, 1e7,
     "Predictive: Holt-Winters season (0 = damped Holt)", NULL, 0},
    {"forecast-fit-intervals", CFG_INT, F(fit_intervals), "0", 0, 100000,
     "Predictive: refit the forecast by grid search after this many intervals (0 = defaults)", NULL,
     0},
    {"prefill-tps", CFG_DOUBLE, F(prefill_tps), "2000", 1e-3, 1e9, "Replica prefill tokens/s", NULL,
     0},
    {"decode-tps", CFG_DOUBLE, F(decode_tps), "60", 1e-3, 1e9, "Single-stream decode tokens/s",
     NULL, 0},
    {"decode-batch-tps", CFG_DOUBLE, F(decode_batch_tps), "700", 1e-3, 1e9,
     "Aggregate decode tokens/s at batch 16", NULL, 0},
    {"max-running", CFG_INT, F(max_running), "16", 1, 4096, "Running sequences per replica", NULL,
     0},
    {"kv-tokens", CFG_DOUBLE, F(kv_tokens), "32768", 1, 1e9, "KV capacity per replica (tokens)",
     NULL, 0},
    {"cache-tokens", CFG_DOUBLE, F(cache_tokens), "32768", 0, 1e9,
     "Prefix-cache capacity per replica (tokens; 0 disables)", NULL, 0},
    {"spec-tokens", CFG_INT, F(spec_tokens), "0", 0, 16,
     "Speculative decoding: proposals per sequence per step at most, chosen per batch by the "
     "engine's controller (0 = off)",
     NULL, 0},
    {"spec-acceptance", CFG_DOUBLE, F(spec_accept), "0.7", 0, 0.999,
     "Speculative decoding: probability that a proposal is accepted given the ones before it", NULL,
     0},
    {"spec-draft-cost", CFG_DOUBLE, F(spec_draft_cost), "0", 0, 100,
     "Speculative decoding: a draft model's step time as a fraction of the target's (0 = n-gram "
     "proposals)",
     NULL, 0},
    {"prefix-routing", CFG_BOOL, F(prefix_routing), "true", 1, 0,
     "Route by cached prefix (router modes: --policy prefix, false = least-loaded; others: the "
     "longest cached prefix unless overloaded)",
     NULL, 0},
    CLI_LOG_OPTS(struct simulate_cfg),
};
#undef F

static const struct cfg_spec spec = {
    .program = "cinfer-autoscaler simulate",
    .summary = "Replays a request trace through simulated replicas under a scaling policy.",
    .env_prefix = "CINFER_SIMULATE_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
};

static enum policy_kind kind_of(const char *s)
{
    if (strcmp(s, "static") == 0) return POLICY_STATIC;
    if (strcmp(s, "predictive") == 0) return POLICY_PREDICTIVE;
    return POLICY_REACTIVE;
}

static void to_sim_config(const struct simulate_cfg *c, struct sim_config *sc)
{
    sim_config_defaults(sc, kind_of(c->policy));
    struct policy_spec *sp = &sc->spec;
    sp->min_replicas = c->min_replicas;
    sp->max_replicas = c->max_replicas;
    sp->startup_s = c->startup_s;
    sp->objective_percentile = c->slo_pct;
    sp->interval_s = c->interval_s;
    /* As for an InferenceService: with an objective the default targets are off unless named. */
    sc->slo_ttft_s = c->slo_s;
    sp->objective_ttft_s = c->objective_driven ? c->slo_s : 0;
    sc->slo_itl_s = c->slo_itl_s;
    sp->objective_itl_s = c->objective_driven ? c->slo_itl_s : 0;
    if (c->objective_driven) {
        sp->target_queue_depth = sp->target_kv_usage = 0;
    } else { /* the HPA defaults of policy_spec_defaults */
        sp->target_queue_depth = 2;
        sp->target_kv_usage = 0.7;
    }
    if (c->target_queue >= 0) sp->target_queue_depth = c->target_queue;
    if (c->target_kv >= 0) sp->target_kv_usage = c->target_kv;
    sp->scale_down_window_s = c->down_window_s;
    sp->capacity_rps = c->capacity_rps;
    sp->headroom = c->headroom;
    sp->season_s = c->season_s;
    sp->forecast_fit_intervals = c->fit_intervals;
    sc->replicas = c->replicas == 0 && sc->spec.kind == POLICY_STATIC ? 1 : c->replicas;
    sc->time_scale = c->time_scale;
    sc->token_scale = c->token_scale;
    sc->seed = (uint64_t)c->seed;
    sc->prefix_routing = c->prefix_routing;
    sc->decisions = c->decisions ? stderr : NULL;
    sim_routing_parse(c->routing, &sc->routing); /* validated by the table's choices */
    sc->late_hold = c->late_hold;
    sc->model.prefill_tps = c->prefill_tps;
    sc->model.decode_tps = c->decode_tps;
    sc->model.decode_batch_tps = c->decode_batch_tps;
    sc->model.max_running = c->max_running;
    sc->model.kv_tokens = c->kv_tokens;
    sc->model.cache_tokens = c->cache_tokens;
    sc->model.spec_tokens = c->spec_tokens;
    sc->model.spec_accept = c->spec_accept;
    sc->model.spec_draft_cost = c->spec_draft_cost;
}

static void print_summary(const struct simulate_cfg *c, const struct sim_result *r)
{
    printf("trace            %s\n", c->trace);
    printf("policy           %s\n", r->policy);
    printf("requests         %zu over %.0f s simulated\n", r->requests, r->duration_s);
    printf("TTFT             p50 %.3f s, p99 %.3f s, mean %.3f s\n", r->ttft_p50_s, r->ttft_p99_s,
           r->ttft_mean_s);
    printf("SLO violations   %.2f%% of requests over %.3g s\n", 100 * r->slo_violation_rate,
           c->slo_s);
    printf("replica-seconds  %.0f (mean %.2f replicas, max %d)\n", r->replica_seconds,
           r->duration_s > 0 ? r->replica_seconds / r->duration_s : 0, r->max_replicas_seen);
    if (r->itl_gaps > 0)
        printf("ITL              p50 %.3f s, p99 %.3f s over %.0f token gaps%s", r->itl_p50_s,
               r->itl_p99_s, r->itl_gaps, c->slo_itl_s > 0 ? "" : "\n");
    if (r->itl_gaps > 0 && c->slo_itl_s > 0)
        printf("; %.2f%% over %.3g s\n", 100 * r->itl_violation_rate, c->slo_itl_s);
    printf("scale events     %d\n", r->scale_events);
    printf("prefix hit rate  %.1f%% of prompt tokens\n", 100 * r->prefix_hit_rate);
    printf(
        "violations by    prefill alone %.3f%%, at a draining replica %.3f%%, behind a long "
        "prefill %.3f%%, fleet still starting %.3f%%, queued %.3f%%, held at the router %.3f%%\n",
        100 * r->cause_rate[SIM_CAUSE_PREFILL], 100 * r->cause_rate[SIM_CAUSE_DRAINING],
        100 * r->cause_rate[SIM_CAUSE_LONG_PREFILL], 100 * r->cause_rate[SIM_CAUSE_FLEET_SHORT],
        100 * r->cause_rate[SIM_CAUSE_QUEUED], 100 * r->cause_rate[SIM_CAUSE_HELD]);
    printf("initial replicas %d; %d reversals (direction changes within 300 s)\n",
           r->initial_replicas, r->reversals);
}

static const char *routing_desc(enum sim_routing r)
{
    switch (r) {
    case SIM_ROUTE_ROUTER:
        return "cinfer-router as the chart installs it: uncached prompt + 0.5 x queued prefill "
               "tokens + 0.5 x cached tokens evicted + 64 x requests in flight, load bound 1.25x "
               "(floor 4), binds at arrival, holds only with no replica ready";
    case SIM_ROUTE_ROUTER_LATE:
        return "cinfer-router's choice with late binding (held while every ready replica has "
               "--late-hold requests before their first token; not what cinfer-router does)";
    case SIM_ROUTE_LEAST_PREFILL: return "least queued prefill work, binds at arrival (no router)";
    case SIM_ROUTE_LEAST_REQUESTS: return "least requests in flight, binds at arrival (no router)";
    default: return "random ready replica (kube-proxy)";
    }
}

static void print_model(const struct sim_config *sc, const char *from, const char *desc)
{
    const struct sim_replica_model *m = &sc->model;
    printf("routing          %s\n", routing_desc(sc->routing));
    printf("replica model    prefill %.0f tok/s, decode %.1f tok/s (1 stream), %.0f tok/s at "
           "batch %d; %d running, KV %.0f tokens, prefix cache %.0f tokens\n",
           m->prefill_tps, m->decode_tps, m->decode_batch_tps, m->decode_batch, m->max_running,
           m->kv_tokens, m->cache_tokens);
    if (m->spec_tokens > 0)
        printf("speculation      up to %d proposals per sequence, acceptance %.3f, %s; k per batch "
               "by the engine's controller\n",
               m->spec_tokens, m->spec_accept,
               m->spec_draft_cost > 0 ? "draft model" : "n-gram (proposals cost nothing)");
    if (m->spec_tokens > 0 && m->spec_draft_cost > 0)
        printf("                 draft step %.3f x the target's\n", m->spec_draft_cost);
    if (from)
        printf("calibrated from  %s (%s)\n", from, desc && *desc ? desc : "no header");
    else
        printf("calibrated from  defaults (cinfer-engine bench, Q8_0 bench model, 2 cores; see "
               "autoscaler/BENCHMARKS.md)\n");
}

static int load_calibration(const char *path, struct sim_config *sc, char *desc, size_t desclen,
                            char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s", path);
        return ERR_IO;
    }
    char *buf = malloc(CALIBRATE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, CALIBRATE_MAX_BYTES + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!buf) return ERR_NOMEM;
    int rc = bad ? ERR_IO : calibrate_from_bench(buf, n, &sc->model, desc, desclen, err, errlen);
    if (bad) snprintf(err, errlen, "cannot read %s", path);
    free(buf);
    return rc;
}

/* The violations --frontier judges (--frontier-metric). */
static double violations_of(const struct simulate_cfg *c, const struct sim_result *r)
{
    return strcmp(c->metric, "itl") == 0 ? r->itl_violation_rate : r->slo_violation_rate;
}

static void print_point(const struct simulate_cfg *c, const char *name, const struct sim_result *r,
                        double frontier_v, bool below)
{
    printf("%-12s %8.3f%% %12.0f %8.2f %7d %9d", name, 100 * violations_of(c, r),
           r->replica_seconds, r->duration_s > 0 ? r->replica_seconds / r->duration_s : 0,
           r->scale_events, r->reversals);
    if (frontier_v >= 0) printf("  %s %.3f%%", below ? "below" : "ABOVE", 100 * frontier_v);
    printf("\n");
}

/* --frontier: static fleets 1.. until three in a row gain under 0.02 points (or max replicas),
 * then the dynamic policies with the same settings. One JSON line per run. */
static int run_frontier(const struct simulate_cfg *c, const struct trace *tr,
                        const struct sim_config *base, char *err, size_t errlen)
{
    int max_n = c->max_replicas;
    struct frontier_point *pts = calloc((size_t)max_n, sizeof(*pts));
    struct frontier_point pol[2];
    const char *names[2] = {"REACTIVE (RED)", "PREDICTIVE (BLUE)"};
    if (!pts) return ERR_NOMEM;
    int rc = 0;
    size_t n = 0;
    int flat = 0;
    char json[1024];
    printf("%-12s %9s %12s %8s %7s %9s  %s\n", "fleet", "violations", "replica-s", "mean", "events",
           "reversals", "frontier at equal replica-s");
    for (int k = 1; k <= max_n && flat < 3; k++) {
        struct sim_config sc = *base;
        sc.spec.kind = POLICY_STATIC;
        sc.replicas = k;
        struct sim_result r;
        if ((rc = sim_run(tr, &sc, &r, err, errlen)) != 0) goto out;
        pts[n++] = (struct frontier_point){k, r.replica_seconds, violations_of(c, &r)};
        /* Flat only once the fleet is not overloaded (an overloaded fleet queues most requests,
         * which then show few token gaps: the ITL share is flat there too). */
        if (n > 1 && pts[n - 2].violations - pts[n - 1].violations < 0.0002 &&
            pts[n - 1].violations < 0.5 && r.slo_violation_rate < 0.5)
            flat++;
        else
            flat = 0;
        char name[32];
        snprintf(name, sizeof(name), "static %d", k);
        print_point(c, name, &r, -1, false);
        sim_result_json(&r, json, sizeof(json));
        printf("%s\n", json);
        sim_result_fini(&r);
    }
    for (int i = 0; i < 2; i++) {
        struct sim_config sc = *base;
        sc.spec.kind = i == 0 ? POLICY_REACTIVE : POLICY_PREDICTIVE;
        sc.replicas = c->replicas;
        struct sim_result r;
        if ((rc = sim_run(tr, &sc, &r, err, errlen)) != 0) goto out;
        pol[i] = (struct frontier_point){0, r.replica_seconds, violations_of(c, &r)};
        struct frontier_verdict v;
        frontier_judge(pts, n, &pol[i], &v);
        print_point(c, i == 0 ? "reactive" : "predictive", &r, v.frontier_violations, v.below);
        printf("             best static: %.3f%% at %.0f replica-s; this run %.2fx of its "
               "replica-s, %+.3f points: goal (<= +1 point at <= 0.8x) %s\n",
               100 * v.best_violations, v.best_replica_seconds, v.cost_ratio,
               100 * (pol[i].violations - v.best_violations), v.goal ? "met" : "NOT met");
        sim_result_json(&r, json, sizeof(json));
        printf("%s\n", json);
        sim_result_fini(&r);
    }
    if (c->plot) {
        rc = plot_frontier_png(c->plot, pts, n, pol, names, 2, NULL, err, errlen);
        if (!rc) printf("plot             %s\n", c->plot);
    }
out:
    free(pts);
    return rc;
}

int cmd_simulate_main(int argc, char **argv)
{
    struct simulate_cfg c;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("autoscaler", c.log_level, c.log_format);
    enum trace_format fmt = TRACE_AZURE;
    if (c.format) {
        trace_format_parse(c.format, &fmt); /* validated by the table's choices */
    } else {
        size_t n = strlen(c.trace);
        if (n >= 6 && strcmp(c.trace + n - 6, ".jsonl") == 0) fmt = TRACE_MOONCAKE;
    }
    struct trace *tr = NULL;
    struct sim_result r = {0};
    char err[256];
    int status = 1;
    int rc = trace_load(c.trace, fmt, &tr, err, sizeof(err));
    if (rc) {
        log_error("cannot load trace", LOG_S("path", c.trace), LOG_S("error", err));
        goto out;
    }
    if (strcmp(c.synthetic, "diurnal") == 0 || c.amplify > 1) {
        struct trace *t2 = NULL;
        if (strcmp(c.synthetic, "diurnal") == 0) {
            struct trace_synth ts;
            trace_synth_defaults(&ts);
            ts.seed = (uint64_t)c.seed;
            rc = trace_synth_diurnal(tr, &ts, &t2);
        } else {
            rc = trace_amplify(tr, (unsigned)c.amplify, (uint64_t)c.seed, &t2);
        }
        if (!rc && t2 && c.amplify > 1 && strcmp(c.synthetic, "diurnal") == 0) {
            struct trace *t3 = NULL;
            rc = trace_amplify(t2, (unsigned)c.amplify, (uint64_t)c.seed, &t3);
            trace_free(t2);
            t2 = t3;
        }
        if (rc) {
            log_error("cannot build the trace", LOG_S("error", err_str(rc)));
            goto out;
        }
        trace_free(tr);
        tr = t2;
    }
    struct sim_config sc;
    to_sim_config(&c, &sc);
    char desc[256] = "";
    if (c.calibrate &&
        (rc = load_calibration(c.calibrate, &sc, desc, sizeof(desc), err, sizeof(err))) != 0) {
        log_error("cannot calibrate from the bench output", LOG_S("path", c.calibrate),
                  LOG_S("error", err));
        status = 2;
        goto out;
    }
    if (sc.spec.kind != POLICY_STATIC && c.min_replicas > c.max_replicas) {
        log_error("--min-replicas exceeds --max-replicas", LOG_I("min", c.min_replicas),
                  LOG_I("max", c.max_replicas));
        status = 2;
        goto out;
    }
    if (strcmp(c.metric, "itl") == 0 && !(c.slo_itl_s > 0)) {
        log_error("--frontier-metric itl needs --slo-itl-seconds", LOG_S("metric", c.metric));
        status = 2;
        goto out;
    }
    if (c.frontier) {
        print_model(&sc, c.calibrate, desc);
        rc = run_frontier(&c, tr, &sc, err, sizeof(err));
        if (rc) {
            log_error("frontier failed", LOG_S("error", err[0] ? err : err_str(rc)));
            status = rc == ERR_INVAL ? 2 : 1;
            goto out;
        }
        fflush(stdout);
        status = 0;
        goto out;
    }
    rc = sim_run(tr, &sc, &r, err, sizeof(err));
    if (rc) {
        log_error("simulation failed", LOG_S("error", err));
        status = rc == ERR_INVAL ? 2 : 1;
        goto out;
    }
    print_summary(&c, &r);
    print_model(&sc, c.calibrate, desc);
    if (c.plot) {
        rc = plot_sim_png(c.plot, &r, c.slo_s, err, sizeof(err));
        if (rc) {
            log_error("cannot write plot", LOG_S("path", c.plot), LOG_S("error", err));
            goto out;
        }
        printf("plot             %s\n", c.plot);
    }
    char json[1024];
    sim_result_json(&r, json, sizeof(json));
    printf("%s\n", json);
    fflush(stdout);
    status = 0;
out:
    sim_result_fini(&r);
    trace_free(tr);
    return status;
}
