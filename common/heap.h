/* The binary min-heap: one copy of the algorithm for every element type. HEAP_DEFINE(name, type,
 * less) defines, in the including file,
 *
 *   struct name { type *v; size_t n, cap; };          zero-initialised is empty
 *   static inline int  name_push(struct name *h, type x);  0, or ERR_NOMEM (nothing changed)
 *   static inline type name_pop(struct name *h);           removes the least element; h->n > 0
 *   static inline void name_fini(struct name *h);          frees the array, empties the heap
 *
 * where less(const type *a, const type *b) is a strict weak order. Elements that compare equal
 * come out in an order fixed by the sequence of pushes and pops (the algorithm is deterministic),
 * not by their insertion order. Generated rather than generic (void * plus a size and a function
 * pointer) so that the tokenizer's merge loop keeps its inlined comparisons. Not thread-safe: the
 * heap's owner guards it. HEAP_DEFINE_INDEXED (below) is the same heap with a position index.
 * hack/lint.sh refuses another heap implementation in the tree. */
#ifndef CINFER_COMMON_HEAP_H
#define CINFER_COMMON_HEAP_H

#include "common/assert.h"
#include "common/err.h"

#include <stddef.h>
#include <stdlib.h>

/* The algorithm, once: sift the hole at i up (towards the root) or down until x fits there.
 * PLACE(h, i) runs after each element lands at index i (the indexed heap records positions;
 * the plain heap does nothing). */
#define HEAP_SIFT_UP_(h, i, x, less, PLACE)                                                        \
    do {                                                                                           \
        while ((i) > 0) { /* move parents down into the hole */                                    \
            size_t parent_ = ((i)-1) / 2;                                                          \
            if (!less(&(x), &(h)->v[parent_])) break;                                              \
            (h)->v[i] = (h)->v[parent_];                                                           \
            PLACE(h, i);                                                                           \
            (i) = parent_;                                                                         \
        }                                                                                          \
        (h)->v[i] = (x);                                                                           \
        PLACE(h, i);                                                                               \
    } while (0)

#define HEAP_SIFT_DOWN_(h, i, x, less, PLACE)                                                      \
    do {                                                                                           \
        for (;;) { /* move the lesser child up into the hole */                                    \
            size_t c_ = 2 * (i) + 1;                                                               \
            if (c_ >= (h)->n) break;                                                               \
            if (c_ + 1 < (h)->n && less(&(h)->v[c_ + 1], &(h)->v[c_])) c_++;                       \
            if (!less(&(h)->v[c_], &(x))) break;                                                   \
            (h)->v[i] = (h)->v[c_];                                                                \
            PLACE(h, i);                                                                           \
            (i) = c_;                                                                              \
        }                                                                                          \
        (h)->v[i] = (x);                                                                           \
        PLACE(h, i);                                                                               \
    } while (0)

#define HEAP_PLACE_NONE_(h, i) ((void)0)

#define HEAP_GROW_(h)                                                                              \
    do {                                                                                           \
        if ((h)->n == (h)->cap) {                                                                  \
            size_t cap_ = (h)->cap ? (h)->cap * 2 : 64;                                            \
            void *v_ = realloc((h)->v, cap_ * sizeof(*(h)->v));                                    \
            if (!v_) return ERR_NOMEM;                                                             \
            (h)->v = v_;                                                                           \
            (h)->cap = cap_;                                                                       \
        }                                                                                          \
    } while (0)

#define HEAP_DEFINE(name, type, less)                                                              \
    struct name {                                                                                  \
        type *v;                                                                                   \
        size_t n, cap;                                                                             \
    };                                                                                             \
                                                                                                   \
    static inline int name##_push(struct name *h, type x)                                          \
    {                                                                                              \
        HEAP_GROW_(h);                                                                             \
        size_t i = h->n++;                                                                         \
        HEAP_SIFT_UP_(h, i, x, less, HEAP_PLACE_NONE_);                                            \
        return 0;                                                                                  \
    }                                                                                              \
                                                                                                   \
    static inline type name##_pop(struct name *h)                                                  \
    {                                                                                              \
        type top = h->v[0];                                                                        \
        type last = h->v[--h->n];                                                                  \
        size_t i = 0;                                                                              \
        if (h->n) HEAP_SIFT_DOWN_(h, i, last, less, HEAP_PLACE_NONE_);                             \
        return top;                                                                                \
    }                                                                                              \
                                                                                                   \
    static inline void name##_fini(struct name *h)                                                 \
    {                                                                                              \
        free(h->v);                                                                                \
        h->v = NULL;                                                                               \
        h->n = h->cap = 0;                                                                         \
    }

