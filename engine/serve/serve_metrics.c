/* The engine's Prometheus series (issue #4): one table names every metric of common/metric_names.h
 * in registration order; serve_metrics_new registers it, looks every series up once, and the update
 * calls touch only those handles (one registry lock per series, no lookups, no allocation).
 * Rendering, HTTP and the process metrics belong to the caller. */
#include "engine/serve/serve_metrics.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "common/prom/prom.h"
#include "engine/sched/spec.h"

#include <stdlib.h>

/* Slots of struct serve_metrics: one series handle per metric, except requests_total, which has one
 * per finish reason at SM_REQUESTS + enum serve_finish. */
enum sm_slot {
    SM_RUNNING = 0,
    SM_WAITING,
    SM_KV_USAGE,
    SM_PREFILL_WAITING,
    SM_PREFIX_QUERIES,
    SM_PREFIX_HITS,
    SM_PROMPT_TOKENS,
    SM_GENERATION_TOKENS,
    SM_PREEMPTIONS,
    SM_REQUESTS,
    SM_TTFT = SM_REQUESTS + SERVE_FINISH_COUNT,
    SM_ITL,
    SM_E2E,
    SM_QUEUE_TIME,
    SM_OFF_HIT_TOKENS, /* two slots each for the SM_BY_TIER metrics: host, disk */
    SM_OFF_STORED = SM_OFF_HIT_TOKENS + 2,
    SM_OFF_EVICTED = SM_OFF_STORED + 2,
    SM_OFF_BYTES = SM_OFF_EVICTED + 2,
    SM_OFF_BLOCKS = SM_OFF_BYTES + 2,
    SM_OFF_CORRUPT = SM_OFF_BLOCKS + 2,
    SM_OFF_WRITE_ERRS,
    SM_OFF_DROPPED,
    SM_OFF_PREFETCH_WAITS,
    SM_OFF_PREFETCH_WAIT_S,
    SM_OFF_PREFETCH_UNUSED,
    SM_N_CORE, /* the slots above are registered by serve_metrics_new; the rest with speculation */
    SM_SPEC_DRAFTS = SM_N_CORE,
    SM_SPEC_DRAFT_TOKENS,
    SM_SPEC_ACCEPTED,
    SM_SPEC_PER_POS,                                     /* one per position */
    SM_SPEC_SKIPPED = SM_SPEC_PER_POS + SPEC_MAX_TOKENS, /* one per enum spec_skip */
    SM_SPEC_POOL_HITS = SM_SPEC_SKIPPED + SPEC_SKIP_COUNT,
    SM_N_SLOTS,
};

_Static_assert(SERVE_FINISH_ABORT + 1 == SERVE_FINISH_COUNT, "SERVE_FINISH_COUNT is stale");

struct serve_metrics {
    struct prom_series *s[SM_N_SLOTS]; /* borrowed from the registry; valid until it is freed */
    int spec_positions;                /* per-position series registered (0: no speculation) */
};

/* finished_reason label values, indexed by enum serve_finish. */
static const char *const sm_finish_label[SERVE_FINISH_COUNT] = {
    [SERVE_FINISH_STOP] = METRIC_FINISHED_STOP,
    [SERVE_FINISH_LENGTH] = METRIC_FINISHED_LENGTH,
    [SERVE_FINISH_ABORT] = METRIC_FINISHED_ABORT,
};

static const double sm_ttft_bounds[] = {METRIC_BUCKETS_TIME_TO_FIRST_TOKEN};
static const double sm_itl_bounds[] = {METRIC_BUCKETS_INTER_TOKEN_LATENCY};
static const double sm_e2e_bounds[] = {METRIC_BUCKETS_E2E_REQUEST_LATENCY};
static const double sm_queue_bounds[] = {METRIC_BUCKETS_REQUEST_QUEUE_TIME};

/* position label values of the per-position speculation counter */
static const char *const sm_position_label[SPEC_MAX_TOKENS] = {
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
};
_Static_assert(SPEC_MAX_TOKENS == 16, "sm_position_label is stale");

/* One metric to register. With label2 the second label is label2 and the slots
 * slot..slot+n_values-1 receive one series per value (values2[i]). */
