/* Unicode helpers behind the tokenizer: generated category / lowercase tables, White_Space, lenient
 * (llama.cpp) UTF-8 decoding (strict validation: tests/common/test_utf8.c), and the GPT-2 byte <->
 * code point mapping. */
#include "engine/text/unicode.h"

#include <check.h>
#include <string.h>

START_TEST(test_unicode_cat_classifies_code_points)
{
    ck_assert_int_eq(unicode_cat('A'), UNICODE_CAT_LETTER);
    ck_assert_int_eq(unicode_cat('z'), UNICODE_CAT_LETTER);
    ck_assert_int_eq(unicode_cat('5'), UNICODE_CAT_NUMBER);
    ck_assert_int_eq(unicode_cat('!'), UNICODE_CAT_PUNCT);
    ck_assert_int_eq(unicode_cat('_'), UNICODE_CAT_PUNCT);
    ck_assert_int_eq(unicode_cat('$'), UNICODE_CAT_SYMBOL);
    ck_assert_int_eq(unicode_cat('~'), UNICODE_CAT_SYMBOL);
    ck_assert_int_eq(unicode_cat(' '), UNICODE_CAT_SEPARATOR);
    ck_assert_int_eq(unicode_cat('\n'), UNICODE_CAT_OTHER);
    ck_assert_int_eq(unicode_cat(0x0301), UNICODE_CAT_MARK);    /* combining acute */
    ck_assert_int_eq(unicode_cat(0x00BD), UNICODE_CAT_NUMBER);  /* ½ */
    ck_assert_int_eq(unicode_cat(0x4E00), UNICODE_CAT_LETTER);  /* 一 */
    ck_assert_int_eq(unicode_cat(0x1780), UNICODE_CAT_LETTER);  /* Khmer ក */
    ck_assert_int_eq(unicode_cat(0x17B6), UNICODE_CAT_MARK);    /* Khmer vowel sign */
    ck_assert_int_eq(unicode_cat(0x1F999), UNICODE_CAT_SYMBOL); /* 🦙 */
    ck_assert_int_eq(unicode_cat(0x200D), UNICODE_CAT_OTHER);   /* ZWJ (Cf) */
    ck_assert_int_eq(unicode_cat(0x0378), UNICODE_CAT_UNDEFINED);
    ck_assert_int_eq(unicode_cat(0x10FFFF), UNICODE_CAT_UNDEFINED);
    ck_assert_int_eq(unicode_cat(0x110000), UNICODE_CAT_UNDEFINED);
    ck_assert_int_eq(unicode_cat(0), UNICODE_CAT_OTHER);
}
END_TEST

START_TEST(test_unicode_whitespace_and_lowercase)
{
    static const uint32_t ws[] = {9,      10,     11,     12,     13,     32,     0x85,   0xA0,
                                  0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) ck_assert(unicode_is_whitespace(ws[i]));
    static const uint32_t not_ws[] = {0, 8, 14, 0x1C, 0x1F, 'a', 0x200B, 0x180E, 0xFEFF};
    for (size_t i = 0; i < sizeof(not_ws) / sizeof(not_ws[0]); i++)
        ck_assert(!unicode_is_whitespace(not_ws[i]));

    ck_assert_uint_eq(unicode_tolower('A'), 'a');
    ck_assert_uint_eq(unicode_tolower('a'), 'a');
    ck_assert_uint_eq(unicode_tolower('1'), '1');
    ck_assert_uint_eq(unicode_tolower(0xC4), 0xE4);   /* Ä */
    ck_assert_uint_eq(unicode_tolower(0x100), 0x101); /* Ā: stride-2 run */
    ck_assert_uint_eq(unicode_tolower(0x101), 0x101);
    ck_assert_uint_eq(unicode_tolower(0x3A3), 0x3C3); /* Σ */
    ck_assert_uint_eq(unicode_tolower(0x410), 0x430); /* А */
    ck_assert_uint_eq(unicode_tolower(0x212A), 'k');  /* Kelvin sign */
    ck_assert_uint_eq(unicode_tolower(0x130), 0x130); /* İ lowers to two code points: kept */
    ck_assert_uint_eq(unicode_tolower(0x10400), 0x10428);
    ck_assert_uint_eq(unicode_tolower(0x4E00), 0x4E00);

    ck_assert(unicode_is_deepseek_letter('q'));
    ck_assert(unicode_is_deepseek_letter(0x1F7D)); /* ώ, written as a range end in the regex */
    ck_assert(!unicode_is_deepseek_letter(0x4E00));
    ck_assert(unicode_is_deepseek_punct('~'));
    ck_assert(unicode_is_deepseek_punct(0x3000));
    ck_assert(!unicode_is_deepseek_punct('5'));
    ck_assert(unicode_is_cjk(0x4E00));
    ck_assert(unicode_is_cjk(0xAC00));
    ck_assert(!unicode_is_cjk('a'));
}
END_TEST

