/* API keys (engine/serve/serve_auth.c): parsing lists and files (separators, comments, bytes a key
 * cannot hold, duplicates, limits), the bearer check against several keys (scheme, exact match,
 * a NUL byte and junk after a key), key ids, and the failure log: rate-limited, never the key. */
#include "engine/serve/serve_auth.h"

#include "common/err.h"
#include "common/log.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct serve_auth *auth_of(const char *text)
{
    struct serve_auth *a;
    char err[256] = "";
    ck_assert_int_eq(serve_auth_new(&a), 0);
    ck_assert_msg(serve_auth_add(a, text, strlen(text), "test", err, sizeof(err)) == 0, "%s", err);
    return a;
}

static enum serve_auth_result check(const struct serve_auth *a, const char *h, int *key)
{
    return serve_auth_check(a, h, h ? strlen(h) : 0, key);
}

START_TEST(test_serve_auth_parse_lists)
{
    struct serve_auth *a = auth_of("alpha,beta\n  gamma\t\r\n# a comment, not-a-key\n\n,,#x1\n");
    ck_assert_uint_eq(serve_auth_count(a), 4); /* "#x1" is a key: only a line starts a comment */
    int k = -1;
    ck_assert_int_eq(check(a, "Bearer alpha", &k), SERVE_AUTH_OK);
    ck_assert_int_eq(k, 0);
    ck_assert_int_eq(check(a, "Bearer gamma", &k), SERVE_AUTH_OK);
    ck_assert_int_eq(k, 2);
    ck_assert_int_eq(check(a, "Bearer #x1", &k), SERVE_AUTH_OK);
    ck_assert_int_eq(check(a, "Bearer not-a-key", &k), SERVE_AUTH_WRONG);
    ck_assert_int_eq(check(a, "Bearer # a comment", &k), SERVE_AUTH_MALFORMED); /* spaces */
    /* ids: 16 hex digits, distinct, not the key; digests 64 */
    const char *id0 = serve_auth_key_id(a, 0), *id1 = serve_auth_key_id(a, 1);
    ck_assert_uint_eq(strlen(id0), 16);
    ck_assert_str_ne(id0, id1);
    ck_assert_ptr_null(strstr(id0, "alpha"));
    ck_assert_uint_eq(strlen(serve_auth_key_digest(a, 3)), 64);
    ck_assert_int_eq(strncmp(serve_auth_key_digest(a, 0), id0, 16), 0);
    ck_assert_ptr_null(serve_auth_key_id(a, 4));
    ck_assert_ptr_null(serve_auth_key_id(a, -1));
    serve_auth_free(a);
    serve_auth_free(NULL);
}
END_TEST

START_TEST(test_serve_auth_refuses_bad_keys)
{
    struct serve_auth *a;
    char err[256];
    ck_assert_int_eq(serve_auth_new(&a), 0);
    ck_assert_int_eq(serve_auth_add(a, "good", 4, "t", err, sizeof(err)), 0);
    static const struct {
        const char *text;
        size_t len;
        const char *needle;
    } bad[] = {
        {"s3cret\0junk", 11, "0x00"},      /* a NUL byte inside a key */
        {"ok,s3cret\x01", 10, "0x01"},     /* a control byte */
        {"s3cr\xc3\xa9t", 7, "0xc3"},      /* non-ASCII */
        {"good", 4, "repeats"},            /* already in the set */
        {"s3cret\ns3cret", 13, "entry 2"}, /* twice in one list */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_int_eq(serve_auth_add(a, bad[i].text, bad[i].len, "t", err, sizeof(err)),
                         ERR_INVAL);
        ck_assert_msg(strstr(err, bad[i].needle), "%zu: %s", i, err);
        ck_assert_msg(!strstr(err, "s3cr"), "%zu: the message shows the key: %s", i, err);
        ck_assert_uint_eq(serve_auth_count(a), 1); /* unchanged, also after "ok," */
    }
    char *big = malloc(SERVE_AUTH_MAX_KEY + 2);
    memset(big, 'k', SERVE_AUTH_MAX_KEY + 1);
    ck_assert_int_eq(serve_auth_add(a, big, SERVE_AUTH_MAX_KEY + 1, "t", err, sizeof(err)),
                     ERR_INVAL);
    ck_assert_int_eq(serve_auth_add(a, big, SERVE_AUTH_MAX_KEY, "t", err, sizeof(err)), 0);
    free(big);
    ck_assert_uint_eq(serve_auth_count(a), 2);
    /* empty input adds nothing and is no error (the caller refuses an empty set) */
    ck_assert_int_eq(serve_auth_add(a, " \n, \n# only a comment", 21, "t", err, sizeof(err)), 0);
    ck_assert_uint_eq(serve_auth_count(a), 2);
    serve_auth_free(a);
}
END_TEST

