/* OpenAI route handlers: validate, tokenize, gate (loading / draining / faulted / queue full), then
 * hand over to the responder and the inference loop. */
#include "engine/serve/serve_api.h"

#include "common/clock.h"
#include "common/assert.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/sha256.h"
#include "engine/api/api.h"
#include "engine/gguf/gguf.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_error.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_req.h"
#include "engine/serve/serve_respond.h"
#include "engine/grammar/grammar.h"
#include "engine/text/tokenizer.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#define SERVE_API_PROMPT_TEXT_MAX (64u << 20) /* rendered chat prompt */

/* OpenAI answers a missing or wrong key with 401 before looking at the request. On success
 * writes the key's index to *key (-1 when no keys are configured). */
static bool authorized(const struct serve_api *api, struct http_req *req, int *key)
{
    *key = -1;
    if (!api || !api->auth) return true;
    char value[SERVE_AUTH_MAX_KEY + 64];
    int n = http_req_header(req, "Authorization", value, sizeof(value));
    enum serve_auth_result why = n >= 0 ? serve_auth_check(api->auth, value, (size_t)n, key)
                                 : n == ERR_NOT_FOUND ? SERVE_AUTH_MISSING
                                                      : SERVE_AUTH_WRONG; /* longer than any key */
    if (why == SERVE_AUTH_OK) return true;
    serve_auth_log_failure(api->auth, why, http_req_path(req));
    struct api_error e;
    api_error_set(&e, API_ERR_UNAUTHORIZED, NULL,
                  why == SERVE_AUTH_MISSING
                      ? "You didn't provide an API key: send \"Authorization: Bearer <key>\""
                      : "Incorrect API key provided");
    serve_error_respond(req, &e);
    return false;
}

static bool gate_open(enum serve_api_gate gate, struct http_req *req)
{
    static const enum serve_fail why[] = {
        [SERVE_API_OPEN] = SERVE_FAIL_NONE,
        [SERVE_API_LOADING] = SERVE_FAIL_LOADING,
        [SERVE_API_DRAINING] = SERVE_FAIL_DRAINING,
        [SERVE_API_FAULTED] = SERVE_FAIL_FAULTED,
    };
    if (gate == SERVE_API_OPEN) return true;
    struct api_error e;
    serve_error_set(&e, why[gate]);
    serve_error_respond(req, &e);
    return false;
}

static int prompt_from_text(const struct serve_api *api, const char *text, size_t len,
                            bool add_special, bool parse_special, const char *param, int32_t **ids,
                            size_t *n, struct api_error *err)
{
    if (!api->tok) {
        api_error_set(err, API_ERR_INVALID, param,
                      "this model has no usable tokenizer: send 'prompt' as token ids");
        return ERR_INVAL;
    }
    int rc = tokenizer_encode(api->tok, text, len, add_special, parse_special, ids, n);
    if (rc) {
        api_error_set(err, rc == ERR_NOMEM ? API_ERR_INTERNAL : API_ERR_INVALID, param,
                      "cannot tokenize the prompt: %s", err_str(rc));
        return rc == ERR_NOMEM ? ERR_NOMEM : ERR_INVAL;
    }
    return 0;
}

static int nomem(struct api_error *err)
{
    api_error_set(err, API_ERR_INTERNAL, NULL, "out of memory");
    return ERR_NOMEM;
}

/* The fill-in-the-middle prompt llama.cpp's /infill builds (prefix-suffix-middle order):
 * [BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID, the prefix and suffix tokenized without special
 * tokens (or the prefix as the ids sent). The model continues with the middle. */
