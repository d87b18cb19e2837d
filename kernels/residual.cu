/* Residual connection: out[i] += other[i] (add_inplace() in common/cpu/ops.c).
 *
 * v1 "element-per-thread": one thread per element.
 * v2 "vec4": four elements per thread with float4 loads and stores.
 *    Teaches (with swiglu.cu): wide accesses for memory-bound maps.
 *
 * A single addition per element: both versions are bitwise equal to the
 * CPU. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_residual_versions[] = {
    {"element-per-thread", "one thread per element"},
    {"vec4", "four elements per thread with 16-byte loads and stores"},
};
extern "C" const int kvk_residual_n_versions = 2;

__global__ void residual_v1(float *out, const float *other, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] += other[i];
}

__global__ void residual_v2(float *out, const float *other, long long n)
{
    long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long i = 4 * i4;
    if (i + 3 < n) {
        float4 a = reinterpret_cast<float4 *>(out)[i4];
        float4 b = reinterpret_cast<const float4 *>(other)[i4];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        reinterpret_cast<float4 *>(out)[i4] = a;
    } else {
        for (; i < n; i++)
            out[i] += other[i];
    }
}

extern "C" int kvk_residual_add(int version, float *out, const float *other, long long n, cudaStream_t stream,
                                Err *err)
{
    if (kvk_check_version(version, kvk_residual_n_versions, "residual", err))
        return -1;
    if (n <= 0)
        return n == 0 ? 0 : err_set(err, "residual: negative size %lld", n);
    const int threads = 256;
    if (version == 1) {
        residual_v1<<<kvk_blocks(n, threads), threads, 0, stream>>>(out, other, n);
        return KVK_CHECK_LAUNCH(err, "residual v1");
    }
    if (((size_t)out | (size_t)other) % 16)
        return err_set(err, "residual v2: pointers must be 16-byte aligned");
    residual_v2<<<kvk_blocks((n + 3) / 4, threads), threads, 0, stream>>>(out, other, n);
    return KVK_CHECK_LAUNCH(err, "residual v2");
}
