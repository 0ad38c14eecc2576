/* Failpoints: the CINFER_FAILPOINTS grammar (every malformed form is logged and ignored), hit
 * counting with @N, resets, the environment read once, and two threads hitting one failpoint. */
#include "common/failpoint.h"

#include "common/err.h"
#include "common/log.h"
#include "tests/testutil.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_log_capture cap;

static void capture_start(void)
{
    log_setup("test", LOG_INFO, LOG_FORMAT_TEXT);
    ck_assert_ptr_nonnull(test_log_capture_start(&cap));
}

static const char *capture_end(void)
{
    return test_log_capture_end(&cap);
}

static void teardown(void)
{
    test_log_capture_free(&cap);
    (void)failpoint_configure(NULL);
}

static int count_lines(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

/* Runs first, in a child process that has never read the environment: it is read once, at the
 * first check, and later changes to it are not seen. Exit status 0 when every step held. */
START_TEST(test_failpoint_check_reads_env_once)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int bad = 0;
        setenv(FAILPOINT_ENV, " env.fp=error@2 ;nonsense", 1);
        bad |= failpoint_check("env.fp") != 0;      /* hit 1 */
        bad |= failpoint_check("env.fp") != ERR_IO; /* hit 2 */
        setenv(FAILPOINT_ENV, "", 1);
        bad |= failpoint_check("env.fp") != ERR_IO; /* still armed */
        bad |= failpoint_hits("env.fp") != 3;
        bad |= failpoint_hits("nonsense") != ERR_NOT_FOUND;
        _exit(bad);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

START_TEST(test_failpoint_check_inert_when_unset)
{
    ck_assert_int_eq(failpoint_configure(NULL), 0);
    ck_assert_int_eq(failpoint_check("serve.step"), 0);
    ck_assert_int_eq(failpoint_hits("serve.step"), ERR_NOT_FOUND);
    ck_assert_int_eq(failpoint_configure(""), 0);
    ck_assert_int_eq(failpoint_check("serve.step"), 0);
    ck_assert_int_eq(failpoint_configure(" \t "), 0); /* blank is unset, not malformed */
    ck_assert_int_eq(failpoint_check("serve.step"), 0);
    ck_assert_int_eq(failpoint_hits("serve.step"), ERR_NOT_FOUND);
}
END_TEST

START_TEST(test_failpoint_check_error_fires_every_hit)
{
    ck_assert_int_eq(failpoint_configure("serve.step=error"), 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(failpoint_check("serve.step"), ERR_IO);
    ck_assert_int_eq(failpoint_hits("serve.step"), 3);
    /* Other names, prefixes and extensions of the name are not armed. */
    ck_assert_int_eq(failpoint_check("serve"), 0);
    ck_assert_int_eq(failpoint_check("serve.step2"), 0);
    ck_assert_int_eq(failpoint_check("SERVE.STEP"), 0);
    ck_assert_int_eq(failpoint_hits("serve.step2"), ERR_NOT_FOUND);
    ck_assert_int_eq(failpoint_hits("serve.step"), 3);
}
END_TEST

START_TEST(test_failpoint_check_error_from_hit_n)
{
    ck_assert_int_eq(failpoint_configure("a=error@3"), 0);
    ck_assert_int_eq(failpoint_check("a"), 0);
    ck_assert_int_eq(failpoint_check("a"), 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(failpoint_check("a"), ERR_IO);
    ck_assert_int_eq(failpoint_hits("a"), 6);
    /* @1 is the same as no @N. */
    ck_assert_int_eq(failpoint_configure("a=error@1"), 0);
    ck_assert_int_eq(failpoint_check("a"), ERR_IO);
}
END_TEST

START_TEST(test_failpoint_configure_several_entries)
{
    ck_assert_int_eq(failpoint_configure("a=error@2; b.c-d_E9=error\t;x=error@1000000000000"), 0);
    ck_assert_int_eq(failpoint_check("a"), 0);
    ck_assert_int_eq(failpoint_check("a"), ERR_IO);
    ck_assert_int_eq(failpoint_check("b.c-d_E9"), ERR_IO);
    ck_assert_int_eq(failpoint_check("x"), 0);
    ck_assert_int_eq(failpoint_hits("x"), 1);
}
END_TEST

START_TEST(test_failpoint_configure_resets_and_replaces)
{
    ck_assert_int_eq(failpoint_configure("a=error@2;b=error"), 0);
    ck_assert_int_eq(failpoint_check("a"), 0);
    ck_assert_int_eq(failpoint_check("a"), ERR_IO);
    ck_assert_int_eq(failpoint_configure("a=error@2"), 0);
    ck_assert_int_eq(failpoint_hits("a"), 0); /* counters start again */
    ck_assert_int_eq(failpoint_check("a"), 0);
    ck_assert_int_eq(failpoint_check("b"), 0); /* no longer armed */
    ck_assert_int_eq(failpoint_hits("b"), ERR_NOT_FOUND);
    ck_assert_int_eq(failpoint_configure(NULL), 0);
    ck_assert_int_eq(failpoint_check("a"), 0);
    ck_assert_int_eq(failpoint_hits("a"), ERR_NOT_FOUND);
}
END_TEST

/* Each malformed spec: configure says ERR_INVAL, one warning quotes the bad entry and says why,
 * `armed` (if any) is armed and fires at its first hit, and the bad name is not armed. */
struct malformed_case {
    const char *spec;
    const char *quoted; /* what the warning quotes */
    const char *reason; /* part of the reason */
    const char *armed;  /* a valid name next to the bad entry, or NULL */
    const char *absent; /* a name that must not be armed, or NULL */
};

static const struct malformed_case malformed_cases[] = {
    {"serve.step", "entry=serve.step", "missing '='", NULL, "serve.step"},
    {"serve.step:error", "entry=serve.step:error", "missing '='", NULL, "serve.step"},
    {"=error", "entry==error", "empty name", NULL, NULL},
    {"a=", "entry=a=", "unknown action", NULL, "a"},
    {"a=boom;b=error", "entry=a=boom", "unknown action", "b", "a"},
    {"a=Error", "entry=a=Error", "unknown action", NULL, "a"},
    {"a=error=x", "entry=a=error=x", "unknown action", NULL, "a"},
    {"a=error@", "entry=a=error@", "bad @N", NULL, "a"},
    {"a=error@0", "entry=a=error@0", "bad @N", NULL, "a"},
    {"a=error@-1", "entry=a=error@-1", "bad @N", NULL, "a"},
    {"a=error@+1", "entry=a=error@+1", "bad @N", NULL, "a"},
    {"a=error@5x", "entry=a=error@5x", "bad @N", NULL, "a"},
    {"a=error@ 5", "entry=a=error@ 5", "bad @N", NULL, "a"},
    {"a=error@1@2", "entry=a=error@1@2", "bad @N", NULL, "a"},
    {"a=error@99999999999999999999", "entry=a=error@99999999999999999999", "bad @N", NULL, "a"},
    {"a b=error", "entry=a b=error", "outside [A-Za-z0-9._-]", NULL, "a b"},
    {"a/b=error", "entry=a/b=error", "outside [A-Za-z0-9._-]", NULL, "a/b"},
    {"a=error;;b=error", "entry= ", "empty entry", "a", NULL},
    {"a=error;", "entry= ", "empty entry", "a", NULL},
    {";a=error", "entry= ", "empty entry", "a", NULL},
    {"a=error;a=error@5", "entry=a=error@5", "duplicate name", "a", NULL},
};

START_TEST(test_failpoint_configure_rejects_malformed)
{
    const struct malformed_case *c = &malformed_cases[_i];
    capture_start();
    int rc = failpoint_configure(c->spec);
    const char *out = capture_end();
    ck_assert_msg(rc == ERR_INVAL, "%s: rc %d", c->spec, rc);
    ck_assert_msg(count_lines(out, "ignoring a malformed failpoint") == 1, "%s: %s", c->spec, out);
    ck_assert_msg(strstr(out, c->quoted) != NULL, "%s: no %s in %s", c->spec, c->quoted, out);
    ck_assert_msg(strstr(out, c->reason) != NULL, "%s: no %s in %s", c->spec, c->reason, out);
    if (c->armed) ck_assert_int_eq(failpoint_check(c->armed), ERR_IO);
    if (c->absent) {
        ck_assert_int_eq(failpoint_check(c->absent), 0);
        ck_assert_int_eq(failpoint_hits(c->absent), ERR_NOT_FOUND);
    }
}
END_TEST

START_TEST(test_failpoint_configure_name_length)
{
    char spec[256], name[FAILPOINT_NAME_MAX + 1];
    memset(name, 'n', FAILPOINT_NAME_MAX - 1);
    name[FAILPOINT_NAME_MAX - 1] = '\0'; /* the longest name allowed */
    snprintf(spec, sizeof(spec), "%s=error", name);
    ck_assert_int_eq(failpoint_configure(spec), 0);
    ck_assert_int_eq(failpoint_check(name), ERR_IO);

    name[FAILPOINT_NAME_MAX - 1] = 'n';
    name[FAILPOINT_NAME_MAX] = '\0'; /* one byte too many */
    snprintf(spec, sizeof(spec), "%s=error;ok=error", name);
    capture_start();
    ck_assert_int_eq(failpoint_configure(spec), ERR_INVAL);
    const char *out = capture_end();
    ck_assert_msg(strstr(out, "name too long") != NULL, "%s", out);
    ck_assert_int_eq(failpoint_hits(name), ERR_NOT_FOUND);
    ck_assert_int_eq(failpoint_check("ok"), ERR_IO);
}
END_TEST

START_TEST(test_failpoint_configure_entry_too_long_is_quoted_short)
{
    char spec[1024];
    memset(spec, 'x', 600);
    memcpy(spec + 600, "=error;ok=error", 16);
    capture_start();
    ck_assert_int_eq(failpoint_configure(spec), ERR_INVAL);
    const char *out = capture_end();
    ck_assert_msg(strstr(out, "entry too long") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "xxx...") != NULL, "%s", out);
    ck_assert_msg(strlen(out) < 400, "the warning quotes only the start: %s", out);
    ck_assert_int_eq(failpoint_check("ok"), ERR_IO);
}
END_TEST

START_TEST(test_failpoint_configure_too_many_entries)
{
    char spec[1024];
    size_t len = 0;
    for (int i = 0; i < FAILPOINT_MAX + 4; i++)
        len += (size_t)snprintf(spec + len, sizeof(spec) - len, "%sfp%d=error", i ? ";" : "", i);
    capture_start();
    ck_assert_int_eq(failpoint_configure(spec), ERR_INVAL);
    const char *out = capture_end();
    ck_assert_int_eq(count_lines(out, "too many failpoints"), 4);
    ck_assert_int_eq(count_lines(out, "failpoint armed"), FAILPOINT_MAX);
    char name[16];
    for (int i = 0; i < FAILPOINT_MAX + 4; i++) {
        snprintf(name, sizeof(name), "fp%d", i);
        ck_assert_int_eq(failpoint_check(name), i < FAILPOINT_MAX ? ERR_IO : 0);
    }
}
END_TEST

START_TEST(test_failpoint_configure_bounds_warnings)
{
    /* 1000 malformed entries: a handful of warnings and a count, not a thousand lines. */
    static char spec[4096];
    size_t len = 0;
    for (int i = 0; i < 1000; i++) spec[len++] = ';';
    memcpy(spec + len, "ok=error", 9);
    capture_start();
    ck_assert_int_eq(failpoint_configure(spec), ERR_INVAL);
    const char *out = capture_end();
    ck_assert_int_eq(count_lines(out, "ignoring a malformed failpoint"), 8);
    ck_assert_int_eq(count_lines(out, "further malformed failpoints ignored"), 1);
    ck_assert_msg(strstr(out, "count=992") != NULL, "%s", out);
    ck_assert_int_eq(failpoint_check("ok"), ERR_IO);
}
END_TEST

#define HITS_PER_THREAD 100000

static void *hammer(void *arg)
{
    long *fired = arg;
    for (int i = 0; i < HITS_PER_THREAD; i++)
        if (failpoint_check("shared") == ERR_IO) (*fired)++;
    return NULL;
}

START_TEST(test_failpoint_check_concurrent_hits)
{
    /* Fires from the middle on: every hit is counted once, so exactly the hits past the first
     * HITS_PER_THREAD / 2 fire, however the two threads interleave. */
    char spec[64];
    snprintf(spec, sizeof(spec), "shared=error@%d", HITS_PER_THREAD / 2 + 1);
    ck_assert_int_eq(failpoint_configure(spec), 0);
    long fired[2] = {0, 0};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, &fired[i]), 0);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    ck_assert_int_eq(failpoint_hits("shared"), 2 * HITS_PER_THREAD);
    ck_assert_int_eq(fired[0] + fired[1], 2 * HITS_PER_THREAD - HITS_PER_THREAD / 2);
}
END_TEST

Suite *failpoint_suite(void)
{
    Suite *s = suite_create("failpoint");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_failpoint_check_reads_env_once);
    tcase_add_test(tc, test_failpoint_check_inert_when_unset);
    tcase_add_test(tc, test_failpoint_check_error_fires_every_hit);
    tcase_add_test(tc, test_failpoint_check_error_from_hit_n);
    tcase_add_test(tc, test_failpoint_configure_several_entries);
    tcase_add_test(tc, test_failpoint_configure_resets_and_replaces);
    tcase_add_loop_test(tc, test_failpoint_configure_rejects_malformed, 0,
                        (int)(sizeof(malformed_cases) / sizeof(malformed_cases[0])));
    tcase_add_test(tc, test_failpoint_configure_name_length);
    tcase_add_test(tc, test_failpoint_configure_entry_too_long_is_quoted_short);
    tcase_add_test(tc, test_failpoint_configure_too_many_entries);
    tcase_add_test(tc, test_failpoint_configure_bounds_warnings);
    tcase_add_test(tc, test_failpoint_check_concurrent_hits);
    suite_add_tcase(s, tc);
    return s;
}
