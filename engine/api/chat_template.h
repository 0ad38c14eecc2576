/* Chat messages -> prompt text. There is no Jinja interpreter here: the model's
 * `tokenizer.chat_template` is RECOGNISED by distinctive substrings (the approach of llama.cpp's
 * llama_chat_detect_template) and rendered by a hand-written formatter per family, producing the
 * same strings llama.cpp does. An unknown or missing template falls back to ChatML and says so.
 * The output never contains a BOS token: the tokenizer adds it. Pure; any thread. */
#ifndef CINFER_ENGINE_CHAT_TEMPLATE_H
#define CINFER_ENGINE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "engine/api/api.h"

enum chat_template_kind {
    CHAT_TEMPLATE_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (Qwen, OpenHermes, ...) */
    CHAT_TEMPLATE_LLAMA2,     /* [INST] ... [/INST]; system as plain text + "\n" (Mistral v0.2) */
    CHAT_TEMPLATE_LLAMA2_SYS, /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_TEMPLATE_LLAMA2_SYS_BOS,    /* as LLAMA2_SYS, "<s>" before each later [INST] */
    CHAT_TEMPLATE_LLAMA2_SYS_STRIP,  /* as LLAMA2_SYS, contents trimmed */
    CHAT_TEMPLATE_MISTRAL_V1,        /* " [INST] sys\n\nuser [/INST] reply</s>" */
    CHAT_TEMPLATE_MISTRAL_V3,        /* "[INST] sys\n\nuser[/INST] reply</s>", replies trimmed */
    CHAT_TEMPLATE_MISTRAL_V3_TEKKEN, /* "[INST]sys\n\nuser[/INST]reply</s>" */
    CHAT_TEMPLATE_MISTRAL_V7,        /* [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] */
    CHAT_TEMPLATE_LLAMA3,            /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_TEMPLATE_ZEPHYR,            /* <|role|>\n...<|endoftext|>\n (StableLM 2 Zephyr) */
    CHAT_TEMPLATE_ZEPHYR_EOS,        /* <|role|>\n...</s>\n (HuggingFaceH4/zephyr: eos_token) */
    CHAT_TEMPLATE_COUNT
};

/* Recognises `tmpl` (borrowed; NULL or "" means the GGUF has none), which may also be a family
 * name from chat_template_name ("llama3"), e.g. from a command-line override. Writes true to *known when a
 * family matched; false means the caller got CHATML as a fallback and should log a warning. */
enum chat_template_kind chat_template_detect(const char *tmpl, bool *known);

/* "chatml", "llama2", "llama2-sys", ..., as llama.cpp names them; static. */
const char *chat_template_name(enum chat_template_kind k);

/* Appends the prompt for n messages (borrowed) to `out` (borrowed; its max bounds the result).
 * add_generation_prompt appends the assistant header where the family has one (the [INST]
 * families end every user turn with [/INST] already). Returns 0, ERR_INVAL (n == 0 or unknown
 * kind), ERR_TOO_BIG or ERR_NOMEM; on failure `out` keeps its previous length. */
int chat_template_render(enum chat_template_kind k, const struct api_message *msgs, size_t n,
                         bool add_generation_prompt, struct buf *out);

#endif
