/* Fuzz target for the Prometheus text parser (common/prom/prom_parse.c, common/prom/prom_query.c). Parses
 * arbitrary bytes under small limits; when the input parses, exercises every lookup and checks a
 * round trip: the exposition rendered back to text must parse again to the same families, samples,
 * labels, values and timestamps. Any mismatch aborts, so libFuzzer reports it as a crash. */
#include "common/prom/prom.h"

#include "common/buf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct prom_limits limits = {
    .max_body = 1 << 20, .max_line = 4096, .max_series = 2000, .max_labels = 16};

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_prom: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void put_escaped(struct buf *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            buf_puts(b, "\\\\");
        else if (*s == '\n')
            buf_puts(b, "\\n");
        else if (*s == '"' && quote)
            buf_puts(b, "\\\"");
        else
            buf_putc(b, *s);
    }
}

/* Renders a parsed exposition back to text format, grouped by family. */
static void render(const struct prom_exposition *e, struct buf *b)
{
    char num[PROM_DOUBLE_MAX];
    for (size_t f = 0; f < e->n_families; f++) {
        const struct prom_family *fam = &e->families[f];
        if (fam->help) {
            buf_printf(b, "# HELP %s ", fam->name);
            put_escaped(b, fam->help, false);
            buf_putc(b, '\n');
        }
        if (fam->has_type) buf_printf(b, "# TYPE %s %s\n", fam->name, prom_type_str(fam->type));
        for (size_t i = 0; i < fam->n_samples; i++) {
            const struct prom_sample *s = &fam->samples[i];
            buf_puts(b, s->name);
            if (s->n_labels) buf_putc(b, '{');
            for (size_t k = 0; k < s->n_labels; k++) {
                buf_printf(b, "%s%s=\"", k ? "," : "", s->labels[k].name);
                put_escaped(b, s->labels[k].value, true);
                buf_putc(b, '"');
            }
            if (s->n_labels) buf_putc(b, '}');
            buf_printf(b, " %s", prom_double_fmt(s->value, num));
            if (s->has_timestamp) buf_printf(b, " %lld", (long long)s->timestamp_ms);
            buf_putc(b, '\n');
        }
    }
}

static bool same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

static void check_same(const struct prom_exposition *a, const struct prom_exposition *b)
{
    CHECK(a->n_families == b->n_families);
    for (size_t f = 0; f < a->n_families; f++) {
        const struct prom_family *x = &a->families[f], *y = &b->families[f];
        CHECK(strcmp(x->name, y->name) == 0);
        CHECK(x->type == y->type && x->has_type == y->has_type);
        CHECK((!x->help && !y->help) || (x->help && y->help && strcmp(x->help, y->help) == 0));
        CHECK(x->n_samples == y->n_samples);
        for (size_t i = 0; i < x->n_samples; i++) {
            const struct prom_sample *s = &x->samples[i], *t = &y->samples[i];
            CHECK(strcmp(s->name, t->name) == 0 && s->n_labels == t->n_labels);
            CHECK(same_double(s->value, t->value));
            CHECK(s->has_timestamp == t->has_timestamp && s->timestamp_ms == t->timestamp_ms);
            for (size_t k = 0; k < s->n_labels; k++) {
                CHECK(strcmp(s->labels[k].name, t->labels[k].name) == 0);
                CHECK(strcmp(s->labels[k].value, t->labels[k].value) == 0);
            }
        }
    }
}

/* Every sample can be found again by its name and full label set; histograms can be gathered. */
static void inspect(const struct prom_exposition *e)
{
    for (size_t f = 0; f < e->n_families; f++) {
        const struct prom_family *fam = &e->families[f];
        CHECK(prom_exposition_family(e, fam->name) == fam);
        for (size_t i = 0; i < fam->n_samples; i++) {
            const struct prom_sample *s = &fam->samples[i];
            CHECK(prom_exposition_sample(e, s->name, s->labels, s->n_labels) != NULL);
            double sum;
            CHECK(prom_exposition_sum(e, s->name, s->labels, s->n_labels, &sum) >= 1);
        }
        if (fam->type != PROM_HISTOGRAM || fam->n_samples == 0) continue;
        const struct prom_sample *first = &fam->samples[0];
        struct prom_histogram h;
        int rc = prom_histogram_get(e, fam->name, first->labels, first->n_labels, &h);
        if (rc == 0) {
            for (size_t k = 1; k < h.n_buckets; k++) CHECK(h.buckets[k - 1].le <= h.buckets[k].le);
            double q = prom_histogram_quantile(&h, 0.9);
            (void)q;
            prom_histogram_fini(&h);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct prom_exposition *e = NULL, *again = NULL;
    char err[256];
    int rc = prom_parse((const char *)data, size, &limits, &e, err, sizeof(err));
    if (rc != 0) {
        CHECK(e == NULL && err[0] != 0);
        return 0;
    }
    inspect(e);
    struct buf b;
    buf_init(&b, 0);
    render(e, &b);
    struct prom_limits relaxed = {
        .max_body = 1 << 24, .max_line = 1 << 16, .max_series = 4000, .max_labels = 16};
    rc = prom_parse(b.data ? b.data : "", b.len, &relaxed, &again, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "fuzz_prom: re-parse failed: %s\n%s\n", err, buf_cstr(&b));
    CHECK(rc == 0);
    check_same(e, again);
    prom_exposition_free(again);
    prom_exposition_free(e);
    buf_fini(&b);
    return 0;
}
