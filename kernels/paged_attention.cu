/* PagedAttention (chapter 4): causal attention whose keys and values are
 * read through a block table, never gathered into a contiguous copy.
 * The pool has the CPU pool's layout (block_pool.h),
 *   [n_blocks][n_layers][2 (K, V)][block_size][kv_dim],
 * so position p of entry i is row p % block_size of the layer's K (and,
 * block_size rows further, V) in block
 *   block_tables[entry_table[i]][p / block_size];
 * block_size is a power of two, so the division is a shift and the
 * remainder a mask, and blocks are 2 x n_layers x block_size rows apart.
 * CPU reference: paged_attention() of chapter 4 (the lab,
 * solutions/ch04/paged_attention.c), on the same pool.
 *
 * v1 "one-pass": attention.cu's v3 with the row lookup swapped: one block
 *    per (entry, head), thread groups reading whole rows with 16-byte loads,
 *    online softmax, groups merged in shared memory. Within a block of the
 *    cache the rows are contiguous, so the loads coalesce exactly as in the
 *    contiguous kernel; the only extra cost is one (cached) block-table read
 *    per key. Teaches: paging costs almost nothing when the kernel reads
 *    whole rows and the table is small (vLLM measured 20-26% overhead for
 *    its first kernel; the goal here is 10%).
 * v2 "split": the sequence is cut into partitions of KVK_PAGED_PARTITION
 *    positions; a grid of (entry x head) x partitions computes one online-
 *    softmax partial result per partition into scratch, and a second kernel
 *    merges the partials of each (entry, head). Teaches: with few long
 *    sequences, v1 has fewer blocks than the GPU has multiprocessors;
 *    splitting along the sequence (flash-decoding, vLLM's PagedAttention
 *    v2) fills the GPU, at the price of a second launch and a little
 *    scratch traffic.
 *
 * Accumulation is f32 whatever the cache's type. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_paged_attention_versions[] = {
    {"one-pass", "a block per (entry, head) reads through the block table in one pass"},
    {"split", "partitions along the sequence in parallel, then a merge kernel"},
};
extern "C" const int kvk_paged_attention_n_versions = 2;

template <typename T> struct PagedArgs {
    float *out;
    const float *q;
    const T *k;
    const T *v;
    const int *block_tables;
    int max_blocks;
    const int *entry_table;
    int shift;            /* log2(block_size) */
    long long block_rows; /* rows from one block to the next: 2 x n_layers x block_size */
    const int *pos;
    int n, n_heads, kv_mul, head_dim, kv_dim;
    float *part_m;   /* [pairs][max_parts] */
    float *part_l;   /* [pairs][max_parts] */
    float *part_acc; /* [pairs][max_parts][head_dim] */
    int max_parts;
};

template <typename T>
__device__ __forceinline__ KvkPagedRows paged_rows(const PagedArgs<T> &a, int i)
{
    KvkPagedRows rows = {a.block_tables + (long long)a.entry_table[i] * a.max_blocks, a.shift, a.block_rows};
    return rows;
}

template <typename T, int NV> __global__ void paged_v1(PagedArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* [groups][head_dim + 2] */
    constexpr int VEC = Vec16<T>::size;
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *q = a.q + (long long)i * a.n_heads * hd + h * hd;
    long long column = (long long)(h / a.kv_mul) * hd;
    KvkGroupState<NV, VEC> s;
    kvk_group_attend<T, NV>(s, q, a.k + column, a.v + column, a.kv_dim, paged_rows(a, i), 0, a.pos[i] + 1, lanes,
                            1.0f / sqrtf((float)hd));
    float M, L;
    kvk_block_merge<NV, VEC>(s, merge, hd, lanes, &M, &L);
    float *out = a.out + (long long)i * a.n_heads * hd + h * hd;
    int groups = blockDim.x / lanes;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        out[d] = kvk_merged_acc(merge, groups, hd, d, M) / L;
}

