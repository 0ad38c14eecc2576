/* Results -> OpenAI response objects: "text_completion" and "chat.completion" bodies, their
 * streaming chunks ("text_completion" / "chat.completion.chunk") and the SSE framing
 * ("data: {...}\n\n", then "data: [DONE]\n\n"). Field names and order follow the API reference
 * (https://platform.openai.com/docs/api-reference/chat/object, .../chat/streaming,
 * .../completions/object). Builds values only; the HTTP layer writes them. */
#include "engine/api/api.h"

#include "engine/api/api_priv.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/utf8.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenAI reports impossible tokens as -9999.0; jansson cannot encode infinities or NaN. */
#define API_LOGPROB_FLOOR -9999.0

const char *api_finish_name(enum api_finish f)
{
    switch (f) {
    case API_FINISH_STOP: return "stop";
    case API_FINISH_LENGTH: return "length";
    case API_FINISH_TOOL_CALLS: return "tool_calls";
    case API_FINISH_NONE: break;
    }
    return NULL;
}

int api_response_id(enum api_kind kind, uint64_t rnd, char *dst, size_t dstlen)
{
    int n =
        snprintf(dst, dstlen, "%s-%016" PRIx64, kind == API_KIND_CHAT ? "chatcmpl" : "cmpl", rnd);
    return n > 0 && (size_t)n < dstlen ? 0 : ERR_INVAL;
}

/* A JSON string from raw decoded bytes: invalid UTF-8 (a token that ends inside a character)
 * becomes U+FFFD per bad byte, as OpenAI does in logprob tokens. NULL on ERR_NOMEM. */
json_t *api_json_text(const char *p, size_t len)
{
    if (!p) p = "", len = 0;
    const unsigned char *s = (const unsigned char *)p;
    size_t bad = utf8_invalid_at(s, len);
    if (bad == len) return json_stringn(p, len);
    struct buf b;
    buf_init(&b, 0); /* at most 3x the input, which the caller bounds */
    json_t *j = NULL;
    size_t i = 0;
    while (i < len) {
        bad = i + utf8_invalid_at(s + i, len - i);
        if (buf_append(&b, s + i, bad - i)) goto out;
        if (bad == len) break;
        if (buf_puts(&b, "\xEF\xBF\xBD")) goto out;
        i = bad + 1;
    }
    j = json_stringn(buf_cstr(&b), b.len);
out:
    buf_fini(&b);
    return j;
}

static json_t *api_logprob_value(float lp)
{
    return json_real(isfinite(lp) ? (double)lp : API_LOGPROB_FLOOR);
}

/* Characters (UTF-8 lead bytes) in p[0..len): OpenAI's text_offset counts characters. */
static size_t api_chars(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)p[i] & 0xC0) != 0x80;
    return n;
}