struct sm_def {
    enum prom_type type;
    const char *name;
    const char *vllm; /* NULL: vLLM has no such metric */
    const char *help;
    const double *buckets;
    size_t n_buckets;
    enum sm_slot slot;
    const char *label2;
    const char *const *values2;
    size_t n_values2;
};

#define SM_BY_REASON                                                                               \
    .label2 = METRIC_LABEL_FINISHED_REASON, .values2 = sm_finish_label,                            \
    .n_values2 = SERVE_FINISH_COUNT

#define SM_BY_TIER .label2 = METRIC_LABEL_TIER, .values2 = sm_tier_label, .n_values2 = 2

static const char *const sm_tier_label[2] = {METRIC_TIER_HOST, METRIC_TIER_DISK};

#define SM_HIST(b) .buckets = (b), .n_buckets = ARRAY_LEN(b)

/* Registration (= rendering) order: gauges, counters, histograms, as in ARCHITECTURE.md. */
static const struct sm_def sm_defs[] = {
    {PROM_GAUGE, METRIC_REQUESTS_RUNNING, METRIC_VLLM_REQUESTS_RUNNING,
     METRIC_HELP_REQUESTS_RUNNING, .slot = SM_RUNNING},
    {PROM_GAUGE, METRIC_REQUESTS_WAITING, METRIC_VLLM_REQUESTS_WAITING,
     METRIC_HELP_REQUESTS_WAITING, .slot = SM_WAITING},
    {PROM_GAUGE, METRIC_KV_CACHE_USAGE, METRIC_VLLM_KV_CACHE_USAGE, METRIC_HELP_KV_CACHE_USAGE,
     .slot = SM_KV_USAGE},
    {PROM_GAUGE, METRIC_PREFILL_TOKENS_WAITING, NULL, METRIC_HELP_PREFILL_TOKENS_WAITING,
     .slot = SM_PREFILL_WAITING},
    {PROM_COUNTER, METRIC_PREFIX_CACHE_QUERIES, METRIC_VLLM_PREFIX_CACHE_QUERIES,
     METRIC_HELP_PREFIX_CACHE_QUERIES, .slot = SM_PREFIX_QUERIES},
    {PROM_COUNTER, METRIC_PREFIX_CACHE_HITS, METRIC_VLLM_PREFIX_CACHE_HITS,
     METRIC_HELP_PREFIX_CACHE_HITS, .slot = SM_PREFIX_HITS},
    {PROM_COUNTER, METRIC_PROMPT_TOKENS, METRIC_VLLM_PROMPT_TOKENS, METRIC_HELP_PROMPT_TOKENS,
     .slot = SM_PROMPT_TOKENS},
    {PROM_COUNTER, METRIC_GENERATION_TOKENS, METRIC_VLLM_GENERATION_TOKENS,
     METRIC_HELP_GENERATION_TOKENS, .slot = SM_GENERATION_TOKENS},
    {PROM_COUNTER, METRIC_PREEMPTIONS, METRIC_VLLM_PREEMPTIONS, METRIC_HELP_PREEMPTIONS,
     .slot = SM_PREEMPTIONS},
    {PROM_COUNTER, METRIC_REQUESTS, METRIC_VLLM_REQUESTS, METRIC_HELP_REQUESTS, .slot = SM_REQUESTS,
     SM_BY_REASON},
    {PROM_HISTOGRAM, METRIC_TIME_TO_FIRST_TOKEN, METRIC_VLLM_TIME_TO_FIRST_TOKEN,
     METRIC_HELP_TIME_TO_FIRST_TOKEN, SM_HIST(sm_ttft_bounds), .slot = SM_TTFT},
    {PROM_HISTOGRAM, METRIC_INTER_TOKEN_LATENCY, METRIC_VLLM_INTER_TOKEN_LATENCY,
     METRIC_HELP_INTER_TOKEN_LATENCY, SM_HIST(sm_itl_bounds), .slot = SM_ITL},
    {PROM_HISTOGRAM, METRIC_E2E_REQUEST_LATENCY, METRIC_VLLM_E2E_REQUEST_LATENCY,
     METRIC_HELP_E2E_REQUEST_LATENCY, SM_HIST(sm_e2e_bounds), .slot = SM_E2E},
    {PROM_HISTOGRAM, METRIC_REQUEST_QUEUE_TIME, METRIC_VLLM_REQUEST_QUEUE_TIME,
     METRIC_HELP_REQUEST_QUEUE_TIME, SM_HIST(sm_queue_bounds), .slot = SM_QUEUE_TIME},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_HIT_TOKENS, NULL, METRIC_HELP_KV_OFFLOAD_HIT_TOKENS,
     .slot = SM_OFF_HIT_TOKENS, SM_BY_TIER},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_STORED, NULL, METRIC_HELP_KV_OFFLOAD_STORED,
     .slot = SM_OFF_STORED, SM_BY_TIER},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_EVICTED, NULL, METRIC_HELP_KV_OFFLOAD_EVICTED,
     .slot = SM_OFF_EVICTED, SM_BY_TIER},
    {PROM_GAUGE, METRIC_KV_OFFLOAD_BYTES, NULL, METRIC_HELP_KV_OFFLOAD_BYTES, .slot = SM_OFF_BYTES,
     SM_BY_TIER},
    {PROM_GAUGE, METRIC_KV_OFFLOAD_BLOCKS, NULL, METRIC_HELP_KV_OFFLOAD_BLOCKS,
     .slot = SM_OFF_BLOCKS, SM_BY_TIER},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_CORRUPT, NULL, METRIC_HELP_KV_OFFLOAD_CORRUPT,
     .slot = SM_OFF_CORRUPT},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_WRITE_ERRS, NULL, METRIC_HELP_KV_OFFLOAD_WRITE_ERRS,
     .slot = SM_OFF_WRITE_ERRS},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_DROPPED, NULL, METRIC_HELP_KV_OFFLOAD_DROPPED,
     .slot = SM_OFF_DROPPED},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_PREFETCH_WAITS, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_WAITS,
     .slot = SM_OFF_PREFETCH_WAITS},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_PREFETCH_WAIT_S, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_WAIT_S,
     .slot = SM_OFF_PREFETCH_WAIT_S},
    {PROM_COUNTER, METRIC_KV_OFFLOAD_PREFETCH_UNUSED, NULL, METRIC_HELP_KV_OFFLOAD_PREFETCH_UNUSED,
     .slot = SM_OFF_PREFETCH_UNUSED},
};

