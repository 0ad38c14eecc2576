/* KV block events for routers (ARCHITECTURE.md "Engine ports and paths", "Prefix identity"): the
 * prefix cache reports every block it indexes (stored) and every block it drops (evicted), named by
 * its chained hash (prefix_cache_block_hash); this log keeps them in order, each with a sequence
 * number, in a bounded ring, together with the set of hashes held now. A reader takes a snapshot of
 * the held set (with the sequence number it reflects), then follows the events after it; a reader
 * that fell further behind than the ring holds is told so (ERR_RANGE) and takes a new snapshot.
 * So a router that restarts rebuilds its view of this engine from the engine alone.
 *
 * Every event names its tier: the KV pool of the compute backend ("device"), and the offload
 * tiers below it ("host": memory outside the pool, "disk": a directory that replicas may share;
 * engine/kv/kv_offload.h), each with its own held set. A block may be held by several tiers.
 *
 * Threads: kv_events_record is called by the inference thread (from the prefix cache's observer
 * hook), kv_events_record_tier by the offload store (its thread or the inference thread, under the
 * store's lock); each costs one short lock and no allocation; readers (the HTTP side) lock for a
 * copy. */
#ifndef CINFER_ENGINE_KV_EVENTS_H
#define CINFER_ENGINE_KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kv_event_op { KV_EVENT_STORED = 1, KV_EVENT_EVICTED = 2 };

enum kv_events_tier {
    KV_EVENTS_DEVICE = 0, /* the backend's KV block pool (the prefix cache) */
    KV_EVENTS_HOST,       /* offload tier 2: memory outside the pool */
    KV_EVENTS_DISK,       /* offload tier 3: a directory, possibly shared by replicas */
    KV_EVENTS_N_TIERS
};

/* "device", "host", "disk" (the names in the event lines); static. */
const char *kv_events_tier_name(enum kv_events_tier t);

struct kv_event {
    uint64_t seq;  /* 1, 2, 3, ... in the order the tiers changed */
    uint64_t hash; /* the block's chained hash */
    enum kv_event_op op;
    enum kv_events_tier tier;
};

struct kv_events;

/* A log for a prefix cache of at most n_blocks blocks, keeping the last ring_events events (rounded
 * up to a power of two, at least 64). Allocates everything now. *out is new (kv_events_free).
 * ERR_INVAL (n_blocks < 1), ERR_NOMEM. Any thread, before use. */
int kv_events_new(int n_blocks, size_t ring_events, struct kv_events **out);
/* Sizes the held set of an offload tier for max_blocks blocks (allocated now; a tier never sized
 * holds none, and its events still enter the ring). 0, ERR_INVAL, ERR_NOMEM. Before use. */
int kv_events_size_tier(struct kv_events *ev, enum kv_events_tier tier, size_t max_blocks);
void kv_events_free(struct kv_events *ev); /* NULL-safe; no reader or writer may remain */

/* Records that the cache indexed (stored) or dropped (evicted) the block with this hash, and wakes
 * readers waiting in kv_events_wait. Never fails, never allocates: the held set was sized for
 * n_blocks (a stored hash past that bound still enters the ring, so readers see it). Inference
 * thread. Matches prefix_cache_observer_fn (ctx = the kv_events). */
void kv_events_record(void *ev, bool stored, uint64_t hash);
/* The same for any tier. Any thread (see the top). */
void kv_events_record_tier(struct kv_events *ev, enum kv_events_tier tier, bool stored,
                           uint64_t hash);

/* The sequence number of the last event recorded (0 before any). Any thread. */
uint64_t kv_events_last_seq(struct kv_events *ev);

/* A copy of the held hashes, tier after tier: *out is new (free(); NULL when none), n[t] the count
 * of tier t (device first), *seq the last event it reflects. 0 or ERR_NOMEM. Any thread. */
int kv_events_snapshot(struct kv_events *ev, uint64_t **out, size_t n[KV_EVENTS_N_TIERS],
                       uint64_t *seq);

/* Copies up to max events with seq > after into out[] in order and writes their count to *n (0 when
 * none yet). ERR_RANGE when some event after `after` is no longer in the ring (the reader must take
 * a snapshot again). Any thread. */
int kv_events_read(struct kv_events *ev, uint64_t after, struct kv_event *out, size_t max,
                   size_t *n);

/* Waits up to timeout_ms for an event with seq > after; returns true when there is one. Any thread
 * but the inference thread. */
bool kv_events_wait(struct kv_events *ev, uint64_t after, int timeout_ms);

#endif
