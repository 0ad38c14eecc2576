/* Unit tests of the paged KV-cache manager: allocation on append, exhaustion, sharing with refcounts,
 * copy-on-write of shared partial blocks, and no leaked blocks after every sequence is closed. */
#include "engine/kv/kv_cache.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>

static struct kv_cache *make(int n_blocks, int bs, int max_seqs, int max_bps)
{
    struct kv_cache_config cfg = {n_blocks, bs, max_seqs, max_bps};
    struct kv_cache *kv = NULL;
    ck_assert_int_eq(kv_cache_new(&cfg, &kv), 0);
    return kv;
}

START_TEST(test_kv_cache_new_rejects_bad_config)
{
    struct kv_cache *kv = NULL;
    struct kv_cache_config bad[] = {
        {0, 16, 1, 1}, {4, 0, 1, 1}, {4, 16, 0, 1}, {4, 16, 1, 0}, {-1, 16, 1, 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(kv_cache_new(&bad[i], &kv), ERR_INVAL);
    ck_assert_int_eq(kv_cache_new(NULL, &kv), ERR_INVAL);
    ck_assert_ptr_null(kv);
    kv_cache_free(NULL);
}
END_TEST

START_TEST(test_kv_cache_blocks_for_budget_sizes_pool)
{
    ck_assert_int_eq(kv_cache_blocks_for_budget(1000, 10, 16), 6); /* 160 bytes per block */
    ck_assert_int_eq(kv_cache_blocks_for_budget(159, 10, 16), 0);
    ck_assert_int_eq(kv_cache_blocks_for_budget(1000, 0, 16), 0);
    ck_assert_int_eq(kv_cache_blocks_for_budget(1000, 10, 0), 0);
    ck_assert_int_eq(kv_cache_blocks_for_budget(UINT64_MAX, UINT64_MAX / 2, 16), 0); /* overflow */
    ck_assert_int_eq(kv_cache_blocks_for_budget(UINT64_MAX, 1, 1), INT32_MAX);
    uint64_t all = kv_cache_ram_budget(1.0), half = kv_cache_ram_budget(0.5);
    ck_assert(all > 0);
    ck_assert(half > all / 2 - 4096 && half < all / 2 + 4096);
    ck_assert_int_eq(kv_cache_ram_budget(0.0), 0);
    ck_assert_int_eq(kv_cache_ram_budget(1.5), 0);
    ck_assert_int_eq(kv_cache_ram_budget(-0.1), 0);
}
END_TEST

START_TEST(test_kv_cache_blocks_for_pools_splits_by_bytes_per_token)
{
    /* a target of 30 bytes a token and a draft of 10: 640 bytes a block for both, 15 blocks each
     * in 10000 bytes, the target 7200 bytes, the draft 2400 (3:1), 9600 in all */
    uint64_t pt[2] = {30, 10};
    int64_t n = kv_cache_blocks_for_pools(10000, pt, 2, 16);
    ck_assert_int_eq(n, 15);
    ck_assert_uint_le((uint64_t)n * 16 * (pt[0] + pt[1]), 10000);
    ck_assert_uint_gt((uint64_t)(n + 1) * 16 * (pt[0] + pt[1]), 10000);
    /* one pool: the single-pool rule */
    for (uint64_t b = 0; b < 5000; b += 97)
        ck_assert_int_eq(kv_cache_blocks_for_pools(b, pt, 1, 16),
                         kv_cache_blocks_for_budget(b, 30, 16));
    /* never over the budget, whatever the sizes */
    for (uint64_t b = 1; b < 200000; b = b * 3 + 7)
        for (uint64_t d = 0; d < 50; d += 7) {
            uint64_t q[2] = {40, d};
            int64_t m = kv_cache_blocks_for_pools(b, q, 2, 16);
            ck_assert_uint_le((uint64_t)m * 16 * (40 + d), b);
        }
    /* one block each does not fit; a sum that overflows */
    ck_assert_int_eq(kv_cache_blocks_for_pools(639, pt, 2, 16), 0);
    uint64_t big[2] = {UINT64_MAX - 1, 2};
    ck_assert_int_eq(kv_cache_blocks_for_pools(UINT64_MAX, big, 2, 1), 0);
    ck_assert_int_eq(kv_cache_blocks_for_pools(1000, pt, 2, 0), 0);
}
END_TEST

START_TEST(test_kv_cache_seq_append_allocates_on_demand)
{
    struct kv_cache *kv = make(8, 4, 2, 8);
    int s;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    ck_assert_int_eq(kv_cache_seq_blocks_needed(kv, s, 5), 2);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 5, &cp), 0);
    ck_assert_int_eq(cp.n, 0);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 5);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2);
    ck_assert_int_eq(kv_cache_seq_blocks_needed(kv, s, 3), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 3, &cp), 0); /* fills block 2 exactly */
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 1, &cp), 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 0, &cp), 0);

    int n;
    const int32_t *bt = kv_cache_seq_blocks(kv, s, &n);
    ck_assert_int_eq(n, 3);
    ck_assert(kv_cache_block_is_full(kv, bt[0]));
    ck_assert(kv_cache_block_is_full(kv, bt[1]));
    ck_assert(!kv_cache_block_is_full(kv, bt[2]));
    for (int pos = 0; pos < 9; pos++)
        ck_assert_int_eq(kv_cache_seq_slot(kv, s, pos), (int64_t)bt[pos / 4] * 4 + pos % 4);
    ck_assert(kv_cache_usage(kv) > 0.37 && kv_cache_usage(kv) < 0.38);

    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    ck_assert(!kv_cache_seq_is_open(kv, s));
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_seq_append_exhaustion_is_all_or_nothing)
{
    struct kv_cache *kv = make(4, 4, 2, 16);
    int a, b;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &a), 0);
    ck_assert_int_eq(kv_cache_seq_open(kv, &b), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 10, &cp), 0);        /* 3 blocks */
    ck_assert_int_eq(kv_cache_seq_append(kv, b, 5, &cp), ERR_AGAIN); /* needs 2, 1 free */
    ck_assert_int_eq(kv_cache_seq_len(kv, b), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 1);
    ck_assert_int_eq(kv_cache_seq_append(kv, b, 4, &cp), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 2, &cp), 0); /* fits in a's partial block */
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 1, &cp), ERR_AGAIN);
    ck_assert_int_eq(kv_cache_seq_len(kv, a), 12);
    kv_cache_seq_close(kv, b);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 1, &cp), 0);
    kv_cache_seq_close(kv, a);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_seq_append_table_overflow)
{
    struct kv_cache *kv = make(16, 4, 1, 2);
    int s;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 9, &cp), ERR_RANGE);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 8, &cp), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 1, &cp), ERR_RANGE);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, -1, &cp), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 8);
    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_seq_open_exhausts_ids)
{
    struct kv_cache *kv = make(4, 4, 3, 4);
    int s[3], extra;
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kv_cache_seq_open(kv, &s[i]), 0);
    ck_assert(s[0] != s[1] && s[1] != s[2] && s[0] != s[2]);
    ck_assert_int_eq(kv_cache_seq_open(kv, &extra), ERR_AGAIN);
    kv_cache_seq_close(kv, s[1]);
    ck_assert_int_eq(kv_cache_seq_open(kv, &extra), 0);
    ck_assert_int_eq(extra, s[1]);
    ck_assert_int_eq(kv_cache_seq_len(kv, extra), 0);
    kv_cache_free(kv); /* frees open sequences too (ASan checks) */
}
END_TEST

