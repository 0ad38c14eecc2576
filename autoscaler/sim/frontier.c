/* The static frontier and the judgement of policy runs against it (see frontier.h). */
#include "autoscaler/sim/frontier.h"

#include <stdlib.h>
#include <string.h>

static int cmp_cost(const void *a, const void *b)
{
    const struct frontier_point *x = a, *y = b;
    if (x->replica_seconds != y->replica_seconds)
        return x->replica_seconds < y->replica_seconds ? -1 : 1;
    return (x->violations > y->violations) - (x->violations < y->violations);
}

size_t frontier_envelope(struct frontier_point *pts, size_t n)
{
    if (n == 0) return 0;
    qsort(pts, n, sizeof(*pts), cmp_cost);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (pts[i].violations < pts[k - 1].violations) pts[k++] = pts[i];
    return k;
}

double frontier_at(const struct frontier_point *env, size_t n, double rs)
{
    if (n == 0) return -1;
    if (rs <= env[0].replica_seconds) return env[0].violations;
    for (size_t i = 1; i < n; i++) {
        if (rs == env[i].replica_seconds) return env[i].violations; /* exact, no rounding */
        if (rs < env[i].replica_seconds) {
            const struct frontier_point *a = &env[i - 1], *b = &env[i];
            double f = (rs - a->replica_seconds) / (b->replica_seconds - a->replica_seconds);
            return a->violations + f * (b->violations - a->violations);
        }
    }
    return env[n - 1].violations;
}

size_t frontier_best(const struct frontier_point *pts, size_t n)
{
    if (n == 0) return 0;
    double least = pts[0].violations;
    for (size_t i = 1; i < n; i++)
        if (pts[i].violations < least) least = pts[i].violations;
    size_t best = n;
    for (size_t i = 0; i < n; i++)
        if (pts[i].violations <= least + FRONTIER_BEST_TOL &&
            (best == n || pts[i].replica_seconds < pts[best].replica_seconds))
            best = i;
    return best;
}

int frontier_judge(const struct frontier_point *pts, size_t n, const struct frontier_point *p,
                   struct frontier_verdict *out)
{
    if (n == 0) return -1;
    struct frontier_point stack[256];
    struct frontier_point *env = n <= 256 ? stack : malloc(n * sizeof(*env));
    if (!env) return -1;
    memcpy(env, pts, n * sizeof(*env));
    size_t k = frontier_envelope(env, n);
    const struct frontier_point *best = &pts[frontier_best(pts, n)];
    memset(out, 0, sizeof(*out));
    out->frontier_violations = frontier_at(env, k, p->replica_seconds);
    out->below = p->violations < out->frontier_violations;
    out->best_violations = best->violations;
    out->best_replica_seconds = best->replica_seconds;
    out->cost_ratio = p->replica_seconds / best->replica_seconds;
    out->goal = p->violations <= best->violations + FRONTIER_GOAL_TOL &&
                out->cost_ratio <= FRONTIER_GOAL_COST;
    if (env != stack) free(env);
    return 0;
}
