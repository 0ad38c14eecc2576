/* Unit tests of the KV block event log: order and sequence numbers, the held set behind snapshots,
 * a reader that falls behind the ring, waiting, and the prefix cache feeding it through its
 * observer (stored on insert, evicted on eviction, with the chain hashes prefix_cache computes). */
#include "engine/kv/kv_events.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_cache.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>

static bool has(const uint64_t *v, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == h) return true;
    return false;
}

START_TEST(test_kv_events_record_read_snapshot)
{
    struct kv_events *ev;
    ck_assert_int_eq(kv_events_new(0, 64, &ev), ERR_INVAL);
    ck_assert_int_eq(kv_events_new(8, 64, &ev), 0);
    ck_assert_uint_eq(kv_events_last_seq(ev), 0);
    kv_events_record(ev, true, 100);
    kv_events_record(ev, true, 200);
    kv_events_record(ev, false, 100);
    kv_events_record(ev, true, 300);
    ck_assert_uint_eq(kv_events_last_seq(ev), 4);

    struct kv_event out[8];
    size_t n;
    ck_assert_int_eq(kv_events_read(ev, 0, out, 8, &n), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(out[0].seq, 1);
    ck_assert_uint_eq(out[0].hash, 100);
    ck_assert_int_eq(out[0].op, KV_EVENT_STORED);
    ck_assert_int_eq(out[2].op, KV_EVENT_EVICTED);
    ck_assert_uint_eq(out[3].seq, 4);
    ck_assert_int_eq(kv_events_read(ev, 2, out, 1, &n), 0); /* max honoured */
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(out[0].seq, 3);
    ck_assert_int_eq(kv_events_read(ev, 4, out, 8, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(kv_events_read(ev, 5, out, 8, &n), ERR_RANGE); /* from the future */

    uint64_t *snap, seq;
    size_t nt[KV_EVENTS_N_TIERS];
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    n = nt[KV_EVENTS_DEVICE];
    ck_assert_uint_eq(seq, 4);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(nt[KV_EVENTS_HOST] + nt[KV_EVENTS_DISK], 0);
    ck_assert(has(snap, n, 200) && has(snap, n, 300) && !has(snap, n, 100));
    free(snap);
    /* An eviction of a hash not held and a second store of a held one leave the set consistent. */
    kv_events_record(ev, false, 999);
    kv_events_record(ev, true, 200);
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    ck_assert_uint_eq(nt[KV_EVENTS_DEVICE], 2);
    ck_assert_uint_eq(seq, 6);
    free(snap);
    kv_events_free(ev);
    kv_events_free(NULL);
}
END_TEST

START_TEST(test_kv_events_reader_behind_ring_must_resnapshot)
{
    struct kv_events *ev;
    ck_assert_int_eq(kv_events_new(1000, 64, &ev), 0); /* ring of 64 */
    for (uint64_t h = 1; h <= 100; h++) kv_events_record(ev, true, h);
    struct kv_event out[64];
    size_t n;
    ck_assert_int_eq(kv_events_read(ev, 10, out, 64, &n), ERR_RANGE);
    ck_assert_int_eq(kv_events_read(ev, 35, out, 64, &n), ERR_RANGE);
    ck_assert_int_eq(kv_events_read(ev, 36, out, 64, &n), 0); /* 37..100: exactly the ring */
    ck_assert_uint_eq(n, 64);
    ck_assert_uint_eq(out[0].seq, 37);
    ck_assert_uint_eq(out[63].seq, 100);
    uint64_t *snap, seq;
    size_t nt[KV_EVENTS_N_TIERS];
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    ck_assert_uint_eq(nt[KV_EVENTS_DEVICE], 100);
    ck_assert_uint_eq(seq, 100);
    free(snap);
    kv_events_free(ev);
}
END_TEST

/* The offload tiers: each its own held set (sized by kv_events_size_tier; an unsized one holds
 * nothing but its events still flow), one sequence for all, the snapshot tier after tier; a block
 * in two tiers is in both sets, and leaving one keeps it in the other. */
START_TEST(test_kv_events_tiers)
{
    struct kv_events *ev;
    ck_assert_int_eq(kv_events_new(4, 64, &ev), 0);
    ck_assert_int_eq(kv_events_size_tier(ev, KV_EVENTS_DEVICE, 8), ERR_INVAL);
    ck_assert_int_eq(kv_events_size_tier(ev, KV_EVENTS_N_TIERS, 8), ERR_INVAL);
    ck_assert_int_eq(kv_events_size_tier(ev, KV_EVENTS_HOST, 3), 0);
    kv_events_record(ev, true, 1);
    kv_events_record_tier(ev, KV_EVENTS_HOST, true, 1);
    kv_events_record_tier(ev, KV_EVENTS_HOST, true, 2);
    kv_events_record_tier(ev, KV_EVENTS_DISK, true, 3); /* tier 3 not sized: event only */
    kv_events_record(ev, false, 1);                     /* left the pool, still in host */
    kv_events_record_tier(ev, KV_EVENTS_HOST, true, 4);
    kv_events_record_tier(ev, KV_EVENTS_HOST, true, 5); /* past the host set's 3 */
    struct kv_event out[16];
    size_t n;
    ck_assert_int_eq(kv_events_read(ev, 0, out, 16, &n), 0);
    ck_assert_uint_eq(n, 7);
    ck_assert_int_eq(out[0].tier, KV_EVENTS_DEVICE);
    ck_assert_int_eq(out[1].tier, KV_EVENTS_HOST);
    ck_assert_int_eq(out[3].tier, KV_EVENTS_DISK);
    ck_assert_uint_eq(out[3].hash, 3);
    ck_assert_int_eq(out[4].op, KV_EVENT_EVICTED);
    ck_assert_int_eq(out[4].tier, KV_EVENTS_DEVICE);
    ck_assert_uint_eq(out[6].seq, 7);
    uint64_t *snap, seq;
    size_t nt[KV_EVENTS_N_TIERS];
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    ck_assert_uint_eq(seq, 7);
    ck_assert_uint_eq(nt[KV_EVENTS_DEVICE], 0);
    ck_assert_uint_eq(nt[KV_EVENTS_HOST], 3);
    ck_assert_uint_eq(nt[KV_EVENTS_DISK], 0);
    ck_assert(has(snap, 3, 1) && has(snap, 3, 2) && has(snap, 3, 4));
    free(snap);
    kv_events_record(ev, true, 9);
    kv_events_record_tier(ev, KV_EVENTS_HOST, false, 2);
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    ck_assert_uint_eq(nt[KV_EVENTS_DEVICE], 1);
    ck_assert_uint_eq(nt[KV_EVENTS_HOST], 2);
    ck_assert_uint_eq(snap[0], 9); /* device first */
    ck_assert(has(snap + 1, 2, 1) && has(snap + 1, 2, 4));
    free(snap);
    ck_assert_str_eq(kv_events_tier_name(KV_EVENTS_DEVICE), "device");
    ck_assert_str_eq(kv_events_tier_name(KV_EVENTS_HOST), "host");
    ck_assert_str_eq(kv_events_tier_name(KV_EVENTS_DISK), "disk");
    kv_events_free(ev);
}
END_TEST

static void *late_writer(void *arg)
{
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
    kv_events_record(arg, true, 42);
    return NULL;
}

START_TEST(test_kv_events_wait_wakes_on_record)
{
    struct kv_events *ev;
    ck_assert_int_eq(kv_events_new(4, 64, &ev), 0);
    ck_assert(!kv_events_wait(ev, 0, 1)); /* nothing: times out */
    pthread_t t;
    pthread_create(&t, NULL, late_writer, ev);
    ck_assert(kv_events_wait(ev, 0, 10000));
    pthread_join(t, NULL);
    ck_assert(kv_events_wait(ev, 0, 0));
    kv_events_free(ev);
}
END_TEST

#define BS 4

static void events_stored(void *ctx, uint64_t hash)
{
    kv_events_record(ctx, true, hash);
}

static void events_removed(void *ctx, uint64_t hash)
{
    kv_events_record(ctx, false, hash);
}

START_TEST(test_kv_events_fed_by_prefix_cache)
{
    struct kv_cache_config cfg = {8, BS, 2, 4};
    struct kv_cache *kv;
    struct prefix_cache *pc;
    struct kv_events *ev;
    ck_assert_int_eq(kv_cache_new(&cfg, &kv), 0);
    ck_assert_int_eq(prefix_cache_new(kv, &pc), 0);
    ck_assert_int_eq(kv_events_new(8, 64, &ev), 0);
    prefix_cache_set_observer(
        pc, &(struct prefix_cache_observer){events_stored, NULL, events_removed, ev});

    const int32_t toks[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    int s;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 8, &cp), 0);
    int nb;
    const int32_t *bt = kv_cache_seq_blocks(kv, s, &nb);
    uint64_t root = prefix_cache_root("t", 1), h0, h1;
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, bt[0], &h0), 0);
    ck_assert_int_eq(prefix_cache_insert(pc, h0, toks + BS, bt[1], &h1), 0);
    /* The hashes a router computes with the same function are the ones published. */
    ck_assert_uint_eq(h0, prefix_cache_block_hash(root, toks, BS));
    ck_assert_uint_eq(h1, prefix_cache_block_hash(h0, toks + BS, BS));
    struct kv_event out[8];
    size_t n;
    ck_assert_int_eq(kv_events_read(ev, 0, out, 8, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(out[0].hash, h0);
    ck_assert_uint_eq(out[1].hash, h1);
    ck_assert_int_eq(out[1].op, KV_EVENT_STORED);
    /* Offering a cached block again publishes nothing. */
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, bt[0], &h0), 0);
    ck_assert_uint_eq(kv_events_last_seq(ev), 2);

    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(prefix_cache_evict(pc, 8), 2);
    ck_assert_int_eq(kv_events_read(ev, 2, out, 8, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(out[0].op, KV_EVENT_EVICTED);
    ck_assert_uint_eq(out[0].hash, h1); /* tails first */
    ck_assert_uint_eq(out[1].hash, h0);
    uint64_t *snap, seq;
    size_t nt[KV_EVENTS_N_TIERS];
    ck_assert_int_eq(kv_events_snapshot(ev, &snap, nt, &seq), 0);
    ck_assert_uint_eq(nt[KV_EVENTS_DEVICE], 0);
    ck_assert_ptr_null(snap);
    prefix_cache_free(pc);
    kv_events_free(ev);
    kv_cache_free(kv);
}
END_TEST

Suite *kv_events_suite(void)
{
    Suite *s = suite_create("kv_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kv_events_record_read_snapshot);
    tcase_add_test(tc, test_kv_events_tiers);
    tcase_add_test(tc, test_kv_events_reader_behind_ring_must_resnapshot);
    tcase_add_test(tc, test_kv_events_wait_wakes_on_record);
    tcase_add_test(tc, test_kv_events_fed_by_prefix_cache);
    suite_add_tcase(s, tc);
    return s;
}
