/* Helpers shared by the Check suites. Header-only so each suite stays one binary. */
#ifndef CINFER_TESTS_TESTUTIL_H
#define CINFER_TESTS_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Path of `rel` inside ../shared (CINFER_SHARED overrides), or NULL after printing a SKIP line when
 * it is absent: shared data is optional on a machine without it, and the skip is never silent.
 * Returns a static buffer; not thread-safe. */
static inline const char *test_shared_path(const char *rel)
{
    static char path[4096];
    const char *root = getenv("CINFER_SHARED");
    snprintf(path, sizeof(path), "%s/%s", root ? root : "../shared", rel);
    if (access(path, R_OK) != 0) {
        printf("SKIP: %s not present (shared test data is optional)\n", path);
        return NULL;
    }
    return path;
}

/* Directory for temporary files of this test run (TMPDIR or /tmp). */
static inline const char *test_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

#endif
