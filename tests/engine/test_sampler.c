/* Unit tests of the sampler: greedy, each truncation filter, penalties, seeding, and log-probs. */
#include "engine/sched/sampler.h"

#include "common/err.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

static struct sampler *make(const struct sampler_params *p, int n_vocab)
{
    struct sampler *s = NULL;
    ck_assert_int_eq(sampler_new(p, n_vocab, &s), 0);
    return s;
}

static int32_t sample1(struct sampler *s, const float *logits)
{
    struct sampler_result r;
    ck_assert_int_eq(sampler_sample(s, logits, &r), 0);
    return r.token;
}

START_TEST(test_sampler_new_rejects_bad_params)
{
    struct sampler_params p;
    struct sampler *s = NULL;
    sampler_params_default(&p);
    ck_assert_int_eq(sampler_new(&p, 0, &s), ERR_INVAL);
    p.n_logprobs = SAMPLER_MAX_LOGPROBS + 1;
    ck_assert_int_eq(sampler_new(&p, 4, &s), ERR_INVAL);
    sampler_params_default(&p);
    p.repeat_penalty = 0.0f;
    ck_assert_int_eq(sampler_new(&p, 4, &s), ERR_INVAL);
    sampler_params_default(&p);
    p.temperature = NAN;
    ck_assert_int_eq(sampler_new(&p, 4, &s), ERR_INVAL);
    sampler_params_default(&p);
    p.repeat_last_n = -2;
    ck_assert_int_eq(sampler_new(&p, 4, &s), ERR_INVAL);
    ck_assert_ptr_null(s);
    sampler_free(NULL);
}
END_TEST

START_TEST(test_sampler_sample_greedy_argmax_lowest_id_on_tie)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    struct sampler *s = make(&p, 5);
    float l1[5] = {0.1f, 2.0f, -1.0f, 1.5f, 0.0f};
    ck_assert_int_eq(sample1(s, l1), 1);
    float l2[5] = {0.1f, 3.0f, -1.0f, 3.0f, 0.0f};
    ck_assert_int_eq(sample1(s, l2), 1);
    float l3[5] = {NAN, -INFINITY, 0.5f, NAN, 0.4f};
    ck_assert_int_eq(sample1(s, l3), 2);
    float l4[5] = {NAN, -INFINITY, NAN, NAN, -INFINITY};
    struct sampler_result r;
    ck_assert_int_eq(sampler_sample(s, l4, &r), ERR_INVAL);
    sampler_free(s);
}
END_TEST

/* The first largest finite logit, by one compare-and-branch chain: the reference for greedy. */
static int reference_argmax(const float *l, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(l[i]) && (best < 0 || l[i] > l[best])) best = i;
    return best;
}

START_TEST(test_sampler_greedy_matches_reference_on_large_vocabularies)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    const int sizes[] = {1, 15, 16, 17, 31, 33, 1000, 32000, 32003};
    uint64_t rng = 7;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si];
        struct sampler *s = make(&p, n);
        float *l = malloc(sizeof(float) * (size_t)n);
        ck_assert_ptr_nonnull(l);
        for (int round = 0; round < 40; round++) {
            for (int i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(rng >> 33);
                /* few distinct values, so ties across lanes and the tail are common */
                l[i] = (float)(r % 7) - 3.0f;
                switch (r % 23) {
                case 0: l[i] = NAN; break;
                case 1: l[i] = INFINITY; break;
                case 2: l[i] = -INFINITY; break;
                case 3: l[i] = round % 2 ? -0.0f : 0.0f; break;
                case 4: l[i] = round % 5 == 0 ? FLT_MAX : l[i]; break;
                default: break;
                }
            }
            if (round % 10 == 9) /* nothing finite but one value at the very end */
                for (int i = 0; i < n; i++) l[i] = i == n - 1 ? -FLT_MAX : NAN;
            int want = reference_argmax(l, n);
            struct sampler_result res;
            int rc = sampler_sample(s, l, &res);
            if (want < 0) {
                ck_assert_int_eq(rc, ERR_INVAL); /* nothing finite to pick */
                continue;
            }
            ck_assert_int_eq(rc, 0);
            ck_assert_msg(res.token == want, "n=%d round %d: %d, want %d", n, round, res.token,
                          want);
        }
        free(l);
        sampler_free(s);
    }
}
END_TEST