START_TEST(test_unicode_decode_is_lenient_like_llama_cpp)
{
    static const char s[] = "a\xc3\xa9\xe6\x88\x91\xf0\x9f\xa6\x99\xff\x80\xc3(\xe6\x88";
    size_t len = sizeof(s) - 1, pos = 0;
    static const uint32_t want[] = {'a',    0xE9,   0x6211, 0x1F999, 0xFFFD,
                                    0xFFFD, 0xFFFD, '(',    0xFFFD,  0xFFFD};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ck_assert_uint_lt(pos, len);
        ck_assert_uint_eq(unicode_decode(s, len, &pos), want[i]);
    }
    ck_assert_uint_eq(pos, len);
    /* A 4-byte form beyond U+10FFFF decodes to U+FFFD but consumes the sequence. */
    pos = 0;
    ck_assert_uint_eq(unicode_decode("\xf7\xbf\xbf\xbf", 4, &pos), 0xFFFD);
    ck_assert_uint_eq(pos, 4);

    char out[4];
    ck_assert_uint_eq(unicode_encode('x', out), 1);
    ck_assert_uint_eq(unicode_encode(0xE9, out), 2);
    ck_assert_mem_eq(out, "\xc3\xa9", 2);
    ck_assert_uint_eq(unicode_encode(0x6211, out), 3);
    ck_assert_mem_eq(out, "\xe6\x88\x91", 3);
    ck_assert_uint_eq(unicode_encode(0x1F999, out), 4);
    ck_assert_mem_eq(out, "\xf0\x9f\xa6\x99", 4);
    ck_assert_uint_eq(unicode_encode(0x110000, out), 3);
    ck_assert_mem_eq(out, "\xef\xbf\xbd", 3);
}
END_TEST

START_TEST(test_unicode_byte_mapping_is_gpt2s)
{
    ck_assert_uint_eq(unicode_byte_to_cpt('A'), 'A');
    ck_assert_uint_eq(unicode_byte_to_cpt(' '), 0x120);  /* Ġ */
    ck_assert_uint_eq(unicode_byte_to_cpt('\n'), 0x10A); /* Ċ */
    ck_assert_uint_eq(unicode_byte_to_cpt(0), 0x100);
    ck_assert_uint_eq(unicode_byte_to_cpt(0x7F), 0x121);
    ck_assert_uint_eq(unicode_byte_to_cpt(0xAD), 0x143);
    ck_assert_uint_eq(unicode_byte_to_cpt(0xFF), 0xFF);
    bool seen[0x144] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t c = unicode_byte_to_cpt((uint8_t)b);
        ck_assert_uint_lt(c, 0x144);
        ck_assert(!seen[c]);
        seen[c] = true;
        ck_assert_int_eq(unicode_cpt_to_byte(c), b);
    }
    ck_assert_int_eq(unicode_cpt_to_byte(' '), -1);
    ck_assert_int_eq(unicode_cpt_to_byte(0x144), -1);
    ck_assert_int_eq(unicode_cpt_to_byte(0x6211), -1);
}
END_TEST

Suite *tokenizer_unicode_suite(void);
Suite *tokenizer_unicode_suite(void)
{
    Suite *s = suite_create("tokenizer_unicode");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_unicode_cat_classifies_code_points);
    tcase_add_test(tc, test_unicode_whitespace_and_lowercase);
    tcase_add_test(tc, test_unicode_decode_is_lenient_like_llama_cpp);
    tcase_add_test(tc, test_unicode_byte_mapping_is_gpt2s);
    suite_add_tcase(s, tc);
    return s;
}
