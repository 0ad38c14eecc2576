/* The engine's Prometheus series for `cinfer-engine serve`: registers every metric of
 * common/metric_names.h (optionally with its vLLM twin) for one model and gives the inference
 * thread cheap update calls. Not an HTTP layer (the caller renders the registry) and not the
 * process metrics (the caller registers probe_register_process_metrics itself). */
#ifndef CINFER_ENGINE_SERVE_METRICS_H
#define CINFER_ENGINE_SERVE_METRICS_H

#include <stdbool.h>

struct prom_registry;
struct spec_stats;

/* How a request finished; the finished_reason label of cinfer_requests_total. */
enum serve_finish {
    SERVE_FINISH_STOP = 0, /* "stop": end-of-sequence token or a stop string */
    SERVE_FINISH_LENGTH,   /* "length": max_tokens or the context length reached */
    SERVE_FINISH_ABORT,    /* "abort": client gone, shutdown or an engine error */
};
#define SERVE_FINISH_COUNT 3

struct serve_metrics; /* opaque: the series handles of one model */

/* Registers on `reg` (borrowed; must outlive the returned metrics) every engine metric of
 * common/metric_names.h with the label model_name = `model_name` (borrowed; the registry copies
 * it): the gauges running/waiting/KV usage/prefill tokens waiting at 0, the counters (prefix queries/hits, prompt and
 * generation tokens, preemptions, and requests_total with its stop, length and abort series) at 0,
 * and the TTFT, inter-token, e2e and queue-time histograms with the METRIC_BUCKETS_* bounds. With
 * `vllm_compat` every metric with a vLLM twin also gets its vLLM name (prom_metric_alias: same series, same values).
 * Writes a new handle to *out (free with serve_metrics_free). Returns 0, ERR_INVAL (model_name
 * NULL or empty, or a name already registered in `reg`; logged) or ERR_NOMEM. On failure the
 * metrics registered before the failing one stay in `reg` (prom has no unregister): treat it as
 * fatal for that registry. Owning thread, at start-up. */
int serve_metrics_new(struct prom_registry *reg, const char *model_name, bool vllm_compat,
                      struct serve_metrics **out);

/* Registers speculative decoding's counters on `reg` too (the one serve_metrics_new used):
 * proposals verified, accepted, accepted per position 0..positions-1 (1..SPEC_MAX_TOKENS: the
 * server's --num-speculative-tokens) and sequence-steps skipped by reason, with their vLLM twins
 * under vllm_compat. Without this call serve_metrics_add_spec does nothing and /metrics shows no
 * spec series (vLLM shows them only with speculation too). 0 or serve_metrics_new's errors.
 * Owning thread, at start-up, at most once. */
int serve_metrics_enable_spec(struct serve_metrics *m, struct prom_registry *reg,
                              const char *model_name, bool vllm_compat, int positions);

/* Adds the growth of the scheduler's speculation counters from `before` to `now` (both borrowed;
 * counters never fall). */
void serve_metrics_add_spec(struct serve_metrics *m, const struct spec_stats *now,
                            const struct spec_stats *before);

/* Frees the handle (takes `m`); the metrics and their values stay in the registry. NULL-safe. No
 * other thread may use `m` during or after the call. */
void serve_metrics_free(struct serve_metrics *m);

/* Updates. Any thread (each takes the registry mutex once per series touched); meant for the
 * inference thread. `m` may be NULL: the call then does nothing, so code paths without metrics
 * (unit tests, tools) need no special case. Counts must be >= 0 (asserted: a programmer error). */

/* Sets the load gauges: requests in the running batch, requests waiting for admission, and the
 * fraction of KV blocks in use (clamped to 0..1 so rounding never shows more than 100%; NaN is
 * reported as 0). */
void serve_metrics_set_load(struct serve_metrics *m, int running, int waiting, double kv_usage);
/* Sets the gauge of prompt tokens not yet prefilled (sched_stats' prefill_tokens_waiting). */
void serve_metrics_set_prefill_waiting(struct serve_metrics *m, long tokens);
/* Adds prompt tokens looked up in the prefix cache and, of those, the ones found (hit_tokens <=
 * queried_tokens, asserted). */
void serve_metrics_add_prefix(struct serve_metrics *m, long queried_tokens, long hit_tokens);
/* Adds prompt tokens prefilled and tokens generated. */
void serve_metrics_add_tokens(struct serve_metrics *m, long prompt_tokens, long generated_tokens);
/* Adds `n` preempted requests. */
void serve_metrics_add_preemptions(struct serve_metrics *m, long n);
/* The offload tiers' numbers, indexed [0] host (tier 2), [1] disk (tier 3): counts since the
 * previous call (>= 0), gauges as they are now. */
struct serve_metrics_offload {
    long hit_tokens[2], stored[2], evicted[2];
    double bytes[2], blocks[2];
    long corrupt, write_errors, dropped;
    long prefetch_waits,
        prefetch_unused;    /* tier-3 read-ahead: requests that waited, blocks unused */
    double prefetch_wait_s; /* seconds those requests waited */
};
/* Adds the counts and sets the gauges of the cinfer_kv_offload_* metrics. */
void serve_metrics_update_offload(struct serve_metrics *m, const struct serve_metrics_offload *o);
/* Observes one latency in seconds: arrival -> first token, between two consecutive tokens of a
 * request, arrival -> admitted to the running batch. */
void serve_metrics_observe_ttft(struct serve_metrics *m, double seconds);
void serve_metrics_observe_itl(struct serve_metrics *m, double seconds);
void serve_metrics_observe_queue_time(struct serve_metrics *m, double seconds);
/* One finished request: counts it under its finish reason (`f` must be a serve_finish value,
 * asserted) and observes its e2e latency (arrival -> last token, seconds). */
void serve_metrics_request_done(struct serve_metrics *m, enum serve_finish f, double e2e_seconds);

#endif
