/* Unit tests of lazy matchers (grammar.h "lazy matching"): free text never triggered, a trigger as
 * one token, as several tokens, straddling a token's end (the bytes after it judged by the
 * grammar, a refused straddle leaving the state unchanged), a control token that stands for its
 * trigger, at_start triggers, <think> blocks that never trigger, clones, and malformed triggers. */
#include "engine/grammar/grammar.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* A vocabulary in which "<tool_call>" is one token and can be spelled in pieces. "[TC]" is a
 * control token: no output bytes. */
static const char *const lz_pieces[] = {
    "<tool_call>",
    "<",
    "tool",
    "_call",
    ">",
    "<tool",
    "_call>{",
    "_call>x",
    "{",
    "}",
    "\"",
    "a",
    ":",
    "1",
    " ",
    "\n",
    "hi",
    "x",
    "</tool_call>",
    "<think>",
    "</think>",
    "<th",
    "ink>",
    "</th",
    "{\"a\"",
    "[",
    "]",
    NULL,
    "</s>",
};
#define LZ_N   ((int32_t)(sizeof(lz_pieces) / sizeof(lz_pieces[0])))
#define LZ_EOS (LZ_N - 1)
#define LZ_TC  (LZ_N - 2) /* the control token */

/* The call's grammar, from its trigger on. */
#define LZ_HERMES "root ::= \"<tool_call>\" \"{\\\"a\\\":\" [0-9] \"}\" \"</tool_call>\"\n"

struct lz {
    struct grammar_vocab *v;
    struct grammar *g;
    struct grammar_arena *a;
    struct grammar_matcher *m;
};

static int32_t tok(const char *piece)
{
    for (int32_t i = 0; i < LZ_N; i++)
        if (lz_pieces[i] && !strcmp(lz_pieces[i], piece)) return i;
    ck_abort_msg("no token %s", piece);
    return -1;
}

static struct grammar_trigger trig(const char *text, int32_t token, bool at_start)
{
    struct grammar_trigger t = {.len = (uint8_t)strlen(text), .token = token, .at_start = at_start};
    memcpy(t.text, text, t.len);
    return t;
}

/* A lazy matcher of `grammar` with the one trigger t (think: skip a leading <think> block). */
static void lz_open(struct lz *z, const char *grammar, struct grammar_trigger t, bool think,
                    bool think_open)
{
    size_t lens[LZ_N];
    for (int32_t i = 0; i < LZ_N; i++) lens[i] = lz_pieces[i] ? strlen(lz_pieces[i]) : 0;
    int32_t eos = LZ_EOS;
    ck_assert_int_eq(grammar_vocab_from_pieces(lz_pieces, lens, LZ_N, &eos, 1, &z->v), 0);
    char err[256];
    ck_assert_int_eq(grammar_compile(grammar, strlen(grammar), z->v, &z->g, err, sizeof(err)), 0);
    z->a = grammar_arena_new();
    ck_assert_ptr_nonnull(z->a);
    struct grammar_lazy lz = {.n = 1, .think = think, .think_open = think_open};
    lz.t[0] = t;
    z->m = NULL;
    ck_assert_int_eq(grammar_matcher_new_lazy(z->g, z->a, &lz, &z->m), 0);
    ck_assert(!grammar_matcher_active(z->m));
}

static void lz_close(struct lz *z)
{
    grammar_matcher_free(z->m);
    grammar_unref(z->g);
    grammar_arena_free(z->a);
    grammar_vocab_free(z->v);
}

/* Accepts each token of the NULL-terminated pieces; all must be taken. */
static void feed(struct lz *z, const char *const *pieces)
{
    for (; *pieces; pieces++)
        ck_assert_msg(grammar_matcher_accept(z->m, z->a, tok(*pieces)) == 0, "token %s", *pieces);
}

static bool allowed(struct lz *z, const char *piece)
{
    uint32_t mask[(LZ_N + 31) / 32];
    ck_assert_int_gt(grammar_matcher_mask(z->m, z->a, mask), 0);
    int32_t t = tok(piece);
    return (mask[t >> 5] >> (t & 31)) & 1;
}

