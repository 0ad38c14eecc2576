/* Unit tests of the router's model info: the tokenizer document an engine serves
 * (serve_router_tokenizer_doc) rebuilt into a tokenizer and template whose prompt ids and chained
 * block hashes equal the engine's own for the same requests (text, token ids, chat, cache_salt,
 * a --chat-template override), on the real vocabularies in ../shared (SentencePiece stories260K and
 * byte-level BPE GPT-2,
 * Phi-3 whose special-token stripping depends on general.name); and every bad document refused with its reason. */
#include "router/router_model.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/api/api.h"
#include "engine/api/chat_template.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/prefix_cache.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_router.h"
#include "engine/text/tokenizer.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16

struct fixture {
    struct gguf *g;
    struct tokenizer *tok;
    struct chat_template *chat; /* the engine's template */
    struct serve_api api;       /* the engine's view */
    struct router_model_info *mi;
};

static bool setup(struct fixture *f, const char *rel, const char *override)
{
    const char *path = test_shared_path(rel);
    if (!path) return false;
    char err[256];
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(gguf_open(path, &f->g, err, sizeof(err)), 0);
    ck_assert_int_eq(tokenizer_load(f->g, &f->tok, err, sizeof(err)), 0);
    struct gguf_str gs;
    char *tmpl = NULL;
    if (gguf_get_str(f->g, "tokenizer.chat_template", &gs) == 0) tmpl = strndup(gs.data, gs.len);
    ck_assert_msg(serve_api_chat_template_new(f->tok, tmpl, override, &f->chat, err, sizeof(err)) ==
                      0,
                  "%s", err);
    free(tmpl);
    f->api = (struct serve_api){.model_name = "m",
                                .tok = f->tok,
                                .chat_template = f->chat,
                                .n_vocab = tokenizer_vocab_size(f->tok),
                                .max_context = 4096};
    struct serve_router_cfg cfg = {.model = f->g,
                                   .chat_template = chat_template_source(f->chat),
                                   .model_name = "served-name",
                                   .block_size = BS,
                                   .max_context = 4096,
                                   .n_vocab = tokenizer_vocab_size(f->tok)};
    struct buf doc;
    buf_init(&doc, 0);
    ck_assert_int_eq(serve_router_tokenizer_doc(&cfg, &doc), 0);
    ck_assert_int_eq(router_model_info_parse(doc.data, doc.len, &f->mi, err, sizeof(err)), 0);
    buf_fini(&doc);
    ck_assert_str_eq(router_model_info_name(f->mi), "served-name");
    ck_assert_int_eq(router_model_info_block_size(f->mi), BS);
    ck_assert(router_model_info_has_tokenizer(f->mi));
    return true;
}

static void teardown(struct fixture *f)
{
    router_model_info_unref(f->mi);
    chat_template_free(f->chat);
    tokenizer_free(f->tok);
    gguf_close(f->g);
}

/* The engine's hashes for `body`: its parser, prompt ids and the prefix cache's chain. */
static int engine_hashes(struct fixture *f, const char *body, bool chat, uint64_t *out, int cap,
                         int *n_prompt)
{
    struct api_limits lim = {.n_vocab = f->api.n_vocab, .max_tokens = f->api.max_context};
    struct api_request *r;
    struct api_error e;
    ck_assert_int_eq(api_request_parse(body, strlen(body),
                                       chat ? API_KIND_CHAT : API_KIND_COMPLETION, &lim, &r, &e),
                     0);
    int32_t *ids;
    int n;
    ck_assert_int_eq(serve_api_prompt_ids(&f->api, r, 0, &ids, &n, &e), 0);
    uint64_t h = prefix_cache_root(r->cache_salt, r->cache_salt ? strlen(r->cache_salt) : 0);
    int nb = (n - 1) / BS;
    ck_assert_int_le(nb, cap);
    for (int b = 0; b < nb; b++) out[b] = h = prefix_cache_block_hash(h, ids + b * BS, BS);
    free(ids);
    api_request_free(r);
    *n_prompt = n;
    return nb;
}

static void check_same(struct fixture *f, const char *body, bool chat, int min_blocks)
{
    uint64_t want[512];
    int n_prompt;
    int nb = engine_hashes(f, body, chat, want, 512, &n_prompt);
    struct router_prompt p;
    ck_assert_int_eq(router_model_prompt(f->mi, body, strlen(body), chat, &p), 0);
    ck_assert_int_eq(p.n_prompt, n_prompt);
    ck_assert_int_eq(p.n_blocks, nb);
    ck_assert_int_ge(nb, min_blocks);
    for (int b = 0; b < nb; b++) ck_assert_uint_eq(p.hashes[b], want[b]);
    router_prompt_fini(&p);
}