START_TEST(test_kv_cache_seq_fork_shares_and_copies_on_write)
{
    struct kv_cache *kv = make(8, 4, 4, 8);
    int a, b;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &a), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 6, &cp), 0); /* one full + one partial block */
    ck_assert_int_eq(kv_cache_seq_fork(kv, a, &b), 0);
    ck_assert_int_eq(kv_cache_seq_len(kv, b), 6);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2);
    int na, nb;
    const int32_t *ta = kv_cache_seq_blocks(kv, a, &na);
    int32_t full = ta[0], partial = ta[1];
    ck_assert_int_eq(kv_cache_block_refcount(kv, full), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, partial), 2);

    /* b appends first: its partial block is shared, so it gets a private copy. */
    ck_assert_int_eq(kv_cache_seq_blocks_needed(kv, b, 1), 1);
    ck_assert_int_eq(kv_cache_seq_append(kv, b, 1, &cp), 0);
    ck_assert_int_eq(cp.n, 1);
    ck_assert_int_eq(cp.src, partial);
    ck_assert(cp.dst != partial && cp.dst != full);
    const int32_t *tb = kv_cache_seq_blocks(kv, b, &nb);
    ck_assert_int_eq(nb, 2);
    ck_assert_int_eq(tb[0], full);
    ck_assert_int_eq(tb[1], cp.dst);
    ck_assert_int_eq(kv_cache_block_refcount(kv, partial), 1);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    ck_assert_int_eq(kv_cache_seq_slot(kv, b, 6), (int64_t)cp.dst * 4 + 2);

    /* a now owns the old partial block alone: no copy. */
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 2, &cp), 0);
    ck_assert_int_eq(cp.n, 0);
    ck_assert(kv_cache_block_is_full(kv, partial));

    /* Appending with a shared partial block and no copy out-parameter is refused. */
    int c;
    ck_assert_int_eq(kv_cache_seq_fork(kv, b, &c), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, c, 1, NULL), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_len(kv, c), 7);

    kv_cache_seq_close(kv, a);
    ck_assert_int_eq(kv_cache_block_refcount(kv, full), 2);
    kv_cache_seq_close(kv, b);
    kv_cache_seq_close(kv, c);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_fork_fails_without_free_id)
{
    struct kv_cache *kv = make(4, 4, 1, 4);
    int a, b;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &a), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 4, &cp), 0);
    ck_assert_int_eq(kv_cache_seq_fork(kv, a, &b), ERR_AGAIN);
    ck_assert_int_eq(kv_cache_block_refcount(kv, kv_cache_seq_blocks(kv, a, &b)[0]), 1);
    kv_cache_seq_close(kv, a);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_cache_seq_attach_shares_full_blocks)
{
    struct kv_cache *kv = make(8, 4, 3, 8);
    int a, b, n;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &a), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, a, 10, &cp), 0);
    const int32_t *ta = kv_cache_seq_blocks(kv, a, &n);
    int32_t prefix[3] = {ta[0], ta[1], ta[2]};

    /* A prefix cache keeps its own reference to the two full blocks. */
    ck_assert_int_eq(kv_cache_block_hold(kv, prefix[0]), 0);
    ck_assert_int_eq(kv_cache_block_hold(kv, prefix[1]), 0);
    ck_assert_int_eq(kv_cache_block_hold(kv, prefix[1]), ERR_INVAL); /* one hold per block */
    ck_assert_int_eq(kv_cache_block_hold(kv, 99), ERR_INVAL);
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 0); /* a still uses them */

    ck_assert_int_eq(kv_cache_seq_open(kv, &b), 0);
    ck_assert_int_eq(kv_cache_seq_attach(kv, b, prefix, 3), ERR_INVAL); /* third is partial */
    ck_assert_int_eq(kv_cache_seq_len(kv, b), 0);
    ck_assert_int_eq(kv_cache_seq_attach(kv, b, prefix, 2), 0);
    ck_assert_int_eq(kv_cache_seq_len(kv, b), 8);
    ck_assert_int_eq(kv_cache_block_refcount(kv, prefix[0]), 3);
    /* b appends past the shared blocks into a fresh block, never into a shared one. */
    ck_assert_int_eq(kv_cache_seq_append(kv, b, 1, &cp), 0);
    ck_assert_int_eq(cp.n, 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 4);
    /* b is no longer block aligned. */
    ck_assert_int_eq(kv_cache_seq_attach(kv, b, prefix, 1), ERR_INVAL);

    kv_cache_seq_close(kv, a);
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 0); /* b still uses them */
    kv_cache_seq_close(kv, b);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2); /* still held by the "prefix cache" */
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 2);
    kv_cache_block_release(kv, prefix[0]);
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 1);
    kv_cache_block_release(kv, prefix[1]);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 0);
    ck_assert(!kv_cache_block_is_full(kv, prefix[0])); /* freed blocks are not full */
    kv_cache_free(kv);
}
END_TEST

