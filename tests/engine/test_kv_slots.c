/* Unit tests of the scheduler's KV slots over a real kv_cache pool: reservation all or nothing
 * (no eviction when it cannot succeed), eviction of cached blocks when the free list is short,
 * the copy-on-write callback, and a prefix attach/publish round trip keeping the hash chain. Pure
 * logic: no model. */
#include "engine/kv/kv_slots.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_offload.h"
#include "engine/kv/prefix_cache.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

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

/* A fake K/V store for the offload hooks: PAYLOAD bytes per pool block. */
#define PAYLOAD 32
struct fake_kv {
    uint8_t data[8][PAYLOAD];
    int reads, writes;
};

static int fake_read(void *ctx, int32_t block, void *dst, size_t bytes)
{
    struct fake_kv *f = ctx;
    ck_assert_uint_eq(bytes, PAYLOAD);
    memcpy(dst, f->data[block], bytes);
    f->reads++;
    return 0;
}

static int fake_write(void *ctx, int32_t block, const void *src, size_t bytes)
{
    struct fake_kv *f = ctx;
    ck_assert_uint_eq(bytes, PAYLOAD);
    memcpy(f->data[block], src, bytes);
    f->writes++;
    return 0;
}

/* Computes `n` tokens of seq (reserve, "K/V" = token-derived bytes, publish as a prompt of
 * n_prompt tokens). */
static void compute(struct kv_slots *ks, struct kv_cache *kv, struct fake_kv *f, int seq,
                    const int32_t *tokens, int n, struct kv_chain *chain)
{
    struct copies c = {0};
    ck_assert_int_eq(kv_slots_reserve(ks, seq, n, record_copy, &c), 0);
    int nb;
    const int32_t *table = kv_cache_seq_blocks(kv, seq, &nb);
    for (int b = 0; b < nb; b++) memset(f->data[table[b]], tokens[b * BS] & 0xff, PAYLOAD);
    kv_slots_publish(ks, seq, tokens, n, chain);
}

/* Blocks evicted from a 4-block pool go to tier 2 through the gate and come back on a later
 * lookup, with their bytes, counted in n_loaded. */
static void offload_round_trip(enum kv_slots_gate gate, bool expect_back)
{
    struct kv_cache *kv = make_kv(4);
    struct kv_slots *ks = NULL;
    ck_assert_int_eq(kv_slots_new(kv, true, &ks), 0);
    struct kv_offload_config oc = {0x77, BS, PAYLOAD, 1 << 16, NULL, 0, 0, NULL, NULL, 0};
    struct kv_offload *store = NULL;
    ck_assert_int_eq(kv_offload_new(&oc, &store), 0);
    struct fake_kv f = {0};
    struct kv_slots_offload so = {store, gate, fake_read, fake_write, &f};
    ck_assert_int_eq(kv_slots_set_offload(ks, &so), 0);
    int32_t ta[13], tb[16];
    for (int i = 0; i < 13; i++) ta[i] = 10 + i;
    for (int i = 0; i < 16; i++) tb[i] = 100 + i;
    uint64_t ha[8], hb[8], hc[8];
    struct kv_chain ca = {.root = prefix_cache_root(NULL, 0), .hashes = ha, .n_prompt = 13};
    int a = open_seq(kv);
    compute(ks, kv, &f, a, ta, 13, &ca); /* 3 full blocks cached */
    kv_cache_seq_close(kv, a);
    struct kv_chain cb = {.root = prefix_cache_root(NULL, 0), .hashes = hb, .n_prompt = 16};
    int b = open_seq(kv);
    compute(ks, kv, &f, b, tb, 16, &cb); /* needs all 4: evicts a's 3 */
    kv_offload_flush(store);
    struct kv_offload_stats st;
    kv_offload_stats(store, &st);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_HOST], expect_back ? 3 : 0);
    kv_cache_seq_close(kv, b);
    struct kv_chain cc = {.root = prefix_cache_root(NULL, 0), .hashes = hc, .n_prompt = 13};
    int c = open_seq(kv);
    int got = kv_slots_attach_prefix(ks, c, ta, 13, &cc);
    if (expect_back) {
        ck_assert_int_eq(got, 12);
        ck_assert_int_eq(cc.n_loaded[0], 12);
        ck_assert_int_eq(cc.n_hashed, 3);
        ck_assert_mem_eq(cc.hashes, ca.hashes, 3 * sizeof(uint64_t));
        int nb;
        const int32_t *table = kv_cache_seq_blocks(kv, c, &nb);
        ck_assert_int_eq(nb, 3);
        for (int i = 0; i < 3; i++) ck_assert_uint_eq(f.data[table[i]][PAYLOAD - 1], ta[i * BS]);
    } else {
        ck_assert_int_eq(got, 0);
    }
    kv_cache_seq_close(kv, c);
    /* The loaded blocks are in the prefix cache again: a fourth lookup is served by tier 1. */
    int d = open_seq(kv);
    ck_assert_int_eq(kv_slots_attach_prefix(ks, d, ta, 13, &cc), expect_back ? 12 : 0);
    ck_assert_int_eq(cc.n_loaded[0], 0);
    kv_cache_seq_close(kv, d);
    kv_offload_flush(store);
    kv_offload_stats(store, &st);
    uint64_t before = st.stored[KV_OFFLOAD_HOST];
    /* Freeing the slots offers what the pool still caches: a's three blocks are in the store
     * already, b's last one is new (and not reused: the reused gate keeps it out). */
    kv_slots_free(ks);
    kv_offload_flush(store);
    kv_offload_stats(store, &st);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_HOST], before + (gate == KV_SLOTS_GATE_REUSED ? 0 : 1));
    kv_offload_free(store);
    ck_assert_int_eq(kv_cache_blocks_used(kv), 0);
    kv_cache_free(kv);
}

