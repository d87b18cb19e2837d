/* SwiGLU gate: gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g).
 * CPU reference: swiglu() in common/cpu/ops.c.
 *
 * v1 "element-per-thread": one thread per element. Teaches: the plain
 *    elementwise map; memory-bound, so its speed is bytes moved over
 *    bandwidth.
 * v2 "vec4": each thread handles four elements with 16-byte loads and
 *    stores (float4). Teaches: fewer, wider memory instructions get closer
 *    to peak bandwidth; the tail that is not a multiple of four is handled
 *    one element at a time.
 *
 * expf on the device and in glibc may differ by an ulp or two, so results
 * agree with the CPU to a few ulps, not bitwise. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_swiglu_versions[] = {
    {"element-per-thread", "one thread per element"},
    {"vec4", "four elements per thread with 16-byte loads and stores"},
};
extern "C" const int kvk_swiglu_n_versions = 2;

__device__ __forceinline__ float swiglu_one(float g, float u)
{
    g = g * (1.0f / (1.0f + expf(-g)));
    return g * u;
}

__global__ void swiglu_v1(float *gate, const float *up, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        gate[i] = swiglu_one(gate[i], up[i]);
}

/* gate and up come from cudaMalloc (256-byte aligned) and are used from
 * offset 0, so element 4i is 16-byte aligned. */
__global__ void swiglu_v2(float *gate, const float *up, long long n)
{
    long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long i = 4 * i4;
    if (i + 3 < n) {
        float4 g = reinterpret_cast<float4 *>(gate)[i4];
        float4 u = reinterpret_cast<const float4 *>(up)[i4];
        g.x = swiglu_one(g.x, u.x);
        g.y = swiglu_one(g.y, u.y);
        g.z = swiglu_one(g.z, u.z);
        g.w = swiglu_one(g.w, u.w);
        reinterpret_cast<float4 *>(gate)[i4] = g;
    } else {
        for (; i < n; i++)
            gate[i] = swiglu_one(gate[i], up[i]);
    }
}

extern "C" int kvk_swiglu(int version, float *gate, const float *up, long long n, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_swiglu_n_versions, "swiglu", err))
        return -1;
    if (n <= 0)
        return n == 0 ? 0 : err_set(err, "swiglu: negative size %lld", n);
    const int threads = 256;
    if (version == 1) {
        swiglu_v1<<<kvk_blocks(n, threads), threads, 0, stream>>>(gate, up, n);
        return KVK_CHECK_LAUNCH(err, "swiglu v1");
    }
    if (((size_t)gate | (size_t)up) % 16)
        return err_set(err, "swiglu v2: pointers must be 16-byte aligned");
    swiglu_v2<<<kvk_blocks((n + 3) / 4, threads), threads, 0, stream>>>(gate, up, n);
    return KVK_CHECK_LAUNCH(err, "swiglu v2");
}
