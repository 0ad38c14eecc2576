/* Pre-tokenizers of byte-level BPE vocabularies: the regex sequences llama.cpp selects by
 * tokenizer.ggml.pre, implemented as hand-written matchers over Unicode categories (POSIX regex has
 * no \p{L}). Semantics follow llama.cpp's unicode_regex_split: the regexes run one after another,
 * each over every piece the previous one produced (a regex never sees past its piece, which matters
 * for (?!\S) and $); matches and the unmatched text between them both become pieces; alternatives
 * are tried in order at the leftmost position (ECMAScript). Like llama.cpp, \s is the White_Space
 * property and ASCII characters outside \p{..} classes are classified by their Unicode category. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdlib.h>

#define F_CAT 0x07 /* enum unicode_cat */
#define F_WS  0x08

struct text {
    const uint32_t *c;
    const uint8_t *f;
};

/* Returns the length of the match at `pos` (0: none), never reaching past `end`. */
typedef size_t (*match_fn)(const struct text *t, size_t pos, size_t end);

static bool is_ws(const struct text *t, size_t i)
{
    return t->f[i] & F_WS;
}

static bool is_cat(const struct text *t, size_t i, enum unicode_cat cat)
{
    return (t->f[i] & F_CAT) == cat;
}

static bool is_letter(const struct text *t, size_t i)
{
    return is_cat(t, i, UNICODE_CAT_LETTER);
}

static bool is_number(const struct text *t, size_t i)
{
    return is_cat(t, i, UNICODE_CAT_NUMBER);
}

/* [^\s\p{L}\p{N}] */
static bool is_other(const struct text *t, size_t i)
{
    return !is_ws(t, i) && !is_letter(t, i) && !is_number(t, i);
}

static bool is_newline(const struct text *t, size_t i)
{
    return t->c[i] == '\r' || t->c[i] == '\n';
}

static size_t run(const struct text *t, size_t pos, size_t end,
                  bool (*pred)(const struct text *, size_t))
{
    size_t i = pos;
    while (i < end && pred(t, i)) i++;
    return i - pos;
}

