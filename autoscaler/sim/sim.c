/* The simulator's event loop (see sim.h): arrivals from the trace, the router, replica
 * completions, replica start-ups and one scrape + policy decision per interval. Events are ordered
 * by (time, insertion sequence), so a run is a pure function of the trace and the config. */
#include "autoscaler/sim/sim_priv.h"
#include "autoscaler/victims.h"

#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MAX_SAMPLES  (1u << 20)
#define SIM_MAX_REPLICAS 4096

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
    struct ev *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    struct sim_replica *reps;
    int n_reps;
    struct sim_fifo pending; /* arrived while no replica was ready */
    struct policy_state *policy;
    /* Per-interval accumulators, as the control loop reads them from counter/histogram deltas. */
    double *ttft_iv;
    size_t n_ttft_iv, cap_ttft_iv;
    size_t arrivals_iv;
    double last_prompt, last_gen, last_hit, last_query;
    double last_t; /* for the replica-seconds integral */
    double replica_seconds;
    struct sim_result *res;
    size_t cap_samples;
};

/* ---- event heap ---- */

static bool ev_less(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int push(struct sim *s, double t, enum ev_kind k, int replica, uint32_t version)
{
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 256;
        struct ev *h = realloc(s->heap, cap * sizeof(*h));
        if (!h) return ERR_NOMEM;
        s->heap = h;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    struct ev e = {t, s->seq++, k, replica, version};
    while (i > 0 && ev_less(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
    return 0;
}

static struct ev pop(struct sim *s)
{
    struct ev top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->n_heap) break;
        if (c + 1 < s->n_heap && ev_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!ev_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->n_heap) s->heap[i] = last;
    return top;
}

/* ---- callbacks from the replica model ---- */

static void on_first_token(void *ctx, uint32_t req, double t)
{
    struct sim *s = ctx;
    s->w.reqs[req].first_token = t;
    if (s->n_ttft_iv == s->cap_ttft_iv) {
        size_t cap = s->cap_ttft_iv ? s->cap_ttft_iv * 2 : 256;
        double *a = realloc(s->ttft_iv, cap * sizeof(*a));
        if (!a) return; /* the interval's p99 then misses a sample; the totals do not */
        s->ttft_iv = a;
        s->cap_ttft_iv = cap;
    }
    s->ttft_iv[s->n_ttft_iv++] = t - s->w.reqs[req].arrival;
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
    int alive = 0;
    for (int i = 0; i < s->n_reps; i++) alive += s->reps[i].state != SIM_GONE;
    s->replica_seconds += alive * (now - s->last_t);
    s->last_t = now;
}

/* Steps replica i at `now` and schedules its next completion. */
static int touch(struct sim *s, int i, double now)
{
    struct sim_replica *r = &s->reps[i];
    sim_replica_step(r, &s->w, now);
    if (r->state == SIM_DRAINING && sim_replica_outstanding(r) == 0) {
        r->state = SIM_GONE;
        return 0;
    }
    double next = sim_replica_next(r, &s->w);
    return next >= 0 ? push(s, next, EV_REPLICA, i, r->version) : 0;
}

static int add_replica(struct sim *s, double now, double ready_at)
{
    if (s->n_reps >= SIM_MAX_REPLICAS) return ERR_RANGE;
    struct sim_replica *r = realloc(s->reps, (size_t)(s->n_reps + 1) * sizeof(*r));
    if (!r) return ERR_NOMEM;
    s->reps = r;
    int rc = sim_replica_init(&s->reps[s->n_reps], &s->w, now, ready_at);
    if (rc != 0) return rc;
    s->n_reps++;
    if (ready_at > now) return push(s, ready_at, EV_READY, s->n_reps - 1, 0);
    return 0;
}

/* Replicas counted by the Deployment: ready plus starting (draining ones are being deleted). */
static int count_spec(const struct sim *s, int *ready)
{
    int n = 0, rd = 0;
    for (int i = 0; i < s->n_reps; i++) {
        n += s->reps[i].state == SIM_READY || s->reps[i].state == SIM_STARTING;
        rd += s->reps[i].state == SIM_READY;
    }
    if (ready) *ready = rd;
    return n;
}

/* ---- routing ---- */

static int route(struct sim *s, uint32_t id)
{
    const struct sim_req *q = &s->w.reqs[id];
    int best = -1, best_out = 0, least = -1, least_out = 0;
    size_t best_match = 0;
    for (int i = 0; i < s->n_reps; i++) {
        const struct sim_replica *r = &s->reps[i];
        if (r->state != SIM_READY) continue;
        int out = sim_replica_outstanding(r);
        if (least < 0 || out < least_out) {
            least = i;
            least_out = out;
        }
        if (!s->cfg->prefix_routing || q->n_hash == 0) continue;
        size_t m = sim_cache_match(&r->cache, s->w.hashes + q->hash_off, q->n_hash);
        if (best < 0 || m > best_match || (m == best_match && out < best_out)) {
            best = i;
            best_match = m;
            best_out = out;
        }
    }
    if (least < 0) return -1;
    /* Cache-aware routing as SGLang's router does it: affinity only when the best match covers at
     * least half the prompt's blocks (a prefix every request shares, such as Mooncake's block 0,
     * must not pull all traffic to the warm replicas) and that replica is not overloaded (more
     * than half a batch beyond the least loaded); least outstanding requests otherwise. */
    if (best >= 0 && 2 * best_match >= q->n_hash &&
        best_out <= least_out + s->cfg->model.max_running / 2)
        return best;
    return least;
}

static int dispatch(struct sim *s, uint32_t id, double now)
{
    int i = route(s, id);
    if (i < 0) return sim_fifo_push(&s->pending, id);
    int rc = sim_replica_enqueue(&s->reps[i], id);
    return rc ? rc : touch(s, i, now);
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
        if (r->state == SIM_STARTING || sim_replica_outstanding(r) == 0) {
            r->state = SIM_GONE; /* never served, or idle: gone at once */
        } else {
            r->state = SIM_DRAINING; /* finishes what it accepted, takes nothing new */
        }
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
    double prompt = 0, gen = 0, hit = 0, query = 0, kv = 0;
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
            kv += r->kv_used / cfg->model.kv_tokens;
        } else if (r->state == SIM_STARTING) {
            sig.unready_pods++;
        }
    }
    double iv = cfg->spec.interval_s;
    sig.metrics_ok = sig.ready_pods > 0;
    sig.kv_usage = sig.ready_pods ? kv / sig.ready_pods : 0;
    sig.arrival_rate = (double)s->arrivals_iv / iv;
    sig.prompt_tok_rate = (prompt - s->last_prompt) / iv;
    sig.gen_tok_rate = (gen - s->last_gen) / iv;
    sig.prefix_hit_rate = query > s->last_query ? (hit - s->last_hit) / (query - s->last_query) : 0;
    if (s->n_ttft_iv) {
        qsort(s->ttft_iv, s->n_ttft_iv, sizeof(double), cmp_double);
        sig.ttft_p99_s = quantile(s->ttft_iv, s->n_ttft_iv, 0.99);
    }
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
    if (desired != current) {
        s->res->scale_events++;
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
            now, sig.arrival_rate, spec_n, ready, sig.ttft_p99_s, d.forecast_rps, d.capacity_rps};
    }
    return 0;
}

