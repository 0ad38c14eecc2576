/* The pushdown automaton: stacks as hash-consed frame chains in a scratch arena, their expansion
 * to terminal tops (memoised per frame), one byte's step over a set of stacks, and the matcher that
 * keeps a sequence's state between steps as plain position arrays. */
#include "engine/grammar/grammar_priv.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_MAX_FRAMES (1 << 22)

struct grammar_arena *grammar_arena_new(void)
{
    return calloc(1, sizeof(struct grammar_arena));
}

void grammar_arena_free(struct grammar_arena *a)
{
    if (!a) return;
    free(a->fpos);
    free(a->fpar);
    free(a->succ);
    free(a->exp);
    free(a->mark);
    free(a->smark);
    free(a->ht);
    free(a->pool);
    free(a->sets);
    free(a);
}

void grammar_arena_reset(struct grammar_arena *a, const struct grammar *g)
{
    a->g = g;
    a->n = 0;
    a->n_pool = 0;
    a->n_sets = 0;
    a->depth = 0;
    a->err = 0;
    if (a->ht) memset(a->ht, 0xff, a->ht_cap * sizeof(*a->ht));
}

static int arena_fail(struct grammar_arena *a, int rc)
{
    if (!a->err) a->err = rc;
    return rc;
}

static uint32_t frame_hash(int32_t pos, int32_t parent)
{
    uint64_t h = (uint64_t)(uint32_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)parent;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h ^ (h >> 32));
}

static int arena_grow(struct grammar_arena *a)
{
    int32_t cap = a->cap ? a->cap * 2 : 4096;
    if (cap > ARENA_MAX_FRAMES) return arena_fail(a, ERR_TOO_BIG);
    int32_t *p;
#define GROW(field)                                                                                \
    p = realloc(a->field, (size_t)cap * sizeof(*p));                                               \
    if (!p) return arena_fail(a, ERR_NOMEM);                                                       \
    a->field = p;
    GROW(fpos)
    GROW(fpar)
    GROW(succ)
    GROW(exp)
#undef GROW
    uint32_t *m = realloc(a->mark, (size_t)cap * sizeof(*m));
    if (!m) return arena_fail(a, ERR_NOMEM);
    memset(m + a->cap, 0, (size_t)(cap - a->cap) * sizeof(*m));
    a->mark = m;
    m = realloc(a->smark, (size_t)cap * sizeof(*m));
    if (!m) return arena_fail(a, ERR_NOMEM);
    memset(m + a->cap, 0, (size_t)(cap - a->cap) * sizeof(*m));
    a->smark = m;
    a->cap = cap;
    /* The hash table at twice the frame capacity, rebuilt. */
    uint32_t hc = (uint32_t)cap * 2;
    int32_t *ht = malloc(hc * sizeof(*ht));
    if (!ht) return arena_fail(a, ERR_NOMEM);
    memset(ht, 0xff, hc * sizeof(*ht));
    for (int32_t f = 0; f < a->n; f++) {
        uint32_t i = frame_hash(a->fpos[f], a->fpar[f]) & (hc - 1);
        while (ht[i] >= 0) i = (i + 1) & (hc - 1);
        ht[i] = f;
    }
    free(a->ht);
    a->ht = ht;
    a->ht_cap = hc;
    return 0;
}

int32_t grammar_frame(struct grammar_arena *a, int32_t pos, int32_t parent)
{
    if (a->n == a->cap && arena_grow(a)) return -1;
    uint32_t mask = a->ht_cap - 1, i = frame_hash(pos, parent) & mask;
    for (;; i = (i + 1) & mask) {
        int32_t f = a->ht[i];
        if (f < 0) break;
        if (a->fpos[f] == pos && a->fpar[f] == parent) return f;
    }
    int32_t f = a->n++;
    a->fpos[f] = pos;
    a->fpar[f] = parent;
    a->succ[f] = -1;
    a->exp[f] = -1;
    a->ht[i] = f;
    return f;
}

static int pool_reserve(struct grammar_arena *a, size_t more)
{
    if (a->n_pool + more <= a->cap_pool) return 0;
    size_t cap = a->cap_pool ? a->cap_pool : 4096;
    while (cap < a->n_pool + more) cap *= 2;
    if (cap > (size_t)1 << 28) return arena_fail(a, ERR_TOO_BIG);
    int32_t *p = realloc(a->pool, cap * sizeof(*p));
    if (!p) return arena_fail(a, ERR_NOMEM);
    a->pool = p;
    a->cap_pool = cap;
    return 0;
}

/* Appends member x to the list being built at pool offset `head` (count first), deduplicated by
 * the current stamp (pseudo members DONE and SENT are deduplicated by a scan: they are rare). */
static int list_add(struct grammar_arena *a, size_t head, int32_t x)
{
    if (x >= 0) {
        if (a->mark[x] == a->stamp) return 0;
        a->mark[x] = a->stamp;
    } else {
        int32_t n = a->pool[head];
        for (int32_t i = 0; i < n; i++)
            if (a->pool[head + 1 + (size_t)i] == x) return 0;
    }
    if (pool_reserve(a, 1)) return a->err;
    a->pool[a->n_pool++] = x;
    a->pool[head]++;
    return 0;
}

static void next_stamp(struct grammar_arena *a)
{
    if (++a->stamp == 0) {
        memset(a->mark, 0, (size_t)a->cap * sizeof(*a->mark));
        a->stamp = 1;
    }
}

static void next_sstamp(struct grammar_arena *a)
{
    if (++a->sstamp == 0) {
        memset(a->smark, 0, (size_t)a->cap * sizeof(*a->smark));
        a->sstamp = 1;
    }
}

