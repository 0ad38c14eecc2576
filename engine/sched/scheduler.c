/* Continuous batching with chunked prefill, preemption by recomputation and prefix caching; see
 * engine/sched/scheduler.h for the model. The step is: cancellations -> running sequences (in admission
 * order, preempting the newest when blocks run out) -> admissions from the waiting queue -> one forward
 * pass -> prefix-cache inserts of newly full blocks -> sampling and events. */
#include "engine/sched/scheduler.h"

#include "common/assert.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/kv/kv_offload.h"
#include "engine/kv/kv_slots.h"
#include "engine/kv/prefix_cache.h"
#include "engine/text/stop_matcher.h"
#include "engine/text/tokenizer.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SCHED_TEXT_MAX        (1u << 20) /* bytes one event may carry (a flush of held text) */
#define SCHED_TOKENS_INITIAL  256        /* output tokens a sequence has room for before growing */
#define SCHED_PREFETCH_POLL_S 0.01 /* a step with nothing to run waits this long for a prefetch */

enum seq_state { SEQ_WAITING = 0, SEQ_RUNNING };

struct sched_seq {
    void *ud;
    enum seq_state state;
    enum sched_finish cancelled; /* NONE, or how to end at the next step (sched_cancel) */
    int priority;
    uint64_t arrival; /* sched_add order: FCFS within a priority, and a preempted seq's place */

    int32_t *tokens; /* prompt, then generated tokens; the last one may not be computed yet */
    int n_tokens, cap_tokens;
    int n_prompt;
    int n_computed; /* tokens whose K/V is in the cache */
    int n_generated;
    int n_cached; /* prompt tokens attached from the prefix cache at first admission */
    bool ever_admitted;
    long max_tokens; /* -1: until max_context; 0: prefill only */
    bool ignore_eos;
    bool prompt_logprobs;
    int lp_next;        /* prompt_logprobs: the next prompt position to report (1..n_prompt) */
    double cum_logprob; /* of every sampled token, end-of-generation included */
    int n_sampled;

    int kv_seq;            /* -1 while waiting */
    int chunk;             /* tokens scheduled in the current step (0: not in it) */
    struct kv_chain chain; /* prefix-cache chain (root from the salt), hashes of full blocks */
    struct kv_fetch fetch; /* waiting: the read-ahead of its tier-3 blocks (kv_slots_prefetch) */

    struct sampler_params sampling;
    struct sampler *smp; /* created at first admission: its scratch is O(vocabulary) */
    struct stop_matcher *stop;
    struct tokenizer_detok detok;
    struct spec_seq spec; /* speculative decoding: proposals this step, acceptance, draft state */
    struct kv_window window; /* sink-window: tokens[] holds what the cache holds (see seq_evict) */
    struct grammar_matcher *gm; /* NULL: unconstrained */
    int32_t gm_vocab;           /* tokens the grammar's vocabulary knows (<= n_vocab) */
    /* This step's mask, computed by the mask worker while the forward pass runs (pmask_ok) */
    uint32_t *pmask;
    int pmask_rc; /* grammar_matcher_mask's result */
    bool pmask_ok;
};

/* The mask worker: computes the masks of a step's constrained sequences while the inference
 * thread runs the forward pass (a matcher's state is final once its last token was accepted).
 * The inference thread hands over jobs and waits for them before it touches any matcher again,
 * so the grammars' mask caches are used by one thread at a time, under the mutex's ordering. */
struct sched_gworker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    uint64_t gen, done;          /* jobs handed over / finished */
    struct grammar_arena *arena; /* the worker's scratch */
    struct sched_seq **jobs;     /* (max_num_seqs) */
    int n_jobs;
};

struct sched {
    struct sched_config cfg;
    struct model *m;
    struct kv_cache *kv;
    const struct tokenizer *tok;
    struct kv_slots *slots; /* the pool's reservation, eviction and prefix cache */
    sched_emit_fn emit;
    void *emit_ctx;
    int n_vocab;
    int32_t eos; /* EOS when there is no tokenizer */
    int block_size;
    int lp_rows; /* tokens per prompt-logprobs chunk: SCHED_PROMPT_LOGITS_BYTES of logits */
    double prefill_s_per_token; /* EWMA over prefill-sized steps (the tier-3 cost model) */

    struct sched_seq **waiting; /* sorted by (priority, arrival) */
    int n_waiting;
    struct sched_seq **running; /* admission order */
    int n_running;
    int cap_seqs; /* capacity of waiting (grows) */
    uint64_t next_arrival;

    struct model_batch_entry *entries; /* max_num_seqs */
    struct sched_seq **entry_seq;
    struct buf piece, text; /* event text assembly */
    struct sched_stats st;

    /* Speculative decoding (cfg.spec.method NONE: none of this is allocated or used). */
    struct spec_cost cost;    /* step seconds against tokens (calibrated, then learned) */
    struct spec_accept acc;   /* every sequence's runs: the prior of a sequence's estimate */
    struct spec_cand *cands;  /* (max_num_seqs) this step's candidates */
    int *cand_entry;          /* (max_num_seqs) their entries */
    void *plan_scratch;       /* SPEC_CTL_SCRATCH_BYTES(max_num_seqs) */
    struct spec_draft *draft; /* method DRAFT: the proposer over cfg.draft, cfg.draft_kv */
    struct spec_pool *pool;   /* method NGRAM with ngram_pool_bytes: finished sequences' n-grams */
    struct spec_draft_job *jobs; /* (max_num_seqs) this step's drafting run */
    int *job_entry;              /* (max_num_seqs) their entries */
    float *vscratch;             /* (n_vocab) the rejection rule's residual */
    /* Constrained decoding, made at the first grammar: the matchers' scratch, one mask and a
     * masked copy of a logits row (n_vocab). */
    struct grammar_arena *garena;
    uint32_t *gmask;
    float *glogits;
    struct sched_gworker *gw; /* NULL: masks are computed after the forward pass */
};

/* ---------------------------------------------------------------- sequences */

/* Makes room for `want` tokens (capped at max_context) in the token and block-hash arrays. */
static int seq_grow(const struct sched *s, struct sched_seq *q, int want)
{
    int most = q->window.mode != KV_WINDOW_NONE ? SCHED_WINDOW_MAX_TOKENS + 1 : s->cfg.max_context;
    if (want > most) want = most;
    if (want <= q->cap_tokens) return 0;
    int32_t *t = realloc(q->tokens, (size_t)want * sizeof(int32_t));
    if (!t) return ERR_NOMEM;
    q->tokens = t;
    size_t nh = (size_t)want / (size_t)s->block_size + 1;
    uint64_t *h = realloc(q->chain.hashes, nh * sizeof(uint64_t));
    if (!h) return ERR_NOMEM;
    q->chain.hashes = h;
    q->cap_tokens = want;
    return 0;
}

static void seq_free(struct sched_seq *q)
{
    if (!q) return;
    spec_seq_fini(NULL, &q->spec); /* its draft K/V went with seq_release_kv */
    sampler_free(q->smp);
    stop_matcher_free(q->stop);
    grammar_matcher_free(q->gm);
    free(q->pmask);
    free(q->tokens);
    free(q->chain.hashes);
    free(q);
}

/* Releases the K/V of a sequence (cached full blocks stay with the prefix cache). */
static void seq_release_kv(struct sched *s, struct sched_seq *q)
{
    if (q->kv_seq >= 0) kv_cache_seq_close(s->kv, q->kv_seq);
    spec_seq_release(s->draft, &q->spec); /* recomputed when it next drafts */
    q->kv_seq = -1;
    q->n_computed = 0;
    q->chain.n_hashed = 0;
    q->chunk = 0;
}

