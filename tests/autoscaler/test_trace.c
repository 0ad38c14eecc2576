/* Trace parsers: well-formed Azure CSV and Mooncake JSONL, every kind of malformed line, the
 * bounds, tie spreading, and the real trace files from ../shared when present. */
#include "autoscaler/sim/trace.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char azure_ok[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:15:46.6805900,374,44\r\n"
                               "2023-11-16 18:15:50.9951690,396,109\n"
                               "2023-11-16 18:15:50.0000000,0,0"; /* unsorted, no newline */

static int parse(const char *s, enum trace_format f, struct trace **t, char *err)
{
    return trace_parse(s, strlen(s), f, t, err, 256);
}

START_TEST(test_trace_parse_azure_ok)
{
    struct trace *t = NULL;
    char err[256];
    ck_assert_int_eq(parse(azure_ok, TRACE_AZURE, &t, err), 0);
    ck_assert_uint_eq(t->n, 3);
    ck_assert_double_eq(t->reqs[0].t_s, 0);
    ck_assert_uint_eq(t->reqs[0].prompt_tokens, 374);
    ck_assert_uint_eq(t->reqs[1].prompt_tokens, 0); /* the unsorted row moved up */
    ck_assert_double_eq_tol(t->reqs[1].t_s, 3.31941, 1e-6);
    ck_assert_double_eq_tol(t->reqs[2].t_s, 4.314579, 1e-6);
    ck_assert_uint_eq(t->reqs[2].output_tokens, 109);
    ck_assert_uint_eq(t->reqs[2].n_hash, 0);
    trace_free(t);
    trace_free(NULL);
}
END_TEST

START_TEST(test_trace_parse_csv_by_header_zones_and_burstgpt)
{
    struct trace *t = NULL;
    char err[256];
    /* Azure 2024-style: 'T' or ' ', any fraction, a zone (the offset applied) */
    const char *zoned = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2024-05-10 00:00:00.004+00:00,10,1\n"
                        "2024-05-10T02:00:01Z,20,2\n"
                        "2024-05-10 03:00:02+0100,30,3\n"
                        "2024-05-09 21:00:03.5-05,40,4\n";
    ck_assert_int_eq(parse(zoned, TRACE_AZURE, &t, err), 0);
    ck_assert_uint_eq(t->n, 4);
    ck_assert_double_eq_tol(t->reqs[1].t_s, 7200.996, 1e-6); /* 02:00:01Z */
    ck_assert_double_eq_tol(t->reqs[2].t_s, 7201.996, 1e-6); /* 03:00:02+01 = 02:00:02Z */
    ck_assert_double_eq_tol(t->reqs[3].t_s, 7203.496, 1e-6); /* 21:00:03.5-05 = 02:00:03.5Z */
    ck_assert_uint_eq(t->reqs[3].prompt_tokens, 40);
    trace_free(t);
    /* BurstGPT: seconds from the start, other columns ignored, the columns found by name */
    const char *burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                        "5,ChatGPT,472,18,490,Conversation log\n"
                        "45.25,GPT-4,1087,0,1087,API log\n"
                        "0.5,ChatGPT,100,7,107,Conversation log";
    ck_assert_int_eq(parse(burst, TRACE_AZURE, &t, err), 0);
    ck_assert_uint_eq(t->n, 3);
    ck_assert_double_eq(t->reqs[0].t_s, 0);
    ck_assert_uint_eq(t->reqs[0].prompt_tokens, 100);
    ck_assert_double_eq_tol(t->reqs[2].t_s, 44.75, 1e-9);
    ck_assert_uint_eq(t->reqs[2].output_tokens, 0);
    trace_free(t);
    /* column order is the header's */
    const char *moved =
        "GeneratedTokens,extra,TIMESTAMP,ContextTokens\n3,x,2023-11-16 18:15:46,9\n";
    ck_assert_int_eq(parse(moved, TRACE_AZURE, &t, err), 0);
    ck_assert_uint_eq(t->reqs[0].prompt_tokens, 9);
    ck_assert_uint_eq(t->reqs[0].output_tokens, 3);
    trace_free(t);
}
END_TEST

