/* Unit tests of request parsing (engine/api/api_request.c) and error objects (engine/api/api_error.c):
 * every accepted form of each parameter, the defaults, and a table of malformed requests that
 * asserts status, type and param of the error each one gets. */
#include "engine/api/api.h"

#include "common/err.h"
#include "engine/grammar/grammar.h"
#include "engine/sched/sampler.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct api_limits lim = {.n_vocab = 32000, .max_tokens = 4096};
#define C_KIND API_KIND_COMPLETION

static struct api_request *parse_ok(enum api_kind kind, const char *body)
{
    struct api_request *r = NULL;
    struct api_error e;
    memset(&e, 0, sizeof(e));
    int rc = api_request_parse(body, strlen(body), kind, &lim, &r, &e);
    ck_assert_msg(rc == 0, "%s -> %d %s (param %s)", body, rc, e.message, e.param);
    ck_assert_ptr_nonnull(r);
    return r;
}

START_TEST(test_api_request_parse_completion_all_params)
{
    struct api_request *r = parse_ok(
        API_KIND_COMPLETION,
        "{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":32,\"temperature\":0.5,"
        "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":-1,\"stop\":[\"\\n\",\"END\"],\"n\":2,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
        "\"logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"user\":\"u1\",\"priority\":-5,\"cache_salt\":\"salt\",\"echo\":false,"
        "\"ignore_eos\":true}");
    ck_assert_int_eq(r->kind, API_KIND_COMPLETION);
    ck_assert(r->ignore_eos);
    ck_assert_str_eq(r->model, "m");
    ck_assert_uint_eq(r->n_prompts, 1);
    ck_assert_str_eq(r->prompts[0].text, "Once upon");
    ck_assert_ptr_null(r->prompts[0].tokens);
    ck_assert(!r->echo);
    ck_assert_ptr_null(r->suffix);
    ck_assert_int_eq(r->best_of, 2); /* the default: n */
    ck_assert_int_eq(r->max_tokens, 32);
    ck_assert_float_eq(r->temperature, 0.5f);
    ck_assert_float_eq_tol(r->top_p, 0.9f, 1e-6);
    ck_assert_int_eq(r->top_k, 40);
    ck_assert_float_eq_tol(r->min_p, 0.05f, 1e-6);
    ck_assert(r->has_seed);
    ck_assert_uint_eq(r->seed, UINT64_MAX);
    ck_assert_uint_eq(r->n_stop, 2);
    ck_assert_str_eq(r->stop[0], "\n");
    ck_assert_str_eq(r->stop[1], "END");
    ck_assert_int_eq(r->n, 2);
    ck_assert_float_eq(r->presence_penalty, 0.5f);
    ck_assert_float_eq(r->frequency_penalty, -0.5f);
    ck_assert_float_eq_tol(r->repetition_penalty, 1.1f, 1e-6);
    ck_assert(r->logprobs);
    ck_assert_int_eq(r->top_logprobs, 3);
    ck_assert(r->stream);
    ck_assert(r->include_usage);
    ck_assert_str_eq(r->user, "u1");
    ck_assert_int_eq(r->priority, -5);
    ck_assert_str_eq(r->cache_salt, "salt");

    struct sampler_params sp;
    api_request_sampler_params(r, 7, &sp);
    ck_assert_float_eq(sp.temperature, 0.5f);
    ck_assert_int_eq(sp.top_k, 40);
    ck_assert_float_eq_tol(sp.top_p, 0.9f, 1e-6);
    ck_assert_float_eq_tol(sp.repeat_penalty, 1.1f, 1e-6);
    ck_assert_int_eq(sp.repeat_last_n, -1);
    ck_assert_uint_eq(sp.seed, UINT64_MAX);
    ck_assert_int_eq(sp.n_logprobs, 3);
    api_request_free(r);
}
END_TEST

START_TEST(test_api_request_parse_defaults)
{
    struct api_request *r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":\"\"}");
    ck_assert_ptr_null(r->model);
    ck_assert_uint_eq(r->n_prompts, 1);
    ck_assert_str_eq(r->prompts[0].text, "");
    ck_assert_int_eq(r->max_tokens, API_COMPL_DEFAULT_MAX_TOKENS);
    ck_assert(!r->echo && !r->continuous_usage);
    ck_assert_int_eq(r->best_of, 1);
    ck_assert_ptr_null(r->suffix);
    ck_assert_uint_eq(r->n_logit_bias, 0);
    ck_assert_int_eq(r->n, 1);
    ck_assert_float_eq(r->temperature, 1.0f);
    ck_assert_float_eq(r->top_p, 1.0f);
    ck_assert_int_eq(r->top_k, 0);
    ck_assert_float_eq(r->repetition_penalty, 1.0f);
    ck_assert(!r->has_seed && !r->logprobs && !r->stream && !r->include_usage);
    ck_assert_uint_eq(r->n_stop, 0);
    struct sampler_params sp;
    api_request_sampler_params(r, 1234, &sp);
    ck_assert_uint_eq(sp.seed, 1234);
    ck_assert_int_eq(sp.n_logprobs, 0);
    ck_assert(!sp.logprobs);
    ck_assert_int_eq(sp.n_bias, 0);
    ck_assert_int_eq(sp.repeat_last_n, 64);
    api_request_free(r);

    r = parse_ok(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    ck_assert_int_eq(r->max_tokens, -1); /* chat: until the context is full */
    api_request_free(r);
}
END_TEST

START_TEST(test_api_request_parse_nulls_mean_default_and_unknown_ignored)
{
    struct api_request *r = parse_ok(
        API_KIND_COMPLETION,
        "{\"prompt\":\"x\",\"temperature\":null,\"stop\":null,\"max_tokens\":null,\"seed\":null,"
        "\"logprobs\":null,\"stream_options\":null,\"frobnicate\":{\"deep\":[1,2,{}]},"
        "\"metadata\":\"x\",\"tools\":[],\"logit_bias\":{},\"suffix\":\"\",\"echo\":null,"
        "\"best_of\":null,"
        "\"response_format\":{\"type\":\"text\"}}");
    ck_assert_float_eq(r->temperature, 1.0f);
    ck_assert_uint_eq(r->n_stop, 0);
    ck_assert_int_eq(r->max_tokens, API_COMPL_DEFAULT_MAX_TOKENS);
    ck_assert(!r->has_seed);
    ck_assert_ptr_null(r->suffix); /* "" is no suffix */
    ck_assert_uint_eq(r->n_logit_bias, 0);
    ck_assert_int_eq(r->best_of, 1);
    api_request_free(r);
}
END_TEST

/* Chat fields that change nothing this engine does are accepted: text-only modalities, null
 * audio, and what only matters to OpenAI's platform (store, metadata, service_tier, ...). */
START_TEST(test_api_request_parse_chat_accepts_platform_fields)
{
    struct api_request *r = parse_ok(
        API_KIND_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"modalities\":[\"text\"],"
        "\"audio\":null,\"web_search_options\":null,\"store\":false,\"metadata\":{\"k\":\"v\"},"
        "\"service_tier\":\"auto\",\"prompt_cache_key\":\"abc\",\"safety_identifier\":\"u\","
        "\"reasoning_effort\":\"low\",\"verbosity\":\"low\",\"parallel_tool_calls\":true,"
        "\"tool_choice\":\"none\",\"prediction\":{\"type\":\"content\",\"content\":\"x\"},"
        "\"stream\":true,\"stream_options\":{\"include_obfuscation\":false}}");
    ck_assert_uint_eq(r->n_messages, 1);
    api_request_free(r);
}
END_TEST