START_TEST(test_sampler_sample_same_seed_same_tokens)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.seed = 42;
    float logits[16];
    for (int i = 0; i < 16; i++) logits[i] = (float)(i % 5) * 0.3f;
    struct sampler *a = make(&p, 16), *b = make(&p, 16);
    p.seed = 43;
    struct sampler *c = make(&p, 16);
    int differ = 0;
    int32_t first[64];
    for (int i = 0; i < 64; i++) {
        first[i] = sample1(a, logits);
        ck_assert_int_eq(first[i], sample1(b, logits));
        differ += first[i] != sample1(c, logits);
    }
    ck_assert_int_gt(differ, 0);
    /* reset reseeds: the same sequence again. */
    sampler_reset(a);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(sample1(a, logits), first[i]);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}
END_TEST

START_TEST(test_sampler_sample_follows_distribution)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.seed = 7;
    float logits[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    struct sampler *s = make(&p, 3);
    int counts[3] = {0};
    for (int i = 0; i < 20000; i++) counts[sample1(s, logits)]++;
    ck_assert(fabs(counts[0] / 20000.0 - 0.5) < 0.02);
    ck_assert(fabs(counts[1] / 20000.0 - 0.3) < 0.02);
    ck_assert(fabs(counts[2] / 20000.0 - 0.2) < 0.02);
    sampler_free(s);
}
END_TEST

/* Draws many times and returns a bitmask of the tokens seen. */
static unsigned seen_mask(const struct sampler_params *p, const float *logits, int n)
{
    struct sampler *s = make(p, n);
    unsigned mask = 0;
    for (int i = 0; i < 4000; i++) mask |= 1u << sample1(s, logits);
    sampler_free(s);
    return mask;
}

START_TEST(test_sampler_sample_top_k_top_p_min_p_truncate)
{
    /* probabilities 0.4, 0.3, 0.2, 0.1 at ids 3, 0, 2, 1 */
    float logits[4] = {logf(0.3f), logf(0.1f), logf(0.2f), logf(0.4f)};
    struct sampler_params p;
    sampler_params_default(&p);
    ck_assert_uint_eq(seen_mask(&p, logits, 4), 0xfu);
    p.top_k = 2;
    ck_assert_uint_eq(seen_mask(&p, logits, 4), (1u << 3) | (1u << 0));
    p.top_k = 1;
    ck_assert_uint_eq(seen_mask(&p, logits, 4), 1u << 3);
    sampler_params_default(&p);
    p.top_p = 0.75f; /* 0.4 + 0.3 = 0.7 < 0.75: three tokens */
    ck_assert_uint_eq(seen_mask(&p, logits, 4), (1u << 3) | (1u << 0) | (1u << 2));
    p.top_p = 0.0f;
    ck_assert_uint_eq(seen_mask(&p, logits, 4), 1u << 3);
    sampler_params_default(&p);
    p.min_p = 0.45f; /* keep p >= 0.18 */
    ck_assert_uint_eq(seen_mask(&p, logits, 4), (1u << 3) | (1u << 0) | (1u << 2));
    p.min_p = 0.8f;
    ck_assert_uint_eq(seen_mask(&p, logits, 4), 1u << 3);
    /* A very low temperature is (nearly) greedy. */
    sampler_params_default(&p);
    p.temperature = 0.01f;
    ck_assert_uint_eq(seen_mask(&p, logits, 4), 1u << 3);
}
END_TEST

