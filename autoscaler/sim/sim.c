/* The simulator's event loop (see sim.h): arrivals from the trace, the router, replica
 * completions, replica start-ups and one scrape + policy decision per interval. Events are ordered
 * by (time, insertion sequence), so a run is a pure function of the trace and the config. */
#include "autoscaler/sim/sim_heap.h"
#include "autoscaler/sim/sim_priv.h"
#include "autoscaler/sim/sim_route.h"
#include "autoscaler/victims.h"

#include "common/err.h"
#include "common/metric_names.h"
#include "engine/sched/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MAX_SAMPLES  (1u << 20)
#define SIM_MAX_REPLICAS 4096
/* The run's ITL quantiles: log-spaced bins of ratio 10^(1/100) (2.3%) from 0.1 ms to 1000 s. */
#define ITL_FINE_LO      1e-4
#define ITL_FINE_PER_DEC 100
#define ITL_FINE_BINS    (7 * ITL_FINE_PER_DEC + 2)

enum ev_kind { EV_ARRIVAL, EV_REPLICA, EV_READY, EV_SCRAPE };

struct ev {
    double t;
    uint64_t seq;
    enum ev_kind kind;
    int replica;
    uint32_t version;
};

struct sim {
    const struct sim_config *cfg;
    struct sim_world w;
    size_t n_req, next_arrival, done;
    struct sim_heap events; /* key = time, tie = insertion sequence */
    uint64_t seq;
    struct sim_replica *reps; /* slots; a gone replica's slot is reused by the next one */
    int n_reps, cap_reps;
    int n_ready, n_starting, n_alive; /* alive: starting, ready or draining */
    uint32_t *free_slots;             /* slots of gone replicas, reused last-in first-out */
    int n_free;
    struct sim_router router;
    double gone_prompt, gone_gen, gone_hit, gone_query; /* counters of replicas whose slot was
                                                         * reused (the fleet's totals keep them) */
    struct sim_fifo pending; /* held at the router: no replica ready (router-late: or with room) */
    struct policy_state *policy;
    double last_event_t;
    int last_dir;
    /* Per-interval accumulators, as the control loop reads them from counter/histogram deltas. */
    struct policy_hist ttft_hist;   /* the engine's TTFT buckets, counts of this interval */
    struct policy_hist itl_hist;    /* the engine's ITL buckets, counts of this interval */
    double itl_fine[ITL_FINE_BINS]; /* every gap of the run, log bins (ITL_FINE_*) */
    double itl_gaps, itl_over;
    double *ttft_iv;
    size_t n_ttft_iv, cap_ttft_iv;
    size_t arrivals_iv;
    double last_prompt, last_gen, last_hit, last_query;
    double last_t; /* for the replica-seconds integral */
    double replica_seconds;
    struct sim_result *res;
    size_t cap_samples;
};

/* ---- events ---- */

static int push(struct sim *s, double t, enum ev_kind k, int replica, uint32_t version)
{
    return sim_heap_push(&s->events, (struct sim_heap_item){.key = t,
                                                            .tie = s->seq++,
                                                            .id = (uint32_t)replica,
                                                            .aux = (uint32_t)k,
                                                            .aux2 = version});
}

static struct ev pop(struct sim *s)
{
    struct sim_heap_item it = sim_heap_pop(&s->events);
    return (struct ev){it.key, it.tie, (enum ev_kind)it.aux, (int)it.id, (uint32_t)it.aux2};
}

/* ---- callbacks from the replica model ---- */

static const double ttft_bounds[] = {METRIC_BUCKETS_TIME_TO_FIRST_TOKEN};
#define N_TTFT_BOUNDS (sizeof(ttft_bounds) / sizeof(ttft_bounds[0]))

/* The first cause in sim.h's order that explains a violation of request q. */
static enum sim_cause cause_of(const struct sim *s, const struct sim_req *q)
{
    double slo = s->cfg->slo_ttft_s;
    const struct sim_replica *r = q->replica >= 0 ? &s->reps[q->replica] : NULL;
    if (q->prefill_s > slo) return SIM_CAUSE_PREFILL;
    if (r && r->state == SIM_DRAINING) return SIM_CAUSE_DRAINING;
    /* Held at the router for longer than it then waited at the replica (wait = TTFT - prefill):
     * the fleet was short, or full with nothing ordered. */
    if (q->held_s > 0 && q->held_s > q->first_token - q->arrival - q->prefill_s - q->held_s)
        return q->fleet_short ? SIM_CAUSE_FLEET_SHORT : SIM_CAUSE_HELD;
    if (r && r->long_prefill_end > q->arrival && r->long_prefill_end < q->first_token)
        return SIM_CAUSE_LONG_PREFILL;
    if (q->fleet_short) return SIM_CAUSE_FLEET_SHORT;
    return SIM_CAUSE_QUEUED;
}

