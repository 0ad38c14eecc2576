/* OpenAI route handlers: validate, tokenize, gate (loading / draining / faulted / queue full), then
 * hand over to the responder and the inference loop. */
#include "engine/serve/serve_api.h"

#include "common/clock.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/sha256.h"
#include "engine/api/api.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_error.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_req.h"
#include "engine/serve/serve_respond.h"
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
                            const char *param, int32_t **ids, int *n, struct api_error *err)
{
    if (!api->tok) {
        api_error_set(err, API_ERR_INVALID, param,
                      "this model has no usable tokenizer: send 'prompt' as token ids");
        return ERR_INVAL;
    }
    size_t nn = 0;
    int rc = tokenizer_encode(api->tok, text, len, true, true, ids, &nn);
    if (rc) {
        api_error_set(err, rc == ERR_NOMEM ? API_ERR_INTERNAL : API_ERR_INVALID, param,
                      "cannot tokenize the prompt: %s", err_str(rc));
        return rc == ERR_NOMEM ? ERR_NOMEM : ERR_INVAL;
    }
    if (nn > (size_t)INT32_MAX) nn = (size_t)INT32_MAX;
    *n = (int)nn;
    return 0;
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

int serve_api_prompt_ids(const struct serve_api *api, const struct api_request *r, int32_t **ids,
                         int *n, struct api_error *err)
{
    *ids = NULL;
    *n = 0;
    if (r->kind == API_KIND_COMPLETION) {
        if (r->prompt_tokens) {
            *ids = malloc(r->n_prompt_tokens * sizeof(int32_t));
            if (!*ids) {
                api_error_set(err, API_ERR_INTERNAL, NULL, "out of memory");
                return ERR_NOMEM;
            }
            memcpy(*ids, r->prompt_tokens, r->n_prompt_tokens * sizeof(int32_t));
            *n = (int)r->n_prompt_tokens;
            return 0;
        }
        return prompt_from_text(api, r->prompt, strlen(r->prompt), "prompt", ids, n, err);
    }
    struct buf text, esc;
    buf_init(&text, SERVE_API_PROMPT_TEXT_MAX);
    buf_init(&esc, SERVE_API_PROMPT_TEXT_MAX);
    char terr[400];
    struct api_message *escaped = NULL;
    int rc = escape_messages(api, r, &esc, &escaped);
    if (rc)
        snprintf(terr, sizeof(terr), "%s", err_str(rc));
    else
        rc = chat_template_render(api->chat_template, escaped ? escaped : r->messages,
                                  r->n_messages, true, &text, terr, sizeof(terr));
    if (rc) {
        api_error_set(err, rc == ERR_NOMEM ? API_ERR_INTERNAL : API_ERR_INVALID, "messages",
                      "cannot render the chat template: %s", terr);
        rc = rc == ERR_NOMEM ? ERR_NOMEM : ERR_INVAL;
    } else {
        rc = prompt_from_text(api, text.data ? text.data : "", text.len, "messages", ids, n, err);
    }
    free(escaped);
    buf_fini(&esc);
    buf_fini(&text);
    return rc;
}

/* The context check OpenAI and vLLM make: the prompt must leave room for at least one token, and
 * an explicit max_tokens must fit beside it. */
static bool fits_context(const struct serve_api *api, const struct api_request *r, int n_prompt,
                         struct api_error *err)
{
    const char *param = r->kind == API_KIND_CHAT ? "messages" : "prompt";
    if (n_prompt == 0) {
        api_error_set(err, API_ERR_INVALID, param, "the prompt is empty after tokenization");
        return false;
    }
    if (n_prompt >= api->max_context) {
        api_error_set(err, API_ERR_INVALID, param,
                      "This model's maximum context length is %d tokens. However, your prompt "
                      "has %d tokens. Please reduce the length of the prompt.",
                      api->max_context, n_prompt);
        return false;
    }
    if (r->max_tokens > 0 && (long)n_prompt + r->max_tokens > api->max_context) {
        api_error_set(err, API_ERR_INVALID,
                      r->kind == API_KIND_CHAT ? "max_completion_tokens" : "max_tokens",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%ld tokens (%d in the prompt, %ld for the completion). Please reduce the "
                      "prompt or max_tokens.",
                      api->max_context, (long)n_prompt + r->max_tokens, n_prompt, r->max_tokens);
        return false;
    }
    return true;
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
 * here so that the parsed API request never leaves the HTTP thread. `r`, `ids` borrowed. */
static void spec_of(const struct api_request *r, const int32_t *ids, int n_ids, double arrival,
                    struct serve_req_spec *out)
{
    *out = (struct serve_req_spec){
        .created = (long long)time(NULL),
        .arrival = arrival,
        .n_choices = r->n,
        .kind = r->kind,
        .stream = r->stream,
        .include_usage = r->include_usage,
        .logprobs = r->logprobs,
        .sched =
            {
                .prompt = ids,
                .n_prompt = n_ids,
                .max_tokens = r->max_tokens,
                .stops = (const char *const *)r->stop,
                .n_stops = r->n_stop,
                .ignore_eos = r->ignore_eos,
                .priority = r->priority,
                .cache_salt = r->cache_salt,
            },
    };
    /* The client's seed, or a random one; choice c samples with seed + c. */
    api_request_sampler_params(r, random_u64(), &out->sched.sampling);
    (void)api_response_id(r->kind, random_u64(), out->id, sizeof(out->id));
}

#define SERVE_API_SALT_MAX (SHA256_HEX_LEN + 1 + API_MAX_SHORT_STR + 1)

/* --prefix-cache-scope key: the prefix-cache salt of a request of key `key` (index in api->auth)
 * with the client's `cache_salt` (NULL: none), into salt[SERVE_API_SALT_MAX]: the key's digest,
 * ':', then the client's salt. Digests are hex and ':' ends them, so no key's chains can be named
 * by another key or by a client's salt. False (salt untouched) under the global scope. */
static bool key_salt(const struct serve_api *api, int key, const char *cache_salt, char *salt)
{
    if (!api->prefix_cache_per_key || key < 0) return false;
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
    struct api_limits lim = {.n_vocab = api->n_vocab, .max_tokens = api->max_context};
    struct api_request *r = NULL;
    struct api_error err;
    int32_t *ids = NULL;
    int n_ids = 0;
    struct serve_req *sr = NULL;
    if (api_request_parse(body, len, kind, &lim, &r, &err) != 0) goto fail;
    if (r->model && strcmp(r->model, api->model_name) != 0) {
        api_error_set(&err, API_ERR_MODEL_NOT_FOUND, "model",
                      "The model '%s' does not exist; this server serves '%s'", r->model,
                      api->model_name);
        goto fail;
    }
    if (serve_api_prompt_ids(api, r, &ids, &n_ids, &err) != 0) goto fail;
    if (!fits_context(api, r, n_ids, &err)) goto fail;
    if (serve_loop_waiting(api->loop) >= api->max_queue) {
        serve_error_queue_full(&err, api->max_queue);
        goto fail;
    }
    struct serve_req_spec spec;
    spec_of(r, ids, n_ids, arrival, &spec);
    char salt[SERVE_API_SALT_MAX];
    if (key_salt(api, key, r->cache_salt, salt)) spec.sched.cache_salt = salt;
    sr = serve_req_new(&spec);
    api_request_free(r);
    free(ids);
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
    free(ids);
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
    json_t *j =
        json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i}]}", "object", "list", "data", "id", model_name,
                  "object", "model", "created", (json_int_t)(api ? api->created : 0), "owned_by",
                  "cinfer", "max_model_len", api ? api->max_context : 0);
    if (!j) {
        http_respond_error(req, 500, "server_error", "out of memory");
        return;
    }
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}
