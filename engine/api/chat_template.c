/* Chat templates (see chat_template.h): the model's Jinja2 template or a built-in one, rendered by
 * engine/api/jinja with transformers' variables, plus the BOS/EOS handling llama.cpp's server
 * applies. The built-ins are Jinja2 sources too, one per family as llama.cpp names them, producing
 * the strings llama.cpp's hand-written formatters produce (tests/engine/test_chat_template.c), so
 * there is one renderer; they never emit BOS, which the tokenizer adds. */
#include "engine/api/chat_template.h"

#include "common/err.h"
#include "engine/api/jinja.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAT_TEMPLATE_BASE_MEMORY (64u << 20) /* the render's memory: this plus 16x the input */

struct chat_template {
    struct jinja_template *t;
    enum chat_template_origin origin;
    char *describe;
    char *source;    /* the Jinja2 text parsed (NUL-terminated copy) */
    char *bos, *eos; /* NULL when none */
    bool add_bos, add_eos;
    bool content_parts; /* the template iterates over content: lists of parts pass as they are */
    bool thinks;        /* the template knows <think> blocks (a reasoning model) */
    enum api_tool_format tool_format;
};

/* llama2 family: the whole conversation in [INST] turns (system as plain text + "\n", or in
 * <<SYS>> tags), a later [INST] opened after each reply ("<s>[INST] " for -bos), replies ended
 * by </s>; -strip trims contents. */
#define LLAMA2(SYS, REOPEN, C)                                                                     \
    "{% set ns = namespace(open=true) %}[INST] {% for m in messages %}"                            \
    "{% if not ns.open %}{% set ns.open = true %}{{ '" REOPEN "' }}{% endif %}"                    \
    "{% set c = " C " %}{% if m.role == 'system' %}{{ " SYS " }}"                                  \
    "{% elif m.role == 'user' %}{{ c + ' [/INST]' }}"                                              \
    "{% else %}{{ c + '</s>' }}{% set ns.open = false %}{% endif %}{% endfor %}"
#define LLAMA2_SYS_TAGS "'<<SYS>>\\n' + c + '\\n<</SYS>>\\n\\n'"

/* Mistral's v1 / v3 / v3-tekken: the system text opens the next [INST] turn. */
#define MISTRAL(OPEN, CLOSE, REPLY)                                                                \
    "{% set ns = namespace(open=false) %}{% for m in messages %}"                                  \
    "{% if not ns.open %}{{ '" OPEN "' }}{% set ns.open = true %}{% endif %}"                      \
    "{% set c = m.content or '' %}{% if m.role == 'system' %}{{ c + '\\n\\n' }}"                   \
    "{% elif m.role == 'user' %}{{ c + '" CLOSE "' }}"                                             \
    "{% else %}{{ " REPLY " + '</s>' }}{% set ns.open = false %}{% endif %}{% endfor %}"

#define HEADERS(OPEN, MID, CLOSE, CONTENT, GEN)                                                    \
    "{% for m in messages %}{{ '" OPEN "' + m.role + '" MID "' + " CONTENT " + '" CLOSE "' }}"     \
    "{% endfor %}{% if add_generation_prompt %}{{ '" GEN "' }}{% endif %}"

