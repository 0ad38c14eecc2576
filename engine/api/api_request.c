/* Request bodies of POST /v1/completions and /v1/chat/completions -> struct api_request.
 * Validates every parameter the engine honours (type and range, errors naming the parameter as
 * OpenAI's `param` does), ignores unknown fields as OpenAI does, and refuses the known ones whose
 * effect the engine cannot provide (echo, suffix, best_of, logit_bias)
 * rather than silently answering something else. Not an HTTP handler: no I/O, no model lookup. */
#include "engine/api/api.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/utf8.h"
#include "engine/api/api_priv.h"
#include "engine/sched/sampler.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *api_role_name(enum api_role r)
{
    switch (r) {
    case API_ROLE_SYSTEM: return "system";
    case API_ROLE_USER: return "user";
    case API_ROLE_ASSISTANT: return "assistant";
    case API_ROLE_TOOL: return "tool";
    }
    return "user";
}

/* A number within [lo, hi] (lo excluded when lo_open). 0, ERR_NOT_FOUND (absent) or ERR_INVAL. */
static int api_get_number(struct api_parse *p, const char *key, double lo, double hi, bool lo_open,
                          float *out)
{
    const json_t *v = json_util_field(p->root, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_number(v)) return api_wrong_type(p, key, "a number", v);
    double d = json_number_value(v);
    if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo)) {
        if (lo_open)
            api_error_set(p->err, API_ERR_INVALID, key,
                          "'%s' must be greater than %g and at most %g, got %g", key, lo, hi, d);
        else
            api_error_set(p->err, API_ERR_INVALID, key, "'%s' must be between %g and %g, got %g",
                          key, lo, hi, d);
        return ERR_INVAL;
    }
    *out = (float)d;
    return 0;
}

/* An integer (reals rejected, even 2.0, as OpenAI does) within [lo, hi]. */
static int api_get_int_at(struct api_parse *p, const json_t *obj, const char *key,
                          const char *param, long long lo, long long hi, long long *out)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_integer(v)) return api_wrong_type(p, param, "an integer", v);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        api_error_set(p->err, API_ERR_INVALID, param,
                      "'%s' must be between %lld and %lld, got %lld", param, lo, hi, x);
        return ERR_INVAL;
    }
    *out = x;
    return 0;
}

static int api_get_int(struct api_parse *p, const char *key, long long lo, long long hi,
                       long long *out)
{
    return api_get_int_at(p, p->root, key, key, lo, hi, out);
}

