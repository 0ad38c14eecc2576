/* Internals of the KV offload store shared by its files: kv_offload.c (the index, tier 2, the
 * offload thread and the public calls), kv_offload_disk.c (tier 3, the directory) and
 * kv_offload_prefetch.c (tier-3 reads ahead of admission, and their staging). Not for other
 * modules. One mutex (kv_offload.mu) guards the index, the queue and the counters; the
 * comments say which functions want it held. */
#ifndef CINFER_ENGINE_KV_OFFLOAD_PRIV_H
#define CINFER_ENGINE_KV_OFFLOAD_PRIV_H

#include "engine/kv/kv_offload.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define KVO_DISK_RETRY_S 30.0  /* after a full disk, how long until writes are tried again */
#define KVO_TMP_STALE_S  600.0 /* temporary files older than this are a crashed writer's */
#define KVO_RESCAN_S     1.0   /* how often the offload thread looks for other engines' files */
#define KVO_SEEN_SLOTS   16384 /* the tier-3 gate's memory of blocks offered once (a power of 2) */
#define KVO_PATH_MAX     4096
#define KVO_NAME_LEN     37  /* strlen of 16 hex digits, '-', 16 hex digits, ".kvb" */
#define KVO_SLOW_READ_S  0.2 /* the kv_offload.slow_read failpoint's delay per read */
#define KVO_FETCH_TTL_S  60.0
#define KVO_SPARE_BYTES                                                                            \
    (32u                                                                                           \
     << 20) /* freed record buffers kept for reuse (pages already mapped) */ /* a prefetch nobody ended is ended (its staging freed) after this */

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
    struct kvo_rec *staged;  /* read ahead from tier 3 for a prefetch (verified), or NULL */
    uint64_t staged_by;      /* the prefetch that owns `staged` (the latest that wanted it) */
    size_t file_bytes;       /* tier 3: the file's size, or 0 when no file is known */
    double mtime;            /* tier 3: for the start-up scan's order */
    unsigned scan_gen;       /* tier 3: the last directory listing that named its file */
    struct kvo_link link[KV_OFFLOAD_N_TIERS];
};

struct kvo_list {
    struct kvo_entry *lru, *mru;
};

/* One prefetch (kv_offload_prefetch): a request's chain of blocks, read in order by the offload
 * thread. Lives until kv_offload_prefetch_end (or KVO_FETCH_TTL_S), since it names the staged
 * records it owns. */
struct kvo_fetch {
    struct kvo_fetch *next; /* o->fetches, oldest first */
    uint64_t id;
    int n, next_blk;   /* blocks; the next one the offload thread looks at (n: done) */
    bool reading;      /* the offload thread is reading blk[next_blk - 1] (lock released) */
    bool ended;        /* kv_offload_prefetch_end came during that read: the thread frees it */
    int reads, staged; /* files read (verified or not), records staged */
    double read_s;     /* seconds those reads took, open to checked */
    double expires;    /* clock_mono_s after which the thread ends it */
    uint64_t *hash, *parent; /* (n) */
    int32_t *tokens;         /* (n * block_size) */
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
    /* prefetches (lock) */
    struct kvo_fetch *fetches;
    uint64_t fetch_seq;     /* the last id given */
    uint64_t staged_bytes;  /* records staged now, under cfg.stage_bytes */
    pthread_cond_t fetched; /* a prefetch finished its reads */
    /* Freed record buffers kept for the next one (lock): a prefetch's records are all alive at
     * once, and fresh memory costs a page fault per 4 KiB on its first write. */
    struct kvo_rec *spare;
    size_t n_spare, max_spare;
    struct kv_offload_stats st;
};

/* ---- index (kv_offload.c; lock held) ---- */

struct kvo_entry *kvo_index_find(const struct kv_offload *o, uint64_t hash);
/* The entry of hash, created when absent; NULL without memory. */
struct kvo_entry *kvo_index_get(struct kv_offload *o, uint64_t hash);
/* Removes e from the index and frees it once no tier holds it (nor a prefetch's staging). */
void kvo_index_put(struct kv_offload *o, struct kvo_entry *e);
void kvo_list_unlink(struct kv_offload *o, int t, struct kvo_entry *e);
void kvo_list_push_mru(struct kv_offload *o, int t, struct kvo_entry *e);
void kvo_list_touch(struct kv_offload *o, int t, struct kvo_entry *e);
/* Tells the configured observer that tier t took (stored) or dropped the block (lock held). */
static inline void kvo_observe(const struct kv_offload *o, enum kv_offload_tier t, bool stored,
                               uint64_t hash)
{
    if (o->cfg.observer) o->cfg.observer(o->cfg.observer_ctx, t, stored, hash);
}

/* A record buffer of rec_bytes (len set, the rest not): a spare one, else new; NULL without
 * memory. kvo_rec_take with the lock held, kvo_rec_new without. */
struct kvo_rec *kvo_rec_take(struct kv_offload *o);
struct kvo_rec *kvo_rec_new(struct kv_offload *o);
/* Gives r back (NULL-safe): kept as a spare under KVO_SPARE_BYTES, else freed (lock held). */
void kvo_rec_put(struct kv_offload *o, struct kvo_rec *r);

/* The CLOCK_REALTIME time `left` seconds from now, for pthread_cond_timedwait. */
void kvo_deadline(double left, struct timespec *ts);

/* ---- prefetch (kv_offload_prefetch.c; lock held) ---- */

/* Does the next read of the oldest prefetch with reads left: returns false when there is none;
 * else releases the lock for the read (busy set) and returns true with it held again. Offload
 * thread. */
bool kvo_fetch_step(struct kv_offload *o);
/* Ends the prefetches past their KVO_FETCH_TTL_S. Offload thread. */
void kvo_fetch_expire(struct kv_offload *o, double now);
/* Frees every prefetch and staged record (kv_offload_free, thread stopped). */
void kvo_fetch_free_all(struct kv_offload *o);

/* ---- tier 3 (kv_offload_disk.c) ---- */

/* Records a file of `bytes` for e as most recently used and evicts files over the budget (lock
 * held). */
void kvo_disk_add(struct kv_offload *o, struct kvo_entry *e, size_t bytes);
/* Forgets e's file (lock held). */
void kvo_disk_forget(struct kv_offload *o, struct kvo_entry *e);
/* Whether tier 3 takes writes now (lock held). */
bool kvo_disk_writable(const struct kv_offload *o);
/* Counts and reports a failed write of errno err (lock held). */
void kvo_disk_write_failed(struct kv_offload *o, int err);
/* Writes r as its block's file atomically (offload thread; lock not held). 0 or errno. */
int kvo_disk_write(struct kv_offload *o, const struct kvo_rec *r, unsigned long seq);
/* Reads and checks the file of `want` into a new record; NULL on a miss, *corrupt when a file
 * failed its check (removed). Offload thread; lock not held. */
struct kvo_rec *kvo_disk_read(struct kv_offload *o, const struct kv_block_meta *want,
                              bool *corrupt);
/* Opens the directory and indexes its files (before the offload thread starts). */
void kvo_disk_open(struct kv_offload *o);
/* Relists the directory when its mtime moved (offload thread; lock not held). */
void kvo_disk_rescan(struct kv_offload *o);

#endif
