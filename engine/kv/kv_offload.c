/* KV offload store: one index of blocks (hash -> entry) with an LRU list per tier, tier 2 (records
 * in memory), the offload thread's queue and the public calls; tier 3's files are
 * kv_offload_disk.c's, the reads ahead of admission kv_offload_prefetch.c's. See kv_offload.h. One mutex guards the index, the queue and the counters;
 * file I/O runs outside it. */
#include "engine/kv/kv_offload_priv.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- index ----------------------------------------------------------------------------------- */

static size_t bucket_of(const struct kv_offload *o, uint64_t hash)
{
    return (size_t)(hash ^ hash >> 29) & (o->n_buckets - 1);
}

struct kvo_entry *kvo_index_find(const struct kv_offload *o, uint64_t hash)
{
    for (struct kvo_entry *e = o->buckets[bucket_of(o, hash)]; e; e = e->chain)
        if (e->hash == hash) return e;
    return NULL;
}

static void index_grow(struct kv_offload *o)
{
    size_t n = o->n_buckets * 2;
    struct kvo_entry **b = calloc(n, sizeof(*b));
    if (!b) return; /* longer chains, still correct */
    for (size_t i = 0; i < o->n_buckets; i++) {
        for (struct kvo_entry *e = o->buckets[i], *next; e; e = next) {
            next = e->chain;
            size_t j = (size_t)(e->hash ^ e->hash >> 29) & (n - 1);
            e->chain = b[j];
            b[j] = e;
        }
    }
    free(o->buckets);
    o->buckets = b;
    o->n_buckets = n;
}

/* The entry of hash, created when absent; NULL without memory. */
struct kvo_entry *kvo_index_get(struct kv_offload *o, uint64_t hash)
{
    struct kvo_entry *e = kvo_index_find(o, hash);
    if (e) return e;
    if (o->n_entries >= o->n_buckets) index_grow(o);
    if (!(e = calloc(1, sizeof(*e)))) return NULL;
    e->hash = hash;
    size_t i = bucket_of(o, hash);
    e->chain = o->buckets[i];
    o->buckets[i] = e;
    o->n_entries++;
    return e;
}

/* Removes e from the index and frees it once no tier holds it (nor a prefetch's staging). */
void kvo_index_put(struct kv_offload *o, struct kvo_entry *e)
{
    if (e->rec || e->file_bytes || e->staged) return;
    struct kvo_entry **p = &o->buckets[bucket_of(o, e->hash)];
    while (*p != e) p = &(*p)->chain;
    *p = e->chain;
    o->n_entries--;
    free(e);
}

void kvo_list_unlink(struct kv_offload *o, int t, struct kvo_entry *e)
{
    struct kvo_list *l = &o->lists[t];
    struct kvo_link *k = &e->link[t];
    if (k->prev)
        k->prev->link[t].next = k->next;
    else
        l->lru = k->next;
    if (k->next)
        k->next->link[t].prev = k->prev;
    else
        l->mru = k->prev;
    k->prev = k->next = NULL;
}

void kvo_list_push_mru(struct kv_offload *o, int t, struct kvo_entry *e)
{
    struct kvo_list *l = &o->lists[t];
    e->link[t].prev = l->mru;
    e->link[t].next = NULL;
    if (l->mru)
        l->mru->link[t].next = e;
    else
        l->lru = e;
    l->mru = e;
}

void kvo_list_touch(struct kv_offload *o, int t, struct kvo_entry *e)
{
    if (o->lists[t].mru == e) return;
    kvo_list_unlink(o, t, e);
    kvo_list_push_mru(o, t, e);
}

/* Whether hash was offered before (and remembers it now): tier 3's gate (lock held). */
static bool seen_before(struct kv_offload *o, uint64_t hash)
{
    uint64_t *slot = &o->seen[(hash ^ hash >> 31) & (KVO_SEEN_SLOTS - 1)];
    if (*slot == hash) return true;
    *slot = hash;
    return false;
}

/* ---- record buffers -------------------------------------------------------------------------- */