static const struct {
    const char *name;
    const char *source;
} builtins[] = {
    {"chatml", HEADERS("<|im_start|>", "\\n", "<|im_end|>\\n", "(m.content or '')",
                       "<|im_start|>assistant\\n")},
    {"llama2", LLAMA2("c + '\\n'", "[INST] ", "m.content or ''")},
    {"llama2-sys", LLAMA2(LLAMA2_SYS_TAGS, "[INST] ", "m.content or ''")},
    {"llama2-sys-bos", LLAMA2(LLAMA2_SYS_TAGS, "<s>[INST] ", "m.content or ''")},
    {"llama2-sys-strip", LLAMA2(LLAMA2_SYS_TAGS, "[INST] ", "(m.content or '') | trim")},
    {"mistral-v1", MISTRAL(" [INST] ", " [/INST]", "' ' + c")},
    {"mistral-v3", MISTRAL("[INST] ", "[/INST]", "' ' + (c | trim)")},
    {"mistral-v3-tekken", MISTRAL("[INST]", "[/INST]", "c")},
    {"mistral-v7", "{% for m in messages %}{% set c = m.content or '' %}"
                   "{% if m.role == 'system' %}{{ '[SYSTEM_PROMPT] ' + c + '[/SYSTEM_PROMPT]' }}"
                   "{% elif m.role == 'user' %}{{ '[INST] ' + c + '[/INST]' }}"
                   "{% else %}{{ ' ' + c + '</s>' }}{% endif %}{% endfor %}"},
    {"llama3",
     HEADERS("<|start_header_id|>", "<|end_header_id|>\\n\\n", "<|eot_id|>",
             "((m.content or '') | trim)", "<|start_header_id|>assistant<|end_header_id|>\\n\\n")},
    {"zephyr", HEADERS("<|", "|>\\n", "<|endoftext|>\\n", "(m.content or '')", "<|assistant|>\\n")},
    {"zephyr-eos", HEADERS("<|", "|>\\n", "</s>\\n", "(m.content or '')", "<|assistant|>\\n")},
};

#define N_BUILTINS (sizeof(builtins) / sizeof(builtins[0]))

const char *chat_template_builtin_name(size_t i)
{
    return i < N_BUILTINS ? builtins[i].name : NULL;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, 0, fmt, ap);
    va_end(ap);
}

/* Reads a template file (at most JINJA_SOURCE_MAX bytes) into a new string. */
static int read_template_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, errlen, "cannot read the chat template file %s: %s", path, strerror(errno));
        return ERR_IO;
    }
    char *buf = malloc(JINJA_SOURCE_MAX + 1);
    size_t n = buf ? fread(buf, 1, JINJA_SOURCE_MAX + 1, f) : 0;
    bool failed = ferror(f);
    fclose(f);
    if (!buf) {
        seterr(err, errlen, "out of memory");
        return ERR_NOMEM;
    }
    if (failed || n > JINJA_SOURCE_MAX) {
        free(buf);
        seterr(err, errlen,
               failed ? "cannot read the chat template file %s"
                      : "the chat template file %s is over 1 MiB",
               path);
        return failed ? ERR_IO : ERR_TOO_BIG;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* The source an override names, and where it comes from. */
static int override_source(const char *ov, const char **src, size_t *len, char **owned,
                           enum chat_template_origin *origin, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (!strcmp(ov, builtins[i].name)) {
            *src = builtins[i].source;
            *len = strlen(*src);
            *origin = CHAT_TEMPLATE_FROM_BUILTIN;
            return 0;
        }
    if (strstr(ov, "{{") || strstr(ov, "{%")) {
        *src = ov;
        *len = strlen(ov);
        *origin = CHAT_TEMPLATE_FROM_INLINE;
        return 0;
    }
    bool looks_like_path = strchr(ov, '/') || strchr(ov, '.');
    if (!looks_like_path) {
        char names[256] = "";
        size_t o = 0;
        for (size_t i = 0; i < N_BUILTINS && o < sizeof(names); i++)
            o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s", i ? ", " : "",
                                  builtins[i].name);
        seterr(err, errlen,
               "unknown chat template '%.64s': not a built-in (%s), Jinja2 text or a file", ov,
               names);
        return ERR_NOT_FOUND;
    }
    int rc = read_template_file(ov, owned, len, err, errlen);
    if (rc) return rc;
    *src = *owned;
    *origin = CHAT_TEMPLATE_FROM_FILE;
    return 0;
}

