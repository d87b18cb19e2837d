/* RoPE: rotate each consecutive pair (x0, x1) of every head of q and k by
 * the angle of the token's position:
 *   x0' = x0 cos - x1 sin,   x1' = x0 sin + x1 cos.
 * CPU reference: rope_rotate() in common/cpu/ops.c, with the same cos/sin
 * tables (rope_tables(), uploaded once).
 *
 * v1 "pair-per-thread": one thread per pair, one launch for q and one for
 *    k. Teaches: an elementwise op maps one thread to one independent
 *    piece of work; neighbouring threads touch neighbouring floats, so the
 *    loads coalesce.
 * v2 "fused-qk": one launch covers the pairs of q and of k. Teaches: at
 *    decode time these kernels are tiny and the launch itself (a few
 *    microseconds) costs more than the work; fusing launches is the first
 *    fix.
 *
 * Both round every product and sum exactly like the CPU (the __fmul_rn /
 * __fadd_rn intrinsics forbid fused multiply-adds), so the result is
 * bitwise equal to the reference: the check's tolerance is 0. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_rope_versions[] = {
    {"pair-per-thread", "one thread per rotated pair, q and k in separate launches"},
    {"fused-qk", "one launch rotates the pairs of q and k together"},
};
extern "C" const int kvk_rope_n_versions = 2;

/* Rotates pair `p` (of width/2 pairs) of token i's row. */
__device__ __forceinline__ void rope_pair(float *row, int p, int head_dim, const float *cos_row, const float *sin_row)
{
    int i = 2 * p, pair = (i % head_dim) / 2;
    float c = cos_row[pair], s = sin_row[pair];
    float v0 = row[i], v1 = row[i + 1];
    row[i] = __fsub_rn(__fmul_rn(v0, c), __fmul_rn(v1, s));
    row[i + 1] = __fadd_rn(__fmul_rn(v0, s), __fmul_rn(v1, c));
}

__global__ void rope_v1(float *x, const int *pos, const float *cos_t, const float *sin_t, int n, int width,
                        int head_dim)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int pairs = width / 2;
    if (idx >= (long long)n * pairs)
        return;
    int token = (int)(idx / pairs), p = (int)(idx % pairs);
    long long table_row = (long long)pos[token] * (head_dim / 2);
    rope_pair(x + (long long)token * width, p, head_dim, cos_t + table_row, sin_t + table_row);
}

__global__ void rope_v2(float *q, float *k, const int *pos, const float *cos_t, const float *sin_t, int n,
                        int q_width, int k_width, int head_dim)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int q_pairs = q_width / 2, k_pairs = k_width / 2, pairs = q_pairs + k_pairs;
    if (idx >= (long long)n * pairs)
        return;
    int token = (int)(idx / pairs), p = (int)(idx % pairs);
    long long table_row = (long long)pos[token] * (head_dim / 2);
    if (p < q_pairs)
        rope_pair(q + (long long)token * q_width, p, head_dim, cos_t + table_row, sin_t + table_row);
    else
        rope_pair(k + (long long)token * k_width, p - q_pairs, head_dim, cos_t + table_row, sin_t + table_row);
}

extern "C" int kvk_rope(int version, float *q, float *k, const int *pos, const float *cos_table,
                        const float *sin_table, int n, int q_width, int k_width, int head_dim, cudaStream_t stream,
                        Err *err)
{
    if (kvk_check_version(version, kvk_rope_n_versions, "rope", err))
        return -1;
    if (n == 0)
        return 0;
    if (n < 0 || head_dim <= 0 || head_dim % 2 || q_width % head_dim || k_width % head_dim)
        return err_set(err, "rope: bad shape (n %d, widths %d/%d, head_dim %d)", n, q_width, k_width, head_dim);
    const int threads = 256;
    if (version == 1) {
        rope_v1<<<kvk_blocks((long long)n * (q_width / 2), threads), threads, 0, stream>>>(q, pos, cos_table,
                                                                                          sin_table, n, q_width,
                                                                                          head_dim);
        if (KVK_CHECK_LAUNCH(err, "rope v1 (q)"))
            return -1;
        rope_v1<<<kvk_blocks((long long)n * (k_width / 2), threads), threads, 0, stream>>>(k, pos, cos_table,
                                                                                          sin_table, n, k_width,
                                                                                          head_dim);
        return KVK_CHECK_LAUNCH(err, "rope v1 (k)");
    }
    long long total = (long long)n * (q_width / 2 + k_width / 2);
    rope_v2<<<kvk_blocks(total, threads), threads, 0, stream>>>(q, k, pos, cos_table, sin_table, n, q_width, k_width,
                                                               head_dim);
    return KVK_CHECK_LAUNCH(err, "rope v2");
}