struct kvo_rec *kvo_rec_take(struct kv_offload *o)
{
    struct kvo_rec *r = o->spare;
    if (r) {
        o->spare = r->next;
        o->n_spare--;
    } else if (!(r = malloc(sizeof(*r) + o->rec_bytes))) {
        return NULL;
    }
    r->next = NULL;
    r->len = o->rec_bytes;
    return r;
}

struct kvo_rec *kvo_rec_new(struct kv_offload *o)
{
    pthread_mutex_lock(&o->mu);
    struct kvo_rec *r = kvo_rec_take(o);
    pthread_mutex_unlock(&o->mu);
    return r;
}

void kvo_rec_put(struct kv_offload *o, struct kvo_rec *r)
{
    if (!r) return;
    if (o->n_spare >= o->max_spare) {
        free(r);
        return;
    }
    r->next = o->spare;
    o->spare = r;
    o->n_spare++;
}

/* ---- tier 2 ---------------------------------------------------------------------------------- */

/* Takes r into tier 2 under the budget, evicting least recently used records (lock held). Frees r
 * when it cannot be kept. */
static void host_put(struct kv_offload *o, struct kvo_rec *r)
{
    if (!o->cfg.host_bytes || r->len > o->cfg.host_bytes) {
        kvo_rec_put(o, r);
        return;
    }
    struct kvo_entry *e = kvo_index_get(o, r->hash);
    if (!e || e->rec) {
        kvo_rec_put(o, r);
        return;
    }
    while (o->st.bytes[KV_OFFLOAD_HOST] + r->len > o->cfg.host_bytes) {
        struct kvo_entry *v = o->lists[KV_OFFLOAD_HOST].lru;
        kvo_list_unlink(o, KV_OFFLOAD_HOST, v);
        o->st.bytes[KV_OFFLOAD_HOST] -= v->rec->len;
        o->st.blocks[KV_OFFLOAD_HOST]--;
        o->st.evicted[KV_OFFLOAD_HOST]++;
        kvo_observe(o, KV_OFFLOAD_HOST, false, v->hash);
        kvo_rec_put(o, v->rec);
        v->rec = NULL;
        kvo_index_put(o, v);
    }
    e->rec = r;
    kvo_list_push_mru(o, KV_OFFLOAD_HOST, e);
    o->st.bytes[KV_OFFLOAD_HOST] += r->len;
    o->st.blocks[KV_OFFLOAD_HOST]++;
    o->st.stored[KV_OFFLOAD_HOST]++;
    kvo_observe(o, KV_OFFLOAD_HOST, true, r->hash);
}

/* ---- offload thread ------------------------------------------------------------------------ */

/* Keeps r in tier 2 and writes it through to tier 3, sealed, when the directory takes writes (lock
 * not held on entry). */
static void store_one(struct kv_offload *o, struct kvo_rec *r)
{
    pthread_mutex_lock(&o->mu);
    struct kvo_entry *e = kvo_index_find(o, r->hash);
    bool write = r->to_disk && kvo_disk_writable(o) && !(e && e->file_bytes);
    unsigned long seq = ++o->tmp_seq;
    pthread_mutex_unlock(&o->mu);
    /* Only a record that leaves memory needs its digest (tier-2 reads check identity only). */
    int err = 0;
    if (write && kv_block_seal(r->data, r->len) != 0) write = false;
    if (write) err = kvo_disk_write(o, r, seq);
    pthread_mutex_lock(&o->mu);
    if (write) {
        if (err) {
            kvo_disk_write_failed(o, err);
        } else if ((e = kvo_index_get(o, r->hash)) != NULL) {
            o->st.stored[KV_OFFLOAD_DISK]++;
            kvo_disk_add(o, e, r->len);
            kvo_index_put(o, e);
        }
    }
    host_put(o, r);
    pthread_mutex_unlock(&o->mu);
}

/* Relists the directory when KVO_RESCAN_S has passed or kv_offload_flush asked (lock held on entry
 * and return; released while listing). */
