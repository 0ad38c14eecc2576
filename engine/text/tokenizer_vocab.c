/* Tokenizer vocabulary: builds a struct tokenizer from GGUF tokenizer.ggml.* metadata (tokens, scores,
 * token types, merges, special ids and flags), with hash maps for text -> id and merge -> rank, and
 * frees it. Defaults follow llama.cpp's llama_vocab::load so a file converted for
 * llama.cpp behaves the same here. Encoding lives in tokenizer.c and friends. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"
#include "engine/gguf/gguf.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL  "tokenizer.ggml.model"
#define KEY_PRE    "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES  "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* Texts llama.cpp treats as end-of-turn markers (llama_vocab::load's EOT / EOG detection). */
static const char *const eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", /* DeepSeek */
};
static const char *const eog_extra_texts[] = {"<|eom_id|>"};

/* tokenizer.ggml.pre names -> pre-tokenizer and the settings llama.cpp ties to the name
 * (llama_vocab::impl::load, llama.cpp as vendored by llama-cpp-python 0.3.36), for the names whose
 * regexes tokenizer_pretok.c implements. Any other name is refused, as llama.cpp refuses it:
 * guessing a pre-tokenizer would give different tokens than the model was trained on. */
#define PRE_IGNORE_MERGES 1 /* a word that is a token is taken whole, before any merge */
#define PRE_ADD_BOS       2 /* BOS by default (the file's add_bos_token still decides) */
#define PRE_NO_BOS        4 /* the model has no BOS (chatglm) */

