/* Internals shared by the CUDA backend's files: the backend struct, prepared weights, the paged KV
 * cache on the device, the host-to-device staging of each call's small arrays, and the kernel
 * launchers (*.cu) the host code (*.c) calls. C and CUDA C++ both include it; nothing outside
 * engine/backend/cuda/ does (the engine sees only backend.h). Every function here is called from
 * the one thread that drives the backend, and queues work on the backend's one stream. */
#ifndef CINFER_ENGINE_BACKEND_CUDA_BACKEND_H
#define CINFER_ENGINE_BACKEND_CUDA_BACKEND_H

#include "engine/backend/backend.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A prepared weight: the descriptor (borrowing the host mapping, which is never read again after
 * weight_prepare) and its device copy. Matrices keep the file's blocks, row-major, row_bytes
 * apart; one-row weights (norm gains, biases, a gate vector) are dequantized to floats, which
 * the elementwise ops read and matmul / get_rows take as an F32 row. */
struct backend_weight {
    struct backend_weight_desc desc;
    size_t row_bytes; /* bytes of one row in desc.type */
    void *dev;        /* (rows, row_bytes) on the device; NULL for 1-D weights */
    float *f32;       /* (cols) device floats of a 1-D weight; NULL for matrices */
};

/* A host array uploaded once and reused while it does not change (a step's batch layout serves
 * every layer): a pinned host copy (the cache key, and the copy's source), its device twin, and
 * the event of the last copy, waited on before the pinned copy is rewritten. */
struct cuda_upload {
    void *host, *dev;
    size_t cap, len;
    cudaEvent_t done;
    bool valid;
};

/* The small per-call host arrays (token ids, gather indices, expert weights, rope factors) go
 * through a ring of pinned memory copied into a device ring; when the head wraps, the stream's
 * queued work is waited for, so no slot is rewritten while a copy may still read it. */
struct cuda_stage {
    void *host, *dev;
    size_t cap, head;
    cudaEvent_t wrap; /* recorded and waited on at each wrap */
};

struct cuda_blas; /* cuda_blas.c: cuBLAS loaded at run time, or NULL when absent */

struct cuda_backend {
    struct backend base; /* first member: (struct backend *) casts to and from */
    int device;
    cudaStream_t stream;
    int sm_count;
    int faulted; /* a sticky CUDA error happened: every later op fails (the context is lost) */
    struct cuda_blas *blas;

    /* Fixed workspaces, allocated once (cuda_workspace_reserve) so the step loop never calls
     * cudaMalloc: activations converted to f16/bf16 for cuBLAS, a chunk of dequantized weight
     * rows, expert routing's probabilities and outputs. */
    void *ws_x, *ws_w;
    size_t ws_x_bytes, ws_w_bytes;
    void *ws_route;
    size_t ws_route_bytes;
    bool ws_ready;

    struct cuda_stage stage;
    struct cuda_upload batch; /* pos, seq, slots, block tables of the current step */
    /* offsets into batch.dev of each array, and the shape they were uploaded for */
    size_t off_pos, off_seq, off_slots, off_bt;
    int b_tokens, b_seqs, b_max_blocks;

    /* Paged KV cache: per layer K then V, each (n_blocks, n_kv_heads, block_size, head) as the
     * CPU backend lays it out (cpu_kv_offset), so one head's positions in a block are contiguous. */
    struct backend_kv_desc kv;
    int kv_ready;
    void *kv_mem;
    size_t kv_head_bytes, kv_layer_bytes;

    uint16_t *gelu_f16; /* (65536) device copy of ggml's GELU table (gelu_mul) */
};

static inline struct cuda_backend *cuda_backend_of(struct backend *b)
{
    return (struct cuda_backend *)b;
}

/* Turns a CUDA status into an err.h code, logging the failure once with `what`: 0 for success,
 * ERR_NOMEM for an allocation failure, ERR_INTERNAL otherwise; a sticky error (a kernel fault)
 * marks the backend faulted. */
int cuda_status(struct cuda_backend *cb, cudaError_t e, const char *what);
/* The launch status of the last kernel (cudaGetLastError) as cuda_status gives it. */
int cuda_launched(struct cuda_backend *cb, const char *what);
/* Every op's first call: ERR_INTERNAL once faulted, else makes the backend's device the calling
 * thread's current one (the runtime keeps one per thread; the inference thread did not create
 * the backend). */
int cuda_enter(struct cuda_backend *cb);

/* Copies n bytes of a host array to the device through the staging ring; returns the device
 * address (valid for work queued before the ring comes round again) or NULL after logging. */
