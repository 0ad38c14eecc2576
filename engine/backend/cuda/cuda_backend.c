/* The CUDA backend's lifecycle and memory: device selection, the stream, device memory for
 * activations, weights uploaded once at weight_prepare, the paged KV cache, the fixed workspaces,
 * and the staging of each call's host arrays. The ops themselves are in cuda_ops.c (host side) and
 * the *.cu files (kernels). A CUDA failure becomes an err.h code, logged once; a sticky one (a
 * kernel fault, which loses the context) marks the backend faulted so every later op fails fast. */
#include "engine/backend/cuda/cuda_backend.h"

#include "common/err.h"
#include "common/log.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Workspace sizes: activations as f16 for cuBLAS and dequantized weight rows are processed in
 * chunks that fit, so these bound the memory the step loop needs whatever the batch. */
#define CUDA_WS_X_BYTES  (64u << 20)
#define CUDA_WS_W_BYTES  (64u << 20)
#define CUDA_STAGE_BYTES (8u << 20)
#define CUDA_ROUTE_BYTES (4u << 20)

int cuda_status(struct cuda_backend *cb, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    bool sticky = e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
                  e == cudaErrorIllegalInstruction || e == cudaErrorMisalignedAddress ||
                  e == cudaErrorHardwareStackError || e == cudaErrorInvalidAddressSpace ||
                  e == cudaErrorInvalidPc || e == cudaErrorAssert || e == cudaErrorLaunchTimeout ||
                  e == cudaErrorECCUncorrectable || e == cudaErrorUnknown;
    if (!cb->faulted)
        log_error("cuda error", LOG_S("op", what), LOG_S("error", cudaGetErrorName(e)),
                  LOG_S("detail", cudaGetErrorString(e)), LOG_B("sticky", sticky));
    if (sticky) cb->faulted = 1;
    return e == cudaErrorMemoryAllocation ? ERR_NOMEM : ERR_INTERNAL;
}

int cuda_launched(struct cuda_backend *cb, const char *what)
{
    return cuda_status(cb, cudaGetLastError(), what);
}

int cuda_enter(struct cuda_backend *cb)
{
    if (cb->faulted) return ERR_INTERNAL;
    return cuda_status(cb, cudaSetDevice(cb->device), "cudaSetDevice");
}

/* cudaMalloc with a log line naming the sizes when the device is full; NULL on failure. */
static void *cuda_dev_alloc(struct cuda_backend *cb, size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    log_error("cuda: out of device memory", LOG_S("for", what), LOG_I("bytes", (long long)bytes),
              LOG_I("device_free", (long long)free_b), LOG_I("device_total", (long long)total_b),
              LOG_S("error", cudaGetErrorName(e)));
    return NULL;
}

/* ---- the staging ring and cached uploads -------------------------------------------------------- */

const void *cuda_stage_put(struct cuda_backend *cb, const void *src, size_t n)
{
    struct cuda_stage *st = &cb->stage;
    size_t need = (n + 255) & ~(size_t)255;
    if (n == 0) return st->dev;
    if (need > st->cap) {
        log_error("cuda: host array larger than the staging ring", LOG_I("bytes", (long long)n),
                  LOG_I("ring", (long long)st->cap));
        return NULL;
    }
    if (st->head + need > st->cap) {
        /* wrapping: the slots at the start may still be read by queued copies; wait for them
         * (once per CUDA_STAGE_BYTES staged, so rarely) */
        if (cuda_status(cb, cudaEventRecord(st->wrap, cb->stream), "stage event") ||
            cuda_status(cb, cudaEventSynchronize(st->wrap), "stage wait"))
            return NULL;
        st->head = 0;
    }
    char *h = (char *)st->host + st->head, *d = (char *)st->dev + st->head;
    memcpy(h, src, n);
    if (cuda_status(cb, cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, cb->stream), "stage copy"))
        return NULL;
    st->head += need;
    return d;
}

/* Makes room for `len` bytes in a cached upload: waits for its last copy, grows it (pinned host
 * and device memory, after the stream has drained) when needed. 0 or an error. */
