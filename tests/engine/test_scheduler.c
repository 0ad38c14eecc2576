/* The serving scheduler on the real stories260K model (skipped without ../shared): continuous
 * batching gives each sequence exactly the greedy tokens it gets alone; chunked and unchunked
 * prefill, preemption under a tiny KV pool, the prefix cache, cancellation, priorities, stop strings
 * and length limits; prompt log-probabilities (echo) equal to the generated tokens' and reported
 * once through preemption; and no KV block outlives its sequence. */
#include "engine/sched/scheduler.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/text/tokenizer.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_schema.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_REQ   8
#define MAX_GEN 40
#define BS      16

struct out {
    int32_t tokens[1024];
    int n_tokens;
    char text[2048];
    size_t len;
    enum sched_finish finish;
    int n_cached;
    int events_after_finish;
    bool admitted;
    /* With sampling.logprobs: each generated token's logprob and first alternatives; with
     * prompt_logprobs the prompt events, by position (each must come once, in order). */
    float lp[1024];
    int32_t top[1024][3];
    int n_prompt_ev;
    int32_t ptok[1024];
    float plp[1024];
    int32_t ptop[1024][3];
    double cum_logprob;
    int n_sampled;
};

struct env {
    struct model *m;
    struct tokenizer *tok;
    struct kv_cache *kv;
    struct sched *s;
    struct out out[N_REQ];
};

static void on_event(void *ctx, const struct sched_event *ev)
{
    struct out *o = ev->ud;
    (void)ctx;
    if (o->finish != SCHED_FINISH_NONE) o->events_after_finish++;
    if (ev->prompt_token) {
        ck_assert(ev->sample && !ev->has_token && ev->len == 0 && ev->finish == SCHED_FINISH_NONE);
        ck_assert_int_eq(ev->prompt_pos, o->n_prompt_ev + 1); /* once each, in order */
        ck_assert_int_eq(o->n_tokens, 0);                     /* before any generated token */
        ck_assert_int_lt(ev->prompt_pos, 1024);
        o->ptok[ev->prompt_pos] = ev->token;
        o->plp[ev->prompt_pos] = ev->sample->logprob;
        for (int k = 0; k < 3 && k < ev->sample->n_top; k++)
            o->ptop[ev->prompt_pos][k] = ev->sample->top[k].token;
        o->n_prompt_ev++;
        return;
    }
    o->cum_logprob = ev->cum_logprob;
    o->n_sampled = ev->n_sampled;
    if (!ev->has_token && ev->finish == SCHED_FINISH_NONE) {
        o->admitted = true;
        return;
    }
    if (ev->has_token) {
        ck_assert_int_lt(o->n_tokens, 1024);
        if (ev->sample) {
            o->lp[o->n_tokens] = ev->sample->logprob;
            for (int k = 0; k < 3 && k < ev->sample->n_top; k++)
                o->top[o->n_tokens][k] = ev->sample->top[k].token;
        }
        o->tokens[o->n_tokens++] = ev->token;
        ck_assert_int_eq(ev->n_generated, o->n_tokens);
    }
    ck_assert_uint_lt(o->len + ev->len, sizeof(o->text));
    memcpy(o->text + o->len, ev->text, ev->len);
    o->len += ev->len;
    o->finish = ev->finish;
    o->n_cached = ev->n_cached;
}

