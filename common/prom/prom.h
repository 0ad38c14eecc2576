/* Prometheus text exposition format 0.0.4: a metric registry that renders /metrics (writer) and a
 * bounded parser for scraped bodies (reader). Format reference:
 * https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
 * Not OpenMetrics (no # EOF, no exemplars, no _created series) and no protobuf format.
 *
 * Writer quick start (the engine, the operator and the autoscaler all do this):
 *
 *   static const char *const labels[] = {"model_name"};
 *   static const double ttft_bounds[] = {0.01, 0.1, 1.0};
 *   struct prom_registry *reg = prom_registry_new();
 *   struct prom_metric *m;
 *   rc = prom_registry_add(reg, &(struct prom_desc){.type = PROM_HISTOGRAM,
 *                          .name = "cinfer_time_to_first_token_seconds", .help = "...",
 *                          .labels = labels, .n_labels = 1,
 *                          .buckets = ttft_bounds, .n_buckets = 3}, &m);
 *   rc = prom_metric_alias(m, "vllm:time_to_first_token_seconds", NULL); // 2nd name
 *   struct prom_series *s;
 *   rc = prom_series_get(m, (const char *const[]){"stories260K"}, 1, &s); // once, at start-up
 *   prom_histogram_observe(s, 0.042);                                      // hot path, any thread
 *   rc = prom_registry_render(reg, &body);                                 // HTTP thread
 *
 * Thread-safety (writer): each registry has one mutex. Registration, prom_series_get, every update
 * and rendering take it, so any thread may update while another renders; a render is a consistent
 * snapshot of the whole registry. Updates are a lock, a few adds and an unlock: cheap enough for
 * the inference thread's per-token path. Handles (metrics, series) stay valid until
 * prom_registry_free.
 *
 * Duplicate names: prom_metric_alias() gives a metric a second family name. Both names render the
 * same series and values, so the engine updates each series once and exposes both cinfer_* and
 * vllm:* names.
 *
 * Parser: prom_parse() turns a body into families of samples, with limits on body size, line
 * length, series and labels, and an error message naming line and column for every rejected
 * input. */
#ifndef CINFER_COMMON_PROM_H
#define CINFER_COMMON_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* The Content-Type for a rendered body. */
#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum prom_type {
    PROM_UNTYPED = 0, /* parser: no # TYPE line (or "untyped"); the writer never registers it */
    PROM_COUNTER,
    PROM_GAUGE,
    PROM_HISTOGRAM,
    PROM_SUMMARY, /* parser only: the writer has no summaries */
};

/* Returns "untyped", "counter", "gauge", "histogram" or "summary" (static); any thread. */
const char *prom_type_str(enum prom_type type);

/* True when `s` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), resp. a valid label name
 * ([a-zA-Z_][a-zA-Z0-9_]*). Borrow `s`; any thread. */
bool prom_metric_name_valid(const char *s);
bool prom_label_name_valid(const char *s);

/* Formats `v` into `out` (at least PROM_DOUBLE_MAX bytes) as the shortest decimal that parses back
 * to the same double, or "+Inf", "-Inf", "NaN". Returns `out`; any thread. */
#define PROM_DOUBLE_MAX 32
char *prom_double_fmt(double v, char out[PROM_DOUBLE_MAX]);

/* ------------------------------------------------------------------------------------------------
 * Writer
 * ---------------------------------------------------------------------------------------------- */

struct prom_registry; /* opaque: metrics in registration order, plus their mutex */
struct prom_metric;   /* opaque: one family (name, help, type, label names, buckets, aliases) */
struct prom_series;   /* opaque: one child of a metric for one tuple of label values */

/* What to register. All pointers are borrowed for the duration of prom_registry_add (it copies). */
struct prom_desc {
    enum prom_type type;       /* PROM_COUNTER, PROM_GAUGE or PROM_HISTOGRAM */
    const char *name;          /* metric name; counters should end in _total by convention */
    const char *help;          /* HELP text (escaped on output; no '\r'); NULL/"": no HELP line */
    const char *const *labels; /* label names, in output order; no ':' , no "__" prefix */
    size_t n_labels;           /* 0..PROM_MAX_LABELS */
    const double *buckets;     /* histograms: strictly increasing upper bounds; a final +Inf is */
    size_t n_buckets;          /* optional (always rendered); 1..PROM_MAX_BUCKETS finite bounds */
};

#define PROM_MAX_LABELS  16
#define PROM_MAX_BUCKETS 64

/* Returns a new empty registry (caller frees with prom_registry_free), or NULL when out of
 * memory. */
struct prom_registry *prom_registry_new(void);

/* Frees the registry with every metric and series it owns; all handles become invalid. NULL-safe.
 * No other thread may use the registry or its handles during or after the call. */
