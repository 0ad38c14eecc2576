/* The simulator's router model and its parts: the binary heap (plain and indexed) against a
 * brute-force reference, the shared index of the replicas' prefix caches (stored and evicted
 * blocks), and the router's picks (least load, prefix affinity within the overload slack, random
 * among ready replicas only; cinfer-router's own choice, its load bound and candidate limit, and
 * late binding's holds). */
#include "autoscaler/sim/sim_cache.h"
#include "autoscaler/sim/sim_heap.h"
#include "autoscaler/sim/sim_route.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

START_TEST(test_sim_heap_pops_in_key_then_tie_order)
{
    struct sim_heap h;
    ck_assert_int_eq(sim_heap_init(&h, 0), 0);
    uint64_t rng = 7;
    for (uint64_t i = 0; i < 1000; i++)
        ck_assert_int_eq(
            sim_heap_push(&h, (struct sim_heap_item){.key = (double)(lcg(&rng) % 50), .tie = i}),
            0);
    double key = -1;
    uint64_t tie = 0;
    for (int i = 0; i < 1000; i++) {
        struct sim_heap_item it = sim_heap_pop(&h);
        ck_assert(it.key > key || (it.key == key && it.tie > tie));
        key = it.key;
        tie = it.tie;
    }
    ck_assert_ptr_null(sim_heap_top(&h));
    sim_heap_fini(&h);
}
END_TEST

START_TEST(test_sim_heap_indexed_set_remove_match_reference)
{
    enum { N = 64 };
    struct sim_heap h;
    ck_assert_int_eq(sim_heap_init(&h, N), 0);
    double ref[N];
    bool in[N] = {false};
    uint64_t rng = 11;
    int bad = 0;
    for (int step = 0; step < 5000; step++) {
        uint32_t id = (uint32_t)(lcg(&rng) % N);
        if (lcg(&rng) % 4 == 0) {
            sim_heap_remove(&h, id);
            in[id] = false;
        } else {
            ref[id] = (double)(lcg(&rng) % 100);
            in[id] = true;
            ck_assert_int_eq(
                sim_heap_set(&h, (struct sim_heap_item){.key = ref[id], .tie = id, .id = id}), 0);
        }
        /* The top is the least (key, id) of the reference; every member is found by id. */
        int best = -1;
        size_t n = 0;
        for (int i = 0; i < N; i++) {
            const struct sim_heap_item *it = sim_heap_get(&h, (uint32_t)i);
            if (!in[i]) {
                bad += it != NULL;
                continue;
            }
            n++;
            bad += !it || it->key != ref[i];
            if (best < 0 || ref[i] < ref[best]) best = i;
        }
        bad += h.n != n;
        bad += best < 0 ? sim_heap_top(&h) != NULL : sim_heap_top(&h)->id != (uint32_t)best;
    }
    ck_assert_int_eq(bad, 0);
    sim_heap_fini(&h);
}
END_TEST

/* Holders of `key` in the index, as a bit set of slots. */
static unsigned holders(const struct sim_cache_index *ix, uint64_t key)
{
    unsigned set = 0;
    for (int64_t it = sim_cache_index_first(ix, key); it >= 0; it = sim_cache_index_next(ix, it))
        set |= 1u << SIM_CACHE_SLOT(it);
    return set;
}

START_TEST(test_sim_cache_index_follows_stores_and_evictions)
{
    struct sim_cache_index ix;
    ck_assert_int_eq(sim_cache_index_init(&ix, 10, 4), 0);
    struct sim_cache a, b;
    ck_assert_int_eq(sim_cache_init(&a, 3, &ix, 1), 0);
    ck_assert_int_eq(sim_cache_init(&b, 3, &ix, 2), 0);
    uint64_t p[] = {0, 1, 2}, q[] = {0, 3};
    sim_cache_insert(&a, p, 3);
    sim_cache_insert(&b, q, 2);
    ck_assert_uint_eq(holders(&ix, 0), (1u << 1) | (1u << 2));
    ck_assert_uint_eq(holders(&ix, 2), 1u << 1);
    ck_assert_uint_eq(holders(&ix, 3), 1u << 2);
    uint64_t r[] = {4, 5};
    sim_cache_insert(&a, r, 2); /* evicts 2 and 1, a's least recently used blocks */
    ck_assert_uint_eq(holders(&ix, 2), 0);
    ck_assert_uint_eq(holders(&ix, 1), 0);
    ck_assert_uint_eq(holders(&ix, 4), 1u << 1);
    ck_assert_uint_eq(holders(&ix, 0), (1u << 1) | (1u << 2));
    sim_cache_fini(&a); /* a replica gone: its blocks leave the index */
    ck_assert_uint_eq(holders(&ix, 0), 1u << 2);
    ck_assert_uint_eq(holders(&ix, 4), 0);
    ck_assert_int_eq(sim_cache_init(&a, 3, &ix, 1), 0); /* the slot reused */
    ck_assert_uint_eq(holders(&ix, 0), 1u << 2);
    sim_cache_fini(&b);
    ck_assert_uint_eq(holders(&ix, 0), 0);
    ck_assert_int_eq(sim_cache_init(&b, 3, &ix, 9), ERR_RANGE); /* no such slot */
    sim_cache_fini(&b);
    sim_cache_fini(&a);
    sim_cache_index_fini(&ix);
}
END_TEST

