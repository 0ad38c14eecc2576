/* Tokenizers built from GGUF metadata (tokenizer.ggml.*), reproducing llama.cpp's tokenization (and
 * so Hugging Face's, for the vocabularies llama.cpp tests against) token for token:
 *   - "llama": SentencePiece-style BPE over piece scores, byte fallback to <0xXX>, U+2581 for spaces,
 *   - "gpt2":  byte-level BPE over merge ranks with the pre-tokenizer named by tokenizer.ggml.pre
 *              (llama.cpp's names: gpt-2, llama-bpe/llama3, qwen2/deepseek-r1-qwen, qwen35, smollm,
 *              command-r, starcoder, gpt-4o/llama4, tekken, deepseek-llm/coder, falcon, ... ; an
 *              unknown one is an error, as in llama.cpp).
 * Also special-token parsing, per-token detokenization and a streaming UTF-8-safe detokenizer.
 * A loaded tokenizer is immutable but for its word cache (under its own locks): any thread may
 * encode and decode with it concurrently.
 * Not here: chat templates, WordPiece/Unigram vocabularies, clean_up_tokenization_spaces. */
#ifndef CINFER_ENGINE_TOKENIZER_H
#define CINFER_ENGINE_TOKENIZER_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tokenizer;

#define TOKENIZER_NULL (-1) /* "no such token" (absent BOS/EOT, failed lookup) */

enum tokenizer_kind {
    TOKENIZER_SPM = 1, /* tokenizer.ggml.model = "llama" */
    TOKENIZER_BPE = 2, /* tokenizer.ggml.model = "gpt2" */
};

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum tokenizer_token_type {
    TOKENIZER_TOKEN_NORMAL = 1,
    TOKENIZER_TOKEN_UNKNOWN = 2,
    TOKENIZER_TOKEN_CONTROL = 3,
    TOKENIZER_TOKEN_USER_DEFINED = 4,
    TOKENIZER_TOKEN_UNUSED = 5,
    TOKENIZER_TOKEN_BYTE = 6,
};

/* Builds a tokenizer from the metadata of `g` (borrowed; the tokenizer copies what it keeps, so `g`
 * may be closed afterwards; tensors are not needed). On success *out is new (tokenizer_free).
 * Errors, with a message in `err`: ERR_NOT_FOUND (no tokenizer.ggml.model / tokens / merges),
 * ERR_UNSUPPORTED (unknown model or pre-tokenizer), ERR_INVAL (wrong types, array lengths that do
 * not match the token count, a merge that is not "a b", special ids out of range, bad token types),
 * ERR_NOMEM. */
int tokenizer_load(const struct gguf *g, struct tokenizer **out, char *err, size_t errlen);
/* NULL-safe. */
void tokenizer_free(struct tokenizer *t);

/* Tokenizes `text` (len bytes, borrowed, any bytes: invalid UTF-8 is handled like llama.cpp).
 * add_special: prepend BOS / append EOS when the model's add_bos / add_eos flags ask for them.
 * parse_special: control tokens written in the text ("<s>", "<|im_end|>") become their ids,
 * except right after a TOKENIZER_TEXT_MARK, and the marks are dropped (tokenizer_escape_special);
 * user-defined tokens are always matched, as llama.cpp and Hugging Face do.
 * On success *ids_out is new (free()) holding *n_out ids (NULL when 0 ids). Otherwise ERR_NOMEM,
 * or ERR_TOO_BIG for a text over 512 MiB (callers bound prompts far below that). Any thread. */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids_out, size_t *n_out);

/* The word cache: tokenizer_encode remembers the ids of each pre-tokenizer word (byte-level BPE)
 * or space-led word (SentencePiece, when no vocabulary entry has a U+2581 after a non-space, so no
 * merge crosses words: then the text is encoded word by word, which gives the same ids) up to
 * TOKENIZER_CACHE_KEY_MAX bytes, in a fixed table of n_words slots (rounded up to a power of two;
 * a colliding word replaces the older one). The ids are the same with or without it (the tests
 * compare them on random text). tokenizer_load sets TOKENIZER_CACHE_WORDS (about 1 MiB). */
#define TOKENIZER_CACHE_WORDS 8192

/* Replaces the cache with an empty one of n_words slots; 0 turns it off (and SentencePiece's
 * word-by-word encoding with it: the whole-text merge loop). 0, ERR_NOMEM or ERR_TOO_BIG (over 2^24
 * slots; the old cache is kept). Not thread-safe: call before any thread encodes with t. */
int tokenizer_set_cache(struct tokenizer *t, size_t n_words);

struct tokenizer_cache_stats {
    uint64_t hits, misses, inserts, evictions; /* since the cache was made */
    size_t words, bytes;                       /* its fixed capacity and memory */
};
/* Counters of t's cache (all zero when it has none). Any thread. */
void tokenizer_cache_stats(const struct tokenizer *t, struct tokenizer_cache_stats *st);

