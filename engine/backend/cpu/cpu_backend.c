/* The CPU backend: the ops table, host "device" memory, prepared weights, the paged KV cache and the
 * compute thread pool. Kernels are picked once per backend from the detected (or forced) ISA level;
 * the ops themselves live in cpu_matmul.c, cpu_attention.c and cpu_ops.c. */
#include "engine/backend/cpu/cpu_backend.h"

#include "common/err.h"
#include "common/log.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CPU_MAX_THREADS 256

static size_t cpu_round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The lane this thread is running for a backend inside run_lanes (cpu_run_lanes sets both); a thread
 * runs at most one lane of one backend at a time. */
static _Thread_local const struct cpu_backend *tls_lane_backend;
static _Thread_local int tls_lane;

static bool in_lane(const struct cpu_backend *cb)
{
    return tls_lane_backend == cb;
}

struct cpu_lane *cpu_backend_lane(struct cpu_backend *cb)
{
    return &cb->lanes[in_lane(cb) ? tls_lane : 0];
}

int cpu_backend_threads(const struct cpu_backend *cb)
{
    return in_lane(cb) ? 1 : cb->n_threads;
}

void cpu_backend_run(struct cpu_backend *cb, cpu_pool_fn fn, void *ctx)
{
    if (in_lane(cb))
        fn(ctx, 0, 1);
    else
        cpu_pool_run(cb->pool, fn, ctx);
}

void *cpu_backend_scratch(struct cpu_backend *cb, size_t bytes)
{
    struct cpu_lane *l = cpu_backend_lane(cb);
    if (bytes <= l->scratch_cap) return l->scratch;
    size_t cap = cpu_round64(bytes + bytes / 4);
    void *p = aligned_alloc(64, cap);
    if (!p) return NULL;
    free(l->scratch);
    l->scratch = p;
    l->scratch_cap = cap;
    return p;
}

/* One run_lanes call: each thread that joins claims lanes until none are left (a worker that misses
 * the job leaves its lane to the others), so every lane runs exactly once. */
struct lanes_job {
    const struct cpu_backend *cb;
    backend_lane_fn fn;
    void *ctx;
    int n;
    atomic_int next;
    atomic_int rc; /* the first lane error */
};

static void lanes_task(void *ctx, int ith, int nth)
{
    struct lanes_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        int lane = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (lane >= j->n) break;
        tls_lane_backend = j->cb;
        tls_lane = lane;
        int rc = j->fn(j->ctx, lane);
        tls_lane_backend = NULL;
        int none = 0;
        if (rc) atomic_compare_exchange_strong(&j->rc, &none, rc);
    }
}

static int cpu_lanes_max(struct backend *b)
{
    return cpu_backend_of(b)->n_threads;
}

static int cpu_run_lanes(struct backend *b, int n, backend_lane_fn fn, void *ctx)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!fn || n < 1 || n > cb->n_threads) return ERR_INVAL;
    if (in_lane(cb)) return ERR_BAD_STATE; /* lanes do not nest */
    struct lanes_job j = {.cb = cb, .fn = fn, .ctx = ctx, .n = n};
    atomic_init(&j.next, 0);
    atomic_init(&j.rc, 0);
    cpu_pool_run(cb->pool, lanes_task, &j);
    return atomic_load(&j.rc);
}

static void *cpu_alloc(struct backend *b, size_t bytes)
{
    (void)b;
    size_t n = cpu_round64(bytes ? bytes : 1);
    if (n < bytes) return NULL;
    void *p = aligned_alloc(64, n);
    if (p) memset(p, 0, n);
    return p;
}

static void cpu_free(struct backend *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_copy(struct backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    if (bytes == 0) return 0;
    if (!dst || !src) return ERR_INVAL;
    memmove(dst, src, bytes);
    return 0;
}

/* Tells the kernel that the whole pages of the caller's copy of a weight are not needed: the backend
 * keeps its own (packed, or copied), so without this the process would hold the weights twice while
 * the model loads. MADV_PAGEOUT only reclaims (file pages are dropped, anonymous ones swapped or
 * kept), never changes contents. */
static void cpu_weight_drop_source(const void *data, size_t bytes)
{
#ifdef MADV_PAGEOUT
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)data + bytes) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#else
    (void)data;
    (void)bytes;
#endif
}

