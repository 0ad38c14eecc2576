/* Prometheus metric registry (see common/prom/prom.h): registration, series, updates. Rendering is in
 * prom_render.c, name checks and float formatting in prom_text.c. Not a client library: no
 * summaries, no collectors, no series removal. One mutex per registry guards every metric and series
 * in it. */
#include "common/prom/prom_priv.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- registration ---------------------------------------------------------------------------- */

struct prom_registry *prom_registry_new(void)
{
    struct prom_registry *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

static void strv_free(char **v, size_t n)
{
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void series_free(struct prom_series *s, size_t n_labels)
{
    if (!s) return;
    strv_free(s->values, n_labels);
    free(s->buckets);
    free(s);
}

static void metric_free(struct prom_metric *m)
{
    if (!m) return;
    free(m->names.name);
    free(m->names.help);
    for (struct prom_alias *a = m->names.next, *next; a; a = next) {
        next = a->next;
        free(a->name);
        free(a->help);
        free(a);
    }
    for (struct prom_series *s = m->series, *next; s; s = next) {
        next = s->next;
        series_free(s, m->n_labels);
    }
    strv_free(m->labels, m->n_labels);
    free(m->bounds);
    free(m->le_text);
    free(m);
}

void prom_registry_free(struct prom_registry *r)
{
    if (!r) return;
    for (struct prom_metric *m = r->head, *next; m; m = next) {
        next = m->next;
        metric_free(m);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* True when `s` is exactly `base` followed by `suffix`. */
static bool is_suffixed(const char *s, const char *base, const char *suffix)
{
    size_t nb = strlen(base);
    return strncmp(s, base, nb) == 0 && strcmp(s + nb, suffix) == 0;
}

/* True when family names `a` and `b` would expose a common sample name (a histogram also owns
 * <name>_bucket, <name>_sum and <name>_count). */
static bool names_clash(const char *a, enum prom_type ta, const char *b, enum prom_type tb)
{
    static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};
    if (strcmp(a, b) == 0) return true;
    for (size_t i = 0; i < ARRAY_LEN(hist_suffixes); i++) {
        if (ta == PROM_HISTOGRAM && is_suffixed(b, a, hist_suffixes[i])) return true;
        if (tb == PROM_HISTOGRAM && is_suffixed(a, b, hist_suffixes[i])) return true;
    }
    return false;
}

/* Caller holds r->mu. */
static bool name_taken(const struct prom_registry *r, const char *name, enum prom_type type)
{
    for (const struct prom_metric *m = r->head; m; m = m->next)
        for (const struct prom_alias *a = &m->names; a; a = a->next)
            if (names_clash(a->name, m->type, name, type)) return true;
    return false;
}

/* Returns a copy of `s` (NULL stays NULL, "" becomes NULL: no HELP line); *ok is false on
 * ENOMEM. */
static char *help_dup(const char *s, bool *ok)
{
    *ok = true;
    if (!s || !*s) return NULL;
    char *d = strdup(s);
    if (!d) *ok = false;
    return d;
}

static int desc_check_labels(const struct prom_desc *d)
{
    if (d->n_labels > PROM_MAX_LABELS || (d->n_labels && !d->labels)) return ERR_INVAL;
    for (size_t i = 0; i < d->n_labels; i++) {
        const char *l = d->labels[i];
        if (!prom_label_name_valid(l) || strncmp(l, "__", 2) == 0) return ERR_INVAL;
        if (d->type == PROM_HISTOGRAM && strcmp(l, "le") == 0) return ERR_INVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(l, d->labels[j]) == 0) return ERR_INVAL;
    }
    return 0;
}

/* Returns the number of finite bounds of a valid histogram description, or ERR_INVAL. */
static int desc_check_buckets(const struct prom_desc *d)
{
    if (d->type != PROM_HISTOGRAM) return d->n_buckets == 0 ? 0 : ERR_INVAL;
    size_t n = d->n_buckets;
    if (!d->buckets) return ERR_INVAL;
    if (n && d->buckets[n - 1] == INFINITY) n--; /* the +Inf bucket is always rendered */
    if (n == 0 || n > PROM_MAX_BUCKETS) return ERR_INVAL;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(d->buckets[i])) return ERR_INVAL;
        if (i && !(d->buckets[i] > d->buckets[i - 1])) return ERR_INVAL;
    }
    return (int)n;
}