static const struct {
    const char *name;
    enum tokenizer_pre pre;
    uint8_t flags;
} pre_names[] = {
    {"default", TOKENIZER_PRE_DEFAULT, 0},
    {"llama3", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-v3", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-bpe", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon3", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon-h1", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"pixtral", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"midm-2.0", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"lfm2", TOKENIZER_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"dbrx", TOKENIZER_PRE_LLAMA3, 0}, /* llama3's regex, not its settings */
    {"smaug-bpe", TOKENIZER_PRE_LLAMA3, 0},
    {"chatglm-bpe", TOKENIZER_PRE_LLAMA3, PRE_NO_BOS},
    {"glm4", TOKENIZER_PRE_LLAMA3, PRE_NO_BOS | PRE_IGNORE_MERGES},
    {"deepseek-llm", TOKENIZER_PRE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", TOKENIZER_PRE_DEEPSEEK_CODER, 0},
    {"falcon", TOKENIZER_PRE_FALCON, 0},
    {"mpt", TOKENIZER_PRE_GPT2, 0},
    {"olmo", TOKENIZER_PRE_GPT2, 0},
    {"gpt-2", TOKENIZER_PRE_GPT2, 0},
    {"phi-2", TOKENIZER_PRE_GPT2, 0},
    {"jais", TOKENIZER_PRE_GPT2, 0},
    {"exaone4", TOKENIZER_PRE_GPT2, 0},
    {"trillion", TOKENIZER_PRE_GPT2, 0},
    {"granite-docling", TOKENIZER_PRE_GPT2, 0},
    {"gigachat", TOKENIZER_PRE_GPT2, 0},
    {"a.x-4.0", TOKENIZER_PRE_GPT2, 0},
    {"mellum", TOKENIZER_PRE_GPT2, 0},
    {"starcoder", TOKENIZER_PRE_STARCODER, 0},
    {"refact", TOKENIZER_PRE_STARCODER, 0},
    {"command-r", TOKENIZER_PRE_STARCODER, 0},
    {"smollm", TOKENIZER_PRE_STARCODER, 0},
    {"codeshell", TOKENIZER_PRE_STARCODER, 0},
    {"exaone", TOKENIZER_PRE_STARCODER, 0},
    {"minerva-7b", TOKENIZER_PRE_STARCODER, 0},
    {"mellum2", TOKENIZER_PRE_STARCODER, 0},
    {"qwen2", TOKENIZER_PRE_QWEN2, 0},
    {"deepseek-r1-qwen", TOKENIZER_PRE_QWEN2, 0},
    {"stablelm2", TOKENIZER_PRE_QWEN2, 0},
    {"megrez", TOKENIZER_PRE_QWEN2, 0},
    {"kormo", TOKENIZER_PRE_QWEN2, 0},
    {"f2llmv2", TOKENIZER_PRE_QWEN2, 0},
    {"hunyuan", TOKENIZER_PRE_QWEN2, 0},
    {"solar-open", TOKENIZER_PRE_QWEN2, 0},
    {"qwen35", TOKENIZER_PRE_QWEN35, 0},
    {"gpt-4o", TOKENIZER_PRE_GPT4O, 0},
    {"llama4", TOKENIZER_PRE_GPT4O, 0},
    {"minimax-m2", TOKENIZER_PRE_GPT4O, 0},
    {"kanana2", TOKENIZER_PRE_GPT4O, 0},
    {"tekken", TOKENIZER_PRE_TEKKEN, PRE_IGNORE_MERGES | PRE_ADD_BOS},
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(msg, sizeof(msg), 0, fmt, ap);
    va_end(ap);
    err_fmt(err, errlen, 0, "tokenizer: %s", msg);
}

static size_t table_size(size_t n)
{
    size_t sz = 16;
    while (sz < 2 * n) sz *= 2;
    return sz;
}

static int load_tokens(struct tokenizer *t, const struct gguf *g, char *err, size_t errlen)
{
    const struct gguf_array *toks, *scores = NULL, *types = NULL;
    int rc = gguf_get_arr(g, KEY_TOKENS, &toks);
    if (rc == ERR_NOT_FOUND) {
        seterr(err, errlen, "missing %s", KEY_TOKENS);
        return rc;
    }
    if (rc || toks->type != GGUF_STRING) {
        seterr(err, errlen, "%s is not an array of strings", KEY_TOKENS);
        return ERR_INVAL;
    }
    if (toks->n == 0 || toks->n > INT32_MAX) {
        seterr(err, errlen, "%s has %llu entries", KEY_TOKENS, (unsigned long long)toks->n);
        return ERR_INVAL;
    }
    size_t n = (size_t)toks->n;
    rc = gguf_get_arr(g, KEY_SCORES, &scores);
    if (rc == ERR_NOT_FOUND) {
        scores = NULL;
    } else if (rc || (scores->type != GGUF_FLOAT32 && scores->type != GGUF_FLOAT64)) {
        seterr(err, errlen, "%s is not an array of floats", KEY_SCORES);
        return ERR_INVAL;
    } else if (scores->n != n) {
        seterr(err, errlen, "%s has %llu entries for %zu tokens", KEY_SCORES,
               (unsigned long long)scores->n, n);
        return ERR_INVAL;
    }
    rc = gguf_get_arr(g, KEY_TYPES, &types);
    if (rc == ERR_NOT_FOUND) {
        types = NULL;
    } else if (rc || types->type == GGUF_STRING || types->type == GGUF_ARRAY ||
               types->type == GGUF_FLOAT32 || types->type == GGUF_FLOAT64) {
        seterr(err, errlen, "%s is not an array of integers", KEY_TYPES);
        return ERR_INVAL;
    } else if (types->n != n) {
        seterr(err, errlen, "%s has %llu entries for %zu tokens", KEY_TYPES,
               (unsigned long long)types->n, n);
        return ERR_INVAL;
    }

    t->n_vocab = (int32_t)n;
    t->tokens = calloc(n, sizeof(*t->tokens));
    t->tok_hash_mask = table_size(n) - 1;
    t->tok_hash = malloc((t->tok_hash_mask + 1) * sizeof(*t->tok_hash));
    if (!t->tokens || !t->tok_hash) return ERR_NOMEM;
    memset(t->tok_hash, 0xff, (t->tok_hash_mask + 1) * sizeof(*t->tok_hash));

    for (size_t i = 0; i < n; i++) {
        struct tokenizer_token *tk = &t->tokens[i];
        const struct gguf_str *s = &toks->strs[i];
        char empty[32];
        const char *text = s->data;
        size_t len = (size_t)s->len;
        if (len == 0) { /* llama.cpp renames empty entries so they cannot match anything */
            len = (size_t)snprintf(empty, sizeof(empty), "[EMPTY_%zu]", i);
            text = empty;
        }
        rc = tokenizer_arena_add(t, text, len, &tk->text_off);
        if (rc) {
            seterr(err, errlen, "token texts exceed 4 GiB");
            return rc;
        }
        tk->text_len = (uint32_t)len;
        if (scores) {
            double d;
            if (gguf_arr_get_f64(scores, i, &d)) {
                seterr(err, errlen, "score of token %zu is unreadable", i);
                return ERR_INVAL;
            }
            tk->score = (float)d;
        }
        tk->type = TOKENIZER_TOKEN_NORMAL;
        if (types) {
            int64_t ty;
            if (gguf_arr_get_i64(types, i, &ty) || ty < 0 || ty > TOKENIZER_TOKEN_BYTE) {
                seterr(err, errlen, "token %zu has an invalid type", i);
                return ERR_INVAL;
            }
            if (ty != 0) tk->type = (uint8_t)ty; /* 0 = undefined: treated as normal */
        }
    }
    /* Index after the copy loop: the arena may move while it grows. A duplicate text maps to its
     * last id, as in llama.cpp. */
    for (size_t i = 0; i < n; i++) {
        const struct tokenizer_token *tk = &t->tokens[i];
        const char *text = t->arena + tk->text_off;
        size_t h = (size_t)tokenizer_hash(TOKENIZER_HASH_SEED, text, tk->text_len);
        for (h &= t->tok_hash_mask;; h = (h + 1) & t->tok_hash_mask) {
            int32_t id = t->tok_hash[h];
            if (id < 0 || (t->tokens[id].text_len == tk->text_len &&
                           memcmp(t->arena + t->tokens[id].text_off, text, tk->text_len) == 0)) {
                t->tok_hash[h] = (int32_t)i;
                break;
            }
        }
    }
    return 0;
}

static int load_merges(struct tokenizer *t, const struct gguf *g, char *err, size_t errlen)
{
    const struct gguf_array *m;
    int rc = gguf_get_arr(g, KEY_MERGES, &m);
    if (rc == ERR_NOT_FOUND) {
        seterr(err, errlen, "missing %s (required by the gpt2 tokenizer)", KEY_MERGES);
        return rc;
    }
    if (rc || m->type != GGUF_STRING) {
        seterr(err, errlen, "%s is not an array of strings", KEY_MERGES);
        return ERR_INVAL;
    }
    if (m->n > INT32_MAX) {
        seterr(err, errlen, "%s has too many entries", KEY_MERGES);
        return ERR_INVAL;
    }
    size_t n = (size_t)m->n;
    t->n_merges = (int32_t)n;
    t->merges = calloc(n ? n : 1, sizeof(*t->merges));
    t->merge_hash_mask = table_size(n) - 1;
    t->merge_hash = malloc((t->merge_hash_mask + 1) * sizeof(*t->merge_hash));
    if (!t->merges || !t->merge_hash) return ERR_NOMEM;
    memset(t->merge_hash, 0xff, (t->merge_hash_mask + 1) * sizeof(*t->merge_hash));

    for (size_t i = 0; i < n; i++) {
        const struct gguf_str *s = &m->strs[i];
        /* Split at the first space after the first byte, as llama.cpp does. */
        const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', (size_t)s->len - 1) : NULL;
        if (!sp || sp + 1 == s->data + s->len) {
            seterr(err, errlen, "merge %zu (\"%.*s\") is not \"left right\"", i,
                   (int)(s->len > 40 ? 40 : s->len), s->data);
            return ERR_INVAL;
        }
        struct tokenizer_merge *mg = &t->merges[i];
        rc = tokenizer_arena_add(t, s->data, (size_t)s->len, &mg->off);
        if (rc) return rc;
        mg->left_len = (uint32_t)(sp - s->data);
        mg->right_len = (uint32_t)(s->len - mg->left_len - 1);
    }
    for (size_t i = 0; i < n; i++) {
        const struct tokenizer_merge *mg = &t->merges[i];
        const char *l = t->arena + mg->off, *r = l + mg->left_len + 1;
        if (tokenizer_merge_rank(t, l, mg->left_len, r, mg->right_len) >= 0)
            continue; /* 1st wins */
        size_t h =
            (size_t)tokenizer_merge_hash(l, mg->left_len, r, mg->right_len) & t->merge_hash_mask;
        while (t->merge_hash[h] >= 0) h = (h + 1) & t->merge_hash_mask;
        t->merge_hash[h] = (int32_t)i;
    }
    return 0;
}

/* Reads an optional special-token id; keeps *id (the default) when absent. */
static int load_special(struct tokenizer *t, const struct gguf *g, const char *key, int32_t *id,
                        char *err, size_t errlen)
{
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v);
    if (rc == ERR_NOT_FOUND) {
        if (*id >= t->n_vocab) *id = TOKENIZER_NULL; /* a default that does not fit this vocab */
        return 0;
    }
    if (rc || v >= (uint32_t)t->n_vocab) {
        seterr(err, errlen, "%s is %s for a vocabulary of %d tokens", key,
               rc ? "not an unsigned integer" : "out of range", t->n_vocab);
        return ERR_INVAL;
    }
    *id = (int32_t)v;
    return 0;
}