/* Packs a quantized matrix for the level's packed kernels (see cpu_qpack.c) when the level has one
 * for its type; 0 (also when there is no packed kernel), or ERR_NOMEM. */
static int cpu_weight_pack(struct cpu_backend *cb, struct backend_weight *w)
{
    const struct backend_weight_desc *d = &w->desc;
    if (!cpu_qpack_supported(d->type) || d->lookup_only || !cb->kern.gemm_qpack[d->type]) return 0;
    size_t bytes = cpu_qpack_bytes(d->type, d->rows, d->cols);
    void *p = cpu_arena_alloc(&cb->weights, bytes);
    if (!p) return ERR_NOMEM;
    cpu_qpack_weights(d->type, d->data, w->row_bytes, d->rows, d->cols, p);
    w->packed = p;
    w->packed_group_bytes = cpu_qpack_group_bytes(d->type, d->cols);
    return 0;
}

/* Prepares a matrix (rows > 1): the packed copy matmul reads when the level packs its type, and a
 * row-major copy in the weight arena for everything else that reads rows (the float path, the
 * row-major integer kernels, get_rows), so that nothing reads the caller's memory (the GGUF
 * mapping) after this returns. A packed weight keeps rows too only when get_rows will read it
 * (desc.lookup: a tied embedding table). 0 or ERR_NOMEM. */
static int cpu_weight_prepare_matrix(struct cpu_backend *cb, struct backend_weight *w)
{
    const void *src = w->desc.data;
    size_t bytes = w->row_bytes * (size_t)w->desc.rows;
    int rc = cpu_weight_pack(cb, w);
    if (rc) return rc;
    w->desc.data = NULL;
    if (!w->packed || w->desc.lookup) {
        if (!(w->rows = cpu_arena_alloc(&cb->weights, bytes))) return ERR_NOMEM;
        memcpy(w->rows, src, bytes);
        w->desc.data = w->rows;
        if (w->desc.type == QUANT_F32) w->f32 = w->rows;
    }
    cpu_weight_drop_source(src, bytes);
    return 0;
}

static void cpu_weight_free(struct backend *b, struct backend_weight *w)
{
    if (!w) return;
    free(w->owned);
    cpu_arena_release(&cpu_backend_of(b)->weights, w->packed);
    cpu_arena_release(&cpu_backend_of(b)->weights, w->rows);
    free(w);
}

static int cpu_weight_prepare(struct backend *b, const struct backend_weight_desc *desc,
                              struct backend_weight **out)
{
    if (!desc || !out || !desc->data || desc->rows <= 0 || desc->cols <= 0) return ERR_INVAL;
    size_t row_bytes = quant_row_bytes(desc->type, (uint64_t)desc->cols);
    if (row_bytes == 0) /* an unknown type, or cols not a multiple of the block size */
        return quant_block_elems(desc->type) == 0 ? ERR_UNSUPPORTED : ERR_INVAL;
    if ((uint64_t)desc->rows > SIZE_MAX / row_bytes) return ERR_TOO_BIG;
    if (desc->cols > INT32_MAX || desc->rows > INT32_MAX) return ERR_TOO_BIG;
    struct backend_weight *w = calloc(1, sizeof(*w));
    if (!w) return ERR_NOMEM;
    w->desc = *desc;
    w->desc.lookup = desc->lookup || desc->lookup_only;
    w->row_bytes = row_bytes;
    if (desc->rows == 1) { /* norm gains, biases: floats of their own, whatever the type */
        w->owned = malloc((size_t)desc->cols * sizeof(float));
        if (!w->owned) {
            free(w);
            return ERR_NOMEM;
        }
        quant_dequantize_row(desc->type, desc->data, w->owned, (size_t)desc->cols);
        w->f32 = w->owned;
        w->desc.data = desc->type == QUANT_F32 ? w->owned : NULL;
        if (!w->desc.data) { /* get_rows reads the row in its type: keep it */
            if (!(w->rows = cpu_arena_alloc(&cpu_backend_of(b)->weights, row_bytes))) {
                cpu_weight_free(b, w);
                return ERR_NOMEM;
            }
            memcpy(w->rows, desc->data, row_bytes);
            w->desc.data = w->rows;
        }
    } else if (cpu_weight_prepare_matrix(cpu_backend_of(b), w) != 0) {
        cpu_weight_free(b, w);
        return ERR_NOMEM;
    }
    *out = w;
    return 0;
}

