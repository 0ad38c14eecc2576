/* Speculative decoding inside the continuous batch (issue 17). A decoding sequence's step entry
 * becomes its last token plus k proposed tokens; the batched forward returns logits for all k+1
 * positions, the proposals the target model agrees with are emitted together with the target's own
 * next token, and the K/V of the rejected positions is rolled back. Decode reads every weight once
 * per step, so when the step is bound by those reads k extra tokens cost little and each accepted
 * proposal is a token for free; when it is not (large batches, a CPU's matmuls), the controller
 * proposes less, down to nothing.
 *
 * Parts (one file each; the scheduler, engine/sched/scheduler.c, calls them):
 *  - spec_ngram.c: prompt lookup, proposals copied from where the sequence's latest tokens occurred
 *    before in its own prompt and output;
 *  - spec_pool.c: the cross-request n-gram pool, hashed n-grams of finished sequences' tokens in
 *    bounded memory, consulted when a sequence's own tokens hold no match;
 *  - spec_draft.c: a draft model (a second, smaller GGUF with the target's vocabulary) with one
 *    paged KV pool of its own shared by every sequence, drafting for all speculating sequences in
 *    batched steps, one per proposal depth;
 *  - spec_verify.c: the verification, exact: greedy token for token, sampling by the rejection rule;
 *  - spec_ctl.c: how many proposals each sequence makes in each step, from its measured acceptance
 *    and a model of step time against tokens learned while serving (pure code: the autoscaler's
 *    simulator plans with it too);
 *  - spec_calibrate.c: that model's start-up calibration (timed forward passes).
 * With method NONE none of it runs: the scheduler's step is the plain one.
 *
 * Not thread-safe: everything here belongs to the inference thread. */
#ifndef CINFER_ENGINE_SPEC_H
#define CINFER_ENGINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct kv_cache;
struct sampler;
struct sampler_result;

#define SPEC_MAX_TOKENS 16 /* proposals per sequence per step at most (--num-speculative-tokens) */
/* Draft: tokens a sequence's draft K/V catches up in one step at most (after a prefix-cache hit
 * or a preemption it may lack a whole prompt); a longer lag is computed over several steps. */
#define SPEC_DRAFT_CHUNK 256

enum spec_method {
    SPEC_METHOD_NONE = 0,
    SPEC_METHOD_NGRAM, /* prompt lookup: no second model */
    SPEC_METHOD_DRAFT, /* a draft model's autoregressive proposals (spec_draft.c) */
};
#define SPEC_METHOD_NAMES "none|ngram|draft"

/* "none", "ngram", "draft" <-> the enum; false for any other name. */
bool spec_method_parse(const char *name, enum spec_method *out);
const char *spec_method_name(enum spec_method m);

/* Why a decoding sequence proposed nothing in a step (cinfer_spec_decode_skipped_total{reason}). */
enum spec_skip {
    SPEC_SKIP_NO_PROPOSAL = 0, /* n-gram: its latest tokens occur nowhere earlier */
    SPEC_SKIP_COST,            /* the controller found no proposal worth its cost in this step */
    SPEC_SKIP_KV,              /* no free KV blocks for the extra positions */
    SPEC_SKIP_BUDGET,          /* the step's token budget was spent by other work */
    SPEC_SKIP_CATCHUP,         /* draft: its K/V lags by more than a chunk; this step catches up */
    SPEC_SKIP_COUNT
};
/* "no_proposal", "cost", "kv_full", "budget", "draft_catchup". */
const char *spec_skip_name(enum spec_skip why);

/* The scheduler's speculation settings (struct sched_config.spec). */
struct spec_config {
    enum spec_method method;
    int num_tokens;           /* K: 1..SPEC_MAX_TOKENS proposals per sequence per step at most */
    int ngram_min, ngram_max; /* n-gram: match lengths tried, 1 <= min <= max <= 64 */
    /* true: k per sequence and step from acceptance and step cost (spec_ctl.c), down to 0;
     * false: always min(K, what the limits allow) (tests, benchmarks of a fixed k) */
    bool adaptive;
    /* n-gram: bytes of the cross-request n-gram pool (spec_pool.c), consulted when a sequence's
     * own tokens hold no match; 0 = none */
    uint64_t ngram_pool_bytes;
};

/* NONE, K 5, n-gram 2..5, adaptive, no n-gram pool. */
void spec_config_default(struct spec_config *c);
/* True when the settings can run: a known method, K and the n-gram bounds in range. Pure. */
bool spec_config_valid(const struct spec_config *c);

