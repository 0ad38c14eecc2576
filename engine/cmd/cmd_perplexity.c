/* cinfer-engine perplexity: the perplexity of a GGUF model over a text file (llama.cpp's
 * llama-perplexity scores windows of n_ctx; this scores one sequence over the whole text), with
 * the full cache or with sink-window eviction (engine/kv/kv_window.h), so the quality cost of a
 * window is measured, not guessed. Every token after the first is scored from the logits of the
 * one before: ppl = exp(mean -log p(token | everything the cache holds)). The text runs in chunks
 * of --chunk tokens (LOGITS_ALL); before each chunk a sink-window sequence drops the blocks its
 * policy names. Mode none needs the whole text within the model's context. Prints one line of
 * key=value results on stdout. Not a benchmark of speed (the seconds are informational). */
#include "engine/cmd/cmd.h"

#include "common/buf.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_window.h"
#include "engine/model/model.h"
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPL_MAX_FILE (64u << 20) /* --file limit */

struct ppl_cfg {
    const char *model, *file, *kv_eviction, *kv_type, *backend;
    const char *log_level, *log_format;
    int sink_tokens, window_tokens, chunk, max_tokens, score_from, threads;
};

#define O(f) offsetof(struct ppl_cfg, f)
static const struct cfg_opt ppl_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model file", NULL, CFG_REQUIRED},
    {"file", CFG_STRING, O(file), NULL, 1, 0, "Text to score (UTF-8, at most 64 MiB)", NULL,
     CFG_REQUIRED},
    {"kv-eviction", CFG_STRING, O(kv_eviction), "none", 1, 0,
     "KV eviction: none (the whole text must fit the context) or sink-window (StreamingLLM)",
     KV_WINDOW_MODE_NAMES, 0},
    {"kv-sink-tokens", CFG_INT, O(sink_tokens), "4", 0, KV_WINDOW_MAX_TOKENS,
     "sink-window: first tokens always kept (rounded up to whole KV blocks of 16)", NULL, 0},
    {"kv-window-tokens", CFG_INT, O(window_tokens), "1024", 1, KV_WINDOW_MAX_TOKENS,
     "sink-window: most recent tokens kept at least", NULL, 0},
    {"chunk", CFG_INT, O(chunk), "16", 1, 4096, "Tokens per forward step", NULL, 0},
    {"max-tokens", CFG_INT, O(max_tokens), "0", 0, INT32_MAX,
     "Score only the text's first N tokens; 0 = all", NULL, 0},
    {"score-from", CFG_INT, O(score_from), "0", 0, INT32_MAX,
     "Also report the perplexity of the tokens from this index on (ppl_tail)", NULL, 0},
    {"kv-type", CFG_STRING, O(kv_type), "f16", 1, 0, "KV cache element type", MODEL_KV_TYPE_NAMES,
     0},
    {"threads", CFG_INT, O(threads), "0", 0, 1024, "Compute threads; 0 = all cores", NULL, 0},
    {"backend", CFG_STRING, O(backend), NULL, 1, 0, "Compute backend (default: best available)",
     NULL, 0},
    CLI_LOG_OPTS(struct ppl_cfg),
};
#undef O

static const struct cfg_spec ppl_spec = {
    .program = "cinfer-engine perplexity",
    .summary = "Perplexity of a model over a text, full KV cache or sink-window eviction",
    .env_prefix = "CINFER_ENGINE_",
    .opts = ppl_opts,
    .n_opts = sizeof(ppl_opts) / sizeof(ppl_opts[0]),
};

struct ppl_result {
    double nll, nll_tail; /* sums of -log p */
    long scored, scored_tail;
    int evictions, max_blocks, max_len;
};

/* -log softmax(row)[target], in double. */
static double token_nll(const float *row, int n_vocab, int target)
{
    double mx = row[0];
    for (int i = 1; i < n_vocab; i++)
        if (row[i] > mx) mx = row[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)row[i] - mx);
    return log(sum) + mx - (double)row[target];
}

/* Runs tokens[0..n) through one sequence of kv in chunks, evicting as w says before each. */
static int ppl_run(struct model *m, struct kv_cache *kv, const int32_t *tok, int n,
                   const struct ppl_cfg *c, const struct kv_window *w, struct ppl_result *r)
{
    int seq, rc = kv_cache_seq_open(kv, &seq);
    if (rc) return rc;
    int n_vocab = model_hparams(m)->n_vocab;
    for (int done = 0; done < n && rc == 0;) {
        int ev = 0, len = n - done < c->chunk ? n - done : c->chunk;
        if ((rc = model_kv_window_evict(m, kv, seq, w, &ev))) break;
        r->evictions += ev > 0;
        int pos = kv_cache_seq_len(kv, seq);
        struct kv_cache_copy cp;
        if ((rc = kv_cache_seq_append(kv, seq, len, &cp))) break;
        struct model_batch_entry e = {seq, pos, len, tok + done, MODEL_LOGITS_ALL};
        const float *logits;
        int rows;
        if ((rc = model_forward(m, kv, &e, 1, &logits, &rows))) break;
        for (int i = 0; i < len && done + i + 1 < n; i++) {
            double nll = token_nll(logits + (size_t)i * n_vocab, n_vocab, tok[done + i + 1]);
            r->nll += nll;
            r->scored++;
            if (done + i + 1 >= c->score_from) {
                r->nll_tail += nll;
                r->scored_tail++;
            }
        }
        if (kv_cache_blocks_used(kv) > r->max_blocks) r->max_blocks = kv_cache_blocks_used(kv);
        if (kv_cache_seq_len(kv, seq) > r->max_len) r->max_len = kv_cache_seq_len(kv, seq);
        done += len;
    }
    kv_cache_seq_close(kv, seq);
    return rc;
}

