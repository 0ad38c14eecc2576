/* Tests for the Prometheus text parser and its lookups (common/prom/prom_parse.c, common/prom/prom_query.c):
 * a real-world exposition, a malformed-input table, limits, writer -> parser round trips over the
 * engine metric contract, histogram helpers and quantiles. */
#include "common/prom/prom.h"

#include "common/err.h"
#include "common/log.h"
#include "common/metric_names.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Modelled on client_golang and prometheus_client (Python) output plus a vLLM server: summaries
 * with quantiles, histograms, escapes, NaN/+Inf, a timestamp, comments, blank lines. */
static const char real_world[] =
    "# HELP go_gc_duration_seconds A summary of the pause duration of garbage collection cycles.\n"
    "# TYPE go_gc_duration_seconds summary\n"
    "go_gc_duration_seconds{quantile=\"0\"} 2.3511e-05\n"
    "go_gc_duration_seconds{quantile=\"0.25\"} 4.8374e-05\n"
    "go_gc_duration_seconds{quantile=\"0.5\"} 6.1205e-05\n"
    "go_gc_duration_seconds{quantile=\"0.75\"} 8.9412e-05\n"
    "go_gc_duration_seconds{quantile=\"1\"} 0.000897341\n"
    "go_gc_duration_seconds_sum 0.011937394\n"
    "go_gc_duration_seconds_count 142\n"
    "# HELP go_goroutines Number of goroutines that currently exist.\n"
    "# TYPE go_goroutines gauge\n"
    "go_goroutines 48\n"
    "# HELP go_info Information about the Go environment.\n"
    "# TYPE go_info gauge\n"
    "go_info{version=\"go1.21.5\"} 1\n"
    "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
    "# TYPE process_cpu_seconds_total counter\n"
    "process_cpu_seconds_total 12.47\n"
    "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
    "# TYPE process_start_time_seconds gauge\n"
    "process_start_time_seconds 1.70277839962e+09\n"
    "\n"
    "# HELP http_request_duration_seconds Latency of HTTP requests.\n"
    "# TYPE http_request_duration_seconds histogram\n"
    "http_request_duration_seconds_bucket{handler=\"/metrics\",code=\"200\",le=\"0.005\"} 1203\n"
    "http_request_duration_seconds_bucket{handler=\"/metrics\",code=\"200\",le=\"0.01\"} 1290\n"
    "http_request_duration_seconds_bucket{handler=\"/metrics\",code=\"200\",le=\"0.1\"} 1301\n"
    "http_request_duration_seconds_bucket{handler=\"/metrics\",code=\"200\",le=\"+Inf\"} 1302\n"
    "http_request_duration_seconds_sum{handler=\"/metrics\",code=\"200\"} 4.2139\n"
    "http_request_duration_seconds_count{handler=\"/metrics\",code=\"200\"} 1302\n"
    "http_request_duration_seconds_bucket{handler=\"/v1/completions\",code=\"200\",le=\"0.005\"} "
    "0\n"
    "http_request_duration_seconds_bucket{handler=\"/v1/completions\",code=\"200\",le=\"0.01\"} 0\n"
    "http_request_duration_seconds_bucket{handler=\"/v1/completions\",code=\"200\",le=\"0.1\"} 20\n"
    "http_request_duration_seconds_bucket{handler=\"/v1/completions\",code=\"200\",le=\"+Inf\"} "
    "40\n"
    "http_request_duration_seconds_sum{handler=\"/v1/completions\",code=\"200\"} 9.5\n"
    "http_request_duration_seconds_count{handler=\"/v1/completions\",code=\"200\"} 40\n"
    "# A free-form comment line, ignored.\n"
    "#\n"
    "# HELP python_info Python platform information\n"
    "# TYPE python_info gauge\n"
    "python_info{implementation=\"CPython\",major=\"3\",minor=\"11\",patchlevel=\"6\","
    "version=\"3.11.6\"} 1.0\n"
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"} 3.0\n"
    "# HELP escapes_info Help with a backslash \\\\ and a\\nnewline.\n"
    "# TYPE escapes_info gauge\n"
    "escapes_info{path=\"C:\\\\tmp\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\",} 1\n"
    "# TYPE odd_values untyped\n"
    "odd_values{kind=\"nan\"} NaN\n"
    "odd_values{kind=\"inf\"} +Inf\n"
    "odd_values{kind=\"ninf\"} -Inf\n"
    "odd_values{kind=\"ts\"} -1.5e-3 1702778399620\n"
    "  untyped_metric\t 42   \n"
    "last_line_without_newline 7";

