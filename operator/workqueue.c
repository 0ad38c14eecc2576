/* Rate-limited, de-duplicating work queue of keys (see workqueue.h).
 * Entries live in a chained hash table while they are queued, processing, delayed or have
 * failures; a FIFO list orders ready keys; a binary min-heap orders delayed keys. */
#include "operator/workqueue.h"

#include "common/err.h"
#include "common/heap.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WQ_BUCKETS 1024

struct wq_entry {
    char *key;
    struct wq_entry *hash_next;
    struct wq_entry *fifo_next; /* in the ready list when `queued` */
    bool queued;                /* in the ready list (dirty) */
    bool processing;            /* handed to a worker */
    bool requeue;               /* added while processing: queue again on done */
    int failures;
    int heap_refs;       /* heap items that point at this entry */
    int64_t delay_until; /* earliest pending delayed add, or 0 */
};

struct wq_delayed {
    int64_t at;
    struct wq_entry *e;
};

static inline bool wq_delayed_less(const struct wq_delayed *a, const struct wq_delayed *b)
{
    return a->at < b->at;
}

HEAP_DEFINE(wq_heap, struct wq_delayed, wq_delayed_less)

struct workqueue {
    struct workqueue_opts opts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct wq_entry *buckets[WQ_BUCKETS];
    struct wq_entry *fifo_head, *fifo_tail;
    size_t ready;
    struct wq_heap delayed; /* by time due */
    bool shutdown;
};

static int64_t monotonic_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ms(struct workqueue *q)
{
    return q->opts.now_ms(q->opts.now_ctx);
}

static size_t hash_key(const char *s)
{
    size_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h % WQ_BUCKETS;
}