void prom_registry_free(struct prom_registry *r);

/* Registers a metric described by `d` (borrowed; copied). On success writes a handle owned by the
 * registry to *out. Returns 0, ERR_INVAL (invalid name, label name, type or buckets; the reason is
 * logged), ERR_EXISTS (the name, or for a histogram one of its _bucket/_sum/_count sample names, is
 * already used by another metric or alias) or ERR_NOMEM. Any thread. */
int prom_registry_add(struct prom_registry *r, const struct prom_desc *d, struct prom_metric **out);

/* Gives metric `m` a second family name `name` (borrowed; copied) rendered right after the first,
 * with the same type, labels, series and values. `help` (borrowed; copied) NULL means reuse the
 * metric's help. Returns 0, ERR_INVAL (invalid name, '\r' in help), ERR_EXISTS (name taken) or
 * ERR_NOMEM. Any thread. */
int prom_metric_alias(struct prom_metric *m, const char *name, const char *help);

/* Finds or creates the child series of `m` for `values` (n_values label values, borrowed, copied,
 * in the order of the metric's label names; any UTF-8 text, escaped on output). A metric without
 * labels has exactly one series: pass NULL, 0. Writes a handle owned by the registry to *out; the
 * same values always return the same handle, so look it up once and keep it. Returns 0, ERR_INVAL
 * (n_values differs from the metric's label count, or a value is NULL) or ERR_NOMEM. Any thread. */
int prom_series_get(struct prom_metric *m, const char *const *values, size_t n_values,
                    struct prom_series **out);

/* Updates (any thread; each takes the registry mutex). The series must be of the matching type
 * (asserted: a mismatch is a programmer error). */
/* Counter: adds `v`; `v` must be >= 0 (asserted; NaN included). */
void prom_counter_inc(struct prom_series *s, double v);
/* Gauge: sets to `v`, resp. adds `v` (may be negative). */
void prom_gauge_set(struct prom_series *s, double v);
void prom_gauge_add(struct prom_series *s, double v);
/* Histogram: counts `v` in the first bucket whose bound is >= v (the +Inf bucket when none; NaN
 * too) and adds it to _sum. */
void prom_histogram_observe(struct prom_series *s, double v);

/* Reads the current value of a counter or gauge series (asserted). Any thread. */
double prom_series_value(struct prom_series *s);
/* Reads the observation count and sum of a histogram series (asserted); either out may be NULL. */
void prom_histogram_totals(struct prom_series *s, uint64_t *count, double *sum);

/* Appends the whole registry in text format 0.0.4 to `out` (borrowed; its max bounds the body):
 * metrics in registration order, each name followed by its aliases, series in creation order, HELP
 * and TYPE lines first. A metric with no series renders only HELP and TYPE. Returns 0, ERR_TOO_BIG
 * or ERR_NOMEM (then `out` holds a truncated body: discard it). Any thread. */
int prom_registry_render(struct prom_registry *r, struct buf *out);

/* ------------------------------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------------------------------
 * Accepted input (what Prometheus client libraries emit):
 *   - lines end in "\n"; one "\r" ending a line is dropped (CRLF bodies from proxies or fixtures
 *     parse too); the last line's newline is optional; blank lines and leading blanks are skipped;
 *   - "# HELP name text" (escapes \\ and \n), "# TYPE name type" (counter, gauge, histogram,
 *     summary, untyped), any other "#" line is a comment;
 *   - "name{label="value",...} value [timestamp_ms]" with blanks or tabs between tokens, an
 *     optional trailing comma in the label set, label value escapes \\ \" \n, values as decimal
 *     floats or NaN/+Inf/-Inf/Inf (any case), timestamps as int64 milliseconds.
 * Rejected, with "line L, column C: reason": NUL bytes, invalid UTF-8 in label values and HELP, a
 * carriage return inside HELP text (it could not be told from a line ending), invalid names, unterminated quotes, unknown escapes, duplicate label names, missing or malformed
 * value or timestamp (values longer than 127 bytes included), trailing garbage, unknown TYPE, a
 * second TYPE or HELP line for a family, TYPE after samples of that family (for a histogram or
 * summary, also after samples named <family>_bucket/_sum/_count), histogram buckets without a
 * numeric "le", summary quantiles without a numeric "quantile", the reserved label "__name__", and
 * any limit exceeded (ERR_TOO_BIG).
 * Sample grouping: a sample joins the family of its name; for a family typed histogram (summary),
 * the names <family>_bucket (<family>), _sum and _count join it too. Samples of a family need not
 * be contiguous. An unknown sample name starts a new untyped family. Duplicate series are not
 * detected (lookups return the first). */

