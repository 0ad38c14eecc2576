/* Unit tests of the incremental tool-call scanner (engine/api/api_tool_stream.c): every form that
 * api_tool_calls_parse reads, real model outputs and malformed text, fed at every split point and
 * in random chunkings, must assemble (content + calls) to exactly api_tool_calls_parse's answer for
 * the whole text, in a valid event order, and stream before the end where the form allows it. */
#include "engine/api/api.h"

#include "common/err.h"
#include "common/utf8.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 64

/* What a client assembles from the events. */
struct got {
    struct buf content;
    int n_calls;
    struct buf name[MAX_CALLS], args[MAX_CALLS];
    int n_args_events[MAX_CALLS];
    int n_content_events;
    size_t fed_at_first_call; /* bytes fed when the first call started (SIZE_MAX: never) */
    size_t fed;
};

static void got_init(struct got *g)
{
    memset(g, 0, sizeof(*g));
    buf_init(&g->content, 0);
    for (int i = 0; i < MAX_CALLS; i++) {
        buf_init(&g->name[i], 0);
        buf_init(&g->args[i], 0);
    }
    g->fed_at_first_call = SIZE_MAX;
}

static void got_fini(struct got *g)
{
    buf_fini(&g->content);
    for (int i = 0; i < MAX_CALLS; i++) {
        buf_fini(&g->name[i]);
        buf_fini(&g->args[i]);
    }
}

static int got_ev(void *ud, enum api_tool_ev ev, int call, const char *text, size_t len)
{
    struct got *g = ud;
    ck_assert_msg(len > 0, "an empty event");
    switch (ev) {
    case API_TOOL_EV_CONTENT:
        ck_assert_msg(g->n_calls == 0, "content after a call");
        g->n_content_events++;
        return buf_append(&g->content, text, len);
    case API_TOOL_EV_CALL:
        ck_assert_int_eq(call, g->n_calls);
        ck_assert_int_lt(call, MAX_CALLS);
        if (!g->n_calls) g->fed_at_first_call = g->fed;
        g->n_calls++;
        return buf_append(&g->name[call], text, len);
    case API_TOOL_EV_ARGS:
        ck_assert_int_eq(call, g->n_calls - 1);
        g->n_args_events[call]++;
        return buf_append(&g->args[call], text, len);
    }
    return ERR_INVAL;
}

/* Feeds text in the pieces that cuts[0..n_cuts) (increasing offsets) mark. */
static void feed_cuts(const char *text, size_t len, bool forced, const size_t *cuts, size_t n_cuts,
                      struct got *g)
{
    struct api_tool_stream s;
    api_tool_stream_init(&s, forced);
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        g->fed = to;
        ck_assert_int_eq(api_tool_stream_feed(&s, text + at, to - at, i == n_cuts, got_ev, g), 0);
        at = to;
    }
    api_tool_stream_fini(&s);
}

