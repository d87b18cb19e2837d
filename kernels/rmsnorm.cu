/* RMSNorm: out = weight * x / sqrt(mean(x^2) + 1e-5), one row per token.
 * CPU reference: rmsnorm() in common/cpu/ops.c.
 *
 * v1 "thread-per-row": one thread walks a whole row, exactly the CPU loop.
 *    Teaches: the direct transcription is correct but leaves the GPU idle;
 *    a 64-token batch is 64 threads on a chip that runs 100,000 at once,
 *    and each thread reads its row one float at a time.
 * v2 "block-reduce": one block per row; the threads split the row, sum
 *    their squares, and combine the partial sums with warp shuffles and
 *    shared memory (kvk_block_sum). Teaches: the parallel reduction, the
 *    building block of every norm and softmax on a GPU.
 *
 * Both sum in a different order from the CPU (and may fuse multiply-adds),
 * so results differ from the reference by rounding only; see the tolerance
 * in kernels/check/rmsnorm_check.c. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_rmsnorm_versions[] = {
    {"thread-per-row", "the CPU loop as one thread per row: correct, nearly serial"},
    {"block-reduce", "a block per row, partial sums combined by a block reduction"},
};
extern "C" const int kvk_rmsnorm_n_versions = 2;

#define RMSNORM_EPS 1e-5f

__global__ void rmsnorm_v1(float *out, const float *x, const float *weight, const int *row_map, int rows, int dim)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *xr = x + (long long)(row_map ? row_map[r] : r) * dim;
    float ss = 0.0f;
    for (int j = 0; j < dim; j++)
        ss += xr[j] * xr[j];
    float inv = 1.0f / sqrtf(ss / (float)dim + RMSNORM_EPS);
    float *o = out + (long long)r * dim;
    for (int j = 0; j < dim; j++)
        o[j] = weight[j] * (inv * xr[j]);
}

__global__ void rmsnorm_v2(float *out, const float *x, const float *weight, const int *row_map, int dim)
{
    int r = blockIdx.x;
    const float *xr = x + (long long)(row_map ? row_map[r] : r) * dim;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        ss += xr[j] * xr[j];
    ss = kvk_block_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + RMSNORM_EPS);
    float *o = out + (long long)r * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        o[j] = weight[j] * (inv * xr[j]);
}

extern "C" int kvk_rmsnorm(int version, float *out, const float *x, const float *weight, const int *row_map,
                           int rows, int dim, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_rmsnorm_n_versions, "rmsnorm", err))
        return -1;
    if (rows <= 0 || dim <= 0)
        return rows == 0 ? 0 : err_set(err, "rmsnorm: bad shape (%d rows of %d)", rows, dim);
    if (version == 1) {
        rmsnorm_v1<<<kvk_blocks(rows, 64), 64, 0, stream>>>(out, x, weight, row_map, rows, dim);
        return KVK_CHECK_LAUNCH(err, "rmsnorm v1");
    }
    /* A warp per 32 elements up to 256 threads: small rows do not idle a
     * large block, large rows loop. */
    int threads = dim >= 256 ? 256 : ((dim + 31) / 32) * 32;
    rmsnorm_v2<<<rows, threads, 0, stream>>>(out, x, weight, row_map, dim);
    return KVK_CHECK_LAUNCH(err, "rmsnorm v2");
}
