/* Request bodies of POST /v1/completions and /v1/chat/completions -> struct api_request.
 * Validates every parameter the engine honours (type and range, errors naming the parameter as
 * OpenAI's `param` does), ignores unknown fields as OpenAI does, and refuses the known ones whose
 * effect the engine cannot provide (audio output, modalities other than text, web_search_options;
 * echo, suffix and best_of on chat, where OpenAI has none) rather than silently answering
 * something else. Not an HTTP handler: no I/O, no model lookup (suffix's fill-in-the-middle
 * tokens, the tokenizer and grammar compilation are serve_api.c's). */
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

_Static_assert(API_MAX_LOGIT_BIAS == SAMPLER_MAX_BIAS, "one logit_bias limit");
_Static_assert(API_MAX_TOP_LOGPROBS == SAMPLER_MAX_LOGPROBS, "one top_logprobs limit");

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
 * since ignoring them would silently answer a different question. echo, suffix and best_of are
 * /v1/completions parameters; chat has no such thing. */
static int api_check_unsupported(struct api_parse *p)
{
    const json_t *v;
    if (p->r->kind == API_KIND_CHAT) {
        if ((v = json_util_field(p->root, "echo")) && !json_is_false(v))
            return api_invalid(p, "echo", "'echo' is a /v1/completions parameter");
        if ((v = json_util_field(p->root, "suffix")) &&
            !(json_is_string(v) && !json_string_length(v)))
            return api_invalid(p, "suffix", "'suffix' is a /v1/completions parameter");
        if ((v = json_util_field(p->root, "best_of")) &&
            !(json_is_integer(v) && json_integer_value(v) == 1))
            return api_invalid(p, "best_of", "'best_of' is a /v1/completions parameter");
    }
    if (p->r->kind == API_KIND_CHAT && (v = json_util_field(p->root, "audio")))
        return api_invalid(p, "audio", "'audio' output is not supported: this engine makes text");
    if (p->r->kind == API_KIND_CHAT && (v = json_util_field(p->root, "modalities"))) {
        bool text_only = json_is_array(v);
        for (size_t i = 0; text_only && i < json_array_size(v); i++) {
            const json_t *m = json_array_get(v, i);
            text_only = json_is_string(m) && !strcmp(json_string_value(m), "text");
        }
        if (!text_only)
            return api_invalid(p, "modalities", "only 'modalities' [\"text\"] is supported");
    }
    if (p->r->kind == API_KIND_CHAT && json_util_field(p->root, "web_search_options"))
        return api_invalid(p, "web_search_options", "web search is not supported");
    return 0;
}

/* Token ids from array `a` (every element an integer in the vocabulary) into `out`. `at` is the
 * prompt's index in a batched list, -1 for a single prompt (for messages). */
static int api_parse_token_ids(struct api_parse *p, const json_t *a, long at,
                               struct api_prompt *out)
{
    char where[48] = "";
    if (at >= 0) snprintf(where, sizeof(where), " (prompt %ld)", at);
    size_t n = json_array_size(a);
    if (n == 0) {
        api_error_set(p->err, API_ERR_INVALID, "prompt", "'prompt' has an empty token list%s",
                      where);
        return ERR_INVAL;
    }
    if (n > API_MAX_PROMPT_TOKENS) {
        api_error_set(p->err, API_ERR_INVALID, "prompt", "'prompt' has too many tokens%s", where);
        return ERR_INVAL;
    }
    long long hi = p->lim && p->lim->n_vocab > 0 ? p->lim->n_vocab - 1 : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(a, i);
        if (!json_is_integer(t)) {
            api_error_set(p->err, API_ERR_INVALID, "prompt",
                          "'prompt' must be an array of token ids, got %s at %zu%s",
                          api_json_type_name(t), i, where);
            return ERR_INVAL;
        }
        long long id = json_integer_value(t);
        if (id < 0 || id > hi) {
            api_error_set(p->err, API_ERR_INVALID, "prompt",
                          "token id %lld in 'prompt' is outside the vocabulary (0..%lld)%s", id, hi,
                          where);
            return ERR_INVAL;
        }
    }
    out->tokens = malloc(n * sizeof(int32_t));
    if (!out->tokens) return api_nomem(p);
    for (size_t i = 0; i < n; i++)
        out->tokens[i] = (int32_t)json_integer_value(json_array_get(a, i));
    out->n_tokens = n;
    return 0;
}