static bool cpu_weight_float_path(struct backend *b, const struct backend_weight *w)
{
    (void)b;
    return cpu_act_of(w->desc.type) == CPU_ACT_FLOAT;
}

static void cpu_kv_free(struct backend *b)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    free(cb->kv_mem);
    cb->kv_mem = NULL;
    cb->kv_ready = 0;
    memset(&cb->kv, 0, sizeof(cb->kv));
}

static int cpu_kv_alloc(struct backend *b, const struct backend_kv_desc *d)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!d || d->n_layers <= 0 || d->n_blocks <= 0 || d->block_size <= 0 || d->n_kv_heads <= 0 ||
        d->head_dim <= 0)
        return ERR_INVAL;
    if (d->type != QUANT_F32 && d->type != QUANT_F16 && d->type != QUANT_Q8_0)
        return ERR_UNSUPPORTED;
    if (d->type == QUANT_Q8_0 && d->head_dim % QUANT_QK8_0 != 0) return ERR_UNSUPPORTED;
    size_t head_bytes = quant_row_bytes(d->type, (uint64_t)d->head_dim);
    /* n_layers * 2 * n_blocks * block_size * n_kv_heads * head_bytes without overflow */
    size_t total = head_bytes, factors[] = {(size_t)d->n_layers, 2, (size_t)d->n_blocks,
                                            (size_t)d->block_size, (size_t)d->n_kv_heads};
    for (size_t i = 0; i < sizeof(factors) / sizeof(factors[0]); i++) {
        if (total > SIZE_MAX / factors[i]) return ERR_TOO_BIG;
        total *= factors[i];
    }
    if ((uint64_t)d->n_blocks * (uint64_t)d->block_size > INT32_MAX) return ERR_TOO_BIG;
    void *mem = calloc(1, total);
    if (!mem) return ERR_NOMEM;
    cpu_memory_commit(mem, total);
    cpu_kv_free(b);
    cb->kv = *d;
    cb->kv_mem = mem;
    cb->kv_head_bytes = head_bytes;
    cb->kv_layer_bytes =
        (size_t)d->n_blocks * (size_t)d->block_size * (size_t)d->n_kv_heads * head_bytes;
    cb->kv_ready = 1;
    return 0;
}

static int cpu_kv_copy_block(struct backend *b, int src_block, int dst_block)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (src_block < 0 || src_block >= cb->kv.n_blocks || dst_block < 0 ||
        dst_block >= cb->kv.n_blocks)
        return ERR_RANGE;
    if (src_block == dst_block) return 0;
    size_t blk = (size_t)cb->kv.block_size * (size_t)cb->kv.n_kv_heads * cb->kv_head_bytes;
    size_t layer = cb->kv_layer_bytes; /* K or V of one layer */
    char *base = cb->kv_mem;
    for (int l = 0; l < 2 * cb->kv.n_layers; l++) {
        char *part = base + (size_t)l * layer;
        memcpy(part + (size_t)dst_block * blk, part + (size_t)src_block * blk, blk);
    }
    return 0;
}

/* The block's bytes in one K or V part of a layer, and the check every block op makes. */
static int cpu_kv_block_span(const struct cpu_backend *cb, int block, size_t *blk)
{
    if (!cb->kv_ready) return ERR_BAD_STATE;
    if (block < 0 || block >= cb->kv.n_blocks) return ERR_RANGE;
    *blk = (size_t)cb->kv.block_size * (size_t)cb->kv.n_kv_heads * cb->kv_head_bytes;
    return 0;
}

static int cpu_kv_block_read(struct backend *b, int block, void *dst_host, size_t bytes)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    size_t blk;
    int rc = cpu_kv_block_span(cb, block, &blk);
    if (rc) return rc;
    if (bytes != blk * 2 * (size_t)cb->kv.n_layers) return ERR_INVAL;
    const char *base = cb->kv_mem;
    for (int l = 0; l < 2 * cb->kv.n_layers; l++)
        memcpy((char *)dst_host + (size_t)l * blk,
               base + (size_t)l * cb->kv_layer_bytes + (size_t)block * blk, blk);
    return 0;
}

