/* Scale-down victim ordering: which pods a Deployment should remove first when the autoscaler
 * lowers replicas. Pods are ranked (unready first, then least cache value, then fewest in-flight
 * requests, then name) and each gets a controller.kubernetes.io/pod-deletion-cost annotation value:
 * the ReplicaSet controller deletes lower costs first (Kubernetes >= 1.22, best effort). Pure: no
 * I/O; the control loop patches the annotations, the simulator removes pods in this order. */
#ifndef CINFER_AUTOSCALER_VICTIMS_H
#define CINFER_AUTOSCALER_VICTIMS_H

#include <stdbool.h>
#include <stddef.h>

#define VICTIMS_ANNOTATION "controller.kubernetes.io/pod-deletion-cost"
#define VICTIMS_COST_LEN   12 /* "-2147483648" plus NUL */

struct victims_pod {
    const char *name;   /* borrowed; tie-breaker for a deterministic order (NULL sorts first) */
    double cache_value; /* value of the pod's prefix cache; e.g. hit rate x cached tokens; >= 0 */
    int in_flight;      /* requests running or waiting on the pod */
    bool ready;
};

/* Writes into `order[0..n)` the indices of `pods` (borrowed), first victim first. */
void victims_order(const struct victims_pod *pods, size_t n, size_t *order);

/* Deletion costs for `pods`: the first victim gets the lowest cost. Costs are rank-based and
 * rank * VICTIMS_COST_STEP (0 for the first victim), so a pod's cost changes only when the ranking
 * does (patches stay rare). costs[i] is the annotation value for pods[i] as a decimal int32 string.
 * Returns 0, ERR_RANGE when n exceeds the int32 range of costs, or ERR_NOMEM. */
#define VICTIMS_COST_STEP 1000
int victims_costs(const struct victims_pod *pods, size_t n, char (*costs)[VICTIMS_COST_LEN]);

#endif