/* "prompt": a string, an array of token ids, an array of strings or an array of token-id arrays
 * (the last two are batched prompts; one list does not mix the two). */
static int api_parse_prompt(struct api_parse *p)
{
    const json_t *v = json_util_field(p->root, "prompt");
    if (!v) return api_invalid(p, "prompt", "'prompt' is required");
    if (!json_is_string(v) && !json_is_array(v))
        return api_wrong_type(p, "prompt",
                              "a string, an array of strings, an array of token ids or an array "
                              "of token-id arrays",
                              v);
    if (json_is_array(v) && json_array_size(v) == 0)
        return api_invalid(p, "prompt", "'prompt' must not be an empty array");
    /* A single prompt: a string or one array of ids. Else a list, each element of the first one's
     * kind. */
    bool single = json_is_string(v) || json_is_integer(json_array_get(v, 0));
    size_t n = single ? 1 : json_array_size(v);
    if (n > API_MAX_PROMPTS) {
        api_error_set(p->err, API_ERR_INVALID, "prompt",
                      "'prompt' holds %zu prompts; one request takes at most %d", n,
                      API_MAX_PROMPTS);
        return ERR_INVAL;
    }
    p->r->prompts = calloc(n, sizeof(*p->r->prompts));
    if (!p->r->prompts) return api_nomem(p);
    p->r->n_prompts = n;
    if (single && json_is_array(v)) return api_parse_token_ids(p, v, -1, &p->r->prompts[0]);
    bool text = json_is_string(single ? v : json_array_get(v, 0));
    for (size_t i = 0; i < n; i++) {
        const json_t *e = single ? v : json_array_get(v, i);
        struct api_prompt *out = &p->r->prompts[i];
        if (text && json_is_string(e)) {
            out->text = strdup(json_string_value(e));
            if (!out->text) return api_nomem(p);
        } else if (!text && json_is_array(e)) {
            int rc = api_parse_token_ids(p, e, (long)i, out);
            if (rc) return rc;
        } else {
            api_error_set(p->err, API_ERR_INVALID, "prompt",
                          "'prompt' must be a list of strings or a list of token-id arrays, not "
                          "a mix: element %zu is %s",
                          i, api_json_type_name(e));
            return ERR_INVAL;
        }
    }
    return 0;
}

/* "logit_bias": {"<token id>": bias} with decimal ids in the vocabulary and biases within
 * [-100, 100] (OpenAI's range; -100 bans a token, 100 all but forces it). */