static struct prom_exposition *parse_ok(const char *text, size_t len)
{
    struct prom_exposition *e = NULL;
    char err[256];
    int rc = prom_parse(text, len, NULL, &e, err, sizeof(err));
    ck_assert_msg(rc == 0, "parse failed (%d): %s", rc, err);
    ck_assert_ptr_nonnull(e);
    return e;
}

#define L(n, v) ((struct prom_label){(n), (v)})

START_TEST(test_prom_parse_real_world)
{
    struct prom_exposition *e = parse_ok(real_world, strlen(real_world));
    ck_assert_uint_eq(e->n_families, 12);

    const struct prom_family *f = prom_exposition_family(e, "go_gc_duration_seconds");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(f->type, PROM_SUMMARY);
    ck_assert(f->has_type);
    ck_assert_uint_eq(f->n_samples, 7);
    ck_assert_str_eq(f->help, "A summary of the pause duration of garbage collection cycles.");
    ck_assert_str_eq(f->samples[6].name, "go_gc_duration_seconds_count");
    ck_assert(f->samples[6].value == 142);
    const struct prom_sample *s =
        prom_exposition_sample(e, "go_gc_duration_seconds", &L("quantile", "0.75"), 1);
    ck_assert_ptr_nonnull(s);
    ck_assert(s->value == 8.9412e-05);

    s = prom_exposition_sample(e, "process_start_time_seconds", NULL, 0);
    ck_assert(s && s->value == 1.70277839962e+09 && !s->has_timestamp);
    ck_assert_int_eq(prom_exposition_family(e, "process_cpu_seconds_total")->type, PROM_COUNTER);

    s = prom_exposition_sample(e, "vllm:num_requests_running",
                               &L("model_name", "meta-llama/Llama-3.1-8B"), 1);
    ck_assert(s && s->value == 3);
    ck_assert_ptr_null(
        prom_exposition_sample(e, "vllm:num_requests_running", &L("model_name", "other"), 1));

    f = prom_exposition_family(e, "escapes_info");
    ck_assert_str_eq(f->help, "Help with a backslash \\ and a\nnewline.");
    ck_assert_uint_eq(f->samples[0].n_labels, 3);
    ck_assert_str_eq(f->samples[0].labels[0].value, "C:\\tmp");
    ck_assert_str_eq(f->samples[0].labels[1].value, "say \"hi\"");
    ck_assert_str_eq(f->samples[0].labels[2].value, "a\nb");

    f = prom_exposition_family(e, "odd_values");
    ck_assert(f->has_type && f->type == PROM_UNTYPED && f->n_samples == 4);
    ck_assert(isnan(f->samples[0].value));
    ck_assert(f->samples[1].value == INFINITY && f->samples[2].value == -INFINITY);
    ck_assert(f->samples[3].has_timestamp && f->samples[3].timestamp_ms == 1702778399620);
    ck_assert(f->samples[3].value == -1.5e-3);

    f = prom_exposition_family(e, "untyped_metric");
    ck_assert(f && !f->has_type && f->type == PROM_UNTYPED && !f->help);
    ck_assert(f->samples[0].value == 42);
    ck_assert(prom_exposition_sample(e, "last_line_without_newline", NULL, 0)->value == 7);

    double sum = -1;
    ck_assert_uint_eq(prom_exposition_sum(e, "http_request_duration_seconds_count", NULL, 0, &sum),
                      2);
    ck_assert(sum == 1342);
    ck_assert_uint_eq(prom_exposition_sum(e, "nope", NULL, 0, &sum), 0);
    ck_assert(sum == 0);

    struct prom_histogram h;
    ck_assert_int_eq(prom_histogram_get(e, "http_request_duration_seconds",
                                        &L("handler", "/v1/completions"), 1, &h),
                     0);
    ck_assert_uint_eq(h.n_buckets, 4);
    ck_assert(h.buckets[2].le == 0.1 && h.buckets[2].count == 20);
    ck_assert(h.buckets[3].le == INFINITY && h.buckets[3].count == 40);
    ck_assert(h.sum == 9.5 && h.count == 40);
    /* Rank 20 of 40 is the top of the 0.01..0.1 bucket. */
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 0.5), 0.1, 1e-12);
    /* Rank 30 is in +Inf: the largest finite bound. */
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 0.75), 0.1, 1e-12);
    /* Rank 10: halfway through the 0.01..0.1 bucket. */
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 0.25), 0.055, 1e-12);
    prom_histogram_fini(&h);
    ck_assert_int_eq(prom_histogram_get(e, "go_goroutines", NULL, 0, &h), ERR_INVAL);
    ck_assert_int_eq(prom_histogram_get(e, "missing", NULL, 0, &h), ERR_NOT_FOUND);
    ck_assert_int_eq(
        prom_histogram_get(e, "http_request_duration_seconds", &L("handler", "/none"), 1, &h),
        ERR_NOT_FOUND);
    prom_exposition_free(e);
}
END_TEST

