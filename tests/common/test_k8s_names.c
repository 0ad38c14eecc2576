/* Kubernetes name rules: DNS labels (namespaces) and subdomains (most object names). */
#include "common/k8s/names.h"

#include <check.h>
#include <string.h>

START_TEST(test_k8s_names_dns_label)
{
    static const char *const ok[] = {
        "a",   "models",   "team-a",
        "0ab", "a1-b2-c3", "012345678901234567890123456789012345678901234567890123456789012"};
    static const char *const bad[] = {
        "",       "-a",  "a-",  "A",
        "team_a", "a.b", "a b", "é",
        "a\n",    "a/b", "a:b", "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(k8s_name_is_dns_label(ok[i], strlen(ok[i])), "refused \"%s\"", ok[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!k8s_name_is_dns_label(bad[i], strlen(bad[i])), "accepted \"%s\"", bad[i]);
    /* The length bounds what is read: a prefix of a longer string. */
    ck_assert(k8s_name_is_dns_label("ab,cd", 2));
    ck_assert(!k8s_name_is_dns_label("ab,cd", 3));
    ck_assert(!k8s_name_is_dns_label(NULL, 0));
}
END_TEST

START_TEST(test_k8s_names_dns_subdomain)
{
    char longest[254], too_long[255];
    memset(longest, 'a', 253);
    longest[253] = 0;
    memset(too_long, 'a', 254);
    too_long[254] = 0;
    ck_assert(k8s_name_is_dns_subdomain("models", 6));
    ck_assert(k8s_name_is_dns_subdomain("my.claim-1", 10));
    ck_assert(k8s_name_is_dns_subdomain(longest, 253));
    ck_assert(!k8s_name_is_dns_subdomain(too_long, 254));
    ck_assert(!k8s_name_is_dns_subdomain(".a", 2));
    ck_assert(!k8s_name_is_dns_subdomain("a.", 2));
    ck_assert(!k8s_name_is_dns_subdomain("Bad_Claim", 9));
    ck_assert(!k8s_name_is_dns_subdomain("", 0));
}
END_TEST

Suite *k8s_names_suite(void)
{
    Suite *s = suite_create("k8s_names");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_k8s_names_dns_label);
    tcase_add_test(tc, test_k8s_names_dns_subdomain);
    suite_add_tcase(s, tc);
    return s;
}
