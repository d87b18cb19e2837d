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

/* nvcc defines __launch_bounds__; the CPU emulator's g++ does not, and has
 * no registers to bound. */
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

/* Checks the launch just queued: a bad configuration (too many threads,
 * too much shared memory) is reported here, with the caller's file:line.
 * cudaGetLastError() also returns a fault of an EARLIER kernel or copy (an
 * illegal address, say) once the runtime has seen it, and such a fault is
 * sticky: every later call returns it. The launch checked here did not
 * cause it, so the message says so instead of blaming this kernel. */
#define KVK_CHECK_LAUNCH(err, what) kvk_check_launch((err), (what), __FILE__, __LINE__)

static inline int kvk_check_launch(Err *err, const char *what, const char *file, int line)
{
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess)
        return 0;
    return kvk_launch_error(err, (int)rc, what, file, line);
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

/* A 16-byte load of K or V, which a kernel reads once and never again:
 * ld.global.cs ("cache streaming", evict first), so that the rows streamed
 * through L2 do not push out what is read again (the query, the block
 * table, the other kernels' weights). The CPU emulator compiles device code
 * as host code (no __CUDA_ARCH__): a plain load there. */
template <typename T> __device__ __forceinline__ Vec16<T> kvk_load_stream(const T *p)
{
    Vec16<T> r;
#ifdef __CUDA_ARCH__
    int4 bits = __ldcs(reinterpret_cast<const int4 *>(p));
#else
    int4 bits = *reinterpret_cast<const int4 *>(p);
#endif
    memcpy(&r.v, &bits, sizeof bits);
    return r;
}

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
 * K/V head's columns, rows kv_dim apart, read once (streaming loads). */
template <typename T, int NV, typename Rows>
__device__ __forceinline__ void kvk_group_attend(KvkGroupState<NV, Vec16<T>::size> &s, const float *__restrict__ q_head,
                                                 const T *__restrict__ k_head, const T *__restrict__ v_head,
                                                 long long kv_dim, Rows rows, int t_begin, int t_end, int lanes,
                                                 float scale)
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
                Vec16<T> kv = kvk_load_stream(k_row + (lane + c * lanes) * VEC);
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
            Vec16<T> vv = kvk_load_stream(v_row + (lane + c * lanes) * VEC);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                s.acc[c][e] = s.acc[c][e] * rescale + p * kvk_to_f32(vv.v[e]);
        }
    }
}

/* ------------------------------------------------ merging in a block
 *
 * At the end of its keys every group holds a state per head. The block
 * merges them in shared memory, one region per head:
 *
 *     [groups] m, [groups] l, [groups] w, [groups][head_dim] acc
 *
 * where w is each group's weight in the merge, e^(m_g - M), computed once
 * per group (not once per element of the output). */

/* Floats of shared memory the merge of `heads` heads needs. */
static inline size_t kvk_merge_floats(int groups, int heads, int head_dim)
{
    return (size_t)groups * (size_t)heads * (size_t)(head_dim + 3);
}

/* The region of head h in the merge's shared memory. */
__device__ __forceinline__ float *kvk_merge_region(float *shared, int h, int groups, int head_dim)
{
    return shared + (size_t)h * groups * (head_dim + 3);
}

/* Merges the states of the block's groups for H heads (s[h]: this
 * thread's state for head h; `shared`: kvk_merge_floats(groups, H,
 * head_dim) floats). Afterwards every thread has each head's merged
 * maximum M[h] and sum L[h], and reads element d of its unnormalised
 * weighted sum with kvk_merged_acc(). Every thread of the block must call
 * it. */
template <int NV, int VEC, int H>
__device__ __forceinline__ void kvk_block_merge(const KvkGroupState<NV, VEC> *s, float *shared, int head_dim,
                                                int lanes, float *M, float *L)
{
    const int group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    const int groups = blockDim.x / lanes;
#pragma unroll
    for (int h = 0; h < H; h++) {
        float *r = kvk_merge_region(shared, h, groups, head_dim);
        if (lane == 0) {
            r[group] = s[h].m;
            r[groups + group] = s[h].l;
        }
#pragma unroll
        for (int c = 0; c < NV; c++)
#pragma unroll
            for (int e = 0; e < VEC; e++)
                r[3 * groups + group * head_dim + (lane + c * lanes) * VEC + e] = s[h].acc[c][e];
    }
    __syncthreads();
    /* One thread per (head, group) computes that group's weight. */
    for (int j = threadIdx.x; j < H * groups; j += blockDim.x) {
        float *r = kvk_merge_region(shared, j / groups, groups, head_dim);
        float m = -INFINITY;
        for (int g = 0; g < groups; g++)
            m = fmaxf(m, r[g]);
        r[2 * groups + j % groups] = kvk_merge_weight(r[j % groups], m);
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < H; h++) {
        const float *r = kvk_merge_region(shared, h, groups, head_dim);
        float m = -INFINITY, l = 0.0f;
        for (int g = 0; g < groups; g++) {
            m = fmaxf(m, r[g]);
            l += r[groups + g] * r[2 * groups + g];
        }
        M[h] = m;
        L[h] = l;
    }
}

/* Element d of head h's merged unnormalised sum (after kvk_block_merge()). */
__device__ __forceinline__ float kvk_merged_acc(float *shared, int h, int groups, int head_dim, int d)
{
    const float *r = kvk_merge_region(shared, h, groups, head_dim);
    const float *w = r + 2 * groups, *acc = r + 3 * groups;
    float a = 0.0f;
    for (int g = 0; g < groups; g++)
        a += acc[g * head_dim + d] * w[g];
    return a;
}

