/* KV offload prefetch: tier-3 reads ahead of a request's admission (see kv_offload.h). The
 * inference thread names a request's chain of blocks (kv_offload_prefetch); the offload thread
 * reads and checks their files in chain order, before any write it has queued, and stages the
 * verified records where kv_offload_load finds them with a memcpy. The staging is bounded
 * (cfg.stage_bytes) and owned by its prefetch: freed when the prefetch ends with records nobody
 * loaded, or KVO_FETCH_TTL_S after it started if nobody ends it. Not tier 2: never evicted. */
#include "engine/kv/kv_offload_priv.h"

#include "common/clock.h"
#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void fetch_free(struct kvo_fetch *f)
{
    if (!f) return;
    free(f->hash);
    free(f->parent);
    free(f->tokens);
    free(f);
}

static struct kvo_fetch *fetch_find(const struct kv_offload *o, uint64_t id)
{
    for (struct kvo_fetch *f = o->fetches; f; f = f->next)
        if (f->id == id) return f;
    return NULL;
}

static bool fetch_pending(const struct kvo_fetch *f)
{
    return f->next_blk < f->n || f->reading;
}

/* Frees the records f owns that no load took (lock held). */
static void fetch_unstage(struct kv_offload *o, struct kvo_fetch *f)
{
    for (int b = 0; b < f->n; b++) {
        struct kvo_entry *e = kvo_index_find(o, f->hash[b]);
        if (!e || !e->staged || e->staged_by != f->id) continue;
        o->staged_bytes -= e->staged->len;
        o->st.prefetch_unused++;
        kvo_rec_put(o, e->staged);
        e->staged = NULL;
        kvo_index_put(o, e);
    }
}

/* Ends f (lock held): its staging is freed, it leaves the list, and it is freed now unless the
 * offload thread is reading for it (the thread frees it after the read). */
static void fetch_end(struct kv_offload *o, struct kvo_fetch *f)
{
    fetch_unstage(o, f);
    struct kvo_fetch **p = &o->fetches;
    while (*p != f) p = &(*p)->next;
    *p = f->next;
    if (f->reading) {
        f->ended = true;
        f->next_blk = f->n;
    } else {
        fetch_free(f);
    }
    pthread_cond_broadcast(&o->fetched);
}

/* After the read of f's block b (lock held; r the verified record or NULL): stages r for f, or
 * ends f's chain at b (nothing after a block no tier holds can be attached). */
static void fetch_took(struct kv_offload *o, struct kvo_fetch *f, uint64_t hash, struct kvo_rec *r,
                       bool corrupt)
{
    struct kvo_entry *e = kvo_index_find(o, hash);
    if (!r) {
        o->staged_bytes -= o->rec_bytes;
        if (corrupt) o->st.corrupt++;
        if (e) { /* damaged (removed), gone, or another block's: the index forgets the file */
            kvo_disk_forget(o, e);
            kvo_index_put(o, e);
        }
        f->next_blk = f->n;
        return;
    }
    if (f->ended || !(e = kvo_index_get(o, hash)) || e->rec || e->staged) {
        /* ended meanwhile, no memory, or tier 2 took the block meanwhile (its own offload) */
        o->staged_bytes -= r->len;
        kvo_rec_put(o, r);
        return;
    }
    e->staged = r;
    e->staged_by = f->id;
    f->staged++;
    o->st.prefetched++;
    if (e->file_bytes) kvo_list_touch(o, KV_OFFLOAD_DISK, e); /* read: most recently used */
}

bool kvo_fetch_step(struct kv_offload *o)
{
    if (o->stop) return false; /* kv_offload_free: nobody will load them */
    struct kvo_fetch *f = o->fetches;
    while (f && f->next_blk >= f->n) f = f->next;
    if (!f) return false;
    int b = f->next_blk++;
    struct kvo_entry *e = kvo_index_find(o, f->hash[b]);
    if (e && (e->rec || e->staged)) {
        /* In tier 2, or staged for another prefetch (one copy serves both: the later one owns
         * it now, so an earlier request that goes away does not free it). */
        if (e->staged) e->staged_by = f->id;
        if (!fetch_pending(f)) pthread_cond_broadcast(&o->fetched);
        return true;
    }
    if (!o->disk_on || !e || !e->file_bytes ||
        o->staged_bytes + o->rec_bytes > o->cfg.stage_bytes) {
        f->next_blk = f->n; /* the chain stops here: no tier has it, or no room to stage it */
        pthread_cond_broadcast(&o->fetched);
        return true;
    }
    o->staged_bytes += o->rec_bytes; /* reserved for the read */
    f->reading = true;
    o->busy = 1;
    int bs = o->cfg.block_size;
    struct kv_block_meta m = {
        o->cfg.ns,           f->hash[b], f->parent[b], bs, f->tokens + (size_t)b * (size_t)bs,
        o->cfg.payload_bytes};
    pthread_mutex_unlock(&o->mu);
    double t0 = clock_mono_s();
    bool corrupt;
    struct kvo_rec *r = kvo_disk_read(o, &m, &corrupt); /* f is not freed while reading */
    double dt = clock_mono_s() - t0;
    pthread_mutex_lock(&o->mu);
    o->busy = 0;
    f->reading = false;
    f->reads++;
    f->read_s += dt;
    fetch_took(o, f, m.hash, r, corrupt);
    if (f->ended) fetch_free(f); /* unlinked by kv_offload_prefetch_end during the read */
    pthread_cond_broadcast(&o->fetched);
    return true;
}