static int prompt_fim(const struct serve_api *api, const struct api_prompt *pr, const char *suffix,
                      int32_t **ids, size_t *n, struct api_error *err)
{
    if (!api->fim.ok) {
        api_error_set(err, API_ERR_INVALID, "suffix",
                      "'suffix' needs a model with fill-in-the-middle tokens "
                      "(tokenizer.ggml.fim_pre/suf/mid_token_id); this one has none");
        return ERR_INVAL;
    }
    int32_t *pre = NULL, *suf = NULL, *out = NULL;
    size_t n_pre = 0, n_suf = 0;
    int rc =
        prompt_from_text(api, suffix, strlen(suffix), false, false, "suffix", &suf, &n_suf, err);
    if (!rc && pr->text)
        rc = prompt_from_text(api, pr->text, strlen(pr->text), false, false, "prompt", &pre, &n_pre,
                              err);
    if (rc) goto out;
    const int32_t *prefix = pr->text ? pre : pr->tokens;
    if (!pr->text) n_pre = pr->n_tokens;
    int32_t bos = api->tok ? tokenizer_bos(api->tok) : TOKENIZER_NULL;
    bool add_bos = bos != TOKENIZER_NULL && tokenizer_add_bos(api->tok);
    size_t total = (add_bos ? 1 : 0) + 3 + n_pre + n_suf, k = 0;
    out = malloc(total * sizeof(int32_t));
    if (!out) {
        rc = nomem(err);
        goto out;
    }
    if (add_bos) out[k++] = bos;
    out[k++] = api->fim.pre;
    if (n_pre) memcpy(out + k, prefix, n_pre * sizeof(int32_t));
    k += n_pre;
    out[k++] = api->fim.suf;
    if (n_suf) memcpy(out + k, suf, n_suf * sizeof(int32_t));
    k += n_suf;
    out[k++] = api->fim.mid;
    *ids = out;
    *n = k;
out:
    free(pre);
    free(suf);
    return rc;
}

/* The request's messages with their content escaped (tokenizer_escape_special) into `esc`, so
 * that control tokens a user typed stay text and only the template places any: *out is new
 * (free(); its contents point into esc), or NULL when there is nothing to escape with (no
 * tokenizer, or api->content_special_tokens): render r->messages then. 0, or ERR_NOMEM /
 * ERR_TOO_BIG (esc's limit). */
static int escape_messages(const struct serve_api *api, const struct api_request *r,
                           struct buf *esc, struct api_message **out)
{
    *out = NULL;
    if (!api->tok || api->content_special_tokens || r->n_messages == 0) return 0;
    /* offsets first: esc may move while it grows */
    size_t *off = malloc(r->n_messages * sizeof(*off));
    struct api_message *m = malloc(r->n_messages * sizeof(*m));
    int rc = off && m ? 0 : ERR_NOMEM;
    for (size_t i = 0; rc == 0 && i < r->n_messages; i++) {
        const char *c = r->messages[i].content;
        off[i] = esc->len;
        if ((rc = tokenizer_escape_special(api->tok, c, strlen(c), esc)) == 0)
            rc = buf_putc(esc, '\0');
    }
    for (size_t i = 0; rc == 0 && i < r->n_messages; i++)
        m[i] = (struct api_message){r->messages[i].role, esc->data + off[i]};
    free(off);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* True when the rendered prompt ends inside an opened <think> block (DeepSeek-R1's templates end
 * the generation prompt with "<think>\n"): the answer starts as reasoning. */
static bool prompt_opens_think(const char *text, size_t len)
{
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r')) len--;
    return len >= 7 && !memcmp(text + len - 7, "<think>", 7);
}

/* `s` with control-token texts escaped (tokenizer_escape_special) as a new JSON string, or NULL. */
static json_t *escaped_json_string(const struct serve_api *api, const json_t *s)
{
    struct buf b;
    buf_init(&b, SERVE_API_PROMPT_TEXT_MAX);
    json_t *out = NULL;
    if (tokenizer_escape_special(api->tok, json_string_value(s), json_string_length(s), &b) == 0)
        out = json_stringn(b.data ? b.data : "", b.len);
    buf_fini(&b);
    return out;
}

/* escape_messages for the JSON messages the template reads with tools: a new deep copy of
 * r->messages_json whose contents (strings and text parts) are escaped, or NULL in *out when
 * nothing is escaped (as escape_messages). 0 or ERR_NOMEM. */
static int escape_messages_json(const struct serve_api *api, const struct api_request *r,
                                json_t **out)
{
    *out = NULL;
    if (!api->tok || api->content_special_tokens || !r->messages_json) return 0;
    json_t *msgs = json_deep_copy(r->messages_json);
    if (!msgs) return ERR_NOMEM;
    size_t i, k;
    json_t *m, *part;
    json_array_foreach(msgs, i, m)
    {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            json_t *e = escaped_json_string(api, c);
            if (!e || json_object_set_new(m, "content", e)) goto nomem;
        } else if (json_is_array(c)) {
            json_array_foreach(c, k, part)
            {
                json_t *t = json_object_get(part, "text");
                if (!json_is_string(t)) continue;
                json_t *e = escaped_json_string(api, t);
                if (!e || json_object_set_new(part, "text", e)) goto nomem;
            }
        }
    }
    *out = msgs;
    return 0;
nomem:
    json_decref(msgs);
    return ERR_NOMEM;
}

/* The chat prompt's text: the messages (their contents escaped) through the template, with the
 * request's tools and template variables when it has any. 0 or ERR_* with terr filled. */