/* Counters since the scheduler started (struct sched_stats.spec); vLLM's spec_decode_* metrics. */
struct spec_stats {
    uint64_t drafts;       /* sequence-steps that verified at least one proposal */
    uint64_t draft_tokens; /* proposals verified */
    uint64_t accepted;     /* proposals accepted */
    uint64_t accepted_per_pos[SPEC_MAX_TOKENS]; /* accepted at proposal position i (0-based) */
    uint64_t skipped[SPEC_SKIP_COUNT];          /* decoding sequence-steps without proposals */
    uint64_t pool_hits;   /* n-gram: sequence-steps whose proposals came from the n-gram pool */
    uint64_t pool_tokens; /* n-gram: proposals the pool found (before the controller's cut) */
    uint64_t draft_steps; /* draft: batched forward steps of the draft model */
    uint64_t draft_tokens_computed; /* draft: tokens those steps computed (catch-up included) */
};

/* ---------------------------------------------------------------- n-gram (spec_ngram.c) */

/* Prompt lookup over tokens[0..n) (borrowed; the sequence's prompt and output, the last one not yet
 * computed): finds the most recent earlier occurrence of the longest suffix of length ngram_min..
 * ngram_max and writes the up to k tokens that followed it to out. Returns how many (0: no
 * occurrence). O(n * ngram_max) at worst, O(n) typically. Pure; any thread. */
int spec_ngram_propose(const int32_t *tokens, int n, int ngram_min, int ngram_max, int k,
                       int32_t *out);

/* ---------------------------------------------------------------- n-gram pool (spec_pool.c) */

/* Token runs of finished sequences (agent and code-edit traffic repeats across requests: the
 * output one request generated is often what the next will) in a ring of tokens, and a direct-
 * mapped table from the hash of each n-gram (length ngram_min..ngram_max) to where in the ring it
 * last ended. The oldest tokens are overwritten, a newer n-gram takes its slot from an older one
 * with the same hash: memory never grows past the size given at creation. A lookup compares the
 * n-gram's tokens in the ring with the sequence's before proposing, so a hash collision or an
 * overwritten entry proposes nothing; proposals are only proposals, and verification decides
 * what is emitted. Not thread-safe: the inference thread's. */
struct spec_pool;

/* Smallest bytes spec_pool_new accepts (a few tokens and slots). */
#define SPEC_POOL_MIN_BYTES 1024u

/* A pool within max_bytes (>= SPEC_POOL_MIN_BYTES) for n-grams of ngram_min..ngram_max tokens
 * (1 <= min <= max <= 64): a ring of R tokens and a table of 2 x L x R slots of 8 bytes, L =
 * max - min + 1 (R = 15K tokens in 1 MiB for 2..5), so the n-grams of the tokens the ring holds
 * fill half the table. ERR_INVAL on bad bounds, ERR_NOMEM. */
int spec_pool_new(uint64_t max_bytes, int ngram_min, int ngram_max, struct spec_pool **out);
void spec_pool_free(struct spec_pool *p); /* NULL-safe */
/* Bytes the pool holds (struct, ring and table): at most the max_bytes it was created with. */
uint64_t spec_pool_bytes(const struct spec_pool *p);
/* Appends tokens[0..n) (borrowed; ids >= 0) as one run: proposals never cross from one run into
 * the next. A run longer than the ring keeps its last tokens. */
void spec_pool_insert(struct spec_pool *p, const int32_t *tokens, int n);
/* Like spec_ngram_propose over the pool: the longest suffix of tokens[0..n) (ngram_max down to
 * ngram_min tokens) whose latest occurrence in the pool is still whole there, and the up to k
 * tokens that followed it in its run, written to out. Returns how many (0: none). Pure reads. */
int spec_pool_propose(const struct spec_pool *p, const int32_t *tokens, int n, int k, int32_t *out);

/* ---------------------------------------------------------------- verification (spec_verify.c) */

enum spec_outcome {
    SPEC_ACCEPTED = 0, /* the proposal was accepted: the emitted token is it */
    SPEC_CORRECTED,    /* rejected: the emitted token is the target's replacement */
    SPEC_BONUS,        /* the row after the last proposal: the target's own next token */
};

/* Chooses the token of one row of a speculative entry: `logits` (borrowed) is the target's row,
 * `proposal` the draft token it verifies (-1 for the bonus row after the last one), `q` (borrowed)
 * the distribution the proposal was drawn from (n_vocab floats) or NULL for a point mass (n-gram)
 * and for greedy. With q NULL the row is sampled as without speculation (sampler_sample, the same
 * random numbers) and the proposal is accepted when the sample equals it: for a point mass that
 * is the rejection rule (accepted with probability p(d), otherwise a draw from p without d), and
 * the output is token for token the one without speculation. With q: accepted when u < p(d)/q(d),
 * otherwise a draw from the residual max(0, p - q), normalised (Leviathan et al. 2023, Chen et al.
 * 2023), p being sampler_probs' distribution; `scratch` holds n_vocab floats. Writes the token and
 * its log-probs (the target's) to *out; does not sampler_accept it. Returns the outcome, or
 * ERR_INVAL when no logit is finite. */
