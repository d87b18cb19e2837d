/* Matrix product over a batch of tokens: out[t][o] = sum_i w[o][i] x[t][i],
 * the projections of the forward pass (matmul() in common/cpu/ops.c). This is
 * where nearly all of a step's arithmetic and, at small batch, nearly all
 * of its memory traffic (reading the weights once) happen.
 *
 * v1 "thread-per-output": one thread computes one output with a plain dot
 *    product. Teaches: correct and simple, but neighbouring threads read
 *    different weight rows (no coalescing) and every weight is read once
 *    per token instead of once per batch: compare its time with v2's.
 * v2 "cublas": cuBLAS. f32 weights use cublasSgemm; f16/bf16 weights use
 *    cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F) on the tensor
 *    cores; the activations are converted to the weights' type first
 *    (kvk_convert_from_f32) because GemmEx multiplies like types. Teaches:
 *    how to call a column-major BLAS on row-major data, and that halving
 *    the weight bytes nearly halves the time of a memory-bound decode step.
 *
 * Row-major to column-major: a row-major [rows][cols] matrix is the
 * column-major [cols][rows] matrix, i.e. its transpose. So the row-major
 * out [n][out_dim] = x [n][in] . w^T is, column-major,
 * out' [out_dim][n] = (w' [in][out_dim])^T . x' [in][n]:
 * gemm(op_A = T, op_B = N, m = out_dim, n = n, k = in, A = w (lda = in),
 * B = x (ldb = in), C = out (ldc = out_dim)).
 *
 * The default math mode is kept (no TF32), so f32 stays f32.
 *
 * cuBLAS is loaded with dlopen the first time a handle is created
 * (kvk_blas_create), not linked: libcublasLt alone is half a gigabyte, and
 * linking it would make every CPU run of every chapter map it (0.2 s and
 * 200 MiB of resident memory at start) and fail to start on machines
 * without the toolkit. Only --device cuda pays for it. */
#include <dlfcn.h>
#include <stdio.h>

#include <cublas_v2.h>

#include "kernel_common.cuh"

extern "C" {
#include "mem.h"
}

#ifndef KVLAB_CUDA_LIBDIR
#define KVLAB_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* cublasGemmEx is overloaded in C++; this is the C function's type. */
typedef cublasStatus_t (*GemmExFn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                   const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                   void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* The cuBLAS functions kvlab calls, found in the library at run time. The
 * types come from the header (decltype does not reference the symbols). */
static struct {
    void *library;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSgemm_v2) sgemm;
    GemmExFn gemm_ex;
    decltype(&cublasGetStatusString) status_string;
} blas_api;

static int load_symbol(void **slot, const char *name, Err *err)
{
    *slot = dlsym(blas_api.library, name);
    if (!*slot)
        return err_set(err, "cuBLAS has no %s: %s", name, dlerror());
    return 0;
}

/* Opens libcublas of the major version of the headers from the folder the
 * build named (CUBLAS_DIR: the toolkit's by default), else wherever the
 * dynamic loader finds it, else an unversioned libcublas.so in that folder. */
static int load_cublas(Err *err)
{
    if (blas_api.library)
        return 0;
    char paths[3][512];
    snprintf(paths[0], sizeof paths[0], "%s/libcublas.so.%d", KVLAB_CUDA_LIBDIR, CUBLAS_VER_MAJOR);
    snprintf(paths[1], sizeof paths[1], "libcublas.so.%d", CUBLAS_VER_MAJOR);
    snprintf(paths[2], sizeof paths[2], "%s/libcublas.so", KVLAB_CUDA_LIBDIR);
    for (int i = 0; i < 3 && !blas_api.library; i++)
        blas_api.library = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (!blas_api.library)
        return err_set(err, "cannot load cuBLAS (%s): %s", paths[0], dlerror());
    if (load_symbol((void **)&blas_api.create, "cublasCreate_v2", err) ||
        load_symbol((void **)&blas_api.destroy, "cublasDestroy_v2", err) ||
        load_symbol((void **)&blas_api.set_stream, "cublasSetStream_v2", err) ||
        load_symbol((void **)&blas_api.set_workspace, "cublasSetWorkspace_v2", err) ||
        load_symbol((void **)&blas_api.sgemm, "cublasSgemm_v2", err) ||
        load_symbol((void **)&blas_api.gemm_ex, "cublasGemmEx", err) ||
        load_symbol((void **)&blas_api.status_string, "cublasGetStatusString", err)) {
        dlclose(blas_api.library);
        memset(&blas_api, 0, sizeof blas_api);
        return -1;
    }
    return 0;
}

#define CUBLAS_FAIL(err, what, st) \
    err_set((err), "%s:%d: %s: %s", __FILE__, __LINE__, (what), blas_api.status_string(st))

/* A cuBLAS handle and what it is bound to. cublasSetStream "unconditionally
 * resets the cuBLAS library workspace back to the default workspace pool"
 * (cuBLAS documentation): calling it before every GEMM, as a first version
 * of this file did, made cuBLAS allocate its own workspace behind the
 * ledger's back, and made graph captures record allocations of their own.
 * So the stream is set once, when the handle is created, and only set again
 * (followed at once by the workspace) when a caller passes another stream. */
struct KvkBlas {
    cublasHandle_t handle;
    cudaStream_t stream;   /* the stream the handle queues its work on */
    void *workspace;       /* [workspace_bytes] from the ledger, or NULL */
    size_t workspace_bytes;
    long rebinds;          /* stream changes after creation */
};

