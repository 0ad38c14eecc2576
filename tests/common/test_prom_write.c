/* Tests for the Prometheus registry and renderer (common/prom/prom_write.c): exact golden output,
 * escaping, float formatting, registration errors, aliases and concurrent updates. */
#include "common/prom/prom.h"

#include "common/err.h"
#include "common/log.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_label[] = {"model_name"};
static const char *const two_labels[] = {"model_name", "finished_reason"};

static void quiet_logs(void)
{
    /* Registration errors log a warning; keep the test output readable. */
    log_setup("test", LOG_OFF, LOG_FORMAT_TEXT);
}

static char *render(struct prom_registry *r)
{
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(prom_registry_render(r, &b), 0);
    return buf_steal(&b);
}

static struct prom_metric *add(struct prom_registry *r, struct prom_desc d)
{
    struct prom_metric *m = NULL;
    ck_assert_int_eq(prom_registry_add(r, &d, &m), 0);
    ck_assert_ptr_nonnull(m);
    return m;
}

static struct prom_series *series1(struct prom_metric *m, const char *v)
{
    struct prom_series *s = NULL;
    ck_assert_int_eq(prom_series_get(m, (const char *const[]){v}, 1, &s), 0);
    return s;
}

START_TEST(test_prom_registry_render_counter_gauge_golden)
{
    struct prom_registry *r = prom_registry_new();
    ck_assert_ptr_nonnull(r);
    struct prom_metric *c = add(r, (struct prom_desc){.type = PROM_COUNTER,
                                                      .name = "cinfer_requests_total",
                                                      .help = "Finished requests.",
                                                      .labels = two_labels,
                                                      .n_labels = 2});
    struct prom_metric *g =
        add(r, (struct prom_desc){
                   .type = PROM_GAUGE, .name = "cinfer_kv_cache_usage_ratio", .help = "KV usage."});
    struct prom_series *stop = NULL, *len = NULL, *gs = NULL;
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"m1", "stop"}, 2, &stop), 0);
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"m1", "length"}, 2, &len), 0);
    ck_assert_int_eq(prom_series_get(g, NULL, 0, &gs), 0);
    prom_counter_inc(stop, 3);
    prom_counter_inc(stop, 0.5);
    prom_counter_inc(len, 1);
    prom_gauge_set(gs, 0.25);
    prom_gauge_add(gs, 0.5);
    prom_gauge_add(gs, -0.125);
    ck_assert(prom_series_value(stop) == 3.5);
    ck_assert(prom_series_value(gs) == 0.625);
    char *text = render(r);
    ck_assert_str_eq(text, "# HELP cinfer_requests_total Finished requests.\n"
                           "# TYPE cinfer_requests_total counter\n"
                           "cinfer_requests_total{model_name=\"m1\",finished_reason=\"stop\"} 3.5\n"
                           "cinfer_requests_total{model_name=\"m1\",finished_reason=\"length\"} 1\n"
                           "# HELP cinfer_kv_cache_usage_ratio KV usage.\n"
                           "# TYPE cinfer_kv_cache_usage_ratio gauge\n"
                           "cinfer_kv_cache_usage_ratio 0.625\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_render_histogram_golden)
{
    static const double bounds[] = {0.1, 0.5, 1};
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *h = add(r, (struct prom_desc){.type = PROM_HISTOGRAM,
                                                      .name = "ttft_seconds",
                                                      .help = "TTFT.",
                                                      .labels = model_label,
                                                      .n_labels = 1,
                                                      .buckets = bounds,
                                                      .n_buckets = 3});
    struct prom_series *s = series1(h, "tiny");
    prom_histogram_observe(s, 0.05);
    prom_histogram_observe(s, 0.1); /* le is inclusive: lands in the 0.1 bucket */
    prom_histogram_observe(s, 0.7);
    prom_histogram_observe(s, 3);
    uint64_t count;
    double sum;
    prom_histogram_totals(s, &count, &sum);
    ck_assert_uint_eq(count, 4);
    ck_assert_double_eq_tol(sum, 3.85, 1e-12);
    char *text = render(r);
    ck_assert_str_eq(text, "# HELP ttft_seconds TTFT.\n"
                           "# TYPE ttft_seconds histogram\n"
                           "ttft_seconds_bucket{model_name=\"tiny\",le=\"0.1\"} 2\n"
                           "ttft_seconds_bucket{model_name=\"tiny\",le=\"0.5\"} 2\n"
                           "ttft_seconds_bucket{model_name=\"tiny\",le=\"1\"} 3\n"
                           "ttft_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 4\n"
                           "ttft_seconds_sum{model_name=\"tiny\"} 3.85\n"
                           "ttft_seconds_count{model_name=\"tiny\"} 4\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_render_histogram_unlabelled_and_nan)
{
    static const double bounds[] = {1, 2,
                                    INFINITY}; /* a final +Inf bound is accepted and implied */
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *h = add(
        r,
        (struct prom_desc){.type = PROM_HISTOGRAM, .name = "h", .buckets = bounds, .n_buckets = 3});
    struct prom_series *s = NULL;
    ck_assert_int_eq(prom_series_get(h, NULL, 0, &s), 0);
    prom_histogram_observe(s, -5); /* below every bound: first bucket */
    prom_histogram_observe(s, NAN);
    char *text = render(r);
    ck_assert_str_eq(text, "# TYPE h histogram\n"
                           "h_bucket{le=\"1\"} 1\n"
                           "h_bucket{le=\"2\"} 1\n"
                           "h_bucket{le=\"+Inf\"} 2\n"
                           "h_sum NaN\n"
                           "h_count 2\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_render_escapes)
{
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *g = add(r, (struct prom_desc){.type = PROM_GAUGE,
                                                      .name = "esc",
                                                      .help = "a \\ b \"q\"\nline2",
                                                      .labels = model_label,
                                                      .n_labels = 1});
    prom_gauge_set(series1(g, "C:\\dir \"x\"\nnext"), 1);
    prom_gauge_set(series1(g, "ünïcode ✓"), 2);
    char *text = render(r);
    ck_assert_str_eq(text, "# HELP esc a \\\\ b \"q\"\\nline2\n"
                           "# TYPE esc gauge\n"
                           "esc{model_name=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"
                           "esc{model_name=\"ünïcode ✓\"} 2\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_metric_alias_renders_both_names)
{
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *g = add(r, (struct prom_desc){.type = PROM_GAUGE,
                                                      .name = "cinfer_requests_running",
                                                      .help = "Running.",
                                                      .labels = model_label,
                                                      .n_labels = 1});
    ck_assert_int_eq(prom_metric_alias(g, "vllm:num_requests_running", NULL), 0);
    ck_assert_int_eq(prom_metric_alias(g, "other_running", ""), 0); /* "" = no HELP line */
    prom_gauge_set(series1(g, "m"), 7);
    char *text = render(r);
    ck_assert_str_eq(text, "# HELP cinfer_requests_running Running.\n"
                           "# TYPE cinfer_requests_running gauge\n"
                           "cinfer_requests_running{model_name=\"m\"} 7\n"
                           "# HELP vllm:num_requests_running Running.\n"
                           "# TYPE vllm:num_requests_running gauge\n"
                           "vllm:num_requests_running{model_name=\"m\"} 7\n"
                           "# TYPE other_running gauge\n"
                           "other_running{model_name=\"m\"} 7\n");
    free(text);
    ck_assert_int_eq(prom_metric_alias(g, "vllm:num_requests_running", NULL), ERR_EXISTS);
    ck_assert_int_eq(prom_metric_alias(g, "cinfer_requests_running", NULL), ERR_EXISTS);
    ck_assert_int_eq(prom_metric_alias(g, "bad name", NULL), ERR_INVAL);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_render_metric_without_series)
{
    struct prom_registry *r = prom_registry_new();
    add(r, (struct prom_desc){.type = PROM_COUNTER, .name = "none_total", .help = "Nothing yet."});
    char *text = render(r);
    ck_assert_str_eq(text, "# HELP none_total Nothing yet.\n# TYPE none_total counter\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_add_rejects_invalid)
{
    static const double ok_bounds[] = {1, 2};
    static const double unsorted[] = {2, 1};
    static const double dup[] = {1, 1};
    static const double with_nan[] = {1, NAN};
    static const double only_inf[] = {INFINITY};
    static const char *const colon_label[] = {"a:b"};
    static const char *const dup_labels[] = {"a", "a"};
    static const char *const reserved[] = {"__x"};
    static const char *const le_label[] = {"le"};
    static const char *const digit_label[] = {"1a"};
    static const char *const null_label[] = {NULL};
    const struct {
        struct prom_desc d;
        int rc;
    } cases[] = {
        {{.type = PROM_COUNTER, .name = "1abc"}, ERR_INVAL},
        {{.type = PROM_COUNTER, .name = "cr_total", .help = "a\rb"}, ERR_INVAL},
        {{.type = PROM_COUNTER, .name = ""}, ERR_INVAL},
        {{.type = PROM_COUNTER, .name = NULL}, ERR_INVAL},
        {{.type = PROM_COUNTER, .name = "a-b"}, ERR_INVAL},
        {{.type = PROM_UNTYPED, .name = "u"}, ERR_INVAL},
        {{.type = PROM_SUMMARY, .name = "s"}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = colon_label, .n_labels = 1}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = dup_labels, .n_labels = 2}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = reserved, .n_labels = 1}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = digit_label, .n_labels = 1}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = null_label, .n_labels = 1}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .labels = NULL, .n_labels = 1}, ERR_INVAL},
        {{.type = PROM_GAUGE, .name = "g", .buckets = ok_bounds, .n_buckets = 2}, ERR_INVAL},
        {{.type = PROM_HISTOGRAM,
          .name = "h",
          .labels = le_label,
          .n_labels = 1,
          .buckets = ok_bounds,
          .n_buckets = 2},
         ERR_INVAL},
        {{.type = PROM_HISTOGRAM, .name = "h"}, ERR_INVAL},
        {{.type = PROM_HISTOGRAM, .name = "h", .buckets = unsorted, .n_buckets = 2}, ERR_INVAL},
        {{.type = PROM_HISTOGRAM, .name = "h", .buckets = dup, .n_buckets = 2}, ERR_INVAL},
        {{.type = PROM_HISTOGRAM, .name = "h", .buckets = with_nan, .n_buckets = 2}, ERR_INVAL},
        {{.type = PROM_HISTOGRAM, .name = "h", .buckets = only_inf, .n_buckets = 1}, ERR_INVAL},
        /* Clashes with what is registered below. */
        {{.type = PROM_GAUGE, .name = "taken"}, ERR_EXISTS},
        {{.type = PROM_COUNTER, .name = "hist_count"}, ERR_EXISTS},
        {{.type = PROM_GAUGE, .name = "hist_bucket"}, ERR_EXISTS},
        {{.type = PROM_HISTOGRAM, .name = "taken", .buckets = ok_bounds, .n_buckets = 2},
         ERR_EXISTS},
        {{.type = PROM_HISTOGRAM, .name = "gauge_x", .buckets = ok_bounds, .n_buckets = 2},
         ERR_EXISTS}, /* would own gauge_x_sum */
    };
    struct prom_registry *r = prom_registry_new();
    add(r, (struct prom_desc){.type = PROM_GAUGE, .name = "taken"});
    add(r, (struct prom_desc){.type = PROM_GAUGE, .name = "gauge_x_sum"});
    add(r, (struct prom_desc){
               .type = PROM_HISTOGRAM, .name = "hist", .buckets = ok_bounds, .n_buckets = 2});
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct prom_metric *m = (struct prom_metric *)&cases; /* must stay untouched */
        ck_assert_msg(prom_registry_add(r, &cases[i].d, &m) == cases[i].rc, "case %zu", i);
        ck_assert_ptr_eq(m, (struct prom_metric *)&cases);
    }
    char *text = render(r); /* nothing half-registered shows up */
    ck_assert_str_eq(text, "# TYPE taken gauge\n# TYPE gauge_x_sum gauge\n# TYPE hist histogram\n");
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_series_get_same_handle_and_arity)
{
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *c =
        add(r, (struct prom_desc){
                   .type = PROM_COUNTER, .name = "c_total", .labels = two_labels, .n_labels = 2});
    struct prom_series *a = NULL, *b = NULL, *d = NULL;
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"x", "y"}, 2, &a), 0);
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"x", "y"}, 2, &b), 0);
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"x", "z"}, 2, &d), 0);
    ck_assert_ptr_eq(a, b);
    ck_assert_ptr_ne(a, d);
    struct prom_series *untouched = NULL;
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"x"}, 1, &untouched), ERR_INVAL);
    ck_assert_int_eq(prom_series_get(c, NULL, 0, &untouched), ERR_INVAL);
    ck_assert_int_eq(prom_series_get(c, (const char *const[]){"x", NULL}, 2, &untouched),
                     ERR_INVAL);
    ck_assert_ptr_null(untouched);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_double_fmt_round_trips)
{
    char out[PROM_DOUBLE_MAX];
    ck_assert_str_eq(prom_double_fmt(0.1, out), "0.1");
    ck_assert_str_eq(prom_double_fmt(1, out), "1");
    ck_assert_str_eq(prom_double_fmt(-2.5, out), "-2.5");
    ck_assert_str_eq(prom_double_fmt(0.1 + 0.2, out), "0.30000000000000004");
    ck_assert_str_eq(prom_double_fmt(1e21, out), "1e+21");
    ck_assert_str_eq(prom_double_fmt(123456789012, out), "123456789012");
    ck_assert_str_eq(prom_double_fmt(-7, out), "-7");
    ck_assert_str_eq(prom_double_fmt(0, out), "0");
    ck_assert_str_eq(prom_double_fmt(-0.0, out), "-0");
    ck_assert_str_eq(prom_double_fmt(999999999999999, out), "999999999999999");
    ck_assert_str_eq(prom_double_fmt(1e15, out), "1e+15");
    ck_assert_str_eq(prom_double_fmt(NAN, out), "NaN");
    ck_assert_str_eq(prom_double_fmt(INFINITY, out), "+Inf");
    ck_assert_str_eq(prom_double_fmt(-INFINITY, out), "-Inf");
    const double vals[] = {5e-324,  1.7976931348623157e308, -0.0,         2.2250738585072014e-308,
                           1.0 / 3, 9007199254740993.0,     6.02214076e23};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        prom_double_fmt(vals[i], out);
        ck_assert_msg(strtod(out, NULL) == vals[i], "%s", out);
        ck_assert(signbit(strtod(out, NULL)) == signbit(vals[i]));
    }
}
END_TEST

