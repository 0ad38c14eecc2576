/* Grammar-constrained decoding: a context-free grammar (GBNF, the format of llama.cpp's grammars)
 * compiled to a byte-level pushdown automaton, a per-sequence matcher over it, and the token mask
 * of each step (which tokens keep the output a prefix of the language; end-of-generation tokens
 * only where the grammar accepts). JSON schemas and regular expressions compile to GBNF
 * (grammar_schema.h, grammar_regex.h).
 *
 * Bytes, not characters: character classes become alternatives of UTF-8 byte sequences, so a token
 * that ends inside a character, or spans several terminals, is judged by its bytes exactly.
 *
 * The mask: the vocabulary is a byte trie (struct grammar_vocab); a state's mask is a walk of the
 * trie that prunes every subtree the automaton rejects. Walks are memoised per grammar by the top
 * GRAMMAR_LOCAL_DEPTH frames of each stack (XGrammar's observation: what a token does inside the
 * innermost rules does not depend on the rules below); tokens that run past those frames are kept
 * as trie nodes and re-walked with the real stack below, which prunes them after a byte or two.
 * A cache miss walks the trie over a local automaton kept per grammar: the stack sets a walk meets
 * (over the sentinel) interned as states, their byte transitions memoised, so a state that allows
 * most of the vocabulary costs one table lookup per trie node.
 *
 * Threads: a compiled grammar is shared by reference (grammar_ref / grammar_unref, any thread);
 * its mask cache (grammar_matcher_mask), a matcher and an arena are used by one thread at a time:
 * the scheduler's mask worker during a forward pass, the inference thread otherwise, handed over
 * under a mutex (engine/sched). */
#ifndef CINFER_ENGINE_GRAMMAR_H
#define CINFER_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct grammar;
struct grammar_vocab;
struct grammar_matcher;
struct grammar_arena;

#define GRAMMAR_MAX_TEXT    (4u << 20)  /* bytes of GBNF text */
#define GRAMMAR_MAX_ELEMS   (1 << 20)   /* byte-level elements after expansion of repetitions */
#define GRAMMAR_MAX_REPEAT  10000       /* largest bound of {m,n} */
#define GRAMMAR_MAX_STACKS  4096        /* stacks a matcher state may hold (ambiguity bound) */
#define GRAMMAR_MAX_DEPTH   1024        /* frames per stack */
#define GRAMMAR_LOCAL_DEPTH 3           /* frames of a stack the mask cache is keyed on */
#define GRAMMAR_CACHE_BYTES (64u << 20) /* mask-cache memory per grammar before it is cleared */

/* ---------------------------------------------------------------- vocabulary */

/* The token trie of `tok` (borrowed for the vocabulary's life): every token whose piece (its output
 * bytes, tokenizer_token_piece without special text) is non-empty, plus the end-of-generation
 * tokens, which the mask allows only where the grammar accepts. Writes a new vocabulary to *out
 * (grammar_vocab_free). ERR_INVAL (empty vocabulary), ERR_NOMEM. Any thread; immutable after. */
int grammar_vocab_new(const struct tokenizer *tok, struct grammar_vocab **out);
void grammar_vocab_free(struct grammar_vocab *v); /* NULL-safe */
int32_t grammar_vocab_size(const struct grammar_vocab *v);
/* Trie nodes, for benchmarks and logs. */
size_t grammar_vocab_nodes(const struct grammar_vocab *v);

/* A vocabulary from explicit pieces (tests and benchmarks): token i has pieces[i] of lens[i] bytes
 * (borrowed for the vocabulary's life; 0 bytes: never allowed), `eog` ids (n_eog) end generation. */
int grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, int32_t n,
                              const int32_t *eog, int n_eog, struct grammar_vocab **out);

/* ---------------------------------------------------------------- grammars */

/* Compiles GBNF `text` (len bytes, borrowed) whose start rule is "root", for vocabulary `v`
 * (borrowed; must outlive the grammar). Syntax (llama.cpp's grammars/README.md): `name ::= alts`,
 * alternatives with `|`, literals "..." with escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH, classes
 * [a-z] [^...], `.` any character, groups ( ), quantifiers * + ? {m} {m,} {m,n}, # comments.
 * On success *out is new with one reference. Errors, with a message naming the rule or the line
 * and column in `err`: ERR_PARSE (syntax), ERR_NOT_FOUND (an undefined rule, no root),
 * ERR_UNSUPPORTED (left recursion, a repetition of something that can be empty), ERR_TOO_BIG
 * (over the GRAMMAR_MAX_* bounds), ERR_NOMEM. Any thread. */
int grammar_compile(const char *text, size_t len, const struct grammar_vocab *v,
                    struct grammar **out, char *err, size_t errlen);
void grammar_ref(struct grammar *g);
void grammar_unref(struct grammar *g); /* NULL-safe; frees at zero references */

/* Byte-level elements of a compiled grammar (its size, for limits and logs). */
size_t grammar_size(const struct grammar *g);
/* Tokens of the vocabulary g was compiled for (its masks have that many bits). Any thread. */
int32_t grammar_n_vocab(const struct grammar *g);

/* ---------------------------------------------------------------- matching (one thread) */

/* Scratch memory of the mask walks and token advances, reused across calls and grammars; owned
 * by one thread. NULL on ERR_NOMEM. */