START_TEST(test_trace_parse_azure_crosses_midnight_and_leap_day)
{
    struct trace *t = NULL;
    char err[256];
    const char *s = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2024-02-28 23:59:59.5,1,1\n"
                    "2024-02-29 00:00:00,1,1\n"
                    "2024-03-01 00:00:00.25,1,1\n";
    ck_assert_int_eq(parse(s, TRACE_AZURE, &t, err), 0);
    ck_assert_double_eq_tol(t->reqs[1].t_s, 0.5, 1e-9);
    ck_assert_double_eq_tol(t->reqs[2].t_s, 86400.75, 1e-6);
    trace_free(t);
}
END_TEST

struct bad {
    const char *text;
    int rc;
    const char *msg; /* substring of the error */
};

START_TEST(test_trace_parse_azure_malformed)
{
    static const struct bad cases[] = {
        {"", ERR_PARSE, "no requests"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n", ERR_PARSE, "no requests"},
        {"time,ctx,gen\n2023-11-16 18:15:46.68,1,1", ERR_PARSE, "line 1: expected header"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:15:46.68,1,1", ERR_PARSE,
         "line 2: bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 18:15:46.68,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 24:00:00,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15:46+25:00,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+0,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5Q,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"Timestamp,Request tokens,Response tokens\n-5,1,1", ERR_PARSE, "bad TIMESTAMP"},
        {"Timestamp,Request tokens,Response tokens\n1e999,1,1", ERR_PARSE, "bad TIMESTAMP"},
        {"Timestamp,Request tokens,Response tokens\nnan,1,1", ERR_PARSE, "bad TIMESTAMP"},
        {"Timestamp,Model,Request tokens,Response tokens\n5,\"GPT, 4\",1,1", ERR_PARSE, "quoted"},
        {"Timestamp,Model,Request tokens\n5,x,1", ERR_PARSE, "expected header"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1234567890,1,1", ERR_PARSE,
         "bad TIMESTAMP"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-1,1", ERR_PARSE,
         "ContextTokens"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,", ERR_PARSE,
         "GeneratedTokens"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,99999999999", ERR_PARSE,
         "GeneratedTokens"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1", ERR_PARSE,
         "3 comma-separated"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2,3", ERR_PARSE,
         "more than 3"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1 ,2", ERR_PARSE,
         "ContextTokens"},
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n"
         "2025-11-16 18:15:46,1,1",
         ERR_RANGE, "span"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct trace *t = NULL;
        char err[256];
        int rc = parse(cases[i].text, TRACE_AZURE, &t, err);
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc, err);
        ck_assert_msg(strstr(err, cases[i].msg), "case %zu: error \"%s\"", i, err);
        ck_assert_ptr_null(t);
    }
}
END_TEST

START_TEST(test_trace_parse_mooncake_ok)
{
    const char *s =
        "{\"timestamp\": 3000, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, "
        "7]}\n"
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [0, 1]}\n"
        "\n"
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n";
    struct trace *t = NULL;
    char err[256];
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &t, err), 0);
    ck_assert_uint_eq(t->n, 3);
    ck_assert_uint_eq(t->n_hashes, 4);
    /* Sorted by time, file order kept for the tie at 0. */
    ck_assert_uint_eq(t->reqs[0].prompt_tokens, 600);
    ck_assert_uint_eq(t->reqs[0].n_hash, 2);
    ck_assert_uint_eq(t->hashes[t->reqs[0].hash_off + 1], 1);
    ck_assert_uint_eq(t->reqs[1].n_hash, 0);
    ck_assert_double_eq(t->reqs[2].t_s, 3.0);
    ck_assert_uint_eq(t->hashes[t->reqs[2].hash_off + 1], 7);
    trace_free(t);
}
END_TEST