/* chat_template_tool_format of template text src[0..len). */
static enum api_tool_format chat_template_find_tool_format(const char *src, size_t len)
{
#define HAS(lit) (memmem(src, len, lit, sizeof(lit) - 1) != NULL)
    enum api_tool_format f =
        HAS("[TOOL_CALLS]")     ? (HAS("[ARGS]") ? API_TOOL_FORMAT_OTHER : API_TOOL_FORMAT_MISTRAL)
        : HAS("<tool_call>")    ? (HAS("<function=") || HAS("<arg_key>") ? API_TOOL_FORMAT_OTHER
                                                                         : API_TOOL_FORMAT_HERMES)
        : HAS("<|python_tag|>") ? API_TOOL_FORMAT_LLAMA3
                                : API_TOOL_FORMAT_JSON;
#undef HAS
    return f;
}

int chat_template_new(const struct chat_template_config *cfg, struct chat_template **out, char *err,
                      size_t errlen)
{
    const char *src;
    size_t len;
    char *owned = NULL;
    enum chat_template_origin origin;
    int rc;
    if (cfg->override && *cfg->override) {
        if ((rc = override_source(cfg->override, &src, &len, &owned, &origin, err, errlen)))
            return rc;
    } else if (cfg->model_template && *cfg->model_template) {
        src = cfg->model_template;
        len = strlen(src);
        origin = CHAT_TEMPLATE_FROM_MODEL;
    } else {
        src = builtins[0].source; /* chatml */
        len = strlen(src);
        origin = CHAT_TEMPLATE_FROM_FALLBACK;
    }
    rc = ERR_NOMEM;
    struct chat_template *ct = calloc(1, sizeof(*ct));
    if (!ct) goto nomem;
    ct->origin = origin;
    ct->add_bos = cfg->add_bos && cfg->bos_token && *cfg->bos_token;
    ct->add_eos = cfg->add_eos && cfg->eos_token && *cfg->eos_token;
    const char *describe = origin == CHAT_TEMPLATE_FROM_MODEL      ? "model"
                           : origin == CHAT_TEMPLATE_FROM_INLINE   ? "inline"
                           : origin == CHAT_TEMPLATE_FROM_FALLBACK ? "chatml"
                                                                   : cfg->override;
    if (!(ct->describe = strdup(describe))) goto nomem;
    if (!(ct->source = strndup(src, len))) goto nomem;
    if (cfg->bos_token && !(ct->bos = strdup(cfg->bos_token))) goto nomem;
    if (cfg->eos_token && !(ct->eos = strdup(cfg->eos_token))) goto nomem;
    char jerr[256];
    rc = jinja_parse(src, len, &ct->t, jerr, sizeof(jerr));
    if (rc) {
        seterr(err, errlen, "the chat template (%s) cannot be used: %s", ct->describe, jerr);
        goto out;
    }
    ct->content_parts = jinja_loops_over_content(ct->t);
    for (size_t i = 0; i + 7 <= len && !ct->thinks; i++)
        ct->thinks = !memcmp(src + i, "<think>", 7);
    ct->tool_format = chat_template_find_tool_format(src, len);
    *out = ct;
    ct = NULL;
    rc = 0;
    goto out;
nomem:
    seterr(err, errlen, "out of memory");
out:
    chat_template_free(ct);
    free(owned);
    return rc;
}

void chat_template_free(struct chat_template *ct)
{
    if (!ct) return;
    jinja_free(ct->t);
    free(ct->describe);
    free(ct->source);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

bool chat_template_thinks(const struct chat_template *ct)
{
    return ct->thinks;
}

enum api_tool_format chat_template_tool_format(const struct chat_template *ct)
{
    return ct->tool_format;
}

enum chat_template_origin chat_template_origin(const struct chat_template *ct)
{
    return ct->origin;
}

const char *chat_template_describe(const struct chat_template *ct)
{
    return ct->describe;
}

const char *chat_template_source(const struct chat_template *ct)
{
    return ct->source;
}

/* Bytes of text in a JSON value, which sizes the render's memory budget. */
static size_t json_text_bytes(const json_t *j, int depth)
{
    size_t n = 16;
    if (depth > 64) return n;
    if (json_is_string(j)) return n + json_string_length(j);
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) n += json_text_bytes(v, depth + 1);
    } else if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) n += strlen(k) + json_text_bytes(v, depth + 1);
    }
    return n;
}

