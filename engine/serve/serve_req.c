/* The shared request object of `cinfer-engine serve`: creation from the HTTP thread's spec,
 * reference counting, the locked event queue between the inference thread and the responder, and
 * the cancel / fail state with the hooks that wake those threads. */
#include "engine/serve/serve_req.h"

#include "engine/grammar/grammar.h"
#include "common/assert.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

/* Bump allocation inside the request's own block (sizes computed first, so it never runs out). */
static void *req_take(char **p, const void *src, size_t n)
{
    void *at = *p;
    if (n) memcpy(at, src, n);
    *p += n;
    return at;
}

/* The storage behind spec's pointers, in one allocation after the struct: the prompt table, the
 * logit bias, every prompt's ids, then the echo texts, the stop strings and the cache salt (the
 * strings NUL-terminated). The table and the bias come first, so they keep their alignment. */
struct serve_req *serve_req_new(const struct serve_req_spec *spec)
{
    const struct sched_request *in = &spec->sched;
    if (spec->n_prompts < 1 || spec->n_prompts > API_MAX_PROMPTS || !spec->prompts || spec->n < 1 ||
        spec->best_of < spec->n || spec->n_choices != spec->n_prompts * spec->best_of ||
        spec->n_choices > API_MAX_SEQS || in->sampling.n_bias < 0 ||
        (in->sampling.n_bias > 0 && !in->sampling.bias))
        return NULL;
    size_t n_stops = in->n_stops <= API_MAX_STOP ? in->n_stops : API_MAX_STOP;
    size_t stop_len[API_MAX_STOP], salt_len = in->cache_salt ? strlen(in->cache_salt) + 1 : 0;
    size_t n_pr = (size_t)spec->n_prompts, n_bias = (size_t)in->sampling.n_bias;
    size_t bytes = sizeof(struct serve_req) + n_pr * sizeof(struct serve_req_prompt) +
                   n_bias * sizeof(struct sampler_bias) + salt_len;
    for (size_t i = 0; i < n_pr; i++) {
        const struct serve_req_prompt *q = &spec->prompts[i];
        if (q->n_ids < 1 || !q->ids) return NULL;
        bytes += (size_t)q->n_ids * sizeof(int32_t) + (q->echo ? q->echo_len + 1 : 0);
    }
    for (size_t i = 0; i < n_stops; i++) bytes += stop_len[i] = strlen(in->stops[i]) + 1;
    struct serve_req *r = calloc(1, bytes);
    if (!r) return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    r->spec = *spec;
    struct sched_request *sr = &r->spec.sched;
    char *p = (char *)(r + 1);
    r->prompts = req_take(&p, spec->prompts, n_pr * sizeof(struct serve_req_prompt));
    r->spec.prompts = r->prompts;
    sr->sampling.bias =
        n_bias ? req_take(&p, in->sampling.bias, n_bias * sizeof(struct sampler_bias)) : NULL;
    for (size_t i = 0; i < n_pr; i++)
        r->prompts[i].ids =
            req_take(&p, spec->prompts[i].ids, (size_t)spec->prompts[i].n_ids * sizeof(int32_t));
    for (size_t i = 0; i < n_pr; i++) {
        const struct serve_req_prompt *q = &spec->prompts[i];
        if (!q->echo) continue;
        char *e = req_take(&p, q->echo, q->echo_len);
        *p++ = '\0';
        r->prompts[i].echo = e;
    }
    for (size_t i = 0; i < n_stops; i++) r->stops[i] = req_take(&p, in->stops[i], stop_len[i]);
    sr->stops = (const char *const *)r->stops;
    sr->n_stops = n_stops;
    sr->cache_salt = in->cache_salt ? req_take(&p, in->cache_salt, salt_len) : NULL;
    sr->prompt = r->prompts[0].ids;
    sr->n_prompt = r->prompts[0].n_ids;
    sr->ud = NULL;
    if (sr->grammar) grammar_ref(sr->grammar);
    atomic_init(&r->fail, SERVE_FAIL_NONE);
    atomic_init(&r->on_cancel, NULL);
    atomic_init(&r->on_post, NULL);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, false);
    atomic_init(&r->in_ready, false);
    return r;
}

