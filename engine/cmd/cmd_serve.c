/* cinfer-engine serve: configuration table, model loading, and the serve lifecycle
 * (starting -> serving -> draining -> stopped). The HTTP surface is engine/serve/http_api.c, the OpenAI
 * handlers engine/serve/serve_api.c, the inference thread engine/serve/serve_loop.c and the responder
 * engine/serve/serve_respond.c; this file wires them together and owns their order of start and stop. */
#include "common/clock.h"
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/shutdown.h"
#include "engine/api/chat_template.h"
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/serve/http_api.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_events.h"
#include "engine/kv/kv_offload.h"
#include "engine/kv/kv_slots.h"
#include "engine/model/model.h"
#include "engine/grammar/grammar.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_respond.h"
#include "engine/serve/serve_router.h"
#include "engine/cmd/cmd_spec.h"
#include "engine/sched/spec.h"
#include "engine/text/tokenizer.h"

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SERVE_AUTO_KV_RAM_FRACTION 0.25  /* cap of the automatic KV budget */
#define SERVE_FLUSH_GRACE_MS       2000  /* after the loop stops: time to write the last bytes */
#define SERVE_KV_EVENTS_RING       65536 /* block events kept for routers that lag behind */
#define SERVE_KV_EVENTS_TIER_MAX   (1u << 20) /* offload blocks a snapshot lists, per tier */

struct serve_cfg {
    const char *model;
    const char *model_sha256;
    bool no_model_watch;
    int model_watch_interval_s;
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
    double gpu_memory_utilization;
    const char *kv_type;
    const char *kv_eviction;
    int kv_sink_tokens, kv_window_tokens;
    bool no_prefix_caching;
    uint64_t kv_offload_bytes;
    const char *kv_offload_dir;
    uint64_t kv_offload_dir_bytes;
    uint64_t kv_offload_prefetch_bytes;
    const char *kv_offload_gate;
    bool no_reasoning_parser;
    bool no_chunked_prefill;
    bool grammar_inline_masks;
    bool no_lanes;
    int max_queue;
    int request_timeout_s;
    const char *metrics_compat;
    const char *chat_template;
    bool chat_content_special_tokens;
    const char *api_key, *api_key_file;
    const char *prefix_cache_scope;
    const char *allowed_origins;
    int http_keep_alive_s, http_header_timeout_s, max_connections, max_connections_per_client;
    const char *backend;
    struct cmd_spec_flags sp;
    int device;
    const char *log_level, *log_format;
};

