/* Unit tests of replica choice: the cached prefix wins at equal load, load wins when the cache
 * saves less than it costs, the bounded-load guard spills a hot prefix (and says so), ties spread
 * by the random number, session affinity is stable and bounded too, the baselines ignore the
 * cache; plus a simulation of a hot prefix over many requests that checks the bound holds. */
#include "router/router_policy.h"

#include "common/err.h"

#include <check.h>
#include <stdio.h>

/* The guard's own behaviour: no floor (1), as in the paper. */
static const struct router_policy_cfg prefix = {ROUTER_POLICY_PREFIX, 1.25, 1, 64, 1, 0.1, 0};

START_TEST(test_router_policy_prefix_beats_idle)
{
    struct router_candidate c[3] = {{0, 0, 1, 0, 0, 0}, {1, 512, 2, 0, 0, 0}, {0, 0, 3, 0, 0, 0}};
    enum router_reason why;
    /* 512 cached tokens save more than one request of load costs (64 tokens); the floor of 4
     * lets a second request join the first on an idle fleet. */
    struct router_policy_cfg floor4 = prefix;
    floor4.load_floor = 4;
    ck_assert_uint_eq(router_policy_pick(&floor4, c, 3, 600, 0, 42, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
    /* Without the floor, the bound at a total load of 1 is one request each. */
    ck_assert_uint_ne(router_policy_pick(&prefix, c, 3, 600, 0, 42, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_BOUNDED);
    c[1].load = 0;
    ck_assert_uint_eq(router_policy_pick(&prefix, c, 3, 600, 0, 42, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
    /* A short cached prefix on a loaded replica loses to an idle one. */
    c[1] = (struct router_candidate){1, 32, 2, 0, 0, 0};
    size_t k = router_policy_pick(&floor4, c, 3, 600, 0, 42, &why);
    ck_assert(k == 0 || k == 2);
    ck_assert_int_eq(why, ROUTER_REASON_LOAD); /* the cache was weighed, and lost on cost */
}
END_TEST

START_TEST(test_router_policy_least_loaded_without_cache)
{
    struct router_candidate c[3] = {{3, 0, 1, 0, 0, 0}, {1, 0, 2, 0, 0, 0}, {2, 0, 3, 0, 0, 0}};
    enum router_reason why;
    ck_assert_uint_eq(router_policy_pick(&prefix, c, 3, 100, 0, 1, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_LOAD);
    struct router_policy_cfg ll = {ROUTER_POLICY_LEAST_LOADED, 1.25, 1, 64, 1, 0.1, 0};
    c[0].cached_tokens = 96;
    ck_assert_uint_eq(router_policy_pick(&ll, c, 3, 100, 0, 1, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_LOAD);
}
END_TEST

START_TEST(test_router_policy_bound_spills_hot_prefix)
{
    /* Replica 0 holds the prompt but carries 4 of 5 requests: bound ceil(1.25 * 6 / 3) = 3. */
    struct router_candidate c[3] = {{4, 4096, 1, 0, 0, 0}, {1, 0, 2, 0, 0, 0}, {0, 0, 3, 0, 0, 0}};
    enum router_reason why;
    ck_assert_int_eq(router_policy_bound(&prefix, 5, 3), 3);
    ck_assert_uint_eq(router_policy_pick(&prefix, c, 3, 5000, 0, 9, &why), 2);
    ck_assert_int_eq(why, ROUTER_REASON_BOUNDED);
    /* The bound always leaves the least loaded replica. */
    struct router_policy_cfg tight = {ROUTER_POLICY_PREFIX, 1.0, 1, 64, 1, 0.1, 0};
    for (long total = 0; total < 100; total++)
        for (size_t n = 1; n < 9; n++) {
            long min_load = total / (long)n;
            ck_assert_int_ge(router_policy_bound(&tight, total, n), min_load + 1);
        }
    struct router_policy_cfg floor8 = {ROUTER_POLICY_PREFIX, 1.25, 8, 64, 1, 0.1, 0};
    ck_assert_int_eq(router_policy_bound(&floor8, 5, 3), 8);
    ck_assert_int_eq(router_policy_bound(&floor8, 50, 3), 22);
}
END_TEST

START_TEST(test_router_policy_ties_spread)
{
    struct router_candidate c[4] = {
        {0, 0, 1, 0, 0, 0}, {0, 0, 2, 0, 0, 0}, {0, 0, 3, 0, 0, 0}, {0, 0, 4, 0, 0, 0}};
    int hits[4] = {0};
    enum router_reason why;
    for (uint64_t r = 1; r <= 4000; r++) hits[router_policy_pick(&prefix, c, 4, 10, 0, r, &why)]++;
    for (int i = 0; i < 4; i++) ck_assert_int_gt(hits[i], 800); /* about 1000 each */
    struct router_policy_cfg rnd = {ROUTER_POLICY_RANDOM, 1.25, 1, 64, 1, 0.1, 0};
    ck_assert_uint_eq(router_policy_pick(&rnd, c, 4, 10, 0, 6, &why), 2);
    ck_assert_int_eq(why, ROUTER_REASON_RANDOM);
}
END_TEST

START_TEST(test_router_policy_session_affinity)
{
    struct router_candidate c[3] = {{0, 0, 11, 0, 0, 0}, {0, 0, 22, 0, 0, 0}, {0, 0, 33, 0, 0, 0}};
    enum router_reason why;
    uint64_t sess = router_policy_hash("user-42", 7);
    size_t first = router_policy_pick(&prefix, c, 3, 10, sess, 1, &why);
    ck_assert_int_eq(why, ROUTER_REASON_SESSION);
    for (uint64_t r = 2; r < 50; r++)
        ck_assert_uint_eq(router_policy_pick(&prefix, c, 3, 10, sess, r, &why), first);
    /* Over the bound, the session yields to the guard. */
    c[first].load = 10;
    ck_assert_uint_ne(router_policy_pick(&prefix, c, 3, 10, sess, 1, &why), first);
    ck_assert_int_ne(why, ROUTER_REASON_SESSION);
    /* Different sessions spread over replicas. */
    c[first].load = 0;
    int seen[3] = {0};
    for (int s = 0; s < 300; s++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "s%d", s);
        seen[router_policy_pick(&prefix, c, 3, 10, router_policy_hash(key, (size_t)n), 1, &why)]++;
    }
    for (int i = 0; i < 3; i++) ck_assert_int_gt(seen[i], 50);
}
END_TEST

/* Two replicas with one request each, as a request count sees them: one holds two 8k-token
 * prompts still to prefill, the other two chat turns. The queued prefill decides, even against a
 * cached prefix smaller than the queue; with weight 0 the counts alone do (the old rule). */
START_TEST(test_router_policy_queued_prefill)
{
    struct router_candidate c[2] = {{2, 0, 1, 16384, 0, 0}, {2, 0, 2, 96, 0, 0}};
    enum router_reason why;
    struct router_policy_cfg f4 = prefix;
    f4.load_floor = 4;
    ck_assert_uint_eq(router_policy_pick(&f4, c, 2, 500, 0, 7, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_LOAD);
    c[0].cached_tokens = 480; /* saves 480 of its own tokens, still queues behind 16k */
    ck_assert_uint_eq(router_policy_pick(&f4, c, 2, 500, 0, 7, &why), 1);
    c[0].queued_prefill = 0; /* the queue drained: the cache wins */
    ck_assert_uint_eq(router_policy_pick(&f4, c, 2, 500, 0, 7, &why), 0);
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
    c[0].queued_prefill = 16384;
    c[0].cached_tokens = 0;
    f4.prefill_weight = 0; /* counts only: a tie, either may win; both are seen */
    int seen[2] = {0};
    for (uint64_t r = 0; r < 64; r++) seen[router_policy_pick(&f4, c, 2, 500, 0, r, &why)]++;
    ck_assert(seen[0] > 0 && seen[1] > 0);
    /* Many candidates: the one with nothing queued wins wherever it is in the list. */
    f4.prefill_weight = 1;
    enum { MANY = 200 };
    struct router_candidate m[MANY];
    for (size_t i = 0; i < MANY; i++)
        m[i] = (struct router_candidate){.load = 1, .queued_prefill = 4096, .id_hash = i};
    m[MANY - 1].queued_prefill = 0;
    ck_assert_uint_eq(router_policy_pick(&f4, m, MANY, 500, 0, 3, &why), MANY - 1);
}
END_TEST

/* A prefix in an offload tier (host memory, a shared disk) is reuse at a tenth of a prefill: it
 * beats recomputing and loses to the KV pool at equal load; the reason is still prefix. */
START_TEST(test_router_policy_offload_tier)
{
    struct router_candidate c[3] = {
        {.load = 0, .cached_tokens = 512, .id_hash = 1},
        {.load = 0, .offload_tokens = 512, .id_hash = 2},
        {.load = 0, .id_hash = 3},
    };
    enum router_reason why;
    struct router_policy_cfg f4 = prefix;
    f4.load_floor = 4;
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 600, 0, 5, &why), 0); /* 88 < 139.2 < 600 */
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
    c[0].load = 2; /* 88 + 128 > 88 + 51.2 */
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 600, 0, 5, &why), 1);
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
    c[1].offload_tokens = 0; /* gone from the tier: the pool again, loaded or not */
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 600, 0, 5, &why), 0);
    /* Weight 1: offloaded tokens cost as much as computing them. */
    c[1].offload_tokens = 512;
    c[0].load = 0;
    f4.offload_weight = 1;
    f4.load_weight = 0;
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 600, 0, 5, &why), 0);
}
END_TEST

