/* A set of 64-bit keys: open addressing with linear probing and backward-shift deletion (no
 * tombstones), load at most 1/2, with a required bound on the number of keys. Keys are already
 * well mixed (KV block hashes) and are used as their own hash after one multiply-shift. The one key
 * it cannot hold is U64SET_EMPTY (all ones: never a block hash, whose top bit is clear).
 * Not thread-safe: its owner guards it. */
#ifndef CINFER_COMMON_U64SET_H
#define CINFER_COMMON_U64SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define U64SET_EMPTY     UINT64_MAX
#define U64SET_UNBOUNDED SIZE_MAX /* the explicit name for "no bound": only for keys we make */

struct u64set {
    uint64_t *slots; /* (mask + 1) keys or U64SET_EMPTY; NULL until the first insert */
    size_t mask;
    size_t n;   /* keys held */
    size_t max; /* insertions past this many keys fail with ERR_TOO_BIG */
};

/* An empty set of at most `max` keys (no allocation). */
void u64set_init(struct u64set *s, size_t max);
/* Frees the table; the set is empty and may be reused. NULL-safe. */
void u64set_fini(struct u64set *s);
/* Allocates room for n keys now (so later inserts up to n do not allocate). 0 or ERR_NOMEM. */
int u64set_reserve(struct u64set *s, size_t n);

/* Adds `key`. Returns 1 when added, 0 when already present, ERR_INVAL for U64SET_EMPTY,
 * ERR_TOO_BIG when the set holds `max` keys, ERR_NOMEM (nothing changed). */
int u64set_add(struct u64set *s, uint64_t key);
/* Removes `key`; true when it was present. */
bool u64set_del(struct u64set *s, uint64_t key);
bool u64set_has(const struct u64set *s, uint64_t key);
/* Removes every key, keeping the table. */
void u64set_clear(struct u64set *s);

/* Iteration in table order: start with *pos = 0; returns false past the last key. The set must
 * not change meanwhile. */
bool u64set_next(const struct u64set *s, size_t *pos, uint64_t *key);

#endif
