/* cinfer-engine generate: one prompt in, its continuation streamed to stdout. Writes only the
 * generated text on stdout (UTF-8-safe streaming detokenizer) and the timings on stderr; stops at
 * end-of-generation tokens, --max-tokens or the model's context length. Not the HTTP server.
 * With --spec ngram each step verifies up to --num-speculative-tokens prompt-lookup proposals
 * (engine/sched/spec.h) with the same sampler draws, so the output is the same either way; k is
 * chosen per step by the scheduler's controller (spec_ctl_plan) from the measured acceptance and
 * step cost, or fixed with --no-spec-adaptive. */
#include "engine/cmd/cmd.h"

#include "common/clock.h"
#include "common/buf.h"
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/sched/sampler.h"
#include "engine/cmd/cmd_spec.h"
#include "engine/sched/spec.h"
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GEN_MAX_PROMPT_IDS 1000000

struct gen_cfg {
    const char *model;
    const char *prompt;
    const char *prompt_tokens;
    const char *backend;
    int device;
    const char *kv_type;
    struct cmd_spec_flags sp;
    const char *log_level, *log_format;
    int max_tokens, threads, n_batch, n_ctx;
    int seed, top_k, repeat_last_n;
    double temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    bool output_ids, special, ignore_eos;
};

#define O(f) offsetof(struct gen_cfg, f)
static const struct cfg_opt gen_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model file", NULL, CFG_REQUIRED},
    {"prompt", CFG_STRING, O(prompt), NULL, 1, 0, "Prompt text (BOS added as the model asks)", NULL,
     0},
    {"prompt-tokens", CFG_STRING, O(prompt_tokens), NULL, 1, 0,
     "Prompt as comma-separated token ids instead of text (BOS included as given)", NULL, 0},
    {"max-tokens", CFG_INT, O(max_tokens), "128", 1, 1000000, "Tokens to generate at most", NULL,
     0},
    {"temperature", CFG_DOUBLE, O(temperature), "0.8", 0, 100, "Sampling temperature; 0 = greedy",
     NULL, 0},
    {"top-k", CFG_INT, O(top_k), "40", 0, 1000000, "Keep the k most likely tokens; 0 = off", NULL,
     0},
    {"top-p", CFG_DOUBLE, O(top_p), "0.95", 0, 1, "Nucleus sampling mass; 1 = off", NULL, 0},
    {"min-p", CFG_DOUBLE, O(min_p), "0.05", 0, 1, "Drop tokens below min-p x the best; 0 = off",
     NULL, 0},
    {"repeat-penalty", CFG_DOUBLE, O(repeat_penalty), "1.0", 0.01, 100,
     "Repetition penalty over the last repeat-last-n tokens; 1 = off", NULL, 0},
    {"repeat-last-n", CFG_INT, O(repeat_last_n), "64", -1, 1000000,
     "Penalty window in tokens; -1 = whole context", NULL, 0},
    {"presence-penalty", CFG_DOUBLE, O(presence_penalty), "0", -2, 2, "Presence penalty", NULL, 0},
    {"frequency-penalty", CFG_DOUBLE, O(frequency_penalty), "0", -2, 2, "Frequency penalty", NULL,
     0},
    {"seed", CFG_INT, O(seed), "-1", -1, INT32_MAX, "RNG seed; -1 = from the clock", NULL, 0},
    {"threads", CFG_INT, O(threads), "0", 0, 1024, "Compute threads; 0 = all cores", NULL, 0},
    {"batch-size", CFG_INT, O(n_batch), "512", 1, 65536, "Prompt tokens per forward step", NULL, 0},
    {"ctx-size", CFG_INT, O(n_ctx), "0", 0, INT32_MAX,
     "KV cache tokens; 0 = prompt + max-tokens (capped at the model's context)", NULL, 0},
    {"kv-type", CFG_STRING, O(kv_type), "f16", 1, 0, "KV cache element type", MODEL_KV_TYPE_NAMES,
     0},
    {"backend", CFG_STRING, O(backend), NULL, 1, 0, "Compute backend (default: best available)",
     "cpu|cuda", 0},
    {"device", CFG_INT, O(device), "0", 0, 1024, "CUDA device index (see CUDA_VISIBLE_DEVICES)",
     NULL, 0},
    {"output-ids", CFG_BOOL, O(output_ids), "false", 1, 0,
     "Print generated token ids (comma-separated) instead of text", NULL, 0},
    {"special", CFG_BOOL, O(special), "false", 1, 0, "Render control tokens' text", NULL, 0},
    {"ignore-eos", CFG_BOOL, O(ignore_eos), "false", 1, 0,
     "Keep generating past end-of-generation tokens", NULL, 0},
    CMD_SPEC_OPTS(struct gen_cfg, sp),
    CLI_LOG_OPTS(struct gen_cfg),
};
#undef O

