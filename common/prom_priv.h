/* Internals shared by the Prometheus parser (prom_parse.c) and its queries (prom_query.c); not part of
 * the public API in common/prom.h. */
#ifndef CINFER_COMMON_PROM_PRIV_H
#define CINFER_COMMON_PROM_PRIV_H

#include "common/prom.h"

#include <stddef.h>

struct prom_arena_chunk;

struct prom_parse_priv {
    struct prom_arena_chunk *arena; /* every string and label array of the exposition */
    size_t *index;                  /* open addressing by name hash: family index + 1, 0 = empty */
    size_t index_cap;               /* a power of two, at least twice the number of families */
};

/* Returns the index in e->families of the family named name[0..len), or SIZE_MAX. */
size_t prom_family_index(const struct prom_exposition *e, const char *name, size_t len);

#endif
