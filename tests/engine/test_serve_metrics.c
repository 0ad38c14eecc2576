/* Tests for engine/serve/serve_metrics.c: every assertion reads the metrics the way a scraper does, by
 * rendering the registry and parsing the text with common/prom's parser (names, labels, HELP and
 * TYPE, vLLM twins, counter sums, cumulative histogram buckets), plus the registration failures,
 * the clamps, the asserted contracts and updates racing a renderer. */
#include "engine/serve/serve_metrics.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "common/prom/prom.h"
#include "engine/sched/spec.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "stories260K"

static const double ttft_bounds[] = {METRIC_BUCKETS_TIME_TO_FIRST_TOKEN};
static const double itl_bounds[] = {METRIC_BUCKETS_INTER_TOKEN_LATENCY};
static const double e2e_bounds[] = {METRIC_BUCKETS_E2E_REQUEST_LATENCY};
static const double queue_bounds[] = {METRIC_BUCKETS_REQUEST_QUEUE_TIME};

/* The contract of common/metric_names.h, one row per metric. */
static const struct contract {
    const char *name;
    const char *vllm;
    const char *help;
    enum prom_type type;
    const double *bounds;
    size_t n_bounds;
} contract[] = {
    {METRIC_REQUESTS_RUNNING, METRIC_VLLM_REQUESTS_RUNNING, METRIC_HELP_REQUESTS_RUNNING,
     PROM_GAUGE, NULL, 0},
    {METRIC_REQUESTS_WAITING, METRIC_VLLM_REQUESTS_WAITING, METRIC_HELP_REQUESTS_WAITING,
     PROM_GAUGE, NULL, 0},
    {METRIC_KV_CACHE_USAGE, METRIC_VLLM_KV_CACHE_USAGE, METRIC_HELP_KV_CACHE_USAGE, PROM_GAUGE,
     NULL, 0},
    {METRIC_PREFILL_TOKENS_WAITING, NULL, METRIC_HELP_PREFILL_TOKENS_WAITING, PROM_GAUGE, NULL, 0},
    {METRIC_PREFIX_CACHE_QUERIES, METRIC_VLLM_PREFIX_CACHE_QUERIES,
     METRIC_HELP_PREFIX_CACHE_QUERIES, PROM_COUNTER, NULL, 0},
    {METRIC_PREFIX_CACHE_HITS, METRIC_VLLM_PREFIX_CACHE_HITS, METRIC_HELP_PREFIX_CACHE_HITS,
     PROM_COUNTER, NULL, 0},
    {METRIC_PROMPT_TOKENS, METRIC_VLLM_PROMPT_TOKENS, METRIC_HELP_PROMPT_TOKENS, PROM_COUNTER, NULL,
     0},
    {METRIC_GENERATION_TOKENS, METRIC_VLLM_GENERATION_TOKENS, METRIC_HELP_GENERATION_TOKENS,
     PROM_COUNTER, NULL, 0},
    {METRIC_PREEMPTIONS, METRIC_VLLM_PREEMPTIONS, METRIC_HELP_PREEMPTIONS, PROM_COUNTER, NULL, 0},
    {METRIC_REQUESTS, METRIC_VLLM_REQUESTS, METRIC_HELP_REQUESTS, PROM_COUNTER, NULL, 0},
    {METRIC_TIME_TO_FIRST_TOKEN, METRIC_VLLM_TIME_TO_FIRST_TOKEN, METRIC_HELP_TIME_TO_FIRST_TOKEN,
     PROM_HISTOGRAM, ttft_bounds, sizeof(ttft_bounds) / sizeof(ttft_bounds[0])},
    {METRIC_INTER_TOKEN_LATENCY, METRIC_VLLM_INTER_TOKEN_LATENCY, METRIC_HELP_INTER_TOKEN_LATENCY,
     PROM_HISTOGRAM, itl_bounds, sizeof(itl_bounds) / sizeof(itl_bounds[0])},
    {METRIC_E2E_REQUEST_LATENCY, METRIC_VLLM_E2E_REQUEST_LATENCY, METRIC_HELP_E2E_REQUEST_LATENCY,
     PROM_HISTOGRAM, e2e_bounds, sizeof(e2e_bounds) / sizeof(e2e_bounds[0])},
    {METRIC_REQUEST_QUEUE_TIME, METRIC_VLLM_REQUEST_QUEUE_TIME, METRIC_HELP_REQUEST_QUEUE_TIME,
     PROM_HISTOGRAM, queue_bounds, sizeof(queue_bounds) / sizeof(queue_bounds[0])},
    /* The offload tiers': no vLLM twins; the first five have one series per tier. */
    {METRIC_KV_OFFLOAD_HIT_TOKENS, NULL, METRIC_HELP_KV_OFFLOAD_HIT_TOKENS, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_STORED, NULL, METRIC_HELP_KV_OFFLOAD_STORED, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_EVICTED, NULL, METRIC_HELP_KV_OFFLOAD_EVICTED, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_BYTES, NULL, METRIC_HELP_KV_OFFLOAD_BYTES, PROM_GAUGE, NULL, 0},
    {METRIC_KV_OFFLOAD_BLOCKS, NULL, METRIC_HELP_KV_OFFLOAD_BLOCKS, PROM_GAUGE, NULL, 0},
    {METRIC_KV_OFFLOAD_CORRUPT, NULL, METRIC_HELP_KV_OFFLOAD_CORRUPT, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_WRITE_ERRS, NULL, METRIC_HELP_KV_OFFLOAD_WRITE_ERRS, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_DROPPED, NULL, METRIC_HELP_KV_OFFLOAD_DROPPED, PROM_COUNTER, NULL, 0},
    {METRIC_KV_OFFLOAD_PREFETCH_WAITS, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_WAITS, PROM_COUNTER,
     NULL, 0},
    {METRIC_KV_OFFLOAD_PREFETCH_WAIT_S, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_WAIT_S, PROM_COUNTER,
     NULL, 0},
    {METRIC_KV_OFFLOAD_PREFETCH_UNUSED, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_UNUSED, PROM_COUNTER,
     NULL, 0},
};
#define N_CONTRACT (sizeof(contract) / sizeof(contract[0]))
#define N_OFFLOAD  11                           /* the last rows, without vLLM twins */
#define N_TWINS    (N_CONTRACT - 1 - N_OFFLOAD) /* all others but the waiting prefill tokens */

