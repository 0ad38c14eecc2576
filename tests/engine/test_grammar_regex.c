/* Unit tests of regular expressions -> GBNF (engine/grammar/grammar_regex.h): each construct's
 * strings match and others do not (the matcher driven byte by byte), JSON-string mode escapes
 * what a JSON string must, unsupported constructs are refused by name, malformed patterns and
 * huge counts fail fast with a message, and random walks under the token mask only ever write
 * strings that POSIX regexec (an independent matcher) accepts. */
#include "engine/grammar/grammar_regex.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"

#include <check.h>
#include <locale.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *grammar_regex_suite(void);

static const char *const pieces[] = {
    "a", "b", "c",  "z",  "A", "Z", "0", "1",  "5",    "9",    "-",        "_",
    ".", " ", "\"", "\\", "/", ":", "@", "ab", "12",   "\n",   "\t",       "x",
    "(", ")", "{",  "}",  "+", "*", "?", "|",  "\xc3", "\xa9", "\xc3\xa9", "</s>",
};
#define N_PIECES ((int32_t)(sizeof(pieces) / sizeof(pieces[0])))

static struct grammar_vocab *vocab(void)
{
    size_t lens[N_PIECES];
    for (int32_t i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    int32_t eos = N_PIECES - 1;
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_from_pieces(pieces, lens, N_PIECES, &eos, 1, &v), 0);
    return v;
}

/* The grammar of `re` (whole output, or as JSON string content with quotes around it). */
static int compile(const char *re, bool json, long long min, long long max, struct grammar_vocab *v,
                   struct grammar **g, char *err)
{
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    struct grammar_regex_opts o = {.json_string = json, .min_chars = min, .max_chars = max};
    int rc = buf_puts(&b, json ? "root ::= \"\\\"\" " : "root ::= ");
    if (!rc) rc = grammar_regex_gbnf(re, strlen(re), &o, &b, err, 256);
    if (!rc) rc = buf_puts(&b, json ? " \"\\\"\"\n" : "\n");
    if (!rc) rc = grammar_compile(buf_cstr(&b), b.len, v, g, err, 256);
    buf_fini(&b);
    return rc;
}

static bool matches_opt(const char *re, bool json, long long min, long long max, const char *doc)
{
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256] = "";
    int rc = compile(re, json, min, max, v, &g, err);
    ck_assert_msg(rc == 0, "%s: %s", re, err);
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
    bool ok =
        grammar_matcher_accept_bytes(m, a, doc, strlen(doc)) == 0 && grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
    return ok;
}

static bool matches(const char *re, const char *doc)
{
    return matches_opt(re, false, -1, -1, doc);
}

static bool json_matches(const char *re, const char *doc)
{
    return matches_opt(re, true, -1, -1, doc);
}

static int refused(const char *re, const char *want)
{
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256] = "";
    int rc = compile(re, false, -1, -1, v, &g, err);
    ck_assert_msg(rc != 0, "'%s' compiled", re);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err, want), "'%s': error '%s' lacks '%s'", re, err, want);
    grammar_vocab_free(v);
    return rc;
}

