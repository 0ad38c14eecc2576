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

extern const uint32_t unicode_cat_runs[]; /* (start << 3) | enum unicode_cat */
extern const size_t unicode_cat_runs_len;
extern const struct unicode_case_run unicode_lower_runs[];
extern const size_t unicode_lower_runs_len;
extern const struct unicode_range unicode_deepseek_letters[];
extern const size_t unicode_deepseek_letters_len;
extern const struct unicode_range unicode_deepseek_punct[];
extern const size_t unicode_deepseek_punct_len;
extern const struct unicode_range unicode_cjk[];
extern const size_t unicode_cjk_len;

#endif
