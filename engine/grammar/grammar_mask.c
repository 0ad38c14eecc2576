/* Token masks: a walk of the vocabulary trie under the automaton, memoised per grammar.
 *
 * A state is a set of stacks. Each stack splits into its top GRAMMAR_LOCAL_DEPTH frames (local) and
 * the frames below (its context); stacks with the same context form a group. What a token does
 * while it stays inside a group's local frames depends only on their positions, so a group's walk
 * is cached under those positions: the accepted tokens, and the trie nodes at which the local part
 * can end (the walk reaches the context's sentinel with bytes still to come). At a hit, the cached
 * tokens are OR-ed into the mask and only those nodes' subtrees are walked again, from the real
 * context: typically a closing quote or bracket followed by a few bytes, pruned at the first one.
 * A stack no deeper than the local depth is its own key and needs no second walk. */
#include "engine/grammar/grammar_priv.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

struct cache_entry {
    uint64_t hash;
    int32_t *key; /* (n_key) */
    int32_t n_key;
    /* accepted tokens: a bitset of grammar_mask_words words, or a sorted id list */
    uint32_t *bits;
    int32_t *ids;
    int32_t n_ids;
    /* trie nodes where the local part may end with bytes left; their children's first bytes */
    int32_t *unc;
    struct grammar_byteset *unc_bytes;
    int32_t n_unc;
};

struct grammar_cache {
    struct cache_entry *v;
    uint32_t cap; /* slots (power of two); v[i].key NULL: empty */
    uint32_t n;
    size_t bytes;
    uint64_t hits, misses;
};

static void entry_free(struct cache_entry *e)
{
    free(e->key);
    free(e->bits);
    free(e->ids);
    free(e->unc);
    free(e->unc_bytes);
}

static void cache_clear(struct grammar_cache *c)
{
    for (uint32_t i = 0; i < c->cap; i++)
        if (c->v[i].key) entry_free(&c->v[i]);
    memset(c->v, 0, (size_t)c->cap * sizeof(*c->v));
    c->n = 0;
    c->bytes = 0;
}

void grammar_cache_free(struct grammar_cache *c)
{
    if (!c) return;
    cache_clear(c);
    free(c->v);
    free(c);
}

void grammar_cache_stats(const struct grammar *g, struct grammar_cache_stats *out)
{
    const struct grammar_cache *c = g->cache;
    *out = (struct grammar_cache_stats){0};
    if (!c) return;
    *out = (struct grammar_cache_stats){c->hits, c->misses, c->n, c->bytes};
}

static uint64_t key_hash(const int32_t *k, int32_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)k[i];
        h *= 0x100000001b3ull;
        h ^= h >> 31;
    }
    return h;
}

static struct cache_entry *cache_find(struct grammar_cache *c, const int32_t *k, int32_t n,
                                      uint64_t h)
{
    if (!c->cap) return NULL;
    for (uint32_t i = (uint32_t)h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        struct cache_entry *e = &c->v[i];
        if (!e->key) return NULL;
        if (e->hash == h && e->n_key == n && !memcmp(e->key, k, (size_t)n * sizeof(*k))) return e;
    }
}

/* A slot for a new entry (the table grows at half full). NULL on ERR_NOMEM. */
static struct cache_entry *cache_slot(struct grammar_cache *c, uint64_t h)
{
    if ((c->n + 1) * 2 > c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 64;
        struct cache_entry *v = calloc(cap, sizeof(*v));
        if (!v) return NULL;
        for (uint32_t i = 0; i < c->cap; i++) {
            if (!c->v[i].key) continue;
            uint32_t j = (uint32_t)c->v[i].hash & (cap - 1);
            while (v[j].key) j = (j + 1) & (cap - 1);
            v[j] = c->v[i];
        }
        free(c->v);
        c->v = v;
        c->cap = cap;
    }
    uint32_t i = (uint32_t)h & (c->cap - 1);
    while (c->v[i].key) i = (i + 1) & (c->cap - 1);
    return &c->v[i];
}

/* ---------------------------------------------------------------- the walk */

struct walk_frame {
    int32_t child, end; /* next child to visit, end of the parent's subtree */
    size_t set;         /* the parent's state (offset in a->sets) */
    size_t saved;       /* a->n_sets before the state was built */
    struct grammar_byteset allowed;
};

