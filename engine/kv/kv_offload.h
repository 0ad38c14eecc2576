/* KV offload store: the tiers below the KV pool. Tier 2 is host memory outside the pool (an LRU of
 * block records under a byte budget); tier 3 is a directory (an LRU of record files under a byte
 * budget) that several engines may share: one engine's block is found by another. The unit is a
 * kv_block record (engine/kv/kv_block.h), named by (namespace, chained block hash).
 *
 * Writes are asynchronous: the inference thread fills a record's payload (one memcpy of the block
 * out of the pool) and submits it; the store's offload thread keeps it in tier 2 and, for a block
 * seen more than once (kv_offload_job_new), writes it through to tier 3, sealed (SHA-256). A full
 * queue drops the block (counted), so offload never blocks inference. Tier-3 files are written to
 * a temporary name and renamed, so no reader ever sees a partial record; every file is checked on
 * read, and a damaged or truncated one is removed and reported as a miss (the caller recomputes).
 * Reads are asynchronous too: kv_offload_prefetch hands the offload thread a request's chain of
 * blocks; it reads and checks (SHA-256, identity) the ones only tier 3 holds, ahead of its writes,
 * and stages them until kv_offload_load copies them out (a memcpy) or the prefetch ends. The
 * caller's thread never reads a file: kv_offload_load finds tier 2 and staged records only.
 * Lookups consult only the in-memory index (a miss makes no system call); the offload thread keeps
 * it current with a shared directory by listing it again whenever its mtime moves, at most once a
 * second. A directory that cannot be written (read-only, permissions) is only read, a full one
 * stops writes for a while, each with a warning.
 *
 * Thread safety: kv_offload_job_*, kv_offload_prefetch*, kv_offload_load, kv_offload_flush and
 * kv_offload_stats may be called from any one thread at a time (the inference thread); the
 * offload thread is internal. */
#ifndef CINFER_ENGINE_KV_OFFLOAD_H
#define CINFER_ENGINE_KV_OFFLOAD_H

#include "engine/kv/kv_block.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_OFFLOAD_QUEUE_DEFAULT 64 /* records waiting for the offload thread, at least */
#define KV_OFFLOAD_QUEUE_BYTES   (256ull << 20) /* ... or as many as fit in this (the default) */
#define KV_OFFLOAD_STAGE_DEFAULT (256u << 20)   /* bytes of prefetched records held at once */

enum kv_offload_tier { KV_OFFLOAD_HOST = 0, KV_OFFLOAD_DISK = 1, KV_OFFLOAD_N_TIERS };

struct kv_offload_config {
    uint64_t ns;            /* kv_block_namespace of the model's layout (nonzero) */
    int block_size;         /* tokens per block */
    uint64_t payload_bytes; /* model_kv_block_bytes */
    uint64_t host_bytes;    /* tier-2 budget; 0 = no tier 2 */
    const char *dir;        /* tier-3 directory (borrowed; created if missing) or NULL */
    uint64_t dir_bytes;     /* tier-3 budget (> 0 with dir) */
    int queue_max; /* 0 = KV_OFFLOAD_QUEUE_BYTES of records, at least KV_OFFLOAD_QUEUE_DEFAULT */
    /* Told of every block a tier takes (stored) or drops (evicted, removed, found damaged), as
     * the tier changes: from the offload thread, or from kv_offload_new (the directory's files
     * found at start) and kv_offload_load (a tier-3 hit kept in tier 2). Called with the store's
     * lock held: it must be quick and must not call into the store. NULL for none. A staged
     * (prefetched) record is no tier's: it is not told. */
    void (*observer)(void *ctx, enum kv_offload_tier tier, bool stored, uint64_t hash);
    void *observer_ctx;
    uint64_t stage_bytes; /* prefetched records held at once; 0 = KV_OFFLOAD_STAGE_DEFAULT */
};

/* Counters since creation, and the tiers' current sizes. */
struct kv_offload_stats {
    uint64_t stored[KV_OFFLOAD_N_TIERS];  /* records added */
    uint64_t hits[KV_OFFLOAD_N_TIERS];    /* records loaded back from the tier */
    uint64_t evicted[KV_OFFLOAD_N_TIERS]; /* records dropped for the budget */
    uint64_t bytes[KV_OFFLOAD_N_TIERS];   /* bytes held now */
    uint64_t blocks[KV_OFFLOAD_N_TIERS];  /* records held now */
    uint64_t corrupt;                     /* tier-3 files that failed their check (removed) */
    uint64_t write_errors;                /* tier-3 writes that failed */
    uint64_t dropped;                     /* submissions dropped: queue full or no memory */
    uint64_t prefetches;                  /* kv_offload_prefetch calls that queued reads */
    uint64_t prefetched;                  /* records read ahead, verified and staged */
    uint64_t prefetch_unused;             /* of those, freed without a load (ended, expired) */
    uint64_t staged_bytes;                /* staged records held now */
    bool disk_writable;                   /* tier 3 is taking writes now */
};

struct kv_offload;