static const struct cfg_spec gen_spec = {
    .program = "cinfer-engine generate",
    .summary = "Generate a continuation of a prompt with a GGUF model",
    .env_prefix = "CINFER_ENGINE_",
    .opts = gen_opts,
    .n_opts = sizeof(gen_opts) / sizeof(gen_opts[0]),
};

/* Parses "1, 2,3" into a new array (free()). ERR_INVAL with a message for anything else. */
static int parse_ids(const char *s, int n_vocab, int32_t **out, size_t *n_out)
{
    size_t n = 0, cap = 16;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids) return ERR_NOMEM;
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab || n >= GEN_MAX_PROMPT_IDS) {
            fprintf(stderr,
                    "cinfer-engine generate: --prompt-tokens: bad token id near \"%.20s\" "
                    "(ids are 0..%d, comma-separated)\n",
                    p, n_vocab - 1);
            free(ids);
            return ERR_INVAL;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, cap * 2 * sizeof(*ids));
            if (!g) {
                free(ids);
                return ERR_NOMEM;
            }
            ids = g;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "cinfer-engine generate: --prompt-tokens: unexpected \"%c\"\n", *p);
            free(ids);
            return ERR_INVAL;
        }
    }
    *out = ids;
    *n_out = n;
    return 0;
}

struct gen_state {
    const struct gen_cfg *cfg;
    struct model *m;
    struct tokenizer *tok;
    struct kv_cache *kv;
    struct sampler *smp;
    int seq;
    int n_vocab;
    enum spec_method spec;
    int32_t *hist; /* (n_ctx + SPEC_MAX_TOKENS + 1) prompt and generated tokens; with --spec */
    long spec_proposed, spec_accepted, steps;
    struct spec_cost cost;  /* step seconds against tokens: calibrated, then every step */
    struct spec_accept acc; /* this sequence's acceptance */
    /* --speculative draft: the draft model, its pool, the proposer and the sequence's state */
    struct model *dm;
    struct kv_cache *dkv;
    struct spec_draft *draft;
    struct spec_seq ds;
    struct spec_draft_job job; /* the last drafting run (k 0: none to commit) */
    struct spec_stats dst;
    struct sampler_params sp;
    float *vscratch; /* (n_vocab) the rejection rule's residual */
};

/* Proposals worth verifying now out of the `found` ones (spec_ctl_plan for one sequence). */
static int gen_spec_plan(struct gen_state *g, int found, int catchup)
{
    if (g->cfg->sp.no_adaptive) return found;
    uint64_t scratch[SPEC_MAX_TOKENS];
    struct spec_cand c = {
        .accept = spec_accept_estimate(&g->acc, 0.5f), .kmax = found, .catchup = catchup};
    struct spec_plan_in in = {.base_tokens = 1,
                              .n_decodes = 1,
                              .budget = found,
                              .target = &g->cost,
                              .draft = g->draft ? spec_draft_cost(g->draft) : NULL,
                              .adaptive = true};
    spec_ctl_plan(&in, &c, 1, scratch);
    if (c.k == 0) spec_accept_decay(&g->acc); /* fade, so lookup is tried again later */
    return c.k;
}

/* Appends n tokens to the sequence and runs them in one step. */
static int gen_step(struct gen_state *g, const int32_t *ids, int n, enum model_logits want,
                    const float **logits)
{
    struct kv_cache_copy cp;
    int pos = kv_cache_seq_len(g->kv, g->seq);
    int rc = kv_cache_seq_append(g->kv, g->seq, n, &cp);
    if (rc) return rc;
    struct model_batch_entry e = {g->seq, pos, n, ids, want};
    int rows;
    g->steps++;
    return model_forward(g->m, g->kv, &e, 1, logits, &rows);
}