struct grammar_arena *grammar_arena_new(void);
void grammar_arena_free(struct grammar_arena *a); /* NULL-safe */

/* A matcher at the start of `g` (a reference is taken). *out new (grammar_matcher_free). ERR_NOMEM,
 * ERR_TOO_BIG (the start state breaks a bound). */
int grammar_matcher_new(struct grammar *g, struct grammar_arena *a, struct grammar_matcher **out);
void grammar_matcher_free(struct grammar_matcher *m); /* NULL-safe; drops the reference */
/* A copy of m in its current state (another reference to the grammar). ERR_NOMEM. */
int grammar_matcher_clone(const struct grammar_matcher *m, struct grammar_matcher **out);

/* Words of a mask for this vocabulary: bit t of word t / 32 is token t. */
size_t grammar_mask_words(const struct grammar_vocab *v);

/* Writes the allowed tokens of the current state into mask (grammar_mask_words words): tokens
 * whose bytes keep the output inside the language, and the end-of-generation tokens when the
 * grammar accepts here. Returns the number of allowed tokens (0: no token can continue, which
 * only a grammar the vocabulary cannot spell reaches), or ERR_NOMEM / ERR_TOO_BIG. */
int grammar_matcher_mask(struct grammar_matcher *m, struct grammar_arena *a, uint32_t *mask);

/* Advances by token `t`. Returns 0, or ERR_INVAL when t is not allowed here (state unchanged),
 * ERR_NOMEM / ERR_TOO_BIG. An end-of-generation token is allowed only when grammar_matcher_accepting. */
int grammar_matcher_accept(struct grammar_matcher *m, struct grammar_arena *a, int32_t t);

/* Advances by raw bytes (tests, the tool-call trigger): 0 or ERR_INVAL (state unchanged). */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, struct grammar_arena *a, const char *s,
                                 size_t len);

/* The output so far is a complete sentence of the grammar. */
bool grammar_matcher_accepting(const struct grammar_matcher *m);
/* Complete and nothing may follow: generation should end now. */
bool grammar_matcher_finished(const struct grammar_matcher *m);

/* ---------------------------------------------------------------- lazy matching (one thread) */

/* A lazy matcher leaves the output free until a trigger appears in it, then constrains the rest
 * (tool_choice "auto": free text until the model starts a call, then the call's grammar; llama.cpp's
 * grammar_lazy). The grammar's language must start with every trigger's text: at the trigger the
 * matcher is advanced by that text and by the bytes of the triggering token after it (a token that
 * straddles the trigger's end), so the grammar judges exactly what the output holds from the
 * trigger on. A trigger fires
 *   - on a token id (`token` >= 0: a control token, which has no output bytes): when that token is
 *     accepted; its text stands for it;
 *   - on bytes (`token` -1): when the output's bytes (the tokens' pieces, any number of tokens) end
 *     with `text`;
 *   - with `at_start`, only as the first thing of the answer, after blanks (space, \t, \n, \r).
 * With `think`, a leading <think>...</think> block of the answer (after blanks; `think_open`: the
 * answer starts inside it) never triggers, and the answer begins after it, as the API's reasoning
 * split (engine/api/api_reasoning.c) reads it. */
#define GRAMMAR_TRIGGER_MAX  32 /* bytes of one trigger */
#define GRAMMAR_TRIGGERS_MAX 4  /* triggers of one lazy matcher */

struct grammar_trigger {
    char text[GRAMMAR_TRIGGER_MAX]; /* not NUL-terminated; must not start with a blank */
    uint8_t len;                    /* 1..GRAMMAR_TRIGGER_MAX */
    int32_t token;                  /* >= 0: fires on this id; -1: on the bytes */
    bool at_start;
};

/* Plain data, copied by value; n == 0 means not lazy. */
struct grammar_lazy {
    struct grammar_trigger t[GRAMMAR_TRIGGERS_MAX];
    int n;
    bool think, think_open;
};

/* A lazy matcher over `g` (a reference is taken), inactive, with its triggers copied from `lz`.
 * *out new (grammar_matcher_free). ERR_INVAL (no trigger, more than GRAMMAR_TRIGGERS_MAX, a length
 * out of range, a text starting with a blank, or a trigger whose text g's language does not start
 * with), ERR_NOMEM, ERR_TOO_BIG.
 * While inactive: grammar_matcher_accept takes every token (end-of-generation ones too) and
 * returns ERR_INVAL, state unchanged, only for a token that fires a trigger with bytes after it
 * that the grammar refuses (the caller samples another token: the mask of the free text is
 * "every token but those"); grammar_matcher_mask allows every token; the matcher is accepting
 * and never finished. Once a trigger fired it is the eager matcher of g for good. */
int grammar_matcher_new_lazy(struct grammar *g, struct grammar_arena *a,
                             const struct grammar_lazy *lz, struct grammar_matcher **out);
/* False for a lazy matcher whose trigger has not fired yet; true otherwise (eager matchers). */
bool grammar_matcher_active(const struct grammar_matcher *m);

/* Cumulative counters of a grammar's mask cache (inference thread). */
struct grammar_cache_stats {
    uint64_t hits, misses;
    size_t entries, bytes;
};
void grammar_cache_stats(const struct grammar *g, struct grammar_cache_stats *out);

#endif