static void on_first_token(void *ctx, uint32_t req, double t)
{
    struct sim *s = ctx;
    struct sim_req *q = &s->w.reqs[req];
    q->first_token = t;
    double ttft = t - q->arrival;
    if (ttft > s->cfg->slo_ttft_s) q->cause = (uint8_t)cause_of(s, q);
    /* The engine's histogram: cumulative buckets, counted here per bucket and summed at scrape. */
    size_t b = 0;
    while (b < N_TTFT_BOUNDS && ttft > ttft_bounds[b]) b++;
    s->ttft_hist.count[b] += 1;
    if (s->n_ttft_iv == s->cap_ttft_iv) {
        size_t cap = s->cap_ttft_iv ? s->cap_ttft_iv * 2 : 256;
        double *a = realloc(s->ttft_iv, cap * sizeof(*a));
        if (!a) return; /* the interval's p99 then misses a sample; the totals do not */
        s->ttft_iv = a;
        s->cap_ttft_iv = cap;
    }
    s->ttft_iv[s->n_ttft_iv++] = ttft;
}

static const double itl_bounds[] = {METRIC_BUCKETS_INTER_TOKEN_LATENCY};
#define N_ITL_BOUNDS (sizeof(itl_bounds) / sizeof(itl_bounds[0]))

static size_t fine_bin(double gap)
{
    if (!(gap > ITL_FINE_LO)) return 0;
    double b = 1 + floor(log10(gap / ITL_FINE_LO) * ITL_FINE_PER_DEC);
    return b >= ITL_FINE_BINS - 1 ? ITL_FINE_BINS - 1 : (size_t)b;
}

/* Upper edge of fine bin i (bin 0 holds gaps <= ITL_FINE_LO). */
static double fine_edge(size_t i)
{
    return ITL_FINE_LO * pow(10, (double)i / ITL_FINE_PER_DEC);
}

static void on_gaps(void *ctx, double gap, double count)
{
    struct sim *s = ctx;
    size_t b = 0;
    while (b < N_ITL_BOUNDS && gap > itl_bounds[b]) b++;
    s->itl_hist.count[b] += count;
    s->itl_fine[fine_bin(gap)] += count;
    s->itl_gaps += count;
    if (s->cfg->slo_itl_s > 0 && gap > s->cfg->slo_itl_s) s->itl_over += count;
}

/* The q-quantile of the run's gaps: the upper edge of the bin where it falls, or -1. */
static double itl_quantile(const struct sim *s, double q)
{
    if (!(s->itl_gaps > 0)) return -1;
    double want = q * s->itl_gaps, cum = 0;
    for (size_t i = 0; i < ITL_FINE_BINS; i++) {
        cum += s->itl_fine[i];
        if (cum >= want) return fine_edge(i);
    }
    return fine_edge(ITL_FINE_BINS - 1);
}

static void on_done(void *ctx, uint32_t req, double t)
{
    struct sim *s = ctx;
    (void)req;
    (void)t;
    s->done++;
}

/* ---- replicas ---- */

static void account(struct sim *s, double now)
{
    s->replica_seconds += s->n_alive * (now - s->last_t);
    s->last_t = now;
}

/* The one place a replica changes state: keeps the counters, the router's ready set and the free
 * slots in step. */
static int set_state(struct sim *s, int i, enum sim_replica_state to)
{
    struct sim_replica *r = &s->reps[i];
    enum sim_replica_state from = r->state;
    s->n_ready += (to == SIM_READY) - (from == SIM_READY);
    s->n_starting += (to == SIM_STARTING) - (from == SIM_STARTING);
    s->n_alive += (to != SIM_GONE) - (from != SIM_GONE);
    r->state = to;
    if (to == SIM_GONE) s->free_slots[s->n_free++] = (uint32_t)i;
    return sim_router_update(&s->router, (uint32_t)i, to == SIM_READY ? r : NULL);
}

/* Steps replica i at `now`, refreshes its load at the router and schedules its next completion. */
static int touch(struct sim *s, int i, double now)
{
    struct sim_replica *r = &s->reps[i];
    sim_replica_step(r, &s->w, now);
    if (r->state == SIM_DRAINING && sim_replica_outstanding(r) == 0)
        return set_state(s, i, SIM_GONE);
    int rc = r->state == SIM_READY ? sim_router_update(&s->router, (uint32_t)i, r) : 0;
    double next = sim_replica_next(r, &s->w);
    return !rc && next >= 0 ? push(s, next, EV_REPLICA, i, r->version) : rc;
}

