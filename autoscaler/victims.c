/* Victim ordering and pod-deletion-cost values (see victims.h). The ordering mirrors what the
 * ReplicaSet controller already prefers (unready before ready) and adds what only the autoscaler
 * knows: a pod whose prefix cache is worth little and which serves few requests costs least to
 * lose, since its traffic re-routes without losing cache hits or cutting long generations. */
#include "autoscaler/victims.h"

#include "common/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ranked {
    const struct victims_pod *pod;
    size_t idx;
};

/* NaN or negative values (bad input) count as no cache value, keeping the order total. */
static double value_of(const struct victims_pod *p)
{
    return p->cache_value > 0 ? p->cache_value : 0;
}

static int cmp_victim(const void *pa, const void *pb)
{
    const struct ranked *ra = pa, *rb = pb;
    const struct victims_pod *a = ra->pod, *b = rb->pod;
    if (a->ready != b->ready) return a->ready ? 1 : -1; /* unready first */
    double va = value_of(a), vb = value_of(b);
    if (va != vb) return va < vb ? -1 : 1;
    if (a->in_flight != b->in_flight) return a->in_flight < b->in_flight ? -1 : 1;
    const char *na = a->name ? a->name : "", *nb = b->name ? b->name : "";
    int c = strcmp(na, nb);
    if (c) return c;
    return ra->idx < rb->idx ? -1 : ra->idx > rb->idx;
}

void victims_order(const struct victims_pod *pods, size_t n, size_t *order)
{
    if (n == 0) return;
    struct ranked stack[64];
    struct ranked *r = n <= 64 ? stack : malloc(n * sizeof(*r));
    if (!r) { /* no memory: index order is still a valid (if uninformed) order */
        for (size_t i = 0; i < n; i++) order[i] = i;
        return;
    }
    for (size_t i = 0; i < n; i++) r[i] = (struct ranked){&pods[i], i};
    qsort(r, n, sizeof(*r), cmp_victim);
    for (size_t i = 0; i < n; i++) order[i] = r[i].idx;
    if (r != stack) free(r);
}

int victims_costs(const struct victims_pod *pods, size_t n, char (*costs)[VICTIMS_COST_LEN])
{
    /* Cost = rank * STEP: 0 for the first victim, gaps between ranks. */
    if (n > (size_t)(INT32_MAX / VICTIMS_COST_STEP) + 1) return ERR_RANGE;
    if (n == 0) return 0;
    size_t *order = malloc(n * sizeof(*order));
    if (!order) return ERR_NOMEM;
    victims_order(pods, n, order);
    for (size_t rank = 0; rank < n; rank++) {
        int64_t cost = (int64_t)rank * VICTIMS_COST_STEP;
        snprintf(costs[order[rank]], VICTIMS_COST_LEN, "%lld", (long long)cost);
    }
    free(order);
    return 0;
}
