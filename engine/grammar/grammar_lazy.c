/* Lazy matchers (grammar.h "lazy matching"): the free output scanned for triggers, byte by byte,
 * past a leading <think> block, and the switch to the grammar at the first trigger. Not the
 * grammar itself: once active the matcher is the eager one of grammar_match.c.
 *
 * The <think> rule is the one of the API's reasoning split (engine/api/api_reasoning.c: blanks,
 * then "<think>" opens the block, "</think>" closes it, only a leading block counts); that parser
 * splits text into buffers for the responder, this one needs only where the answer starts, and the
 * grammar folder cannot include the API's. */
#include "engine/grammar/grammar_priv.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

#define LZ_OPEN  "<think>"
#define LZ_CLOSE "</think>"

static bool lz_blank(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* The grammar's start state accepts the bytes s[0..len) as a prefix (the matcher is unchanged). */
static bool lz_prefix_ok(const struct grammar_matcher *m, struct grammar_arena *a, const char *s,
                         size_t len)
{
    grammar_arena_reset(a, m->g);
    int64_t cur = grammar_matcher_intern(a, m);
    for (size_t i = 0; cur >= 0 && i < len; i++) {
        cur = grammar_set_step(a, (size_t)cur, (uint8_t)s[i]);
        if (cur >= 0 && a->sets[cur] == 0) return false;
    }
    return cur >= 0;
}

int grammar_matcher_new_lazy(struct grammar *g, struct grammar_arena *a,
                             const struct grammar_lazy *lz, struct grammar_matcher **out)
{
    if (lz->n < 1 || lz->n > GRAMMAR_TRIGGERS_MAX) return ERR_INVAL;
    for (int i = 0; i < lz->n; i++) {
        const struct grammar_trigger *t = &lz->t[i];
        if (t->len < 1 || t->len > GRAMMAR_TRIGGER_MAX || lz_blank((unsigned char)t->text[0]) ||
            t->token < -1 || t->token >= grammar_n_vocab(g))
            return ERR_INVAL;
    }
    struct grammar_matcher *m = NULL;
    int rc = grammar_matcher_new(g, a, &m);
    if (rc) return rc;
    for (int i = 0; i < lz->n; i++)
        if (!lz_prefix_ok(m, a, lz->t[i].text, lz->t[i].len)) {
            rc = a->err ? a->err : ERR_INVAL;
            goto fail;
        }
    if (!(m->lazy = calloc(1, sizeof(*m->lazy)))) {
        rc = ERR_NOMEM;
        goto fail;
    }
    m->lazy->cfg = *lz;
    m->lazy->phase = !lz->think       ? GRAMMAR_LZ_ANSWER
                     : lz->think_open ? GRAMMAR_LZ_THINK
                                      : GRAMMAR_LZ_START;
    *out = m;
    return 0;
fail:
    grammar_matcher_free(m);
    return rc;
}

bool grammar_matcher_active(const struct grammar_matcher *m)
{
    return !m->lazy || m->lazy->active;
}

/* One byte of the answer: the index of the byte trigger it completes, or -1. */
static int lz_answer_byte(struct grammar_lazy_state *z, unsigned char b)
{
    bool grew = false;
    if (z->n_head > 0 || !lz_blank(b)) {
        if (z->n_head < GRAMMAR_TRIGGER_MAX) {
            z->head[z->n_head++] = (char)b;
            grew = true;
        } else {
            z->n_head = GRAMMAR_TRIGGER_MAX + 1;
        }
    }
    if (z->n_tail == GRAMMAR_TRIGGER_MAX) {
        memmove(z->tail, z->tail + 1, GRAMMAR_TRIGGER_MAX - 1);
        z->n_tail--;
    }
    z->tail[z->n_tail++] = (char)b;
    for (int i = 0; i < z->cfg.n; i++) {
        const struct grammar_trigger *t = &z->cfg.t[i];
        if (t->token >= 0) continue;
        if (t->at_start
                ? grew && z->n_head == t->len && !memcmp(z->head, t->text, t->len)
                : z->n_tail >= t->len && !memcmp(z->tail + z->n_tail - t->len, t->text, t->len))
            return i;
    }
    return -1;
}

/* Where a trigger fired: its index, and the output bytes after it that were already produced:
 * extra[0..n_extra) (held bytes of a "<think>" that was not), then the token's bytes from `rest`. */
struct lz_fire {
    int trig;
    char extra[sizeof(LZ_OPEN)];
    size_t n_extra;
    size_t rest;
};

/* Scans the bytes p[0..n) of one token; true when a trigger fired (*f says where). */
static bool lz_scan(struct grammar_lazy_state *z, const char *p, size_t n, struct lz_fire *f)
{
    for (size_t j = 0; j < n; j++) {
        unsigned char b = (unsigned char)p[j];
        if (z->phase == GRAMMAR_LZ_START) {
            if (z->n_open == 0 && lz_blank(b)) continue;
            if (b == (unsigned char)LZ_OPEN[z->n_open]) {
                if (++z->n_open == strlen(LZ_OPEN)) {
                    z->phase = GRAMMAR_LZ_THINK;
                    z->n_open = 0;
                }
                continue;
            }
            /* not a <think> block: what was held is the answer's start, then this byte */
            char held[sizeof(LZ_OPEN)];
            size_t nh = z->n_open;
            memcpy(held, LZ_OPEN, nh);
            held[nh++] = (char)b;
            z->phase = GRAMMAR_LZ_ANSWER;
            z->n_open = 0;
            for (size_t h = 0; h < nh; h++) {
                int t = lz_answer_byte(z, (unsigned char)held[h]);
                if (t < 0) continue;
                *f = (struct lz_fire){.trig = t, .n_extra = nh - h - 1, .rest = j + 1};
                memcpy(f->extra, held + h + 1, f->n_extra);
                return true;
            }
        } else if (z->phase == GRAMMAR_LZ_THINK) {
            if (b == (unsigned char)LZ_CLOSE[z->n_close])
                z->n_close++;
            else
                z->n_close = b == (unsigned char)LZ_CLOSE[0];
            if (z->n_close == strlen(LZ_CLOSE)) z->phase = GRAMMAR_LZ_ANSWER;
        } else {
            int t = lz_answer_byte(z, b);
            if (t >= 0) {
                *f = (struct lz_fire){.trig = t, .rest = j + 1};
                return true;
            }
        }
    }
    return false;
}

/* A token trigger of token t that may fire in state z (not inside the <think> block; at_start:
 * nothing but blanks in the answer yet), or -1. */
static int lz_token_trigger(const struct grammar_lazy_state *z, int32_t t)
{
    if (z->phase == GRAMMAR_LZ_THINK) return -1;
    bool empty = z->n_head == 0 && z->n_open == 0;
    for (int i = 0; i < z->cfg.n; i++)
        if (z->cfg.t[i].token == t && (!z->cfg.t[i].at_start || empty)) return i;
    return -1;
}

int grammar_lazy_accept(struct grammar_matcher *m, struct grammar_arena *a, int32_t t)
{
    const struct grammar_vocab *v = m->g->vocab;
    if (t < 0 || t >= v->n_vocab) return ERR_INVAL;
    struct grammar_lazy_state z = *m->lazy; /* committed only when the token is taken */
    struct lz_fire f = {.trig = lz_token_trigger(&z, t)};
    const char *p = v->piece[t];
    size_t n = v->piece_len[t];
    if (f.trig >= 0) {
        /* the token stands for the trigger's text: its own bytes (if any) are not fed again */
        z.phase = GRAMMAR_LZ_ANSWER;
        f.rest = n;
    } else if (!lz_scan(&z, p, n, &f)) {
        *m->lazy = z;
        return 0;
    }
    const struct grammar_trigger *tr = &z.cfg.t[f.trig];
    size_t len = tr->len + f.n_extra + (n - f.rest);
    char *bytes = malloc(len);
    if (!bytes) return ERR_NOMEM;
    memcpy(bytes, tr->text, tr->len);
    memcpy(bytes + tr->len, f.extra, f.n_extra);
    memcpy(bytes + tr->len + f.n_extra, p + f.rest, n - f.rest);
    int rc = grammar_matcher_accept_bytes(m, a, bytes, len);
    free(bytes);
    if (rc) return rc; /* ERR_INVAL: the bytes after the trigger leave the grammar */
    *m->lazy = z;
    m->lazy->active = true;
    return 0;
}
