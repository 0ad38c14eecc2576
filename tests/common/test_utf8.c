/* common/utf8.c, the tree's one strict UTF-8 validator: RFC 3629's edge cases, incomplete
 * prefixes, first-invalid offsets, and agreement with an independent decode-and-check reference
 * (the formula the Prometheus parser used before it shared this one) over every sequence of up to
 * three bytes and every 4-byte one with a 4-byte lead. */
#include "common/utf8.h"

#include <check.h>
#include <stdint.h>
#include <string.h>

START_TEST(test_utf8_seq_check_is_strict)
{
    const uint8_t *u = (const uint8_t *)"\xe6\x88\x91";
    ck_assert_int_eq(utf8_seq_check(u, 3), 3);
    ck_assert_int_eq(utf8_seq_check(u, 2), 0);
    ck_assert_int_eq(utf8_seq_check(u, 1), 0);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"A", 1), 1);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\x80", 1), -1);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xc0\x80", 2), -1); /* overlong */
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xe0\x80\x80", 3), -1);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xed\xa0\x80", 3), -1); /* surrogate */
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xf4\x90\x80\x80", 4), -1);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xf5", 1), -1);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xf0\x9f", 2), 0);
    ck_assert_int_eq(utf8_seq_check((const uint8_t *)"\xf0\x9f(", 3), -1);
    ck_assert(utf8_valid("h\xc3\xa9llo \xf0\x9f\xa6\x99", 11));
    ck_assert(!utf8_valid("\xf0\x9f\xa6", 3));
    ck_assert(utf8_valid("", 0));
}
END_TEST

START_TEST(test_utf8_invalid_at_offsets)
{
    ck_assert_uint_eq(utf8_invalid_at("abc", 3), 3);
    ck_assert_uint_eq(utf8_invalid_at("", 0), 0);
    ck_assert_uint_eq(utf8_invalid_at("ab\xff", 3), 2);
    ck_assert_uint_eq(utf8_invalid_at("a\xc3\xa9\x80z", 5), 3);   /* stray continuation */
    ck_assert_uint_eq(utf8_invalid_at("ok\xe6\x88", 4), 2);       /* truncated at the end */
    ck_assert_uint_eq(utf8_invalid_at("\xed\xbf\xbfx", 4), 0);    /* surrogate */
    ck_assert_uint_eq(utf8_invalid_at("x\0y", 3), 3);             /* NUL is valid UTF-8 */
    ck_assert_uint_eq(utf8_invalid_at("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
}
END_TEST

/* Length of the valid sequence at s[0..n), 0 when invalid: decode by the formula, then reject
 * overlong forms, surrogates and values above U+10FFFF. */
static size_t ref_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((s[0] & 0xe0) == 0xc0)
        len = 2, cp = s[0] & 0x1f, min = 0x80;
    else if ((s[0] & 0xf0) == 0xe0)
        len = 3, cp = s[0] & 0x0f, min = 0x800;
    else if ((s[0] & 0xf8) == 0xf0)
        len = 4, cp = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* 0 when utf8_seq_check and utf8_invalid_at agree with the reference on s[0..n), else 1 (counted,
 * not asserted: a ck_assert per sequence would cost a pipe write each). */
static int differs(const unsigned char *s, size_t n)
{
    int k = utf8_seq_check(s, n);
    size_t want = ref_seq(s, n);
    /* The reference cannot tell "incomplete" from "invalid": both are 0 there. */
    if (k > 0 ? (size_t)k != want : want != 0) return 1;
    /* The same bytes as a whole string: the first sequence the reference rejects. */
    size_t at = 0, l;
    while (at < n && (l = ref_seq(s + at, n - at)) > 0) at += l;
    return utf8_invalid_at(s, n) != at;
}

START_TEST(test_utf8_agrees_with_reference)
{
    unsigned char s[4] = {0};
    long bad = 0, first = -1;
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (unsigned char)a;
        if (differs(s, 1) && !bad++) first = (long)(s[0] << 24 | s[1] << 16 | s[2] << 8 | s[3]);
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (unsigned char)b;
            if (differs(s, 2) && !bad++) first = (long)(s[0] << 24 | s[1] << 16 | s[2] << 8 | s[3]);
            for (unsigned c = 0; c < 256; c++) {
                s[2] = (unsigned char)c;
                if (differs(s, 3) && !bad++)
                    first = (long)(s[0] << 24 | s[1] << 16 | s[2] << 8 | s[3]);
                if (a < 0xf0 || a > 0xf7 || (b & 0xc0) != 0x80 || (c & 0xc0) != 0x80) continue;
                for (unsigned d = 0; d < 256; d++) {
                    s[3] = (unsigned char)d;
                    if (differs(s, 4) && !bad++)
                        first = (long)(s[0] << 24 | s[1] << 16 | s[2] << 8 | s[3]);
                }
            }
        }
    }
    ck_assert_msg(bad == 0, "%ld sequences differ, the first %08lx", bad, first);
}
END_TEST

Suite *utf8_suite(void)
{
    Suite *s = suite_create("utf8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60); /* the exhaustive check is ~0.5 s, several times that sanitized */
    tcase_add_test(tc, test_utf8_seq_check_is_strict);
    tcase_add_test(tc, test_utf8_invalid_at_offsets);
    tcase_add_test(tc, test_utf8_agrees_with_reference);
    suite_add_tcase(s, tc);
    return s;
}
