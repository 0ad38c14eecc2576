/* cinfer-engine bench: prompt-processing and generation throughput of a model, llama-bench style.
 * For each batch size B: pp = one sequence's prompt of P tokens in one forward step (tokens/s);
 * tg = B sequences decoding G tokens each from an empty context, one token per sequence per step
 * (aggregate generated tokens/s), after each has prefilled --depth tokens (untimed; llama-bench's
 * -d), so attention over a realistic context is part of the decode cost. Medians over --repetitions
 * runs after a warm-up. Prints a table and one JSON line per configuration on stdout, and with
 * --profile each configuration's prefill and decode step op by op (model_profile_attach). Each
 * decoding sequence picks its next token with the engine's sampler (engine/sched/sampler.h) at
 * --temperature / --top-p, so sampling costs what it costs in serving. Synthetic token ids: no
 * tokenizer involved. With --speculative (the flags serve and generate take: cmd_spec.h) the tg
 * measurement runs through the serving scheduler instead (engine/sched/scheduler.h), which
 * speculates as serve does, and reports the proposals verified and accepted; its step's own
 * bookkeeping is then part of the decode cost. */
#include "engine/cmd/cmd.h"
#include "engine/cmd/cmd_spec.h"

#include "common/clock.h"
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/sched/sampler.h"
#include "engine/sched/scheduler.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_BATCHES 16
#define BENCH_MAX_REPS    25

struct bench_cfg {
    const char *model, *batches, *kv_type, *backend, *log_level, *log_format;
    int prompt_tokens, gen_tokens, depth, threads, reps, device;
    double temperature, top_p;
    bool profile, no_lanes;
    struct cmd_spec_flags sp;
};

#define O(f) offsetof(struct bench_cfg, f)
static const struct cfg_opt bench_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model file", NULL, CFG_REQUIRED},
    {"prompt-tokens", CFG_INT, O(prompt_tokens), "512", 1, 65536,
     "Prompt length for the prefill measurement", NULL, 0},
    {"gen-tokens", CFG_INT, O(gen_tokens), "128", 1, 65536, "Tokens generated per sequence", NULL,
     0},
    {"depth", CFG_INT, O(depth), "0", 0, 65536,
     "Context each decoding sequence prefills (untimed) before generating", NULL, 0},
    {"batch", CFG_STRING, O(batches), "1,4,16", 1, 0,
     "Comma-separated numbers of sequences decoding together", NULL, 0},
    {"threads", CFG_INT, O(threads), "0", 0, 1024, "Compute threads; 0 = all cores", NULL, 0},
    {"repetitions", CFG_INT, O(reps), "3", 1, BENCH_MAX_REPS, "Runs per configuration (median)",
     NULL, 0},
    {"temperature", CFG_DOUBLE, O(temperature), "0", 0, 100,
     "Sampling temperature of the decoding sequences (0: greedy)", NULL, 0},
    {"top-p", CFG_DOUBLE, O(top_p), "1", 0, 1, "Nucleus sampling threshold (1: off)", NULL, 0},
    {"kv-type", CFG_STRING, O(kv_type), "f16", 1, 0, "KV cache element type", MODEL_KV_TYPE_NAMES,
     0},
    {"backend", CFG_STRING, O(backend), NULL, 1, 0, "Compute backend (default: best available)",
     "cpu|cuda", 0},
    {"device", CFG_INT, O(device), "0", 0, 1024, "CUDA device index (see CUDA_VISIBLE_DEVICES)",
     NULL, 0},
    {"profile", CFG_BOOL, O(profile), "false", 1, 0,
     "Also print where prefill and decode steps spend their time, op by op (each op is synced)",
     NULL, 0},
    {"no-lanes", CFG_BOOL, O(no_lanes), "false", 1, 0,
     "Run every step op by op over all threads, never split into per-thread lanes (A/B)", NULL, 0},
    CMD_SPEC_OPTS(struct bench_cfg, sp),
    CLI_LOG_OPTS(struct bench_cfg),
};
#undef O

static const struct cfg_spec bench_spec = {
    .program = "cinfer-engine bench",
    .summary = "Measure prefill and decode throughput of a GGUF model",
    .env_prefix = "CINFER_ENGINE_",
    .opts = bench_opts,
    .n_opts = sizeof(bench_opts) / sizeof(bench_opts[0]),
};