START_TEST(test_grammar_regex_literals_classes)
{
    ck_assert(matches("abc", "abc"));
    ck_assert(!matches("abc", "ab"));
    ck_assert(!matches("abc", "abcd"));
    ck_assert(matches("^abc$", "abc"));
    ck_assert(matches("a.c", "a\xc3\xa9"
                             "c"));
    ck_assert(!matches("a.c", "a\nc"));
    ck_assert(matches("[a-c]+", "abcab"));
    ck_assert(!matches("[a-c]+", "abd"));
    ck_assert(matches("[^a-c]", "z"));
    ck_assert(matches("[^a-c]", "\xc3\xa9"));
    ck_assert(!matches("[^a-c]", "b"));
    ck_assert(matches("\\d\\w\\s", "5_ "));
    ck_assert(!matches("\\d", "a"));
    ck_assert(matches("\\D\\W\\S", "a-x"));
    ck_assert(!matches("\\W", "a"));
    ck_assert(matches("[\\d.-]+", "1.5-2"));
    ck_assert(matches("[-a]", "-"));
    ck_assert(matches("[a-]", "-"));
    ck_assert(matches("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\^\\$", ".*+?()[]{}|\\/^$"));
    ck_assert(matches("\\x41\\u00e9\\u{1F600}\\t", "A\xc3\xa9\xf0\x9f\x98\x80\t"));
    ck_assert(matches("\\uD83D\\uDE00", "\xf0\x9f\x98\x80")); /* a surrogate pair */
    ck_assert(matches("\xc3\xa9+", "\xc3\xa9\xc3\xa9"));      /* UTF-8 literal, repeated whole */
    ck_assert(!matches("\xc3\xa9+", "\xc3\xa9\xc3"));
    ck_assert(matches("[\xc3\xa9-\xc3\xbf]", "\xc3\xb0"));
    ck_assert(matches("[]a", "") == false); /* [] matches nothing */
    ck_assert(matches("[^]", "\n"));        /* [^] matches anything */
    ck_assert(matches("a{2}b{", "aab{"));   /* a '{' that is no quantifier is literal */
    ck_assert(matches("x{,3}", "x{,3}"));
    ck_assert(matches("[\\b]", "\b"));
    ck_assert(matches("\\cJ", "\n"));
    ck_assert(matches("", ""));
}
END_TEST

START_TEST(test_grammar_regex_groups_repeats)
{
    ck_assert(matches("(ab|c)+", "abcab"));
    ck_assert(!matches("(ab|c)+", ""));
    ck_assert(matches("(?:ab)?c", "c"));
    ck_assert(matches("(?<year>\\d{4})-\\d{2}", "2024-05"));
    ck_assert(matches("a|b|", ""));
    ck_assert(matches("^a$|^b$", "b"));
    ck_assert(matches("a{3}", "aaa"));
    ck_assert(!matches("a{3}", "aa"));
    ck_assert(!matches("a{3}", "aaaa"));
    ck_assert(matches("a{2,}", "aaaaa"));
    ck_assert(!matches("a{2,}", "a"));
    ck_assert(matches("a{1,3}", "aa"));
    ck_assert(!matches("a{1,3}", "aaaa"));
    ck_assert(matches("a{0}b", "b"));
    ck_assert(matches("a*?b+?c??", "aabb"));
    /* repetitions of something that can be empty (GBNF refuses x* for nullable x) */
    ck_assert(matches("(a?)*", ""));
    ck_assert(matches("(a?)*", "aaa"));
    ck_assert(matches("(a*)+b", "aab"));
    ck_assert(matches("(a?b?)*", "abba"));
    ck_assert(!matches("(a?b?)*", "abc"));
    ck_assert(matches("(a|)+", "aa"));
    ck_assert(matches("(a?){2,3}", "aaa"));
    ck_assert(!matches("(a?){2,3}", "aaaa"));
    ck_assert(matches("((a?)(b?))*c", "bac"));
    ck_assert(matches("(()|a)*", "a"));
}
END_TEST

START_TEST(test_grammar_regex_json_string)
{
    /* characters a JSON string must escape are written as escapes */
    ck_assert(json_matches("a\"b", "\"a\\\"b\""));
    ck_assert(!json_matches("a\"b", "\"a\"b\""));
    ck_assert(json_matches("a\\\\b", "\"a\\\\b\""));
    ck_assert(json_matches("a\\nb", "\"a\\nb\""));
    ck_assert(!json_matches("a\\nb", "\"a\nb\""));
    ck_assert(json_matches("[\\x00-\\x1f]", "\"\\u0001\""));
    ck_assert(json_matches("[\\x00-\\x1f]", "\"\\t\""));
    ck_assert(json_matches(".+", "\"x\\\"\\\\y\""));
    ck_assert(!json_matches(".+", "\"x\"y\""));
    ck_assert(json_matches("[^a]+", "\"\\\"\xc3\xa9\\b\""));
    ck_assert(json_matches("\\d{3}-\\d{4}", "\"555-1234\""));
    /* minLength / maxLength: intersected with one repetition of one character, else checked */
    ck_assert(matches_opt("[a-z]+", true, 2, 3, "\"abc\""));
    ck_assert(!matches_opt("[a-z]+", true, 2, 3, "\"abcd\""));
    ck_assert(!matches_opt("[a-z]+", true, 2, 3, "\"a\""));
    ck_assert(matches_opt("\\d{5}", true, 1, 5, "\"12345\""));
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256] = "";
    ck_assert_int_eq(compile("a+b", true, -1, 3, v, &g, err), ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "maxLength"));
    ck_assert_int_eq(compile("a{5}", true, -1, 3, v, &g, err), ERR_INVAL); /* no string fits */
    ck_assert_int_eq(compile("a{5,9}", false, 10, -1, v, &g, err), ERR_INVAL);
    ck_assert_ptr_null(g);
    grammar_vocab_free(v);
}
END_TEST