/* The rest of the call after its trigger: the grammar now decides, and then it is finished. */
static void finish_call(struct lz *z)
{
    ck_assert(grammar_matcher_active(z->m));
    ck_assert(!allowed(z, "hi"));
    ck_assert_int_eq(grammar_matcher_accept(z->m, z->a, tok("hi")), ERR_INVAL);
    ck_assert_int_eq(grammar_matcher_accept(z->m, z->a, LZ_EOS), ERR_INVAL);
    feed(z, (const char *[]){"\"", "a", "\"", ":", "1", "}", NULL});
    ck_assert(!grammar_matcher_finished(z->m));
    feed(z, (const char *[]){"</tool_call>", NULL});
    ck_assert(grammar_matcher_finished(z->m));
}

START_TEST(test_grammar_lazy_never_triggered_is_free)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    /* bytes the grammar would refuse, a near miss of the trigger, a control token: all free */
    feed(&z, (const char *[]){"hi", "x", "}", "<tool", ">", "<", "tool", "_call", " ", ">", NULL});
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, LZ_TC), 0);
    ck_assert(!grammar_matcher_active(z.m));
    ck_assert(grammar_matcher_accepting(z.m));
    ck_assert(!grammar_matcher_finished(z.m));
    uint32_t mask[(LZ_N + 31) / 32];
    ck_assert_int_eq(grammar_matcher_mask(z.m, z.a, mask), LZ_N);
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, LZ_EOS), 0); /* the free text ends */
    ck_assert(!grammar_matcher_active(z.m));
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_trigger_one_token)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    feed(&z, (const char *[]){"hi", " ", "<tool_call>", NULL});
    ck_assert(grammar_matcher_active(z.m));
    ck_assert(allowed(&z, "{"));
    ck_assert(!allowed(&z, "<tool_call>"));
    feed(&z, (const char *[]){"{", NULL});
    finish_call(&z);
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_trigger_several_tokens)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    feed(&z, (const char *[]){"x", "<", "tool", "_call", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){">", NULL});
    ck_assert(grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"{", NULL});
    finish_call(&z);
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_trigger_straddles_a_token)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    feed(&z, (const char *[]){"hi", "<tool", NULL});
    /* "_call>x": the trigger, then "x", which the call's grammar refuses: not taken, nothing moved */
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, tok("_call>x")), ERR_INVAL);
    ck_assert(!grammar_matcher_active(z.m));
    /* "_call>{": the trigger and the call's first byte, which the grammar has consumed */
    feed(&z, (const char *[]){"_call>{", NULL});
    ck_assert(grammar_matcher_active(z.m));
    ck_assert(!allowed(&z, "{"));
    finish_call(&z);
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_think_never_triggers)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), true, false);
    feed(&z, (const char *[]){"\n", "<think>", "<tool_call>", "x", "</th", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"ink>", "\n", "hi", NULL}); /* "</think>" in two tokens */
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"<tool_call>", "{", NULL});
    finish_call(&z);
    lz_close(&z);

    /* the prompt opened the block: the answer starts inside it */
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), true, true);
    feed(&z, (const char *[]){"<tool_call>", "</think>", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"<tool_call>", NULL});
    ck_assert(grammar_matcher_active(z.m));
    lz_close(&z);

    /* "<th" then "x": no <think> block, and a later trigger fires; a <think> after the answer
     * began is text, so a trigger inside it fires too */
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), true, false);
    feed(&z, (const char *[]){"<th", "x", "<think>", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"<tool_call>", NULL});
    ck_assert(grammar_matcher_active(z.m));
    lz_close(&z);

    /* the held "<" of a possible <think> that turns out to be the trigger's first byte */
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), true, false);
    feed(&z, (const char *[]){"<", "tool", "_call>{", NULL});
    ck_assert(grammar_matcher_active(z.m));
    finish_call(&z);
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_control_token_trigger)
{
    struct lz z;
    const char *mistral = "root ::= \"[TC]\" \"[\" \"1\" \"]\"\n";
    lz_open(&z, mistral, trig("[TC]", LZ_TC, true), true, false);
    feed(&z, (const char *[]){"<think>", NULL});
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, LZ_TC), 0); /* inside the block */
    feed(&z, (const char *[]){"</think>", "\n", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, LZ_TC), 0);
    ck_assert(grammar_matcher_active(z.m));
    ck_assert(allowed(&z, "["));
    ck_assert(!allowed(&z, "1"));
    feed(&z, (const char *[]){"[", "1", "]", NULL});
    ck_assert(grammar_matcher_finished(z.m));
    lz_close(&z);

    /* at_start: after other text the token is just a token */
    lz_open(&z, mistral, trig("[TC]", LZ_TC, true), false, false);
    feed(&z, (const char *[]){"hi", NULL});
    ck_assert_int_eq(grammar_matcher_accept(z.m, z.a, LZ_TC), 0);
    ck_assert(!grammar_matcher_active(z.m));
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_at_start)
{
    const char *bare = "root ::= \"{\\\"a\\\"\" \":\" [0-9] \"}\"\n";
    struct lz z;
    lz_open(&z, bare, trig("{\"a\"", -1, true), false, false);
    feed(&z, (const char *[]){" ", "\n", "{", "\"", "a", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    feed(&z, (const char *[]){"\"", NULL});
    ck_assert(grammar_matcher_active(z.m));
    feed(&z, (const char *[]){":", "1", "}", NULL});
    ck_assert(grammar_matcher_finished(z.m));
    lz_close(&z);

    /* one token that is the whole trigger, and the same bytes after other text: free */
    lz_open(&z, bare, trig("{\"a\"", -1, true), false, false);
    feed(&z, (const char *[]){"{\"a\"", NULL});
    ck_assert(grammar_matcher_active(z.m));
    lz_close(&z);
    lz_open(&z, bare, trig("{\"a\"", -1, true), false, false);
    feed(&z, (const char *[]){"hi", "{\"a\"", "x", NULL});
    ck_assert(!grammar_matcher_active(z.m));
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_clone_keeps_the_scan)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    feed(&z, (const char *[]){"<", "tool", NULL});
    struct grammar_matcher *c = NULL;
    ck_assert_int_eq(grammar_matcher_clone(z.m, &c), 0);
    ck_assert_int_eq(grammar_matcher_accept(c, z.a, tok("_call")), 0);
    ck_assert_int_eq(grammar_matcher_accept(c, z.a, tok(">")), 0);
    ck_assert(grammar_matcher_active(c));
    ck_assert(!grammar_matcher_active(z.m)); /* the original did not move */
    grammar_matcher_free(c);
    lz_close(&z);
}
END_TEST

START_TEST(test_grammar_lazy_bad_triggers)
{
    struct lz z;
    lz_open(&z, LZ_HERMES, trig("<tool_call>", -1, false), false, false);
    struct grammar_matcher *m = NULL;
    struct grammar_lazy lz = {.n = 0};
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.n = GRAMMAR_TRIGGERS_MAX + 1;
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.n = 1;
    lz.t[0] = trig("<tool_call>", -1, false);
    lz.t[0].len = 0;
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.t[0].len = GRAMMAR_TRIGGER_MAX + 1;
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.t[0] = trig(" <tool_call>", -1, false); /* starts with a blank */
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.t[0] = trig("<tool_call>", LZ_N, false); /* no such token */
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.t[0] = trig("[TOOL_CALLS]", -1, false); /* the grammar does not start with it */
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), ERR_INVAL);
    lz.t[0] = trig("<tool_call>{", -1, false); /* a prefix of the language: fine */
    ck_assert_int_eq(grammar_matcher_new_lazy(z.g, z.a, &lz, &m), 0);
    grammar_matcher_free(m);
    lz_close(&z);
}
END_TEST

Suite *grammar_lazy_suite(void)
{
    Suite *s = suite_create("grammar_lazy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_grammar_lazy_never_triggered_is_free);
    tcase_add_test(tc, test_grammar_lazy_trigger_one_token);
    tcase_add_test(tc, test_grammar_lazy_trigger_several_tokens);
    tcase_add_test(tc, test_grammar_lazy_trigger_straddles_a_token);
    tcase_add_test(tc, test_grammar_lazy_think_never_triggers);
    tcase_add_test(tc, test_grammar_lazy_control_token_trigger);
    tcase_add_test(tc, test_grammar_lazy_at_start);
    tcase_add_test(tc, test_grammar_lazy_clone_keeps_the_scan);
    tcase_add_test(tc, test_grammar_lazy_bad_triggers);
    suite_add_tcase(s, tc);
    return s;
}