/* CPU seconds used by all threads of this process. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Resident set size of this process in bytes (0 if /proc is unavailable). */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, res = 0;
    int n = fscanf(f, "%llu %llu", &size, &res);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)res * (uint64_t)page : 0;
}

static int parse_batches(const char *s, int *out, int *n_out)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || n == BENCH_MAX_BATCHES) return ERR_INVAL;
        out[n++] = (int)v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return ERR_INVAL;
    }
    if (n == 0) return ERR_INVAL;
    *n_out = n;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct bench {
    const struct bench_cfg *cfg;
    struct model *m;
    struct kv_cache *kv;
    int n_vocab;
    int32_t *ids; /* (max(P, B)) token scratch */
    struct model_batch_entry *entries;
    int *seqs;
    struct sampler **smp; /* (max batch) one per decoding sequence */
    int n_threads;        /* for the CPU-time estimate */
    double last_cpu;      /* process CPU seconds of the last measured run */
    /* --profile: the timed prefill and decode steps of the current configuration */
    struct model_profile prof_pp, prof_tg;
    /* --speculative: the scheduler of the current configuration (over kv, and the draft model
     * with its pool draft_kv), the tokens each sequence of a run generated, and the run's timed
     * part: tokens, proposals verified and accepted */
    struct spec_config spec;
    struct model *draft;
    struct kv_cache *draft_kv;
    struct sched *sched;
    long *generated;
    bool timing;
    long timed_tokens;
    uint64_t timed_proposed, timed_accepted;
};

/* Reserves n positions of the empty sequence `seq` and writes its prompt, synthetic token ids that
 * differ per `variant`, into b->ids and *e (one prefill entry). */
static int bench_prompt(struct bench *b, int seq, int variant, int n, struct model_batch_entry *e)
{
    struct kv_cache_copy cp;
    int rc = kv_cache_seq_append(b->kv, seq, n, &cp);
    if (rc) return rc;
    for (int i = 0; i < n; i++)
        b->ids[i] =
            (int32_t)((i * 7919u + (unsigned)variant * 104729u + 13u) % (unsigned)b->n_vocab);
    *e = (struct model_batch_entry){seq, 0, n, b->ids, MODEL_LOGITS_LAST};
    return 0;
}

/* Prefill of n tokens on one fresh sequence; returns seconds or a negative error. With `prof`, its
 * op times go there. */
static double bench_pp(struct bench *b, int n, struct model_profile *prof)
{
    int seq, rc;
    double dt = 0;
    struct model_batch_entry e;
    const float *logits;
    int rows;
    if ((rc = kv_cache_seq_open(b->kv, &seq))) return rc;
    if ((rc = bench_prompt(b, seq, 0, n, &e))) goto out;
    model_profile_attach(b->m, prof);
    double t0 = clock_mono_s(), c0 = cpu_s();
    rc = model_forward(b->m, b->kv, &e, 1, &logits, &rows);
    dt = clock_mono_s() - t0;
    model_profile_attach(b->m, NULL);
    b->last_cpu = cpu_s() - c0;
out:
    kv_cache_seq_close(b->kv, seq);
    return rc ? rc : dt;
}

/* Prefills `depth` tokens into sequence seq (prompt variant s): the untimed context of a decode run. */
static int bench_fill(struct bench *b, int seq, int s, int depth)
{
    struct model_batch_entry e;
    const float *logits;
    int rows;
    int rc = bench_prompt(b, seq, s, depth, &e);
    return rc ? rc : model_forward(b->m, b->kv, &e, 1, &logits, &rows);
}

/* n_seq sequences decode n_gen tokens each after `depth` tokens of context; returns seconds or an
 * error. With `prof`, the decode steps' op times go there. */
