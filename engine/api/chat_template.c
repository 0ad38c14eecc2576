/* Chat template recognition and rendering (see chat_template.h). The detection order and the
 * rendered strings follow llama.cpp's llm_chat_detect_template / llm_chat_apply_template, so a
 * prompt here tokenizes the same as with llama.cpp; one deliberate addition: HuggingFaceH4's
 * zephyr template (which ends turns with eos_token "</s>") is recognised as zephyr. */
#include "engine/api/chat_template.h"

#include "common/err.h"

#include <string.h>

static const char *const chat_template_names[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_CHATML] = "chatml",
    [CHAT_TEMPLATE_LLAMA2] = "llama2",
    [CHAT_TEMPLATE_LLAMA2_SYS] = "llama2-sys",
    [CHAT_TEMPLATE_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_TEMPLATE_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_TEMPLATE_MISTRAL_V1] = "mistral-v1",
    [CHAT_TEMPLATE_MISTRAL_V3] = "mistral-v3",
    [CHAT_TEMPLATE_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TEMPLATE_MISTRAL_V7] = "mistral-v7",
    [CHAT_TEMPLATE_LLAMA3] = "llama3",
    [CHAT_TEMPLATE_ZEPHYR] = "zephyr",
    [CHAT_TEMPLATE_ZEPHYR_EOS] = "zephyr-eos",
};

const char *chat_template_name(enum chat_template_kind k)
{
    return (unsigned)k < CHAT_TEMPLATE_COUNT ? chat_template_names[k] : "unknown";
}

static bool has(const char *tmpl, const char *needle)
{
    return strstr(tmpl, needle) != NULL;
}

/* The [INST] families: Mistral's official v1/v3/v7 templates, then llama2 and its variants. */
static enum chat_template_kind chat_template_detect_inst(const char *t)
{
    if (has(t, "[SYSTEM_PROMPT]")) return CHAT_TEMPLATE_MISTRAL_V7;
    if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
        if (has(t, " [INST]")) return CHAT_TEMPLATE_MISTRAL_V1;
        if (has(t, "\"[INST]\"")) return CHAT_TEMPLATE_MISTRAL_V3_TEKKEN;
        return CHAT_TEMPLATE_MISTRAL_V3;
    }
    if (has(t, "content.strip()")) return CHAT_TEMPLATE_LLAMA2_SYS_STRIP;
    if (has(t, "bos_token + '[INST]")) return CHAT_TEMPLATE_LLAMA2_SYS_BOS;
    if (has(t, "<<SYS>>")) return CHAT_TEMPLATE_LLAMA2_SYS;
    return CHAT_TEMPLATE_LLAMA2;
}

enum chat_template_kind chat_template_detect(const char *t, bool *known)
{
    *known = true;
    if (t && *t) {
        for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++)
            if (strcmp(t, chat_template_names[k]) == 0) return (enum chat_template_kind)k;
        if (has(t, "<|im_start|>") && !has(t, "<|im_sep|>")) return CHAT_TEMPLATE_CHATML;
        if (strncmp(t, "mistral", 7) == 0 || has(t, "[INST]")) return chat_template_detect_inst(t);
        bool phi3 = has(t, "<|assistant|>") && has(t, "<|end|>");
        if (!phi3 && has(t, "<|user|>") && has(t, "<|endoftext|>")) return CHAT_TEMPLATE_ZEPHYR;
        if (!phi3 && has(t, "<|user|>") && has(t, "<|assistant|>") && has(t, "eos_token"))
            return CHAT_TEMPLATE_ZEPHYR_EOS;
        if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
            return CHAT_TEMPLATE_LLAMA3;
    }
    *known = false;
    return CHAT_TEMPLATE_CHATML;
}

/* A borrowed view of a message's content, optionally trimmed of C isspace() bytes as llama.cpp's
 * trim() does. */
struct chat_text {
    const char *p;
    size_t len;
};

static bool chat_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static struct chat_text chat_content(const struct api_message *m, bool trim)
{
    struct chat_text t = {m->content ? m->content : "", m->content ? strlen(m->content) : 0};
    if (!trim) return t;
    while (t.len && chat_is_space(t.p[0])) t.p++, t.len--;
    while (t.len && chat_is_space(t.p[t.len - 1])) t.len--;
    return t;
}

/* Appends the pieces in order; the first failure sticks in *rc so callers check once. */
static void put(struct buf *b, int *rc, const char *s)
{
    if (*rc == 0) *rc = buf_puts(b, s);
}

static void put_text(struct buf *b, int *rc, struct chat_text t)
{
    if (*rc == 0) *rc = buf_append(b, t.p, t.len);
}

