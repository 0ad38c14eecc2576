/* cinfer-engine serve: configuration table, model loading, and the serve lifecycle
 * (starting -> serving -> draining -> stopped). The HTTP surface is engine/serve/http_api.c, the OpenAI
 * handlers engine/serve/serve_api.c, the inference thread engine/serve/serve_loop.c and the responder
 * engine/serve/serve_respond.c; this file wires them together and owns their order of start and stop. */
#include "common/clock.h"
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "engine/api/chat_template.h"
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/serve/http_api.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/grammar/grammar.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_respond.h"
#include "engine/text/tokenizer.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SERVE_AUTO_KV_RAM_FRACTION 0.25 /* cap of the automatic KV budget */
#define SERVE_FLUSH_GRACE_MS       2000 /* after the loop stops: time to write the last bytes */

struct serve_cfg {
    const char *model;
    const char *host;
    int port;
    uint64_t max_body_bytes;
    const char *served_model_name;
    int shutdown_delay_s;
    int shutdown_timeout_s;
    int threads;
    int max_num_seqs;
    int max_num_batched_tokens;
    int block_size;
    int context_length;
    uint64_t kv_cache_bytes;
    const char *kv_type;
    bool no_prefix_caching;
    bool no_reasoning_parser;
    bool no_chunked_prefill;
    bool no_lanes;
    int max_queue;
    int request_timeout_s;
    const char *metrics_compat;
    const char *chat_template;
    const char *api_key;
    const char *allowed_origins;
    int http_keep_alive_s, http_header_timeout_s, max_connections, max_connections_per_client;
    const char *backend;
    const char *log_level, *log_format;
};

