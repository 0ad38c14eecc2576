/* The per-replica service model of the simulator (see sim.h for the model itself). A replica's
 * state only changes at events: an enqueue or a completion; between events the prefill in progress
 * or every decoding sequence advances at a constant rate, so `step` integrates exactly. */
#include "autoscaler/sim/sim_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS_TOKENS 1e-6

int sim_fifo_push(struct sim_fifo *q, uint32_t v)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        uint32_t *a = malloc(cap * sizeof(*a));
        if (!a) return ERR_NOMEM;
        for (size_t i = 0; i < q->n; i++) a[i] = q->a[(q->head + i) % q->cap];
        free(q->a);
        q->a = a;
        q->head = 0;
        q->cap = cap;
    }
    q->a[(q->head + q->n++) % q->cap] = v;
    return 0;
}

uint32_t sim_fifo_pop(struct sim_fifo *q)
{
    uint32_t v = q->a[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return v;
}

void sim_fifo_fini(struct sim_fifo *q)
{
    free(q->a);
    memset(q, 0, sizeof(*q));
}

int sim_replica_init(struct sim_replica *r, const struct sim_world *w, uint32_t slot, double now,
                     double ready_at)
{
    memset(r, 0, sizeof(*r));
    r->state = ready_at <= now ? SIM_READY : SIM_STARTING;
    r->t = now;
    r->ready_at = ready_at;
    r->long_prefill_end = -1;
    r->run = calloc((size_t)w->m->max_running, sizeof(*r->run));
    if (!r->run) return ERR_NOMEM;
    size_t blocks = w->block_tokens > 0 ? (size_t)(w->m->cache_tokens / w->block_tokens) : 0;
    int rc = sim_cache_init(&r->cache, blocks, w->cache_index, slot);
    if (rc != 0) {
        free(r->run);
        r->run = NULL;
    }
    return rc;
}

void sim_replica_fini(struct sim_replica *r)
{
    free(r->run);
    r->run = NULL;
    sim_fifo_fini(&r->waiting);
    sim_cache_fini(&r->cache);
}

int sim_replica_outstanding(const struct sim_replica *r)
{
    return (int)r->waiting.n + r->n_run;
}

int sim_replica_unanswered(const struct sim_replica *r)
{
    int n = (int)r->waiting.n;
    for (int i = 0; i < r->n_run; i++) n += r->run[i].prefill;
    return n;
}

double sim_replica_prefill_waiting(const struct sim_replica *r)
{
    double v = r->waiting_prompt;
    for (int i = 0; i < r->n_run; i++)
        if (r->run[i].prefill) v += fmax(r->run[i].rem, 0);
    return v;
}

/* Index of the sequence being prefilled (the oldest admitted), or -1. */
static int prefilling(const struct sim_replica *r)
{
    for (int i = 0; i < r->n_run; i++)
        if (r->run[i].prefill) return i;
    return -1;
}

/* Sequence `s` decoded `done` tokens at `rate` per second: reports the gaps of the whole tokens
 * it completed (the first one carries the time since the previous token, pauses included). */
static void emit(struct sim_seq *s, const struct sim_world *w, double done, double rate)
{
    double x = s->frac + done;
    double whole = floor(x + 1e-9);
    if (whole < 1) {
        s->frac = x;
        s->gap += done / rate;
        return;
    }
    w->on_gaps(w->ctx, s->gap + (1 - s->frac) / rate, 1);
    if (whole > 1) w->on_gaps(w->ctx, 1 / rate, whole - 1);
    s->frac = fmax(0, x - whole);
    s->gap = s->frac / rate;
}

static void advance(struct sim_replica *r, const struct sim_world *w, double now)
{
    double dt = now - r->t;
    r->t = now;
    if (dt <= 0 || r->n_run == 0) return;
    int p = prefilling(r);
    if (p >= 0) {
        r->run[p].rem -= dt * w->m->prefill_tps;
        for (int i = 0; i < r->n_run; i++) /* decoding pauses */
            if (!r->run[i].prefill) r->run[i].gap += dt;
        return;
    }
    double rate = sim_decode_rate(w, r->n_run);
    for (int i = 0; i < r->n_run; i++) {
        double done = fmin(r->run[i].rem, dt * rate);
        r->run[i].rem -= done;
        r->gen_tokens += done;
        if (done > 0 && w->on_gaps) emit(&r->run[i], w, done, rate);
    }
}

static void admit(struct sim_replica *r, const struct sim_world *w)
{
    while (r->waiting.n && r->n_run < w->m->max_running) {
        uint32_t id = r->waiting.a[r->waiting.head];
        const struct sim_req *q = &w->reqs[id];
        double need = (double)q->prompt + q->output;
        if (need > w->m->kv_tokens) need = w->m->kv_tokens; /* a huge request runs alone */
        if (r->kv_used + need > w->m->kv_tokens) break;     /* FIFO: no overtaking */
        sim_fifo_pop(&r->waiting);
        r->waiting_prompt -= q->prompt;
        if (r->waiting.n == 0) r->waiting_prompt = 0; /* no drift from float sums */
        size_t matched = sim_cache_match(&r->cache, w->hashes + q->hash_off, q->n_hash);
        double cached = fmin((double)q->prompt, (double)matched * w->block_tokens);
        r->hit_tokens += cached;
        r->query_tokens += q->prompt;
        r->kv_used += need;
        /* Even a fully cached prompt computes its last position to emit the first token. */
        double todo = fmax((double)q->prompt - cached, 1);
        w->reqs[id].prefill_s = (float)(todo / w->m->prefill_tps);
        r->run[r->n_run++] = (struct sim_seq){.req = id, .prefill = true, .rem = todo, .kv = need};
    }
}

void sim_replica_step(struct sim_replica *r, const struct sim_world *w, double now)
{
    advance(r, w, now);
    for (int i = 0; i < r->n_run;) {
        struct sim_seq *s = &r->run[i];
        struct sim_req *q = &w->reqs[s->req];
        if (s->prefill && s->rem <= EPS_TOKENS) {
            s->prefill = false;
            s->rem = q->output > 1 ? q->output - 1 : 0; /* prefill emits the first token */
            s->frac = s->gap = 0;
            r->prompt_tokens += q->prompt;
            r->gen_tokens += 1;
            sim_cache_insert(&r->cache, w->hashes + q->hash_off, q->n_hash);
            if (q->prefill_s >= w->long_prefill_s) r->long_prefill_end = now;
            w->on_first_token(w->ctx, s->req, now);
        }
        if (!s->prefill && s->rem <= EPS_TOKENS) {
            r->kv_used -= s->kv;
            w->on_done(w->ctx, s->req, now);
            /* Keep admission order (prefill is FIFO): shift, not swap. */
            memmove(&r->run[i], &r->run[i + 1], (size_t)(r->n_run - i - 1) * sizeof(*r->run));
            r->n_run--;
            continue;
        }
        i++;
    }
    if (r->n_run == 0) r->kv_used = 0; /* no drift from float sums */
    admit(r, w);
    r->version++;
}

double sim_replica_next(const struct sim_replica *r, const struct sim_world *w)
{
    if (r->n_run == 0) return -1;
    int p = prefilling(r);
    if (p >= 0) return r->t + fmax(r->run[p].rem, 0) / w->m->prefill_tps;
    double min_rem = INFINITY;
    for (int i = 0; i < r->n_run; i++) min_rem = fmin(min_rem, r->run[i].rem);
    return r->t + fmax(min_rem, 0) / sim_decode_rate(w, r->n_run);
}

int sim_replica_enqueue(struct sim_replica *r, const struct sim_world *w, uint32_t req)
{
    int rc = sim_fifo_push(&r->waiting, req);
    if (!rc) r->waiting_prompt += w->reqs[req].prompt;
    return rc;
}
