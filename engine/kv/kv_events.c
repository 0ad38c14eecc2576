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
    struct u64set held[KV_EVENTS_N_TIERS];
};

const char *kv_events_tier_name(enum kv_events_tier t)
{
    static const char *const names[KV_EVENTS_N_TIERS] = {"device", "host", "disk"};
    return t >= 0 && t < KV_EVENTS_N_TIERS ? names[t] : "?";
}

int kv_events_new(int n_blocks, size_t ring_events, struct kv_events **out)
{
    if (n_blocks < 1) return ERR_INVAL;
    size_t cap = KV_EVENTS_MIN_RING;
    while (cap < ring_events && cap < ((size_t)1 << 30)) cap <<= 1;
    struct kv_events *ev = calloc(1, sizeof(*ev));
    if (!ev) return ERR_NOMEM;
    ev->ring = calloc(cap, sizeof(*ev->ring));
    ev->mask = cap - 1;
    /* The offload tiers hold nothing until kv_events_size_tier (a set of maximum 0 refuses adds). */
    for (int t = 0; t < KV_EVENTS_N_TIERS; t++)
        u64set_init(&ev->held[t], t == KV_EVENTS_DEVICE ? (size_t)n_blocks : 0);
    if (!ev->ring || u64set_reserve(&ev->held[KV_EVENTS_DEVICE], (size_t)n_blocks) != 0) {
        u64set_fini(&ev->held[KV_EVENTS_DEVICE]);
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

int kv_events_size_tier(struct kv_events *ev, enum kv_events_tier tier, size_t max_blocks)
{
    if (tier <= KV_EVENTS_DEVICE || tier >= KV_EVENTS_N_TIERS) return ERR_INVAL;
    u64set_fini(&ev->held[tier]);
    u64set_init(&ev->held[tier], max_blocks);
    return u64set_reserve(&ev->held[tier], max_blocks) != 0 ? ERR_NOMEM : 0;
}

void kv_events_free(struct kv_events *ev)
{
    if (!ev) return;
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->mu);
    for (int t = 0; t < KV_EVENTS_N_TIERS; t++) u64set_fini(&ev->held[t]);
    free(ev->ring);
    free(ev);
}

void kv_events_record_tier(struct kv_events *ev, enum kv_events_tier tier, bool stored,
                           uint64_t hash)
{
    if (tier < 0 || tier >= KV_EVENTS_N_TIERS) return;
    pthread_mutex_lock(&ev->mu);
    /* Each set was reserved for every block its tier can hold, so adding never allocates (past
     * that, ERR_TOO_BIG: the event still enters the ring). */
    if (stored)
        (void)u64set_add(&ev->held[tier], hash);
    else
        (void)u64set_del(&ev->held[tier], hash);
    uint64_t seq = ++ev->last;
    ev->ring[seq & ev->mask] = (struct kv_event){
        .seq = seq, .hash = hash, .op = stored ? KV_EVENT_STORED : KV_EVENT_EVICTED, .tier = tier};
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->mu);
}

void kv_events_record(void *ctx, bool stored, uint64_t hash)
{
    kv_events_record_tier(ctx, KV_EVENTS_DEVICE, stored, hash);
}

uint64_t kv_events_last_seq(struct kv_events *ev)
{
    pthread_mutex_lock(&ev->mu);
    uint64_t s = ev->last;
    pthread_mutex_unlock(&ev->mu);
    return s;
}

int kv_events_snapshot(struct kv_events *ev, uint64_t **out, size_t n[KV_EVENTS_N_TIERS],
                       uint64_t *seq)
{
    pthread_mutex_lock(&ev->mu);
    size_t count = 0;
    for (int t = 0; t < KV_EVENTS_N_TIERS; t++) count += ev->held[t].n;
    uint64_t *v = count ? malloc(count * sizeof(*v)) : NULL;
    if (count && !v) {
        pthread_mutex_unlock(&ev->mu);
        return ERR_NOMEM;
    }
    size_t i = 0;
    for (int t = 0; t < KV_EVENTS_N_TIERS; t++) {
        size_t pos = 0, start = i;
        uint64_t key;
        while (i < count && u64set_next(&ev->held[t], &pos, &key)) v[i++] = key;
        n[t] = i - start;
    }
    *seq = ev->last;
    pthread_mutex_unlock(&ev->mu);
    *out = v;
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
