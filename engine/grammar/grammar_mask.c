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

/* ---------------------------------------------------------------- the local automaton */

/* The states a cache-miss walk meets, memoised for the grammar's life: a state is the set of
 * stacks over the sentinel (or the real bottom) after some bytes of a token, interned in a
 * persistent arena of its own, and its transitions by byte are kept once computed. Local walks
 * depend only on those stacks, so after the first walks of a grammar a miss costs a table lookup
 * per trie node instead of a pushdown step: the walk of a state that accepts most of the
 * vocabulary (the inside of a string) drops from a set step per node to one probe. */
#define DFA_DEAD       (-1)
#define DFA_F_REAL     1u        /* a member can consume more bytes */
#define DFA_F_SENT     2u        /* a member reached the sentinel: the local part may end here */
#define DFA_MAX_FRAMES (1 << 20) /* frames of the local arena before it is cleared */
#define DFA_MAX_ROWS   8192      /* states with a dense transition row (1 KiB each) */
#define DFA_UNKNOWN    (-2)      /* a row's transition not yet computed */

struct dfa_trans {
    uint32_t key; /* state << 8 | byte, plus one (0: empty) */
    int32_t to;   /* next state or DFA_DEAD */
};

struct grammar_dfa {
    struct grammar_arena *la; /* frames over SENT / DONE, never reset while the DFA lives */
    int32_t *mem;             /* members of all states, sorted per state */
    size_t n_mem, cap_mem;
    int32_t *off; /* (n + 1) state i is mem[off[i] .. off[i + 1]) */
    struct grammar_byteset *allowed;
    uint8_t *flags;
    uint64_t *hash;
    int32_t **row; /* (cap) dense transitions of the first DFA_MAX_ROWS states, else NULL */
    int32_t n_rows;
    int32_t n, cap;
    int32_t *ht; /* state interning table (ht_cap slots, -1 empty) */
    uint32_t ht_cap;
    struct dfa_trans *tr; /* transitions (tr_cap slots) */
    uint32_t n_tr, tr_cap;
};

struct grammar_cache {
    struct grammar_dfa dfa;
    struct cache_entry *v;
    uint32_t cap; /* slots (power of two); v[i].key NULL: empty */
    uint32_t n;
    size_t bytes;
    uint64_t hits, misses;
};

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

static void dfa_free(struct grammar_dfa *d)
{
    grammar_arena_free(d->la);
    free(d->mem);
    free(d->off);
    free(d->allowed);
    free(d->flags);
    free(d->hash);
    for (int32_t i = 0; i < d->n; i++) free(d->row[i]);
    free(d->row);
    free(d->ht);
    free(d->tr);
    *d = (struct grammar_dfa){0};
}

/* Forgets every state (between masks only: walks hold state ids). */
static void dfa_clear(struct grammar_dfa *d, const struct grammar *g)
{
    if (d->la) grammar_arena_reset(d->la, g);
    for (int32_t i = 0; i < d->n; i++) {
        free(d->row[i]);
        d->row[i] = NULL;
    }
    d->n_rows = 0;
    d->n = 0;
    d->n_mem = 0;
    d->n_tr = 0;
    if (d->ht) memset(d->ht, 0xff, d->ht_cap * sizeof(*d->ht));
    if (d->tr) memset(d->tr, 0, d->tr_cap * sizeof(*d->tr));
}

static size_t dfa_bytes(const struct grammar_dfa *d)
{
    size_t per = sizeof(int32_t) + sizeof(struct grammar_byteset) + 1 + sizeof(uint64_t);
    return d->cap_mem * sizeof(int32_t) + (size_t)d->cap * per + d->ht_cap * sizeof(int32_t) +
           d->tr_cap * sizeof(struct dfa_trans) + (size_t)d->n_rows * 256 * sizeof(int32_t) +
           (d->la ? (size_t)d->la->cap * 28 : 0);
}