static bool seq_is_eog(const struct sched *s, int32_t id)
{
    if (s->tok) return tokenizer_is_eog(s->tok, id);
    return id == s->eos;
}

static int waiting_insert(struct sched *s, struct sched_seq *q)
{
    if (s->n_waiting == s->cap_seqs) {
        int cap = s->cap_seqs ? s->cap_seqs * 2 : 64;
        struct sched_seq **w = realloc(s->waiting, (size_t)cap * sizeof(*w));
        if (!w) return ERR_NOMEM;
        s->waiting = w;
        s->cap_seqs = cap;
    }
    int i = s->n_waiting;
    while (i > 0) {
        const struct sched_seq *p = s->waiting[i - 1];
        if (p->priority < q->priority || (p->priority == q->priority && p->arrival < q->arrival))
            break;
        s->waiting[i] = s->waiting[i - 1];
        i--;
    }
    s->waiting[i] = q;
    s->n_waiting++;
    q->state = SEQ_WAITING;
    return 0;
}

static void waiting_remove_at(struct sched *s, int i)
{
    memmove(&s->waiting[i], &s->waiting[i + 1], (size_t)(s->n_waiting - i - 1) * sizeof(void *));
    s->n_waiting--;
}

static void running_remove_at(struct sched *s, int i)
{
    memmove(&s->running[i], &s->running[i + 1], (size_t)(s->n_running - i - 1) * sizeof(void *));
    s->n_running--;
}

static void running_remove(struct sched *s, const struct sched_seq *q)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            running_remove_at(s, i);
            return;
        }
}

/* ---------------------------------------------------------------- events */

/* Emits the event of `q` with the text assembled in s->text. */
static void seq_emit(struct sched *s, struct sched_seq *q, const struct sampler_result *r,
                     enum sched_finish finish)
{
    struct sched_event ev = {
        .ud = q->ud,
        .has_token = r != NULL,
        .token = r ? r->token : 0,
        .sample = r,
        .text = s->text.data ? s->text.data : "",
        .len = s->text.len,
        .finish = finish,
        .n_prompt = q->n_prompt,
        .n_cached = q->n_cached,
        .n_generated = q->n_generated,
        .cum_logprob = q->cum_logprob,
        .n_sampled = q->n_sampled,
        .spec_proposed = q->spec.n_proposed,
        .spec_accepted = q->spec.n_accepted,
    };
    s->emit(s->emit_ctx, &ev);
}

/* Emits the prompt event of position `pos` (prompt_logprobs). */
static void seq_emit_prompt(struct sched *s, struct sched_seq *q, int pos,
                            const struct sampler_result *r)
{
    struct sched_event ev = {
        .ud = q->ud,
        .prompt_token = true,
        .prompt_pos = pos,
        .token = r->token,
        .sample = r,
        .text = "",
        .n_prompt = q->n_prompt,
        .n_cached = q->n_cached,
    };
    s->emit(s->emit_ctx, &ev);
}

/* Whether q's next chunk needs every row of logits: prompt positions are still to be reported. */
static bool seq_wants_prompt_logits(const struct sched_seq *q)
{
    return q->prompt_logprobs && q->lp_next < q->n_prompt;
}

/* Every sequence that ends (finished, stopped, cancelled) passes here: with the n-gram pool, what
 * it generated goes into it, after the prompt's last n-gram (the prompt is in the sequence's own
 * history, which later requests repeating it look up themselves). */
static void seq_destroy(struct sched *s, struct sched_seq *q)
{
    if (s->pool && q->n_generated > 0) {
        int from = q->n_prompt > s->cfg.spec.ngram_max ? q->n_prompt - s->cfg.spec.ngram_max : 0;
        spec_pool_insert(s->pool, q->tokens + from, q->n_tokens - from);
    }
    kv_slots_prefetch_end(s->slots, &q->fetch); /* cancelled while prefetching: staging freed */
    seq_release_kv(s, q);
    seq_free(q);
}

/* Appends whatever the detokenizer and the stop matcher still hold to s->text. */
static void seq_flush_text(struct sched *s, struct sched_seq *q)
{
    if (!s->tok) return;
    buf_reset(&s->piece);
    if (tokenizer_detok_flush(&q->detok, &s->piece) == 0 && s->piece.len)
        (void)stop_matcher_feed(q->stop, s->piece.data, s->piece.len, &s->text);
    (void)stop_matcher_flush(q->stop, &s->text);
}

/* Ends a sequence that is on no queue any more: final event, then it is freed. */
static void seq_finish(struct sched *s, struct sched_seq *q, enum sched_finish f)
{
    buf_reset(&s->text);
    if (f != SCHED_FINISH_ABORT) seq_flush_text(s, q);
    seq_emit(s, q, NULL, f);
    seq_destroy(s, q);
}

/* Handles the token sampled for q and emits its event; returns the finish reason (the caller then
 * takes q off the running list and destroys it). */
static enum sched_finish seq_accept(struct sched *s, struct sched_seq *q,
                                    const struct sampler_result *r)
{
    buf_reset(&s->text);
    q->cum_logprob += (double)r->logprob;
    q->n_sampled++;
    if ((!q->ignore_eos || (q->gm && grammar_matcher_active(q->gm))) && seq_is_eog(s, r->token)) {
        seq_flush_text(s, q);
        seq_emit(s, q, NULL, SCHED_FINISH_STOP);
        return SCHED_FINISH_STOP;
    }
    if (q->n_tokens == q->cap_tokens && seq_grow(s, q, q->cap_tokens * 2) != 0) {
        log_error("out of memory growing a sequence; aborting the request");
        seq_emit(s, q, NULL, SCHED_FINISH_ABORT);
        return SCHED_FINISH_ABORT;
    }
    ASSERT(q->n_tokens < q->cap_tokens);
    sampler_accept(q->smp, r->token);
    q->tokens[q->n_tokens++] = r->token;
    q->n_generated++;
    s->st.generation_tokens++;

    enum sched_finish f = SCHED_FINISH_NONE;
    if (s->tok) {
        buf_reset(&s->piece);
        int rc = tokenizer_detok_push(&q->detok, r->token, &s->piece);
        if (rc == 0 && s->piece.len)
            rc = stop_matcher_feed(q->stop, s->piece.data, s->piece.len, &s->text);
        if (rc == 1)
            f = SCHED_FINISH_STOP;
        else if (rc < 0)
            log_warn("dropping generated text", LOG_S("err", err_str(rc)));
    }
    if (f == SCHED_FINISH_NONE && q->gm && grammar_matcher_finished(q->gm)) {
        f = SCHED_FINISH_STOP; /* the grammar is complete and nothing may follow */
        seq_flush_text(s, q);
    }
    bool windowed = q->window.mode != KV_WINDOW_NONE; /* bounded by eviction, not the context */
    if (f == SCHED_FINISH_NONE && ((q->max_tokens > 0 && q->n_generated >= q->max_tokens) ||
                                   (!windowed && q->n_tokens >= s->cfg.max_context) ||
                                   (windowed && q->n_generated >= SCHED_WINDOW_MAX_TOKENS))) {
        f = SCHED_FINISH_LENGTH;
        seq_flush_text(s, q);
    }
    seq_emit(s, q, r, f);
    return f;
}

/* ---------------------------------------------------------------- KV and prefix cache */

/* The backend's copy-on-write of a shared partial block (kv_slots_copy_fn). */
static int seq_copy_block(void *ctx, int32_t src, int32_t dst)
{
    return model_kv_copy_block(ctx, src, dst);
}