/* Every prefix of a valid body either parses or fails cleanly: no reads past the given length
 * (each prefix is copied into an exact-size allocation so ASan sees overruns). */
START_TEST(test_prom_parse_every_prefix)
{
    size_t n = strlen(real_world);
    for (size_t len = 0; len <= n; len++) {
        char *copy = malloc(len ? len : 1);
        memcpy(copy, real_world, len);
        struct prom_exposition *e = NULL;
        char err[128];
        int rc = prom_parse(copy, len, NULL, &e, err, sizeof(err));
        ck_assert(rc == 0 || rc == ERR_PARSE);
        ck_assert(rc == 0 ? e != NULL : e == NULL);
        prom_exposition_free(e);
        free(copy);
    }
}
END_TEST

START_TEST(test_prom_parse_line_endings_and_blanks)
{
    static const char crlf[] = "# TYPE a counter\r\na_total 1\r\n\r\n  \t\nb{x=\"y\"}\t2\r\n";
    struct prom_exposition *e = parse_ok(crlf, strlen(crlf));
    ck_assert_uint_eq(e->n_families, 3); /* a (typed, no samples), a_total, b */
    ck_assert(prom_exposition_sample(e, "a_total", NULL, 0)->value == 1);
    ck_assert(prom_exposition_sample(e, "b", &L("x", "y"), 1)->value == 2);
    prom_exposition_free(e);

    e = parse_ok("", 0);
    ck_assert_uint_eq(e->n_families, 0);
    prom_exposition_free(e);
    e = parse_ok("\n\n# only a comment", 17);
    ck_assert_uint_eq(e->n_families, 0);
    prom_exposition_free(e);

    /* Blanks are allowed around label syntax and before the value; "}1" needs none. */
    static const char spaced[] = "m { a = \"1\" , b=\"2\" }7\nn{}8\n#HELP n no blank after #\n";
    e = parse_ok(spaced, strlen(spaced));
    const struct prom_sample *s = prom_exposition_sample(e, "m", &L("b", "2"), 1);
    ck_assert(s && s->value == 7 && s->n_labels == 2);
    ck_assert(prom_exposition_sample(e, "n", NULL, 0)->value == 8);
    ck_assert_str_eq(prom_exposition_family(e, "n")->help, "no blank after #");
    prom_exposition_free(e);
}
END_TEST

START_TEST(test_prom_parse_values)
{
    static const struct {
        const char *text;
        double value;
    } ok[] = {{"m 0", 0},
              {"m -0.0", -0.0},
              {"m +3", 3},
              {"m .5", 0.5},
              {"m 5.", 5},
              {"m 1e3", 1000},
              {"m 1E-2", 0.01},
              {"m inf", INFINITY},
              {"m -Infinity", -INFINITY},
              {"m +inf", INFINITY},
              {"m 4.9e-324", 4.9e-324}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct prom_exposition *e = parse_ok(ok[i].text, strlen(ok[i].text));
        ck_assert_msg(e->families[0].samples[0].value == ok[i].value, "%s", ok[i].text);
        prom_exposition_free(e);
    }
    static const char nan_ts[] = "m nan\nm2 1 -9223372036854775808\n";
    struct prom_exposition *e = parse_ok(nan_ts, strlen(nan_ts));
    ck_assert(isnan(e->families[0].samples[0].value));
    ck_assert(e->families[1].samples[0].timestamp_ms == INT64_MIN);
    prom_exposition_free(e);
}
END_TEST