/* The contract rows with a series per tier (host, disk). */
static bool by_tier(const char *name)
{
    return strcmp(name, METRIC_KV_OFFLOAD_HIT_TOKENS) == 0 ||
           strcmp(name, METRIC_KV_OFFLOAD_STORED) == 0 ||
           strcmp(name, METRIC_KV_OFFLOAD_EVICTED) == 0 ||
           strcmp(name, METRIC_KV_OFFLOAD_BYTES) == 0 ||
           strcmp(name, METRIC_KV_OFFLOAD_BLOCKS) == 0;
}

static const struct prom_label model_match[] = {{METRIC_LABEL_MODEL_NAME, MODEL}};

static void quiet_logs(void)
{
    log_setup("test", LOG_OFF, LOG_FORMAT_TEXT);
}

/* Renders `reg` into *text (new, caller frees; may be NULL) and returns its parse. */
static struct prom_exposition *scrape_text(struct prom_registry *reg, char **text)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    ck_assert_int_eq(prom_registry_render(reg, &b), 0);
    struct prom_exposition *e = NULL;
    char err[256] = "";
    int rc = prom_parse(buf_cstr(&b), b.len, NULL, &e, err, sizeof(err));
    ck_assert_msg(rc == 0, "rendered metrics do not parse: %s", err);
    if (text) {
        *text = buf_steal(&b);
        ck_assert_ptr_nonnull(*text);
    }
    buf_fini(&b);
    return e;
}

static struct prom_exposition *scrape(struct prom_registry *reg)
{
    return scrape_text(reg, NULL);
}

/* The value of sample `name` for MODEL (plus finished_reason `reason` when not NULL). */
static double sample_value(const struct prom_exposition *e, const char *name, const char *reason)
{
    const struct prom_label match[] = {{METRIC_LABEL_MODEL_NAME, MODEL},
                                       {METRIC_LABEL_FINISHED_REASON, reason}};
    const struct prom_sample *s = prom_exposition_sample(e, name, match, reason ? 2 : 1);
    ck_assert_msg(s != NULL, "no sample %s{model_name=\"%s\"%s%s}", name, MODEL,
                  reason ? ",finished_reason=" : "", reason ? reason : "");
    return s->value;
}

static const char *label_of(const struct prom_sample *s, const char *name)
{
    for (size_t i = 0; i < s->n_labels; i++)
        if (strcmp(s->labels[i].name, name) == 0) return s->labels[i].value;
    return NULL;
}

struct fixture {
    struct prom_registry *reg;
    struct serve_metrics *m;
};

static struct fixture fixture_new(bool vllm_compat)
{
    quiet_logs();
    struct fixture f = {prom_registry_new(), NULL};
    ck_assert_ptr_nonnull(f.reg);
    ck_assert_int_eq(serve_metrics_new(f.reg, MODEL, vllm_compat, &f.m), 0);
    ck_assert_ptr_nonnull(f.m);
    return f;
}

static void fixture_free(struct fixture *f)
{
    serve_metrics_free(f->m);
    prom_registry_free(f->reg);
}