/* Speculative decoding's counters (serve_metrics_enable_spec); the per-position one gets as many
 * positions as the server proposes tokens at most. */
static const struct sm_def sm_spec_defs[] = {
    {PROM_COUNTER, METRIC_SPEC_DRAFTS, METRIC_VLLM_SPEC_DRAFTS, METRIC_HELP_SPEC_DRAFTS,
     .slot = SM_SPEC_DRAFTS},
    {PROM_COUNTER, METRIC_SPEC_DRAFT_TOKENS, METRIC_VLLM_SPEC_DRAFT_TOKENS,
     METRIC_HELP_SPEC_DRAFT_TOKENS, .slot = SM_SPEC_DRAFT_TOKENS},
    {PROM_COUNTER, METRIC_SPEC_ACCEPTED, METRIC_VLLM_SPEC_ACCEPTED, METRIC_HELP_SPEC_ACCEPTED,
     .slot = SM_SPEC_ACCEPTED},
    {PROM_COUNTER, METRIC_SPEC_ACCEPTED_PER_POS, METRIC_VLLM_SPEC_ACCEPTED_PER_POS,
     METRIC_HELP_SPEC_ACCEPTED_PER_POS, .slot = SM_SPEC_PER_POS, .label2 = METRIC_LABEL_POSITION,
     .values2 = sm_position_label, .n_values2 = SPEC_MAX_TOKENS},
    {PROM_COUNTER, METRIC_SPEC_SKIPPED, NULL, METRIC_HELP_SPEC_SKIPPED, .slot = SM_SPEC_SKIPPED,
     .label2 = METRIC_LABEL_REASON, .n_values2 = SPEC_SKIP_COUNT},
    {PROM_COUNTER, METRIC_SPEC_POOL_HITS, NULL, METRIC_HELP_SPEC_POOL_HITS,
     .slot = SM_SPEC_POOL_HITS},
};

/* A name clash is ERR_EXISTS in common/prom; this module's contract reports it as ERR_INVAL (the
 * caller passed a registry that already holds engine metrics). */
static int sm_rc(int rc)
{
    return rc == ERR_EXISTS ? ERR_INVAL : rc;
}

