/* KV offload store: one index of blocks (hash -> entry) with an LRU list per tier, the offload
 * thread's queue, and tier-3 file I/O (temporary name + rename, checked reads). See kv_offload.h.
 * One mutex guards the index, the queue and the counters; file I/O runs outside it. */
#include "engine/kv/kv_offload.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KVO_DISK_RETRY_S 30.0  /* after a full disk, how long until writes are tried again */
#define KVO_TMP_STALE_S  600.0 /* temporary files older than this are a crashed writer's */
#define KVO_RESCAN_S     1.0   /* how often the offload thread looks for other engines' files */
#define KVO_SEEN_SLOTS   16384 /* the tier-3 gate's memory of blocks offered once (a power of 2) */
#define KVO_PATH_MAX     4096
#define KVO_NAME_LEN     37 /* strlen of 16 hex digits, '-', 16 hex digits, ".kvb" */

/* A record in memory: queued for the offload thread, or held by tier 2. */
struct kvo_rec {
    struct kvo_rec *next; /* queue link */
    uint64_t hash;
    bool to_disk; /* queued: also write it to tier 3 (the gate passed it) */
    size_t len;
    uint8_t data[]; /* (len) the kv_block record */
};

struct kvo_link {
    struct kvo_entry *prev, *next; /* towards least / most recently used */
};

/* A block known to some tier. Dropped from the index when no tier holds it. */
struct kvo_entry {
    uint64_t hash;
    struct kvo_entry *chain; /* hash-table bucket chain */
    struct kvo_rec *rec;     /* tier 2, or NULL */
    size_t file_bytes;       /* tier 3: the file's size, or 0 when no file is known */
    double mtime;            /* tier 3: for the start-up scan's order */
    unsigned scan_gen;       /* tier 3: the last directory listing that named its file */
    struct kvo_link link[KV_OFFLOAD_N_TIERS];
};

struct kvo_list {
    struct kvo_entry *lru, *mru;
};

struct kv_offload {
    struct kv_offload_config cfg;
    char *dir;
    size_t rec_bytes;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    pthread_t thread;
    bool thread_started, stop;
    /* queue */
    struct kvo_rec *q_head, *q_tail;
    int q_len, busy;
    /* index */
    struct kvo_entry **buckets;
    size_t n_buckets, n_entries;
    struct kvo_list lists[KV_OFFLOAD_N_TIERS];
    /* tier 3 state */
    bool disk_on;          /* the directory is usable for reads */
    bool disk_ro;          /* never writable (read-only, permissions) */
    double disk_retry_at;  /* writes paused until then (a full disk) */
    unsigned long tmp_seq; /* temporary-name counter */
    /* The index is the only place lookups consult (no filesystem call on a miss); the offload
     * thread relists the directory when its mtime moved, at most every KVO_RESCAN_S. */
    struct timespec dir_mtime; /* at the last listing (offload thread, or before it starts) */
    double rescan_at;          /* next check (offload thread) */
    bool rescan_now;           /* kv_offload_flush asks for a check now (lock) */
    unsigned scan_gen;         /* listings so far (lock) */
    /* Tier 3's gate: hashes of blocks offered once and not written (direct mapped; a block
     * offered again finds its hash and is written). Lock. */
    uint64_t seen[KVO_SEEN_SLOTS];
    struct kv_offload_stats st;
};

/* ---- index ----------------------------------------------------------------------------------- */

static size_t bucket_of(const struct kv_offload *o, uint64_t hash)
{
    return (size_t)(hash ^ hash >> 29) & (o->n_buckets - 1);
}