#define O(f) offsetof(struct serve_cfg, f)
static const struct cfg_opt serve_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model file to serve", NULL, CFG_REQUIRED},
    {"model-sha256", CFG_STRING, O(model_sha256), NULL, 1, 0,
     "Expected SHA-256 of the model file (64 hex digits): checked before loading, which fails on "
     "a mismatch",
     NULL, 0},
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
    {"no-model-watch", CFG_BOOL, O(no_model_watch), "false", 1, 0,
     "Do not watch the model file while serving; by default a change (another inode, size or "
     "modification time) marks the engine faulted: /health and /live answer 503 so the pod is "
     "restarted on the new file",
     NULL, 0},
    {"model-watch-interval", CFG_INT, O(model_watch_interval_s), "5", 1, 3600,
     "Seconds between two checks of the model file", NULL, 0},
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
    {"gpu-memory-utilization", CFG_DOUBLE, O(gpu_memory_utilization), "0.9", 0.05, 1,
     "Fraction of the GPU's memory the engine may use; the KV cache (without --kv-cache-bytes) "
     "takes what the weights leave of it (vLLM's knob)",
     NULL, 0},
    {"kv-type", CFG_STRING, O(kv_type), "f16", 1, 0, "KV-cache element type", MODEL_KV_TYPE_NAMES,
     0},
    {"kv-eviction", CFG_STRING, O(kv_eviction), "none", 1, 0,
     "KV eviction of requests without kv_eviction: none (a sequence ends at the context) or "
     "sink-window (StreamingLLM: keep the sink and the latest window tokens; CPU backend)",
     KV_WINDOW_MODE_NAMES, 0},
    {"kv-sink-tokens", CFG_INT, O(kv_sink_tokens), "4", 0, KV_WINDOW_MAX_TOKENS,
     "sink-window: first tokens always kept (rounded up to whole KV blocks)", NULL, 0},
    {"kv-window-tokens", CFG_INT, O(kv_window_tokens), "1024", 1, KV_WINDOW_MAX_TOKENS,
     "sink-window: most recent tokens kept at least", NULL, 0},
    {"no-prefix-caching", CFG_BOOL, O(no_prefix_caching), "false", 1, 0,
     "Do not reuse the KV of shared prompt prefixes across requests", NULL, 0},
    {"kv-offload-bytes", CFG_SIZE, O(kv_offload_bytes), "0", 0, 1e15,
     "Host memory for KV blocks evicted from the KV cache (tier 2), loaded back on a prefix hit; "
     "0 = none",
     NULL, 0},
    {"kv-offload-dir", CFG_STRING, O(kv_offload_dir), NULL, 1, 0,
     "Directory for evicted KV blocks (tier 3: local disk, or a volume replicas share)", NULL, 0},
    {"kv-offload-dir-bytes", CFG_SIZE, O(kv_offload_dir_bytes), "10G", 1 << 20, 1e18,
     "Bytes of KV block files this engine keeps in --kv-offload-dir", NULL, 0},
    {"kv-offload-prefetch-bytes", CFG_SIZE, O(kv_offload_prefetch_bytes), "0", 0, 1e15,
     "Memory for KV blocks read ahead from --kv-offload-dir for waiting requests (0 = one full "
     "context's blocks, at least 256M)",
     NULL, 0},
    {"kv-offload-gate", CFG_STRING, O(kv_offload_gate), "prompt", 1, 0,
     "Evicted blocks worth offloading: prompt blocks and reused ones, only reused ones, or all",
     "prompt|reused|all", 0},
    {"no-reasoning-parser", CFG_BOOL, O(no_reasoning_parser), "false", 1, 0,
     "Keep a thinking model's <think> block in content (no reasoning_content)", NULL, 0},
    {"no-chunked-prefill", CFG_BOOL, O(no_chunked_prefill), "false", 1, 0,
     "Prefill each prompt whole, in steps without decodes, instead of in chunks between decodes",
     NULL, 0},
    {"grammar-inline-masks", CFG_BOOL, O(grammar_inline_masks), "false", 1, 0,
     "Compute constrained decoding's token masks after each forward pass instead of during it "
     "(for A/B measurements)",
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
    {"chat-content-special-tokens", CFG_BOOL, O(chat_content_special_tokens), "false", 1, 0,
     "Parse control tokens typed in chat message content (\"<|im_start|>\") as control tokens; "
     "by default they are text and only the chat template places control tokens",
     NULL, 0},
    {"api-key", CFG_STRING, O(api_key), NULL, 1, 0,
     "Require \"Authorization: Bearer <key>\" on /v1 routes; several keys separated by commas or "
     "newlines (prefer the environment variable CINFER_ENGINE_API_KEY: flags show in ps)",
     NULL, CFG_SECRET},
    {"api-key-file", CFG_STRING, O(api_key_file), NULL, 1, 0,
     "File of accepted API keys, one per line ('#' comments), in addition to --api-key", NULL, 0},
    {"prefix-cache-scope", CFG_STRING, O(prefix_cache_scope), "global", 1, 0,
     "Which requests share cached prompt prefixes: global (all, within a cache_salt), key or "
     "api-key (only those of the same API key: one tenant cannot probe another's prompts through "
     "cached_tokens or latency), or salt (only those of the same cache_salt, required in every "
     "request: for a gateway that authenticates tenants and sets a salt per tenant)",
     "global|key|api-key|salt", 0},
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
    {"device", CFG_INT, O(device), "0", 0, 1024, "CUDA device index (see CUDA_VISIBLE_DEVICES)",
     NULL, 0},
    {"shutdown-delay-seconds", CFG_INT, O(shutdown_delay_s), "0", 0, 600,
     "After SIGTERM, keep serving (with /health at 503) this long before refusing new requests",
     NULL, 0},
    {"shutdown-timeout", CFG_INT, O(shutdown_timeout_s), "30", 0, 3600,
     "Then how long in-flight requests may take; those still running are ended (finish_reason "
     "length)",
     NULL, 0},
    CMD_SPEC_OPTS(struct serve_cfg, sp),
    CMD_SPEC_POOL_OPT(struct serve_cfg, sp),
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
    char model_sha256[SHA256_HEX_LEN]; /* --model-sha256 in lowercase, or "" */
    char model_name[256];
    struct kv_offload *offload; /* NULL: no tiers below the KV cache */
    struct http_api *http;
    struct model *m;
    struct tokenizer *tok;
    struct grammar_vocab *gvocab; /* constrained decoding's token trie (NULL without tok) */
    struct serve_api_grammars grammars;
    struct chat_template *chat;
    struct kv_cache *kv;
    struct spec_config spec; /* the speculation flags, resolved (cmd_spec_resolve) */
    struct model *draft;     /* --speculative draft: the draft model and its KV pool */
    struct kv_cache *draft_kv;
    struct serve_respond *resp;
    struct serve_loop *loop;
    struct kv_events *kv_events; /* NULL without prefix caching */
    struct serve_router *router;
    struct serve_auth *auth; /* NULL: no API keys configured */
    struct serve_api api;
    bool model_changed; /* the model watcher saw the file change (logged once) */
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

/* The KV budget on a backend with device memory (backend mem_info): what is free now, after the
 * weights and the backend's workspaces, less the (1 - utilization) share of the device that stays
 * unused, as vLLM's --gpu-memory-utilization; false for a backend whose memory is the host's. */
static bool serve_kv_device_budget(struct serve_state *s, uint64_t *budget)
{
    struct backend *be = model_backend(s->m);
    size_t dfree = 0, dtotal = 0;
    if (!be->ops->mem_info || be->ops->mem_info(be, &dfree, &dtotal) != 0) return false;
    double keep = (1.0 - s->cfg->gpu_memory_utilization) * (double)dtotal;
    *budget = (double)dfree > keep ? (uint64_t)((double)dfree - keep) : 0;
    log_info("kv cache budget from device memory", LOG_I("device_free", (long long)dfree),
             LOG_I("device_total", (long long)dtotal),
             LOG_F("gpu_memory_utilization", s->cfg->gpu_memory_utilization),
             LOG_I("budget", (long long)*budget));
    return true;
}

/* The KV pools of element type kt: the target's and, with a draft model, the draft's, which holds
 * the same sequences' tokens. The budget is the configured one; on a GPU by default all that
 * --gpu-memory-utilization leaves (serve_kv_device_budget); else by default enough blocks for
 * max_num_seqs full contexts capped at a quarter of the memory the process may use (RAM or the
 * cgroup limit: kv_cache_ram_budget). Both pools get the same number of blocks, so the budget is
 * split in proportion to the two models' K/V bytes per token (kv_cache_blocks_for_pools) and the
 * two together stay within it. Fails when one full context does not fit. */
static int serve_kv_setup(struct serve_state *s, int ctx, enum quant_type kt)
{
    const struct serve_cfg *c = s->cfg;
    uint64_t per_token[2] = {model_kv_bytes_per_token(s->m, kt),
                             s->draft ? model_kv_bytes_per_token(s->draft, kt) : 0};
    int n_pools = s->draft ? 2 : 1;
    int bs = c->block_size;
    int64_t per_seq = (ctx + bs - 1) / bs;
    int64_t n_blocks;
    uint64_t dev_budget = 0;
    if (c->kv_cache_bytes) {
        n_blocks = kv_cache_blocks_for_pools(c->kv_cache_bytes, per_token, n_pools, bs);
    } else if (serve_kv_device_budget(s, &dev_budget)) {
        n_blocks = kv_cache_blocks_for_pools(dev_budget, per_token, n_pools, bs);
    } else {
        n_blocks = per_seq * c->max_num_seqs;
        uint64_t cap = kv_cache_ram_budget(SERVE_AUTO_KV_RAM_FRACTION);
        int64_t cap_blocks =
            cap ? kv_cache_blocks_for_pools(cap, per_token, n_pools, bs) : n_blocks;
        if (cap_blocks < n_blocks) n_blocks = cap_blocks > per_seq ? cap_blocks : per_seq;
    }
    if (n_blocks < per_seq) {
        log_error("the KV-cache budget does not hold one full context; raise --kv-cache-bytes "
                  "(or --gpu-memory-utilization) or lower --context-length",
                  LOG_I("blocks", (long long)n_blocks), LOG_I("blocks_per_context", per_seq),
                  LOG_I("bytes_per_token", (long long)per_token[0]),
                  LOG_I("draft_bytes_per_token", (long long)per_token[1]));
        return ERR_INVAL;
    }
    if (n_blocks > INT32_MAX / bs) n_blocks = INT32_MAX / bs;
    struct kv_cache_config kc = {(int)n_blocks, bs, c->max_num_seqs, (int)per_seq};
    double t0 = clock_mono_s();
    int rc = kv_cache_new(&kc, &s->kv);
    if (!rc) rc = model_kv_init(s->m, s->kv);
    const char *what = "cannot allocate the KV cache";
    if (!rc && s->draft) {
        what = "cannot allocate the draft model's KV cache";
        if (!(rc = kv_cache_new(&kc, &s->draft_kv))) rc = model_kv_init(s->draft, s->draft_kv);
    }
    if (rc) {
        log_error(what, LOG_S("err", err_str(rc)), LOG_I("blocks", n_blocks),
                  LOG_I("bytes_per_token", (long long)per_token[0]),
                  LOG_I("draft_bytes_per_token", (long long)per_token[1]));
        return rc;
    }
    /* the backend commits the pool's memory, which takes a while for large pools: say how long */
    uint64_t tokens = (uint64_t)n_blocks * (uint64_t)bs;
    log_info("kv cache", LOG_I("blocks", n_blocks), LOG_I("block_size", bs),
             LOG_I("tokens", (long long)tokens), LOG_I("bytes", (long long)(tokens * per_token[0])),
             LOG_I("draft_bytes", (long long)(tokens * per_token[1])),
             LOG_I("total_bytes", (long long)(tokens * (per_token[0] + per_token[1]))),
             LOG_F("alloc_s", clock_mono_s() - t0));
    return 0;
}

/* The offload store's tiers as the block events name them. */
static void serve_offload_observed(void *ctx, enum kv_offload_tier tier, bool stored, uint64_t hash)
{
    kv_events_record_tier(ctx, tier == KV_OFFLOAD_HOST ? KV_EVENTS_HOST : KV_EVENTS_DISK, stored,
                          hash);
}

/* The held set of one offload tier in the block events: as many blocks as its budget holds, at
 * most SERVE_KV_EVENTS_TIER_MAX (past that a snapshot lists some; the events list all). */
static int serve_events_tier(struct serve_state *s, enum kv_events_tier t, uint64_t budget,
                             size_t rec_bytes)
{
    uint64_t n = rec_bytes ? budget / rec_bytes : 0;
    if (!s->kv_events || n == 0) return 0;
    return kv_events_size_tier(s->kv_events, t,
                               n < SERVE_KV_EVENTS_TIER_MAX ? (size_t)n : SERVE_KV_EVENTS_TIER_MAX);
}

/* The offload tiers (--kv-offload-bytes, --kv-offload-dir): their namespace is the model file's
 * SHA-256 (read once here) and the KV layout, so blocks of another model or layout never match.
 * Their blocks join the events for routers (s->kv_events, made before). */
/* The read-ahead staging budget: the flag, or one full context's blocks (at least
 * KV_OFFLOAD_STAGE_DEFAULT), so a prompt as long as the context loads wholly from tier 3 (a
 * fixed 256 MiB staged 11.6k of a 16k prompt's tokens on a 135M model, and would stage 512 tokens
 * of a 7B model's f16 KV). */
static uint64_t serve_offload_stage_bytes(const struct serve_cfg *c, int ctx, size_t rec)
{
    if (c->kv_offload_prefetch_bytes) return c->kv_offload_prefetch_bytes;
    uint64_t blocks = ((uint64_t)ctx + (uint64_t)c->block_size - 1) / (uint64_t)c->block_size;
    uint64_t need = blocks * (uint64_t)rec;
    return need > KV_OFFLOAD_STAGE_DEFAULT ? need : KV_OFFLOAD_STAGE_DEFAULT;
}

static int serve_offload_setup(struct serve_state *s, int ctx, enum quant_type kt)
{
    const struct serve_cfg *c = s->cfg;
    if (!c->kv_offload_bytes && !c->kv_offload_dir) return 0;
    if (c->no_prefix_caching) {
        log_error("KV offload needs the prefix cache; drop --no-prefix-caching");
        return ERR_INVAL;
    }
    const struct model_hparams *hp = model_hparams(s->m);
    struct kv_block_layout l = {.kv_type = (int)kt,
                                .block_size = c->block_size,
                                .n_layers = hp->n_layer,
                                .n_kv_heads = hp->n_head_kv,
                                .head_dim = hp->head_dim,
                                .payload_bytes = model_kv_block_bytes(s->m)};
    double t0 = clock_mono_s();
    if (sha256_file_hex(c->model, l.model_digest) != 0) {
        log_error("cannot hash the model file for the KV offload namespace",
                  LOG_S("path", c->model));
        return ERR_IO;
    }
    struct kv_offload_config oc = {
        .ns = kv_block_namespace(&l),
        .block_size = c->block_size,
        .payload_bytes = l.payload_bytes,
        .host_bytes = c->kv_offload_bytes,
        .dir = c->kv_offload_dir,
        .dir_bytes = c->kv_offload_dir ? c->kv_offload_dir_bytes : 0,
        .observer = s->kv_events ? serve_offload_observed : NULL,
        .observer_ctx = s->kv_events,
    };
    size_t rec = kv_block_record_bytes(c->block_size, l.payload_bytes);
    oc.stage_bytes = serve_offload_stage_bytes(c, ctx, rec);
    int rc = serve_events_tier(s, KV_EVENTS_HOST, oc.host_bytes, rec);
    if (!rc) rc = serve_events_tier(s, KV_EVENTS_DISK, oc.dir_bytes, rec);
    if (!rc) rc = oc.ns ? kv_offload_new(&oc, &s->offload) : ERR_NOMEM;
    if (rc) {
        log_error("cannot start the KV offload tiers", LOG_S("err", err_str(rc)));
        return rc;
    }
    log_info("kv offload", LOG_I("host_bytes", (long long)c->kv_offload_bytes),
             LOG_S("dir", c->kv_offload_dir ? c->kv_offload_dir : ""),
             LOG_I("dir_bytes", (long long)oc.dir_bytes), LOG_S("gate", c->kv_offload_gate),
             LOG_I("block_bytes", (long long)l.payload_bytes),
             LOG_I("prefetch_bytes", (long long)oc.stage_bytes),
             LOG_F("digest_s", clock_mono_s() - t0));
    return 0;
}

static int serve_offload_gate(const char *name)
{
    return strcmp(name, "all") == 0      ? KV_SLOTS_GATE_ALL
           : strcmp(name, "reused") == 0 ? KV_SLOTS_GATE_REUSED
                                         : KV_SLOTS_GATE_PROMPT;
}

/* --prefix-cache-scope key, or api-key as the issue tracker and the docs of other servers say it. */
static bool scope_is_key(const char *scope)
{
    return strcmp(scope, "key") == 0 || strcmp(scope, "api-key") == 0;
}

/* The chat template: --chat-template, else the model's tokenizer.chat_template (rendered by the
 * Jinja interpreter), else chatml with a warning. A template that cannot be used fails start-up. */
static int serve_chat_template(struct serve_state *s)
{
    struct gguf_str gs;
    char *model_tmpl = NULL, err[512];
    if (gguf_get_str(model_gguf(s->m), "tokenizer.chat_template", &gs) == 0 &&
        !(model_tmpl = strndup(gs.data, gs.len))) {
        log_error("out of memory");
        return ERR_NOMEM;
    }
    int rc = serve_api_chat_template_new(s->tok, model_tmpl, s->cfg->chat_template, &s->chat, err,
                                         sizeof(err));
    if (rc)
        log_error("cannot use the chat template", LOG_S("err", err));
    else if (chat_template_origin(s->chat) == CHAT_TEMPLATE_FROM_FALLBACK)
        log_warn("the model has no chat template; using chatml (set --chat-template)");
    else
        log_info("chat template", LOG_S("template", chat_template_describe(s->chat)));
    free(model_tmpl);
    return rc;
}

/* --model-sha256 in lowercase into out (SHA256_HEX_LEN bytes); false when it is not 64 hex
 * digits. */
static bool serve_sha256_parse(const char *s, char *out)
{
    if (strlen(s) != SHA256_HEX_LEN - 1) return false;
    for (int i = 0; i < SHA256_HEX_LEN - 1; i++) {
        if (!isxdigit((unsigned char)s[i])) return false;
        out[i] = (char)tolower((unsigned char)s[i]);
    }
    out[SHA256_HEX_LEN - 1] = '\0';
    return true;
}

/* Loads the model, tokenizer and KV cache and starts the responder and the inference loop. */
/* --speculative draft: loads --draft-model like the target (same backend, threads and KV type)
 * and checks its vocabulary against the target's; serve_kv_setup then gives it a KV pool of the
 * target's geometry within the same --kv-cache-bytes. */
static int serve_draft_load(struct serve_state *s, const struct model_options *mo)
{
    const struct serve_cfg *c = s->cfg;
    if (s->spec.method != SPEC_METHOD_DRAFT) return 0;
    char err[600] = "";
    int rc = cmd_spec_draft_load(&c->sp, mo, s->m, &s->draft, err, sizeof(err));
    if (rc) {
        log_error("cannot use the draft model", LOG_S("path", c->sp.draft_model),
                  LOG_S("err", err));
        return rc;
    }
    log_info("draft model loaded", LOG_S("path", c->sp.draft_model),
             LOG_S("arch", model_hparams(s->draft)->arch_name));
    return 0;
}

static int serve_load(struct serve_state *s)
{
    const struct serve_cfg *c = s->cfg;
    char err[512] = "";
    struct model_options mo;
    model_options_default(&mo);
    mo.backend = c->backend;
    mo.device = c->device;
    mo.n_threads = c->threads;
    model_kv_type_parse(c->kv_type, &mo.kv_type); /* the option's choices admit only known names */
    mo.no_lanes = c->no_lanes;
    mo.n_ctx_seq = c->context_length; /* long-rope models pick their factors by it (0: trained) */
    double t0 = clock_mono_s();
    mo.sha256 = s->model_sha256[0] ? s->model_sha256 : NULL;
    if (mo.sha256) log_info("verifying the model", LOG_S("sha256", mo.sha256));
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
    struct kv_window win = {KV_WINDOW_NONE, c->kv_sink_tokens, c->kv_window_tokens};
    kv_window_mode_parse(c->kv_eviction, &win.mode); /* the option's choices admit only these */
    if (kv_window_check(&win, c->block_size, ctx, 1, err, sizeof(err)) != 0) {
        log_error("--kv-eviction sink-window does not fit the context", LOG_S("err", err),
                  LOG_I("context_length", ctx));
        return ERR_INVAL;
    }
    if (win.mode != KV_WINDOW_NONE && !model_kv_shift_supported(s->m)) {
        log_error("--kv-eviction sink-window needs a backend that can re-rotate KV blocks (cpu)",
                  LOG_S("backend", model_backend(s->m)->ops->name));
        return ERR_UNSUPPORTED;
    }
    if ((rc = serve_draft_load(s, &mo)) != 0) return rc;
    if ((rc = serve_kv_setup(s, ctx, mo.kv_type)) != 0) return rc;
    if (!c->no_prefix_caching &&
        (rc = kv_events_new(kv_cache_n_blocks(s->kv), SERVE_KV_EVENTS_RING, &s->kv_events)))
        return rc;
    if ((rc = serve_offload_setup(s, ctx, mo.kv_type)) != 0) return rc;
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
        .auth = s->auth,
        .prefix_cache_scope = scope_is_key(c->prefix_cache_scope)      ? SERVE_CACHE_SCOPE_KEY
                              : !strcmp(c->prefix_cache_scope, "salt") ? SERVE_CACHE_SCOPE_SALT
                                                                       : SERVE_CACHE_SCOPE_GLOBAL,
        .content_special_tokens = c->chat_content_special_tokens,
        .kv_window = win,
        .kv_shift = model_kv_shift_supported(s->m),
        .kv_block_size = c->block_size,
    };
    serve_api_fim_find(model_gguf(s->m), s->tok, &s->api.fim);
    if ((rc = serve_respond_start(s->tok, s->model_name, &s->resp)) != 0) return rc;
    struct serve_loop_cfg lc = {
        .sched =
            {
                .max_num_seqs = c->max_num_seqs,
                .max_num_batched_tokens = c->max_num_batched_tokens,
                .chunked_prefill = !c->no_chunked_prefill,
                .prefix_caching = !c->no_prefix_caching,
                .max_context = ctx,
                .spec = s->spec,
                .draft = s->draft,
                .draft_kv = s->draft_kv,
                .offload = s->offload,
                .offload_gate = serve_offload_gate(c->kv_offload_gate),
                .grammar_inline_masks = c->grammar_inline_masks,
            },
        .max_queue = c->max_queue,
        .request_timeout_s = c->request_timeout_s,
    };
    if (s->kv_events) {
        lc.block_observer = kv_events_record;
        lc.block_observer_ctx = s->kv_events;
    }
    rc = serve_loop_start(&lc, s->m, s->kv, s->tok, http_api_metrics(s->http), &s->loop);
    if (rc) {
        log_error("cannot start the inference loop", LOG_S("err", err_str(rc)));
        return rc;
    }
    s->api.loop = s->loop;
    s->api.resp = s->resp;
    struct serve_router_cfg rc_cfg = {
        .model = model_gguf(s->m),
        .chat_template = chat_template_source(s->chat),
        .model_name = s->model_name,
        .auth = s->auth,
        .block_size = c->block_size,
        .max_context = ctx,
        .n_vocab = hp->n_vocab,
        .kv_blocks = kv_cache_n_blocks(s->kv),
        .events = s->kv_events,
        .loop = s->loop,
    };
    if ((rc = serve_router_start(&rc_cfg, &s->router)) != 0) {
        log_error("cannot start the router endpoints", LOG_S("err", err_str(rc)));
        return rc;
    }
    log_info("model loaded", LOG_S("path", c->model), LOG_S("arch", hp->arch_name),
             LOG_I("context_length", ctx), LOG_I("vocab", hp->n_vocab),
             LOG_F("load_s", clock_mono_s() - t0));
    return 0;
}

