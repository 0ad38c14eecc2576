/* KV block event log: a ring of the last events plus the held set, under one mutex (see
 * kv_events.h). The writer's critical section is a set update and a ring slot store. */
#include "engine/kv/kv_events.h"

#include "common/err.h"
#include "common/u64set.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KV_EVENTS_MIN_RING 64

struct kv_events {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct kv_event *ring; /* (mask + 1); event seq s lives at s & mask */
    size_t mask;
    uint64_t last; /* seq of the last event */
    struct u64set held;
};

int kv_events_new(int n_blocks, size_t ring_events, struct kv_events **out)
{
    if (n_blocks < 1) return ERR_INVAL;
    size_t cap = KV_EVENTS_MIN_RING;
    while (cap < ring_events && cap < ((size_t)1 << 30)) cap <<= 1;
    struct kv_events *ev = calloc(1, sizeof(*ev));
    if (!ev) return ERR_NOMEM;
    ev->ring = calloc(cap, sizeof(*ev->ring));
    ev->mask = cap - 1;
    u64set_init(&ev->held, (size_t)n_blocks);
    if (!ev->ring || u64set_reserve(&ev->held, (size_t)n_blocks) != 0) {
        u64set_fini(&ev->held);
        free(ev->ring);
        free(ev);
        return ERR_NOMEM;
    }
    pthread_mutex_init(&ev->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ev->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = ev;
    return 0;
}

void kv_events_free(struct kv_events *ev)
{
    if (!ev) return;
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->mu);
    u64set_fini(&ev->held);
    free(ev->ring);
    free(ev);
}

void kv_events_record(void *ctx, bool stored, uint64_t hash)
{
    struct kv_events *ev = ctx;
    pthread_mutex_lock(&ev->mu);
    /* The set was reserved for every block the cache can hold, so adding never allocates. */
    if (stored)
        (void)u64set_add(&ev->held, hash);
    else
        (void)u64set_del(&ev->held, hash);
    uint64_t seq = ++ev->last;
    ev->ring[seq & ev->mask] = (struct kv_event){
        .seq = seq, .hash = hash, .op = stored ? KV_EVENT_STORED : KV_EVENT_EVICTED};
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mu);
}

uint64_t kv_events_last_seq(struct kv_events *ev)
{
    pthread_mutex_lock(&ev->mu);
    uint64_t s = ev->last;
    pthread_mutex_unlock(&ev->mu);
    return s;
}

int kv_events_snapshot(struct kv_events *ev, uint64_t **out, size_t *n, uint64_t *seq)
{
    pthread_mutex_lock(&ev->mu);
    size_t count = ev->held.n;
    uint64_t *v = count ? malloc(count * sizeof(*v)) : NULL;
    if (count && !v) {
        pthread_mutex_unlock(&ev->mu);
        return ERR_NOMEM;
    }
    size_t pos = 0, i = 0;
    uint64_t key;
    while (i < count && u64set_next(&ev->held, &pos, &key)) v[i++] = key;
    *seq = ev->last;
    pthread_mutex_unlock(&ev->mu);
    *out = v;
    *n = i;
    return 0;
}

int kv_events_read(struct kv_events *ev, uint64_t after, struct kv_event *out, size_t max,
                   size_t *n)
{
    int rc = 0;
    size_t k = 0;
    pthread_mutex_lock(&ev->mu);
    size_t cap = ev->mask + 1;
    if (after > ev->last || (ev->last > cap && after < ev->last - cap)) {
        rc = ERR_RANGE; /* the events after `after` were overwritten (or never happened) */
    } else {
        for (uint64_t s = after + 1; s <= ev->last && k < max; s++)
            out[k++] = ev->ring[s & ev->mask];
    }
    pthread_mutex_unlock(&ev->mu);
    *n = k;
    return rc;
}

bool kv_events_wait(struct kv_events *ev, uint64_t after, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&ev->mu);
    while (ev->last <= after)
        if (pthread_cond_timedwait(&ev->cond, &ev->mu, &dl) != 0) break;
    bool any = ev->last > after;
    pthread_mutex_unlock(&ev->mu);
    return any;
}