/* Creates the store (cfg and cfg->dir are copied) and starts its offload thread. A tier-3
 * directory that cannot be created or read disables tier 3 with a warning; one that cannot be
 * written is read only. *out is new (kv_offload_free). ERR_INVAL on a bad config (no tier, zero
 * namespace, dir without a budget), ERR_NOMEM, or the thread's error. */
int kv_offload_new(const struct kv_offload_config *cfg, struct kv_offload **out);
/* Writes what is still queued, stops the thread and frees everything. NULL-safe. */
void kv_offload_free(struct kv_offload *o);

uint64_t kv_offload_namespace(const struct kv_offload *o);
uint64_t kv_offload_payload_bytes(const struct kv_offload *o);
int kv_offload_block_size(const struct kv_offload *o);
/* Whether tier 3 is on: a directory that could be opened (decided by kv_offload_new, fixed). */
bool kv_offload_has_disk(const struct kv_offload *o);
/* Whether the store has tier 2 (host memory). Any thread. */
bool kv_offload_has_host(const struct kv_offload *o);

/* Starts the record of the block m describes (m->ns, block_size and payload_bytes must be the
 * store's): returns its payload (payload_bytes, for the caller to fill from the pool), or NULL when
 * no tier takes it, the queue is full or memory is short (the last two counted as dropped). Tier 2
 * takes every block it does not hold. Tier 3 takes a block seen more than once: `durable` (the
 * caller knows it was reused, or the engine is stopping), or offered before (the store remembers
 * up to 16384 blocks it declined), or loaded back from tier 2 (kv_offload_load
 * writes it through then); so traffic without reuse writes no file, and without tier 2 costs no
 * copy either. The caller then calls exactly one of kv_offload_job_submit / kv_offload_job_cancel
 * with it. */
uint8_t *kv_offload_job_new(struct kv_offload *o, const struct kv_block_meta *m, bool durable);
/* Hands the filled record to the offload thread (takes it). */
void kv_offload_job_submit(struct kv_offload *o, uint8_t *payload);
/* Drops a record that could not be filled. */
void kv_offload_job_cancel(struct kv_offload *o, uint8_t *payload);

/* Starts reading ahead the blocks of a request's chain m[0..n) (in order; borrowed, copied) on the
 * offload thread: the chain is followed while some tier (or the staging) holds its blocks, and
 * each block only tier 3 holds is read, checked (SHA-256 and identity: a damaged file is removed
 * and counted as corrupt, and ends the chain like a missing one) and staged for kv_offload_load,
 * before any queued write. Staging is bounded by cfg.stage_bytes (the chain ends where it is
 * full) and never evicted: its records are freed by kv_offload_prefetch_end, or 60 s after the
 * call if nobody ends it (KVO_FETCH_TTL_S). *id is the prefetch (end it with
 * kv_offload_prefetch_end), or 0 when there is nothing to read (no tier 3, or every block of the
 * chain that any tier holds is in tier 2 or staged already). ERR_INVAL for metas not of this
 * store, ERR_NOMEM. */
int kv_offload_prefetch(struct kv_offload *o, const struct kv_block_meta *m, int n, uint64_t *id);

/* What a prefetch has done so far. */
struct kv_offload_prefetch_info {
    int blocks;    /* of the chain it follows (0 once it ended or expired) */
    int reads;     /* files read so far */
    int staged;    /* of those, verified and staged */
    double read_s; /* seconds those reads took on the offload thread (open to checked) */
};
/* Whether prefetch id still has reads to do (false for 0, or one ended or expired), and what it
 * has done (info, may be NULL). */
bool kv_offload_prefetch_pending(struct kv_offload *o, uint64_t id,
                                 struct kv_offload_prefetch_info *info);
/* Waits up to timeout_s for prefetch id's reads to finish; true when none is left. For a caller
 * with nothing else to do. */
bool kv_offload_prefetch_wait(struct kv_offload *o, uint64_t id, double timeout_s);
/* Ends prefetch id: reads not started are dropped, its staged records that no load took are freed
 * (counted as prefetch_unused). A read in progress completes on the offload thread and is then
 * dropped; this call does not wait for it. id 0, or one ended or expired: a no-op. */
void kv_offload_prefetch_end(struct kv_offload *o, uint64_t id);

/* Looks up the block `want` describes in tier 2, then among the staged (prefetched) records, and
 * copies its payload to `payload` (payload_bytes, caller's): memory only, never a file. 0 and
 * *tier on a hit (a staged record counts as a tier-3 hit and moves into tier 2 when there is one,
 * else is freed); ERR_NOT_FOUND on a miss, including a block only tier 3 holds that no prefetch
 * staged, or another block under the name. */
int kv_offload_load(struct kv_offload *o, const struct kv_block_meta *want, void *payload,
                    enum kv_offload_tier *tier);

/* Waits until every submitted record has been stored, every prefetch's reads are done and, with
 * tier 3, until the index has caught up with the directory (files another engine wrote or removed
 * since the offload thread's last look, which it otherwise takes once a second). Tests,
 * benchmarks. */
void kv_offload_flush(struct kv_offload *o);
void kv_offload_stats(struct kv_offload *o, struct kv_offload_stats *out);

#endif