static int api_get_bool_at(struct api_parse *p, const json_t *obj, const char *key,
                           const char *param, bool *out)
{
    const json_t *v = json_util_field(obj, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_boolean(v)) return api_wrong_type(p, param, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

/* An owned copy of a string field of at most maxlen bytes. */
static int api_get_str(struct api_parse *p, const char *key, size_t maxlen, char **out)
{
    const json_t *v = json_util_field(p->root, key);
    if (!v) return ERR_NOT_FOUND;
    if (!json_is_string(v)) return api_wrong_type(p, key, "a string", v);
    if (json_string_length(v) > maxlen) {
        api_error_set(p->err, API_ERR_INVALID, key, "'%s' is longer than %zu bytes", key, maxlen);
        return ERR_INVAL;
    }
    char *s = strdup(json_string_value(v));
    if (!s) return api_nomem(p);
    *out = s;
    return 0;
}

/* Treats ERR_NOT_FOUND (absent: keep the default) as success. */
static int api_opt(int rc)
{
    return rc == ERR_NOT_FOUND ? 0 : rc;
}

/* Known OpenAI parameters whose effect this engine does not implement: refuse rather than ignore,
 * since ignoring them would silently answer a different question. */
static int api_check_unsupported(struct api_parse *p)
{
    const json_t *v;
    if ((v = json_util_field(p->root, "echo")) && !json_is_false(v))
        return api_invalid(p, "echo", "'echo' is not supported");
    if ((v = json_util_field(p->root, "suffix")) && !(json_is_string(v) && !json_string_length(v)))
        return api_invalid(p, "suffix", "'suffix' is not supported");
    if ((v = json_util_field(p->root, "best_of")) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return api_invalid(p, "best_of", "'best_of' other than 1 is not supported");
    if ((v = json_util_field(p->root, "logit_bias")) &&
        !(json_is_object(v) && !json_object_size(v)))
        return api_invalid(p, "logit_bias", "'logit_bias' is not supported");
    return 0;
}

/* Appends token ids from array `a` (every element an integer) to the request. */
static int api_parse_token_ids(struct api_parse *p, const json_t *a)
{
    size_t n = json_array_size(a);
    if (n == 0) return api_invalid(p, "prompt", "'prompt' must not be an empty array");
    if (n > API_MAX_PROMPT_TOKENS) return api_invalid(p, "prompt", "'prompt' has too many tokens");
    long long hi = p->lim && p->lim->n_vocab > 0 ? p->lim->n_vocab - 1 : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(a, i);
        if (!json_is_integer(t)) return api_wrong_type(p, "prompt", "an array of token ids", t);
        long long id = json_integer_value(t);
        if (id < 0 || id > hi) {
            api_error_set(p->err, API_ERR_INVALID, "prompt",
                          "token id %lld in 'prompt' is outside the vocabulary (0..%lld)", id, hi);
            return ERR_INVAL;
        }
    }
    p->r->prompt_tokens = malloc(n * sizeof(int32_t));
    if (!p->r->prompt_tokens) return api_nomem(p);
    for (size_t i = 0; i < n; i++)
        p->r->prompt_tokens[i] = (int32_t)json_integer_value(json_array_get(a, i));
    p->r->n_prompt_tokens = n;
    return 0;
}

/* "prompt": a string, an array of token ids, or a one-element array holding either. */
static int api_parse_prompt(struct api_parse *p)
{
    const json_t *v = json_util_field(p->root, "prompt");
    if (!v) return api_invalid(p, "prompt", "'prompt' is required");
    if (json_is_array(v) && json_array_size(v) > 0 && !json_is_integer(json_array_get(v, 0))) {
        if (json_array_size(v) > 1)
            return api_invalid(p, "prompt",
                               "batched prompts are not supported: send one prompt per request");
        v = json_array_get(v, 0);
        if (json_is_array(v)) return api_parse_token_ids(p, v);
    }
    if (json_is_array(v)) return api_parse_token_ids(p, v);
    if (!json_is_string(v))
        return api_wrong_type(p, "prompt", "a string or an array of token ids", v);
    p->r->prompt = strdup(json_string_value(v));
    return p->r->prompt ? 0 : api_nomem(p);
}

/* "stop": null, a string, or an array of up to API_MAX_STOP strings; none empty. */
static int api_parse_stop(struct api_parse *p)
{
    const json_t *v = json_util_field(p->root, "stop");
    if (!v) return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return api_wrong_type(p, "stop", "a string or an array of strings", v);
    if (n > API_MAX_STOP) return api_invalid(p, "stop", "'stop' may hold at most 4 sequences");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s))
            return api_wrong_type(p, "stop", "a string or an array of strings", s);
        if (json_string_length(s) == 0)
            return api_invalid(p, "stop", "stop sequences must not be empty");
        if (json_string_length(s) > API_MAX_STOP_LEN)
            return api_invalid(p, "stop", "a stop sequence is longer than 256 bytes");
        p->r->stop[i] = strdup(json_string_value(s));
        if (!p->r->stop[i]) return api_nomem(p);
        p->r->n_stop = i + 1;
    }
    return 0;
}