struct unc_list {
    int32_t *v;
    size_t n, cap;
};

static struct grammar_byteset set_bytes(const struct grammar_arena *a, size_t set)
{
    struct grammar_byteset u = {{0}};
    const struct grammar *g = a->g;
    for (int32_t i = 0; i < a->sets[set]; i++) {
        int32_t f = a->sets[set + 1 + (size_t)i];
        if (f < 0) continue;
        const struct grammar_byteset *s = &g->sets[g->elems[a->fpos[f]].arg];
        for (int w = 0; w < 4; w++) u.w[w] |= s->w[w];
    }
    return u;
}

static int unc_push(struct unc_list *u, int32_t node)
{
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 64;
        int32_t *v = realloc(u->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        u->v = v;
        u->cap = cap;
    }
    u->v[u->n++] = node;
    return 0;
}

/* Walks the children of trie node `root` from state `set` (the state after root's bytes): sets
 * the bit of every token the automaton accepts, and, when unc is given, records the nodes where a
 * SENT member appears with children below. The frame stack is as deep as the longest token. */
static int walk(struct grammar_arena *a, size_t set, int32_t root, uint32_t *mask,
                struct unc_list *unc, struct walk_frame *st)
{
    const struct grammar_vocab *v = a->g->vocab;
    int sp = 0;
    st[sp++] = (struct walk_frame){root + 1, v->end[root], set, a->n_sets, set_bytes(a, set)};
    while (sp > 0) {
        struct walk_frame *top = &st[sp - 1];
        if (top->child >= top->end) {
            a->n_sets = top->saved;
            sp--;
            continue;
        }
        int32_t c = top->child;
        top->child = v->end[c];
        if (!grammar_byteset_has(&top->allowed, v->byte[c])) continue;
        size_t saved = a->n_sets;
        int64_t ns = grammar_set_step(a, top->set, v->byte[c]);
        if (ns < 0) return a->err ? a->err : ERR_NOMEM;
        int32_t n = a->sets[ns];
        if (n == 0) {
            a->n_sets = saved;
            continue;
        }
        for (int32_t t = v->tok0[c]; t < v->tok0[c + 1]; t++) {
            int32_t id = v->toks[t];
            mask[id >> 5] |= 1u << (id & 31);
        }
        bool real = false, sent = false;
        for (int32_t i = 0; i < n; i++) {
            int32_t f = a->sets[ns + 1 + i];
            real |= f >= 0;
            sent |= f == GRAMMAR_F_SENT;
        }
        bool kids = v->end[c] > c + 1;
        if (sent && kids && unc && unc_push(unc, c)) return ERR_NOMEM;
        if (real && kids) {
            st[sp++] =
                (struct walk_frame){c + 1, v->end[c], (size_t)ns, saved, set_bytes(a, (size_t)ns)};
        } else {
            a->n_sets = saved;
        }
    }
    return 0;
}

/* The first bytes of node c's children. */
static struct grammar_byteset child_bytes(const struct grammar_vocab *v, int32_t c)
{
    struct grammar_byteset s = {{0}};
    for (int32_t k = c + 1; k < v->end[c]; k = v->end[k]) grammar_byteset_add(&s, v->byte[k]);
    return s;
}

/* ---------------------------------------------------------------- groups and keys */

struct stack_ref {
    int32_t ctx;          /* context frame (DONE: the whole stack is local) */
    const int32_t *local; /* positions bottom-first */
    int32_t n_local;
};

static int ref_cmp(const void *x, const void *y)
{
    const struct stack_ref *a = x, *b = y;
    if (a->ctx != b->ctx) return a->ctx < b->ctx ? -1 : 1;
    if (a->n_local != b->n_local) return a->n_local < b->n_local ? -1 : 1;
    for (int32_t i = 0; i < a->n_local; i++)
        if (a->local[i] != b->local[i]) return a->local[i] < b->local[i] ? -1 : 1;
    return 0;
}

