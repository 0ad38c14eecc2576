/* StreamingLLM's positions for sink-window eviction: after kv_cache_seq_evict drops blocks from
 * the middle of a sequence, the keys behind them are re-rotated by -dropped positions (llama.cpp's
 * K-shift, llama_kv_cache::build_graph_shift), so a kept key carries the rope position of its slot
 * in the cache and queries run at cache positions too. Values carry no position and stay as they
 * are. Backend-neutral: a block goes out through kv_block_read, its K rows are decoded, rotated by
 * the backend's own rope op (the very angles the forward pass uses) and encoded back. Not the
 * policy (engine/kv/kv_window.c) nor the bookkeeping (kv_cache.c). Inference thread. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>

bool model_kv_shift_supported(const struct model *m)
{
    return m->be->ops->kv_block_read && m->be->ops->kv_block_write;
}

/* Layer il's rope parameters for a shift: those of the forward pass (run_layer) with the cos/sin
 * magnitude 1, so that rotating twice multiplies no magnitude in twice. */
static struct backend_rope_params shift_params(const struct model *m, int il)
{
    const struct model_hparams *hp = &m->hp;
    bool swa = m->layers[il].swa;
    struct backend_rope_params rp = {
        .mode = hp->rope_mode,
        .n_rot = hp->n_rot,
        .freq_base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base,
        .freq_scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale,
        .ext_factor = hp->rope_ext_factor,
        .attn_factor = 1.0f,
        .beta_fast = hp->rope_beta_fast,
        .beta_slow = hp->rope_beta_slow,
        .n_ctx_orig = hp->n_ctx_orig,
        .freq_factors = m->rope_factors,
    };
    /* the rope op multiplies YaRN's magnitude 1 + 0.1 ln(1 / freq_scale) in: cancel it */
    if (rp.ext_factor != 0.0f) rp.attn_factor = 1.0f / (1.0f + 0.1f * logf(1.0f / rp.freq_scale));
    return rp;
}

int model_kv_shift(struct model *m, const int32_t *blocks, int n, int delta)
{
    if (!m->kv_ready) return ERR_BAD_STATE;
    if (!model_kv_shift_supported(m)) return ERR_UNSUPPORTED;
    if (n <= 0 || delta == 0) return 0;
    const struct model_hparams *hp = &m->hp;
    const struct backend_ops *op = m->be->ops;
    enum quant_type t = m->opt.kv_type;
    int bs = m->kv_block_size, rows = bs * hp->n_head_kv;
    size_t elems = (size_t)rows * (size_t)hp->head_dim;
    size_t part = quant_row_bytes(t, elems); /* one layer's K (or V) of one block */
    size_t bytes = model_kv_block_bytes(m);
    int rc = ERR_NOMEM;
    unsigned char *rec = malloc(bytes);
    float *host = malloc(elems * sizeof(float));
    int32_t *pos = malloc((size_t)bs * sizeof(int32_t));
    float *dev = op->alloc(m->be, elems * sizeof(float));
    if (!rec || !host || !pos || !dev) goto out;
    if (part == 0 || bytes != 2 * (size_t)hp->n_layer * part) {
        rc = ERR_INVAL;
        goto out;
    }
    for (int i = 0; i < bs; i++) pos[i] = -delta;
    for (int b = 0; b < n; b++) {
        rc = op->kv_block_read(m->be, blocks[b], rec, bytes);
        if (rc) goto out;
        for (int il = 0; il < hp->n_layer; il++) {
            unsigned char *k = rec + 2 * (size_t)il * part; /* K, then V, per layer */
            struct backend_rope_params rp = shift_params(m, il);
            quant_dequantize_row(t, k, host, elems);
            rc = op->upload(m->be, dev, host, elems * sizeof(float));
            if (!rc) rc = op->rope(m->be, dev, pos, bs, hp->n_head_kv, hp->head_dim, &rp);
            if (!rc) rc = op->download(m->be, host, dev, elems * sizeof(float));
            if (!rc) rc = quant_quantize_row(t, host, k, elems);
            if (rc) goto out;
        }
        rc = op->kv_block_write(m->be, blocks[b], rec, bytes);
        if (rc) goto out;
    }
    rc = 0;
out:
    if (dev) op->free(m->be, dev);
    free(pos);
    free(host);
    free(rec);
    return rc;
}

int model_kv_window_evict(struct model *m, struct kv_cache *kv, int seq, const struct kv_window *w,
                          int *evicted)
{
    int bs = kv_cache_block_size(kv), first = 0;
    *evicted = 0;
    int n = kv_window_plan(w, bs, kv_cache_seq_len(kv, seq), &first);
    if (n == 0) return 0;
    if (!model_kv_shift_supported(m)) return ERR_UNSUPPORTED;
    int rc = kv_cache_seq_evict(kv, seq, first, n);
    if (rc) return rc;
    int n_blocks;
    const int32_t *table = kv_cache_seq_blocks(kv, seq, &n_blocks);
    rc = model_kv_shift(m, table + first, n_blocks - first, n * bs);
    if (rc) return rc;
    *evicted = n * bs;
    return 0;
}