static int chat_prompt_text(const struct serve_api *api, const struct api_request *r,
                            struct buf *text, char *terr, size_t terrlen)
{
    int rc;
    if (r->tools || r->tool_history || r->chat_template_kwargs) {
        /* the template reads tools, tool_calls, tool_call_id and the extra variables */
        json_t *escaped = NULL;
        if ((rc = escape_messages_json(api, r, &escaped)) != 0) {
            snprintf(terr, terrlen, "%s", err_str(rc));
            return rc;
        }
        struct chat_template_input in = {.messages = escaped ? escaped : r->messages_json,
                                         .tools = r->tools,
                                         .kwargs = r->chat_template_kwargs,
                                         .add_generation_prompt = true};
        rc = chat_template_apply(api->chat_template, &in, text, terr, terrlen);
        json_decref(escaped);
        return rc;
    }
    struct buf esc;
    buf_init(&esc, SERVE_API_PROMPT_TEXT_MAX);
    struct api_message *escaped = NULL;
    rc = escape_messages(api, r, &esc, &escaped);
    if (rc)
        snprintf(terr, terrlen, "%s", err_str(rc));
    else
        rc = chat_template_render(api->chat_template, escaped ? escaped : r->messages,
                                  r->n_messages, true, text, terr, terrlen);
    free(escaped);
    buf_fini(&esc);
    return rc;
}

/* serve_api_prompt_ids, and for chat whether the prompt opened a <think> block (think_open may
 * be NULL). */
static int prompt_ids(const struct serve_api *api, const struct api_request *r, size_t i,
                      int32_t **ids, int *n, bool *think_open, struct api_error *err)
{
    *ids = NULL;
    *n = 0;
    int32_t *v = NULL;
    size_t nn = 0;
    int rc = 0;
    if (r->kind == API_KIND_COMPLETION) {
        if (i >= r->n_prompts) {
            api_error_set(err, API_ERR_INTERNAL, NULL, "no prompt %zu", i);
            return ERR_INVAL;
        }
        const struct api_prompt *pr = &r->prompts[i];
        if (r->suffix) {
            rc = prompt_fim(api, pr, r->suffix, &v, &nn, err);
        } else if (pr->tokens) {
            v = malloc(pr->n_tokens * sizeof(int32_t));
            if (!v) return nomem(err);
            memcpy(v, pr->tokens, pr->n_tokens * sizeof(int32_t));
            nn = pr->n_tokens;
        } else {
            rc = prompt_from_text(api, pr->text, strlen(pr->text), true, true, "prompt", &v, &nn,
                                  err);
        }
    } else {
        struct buf text;
        buf_init(&text, SERVE_API_PROMPT_TEXT_MAX);
        char terr[400];
        rc = chat_prompt_text(api, r, &text, terr, sizeof(terr));
        if (rc) {
            api_error_set(err, rc == ERR_NOMEM ? API_ERR_INTERNAL : API_ERR_INVALID, "messages",
                          "cannot render the chat template: %s", terr);
            rc = rc == ERR_NOMEM ? ERR_NOMEM : ERR_INVAL;
        } else {
            if (think_open) *think_open = prompt_opens_think(buf_cstr(&text), text.len);
            rc = prompt_from_text(api, text.data ? text.data : "", text.len, true, true, "messages",
                                  &v, &nn, err);
        }
        buf_fini(&text);
    }
    if (rc) return rc;
    if (nn > (size_t)INT32_MAX) nn = (size_t)INT32_MAX;
    *ids = v;
    *n = (int)nn;
    return 0;
}

int serve_api_prompt_ids(const struct serve_api *api, const struct api_request *r, size_t i,
                         int32_t **ids, int *n, struct api_error *err)
{
    return prompt_ids(api, r, i, ids, n, NULL, err);
}

int serve_api_chat_template_new(const struct tokenizer *tok, const char *model_template,
                                const char *override, struct chat_template **out, char *err,
                                size_t errlen)
{
    struct chat_template_config cc = {.model_template = model_template, .override = override};
    char *bos = NULL, *eos = NULL;
    if (tok) {
        int32_t b = tokenizer_bos(tok), e = tokenizer_eos(tok);
        const char *t;
        size_t len;
        if (b >= 0 && (t = tokenizer_token_text(tok, b, &len)) && !memchr(t, 0, len) &&
            !(bos = strndup(t, len)))
            return err_fmt(err, errlen, ERR_NOMEM, "out of memory");
        if (e >= 0 && (t = tokenizer_token_text(tok, e, &len)) && !memchr(t, 0, len) &&
            !(eos = strndup(t, len))) {
            free(bos);
            return err_fmt(err, errlen, ERR_NOMEM, "out of memory");
        }
        cc.bos_token = bos;
        cc.eos_token = eos;
        cc.add_bos = tokenizer_add_bos(tok);
        cc.add_eos = tokenizer_add_eos(tok);
    }
    int rc = chat_template_new(&cc, out, err, errlen);
    free(bos);
    free(eos);
    return rc;
}