/* A message whose content is a list of text parts, with the parts joined by "\n" (new), or
 * NULL with *rc set when the list holds something that is not text. */
static json_t *join_parts(const json_t *m, size_t mi, int *rc, char *err, size_t errlen)
{
    const json_t *parts = json_object_get(m, "content");
    struct buf b;
    buf_init(&b, 0);
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p)
    {
        const json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text)) {
            seterr(err, errlen, "messages[%zu].content[%zu]: only text parts are supported", mi, i);
            *rc = ERR_INVAL;
            buf_fini(&b);
            return NULL;
        }
        if ((b.len && buf_putc(&b, '\n')) ||
            buf_append(&b, json_string_value(text), json_string_length(text))) {
            *rc = ERR_NOMEM;
            buf_fini(&b);
            return NULL;
        }
    }
    json_t *copy = json_copy((json_t *)m);
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    buf_fini(&b);
    if (!copy || !s || json_object_set_new(copy, "content", s)) {
        json_decref(copy);
        *rc = ERR_NOMEM;
        return NULL;
    }
    return copy;
}

/* A copy of assistant message m with its tool calls' JSON-string arguments parsed into values
 * (new), NULL when it has none to parse, or NULL with *rc set when one is not JSON. OpenAI clients
 * send arguments as a JSON string; templates expect the object (transformers' convention), and
 * vLLM parses them the same way before rendering. */
static json_t *parse_tool_arguments(const json_t *m, size_t mi, int *rc, char *err, size_t errlen)
{
    const json_t *calls = json_object_get(m, "tool_calls");
    if (!json_is_array(calls)) return NULL;
    bool any = false;
    size_t i;
    json_t *tc;
    json_array_foreach(calls, i, tc) any |=
        json_is_string(json_object_get(json_object_get(tc, "function"), "arguments"));
    if (!any) return NULL;
    json_t *copy = json_deep_copy(m);
    if (!copy) {
        *rc = ERR_NOMEM;
        return NULL;
    }
    json_array_foreach(json_object_get(copy, "tool_calls"), i, tc)
    {
        json_t *fn = json_object_get(tc, "function");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args)) continue;
        json_error_t je;
        json_t *v = json_loadb(json_string_value(args), json_string_length(args),
                               JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (!v) {
            seterr(err, errlen, "messages[%zu].tool_calls[%zu].function.arguments is not JSON: %s",
                   mi, i, je.text);
            json_decref(copy);
            *rc = ERR_INVAL;
            return NULL;
        }
        if (json_object_set_new(fn, "arguments", v)) {
            json_decref(copy);
            *rc = ERR_NOMEM;
            return NULL;
        }
    }
    return copy;
}

/* The messages as the template should see them: content lists joined unless it iterates them,
 * tool-call arguments parsed. */
static int normalize_messages(const struct chat_template *ct, const json_t *messages, json_t **out,
                              char *err, size_t errlen)
{
    if (!json_is_array(messages)) {
        seterr(err, errlen, "messages must be an array");
        return ERR_INVAL;
    }
    json_t *arr = json_array();
    if (!arr) return ERR_NOMEM;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        int rc = 0;
        json_t *use = json_incref(m);
        if (!ct->content_parts && json_is_object(m) &&
            json_is_array(json_object_get(m, "content"))) {
            json_decref(use);
            if (!(use = join_parts(m, i, &rc, err, errlen))) {
                json_decref(arr);
                if (rc == ERR_NOMEM) seterr(err, errlen, "out of memory");
                return rc;
            }
        }
        json_t *parsed =
            json_is_object(use) ? parse_tool_arguments(use, i, &rc, err, errlen) : NULL;
        if (rc) {
            json_decref(use);
            json_decref(arr);
            if (rc == ERR_NOMEM) seterr(err, errlen, "out of memory");
            return rc;
        }
        if (parsed) {
            json_decref(use);
            use = parsed;
        }
        if (json_array_append_new(arr, use)) {
            json_decref(arr);
            return ERR_NOMEM;
        }
    }
    *out = arr;
    return 0;
}

