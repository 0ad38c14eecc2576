/* A sequence's matcher: its set of stacks between steps, as plain arrays of positions (the arena is
 * scratch, emptied by every operation), advanced by the bytes of each accepted token. */
#include "engine/grammar/grammar_priv.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

void grammar_ref(struct grammar *g)
{
    atomic_fetch_add(&g->refs, 1);
}

void grammar_unref(struct grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    grammar_cache_free(g->cache);
    free(g->elems);
    free(g->sets);
    free(g->alts);
    free(g->rules);
    free(g);
}

size_t grammar_size(const struct grammar *g)
{
    return (size_t)g->n_elems;
}

int32_t grammar_n_vocab(const struct grammar *g)
{
    return g->vocab->n_vocab;
}

int64_t grammar_matcher_intern(struct grammar_arena *a, const struct grammar_matcher *m)
{
    if (a->n_sets + 1 + (size_t)m->n_stacks + 1 > a->cap_sets) {
        size_t cap = a->cap_sets ? a->cap_sets : 4096;
        while (cap < a->n_sets + (size_t)m->n_stacks + 2) cap *= 2;
        int32_t *p = realloc(a->sets, cap * sizeof(*p));
        if (!p) return a->err = ERR_NOMEM, -1;
        a->sets = p;
        a->cap_sets = cap;
    }
    size_t head = a->n_sets++;
    a->sets[head] = 0;
    for (int32_t i = 0; i < m->n_stacks; i++) {
        int32_t f = GRAMMAR_F_DONE;
        for (int32_t k = m->off[i]; k < m->off[i + 1]; k++) {
            f = grammar_frame(a, m->pos[k], f);
            if (f < 0) return -1;
        }
        a->sets[a->n_sets++] = f;
        a->sets[head]++;
    }
    if (m->done) {
        a->sets[a->n_sets++] = GRAMMAR_F_DONE;
        a->sets[head]++;
    }
    return (int64_t)head;
}

static int reserve(void **p, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < want) c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n) return ERR_NOMEM;
    *p = n;
    *cap = c;
    return 0;
}

int grammar_matcher_store(struct grammar_matcher *m, struct grammar_arena *a, size_t off)
{
    int32_t n = a->sets[off];
    int32_t real = 0;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t f = a->sets[off + 1 + (size_t)i];
        if (f < 0) continue;
        real++;
        int depth = 0;
        for (int32_t x = f; x >= 0; x = a->fpar[x])
            if (++depth > GRAMMAR_MAX_DEPTH) return ERR_TOO_BIG;
        total += (size_t)depth;
    }
    if (real > GRAMMAR_MAX_STACKS) return ERR_TOO_BIG;
    if (reserve((void **)&m->pos, &m->cap_pos, total + 1, sizeof(int32_t)) ||
        reserve((void **)&m->off, &m->cap_off, (size_t)real + 1, sizeof(int32_t)))
        return ERR_NOMEM;
    m->done = false;
    m->n_stacks = 0;
    int32_t at = 0;
    m->off[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t f = a->sets[off + 1 + (size_t)i];
        if (f == GRAMMAR_F_DONE) m->done = true;
        if (f < 0) continue;
        int depth = 0;
        for (int32_t x = f; x >= 0; x = a->fpar[x]) depth++;
        int32_t k = at + depth;
        for (int32_t x = f; x >= 0; x = a->fpar[x]) m->pos[--k] = a->fpos[x];
        at += depth;
        m->off[++m->n_stacks] = at;
    }
    return 0;
}

int grammar_matcher_new(struct grammar *g, struct grammar_arena *a, struct grammar_matcher **out)
{
    struct grammar_matcher *m = calloc(1, sizeof(*m));
    if (!m) return ERR_NOMEM;
    grammar_ref(g);
    m->g = g;
    grammar_arena_reset(a, g);
    int64_t s = grammar_set_start(a);
    int rc = s < 0 ? a->err : grammar_matcher_store(m, a, (size_t)s);
    if (rc) {
        grammar_matcher_free(m);
        return rc ? rc : ERR_NOMEM;
    }
    *out = m;
    return 0;
}

int grammar_matcher_clone(const struct grammar_matcher *m, struct grammar_matcher **out)
{
    struct grammar_matcher *c = calloc(1, sizeof(*c));
    if (!c) return ERR_NOMEM;
    size_t np = (size_t)m->off[m->n_stacks];
    if (reserve((void **)&c->pos, &c->cap_pos, np + 1, sizeof(int32_t)) ||
        reserve((void **)&c->off, &c->cap_off, (size_t)m->n_stacks + 1, sizeof(int32_t))) {
        free(c->pos);
        free(c);
        return ERR_NOMEM;
    }
    memcpy(c->pos, m->pos, np * sizeof(int32_t));
    memcpy(c->off, m->off, ((size_t)m->n_stacks + 1) * sizeof(int32_t));
    c->n_stacks = m->n_stacks;
    c->done = m->done;
    if (m->lazy && !(c->lazy = malloc(sizeof(*c->lazy)))) {
        free(c->pos);
        free(c->off);
        free(c);
        return ERR_NOMEM;
    }
    if (m->lazy) *c->lazy = *m->lazy;
    grammar_ref(m->g);
    c->g = m->g;
    *out = c;
    return 0;
}

void grammar_matcher_free(struct grammar_matcher *m)
{
    if (!m) return;
    grammar_unref(m->g);
    free(m->lazy);
    free(m->pos);
    free(m->off);
    free(m);
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, struct grammar_arena *a, const char *s,
                                 size_t len)
{
    grammar_arena_reset(a, m->g);
    int64_t cur = grammar_matcher_intern(a, m);
    if (cur < 0) return a->err ? a->err : ERR_NOMEM;
    for (size_t i = 0; i < len; i++) {
        cur = grammar_set_step(a, (size_t)cur, (uint8_t)s[i]);
        if (cur < 0) return a->err ? a->err : ERR_NOMEM;
        if (a->sets[cur] == 0) return ERR_INVAL;
    }
    return grammar_matcher_store(m, a, (size_t)cur);
}

static bool is_eog(const struct grammar_vocab *v, int32_t t)
{
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t) return true;
    return false;
}

int grammar_matcher_accept(struct grammar_matcher *m, struct grammar_arena *a, int32_t t)
{
    const struct grammar_vocab *v = m->g->vocab;
    if (m->lazy && !m->lazy->active) return grammar_lazy_accept(m, a, t);
    if (t < 0 || t >= v->n_vocab) return ERR_INVAL;
    if (is_eog(v, t)) {
        if (!m->done) return ERR_INVAL;
        m->n_stacks = 0; /* only the empty stack is left */
        return 0;
    }
    if (v->piece_len[t] == 0) return ERR_INVAL;
    return grammar_matcher_accept_bytes(m, a, v->piece[t], v->piece_len[t]);
}

bool grammar_matcher_accepting(const struct grammar_matcher *m)
{
    return m->done || !grammar_matcher_active(m); /* free text may end anywhere */
}

bool grammar_matcher_finished(const struct grammar_matcher *m)
{
    return grammar_matcher_active(m) && m->done && m->n_stacks == 0;
}
