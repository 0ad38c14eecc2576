/* Chat messages -> prompt text. The model's own `tokenizer.chat_template` (a Jinja2 template) is
 * rendered by the interpreter in engine/api/jinja.h exactly as Hugging Face transformers'
 * apply_chat_template renders it (variables messages, tools, documents, add_generation_prompt,
 * bos_token, eos_token and the request's chat_template_kwargs). `--chat-template` can replace it
 * with a built-in template by name (chatml, llama3, ...: see chat_template_builtin_name), a Jinja2
 * template given inline, or a template file; a model without a template gets chatml, which the
 * caller logs. Everything is checked when the template is built, at start-up, so a broken or
 * unsupported template fails there, not on the first request.
 *
 * BOS/EOS as llama.cpp's server handles them: when the tokenizer adds BOS itself, a BOS the
 * template renders at the start is removed from the text (likewise EOS at the end), so the prompt
 * has exactly one. A built template is immutable: any thread may render with it concurrently. */
#ifndef CINFER_ENGINE_CHAT_TEMPLATE_H
#define CINFER_ENGINE_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "engine/api/api.h"

struct chat_template;

struct chat_template_config {
    const char *model_template; /* the GGUF's tokenizer.chat_template; NULL or "" when absent */
    const char *override;       /* --chat-template (a built-in name, Jinja2 text or a file); NULL */
    const char *bos_token;      /* the vocabulary's BOS / EOS texts ("<s>"); NULL when none */
    const char *eos_token;
    bool add_bos; /* the tokenizer prepends BOS / appends EOS to the prompt itself */
    bool add_eos;
};

/* Where the template came from, for the start-up log. */
enum chat_template_origin {
    CHAT_TEMPLATE_FROM_MODEL = 0, /* tokenizer.chat_template */
    CHAT_TEMPLATE_FROM_BUILTIN,   /* --chat-template NAME */
    CHAT_TEMPLATE_FROM_INLINE,    /* --chat-template '{% for ... %}' */
    CHAT_TEMPLATE_FROM_FILE,      /* --chat-template path/to/template.jinja */
    CHAT_TEMPLATE_FROM_FALLBACK,  /* the model has none: chatml */
};

/* Builds the template `cfg` (borrowed; strings are copied) asks for. The override, when given, is
 * a built-in name, else Jinja2 text when it contains "{{" or "{%", else a file to read. On success
 * *out is new (chat_template_free). Errors, with a message in `err`: ERR_NOT_FOUND (an override
 * that is neither a built-in name nor a readable file: the message lists the names), ERR_PARSE /
 * ERR_UNSUPPORTED (the template is malformed or uses something the interpreter does not
 * support, with the line), ERR_TOO_BIG, ERR_IO, ERR_NOMEM. Any thread. */
int chat_template_new(const struct chat_template_config *cfg, struct chat_template **out, char *err,
                      size_t errlen);
void chat_template_free(struct chat_template *ct); /* NULL-safe */

enum chat_template_origin chat_template_origin(const struct chat_template *ct);
/* The template's text mentions "<think>": a reasoning model whose answers open with a
 * <think>...</think> block (Qwen3, QwQ, DeepSeek-R1 distills). Any thread. */
bool chat_template_thinks(const struct chat_template *ct);
/* The tool-call form the template's text names: "[TOOL_CALLS]" Mistral (OTHER with "[ARGS]"),
 * else "<tool_call>" Hermes (OTHER with "<function=" or "<arg_key>": XML arguments), else
 * "<|python_tag|>" Llama 3, else bare JSON. Any thread. */
enum api_tool_format chat_template_tool_format(const struct chat_template *ct);
/* The built-in's name ("chatml"), the file's path, or "model" / "inline"; borrowed. */
const char *chat_template_describe(const struct chat_template *ct);
/* The Jinja2 text in use, whatever its origin (the built-in's source, the file's contents), so
 * another process can build the same template from it; borrowed. */
const char *chat_template_source(const struct chat_template *ct);

/* Built-in templates by name (chatml, llama2, llama2-sys, ..., as llama.cpp names the families);
 * NULL past the last. Static strings. */
const char *chat_template_builtin_name(size_t i);

/* One chat request's inputs, all borrowed JSON (OpenAI's shapes): `messages` an array of
 * {role, content, ...} objects (content a string, null, or a list of {"type":"text","text":...}
 * parts), `tools` an array or NULL, `kwargs` an object of extra template variables
 * (chat_template_kwargs, e.g. {"enable_thinking": false}) or NULL. */
struct chat_template_input {
    const json_t *messages;
    const json_t *tools;
    const json_t *kwargs;
    bool add_generation_prompt;
};

/* Appends the rendered prompt to `out` (borrowed; its max bounds it). Content given as a list of
 * text parts is joined with "\n" unless the template iterates over content itself, and tool
 * calls' arguments sent as a JSON string are parsed into the object templates expect (both as
 * vLLM prepares messages). Returns 0, or with a message in `err`: ERR_INVAL (the template raised an error, e.g.
 * "Conversation roles must alternate", or failed on these messages; tool-call arguments that
 * are not JSON; kwargs that would replace
 * messages, tools, documents or add_generation_prompt), ERR_TOO_BIG (output or the render's
 * limits), ERR_NOMEM. On failure `out` keeps its previous length. Any thread. */
int chat_template_apply(const struct chat_template *ct, const struct chat_template_input *in,
                        struct buf *out, char *err, size_t errlen);

/* chat_template_apply for n parsed messages (borrowed): role and content as api_request
 * produced them. Same results, plus ERR_INVAL for n == 0. */
int chat_template_render(const struct chat_template *ct, const struct api_message *msgs, size_t n,
                         bool add_generation_prompt, struct buf *out, char *err, size_t errlen);

#endif