const void *cuda_stage_put(struct cuda_backend *cb, const void *src, size_t n);
/* Makes the device copy of the batch arrays current for `bt` (checked as the CPU backend checks
 * them, uploaded only when they changed: a step's layers share one batch) and returns the device
 * pointers. ERR_RANGE / ERR_INVAL for a bad batch. */
struct cuda_batch_dev {
    const int32_t *pos, *seq, *bt;
    const int64_t *slots;
};
int cuda_batch_use(struct cuda_backend *cb, const struct backend_batch *bt,
                   struct cuda_batch_dev *out);
/* Allocates the fixed workspaces if not yet done (0 or ERR_NOMEM). */
int cuda_workspace_reserve(struct cuda_backend *cb);

/* Ops implemented in cuda_ops.c (backend.h gives their contracts). */
int cuda_ops_get_rows(struct backend *b, const struct backend_weight *w, const int32_t *ids, int n,
                      float *out);
int cuda_ops_matmul(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                    int n_tokens);
int cuda_ops_add_bias(struct backend *b, float *y, const struct backend_weight *bias, int n_tokens);
int cuda_ops_add(struct backend *b, float *y, const float *x, size_t n);
int cuda_ops_rmsnorm(struct backend *b, const float *x, const struct backend_weight *gain, float *y,
                     int n_tokens, int dim, float eps);
int cuda_ops_rmsnorm_heads(struct backend *b, float *x, const struct backend_weight *gain,
                           int n_rows, int head_dim, float eps);
int cuda_ops_rope(struct backend *b, float *x, const int32_t *pos, int n_tokens, int n_heads,
                  int head_dim, const struct backend_rope_params *p);
int cuda_ops_silu_mul(struct backend *b, float *gate, const float *up, size_t n);
int cuda_ops_gelu_mul(struct backend *b, float *gate, const float *up, size_t n);
int cuda_ops_scale(struct backend *b, float *x, size_t n, float s);
int cuda_ops_softcap(struct backend *b, float *x, size_t n, float cap);
int cuda_ops_moe_route(struct backend *b, const float *logits, int n_rows, int n_expert, int k,
                       bool norm, int32_t *ids, float *w);
int cuda_ops_moe_combine(struct backend *b, const float *x, const float *w, int n_rows, int k,
                         int dim, float *out);
int cuda_ops_scale_rows_sigmoid(struct backend *b, float *x, const float *g, int n_rows, int dim);
int cuda_ops_kv_store(struct backend *b, int layer, const float *k, const float *v,
                      const struct backend_batch *batch);
int cuda_ops_attention(struct backend *b, int layer, const float *q, float *out,
                       const struct backend_batch *batch, int n_heads,
                       const struct backend_attn_params *p);
int cuda_ops_gather_rows(struct backend *b, const float *src, const int32_t *idx, int n, int dim,
                         float *dst);
/* Creates the CUDA backend (see backend_create): ERR_UNSUPPORTED without a usable device,
 * ERR_RANGE for a device index past the last. */
int cuda_backend_create(const struct backend_options *opt, struct backend **out);

/* ---- cuBLAS (cuda_blas.c) ----------------------------------------------------------------------
 * Column-major C (m, n) = A^T B with A (k, m) and B (k, n), as cublasGemmEx with op(A) = T: for
 * cinfer's row-major shapes y (n_tokens, rows) = x (n_tokens, cols) W^T that is m = rows,
 * n = n_tokens, k = cols, A = W, B = x. Element types of A and B: */
enum cuda_gemm_type { CUDA_GEMM_F32, CUDA_GEMM_F16, CUDA_GEMM_BF16 };
/* Loads cuBLAS (libcublas.so.13) and creates a handle on cb->stream; NULL when it is not there
 * (the backend then multiplies every batch with its mat-vec kernel). */
struct cuda_blas *cuda_blas_open(struct cuda_backend *cb);
void cuda_blas_close(struct cuda_blas *bl);
int cuda_blas_gemm(struct cuda_backend *cb, enum cuda_gemm_type type, int m, int n, int k,
                   const void *a, int lda, const void *b, int ldb, float *c, int ldc);

/* ---- kernels (the *.cu files); each queues work on `s` and returns cudaGetLastError() ---------- */
/* cuda_matmul.cu: y (nt, rows) = x (nt, cols) W^T reading the weight's blocks directly, in launches
 * of CUDA_MATVEC_MAX_TOKENS tokens (decode; every batch when cuBLAS is absent). */
#define CUDA_MATVEC_MAX_TOKENS 8
cudaError_t cuda_launch_matvec(cudaStream_t s, enum quant_type type, const void *w,
                               size_t row_bytes, int rows, int cols, const float *x, float *y,
                               int nt);
