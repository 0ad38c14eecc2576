/* Unit tests of the 64-bit key set: add/has/del, the bound, the reserved key, growth, iteration,
 * and a randomized comparison with a sorted reference under heavy deletion (backward shift). */
#include "common/u64set.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>

START_TEST(test_u64set_add_has_del)
{
    struct u64set s;
    u64set_init(&s, 100);
    ck_assert(!u64set_has(&s, 1));
    ck_assert(!u64set_del(&s, 1));
    ck_assert_int_eq(u64set_add(&s, 1), 1);
    ck_assert_int_eq(u64set_add(&s, 1), 0);
    ck_assert_int_eq(u64set_add(&s, 0), 1);
    ck_assert_int_eq(u64set_add(&s, U64SET_EMPTY), ERR_INVAL);
    ck_assert(!u64set_has(&s, U64SET_EMPTY));
    ck_assert_uint_eq(s.n, 2);
    ck_assert(u64set_has(&s, 0) && u64set_has(&s, 1));
    ck_assert(u64set_del(&s, 1));
    ck_assert(!u64set_has(&s, 1));
    ck_assert_uint_eq(s.n, 1);
    u64set_clear(&s);
    ck_assert_uint_eq(s.n, 0);
    ck_assert(!u64set_has(&s, 0));
    u64set_fini(&s);
    u64set_fini(NULL);
}
END_TEST

START_TEST(test_u64set_bound)
{
    struct u64set s;
    u64set_init(&s, 3);
    for (uint64_t k = 10; k < 13; k++) ck_assert_int_eq(u64set_add(&s, k), 1);
    ck_assert_int_eq(u64set_add(&s, 99), ERR_TOO_BIG);
    ck_assert_int_eq(u64set_add(&s, 10), 0); /* present keys are fine at the bound */
    ck_assert(u64set_del(&s, 11));
    ck_assert_int_eq(u64set_add(&s, 99), 1);
    u64set_fini(&s);
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(test_u64set_random_against_reference)
{
    enum { N = 4000, KEYS = 1500 };
    struct u64set s;
    u64set_init(&s, U64SET_UNBOUNDED);
    static bool ref[KEYS];
    uint64_t keys[KEYS];
    srand(7);
    /* Keys that collide in their low bits, so probe runs are long and deletion shifts a lot. */
    for (int i = 0; i < KEYS; i++) keys[i] = (uint64_t)i << 40 | (uint64_t)(i % 3);
    for (int step = 0; step < N * 10; step++) {
        int i = rand() % KEYS;
        if (rand() % 3) {
            ck_assert_int_eq(u64set_add(&s, keys[i]), ref[i] ? 0 : 1);
            ref[i] = true;
        } else {
            ck_assert(u64set_del(&s, keys[i]) == ref[i]);
            ref[i] = false;
        }
    }
    size_t want = 0;
    for (int i = 0; i < KEYS; i++) {
        ck_assert(u64set_has(&s, keys[i]) == ref[i]);
        want += ref[i];
    }
    ck_assert_uint_eq(s.n, want);
    /* Iteration yields every key once. */
    uint64_t *got = malloc(want * sizeof(*got));
    size_t pos = 0, n = 0;
    uint64_t k;
    while (u64set_next(&s, &pos, &k)) {
        ck_assert_uint_lt(n, want);
        got[n++] = k;
    }
    ck_assert_uint_eq(n, want);
    qsort(got, n, sizeof(*got), cmp_u64);
    for (size_t i = 1; i < n; i++) ck_assert_uint_ne(got[i], got[i - 1]);
    free(got);
    u64set_fini(&s);
}
END_TEST

START_TEST(test_u64set_reserve_then_no_growth)
{
    struct u64set s;
    u64set_init(&s, 1000);
    ck_assert_int_eq(u64set_reserve(&s, 1000), 0);
    uint64_t *slots = s.slots;
    for (uint64_t k = 0; k < 1000; k++) ck_assert_int_eq(u64set_add(&s, k * 7919), 1);
    ck_assert_ptr_eq(s.slots, slots);
    u64set_fini(&s);
}
END_TEST

Suite *u64set_suite(void)
{
    Suite *s = suite_create("u64set");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_u64set_add_has_del);
    tcase_add_test(tc, test_u64set_bound);
    tcase_add_test(tc, test_u64set_random_against_reference);
    tcase_add_test(tc, test_u64set_reserve_then_no_growth);
    suite_add_tcase(s, tc);
    return s;
}