/* Opens the model and a KV pool of n_blocks; false (skip) without ../shared. */
static bool env_open(struct env *e, int n_blocks, int max_seqs, int max_ctx)
{
    memset(e, 0, sizeof(*e));
    const char *path = test_shared_path("models/tinyllamas/stories260K.gguf");
    if (!path) return false;
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 2;
    char err[256];
    ck_assert_msg(model_load(path, &o, &e->m, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(tokenizer_load(model_gguf(e->m), &e->tok, err, sizeof(err)), 0);
    struct kv_cache_config kc = {n_blocks, BS, max_seqs, (max_ctx + BS - 1) / BS};
    ck_assert_int_eq(kv_cache_new(&kc, &e->kv), 0);
    ck_assert_int_eq(model_kv_init(e->m, e->kv), 0);
    return true;
}

/* Masks after the forward pass (the reference runs of the grammar test) instead of during it. */
static bool env_inline_masks;

static void env_sched(struct env *e, int max_seqs, int max_tokens, bool chunked, bool prefix,
                      int max_ctx)
{
    struct sched_config c = {.max_num_seqs = max_seqs,
                             .max_num_batched_tokens = max_tokens,
                             .chunked_prefill = chunked,
                             .prefix_caching = prefix,
                             .max_context = max_ctx,
                             .grammar_inline_masks = env_inline_masks};
    ck_assert_int_eq(sched_new(&c, e->m, e->kv, e->tok, on_event, e, &e->s), 0);
    memset(e->out, 0, sizeof(e->out));
}

static void env_close(struct env *e)
{
    sched_free(e->s);
    e->s = NULL;
    if (e->kv) ck_assert_int_eq(kv_cache_blocks_used(e->kv), 0);
    kv_cache_free(e->kv);
    tokenizer_free(e->tok);
    model_free(e->m);
}

/* Deterministic prompt r: BOS then 5..60 ids. */
static int make_prompt(int r, int32_t *ids)
{
    int n = 6 + (r * 13) % 55;
    unsigned x = 2463534242u + (unsigned)r * 7919u;
    ids[0] = 1;
    for (int i = 1; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = (int32_t)(3 + x % 500);
    }
    return n;
}

static struct sched_seq *add(struct env *e, int r, const int32_t *ids, int n, int max_tokens,
                             int priority)
{
    struct sched_request q = {.prompt = ids,
                              .n_prompt = n,
                              .max_tokens = max_tokens,
                              .ignore_eos = true,
                              .priority = priority,
                              .ud = &e->out[r]};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    struct sched_seq *seq = NULL;
    ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
    return seq;
}

static void run_to_idle(struct env *e)
{
    for (int i = 0; i < 10000 && !sched_idle(e->s); i++) ck_assert_int_eq(sched_step(e->s), 0);
    ck_assert(sched_idle(e->s));
}

/* The reference: each request alone, in its own scheduler. */
static void reference(struct env *e, struct out *ref, int n_req, int max_ctx)
{
    int32_t ids[64];
    for (int r = 0; r < n_req; r++) {
        env_sched(e, 1, 2048, true, false, max_ctx);
        int n = make_prompt(r, ids);
        add(e, r, ids, n, MAX_GEN - r, 0);
        run_to_idle(e);
        ref[r] = e->out[r];
        ck_assert_int_eq(ref[r].finish, SCHED_FINISH_LENGTH);
        ck_assert_int_eq(ref[r].n_tokens, MAX_GEN - r);
        sched_free(e->s);
        e->s = NULL;
    }
}

static void expect_same(const struct env *e, const struct out *ref, int n_req)
{
    for (int r = 0; r < n_req; r++) {
        ck_assert_int_eq(e->out[r].finish, SCHED_FINISH_LENGTH);
        ck_assert_int_eq(e->out[r].n_tokens, ref[r].n_tokens);
        ck_assert_msg(
            memcmp(e->out[r].tokens, ref[r].tokens, (size_t)ref[r].n_tokens * sizeof(int32_t)) == 0,
            "request %d: tokens differ from running alone", r);
        ck_assert_int_eq((int)e->out[r].len, (int)ref[r].len);
        ck_assert(memcmp(e->out[r].text, ref[r].text, ref[r].len) == 0);
        ck_assert_int_eq(e->out[r].events_after_finish, 0);
        ck_assert(e->out[r].admitted);
    }
}

/* Runs all requests together under `cfg` and compares with the reference. False when the check
 * is skipped (no shared model): the caller returns at once. */
static bool batched_equals_alone(int n_blocks, int max_seqs, int max_tokens, bool chunked,
                                 bool prefix, uint64_t *preemptions)
{
    struct env e;
    if (!env_open(&e, n_blocks, max_seqs > 1 ? max_seqs : 1, 128)) return false;
    struct out ref[N_REQ];
    reference(&e, ref, N_REQ, 128);
    env_sched(&e, max_seqs, max_tokens, chunked, prefix, 128);
    int32_t ids[N_REQ][64];
    for (int r = 0; r < N_REQ; r++) add(&e, r, ids[r], make_prompt(r, ids[r]), MAX_GEN - r, 0);
    run_to_idle(&e);
    expect_same(&e, ref, N_REQ);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_int_eq(st.running, 0);
    ck_assert_int_eq(st.waiting, 0);
    ck_assert(st.kv_usage == 0.0);
    ck_assert_uint_eq(st.generation_tokens, (uint64_t)(N_REQ * MAX_GEN - N_REQ * (N_REQ - 1) / 2));
    if (preemptions) *preemptions = st.preemptions;
    env_close(&e);
    return true;
}

START_TEST(test_sched_batched_equals_alone)
{
    uint64_t pre = 0;
    if (!batched_equals_alone(N_REQ * 8, N_REQ, 2048, true, false, &pre)) return;
    ck_assert_uint_eq(pre, 0);
}
END_TEST

START_TEST(test_sched_chunked_prefill_equals_alone)
{
    /* 7 tokens per step: prompts are split across steps and mixed with decodes. */
    batched_equals_alone(N_REQ * 8, N_REQ, 7, true, false, NULL);
}
END_TEST

START_TEST(test_sched_unchunked_prefill_equals_alone)
{
    batched_equals_alone(N_REQ * 8, N_REQ, 16, false, false, NULL);
}
END_TEST

START_TEST(test_sched_preemption_equals_alone)
{
    /* 12 blocks (192 tokens) for 8 sequences of up to 100 tokens: the newest get preempted and
     * recomputed, and still produce exactly their tokens. */
    uint64_t pre = 0;
    if (!batched_equals_alone(12, N_REQ, 2048, true, false, &pre)) return;
    ck_assert_uint_gt(pre, 0);
}
END_TEST

START_TEST(test_sched_preemption_with_prefix_cache)
{
    uint64_t pre = 0;
    if (!batched_equals_alone(12, N_REQ, 64, true, true, &pre)) return;
    ck_assert_uint_gt(pre, 0);
}
END_TEST

START_TEST(test_sched_unchunked_long_prompt_is_not_starved)
{
    /* Without chunking, a prompt larger than the step budget runs alone in a step; decodes must
     * not keep it waiting until they all finish. */
    struct env e;
    if (!env_open(&e, 64, 4, 256)) return;
    env_sched(&e, 4, 8, false, false, 256);
    int32_t ids[3][64];
    add(&e, 0, ids[0], make_prompt(0, ids[0]), 30, 0); /* 6-token prompts: fit the budget */
    add(&e, 1, ids[1], make_prompt(0, ids[1]), 30, 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(sched_step(e.s), 0);
    add(&e, 2, ids[2], make_prompt(4, ids[2]), 5, 0); /* 58 tokens > 8 */
    ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert(e.out[2].admitted);
    ck_assert_int_eq(e.out[2].n_tokens, 1); /* its whole prompt ran in that step */
    ck_assert_int_lt(e.out[0].n_tokens, 30);
    run_to_idle(&e);
    for (int r = 0; r < 3; r++) ck_assert_int_eq(e.out[r].finish, SCHED_FINISH_LENGTH);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_stats_prefill_tokens_waiting)
{
    /* One sequence at a time, 16-token chunks: the gauge counts every queued prompt whole and the
     * unprefilled rest of the running one, and stops counting a sequence once it decodes. */
    struct env e;
    if (!env_open(&e, 64, 1, 256)) return;
    env_sched(&e, 1, 16, true, false, 256);
    int32_t ids[3][64];
    int n[3];
    for (int r = 0; r < 3; r++) n[r] = make_prompt(r + 3, ids[r]); /* 45, 58, 16 tokens */
    ck_assert(n[0] > 32 && n[1] > 16);
    for (int r = 0; r < 3; r++) add(&e, r, ids[r], n[r], 4, 0);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_int_eq(st.prefill_tokens_waiting, n[0] + n[1] + n[2]);
    ck_assert_int_eq(sched_step(e.s), 0); /* the first 16 tokens of prompt 0 */
    sched_stats(e.s, &st);
    ck_assert_int_eq(st.prefill_tokens_waiting, n[0] - 16 + n[1] + n[2]);
    while (e.out[0].n_tokens == 0) ck_assert_int_eq(sched_step(e.s), 0);
    sched_stats(e.s, &st); /* prompt 0 prefilled: it decodes, the others still wait */
    ck_assert_int_eq(st.prefill_tokens_waiting, n[1] + n[2]);
    run_to_idle(&e);
    sched_stats(e.s, &st);
    ck_assert_int_eq(st.prefill_tokens_waiting, 0);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_max_num_seqs_one)
{
    batched_equals_alone(N_REQ * 8, 1, 2048, true, true, NULL);
}
END_TEST

START_TEST(test_sched_prefix_cache_reuses_blocks)
{
    struct env e;
    if (!env_open(&e, 64, 4, 256)) return;
    int32_t ids[80];
    ids[0] = 1;
    for (int i = 1; i < 80; i++) ids[i] = 3 + (i * 37) % 500;
    /* Reference without the cache. */
    env_sched(&e, 4, 2048, true, false, 256);
    add(&e, 0, ids, 80, 10, 0);
    run_to_idle(&e);
    struct out ref = e.out[0];
    sched_free(e.s);
    e.s = NULL;

    env_sched(&e, 4, 2048, true, true, 256);
    add(&e, 0, ids, 80, 10, 0);
    run_to_idle(&e);
    ck_assert_int_eq(e.out[0].n_cached, 0);
    add(&e, 1, ids, 80, 10, 0); /* the same prompt: 4 full blocks cached (never the last token) */
    run_to_idle(&e);
    ck_assert_int_eq(e.out[1].n_cached, 64);
    int32_t other[80];
    memcpy(other, ids, sizeof(other));
    other[40] = 7; /* diverges inside block 2: blocks 0 and 1 are shared */
    add(&e, 2, other, 80, 10, 0);
    run_to_idle(&e);
    ck_assert_int_eq(e.out[2].n_cached, 32);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(e.out[r].n_tokens, ref.n_tokens);
        ck_assert(memcmp(e.out[r].tokens, ref.tokens, (size_t)ref.n_tokens * 4) == 0);
    }
    struct sched_stats st;
    sched_stats(&*e.s, &st);
    ck_assert_uint_eq(st.prefix_queries, 240);
    ck_assert_uint_eq(st.prefix_hits, 96);
    ck_assert(st.kv_usage == 0.0); /* cached blocks are not "in use" */
    ck_assert_int_gt(kv_cache_blocks_used(e.kv), 0);
    env_close(&e); /* sched_free releases the cache: every block free */
}
END_TEST

START_TEST(test_sched_cache_salt_isolates)
{
    struct env e;
    if (!env_open(&e, 64, 4, 256)) return;
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i ? 3 + i : 1;
    env_sched(&e, 4, 2048, true, true, 256);
    const char *salts[3] = {"tenant-a", "tenant-b", "tenant-a"};
    for (int r = 0; r < 3; r++) {
        struct sched_request q = {.prompt = ids,
                                  .n_prompt = 40,
                                  .max_tokens = 2,
                                  .cache_salt = salts[r],
                                  .ud = &e.out[r]};
        sampler_params_default(&q.sampling);
        q.sampling.temperature = 0;
        struct sched_seq *seq;
        ck_assert_int_eq(sched_add(e.s, &q, &seq), 0);
        run_to_idle(&e);
    }
    ck_assert_int_eq(e.out[0].n_cached, 0);
    ck_assert_int_eq(e.out[1].n_cached, 0);
    ck_assert_int_eq(e.out[2].n_cached, 32);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_cancel_frees_blocks)
{
    struct env e;
    if (!env_open(&e, 64, 4, 256)) return;
    env_sched(&e, 4, 2048, true, false, 256);
    int32_t ids[N_REQ][64];
    struct sched_seq *a = add(&e, 0, ids[0], make_prompt(0, ids[0]), 30, 0);
    add(&e, 1, ids[1], make_prompt(1, ids[1]), 30, 0);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_eq(e.out[0].n_tokens, 5);
    int used = kv_cache_blocks_used(e.kv);
    sched_cancel(e.s, a, SCHED_FINISH_ABORT);
    sched_cancel(e.s, a, SCHED_FINISH_LENGTH); /* the first reason wins */
    ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_eq(e.out[0].finish, SCHED_FINISH_ABORT);
    ck_assert_int_eq(e.out[0].n_tokens, 5);
    ck_assert_int_lt(kv_cache_blocks_used(e.kv), used);
    run_to_idle(&e);
    ck_assert_int_eq(e.out[1].finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(e.out[0].events_after_finish, 0);
    /* A waiting sequence can be cancelled before it ever runs. */
    struct sched_seq *w = add(&e, 2, ids[2], make_prompt(2, ids[2]), 5, 0);
    sched_cancel(e.s, w, SCHED_FINISH_ABORT);
    ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_eq(e.out[2].finish, SCHED_FINISH_ABORT);
    ck_assert(!e.out[2].admitted);
    ck_assert(sched_idle(e.s));
    /* A deadline ends a running sequence with "length" and keeps its text. */
    struct sched_seq *d = add(&e, 3, ids[3], make_prompt(3, ids[3]), 30, 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(sched_step(e.s), 0);
    sched_cancel(e.s, d, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_eq(e.out[3].finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(e.out[3].n_tokens, 4);
    ck_assert(sched_idle(e.s));
    env_close(&e);
}
END_TEST

START_TEST(test_sched_priority_orders_waiting)
{
    struct env e;
    if (!env_open(&e, 64, 1, 256)) return;
    env_sched(&e, 1, 2048, true, false, 256);
    int32_t ids[4][64];
    int order[4], n_order = 0;
    int prio[4] = {5, 0, -3, 0}; /* expected run order: 2, 1, 3, 0 (FCFS within 0) */
    for (int r = 0; r < 4; r++) add(&e, r, ids[r], make_prompt(r, ids[r]), 2, prio[r]);
    bool seen[4] = {false};
    for (int i = 0; i < 100 && !sched_idle(e.s); i++) {
        ck_assert_int_eq(sched_step(e.s), 0);
        for (int r = 0; r < 4; r++)
            if (e.out[r].admitted && !seen[r]) seen[r] = true, order[n_order++] = r;
    }
    ck_assert_int_eq(n_order, 4);
    ck_assert_int_eq(order[0], 2);
    ck_assert_int_eq(order[1], 1);
    ck_assert_int_eq(order[2], 3);
    ck_assert_int_eq(order[3], 0);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_stop_string_and_eos)
{
    struct env e;
    if (!env_open(&e, 64, 2, 256)) return;
    int32_t *ids = NULL;
    size_t n = 0;
    const char *prompt = "Once upon a time";
    ck_assert_int_eq(tokenizer_encode(e.tok, prompt, strlen(prompt), true, true, &ids, &n), 0);
    /* Greedy continuation without stops first. */
    env_sched(&e, 2, 2048, true, false, 256);
    add(&e, 0, ids, (int)n, 30, 0);
    run_to_idle(&e);
    struct out full = e.out[0];
    ck_assert_uint_gt(full.len, 10);
    /* Stop at a word from the middle of it: the text ends right before it. */
    const char *mid = full.text + full.len / 2;
    char stop[8];
    memcpy(stop, mid, 4);
    stop[4] = '\0';
    const char *stops[1] = {stop};
    struct sched_request q = {.prompt = ids,
                              .n_prompt = (int)n,
                              .max_tokens = 30,
                              .stops = stops,
                              .n_stops = 1,
                              .ud = &e.out[1]};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    struct sched_seq *seq;
    ck_assert_int_eq(sched_add(e.s, &q, &seq), 0);
    run_to_idle(&e);
    const char *first = strstr(full.text, stop);
    ck_assert_ptr_nonnull(first);
    ck_assert_int_eq(e.out[1].finish, SCHED_FINISH_STOP);
    ck_assert_int_eq((int)e.out[1].len, (int)(first - full.text));
    ck_assert(memcmp(e.out[1].text, full.text, e.out[1].len) == 0);
    /* Without ignore_eos the model's own end (stories end with EOS) finishes with "stop". */
    struct sched_request q2 = {
        .prompt = ids, .n_prompt = (int)n, .max_tokens = -1, .ud = &e.out[2]};
    sampler_params_default(&q2.sampling);
    q2.sampling.temperature = 0;
    ck_assert_int_eq(sched_add(e.s, &q2, &seq), 0);
    run_to_idle(&e);
    ck_assert(e.out[2].finish == SCHED_FINISH_STOP || e.out[2].finish == SCHED_FINISH_LENGTH);
    if (e.out[2].finish == SCHED_FINISH_LENGTH)
        ck_assert_int_eq(e.out[2].n_tokens + (int)n, 256); /* ran to the context end */
    free(ids);
    env_close(&e);
}
END_TEST

/* Constrained decoding: every sequence of a batch under a JSON schema, sampled at temperature 1,
 * ends (STOP) with text that parses and has the schema's shape, and a batch squeezed into too few
 * KV blocks (preemption and recomputation), its masks computed by the worker during the forward
 * passes, produces exactly the tokens each gets alone with masks computed after them. */
static void grammar_run(struct env *e, struct grammar *g, int n_req)
{
    static int32_t ids[N_REQ][64];
    for (int r = 0; r < n_req; r++) {
        int n = make_prompt(r, ids[r]);
        struct sched_request q = {
            .prompt = ids[r], .n_prompt = n, .max_tokens = 120, .grammar = g, .ud = &e->out[r]};
        sampler_params_default(&q.sampling);
        q.sampling.seed = 7 + (uint64_t)r;
        struct sched_seq *seq = NULL;
        ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
    }
    run_to_idle(e);
}

START_TEST(test_sched_grammar_constrains_every_token)
{
    struct env e;
    if (!env_open(&e, 12, N_REQ, 256)) return;
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_new(e.tok, &v), 0);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                         "\"maxLength\":6},\"n\":{\"type\":\"integer\"},\"ok\":{\"type\":"
                         "\"boolean\"}},\"required\":[\"name\",\"n\",\"ok\"]}";
    struct grammar *g = NULL;
    char err[256];
    ck_assert_msg(grammar_schema_compile_text(schema, strlen(schema), v, &g, err, sizeof(err)) == 0,
                  "%s", err);
    struct out ref[N_REQ];
    env_inline_masks = true;
    for (int r = 0; r < N_REQ; r++) { /* each alone, plenty of blocks */
        env_sched(&e, 1, 2048, true, false, 256);
        grammar_run(&e, g, r + 1); /* requests 0..r-1 again too: the same seeds, the same tokens */
        ref[r] = e.out[r];
        sched_free(e.s);
        e.s = NULL;
    }
    env_inline_masks = false;
    env_sched(&e, N_REQ, 2048, true, false, 256);
    grammar_run(&e, g, N_REQ);
    struct sched_stats st;
    sched_stats(e.s, &st);
    for (int r = 0; r < N_REQ; r++) {
        struct out *o = &e.out[r];
        ck_assert_int_eq(o->finish, SCHED_FINISH_STOP);
        ck_assert_int_eq(o->n_tokens, ref[r].n_tokens);
        ck_assert(memcmp(o->tokens, ref[r].tokens, (size_t)o->n_tokens * sizeof(int32_t)) == 0);
        o->text[o->len] = 0;
        json_error_t je;
        json_t *j = json_loads(o->text, 0, &je);
        ck_assert_msg(j != NULL, "request %d: not JSON: %s", r, o->text);
        ck_assert(json_is_string(json_object_get(j, "name")));
        ck_assert(json_is_integer(json_object_get(j, "n")));
        ck_assert(json_is_boolean(json_object_get(j, "ok")));
        json_decref(j);
    }
    ck_assert_uint_gt(st.preemptions, 0);
    grammar_unref(g);
    grammar_vocab_free(v);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_context_limit_and_bad_requests)
{
    struct env e;
    if (!env_open(&e, 64, 2, 64)) return;
    env_sched(&e, 2, 2048, true, false, 64);
    int32_t ids[64];
    int n = make_prompt(3, ids); /* 45 tokens */
    add(&e, 0, ids, n, -1, 0);   /* until the context (64) is full */
    run_to_idle(&e);
    ck_assert_int_eq(e.out[0].finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(e.out[0].n_tokens, 64 - n);
    struct sched_seq *seq;
    struct sched_request bad = {.prompt = ids, .n_prompt = 64, .max_tokens = 1};
    sampler_params_default(&bad.sampling);
    ck_assert_int_eq(sched_add(e.s, &bad, &seq), ERR_INVAL); /* no room for one token */
    bad.n_prompt = 0;
    ck_assert_int_eq(sched_add(e.s, &bad, &seq), ERR_INVAL);
    bad.n_prompt = 3;
    ids[1] = 512; /* outside the vocabulary */
    ck_assert_int_eq(sched_add(e.s, &bad, &seq), ERR_INVAL);
    ids[1] = 5;
    bad.max_tokens = -2;
    ck_assert_int_eq(sched_add(e.s, &bad, &seq), ERR_INVAL);
    ck_assert(sched_idle(e.s));
    env_close(&e);
}
END_TEST

/* Greedy with log-probabilities (3 alternatives); prompt_lp: report the prompt's too. */
static void add_lp(struct env *e, int r, const int32_t *ids, int n, int max_tokens, bool prompt_lp)
{
    struct sched_request q = {.prompt = ids,
                              .n_prompt = n,
                              .max_tokens = max_tokens,
                              .prompt_logprobs = prompt_lp,
                              .ignore_eos = true,
                              .ud = &e->out[r]};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    q.sampling.logprobs = true;
    q.sampling.n_logprobs = 3;
    struct sched_seq *seq = NULL;
    ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
}

/* Prompt logprobs are what generation reported for the same tokens: generate 12 tokens from P,
 * then score P + those 12 with max_tokens 0: the last 12 prompt events carry the generated
 * tokens' logprobs and alternatives. Whole prompts, 5-token chunks (prompt chunks ask for every
 * row of logits across steps) and unchunked prefill; the prefix cache holds P's blocks, which
 * must not be attached (they carry no logits). Also the best_of score: the sum of the logprobs of
 * the sampled tokens. */
START_TEST(test_sched_prompt_logprobs_equal_generation_logprobs)
{
    struct env e;
    if (!env_open(&e, 64, 4, 256)) return;
    const struct {
        int budget;
        bool chunked;
    } cfg[] = {{2048, true}, {5, true}, {16, false}};
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
        env_sched(&e, 4, cfg[c].budget, cfg[c].chunked, true, 256);
        int32_t ids[128];
        int n = make_prompt(4, ids); /* 58 tokens */
        add_lp(&e, 0, ids, n, 12, false);
        run_to_idle(&e);
        const struct out *g = &e.out[0];
        ck_assert_int_eq(g->n_tokens, 12);
        ck_assert_int_eq(g->n_prompt_ev, 0);
        ck_assert_int_eq(g->n_sampled, 12);
        double sum = 0;
        for (int k = 0; k < 12; k++) sum += g->lp[k];
        ck_assert_double_eq_tol(g->cum_logprob, sum, 1e-9);
        memcpy(ids + n, g->tokens, 12 * sizeof(int32_t));
        add_lp(&e, 1, ids, n + 12, 0, true); /* score only */
        add_lp(&e, 2, ids, n + 12, 3, true); /* score, then generate */
        run_to_idle(&e);
        for (int r = 1; r <= 2; r++) {
            const struct out *o = &e.out[r];
            ck_assert_int_eq(o->finish, SCHED_FINISH_LENGTH);
            ck_assert_int_eq(o->n_prompt_ev, n + 11); /* every position but the first */
            ck_assert_int_eq(o->n_cached, 0);
            ck_assert_int_eq(o->n_tokens, r == 1 ? 0 : 3);
            ck_assert_int_eq(o->n_sampled, r == 1 ? 0 : 3);
            for (int p = 1; p < n + 12; p++) ck_assert_int_eq(o->ptok[p], ids[p]);
            for (int k = 0; k < 12; k++) {
                ck_assert_msg(fabsf(o->plp[n + k] - g->lp[k]) < 1e-4f,
                              "config %zu, token %d: prompt logprob %g, generated %g", c, k,
                              (double)o->plp[n + k], (double)g->lp[k]);
                ck_assert(memcmp(o->ptop[n + k], g->top[k], sizeof(g->top[k])) == 0);
                ck_assert(o->plp[n + k] <= 0.0f);
            }
        }
        /* Scoring the same prompt again gives the same logprobs. */
        ck_assert(memcmp(e.out[1].plp, e.out[2].plp, sizeof(e.out[1].plp)) == 0);
        sched_free(e.s);
        e.s = NULL;
    }
    env_close(&e);
}
END_TEST

/* Two prompt-logprob sequences in a pool too small for both: the newer is preempted and
 * recomputed, and still reports each prompt position exactly once (on_event asserts the order),
 * with the values it gets alone. */
START_TEST(test_sched_prompt_logprobs_survive_preemption)
{
    struct env e;
    if (!env_open(&e, 8, 2, 256)) return;
    int32_t ids[2][128];
    int n[2];
    for (int r = 0; r < 2; r++) {
        n[r] = make_prompt(4 - r, ids[r]); /* 58 and 45 tokens */
        for (int i = n[r]; i < 70; i++) ids[r][i] = 3 + (i * 31 + r) % 500;
        n[r] = 70;
    }
    struct out alone[2];
    for (int r = 0; r < 2; r++) {
        env_sched(&e, 2, 16, true, true, 256);
        add_lp(&e, r, ids[r], n[r], 20, true);
        run_to_idle(&e);
        alone[r] = e.out[r];
        sched_free(e.s);
        e.s = NULL;
    }
    env_sched(&e, 2, 16, true, true, 256);
    for (int r = 0; r < 2; r++) add_lp(&e, r, ids[r], n[r], 20, true);
    run_to_idle(&e);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_uint_gt(st.preemptions, 0);
    for (int r = 0; r < 2; r++) {
        const struct out *o = &e.out[r];
        ck_assert_int_eq(o->n_prompt_ev, n[r] - 1);
        ck_assert_int_eq(o->n_tokens, 20);
        ck_assert(memcmp(o->tokens, alone[r].tokens, 20 * sizeof(int32_t)) == 0);
        for (int p = 1; p < n[r]; p++)
            ck_assert_msg(fabsf(o->plp[p] - alone[r].plp[p]) < 1e-4f, "request %d position %d", r,
                          p);
    }
    env_close(&e);
}
END_TEST

START_TEST(test_sched_long_output_grows)
{
    /* 700 generated tokens: the token and hash arrays grow past their first stretch (256), and
     * the prefix cache keeps chaining the blocks written after the growth. */
    struct env e;
    if (!env_open(&e, 64, 1, 1024)) return;
    env_sched(&e, 1, 2048, true, true, 1024);
    int32_t ids[64];
    int n = make_prompt(0, ids);
    add(&e, 0, ids, n, 700, 0);
    run_to_idle(&e);
    ck_assert_int_eq(e.out[0].finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(e.out[0].n_tokens, 700);
    struct out first = e.out[0];
    /* The same request again gives the same tokens. */
    add(&e, 1, ids, n, 700, 0);
    run_to_idle(&e);
    ck_assert_int_eq(e.out[1].n_tokens, 700);
    ck_assert(memcmp(e.out[1].tokens, first.tokens, 700 * sizeof(int32_t)) == 0);
    env_close(&e);
}
END_TEST

START_TEST(test_sched_stop_all_ends_everything)
{
    struct env e;
    if (!env_open(&e, 64, 2, 256)) return;
    env_sched(&e, 2, 2048, true, false, 256);
    int32_t ids[4][64];
    for (int r = 0; r < 4; r++) add(&e, r, ids[r], make_prompt(r, ids[r]), 30, 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(sched_step(e.s), 0);
    sched_stop_all(e.s, SCHED_FINISH_LENGTH);
    ck_assert(sched_idle(e.s));
    for (int r = 0; r < 4; r++) ck_assert_int_eq(e.out[r].finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(e.out[0].n_tokens, 3);
    ck_assert_int_eq(e.out[3].n_tokens, 0); /* never admitted */
    env_close(&e);
}
END_TEST

START_TEST(test_sched_bad_config)
{
    struct env e;
    if (!env_open(&e, 8, 2, 64)) return;
    struct sched_config c = {.max_num_seqs = 2,
                             .max_num_batched_tokens = 64,
                             .chunked_prefill = true,
                             .prefix_caching = true,
                             .max_context = 128}; /* context beyond the block tables */
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    c = (struct sched_config){.max_num_seqs = 4,
                              .max_num_batched_tokens = 64,
                              .chunked_prefill = true,
                              .prefix_caching = true,
                              .max_context = 64}; /* more seqs than the pool's ids */
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    c = (struct sched_config){.max_num_seqs = 2,
                              .max_num_batched_tokens = 0,
                              .chunked_prefill = true,
                              .prefix_caching = true,
                              .max_context = 64};
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    e.s = NULL;
    env_close(&e);
}
END_TEST

Suite *scheduler_suite(void)
{
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_sched_batched_equals_alone);
    tcase_add_test(tc, test_sched_stats_prefill_tokens_waiting);
    tcase_add_test(tc, test_sched_chunked_prefill_equals_alone);
    tcase_add_test(tc, test_sched_unchunked_prefill_equals_alone);
    tcase_add_test(tc, test_sched_preemption_equals_alone);
    tcase_add_test(tc, test_sched_preemption_with_prefix_cache);
    tcase_add_test(tc, test_sched_unchunked_long_prompt_is_not_starved);
    tcase_add_test(tc, test_sched_max_num_seqs_one);
    tcase_add_test(tc, test_sched_prefix_cache_reuses_blocks);
    tcase_add_test(tc, test_sched_cache_salt_isolates);
    tcase_add_test(tc, test_sched_cancel_frees_blocks);
    tcase_add_test(tc, test_sched_priority_orders_waiting);
    tcase_add_test(tc, test_sched_stop_string_and_eos);
    tcase_add_test(tc, test_sched_grammar_constrains_every_token);
    tcase_add_test(tc, test_sched_context_limit_and_bad_requests);
    tcase_add_test(tc, test_sched_long_output_grows);
    tcase_add_test(tc, test_sched_prompt_logprobs_equal_generation_logprobs);
    tcase_add_test(tc, test_sched_prompt_logprobs_survive_preemption);
    tcase_add_test(tc, test_sched_stop_all_ends_everything);
    tcase_add_test(tc, test_sched_bad_config);
    suite_add_tcase(s, tc);
    return s;
}
