/* The CUDA backend's ops, host side: argument checks as the CPU backend makes them (so both
 * backends refuse the same calls with the same codes), host arrays staged to the device, and the
 * choice of kernel. Matmuls of up to CUDA_MATVEC_MAX_TOKENS tokens read the weight's blocks
 * directly (cuda_matmul.cu); larger ones go through cuBLAS, with quantized weights dequantized to
 * f16 a chunk of rows at a time into the fixed workspace and activations rounded to f16 (bf16 for
 * BF16 weights). Every op queues work on the backend's stream and returns without waiting, except
 * those that hand results back to the host (moe_route). */
#include "engine/backend/cuda/cuda_backend.h"

#include "common/err.h"

#include <math.h>
#include <string.h>

/* ---- matmul --------------------------------------------------------------------------------------- */

/* y (nt, rows) = x W^T through cuBLAS, for nt > CUDA_MATVEC_MAX_TOKENS. */
static int matmul_blas(struct cuda_backend *cb, const struct backend_weight *w, const float *x,
                       float *y, int nt)
{
    const int rows = (int)w->desc.rows, cols = (int)w->desc.cols;
    const enum quant_type type = w->desc.type;
    if (type == QUANT_F32)
        return cuda_blas_gemm(cb, CUDA_GEMM_F32, rows, nt, cols, w->dev, cols, x, cols, y, rows);
    const bool bf16 = type == QUANT_BF16;
    const enum cuda_gemm_type gt = bf16 ? CUDA_GEMM_BF16 : CUDA_GEMM_F16;
    const size_t half_row = (size_t)cols * 2;
    const int tok_chunk = (int)(cb->ws_x_bytes / half_row),
              row_chunk = (int)(cb->ws_w_bytes / half_row);
    if (tok_chunk < 1 || row_chunk < 1) return ERR_TOO_BIG;
    int rc = 0;
    for (int t0 = 0; !rc && t0 < nt; t0 += tok_chunk) {
        const int n = nt - t0 < tok_chunk ? nt - t0 : tok_chunk;
        rc = cuda_status(cb,
                         cuda_launch_to_half(cb->stream, x + (size_t)t0 * cols, cb->ws_x,
                                             (size_t)n * cols, bf16),
                         "matmul: activations to f16");
        float *yt = y + (size_t)t0 * rows;
        if (!rc && (type == QUANT_F16 || type == QUANT_BF16)) {
            rc = cuda_blas_gemm(cb, gt, rows, n, cols, w->dev, cols, cb->ws_x, cols, yt, rows);
            continue;
        }
        for (int r0 = 0; !rc && r0 < rows; r0 += row_chunk) {
            const int nr = rows - r0 < row_chunk ? rows - r0 : row_chunk;
            rc = cuda_status(cb,
                             cuda_launch_dequant_rows(
                                 cb->stream, type, (const char *)w->dev + (size_t)r0 * w->row_bytes,
                                 w->row_bytes, nr, cols, cb->ws_w, false),
                             "matmul: dequantize");
            if (!rc)
                rc = cuda_blas_gemm(cb, CUDA_GEMM_F16, nr, n, cols, cb->ws_w, cols, cb->ws_x, cols,
                                    yt + r0, rows);
        }
    }
    return rc;
}

/* The device rows of w as the kernels read them: the file's blocks of a matrix, or the floats a
 * one-row weight was prepared as (Qwen2-MoE's shared-expert gate is multiplied, not added). */
static const void *weight_rows(const struct backend_weight *w, enum quant_type *type,
                               size_t *row_bytes)
{
    *type = w->dev ? w->desc.type : QUANT_F32;
    *row_bytes = w->dev ? w->row_bytes : (size_t)w->desc.cols * sizeof(float);
    return w->dev ? w->dev : (const void *)w->f32;
}

int cuda_ops_matmul(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                    int n_tokens)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!w || !x || !y || n_tokens < 0) return ERR_INVAL;
    if (n_tokens == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    if (n_tokens > CUDA_MATVEC_MAX_TOKENS && cb->blas && w->dev)
        return matmul_blas(cb, w, x, y, n_tokens);
    enum quant_type type;
    size_t rb;
    const void *rows = weight_rows(w, &type, &rb);
    return cuda_status(cb,
                       cuda_launch_matvec(cb->stream, type, rows, rb, (int)w->desc.rows,
                                          (int)w->desc.cols, x, y, n_tokens),
                       "matmul");
}

