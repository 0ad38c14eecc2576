/* Leader election decision rule (the Lease round trips are covered by tests/e2e/operator.sh). */
#include "common/leader.h"

#include <check.h>

START_TEST(test_leader_can_acquire_rules)
{
    /* Free leases can be taken at once; our own lease is always renewable. */
    ck_assert(leader_can_acquire(NULL, "me", 0, 15000, 1));
    ck_assert(leader_can_acquire("", "me", 0, 15000, 1));
    ck_assert(leader_can_acquire("me", "me", 1000, 15000, 1001));
    /* Someone else's lease: only once it went unrenewed for the full duration, on our clock. */
    ck_assert(!leader_can_acquire("other", "me", 1000, 15000, 1000));
    ck_assert(!leader_can_acquire("other", "me", 1000, 15000, 15999));
    ck_assert(leader_can_acquire("other", "me", 1000, 15000, 16000));
    /* Identities are compared exactly. */
    ck_assert(!leader_can_acquire("me-2", "me", 1000, 15000, 2000));
}
END_TEST

Suite *leader_suite(void)
{
    Suite *s = suite_create("leader");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_leader_can_acquire_rules);
    suite_add_tcase(s, tc);
    return s;
}