START_TEST(test_prom_name_validation)
{
    ck_assert(prom_metric_name_valid("vllm:num_requests_running"));
    ck_assert(prom_metric_name_valid("_a1"));
    ck_assert(prom_metric_name_valid(":x"));
    ck_assert(!prom_metric_name_valid("1x"));
    ck_assert(!prom_metric_name_valid("a b"));
    ck_assert(!prom_metric_name_valid("é"));
    ck_assert(!prom_metric_name_valid(""));
    ck_assert(prom_label_name_valid("model_name"));
    ck_assert(!prom_label_name_valid("a:b"));
    ck_assert(!prom_label_name_valid("9"));
    ck_assert(!prom_label_name_valid(NULL));
    ck_assert_str_eq(prom_type_str(PROM_HISTOGRAM), "histogram");
    ck_assert_str_eq(prom_type_str(PROM_UNTYPED), "untyped");
}
END_TEST

START_TEST(test_prom_registry_render_too_big)
{
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *g =
        add(r, (struct prom_desc){
                   .type = PROM_GAUGE, .name = "g", .help = "A gauge with some help text."});
    struct prom_series *s = NULL;
    ck_assert_int_eq(prom_series_get(g, NULL, 0, &s), 0);
    struct buf b;
    buf_init(&b, 16);
    ck_assert_int_eq(prom_registry_render(r, &b), ERR_TOO_BIG);
    ck_assert_uint_le(b.len, 16);
    buf_fini(&b);
    prom_registry_free(r);
}
END_TEST