/* An idle fleet: replica 0 holds a 16-token prefix every request shares and its KV pool is full,
 * the others are empty. Without the eviction term the 16 cached tokens win every time (and the
 * one cache churns); with it a request that would evict more than it reuses goes to an empty
 * replica, while one whose conversation replica 0 holds still goes there. */
START_TEST(test_router_policy_eviction_spreads_an_idle_fleet)
{
    struct router_candidate c[3] = {
        {.cached_tokens = 16, .evict_tokens = 224, .id_hash = 1},
        {.id_hash = 2},
        {.id_hash = 3},
    };
    enum router_reason why;
    struct router_policy_cfg f4 = prefix;
    f4.load_floor = 4;
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 240, 0, 9, &why), 0); /* weight 0: cache */
    f4.evict_weight = 0.5;                                                /* 224 + 112 > 240 */
    ck_assert_uint_ne(router_policy_pick(&f4, c, 3, 240, 0, 9, &why), 0);
    ck_assert_int_eq(why, ROUTER_REASON_LOAD);
    c[0].cached_tokens = 224; /* a later turn of a conversation replica 0 holds */
    c[0].evict_tokens = 16;   /* 16 + 8 < 240 */
    ck_assert_uint_eq(router_policy_pick(&f4, c, 3, 240, 0, 9, &why), 0);
    ck_assert_int_eq(why, ROUTER_REASON_PREFIX);
}
END_TEST