static double bench_tg(struct bench *b, int n_seq, int depth, int n_gen, struct model_profile *prof)
{
    int rc = 0, opened = 0;
    double t0 = 0, dt = 0, c0 = 0;
    for (; opened < n_seq; opened++) {
        if ((rc = kv_cache_seq_open(b->kv, &b->seqs[opened]))) goto out;
        if (depth > 0 && (rc = bench_fill(b, b->seqs[opened], opened, depth))) goto out;
    }
    for (int s = 0; s < n_seq; s++) {
        b->ids[s] = (int32_t)((s * 31u + 1u) % (unsigned)b->n_vocab);
        sampler_reset(b->smp[s]);
    }
    model_profile_attach(b->m, prof);
    t0 = clock_mono_s();
    c0 = cpu_s();
    for (int step = 0; step < n_gen; step++) {
        for (int s = 0; s < n_seq; s++) {
            struct kv_cache_copy cp;
            if ((rc = kv_cache_seq_append(b->kv, b->seqs[s], 1, &cp))) goto out;
            b->entries[s] = (struct model_batch_entry){b->seqs[s], depth + step, 1, &b->ids[s],
                                                       MODEL_LOGITS_LAST};
        }
        const float *logits;
        int rows;
        if ((rc = model_forward(b->m, b->kv, b->entries, n_seq, &logits, &rows))) goto out;
        for (int s = 0; s < n_seq; s++) {
            struct sampler_result r;
            if ((rc = sampler_sample(b->smp[s], logits + (size_t)s * b->n_vocab, &r))) goto out;
            b->ids[s] = r.token;
        }
    }
    dt = clock_mono_s() - t0;
    b->last_cpu = cpu_s() - c0;
out:
    model_profile_attach(b->m, NULL);
    for (int s = 0; s < opened; s++) kv_cache_seq_close(b->kv, b->seqs[s]);
    return rc ? rc : dt;
}

/* The scheduler's events during a --speculative run: counts each sequence's tokens. */
static void bench_on_event(void *ctx, const struct sched_event *ev)
{
    struct bench *b = ctx;
    if (!ev->has_token || ev->prompt_token) return;
    b->generated[(intptr_t)ev->ud]++;
    if (b->timing) b->timed_tokens++;
}

/* bench_tg through the scheduler (--speculative): n_seq requests of `depth` context tokens plus
 * the first input token each generate n_gen tokens (ignore_eos, the bench's sampling, seed per
 * sequence). Untimed until every sequence has its first token (its prefill is done), then timed
 * until all finish: the n_seq x (n_gen - 1) tokens of that part (b->timed_tokens) and the
 * proposals verified and accepted in it. Seconds or an error. */
static double bench_tg_sched(struct bench *b, int n_seq, int depth, int n_gen)
{
    const struct bench_cfg *c = b->cfg;
    int rc = 0;
    struct sched_request rq = {
        .prompt = b->ids, .n_prompt = depth + 1, .max_tokens = n_gen, .ignore_eos = true};
    sampler_params_default(&rq.sampling);
    rq.sampling.temperature = (float)c->temperature;
    rq.sampling.top_p = (float)c->top_p;
    for (int s = 0; s < n_seq; s++) {
        for (int i = 0; i < depth; i++)
            b->ids[i] = (int32_t)((i * 7919u + (unsigned)s * 104729u + 13u) % (unsigned)b->n_vocab);
        b->ids[depth] = (int32_t)((s * 31u + 1u) % (unsigned)b->n_vocab);
        rq.sampling.seed = (uint64_t)s + 1;
        rq.ud = (void *)(intptr_t)s;
        b->generated[s] = 0;
        struct sched_seq *h;
        if ((rc = sched_add(b->sched, &rq, &h))) return rc;
    }
    b->timing = false;
    b->timed_tokens = 0;
    for (int s = 0; s < n_seq && !rc; s++)
        while (b->generated[s] == 0 && !rc) rc = sched_step(b->sched);
    struct sched_stats s0, s1;
    sched_stats(b->sched, &s0);
    b->timing = true;
    double t0 = clock_mono_s(), c0 = cpu_s();
    while (!rc && !sched_idle(b->sched)) rc = sched_step(b->sched);
    double dt = clock_mono_s() - t0;
    b->last_cpu = cpu_s() - c0;
    b->timing = false;
    sched_stats(b->sched, &s1);
    b->timed_proposed = s1.spec.draft_tokens - s0.spec.draft_tokens;
    b->timed_accepted = s1.spec.accepted - s0.spec.accepted;
    if (!rc && b->timed_tokens != (long)n_seq * (n_gen - 1)) rc = ERR_BAD_STATE;
    return rc ? rc : dt;
}