static int api_parse_logprobs(struct api_parse *p)
{
    long long k = 0;
    int rc;
    if (p->r->kind == API_KIND_COMPLETION) {
        rc = api_get_int(p, "logprobs", 0, API_MAX_LOGPROBS_COMPL, &k);
        if (rc == 0) p->r->logprobs = true, p->r->top_logprobs = (int)k;
        return api_opt(rc);
    }
    rc = api_opt(api_get_bool_at(p, p->root, "logprobs", "logprobs", &p->r->logprobs));
    if (rc) return rc;
    rc = api_get_int(p, "top_logprobs", 0, API_MAX_TOP_LOGPROBS, &k);
    if (rc == 0 && !p->r->logprobs)
        return api_invalid(p, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    if (rc == 0) p->r->top_logprobs = (int)k;
    return api_opt(rc);
}

static int api_parse_stream(struct api_parse *p)
{
    int rc = api_opt(api_get_bool_at(p, p->root, "stream", "stream", &p->r->stream));
    if (rc) return rc;
    const json_t *so = json_util_field(p->root, "stream_options");
    if (!so) return 0;
    if (!json_is_object(so)) return api_wrong_type(p, "stream_options", "an object", so);
    if (!p->r->stream)
        return api_invalid(p, "stream_options",
                           "'stream_options' is only allowed when 'stream' is true");
    return api_opt(api_get_bool_at(p, so, "include_usage", "stream_options.include_usage",
                                   &p->r->include_usage));
}

static int api_parse_max_tokens(struct api_parse *p)
{
    long long hi = p->lim && p->lim->max_tokens > 0 ? p->lim->max_tokens : INT32_MAX;
    long long v = 0;
    int rc = ERR_NOT_FOUND;
    if (p->r->kind == API_KIND_CHAT) rc = api_get_int(p, "max_completion_tokens", 1, hi, &v);
    if (rc == ERR_NOT_FOUND) rc = api_get_int(p, "max_tokens", 1, hi, &v);
    if (rc == 0) p->r->max_tokens = (long)v;
    return api_opt(rc);
}

static int api_parse_sampling(struct api_parse *p)
{
    struct api_request *r = p->r;
    long long v = 0;
    int rc;
    if ((rc = api_opt(api_get_number(p, "temperature", 0, 2, false, &r->temperature))) ||
        (rc = api_opt(api_get_number(p, "top_p", 0, 1, true, &r->top_p))) ||
        (rc = api_opt(api_get_number(p, "min_p", 0, 1, false, &r->min_p))) ||
        (rc = api_opt(api_get_number(p, "presence_penalty", -2, 2, false, &r->presence_penalty))) ||
        (rc = api_opt(
             api_get_number(p, "frequency_penalty", -2, 2, false, &r->frequency_penalty))) ||
        (rc = api_opt(api_get_number(p, "repetition_penalty", 0, 2, true, &r->repetition_penalty))))
        return rc;
    rc = api_get_int(p, "top_k", -1, INT32_MAX, &v); /* -1 and 0 both mean off (vLLM uses -1) */
    if (rc == 0) r->top_k = v > 0 ? (int)v : 0;
    if ((rc = api_opt(rc))) return rc;
    rc = api_get_int(p, "seed", LLONG_MIN, LLONG_MAX, &v);
    if (rc == 0) r->has_seed = true, r->seed = (uint64_t)v;
    if ((rc = api_opt(rc))) return rc;
    rc = api_get_int(p, "n", 1, API_MAX_N, &v);
    if (rc == 0) r->n = (int)v;
    return api_opt(rc);
}

static int api_parse_misc(struct api_parse *p)
{
    long long v = 0;
    int rc;
    if ((rc = api_opt(api_get_str(p, "model", API_MAX_SHORT_STR, &p->r->model))) ||
        (rc = api_opt(api_get_str(p, "user", API_MAX_SHORT_STR, &p->r->user))) ||
        (rc = api_opt(api_get_str(p, "cache_salt", API_MAX_SHORT_STR, &p->r->cache_salt))))
        return rc;
    rc = api_get_int(p, "priority", INT_MIN, INT_MAX, &v);
    if (rc == 0) p->r->priority = (int)v;
    if ((rc = api_opt(rc))) return rc;
    if ((rc = api_opt(api_get_bool_at(p, p->root, "ignore_eos", "ignore_eos", &p->r->ignore_eos))))
        return rc;
    const json_t *kw = json_util_field(p->root, "chat_template_kwargs");
    if (!kw) return 0;
    if (!json_is_object(kw)) return api_wrong_type(p, "chat_template_kwargs", "an object", kw);
    if (p->r->kind != API_KIND_CHAT)
        return api_invalid(p, "chat_template_kwargs",
                           "'chat_template_kwargs' is only for /v1/chat/completions");
    p->r->chat_template_kwargs = json_incref((json_t *)kw);
    return 0;
}

static void api_request_defaults(struct api_request *r, enum api_kind kind)
{
    r->kind = kind;
    r->max_tokens = kind == API_KIND_COMPLETION ? API_COMPL_DEFAULT_MAX_TOKENS : -1;
    r->n = 1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
}

int api_request_parse(const char *body, size_t len, enum api_kind kind,
                      const struct api_limits *lim, struct api_request **out, struct api_error *err)
{
    json_t *root = NULL;
    struct api_request *r = NULL;
    int rc = ERR_INVAL;
    size_t bad = utf8_invalid_at(body ? body : "", body ? len : 0);
    if (bad < len) {
        api_error_set(err, API_ERR_INVALID, NULL,
                      "request body is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                      (unsigned char)body[bad], bad);
        goto out;
    }
    json_error_t je;
    root =
        json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        api_error_set(err, API_ERR_INVALID, NULL,
                      "could not parse the JSON body (line %d, column %d): %s", je.line, je.column,
                      je.text);
        goto out;
    }
    if (!json_is_object(root)) {
        api_error_set(err, API_ERR_INVALID, NULL, "request body must be a JSON object, got %s",
                      api_json_type_name(root));
        goto out;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        api_error_set(err, API_ERR_INTERNAL, NULL, "out of memory while parsing the request");
        rc = ERR_NOMEM;
        goto out;
    }
    api_request_defaults(r, kind);
    struct api_parse p = {.root = root, .r = r, .err = err, .lim = lim};
    if ((rc = api_check_unsupported(&p)) ||
        (rc = kind == API_KIND_CHAT ? api_parse_messages(&p) : api_parse_prompt(&p)) ||
        (rc = api_parse_max_tokens(&p)) || (rc = api_parse_sampling(&p)) ||
        (rc = api_parse_stop(&p)) || (rc = api_parse_logprobs(&p)) || (rc = api_parse_stream(&p)) ||
        (rc = api_parse_misc(&p)) || (rc = api_parse_format(&p)) || (rc = api_parse_tools(&p)))
        goto out;
    *out = r;
    r = NULL;
    rc = 0;
out:
    api_request_free(r);
    json_decref(root);
    return rc;
}

void api_request_free(struct api_request *r)
{
    if (!r) return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_tokens);
    for (size_t i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    json_decref(r->messages_json);
    json_decref(r->chat_template_kwargs);
    json_decref(r->tools);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->user);
    free(r->cache_salt);
    free(r->grammar);
    free(r);
}

void api_request_sampler_params(const struct api_request *r, uint64_t fallback_seed,
                                struct sampler_params *out)
{
    sampler_params_default(out);
    out->temperature = r->temperature;
    out->top_k = r->top_k;
    out->top_p = r->top_p;
    out->min_p = r->min_p;
    out->repeat_penalty = r->repetition_penalty;
    out->presence_penalty = r->presence_penalty;
    out->frequency_penalty = r->frequency_penalty;
    /* OpenAI's presence/frequency penalties count every generated token, not a window. */
    if (r->presence_penalty != 0 || r->frequency_penalty != 0) out->repeat_last_n = -1;
    out->seed = r->has_seed ? r->seed : fallback_seed;
    out->n_logprobs = r->logprobs ? r->top_logprobs : 0;
    out->logprobs = r->logprobs;
}
