/* Writing K and V into cache slots: k_layer[slots[i]] = k[i] (and V),
 * converted to the cache's element type. This is the device half of the
 * K/V seam's "store": the host computes one slot per token (the slot
 * mapping, as vLLM calls it) and one launch writes the whole batch.
 * Chapter 2: slot = position; chapter 3: region start + position;
 * chapter 4: block_table[pos / bs] x bs + pos % bs. A negative slot means
 * "do not store" (a token that is recomputed but not kept).
 * CPU reference: kv_write_reference() in kernels/check/kv_ref.c.
 *
 * v1 "element-per-thread": one thread per element of K (and the same
 *    element of V). Teaches: a scatter of rows; each row is written
 *    contiguously, so it coalesces although rows land anywhere.
 * v2 "vec4": four elements per thread: one 16-byte load of K, one store of
 *    4 converted elements (16 bytes for f32, 8 for f16/bf16). Teaches: wide
 *    accesses; kv_dim must be a multiple of 4.
 *
 * Conversion rounds to nearest even; the result is bitwise the reference's. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_kv_write_versions[] = {
    {"element-per-thread", "one thread per element, scattered by the slot mapping"},
    {"vec4", "four elements per thread with 16-byte loads"},
};
extern "C" const int kvk_kv_write_n_versions = 2;

template <typename T>
__global__ void kv_write_v1(T *k_layer, T *v_layer, const float *k, const float *v, const long long *slots, int n,
                            int kv_dim)
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * kv_dim)
        return;
    int i = (int)(idx / kv_dim), j = (int)(idx % kv_dim);
    long long slot = slots[i];
    if (slot < 0)
        return;
    k_layer[slot * kv_dim + j] = kvk_from_f32<T>(k[idx]);
    v_layer[slot * kv_dim + j] = kvk_from_f32<T>(v[idx]);
}

/* Four consecutive elements of type T, stored with one access. */
template <typename T> struct alignas(4 * sizeof(T)) Four {
    T v[4];
};

template <typename T>
__global__ void kv_write_v2(T *k_layer, T *v_layer, const float *k, const float *v, const long long *slots, int n,
                            int kv_dim)
{
    long long idx4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int quads = kv_dim / 4;
    if (idx4 >= (long long)n * quads)
        return;
    int i = (int)(idx4 / quads), j = 4 * (int)(idx4 % quads);
    long long slot = slots[i];
    if (slot < 0)
        return;
    float4 kf = *reinterpret_cast<const float4 *>(k + (long long)i * kv_dim + j);
    float4 vf = *reinterpret_cast<const float4 *>(v + (long long)i * kv_dim + j);
    Four<T> ko, vo;
    ko.v[0] = kvk_from_f32<T>(kf.x); ko.v[1] = kvk_from_f32<T>(kf.y);
    ko.v[2] = kvk_from_f32<T>(kf.z); ko.v[3] = kvk_from_f32<T>(kf.w);
    vo.v[0] = kvk_from_f32<T>(vf.x); vo.v[1] = kvk_from_f32<T>(vf.y);
    vo.v[2] = kvk_from_f32<T>(vf.z); vo.v[3] = kvk_from_f32<T>(vf.w);
    *reinterpret_cast<Four<T> *>(k_layer + slot * kv_dim + j) = ko;
    *reinterpret_cast<Four<T> *>(v_layer + slot * kv_dim + j) = vo;
}

template <typename T>
static void kv_write_launch(int version, void *k_layer, void *v_layer, const float *k, const float *v,
                            const long long *slots, int n, int kv_dim, cudaStream_t stream)
{
    const int threads = 256;
    if (version == 1)
        kv_write_v1<T><<<kvk_blocks((long long)n * kv_dim, threads), threads, 0, stream>>>(
            (T *)k_layer, (T *)v_layer, k, v, slots, n, kv_dim);
    else
        kv_write_v2<T><<<kvk_blocks((long long)n * (kv_dim / 4), threads), threads, 0, stream>>>(
            (T *)k_layer, (T *)v_layer, k, v, slots, n, kv_dim);
}

extern "C" int kvk_kv_write(int version, Dtype t, void *k_layer, void *v_layer, const float *k, const float *v,
                            const long long *slots, int n, int kv_dim, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_kv_write_n_versions, "kv_write", err))
        return -1;
    if (n == 0)
        return 0;
    if (n < 0 || kv_dim <= 0)
        return err_set(err, "kv_write: bad shape (%d tokens of %d)", n, kv_dim);
    if (version == 2 && kv_dim % 4)
        return err_set(err, "kv_write v2: kv_dim %d is not a multiple of 4", kv_dim);
    switch (t) {
    case DTYPE_F32: kv_write_launch<float>(version, k_layer, v_layer, k, v, slots, n, kv_dim, stream); break;
    case DTYPE_F16: kv_write_launch<__half>(version, k_layer, v_layer, k, v, slots, n, kv_dim, stream); break;
    case DTYPE_BF16: kv_write_launch<__nv_bfloat16>(version, k_layer, v_layer, k, v, slots, n, kv_dim, stream); break;
    default: return err_set(err, "kv_write: unknown type %d", (int)t);
    }
    return KVK_CHECK_LAUNCH(err, version == 1 ? "kv_write v1" : "kv_write v2");
}
