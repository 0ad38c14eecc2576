/* Fuzz target: parses arbitrary bytes as a Jinja chat template and, when that succeeds, renders it
 * with a small conversation (system, user, assistant with a tool call, tool result, tools) under
 * tight limits. Checks: no crash, hang or sanitizer report; every failure comes with a message;
 * a successful render is valid UTF-8 (template text and values are). Input: the template source. */
#include "common/buf.h"
#include "common/err.h"
#include "common/utf8.h"
#include "engine/api/jinja.h"
#include "engine/text/unicode.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char vars_json[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 <b>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c4llA1b2C\","
    " \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\":"
    " {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c4llA1b2C\", \"content\": \"22\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}}}}}],"
    " \"documents\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *vars;
    if (!vars && !(vars = json_loads(vars_json, 0, NULL))) abort();
    struct jinja_template *t = NULL;
    char err[256] = "";
    int rc = jinja_parse((const char *)data, size, &t, err, sizeof(err));
    if (rc) {
        if (t || !err[0]) abort(); /* a failure must say why and return nothing */
        return 0;
    }
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    lim.max_steps = 200000;
    lim.max_memory = 4u << 20;
    lim.max_depth = 16;
    struct buf out;
    buf_init(&out, 1 << 16);
    rc = jinja_render(t, vars, 0, &lim, &out, err, sizeof(err));
    if (rc && !err[0]) abort();
    if (rc == 0 && !utf8_valid(out.data ? out.data : "", out.len)) abort();
    if (rc && out.len != 0) abort(); /* the buffer is restored on failure */
    buf_fini(&out);
    jinja_free(t);
    return 0;
}
