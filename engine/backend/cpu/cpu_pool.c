/* Persistent compute threads for the CPU backend. A job is published by bumping an atomic generation
 * counter; workers spin on it for a short while (cheap wake-up between the many small ops of a decode
 * step) and then block on a condition variable so an idle engine burns no CPU.
 * Jobs claim their work dynamically, so the caller never waits for a worker that has not started:
 * when the caller's call returns, all work is claimed; it closes the job and waits only for workers
 * that joined before the close (a descheduled worker on a busy machine costs nothing). Joining and
 * closing are a Dekker pair of seq_cst operations: a worker increments `active` then reads `closed`,
 * the caller writes `closed` then reads `active`, so one of them always sees the other. */
#include "engine/backend/cpu/cpu_pool.h"

#include "common/err.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* Iterations a worker polls for the next job before sleeping: roughly 50-100 us on current CPUs. */
#define POOL_SPIN_ITERS 20000

struct pool_worker {
    struct cpu_pool *pool;
    int ith;
    pthread_t thread;
};

struct cpu_pool {
    int n_threads;
    struct pool_worker *workers; /* (n_threads - 1) */
    int n_started;

    cpu_pool_fn fn; /* current job; written before gen is bumped */
    void *ctx;
    atomic_uint gen;    /* job generation; workers run each generation at most once */
    atomic_uint closed; /* last generation the caller closed to late joiners */
    atomic_int active;  /* workers that joined the current job and have not left it */
    atomic_bool stop;   /* set once by cpu_pool_free */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleepers; /* workers blocked (or about to block) on cv */
};

static inline void pool_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until gen differs from `seen` or stop is set; returns the new generation. */
static unsigned pool_wait_job(struct cpu_pool *p, unsigned seen)
{
    for (int i = 0; i < POOL_SPIN_ITERS; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        pool_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned g;
    /* seq_cst pairs with cpu_pool_run's bump-then-check of sleepers (no lost wake-up). */
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *pool_main(void *arg)
{
    struct pool_worker *w = arg;
    struct cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = pool_wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        atomic_fetch_add(&p->active, 1);
        /* Join only while generation `seen` is still open: a worker delayed long enough may find it
         * (and later ones) closed, and must then not touch fn/ctx of any job. */
        if ((int)(seen - atomic_load(&p->closed)) > 0) p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_release);
    }
    return NULL;
}

int cpu_pool_new(int n_threads, struct cpu_pool **out)
{
    if (n_threads < 1) return ERR_INVAL;
    struct cpu_pool *p = calloc(1, sizeof(*p));
    if (!p) return ERR_NOMEM;
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->closed, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->sleepers, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
        if (!p->workers) {
            cpu_pool_free(p);
            return ERR_NOMEM;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i + 1;
        if (pthread_create(&p->workers[i].thread, NULL, pool_main, &p->workers[i]) != 0) {
            cpu_pool_free(p);
            return ERR_INTERNAL;
        }
        p->n_started++;
    }
    *out = p;
    return 0;
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn fn, void *ctx)
{
    if (p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    unsigned g = atomic_fetch_add(&p->gen, 1) + 1;
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n_threads);
    atomic_store(&p->closed, g);
    for (unsigned i = 0; atomic_load(&p->active) > 0; i++) {
        if (i < POOL_SPIN_ITERS)
            pool_relax();
        else
            sched_yield();
    }
}

int cpu_pool_size(const struct cpu_pool *p)
{
    return p->n_threads;
}