static struct kvo_entry *index_find(const struct kv_offload *o, uint64_t hash)
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
static struct kvo_entry *index_get(struct kv_offload *o, uint64_t hash)
{
    struct kvo_entry *e = index_find(o, hash);
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

/* Removes e from the index and frees it once no tier holds it. */
static void index_put(struct kv_offload *o, struct kvo_entry *e)
{
    if (e->rec || e->file_bytes) return;
    struct kvo_entry **p = &o->buckets[bucket_of(o, e->hash)];
    while (*p != e) p = &(*p)->chain;
    *p = e->chain;
    o->n_entries--;
    free(e);
}

static void list_unlink(struct kv_offload *o, int t, struct kvo_entry *e)
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

static void list_push_mru(struct kv_offload *o, int t, struct kvo_entry *e)
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

static void list_touch(struct kv_offload *o, int t, struct kvo_entry *e)
{
    if (o->lists[t].mru == e) return;
    list_unlink(o, t, e);
    list_push_mru(o, t, e);
}

/* Whether hash was offered before (and remembers it now): tier 3's gate (lock held). */
static bool seen_before(struct kv_offload *o, uint64_t hash)
{
    uint64_t *slot = &o->seen[(hash ^ hash >> 31) & (KVO_SEEN_SLOTS - 1)];
    if (*slot == hash) return true;
    *slot = hash;
    return false;
}

/* ---- tier 2 ---------------------------------------------------------------------------------- */

/* Takes r into tier 2 under the budget, evicting least recently used records (lock held). Frees r
 * when it cannot be kept. */
static void host_put(struct kv_offload *o, struct kvo_rec *r)
{
    if (!o->cfg.host_bytes || r->len > o->cfg.host_bytes) {
        free(r);
        return;
    }
    struct kvo_entry *e = index_get(o, r->hash);
    if (!e || e->rec) {
        free(r);
        return;
    }
    while (o->st.bytes[KV_OFFLOAD_HOST] + r->len > o->cfg.host_bytes) {
        struct kvo_entry *v = o->lists[KV_OFFLOAD_HOST].lru;
        list_unlink(o, KV_OFFLOAD_HOST, v);
        o->st.bytes[KV_OFFLOAD_HOST] -= v->rec->len;
        o->st.blocks[KV_OFFLOAD_HOST]--;
        o->st.evicted[KV_OFFLOAD_HOST]++;
        free(v->rec);
        v->rec = NULL;
        index_put(o, v);
    }
    e->rec = r;
    list_push_mru(o, KV_OFFLOAD_HOST, e);
    o->st.bytes[KV_OFFLOAD_HOST] += r->len;
    o->st.blocks[KV_OFFLOAD_HOST]++;
    o->st.stored[KV_OFFLOAD_HOST]++;
}

/* ---- tier 3 ---------------------------------------------------------------------------------- */

static void file_name(const struct kv_offload *o, uint64_t hash, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%016" PRIx64 "-%016" PRIx64 ".kvb", o->dir, o->cfg.ns, hash);
}

/* Records a file of `bytes` for e as most recently used and evicts files over the budget (lock
 * held; unlinks under it: a quick call, and readers of an unlinked file keep their copy). */
static void disk_add(struct kv_offload *o, struct kvo_entry *e, size_t bytes)
{
    if (e->file_bytes) {
        list_touch(o, KV_OFFLOAD_DISK, e);
        return;
    }
    e->file_bytes = bytes;
    list_push_mru(o, KV_OFFLOAD_DISK, e);
    o->st.bytes[KV_OFFLOAD_DISK] += bytes;
    o->st.blocks[KV_OFFLOAD_DISK]++;
    while (o->st.bytes[KV_OFFLOAD_DISK] > o->cfg.dir_bytes) {
        struct kvo_entry *v = o->lists[KV_OFFLOAD_DISK].lru;
        char path[KVO_PATH_MAX];
        file_name(o, v->hash, path, sizeof(path));
        if (!o->disk_ro) unlink(path);
        list_unlink(o, KV_OFFLOAD_DISK, v);
        o->st.bytes[KV_OFFLOAD_DISK] -= v->file_bytes;
        o->st.blocks[KV_OFFLOAD_DISK]--;
        o->st.evicted[KV_OFFLOAD_DISK]++;
        v->file_bytes = 0;
        if (v != e) index_put(o, v);
    }
}

/* Forgets e's file (lock held), e.g. after it failed its check. */
static void disk_forget(struct kv_offload *o, struct kvo_entry *e)
{
    if (!e->file_bytes) return;
    list_unlink(o, KV_OFFLOAD_DISK, e);
    o->st.bytes[KV_OFFLOAD_DISK] -= e->file_bytes;
    o->st.blocks[KV_OFFLOAD_DISK]--;
    e->file_bytes = 0;
}

static bool disk_writable(const struct kv_offload *o)
{
    return o->disk_on && !o->disk_ro && clock_mono_s() >= o->disk_retry_at;
}

/* Writes all of buf to fd; 0 or -1 with errno. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A failed tier-3 write (lock held): a read-only or forbidden directory stops writes for good, a
 * full one for KVO_DISK_RETRY_S; each says so once. */
static void disk_write_failed(struct kv_offload *o, int err)
{
    o->st.write_errors++;
    if (err == EROFS || err == EACCES || err == EPERM) {
        o->disk_ro = true;
        log_warn("kv offload directory is not writable; tier 3 is read only", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(err)));
    } else if (err == ENOSPC || err == EDQUOT) {
        if (o->disk_retry_at <= clock_mono_s())
            log_warn("kv offload directory is full; pausing tier-3 writes", LOG_S("dir", o->dir),
                     LOG_F("retry_s", KVO_DISK_RETRY_S));
        o->disk_retry_at = clock_mono_s() + KVO_DISK_RETRY_S;
    } else {
        log_warn("kv offload write failed", LOG_S("dir", o->dir), LOG_S("err", strerror(err)));
    }
}

