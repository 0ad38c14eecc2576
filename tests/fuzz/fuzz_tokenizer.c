/* Fuzz target: encodes arbitrary bytes with small built-in vocabularies (SentencePiece, and
 * byte-level BPE under every pre-tokenizer), then detokenizes. Checks: no crash or sanitizer report,
 * ids in range, streamed text always valid UTF-8, and byte-level BPE lossless on valid UTF-8.
 * Input: byte 0 picks the vocabulary (low 4 bits) and flags (add_special 0x10, parse_special 0x20,
 * render special 0x40); the rest is the text. */
#include "common/buf.h"
#include "common/utf8.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "engine/text/unicode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Minimal GGUF v3 serializer for metadata-only files. */
struct wr {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct wr *w, const void *src, size_t n)
{
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->n + n) cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) abort();
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void put_u32(struct wr *w, uint32_t v)
{
    put(w, &v, 4); /* little-endian host (x86-64, arm64) */
}

static void put_u64(struct wr *w, uint64_t v)
{
    put(w, &v, 8);
}

static void put_str(struct wr *w, const char *s, size_t n)
{
    put_u64(w, n);
    put(w, s, n);
}

static void kv_str(struct wr *w, const char *key, const char *v)
{
    put_str(w, key, strlen(key));
    put_u32(w, GGUF_STRING);
    put_str(w, v, strlen(v));
}

/* A vocabulary under construction: parallel token / score / type lists. */
struct vocab {
    char toks[600][16];
    size_t tok_len[600];
    float score[600];
    int32_t type[600];
    size_t n;
};

static void add_tok(struct vocab *v, const char *s, size_t n, float score, int32_t type)
{
    memcpy(v->toks[v->n], s, n);
    v->tok_len[v->n] = n;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static void add_cstr(struct vocab *v, const char *s, float score, int32_t type)
{
    add_tok(v, s, strlen(s), score, type);
}

static void put_vocab(struct wr *w, const struct vocab *v, bool scores)
{
    put_str(w, "tokenizer.ggml.tokens", strlen("tokenizer.ggml.tokens"));
    put_u32(w, GGUF_ARRAY);
    put_u32(w, GGUF_STRING);
    put_u64(w, v->n);
    for (size_t i = 0; i < v->n; i++) put_str(w, v->toks[i], v->tok_len[i]);
    put_str(w, "tokenizer.ggml.token_type", strlen("tokenizer.ggml.token_type"));
    put_u32(w, GGUF_ARRAY);
    put_u32(w, GGUF_INT32);
    put_u64(w, v->n);
    put(w, v->type, v->n * 4);
    if (scores) {
        put_str(w, "tokenizer.ggml.scores", strlen("tokenizer.ggml.scores"));
        put_u32(w, GGUF_ARRAY);
        put_u32(w, GGUF_FLOAT32);
        put_u64(w, v->n);
        put(w, v->score, v->n * 4);
    }
}

static struct tokenizer *finish(struct wr *w)
{
    static const uint8_t zeros[32] = {0};
    put(w, zeros, 32 - w->n % 32); /* the (empty) data section starts aligned */
    struct gguf *g;
    struct tokenizer *t = NULL;
    char err[256];
    if (gguf_parse(w->p, w->n, &g, err, sizeof(err)) != 0 ||
        tokenizer_load(g, &t, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_tokenizer: built-in vocabulary: %s\n", err);
        abort();
    }
    gguf_close(g);
    free(w->p);
    return t;
}

static void header(struct wr *w, uint64_t n_kv)
{
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, 0);
    put_u64(w, n_kv);
}

static struct tokenizer *build_spm(void)
{
    static struct vocab v;
    v.n = 0;
    add_cstr(&v, "<unk>", 0, 2);
    add_cstr(&v, "<s>", 0, 3);
    add_cstr(&v, "</s>", 0, 3);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        add_cstr(&v, name, 0, 6);
    }
    static const char *const pieces[] = {"\xe2\x96\x81",
                                         "\xe2\x96\x81t",
                                         "he",
                                         "\xe2\x96\x81the",
                                         "a",
                                         "b",
                                         "ab",
                                         "\xe2\x96\x81"
                                         "a",
                                         "\xe6\x88\x91",
                                         "e",
                                         "h",
                                         "t"};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        add_cstr(&v, pieces[i], -(float)i, 1);
    add_cstr(&v, "<|user|>", 0, 3);
    add_cstr(&v, "\xc3\xbc", 0, 4);
    struct wr w = {0};
    header(&w, 5);
    kv_str(&w, "general.name", "phi3-fuzz"); /* turns on llama.cpp's Phi-3 whitespace stripping */
    kv_str(&w, "tokenizer.ggml.model", "llama");
    put_vocab(&w, &v, true);
    return finish(&w);
}

