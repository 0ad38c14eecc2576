/* Chained hash table over a fixed node pool plus an intrusive LRU list (see sim_cache.h). */
#include "autoscaler/sim/sim_cache.h"

#include "common/err.h"

#include <stdlib.h>

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

int sim_cache_init(struct sim_cache *c, size_t cap_blocks)
{
    *c = (struct sim_cache){.cap = cap_blocks, .head = -1, .tail = -1};
    if (cap_blocks == 0) return 0;
    if (cap_blocks > INT32_MAX / 2) return ERR_RANGE;
    c->nb = cap_blocks * 2 + 1;
    c->nodes = calloc(cap_blocks, sizeof(*c->nodes));
    c->buckets = malloc(c->nb * sizeof(*c->buckets));
    if (!c->nodes || !c->buckets) {
        sim_cache_fini(c);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < c->nb; i++) c->buckets[i] = -1;
    return 0;
}

void sim_cache_fini(struct sim_cache *c)
{
    free(c->nodes);
    free(c->buckets);
    c->nodes = NULL;
    c->buckets = NULL;
    c->cap = c->n = 0;
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
        }
        size_t b = bucket_of(c, h[k]);
        c->nodes[i].key = h[k];
        c->nodes[i].hnext = c->buckets[b];
        c->buckets[b] = i;
        list_push_front(c, i);
    }
}