static json_t *api_bytes(const char *p, size_t len)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++)
        if (json_array_append_new(a, json_integer((unsigned char)p[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Chat: {"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}],
 *        "refusal":null} */
static json_t *api_chat_logprobs(const struct api_choice *c)
{
    json_t *content = json_array();
    json_t *obj = json_pack("{s:o,s:n}", "content", content, "refusal");
    if (!obj) return NULL;
    for (size_t i = 0; c->logprobs && i < c->n_logprobs; i++) {
        const struct api_token_logprob *t = &c->logprobs[i];
        json_t *tops = json_array();
        for (int k = 0; tops && k < t->n_top; k++) {
            const struct api_top_logprob *a = &t->top[k];
            if (json_array_append_new(tops, json_pack("{s:o,s:o,s:o}", "token",
                                                      api_json_text(a->text, a->len), "logprob",
                                                      api_logprob_value(a->logprob), "bytes",
                                                      api_bytes(a->text, a->len)))) {
                json_decref(tops);
                tops = NULL;
            }
        }
        json_t *e = json_pack("{s:o,s:o,s:o,s:o}", "token", api_json_text(t->text, t->len),
                              "logprob", api_logprob_value(t->logprob), "bytes",
                              api_bytes(t->text, t->len), "top_logprobs", tops);
        if (json_array_append_new(content, e)) {
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}

/* Adds text -> logprob to the top_logprobs object `top` unless the text is there already (two
 * tokens may decode to the same text: the first, most likely, stays). 0 or -1. */
static int api_top_add(json_t *top, const char *text, size_t len, float logprob)
{
    json_t *key = api_json_text(text, len);
    int rc = key && (json_object_get(top, json_string_value(key)) ||
                     !json_object_set_new(top, json_string_value(key), api_logprob_value(logprob)))
                 ? 0
                 : -1;
    json_decref(key);
    return rc;
}

/* One token's top_logprobs object: its alternatives, then the token itself when they miss it
 * (OpenAI: "up to logprobs + 1 elements"). New or NULL. */
static json_t *api_compl_top(const struct api_token_logprob *t)
{
    json_t *top = json_object();
    for (int k = 0; top && k < t->n_top; k++)
        if (api_top_add(top, t->top[k].text, t->top[k].len, t->top[k].logprob)) {
            json_decref(top);
            return NULL;
        }
    if (top && api_top_add(top, t->text, t->len, t->logprob)) {
        json_decref(top);
        return NULL;
    }
    return top;
}

/* Completions: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{tok:lp}],"text_offset":[..]}
 * (an unscored first prompt token has null in token_logprobs and top_logprobs). */
static json_t *api_compl_logprobs(const struct api_choice *c)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    json_t *obj = json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps,
                            "top_logprobs", tops, "text_offset", offs);
    if (!obj) return NULL;
    size_t off = c->text_offset;
    for (size_t i = 0; c->logprobs && i < c->n_logprobs; i++) {
        const struct api_token_logprob *t = &c->logprobs[i];
        json_t *top = t->unscored ? json_null() : api_compl_top(t);
        if (json_array_append_new(tokens, api_json_text(t->text, t->len)) ||
            json_array_append_new(lps, t->unscored ? json_null() : api_logprob_value(t->logprob)) ||
            json_array_append_new(tops, top) ||
            json_array_append_new(offs, json_integer((json_int_t)off))) {
            json_decref(obj);
            return NULL;
        }
        off += api_chars(t->text, t->len);
    }
    return obj;
}

/* The choice's "logprobs": an object when it has entries or the request asked for them, else
 * null. */
static json_t *api_logprobs(const struct api_response_meta *m, const struct api_choice *c)
{
    if (!c->logprobs && !m->logprobs) return json_null();
    return m->kind == API_KIND_CHAT ? api_chat_logprobs(c) : api_compl_logprobs(c);
}

static json_t *api_finish(enum api_finish f)
{
    const char *s = api_finish_name(f);
    return s ? json_string(s) : json_null();
}

static json_t *api_usage_json(const struct api_usage *u)
{
    json_t *j = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                          "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                          (json_int_t)(u->prompt_tokens + u->completion_tokens),
                          "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
    if (j && u->has_reasoning &&
        json_object_set_new(
            j, "completion_tokens_details",
            json_pack("{s:I}", "reasoning_tokens", (json_int_t)u->reasoning_tokens))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Adds "reasoning_content" to a message or delta when the choice has a reasoning section. */
static json_t *api_with_reasoning(json_t *msg, const struct api_choice *c)
{
    if (!msg || !c->reasoning) return msg;
    if (json_object_set_new(msg, "reasoning_content",
                            api_json_text(c->reasoning, c->reasoning_len))) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

/* {"id","object","created","model"}: the head every object and chunk starts with. */
static json_t *api_head(const struct api_response_meta *m, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:o}", "id", m->id ? m->id : "", "object", object, "created",
                     (json_int_t)m->created, "model",
                     api_json_text(m->model, m->model ? strlen(m->model) : 0));
}

static json_t *api_choice_json(const struct api_response_meta *m, const struct api_choice *c)
{
    if (m->kind == API_KIND_CHAT) {
        json_t *msg = c->tool_calls ? json_pack("{s:s,s:o,s:n,s:O}", "role", "assistant", "content",
                                                c->text && c->len ? api_json_text(c->text, c->len)
                                                                  : json_null(),
                                                "refusal", "tool_calls", c->tool_calls)
                                    : json_pack("{s:s,s:o,s:n}", "role", "assistant", "content",
                                                api_json_text(c->text, c->len), "refusal");
        return json_pack("{s:i,s:o,s:o,s:o}", "index", c->index, "message",
                         api_with_reasoning(msg, c), "logprobs", api_logprobs(m, c),
                         "finish_reason", api_finish(c->finish));
    }
    return json_pack("{s:o,s:i,s:o,s:o}", "text", api_json_text(c->text, c->len), "index", c->index,
                     "logprobs", api_logprobs(m, c), "finish_reason", api_finish(c->finish));
}

json_t *api_response_json(const struct api_response_meta *m, const struct api_choice *choices,
                          size_t n, const struct api_usage *u)
{
    json_t *obj = api_head(m, m->kind == API_KIND_CHAT ? "chat.completion" : "text_completion");
    json_t *arr = json_array();
    if (!obj || !arr || json_object_set(obj, "choices", arr)) goto fail;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(arr, api_choice_json(m, &choices[i]))) goto fail;
    if (json_object_set_new(obj, "usage", api_usage_json(u))) goto fail;
    json_decref(arr);
    return obj;
fail:
    json_decref(arr);
    json_decref(obj);
    return NULL;
}

json_t *api_response_chunk(const struct api_response_meta *m, const struct api_choice *c,
                           bool role_only)
{
    bool chat = m->kind == API_KIND_CHAT;
    json_t *obj = api_head(m, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = NULL;
    if (!obj) return NULL;
    if (chat) {
        json_t *delta = NULL;
        if (role_only)
            delta = json_pack("{s:s,s:s,s:n}", "role", "assistant", "content", "", "refusal");
        else if (c->text && c->len)
            delta = json_pack("{s:o}", "content", api_json_text(c->text, c->len));
        else
            delta = json_object();
        if (!role_only && c->reasoning && c->reasoning_len) delta = api_with_reasoning(delta, c);
        /* OpenAI: {"content":[],"refusal":null} on the role chunk, the tokens on content chunks,
         * null on the closing chunk (the one with finish_reason). */
        enum api_finish fin = role_only ? API_FINISH_NONE : c->finish;
        json_t *lp = fin != API_FINISH_NONE && !c->logprobs ? json_null() : api_logprobs(m, c);
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", c->index, "delta", delta, "logprobs", lp,
                           "finish_reason", api_finish(fin));
    } else {
        choice = api_choice_json(m, c);
    }
    if (json_object_set_new(obj, "choices", json_pack("[o]", choice)) ||
        (c->usage && json_object_set_new(obj, "usage", api_usage_json(c->usage))) ||
        (!c->usage && m->include_usage && json_object_set_new(obj, "usage", json_null()))) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* A chunk whose delta is {"tool_calls": arr} (arr taken). */
static json_t *api_tool_delta_chunk(const struct api_response_meta *m, int index, json_t *arr)
{
    json_t *obj = api_head(m, "chat.completion.chunk");
    if (!obj || !arr) goto fail;
    json_t *choice = json_pack("{s:i,s:{s:o},s:n,s:n}", "index", index, "delta", "tool_calls", arr,
                               "logprobs", "finish_reason");
    arr = NULL;
    if (!choice || json_object_set_new(obj, "choices", json_pack("[o]", choice)) ||
        (m->include_usage && json_object_set_new(obj, "usage", json_null())))
        goto fail;
    return obj;
fail:
    json_decref(arr);
    json_decref(obj);
    return NULL;
}

json_t *api_response_tool_delta(const struct api_response_meta *m, int index,
                                const struct api_tool_delta *d)
{
    json_t *call =
        d->id ? json_pack("{s:i,s:s,s:s,s:{s:s%,s:s}}", "index", d->call, "id", d->id, "type",
                          "function", "function", "name", d->text, d->len, "arguments", "")
              : json_pack("{s:i,s:{s:o}}", "index", d->call, "function", "arguments",
                          api_json_text(d->text, d->len));
    return api_tool_delta_chunk(m, index, call ? json_pack("[o]", call) : NULL);
}

json_t *api_response_usage_chunk(const struct api_response_meta *m, const struct api_usage *u)
{
    json_t *obj =
        api_head(m, m->kind == API_KIND_CHAT ? "chat.completion.chunk" : "text_completion");
    if (!obj) return NULL;
    if (json_object_set_new(obj, "choices", json_array()) ||
        json_object_set_new(obj, "usage", api_usage_json(u))) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

json_t *api_model_json(const char *id, long long created, int max_model_len)
{
    return json_pack("{s:o,s:s,s:I,s:s,s:i}", "id", api_json_text(id, id ? strlen(id) : 0),
                     "object", "model", "created", (json_int_t)created, "owned_by", "cinfer",
                     "max_model_len", max_model_len);
}

int api_response_sse(const json_t *j, struct buf *out)
{
    if (!j) return ERR_INVAL;
    size_t before = out->len;
    int rc = buf_puts(out, "data: ");
    if (!rc) rc = json_util_dump(j, out);
    if (!rc) rc = buf_puts(out, "\n\n");
    if (rc && out->data) {
        out->len = before;
        out->data[before] = '\0';
    }
    return rc;
}

int api_response_sse_done(struct buf *out)
{
    return buf_puts(out, "data: [DONE]\n\n");
}
