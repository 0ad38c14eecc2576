/* Speculative decoding (engine/sched/spec.h): the n-gram proposer, the rejection rule's output
 * distribution (chi-square, false-failure rate below 1e-6), the controller's plan, and in the
 * scheduler on the real stories260K model (skipped without ../shared) output token for token
 * identical to decoding without speculation: greedy and sampled, alone and 16 at once, with
 * chunked prefill, preemption, prefix-cache hits, stop strings, max_tokens and cancellation, and
 * no KV block left behind; with a draft model (a stories260K file drafting for another, and for
 * itself) the same greedy output, the rejection rule with the draft's real distribution, and the
 * vocabulary check at load; the cross-request n-gram pool alone (insert, lookup, eviction within
 * its bound, hash collisions that propose nothing wrong) and in the scheduler (greedy output
 * unchanged alone and 16 at once); the draft's and the target's KV pools within one budget. */
#include "engine/sched/scheduler.h"
#include "engine/sched/spec.h"

#include "common/err.h"
#include "engine/grammar/grammar.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/sched/sampler.h"
#include "engine/text/tokenizer.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- n-gram */

START_TEST(test_spec_ngram_propose_copies_what_followed)
{
    int32_t t[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
    int32_t out[8];
    /* suffix "5 6 7" occurred at 0..2, followed by 8 9 1 2 5 */
    ck_assert_int_eq(spec_ngram_propose(t, 10, 2, 4, 4, out), 4);
    ck_assert_int_eq(out[0], 8);
    ck_assert_int_eq(out[3], 2);
    /* k caps the proposals; what follows the match caps them too */
    ck_assert_int_eq(spec_ngram_propose(t, 10, 2, 4, 2, out), 2);
    int32_t u[] = {3, 4, 9, 3, 4};
    ck_assert_int_eq(spec_ngram_propose(u, 5, 2, 3, 8, out), 3);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[2], 4);
}
END_TEST

START_TEST(test_spec_ngram_propose_longest_then_latest)
{
    /* "1 2" occurs twice; only the first occurrence extends to "0 1 2" */
    int32_t t[] = {0, 1, 2, 7, 1, 2, 8, 0, 1, 2};
    int32_t out[4];
    ck_assert_int_eq(spec_ngram_propose(t, 10, 2, 3, 1, out), 1);
    ck_assert_int_eq(out[0], 7);
    /* with matches capped at 2 the latest occurrence wins */
    ck_assert_int_eq(spec_ngram_propose(t, 10, 2, 2, 1, out), 1);
    ck_assert_int_eq(out[0], 8);
}
END_TEST

START_TEST(test_spec_ngram_propose_no_match)
{
    int32_t t[] = {1, 2, 3, 4, 5, 6};
    int32_t out[4];
    ck_assert_int_eq(spec_ngram_propose(t, 6, 1, 3, 4, out), 0);
    int32_t u[] = {1, 2, 9, 2}; /* "2" recurs but ngram_min 2 needs "9 2" or "1 2" ... */
    ck_assert_int_eq(spec_ngram_propose(u, 4, 2, 3, 4, out), 0);
    ck_assert_int_eq(spec_ngram_propose(u, 4, 1, 3, 4, out), 2);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 2);
    ck_assert_int_eq(spec_ngram_propose(u, 1, 1, 3, 4, out), 0);
    ck_assert_int_eq(spec_ngram_propose(u, 4, 1, 3, 0, out), 0);
}
END_TEST

START_TEST(test_spec_config_valid_and_names)
{
    struct spec_config c;
    spec_config_default(&c);
    ck_assert(spec_config_valid(&c));
    c.method = SPEC_METHOD_NGRAM;
    ck_assert(spec_config_valid(&c));
    c.num_tokens = 0;
    ck_assert(!spec_config_valid(&c));
    c.num_tokens = SPEC_MAX_TOKENS + 1;
    ck_assert(!spec_config_valid(&c));
    c.num_tokens = 4;
    c.ngram_min = 3;
    c.ngram_max = 2;
    ck_assert(!spec_config_valid(&c));
    enum spec_method m;
    ck_assert(spec_method_parse("ngram", &m) && m == SPEC_METHOD_NGRAM);
    ck_assert(spec_method_parse("none", &m) && m == SPEC_METHOD_NONE);
    ck_assert(spec_method_parse("draft", &m) && m == SPEC_METHOD_DRAFT);
    ck_assert(!spec_method_parse("eagle", &m));
    ck_assert(!spec_method_parse(NULL, &m));
    ck_assert_str_eq(spec_skip_name(SPEC_SKIP_KV), "kv_full");
}
END_TEST

/* ---------------------------------------------------------------- the rejection rule */

#define NV    12
#define DRAWS 200000

static uint64_t xs(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static double unif(uint64_t *x)
{
    return (double)(xs(x) >> 11) / 9007199254740992.0;
}

/* Chi-square of counts against expected probabilities (cells of expected count < 5 pooled) under
 * the 1 - 1e-6 quantile (Wilson-Hilferty), as test_sampler.c's check; a count where p is 0 fails. */
static void chi_check(const long *counts, const double *p, int n, long draws, const char *what)
{
    double chi = 0, pool_e = 0;
    long pool_o = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0) {
            ck_assert_msg(counts[i] == 0, "%s: token %d of probability 0 drawn", what, i);
            continue;
        }
        double e = p[i] * (double)draws;
        if (e < 5) {
            pool_e += e;
            pool_o += counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    int df = cells > 1 ? cells - 1 : 1;
    double z = 4.753, q = 2.0 / (9.0 * df);
    double limit = df * pow(1 - q + z * sqrt(q), 3);
    ck_assert_msg(chi < limit, "%s: chi-square %.1f over %d cells, limit %.1f", what, chi, cells,
                  limit);
}

/* For one target configuration: proposals drawn from q, verified by spec_verify_row; the emitted
 * tokens must follow p (sampler_probs), the accepted ones min(p, q), the corrected ones the
 * normalised residual max(0, p - q), and the acceptance rate sum min(p, q). */
static void check_rule(const struct sampler_params *sp, int nv, const float *logits, const float *q,
                       const char *what);

static void check_rejection_rule(const struct sampler_params *sp, const char *what)
{
    float logits[NV], q[NV];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NV; i++) logits[i] = (float)(unif(&x) * 4.0 - 2.0);
    double qz = 0;
    for (int i = 0; i < NV; i++) {
        q[i] = i % 5 == 3 ? 0.0f : (float)(0.2 + unif(&x)); /* q misses some tokens p has */
        qz += q[i];
    }
    for (int i = 0; i < NV; i++) q[i] = (float)(q[i] / qz);
    check_rule(sp, NV, logits, q, what);
}

/* The rule for the target's `logits` and the proposal distribution q (nv entries each). */
static void check_rule(const struct sampler_params *sp, int nv, const float *logits, const float *q,
                       const char *what)
{
    float *p = malloc((size_t)nv * sizeof(float)), *scratch = malloc((size_t)nv * sizeof(float));
    double *pa = malloc((size_t)nv * sizeof(double)), *pr = malloc((size_t)nv * sizeof(double));
    double *pp = malloc((size_t)nv * sizeof(double));
    long *all = calloc((size_t)nv, sizeof(long)), *cnt_a = calloc((size_t)nv, sizeof(long));
    long *cnt_r = calloc((size_t)nv, sizeof(long)), n_acc = 0;
    ck_assert(p && scratch && pa && pr && pp && all && cnt_a && cnt_r);
    uint64_t x = 88172645463325252ull;
    struct sampler *s;
    ck_assert_int_eq(sampler_new(sp, nv, &s), 0);
    ck_assert_int_eq(sampler_probs(s, logits, p), 0);
    double sum = 0, acc = 0;
    for (int i = 0; i < nv; i++) {
        sum += p[i];
        acc += fmin(p[i], q[i]);
    }
    ck_assert_msg(fabs(sum - 1.0) < 1e-5, "%s: p sums to %g", what, sum);
    ck_assert_msg(acc < 0.999, "%s: q equals p (acceptance %g): nothing to test", what, acc);
    for (int i = 0; i < nv; i++) {
        pp[i] = p[i];
        pa[i] = fmin(p[i], q[i]) / acc;
        pr[i] = fmax(0.0, p[i] - q[i]) / (1.0 - acc);
    }
    for (int d = 0; d < DRAWS; d++) {
        int32_t prop = spec_draw(q, nv, unif(&x));
        ck_assert(prop >= 0 && q[prop] > 0);
        struct sampler_result r;
        int out = spec_verify_row(s, logits, prop, q, scratch, &r);
        ck_assert(out == SPEC_ACCEPTED || out == SPEC_CORRECTED);
        ck_assert(r.token >= 0 && r.token < nv);
        all[r.token]++;
        if (out == SPEC_ACCEPTED) {
            ck_assert_int_eq(r.token, prop);
            cnt_a[r.token]++;
            n_acc++;
        } else {
            ck_assert_int_ne(r.token, prop);
            cnt_r[r.token]++;
        }
    }
    sampler_free(s);
    chi_check(all, pp, nv, DRAWS, what);
    chi_check(cnt_a, pa, nv, n_acc, what);
    chi_check(cnt_r, pr, nv, DRAWS - n_acc, what);
    /* binomial acceptance count within 5 standard deviations (false failure < 1e-6) */
    double mean = acc * DRAWS, sd = sqrt(DRAWS * acc * (1 - acc));
    ck_assert_msg(fabs((double)n_acc - mean) < 5 * sd, "%s: %ld accepted, expected %.0f", what,
                  n_acc, mean);
    free(p);
    free(scratch);
    free(pa);
    free(pr);
    free(pp);
    free(all);
    free(cnt_a);
    free(cnt_r);
}