START_TEST(test_sampler_penalties_change_greedy_choice)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    float logits[3] = {3.0f, 2.0f, -1.0f};
    struct sampler *s = make(&p, 3);
    ck_assert_int_eq(sample1(s, logits), 0);
    sampler_accept(s, 0); /* 3.0 / 2 = 1.5 < 2.0 */
    ck_assert_int_eq(sample1(s, logits), 1);
    sampler_free(s);

    /* Negative logits are multiplied: a repeated -1 becomes -2. */
    float neg[2] = {-1.0f, -1.5f};
    s = make(&p, 2);
    sampler_accept(s, 0);
    ck_assert_int_eq(sample1(s, neg), 1);
    sampler_free(s);

    /* Window: only the last repeat_last_n tokens count. */
    p.repeat_last_n = 1;
    s = make(&p, 3);
    sampler_accept(s, 0);
    sampler_accept(s, 2);
    ck_assert_int_eq(sample1(s, logits), 0);
    sampler_free(s);

    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.frequency_penalty = 0.6f;
    s = make(&p, 3);
    sampler_accept(s, 0);
    ck_assert_int_eq(sample1(s, logits), 0); /* 3.0 - 0.6 = 2.4 */
    sampler_accept(s, 0);
    ck_assert_int_eq(sample1(s, logits), 1); /* 3.0 - 1.2 = 1.8 */
    sampler_free(s);

    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.presence_penalty = 1.5f;
    s = make(&p, 3);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    ck_assert_int_eq(sample1(s, logits), 1); /* 3.0 - 1.5 once = 1.5 < 2 */
    sampler_reset(s);
    ck_assert_int_eq(sample1(s, logits), 0);
    sampler_free(s);
}
END_TEST

START_TEST(test_sampler_logprobs_of_raw_distribution)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 3;
    p.logprobs = true;
    p.repeat_penalty = 10.0f;
    float logits[5] = {1.0f, 4.0f, 2.0f, 3.0f, -INFINITY};
    struct sampler *s = make(&p, 5);
    sampler_accept(s, 1); /* penalised: 4 / 10 = 0.4 -> greedy picks 3 */
    struct sampler_result r;
    ck_assert_int_eq(sampler_sample(s, logits, &r), 0);
    ck_assert_int_eq(r.token, 3);
    double lse = log(exp(1.0) + exp(4.0) + exp(2.0) + exp(3.0));
    ck_assert_double_eq_tol(r.logprob, 3.0 - lse, 1e-5);
    ck_assert_int_eq(r.n_top, 3);
    ck_assert_int_eq(r.top[0].token, 1);
    ck_assert_int_eq(r.top[1].token, 3);
    ck_assert_int_eq(r.top[2].token, 2);
    ck_assert_double_eq_tol(r.top[0].logprob, 4.0 - lse, 1e-5);
    ck_assert_double_eq_tol(r.top[2].logprob, 2.0 - lse, 1e-5);
    sampler_free(s);

    /* Not asked for: the same token, no log-softmax. */
    p.logprobs = false;
    s = make(&p, 5);
    sampler_accept(s, 1);
    ck_assert_int_eq(sampler_sample(s, logits, &r), 0);
    ck_assert_int_eq(r.token, 3);
    ck_assert_int_eq(r.n_top, 0);
    ck_assert_float_eq(r.logprob, 0.0f);
    sampler_free(s);
    p.logprobs = true;

    /* More alternatives requested than finite tokens exist. */
    p.n_logprobs = 10;
    p.repeat_penalty = 1.0f;
    s = make(&p, 5);
    ck_assert_int_eq(sampler_sample(s, logits, &r), 0);
    ck_assert_int_eq(r.n_top, 4);
    ck_assert_int_eq(r.top[3].token, 0);
    sampler_free(s);
}
END_TEST

/* sampler_logprobs: a given token's logprob and the alternatives, as a draw of that token would
 * report them, without touching the RNG; out-of-range tokens and all-infinite logits refused. */
