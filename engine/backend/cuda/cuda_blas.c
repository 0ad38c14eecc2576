/* cuBLAS, loaded at run time: the F32/F16/BF16 GEMMs of prefill-sized matmuls (quantized weights
 * are dequantized to f16 first, cuda_ops.c). Loading it with dlopen keeps it out of the binary's
 * DT_NEEDED list, so a build needs only its headers and the GPU check's bundle (hack/gpu-bundle.sh)
 * need not carry its 500 MB: where no libcublas.so.13 can be found the backend multiplies with its
 * own tiled kernel instead (correct, slower) and says so at start-up. */
#include "engine/backend/cuda/cuda_backend.h"

#include "common/err.h"
#include "common/log.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdlib.h>

/* cuBLAS's own workspace, given to it so it never allocates one in the step loop (NVIDIA
 * recommends 32 MiB on Hopper). */
#define CUDA_BLAS_WORKSPACE (32u << 20)

struct cuda_blas {
    void *lib;
    cublasHandle_t handle;
    void *workspace;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    const char *(*status_string)(cublasStatus_t);
};

void cuda_blas_close(struct cuda_blas *bl)
{
    if (!bl) return;
    if (bl->handle) bl->destroy(bl->handle);
    cudaFree(bl->workspace);
    if (bl->lib) dlclose(bl->lib);
    free(bl);
}

static bool blas_sym(void *lib, const char *name, void **out)
{
    *out = dlsym(lib, name);
    return *out != NULL;
}

struct cuda_blas *cuda_blas_open(struct cuda_backend *cb)
{
    const char *const names[] = {"libcublas.so.13", "libcublas.so"};
    void *lib = NULL;
    for (size_t i = 0; !lib && i < sizeof(names) / sizeof(names[0]); i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        log_warn("cuda: cuBLAS not found (libcublas.so.13 on the library path); prefill matmuls "
                 "use the backend's own GEMM kernel, which is slower",
                 LOG_S("dlerror", dlerror()));
        return NULL;
    }
    struct cuda_blas *bl = calloc(1, sizeof(*bl));
    if (!bl) {
        dlclose(lib);
        return NULL;
    }
    bl->lib = lib;
    bool ok = blas_sym(lib, "cublasCreate_v2", (void **)&bl->create) &&
              blas_sym(lib, "cublasDestroy_v2", (void **)&bl->destroy) &&
              blas_sym(lib, "cublasSetStream_v2", (void **)&bl->set_stream) &&
              blas_sym(lib, "cublasSetWorkspace_v2", (void **)&bl->set_workspace) &&
              blas_sym(lib, "cublasSetMathMode", (void **)&bl->set_math_mode) &&
              blas_sym(lib, "cublasGemmEx", (void **)&bl->gemm_ex) &&
              blas_sym(lib, "cublasGetStatusString", (void **)&bl->status_string);
    cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
    if (ok) {
        st = bl->create(&bl->handle);
        if (st != CUBLAS_STATUS_SUCCESS) bl->handle = NULL;
    }
    if (bl->handle && cudaMalloc(&bl->workspace, CUDA_BLAS_WORKSPACE) != cudaSuccess) {
        (void)cudaGetLastError();
        bl->workspace = NULL;
    }
    if (bl->handle && (st = bl->set_stream(bl->handle, cb->stream)) == CUBLAS_STATUS_SUCCESS &&
        bl->workspace)
        st = bl->set_workspace(bl->handle, bl->workspace, CUDA_BLAS_WORKSPACE);
    /* CUBLAS_DEFAULT_MATH: F32 GEMMs stay F32 (no TF32), as the CPU reference computes them */
    if (bl->handle && st == CUBLAS_STATUS_SUCCESS)
        st = bl->set_math_mode(bl->handle, CUBLAS_DEFAULT_MATH);
    if (!ok || st != CUBLAS_STATUS_SUCCESS || !bl->workspace) {
        log_warn("cuda: cuBLAS found but unusable; prefill matmuls use the backend's own GEMM",
                 LOG_B("symbols", ok),
                 LOG_S("status", ok && bl->status_string ? bl->status_string(st) : "missing"));
        cuda_blas_close(bl);
        return NULL;
    }
    return bl;
}

int cuda_blas_gemm(struct cuda_backend *cb, enum cuda_gemm_type type, int m, int n, int k,
                   const void *a, int lda, const void *b, int ldb, float *c, int ldc)
{
    struct cuda_blas *bl = cb->blas;
    if (!bl) return ERR_UNSUPPORTED;
    const float one = 1.0f, zero = 0.0f;
    cudaDataType t = type == CUDA_GEMM_F32   ? CUDA_R_32F
                     : type == CUDA_GEMM_F16 ? CUDA_R_16F
                                             : CUDA_R_16BF;
    cublasStatus_t st =
        bl->gemm_ex(bl->handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a, t, lda, b, t, ldb,
                    &zero, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    if (!cb->faulted)
        log_error("cuda: cublasGemmEx failed", LOG_S("status", bl->status_string(st)),
                  LOG_I("m", m), LOG_I("n", n), LOG_I("k", k));
    /* an execution failure usually means a fault on the stream: let the next sync report it */
    return st == CUBLAS_STATUS_ALLOC_FAILED ? ERR_NOMEM : ERR_INTERNAL;
}
