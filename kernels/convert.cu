/* Element type conversion f32 -> f16/bf16 on the device, rounding to
 * nearest even (what dtype_from_f32() in common/dtype.c does on the host,
 * bit for bit). The forward pass uses it to hand cublasGemmEx activations
 * of the weights' type. A helper, not one of the course's kernels: one
 * version. */
#include "kernel_common.cuh"

template <typename T> __global__ void convert_from_f32(T *dst, const float *src, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = kvk_from_f32<T>(src[i]);
}

extern "C" int kvk_convert_from_f32(void *dst, Dtype t, const float *src, long long n, cudaStream_t stream, Err *err)
{
    if (n <= 0)
        return n == 0 ? 0 : err_set(err, "convert: negative size %lld", n);
    const int threads = 256;
    unsigned blocks = kvk_blocks(n, threads);
    switch (t) {
    case DTYPE_F32: {
        cudaError_t rc = cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
        if (rc != cudaSuccess)
            return err_set(err, "%s:%d: convert f32: cudaMemcpyAsync: %s", __FILE__, __LINE__, cudaGetErrorString(rc));
        return 0;
    }
    case DTYPE_F16: convert_from_f32<<<blocks, threads, 0, stream>>>((__half *)dst, src, n); break;
    case DTYPE_BF16: convert_from_f32<<<blocks, threads, 0, stream>>>((__nv_bfloat16 *)dst, src, n); break;
    default: return err_set(err, "convert: unknown type %d", (int)t);
    }
    return KVK_CHECK_LAUNCH(err, "convert");
}
