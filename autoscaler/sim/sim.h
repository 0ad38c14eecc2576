/* Trace-replay simulator for the scaling policies: a deterministic discrete-event simulation (event
 * heap, simulated time only) of replicas behind a router, driven by a request trace and scaled by
 * THE policy code (policy_decide) from signals computed the way the control loop computes them
 * from the engines' /metrics. Used by `cinfer-autoscaler simulate` and the tests.
 *
 * Replica service model (one engine, per replica): requests wait FIFO, are admitted while fewer
 * than max_running run and their prompt+output tokens fit the KV capacity; prefill runs one
 * sequence at a time at prefill_tps over its uncached prompt tokens and pauses decoding (prefill
 * first, as a single inference thread does); decoding advances every running sequence at
 * D(b)/b tokens/s with the batched throughput curve D(b) = b*s / (1 + (b-1)*k), s = single-stream
 * rate, k fitted so D(decode_batch) = decode_batch_tps. The first token comes at the end of
 * prefill (TTFT = wait + prefill). A prefix cache of block hashes (LRU, cache_tokens) skips the
 * prefill of a request's longest cached leading prefix.
 *
 * Speculation (spec_tokens > 0, sim_spec.c): a decode step of b sequences runs b + p tokens, p
 * the proposals the engine's own controller (spec_ctl_plan, with the step-time curve above as its
 * learned cost and every sequence's acceptance at spec_accept) chooses for that batch, and emits
 * b + the expected accepted proposals (accept^j for a sequence's j-th), plus one draft step per
 * proposal depth at spec_draft_cost x the target's. Each sequence then advances at that expected
 * rate (a fluid model: the real engine emits a step's tokens in bursts), so at batches where the
 * controller proposes nothing the replica is exactly the one without speculation.
 *
 * Router (SIM_ROUTE_*): by default cinfer-router as the chart installs it (SIM_ROUTE_ROUTER,
 * "router"): its own replica choice (router_policy_pick, policy prefix) over every ready replica,
 * each scored by its uncached prompt tokens + 0.5 x its queued prefill tokens + 0.5 x the cached
 * tokens it would evict (its prefix cache full) + 64 x its requests in flight (running + waiting
 * and prefill_waiting, as the engines' load lines report them), within the bounded-load guard
 * (1.25 x the mean, at least 4). The router binds each request at arrival, to a replica that
 * may be busy; it holds requests only while no replica is ready (scale from zero) and sends them
 * when one becomes ready. Not modelled: the load lines' 250 ms lag, the chart's two router replicas
 * each counting their own requests exactly and the other's through that lag, retries (an
 * engine's 429 at 1024 queued never happens at these loads). "router-late" (SIM_ROUTE_ROUTER_LATE)
 * is the same choice with late binding, which cinfer-router does NOT do: a request is held
 * centrally (FIFO) while every ready replica has late_hold requests that have not had their first
 * token (a router sees them as requests without a first byte yet) and goes to the first replica
 * with room, so a replica that becomes ready takes held work; its held requests count in the
 * policy's waiting signals (a router would have to export their prompt tokens).
 * For comparison: the replica with the least prompt work queued ("least-prefill": the engine's
 * cinfer_requests_waiting_prefill_tokens, which no router reads today; the default before the
 * router existed), with affinity to the replica holding the longest cached prefix; "least
 * requests" (an Envoy-style least-request balancer) and "random" (kube-proxy behind a Service).
 * These bind at arrival too.
 *
 * Every violation of the TTFT objective is attributed to one cause (enum sim_cause), the first
 * that applies in this order: the request's own prefill exceeds the objective; it waited at a
 * replica being removed; it was held at the router longer than it then waited at its replica
 * (fleet-short when it arrived while ordered replicas were starting, held otherwise); a prefill
 * longer than half the objective ran on its replica while it waited; it arrived while replicas
 * the policy had ordered were still starting; it queued. */
#ifndef CINFER_AUTOSCALER_SIM_H
#define CINFER_AUTOSCALER_SIM_H

#include "autoscaler/policy.h"
#include "autoscaler/sim/trace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct sim_replica_model {
    double prefill_tps;      /* uncached prompt tokens/s (2000) */
    double decode_tps;       /* single-stream decode tokens/s (60) */
    double decode_batch_tps; /* aggregate decode tokens/s at decode_batch (700) */
    int decode_batch;        /* batch size of that measurement (16) */
    int max_running;         /* running sequences at most (16) */
    double kv_tokens;        /* KV capacity in tokens (32768) */
    double cache_tokens;     /* prefix-cache capacity in tokens (32768); 0 disables */
    /* Speculative decoding (see "Speculation" above): proposals per sequence per step at most
     * (0 = off, the default; 1..SPEC_MAX_TOKENS), the probability that a proposal is accepted
     * given the ones before it (0.7), and a draft model's step time as a fraction of the
     * target's at the same step size (0 = n-gram proposals, which cost nothing). */
    int spec_tokens;
    double spec_accept;
    double spec_draft_cost;
};

enum sim_routing {
    SIM_ROUTE_LEAST_PREFILL = 0,
    SIM_ROUTE_LEAST_REQUESTS,
    SIM_ROUTE_RANDOM,
    SIM_ROUTE_ROUTER,      /* cinfer-router as it is: binds at arrival (the default) */
    SIM_ROUTE_ROUTER_LATE, /* cinfer-router's choice with late binding (not in the router) */
};