/* The model file watcher, on the main thread's periodic tick: once the file at --model is no
 * longer the one loaded (rewritten, truncated, replaced or removed), logs what changed and marks
 * the engine faulted (serve_loop_set_faulted). The engine keeps serving what it has from its own
 * copy of the weights until the kubelet, seeing /live fail, restarts the pod on the new file.
 * Checks at most every --model-watch-interval seconds; logs once. */
static void serve_watch_model(struct serve_state *s, double *next_check)
{
    const struct serve_cfg *c = s->cfg;
    double t = clock_mono_s();
    if (c->no_model_watch || s->model_changed || t < *next_check) return;
    *next_check = t + c->model_watch_interval_s;
    char why[256];
    if (!gguf_file_changed(model_gguf(s->m), why, sizeof(why))) return;
    s->model_changed = true;
    log_error("model file changed while serving; engine faulted: /health and /live now answer "
              "503 so that the pod is restarted on the new file, requests in flight finish on "
              "the weights loaded",
              LOG_S("path", c->model), LOG_S("change", why));
    serve_loop_set_faulted(s->loop);
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
    serve_router_stop(s->router); /* ends the event streams, so the HTTP drain need not wait */
    if (s->loop) serve_loop_stop(s->loop);
    if (s->resp) serve_respond_stop(s->resp, SERVE_FLUSH_GRACE_MS);
    if (s->http) {
        if (http_api_shutdown(s->http, SERVE_FLUSH_GRACE_MS))
            log_warn("connections cut at the end of the grace period");
        http_api_free(s->http);
    }
    serve_router_free(s->router);
    serve_loop_free(s->loop);
    serve_respond_free(s->resp);
    kv_offload_free(s->offload);  /* after the loop: writes what is still queued */
    kv_events_free(s->kv_events); /* after the store, which reports its tiers' changes there */
    kv_cache_free(s->kv);
    kv_cache_free(s->draft_kv);
    model_free(s->draft);
    chat_template_free(s->chat);
    serve_api_grammars_fini(&s->grammars); /* the loop and the responder freed every request */
    grammar_vocab_free(s->gvocab);
    tokenizer_free(s->tok);
    model_free(s->m);
    serve_auth_free(s->auth);
}

