/* The pure parts of the OpenAI route handlers: prompt -> token ids (text, token
 * ids, chat template) with stories260K's tokenizer (skipped without ../shared). */
#include "engine/serve/serve_api.h"

#include "common/err.h"
#include "engine/api/api.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

struct fixture {
    struct gguf *g;
    struct tokenizer *tok;
    struct chat_template *chat;
    struct serve_api api;
};

static bool fixture_open(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    const char *path = test_shared_path("models/tinyllamas/stories260K.gguf");
    if (!path) return false;
    char err[256];
    ck_assert_int_eq(gguf_open(path, &f->g, err, sizeof(err)), 0);
    ck_assert_int_eq(tokenizer_load(f->g, &f->tok, err, sizeof(err)), 0);
    struct chat_template_config cc = {.override = "chatml"};
    ck_assert_int_eq(chat_template_new(&cc, &f->chat, err, sizeof(err)), 0);
    f->api = (struct serve_api){.model_name = "m",
                                .tok = f->tok,
                                .n_vocab = 512,
                                .max_context = 256,
                                .chat_template = f->chat};
    return true;
}

static void fixture_close(struct fixture *f)
{
    chat_template_free(f->chat);
    tokenizer_free(f->tok);
    gguf_close(f->g);
}

static struct api_request *parse(enum api_kind kind, const char *body)
{
    struct api_request *r = NULL;
    struct api_error e;
    ck_assert_msg(api_request_parse(body, strlen(body), kind, NULL, &r, &e) == 0, "%s", e.message);
    return r;
}

START_TEST(test_serve_api_prompt_ids)
{
    struct fixture f;
    if (!fixture_open(&f)) return;
    struct api_error e;
    int32_t *ids = NULL;
    int n = 0;
    /* Text: tokenized with BOS, as `generate` does. */
    struct api_request *r = parse(API_KIND_COMPLETION, "{\"prompt\":\"Once upon a time\"}");
    ck_assert_int_eq(serve_api_prompt_ids(&f.api, r, &ids, &n, &e), 0);
    int32_t *want = NULL;
    size_t nw = 0;
    ck_assert_int_eq(tokenizer_encode(f.tok, "Once upon a time", 16, true, true, &want, &nw), 0);
    ck_assert_int_eq(n, (int)nw);
    ck_assert(memcmp(ids, want, nw * sizeof(int32_t)) == 0);
    ck_assert_int_eq(ids[0], tokenizer_bos(f.tok));
    free(ids);
    free(want);
    api_request_free(r);
    /* Token ids: passed through unchanged (no BOS added). */
    r = parse(API_KIND_COMPLETION, "{\"prompt\":[5,6,7]}");
    ck_assert_int_eq(serve_api_prompt_ids(&f.api, r, &ids, &n, &e), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 5);
    ck_assert_int_eq(ids[2], 7);
    free(ids);
    api_request_free(r);
    /* Chat: the ChatML rendering, tokenized. */
    r = parse(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}");
    ck_assert_int_eq(serve_api_prompt_ids(&f.api, r, &ids, &n, &e), 0);
    const char *rendered = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    ck_assert_int_eq(tokenizer_encode(f.tok, rendered, strlen(rendered), true, true, &want, &nw),
                     0);
    ck_assert_int_eq(n, (int)nw);
    ck_assert(memcmp(ids, want, nw * sizeof(int32_t)) == 0);
    free(ids);
    free(want);
    api_request_free(r);
    /* No tokenizer: text prompts are refused naming the parameter; token ids still work. */
    f.api.tok = NULL;
    r = parse(API_KIND_COMPLETION, "{\"prompt\":\"x\"}");
    ck_assert_int_eq(serve_api_prompt_ids(&f.api, r, &ids, &n, &e), ERR_INVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_ptr_null(ids);
    api_request_free(r);
    fixture_close(&f);
}
END_TEST

Suite *serve_api_suite(void)
{
    Suite *s = suite_create("serve_api");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_serve_api_prompt_ids);
    suite_add_tcase(s, tc);
    return s;
}
