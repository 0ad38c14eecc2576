/* Shutdown flag: signals and code requests both wake waiters; err_str names every code. */
#include "common/err.h"
#include "common/shutdown.h"

#include <check.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

START_TEST(test_shutdown_signal_sets_flag_and_wakes_fd)
{
    ck_assert_int_eq(shutdown_install(), 0);
    ck_assert(!shutdown_requested());
    ck_assert(!shutdown_wait(10));
    raise(SIGTERM);
    ck_assert(shutdown_requested());
    struct pollfd p = {.fd = shutdown_fd(), .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 0), 1);
    ck_assert(shutdown_wait(10000)); /* returns at once */
}
END_TEST

START_TEST(test_shutdown_request_from_code)
{
    ck_assert_int_eq(shutdown_install(), 0);
    shutdown_request();
    ck_assert(shutdown_requested());
}
END_TEST

START_TEST(test_err_str_names_every_code)
{
    ck_assert_str_eq(err_str(0), "ok");
    for (int c = ERR_NOMEM; c >= ERR_INTERNAL; c--)
        ck_assert_msg(strcmp(err_str(c), "unknown error") != 0, "code %d has no name", c);
    ck_assert_str_eq(err_str(-999), "unknown error");
    ck_assert_str_eq(err_str(ERR_TOO_BIG), "too big");
}
END_TEST

Suite *shutdown_suite(void)
{
    Suite *s = suite_create("shutdown");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_shutdown_signal_sets_flag_and_wakes_fd);
    tcase_add_test(tc, test_shutdown_request_from_code);
    tcase_add_test(tc, test_err_str_names_every_code);
    suite_add_tcase(s, tc);
    return s;
}