template <typename T, int NV> __global__ void paged_v2_partition(PagedArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* [groups][head_dim + 2] */
    constexpr int VEC = Vec16<T>::size;
    int pair = blockIdx.x, part = blockIdx.y, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    int n_pos = a.pos[i] + 1, t_begin = part * KVK_PAGED_PARTITION;
    if (t_begin >= n_pos)
        return; /* the whole block leaves: this partition is past the sequence */
    int t_end = min(n_pos, t_begin + KVK_PAGED_PARTITION);
    const float *q = a.q + (long long)i * a.n_heads * hd + h * hd;
    long long column = (long long)(h / a.kv_mul) * hd;
    KvkGroupState<NV, VEC> s;
    kvk_group_attend<T, NV>(s, q, a.k + column, a.v + column, a.kv_dim, paged_rows(a, i), t_begin, t_end, lanes,
                            1.0f / sqrtf((float)hd));
    float M, L;
    kvk_block_merge<NV, VEC>(s, merge, hd, lanes, &M, &L);
    long long slot = (long long)pair * a.max_parts + part;
    if (threadIdx.x == 0) {
        a.part_m[slot] = M;
        a.part_l[slot] = L;
    }
    int groups = blockDim.x / lanes;
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        a.part_acc[slot * hd + d] = kvk_merged_acc(merge, groups, hd, d, M);
}

/* Merges the partitions of one (entry, head): the same merge as the groups
 * inside a block, one level up. The grid of the partition kernel was sized
 * on the host from max_pos, but this kernel reads how many partitions an
 * entry has from its position on the device. The caller's rule is
 * pos[i] < max_pos; an entry that breaks it has partitions nobody computed,
 * and reading them would read the next pair's partials. Its output is NaN
 * instead, which every comparison with a reference catches. */
__global__ void paged_v2_reduce(float *out, const float *part_m, const float *part_l, const float *part_acc,
                                const int *pos, int n_heads, int head_dim, int max_parts)
{
    int pair = blockIdx.x, i = pair / n_heads;
    int parts = (pos[i] + 1 + KVK_PAGED_PARTITION - 1) / KVK_PAGED_PARTITION;
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
    float L = 0.0f;
    for (int p = 0; p < parts; p++)
        L += l[p] * kvk_merge_weight(m[p], M);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int p = 0; p < parts; p++)
            a += acc[(long long)p * head_dim + d] * kvk_merge_weight(m[p], M);
        out[(long long)pair * head_dim + d] = a / L;
    }
}

static int max_partitions(int max_pos)
{
    return (max_pos + KVK_PAGED_PARTITION - 1) / KVK_PAGED_PARTITION;
}

extern "C" int kvk_paged_attention_supports(Dtype t, KvkHeads h)
{
    int lanes, vectors;
    if (h.n_heads <= 0 || h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads || (unsigned)t >= DTYPE_COUNT)
        return 0;
    return kvk_group_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors);
}

extern "C" size_t kvk_paged_attention_scratch_floats(int version, int n, int max_pos, KvkHeads h)
{
    if (version != 2)
        return 0;
    return (size_t)n * (size_t)h.n_heads * (size_t)max_partitions(max_pos) * (size_t)(h.head_dim + 2);
}

template <typename T, int NV>
static void launch_paged(int version, const PagedArgs<T> &a, int lanes, cudaStream_t stream)
{
    size_t shared = (size_t)(KVK_ATTENTION_THREADS / lanes) * (size_t)(a.head_dim + 2) * sizeof(float);
    if (version == 1) {
        paged_v1<T, NV><<<a.n * a.n_heads, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
        return;
    }
    dim3 grid((unsigned)(a.n * a.n_heads), (unsigned)a.max_parts);
    paged_v2_partition<T, NV><<<grid, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
}