/* The escape of tokenizer_escape_special: U+FDD0, a Unicode noncharacter ("for internal use"). */
#define TOKENIZER_TEXT_MARK "\xEF\xB7\x90"

/* Appends `text` (len bytes, borrowed) to `out` with TOKENIZER_TEXT_MARK before every place a
 * control token's text starts in it, so that tokenizer_encode with parse_special tokenizes those
 * as the text they are: with parse_special a control token's text right after the mark is not
 * matched, and the marks themselves never reach the ids (nor does a U+FDD0 the text had). For
 * text from a user that a template then surrounds with real control tokens (chat message
 * content): "<|im_start|>" typed by a user stays text. User-defined tokens are not escaped (they
 * are matched either way, as in Hugging Face). A string test on the escaped text (a template's
 * `'<|im_end|>' in content`) sees the marks. 0, or buf_append's ERR_TOO_BIG / ERR_NOMEM (out may
 * then hold part of it). Any thread. */
struct buf;
int tokenizer_escape_special(const struct tokenizer *t, const char *text, size_t len,
                             struct buf *out);

/* The bytes token `id` stands for in output text: byte tokens give their byte, U+2581 becomes a
 * space (SentencePiece), byte-level BPE text is mapped back to raw bytes. Control and unknown tokens
 * give their text when `special`, nothing otherwise; unused tokens give nothing. The bytes of one
 * token need not be valid UTF-8 on their own. Returns a pointer borrowed from the tokenizer (valid
 * until tokenizer_free) and its length in *len; NULL and *len = 0 for an id out of range. */
const char *tokenizer_token_piece(const struct tokenizer *t, int32_t id, bool special, size_t *len);

/* Appends the concatenated pieces of ids[0..n) to `out` (raw bytes, not validated). Like llama.cpp's
 * detokenize, when the vocabulary adds a space prefix (SentencePiece), the first token's leading
 * space is dropped. Returns 0, ERR_RANGE (an id out of range; nothing more appended) or the error
 * of buf_append. */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool special,
                     struct buf *out);

/* The vocabulary entry itself: raw text (e.g. "▁Hello", "Ġworld", "<0x0A>"), borrowed; NULL when out
 * of range. */
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len);
/* Exact lookup of a vocabulary entry's raw text; TOKENIZER_NULL when absent. */
int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len);
/* Type of token `id`; TOKENIZER_TOKEN_UNUSED for an id out of range. */
enum tokenizer_token_type tokenizer_token_type(const struct tokenizer *t, int32_t id);
float tokenizer_token_score(const struct tokenizer *t, int32_t id);

enum tokenizer_kind tokenizer_kind(const struct tokenizer *t);
/* The pre-tokenizer's name as the file gives it (tokenizer.ggml.pre: "llama-bpe", "qwen2", ...;
 * "default" when absent); "" for SentencePiece. Static. */
const char *tokenizer_pre_name(const struct tokenizer *t);
int32_t tokenizer_vocab_size(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); /* TOKENIZER_NULL when the model has none */
int32_t tokenizer_eos(const struct tokenizer *t);
int32_t tokenizer_eot(const struct tokenizer *t);
bool tokenizer_add_bos(const struct tokenizer *t);
bool tokenizer_add_eos(const struct tokenizer *t);
/* End of generation: EOS, EOT, EOM, or a control token whose text is a known end-of-turn marker
 * ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", ...). */
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);

/* Streaming detokenizer: turns a sequence of token ids into text that is always valid UTF-8, even
 * when a character's bytes are split across tokens (byte-fallback emoji, byte-level BPE CJK). A
 * complete-so-far prefix of a character is held back until the next token; bytes that can never
 * form a valid character become U+FFFD at once; tokenizer_detok_flush turns a held prefix into
 * U+FFFD. Embedded by value; owned by one thread at a time (the tokenizer is shared). */
struct tokenizer_detok {
    const struct tokenizer *t; /* borrowed */
    bool special;              /* render control tokens' text */
    uint8_t pending[4];        /* incomplete UTF-8 prefix carried to the next token */
    size_t n_pending;
};

void tokenizer_detok_init(struct tokenizer_detok *d, const struct tokenizer *t, bool special);
/* Appends the text that token `id` completes to `out`. Returns 0, ERR_RANGE (id out of range;
 * nothing appended, state unchanged) or buf_append's error (ERR_TOO_BIG / ERR_NOMEM: part of the
 * text may be lost; re-initialise before reusing the stream). */
int tokenizer_detok_push(struct tokenizer_detok *d, int32_t id, struct buf *out);
/* Appends U+FFFD for a held incomplete character, if any, and resets. Returns 0 or buf_append's
 * error. */
int tokenizer_detok_flush(struct tokenizer_detok *d, struct buf *out);

#endif
