/* Victim ordering and pod-deletion-cost values. */
#include "autoscaler/victims.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_victims_order_unready_then_cache_then_inflight)
{
    const struct victims_pod pods[] = {
        {"a", 0.9, 0, true},  /* valuable cache */
        {"b", 0.1, 5, true},  /* little cache, busy */
        {"c", 0.1, 1, true},  /* little cache, idle-ish */
        {"d", 0.9, 9, false}, /* unready: first regardless */
        {"e", NAN, 0, true},  /* bad value counts as no cache */
    };
    size_t order[5];
    victims_order(pods, 5, order);
    const char *want[] = {"d", "e", "c", "b", "a"};
    for (int i = 0; i < 5; i++) ck_assert_str_eq(pods[order[i]].name, want[i]);
}
END_TEST

START_TEST(test_victims_order_ties_by_name_deterministic)
{
    const struct victims_pod pods[] = {
        {"pod-z", 0, 0, true}, {"pod-a", 0, 0, true}, {NULL, 0, 0, true}, {"pod-m", 0, 0, true}};
    size_t order[4];
    victims_order(pods, 4, order);
    ck_assert_uint_eq(order[0], 2); /* NULL name sorts first */
    ck_assert_uint_eq(order[1], 1);
    ck_assert_uint_eq(order[2], 3);
    ck_assert_uint_eq(order[3], 0);
    victims_order(pods, 0, order); /* no-op */
}
END_TEST

START_TEST(test_victims_costs_rank_values)
{
    const struct victims_pod pods[] = {
        {"a", 0.5, 0, true}, {"b", 0.2, 0, true}, {"c", 0.9, 0, true}};
    char costs[3][VICTIMS_COST_LEN];
    ck_assert_int_eq(victims_costs(pods, 3, costs), 0);
    ck_assert_str_eq(costs[1], "0");
    ck_assert_str_eq(costs[0], "1000");
    ck_assert_str_eq(costs[2], "2000");
    ck_assert_int_eq(victims_costs(pods, 0, costs), 0);
}
END_TEST

START_TEST(test_victims_costs_many_pods_fit_int32)
{
    size_t n = 100; /* beyond the on-stack sort buffer */
    struct victims_pod *pods = calloc(n, sizeof(*pods));
    char(*costs)[VICTIMS_COST_LEN] = calloc(n, sizeof(*costs));
    for (size_t i = 0; i < n; i++) pods[i] = (struct victims_pod){NULL, (double)(n - i), 0, true};
    ck_assert_int_eq(victims_costs(pods, n, costs), 0);
    ck_assert_str_eq(costs[n - 1], "0");
    ck_assert_str_eq(costs[0], "99000");
    long prev = -1;
    for (size_t i = n; i-- > 0;) {
        long v = strtol(costs[i], NULL, 10);
        ck_assert_int_gt(v, prev);
        prev = v;
    }
    free(pods);
    free(costs);
}
END_TEST

Suite *victims_suite(void)
{
    Suite *s = suite_create("victims");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_victims_order_unready_then_cache_then_inflight);
    tcase_add_test(tc, test_victims_order_ties_by_name_deterministic);
    tcase_add_test(tc, test_victims_costs_rank_values);
    tcase_add_test(tc, test_victims_costs_many_pods_fit_int32);
    suite_add_tcase(s, tc);
    return s;
}