void kvo_fetch_expire(struct kv_offload *o, double now)
{
    for (struct kvo_fetch *f = o->fetches, *next; f; f = next) {
        next = f->next;
        if (now >= f->expires) fetch_end(o, f);
    }
}

void kvo_fetch_free_all(struct kv_offload *o)
{
    for (struct kvo_fetch *f = o->fetches, *next; f; f = next) {
        next = f->next;
        fetch_free(f);
    }
    o->fetches = NULL;
}

/* How many of m[0..n) the prefetch covers (lock held): up to the first block no tier holds; and
 * in *reads, how many of those only tier 3 holds (what the offload thread will read). */
static int chain_extent(const struct kv_offload *o, const struct kv_block_meta *m, int n,
                        int *reads)
{
    int k = 0;
    *reads = 0;
    for (; k < n; k++) {
        const struct kvo_entry *e = kvo_index_find(o, m[k].hash);
        if (!e || (!e->rec && !e->staged && !e->file_bytes)) break;
        if (!e->rec && !e->staged) (*reads)++;
    }
    return k;
}

int kv_offload_prefetch(struct kv_offload *o, const struct kv_block_meta *m, int n, uint64_t *id)
{
    if (n < 0) return ERR_INVAL;
    for (int k = 0; k < n; k++)
        if (m[k].ns != o->cfg.ns || m[k].block_size != o->cfg.block_size ||
            m[k].payload_bytes != o->cfg.payload_bytes)
            return ERR_INVAL;
    pthread_mutex_lock(&o->mu);
    int reads = 0;
    int k = o->disk_on ? chain_extent(o, m, n, &reads) : 0;
    pthread_mutex_unlock(&o->mu);
    if (reads == 0) {
        *id = 0;
        return 0;
    }
    size_t bs = (size_t)o->cfg.block_size;
    struct kvo_fetch *f = calloc(1, sizeof(*f));
    if (f) {
        f->hash = malloc((size_t)k * sizeof(*f->hash));
        f->parent = malloc((size_t)k * sizeof(*f->parent));
        f->tokens = malloc((size_t)k * bs * sizeof(*f->tokens));
    }
    if (!f || !f->hash || !f->parent || !f->tokens) {
        fetch_free(f);
        return ERR_NOMEM;
    }
    for (int b = 0; b < k; b++) {
        f->hash[b] = m[b].hash;
        f->parent[b] = m[b].parent;
        memcpy(f->tokens + (size_t)b * bs, m[b].tokens, bs * sizeof(*f->tokens));
    }
    f->n = k;
    f->expires = clock_mono_s() + KVO_FETCH_TTL_S;
    pthread_mutex_lock(&o->mu);
    f->id = ++o->fetch_seq;
    struct kvo_fetch **p = &o->fetches;
    while (*p) p = &(*p)->next;
    *p = f;
    o->st.prefetches++;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
    *id = f->id;
    return 0;
}

bool kv_offload_prefetch_pending(struct kv_offload *o, uint64_t id,
                                 struct kv_offload_prefetch_info *info)
{
    pthread_mutex_lock(&o->mu);
    const struct kvo_fetch *f = id ? fetch_find(o, id) : NULL;
    bool pending = f && fetch_pending(f);
    if (info)
        *info = f ? (struct kv_offload_prefetch_info){f->n, f->reads, f->staged, f->read_s}
                  : (struct kv_offload_prefetch_info){0};
    pthread_mutex_unlock(&o->mu);
    return pending;
}

bool kv_offload_prefetch_wait(struct kv_offload *o, uint64_t id, double timeout_s)
{
    struct timespec ts;
    kvo_deadline(timeout_s, &ts);
    pthread_mutex_lock(&o->mu);
    const struct kvo_fetch *f;
    while (id && (f = fetch_find(o, id)) != NULL && fetch_pending(f))
        if (pthread_cond_timedwait(&o->fetched, &o->mu, &ts) == ETIMEDOUT) break;
    bool pending = id && (f = fetch_find(o, id)) != NULL && fetch_pending(f);
    pthread_mutex_unlock(&o->mu);
    return !pending;
}

void kv_offload_prefetch_end(struct kv_offload *o, uint64_t id)
{
    if (!id) return;
    pthread_mutex_lock(&o->mu);
    struct kvo_fetch *f = fetch_find(o, id);
    if (f) fetch_end(o, f);
    pthread_mutex_unlock(&o->mu);
}