/* Exercises every update call once. */
static void update_all(struct serve_metrics *m)
{
    serve_metrics_set_load(m, 3, 5, 0.625);
    serve_metrics_set_prefill_waiting(m, 1234);
    serve_metrics_add_prefix(m, 40, 16);
    serve_metrics_add_tokens(m, 40, 7);
    serve_metrics_add_preemptions(m, 2);
    serve_metrics_observe_ttft(m, 0.042);
    serve_metrics_observe_itl(m, 0.011);
    serve_metrics_observe_itl(m, 0.3);
    serve_metrics_observe_queue_time(m, 0.0005);
    serve_metrics_request_done(m, SERVE_FINISH_STOP, 1.25);
    serve_metrics_request_done(m, SERVE_FINISH_LENGTH, 9.0);
}

START_TEST(test_new_registers_every_native_name)
{
    struct fixture f = fixture_new(false);
    char *text = NULL;
    struct prom_exposition *e = scrape_text(f.reg, &text);
    ck_assert_uint_eq(e->n_families, N_CONTRACT);
    for (size_t i = 0; i < N_CONTRACT; i++) {
        const struct contract *c = &contract[i];
        const struct prom_family *fam = prom_exposition_family(e, c->name);
        ck_assert_msg(fam != NULL, "%s missing", c->name);
        ck_assert_msg(fam->has_type && fam->type == c->type, "%s: wrong TYPE", c->name);
        ck_assert_str_eq(fam->help, c->help);
        ck_assert_uint_gt(fam->n_samples, 0);
        for (size_t j = 0; j < fam->n_samples; j++) {
            const char *model = label_of(&fam->samples[j], METRIC_LABEL_MODEL_NAME);
            ck_assert_msg(model && strcmp(model, MODEL) == 0, "%s: sample %s without model_name",
                          c->name, fam->samples[j].name);
        }
        if (c->type == PROM_HISTOGRAM) {
            /* Every bound, +Inf, _sum and _count, all at 0 before any observation. */
            ck_assert_uint_eq(fam->n_samples, c->n_bounds + 3);
            struct prom_histogram h;
            ck_assert_int_eq(prom_histogram_get(e, c->name, model_match, 1, &h), 0);
            ck_assert_uint_eq(h.n_buckets, c->n_bounds + 1);
            ck_assert(h.count == 0 && h.sum == 0);
            prom_histogram_fini(&h);
        } else if (by_tier(c->name)) {
            ck_assert_uint_eq(fam->n_samples, 2);
            for (size_t j = 0; j < 2; j++) {
                const char *tier = label_of(&fam->samples[j], METRIC_LABEL_TIER);
                ck_assert_str_eq(tier, j ? METRIC_TIER_DISK : METRIC_TIER_HOST);
                ck_assert(fam->samples[j].value == 0);
            }
        } else if (strcmp(c->name, METRIC_REQUESTS) != 0) {
            ck_assert_uint_eq(fam->n_samples, 1);
            ck_assert(fam->samples[0].value == 0);
        }
    }
    ck_assert_msg(strstr(text, "vllm:") == NULL, "vllm_compat=false rendered a vLLM name");
    free(text);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

/* The value of tiered sample `name` for MODEL and `tier`. */
static double tier_value(const struct prom_exposition *e, const char *name, const char *tier)
{
    const struct prom_label match[] = {{METRIC_LABEL_MODEL_NAME, MODEL}, {METRIC_LABEL_TIER, tier}};
    const struct prom_sample *s = prom_exposition_sample(e, name, match, 2);
    ck_assert_msg(s != NULL, "no sample %s{tier=\"%s\"}", name, tier);
    return s->value;
}

START_TEST(test_offload_counters_and_gauges)
{
    struct fixture f = fixture_new(false);
    struct serve_metrics_offload o = {.hit_tokens = {32, 16},
                                      .stored = {4, 3},
                                      .evicted = {1, 0},
                                      .bytes = {4096, 3072},
                                      .blocks = {4, 3},
                                      .corrupt = 1,
                                      .write_errors = 2,
                                      .dropped = 5,
                                      .prefetch_waits = 3,
                                      .prefetch_wait_s = 0.25,
                                      .prefetch_unused = 7};
    serve_metrics_update_offload(f.m, &o);
    o.bytes[0] = 1024; /* gauges are set, counters add */
    serve_metrics_update_offload(f.m, &o);
    serve_metrics_update_offload(NULL, &o);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_HIT_TOKENS, METRIC_TIER_HOST) == 64);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_HIT_TOKENS, METRIC_TIER_DISK) == 32);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_STORED, METRIC_TIER_DISK) == 6);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_EVICTED, METRIC_TIER_HOST) == 2);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_BYTES, METRIC_TIER_HOST) == 1024);
    ck_assert(tier_value(e, METRIC_KV_OFFLOAD_BLOCKS, METRIC_TIER_DISK) == 3);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_CORRUPT, NULL) == 2);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_WRITE_ERRS, NULL) == 4);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_DROPPED, NULL) == 10);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_PREFETCH_WAITS, NULL) == 6);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_PREFETCH_WAIT_S, NULL) == 0.5);
    ck_assert(sample_value(e, METRIC_KV_OFFLOAD_PREFETCH_UNUSED, NULL) == 14);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

