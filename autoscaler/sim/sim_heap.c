/* Binary min-heap with an optional position index (see sim_heap.h). */
#include "autoscaler/sim/sim_heap.h"

#include "common/assert.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

int sim_heap_init(struct sim_heap *h, size_t max_id)
{
    memset(h, 0, sizeof(*h));
    if (max_id == 0) return 0;
    h->pos = calloc(max_id, sizeof(*h->pos));
    if (!h->pos) return ERR_NOMEM;
    h->max_id = max_id;
    return 0;
}

void sim_heap_fini(struct sim_heap *h)
{
    free(h->a);
    free(h->pos);
    memset(h, 0, sizeof(*h));
}

static bool less(const struct sim_heap_item *x, const struct sim_heap_item *y)
{
    return x->key < y->key || (x->key == y->key && x->tie < y->tie);
}

static void place(struct sim_heap *h, size_t i, struct sim_heap_item it)
{
    h->a[i] = it;
    if (h->pos) h->pos[it.id] = i + 1;
}

/* Moves the item at i towards the root while it is less than its parent. */
static void sift_up(struct sim_heap *h, size_t i)
{
    struct sim_heap_item it = h->a[i];
    while (i > 0 && less(&it, &h->a[(i - 1) / 2])) {
        place(h, i, h->a[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    place(h, i, it);
}

static void sift_down(struct sim_heap *h, size_t i)
{
    struct sim_heap_item it = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && less(&h->a[c + 1], &h->a[c])) c++;
        if (!less(&h->a[c], &it)) break;
        place(h, i, h->a[c]);
        i = c;
    }
    place(h, i, it);
}

int sim_heap_push(struct sim_heap *h, struct sim_heap_item it)
{
    ASSERT(!h->pos || (it.id < h->max_id && h->pos[it.id] == 0));
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct sim_heap_item *a = realloc(h->a, cap * sizeof(*a));
        if (!a) return ERR_NOMEM;
        h->a = a;
        h->cap = cap;
    }
    h->a[h->n++] = it;
    sift_up(h, h->n - 1);
    return 0;
}

/* Removes the item at index i. */
static void remove_at(struct sim_heap *h, size_t i)
{
    if (h->pos) h->pos[h->a[i].id] = 0;
    struct sim_heap_item last = h->a[--h->n];
    if (i == h->n) return;
    place(h, i, last);
    if (i > 0 && less(&last, &h->a[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct sim_heap_item sim_heap_pop(struct sim_heap *h)
{
    ASSERT(h->n > 0);
    struct sim_heap_item top = h->a[0];
    remove_at(h, 0);
    return top;
}

const struct sim_heap_item *sim_heap_top(const struct sim_heap *h)
{
    return h->n ? &h->a[0] : NULL;
}

int sim_heap_set(struct sim_heap *h, struct sim_heap_item it)
{
    ASSERT(h->pos && it.id < h->max_id);
    size_t p = h->pos[it.id];
    if (p == 0) return sim_heap_push(h, it);
    struct sim_heap_item old = h->a[p - 1];
    h->a[p - 1] = it;
    if (less(&it, &old))
        sift_up(h, p - 1);
    else
        sift_down(h, p - 1);
    return 0;
}

void sim_heap_remove(struct sim_heap *h, uint32_t id)
{
    ASSERT(h->pos && id < h->max_id);
    if (h->pos[id]) remove_at(h, h->pos[id] - 1);
}

const struct sim_heap_item *sim_heap_get(const struct sim_heap *h, uint32_t id)
{
    ASSERT(h->pos && id < h->max_id);
    return h->pos[id] ? &h->a[h->pos[id] - 1] : NULL;
}
