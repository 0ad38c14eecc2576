/* Unicode helpers for the tokenizer and the chat-template interpreter: UTF-8 decoding the way
 * llama.cpp does it (lenient, invalid bytes become U+FFFD one byte at a time; strict validation is
 * common/utf8.h), general-category classes, White_Space, simple lowercase, the GPT-2 byte <-> code
 * point mapping of byte-level BPE, and Python's case mappings and case properties
 * (str.upper/lower/title/islower/isupper). Tables come from hack/gen-unicode-tables.py. Pure
 * functions, any thread. */
#ifndef CINFER_ENGINE_UNICODE_H
#define CINFER_ENGINE_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UNICODE_REPLACEMENT 0xFFFDu

/* General-category class (first letter of the category); must match hack/gen-unicode-tables.py. */
enum unicode_cat {
    UNICODE_CAT_UNDEFINED = 0, /* Cn, or beyond U+10FFFF */
    UNICODE_CAT_LETTER = 1,    /* L* */
    UNICODE_CAT_NUMBER = 2,    /* N* */
    UNICODE_CAT_PUNCT = 3,     /* P* */
    UNICODE_CAT_MARK = 4,      /* M* */
    UNICODE_CAT_SYMBOL = 5,    /* S* */
    UNICODE_CAT_SEPARATOR = 6, /* Z* */
    UNICODE_CAT_OTHER = 7,     /* Cc, Cf, Cs, Co */
};

/* Length of the UTF-8 sequence announced by lead byte `b` (1 for continuation bytes), as llama.cpp's
 * unicode_len_utf8: callers clamp it to the bytes left. */
size_t unicode_utf8_len(uint8_t b);

/* Decodes the code point at s[*pos] (pos < len) and advances *pos. Lenient like llama.cpp: any lead
 * byte with enough continuation bytes is accepted (no overlong/surrogate checks); otherwise returns
 * U+FFFD and advances one byte. Values above U+10FFFF also become U+FFFD. */
uint32_t unicode_decode(const char *s, size_t len, size_t *pos);

/* Encodes `cpt` (<= U+10FFFF) into out[0..3]; returns the byte count (1-4). Larger values encode
 * U+FFFD. */
size_t unicode_encode(uint32_t cpt, char out[4]);

enum unicode_cat unicode_cat(uint32_t cpt);
/* The Unicode White_Space property (PropList.txt). */
bool unicode_is_whitespace(uint32_t cpt);
/* Simple (one code point) lowercase mapping; identity when there is none. */
uint32_t unicode_tolower(uint32_t cpt);

/* Python's str.lower() / upper() / title() of one code point (full mappings: "ß".upper() is "SS",
 * "İ".lower() is "i̇"; no final-sigma context here). Writes 1-3 code points to out and returns the
 * count. */
enum unicode_case { UNICODE_CASE_LOWER = 0, UNICODE_CASE_UPPER = 1, UNICODE_CASE_TITLE = 2 };
size_t unicode_case_full(uint32_t cpt, enum unicode_case kind, uint32_t out[3]);
/* The Lowercase / Uppercase / Cased / Case_Ignorable properties (str.islower() of one character,
 * ...; Cased and Case_Ignorable as Unicode's D135 and D136 define them). */
bool unicode_is_lower(uint32_t cpt);
bool unicode_is_upper(uint32_t cpt);
bool unicode_is_cased(uint32_t cpt);
bool unicode_is_case_ignorable(uint32_t cpt);

/* The explicit classes of the deepseek-llm / deepseek-coder pre-tokenizer regexes. */
bool unicode_is_deepseek_letter(uint32_t cpt);
bool unicode_is_deepseek_punct(uint32_t cpt);
bool unicode_is_cjk(uint32_t cpt);

/* GPT-2 byte-level mapping: every byte gets a printable code point (printable Latin-1 bytes map to
 * themselves, the rest to U+0100..U+0143). unicode_cpt_to_byte returns -1 for code points outside the
 * image of the mapping. */
uint32_t unicode_byte_to_cpt(uint8_t b);
int unicode_cpt_to_byte(uint32_t cpt);

#endif
