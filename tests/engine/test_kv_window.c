/* Unit tests of sink-window eviction's bookkeeping: the policy (kv_window.c: which blocks, the
 * bounds, the flag and field checks) and kv_cache_seq_evict (blocks released, the table moved
 * down, shared moved blocks refused, nothing leaked at close). */
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_window.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static struct kv_cache *make(int n_blocks, int bs, int max_seqs, int max_bps)
{
    struct kv_cache_config cfg = {n_blocks, bs, max_seqs, max_bps};
    struct kv_cache *kv = NULL;
    ck_assert_int_eq(kv_cache_new(&cfg, &kv), 0);
    return kv;
}

static struct kv_window sink(int s, int w)
{
    return (struct kv_window){KV_WINDOW_SINK, s, w};
}

START_TEST(test_kv_window_mode_parse_names)
{
    enum kv_window_mode m = KV_WINDOW_SINK;
    ck_assert(kv_window_mode_parse("none", &m));
    ck_assert_int_eq(m, KV_WINDOW_NONE);
    ck_assert(kv_window_mode_parse("sink-window", &m));
    ck_assert_int_eq(m, KV_WINDOW_SINK);
    ck_assert_str_eq(kv_window_mode_name(m), "sink-window");
    const char *bad[] = {"", "Sink-Window", "sink", "sink-window ", "window"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert(!kv_window_mode_parse(bad[i], &m));
    ck_assert(!kv_window_mode_parse(NULL, &m));
    struct kv_window d;
    kv_window_default(&d);
    ck_assert_int_eq(d.mode, KV_WINDOW_NONE);
    ck_assert_int_eq(d.sink_tokens, KV_WINDOW_DEFAULT_SINK_TOKENS);
    ck_assert_int_eq(d.window_tokens, KV_WINDOW_DEFAULT_WINDOW_TOKENS);
}
END_TEST

START_TEST(test_kv_window_check_rejects_bad_sizes)
{
    char err[256] = "";
    struct kv_window w = sink(4, 64);
    ck_assert_int_eq(kv_window_check(&w, 16, 1024, 16, err, sizeof(err)), 0);
    /* 16 (one sink block) + 64 + 15 + 16 = 111 tokens */
    ck_assert_int_eq(kv_window_max_tokens(&w, 16, 16), 111);
    ck_assert_int_eq(kv_window_check(&w, 16, 111, 16, err, sizeof(err)), 0);
    ck_assert_int_eq(kv_window_check(&w, 16, 110, 16, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "exceed the 110"));
    struct kv_window bad[] = {sink(-1, 64),
                              sink(4, 0),
                              sink(4, -5),
                              sink(KV_WINDOW_MAX_TOKENS + 1, 8),
                              sink(0, KV_WINDOW_MAX_TOKENS + 1),
                              {(enum kv_window_mode)7, 4, 64}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        ck_assert_int_eq(kv_window_check(&bad[i], 16, 1 << 30, 16, err, sizeof(err)), ERR_INVAL);
        ck_assert(err[0] != 0);
    }
    struct kv_window none = {KV_WINDOW_NONE, -1, -1}; /* sizes unused */
    ck_assert_int_eq(kv_window_check(&none, 16, 1, 1, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_kv_window_plan_drops_whole_blocks_after_sinks)
{
    int first = -1;
    struct kv_window w = sink(4, 20); /* one sink block of 8 */
    ck_assert_int_eq(kv_window_sink_blocks(&w, 8), 1);
    /* 8 sink + 27 tokens: dropping 8 would leave 19 < 20 */
    ck_assert_int_eq(kv_window_plan(&w, 8, 35, &first), 0);
    ck_assert_int_eq(kv_window_plan(&w, 8, 36, &first), 1); /* leaves exactly 20 */
    ck_assert_int_eq(first, 1);
    ck_assert_int_eq(kv_window_plan(&w, 8, 8 + 20 + 8 * 5, &first), 5);
    struct kv_window none = {KV_WINDOW_NONE, 4, 20};
    ck_assert_int_eq(kv_window_plan(&none, 8, 1000, &first), 0);
    struct kv_window nosink = sink(0, 8);
    ck_assert_int_eq(kv_window_plan(&nosink, 8, 16, &first), 1);
    ck_assert_int_eq(first, 0);
    struct kv_window two = sink(9, 8);                        /* 9 sink tokens: two blocks */
    ck_assert_int_eq(kv_window_plan(&two, 8, 40, &first), 2); /* 24 after the sinks */
    ck_assert_int_eq(first, 2);
}
END_TEST

START_TEST(test_kv_cache_seq_evict_releases_and_moves_blocks)
{
    struct kv_cache *kv = make(8, 4, 2, 8);
    int s;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 18, &cp), 0); /* blocks 0..4, last holds 2 */
    int n;
    const int32_t *t = kv_cache_seq_blocks(kv, s, &n);
    int32_t before[8];
    memcpy(before, t, sizeof(int32_t) * (size_t)n);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 1, 2), 0);
    t = kv_cache_seq_blocks(kv, s, &n);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(t[0], before[0]);
    ck_assert_int_eq(t[1], before[3]);
    ck_assert_int_eq(t[2], before[4]);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 10);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    ck_assert_int_eq(kv_cache_block_refcount(kv, before[1]), 0);
    /* position 9 is now slot 1 of the old last block */
    ck_assert_int_eq(kv_cache_seq_slot(kv, s, 9), (int64_t)before[4] * 4 + 1);
    /* the sequence goes on appending into its partial last block */
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 2, &cp), 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 0, 0), 0); /* no-op */
    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_seq_evict_rejects_bad_ranges)
{
    struct kv_cache *kv = make(8, 4, 2, 8);
    int s, f;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 10, &cp), 0); /* 3 blocks, the last partial */
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, -1, 1), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 0, -1), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 2, 2), ERR_INVAL); /* past the table */
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 2, 1), ERR_INVAL); /* partial block */
    /* a fork shares every block: the ones that would move are immutable */
    ck_assert_int_eq(kv_cache_seq_fork(kv, s, &f), 0);
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 0, 1), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 10);
    kv_cache_seq_close(kv, f);
    /* a shared dropped block just loses this owner */
    ck_assert_int_eq(kv_cache_seq_fork(kv, s, &f), 0);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, f, 4), 0); /* f keeps block 0 only */
    ck_assert_int_eq(kv_cache_seq_evict(kv, s, 0, 1), 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    kv_cache_seq_close(kv, s);
    kv_cache_seq_close(kv, f);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

/* A sink-window sequence fed far past what its table and the pool could hold without eviction
 * stays within the bound, in a constant number of blocks once the window is full. */
START_TEST(test_kv_window_blocks_bounded_while_growing)
{
    struct kv_window w = sink(4, 24);
    int bs = 8, chunk = 3;
    long max_tok = kv_window_max_tokens(&w, bs, chunk);
    int max_blocks = (int)((max_tok + bs - 1) / bs);
    struct kv_cache *kv = make(max_blocks, bs, 1, max_blocks);
    int s, steady = -1;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    long fed = 0;
    for (int step = 0; step < 400; step++) {
        int first, n = kv_window_plan(&w, bs, kv_cache_seq_len(kv, s), &first);
        ck_assert_int_eq(kv_cache_seq_evict(kv, s, first, n), 0);
        ck_assert_int_eq(kv_cache_seq_append(kv, s, chunk, &cp), 0);
        fed += chunk;
        ck_assert_int_le(kv_cache_seq_len(kv, s), max_tok);
        ck_assert_int_le(kv_cache_blocks_used(kv), max_blocks);
        if (step == 100) steady = kv_cache_blocks_used(kv);
        if (step > 100) ck_assert_int_le(abs(kv_cache_blocks_used(kv) - steady), 1);
    }
    ck_assert_int_gt(fed, 1000); /* 10x the pool's tokens */
    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

Suite *kv_window_suite(void);
Suite *kv_window_suite(void)
{
    Suite *s = suite_create("kv_window");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kv_window_mode_parse_names);
    tcase_add_test(tc, test_kv_window_check_rejects_bad_sizes);
    tcase_add_test(tc, test_kv_window_plan_drops_whole_blocks_after_sinks);
    tcase_add_test(tc, test_kv_cache_seq_evict_releases_and_moves_blocks);
    tcase_add_test(tc, test_kv_cache_seq_evict_rejects_bad_ranges);
    tcase_add_test(tc, test_kv_window_blocks_bounded_while_growing);
    suite_add_tcase(s, tc);
    return s;
}
