/* The serving scheduler: continuous batching over the model's batched forward pass.
 *
 * Every step runs the next tokens of all running sequences (one decode token each, or the next chunk
 * of a prompt still being prefilled) plus prefill chunks of waiting sequences admitted into the free
 * budget, within max_num_batched_tokens tokens and max_num_seqs sequences. Finished sequences leave
 * and waiting ones join between steps (vLLM's unified scheduler: a sequence is just "tokens whose K/V
 * is computed" and "tokens still to compute", so prefill chunks and decodes mix freely).
 *
 * KV memory: a sequence is admitted only when the blocks for its first chunk are free (counting
 * blocks the prefix cache can evict). When a running sequence needs a block and none can be found, the
 * most recently admitted running sequence is preempted: its blocks are released, it goes back to the
 * waiting queue (in its original place) and is later recomputed from its tokens. Its sampler, detoken-
 * izer and stop matcher keep their state, so it produces exactly the output it would have produced.
 *
 * Prefix caching (optional): each full block is offered to engine/kv/prefix_cache.h under a hash chained
 * over the block tokens and a per-request salt; new sequences attach the longest cached chain and
 * prefill only the rest (always at least their last token, which yields the first logits). With
 * offload tiers (sched_config.offload), the chain continues with blocks loaded back from them; a
 * waiting sequence whose chain continues in tier 3 (a directory) first has those blocks read
 * ahead by the store's offload thread (engine/kv/kv_slots.h, kv_slots_prefetch) and is passed over
 * meanwhile (the sequences behind it are admitted; the head-of-line rule applies to the others),
 * for at most what recomputing them would take: the inference thread never reads a file.
 *
 * Outputs are events through a callback: one per generated token with the text it makes safe to emit
 * (UTF-8 whole, stop strings never emitted), and a final one carrying the finish reason.
 *
 * Not thread-safe: the scheduler, the model and the KV cache belong to one inference thread
 * (STYLE.md "Concurrency"); engine/serve/serve_loop.c feeds it from the HTTP thread. */
#ifndef CINFER_ENGINE_SCHEDULER_H
#define CINFER_ENGINE_SCHEDULER_H

#include "engine/grammar/grammar.h"
#include "engine/sched/sampler.h"
#include "engine/sched/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kv/kv_window.h"
#include "engine/kv/prefix_cache.h"

/* A sink-window sequence's prompt may be longer than max_context, up to this many tokens; with
 * max_tokens -1 it ends (LENGTH) after generating this many. */
#define SCHED_WINDOW_MAX_TOKENS (1 << 20)

/* Logits one prompt-logprobs chunk may ask for (rows x vocabulary x 4 bytes). */
#define SCHED_PROMPT_LOGITS_BYTES (32u << 20)

struct model;
struct grammar;
struct kv_cache;
struct kv_offload;
struct tokenizer;
struct sched;
struct sched_seq;

struct sched_config {
    int max_num_seqs;           /* sequences running at once (>= 1) */
    int max_num_batched_tokens; /* tokens per forward step (>= 1) */
    bool chunked_prefill;       /* false: a prompt is prefilled whole, in a step without decodes
                                   (alone if it exceeds the budget) */
    bool prefix_caching;
    int max_context; /* tokens per sequence, prompt + generated (<= KV block-table capacity) */
    /* Speculative decoding (engine/sched/spec.h); zero (method NONE) runs the plain step. */
    struct spec_config spec;
    /* spec.method DRAFT: the draft model (same vocabulary, spec_draft_check_vocab) and its own
     * KV pool (model_kv_init(draft, draft_kv) done, max_num_seqs sequence ids, max_context
     * tokens per sequence), both borrowed for the scheduler's life; NULL otherwise. */
    struct model *draft;
    struct kv_cache *draft_kv;
    /* Offload tiers below the pool (needs prefix_caching), borrowed for the scheduler's life;
     * NULL = none. offload_gate: enum kv_slots_gate (which evicted blocks are written down). */
    struct kv_offload *offload;
    int offload_gate;
    /* Constrained decoding computes a step's masks after its forward pass on the calling thread
     * (A/B measurements); false: on a worker thread while the forward pass runs. */
    bool grammar_inline_masks;
};

enum sched_finish {
    SCHED_FINISH_NONE = 0,
    SCHED_FINISH_STOP,   /* end-of-generation token or a stop string */
    SCHED_FINISH_LENGTH, /* max_tokens or max_context reached, or ended by sched_stop_all */
    SCHED_FINISH_ABORT,  /* cancelled (client gone) or an engine error */
};