static int load_flag(const struct gguf *g, const char *key, bool *flag, char *err, size_t errlen)
{
    int rc = gguf_get_bool(g, key, flag);
    if (rc == ERR_NOT_FOUND) return 0;
    if (rc) seterr(err, errlen, "%s is not a boolean", key);
    return rc;
}

/* Marks the token whose text is `text` (if any) as end of generation and CONTROL; returns its id. */
static int32_t mark_eog_text(struct tokenizer *t, const char *text)
{
    int32_t id = tokenizer_find(t, text, strlen(text));
    if (id >= 0) {
        t->tokens[id].eog = true;
        t->tokens[id].type = TOKENIZER_TOKEN_CONTROL;
    }
    return id;
}

/* EOT detection and the end-of-generation set, following llama.cpp: a known end-of-turn text
 * becomes EOT when the file names none (the first in list order here), and such tokens are forced
 * to CONTROL. */
static void mark_eog(struct tokenizer *t)
{
    for (size_t i = 0; i < sizeof(eot_texts) / sizeof(eot_texts[0]); i++) {
        int32_t id = mark_eog_text(t, eot_texts[i]);
        if (id >= 0 && t->eot == TOKENIZER_NULL) t->eot = id;
    }
    for (size_t i = 0; i < sizeof(eog_extra_texts) / sizeof(eog_extra_texts[0]); i++)
        mark_eog_text(t, eog_extra_texts[i]);
    if (t->eos >= 0) t->tokens[t->eos].eog = true;
    if (t->eot >= 0) t->tokens[t->eot].eog = true;
    if (t->eom >= 0) t->tokens[t->eom].eog = true;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->tokens[x].text_len, ly = t->tokens[y].text_len;
    if (lx != ly) return lx > ly ? -1 : 1; /* longest first */
    return x < y ? -1 : (x > y);
}