/* A new replica, in the slot of a gone one when there is one. Its version continues the slot's
 * (stale completion and ready events of the slot's last replica never match). */
static int add_replica(struct sim *s, double now, double ready_at)
{
    int i;
    uint32_t version = 0;
    if (s->n_free > 0) {
        i = (int)s->free_slots[--s->n_free];
        struct sim_replica *g = &s->reps[i];
        version = g->version + 1;
        s->gone_prompt += g->prompt_tokens;
        s->gone_gen += g->gen_tokens;
        s->gone_hit += g->hit_tokens;
        s->gone_query += g->query_tokens;
        sim_replica_fini(g);
    } else {
        if (s->n_reps >= SIM_MAX_REPLICAS) return ERR_RANGE;
        if (s->n_reps == s->cap_reps) {
            int cap = s->cap_reps ? 2 * s->cap_reps : 64;
            if (cap > SIM_MAX_REPLICAS) cap = SIM_MAX_REPLICAS;
            struct sim_replica *r = realloc(s->reps, (size_t)cap * sizeof(*r));
            if (!r) return ERR_NOMEM;
            s->reps = r;
            s->cap_reps = cap;
        }
        i = s->n_reps++;
    }
    struct sim_replica *r = &s->reps[i];
    int rc = sim_replica_init(r, &s->w, (uint32_t)i, now, ready_at);
    enum sim_replica_state st = r->state;
    r->state = SIM_GONE; /* so that set_state counts the transition from no replica */
    if (rc != 0) {
        s->free_slots[s->n_free++] = (uint32_t)i; /* an empty slot, as a gone replica's */
        return rc;
    }
    r->version = version;
    if ((rc = set_state(s, i, st)) != 0) return rc;
    if (ready_at > now) return push(s, ready_at, EV_READY, i, version);
    return 0;
}

/* Replicas counted by the Deployment: ready plus starting (draining ones are being deleted). */
static int count_spec(const struct sim *s, int *ready)
{
    if (ready) *ready = s->n_ready;
    return s->n_ready + s->n_starting;
}

/* ---- routing ---- */

int sim_routing_parse(const char *str, enum sim_routing *out)
{
    static const char *const names[] = {"least-prefill", "least-requests", "random", "router",
                                        "router-late"};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (str && strcmp(str, names[i]) == 0) {
            *out = (enum sim_routing)i;
            return 0;
        }
    return ERR_INVAL;
}

static int bind(struct sim *s, uint32_t id, int i, double now)
{
    s->w.reqs[id].replica = i;
    s->w.reqs[id].held_s = (float)(now - s->w.reqs[id].arrival);
    int rc = sim_replica_enqueue(&s->reps[i], &s->w, id);
    return rc ? rc : touch(s, i, now);
}

/* An arriving request: to a replica, or held behind the requests held already (FIFO). */
static int dispatch(struct sim *s, uint32_t id, double now)
{
    if (s->pending.n) return sim_fifo_push(&s->pending, id);
    int i = sim_router_pick(&s->router, &s->w.reqs[id], s->reps);
    return i < 0 ? sim_fifo_push(&s->pending, id) : bind(s, id, i, now);
}

/* Sends held requests, oldest first, while the router places them (a replica became ready, or
 * with router-late one has room again). */
static int release_held(struct sim *s, double now)
{
    int rc = 0;
    while (!rc && s->pending.n) {
        uint32_t id = s->pending.a[s->pending.head];
        int i = sim_router_pick(&s->router, &s->w.reqs[id], s->reps);
        if (i < 0) break;
        sim_fifo_pop(&s->pending);
        rc = bind(s, id, i, now);
    }
    return rc;
}

/* ---- scaling ---- */