/* Speculative decoding's rollback: blocks past the new length go back to the pool, the last kept
 * block counts only the kept slots, a later append rewrites the cut ones, and a cut inside a block
 * another owner shares is refused with nothing changed. */
START_TEST(test_kv_cache_seq_truncate_returns_blocks)
{
    struct kv_cache *kv = make(8, 4, 2, 8);
    int s;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 6, NULL), 0); /* 2 blocks */
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 7, NULL), 0); /* 13 tokens: 4 blocks */
    ck_assert_int_eq(kv_cache_blocks_used(kv), 4);
    int n;
    const int32_t *bt = kv_cache_seq_blocks(kv, s, &n);
    int32_t third = bt[2];
    ck_assert(kv_cache_block_is_full(kv, third));
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 9), 0);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 9);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 3);
    ck_assert(!kv_cache_block_is_full(kv, third)); /* 1 of its 4 slots kept */
    ck_assert_int_eq(kv_cache_seq_blocks_needed(kv, s, 3), 0);
    ck_assert_int_eq(kv_cache_seq_blocks_needed(kv, s, 4), 1);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 3, NULL), 0);
    ck_assert(kv_cache_block_is_full(kv, third));
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 8), 0); /* block aligned: third is released */
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, third), 0);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 9), ERR_INVAL); /* past the end */
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, -1), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 8), 0); /* no-op */

    /* A fork shares both blocks: cutting inside the second would change the other's data. */
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 6), 0); /* private so far: fine */
    int f;
    ck_assert_int_eq(kv_cache_seq_fork(kv, s, &f), 0);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 5), ERR_INVAL);
    ck_assert_int_eq(kv_cache_seq_len(kv, s), 6);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 4),
                     0); /* drops its reference to the shared one */
    ck_assert_int_eq(kv_cache_blocks_used(kv), 2);
    ck_assert_int_eq(kv_cache_seq_len(kv, f), 6);
    ck_assert_int_eq(kv_cache_seq_truncate(kv, s, 0), 0);
    kv_cache_seq_close(kv, f);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_seq_close(kv, s);
    kv_cache_free(kv);
}
END_TEST

