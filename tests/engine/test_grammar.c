/* Unit tests of the grammar engine: GBNF syntax and its errors, byte-level matching (UTF-8 classes,
 * repetition bounds, tokens spanning terminals), and the token mask checked against a brute-force
 * reference (every token tried on a copy of the matcher) along random walks, so the trie walk and
 * its cache are held to the plain definition on every state they meet. */
#include "engine/grammar/grammar.h"

#include "common/err.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small vocabulary: printable ASCII bytes, some merged tokens, split and whole UTF-8, EOS last. */
static const char *const test_pieces[] = {
    "a",        "b",        "c",
    "x",        "y",        "z",
    "0",        "1",        "2",
    "9",        "-",        ".",
    "e",        "E",        "+",
    " ",        "\n",       "\"",
    "\\",       "{",        "}",
    "[",        "]",        ":",
    ",",        "t",        "r",
    "u",        "f",        "l",
    "s",        "n",        "ab",
    "abc",      "12",       "true",
    "false",    "null",     "{\"",
    "\":",      "\",",      "\"}",
    "\"]",      "\": \"",   ", \"",
    "1.5",      "e+",       "\xc3",
    "\xa9",     "\xc3\xa9", "\xe2\x82\xac",
    "\xe2\x82", "\xac",     "aé",
    "}]",       "]}",       "\"\n",
    "</s>",
};
#define TEST_N   ((int32_t)(sizeof(test_pieces) / sizeof(test_pieces[0])))
#define TEST_EOS (TEST_N - 1)

static struct grammar_vocab *test_vocab(void)
{
    size_t lens[TEST_N];
    for (int32_t i = 0; i < TEST_N; i++) lens[i] = strlen(test_pieces[i]);
    int32_t eos = TEST_EOS;
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_from_pieces(test_pieces, lens, TEST_N, &eos, 1, &v), 0);
    return v;
}

static struct grammar *compile_ok(const struct grammar_vocab *v, const char *text)
{
    struct grammar *g = NULL;
    char err[256];
    int rc = grammar_compile(text, strlen(text), v, &g, err, sizeof(err));
    ck_assert_msg(rc == 0, "compile failed: %s\n%s", err, text);
    return g;
}

static int compile_err(const char *text, char *err, size_t errlen)
{
    struct grammar_vocab *v = test_vocab();
    struct grammar *g = NULL;
    int rc = grammar_compile(text, strlen(text), v, &g, err, errlen);
    ck_assert_ptr_null(g);
    grammar_vocab_free(v);
    return rc;
}

/* Accepts `s` byte-wise from the start; returns 0 / ERR_INVAL and whether it is complete. */
static int match(const char *grammar, const char *s, bool *complete)
{
    struct grammar_vocab *v = test_vocab();
    struct grammar *g = compile_ok(v, grammar);
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
    int rc = grammar_matcher_accept_bytes(m, a, s, strlen(s));
    if (complete) *complete = rc == 0 && grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_arena_free(a);
    grammar_vocab_free(v);
    return rc;
}

static bool full(const char *grammar, const char *s)
{
    bool c = false;
    return match(grammar, s, &c) == 0 && c;
}

static bool prefix(const char *grammar, const char *s)
{
    return match(grammar, s, NULL) == 0;
}