START_TEST(test_api_request_parse_prompt_forms)
{
    struct api_request *r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":[1,2,31999]}");
    ck_assert_uint_eq(r->n_prompts, 1);
    ck_assert_ptr_null(r->prompts[0].text);
    ck_assert_uint_eq(r->prompts[0].n_tokens, 3);
    ck_assert_int_eq(r->prompts[0].tokens[0], 1);
    ck_assert_int_eq(r->prompts[0].tokens[2], 31999);
    api_request_free(r);

    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":[\"only one\"],\"stop\":\"x\"}");
    ck_assert_uint_eq(r->n_prompts, 1);
    ck_assert_str_eq(r->prompts[0].text, "only one");
    ck_assert_uint_eq(r->n_stop, 1);
    ck_assert_str_eq(r->stop[0], "x");
    api_request_free(r);

    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":[[5,6]]}");
    ck_assert_uint_eq(r->n_prompts, 1);
    ck_assert_uint_eq(r->prompts[0].n_tokens, 2);
    ck_assert_int_eq(r->prompts[0].tokens[1], 6);
    api_request_free(r);

    /* Without limits any int32 id is accepted (the scheduler checks the vocabulary). */
    struct api_error e;
    ck_assert_int_eq(
        api_request_parse("{\"prompt\":[2147483647]}", 23, API_KIND_COMPLETION, NULL, &r, &e), 0);
    ck_assert_int_eq(r->prompts[0].tokens[0], 2147483647);
    api_request_free(r);
}
END_TEST

START_TEST(test_api_request_parse_batched_prompts)
{
    struct api_request *r =
        parse_ok(API_KIND_COMPLETION, "{\"prompt\":[\"a\",\"\",\"c d\"],\"n\":2}");
    ck_assert_uint_eq(r->n_prompts, 3);
    ck_assert_str_eq(r->prompts[0].text, "a");
    ck_assert_str_eq(r->prompts[1].text, "");
    ck_assert_str_eq(r->prompts[2].text, "c d");
    ck_assert_int_eq(r->n, 2);
    ck_assert_int_eq(r->best_of, 2);
    api_request_free(r);

    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":[[1,2],[3],[4,5,6]]}");
    ck_assert_uint_eq(r->n_prompts, 3);
    ck_assert_uint_eq(r->prompts[0].n_tokens, 2);
    ck_assert_uint_eq(r->prompts[1].n_tokens, 1);
    ck_assert_int_eq(r->prompts[1].tokens[0], 3);
    ck_assert_uint_eq(r->prompts[2].n_tokens, 3);
    ck_assert_int_eq(r->prompts[2].tokens[2], 6);
    ck_assert_ptr_null(r->prompts[2].text);
    api_request_free(r);

    /* API_MAX_PROMPTS prompts are accepted; prompts x best_of up to API_MAX_SEQS. */
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_puts(&b, "{\"prompt\":["), 0);
    for (int i = 0; i < API_MAX_PROMPTS; i++)
        ck_assert_int_eq(buf_puts(&b, i ? ",\"p\"" : "\"p\""), 0);
    ck_assert_int_eq(buf_puts(&b, "]}"), 0);
    r = parse_ok(API_KIND_COMPLETION, buf_cstr(&b));
    ck_assert_uint_eq(r->n_prompts, API_MAX_PROMPTS);
    api_request_free(r);
    buf_fini(&b);
    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":\"x\",\"best_of\":20}");
    ck_assert_int_eq(r->best_of, API_MAX_BEST_OF);
    api_request_free(r);
}
END_TEST

START_TEST(test_api_request_parse_completion_extras)
{
    struct api_request *r = parse_ok(
        API_KIND_COMPLETION, "{\"prompt\":\"def f(\",\"suffix\":\"\\n    return x\",\"echo\":true,"
                             "\"max_tokens\":0,\"logprobs\":1,\"n\":2,\"best_of\":5,"
                             "\"logit_bias\":{\"7\":-100,\"31999\":100,\"0\":0.5,\"007\":1}}");
    ck_assert(r->echo);
    ck_assert_str_eq(r->suffix, "\n    return x");
    ck_assert_int_eq(r->max_tokens, 0); /* with echo: the prompt alone */
    ck_assert_int_eq(r->n, 2);
    ck_assert_int_eq(r->best_of, 5);
    ck_assert_uint_eq(r->n_logit_bias, 4);
    float want[32000];
    memset(want, 0, sizeof(want));
    for (size_t i = 0; i < r->n_logit_bias; i++) {
        ck_assert_int_lt(r->logit_bias[i].token, 32000);
        want[r->logit_bias[i].token] += r->logit_bias[i].bias;
    }
    ck_assert_float_eq(want[7], -100.0f + 1.0f); /* "007" is token 7 too: both add */
    ck_assert_float_eq(want[31999], 100.0f);
    ck_assert_float_eq(want[0], 0.5f);
    struct sampler_params sp;
    api_request_sampler_params(r, 1, &sp);
    ck_assert_ptr_eq(sp.bias, r->logit_bias);
    ck_assert_int_eq(sp.n_bias, 4);
    ck_assert(sp.logprobs); /* asked for, and best_of > n ranks by them */
    ck_assert_int_eq(sp.n_logprobs, 1);
    ck_assert(sampler_params_valid(&sp));
    api_request_free(r);

    /* best_of > n alone turns the logprobs on (for the ranking), with no alternatives. */
    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}");
    api_request_sampler_params(r, 1, &sp);
    ck_assert(sp.logprobs);
    ck_assert_int_eq(sp.n_logprobs, 0);
    ck_assert(!r->logprobs);
    api_request_free(r);

    /* logit_bias applies to chat as well; vLLM's continuous_usage_stats is read. */
    r = parse_ok(API_KIND_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logit_bias\":{\"3\":-1},"
                 "\"stream\":true,\"stream_options\":{\"include_usage\":true,"
                 "\"continuous_usage_stats\":true},\"best_of\":1,\"echo\":false}");
    ck_assert_uint_eq(r->n_logit_bias, 1);
    ck_assert_int_eq(r->logit_bias[0].token, 3);
    ck_assert_float_eq(r->logit_bias[0].bias, -1.0f);
    ck_assert(r->include_usage && r->continuous_usage);
    api_request_free(r);

    /* best_of == n may stream. */
    r = parse_ok(API_KIND_COMPLETION, "{\"prompt\":\"x\",\"n\":2,\"best_of\":2,\"stream\":true,"
                                      "\"stream_options\":{\"continuous_usage_stats\":true}}");
    ck_assert(r->continuous_usage && !r->include_usage);
    api_request_free(r);

    /* API_MAX_LOGIT_BIAS entries are accepted, one more is not. */
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(buf_puts(&b, "{\"prompt\":\"x\",\"logit_bias\":{"), 0);
    for (int i = 0; i <= API_MAX_LOGIT_BIAS; i++) {
        char e[32];
        snprintf(e, sizeof(e), "%s\"%d\":-1", i ? "," : "", i);
        if (i == API_MAX_LOGIT_BIAS) {
            ck_assert_int_eq(buf_puts(&b, "}}"), 0);
            r = parse_ok(API_KIND_COMPLETION, buf_cstr(&b));
            ck_assert_uint_eq(r->n_logit_bias, API_MAX_LOGIT_BIAS);
            api_request_free(r);
            b.len -= 2;
        }
        ck_assert_int_eq(buf_puts(&b, e), 0);
    }
    ck_assert_int_eq(buf_puts(&b, "}}"), 0);
    struct api_error err;
    ck_assert_int_eq(api_request_parse(b.data, b.len, C_KIND, &lim, &r, &err), ERR_INVAL);
    ck_assert_str_eq(err.param, "logit_bias");
    ck_assert_ptr_nonnull(strstr(err.message, "at most 1024"));
    /* Too many sequences: prompts x best_of over API_MAX_SEQS. */
    buf_reset(&b);
    ck_assert_int_eq(buf_puts(&b, "{\"best_of\":2,\"prompt\":["), 0);
    for (int i = 0; i < API_MAX_SEQS / 2 + 1; i++)
        ck_assert_int_eq(buf_puts(&b, i ? ",[1]" : "[1]"), 0);
    ck_assert_int_eq(buf_puts(&b, "]}"), 0);
    ck_assert_int_eq(api_request_parse(b.data, b.len, C_KIND, &lim, &r, &err), ERR_INVAL);
    ck_assert_str_eq(err.param, "prompt");
    ck_assert_ptr_nonnull(strstr(err.message, "at most 256"));
    /* Too many prompts. */
    buf_reset(&b);
    ck_assert_int_eq(buf_puts(&b, "{\"prompt\":["), 0);
    for (int i = 0; i < API_MAX_PROMPTS + 1; i++)
        ck_assert_int_eq(buf_puts(&b, i ? ",\"p\"" : "\"p\""), 0);
    ck_assert_int_eq(buf_puts(&b, "]}"), 0);
    ck_assert_int_eq(api_request_parse(b.data, b.len, C_KIND, &lim, &r, &err), ERR_INVAL);
    ck_assert_str_eq(err.param, "prompt");
    ck_assert_ptr_nonnull(strstr(err.message, "257 prompts"));
    buf_fini(&b);
}
END_TEST

