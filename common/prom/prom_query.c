/* Lookups over a parsed Prometheus exposition (see common/prom/prom.h): families by name, samples by
 * name and label subset, histogram series and quantile estimates. Read-only over the exposition; no
 * parsing here (prom_parse.c). */
#include "common/prom/prom_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const struct prom_family *prom_exposition_family(const struct prom_exposition *e, const char *name)
{
    if (!e || !name) return NULL;
    size_t f = prom_family_index(e, name, strlen(name));
    return f == SIZE_MAX ? NULL : &e->families[f];
}

static const char *label_value(const struct prom_label *l, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i].name, name) == 0) return l[i].value;
    return NULL;
}

/* True when every pair of `match` is among the sample's labels. */
static bool labels_include(const struct prom_sample *s, const struct prom_label *match, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = label_value(s->labels, s->n_labels, match[i].name);
        if (!v || strcmp(v, match[i].value) != 0) return false;
    }
    return true;
}

/* The families a sample called `name` can belong to: `name` itself and, for a _bucket, _sum or
 * _count name, the family it is a suffix of. Writes up to 2 family indexes; returns how many. */
static size_t candidate_families(const struct prom_exposition *e, const char *name, size_t out[2])
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    size_t n = 0, len = strlen(name);
    size_t f = prom_family_index(e, name, len);
    if (f != SIZE_MAX) out[n++] = f;
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t ns = strlen(suffixes[i]);
        if (len <= ns || strcmp(name + len - ns, suffixes[i]) != 0) continue;
        f = prom_family_index(e, name, len - ns);
        if (f != SIZE_MAX) out[n++] = f;
        break;
    }
    return n;
}

const struct prom_sample *prom_exposition_sample(const struct prom_exposition *e,
                                                 const char *sample_name,
                                                 const struct prom_label *match, size_t n_match)
{
    if (!e || !sample_name) return NULL;
    size_t fams[2], n = candidate_families(e, sample_name, fams);
    for (size_t k = 0; k < n; k++) {
        const struct prom_family *f = &e->families[fams[k]];
        for (size_t i = 0; i < f->n_samples; i++) {
            const struct prom_sample *s = &f->samples[i];
            if (strcmp(s->name, sample_name) == 0 && labels_include(s, match, n_match)) return s;
        }
    }
    return NULL;
}

size_t prom_exposition_sum(const struct prom_exposition *e, const char *sample_name,
                           const struct prom_label *match, size_t n_match, double *sum)
{
    *sum = 0;
    if (!e || !sample_name) return 0;
    size_t fams[2], n = candidate_families(e, sample_name, fams), hits = 0;
    for (size_t k = 0; k < n; k++) {
        const struct prom_family *f = &e->families[fams[k]];
        for (size_t i = 0; i < f->n_samples; i++) {
            const struct prom_sample *s = &f->samples[i];
            if (strcmp(s->name, sample_name) != 0 || !labels_include(s, match, n_match)) continue;
            *sum += s->value;
            hits++;
        }
    }
    return hits;
}

/* ---- histograms ------------------------------------------------------------------------------ */

static bool is_le(const struct prom_label *l)
{
    return strcmp(l->name, "le") == 0;
}

/* True when the labels of `a` and `b`, both ignoring "le", are the same set. Label names within a
 * sample are unique (the parser rejects duplicates), so equal counts plus inclusion is equality. */
static bool same_series(const struct prom_sample *a, const struct prom_sample *b)
{
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < a->n_labels; i++) na += !is_le(&a->labels[i]);
    for (size_t i = 0; i < b->n_labels; i++) nb += !is_le(&b->labels[i]);
    if (na != nb) return false;
    for (size_t i = 0; i < a->n_labels; i++) {
        if (is_le(&a->labels[i])) continue;
        const char *v = label_value(b->labels, b->n_labels, a->labels[i].name);
        if (!v || strcmp(v, a->labels[i].value) != 0) return false;
    }
    return true;
}