/* Generic "<open>role<mid>content<close>" families: ChatML, Llama 3, Zephyr. */
static int chat_render_headers(enum chat_template_kind k, const struct api_message *msgs, size_t n,
                               bool add_gen, struct buf *out)
{
    const char *open = "<|im_start|>", *mid = "\n", *close = "<|im_end|>\n";
    bool trim = false;
    if (k == CHAT_TEMPLATE_LLAMA3) {
        open = "<|start_header_id|>", mid = "<|end_header_id|>\n\n", close = "<|eot_id|>";
        trim = true;
    } else if (k == CHAT_TEMPLATE_ZEPHYR || k == CHAT_TEMPLATE_ZEPHYR_EOS) {
        open = "<|", mid = "|>\n", close = k == CHAT_TEMPLATE_ZEPHYR ? "<|endoftext|>\n" : "</s>\n";
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        put(out, &rc, open);
        put(out, &rc, api_role_name(msgs[i].role));
        put(out, &rc, mid);
        put_text(out, &rc, chat_content(&msgs[i], trim));
        put(out, &rc, close);
    }
    if (add_gen) {
        put(out, &rc, open);
        put(out, &rc, "assistant");
        put(out, &rc, mid);
    }
    return rc;
}

/* Llama 2 and its variants: the whole conversation inside [INST] turns; no generation prompt
 * (every user turn already ends with [/INST]). Tool messages render as assistant turns. */
static int chat_render_llama2(enum chat_template_kind k, const struct api_message *msgs, size_t n,
                              struct buf *out)
{
    bool sys = k != CHAT_TEMPLATE_LLAMA2;
    bool bos = k == CHAT_TEMPLATE_LLAMA2_SYS_BOS;
    bool strip = k == CHAT_TEMPLATE_LLAMA2_SYS_STRIP;
    bool in_turn =
        true; /* the opening [INST] is written up front (no BOS: the tokenizer adds it) */
    int rc = 0;
    put(out, &rc, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        struct chat_text c = chat_content(&msgs[i], strip);
        if (!in_turn) {
            in_turn = true;
            put(out, &rc, bos ? "<s>[INST] " : "[INST] ");
        }
        if (msgs[i].role == API_ROLE_SYSTEM) {
            put(out, &rc, sys ? "<<SYS>>\n" : "");
            put_text(out, &rc, c);
            put(out, &rc, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (msgs[i].role == API_ROLE_USER) {
            put_text(out, &rc, c);
            put(out, &rc, " [/INST]");
        } else {
            put_text(out, &rc, c);
            put(out, &rc, "</s>");
            in_turn = false;
        }
    }
    return rc;
}

/* Mistral's official v1 / v3 / v3-tekken templates: the system text opens the next [INST]. */
static int chat_render_mistral(enum chat_template_kind k, const struct api_message *msgs, size_t n,
                               struct buf *out)
{
    const char *lead = k == CHAT_TEMPLATE_MISTRAL_V1 ? " " : "";
    const char *trail = k == CHAT_TEMPLATE_MISTRAL_V3_TEKKEN ? "" : " ";
    bool trim_reply = k == CHAT_TEMPLATE_MISTRAL_V3;
    bool in_turn = false;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            put(out, &rc, lead);
            put(out, &rc, "[INST]");
            put(out, &rc, trail);
            in_turn = true;
        }
        if (msgs[i].role == API_ROLE_SYSTEM) {
            put_text(out, &rc, chat_content(&msgs[i], false));
            put(out, &rc, "\n\n");
        } else if (msgs[i].role == API_ROLE_USER) {
            put_text(out, &rc, chat_content(&msgs[i], false));
            put(out, &rc, lead);
            put(out, &rc, "[/INST]");
        } else {
            put(out, &rc, trail);
            put_text(out, &rc, chat_content(&msgs[i], trim_reply));
            put(out, &rc, "</s>");
            in_turn = false;
        }
    }
    return rc;
}

static int chat_render_mistral_v7(const struct api_message *msgs, size_t n, struct buf *out)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct chat_text c = chat_content(&msgs[i], false);
        if (msgs[i].role == API_ROLE_SYSTEM) {
            put(out, &rc, "[SYSTEM_PROMPT] ");
            put_text(out, &rc, c);
            put(out, &rc, "[/SYSTEM_PROMPT]");
        } else if (msgs[i].role == API_ROLE_USER) {
            put(out, &rc, "[INST] ");
            put_text(out, &rc, c);
            put(out, &rc, "[/INST]");
        } else {
            put(out, &rc, " ");
            put_text(out, &rc, c);
            put(out, &rc, "</s>");
        }
    }
    return rc;
}

int chat_template_render(enum chat_template_kind k, const struct api_message *msgs, size_t n,
                         bool add_generation_prompt, struct buf *out)
{
    if (n == 0 || !msgs || (unsigned)k >= CHAT_TEMPLATE_COUNT) return ERR_INVAL;
    size_t before = out->len;
    int rc;
    switch (k) {
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_LLAMA2_SYS:
    case CHAT_TEMPLATE_LLAMA2_SYS_BOS:
    case CHAT_TEMPLATE_LLAMA2_SYS_STRIP: rc = chat_render_llama2(k, msgs, n, out); break;
    case CHAT_TEMPLATE_MISTRAL_V1:
    case CHAT_TEMPLATE_MISTRAL_V3:
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN: rc = chat_render_mistral(k, msgs, n, out); break;
    case CHAT_TEMPLATE_MISTRAL_V7: rc = chat_render_mistral_v7(msgs, n, out); break;
    default: rc = chat_render_headers(k, msgs, n, add_generation_prompt, out); break;
    }
    if (rc && out->data) { /* restore the caller's buffer */
        out->len = before;
        out->data[before] = '\0';
    }
    return rc;
}