static bool starts_with(const char *s, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

int chat_template_apply(const struct chat_template *ct, const struct chat_template_input *in,
                        struct buf *out, char *err, size_t errlen)
{
    static const char *const reserved[] = {"messages", "tools", "documents",
                                           "add_generation_prompt"};
    json_t *vars = json_object(), *messages = NULL;
    int rc = ERR_NOMEM;
    if (!vars) goto nomem;
    if ((rc = normalize_messages(ct, in->messages, &messages, err, errlen))) goto out;
    rc = ERR_NOMEM;
    if (json_object_set_new(vars, "messages", messages)) goto nomem;
    if (json_object_set_new(vars, "tools",
                            in->tools ? json_incref((json_t *)in->tools) : json_null()) ||
        json_object_set_new(vars, "documents", json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(in->add_generation_prompt)))
        goto nomem;
    if ((ct->bos && json_object_set_new(vars, "bos_token", json_string(ct->bos))) ||
        (ct->eos && json_object_set_new(vars, "eos_token", json_string(ct->eos))))
        goto nomem;
    if (in->kwargs) {
        if (!json_is_object(in->kwargs)) {
            seterr(err, errlen, "chat_template_kwargs must be an object");
            rc = ERR_INVAL;
            goto out;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)in->kwargs, k, v)
        {
            for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
                if (!strcmp(k, reserved[i])) {
                    seterr(err, errlen, "chat_template_kwargs may not set '%s'", k);
                    rc = ERR_INVAL;
                    goto out;
                }
            if (json_object_set(vars, k, v)) goto nomem;
        }
    }
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    lim.max_memory =
        CHAT_TEMPLATE_BASE_MEMORY +
        16 * (json_text_bytes(in->messages, 0) + (in->tools ? json_text_bytes(in->tools, 0) : 0));
    size_t before = out->len;
    if ((rc = jinja_render(ct->t, vars, time(NULL), &lim, out, err, errlen))) goto out;
    /* exactly one BOS: the tokenizer's (llama.cpp's server strips the template's) */
    char *text = out->data ? out->data + before : NULL;
    size_t n = out->len - before;
    if (text && ct->add_bos && starts_with(text, n, ct->bos)) {
        size_t k = strlen(ct->bos);
        memmove(text, text + k, n - k + 1);
        out->len -= k;
        n -= k;
    }
    if (text && ct->add_eos && n >= strlen(ct->eos) &&
        !memcmp(text + n - strlen(ct->eos), ct->eos, strlen(ct->eos))) {
        out->len -= strlen(ct->eos);
        out->data[out->len] = '\0';
    }
    rc = 0;
    goto out;
nomem:
    rc = ERR_NOMEM;
    seterr(err, errlen, "out of memory");
out:
    json_decref(vars);
    return rc;
}

int chat_template_render(const struct chat_template *ct, const struct api_message *msgs, size_t n,
                         bool add_generation_prompt, struct buf *out, char *err, size_t errlen)
{
    if (n == 0 || !msgs) {
        seterr(err, errlen, "no messages");
        return ERR_INVAL;
    }
    json_t *arr = json_array();
    int rc = arr ? 0 : ERR_NOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *m = json_pack("{s:s,s:s}", "role", api_role_name(msgs[i].role), "content",
                              msgs[i].content ? msgs[i].content : "");
        if (!m || json_array_append_new(arr, m)) rc = ERR_NOMEM;
    }
    if (rc) {
        json_decref(arr);
        seterr(err, errlen, "out of memory");
        return rc;
    }
    struct chat_template_input in = {.messages = arr,
                                     .add_generation_prompt = add_generation_prompt};
    rc = chat_template_apply(ct, &in, out, err, errlen);
    json_decref(arr);
    return rc;
}