/* The offload tiers' block I/O over the model's K/V storage (kv_slots_block_*_fn). */
static int seq_read_block(void *ctx, int32_t block, void *dst, size_t bytes)
{
    return model_kv_block_read(ctx, block, dst, bytes);
}

static int seq_write_block(void *ctx, int32_t block, const void *src, size_t bytes)
{
    return model_kv_block_write(ctx, block, src, bytes);
}

/* Reserves `n` more slots for q (evicting cached blocks when the free list is short). ERR_AGAIN
 * when the pool cannot provide them. */
static int seq_reserve(struct sched *s, struct sched_seq *q, int n)
{
    return kv_slots_reserve(s->slots, q->kv_seq, n, seq_copy_block, s->m);
}

/* Sink-window (q->window): drops the blocks the policy names before q grows and keeps q->tokens
 * the mirror of q's cache, so that a token's index is still its position: the dropped tokens
 * leave the array (what follows them moves down, as their keys did) and n_tokens and n_computed
 * shrink by as many. No-op in mode none. An error leaves q unusable (the caller aborts it). */
static int seq_evict(struct sched *s, struct sched_seq *q)
{
    if (q->window.mode == KV_WINDOW_NONE || q->kv_seq < 0) return 0;
    ASSERT(kv_cache_seq_len(s->kv, q->kv_seq) == q->n_computed); /* no speculative slots */
    int ev = 0, rc = model_kv_window_evict(s->m, s->kv, q->kv_seq, &q->window, &ev);
    if (rc || ev == 0) return rc;
    int sink = kv_window_sink_blocks(&q->window, s->block_size) * s->block_size;
    memmove(q->tokens + sink, q->tokens + sink + ev,
            (size_t)(q->n_tokens - sink - ev) * sizeof(int32_t));
    q->n_tokens -= ev;
    q->n_computed -= ev;
    s->st.window_evicted += (uint64_t)ev;
    return 0;
}

/* The largest chunk q may run now: a sink-window sequence holds at most sink blocks + window +
 * block_size - 1 tokens after seq_evict, and must stay within max_context. */
static int seq_chunk_cap(const struct sched *s, const struct sched_seq *q, int chunk)
{
    if (q->window.mode == KV_WINDOW_NONE) return chunk;
    long room = (long)s->cfg.max_context - kv_window_max_tokens(&q->window, s->block_size, 0);
    return chunk > room ? (int)room : chunk;
}

/* Creates q's sampler and feeds it the prompt (the penalties' history). */
static int seq_make_sampler(struct sched *s, struct sched_seq *q)
{
    int rc = sampler_new(&q->sampling, s->n_vocab, &q->smp);
    if (rc) return rc;
    for (int i = 0; i < q->n_prompt; i++) sampler_accept(q->smp, q->tokens[i]);
    return 0;
}

/* Sends running sequence i back to the waiting queue, releasing its blocks. */
static void seq_preempt(struct sched *s, int i)
{
    struct sched_seq *q = s->running[i];
    running_remove_at(s, i);
    kv_slots_park(s->slots, q->kv_seq, &q->chain); /* its blocks wait in tier 2, if any */
    seq_release_kv(s, q);
    s->st.preemptions++;
    if (waiting_insert(s, q) != 0) {
        /* No memory to requeue it: end it rather than lose it silently. */
        log_error("cannot requeue a preempted request; aborting it");
        seq_finish(s, q, SCHED_FINISH_ABORT);
    }
}

/* ---------------------------------------------------------------- step */

static void add_entry(struct sched *s, int *n_entries, struct sched_seq *q, int chunk)
{
    int pos = q->n_computed;
    s->entries[*n_entries] = (struct model_batch_entry){
        .seq = q->kv_seq,
        .pos = pos,
        .n_tokens = chunk,
        .tokens = q->tokens + pos,
        .logits = seq_wants_prompt_logits(q)   ? MODEL_LOGITS_ALL
                  : pos + chunk == q->n_tokens ? MODEL_LOGITS_LAST
                                               : MODEL_LOGITS_NONE,
    };
    s->entry_seq[*n_entries] = q;
    q->chunk = chunk;
    (*n_entries)++;
}

static void process_cancellations(struct sched *s)
{
    for (int i = 0; i < s->n_waiting;) {
        struct sched_seq *q = s->waiting[i];
        if (!q->cancelled) {
            i++;
            continue;
        }
        waiting_remove_at(s, i);
        seq_finish(s, q, q->cancelled);
    }
    for (int i = 0; i < s->n_running;) {
        struct sched_seq *q = s->running[i];
        if (!q->cancelled) {
            i++;
            continue;
        }
        running_remove_at(s, i);
        seq_finish(s, q, q->cancelled);
    }
}

/* How many of q's `need` tokens fit in `budget` this step; 0 when none should run now. A chunk
 * whose every row of logits is wanted is bounded by lp_rows, chunked prefill or not. */
static int chunk_size(const struct sched *s, const struct sched_seq *q, int need, int budget,
                      int n_entries)
{
    if (seq_wants_prompt_logits(q) && need > s->lp_rows) need = s->lp_rows;
    if (need <= budget) return need;
    if (s->cfg.chunked_prefill) return budget;
    return n_entries == 0 ? need : 0; /* unchunked: the whole prompt, alone if it must */
}