static int api_parse_logit_bias(struct api_parse *p)
{
    const json_t *v = json_util_field(p->root, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v))
        return api_wrong_type(p, "logit_bias", "an object mapping token ids to biases", v);
    size_t n = json_object_size(v);
    if (n == 0) return 0;
    if (n > API_MAX_LOGIT_BIAS) {
        api_error_set(p->err, API_ERR_INVALID, "logit_bias",
                      "'logit_bias' has %zu entries; at most %d are accepted", n,
                      API_MAX_LOGIT_BIAS);
        return ERR_INVAL;
    }
    p->r->logit_bias = calloc(n, sizeof(*p->r->logit_bias));
    if (!p->r->logit_bias) return api_nomem(p);
    long long hi = p->lim && p->lim->n_vocab > 0 ? p->lim->n_vocab - 1 : INT32_MAX;
    const char *key;
    const json_t *b;
    size_t i = 0;
    json_object_foreach((json_t *)v, key, b)
    {
        /* Decimal digits only (no sign, space or exponent), at most 10 of them. */
        size_t kl = strlen(key);
        bool digits = kl > 0 && kl <= 10;
        for (size_t k = 0; digits && k < kl; k++) digits = key[k] >= '0' && key[k] <= '9';
        if (!digits) {
            api_error_set(p->err, API_ERR_INVALID, "logit_bias",
                          "'logit_bias' keys must be token ids (decimal integers), got '%.32s'",
                          key);
            return ERR_INVAL;
        }
        long long id = strtoll(key, NULL, 10);
        if (id > hi) {
            api_error_set(p->err, API_ERR_INVALID, "logit_bias",
                          "token id %lld in 'logit_bias' is outside the vocabulary (0..%lld)", id,
                          hi);
            return ERR_INVAL;
        }
        if (!json_is_number(b)) {
            api_error_set(p->err, API_ERR_INVALID, "logit_bias",
                          "'logit_bias' values must be numbers, got %s for token %lld",
                          api_json_type_name(b), id);
            return ERR_INVAL;
        }
        double d = json_number_value(b);
        if (!isfinite(d) || d < -API_LOGIT_BIAS_LIMIT || d > API_LOGIT_BIAS_LIMIT) {
            api_error_set(p->err, API_ERR_INVALID, "logit_bias",
                          "'logit_bias' values must be between -100 and 100, got %g for token "
                          "%lld",
                          d, id);
            return ERR_INVAL;
        }
        p->r->logit_bias[i++] = (struct sampler_bias){(int32_t)id, (float)d};
        p->r->n_logit_bias = i;
    }
    return 0;
}

/* echo, suffix and best_of (/v1/completions). best_of needs n first. */
static int api_parse_completion_extras(struct api_parse *p)
{
    struct api_request *r = p->r;
    if (r->kind != API_KIND_COMPLETION) return 0;
    int rc = api_opt(api_get_bool_at(p, p->root, "echo", "echo", &r->echo));
    if (rc) return rc;
    const json_t *v = json_util_field(p->root, "suffix");
    if (v && !json_is_string(v)) return api_wrong_type(p, "suffix", "a string", v);
    if (v && json_string_length(v)) {
        r->suffix = strdup(json_string_value(v));
        if (!r->suffix) return api_nomem(p);
    }
    long long k = 0;
    rc = api_get_int(p, "best_of", 1, API_MAX_BEST_OF, &k);
    if (rc == 0 && k < r->n) {
        api_error_set(p->err, API_ERR_INVALID, "best_of",
                      "'best_of' (%lld) must be greater than or equal to 'n' (%d)", k, r->n);
        return ERR_INVAL;
    }
    r->best_of = rc == 0 ? (int)k : r->n;
    if ((rc = api_opt(rc))) return rc;
    if (r->n_prompts * (size_t)r->best_of > API_MAX_SEQS) {
        api_error_set(p->err, API_ERR_INVALID, r->n_prompts > 1 ? "prompt" : "best_of",
                      "%zu prompts x %d candidates (best_of, or n) make %zu sequences; one "
                      "request runs at most %d",
                      r->n_prompts, r->best_of, r->n_prompts * (size_t)r->best_of, API_MAX_SEQS);
        return ERR_INVAL;
    }
    return 0;
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
    rc = api_opt(api_get_bool_at(p, so, "include_usage", "stream_options.include_usage",
                                 &p->r->include_usage));
    if (rc) return rc;
    return api_opt(api_get_bool_at(p, so, "continuous_usage_stats",
                                   "stream_options.continuous_usage_stats",
                                   &p->r->continuous_usage));
}

/* OpenAI streams no best_of > n: the best candidates are known only once all have finished. */
static int api_check_stream_best_of(struct api_parse *p)
{
    if (p->r->stream && p->r->best_of > p->r->n)
        return api_invalid(p, "best_of",
                           "'best_of' greater than 'n' cannot be streamed: the best candidates "
                           "are known only when all have finished");
    return 0;
}

