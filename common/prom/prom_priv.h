/* Internals shared by the Prometheus writer (prom_write.c, prom_render.c), parser (prom_parse.c,
 * prom_store.c, prom_query.c) and text helpers (prom_text.c); not part of the public API in
 * common/prom/prom.h. */
#ifndef CINFER_COMMON_PROM_PRIV_H
#define CINFER_COMMON_PROM_PRIV_H

#include "common/prom/prom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

/* ---- writer ---------------------------------------------------------------------------------- */

struct prom_alias {
    char *name;
    char *help; /* NULL: no HELP line */
    struct prom_alias *next;
};

struct prom_series {
    struct prom_metric *metric;
    struct prom_series *next; /* creation order */
    char **values;            /* metric->n_labels copies */
    double value;             /* counter, gauge */
    uint64_t *buckets; /* histogram: metric->n_bounds + 1 non-cumulative counts, last = +Inf */
    uint64_t count;    /* histogram */
    double sum;        /* histogram */
};

struct prom_metric {
    struct prom_registry *reg;
    enum prom_type type;
    struct prom_alias names; /* the registered name first, then aliases (heap nodes) */
    char **labels;
    size_t n_labels;
    double *bounds;                   /* finite upper bounds, strictly increasing */
    char (*le_text)[PROM_DOUBLE_MAX]; /* bounds formatted once, for rendering */
    size_t n_bounds;
    struct prom_series *series, *series_tail;
    struct prom_metric *next; /* registration order */
};

struct prom_registry {
    pthread_mutex_t mu;
    struct prom_metric *head, *tail;
};

/* ---- parser ---------------------------------------------------------------------------------- */

struct prom_arena_chunk;

struct prom_parse_priv {
    struct prom_arena_chunk *arena; /* every string and label array of the exposition */
    size_t cap_families;            /* allocated length of e->families */
    size_t *index;                  /* open addressing by name hash: family index + 1, 0 = empty */
    size_t index_cap;               /* a power of two, at least twice the number of families */
};

/* prom_store.c: the exposition's memory. */

/* Returns `n` bytes (aligned for any type) from the arena of `pp`, owned by it, or NULL
 * (ENOMEM). */
void *prom_arena_alloc(struct prom_parse_priv *pp, size_t n);
/* Returns a NUL-terminated arena copy of s[0..n), or NULL (ENOMEM). */
char *prom_arena_strndup(struct prom_parse_priv *pp, const char *s, size_t n);
/* Returns the index in e->families of the family named name[0..len), or SIZE_MAX. */
size_t prom_family_index(const struct prom_exposition *e, const char *name, size_t len);
/* Appends an untyped family named name[0..n) (copied; must not exist yet) and indexes it; writes
 * its index. Returns 0 or ERR_NOMEM. Limits are the caller's business. */
int prom_family_append(struct prom_exposition *e, const char *name, size_t n, size_t *out);

/* prom_text.c: lexical helpers. */

/* True when `c` may appear in a metric name (`colon_ok`) or label name, at the start when
 * `first`. */
bool prom_name_char(char c, bool first, bool colon_ok);
/* Parses the whole of s[0..n) as a float: [+-] digits [. digits] [e[+-]digits], or [+-] Inf,
 * Infinity, NaN in any case. Rejects hex, underscores, overflow to infinity. */
bool prom_double_parse(const char *s, size_t n, double *out);
/* Parses the whole of s[0..n) as a decimal int64 with optional sign, rejecting overflow. */
bool prom_int64_parse(const char *s, size_t n, int64_t *out);

#endif