/* What a new sequence asks for. Everything is copied by sched_add. */
struct sched_request {
    const int32_t *prompt; /* >= 1 token ids, each < the model's vocabulary */
    int n_prompt;          /* < max_context */
    struct sampler_params sampling;
    long max_tokens; /* > 0; -1 = until the context is full; 0 = none: the prompt is prefilled
                        (for prompt_logprobs) and the sequence finishes with LENGTH */
    /* Report each prompt token's log-probability after the first (OpenAI's echo with logprobs):
     * one event per token, with sampling.n_logprobs alternatives. The prompt's logits are then
     * computed for every position, in chunks of at most SCHED_PROMPT_LOGITS_BYTES of logits, and
     * the prefix cache is not attached (its blocks have no logits); blocks are still published. */
    bool prompt_logprobs;
    const char *const *stops;
    size_t n_stops; /* 0..STOP_MATCHER_MAX non-empty strings */
    bool ignore_eos;
    int priority;           /* lower runs first; FCFS within a priority */
    const char *cache_salt; /* NULL or a string: prefix-cache chains are per salt */
    /* NULL, or the grammar every sampled token must keep the output inside (engine/grammar/):
     * sched_add gives the sequence its own matcher, which takes a reference. Each step samples
     * from the logits with the tokens outside the grammar's mask at -inf (logprobs are then those
     * of the constrained distribution); an end-of-generation token is allowed only where the
     * grammar accepts, and the sequence stops (STOP) as soon as the grammar is complete and
     * nothing may follow. ignore_eos does not apply to a constrained sequence. The matcher only
     * advances on sampled tokens, so preemption (recomputation of K/V) leaves it exact. */
    struct grammar *grammar;
    /* With a grammar and lazy.n > 0, the matcher is lazy (grammar.h "lazy matching"): the output
     * is free, and speculated on like an unconstrained one, until a trigger fires; only a token
     * that fires it with bytes the grammar refuses is kept out (another one is sampled). From
     * then on the rules above apply. A speculative run in which the trigger fires ends after the
     * token that follows it, drawn from the masked row. */
    struct grammar_lazy lazy;
    /* KV eviction (engine/kv/kv_window.h); zero = mode none. sink-window: the sequence keeps its
     * sink blocks and at least window_tokens recent tokens, dropping the blocks between before
     * each step (StreamingLLM positions: the kept keys are re-rotated, model_kv_window_evict),
     * so its prompt may exceed max_context (up to SCHED_WINDOW_MAX_TOKENS) and so may its output.
     * Needs sink blocks + window_tokens + block_size - 1 < max_context (the rest is the most a
     * chunk of it prefills at once) and a backend that can re-rotate (model_kv_shift_supported;
     * else ERR_UNSUPPORTED); not with prompt_logprobs. Such a sequence never speculates (a
     * rollback would cross an eviction), never touches the prefix cache (its moved blocks must
     * stay private, and after an eviction it is a prefix of nothing: no lookups, no inserts, no
     * block events, so no offload either), and a preemption recomputes its kept tokens (sinks +
     * window) at positions 0.. (its text is gone): what follows a preemption may then differ
     * from an uninterrupted run, as StreamingLLM's recomputation baseline does. */
    struct kv_window window;
    void *ud; /* the caller's cookie, passed back in every event */
};

/* One output of a sequence. Pointers are borrowed for the duration of the callback. Besides token
 * events and the final one, each sequence gets one event with neither a token nor a finish when it
 * is first admitted to the running batch (its queue time ends there), and with prompt_logprobs one
 * prompt event per prompt token after the first, in order, before any token event. */
struct sched_event {
    void *ud;
    bool has_token;    /* false only for a finish without a new token (and prompt events) */
    bool prompt_token; /* a prompt event: `token` is prompt[prompt_pos], `sample` its logprob and
                          alternatives; no text, no finish */
    int prompt_pos;
    int32_t token;                       /* the generated token (when has_token) */
    const struct sampler_result *sample; /* logprob and alternatives of `token` (when has_token
                                            or prompt_token) */
    const char *text;                    /* text now safe to emit (may be empty) */
    size_t len;
    enum sched_finish finish; /* NONE until the last event of the sequence */
    int n_prompt;             /* prompt tokens */
    int n_cached;             /* prompt tokens served from the prefix cache at first admission */
    int n_generated;          /* tokens generated so far (counting this one) */
    /* The sum of the logprobs of every token sampled so far, an end-of-generation token included
     * (0 unless sampling.logprobs), and how many were sampled: best_of ranks by their mean. */
    double cum_logprob;
    int n_sampled;
    long spec_proposed; /* proposals verified for the sequence so far */
    long spec_accepted; /* of those, accepted */
};