/* g assembles to what api_tool_calls_parse says for the whole text. */
static void check_same(const char *text, size_t len, bool forced, const struct got *g,
                       const char *how)
{
    json_t *calls = NULL;
    size_t clen = len;
    int rc = api_tool_calls_parse(text, len, forced, "t", &calls, &clen);
    ck_assert_int_ge(rc, 0);
    ck_assert_msg(g->content.len == clen && (!clen || !memcmp(g->content.data, text, clen)),
                  "%s: content %zu bytes, parse says %zu, of <%.*s>", how, g->content.len, clen,
                  (int)len, text);
    ck_assert_int_eq(g->n_calls, (int)json_array_size(calls));
    for (int i = 0; i < g->n_calls; i++) {
        json_t *call = json_array_get(calls, (size_t)i);
        json_t *fn = json_object_get(call, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *args = json_object_get(fn, "arguments");
        char id[64];
        api_tool_call_id(id, sizeof(id), "t", i);
        ck_assert_str_eq(json_string_value(json_object_get(call, "id")), id);
        ck_assert_msg(g->name[i].len == strlen(name) &&
                          !memcmp(g->name[i].data, name, strlen(name)),
                      "%s: call %d name", how, i);
        /* parse replaces invalid UTF-8 by U+FFFD; the stream's raw bytes compare where valid */
        size_t alen = json_string_length(args);
        if (utf8_valid(g->args[i].data, g->args[i].len))
            ck_assert_msg(g->args[i].len == alen &&
                              (!alen || !memcmp(g->args[i].data, json_string_value(args), alen)),
                          "%s: call %d arguments <%.*s> vs <%s> of <%.*s>", how, i,
                          (int)g->args[i].len, g->args[i].data ? g->args[i].data : "",
                          json_string_value(args), (int)len, text);
    }
    json_decref(calls);
}

/* Whole, at every split point, byte by byte, and in random chunkings: all the same. */
static void check_text(const char *text, size_t len, bool forced)
{
    struct got g;
    got_init(&g);
    feed_cuts(text, len, forced, NULL, 0, &g);
    check_same(text, len, forced, &g, "whole");
    got_fini(&g);
    for (size_t cut = 0; cut <= len; cut++) {
        got_init(&g);
        feed_cuts(text, len, forced, &cut, 1, &g);
        check_same(text, len, forced, &g, "split");
        got_fini(&g);
    }
    size_t *cuts = malloc((len + 1) * sizeof(*cuts));
    ck_assert_ptr_nonnull(cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    got_init(&g);
    feed_cuts(text, len, forced, cuts, len, &g);
    check_same(text, len, forced, &g, "bytes");
    got_fini(&g);
    unsigned seed = 12345u + (unsigned)len;
    for (int round = 0; round < 20; round++) {
        size_t n = 0;
        for (size_t at = 0;;) {
            seed = seed * 1103515245u + 12345u;
            at += 1 + (seed >> 16) % 9;
            if (at >= len) break;
            cuts[n++] = at;
        }
        got_init(&g);
        feed_cuts(text, len, forced, cuts, n, &g);
        check_same(text, len, forced, &g, "random");
        got_fini(&g);
    }
    free(cuts);
}

/* The forms api_tool_calls_parse reads, real outputs (Qwen 2.5, Hermes 2 Pro, Llama 3.1, Mistral
 * Nemo), and malformed text. */
static const char *const texts[] = {
    "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
    "</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>",
    " {\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}",
    "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
    "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", "
    "\"arguments\": \"{\\\"k\\\": 2}\"}]",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", "
    "\"unit\": \"celsius\"}}\n</tool_call>",
    "I will look that up for you.\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
    "{\"query\": \"weather in Paris\", \"max_results\": 3, \"filters\": {\"lang\": [\"fr\", "
    "\"en\"], \"safe\": true, \"since\": null, \"score\": -1.5e-3}}}\n</tool_call>\n",
    "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", "
    "\"unit\": \"Fahrenheit\"}}",
    "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
    "Hello there",
    "{\"a\": 1}",
    "[1, 2]",
    "<tool_call>{\"name\": \"f\"",
    "<tool_call>nonsense</tool_call>",
    "",
    "   \n ",
    "<tool_call>",
    "<tool_cal",
    "[TOOL_CALL",
    "<|python_ta",
    "a <tool_call> b",
    "text <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}} garbage",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call><tool_call>garbage",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [1, 2</tool_call>",
    "<tool_call>{\"arguments\": {\"z\": \"before the name\"}, \"name\": \"late\"}</tool_call>",
    "<tool_call>{\"arguments\": {\"z\": 1}}</tool_call>",
    "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
    "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"code\": \"if (x) { y(); } ]]\"}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"say \\\"hi\\\" \\\\ "
    "back\"}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"caf\\u00e9 \\ud83d\\ude00 "
    "\\/\"}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": \"caf\\u00e9 \\ud83d\\ude00 \\n\"}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": \"lone \\ud83d x\"}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"nul \\u0000\"}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"raw\ncontrol\"}}</tool_call>",
    "<tool_call>{\"name\": \"caf\\u00e9\", \"arguments\": {}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}, \"arguments\": {\"x\": 1}}",
    "<tool_call>{\"name\": \"f\", \"parameters\": {\"p\": 1}, \"arguments\": {\"a\": 2}}",
    "<tool_call>[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": [1]}]"
    "</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 01}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 1.}}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": tru}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": 42}</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}]</tool_call>",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call> between "
    "<tool_call>{\"name\": \"g\", \"arguments\": {\"b\": \"</tool_call>\"}}</tool_call> after",
    "{\"a\": 1} then <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    "[<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    "[TOOL_CALLS]nope <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    "[TOOL_CALLS]",
    "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, garbage",
    "[]",
    "{}",
    "[{\"name\": \"f\", \"arguments\": {}}, 3]",
    "\xc3\xa9t\xc3\xa9 \xe2\x82\xac <tool_call>{\"name\": \"f\", \"arguments\": {\"s\": "
    "\"\xe2\x82\xac\xf0\x9f\x98\x80\"}}",
    "bad \xff\xfe utf8 <tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\xc3\"}}",
    "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": {\"c\": [[[{}]]]}}}}</tool_call>",
};

START_TEST(test_api_tool_stream_matches_parse)
{
    const char *t = texts[_i];
    check_text(t, strlen(t), false);
    check_text(t, strlen(t), true);
}
END_TEST

/* The forced forms (tool_choice required / named): the JSON the constraint produces. */
START_TEST(test_api_tool_stream_forced)
{
    static const char *const forced[] = {
        "[{\"name\":\"f\",\"arguments\":{\"a\":[1]}}]",
        "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
        "\"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
        "  {\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}",
        "[{\"name\":\"f\",\"arguments\":{\"a\":[1",
        "not json",
        "[{\"name\":\"f\",\"arguments\":{}}] trailing",
    };
    for (size_t i = 0; i < sizeof(forced) / sizeof(forced[0]); i++)
        check_text(forced[i], strlen(forced[i]), true);
    struct got g;
    got_init(&g);
    const char *two = forced[1];
    feed_cuts(two, strlen(two), true, NULL, 0, &g);
    ck_assert_int_eq(g.n_calls, 2);
    ck_assert_str_eq(g.name[1].data, "get_time");
    ck_assert_str_eq(g.args[0].data, "{\"city\":\"Paris\"}");
    ck_assert_str_eq(g.args[1].data, "{\"tz\":\"CET\"}");
    ck_assert_int_eq((int)g.content.len, 0);
    got_fini(&g);
    /* forced text that is not JSON is content whole, not read as Hermes */
    const char *h = "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
    got_init(&g);
    feed_cuts(h, strlen(h), true, NULL, 0, &g);
    ck_assert_int_eq(g.n_calls, 0);
    ck_assert_str_eq(g.content.data, h);
    got_fini(&g);
}
END_TEST

/* What streams before the end: content in several events before the call, the call's start
 * before its arguments are written, its arguments in several fragments; and the exact strings. */
START_TEST(test_api_tool_stream_incremental)
{
    const char *t = "Sure, let me check the weather.\n<tool_call>\n{\"name\": \"get_weather\", "
                    "\"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>";
    size_t len = strlen(t), *cuts = malloc(len * sizeof(*cuts));
    ck_assert_ptr_nonnull(cuts);
    for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
    struct got g;
    got_init(&g);
    feed_cuts(t, len, false, cuts, len - 1, &g);
    ck_assert_str_eq(g.content.data, "Sure, let me check the weather.");
    ck_assert_int_gt(g.n_content_events, 10);
    ck_assert_int_eq(g.n_calls, 1);
    ck_assert_str_eq(g.name[0].data, "get_weather");
    ck_assert_str_eq(g.args[0].data, "{\"city\":\"Paris\",\"days\":[1,2]}");
    ck_assert_int_gt(g.n_args_events[0], 10);
    /* the call started as soon as its arguments began, long before the end */
    const char *args_at = strstr(t, "{\"city\"");
    ck_assert_uint_eq(g.fed_at_first_call, (size_t)(args_at - t) + 1);
    got_fini(&g);
    free(cuts);

    /* a held suffix: "<tool_c" is not sent until it turns out not to be the marker */
    struct api_tool_stream s;
    api_tool_stream_init(&s, false);
    got_init(&g);
    ck_assert_int_eq(api_tool_stream_feed(&s, "Hi  <tool_c", 11, false, got_ev, &g), 0);
    ck_assert_str_eq(g.content.data, "Hi");
    ck_assert_int_eq(api_tool_stream_feed(&s, "ar", 2, false, got_ev, &g), 0);
    ck_assert_str_eq(g.content.data, "Hi  <tool_car");
    ck_assert_int_eq(api_tool_stream_feed(&s, " \n", 2, true, got_ev, &g), 0);
    ck_assert_str_eq(g.content.data, "Hi  <tool_car \n");
    got_fini(&g);
    api_tool_stream_fini(&s);

    /* an unfinished UTF-8 character waits for its last byte */
    api_tool_stream_init(&s, false);
    got_init(&g);
    ck_assert_int_eq(api_tool_stream_feed(&s, "caf\xc3", 4, false, got_ev, &g), 0);
    ck_assert_str_eq(g.content.data, "caf");
    ck_assert_int_eq(api_tool_stream_feed(&s, "\xa9!", 2, false, got_ev, &g), 0);
    ck_assert_str_eq(g.content.data, "caf\xc3\xa9!");
    got_fini(&g);
    api_tool_stream_fini(&s);
}
END_TEST

/* The exact arguments strings: the model's JSON minus blanks outside strings, escapes kept; a
 * string value decoded; calls cut off keep what they have. */
START_TEST(test_api_tool_stream_arguments)
{
    static const struct {
        const char *text, *args;
    } cases[] = {
        {"<tool_call>{\"name\":\"f\",\"arguments\":{ \"a\" : [ 1 , 2.5e3 ] , \"s\" : \" x y \" }}",
         "{\"a\":[1,2.5e3],\"s\":\" x y \"}"},
        {"<tool_call>{\"name\":\"f\",\"arguments\":{\"q\":\"caf\\u00e9 \\\"\"}}",
         "{\"q\":\"caf\\u00e9 \\\"\"}"},
        {"<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"k\\\": \\u00e9\\ud83d\\ude00}\"}",
         "{\"k\": \xc3\xa9\xf0\x9f\x98\x80}"},
        {"<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":\"unfinished", "{\"a\":\"unfinished"},
        {"{\"name\": \"f\", \"parameters\": null}", "null"},
        {"<tool_call>{\"arguments\":{\"z\":1},\"name\":\"late\"}", "{\"z\":1}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *calls = NULL;
        size_t clen = 0;
        ck_assert_int_eq(
            api_tool_calls_parse(cases[i].text, strlen(cases[i].text), false, "x", &calls, &clen),
            1);
        json_t *fn = json_object_get(json_array_get(calls, 0), "function");
        ck_assert_str_eq(json_string_value(json_object_get(fn, "arguments")), cases[i].args);
        json_decref(calls);
        check_text(cases[i].text, strlen(cases[i].text), false);
    }
}
END_TEST

/* Long arguments and deep nesting neither crash nor lose bytes. */
START_TEST(test_api_tool_stream_large)
{
    struct buf t;
    buf_init(&t, 0);
    ck_assert_int_eq(buf_puts(&t, "<tool_call>{\"name\": \"write\", \"arguments\": {\"text\": \""),
                     0);
    for (int i = 0; i < 20000; i++) ck_assert_int_eq(buf_puts(&t, "ab\\\"{["), 0);
    ck_assert_int_eq(buf_puts(&t, "\"}}</tool_call>"), 0);
    struct got g;
    got_init(&g);
    feed_cuts(t.data, t.len, false, NULL, 0, &g);
    ck_assert_int_eq(g.n_calls, 1);
    ck_assert_uint_eq(g.args[0].len, 20000 * 6 + strlen("{\"text\":\"\"}"));
    check_same(t.data, t.len, false, &g, "large");
    got_fini(&g);
    buf_reset(&t);
    ck_assert_int_eq(buf_puts(&t, "<tool_call>{\"name\": \"f\", \"arguments\": "), 0);
    for (int i = 0; i < 3000; i++) ck_assert_int_eq(buf_putc(&t, '['), 0);
    got_init(&g);
    feed_cuts(t.data, t.len, false, NULL, 0, &g);
    ck_assert_int_eq(g.n_calls, 1); /* committed, then too deep: it keeps what it had */
    check_same(t.data, t.len, false, &g, "deep");
    got_fini(&g);
    buf_fini(&t);
}
END_TEST

Suite *api_tool_stream_suite(void)
{
    Suite *s = suite_create("api_tool_stream");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_api_tool_stream_matches_parse, 0,
                        (int)(sizeof(texts) / sizeof(texts[0])));
    tcase_add_test(tc, test_api_tool_stream_forced);
    tcase_add_test(tc, test_api_tool_stream_incremental);
    tcase_add_test(tc, test_api_tool_stream_arguments);
    tcase_add_test(tc, test_api_tool_stream_large);
    suite_add_tcase(s, tc);
    return s;
}
