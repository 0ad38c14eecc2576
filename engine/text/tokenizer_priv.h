/* Internals shared by the tokenizer's files (tokenizer_vocab.c loads, tokenizer.c partitions special
 * tokens and dispatches, tokenizer_spm.c / tokenizer_bpe.c / tokenizer_pretok.c encode,
 * tokenizer_detok.c decodes, tokenizer_store.c holds the arena and lookups they all use). Not part
 * of the engine's API: include engine/text/tokenizer.h instead. */
#ifndef CINFER_ENGINE_TOKENIZER_PRIV_H
#define CINFER_ENGINE_TOKENIZER_PRIV_H

#include "common/heap.h"
#include "engine/text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pre-tokenizers of byte-level BPE vocabularies (llama.cpp's llama_vocab_pre_type subset). */
enum tokenizer_pre {
    TOKENIZER_PRE_NONE = 0, /* SentencePiece: no regex split */
    TOKENIZER_PRE_DEFAULT,
    TOKENIZER_PRE_GPT2,
    TOKENIZER_PRE_LLAMA3,
    TOKENIZER_PRE_QWEN2,
    TOKENIZER_PRE_QWEN35,
    TOKENIZER_PRE_GPT4O,
    TOKENIZER_PRE_TEKKEN,
    TOKENIZER_PRE_DEEPSEEK_LLM,
    TOKENIZER_PRE_DEEPSEEK_CODER,
    TOKENIZER_PRE_STARCODER,
    TOKENIZER_PRE_FALCON,
};

struct tokenizer_token {
    uint32_t text_off, text_len;   /* raw vocabulary text in the arena */
    uint32_t piece_off, piece_len; /* detokenized bytes in the arena */
    float score;
    uint8_t type;  /* enum tokenizer_token_type */
    uint8_t strip; /* TOKENIZER_STRIP_* when matched as a special token */
    bool eog;
};

/* llama.cpp's LSTRIP / RSTRIP token attributes: whitespace before / after a special token in the
 * text is dropped. Not stored in GGUF: llama.cpp sets them from general.name (Phi-3). */
#define TOKENIZER_STRIP_LEFT  1
#define TOKENIZER_STRIP_RIGHT 2

/* A merge "left right" of rank = its index; the text (with the space) lives in the arena. */
struct tokenizer_merge {
    uint32_t off, left_len, right_len;
};

struct tokenizer {
    enum tokenizer_kind kind;
    enum tokenizer_pre pre;
    const char *pre_name; /* static string */
    int32_t n_vocab;
    struct tokenizer_token *tokens; /* (n_vocab) */
    char *arena;                    /* every token text, piece and merge, back to back */
    size_t arena_len, arena_cap;

    int32_t *tok_hash; /* open addressing, token id or -1; (tok_hash_mask + 1) */
    size_t tok_hash_mask;

    struct tokenizer_merge *merges; /* (n_merges), index = rank */
    int32_t n_merges;
    int32_t *merge_hash; /* open addressing, rank or -1 */
    size_t merge_hash_mask;

    int32_t *specials; /* control / user-defined / unknown ids, longest text first */
    size_t n_specials;

    int32_t byte_tokens[256]; /* SentencePiece <0xXX> ids, -1 when absent */

    int32_t bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    /* SentencePiece: no entry has U+2581 after a non-U+2581 (set by the loader), so a text can be
     * encoded word by word, each word a run of U+2581 and what follows up to the next run. */
    bool spm_words;
    struct tokenizer_cache *cache; /* NULL: off (tokenizer_set_cache) */
};

/* The word cache (tokenizer_cache.c): a key is a word's bytes as the encoder sees them (escaped
 * SentencePiece text, byte-encoded BPE word) and h its tokenizer_hash. Words over KEY_MAX bytes or
 * of more than IDS_MAX ids are not kept. Any thread. */
#define TOKENIZER_CACHE_KEY_MAX 54
#define TOKENIZER_CACHE_IDS_MAX 16
struct tokenizer_cache;
/* n_words 0: *out = NULL (no cache). 0, ERR_NOMEM, ERR_TOO_BIG. */
int tokenizer_cache_new(size_t n_words, struct tokenizer_cache **out);
void tokenizer_cache_free(struct tokenizer_cache *c); /* NULL-safe */
/* The number of ids copied to ids, or -1 when the word is not cached. */
int tokenizer_cache_get(struct tokenizer_cache *c, uint64_t h, const char *w, size_t n,
                        int32_t ids[TOKENIZER_CACHE_IDS_MAX]);
void tokenizer_cache_put(struct tokenizer_cache *c, uint64_t h, const char *w, size_t n,
                         const int32_t *ids, size_t n_ids);

/* Growable int32 vector for encoder output. */
struct tokenizer_ids {
    int32_t *v;
    size_t n, cap;
};
int tokenizer_ids_push(struct tokenizer_ids *ids, int32_t id);
/* Appends n bytes to t->arena (which may move); their offset goes to *off. ERR_TOO_BIG past 4 GiB. */
int tokenizer_arena_add(struct tokenizer *t, const void *p, size_t n, uint32_t *off);

static inline const char *tokenizer_text_of(const struct tokenizer *t, int32_t id)
{
    return t->arena + t->tokens[id].text_off;
}

/* 64-bit FNV-1a, continued from `h` (start with TOKENIZER_HASH_SEED). */
#define TOKENIZER_HASH_SEED 0xcbf29ce484222325ull
uint64_t tokenizer_hash(uint64_t h, const void *p, size_t n);
/* The hash of the merge text "left right" (the merge table's key; tokenizer_store.c). */
uint64_t tokenizer_merge_hash(const char *left, size_t left_len, const char *right,
                              size_t right_len);
/* Rank of the merge (left, right), or -1. */
int32_t tokenizer_merge_rank(const struct tokenizer *t, const char *left, size_t left_len,
                             const char *right, size_t right_len);

/* Encoders of one raw-text fragment (no special tokens inside), appending to `ids`. */
int tokenizer_spm_encode(const struct tokenizer *t, const char *text, size_t len,
                         struct tokenizer_ids *ids);
int tokenizer_bpe_encode(const struct tokenizer *t, const char *text, size_t len,
                         struct tokenizer_ids *ids);

/* Pre-tokenization: splits code points cpts[0..n) into words with the regex sequence of `pre`.
 * On success *lens_out is new (free()) with *n_out word lengths in code points, summing to n. */
int tokenizer_pretok_split(enum tokenizer_pre pre, const uint32_t *cpts, size_t n,
                           uint32_t **lens_out, size_t *n_out);

/* Fills every token's piece (tokenizer_detok.c); called once by the loader. */
int tokenizer_detok_build_pieces(struct tokenizer *t);

/* Min-heap of candidate merges ordered by (key, left), shared by the SPM and BPE encoders
 * (common/heap.h: tokenizer_heap_push, tokenizer_heap_pop). */
struct tokenizer_bigram {
    double key; /* SPM: -score; BPE: rank */
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued, to skip stale entries */
};
static inline bool tokenizer_bigram_less(const struct tokenizer_bigram *a,
                                         const struct tokenizer_bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}
HEAP_DEFINE(tokenizer_heap, struct tokenizer_bigram, tokenizer_bigram_less)

/* Symbol of the merge loops: a byte range of the word, linked to its live neighbours. */
struct tokenizer_sym {
    uint32_t off, len; /* len 0 = merged away */
    int32_t prev, next;
};

#endif