START_TEST(test_sampler_logprobs_of_given_token)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.seed = 9;
    p.logprobs = true;
    p.n_logprobs = 2;
    float logits[5] = {0.5f, -1.0f, 2.0f, 1.0f, -INFINITY};
    struct sampler *a = make(&p, 5), *b = make(&p, 5);
    struct sampler_result r, q;
    ck_assert_int_eq(sampler_logprobs(a, logits, 1, &r), 0);
    ck_assert_int_eq(r.token, 1);
    double z = exp(0.5) + exp(-1.0) + exp(2.0) + exp(1.0);
    ck_assert_double_eq_tol(r.logprob, -1.0 - log(z), 1e-5);
    ck_assert_int_eq(r.n_top, 2);
    ck_assert_int_eq(r.top[0].token, 2);
    ck_assert_int_eq(r.top[1].token, 3);
    ck_assert_int_eq(sampler_logprobs(a, logits, 4, &r), 0);
    ck_assert(isinf(r.logprob) && r.logprob < 0);
    /* The draws that follow are those of a sampler that computed nothing. */
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(sampler_sample(a, logits, &r), 0);
        ck_assert_int_eq(sampler_sample(b, logits, &q), 0);
        ck_assert_int_eq(r.token, q.token);
        struct sampler_result g;
        ck_assert_int_eq(sampler_logprobs(b, logits, q.token, &g), 0);
        ck_assert_float_eq(g.logprob, q.logprob);
    }
    ck_assert_int_eq(sampler_logprobs(a, logits, 5, &r), ERR_INVAL);
    ck_assert_int_eq(sampler_logprobs(a, logits, -1, &r), ERR_INVAL);
    float none[5] = {-INFINITY, -INFINITY, NAN, INFINITY, -INFINITY};
    ck_assert_int_eq(sampler_logprobs(a, none, 0, &r), ERR_INVAL);
    sampler_free(a);
    sampler_free(b);
}
END_TEST

START_TEST(test_sampler_accept_long_history)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = -1;
    struct sampler *s = make(&p, 4);
    sampler_accept(s, 0);
    for (int i = 0; i < 10000; i++) sampler_accept(s, 2);
    float logits[4] = {3.0f, 2.0f, 0.0f, 0.0f};
    ck_assert_int_eq(sample1(s, logits), 1); /* token 0 is still in the (unbounded) window */
    sampler_free(s);
}
END_TEST

/* top-k on a large vocabulary (quickselect path) keeps exactly the k best tokens, ties included. */
START_TEST(test_sampler_top_k_large_vocab_selects_best)
{
    enum { N = 5000, K = 7 };
    static float logits[N];
    unsigned x = 1;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        logits[i] = (float)((x >> 16) % 1000) / 100.0f; /* many ties */
    }
    /* The K best by (logit desc, id asc). */
    int best[K];
    bool taken[N] = {false};
    for (int k = 0; k < K; k++) {
        int b = -1;
        for (int i = 0; i < N; i++)
            if (!taken[i] && (b < 0 || logits[i] > logits[b])) b = i;
        taken[b] = true;
        best[k] = b;
    }
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_k = K;
    p.temperature = 100.0f; /* nearly uniform over the K kept */
    struct sampler *s = make(&p, N);
    bool seen[K] = {false};
    for (int i = 0; i < 3000; i++) {
        int32_t t = sample1(s, logits);
        int k = 0;
        while (k < K && best[k] != t) k++;
        ck_assert_msg(k < K, "token %d is not among the top %d", t, K);
        seen[k] = true;
    }
    for (int k = 0; k < K; k++) ck_assert(seen[k]);
    sampler_free(s);
}
END_TEST