/* Compares two families sample by sample: same suffixes (_bucket, _sum, ...), labels and values. */
static void assert_twins(const struct prom_family *a, const struct prom_family *b)
{
    ck_assert_msg(b != NULL, "twin of %s missing", a->name);
    ck_assert_int_eq(a->type, b->type);
    ck_assert_str_eq(a->help, b->help);
    ck_assert_uint_eq(a->n_samples, b->n_samples);
    size_t la = strlen(a->name), lb = strlen(b->name);
    for (size_t i = 0; i < a->n_samples; i++) {
        const struct prom_sample *sa = &a->samples[i], *sb = &b->samples[i];
        ck_assert_str_eq(sa->name + la, sb->name + lb);
        ck_assert_uint_eq(sa->n_labels, sb->n_labels);
        for (size_t j = 0; j < sa->n_labels; j++) {
            ck_assert_str_eq(sa->labels[j].name, sb->labels[j].name);
            ck_assert_str_eq(sa->labels[j].value, sb->labels[j].value);
        }
        ck_assert_msg(sa->value == sb->value, "%s: %g != %s: %g", sa->name, sa->value, sb->name,
                      sb->value);
    }
}

START_TEST(test_new_vllm_twins_identical)
{
    struct fixture f = fixture_new(true);
    update_all(f.m);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert_uint_eq(e->n_families, N_CONTRACT + N_TWINS);
    for (size_t i = 0; i < N_CONTRACT; i++) {
        const struct prom_family *native = prom_exposition_family(e, contract[i].name);
        ck_assert_msg(native != NULL, "%s missing", contract[i].name);
        if (!contract[i].vllm) continue;
        assert_twins(native, prom_exposition_family(e, contract[i].vllm));
    }
    /* The twins carry the updates, not just zeros. */
    ck_assert(sample_value(e, METRIC_VLLM_KV_CACHE_USAGE, NULL) == 0.625);
    ck_assert(sample_value(e, METRIC_PREFILL_TOKENS_WAITING, NULL) == 1234);
    ck_assert(sample_value(e, METRIC_VLLM_PROMPT_TOKENS, NULL) == 40);
    ck_assert(sample_value(e, METRIC_VLLM_REQUESTS, METRIC_FINISHED_LENGTH) == 1);
    ck_assert(sample_value(e, METRIC_VLLM_INTER_TOKEN_LATENCY "_count", NULL) == 2);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

START_TEST(test_counters_accumulate)
{
    struct fixture f = fixture_new(true);
    serve_metrics_add_tokens(f.m, 12, 1);
    serve_metrics_add_tokens(f.m, 0, 1);
    serve_metrics_add_tokens(f.m, 30, 0);
    serve_metrics_add_prefix(f.m, 12, 0);
    serve_metrics_add_prefix(f.m, 30, 12);
    serve_metrics_add_prefix(f.m, 0, 0);
    serve_metrics_add_preemptions(f.m, 1);
    serve_metrics_add_preemptions(f.m, 0);
    serve_metrics_add_preemptions(f.m, 4);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_PROMPT_TOKENS, NULL) == 42);
    ck_assert(sample_value(e, METRIC_GENERATION_TOKENS, NULL) == 2);
    ck_assert(sample_value(e, METRIC_PREFIX_CACHE_QUERIES, NULL) == 42);
    ck_assert(sample_value(e, METRIC_PREFIX_CACHE_HITS, NULL) == 12);
    ck_assert(sample_value(e, METRIC_PREEMPTIONS, NULL) == 5);
    ck_assert(sample_value(e, METRIC_VLLM_PREEMPTIONS, NULL) == 5);
    prom_exposition_free(e);

    /* A second scrape sees the sums grow, never reset. */
    serve_metrics_add_tokens(f.m, 8, 3);
    e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_PROMPT_TOKENS, NULL) == 50);
    ck_assert(sample_value(e, METRIC_GENERATION_TOKENS, NULL) == 5);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

static void observe_e2e(struct serve_metrics *m, double v)
{
    serve_metrics_request_done(m, SERVE_FINISH_STOP, v);
}