/* ---- rows and elementwise ops --------------------------------------------------------------------- */

int cuda_ops_get_rows(struct backend *b, const struct backend_weight *w, const int32_t *ids, int n,
                      float *out)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!w || (n > 0 && (!ids || !out)) || n < 0) return ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->desc.rows) return ERR_RANGE;
    if (n == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    const int32_t *d_ids = cuda_stage_put(cb, ids, (size_t)n * sizeof(*ids));
    if (!d_ids) return ERR_INTERNAL;
    enum quant_type type;
    size_t rb;
    const void *rows = weight_rows(w, &type, &rb);
    return cuda_status(
        cb, cuda_launch_get_rows(cb->stream, type, rows, rb, (int)w->desc.cols, d_ids, n, out),
        "get_rows");
}

int cuda_ops_add_bias(struct backend *b, float *y, const struct backend_weight *bias, int n_tokens)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!y || !bias || !bias->f32 || n_tokens < 0) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc
              : cuda_status(
                    cb,
                    cuda_launch_add_bias(cb->stream, y, bias->f32, n_tokens, (int)bias->desc.cols),
                    "add_bias");
}

int cuda_ops_add(struct backend *b, float *y, const float *x, size_t n)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n > 0 && (!y || !x)) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc : cuda_status(cb, cuda_launch_add(cb->stream, y, x, n), "add");
}

int cuda_ops_rmsnorm(struct backend *b, const float *x, const struct backend_weight *gain, float *y,
                     int n_tokens, int dim, float eps)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!x || !y || !gain || !gain->f32 || n_tokens < 0 || dim <= 0) return ERR_INVAL;
    if (gain->desc.cols != dim) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc
              : cuda_status(cb,
                            cuda_launch_rmsnorm(cb->stream, x, gain->f32, y, n_tokens, dim, eps),
                            "rmsnorm");
}

int cuda_ops_rmsnorm_heads(struct backend *b, float *x, const struct backend_weight *gain,
                           int n_rows, int head_dim, float eps)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!x || !gain || !gain->f32 || n_rows < 0 || head_dim <= 0) return ERR_INVAL;
    if (gain->desc.cols != head_dim) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc
              : cuda_status(cb,
                            cuda_launch_rmsnorm(cb->stream, x, gain->f32, x, n_rows, head_dim, eps),
                            "rmsnorm_heads");
}

int cuda_ops_rope(struct backend *b, float *x, const int32_t *pos, int n_tokens, int n_heads,
                  int head_dim, const struct backend_rope_params *p)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!x || !pos || !p || n_tokens < 0 || n_heads <= 0 || head_dim <= 0) return ERR_INVAL;
    if (p->mode != BACKEND_ROPE_NORMAL && p->mode != BACKEND_ROPE_NEOX) return ERR_INVAL;
    if (p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 != 0) return ERR_INVAL;
    if (!(p->freq_base > 0.0f) || !(p->freq_scale > 0.0f) || !isfinite(p->attn_factor))
        return ERR_INVAL;
    if (p->ext_factor != 0.0f && (!isfinite(p->ext_factor) || !(p->beta_fast > 0.0f) ||
                                  !(p->beta_slow > 0.0f) || p->n_ctx_orig <= 0))
        return ERR_INVAL;
    if (n_tokens == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    struct cuda_rope_args a = {.mode = p->mode,
                               .n_rot = p->n_rot,
                               .n_tokens = n_tokens,
                               .n_heads = n_heads,
                               .head_dim = head_dim,
                               .theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot),
                               .freq_scale = p->freq_scale,
                               .ext_factor = p->ext_factor,
                               .mscale = p->attn_factor};
    if (p->ext_factor != 0.0f) {
        /* ggml_rope_yarn_corr_dims and the magnitude correction, as cpu_ops.c */
        const float two_pi = 6.283185307179586f, nr = (float)p->n_rot;
        const float lb = 2.0f * logf(p->freq_base), ctx = (float)p->n_ctx_orig;
        const float start = floorf(nr * logf(ctx / (p->beta_fast * two_pi)) / lb);
        const float end = ceilf(nr * logf(ctx / (p->beta_slow * two_pi)) / lb);
        a.corr0 = start > 0.0f ? start : 0.0f;
        a.corr1 = end < nr - 1.0f ? end : nr - 1.0f;
        a.mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    }
    a.pos = cuda_stage_put(cb, pos, (size_t)n_tokens * sizeof(*pos));
    if (p->freq_factors)
        a.freq_factors =
            cuda_stage_put(cb, p->freq_factors, (size_t)(p->n_rot / 2) * sizeof(float));
    if (!a.pos || (p->freq_factors && !a.freq_factors)) return ERR_INTERNAL;
    return cuda_status(cb, cuda_launch_rope(cb->stream, x, &a), "rope");
}