static uint32_t slot_of(uint64_t h, uint32_t cap)
{
    return (uint32_t)((h * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static int dfa_init(struct grammar_dfa *d, const struct grammar *g)
{
    if (d->la) return 0;
    if (!(d->la = grammar_arena_new())) return ERR_NOMEM;
    grammar_arena_reset(d->la, g);
    return 0;
}

static int dfa_grow_states(struct grammar_dfa *d)
{
    int32_t cap = d->cap ? d->cap * 2 : 256;
    if (cap > (1 << 23)) return ERR_TOO_BIG; /* transition keys hold 24-bit states */
    int32_t *off = realloc(d->off, ((size_t)cap + 1) * sizeof(*off));
    if (!off) return ERR_NOMEM;
    d->off = off;
    struct grammar_byteset *al = realloc(d->allowed, (size_t)cap * sizeof(*al));
    if (!al) return ERR_NOMEM;
    d->allowed = al;
    uint8_t *fl = realloc(d->flags, (size_t)cap);
    if (!fl) return ERR_NOMEM;
    d->flags = fl;
    uint64_t *hs = realloc(d->hash, (size_t)cap * sizeof(*hs));
    if (!hs) return ERR_NOMEM;
    d->hash = hs;
    int32_t **rw = realloc(d->row, (size_t)cap * sizeof(*rw));
    if (!rw) return ERR_NOMEM;
    d->row = rw;
    d->cap = cap;
    uint32_t hc = (uint32_t)cap * 2;
    int32_t *ht = malloc(hc * sizeof(*ht));
    if (!ht) return ERR_NOMEM;
    memset(ht, 0xff, hc * sizeof(*ht));
    for (int32_t i = 0; i < d->n; i++) {
        uint32_t j = slot_of(d->hash[i], hc);
        while (ht[j] >= 0) j = (j + 1) & (hc - 1);
        ht[j] = i;
    }
    free(d->ht);
    d->ht = ht;
    d->ht_cap = hc;
    return 0;
}

/* The state of members x[0..n) (frames of d->la; sorted and deduplicated in place). Writes its
 * id to *out. 0, ERR_NOMEM, ERR_TOO_BIG. */
static int dfa_intern(struct grammar_dfa *d, int32_t *x, int32_t n, int32_t *out)
{
    for (int32_t i = 1; i < n; i++) { /* insertion sort: states hold a few stacks */
        int32_t v = x[i], j = i;
        while (j > 0 && x[j - 1] > v) {
            x[j] = x[j - 1];
            j--;
        }
        x[j] = v;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (!m || x[m - 1] != x[i]) x[m++] = x[i];
    uint64_t h = key_hash(x, m);
    if (d->ht_cap)
        for (uint32_t j = slot_of(h, d->ht_cap);; j = (j + 1) & (d->ht_cap - 1)) {
            int32_t s = d->ht[j];
            if (s < 0) break;
            if (d->hash[s] == h && d->off[s + 1] - d->off[s] == m &&
                !memcmp(d->mem + d->off[s], x, (size_t)m * sizeof(*x))) {
                *out = s;
                return 0;
            }
        }
    if ((d->n + 1) * 2 > d->cap) {
        int rc = dfa_grow_states(d);
        if (rc) return rc;
    }
    if (d->n_mem + (size_t)m > d->cap_mem) {
        size_t cap = d->cap_mem ? d->cap_mem * 2 : 4096;
        while (cap < d->n_mem + (size_t)m) cap *= 2;
        if (cap > (size_t)1 << 28) return ERR_TOO_BIG;
        int32_t *p = realloc(d->mem, cap * sizeof(*p));
        if (!p) return ERR_NOMEM;
        d->mem = p;
        d->cap_mem = cap;
    }
    int32_t s = d->n++;
    if (s == 0) d->off[0] = 0;
    memcpy(d->mem + d->n_mem, x, (size_t)m * sizeof(*x));
    d->n_mem += (size_t)m;
    d->off[s + 1] = (int32_t)d->n_mem;
    d->hash[s] = h;
    d->row[s] = NULL;
    if (d->n_rows < DFA_MAX_ROWS && (d->row[s] = malloc(256 * sizeof(int32_t)))) {
        d->n_rows++;
        for (int b = 0; b < 256; b++) d->row[s][b] = DFA_UNKNOWN;
    }
    const struct grammar *g = d->la->g;
    struct grammar_byteset u = {{0}};
    uint8_t fl = 0;
    for (int32_t i = 0; i < m; i++) {
        if (x[i] == GRAMMAR_F_SENT) fl |= DFA_F_SENT;
        if (x[i] < 0) continue;
        fl |= DFA_F_REAL;
        const struct grammar_byteset *b = &g->sets[g->elems[d->la->fpos[x[i]]].arg];
        for (int w = 0; w < 4; w++) u.w[w] |= b->w[w];
    }
    d->allowed[s] = u;
    d->flags[s] = fl;
    uint32_t j = slot_of(h, d->ht_cap);
    while (d->ht[j] >= 0) j = (j + 1) & (d->ht_cap - 1);
    d->ht[j] = s;
    *out = s;
    return 0;
}

static int dfa_tr_grow(struct grammar_dfa *d)
{
    uint32_t cap = d->tr_cap ? d->tr_cap * 2 : 4096;
    struct dfa_trans *t = calloc(cap, sizeof(*t));
    if (!t) return ERR_NOMEM;
    for (uint32_t i = 0; i < d->tr_cap; i++) {
        if (!d->tr[i].key) continue;
        uint32_t j = slot_of(d->tr[i].key, cap);
        while (t[j].key) j = (j + 1) & (cap - 1);
        t[j] = d->tr[i];
    }
    free(d->tr);
    d->tr = t;
    d->tr_cap = cap;
    return 0;
}

/* Computes and records the transition of state s by byte b (not yet known) into *out. */
static int dfa_step_slow(struct grammar_dfa *d, int32_t s, unsigned b, int32_t *out)
{
    struct grammar_arena *la = d->la;
    int32_t n = d->off[s + 1] - d->off[s];
    size_t saved = la->n_sets;
    if (la->n_sets + (size_t)n + 1 > la->cap_sets) {
        size_t cap = la->cap_sets ? la->cap_sets * 2 : 4096;
        while (cap < la->n_sets + (size_t)n + 1) cap *= 2;
        int32_t *p = realloc(la->sets, cap * sizeof(*p));
        if (!p) return ERR_NOMEM;
        la->sets = p;
        la->cap_sets = cap;
    }
    size_t head = la->n_sets;
    la->sets[la->n_sets++] = n;
    memcpy(la->sets + la->n_sets, d->mem + d->off[s], (size_t)n * sizeof(int32_t));
    la->n_sets += (size_t)n;
    la->err = 0;
    int64_t ns = grammar_set_step(la, head, b);
    int rc = 0;
    int32_t to = DFA_DEAD;
    if (ns < 0)
        rc = la->err ? la->err : ERR_NOMEM;
    else if (la->sets[ns] > 0)
        rc = dfa_intern(d, la->sets + ns + 1, la->sets[ns], &to);
    la->n_sets = saved;
    if (rc) return rc;
    *out = to;
    if (d->row[s]) {
        d->row[s][b] = to;
        return 0;
    }
    if ((d->n_tr + 1) * 2 > d->tr_cap && (rc = dfa_tr_grow(d))) return rc;
    uint32_t key = ((uint32_t)s << 8 | b) + 1;
    uint32_t j = slot_of(key, d->tr_cap);
    while (d->tr[j].key) j = (j + 1) & (d->tr_cap - 1);
    d->tr[j] = (struct dfa_trans){key, to};
    d->n_tr++;
    return 0;
}

static inline int dfa_step(struct grammar_dfa *d, int32_t s, unsigned b, int32_t *out)
{
    if (d->row[s]) {
        if (d->row[s][b] != DFA_UNKNOWN) {
            *out = d->row[s][b];
            return 0;
        }
        return dfa_step_slow(d, s, b, out);
    }
    uint32_t key = ((uint32_t)s << 8 | b) + 1;
    if (d->tr_cap)
        for (uint32_t j = slot_of(key, d->tr_cap);; j = (j + 1) & (d->tr_cap - 1)) {
            if (d->tr[j].key == key) {
                *out = d->tr[j].to;
                return 0;
            }
            if (!d->tr[j].key) break;
        }
    return dfa_step_slow(d, s, b, out);
}

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
    dfa_free(&c->dfa);
    free(c);
}

void grammar_cache_stats(const struct grammar *g, struct grammar_cache_stats *out)
{
    const struct grammar_cache *c = g->cache;
    *out = (struct grammar_cache_stats){0};
    if (!c) return;
    *out = (struct grammar_cache_stats){c->hits, c->misses, c->n, c->bytes};
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

struct dwalk_frame {
    int32_t child, end, state;
};

/* walk() over the local automaton from state s0 at the trie root: the same tokens and recorded
 * nodes, each trie node one transition lookup. */
static int dfa_walk(struct grammar_dfa *d, const struct grammar_vocab *v, int32_t s0,
                    uint32_t *mask, struct unc_list *unc, struct dwalk_frame *st)
{
    int sp = 0;
    st[sp++] = (struct dwalk_frame){1, v->end[0], s0};
    while (sp > 0) {
        struct dwalk_frame *top = &st[sp - 1];
        if (top->child >= top->end) {
            sp--;
            continue;
        }
        int32_t c = top->child, s = top->state, ns;
        top->child = v->end[c];
        if (!grammar_byteset_has(&d->allowed[s], v->byte[c])) continue;
        int rc = dfa_step(d, s, v->byte[c], &ns);
        if (rc) return rc;
        if (ns == DFA_DEAD) continue;
        for (int32_t t = v->tok0[c]; t < v->tok0[c + 1]; t++) {
            int32_t id = v->toks[t];
            mask[id >> 5] |= 1u << (id & 31);
        }
        if (v->end[c] == c + 1) continue;
        uint8_t fl = d->flags[ns];
        if ((fl & DFA_F_SENT) && unc && unc_push(unc, c)) return ERR_NOMEM;
        if (fl & DFA_F_REAL) st[sp++] = (struct dwalk_frame){c + 1, v->end[c], ns};
    }
    return 0;
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
static int group_entry(struct grammar_matcher *m, const struct stack_ref *refs, int32_t n,
                       int32_t *key, uint32_t *tmp, struct dwalk_frame *dst,
                       struct cache_entry **out)
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
    /* The local start state: the local frames over the sentinel (or the real bottom), in the
     * local automaton. */
    struct grammar_dfa *d = &c->dfa;
    struct grammar_arena *la = d->la;
    int32_t bottom = refs[0].ctx == GRAMMAR_F_DONE ? GRAMMAR_F_DONE : GRAMMAR_F_SENT;
    int32_t *x = malloc((size_t)n * sizeof(*x));
    if (!x) return ERR_NOMEM;
    la->err = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t f = bottom;
        for (int32_t k = 0; k < refs[i].n_local; k++) {
            f = grammar_frame(la, refs[i].local[k], f);
            if (f < 0) {
                free(x);
                return la->err;
            }
        }
        x[i] = f;
    }
    int32_t s0;
    int rc = dfa_intern(d, x, n, &s0);
    free(x);
    if (rc) return rc;
    size_t words = grammar_mask_words(v);
    memset(tmp, 0, words * sizeof(*tmp));
    struct unc_list unc = {0};
    rc = dfa_walk(d, v, s0, tmp, bottom == GRAMMAR_F_SENT ? &unc : NULL, dst);
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
    if (!grammar_matcher_active(m)) { /* free text: every token (grammar.h, lazy matching) */
        for (int32_t t = 0; t < v->n_vocab; t++) mask[t >> 5] |= 1u << (t & 31);
        return v->n_vocab;
    }
    if (!g->cache && !(g->cache = calloc(1, sizeof(*g->cache)))) return ERR_NOMEM;
    struct grammar_dfa *d = &g->cache->dfa;
    if (dfa_init(d, g)) return ERR_NOMEM;
    if (d->la->n > DFA_MAX_FRAMES || dfa_bytes(d) > GRAMMAR_CACHE_BYTES) dfa_clear(d, g);
    grammar_arena_reset(a, g);
    int rc = ERR_NOMEM;
    int32_t n = m->n_stacks;
    struct stack_ref *refs = malloc(((size_t)n + 1) * sizeof(*refs));
    size_t key_cap = 1;
    for (int32_t i = 0; i < n; i++) key_cap += 1 + GRAMMAR_LOCAL_DEPTH;
    int32_t *key = malloc(key_cap * sizeof(*key));
    uint32_t *tmp = malloc(words * sizeof(*tmp));
    struct walk_frame *st = malloc((v->max_len + 2) * sizeof(*st));
    struct dwalk_frame *dst = malloc((v->max_len + 2) * sizeof(*dst));
    if (!refs || !key || !tmp || !st || !dst) goto out;
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
        rc = group_entry(m, refs + i, j - i, key, tmp, dst, &e);
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
    free(dst);
    return rc;
}