static void maybe_rescan(struct kv_offload *o)
{
    if (!o->disk_on || (!o->rescan_now && clock_mono_s() < o->rescan_at)) return;
    o->busy = 1;
    pthread_mutex_unlock(&o->mu);
    kvo_disk_rescan(o);
    pthread_mutex_lock(&o->mu);
    o->rescan_at = clock_mono_s() + KVO_RESCAN_S;
    o->rescan_now = false;
    o->busy = 0;
}

/* The condition variables wait on CLOCK_REALTIME: converts a span from now to its deadline. */
void kvo_deadline(double left, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    if (left < 0) left = 0;
    double at = (double)ts->tv_nsec * 1e-9 + left;
    ts->tv_sec += (time_t)at;
    ts->tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
}

/* Sleeps until there is work, or until the next directory check when tier 3 is on (lock held;
 * prefetches exist only then, and their expiry is checked at that pace). */
static void offload_wait(struct kv_offload *o)
{
    if (!o->disk_on) {
        pthread_cond_wait(&o->wake, &o->mu);
        return;
    }
    double left = o->rescan_at - clock_mono_s();
    if (left <= 0) return;
    struct timespec ts;
    kvo_deadline(left, &ts);
    pthread_cond_timedwait(&o->wake, &o->mu, &ts);
}

