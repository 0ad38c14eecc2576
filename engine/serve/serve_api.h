/* The OpenAI routes of `cinfer-engine serve` (/v1/completions, /v1/chat/completions, /v1/models):
 * on the HTTP service thread they parse and validate the request (engine/api/api.h), render the chat
 * template, tokenize, enforce the context length and the queue bound, then hand the request to the
 * responder and the inference loop. Nothing here blocks or touches the model. */
#ifndef CINFER_ENGINE_SERVE_API_H
#define CINFER_ENGINE_SERVE_API_H

#include "common/http_server.h"
#include "engine/api/chat_template.h"

#include <stdbool.h>
#include <stdint.h>

struct tokenizer;
struct grammar_vocab;
struct serve_loop;
struct serve_respond;

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
struct grammar;
/* Drops every entry. Call after the last request was handled. */
void serve_api_grammars_fini(struct serve_api_grammars *c);

/* Everything the handlers need, borrowed for as long as the routes are served. */
struct serve_api {
    const char *model_name;      /* served model name ("model" must match it when sent) */
    const struct tokenizer *tok; /* NULL: only token-id prompts on /v1/completions */
    const struct chat_template *chat_template; /* renders /v1/chat/completions messages */
    /* The token trie of tok for constrained decoding; NULL: structured outputs get a 400. */
    const struct grammar_vocab *gvocab;
    /* Split a thinking model's <think> block into reasoning_content (--reasoning-parser). */
    bool reasoning;
    struct serve_api_grammars *grammars; /* NULL: every request compiles its own */
    int n_vocab;
    int max_context;     /* prompt + generated tokens per sequence */
    int max_queue;       /* waiting requests beyond which new ones get 429 */
    long long created;   /* Unix time the model was loaded (/v1/models) */
    const char *api_key; /* non-NULL: /v1 requests need "Authorization: Bearer <api_key>" */
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

/* True when `header` (the Authorization header's value, NULL when absent) carries the bearer
 * token `key` (NULL: no key configured, everything passes). Constant time in the key's length.
 * Pure; any thread. */
bool serve_api_authorized(const char *key, const char *header);

/* The request's prompt as token ids: the text tokenized (BOS as the model asks, special tokens in
 * the text recognised), the ids as sent, or for chat the rendered template tokenized. Pure
 * apart from allocation; any thread. On failure fills `err` and returns ERR_INVAL / ERR_NOMEM. */
struct api_request;
struct api_error;
int serve_api_prompt_ids(const struct serve_api *api, const struct api_request *r, int32_t **ids,
                         int *n, struct api_error *err);

#endif