/* Random open/append/fork/close/hold/release churn: the pool never leaks, refcounts stay
 * consistent, and the count of held blocks no sequence uses matches a recount every step. */
START_TEST(test_kv_cache_random_churn_no_leaks)
{
    struct kv_cache *kv = make(64, 4, 8, 32);
    unsigned seed = 12345;
    bool held[64] = {false};
    for (int it = 0; it < 5000; it++) {
        int op = (int)(rand_r(&seed) % 6);
        int32_t blk = (int32_t)(rand_r(&seed) % 64);
        int s = (int)(rand_r(&seed) % 8);
        struct kv_cache_copy cp;
        if (op == 0 && !kv_cache_seq_is_open(kv, s)) {
            int t;
            ck_assert_int_eq(kv_cache_seq_open(kv, &t), 0);
        } else if (op == 1 && kv_cache_seq_is_open(kv, s)) {
            int n = (int)(rand_r(&seed) % 9);
            int need = kv_cache_seq_blocks_needed(kv, s, n);
            int free_before = kv_cache_blocks_free(kv);
            int rc = kv_cache_seq_append(kv, s, n, &cp);
            if (rc == 0)
                ck_assert_int_eq(kv_cache_blocks_free(kv), free_before - need);
            else
                ck_assert(rc == ERR_AGAIN || rc == ERR_RANGE);
        } else if (op == 2 && kv_cache_seq_is_open(kv, s)) {
            int t;
            (void)kv_cache_seq_fork(kv, s, &t);
        } else if (op == 3 && kv_cache_seq_is_open(kv, s)) {
            kv_cache_seq_close(kv, s);
        } else if (op == 4) {
            int rc = kv_cache_block_hold(kv, blk);
            ck_assert_int_eq(rc,
                             held[blk] || kv_cache_block_refcount(kv, blk) == 0 ? ERR_INVAL : 0);
            held[blk] = held[blk] || rc == 0;
        } else if (op == 5 && held[blk]) {
            kv_cache_block_release(kv, blk);
            held[blk] = false;
        }
        /* Invariant: sum of refcounts == sum of block-table lengths + holds. */
        long refs = 0, owned = 0;
        int alone = 0;
        for (int b = 0; b < 64; b++) {
            refs += kv_cache_block_refcount(kv, b);
            owned += held[b];
            alone += held[b] && kv_cache_block_refcount(kv, b) == 1;
        }
        ck_assert_int_eq(kv_cache_blocks_held_alone(kv), alone);
        for (int q = 0; q < 8; q++) {
            if (!kv_cache_seq_is_open(kv, q)) continue;
            int n;
            (void)kv_cache_seq_blocks(kv, q, &n);
            owned += n;
        }
        ck_assert_int_eq(refs, owned);
    }
    for (int q = 0; q < 8; q++)
        if (kv_cache_seq_is_open(kv, q)) kv_cache_seq_close(kv, q);
    int n_held = 0;
    for (int b = 0; b < 64; b++) n_held += held[b];
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), n_held); /* only holds remain */
    for (int b = 0; b < 64; b++)
        if (held[b]) kv_cache_block_release(kv, b);
    ck_assert_int_eq(kv_cache_blocks_held_alone(kv), 0);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 64);
    kv_cache_free(kv);
}
END_TEST

Suite *kv_cache_suite(void);
Suite *kv_cache_suite(void)
{
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kv_cache_new_rejects_bad_config);
    tcase_add_test(tc, test_kv_cache_blocks_for_budget_sizes_pool);
    tcase_add_test(tc, test_kv_cache_blocks_for_pools_splits_by_bytes_per_token);
    tcase_add_test(tc, test_kv_cache_seq_append_allocates_on_demand);
    tcase_add_test(tc, test_kv_cache_seq_append_exhaustion_is_all_or_nothing);
    tcase_add_test(tc, test_kv_cache_seq_append_table_overflow);
    tcase_add_test(tc, test_kv_cache_seq_open_exhausts_ids);
    tcase_add_test(tc, test_kv_cache_seq_fork_shares_and_copies_on_write);
    tcase_add_test(tc, test_kv_cache_fork_fails_without_free_id);
    tcase_add_test(tc, test_kv_cache_seq_attach_shares_full_blocks);
    tcase_add_test(tc, test_kv_cache_seq_truncate_returns_blocks);
    tcase_add_test(tc, test_kv_cache_random_churn_no_leaks);
    suite_add_tcase(s, tc);
    return s;
}
