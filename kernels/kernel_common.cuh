/* What every kernel file shares: checking a launch, element types, 16-byte
 * vector loads, warp and block reductions, and the online softmax that the
 * attention kernels are built on. Device code only; see kernels.h for the
 * C interface. */
#ifndef KVLAB_KERNEL_COMMON_CUH
#define KVLAB_KERNEL_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <string.h>

#include "kernels.h"

/* Checks the launch just queued: a bad configuration (too many threads,
 * too much shared memory) is reported here, with the caller's file:line. */
#define KVK_CHECK_LAUNCH(err, what) kvk_check_launch((err), (what), __FILE__, __LINE__)

static inline int kvk_check_launch(Err *err, const char *what, const char *file, int line)
{
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return err_set(err, "%s:%d: launching %s: %s", file, line, what, cudaGetErrorString(rc));
    return 0;
}

/* Refuses a version number outside 1..n with a message that names the op. */
static inline int kvk_check_version(int version, int n, const char *op, Err *err)
{
    if (version < 1 || version > n)
        return err_set(err, "%s: there is no version %d (versions 1..%d)", op, version, n);
    return 0;
}

/* Blocks needed to cover n items with `threads` threads each. */
static inline unsigned kvk_blocks(long long n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* ------------------------------------------------------- element types */

__device__ __forceinline__ float kvk_to_f32(float x) { return x; }
__device__ __forceinline__ float kvk_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float kvk_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T kvk_from_f32(float x);
template <> __device__ __forceinline__ float kvk_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half kvk_from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 kvk_from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Sixteen bytes of elements, loaded or stored with one 128-bit access (the
 * widest a thread can issue). 4 floats, or 8 halves / bfloat16s. The
 * address must be 16-byte aligned. (llm.c calls this Packed128.) */
template <typename T> struct alignas(16) Vec16 {
    static constexpr int size = 16 / (int)sizeof(T);
    T v[size];

    __device__ __forceinline__ static Vec16 load(const T *p)
    {
        Vec16 r;
        int4 bits = *reinterpret_cast<const int4 *>(p);
        memcpy(&r.v, &bits, sizeof bits);
        return r;
    }
    __device__ __forceinline__ void store(T *p) const
    {
        int4 bits;
        memcpy(&bits, &v, sizeof bits);
        *reinterpret_cast<int4 *>(p) = bits;
    }
};

/* ------------------------------------------------------------ reductions */

#define KVK_FULL_MASK 0xffffffffu

__device__ __forceinline__ float kvk_warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(KVK_FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ float kvk_warp_max(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(KVK_FULL_MASK, v, offset));
    return v;
}

/* Sum over the whole block; every thread gets the result. blockDim.x must
 * be a multiple of 32. Every thread of the block must call it. The first
 * barrier lets a second call reuse `partial` safely. */
__device__ __forceinline__ float kvk_block_sum(float v)
{
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = kvk_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : 0.0f;
    return kvk_warp_sum(v);
}

/* Maximum over the whole block; same rules as kvk_block_sum(). */
__device__ __forceinline__ float kvk_block_max(float v)
{
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = kvk_warp_max(v);
    __syncthreads();
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : -INFINITY;
    return kvk_warp_max(v);
}

/* ------------------------------------------------------ online softmax
 *
 * Softmax-weighted sums can be computed in one pass over the keys (Milakov
 * and Gimelshein 2018, the core of FlashAttention): keep the largest score
 * m seen so far, the sum l of exp(score - m), and the weighted sum of
 * values acc, rescaling l and acc whenever m grows. Two such partial
 * results over disjoint keys merge exactly the same way, which is how the
 * thread groups of a block, and the partitions of the split kernel, are
 * combined:
 *
 *   M = max(m1, m2),  l = l1 e^(m1-M) + l2 e^(m2-M),  acc likewise,
 *   output = acc / l.
 *
 * An empty partial result has m = -inf, l = 0, acc = 0 and weight 0. */

/* Weight of a partial result with maximum m inside a merge whose maximum
 * is M; 0 for an empty one (which also avoids -inf - -inf = NaN). */
__device__ __forceinline__ float kvk_merge_weight(float m, float M)
{
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* ---------------------------------------------- thread-group attention
 *
 * The fast attention kernels (attention.cu v3, paged_attention.cu) share
 * this inner loop. A block of KVK_ATTENTION_THREADS threads handles one
 * (entry, head) and a range of positions. The threads form groups of G
 * lanes; a group handles one key at a time, its lanes splitting the head's
 * elements into 16-byte vectors (lane j takes vectors j, j+G, j+2G, ...:
 * NV of them), so that the lanes of a group read one contiguous row with
 * coalesced 16-byte loads. The group's partial dot products are summed with
 * warp shuffles, and each group keeps an online-softmax state for the keys
 * it saw. At the end the block merges the states of its groups in shared
 * memory.
 *
 * G is a power of two up to 32 that divides head_dim / VEC (VEC elements
 * per 16 bytes), NV = head_dim / (VEC x G) <= KVK_MAX_NV. The host picks
 * them (kvk_group_shape() below).
 */

#define KVK_MAX_NV 8

/* The group shape for a head: lanes per group and vectors per lane.
 * Returns 0 when the head cannot be split this way. */
static inline int kvk_group_shape(int head_dim, int elem_bytes, int *lanes, int *vectors)
{
    int per_vec = 16 / elem_bytes;
    if (head_dim <= 0 || head_dim % per_vec != 0)
        return 0;
    int n_vec = head_dim / per_vec, g = 1;
    while (g < 32 && n_vec % (2 * g) == 0)
        g *= 2;
    if (n_vec / g > KVK_MAX_NV)
        return 0;
    *lanes = g;
    *vectors = n_vec / g;
    return 1;
}

/* Row of the cache that holds position t of a sequence stored
 * contiguously from row `base`. */
struct KvkContiguousRows {
    long long base;
    __device__ __forceinline__ long long operator()(int t) const { return base + t; }
};

/* Row that holds position t of a sequence stored in blocks, counted from
 * the layer's K (or V) of block 0: row t % block_size of block
 * table[t / block_size], blocks block_rows rows apart (2 x n_layers x
 * block_size in chapter 4's pool, where a block holds every layer). */
struct KvkPagedRows {
    const int *table;     /* [max_blocks] this sequence's block ids */
    int shift;            /* log2(block_size) */
    long long block_rows; /* rows from one block to the next */
    __device__ __forceinline__ long long operator()(int t) const
    {
        int mask = (1 << shift) - 1;
        return (long long)table[t >> shift] * block_rows + (t & mask);
    }
};

/* Attention state of one group over the keys it saw. */
template <int NV, int VEC> struct KvkGroupState {
    float m;               /* largest score so far */
    float l;               /* sum of exp(score - m) */
    float acc[NV][VEC];    /* sum of exp(score - m) * value, this lane's elements */
};

/* Runs the keys t_begin <= t < t_end of one (entry, head) through the
 * block's groups and leaves each group's state in `s`. Every thread of the
 * block must call it with the same range (the loop runs the same number of
 * times in every lane, so the shuffles never miss a lane).
 *
 * q_head: [head_dim] f32; k_head, v_head: the cache layer offset to this
 * K/V head's columns, rows kv_dim apart. */
template <typename T, int NV, typename Rows>
__device__ __forceinline__ void kvk_group_attend(KvkGroupState<NV, Vec16<T>::size> &s, const float *q_head,
                                                 const T *k_head, const T *v_head, long long kv_dim, Rows rows,
                                                 int t_begin, int t_end, int lanes, float scale)
{
    constexpr int VEC = Vec16<T>::size;
    const int group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    const int groups = blockDim.x / lanes;

    float q[NV][VEC];
#pragma unroll
    for (int c = 0; c < NV; c++)
#pragma unroll
        for (int e = 0; e < VEC; e++)
            q[c][e] = q_head[(lane + c * lanes) * VEC + e];

    s.m = -INFINITY;
    s.l = 0.0f;
#pragma unroll
    for (int c = 0; c < NV; c++)
#pragma unroll
        for (int e = 0; e < VEC; e++)
            s.acc[c][e] = 0.0f;

    for (int t0 = t_begin; t0 < t_end; t0 += groups) {
        const int t = t0 + group;
        const bool valid = t < t_end;
        const long long row = valid ? rows(t) : 0;
        float dot = 0.0f;
        if (valid) {
            const T *k_row = k_head + row * kv_dim;
#pragma unroll
            for (int c = 0; c < NV; c++) {
                Vec16<T> kv = Vec16<T>::load(k_row + (lane + c * lanes) * VEC);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    dot += q[c][e] * kvk_to_f32(kv.v[e]);
            }
        }
        /* Sum the group's partial dots; all 32 lanes take part. */
        for (int offset = lanes / 2; offset > 0; offset >>= 1)
            dot += __shfl_xor_sync(KVK_FULL_MASK, dot, offset);
        if (!valid)
            continue;
        const float score = dot * scale;
        const float m_new = fmaxf(s.m, score);
        const float rescale = expf(s.m - m_new); /* 0 on the first key: s.m = -inf */
        const float p = expf(score - m_new);
        s.l = s.l * rescale + p;
        s.m = m_new;
        const T *v_row = v_head + row * kv_dim;
#pragma unroll
        for (int c = 0; c < NV; c++) {
            Vec16<T> vv = Vec16<T>::load(v_row + (lane + c * lanes) * VEC);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                s.acc[c][e] = s.acc[c][e] * rescale + p * kvk_to_f32(vv.v[e]);
        }
    }
}

/* Merges the groups' states of a block. `shared` holds
 * groups x (head_dim + 2) floats. Afterwards every thread can read the
 * merged maximum (*M), sum (*L) and, for d < head_dim, the unnormalised
 * sum acc[d] from `shared` (see kvk_merged_acc()). Every thread of the block
 * must call it. */
template <int NV, int VEC>
__device__ __forceinline__ void kvk_block_merge(const KvkGroupState<NV, VEC> &s, float *shared, int head_dim,
                                                int lanes, float *M, float *L)
{
    const int group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    const int groups = blockDim.x / lanes;
    float *g_m = shared;                       /* [groups] */
    float *g_l = shared + groups;              /* [groups] */
    float *g_acc = shared + 2 * groups;        /* [groups][head_dim] */
    if (lane == 0) {
        g_m[group] = s.m;
        g_l[group] = s.l;
    }
#pragma unroll
    for (int c = 0; c < NV; c++)
#pragma unroll
        for (int e = 0; e < VEC; e++)
            g_acc[group * head_dim + (lane + c * lanes) * VEC + e] = s.acc[c][e];
    __syncthreads();
    float m = -INFINITY;
    for (int g = 0; g < groups; g++)
        m = fmaxf(m, g_m[g]);
    float l = 0.0f;
    for (int g = 0; g < groups; g++)
        l += g_l[g] * kvk_merge_weight(g_m[g], m);
    *M = m;
    *L = l;
}

/* Element d of the merged unnormalised sum (after kvk_block_merge()). */
__device__ __forceinline__ float kvk_merged_acc(const float *shared, int groups, int head_dim, int d, float M)
{
    const float *g_m = shared, *g_acc = shared + 2 * groups;
    float a = 0.0f;
    for (int g = 0; g < groups; g++)
        a += g_acc[g * head_dim + d] * kvk_merge_weight(g_m[g], M);
    return a;
}

#endif
