/* "tools", "tool_choice" and "parallel_tool_calls" of POST /v1/chat/completions
 * (https://platform.openai.com/docs/api-reference/chat/create#chat-create-tools). Function tools
 * only. With tool_choice "required" or a named function the answer is constrained to the JSON
 * array [{"name": ..., "arguments": {...}}, ...] whose arguments follow each function's
 * `parameters` schema (engine/grammar/grammar_schema.h), so a call always parses; "auto" leaves
 * the output free until the template family's call trigger, and the call after it constrained
 * the same way (api_tools_lazy: a lazy grammar, engine/grammar/grammar.h), and the responder
 * looks for calls in it (api_tool_calls.c). */
#include "engine/api/api.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/json_util.h"
#include "engine/api/api_priv.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_MAX_TOOLS 128

/* OpenAI's rule for function names: a-z, A-Z, 0-9, underscores and dashes, at most 64. */
static bool api_tool_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int api_tools_check(struct api_parse *p, const json_t *tools)
{
    if (!json_is_array(tools)) return api_wrong_type(p, "tools", "an array", tools);
    if (json_array_size(tools) > API_MAX_TOOLS)
        return api_invalid(p, "tools", "'tools' may hold at most 128 functions");
    char param[96];
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        snprintf(param, sizeof(param), "tools[%zu]", i);
        if (!json_is_object(t)) return api_wrong_type(p, param, "an object", t);
        const json_t *type = json_object_get(t, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
            snprintf(param, sizeof(param), "tools[%zu].type", i);
            return api_invalid(p, param, "only tools of type 'function' are supported");
        }
        const json_t *f = json_object_get(t, "function");
        snprintf(param, sizeof(param), "tools[%zu].function", i);
        if (!json_is_object(f)) return api_wrong_type(p, param, "an object", f ? f : json_null());
        const json_t *name = json_object_get(f, "name");
        snprintf(param, sizeof(param), "tools[%zu].function.name", i);
        if (!json_is_string(name) || !api_tool_name_ok(json_string_value(name)))
            return api_invalid(p, param,
                               "a function name is 1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
        const json_t *params = json_util_field(f, "parameters");
        snprintf(param, sizeof(param), "tools[%zu].function.parameters", i);
        if (params && !json_is_object(params))
            return api_wrong_type(p, param, "a JSON schema object", params);
    }
    return 0;
}

/* The schema of one call of function f: {"name": <its name>, <key>: <its parameters>}, key
 * "arguments" (or Llama 3's "parameters"). */
static json_t *api_tool_call_schema(const json_t *f, const char *key)
{
    const json_t *params = json_util_field(f, "parameters");
    json_t *args = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    return json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name",
                     "const", json_object_get(f, "name"), key, args, "required", "name", key,
                     "additionalProperties", 0);
}

/* GBNF of the forced answer: an array of one call (named, or parallel_tool_calls false) or of
 * one or more calls of any tool. */
static int api_tools_grammar(struct api_parse *p)
{
    struct api_request *r = p->r;
    json_t *alts = json_array();
    int rc = alts ? 0 : ERR_NOMEM;
    for (size_t i = 0; !rc && i < json_array_size(r->tools); i++) {
        const json_t *f = json_object_get(json_array_get(r->tools, i), "function");
        if (r->tool_choice == API_TOOL_NAMED &&
            strcmp(json_string_value(json_object_get(f, "name")), r->tool_name) != 0)
            continue;
        if (json_array_append_new(alts, api_tool_call_schema(f, "arguments"))) rc = ERR_NOMEM;
    }
    bool one = r->tool_choice == API_TOOL_NAMED || !r->parallel_tool_calls;
    json_t *schema =
        rc ? NULL
           : json_pack("{s:s,s:{s:o},s:i}", "type", "array", "items", "anyOf", alts, "minItems", 1);
    alts = NULL;
    if (schema && one && json_object_set_new(schema, "maxItems", json_integer(1))) rc = ERR_NOMEM;
    if (!schema) rc = ERR_NOMEM;
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    char err[320];
    if (!rc) rc = grammar_schema_gbnf(schema, &b, err, sizeof(err));
    json_decref(schema);
    json_decref(alts);
    if (rc == ERR_NOMEM) {
        buf_fini(&b);
        return api_nomem(p);
    }
    if (rc) {
        buf_fini(&b);
        api_error_set(p->err, API_ERR_INVALID, "tools", "a function's parameters: %s", err);
        return ERR_INVAL;
    }
    if (r->grammar) {
        buf_fini(&b);
        return api_invalid(p, "tool_choice",
                           "a required or named tool_choice cannot be combined with "
                           "response_format or guided decoding");
    }
    r->grammar = buf_steal(&b);
    buf_fini(&b);
    if (!r->grammar) return api_nomem(p);
    snprintf(r->grammar_param, sizeof(r->grammar_param), "tools");
    return 0;
}