static bool is_eog(const struct gen_state *g, int32_t id)
{
    if (g->cfg->ignore_eos) return false;
    if (g->tok) return tokenizer_is_eog(g->tok, id);
    uint32_t eos;
    return gguf_get_u32(model_gguf(g->m), "tokenizer.ggml.eos_token_id", &eos) == 0 &&
           (uint32_t)id == eos;
}

/* Writes the text (or id) of token `id` to stdout at once. */
static int emit(struct gen_state *g, struct tokenizer_detok *dt, struct buf *out, int32_t id,
                int n_emitted)
{
    int rc = 0;
    buf_reset(out);
    if (g->cfg->output_ids || !g->tok)
        rc = buf_printf(out, "%s%d", n_emitted ? "," : "", id);
    else
        rc = tokenizer_detok_push(dt, id, out);
    if (rc) return rc;
    if (out->len && (fwrite(out->data, 1, out->len, stdout) != out->len || fflush(stdout)))
        return ERR_IO;
    return 0;
}

static int gen_run(struct gen_state *g, const int32_t *prompt, int n_prompt)
{
    const struct gen_cfg *c = g->cfg;
    const float *logits = NULL;
    int rc = 0;
    double t0 = clock_mono_s();
    for (int i = 0; i < n_prompt; i += c->n_batch) {
        int n = n_prompt - i < c->n_batch ? n_prompt - i : c->n_batch;
        enum model_logits want = i + n == n_prompt ? MODEL_LOGITS_LAST : MODEL_LOGITS_NONE;
        if ((rc = gen_step(g, prompt + i, n, want, &logits))) return rc;
        if (shutdown_requested()) return ERR_CANCELLED;
    }
    double t1 = clock_mono_s();

    struct tokenizer_detok dt;
    memset(&dt, 0, sizeof(dt));
    if (g->tok) tokenizer_detok_init(&dt, g->tok, c->special);
    struct buf out;
    buf_init(&out, 0);
    int n_gen = 0, n_hist = n_prompt;
    int n_ctx = kv_cache_max_blocks_per_seq(g->kv) * kv_cache_block_size(g->kv);
    const char *stop = "max_tokens";
    /* logits holds `n_rows` rows: the next token's, then one after each of the proposals
     * hist[n_hist..n_hist + n_rows - 1) fed with the last token (rows - 1 of them) */
    int n_rows = 1, accepted = 0;
    if (g->hist) memcpy(g->hist, prompt, (size_t)n_prompt * sizeof(*prompt));
    while (n_gen < c->max_tokens) {
        int32_t last = -1;
        for (int i = 0; i < n_rows; i++) {
            struct sampler_result r;
            int32_t proposal = i + 1 < n_rows ? g->hist[n_hist] : -1;
            const float *row = logits + (size_t)i * (size_t)g->n_vocab;
            /* a sampled draft proposal comes with the distribution it was drawn from */
            const float *q = g->draft && g->sp.temperature > 0.0f && proposal >= 0
                                 ? g->ds.q + (size_t)i * (size_t)g->n_vocab
                                 : NULL;
            int v = spec_verify_row(g->smp, row, proposal, q, g->vscratch, &r);
            if (v < 0) {
                rc = v;
                goto out;
            }
            accepted += v == SPEC_ACCEPTED;
            last = r.token;
            if (is_eog(g, r.token)) {
                stop = "eos";
                goto done;
            }
            if ((rc = emit(g, &dt, &out, r.token, n_gen))) goto out;
            sampler_accept(g->smp, r.token);
            if (g->hist) g->hist[n_hist++] = r.token;
            n_gen++;
            if (n_gen == c->max_tokens) goto done;
            if (v != SPEC_ACCEPTED) break;
        }
        g->spec_accepted += accepted;
        spec_accept_update(&g->acc, n_rows - 1, accepted);
        if (g->draft) {
            spec_draft_commit(g->draft, &g->job, accepted); /* the draft's K/V: verified only */
            g->job.k = 0;
        }
        accepted = 0;
        /* the K/V of rejected proposals goes; the verified context stays */
        int verified = n_prompt + n_gen - 1; /* every token but `last` is computed */
        if ((rc = kv_cache_seq_truncate(g->kv, g->seq, verified))) goto out;
        if (verified >= n_ctx) {
            stop = "context_full";
            break;
        }
        if (shutdown_requested()) {
            stop = "interrupted";
            break;
        }
        int k = 0;
        if (g->spec == SPEC_METHOD_NGRAM) {
            int room = c->max_tokens - n_gen - 1;
            if (n_ctx - verified - 1 < room) room = n_ctx - verified - 1;
            if (c->sp.num_tokens < room) room = c->sp.num_tokens;
            k = room > 0 ? spec_ngram_propose(g->hist, n_hist, c->sp.ngram_min, c->sp.ngram_max,
                                              room, g->hist + n_hist)
                         : 0;
            if (k > 0) k = gen_spec_plan(g, k, 0);
            g->spec_proposed += k;
        } else if (g->spec == SPEC_METHOD_DRAFT) {
            int room = c->max_tokens - n_gen - 1;
            if (n_ctx - verified - 1 < room) room = n_ctx - verified - 1;
            if (c->sp.num_tokens < room) room = c->sp.num_tokens;
            int lag = n_hist - g->ds.d_computed;
            /* the plan costs the steady catch-up (at most the bonus token and the last); the
             * draft's first one, over the prompt, is a one-off prefill */
            k = room > 0 ? gen_spec_plan(g, room, lag < 2 ? lag : 2) : 0;
            if (k > 0) {
                /* hist[0..n_hist) is verified; the draft catches up and proposes after it */
                g->job = (struct spec_draft_job){&g->ds, &g->sp, g->hist, n_hist, lag, k};
                int refused = 0;
                if ((rc = spec_draft_run(g->draft, &g->job, 1, &g->dst, &refused))) goto out;
                k = g->job.k;
            }
            g->spec_proposed += k;
        }
        double ts = clock_mono_s();
        if (k == 0) {
            rc = gen_step(g, &last, 1, MODEL_LOGITS_LAST, &logits);
        } else {
            /* hist[n_hist - 1] is `last`, followed by the k proposals */
            rc = gen_step(g, g->hist + n_hist - 1, 1 + k, MODEL_LOGITS_ALL, &logits);
        }
        if (rc) goto out;
        spec_cost_observe(&g->cost, 1 + k, clock_mono_s() - ts);
        n_rows = 1 + k;
    }
done:
    g->spec_accepted += accepted; /* the last step's, ended by max_tokens or EOS */
    if (g->tok && !c->output_ids) {
        buf_reset(&out);
        if ((rc = tokenizer_detok_flush(&dt, &out))) goto out;
        if (out.len && fwrite(out.data, 1, out.len, stdout) != out.len) rc = ERR_IO;
        fflush(stdout);
    }
    double t2 = clock_mono_s();
    log_info("generation finished", LOG_I("prompt_tokens", n_prompt), LOG_F("prefill_s", t1 - t0),
             LOG_F("prefill_tok_s", n_prompt / (t1 - t0)), LOG_I("generated_tokens", n_gen),
             LOG_F("decode_s", t2 - t1),
             LOG_F("decode_tok_s", n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0), LOG_S("stop", stop),
             LOG_I("steps", g->steps), LOG_I("spec_proposed", g->spec_proposed),
             LOG_I("spec_accepted", g->spec_accepted),
             LOG_F("spec_acceptance",
                   g->spec_proposed ? (double)g->spec_accepted / (double)g->spec_proposed : 0.0));
out:
    buf_fini(&out);
    return rc;
}