static int upload_reserve(struct cuda_backend *cb, struct cuda_upload *u, size_t len)
{
    if (u->valid && cuda_status(cb, cudaEventSynchronize(u->done), "upload wait"))
        return ERR_INTERNAL;
    u->valid = false;
    if (len <= u->cap) return 0;
    size_t cap = len + len / 2 + 4096;
    int rc = cuda_status(cb, cudaStreamSynchronize(cb->stream), "upload grow");
    if (rc) return rc;
    cudaFreeHost(u->host);
    cudaFree(u->dev);
    u->host = u->dev = NULL;
    u->cap = 0;
    if ((rc = cuda_status(cb, cudaMallocHost(&u->host, cap), "cudaMallocHost"))) return rc;
    if (!(u->dev = cuda_dev_alloc(cb, cap, "batch arrays"))) return ERR_NOMEM;
    u->cap = cap;
    return 0;
}

static int upload_commit(struct cuda_backend *cb, struct cuda_upload *u, size_t len)
{
    int rc = cuda_status(
        cb, cudaMemcpyAsync(u->dev, u->host, len, cudaMemcpyHostToDevice, cb->stream), "upload");
    if (!rc) rc = cuda_status(cb, cudaEventRecord(u->done, cb->stream), "upload event");
    if (rc) return rc;
    u->len = len;
    u->valid = true;
    return 0;
}

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* The checks of the CPU backend's attn_batch_check: every token's sequence, position and the
 * blocks its context reads (on the device an out-of-range block id would fault the context). */
static int batch_check(const struct cuda_backend *cb, const struct backend_batch *bt)
{
    if (bt->n_tokens < 0) return ERR_INVAL;
    if (bt->n_tokens == 0) return 0;
    if (!bt->pos || !bt->seq || !bt->block_tables || bt->n_seqs <= 0 || bt->max_blocks <= 0)
        return ERR_INVAL;
    int bs = cb->kv.block_size;
    for (int t = 0; t < bt->n_tokens; t++) {
        if (bt->pos[t] < 0) return ERR_RANGE;
        if (bt->seq[t] < 0 || bt->seq[t] >= bt->n_seqs) return ERR_RANGE;
        int64_t nblk = (int64_t)bt->pos[t] / bs + 1;
        if (nblk > bt->max_blocks) return ERR_RANGE;
        const int32_t *tab = bt->block_tables + (size_t)bt->seq[t] * bt->max_blocks;
        for (int64_t i = 0; i < nblk; i++)
            if (tab[i] < 0 || tab[i] >= cb->kv.n_blocks) return ERR_RANGE;
    }
    return 0;
}

/* Whether the uploaded batch is `bt` (same shape and contents). */
static bool batch_same(const struct cuda_backend *cb, const struct backend_batch *bt)
{
    const struct cuda_upload *u = &cb->batch;
    if (!u->valid || cb->b_tokens != bt->n_tokens || cb->b_seqs != bt->n_seqs ||
        cb->b_max_blocks != bt->max_blocks)
        return false;
    size_t nt = (size_t)bt->n_tokens, nbt = (size_t)bt->n_seqs * (size_t)bt->max_blocks;
    const char *h = u->host;
    return memcmp(h + cb->off_pos, bt->pos, nt * 4) == 0 &&
           memcmp(h + cb->off_seq, bt->seq, nt * 4) == 0 &&
           (!bt->slots || memcmp(h + cb->off_slots, bt->slots, nt * 8) == 0) &&
           memcmp(h + cb->off_bt, bt->block_tables, nbt * 4) == 0;
}