static int api_tool_choice(struct api_parse *p, const json_t *tc)
{
    struct api_request *r = p->r;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none"))
            r->tool_choice = API_TOOL_NONE;
        else if (!strcmp(s, "auto"))
            r->tool_choice = API_TOOL_AUTO;
        else if (!strcmp(s, "required"))
            r->tool_choice = API_TOOL_REQUIRED;
        else
            return api_invalid(p, "tool_choice",
                               "'tool_choice' must be 'none', 'auto', 'required' or "
                               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        return 0;
    }
    const json_t *f = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
    const json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
    if (!json_is_string(name))
        return api_invalid(p, "tool_choice",
                           "'tool_choice' must be 'none', 'auto', 'required' or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (size_t i = 0; i < json_array_size(r->tools); i++) {
        const json_t *fn = json_object_get(json_array_get(r->tools, i), "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), json_string_value(name))) {
            r->tool_choice = API_TOOL_NAMED;
            snprintf(r->tool_name, sizeof(r->tool_name), "%s", json_string_value(name));
            return 0;
        }
    }
    api_error_set(p->err, API_ERR_INVALID, "tool_choice",
                  "'tool_choice' names the function '%.64s', which is not in 'tools'",
                  json_string_value(name));
    return ERR_INVAL;
}

int api_parse_tools(struct api_parse *p)
{
    struct api_request *r = p->r;
    const json_t *tools = json_util_field(p->root, "tools");
    const json_t *tc = json_util_field(p->root, "tool_choice");
    const json_t *par = json_util_field(p->root, "parallel_tool_calls");
    r->parallel_tool_calls = true;
    if (par && !json_is_boolean(par))
        return api_wrong_type(p, "parallel_tool_calls", "a boolean", par);
    if (par) r->parallel_tool_calls = json_is_true(par);
    if (json_util_field(p->root, "functions"))
        return api_invalid(p, "functions", "'functions' is deprecated: send 'tools'");
    if (!tools || (json_is_array(tools) && !json_array_size(tools))) {
        if (tc && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none")))
            return api_invalid(p, "tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    if (r->kind != API_KIND_CHAT)
        return api_invalid(p, "tools", "'tools' is only supported on /v1/chat/completions");
    int rc = api_tools_check(p, tools);
    if (rc) return rc;
    r->tools = json_incref((json_t *)tools);
    r->tool_choice = API_TOOL_AUTO;
    if (tc && (rc = api_tool_choice(p, tc))) return rc;
    if (r->tool_choice == API_TOOL_NONE) {
        json_decref(r->tools);
        r->tools = NULL;
        return 0;
    }
    if (r->tool_choice == API_TOOL_REQUIRED || r->tool_choice == API_TOOL_NAMED)
        return api_tools_grammar(p);
    return 0;
}

/* The rules after the trigger of each form; "tc-call" is one call of any tool. */
static const char *const api_lazy_root[][2] = {
    /* [fmt] = {one call, parallel calls} */
    [API_TOOL_FORMAT_JSON] = {"root ::= tc-call\n", "root ::= tc-call\n"},
    [API_TOOL_FORMAT_HERMES] = {"root ::= tc-block\n",
                                "root ::= tc-block ( \"\\n\"? tc-block )*\n"},
    [API_TOOL_FORMAT_MISTRAL] =
        {"root ::= \"[TOOL_CALLS]\" \" \"? \"[\" tc-call \"]\"\n",
         "root ::= \"[TOOL_CALLS]\" \" \"? \"[\" tc-call ( \",\" \" \"? tc-call )* \"]\"\n"},
    [API_TOOL_FORMAT_LLAMA3] = {"root ::= \"<|python_tag|>\"? tc-call\n",
                                "root ::= \"<|python_tag|>\"? tc-call\n"},
};

int api_tools_lazy(struct api_request *r, enum api_tool_format fmt,
                   struct api_tool_trigger trig[API_TOOL_TRIGGERS_MAX], int *n_trig, char *why,
                   size_t whylen)
{
    if (!r->tools || r->tool_choice != API_TOOL_AUTO || r->grammar) {
        snprintf(why, whylen, "no tools, not auto, or another grammar");
        return 1;
    }
    if (fmt < API_TOOL_FORMAT_JSON || fmt > API_TOOL_FORMAT_LLAMA3) {
        snprintf(why, whylen, "the template's call form is not one the calls are parsed from");
        return 1;
    }
    const char *key = fmt == API_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    json_t *alts = json_array();
    int rc = alts ? 0 : ERR_NOMEM;
    for (size_t i = 0; !rc && i < json_array_size(r->tools); i++) {
        const json_t *f = json_object_get(json_array_get(r->tools, i), "function");
        if (json_array_append_new(alts, api_tool_call_schema(f, key))) rc = ERR_NOMEM;
    }
    json_t *schema = rc ? NULL : json_pack("{s:o}", "anyOf", alts);
    if (!schema) rc = ERR_NOMEM;
    struct buf calls, out;
    buf_init(&calls, GRAMMAR_MAX_TEXT);
    buf_init(&out, GRAMMAR_MAX_TEXT);
    char err[320] = "";
    if (!rc) rc = grammar_schema_gbnf(schema, &calls, err, sizeof(err));
    json_decref(schema);
    /* The schema's start rule becomes tc-call (grammar_schema_gbnf writes it as one line
     * "root ::= <rule>" after the rules it names). */
    const char *text = buf_cstr(&calls);
    const char *at = rc ? NULL : strstr(text, "\nroot ::= ");
    if (!rc && !at) rc = ERR_INVAL;
    if (!rc) {
        bool par = r->parallel_tool_calls;
        rc = buf_puts(&out, api_lazy_root[fmt][par]);
        if (!rc && fmt == API_TOOL_FORMAT_HERMES)
            rc = buf_puts(&out, "tc-block ::= \"<tool_call>\" \"\\n\"? tc-call \"\\n\"? "
                                "\"</tool_call>\"\n");
        if (!rc) rc = buf_append(&out, text, (size_t)(at - text) + 1);
        if (!rc) rc = buf_puts(&out, "tc-call");
        if (!rc) rc = buf_puts(&out, at + strlen("\nroot"));
    }
    buf_fini(&calls);
    if (rc == ERR_NOMEM) {
        buf_fini(&out);
        return ERR_NOMEM;
    }
    if (rc) {
        buf_fini(&out);
        snprintf(why, whylen, "a function's parameters: %s", err[0] ? err : err_str(rc));
        return 1;
    }
    r->grammar = buf_steal(&out);
    buf_fini(&out);
    if (!r->grammar) return ERR_NOMEM;
    snprintf(r->grammar_param, sizeof(r->grammar_param), "tools");
    int n = 0;
    switch (fmt) {
    case API_TOOL_FORMAT_HERMES: trig[n++] = (struct api_tool_trigger){"<tool_call>", false}; break;
    case API_TOOL_FORMAT_MISTRAL:
        trig[n++] = (struct api_tool_trigger){"[TOOL_CALLS]", true};
        break;
    case API_TOOL_FORMAT_LLAMA3:
        trig[n++] = (struct api_tool_trigger){"<|python_tag|>", true};
        trig[n++] = (struct api_tool_trigger){"{\"name\"", true};
        break;
    case API_TOOL_FORMAT_JSON: trig[n++] = (struct api_tool_trigger){"{\"name\"", true}; break;
    case API_TOOL_FORMAT_OTHER: break; /* refused above */
    }
    *n_trig = n;
    return 0;
}
