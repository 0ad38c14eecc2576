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
 * heap's owner guards it. hack/lint.sh refuses another heap implementation in the tree. */
#ifndef CINFER_COMMON_HEAP_H
#define CINFER_COMMON_HEAP_H

#include "common/err.h"

#include <stddef.h>
#include <stdlib.h>

#define HEAP_DEFINE(name, type, less)                                                              \
    struct name {                                                                                  \
        type *v;                                                                                   \
        size_t n, cap;                                                                             \
    };                                                                                             \
                                                                                                   \
    static inline int name##_push(struct name *h, type x)                                          \
    {                                                                                              \
        if (h->n == h->cap) {                                                                      \
            size_t cap = h->cap ? h->cap * 2 : 64;                                                 \
            type *v = realloc(h->v, cap * sizeof(*v));                                             \
            if (!v) return ERR_NOMEM;                                                              \
            h->v = v;                                                                              \
            h->cap = cap;                                                                          \
        }                                                                                          \
        size_t i = h->n++;                                                                         \
        while (i > 0) { /* sift up: move parents down into the hole */                             \
            size_t parent = (i - 1) / 2;                                                           \
            if (!less(&x, &h->v[parent])) break;                                                   \
            h->v[i] = h->v[parent];                                                                \
            i = parent;                                                                            \
        }                                                                                          \
        h->v[i] = x;                                                                               \
        return 0;                                                                                  \
    }                                                                                              \
                                                                                                   \
    static inline type name##_pop(struct name *h)                                                  \
    {                                                                                              \
        type top = h->v[0];                                                                        \
        type last = h->v[--h->n];                                                                  \
        size_t i = 0;                                                                              \
        for (;;) { /* sift down: move the lesser child up into the hole */                         \
            size_t c = 2 * i + 1;                                                                  \
            if (c >= h->n) break;                                                                  \
            if (c + 1 < h->n && less(&h->v[c + 1], &h->v[c])) c++;                                 \
            if (!less(&h->v[c], &last)) break;                                                     \
            h->v[i] = h->v[c];                                                                     \
            i = c;                                                                                 \
        }                                                                                          \
        if (h->n) h->v[i] = last;                                                                  \
        return top;                                                                                \
    }                                                                                              \
                                                                                                   \
    static inline void name##_fini(struct name *h)                                                 \
    {                                                                                              \
        free(h->v);                                                                                \
        h->v = NULL;                                                                               \
        h->n = h->cap = 0;                                                                         \
    }

#endif
