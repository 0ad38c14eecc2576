/* OpenAI route handlers: validate, tokenize, gate (loading / draining / faulted / queue full), then
 * hand over to the responder and the inference loop. */
#include "engine/serve/serve_api.h"

#include "common/clock.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "engine/api/api.h"
#include "engine/serve/serve_error.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_req.h"
#include "engine/serve/serve_respond.h"
#include "engine/grammar/grammar.h"
#include "engine/text/tokenizer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#define SERVE_API_PROMPT_TEXT_MAX (64u << 20) /* rendered chat prompt */

bool serve_api_authorized(const char *key, const char *header)
{
    if (!key) return true;
    if (!header || strncasecmp(header, "Bearer ", 7) != 0) return false;
    const char *got = header + 7;
    while (*got == ' ') got++;
    size_t kl = strlen(key), gl = strlen(got);
    /* Compare every byte of the key whatever matches, so timing does not reveal a prefix. */
    unsigned char diff = (unsigned char)(kl != gl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

/* OpenAI answers a missing or wrong key with 401 before looking at the request. */
static bool authorized(const struct serve_api *api, struct http_req *req)
{
    if (!api || !api->api_key) return true;
    char value[1024];
    int n = http_req_header(req, "Authorization", value, sizeof(value));
    if (serve_api_authorized(api->api_key, n >= 0 ? value : NULL)) return true;
    struct api_error e;
    api_error_set(&e, API_ERR_UNAUTHORIZED, NULL,
                  n >= 0 ? "Incorrect API key provided"
                         : "You didn't provide an API key: send \"Authorization: Bearer <key>\"");
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

/* True when the rendered prompt ends inside an opened <think> block (DeepSeek-R1's templates end
 * the generation prompt with "<think>\n"): the answer starts as reasoning. */
static bool prompt_opens_think(const char *text, size_t len)
{
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r')) len--;
    return len >= 7 && !memcmp(text + len - 7, "<think>", 7);
}

/* serve_api_prompt_ids, and for chat whether the prompt opened a <think> block (think_open may
 * be NULL). */
static int prompt_ids(const struct serve_api *api, const struct api_request *r, int32_t **ids,
                      int *n, bool *think_open, struct api_error *err)
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
    struct buf text;
    buf_init(&text, SERVE_API_PROMPT_TEXT_MAX);
    char terr[400];
    int rc;
    if (r->tools || r->tool_history || r->chat_template_kwargs) {
        /* the template reads tools, tool_calls, tool_call_id and the extra variables */
        struct chat_template_input in = {.messages = r->messages_json,
                                         .tools = r->tools,
                                         .kwargs = r->chat_template_kwargs,
                                         .add_generation_prompt = true};
        rc = chat_template_apply(api->chat_template, &in, &text, terr, sizeof(terr));
    } else {
        rc = chat_template_render(api->chat_template, r->messages, r->n_messages, true, &text, terr,
                                  sizeof(terr));
    }
    if (rc) {
        api_error_set(err, rc == ERR_NOMEM ? API_ERR_INTERNAL : API_ERR_INVALID, "messages",
                      "cannot render the chat template: %s", terr);
        rc = rc == ERR_NOMEM ? ERR_NOMEM : ERR_INVAL;
    } else {
        if (think_open) *think_open = prompt_opens_think(buf_cstr(&text), text.len);
        rc = prompt_from_text(api, text.data ? text.data : "", text.len, "messages", ids, n, err);
    }
    buf_fini(&text);
    return rc;
}

int serve_api_prompt_ids(const struct serve_api *api, const struct api_request *r, int32_t **ids,
                         int *n, struct api_error *err)
{
    return prompt_ids(api, r, ids, n, NULL, err);
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
        .tools = r->tools ? r->tool_choice : API_TOOL_NONE,
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

static void handle(const struct serve_api *api, enum serve_api_gate gate, struct http_req *req,
                   enum api_kind kind)
{
    if (!authorized(api, req) || !gate_open(gate, req)) return;
    double arrival = clock_mono_s();
    size_t len = 0;
    const char *body = http_req_body(req, &len);
    struct api_limits lim = {.n_vocab = api->n_vocab, .max_tokens = api->max_context};
    struct api_request *r = NULL;
    struct api_error err;
    int32_t *ids = NULL;
    int n_ids = 0;
    struct serve_req *sr = NULL;
    struct grammar *g = NULL;
    if (api_request_parse(body, len, kind, &lim, &r, &err) != 0) goto fail;
    if (r->model && strcmp(r->model, api->model_name) != 0) {
        api_error_set(&err, API_ERR_MODEL_NOT_FOUND, "model",
                      "The model '%s' does not exist; this server serves '%s'", r->model,
                      api->model_name);
        goto fail;
    }
    if (r->grammar && compile_grammar(api, r, &g, &err) != 0) goto fail;
    bool think_open = false;
    if (prompt_ids(api, r, &ids, &n_ids, &think_open, &err) != 0) goto fail;
    if (!fits_context(api, r, n_ids, &err)) goto fail;
    if (serve_loop_waiting(api->loop) >= api->max_queue) {
        serve_error_queue_full(&err, api->max_queue);
        goto fail;
    }
    struct serve_req_spec spec;
    spec_of(r, ids, n_ids, arrival, &spec);
    spec.sched.grammar = g;
    spec.reasoning =
        api->reasoning && kind == API_KIND_CHAT && chat_template_thinks(api->chat_template);
    /* A constrained answer is the grammar's language from its first token: it opens a <think>
     * block only if the grammar writes one, whatever the prompt ended with. */
    spec.reasoning_inside = spec.reasoning && think_open && !g;
    sr = serve_req_new(&spec);
    api_request_free(r);
    free(ids);
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
    free(ids);
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
    if (!authorized(api, req)) return;
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