START_TEST(test_api_request_parse_chat_messages)
{
    struct api_request *r = parse_ok(
        API_KIND_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"name\":\"bob\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[]},{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"42\"},"
        "{\"role\":\"user\",\"content\":[]}],"
        "\"max_completion_tokens\":100,\"max_tokens\":5,\"logprobs\":true,\"top_logprobs\":20}");
    ck_assert_uint_eq(r->n_messages, 5);
    ck_assert_int_eq(r->messages[0].role, API_ROLE_SYSTEM);
    ck_assert_str_eq(r->messages[0].content, "be brief");
    ck_assert_int_eq(r->messages[1].role, API_ROLE_USER);
    ck_assert_str_eq(r->messages[1].content, "a\nb");
    ck_assert_int_eq(r->messages[2].role, API_ROLE_ASSISTANT);
    ck_assert_str_eq(r->messages[2].content, "");
    ck_assert_int_eq(r->messages[3].role, API_ROLE_TOOL);
    ck_assert_str_eq(r->messages[4].content, "");
    ck_assert_int_eq(r->max_tokens, 100); /* max_completion_tokens wins */
    ck_assert(r->logprobs);
    ck_assert_int_eq(r->top_logprobs, 20);
    ck_assert_str_eq(api_role_name(r->messages[3].role), "tool");
    api_request_free(r);
}
END_TEST

struct bad_case {
    enum api_kind kind;
    const char *body;
    const char *param; /* NULL: JSON null */
    const char *msg;   /* a substring the message must contain */
};