static void schedule_running(struct sched *s, int *n_entries, int *budget)
{
    for (int i = 0; i<s->n_running && * budget> 0; i++) {
        struct sched_seq *q = s->running[i];
        if (seq_evict(s, q) != 0) {
            log_error("sink-window eviction failed; aborting the request");
            running_remove_at(s, i--);
            seq_finish(s, q, SCHED_FINISH_ABORT);
            continue;
        }
        int chunk =
            seq_chunk_cap(s, q, chunk_size(s, q, q->n_tokens - q->n_computed, *budget, *n_entries));
        if (chunk == 0) continue;
        bool preempted_self = false;
        while (seq_reserve(s, q, chunk) != 0) {
            /* Out of blocks: preempt the most recently admitted sequence, q itself if it is. */
            int victim = s->n_running - 1;
            bool self = victim == i;
            seq_preempt(s, victim);
            if (self) {
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) break;
        add_entry(s, n_entries, q, chunk);
        *budget -= chunk;
    }
}

/* Whether waiting q holds its admission for the read-ahead of its tier-3 blocks
 * (kv_slots_prefetch; a sequence that attaches no prefix never reads ahead). When it stops
 * waiting, the wait is counted. */
static bool seq_prefetching(struct sched *s, struct sched_seq *q)
{
    if (seq_wants_prompt_logits(q) || q->window.mode != KV_WINDOW_NONE) return false;
    if (kv_slots_prefetch(s->slots, q->tokens, q->n_tokens, q->chain.root, &q->fetch)) return true;
    if (q->fetch.id && !q->fetch.counted) {
        q->fetch.counted = true;
        s->st.prefetch_waits++;
        s->st.prefetch_wait_s += clock_mono_s() - q->fetch.started;
    }
    return false;
}

/* Admits waiting sequences in queue order while sequences, budget and blocks allow: the first one
 * the pool cannot take stops admission (head of line), except one waiting for its prefetch, which
 * is passed over meanwhile. */
static void schedule_waiting(struct sched *s, int *n_entries, int *budget)
{
    for (int i = 0; i < s->n_waiting && s->n_running < s->cfg.max_num_seqs && (*budget) > 0;) {
        struct sched_seq *q = s->waiting[i];
        if (seq_prefetching(s, q)) {
            i++;
            continue;
        }
        if (kv_cache_seq_open(s->kv, &q->kv_seq) != 0) {
            q->kv_seq = -1;
            return;
        }
        if (!q->smp && seq_make_sampler(s, q) != 0) {
            log_error("out of memory creating a sampler; aborting the request");
            seq_release_kv(s, q);
            waiting_remove_at(s, i);
            seq_finish(s, q, SCHED_FINISH_ABORT);
            continue;
        }
        /* Cached blocks come without logits: a sequence still reporting prompt logprobs
         * computes its whole prompt. */
        q->n_computed =
            seq_wants_prompt_logits(q) || q->window.mode != KV_WINDOW_NONE
                ? 0
                : kv_slots_attach_prefix(s->slots, q->kv_seq, q->tokens, q->n_tokens, &q->chain);
        /* What the prefetch staged is attached now (loaded blocks stay in the prefix cache even
         * if the sequence must wait for blocks below); the rest is freed. */
        kv_slots_prefetch_end(s->slots, &q->fetch);
        int chunk =
            seq_chunk_cap(s, q, chunk_size(s, q, q->n_tokens - q->n_computed, *budget, *n_entries));
        if (chunk == 0 || seq_reserve(s, q, chunk) != 0) {
            seq_release_kv(s, q); /* head-of-line: wait for blocks to come back */
            return;
        }
        waiting_remove_at(s, i);
        if (!q->ever_admitted) {
            q->ever_admitted = true;
            q->n_cached = q->n_computed;
            s->st.prompt_tokens += (uint64_t)q->n_prompt;
            if (kv_slots_prefix_caching(s->slots)) {
                s->st.prefix_queries += (uint64_t)q->n_prompt;
                s->st.prefix_hits += (uint64_t)q->n_cached;
                s->st.prefix_hits_host += (uint64_t)q->chain.n_loaded[0];
                s->st.prefix_hits_disk += (uint64_t)q->chain.n_loaded[1];
            }
            buf_reset(&s->text);
            seq_emit(s, q, NULL, SCHED_FINISH_NONE); /* "admitted": queue time ends */
        } else {
            s->st.resume_hits += (uint64_t)q->n_computed;
        }
        q->state = SEQ_RUNNING;
        s->running[s->n_running++] = q;
        add_entry(s, n_entries, q, chunk);
        *budget -= chunk;
    }
}

/* A step with nothing to run while a waiting sequence's prefetch is in flight: waits for it a
 * little (SCHED_PREFETCH_POLL_S, so the caller still looks at its inbox), rather than spin. */
static void wait_prefetch(struct sched *s)
{
    for (int i = 0; i < s->n_waiting; i++) {
        const struct kv_fetch *f = &s->waiting[i]->fetch;
        if (f->id && !f->measured) {
            kv_slots_prefetch_wait(s->slots, f, SCHED_PREFETCH_POLL_S);
            return;
        }
    }
}

/* Reports the prompt positions that entry `en` of q computed (row i of `rows`, the entry's logits,
 * predicts token pos + i + 1) and that were not reported before a preemption. */
static void report_prompt_logprobs(struct sched *s, struct sched_seq *q,
                                   const struct model_batch_entry *en, const float *rows)
{
    for (int i = 0; i < en->n_tokens; i++) {
        int next = en->pos + i + 1;
        if (next < q->lp_next) continue;
        if (next >= q->n_prompt) break;
        struct sampler_result r;
        if (sampler_logprobs(q->smp, rows + (size_t)i * (size_t)s->n_vocab, q->tokens[next], &r) !=
            0)
            r = (struct sampler_result){.token = q->tokens[next], .logprob = -INFINITY};
        seq_emit_prompt(s, q, next, &r);
        q->lp_next = next + 1;
    }
}

/* ---------------------------------------------------------------- speculative decoding */

/* Proposals q may make this step at most: K, and no more than it may still emit less one (the
 * target's own token after them), within max_context. */
static int spec_kmax(const struct sched *s, const struct sched_seq *q)
{
    int k = s->cfg.spec.num_tokens;
    if (q->max_tokens > 0 && q->max_tokens - q->n_generated - 1 < k)
        k = (int)(q->max_tokens - q->n_generated - 1);
    if (s->cfg.max_context - q->n_tokens - 1 < k) k = s->cfg.max_context - q->n_tokens - 1;
    return k;
}

/* Grows entry e of q to its last token plus the k proposals at q->tokens[n_tokens..), whose slots
 * are reserved, with logits for every row. */
static void spec_entry_grow(struct sched *s, int e, struct sched_seq *q, int k, int *budget)
{
    s->entries[e].n_tokens = 1 + k;
    s->entries[e].logits = MODEL_LOGITS_ALL;
    q->chunk = 1 + k;
    q->spec.k = k;
    *budget -= k;
}

/* Runs the draft for the step's jobs (their target slots reserved) and grows the entries of those
 * it proposed for; a job the draft's pool refused gives its target slots back. */
static bool spec_draft_step(struct sched *s, int n_jobs, int *budget)
{
    int refused = 0;
    int rc = spec_draft_run(s->draft, s->jobs, n_jobs, &s->st.spec, &refused);
    if (rc)
        log_warn("draft model step failed; decoding without its proposals",
                 LOG_S("err", err_str(rc)));
    s->st.spec.skipped[SPEC_SKIP_KV] += (uint64_t)refused;
    bool any = false;
    for (int i = 0; i < n_jobs; i++) {
        struct spec_draft_job *j = &s->jobs[i];
        int e = s->job_entry[i];
        struct sched_seq *q = s->entry_seq[e];
        if (j->k > 0) {
            spec_entry_grow(s, e, q, j->k, budget);
            any = true;
        } else if (s->entries[e].n_tokens == 1 && q->spec.k == 0 &&
                   kv_cache_seq_len(s->kv, q->kv_seq) > q->n_computed + 1) {
            int trc = kv_cache_seq_truncate(s->kv, q->kv_seq, q->n_computed + 1);
            ASSERT(trc == 0); /* reserved just now: private */
            (void)trc;
        }
    }
    return any;
}

/* Turns the step's decode entries into speculative ones: each decoding sequence's proposals
 * (n-gram: found in its tokens; draft: made by the draft model after the plan) are written after
 * its last token (q->tokens[n_tokens..)), the controller picks how many each keeps, their slots
 * are reserved (never by preempting: a sequence that gets none just decodes) and the entry grows
 * to last token + k proposals with logits for every row. */
static void schedule_spec(struct sched *s, int n_entries, int *budget)
{
    const struct spec_config *sc = &s->cfg.spec;
    if (sc->method == SPEC_METHOD_NONE) return;
    bool draft = sc->method == SPEC_METHOD_DRAFT;
    int n = 0, n_decodes = 0;
    float prior = spec_accept_estimate(&s->acc, 0.5f);
    for (int e = 0; e < n_entries; e++) {
        struct sched_seq *q = s->entry_seq[e];
        q->spec.k = 0;
        if (s->entries[e].logits == MODEL_LOGITS_LAST) n_decodes++;
        if (q->chunk != 1 || q->n_computed + 1 != q->n_tokens) continue; /* a prefill chunk */
        /* proposals are verified against unmasked logits: no speculation under a grammar (a lazy
         * one's free text is unconstrained: spec_verify_entry masks the rows after its trigger) */
        if (q->gm && grammar_matcher_active(q->gm)) continue;
        if (q->window.mode != KV_WINDOW_NONE) continue; /* a rollback would cross an eviction */
        int kmax = spec_kmax(s, q);
        if (kmax <= 0 || seq_grow(s, q, q->n_tokens + kmax + 1) != 0) continue;
        s->entries[e].tokens = q->tokens + q->n_computed; /* seq_grow may have moved them */
        int found = kmax, catchup = 0;
        if (draft) {
            /* the plan costs the steady catch-up (at most the bonus token and the last); a
             * longer lag (the prompt, after a prefix hit or a preemption) is a one-off prefill */
            int lag = q->n_tokens - (q->spec.d_open ? q->spec.d_computed : 0);
            catchup = lag < 2 ? lag : 2;
        } else {
            found = spec_ngram_propose(q->tokens, q->n_tokens, sc->ngram_min, sc->ngram_max, kmax,
                                       q->tokens + q->n_tokens);
            if (found == 0 && s->pool &&
                (found = spec_pool_propose(s->pool, q->tokens, q->n_tokens, kmax,
                                           q->tokens + q->n_tokens)) > 0) {
                s->st.spec.pool_hits++;
                s->st.spec.pool_tokens += (uint64_t)found;
            }
            if (found == 0) {
                s->st.spec.skipped[SPEC_SKIP_NO_PROPOSAL]++;
                continue;
            }
        }
        s->cands[n] = (struct spec_cand){
            .accept = spec_accept_estimate(&q->spec.acc, prior),
            .kmax = found,
            .catchup = catchup,
        };
        s->cand_entry[n++] = e;
    }
    if (n == 0) return;
    struct spec_plan_in in = {
        .base_tokens = s->cfg.max_num_batched_tokens - *budget,
        .n_decodes = n_decodes,
        .budget = *budget,
        .target = &s->cost,
        .draft = draft ? spec_draft_cost(s->draft) : NULL,
        .adaptive = sc->adaptive,
    };
    spec_ctl_plan(&in, s->cands, n, s->plan_scratch);
    bool any = false;
    int n_jobs = 0;
    /* a draft's catch-up per step: SPEC_DRAFT_CHUNK, and no more than the target's step budget */
    int chunk = s->cfg.max_num_batched_tokens < SPEC_DRAFT_CHUNK ? s->cfg.max_num_batched_tokens
                                                                 : SPEC_DRAFT_CHUNK;
    for (int c = 0; c < n; c++) {
        int e = s->cand_entry[c], k = s->cands[c].k;
        struct sched_seq *q = s->entry_seq[e];
        if (k == 0) {
            /* not worth it now: let old evidence fade so the sequence is tried again later */
            spec_accept_decay(&q->spec.acc);
            s->st.spec.skipped[*budget > 0 ? SPEC_SKIP_COST : SPEC_SKIP_BUDGET]++;
            continue;
        }
        int lag = draft ? q->n_tokens - (q->spec.d_open ? q->spec.d_computed : 0) : 0;
        if (lag > chunk) {
            /* the draft lags by more than a chunk: this step only brings it closer */
            s->jobs[n_jobs] =
                (struct spec_draft_job){&q->spec, &q->sampling, q->tokens, q->n_tokens, chunk, 0};
            s->job_entry[n_jobs++] = e;
            s->st.spec.skipped[SPEC_SKIP_CATCHUP]++;
            continue;
        }
        if (seq_reserve(s, q, k) != 0) {
            s->st.spec.skipped[SPEC_SKIP_KV]++;
            continue;
        }
        if (draft) {
            s->jobs[n_jobs] =
                (struct spec_draft_job){&q->spec, &q->sampling, q->tokens, q->n_tokens, lag, k};
            s->job_entry[n_jobs++] = e;
            continue;
        }
        spec_entry_grow(s, e, q, k, budget);
        any = true;
    }
    if (n_jobs > 0 && spec_draft_step(s, n_jobs, budget)) any = true;
    if (!any) spec_accept_decay(&s->acc);
}

static int seq_constrain(struct sched *s, struct sched_seq *q, const float **lrow);
static int seq_grammar_accept(struct sched *s, struct sched_seq *q, const float *lrow,
                              struct sampler_result *r);

/* Row i of a lazy sequence's speculative entry: the rejection rule while its output is free text
 * (and the token taken by its matcher: one it refuses is resampled, which ends the run); once the
 * trigger fired at an earlier row, a draw from the row masked by the grammar, which ends the run
 * as a rejection does (the proposals were made without the grammar). The outcome as
 * spec_verify_row's, or a negative error. */
static int spec_verify_lazy_row(struct sched *s, struct sched_seq *q, const float *row,
                                int32_t proposal, const float *qrow, struct sampler_result *r)
{
    int rc;
    if (grammar_matcher_active(q->gm)) {
        if ((rc = seq_constrain(s, q, &row)) != 0 || (rc = sampler_sample(q->smp, row, r)) != 0)
            return rc;
        rc = seq_grammar_accept(s, q, row, r);
        return rc ? rc : proposal < 0 ? SPEC_BONUS : SPEC_CORRECTED;
    }
    int out = spec_verify_row(q->smp, row, proposal, qrow, s->vscratch, r);
    if (out < 0) return out;
    int32_t drawn = r->token;
    if ((rc = seq_grammar_accept(s, q, row, r)) != 0) return rc;
    if (r->token != drawn && out == SPEC_ACCEPTED) out = SPEC_CORRECTED;
    return out;
}

/* Verifies q's speculative entry, whose 1 + k logits rows start at `logits`: emits the accepted
 * proposals and the target's own next token, then cuts the K/V back to the verified tokens and
 * offers their full blocks to the prefix cache. Returns the finish reason (NONE: still running). */
static enum sched_finish spec_verify_entry(struct sched *s, struct sched_seq *q,
                                           const float *logits)
{
    int k = q->spec.k, base = q->n_tokens, a = 0;
    enum sched_finish f = SCHED_FINISH_NONE;
    /* a sampled draft proposal comes with the distribution q it was drawn from */
    bool with_q = s->cfg.spec.method == SPEC_METHOD_DRAFT && q->sampling.temperature > 0.0f;
    q->spec.k = 0;
    q->spec.n_proposed += k;
    s->st.spec.drafts++;
    s->st.spec.draft_tokens += (uint64_t)k;
    for (int i = 0; i <= k && f == SCHED_FINISH_NONE; i++) {
        /* proposal i sits at q->tokens[base + i] = q->tokens[q->n_tokens] until accepted */
        int32_t proposal = i < k ? q->tokens[base + i] : -1;
        struct sampler_result r;
        const float *qrow = with_q && i < k ? q->spec.q + (size_t)i * (size_t)s->n_vocab : NULL;
        const float *row = logits + (size_t)i * (size_t)s->n_vocab;
        int out = q->gm ? spec_verify_lazy_row(s, q, row, proposal, qrow, &r)
                        : spec_verify_row(q->smp, row, proposal, qrow, s->vscratch, &r);
        if (out < 0) {
            log_warn("no token to sample; aborting the request", LOG_S("err", err_str(out)));
            seq_emit(s, q, NULL, SCHED_FINISH_ABORT);
            f = SCHED_FINISH_ABORT;
            break;
        }
        if (out == SPEC_ACCEPTED) {
            a++;
            q->spec.n_accepted++;
            s->st.spec.accepted++;
            s->st.spec.accepted_per_pos[i]++;
        }
        f = seq_accept(s, q, &r);
        if (out != SPEC_ACCEPTED) break;
    }
    spec_accept_update(&q->spec.acc, k, a);
    spec_accept_update(&s->acc, k, a);
    if (f != SCHED_FINISH_NONE) return f; /* the caller closes its K/V, the draft's too */
    if (s->draft) {
        struct spec_draft_job j = {.ss = &q->spec, .n = base, .k = k};
        spec_draft_commit(s->draft, &j, a);
    }
    q->n_computed += a; /* the last token's row was counted by the caller */
    int rc = kv_cache_seq_truncate(s->kv, q->kv_seq, q->n_computed);
    ASSERT(rc == 0); /* the cut blocks were reserved by this step: private */
    kv_slots_publish(s->slots, q->kv_seq, q->tokens, q->n_computed, &q->chain);
    return SCHED_FINISH_NONE;
}

/* ---------------------------------------------------------------- the mask worker */

static void *gworker_main(void *arg)
{
    struct sched_gworker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && w->done == w->gen) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        int n = w->n_jobs;
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < n; i++) {
            struct sched_seq *q = w->jobs[i];
            q->pmask_rc = grammar_matcher_mask(q->gm, w->arena, q->pmask);
            q->pmask_ok = true;
        }
        pthread_mutex_lock(&w->mu);
        w->done = w->gen;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void gworker_free(struct sched_gworker *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    grammar_arena_free(w->arena);
    free(w->jobs);
    free(w);
}