/* The first token id of `keys` present in the GGUF and inside the vocabulary, else the first of
 * `texts` (NULL-terminated) found in the vocabulary, else TOKENIZER_NULL. */
static int32_t fim_token(const struct gguf *g, const struct tokenizer *tok, const char *const *keys,
                         const char *const *texts)
{
    int32_t n_vocab = tokenizer_vocab_size(tok);
    for (; *keys; keys++) {
        uint32_t id = 0;
        if (gguf_get_u32(g, *keys, &id) == 0 && id < (uint32_t)n_vocab) return (int32_t)id;
    }
    for (; *texts; texts++) {
        int32_t id = tokenizer_find(tok, *texts, strlen(*texts));
        if (id != TOKENIZER_NULL) return id;
    }
    return TOKENIZER_NULL;
}

void serve_api_fim_find(const struct gguf *g, const struct tokenizer *tok,
                        struct serve_api_fim *out)
{
    *out = (struct serve_api_fim){0};
    if (!g || !tok) return;
    /* The keys convert_hf_to_gguf writes (and their older names), then the token texts
     * llama.cpp's vocabulary loader recognises when a GGUF has no keys (llama-vocab.cpp). */
    static const char *const pre_keys[] = {"tokenizer.ggml.fim_pre_token_id",
                                           "tokenizer.ggml.prefix_token_id", NULL};
    static const char *const suf_keys[] = {"tokenizer.ggml.fim_suf_token_id",
                                           "tokenizer.ggml.suffix_token_id", NULL};
    static const char *const mid_keys[] = {"tokenizer.ggml.fim_mid_token_id",
                                           "tokenizer.ggml.middle_token_id", NULL};
    static const char *const pre_texts[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<｜fim▁begin｜>",
                                            "<PRE>",
                                            "▁<PRE>",
                                            NULL};
    static const char *const suf_texts[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<｜fim▁hole｜>",
                                            "<SUF>",
                                            "▁<SUF>",
                                            NULL};
    static const char *const mid_texts[] = {
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", NULL};
    out->pre = fim_token(g, tok, pre_keys, pre_texts);
    out->suf = fim_token(g, tok, suf_keys, suf_texts);
    out->mid = fim_token(g, tok, mid_keys, mid_texts);
    out->ok =
        out->pre != TOKENIZER_NULL && out->suf != TOKENIZER_NULL && out->mid != TOKENIZER_NULL;
}

/* The KV eviction a request runs with: its own "kv_eviction", else the server's. */
static struct kv_window request_window(const struct serve_api *api, const struct api_request *r)
{
    return r->kv_eviction_set ? r->kv_eviction : api->kv_window;
}

/* A sink-window request: its window within the context, a backend that can re-rotate keys, no
 * prompt logprobs, and a prompt of at most SCHED_WINDOW_MAX_TOKENS (the context does not bound
 * it, nor max_tokens). */
static bool fits_window(const struct serve_api *api, const struct api_request *r,
                        const struct kv_window *w, const char *param, const char *which,
                        int n_prompt, struct api_error *err)
{
    char msg[320];
    if (!api->kv_shift) {
        api_error_set(err, API_ERR_INVALID, "kv_eviction",
                      "kv_eviction sink-window needs a backend that can re-rotate KV blocks "
                      "(the CPU backend); this server's cannot");
        return false;
    }
    if (kv_window_check(w, api->kv_block_size, api->max_context, 1, msg, sizeof(msg)) != 0) {
        api_error_set(err, API_ERR_INVALID, "kv_eviction", "%s (this model's context)", msg);
        return false;
    }
    if (r->echo && r->logprobs) {
        api_error_set(err, API_ERR_INVALID, "kv_eviction",
                      "kv_eviction sink-window cannot report prompt logprobs (echo with logprobs)");
        return false;
    }
    if (n_prompt > SCHED_WINDOW_MAX_TOKENS) {
        api_error_set(err, API_ERR_INVALID, param,
                      "your prompt%s has %d tokens; with kv_eviction sink-window at most %d", which,
                      n_prompt, SCHED_WINDOW_MAX_TOKENS);
        return false;
    }
    return true;
}

/* The context check OpenAI and vLLM make: the prompt must leave room for at least one token, and
 * an explicit max_tokens must fit beside it (fits_window instead for a sink-window request). `i`
 * is the prompt's index in a batched request. */
static bool fits_context(const struct serve_api *api, const struct api_request *r, size_t i,
                         int n_prompt, struct api_error *err)
{
    const char *param = r->kind == API_KIND_CHAT ? "messages" : "prompt";
    char which[48] = "";
    if (r->kind == API_KIND_COMPLETION && r->n_prompts > 1)
        snprintf(which, sizeof(which), " (prompt %zu)", i);
    if (n_prompt == 0) {
        api_error_set(err, API_ERR_INVALID, param, "the prompt is empty after tokenization%s",
                      which);
        return false;
    }
    struct kv_window w = request_window(api, r);
    if (w.mode != KV_WINDOW_NONE) return fits_window(api, r, &w, param, which, n_prompt, err);
    if (n_prompt >= api->max_context) {
        api_error_set(err, API_ERR_INVALID, param,
                      "This model's maximum context length is %d tokens. However, your prompt%s "
                      "has %d tokens. Please reduce the length of the prompt.",
                      api->max_context, which, n_prompt);
        return false;
    }
    if (r->max_tokens > 0 && (long)n_prompt + r->max_tokens > api->max_context) {
        api_error_set(
            err, API_ERR_INVALID, r->kind == API_KIND_CHAT ? "max_completion_tokens" : "max_tokens",
            "This model's maximum context length is %d tokens. However, you requested "
            "%ld tokens (%d in the prompt%s, %ld for the completion). Please reduce the "
            "prompt or max_tokens.",
            api->max_context, (long)n_prompt + r->max_tokens, n_prompt, which, r->max_tokens);
        return false;
    }
    return true;
}

/* Compiles the request's structured-output grammar for the served vocabulary into *out (new).
 * A grammar that does not compile is the client's error: a 400 naming the parameter. */
static int compile_grammar(const struct serve_api *api, const struct api_request *r,
                           struct grammar **out, struct api_error *err)
{
    if (!api->gvocab) {
        api_error_set(err, API_ERR_INVALID, r->grammar_param,
                      "structured outputs need the model's tokenizer, which it lacks");
        return ERR_INVAL;
    }
    struct serve_api_grammars *c = api->grammars;
    for (int i = 0; c && i < c->n; i++) {
        if (strcmp(c->text[i], r->grammar) != 0) continue;
        char *t = c->text[i];
        struct grammar *g = c->g[i];
        memmove(c->text + 1, c->text, (size_t)i * sizeof(*c->text));
        memmove(c->g + 1, c->g, (size_t)i * sizeof(*c->g));
        c->text[0] = t, c->g[0] = g;
        c->hits++;
        grammar_ref(g);
        *out = g;
        return 0;
    }
    char gerr[400];
    int rc = grammar_compile(r->grammar, strlen(r->grammar), api->gvocab, out, gerr, sizeof(gerr));
    char *copy = rc == 0 && c ? strdup(r->grammar) : NULL;
    if (copy) {
        c->misses++;
        if (c->n == SERVE_API_GRAMMARS) {
            c->n--;
            free(c->text[c->n]);
            grammar_unref(c->g[c->n]);
        }
        memmove(c->text + 1, c->text, (size_t)c->n * sizeof(*c->text));
        memmove(c->g + 1, c->g, (size_t)c->n * sizeof(*c->g));
        c->text[0] = copy;
        c->g[0] = *out;
        c->n++;
        grammar_ref(*out);
    }
    if (rc == ERR_NOMEM) {
        api_error_set(err, API_ERR_INTERNAL, NULL, "out of memory compiling the grammar");
        return rc;
    }
    if (rc) {
        api_error_set(err, API_ERR_INVALID, r->grammar_param, "cannot compile the grammar: %s",
                      gerr);
        return ERR_INVAL;
    }
    return 0;
}

/* tool_choice "auto": the lazy grammar of the template's call form (api_tools_lazy) into
 * r->grammar and its triggers into *lz, each as bytes and, where the vocabulary holds its text
 * as one control token (which has no output bytes), as that token too. *lz stays empty when
 * none applies: the answer is then free, as "auto" always was. 0, or ERR_NOMEM (err set). */
static int lazy_tools(const struct serve_api *api, struct api_request *r, struct grammar_lazy *lz,
                      struct api_error *err)
{
    *lz = (struct grammar_lazy){0};
    if (!api->gvocab || !api->tok || !api->chat_template || !r->tools) return 0;
    struct api_tool_trigger trig[API_TOOL_TRIGGERS_MAX];
    int n = 0;
    char why[400];
    int rc = api_tools_lazy(r, chat_template_tool_format(api->chat_template), trig, &n, why,
                            sizeof(why));
    if (rc == ERR_NOMEM) return nomem(err);
    if (rc) {
        log_debug("tool_choice auto without a call grammar", LOG_S("why", why));
        return 0;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(trig[i].text);
        ASSERT(len <= GRAMMAR_TRIGGER_MAX && lz->n + 2 <= GRAMMAR_TRIGGERS_MAX);
        struct grammar_trigger t = {.len = (uint8_t)len, .token = -1, .at_start = trig[i].at_start};
        memcpy(t.text, trig[i].text, len);
        lz->t[lz->n++] = t;
        int32_t id = tokenizer_find(api->tok, trig[i].text, len);
        if (id != TOKENIZER_NULL && tokenizer_token_type(api->tok, id) == TOKENIZER_TOKEN_CONTROL) {
            t.token = id;
            lz->t[lz->n++] = t;
        }
    }
    return 0;
}

/* A request's prompts as the spec carries them, with the storage they point to (the spec's
 * serve_req_new copies it all). */
struct prompt_set {
    struct serve_req_prompt *v;
    int32_t **ids;  /* owned: v[i].ids */
    char **decoded; /* owned: echo texts decoded from token-id prompts */
    size_t n;
    long n_tokens;
    bool think_open; /* chat: the rendered prompt ends inside an opened <think> block */
};

static void prompt_set_free(struct prompt_set *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->ids) free(ps->ids[i]);
        if (ps->decoded) free(ps->decoded[i]);
    }
    free(ps->v);
    free(ps->ids);
    free(ps->decoded);
    *ps = (struct prompt_set){0};
}