/* "kv_eviction" (see struct api_request): an object of known keys, the mode required. */
static int api_parse_kv_eviction(struct api_parse *p)
{
    const json_t *o = json_util_field(p->root, "kv_eviction");
    if (!o) return 0;
    if (!json_is_object(o)) return api_wrong_type(p, "kv_eviction", "an object", o);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        if (strcmp(k, "mode") != 0 && strcmp(k, "sink_tokens") != 0 &&
            strcmp(k, "window_tokens") != 0) {
            api_error_set(p->err, API_ERR_INVALID, "kv_eviction",
                          "'kv_eviction' has an unknown field '%.64s' (it takes mode, "
                          "sink_tokens and window_tokens)",
                          k);
            return ERR_INVAL;
        }
    }
    struct kv_window w;
    kv_window_default(&w);
    const json_t *m = json_object_get(o, "mode");
    if (!m)
        return api_invalid(p, "kv_eviction.mode",
                           "'kv_eviction.mode' is required: none or sink-window");
    if (!json_is_string(m)) return api_wrong_type(p, "kv_eviction.mode", "a string", m);
    if (!kv_window_mode_parse(json_string_value(m), &w.mode)) {
        api_error_set(p->err, API_ERR_INVALID, "kv_eviction.mode",
                      "'kv_eviction.mode' must be none or sink-window, got '%.64s'",
                      json_string_value(m));
        return ERR_INVAL;
    }
    long long x = 0;
    int rc =
        api_get_int_at(p, o, "sink_tokens", "kv_eviction.sink_tokens", 0, KV_WINDOW_MAX_TOKENS, &x);
    if (rc == 0) w.sink_tokens = (int)x;
    if ((rc = api_opt(rc))) return rc;
    rc = api_get_int_at(p, o, "window_tokens", "kv_eviction.window_tokens", 1, KV_WINDOW_MAX_TOKENS,
                        &x);
    if (rc == 0) w.window_tokens = (int)x;
    if ((rc = api_opt(rc))) return rc;
    p->r->kv_eviction = w;
    p->r->kv_eviction_set = true;
    return 0;
}

/* max_tokens may pass the context for a sink-window request (api_limits.max_tokens_window). */
static int api_parse_max_tokens(struct api_parse *p)
{
    bool windowed = p->r->kv_eviction_set ? p->r->kv_eviction.mode != KV_WINDOW_NONE
                                          : p->lim && p->lim->window_default;
    long most = p->lim ? p->lim->max_tokens : 0;
    if (windowed && p->lim && p->lim->max_tokens_window > 0) most = p->lim->max_tokens_window;
    long long hi = most > 0 ? most : INT32_MAX;
    long long v = 0;
    int rc = ERR_NOT_FOUND;
    if (p->r->kind == API_KIND_CHAT) rc = api_get_int(p, "max_completion_tokens", 1, hi, &v);
    /* 0 with echo: the prompt (and its logprobs) alone, as OpenAI's legacy completions allow. */
    if (rc == ERR_NOT_FOUND) rc = api_get_int(p, "max_tokens", p->r->echo ? 0 : 1, hi, &v);
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
    r->best_of = 1;
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
        (rc = api_parse_sampling(&p)) || (rc = api_parse_completion_extras(&p)) ||
        (rc = api_parse_kv_eviction(&p)) || (rc = api_parse_max_tokens(&p)) ||
        (rc = api_parse_logit_bias(&p)) || (rc = api_parse_stop(&p)) ||
        (rc = api_parse_logprobs(&p)) || (rc = api_parse_stream(&p)) ||
        (rc = api_check_stream_best_of(&p)) || (rc = api_parse_misc(&p)) ||
        (rc = api_parse_format(&p)) || (rc = api_parse_tools(&p)))
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
    for (size_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    free(r->suffix);
    free(r->logit_bias);
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
    out->logprobs = r->logprobs || r->best_of > r->n;
    out->bias = r->logit_bias;
    out->n_bias = (int)r->n_logit_bias;
}