/* Sizes the KV pool for this batch: the prefill sequence or n_seq generating ones. */
static int bench_kv(struct bench *b, int n_seq)
{
    int bs = KV_CACHE_DEFAULT_BLOCK_SIZE, P = b->cfg->prompt_tokens;
    int G = b->cfg->depth + b->cfg->gen_tokens + 1; /* + 1: the scheduler's first input token */
    int per_pp = (P + bs - 1) / bs, per_tg = (G + bs - 1) / bs;
    int n_blocks = per_pp > n_seq * per_tg ? per_pp : n_seq * per_tg;
    struct kv_cache_config kc = {n_blocks, bs, n_seq, per_pp > per_tg ? per_pp : per_tg};
    sched_free(b->sched);
    b->sched = NULL;
    kv_cache_free(b->kv);
    kv_cache_free(b->draft_kv);
    b->kv = b->draft_kv = NULL;
    int rc = kv_cache_new(&kc, &b->kv);
    if (!rc) rc = model_kv_init(b->m, b->kv);
    if (rc || b->spec.method == SPEC_METHOD_NONE) return rc;
    if (b->draft &&
        ((rc = kv_cache_new(&kc, &b->draft_kv)) || (rc = model_kv_init(b->draft, b->draft_kv))))
        return rc;
    /* every prefill in one step, so the timed part holds only decodes */
    int64_t step = (int64_t)n_seq * (b->cfg->depth + 1);
    struct sched_config sc = {
        .max_num_seqs = n_seq,
        .max_num_batched_tokens = step < 2048        ? 2048
                                  : step > (1 << 20) ? 1 << 20
                                                     : (int)step,
        .chunked_prefill = true,
        .max_context = G,
        .spec = b->spec,
        .draft = b->draft,
        .draft_kv = b->draft_kv,
    };
    return sched_new(&sc, b->m, b->kv, NULL, bench_on_event, b, &b->sched);
}

/* Milliseconds per step and share of the step of each kind of op, prefill then decode; what no op
 * accounts for (step bookkeeping, host work between ops) is "unattributed". */
static void bench_profile_print(const struct bench *b, int n_seq)
{
    const struct model_profile *pp = &b->prof_pp, *tg = &b->prof_tg;
    if (pp->steps == 0 || tg->steps == 0) return;
    double pp_step = pp->step_seconds / (double)pp->steps,
           tg_step = tg->step_seconds / (double)tg->steps;
    printf(
        "# profile, batch %d: prefill step %.2f ms (%d tokens), decode step %.3f ms (%d tokens)\n",
        n_seq, pp_step * 1e3, b->cfg->prompt_tokens, tg_step * 1e3, n_seq);
    if (tg->lanes > 1) /* lanes run side by side: their ops' times would overlap */
        printf("#   decode steps ran as %d lanes; the op times are lane 0's\n", tg->lanes);
    printf("#   %-14s %12s %8s %12s %8s\n", "op", "prefill_ms", "share", "decode_ms", "share");
    double pp_sum = 0, tg_sum = 0;
    for (int k = 0; k < MODEL_OP_COUNT; k++) {
        double a = pp->seconds[k] / (double)pp->steps, d = tg->seconds[k] / (double)tg->steps;
        pp_sum += a;
        tg_sum += d;
        if (pp->calls[k] == 0 && tg->calls[k] == 0) continue;
        printf("#   %-14s %12.3f %7.1f%% %12.3f %7.1f%%\n", model_op_name((enum model_op)k),
               a * 1e3, 100.0 * a / pp_step, d * 1e3, 100.0 * d / tg_step);
    }
    printf("#   %-14s %12.3f %7.1f%% %12.3f %7.1f%%\n", "unattributed", (pp_step - pp_sum) * 1e3,
           100.0 * (pp_step - pp_sum) / pp_step, (tg_step - tg_sum) * 1e3,
           100.0 * (tg_step - tg_sum) / tg_step);
}

