/* Golden-file comparison for operator tests: compares a computed JSON value with
 * tests/testdata/operator/<name>; CINFER_UPDATE_GOLDEN=1 rewrites the file instead (review the diff). */
#ifndef CINFER_TESTS_OPERATOR_GOLDEN_H
#define CINFER_TESTS_OPERATOR_GOLDEN_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#define GOLDEN_DIR "tests/testdata/operator/"

static inline json_t *golden_load(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), GOLDEN_DIR "%s", name);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static inline void golden_check(const json_t *got, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), GOLDEN_DIR "%s", name);
    const char *update = getenv("CINFER_UPDATE_GOLDEN");
    if (update && *update == '1') {
        ck_assert_int_eq(json_dump_file(got, path, JSON_INDENT(2) | JSON_SORT_KEYS), 0);
        return;
    }
    json_t *want = golden_load(name);
    if (!json_equal(want, (json_t *)got)) {
        char *g = json_dumps(got, JSON_INDENT(2) | JSON_SORT_KEYS);
        ck_abort_msg("%s differs from the computed value:\n%s", path, g ? g : "(null)");
    }
    json_decref(want);
}

#endif