/* Registers one metric (and its vLLM alias) and stores its series in m->s. */
static int sm_register(struct serve_metrics *m, struct prom_registry *reg, const struct sm_def *d,
                       const char *model, bool vllm_compat, size_t n_values2)
{
    const char *const labels[] = {METRIC_LABEL_MODEL_NAME, d->label2};
    const struct prom_desc desc = {
        .type = d->type,
        .name = d->name,
        .help = d->help,
        .labels = labels,
        .n_labels = d->label2 ? 2 : 1,
        .buckets = d->buckets,
        .n_buckets = d->n_buckets,
    };
    struct prom_metric *pm = NULL;
    const char *failed = d->name;
    int rc = prom_registry_add(reg, &desc, &pm);
    if (!rc && vllm_compat && d->vllm) {
        failed = d->vllm;
        rc = prom_metric_alias(pm, d->vllm, NULL);
    }
    if (!rc && !d->label2) {
        rc = prom_series_get(pm, (const char *const[]){model}, 1, &m->s[d->slot]);
    }
    /* Every value's series exists from the start, so a dashboard's rate() sees them all at 0. */
    for (size_t f = 0; !rc && d->label2 && f < n_values2; f++) {
        const char *v = d->values2 ? d->values2[f] : spec_skip_name((enum spec_skip)f);
        rc = prom_series_get(pm, (const char *const[]){model, v}, 2, &m->s[d->slot + f]);
    }
    if (rc) {
        log_warn("serve_metrics: cannot register metric", LOG_S("name", failed),
                 LOG_S("err", err_str(rc)));
    }
    return sm_rc(rc);
}

int serve_metrics_new(struct prom_registry *reg, const char *model_name, bool vllm_compat,
                      struct serve_metrics **out)
{
    ASSERT(reg && out);
    if (!model_name || !*model_name) {
        log_warn("serve_metrics: model name is empty (the model_name label needs a value)");
        return ERR_INVAL;
    }
    int rc = ERR_NOMEM;
    struct serve_metrics *m = calloc(1, sizeof(*m));
    if (!m) goto out;
    for (size_t i = 0; i < ARRAY_LEN(sm_defs); i++) {
        const struct sm_def *d = &sm_defs[i];
        if ((rc = sm_register(m, reg, d, model_name, vllm_compat, d->n_values2)) != 0) goto out;
    }
    for (size_t i = 0; i < SM_N_CORE; i++) ASSERT(m->s[i]); /* the table covers every slot */
    *out = m;
    m = NULL;
    rc = 0;
out:
    free(m);
    return rc;
}

void serve_metrics_free(struct serve_metrics *m)
{
    free(m);
}

/* Adds a non-negative count; a zero count skips the registry lock. */
static void sm_count(struct prom_series *s, long n)
{
    ASSERT(n >= 0);
    if (n > 0) prom_counter_inc(s, (double)n);
}

void serve_metrics_set_load(struct serve_metrics *m, int running, int waiting, double kv_usage)
{
    if (!m) return;
    ASSERT(running >= 0 && waiting >= 0);
    /* used/total can round past 1, and an empty pool gives 0/0: keep the gauge a fraction. */
    if (!(kv_usage >= 0.0)) kv_usage = 0.0; /* NaN too */
    if (kv_usage > 1.0) kv_usage = 1.0;
    prom_gauge_set(m->s[SM_RUNNING], running);
    prom_gauge_set(m->s[SM_WAITING], waiting);
    prom_gauge_set(m->s[SM_KV_USAGE], kv_usage);
}

void serve_metrics_set_prefill_waiting(struct serve_metrics *m, long tokens)
{
    if (!m) return;
    ASSERT(tokens >= 0);
    prom_gauge_set(m->s[SM_PREFILL_WAITING], (double)tokens);
}

void serve_metrics_add_prefix(struct serve_metrics *m, long queried_tokens, long hit_tokens)
{
    if (!m) return;
    ASSERT(hit_tokens <= queried_tokens);
    sm_count(m->s[SM_PREFIX_QUERIES], queried_tokens);
    sm_count(m->s[SM_PREFIX_HITS], hit_tokens);
}

