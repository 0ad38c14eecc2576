/* The engine's metric-name contract (ARCHITECTURE.md, "Engine metrics"): the engine exposes these
 * names on /metrics and the autoscaler scrapes them, so both include this header and neither spells
 * a name itself. Each native cinfer_* metric has a vLLM-compatible twin (METRIC_VLLM_*) with the
 * same type, labels and value, exposed by default so dashboards and autoscalers written for vLLM
 * work unchanged (register it with prom_metric_alias(), see common/prom/prom.h).
 * Every metric carries the label METRIC_LABEL_MODEL_NAME; the request counters add
 * METRIC_LABEL_FINISHED_REASON. Counters end in _total; latencies are in seconds. */
#ifndef CINFER_COMMON_METRIC_NAMES_H
#define CINFER_COMMON_METRIC_NAMES_H

/* Labels. */
#define METRIC_LABEL_MODEL_NAME      "model_name"
#define METRIC_LABEL_FINISHED_REASON "finished_reason"

/* Values of finished_reason (the OpenAI finish_reason of the request, as vLLM reports them). */
#define METRIC_FINISHED_STOP   "stop"   /* end-of-sequence token or a stop string */
#define METRIC_FINISHED_LENGTH "length" /* max_tokens or the context length reached */
#define METRIC_FINISHED_ABORT  "abort"  /* cancelled: client gone, shutdown, or an engine error */

/* Gauges: requests in the running batch, requests queued for admission, used KV blocks / all
 * (0..1; vLLM's "perc" is a fraction too). */
#define METRIC_REQUESTS_RUNNING      "cinfer_requests_running"
#define METRIC_REQUESTS_WAITING      "cinfer_requests_waiting"
#define METRIC_KV_CACHE_USAGE        "cinfer_kv_cache_usage_ratio"
#define METRIC_VLLM_REQUESTS_RUNNING "vllm:num_requests_running"
#define METRIC_VLLM_REQUESTS_WAITING "vllm:num_requests_waiting"
#define METRIC_VLLM_KV_CACHE_USAGE   "vllm:kv_cache_usage_perc"

/* Gauge, no vLLM twin: prompt tokens still to prefill, the autoscaler's leading signal (work queued
 * ahead of the next first tokens, which request counts hide when prompt lengths vary 100x). Waiting
 * requests count their whole prompt (the prefix cache is consulted only at admission, so consumers
 * correct by the prefix hit rate) and running requests the rest of a prefill in progress. */
#define METRIC_PREFILL_TOKENS_WAITING "cinfer_requests_waiting_prefill_tokens"

/* Counters: prompt tokens looked up in the prefix cache and of those the ones found cached,
 * prompt tokens processed (prefill), tokens generated, preemptions, finished requests (with label
 * finished_reason). */
#define METRIC_PREFIX_CACHE_QUERIES      "cinfer_prefix_cache_queries_total"
#define METRIC_PREFIX_CACHE_HITS         "cinfer_prefix_cache_hits_total"
#define METRIC_PROMPT_TOKENS             "cinfer_prompt_tokens_total"
#define METRIC_GENERATION_TOKENS         "cinfer_generation_tokens_total"
#define METRIC_PREEMPTIONS               "cinfer_preemptions_total"
#define METRIC_REQUESTS                  "cinfer_requests_total"
#define METRIC_VLLM_PREFIX_CACHE_QUERIES "vllm:prefix_cache_queries_total"
#define METRIC_VLLM_PREFIX_CACHE_HITS    "vllm:prefix_cache_hits_total"
#define METRIC_VLLM_PROMPT_TOKENS        "vllm:prompt_tokens_total"
#define METRIC_VLLM_GENERATION_TOKENS    "vllm:generation_tokens_total"
#define METRIC_VLLM_PREEMPTIONS          "vllm:num_preemptions_total"
#define METRIC_VLLM_REQUESTS             "vllm:request_success_total"

/* KV offload tiers (issue #22), no vLLM twins; label tier = "host" (tier 2, memory outside the
 * KV pool) or "disk" (tier 3, a directory replicas may share). Counters: prompt tokens loaded back
 * from the tier instead of recomputed (also counted in the prefix-cache hits), blocks stored in and
 * evicted from the tier; gauges: bytes and blocks it holds. Without tier: tier-3 files that failed
 * their check (recomputed), failed tier-3 writes, evicted blocks not offloaded (queue full); and the
 * reads ahead of tier 3 (done by the offload thread before a request is admitted): requests that
 * waited for one, the seconds they waited in all, blocks read ahead that no request attached. */