/* The echo text of prompt i: the text as sent, or the ids decoded (empty without a tokenizer). */
static int prompt_echo(const struct serve_api *api, const struct api_request *r, size_t i,
                       struct prompt_set *ps, struct api_error *err)
{
    const struct api_prompt *pr = &r->prompts[i];
    if (pr->text) {
        ps->v[i].echo = pr->text;
        ps->v[i].echo_len = strlen(pr->text);
        return 0;
    }
    struct buf b;
    buf_init(&b, SERVE_API_PROMPT_TEXT_MAX);
    int rc = api->tok ? tokenizer_decode(api->tok, pr->tokens, pr->n_tokens, false, &b) : 0;
    ps->decoded[i] = rc ? NULL : buf_steal(&b);
    buf_fini(&b);
    if (rc == ERR_RANGE) {
        api_error_set(err, API_ERR_INVALID, "prompt",
                      "cannot echo prompt %zu: a token id is outside the tokenizer's vocabulary",
                      i);
        return ERR_INVAL;
    }
    if (rc || !ps->decoded[i]) return nomem(err);
    ps->v[i].echo = ps->decoded[i];
    ps->v[i].echo_len = strlen(ps->decoded[i]);
    return 0;
}

/* Tokenizes and checks every prompt of r into *ps (freed by the caller either way). */
static int prompt_set_build(const struct serve_api *api, const struct api_request *r,
                            struct prompt_set *ps, struct api_error *err)
{
    size_t n = r->kind == API_KIND_COMPLETION ? r->n_prompts : 1;
    ps->v = calloc(n, sizeof(*ps->v));
    ps->ids = calloc(n, sizeof(*ps->ids));
    ps->decoded = calloc(n, sizeof(*ps->decoded));
    if (!ps->v || !ps->ids || !ps->decoded) return nomem(err);
    ps->n = n;
    for (size_t i = 0; i < n; i++) {
        int n_ids = 0;
        int rc = prompt_ids(api, r, i, &ps->ids[i], &n_ids,
                            r->kind == API_KIND_CHAT ? &ps->think_open : NULL, err);
        if (rc) return rc;
        if (!fits_context(api, r, i, n_ids, err)) return ERR_INVAL;
        ps->v[i].ids = ps->ids[i];
        ps->v[i].n_ids = n_ids;
        ps->n_tokens += n_ids;
        if (r->echo && (rc = prompt_echo(api, r, i, ps, err)) != 0) return rc;
    }
    return 0;
}