#define THREADS 4
#define ITERS   20000

static void *hammer(void *arg)
{
    struct prom_series **s = arg;
    for (int i = 0; i < ITERS; i++) {
        prom_counter_inc(s[0], 1);
        prom_gauge_add(s[1], 1);
        prom_histogram_observe(s[2], (i % 3) * 0.5);
    }
    return NULL;
}

/* Updates from several threads while another renders: no lost updates, no torn output (checked
 * under the sanitizer build; TSan is not part of `make asan`). */
START_TEST(test_prom_registry_concurrent_updates_and_render)
{
    static const double bounds[] = {0.25, 0.75};
    struct prom_registry *r = prom_registry_new();
    struct prom_metric *c = add(r, (struct prom_desc){.type = PROM_COUNTER, .name = "c_total"});
    struct prom_metric *g = add(r, (struct prom_desc){.type = PROM_GAUGE, .name = "g"});
    struct prom_metric *h = add(
        r,
        (struct prom_desc){.type = PROM_HISTOGRAM, .name = "h", .buckets = bounds, .n_buckets = 2});
    struct prom_series *s[3];
    ck_assert_int_eq(prom_series_get(c, NULL, 0, &s[0]), 0);
    ck_assert_int_eq(prom_series_get(g, NULL, 0, &s[1]), 0);
    ck_assert_int_eq(prom_series_get(h, NULL, 0, &s[2]), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, s), 0);
    for (int i = 0; i < 50; i++) free(render(r));
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    ck_assert(prom_series_value(s[0]) == THREADS * ITERS);
    ck_assert(prom_series_value(s[1]) == THREADS * ITERS);
    uint64_t count;
    prom_histogram_totals(s[2], &count, NULL);
    ck_assert_uint_eq(count, THREADS * ITERS);
    char *text = render(r);
    char want[512];
    int third = ITERS / 3 + (ITERS % 3 > 0); /* i % 3 == 0 -> 0, == 1 -> 0.5, == 2 -> 1 */
    int second = ITERS / 3 + (ITERS % 3 > 1);
    snprintf(want, sizeof(want),
             "h_bucket{le=\"0.25\"} %d\nh_bucket{le=\"0.75\"} %d\nh_bucket{le=\"+Inf\"} %d\n",
             THREADS * third, THREADS * (third + second), THREADS * ITERS);
    ck_assert_ptr_nonnull(strstr(text, want));
    free(text);
    prom_registry_free(r);
}
END_TEST

START_TEST(test_prom_registry_free_null)
{
    prom_registry_free(NULL);
}
END_TEST

Suite *prom_write_suite(void)
{
    Suite *s = suite_create("prom_write");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, quiet_logs, NULL);
    tcase_add_test(tc, test_prom_registry_render_counter_gauge_golden);
    tcase_add_test(tc, test_prom_registry_render_histogram_golden);
    tcase_add_test(tc, test_prom_registry_render_histogram_unlabelled_and_nan);
    tcase_add_test(tc, test_prom_registry_render_escapes);
    tcase_add_test(tc, test_prom_metric_alias_renders_both_names);
    tcase_add_test(tc, test_prom_registry_render_metric_without_series);
    tcase_add_test(tc, test_prom_registry_add_rejects_invalid);
    tcase_add_test(tc, test_prom_series_get_same_handle_and_arity);
    tcase_add_test(tc, test_prom_double_fmt_round_trips);
    tcase_add_test(tc, test_prom_name_validation);
    tcase_add_test(tc, test_prom_registry_render_too_big);
    tcase_add_test(tc, test_prom_registry_concurrent_updates_and_render);
    tcase_add_test(tc, test_prom_registry_free_null);
    suite_add_tcase(s, tc);
    return s;
}