START_TEST(test_spec_verify_rejection_rule_keeps_distribution)
{
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.seed = 11;
    sp.temperature = 0.8f;
    check_rejection_rule(&sp, "temperature 0.8");
    sp.top_k = 6;
    check_rejection_rule(&sp, "top-k 6");
    sp.top_k = 0;
    sp.top_p = 0.7f;
    check_rejection_rule(&sp, "top-p 0.7");
    sp.top_p = 1.0f;
    sp.min_p = 0.2f;
    check_rejection_rule(&sp, "min-p 0.2");
}
END_TEST

/* sampler_probs is the distribution sampler_sample draws from (what the rule needs as p). */
START_TEST(test_spec_sampler_probs_matches_draws)
{
    float logits[NV], p[NV];
    uint64_t x = 1234567;
    for (int i = 0; i < NV; i++) logits[i] = (float)(unif(&x) * 5.0 - 2.5);
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.seed = 5;
    sp.temperature = 1.3f;
    sp.top_k = 7;
    sp.top_p = 0.9f;
    struct sampler *s;
    ck_assert_int_eq(sampler_new(&sp, NV, &s), 0);
    ck_assert_int_eq(sampler_probs(s, logits, p), 0);
    long counts[NV] = {0};
    for (int d = 0; d < DRAWS; d++) {
        struct sampler_result r;
        ck_assert_int_eq(sampler_sample(s, logits, &r), 0);
        counts[r.token]++;
    }
    double pp[NV];
    for (int i = 0; i < NV; i++) pp[i] = p[i];
    chi_check(counts, pp, NV, DRAWS, "sampler_probs vs sampler_sample");
    sampler_free(s);
    /* greedy: all the mass on the argmax */
    sp.temperature = 0;
    ck_assert_int_eq(sampler_new(&sp, NV, &s), 0);
    ck_assert_int_eq(sampler_probs(s, logits, p), 0);
    int best = 0;
    for (int i = 1; i < NV; i++)
        if (logits[i] > logits[best]) best = i;
    ck_assert(p[best] == 1.0f);
    sampler_free(s);
}
END_TEST

START_TEST(test_spec_draw_inverse_cdf)
{
    float p[4] = {0, 1, 0, 3};
    ck_assert_int_eq(spec_draw(p, 4, 0.0), 1);
    ck_assert_int_eq(spec_draw(p, 4, 0.2), 1);
    ck_assert_int_eq(spec_draw(p, 4, 0.3), 3);
    ck_assert_int_eq(spec_draw(p, 4, 0.999999), 3);
    float z[3] = {0, 0, 0};
    ck_assert_int_eq(spec_draw(z, 3, 0.5), -1);
}
END_TEST

/* ---------------------------------------------------------------- the controller */

START_TEST(test_spec_ctl_plan_follows_cost_and_acceptance)
{
    struct spec_cost flat, prop;
    spec_cost_init(&flat);
    spec_cost_init(&prop);
    /* flat up to 16 tokens (weight-read bound), then linear; proportional everywhere */
    for (int n = 1; n <= 1024; n *= 2) {
        spec_cost_observe(&flat, n, n <= 16 ? 0.010 : 0.010 * n / 16.0);
        spec_cost_observe(&prop, n, 0.001 * n);
    }
    ck_assert(fabs(spec_cost_estimate(&flat, 12) - 0.010) < 1e-9);
    ck_assert(fabs(spec_cost_estimate(&prop, 3) - 0.003) < 1e-9);
    ck_assert(spec_cost_estimate(&prop, 4096) > spec_cost_estimate(&prop, 1024));
    struct spec_cand c[64];
    static char scratch[SPEC_CTL_SCRATCH_BYTES(64)];
    struct spec_plan_in in = {.base_tokens = 1, .n_decodes = 1, .budget = 2048, .adaptive = true};
    /* one sequence, cheap extra tokens, good acceptance: all of it */
    in.target = &flat;
    c[0] = (struct spec_cand){.accept = 0.8f, .kmax = 5};
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_eq(c[0].k, 5);
    /* tokens cost what they are worth: nothing */
    in.target = &prop;
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_eq(c[0].k, 0);
    /* a large batch on the flat-then-linear curve: no speculation pays */
    in.target = &flat;
    in.base_tokens = in.n_decodes = 64;
    for (int i = 0; i < 64; i++) c[i] = (struct spec_cand){.accept = 0.8f, .kmax = 5};
    spec_ctl_plan(&in, c, 64, scratch);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(c[i].k, 0);
    /* a few sequences: the well-accepted one gets more than the poor one */
    in.base_tokens = in.n_decodes = 2;
    c[0] = (struct spec_cand){.accept = 0.9f, .kmax = 8};
    c[1] = (struct spec_cand){.accept = 0.2f, .kmax = 8};
    spec_ctl_plan(&in, c, 2, scratch);
    ck_assert_int_gt(c[0].k, c[1].k);
    ck_assert_int_le(2 + c[0].k + c[1].k, 16);
    /* not adaptive: kmax each, within the budget */
    in.adaptive = false;
    in.budget = 10;
    spec_ctl_plan(&in, c, 2, scratch);
    ck_assert_int_eq(c[0].k, 8);
    ck_assert_int_eq(c[1].k, 2);
}
END_TEST

/* With a draft model the plan pays for the draft's rounds: one step per proposal depth over the
 * sequences proposing that deep, plus the catch-up in the first. */
START_TEST(test_spec_ctl_plan_costs_draft_steps)
{
    struct spec_cost flat, cheap, dear;
    spec_cost_init(&flat);
    spec_cost_init(&cheap);
    spec_cost_init(&dear);
    for (int n = 1; n <= 1024; n *= 2) {
        spec_cost_observe(&flat, n, n <= 16 ? 0.010 : 0.010 * n / 16.0);  /* the target */
        spec_cost_observe(&cheap, n, n <= 16 ? 0.001 : 0.001 * n / 16.0); /* a 10x smaller draft */
        spec_cost_observe(&dear, n, n <= 16 ? 0.010 : 0.010 * n / 16.0); /* as dear as the target */
    }
    struct spec_cand c[64];
    static char scratch[SPEC_CTL_SCRATCH_BYTES(64)];
    struct spec_plan_in in = {.base_tokens = 1,
                              .n_decodes = 1,
                              .budget = 2048,
                              .target = &flat,
                              .draft = &cheap,
                              .adaptive = true};
    /* one sequence, a cheap draft, good acceptance: speculate */
    c[0] = (struct spec_cand){.accept = 0.8f, .kmax = 5, .catchup = 2};
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_ge(c[0].k, 3);
    /* the draft's rounds cut the depth: at acceptance 0.6 a draft round of 0.4 target steps
     * leaves one proposal worth it, where free proposals would all be */
    struct spec_cost mid;
    spec_cost_init(&mid);
    for (int n = 1; n <= 1024; n *= 2)
        spec_cost_observe(&mid, n, n <= 16 ? 0.004 : 0.004 * n / 16.0);
    c[0].accept = 0.6f;
    in.draft = NULL;
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_eq(c[0].k, 5);
    in.draft = &mid;
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_eq(c[0].k, 1);
    /* a draft as dear as the target: each round costs a whole step, nothing pays */
    in.draft = &dear;
    c[0] = (struct spec_cand){.accept = 0.8f, .kmax = 5, .catchup = 2};
    spec_ctl_plan(&in, c, 1, scratch);
    ck_assert_int_eq(c[0].k, 0);
    /* a large batch: k 0 for everyone, so no draft step runs */
    in.draft = &cheap;
    in.base_tokens = in.n_decodes = 64;
    for (int i = 0; i < 64; i++) c[i] = (struct spec_cand){.accept = 0.8f, .kmax = 5, .catchup = 2};
    spec_ctl_plan(&in, c, 64, scratch);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(c[i].k, 0);
}
END_TEST

/* A synthetic machine: a step of n tokens at context ctx takes a + b*n + c*n*ctx seconds (a fixed
 * part, per-row work and attention over the context). */
struct sim_machine {
    double a, b, c;
};

static double sim_time(const struct sim_machine *m, int n, int ctx)
{
    return m->a + m->b * n + m->c * n * (double)ctx;
}

/* Calibrates a cost model like spec_cost_calibrate on an empty context (sizes 1, 2, 4, .. max). */
static void sim_calibrate(struct spec_cost *c, const struct sim_machine *m, int max)
{
    spec_cost_init(c);
    for (int n = 1; n <= max; n *= 2) spec_cost_observe(c, n, sim_time(m, n, 0));
}