int spec_verify_row(struct sampler *smp, const float *logits, int32_t proposal, const float *q,
                    float *scratch, struct sampler_result *out);

/* Inverse-CDF draw from weights p[0..n) (>= 0, not necessarily normalised) in token id order with
 * the uniform u in [0, 1): the first token whose cumulative weight exceeds u * sum. -1 when every
 * weight is 0. Pure. */
int32_t spec_draw(const float *p, int n, double u);

/* ---------------------------------------------------------------- controller (spec_ctl.c) */

#define SPEC_COST_BUCKETS 20 /* step sizes 1 .. 2^20 tokens, one bucket per power of two */

/* Step time against the tokens in the step, learned from measured steps: a shape, per power-of-two
 * bucket the mean of its first 20 (tokens, seconds / level), read as a piecewise-linear curve
 * through them, times a level that every step updates (a decayed mean of measured / shape). The
 * level follows what changes every size alike (a context that grows, a busier machine), so the
 * estimates of the sizes not run now stay consistent with the one that is. */
struct spec_cost {
    double n[SPEC_COST_BUCKETS], t[SPEC_COST_BUCKETS], w[SPEC_COST_BUCKETS];
    double level, lw;             /* lw 0: level 1 */
    const struct spec_cost *peer; /* spec_cost_link */
    double anchor;                /* the peer's level at this curve's last observation */
};
void spec_cost_init(struct spec_cost *c);
/* Ties c (a draft's) to peer (the target's, borrowed; it must outlive c's use): while c is not
 * observed (the controller keeps k 0, so the draft does not run) its estimates move with the
 * peer's level since c's last observation, as a context that grows slows both models alike; a
 * stale draft estimate would otherwise make speculation look cheaper the longer it is off. peer
 * NULL unties. Call after calibrating both. */
void spec_cost_link(struct spec_cost *c, const struct spec_cost *peer);
/* Adds one measured step of n_tokens >= 1 that took `seconds`. */
void spec_cost_observe(struct spec_cost *c, int n_tokens, double seconds);
/* Seconds a step of n_tokens is expected to take; 0 for n <= 0. Without observations, n (a cost
 * proportional to tokens, under which no speculation pays). */
double spec_cost_estimate(const struct spec_cost *c, int n_tokens);
/* Calibrates c with a few forward passes of m on kv (sizes 1, 2, 4, .. up to max_tokens, each the
 * best of 3), on a scratch sequence that is closed again. Needs a free sequence id and free blocks;
 * ERR_AGAIN otherwise, or the forward's error. */
int spec_cost_calibrate(struct spec_cost *c, struct model *m, struct kv_cache *kv, int max_tokens);

/* One decoding sequence the controller may let speculate. */
struct spec_cand {
    float accept; /* estimated probability that a proposal is accepted, given the ones before it */
    int kmax;     /* proposals it may make at most (K, proposals found, room left) */
    int catchup;  /* draft: tokens its draft KV must compute before the first proposal */
    int k;        /* out: proposals to make */
};

/* The step the candidates join. */
struct spec_plan_in {
    int base_tokens;                /* tokens the step runs without speculation */
    int n_decodes;                  /* tokens it generates without speculation */
    int budget;                     /* extra tokens it may still take */
    const struct spec_cost *target; /* the target's step cost */
    const struct spec_cost *draft;  /* the draft's, or NULL (no draft steps: n-gram) */
    bool adaptive;                  /* false: every candidate gets kmax (within budget) */
};

/* Chooses k for each candidate: the set of proposals, taken in order of expected gain (accept^j
 * for a sequence's j-th), whose prefix maximises expected tokens per second of the step (the
 * target step at base + proposals, plus one draft step per proposal depth), kept only when it
 * beats not speculating by 5% (estimation noise must not cost a loaded server). `scratch` holds
 * n * SPEC_MAX_TOKENS entries. Pure. */
void spec_ctl_plan(const struct spec_plan_in *in, struct spec_cand *c, int n, void *scratch);
#define SPEC_CTL_SCRATCH_BYTES(n) ((size_t)(n)*SPEC_MAX_TOKENS * 8u)