void serve_api_grammars_fini(struct serve_api_grammars *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->text[i]);
        grammar_unref(c->g[i]);
    }
    memset(c, 0, sizeof(*c));
}

/* Runs on the service thread when the client goes away mid-request. */
static void on_client_gone(void *ud)
{
    serve_req_cancel(ud);
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return v;
}

/* The request as the other threads need it (serve_req.h "spec"): the scheduler's request, built
 * here so that the parsed API request never leaves the HTTP thread. `r`, `ps` borrowed (the
 * spec points into both until serve_req_new copies it). */
static void spec_of(const struct serve_api *api, const struct api_request *r,
                    const struct prompt_set *ps, double arrival, struct serve_req_spec *out)
{
    int best_of = r->kind == API_KIND_COMPLETION ? r->best_of : r->n;
    *out = (struct serve_req_spec){
        .created = (long long)time(NULL),
        .arrival = arrival,
        .n_choices = (int)ps->n * best_of,
        .n_prompts = (int)ps->n,
        .best_of = best_of,
        .n = r->n,
        .prompts = ps->v,
        .n_prompt_tokens = ps->n_tokens,
        .kind = r->kind,
        .stream = r->stream,
        .include_usage = r->include_usage,
        .continuous_usage = r->continuous_usage,
        .logprobs = r->logprobs,
        .echo = r->echo,
        .tools = r->tools ? r->tool_choice : API_TOOL_NONE,
        .sched =
            {
                .max_tokens = r->max_tokens,
                .prompt_logprobs = r->echo && r->logprobs,
                .stops = (const char *const *)r->stop,
                .n_stops = r->n_stop,
                .ignore_eos = r->ignore_eos,
                .priority = r->priority,
                .cache_salt = r->cache_salt,
                .window = request_window(api, r),
            },
    };
    /* The client's seed, or a random one; candidate j samples with seed + j. */
    api_request_sampler_params(r, random_u64(), &out->sched.sampling);
    (void)api_response_id(r->kind, random_u64(), out->id, sizeof(out->id));
}