static struct tokenizer *build_bpe(const char *pre)
{
    static struct vocab v;
    v.n = 0;
    for (int b = 0; b < 256; b++) { /* every byte, as its GPT-2 code point */
        char u8[4];
        size_t n = unicode_encode(unicode_byte_to_cpt((uint8_t)b), u8);
        add_tok(&v, u8, n, 0, 1);
    }
    static const char *const merged[] = {
        "\xc4\xa0t",        "he", "\xc4\xa0the", "in",
        "\xc4\xa0\xc4\xa0", "12", "123",         "\xc4\x8a\xc4\x8a"};
    for (size_t i = 0; i < sizeof(merged) / sizeof(merged[0]); i++) add_cstr(&v, merged[i], 0, 1);
    add_cstr(&v, "<|endoftext|>", 0, 3);
    add_cstr(&v, "\xc3\xbc", 0, 4);
    static const char *const merges[] = {
        "\xc4\xa0 t",        "h e", "\xc4\xa0t he", "i n",
        "\xc4\xa0 \xc4\xa0", "1 2", "12 3",         "\xc4\x8a \xc4\x8a"};
    size_t n_merges = sizeof(merges) / sizeof(merges[0]);
    struct wr w = {0};
    header(&w, 5);
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", pre);
    put_vocab(&w, &v, false);
    put_str(&w, "tokenizer.ggml.merges", strlen("tokenizer.ggml.merges"));
    put_u32(&w, GGUF_ARRAY);
    put_u32(&w, GGUF_STRING);
    put_u64(&w, n_merges);
    for (size_t i = 0; i < n_merges; i++) put_str(&w, merges[i], strlen(merges[i]));
    return finish(&w);
}

static const char *const pres[] = {"default",      "gpt-2",          "llama-bpe", "qwen2",
                                   "deepseek-llm", "deepseek-coder", "starcoder", "falcon",
                                   "qwen35",       "gpt-4o",         "tekken"};
#define N_VOCABS 12

/* Built once per process; the fuzzer never frees them (a process-lifetime cache). */
static struct tokenizer *vocab_at(size_t i)
{
    static struct tokenizer *cache[N_VOCABS];
    if (!cache[i]) cache[i] = i == 0 ? build_spm() : build_bpe(pres[i - 1]);
    return cache[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t sel = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    size_t vi = (sel & 0x0F) % N_VOCABS;
    bool add_special = sel & 0x10, parse_special = sel & 0x20, special = sel & 0x40;
    const struct tokenizer *t = vocab_at(vi);

    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(t, text, len, add_special, parse_special, &ids, &n) != 0) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) abort();

    struct buf out;
    struct tokenizer_detok d;
    buf_init(&out, 0);
    tokenizer_detok_init(&d, t, special);
    for (size_t i = 0; i < n; i++) {
        if (tokenizer_detok_push(&d, ids[i], &out) != 0) abort();
        if (!utf8_valid(buf_cstr(&out), out.len)) abort();
    }
    if (tokenizer_detok_flush(&d, &out) != 0) abort();
    if (!utf8_valid(buf_cstr(&out), out.len)) abort();

    /* Byte-level BPE with every byte in the vocabulary loses nothing on valid UTF-8 (without BOS,
     * which llama-bpe would add). */
    if (vi > 0 && !add_special && !parse_special && utf8_valid(text, len)) {
        struct buf dec;
        buf_init(&dec, 0);
        if (tokenizer_decode(t, ids, n, false, &dec) != 0) abort();
        if (dec.len != len || (len && memcmp(dec.data, text, len) != 0)) abort();
        buf_fini(&dec);
    }
    buf_fini(&out);
    free(ids);
    return 0;
}