static const struct hist_case {
    const char *name;
    void (*observe)(struct serve_metrics *m, double v);
    const double *bounds;
    size_t n_bounds;
} hist_cases[] = {
    {METRIC_TIME_TO_FIRST_TOKEN, serve_metrics_observe_ttft, ttft_bounds,
     sizeof(ttft_bounds) / sizeof(ttft_bounds[0])},
    {METRIC_INTER_TOKEN_LATENCY, serve_metrics_observe_itl, itl_bounds,
     sizeof(itl_bounds) / sizeof(itl_bounds[0])},
    {METRIC_E2E_REQUEST_LATENCY, observe_e2e, e2e_bounds,
     sizeof(e2e_bounds) / sizeof(e2e_bounds[0])},
    {METRIC_REQUEST_QUEUE_TIME, serve_metrics_observe_queue_time, queue_bounds,
     sizeof(queue_bounds) / sizeof(queue_bounds[0])},
};

/* For each histogram (the loop index): observations on a bound (le is <=, so it counts there), just
 * above a bound (the next bucket), 0, and past the last bound (+Inf only); every cumulative bucket,
 * _sum and _count checked against a direct count. */
START_TEST(test_histogram_buckets_inclusive)
{
    const struct hist_case *hc = &hist_cases[_i];
    struct fixture f = fixture_new(false);
    size_t k = hc->n_bounds / 2;
    const double obs[] = {
        0.0,
        hc->bounds[0],
        hc->bounds[k],
        hc->bounds[k],
        nextafter(hc->bounds[k], INFINITY),
        hc->bounds[hc->n_bounds - 1],
        hc->bounds[hc->n_bounds - 1] * 2,
    };
    double sum = 0;
    for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++) {
        hc->observe(f.m, obs[i]);
        sum += obs[i];
    }
    struct prom_exposition *e = scrape(f.reg);
    struct prom_histogram h;
    ck_assert_int_eq(prom_histogram_get(e, hc->name, model_match, 1, &h), 0);
    ck_assert_uint_eq(h.n_buckets, hc->n_bounds + 1);
    for (size_t b = 0; b < h.n_buckets; b++) {
        double le = b < hc->n_bounds ? hc->bounds[b] : INFINITY;
        double want = 0;
        for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++) want += obs[i] <= le;
        ck_assert_msg(h.buckets[b].le == le, "%s: bucket %zu has le %g, want %g", hc->name, b,
                      h.buckets[b].le, le);
        ck_assert_msg(h.buckets[b].count == want, "%s: le=%g counts %g, want %g", hc->name, le,
                      h.buckets[b].count, want);
    }
    ck_assert(h.count == sizeof(obs) / sizeof(obs[0]));
    ck_assert_double_eq_tol(h.sum, sum, 1e-9 * sum);
    /* The spot checks the loop implies, spelled out: a bound's own bucket counts it. */
    ck_assert(h.buckets[0].count == 2);     /* 0 and bounds[0] */
    ck_assert(h.buckets[k].count == 4);     /* ... and bounds[k] twice */
    ck_assert(h.buckets[k + 1].count == 5); /* ... and just above bounds[k] */
    ck_assert(h.buckets[hc->n_bounds - 1].count == 6);
    ck_assert(h.buckets[hc->n_bounds].count == 7);
    prom_histogram_fini(&h);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

START_TEST(test_request_done_counts_by_reason)
{
    struct fixture f = fixture_new(true);
    /* All three reasons exist at 0 before the first request, and no others. */
    struct prom_exposition *e = scrape(f.reg);
    const char *reasons[] = {METRIC_FINISHED_STOP, METRIC_FINISHED_LENGTH, METRIC_FINISHED_ABORT};
    for (size_t i = 0; i < 3; i++) ck_assert(sample_value(e, METRIC_REQUESTS, reasons[i]) == 0);
    ck_assert_uint_eq(prom_exposition_family(e, METRIC_REQUESTS)->n_samples, 3);
    ck_assert_uint_eq(prom_exposition_family(e, METRIC_VLLM_REQUESTS)->n_samples, 3);
    prom_exposition_free(e);

    serve_metrics_request_done(f.m, SERVE_FINISH_STOP, 0.4);
    serve_metrics_request_done(f.m, SERVE_FINISH_LENGTH, 2.0);
    serve_metrics_request_done(f.m, SERVE_FINISH_STOP, 0.6);
    e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_REQUESTS, METRIC_FINISHED_STOP) == 2);
    ck_assert(sample_value(e, METRIC_REQUESTS, METRIC_FINISHED_LENGTH) == 1);
    ck_assert(sample_value(e, METRIC_REQUESTS, METRIC_FINISHED_ABORT) == 0);
    ck_assert(sample_value(e, METRIC_VLLM_REQUESTS, METRIC_FINISHED_STOP) == 2);
    ck_assert_uint_eq(prom_exposition_family(e, METRIC_REQUESTS)->n_samples, 3);
    /* Each finished request is one e2e observation, whatever its reason. */
    ck_assert(sample_value(e, METRIC_E2E_REQUEST_LATENCY "_count", NULL) == 3);
    ck_assert_double_eq_tol(sample_value(e, METRIC_E2E_REQUEST_LATENCY "_sum", NULL), 3.0, 1e-12);
    serve_metrics_request_done(f.m, SERVE_FINISH_ABORT, 0.1);
    prom_exposition_free(e);
    e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_REQUESTS, METRIC_FINISHED_ABORT) == 1);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