static int cpu_kv_block_write(struct backend *b, int block, const void *src_host, size_t bytes)
{
    struct cpu_backend *cb = cpu_backend_of(b);
    size_t blk;
    int rc = cpu_kv_block_span(cb, block, &blk);
    if (rc) return rc;
    if (bytes != blk * 2 * (size_t)cb->kv.n_layers) return ERR_INVAL;
    char *base = cb->kv_mem;
    for (int l = 0; l < 2 * cb->kv.n_layers; l++)
        memcpy(base + (size_t)l * cb->kv_layer_bytes + (size_t)block * blk,
               (const char *)src_host + (size_t)l * blk, blk);
    return 0;
}

static int cpu_sync(struct backend *b)
{
    (void)b;
    return 0;
}

static void cpu_destroy(struct backend *b)
{
    if (!b) return;
    struct cpu_backend *cb = cpu_backend_of(b);
    cpu_pool_free(cb->pool);
    for (int i = 0; cb->lanes && i < cb->n_threads; i++) {
        free(cb->lanes[i].rope.cs);
        free(cb->lanes[i].rope.pos);
        free(cb->lanes[i].scratch);
    }
    free(cb->lanes);
    free(cb->gelu_f16);
    free(cb->kv_mem);
    cpu_arena_fini(&cb->weights);
    free(cb);
}

static const struct backend_ops cpu_ops_table = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_prepare = cpu_weight_prepare,
    .weight_free = cpu_weight_free,
    .weight_float_path = cpu_weight_float_path,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .get_rows = cpu_ops_get_rows,
    .matmul = cpu_matmul_run,
    .matmul_group = cpu_matmul_group_run,
    .add_bias = cpu_ops_add_bias,
    .add = cpu_ops_add,
    .rmsnorm = cpu_ops_rmsnorm,
    .rmsnorm_heads = cpu_ops_rmsnorm_heads,
    .rope = cpu_ops_rope,
    .silu_mul = cpu_ops_silu_mul,
    .gelu_mul = cpu_ops_gelu_mul,
    .scale = cpu_ops_scale,
    .softcap = cpu_ops_softcap,
    .moe_route = cpu_ops_moe_route,
    .moe_combine = cpu_ops_moe_combine,
    .scale_rows_sigmoid = cpu_ops_scale_rows_sigmoid,
    .kv_store = cpu_attention_kv_store,
    .attention = cpu_attention_run,
    .gather_rows = cpu_ops_gather_rows,
    .kv_copy_block = cpu_kv_copy_block,
    .kv_block_read = cpu_kv_block_read,
    .kv_block_write = cpu_kv_block_write,
    .sync = cpu_sync,
    .lanes_max = cpu_lanes_max,
    .run_lanes = cpu_run_lanes,
};

int cpu_backend_create(const struct backend_options *opt, struct backend **out)
{
    int n_threads = opt ? opt->n_threads : 0;
    if (n_threads < 0 || n_threads > CPU_MAX_THREADS) return ERR_RANGE;
    if (n_threads == 0) {
        /* the CPUs this process may run on (a container's cpuset), else the online ones */
        cpu_set_t set;
        long n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                              : sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : n > CPU_MAX_THREADS ? CPU_MAX_THREADS : (int)n;
    }
    const char *isa_name = opt && opt->cpu_isa ? opt->cpu_isa : getenv("CINFER_CPU_ISA");
    enum cpu_isa isa;
    int rc = cpu_isa_parse(isa_name, &isa);
    if (rc != 0) {
        log_error("cpu backend: requested ISA level unavailable",
                  LOG_S("requested", isa_name ? isa_name : ""),
                  LOG_S("best", cpu_isa_name(cpu_isa_detect())));
        return rc;
    }
    struct cpu_backend *cb = calloc(1, sizeof(*cb));
    if (!cb) return ERR_NOMEM;
    cb->base.ops = &cpu_ops_table;
    cb->n_threads = n_threads;
    cb->isa = isa;
    cpu_kernels_init(&cb->kern, isa);
    cb->lanes = calloc((size_t)n_threads, sizeof(*cb->lanes));
    cb->gelu_f16 = malloc(65536 * sizeof(*cb->gelu_f16));
    if (!cb->lanes || !cb->gelu_f16) {
        free(cb->lanes);
        free(cb->gelu_f16);
        free(cb);
        return ERR_NOMEM;
    }
    cpu_ops_gelu_table(cb->gelu_f16);
    rc = cpu_pool_new(n_threads, &cb->pool);
    if (rc != 0) {
        free(cb->lanes);
        free(cb->gelu_f16);
        free(cb);
        return rc;
    }
    *out = &cb->base;
    return 0;
}