static int build_specials(struct tokenizer *t)
{
    size_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->tokens[id].type;
        n += ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_USER_DEFINED ||
             ty == TOKENIZER_TOKEN_UNKNOWN;
    }
    t->specials = malloc((n ? n : 1) * sizeof(*t->specials));
    if (!t->specials) return ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->tokens[id].type;
        if (ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_USER_DEFINED ||
            ty == TOKENIZER_TOKEN_UNKNOWN)
            t->specials[t->n_specials++] = id;
    }
    qsort_r(t->specials, t->n_specials, sizeof(*t->specials), cmp_special, t);
    return 0;
}

static void set_strip(struct tokenizer *t, const char *text, bool on)
{
    int32_t id = tokenizer_find(t, text, strlen(text));
    if (id < 0) return;
    if (on)
        t->tokens[id].strip |= TOKENIZER_STRIP_RIGHT;
    else
        t->tokens[id].strip &= (uint8_t)~TOKENIZER_STRIP_RIGHT;
}

/* Phi-3 chat templates put a newline after each special token that the model never saw: llama.cpp
 * drops whitespace after every special token but <unk>, <s> and <|endoftext|> when general.name
 * contains "phi-3" or "phi3" (case-insensitive), and so must we to give the same ids. */
static void set_strip_attrs(struct tokenizer *t, const struct gguf *g)
{
    struct gguf_str name;
    if (gguf_get_str(g, "general.name", &name) != 0) return;
    char lower[128];
    size_t n = name.len < sizeof(lower) - 1 ? (size_t)name.len : sizeof(lower) - 1;
    for (size_t i = 0; i < n; i++) lower[i] = (char)tolower((unsigned char)name.data[i]);
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3")) return;
    for (size_t i = 0; i < t->n_specials; i++)
        t->tokens[t->specials[i]].strip |= TOKENIZER_STRIP_RIGHT;
    set_strip(t, "</s>", true);
    set_strip(t, "<unk>", false);
    set_strip(t, "<s>", false);
    set_strip(t, "<|endoftext|>", false);
}

static void find_byte_tokens(struct tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        int len = snprintf(name, sizeof(name), "<0x%02X>", b);
        int32_t id = tokenizer_find(t, name, (size_t)len);
        if (id < 0) {
            char c = (char)b;
            id = tokenizer_find(t, &c, 1);
        }
        t->byte_tokens[b] = id >= 0 ? id : t->unk;
    }
}

/* Whether no vocabulary entry holds U+2581 after a character that is not U+2581: then no merge of
 * the SentencePiece loop can join the end of one word to the U+2581 that starts the next (every
 * merged symbol is an entry), and encoding word by word gives the whole text's ids. */
static bool spm_words_independent(const struct tokenizer *t)
{
    static const char sp[3] = {'\xe2', '\x96', '\x81'};
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = tokenizer_text_of(t, id);
        size_t n = t->tokens[id].text_len, k = 0;
        while (n - k >= 3 && memcmp(s + k, sp, 3) == 0) k += 3;
        if (n - k >= 3 && memmem(s + k, n - k, sp, 3)) return false;
    }
    return true;
}

