/* The static frontier: violations against replica-seconds for static fleets of 1..N replicas, and
 * where a policy's run lies against it. The frontier is the Pareto lower envelope of the static
 * points (a fleet that costs more and violates more than a cheaper one is not on it), joined by
 * straight lines. A policy point is "below" the frontier when it violates less than the frontier
 * does at the same replica-seconds. The "best static fleet" is the cheapest fleet within
 * FRONTIER_BEST_TOL of the fewest violations any static fleet reached (more replicas past it only
 * buy noise). Pure arithmetic, no simulation: cmd_simulate runs the fleets. */
#ifndef CINFER_AUTOSCALER_FRONTIER_H
#define CINFER_AUTOSCALER_FRONTIER_H

#include <stdbool.h>
#include <stddef.h>

#define FRONTIER_BEST_TOL  0.001 /* 0.1 point of violations */
#define FRONTIER_GOAL_TOL  0.01  /* the goal: within 1 point of the best static fleet ... */
#define FRONTIER_GOAL_COST 0.8   /* ... at no more than 0.8x its replica-seconds */

struct frontier_point {
    int replicas;           /* the static fleet (0 for a policy point) */
    double replica_seconds; /* > 0 */
    double violations;      /* fraction of requests, 0..1 */
};

/* Sorts `pts[0..n)` (modified in place) by replica-seconds and returns how many lead the array
 * after keeping only the Pareto lower envelope (each kept point violates strictly less than every
 * cheaper kept point). */
size_t frontier_envelope(struct frontier_point *pts, size_t n);

/* Violations of the frontier `env[0..n)` (an envelope) at `replica_seconds`: linear between its
 * points, the cheapest point's violations below it (no cheaper static fleet exists), the last
 * point's above it. -1 when n == 0. */
double frontier_at(const struct frontier_point *env, size_t n, double replica_seconds);

/* Index in `pts[0..n)` (any order) of the best static fleet; n when n == 0. */
size_t frontier_best(const struct frontier_point *pts, size_t n);

/* Where a policy run lies. */
struct frontier_verdict {
    double frontier_violations; /* the frontier at the run's replica-seconds */
    bool below;                 /* the run violates less than that */
    double best_violations;     /* the best static fleet's */
    double best_replica_seconds;
    double cost_ratio; /* run's replica-seconds / the best static fleet's */
    bool goal;         /* within FRONTIER_GOAL_TOL of its violations at <= FRONTIER_GOAL_COST */
};

/* Judges policy point `p` against static points `pts[0..n)` (borrowed, any order, n >= 1).
 * Returns 0, or -1 when n == 0. */
int frontier_judge(const struct frontier_point *pts, size_t n, const struct frontier_point *p,
                   struct frontier_verdict *out);

#endif
