/* Structured logging: JSON validity, escaping, levels, truncation, text mode. */
#include "common/err.h"
#include "common/log.h"
#include "tests/testutil.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static struct test_log_capture cap;

static void capture_start(void)
{
    ck_assert_ptr_nonnull(test_log_capture_start(&cap));
}

static const char *capture_end(void)
{
    return test_log_capture_end(&cap);
}

static void teardown(void)
{
    test_log_capture_free(&cap);
    log_setup("cinfer", LOG_INFO, LOG_FORMAT_JSON);
}

START_TEST(test_log_emit_json_is_valid_and_escaped)
{
    log_setup("engine", LOG_DEBUG, LOG_FORMAT_JSON);
    capture_start();
    log_info("hello \"world\"\n", LOG_S("path", "a\\b\t\x01"), LOG_I("n", -5), LOG_F("x", 0.5),
             LOG_B("ok", true), LOG_S("nil", NULL), LOG_F("nan", 0.0 / 0.0));
    const char *out = capture_end();
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
    ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1); /* exactly one line */
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "invalid JSON: %s: %s", e.text, out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "level")), "info");
    ck_assert_str_eq(json_string_value(json_object_get(j, "component")), "engine");
    ck_assert_str_eq(json_string_value(json_object_get(j, "msg")), "hello \"world\"\n");
    ck_assert_str_eq(json_string_value(json_object_get(j, "path")), "a\\b\t\x01");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "n")), -5);
    ck_assert(json_is_true(json_object_get(j, "ok")));
    ck_assert(json_is_null(json_object_get(j, "nil")));
    ck_assert(json_is_null(json_object_get(j, "nan")));
    ck_assert_ptr_nonnull(json_object_get(j, "ts"));
    json_decref(j);
}
END_TEST

START_TEST(test_log_level_filters_before_formatting)
{
    log_setup("engine", LOG_WARN, LOG_FORMAT_JSON);
    capture_start();
    int evaluated = 0;
    log_info("dropped", LOG_I("n", ++evaluated));
    log_warn("kept");
    const char *out = capture_end();
    ck_assert_int_eq(evaluated, 0);
    ck_assert_ptr_null(strstr(out, "dropped"));
    ck_assert_ptr_nonnull(strstr(out, "\"kept\""));
    ck_assert(!log_enabled(LOG_DEBUG));
    ck_assert(log_enabled(LOG_ERROR));
}
END_TEST

START_TEST(test_log_emit_truncates_long_lines_to_valid_json)
{
    log_setup("engine", LOG_INFO, LOG_FORMAT_JSON);
    size_t n = 20000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++) big[i] = i % 3 ? 'a' : '"';
    big[n] = 0;
    capture_start();
    log_error("long", LOG_S("value", big));
    log_error(big);
    const char *out = capture_end();
    char *line2 = strchr(out, '\n');
    ck_assert_ptr_nonnull(line2);
    *line2++ = 0;
    json_error_t e;
    json_t *j1 = json_loads(out, 0, &e), *j2 = json_loads(line2, JSON_DISABLE_EOF_CHECK, &e);
    ck_assert_msg(j1 && j2, "truncated line is not JSON: %s", e.text);
    ck_assert(json_is_true(json_object_get(j1, "truncated")));
    ck_assert(json_is_true(json_object_get(j2, "truncated")));
    ck_assert_uint_le(strlen(out), 4096);
    json_decref(j1);
    json_decref(j2);
    free(big);
}
END_TEST

START_TEST(test_log_emit_text_mode_is_readable)
{
    log_setup("operator", LOG_INFO, LOG_FORMAT_TEXT);
    capture_start();
    log_warn("reconcile failed", LOG_S("name", "demo"), LOG_I("attempt", 3));
    const char *out = capture_end();
    ck_assert_ptr_nonnull(strstr(out, "WARN  operator: reconcile failed name=demo attempt=3\n"));
}
END_TEST

START_TEST(test_log_parse_names)
{
    enum log_level l;
    enum log_format f;
    ck_assert_int_eq(log_level_parse("debug", &l), 0);
    ck_assert_int_eq(l, LOG_DEBUG);
    ck_assert_int_eq(log_level_parse("warning", &l), 0);
    ck_assert_int_eq(l, LOG_WARN);
    ck_assert_int_eq(log_level_parse("loud", &l), ERR_INVAL);
    ck_assert_int_eq(log_level_parse(NULL, &l), ERR_INVAL);
    ck_assert_int_eq(log_format_parse("text", &f), 0);
    ck_assert_int_eq(f, LOG_FORMAT_TEXT);
    ck_assert_int_eq(log_format_parse("xml", &f), ERR_INVAL);
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_log_emit_json_is_valid_and_escaped);
    tcase_add_test(tc, test_log_level_filters_before_formatting);
    tcase_add_test(tc, test_log_emit_truncates_long_lines_to_valid_json);
    tcase_add_test(tc, test_log_emit_text_mode_is_readable);
    tcase_add_test(tc, test_log_parse_names);
    suite_add_tcase(s, tc);
    return s;
}