int cuda_ops_silu_mul(struct backend *b, float *gate, const float *up, size_t n)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n > 0 && (!gate || !up)) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc : cuda_status(cb, cuda_launch_silu_mul(cb->stream, gate, up, n), "silu_mul");
}

int cuda_ops_gelu_mul(struct backend *b, float *gate, const float *up, size_t n)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n > 0 && (!gate || !up)) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc
              : cuda_status(cb, cuda_launch_gelu_mul(cb->stream, gate, up, n, cb->gelu_f16),
                            "gelu_mul");
}

int cuda_ops_scale(struct backend *b, float *x, size_t n, float s)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n > 0 && !x) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc : cuda_status(cb, cuda_launch_scale(cb->stream, x, n, s), "scale");
}

int cuda_ops_softcap(struct backend *b, float *x, size_t n, float cap)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if ((n > 0 && !x) || !(cap > 0.0f) || !isfinite(cap)) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc : cuda_status(cb, cuda_launch_softcap(cb->stream, x, n, cap), "softcap");
}

int cuda_ops_gather_rows(struct backend *b, const float *src, const int32_t *idx, int n, int dim,
                         float *dst)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n < 0 || dim <= 0 || (n > 0 && (!src || !idx || !dst))) return ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (idx[i] < 0) return ERR_RANGE;
    if (n == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    const int32_t *d_idx = cuda_stage_put(cb, idx, (size_t)n * sizeof(*idx));
    if (!d_idx) return ERR_INTERNAL;
    return cuda_status(cb, cuda_launch_gather_rows(cb->stream, src, d_idx, n, dim, dst),
                       "gather_rows");
}

/* ---- mixture of experts --------------------------------------------------------------------------- */

int cuda_ops_moe_route(struct backend *b, const float *logits, int n_rows, int n_expert, int k,
                       bool norm, int32_t *ids, float *w)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n_rows < 0 || n_expert <= 0 || k < 1 || k > n_expert) return ERR_INVAL;
    if (n_rows > 0 && (!logits || !ids || !w)) return ERR_INVAL;
    if (n_rows == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    /* per row in the routing workspace: n_expert probabilities, then k ids and k weights */
    const size_t per_row = ((size_t)n_expert + 2 * (size_t)k) * 4;
    const int chunk = (int)(cb->ws_route_bytes / per_row);
    if (chunk < 1) return ERR_TOO_BIG;
    for (int r0 = 0; !rc && r0 < n_rows; r0 += chunk) {
        const int n = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        float *p = cb->ws_route;
        int32_t *d_ids = (int32_t *)(p + (size_t)n * n_expert);
        float *d_w = (float *)(d_ids + (size_t)n * k);
        const size_t nk = (size_t)n * k * 4;
        rc = cuda_status(cb,
                         cuda_launch_moe_route(cb->stream, logits + (size_t)r0 * n_expert, n,
                                               n_expert, k, norm, p, d_ids, d_w),
                         "moe_route");
        if (!rc)
            rc = cuda_status(cb,
                             cudaMemcpyAsync(ids + (size_t)r0 * k, d_ids, nk,
                                             cudaMemcpyDeviceToHost, cb->stream),
                             "moe_route download");
        if (!rc)
            rc = cuda_status(
                cb,
                cudaMemcpyAsync(w + (size_t)r0 * k, d_w, nk, cudaMemcpyDeviceToHost, cb->stream),
                "moe_route download");
        if (!rc) rc = cuda_status(cb, cudaStreamSynchronize(cb->stream), "moe_route sync");
    }
    return rc;
}