/* Called on the inference thread for every event. Must not call back into the scheduler except
 * sched_cancel. After an event with finish != NONE the sequence handle is gone. */
typedef void (*sched_emit_fn)(void *ctx, const struct sched_event *ev);

/* Counters since creation; gauges of the last step. Plain values. */
struct sched_stats {
    int running, waiting;
    long prefill_tokens_waiting; /* tokens still to prefill: waiting sequences' whole prompts
                                  * (+ generated tokens of preempted ones; prefix hits are found
                                  * at admission) and the rest of running ones mid-prefill */
    double kv_usage;      /* blocks used by sequences / all blocks (cache-only blocks excluded) */
    uint64_t preemptions; /* total */
    uint64_t prefix_queries;    /* prompt tokens looked up at first admission */
    uint64_t prefix_hits;       /* of those, served from the prefix cache (any tier) */
    uint64_t prefix_hits_host;  /* of those, loaded back from the tier-2 host store */
    uint64_t prefix_hits_disk;  /* of those, loaded back from the tier-3 directory */
    uint64_t prefetch_waits;    /* sequences that waited for a tier-3 read-ahead before admission */
    double prefetch_wait_s;     /* seconds they waited, in all */
    uint64_t resume_hits;       /* tokens preempted sequences found cached (any tier) when
                                 * re-admitted, instead of recomputing them */
    uint64_t prompt_tokens;     /* prompt tokens of admitted requests (first admission) */
    uint64_t generation_tokens; /* tokens generated */
    uint64_t steps;             /* forward steps run */
    uint64_t window_evicted;    /* tokens sink-window sequences dropped from their caches */
    struct spec_stats spec;     /* speculative decoding (zero without it) */
};

/* Creates a scheduler over `m`, `kv` (its K/V storage must be initialised with model_kv_init) and
 * `tok` (may be NULL: no text, only tokens; EOS from the GGUF), all borrowed for the scheduler's life.
 * cfg is copied. With adaptive speculation, times a few forward passes on the (empty) pool (and
 * the draft's) to calibrate its step-cost models (spec_cost_calibrate). Writes a new scheduler to *out (sched_free).
 * ERR_INVAL on a bad config (also spec_config_valid false), ERR_NOMEM. */
int sched_new(const struct sched_config *cfg, struct model *m, struct kv_cache *kv,
              const struct tokenizer *tok, sched_emit_fn emit, void *emit_ctx, struct sched **out);
/* Tells `fn` of every block the prefix cache stores or evicts (engine/kv/kv_events.h, for
 * routers); fn NULL: nobody listens. A no-op without prefix caching. Inference thread (or before
 * it starts). */
void sched_set_block_observer(struct sched *s, prefix_cache_observer_fn fn, void *ctx);
/* Frees every sequence without events (call sched_stop_all first for a clean end). NULL-safe. */
void sched_free(struct sched *s);

/* Queues a new sequence. Returns its handle through *out (owned by the scheduler; valid until its
 * final event). ERR_INVAL (bad prompt, params or stops, a grammar over a larger vocabulary than
 * the model's; nothing queued), ERR_TOO_BIG (the grammar's start state breaks a matcher bound),
 * ERR_NOMEM. */
int sched_add(struct sched *s, const struct sched_request *r, struct sched_seq **out);

/* Asks the sequence to stop: at the start of the next step it finishes with `reason` (ABORT for a
 * client gone; LENGTH for a deadline: the text so far is flushed) and its blocks are freed. The
 * first reason given wins. */
void sched_cancel(struct sched *s, struct sched_seq *seq, enum sched_finish reason);

/* Runs one step: cancellations, scheduling, one forward pass, sampling and events. Returns 0 (also
 * when idle), or an error of the forward pass (every sequence in the step is then finished with
 * SCHED_FINISH_ABORT: the scheduler stays usable). */
int sched_step(struct sched *s);

/* True when no sequence is waiting or running. */
bool sched_idle(const struct sched *s);

/* Ends every sequence now: those that generated something finish with `reason`, the others too
 * (their output is empty). Used at the end of a drain. */
void sched_stop_all(struct sched *s, enum sched_finish reason);

void sched_stats(const struct sched *s, struct sched_stats *out);

#endif