/* Samples of one family need not be contiguous; a HELP may follow samples. */
START_TEST(test_prom_parse_interleaved_family)
{
    static const char text[] = "# TYPE h histogram\n"
                               "h_bucket{le=\"1\"} 1\n"
                               "other 5\n"
                               "h_bucket{le=\"+Inf\"} 2\n"
                               "h_sum 3\n"
                               "h_count 2\n"
                               "# HELP other late help\n";
    struct prom_exposition *e = parse_ok(text, strlen(text));
    ck_assert_uint_eq(e->n_families, 2);
    ck_assert_uint_eq(prom_exposition_family(e, "h")->n_samples, 4);
    ck_assert_str_eq(prom_exposition_family(e, "other")->help, "late help");
    struct prom_histogram h;
    ck_assert_int_eq(prom_histogram_get(e, "h", NULL, 0, &h), 0);
    ck_assert(h.n_buckets == 2 && h.sum == 3 && h.count == 2);
    prom_histogram_fini(&h);
    prom_exposition_free(e);
}
END_TEST

/* ---- malformed input ------------------------------------------------------------------------ */

static const struct {
    const char *text;
    int rc;
    const char *err; /* expected substring of the message */
} bad[] = {
    {"foo{a=\"b} 1\n", ERR_PARSE, "line 1, column 7: unterminated label value"},
    {"foo{a=\"\\x\"} 1", ERR_PARSE, "line 1, column 8: invalid escape sequence '\\x' in label"},
    {"foo{a=\"\\", ERR_PARSE, "column 7: unterminated label value"},
    {"foo abc", ERR_PARSE, "line 1, column 5: invalid value 'abc'"},
    {"foo{a=\"b\"}\n", ERR_PARSE, "line 1, column 11: missing value"},
    {"foo\n", ERR_PARSE, "line 1, column 4: missing value"},
    {"foo{a=\"1\",a=\"2\"} 1", ERR_PARSE, "column 11: duplicate label name 'a'"},
    {"1foo 1", ERR_PARSE, "line 1, column 1: expected a metric name or '#'"},
    {"foo{1a=\"b\"} 1", ERR_PARSE, "column 5: invalid label name"},
    {"ok 1\nfoo 1\0", ERR_PARSE, "line 2, column 6: NUL byte"},
    {"# TYPE foo gauge\n# TYPE foo gauge\n", ERR_PARSE, "line 2, column 8: second TYPE line"},
    {"foo 1\n# TYPE foo gauge\n", ERR_PARSE, "line 2, column 8: TYPE line for 'foo' after its"},
    {"h_count 4\n# TYPE h histogram\n", ERR_PARSE,
     "line 2, column 8: TYPE line for 'h' after its samples ('h_count')"},
    {"# HELP s x\ns_sum 1\n# TYPE s summary\n", ERR_PARSE, "after its samples ('s_sum')"},
    {"# TYPE foo bogus", ERR_PARSE, "column 12: unknown metric type 'bogus'"},
    {"# TYPE foo", ERR_PARSE, "column 11: unknown metric type ''"},
    {"# HELP foo a\n# HELP foo b\n", ERR_PARSE, "line 2, column 8: second HELP line for 'foo'"},
    {"# HELP foo bad \\q", ERR_PARSE, "column 16: invalid escape sequence '\\q' in HELP text"},
    {"# HELP e \r\r\n", ERR_PARSE, "line 1, column 10: carriage return in HELP text"},
    {"# HELP e a\rb\n", ERR_PARSE, "column 11: carriage return in HELP text"},
    {"# HELP foo trailing \\", ERR_PARSE, "column 21: backslash at end of HELP text"},
    {"foo 1 abc", ERR_PARSE, "column 7: invalid timestamp 'abc'"},
    {"foo 1 9223372036854775808", ERR_PARSE, "invalid timestamp"},
    {"foo 1 1.5", ERR_PARSE, "invalid timestamp '1.5'"},
    {"foo 1 2 3", ERR_PARSE, "column 9: unexpected text after the timestamp"},
    {"foo{a=\"b\" c=\"d\"} 1", ERR_PARSE, "column 11: expected ',' or '}' after label value"},
    {"foo{a=\"b\"", ERR_PARSE, "column 10: unterminated label set"},
    {"foo{", ERR_PARSE, "column 5: unterminated label set"},
    {"foo{a} 1", ERR_PARSE, "column 6: expected '=' after label name 'a'"},
    {"foo{a=b} 1", ERR_PARSE, "column 7: expected '\"' to open the value of label 'a'"},
    {"foo{a=\"b\",,} 1", ERR_PARSE, "column 11: invalid label name"},
    {"# TYPE h histogram\nh_bucket 1", ERR_PARSE,
     "line 2, column 1: histogram bucket sample 'h' "
     "has no 'le' label"},
    {"# TYPE h histogram\nh_bucket{le=\"x\"} 1", ERR_PARSE, "label le=\"x\" is not a number"},
    {"# TYPE h histogram\nh_bucket{le=\"NaN\"} 1", ERR_PARSE, "label le=\"NaN\" is not a number"},
    {"# TYPE h histogram\nh 1", ERR_PARSE, "sample 'h' of histogram family 'h' needs a _bucket"},
    {"# TYPE s summary\ns 1", ERR_PARSE, "summary quantile sample 's' has no 'quantile' label"},
    {"foo 1e999", ERR_PARSE, "invalid value '1e999'"},
    {"foo 0x10", ERR_PARSE, "invalid value '0x10'"},
    {"foo 1.2.3", ERR_PARSE, "invalid value '1.2.3'"},
    {"foo -", ERR_PARSE, "invalid value '-'"},
    {"foo .", ERR_PARSE, "invalid value '.'"},
    {"foo 1e", ERR_PARSE, "invalid value '1e'"},
    {"foo 1_000", ERR_PARSE, "invalid value '1_000'"},
    {"foo{a=\"\xff\"} 1", ERR_PARSE, "column 8: invalid UTF-8 in label value"},
    {"foo{a=\"\xc0\xaf\"} 1", ERR_PARSE, "invalid UTF-8 in label value"},     /* overlong '/' */
    {"foo{a=\"\xed\xa0\x80\"} 1", ERR_PARSE, "invalid UTF-8 in label value"}, /* surrogate */
    {"# HELP foo caf\xc3", ERR_PARSE, "column 15: invalid UTF-8 in HELP text"},
    {"foo{__name__=\"x\"} 1", ERR_PARSE, "label name '__name__' is reserved"},
    {"# TYPE\n", ERR_PARSE, "column 7: invalid metric name in # TYPE line"},
    {"# HELP 9x doc", ERR_PARSE, "column 8: invalid metric name in # HELP line"},
    {"# TYPE foo- gauge", ERR_PARSE, "column 11: invalid metric name in # TYPE line"},
    {"# TYPE foo gauge extra", ERR_PARSE, "column 18: unexpected text after the type"},
    {"# TYPE foo Gauge", ERR_PARSE, "unknown metric type 'Gauge'"},
    {"foo$ 1", ERR_PARSE, "column 4: unexpected character after metric name"},
    {"foo{a=\"b\"}} 1", ERR_PARSE, "column 11: invalid value '}'"},
    {"foo 1\r\r\n", ERR_PARSE, "invalid value '1\r'"},
    {"ok 1\n\nbad{ 1\n", ERR_PARSE, "line 3, column 6: invalid label name"},
    {"{a=\"b\"} 1", ERR_PARSE, "column 1: expected a metric name or '#'"},
};

