/* Declarations of the generated Unicode tables (engine/text/unicode_tables.c, written by
 * hack/gen-unicode-tables.py). Only engine/text/unicode.c reads them; everything else goes through
 * engine/text/unicode.h. */
#ifndef CINFER_ENGINE_UNICODE_TABLES_H
#define CINFER_ENGINE_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

struct unicode_range {
    uint32_t lo, hi; /* inclusive */
};

struct unicode_case_run {
    uint32_t start;
    int32_t count, stride, delta; /* start + i*stride maps to itself + delta, for i < count */
};

/* A case mapping to several code points (Python's full mappings: "ß".upper() == "SS"). */
struct unicode_special_case {
    uint32_t cpt;
    uint8_t kind, n; /* enum unicode_case; code points in to[] */
    uint32_t to[3];
};

extern const uint32_t unicode_cat_runs[]; /* (start << 3) | enum unicode_cat */
extern const size_t unicode_cat_runs_len;
extern const struct unicode_case_run unicode_lower_runs[];
extern const size_t unicode_lower_runs_len;
extern const struct unicode_case_run unicode_upper_runs[];
extern const size_t unicode_upper_runs_len;
extern const struct unicode_case_run unicode_title_runs[];
extern const size_t unicode_title_runs_len;
extern const struct unicode_special_case unicode_special_cases[];
extern const size_t unicode_special_cases_len;
extern const struct unicode_range unicode_lowercase[];
extern const size_t unicode_lowercase_len;
extern const struct unicode_range unicode_uppercase[];
extern const size_t unicode_uppercase_len;
extern const struct unicode_range unicode_cased[];
extern const size_t unicode_cased_len;
extern const struct unicode_range unicode_case_ignorable[];
extern const size_t unicode_case_ignorable_len;
extern const struct unicode_range unicode_deepseek_letters[];
extern const size_t unicode_deepseek_letters_len;
extern const struct unicode_range unicode_deepseek_punct[];
extern const size_t unicode_deepseek_punct_len;
extern const struct unicode_range unicode_cjk[];
extern const size_t unicode_cjk_len;

#endif