static int desc_check(const struct prom_desc *d)
{
    if (d->type != PROM_COUNTER && d->type != PROM_GAUGE && d->type != PROM_HISTOGRAM) {
        log_warn("prom: unsupported metric type", LOG_S("name", d->name), LOG_I("type", d->type));
        return ERR_INVAL;
    }
    if (!prom_metric_name_valid(d->name)) {
        log_warn("prom: invalid metric name", LOG_S("name", d->name));
        return ERR_INVAL;
    }
    if (d->help && strchr(d->help, '\r')) {
        log_warn("prom: HELP text contains a carriage return", LOG_S("name", d->name));
        return ERR_INVAL;
    }
    if (desc_check_labels(d)) {
        log_warn("prom: invalid label names (want [a-zA-Z_][a-zA-Z0-9_]*, unique, not __*, not le "
                 "on a histogram)",
                 LOG_S("name", d->name), LOG_I("n_labels", d->n_labels));
        return ERR_INVAL;
    }
    int n = desc_check_buckets(d);
    if (n < 0) {
        log_warn("prom: invalid histogram buckets (want 1..64 finite, strictly increasing bounds)",
                 LOG_S("name", d->name), LOG_I("n_buckets", d->n_buckets));
        return ERR_INVAL;
    }
    return n;
}

static struct prom_metric *metric_new(const struct prom_desc *d, size_t n_bounds)
{
    struct prom_metric *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->type = d->type;
    bool ok;
    m->names.name = strdup(d->name);
    m->names.help = help_dup(d->help, &ok);
    if (!m->names.name || !ok) goto fail;
    if (d->n_labels) {
        m->labels = calloc(d->n_labels, sizeof(*m->labels));
        if (!m->labels) goto fail;
        m->n_labels = d->n_labels;
        for (size_t i = 0; i < d->n_labels; i++)
            if (!(m->labels[i] = strdup(d->labels[i]))) goto fail;
    }
    if (n_bounds) {
        m->bounds = malloc(n_bounds * sizeof(*m->bounds));
        m->le_text = malloc(n_bounds * sizeof(*m->le_text));
        if (!m->bounds || !m->le_text) goto fail;
        memcpy(m->bounds, d->buckets, n_bounds * sizeof(*m->bounds));
        for (size_t i = 0; i < n_bounds; i++) prom_double_fmt(m->bounds[i], m->le_text[i]);
        m->n_bounds = n_bounds;
    }
    return m;
fail:
    metric_free(m);
    return NULL;
}

int prom_registry_add(struct prom_registry *r, const struct prom_desc *d, struct prom_metric **out)
{
    ASSERT(r && d && out);
    int n_bounds = desc_check(d);
    if (n_bounds < 0) return n_bounds;
    struct prom_metric *m = metric_new(d, (size_t)n_bounds);
    if (!m) return ERR_NOMEM;
    m->reg = r;
    pthread_mutex_lock(&r->mu);
    bool taken = name_taken(r, d->name, d->type);
    if (!taken) {
        if (r->tail)
            r->tail->next = m;
        else
            r->head = m;
        r->tail = m;
    }
    pthread_mutex_unlock(&r->mu);
    if (taken) {
        log_warn("prom: metric name already registered", LOG_S("name", d->name));
        metric_free(m);
        return ERR_EXISTS;
    }
    *out = m;
    return 0;
}

int prom_metric_alias(struct prom_metric *m, const char *name, const char *help)
{
    ASSERT(m);
    if (!prom_metric_name_valid(name) || (help && strchr(help, '\r'))) {
        log_warn("prom: invalid metric alias name or HELP text", LOG_S("name", name));
        return ERR_INVAL;
    }
    struct prom_alias *a = calloc(1, sizeof(*a));
    if (!a) return ERR_NOMEM;
    bool ok;
    a->name = strdup(name);
    a->help = help_dup(help ? help : m->names.help, &ok);
    if (!a->name || !ok) {
        free(a->name);
        free(a->help);
        free(a);
        return ERR_NOMEM;
    }
    struct prom_registry *r = m->reg;
    pthread_mutex_lock(&r->mu);
    bool taken = name_taken(r, name, m->type);
    if (!taken) {
        struct prom_alias **tail = &m->names.next;
        while (*tail) tail = &(*tail)->next;
        *tail = a;
    }
    pthread_mutex_unlock(&r->mu);
    if (taken) {
        log_warn("prom: metric alias name already registered", LOG_S("name", name));
        free(a->name);
        free(a->help);
        free(a);
        return ERR_EXISTS;
    }
    return 0;
}