START_TEST(test_prom_parse_rejects_malformed)
{
    size_t i = (size_t)_i;
    /* The NUL case has a NUL inside: its length is that of the literal without the terminator. */
    size_t len = strlen(bad[i].text);
    if (strstr(bad[i].err, "NUL byte")) len += 2;
    char *copy = malloc(len); /* exact size: ASan catches any read past the end */
    memcpy(copy, bad[i].text, len);
    struct prom_exposition *e = (struct prom_exposition *)copy; /* must stay untouched */
    char err[256];
    int rc = prom_parse(copy, len, NULL, &e, err, sizeof(err));
    ck_assert_msg(rc == bad[i].rc, "case %zu: rc %d (%s)", i, rc, err);
    ck_assert_msg(strstr(err, bad[i].err) != NULL, "case %zu: got \"%s\", want \"%s\"", i, err,
                  bad[i].err);
    ck_assert_ptr_eq(e, (struct prom_exposition *)copy);
    free(copy);
}
END_TEST

/* ---- limits --------------------------------------------------------------------------------- */

static void expect_limit(const char *text, struct prom_limits lim, const char *want)
{
    struct prom_exposition *e = NULL;
    char err[256];
    ck_assert_msg(prom_parse(text, strlen(text), &lim, &e, err, sizeof(err)) == ERR_TOO_BIG,
                  "parsed \"%s\" within limits", text);
    ck_assert_msg(strstr(err, want) != NULL, "got \"%s\", want \"%s\"", err, want);
    ck_assert_ptr_null(e);
}