#define C    API_KIND_COMPLETION
#define H    API_KIND_CHAT
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const struct bad_case bad_cases[] = {
    /* Not a usable JSON object. */
    {C, "", NULL, "could not parse the JSON body"},
    {C, "{\"prompt\":", NULL, "could not parse the JSON body"},
    {C, "[]", NULL, "must be a JSON object, got an array"},
    {C, "42", NULL, "must be a JSON object"},
    {C, "\"str\"", NULL, "must be a JSON object"},
    {C, "null", NULL, "must be a JSON object"},
    {C, "{\"prompt\":\"a\",\"prompt\":\"b\"}", NULL, "duplicate"},
    {C, "{\"prompt\":\"\xff\"}", NULL, "not valid UTF-8 (bad byte 0xff at offset 11)"},
    {C, "{\"prompt\":\"\xc0\xaf\"}", NULL, "not valid UTF-8"},     /* overlong "/" */
    {C, "{\"prompt\":\"\xed\xa0\x80\"}", NULL, "not valid UTF-8"}, /* surrogate */
    {C, "{\"prompt\":\"x\",\"max_tokens\":123456789012345678901234567890}", NULL, "too big"},
    {C, "{\"prompt\":\"x\",\"temperature\":1e999}", NULL, "overflow"},
    {C, "{\"prompt\":\"x\\u0000y\"}", NULL, "could not parse"},
    /* prompt */
    {C, "{}", "prompt", "'prompt' is required"},
    {C, "{\"prompt\":5}", "prompt", "must be a string, an array of strings, an array of token ids"},
    {C, "{\"prompt\":true}", "prompt", "got a boolean"},
    {C, "{\"prompt\":{}}", "prompt", "got an object"},
    {C, "{\"prompt\":[]}", "prompt", "must not be an empty array"},
    {C, "{\"prompt\":[1,\"a\"]}", "prompt", "array of token ids, got a string at 1"},
    {C, "{\"prompt\":[1,2.5]}", "prompt", "array of token ids"},
    {C, "{\"prompt\":[1,null]}", "prompt", "array of token ids, got null"},
    {C, "{\"prompt\":[-1]}", "prompt", "outside the vocabulary"},
    {C, "{\"prompt\":[32000]}", "prompt", "outside the vocabulary (0..31999)"},
    {C, "{\"prompt\":[{}]}", "prompt", "not a mix: element 0 is an object"},
    {C, "{\"prompt\":[null]}", "prompt", "not a mix: element 0 is null"},
    /* batched prompts */
    {C, "{\"prompt\":[\"a\",[1]]}", "prompt", "not a mix: element 1 is an array"},
    {C, "{\"prompt\":[[1],\"a\"]}", "prompt", "not a mix: element 1 is a string"},
    {C, "{\"prompt\":[\"a\",5]}", "prompt", "not a mix: element 1 is an integer"},
    {C, "{\"prompt\":[\"a\",null]}", "prompt", "not a mix: element 1 is null"},
    {C, "{\"prompt\":[[1],[]]}", "prompt", "empty token list (prompt 1)"},
    {C, "{\"prompt\":[[]]}", "prompt", "empty token list (prompt 0)"},
    {C, "{\"prompt\":[[1],[32000]]}", "prompt", "outside the vocabulary (0..31999) (prompt 1)"},
    {C, "{\"prompt\":[[1],[2,\"x\"]]}", "prompt", "got a string at 1 (prompt 1)"},
    {C, "{\"prompt\":[[1],[[2]]]}", "prompt", "got an array at 0 (prompt 1)"},
    /* logit_bias */
    {C, "{\"prompt\":\"x\",\"logit_bias\":[]}", "logit_bias", "an object mapping token ids"},
    {H, "{" MSGS ",\"logit_bias\":\"50256:-100\"}", "logit_bias", "got a string"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias",
     "keys must be token ids (decimal integers), got 'abc'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1.5\":1}}", "logit_bias", "got '1.5'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias", "got '-1'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"+1\":1}}", "logit_bias", "got '+1'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\" 1\":1}}", "logit_bias", "got ' 1'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1e3\":1}}", "logit_bias", "got '1e3'"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"\":1}}", "logit_bias", "got ''"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"12345678901\":1}}", "logit_bias", "decimal integers"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"32000\":1}}", "logit_bias",
     "token id 32000 in 'logit_bias' is outside the vocabulary (0..31999)"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"9999999999\":1}}", "logit_bias",
     "outside the vocabulary"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"-100\"}}", "logit_bias",
     "values must be numbers, got a string for token 5"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":null}}", "logit_bias", "got null"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":true}}", "logit_bias", "got a boolean"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", "logit_bias",
     "between -100 and 100, got 101 for token 5"},
    {H, "{" MSGS ",\"logit_bias\":{\"5\":-100.5}}", "logit_bias", "between -100 and 100"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":1,\"1\":2}}", NULL, "duplicate"},
    /* echo, suffix, best_of */
    {C, "{\"prompt\":\"x\",\"echo\":\"yes\"}", "echo", "must be a boolean"},
    {C, "{\"prompt\":\"x\",\"echo\":1}", "echo", "must be a boolean, got an integer"},
    {H, "{" MSGS ",\"echo\":true}", "echo", "a /v1/completions parameter"},
    {C, "{\"prompt\":\"x\",\"suffix\":5}", "suffix", "must be a string, got an integer"},
    {C, "{\"prompt\":\"x\",\"suffix\":[\"a\"]}", "suffix", "must be a string"},
    {H, "{" MSGS ",\"suffix\":\"end\"}", "suffix", "a /v1/completions parameter"},
    {C, "{\"prompt\":\"x\",\"best_of\":0}", "best_of", "between 1 and 20, got 0"},
    {C, "{\"prompt\":\"x\",\"best_of\":21}", "best_of", "between 1 and 20"},
    {C, "{\"prompt\":\"x\",\"best_of\":\"2\"}", "best_of", "must be an integer"},
    {C, "{\"prompt\":\"x\",\"best_of\":2.0}", "best_of", "must be an integer, got a number"},
    {C, "{\"prompt\":\"x\",\"n\":3,\"best_of\":2}", "best_of",
     "'best_of' (2) must be greater than or equal to 'n' (3)"},
    {C, "{\"prompt\":\"x\",\"best_of\":2,\"stream\":true}", "best_of", "cannot be streamed"},
    {C, "{\"prompt\":\"x\",\"n\":2,\"best_of\":3,\"stream\":true}", "best_of",
     "cannot be streamed"},
    {H, "{" MSGS ",\"best_of\":2}", "best_of", "a /v1/completions parameter"},
    {C, "{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":-1}", "max_tokens",
     "between 0 and 4096, got -1"},
    {C, "{\"prompt\":\"x\",\"echo\":false,\"max_tokens\":0}", "max_tokens",
     "between 1 and 4096, got 0"},
    /* numbers */
    {C, "{\"prompt\":\"x\",\"max_tokens\":\"10\"}", "max_tokens",
     "must be an integer, got a string"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "between 1 and 4096, got 0"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":4097}", "max_tokens", "between 1 and 4096"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":2.0}", "max_tokens", "must be an integer, got a number"},
    {H, "{" MSGS ",\"max_completion_tokens\":-1}", "max_completion_tokens", "between 1"},
    {C, "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature", "between 0 and 2, got 2.5"},
    {C, "{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature", "between 0 and 2"},
    {C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature", "must be a number"},
    {C, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "greater than 0 and at most 1"},
    {C, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p", "at most 1"},
    {C, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", "between -1"},
    {C, "{\"prompt\":\"x\",\"top_k\":true}", "top_k", "must be an integer, got a boolean"},
    {C, "{\"prompt\":\"x\",\"min_p\":1.5}", "min_p", "between 0 and 1"},
    {C, "{\"prompt\":\"x\",\"presence_penalty\":-2.5}", "presence_penalty", "between -2 and 2"},
    {C, "{\"prompt\":\"x\",\"frequency_penalty\":3}", "frequency_penalty", "between -2 and 2"},
    {C, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty", "greater than 0"},
    {C, "{\"prompt\":\"x\",\"n\":0}", "n", "between 1 and 8"},
    {C, "{\"prompt\":\"x\",\"n\":9}", "n", "between 1 and 8"},
    {C, "{\"prompt\":\"x\",\"seed\":1.5}", "seed", "must be an integer"},
    {C, "{\"prompt\":\"x\",\"priority\":\"high\"}", "priority", "must be an integer"},
    {C, "{\"prompt\":\"x\",\"priority\":4294967296}", "priority", "between"},
    {C, "{\"prompt\":\"x\",\"ignore_eos\":1}", "ignore_eos", "must be a boolean"},
    /* stop */
    {C, "{\"prompt\":\"x\",\"stop\":42}", "stop", "a string or an array of strings"},
    {C, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "at most 4"},
    {C, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop", "must not be empty"},
    {C, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop", "must not be empty"},
    {C, "{\"prompt\":\"x\",\"stop\":[\"a\",1]}", "stop", "a string or an array of strings"},
    /* logprobs */
    {C, "{\"prompt\":\"x\",\"logprobs\":6}", "logprobs", "between 0 and 5"},
    {C, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "must be an integer, got a boolean"},
    {H, "{" MSGS ",\"logprobs\":1}", "logprobs", "must be a boolean"},
    {H, "{" MSGS ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "between 0 and 20"},
    {H, "{" MSGS ",\"top_logprobs\":2}", "top_logprobs", "requires 'logprobs' to be true"},
    /* streaming */
    {C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", "must be a boolean"},
    {C, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options",
     "only allowed when 'stream' is true"},
    {C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", "stream_options",
     "must be an object"},
    {H, "{" MSGS ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
     "stream_options.include_usage", "must be a boolean"},
    {C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":1}}",
     "stream_options.continuous_usage_stats", "must be a boolean, got an integer"},
    {H, "{" MSGS ",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":\"y\"}}",
     "stream_options.continuous_usage_stats", "must be a boolean"},
    {C, "{\"prompt\":\"x\",\"stream_options\":{\"continuous_usage_stats\":true}}", "stream_options",
     "only allowed when 'stream' is true"},
    /* strings */
    {C, "{\"prompt\":\"x\",\"model\":7}", "model", "must be a string, got an integer"},
    {C, "{\"prompt\":\"x\",\"user\":[]}", "user", "must be a string"},
    {C, "{\"prompt\":\"x\",\"cache_salt\":{}}", "cache_salt", "must be a string"},
    /* known but unsupported */
    {H, "{" MSGS ",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio", "not supported"},
    {H, "{" MSGS ",\"modalities\":[\"text\",\"audio\"]}", "modalities", "[\"text\"]"},
    {H, "{" MSGS ",\"modalities\":\"text\"}", "modalities", "[\"text\"]"},
    {H, "{" MSGS ",\"web_search_options\":{}}", "web_search_options", "not supported"},
    /* structured outputs */
    {H, "{" MSGS ",\"response_format\":\"json\"}", "response_format", "must be an object"},
    {H, "{" MSGS ",\"response_format\":{\"type\":\"xml\"}}", "response_format.type", "json_schema"},
    {H, "{" MSGS ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema",
     "must be an object"},
    {H, "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":1}}}",
     "response_format.json_schema.strict", "must be a boolean"},
    {H,
     "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
     "{\"type\":\"integer\",\"multipleOf\":0.5}}}}",
     "response_format.json_schema.schema", "'multipleOf' 0.5 is not supported"},
    {H,
     "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
     "{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}}}}",
     "response_format.json_schema.schema", "lookbehind are not supported"},
    {H, "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":3}}}",
     "response_format.json_schema.schema", "must be a JSON schema object"},
    {C, "{\"prompt\":\"x\",\"guided_json\":\"[\"}", "guided_json", "not valid JSON"},
    {C, "{\"prompt\":\"x\",\"guided_grammar\":5}", "guided_grammar", "a string"},
    {C, "{\"prompt\":\"x\",\"guided_choice\":[]}", "guided_choice", "1 to 1024"},
    {C, "{\"prompt\":\"x\",\"guided_choice\":[\"\"]}", "guided_choice", "non-empty"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":\"a(b\"}", "guided_regex", "unterminated group"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":\"(a)\\\\1\"}", "guided_regex", "backreferences"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":\"a{99999}\"}", "guided_regex", "above 10000"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":[\"a\"]}", "guided_regex", "a string"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]}", "guided_regex",
     "one structured-output"},
    {C, "{\"prompt\":\"x\",\"structured_outputs\":[]}", "structured_outputs", "an object"},
    {C, "{\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"(?=a)\"}}",
     "structured_outputs.regex", "lookahead"},
    {C, "{\"prompt\":\"x\",\"guided_json\":{},\"structured_outputs\":{\"choice\":[\"a\"]}}",
     "structured_outputs.choice", "one structured-output"},
    /* tools */
    {H, "{" MSGS ",\"tools\":{}}", "tools", "must be an array"},
    {H, "{" MSGS ",\"tools\":[{\"type\":\"code\"}]}", "tools[0].type", "'function'"},
    {H, "{" MSGS ",\"tools\":[{\"type\":\"function\"}]}", "tools[0].function", "an object"},
    {H, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
     "tools[0].function.name", "1 to 64"},
    {H,
     "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
     "[]}}]}",
     "tools[0].function.parameters", "JSON schema object"},
    {H, "{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "needs 'tools'"},
    {H,
     "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"maybe\"}",
     "tool_choice", "'required'"},
    {H,
     "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "tool_choice", "'g'"},
    {H,
     "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
     "tool_choice", "cannot be combined"},
    {H, "{" MSGS ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "a boolean"},
    {H, "{" MSGS ",\"functions\":[{}]}", "functions", "deprecated"},
    {H, "{" MSGS ",\"chat_template_kwargs\":[]}", "chat_template_kwargs", "an object"},
    {C, "{\"prompt\":\"x\",\"chat_template_kwargs\":{}}", "chat_template_kwargs",
     "chat/completions"},
    {C, "{\"prompt\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
     "tools", "chat/completions"},
    /* messages */
    {H, "{}", "messages", "'messages' is required"},
    {H, "{\"messages\":{}}", "messages", "must be an array"},
    {H, "{\"messages\":[]}", "messages", "must not be empty"},
    {H, "{\"messages\":[1]}", "messages[0]", "must be an object"},
    {H, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "needs a 'role'"},
    {H, "{\"messages\":[{\"role\":5,\"content\":\"hi\"}]}", "messages[0].role", "must be a string"},
    {H, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", "messages[0].role",
     "unknown role 'wizard'"},
    {H, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content",
     "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":5}]}",
     "messages[1].content", "a string or an array of parts"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}", "messages[0].content[0]",
     "must be an object"},
    {H,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
     "messages[0].content[0].type", "only content parts of type 'text'"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text", "must be a string, got null"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
     "messages[0].content[0].text", "must be a string"}, /* kv_eviction (sink-window extension) */
    {C, "{\"prompt\":\"x\",\"kv_eviction\":\"sink-window\"}", "kv_eviction", "must be an object"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{}}", "kv_eviction.mode", "is required"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":5}}", "kv_eviction.mode", "must be a string"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"window\"}}", "kv_eviction.mode",
     "must be none or sink-window, got 'window'"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\",\"sinks\":4}}", "kv_eviction",
     "unknown field 'sinks'"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\",\"sink_tokens\":-1}}",
     "kv_eviction.sink_tokens", "between 0 and 16777216"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\",\"sink_tokens\":1.5}}",
     "kv_eviction.sink_tokens", "an integer"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\",\"window_tokens\":0}}",
     "kv_eviction.window_tokens", "between 1 and 16777216"},
    {C, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\",\"window_tokens\":\"8\"}}",
     "kv_eviction.window_tokens", "an integer"},
    /* max_tokens past the context: only a sink-window request may (lim has no window limit here:
     * the context's 4096 holds for both) */
    {C, "{\"prompt\":\"x\",\"max_tokens\":5000}", "max_tokens", "between 1 and 4096"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":5000,\"kv_eviction\":{\"mode\":\"none\"}}", "max_tokens",
     "between 1 and 4096"},
};