START_TEST(test_set_load_gauges_and_kv_range)
{
    struct fixture f = fixture_new(true);
    static const struct {
        double in, want;
    } kv[] = {{0.375, 0.375}, {1.0, 1.0}, {0.0, 0.0}, {1.0000000002, 1.0},
              {7.5, 1.0},     {-0.25, 0}, {NAN, 0},   {INFINITY, 1.0}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
        serve_metrics_set_load(f.m, (int)i, 2 * (int)i + 1, kv[i].in);
        struct prom_exposition *e = scrape(f.reg);
        double got = sample_value(e, METRIC_KV_CACHE_USAGE, NULL);
        ck_assert_msg(got >= 0 && got <= 1, "kv usage %.17g outside 0..1 for input %.17g", got,
                      kv[i].in);
        ck_assert_msg(got == kv[i].want, "kv usage %.17g for input %.17g, want %.17g", got,
                      kv[i].in, kv[i].want);
        ck_assert(sample_value(e, METRIC_VLLM_KV_CACHE_USAGE, NULL) == got);
        ck_assert(sample_value(e, METRIC_REQUESTS_RUNNING, NULL) == (double)i);
        ck_assert(sample_value(e, METRIC_REQUESTS_WAITING, NULL) == 2.0 * (double)i + 1);
        ck_assert(sample_value(e, METRIC_VLLM_REQUESTS_WAITING, NULL) == 2.0 * (double)i + 1);
        prom_exposition_free(e);
    }
    fixture_free(&f);
}
END_TEST

static char *render(struct prom_registry *reg)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    ck_assert_int_eq(prom_registry_render(reg, &b), 0);
    char *s = buf_steal(&b);
    ck_assert_ptr_nonnull(s);
    return s;
}

START_TEST(test_new_twice_fails_cleanly)
{
    struct fixture f = fixture_new(true);
    update_all(f.m);
    char *before = render(f.reg);
    struct serve_metrics *sentinel = (struct serve_metrics *)&f, *second = sentinel;
    ck_assert_int_eq(serve_metrics_new(f.reg, MODEL, true, &second), ERR_INVAL);
    ck_assert_ptr_eq(second, sentinel); /* *out untouched */
    ck_assert_int_eq(serve_metrics_new(f.reg, "other-model", false, &second), ERR_INVAL);
    ck_assert_ptr_eq(second, sentinel);
    /* The registry is unchanged and the first handle still works. */
    char *after = render(f.reg);
    ck_assert_str_eq(before, after);
    serve_metrics_add_preemptions(f.m, 1);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_PREEMPTIONS, NULL) == 3);
    prom_exposition_free(e);
    free(before);
    free(after);
    fixture_free(&f);
}
END_TEST

/* Pre-registers one metric named `name` so that a later serve_metrics_new meets it. */
static struct prom_registry *registry_with(const char *name)
{
    struct prom_registry *reg = prom_registry_new();
    ck_assert_ptr_nonnull(reg);
    struct prom_metric *pm = NULL;
    ck_assert_int_eq(
        prom_registry_add(reg, &(struct prom_desc){.type = PROM_GAUGE, .name = name}, &pm), 0);
    return reg;
}

START_TEST(test_new_vllm_names_claimed_only_with_compat)
{
    quiet_logs();
    struct serve_metrics *m = NULL;
    /* Without vllm_compat the vLLM names stay free for someone else. */
    struct prom_registry *reg = registry_with(METRIC_VLLM_REQUESTS_RUNNING);
    ck_assert_int_eq(serve_metrics_new(reg, MODEL, false, &m), 0);
    serve_metrics_free(m);
    prom_registry_free(reg);
    /* With it, a taken vLLM name (or a histogram's _bucket name) is a clash. */
    m = NULL;
    reg = registry_with(METRIC_VLLM_REQUESTS_RUNNING);
    ck_assert_int_eq(serve_metrics_new(reg, MODEL, true, &m), ERR_INVAL);
    ck_assert_ptr_null(m);
    prom_registry_free(reg);
    reg = registry_with(METRIC_VLLM_REQUEST_QUEUE_TIME "_bucket");
    ck_assert_int_eq(serve_metrics_new(reg, MODEL, true, &m), ERR_INVAL);
    ck_assert_ptr_null(m);
    prom_registry_free(reg);
}
END_TEST