/* ---------------------------------------------------------------- distributions
 *
 * The expected distribution of each configuration, computed here in double by the definition in
 * sampler.h (sort by logit then id; top-k, top-p at temperature 1, min-p against the maximum; then
 * softmax at the temperature), and compared with many draws by a chi-square test. The threshold is
 * the chi-square quantile at 1 - 1e-6 (Wilson-Hilferty), so a correct sampler fails a given check
 * with probability below 1e-6; tokens outside the expected support must never be drawn at all. */

struct ref_cand {
    int id;
    double l;
};

static int ref_cmp(const void *a, const void *b)
{
    const struct ref_cand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

/* probs[n] = the distribution sampler_sample draws from (0 outside the kept set). */
static void reference_probs(const float *logits, int n, const struct sampler_params *p,
                            double *probs)
{
    struct ref_cand *c = malloc(sizeof(*c) * (size_t)n);
    ck_assert_ptr_nonnull(c);
    double *biased = calloc((size_t)n, sizeof(double));
    ck_assert_ptr_nonnull(biased);
    for (int i = 0; i < n; i++) biased[i] = logits[i];
    for (int i = 0; i < p->n_bias; i++) biased[p->bias[i].token] += p->bias[i].bias;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(biased[i])) c[m++] = (struct ref_cand){i, (float)biased[i]};
    qsort(c, (size_t)m, sizeof(*c), ref_cmp);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    if (p->top_p < 1.0f) {
        double z = 0, cum = 0;
        for (int i = 0; i < m; i++) z += exp(c[i].l - c[0].l);
        for (int i = 0; i < m; i++) {
            cum += exp(c[i].l - c[0].l);
            if (cum >= p->top_p * z) {
                m = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int keep = 1;
        while (keep < m && c[keep].l >= c[0].l + log(p->min_p)) keep++;
        m = keep;
    }
    for (int i = 0; i < n; i++) probs[i] = 0;
    double z = 0;
    for (int i = 0; i < m; i++) z += exp((c[i].l - c[0].l) / p->temperature);
    for (int i = 0; i < m; i++) probs[c[i].id] = exp((c[i].l - c[0].l) / p->temperature) / z;
    free(c);
    free(biased);
}

/* Draws `draws` tokens and checks them against the reference distribution: never a token of
 * probability 0, and a chi-square statistic (cells of expected count < 5 pooled) under the
 * 1 - 1e-6 quantile. */
static void check_distribution(const float *logits, int n, const struct sampler_params *p,
                               int draws, const char *what)
{
    double *probs = malloc(sizeof(double) * (size_t)n);
    long *counts = calloc((size_t)n, sizeof(long));
    ck_assert(probs && counts);
    reference_probs(logits, n, p, probs);
    struct sampler *s = make(p, n);
    for (int i = 0; i < draws; i++) {
        int32_t t = sample1(s, logits);
        ck_assert_msg(t >= 0 && t < n && probs[t] > 0, "%s: drew token %d of probability 0", what,
                      t);
        counts[t]++;
    }
    sampler_free(s);
    double chi = 0, pool_e = 0;
    long pool_o = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] == 0) continue;
        double e = probs[i] * draws;
        if (e < 5) {
            pool_e += e;
            pool_o += counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    int df = cells > 1 ? cells - 1 : 1;
    double z = 4.753; /* standard normal quantile at 1 - 1e-6 */
    double q = 2.0 / (9.0 * df);
    double limit = df * pow(1 - q + z * sqrt(q), 3);
    ck_assert_msg(chi < limit, "%s: chi-square %.1f over %d cells, limit %.1f", what, chi, cells,
                  limit);
    free(probs);
    free(counts);
}

static void random_logits(float *l, int n, uint64_t seed, float scale)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = scale * ((float)(seed >> 40) / (float)(1u << 24) - 0.5f);
    }
}