/* kv_eviction: the mode with default or given sizes; absent leaves the server's default; with a
 * window limit, a sink-window request (its own or by the server's default) may ask max_tokens
 * past the context. */
START_TEST(test_api_request_parse_kv_eviction)
{
    struct api_request *r = parse_ok(C_KIND, "{\"prompt\":\"x\"}");
    ck_assert(!r->kv_eviction_set);
    api_request_free(r);
    r = parse_ok(C_KIND, "{\"prompt\":\"x\",\"kv_eviction\":{\"mode\":\"sink-window\"}}");
    ck_assert(r->kv_eviction_set);
    ck_assert_int_eq(r->kv_eviction.mode, KV_WINDOW_SINK);
    ck_assert_int_eq(r->kv_eviction.sink_tokens, KV_WINDOW_DEFAULT_SINK_TOKENS);
    ck_assert_int_eq(r->kv_eviction.window_tokens, KV_WINDOW_DEFAULT_WINDOW_TOKENS);
    api_request_free(r);
    r = parse_ok(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                "\"kv_eviction\":{\"mode\":\"sink-window\",\"sink_tokens\":0,"
                                "\"window_tokens\":256}}");
    ck_assert_int_eq(r->kv_eviction.sink_tokens, 0);
    ck_assert_int_eq(r->kv_eviction.window_tokens, 256);
    api_request_free(r);
    struct api_limits wl = lim;
    wl.max_tokens_window = 1 << 20;
    const char *body =
        "{\"prompt\":\"x\",\"max_tokens\":100000,\"kv_eviction\":{\"mode\":\"sink-window\"}}";
    struct api_error e;
    memset(&e, 0, sizeof(e));
    ck_assert_int_eq(api_request_parse(body, strlen(body), C_KIND, &wl, &r, &e), 0);
    ck_assert_int_eq(r->max_tokens, 100000);
    api_request_free(r);
    const char *plain = "{\"prompt\":\"x\",\"max_tokens\":100000}";
    ck_assert_int_eq(api_request_parse(plain, strlen(plain), C_KIND, &wl, &r, &e), ERR_INVAL);
    ck_assert_str_eq(e.param, "max_tokens");
    wl.window_default = true; /* the server runs every request windowed */
    ck_assert_int_eq(api_request_parse(plain, strlen(plain), C_KIND, &wl, &r, &e), 0);
    ck_assert_int_eq(r->max_tokens, 100000);
    api_request_free(r);
    const char *none =
        "{\"prompt\":\"x\",\"max_tokens\":100000,\"kv_eviction\":{\"mode\":\"none\"}}";
    ck_assert_int_eq(api_request_parse(none, strlen(none), C_KIND, &wl, &r, &e), ERR_INVAL);
}
END_TEST

/* Structured outputs become GBNF text for the serving layer to compile; "text" is no constraint. */
START_TEST(test_api_request_parse_structured_outputs)
{
    static const struct {
        enum api_kind kind;
        const char *body, *param, *in_grammar;
    } ok[] = {
        {API_KIND_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"text\"}}", NULL, NULL},
        {API_KIND_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}",
         "response_format", "root ::= j-object"},
        {API_KIND_CHAT,
         "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
         "\"x\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"k\":{"
         "\"type\":\"integer\"}},\"required\":[\"k\"]}}}}",
         "response_format.json_schema.schema", "\"\\\"k\\\"\""},
        {API_KIND_COMPLETION,
         "{\"prompt\":\"x\",\"guided_json\":\"{\\\"type\\\":\\\"boolean\\\"}\"}", "guided_json",
         "j-bool"},
        {API_KIND_COMPLETION, "{\"prompt\":\"x\",\"guided_choice\":[\"a\\\"b\",\"c\"]}",
         "guided_choice", "root ::= \"a\\\"b\" | \"c\""},
        {API_KIND_COMPLETION,
         "{\"prompt\":\"x\",\"structured_outputs\":{\"grammar\":\"root ::= [0-9]\"}}",
         "structured_outputs.grammar", "root ::= [0-9]"},
        {API_KIND_COMPLETION, "{\"prompt\":\"x\",\"guided_regex\":\"^\\\\d{3}$\"}", "guided_regex",
         "root ::= ( ( [0-9] ){3} )"},
        {API_KIND_COMPLETION, "{\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"a|b\"}}",
         "structured_outputs.regex", "root ::= ( ( \"a\" ) | ( \"b\" ) )"},
        {API_KIND_CHAT,
         "{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
         "{\"type\":\"integer\",\"minimum\":1,\"maximum\":5}}}}",
         "response_format.json_schema.schema", "[1-5]"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct api_request *r = NULL;
        struct api_error e;
        ck_assert_msg(api_request_parse(ok[i].body, strlen(ok[i].body), ok[i].kind, &lim, &r, &e) ==
                          0,
                      "%s: %s", ok[i].body, e.message);
        if (!ok[i].param) {
            ck_assert_ptr_null(r->grammar);
        } else {
            ck_assert_ptr_nonnull(r->grammar);
            ck_assert_str_eq(r->grammar_param, ok[i].param);
            ck_assert_msg(strstr(r->grammar, ok[i].in_grammar), "%s lacks %s", r->grammar,
                          ok[i].in_grammar);
        }
        api_request_free(r);
    }
}
END_TEST