/* Times steps of 1, 2, 4, .. 2K+2 tokens for the adaptive k (a context too short to time them
 * leaves the cost unknown: k stays 0 until real steps teach it). */
static int gen_spec_calibrate(struct gen_state *g)
{
    const struct gen_cfg *c = g->cfg;
    if (strcmp(c->sp.spec, "none") == 0 || c->sp.no_adaptive) return 0;
    int rc = spec_cost_calibrate(&g->cost, g->m, g->kv, 2 * c->sp.num_tokens + 2);
    if (rc == ERR_AGAIN) spec_cost_init(&g->cost);
    if (rc == 0)
        log_info("speculation: step cost calibrated",
                 LOG_F("t1_ms", spec_cost_estimate(&g->cost, 1) * 1e3),
                 LOG_F("t2_ms", spec_cost_estimate(&g->cost, 2) * 1e3),
                 LOG_F("t4_ms", spec_cost_estimate(&g->cost, 4) * 1e3),
                 LOG_F("t8_ms", spec_cost_estimate(&g->cost, 8) * 1e3));
    return rc == ERR_AGAIN ? 0 : rc;
}

/* --speculative draft: the draft model (vocabulary checked), a pool like the target's and the
 * proposer, its step cost calibrated like the target's. */
static int gen_draft_setup(struct gen_state *g, const struct model_options *mo,
                           const struct kv_cache_config *kc)
{
    const struct gen_cfg *c = g->cfg;
    char err[600] = "";
    int rc = cmd_spec_draft_load(&c->sp, mo, g->m, &g->dm, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "cinfer-engine generate: %s\n", err);
        return rc;
    }
    if ((rc = kv_cache_new(kc, &g->dkv)) || (rc = model_kv_init(g->dm, g->dkv)) ||
        (rc = spec_draft_new(g->dm, g->dkv, 1, &g->draft)))
        return rc;
    if (!(g->vscratch = malloc((size_t)g->n_vocab * sizeof(float)))) return ERR_NOMEM;
    if (c->sp.no_adaptive) return 0;
    rc = spec_cost_calibrate(spec_draft_cost(g->draft), g->dm, g->dkv, 2 * c->sp.num_tokens + 2);
    if (rc == ERR_AGAIN) spec_cost_init(spec_draft_cost(g->draft));
    /* while k is 0 the draft is not timed: its estimate follows the target's */
    spec_cost_link(spec_draft_cost(g->draft), &g->cost);
    return rc == ERR_AGAIN ? 0 : rc;
}