START_TEST(test_grammar_compile_errors)
{
    char err[256];
    ck_assert_int_eq(compile_err("root ::= \"a", err, sizeof(err)), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err, "line 1"));
    ck_assert_int_eq(compile_err("root ::= a\n", err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err, "'a'"));
    ck_assert_int_eq(compile_err("start ::= \"a\"\n", err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err, "root"));
    ck_assert_int_eq(compile_err("root ::= root \"a\" | \"b\"\n", err, sizeof(err)),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(compile_err("root ::= x \"a\"\nx ::= \"\" | root\n", err, sizeof(err)),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(compile_err("root ::= (\"a\"?)*\n", err, sizeof(err)), ERR_UNSUPPORTED);
    ck_assert_int_eq(compile_err("root ::= \"a\"{3,1}\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= \"a\"{100000}\n", err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_int_eq(compile_err("root ::= \"a\"\nroot ::= \"b\"\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= [z-a]\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= \"\\q\"\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= *\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= (\"a\"\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= \"\\xff\" \"\\uD800\"\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("root ::= \"\xff\"\n", err, sizeof(err)), ERR_PARSE);
    ck_assert_int_eq(compile_err("", err, sizeof(err)), ERR_NOT_FOUND);
}
END_TEST

START_TEST(test_grammar_match_basics)
{
    ck_assert(full("root ::= \"ab\" | \"c\"", "ab"));
    ck_assert(full("root ::= \"ab\" | \"c\"", "c"));
    ck_assert(!prefix("root ::= \"ab\" | \"c\"", "ac"));
    ck_assert(prefix("root ::= \"ab\" | \"c\"", "a"));
    ck_assert(!full("root ::= \"ab\" | \"c\"", "a"));
    /* comments, multi-line alternatives, nested groups */
    const char *g = "# numbers\nroot ::= sign? digit+ ( \".\" digit+ )?  # trailing\n"
                    "sign ::= \"-\" |\n  \"+\"\ndigit ::= [0-9]\n";
    ck_assert(full(g, "12"));
    ck_assert(full(g, "-1.25"));
    ck_assert(!full(g, "1."));
    ck_assert(prefix(g, "1."));
    ck_assert(!prefix(g, "1.a"));
    ck_assert(!prefix(g, "--1"));
    /* bounded repetition */
    const char *r = "root ::= [a-c]{2,3} \"x\"{0,2} \"y\"{2,}\n";
    ck_assert(full(r, "abyy"));
    ck_assert(full(r, "abcxxyyy"));
    ck_assert(!prefix(r, "abca"));
    ck_assert(!prefix(r, "abxxx"));
    ck_assert(!full(r, "aby"));
    ck_assert(!prefix(r, "a y"));
    /* escapes, any character, negated classes */
    ck_assert(full("root ::= \"\\x41\\u00e9\\n\\\"\"", "A\xc3\xa9\n\""));
    ck_assert(full("root ::= . .", "a\xe2\x82\xac"));
    ck_assert(!prefix("root ::= .", "\xff"));
    ck_assert(!prefix("root ::= .", "\xed\xa0\x80")); /* a surrogate is not a character */
    ck_assert(full("root ::= [^a\"]+", "b\xc3\xa9z"));
    ck_assert(!prefix("root ::= [^a\"]+", "ba"));
    ck_assert(full("root ::= [\\u00e0-\\u00ff]", "\xc3\xa9"));
    ck_assert(!prefix("root ::= [\\u00e0-\\u00ff]", "\xc3\x80"));
    ck_assert(prefix("root ::= [\\u0100-\\U0010FFFF]", "\xf4\x8f"));
    ck_assert(!prefix("root ::= [\\u0100-\\U0010FFFF]", "\xf4\x90"));
    /* empty string and an empty class */
    ck_assert(full("root ::= \"\"", ""));
    ck_assert(!prefix("root ::= [^\\x00-\\U0010FFFF]", "a"));
}
END_TEST

/* The reference mask: every token tried on a copy. */
static void ref_mask(struct grammar_matcher *m, struct grammar_arena *a, uint32_t *mask, size_t w)
{
    memset(mask, 0, w * sizeof(*mask));
    for (int32_t t = 0; t < TEST_N; t++) {
        struct grammar_matcher *c = NULL;
        ck_assert_int_eq(grammar_matcher_clone(m, &c), 0);
        if (grammar_matcher_accept(c, a, t) == 0) mask[t >> 5] |= 1u << (t & 31);
        grammar_matcher_free(c);
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random walks under `text`: at each step the mask equals the reference; returns how many walks
 * ended by EOS (the grammar accepted). */
static int random_walks(const char *text, int walks, int max_steps, uint64_t seed)
{
    struct grammar_vocab *v = test_vocab();
    struct grammar *g = compile_ok(v, text);
    struct grammar_arena *a = grammar_arena_new();
    size_t w = grammar_mask_words(v);
    uint32_t *mask = calloc(w, sizeof(*mask)), *ref = calloc(w, sizeof(*ref));
    int ended = 0;
    for (int k = 0; k < walks; k++) {
        struct grammar_matcher *m = NULL;
        ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
        for (int step = 0; step < max_steps; step++) {
            int n = grammar_matcher_mask(m, a, mask);
            ck_assert_int_ge(n, 0);
            ref_mask(m, a, ref, w);
            for (size_t i = 0; i < w; i++)
                ck_assert_msg(mask[i] == ref[i], "walk %d step %d word %zu: %08x != %08x", k, step,
                              i, mask[i], ref[i]);
            if (n == 0) break;
            int pick = (int)(rng_next(&seed) % (uint64_t)n);
            int32_t t = -1;
            for (int32_t i = 0; i < TEST_N; i++)
                if ((mask[i >> 5] >> (i & 31)) & 1 && pick-- == 0) t = i;
            ck_assert_int_ge(t, 0);
            ck_assert_int_eq(grammar_matcher_accept(m, a, t), 0);
            if (t == TEST_EOS) {
                ck_assert(grammar_matcher_finished(m));
                ended++;
                break;
            }
        }
        grammar_matcher_free(m);
    }
    free(mask);
    free(ref);
    grammar_unref(g);
    grammar_arena_free(a);
    grammar_vocab_free(v);
    return ended;
}

static const char *const json_gbnf =
    "root ::= value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrtu] )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= [ \\n]{0,3}\n";

START_TEST(test_grammar_mask_matches_reference)
{
    random_walks(json_gbnf, 40, 60, 1);
    random_walks("root ::= \"ab\" [a-c]* \"\\u00e9\"? [0-9]{1,3}", 30, 20, 2);
    random_walks("root ::= (\"a\" | \"ab\" | \"abc\") (\"c\" | \"bc\")*", 30, 20, 3);
    random_walks("root ::= [^\"]* \"\\\"\"", 30, 20, 4);
    random_walks("root ::= x x x\nx ::= \"{\" y \"}\"\ny ::= \"[\" z \"]\"\nz ::= [a-c]* | x", 30,
                 40, 5);
}
END_TEST

/* Two grammars stepped in turn on one arena (the arena is reset per call; each grammar keeps its
 * own local automaton): every mask still equals the reference. */
START_TEST(test_grammar_mask_two_grammars_one_arena)
{
    struct grammar_vocab *v = test_vocab();
    struct grammar *g[2] = {compile_ok(v, json_gbnf),
                            compile_ok(v, "root ::= \"{\" [a-c]* (\",\" [0-9]+)* \"}\"")};
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m[2] = {NULL, NULL};
    size_t w = grammar_mask_words(v);
    uint32_t *mask = calloc(w, sizeof(*mask)), *ref = calloc(w, sizeof(*ref));
    uint64_t seed = 11;
    for (int k = 0; k < 2; k++) ck_assert_int_eq(grammar_matcher_new(g[k], a, &m[k]), 0);
    for (int step = 0; step < 80; step++) {
        int k = step & 1;
        int n = grammar_matcher_mask(m[k], a, mask);
        ck_assert_int_ge(n, 0);
        ref_mask(m[k], a, ref, w);
        for (size_t i = 0; i < w; i++) ck_assert_uint_eq(mask[i], ref[i]);
        if (n == 0) continue;
        int pick = (int)(rng_next(&seed) % (uint64_t)n);
        int32_t t = -1;
        for (int32_t i = 0; i < TEST_N; i++)
            if ((mask[i >> 5] >> (i & 31)) & 1 && pick-- == 0) t = i;
        ck_assert_int_ge(t, 0);
        if (t == TEST_EOS) { /* start that grammar over */
            grammar_matcher_free(m[k]);
            ck_assert_int_eq(grammar_matcher_new(g[k], a, &m[k]), 0);
            continue;
        }
        ck_assert_int_eq(grammar_matcher_accept(m[k], a, t), 0);
    }
    for (int k = 0; k < 2; k++) {
        grammar_matcher_free(m[k]);
        grammar_unref(g[k]);
    }
    free(mask);
    free(ref);
    grammar_arena_free(a);
    grammar_vocab_free(v);
}
END_TEST

START_TEST(test_grammar_ends_only_when_accepting)
{
    /* Bounded grammars end by EOS on every walk. */
    ck_assert_int_eq(random_walks("root ::= \"ab\" | \"c\" [0-9]{1,2}", 20, 10, 6), 20);
    /* A grammar that never completes never allows EOS: walks run out of steps instead. */
    ck_assert_int_eq(random_walks("root ::= \"a\" root | \"b\" root", 10, 30, 7), 0);
}
END_TEST

START_TEST(test_grammar_token_spanning_terminals)
{
    struct grammar_vocab *v = test_vocab();
    struct grammar *g = compile_ok(v, "root ::= \"{\" \"\\\"\" [a-z]+ \"\\\"\" \":\" [0-9] \"}\"");
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
    int32_t open = -1, colon = -1, sep = -1, c3 = -1;
    for (int32_t i = 0; i < TEST_N; i++) {
        if (!strcmp(test_pieces[i], "{\"")) open = i;
        if (!strcmp(test_pieces[i], "\":")) colon = i;
        if (!strcmp(test_pieces[i], "\",")) sep = i;
        if (!strcmp(test_pieces[i], "\xc3")) c3 = i;
    }
    ck_assert_int_eq(grammar_matcher_accept(m, a, open), 0);
    ck_assert_int_eq(grammar_matcher_accept_bytes(m, a, "ab", 2), 0);
    ck_assert_int_eq(grammar_matcher_accept(m, a, sep), ERR_INVAL);
    ck_assert_int_eq(grammar_matcher_accept(m, a, c3), ERR_INVAL);
    ck_assert_int_eq(grammar_matcher_accept(m, a, TEST_EOS), ERR_INVAL);
    ck_assert_int_eq(grammar_matcher_accept(m, a, colon), 0);
    ck_assert_int_eq(grammar_matcher_accept_bytes(m, a, "1}", 2), 0);
    ck_assert(grammar_matcher_accepting(m));
    ck_assert(grammar_matcher_finished(m));
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_arena_free(a);
    grammar_vocab_free(v);
}
END_TEST

START_TEST(test_grammar_vocab_errors)
{
    struct grammar_vocab *v = NULL;
    const char *p[] = {"a"};
    size_t l[] = {1};
    int32_t bad = 5;
    ck_assert_int_eq(grammar_vocab_from_pieces(p, l, 0, NULL, 0, &v), ERR_INVAL);
    ck_assert_int_eq(grammar_vocab_from_pieces(p, l, 1, &bad, 1, &v), ERR_INVAL);
    ck_assert_ptr_null(v);
    grammar_vocab_free(NULL);
    grammar_unref(NULL);
    grammar_matcher_free(NULL);
    grammar_arena_free(NULL);
}
END_TEST

Suite *grammar_suite(void)
{
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_grammar_compile_errors);
    tcase_add_test(tc, test_grammar_match_basics);
    tcase_add_test(tc, test_grammar_mask_matches_reference);
    tcase_add_test(tc, test_grammar_mask_two_grammars_one_arena);
    tcase_add_test(tc, test_grammar_ends_only_when_accepting);
    tcase_add_test(tc, test_grammar_token_spanning_terminals);
    tcase_add_test(tc, test_grammar_vocab_errors);
    suite_add_tcase(s, tc);
    return s;
}