/* HEAP_DEFINE_INDEXED(name, type, less, id_of) adds a position index, so that an element can be
 * found, re-keyed or removed by its id in O(log n): id_of(const type *) gives an id < max_id, at
 * most one element per id. With max_id 0 the index is off (a plain heap; only push/pop/top).
 *
 *   struct name { type *v; size_t n, cap; size_t *pos; size_t max_id; };
 *   static inline int  name_init(struct name *h, size_t max_id);   0 or ERR_NOMEM
 *   static inline int  name_push(struct name *h, type x);          0 or ERR_NOMEM; x's id absent
 *   static inline type name_pop(struct name *h);                   h->n > 0
 *   static inline const type *name_top(const struct name *h);      NULL when empty
 *   static inline int  name_set(struct name *h, type x);           insert or re-key x's id
 *   static inline void name_remove(struct name *h, size_t id);     no-op when absent
 *   static inline const type *name_get(const struct name *h, size_t id);   NULL when absent
 *   static inline void name_fini(struct name *h);
 *
 * Pointers returned are borrowed until the next change. */
#define HEAP_DEFINE_INDEXED(name, type, less, id_of)                                               \
    struct name {                                                                                  \
        type *v;                                                                                   \
        size_t n, cap;                                                                             \
        size_t *pos; /* pos[id] = index + 1, 0 = absent; NULL for a plain heap */                  \
        size_t max_id;                                                                             \
    };                                                                                             \
    static inline size_t name##_id_(const type *x)                                                 \
    {                                                                                              \
        return (size_t)id_of(x);                                                                   \
    }                                                                                              \
    static inline void name##_place_(struct name *h, size_t i)                                     \
    {                                                                                              \
        if (h->pos) h->pos[name##_id_(&h->v[i])] = i + 1;                                          \
    }                                                                                              \
    static inline void name##_up_(struct name *h, size_t i, type x)                                \
    {                                                                                              \
        HEAP_SIFT_UP_(h, i, x, less, name##_place_);                                               \
    }                                                                                              \
    static inline void name##_down_(struct name *h, size_t i, type x)                              \
    {                                                                                              \
        HEAP_SIFT_DOWN_(h, i, x, less, name##_place_);                                             \
    }                                                                                              \
    static inline int name##_init(struct name *h, size_t max_id)                                   \
    {                                                                                              \
        *h = (struct name){0};                                                                     \
        if (max_id == 0) return 0;                                                                 \
        h->pos = calloc(max_id, sizeof(*h->pos));                                                  \
        if (!h->pos) return ERR_NOMEM;                                                             \
        h->max_id = max_id;                                                                        \
        return 0;                                                                                  \
    }                                                                                              \
    static inline void name##_fini(struct name *h)                                                 \
    {                                                                                              \
        free(h->v);                                                                                \
        free(h->pos);                                                                              \
        *h = (struct name){0};                                                                     \
    }                                                                                              \
    static inline int name##_push(struct name *h, type x)                                          \
    {                                                                                              \
        ASSERT(!h->pos || (name##_id_(&x) < h->max_id && h->pos[name##_id_(&x)] == 0));            \
        HEAP_GROW_(h);                                                                             \
        name##_up_(h, h->n++, x);                                                                  \
        return 0;                                                                                  \
    }                                                                                              \
    /* Removes the element at index i: the last one fills the hole and moves up or down. */        \
    static inline void name##_remove_at_(struct name *h, size_t i)                                 \
    {                                                                                              \
        if (h->pos) h->pos[name##_id_(&h->v[i])] = 0;                                              \
        type last = h->v[--h->n];                                                                  \
        if (i == h->n) return;                                                                     \
        if (i > 0 && less(&last, &h->v[(i - 1) / 2]))                                              \
            name##_up_(h, i, last);                                                                \
        else                                                                                       \
            name##_down_(h, i, last);                                                              \
    }                                                                                              \
    static inline type name##_pop(struct name *h)                                                  \
    {                                                                                              \
        ASSERT(h->n > 0);                                                                          \
        type top = h->v[0];                                                                        \
        name##_remove_at_(h, 0);                                                                   \
        return top;                                                                                \
    }                                                                                              \
    static inline const type *name##_top(const struct name *h)                                     \
    {                                                                                              \
        return h->n ? &h->v[0] : NULL;                                                             \
    }                                                                                              \
    static inline int name##_set(struct name *h, type x)                                           \
    {                                                                                              \
        size_t id = name##_id_(&x);                                                                \
        ASSERT(h->pos &&id < h->max_id);                                                           \
        size_t p = h->pos[id];                                                                     \
        if (p == 0) return name##_push(h, x);                                                      \
        type old = h->v[p - 1];                                                                    \
        if (less(&x, &old))                                                                        \
            name##_up_(h, p - 1, x);                                                               \
        else                                                                                       \
            name##_down_(h, p - 1, x);                                                             \
        return 0;                                                                                  \
    }                                                                                              \
    static inline void name##_remove(struct name *h, size_t id)                                    \
    {                                                                                              \
        ASSERT(h->pos &&id < h->max_id);                                                           \
        if (h->pos[id]) name##_remove_at_(h, h->pos[id] - 1);                                      \
    }                                                                                              \
    static inline const type *name##_get(const struct name *h, size_t id)                          \
    {                                                                                              \
        ASSERT(h->pos &&id < h->max_id);                                                           \
        return h->pos[id] ? &h->v[h->pos[id] - 1] : NULL;                                          \
    }

#endif