/* A trace with four requests whose hashes are [10, 11], [10, 11], [10, 12], [20]. */
static struct trace *small_trace(void)
{
    const char *s =
        "{\"timestamp\":0,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[10,11]}\n"
        "{\"timestamp\":1,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[10,11]}\n"
        "{\"timestamp\":2,\"input_length\":1024,\"output_length\":1,\"hash_ids\":[10,12]}\n"
        "{\"timestamp\":3,\"input_length\":512,\"output_length\":1,\"hash_ids\":[20]}\n";
    struct trace *tr = NULL;
    char err[128];
    ck_assert_int_eq(trace_parse(s, strlen(s), TRACE_MOONCAKE, &tr, err, sizeof(err)), 0);
    return tr;
}

struct fleet {
    struct sim_config cfg;
    struct sim_router rt;
    struct sim_world w;
    struct sim_replica reps[3];
    struct sim_req reqs[4];
};

static void fleet_init(struct fleet *f, const struct trace *tr, enum sim_routing mode)
{
    memset(f, 0, sizeof(*f));
    sim_config_defaults(&f->cfg, POLICY_STATIC);
    f->cfg.routing = mode;
    ck_assert_int_eq(sim_router_init(&f->rt, &f->cfg, tr, 3), 0);
    f->w.m = &f->cfg.model;
    f->w.reqs = f->reqs;
    f->w.hashes = f->rt.keys;
    f->w.block_tokens = TRACE_BLOCK_TOKENS;
    f->w.cache_index = &f->rt.index;
    for (size_t i = 0; i < tr->n; i++)
        f->reqs[i] = (struct sim_req){.prompt = tr->reqs[i].prompt_tokens,
                                      .output = tr->reqs[i].output_tokens,
                                      .hash_off = tr->reqs[i].hash_off,
                                      .n_hash = tr->reqs[i].n_hash,
                                      .replica = -1};
    for (uint32_t i = 0; i < 3; i++) {
        ck_assert_int_eq(sim_replica_init(&f->reps[i], &f->w, i, 0, 0), 0);
        ck_assert_int_eq(sim_router_update(&f->rt, i, &f->reps[i]), 0);
    }
}

static void fleet_fini(struct fleet *f)
{
    for (int i = 0; i < 3; i++) sim_replica_fini(&f->reps[i]);
    sim_router_fini(&f->rt);
}

/* Queues `prompt` tokens of waiting work on replica i (a request that is never admitted: the
 * replica's KV is full) and refreshes its load at the router. */
static void load(struct fleet *f, uint32_t i, double prompt)
{
    f->reps[i].waiting_prompt += prompt;
    ck_assert_int_eq(sim_router_update(&f->rt, i, &f->reps[i]), 0);
}

START_TEST(test_sim_router_least_prefill_and_affinity_slack)
{
    struct trace *tr = small_trace();
    struct fleet f;
    fleet_init(&f, tr, SIM_ROUTE_LEAST_PREFILL);
    /* Equal loads: the lowest slot. */
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 0);
    load(&f, 0, 4000);
    load(&f, 1, 100);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 2);
    /* Replica 1 caches [10, 11]: request 1 goes there (within the slack), request 2 ([10, 12],
     * one block of two in common = half) too, request 3 ([20]) to the least loaded. */
    sim_cache_insert(&f.reps[1].cache, f.w.hashes + f.reqs[0].hash_off, 2);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 1);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[2], f.reps), 1);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[3], f.reps), 2);
    /* Overloaded beyond half a batch of 64-token prefills plus the prompt: least loaded. */
    load(&f, 1, 64.0 * 8 + 1024 + 1);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 2);
    /* Not ready: never picked, not even for affinity. */
    load(&f, 1, -(64.0 * 8 + 1024 + 1));
    ck_assert_int_eq(sim_router_update(&f.rt, 1, NULL), 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 2);
    ck_assert_int_eq(sim_router_update(&f.rt, 2, NULL), 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 0);
    ck_assert_int_eq(sim_router_update(&f.rt, 0, NULL), 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), -1);
    fleet_fini(&f);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_router_longest_prefix_wins_then_least_load)
{
    struct trace *tr = small_trace();
    struct fleet f;
    fleet_init(&f, tr, SIM_ROUTE_LEAST_PREFILL);
    const uint64_t *h0 = f.w.hashes + f.reqs[0].hash_off;
    sim_cache_insert(&f.reps[0].cache, h0, 1); /* [10] */
    sim_cache_insert(&f.reps[2].cache, h0, 2); /* [10, 11] */
    load(&f, 2, 300);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 2); /* 2 blocks beat 1 */
    sim_cache_insert(&f.reps[1].cache, h0, 2);
    load(&f, 1, 200);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 1); /* equal match: less load */
    fleet_fini(&f);
    trace_free(tr);
}
END_TEST

