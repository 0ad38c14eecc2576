/* Tool calls out of a chat answer's text -> OpenAI's message.tool_calls (api.h
 * api_tool_calls_parse). The forms are those of the template families the chat templates render
 * tools for (Hermes / Qwen <tool_call> blocks, Mistral [TOOL_CALLS], Llama 3 <|python_tag|> or a
 * bare object, the JSON that a required / named tool_choice forces); the reading is the streaming
 * scanner's (api_tool_stream.c) run over the whole text, so a streamed answer's deltas assemble to
 * exactly this. Pure code. */
#include "engine/api/api.h"

#include "engine/api/api_priv.h"

#include "common/err.h"

#include <stdio.h>
#include <string.h>

void api_tool_call_id(char *dst, size_t dstlen, const char *id_base, int k)
{
    snprintf(dst, dstlen, "call_%s_%d", id_base, k);
}

/* The calls as the scanner reports them. */
struct api_tool_collect {
    const char *id_base;
    json_t *calls;
    struct buf args; /* the current call's arguments */
    size_t content;
};

/* Sets the arguments of the last call from c->args. */
static int api_tool_collect_args(struct api_tool_collect *c)
{
    size_t n = json_array_size(c->calls);
    if (!n) return 0;
    json_t *fn = json_object_get(json_array_get(c->calls, n - 1), "function");
    json_t *args = api_json_text(c->args.data, c->args.len);
    buf_reset(&c->args);
    return args && !json_object_set_new(fn, "arguments", args) ? 0 : ERR_NOMEM;
}

static int api_tool_collect_ev(void *ud, enum api_tool_ev ev, int call, const char *text,
                               size_t len)
{
    struct api_tool_collect *c = ud;
    (void)call;
    if (ev == API_TOOL_EV_CONTENT) {
        c->content += len; /* the content is always a prefix of the text */
        return 0;
    }
    if (ev == API_TOOL_EV_ARGS) return buf_append(&c->args, text, len);
    int rc = api_tool_collect_args(c);
    if (rc) return rc;
    char id[96];
    api_tool_call_id(id, sizeof(id), c->id_base, (int)json_array_size(c->calls));
    json_t *one = json_pack("{s:s,s:s,s:{s:s%,s:s}}", "id", id, "type", "function", "function",
                            "name", text, len, "arguments", "");
    return one && !json_array_append_new(c->calls, one) ? 0 : ERR_NOMEM;
}

int api_tool_calls_parse(const char *text, size_t len, bool forced, const char *id_base,
                         json_t **calls, size_t *content_len)
{
    struct api_tool_collect c = {.id_base = id_base, .calls = json_array()};
    struct api_tool_stream s;
    api_tool_stream_init(&s, forced);
    buf_init(&c.args, 0);
    int rc =
        c.calls ? api_tool_stream_feed(&s, text, len, true, api_tool_collect_ev, &c) : ERR_NOMEM;
    if (!rc) rc = api_tool_collect_args(&c);
    api_tool_stream_fini(&s);
    buf_fini(&c.args);
    if (rc || !json_array_size(c.calls)) {
        json_decref(c.calls);
        return rc;
    }
    *calls = c.calls;
    *content_len = c.content;
    return 1;
}