/* The API keys from --api-key and --api-key-file (none: s->auth stays NULL, no authentication).
 * A bad key, file or scope is a configuration error: false after logging why. */
static bool serve_auth_setup(struct serve_state *s)
{
    const struct serve_cfg *c = s->cfg;
    char err[512];
    int rc = 0;
    if ((c->api_key && *c->api_key) || c->api_key_file) {
        if (serve_auth_new(&s->auth) != 0) {
            log_error("out of memory");
            return false;
        }
        if (c->api_key && *c->api_key)
            rc = serve_auth_add(s->auth, c->api_key, strlen(c->api_key), "--api-key", err,
                                sizeof(err));
        if (!rc && c->api_key_file)
            rc = serve_auth_add_file(s->auth, c->api_key_file, err, sizeof(err));
        if (!rc && serve_auth_count(s->auth) == 0)
            rc = err_fmt(err, sizeof(err), ERR_INVAL, "no API key in --api-key or --api-key-file");
        if (rc) {
            log_error("invalid API keys", LOG_S("err", err));
            return false;
        }
        log_info("api keys", LOG_I("keys", (long long)serve_auth_count(s->auth)));
    }
    if (scope_is_key(c->prefix_cache_scope) && !s->auth) {
        log_error("--prefix-cache-scope key needs API keys (--api-key or --api-key-file)");
        return false;
    }
    return true;
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
    char spec_err[256];
    if (cmd_spec_resolve(&cfg.sp, &s.spec, spec_err, sizeof(spec_err)) != 0) {
        log_error("invalid speculative decoding flags", LOG_S("err", spec_err));
        return 2;
    }
    if (s.spec.method != SPEC_METHOD_NONE) acfg.spec_positions = s.spec.num_tokens;
    if (cfg.model_sha256 && !serve_sha256_parse(cfg.model_sha256, s.model_sha256)) {
        log_error("invalid --model-sha256: expected 64 hex digits");
        return 2;
    }
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
    if (!serve_auth_setup(&s)) {
        serve_auth_free(s.auth);
        return 2;
    }
    int rc = http_api_start(&acfg, &s.http);
    if (rc) {
        log_error("cannot start the HTTP API", LOG_S("err", err_str(rc)), LOG_S("host", cfg.host),
                  LOG_I("port", cfg.port));
        serve_auth_free(s.auth);
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
    http_api_attach_router(s.http, s.router);
    if (shutdown_requested()) goto drain;
    http_api_set_state(s.http, HTTP_API_SERVING);
    log_info("serving", LOG_S("host", cfg.host), LOG_I("port", http_api_port(s.http)),
             LOG_S("model", s.model_name));
    double next_check = clock_mono_s() + cfg.model_watch_interval_s;
    while (!shutdown_wait(1000)) serve_watch_model(&s, &next_check);
drain:
    serve_drain(&s);
out:
    serve_teardown(&s);
    log_info("stopped");
    return status;
}