void serve_metrics_update_offload(struct serve_metrics *m, const struct serve_metrics_offload *o)
{
    if (!m) return;
    for (int t = 0; t < 2; t++) {
        sm_count(m->s[SM_OFF_HIT_TOKENS + t], o->hit_tokens[t]);
        sm_count(m->s[SM_OFF_STORED + t], o->stored[t]);
        sm_count(m->s[SM_OFF_EVICTED + t], o->evicted[t]);
        prom_gauge_set(m->s[SM_OFF_BYTES + t], o->bytes[t]);
        prom_gauge_set(m->s[SM_OFF_BLOCKS + t], o->blocks[t]);
    }
    sm_count(m->s[SM_OFF_CORRUPT], o->corrupt);
    sm_count(m->s[SM_OFF_WRITE_ERRS], o->write_errors);
    sm_count(m->s[SM_OFF_DROPPED], o->dropped);
    sm_count(m->s[SM_OFF_PREFETCH_WAITS], o->prefetch_waits);
    sm_count(m->s[SM_OFF_PREFETCH_UNUSED], o->prefetch_unused);
    ASSERT(o->prefetch_wait_s >= 0);
    if (o->prefetch_wait_s > 0) prom_counter_inc(m->s[SM_OFF_PREFETCH_WAIT_S], o->prefetch_wait_s);
}

void serve_metrics_add_tokens(struct serve_metrics *m, long prompt_tokens, long generated_tokens)
{
    if (!m) return;
    sm_count(m->s[SM_PROMPT_TOKENS], prompt_tokens);
    sm_count(m->s[SM_GENERATION_TOKENS], generated_tokens);
}

void serve_metrics_add_preemptions(struct serve_metrics *m, long n)
{
    if (!m) return;
    sm_count(m->s[SM_PREEMPTIONS], n);
}

void serve_metrics_observe_ttft(struct serve_metrics *m, double seconds)
{
    if (m) prom_histogram_observe(m->s[SM_TTFT], seconds);
}

void serve_metrics_observe_itl(struct serve_metrics *m, double seconds)
{
    if (m) prom_histogram_observe(m->s[SM_ITL], seconds);
}

void serve_metrics_observe_queue_time(struct serve_metrics *m, double seconds)
{
    if (m) prom_histogram_observe(m->s[SM_QUEUE_TIME], seconds);
}

void serve_metrics_request_done(struct serve_metrics *m, enum serve_finish f, double e2e_seconds)
{
    if (!m) return;
    ASSERT((unsigned)f < SERVE_FINISH_COUNT);
    prom_counter_inc(m->s[SM_REQUESTS + f], 1.0);
    prom_histogram_observe(m->s[SM_E2E], e2e_seconds);
}

int serve_metrics_enable_spec(struct serve_metrics *m, struct prom_registry *reg,
                              const char *model_name, bool vllm_compat, int positions)
{
    ASSERT(m && reg && m->spec_positions == 0 && positions >= 1 && positions <= SPEC_MAX_TOKENS);
    for (size_t i = 0; i < ARRAY_LEN(sm_spec_defs); i++) {
        const struct sm_def *d = &sm_spec_defs[i];
        size_t n = d->slot == SM_SPEC_PER_POS ? (size_t)positions : d->n_values2;
        int rc = sm_register(m, reg, d, model_name, vllm_compat, n);
        if (rc) return rc;
    }
    m->spec_positions = positions;
    return 0;
}

void serve_metrics_add_spec(struct serve_metrics *m, const struct spec_stats *now,
                            const struct spec_stats *before)
{
    if (!m || !m->spec_positions) return;
    sm_count(m->s[SM_SPEC_DRAFTS], (long)(now->drafts - before->drafts));
    sm_count(m->s[SM_SPEC_DRAFT_TOKENS], (long)(now->draft_tokens - before->draft_tokens));
    sm_count(m->s[SM_SPEC_ACCEPTED], (long)(now->accepted - before->accepted));
    for (int i = 0; i < m->spec_positions; i++)
        sm_count(m->s[SM_SPEC_PER_POS + i],
                 (long)(now->accepted_per_pos[i] - before->accepted_per_pos[i]));
    for (int i = 0; i < SPEC_SKIP_COUNT; i++)
        sm_count(m->s[SM_SPEC_SKIPPED + i], (long)(now->skipped[i] - before->skipped[i]));
    sm_count(m->s[SM_SPEC_POOL_HITS], (long)(now->pool_hits - before->pool_hits));
}
