/* What the engine publishes for cinfer-router (ARCHITECTURE.md "Engine ports and paths"), so that a
 * router needs no model file and computes the same prefix hashes as the engine:
 *   GET /cinfer/tokenizer  the served model's tokenizer and chat template as a metadata-only GGUF
 *                          (every tokenizer.* key, general.name and general.architecture as the
 *                          model has them, the effective chat template, and cinfer.* keys: block
 *                          size, hash name, max context, vocabulary size, prefix caching, model
 *                          name), which engine/text/tokenizer.c loads exactly as it loads the model;
 *   GET /cinfer/kv-events  newline-delimited JSON, never ending: a hello line, a snapshot of the
 *                          blocks the prefix cache holds, then every block stored or evicted
 *                          (engine/kv/kv_events.h) and a load line every load interval:
 *     {"type":"hello","model":M,"block_size":16,"hash":"cinfer-chain-v1","prefix_caching":true,
 *      "kv_blocks":N}                              N: blocks of the KV pool (the most its device
 *                                                  tier can hold, running sequences included)
 *     {"type":"snapshot","seq":S,"blocks":N}      forget this engine's blocks; N stored follow
 *     {"type":"stored","seq":S,"tier":"device","hashes":["0123456789abcdef",...]}
 *     {"type":"evicted","seq":S,"tier":"device","hashes":[...]}
 *                          tier: "device" (the KV pool: the prefix cache), "host" or "disk" (the
 *                          offload tiers, --kv-offload-bytes / --kv-offload-dir: a request whose
 *                          prefix is there loads it instead of computing it; a shared directory's
 *                          blocks written by other replicas are listed once this one has seen them)
 *     {"type":"load","seq":S,"running":R,"waiting":W,"prefill_waiting":T}
 *                          T: prompt tokens not yet prefilled, waiting and running requests
 *                          together (what a request sent now queues behind before its own prefill)
 *   seq is the sequence number of the last event a line reflects. A reader that falls behind the
 *   event ring gets a new snapshot line. Both routes need the API key when one is configured.
 * A publisher thread writes every subscriber's stream (non-blocking writes: a slow reader holds
 * only its own cursor; events it misses beyond the ring become a new snapshot). */
#ifndef CINFER_ENGINE_SERVE_ROUTER_H
#define CINFER_ENGINE_SERVE_ROUTER_H

#include <stdbool.h>

struct gguf;
struct http_req;
struct kv_events;
struct serve_loop;
struct serve_router;
struct serve_auth;

#define SERVE_ROUTER_TOKENIZER_PATH "/cinfer/tokenizer"
#define SERVE_ROUTER_EVENTS_PATH    "/cinfer/kv-events"

struct serve_router_cfg {
    const struct gguf *model;  /* borrowed during start: the tokenizer keys are copied */
    const char *chat_template; /* the served template's Jinja2 source (chat_template_source),
                                  replacing the model's in the document; NULL = the model's */
    const char *model_name;    /* borrowed; must outlive the publisher */
    struct serve_auth *auth;   /* NULL: open; borrowed, must outlive */
    int block_size, max_context, n_vocab;
    int kv_blocks;            /* blocks of the KV pool (what the prefix cache can hold at most) */
    struct kv_events *events; /* borrowed; NULL without prefix caching (no block lines) */
    struct serve_loop *loop;  /* borrowed, for the load lines; must outlive */
    int load_interval_ms;     /* between load lines; 0 = 250 */
};

/* Builds the tokenizer document and starts the publisher thread. *out is new
 * (serve_router_free). ERR_NOMEM, ERR_INVAL (a tokenizer key that cannot be copied). Main
 * thread. */
int serve_router_start(const struct serve_router_cfg *cfg, struct serve_router **out);
/* Ends every subscriber's stream and joins the thread; later subscribers get 503. Idempotent,
 * NULL-safe. Main thread, before the loop and the HTTP server stop (so the drain need not wait
 * for streams that never end). */
void serve_router_stop(struct serve_router *sr);
/* Stops if needed and frees. NULL-safe. Main thread, once no handler can run (after the HTTP
 * server is freed). */
void serve_router_free(struct serve_router *sr);

/* The tokenizer document of cfg (only model, chat_template, model_name, the sizes and whether
 * events is set are read), appended to `out` (borrowed; its max bounds it). 0, ERR_INVAL,
 * ERR_TOO_BIG, ERR_NOMEM. Pure; any thread. */
struct buf;
int serve_router_tokenizer_doc(const struct serve_router_cfg *cfg, struct buf *out);

/* Route handlers (HTTP service thread); `sr` NULL while the model loads: 503. */
void serve_router_tokenizer(const struct serve_router *sr, struct http_req *req);
void serve_router_events(struct serve_router *sr, struct http_req *req);

/* Subscribers streaming now. Any thread. */
int serve_router_subscribers(struct serve_router *sr);

#endif
