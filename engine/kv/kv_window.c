/* Sink-window KV eviction policy: which blocks a sequence drops, and the bounds. See kv_window.h;
 * the bookkeeping is kv_cache_seq_evict, the key re-rotation model_kv_window_evict. */
#include "engine/kv/kv_window.h"

#include "common/err.h"

#include <stdio.h>
#include <string.h>

void kv_window_default(struct kv_window *w)
{
    w->mode = KV_WINDOW_NONE;
    w->sink_tokens = KV_WINDOW_DEFAULT_SINK_TOKENS;
    w->window_tokens = KV_WINDOW_DEFAULT_WINDOW_TOKENS;
}

bool kv_window_mode_parse(const char *name, enum kv_window_mode *out)
{
    if (!name) return false;
    if (strcmp(name, "none") == 0) {
        *out = KV_WINDOW_NONE;
        return true;
    }
    if (strcmp(name, "sink-window") == 0) {
        *out = KV_WINDOW_SINK;
        return true;
    }
    return false;
}

const char *kv_window_mode_name(enum kv_window_mode mode)
{
    return mode == KV_WINDOW_SINK ? "sink-window" : "none";
}

int kv_window_sink_blocks(const struct kv_window *w, int block_size)
{
    return (int)(((long)w->sink_tokens + block_size - 1) / block_size);
}

long kv_window_max_tokens(const struct kv_window *w, int block_size, int n_new)
{
    long sinks = (long)kv_window_sink_blocks(w, block_size) * block_size;
    return sinks + w->window_tokens + (block_size - 1) + n_new;
}

int kv_window_check(const struct kv_window *w, int block_size, int max_seq_tokens, int max_chunk,
                    char *err, size_t errlen)
{
    if (w->mode == KV_WINDOW_NONE) return 0;
    if (w->mode != KV_WINDOW_SINK || block_size < 1 || max_chunk < 1) {
        snprintf(err, errlen, "kv eviction: unknown mode or bad geometry");
        return ERR_INVAL;
    }
    if (w->sink_tokens < 0 || w->sink_tokens > KV_WINDOW_MAX_TOKENS) {
        snprintf(err, errlen, "kv eviction: sink_tokens %d outside [0, %d]", w->sink_tokens,
                 KV_WINDOW_MAX_TOKENS);
        return ERR_INVAL;
    }
    if (w->window_tokens < 1 || w->window_tokens > KV_WINDOW_MAX_TOKENS) {
        snprintf(err, errlen, "kv eviction: window_tokens %d outside [1, %d]", w->window_tokens,
                 KV_WINDOW_MAX_TOKENS);
        return ERR_INVAL;
    }
    long need = kv_window_max_tokens(w, block_size, max_chunk);
    if (need > max_seq_tokens) {
        snprintf(err, errlen,
                 "kv eviction: sink_tokens %d (%d rounded to blocks of %d) + window_tokens %d + "
                 "%d + a chunk of %d = %ld tokens exceed the %d a sequence can hold",
                 w->sink_tokens, kv_window_sink_blocks(w, block_size) * block_size, block_size,
                 w->window_tokens, block_size - 1, max_chunk, need, max_seq_tokens);
        return ERR_INVAL;
    }
    return 0;
}

int kv_window_plan(const struct kv_window *w, int block_size, int len, int *first)
{
    if (w->mode != KV_WINDOW_SINK) return 0;
    int sink = kv_window_sink_blocks(w, block_size);
    long tail = (long)len - (long)sink * block_size; /* tokens after the sinks */
    if (tail - w->window_tokens < block_size) return 0;
    *first = sink;
    return (int)((tail - w->window_tokens) / block_size);
}
