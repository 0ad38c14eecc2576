/* Tool calls out of a chat answer's text -> OpenAI's message.tool_calls (api.h
 * api_tool_calls_parse). The forms of the template families the chat templates render tools for:
 * Hermes / Qwen (<tool_call>{"name", "arguments"}</tool_call>, one block per call), Mistral
 * ([TOOL_CALLS] followed by a JSON array), Llama 3 (<|python_tag|> or a bare JSON object with
 * "name" and "parameters"), and the JSON array that a required / named tool_choice constrains
 * the output to. Pure code. */
#include "engine/api/api.h"

#include "common/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_TOOL_OPEN  "<tool_call>"
#define API_TOOL_CLOSE "</tool_call>"

/* Appends the call {"name", "arguments"|"parameters"} in `obj` to `calls`; false when obj is not
 * a call. */
static bool api_tool_call_add(json_t *calls, const json_t *obj, const char *id_base, int *rc)
{
    const json_t *name = json_object_get(obj, "name");
    const json_t *args = json_object_get(obj, "arguments");
    if (!args) args = json_object_get(obj, "parameters");
    if (!json_is_string(name) || !json_string_length(name) || !args) return false;
    char *arg_text = json_is_string(args) ? strdup(json_string_value(args))
                                          : json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    char id[96];
    snprintf(id, sizeof(id), "call_%s_%zu", id_base, json_array_size(calls));
    json_t *call = arg_text ? json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                                        "function", "name", name, "arguments", arg_text)
                            : NULL;
    free(arg_text);
    if (!call || json_array_append_new(calls, call)) *rc = ERR_NOMEM;
    return true;
}

/* Adds the call(s) of JSON text s[0..n) (an object or an array of objects); false when it is not
 * JSON or holds something that is not a call. */
static bool api_tool_json(json_t *calls, const char *s, size_t n, const char *id_base, int *rc)
{
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    bool ok = false;
    if (json_is_object(j)) {
        ok = api_tool_call_add(calls, j, id_base, rc);
    } else if (json_is_array(j) && json_array_size(j)) {
        ok = true;
        for (size_t i = 0; ok && i < json_array_size(j); i++)
            ok = api_tool_call_add(calls, json_array_get(j, i), id_base, rc);
    }
    json_decref(j);
    return ok;
}

static const char *api_find(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

static bool api_blank(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Hermes blocks: every <tool_call>...</tool_call> (an unclosed last one runs to the end). */
static bool api_tool_hermes(json_t *calls, const char *s, size_t n, const char *id_base, int *rc,
                            size_t *content_len)
{
    const char *first = api_find(s, n, API_TOOL_OPEN), *end = s + n;
    if (!first) return false;
    for (const char *p = first; p;) {
        const char *body = p + strlen(API_TOOL_OPEN);
        const char *close = api_find(body, (size_t)(end - body), API_TOOL_CLOSE);
        const char *stop = close ? close : end;
        if (!api_tool_json(calls, body, (size_t)(stop - body), id_base, rc)) return false;
        p = close ? api_find(close, (size_t)(end - close), API_TOOL_OPEN) : NULL;
    }
    *content_len = (size_t)(first - s);
    return true;
}

int api_tool_calls_parse(const char *text, size_t len, bool forced, const char *id_base,
                         json_t **calls, size_t *content_len)
{
    json_t *out = json_array();
    if (!out) return ERR_NOMEM;
    int rc = 0;
    size_t content = 0;
    bool found = false;
    size_t b = 0;
    while (b < len && api_blank(text[b])) b++;
    if (forced) {
        found = api_tool_json(out, text + b, len - b, id_base, &rc);
    } else if (api_tool_hermes(out, text, len, id_base, &rc, &content)) {
        found = true;
    } else {
        json_array_clear(out);
        static const char *const prefixes[] = {"[TOOL_CALLS]", "<|python_tag|>", ""};
        for (size_t i = 0; i < 3 && !found; i++) {
            size_t k = strlen(prefixes[i]);
            if (len - b < k || memcmp(text + b, prefixes[i], k) != 0) continue;
            if (!k && text[b] != '{' && text[b] != '[') continue; /* bare JSON only */
            found = api_tool_json(out, text + b + k, len - b - k, id_base, &rc);
            if (!found) json_array_clear(out);
        }
    }
    if (rc || !found || !json_array_size(out)) {
        json_decref(out);
        return rc ? rc : 0;
    }
    while (content > 0 && api_blank(text[content - 1])) content--;
    *calls = out;
    *content_len = content;
    return 1;
}