START_TEST(test_trace_parse_mooncake_malformed)
{
    static const struct bad cases[] = {
        {"{\"timestamp\": 0, \"input_length\": 1", ERR_PARSE, "line 1: bad JSON"},
        {"[1,2]", ERR_PARSE, "not a JSON object"},
        {"{\"input_length\": 1, \"output_length\": 1}", ERR_PARSE, "timestamp"},
        {"{\"timestamp\": \"0\", \"input_length\": 1, \"output_length\": 1}", ERR_PARSE,
         "timestamp"},
        {"{\"timestamp\": -5, \"input_length\": 1, \"output_length\": 1}", ERR_RANGE, "timestamp"},
        {"{\"timestamp\": 0, \"output_length\": 1}", ERR_PARSE, "missing \"input_length\""},
        {"{\"timestamp\": 0, \"input_length\": -1, \"output_length\": 1}", ERR_PARSE,
         "input_length"},
        {"{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1}", ERR_PARSE,
         "input_length"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 100000000}", ERR_PARSE,
         "output_length"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 3}",
         ERR_PARSE, "not an array"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
         ERR_PARSE, "hash_ids[1]"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"timestamp\": 1}",
         ERR_PARSE, "bad JSON"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\nnot json", ERR_PARSE,
         "line 2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct trace *t = NULL;
        char err[256];
        int rc = parse(cases[i].text, TRACE_MOONCAKE, &t, err);
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc, err);
        ck_assert_msg(strstr(err, cases[i].msg), "case %zu: error \"%s\"", i, err);
        ck_assert_ptr_null(t);
    }
}
END_TEST

START_TEST(test_trace_parse_huge_line_and_many_hashes)
{
    size_t n = TRACE_MAX_LINE + 10;
    char *s = malloc(n + 1);
    memset(s, ' ', n);
    s[n] = 0;
    struct trace *t = NULL;
    char err[256];
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &t, err), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "longer than"));
    /* TRACE_MAX_HASHES + 1 ids fit in a line under the line limit. */
    size_t len = 0;
    len += (size_t)snprintf(s, n,
                            "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,"
                            "\"hash_ids\":[");
    for (unsigned i = 0; i <= TRACE_MAX_HASHES; i++)
        len += (size_t)snprintf(s + len, n - len, "1,");
    s[len - 1] = ']';
    s[len] = '}';
    s[len + 1] = 0;
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &t, err), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "hash_ids"));
    free(s);
    ck_assert_int_eq(trace_parse("x", TRACE_MAX_BYTES + 1ull, TRACE_AZURE, &t, err, 256),
                     ERR_TOO_BIG);
}
END_TEST

START_TEST(test_trace_spread_ties_deterministic_and_ordered)
{
    char s[4096];
    size_t len = 0;
    for (int tick = 0; tick < 3; tick++)
        for (int k = 0; k < 10; k++)
            len += (size_t)snprintf(s + len, sizeof(s) - len,
                                    "{\"timestamp\":%d,\"input_length\":%d,\"output_length\":1}\n",
                                    tick * 3000, tick * 100 + k);
    struct trace *a = NULL, *b = NULL;
    char err[256];
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &a, err), 0);
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &b, err), 0);
    trace_spread_ties(a, 42);
    trace_spread_ties(b, 42);
    for (size_t i = 0; i < a->n; i++) {
        ck_assert_double_eq(a->reqs[i].t_s, b->reqs[i].t_s);
        ck_assert_uint_eq(a->reqs[i].prompt_tokens, (i / 10) * 100 + i % 10); /* order kept */
        double tick = (double)(i / 10) * 3;
        ck_assert_double_ge(a->reqs[i].t_s, tick);
        ck_assert_double_lt(a->reqs[i].t_s, tick + 3);
        if (i) ck_assert_double_ge(a->reqs[i].t_s, a->reqs[i - 1].t_s);
    }
    ck_assert_double_gt(a->reqs[9].t_s - a->reqs[0].t_s, 1.0); /* actually spread */
    trace_free(b);
    ck_assert_int_eq(parse(s, TRACE_MOONCAKE, &b, err), 0);
    trace_spread_ties(b, 43); /* another seed, other offsets */
    ck_assert(a->reqs[5].t_s != b->reqs[5].t_s);
    trace_free(a);
    trace_free(b);
}
END_TEST