static int gen_prompt_ids(struct gen_state *g, int32_t **ids, size_t *n)
{
    const struct gen_cfg *c = g->cfg;
    if (c->prompt_tokens) return parse_ids(c->prompt_tokens, g->n_vocab, ids, n);
    if (!g->tok) {
        fprintf(stderr, "cinfer-engine generate: the model has no usable tokenizer; use "
                        "--prompt-tokens\n");
        return ERR_INVAL;
    }
    int rc = tokenizer_encode(g->tok, c->prompt, strlen(c->prompt), true, true, ids, n);
    if (rc) fprintf(stderr, "cinfer-engine generate: tokenizing the prompt: %s\n", err_str(rc));
    return rc;
}

static int gen_setup_sampler(struct gen_state *g)
{
    const struct gen_cfg *c = g->cfg;
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.temperature = (float)c->temperature;
    sp.top_k = c->top_k;
    sp.top_p = (float)c->top_p;
    sp.min_p = (float)c->min_p;
    sp.repeat_penalty = (float)c->repeat_penalty;
    sp.repeat_last_n = c->repeat_last_n;
    sp.presence_penalty = (float)c->presence_penalty;
    sp.frequency_penalty = (float)c->frequency_penalty;
    sp.seed = c->seed >= 0 ? (uint64_t)c->seed : (uint64_t)time(NULL) ^ (uint64_t)clock();
    g->sp = sp;
    return sampler_new(&sp, g->n_vocab, &g->smp);
}