START_TEST(test_sampler_modes_follow_their_distributions)
{
    enum { N = 48 };
    float l[N];
    random_logits(l, N, 11, 8.0f);
    l[5] = l[9]; /* a tie, so the id order of the truncation matters */
    l[7] = NAN;
    l[30] = -INFINITY;
    struct sampler_bias bias[] = {{3, 2.5f}, {12, -100.0f}};
    struct {
        const char *name;
        float temperature, top_p, min_p;
        int top_k, n_bias;
    } cases[] = {
        {"temperature 1", 1.0f, 1.0f, 0.0f, 0, 0},
        {"temperature 0.6", 0.6f, 1.0f, 0.0f, 0, 0},
        {"temperature 1.7", 1.7f, 1.0f, 0.0f, 0, 0},
        {"top-k 10", 1.0f, 1.0f, 0.0f, 10, 0},
        {"top-p 0.8", 1.0f, 0.8f, 0.0f, 0, 0},
        {"top-p 0.5 temperature 0.7", 0.7f, 0.5f, 0.0f, 0, 0},
        {"min-p 0.05", 1.2f, 1.0f, 0.05f, 0, 0},
        {"top-k 20 top-p 0.9 min-p 0.02", 0.9f, 0.9f, 0.02f, 20, 0},
        {"top-p 0.7 min-p 0.1", 1.0f, 0.7f, 0.1f, 0, 0},
        {"logit bias", 1.0f, 1.0f, 0.0f, 0, 2},
        {"logit bias top-p 0.9", 1.0f, 0.9f, 0.0f, 0, 2},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct sampler_params p;
        sampler_params_default(&p);
        p.seed = 100 + c;
        p.temperature = cases[c].temperature;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.bias = bias;
        p.n_bias = cases[c].n_bias;
        check_distribution(l, N, &p, 60000, cases[c].name);
    }
}
END_TEST

/* A vocabulary of many blocks: the mass sits at block edges, in the last (partial) block and in a
 * long flat tail, so the block walk and its in-block re-weighing are exercised. */
START_TEST(test_sampler_large_vocabulary_draws_follow_distribution)
{
    enum { N = 32003 };
    static float l[N];
    for (int i = 0; i < N; i++) l[i] = -12.0f + (float)(i % 97) * 0.01f; /* flat tail */
    const int heavy[] = {0, 255, 256, 511, 1000, 16384, 31999, 32000, 32002};
    for (size_t i = 0; i < sizeof(heavy) / sizeof(heavy[0]); i++)
        l[heavy[i]] = 1.0f + 0.25f * (float)i;
    struct sampler_params p;
    sampler_params_default(&p);
    p.seed = 3;
    check_distribution(l, N, &p, 20000, "32003 tokens, temperature 1");
    p.top_p = 0.6f;
    check_distribution(l, N, &p, 20000, "32003 tokens, top-p 0.6");
    p.top_p = 0.999f; /* the nucleus reaches into the flat tail */
    check_distribution(l, N, &p, 20000, "32003 tokens, top-p 0.999");
    p.top_p = 1.0f;
    p.top_k = 5;
    check_distribution(l, N, &p, 20000, "32003 tokens, top-k 5");
    p.top_k = 0;
    p.min_p = 0.4f;
    check_distribution(l, N, &p, 20000, "32003 tokens, min-p 0.4");
}
END_TEST

/* A flat distribution: top-p keeps a prefix by token id among equal logits. */
START_TEST(test_sampler_top_p_ties_keep_lowest_ids)
{
    enum { N = 1000 };
    static float l[N];
    for (int i = 0; i < N; i++) l[i] = 0.5f;
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.0625f; /* 62.5 of 1000 equal weights: ids 0..62 */
    p.seed = 9;
    struct sampler *s = make(&p, N);
    bool seen[63] = {false};
    for (int i = 0; i < 20000; i++) {
        int32_t t = sample1(s, l);
        ck_assert_msg(t < 63, "token %d is outside the nucleus", t);
        seen[t] = true;
    }
    for (int i = 0; i < 63; i++) ck_assert(seen[i]);
    sampler_free(s);
}
END_TEST