/* A sequence's acceptance record: decayed counts of accepted proposals and of runs of proposals
 * that ended in a rejection (geometric model: accept = hits / (hits + misses)). */
struct spec_accept {
    float hits, misses;
};
/* Records a verified run of `proposed` proposals of which the first `accepted` were accepted. */
void spec_accept_update(struct spec_accept *a, int proposed, int accepted);
/* Lets the record's evidence fade by one run's decay without adding any: a sequence the controller
 * keeps from speculating drifts back to the prior and is tried again. */
void spec_accept_decay(struct spec_accept *a);
/* The estimate, shrunk towards `prior` with the weight of two runs. */
float spec_accept_estimate(const struct spec_accept *a, float prior);

/* A sequence's speculation state, embedded in the scheduler's sequence (zeroed with it). */
struct spec_seq {
    struct spec_accept acc;
    int k;                       /* proposals in the current step's entry (0: a plain decode) */
    long n_proposed, n_accepted; /* over the sequence's life */
    /* Draft model: while d_open, sequence d_seq of the draft's pool holds the K/V of the
     * sequence's first d_computed tokens (the draft lags behind the target and catches up when it
     * next drafts). d_smp is the draft's sampler (the request's parameters, its own seed), fed the
     * sequence's tokens up to d_fed; q holds SPEC_MAX_TOKENS rows of the draft's distribution
     * (sampled requests only). Owned by the sequence: spec_seq_fini. */
    bool d_open;
    int d_seq, d_computed, d_fed;
    struct sampler *d_smp;
    float *q;
};

/* ---------------------------------------------------------------- draft model (spec_draft.c) */

struct spec_draft;

/* Whether `draft` (borrowed) can draft for `target`: the same vocabulary (token count, every
 * token's text and type, BOS and EOS). 0, or ERR_INVAL with the first mismatch named in err.
 * Pure; any thread. */
int spec_draft_check_vocab(const struct model *target, const struct model *draft, char *err,
                           size_t errlen);

/* Creates the proposer over the draft model and its pool (both borrowed for its life; the pool's
 * K/V storage initialised with model_kv_init(draft, kv), nothing else using it) for up to
 * max_seqs sequences drafting at once. ERR_INVAL when the pool has fewer sequence ids, ERR_NOMEM.
 * Inference thread. */
int spec_draft_new(struct model *draft, struct kv_cache *kv, int max_seqs, struct spec_draft **out);
void spec_draft_free(struct spec_draft *d); /* NULL-safe; every sequence released first */
/* The draft's step time against tokens (observed on every draft step; the controller's input). */
struct spec_cost *spec_draft_cost(struct spec_draft *d);

/* One sequence's part in a drafting run. */
struct spec_draft_job {
    struct spec_seq *ss;
    const struct sampler_params *sp; /* the request's sampling (borrowed) */
    int32_t *tokens; /* the sequence's tokens[0..n) (borrowed), room for k more after them */
    int n;           /* tokens known: the last one not yet computed by the target */
    int catchup;     /* in: tokens from ss->d_computed the draft computes (1.. n - d_computed;
                        less than that only with k 0: a chunk of a long catch-up) */
    int k;           /* in: proposals wanted (0: catch up only); out: 0 when refused */
};

/* Runs the draft for every job: one batched step computes each job's catch-up (from d_computed)
 * and yields the first proposals, then one batched step per further depth over the jobs still
 * proposing. Proposal i goes to tokens[n + i]; for a sampled request (temperature > 0) row i of
 * ss->q is the distribution it was drawn from (after the request's penalties, top-k, top-p, min-p
 * and temperature), for greedy the draft's argmax is proposed. A job whose slots the pool cannot
 * provide gets k 0 and catchup 0 (counted in *kv_refused). The draft's K/V afterwards: the catch-
 * up and proposals 0..k-2; spec_draft_commit keeps what was verified. Counts steps and tokens in
 * *st. 0, or the forward's error (every job then has k 0 and its draft K/V released). */
int spec_draft_run(struct spec_draft *d, struct spec_draft_job *jobs, int n_jobs,
                   struct spec_stats *st, int *kv_refused);

/* After verification: of the job's k proposals the first `accepted` were accepted; cuts the
 * draft's K/V back to the verified tokens it holds. */
void spec_draft_commit(struct spec_draft *d, const struct spec_draft_job *job, int accepted);

/* Frees the sequence's draft K/V (preemption: recomputed when it next drafts). d NULL: no-op. */
void spec_seq_release(struct spec_draft *d, struct spec_seq *ss);
/* Releases and frees everything the state owns (d may be NULL when nothing was opened). */
void spec_seq_fini(struct spec_draft *d, struct spec_seq *ss);

#endif