static bool has_suffix(const char *s, const char *base, const char *suffix)
{
    size_t nb = strlen(base);
    return strncmp(s, base, nb) == 0 && strcmp(s + nb, suffix) == 0;
}

static int bucket_cmp(const void *a, const void *b)
{
    double x = ((const struct prom_bucket *)a)->le, y = ((const struct prom_bucket *)b)->le;
    return x < y ? -1 : x > y;
}

int prom_histogram_get(const struct prom_exposition *e, const char *family,
                       const struct prom_label *match, size_t n_match, struct prom_histogram *out)
{
    const struct prom_family *f = prom_exposition_family(e, family);
    if (!f) return ERR_NOT_FOUND;
    if (f->type != PROM_HISTOGRAM) return ERR_INVAL;
    const struct prom_sample *ref = NULL;
    size_t n_buckets = 0;
    for (size_t i = 0; i < f->n_samples; i++) {
        const struct prom_sample *s = &f->samples[i];
        if (!has_suffix(s->name, f->name, "_bucket")) continue;
        if (!ref && labels_include(s, match, n_match)) ref = s;
        if (ref && same_series(ref, s)) n_buckets++;
    }
    if (!ref) return ERR_NOT_FOUND;
    struct prom_histogram h = {.sum = NAN, .count = NAN};
    h.buckets = malloc(n_buckets * sizeof(*h.buckets));
    if (!h.buckets) return ERR_NOMEM;
    for (size_t i = 0; i < f->n_samples; i++) {
        const struct prom_sample *s = &f->samples[i];
        if (!same_series(ref, s)) continue;
        if (has_suffix(s->name, f->name, "_bucket")) {
            /* The parser checked that every bucket has a numeric, non-NaN le, in a syntax strtod
             * reads the same way (decimal, or Inf/Infinity in any case). */
            const char *le = label_value(s->labels, s->n_labels, "le");
            h.buckets[h.n_buckets++] = (struct prom_bucket){strtod(le, NULL), s->value};
        } else if (isnan(h.sum) && has_suffix(s->name, f->name, "_sum")) {
            h.sum = s->value;
        } else if (isnan(h.count) && has_suffix(s->name, f->name, "_count")) {
            h.count = s->value;
        }
    }
    qsort(h.buckets, h.n_buckets, sizeof(*h.buckets), bucket_cmp);
    *out = h;
    return 0;
}

void prom_histogram_fini(struct prom_histogram *h)
{
    if (!h) return;
    free(h->buckets);
    *h = (struct prom_histogram){.sum = NAN, .count = NAN};
}

double prom_histogram_quantile(const struct prom_histogram *h, double q)
{
    if (isnan(q)) return NAN;
    if (q < 0) return -INFINITY;
    if (q > 1) return INFINITY;
    size_t n = h->n_buckets;
    if (n < 2 || h->buckets[n - 1].le != INFINITY) return NAN;
    /* Counts should be cumulative; scrapes racing with updates can break that, so a count lower
     * than an earlier one is raised to it (PromQL does the same). */
    double total = 0;
    for (size_t i = 0; i < n; i++) total = fmax(total, h->buckets[i].count);
    if (!(total > 0)) return NAN;
    double rank = q * total, below = 0;
    for (size_t b = 0; b < n; b++) {
        double count = fmax(below, h->buckets[b].count);
        if (count < rank) {
            below = count;
            continue;
        }
        if (b == n - 1) return h->buckets[n - 2].le;
        if (b == 0 && h->buckets[0].le <= 0) return h->buckets[0].le;
        double start = b == 0 ? 0 : h->buckets[b - 1].le, end = h->buckets[b].le;
        double in_bucket = count - below;
        if (!(in_bucket > 0)) return start;
        return start + (end - start) * ((rank - below) / in_bucket);
    }
    return h->buckets[n - 2].le;
}
