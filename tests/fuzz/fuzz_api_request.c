/* Fuzz target for the OpenAI API layer: the first byte picks the endpoint (even: completions, odd:
 * chat), the rest is parsed as a request body. A rejected body must yield a well-formed error
 * object; an accepted one is carried through everything downstream of parsing: the chat template
 * in every family, the stop matcher fed the rendered prompt in uneven pieces, and response, chunk
 * and SSE building with the prompt bytes as generated text and logprobs. A crash, a sanitizer
 * report or an invariant failure (abort) is a finding. */
#include "common/err.h"
#include "common/json_util.h"
#include "engine/api/api.h"
#include "engine/api/chat_template.h"
#include "engine/sched/sampler.h"
#include "engine/text/stop_matcher.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must(int cond)
{
    if (!cond) abort();
}

static void check_error(const struct api_error *e)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    must(e->status >= 400 && e->status < 600 && e->type != NULL);
    must(api_error_body(e, &b) == 0);
    json_t *j = json_loads(buf_cstr(&b), 0, NULL);
    must(j != NULL);
    json_decref(j);
    buf_fini(&b);
}

/* Streams `text` through a matcher built from the request's stops; the output must be a prefix
 * of the text. Returns the emitted length. */
static size_t run_stops(const struct api_request *r, const char *text, size_t len)
{
    struct stop_matcher *m = NULL;
    must(stop_matcher_new((const char *const *)r->stop, r->n_stop, &m) == 0);
    struct buf out;
    buf_init(&out, 0);
    size_t pos = 0, step = 1;
    int rc = 0;
    while (pos < len && rc == 0) {
        size_t n = step < len - pos ? step : len - pos;
        rc = stop_matcher_feed(m, text + pos, n, &out);
        must(rc >= 0);
        pos += n;
        step = step % 7 + 1;
    }
    must(stop_matcher_flush(m, &out) == 0);
    must(out.len <= len && memcmp(buf_cstr(&out), text, out.len) == 0);
    must(rc == 1 || out.len == len);
    size_t emitted = out.len;
    buf_fini(&out);
    stop_matcher_free(m);
    return emitted;
}

static void render(const struct api_request *r, const char *text, size_t len)
{
    char id[40];
    must(api_response_id(r->kind, (uint64_t)len * 2654435761u, id, sizeof(id)) == 0);
    struct api_response_meta meta = {r->kind,          id,         r->model ? r->model : "m", 1,
                                     r->include_usage, r->logprobs};
    size_t n_tok = len < 16 ? len : 16;
    struct api_top_logprob tops[API_MAX_TOP_LOGPROBS];
    struct api_token_logprob lps[16];
    for (int k = 0; k < API_MAX_TOP_LOGPROBS; k++)
        tops[k] =
            (struct api_top_logprob){text + (len ? (size_t)k % len : 0), len ? 1 : 0, -1.0f * k};
    for (size_t i = 0; i < n_tok; i++)
        lps[i] = (struct api_token_logprob){text + i,        1,    -0.5f,
                                            r->top_logprobs, tops, r->echo && i == 0};
    struct api_usage u = {.prompt_tokens = (long)r->n_prompts, .completion_tokens = (long)len};
    struct api_choice c = {.index = r->n - 1,
                           .text = text,
                           .len = len,
                           .finish = r->n_stop ? API_FINISH_STOP : API_FINISH_LENGTH,
                           .logprobs = r->logprobs ? lps : NULL,
                           .n_logprobs = n_tok,
                           .usage = r->continuous_usage ? &u : NULL};
    struct buf sse;
    buf_init(&sse, 0);
    json_t *j = api_response_json(&meta, &c, 1, &u);
    must(j != NULL && api_response_sse(j, &sse) == 0);
    json_decref(j);
    j = api_response_chunk(&meta, &c, true);
    must(j != NULL && api_response_sse(j, &sse) == 0);
    json_decref(j);
    j = api_response_chunk(&meta, &c, false);
    must(j != NULL && api_response_sse(j, &sse) == 0);
    json_decref(j);
    j = api_response_usage_chunk(&meta, &u);
    must(j != NULL && api_response_sse(j, &sse) == 0 && api_response_sse_done(&sse) == 0);
    json_decref(j);
    buf_fini(&sse);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    enum api_kind kind = (data[0] & 1) ? API_KIND_CHAT : API_KIND_COMPLETION;
    struct api_limits lim = {.n_vocab = 32000, .max_tokens = 2048};
    struct api_request *r = NULL;
    struct api_error e;
    int rc = api_request_parse((const char *)data + 1, size - 1, kind, &lim, &r, &e);
    if (rc != 0) {
        must(r == NULL);
        check_error(&e);
        return 0;
    }
    must(r->kind == kind && r->n >= 1 && r->n <= API_MAX_N && r->n_stop <= API_MAX_STOP);
    /* What the serving layer relies on: choices and sequences in range, the bias in range and
     * valid for the sampler, max_tokens 0 only with echo, no best_of > n stream. */
    must(r->best_of >= r->n && r->best_of <= API_MAX_BEST_OF);
    must(r->max_tokens != 0 || r->echo);
    must(!(r->stream && r->best_of > r->n));
    must(r->n_logit_bias <= API_MAX_LOGIT_BIAS);
    for (size_t i = 0; i < r->n_logit_bias; i++)
        must(r->logit_bias[i].token >= 0 && r->logit_bias[i].token < lim.n_vocab &&
             r->logit_bias[i].bias >= -API_LOGIT_BIAS_LIMIT &&
             r->logit_bias[i].bias <= API_LOGIT_BIAS_LIMIT);
    struct sampler_params sp;
    api_request_sampler_params(r, 1, &sp);
    must(sampler_params_valid(&sp));
    if (kind == API_KIND_CHAT) {
        must(r->n_messages > 0);
        static struct chat_template *builtins[32];
        for (size_t k = 0; chat_template_builtin_name(k) && k < 32; k++) {
            if (!builtins[k]) {
                struct chat_template_config cc = {.override = chat_template_builtin_name(k)};
                char err[256];
                must(chat_template_new(&cc, &builtins[k], err, sizeof(err)) == 0);
            }
            struct buf p;
            char err[256];
            buf_init(&p, 1 << 20);
            int trc = chat_template_render(builtins[k], r->messages, r->n_messages, true, &p, err,
                                           sizeof(err));
            must(trc == 0 || trc == ERR_TOO_BIG);
            if (trc == 0) render(r, buf_cstr(&p), run_stops(r, p.data ? p.data : "", p.len));
            buf_fini(&p);
        }
    } else {
        must(r->n_prompts >= 1 && r->n_prompts <= API_MAX_PROMPTS &&
             r->n_prompts * (size_t)r->best_of <= API_MAX_SEQS);
        for (size_t i = 0; i < r->n_prompts; i++) {
            const struct api_prompt *pr = &r->prompts[i];
            must((pr->text != NULL) != (pr->n_tokens > 0));
            for (size_t k = 0; k < pr->n_tokens; k++)
                must(pr->tokens[k] >= 0 && pr->tokens[k] < lim.n_vocab);
            const char *t = pr->text ? pr->text : "";
            if (i < 4) render(r, t, run_stops(r, t, strlen(t)));
        }
        must(!r->suffix || r->suffix[0]);
    }
    api_request_free(r);
    return 0;
}