/* dst (rows, cols) as f16 (bf16 when `bf16`) = the rows at w dequantized (cols a multiple of 8). */
cudaError_t cuda_launch_dequant_rows(cudaStream_t s, enum quant_type type, const void *w,
                                     size_t row_bytes, int rows, int cols, void *dst, bool bf16);
/* dst (n) = src (n) floats rounded to f16 (bf16 when `bf16`). */
cudaError_t cuda_launch_to_half(cudaStream_t s, const float *src, void *dst, size_t n, bool bf16);
/* out (n, cols) = rows ids[0..n) of W dequantized to floats. */
cudaError_t cuda_launch_get_rows(cudaStream_t s, enum quant_type type, const void *w,
                                 size_t row_bytes, int cols, const int32_t *ids, int n, float *out);
/* Host copy of the kernels' block decoder (the same __host__ __device__ code): dequantizes n
 * elements of one row as the kernels read it, for tests that compare it with quant.c. 0, or
 * ERR_UNSUPPORTED for a type the kernels do not decode. */
int cuda_host_dequant_row(enum quant_type type, const void *row, float *dst, int n);

/* cuda_ops.cu: the elementwise and row ops (backend.h gives their contracts). */
cudaError_t cuda_launch_add(cudaStream_t s, float *y, const float *x, size_t n);
cudaError_t cuda_launch_add_bias(cudaStream_t s, float *y, const float *bias, int n_tokens,
                                 int dim);
cudaError_t cuda_launch_scale(cudaStream_t s, float *x, size_t n, float v);
cudaError_t cuda_launch_softcap(cudaStream_t s, float *x, size_t n, float cap);
cudaError_t cuda_launch_silu_mul(cudaStream_t s, float *gate, const float *up, size_t n);
cudaError_t cuda_launch_gelu_mul(cudaStream_t s, float *gate, const float *up, size_t n,
                                 const uint16_t *table);
cudaError_t cuda_launch_rmsnorm(cudaStream_t s, const float *x, const float *gain, float *y,
                                int n_rows, int dim, float eps);
/* Rotary embedding; the host has worked out theta_scale = freq_base^(-2/n_rot), YaRN's
 * correction dims and magnitude (cuda_ops.c does it as the CPU backend does). */
struct cuda_rope_args {
    int mode, n_rot, n_tokens, n_heads, head_dim;
    float theta_scale, freq_scale, ext_factor, mscale;
    float corr0, corr1;
    const float *freq_factors; /* device (n_rot / 2) or NULL */
    const int32_t *pos;        /* device (n_tokens) */
};
cudaError_t cuda_launch_rope(cudaStream_t s, float *x, const struct cuda_rope_args *a);
cudaError_t cuda_launch_gather_rows(cudaStream_t s, const float *src, const int32_t *idx, int n,
                                    int dim, float *dst);
/* Softmax of each row of logits (n_rows, n_expert) into p (same shape, device scratch) and its
 * top k into ids (n_rows, k) and w. */
cudaError_t cuda_launch_moe_route(cudaStream_t s, const float *logits, int n_rows, int n_expert,
                                  int k, bool norm, float *p, int32_t *ids, float *w);
cudaError_t cuda_launch_moe_combine(cudaStream_t s, const float *x, const float *w, int n_rows,
                                    int k, int dim, float *out);
cudaError_t cuda_launch_scale_rows_sigmoid(cudaStream_t s, float *x, const float *g, int n_rows,
                                           int dim);

/* cuda_attention.cu: KV stores and paged attention. */
struct cuda_kv_args {
    enum quant_type type;
    int n_blocks, block_size, n_kv_heads, head_dim;
    size_t head_bytes;
    char *k, *v; /* this layer's K and V */
};
cudaError_t cuda_launch_kv_store(cudaStream_t s, const struct cuda_kv_args *kv, const float *k,
                                 const float *v, const int64_t *slots, int n_tokens);
struct cuda_attn_args {
    struct cuda_kv_args kv;
    const float *q;
    float *out;
    int n_tokens, n_heads, group; /* group: query heads per KV head */
    float scale, softcap;
    int window;
    const int32_t *pos, *seq, *bt; /* device copies of the batch's arrays */
    int max_blocks;
};
/* head_dim <= CUDA_ATTN_MAX_HEAD_DIM. */
#define CUDA_ATTN_MAX_HEAD_DIM 256
cudaError_t cuda_launch_attention(cudaStream_t s, const struct cuda_attn_args *a);

#ifdef __cplusplus
}
#endif

#endif
