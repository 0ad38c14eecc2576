/* The router model of the simulator (see sim_route.h). */
#include "autoscaler/sim/sim_route.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

/* Maps the trace's block hashes to dense ids (open addressing, linear probing); returns how many
 * distinct blocks there are, or -1 without memory. */
static long build_keys(struct sim_router *rt, const struct trace *tr)
{
    size_t cap = 16;
    while (cap < 2 * tr->n_hashes) cap *= 2;
    uint64_t *tab = malloc(cap * sizeof(*tab));
    uint32_t *val = malloc(cap * sizeof(*val));
    rt->keys = malloc((tr->n_hashes ? tr->n_hashes : 1) * sizeof(*rt->keys));
    long n = -1;
    if (!tab || !val || !rt->keys) goto out;
    memset(val, 0xff, cap * sizeof(*val)); /* UINT32_MAX = empty */
    n = 0;
    for (size_t i = 0; i < tr->n_hashes; i++) {
        uint64_t h = tr->hashes[i];
        size_t k = (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
        while (val[k] != UINT32_MAX && tab[k] != h) k = (k + 1) & (cap - 1);
        if (val[k] == UINT32_MAX) {
            tab[k] = h;
            val[k] = (uint32_t)n++;
        }
        rt->keys[i] = val[k];
    }
out:
    free(tab);
    free(val);
    return n;
}

int sim_router_init(struct sim_router *rt, const struct sim_config *cfg, const struct trace *tr,
                    size_t n_slots)
{
    memset(rt, 0, sizeof(*rt));
    rt->mode = cfg->routing;
    rt->affinity = cfg->prefix_routing && rt->mode != SIM_ROUTE_RANDOM;
    rt->slack_base = rt->mode == SIM_ROUTE_LEAST_REQUESTS ? cfg->model.max_running / 2.0
                                                          : 64.0 * cfg->model.max_running / 2.0;
    rt->rng = cfg->seed ^ 0x9e3779b97f4a7c15ull;
    int rc = sim_heap_init(&rt->ready, n_slots);
    if (rc) return rc;
    long n_keys = build_keys(rt, tr);
    if (n_keys < 0) return ERR_NOMEM;
    return sim_cache_index_init(&rt->index, (size_t)n_keys, n_slots);
}

void sim_router_fini(struct sim_router *rt)
{
    sim_heap_fini(&rt->ready);
    free(rt->keys);
    sim_cache_index_fini(&rt->index);
    memset(rt, 0, sizeof(*rt));
}

/* The router's load score: queued prefill work (tokens), each request in flight worth a 64-token
 * prefill (a full batch delays admission), for least-prefill; requests in flight otherwise. */
static double score(const struct sim_router *rt, const struct sim_replica *r)
{
    double out = sim_replica_outstanding(r);
    if (rt->mode == SIM_ROUTE_LEAST_REQUESTS) return out;
    return sim_replica_prefill_waiting(r) + 64 * out;
}

int sim_router_update(struct sim_router *rt, uint32_t slot, const struct sim_replica *r)
{
    if (!r) {
        sim_heap_remove(&rt->ready, slot);
        return 0;
    }
    return sim_heap_set(&rt->ready,
                        (struct sim_heap_item){.key = score(rt, r), .tie = slot, .id = slot});
}

/* The ready replica with the longest cached prefix of `q` (ties: least load, then lowest slot),
 * or -1 when none holds at least half its blocks; *load gets that replica's load. Visits the
 * holders of the deepest blocks first and stops once no shallower block can beat the best. */
static int affinity(const struct sim_router *rt, const struct sim_req *q,
                    const struct sim_replica *reps, double *load)
{
    const uint64_t *keys = rt->keys + q->hash_off;
    size_t half = (q->n_hash + 1) / 2, best_m = 0;
    int best = -1;
    for (size_t j = q->n_hash; j-- > 0;) {
        if (j + 1 < half || j + 1 <= best_m) break;
        for (int64_t it = sim_cache_index_first(&rt->index, keys[j]); it >= 0;
             it = sim_cache_index_next(&rt->index, it)) {
            uint32_t slot = SIM_CACHE_SLOT(it);
            const struct sim_heap_item *h = sim_heap_get(&rt->ready, slot);
            if (!h) continue; /* not ready */
            size_t m = sim_cache_match(&reps[slot].cache, keys, q->n_hash);
            if (m > best_m ||
                (m == best_m && (h->key < *load || (h->key == *load && (int)slot < best)))) {
                best = (int)slot;
                best_m = m;
                *load = h->key;
            }
        }
    }
    return 2 * best_m >= q->n_hash ? best : -1;
}

int sim_router_pick(struct sim_router *rt, const struct sim_req *q, const struct sim_replica *reps)
{
    const struct sim_heap_item *least = sim_heap_top(&rt->ready);
    if (!least) return -1;
    if (rt->mode == SIM_ROUTE_RANDOM)
        return (int)rt->ready.v[trace_splitmix64(&rt->rng) % rt->ready.n].id;
    if (rt->affinity && q->n_hash > 0) {
        /* Cache-aware routing as SGLang's router does it: affinity only when the match covers at
         * least half the prompt's blocks (a prefix every request shares, such as Mooncake's
         * block 0, must not pull all traffic to the warm replicas) and that replica is not
         * overloaded (half a batch of requests, or of their prefill, beyond the least loaded). */
        double load = 0;
        int a = affinity(rt, q, reps, &load);
        double slack =
            rt->slack_base + (rt->mode == SIM_ROUTE_LEAST_REQUESTS ? 0 : (double)q->prompt);
        if (a >= 0 && load <= least->key + slack) return a;
    }
    return (int)least->id;
}
