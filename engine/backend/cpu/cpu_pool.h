/* A persistent pool of compute threads driven by one caller thread (the inference thread). A job is
 * a function called once on every thread with (ith, nth); the caller runs share 0 itself, so a pool
 * of n threads starts n - 1 workers. Workers spin briefly after a job (decode issues hundreds of small
 * jobs per token), then sleep on a condition variable. Not a general task queue. */
#ifndef CINFER_ENGINE_BACKEND_CPU_POOL_H
#define CINFER_ENGINE_BACKEND_CPU_POOL_H

struct cpu_pool;

typedef void (*cpu_pool_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1). Returns 0 and a new pool in *out, ERR_NOMEM, or
 * ERR_INTERNAL when a thread cannot be started. */
int cpu_pool_new(int n_threads, struct cpu_pool **out);
/* Stops and joins the workers and frees the pool; NULL is a no-op. Caller thread only. */
void cpu_pool_free(struct cpu_pool *p);
/* Runs fn(ctx, ith, nth) for ith = 0..nth-1 across the pool and returns when all have finished.
 * `ctx` is borrowed for the call. Only the thread that created the pool may call it. */
void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn fn, void *ctx);
/* Number of threads including the caller. */
int cpu_pool_size(const struct cpu_pool *p);

#endif
