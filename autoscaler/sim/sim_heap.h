/* The simulator's one binary min-heap, ordered by (key, tie), both ascending: the event queue
 * (key = time, tie = insertion sequence) and the router's replica loads (key = queued work, tie =
 * replica index, so equal loads pick the lowest index, as a scan in index order does). An indexed
 * heap (sim_heap_init with max_id > 0) also finds an item by its id to change or remove it in
 * O(log n); ids are < max_id and at most one item per id. Not thread-safe; no I/O. */
#ifndef CINFER_AUTOSCALER_SIM_HEAP_H
#define CINFER_AUTOSCALER_SIM_HEAP_H

#include "common/heap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sim_heap_item {
    double key;
    uint64_t tie;
    uint32_t id;   /* indexed heaps: the item's identity; otherwise free payload */
    uint32_t aux;  /* payload */
    uint64_t aux2; /* payload */
};

static inline bool sim_heap_less(const struct sim_heap_item *x, const struct sim_heap_item *y)
{
    return x->key < y->key || (x->key == y->key && x->tie < y->tie);
}

static inline uint32_t sim_heap_id(const struct sim_heap_item *x)
{
    return x->id;
}

/* struct sim_heap and sim_heap_init (max_id 0: a plain heap; > 0: indexed by ids < max_id),
 * _fini, _push, _pop, _top, and for indexed heaps _set (insert or re-key), _remove, _get: the one
 * heap of common/heap.h. */
HEAP_DEFINE_INDEXED(sim_heap, struct sim_heap_item, sim_heap_less, sim_heap_id)

#endif
