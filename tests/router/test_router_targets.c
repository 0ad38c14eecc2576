/* Unit tests of --target parsing: models with several URLs, continuation URLs, trailing slashes,
 * and every malformed form with its message. */
#include "router/router_targets.h"

#include "common/err.h"

#include <check.h>
#include <string.h>

START_TEST(test_router_targets_parse_models)
{
    struct router_targets t;
    char err[256];
    ck_assert_int_eq(router_targets_parse("a=http://h:1,http://h:2/,b=https://x,a=http://h:3", &t,
                                          err, sizeof(err)),
                     0);
    ck_assert_uint_eq(t.n, 4);
    ck_assert_str_eq(t.v[0].model, "a");
    ck_assert_str_eq(t.v[0].ep.url, "http://h:1");
    ck_assert_str_eq(t.v[1].model, "a");
    ck_assert_str_eq(t.v[1].ep.url, "http://h:2");
    ck_assert_str_eq(t.v[1].ep.key, "http://h:2");
    ck_assert(t.v[1].ep.ready && !t.v[1].ep.terminating);
    ck_assert_str_eq(t.v[2].model, "b");
    ck_assert_str_eq(t.v[3].model, "a");
    router_targets_fini(&t);
    ck_assert_int_eq(router_targets_parse(NULL, &t, err, sizeof(err)), 0);
    ck_assert_uint_eq(t.n, 0);
    router_targets_fini(&t);
    router_targets_fini(NULL);
}
END_TEST

START_TEST(test_router_targets_parse_malformed)
{
    static const char *const bad[] = {
        "http://h:1",               /* no model */
        "a=",                       /* no URL */
        "a=ftp://h",                /* scheme */
        "a=http://",                /* no host */
        "a=http://h:1/v1",          /* a path */
        "a=http://h:1,",            /* trailing comma */
        "a=http://h:1,,http://h:2", /* empty entry */
        "=http://h:1",              /* empty name */
        "a=http://h:1,http://h:1",  /* twice */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct router_targets t = {0};
        char err[256] = "";
        ck_assert_msg(router_targets_parse(bad[i], &t, err, sizeof(err)) == ERR_INVAL,
                      "accepted: %s", bad[i]);
        ck_assert_msg(strstr(err, "--target"), "no message for %s", bad[i]);
        ck_assert_uint_eq(t.n, 0);
    }
}
END_TEST

Suite *router_targets_suite(void)
{
    Suite *s = suite_create("router_targets");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_router_targets_parse_models);
    tcase_add_test(tc, test_router_targets_parse_malformed);
    suite_add_tcase(s, tc);
    return s;
}