#define TOOLS                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"    \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}" \
    "}},"                                                                                          \
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]"

START_TEST(test_api_request_parse_tools)
{
    static const struct {
        const char *body;
        enum api_tool_choice choice;
        bool grammar, has_tools;
    } ok[] = {
        {"{" MSGS "," TOOLS "}", API_TOOL_AUTO, false, true},
        {"{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", API_TOOL_NONE, false, false},
        {"{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", API_TOOL_REQUIRED, true, true},
        {"{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
         "\"now\"}}}",
         API_TOOL_NAMED, true, true},
        {"{" MSGS ",\"tools\":[],\"tool_choice\":\"none\"}", API_TOOL_NONE, false, false},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct api_request *r = NULL;
        struct api_error e;
        ck_assert_msg(
            api_request_parse(ok[i].body, strlen(ok[i].body), API_KIND_CHAT, &lim, &r, &e) == 0,
            "%s: %s", ok[i].body, e.message);
        ck_assert_int_eq(r->tool_choice, ok[i].choice);
        ck_assert_int_eq(r->tools != NULL, ok[i].has_tools);
        ck_assert_int_eq(r->grammar != NULL, ok[i].grammar);
        ck_assert(r->parallel_tool_calls);
        ck_assert_ptr_nonnull(r->messages_json);
        ck_assert(!r->tool_history);
        if (ok[i].choice == API_TOOL_REQUIRED) {
            ck_assert_ptr_nonnull(strstr(r->grammar, "get_weather"));
            ck_assert_ptr_nonnull(strstr(r->grammar, "now"));
        }
        if (ok[i].choice == API_TOOL_NAMED) {
            ck_assert_str_eq(r->tool_name, "now");
            ck_assert_ptr_null(strstr(r->grammar, "get_weather"));
        }
        api_request_free(r);
    }
    /* tool calls and results in the history */
    const char *h =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"now\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
        "\"c1\",\"content\":\"noon\"}]}";
    struct api_request *r = NULL;
    struct api_error e;
    ck_assert_int_eq(api_request_parse(h, strlen(h), API_KIND_CHAT, &lim, &r, &e), 0);
    ck_assert(r->tool_history);
    ck_assert_int_eq(r->tool_choice, API_TOOL_NONE);
    api_request_free(r);
}
END_TEST

/* The call forms of the template families, and text that holds none. */
START_TEST(test_api_tool_calls_parse_forms)
{
    json_t *calls = NULL;
    size_t clen = 99;
    const char *hermes =
        "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
        "</tool_call>\n<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>";
    ck_assert_int_eq(api_tool_calls_parse(hermes, strlen(hermes), false, "x", &calls, &clen), 1);
    ck_assert_int_eq((int)json_array_size(calls), 2);
    ck_assert_int_eq((int)clen, 13); /* "Let me check." */
    json_t *f0 = json_object_get(json_array_get(calls, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f0, "name")), "f");
    ck_assert_str_eq(json_string_value(json_object_get(f0, "arguments")), "{\"a\":1}");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(calls, 1), "id")),
                     "call_x_1");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(calls, 1), "type")),
                     "function");
    json_decref(calls);
    const char *llama = " {\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}";
    ck_assert_int_eq(api_tool_calls_parse(llama, strlen(llama), false, "x", &calls, &clen), 1);
    ck_assert_int_eq((int)clen, 0);
    json_decref(calls);
    const char *py = "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}";
    ck_assert_int_eq(api_tool_calls_parse(py, strlen(py), false, "x", &calls, &clen), 1);
    json_decref(calls);
    const char *mistral = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", "
                          "\"arguments\": \"{\\\"k\\\": 2}\"}]";
    ck_assert_int_eq(api_tool_calls_parse(mistral, strlen(mistral), false, "x", &calls, &clen), 1);
    ck_assert_int_eq((int)json_array_size(calls), 2);
    f0 = json_object_get(json_array_get(calls, 1), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f0, "arguments")), "{\"k\": 2}");
    json_decref(calls);
    const char *forced = "[{\"name\":\"f\",\"arguments\":{\"a\":[1]}}]";
    ck_assert_int_eq(api_tool_calls_parse(forced, strlen(forced), true, "x", &calls, &clen), 1);
    json_decref(calls);
    /* no call: plain text, JSON that is not a call, a broken block, a cut-off forced array */
    static const char *const none[] = {"Hello there",
                                       "{\"a\": 1}",
                                       "[1, 2]",
                                       "<tool_call>{\"name\": \"f\"",
                                       "<tool_call>nonsense</tool_call>",
                                       ""};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        calls = NULL;
        ck_assert_int_eq(api_tool_calls_parse(none[i], strlen(none[i]), false, "x", &calls, &clen),
                         0);
        ck_assert_ptr_null(calls);
    }
    /* Cut off inside the arguments (max_tokens): the call was committed when its arguments
     * began, so it stays with what was written, as a stream must have sent it (OpenAI's too). */
    ck_assert_int_eq(api_tool_calls_parse(forced, strlen(forced) - 3, true, "x", &calls, &clen), 1);
    f0 = json_object_get(json_array_get(calls, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f0, "arguments")), "{\"a\":[1]");
    json_decref(calls);
}
END_TEST

/* Splits `text` fed in pieces of `step` bytes (0: whole) into reasoning and content. */
static void split(const char *text, size_t step, bool inside, const char *want_r,
                  const char *want_c)
{
    struct api_reasoning st;
    api_reasoning_init(&st, inside);
    struct buf r, c;
    buf_init(&r, 0);
    buf_init(&c, 0);
    size_t n = strlen(text), at = 0;
    do {
        size_t k = step && n - at > step ? step : n - at;
        ck_assert_int_eq(api_reasoning_feed(&st, text + at, k, at + k == n, &r, &c), 0);
        at += k;
    } while (at < n);
    ck_assert_msg(!strcmp(buf_cstr(&r), want_r) && !strcmp(buf_cstr(&c), want_c),
                  "'%s' by %zu: reasoning '%s' content '%s'", text, step, buf_cstr(&r),
                  buf_cstr(&c));
    buf_fini(&r);
    buf_fini(&c);
}