int cmd_generate_main(int argc, char **argv)
{
    struct gen_cfg c;
    struct cfg_result res;
    memset(&c, 0, sizeof(c));
    enum cli_parse_result pr = cli_parse(&gen_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", c.log_level, c.log_format);
    struct spec_config spec;
    char spec_err[256];
    if (cmd_spec_resolve(&c.sp, &spec, spec_err, sizeof(spec_err)) != 0) {
        fprintf(stderr, "cinfer-engine generate: %s\n", spec_err);
        return 2;
    }
    if (!c.prompt == !c.prompt_tokens) {
        fprintf(stderr, "cinfer-engine generate: give exactly one of --prompt and "
                        "--prompt-tokens\n");
        return 2;
    }
    shutdown_install();

    int status = 1;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    char err[512] = "";
    struct gen_state g = {.cfg = &c};
    struct model_options mo;
    model_options_default(&mo);
    mo.backend = c.backend;
    mo.device = c.device;
    mo.n_threads = c.threads;
    model_kv_type_parse(c.kv_type, &mo.kv_type); /* the option's choices admit only known names */
    mo.n_ctx_seq = (int)c.n_ctx; /* long-rope models pick their factors by it (0: trained) */
    int rc = model_load(c.model, &mo, &g.m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "cinfer-engine generate: %s: %s\n", c.model, err);
        goto out;
    }
    const struct model_hparams *hp = model_hparams(g.m);
    g.n_vocab = hp->n_vocab;
    if ((rc = tokenizer_load(model_gguf(g.m), &g.tok, err, sizeof(err)))) {
        g.tok = NULL;
        if (!c.prompt_tokens || !c.output_ids) {
            fprintf(stderr, "cinfer-engine generate: %s\n", err);
            goto out;
        }
    }
    if (gen_prompt_ids(&g, &prompt, &n_prompt)) {
        status = c.prompt_tokens ? 2 : 1;
        goto out;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "cinfer-engine generate: the prompt has no tokens\n");
        status = 2;
        goto out;
    }
    int64_t n_ctx = c.n_ctx ? c.n_ctx : (int64_t)n_prompt + c.max_tokens;
    if (n_ctx > hp->n_ctx_train) n_ctx = hp->n_ctx_train;
    if ((int64_t)n_prompt >= n_ctx) {
        fprintf(stderr,
                "cinfer-engine generate: prompt of %zu tokens does not fit the context of "
                "%lld\n",
                n_prompt, (long long)n_ctx);
        goto out;
    }
    int bs = KV_CACHE_DEFAULT_BLOCK_SIZE;
    /* speculation's calibration times a few steps on a second, scratch sequence */
    struct kv_cache_config kc = {(int)((n_ctx + bs - 1) / bs), bs, 2, (int)((n_ctx + bs - 1) / bs)};
    spec_cost_init(&g.cost);
    if ((rc = kv_cache_new(&kc, &g.kv)) || (rc = model_kv_init(g.m, g.kv)) ||
        (rc = gen_spec_calibrate(&g)) || (rc = kv_cache_seq_open(g.kv, &g.seq)) ||
        (rc = gen_setup_sampler(&g))) {
        fprintf(stderr, "cinfer-engine generate: setting up: %s\n", err_str(rc));
        goto out;
    }
    for (size_t i = 0; i < n_prompt; i++) sampler_accept(g.smp, prompt[i]);
    g.spec = spec.method;
    if (g.spec == SPEC_METHOD_DRAFT && (rc = gen_draft_setup(&g, &mo, &kc)) != 0) {
        if (rc != ERR_INVAL) fprintf(stderr, "cinfer-engine generate: draft: %s\n", err_str(rc));
        goto out;
    }
    if (g.spec != SPEC_METHOD_NONE &&
        !(g.hist =
              malloc(((size_t)kc.n_blocks * (size_t)bs + SPEC_MAX_TOKENS + 1) * sizeof(*g.hist)))) {
        fprintf(stderr, "cinfer-engine generate: %s\n", err_str(ERR_NOMEM));
        goto out;
    }
    if ((rc = gen_run(&g, prompt, (int)n_prompt))) {
        fprintf(stderr, "cinfer-engine generate: %s\n", err_str(rc));
        goto out;
    }
    status = 0;
out:
    free(prompt);
    free(g.hist);
    spec_seq_fini(g.draft, &g.ds);
    spec_draft_free(g.draft);
    kv_cache_free(g.dkv);
    model_free(g.dm);
    free(g.vscratch);
    sampler_free(g.smp);
    kv_cache_free(g.kv);
    tokenizer_free(g.tok);
    model_free(g.m);
    return status;
}
