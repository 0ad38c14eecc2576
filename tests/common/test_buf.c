/* Bounded buffers: growth, limits, printf, steal. */
#include "common/buf.h"
#include "common/err.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_buf_append_grows_and_terminates)
{
    struct buf b;
    buf_init(&b, 0);
    ck_assert_str_eq(buf_cstr(&b), "");
    for (int i = 0; i < 1000; i++) ck_assert_int_eq(buf_puts(&b, "abc"), 0);
    ck_assert_uint_eq(b.len, 3000);
    ck_assert_int_eq(b.data[3000], 0);
    ck_assert_int_eq(memcmp(b.data + 2997, "abc", 3), 0);
    buf_fini(&b);
    buf_fini(&b); /* idempotent */
    buf_fini(NULL);
}
END_TEST

START_TEST(test_buf_append_rejects_over_max_without_partial_write)
{
    struct buf b;
    buf_init(&b, 10);
    ck_assert_int_eq(buf_puts(&b, "12345678"), 0);
    ck_assert_int_eq(buf_puts(&b, "abc"), ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&b), "12345678");
    ck_assert_int_eq(buf_puts(&b, "ab"), 0);
    ck_assert_int_eq(buf_putc(&b, 'x'), ERR_TOO_BIG);
    ck_assert_int_eq(buf_printf(&b, "%d", 1), ERR_TOO_BIG);
    ck_assert_uint_eq(b.len, 10);
    buf_fini(&b);
}
END_TEST

START_TEST(test_buf_append_huge_length_is_too_big)
{
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_append(&b, "x", SIZE_MAX), ERR_TOO_BIG);
    ck_assert_int_eq(buf_append(&b, "x", SIZE_MAX - 1), ERR_TOO_BIG);
    buf_fini(&b);
}
END_TEST

START_TEST(test_buf_printf_formats_long_output)
{
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_printf(&b, "%s-%d", "x", 42), 0);
    char big[500];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    ck_assert_int_eq(buf_printf(&b, "[%s]", big), 0);
    ck_assert_uint_eq(b.len, 4 + 501);
    ck_assert_int_eq(strncmp(buf_cstr(&b), "x-42[yyy", 8), 0);
    buf_fini(&b);
}
END_TEST

START_TEST(test_buf_steal_and_reset)
{
    struct buf b;
    buf_init(&b, 100);
    char *empty = buf_steal(&b);
    ck_assert_str_eq(empty, "");
    free(empty);
    buf_puts(&b, "hello");
    buf_reset(&b);
    ck_assert_str_eq(buf_cstr(&b), "");
    buf_puts(&b, "world");
    char *s = buf_steal(&b);
    ck_assert_str_eq(s, "world");
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.max, 100);
    free(s);
    buf_fini(&b);
}
END_TEST

/* A whole file is appended (across the 64 KiB read chunks); a missing file is ERR_IO; a file past
 * the maximum is ERR_TOO_BIG. */
START_TEST(test_buf_append_file_reads_whole_file_and_checks_bounds)
{
    char path[] = "/tmp/cinfer-test-buf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 100000; i++) fputc('a' + i % 26, f);
    ck_assert_int_eq(fclose(f), 0);
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_puts(&b, "x"), 0);
    ck_assert_int_eq(buf_append_file(&b, path), 0);
    ck_assert_uint_eq(b.len, 100001);
    ck_assert_int_eq(b.data[0], 'x');
    ck_assert_int_eq(b.data[1], 'a');
    ck_assert_int_eq(b.data[100000], 'a' + 99999 % 26);
    buf_fini(&b);
    buf_init(&b, 99999);
    ck_assert_int_eq(buf_append_file(&b, path), ERR_TOO_BIG);
    buf_fini(&b);
    buf_init(&b, 0);
    ck_assert_int_eq(buf_append_file(&b, "/nonexistent/cinfer-test-buf"), ERR_IO);
    ck_assert_uint_eq(b.len, 0);
    buf_fini(&b);
    unlink(path);
}
END_TEST

Suite *buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_buf_append_grows_and_terminates);
    tcase_add_test(tc, test_buf_append_rejects_over_max_without_partial_write);
    tcase_add_test(tc, test_buf_append_huge_length_is_too_big);
    tcase_add_test(tc, test_buf_printf_formats_long_output);
    tcase_add_test(tc, test_buf_steal_and_reset);
    tcase_add_test(tc, test_buf_append_file_reads_whole_file_and_checks_bounds);
    suite_add_tcase(s, tc);
    return s;
}
