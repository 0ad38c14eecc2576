/* The "messages" array of POST /v1/chat/completions -> struct api_message[]: roles (system and
 * its newer name developer, user, assistant, tool) and content as a string or an array of text
 * parts. Images, audio and other part types are refused with a 400 naming the part. */
#include "engine/api/api.h"

#include "common/err.h"
#include "common/json_util.h"
#include "engine/api/api_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int api_parse_role(struct api_parse *p, const json_t *m, const char *param,
                          enum api_role *out)
{
    const json_t *v = json_object_get(m, "role");
    if (!v) return api_invalid(p, param, "each message needs a 'role'");
    if (!json_is_string(v)) return api_wrong_type(p, param, "a string", v);
    const char *s = json_string_value(v);
    if (!strcmp(s, "system") || !strcmp(s, "developer")) /* OpenAI's newer name for system */
        *out = API_ROLE_SYSTEM;
    else if (!strcmp(s, "user"))
        *out = API_ROLE_USER;
    else if (!strcmp(s, "assistant"))
        *out = API_ROLE_ASSISTANT;
    else if (!strcmp(s, "tool"))
        *out = API_ROLE_TOOL;
    else {
        api_error_set(p->err, API_ERR_INVALID, param,
                      "unknown role '%.64s' (expected system, developer, user, assistant or tool)",
                      s);
        return ERR_INVAL;
    }
    return 0;
}

/* Content as a string, or an array of {"type":"text","text":...} parts joined with "\n" (the
 * convention of vLLM and llama.cpp's server). Writes an owned string to *out. */
static int api_parse_content(struct api_parse *p, const json_t *c, size_t mi, char **out)
{
    char param[96];
    snprintf(param, sizeof(param), "messages[%zu].content", mi);
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return *out ? 0 : api_nomem(p);
    }
    if (!json_is_array(c)) return api_wrong_type(p, param, "a string or an array of parts", c);
    struct buf b;
    buf_init(&b, 0); /* bounded by the body, which the HTTP layer bounds */
    int rc = 0;
    for (size_t j = 0; j < json_array_size(c); j++) {
        const json_t *part = json_array_get(c, j);
        snprintf(param, sizeof(param), "messages[%zu].content[%zu]", mi, j);
        if (!json_is_object(part)) {
            rc = api_wrong_type(p, param, "an object", part);
            goto out;
        }
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0) {
            snprintf(param, sizeof(param), "messages[%zu].content[%zu].type", mi, j);
            rc = api_invalid(p, param, "only content parts of type 'text' are supported");
            goto out;
        }
        if (!json_is_string(text)) {
            snprintf(param, sizeof(param), "messages[%zu].content[%zu].text", mi, j);
            rc = api_wrong_type(p, param, "a string", text ? text : json_null());
            goto out;
        }
        if ((b.len && buf_putc(&b, '\n')) ||
            buf_append(&b, json_string_value(text), json_string_length(text))) {
            rc = api_nomem(p);
            goto out;
        }
    }
    *out = buf_steal(&b);
    if (!*out) rc = api_nomem(p);
out:
    buf_fini(&b);
    return rc;
}

int api_parse_messages(struct api_parse *p)
{
    const json_t *a = json_util_field(p->root, "messages");
    if (!a) return api_invalid(p, "messages", "'messages' is required");
    if (!json_is_array(a)) return api_wrong_type(p, "messages", "an array", a);
    size_t n = json_array_size(a);
    if (n == 0) return api_invalid(p, "messages", "'messages' must not be empty");
    if (n > API_MAX_MESSAGES) return api_invalid(p, "messages", "too many messages");
    p->r->messages = calloc(n, sizeof(*p->r->messages));
    if (!p->r->messages) return api_nomem(p);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(a, i);
        char param[96];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m)) return api_wrong_type(p, param, "an object", m);
        struct api_message *msg = &p->r->messages[i];
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        int rc = api_parse_role(p, m, param, &msg->role);
        if (rc) return rc;
        const json_t *c = json_util_field(m, "content");
        if (!c && msg->role != API_ROLE_ASSISTANT) { /* assistant may carry only tool calls */
            snprintf(param, sizeof(param), "messages[%zu].content", i);
            return api_invalid(p, param, "message 'content' is required");
        }
        rc = c ? api_parse_content(p, c, i, &msg->content)
               : ((msg->content = strdup("")) ? 0 : api_nomem(p));
        if (msg->role == API_ROLE_TOOL || json_util_field(m, "tool_calls"))
            p->r->tool_history = true;
        p->r->n_messages = i + 1; /* the freed prefix always has its content set */
        if (rc) return rc;
    }
    p->r->messages_json = json_incref((json_t *)a);
    return 0;
}
