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
 * Lookups consult only the in-memory index (a miss makes no system call); the offload thread keeps
 * it current with a shared directory by listing it again whenever its mtime moves, at most once a
 * second. A directory that cannot be written (read-only, permissions) is only read, a full one
 * stops writes for a while, each with a warning.
 *
 * Thread safety: kv_offload_job_*, kv_offload_load, kv_offload_flush and kv_offload_stats may be
 * called from any one thread at a time (the inference thread); the offload thread is internal. */
#ifndef CINFER_ENGINE_KV_OFFLOAD_H
#define CINFER_ENGINE_KV_OFFLOAD_H

#include "engine/kv/kv_block.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_OFFLOAD_QUEUE_DEFAULT 64 /* records waiting for the offload thread, at least */
#define KV_OFFLOAD_QUEUE_BYTES   (256ull << 20) /* ... or as many as fit in this (the default) */

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
     * lock held: it must be quick and must not call into the store. NULL for none. */
    void (*observer)(void *ctx, enum kv_offload_tier tier, bool stored, uint64_t hash);
    void *observer_ctx;
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

/* Looks up the block `want` describes (tier 2, then tier 3 when `disk`) and copies its payload to
 * `payload` (payload_bytes, caller's). 0 and *tier on a verified hit (a tier-3 hit is kept in tier
 * 2 too); ERR_NOT_FOUND on a miss, including a damaged file (removed) or another block under the
 * name. */
int kv_offload_load(struct kv_offload *o, const struct kv_block_meta *want, void *payload,
                    bool disk, enum kv_offload_tier *tier);

/* Waits until every submitted record has been stored and, with tier 3, until the index has caught
 * up with the directory (files another engine wrote or removed since the offload thread's last
 * look, which it otherwise takes once a second). Tests, benchmarks. */
void kv_offload_flush(struct kv_offload *o);
void kv_offload_stats(struct kv_offload *o, struct kv_offload_stats *out);

#endif