static int batch_upload(struct cuda_backend *cb, const struct backend_batch *bt)
{
    size_t nt = (size_t)bt->n_tokens, nbt = (size_t)bt->n_seqs * (size_t)bt->max_blocks;
    size_t off_pos = 0, off_seq = align256(nt * 4), off_slots = off_seq + align256(nt * 4);
    size_t off_bt = off_slots + align256(nt * 8), len = off_bt + align256(nbt * 4);
    int rc = upload_reserve(cb, &cb->batch, len);
    if (rc) return rc;
    char *h = cb->batch.host;
    memcpy(h + off_pos, bt->pos, nt * 4);
    memcpy(h + off_seq, bt->seq, nt * 4);
    if (bt->slots)
        memcpy(h + off_slots, bt->slots, nt * 8);
    else
        memset(h + off_slots, 0xff, nt * 8); /* never read: kv_store requires slots */
    memcpy(h + off_bt, bt->block_tables, nbt * 4);
    cb->off_pos = off_pos;
    cb->off_seq = off_seq;
    cb->off_slots = off_slots;
    cb->off_bt = off_bt;
    cb->b_tokens = bt->n_tokens;
    cb->b_seqs = bt->n_seqs;
    cb->b_max_blocks = bt->max_blocks;
    return upload_commit(cb, &cb->batch, len);
}

int cuda_batch_use(struct cuda_backend *cb, const struct backend_batch *bt,
                   struct cuda_batch_dev *out)
{
    int rc;
    if (!batch_same(cb, bt)) {
        if ((rc = batch_check(cb, bt)) || (rc = batch_upload(cb, bt))) {
            cb->batch.valid = false;
            return rc;
        }
    }
    const char *d = cb->batch.dev;
    out->pos = (const int32_t *)(d + cb->off_pos);
    out->seq = (const int32_t *)(d + cb->off_seq);
    out->slots = (const int64_t *)(d + cb->off_slots);
    out->bt = (const int32_t *)(d + cb->off_bt);
    return 0;
}

int cuda_workspace_reserve(struct cuda_backend *cb)
{
    if (cb->ws_ready) return 0;
    cb->ws_x = cuda_dev_alloc(cb, CUDA_WS_X_BYTES, "workspace (activations)");
    cb->ws_w = cb->ws_x ? cuda_dev_alloc(cb, CUDA_WS_W_BYTES, "workspace (weights)") : NULL;
    cb->ws_route = cb->ws_w ? cuda_dev_alloc(cb, CUDA_ROUTE_BYTES, "workspace (routing)") : NULL;
    if (!cb->ws_route) return ERR_NOMEM;
    cb->ws_x_bytes = CUDA_WS_X_BYTES;
    cb->ws_w_bytes = CUDA_WS_W_BYTES;
    cb->ws_route_bytes = CUDA_ROUTE_BYTES;
    cb->ws_ready = true;
    return 0;
}

/* ---- ops table: memory ------------------------------------------------------------------------ */

static void *cuda_alloc(struct backend *b, size_t bytes)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (cuda_enter(cb)) return NULL;
    void *p = cuda_dev_alloc(cb, bytes, "activations");
    if (p && cuda_status(cb, cudaMemsetAsync(p, 0, bytes, cb->stream), "cudaMemset")) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(struct backend *b, void *p)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!p || cudaSetDevice(cb->device) != cudaSuccess) return;
    cudaFree(p); /* synchronizes with the device: only called while growing or tearing down */
}

static int cuda_upload(struct backend *b, void *dst, const void *src, size_t bytes)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (bytes == 0) return 0;
    if (!dst || !src) return ERR_INVAL;
    int rc = cuda_enter(cb);
    /* from pageable memory the call returns once src has been staged, so src may change after */
    return rc ? rc
              : cuda_status(cb,
                            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream),
                            "upload");
}

static int cuda_download(struct backend *b, void *dst, const void *src, size_t bytes)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (bytes == 0) return 0;
    if (!dst || !src) return ERR_INVAL;
    int rc = cuda_enter(cb);
    if (!rc)
        rc = cuda_status(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream),
                         "download");
    if (!rc) rc = cuda_status(cb, cudaStreamSynchronize(cb->stream), "download");
    return rc;
}

static int cuda_sync(struct backend *b)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    int rc = cuda_enter(cb);
    return rc ? rc : cuda_status(cb, cudaStreamSynchronize(cb->stream), "sync");
}