START_TEST(test_prom_parse_limits)
{
    expect_limit("a 1\nb 2\n", (struct prom_limits){.max_body = 7},
                 "body of 8 bytes exceeds the limit of 7 bytes");
    expect_limit("a 1\nabcdefghi 1\n", (struct prom_limits){.max_line = 10},
                 "line 2, column 11: line longer than the limit of 10 bytes");
    expect_limit("# TYPE a gauge\n# TYPE b gauge\nc 1\nd 1\n",
                 (struct prom_limits){.max_series = 3},
                 "line 4, column 1: more than 3 metric families");
    expect_limit("a 1\na 1\na 1\na 1\n", (struct prom_limits){.max_series = 3},
                 "line 4, column 1: more than 3 samples");
    expect_limit("# HELP a x\n# HELP b y\n# HELP c z\n", (struct prom_limits){.max_series = 2},
                 "line 3, column 8: more than 2 metric families");
    expect_limit("a{x=\"1\",y=\"2\",z=\"3\"} 1", (struct prom_limits){.max_labels = 2},
                 "column 15: more than 2 labels");
    /* At the limits exactly, everything parses. */
    struct prom_exposition *e = NULL;
    static const char text[] = "a{x=\"1\",y=\"2\"} 1\nb 2";
    struct prom_limits lim = {
        .max_body = strlen(text), .max_line = 16, .max_series = 2, .max_labels = 2};
    ck_assert_int_eq(prom_parse(text, strlen(text), &lim, &e, NULL, 0), 0);
    prom_exposition_free(e);
    /* A tiny error buffer is truncated, still terminated. */
    char small[8];
    e = NULL;
    ck_assert_int_eq(prom_parse("foo", 3, NULL, &e, small, sizeof(small)), ERR_PARSE);
    ck_assert_str_eq(small, "line 1,");
}
END_TEST

/* PROM_DEFAULT_MAX_SERIES samples parse; one more is refused. */
START_TEST(test_prom_parse_large_input_bounds)
{
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_puts(&b, "# TYPE big gauge\n"), 0);
    for (unsigned i = 0; i < PROM_DEFAULT_MAX_SERIES; i++)
        ck_assert_int_eq(buf_printf(&b, "big{shard=\"%u\",zone=\"z%u\"} %u\n", i, i % 7, i), 0);
    struct prom_exposition *e = parse_ok(b.data, b.len);
    const struct prom_family *f = prom_exposition_family(e, "big");
    ck_assert_uint_eq(f->n_samples, PROM_DEFAULT_MAX_SERIES);
    ck_assert(prom_exposition_sample(e, "big", &L("shard", "99999"), 1)->value == 99999);
    double sum;
    ck_assert_uint_eq(prom_exposition_sum(e, "big", &L("zone", "z3"), 1, &sum), 14286);
    prom_exposition_free(e);
    ck_assert_int_eq(buf_puts(&b, "big{shard=\"x\"} 1\n"), 0);
    char err[128];
    e = NULL;
    ck_assert_int_eq(prom_parse(b.data, b.len, NULL, &e, err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "line 100002, column 1: more than 100000 samples"));
    buf_fini(&b);

    /* Many families: the name index grows and finds each one. */
    buf_init(&b, 0);
    for (unsigned i = 0; i < 20000; i++) ck_assert_int_eq(buf_printf(&b, "f%u %u\n", i, i), 0);
    e = parse_ok(b.data, b.len);
    ck_assert_uint_eq(e->n_families, 20000);
    ck_assert(prom_exposition_sample(e, "f12345", NULL, 0)->value == 12345);
    ck_assert_ptr_null(prom_exposition_family(e, "f20000"));
    prom_exposition_free(e);
    buf_fini(&b);
}
END_TEST