START_TEST(test_sampler_logit_bias)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    struct sampler_bias ban[] = {{1, -100.0f}};
    p.bias = ban;
    p.n_bias = 1;
    struct sampler *s = make(&p, 4);
    ck_assert_int_eq(sample1(s, logits), 2);
    sampler_free(s);
    struct sampler_bias force[] = {{3, 50.0f}, {3, 1.0f}};
    p.bias = force;
    p.n_bias = 2;
    s = make(&p, 4);
    ck_assert_int_eq(sample1(s, logits), 3);
    sampler_free(s);
    /* The caller's array is copied. */
    struct sampler_bias tmp[] = {{0, 10.0f}};
    p.bias = tmp;
    p.n_bias = 1;
    s = make(&p, 4);
    tmp[0].token = 1;
    ck_assert_int_eq(sample1(s, logits), 0);
    sampler_free(s);
    /* Out of the vocabulary, non-finite, too many: refused. */
    struct sampler *bad = NULL;
    struct sampler_bias oob[] = {{4, 1.0f}};
    p.bias = oob;
    ck_assert_int_eq(sampler_new(&p, 4, &bad), ERR_INVAL);
    struct sampler_bias nan[] = {{0, NAN}};
    p.bias = nan;
    ck_assert_int_eq(sampler_new(&p, 4, &bad), ERR_INVAL);
    p.bias = NULL;
    ck_assert_int_eq(sampler_new(&p, 4, &bad), ERR_INVAL);
    p.n_bias = SAMPLER_MAX_BIAS + 1;
    ck_assert_int_eq(sampler_new(&p, 4, &bad), ERR_INVAL);
    ck_assert_ptr_null(bad);
}
END_TEST

/* Every logit non-finite but one, with each filter: that token, never an error. */
START_TEST(test_sampler_single_finite_logit_every_mode)
{
    enum { N = 700 };
    static float l[N];
    for (int i = 0; i < N; i++) l[i] = i % 2 ? NAN : -INFINITY;
    l[517] = -3.0f;
    float tk[] = {0, 5}, tp[] = {1.0f, 0.3f}, mp[] = {0, 0.5f};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) {
                struct sampler_params p;
                sampler_params_default(&p);
                p.top_k = (int)tk[a];
                p.top_p = tp[b];
                p.min_p = mp[c];
                struct sampler *s = make(&p, N);
                for (int i = 0; i < 20; i++) ck_assert_int_eq(sample1(s, l), 517);
                sampler_free(s);
            }
}
END_TEST

Suite *sampler_suite(void);
Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120); /* the distribution checks draw about a million tokens */
    tcase_add_test(tc, test_sampler_new_rejects_bad_params);
    tcase_add_test(tc, test_sampler_sample_greedy_argmax_lowest_id_on_tie);
    tcase_add_test(tc, test_sampler_greedy_matches_reference_on_large_vocabularies);
    tcase_add_test(tc, test_sampler_sample_same_seed_same_tokens);
    tcase_add_test(tc, test_sampler_sample_follows_distribution);
    tcase_add_test(tc, test_sampler_sample_top_k_top_p_min_p_truncate);
    tcase_add_test(tc, test_sampler_penalties_change_greedy_choice);
    tcase_add_test(tc, test_sampler_logprobs_of_raw_distribution);
    tcase_add_test(tc, test_sampler_logprobs_of_given_token);
    tcase_add_test(tc, test_sampler_accept_long_history);
    tcase_add_test(tc, test_sampler_top_k_large_vocab_selects_best);
    tcase_add_test(tc, test_sampler_modes_follow_their_distributions);
    tcase_add_test(tc, test_sampler_large_vocabulary_draws_follow_distribution);
    tcase_add_test(tc, test_sampler_top_p_ties_keep_lowest_ids);
    tcase_add_test(tc, test_sampler_logit_bias);
    tcase_add_test(tc, test_sampler_single_finite_logit_every_mode);
    suite_add_tcase(s, tc);
    return s;
}
