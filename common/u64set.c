/* Open-addressing set of 64-bit keys (see u64set.h). */
#include "common/u64set.h"

#include "common/err.h"

#include <stdlib.h>

static size_t home(const struct u64set *s, uint64_t key)
{
    /* Multiply by 2^64/phi and fold the high half in, so keys that differ only in their high bits
     * still spread over the low bits the mask keeps. */
    uint64_t x = key * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(x ^ (x >> 32)) & s->mask;
}

void u64set_init(struct u64set *s, size_t max)
{
    *s = (struct u64set){.max = max};
}

void u64set_fini(struct u64set *s)
{
    if (!s) return;
    free(s->slots);
    s->slots = NULL;
    s->mask = 0;
    s->n = 0;
}

/* Moves every key into a table of `cap` slots (a power of two > 2n). */
static int rehash(struct u64set *s, size_t cap)
{
    uint64_t *slots = malloc(cap * sizeof(*slots));
    if (!slots) return ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) slots[i] = U64SET_EMPTY;
    uint64_t *old = s->slots;
    size_t old_cap = old ? s->mask + 1 : 0;
    s->slots = slots;
    s->mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i] == U64SET_EMPTY) continue;
        size_t j = home(s, old[i]);
        while (slots[j] != U64SET_EMPTY) j = (j + 1) & s->mask;
        slots[j] = old[i];
    }
    free(old);
    return 0;
}

int u64set_reserve(struct u64set *s, size_t n)
{
    size_t cap = 16;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof(uint64_t)) return ERR_NOMEM;
        cap <<= 1;
    }
    if (s->slots && cap <= s->mask + 1) return 0;
    return rehash(s, cap);
}

bool u64set_has(const struct u64set *s, uint64_t key)
{
    if (!s->slots || key == U64SET_EMPTY) return false;
    for (size_t i = home(s, key);; i = (i + 1) & s->mask) {
        if (s->slots[i] == key) return true;
        if (s->slots[i] == U64SET_EMPTY) return false;
    }
}

int u64set_add(struct u64set *s, uint64_t key)
{
    if (key == U64SET_EMPTY) return ERR_INVAL;
    if (u64set_has(s, key)) return 0;
    if (s->n >= s->max) return ERR_TOO_BIG;
    if (!s->slots || (s->n + 1) * 2 > s->mask + 1) {
        int rc = u64set_reserve(s, s->n + 1 > 8 ? 2 * (s->n + 1) : 8);
        if (rc) return rc;
    }
    size_t i = home(s, key);
    while (s->slots[i] != U64SET_EMPTY) i = (i + 1) & s->mask;
    s->slots[i] = key;
    s->n++;
    return 1;
}

/* Backward-shift deletion: a later key of the probe run moves into the hole unless its home lies
 * cyclically in (hole, j], so every remaining key stays reachable. */
bool u64set_del(struct u64set *s, uint64_t key)
{
    if (!s->slots || key == U64SET_EMPTY) return false;
    size_t i = home(s, key);
    while (s->slots[i] != key) {
        if (s->slots[i] == U64SET_EMPTY) return false;
        i = (i + 1) & s->mask;
    }
    for (size_t j = (i + 1) & s->mask; s->slots[j] != U64SET_EMPTY; j = (j + 1) & s->mask) {
        size_t h = home(s, s->slots[j]);
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays) continue;
        s->slots[i] = s->slots[j];
        i = j;
    }
    s->slots[i] = U64SET_EMPTY;
    s->n--;
    return true;
}

void u64set_clear(struct u64set *s)
{
    if (s->slots)
        for (size_t i = 0; i <= s->mask; i++) s->slots[i] = U64SET_EMPTY;
    s->n = 0;
}

bool u64set_next(const struct u64set *s, size_t *pos, uint64_t *key)
{
    if (!s->slots) return false;
    for (size_t i = *pos; i <= s->mask; i++) {
        if (s->slots[i] != U64SET_EMPTY) {
            *key = s->slots[i];
            *pos = i + 1;
            return true;
        }
    }
    *pos = s->mask + 1;
    return false;
}