#define METRIC_LABEL_TIER                 "tier"
#define METRIC_TIER_HOST                  "host"
#define METRIC_TIER_DISK                  "disk"
#define METRIC_KV_OFFLOAD_HIT_TOKENS      "cinfer_kv_offload_hit_tokens_total"
#define METRIC_KV_OFFLOAD_STORED          "cinfer_kv_offload_stored_blocks_total"
#define METRIC_KV_OFFLOAD_EVICTED         "cinfer_kv_offload_evicted_blocks_total"
#define METRIC_KV_OFFLOAD_BYTES           "cinfer_kv_offload_bytes"
#define METRIC_KV_OFFLOAD_BLOCKS          "cinfer_kv_offload_blocks"
#define METRIC_KV_OFFLOAD_CORRUPT         "cinfer_kv_offload_corrupt_blocks_total"
#define METRIC_KV_OFFLOAD_WRITE_ERRS      "cinfer_kv_offload_write_errors_total"
#define METRIC_KV_OFFLOAD_DROPPED         "cinfer_kv_offload_dropped_blocks_total"
#define METRIC_KV_OFFLOAD_PREFETCH_WAITS  "cinfer_kv_offload_prefetch_waits_total"
#define METRIC_KV_OFFLOAD_PREFETCH_WAIT_S "cinfer_kv_offload_prefetch_wait_seconds_total"
#define METRIC_KV_OFFLOAD_PREFETCH_UNUSED "cinfer_kv_offload_prefetch_unused_blocks_total"
#define METRIC_HELP_KV_OFFLOAD_HIT_TOKENS "Prompt tokens loaded back from a KV offload tier."
#define METRIC_HELP_KV_OFFLOAD_STORED     "KV blocks written to an offload tier."
#define METRIC_HELP_KV_OFFLOAD_EVICTED    "KV blocks evicted from an offload tier for its budget."
#define METRIC_HELP_KV_OFFLOAD_BYTES      "Bytes of KV blocks an offload tier holds."
#define METRIC_HELP_KV_OFFLOAD_BLOCKS     "KV blocks an offload tier holds."
#define METRIC_HELP_KV_OFFLOAD_CORRUPT    "Offloaded KV files that failed their check (recomputed)."
#define METRIC_HELP_KV_OFFLOAD_WRITE_ERRS "Failed writes of KV blocks to the offload directory."
#define METRIC_HELP_KV_OFFLOAD_DROPPED    "Evicted KV blocks not offloaded (the queue was full)."
#define METRIC_HELP_KV_OFFLOAD_PREFETCH_WAITS                                                      \
    "Requests that waited for their KV blocks to be read ahead from the offload directory."
#define METRIC_HELP_KV_OFFLOAD_PREFETCH_WAIT_S                                                     \
    "Seconds requests waited for KV blocks read ahead from the offload directory."
#define METRIC_HELP_KV_OFFLOAD_PREFETCH_UNUSED                                                     \
    "KV blocks read ahead from the offload directory that no request attached."

/* Histograms (the sample names add _bucket, _sum and _count): arrival -> first token, between
 * consecutive output tokens, arrival -> last token, arrival -> admitted to the running batch. */
#define METRIC_TIME_TO_FIRST_TOKEN      "cinfer_time_to_first_token_seconds"
#define METRIC_INTER_TOKEN_LATENCY      "cinfer_inter_token_latency_seconds"
#define METRIC_E2E_REQUEST_LATENCY      "cinfer_e2e_request_latency_seconds"
#define METRIC_REQUEST_QUEUE_TIME       "cinfer_request_queue_time_seconds"
#define METRIC_VLLM_TIME_TO_FIRST_TOKEN "vllm:time_to_first_token_seconds"
#define METRIC_VLLM_INTER_TOKEN_LATENCY "vllm:inter_token_latency_seconds"
#define METRIC_VLLM_E2E_REQUEST_LATENCY "vllm:e2e_request_latency_seconds"
#define METRIC_VLLM_REQUEST_QUEUE_TIME  "vllm:request_queue_time_seconds"

/* Speculative decoding (registered only when it is on): sequence-steps that verified proposals,
 * proposals verified, proposals accepted, accepted ones by position in the run (label position,
 * "0".."K-1") and decoding sequence-steps that proposed nothing by reason (label reason:
 * no_proposal, cost, kv_full, budget; no vLLM twin). vLLM's Python client renders its
 * per-position counter with the _total suffix, as here. */
#define METRIC_LABEL_POSITION             "position"
#define METRIC_LABEL_REASON               "reason"
#define METRIC_SPEC_DRAFTS                "cinfer_spec_decode_num_drafts_total"
#define METRIC_SPEC_DRAFT_TOKENS          "cinfer_spec_decode_num_draft_tokens_total"
#define METRIC_SPEC_ACCEPTED              "cinfer_spec_decode_num_accepted_tokens_total"
#define METRIC_SPEC_ACCEPTED_PER_POS      "cinfer_spec_decode_num_accepted_tokens_per_pos_total"
#define METRIC_SPEC_SKIPPED               "cinfer_spec_decode_skipped_total"
#define METRIC_SPEC_POOL_HITS             "cinfer_spec_decode_ngram_pool_hits_total"
#define METRIC_VLLM_SPEC_DRAFTS           "vllm:spec_decode_num_drafts_total"
#define METRIC_VLLM_SPEC_DRAFT_TOKENS     "vllm:spec_decode_num_draft_tokens_total"
#define METRIC_VLLM_SPEC_ACCEPTED         "vllm:spec_decode_num_accepted_tokens_total"
#define METRIC_VLLM_SPEC_ACCEPTED_PER_POS "vllm:spec_decode_num_accepted_tokens_per_pos_total"