/* Parses "router", "router-late", "least-prefill", "least-requests" or "random"; 0 or
 * ERR_INVAL. */
int sim_routing_parse(const char *s, enum sim_routing *out);

enum sim_cause {
    SIM_CAUSE_NONE = 0,
    SIM_CAUSE_PREFILL,      /* its own prefill alone exceeds the objective (no scaling helps) */
    SIM_CAUSE_DRAINING,     /* queued at a replica that scale-down was removing */
    SIM_CAUSE_LONG_PREFILL, /* queued behind a prefill longer than half the objective */
    SIM_CAUSE_FLEET_SHORT,  /* arrived while ordered replicas were still starting */
    SIM_CAUSE_QUEUED,       /* queued at a loaded replica otherwise */
    SIM_CAUSE_HELD, /* waited longer at the router (held) than at its replica, no replica ordered */
    SIM_CAUSE_COUNT
};

/* Name of a cause ("prefill", "draining", ...); static string. */
const char *sim_cause_name(enum sim_cause c);

struct sim_config {
    struct policy_spec spec; /* policy, objective, targets, windows, min/max, startup, interval */
    double slo_ttft_s;       /* violations are counted against this TTFT (2) */
    double slo_itl_s;        /* token gaps above this count as ITL violations (0 = not counted) */
    struct sim_replica_model model;
    /* static: the fixed count; others: the initial count (raised to min); 0 = sized for the
     * trace's first 5 minutes (sim_initial_replicas) */
    int replicas;
    enum sim_routing routing; /* SIM_ROUTE_ROUTER */
    /* router-late: a replica with this many requests before their first token takes no more (1) */
    int late_hold;
    double time_scale;   /* simulated time = trace time * time_scale (1) */
    double token_scale;  /* token counts (and the 512-token hash block) scaled by it (1) */
    bool prefix_routing; /* least-*: route to the longest cached prefix (>= half the prompt)
                          * unless overloaded; router modes: --policy prefix, else least-loaded
                          * (true) */
    bool spread_ties;    /* spread equal timestamps over their tick (Mooncake) */
    uint64_t seed;       /* tie spreading and random routing */
    FILE *decisions;     /* when set, one line per interval: signals, decision, reason */
};

/* The batching curve's k: D(b) = b s / (1 + (b-1) k) through D(decode_batch) = decode_batch_tps
 * (1 when decode_batch is 1: no batching gain). Pure. */
double sim_decode_k(int decode_batch, double decode_tps, double decode_batch_tps);

/* Fills `cfg` with the defaults documented above for `kind`. */
void sim_config_defaults(struct sim_config *cfg, enum policy_kind kind);

/* The initial fleet of a dynamic run with replicas == 0: a service already running, sized for the
 * work of the trace's first 300 s (uncached-blind: prompt / prefill rate + output / batched decode
 * rate, per second) at 60% utilisation, at least min_replicas. Pure. */
int sim_initial_replicas(const struct trace *tr, const struct sim_config *cfg);

/* One scrape interval, for plots. */
struct sim_sample {
    double t_s;
    double arrival_rps;
    int replicas; /* desired (ready + starting) after the decision */
    int ready;
    double ttft_p99_s;   /* < 0 when no first token in the interval */
    double forecast_rps; /* predictive: forecast at the horizon; 0 otherwise */
    double capacity_rps; /* predictive: per-replica capacity in use; 0 while unknown */
};

struct sim_result {
    const char *policy; /* "static", "reactive", "predictive" (static string) */
    size_t requests;
    double slo_violation_rate; /* fraction of requests with TTFT > slo */
    double ttft_p50_s, ttft_p99_s, ttft_mean_s;
    /* Inter-token latency: every gap between consecutive output tokens of a request (a prefill on
     * the replica pauses its decoding sequences: that pause is in the gap spanning it). */
    double itl_p50_s, itl_p99_s; /* from a 1%-resolution log histogram; -1 without gaps */
    double itl_gaps;             /* token gaps observed */
    double itl_violation_rate;   /* fraction of gaps above slo_itl_s (0 when not counted) */
    double replica_seconds; /* integral of existing replicas (starting and draining included) */
    int scale_events;       /* decisions that changed the replica count */
    double prefix_hit_rate; /* cached prompt tokens / prompt tokens */
    int max_replicas_seen;
    double duration_s; /* until the last request finished */
    int initial_replicas;
    int reversals; /* scale events in the opposite direction of the previous one within 300 s */
    double cause_rate[SIM_CAUSE_COUNT]; /* fraction of requests violating, by cause */
    struct sim_sample *samples;         /* n_samples, owned; free with sim_result_fini */
    size_t n_samples;
};

/* Runs the whole trace (borrowed, not modified) and fills `res` (caller frees with
 * sim_result_fini). Returns 0, ERR_INVAL for an unusable config (message in err), ERR_NOMEM. */
int sim_run(const struct trace *tr, const struct sim_config *cfg, struct sim_result *res, char *err,
            size_t errlen);

void sim_result_fini(struct sim_result *res);

/* Writes the one-line JSON summary into buf (NUL-terminated, truncated to len). */
void sim_result_json(const struct sim_result *res, char *buf, size_t len);

#endif