static int bench_config(struct bench *b, int n_seq, const char *type_name)
{
    const struct bench_cfg *c = b->cfg;
    int rc = bench_kv(b, n_seq);
    if (rc) return rc;
    /* Warm-up: fault the weights in and size the scratch buffers. */
    bool spec = b->sched != NULL;
    double w1 = bench_pp(b, c->prompt_tokens, NULL),
           w2 = spec ? bench_tg_sched(b, n_seq, 0, 2) : bench_tg(b, n_seq, 0, 2, NULL);
    if (w1 < 0) return (int)w1;
    if (w2 < 0) return (int)w2;
    /* Wall-clock rates are the result; rates per CPU second x threads estimate what an idle
     * machine would do when other processes compete for the cores (see BENCHMARKS.md). */
    double pp[BENCH_MAX_REPS], tg[BENCH_MAX_REPS], ppc[BENCH_MAX_REPS], tgc[BENCH_MAX_REPS];
    b->prof_pp = (struct model_profile){0};
    b->prof_tg = (struct model_profile){0};
    struct model_profile *ppp = c->profile ? &b->prof_pp : NULL,
                         *tgp = c->profile ? &b->prof_tg : NULL;
    uint64_t proposed = 0, accepted = 0;
    long spec_tokens = 0;
    for (int r = 0; r < c->reps; r++) {
        double a = bench_pp(b, c->prompt_tokens, ppp), a_cpu = b->last_cpu;
        if (a < 0) return (int)a;
        if (spec) model_profile_attach(b->m, tgp);
        double d = spec ? bench_tg_sched(b, n_seq, c->depth, c->gen_tokens)
                        : bench_tg(b, n_seq, c->depth, c->gen_tokens, tgp),
               d_cpu = b->last_cpu;
        if (spec) model_profile_attach(b->m, NULL);
        if (d < 0) return (int)d;
        /* the scheduler's timed part starts after each sequence's first token */
        double gen = spec ? (double)b->timed_tokens : (double)n_seq * c->gen_tokens;
        proposed += b->timed_proposed;
        accepted += b->timed_accepted;
        spec_tokens += b->timed_tokens;
        pp[r] = c->prompt_tokens / a;
        tg[r] = gen / d;
        ppc[r] = c->prompt_tokens / (a_cpu / b->n_threads);
        tgc[r] = gen / (d_cpu / b->n_threads);
    }
    double pp_m = median(pp, c->reps), tg_m = median(tg, c->reps);
    double ppc_m = median(ppc, c->reps), tgc_m = median(tgc, c->reps);
    uint64_t rss = rss_bytes();
    printf("%-6s %6d %8d %12.2f %8d %12.2f %10.1f %12.2f %12.2f\n", type_name, n_seq,
           c->prompt_tokens, pp_m, c->gen_tokens, tg_m, (double)rss / (1024.0 * 1024.0), ppc_m,
           tgc_m);
    /* acceptance over every timed run: proposals verified, accepted, and tokens per sequence
     * step (each step of a sequence emits 1 + its accepted proposals) */
    double rate = proposed ? (double)accepted / (double)proposed : 0.0;
    double per_step = spec_tokens > (long)accepted
                          ? (double)spec_tokens / (double)(spec_tokens - (long)accepted)
                          : 1.0;
    if (spec)
        printf("# speculative %s, batch %d: proposed %llu, accepted %llu (rate %.3f), %.3f tokens "
               "per sequence step\n",
               spec_method_name(b->spec.method), n_seq, (unsigned long long)proposed,
               (unsigned long long)accepted, rate, per_step);
    printf("{\"batch\":%d,\"prompt_tokens\":%d,\"depth\":%d,\"temperature\":%g,"
           "\"top_p\":%g,\"pp_tok_s\":%.2f,\"tg_tok_s\":%.2f,\"rss_bytes\":%llu",
           n_seq, c->prompt_tokens, c->depth, c->temperature, c->top_p, pp_m, tg_m,
           (unsigned long long)rss);
    if (spec)
        printf(",\"speculative\":\"%s\",\"num_speculative_tokens\":%d,\"spec_adaptive\":%s,"
               "\"spec_proposed\":%llu,\"spec_accepted\":%llu,\"spec_accept_rate\":%.4f,"
               "\"spec_tokens_per_step\":%.4f",
               spec_method_name(b->spec.method), b->spec.num_tokens,
               b->spec.adaptive ? "true" : "false", (unsigned long long)proposed,
               (unsigned long long)accepted, rate, per_step);
    printf("}\n");
    if (c->profile) bench_profile_print(b, n_seq);
    fflush(stdout);
    return 0;
}

/* Type of the model's first attention matrix, as a short name for the table. */
static const char *model_type_name(const struct model *m)
{
    const struct gguf_tensor *t = gguf_find_tensor(model_gguf(m), "blk.0.attn_q.weight");
    return t ? quant_type_name(t->type) : "?";
}