/* ------------------------------------- a block's whole job, two ways
 *
 * The contiguous and the paged kernels differ only in Rows, how they find
 * a key's row: these are the bodies they share. */

/* One pass over positions 0..n_pos-1 of one (entry, head): every group's
 * keys, merged, normalised into out[head_dim]. Every thread of the block
 * calls it. */
template <typename T, int NV, typename Rows>
__device__ __forceinline__ void kvk_attend_one_pass(float *out, const float *q_head, const T *k_head,
                                                    const T *v_head, long long kv_dim, Rows rows, int n_pos,
                                                    int head_dim, int lanes, float *merge)
{
    KvkGroupState<NV, Vec16<T>::size> s;
    kvk_group_attend<T, NV>(s, q_head, k_head, v_head, kv_dim, rows, 0, n_pos, lanes, 1.0f / sqrtf((float)head_dim));
    float M, L;
    kvk_block_merge<NV, Vec16<T>::size, 1>(&s, merge, head_dim, lanes, &M, &L);
    int groups = blockDim.x / lanes;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        out[d] = kvk_merged_acc(merge, 0, groups, head_dim, d) / L;
}

/* One partition, `part`, of KVK_SPLIT_PARTITION positions of one (entry,
 * head): its keys, merged, left unnormalised as partial result `slot` (the
 * layout of kvk_split_reduce() below, which merges the partitions). A
 * partition past the sequence leaves at once, the whole block. */
template <typename T, int NV, typename Rows>
__device__ __forceinline__ void kvk_attend_partition(float *part_m, float *part_l, float *part_acc, long long slot,
                                                     const float *q_head, const T *k_head, const T *v_head,
                                                     long long kv_dim, Rows rows, int n_pos, int part, int head_dim,
                                                     int lanes, float *merge)
{
    int t_begin = part * KVK_SPLIT_PARTITION;
    if (t_begin >= n_pos)
        return;
    int t_end = min(n_pos, t_begin + KVK_SPLIT_PARTITION);
    KvkGroupState<NV, Vec16<T>::size> s;
    kvk_group_attend<T, NV>(s, q_head, k_head, v_head, kv_dim, rows, t_begin, t_end, lanes,
                            1.0f / sqrtf((float)head_dim));
    float M, L;
    kvk_block_merge<NV, Vec16<T>::size, 1>(&s, merge, head_dim, lanes, &M, &L);
    if (threadIdx.x == 0) {
        part_m[slot] = M;
        part_l[slot] = L;
    }
    int groups = blockDim.x / lanes;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        part_acc[slot * head_dim + d] = kvk_merged_acc(merge, 0, groups, head_dim, d);
}

/* ---------------------------------------------- merging partitions
 *
 * The split kernels (attention v4, paged attention v2 and v3) cut each
 * sequence into partitions of part_len positions; a first kernel leaves
 * one partial result per (entry, head, partition) in scratch,
 *
 *     part_m, part_l: [pairs][max_parts]   part_acc: [pairs][max_parts][head_dim]
 *
 * and this kernel merges the partitions of each (entry, head) (one block
 * each; `max_parts` floats of dynamic shared memory), the same merge as
 * the groups inside a block, one level up. The grid of the first kernel
 * was sized on the host from max_pos, but this kernel reads how many
 * partitions an entry has from its position on the device. The caller's
 * rule is pos[i] < max_pos; an entry that breaks it has partitions nobody
 * computed, and reading them would read the next pair's partials. Its
 * output is NaN instead, which every comparison with a reference catches.
 * (A template only so that the files that include this header and do not
 * launch it compile no copy of it.) */
template <typename Unused>
__global__ void kvk_split_reduce(float *__restrict__ out, const float *__restrict__ part_m,
                                 const float *__restrict__ part_l, const float *__restrict__ part_acc,
                                 const int *__restrict__ pos, int n_heads, int head_dim, int max_parts, int part_len)
{
    extern __shared__ float weight[]; /* [max_parts] */
    int pair = blockIdx.x, i = pair / n_heads;
    int parts = pos[i] / part_len + 1;
    if (parts > max_parts) {
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
            out[(long long)pair * head_dim + d] = nanf("");
        return;
    }
    const float *m = part_m + (long long)pair * max_parts, *l = part_l + (long long)pair * max_parts;
    const float *acc = part_acc + (long long)pair * max_parts * head_dim;
    float M = -INFINITY;
    for (int p = 0; p < parts; p++)
        M = fmaxf(M, m[p]);
    for (int p = threadIdx.x; p < parts; p += blockDim.x)
        weight[p] = kvk_merge_weight(m[p], M);
    __syncthreads();
    float L = 0.0f;
    for (int p = 0; p < parts; p++)
        L += l[p] * weight[p];
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int p = 0; p < parts; p++)
            a += acc[(long long)p * head_dim + d] * weight[p];
        out[(long long)pair * head_dim + d] = a / L;
    }
}

/* Threads of a kvk_split_reduce() block: whole warps, at most 128. */
static inline int kvk_split_reduce_threads(int head_dim)
{
    return head_dim >= 128 ? 128 : ((head_dim + 31) / 32) * 32;
}

#endif
