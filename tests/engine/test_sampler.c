/* Unit tests of the sampler: greedy, each truncation filter, penalties, seeding, and log-probs. */
#include "engine/sched/sampler.h"

#include "common/err.h"

#include <check.h>
#include <float.h>
#include <math.h>
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

Suite *sampler_suite(void);
Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sampler_new_rejects_bad_params);
    tcase_add_test(tc, test_sampler_sample_greedy_argmax_lowest_id_on_tie);
    tcase_add_test(tc, test_sampler_greedy_matches_reference_on_large_vocabularies);
    tcase_add_test(tc, test_sampler_sample_same_seed_same_tokens);
    tcase_add_test(tc, test_sampler_sample_follows_distribution);
    tcase_add_test(tc, test_sampler_sample_top_k_top_p_min_p_truncate);
    tcase_add_test(tc, test_sampler_penalties_change_greedy_choice);
    tcase_add_test(tc, test_sampler_logprobs_of_raw_distribution);
    tcase_add_test(tc, test_sampler_accept_long_history);
    tcase_add_test(tc, test_sampler_top_k_large_vocab_selects_best);
    suite_add_tcase(s, tc);
    return s;
}
