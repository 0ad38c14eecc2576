/* Draft-model proposals (see spec.h): a second model with the target's vocabulary, on the same
 * backend, with one paged KV pool shared by every sequence (not a context per request). A drafting
 * run computes what each speculating sequence's draft K/V lacks (its prompt the first time, after
 * a preemption or a prefix-cache hit on the target; the tokens the target emitted since its last
 * run otherwise) in a first batched step that also yields every first proposal, then one batched
 * step per further proposal depth. After verification the draft's K/V is cut back to the verified
 * tokens, so it never holds a rejected proposal.
 *
 * Sampled requests: each proposal is drawn from the draft's distribution after the request's own
 * sampler transforms (a sampler with the request's parameters, its own seed, fed the sequence's
 * verified tokens for the penalties) and that distribution goes to the verification as q, whose
 * rejection rule then leaves the target's distribution unchanged whatever q is. */
#include "engine/sched/spec.h"

#include "common/assert.h"
#include "common/clock.h"
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/sched/sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEC_DRAFT_SEED_SALT                                                                       \
    0x64726166746d6f64ull /* the draft's stream differs from the target's */

struct spec_draft {
    struct model *m;
    struct kv_cache *kv;
    struct spec_cost cost;
    int n_vocab, max_seqs;
    struct model_batch_entry *entries; /* (max_seqs) */
    int *job_of;                       /* (max_seqs) entry -> job */
};

/* ---------------------------------------------------------------- the vocabulary check */

/* The token ids under key in both files: equal, or absent from both. */
static int check_id(const struct gguf *t, const struct gguf *d, const char *key, const char *what,
                    char *err, size_t errlen)
{
    uint32_t a = 0, b = 0;
    int ra = gguf_get_u32(t, key, &a), rb = gguf_get_u32(d, key, &b);
    if (ra != rb || (ra == 0 && a != b)) {
        char sa[16] = "none", sb[16] = "none";
        if (ra == 0) snprintf(sa, sizeof(sa), "%u", a);
        if (rb == 0) snprintf(sb, sizeof(sb), "%u", b);
        snprintf(err, errlen, "the draft's %s token is %s, the target's %s", what, sb, sa);
        return ERR_INVAL;
    }
    return 0;
}

int spec_draft_check_vocab(const struct model *target, const struct model *draft, char *err,
                           size_t errlen)
{
    int nt = model_hparams(target)->n_vocab, nd = model_hparams(draft)->n_vocab;
    if (nt != nd) {
        snprintf(err, errlen, "the draft has %d tokens, the target %d", nd, nt);
        return ERR_INVAL;
    }
    const struct gguf *t = model_gguf(target), *d = model_gguf(draft);
    const struct gguf_array *at = NULL, *ad = NULL;
    int rt = gguf_get_arr(t, "tokenizer.ggml.tokens", &at);
    int rd = gguf_get_arr(d, "tokenizer.ggml.tokens", &ad);
    if (rt != rd) {
        snprintf(err, errlen, "only the %s has a token list (tokenizer.ggml.tokens)",
                 rt == 0 ? "target" : "draft");
        return ERR_INVAL;
    }
    if (rt == 0) {
        if (at->type != GGUF_STRING || ad->type != GGUF_STRING || at->n != ad->n) {
            snprintf(err, errlen, "the token lists differ in type or length (%llu vs %llu)",
                     (unsigned long long)ad->n, (unsigned long long)at->n);
            return ERR_INVAL;
        }
        for (uint64_t i = 0; i < at->n; i++) {
            const struct gguf_str *a = &at->strs[i], *b = &ad->strs[i];
            if (a->len != b->len || memcmp(a->data, b->data, (size_t)a->len) != 0) {
                snprintf(err, errlen, "token %llu is \"%.*s\" in the draft, \"%.*s\" in the target",
                         (unsigned long long)i, (int)(b->len > 64 ? 64 : b->len), b->data,
                         (int)(a->len > 64 ? 64 : a->len), a->data);
                return ERR_INVAL;
            }
        }
    }
    rt = gguf_get_arr(t, "tokenizer.ggml.token_type", &at);
    rd = gguf_get_arr(d, "tokenizer.ggml.token_type", &ad);
    if (rt != rd || (rt == 0 && at->n != ad->n)) {
        snprintf(err, errlen,
                 "the token types (tokenizer.ggml.token_type) differ in presence or "
                 "length");
        return ERR_INVAL;
    }
    for (uint64_t i = 0; rt == 0 && i < at->n; i++) {
        int64_t a = 0, b = 0;
        if (gguf_arr_get_i64(at, i, &a) != 0 || gguf_arr_get_i64(ad, i, &b) != 0 || a != b) {
            snprintf(err, errlen, "token %llu's type is %lld in the draft, %lld in the target",
                     (unsigned long long)i, (long long)b, (long long)a);
            return ERR_INVAL;
        }
    }
    int rc = check_id(t, d, "tokenizer.ggml.bos_token_id", "BOS", err, errlen);
    if (!rc) rc = check_id(t, d, "tokenizer.ggml.eos_token_id", "EOS", err, errlen);
    return rc;
}

