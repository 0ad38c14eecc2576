/* The OpenAI routes of `cinfer-engine serve` (/v1/completions, /v1/chat/completions, /v1/models,
 * /v1/models/{id}):
 * on the HTTP service thread they parse and validate the request (engine/api/api.h), render the chat
 * template, tokenize, enforce the context length and the queue bound, then hand the request to the
 * responder and the inference loop. Nothing here blocks or touches the model. */
#ifndef CINFER_ENGINE_SERVE_API_H
#define CINFER_ENGINE_SERVE_API_H

#include "common/http_server.h"
#include "engine/api/chat_template.h"
#include "engine/kv/kv_window.h"

#include <stdbool.h>
#include <stdint.h>

struct gguf;
struct tokenizer;
struct grammar;
struct grammar_vocab;
struct serve_auth;
struct serve_loop;
struct serve_respond;

#define SERVE_API_MODELS_PREFIX "/v1/models/" /* GET /v1/models/{id} */

/* The model's fill-in-the-middle tokens (`suffix` on /v1/completions); zero: none. */
struct serve_api_fim {
    bool ok; /* all three found */
    int32_t pre, suf, mid;
};

/* Compiled structured-output grammars by their GBNF text, most recently used first, so a schema
 * sent again reuses its grammar and the masks it has memoised (a new grammar's first masks walk
 * the whole vocabulary). Each entry holds a reference. HTTP service thread only; zeroed is empty. */
#define SERVE_API_GRAMMARS 8
struct serve_api_grammars {
    char *text[SERVE_API_GRAMMARS];
    struct grammar *g[SERVE_API_GRAMMARS];
    int n;
    unsigned long hits, misses;
};
/* Drops every entry. Call after the last request was handled. */
void serve_api_grammars_fini(struct serve_api_grammars *c);

/* Which requests may reuse each other's cached prompt prefixes (--prefix-cache-scope). */
enum serve_cache_scope {
    SERVE_CACHE_SCOPE_GLOBAL, /* all requests with the same cache_salt (or none) */
    SERVE_CACHE_SCOPE_KEY,    /* only those of the same API key (the key's digest salts the
                                 chains; the client's cache_salt splits them further; needs auth) */
    SERVE_CACHE_SCOPE_SALT,   /* only those with the same cache_salt, which every request must
                                 carry (400 without): for a gateway that authenticates tenants and
                                 sets a per-tenant salt; the salt is the only isolation */
};

/* Everything the handlers need, borrowed for as long as the routes are served. */
struct serve_api {
    const char *model_name;      /* served model name ("model" must match it when sent) */
    const struct tokenizer *tok; /* NULL: only token-id prompts on /v1/completions */
    const struct chat_template *chat_template; /* renders /v1/chat/completions messages */
    struct serve_api_fim fim;                  /* serve_api_fim_find */
    /* The token trie of tok for constrained decoding; NULL: structured outputs get a 400. */
    const struct grammar_vocab *gvocab;
    /* Split a thinking model's <think> block into reasoning_content (--reasoning-parser). */
    bool reasoning;
    struct serve_api_grammars *grammars; /* NULL: every request compiles its own */
    int n_vocab;
    int max_context;   /* prompt + generated tokens per sequence */
    int max_queue;     /* waiting requests beyond which new ones get 429 */
    long long created; /* Unix time the model was loaded (/v1/models) */
    /* non-NULL: /v1 requests need "Authorization: Bearer <key>" with one of its keys; failures
     * are logged through it (rate-limited) */
    struct serve_auth *auth;
    /* --prefix-cache-scope: which requests share cached prompt prefixes */
    enum serve_cache_scope prefix_cache_scope;
    /* --chat-content-special-tokens: control tokens typed in message content ("<|im_start|>")
     * become control tokens; by default they are text (tokenizer_escape_special) and only the
     * template places control tokens */
    bool content_special_tokens;
    /* --kv-eviction, --kv-sink-tokens, --kv-window-tokens: requests without "kv_eviction" run
     * with this; kv_shift false: the backend cannot re-rotate keys (sink-window gets a 400) */
    struct kv_window kv_window;
    bool kv_shift;
    int kv_block_size; /* tokens per KV block: sink tokens are rounded up to it */
    struct serve_loop *loop;
    struct serve_respond *resp;
};

enum serve_api_gate {
    SERVE_API_OPEN = 0, /* serving */
    SERVE_API_LOADING,  /* 503 "loading", Retry-After */
    SERVE_API_DRAINING, /* 503 "shutting down", Retry-After */
    SERVE_API_FAULTED,  /* 503 code engine_faulted, Retry-After (SERVE_FAIL_FAULTED) */
};

/* Route handlers; `api` may be NULL while the model loads (the gate then says LOADING). Service
 * thread. Each answers exactly once, errors in OpenAI's shape. */
void serve_api_completions(const struct serve_api *api, enum serve_api_gate gate,
                           struct http_req *req);
void serve_api_chat(const struct serve_api *api, enum serve_api_gate gate, struct http_req *req);
void serve_api_models(const struct serve_api *api, const char *model_name, struct http_req *req);
/* GET /v1/models/{id}: the model object when {id} (the path after SERVE_API_MODELS_PREFIX) is
 * `model_name`, else 404 model_not_found in OpenAI's error shape. */
void serve_api_model(const struct serve_api *api, const char *model_name, struct http_req *req);

/* Finds the fill-in-the-middle tokens of the model `g` with tokenizer `tok` (both borrowed; NULL
 * gives none): the tokenizer.ggml.fim_{pre,suf,mid}_token_id keys (or their older names
 * prefix/suffix/middle_token_id), else the token texts llama.cpp recognises ("<|fim_prefix|>",
 * "<fim-prefix>", "<PRE>", ...). Pure; any thread. */
void serve_api_fim_find(const struct gguf *g, const struct tokenizer *tok,
                        struct serve_api_fim *out);

/* Prompt `i` of the request (always 0 for chat) as token ids, into *ids (new, free()) and *n: the
 * text tokenized (BOS as the model asks, special tokens in the text recognised), the ids as sent,
 * with `suffix` the fill-in-the-middle prompt around either (400 naming suffix when the model has
 * no such tokens), or for chat the rendered template tokenized, control tokens recognised where
 * the template wrote them but not in message content (unless api->content_special_tokens). Pure
 * apart from allocation; any
 * thread. On failure fills `err` and returns ERR_INVAL / ERR_NOMEM. */
/* The chat template the engine serves with: `override` (--chat-template) or else `model_template`
 * (the GGUF's tokenizer.chat_template; either may be NULL), with the BOS/EOS texts and the
 * add-BOS/EOS flags of `tok` (NULL: none), so the engine and a router that builds it from the
 * same inputs render identical prompts. chat_template_new's results and errors. Any thread. */
int serve_api_chat_template_new(const struct tokenizer *tok, const char *model_template,
                                const char *override, struct chat_template **out, char *err,
                                size_t errlen);

struct api_request;
struct api_error;
int serve_api_prompt_ids(const struct serve_api *api, const struct api_request *r, size_t i,
                         int32_t **ids, int *n, struct api_error *err);

#endif