START_TEST(test_serve_auth_check_header)
{
    struct serve_auth *a = auth_of("k3y,other-key");
    int k = 7;
    ck_assert_int_eq(check(a, NULL, &k), SERVE_AUTH_MISSING);
    ck_assert_int_eq(check(a, "Bearer k3y", &k), SERVE_AUTH_OK);
    ck_assert_int_eq(k, 0);
    ck_assert_int_eq(check(a, "bearer   other-key", &k), SERVE_AUTH_OK); /* scheme in any case */
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(check(a, "Bearer k3y", NULL), SERVE_AUTH_OK);
    ck_assert_int_eq(check(a, "", &k), SERVE_AUTH_MALFORMED);
    ck_assert_int_eq(check(a, "k3y", &k), SERVE_AUTH_MALFORMED);       /* no scheme */
    ck_assert_int_eq(check(a, "Basic k3y", &k), SERVE_AUTH_MALFORMED); /* wrong scheme */
    ck_assert_int_eq(check(a, "Bearer ", &k), SERVE_AUTH_MALFORMED);   /* no token */
    ck_assert_int_eq(check(a, "Bearer k3y junk", &k), SERVE_AUTH_MALFORMED);
    ck_assert_int_eq(check(a, "Bearer k3", &k), SERVE_AUTH_WRONG);   /* a prefix */
    ck_assert_int_eq(check(a, "Bearer k3yy", &k), SERVE_AUTH_WRONG); /* longer */
    ck_assert_int_eq(check(a, "Bearer K3Y", &k), SERVE_AUTH_WRONG);  /* case-sensitive */
    ck_assert_int_eq(check(a, "Bearer k3y,other-key", &k), SERVE_AUTH_MALFORMED);
    /* the finding: a key followed by a NUL byte and junk was accepted */
    static const char nul[] = "Bearer k3y\0junk";
    ck_assert_int_eq(serve_auth_check(a, nul, sizeof(nul) - 1, &k), SERVE_AUTH_MALFORMED);
    ck_assert_int_eq(serve_auth_check(a, nul, 10, &k), SERVE_AUTH_OK); /* the same bytes, no NUL */
    char *huge = malloc(8 + SERVE_AUTH_MAX_KEY + 1);
    memcpy(huge, "Bearer ", 7);
    memset(huge + 7, 'k', SERVE_AUTH_MAX_KEY + 1);
    ck_assert_int_eq(serve_auth_check(a, huge, 7 + SERVE_AUTH_MAX_KEY + 1, &k), SERVE_AUTH_WRONG);
    free(huge);
    ck_assert_str_eq(serve_auth_result_name(SERVE_AUTH_WRONG), "wrong_key");
    ck_assert_str_eq(serve_auth_result_name(SERVE_AUTH_MISSING), "missing");
    serve_auth_free(a);
}
END_TEST

START_TEST(test_serve_auth_file)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof(path), "%s/cinfer_test_auth_%ld.keys", test_tmpdir(), (long)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# tenants\nteam-a-key\r\nteam-b-key\n", f);
    fclose(f);
    struct serve_auth *a;
    ck_assert_int_eq(serve_auth_new(&a), 0);
    ck_assert_msg(serve_auth_add_file(a, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(serve_auth_count(a), 2);
    ck_assert_int_eq(check(a, "Bearer team-b-key", NULL), SERVE_AUTH_OK);
    /* a bad line names the file and the entry, not the key */
    f = fopen(path, "w");
    fputs("team-c key\n", f);
    fclose(f);
    ck_assert_int_eq(serve_auth_add_file(a, path, err, sizeof(err)), ERR_INVAL);
    ck_assert_msg(strstr(err, path) && strstr(err, "entry 1") && !strstr(err, "team-c"), "%s", err);
    /* too big */
    f = fopen(path, "w");
    for (int i = 0; i <= SERVE_AUTH_MAX_FILE / 8; i++) fputs("abcdefg\n", f);
    fclose(f);
    ck_assert_int_eq(serve_auth_add_file(a, path, err, sizeof(err)), ERR_TOO_BIG);
    unlink(path);
    ck_assert_int_eq(serve_auth_add_file(a, path, err, sizeof(err)), ERR_IO);
    ck_assert_msg(strstr(err, "No such file"), "%s", err);
    ck_assert_uint_eq(serve_auth_count(a), 2);
    serve_auth_free(a);
}
END_TEST

/* One line per period, the rest counted; the line has the reason and route, never a key. */
START_TEST(test_serve_auth_failure_log)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/cinfer_test_auth_log_%ld", test_tmpdir(), (long)getpid());
    FILE *sink = fopen(path, "w+");
    ck_assert_ptr_nonnull(sink);
    log_setup("test", LOG_INFO, LOG_FORMAT_JSON);
    log_set_sink(sink);
    struct serve_auth *a = auth_of("s3cret-key");
    ck_assert_int_eq(serve_auth_log_failure(a, SERVE_AUTH_WRONG, "/v1/completions"), 1);
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(serve_auth_log_failure(a, SERVE_AUTH_MISSING, "/v1/models"), 0);
    struct timespec ts = {1, 100 * 1000 * 1000}; /* past the period */
    nanosleep(&ts, NULL);
    ck_assert_int_eq(serve_auth_log_failure(a, SERVE_AUTH_MALFORMED, "/v1/chat/completions"), 1);
    ck_assert_int_eq(serve_auth_log_failure(NULL, SERVE_AUTH_WRONG, "x"), 0);
    fflush(sink);
    log_set_sink(stderr);
    rewind(sink);
    char text[4096];
    size_t n = fread(text, 1, sizeof(text) - 1, sink);
    text[n] = '\0';
    fclose(sink);
    unlink(path);
    ck_assert_msg(strstr(text, "\"reason\":\"wrong_key\"") &&
                      strstr(text, "\"route\":\"/v1/completions\""),
                  "%s", text);
    ck_assert_msg(strstr(text, "\"reason\":\"malformed\"") && strstr(text, "\"suppressed\":50"),
                  "%s", text);
    ck_assert_ptr_null(strstr(text, "/v1/models"));
    ck_assert_ptr_null(strstr(text, "s3cret"));
    serve_auth_free(a);
}
END_TEST

Suite *serve_auth_suite(void)
{
    Suite *s = suite_create("serve_auth");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_serve_auth_parse_lists);
    tcase_add_test(tc, test_serve_auth_refuses_bad_keys);
    tcase_add_test(tc, test_serve_auth_check_header);
    tcase_add_test(tc, test_serve_auth_file);
    tcase_add_test(tc, test_serve_auth_failure_log);
    suite_add_tcase(s, tc);
    return s;
}
