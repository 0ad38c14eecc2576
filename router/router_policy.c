/* Replica choice (see router_policy.h). */
#include "router/router_policy.h"

#include "common/err.h"

#include <math.h>
#include <string.h>

static const char *const reason_names[ROUTER_REASON_COUNT] = {
    [ROUTER_REASON_PREFIX] = "prefix",   [ROUTER_REASON_LOAD] = "load",
    [ROUTER_REASON_BOUNDED] = "bounded", [ROUTER_REASON_SESSION] = "session",
    [ROUTER_REASON_RANDOM] = "random",
};

const char *router_reason_name(enum router_reason r)
{
    return r >= 0 && r < ROUTER_REASON_COUNT ? reason_names[r] : "?";
}

int router_policy_parse(const char *s, enum router_policy *out)
{
    if (!s) return ERR_INVAL;
    if (strcmp(s, "prefix") == 0)
        *out = ROUTER_POLICY_PREFIX;
    else if (strcmp(s, "least-loaded") == 0)
        *out = ROUTER_POLICY_LEAST_LOADED;
    else if (strcmp(s, "random") == 0)
        *out = ROUTER_POLICY_RANDOM;
    else
        return ERR_INVAL;
    return 0;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t router_policy_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return mix64(h);
}

int router_policy_bound(const struct router_policy_cfg *cfg, long total_load, size_t n)
{
    double cap = ceil(cfg->load_factor * (double)(total_load + 1) / (double)n);
    if (cap < cfg->load_floor) cap = cfg->load_floor;
    return cap < 1 ? 1 : cap > 1e9 ? 1000000000 : (int)cap;
}

/* What candidate c need not compute: its KV pool's run and what follows in an offload tier. */
static int reused_tokens(const struct router_candidate *c)
{
    return c->cached_tokens + c->offload_tokens;
}

size_t router_policy_pick(const struct router_policy_cfg *cfg, const struct router_candidate *c,
                          size_t n, int n_prompt, uint64_t session, uint64_t rnd,
                          enum router_reason *why)
{
    if (n == 1) {
        *why = c[0].cached_tokens > 0 ? ROUTER_REASON_PREFIX : ROUTER_REASON_LOAD;
        if (cfg->policy == ROUTER_POLICY_RANDOM) *why = ROUTER_REASON_RANDOM;
        return 0;
    }
    if (cfg->policy == ROUTER_POLICY_RANDOM) {
        *why = ROUTER_REASON_RANDOM;
        return (size_t)(rnd % n);
    }
    long total = 0;
    for (size_t i = 0; i < n; i++) total += c[i].load;
    int bound = router_policy_bound(cfg, total, n);

    if (session && cfg->policy == ROUTER_POLICY_PREFIX) {
        size_t best = 0;
        uint64_t top = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t w = mix64(session ^ c[i].id_hash);
            if (i == 0 || w > top) top = w, best = i;
        }
        if (c[best].load + 1 <= bound) {
            *why = ROUTER_REASON_SESSION;
            return best;
        }
    }

    /* Lowest cost among the replicas within the bound (least-loaded: cost = load). A tie goes
     * to the lower load, then to the candidate the random number ranks first. */
    size_t best = n;
    double best_cost = 0;
    uint64_t best_tie = 0;
    /* Reuse: what a replica need not compute (from its KV pool or an offload tier). */
    int max_cached = 0;
    for (size_t i = 0; i < n; i++)
        if (reused_tokens(&c[i]) > max_cached) max_cached = reused_tokens(&c[i]);
    bool prefix = cfg->policy == ROUTER_POLICY_PREFIX;
    for (size_t i = 0; i < n; i++) {
        if (c[i].load + 1 > bound) continue;
        int offload = prefix ? c[i].offload_tokens : 0;
        int reused = (prefix ? c[i].cached_tokens : 0) + offload;
        int uncached = n_prompt > reused ? n_prompt - reused : 0;
        double queued = c[i].queued_prefill > 0 ? (double)c[i].queued_prefill : 0;
        double evict = c[i].evict_tokens > 0 ? (double)c[i].evict_tokens : 0;
        double cost = prefix ? uncached + cfg->offload_weight * offload +
                                   cfg->prefill_weight * queued + cfg->evict_weight * evict +
                                   cfg->load_weight * c[i].load
                             : c[i].load;
        uint64_t tie = mix64(rnd ^ (uint64_t)i);
        bool better = best == n || cost < best_cost ||
                      (cost == best_cost &&
                       (c[i].load < c[best].load || (c[i].load == c[best].load && tie < best_tie)));
        if (better) best = i, best_cost = cost, best_tie = tie;
    }
    /* The bound leaves at least one candidate (the least loaded is at most the mean). */
    if (best == n) best = 0;
    if (!prefix || max_cached == 0)
        *why = ROUTER_REASON_LOAD;
    else if (reused_tokens(&c[best]) == max_cached)
        *why = ROUTER_REASON_PREFIX;
    else {
        /* Did the bound exclude a replica holding more? Then the spill is the guard's doing. */
        int mine = reused_tokens(&c[best]);
        bool excluded = false;
        for (size_t i = 0; i < n; i++)
            if (reused_tokens(&c[i]) > mine && c[i].load + 1 > bound) excluded = true;
        *why = excluded ? ROUTER_REASON_BOUNDED
                        : (mine > 0 ? ROUTER_REASON_PREFIX : ROUTER_REASON_LOAD);
    }
    return best;
}