#define O(f) offsetof(struct serve_cfg, f)
static const struct cfg_opt serve_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model file to serve", NULL, CFG_REQUIRED},
    {"host", CFG_STRING, O(host), "127.0.0.1", 1, 0,
     "Address to listen on (IPv4/IPv6 literal, localhost, or 0.0.0.0 for every address)", NULL, 0},
    {"port", CFG_INT, O(port), "8000", 0, 65535,
     "TCP port for the HTTP API (0 picks a free port; the log line says which)", NULL, 0},
    {"max-body-bytes", CFG_SIZE, O(max_body_bytes), "1M", 1024, 1024.0 * 1024 * 1024,
     "Largest accepted request body; larger ones get 413", NULL, 0},
    {"served-model-name", CFG_STRING, O(served_model_name), NULL, 1, 0,
     "Model name in the API and the model_name metric label (default: the file name without "
     ".gguf)",
     NULL, 0},
    {"threads", CFG_INT, O(threads), "0", 0, 1024, "Compute threads; 0 = all cores", NULL, 0},
    {"max-num-seqs", CFG_INT, O(max_num_seqs), "64", 1, 4096,
     "Sequences in the running batch at once", NULL, 0},
    {"max-num-batched-tokens", CFG_INT, O(max_num_batched_tokens), "2048", 1, 1 << 20,
     "Tokens per forward step (decodes plus prefill chunks)", NULL, 0},
    {"block-size", CFG_INT, O(block_size), "16", 1, 1024, "Tokens per KV-cache block", NULL, 0},
    {"context-length", CFG_INT, O(context_length), "0", 0, 1 << 24,
     "Prompt + generated tokens per sequence; 0 = the model's training context", NULL, 0},
    {"kv-cache-bytes", CFG_SIZE, O(kv_cache_bytes), "0", 0, 1e15,
     "KV-cache memory; 0 = enough for max-num-seqs full contexts, at most a quarter of RAM", NULL,
     0},
    {"kv-type", CFG_STRING, O(kv_type), "f16", 1, 0, "KV-cache element type", MODEL_KV_TYPE_NAMES,
     0},
    {"no-prefix-caching", CFG_BOOL, O(no_prefix_caching), "false", 1, 0,
     "Do not reuse the KV of shared prompt prefixes across requests", NULL, 0},
    {"no-reasoning-parser", CFG_BOOL, O(no_reasoning_parser), "false", 1, 0,
     "Keep a thinking model's <think> block in content (no reasoning_content)", NULL, 0},
    {"no-chunked-prefill", CFG_BOOL, O(no_chunked_prefill), "false", 1, 0,
     "Prefill each prompt whole, in steps without decodes, instead of in chunks between decodes",
     NULL, 0},
    {"no-lanes", CFG_BOOL, O(no_lanes), "false", 1, 0,
     "Run every step op by op over all threads; never split a step of many decodes into one lane "
     "per thread",
     NULL, 0},
    {"max-queue", CFG_INT, O(max_queue), "1024", 1, 1 << 20,
     "Requests waiting for admission beyond which new ones get 429", NULL, 0},
    /* 600 s: the OpenAI SDKs' own default timeout (a non-streaming client has hung up by then),
     * and 4096 tokens at 7 tok/s, a 1B model's share of 2 cores among 16 streams; it bounds what
     * one request (n: 8, no max_tokens) can hold. README "Serving" says the same. */
    {"request-timeout", CFG_INT, O(request_timeout_s), "600", 0, 86400,
     "Seconds a request may take from arrival; then it ends with what it generated (finish_reason "
     "length); 0 = no limit",
     NULL, 0},
    {"metrics-compat", CFG_STRING, O(metrics_compat), "vllm", 1, 0,
     "Also expose every engine metric under vLLM's name", "vllm|none", 0},
    {"chat-template", CFG_STRING, O(chat_template), NULL, 1, 0,
     "Chat template to use instead of the model's: a built-in name (chatml, llama3, llama2, "
     "llama2-sys, mistral-v7, zephyr, ...), Jinja2 text, or a template file",
     NULL, 0},
    {"api-key", CFG_STRING, O(api_key), NULL, 1, 0,
     "Require \"Authorization: Bearer <key>\" on /v1 routes (prefer the environment variable "
     "CINFER_ENGINE_API_KEY: flags show in ps)",
     NULL, 0},
    {"allowed-origins", CFG_STRING, O(allowed_origins), NULL, 1, 0,
     "CORS: comma-separated origins browsers may call the API from (\"https://app.example.com\"), "
     "or \"*\" for any; default none",
     NULL, 0},
    {"http-keep-alive-timeout", CFG_INT, O(http_keep_alive_s), "60", 1, 3600,
     "Seconds an idle keep-alive connection stays open", NULL, 0},
    {"http-header-timeout", CFG_INT, O(http_header_timeout_s), "10", 1, 600,
     "Seconds a client has to send a whole request head (then 408)", NULL, 0},
    {"max-connections", CFG_INT, O(max_connections), "4096", 16, 1 << 20,
     "Open HTTP connections at once; over it a new one takes the place of the longest idle one",
     NULL, 0},
    {"max-connections-per-client", CFG_INT, O(max_connections_per_client), "1024", 1, 1 << 20,
     "Open HTTP connections from one client address (the same rule within it)", NULL, 0},
    {"backend", CFG_STRING, O(backend), NULL, 1, 0, "Compute backend (default: best available)",
     "cpu|cuda", 0},
    {"shutdown-delay-seconds", CFG_INT, O(shutdown_delay_s), "0", 0, 600,
     "After SIGTERM, keep serving (with /health at 503) this long before refusing new requests",
     NULL, 0},
    {"shutdown-timeout", CFG_INT, O(shutdown_timeout_s), "30", 0, 3600,
     "Then how long in-flight requests may take; those still running are ended (finish_reason "
     "length)",
     NULL, 0},
    CLI_LOG_OPTS(struct serve_cfg),
};
#undef O

static const struct cfg_spec serve_spec = {
    .program = "cinfer-engine serve",
    .summary = "Serve a GGUF model over an OpenAI-compatible HTTP API.",
    .env_prefix = "CINFER_ENGINE_",
    .opts = serve_opts,
    .n_opts = sizeof(serve_opts) / sizeof(serve_opts[0]),
};