/* Writes r as its block's file, atomically: a temporary name in the same directory, then rename
 * (a reader sees the old name absent or the whole record; concurrent writers of one block each
 * rename a whole, identical record). Offload thread; lock not held. 0 or errno. */
static int disk_write(struct kv_offload *o, const struct kvo_rec *r, unsigned long seq)
{
    char tmp[KVO_PATH_MAX], path[KVO_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%ld-%lu.kvb", o->dir, (long)getpid(), seq);
    file_name(o, r->hash, path, sizeof(path));
    /* Fault injection for the degradation tests (a full disk, a volume remounted read only). */
    if (failpoint_check("kv_offload.enospc") != 0) return ENOSPC;
    if (failpoint_check("kv_offload.erofs") != 0) return EROFS;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    int err = 0;
    if (write_all(fd, r->data, r->len) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    return err;
}

/* Reads the file of `want` into a new record; NULL on a miss. A file that fails its check is
 * removed and counted. Inference thread; lock not held. */
static struct kvo_rec *disk_read(struct kv_offload *o, const struct kv_block_meta *want,
                                 bool *corrupt)
{
    char path[KVO_PATH_MAX];
    file_name(o, want->hash, path, sizeof(path));
    *corrupt = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct kvo_rec *r = malloc(sizeof(*r) + o->rec_bytes);
    struct stat sb;
    size_t got = 0;
    if (r && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == o->rec_bytes) {
        while (got < o->rec_bytes) {
            ssize_t n = read(fd, r->data + got, o->rec_bytes - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
    }
    close(fd);
    if (!r) return NULL;
    int rc = got == o->rec_bytes ? kv_block_check(r->data, got, want, true) : ERR_PARSE;
    if (rc != 0) {
        free(r);
        if (rc == ERR_PARSE) { /* truncated or damaged: never serve it, never read it again */
            *corrupt = true;
            unlink(path);
            log_warn("kv offload file failed its check; removed", LOG_S("path", path));
        }
        return NULL;
    }
    r->hash = want->hash;
    r->len = got;
    r->next = NULL;
    return r;
}

/* Parses "<ns>-<hash>.kvb" of this namespace. */
static bool parse_name(const struct kv_offload *o, const char *name, uint64_t *hash)
{
    if (strlen(name) != KVO_NAME_LEN) return false;
    char ns[17], h[17];
    memcpy(ns, name, 16);
    ns[16] = 0;
    memcpy(h, name + 17, 16);
    h[16] = 0;
    if (name[16] != '-' || strcmp(name + 33, ".kvb") != 0) return false;
    char *end;
    errno = 0;
    uint64_t v = strtoull(ns, &end, 16);
    if (errno || *end || v != o->cfg.ns) return false;
    *hash = strtoull(h, &end, 16);
    return !errno && !*end;
}

static int cmp_mtime(const void *a, const void *b)
{
    const struct kvo_entry *x = *(struct kvo_entry *const *)a, *y = *(struct kvo_entry *const *)b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Indexes the directory's files of this namespace, oldest first, removes temporary files a crashed
 * writer left, and applies the budget. Before the thread starts. */
static void disk_scan(struct kv_offload *o)
{
    struct stat dsb;
    if (stat(o->dir, &dsb) == 0) o->dir_mtime = dsb.st_mtim; /* before listing: see disk_rescan */
    DIR *d = opendir(o->dir);
    if (!d) {
        log_warn("cannot read the kv offload directory; tier 3 is off", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
        o->disk_on = false;
        return;
    }
    size_t n = 0, cap = 0;
    struct kvo_entry **found = NULL;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        char path[KVO_PATH_MAX];
        struct stat sb;
        uint64_t hash;
        snprintf(path, sizeof(path), "%s/%s", o->dir, de->d_name);
        if (strncmp(de->d_name, ".tmp-", 5) == 0) {
            if (!o->disk_ro && stat(path, &sb) == 0 &&
                (double)(now.tv_sec - sb.st_mtime) > KVO_TMP_STALE_S)
                unlink(path);
            continue;
        }
        if (!parse_name(o, de->d_name, &hash) || stat(path, &sb) != 0 || index_find(o, hash))
            continue;
        if ((uint64_t)sb.st_size != o->rec_bytes) { /* truncated: writes are whole (rename) */
            o->st.corrupt++;
            if (!o->disk_ro) unlink(path);
            log_warn("kv offload file failed its check; removed", LOG_S("path", path));
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct kvo_entry **f = realloc(found, nc * sizeof(*f));
            if (!f) break;
            found = f;
            cap = nc;
        }
        struct kvo_entry *e = index_get(o, hash);
        if (!e) break;
        e->mtime = (double)sb.st_mtime;
        found[n++] = e;
    }
    closedir(d);
    if (n) qsort(found, n, sizeof(*found), cmp_mtime);
    for (size_t i = 0; i < n; i++) disk_add(o, found[i], o->rec_bytes);
    free(found);
    log_info("kv offload directory", LOG_S("dir", o->dir), LOG_I("blocks", o->st.blocks[1]),
             LOG_I("bytes", (long long)o->st.bytes[1]), LOG_B("writable", !o->disk_ro));
}

/* Opens the tier-3 directory: creates it when missing, checks it can be read and written. */
static void disk_open(struct kv_offload *o)
{
    o->disk_on = true;
    if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
        log_warn("cannot create the kv offload directory; tier 3 is off", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
        o->disk_on = false;
        return;
    }
    if (access(o->dir, W_OK) != 0) {
        o->disk_ro = true;
        log_warn("kv offload directory is not writable; tier 3 is read only", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
    }
    disk_scan(o);
}

/* Brings the index up to date with the directory when its mtime moved since the last listing
 * (another engine sharing it wrote or removed files; this engine's own writes move it too):
 * files of this namespace not indexed yet are added as most recently used, indexed files no
 * longer listed are forgotten. Sizes are not checked here (every read checks them). Offload
 * thread; lock not held on entry. */
static void disk_rescan(struct kv_offload *o)
{
    struct stat sb;
    if (stat(o->dir, &sb) != 0 ||
        (sb.st_mtim.tv_sec == o->dir_mtime.tv_sec && sb.st_mtim.tv_nsec == o->dir_mtime.tv_nsec))
        return;
    DIR *d = opendir(o->dir);
    if (!d) return;
    o->dir_mtime = sb.st_mtim; /* a change while listing moves it again: seen next time */
    size_t n = 0, cap = 0;
    uint64_t *found = NULL;
    bool whole = true;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        uint64_t hash;
        if (!parse_name(o, de->d_name, &hash)) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            uint64_t *f = realloc(found, nc * sizeof(*f));
            if (!f) {
                whole = false;
                break;
            }
            found = f;
            cap = nc;
        }
        found[n++] = hash;
    }
    closedir(d);
    pthread_mutex_lock(&o->mu);
    unsigned gen = ++o->scan_gen;
    for (size_t i = 0; i < n; i++) {
        struct kvo_entry *e = index_get(o, found[i]);
        if (!e) {
            whole = false;
            break;
        }
        e->scan_gen = gen;
        if (!e->file_bytes) disk_add(o, e, o->rec_bytes);
    }
    /* Only a complete listing may say a file is gone. */
    for (struct kvo_entry *e = o->lists[KV_OFFLOAD_DISK].lru, *next; whole && e; e = next) {
        next = e->link[KV_OFFLOAD_DISK].next;
        if (e->scan_gen == gen) continue;
        disk_forget(o, e);
        index_put(o, e);
    }
    pthread_mutex_unlock(&o->mu);
    free(found);
}

/* ---- offload thread ------------------------------------------------------------------------ */

/* Keeps r in tier 2 and writes it through to tier 3, sealed, when the directory takes writes (lock
 * not held on entry). */
static void store_one(struct kv_offload *o, struct kvo_rec *r)
{
    pthread_mutex_lock(&o->mu);
    struct kvo_entry *e = index_find(o, r->hash);
    bool write = r->to_disk && disk_writable(o) && !(e && e->file_bytes);
    unsigned long seq = ++o->tmp_seq;
    pthread_mutex_unlock(&o->mu);
    /* Only a record that leaves memory needs its digest (tier-2 reads check identity only). */
    int err = 0;
    if (write && kv_block_seal(r->data, r->len) != 0) write = false;
    if (write) err = disk_write(o, r, seq);
    pthread_mutex_lock(&o->mu);
    if (write) {
        if (err) {
            disk_write_failed(o, err);
        } else if ((e = index_get(o, r->hash)) != NULL) {
            o->st.stored[KV_OFFLOAD_DISK]++;
            disk_add(o, e, r->len);
            index_put(o, e);
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
    disk_rescan(o);
    pthread_mutex_lock(&o->mu);
    o->rescan_at = clock_mono_s() + KVO_RESCAN_S;
    o->rescan_now = false;
    o->busy = 0;
}

/* Sleeps until there is work, or until the next directory check when tier 3 is on (lock held). */
static void offload_wait(struct kv_offload *o)
{
    if (!o->disk_on) {
        pthread_cond_wait(&o->wake, &o->mu);
        return;
    }
    /* The condition variable waits on CLOCK_REALTIME: convert the monotonic deadline. */
    double left = o->rescan_at - clock_mono_s();
    if (left <= 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double at = (double)ts.tv_nsec * 1e-9 + left;
    ts.tv_sec += (time_t)at;
    ts.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
    pthread_cond_timedwait(&o->wake, &o->mu, &ts);
}

static void *offload_main(void *arg)
{
    struct kv_offload *o = arg;
    pthread_mutex_lock(&o->mu);
    o->rescan_at = clock_mono_s() + KVO_RESCAN_S;
    for (;;) {
        maybe_rescan(o);
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
    if (!o->cfg.queue_max) o->cfg.queue_max = KV_OFFLOAD_QUEUE_DEFAULT;
    o->rec_bytes = rec_bytes;
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
    if (o->dir) disk_open(o);
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
            free(e);
        }
    }
    free(o->buckets);
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
    struct kvo_entry *e = index_find(o, m->hash);
    bool host = o->cfg.host_bytes && !(e && e->rec);
    bool disk = disk_writable(o) && !(e && e->file_bytes) && (durable || seen_before(o, m->hash));
    bool skip = !host && !disk;
    bool full = !skip && o->q_len >= o->cfg.queue_max;
    if (full) o->st.dropped++;
    pthread_mutex_unlock(&o->mu);
    if (skip || full) return NULL;
    struct kvo_rec *r = malloc(sizeof(*r) + o->rec_bytes);
    if (!r || kv_block_encode(r->data, o->rec_bytes, m) != 0) {
        free(r);
        pthread_mutex_lock(&o->mu);
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
    free(rec_of_payload(o, payload));
}

int kv_offload_load(struct kv_offload *o, const struct kv_block_meta *want, void *payload,
                    bool disk, enum kv_offload_tier *tier)
{
    if (want->ns != o->cfg.ns || want->block_size != o->cfg.block_size ||
        want->payload_bytes != o->cfg.payload_bytes)
        return ERR_NOT_FOUND;
    pthread_mutex_lock(&o->mu);
    struct kvo_entry *e = index_find(o, want->hash);
    /* Tier 2 is this process's memory: its identity is checked, its digest was computed here. */
    if (e && e->rec && kv_block_check(e->rec->data, e->rec->len, want, false) == 0) {
        memcpy(payload, kv_block_payload_const(e->rec->data, want->block_size),
               (size_t)want->payload_bytes);
        list_touch(o, KV_OFFLOAD_HOST, e);
        o->st.hits[KV_OFFLOAD_HOST]++;
        /* Used again: worth tier 3 too (another engine may want it); a copy goes to the offload
         * thread, since tier 2 may drop the record meanwhile. */
        if (disk_writable(o) && !e->file_bytes && o->q_len < o->cfg.queue_max) {
            struct kvo_rec *c = malloc(sizeof(*c) + e->rec->len);
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
    /* Tier 3: only a file the index knows (written here, found at start-up or by the offload
     * thread's relisting of a shared directory), so a miss costs no system call. */
    bool on = o->disk_on && disk && e && e->file_bytes;
    pthread_mutex_unlock(&o->mu);
    if (!on) return ERR_NOT_FOUND;
    bool corrupt;
    struct kvo_rec *r = disk_read(o, want, &corrupt);
    pthread_mutex_lock(&o->mu);
    e = index_find(o, want->hash);
    if (!r) {
        if (corrupt) o->st.corrupt++;
        if (e && (corrupt || e->file_bytes)) {
            disk_forget(o, e);
            index_put(o, e);
        }
        pthread_mutex_unlock(&o->mu);
        return ERR_NOT_FOUND;
    }
    memcpy(payload, kv_block_payload_const(r->data, want->block_size), (size_t)want->payload_bytes);
    o->st.hits[KV_OFFLOAD_DISK]++;
    if ((e = index_get(o, want->hash)) != NULL) {
        disk_add(o, e, r->len);
        index_put(o, e);
    }
    host_put(o, r); /* promoted: the next hit is a memory copy */
    pthread_mutex_unlock(&o->mu);
    *tier = KV_OFFLOAD_DISK;
    return 0;
}

void kv_offload_flush(struct kv_offload *o)
{
    pthread_mutex_lock(&o->mu);
    o->rescan_now = o->disk_on;
    pthread_cond_signal(&o->wake);
    while (o->q_head || o->busy || o->rescan_now) pthread_cond_wait(&o->idle, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

void kv_offload_stats(struct kv_offload *o, struct kv_offload_stats *out)
{
    pthread_mutex_lock(&o->mu);
    *out = o->st;
    out->disk_writable = disk_writable(o);
    pthread_mutex_unlock(&o->mu);
}