START_TEST(test_kv_slots_offload_prompt_gate_round_trip)
{
    offload_round_trip(KV_SLOTS_GATE_PROMPT, true);
    offload_round_trip(KV_SLOTS_GATE_ALL, true);
}
END_TEST

START_TEST(test_kv_slots_offload_reused_gate_skips_unused_blocks)
{
    offload_round_trip(KV_SLOTS_GATE_REUSED, false);
}
END_TEST

START_TEST(test_kv_slots_offload_needs_prefix_cache)
{
    struct kv_cache *kv = make_kv(4);
    struct kv_slots *ks = NULL;
    ck_assert_int_eq(kv_slots_new(kv, false, &ks), 0);
    struct kv_offload_config oc = {0x77, BS, PAYLOAD, 1 << 16, NULL, 0, 0, NULL, NULL, 0};
    struct kv_offload *store = NULL;
    ck_assert_int_eq(kv_offload_new(&oc, &store), 0);
    struct fake_kv f = {0};
    struct kv_slots_offload so = {store, KV_SLOTS_GATE_ALL, fake_read, fake_write, &f};
    ck_assert_int_eq(kv_slots_set_offload(ks, &so), ERR_INVAL);
    kv_slots_free(ks);
    kv_offload_free(store);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_kv_slots_disk_pays)
{
    ck_assert(kv_slots_disk_pays(0, 0, 16));         /* nothing measured yet */
    ck_assert(kv_slots_disk_pays(0.01, 0, 16));      /* prefill not measured */
    ck_assert(kv_slots_disk_pays(0, 0.001, 16));     /* disk not measured */
    ck_assert(kv_slots_disk_pays(0.01, 0.001, 16));  /* 10 ms < 16 ms of prefill */
    ck_assert(!kv_slots_disk_pays(0.02, 0.001, 16)); /* a slow disk: recompute */
    /* The prefetch wait rule: ahead of recomputation, or 1 s while the prefill is unmeasured. */
    ck_assert(kv_slots_prefetch_keeps_waiting(0.5, 0, 0, 16));
    ck_assert(!kv_slots_prefetch_keeps_waiting(KV_SLOTS_PREFETCH_WAIT_S, 100, 0, 16));
    ck_assert(kv_slots_prefetch_keeps_waiting(0.015, 0, 0.001, 16));  /* first read: 16 ms */
    ck_assert(!kv_slots_prefetch_keeps_waiting(0.017, 0, 0.001, 16)); /* a stalled first read */
    ck_assert(kv_slots_prefetch_keeps_waiting(0.5, 40, 0.001, 16));   /* 12 ms a block: ahead */
    ck_assert(!kv_slots_prefetch_keeps_waiting(0.7, 40, 0.001, 16));  /* 17 ms a block: behind */
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
    tcase_add_test(tc, test_kv_slots_offload_prompt_gate_round_trip);
    tcase_add_test(tc, test_kv_slots_offload_reused_gate_skips_unused_blocks);
    tcase_add_test(tc, test_kv_slots_offload_needs_prefix_cache);
    tcase_add_test(tc, test_kv_slots_disk_pays);
    suite_add_tcase(s, tc);
    return s;
}
