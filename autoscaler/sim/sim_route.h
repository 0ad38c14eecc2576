/* The simulator's router model (see sim.h): which ready replica an arriving request goes to.
 * Least-prefill and least-requests keep the ready replicas in an indexed heap keyed by their load
 * (O(log n) per change, O(1) per pick); random picks uniformly among them. Prefix affinity reads
 * which replicas hold which prefix blocks from a shared index of the replicas' caches (what the
 * engines' KV block events tell the router), so it visits only the holders of the request's
 * deepest blocks, not every replica. The router modes call cinfer-router's own replica choice
 * (router/router_policy.c) on the candidates it would see: every ready replica, with its requests
 * in flight, the prompt tokens its cache holds and its queued prefill. Not thread-safe; no I/O. */
#ifndef CINFER_AUTOSCALER_SIM_ROUTE_H
#define CINFER_AUTOSCALER_SIM_ROUTE_H

#include "autoscaler/sim/sim_cache.h"
#include "autoscaler/sim/sim_heap.h"
#include "autoscaler/sim/sim_priv.h"

#include "router/router_policy.h"

#include <stddef.h>
#include <stdint.h>

/* What sim_router_pick returns when it places no request (the caller holds it). */
#define SIM_ROUTER_NONE_READY (-1) /* no replica is ready */
#define SIM_ROUTER_ALL_FULL   (-2) /* router-late: every ready replica is at late_cap */

struct sim_router {
    enum sim_routing mode;
    bool affinity;
    double slack_base;     /* overload slack of affinity: half a batch of requests (or of their
                            * prefill at 64 tokens each) beyond the least loaded */
    struct sim_heap ready; /* ready replicas keyed by load, tie = slot */
    uint64_t *keys;        /* the trace's block hashes as dense ids (parallel to trace.hashes):
                            * the replicas' caches key on them */
    struct sim_cache_index index; /* which replica slots hold which block */
    uint64_t rng;
    /* Router modes (SIM_ROUTE_ROUTER, SIM_ROUTE_ROUTER_LATE): */
    struct router_policy_cfg pol; /* cinfer-router's defaults (the chart's) */
    double block_tokens;          /* tokens per hash block after token scaling */
    int late_cap;                 /* router-late holds while every ready replica has this many
                                   * requests without a first token (sim_config.late_hold) */
    uint64_t *ready_bits;         /* ready slots, bit per slot (candidates in slot order) */
    size_t n_words;
    struct router_candidate *cand; /* pick scratch, one per slot */
    uint32_t *cand_slots;
};

/* Sets up a router for `n_slots` replica slots over `tr`'s hashes (borrowed; read here only).
 * Returns 0 or ERR_NOMEM. */
int sim_router_init(struct sim_router *rt, const struct sim_config *cfg, const struct trace *tr,
                    size_t n_slots);
void sim_router_fini(struct sim_router *rt);

/* Replica `slot` is ready with state `r` (its load is recomputed), or leaves the ready set when
 * `r` is NULL. Returns 0 or ERR_NOMEM. */
int sim_router_update(struct sim_router *rt, uint32_t slot, const struct sim_replica *r);

/* The slot for request `q` among the ready replicas `reps` (indexed by slot, borrowed), or
 * SIM_ROUTER_NONE_READY when none is ready, or (router-late only) SIM_ROUTER_ALL_FULL when every
 * ready replica has late_cap requests in flight. */
int sim_router_pick(struct sim_router *rt, const struct sim_req *q, const struct sim_replica *reps);

#endif