/* Everything serve owns, released in reverse order by serve_teardown. */
struct serve_state {
    const struct serve_cfg *cfg;
    char model_name[256];
    struct http_api *http;
    struct model *m;
    struct tokenizer *tok;
    struct grammar_vocab *gvocab; /* constrained decoding's token trie (NULL without tok) */
    struct serve_api_grammars grammars;
    struct chat_template *chat;
    struct kv_cache *kv;
    struct serve_respond *resp;
    struct serve_loop *loop;
    struct serve_api api;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* "path/to/stories260K.gguf" -> "stories260K". */
static void default_model_name(const char *path, char *out, size_t outlen)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
    if (n == 0) base = "model", n = 5;
    if (n >= outlen) n = outlen - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

/* The KV pool of element type kt (the model's): the configured budget, or by default enough blocks
 * for max_num_seqs full contexts capped at a quarter of the memory the process may use (RAM or the
 * cgroup limit: kv_cache_ram_budget). Fails when one full context does not fit. */
static int serve_kv_setup(struct serve_state *s, int ctx, enum quant_type kt)
{
    const struct serve_cfg *c = s->cfg;
    uint64_t per_token = model_kv_bytes_per_token(s->m, kt);
    int bs = c->block_size;
    int64_t per_seq = (ctx + bs - 1) / bs;
    int64_t n_blocks;
    if (c->kv_cache_bytes) {
        n_blocks = kv_cache_blocks_for_budget(c->kv_cache_bytes, per_token, bs);
    } else {
        n_blocks = per_seq * c->max_num_seqs;
        uint64_t cap = kv_cache_ram_budget(SERVE_AUTO_KV_RAM_FRACTION);
        int64_t cap_blocks = cap ? kv_cache_blocks_for_budget(cap, per_token, bs) : n_blocks;
        if (cap_blocks < n_blocks) n_blocks = cap_blocks > per_seq ? cap_blocks : per_seq;
    }
    if (n_blocks < per_seq) {
        log_error("the KV-cache budget does not hold one full context; raise --kv-cache-bytes or "
                  "lower --context-length",
                  LOG_I("blocks", (long long)n_blocks), LOG_I("blocks_per_context", per_seq),
                  LOG_I("bytes_per_token", (long long)per_token));
        return ERR_INVAL;
    }
    if (n_blocks > INT32_MAX / bs) n_blocks = INT32_MAX / bs;
    struct kv_cache_config kc = {(int)n_blocks, bs, c->max_num_seqs, (int)per_seq};
    double t0 = clock_mono_s();
    int rc = kv_cache_new(&kc, &s->kv);
    if (!rc) rc = model_kv_init(s->m, s->kv);
    if (rc) {
        log_error("cannot allocate the KV cache", LOG_S("err", err_str(rc)),
                  LOG_I("blocks", n_blocks), LOG_I("bytes_per_token", (long long)per_token));
        return rc;
    }
    /* the backend commits the pool's memory, which takes a while for large pools: say how long */
    log_info("kv cache", LOG_I("blocks", n_blocks), LOG_I("block_size", bs),
             LOG_I("tokens", n_blocks * bs),
             LOG_I("bytes", (long long)((uint64_t)n_blocks * (uint64_t)bs * per_token)),
             LOG_F("alloc_s", clock_mono_s() - t0));
    return 0;
}

/* The chat template: --chat-template, else the model's tokenizer.chat_template (rendered by the
 * Jinja interpreter), else chatml with a warning. A template that cannot be used fails start-up. */
static int serve_chat_template(struct serve_state *s)
{
    struct gguf_str gs;
    char *model_tmpl = NULL, err[512];
    size_t len;
    if (gguf_get_str(model_gguf(s->m), "tokenizer.chat_template", &gs) == 0 &&
        !(model_tmpl = strndup(gs.data, gs.len))) {
        log_error("out of memory");
        return ERR_NOMEM;
    }
    struct chat_template_config cc = {.model_template = model_tmpl,
                                      .override = s->cfg->chat_template};
    if (s->tok) {
        int32_t bos = tokenizer_bos(s->tok), eos = tokenizer_eos(s->tok);
        const char *t;
        if (bos >= 0 && (t = tokenizer_token_text(s->tok, bos, &len)) && !memchr(t, 0, len))
            cc.bos_token = strndup(t, len);
        if (eos >= 0 && (t = tokenizer_token_text(s->tok, eos, &len)) && !memchr(t, 0, len))
            cc.eos_token = strndup(t, len);
        cc.add_bos = tokenizer_add_bos(s->tok);
        cc.add_eos = tokenizer_add_eos(s->tok);
    }
    int rc = chat_template_new(&cc, &s->chat, err, sizeof(err));
    if (rc)
        log_error("cannot use the chat template", LOG_S("err", err));
    else if (chat_template_origin(s->chat) == CHAT_TEMPLATE_FROM_FALLBACK)
        log_warn("the model has no chat template; using chatml (set --chat-template)");
    else
        log_info("chat template", LOG_S("template", chat_template_describe(s->chat)));
    free(model_tmpl);
    free((char *)cc.bos_token);
    free((char *)cc.eos_token);
    return rc;
}

/* Loads the model, tokenizer and KV cache and starts the responder and the inference loop. */
static int serve_load(struct serve_state *s)
{
    const struct serve_cfg *c = s->cfg;
    char err[512] = "";
    struct model_options mo;
    model_options_default(&mo);
    mo.backend = c->backend;
    mo.n_threads = c->threads;
    model_kv_type_parse(c->kv_type, &mo.kv_type); /* the option's choices admit only known names */
    mo.no_lanes = c->no_lanes;
    mo.n_ctx_seq = c->context_length; /* long-rope models pick their factors by it (0: trained) */
    double t0 = clock_mono_s();
    int rc = model_load(c->model, &mo, &s->m, err, sizeof(err));
    if (rc) {
        log_error("cannot load the model", LOG_S("path", c->model), LOG_S("err", err));
        return rc;
    }
    const struct model_hparams *hp = model_hparams(s->m);
    if (tokenizer_load(model_gguf(s->m), &s->tok, err, sizeof(err)) != 0) {
        s->tok = NULL;
        log_warn("no usable tokenizer: only token-id prompts on /v1/completions",
                 LOG_S("err", err));
    }
    int ctx = c->context_length ? c->context_length : hp->n_ctx_train;
    if (ctx < 2) {
        log_error("context length must be at least 2 tokens", LOG_I("context_length", ctx));
        return ERR_INVAL;
    }
    if ((rc = serve_chat_template(s)) != 0) return rc;
    if (s->tok && (rc = grammar_vocab_new(s->tok, &s->gvocab)) != 0) {
        log_error("cannot build the vocabulary trie of constrained decoding",
                  LOG_S("err", err_str(rc)));
        return rc;
    }
    if ((rc = serve_kv_setup(s, ctx, mo.kv_type)) != 0) return rc;
    s->api = (struct serve_api){
        .model_name = s->model_name,
        .tok = s->tok,
        .chat_template = s->chat,
        .gvocab = s->gvocab,
        .reasoning = !c->no_reasoning_parser,
        .grammars = &s->grammars,
        .n_vocab = hp->n_vocab,
        .max_context = ctx,
        .max_queue = c->max_queue,
        .created = (long long)time(NULL),
        .api_key = c->api_key && *c->api_key ? c->api_key : NULL,
    };
    if ((rc = serve_respond_start(s->tok, s->model_name, &s->resp)) != 0) return rc;
    struct serve_loop_cfg lc = {
        .sched =
            {
                .max_num_seqs = c->max_num_seqs,
                .max_num_batched_tokens = c->max_num_batched_tokens,
                .chunked_prefill = !c->no_chunked_prefill,
                .prefix_caching = !c->no_prefix_caching,
                .max_context = ctx,
            },
        .max_queue = c->max_queue,
        .request_timeout_s = c->request_timeout_s,
    };
    rc = serve_loop_start(&lc, s->m, s->kv, s->tok, http_api_metrics(s->http), &s->loop);
    if (rc) {
        log_error("cannot start the inference loop", LOG_S("err", err_str(rc)));
        return rc;
    }
    s->api.loop = s->loop;
    s->api.resp = s->resp;
    log_info("model loaded", LOG_S("path", c->model), LOG_S("arch", hp->arch_name),
             LOG_I("context_length", ctx), LOG_I("vocab", hp->n_vocab),
             LOG_F("load_s", clock_mono_s() - t0));
    return 0;
}

/* SIGTERM: /health fails at once; after the delay new requests are refused; in-flight ones get
 * the timeout to finish, then the rest are ended with what they generated. */
static void serve_drain(struct serve_state *s)
{
    const struct serve_cfg *c = s->cfg;
    http_api_set_state(s->http, HTTP_API_UNREADY);
    log_info("draining", LOG_I("delay_s", c->shutdown_delay_s),
             LOG_I("timeout_s", c->shutdown_timeout_s));
    for (int i = 0; i < c->shutdown_delay_s * 10; i++) sleep_ms(100);
    http_api_set_state(s->http, HTTP_API_DRAINING);
    double end = clock_mono_s() + c->shutdown_timeout_s;
    while (s->loop && clock_mono_s() < end &&
           (serve_loop_inflight(s->loop) > 0 || serve_respond_pending(s->resp) > 0))
        sleep_ms(20);
    if (s->loop && serve_loop_inflight(s->loop) > 0)
        log_warn("shutdown timeout reached; ending in-flight requests",
                 LOG_I("requests", serve_loop_inflight(s->loop)));
}

static void serve_teardown(struct serve_state *s)
{
    if (s->loop) serve_loop_stop(s->loop);
    if (s->resp) serve_respond_stop(s->resp, SERVE_FLUSH_GRACE_MS);
    if (s->http) {
        if (http_api_shutdown(s->http, SERVE_FLUSH_GRACE_MS))
            log_warn("connections cut at the end of the grace period");
        http_api_free(s->http);
    }
    serve_loop_free(s->loop);
    serve_respond_free(s->resp);
    kv_cache_free(s->kv);
    chat_template_free(s->chat);
    serve_api_grammars_fini(&s->grammars); /* the loop and the responder freed every request */
    grammar_vocab_free(s->gvocab);
    tokenizer_free(s->tok);
    model_free(s->m);
}

int cmd_serve_main(int argc, char **argv)
{
    struct serve_cfg cfg;
    struct cfg_result res;
    memset(&cfg, 0, sizeof(cfg));
    enum cli_parse_result pr = cli_parse(&serve_spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", cfg.log_level, cfg.log_format);
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    struct serve_state s = {.cfg = &cfg};
    if (cfg.served_model_name)
        snprintf(s.model_name, sizeof(s.model_name), "%s", cfg.served_model_name);
    else
        default_model_name(cfg.model, s.model_name, sizeof(s.model_name));
    struct http_api_cfg acfg = {
        .host = cfg.host,
        .port = cfg.port,
        .max_body_bytes = (size_t)cfg.max_body_bytes,
        .allowed_origins = cfg.allowed_origins,
        .keep_alive_s = cfg.http_keep_alive_s,
        .header_timeout_s = cfg.http_header_timeout_s,
        .max_connections = cfg.max_connections,
        .max_connections_per_client = cfg.max_connections_per_client,
        .model_name = s.model_name,
        .vllm_compat = strcmp(cfg.metrics_compat, "vllm") == 0,
    };
    if (cfg.chat_template) { /* a bad --chat-template is a configuration error: before listening */
        struct chat_template_config cc = {.override = cfg.chat_template};
        struct chat_template *ct = NULL;
        char err[512];
        if (chat_template_new(&cc, &ct, err, sizeof(err)) != 0) {
            log_error("invalid --chat-template", LOG_S("err", err));
            return 2;
        }
        chat_template_free(ct);
    }
    int rc = http_api_start(&acfg, &s.http);
    if (rc) {
        log_error("cannot start the HTTP API", LOG_S("err", err_str(rc)), LOG_S("host", cfg.host),
                  LOG_I("port", cfg.port));
        return rc == ERR_INVAL ? 2 : 1;
    }
    /* Listening while loading: /live answers, /health and /v1 say 503 "loading". */
    log_info("loading", LOG_S("model", cfg.model), LOG_I("port", http_api_port(s.http)));
    int status = 0;
    if ((rc = serve_load(&s)) != 0) {
        status = 1;
        goto out;
    }
    http_api_attach(s.http, &s.api);
    if (shutdown_requested()) goto drain;
    http_api_set_state(s.http, HTTP_API_SERVING);
    log_info("serving", LOG_S("host", cfg.host), LOG_I("port", http_api_port(s.http)),
             LOG_S("model", s.model_name));
    while (!shutdown_wait(1000)) {
    }
drain:
    serve_drain(&s);
out:
    serve_teardown(&s);
    log_info("stopped");
    return status;
}