/* ---- round trip over the engine metric contract ---------------------------------------------- */

START_TEST(test_prom_round_trip_engine_contract)
{
    static const char *const model[] = {METRIC_LABEL_MODEL_NAME};
    static const char *const model_reason[] = {METRIC_LABEL_MODEL_NAME,
                                               METRIC_LABEL_FINISHED_REASON};
    static const double ttft_bounds[] = {METRIC_BUCKETS_TIME_TO_FIRST_TOKEN};
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *running, *requests, *ttft;
    ck_assert_int_eq(prom_registry_add(r,
                                       &(struct prom_desc){.type = PROM_GAUGE,
                                                           .name = METRIC_REQUESTS_RUNNING,
                                                           .help = METRIC_HELP_REQUESTS_RUNNING,
                                                           .labels = model,
                                                           .n_labels = 1},
                                       &running),
                     0);
    ck_assert_int_eq(prom_metric_alias(running, METRIC_VLLM_REQUESTS_RUNNING, NULL), 0);
    ck_assert_int_eq(prom_registry_add(r,
                                       &(struct prom_desc){.type = PROM_COUNTER,
                                                           .name = METRIC_REQUESTS,
                                                           .help = METRIC_HELP_REQUESTS,
                                                           .labels = model_reason,
                                                           .n_labels = 2},
                                       &requests),
                     0);
    ck_assert_int_eq(prom_metric_alias(requests, METRIC_VLLM_REQUESTS, NULL), 0);
    ck_assert_int_eq(prom_registry_add(r,
                                       &(struct prom_desc){.type = PROM_HISTOGRAM,
                                                           .name = METRIC_TIME_TO_FIRST_TOKEN,
                                                           .help = METRIC_HELP_TIME_TO_FIRST_TOKEN,
                                                           .labels = model,
                                                           .n_labels = 1,
                                                           .buckets = ttft_bounds,
                                                           .n_buckets = 22},
                                       &ttft),
                     0);
    ck_assert_int_eq(prom_metric_alias(ttft, METRIC_VLLM_TIME_TO_FIRST_TOKEN, NULL), 0);
    const char *model_name = "stories \"260K\"\\n"; /* escapes survive the round trip */
    struct prom_series *run_s, *stop_s, *len_s, *ttft_s;
    ck_assert_int_eq(prom_series_get(running, &model_name, 1, &run_s), 0);
    ck_assert_int_eq(prom_series_get(requests,
                                     (const char *const[]){model_name, METRIC_FINISHED_STOP}, 2,
                                     &stop_s),
                     0);
    ck_assert_int_eq(prom_series_get(requests,
                                     (const char *const[]){model_name, METRIC_FINISHED_LENGTH}, 2,
                                     &len_s),
                     0);
    ck_assert_int_eq(prom_series_get(ttft, &model_name, 1, &ttft_s), 0);
    prom_gauge_set(run_s, 3);
    prom_counter_inc(stop_s, 41);
    prom_counter_inc(len_s, 1);
    for (int i = 1; i <= 100; i++) prom_histogram_observe(ttft_s, i * 0.001); /* 1..100 ms */

    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(prom_registry_render(r, &b), 0);
    struct prom_exposition *e = parse_ok(b.data, b.len);
    const struct prom_label by_model = L(METRIC_LABEL_MODEL_NAME, model_name);
    for (int k = 0; k < 2; k++) {
        const char *name = k ? METRIC_VLLM_REQUESTS_RUNNING : METRIC_REQUESTS_RUNNING;
        const struct prom_family *f = prom_exposition_family(e, name);
        ck_assert(f && f->type == PROM_GAUGE);
        ck_assert_str_eq(f->help, METRIC_HELP_REQUESTS_RUNNING);
        ck_assert(prom_exposition_sample(e, name, &by_model, 1)->value == 3);
    }
    double total;
    ck_assert_uint_eq(prom_exposition_sum(e, METRIC_VLLM_REQUESTS, &by_model, 1, &total), 2);
    ck_assert(total == 42);
    const struct prom_label stop[] = {by_model, L(METRIC_LABEL_FINISHED_REASON, "stop")};
    ck_assert(prom_exposition_sample(e, METRIC_REQUESTS, stop, 2)->value == 41);

    struct prom_histogram h;
    ck_assert_int_eq(prom_histogram_get(e, METRIC_VLLM_TIME_TO_FIRST_TOKEN, &by_model, 1, &h), 0);
    ck_assert_uint_eq(h.n_buckets, 23);
    for (size_t i = 0; i < 22; i++) ck_assert(h.buckets[i].le == ttft_bounds[i]);
    ck_assert(h.count == 100);
    ck_assert_double_eq_tol(h.sum, 5.05, 1e-9);
    /* 50 of the 100 observations are <= 50 ms: the median is at the 0.04..0.06 bucket. */
    double p50 = prom_histogram_quantile(&h, 0.5);
    ck_assert_double_eq_tol(p50, 0.05, 1e-9);
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 1), 0.1, 1e-9);
    prom_histogram_fini(&h);
    prom_exposition_free(e);
    buf_fini(&b);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_histogram_quantile_edges)
{
    struct prom_bucket b[] = {{1, 0}, {2, 10}, {INFINITY, 10}};
    struct prom_histogram h = {.buckets = b, .n_buckets = 3};
    ck_assert(isnan(prom_histogram_quantile(&h, NAN)));
    ck_assert(prom_histogram_quantile(&h, -0.1) == -INFINITY);
    ck_assert(prom_histogram_quantile(&h, 1.1) == INFINITY);
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 0.5), 1.5, 1e-12);
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 1), 2, 1e-12);
    b[1].count = 0;
    b[2].count = 0;
    ck_assert(isnan(prom_histogram_quantile(&h, 0.5))); /* no observations */
    b[1].count = 10;
    b[2].count = 8; /* non-monotonic (a racing scrape): treated as 10 */
    ck_assert_double_eq_tol(prom_histogram_quantile(&h, 0.5), 1.5, 1e-12);
    b[2].le = 5; /* no +Inf bucket */
    ck_assert(isnan(prom_histogram_quantile(&h, 0.5)));
    struct prom_bucket neg[] = {{-1, 4}, {INFINITY, 8}};
    h = (struct prom_histogram){.buckets = neg, .n_buckets = 2};
    ck_assert(prom_histogram_quantile(&h, 0.25) == -1); /* first bucket with le <= 0 */
    prom_histogram_fini(NULL);
}
END_TEST