START_TEST(test_trace_load_missing_file)
{
    struct trace *t = NULL;
    char err[256];
    ck_assert_int_eq(trace_load("/nonexistent/trace.csv", TRACE_AZURE, &t, err, sizeof(err)),
                     ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/trace.csv"));
    ck_assert_int_eq(trace_load("/nonexistent/trace.csv", TRACE_AZURE, &t, NULL, 0), ERR_IO);
    enum trace_format f;
    ck_assert_int_eq(trace_format_parse("mooncake", &f), 0);
    ck_assert_int_eq(f, TRACE_MOONCAKE);
    ck_assert_int_eq(trace_format_parse("csv", &f), ERR_INVAL);
}
END_TEST

/* The real files: row counts and spans from /work/shared/traces/SOURCE.md. */
START_TEST(test_trace_load_shared_files)
{
    static const struct {
        const char *rel;
        enum trace_format f;
        size_t rows;
        double span_s;
    } files[] = {
        {"traces/AzureLLMInferenceTrace_conv.csv", TRACE_AZURE, 19366, 3501.7},
        {"traces/mooncake_conversation_trace.jsonl", TRACE_MOONCAKE, 12031, 3537.0},
        {"traces/mooncake_synthetic_trace.jsonl", TRACE_MOONCAKE, 3993, 1022.025},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const char *p = test_shared_path(files[i].rel);
        if (!p) continue;
        struct trace *t = NULL;
        char err[256];
        ck_assert_msg(trace_load(p, files[i].f, &t, err, sizeof(err)) == 0, "%s", err);
        ck_assert_uint_eq(t->n, files[i].rows);
        ck_assert_double_eq_tol(t->reqs[t->n - 1].t_s, files[i].span_s, 0.1);
        if (files[i].f == TRACE_MOONCAKE) {
            /* len(hash_ids) == ceil(input_length / 512) on every row. */
            for (size_t k = 0; k < t->n; k++)
                ck_assert_uint_eq(t->reqs[k].n_hash,
                                  (t->reqs[k].prompt_tokens + TRACE_BLOCK_TOKENS - 1) /
                                      TRACE_BLOCK_TOKENS);
        }
        trace_free(t);
    }
}
END_TEST

/* A source of 100 requests at 1/s with prompts 100..199 and outputs 10..19 (two with hashes). */
static struct trace *source(void)
{
    char text[16384];
    size_t len = 0;
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len,
                                "{\"timestamp\":%d,\"input_length\":%d,\"output_length\":%d,"
                                "\"hash_ids\":[%d]}\n",
                                i * 1000, 100 + i, 10 + i % 10, i % 2);
    struct trace *t = NULL;
    char err[256];
    ck_assert_int_eq(parse(text, TRACE_MOONCAKE, &t, err), 0);
    ck_assert_uint_eq(t->n, 100);
    return t;
}