/* 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (llama3's (?i:...) / '[sS] form). */
static size_t contraction(const struct text *t, size_t pos, size_t end, bool fold)
{
    if (t->c[pos] != '\'' || pos + 1 >= end) return 0;
    uint32_t a = fold ? unicode_tolower(t->c[pos + 1]) : t->c[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end) return 0;
    uint32_t b = fold ? unicode_tolower(t->c[pos + 2]) : t->c[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) then \s+: a whitespace run, less its last character when a non-space follows (that one
 * then prefixes the next word); a lone whitespace before a non-space is unmatched by the regex, and
 * becoming a piece of its own gives the same split. */
static size_t ws_tail(const struct text *t, size_t pos, size_t end)
{
    size_t n = run(t, pos, end, is_ws);
    if (n == 0) return 0;
    if (pos + n == end || n == 1) return n;
    return n - 1;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static size_t match_gpt2(const struct text *t, size_t pos, size_t end)
{
    size_t n = contraction(t, pos, end, false);
    if (n) return n;
    size_t q = (t->c[pos] == ' ' && pos + 1 < end) ? pos + 1 : pos;
    if (is_letter(t, q)) return q - pos + run(t, q, end, is_letter);
    if (is_number(t, q)) return q - pos + run(t, q, end, is_number);
    if (is_other(t, q)) return q - pos + run(t, q, end, is_other);
    return ws_tail(t, pos, end);
}

static bool is_mark(const struct text *t, size_t i)
{
    return is_cat(t, i, UNICODE_CAT_MARK);
}

/* [\p{L}\p{M}] and [^\s\p{L}\p{M}\p{N}] (qwen35). */
static bool is_letter_or_mark(const struct text *t, size_t i)
{
    return is_letter(t, i) || is_mark(t, i);
}

static bool is_other_nor_mark(const struct text *t, size_t i)
{
    return is_other(t, i) && !is_mark(t, i);
}

/* llama3 / qwen2 / qwen35 (max_digits 3 / 1 / 1; qwen35 counts marks as letters):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_llama3_like(const struct text *t, size_t pos, size_t end, size_t max_digits,
                                bool marks)
{
    bool (*letter)(const struct text *, size_t) = marks ? is_letter_or_mark : is_letter;
    bool (*other)(const struct text *, size_t) = marks ? is_other_nor_mark : is_other;
    size_t n = contraction(t, pos, end, true);
    if (n) return n;
    if (letter(t, pos)) return run(t, pos, end, letter);
    if (!is_newline(t, pos) && !is_number(t, pos) && pos + 1 < end && letter(t, pos + 1))
        return 1 + run(t, pos + 1, end, letter);
    if (is_number(t, pos)) {
        n = run(t, pos, end, is_number);
        return n < max_digits ? n : max_digits;
    }
    size_t q = (t->c[pos] == ' ' && pos + 1 < end && other(t, pos + 1)) ? pos + 1 : pos;
    if (other(t, q)) {
        size_t e = q + run(t, q, end, other);
        return e + run(t, e, end, is_newline) - pos;
    }
    n = run(t, pos, end, is_ws);
    for (size_t k = n; k > 0; k--) /* \s*[\r\n]+ ends after the run's last newline */
        if (is_newline(t, pos + k - 1)) return k;
    return ws_tail(t, pos, end);
}

static size_t match_llama3(const struct text *t, size_t pos, size_t end)
{
    return match_llama3_like(t, pos, end, 3, false);
}

static size_t match_qwen2(const struct text *t, size_t pos, size_t end)
{
    return match_llama3_like(t, pos, end, 1, false);
}

static size_t match_qwen35(const struct text *t, size_t pos, size_t end)
{
    return match_llama3_like(t, pos, end, 1, true);
}

/* The gpt-4o and tekken regexes as llama.cpp runs them: std::regex over text whose non-ASCII code
 * points are collapsed to one placeholder per category, with its adaptation of the case classes:
 * "upper" is a letter other than a-z and "lower" a letter other than A-Z, so a non-ASCII letter is
 * both (HF's \p{Lu}/\p{Ll} differ there; llama.cpp's splits are the ones reproduced here).
 *   [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n/]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * with C the contractions '[sS]|'[tT]|'[rR][eE]|... (gpt-4o only). Alternatives are tried in order
 * with ECMAScript's backtracking: U* gives back letters until L+ can start. */
static bool is_upperish(const struct text *t, size_t i)
{
    return is_letter(t, i) && !(t->c[i] >= 'a' && t->c[i] <= 'z');
}

static bool is_lowerish(const struct text *t, size_t i)
{
    return is_letter(t, i) && !(t->c[i] >= 'A' && t->c[i] <= 'Z');
}

static bool is_case_prefix(const struct text *t, size_t i)
{
    return !is_newline(t, i) && !is_letter(t, i) && !is_number(t, i);
}

/* '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD] (ASCII letters only). */
static size_t ascii_contraction(const struct text *t, size_t pos, size_t end)
{
    if (pos + 1 >= end || t->c[pos] != '\'') return 0;
    uint32_t a = t->c[pos + 1] | 0x20, b = pos + 2 < end ? t->c[pos + 2] | 0x20 : 0;
    if (t->c[pos + 1] >= 0x80) return 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < end && t->c[pos + 2] < 0x80 &&
        ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')))
        return 3;
    return 0;
}

/* U*L+C? at q: the end of the match, or 0 when none. */
static size_t case_words_lower(const struct text *t, size_t q, size_t end, bool contractions)
{
    size_t kmax = run(t, q, end, is_upperish);
    for (size_t k = kmax + 1; k-- > 0;) {
        if (q + k >= end || !is_lowerish(t, q + k)) continue;
        size_t e = q + k + run(t, q + k, end, is_lowerish);
        return e + (contractions ? ascii_contraction(t, e, end) : 0);
    }
    return 0;
}

/* U+L*C? at q. */
static size_t case_words_upper(const struct text *t, size_t q, size_t end, bool contractions)
{
    size_t k = run(t, q, end, is_upperish);
    if (k == 0) return 0;
    size_t e = q + k + run(t, q + k, end, is_lowerish);
    return e + (contractions ? ascii_contraction(t, e, end) : 0);
}

static bool is_newline_or_slash(const struct text *t, size_t i)
{
    return is_newline(t, i) || t->c[i] == '/';
}

static size_t match_gpt4o_like(const struct text *t, size_t pos, size_t end, size_t max_digits,
                               bool contractions)
{
    bool prefix = is_case_prefix(t, pos) && pos + 1 < end;
    for (int alt = 0; alt < 2; alt++) {
        size_t (*body)(const struct text *, size_t, size_t, bool) =
            alt == 0 ? case_words_lower : case_words_upper;
        size_t e = prefix ? body(t, pos + 1, end, contractions) : 0;
        if (!e) e = body(t, pos, end, contractions);
        if (e) return e - pos;
    }
    if (is_number(t, pos)) {
        size_t n = run(t, pos, end, is_number);
        return n < max_digits ? n : max_digits;
    }
    size_t q = (t->c[pos] == ' ' && pos + 1 < end && is_other(t, pos + 1)) ? pos + 1 : pos;
    if (is_other(t, q)) {
        size_t e = q + run(t, q, end, is_other);
        return e + run(t, e, end, is_newline_or_slash) - pos;
    }
    size_t n = run(t, pos, end, is_ws);
    for (size_t k = n; k > 0; k--)
        if (is_newline(t, pos + k - 1)) return k;
    return ws_tail(t, pos, end);
}

static size_t match_gpt4o(const struct text *t, size_t pos, size_t end)
{
    return match_gpt4o_like(t, pos, end, 3, true);
}

static size_t match_tekken(const struct text *t, size_t pos, size_t end)
{
    return match_gpt4o_like(t, pos, end, 1, false);
}

/* [\p{P}\$\+<=>\^~\|]+ (default) and the same with ` (falcon). */
static bool is_punct_default(const struct text *t, size_t i)
{
    uint32_t c = t->c[i];
    return is_cat(t, i, UNICODE_CAT_PUNCT) || c == '$' || c == '+' || c == '<' || c == '=' ||
           c == '>' || c == '^' || c == '~' || c == '|';
}

static bool is_punct_falcon(const struct text *t, size_t i)
{
    return is_punct_default(t, i) || t->c[i] == '`';
}

static bool is_punct(const struct text *t, size_t i)
{
    return is_cat(t, i, UNICODE_CAT_PUNCT);
}

static bool is_ascii_digit(const struct text *t, size_t i)
{
    return t->c[i] >= '0' && t->c[i] <= '9';
}

/* The deepseek classes are explicit lists matched against the text after llama.cpp replaced
 * non-ASCII whitespace by U+000B, hence the whitespace exclusion (U+3000 is in the list). */
static bool is_ds_letter(const struct text *t, size_t i)
{
    return !is_ws(t, i) && unicode_is_deepseek_letter(t->c[i]);
}

static bool is_ds_punct(const struct text *t, size_t i)
{
    return !is_ws(t, i) && unicode_is_deepseek_punct(t->c[i]);
}

static bool is_cjk(const struct text *t, size_t i)
{
    return !is_ws(t, i) && unicode_is_cjk(t->c[i]);
}

static size_t match_punct_default_run(const struct text *t, size_t pos, size_t end)
{
    return run(t, pos, end, is_punct_default);
}

static size_t match_punct_falcon_run(const struct text *t, size_t pos, size_t end)
{
    return run(t, pos, end, is_punct_falcon);
}

static size_t match_number_run(const struct text *t, size_t pos, size_t end)
{
    return run(t, pos, end, is_number);
}

static size_t match_number1(const struct text *t, size_t pos, size_t end)
{
    return is_number(t, pos);
}

static size_t match_digits3(const struct text *t, size_t pos, size_t end)
{
    return pos + 3 <= end && is_ascii_digit(t, pos) && is_ascii_digit(t, pos + 1) &&
                   is_ascii_digit(t, pos + 2)
               ? 3
               : 0;
}

static size_t match_newline1(const struct text *t, size_t pos, size_t end)
{
    return is_newline(t, pos);
}

static size_t match_cjk_run(const struct text *t, size_t pos, size_t end)
{
    return run(t, pos, end, is_cjk);
}

/* \s?X+ */
static size_t ws_opt_run(const struct text *t, size_t pos, size_t end,
                         bool (*pred)(const struct text *, size_t))
{
    if (is_ws(t, pos) && pos + 1 < end && pred(t, pos + 1)) return 1 + run(t, pos + 1, end, pred);
    return run(t, pos, end, pred);
}

static size_t match_ws_letters(const struct text *t, size_t pos, size_t end)
{
    return ws_opt_run(t, pos, end, is_letter);
}

static size_t match_ws_punct(const struct text *t, size_t pos, size_t end)
{
    return ws_opt_run(t, pos, end, is_punct);
}

static size_t match_ws_ds_letters(const struct text *t, size_t pos, size_t end)
{
    return ws_opt_run(t, pos, end, is_ds_letter);
}

static size_t match_ws_ds_punct(const struct text *t, size_t pos, size_t end)
{
    return ws_opt_run(t, pos, end, is_ds_punct);
}

/* Output piece lengths. */
struct lens {
    uint32_t *v;
    size_t n, cap;
};

static int lens_push(struct lens *l, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint32_t *v = realloc(l->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (uint32_t)n;
    return 0;
}

/* Splits [start, end) at every match of `fn`, keeping the gaps between matches as pieces. A NULL
 * `fn` is \s+$: the trailing whitespace run becomes its own piece (a separate pass, since matching
 * it position by position would be quadratic in the run's length). */
static int split_piece(const struct text *t, size_t start, size_t end, match_fn fn,
                       struct lens *out)
{
    int rc;
    if (!fn) {
        size_t ws = end;
        while (ws > start && is_ws(t, ws - 1)) ws--;
        if (ws > start && (rc = lens_push(out, ws - start))) return rc;
        return ws < end ? lens_push(out, end - ws) : 0;
    }
    size_t gap = start;
    for (size_t pos = start; pos < end;) {
        size_t n = fn(t, pos, end);
        if (n == 0) {
            pos++;
            continue;
        }
        if (pos > gap && (rc = lens_push(out, pos - gap))) return rc;
        if ((rc = lens_push(out, n))) return rc;
        pos += n;
        gap = pos;
    }
    return gap < end ? lens_push(out, end - gap) : 0;
}

#define MAX_STEPS   6
#define TRAILING_WS NULL

static size_t steps_of(enum tokenizer_pre pre, match_fn steps[MAX_STEPS])
{
    size_t n = 0;
    switch (pre) {
    case TOKENIZER_PRE_NONE: break;
    case TOKENIZER_PRE_DEFAULT:
        steps[n++] = match_punct_default_run;
        steps[n++] = match_gpt2;
        steps[n++] = match_number_run;
        steps[n++] = match_digits3;
        break;
    case TOKENIZER_PRE_GPT2: steps[n++] = match_gpt2; break;
    case TOKENIZER_PRE_LLAMA3: steps[n++] = match_llama3; break;
    case TOKENIZER_PRE_QWEN2: steps[n++] = match_qwen2; break;
    case TOKENIZER_PRE_QWEN35: steps[n++] = match_qwen35; break;
    case TOKENIZER_PRE_GPT4O: steps[n++] = match_gpt4o; break;
    case TOKENIZER_PRE_TEKKEN: steps[n++] = match_tekken; break;
    case TOKENIZER_PRE_DEEPSEEK_LLM:
        steps[n++] = match_newline1;
        steps[n++] = match_ws_ds_letters;
        steps[n++] = match_ws_ds_punct;
        steps[n++] = TRAILING_WS;
        steps[n++] = match_cjk_run;
        steps[n++] = match_number_run;
        break;
    case TOKENIZER_PRE_DEEPSEEK_CODER:
        steps[n++] = match_newline1;
        steps[n++] = match_ws_letters;
        steps[n++] = match_ws_punct;
        steps[n++] = match_cjk_run;
        steps[n++] = match_number1;
        break;
    case TOKENIZER_PRE_STARCODER:
        steps[n++] = match_number1;
        steps[n++] = match_gpt2;
        break;
    case TOKENIZER_PRE_FALCON:
        steps[n++] = match_punct_falcon_run;
        steps[n++] = match_gpt2;
        steps[n++] = match_digits3;
        break;
    }
    return n;
}

int tokenizer_pretok_split(enum tokenizer_pre pre, const uint32_t *cpts, size_t n,
                           uint32_t **lens_out, size_t *n_out)
{
    struct lens cur = {0}, next = {0};
    uint8_t *flags = NULL;
    match_fn steps[MAX_STEPS];
    size_t n_steps = steps_of(pre, steps);
    int rc = ERR_NOMEM;

    if (n > UINT32_MAX) return ERR_TOO_BIG;
    if (n && (rc = lens_push(&cur, n))) goto out;
    if (!(flags = malloc(n ? n : 1))) goto out;
    for (size_t i = 0; i < n; i++)
        flags[i] = (uint8_t)(unicode_cat(cpts[i]) | (unicode_is_whitespace(cpts[i]) ? F_WS : 0));
    struct text t = {cpts, flags};

    for (size_t s = 0; s < n_steps; s++) {
        size_t at = 0;
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            if ((rc = split_piece(&t, at, at + cur.v[i], steps[s], &next))) goto out;
            at += cur.v[i];
        }
        struct lens tmp = cur;
        cur = next;
        next = tmp;
    }
    *lens_out = cur.v;
    *n_out = cur.n;
    cur.v = NULL;
    rc = 0;
out:
    free(cur.v);
    free(next.v);
    free(flags);
    return rc;
}