/* Caller holds the registry mutex. */
static struct prom_series *series_find(const struct prom_metric *m, const char *const *values)
{
    for (struct prom_series *s = m->series; s; s = s->next) {
        size_t i = 0;
        while (i < m->n_labels && strcmp(s->values[i], values[i]) == 0) i++;
        if (i == m->n_labels) return s;
    }
    return NULL;
}

static struct prom_series *series_new(struct prom_metric *m, const char *const *values)
{
    struct prom_series *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->metric = m;
    if (m->n_labels) {
        s->values = calloc(m->n_labels, sizeof(*s->values));
        if (!s->values) goto fail;
        for (size_t i = 0; i < m->n_labels; i++)
            if (!(s->values[i] = strdup(values[i]))) goto fail;
    }
    if (m->type == PROM_HISTOGRAM) {
        s->buckets = calloc(m->n_bounds + 1, sizeof(*s->buckets));
        if (!s->buckets) goto fail;
    }
    return s;
fail:
    series_free(s, m->n_labels);
    return NULL;
}

int prom_series_get(struct prom_metric *m, const char *const *values, size_t n_values,
                    struct prom_series **out)
{
    ASSERT(m && out);
    if (n_values != m->n_labels || (n_values && !values)) return ERR_INVAL;
    for (size_t i = 0; i < n_values; i++)
        if (!values[i]) return ERR_INVAL;
    struct prom_registry *r = m->reg;
    pthread_mutex_lock(&r->mu);
    struct prom_series *s = series_find(m, values);
    pthread_mutex_unlock(&r->mu);
    if (s) goto found;
    /* Allocate outside the lock, then look again: another thread may have created it meanwhile. */
    struct prom_series *fresh = series_new(m, values);
    if (!fresh) return ERR_NOMEM;
    pthread_mutex_lock(&r->mu);
    s = series_find(m, values);
    if (!s) {
        s = fresh;
        fresh = NULL;
        if (m->series_tail)
            m->series_tail->next = s;
        else
            m->series = s;
        m->series_tail = s;
    }
    pthread_mutex_unlock(&r->mu);
    series_free(fresh, m->n_labels);
found:
    *out = s;
    return 0;
}

/* ---- updates --------------------------------------------------------------------------------- */

void prom_counter_inc(struct prom_series *s, double v)
{
    ASSERT(s && s->metric->type == PROM_COUNTER);
    ASSERT(v >= 0); /* a counter never goes down; false for NaN too */
    pthread_mutex_t *mu = &s->metric->reg->mu;
    pthread_mutex_lock(mu);
    s->value += v;
    pthread_mutex_unlock(mu);
}

void prom_gauge_set(struct prom_series *s, double v)
{
    ASSERT(s && s->metric->type == PROM_GAUGE);
    pthread_mutex_t *mu = &s->metric->reg->mu;
    pthread_mutex_lock(mu);
    s->value = v;
    pthread_mutex_unlock(mu);
}

void prom_gauge_add(struct prom_series *s, double v)
{
    ASSERT(s && s->metric->type == PROM_GAUGE);
    pthread_mutex_t *mu = &s->metric->reg->mu;
    pthread_mutex_lock(mu);
    s->value += v;
    pthread_mutex_unlock(mu);
}

void prom_histogram_observe(struct prom_series *s, double v)
{
    ASSERT(s && s->metric->type == PROM_HISTOGRAM);
    const struct prom_metric *m = s->metric;
    /* Binary search for the first bound >= v; NaN compares false everywhere and lands in +Inf. */
    size_t lo = 0, hi = m->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->bounds[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (isnan(v)) lo = m->n_bounds;
    pthread_mutex_lock(&m->reg->mu);
    s->buckets[lo]++;
    s->count++;
    s->sum += v;
    pthread_mutex_unlock(&m->reg->mu);
}

double prom_series_value(struct prom_series *s)
{
    ASSERT(s && (s->metric->type == PROM_COUNTER || s->metric->type == PROM_GAUGE));
    pthread_mutex_t *mu = &s->metric->reg->mu;
    pthread_mutex_lock(mu);
    double v = s->value;
    pthread_mutex_unlock(mu);
    return v;
}

void prom_histogram_totals(struct prom_series *s, uint64_t *count, double *sum)
{
    ASSERT(s && s->metric->type == PROM_HISTOGRAM);
    pthread_mutex_t *mu = &s->metric->reg->mu;
    pthread_mutex_lock(mu);
    if (count) *count = s->count;
    if (sum) *sum = s->sum;
    pthread_mutex_unlock(mu);
}
