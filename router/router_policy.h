/* Which replica serves a request: a pure function of what the router knows about each candidate
 * (its load and how much of the prompt its prefix cache holds) and the configured policy. No I/O,
 * no clock, no randomness of its own (the caller passes a random number), so every rule is tested
 * here and benchmarked by replaying traces.
 *
 * Prefix-aware (the default): cost = uncached prompt tokens + offload_weight x the prompt tokens
 * it would load back from an offload tier (host memory, disk) + prefill_weight x the prompt tokens
 * the replica has queued before it + evict_weight x the cached tokens it would evict to take the
 * request (its KV pool full: the prompt's new blocks push out others, which a later request may
 * have reused) + load_weight x load, the lowest cost wins, ties to the least loaded and then the
 * random number. The eviction term is what spreads an idle fleet's traffic over its caches: with
 * nothing in flight anywhere, the replica holding a request's longest prefix would otherwise take
 * every request and evict, while the others' caches stay empty. The queued prefill is what a
 * request count misses: one replica with two 8k-token prompts waiting and another with two chat
 * turns are equally "loaded", but a first token on the first waits for 16k tokens of prefill.
 * Bounded load guard (consistent
 * hashing with bounded loads, Mirrokni et al. 2018): a replica is a candidate only when its load
 * after taking the request stays within load_factor x the mean load after it, rounded up, so a hot
 * prefix spills over to other replicas instead of piling onto one. The bound never falls below
 * load_floor requests: an engine batches many sequences, so two requests on one replica of an
 * idle fleet are no overload worth a full prefill elsewhere. Session affinity: with a session
 * key, the replica rendezvous hashing prefers (highest mix of key and replica) wins when it is
 * within the bound. Least-loaded and random policies ignore the cache (benchmark baselines). */
#ifndef CINFER_ROUTER_POLICY_H
#define CINFER_ROUTER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum router_policy {
    ROUTER_POLICY_PREFIX = 0,
    ROUTER_POLICY_LEAST_LOADED,
    ROUTER_POLICY_RANDOM,
};

/* Why a replica was chosen (the reason label of cinfer_router_routing_decisions_total). */
enum router_reason {
    ROUTER_REASON_PREFIX = 0, /* it holds more of the prompt than the others, at a fair cost */
    ROUTER_REASON_LOAD,       /* no cache advantage anywhere: the least loaded */
    ROUTER_REASON_BOUNDED,    /* the replica with the best cache was over the load bound */
    ROUTER_REASON_SESSION,    /* session affinity */
    ROUTER_REASON_RANDOM,     /* policy random */
    ROUTER_REASON_COUNT
};

/* "prefix", "load", "bounded", "session", "random"; static. */
const char *router_reason_name(enum router_reason r);
/* "prefix" | "least-loaded" | "random" -> policy; 0 or ERR_INVAL. */
int router_policy_parse(const char *s, enum router_policy *out);

struct router_candidate {
    int load;            /* requests there: ours in flight plus the others the engine reports */
    int cached_tokens;   /* prompt tokens its prefix cache holds (a multiple of the block size) */
    uint64_t id_hash;    /* stable hash of the replica's identity (rendezvous hashing) */
    long queued_prefill; /* prompt tokens it has still to prefill before this request (the
                          * engine's last load line plus what was sent there since) */
    int offload_tokens;  /* prompt tokens after cached_tokens it holds in an offload tier */
    int evict_tokens;    /* cached tokens it would evict to take the request (0: room left) */
};

struct router_policy_cfg {
    enum router_policy policy;
    double load_factor;    /* the bound: >= 1 (1.25 = 25% above the mean) */
    int load_floor;        /* the bound is at least this many requests (>= 1) */
    double load_weight;    /* prompt tokens one request in flight costs */
    double prefill_weight; /* cost of one queued prefill token, in prompt tokens (a token queued
                            * ahead delays the first token as much as one of its own, but a
                            * request sent elsewhere forgoes the cache's later hits: 0.5 measured
                            * best, router/BENCHMARKS.md) */
    double offload_weight; /* cost of one prompt token loaded back from an offload tier, in
                            * prompt tokens computed (< 1: loading beats recomputing) */
    double evict_weight;   /* cost of one cached token evicted, in prompt tokens computed (the
                            * chance it would have been reused) */
};

/* Picks among c[0..n) (n >= 1). `n_prompt` is the prompt's length in tokens (0 when unknown),
 * `session` a hash of the session key (0 = none), `rnd` a random number. Returns the index and
 * writes the reason to *why. Pure. */
size_t router_policy_pick(const struct router_policy_cfg *cfg, const struct router_candidate *c,
                          size_t n, int n_prompt, uint64_t session, uint64_t rnd,
                          enum router_reason *why);

/* The bound of router_policy_pick: the largest load (after taking one more request) a replica may
 * reach when the n candidates carry total_load requests before it. Pure. */
int router_policy_bound(const struct router_policy_cfg *cfg, long total_load, size_t n);

/* Stable 64-bit hash of bytes (FNV-1a then a 64-bit finaliser), for session keys and replica
 * identities. Pure. */
uint64_t router_policy_hash(const void *p, size_t n);

#endif
