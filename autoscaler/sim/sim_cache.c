/* Chained hash table over a fixed node pool plus an intrusive LRU list (see sim_cache.h). */
#include "autoscaler/sim/sim_cache.h"

#include "common/assert.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

#define NODE_BITS 24

struct sim_cache_node {
    uint64_t key;
    int32_t prev, next; /* LRU list */
    int32_t hnext;      /* bucket chain */
};

static size_t bucket_of(const struct sim_cache *c, uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)(k % c->nb);
}

int sim_cache_index_init(struct sim_cache_index *ix, size_t n_keys, size_t n_slots)
{
    memset(ix, 0, sizeof(*ix));
    ix->head = malloc((n_keys ? n_keys : 1) * sizeof(*ix->head));
    ix->links = calloc(n_slots ? n_slots : 1, sizeof(*ix->links));
    if (!ix->head || !ix->links) {
        sim_cache_index_fini(ix);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < n_keys; i++) ix->head[i] = -1;
    ix->n_keys = n_keys;
    ix->n_slots = n_slots;
    return 0;
}

void sim_cache_index_fini(struct sim_cache_index *ix)
{
    free(ix->head);
    free(ix->links);
    memset(ix, 0, sizeof(*ix));
}

static struct sim_cache_link *link_of(const struct sim_cache_index *ix, int64_t it)
{
    return &ix->links[it >> NODE_BITS][it & ((1 << NODE_BITS) - 1)];
}

int64_t sim_cache_index_first(const struct sim_cache_index *ix, uint64_t key)
{
    return key < ix->n_keys ? ix->head[key] : -1;
}

int64_t sim_cache_index_next(const struct sim_cache_index *ix, int64_t it)
{
    return link_of(ix, it)->next;
}

static void index_add(struct sim_cache *c, int32_t i)
{
    if (!c->ix) return;
    ASSERT(c->nodes[i].key < c->ix->n_keys);
    int64_t it = (int64_t)c->slot << NODE_BITS | i, *head = &c->ix->head[c->nodes[i].key];
    c->links[i] = (struct sim_cache_link){-1, *head};
    if (*head >= 0) link_of(c->ix, *head)->prev = it;
    *head = it;
}

static void index_remove(struct sim_cache *c, int32_t i)
{
    if (!c->ix) return;
    struct sim_cache_link *l = &c->links[i];
    if (l->prev >= 0)
        link_of(c->ix, l->prev)->next = l->next;
    else
        c->ix->head[c->nodes[i].key] = l->next;
    if (l->next >= 0) link_of(c->ix, l->next)->prev = l->prev;
}

int sim_cache_init(struct sim_cache *c, size_t cap_blocks, struct sim_cache_index *ix,
                   uint32_t slot)
{
    *c = (struct sim_cache){.cap = cap_blocks, .head = -1, .tail = -1};
    if (cap_blocks == 0) return 0;
    if (cap_blocks > INT32_MAX / 2 ||
        (ix && (cap_blocks >= (1u << NODE_BITS) || slot >= ix->n_slots)))
        return ERR_RANGE;
    c->nb = cap_blocks * 2 + 1;
    c->nodes = calloc(cap_blocks, sizeof(*c->nodes));
    c->buckets = malloc(c->nb * sizeof(*c->buckets));
    if (ix) c->links = malloc(cap_blocks * sizeof(*c->links));
    if (!c->nodes || !c->buckets || (ix && !c->links)) {
        sim_cache_fini(c);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < c->nb; i++) c->buckets[i] = -1;
    if (ix) {
        c->ix = ix;
        c->slot = slot;
        ix->links[slot] = c->links;
    }
    return 0;
}

void sim_cache_fini(struct sim_cache *c)
{
    if (c->ix) {
        for (size_t i = 0; i < c->n; i++) index_remove(c, (int32_t)i);
        c->ix->links[c->slot] = NULL;
    }
    free(c->nodes);
    free(c->buckets);
    free(c->links);
    memset(c, 0, sizeof(*c));
    c->head = c->tail = -1;
}

static int32_t find(const struct sim_cache *c, uint64_t k)
{
    if (c->cap == 0) return -1;
    for (int32_t i = c->buckets[bucket_of(c, k)]; i >= 0; i = c->nodes[i].hnext)
        if (c->nodes[i].key == k) return i;
    return -1;
}

size_t sim_cache_match(const struct sim_cache *c, const uint64_t *h, size_t n)
{
    size_t m = 0;
    while (m < n && find(c, h[m]) >= 0) m++;
    return m;
}

static void list_unlink(struct sim_cache *c, int32_t i)
{
    struct sim_cache_node *x = &c->nodes[i];
    if (x->prev >= 0)
        c->nodes[x->prev].next = x->next;
    else
        c->head = x->next;
    if (x->next >= 0)
        c->nodes[x->next].prev = x->prev;
    else
        c->tail = x->prev;
}

static void list_push_front(struct sim_cache *c, int32_t i)
{
    c->nodes[i].prev = -1;
    c->nodes[i].next = c->head;
    if (c->head >= 0) c->nodes[c->head].prev = i;
    c->head = i;
    if (c->tail < 0) c->tail = i;
}

static void chain_remove(struct sim_cache *c, int32_t i)
{
    int32_t *p = &c->buckets[bucket_of(c, c->nodes[i].key)];
    while (*p != i) p = &c->nodes[*p].hnext;
    *p = c->nodes[i].hnext;
}

void sim_cache_insert(struct sim_cache *c, const uint64_t *h, size_t n)
{
    if (c->cap == 0) return;
    /* Back to front: the leading blocks, shared by the most requests, end up most recent and are
     * evicted last (as vLLM evicts a sequence's tail blocks before its head). */
    for (size_t k = n; k-- > 0;) {
        int32_t i = find(c, h[k]);
        if (i >= 0) {
            list_unlink(c, i);
            list_push_front(c, i);
            continue;
        }
        if (c->n < c->cap) {
            i = (int32_t)c->n++;
        } else { /* evict the least recently used block */
            i = c->tail;
            list_unlink(c, i);
            chain_remove(c, i);
            index_remove(c, i);
        }
        size_t b = bucket_of(c, h[k]);
        c->nodes[i].key = h[k];
        c->nodes[i].hnext = c->buckets[b];
        c->buckets[b] = i;
        list_push_front(c, i);
        index_add(c, i);
    }
}
