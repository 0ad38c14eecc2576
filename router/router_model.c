/* Model info from the engine's tokenizer document, and prompt hashing with the engine's code (see
 * router_model.h). */
#include "router/router_model.h"

#include "common/err.h"
#include "engine/api/api.h"
#include "engine/api/chat_template.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/prefix_cache.h"
#include "engine/serve/serve_api.h"
#include "engine/text/tokenizer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct router_model_info {
    atomic_int refs;
    char name[256];
    struct tokenizer *tok;      /* NULL: the model has none usable */
    struct chat_template *chat; /* the engine's template, built as the engine builds it */
    struct serve_api api;       /* what serve_api_prompt_ids reads: tok, chat_template and fim */
    int block_size, max_context, n_vocab;
};

int router_model_info_parse(const void *doc, size_t len, struct router_model_info **out, char *err,
                            size_t errlen)
{
    struct gguf *g = NULL;
    struct router_model_info *mi = NULL;
    char gerr[256] = "";
    int rc = gguf_parse(doc, len, &g, gerr, sizeof(gerr));
    if (rc) {
        rc = rc == ERR_NOMEM ? rc : ERR_PARSE;
        err_fmt(err, errlen, rc, "not a tokenizer document: %s", gerr);
        goto out;
    }
    char hash[64];
    if (gguf_get_cstr(g, "cinfer.block_hash", hash, sizeof(hash)) != 0) {
        rc = err_fmt(err, errlen, ERR_INVAL, "the document has no cinfer.block_hash");
        goto out;
    }
    if (strcmp(hash, PREFIX_CACHE_HASH_NAME) != 0) {
        rc = err_fmt(err, errlen, ERR_UNSUPPORTED,
                     "the engine hashes blocks with \"%s\", this router with \"%s\"", hash,
                     PREFIX_CACHE_HASH_NAME);
        goto out;
    }
    rc = ERR_NOMEM;
    if (!(mi = calloc(1, sizeof(*mi)))) goto out;
    atomic_init(&mi->refs, 1);
    uint32_t bs = 0, ctx = 0, vocab = 0;
    if (gguf_get_u32(g, "cinfer.block_size", &bs) || bs < 1 || bs > 65536 ||
        gguf_get_u32(g, "cinfer.max_context", &ctx) || ctx < 2 || ctx > (1u << 30) ||
        gguf_get_u32(g, "cinfer.n_vocab", &vocab) || vocab < 1 || vocab > (1u << 30) ||
        gguf_get_cstr(g, "cinfer.model_name", mi->name, sizeof(mi->name))) {
        rc = err_fmt(err, errlen, ERR_INVAL,
                     "the document lacks a valid cinfer.block_size, max_context, n_vocab or "
                     "model_name");
        goto out;
    }
    mi->block_size = (int)bs;
    mi->max_context = (int)ctx;
    mi->n_vocab = (int)vocab;
    char terr[256];
    if (tokenizer_load(g, &mi->tok, terr, sizeof(terr)) != 0) mi->tok = NULL;
    /* The template exactly as the engine chose it: the document carries the effective source. */
    char *tmpl = NULL;
    struct gguf_str gs;
    if (gguf_get_str(g, "tokenizer.chat_template", &gs) == 0 && !(tmpl = strndup(gs.data, gs.len)))
        goto out;
    rc = serve_api_chat_template_new(mi->tok, tmpl, NULL, &mi->chat, terr, sizeof(terr));
    if (rc) {
        free(tmpl);
        if (rc != ERR_NOMEM) rc = ERR_INVAL;
        err_fmt(err, errlen, rc, "the document's chat template: %s", terr);
        goto out;
    }
    mi->api = (struct serve_api){
        .model_name = mi->name,
        .tok = mi->tok,
        .chat_template = mi->chat,
        .n_vocab = mi->n_vocab,
        .max_context = mi->max_context,
    };
    serve_api_fim_find(g, mi->tok, &mi->api.fim);
    free(tmpl);
    *out = mi;
    mi = NULL;
    rc = 0;
out:
    router_model_info_unref(mi);
    gguf_close(g);
    return rc;
}

struct router_model_info *router_model_info_ref(struct router_model_info *mi)
{
    if (mi) atomic_fetch_add(&mi->refs, 1);
    return mi;
}

void router_model_info_unref(struct router_model_info *mi)
{
    if (!mi || atomic_fetch_sub(&mi->refs, 1) != 1) return;
    chat_template_free(mi->chat);
    tokenizer_free(mi->tok);
    free(mi);
}

int router_model_info_block_size(const struct router_model_info *mi)
{
    return mi->block_size;
}

const char *router_model_info_name(const struct router_model_info *mi)
{
    return mi->name;
}

bool router_model_info_has_tokenizer(const struct router_model_info *mi)
{
    return mi->tok != NULL;
}

int router_model_prompt(const struct router_model_info *mi, const char *body, size_t len, bool chat,
                        struct router_prompt *out)
{
    struct api_limits lim = {.n_vocab = mi->n_vocab, .max_tokens = mi->max_context};
    struct api_request *r = NULL;
    struct api_error e;
    int32_t *ids = NULL;
    int n = 0;
    int rc = api_request_parse(body, len, chat ? API_KIND_CHAT : API_KIND_COMPLETION, &lim, &r, &e);
    if (rc) return rc == ERR_NOMEM ? rc : ERR_INVAL;
    /* A batch of prompts is routed by its first: the one whose prefix the replica caches first. */
    bool text = chat || !r->prompts[0].tokens;
    if (text && !mi->tok) {
        rc = ERR_UNSUPPORTED;
        goto out;
    }
    if ((rc = serve_api_prompt_ids(&mi->api, r, 0, &ids, &n, &e)) != 0) {
        rc = rc == ERR_NOMEM ? rc : ERR_INVAL;
        goto out;
    }
    int bs = mi->block_size, nb = n > 1 ? (n - 1) / bs : 0;
    *out = (struct router_prompt){.n_prompt = n, .n_blocks = nb};
    if (nb) {
        rc = ERR_NOMEM;
        if (!(out->hashes = malloc((size_t)nb * sizeof(*out->hashes)))) goto out;
        uint64_t h = prefix_cache_root(r->cache_salt, r->cache_salt ? strlen(r->cache_salt) : 0);
        for (int b = 0; b < nb; b++)
            out->hashes[b] = h = prefix_cache_block_hash(h, ids + (size_t)b * bs, bs);
    }
    rc = 0;
out:
    free(ids);
    api_request_free(r);
    return rc;
}

void router_prompt_fini(struct router_prompt *p)
{
    free(p->hashes);
    p->hashes = NULL;
    p->n_blocks = 0;
}