static int cuda_mem_info(struct backend *b, size_t *free_bytes, size_t *total_bytes)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!free_bytes || !total_bytes) return ERR_INVAL;
    int rc = cuda_enter(cb);
    if (!rc) rc = cuda_status(cb, cudaStreamSynchronize(cb->stream), "sync");
    return rc ? rc : cuda_status(cb, cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

/* ---- weights ------------------------------------------------------------------------------------ */

static int cuda_weight_prepare(struct backend *b, const struct backend_weight_desc *desc,
                               struct backend_weight **out)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!desc || !out || !desc->data || desc->rows <= 0 || desc->cols <= 0) return ERR_INVAL;
    size_t row_bytes = quant_row_bytes(desc->type, (uint64_t)desc->cols);
    if (row_bytes == 0) return quant_block_elems(desc->type) == 0 ? ERR_UNSUPPORTED : ERR_INVAL;
    if ((uint64_t)desc->rows > SIZE_MAX / row_bytes) return ERR_TOO_BIG;
    if (desc->cols > INT32_MAX || desc->rows > INT32_MAX) return ERR_TOO_BIG;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    struct backend_weight *w = calloc(1, sizeof(*w));
    if (!w) return ERR_NOMEM;
    w->desc = *desc;
    w->row_bytes = row_bytes;
    if (desc->rows == 1) {
        /* norm gains and biases: floats, as every elementwise op reads them */
        float *host = malloc((size_t)desc->cols * sizeof(float));
        w->f32 = host ? cuda_dev_alloc(cb, (size_t)desc->cols * sizeof(float), "weight") : NULL;
        if (w->f32) {
            quant_dequantize_row(desc->type, desc->data, host, (size_t)desc->cols);
            rc = cuda_status(cb,
                             cudaMemcpy(w->f32, host, (size_t)desc->cols * sizeof(float),
                                        cudaMemcpyHostToDevice),
                             "weight upload");
        } else {
            rc = ERR_NOMEM;
        }
        free(host);
    } else {
        size_t bytes = row_bytes * (size_t)desc->rows;
        w->dev = cuda_dev_alloc(cb, bytes, "weight");
        rc = w->dev ? cuda_status(cb, cudaMemcpy(w->dev, desc->data, bytes, cudaMemcpyHostToDevice),
                                  "weight upload")
                    : ERR_NOMEM;
    }
    if (rc) {
        cudaFree(w->dev);
        cudaFree(w->f32);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void cuda_weight_free(struct backend *b, struct backend_weight *w)
{
    if (!w) return;
    if (cudaSetDevice(cuda_backend_of(b)->device) == cudaSuccess) {
        cudaFree(w->dev);
        cudaFree(w->f32);
    }
    free(w);
}

/* ---- the KV cache ------------------------------------------------------------------------------- */

static void cuda_kv_free(struct backend *b)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (cb->kv_mem && cudaSetDevice(cb->device) == cudaSuccess) cudaFree(cb->kv_mem);
    cb->kv_mem = NULL;
    cb->kv_ready = 0;
    memset(&cb->kv, 0, sizeof(cb->kv));
    cb->batch.valid = false;
}

static int cuda_kv_alloc(struct backend *b, const struct backend_kv_desc *d)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!d || d->n_layers <= 0 || d->n_blocks <= 0 || d->block_size <= 0 || d->n_kv_heads <= 0 ||
        d->head_dim <= 0)
        return ERR_INVAL;
    if (d->type != QUANT_F32 && d->type != QUANT_F16 && d->type != QUANT_Q8_0)
        return ERR_UNSUPPORTED;
    if (d->type == QUANT_Q8_0 && d->head_dim % QUANT_QK8_0 != 0) return ERR_UNSUPPORTED;
    if (d->head_dim > CUDA_ATTN_MAX_HEAD_DIM) {
        log_error("cuda: head dimension above what the attention kernel holds",
                  LOG_I("head_dim", d->head_dim), LOG_I("max", CUDA_ATTN_MAX_HEAD_DIM));
        return ERR_UNSUPPORTED;
    }
    size_t head_bytes = quant_row_bytes(d->type, (uint64_t)d->head_dim);
    size_t total = head_bytes, factors[] = {(size_t)d->n_layers, 2, (size_t)d->n_blocks,
                                            (size_t)d->block_size, (size_t)d->n_kv_heads};
    for (size_t i = 0; i < sizeof(factors) / sizeof(factors[0]); i++) {
        if (total > SIZE_MAX / factors[i]) return ERR_TOO_BIG;
        total *= factors[i];
    }
    if ((uint64_t)d->n_blocks * (uint64_t)d->block_size > INT32_MAX) return ERR_TOO_BIG;
    int rc = cuda_enter(cb);
    if (rc || (rc = cuda_workspace_reserve(cb))) return rc;
    cuda_kv_free(b);
    void *mem = cuda_dev_alloc(cb, total, "KV cache");
    if (!mem) return ERR_NOMEM;
    if ((rc = cuda_status(cb, cudaMemsetAsync(mem, 0, total, cb->stream), "cudaMemset"))) {
        cudaFree(mem);
        return rc;
    }
    cb->kv = *d;
    cb->kv_mem = mem;
    cb->kv_head_bytes = head_bytes;
    cb->kv_layer_bytes =
        (size_t)d->n_blocks * (size_t)d->block_size * (size_t)d->n_kv_heads * head_bytes;
    cb->kv_ready = 1;
    return 0;
}