static struct wq_entry *entry_find(struct workqueue *q, const char *key)
{
    for (struct wq_entry *e = q->buckets[hash_key(key)]; e; e = e->hash_next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

static struct wq_entry *entry_get(struct workqueue *q, const char *key)
{
    struct wq_entry *e = entry_find(q, key);
    if (e) return e;
    e = calloc(1, sizeof(*e));
    if (!e || !(e->key = strdup(key))) {
        free(e);
        return NULL;
    }
    size_t h = hash_key(key);
    e->hash_next = q->buckets[h];
    q->buckets[h] = e;
    return e;
}

/* Drops an entry that no longer carries any state. */
static void entry_release_if_idle(struct workqueue *q, struct wq_entry *e)
{
    if (e->queued || e->processing || e->requeue || e->failures || e->heap_refs) return;
    struct wq_entry **p = &q->buckets[hash_key(e->key)];
    while (*p != e) p = &(*p)->hash_next;
    *p = e->hash_next;
    free(e->key);
    free(e);
}

static void fifo_push(struct workqueue *q, struct wq_entry *e)
{
    e->queued = true;
    e->fifo_next = NULL;
    if (q->fifo_tail)
        q->fifo_tail->fifo_next = e;
    else
        q->fifo_head = e;
    q->fifo_tail = e;
    q->ready++;
    pthread_cond_signal(&q->cv);
}

/* Marks an entry dirty: queued now, or on done() if a worker holds it. */
static void mark_dirty(struct workqueue *q, struct wq_entry *e)
{
    if (e->processing)
        e->requeue = true;
    else if (!e->queued)
        fifo_push(q, e);
}

static int delayed_push(struct workqueue *q, int64_t at, struct wq_entry *e)
{
    int rc = wq_heap_push(&q->delayed, (struct wq_delayed){at, e});
    if (!rc) e->heap_refs++;
    return rc;
}

/* Moves delayed keys whose time has come to the ready list. */
static void promote_due(struct workqueue *q, int64_t now)
{
    while (q->delayed.n && q->delayed.v[0].at <= now) {
        struct wq_delayed d = wq_heap_pop(&q->delayed);
        d.e->heap_refs--;
        if (d.e->delay_until ==
            d.at) { /* stale items (superseded by an earlier delay) are skipped */
            d.e->delay_until = 0;
            mark_dirty(q, d.e);
        }
        entry_release_if_idle(q, d.e);
    }
}

struct workqueue *workqueue_new(const struct workqueue_opts *opts)
{
    struct workqueue *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    q->opts = *opts;
    if (q->opts.base_delay_ms <= 0) q->opts.base_delay_ms = 5;
    if (q->opts.max_delay_ms < q->opts.base_delay_ms) q->opts.max_delay_ms = 1000 * 1000;
    if (!q->opts.now_ms) q->opts.now_ms = monotonic_ms;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

void workqueue_free(struct workqueue *q)
{
    if (!q) return;
    for (size_t i = 0; i < WQ_BUCKETS; i++) {
        for (struct wq_entry *e = q->buckets[i], *n; e; e = n) {
            n = e->hash_next;
            free(e->key);
            free(e);
        }
    }
    wq_heap_fini(&q->delayed);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

int workqueue_add(struct workqueue *q, const char *key)
{
    return workqueue_add_after(q, key, 0);
}

int workqueue_add_after(struct workqueue *q, const char *key, int64_t delay_ms)
{
    int rc = 0;
    pthread_mutex_lock(&q->mu);
    struct wq_entry *e = q->shutdown ? NULL : entry_get(q, key);
    if (q->shutdown)
        rc = ERR_BAD_STATE;
    else if (!e)
        rc = ERR_NOMEM;
    else if (delay_ms <= 0)
        mark_dirty(q, e);
    else {
        int64_t at = now_ms(q) + delay_ms;
        if (!e->delay_until || at < e->delay_until) {
            e->delay_until = at;
            rc = delayed_push(q, at, e);
            if (rc) e->delay_until = 0;
            pthread_cond_signal(&q->cv); /* a sleeping worker may need to wake earlier */
        }
        entry_release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int workqueue_add_rate_limited(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    struct wq_entry *e = q->shutdown ? NULL : entry_get(q, key);
    int64_t delay = 0;
    if (e) {
        delay = q->opts.base_delay_ms;
        for (int i = 0; i < e->failures && delay < q->opts.max_delay_ms; i++) delay *= 2;
        if (delay > q->opts.max_delay_ms) delay = q->opts.max_delay_ms;
        e->failures++;
    }
    pthread_mutex_unlock(&q->mu);
    if (!e) return q->shutdown ? ERR_BAD_STATE : ERR_NOMEM;
    return workqueue_add_after(q, key, delay);
}

void workqueue_forget(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    struct wq_entry *e = entry_find(q, key);
    if (e) {
        e->failures = 0;
        entry_release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
}

int workqueue_failures(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    struct wq_entry *e = entry_find(q, key);
    int n = e ? e->failures : 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

char *workqueue_get(struct workqueue *q, int64_t timeout_ms)
{
    char *key = NULL;
    pthread_mutex_lock(&q->mu);
    int64_t deadline = timeout_ms >= 0 ? now_ms(q) + timeout_ms : INT64_MAX;
    for (;;) {
        if (q->shutdown) break;
        int64_t now = now_ms(q);
        promote_due(q, now);
        if (q->fifo_head) {
            struct wq_entry *e = q->fifo_head;
            q->fifo_head = e->fifo_next;
            if (!q->fifo_head) q->fifo_tail = NULL;
            q->ready--;
            e->queued = false;
            e->processing = true;
            key = strdup(e->key);
            if (!key) { /* put it back rather than lose it */
                e->processing = false;
                fifo_push(q, e);
            }
            break;
        }
        if (now >= deadline) break;
        int64_t wake = deadline;
        if (q->delayed.n && q->delayed.v[0].at < wake) wake = q->delayed.v[0].at;
        /* The injected clock may be fake: never sleep more than 50 ms at a time. */
        if (wake - now > 50) wake = now + 50;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = ts.tv_nsec + (wake - now) * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return key;
}

void workqueue_done(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    struct wq_entry *e = entry_find(q, key);
    if (e && e->processing) {
        e->processing = false;
        if (e->requeue) {
            e->requeue = false;
            if (!q->shutdown) fifo_push(q, e);
        }
        entry_release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
}

void workqueue_shutdown(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int workqueue_is_shutdown(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    int s = q->shutdown;
    pthread_mutex_unlock(&q->mu);
    return s;
}

size_t workqueue_len(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    promote_due(q, now_ms(q));
    size_t n = q->ready;
    pthread_mutex_unlock(&q->mu);
    return n;
}