/* The worker, started at the first grammar; NULL when it cannot be (masks then follow the forward
 * pass, as they would without it). */
static struct sched_gworker *gworker_new(int max_seqs)
{
    struct sched_gworker *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->arena = grammar_arena_new();
    w->jobs = calloc((size_t)max_seqs, sizeof(*w->jobs));
    if (!w->arena || !w->jobs) goto fail;
    if (pthread_mutex_init(&w->mu, NULL)) goto fail;
    if (pthread_cond_init(&w->cv, NULL)) {
        pthread_mutex_destroy(&w->mu);
        goto fail;
    }
    if (pthread_create(&w->th, NULL, gworker_main, w)) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        goto fail;
    }
    return w;
fail:
    grammar_arena_free(w->arena);
    free(w->jobs);
    free(w);
    return NULL;
}

/* Hands the worker the masks of this step's entries that will be sampled under a grammar. */
static void gworker_start(struct sched *s, int n_entries)
{
    struct sched_gworker *w = s->gw;
    if (!w) return;
    int n = 0;
    for (int e = 0; e < n_entries; e++) {
        struct sched_seq *q = s->entry_seq[e];
        q->pmask_ok = false;
        if (q->gm && grammar_matcher_active(q->gm) && q->pmask && q->spec.k == 0 &&
            q->max_tokens != 0 && s->entries[e].logits != MODEL_LOGITS_NONE &&
            q->n_computed + q->chunk >= q->n_tokens)
            w->jobs[n++] = q;
    }
    if (!n) return;
    pthread_mutex_lock(&w->mu);
    w->n_jobs = n;
    w->gen++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Waits until the worker has finished the jobs it was handed. */
static void gworker_wait(struct sched *s)
{
    struct sched_gworker *w = s->gw;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    while (w->done != w->gen) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/* Points *lrow at a copy of the row with every token outside q's grammar mask at -inf (the mask the
 * worker computed during the forward pass, or one computed now). 0, or ERR_INVAL (no token can
 * continue), ERR_NOMEM / ERR_TOO_BIG from the matcher. */
static int seq_constrain(struct sched *s, struct sched_seq *q, const float **lrow)
{
    const uint32_t *mask = s->gmask;
    int n;
    if (q->pmask_ok) {
        mask = q->pmask;
        n = q->pmask_rc;
        q->pmask_ok = false;
    } else {
        n = grammar_matcher_mask(q->gm, s->garena, s->gmask);
    }
    if (n <= 0) return n < 0 ? n : ERR_INVAL;
    const float *in = *lrow;
    for (int32_t t = 0; t < s->n_vocab; t++)
        s->glogits[t] = t < q->gm_vocab && ((mask[t >> 5] >> (t & 31)) & 1) ? in[t] : -INFINITY;
    *lrow = s->glogits;
    return 0;
}

/* Advances q's matcher by the token sampled into *r from `lrow`. A lazy matcher still in its free
 * text refuses only a token that fires its trigger with bytes after it that the call's grammar
 * refuses: that token is then masked out of a copy of the row and another one sampled, until one
 * is taken (the free text's mask is every token but those, applied only when one is drawn). 0, or
 * the matcher's error (ERR_INVAL from an active matcher: it refused a token of its own mask), or
 * ERR_INVAL when no token is left to sample. */
static int seq_grammar_accept(struct sched *s, struct sched_seq *q, const float *lrow,
                              struct sampler_result *r)
{
    bool free_text = !grammar_matcher_active(q->gm);
    int rc;
    while ((rc = grammar_matcher_accept(q->gm, s->garena, r->token)) == ERR_INVAL && free_text) {
        if (lrow != s->glogits) {
            memcpy(s->glogits, lrow, (size_t)s->n_vocab * sizeof(float));
            lrow = s->glogits;
        }
        s->glogits[r->token] = -INFINITY;
        if ((rc = sampler_sample(q->smp, s->glogits, r)) != 0) return rc;
    }
    return rc;
}

/* Ends every sequence of a failed step: its K/V may be half written. */
static void abort_step(struct sched *s, int n_entries)
{
    for (int e = 0; e < n_entries; e++) {
        struct sched_seq *q = s->entry_seq[e];
        running_remove(s, q);
        seq_finish(s, q, SCHED_FINISH_ABORT);
    }
}

int sched_step(struct sched *s)
{
    process_cancellations(s);
    int n_entries = 0, budget = s->cfg.max_num_batched_tokens;
    if (s->cfg.chunked_prefill) {
        /* Decodes first, then prompt chunks into what is left: decodes never stall. */
        schedule_running(s, &n_entries, &budget);
        schedule_spec(s, n_entries, &budget);
        schedule_waiting(s, &n_entries, &budget);
    } else {
        /* Whole prompts first (vLLM without chunked prefill): a step that prefills runs no
         * decodes, or long prompts would wait behind decodes for ever. */
        schedule_waiting(s, &n_entries, &budget);
        if (n_entries == 0) {
            schedule_running(s, &n_entries, &budget);
            schedule_spec(s, n_entries, &budget);
        }
    }
    if (n_entries == 0) {
        wait_prefetch(s);
        return 0;
    }

    const float *logits = NULL;
    int n_rows = 0;
    int step_tokens = 0;
    for (int e = 0; e < n_entries; e++) step_tokens += s->entries[e].n_tokens;
    double t0 = clock_mono_s();
    gworker_start(s, n_entries);
    int rc = model_forward(s->m, s->kv, s->entries, n_entries, &logits, &n_rows);
    gworker_wait(s);
    if (s->cfg.spec.method != SPEC_METHOD_NONE && !rc)
        spec_cost_observe(&s->cost, s->cfg.max_num_batched_tokens - budget, clock_mono_s() - t0);
    s->st.steps++;
    if (rc == 0 && step_tokens >= 2 * s->block_size) {
        /* A prefill-sized step: what recomputing a token costs, for the tier-3 cost model. */
        double per = (clock_mono_s() - t0) / step_tokens;
        s->prefill_s_per_token = s->prefill_s_per_token > 0
                                     ? s->prefill_s_per_token + 0.2 * (per - s->prefill_s_per_token)
                                     : per;
        kv_slots_set_prefill_cost(s->slots, s->prefill_s_per_token);
    }
    if (rc) {
        log_error("forward step failed; aborting its requests", LOG_S("err", err_str(rc)),
                  LOG_I("sequences", n_entries));
        abort_step(s, n_entries);
        return rc;
    }
    int row = 0;
    for (int e = 0; e < n_entries; e++) {
        struct sched_seq *q = s->entry_seq[e];
        const struct model_batch_entry *en = &s->entries[e];
        if (q->spec.k > 0) {
            ASSERT(row + q->chunk <= n_rows);
            const float *rows = logits + (size_t)row * (size_t)s->n_vocab;
            row += q->chunk;
            q->n_computed += 1; /* the last token; verification adds the accepted proposals */
            q->chunk = 0;
            if (spec_verify_entry(s, q, rows) != SCHED_FINISH_NONE) {
                running_remove(s, q);
                seq_destroy(s, q);
            }
            continue;
        }
        q->n_computed += q->chunk;
        q->chunk = 0;
        if (q->window.mode == KV_WINDOW_NONE) /* see sched_request.window */
            kv_slots_publish(s->slots, q->kv_seq, q->tokens, q->n_computed, &q->chain);
        if (en->logits == MODEL_LOGITS_NONE) continue;
        if (en->logits == MODEL_LOGITS_ALL) {
            ASSERT(row + en->n_tokens <= n_rows);
            report_prompt_logprobs(s, q, en, logits + (size_t)row * (size_t)s->n_vocab);
            row += en->n_tokens - 1; /* the entry's last row: its next token's, as LAST gives */
        }
        ASSERT(row < n_rows);
        const float *lrow = logits + (size_t)row * (size_t)s->n_vocab;
        row++;
        if (q->n_computed < q->n_tokens) continue; /* a prompt chunk that is not the last */
        struct sampler_result r;
        if (q->max_tokens == 0) { /* prefill only (echo): nothing is generated */
            running_remove(s, q);
            seq_finish(s, q, SCHED_FINISH_LENGTH);
            continue;
        }
        if (q->gm && grammar_matcher_active(q->gm) && (rc = seq_constrain(s, q, &lrow)) != 0) {
            log_warn(
                "constrained decoding failed; aborting the request",
                LOG_S("err", rc == ERR_INVAL ? "no token continues the grammar" : err_str(rc)));
            running_remove(s, q);
            seq_finish(s, q, SCHED_FINISH_ABORT);
            continue;
        }
        if (sampler_sample(q->smp, lrow, &r) != 0) {
            log_warn("no finite logit to sample from; aborting the request");
            running_remove(s, q);
            seq_finish(s, q, SCHED_FINISH_ABORT);
            continue;
        }
        if (q->gm && (rc = seq_grammar_accept(s, q, lrow, &r)) != 0) {
            log_error("the grammar refused a token of its own mask; aborting the request",
                      LOG_S("err", err_str(rc)), LOG_I("token", r.token));
            running_remove(s, q);
            seq_finish(s, q, SCHED_FINISH_ABORT);
            continue;
        }
        if (seq_accept(s, q, &r) != SCHED_FINISH_NONE) {
            running_remove(s, q);
            seq_destroy(s, q);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- lifecycle */

void sched_set_block_observer(struct sched *s, prefix_cache_observer_fn fn, void *ctx)
{
    kv_slots_set_observer(s->slots, fn, ctx);
}

/* Speculation's buffers, and the step-cost model calibrated on the still empty pool. */
static int sched_spec_init(struct sched *s)
{
    size_t n = (size_t)s->cfg.max_num_seqs;
    s->cands = calloc(n, sizeof(*s->cands));
    s->cand_entry = calloc(n, sizeof(*s->cand_entry));
    s->plan_scratch = malloc(SPEC_CTL_SCRATCH_BYTES(n));
    s->vscratch = malloc((size_t)s->n_vocab * sizeof(float));
    if (!s->cands || !s->cand_entry || !s->plan_scratch || !s->vscratch) return ERR_NOMEM;
    spec_cost_init(&s->cost);
    int rc;
    if (s->cfg.spec.method == SPEC_METHOD_NGRAM && s->cfg.spec.ngram_pool_bytes > 0 &&
        (rc = spec_pool_new(s->cfg.spec.ngram_pool_bytes, s->cfg.spec.ngram_min,
                            s->cfg.spec.ngram_max, &s->pool)))
        return rc;
    if (s->cfg.spec.method == SPEC_METHOD_DRAFT) {
        s->jobs = calloc(n, sizeof(*s->jobs));
        s->job_entry = calloc(n, sizeof(*s->job_entry));
        if (!s->jobs || !s->job_entry) return ERR_NOMEM;
        if ((rc = spec_draft_new(s->cfg.draft, s->cfg.draft_kv, s->cfg.max_num_seqs, &s->draft)))
            return rc;
    }
    if (!s->cfg.spec.adaptive) return 0;
    int max = s->cfg.max_num_batched_tokens < 64 ? s->cfg.max_num_batched_tokens : 64;
    double t0 = clock_mono_s();
    if (s->draft) {
        /* the draft's steps: depth rounds of one token per sequence, and catch-ups */
        rc = spec_cost_calibrate(spec_draft_cost(s->draft), s->cfg.draft, s->cfg.draft_kv, max);
        if (rc == ERR_AGAIN) {
            log_warn("speculation: draft KV pool too small to calibrate the draft's step cost");
            spec_cost_init(spec_draft_cost(s->draft));
        } else if (rc) {
            return rc;
        }
        /* while k is 0 the draft is not timed: its estimate follows the target's */
        spec_cost_link(spec_draft_cost(s->draft), &s->cost);
    }
    rc = spec_cost_calibrate(&s->cost, s->m, s->kv, max);
    if (rc == ERR_AGAIN) {
        /* no room to time steps: the cost is learned from the first real steps instead */
        log_warn("speculation: KV pool too small to calibrate the step cost");
        spec_cost_init(&s->cost);
        return 0;
    }
    if (rc) return rc;
    log_info("speculation: step cost calibrated",
             LOG_F("t1_ms", spec_cost_estimate(&s->cost, 1) * 1e3),
             LOG_F("t8_ms", spec_cost_estimate(&s->cost, 8) * 1e3),
             LOG_F("draft_t1_ms",
                   s->draft ? spec_cost_estimate(spec_draft_cost(s->draft), 1) * 1e3 : 0.0),
             LOG_F("calib_s", clock_mono_s() - t0));
    return 0;
}

int sched_new(const struct sched_config *cfg, struct model *m, struct kv_cache *kv,
              const struct tokenizer *tok, sched_emit_fn emit, void *emit_ctx, struct sched **out)
{
    int bs = kv_cache_block_size(kv);
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_context < 2 ||
        cfg->max_context > kv_cache_max_blocks_per_seq(kv) * bs ||
        cfg->max_num_seqs > kv_cache_max_seqs(kv) || !emit || !spec_config_valid(&cfg->spec))
        return ERR_INVAL;
    if (cfg->spec.method == SPEC_METHOD_DRAFT &&
        (!cfg->draft || !cfg->draft_kv ||
         model_hparams(cfg->draft)->n_vocab != model_hparams(m)->n_vocab ||
         cfg->max_num_seqs > kv_cache_max_seqs(cfg->draft_kv) ||
         cfg->max_context >
             kv_cache_max_blocks_per_seq(cfg->draft_kv) * kv_cache_block_size(cfg->draft_kv)))
        return ERR_INVAL;
    struct sched *s = calloc(1, sizeof(*s));
    if (!s) return ERR_NOMEM;
    s->cfg = *cfg;
    s->m = m;
    s->kv = kv;
    s->tok = tok;
    s->emit = emit;
    s->emit_ctx = emit_ctx;
    s->n_vocab = model_hparams(m)->n_vocab;
    s->block_size = bs;
    size_t row_bytes = (size_t)s->n_vocab * sizeof(float);
    s->lp_rows =
        row_bytes < SCHED_PROMPT_LOGITS_BYTES ? (int)(SCHED_PROMPT_LOGITS_BYTES / row_bytes) : 1;
    uint32_t eos = 0;
    s->eos =
        gguf_get_u32(model_gguf(m), "tokenizer.ggml.eos_token_id", &eos) == 0 ? (int32_t)eos : -1;
    buf_init(&s->piece, SCHED_TEXT_MAX);
    buf_init(&s->text, SCHED_TEXT_MAX);
    int rc = ERR_NOMEM;
    s->running = calloc((size_t)cfg->max_num_seqs, sizeof(*s->running));
    s->entries = calloc((size_t)cfg->max_num_seqs, sizeof(*s->entries));
    s->entry_seq = calloc((size_t)cfg->max_num_seqs, sizeof(*s->entry_seq));
    if (!s->running || !s->entries || !s->entry_seq) goto fail;
    if ((rc = kv_slots_new(kv, cfg->prefix_caching, &s->slots)) != 0) goto fail;
    if (cfg->spec.method != SPEC_METHOD_NONE && (rc = sched_spec_init(s)) != 0) goto fail;
    if (cfg->offload) {
        rc = ERR_INVAL;
        if (!cfg->prefix_caching ||
            kv_offload_payload_bytes(cfg->offload) != model_kv_block_bytes(m) ||
            cfg->offload_gate < KV_SLOTS_GATE_PROMPT || cfg->offload_gate > KV_SLOTS_GATE_ALL)
            goto fail;
        struct kv_slots_offload so = {cfg->offload, (enum kv_slots_gate)cfg->offload_gate,
                                      seq_read_block, seq_write_block, m};
        if ((rc = kv_slots_set_offload(s->slots, &so)) != 0) goto fail;
    }
    *out = s;
    return 0;
fail:
    sched_free(s);
    return rc;
}

void sched_free(struct sched *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_waiting; i++) {
        kv_slots_prefetch_end(s->slots, &s->waiting[i]->fetch);
        seq_free(s->waiting[i]);
    }
    for (int i = 0; i < s->n_running; i++) seq_destroy(s, s->running[i]);
    spec_draft_free(s->draft);
    spec_pool_free(s->pool);
    free(s->jobs);
    free(s->job_entry);
    free(s->vscratch);
    kv_slots_free(s->slots);
    free(s->waiting);
    free(s->running);
    free(s->entries);
    free(s->entry_seq);
    free(s->cands);
    free(s->cand_entry);
    free(s->plan_scratch);
    buf_fini(&s->piece);
    buf_fini(&s->text);
    gworker_free(s->gw);
    grammar_arena_free(s->garena);
    free(s->gmask);
    free(s->glogits);
    free(s);
}

/* Makes q's matcher (and the scheduler's constrained-decoding scratch, the first time). */
static int seq_make_matcher(struct sched *s, struct sched_seq *q, struct grammar *g,
                            const struct grammar_lazy *lazy)
{
    q->gm_vocab = grammar_n_vocab(g);
    if (q->gm_vocab > s->n_vocab) return ERR_INVAL;
    if (!s->garena) {
        s->garena = grammar_arena_new();
        s->gmask = calloc(((size_t)s->n_vocab + 31) / 32, sizeof(*s->gmask));
        s->glogits = calloc((size_t)s->n_vocab, sizeof(*s->glogits));
        if (!s->garena || !s->gmask || !s->glogits) {
            grammar_arena_free(s->garena);
            free(s->gmask);
            free(s->glogits);
            s->garena = NULL, s->gmask = NULL, s->glogits = NULL;
            return ERR_NOMEM;
        }
        if (!s->cfg.grammar_inline_masks) s->gw = gworker_new(s->cfg.max_num_seqs);
    }
    if (s->gw && !(q->pmask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof(*q->pmask))))
        return ERR_NOMEM;
    return lazy->n > 0 ? grammar_matcher_new_lazy(g, s->garena, lazy, &q->gm)
                       : grammar_matcher_new(g, s->garena, &q->gm);
}

int sched_add(struct sched *s, const struct sched_request *r, struct sched_seq **out)
{
    bool windowed = r->window.mode != KV_WINDOW_NONE;
    int max_prompt = windowed ? SCHED_WINDOW_MAX_TOKENS : s->cfg.max_context - 1;
    if (!r->prompt || r->n_prompt < 1 || r->n_prompt > max_prompt || r->max_tokens < -1 ||
        r->n_stops > STOP_MATCHER_MAX)
        return ERR_INVAL;
    if (windowed) {
        char err[256];
        if (r->prompt_logprobs || kv_window_check(&r->window, s->block_size, s->cfg.max_context, 1,
                                                  err, sizeof(err)) != 0)
            return ERR_INVAL;
        if (!model_kv_shift_supported(s->m)) return ERR_UNSUPPORTED;
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab) return ERR_INVAL;
    struct sched_seq *q = calloc(1, sizeof(*q));
    if (!q) return ERR_NOMEM;
    q->window = r->window;
    /* Room for the prompt and a first stretch of output; seq_grow adds more as it comes, so a
     * queued request costs its prompt, not its whole possible context. */
    int rc = seq_grow(s, q, r->n_prompt + SCHED_TOKENS_INITIAL);
    if (rc) goto fail;
    memcpy(q->tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    q->n_tokens = q->n_prompt = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->ignore_eos = r->ignore_eos;
    q->prompt_logprobs = r->prompt_logprobs;
    q->lp_next = 1;
    q->priority = r->priority;
    q->ud = r->ud;
    q->kv_seq = -1;
    q->chain.n_prompt = r->n_prompt;
    q->chain.root = prefix_cache_root(r->cache_salt, r->cache_salt ? strlen(r->cache_salt) : 0);
    /* The sampler itself waits for admission: a long waiting queue must not hold a vocabulary-
     * sized scratch per request. */
    if (!sampler_params_valid(&r->sampling)) {
        rc = ERR_INVAL;
        goto fail;
    }
    q->sampling = r->sampling;
    if ((rc = stop_matcher_new(r->stops, r->n_stops, &q->stop)) != 0) goto fail;
    if (r->grammar && (rc = seq_make_matcher(s, q, r->grammar, &r->lazy)) != 0) goto fail;
    if (s->tok) tokenizer_detok_init(&q->detok, s->tok, false);
    q->arrival = s->next_arrival++;
    if ((rc = waiting_insert(s, q)) != 0) goto fail;
    *out = q;
    return 0;
fail:
    seq_free(q);
    return rc;
}

void sched_cancel(struct sched *s, struct sched_seq *seq, enum sched_finish reason)
{
    (void)s;
    ASSERT(reason != SCHED_FINISH_NONE);
    if (seq->cancelled == SCHED_FINISH_NONE) seq->cancelled = reason;
}

bool sched_idle(const struct sched *s)
{
    return s->n_waiting == 0 && s->n_running == 0;
}

void sched_stop_all(struct sched *s, enum sched_finish reason)
{
    while (s->n_running > 0) {
        struct sched_seq *q = s->running[s->n_running - 1];
        s->n_running--;
        seq_finish(s, q, reason);
    }
    while (s->n_waiting > 0) {
        struct sched_seq *q = s->waiting[s->n_waiting - 1];
        s->n_waiting--;
        seq_finish(s, q, reason);
    }
}

void sched_stats(const struct sched *s, struct sched_stats *out)
{
    *out = s->st;
    out->running = s->n_running;
    out->waiting = s->n_waiting;
    /* O(waiting + running) per call: an autoscaler's leading signal, worth far less than a step. A
     * running sequence with one token left to compute is decoding, not prefilling. */
    long pending = 0;
    for (int i = 0; i < s->n_waiting; i++)
        pending += s->waiting[i]->n_tokens - s->waiting[i]->n_computed;
    for (int i = 0; i < s->n_running; i++) {
        const struct sched_seq *q = s->running[i];
        if (q->n_computed + 1 < q->n_tokens) pending += q->n_tokens - q->n_computed;
    }
    out->prefill_tokens_waiting = pending;
    out->kv_usage = kv_slots_usage(s->slots);
}
