/* A served model as the router needs it, rebuilt from the tokenizer document its engines serve
 * (GET /cinfer/tokenizer, engine/serve/serve_router.h) with the engine's own code: the tokenizer
 * (engine/text/tokenizer.c loading the same GGUF keys), the chat template, the KV block size and
 * the hash rules (prefix_cache_root / prefix_cache_block_hash). From it, a request's chained block
 * hashes: the ones the engine's prefix cache computes for the same request, by construction.
 *
 * Immutable once built and reference-counted: the proxy thread builds it, the HTTP thread hashes
 * prompts with it, whoever drops the last reference frees it. */
#ifndef CINFER_ROUTER_MODEL_H
#define CINFER_ROUTER_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct router_model_info;

/* Parses the document doc[0..len) (borrowed; not kept). On success *out is new with one
 * reference. ERR_PARSE (not a GGUF), ERR_UNSUPPORTED (another hash name: an engine built with
 * other rules, whose hashes would never match), ERR_INVAL (missing cinfer.* keys), ERR_NOMEM;
 * the reason goes to err. A document without a usable tokenizer is accepted: only token-id
 * prompts are hashed then. Any thread. */
int router_model_info_parse(const void *doc, size_t len, struct router_model_info **out, char *err,
                            size_t errlen);
struct router_model_info *router_model_info_ref(struct router_model_info *mi);
void router_model_info_unref(struct router_model_info *mi); /* NULL-safe; any thread */

int router_model_info_block_size(const struct router_model_info *mi);
const char *router_model_info_name(const struct router_model_info *mi); /* the served name */
bool router_model_info_has_tokenizer(const struct router_model_info *mi);

/* A request's prefix identity: the chained hashes of the full prompt blocks the engine could find
 * cached ((n_prompt - 1) / block_size of them: the block holding the last token is always
 * computed). */
struct router_prompt {
    int n_prompt;     /* prompt tokens */
    int n_blocks;     /* hashes[0..n_blocks) */
    uint64_t *hashes; /* owned */
};

/* Parses body[0..len) (borrowed) with the engine's request parser for `chat` or completions and
 * computes its prompt as the engine will (template, tokenizer, cache_salt root). Returns 0;
 * ERR_INVAL when the engine would refuse the request (it then answers it: the router forwards such
 * requests without a prefix), ERR_UNSUPPORTED for a text prompt without a tokenizer, ERR_NOMEM.
 * On success *out is filled (router_prompt_fini). Any thread. */
int router_model_prompt(const struct router_model_info *mi, const char *body, size_t len, bool chat,
                        struct router_prompt *out);
void router_prompt_fini(struct router_prompt *p);

#endif
