/* A persistent pool of compute threads driven by one caller thread (the inference thread). A job is a
 * function run by the caller (ith 0) and by every worker that wakes up in time (ith 1..n-1), at most
 * once per thread, so it must claim its work dynamically (an atomic counter over chunks) and leave
 * nothing assigned to a particular ith: on a busy machine a descheduled worker simply misses the job.
 * Workers spin briefly after a job (decode issues hundreds of small jobs per token), then sleep on a
 * condition variable. Not a general task queue. */
#ifndef CINFER_ENGINE_BACKEND_CPU_POOL_H
#define CINFER_ENGINE_BACKEND_CPU_POOL_H

struct cpu_pool;

typedef void (*cpu_pool_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1). Returns 0 and a new pool in *out, ERR_NOMEM, or
 * ERR_INTERNAL when a thread cannot be started. */
int cpu_pool_new(int n_threads, struct cpu_pool **out);
/* Stops and joins the workers and frees the pool; NULL is a no-op. Caller thread only. */
void cpu_pool_free(struct cpu_pool *p);
/* Runs fn(ctx, ith, nth) on the caller (ith 0) and on the workers that join before the caller's own
 * call returns; returns when every thread that ran fn has finished. ith is unique per call (use it for
 * per-thread scratch). `ctx` is borrowed for the call. Only the thread that created the pool may call
 * it. */
void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn fn, void *ctx);
/* Number of threads including the caller. */
int cpu_pool_size(const struct cpu_pool *p);

#endif