static int load_model(struct tokenizer *t, const struct gguf *g, char *err, size_t errlen)
{
    char model[32], pre[64];
    int rc = gguf_get_cstr(g, KEY_MODEL, model, sizeof(model));
    if (rc == ERR_NOT_FOUND) {
        seterr(err, errlen, "missing %s", KEY_MODEL);
        return rc;
    }
    if (rc) {
        seterr(err, errlen, "%s is not a short string", KEY_MODEL);
        return ERR_INVAL;
    }
    if (strcmp(model, "llama") == 0) {
        t->kind = TOKENIZER_SPM;
        t->pre = TOKENIZER_PRE_NONE;
        t->pre_name = "";
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        return 0;
    }
    if (strcmp(model, "gpt2") != 0) {
        seterr(err, errlen, "unsupported tokenizer model \"%s\" (supported: llama, gpt2)", model);
        return ERR_UNSUPPORTED;
    }
    t->kind = TOKENIZER_BPE;
    t->bos = 11, t->eos = 11, t->unk = TOKENIZER_NULL; /* llama.cpp's defaults for gpt2 vocabs */
    rc = gguf_get_cstr(g, KEY_PRE, pre, sizeof(pre));
    if (rc == ERR_NOT_FOUND) {
        t->pre = TOKENIZER_PRE_DEFAULT;
        t->pre_name = "default";
        return 0;
    }
    if (rc) {
        seterr(err, errlen, "%s is not a short string", KEY_PRE);
        return ERR_INVAL;
    }
    for (size_t i = 0; i < sizeof(pre_names) / sizeof(pre_names[0]); i++) {
        if (strcmp(pre, pre_names[i].name) == 0) {
            t->pre = pre_names[i].pre;
            t->pre_name = pre_names[i].name;
            t->ignore_merges = pre_names[i].flags & PRE_IGNORE_MERGES;
            if (pre_names[i].flags & PRE_ADD_BOS) t->add_bos = true;
            if (pre_names[i].flags & PRE_NO_BOS) t->bos = TOKENIZER_NULL;
            return 0;
        }
    }
    seterr(err, errlen,
           "unsupported pre-tokenizer \"%s\" (the tokenizer.ggml.pre of this model; without its "
           "regexes the prompt would be split differently from how the model was trained)",
           pre);
    return ERR_UNSUPPORTED;
}

int tokenizer_load(const struct gguf *g, struct tokenizer **out, char *err, size_t errlen)
{
    int rc = ERR_NOMEM;
    struct tokenizer *t = calloc(1, sizeof(*t));
    if (!t) goto out;
    t->eot = t->eom = TOKENIZER_NULL;

    if ((rc = load_model(t, g, err, errlen))) goto out;
    if ((rc = load_tokens(t, g, err, errlen))) goto out;
    if (t->kind == TOKENIZER_BPE && (rc = load_merges(t, g, err, errlen))) goto out;
    if ((rc = load_special(t, g, "tokenizer.ggml.bos_token_id", &t->bos, err, errlen)) ||
        (rc = load_special(t, g, "tokenizer.ggml.eos_token_id", &t->eos, err, errlen)) ||
        (rc = load_special(t, g, "tokenizer.ggml.unknown_token_id", &t->unk, err, errlen)) ||
        (rc = load_special(t, g, "tokenizer.ggml.eot_token_id", &t->eot, err, errlen)) ||
        (rc = load_special(t, g, "tokenizer.ggml.eom_token_id", &t->eom, err, errlen)))
        goto out;
    if ((rc = load_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err, errlen)) ||
        (rc = load_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err, errlen)) ||
        (rc = load_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, errlen)))
        goto out;
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    if (t->kind == TOKENIZER_SPM) {
        find_byte_tokens(t);
        t->spm_words = spm_words_independent(t);
    }
    mark_eog(t);
    if ((rc = build_specials(t))) goto out;
    set_strip_attrs(t, g);
    if ((rc = tokenizer_detok_build_pieces(t))) goto out;
    if ((rc = tokenizer_set_cache(t, TOKENIZER_CACHE_WORDS))) goto out;
    *out = t;
    t = NULL;
    rc = 0;
out:
    if (rc == ERR_NOMEM) seterr(err, errlen, "out of memory");
    tokenizer_free(t);
    return rc;
}

void tokenizer_free(struct tokenizer *t)
{
    if (!t) return;
    free(t->tokens);
    free(t->arena);
    free(t->tok_hash);
    free(t->merges);
    free(t->merge_hash);
    free(t->specials);
    tokenizer_cache_free(t->cache);
    free(t);
}
