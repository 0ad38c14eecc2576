/* Storage of a parsed Prometheus exposition (see common/prom/prom_priv.h): a string arena, the family
 * array and its name index, and freeing all of it. No parsing here (prom_parse.c). */
#include "common/prom/prom_priv.h"

#include "common/err.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ----------------------------------------------------------------------------------- */

struct prom_arena_chunk {
    struct prom_arena_chunk *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
};

#define ARENA_CHUNK_MIN ((size_t)16 << 10)

void *prom_arena_alloc(struct prom_parse_priv *pp, size_t n)
{
    const size_t align = alignof(max_align_t);
    n = (n + align - 1) & ~(align - 1);
    struct prom_arena_chunk *c = pp->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_MIN ? n : ARENA_CHUNK_MIN;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->next = pp->arena;
        c->used = 0;
        c->cap = cap;
        pp->arena = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

char *prom_arena_strndup(struct prom_parse_priv *pp, const char *s, size_t n)
{
    char *d = prom_arena_alloc(pp, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- family index ---------------------------------------------------------------------------- */

static size_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static bool name_is(const char *name, const char *s, size_t n)
{
    return strncmp(name, s, n) == 0 && name[n] == 0;
}

size_t prom_family_index(const struct prom_exposition *e, const char *name, size_t len)
{
    const struct prom_parse_priv *pp = e->priv;
    if (!pp || !pp->index_cap) return SIZE_MAX;
    size_t mask = pp->index_cap - 1;
    for (size_t i = name_hash(name, len) & mask;; i = (i + 1) & mask) {
        size_t slot = pp->index[i];
        if (!slot) return SIZE_MAX;
        if (name_is(e->families[slot - 1].name, name, len)) return slot - 1;
    }
}

/* Makes room for one more family in the index (kept at most half full). */
static int index_reserve(struct prom_exposition *e)
{
    struct prom_parse_priv *pp = e->priv;
    if (pp->index_cap && (e->n_families + 1) * 2 <= pp->index_cap) return 0;
    size_t cap = pp->index_cap ? pp->index_cap * 2 : 64;
    size_t *index = calloc(cap, sizeof(*index));
    if (!index) return ERR_NOMEM;
    for (size_t f = 0; f < e->n_families; f++) {
        const char *name = e->families[f].name;
        size_t i = name_hash(name, strlen(name)) & (cap - 1);
        while (index[i]) i = (i + 1) & (cap - 1);
        index[i] = f + 1;
    }
    free(pp->index);
    pp->index = index;
    pp->index_cap = cap;
    return 0;
}

void prom_exposition_free(struct prom_exposition *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n_families; i++) free(e->families[i].samples);
    free(e->families);
    if (e->priv) {
        for (struct prom_arena_chunk *c = e->priv->arena, *next; c; c = next) {
            next = c->next;
            free(c);
        }
        free(e->priv->index);
        free(e->priv);
    }
    free(e);
}

int prom_family_append(struct prom_exposition *e, const char *name, size_t n, size_t *out)
{
    struct prom_parse_priv *pp = e->priv;
    if (e->n_families == pp->cap_families) {
        size_t cap = pp->cap_families ? pp->cap_families * 2 : 16;
        struct prom_family *f = realloc(e->families, cap * sizeof(*f));
        if (!f) return ERR_NOMEM;
        e->families = f;
        pp->cap_families = cap;
    }
    int rc = index_reserve(e);
    if (rc) return rc;
    char *copy = prom_arena_strndup(pp, name, n);
    if (!copy) return ERR_NOMEM;
    e->families[e->n_families] = (struct prom_family){.name = copy, .type = PROM_UNTYPED};
    size_t i = name_hash(name, n) & (pp->index_cap - 1);
    while (pp->index[i]) i = (i + 1) & (pp->index_cap - 1);
    pp->index[i] = ++e->n_families;
    *out = e->n_families - 1;
    return 0;
}
