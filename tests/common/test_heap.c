/* common/heap.h: the generated min-heap pops in order under any mix of pushes and pops, grows past
 * its first allocation, and a less() that looks at two fields orders by both. */
#include "common/heap.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

struct item {
    int key, tie;
};

static inline bool item_less(const struct item *a, const struct item *b)
{
    return a->key < b->key || (a->key == b->key && a->tie < b->tie);
}

HEAP_DEFINE(test_heap, struct item, item_less)

static uint32_t rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

START_TEST(test_heap_pops_in_order)
{
    struct test_heap h = {0};
    uint32_t s = 1;
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(test_heap_push(&h, (struct item){(int)(rnd(&s) % 100), i}), 0);
    ck_assert_uint_eq(h.n, 1000);
    struct item prev = test_heap_pop(&h);
    while (h.n) {
        struct item x = test_heap_pop(&h);
        ck_assert(!item_less(&x, &prev));
        prev = x;
    }
    test_heap_fini(&h);
    ck_assert_ptr_null(h.v);
}
END_TEST

/* Interleaved pushes and pops against a brute-force minimum over what is inside. */
START_TEST(test_heap_interleaved_matches_brute_force)
{
    struct test_heap h = {0};
    struct item in[512];
    size_t n_in = 0;
    uint32_t s = 7;
    for (int step = 0; step < 5000; step++) {
        if (n_in < 512 && (n_in == 0 || rnd(&s) % 3 != 0)) {
            struct item x = {(int)(rnd(&s) % 50), (int)(rnd(&s) % 50)};
            ck_assert_int_eq(test_heap_push(&h, x), 0);
            in[n_in++] = x;
        } else {
            size_t m = 0;
            for (size_t i = 1; i < n_in; i++)
                if (item_less(&in[i], &in[m])) m = i;
            struct item got = test_heap_pop(&h);
            ck_assert_int_eq(got.key, in[m].key);
            ck_assert_int_eq(got.tie, in[m].tie);
            in[m] = in[--n_in];
        }
        ck_assert_uint_eq(h.n, n_in);
    }
    test_heap_fini(&h);
}
END_TEST

Suite *heap_suite(void)
{
    Suite *s = suite_create("heap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_heap_pops_in_order);
    tcase_add_test(tc, test_heap_interleaved_matches_brute_force);
    suite_add_tcase(s, tc);
    return s;
}