void serve_req_ref(struct serve_req *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void serve_req_unref(struct serve_req *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    /* Each thread frees its part when done with the request, before dropping its reference. */
    ASSERT(!r->loop && !r->out);
    serve_req_events_free(r->events, r->n_events);
    grammar_unref(r->spec.sched.grammar);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void serve_req_set_on_cancel(struct serve_req *r, const struct serve_req_hook *h)
{
    atomic_store(&r->on_cancel, h);
}

void serve_req_set_on_post(struct serve_req *r, const struct serve_req_hook *h)
{
    atomic_store(&r->on_post, h);
}

void serve_req_post(struct serve_req *r)
{
    const struct serve_req_hook *h = atomic_load(&r->on_post);
    if (h) h->fn(h->ctx, r);
}

void serve_req_fail(struct serve_req *r, enum serve_fail why)
{
    int none = SERVE_FAIL_NONE;
    (void)atomic_compare_exchange_strong(&r->fail, &none, (int)why);
    serve_req_post(r);
}

enum serve_fail serve_req_failure(const struct serve_req *r)
{
    return (enum serve_fail)atomic_load(&r->fail);
}

/* The store of `cancelled` comes before the load of the hook, and serve_loop_submit stores the
 * hook before the loop can see the request: either the hook wakes the loop, or the loop finds
 * the flag already set when it admits the request. */
void serve_req_cancel(struct serve_req *r)
{
    if (atomic_exchange(&r->cancelled, true)) return;
    const struct serve_req_hook *h = atomic_load(&r->on_cancel);
    if (h) h->fn(h->ctx, r);
}

bool serve_req_cancelled(const struct serve_req *r)
{
    return atomic_load(&r->cancelled);
}

int serve_req_push(struct serve_req *r, int choice, const struct sched_event *ev)
{
    struct serve_event e = {
        .choice = choice,
        .has_token = ev->has_token,
        .prompt_token = ev->prompt_token,
        .prompt_pos = ev->prompt_pos,
        .token = ev->token,
        .finish = ev->finish,
        .n_prompt = ev->n_prompt,
        .n_cached = ev->n_cached,
        .n_generated = ev->n_generated,
        .cum_logprob = ev->cum_logprob,
        .n_sampled = ev->n_sampled,
    };
    if ((ev->has_token || ev->prompt_token) && ev->sample) {
        e.logprob = ev->sample->logprob;
        e.n_top = ev->sample->n_top;
        memcpy(e.top, ev->sample->top, (size_t)e.n_top * sizeof(e.top[0]));
    }
    if (ev->len) {
        e.text = malloc(ev->len);
        if (!e.text) return ERR_NOMEM;
        memcpy(e.text, ev->text, ev->len);
        e.len = ev->len;
    }
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    if (r->n_events == r->cap_events) {
        size_t cap = r->cap_events ? r->cap_events * 2 : 16;
        struct serve_event *g = realloc(r->events, cap * sizeof(*g));
        if (!g)
            rc = ERR_NOMEM;
        else {
            r->events = g;
            r->cap_events = cap;
        }
    }
    if (!rc) r->events[r->n_events++] = e;
    pthread_mutex_unlock(&r->mu);
    if (rc) free(e.text);
    return rc;
}

void serve_req_take(struct serve_req *r, struct serve_event **out, size_t *n)
{
    pthread_mutex_lock(&r->mu);
    *out = r->events;
    *n = r->n_events;
    r->events = NULL;
    r->n_events = r->cap_events = 0;
    pthread_mutex_unlock(&r->mu);
}

void serve_req_events_free(struct serve_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) free(ev[i].text);
    free(ev);
}

int serve_req_list_push(struct serve_req_list *l, struct serve_req *r)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        struct serve_req **g = realloc(l->v, cap * sizeof(*g));
        if (!g) return ERR_NOMEM;
        l->v = g;
        l->cap = cap;
    }
    l->v[l->n++] = r;
    return 0;
}

void serve_req_list_remove(struct serve_req_list *l, const struct serve_req *r)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == r) {
            l->v[i] = l->v[--l->n];
            return;
        }
}

bool serve_req_list_has(const struct serve_req_list *l, const struct serve_req *r)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == r) return true;
    return false;
}

void serve_req_list_fini(struct serve_req_list *l)
{
    free(l->v);
    *l = (struct serve_req_list){0};
}