START_TEST(test_prom_exposition_free_null)
{
    prom_exposition_free(NULL);
    ck_assert_ptr_null(prom_exposition_family(NULL, "x"));
    ck_assert_ptr_null(prom_exposition_sample(NULL, "x", NULL, 0));
}
END_TEST

static void quiet_logs(void)
{
    log_setup("test", LOG_OFF, LOG_FORMAT_TEXT);
}

Suite *prom_parse_suite(void)
{
    Suite *s = suite_create("prom_parse");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, quiet_logs, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_prom_parse_real_world);
    tcase_add_test(tc, test_prom_parse_every_prefix);
    tcase_add_test(tc, test_prom_parse_line_endings_and_blanks);
    tcase_add_test(tc, test_prom_parse_values);
    tcase_add_test(tc, test_prom_parse_interleaved_family);
    tcase_add_loop_test(tc, test_prom_parse_rejects_malformed, 0,
                        (int)(sizeof(bad) / sizeof(bad[0])));
    tcase_add_test(tc, test_prom_parse_limits);
    tcase_add_test(tc, test_prom_parse_large_input_bounds);
    tcase_add_test(tc, test_prom_round_trip_engine_contract);
    tcase_add_test(tc, test_prom_histogram_quantile_edges);
    tcase_add_test(tc, test_prom_exposition_free_null);
    suite_add_tcase(s, tc);
    return s;
}