START_TEST(test_new_rejects_missing_model_name)
{
    quiet_logs();
    struct prom_registry *reg = prom_registry_new();
    ck_assert_ptr_nonnull(reg);
    struct serve_metrics *m = NULL;
    ck_assert_int_eq(serve_metrics_new(reg, NULL, true, &m), ERR_INVAL);
    ck_assert_int_eq(serve_metrics_new(reg, "", true, &m), ERR_INVAL);
    ck_assert_ptr_null(m);
    char *text = render(reg);
    ck_assert_str_eq(text, ""); /* nothing registered */
    free(text);
    prom_registry_free(reg);
}
END_TEST

START_TEST(test_new_model_name_escaped)
{
    quiet_logs();
    static const char model[] = "org/llama \"q4\" C:\\models\nv2 \xc3\xa9";
    struct prom_registry *reg = prom_registry_new();
    ck_assert_ptr_nonnull(reg);
    struct serve_metrics *m = NULL;
    ck_assert_int_eq(serve_metrics_new(reg, model, true, &m), 0);
    serve_metrics_request_done(m, SERVE_FINISH_ABORT, 0.5);
    struct prom_exposition *e = scrape(reg);
    const struct prom_label match[] = {{METRIC_LABEL_MODEL_NAME, model},
                                       {METRIC_LABEL_FINISHED_REASON, METRIC_FINISHED_ABORT}};
    const struct prom_sample *s = prom_exposition_sample(e, METRIC_VLLM_REQUESTS, match, 2);
    ck_assert_ptr_nonnull(s);
    ck_assert(s->value == 1);
    ck_assert_ptr_nonnull(prom_exposition_sample(e, METRIC_KV_CACHE_USAGE, match, 1));
    prom_exposition_free(e);
    serve_metrics_free(m);
    prom_registry_free(reg);
}
END_TEST

START_TEST(test_updates_null_handle_noop)
{
    serve_metrics_set_load(NULL, 1, 1, 0.5);
    serve_metrics_add_prefix(NULL, 2, 1);
    serve_metrics_add_tokens(NULL, 1, 1);
    serve_metrics_add_preemptions(NULL, 1);
    serve_metrics_observe_ttft(NULL, 0.1);
    serve_metrics_observe_itl(NULL, 0.1);
    serve_metrics_observe_queue_time(NULL, 0.1);
    serve_metrics_request_done(NULL, SERVE_FINISH_STOP, 0.1);
    serve_metrics_free(NULL);
    /* The other handle of the same process is untouched by all of the above. */
    struct fixture f = fixture_new(false);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_PROMPT_TOKENS, NULL) == 0);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

/* Programmer errors abort (ASSERT), they are not silently dropped. */
START_TEST(test_negative_count_aborts)
{
    struct fixture f = fixture_new(false);
    serve_metrics_add_tokens(f.m, -1, 0);
}
END_TEST

START_TEST(test_hits_above_queries_abort)
{
    struct fixture f = fixture_new(false);
    serve_metrics_add_prefix(f.m, 3, 4);
}
END_TEST

START_TEST(test_bad_finish_reason_aborts)
{
    struct fixture f = fixture_new(false);
    serve_metrics_request_done(f.m, (enum serve_finish)SERVE_FINISH_COUNT, 1.0);
}
END_TEST

/* The inference thread updates while the HTTP thread renders: every scrape parses, counters never
 * go backwards, and the final values are exact. */
#define RACE_ITERS 20000

static void *race_updater(void *arg)
{
    struct serve_metrics *m = arg;
    for (int i = 0; i < RACE_ITERS; i++) {
        serve_metrics_add_tokens(m, 1, 2);
        serve_metrics_observe_itl(m, 0.05);
        serve_metrics_set_load(m, i % 8, i % 3, (i % 101) / 100.0);
    }
    return NULL;
}

START_TEST(test_updates_race_with_render)
{
    struct fixture f = fixture_new(true);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, race_updater, f.m), 0);
    double last_prompt = 0, last_itl = 0;
    for (int i = 0; i < 50; i++) {
        struct prom_exposition *e = scrape(f.reg);
        double prompt = sample_value(e, METRIC_PROMPT_TOKENS, NULL);
        double itl = sample_value(e, METRIC_VLLM_INTER_TOKEN_LATENCY "_count", NULL);
        double kv = sample_value(e, METRIC_KV_CACHE_USAGE, NULL);
        ck_assert(prompt >= last_prompt && itl >= last_itl);
        ck_assert(kv >= 0 && kv <= 1);
        /* A render is one snapshot: both names show the same value. */
        ck_assert(sample_value(e, METRIC_VLLM_PROMPT_TOKENS, NULL) == prompt);
        last_prompt = prompt;
        last_itl = itl;
        prom_exposition_free(e);
    }
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    struct prom_exposition *e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_PROMPT_TOKENS, NULL) == RACE_ITERS);
    ck_assert(sample_value(e, METRIC_GENERATION_TOKENS, NULL) == 2.0 * RACE_ITERS);
    ck_assert(sample_value(e, METRIC_INTER_TOKEN_LATENCY "_count", NULL) == RACE_ITERS);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

