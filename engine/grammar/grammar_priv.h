/* Internals shared by engine/grammar/grammar_*.c: the byte-level grammar, the token trie, the frame
 * arena. Not part of the module's surface. */
#ifndef CINFER_ENGINE_GRAMMAR_PRIV_H
#define CINFER_ENGINE_GRAMMAR_PRIV_H

#include "engine/grammar/grammar.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- byte-level grammar */

enum { GRAMMAR_E_END = 0, GRAMMAR_E_BYTES, GRAMMAR_E_RULE };

/* One element of an alternative: a byte set (arg: index into sets) or a rule reference (arg: rule
 * index); every alternative ends with an END element. A position is an index into elems. */
struct grammar_elem {
    int32_t type;
    int32_t arg;
};

struct grammar_byteset {
    uint64_t w[4];
};

static inline bool grammar_byteset_has(const struct grammar_byteset *s, unsigned b)
{
    return (s->w[b >> 6] >> (b & 63)) & 1u;
}

static inline void grammar_byteset_add(struct grammar_byteset *s, unsigned b)
{
    s->w[b >> 6] |= 1ull << (b & 63);
}

struct grammar_rule {
    int32_t alt0; /* first of this rule's alternatives in grammar.alts */
    int32_t n_alts;
};

struct grammar_cache; /* grammar_mask.c */

struct grammar {
    atomic_int refs;
    const struct grammar_vocab *vocab; /* borrowed */
    struct grammar_elem *elems;        /* (n_elems) */
    int32_t n_elems;
    struct grammar_byteset *sets; /* (n_sets) */
    int32_t n_sets;
    int32_t *alts; /* (n_alts) start positions, grouped by rule */
    int32_t n_alts;
    struct grammar_rule *rules; /* (n_rules) */
    int32_t n_rules;
    int32_t root;
    struct grammar_cache *cache; /* inference thread only */
};

/* ---------------------------------------------------------------- token trie (grammar_vocab.c) */

/* Nodes in depth-first preorder: node i's subtree is [i, end[i]); its children are i + 1, then
 * end[child] until end[i]. Node 0 is the root (no byte). */
struct grammar_vocab {
    int32_t n_vocab;
    int32_t n_nodes;
    uint8_t *byte;      /* (n_nodes) the byte leading into the node */
    int32_t *end;       /* (n_nodes) */
    int32_t *tok0;      /* (n_nodes + 1) tokens of node i are toks[tok0[i] .. tok0[i + 1]) */
    int32_t *toks;      /* token ids ordered by node */
    uint8_t *depth;     /* (n_nodes) bytes from the root, saturated at 255 */
    const char **piece; /* (n_vocab) borrowed token bytes */
    size_t *piece_len;  /* (n_vocab) */
    int32_t *eog;       /* (n_eog) end-of-generation ids */
    int n_eog;
    size_t max_len; /* longest piece: the depth of the trie */
};

/* ---------------------------------------------------------------- frames (grammar_stack.c) */

/* A stack is a chain of frames (position, parent frame), hash-consed in the arena so equal stacks
 * are equal ids. A frame's position is a terminal (BYTES) at the top of a stack and a return
 * position below it. Pseudo parents and set members: */
#define GRAMMAR_F_DONE (-1) /* the empty stack: the grammar accepted */
#define GRAMMAR_F_SENT (-2) /* a local walk's bottom: the frames below are the context */

struct grammar_arena {
    const struct grammar *g;
    int32_t *fpos, *fpar; /* (cap) frames */
    int32_t *succ;        /* (cap) advanced-past successor expansion: offset in pool, -1 unknown */
    int32_t *exp;         /* (cap) expansion: offset in pool, -1 unknown, -2 in progress */
    int32_t n, cap;
    int32_t *ht; /* frame hash table (ht_cap slots, -1 empty) */
    uint32_t ht_cap;
    int32_t *pool; /* expansions: a count, then that many members */
    size_t n_pool, cap_pool;
    uint32_t *mark; /* (cap) expansion-list dedupe stamps */
    uint32_t stamp;
    uint32_t *smark; /* (cap) set-building dedupe stamps (separate: a set's build expands) */
    uint32_t sstamp;
    int32_t *sets; /* LIFO storage for the sets of a walk */
    size_t n_sets, cap_sets;
    int depth; /* expansion recursion */
    int err;   /* first error of the current operation (ERR_NOMEM / ERR_TOO_BIG) */
};

/* Empties the arena for grammar g (frames are meaningless across grammars). */
void grammar_arena_reset(struct grammar_arena *a, const struct grammar *g);
/* The frame (pos, parent), created when new; -1 with a->err set when out of memory. */
int32_t grammar_frame(struct grammar_arena *a, int32_t pos, int32_t parent);
/* The expansion of frame f (its terminal-top frames and DONE/SENT members): a pointer into the
 * pool (count first), valid until the pool grows; NULL on error. */
const int32_t *grammar_expand(struct grammar_arena *a, int32_t f);
/* The expansion of the frame that follows terminal frame f once its byte is consumed. */
const int32_t *grammar_succ(struct grammar_arena *a, int32_t f);

/* Appends to a->sets the set reached from set `in` (count-first, in a->sets at offset in_off) by
 * byte b; returns the new set's offset, or -1 on error. */
int64_t grammar_set_step(struct grammar_arena *a, size_t in_off, unsigned b);

/* The start state of g: expansions of the root's alternatives, in a->sets; its offset or -1. */
int64_t grammar_set_start(struct grammar_arena *a);

/* ---------------------------------------------------------------- matcher state */

/* A lazy matcher's scan of the free output for its triggers (grammar_lazy.c). */
enum { GRAMMAR_LZ_START = 0, GRAMMAR_LZ_THINK, GRAMMAR_LZ_ANSWER };

struct grammar_lazy_state {
    struct grammar_lazy cfg;
    bool active;     /* a trigger fired: the matcher is eager from then on */
    uint8_t phase;   /* GRAMMAR_LZ_*: before a possible <think>, inside it, in the answer */
    uint8_t n_open;  /* START: bytes of "<think>" seen (after blanks) */
    uint8_t n_close; /* THINK: bytes of "</think>" matched */
    uint8_t n_head;  /* ANSWER: its first non-blank bytes, saturated at GRAMMAR_TRIGGER_MAX + 1 */
    char head[GRAMMAR_TRIGGER_MAX];
    uint8_t n_tail; /* ANSWER: its last bytes */
    char tail[GRAMMAR_TRIGGER_MAX];
};

/* grammar_matcher_accept of an inactive lazy matcher. */
int grammar_lazy_accept(struct grammar_matcher *m, struct grammar_arena *a, int32_t t);

struct grammar_matcher {
    struct grammar *g;
    struct grammar_lazy_state *lazy; /* NULL: eager */
    /* Stacks bottom-first, flattened: stack i is pos[off[i] .. off[i + 1]). */
    int32_t *pos;
    int32_t *off; /* (n_stacks + 1) */
    int32_t n_stacks;
    size_t cap_pos, cap_off;
    bool done; /* the empty stack is in the state */
};

/* Interns the matcher's state into a->sets (after grammar_arena_reset); its offset or -1. */
int64_t grammar_matcher_intern(struct grammar_arena *a, const struct grammar_matcher *m);
/* Replaces the matcher's state with the set at a->sets offset `off`. 0, ERR_NOMEM, ERR_TOO_BIG. */
int grammar_matcher_store(struct grammar_matcher *m, struct grammar_arena *a, size_t off);

/* ---------------------------------------------------------------- mask cache (grammar_mask.c) */

void grammar_cache_free(struct grammar_cache *c);

#endif