/* ---- setup and the loop ---- */

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
                                            .cache_tokens = 32768};
    cfg->replicas = 1;
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
    else if (!(c->spec.interval_s > 0))
        bad = "interval must be > 0";
    else if (c->spec.startup_s < 0 || !(c->spec.slo_ttft_s > 0))
        bad = "bad startup or SLO";
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
        s->w.reqs[i] = (struct sim_req){t[i] * c->time_scale,
                                        -1,
                                        scale_tokens(r->prompt_tokens, c->token_scale),
                                        scale_tokens(r->output_tokens, c->token_scale),
                                        r->hash_off,
                                        r->n_hash};
    }
    free(t);
    s->w.hashes = tr->hashes;
    s->w.block_tokens = TRACE_BLOCK_TOKENS * c->token_scale;
    return 0;
}

static int run_loop(struct sim *s)
{
    int rc = push(s, s->w.reqs[0].arrival, EV_ARRIVAL, -1, 0);
    if (!rc) rc = push(s, s->cfg->spec.interval_s, EV_SCRAPE, -1, 0);
    while (!rc && s->n_heap) {
        struct ev e = pop(s);
        if (e.kind == EV_SCRAPE && s->done == s->n_req) continue; /* over: no more intervals */
        account(s, e.t);
        switch (e.kind) {
        case EV_ARRIVAL: {
            uint32_t id = (uint32_t)s->next_arrival++;
            s->arrivals_iv++;
            rc = dispatch(s, id, e.t);
            if (!rc && s->next_arrival < s->n_req)
                rc = push(s, s->w.reqs[s->next_arrival].arrival, EV_ARRIVAL, -1, 0);
            break;
        }
        case EV_REPLICA: {
            struct sim_replica *r = &s->reps[e.replica];
            if (e.version == r->version && (r->state == SIM_READY || r->state == SIM_DRAINING))
                rc = touch(s, e.replica, e.t);
            break;
        }
        case EV_READY:
            if (s->reps[e.replica].state != SIM_STARTING) break;
            s->reps[e.replica].state = SIM_READY;
            s->reps[e.replica].t = e.t;
            while (!rc && s->pending.n) rc = dispatch(s, sim_fifo_pop(&s->pending), e.t);
            break;
        case EV_SCRAPE:
            rc = scrape(s, e.t);
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
        viol += ttft[i] > s->cfg->spec.slo_ttft_s;
    }
    qsort(ttft, s->n_req, sizeof(*ttft), cmp_double);
    res->requests = s->n_req;
    res->slo_violation_rate = (double)viol / (double)s->n_req;
    res->ttft_p50_s = quantile(ttft, s->n_req, 0.5);
    res->ttft_p99_s = quantile(ttft, s->n_req, 0.99);
    res->ttft_mean_s = sum / (double)s->n_req;
    res->replica_seconds = s->replica_seconds;
    double hit = 0, query = 0;
    for (int i = 0; i < s->n_reps; i++) {
        hit += s->reps[i].hit_tokens;
        query += s->reps[i].query_tokens;
    }
    res->prefix_hit_rate = query > 0 ? hit / query : 0;
    free(ttft);
    return 0;
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
    s.w.decode_k = m->decode_batch > 1
                       ? ((double)m->decode_batch * m->decode_tps / m->decode_batch_tps - 1) /
                             (m->decode_batch - 1)
                       : 1;
    s.w.on_first_token = on_first_token;
    s.w.on_done = on_done;
    s.w.ctx = &s;
    res->policy = policy_name(cfg->spec.kind);
    if ((rc = build_requests(&s, tr)) != 0) goto out;
    int n0 = cfg->replicas;
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
    if ((rc = run_loop(&s)) != 0) goto out;
    rc = summarise(&s);
out:
    if (rc && err && errlen && !err[0]) snprintf(err, errlen, "simulation failed: %s", err_str(rc));
    for (int i = 0; i < s.n_reps; i++) sim_replica_fini(&s.reps[i]);
    free(s.reps);
    free(s.heap);
    free(s.ttft_iv);
    free(s.w.reqs);
    sim_fifo_fini(&s.pending);
    policy_state_free(s.policy);
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
             "\"ttft_p50\":%.6f,\"ttft_p99\":%.6f,\"replica_seconds\":%.3f,"
             "\"scale_events\":%d,\"prefix_hit_rate\":%.6f}",
             r->policy ? r->policy : "unknown", r->requests, r->slo_violation_rate, r->ttft_p50_s,
             r->ttft_p99_s, r->replica_seconds, r->scale_events, r->prefix_hit_rate);
}