START_TEST(test_api_reasoning_split)
{
    static const struct {
        const char *text;
        bool inside;
        const char *r, *c;
    } cases[] = {
        {"<think>\nhmm, 2+2</think>\n\nIt is 4.", false, "\nhmm, 2+2", "It is 4."},
        {"  <think>a</think>b", false, "a", "b"},
        {"so 4.</think>\n4", true, "so 4.", "4"},
        {"No thinking here <think>x</think>", false, "", "No thinking here <think>x</think>"},
        {"<thinking>no</thinking>", false, "", "<thinking>no</thinking>"},
        {"<think>cut off mid-thought </thi", false, "cut off mid-thought </thi", ""},
        {"<thi", false, "", "<thi"},
        {"<think></think>", false, "", ""},
        {"<think>a</think>b</think>c", false, "a", "b</think>c"},
        {"", true, "", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (size_t step = 0; step < 5; step++)
            split(cases[i].text, step, cases[i].inside, cases[i].r, cases[i].c);
}
END_TEST

START_TEST(test_api_request_parse_rejects_malformed)
{
    const struct bad_case *c = &bad_cases[_i];
    struct api_request *r = NULL;
    struct api_error e;
    memset(&e, 0, sizeof(e));
    int rc = api_request_parse(c->body, strlen(c->body), c->kind, &lim, &r, &e);
    ck_assert_msg(rc == ERR_INVAL, "case %d (%s): rc %d", _i, c->body, rc);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.type, "invalid_request_error");
    ck_assert_msg(strcmp(e.param, c->param ? c->param : "") == 0, "case %d: param '%s', want '%s'",
                  _i, e.param, c->param ? c->param : "");
    ck_assert_msg(strstr(e.message, c->msg) != NULL, "case %d: message '%s' lacks '%s'", _i,
                  e.message, c->msg);
    /* Every error renders as valid JSON. */
    struct buf b;
    buf_init(&b, 4096);
    ck_assert_int_eq(api_error_body(&e, &b), 0);
    json_error_t je;
    json_t *j = json_loads(buf_cstr(&b), 0, &je);
    ck_assert_ptr_nonnull(j);
    json_decref(j);
    buf_fini(&b);
}
END_TEST

START_TEST(test_api_request_parse_rejects_deep_nesting)
{
    size_t depth = 100000;
    char *body = malloc(depth * 2 + 32);
    ck_assert_ptr_nonnull(body);
    size_t n = (size_t)snprintf(body, 32, "{\"prompt\":\"x\",\"junk\":");
    memset(body + n, '[', depth);
    memset(body + n + depth, ']', depth);
    body[n + 2 * depth] = '}';
    struct api_request *r = NULL;
    struct api_error e;
    ck_assert_int_eq(api_request_parse(body, n + 2 * depth + 1, C, &lim, &r, &e), ERR_INVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_ptr_nonnull(strstr(e.message, "depth"));
    free(body);
}
END_TEST

START_TEST(test_api_request_parse_bounds_lengths)
{
    /* A 257-byte model name and a 257-byte stop sequence are refused. */
    char body[1024];
    char longs[258];
    memset(longs, 'm', 257);
    longs[257] = '\0';
    struct api_request *r = NULL;
    struct api_error e;
    snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"model\":\"%s\"}", longs);
    ck_assert_int_eq(api_request_parse(body, strlen(body), C, &lim, &r, &e), ERR_INVAL);
    ck_assert_str_eq(e.param, "model");
    snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"stop\":\"%s\"}", longs);
    ck_assert_int_eq(api_request_parse(body, strlen(body), C, &lim, &r, &e), ERR_INVAL);
    ck_assert_str_eq(e.param, "stop");
    /* Body need not be NUL-terminated: the parser reads exactly len bytes. */
    const char *two = "{\"prompt\":\"ab\"}GARBAGE";
    ck_assert_int_eq(api_request_parse(two, 15, C, &lim, &r, &e), 0);
    ck_assert_str_eq(r->prompts[0].text, "ab");
    api_request_free(r);
    api_request_free(NULL);
}
END_TEST

START_TEST(test_api_error_body_shape)
{
    struct api_error e;
    struct buf b;
    buf_init(&b, 4096);
    api_error_set(&e, API_ERR_INVALID, "temperature", "'%s' must be between 0 and 2",
                  "temperature");
    ck_assert_int_eq(api_error_body(&e, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), "{\"error\":{\"message\":\"'temperature' must be between 0 and "
                                   "2\",\"type\":\"invalid_request_error\",\"param\":"
                                   "\"temperature\",\"code\":null}}");
    buf_reset(&b);
    api_error_set(&e, API_ERR_MODEL_NOT_FOUND, "model", "The model 'x' does not exist");
    ck_assert_int_eq(e.status, 404);
    ck_assert_int_eq(api_error_body(&e, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), "{\"error\":{\"message\":\"The model 'x' does not exist\","
                                   "\"type\":\"invalid_request_error\",\"param\":\"model\","
                                   "\"code\":\"model_not_found\"}}");
    char ra[16];
    ck_assert_int_eq(api_error_retry_after(&e, ra, sizeof(ra)), 0);
    buf_reset(&b);
    api_error_set(&e, API_ERR_RATE_LIMIT, NULL, "queue full");
    e.retry_after_s = 2;
    ck_assert_int_eq(e.status, 429);
    ck_assert_int_eq(api_error_retry_after(&e, ra, sizeof(ra)), 1);
    ck_assert_str_eq(ra, "2");
    ck_assert_int_eq(api_error_body(&e, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), "{\"error\":{\"message\":\"queue full\",\"type\":"
                                   "\"rate_limit_error\",\"param\":null,\"code\":"
                                   "\"rate_limit_exceeded\"}}");
    buf_fini(&b);
}
END_TEST

START_TEST(test_api_error_set_status_per_kind)
{
    static const struct {
        enum api_error_kind kind;
        int status;
        const char *type;
        const char *code;
    } want[] = {
        {API_ERR_INVALID, 400, "invalid_request_error", NULL},
        {API_ERR_UNAUTHORIZED, 401, "invalid_request_error", "invalid_api_key"},
        {API_ERR_NOT_FOUND, 404, "invalid_request_error", "not_found"},
        {API_ERR_MODEL_NOT_FOUND, 404, "invalid_request_error", "model_not_found"},
        {API_ERR_METHOD, 405, "invalid_request_error", "method_not_allowed"},
        {API_ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large"},
        {API_ERR_RATE_LIMIT, 429, "rate_limit_error", "rate_limit_exceeded"},
        {API_ERR_OVERLOADED, 503, "server_error", "server_overloaded"},
        {API_ERR_INTERNAL, 500, "server_error", NULL},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct api_error e;
        api_error_set(&e, want[i].kind, NULL, "m");
        ck_assert_int_eq(e.status, want[i].status);
        ck_assert_str_eq(e.type, want[i].type);
        if (want[i].code)
            ck_assert_str_eq(e.code, want[i].code);
        else
            ck_assert_ptr_null(e.code);
    }
}
END_TEST

START_TEST(test_api_error_set_truncates_on_character_boundary)
{
    /* 600 copies of "é" (2 bytes) overflow the 512-byte message; the cut must not split one. */
    char big[1201];
    for (int i = 0; i < 600; i++) big[2 * i] = (char)0xC3, big[2 * i + 1] = (char)0xA9;
    big[1200] = '\0';
    struct api_error e;
    api_error_set(&e, API_ERR_INVALID, "p", "%s", big); /* 511 bytes fit: 255 "é" and a lead */
    ck_assert_uint_eq(strlen(e.message), 510);
    json_t *j = api_error_json(&e);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                     e.message);
    json_decref(j);
}
END_TEST

/* tool_choice auto's lazy grammar, per template form: it compiles, starts with each trigger, takes
 * the form's call of either tool, and refuses an unknown function, arguments off the schema, a
 * second call without parallel_tool_calls; no grammar when none applies. */
#define LAZY_TOOLS                                                                                 \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"     \
    "\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}},"            \
    "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]"