/* One sequence generating `steps` steps the way cmd_generate.c does (plan, draft rounds, verify,
 * observe), each proposal accepted with probability `accept` (a fixed LCG: deterministic). The
 * context starts at 64 and grows with every token. Writes each step's k to ks[]. */
static void sim_generate(const struct sim_machine *tm, const struct sim_machine *dm, double accept,
                         int steps, int *ks)
{
    struct spec_cost tc, dc;
    sim_calibrate(&tc, tm, 12);
    sim_calibrate(&dc, dm, 12);
    spec_cost_link(&dc, &tc);
    struct spec_accept acc = {0};
    uint64_t scratch[SPEC_MAX_TOKENS];
    uint32_t rng = 12345;
    int ctx = 64;
    for (int s = 0; s < steps; s++) {
        struct spec_cand c = {.accept = spec_accept_estimate(&acc, 0.5f), .kmax = 5, .catchup = 2};
        struct spec_plan_in in = {.base_tokens = 1,
                                  .n_decodes = 1,
                                  .budget = 5,
                                  .target = &tc,
                                  .draft = &dc,
                                  .adaptive = true};
        spec_ctl_plan(&in, &c, 1, scratch);
        int k = c.k, ok = 0;
        ks[s] = k;
        if (k == 0) spec_accept_decay(&acc);
        for (int j = 1; j <= k; j++) spec_cost_observe(&dc, j == 1 ? 2 : 1, sim_time(dm, 1, ctx));
        spec_cost_observe(&tc, 1 + k, sim_time(tm, 1 + k, ctx));
        while (ok < k) {
            rng = rng * 1103515245u + 12345u;
            if ((double)(rng >> 8) / (double)(1u << 24) >= accept) break;
            ok++;
        }
        if (k > 0) spec_accept_update(&acc, k, ok);
        ctx += ok + 1;
    }
}

START_TEST(test_spec_ctl_converges_with_context_growth)
{
    enum { STEPS = 1500 };
    static int ks[STEPS];
    /* a small model's step: a little fixed work, the rest per row and attention, which grows to
     * dominate as the context does (0.3 ms fixed, 0.1 ms a row, 2 us a row per 1k context) */
    struct sim_machine target = {0.0003, 0.0001, 2e-9};
    /* ... and one where attention over the context dominates early (0.1 ms fixed, 0.1 ms a row,
     * 1 us a row per context token): a 1-row step at context 1k is dearer than a 6-row one at 0 */
    struct sim_machine attn = {0.0001, 0.0001, 1e-6};
    sim_generate(&attn, &attn, 0.98, STEPS, ks);
    int late = 0;
    for (int s = 20; s < STEPS; s++) late += ks[s] > 0;
    ck_assert_int_eq(late, 0);
    /* a draft as dear as the target (stories260K Q8_0 for F32): k 0 after a few steps, and it
     * stays there while the context grows to ~1.6k, however often the acceptance fades back */
    sim_generate(&target, &target, 0.98, STEPS, ks);
    late = 0;
    for (int s = 20; s < STEPS; s++) late += ks[s] > 0;
    ck_assert_int_eq(late, 0);
    /* the same for a target whose step is mostly fixed cost: attention cost growth with the
     * context makes the 1-row steps dearer, and the multi-row estimates follow them */
    struct sim_machine fixedish = {0.002, 0.00002, 5e-9};
    sim_generate(&fixedish, &fixedish, 0.98, STEPS, ks);
    late = 0;
    for (int s = 20; s < STEPS; s++) late += ks[s] > 0;
    ck_assert_int_eq(late, 0);
    /* a cheap draft (a tenth of a weight-read-bound target) keeps speculating at every context */
    struct sim_machine big = {0.010, 0.0001, 1e-8}, small = {0.001, 0.00001, 1e-9};
    sim_generate(&big, &small, 0.8, STEPS, ks);
    int on = 0;
    for (int s = 0; s < STEPS; s++) on += ks[s] > 0;
    ck_assert_int_ge(on, STEPS * 9 / 10);
    for (int s = STEPS - 100; s < STEPS; s++) ck_assert_int_gt(ks[s], 0);
    /* n-gram lookup (no draft steps) on a weight-read-bound target: speculation stays on */
    struct spec_cost tc;
    sim_calibrate(&tc, &big, 12);
    uint64_t scratch[SPEC_MAX_TOKENS];
    for (int ctx = 64; ctx < 4096; ctx += 6) {
        struct spec_cand c = {.accept = 0.9f, .kmax = 5};
        struct spec_plan_in in = {
            .base_tokens = 1, .n_decodes = 1, .budget = 5, .target = &tc, .adaptive = true};
        spec_ctl_plan(&in, &c, 1, scratch);
        ck_assert_int_eq(c.k, 5);
        spec_cost_observe(&tc, 1 + c.k, sim_time(&big, 1 + c.k, ctx));
    }
}
END_TEST

START_TEST(test_spec_cost_level_keeps_the_shape)
{
    /* calibrated flat at 1 ms for 1..8 tokens; then only 1-token steps are seen, at twice that:
     * the 8-token estimate rises with them (a stale bucket would still say 1 ms) */
    struct spec_cost c;
    spec_cost_init(&c);
    for (int n = 1; n <= 8; n *= 2) spec_cost_observe(&c, n, 0.001 * (1.0 + 0.1 * n));
    double r0 = spec_cost_estimate(&c, 8) / spec_cost_estimate(&c, 1);
    for (int i = 0; i < 200; i++) spec_cost_observe(&c, 1, 0.0022);
    ck_assert(fabs(spec_cost_estimate(&c, 1) - 0.0022) < 1e-5);
    ck_assert(fabs(spec_cost_estimate(&c, 8) / spec_cost_estimate(&c, 1) - r0) < 1e-9);
    /* a size never seen before joins the shape at the level of the moment */
    spec_cost_observe(&c, 64, 0.0022 * 4.0);
    ck_assert(fabs(spec_cost_estimate(&c, 64) - 0.0088) < 1e-6);
    ck_assert(fabs(spec_cost_estimate(&c, 8) / spec_cost_estimate(&c, 1) - r0) < 1e-9);
    /* a linked draft curve not observed moves with its peer's level, then with its own again */
    struct spec_cost d;
    spec_cost_init(&d);
    for (int n = 1; n <= 8; n *= 2) spec_cost_observe(&d, n, 0.0001 * n);
    spec_cost_link(&d, &c);
    double d1 = spec_cost_estimate(&d, 1);
    for (int i = 0; i < 200; i++) spec_cost_observe(&c, 1, 0.0044);
    ck_assert(fabs(spec_cost_estimate(&d, 1) / d1 - 2.0) < 1e-3);
    for (int i = 0; i < 200; i++) spec_cost_observe(&d, 1, 0.0003);
    ck_assert(fabs(spec_cost_estimate(&d, 1) - 0.0003) < 1e-6);
    ck_assert(fabs(spec_cost_estimate(&d, 4) / spec_cost_estimate(&d, 1) - 4.0) < 1e-6);
    /* garbage is ignored */
    spec_cost_observe(&c, 1, NAN);
    spec_cost_observe(&c, 0, 1.0);
    spec_cost_observe(&c, 1, -1.0);
    ck_assert(fabs(spec_cost_estimate(&c, 1) - 0.0044) < 1e-5);
}
END_TEST

START_TEST(test_spec_accept_estimate_and_decay)
{
    struct spec_accept a = {0};
    ck_assert(fabsf(spec_accept_estimate(&a, 0.5f) - 0.5f) < 1e-6f);
    for (int i = 0; i < 30; i++) spec_accept_update(&a, 4, 4);
    ck_assert(spec_accept_estimate(&a, 0.5f) > 0.9f);
    for (int i = 0; i < 60; i++) spec_accept_update(&a, 4, 0);
    ck_assert(spec_accept_estimate(&a, 0.5f) < 0.2f);
    for (int i = 0; i < 200; i++) spec_accept_decay(&a);
    ck_assert(fabsf(spec_accept_estimate(&a, 0.5f) - 0.5f) < 0.05f);
}
END_TEST

/* ---------------------------------------------------------------- n-gram pool */