static int cuda_kv_copy_block(struct backend *b, int src_block, int dst_block)
{
    struct cuda_backend *cb = cuda_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (src_block < 0 || src_block >= cb->kv.n_blocks || dst_block < 0 ||
        dst_block >= cb->kv.n_blocks)
        return ERR_RANGE;
    if (src_block == dst_block) return 0;
    int rc = cuda_enter(cb);
    if (rc) return rc;
    size_t blk = (size_t)cb->kv.block_size * (size_t)cb->kv.n_kv_heads * cb->kv_head_bytes;
    char *base = cb->kv_mem;
    /* K and V of every layer: 2 * n_layers parts of kv_layer_bytes, one strided 2-D copy */
    return cuda_status(cb,
                       cudaMemcpy2DAsync(base + (size_t)dst_block * blk, cb->kv_layer_bytes,
                                         base + (size_t)src_block * blk, cb->kv_layer_bytes, blk,
                                         2 * (size_t)cb->kv.n_layers, cudaMemcpyDeviceToDevice,
                                         cb->stream),
                       "kv_copy_block");
}

/* ggml's GELU table, built by the CPU backend's builder (cpu_backend.h, which only that backend
 * includes) so both backends hold one table from one copy of the formula. */
void cpu_ops_gelu_table(uint16_t *table);

/* ---- create and destroy -------------------------------------------------------------------------- */

static void cuda_destroy(struct backend *b)
{
    if (!b) return;
    struct cuda_backend *cb = cuda_backend_of(b);
    if (cudaSetDevice(cb->device) == cudaSuccess) {
        if (cb->stream) cudaStreamSynchronize(cb->stream);
        cuda_blas_close(cb->blas);
        cudaFree(cb->kv_mem);
        cudaFree(cb->ws_x);
        cudaFree(cb->ws_w);
        cudaFree(cb->ws_route);
        cudaFree(cb->gelu_f16);
        cudaFree(cb->stage.dev);
        cudaFreeHost(cb->stage.host);
        if (cb->stage.wrap) cudaEventDestroy(cb->stage.wrap);
        cudaFree(cb->batch.dev);
        cudaFreeHost(cb->batch.host);
        if (cb->batch.done) cudaEventDestroy(cb->batch.done);
        if (cb->stream) cudaStreamDestroy(cb->stream);
    }
    free(cb);
}

static const struct backend_ops cuda_ops_table = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .weight_prepare = cuda_weight_prepare,
    .weight_free = cuda_weight_free,
    .kv_alloc = cuda_kv_alloc,
    .kv_free = cuda_kv_free,
    .get_rows = cuda_ops_get_rows,
    .matmul = cuda_ops_matmul,
    .add_bias = cuda_ops_add_bias,
    .add = cuda_ops_add,
    .rmsnorm = cuda_ops_rmsnorm,
    .rmsnorm_heads = cuda_ops_rmsnorm_heads,
    .rope = cuda_ops_rope,
    .silu_mul = cuda_ops_silu_mul,
    .gelu_mul = cuda_ops_gelu_mul,
    .scale = cuda_ops_scale,
    .softcap = cuda_ops_softcap,
    .moe_route = cuda_ops_moe_route,
    .moe_combine = cuda_ops_moe_combine,
    .scale_rows_sigmoid = cuda_ops_scale_rows_sigmoid,
    .kv_store = cuda_ops_kv_store,
    .attention = cuda_ops_attention,
    .gather_rows = cuda_ops_gather_rows,
    .kv_copy_block = cuda_kv_copy_block,
    .sync = cuda_sync,
    .mem_info = cuda_mem_info,
};