template <typename T> static int paged_launch(int version, const PagedArgs<T> &a, cudaStream_t stream, Err *err)
{
    int lanes = 0, vectors = 0;
    kvk_group_shape(a.head_dim, (int)sizeof(T), &lanes, &vectors);
    switch (vectors) {
    case 1: launch_paged<T, 1>(version, a, lanes, stream); break;
    case 2: launch_paged<T, 2>(version, a, lanes, stream); break;
    case 3: launch_paged<T, 3>(version, a, lanes, stream); break;
    case 4: launch_paged<T, 4>(version, a, lanes, stream); break;
    case 5: launch_paged<T, 5>(version, a, lanes, stream); break;
    case 6: launch_paged<T, 6>(version, a, lanes, stream); break;
    case 7: launch_paged<T, 7>(version, a, lanes, stream); break;
    case 8: launch_paged<T, 8>(version, a, lanes, stream); break;
    default: return err_set(err, "paged attention: head_dim %d cannot be split into 16-byte vectors", a.head_dim);
    }
    if (KVK_CHECK_LAUNCH(err, version == 1 ? "paged attention v1" : "paged attention v2 (partitions)"))
        return -1;
    if (version == 1)
        return 0;
    int threads = a.head_dim >= 128 ? 128 : ((a.head_dim + 31) / 32) * 32;
    paged_v2_reduce<<<a.n * a.n_heads, threads, 0, stream>>>(a.out, a.part_m, a.part_l, a.part_acc, a.pos, a.n_heads,
                                                             a.head_dim, a.max_parts);
    return KVK_CHECK_LAUNCH(err, "paged attention v2 (merge)");
}

template <typename T>
static int paged_typed(int version, float *out, const float *q, const void *pool, int layer, KvkBlockTables tables,
                       int shift, const int *pos, int n, int max_pos, KvkHeads h, float *scratch, cudaStream_t stream,
                       Err *err)
{
    PagedArgs<T> a;
    a.out = out;
    a.q = q;
    a.kv_dim = h.n_kv_heads * h.head_dim;
    /* The layer's K in block 0, and its V block_size rows later (block_pool_keys(), block_pool_values()). */
    long long block_elems = (long long)tables.block_size * a.kv_dim;
    a.k = (const T *)pool + 2LL * layer * block_elems;
    a.v = a.k + block_elems;
    a.block_rows = 2LL * tables.n_layers * tables.block_size;
    a.block_tables = tables.block_tables;
    a.max_blocks = tables.max_blocks;
    a.entry_table = tables.entry_table;
    a.shift = shift;
    a.pos = pos;
    a.n = n;
    a.n_heads = h.n_heads;
    a.kv_mul = h.n_heads / h.n_kv_heads;
    a.head_dim = h.head_dim;
    a.max_parts = max_partitions(max_pos);
    long long pairs = (long long)n * h.n_heads;
    a.part_m = scratch;
    a.part_l = scratch ? scratch + pairs * a.max_parts : NULL;
    a.part_acc = scratch ? scratch + 2 * pairs * a.max_parts : NULL;
    return paged_launch<T>(version, a, stream, err);
}

extern "C" int kvk_paged_attention(int version, Dtype t, float *out, const float *q, const void *pool, int layer,
                                   KvkBlockTables tables, const int *pos, int n, int max_pos, KvkHeads h,
                                   float *scratch, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_paged_attention_n_versions, "paged attention", err))
        return -1;
    if (n == 0)
        return 0;
    int bs = tables.block_size, shift = 0;
    while (shift < 30 && (1 << shift) < bs)
        shift++;
    if (n < 0 || max_pos <= 0 || bs <= 0 || (1 << shift) != bs || tables.max_blocks <= 0 || tables.n_layers <= 0 ||
        layer < 0 || layer >= tables.n_layers || !kvk_paged_attention_supports(t, h))
        return err_set(err,
                       "paged attention v%d: unsupported shape (n %d, heads %d/%d, head_dim %d, block size %d, "
                       "layer %d of %d, %s)",
                       version, n, h.n_heads, h.n_kv_heads, h.head_dim, bs, layer, tables.n_layers, dtype_name(t));
    if (version == 2 && !scratch)
        return err_set(err, "paged attention v2: needs scratch of %zu floats",
                       kvk_paged_attention_scratch_floats(2, n, max_pos, h));
    if ((long long)max_partitions(max_pos) > 65535)
        return err_set(err, "paged attention: %d positions is more partitions than a grid holds", max_pos);
    switch (t) {
    case DTYPE_F32:
        return paged_typed<float>(version, out, q, pool, layer, tables, shift, pos, n, max_pos, h, scratch, stream,
                                  err);
    case DTYPE_F16:
        return paged_typed<__half>(version, out, q, pool, layer, tables, shift, pos, n, max_pos, h, scratch, stream,
                                   err);
    default:
        return paged_typed<__nv_bfloat16>(version, out, q, pool, layer, tables, shift, pos, n, max_pos, h, scratch,
                                          stream, err);
    }
}
