/* The inference thread of `cinfer-engine serve`: owns the scheduler (and through it the model and
 * the KV cache), takes new requests and cancellations from the HTTP thread through a locked inbox,
 * runs scheduler steps while there is work, copies each event into its request and posts the
 * request (serve_req_post: the responder's hook), and keeps the engine metrics current.
 * Functions here are called from the main and HTTP threads; the loop's own state stays on its
 * thread. */
#ifndef CINFER_ENGINE_SERVE_LOOP_H
#define CINFER_ENGINE_SERVE_LOOP_H

#include "engine/sched/scheduler.h"

#include <stdbool.h>

struct model;
struct kv_cache;
struct tokenizer;
struct serve_metrics;
struct serve_req;
struct serve_loop;

struct serve_loop_cfg {
    struct sched_config sched;
    int max_queue;            /* requests waiting for admission beyond which submit refuses (429) */
    double request_timeout_s; /* > 0: a request older than this is ended ("length") */
    /* Told of every block the prefix cache stores or evicts (engine/kv/kv_events.h); NULL: none.
     * Runs on the inference thread. */
    prefix_cache_observer_fn block_observer;
    void *block_observer_ctx;
};

/* Creates the scheduler over the borrowed model, KV cache (initialised) and tokenizer, and starts
 * the thread. `metrics` is borrowed and must outlive the loop. ERR_INVAL, ERR_NOMEM. */
int serve_loop_start(const struct serve_loop_cfg *cfg, struct model *m, struct kv_cache *kv,
                     const struct tokenizer *tok, struct serve_metrics *metrics,
                     struct serve_loop **out);

/* Queues `r` (the loop takes its own reference) and registers the loop's wake-up as r's on_cancel
 * hook (serve_req_cancel). r must be adopted by the responder first: the loop posts it from then
 * on. ERR_AGAIN when max_queue requests are already waiting, ERR_BAD_STATE once stopping or faulted
 * (serve_loop_faulted tells which); r is untouched then. Any thread. */
int serve_loop_submit(struct serve_loop *l, struct serve_req *r);

/* Wakes the loop so it looks at its requests again (serve_req_cancel calls it). Any thread, never
 * blocks for long. */
void serve_loop_wake(struct serve_loop *l);

/* Requests submitted and not yet finished. Any thread. */
int serve_loop_inflight(const struct serve_loop *l);

/* Requests waiting for admission (as last published by the loop). Any thread. */
int serve_loop_waiting(const struct serve_loop *l);

/* Prompt tokens the scheduler has still to prefill, waiting and running sequences together (as
 * last published by the loop, with serve_loop_waiting). Any thread. */
long serve_loop_prefill_waiting(const struct serve_loop *l);

/* True once forward steps failed several times in a row (a broken backend; the failpoint
 * "serve.step" of common/failpoint.h simulates one). It stays faulted: the loop runs no more steps,
 * every request then in flight or queued was ended with an engine_faulted error (its KV blocks
 * freed), later submissions are refused, and the probes should fail (/health and /live 503) so the
 * pod is restarted. Any thread. */
bool serve_loop_faulted(const struct serve_loop *l);

/* Marks the engine faulted from outside the loop (the model file changed under it): from now on
 * serve_loop_faulted is true, so the probes fail and new submissions are refused as after a
 * backend fault, while requests already submitted run to their end on the weights loaded (the
 * engine holds its own copy). Permanent; idempotent. Any thread. */
void serve_loop_set_faulted(struct serve_loop *l);

/* Ends every request still in flight now (finish_reason "length") and joins the thread. Idempotent.
 * Main thread. */
void serve_loop_stop(struct serve_loop *l);

/* Stops if needed and frees. NULL-safe. Main thread. */
void serve_loop_free(struct serve_loop *l);

#endif