static void *offload_main(void *arg)
{
    struct kv_offload *o = arg;
    pthread_mutex_lock(&o->mu);
    o->rescan_at = clock_mono_s() + KVO_RESCAN_S;
    for (;;) {
        maybe_rescan(o);
        if (o->fetches) kvo_fetch_expire(o, clock_mono_s());
        if (kvo_fetch_step(o)) continue; /* reads first: a request is waiting for them */
        if (!o->q_head) {
            pthread_cond_broadcast(&o->idle); /* kv_offload_flush */
            if (o->stop) break;               /* stopping, and everything queued is written */
            if (!o->rescan_now) offload_wait(o);
            continue;
        }
        struct kvo_rec *r = o->q_head;
        o->q_head = r->next;
        if (!o->q_head) o->q_tail = NULL;
        o->q_len--;
        o->busy = 1;
        pthread_mutex_unlock(&o->mu);
        store_one(o, r);
        pthread_mutex_lock(&o->mu);
        o->busy = 0;
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* ---- public ---------------------------------------------------------------------------------- */

int kv_offload_new(const struct kv_offload_config *cfg, struct kv_offload **out)
{
    if (!cfg || cfg->ns == 0 || cfg->block_size <= 0 || cfg->payload_bytes == 0 ||
        (!cfg->host_bytes && !cfg->dir) || (cfg->dir && (!*cfg->dir || !cfg->dir_bytes)) ||
        cfg->queue_max < 0 || (cfg->dir && strlen(cfg->dir) > KVO_PATH_MAX - 64))
        return ERR_INVAL;
    size_t rec_bytes = kv_block_record_bytes(cfg->block_size, cfg->payload_bytes);
    if (!rec_bytes) return ERR_INVAL;
    struct kv_offload *o = calloc(1, sizeof(*o));
    if (!o) return ERR_NOMEM;
    o->cfg = *cfg;
    o->cfg.dir = NULL;
    if (!o->cfg.queue_max) {
        /* one long prompt evicts a context's blocks in one step: hold that many while the
         * offload thread seals and writes them (a 64-record queue dropped 178 of the 256 blocks
         * a 4k-token SmolLM2 prompt evicted, and a chain is only usable up to its first gap) */
        uint64_t by_bytes = KV_OFFLOAD_QUEUE_BYTES / rec_bytes; /* nonzero: checked above */
        o->cfg.queue_max = by_bytes > KV_OFFLOAD_QUEUE_DEFAULT
                               ? (by_bytes > INT32_MAX ? INT32_MAX : (int)by_bytes)
                               : KV_OFFLOAD_QUEUE_DEFAULT;
    }
    if (!o->cfg.stage_bytes) o->cfg.stage_bytes = KV_OFFLOAD_STAGE_DEFAULT;
    o->rec_bytes = rec_bytes;
    o->max_spare = KVO_SPARE_BYTES / rec_bytes;
    o->n_buckets = 256;
    o->buckets = calloc(o->n_buckets, sizeof(*o->buckets));
    if (!o->buckets || (cfg->dir && !(o->dir = strdup(cfg->dir)))) {
        free(o->buckets);
        free(o);
        return ERR_NOMEM;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->wake, NULL);
    pthread_cond_init(&o->idle, NULL);
    pthread_cond_init(&o->fetched, NULL);
    if (o->dir) kvo_disk_open(o);
    int rc = pthread_create(&o->thread, NULL, offload_main, o);
    if (rc) {
        kv_offload_free(o);
        return rc == EAGAIN ? ERR_AGAIN : ERR_INTERNAL;
    }
    o->thread_started = true;
    *out = o;
    return 0;
}

void kv_offload_free(struct kv_offload *o)
{
    if (!o) return;
    if (o->thread_started) {
        pthread_mutex_lock(&o->mu);
        o->stop = true;
        pthread_cond_signal(&o->wake);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    for (struct kvo_rec *r = o->q_head, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    for (size_t i = 0; i < o->n_buckets; i++) {
        for (struct kvo_entry *e = o->buckets[i], *next; e; e = next) {
            next = e->chain;
            free(e->rec);
            free(e->staged);
            free(e);
        }
    }
    kvo_fetch_free_all(o);
    for (struct kvo_rec *r = o->spare, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    free(o->buckets);
    pthread_cond_destroy(&o->fetched);
    pthread_cond_destroy(&o->idle);
    pthread_cond_destroy(&o->wake);
    pthread_mutex_destroy(&o->mu);
    free(o->dir);
    free(o);
}

uint64_t kv_offload_namespace(const struct kv_offload *o)
{
    return o->cfg.ns;
}

uint64_t kv_offload_payload_bytes(const struct kv_offload *o)
{
    return o->cfg.payload_bytes;
}

int kv_offload_block_size(const struct kv_offload *o)
{
    return o->cfg.block_size;
}

bool kv_offload_has_host(const struct kv_offload *o)
{
    return o->cfg.host_bytes > 0;
}

bool kv_offload_has_disk(const struct kv_offload *o)
{
    return o->disk_on; /* set before the offload thread starts, never changed */
}

static struct kvo_rec *rec_of_payload(const struct kv_offload *o, uint8_t *payload)
{
    uint8_t *data = payload - (KV_BLOCK_HEADER_BYTES + (size_t)o->cfg.block_size * 4);
    return (struct kvo_rec *)(data - offsetof(struct kvo_rec, data));
}

uint8_t *kv_offload_job_new(struct kv_offload *o, const struct kv_block_meta *m, bool durable)
{
    if (m->ns != o->cfg.ns || m->block_size != o->cfg.block_size ||
        m->payload_bytes != o->cfg.payload_bytes)
        return NULL;
    pthread_mutex_lock(&o->mu);
    struct kvo_entry *e = kvo_index_find(o, m->hash);
    bool host = o->cfg.host_bytes && !(e && e->rec);
    bool disk =
        kvo_disk_writable(o) && !(e && e->file_bytes) && (durable || seen_before(o, m->hash));
    bool skip = !host && !disk;
    bool full = !skip && o->q_len >= o->cfg.queue_max;
    if (full) o->st.dropped++;
    pthread_mutex_unlock(&o->mu);
    if (skip || full) return NULL;
    struct kvo_rec *r = kvo_rec_new(o);
    if (!r || kv_block_encode(r->data, o->rec_bytes, m) != 0) {
        pthread_mutex_lock(&o->mu);
        kvo_rec_put(o, r);
        o->st.dropped++;
        pthread_mutex_unlock(&o->mu);
        return NULL;
    }
    r->hash = m->hash;
    r->to_disk = disk;
    r->len = o->rec_bytes;
    r->next = NULL;
    return kv_block_payload(r->data, m->block_size);
}

/* Appends r to the offload thread's queue (lock held). */
static void queue_push(struct kv_offload *o, struct kvo_rec *r)
{
    if (o->q_tail)
        o->q_tail->next = r;
    else
        o->q_head = r;
    o->q_tail = r;
    o->q_len++;
    pthread_cond_signal(&o->wake);
}

void kv_offload_job_submit(struct kv_offload *o, uint8_t *payload)
{
    struct kvo_rec *r = rec_of_payload(o, payload);
    pthread_mutex_lock(&o->mu);
    queue_push(o, r);
    pthread_mutex_unlock(&o->mu);
}

void kv_offload_job_cancel(struct kv_offload *o, uint8_t *payload)
{
    pthread_mutex_lock(&o->mu);
    kvo_rec_put(o, rec_of_payload(o, payload));
    pthread_mutex_unlock(&o->mu);
}

int kv_offload_load(struct kv_offload *o, const struct kv_block_meta *want, void *payload,
                    enum kv_offload_tier *tier)
{
    if (want->ns != o->cfg.ns || want->block_size != o->cfg.block_size ||
        want->payload_bytes != o->cfg.payload_bytes)
        return ERR_NOT_FOUND;
    pthread_mutex_lock(&o->mu);
    struct kvo_entry *e = kvo_index_find(o, want->hash);
    /* Tier 2 is this process's memory: its identity is checked, its digest was computed here. */
    if (e && e->rec && kv_block_check(e->rec->data, e->rec->len, want, false) == 0) {
        memcpy(payload, kv_block_payload_const(e->rec->data, want->block_size),
               (size_t)want->payload_bytes);
        kvo_list_touch(o, KV_OFFLOAD_HOST, e);
        o->st.hits[KV_OFFLOAD_HOST]++;
        /* Used again: worth tier 3 too (another engine may want it); a copy goes to the offload
         * thread, since tier 2 may drop the record meanwhile. */
        if (kvo_disk_writable(o) && !e->file_bytes && o->q_len < o->cfg.queue_max) {
            struct kvo_rec *c = kvo_rec_take(o);
            if (c) {
                memcpy(c, e->rec, sizeof(*c) + e->rec->len);
                c->next = NULL;
                c->to_disk = true;
                queue_push(o, c);
            }
        }
        pthread_mutex_unlock(&o->mu);
        *tier = KV_OFFLOAD_HOST;
        return 0;
    }
    /* Tier 3, read ahead: the offload thread checked the file's digest and this identity when it
     * staged the record (kv_offload_prefetch.c); the identity is checked again against `want`. No
     * file is read here, whatever the index says. */
    if (!e || !e->staged || kv_block_check(e->staged->data, e->staged->len, want, false) != 0) {
        pthread_mutex_unlock(&o->mu);
        return ERR_NOT_FOUND;
    }
    struct kvo_rec *r = e->staged;
    e->staged = NULL;
    o->staged_bytes -= r->len;
    memcpy(payload, kv_block_payload_const(r->data, want->block_size), (size_t)want->payload_bytes);
    o->st.hits[KV_OFFLOAD_DISK]++;
    host_put(o, r); /* promoted: the next hit is a memory copy (without tier 2, freed) */
    kvo_index_put(o, e);
    pthread_mutex_unlock(&o->mu);
    *tier = KV_OFFLOAD_DISK;
    return 0;
}

/* Whether some prefetch has reads left (lock held). */
static bool fetch_reads_left(const struct kv_offload *o)
{
    for (const struct kvo_fetch *f = o->fetches; f; f = f->next)
        if (f->next_blk < f->n) return true;
    return false;
}

void kv_offload_flush(struct kv_offload *o)
{
    pthread_mutex_lock(&o->mu);
    o->rescan_now = o->disk_on;
    pthread_cond_signal(&o->wake);
    while (o->q_head || o->busy || o->rescan_now || fetch_reads_left(o))
        pthread_cond_wait(&o->idle, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

void kv_offload_stats(struct kv_offload *o, struct kv_offload_stats *out)
{
    pthread_mutex_lock(&o->mu);
    *out = o->st;
    out->disk_writable = kvo_disk_writable(o);
    out->staged_bytes = o->staged_bytes;
    pthread_mutex_unlock(&o->mu);
}
