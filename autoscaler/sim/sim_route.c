/* The router model of the simulator (see sim_route.h). */
#include "autoscaler/sim/sim_route.h"

#include "common/err.h"

#include <math.h>
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
    /* The router modes read each candidate's cache directly, not the index. */
    rt->affinity = cfg->prefix_routing &&
                   (rt->mode == SIM_ROUTE_LEAST_PREFILL || rt->mode == SIM_ROUTE_LEAST_REQUESTS);
    rt->slack_base = rt->mode == SIM_ROUTE_LEAST_REQUESTS ? cfg->model.max_running / 2.0
                                                          : 64.0 * cfg->model.max_running / 2.0;
    rt->rng = cfg->seed ^ 0x9e3779b97f4a7c15ull;
    /* cinfer-router's defaults, as the chart installs it (--policy prefix, --load-factor 1.25,
     * --load-floor 4, --load-weight 64, --prefill-weight 0.5, --offload-weight 0.1 (no offload
     * tiers are modelled), --evict-weight 0.5: router/main.c, charts/cinfer/values.yaml). */
    rt->pol = (struct router_policy_cfg){.policy = cfg->prefix_routing ? ROUTER_POLICY_PREFIX
                                                                       : ROUTER_POLICY_LEAST_LOADED,
                                         .load_factor = 1.25,
                                         .load_floor = 4,
                                         .load_weight = 64,
                                         .prefill_weight = 0.5,
                                         .offload_weight = 0.1,
                                         .evict_weight = 0.5};
    rt->block_tokens = TRACE_BLOCK_TOKENS * cfg->token_scale;
    rt->late_cap = cfg->late_hold;
    rt->n_words = (n_slots + 63) / 64;
    rt->ready_bits = calloc(rt->n_words ? rt->n_words : 1, sizeof(*rt->ready_bits));
    rt->cand = calloc(n_slots ? n_slots : 1, sizeof(*rt->cand));
    rt->cand_slots = calloc(n_slots ? n_slots : 1, sizeof(*rt->cand_slots));
    if (!rt->ready_bits || !rt->cand || !rt->cand_slots) return ERR_NOMEM;
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
    free(rt->ready_bits);
    free(rt->cand);
    free(rt->cand_slots);
    memset(rt, 0, sizeof(*rt));
}

static bool router_mode(enum sim_routing m)
{
    return m == SIM_ROUTE_ROUTER || m == SIM_ROUTE_ROUTER_LATE;
}

/* The heap's load score: queued prefill work (tokens), each request in flight worth a 64-token
 * prefill (a full batch delays admission), for least-prefill; requests in flight otherwise. */
static double score(const struct sim_router *rt, const struct sim_replica *r)
{
    double out = sim_replica_outstanding(r);
    if (rt->mode != SIM_ROUTE_LEAST_PREFILL) return out;
    return sim_replica_prefill_waiting(r) + 64 * out;
}

int sim_router_update(struct sim_router *rt, uint32_t slot, const struct sim_replica *r)
{
    uint64_t bit = 1ull << (slot % 64);
    if (slot / 64 < rt->n_words) {
        if (r)
            rt->ready_bits[slot / 64] |= bit;
        else
            rt->ready_bits[slot / 64] &= ~bit;
    }
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

/* What replica `r`'s cache means for `q` as cinfer-router counts it, from one match of its
 * blocks: the prompt tokens it holds (the leading run, at most the full blocks before the
 * prompt's last token, which the engine always computes: router_model.h), and in *evict the
 * cached tokens it would evict to take q (its new blocks past the room its cache has left: what
 * the router reads off the engine's hello line and block events). */
static int router_cached(const struct sim_router *rt, const struct sim_req *q,
                         const struct sim_replica *r, int *evict)
{
    *evict = 0;
    if (rt->pol.policy != ROUTER_POLICY_PREFIX || q->n_hash == 0 || !(rt->block_tokens > 0))
        return 0;
    size_t m = sim_cache_match(&r->cache, rt->keys + q->hash_off, q->n_hash);
    size_t fresh = q->n_hash - m, need = r->cache.n + fresh;
    size_t over = need > r->cache.cap ? need - r->cache.cap : 0;
    *evict = (int)lround((double)(over < fresh ? over : fresh) * rt->block_tokens);
    size_t full = q->prompt > 0 ? (size_t)floor((q->prompt - 1) / rt->block_tokens) : 0;
    return (int)lround((double)(m < full ? m : full) * rt->block_tokens);
}

/* cinfer-router's choice (router_policy_pick) among the ready replicas, each with its requests
 * in flight, the prompt tokens its cache holds and its queued prefill (what the engine's load
 * line reports); router-late skips the replicas at late_cap and holds when none is left. */
static int pick_router(struct sim_router *rt, const struct sim_req *q,
                       const struct sim_replica *reps)
{
    struct router_candidate *cand = rt->cand;
    uint32_t *slots = rt->cand_slots;
    size_t n = 0;
    bool late = rt->mode == SIM_ROUTE_ROUTER_LATE;
    for (size_t w = 0; w < rt->n_words; w++) {
        for (uint64_t bits = rt->ready_bits[w]; bits; bits &= bits - 1) {
            uint32_t slot = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
            const struct sim_replica *r = &reps[slot];
            int load = sim_replica_outstanding(r);
            if (late && sim_replica_unanswered(r) >= rt->late_cap) continue;
            int evict;
            int cached = router_cached(rt, q, r, &evict);
            cand[n] = (struct router_candidate){
                .load = load,
                .cached_tokens = cached,
                .id_hash = router_policy_hash(&slot, sizeof(slot)),
                .queued_prefill = lround(sim_replica_prefill_waiting(r)),
                .evict_tokens = evict,
            };
            slots[n++] = slot;
        }
    }
    if (n == 0) return late ? SIM_ROUTER_ALL_FULL : SIM_ROUTER_NONE_READY;
    enum router_reason why;
    size_t k =
        router_policy_pick(&rt->pol, cand, n, q->prompt > INT32_MAX ? INT32_MAX : (int)q->prompt, 0,
                           trace_splitmix64(&rt->rng), &why);
    return (int)slots[k];
}

int sim_router_pick(struct sim_router *rt, const struct sim_req *q, const struct sim_replica *reps)
{
    const struct sim_heap_item *least = sim_heap_top(&rt->ready);
    if (!least) return SIM_ROUTER_NONE_READY;
    if (router_mode(rt->mode)) return pick_router(rt, q, reps);
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