static int scale_to(struct sim *s, int desired, double now)
{
    int cur = count_spec(s, NULL);
    for (; cur < desired; cur++) {
        int rc = add_replica(s, now, now + s->cfg->spec.startup_s);
        if (rc) return rc;
    }
    if (cur <= desired) return 0;
    /* The victims module picks whom to remove, as the deletion-cost annotations would. */
    struct victims_pod *pods = calloc((size_t)s->n_reps, sizeof(*pods));
    size_t *map = calloc((size_t)s->n_reps, sizeof(*map));
    size_t *order = calloc((size_t)s->n_reps, sizeof(*order));
    int rc = ERR_NOMEM;
    if (!pods || !map || !order) goto out;
    size_t n = 0;
    for (int i = 0; i < s->n_reps; i++) {
        const struct sim_replica *r = &s->reps[i];
        if (r->state != SIM_READY && r->state != SIM_STARTING) continue;
        double hit = r->query_tokens > 0 ? r->hit_tokens / r->query_tokens : 0;
        pods[n] = (struct victims_pod){NULL, hit * (double)r->cache.n, sim_replica_outstanding(r),
                                       r->state == SIM_READY};
        map[n++] = (size_t)i;
    }
    victims_order(pods, n, order);
    for (size_t k = 0; k < n && cur > desired; k++, cur--) {
        struct sim_replica *r = &s->reps[map[order[k]]];
        /* Never served, or idle: gone at once; otherwise it finishes what it accepted and
         * takes nothing new. */
        bool idle = r->state == SIM_STARTING || sim_replica_outstanding(r) == 0;
        rc = set_state(s, (int)map[order[k]], idle ? SIM_GONE : SIM_DRAINING);
        if (rc) goto out;
    }
    rc = 0;
out:
    free(pods);
    free(map);
    free(order);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank quantile of sorted v[0..n). */
static double quantile(const double *v, size_t n, double q)
{
    if (n == 0) return -1;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

static int scrape(struct sim *s, double now)
{
    const struct sim_config *cfg = s->cfg;
    struct policy_signals sig = {.time_s = now, .ttft_p99_s = -1};
    double prompt = s->gone_prompt, gen = s->gone_gen, hit = s->gone_hit, query = s->gone_query;
    double kv = 0;
    sig.prefill_waiting = 0;
    for (int i = 0; i < s->n_reps; i++) {
        struct sim_replica *r = &s->reps[i];
        /* Bring the counters up to now, as a live engine's would be. */
        if (r->state == SIM_READY || r->state == SIM_DRAINING) {
            int rc = touch(s, i, now);
            if (rc) return rc;
        }
        prompt += r->prompt_tokens;
        gen += r->gen_tokens;
        hit += r->hit_tokens;
        query += r->query_tokens;
        if (r->state == SIM_READY) {
            sig.ready_pods++;
            sig.waiting += (double)r->waiting.n;
            sig.running += r->n_run;
            sig.prefill_waiting += sim_replica_prefill_waiting(r);
            kv += r->kv_used / cfg->model.kv_tokens;
        } else if (r->state == SIM_STARTING) {
            sig.unready_pods++;
        }
    }
    if (cfg->routing == SIM_ROUTE_ROUTER_LATE) {
        /* Late binding moves the queue from the engines to the router: the policy must see it
         * there (what the router would have to export: held requests and their prompt tokens). */
        for (size_t k = 0; k < s->pending.n; k++)
            sig.prefill_waiting +=
                s->w.reqs[s->pending.a[(s->pending.head + k) % s->pending.cap]].prompt;
        sig.waiting += (double)s->pending.n;
    }
    double iv = cfg->spec.interval_s;
    sig.metrics_ok = sig.ready_pods > 0;
    sig.kv_usage = sig.ready_pods ? kv / sig.ready_pods : 0;
    sig.arrival_rate = (double)s->arrivals_iv / iv;
    sig.prompt_tok_rate = (prompt - s->last_prompt) / iv;
    sig.gen_tok_rate = (gen - s->last_gen) / iv;
    sig.prefix_hit_rate = query > s->last_query ? (hit - s->last_hit) / (query - s->last_query) : 0;
    double p99 = -1; /* exact, for the plot; the policy sees the engine's buckets */
    if (s->n_ttft_iv) {
        qsort(s->ttft_iv, s->n_ttft_iv, sizeof(double), cmp_double);
        p99 = quantile(s->ttft_iv, s->n_ttft_iv, 0.99);
    }
    sig.ttft = s->ttft_hist;
    for (size_t b = 1; b < sig.ttft.n; b++) sig.ttft.count[b] += sig.ttft.count[b - 1];
    sig.ttft_p99_s = policy_hist_quantile(&sig.ttft, 0.99);
    for (size_t b = 0; b < s->ttft_hist.n; b++) s->ttft_hist.count[b] = 0;
    sig.itl = s->itl_hist;
    for (size_t b = 1; b < sig.itl.n; b++) sig.itl.count[b] += sig.itl.count[b - 1];
    for (size_t b = 0; b < s->itl_hist.n; b++) s->itl_hist.count[b] = 0;
    s->last_prompt = prompt;
    s->last_gen = gen;
    s->last_hit = hit;
    s->last_query = query;
    s->arrivals_iv = 0;
    s->n_ttft_iv = 0;
    int current = count_spec(s, NULL);
    int desired = current;
    struct policy_decision d = {0};
    if (s->policy) {
        policy_decide(s->policy, &sig, current, &d);
        desired = d.desired;
    }
    if (cfg->decisions)
        fprintf(cfg->decisions,
                "t=%.0f arrivals=%.2f/s ready=%d current=%d desired=%d prefill_waiting=%.0f "
                "ttft_p99=%.2f objective=%s capacity=%.0f load=%.0f burst=%.2fx/%.1f%% | %s\n",
                now, sig.arrival_rate, sig.ready_pods, current, desired, sig.prefill_waiting, p99,
                policy_objective_state_name(d.objective), d.capacity_work, d.load_work,
                d.burst_amplitude, 100 * d.burst_share, d.reason);
    if (desired != current) {
        s->res->scale_events++;
        int dir = desired > current ? 1 : -1;
        if (s->last_dir && dir != s->last_dir && now - s->last_event_t <= 300) s->res->reversals++;
        s->last_dir = dir;
        s->last_event_t = now;
        int rc = scale_to(s, desired, now);
        if (rc) return rc;
    }
    int ready;
    int spec_n = count_spec(s, &ready);
    if (spec_n > s->res->max_replicas_seen) s->res->max_replicas_seen = spec_n;
    if (s->res->n_samples < SIM_MAX_SAMPLES) {
        if (s->res->n_samples == s->cap_samples) {
            size_t cap = s->cap_samples ? s->cap_samples * 2 : 256;
            struct sim_sample *a = realloc(s->res->samples, cap * sizeof(*a));
            if (!a) return ERR_NOMEM;
            s->res->samples = a;
            s->cap_samples = cap;
        }
        s->res->samples[s->res->n_samples++] = (struct sim_sample){
            now, sig.arrival_rate, spec_n, ready, p99, d.forecast_rps, d.capacity_rps};
    }
    return 0;
}

/* ---- setup and the loop ---- */

double sim_decode_k(int decode_batch, double decode_tps, double decode_batch_tps)
{
    return decode_batch > 1
               ? ((double)decode_batch * decode_tps / decode_batch_tps - 1) / (decode_batch - 1)
               : 1;
}

void sim_config_defaults(struct sim_config *cfg, enum policy_kind kind)
{
    memset(cfg, 0, sizeof(*cfg));
    policy_spec_defaults(&cfg->spec, kind);
    cfg->spec.max_replicas = 64;
    cfg->model = (struct sim_replica_model){.prefill_tps = 2000,
                                            .decode_tps = 60,
                                            .decode_batch_tps = 700,
                                            .decode_batch = 16,
                                            .max_running = 16,
                                            .kv_tokens = 32768,
                                            .cache_tokens = 32768,
                                            .spec_accept = 0.7};
    cfg->slo_ttft_s = 2;
    cfg->spec.objective_ttft_s = 2;
    cfg->spec.target_queue_depth = cfg->spec.target_kv_usage = 0;
    cfg->replicas = kind == POLICY_STATIC ? 1 : 0;
    cfg->routing = SIM_ROUTE_ROUTER;
    cfg->late_hold = 1;
    cfg->time_scale = 1;
    cfg->token_scale = 1;
    cfg->prefix_routing = true;
    cfg->spread_ties = true;
    cfg->seed = 1;
}

static int check_config(const struct sim_config *c, char *err, size_t errlen)
{
    const struct sim_replica_model *m = &c->model;
    const char *bad = NULL;
    if (!(c->time_scale > 0) || !(c->token_scale > 0))
        bad = "time and token scales must be > 0";
    else if (!(m->prefill_tps > 0) || !(m->decode_tps > 0) || !(m->decode_batch_tps > 0))
        bad = "prefill and decode rates must be > 0";
    else if (m->decode_batch < 1 || m->max_running < 1 || m->max_running > 4096)
        bad = "decode batch and max running must be in [1, 4096]";
    else if (m->decode_batch_tps < m->decode_tps ||
             m->decode_batch_tps > m->decode_tps * m->decode_batch)
        bad = "batched decode throughput must lie between single-stream and batch x single-stream";
    else if (!(m->kv_tokens >= 1) || m->cache_tokens < 0)
        bad = "KV capacity must be >= 1 token";
    else if (m->spec_tokens < 0 || m->spec_tokens > SPEC_MAX_TOKENS ||
             !(m->spec_accept >= 0 && m->spec_accept < 1) ||
             !(m->spec_draft_cost >= 0 && m->spec_draft_cost <= 100))
        bad = "speculation: tokens in [0, 16], acceptance in [0, 1), draft cost in [0, 100]";
    else if (!(c->spec.interval_s > 0))
        bad = "interval must be > 0";
    else if (c->spec.startup_s < 0 || !(c->slo_ttft_s > 0) || c->spec.objective_ttft_s < 0 ||
             c->slo_itl_s < 0 || c->spec.objective_itl_s < 0)
        bad = "bad startup or TTFT objective";
    else if (c->late_hold < 1)
        bad = "late-binding hold must be >= 1 request";
    else if (c->replicas < 0 || c->replicas > SIM_MAX_REPLICAS)
        bad = "replicas must be in [0, 4096]";
    else if (c->spec.kind == POLICY_STATIC && (c->replicas < 1 || c->replicas > SIM_MAX_REPLICAS))
        bad = "static replicas must be in [1, 4096]";
    else if (c->spec.kind != POLICY_STATIC &&
             (c->spec.min_replicas < 1 || c->spec.max_replicas < c->spec.min_replicas ||
              c->spec.max_replicas > SIM_MAX_REPLICAS))
        bad = "need 1 <= min replicas <= max replicas <= 4096";
    else if (c->spec.kind == POLICY_EXTERNAL)
        bad = "the external policy cannot be simulated";
    if (!bad) return 0;
    snprintf(err, errlen, "%s", bad);
    return ERR_INVAL;
}

static const char *policy_name(enum policy_kind k)
{
    switch (k) {
    case POLICY_STATIC: return "static";
    case POLICY_REACTIVE: return "reactive";
    case POLICY_PREDICTIVE: return "predictive";
    default: return "external";
    }
}

static uint32_t scale_tokens(uint32_t n, double f)
{
    double v = round((double)n * f);
    return v < 1 ? 1 : v > 4e9 ? 4000000000u : (uint32_t)v;
}

static int build_requests(struct sim *s, const struct trace *tr)
{
    const struct sim_config *c = s->cfg;
    s->n_req = tr->n;
    s->w.reqs = calloc(tr->n, sizeof(*s->w.reqs));
    if (!s->w.reqs) return ERR_NOMEM;
    double *t = malloc(tr->n * sizeof(*t));
    if (!t) return ERR_NOMEM;
    for (size_t i = 0; i < tr->n; i++) t[i] = tr->reqs[i].t_s;
    if (c->spread_ties) { /* on a copy: the trace is borrowed */
        struct trace copy = *tr;
        copy.reqs = malloc(tr->n * sizeof(*copy.reqs));
        if (!copy.reqs) {
            free(t);
            return ERR_NOMEM;
        }
        memcpy(copy.reqs, tr->reqs, tr->n * sizeof(*copy.reqs));
        trace_spread_ties(&copy, c->seed);
        for (size_t i = 0; i < tr->n; i++) t[i] = copy.reqs[i].t_s;
        free(copy.reqs);
    }
    for (size_t i = 0; i < tr->n; i++) {
        const struct trace_req *r = &tr->reqs[i];
        s->w.reqs[i] = (struct sim_req){.arrival = t[i] * c->time_scale,
                                        .first_token = -1,
                                        .prompt = scale_tokens(r->prompt_tokens, c->token_scale),
                                        .output = scale_tokens(r->output_tokens, c->token_scale),
                                        .hash_off = r->hash_off,
                                        .n_hash = r->n_hash,
                                        .replica = -1};
    }
    free(t);
    s->w.block_tokens = TRACE_BLOCK_TOKENS * c->token_scale;
    return 0;
}

static int run_loop(struct sim *s)
{
    int rc = push(s, s->w.reqs[0].arrival, EV_ARRIVAL, -1, 0);
    if (!rc) rc = push(s, s->cfg->spec.interval_s, EV_SCRAPE, -1, 0);
    while (!rc && s->events.n) {
        struct ev e = pop(s);
        if (e.kind == EV_SCRAPE && s->done == s->n_req) continue; /* over: no more intervals */
        account(s, e.t);
        switch (e.kind) {
        case EV_ARRIVAL: {
            uint32_t id = (uint32_t)s->next_arrival++;
            s->arrivals_iv++;
            int ready;
            s->w.reqs[id].fleet_short = count_spec(s, &ready) > ready;
            rc = dispatch(s, id, e.t);
            if (!rc && s->next_arrival < s->n_req)
                rc = push(s, s->w.reqs[s->next_arrival].arrival, EV_ARRIVAL, -1, 0);
            break;
        }
        case EV_REPLICA: {
            struct sim_replica *r = &s->reps[e.replica];
            if (e.version == r->version && (r->state == SIM_READY || r->state == SIM_DRAINING))
                rc = touch(s, e.replica, e.t);
            if (!rc && s->pending.n) rc = release_held(s, e.t);
            break;
        }
        case EV_READY:
            if (s->reps[e.replica].state != SIM_STARTING || s->reps[e.replica].version != e.version)
                break; /* removed while starting (the slot may hold another replica now) */
            s->reps[e.replica].t = e.t;
            rc = set_state(s, e.replica, SIM_READY);
            if (!rc) rc = release_held(s, e.t);
            break;
        case EV_SCRAPE:
            rc = scrape(s, e.t);
            if (!rc && s->pending.n) rc = release_held(s, e.t);
            if (!rc) rc = push(s, e.t + s->cfg->spec.interval_s, EV_SCRAPE, -1, 0);
            break;
        }
    }
    s->res->duration_s = s->last_t;
    return rc;
}

static int summarise(struct sim *s)
{
    struct sim_result *res = s->res;
    double *ttft = malloc(s->n_req * sizeof(*ttft));
    if (!ttft) return ERR_NOMEM;
    size_t viol = 0;
    double sum = 0;
    for (size_t i = 0; i < s->n_req; i++) {
        ttft[i] = s->w.reqs[i].first_token - s->w.reqs[i].arrival;
        sum += ttft[i];
        viol += ttft[i] > s->cfg->slo_ttft_s;
        res->cause_rate[s->w.reqs[i].cause] += 1.0 / (double)s->n_req;
    }
    res->cause_rate[SIM_CAUSE_NONE] = 0;
    qsort(ttft, s->n_req, sizeof(*ttft), cmp_double);
    res->requests = s->n_req;
    res->slo_violation_rate = (double)viol / (double)s->n_req;
    res->ttft_p50_s = quantile(ttft, s->n_req, 0.5);
    res->ttft_p99_s = quantile(ttft, s->n_req, 0.99);
    res->ttft_mean_s = sum / (double)s->n_req;
    res->replica_seconds = s->replica_seconds;
    res->itl_gaps = s->itl_gaps;
    res->itl_p50_s = itl_quantile(s, 0.5);
    res->itl_p99_s = itl_quantile(s, 0.99);
    res->itl_violation_rate = s->itl_gaps > 0 ? s->itl_over / s->itl_gaps : 0;
    double hit = s->gone_hit, query = s->gone_query;
    for (int i = 0; i < s->n_reps; i++) {
        hit += s->reps[i].hit_tokens;
        query += s->reps[i].query_tokens;
    }
    res->prefix_hit_rate = query > 0 ? hit / query : 0;
    free(ttft);
    return 0;
}

const char *sim_cause_name(enum sim_cause c)
{
    static const char *const names[SIM_CAUSE_COUNT] = {
        "none", "prefill", "draining", "long-prefill", "fleet-short", "queued", "held"};
    return (unsigned)c < SIM_CAUSE_COUNT ? names[c] : "unknown";
}

int sim_initial_replicas(const struct trace *tr, const struct sim_config *cfg)
{
    const struct sim_replica_model *m = &cfg->model;
    double busy = 0, window = 300;
    for (size_t i = 0; tr && i < tr->n && tr->reqs[i].t_s * cfg->time_scale < window; i++)
        busy += (double)tr->reqs[i].prompt_tokens * cfg->token_scale / m->prefill_tps +
                (double)tr->reqs[i].output_tokens * cfg->token_scale / m->decode_batch_tps;
    int n = (int)ceil(busy / window / 0.6);
    if (n < cfg->spec.min_replicas) n = cfg->spec.min_replicas;
    if (n < 1) n = 1;
    if (n > cfg->spec.max_replicas && cfg->spec.max_replicas > 0) n = cfg->spec.max_replicas;
    return n;
}

int sim_run(const struct trace *tr, const struct sim_config *cfg, struct sim_result *res, char *err,
            size_t errlen)
{
    memset(res, 0, sizeof(*res));
    if (err && errlen) err[0] = 0;
    if (!tr || tr->n == 0) {
        snprintf(err, errlen, "empty trace");
        return ERR_INVAL;
    }
    int rc = check_config(cfg, err, errlen);
    if (rc) return rc;
    struct sim s = {.cfg = cfg, .res = res};
    const struct sim_replica_model *m = &cfg->model;
    s.w.m = m;
    /* D(b) = b s / (1 + (b-1) k) through D(batch) = batch_tps; batch 1 means no batching gain. */
    s.w.decode_k = sim_decode_k(m->decode_batch, m->decode_tps, m->decode_batch_tps);
    if ((rc = sim_spec_new(&s.w)) != 0) return rc;
    s.w.on_first_token = on_first_token;
    s.w.long_prefill_s = cfg->slo_ttft_s / 2;
    s.ttft_hist.n = N_TTFT_BOUNDS + 1;
    for (size_t b = 0; b < N_TTFT_BOUNDS; b++) s.ttft_hist.le[b] = ttft_bounds[b];
    s.ttft_hist.le[N_TTFT_BOUNDS] = INFINITY;
    s.itl_hist.n = N_ITL_BOUNDS + 1;
    for (size_t b = 0; b < N_ITL_BOUNDS; b++) s.itl_hist.le[b] = itl_bounds[b];
    s.itl_hist.le[N_ITL_BOUNDS] = INFINITY;
    s.w.on_gaps = on_gaps;
    s.w.on_done = on_done;
    s.w.ctx = &s;
    res->policy = policy_name(cfg->spec.kind);
    if ((rc = build_requests(&s, tr)) != 0) goto out;
    if ((rc = sim_heap_init(&s.events, 0)) != 0 ||
        (rc = sim_router_init(&s.router, cfg, tr, SIM_MAX_REPLICAS)) != 0)
        goto out;
    s.w.hashes = s.router.keys;
    s.w.cache_index = s.router.affinity ? &s.router.index : NULL;
    s.free_slots = malloc(SIM_MAX_REPLICAS * sizeof(*s.free_slots));
    if (!s.free_slots) {
        rc = ERR_NOMEM;
        goto out;
    }
    int n0 = cfg->replicas;
    if (cfg->spec.kind != POLICY_STATIC && n0 == 0) n0 = sim_initial_replicas(tr, cfg);
    if (cfg->spec.kind != POLICY_STATIC) {
        if (n0 < cfg->spec.min_replicas) n0 = cfg->spec.min_replicas;
        if (n0 > cfg->spec.max_replicas) n0 = cfg->spec.max_replicas;
        s.policy = policy_state_new(&cfg->spec);
        if (!s.policy) {
            rc = ERR_NOMEM;
            goto out;
        }
    }
    for (int i = 0; i < n0 && !rc; i++) rc = add_replica(&s, 0, 0);
    if (rc) goto out;
    res->max_replicas_seen = n0;
    res->initial_replicas = n0;
    if ((rc = run_loop(&s)) != 0) goto out;
    rc = summarise(&s);
out:
    if (rc && err && errlen && !err[0]) snprintf(err, errlen, "simulation failed: %s", err_str(rc));
    for (int i = 0; i < s.n_reps; i++) sim_replica_fini(&s.reps[i]);
    free(s.reps);
    free(s.free_slots);
    sim_heap_fini(&s.events);
    sim_router_fini(&s.router);
    free(s.ttft_iv);
    free(s.w.reqs);
    sim_fifo_fini(&s.pending);
    policy_state_free(s.policy);
    sim_spec_free(s.w.spec);
    if (rc) sim_result_fini(res);
    return rc;
}

void sim_result_fini(struct sim_result *res)
{
    if (!res) return;
    free(res->samples);
    res->samples = NULL;
    res->n_samples = 0;
}

void sim_result_json(const struct sim_result *r, char *buf, size_t len)
{
    snprintf(buf, len,
             "{\"policy\":\"%s\",\"requests\":%zu,\"slo_violation_rate\":%.6f,"
             "\"ttft_p50\":%.6f,\"ttft_p99\":%.6f,\"itl_p99\":%.6f,"
             "\"itl_violation_rate\":%.6f,\"replica_seconds\":%.3f,"
             "\"scale_events\":%d,\"prefix_hit_rate\":%.6f,\"initial_replicas\":%d,"
             "\"max_replicas\":%d,\"reversals\":%d,\"violations\":{\"prefill\":%.6f,"
             "\"draining\":%.6f,\"long_prefill\":%.6f,\"fleet_short\":%.6f,\"queued\":%.6f,"
             "\"held\":%.6f}}",
             r->policy ? r->policy : "unknown", r->requests, r->slo_violation_rate, r->ttft_p50_s,
             r->ttft_p99_s, r->itl_p99_s, r->itl_violation_rate, r->replica_seconds,
             r->scale_events, r->prefix_hit_rate, r->initial_replicas, r->max_replicas_seen,
             r->reversals, r->cause_rate[SIM_CAUSE_PREFILL], r->cause_rate[SIM_CAUSE_DRAINING],
             r->cause_rate[SIM_CAUSE_LONG_PREFILL], r->cause_rate[SIM_CAUSE_FLEET_SHORT],
             r->cause_rate[SIM_CAUSE_QUEUED], r->cause_rate[SIM_CAUSE_HELD]);
}