#define SERVE_API_SALT_MAX (SHA256_HEX_LEN + 1 + API_MAX_SHORT_STR + 1)

/* --prefix-cache-scope key: the prefix-cache salt of a request of key `key` (index in api->auth)
 * with the client's `cache_salt` (NULL: none), into salt[SERVE_API_SALT_MAX]: the key's digest,
 * ':', then the client's salt. Digests are hex and ':' ends them, so no key's chains can be named
 * by another key or by a client's salt. False (salt untouched) under the global and salt scopes,
 * where the client's cache_salt is the request's salt as it is. */
static bool key_salt(const struct serve_api *api, int key, const char *cache_salt, char *salt)
{
    if (api->prefix_cache_scope != SERVE_CACHE_SCOPE_KEY || key < 0) return false;
    snprintf(salt, SERVE_API_SALT_MAX, "%s:%s", serve_auth_key_digest(api->auth, key),
             cache_salt ? cache_salt : "");
    return true;
}

static void handle(const struct serve_api *api, enum serve_api_gate gate, struct http_req *req,
                   enum api_kind kind)
{
    int key;
    if (!authorized(api, req, &key) || !gate_open(gate, req)) return;
    double arrival = clock_mono_s();
    size_t len = 0;
    const char *body = http_req_body(req, &len);
    struct api_limits lim = {.n_vocab = api->n_vocab,
                             .max_tokens = api->max_context,
                             .max_tokens_window = SCHED_WINDOW_MAX_TOKENS,
                             .window_default = api->kv_window.mode != KV_WINDOW_NONE};
    struct api_request *r = NULL;
    struct api_error err;
    struct prompt_set ps = {0};
    struct serve_req *sr = NULL;
    struct grammar *g = NULL;
    if (api_request_parse(body, len, kind, &lim, &r, &err) != 0) goto fail;
    if (r->model && strcmp(r->model, api->model_name) != 0) {
        api_error_set(&err, API_ERR_MODEL_NOT_FOUND, "model",
                      "The model '%s' does not exist; this server serves '%s'", r->model,
                      api->model_name);
        goto fail;
    }
    if (api->prefix_cache_scope == SERVE_CACHE_SCOPE_SALT && (!r->cache_salt || !*r->cache_salt)) {
        api_error_set(&err, API_ERR_INVALID, "cache_salt",
                      "cache_salt is required: this server shares cached prompt prefixes only "
                      "between requests with the same cache_salt (--prefix-cache-scope salt)");
        goto fail;
    }
    struct grammar_lazy lazy;
    if (lazy_tools(api, r, &lazy, &err) != 0) goto fail;
    if (r->grammar && compile_grammar(api, r, &g, &err) != 0) goto fail;
    if (prompt_set_build(api, r, &ps, &err) != 0) goto fail;
    if (serve_loop_waiting(api->loop) >= api->max_queue) {
        serve_error_queue_full(&err, api->max_queue);
        goto fail;
    }
    struct serve_req_spec spec;
    spec_of(api, r, &ps, arrival, &spec);
    char salt[SERVE_API_SALT_MAX];
    if (key_salt(api, key, r->cache_salt, salt)) spec.sched.cache_salt = salt;
    spec.sched.grammar = g;
    spec.reasoning =
        api->reasoning && kind == API_KIND_CHAT && chat_template_thinks(api->chat_template);
    /* A constrained answer is the grammar's language from its first token: it opens a <think>
     * block only if the grammar writes one, whatever the prompt ended with. A lazy grammar's
     * answer is free until its trigger, and its <think> block never triggers. */
    spec.reasoning_inside = spec.reasoning && ps.think_open && (!g || lazy.n > 0);
    if (g && lazy.n > 0) {
        lazy.think = spec.reasoning;
        lazy.think_open = spec.reasoning_inside;
        spec.sched.lazy = lazy;
    }
    sr = serve_req_new(&spec);
    api_request_free(r);
    prompt_set_free(&ps);
    grammar_unref(g); /* the request holds its own reference */
    if (!sr) {
        api_error_set(&err, API_ERR_INTERNAL, NULL, "out of memory");
        serve_error_respond(req, &err);
        return;
    }
    struct http_stream *stream = http_req_defer(req);
    if (!stream) {
        serve_req_unref(sr);
        return; /* http_req_defer answered 500 */
    }
    http_stream_on_cancel(stream, on_client_gone, sr);
    if (serve_respond_adopt(api->resp, sr, stream) != 0) {
        api_error_set(&err, API_ERR_INTERNAL, NULL, "out of memory");
        serve_error_respond_stream(stream, &err);
        serve_req_unref(sr);
        return;
    }
    int rc = serve_loop_submit(api->loop, sr);
    if (rc) {
        /* Faulted since the gate let it through: refused like the requests after it. */
        bool faulted = rc == ERR_BAD_STATE && serve_loop_faulted(api->loop);
        serve_req_fail(sr, rc == ERR_AGAIN       ? SERVE_FAIL_QUEUE_FULL
                           : faulted             ? SERVE_FAIL_FAULTED
                           : rc == ERR_BAD_STATE ? SERVE_FAIL_DRAINING
                                                 : SERVE_FAIL_INTERNAL);
    }
    return;
fail:
    api_request_free(r);
    prompt_set_free(&ps);
    grammar_unref(g);
    serve_error_respond(req, &err);
}