/* ---------------------------------------------------------------- life */

int spec_draft_new(struct model *draft, struct kv_cache *kv, int max_seqs, struct spec_draft **out)
{
    if (max_seqs < 1 || kv_cache_max_seqs(kv) < max_seqs) return ERR_INVAL;
    struct spec_draft *d = calloc(1, sizeof(*d));
    if (!d) return ERR_NOMEM;
    d->m = draft;
    d->kv = kv;
    d->n_vocab = model_hparams(draft)->n_vocab;
    d->max_seqs = max_seqs;
    spec_cost_init(&d->cost);
    d->entries = calloc((size_t)max_seqs, sizeof(*d->entries));
    d->job_of = calloc((size_t)max_seqs, sizeof(*d->job_of));
    if (!d->entries || !d->job_of) {
        spec_draft_free(d);
        return ERR_NOMEM;
    }
    *out = d;
    return 0;
}

void spec_draft_free(struct spec_draft *d)
{
    if (!d) return;
    free(d->entries);
    free(d->job_of);
    free(d);
}

struct spec_cost *spec_draft_cost(struct spec_draft *d)
{
    return &d->cost;
}

void spec_seq_release(struct spec_draft *d, struct spec_seq *ss)
{
    if (d && ss->d_open) kv_cache_seq_close(d->kv, ss->d_seq);
    ss->d_open = false;
    ss->d_computed = 0;
}

void spec_seq_fini(struct spec_draft *d, struct spec_seq *ss)
{
    spec_seq_release(d, ss);
    sampler_free(ss->d_smp);
    free(ss->q);
    ss->d_smp = NULL;
    ss->q = NULL;
}

/* ---------------------------------------------------------------- drafting */

/* The job's draft sampler (made on first use) fed the sequence's tokens up to n, and its q rows. */
static int draft_sampler_sync(struct spec_draft *d, struct spec_draft_job *j)
{
    struct spec_seq *ss = j->ss;
    if (!ss->d_smp) {
        struct sampler_params p = *j->sp;
        p.seed ^= SPEC_DRAFT_SEED_SALT;
        p.logprobs = false;
        p.n_logprobs = 0;
        int rc = sampler_new(&p, d->n_vocab, &ss->d_smp);
        if (rc) return rc;
        ss->d_fed = 0;
    }
    if (j->sp->temperature > 0.0f && !ss->q) {
        ss->q = malloc((size_t)SPEC_MAX_TOKENS * (size_t)d->n_vocab * sizeof(float));
        if (!ss->q) return ERR_NOMEM;
    }
    for (; ss->d_fed < j->n; ss->d_fed++) sampler_accept(ss->d_smp, j->tokens[ss->d_fed]);
    return 0;
}

/* The job's proposal at depth `depth` (0-based) from the draft's logits row. */
static int draft_pick(struct spec_draft *d, struct spec_draft_job *j, int depth, const float *row)
{
    struct spec_seq *ss = j->ss;
    int32_t tok;
    if (j->sp->temperature > 0.0f) {
        float *q = ss->q + (size_t)depth * (size_t)d->n_vocab;
        int rc = sampler_probs(ss->d_smp, row, q);
        if (rc) return rc;
        tok = spec_draw(q, d->n_vocab, sampler_uniform(ss->d_smp));
        if (tok < 0) return ERR_INVAL;
    } else {
        struct sampler_result r;
        int rc = sampler_sample(ss->d_smp, row, &r);
        if (rc) return rc;
        tok = r.token;
    }
    j->tokens[j->n + depth] = tok;
    return 0;
}

/* Ends every job of a failed run without proposals; their draft K/V is recomputed later. */
static void run_fail(struct spec_draft *d, struct spec_draft_job *jobs, int n_jobs)
{
    for (int i = 0; i < n_jobs; i++) {
        jobs[i].k = 0;
        jobs[i].catchup = 0;
        spec_seq_release(d, jobs[i].ss);
    }
}

