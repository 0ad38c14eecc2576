/* The simulator's one binary min-heap, ordered by (key, tie), both ascending: the event queue
 * (key = time, tie = insertion sequence) and the router's replica loads (key = queued work, tie =
 * replica index, so equal loads pick the lowest index, as a scan in index order does). An indexed
 * heap (sim_heap_init with max_id > 0) also finds an item by its id to change or remove it in
 * O(log n); ids are < max_id and at most one item per id. Not thread-safe; no I/O. */
#ifndef CINFER_AUTOSCALER_SIM_HEAP_H
#define CINFER_AUTOSCALER_SIM_HEAP_H

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

struct sim_heap {
    struct sim_heap_item *a;
    size_t n, cap;
    size_t *pos; /* indexed: pos[id] = index in a + 1, 0 = absent; NULL otherwise */
    size_t max_id;
};

/* max_id 0: a plain heap; > 0: an indexed heap of ids < max_id. Returns 0 or ERR_NOMEM. */
int sim_heap_init(struct sim_heap *h, size_t max_id);
void sim_heap_fini(struct sim_heap *h);

/* Inserts `it`; indexed: `it.id` must be absent (use sim_heap_set). Returns 0 or ERR_NOMEM. */
int sim_heap_push(struct sim_heap *h, struct sim_heap_item it);
/* Removes and returns the least item (n > 0). */
struct sim_heap_item sim_heap_pop(struct sim_heap *h);
/* The least item, or NULL when empty (borrowed until the next change). */
const struct sim_heap_item *sim_heap_top(const struct sim_heap *h);

/* Indexed only: inserts or re-keys item `it.id`. Returns 0 or ERR_NOMEM. */
int sim_heap_set(struct sim_heap *h, struct sim_heap_item it);
/* Indexed only: removes item `id` if present. */
void sim_heap_remove(struct sim_heap *h, uint32_t id);
/* Indexed only: item `id`, or NULL when absent (borrowed until the next change). */
const struct sim_heap_item *sim_heap_get(const struct sim_heap *h, uint32_t id);

#endif