struct prom_limits {
    size_t max_body;   /* bytes of input; 0 = PROM_DEFAULT_MAX_BODY */
    size_t max_line;   /* bytes per line without the newline; 0 = PROM_DEFAULT_MAX_LINE */
    size_t max_series; /* samples in total, and families in total; 0 = PROM_DEFAULT_MAX_SERIES */
    size_t max_labels; /* labels per sample; 0 = PROM_DEFAULT_MAX_LABELS */
};
#define PROM_DEFAULT_MAX_BODY   (16u << 20)
#define PROM_DEFAULT_MAX_LINE   (64u << 10)
#define PROM_DEFAULT_MAX_SERIES 100000u
#define PROM_DEFAULT_MAX_LABELS 64u

struct prom_label {
    const char *name;  /* NUL-terminated */
    const char *value; /* unescaped, NUL-terminated (a value cannot contain NUL) */
};

struct prom_sample {
    const char *name; /* full sample name, e.g. "foo_bucket" for histogram family "foo" */
    const struct prom_label *labels;
    size_t n_labels; /* in input order */
    double value;
    int64_t timestamp_ms; /* valid when has_timestamp */
    bool has_timestamp;
};

struct prom_family {
    const char *name;
    const char *help; /* unescaped; NULL when there was no HELP line */
    enum prom_type type;
    bool has_type;               /* a # TYPE line declared `type` */
    struct prom_sample *samples; /* in input order */
    size_t n_samples;
    size_t cap_samples; /* private */
};

/* A parsed body. Every string and array in it is owned by it and lives until
 * prom_exposition_free. */
struct prom_exposition {
    struct prom_family *families; /* in order of first appearance */
    size_t n_families;
    struct prom_parse_priv *priv; /* private: string arena and name index */
};

/* Parses `len` bytes at `text` (borrowed; need not be NUL-terminated) with `limits` (borrowed; NULL
 * = defaults). On success writes a new exposition to *out (caller frees with prom_exposition_free).
 * On failure writes a message "line L, column C: reason" (1-based; column counts bytes) into `err`
 * (err_len bytes, always NUL-terminated; may be NULL) and returns ERR_PARSE (malformed),
 * ERR_TOO_BIG (a limit) or ERR_NOMEM. Any thread; no shared state. */
int prom_parse(const char *text, size_t len, const struct prom_limits *limits,
               struct prom_exposition **out, char *err, size_t err_len);

/* Frees a parsed exposition. NULL-safe. */
void prom_exposition_free(struct prom_exposition *e);

/* Returns the family named `name` (borrowed from `e`), or NULL. Any thread (read-only). */
const struct prom_family *prom_exposition_family(const struct prom_exposition *e, const char *name);

/* Returns the first sample named `sample_name` (e.g. "vllm:num_requests_running" or "foo_sum")
 * whose labels include every pair in `match` (n_match pairs, borrowed; other labels are ignored),
 * or NULL. The result is borrowed from `e`. */
const struct prom_sample *prom_exposition_sample(const struct prom_exposition *e,
                                                 const char *sample_name,
                                                 const struct prom_label *match, size_t n_match);

/* Adds up the values of every sample named `sample_name` whose labels include `match` into *sum and
 * returns how many matched (0 leaves *sum at 0). */
size_t prom_exposition_sum(const struct prom_exposition *e, const char *sample_name,
                           const struct prom_label *match, size_t n_match, double *sum);

/* One series of a histogram family, gathered from its _bucket, _sum and _count samples. */
struct prom_bucket {
    double le;    /* upper bound (+Inf for the last bucket when exposed) */
    double count; /* cumulative: observations <= le */
};
struct prom_histogram {
    struct prom_bucket *buckets; /* new, owned by this struct; sorted by le ascending */
    size_t n_buckets;
    double sum;   /* NaN when the series has no _sum sample */
    double count; /* NaN when the series has no _count sample */
};

/* Gathers the first series of histogram family `family` whose labels (apart from "le") include
 * `match`; the series' other buckets, _sum and _count are those with exactly its label set. Writes
 * *out (free its buckets with prom_histogram_fini). Returns 0, ERR_NOT_FOUND (no such family or
 * series), ERR_INVAL (the family is not a histogram) or ERR_NOMEM. */
int prom_histogram_get(const struct prom_exposition *e, const char *family,
                       const struct prom_label *match, size_t n_match, struct prom_histogram *out);

/* Frees the buckets of `h` and empties it. NULL-safe. */
void prom_histogram_fini(struct prom_histogram *h);

/* Estimates quantile q (0..1) from cumulative buckets by linear interpolation inside the bucket,
 * as PromQL's histogram_quantile() does: NaN when there are no observations or no +Inf bucket;
 * q < 0 gives -Inf, q > 1 gives +Inf; a quantile in the +Inf bucket gives the largest finite bound.
 * Pure; any thread. */
double prom_histogram_quantile(const struct prom_histogram *h, double q);

#endif
