/* The shared request object of `cinfer-engine serve`: creation, reference counting and the locked
 * event queue between the inference thread and the responder. */
#include "engine/serve/serve_req.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

struct serve_req *serve_req_new(struct api_request *api, int32_t *prompt, int n_prompt)
{
    struct serve_req *r = calloc(1, sizeof(*r));
    int n = api->n;
    if (!r) goto fail;
    r->uds = calloc((size_t)n, sizeof(*r->uds));
    r->seqs = calloc((size_t)n, sizeof(*r->seqs));
    r->last_token_at = calloc((size_t)n, sizeof(*r->last_token_at));
    r->acc = calloc((size_t)n, sizeof(*r->acc));
    r->role_sent = calloc((size_t)n, sizeof(*r->role_sent));
    r->text_chars = calloc((size_t)n, sizeof(*r->text_chars));
    if (!r->uds || !r->seqs || !r->last_token_at || !r->acc || !r->role_sent || !r->text_chars)
        goto fail;
    if (pthread_mutex_init(&r->mu, NULL) != 0) goto fail;
    for (int i = 0; i < n; i++) {
        buf_init(&r->acc[i].text, 0);
        r->uds[i] = (struct serve_seq_ud){r, i};
    }
    buf_init(&r->pending, 0);
    atomic_init(&r->fail, SERVE_FAIL_NONE);
    atomic_init(&r->on_cancel, NULL);
    atomic_init(&r->on_post, NULL);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, false);
    atomic_init(&r->in_ready, false);
    r->api = api;
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    r->n_choices = n;
    return r;
fail:
    if (r) {
        free(r->uds);
        free(r->seqs);
        free(r->last_token_at);
        free(r->acc);
        free(r->role_sent);
        free(r->text_chars);
        free(r);
    }
    api_request_free(api);
    free(prompt);
    return NULL;
}

void serve_req_ref(struct serve_req *r)
{
    atomic_fetch_add(&r->refs, 1);
}

static void acc_fini(struct serve_choice_acc *a)
{
    buf_fini(&a->text);
    free(a->lp);
    free(a->top_at);
    free(a->top);
}

void serve_req_unref(struct serve_req *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    serve_req_events_free(r->events, r->n_events);
    for (int i = 0; i < r->n_choices; i++) acc_fini(&r->acc[i]);
    pthread_mutex_destroy(&r->mu);
    buf_fini(&r->pending);
    api_request_free(r->api);
    free(r->prompt);
    free(r->uds);
    free(r->seqs);
    free(r->last_token_at);
    free(r->acc);
    free(r->role_sent);
    free(r->text_chars);
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
        .token = ev->token,
        .finish = ev->finish,
        .n_prompt = ev->n_prompt,
        .n_cached = ev->n_cached,
        .n_generated = ev->n_generated,
    };
    if (ev->has_token && ev->sample) {
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
