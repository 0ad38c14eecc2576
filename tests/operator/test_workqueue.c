/* Work queue: de-duplication, exclusive processing, backoff, delays, shutdown, concurrency. */
#include "common/err.h"
#include "operator/workqueue.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t fake_now;
static int64_t fake_clock(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static struct workqueue *new_fake_queue(void)
{
    fake_now = 1000;
    struct workqueue_opts o = {
        .base_delay_ms = 5, .max_delay_ms = 1000 * 1000, .now_ms = fake_clock};
    struct workqueue *q = workqueue_new(&o);
    ck_assert_ptr_nonnull(q);
    return q;
}

static void expect_get(struct workqueue *q, const char *want)
{
    char *k = workqueue_get(q, 0);
    ck_assert_msg(k != NULL, "expected %s, queue empty", want);
    ck_assert_str_eq(k, want);
    workqueue_done(q, k);
    free(k);
}

START_TEST(test_workqueue_add_deduplicates_in_fifo_order)
{
    struct workqueue *q = new_fake_queue();
    workqueue_add(q, "ns/a");
    workqueue_add(q, "ns/b");
    workqueue_add(q, "ns/a");
    ck_assert_uint_eq(workqueue_len(q), 2);
    expect_get(q, "ns/a");
    expect_get(q, "ns/b");
    ck_assert_ptr_null(workqueue_get(q, 0));
    workqueue_free(q);
}
END_TEST

START_TEST(test_workqueue_key_in_processing_is_not_handed_out_twice)
{
    struct workqueue *q = new_fake_queue();
    workqueue_add(q, "ns/a");
    char *k = workqueue_get(q, 0);
    ck_assert_str_eq(k, "ns/a");
    workqueue_add(q, "ns/a"); /* changed while being reconciled */
    workqueue_add(q, "ns/a");
    ck_assert_ptr_null(workqueue_get(q, 0)); /* not given to a second worker */
    workqueue_done(q, k);
    free(k);
    expect_get(q, "ns/a"); /* exactly once more */
    ck_assert_ptr_null(workqueue_get(q, 0));
    workqueue_free(q);
}
END_TEST

START_TEST(test_workqueue_rate_limited_backs_off_exponentially_and_caps)
{
    struct workqueue *q = new_fake_queue();
    int64_t want = 5;
    for (int i = 0; i < 25; i++) {
        ck_assert_int_eq(workqueue_add_rate_limited(q, "ns/a"), 0);
        ck_assert_int_eq(workqueue_failures(q, "ns/a"), i + 1);
        fake_now += want - 1;
        ck_assert_msg(workqueue_get(q, 0) == NULL, "retry %d came before %lld ms", i,
                      (long long)want);
        fake_now += 1;
        expect_get(q, "ns/a");
        want = want * 2 > 1000 * 1000 ? 1000 * 1000 : want * 2;
    }
    ck_assert_int_eq(want, 1000 * 1000);
    workqueue_forget(q, "ns/a");
    ck_assert_int_eq(workqueue_failures(q, "ns/a"), 0);
    workqueue_add_rate_limited(q, "ns/a");
    fake_now += 5;
    expect_get(q, "ns/a");
    workqueue_free(q);
}
END_TEST

START_TEST(test_workqueue_add_after_orders_by_time_and_earliest_wins)
{
    struct workqueue *q = new_fake_queue();
    workqueue_add_after(q, "ns/late", 300);
    workqueue_add_after(q, "ns/early", 100);
    workqueue_add_after(q, "ns/late", 50);   /* earlier delay for the same key wins */
    workqueue_add_after(q, "ns/early", 500); /* later delay is ignored */
    ck_assert_uint_eq(workqueue_len(q), 0);
    fake_now += 50;
    expect_get(q, "ns/late");
    ck_assert_ptr_null(workqueue_get(q, 0));
    fake_now += 50;
    expect_get(q, "ns/early");
    fake_now += 1000; /* superseded heap items fire nothing */
    ck_assert_ptr_null(workqueue_get(q, 0));
    ck_assert_uint_eq(workqueue_len(q), 0);
    workqueue_free(q);
}
END_TEST

static void *wait_for_key(void *arg)
{
    return workqueue_get(arg, -1);
}

START_TEST(test_workqueue_shutdown_wakes_blocked_workers)
{
    struct workqueue_opts o = {0};
    struct workqueue *q = workqueue_new(&o);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, wait_for_key, q);
    workqueue_shutdown(q);
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        ck_assert_ptr_null(r);
    }
    ck_assert_int_eq(workqueue_add(q, "ns/a"), ERR_BAD_STATE);
    ck_assert(workqueue_is_shutdown(q));
    workqueue_free(q);
}
END_TEST

/* Workers and producers hammer the queue; every key is processed at least once after its last add,
 * and never by two workers at the same time. */
#define KEYS 50
static atomic_int in_flight[KEYS];
static atomic_int processed[KEYS];
static atomic_int violations;

static void *worker(void *arg)
{
    struct workqueue *q = arg;
    char *k;
    while ((k = workqueue_get(q, -1))) {
        int i = (int)strtol(k + 3, NULL, 10);
        if (atomic_fetch_add(&in_flight[i], 1) != 0) atomic_fetch_add(&violations, 1);
        atomic_fetch_add(&processed[i], 1);
        atomic_fetch_sub(&in_flight[i], 1);
        workqueue_done(q, k);
        free(k);
    }
    return NULL;
}

START_TEST(test_workqueue_concurrent_workers_never_share_a_key)
{
    struct workqueue_opts o = {0};
    struct workqueue *q = workqueue_new(&o);
    pthread_t w[4];
    for (int i = 0; i < 4; i++) pthread_create(&w[i], NULL, worker, q);
    char key[16];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < KEYS; i++) {
            snprintf(key, sizeof(key), "ns/%d", i);
            workqueue_add(q, key);
        }
    }
    /* Wait until the queue drains, then stop. */
    for (int spins = 0; spins < 2000 && workqueue_len(q) > 0; spins++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    workqueue_shutdown(q);
    for (int i = 0; i < 4; i++) pthread_join(w[i], NULL);
    ck_assert_int_eq(atomic_load(&violations), 0);
    for (int i = 0; i < KEYS; i++) ck_assert_int_ge(atomic_load(&processed[i]), 1);
    workqueue_free(q);
}
END_TEST

Suite *workqueue_suite(void)
{
    Suite *s = suite_create("workqueue");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_workqueue_add_deduplicates_in_fifo_order);
    tcase_add_test(tc, test_workqueue_key_in_processing_is_not_handed_out_twice);
    tcase_add_test(tc, test_workqueue_rate_limited_backs_off_exponentially_and_caps);
    tcase_add_test(tc, test_workqueue_add_after_orders_by_time_and_earliest_wins);
    tcase_add_test(tc, test_workqueue_shutdown_wakes_blocked_workers);
    tcase_add_test(tc, test_workqueue_concurrent_workers_never_share_a_key);
    suite_add_tcase(s, tc);
    return s;
}