START_TEST(test_grammar_regex_refused)
{
    ck_assert_int_eq(refused("(a)\\1", "backreference"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("(?<n>a)\\k<n>", "backreference"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("a(?=b)", "lookahead"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("a(?!b)", "lookahead"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("(?<=a)b", "lookbehind"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("(?<!a)b", "lookbehind"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("\\bword\\b", "word boundaries"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("(?i)abc", "inline flags"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("\\p{L}+", "unicode property"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("a^b", "'^'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("a$b", "'$'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("(^a)", "'^'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("\\uD800", "surrogate"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("\\01", "octal"), ERR_UNSUPPORTED);
    /* malformed */
    ck_assert_int_eq(refused("(ab", "unterminated group"), ERR_PARSE);
    ck_assert_int_eq(refused("ab)", "unmatched ')'"), ERR_PARSE);
    ck_assert_int_eq(refused("[ab", "unterminated character class"), ERR_PARSE);
    ck_assert_int_eq(refused("[z-a]", "out of order"), ERR_PARSE);
    ck_assert_int_eq(refused("[\\d-z]", "class escape"), ERR_PARSE);
    ck_assert_int_eq(refused("*a", "nothing to repeat"), ERR_PARSE);
    ck_assert_int_eq(refused("a**", "nothing to repeat"), ERR_PARSE);
    ck_assert_int_eq(refused("a{2}{3}", "nothing to repeat"), ERR_PARSE);
    ck_assert_int_eq(refused("{3}", "nothing to repeat"), ERR_PARSE);
    ck_assert_int_eq(refused("a|*", "nothing to repeat"), ERR_PARSE);
    ck_assert_int_eq(refused("a{3,2}", "m < n"), ERR_PARSE);
    ck_assert_int_eq(refused("abc\\", "trailing backslash"), ERR_PARSE);
    ck_assert_int_eq(refused("\\q", "unknown escape"), ERR_PARSE);
    ck_assert_int_eq(refused("\\xZZ", "hexadecimal"), ERR_PARSE);
    ck_assert_int_eq(refused("\\u{110000}", "10FFFF"), ERR_PARSE);
    ck_assert_int_eq(refused("\\c1", "letter"), ERR_PARSE);
    ck_assert_int_eq(refused("(?<>a)", "group name"), ERR_PARSE);
    ck_assert_int_eq(refused("a\xff", "UTF-8"), ERR_PARSE);
    ck_assert_int_eq(refused("a\xc3", "UTF-8"), ERR_PARSE);
    /* bounds: counts, nesting, length, the text of the grammar */
    ck_assert_int_eq(refused("a{10001}", "above 10000"), ERR_TOO_BIG);
    ck_assert_int_eq(refused("a{1,99999999999999999999999}", "above 10000"), ERR_TOO_BIG);
    ck_assert_int_eq(refused("a{99999999999999999999,}", "above 10000"), ERR_TOO_BIG);
    struct buf b;
    buf_init(&b, 0);
    for (int i = 0; i < 100; i++) buf_putc(&b, '(');
    buf_putc(&b, 'a');
    for (int i = 0; i < 100; i++) buf_putc(&b, ')');
    ck_assert_int_eq(refused(buf_cstr(&b), "nested deeper"), ERR_TOO_BIG);
    buf_reset(&b);
    for (int i = 0; i < 70000; i++) buf_putc(&b, 'a');
    ck_assert_int_eq(refused(buf_cstr(&b), "longer"), ERR_TOO_BIG);
    buf_fini(&b);
    /* a grammar over the output's bound: the compile stops there, it does not hang */
    struct buf small;
    buf_init(&small, 64);
    struct grammar_regex_opts o = {.json_string = false, .min_chars = -1, .max_chars = -1};
    char err[256] = "";
    const char *re = "((a?b?c?)*(a?b?c?)*)*[a-z0-9]{1,9}";
    ck_assert_int_eq(grammar_regex_gbnf(re, strlen(re), &o, &small, err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "larger"));
    buf_fini(&small);
    /* nested repetitions compile to linear grammars (GBNF repeats a rule, not its text) */
    ck_assert(matches("((a{100}){100}){10}b", "b") == false);
}
END_TEST

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random walks under the mask (a stand-in for a random-weight model): every finished walk is a
 * string POSIX regexec accepts (an independent matcher, for the ERE-compatible patterns here). */
static void walk_check(const char *re, const char *ere)
{
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256];
    ck_assert_msg(compile(re, false, -1, -1, v, &g, err) == 0, "%s", err);
    regex_t posix;
    ck_assert_int_eq(regcomp(&posix, ere, REG_EXTENDED | REG_NOSUB), 0);
    struct grammar_arena *a = grammar_arena_new();
    uint32_t mask[(N_PIECES + 31) / 32];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int finished = 0;
    for (int w = 0; w < 100; w++) {
        struct grammar_matcher *m = NULL;
        ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
        struct buf out;
        buf_init(&out, 0);
        bool eos = false;
        for (int step = 0; step < 200 && !eos; step++) {
            int n = grammar_matcher_mask(m, a, mask);
            ck_assert_msg(n > 0, "%s: dead end after '%s'", re, buf_cstr(&out));
            int32_t t = -1;
            if ((mask[(N_PIECES - 1) >> 5] >> ((N_PIECES - 1) & 31)) & 1 && rng(&seed) % 3 == 0)
                t = N_PIECES - 1;
            for (int pick = (int)(rng(&seed) % (uint64_t)n); t < 0;)
                for (int32_t i = 0; i < N_PIECES && t < 0; i++)
                    if ((mask[i >> 5] >> (i & 31)) & 1 && pick-- == 0) t = i;
            ck_assert_int_eq(grammar_matcher_accept(m, a, t), 0);
            if (t == N_PIECES - 1)
                eos = true;
            else
                buf_puts(&out, pieces[t]);
        }
        if (eos) {
            finished++;
            ck_assert_msg(regexec(&posix, buf_cstr(&out), 0, NULL, 0) == 0, "%s wrote '%s'", re,
                          buf_cstr(&out));
        }
        buf_fini(&out);
        grammar_matcher_free(m);
    }
    ck_assert_int_gt(finished, 20);
    regfree(&posix);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
}

START_TEST(test_grammar_regex_random_walks_match)
{
    walk_check("[A-Z][a-z]{0,4}-\\d{2}", "^[A-Z][a-z]{0,4}-[0-9]{2}$");
    walk_check("(ab|c)+(_[0-9]+)?", "^(ab|c)+(_[0-9]+)?$");
    walk_check("^a?b?(x|z)*$", "^a?b?(x|z)*$");
    /* POSIX counts characters, not bytes, only in a UTF-8 locale */
    if (setlocale(LC_CTYPE, "C.UTF-8")) {
        walk_check("[^a-z\"\\\\]{1,3}", "^[^a-z\"\\\\]{1,3}$");
        setlocale(LC_CTYPE, "C");
    }
    walk_check("(\\d+\\.)?\\d+", "^([0-9]+\\.)?[0-9]+$");
}
END_TEST

Suite *grammar_regex_suite(void)
{
    Suite *s = suite_create("grammar_regex");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_grammar_regex_literals_classes);
    tcase_add_test(tc, test_grammar_regex_groups_repeats);
    tcase_add_test(tc, test_grammar_regex_json_string);
    tcase_add_test(tc, test_grammar_regex_refused);
    tcase_add_test(tc, test_grammar_regex_random_walks_match);
    suite_add_tcase(s, tc);
    return s;
}
