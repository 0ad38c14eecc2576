/* Renders a Prometheus registry (prom_write.c) in text format 0.0.4 under the registry mutex:
 * HELP and TYPE lines, then every series; histograms as cumulative _bucket lines, _sum and _count.
 * Escaping follows the format: backslash and newline in HELP, plus double quote in label values. */
#include "common/prom/prom_priv.h"

#include "common/assert.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ---- rendering ------------------------------------------------------------------------------- */

/* Appends `s` escaping backslash and newline, plus double quote when `quote` (label values). */
static int put_escaped(struct buf *out, const char *s, bool quote)
{
    int rc = 0;
    const char *run = s;
    for (; *s && !rc; s++) {
        const char *esc = NULL;
        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (*s == '"' && quote)
            esc = "\\\"";
        if (!esc) continue;
        rc = buf_append(out, run, (size_t)(s - run));
        if (!rc) rc = buf_append(out, esc, 2);
        run = s + 1;
    }
    return rc ? rc : buf_append(out, run, (size_t)(s - run));
}

/* Appends the decimal digits of `v`. */
static int put_u64(struct buf *out, uint64_t v)
{
    char tmp[24], *p = tmp + sizeof(tmp);
    do *--p = (char)('0' + v % 10);
    while (v /= 10);
    return buf_append(out, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* Appends `name{l1="v1",...[,le="bound"]} `; braces only when there is at least one label. */
static int put_series_head(struct buf *out, const char *name, const char *suffix,
                           const struct prom_series *s, const char *le)
{
    const struct prom_metric *m = s->metric;
    int rc = buf_puts(out, name);
    if (!rc) rc = buf_puts(out, suffix);
    if (!rc && (m->n_labels || le)) rc = buf_putc(out, '{');
    for (size_t i = 0; !rc && i < m->n_labels; i++) {
        if (i) rc = buf_putc(out, ',');
        if (!rc) rc = buf_puts(out, m->labels[i]);
        if (!rc) rc = buf_append(out, "=\"", 2);
        if (!rc) rc = put_escaped(out, s->values[i], true);
        if (!rc) rc = buf_putc(out, '"');
    }
    if (!rc && le) rc = buf_puts(out, m->n_labels ? ",le=\"" : "le=\"");
    if (!rc && le) rc = buf_puts(out, le);
    if (!rc && le) rc = buf_putc(out, '"');
    if (!rc && (m->n_labels || le)) rc = buf_putc(out, '}');
    if (!rc) rc = buf_putc(out, ' ');
    return rc;
}

static int put_histogram(struct buf *out, const char *name, const struct prom_series *s)
{
    const struct prom_metric *m = s->metric;
    char num[PROM_DOUBLE_MAX];
    uint64_t cumulative = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i <= m->n_bounds; i++) {
        cumulative += s->buckets[i];
        const char *le = i < m->n_bounds ? m->le_text[i] : "+Inf";
        rc = put_series_head(out, name, "_bucket", s, le);
        if (!rc) rc = put_u64(out, cumulative);
        if (!rc) rc = buf_putc(out, '\n');
    }
    if (!rc) rc = put_series_head(out, name, "_sum", s, NULL);
    if (!rc) rc = buf_puts(out, prom_double_fmt(s->sum, num));
    if (!rc) rc = buf_putc(out, '\n');
    if (!rc) rc = put_series_head(out, name, "_count", s, NULL);
    if (!rc) rc = put_u64(out, s->count);
    if (!rc) rc = buf_putc(out, '\n');
    return rc;
}

/* Caller holds the registry mutex. */
static int put_family(struct buf *out, const struct prom_metric *m, const struct prom_alias *n)
{
    int rc = 0;
    if (n->help) {
        rc = buf_printf(out, "# HELP %s ", n->name);
        if (!rc) rc = put_escaped(out, n->help, false);
        if (!rc) rc = buf_putc(out, '\n');
    }
    if (!rc) rc = buf_printf(out, "# TYPE %s %s\n", n->name, prom_type_str(m->type));
    char num[PROM_DOUBLE_MAX];
    for (const struct prom_series *s = m->series; !rc && s; s = s->next) {
        if (m->type == PROM_HISTOGRAM) {
            rc = put_histogram(out, n->name, s);
        } else {
            rc = put_series_head(out, n->name, "", s, NULL);
            if (!rc) rc = buf_puts(out, prom_double_fmt(s->value, num));
            if (!rc) rc = buf_putc(out, '\n');
        }
    }
    return rc;
}

int prom_registry_render(struct prom_registry *r, struct buf *out)
{
    ASSERT(r && out);
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    for (const struct prom_metric *m = r->head; !rc && m; m = m->next)
        for (const struct prom_alias *n = &m->names; !rc && n; n = n->next)
            rc = put_family(out, m, n);
    pthread_mutex_unlock(&r->mu);
    return rc;
}
