/* Helpers shared by the Check suites. Header-only so each suite stays one binary. */
#ifndef CINFER_TESTS_TESTUTIL_H
#define CINFER_TESTS_TESTUTIL_H

#include "common/log.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Skipping a check (the one convention; hack/run-tests.sh counts it): a check that cannot run here
 * (no ../shared data, no live cluster, no IPv6) calls test_skip() and returns at once. test_skip
 * prints "SKIP: <reason>" for people and sets the check's last mark point to the file name
 * TEST_SKIP_MARK, so that its result line (CK_VERBOSITY=verbose, which the runner sets) reads
 * "(skipped):1:P:<tcase>:<test>:..." and the runner counts the check as skipped, not passed, exactly
 * once however many reasons it printed. A check that asserts anything after test_skip moves the
 * mark and counts as passed: skip whole checks, not halves. */
#define TEST_SKIP_MARK "(skipped)"

static inline void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    _mark_point(TEST_SKIP_MARK, 1);
}

/* Path of `rel` inside ../shared (CINFER_SHARED overrides), or NULL after test_skip() when it is
 * absent: shared data is optional on a machine without it, and the skip is never silent (the
 * caller returns). Returns a static buffer; not thread-safe. */
static inline const char *test_shared_path(const char *rel)
{
    static char path[4096];
    const char *root = getenv("CINFER_SHARED");
    snprintf(path, sizeof(path), "%s/%s", root ? root : "../shared", rel);
    if (access(path, R_OK) != 0) {
        test_skip("%s not present (shared test data is optional)", path);
        return NULL;
    }
    return path;
}

/* Reads the whole file at `path` (NULL allowed) into a new NUL-terminated buffer (caller frees)
 * and stores its length in *len when `len` is not NULL. NULL when it cannot be read. */
static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return NULL;
    size_t cap = 4096, n = 0, r;
    char *b = malloc(cap + 1);
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) free(b);
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = '\0';
    if (len) *len = n;
    return b;
}

/* Directory for temporary files of this test run (TMPDIR or /tmp). */
static inline const char *test_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

/* Log capture: between test_log_capture_start and test_log_capture_end, common/log writes into
 * memory instead of stderr. start returns the sink, NULL when it cannot be opened (nothing is
 * redirected then); end restores stderr and returns the text, owned by `c` until
 * test_log_capture_free (safe to call again, or without a capture). */
struct test_log_capture {
    char *text;
    size_t len;
    FILE *sink;
};

static inline FILE *test_log_capture_start(struct test_log_capture *c)
{
    c->sink = open_memstream(&c->text, &c->len);
    if (c->sink) log_set_sink(c->sink);
    return c->sink;
}

static inline const char *test_log_capture_end(struct test_log_capture *c)
{
    if (c->sink) {
        fflush(c->sink);
        fclose(c->sink);
        c->sink = NULL;
    }
    log_set_sink(NULL);
    return c->text;
}

static inline void test_log_capture_free(struct test_log_capture *c)
{
    free(c->text);
    c->text = NULL;
    c->len = 0;
}

#endif