/* Builds (and caches) the entry of group refs[0..n). */
static int group_entry(struct grammar_matcher *m, struct grammar_arena *a,
                       const struct stack_ref *refs, int32_t n, int32_t *key, uint32_t *tmp,
                       struct walk_frame *st, struct cache_entry **out)
{
    struct grammar *g = m->g;
    const struct grammar_vocab *v = g->vocab;
    int32_t nk = 0;
    key[nk++] = refs[0].ctx == GRAMMAR_F_DONE;
    for (int32_t i = 0; i < n; i++) {
        if (i && !ref_cmp(&refs[i], &refs[i - 1])) continue;
        key[nk++] = refs[i].n_local;
        for (int32_t k = 0; k < refs[i].n_local; k++) key[nk++] = refs[i].local[k];
    }
    uint64_t h = key_hash(key, nk);
    struct grammar_cache *c = g->cache;
    struct cache_entry *e = cache_find(c, key, nk, h);
    if (e) {
        c->hits++;
        *out = e;
        return 0;
    }
    c->misses++;
    /* The local start state: the local frames over the sentinel (or the real bottom). */
    size_t saved = a->n_sets;
    int32_t bottom = refs[0].ctx == GRAMMAR_F_DONE ? GRAMMAR_F_DONE : GRAMMAR_F_SENT;
    if (a->n_sets + (size_t)n + 1 > a->cap_sets) {
        size_t cap = a->cap_sets ? a->cap_sets * 2 : 4096;
        while (cap < a->n_sets + (size_t)n + 1) cap *= 2;
        int32_t *p = realloc(a->sets, cap * sizeof(*p));
        if (!p) return ERR_NOMEM;
        a->sets = p;
        a->cap_sets = cap;
    }
    size_t head = a->n_sets++;
    a->sets[head] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t f = bottom;
        for (int32_t k = 0; k < refs[i].n_local; k++) {
            f = grammar_frame(a, refs[i].local[k], f);
            if (f < 0) return a->err;
        }
        a->sets[a->n_sets++] = f; /* duplicates are harmless: a step deduplicates */
        a->sets[head]++;
    }
    size_t words = grammar_mask_words(v);
    memset(tmp, 0, words * sizeof(*tmp));
    struct unc_list unc = {0};
    int rc = walk(a, head, 0, tmp, bottom == GRAMMAR_F_SENT ? &unc : NULL, st);
    a->n_sets = saved;
    if (rc) {
        free(unc.v);
        return rc;
    }
    if (c->bytes > GRAMMAR_CACHE_BYTES) cache_clear(c);
    e = cache_slot(c, h);
    if (!e) {
        free(unc.v);
        return ERR_NOMEM;
    }
    struct cache_entry ne = {.hash = h, .n_key = nk, .unc = unc.v, .n_unc = (int32_t)unc.n};
    size_t pop = 0;
    for (size_t w = 0; w < words; w++) pop += (size_t)__builtin_popcount(tmp[w]);
    ne.key = malloc((size_t)nk * sizeof(*key));
    if (pop * 32 < (size_t)v->n_vocab) {
        ne.ids = malloc((pop ? pop : 1) * sizeof(int32_t));
        if (ne.ids)
            for (size_t w = 0; w < words; w++)
                for (uint32_t bits = tmp[w]; bits; bits &= bits - 1)
                    ne.ids[ne.n_ids++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
    } else {
        ne.bits = malloc(words * sizeof(*tmp));
        if (ne.bits) memcpy(ne.bits, tmp, words * sizeof(*tmp));
    }
    ne.unc_bytes = malloc((unc.n ? unc.n : 1) * sizeof(*ne.unc_bytes));
    if (!ne.key || (!ne.ids && !ne.bits) || !ne.unc_bytes) {
        entry_free(&ne);
        return ERR_NOMEM;
    }
    memcpy(ne.key, key, (size_t)nk * sizeof(*key));
    for (size_t i = 0; i < unc.n; i++) ne.unc_bytes[i] = child_bytes(v, unc.v[i]);
    *e = ne;
    c->n++;
    c->bytes += (size_t)nk * 4 + (ne.bits ? words * 4 : (size_t)ne.n_ids * 4) +
                unc.n * (4 + sizeof(struct grammar_byteset)) + sizeof(ne);
    *out = e;
    return 0;
}