/* Opens the job's draft sequence if needed and reserves its slots; ERR_AGAIN when the pool is
 * short (nothing reserved). */
static int draft_reserve(struct spec_draft *d, struct spec_draft_job *j)
{
    struct spec_seq *ss = j->ss;
    if (!ss->d_open) {
        if (kv_cache_seq_open(d->kv, &ss->d_seq) != 0) return ERR_AGAIN;
        ss->d_open = true;
        ss->d_computed = 0;
    }
    ASSERT(kv_cache_seq_len(d->kv, ss->d_seq) == ss->d_computed);
    int need = j->catchup + (j->k > 0 ? j->k - 1 : 0);
    /* the draft's pool has no prefix cache and never forks: no block is shared, no copy */
    return kv_cache_seq_append(d->kv, ss->d_seq, need, NULL);
}

int spec_draft_run(struct spec_draft *d, struct spec_draft_job *jobs, int n_jobs,
                   struct spec_stats *st, int *kv_refused)
{
    int rc = 0, max_k = 0;
    ASSERT(n_jobs <= d->max_seqs);
    for (int i = 0; i < n_jobs; i++) {
        struct spec_draft_job *j = &jobs[i];
        ASSERT(j->catchup >= 1 && j->ss->d_computed + j->catchup <= j->n);
        ASSERT(j->k == 0 || j->ss->d_computed + j->catchup == j->n);
        if (j->k > 0 && (rc = draft_sampler_sync(d, j)) != 0) break;
        if ((rc = draft_reserve(d, j)) == ERR_AGAIN) {
            j->k = 0;
            j->catchup = 0;
            (*kv_refused)++;
            rc = 0;
            continue;
        }
        if (rc) break;
        if (j->k > max_k) max_k = j->k;
    }
    if (rc) {
        run_fail(d, jobs, n_jobs);
        return rc;
    }
    /* Depth 0: every job's catch-up, the logits of its last token for those proposing; depth
     * j: proposal j - 1 of the jobs proposing more than j. */
    for (int depth = 0; depth < (max_k > 0 ? max_k : 1); depth++) {
        int n_en = 0, n_tok = 0;
        for (int i = 0; i < n_jobs; i++) {
            struct spec_draft_job *j = &jobs[i];
            if (depth == 0 && j->catchup > 0) {
                int pos = j->ss->d_computed;
                d->entries[n_en] =
                    (struct model_batch_entry){j->ss->d_seq, pos, j->catchup, j->tokens + pos,
                                               j->k > 0 ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE};
            } else if (depth > 0 && j->k > depth) {
                int pos = j->n + depth - 1;
                d->entries[n_en] = (struct model_batch_entry){j->ss->d_seq, pos, 1, j->tokens + pos,
                                                              MODEL_LOGITS_LAST};
            } else {
                continue;
            }
            n_tok += d->entries[n_en].n_tokens;
            d->job_of[n_en++] = i;
        }
        if (n_en == 0) break;
        const float *logits;
        int n_rows, row = 0;
        double t0 = clock_mono_s();
        rc = model_forward(d->m, d->kv, d->entries, n_en, &logits, &n_rows);
        if (rc) {
            run_fail(d, jobs, n_jobs);
            return rc;
        }
        st->draft_steps++;
        st->draft_tokens_computed += (uint64_t)n_tok;
        for (int e = 0; e < n_en && !rc; e++) {
            struct spec_draft_job *j = &jobs[d->job_of[e]];
            if (depth == 0) j->ss->d_computed += j->catchup;
            if (d->entries[e].logits != MODEL_LOGITS_LAST) continue;
            ASSERT(row < n_rows);
            rc = draft_pick(d, j, depth, logits + (size_t)row++ * (size_t)d->n_vocab);
        }
        spec_cost_observe(&d->cost, n_tok, clock_mono_s() - t0);
        if (rc) {
            run_fail(d, jobs, n_jobs);
            return rc;
        }
    }
    return 0;
}

void spec_draft_commit(struct spec_draft *d, const struct spec_draft_job *job, int accepted)
{
    struct spec_seq *ss = job->ss;
    if (job->k <= 0 || !ss->d_open) return; /* no proposals: nothing unverified to cut */
    /* verified: tokens[0..n), then the accepted proposals the draft computed (it never computes
     * its last one) */
    int kept = accepted < job->k - 1 ? accepted : job->k - 1;
    ss->d_computed = job->n + kept;
    int rc = kv_cache_seq_truncate(d->kv, ss->d_seq, ss->d_computed);
    ASSERT(rc == 0); /* the pool shares no block */
    (void)rc;
}