START_TEST(test_trace_synth_diurnal_shape_and_tokens)
{
    struct trace *src = source(), *t = NULL, *t2 = NULL;
    struct trace_synth p;
    trace_synth_defaults(&p);
    p.mean_rps = 10;
    p.burst_every_s = 0; /* the ramp alone first */
    ck_assert_int_eq(trace_synth_diurnal(src, &p, &t), 0);
    /* About 36000 requests; the middle hour-quarters carry more than the ends (4x at the peak). */
    ck_assert(t->n > 34000 && t->n < 38000);
    size_t q[4] = {0};
    for (size_t i = 0; i < t->n; i++) {
        ck_assert(i == 0 || t->reqs[i].t_s >= t->reqs[i - 1].t_s);
        ck_assert(t->reqs[i].prompt_tokens >= 100 && t->reqs[i].prompt_tokens < 200);
        ck_assert_uint_eq(t->reqs[i].output_tokens, 10 + (t->reqs[i].prompt_tokens - 100) % 10);
        ck_assert_uint_eq(t->reqs[i].n_hash, 0);
        q[(size_t)(t->reqs[i].t_s / 900)]++;
    }
    ck_assert(q[1] > 1.8 * q[0] && q[2] > 1.8 * q[3]);
    /* Bursts add requests; the same seed gives the same trace, another seed another. */
    p.burst_every_s = 600;
    ck_assert_int_eq(trace_synth_diurnal(src, &p, &t2), 0);
    ck_assert_uint_gt(t2->n, t->n);
    struct trace *t3 = NULL;
    ck_assert_int_eq(trace_synth_diurnal(src, &p, &t3), 0);
    ck_assert_uint_eq(t3->n, t2->n);
    ck_assert(memcmp(t3->reqs, t2->reqs, t2->n * sizeof(*t2->reqs)) == 0);
    trace_free(t3);
    p.seed = 2;
    ck_assert_int_eq(trace_synth_diurnal(src, &p, &t3), 0);
    ck_assert(t3->n != t2->n || memcmp(t3->reqs, t2->reqs, t2->n * sizeof(*t2->reqs)) != 0);
    trace_free(t3);
    p.peak_to_trough = 0.5;
    ck_assert_int_eq(trace_synth_diurnal(src, &p, &t3), ERR_INVAL);
    trace_free(t);
    trace_free(t2);
    trace_free(src);
}
END_TEST

START_TEST(test_trace_amplify_copies_rate_and_hashes)
{
    struct trace *src = source(), *t = NULL;
    ck_assert_int_eq(trace_amplify(src, 5, 1, &t), 0);
    ck_assert_uint_eq(t->n, 500);
    ck_assert_uint_eq(t->n_hashes, 5 * src->n_hashes);
    for (size_t i = 1; i < t->n; i++) ck_assert(t->reqs[i].t_s >= t->reqs[i - 1].t_s);
    /* Every second holds its 5 copies (each inside the gap after its original). */
    for (int sec = 0; sec < 99; sec++) {
        int in = 0;
        for (size_t i = 0; i < t->n; i++) in += t->reqs[i].t_s >= sec && t->reqs[i].t_s < sec + 1;
        ck_assert_int_eq(in, 5);
    }
    /* Copies keep their own prefix identity: no copy shares a hash with the source's. */
    size_t shared = 0;
    for (size_t i = src->n_hashes; i < t->n_hashes; i++)
        for (size_t j = 0; j < src->n_hashes; j++) shared += t->hashes[i] == src->hashes[j];
    ck_assert_uint_eq(shared, 0);
    trace_free(t);
    ck_assert_int_eq(trace_amplify(src, 0, 1, &t), ERR_INVAL);
    ck_assert_int_eq(trace_amplify(src, 1, 1, &t), 0); /* one copy: the source itself */
    ck_assert_uint_eq(t->n, src->n);
    ck_assert(memcmp(t->reqs, src->reqs, src->n * sizeof(*src->reqs)) == 0);
    trace_free(t);
    trace_free(src);
}
END_TEST

Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_trace_parse_azure_ok);
    tcase_add_test(tc, test_trace_parse_csv_by_header_zones_and_burstgpt);
    tcase_add_test(tc, test_trace_synth_diurnal_shape_and_tokens);
    tcase_add_test(tc, test_trace_amplify_copies_rate_and_hashes);
    tcase_add_test(tc, test_trace_parse_azure_crosses_midnight_and_leap_day);
    tcase_add_test(tc, test_trace_parse_azure_malformed);
    tcase_add_test(tc, test_trace_parse_mooncake_ok);
    tcase_add_test(tc, test_trace_parse_mooncake_malformed);
    tcase_add_test(tc, test_trace_parse_huge_line_and_many_hashes);
    tcase_add_test(tc, test_trace_spread_ties_deterministic_and_ordered);
    tcase_add_test(tc, test_trace_load_missing_file);
    tcase_add_test(tc, test_trace_load_shared_files);
    suite_add_tcase(s, tc);
    return s;
}
