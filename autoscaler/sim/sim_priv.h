/* Simulator internals shared by sim.c (events, router, scaling, stats) and sim_replica.c (the
 * per-replica service model). Not a public interface. */
#ifndef CINFER_AUTOSCALER_SIM_PRIV_H
#define CINFER_AUTOSCALER_SIM_PRIV_H

#include "autoscaler/sim/sim.h"
#include "autoscaler/sim/sim_cache.h"

#include <stdbool.h>
#include <stdint.h>

/* One request as the simulator sees it (tokens already scaled). */
struct sim_req {
    double arrival;
    double first_token; /* < 0 until prefilled */
    uint32_t prompt, output;
    uint32_t hash_off, n_hash;
    int32_t replica;  /* where the router sent it; -1 while held */
    float prefill_s;  /* its own prefill time (uncached tokens / prefill rate), set at admission */
    float held_s;     /* time held at the router before it was sent to a replica */
    uint8_t cause;    /* enum sim_cause of a violation */
    bool fleet_short; /* arrived while replicas the policy ordered were still starting */
};

struct sim_seq {
    uint32_t req;
    bool prefill; /* still prefilling: rem = uncached prompt tokens left */
    double rem;   /* tokens left in the current phase */
    double kv;    /* tokens reserved */
    /* Decoding: progress towards the next token (0..1) and the time since the last one, which
     * includes the pauses of other sequences' prefills: the gaps the engine's ITL histogram
     * sees. */
    double frac, gap;
};

struct sim_fifo {
    uint32_t *a;
    size_t head, n, cap;
};

enum sim_replica_state { SIM_STARTING, SIM_READY, SIM_DRAINING, SIM_GONE };

struct sim_replica {
    enum sim_replica_state state;
    double t; /* time the service state was last advanced to */
    double ready_at;
    uint32_t version; /* invalidates stale completion events */
    struct sim_fifo waiting;
    struct sim_seq *run; /* max_running slots */
    int n_run;
    double kv_used;
    struct sim_cache cache;
    double waiting_prompt;   /* prompt tokens of the waiting requests (the engine's gauge counts
                            * them whole: the cache is consulted at admission) */
    double long_prefill_end; /* when the last prefill longer than half the objective ended */
    /* Counters, as the engine exports them. */
    double prompt_tokens, gen_tokens, hit_tokens, query_tokens;
};

/* The world one replica's model needs: requests, the trace's hashes, the model, TTFT sink. */
struct sim_world {
    const struct sim_replica_model *m;
    struct sim_req *reqs;
    const uint64_t *hashes; /* the trace's block hashes as the router's dense keys */
    struct sim_cache_index
        *cache_index;      /* the router's view of every cache; NULL without affinity */
    double block_tokens;   /* tokens per hash block after token scaling */
    double long_prefill_s; /* a prefill at least this long counts as "long" (half the objective) */
    double decode_k;       /* batching curve parameter */
    struct sim_spec *spec; /* speculation's per-batch decode rates (sim_spec.c); NULL when off */
    void (*on_first_token)(void *ctx, uint32_t req, double t);
    void (*on_done)(void *ctx, uint32_t req, double t);
    void (*on_gaps)(void *ctx, double gap_s, double count); /* `count` token gaps of gap_s */
    void *ctx;
};

/* Speculative decoding in the replica model (sim_spec.c). sim_spec_new sets w->spec from w->m
 * and w->decode_k (NULL when spec_tokens is 0); 0 or ERR_NOMEM. */
int sim_spec_new(struct sim_world *w);
void sim_spec_free(struct sim_spec *sp); /* NULL-safe */
/* Tokens/s each of b (>= 1) decoding sequences advances at, speculation included: the plain
 * curve D(b)/b without it. Memoised per b (the controller's plan is computed once per size). */
double sim_decode_rate(const struct sim_world *w, int b);
/* One target step of n tokens, in seconds: n / D(n) on the batching curve. */
double sim_step_seconds(const struct sim_world *w, double n);

int sim_fifo_push(struct sim_fifo *q, uint32_t v);
uint32_t sim_fifo_pop(struct sim_fifo *q);
void sim_fifo_fini(struct sim_fifo *q);

/* A replica in slot `slot` (its cache is listed there in w->cache_index), ready at `ready_at`. */
int sim_replica_init(struct sim_replica *r, const struct sim_world *w, uint32_t slot, double now,
                     double ready_at);
void sim_replica_fini(struct sim_replica *r);
/* Advances the service state to `now`, completes what finished, admits waiting requests. */
void sim_replica_step(struct sim_replica *r, const struct sim_world *w, double now);
/* Time of the next internal completion, or < 0 when idle. */
double sim_replica_next(const struct sim_replica *r, const struct sim_world *w);
/* Queues request `req` (then call sim_replica_step at the same time). Returns 0 or ERR_NOMEM. */
int sim_replica_enqueue(struct sim_replica *r, const struct sim_world *w, uint32_t req);
/* Requests waiting + running. */
int sim_replica_outstanding(const struct sim_replica *r);
/* Requests without their first token yet (waiting, or admitted and still prefilling): what a
 * router sees as requests sent that have not answered their first byte. */
int sim_replica_unanswered(const struct sim_replica *r);
/* Prompt tokens not yet prefilled, as cinfer_requests_waiting_prefill_tokens reports them. */
double sim_replica_prefill_waiting(const struct sim_replica *r);

#endif