/* ORs the walk of e's recorded nodes from context frame ctx into mask. */
static int group_context(struct grammar_arena *a, const struct cache_entry *e, int32_t ctx,
                         uint32_t *mask, struct walk_frame *st)
{
    const int32_t *x = grammar_expand(a, ctx);
    if (!x) return a->err ? a->err : ERR_NOMEM;
    size_t saved = a->n_sets, n = (size_t)x[0];
    if (a->n_sets + n + 1 > a->cap_sets) {
        size_t cap = a->cap_sets ? a->cap_sets * 2 : 4096;
        while (cap < a->n_sets + n + 1) cap *= 2;
        int32_t *p = realloc(a->sets, cap * sizeof(*p));
        if (!p) return ERR_NOMEM;
        a->sets = p;
        a->cap_sets = cap;
        x = grammar_expand(a, ctx); /* the pool did not move, but re-fetch for clarity */
    }
    size_t head = a->n_sets;
    a->sets[a->n_sets++] = (int32_t)n;
    for (size_t i = 0; i < n; i++) a->sets[a->n_sets++] = x[1 + i];
    struct grammar_byteset u = set_bytes(a, head);
    int rc = 0;
    for (int32_t i = 0; i < e->n_unc && !rc; i++) {
        const struct grammar_byteset *cb = &e->unc_bytes[i];
        if (!((cb->w[0] & u.w[0]) | (cb->w[1] & u.w[1]) | (cb->w[2] & u.w[2]) |
              (cb->w[3] & u.w[3])))
            continue;
        rc = walk(a, head, e->unc[i], mask, NULL, st);
    }
    a->n_sets = saved;
    return rc;
}

int grammar_matcher_mask(struct grammar_matcher *m, struct grammar_arena *a, uint32_t *mask)
{
    struct grammar *g = m->g;
    const struct grammar_vocab *v = g->vocab;
    size_t words = grammar_mask_words(v);
    memset(mask, 0, words * sizeof(*mask));
    if (!g->cache && !(g->cache = calloc(1, sizeof(*g->cache)))) return ERR_NOMEM;
    grammar_arena_reset(a, g);
    int rc = ERR_NOMEM;
    int32_t n = m->n_stacks;
    struct stack_ref *refs = malloc(((size_t)n + 1) * sizeof(*refs));
    size_t key_cap = 1;
    for (int32_t i = 0; i < n; i++) key_cap += 1 + GRAMMAR_LOCAL_DEPTH;
    int32_t *key = malloc(key_cap * sizeof(*key));
    uint32_t *tmp = malloc(words * sizeof(*tmp));
    struct walk_frame *st = malloc((v->max_len + 2) * sizeof(*st));
    if (!refs || !key || !tmp || !st) goto out;
    for (int32_t i = 0; i < n; i++) {
        int32_t depth = m->off[i + 1] - m->off[i];
        int32_t k = depth < GRAMMAR_LOCAL_DEPTH ? depth : GRAMMAR_LOCAL_DEPTH;
        int32_t ctx = GRAMMAR_F_DONE;
        for (int32_t j = m->off[i]; j < m->off[i + 1] - k; j++) {
            ctx = grammar_frame(a, m->pos[j], ctx);
            if (ctx < 0) {
                rc = a->err;
                goto out;
            }
        }
        refs[i] = (struct stack_ref){ctx, m->pos + m->off[i + 1] - k, k};
    }
    qsort(refs, (size_t)n, sizeof(*refs), ref_cmp);
    rc = 0;
    for (int32_t i = 0; i < n && !rc;) {
        int32_t j = i + 1;
        while (j < n && refs[j].ctx == refs[i].ctx) j++;
        struct cache_entry *e = NULL;
        rc = group_entry(m, a, refs + i, j - i, key, tmp, st, &e);
        if (rc) break;
        if (e->bits)
            for (size_t w = 0; w < words; w++) mask[w] |= e->bits[w];
        else
            for (int32_t t = 0; t < e->n_ids; t++) mask[e->ids[t] >> 5] |= 1u << (e->ids[t] & 31);
        if (refs[i].ctx != GRAMMAR_F_DONE && e->n_unc)
            rc = group_context(a, e, refs[i].ctx, mask, st);
        i = j;
    }
    if (rc) goto out;
    if (m->done)
        for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    size_t pop = 0;
    for (size_t w = 0; w < words; w++) pop += (size_t)__builtin_popcount(mask[w]);
    rc = pop > INT32_MAX ? INT32_MAX : (int)pop;
out:
    free(refs);
    free(key);
    free(tmp);
    free(st);
    return rc;
}