static const char long_text[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high. "
    "The ball flew over the trees and landed in a pond. Lily was sad, but a kind duck helped her.";

START_TEST(test_router_model_hashes_match_engine_spm)
{
    struct fixture f;
    if (!setup(&f, "models/tinyllamas/stories260K.gguf", NULL)) return;
    char body[4096];
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":4}", long_text);
    check_same(&f, body, false, 3);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"cache_salt\":\"tenant-a\"}", long_text);
    check_same(&f, body, false, 3);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},{\"role\":\"user\","
             "\"content\":\"and then?\"}]}",
             long_text);
    check_same(&f, body, true, 3);
    check_same(&f, "{\"prompt\":[5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21]}", false, 1);
    check_same(&f, "{\"prompt\":\"short\"}", false, 0);
    /* The salt changes every hash: another tenant's prefix never matches. */
    struct router_prompt a, b;
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\"}", long_text);
    ck_assert_int_eq(router_model_prompt(f.mi, body, strlen(body), false, &a), 0);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"cache_salt\":\"x\"}", long_text);
    ck_assert_int_eq(router_model_prompt(f.mi, body, strlen(body), false, &b), 0);
    ck_assert_int_eq(a.n_blocks, b.n_blocks);
    ck_assert_uint_ne(a.hashes[0], b.hashes[0]);
    router_prompt_fini(&a);
    router_prompt_fini(&b);
    /* A request the engine refuses is not hashed (the engine answers it). */
    struct router_prompt p;
    ck_assert_int_eq(router_model_prompt(&*f.mi, "{\"prompt\":7}", 12, false, &p), ERR_INVAL);
    ck_assert_int_eq(router_model_prompt(f.mi, "{\"messages\":[]}", 15, true, &p), ERR_INVAL);
    ck_assert_int_eq(router_model_prompt(f.mi, "{\"prompt\":[99999]}", 18, false, &p), ERR_INVAL);
    teardown(&f);
}
END_TEST

START_TEST(test_router_model_hashes_match_engine_bpe_and_override)
{
    struct fixture f;
    if (!setup(&f, "testdata/tokenizer/ggml-vocab-gpt-2.gguf", NULL)) return;
    char body[4096];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"system\",\"content\":\"You are terse. %s\"},"
             "{\"role\":\"user\",\"content\":\"Summarise, \\u00e9t\\u00e9 \\ud83d\\ude00\"}]}",
             long_text);
    check_same(&f, body, true, 3);
    snprintf(body, sizeof(body), "{\"prompt\":\"<|endoftext|>user\\n%s<|endoftext|>\"}", long_text);
    check_same(&f, body, false, 3);
    teardown(&f);
    /* Phi-3: whitespace after special tokens is dropped because general.name says phi-3; the
     * document must carry general.name for the router's ids to match. */
    if (!setup(&f, "testdata/tokenizer/ggml-vocab-phi-3.gguf", NULL)) return;
    snprintf(body, sizeof(body), "{\"prompt\":\"<|user|>\\n %s<|end|>\\n<|assistant|>\\n\"}",
             long_text);
    check_same(&f, body, false, 3);
    teardown(&f);
    /* --chat-template on the engine: the document carries it, the router renders with it. */
    if (!setup(&f, "testdata/tokenizer/ggml-vocab-gpt-2.gguf", "llama3")) return;
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             long_text);
    check_same(&f, body, true, 3);
    teardown(&f);
}
END_TEST

START_TEST(test_router_model_bad_documents)
{
    char err[256];
    struct router_model_info *mi = NULL;
    ck_assert_int_eq(router_model_info_parse("GGUF", 4, &mi, err, sizeof(err)), ERR_PARSE);
    ck_assert(strstr(err, "not a tokenizer document"));
    ck_assert_int_eq(router_model_info_parse("", 0, &mi, err, sizeof(err)), ERR_PARSE);
    /* Documents written by hand: another hash name, then missing sizes. */
    struct gguf_writer *w = gguf_writer_new();
    struct buf doc;
    buf_init(&doc, 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "cinfer.block_hash", "other-v9"), 0);
    ck_assert_int_eq(gguf_writer_write_buf(w, &doc), 0);
    ck_assert_int_eq(router_model_info_parse(doc.data, doc.len, &mi, err, sizeof(err)),
                     ERR_UNSUPPORTED);
    ck_assert(strstr(err, "other-v9"));
    buf_reset(&doc);
    ck_assert_int_eq(gguf_writer_set_str(w, "cinfer.block_hash", PREFIX_CACHE_HASH_NAME), 0);
    ck_assert_int_eq(gguf_writer_write_buf(w, &doc), 0);
    ck_assert_int_eq(router_model_info_parse(doc.data, doc.len, &mi, err, sizeof(err)), ERR_INVAL);
    buf_reset(&doc);
    /* Complete but tokenizer-less: accepted, token-id prompts only. */
    ck_assert_int_eq(gguf_writer_set_u32(w, "cinfer.block_size", 4), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "cinfer.max_context", 64), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "cinfer.n_vocab", 100), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "cinfer.model_name", "bare"), 0);
    ck_assert_int_eq(gguf_writer_write_buf(w, &doc), 0);
    ck_assert_int_eq(router_model_info_parse(doc.data, doc.len, &mi, err, sizeof(err)), 0);
    ck_assert(!router_model_info_has_tokenizer(mi));
    struct router_prompt p;
    const char *text = "{\"prompt\":\"hi\"}", *ids = "{\"prompt\":[1,2,3,4,5,6,7,8,9]}";
    ck_assert_int_eq(router_model_prompt(mi, text, strlen(text), false, &p), ERR_UNSUPPORTED);
    ck_assert_int_eq(router_model_prompt(mi, ids, strlen(ids), false, &p), 0);
    ck_assert_int_eq(p.n_blocks, 2);
    router_prompt_fini(&p);
    ck_assert_ptr_eq(router_model_info_ref(mi), mi);
    router_model_info_unref(mi);
    router_model_info_unref(mi);
    router_model_info_unref(NULL);
    buf_fini(&doc);
    gguf_writer_free(w);
}
END_TEST

Suite *router_model_suite(void)
{
    Suite *s = suite_create("router_model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_router_model_hashes_match_engine_spm);
    tcase_add_test(tc, test_router_model_hashes_match_engine_bpe_and_override);
    tcase_add_test(tc, test_router_model_bad_documents);
    suite_add_tcase(s, tc);
    return s;
}