/* Default bucket upper bounds (seconds; +Inf is implicit), the ones vLLM uses so that quantiles
 * compare across engines. Use as an initializer list:
 *   static const double ttft[] = {METRIC_BUCKETS_TIME_TO_FIRST_TOKEN};
 * Time to first token: 1 ms (a small model on a GPU) up to 43 minutes (a long queue). */
#define METRIC_BUCKETS_TIME_TO_FIRST_TOKEN                                                         \
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,    \
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0
/* Inter-token latency: 10 ms .. 80 s. */
#define METRIC_BUCKETS_INTER_TOKEN_LATENCY                                                         \
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, \
        40.0, 80.0
/* End-to-end request latency: 0.3 s .. about 2 hours. */
#define METRIC_BUCKETS_REQUEST_LATENCY                                                             \
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,       \
        240.0, 480.0, 960.0, 1920.0, 7680.0
#define METRIC_BUCKETS_E2E_REQUEST_LATENCY METRIC_BUCKETS_REQUEST_LATENCY
/* Queue time: vLLM reuses the request-latency buckets, whose 0.3 s floor hides the short waits that
 * matter most to an autoscaler; the time-to-first-token bounds (from 1 ms) resolve them. */
#define METRIC_BUCKETS_REQUEST_QUEUE_TIME METRIC_BUCKETS_TIME_TO_FIRST_TOKEN

/* cinfer-router (router/router_metrics.c) -> cinfer-autoscaler: requests the router holds for an
 * InferenceService with no ready replica (scale from zero), gauge, label model_name (the
 * InferenceService's served model name). Held > 0 while a service has 0 replicas scales it to 1. */
#define METRIC_ROUTER_REQUESTS_HELD      "cinfer_router_requests_held"
#define METRIC_HELP_ROUTER_REQUESTS_HELD "Requests held while the model has no ready replica."

/* HELP texts, shared by the native name and its vLLM twin. */
#define METRIC_HELP_REQUESTS_RUNNING     "Number of requests in the running batch."
#define METRIC_HELP_REQUESTS_WAITING     "Number of requests waiting to be admitted."
#define METRIC_HELP_KV_CACHE_USAGE       "Fraction of KV-cache blocks in use (0 to 1)."
#define METRIC_HELP_PREFIX_CACHE_QUERIES "Prompt tokens looked up in the prefix cache."
#define METRIC_HELP_PREFIX_CACHE_HITS    "Prompt tokens found in the prefix cache."
#define METRIC_HELP_PROMPT_TOKENS        "Prompt tokens processed (prefill)."
#define METRIC_HELP_GENERATION_TOKENS    "Tokens generated."
#define METRIC_HELP_PREEMPTIONS          "Requests preempted to free KV-cache blocks."
#define METRIC_HELP_REQUESTS             "Finished requests by finish reason."
#define METRIC_HELP_TIME_TO_FIRST_TOKEN  "Seconds from request arrival to its first output token."
#define METRIC_HELP_INTER_TOKEN_LATENCY  "Seconds between consecutive output tokens of a request."
#define METRIC_HELP_E2E_REQUEST_LATENCY  "Seconds from request arrival to its last output token."
#define METRIC_HELP_REQUEST_QUEUE_TIME   "Seconds a request waited before it was admitted."

#define METRIC_HELP_PREFILL_TOKENS_WAITING                                                         \
    "Prompt tokens not yet prefilled (queued and in progress)."
#define METRIC_HELP_SPEC_DRAFTS       "Speculative decoding: sequence-steps that verified proposals."
#define METRIC_HELP_SPEC_DRAFT_TOKENS "Speculative decoding: proposed tokens verified."
#define METRIC_HELP_SPEC_ACCEPTED     "Speculative decoding: proposed tokens accepted."
#define METRIC_HELP_SPEC_ACCEPTED_PER_POS                                                          \
    "Speculative decoding: proposed tokens accepted, by position in the proposal run."
#define METRIC_HELP_SPEC_SKIPPED                                                                   \
    "Speculative decoding: decoding sequence-steps without proposals, by reason."
#define METRIC_HELP_SPEC_POOL_HITS                                                                 \
    "Speculative decoding: sequence-steps whose n-gram proposals came from the cross-request "     \
    "pool (--ngram-pool-bytes) because their own tokens held no match."

#endif
