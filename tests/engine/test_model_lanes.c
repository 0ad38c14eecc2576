/* Unit tests of how a forward step splits into lanes (model_lanes_plan): alike decodes split evenly,
 * uneven contexts move the cut, a prefill chunk or too few tokens keep the step whole, and every
 * plan covers all entries in order with none empty. */
#include "engine/model/model_priv.h"

#include <check.h>
#include <stdlib.h>

#define MAX_EN 64

static const int32_t tok[MAX_EN]; /* the plan never reads the ids */

/* n entries of n_tokens tokens each at position pos. */
static void decodes(struct model_batch_entry *en, int n, int pos, int n_tokens)
{
    for (int i = 0; i < n; i++)
        en[i] = (struct model_batch_entry){i, pos, n_tokens, tok, MODEL_LOGITS_LAST};
}

/* A plan's lanes cover entries 0..n-1 in order, each lane non-empty. */
static void check_cover(const int *first, int lanes, int n)
{
    ck_assert_int_eq(first[0], 0);
    ck_assert_int_eq(first[lanes], n);
    for (int l = 0; l < lanes; l++) ck_assert_int_lt(first[l], first[l + 1]);
}

START_TEST(test_lanes_alike_decodes_split_evenly)
{
    struct model_batch_entry en[MAX_EN];
    int first[9];
    decodes(en, 16, 200, 1);
    ck_assert_int_eq(model_lanes_plan(en, 16, 2, first), 2);
    check_cover(first, 2, 16);
    ck_assert_int_eq(first[1], 8);

    decodes(en, 64, 200, 1);
    ck_assert_int_eq(model_lanes_plan(en, 64, 4, first), 4);
    check_cover(first, 4, 64);
    for (int l = 0; l < 4; l++) ck_assert_int_eq(first[l + 1] - first[l], 16);

    decodes(en, 17, 0, 1); /* odd count: 8 + 9 or 9 + 8 */
    ck_assert_int_eq(model_lanes_plan(en, 17, 2, first), 2);
    check_cover(first, 2, 17);
    ck_assert(first[1] == 8 || first[1] == 9);
}
END_TEST

START_TEST(test_lanes_cut_follows_context)
{
    /* Sixteen long contexts then sixteen short ones: the long ones cost more, so the first lane
     * holds fewer entries than the second. */
    struct model_batch_entry en[MAX_EN];
    int first[3];
    decodes(en, 32, 1000, 1);
    for (int i = 16; i < 32; i++) en[i].pos = 10;
    ck_assert_int_eq(model_lanes_plan(en, 32, 2, first), 2);
    check_cover(first, 2, 32);
    ck_assert_int_lt(first[1], 16);
}
END_TEST

START_TEST(test_lanes_keep_prefill_whole)
{
    /* A 512-token prefill chunk among fifteen decodes outweighs them all: no even split exists. */
    struct model_batch_entry en[MAX_EN];
    int first[3];
    decodes(en, 16, 100, 1);
    en[7].n_tokens = 512;
    ck_assert_int_eq(model_lanes_plan(en, 16, 2, first), 1);
    check_cover(first, 1, 16);

    /* Two equal chunks do balance. */
    decodes(en, 2, 0, 64);
    ck_assert_int_eq(model_lanes_plan(en, 2, 2, first), 2);
    check_cover(first, 2, 2);
}
END_TEST

START_TEST(test_lanes_need_tokens_and_threads)
{
    struct model_batch_entry en[MAX_EN];
    int first[65];
    decodes(en, 16, 100, 1);
    ck_assert_int_eq(model_lanes_plan(en, 16, 1, first), 1); /* one thread */
    check_cover(first, 1, 16);
    ck_assert_int_eq(model_lanes_plan(en, 1, 2, first), 1); /* one entry */
    check_cover(first, 1, 1);
    /* fewer than MODEL_LANE_MIN_TOKENS tokens per lane */
    ck_assert_int_eq(model_lanes_plan(en, 2 * MODEL_LANE_MIN_TOKENS - 1, 2, first), 1);
    ck_assert_int_eq(model_lanes_plan(en, 2 * MODEL_LANE_MIN_TOKENS, 2, first), 2);
    /* more threads than the step can fill: no split rather than idle threads */
    ck_assert_int_eq(model_lanes_plan(en, 16, 64, first), 1);
    check_cover(first, 1, 16);
}
END_TEST

START_TEST(test_lanes_random_plans_cover_entries)
{
    /* Random mixes of decodes and chunks: whatever the plan, it covers the entries in order, and
     * every lane of a split has at least the minimum of tokens. */
    struct model_batch_entry en[MAX_EN];
    int first[9];
    unsigned x = 12345u;
    for (int iter = 0; iter < 2000; iter++) {
        x = x * 1103515245u + 12345u;
        int n = 1 + (int)(x >> 16) % MAX_EN;
        for (int i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            int nt = (x >> 16) % 8 == 0 ? 1 + (int)(x >> 20) % 300 : 1;
            en[i] = (struct model_batch_entry){i, (int)(x >> 8) % 2000, nt, tok, MODEL_LOGITS_LAST};
        }
        int lanes_max = 1 + iter % 8;
        int lanes = model_lanes_plan(en, n, lanes_max, first);
        ck_assert(lanes == 1 || lanes == lanes_max);
        check_cover(first, lanes, n);
        if (lanes == 1) continue;
        for (int l = 0; l < lanes; l++) {
            int tokens = 0;
            for (int i = first[l]; i < first[l + 1]; i++) tokens += en[i].n_tokens;
            ck_assert_int_ge(tokens, MODEL_LANE_MIN_TOKENS);
        }
    }
}
END_TEST

Suite *model_lanes_suite(void);
Suite *model_lanes_suite(void)
{
    Suite *s = suite_create("model_lanes");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_lanes_alike_decodes_split_evenly);
    tcase_add_test(tc, test_lanes_cut_follows_context);
    tcase_add_test(tc, test_lanes_keep_prefill_whole);
    tcase_add_test(tc, test_lanes_need_tokens_and_threads);
    tcase_add_test(tc, test_lanes_random_plans_cover_entries);
    suite_add_tcase(s, tc);
    return s;
}
