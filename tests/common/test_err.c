/* common/err.c: err_str names every code, and err_fmt, the one formatter of error-message buffers:
 * returns its code, writes nothing without a buffer, and cuts an over-long message at a character
 * boundary. */
#include "common/err.h"

#include <check.h>
#include <string.h>

START_TEST(test_err_str_names_every_code)
{
    for (int c = ERR_INTERNAL; c <= ERR_OK; c++) {
        const char *s = err_str(c);
        ck_assert_ptr_nonnull(s);
        ck_assert_str_ne(s, "unknown error");
        for (int d = c + 1; d <= ERR_OK; d++) ck_assert_str_ne(s, err_str(d));
    }
    ck_assert_str_eq(err_str(1), "unknown error");
    ck_assert_str_eq(err_str(ERR_INTERNAL - 1), "unknown error");
}
END_TEST

START_TEST(test_err_fmt_formats_and_returns_rc)
{
    char buf[64];
    ck_assert_int_eq(err_fmt(buf, sizeof(buf), ERR_INVAL, "key %s: %d", "n", 7), ERR_INVAL);
    ck_assert_str_eq(buf, "key n: 7");
    ck_assert_int_eq(err_fmt(NULL, 0, ERR_IO, "x"), ERR_IO); /* no buffer: nothing written */
    buf[0] = 'z';
    ck_assert_int_eq(err_fmt(buf, 0, ERR_NOMEM, "x"), ERR_NOMEM);
    ck_assert_int_eq(buf[0], 'z');
}
END_TEST

START_TEST(test_err_fmt_truncates_on_a_character_boundary)
{
    char buf[8];
    err_fmt(buf, sizeof(buf), 0, "%s", "abcdefghij");
    ck_assert_str_eq(buf, "abcdefg"); /* plain truncation, NUL-terminated */
    /* "abcde" + U+00E9 (2 bytes) + "x": 7 bytes fit, so the cut falls after the whole character. */
    err_fmt(buf, sizeof(buf), 0, "%s", "abcde\xc3\xa9x");
    ck_assert_str_eq(buf, "abcde\xc3\xa9");
    /* "abcdef" + U+00E9: only its lead byte would fit, and it is dropped. */
    err_fmt(buf, sizeof(buf), 0, "%s", "abcdef\xc3\xa9");
    ck_assert_str_eq(buf, "abcdef");
    /* A 4-byte character cut after two of its bytes. */
    err_fmt(buf, sizeof(buf), 0, "%s", "abcde\xf0\x9f\xa6\x99");
    ck_assert_str_eq(buf, "abcde");
    /* A message that fits is never trimmed. */
    err_fmt(buf, sizeof(buf), 0, "%s", "\xf0\x9f\xa6\x99");
    ck_assert_str_eq(buf, "\xf0\x9f\xa6\x99");
}
END_TEST

Suite *err_suite(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_err_str_names_every_code);
    tcase_add_test(tc, test_err_fmt_formats_and_returns_rc);
    tcase_add_test(tc, test_err_fmt_truncates_on_a_character_boundary);
    suite_add_tcase(s, tc);
    return s;
}