START_TEST(test_sim_router_random_picks_only_ready)
{
    struct trace *tr = small_trace();
    struct fleet f;
    fleet_init(&f, tr, SIM_ROUTE_RANDOM);
    ck_assert_int_eq(sim_router_update(&f.rt, 1, NULL), 0);
    int seen[3] = {0};
    for (int i = 0; i < 300; i++) seen[sim_router_pick(&f.rt, &f.reqs[0], f.reps)]++;
    ck_assert_int_eq(seen[1], 0);
    ck_assert_int_gt(seen[0], 100);
    ck_assert_int_gt(seen[2], 100);
    fleet_fini(&f);
    trace_free(tr);
}
END_TEST

/* Puts `n` copies of request `req` in replica i's queue, never admitted here (no step): its
 * requests in flight and its requests without a first token both grow by n. */
static void queue(struct fleet *f, uint32_t i, int n, uint32_t req)
{
    for (int k = 0; k < n; k++) ck_assert_int_eq(sim_replica_enqueue(&f->reps[i], &f->w, req), 0);
    ck_assert_int_eq(sim_router_update(&f->rt, i, &f->reps[i]), 0);
}

/* cinfer-router's choice (router_policy_pick) on hand-computed cases: cost = uncached prompt
 * tokens + 0.5 x queued prefill tokens + 64 x requests in flight, within the load bound max(4,
 * ceil(1.25 x (total + 1) / n)). First with --prefill-weight 0 (request counts only), then as
 * deployed. Binding at arrival: a busy replica still gets the request when it is the only one
 * ready. */
START_TEST(test_sim_router_router_mode_cost_and_bound)
{
    struct trace *tr = small_trace();
    struct fleet f;
    fleet_init(&f, tr, SIM_ROUTE_ROUTER);
    ck_assert(f.rt.pol.prefill_weight == 0.5); /* the chart's default */
    ck_assert_int_eq(sim_router_update(&f.rt, 2, NULL), 0);
    /* Replica 0 with two 512-token prompts queued, replica 1 idle: 512 cached tokens on 0 do not
     * make up for queueing behind 1024 (512 + 0.5 x 1024 + 128 > 1024). */
    queue(&f, 0, 2, 3);
    sim_cache_insert(&f.reps[0].cache, f.w.hashes + f.reqs[0].hash_off, 2);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 1);
    /* Replica 1 with a 1024-token prompt queued: now the cache wins (1152 < 1024 + 512 + 64). */
    queue(&f, 1, 1, 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 0);
    fleet_fini(&f);

    fleet_init(&f, tr, SIM_ROUTE_ROUTER);
    f.rt.pol.prefill_weight = 0;
    ck_assert_int_eq(sim_router_update(&f.rt, 2, NULL), 0); /* replica 2 is starting */
    queue(&f, 0, 2, 3);
    /* No cache anywhere: 1024 + 128 against 1024: the idle replica. */
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 1);
    /* Replica 0 holds [10, 11]: request 1 (1024 tokens, two blocks) may reuse the first only
     * (the block holding the last token is always computed): 512 + 128 = 640 < 1024. */
    sim_cache_insert(&f.reps[0].cache, f.w.hashes + f.reqs[0].hash_off, 2);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 0);
    /* Request 3 ([20], 512 tokens) shares nothing: the idle replica. */
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[3], f.reps), 1);
    /* At 4 in flight replica 0 would carry 5 > the bound (max(4, ceil(1.25 x 5 / 2)) = 4): the
     * spill goes to replica 1 although 512 + 256 < 1024. */
    queue(&f, 0, 2, 3);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 1);
    /* Replica 1 not ready either: the busy replica 0 gets it (bound at arrival; nothing held). */
    ck_assert_int_eq(sim_router_update(&f.rt, 1, NULL), 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), 0);
    ck_assert_int_eq(sim_router_update(&f.rt, 0, NULL), 0);
    ck_assert_int_eq(sim_router_pick(&f.rt, &f.reqs[1], f.reps), SIM_ROUTER_NONE_READY);
    fleet_fini(&f);
    trace_free(tr);
}
END_TEST

/* Late binding: a replica with late_cap (1) requests before their first token takes no more; with
 * every ready replica so, the request is held (SIM_ROUTER_ALL_FULL) until one has room or a new
 * one is ready; among those with room the choice is cinfer-router's. */