int cmd_bench_main(int argc, char **argv)
{
    struct bench_cfg c;
    struct cfg_result res;
    memset(&c, 0, sizeof(c));
    enum cli_parse_result pr = cli_parse(&bench_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", c.log_level, c.log_format);
    int batches[BENCH_MAX_BATCHES], n_batches = 0;
    if (parse_batches(c.batches, batches, &n_batches)) {
        fprintf(stderr,
                "cinfer-engine bench: --batch: expected comma-separated sizes 1..4096, "
                "at most %d\n",
                BENCH_MAX_BATCHES);
        return 2;
    }
    int max_b = 0;
    for (int i = 0; i < n_batches; i++) max_b = batches[i] > max_b ? batches[i] : max_b;
    struct bench b = {.cfg = &c};
    char spec_err[256];
    if (cmd_spec_resolve(&c.sp, &b.spec, spec_err, sizeof(spec_err)) != 0) {
        fprintf(stderr, "cinfer-engine bench: %s\n", spec_err);
        return 2;
    }
    if (b.spec.method != SPEC_METHOD_NONE && c.gen_tokens < 2) {
        fprintf(stderr, "cinfer-engine bench: --speculative needs --gen-tokens 2 or more (the "
                        "first token of each sequence comes from its untimed prefill)\n");
        return 2;
    }

    int status = 1;
    char err[600] = "";
    struct model_options mo;
    model_options_default(&mo);
    mo.backend = c.backend;
    mo.device = c.device;
    mo.n_threads = c.threads;
    model_kv_type_parse(c.kv_type, &mo.kv_type); /* the option's choices admit only known names */
    mo.no_lanes = c.no_lanes;
    int rc = model_load(c.model, &mo, &b.m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "cinfer-engine bench: %s: %s\n", c.model, err);
        goto out;
    }
    if (b.spec.method == SPEC_METHOD_DRAFT &&
        (rc = cmd_spec_draft_load(&c.sp, &mo, b.m, &b.draft, err, sizeof(err))) != 0) {
        fprintf(stderr, "cinfer-engine bench: %s\n", err);
        goto out;
    }
    b.n_vocab = model_hparams(b.m)->n_vocab;
    b.n_threads = c.threads > 0 ? c.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (b.n_threads < 1) b.n_threads = 1;
    int n_ids = c.prompt_tokens > max_b ? c.prompt_tokens : max_b;
    if (c.depth + 1 > n_ids) n_ids = c.depth + 1;
    b.ids = calloc((size_t)n_ids, sizeof(*b.ids));
    b.entries = calloc((size_t)max_b, sizeof(*b.entries));
    b.seqs = calloc((size_t)max_b, sizeof(*b.seqs));
    b.smp = calloc((size_t)max_b, sizeof(*b.smp));
    b.generated = calloc((size_t)max_b, sizeof(*b.generated));
    if (!b.ids || !b.entries || !b.seqs || !b.smp || !b.generated) {
        fprintf(stderr, "cinfer-engine bench: out of memory\n");
        goto out;
    }
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.temperature = (float)c.temperature;
    sp.top_p = (float)c.top_p;
    for (int i = 0; i < max_b; i++) {
        sp.seed = (uint64_t)i + 1;
        if ((rc = sampler_new(&sp, b.n_vocab, &b.smp[i]))) {
            fprintf(stderr, "cinfer-engine bench: sampler: %s\n", err_str(rc));
            goto out;
        }
    }
    const struct model_hparams *hp = model_hparams(b.m);
    printf("# %s: %s, %d layers, dim %d, ffn %d, vocab %d, %.1f MiB of weights per token, "
           "threads %d, decode depth %d, temperature %g, top-p %g, speculative %s\n",
           c.model, model_type_name(b.m), hp->n_layer, hp->n_embd, hp->n_ff, hp->n_vocab,
           (double)model_weight_bytes(b.m) / (1024.0 * 1024.0), b.n_threads, c.depth, c.temperature,
           c.top_p, spec_method_name(b.spec.method));
    printf("%-6s %6s %8s %12s %8s %12s %10s %12s %12s\n", "type", "batch", "pp", "pp_tok_s", "tg",
           "tg_tok_s", "rss_MiB", "pp_cpu_tok_s", "tg_cpu_tok_s");
    for (int i = 0; i < n_batches; i++) {
        if ((rc = bench_config(&b, batches[i], model_type_name(b.m)))) {
            fprintf(stderr, "cinfer-engine bench: batch %d: %s\n", batches[i], err_str(rc));
            goto out;
        }
    }
    status = 0;
out:
    for (int i = 0; b.smp && i < max_b; i++) sampler_free(b.smp[i]);
    free(b.smp);
    free(b.ids);
    free(b.entries);
    free(b.seqs);
    free(b.generated);
    sched_free(b.sched);
    kv_cache_free(b.kv);
    kv_cache_free(b.draft_kv);
    model_free(b.draft);
    model_free(b.m);
    return status;
}