/* Binds the handle to a stream, then gives it the workspace again. */
static int blas_bind(KvkBlas *b, cudaStream_t stream, Err *err)
{
    cublasStatus_t st = blas_api.set_stream(b->handle, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return CUBLAS_FAIL(err, "cublasSetStream", st);
    if (b->workspace) {
        st = blas_api.set_workspace(b->handle, b->workspace, b->workspace_bytes);
        if (st != CUBLAS_STATUS_SUCCESS)
            return CUBLAS_FAIL(err, "cublasSetWorkspace", st);
    }
    b->stream = stream;
    return 0;
}

extern "C" int kvk_blas_create(KvkBlas **blas, cudaStream_t stream, void *workspace, size_t workspace_bytes,
                               Err *err)
{
    *blas = NULL;
    if (load_cublas(err))
        return -1;
    KvkBlas *b = (KvkBlas *)mem_alloc(MEM_ACTIVATIONS, sizeof *b);
    if (!b)
        return err_set(err, "out of host memory for the cuBLAS handle");
    memset(b, 0, sizeof *b);
    b->workspace = workspace;
    b->workspace_bytes = workspace ? workspace_bytes : 0;
    cublasStatus_t st = blas_api.create(&b->handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
        mem_free(b);
        return CUBLAS_FAIL(err, "cublasCreate", st);
    }
    if (blas_bind(b, stream, err)) {
        kvk_blas_destroy(b);
        return -1;
    }
    *blas = b;
    return 0;
}

extern "C" void kvk_blas_destroy(KvkBlas *blas)
{
    if (!blas)
        return;
    if (blas->handle && blas_api.destroy)
        blas_api.destroy(blas->handle);
    mem_free(blas);
}

extern "C" long kvk_blas_rebinds(const KvkBlas *blas)
{
    return blas ? blas->rebinds : 0;
}

extern "C" const KvkVersion kvk_matmul_versions[] = {
    {"thread-per-output", "one thread per output, a plain dot product; weights re-read per token"},
    {"cublas", "cublasSgemm (f32) or cublasGemmEx (f16/bf16, f32 accumulation)"},
};
extern "C" const int kvk_matmul_n_versions = 2;

template <typename T>
__global__ void matmul_v1(float *out, const T *x, const T *w, int n, int in_dim, int out_dim)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * out_dim)
        return;
    int t = (int)(idx / out_dim), o = (int)(idx % out_dim);
    const T *xr = x + (long long)t * in_dim, *wr = w + (long long)o * in_dim;
    float s = 0.0f;
    for (int i = 0; i < in_dim; i++)
        s += kvk_to_f32(wr[i]) * kvk_to_f32(xr[i]);
    out[idx] = s;
}

static int matmul_naive(float *out, const void *x, const void *w, Dtype t, int n, int in_dim, int out_dim,
                        cudaStream_t stream, Err *err)
{
    const int threads = 256;
    unsigned blocks = kvk_blocks((long long)n * out_dim, threads);
    switch (t) {
    case DTYPE_F32:
        matmul_v1<<<blocks, threads, 0, stream>>>(out, (const float *)x, (const float *)w, n, in_dim, out_dim);
        break;
    case DTYPE_F16:
        matmul_v1<<<blocks, threads, 0, stream>>>(out, (const __half *)x, (const __half *)w, n, in_dim, out_dim);
        break;
    case DTYPE_BF16:
        matmul_v1<<<blocks, threads, 0, stream>>>(out, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w, n, in_dim,
                                                  out_dim);
        break;
    default: return err_set(err, "matmul: unknown type %d", (int)t);
    }
    return KVK_CHECK_LAUNCH(err, "matmul v1");
}

static int matmul_cublas(KvkBlas *b, float *out, const void *x, const void *w, Dtype t, int n, int in_dim,
                         int out_dim, cudaStream_t stream, Err *err)
{
    if (!b || !blas_api.library)
        return err_set(err, "matmul v2: no cuBLAS handle (kvk_blas_create)");
    if (stream != b->stream) {
        if (blas_bind(b, stream, err))
            return -1;
        b->rebinds++;
    }
    cublasHandle_t blas = b->handle;
    cublasStatus_t st;
    const float alpha = 1.0f, beta = 0.0f;
    if (t == DTYPE_F32) {
        st = blas_api.sgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out_dim, n, in_dim, &alpha, (const float *)w, in_dim,
                         (const float *)x, in_dim, &beta, out, out_dim);
        return st == CUBLAS_STATUS_SUCCESS ? 0 : CUBLAS_FAIL(err, "cublasSgemm", st);
    }
    cudaDataType type = t == DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    st = blas_api.gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, out_dim, n, in_dim, &alpha, w, type, in_dim, x, type, in_dim,
                      &beta, out, CUDA_R_32F, out_dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : CUBLAS_FAIL(err, "cublasGemmEx", st);
}

extern "C" int kvk_matmul(int version, KvkBlas *blas, float *out, const void *x, const void *w, Dtype t,
                          int n, int in_dim, int out_dim, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_matmul_n_versions, "matmul", err))
        return -1;
    if (n == 0)
        return 0;
    if (n < 0 || in_dim <= 0 || out_dim <= 0 || (unsigned)t >= DTYPE_COUNT)
        return err_set(err, "matmul: bad shape (n %d, in %d, out %d, type %d)", n, in_dim, out_dim, (int)t);
    if (version == 1)
        return matmul_naive(out, x, w, t, n, in_dim, out_dim, stream, err);
    return matmul_cublas(blas, out, x, w, t, n, in_dim, out_dim, stream, err);
}
