/* Sink-window KV eviction (StreamingLLM, Xiao et al. 2023, arXiv:2309.17453): the policy half.
 * A sequence in sink-window mode keeps the blocks of its first sink_tokens tokens (the attention
 * sinks, rounded up to whole blocks) and at least its last window_tokens tokens; whole blocks
 * between them are dropped, oldest first, as soon as dropping one still leaves window_tokens
 * behind it. So the sequence runs on with at most sink_blocks + ceil((window_tokens + block_size
 * - 1 + n_new) / block_size) blocks however long it grows.
 *
 * Positions: StreamingLLM's, positions within the cache: a kept key's rope position is its slot
 * in the kept window, not its index in the text, so a sequence never uses a position past
 * sink_blocks * block_size + window_tokens + block_size - 1 + n_new. kv_cache_seq_evict moves the
 * later blocks down; model_kv_window_evict (engine/model/model_kv_shift.c) re-rotates their
 * stored keys by -dropped tokens (llama.cpp's K-shift), which with rope's angles linear in the
 * position makes them equal to keys computed at the new positions, up to float rounding (and the
 * cache type's: f16 or q8_0 rounds again at every shift).
 *
 * Pure functions; any thread. */
#ifndef CINFER_ENGINE_KV_WINDOW_H
#define CINFER_ENGINE_KV_WINDOW_H

#include <stdbool.h>
#include <stddef.h>

enum kv_window_mode {
    KV_WINDOW_NONE = 0, /* keep every token; a sequence ends at the context (today's behaviour) */
    KV_WINDOW_SINK,     /* "sink-window" */
};

#define KV_WINDOW_MODE_NAMES            "none|sink-window"
#define KV_WINDOW_DEFAULT_SINK_TOKENS   4    /* StreamingLLM's choice */
#define KV_WINDOW_DEFAULT_WINDOW_TOKENS 1024 /* a window most models were trained well past */
#define KV_WINDOW_MAX_TOKENS            (1 << 24)

struct kv_window {
    enum kv_window_mode mode;
    int sink_tokens;   /* >= 0; rounded up to whole blocks */
    int window_tokens; /* >= 1 */
};

/* Defaults: mode none, the default sink and window sizes. */
void kv_window_default(struct kv_window *w);

/* "none" or "sink-window" (case-sensitive). False for anything else or NULL. */
bool kv_window_mode_parse(const char *name, enum kv_window_mode *out);
const char *kv_window_mode_name(enum kv_window_mode mode);

/* Checks w for a pool of block_size-token blocks whose sequences hold at most max_seq_tokens
 * tokens and that feeds at most max_chunk new tokens at once: the sizes in range, and the
 * sink-window bound (kv_window_max_tokens) within max_seq_tokens. 0, or ERR_INVAL with a message
 * naming the field in err. Mode none is always valid. */
int kv_window_check(const struct kv_window *w, int block_size, int max_seq_tokens, int max_chunk,
                    char *err, size_t errlen);

/* Whole blocks of the sinks: ceil(sink_tokens / block_size). */
int kv_window_sink_blocks(const struct kv_window *w, int block_size);

/* The most tokens a sink-window sequence holds right after appending n_new tokens:
 * sink blocks + window_tokens + block_size - 1 + n_new. */
long kv_window_max_tokens(const struct kv_window *w, int block_size, int n_new);

/* Blocks to drop from a sequence of len tokens before it grows: the count, with the table index
 * of the first in *first (the block after the sinks). 0 in mode none, or while dropping the oldest
 * window block would leave fewer than window_tokens tokens after it. */
int kv_window_plan(const struct kv_window *w, int block_size, int len, int *first);

#endif