/* Speculation's counters exist only after serve_metrics_enable_spec, with their vLLM twins, one
 * per-position series per proposal position and one skip series per reason; add_spec adds the
 * growth between two snapshots. */
START_TEST(test_spec_metrics_registered_and_counted)
{
    struct fixture f = fixture_new(true);
    struct spec_stats before = {0}, now = {0};
    serve_metrics_add_spec(f.m, &now, &before); /* not enabled: nothing */
    struct prom_exposition *e = scrape(f.reg);
    ck_assert_ptr_null(prom_exposition_family(e, METRIC_SPEC_DRAFTS));
    prom_exposition_free(e);
    ck_assert_int_eq(serve_metrics_enable_spec(f.m, f.reg, MODEL, true, 3), 0);
    now.drafts = 4;
    now.draft_tokens = 12;
    now.accepted = 7;
    now.accepted_per_pos[0] = 4;
    now.accepted_per_pos[1] = 2;
    now.accepted_per_pos[2] = 1;
    now.skipped[SPEC_SKIP_COST] = 5;
    now.pool_hits = 3;
    serve_metrics_add_spec(f.m, &now, &before);
    before = now;
    now.accepted = 9;
    now.accepted_per_pos[0] = 6;
    serve_metrics_add_spec(f.m, &now, &before);
    e = scrape(f.reg);
    ck_assert(sample_value(e, METRIC_SPEC_DRAFTS, NULL) == 4);
    ck_assert(sample_value(e, METRIC_VLLM_SPEC_DRAFT_TOKENS, NULL) == 12);
    ck_assert(sample_value(e, METRIC_SPEC_ACCEPTED, NULL) == 9);
    ck_assert(sample_value(e, METRIC_VLLM_SPEC_ACCEPTED, NULL) == 9);
    const struct prom_family *pos = prom_exposition_family(e, METRIC_SPEC_ACCEPTED_PER_POS);
    ck_assert_ptr_nonnull(pos);
    ck_assert_uint_eq(pos->n_samples, 3);
    const struct prom_label p0[] = {{METRIC_LABEL_MODEL_NAME, MODEL}, {METRIC_LABEL_POSITION, "0"}};
    ck_assert(prom_exposition_sample(e, METRIC_VLLM_SPEC_ACCEPTED_PER_POS, p0, 2)->value == 6);
    const struct prom_label cost[] = {{METRIC_LABEL_MODEL_NAME, MODEL},
                                      {METRIC_LABEL_REASON, "cost"}};
    ck_assert(prom_exposition_sample(e, METRIC_SPEC_SKIPPED, cost, 2)->value == 5);
    ck_assert_uint_eq(prom_exposition_family(e, METRIC_SPEC_SKIPPED)->n_samples, SPEC_SKIP_COUNT);
    ck_assert(sample_value(e, METRIC_SPEC_POOL_HITS, NULL) == 3);
    prom_exposition_free(e);
    fixture_free(&f);
}
END_TEST

Suite *serve_metrics_suite(void)
{
    Suite *s = suite_create("serve_metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_new_registers_every_native_name);
    tcase_add_test(tc, test_offload_counters_and_gauges);
    tcase_add_test(tc, test_new_vllm_twins_identical);
    tcase_add_test(tc, test_counters_accumulate);
    tcase_add_loop_test(tc, test_histogram_buckets_inclusive, 0,
                        (int)(sizeof(hist_cases) / sizeof(hist_cases[0])));
    tcase_add_test(tc, test_request_done_counts_by_reason);
    tcase_add_test(tc, test_set_load_gauges_and_kv_range);
    tcase_add_test(tc, test_new_twice_fails_cleanly);
    tcase_add_test(tc, test_new_vllm_names_claimed_only_with_compat);
    tcase_add_test(tc, test_new_rejects_missing_model_name);
    tcase_add_test(tc, test_new_model_name_escaped);
    tcase_add_test(tc, test_updates_null_handle_noop);
    tcase_add_test(tc, test_updates_race_with_render);
    tcase_add_test(tc, test_spec_metrics_registered_and_counted);
    tcase_add_test_raise_signal(tc, test_negative_count_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_hits_above_queries_abort, SIGABRT);
    tcase_add_test_raise_signal(tc, test_bad_finish_reason_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