START_TEST(test_spec_pool_insert_and_propose)
{
    struct spec_pool *p = NULL;
    ck_assert_int_eq(spec_pool_new(1u << 16, 2, 3, &p), 0);
    ck_assert_uint_le(spec_pool_bytes(p), 1u << 16);
    int32_t out[8];
    int32_t q0[] = {9, 3, 4};
    ck_assert_int_eq(spec_pool_propose(p, q0, 3, 4, out), 0); /* empty */
    int32_t a[] = {1, 2, 3, 7, 8};
    int32_t b[] = {5, 2, 3, 9, 9, 6};
    spec_pool_insert(p, a, 5);
    spec_pool_insert(p, b, 6);
    /* "1 2 3" (3 tokens) is only in a: the longest match wins over b's later "2 3" */
    int32_t q1[] = {4, 1, 2, 3};
    ck_assert_int_eq(spec_pool_propose(p, q1, 4, 4, out), 2);
    ck_assert_int_eq(out[0], 7);
    ck_assert_int_eq(out[1], 8); /* then a's run ends: nothing of b follows */
    /* "2 3" alone: its latest occurrence, in b; k caps */
    int32_t q2[] = {4, 4, 2, 3};
    ck_assert_int_eq(spec_pool_propose(p, q2, 4, 2, out), 2);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 9);
    ck_assert_int_eq(spec_pool_propose(p, q2, 4, 8, out), 3);
    ck_assert_int_eq(out[2], 6);
    /* an n-gram that ends a run has nothing after it; one token is below ngram_min */
    int32_t q3[] = {9, 6};
    ck_assert_int_eq(spec_pool_propose(p, q3, 2, 4, out), 0);
    int32_t q4[] = {3};
    ck_assert_int_eq(spec_pool_propose(p, q4, 1, 4, out), 0);
    ck_assert_int_eq(spec_pool_propose(p, q2, 4, 0, out), 0);
    ck_assert_int_eq(spec_pool_propose(NULL, q2, 4, 4, out), 0);
    spec_pool_insert(p, a, 0); /* an empty run is nothing */
    spec_pool_free(p);
    spec_pool_free(NULL);
}
END_TEST

START_TEST(test_spec_pool_rejects_bad_bounds)
{
    struct spec_pool *p = (struct spec_pool *)&p; /* not written on failure */
    ck_assert_int_eq(spec_pool_new(SPEC_POOL_MIN_BYTES - 1, 2, 5, &p), ERR_INVAL);
    ck_assert_int_eq(spec_pool_new(1 << 20, 0, 5, &p), ERR_INVAL);
    ck_assert_int_eq(spec_pool_new(1 << 20, 4, 3, &p), ERR_INVAL);
    ck_assert_int_eq(spec_pool_new(1 << 20, 2, 65, &p), ERR_INVAL);
    ck_assert_ptr_eq(p, (struct spec_pool *)&p);
    ck_assert_int_eq(spec_pool_new(SPEC_POOL_MIN_BYTES, 1, 64, &p), 0);
    ck_assert_uint_le(spec_pool_bytes(p), SPEC_POOL_MIN_BYTES);
    spec_pool_free(p);
    /* the scheduler's settings: a pool only for n-gram, and not below the minimum */
    struct spec_config c;
    spec_config_default(&c);
    c.method = SPEC_METHOD_NGRAM;
    c.ngram_pool_bytes = 1 << 20;
    ck_assert(spec_config_valid(&c));
    c.ngram_pool_bytes = SPEC_POOL_MIN_BYTES - 1;
    ck_assert(!spec_config_valid(&c));
    c.method = SPEC_METHOD_DRAFT;
    c.ngram_pool_bytes = 1 << 20;
    ck_assert(!spec_config_valid(&c));
}
END_TEST

/* The bound: however much is inserted the pool's bytes stay what they were (within max_bytes),
 * and the oldest runs are gone (proposals come only from what the ring still holds). */
START_TEST(test_spec_pool_evicts_within_bound)
{
    struct spec_pool *p = NULL;
    ck_assert_int_eq(spec_pool_new(8192, 2, 4, &p), 0); /* 155 tokens */
    uint64_t bytes = spec_pool_bytes(p);
    ck_assert_uint_le(bytes, 8192);
    int32_t first[] = {100, 101, 102, 103};
    spec_pool_insert(p, first, 4);
    int32_t out[8], q[] = {100, 101};
    ck_assert_int_eq(spec_pool_propose(p, q, 2, 4, out), 2);
    int32_t run[40];
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < 40; i++) run[i] = (int32_t)(200 + r * 40 + i);
        spec_pool_insert(p, run, 40);
        ck_assert_uint_eq(spec_pool_bytes(p), bytes);
    }
    ck_assert_int_eq(spec_pool_propose(p, q, 2, 4, out), 0); /* overwritten */
    /* the latest run is still there, and a run longer than the ring keeps its end */
    int32_t q2[] = {run[36], run[37]};
    ck_assert_int_eq(spec_pool_propose(p, q2, 2, 4, out), 2);
    ck_assert_int_eq(out[0], run[38]);
    static int32_t longrun[5000];
    for (int i = 0; i < 5000; i++) longrun[i] = 10000 + i;
    spec_pool_insert(p, longrun, 5000);
    int32_t q3[] = {10000 + 4990, 10000 + 4991};
    ck_assert_int_eq(spec_pool_propose(p, q3, 2, 4, out), 4);
    ck_assert_int_eq(out[0], 10000 + 4992);
    int32_t q4[] = {10000, 10001};
    ck_assert_int_eq(spec_pool_propose(p, q4, 2, 4, out), 0);
    ck_assert_uint_eq(spec_pool_bytes(p), bytes);
    spec_pool_free(p);
}
END_TEST

/* Whether tokens[0..n) followed by prop[0..m) occurs, as a suffix of length len and what followed
 * it, inside one of the runs (brute force). */
static bool pool_true_continuation(int32_t runs[][24], int n_runs, const int32_t *tail, int len,
                                   const int32_t *prop, int m)
{
    for (int r = 0; r < n_runs; r++)
        for (int e = len - 1; e + m < 24; e++) {
            bool ok = true;
            for (int i = 0; i < len && ok; i++) ok = runs[r][e - len + 1 + i] == tail[i];
            for (int i = 0; i < m && ok; i++) ok = runs[r][e + 1 + i] == prop[i];
            if (ok) return true;
        }
    return false;
}

/* Hash collisions: in the smallest pool (a handful of slots, every n-gram sharing them) over a
 * tiny alphabet, every proposal is a real continuation of the query's suffix in some inserted
 * run: a slot another n-gram took, or one whose tokens were overwritten, proposes nothing. */
START_TEST(test_spec_pool_collisions_never_propose_wrong)
{
    struct spec_pool *p = NULL;
    ck_assert_int_eq(spec_pool_new(SPEC_POOL_MIN_BYTES, 2, 3, &p), 0);
    static int32_t runs[400][24];
    unsigned x = 12345u;
    int proposals = 0;
    for (int r = 0; r < 400; r++) {
        for (int i = 0; i < 24; i++) {
            x = x * 1103515245u + 12345u;
            runs[r][i] = (int32_t)((x >> 16) % 4);
        }
        spec_pool_insert(p, runs[r], 24);
        for (int t = 0; t < 20; t++) {
            int32_t qy[3], out[8];
            for (int i = 0; i < 3; i++) {
                x = x * 1103515245u + 12345u;
                qy[i] = (int32_t)((x >> 16) % 4);
            }
            int m = spec_pool_propose(p, qy, 3, 5, out);
            if (m == 0) continue;
            proposals++;
            /* the suffix matched is 3 or 2 tokens: one of them continues so in a run */
            ck_assert(pool_true_continuation(runs, r + 1, qy, 3, out, m) ||
                      pool_true_continuation(runs, r + 1, qy + 1, 2, out, m));
        }
    }
    ck_assert_int_gt(proposals, 100);
    spec_pool_free(p);
}
END_TEST

/* ---------------------------------------------------------------- in the scheduler */

#define N_REQ 16
#define BS    16
#define CTX   256

struct out {
    int32_t tokens[512];
    float logprobs[512];
    int n_tokens;
    char text[4096];
    size_t len;
    enum sched_finish finish;
    long proposed, accepted;
    int events_after_finish;
};

struct env {
    struct model *m;
    struct tokenizer *tok;
    struct kv_cache *kv;
    struct model *dm;     /* the draft model, or NULL */
    struct kv_cache *dkv; /* its pool */
    struct sched *s;
    struct out out[N_REQ];
};

static void on_event(void *ctx, const struct sched_event *ev)
{
    struct out *o = ev->ud;
    (void)ctx;
    if (o->finish != SCHED_FINISH_NONE) o->events_after_finish++;
    if (ev->has_token) {
        ck_assert_int_lt(o->n_tokens, 512);
        o->logprobs[o->n_tokens] = ev->sample->logprob;
        o->tokens[o->n_tokens++] = ev->token;
        ck_assert_int_eq(ev->n_generated, o->n_tokens);
    }
    ck_assert_uint_lt(o->len + ev->len, sizeof(o->text));
    memcpy(o->text + o->len, ev->text, ev->len);
    o->len += ev->len;
    o->finish = ev->finish;
    o->proposed = ev->spec_proposed;
    o->accepted = ev->spec_accepted;
}

static bool env_open(struct env *e, int n_blocks)
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
    struct kv_cache_config kc = {n_blocks, BS, N_REQ, CTX / BS};
    ck_assert_int_eq(kv_cache_new(&kc, &e->kv), 0);
    ck_assert_int_eq(model_kv_init(e->m, e->kv), 0);
    return true;
}

struct run_cfg {
    int max_seqs, max_tokens_step;
    bool chunked, prefix;
    enum spec_method method;
    int k;
    bool adaptive;
    const char *draft;        /* spec_equals_plain: this ../shared model drafts (method DRAFT) */
    uint64_t pool_bytes;      /* method NGRAM: the cross-request n-gram pool (0: none) */
    int ngram_min, ngram_max; /* 0: 1..3 */
};