START_TEST(test_sim_router_late_holds_until_room)
{
    static const struct {
        int queued[3]; /* requests waiting at each replica */
        bool ready[3];
        int want;
    } cases[] = {
        {{1, 1, 1}, {true, true, true}, SIM_ROUTER_ALL_FULL},
        {{1, 0, 1}, {true, true, true}, 1},
        {{1, 1, 0}, {true, true, false}, SIM_ROUTER_ALL_FULL}, /* the idle one is starting */
        {{1, 1, 0}, {true, true, true}, 2},                    /* ... and now it is ready */
        {{0, 0, 0}, {false, false, false}, SIM_ROUTER_NONE_READY},
        {{0, 3, 0}, {false, true, false}, SIM_ROUTER_ALL_FULL},
    };
    struct trace *tr = small_trace();
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct fleet f;
        fleet_init(&f, tr, SIM_ROUTE_ROUTER_LATE);
        ck_assert_int_eq(f.rt.late_cap, 1);
        for (uint32_t i = 0; i < 3; i++) {
            queue(&f, i, cases[k].queued[i], 3);
            if (!cases[k].ready[i]) ck_assert_int_eq(sim_router_update(&f.rt, i, NULL), 0);
        }
        ck_assert_msg(sim_router_pick(&f.rt, &f.reqs[0], f.reps) == cases[k].want, "case %zu", k);
        fleet_fini(&f);
    }
    /* The same fleets bound at arrival never hold while a replica is ready. */
    struct fleet f;
    fleet_init(&f, tr, SIM_ROUTE_ROUTER);
    for (uint32_t i = 0; i < 3; i++) queue(&f, i, 1, 3);
    ck_assert_int_ge(sim_router_pick(&f.rt, &f.reqs[0], f.reps), 0);
    fleet_fini(&f);
    trace_free(tr);
}
END_TEST

/* cinfer-router scores every eligible replica (it once stopped at the first 64 in its list): with
 * 70 ready and all but one busy, the idle one wins wherever it is; among busy ones of equal
 * request counts, the one with the least queued prefill. */
START_TEST(test_sim_router_router_mode_sees_every_replica)
{
    enum { N = 70 };
    struct trace *tr = small_trace();
    struct sim_config cfg;
    sim_config_defaults(&cfg, POLICY_STATIC);
    struct sim_router rt;
    ck_assert_int_eq(sim_router_init(&rt, &cfg, tr, N), 0);
    struct sim_world w = {.m = &cfg.model, .hashes = rt.keys, .block_tokens = TRACE_BLOCK_TOKENS};
    struct sim_req reqs[2] = {{.prompt = 512, .output = 1, .replica = -1},
                              {.prompt = 8192, .output = 1, .replica = -1}};
    w.reqs = reqs;
    struct sim_replica *reps = calloc(N, sizeof(*reps));
    ck_assert_ptr_nonnull(reps);
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_int_eq(sim_replica_init(&reps[i], &w, i, 0, 0), 0);
        for (int k = 0; i != N - 2 && k < 2; k++)
            ck_assert_int_eq(sim_replica_enqueue(&reps[i], &w, i == N - 1 ? 0 : 1), 0);
        ck_assert_int_eq(sim_router_update(&rt, i, &reps[i]), 0);
    }
    for (int k = 0; k < 20; k++) ck_assert_int_eq(sim_router_pick(&rt, &reqs[0], reps), N - 2);
    ck_assert_int_eq(sim_router_update(&rt, N - 2, NULL), 0); /* the idle one leaves */
    /* Two requests each everywhere: the last replica's are 512-token prompts, the others' 8k. */
    ck_assert_int_eq(sim_router_pick(&rt, &reqs[0], reps), N - 1);
    for (uint32_t i = 0; i < N; i++) sim_replica_fini(&reps[i]);
    free(reps);
    sim_router_fini(&rt);
    trace_free(tr);
}
END_TEST

Suite *sim_route_suite(void)
{
    Suite *s = suite_create("sim_route");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sim_heap_pops_in_key_then_tie_order);
    tcase_add_test(tc, test_sim_heap_indexed_set_remove_match_reference);
    tcase_add_test(tc, test_sim_cache_index_follows_stores_and_evictions);
    tcase_add_test(tc, test_sim_router_least_prefill_and_affinity_slack);
    tcase_add_test(tc, test_sim_router_longest_prefix_wins_then_least_load);
    tcase_add_test(tc, test_sim_router_random_picks_only_ready);
    tcase_add_test(tc, test_sim_router_router_mode_cost_and_bound);
    tcase_add_test(tc, test_sim_router_late_holds_until_room);
    tcase_add_test(tc, test_sim_router_router_mode_sees_every_replica);
    suite_add_tcase(s, tc);
    return s;
}
