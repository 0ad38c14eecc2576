/* Unit tests of the scheduler's KV slots over a real kv_cache pool: reservation all or nothing
 * (no eviction when it cannot succeed), eviction of cached blocks when the free list is short,
 * the copy-on-write callback, and a prefix attach/publish round trip keeping the hash chain. Pure
 * logic: no model. */
#include "engine/kv/kv_slots.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_cache.h"

#include <check.h>
#include <stdlib.h>

#define BS 4 /* block size of every pool here */

struct copies {
    int n, fail;
    int32_t src, dst;
};

static int record_copy(void *ctx, int32_t src, int32_t dst)
{
    struct copies *c = ctx;
    c->n++;
    c->src = src;
    c->dst = dst;
    return c->fail;
}

static struct kv_cache *make_kv(int n_blocks)
{
    struct kv_cache_config cfg = {n_blocks, BS, 4, 8};
    struct kv_cache *kv = NULL;
    ck_assert_int_eq(kv_cache_new(&cfg, &kv), 0);
    return kv;
}

static int open_seq(struct kv_cache *kv)
{
    int s;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    return s;
}

START_TEST(test_kv_slots_reserve_all_or_nothing)
{
    struct kv_cache *kv = make_kv(4);
    struct kv_slots *ks = NULL;
    ck_assert_int_eq(kv_slots_new(kv, false, &ks), 0);
    ck_assert(!kv_slots_prefix_caching(ks));
    struct copies c = {0};
    int a = open_seq(kv);
    ck_assert_int_eq(kv_slots_reserve(ks, a, 10, record_copy, &c), 0); /* 3 blocks */
    ck_assert_int_eq(kv_slots_available(ks), 1);
    int b = open_seq(kv);
    ck_assert_int_eq(kv_slots_reserve(ks, b, 5, record_copy, &c), ERR_AGAIN);
    ck_assert_int_eq(kv_cache_seq_len(kv, b), 0); /* nothing changed */
    ck_assert_int_eq(kv_slots_available(ks), 1);
    ck_assert_int_eq(kv_slots_reserve(ks, b, 4, record_copy, &c), 0);
    ck_assert_double_eq(kv_slots_usage(ks), 1.0);
    ck_assert_int_eq(c.n, 0);
    ck_assert_int_eq(kv_slots_reserve(ks, a, 100, record_copy, &c), ERR_AGAIN);
    kv_slots_free(ks);
    kv_cache_free(kv);
}
END_TEST

/* A forked sequence's shared partial block is copied through the callback before it is written,
 * and the callback's error is returned. */
START_TEST(test_kv_slots_reserve_copies_shared_partial_block)
{
    struct kv_cache *kv = make_kv(8);
    struct kv_slots *ks = NULL;
    ck_assert_int_eq(kv_slots_new(kv, false, &ks), 0);
    struct copies c = {0};
    int a = open_seq(kv);
    ck_assert_int_eq(kv_slots_reserve(ks, a, 6, record_copy, &c), 0);
    int f;
    ck_assert_int_eq(kv_cache_seq_fork(kv, a, &f), 0);
    int n;
    int32_t shared = kv_cache_seq_blocks(kv, f, &n)[1];
    ck_assert_int_eq(kv_slots_reserve(ks, f, 1, record_copy, &c), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.src, shared);
    ck_assert_int_eq(c.dst, kv_cache_seq_blocks(kv, f, &n)[1]);
    int g; /* a shares its partial block again: the copy's error comes back */
    ck_assert_int_eq(kv_cache_seq_fork(kv, a, &g), 0);
    c.fail = ERR_IO;
    ck_assert_int_eq(kv_slots_reserve(ks, g, 1, record_copy, &c), ERR_IO);
    ck_assert_int_eq(c.n, 2);
    kv_slots_free(ks);
    kv_cache_free(kv);
}
END_TEST

/* Publish a prompt's full blocks, close the sequence: its blocks stay cached and evictable; a second
 * sequence with the same prompt attaches them (never the block of the last token) with the same
 * chain; a reservation that needs them evicts them. */
START_TEST(test_kv_slots_prefix_attach_publish_evict)
{
    struct kv_cache *kv = make_kv(4);
    struct kv_slots *ks = NULL;
    ck_assert_int_eq(kv_slots_new(kv, true, &ks), 0);
    ck_assert(kv_slots_prefix_caching(ks));
    int32_t tokens[12];
    for (int i = 0; i < 12; i++) tokens[i] = 100 + i;
    uint64_t hashes_a[8], hashes_b[8];
    struct kv_chain ca = {.root = prefix_cache_root(NULL, 0), .hashes = hashes_a};
    struct copies c = {0};
    int a = open_seq(kv);
    ck_assert_int_eq(kv_slots_attach_prefix(ks, a, tokens, 12, &ca), 0);
    ck_assert_int_eq(kv_slots_reserve(ks, a, 12, record_copy, &c), 0);
    kv_slots_publish(ks, a, tokens, 12, &ca);
    ck_assert_int_eq(ca.n_hashed, 3);
    kv_cache_seq_close(kv, a);
    ck_assert_int_eq(kv_slots_available(ks), 4); /* 1 free + 3 evictable */
    ck_assert_double_eq(kv_slots_usage(ks), 0.0);

    struct kv_chain cb = {.root = prefix_cache_root(NULL, 0), .hashes = hashes_b};
    int b = open_seq(kv);
    ck_assert_int_eq(kv_slots_attach_prefix(ks, b, tokens, 12, &cb), 8); /* not the last block */
    ck_assert_int_eq(cb.n_hashed, 2);
    ck_assert(hashes_b[0] == hashes_a[0] && hashes_b[1] == hashes_a[1]);
    kv_cache_seq_close(kv, b);

    /* A salted chain finds nothing. */
    struct kv_chain cs = {.root = prefix_cache_root("t", 1), .hashes = hashes_b};
    int s = open_seq(kv);
    ck_assert_int_eq(kv_slots_attach_prefix(ks, s, tokens, 12, &cs), 0);
    /* Needing all four blocks evicts the three cached ones. */
    ck_assert_int_eq(kv_slots_reserve(ks, s, 16, record_copy, &c), 0);
    ck_assert_int_eq(kv_slots_available(ks), 0);
    kv_cache_seq_close(kv, s);
    kv_slots_free(ks);
    kv_cache_free(kv);
}
END_TEST

Suite *kv_slots_suite(void);
Suite *kv_slots_suite(void)
{
    Suite *s = suite_create("kv_slots");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kv_slots_reserve_all_or_nothing);
    tcase_add_test(tc, test_kv_slots_reserve_copies_shared_partial_block);
    tcase_add_test(tc, test_kv_slots_prefix_attach_publish_evict);
    suite_add_tcase(s, tc);
    return s;
}
