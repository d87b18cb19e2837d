/* Embedding lookup: out[i] = table[tokens[i]], the first step of the
 * forward pass (a memcpy per token in common/forward.c; the check compares
 * with that copy).
 *
 * v1 "element-per-thread": one thread per output element, converting the
 *    table's type to f32. Teaches: a gather; the token ids are read by
 *    every thread of a row but come from cache, while the table rows are
 *    read once, coalesced.
 *
 * With f32 tables the result is bitwise the table row; with f16/bf16 tables
 * it is the exact f32 value of the stored element. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_embedding_versions[] = {
    {"element-per-thread", "a gather: one thread per output element"},
};
extern "C" const int kvk_embedding_n_versions = 1;

template <typename T>
__global__ void embedding_v1(float *out, const T *table, const int *tokens, int n, int dim)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * dim)
        return;
    int i = (int)(idx / dim), j = (int)(idx % dim);
    out[idx] = kvk_to_f32(table[(long long)tokens[i] * dim + j]);
}

extern "C" int kvk_embedding(int version, float *out, const void *table, Dtype table_type, const int *tokens, int n,
                             int dim, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_embedding_n_versions, "embedding", err))
        return -1;
    if (n <= 0 || dim <= 0)
        return n == 0 ? 0 : err_set(err, "embedding: bad shape (%d tokens of %d)", n, dim);
    const int threads = 256;
    unsigned blocks = kvk_blocks((long long)n * dim, threads);
    switch (table_type) {
    case DTYPE_F32: embedding_v1<<<blocks, threads, 0, stream>>>(out, (const float *)table, tokens, n, dim); break;
    case DTYPE_F16: embedding_v1<<<blocks, threads, 0, stream>>>(out, (const __half *)table, tokens, n, dim); break;
    case DTYPE_BF16:
        embedding_v1<<<blocks, threads, 0, stream>>>(out, (const __nv_bfloat16 *)table, tokens, n, dim);
        break;
    default: return err_set(err, "embedding: unknown table type %d", (int)table_type);
    }
    return KVK_CHECK_LAUNCH(err, "embedding v1");
}
