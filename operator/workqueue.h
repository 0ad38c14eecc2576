/* Work queue of object keys ("namespace/name") with the semantics of client-go's rate-limited
 * queue: a key is queued at most once however often it is added; a key being processed is never
 * handed to a second worker (adds during processing re-queue it when the worker calls done);
 * failures back off per key exponentially from base_delay to max_delay; delayed adds for resyncs.
 * The queue holds keys, not events: reconcile is level-triggered (STYLE.md).
 * Thread-safe: any thread may add; workers call get/done/forget. */
#ifndef CINFER_OPERATOR_WORKQUEUE_H
#define CINFER_OPERATOR_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

struct workqueue;

struct workqueue_opts {
    int64_t base_delay_ms; /* first retry delay (client-go: 5 ms) */
    int64_t max_delay_ms;  /* cap (client-go: 1000 s) */
    /* Monotonic milliseconds; NULL = CLOCK_MONOTONIC. Tests inject a fake clock. */
    int64_t (*now_ms)(void *ctx);
    void *now_ctx;
};

/* Returns a new queue or NULL. `opts` is copied. */
struct workqueue *workqueue_new(const struct workqueue_opts *opts);
/* Frees the queue; no thread may be using it. NULL-safe. */
void workqueue_free(struct workqueue *q);

/* Queues `key` (copied) now. Returns 0 or ERR_NOMEM; ERR_BAD_STATE after shutdown. */
int workqueue_add(struct workqueue *q, const char *key);
/* Queues `key` after `delay_ms` (the earliest pending delay wins). */
int workqueue_add_after(struct workqueue *q, const char *key, int64_t delay_ms);
/* Queues `key` after its backoff delay (base * 2^failures, capped) and counts a failure. */
int workqueue_add_rate_limited(struct workqueue *q, const char *key);
/* Resets the failure count of `key` (after a successful reconcile). */
void workqueue_forget(struct workqueue *q, const char *key);
/* Failures counted for `key` since the last forget. */
int workqueue_failures(struct workqueue *q, const char *key);

/* Blocks until a key is ready, then marks it processing and returns a new copy (caller frees it
 * after workqueue_done). Returns NULL once the queue is shut down. `timeout_ms` < 0 waits forever;
 * otherwise NULL after the timeout too (check workqueue_is_shutdown). */
char *workqueue_get(struct workqueue *q, int64_t timeout_ms);
/* Marks `key` finished; if it was added while processing, it is queued again. */
void workqueue_done(struct workqueue *q, const char *key);

/* Wakes all waiting workers; get returns NULL from now on. */
void workqueue_shutdown(struct workqueue *q);
int workqueue_is_shutdown(struct workqueue *q);
/* Keys ready to be processed now (the queue-depth metric). */
size_t workqueue_len(struct workqueue *q);

#endif