/* Why no CUDA device can be used, for the log: the driver library first (a machine without the
 * NVIDIA driver), then what the runtime says. */
static const char *cuda_absent_reason(cudaError_t e)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
    dlclose(h);
    return e == cudaSuccess ? "no CUDA device" : cudaGetErrorString(e);
}

int cuda_backend_create(const struct backend_options *opt, struct backend **out)
{
    int dev = opt ? opt->device : 0, n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        log_info("cuda backend unavailable", LOG_S("reason", cuda_absent_reason(e)));
        return ERR_UNSUPPORTED;
    }
    if (dev < 0 || dev >= n) {
        log_error("cuda: no such device", LOG_I("device", dev), LOG_I("devices", n));
        return ERR_RANGE;
    }
    struct cuda_backend *cb = calloc(1, sizeof(*cb));
    if (!cb) return ERR_NOMEM;
    cb->base.ops = &cuda_ops_table;
    cb->device = dev;
    struct cudaDeviceProp prop;
    int rc = cuda_status(cb, cudaSetDevice(dev), "cudaSetDevice");
    if (!rc) rc = cuda_status(cb, cudaGetDeviceProperties(&prop, dev), "device properties");
    if (!rc && prop.major < 8) {
        log_error("cuda: the device is older than compute capability 8.0 (the oldest built)",
                  LOG_S("device", prop.name), LOG_I("major", prop.major),
                  LOG_I("minor", prop.minor));
        rc = ERR_UNSUPPORTED;
    }
    if (!rc)
        rc = cuda_status(cb, cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking),
                         "stream");
    if (!rc)
        rc = cuda_status(cb, cudaEventCreateWithFlags(&cb->stage.wrap, cudaEventDisableTiming),
                         "event");
    if (!rc)
        rc = cuda_status(cb, cudaEventCreateWithFlags(&cb->batch.done, cudaEventDisableTiming),
                         "event");
    if (!rc) rc = cuda_status(cb, cudaMallocHost(&cb->stage.host, CUDA_STAGE_BYTES), "pinned");
    if (!rc && !(cb->stage.dev = cuda_dev_alloc(cb, CUDA_STAGE_BYTES, "staging"))) rc = ERR_NOMEM;
    cb->stage.cap = CUDA_STAGE_BYTES;
    if (!rc) rc = cuda_workspace_reserve(cb);
    uint16_t *table = rc ? NULL : malloc(65536 * sizeof(uint16_t));
    if (!rc && !table) rc = ERR_NOMEM;
    if (!rc && !(cb->gelu_f16 = cuda_dev_alloc(cb, 65536 * sizeof(uint16_t), "gelu table")))
        rc = ERR_NOMEM;
    if (!rc) {
        cpu_ops_gelu_table(table); /* the CPU backend's table: one copy of ggml's formula */
        rc = cuda_status(
            cb, cudaMemcpy(cb->gelu_f16, table, 65536 * sizeof(uint16_t), cudaMemcpyHostToDevice),
            "gelu table");
    }
    free(table);
    if (rc) {
        cuda_destroy(&cb->base);
        return rc;
    }
    cb->sm_count = prop.multiProcessorCount;
    cb->blas = cuda_blas_open(cb);
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    log_info("cuda backend", LOG_I("device", dev), LOG_S("name", prop.name),
             LOG_I("sm", prop.major * 10 + prop.minor), LOG_I("multiprocessors", cb->sm_count),
             LOG_I("memory_total", (long long)total_b), LOG_I("memory_free", (long long)free_b),
             LOG_B("cublas", cb->blas != NULL));
    *out = &cb->base;
    return 0;
}