int cuda_ops_moe_combine(struct backend *b, const float *x, const float *w, int n_rows, int k,
                         int dim, float *out)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n_rows < 0 || k < 1 || dim <= 0 || (n_rows > 0 && (!x || !w || !out))) return ERR_INVAL;
    int rc = cuda_enter(cb);
    /* the host weights go through the staging ring a chunk of rows at a time */
    const int chunk = (int)((1u << 20) / ((size_t)k * sizeof(float)));
    if (chunk < 1) return ERR_TOO_BIG;
    for (int r0 = 0; !rc && r0 < n_rows; r0 += chunk) {
        const int n = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        const float *d_w = cuda_stage_put(cb, w + (size_t)r0 * k, (size_t)n * k * sizeof(float));
        if (!d_w) return ERR_INTERNAL;
        rc = cuda_status(cb,
                         cuda_launch_moe_combine(cb->stream, x + (size_t)r0 * k * dim, d_w, n, k,
                                                 dim, out + (size_t)r0 * dim),
                         "moe_combine");
    }
    return rc;
}

int cuda_ops_scale_rows_sigmoid(struct backend *b, float *x, const float *g, int n_rows, int dim)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (n_rows < 0 || dim <= 0 || (n_rows > 0 && (!x || !g))) return ERR_INVAL;
    int rc = cuda_enter(cb);
    return rc ? rc
              : cuda_status(cb, cuda_launch_scale_rows_sigmoid(cb->stream, x, g, n_rows, dim),
                            "scale_rows_sigmoid");
}

/* ---- KV cache and attention ----------------------------------------------------------------------- */

static struct cuda_kv_args kv_args(const struct cuda_backend *cb, int layer)
{
    char *kl = (char *)cb->kv_mem + (size_t)layer * 2 * cb->kv_layer_bytes;
    return (struct cuda_kv_args){.type = cb->kv.type,
                                 .n_blocks = cb->kv.n_blocks,
                                 .block_size = cb->kv.block_size,
                                 .n_kv_heads = cb->kv.n_kv_heads,
                                 .head_dim = cb->kv.head_dim,
                                 .head_bytes = cb->kv_head_bytes,
                                 .k = kl,
                                 .v = kl + cb->kv_layer_bytes};
}

int cuda_ops_kv_store(struct backend *b, int layer, const float *k, const float *v,
                      const struct backend_batch *batch)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !k || !v || !batch) return ERR_INVAL;
    if (batch->n_tokens > 0 && !batch->slots) return ERR_INVAL;
    const int64_t n_slots = (int64_t)cb->kv.n_blocks * cb->kv.block_size;
    for (int t = 0; t < batch->n_tokens; t++)
        if (batch->slots[t] < 0 || batch->slots[t] >= n_slots) return ERR_RANGE;
    if (batch->n_tokens == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    const int64_t *d_slots = cuda_stage_put(cb, batch->slots, (size_t)batch->n_tokens * 8);
    if (!d_slots) return ERR_INTERNAL;
    const struct cuda_kv_args kv = kv_args(cb, layer);
    return cuda_status(cb, cuda_launch_kv_store(cb->stream, &kv, k, v, d_slots, batch->n_tokens),
                       "kv_store");
}

int cuda_ops_attention(struct backend *b, int layer, const float *q, float *out,
                       const struct backend_batch *batch, int n_heads,
                       const struct backend_attn_params *p)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (layer < 0 || layer >= cb->kv.n_layers || !q || !out || !batch || !p) return ERR_INVAL;
    if (n_heads <= 0 || n_heads % cb->kv.n_kv_heads != 0) return ERR_INVAL;
    if (!isfinite(p->scale) || !(p->softcap >= 0.0f) || !isfinite(p->softcap) || p->window < 0)
        return ERR_INVAL;
    if (batch->n_tokens < 0) return ERR_INVAL;
    if (batch->n_tokens == 0) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    struct cuda_batch_dev d;
    if ((rc = cuda_batch_use(cb, batch, &d))) return rc;
    const struct cuda_attn_args a = {.kv = kv_args(cb, layer),
                                     .q = q,
                                     .out = out,
                                     .n_tokens = batch->n_tokens,
                                     .n_heads = n_heads,
                                     .group = n_heads / cb->kv.n_kv_heads,
                                     .scale = p->scale,
                                     .softcap = p->softcap,
                                     .window = p->window,
                                     .pos = d.pos,
                                     .seq = d.seq,
                                     .bt = d.bt,
                                     .max_blocks = batch->max_blocks};
    return cuda_status(cb, cuda_launch_attention(cb->stream, &a), "attention");
}