void serve_api_completions(const struct serve_api *api, enum serve_api_gate gate,
                           struct http_req *req)
{
    handle(api, api ? gate : SERVE_API_LOADING, req, API_KIND_COMPLETION);
}

void serve_api_chat(const struct serve_api *api, enum serve_api_gate gate, struct http_req *req)
{
    handle(api, api ? gate : SERVE_API_LOADING, req, API_KIND_CHAT);
}

void serve_api_models(const struct serve_api *api, const char *model_name, struct http_req *req)
{
    int key;
    if (!authorized(api, req, &key)) return;
    json_t *m = api_model_json(model_name, api ? api->created : 0, api ? api->max_context : 0);
    json_t *j = m ? json_pack("{s:s,s:[o]}", "object", "list", "data", m) : NULL;
    if (!j) {
        http_respond_error(req, 500, "server_error", "out of memory");
        return;
    }
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}

void serve_api_model(const struct serve_api *api, const char *model_name, struct http_req *req)
{
    int key;
    if (!authorized(api, req, &key)) return;
    const char *path = http_req_path(req);
    const char *id = strncmp(path, SERVE_API_MODELS_PREFIX, strlen(SERVE_API_MODELS_PREFIX)) == 0
                         ? path + strlen(SERVE_API_MODELS_PREFIX)
                         : path;
    if (strcmp(id, model_name) != 0) {
        struct api_error e;
        api_error_set(&e, API_ERR_MODEL_NOT_FOUND, "model",
                      "The model '%s' does not exist; this server serves '%s'", id, model_name);
        serve_error_respond(req, &e);
        return;
    }
    json_t *j = api_model_json(model_name, api ? api->created : 0, api ? api->max_context : 0);
    if (!j) {
        http_respond_error(req, 500, "server_error", "out of memory");
        return;
    }
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}