/* Adds the expansion of (pos, parent) to the list at `head`. Recursion follows rule references at
 * the start of alternatives and pops at their ends: finite, because the grammar has no left
 * recursion (gb_check), and bounded by GRAMMAR_MAX_DEPTH besides. The list is built without
 * memoisation of the inner calls (their stamps would collide); grammar_expand memoises per
 * frame. */
static int expand_into(struct grammar_arena *a, size_t head, int32_t pos, int32_t parent)
{
    const struct grammar *g = a->g;
    if (++a->depth > GRAMMAR_MAX_DEPTH * 4) {
        a->depth--;
        return arena_fail(a, ERR_TOO_BIG);
    }
    int rc = 0;
    const struct grammar_elem *e = &g->elems[pos];
    if (e->type == GRAMMAR_E_BYTES) {
        int32_t f = grammar_frame(a, pos, parent);
        rc = f < 0 ? a->err : list_add(a, head, f);
    } else if (e->type == GRAMMAR_E_END) {
        if (parent < 0)
            rc = list_add(a, head, parent); /* DONE or SENT */
        else
            rc = expand_into(a, head, a->fpos[parent], a->fpar[parent]);
    } else {
        int32_t ret = parent;
        if (g->elems[pos + 1].type != GRAMMAR_E_END) { /* not a tail call: remember where */
            ret = grammar_frame(a, pos + 1, parent);
            if (ret < 0) rc = a->err;
        }
        const struct grammar_rule *r = &g->rules[e->arg];
        for (int32_t k = 0; k < r->n_alts && !rc; k++)
            rc = expand_into(a, head, g->alts[r->alt0 + k], ret);
    }
    a->depth--;
    return rc;
}

/* Expands (pos, parent) into a new pool list; its offset, or -1. */
static int64_t expand_new(struct grammar_arena *a, int32_t pos, int32_t parent)
{
    if (pool_reserve(a, 1)) return -1;
    size_t head = a->n_pool++;
    a->pool[head] = 0;
    next_stamp(a);
    if (expand_into(a, head, pos, parent)) return -1;
    return (int64_t)head;
}

const int32_t *grammar_expand(struct grammar_arena *a, int32_t f)
{
    if (a->exp[f] < 0) {
        int64_t off = expand_new(a, a->fpos[f], a->fpar[f]);
        if (off < 0) return NULL;
        a->exp[f] = (int32_t)off;
    }
    return a->pool + a->exp[f];
}

const int32_t *grammar_succ(struct grammar_arena *a, int32_t f)
{
    if (a->succ[f] < 0) {
        int64_t off = expand_new(a, a->fpos[f] + 1, a->fpar[f]);
        if (off < 0) return NULL;
        if (off > INT32_MAX) return arena_fail(a, ERR_TOO_BIG), NULL;
        a->succ[f] = (int32_t)off;
    }
    return a->pool + a->succ[f];
}

/* ---------------------------------------------------------------- sets */

static int sets_reserve(struct grammar_arena *a, size_t more)
{
    if (a->n_sets + more <= a->cap_sets) return 0;
    size_t cap = a->cap_sets ? a->cap_sets : 4096;
    while (cap < a->n_sets + more) cap *= 2;
    if (cap > (size_t)1 << 28) return arena_fail(a, ERR_TOO_BIG);
    int32_t *p = realloc(a->sets, cap * sizeof(*p));
    if (!p) return arena_fail(a, ERR_NOMEM);
    a->sets = p;
    a->cap_sets = cap;
    return 0;
}

/* Appends the members of pool list `src` to the set being built at a->sets[head]. */
static int set_merge(struct grammar_arena *a, size_t head, const int32_t *src)
{
    int32_t n = src[0];
    if (sets_reserve(a, (size_t)n)) return a->err;
    for (int32_t i = 1; i <= n; i++) {
        int32_t x = src[i];
        if (x >= 0) {
            if (a->smark[x] == a->sstamp) continue;
            a->smark[x] = a->sstamp;
        } else {
            bool seen = false;
            for (int32_t k = 0; k < a->sets[head] && !seen; k++)
                seen = a->sets[head + 1 + (size_t)k] == x;
            if (seen) continue;
        }
        a->sets[a->n_sets++] = x;
        a->sets[head]++;
    }
    return 0;
}

int64_t grammar_set_step(struct grammar_arena *a, size_t in_off, unsigned b)
{
    if (sets_reserve(a, 1)) return -1;
    size_t head = a->n_sets++;
    a->sets[head] = 0;
    int32_t n = a->sets[in_off];
    const struct grammar *g = a->g;
    next_sstamp(a);
    for (int32_t i = 0; i < n; i++) {
        int32_t f = a->sets[in_off + 1 + (size_t)i];
        if (f < 0) continue;
        const struct grammar_elem *e = &g->elems[a->fpos[f]];
        if (!grammar_byteset_has(&g->sets[e->arg], b)) continue;
        const int32_t *s = grammar_succ(a, f);
        if (!s) return -1;
        if (set_merge(a, head, s)) return -1;
    }
    return (int64_t)head;
}

int64_t grammar_set_start(struct grammar_arena *a)
{
    const struct grammar *g = a->g;
    const struct grammar_rule *r = &g->rules[g->root];
    if (sets_reserve(a, 1)) return -1;
    size_t head = a->n_sets++;
    a->sets[head] = 0;
    next_sstamp(a);
    for (int32_t k = 0; k < r->n_alts; k++) {
        int32_t f = grammar_frame(a, g->alts[r->alt0 + k], GRAMMAR_F_DONE);
        if (f < 0) return -1;
        const int32_t *s = grammar_expand(a, f);
        if (!s || set_merge(a, head, s)) return -1;
    }
    return (int64_t)head;
}