int cmd_perplexity_main(int argc, char **argv)
{
    struct ppl_cfg c;
    struct cfg_result res;
    struct model *m = NULL;
    struct tokenizer *t = NULL;
    struct kv_cache *kv = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct buf file;
    char err[512];
    int status = 1, rc;

    enum cli_parse_result pr = cli_parse(&ppl_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    buf_init(&file, PPL_MAX_FILE);
    cli_log_setup("engine", c.log_level, c.log_format);
    struct kv_window w = {KV_WINDOW_NONE, c.sink_tokens, c.window_tokens};
    kv_window_mode_parse(c.kv_eviction, &w.mode); /* the option's choices admit only these */

    if ((rc = buf_append_file(&file, c.file))) {
        fprintf(stderr, "cinfer-engine perplexity: %s: %s\n", c.file,
                rc == ERR_TOO_BIG ? "larger than 64 MiB"
                : rc == ERR_IO    ? strerror(errno)
                                  : err_str(rc));
        goto out;
    }
    struct model_options mo;
    model_options_default(&mo);
    mo.backend = c.backend;
    mo.n_threads = c.threads;
    model_kv_type_parse(c.kv_type, &mo.kv_type);
    if ((rc = model_load(c.model, &mo, &m, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine perplexity: %s: %s\n", c.model, err);
        goto out;
    }
    if ((rc = tokenizer_load(model_gguf(m), &t, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine perplexity: %s: %s\n", c.model, err);
        goto out;
    }
    if ((rc = tokenizer_encode(t, file.data ? file.data : "", file.len, true, false, &ids,
                               &n_ids))) {
        fprintf(stderr, "cinfer-engine perplexity: %s: %s\n", c.file, err_str(rc));
        goto out;
    }
    int n = c.max_tokens > 0 && (size_t)c.max_tokens < n_ids ? c.max_tokens : (int)n_ids;
    if (n < 2) {
        fprintf(stderr, "cinfer-engine perplexity: %s: %d tokens; at least 2 are needed\n", c.file,
                n);
        goto out;
    }
    int bs = KV_CACHE_DEFAULT_BLOCK_SIZE, n_ctx = model_hparams(m)->n_ctx_train;
    long cap = n; /* tokens the one sequence holds at most */
    if (w.mode == KV_WINDOW_NONE) {
        if (n > n_ctx) {
            fprintf(stderr,
                    "cinfer-engine perplexity: %s: %d tokens exceed the model's context of %d; "
                    "use --max-tokens or --kv-eviction sink-window\n",
                    c.file, n, n_ctx);
            goto out;
        }
    } else {
        cap = kv_window_max_tokens(&w, bs, c.chunk);
        if ((rc = kv_window_check(&w, bs, n_ctx, c.chunk, err, sizeof(err)))) {
            fprintf(stderr, "cinfer-engine perplexity: %s (the model's context)\n", err);
            goto out;
        }
        if (!model_kv_shift_supported(m)) {
            fprintf(stderr,
                    "cinfer-engine perplexity: the %s backend cannot re-rotate KV blocks "
                    "(no block I/O): sink-window needs the CPU backend\n",
                    model_backend(m)->ops->name);
            goto out;
        }
    }
    int blocks = (int)((cap + bs - 1) / bs) + 1;
    struct kv_cache_config kc = {blocks, bs, 1, blocks};
    if ((rc = kv_cache_new(&kc, &kv)) || (rc = model_kv_init(m, kv))) {
        fprintf(stderr, "cinfer-engine perplexity: KV cache of %d blocks: %s\n", blocks,
                err_str(rc));
        goto out;
    }
    struct ppl_result r = {0};
    double t0 = clock_mono_s();
    if ((rc = ppl_run(m, kv, ids, n, &c, &w, &r))) {
        fprintf(stderr, "cinfer-engine perplexity: forward: %s\n", err_str(rc));
        goto out;
    }
    double dt = clock_mono_s() - t0;
    printf("tokens=%d scored=%ld ppl=%.4f", n, r.scored, exp(r.nll / (double)r.scored));
    if (r.scored_tail > 0)
        printf(" ppl_tail=%.4f tail_from=%d", exp(r.nll_tail / (double)r.scored_tail),
               c.score_from);
    printf(" kv_eviction=%s sink_tokens=%d window_tokens=%d kv_type=%s evictions=%d "
           "max_kv_tokens=%d max_kv_blocks=%d seconds=%.1f\n",
           kv_window_mode_name(w.mode), w.sink_tokens, w.window_tokens, c.kv_type, r.evictions,
           r.max_len, r.max_blocks, dt);
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    kv_cache_free(kv);
    free(ids);
    tokenizer_free(t);
    model_free(m);
    buf_fini(&file);
    return status;
}