/* 0 / ERR_INVAL: the bytes s (a whole answer from the trigger on) against grammar `gbnf`;
 * *done: the grammar is complete after them. */
static int lazy_match(const char *gbnf, const char *s, bool *done)
{
    static const char *pieces[256];
    static char bytes[256];
    size_t lens[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
    }
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_from_pieces(pieces, lens, 256, NULL, 0, &v), 0);
    struct grammar *g = NULL;
    char err[256];
    ck_assert_msg(grammar_compile(gbnf, strlen(gbnf), v, &g, err, sizeof(err)) == 0, "%s\n%s", err,
                  gbnf);
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
    int rc = grammar_matcher_accept_bytes(m, a, s, strlen(s));
    *done = rc == 0 && grammar_matcher_finished(m);
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
    return rc;
}

static char *lazy_grammar(enum api_tool_format fmt, bool parallel, const char **trig0, int *n)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"parallel_tool_calls\":%s,%s}",
             parallel ? "true" : "false", LAZY_TOOLS);
    struct api_request *r = parse_ok(API_KIND_CHAT, body);
    struct api_tool_trigger t[API_TOOL_TRIGGERS_MAX];
    char why[256];
    ck_assert_int_eq(api_tools_lazy(r, fmt, t, n, why, sizeof(why)), 0);
    ck_assert_str_eq(r->grammar_param, "tools");
    *trig0 = t[0].text;
    char *g = strdup(r->grammar);
    api_request_free(r);
    return g;
}

START_TEST(test_api_tools_lazy_forms)
{
    bool done;
    const char *t0;
    int n;
    char *g = lazy_grammar(API_TOOL_FORMAT_HERMES, false, &t0, &n);
    ck_assert_str_eq(t0, "<tool_call>");
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(lazy_match(g,
                                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 12}}\n"
                                "</tool_call>",
                                &done),
                     0);
    ck_assert(done);
    ck_assert_int_eq(
        lazy_match(g, "<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>", &done), 0);
    ck_assert(done);
    ck_assert_int_eq(lazy_match(g, "<tool_call>{\"name\": \"h\"", &done), ERR_INVAL);
    ck_assert_int_eq(
        lazy_match(g, "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": \"x", &done), ERR_INVAL);
    ck_assert_int_eq(
        lazy_match(g, "<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>\n<", &done),
        ERR_INVAL);
    free(g);
    g = lazy_grammar(API_TOOL_FORMAT_HERMES, true, &t0, &n);
    ck_assert_int_eq(lazy_match(g,
                                "<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>\n"
                                "<tool_call>{\"name\":\"f\",\"arguments\":{\"n\":1}}</tool_call>",
                                &done),
                     0);
    ck_assert(!done); /* a third may follow; end-of-generation is allowed here */
    free(g);

    g = lazy_grammar(API_TOOL_FORMAT_MISTRAL, true, &t0, &n);
    ck_assert_str_eq(t0, "[TOOL_CALLS]");
    ck_assert_int_eq(lazy_match(g,
                                "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"n\": 1}}, "
                                "{\"name\": \"g\", \"arguments\": {}}]",
                                &done),
                     0);
    ck_assert(done);
    free(g);
    g = lazy_grammar(API_TOOL_FORMAT_MISTRAL, false, &t0, &n);
    ck_assert_int_eq(lazy_match(g, "[TOOL_CALLS][{\"name\":\"g\",\"arguments\":{}},", &done),
                     ERR_INVAL);
    free(g);

    g = lazy_grammar(API_TOOL_FORMAT_LLAMA3, false, &t0, &n);
    ck_assert_str_eq(t0, "<|python_tag|>");
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(lazy_match(g, "{\"name\": \"f\", \"parameters\": {\"n\": 3}}", &done), 0);
    ck_assert(done);
    ck_assert_int_eq(lazy_match(g, "<|python_tag|>{\"name\": \"g\", \"parameters\": {}}", &done),
                     0);
    ck_assert_int_eq(lazy_match(g, "{\"name\": \"f\", \"arguments\"", &done), ERR_INVAL);
    free(g);

    g = lazy_grammar(API_TOOL_FORMAT_JSON, false, &t0, &n);
    ck_assert_str_eq(t0, "{\"name\"");
    ck_assert_int_eq(lazy_match(g, "{\"name\": \"g\", \"arguments\": {}}", &done), 0);
    ck_assert(done);
    free(g);
}
END_TEST

START_TEST(test_api_tools_lazy_not_applicable)
{
    struct api_tool_trigger t[API_TOOL_TRIGGERS_MAX];
    int n = 0;
    char why[256];
    /* no tools; required (its own grammar); auto with response_format; a schema keyword the
     * grammar cannot enforce (auto then stays free, as before) */
    struct api_request *r = parse_ok(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\","
                                                    "\"content\":\"x\"}]}");
    ck_assert_int_eq(api_tools_lazy(r, API_TOOL_FORMAT_HERMES, t, &n, why, sizeof(why)), 1);
    api_request_free(r);
    r = parse_ok(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                "\"tool_choice\":\"required\"," LAZY_TOOLS "}");
    char *forced = strdup(r->grammar);
    ck_assert_int_eq(api_tools_lazy(r, API_TOOL_FORMAT_HERMES, t, &n, why, sizeof(why)), 1);
    ck_assert_str_eq(r->grammar, forced);
    free(forced);
    api_request_free(r);
    r = parse_ok(API_KIND_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                "\"response_format\":{\"type\":\"json_object\"}," LAZY_TOOLS "}");
    ck_assert_int_eq(api_tools_lazy(r, API_TOOL_FORMAT_HERMES, t, &n, why, sizeof(why)), 1);
    api_request_free(r);
    r = parse_ok(API_KIND_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                 "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                 "\"properties\":{\"s\":{\"type\":\"integer\",\"multipleOf\":0.5}}}}}]}");
    ck_assert_int_eq(api_tools_lazy(r, API_TOOL_FORMAT_HERMES, t, &n, why, sizeof(why)), 1);
    ck_assert_ptr_null(r->grammar);
    ck_assert_msg(strstr(why, "multipleOf"), "%s", why);
    api_request_free(r);
}
END_TEST

Suite *api_request_suite(void)
{
    Suite *s = suite_create("api_request");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_api_request_parse_completion_all_params);
    tcase_add_test(tc, test_api_tools_lazy_forms);
    tcase_add_test(tc, test_api_tools_lazy_not_applicable);
    tcase_add_test(tc, test_api_request_parse_defaults);
    tcase_add_test(tc, test_api_request_parse_nulls_mean_default_and_unknown_ignored);
    tcase_add_test(tc, test_api_request_parse_chat_accepts_platform_fields);
    tcase_add_test(tc, test_api_request_parse_prompt_forms);
    tcase_add_test(tc, test_api_request_parse_batched_prompts);
    tcase_add_test(tc, test_api_request_parse_completion_extras);
    tcase_add_test(tc, test_api_request_parse_chat_messages);
    tcase_add_test(tc, test_api_request_parse_structured_outputs);
    tcase_add_test(tc, test_api_request_parse_tools);
    tcase_add_test(tc, test_api_tool_calls_parse_forms);
    tcase_add_test(tc, test_api_reasoning_split);
    tcase_add_loop_test(tc, test_api_request_parse_rejects_malformed, 0,
                        (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(tc, test_api_request_parse_rejects_deep_nesting);
    tcase_add_test(tc, test_api_request_parse_bounds_lengths);
    tcase_add_test(tc, test_api_request_parse_kv_eviction);
    tcase_add_test(tc, test_api_error_body_shape);
    tcase_add_test(tc, test_api_error_set_status_per_kind);
    tcase_add_test(tc, test_api_error_set_truncates_on_character_boundary);
    suite_add_tcase(s, tc);
    return s;
}