/* Every request shares one long prefix cached on replica 0; requests finish after 8 more
 * arrivals. The guard must keep every replica within its bound at every pick. */
START_TEST(test_router_policy_hot_prefix_simulation)
{
    enum { N = 3, STEPS = 600, LIFE = 8 };
    struct router_candidate c[N] = {{0, 8192, 1, 0, 0, 0}, {0, 0, 2, 0, 0, 0}, {0, 0, 3, 0, 0, 0}};
    int owner[STEPS];
    int picked[N] = {0};
    enum router_reason why;
    for (int t = 0; t < STEPS; t++) {
        if (t >= LIFE) c[owner[t - LIFE]].load--;
        long total = 0;
        for (int i = 0; i < N; i++) total += c[i].load;
        int bound = router_policy_bound(&prefix, total, N);
        size_t k = router_policy_pick(&prefix, c, N, 9000, 0, (uint64_t)t * 7919u, &why);
        ck_assert_int_le(c[k].load + 1, bound);
        c[k].load++;
        owner[t] = (int)k;
        picked[k]++;
        /* Once served elsewhere, the prefix is cached there too (as a real engine would). */
        c[k].cached_tokens = 8192;
    }
    for (int i = 0; i < N; i++) ck_assert_int_gt(picked[i], STEPS / N / 2);
}
END_TEST

START_TEST(test_router_policy_parse_and_names)
{
    enum router_policy p;
    ck_assert_int_eq(router_policy_parse("prefix", &p), 0);
    ck_assert_int_eq(p, ROUTER_POLICY_PREFIX);
    ck_assert_int_eq(router_policy_parse("least-loaded", &p), 0);
    ck_assert_int_eq(p, ROUTER_POLICY_LEAST_LOADED);
    ck_assert_int_eq(router_policy_parse("random", &p), 0);
    ck_assert_int_eq(router_policy_parse("round-robin", &p), ERR_INVAL);
    ck_assert_int_eq(router_policy_parse(NULL, &p), ERR_INVAL);
    ck_assert_str_eq(router_reason_name(ROUTER_REASON_BOUNDED), "bounded");
    ck_assert_str_eq(router_reason_name(ROUTER_REASON_COUNT), "?");
    ck_assert_uint_ne(router_policy_hash("a", 1), router_policy_hash("b", 1));
}
END_TEST

Suite *router_policy_suite(void)
{
    Suite *s = suite_create("router_policy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_router_policy_prefix_beats_idle);
    tcase_add_test(tc, test_router_policy_least_loaded_without_cache);
    tcase_add_test(tc, test_router_policy_bound_spills_hot_prefix);
    tcase_add_test(tc, test_router_policy_ties_spread);
    tcase_add_test(tc, test_router_policy_session_affinity);
    tcase_add_test(tc, test_router_policy_hot_prefix_simulation);
    tcase_add_test(tc, test_router_policy_queued_prefill);
    tcase_add_test(tc, test_router_policy_offload_tier);
    tcase_add_test(tc, test_router_policy_eviction_spreads_an_idle_fleet);
    tcase_add_test(tc, test_router_policy_parse_and_names);
    suite_add_tcase(s, tc);
    return s;
}