/* Loads the draft model at ../shared/<rel> with a pool of n_blocks; false when absent. */
static bool env_open_draft(struct env *e, const char *rel, int n_blocks)
{
    const char *path = test_shared_path(rel);
    if (!path) return false;
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 2;
    char err[256];
    ck_assert_msg(model_load(path, &o, &e->dm, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(spec_draft_check_vocab(e->m, e->dm, err, sizeof(err)) == 0, "%s", err);
    struct kv_cache_config kc = {n_blocks, BS, N_REQ, CTX / BS};
    ck_assert_int_eq(kv_cache_new(&kc, &e->dkv), 0);
    ck_assert_int_eq(model_kv_init(e->dm, e->dkv), 0);
    return true;
}

static void env_sched(struct env *e, const struct run_cfg *rc)
{
    struct sched_config c = {.max_num_seqs = rc->max_seqs,
                             .max_num_batched_tokens = rc->max_tokens_step,
                             .chunked_prefill = rc->chunked,
                             .prefix_caching = rc->prefix,
                             .max_context = CTX};
    spec_config_default(&c.spec);
    c.spec.method = rc->method;
    c.spec.num_tokens = rc->k;
    c.spec.ngram_min = rc->ngram_min ? rc->ngram_min : 1;
    c.spec.ngram_max = rc->ngram_max ? rc->ngram_max : 3;
    c.spec.adaptive = rc->adaptive;
    if (rc->method == SPEC_METHOD_NGRAM) c.spec.ngram_pool_bytes = rc->pool_bytes;
    if (rc->method == SPEC_METHOD_DRAFT) {
        c.draft = e->dm;
        c.draft_kv = e->dkv;
    }
    ck_assert_int_eq(sched_new(&c, e->m, e->kv, e->tok, on_event, e, &e->s), 0);
    memset(e->out, 0, sizeof(e->out));
}

static void env_close(struct env *e)
{
    sched_free(e->s);
    e->s = NULL;
    if (e->kv) ck_assert_int_eq(kv_cache_blocks_used(e->kv), 0);
    if (e->dkv) ck_assert_int_eq(kv_cache_blocks_used(e->dkv), 0);
    kv_cache_free(e->kv);
    kv_cache_free(e->dkv);
    model_free(e->dm);
    tokenizer_free(e->tok);
    model_free(e->m);
}

/* Prompt r: BOS, then a phrase of 4..11 ids repeated (input-grounded text, where lookup pays),
 * with a shared 32-token opening for even r (prefix-cache hits). */
static int make_prompt(int r, int32_t *ids)
{
    int n = 0;
    ids[n++] = 1;
    if (r % 2 == 0)
        for (int i = 0; i < 32; i++) ids[n++] = (int32_t)(40 + i * 3);
    int len = 4 + r % 8;
    unsigned x = 2463534242u + (unsigned)r * 7919u;
    int32_t phrase[16];
    for (int i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        phrase[i] = (int32_t)(3 + x % 400);
    }
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < len; i++) ids[n++] = phrase[i];
    return n;
}

/* The grammar (and lazy triggers) every request of add() runs under; NULL: none. */
static struct grammar *add_grammar;
static struct grammar_lazy add_lazy;

static void add(struct env *e, int r, const int32_t *ids, int n, int max_tokens, float temp,
                const char *stop)
{
    const char *stops[1] = {stop};
    struct sched_request q = {.prompt = ids,
                              .n_prompt = n,
                              .max_tokens = max_tokens,
                              .stops = stop ? stops : NULL,
                              .n_stops = stop ? 1 : 0,
                              .ignore_eos = true,
                              .grammar = add_grammar,
                              .lazy = add_lazy,
                              .ud = &e->out[r]};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = temp;
    q.sampling.top_p = temp > 0 ? 0.95f : 1.0f;
    q.sampling.repeat_penalty = temp > 0 ? 1.1f : 1.0f;
    q.sampling.seed = 1000 + (uint64_t)r;
    q.sampling.logprobs = true;
    struct sched_seq *seq = NULL;
    ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
}

static void run_to_idle(struct env *e)
{
    for (int i = 0; i < 20000 && !sched_idle(e->s); i++) ck_assert_int_eq(sched_step(e->s), 0);
    ck_assert(sched_idle(e->s));
}

/* Runs n_req requests (max_tokens 60 - r) under rc and copies the outputs to out. */
static void run_all(struct env *e, const struct run_cfg *rc, int n_req, float temp,
                    const char *stop, struct out *out, struct sched_stats *st)
{
    env_sched(e, rc);
    int32_t ids[N_REQ][128];
    for (int r = 0; r < n_req; r++) add(e, r, ids[r], make_prompt(r, ids[r]), 60 - r, temp, stop);
    run_to_idle(e);
    memcpy(out, e->out, sizeof(e->out[0]) * (size_t)n_req);
    sched_stats(e->s, st);
    sched_free(e->s);
    e->s = NULL;
    ck_assert_int_eq(kv_cache_blocks_used(e->kv), 0);
    if (e->dkv) ck_assert_int_eq(kv_cache_blocks_used(e->dkv), 0);
}

static void expect_same(const struct out *a, const struct out *b, int n_req, bool exact_len)
{
    for (int r = 0; r < n_req; r++) {
        ck_assert_int_eq(a[r].finish, b[r].finish);
        if (exact_len) ck_assert_int_eq(a[r].n_tokens, 60 - r);
        ck_assert_int_eq(a[r].n_tokens, b[r].n_tokens);
        ck_assert_msg(memcmp(a[r].tokens, b[r].tokens, sizeof(int32_t) * (size_t)a[r].n_tokens) ==
                          0,
                      "request %d: speculation changed the tokens", r);
        ck_assert_msg(memcmp(a[r].logprobs, b[r].logprobs, sizeof(float) * (size_t)a[r].n_tokens) ==
                          0,
                      "request %d: speculation changed the log-probs", r);
        ck_assert_int_eq((int)a[r].len, (int)b[r].len);
        ck_assert(memcmp(a[r].text, b[r].text, a[r].len) == 0);
        ck_assert_int_eq(b[r].events_after_finish, 0);
    }
}

/* Speculation off, then on (fixed k, then adaptive), for the same requests: identical outputs. */
static void spec_equals_plain(int n_blocks, struct run_cfg rc, int n_req, float temp,
                              const char *stop, uint64_t *preemptions)
{
    struct env e;
    if (!env_open(&e, n_blocks)) return;
    if (rc.draft && !env_open_draft(&e, rc.draft, n_blocks)) {
        env_close(&e);
        return;
    }
    static struct out plain[N_REQ], spec[N_REQ];
    struct sched_stats st0, st1;
    rc.method = SPEC_METHOD_NONE;
    run_all(&e, &rc, n_req, temp, stop, plain, &st0);
    ck_assert_uint_eq(st0.spec.drafts, 0);
    rc.method = rc.draft ? SPEC_METHOD_DRAFT : SPEC_METHOD_NGRAM;
    rc.k = 5;
    rc.adaptive = false;
    run_all(&e, &rc, n_req, temp, stop, spec, &st1);
    expect_same(plain, spec, n_req, stop == NULL);
    int n_stopped = 0;
    for (int r = 0; r < n_req; r++) n_stopped += plain[r].finish == SCHED_FINISH_STOP;
    ck_assert_int_eq(n_stopped > 0, stop != NULL);
    /* speculation really ran and was accepted, and took steps away */
    ck_assert_uint_gt(st1.spec.drafts, 0);
    ck_assert_uint_gt(st1.spec.accepted, 0);
    ck_assert_uint_le(st1.spec.accepted, st1.spec.draft_tokens);
    ck_assert_uint_eq(st1.generation_tokens, st0.generation_tokens);
    if (rc.max_seqs == 1) ck_assert_uint_lt(st1.steps, st0.steps);
    long proposed = 0, accepted = 0;
    for (int r = 0; r < n_req; r++) {
        proposed += spec[r].proposed;
        accepted += spec[r].accepted;
    }
    ck_assert_int_eq(proposed, (long)st1.spec.draft_tokens);
    ck_assert_int_eq(accepted, (long)st1.spec.accepted);
    uint64_t per_pos = 0;
    for (int i = 0; i < SPEC_MAX_TOKENS; i++) per_pos += st1.spec.accepted_per_pos[i];
    ck_assert_uint_eq(per_pos, st1.spec.accepted);
    if (preemptions) *preemptions = st1.preemptions;
    if (rc.draft) {
        /* the draft ran in batched steps: at most one per depth per target step */
        ck_assert_uint_gt(st1.spec.draft_steps, 0);
        ck_assert_uint_le(st1.spec.draft_steps, st1.steps * (uint64_t)rc.k);
        /* 16 at once without preemption: a draft step serves more than 2 sequences on average
         * (one per sequence and depth would be drafts * k steps) */
        if (rc.max_seqs == N_REQ && !preemptions)
            ck_assert_uint_lt(2 * st1.spec.draft_steps, st1.spec.drafts * (uint64_t)rc.k);
        /* every prompt (16+ tokens) is longer than a 16-token step budget: the draft catches
         * up over several steps */
        if (rc.max_tokens_step <= 16) ck_assert_uint_gt(st1.spec.skipped[SPEC_SKIP_CATCHUP], 0);
        /* a file drafting for itself computes the same rows: every proposal is accepted */
        if (strstr(rc.draft, "stories260K.gguf"))
            ck_assert_uint_eq(st1.spec.accepted, st1.spec.draft_tokens);
        fprintf(stderr,
                "draft %s: %d seqs, %llu proposals, %llu accepted (%.3f), %llu draft steps\n",
                rc.draft, rc.max_seqs, (unsigned long long)st1.spec.draft_tokens,
                (unsigned long long)st1.spec.accepted,
                (double)st1.spec.accepted / (double)st1.spec.draft_tokens,
                (unsigned long long)st1.spec.draft_steps);
    }
    /* adaptive: whatever k it picks, the same tokens */
    rc.adaptive = true;
    run_all(&e, &rc, n_req, temp, stop, spec, &st1);
    expect_same(plain, spec, n_req, stop == NULL);
    env_close(&e);
}

START_TEST(test_spec_greedy_alone_equals_plain)
{
    struct run_cfg rc = {.max_seqs = 1, .max_tokens_step = 2048, .chunked = true};
    spec_equals_plain(64, rc, 1, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_greedy_batch16_prefix_equals_plain)
{
    struct run_cfg rc = {.max_seqs = N_REQ, .max_tokens_step = 96, .chunked = true, .prefix = true};
    spec_equals_plain(N_REQ * 12, rc, N_REQ, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_greedy_unchunked_equals_plain)
{
    struct run_cfg rc = {.max_seqs = N_REQ, .max_tokens_step = 2048, .chunked = false};
    spec_equals_plain(N_REQ * 12, rc, N_REQ, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_greedy_preemption_equals_plain)
{
    uint64_t pre = 0;
    struct run_cfg rc = {.max_seqs = N_REQ, .max_tokens_step = 64, .chunked = true, .prefix = true};
    spec_equals_plain(24, rc, N_REQ, 0.0f, NULL, &pre);
    if (test_shared_path("models/tinyllamas/stories260K.gguf")) ck_assert_uint_gt(pre, 0);
}
END_TEST

START_TEST(test_spec_sampled_equals_plain)
{
    /* n-gram proposals are a point mass: each row is drawn as without speculation, from the same
     * seeded stream, so even sampled output is token for token the same */
    struct run_cfg rc = {.max_seqs = N_REQ, .max_tokens_step = 128, .chunked = true};
    spec_equals_plain(N_REQ * 12, rc, N_REQ, 0.7f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_stop_string_inside_burst)
{
    /* request 3 repeats "excited to go to the park with her mom", which lookup proposes whole:
     * the stop string ends inside an accepted burst and nothing past it is emitted */
    struct run_cfg rc = {.max_seqs = 4, .max_tokens_step = 2048, .chunked = true};
    spec_equals_plain(64, rc, 4, 0.0f, "so excited to go to the park with her mom", NULL);
}
END_TEST

START_TEST(test_spec_cancel_frees_blocks)
{
    struct env e;
    if (!env_open(&e, 64)) return;
    struct run_cfg rc = {.max_seqs = 4,
                         .max_tokens_step = 2048,
                         .chunked = true,
                         .method = SPEC_METHOD_NGRAM,
                         .k = 8};
    env_sched(&e, &rc);
    int32_t ids[2][128];
    add(&e, 0, ids[0], make_prompt(0, ids[0]), 200, 0.0f, NULL);
    add(&e, 1, ids[1], make_prompt(1, ids[1]), 200, 0.0f, NULL);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_gt(e.out[0].n_tokens, 0);
    sched_stop_all(e.s, SCHED_FINISH_ABORT);
    ck_assert(sched_idle(e.s));
    ck_assert_int_eq(kv_cache_blocks_used(e.kv), 0);
    env_close(&e);
}
END_TEST

START_TEST(test_spec_bad_config)
{
    struct env e;
    if (!env_open(&e, 16)) return;
    struct sched_config c = {.max_num_seqs = 4,
                             .max_num_batched_tokens = 64,
                             .chunked_prefill = true,
                             .max_context = CTX};
    spec_config_default(&c.spec);
    c.spec.method = SPEC_METHOD_NGRAM;
    c.spec.num_tokens = SPEC_MAX_TOKENS + 1;
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    ck_assert_ptr_null(e.s);
    env_close(&e);
}
END_TEST

/* The text of a call after the trigger "the": ` {"n": ` 1 to 3 digits `}`, whole (complete) or
 * a prefix of it (cut at max_tokens). */
static bool lazy_call_ok(const char *s, size_t n, bool complete)
{
    const char *head = " {\"n\": ";
    size_t k = strlen(head), i = 0;
    for (; i < n && i < k; i++)
        if (s[i] != head[i]) return false;
    if (i < k) return !complete;
    size_t d = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, d++;
    if (d > 3 || (i < n && (d == 0 || s[i] != '}'))) return false;
    if (i == n) return !complete;
    return i + 1 == n;
}

/* tool_choice "auto"'s lazy grammar: the free text is speculated on like any other, the trigger
 * ("the", spelled by whatever tokens the story uses: often inside a token) then switches the
 * grammar on, and a run in which it fires ends at the masked row after it. With and without
 * n-gram speculation, greedy and sampled, in a pool small enough to preempt: the same tokens; every
 * answer is free text without the trigger, or free text, the trigger, and the grammar's call. */
START_TEST(test_spec_lazy_grammar_equals_plain)
{
    struct env e;
    if (!env_open(&e, 48)) return;
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_new(e.tok, &v), 0);
    const char *gbnf = "root ::= \"the\" \" {\\\"n\\\": \" [0-9]{1,3} \"}\"\n";
    char err[256];
    ck_assert_msg(grammar_compile(gbnf, strlen(gbnf), v, &add_grammar, err, sizeof(err)) == 0, "%s",
                  err);
    add_lazy = (struct grammar_lazy){.n = 1};
    add_lazy.t[0] = (struct grammar_trigger){.text = "the", .len = 3, .token = -1};
    static struct out plain[N_REQ], spec[N_REQ];
    int triggered = 0, free_only = 0;
    uint64_t drafts = 0, preempted = 0;
    for (int pass = 0; pass < 2; pass++) {
        float temp = pass ? 1.0f : 0.0f;
        struct sched_stats st0, st1;
        struct run_cfg rc = {.max_seqs = N_REQ, .max_tokens_step = 2048, .chunked = true};
        run_all(&e, &rc, N_REQ, temp, NULL, plain, &st0);
        rc.method = SPEC_METHOD_NGRAM;
        rc.k = 5;
        run_all(&e, &rc, N_REQ, temp, NULL, spec, &st1);
        expect_same(plain, spec, N_REQ, false);
        drafts += st1.spec.drafts;
        preempted += st0.preemptions + st1.preemptions;
        for (int r = 0; r < N_REQ; r++) {
            const struct out *o = &spec[r];
            const char *t = memmem(o->text, o->len, "the", 3);
            if (!t) {
                ck_assert_int_eq(o->finish, SCHED_FINISH_LENGTH);
                free_only++;
                continue;
            }
            size_t at = (size_t)(t - o->text) + 3;
            bool stop = o->finish == SCHED_FINISH_STOP;
            ck_assert_msg(stop || o->finish == SCHED_FINISH_LENGTH, "request %d", r);
            ck_assert_msg(lazy_call_ok(o->text + at, o->len - at, stop), "request %d: %.*s", r,
                          (int)o->len, o->text);
            triggered += stop;
        }
    }
    ck_assert_int_gt(triggered, 0);
    ck_assert_uint_gt(drafts, 0);
    fprintf(stderr, "lazy grammar: %d calls, %d free answers, %llu drafts, %llu preemptions\n",
            triggered, free_only, (unsigned long long)drafts, (unsigned long long)preempted);
    grammar_unref(add_grammar);
    add_grammar = NULL;
    add_lazy = (struct grammar_lazy){0};
    grammar_vocab_free(v);
    env_close(&e);
}
END_TEST

/* ---------------------------------------------------------------- cross-request n-gram pool */

/* Prompt r of the pool tests: BOS and 24 ids that do not repeat (nothing for the sequence's own
 * lookup to find at first: what the pool holds is what it gets). */
static int make_pool_prompt(int r, int32_t *ids)
{
    ids[0] = 1;
    for (int i = 1; i <= 24; i++) ids[i] = (int32_t)(3 + (unsigned)(r * 37 + i * 11) % 500);
    return 25;
}

/* One round of the n_req pool prompts (max_tokens 60 - r, greedy), the order shifted by `shift`;
 * with max_seqs 1 one after the other (each finished before the next is added). */
static void pool_round(struct env *e, int n_req, int shift, bool sequential, struct out *out)
{
    int32_t ids[N_REQ][32];
    memset(e->out, 0, sizeof(e->out));
    for (int i = 0; i < n_req; i++) {
        int r = (i + shift) % n_req;
        add(e, r, ids[r], make_pool_prompt(r, ids[r]), 60 - r, 0.0f, NULL);
        if (sequential) run_to_idle(e);
    }
    run_to_idle(e);
    memcpy(out, e->out, sizeof(e->out[0]) * (size_t)n_req);
}

/* Three rounds of the same requests in one scheduler with the n-gram pool, the order shifted each
 * round (so the pool also proposes other requests' continuations, which verification must
 * reject): every output token for token and log-prob for log-prob the one without speculation,
 * the pool consulted and its proposals accepted (fixed k), no block left. */
static void pool_equals_plain(int max_seqs, uint64_t pool_bytes, bool adaptive)
{
    struct env e;
    if (!env_open(&e, 256)) return;
    struct run_cfg rc = {.max_seqs = max_seqs,
                         .max_tokens_step = 2048,
                         .chunked = true,
                         .ngram_min = 3,
                         .ngram_max = 4};
    static struct out plain[N_REQ], spec[N_REQ];
    struct sched_stats st;
    int n_req = max_seqs == 1 ? 6 : N_REQ;
    rc.method = SPEC_METHOD_NONE;
    env_sched(&e, &rc);
    pool_round(&e, n_req, 0, max_seqs == 1, plain);
    sched_free(e.s);
    rc.method = SPEC_METHOD_NGRAM;
    rc.k = 5;
    rc.adaptive = adaptive;
    rc.pool_bytes = pool_bytes;
    env_sched(&e, &rc);
    for (int round = 0; round < 3; round++) {
        pool_round(&e, n_req, round, max_seqs == 1, spec);
        expect_same(plain, spec, n_req, true);
    }
    sched_stats(e.s, &st);
    if (!adaptive) {
        ck_assert_uint_gt(st.spec.pool_hits, 0);
        ck_assert_uint_ge(st.spec.pool_tokens, st.spec.pool_hits);
        ck_assert_uint_gt(st.spec.accepted, 0);
    }
    ck_assert_uint_le(st.spec.accepted, st.spec.draft_tokens);
    env_close(&e);
}

START_TEST(test_spec_pool_greedy_alone_equals_plain)
{
    pool_equals_plain(1, 1u << 20, false);
    pool_equals_plain(1, 1u << 20, true);
}
END_TEST

START_TEST(test_spec_pool_greedy_batch16_equals_plain)
{
    pool_equals_plain(N_REQ, 1u << 20, false);
}
END_TEST

/* The smallest pool: slots overwritten all the time, collisions everywhere; still exact. */
START_TEST(test_spec_pool_tiny_pool_equals_plain)
{
    pool_equals_plain(N_REQ, SPEC_POOL_MIN_BYTES, false);
}
END_TEST

/* Without the pool the same runs never count a pool hit; a pool for a draft method is refused. */
START_TEST(test_spec_pool_off_and_bad_config)
{
    struct env e;
    if (!env_open(&e, 64)) return;
    struct run_cfg rc = {.max_seqs = 4,
                         .max_tokens_step = 2048,
                         .chunked = true,
                         .method = SPEC_METHOD_NGRAM,
                         .k = 5,
                         .ngram_min = 3,
                         .ngram_max = 4};
    static struct out o[N_REQ];
    struct sched_stats st;
    run_all(&e, &rc, 4, 0.0f, NULL, o, &st);
    ck_assert_uint_eq(st.spec.pool_hits, 0);
    struct sched_config c = {.max_num_seqs = 4,
                             .max_num_batched_tokens = 64,
                             .chunked_prefill = true,
                             .max_context = CTX};
    spec_config_default(&c.spec);
    c.spec.method = SPEC_METHOD_NGRAM;
    c.spec.ngram_pool_bytes = 10; /* below SPEC_POOL_MIN_BYTES */
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    ck_assert_ptr_null(e.s);
    env_close(&e);
}
END_TEST

/* ---------------------------------------------------------------- draft model */

#define DRAFT_Q8  "models/tinyllamas/stories260K-Q8_0.gguf"
#define DRAFT_Q4  "models/tinyllamas/stories260K-Q4_0.gguf"
#define DRAFT_F32 "models/tinyllamas/stories260K.gguf"

START_TEST(test_spec_draft_greedy_alone_equals_plain)
{
    struct run_cfg rc = {
        .max_seqs = 1, .max_tokens_step = 2048, .chunked = true, .draft = DRAFT_Q8};
    spec_equals_plain(64, rc, 1, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_draft_self_accepts_everything)
{
    struct run_cfg rc = {.max_seqs = N_REQ,
                         .max_tokens_step = 96,
                         .chunked = true,
                         .prefix = true,
                         .draft = DRAFT_F32};
    spec_equals_plain(N_REQ * 12, rc, N_REQ, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_draft_greedy_batch16_prefix_equals_plain)
{
    struct run_cfg rc = {.max_seqs = N_REQ,
                         .max_tokens_step = 96,
                         .chunked = true,
                         .prefix = true,
                         .draft = DRAFT_Q8};
    spec_equals_plain(N_REQ * 12, rc, N_REQ, 0.0f, NULL, NULL);
}
END_TEST

START_TEST(test_spec_draft_greedy_preemption_equals_plain)
{
    /* 16-token steps: prompts prefill in chunks, and the draft catches up in chunks too */
    uint64_t pre = 0;
    struct run_cfg rc = {.max_seqs = N_REQ,
                         .max_tokens_step = 16,
                         .chunked = true,
                         .prefix = true,
                         .draft = DRAFT_Q8};
    spec_equals_plain(24, rc, N_REQ, 0.0f, NULL, &pre);
    if (test_shared_path(DRAFT_Q8)) ck_assert_uint_gt(pre, 0);
}
END_TEST

START_TEST(test_spec_draft_stop_string_and_unchunked)
{
    struct run_cfg rc = {
        .max_seqs = 4, .max_tokens_step = 2048, .chunked = false, .draft = DRAFT_Q4};
    spec_equals_plain(64, rc, 4, 0.0f, "so excited to go to the park with her mom", NULL);
}
END_TEST

/* Sampled with a draft: not the same tokens as without (the rule draws differently), but every
 * request runs to its exact length, proposals are verified and both pools end empty. */
START_TEST(test_spec_draft_sampled_runs_clean)
{
    struct env e;
    if (!env_open(&e, N_REQ * 12)) return;
    if (!env_open_draft(&e, DRAFT_Q4, N_REQ * 12)) {
        env_close(&e);
        return;
    }
    static struct out out[N_REQ];
    struct sched_stats st;
    struct run_cfg rc = {.max_seqs = N_REQ,
                         .max_tokens_step = 128,
                         .chunked = true,
                         .prefix = true,
                         .method = SPEC_METHOD_DRAFT,
                         .k = 4};
    run_all(&e, &rc, N_REQ, 0.8f, NULL, out, &st);
    for (int r = 0; r < N_REQ; r++) {
        ck_assert_int_eq(out[r].finish, SCHED_FINISH_LENGTH);
        ck_assert_int_eq(out[r].n_tokens, 60 - r);
        ck_assert_int_eq(out[r].events_after_finish, 0);
    }
    ck_assert_uint_gt(st.spec.draft_tokens, 0);
    ck_assert_uint_gt(st.spec.accepted, 0);
    ck_assert_uint_lt(st.spec.accepted, st.spec.draft_tokens);
    env_close(&e);
}
END_TEST

START_TEST(test_spec_draft_cancel_frees_both_pools)
{
    struct env e;
    if (!env_open(&e, 64)) return;
    if (!env_open_draft(&e, DRAFT_Q8, 64)) {
        env_close(&e);
        return;
    }
    struct run_cfg rc = {.max_seqs = 4,
                         .max_tokens_step = 2048,
                         .chunked = true,
                         .method = SPEC_METHOD_DRAFT,
                         .k = 6};
    env_sched(&e, &rc);
    int32_t ids[3][128];
    for (int r = 0; r < 3; r++) add(&e, r, ids[r], make_prompt(r, ids[r]), 200, 0.0f, NULL);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(sched_step(e.s), 0);
    ck_assert_int_gt(e.out[0].n_tokens, 0);
    ck_assert_int_gt(kv_cache_blocks_used(e.dkv), 0);
    /* one cancelled mid-run: its draft blocks go back at the next step */
    int before = kv_cache_blocks_used(e.dkv);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_uint_gt(st.spec.draft_tokens, 0);
    sched_stop_all(e.s, SCHED_FINISH_ABORT);
    ck_assert(sched_idle(e.s));
    ck_assert_int_lt(kv_cache_blocks_used(e.dkv), before);
    ck_assert_int_eq(kv_cache_blocks_used(e.dkv), 0);
    ck_assert_int_eq(kv_cache_blocks_used(e.kv), 0);
    env_close(&e);
}
END_TEST

/* The last logits row of `m` over ids (a scratch pool), copied to out. */
static void last_row(struct model *m, const int32_t *ids, int n, float *out)
{
    struct kv_cache *kv;
    struct kv_cache_config kc = {8, BS, 1, 8};
    ck_assert_int_eq(kv_cache_new(&kc, &kv), 0);
    ck_assert_int_eq(model_kv_init(m, kv), 0);
    int seq;
    ck_assert_int_eq(kv_cache_seq_open(kv, &seq), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, seq, n, NULL), 0);
    struct model_batch_entry e = {seq, 0, n, ids, MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, 1);
    memcpy(out, logits, (size_t)model_hparams(m)->n_vocab * sizeof(float));
    kv_cache_seq_close(kv, seq);
    kv_cache_free(kv);
}

/* The rejection rule with a real draft: the target stories260K's next-token distribution after a
 * fixed context, the Q4_0 copy's as q (through a sampler with the same parameters, as the
 * scheduler's draft computes it): emitted tokens follow p, accepted ones min(p, q), corrected
 * ones the residual (chi-square, false-failure rate < 1e-6 each). */
START_TEST(test_spec_draft_rejection_rule_real_q)
{
    struct env e;
    if (!env_open(&e, 16)) return;
    if (!env_open_draft(&e, DRAFT_Q4, 16)) {
        env_close(&e);
        return;
    }
    int nv = model_hparams(e.m)->n_vocab;
    float *lt = malloc((size_t)nv * sizeof(float)), *ld = malloc((size_t)nv * sizeof(float));
    float *q = malloc((size_t)nv * sizeof(float));
    ck_assert(lt && ld && q);
    int32_t ids[128];
    int n = make_prompt(1, ids);
    last_row(e.m, ids, n, lt);
    last_row(e.dm, ids, n, ld);
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.seed = 3;
    sp.temperature = 1.5f; /* a wide p: many tokens in play */
    sp.top_p = 0.98f;
    struct sampler *ds;
    ck_assert_int_eq(sampler_new(&sp, nv, &ds), 0);
    ck_assert_int_eq(sampler_probs(ds, ld, q), 0);
    sampler_free(ds);
    check_rule(&sp, nv, lt, q, "stories260K, Q4_0 draft, T 1.5 top-p 0.98");
    free(lt);
    free(ld);
    free(q);
    env_close(&e);
}
END_TEST

START_TEST(test_spec_draft_vocab_check)
{
    struct env e;
    if (!env_open(&e, 16)) return;
    const char *smol = test_shared_path("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    char err[256] = "";
    if (smol) {
        struct model_options o;
        model_options_default(&o);
        o.n_threads = 1;
        struct model *other;
        ck_assert_msg(model_load(smol, &o, &other, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(spec_draft_check_vocab(e.m, other, err, sizeof(err)), ERR_INVAL);
        ck_assert_msg(strstr(err, "tokens") != NULL, "%s", err);
        /* a scheduler refuses it too */
        struct sched_config c = {.max_num_seqs = 4,
                                 .max_num_batched_tokens = 64,
                                 .chunked_prefill = true,
                                 .max_context = CTX,
                                 .draft = other,
                                 .draft_kv = e.kv};
        spec_config_default(&c.spec);
        c.spec.method = SPEC_METHOD_DRAFT;
        ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
        model_free(other);
    }
    /* the same vocabulary in another quantisation passes */
    if (env_open_draft(&e, DRAFT_Q8, 16))
        ck_assert_int_eq(spec_draft_check_vocab(e.dm, e.m, err, sizeof(err)), 0);
    /* a draft method without a draft model */
    struct sched_config c = {.max_num_seqs = 4,
                             .max_num_batched_tokens = 64,
                             .chunked_prefill = true,
                             .max_context = CTX};
    spec_config_default(&c.spec);
    c.spec.method = SPEC_METHOD_DRAFT;
    ck_assert_int_eq(sched_new(&c, e.m, e.kv, e.tok, on_event, &e, &e.s), ERR_INVAL);
    ck_assert_ptr_null(e.s);
    env_close(&e);
}
END_TEST

/* The target's and the draft's pools sized as serve sizes them from one --kv-cache-bytes
 * (kv_cache_blocks_for_pools): what the two backends commit (model_kv_block_bytes per block)
 * stays within the budget, and one more block each would not. */
START_TEST(test_spec_draft_kv_pools_within_budget)
{
    struct env e;
    if (!env_open(&e, 16)) return;
    if (!env_open_draft(&e, DRAFT_Q8, 16)) {
        env_close(&e);
        return;
    }
    const uint64_t budgets[] = {1u << 20, 3000000, 777777};
    for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
        uint64_t pt[2] = {model_kv_bytes_per_token(e.m, QUANT_F16),
                          model_kv_bytes_per_token(e.dm, QUANT_F16)};
        int64_t n = kv_cache_blocks_for_pools(budgets[i], pt, 2, BS);
        ck_assert_int_gt(n, 0);
        struct kv_cache_config kc = {(int)n, BS, N_REQ, CTX / BS};
        struct kv_cache *kt = NULL, *kd = NULL;
        ck_assert_int_eq(kv_cache_new(&kc, &kt), 0);
        ck_assert_int_eq(kv_cache_new(&kc, &kd), 0);
        ck_assert_int_eq(model_kv_init(e.m, kt), 0);
        ck_assert_int_eq(model_kv_init(e.dm, kd), 0);
        uint64_t per_block = model_kv_block_bytes(e.m) + model_kv_block_bytes(e.dm);
        ck_assert_uint_eq(per_block, (uint64_t)BS * (pt[0] + pt[1]));
        ck_assert_uint_le((uint64_t)n * per_block, budgets[i]);
        ck_assert_uint_gt((uint64_t)(n + 1) * per_block, budgets[i]);
        /* back to the env's own pools before freeing these */
        ck_assert_int_eq(model_kv_init(e.m, e.kv), 0);
        ck_assert_int_eq(model_kv_init(e.dm, e.dkv), 0);
        kv_cache_free(kt);
        kv_cache_free(kd);
    }
    env_close(&e);
}
END_TEST

Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_spec_ngram_propose_copies_what_followed);
    tcase_add_test(tc, test_spec_ngram_propose_longest_then_latest);
    tcase_add_test(tc, test_spec_ngram_propose_no_match);
    tcase_add_test(tc, test_spec_pool_insert_and_propose);
    tcase_add_test(tc, test_spec_pool_rejects_bad_bounds);
    tcase_add_test(tc, test_spec_pool_evicts_within_bound);
    tcase_add_test(tc, test_spec_pool_collisions_never_propose_wrong);
    tcase_add_test(tc, test_spec_config_valid_and_names);
    tcase_add_test(tc, test_spec_verify_rejection_rule_keeps_distribution);
    tcase_add_test(tc, test_spec_sampler_probs_matches_draws);
    tcase_add_test(tc, test_spec_draw_inverse_cdf);
    tcase_add_test(tc, test_spec_ctl_plan_follows_cost_and_acceptance);
    tcase_add_test(tc, test_spec_ctl_plan_costs_draft_steps);
    tcase_add_test(tc, test_spec_ctl_converges_with_context_growth);
    tcase_add_test(tc, test_spec_cost_level_keeps_the_shape);
    tcase_add_test(tc, test_spec_accept_estimate_and_decay);
    tcase_add_test(tc, test_spec_greedy_alone_equals_plain);
    tcase_add_test(tc, test_spec_greedy_batch16_prefix_equals_plain);
    tcase_add_test(tc, test_spec_greedy_unchunked_equals_plain);
    tcase_add_test(tc, test_spec_greedy_preemption_equals_plain);
    tcase_add_test(tc, test_spec_sampled_equals_plain);
    tcase_add_test(tc, test_spec_stop_string_inside_burst);
    tcase_add_test(tc, test_spec_cancel_frees_blocks);
    tcase_add_test(tc, test_spec_bad_config);
    tcase_add_test(tc, test_spec_lazy_grammar_equals_plain);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("pool");
    tcase_set_timeout(tp, 600);
    tcase_add_test(tp, test_spec_pool_greedy_alone_equals_plain);
    tcase_add_test(tp, test_spec_pool_greedy_batch16_equals_plain);
    tcase_add_test(tp, test_spec_pool_tiny_pool_equals_plain);
    tcase_add_test(tp, test_spec_pool_off_and_bad_config);
    suite_add_tcase(s, tp);
    TCase *td = tcase_create("draft");
    tcase_set_timeout(td, 600);
    tcase_add_test(td, test_spec_draft_greedy_alone_equals_plain);
    tcase_add_test(td, test_spec_draft_self_accepts_everything);
    tcase_add_test(td, test_spec_draft_greedy_batch16_prefix_equals_plain);
    tcase_add_test(td, test_spec_draft_greedy_preemption_equals_plain);
    tcase_add_test(td, test_spec_draft_stop_string_and_unchunked);
    tcase_add_test(td, test_spec_draft_sampled_runs_clean);
    tcase_add_test(td, test_spec_draft_cancel_frees_both_pools);
    tcase_add_test(td, test_spec_draft_rejection_rule_real_q);
    tcase_add_test(td, test_spec_draft_vocab_check);
    tcase_add_test(td, test_spec_draft_kv_pools_within_budget);
    suite_add_tcase(s, td);
    return s;
}
