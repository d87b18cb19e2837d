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
 * v1 "one-pass" (the teaching version): attention.cu's v3 with the row
 *    lookup swapped: one block per (entry, head), thread groups reading
 *    whole rows with 16-byte loads, online softmax, groups merged in shared
 *    memory. Within a block of the cache the rows are contiguous, so the
 *    loads coalesce exactly as in the contiguous kernel; the only extra
 *    cost is one (cached) block-table read per key. Teaches: paging costs
 *    almost nothing when the kernel reads whole rows and the table is small
 *    (vLLM measured 20-26% overhead for its first kernel; the goal here is
 *    10%).
 * v2 "split": the sequence is cut into partitions of KVK_SPLIT_PARTITION
 *    positions; a grid of (entry x head) x partitions computes one online-
 *    softmax partial result per partition into scratch, and a second kernel
 *    merges the partials of each (entry, head) (kvk_split_reduce). Teaches:
 *    with few long sequences, v1 has fewer blocks than the GPU has
 *    multiprocessors; splitting along the sequence (flash-decoding, vLLM's
 *    PagedAttention v2) fills the GPU, at the price of a second launch and a
 *    little scratch traffic.
 * v3 "gqa-tiles" (the fast version): what a reading of v1's machine code
 *    found missing, all of it about keeping more bytes in flight and
 *    reading each byte once:
 *    - each group takes several keys per iteration (KEYS) and issues all
 *      their K and V loads before it uses any: v1 keeps one 16-byte load in
 *      flight per lane, and issues V only after K, a shuffle loop and two
 *      expf;
 *    - the group width is a template parameter, so the shuffle loops unroll;
 *    - the block reads the block table once per block of the cache (the ids
 *      of a chunk of positions staged in shared memory), not once per key;
 *    - one block serves every query head of a GQA group (QH of them) from
 *      one read of K and V, where v1 reads them once per query head;
 *    - it splits the sequence only as far as the GPU needs: the partitions
 *      are sized so that the grid fills the blocks the multiprocessors hold
 *      at once (occupancy), not a fixed 256 positions or twice the SM count;
 *      with enough (entry, head) blocks it does not split at all, and then
 *      needs no second launch;
 *    - K and V are loaded with streaming hints (read once, evict first).
 *    It supports the head shapes of kvlab's models (16-byte vectors per row
 *    1, 2, 4, 8, 16 or 32, and 12 in f32); v1 and v2 take any.
 *
 * Accumulation is f32 whatever the cache's type. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_paged_attention_versions[] = {
    {"one-pass", "a block per (entry, head) reads through the block table in one pass"},
    {"split", "partitions along the sequence in parallel, then a merge kernel"},
    {"gqa-tiles", "several keys in flight, table read once per block, GQA heads share K/V, split by occupancy"},
};
extern "C" const int kvk_paged_attention_n_versions = 3;

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

/* ------------------------------------------------------------ v1 and v2 */

template <typename T, int NV> __global__ void paged_v1(PagedArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* kvk_merge_floats(groups, 1, head_dim) */
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    long long at = (long long)i * a.n_heads * hd + h * hd, column = (long long)(h / a.kv_mul) * hd;
    kvk_attend_one_pass<T, NV>(a.out + at, a.q + at, a.k + column, a.v + column, a.kv_dim, paged_rows(a, i),
                               a.pos[i] + 1, hd, lanes, merge);
}

template <typename T, int NV> __global__ void paged_v2_partition(PagedArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* kvk_merge_floats(groups, 1, head_dim) */
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    long long at = (long long)i * a.n_heads * hd + h * hd, column = (long long)(h / a.kv_mul) * hd;
    kvk_attend_partition<T, NV>(a.part_m, a.part_l, a.part_acc, (long long)pair * a.max_parts + blockIdx.y,
                                a.q + at, a.k + column, a.v + column, a.kv_dim, paged_rows(a, i), a.pos[i] + 1,
                                blockIdx.y, hd, lanes, merge);
}

static int max_partitions(int max_pos)
{
    return (max_pos + KVK_SPLIT_PARTITION - 1) / KVK_SPLIT_PARTITION;
}

/* ------------------------------------------------------------------- v3 */

/* Positions whose block ids a v3 block stages in shared memory at a time. */
#define V3_CHUNK 256

/* Keys a group of `lanes` lanes reads per iteration, NV vectors each, for
 * QH query heads: all their K and V loads are issued before the first is
 * used. Fewer when a lane holds more vectors or more heads (registers), and
 * at most V3_CHUNK keys per block-iteration. */
__host__ __device__ constexpr int v3_min(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int v3_keys(int lanes, int nv, int qh)
{
    return v3_min(nv == 1 ? (qh <= 2 ? 4 : 2) : nv == 2 ? 2 : 1, V3_CHUNK * lanes / KVK_ATTENTION_THREADS);
}

/* Blocks of 128 threads per multiprocessor that v3's launch bounds
 * guarantee registers for, by query heads per block: 6 (at most 80
 * registers a thread), 5 (96), 4 (128). The occupancy its split is sized
 * for (v3_plan()). Within these bounds nvcc 13.0 for sm_90 gave them 52 to
 * 127 registers and no spills (-Xptxas -v), but for f32 heads of 48 with 4
 * query heads a block (24 bytes; no kvlab model has that shape); the GPU
 * run records what its nvcc gave (gpu-check's kernel-resources step). */
__host__ __device__ constexpr int v3_min_blocks(int qh) { return qh == 1 ? 6 : qh == 2 ? 5 : 4; }

/* What a v3 block needs to find its work; K and V are kernel parameters of
 * their own, with __restrict__. */
struct PagedV3Args {
    float *out;              /* [n][n_heads][head_dim] (no split) */
    const float *q;          /* [n][n_heads][head_dim] */
    const int *block_tables; /* [tables][max_blocks] */
    int max_blocks;
    const int *entry_table;  /* [n] */
    int shift;               /* log2(block_size) */
    long long block_rows;    /* rows from one block to the next */
    const int *pos;          /* [n] */
    int n_heads, n_kv_heads, kv_mul, head_dim, kv_dim;
    int q_splits;            /* blocks per K/V head: kv_mul / QH */
    int max_pos;             /* an entry at or past it gets NaN */
    int part_len;            /* positions per partition */
    int max_parts;           /* 1: no split, the block writes out */
    float *part_m, *part_l;  /* [n x n_heads][max_parts] */
    float *part_acc;         /* [n x n_heads][max_parts][head_dim] */
};

/* One iteration of a v3 group: KEYS keys, t_first + k x GROUPS for k <
 * KEYS (those at or past t_end are skipped), read with all their K and V
 * loads in flight at once, then folded into the online softmax of each of
 * the QH query heads. blocks[]: the block ids of the chunk that starts at
 * block b0. */
template <typename T, int LANES, int NV, int QH, int KEYS>
__device__ __forceinline__ void v3_tile(KvkGroupState<NV, Vec16<T>::size> (&s)[QH],
                                        const float (&q)[QH][NV][Vec16<T>::size], const T *__restrict__ k_head,
                                        const T *__restrict__ v_head, const PagedV3Args &a, const int *blocks, int b0,
                                        int t_first, int t_end, float scale)
{
    constexpr int VEC = Vec16<T>::size, GROUPS = KVK_ATTENTION_THREADS / LANES;
    const int lane = threadIdx.x % LANES, mask = (1 << a.shift) - 1;
    Vec16<T> kr[KEYS][NV], vr[KEYS][NV];
    bool valid[KEYS];
#pragma unroll
    for (int k = 0; k < KEYS; k++) {
        const int t = t_first + k * GROUPS;
        valid[k] = t < t_end;
        const long long row = valid[k] ? (long long)blocks[(t >> a.shift) - b0] * a.block_rows + (t & mask) : 0;
#pragma unroll
        for (int c = 0; c < NV; c++) {
            const long long at = row * a.kv_dim + (lane + c * LANES) * VEC;
            if (valid[k]) {
                kr[k][c] = kvk_load_stream(k_head + at);
                vr[k][c] = kvk_load_stream(v_head + at);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    kr[k][c].v[e] = vr[k][c].v[e] = kvk_from_f32<T>(0.0f);
            }
        }
    }
    float score[QH][KEYS];
#pragma unroll
    for (int h = 0; h < QH; h++)
#pragma unroll
        for (int k = 0; k < KEYS; k++) {
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; c++)
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    dot += q[h][c][e] * kvk_to_f32(kr[k][c].v[e]);
#pragma unroll
            for (int offset = LANES / 2; offset > 0; offset >>= 1)
                dot += __shfl_xor_sync(KVK_FULL_MASK, dot, offset);
            score[h][k] = valid[k] ? dot * scale : -INFINITY;
        }
#pragma unroll
    for (int h = 0; h < QH; h++) {
        float m_new = s[h].m;
#pragma unroll
        for (int k = 0; k < KEYS; k++)
            m_new = fmaxf(m_new, score[h][k]);
        if (m_new == -INFINITY)
            continue; /* no key yet: every key of this tile is past the end */
        const float rescale = expf(s[h].m - m_new); /* 0 while s.m = -inf */
        float p[KEYS];
        s[h].l *= rescale;
#pragma unroll
        for (int k = 0; k < KEYS; k++) {
            p[k] = expf(score[h][k] - m_new); /* 0 for a key past the end */
            s[h].l += p[k];
        }
#pragma unroll
        for (int c = 0; c < NV; c++)
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                float acc = s[h].acc[c][e] * rescale;
#pragma unroll
                for (int k = 0; k < KEYS; k++)
                    acc += p[k] * kvk_to_f32(vr[k][c].v[e]);
                s[h].acc[c][e] = acc;
            }
        s[h].m = m_new;
    }
}

/* Writes the block's QH heads: the output itself (no split) or this
 * partition's partial result. */
template <int QH>
__device__ __forceinline__ void v3_write(const PagedV3Args &a, float *merge, int i, int h0, const float *M,
                                         const float *L, int groups)
{
    const int hd = a.head_dim;
#pragma unroll
    for (int h = 0; h < QH; h++) {
        long long pair = (long long)i * a.n_heads + h0 + h;
        if (a.max_parts == 1) {
            for (int d = threadIdx.x; d < hd; d += blockDim.x)
                a.out[pair * hd + d] = kvk_merged_acc(merge, h, groups, hd, d) / L[h];
            continue;
        }
        long long slot = pair * a.max_parts + blockIdx.y;
        if (threadIdx.x == 0) {
            a.part_m[slot] = M[h];
            a.part_l[slot] = L[h];
        }
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            a.part_acc[slot * hd + d] = kvk_merged_acc(merge, h, groups, hd, d);
    }
}

/* An entry at or past max_pos broke the caller's rule: NaN, as from v2,
 * without reading its block table. */
template <int QH> __device__ __forceinline__ void v3_refuse(const PagedV3Args &a, int i, int h0)
{
    for (int h = 0; h < QH; h++) {
        long long pair = (long long)i * a.n_heads + h0 + h, slot = pair * a.max_parts + blockIdx.y;
        float *dst = a.max_parts == 1 ? a.out + pair * a.head_dim : a.part_acc + slot * a.head_dim;
        for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x)
            dst[d] = nanf("");
        if (a.max_parts > 1 && threadIdx.x == 0)
            a.part_m[slot] = a.part_l[slot] = nanf("");
    }
}

/* A block: entry i, K/V head kvh, query heads h0 .. h0+QH-1 (of that K/V
 * head's group), positions of partition blockIdx.y. */
template <typename T, int LANES, int NV, int QH>
__global__ void __launch_bounds__(KVK_ATTENTION_THREADS, v3_min_blocks(QH))
    paged_v3(PagedV3Args a, const T *__restrict__ k_layer, const T *__restrict__ v_layer)
{
    extern __shared__ float merge[];       /* kvk_merge_floats(GROUPS, QH, head_dim) */
    __shared__ int chunk_blocks[V3_CHUNK]; /* block ids of one chunk of positions */
    constexpr int VEC = Vec16<T>::size, GROUPS = KVK_ATTENTION_THREADS / LANES, KEYS = v3_keys(LANES, NV, QH);
    constexpr int TILE = GROUPS * KEYS;
    const int group = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    const int per_entry = a.n_kv_heads * a.q_splits, i = blockIdx.x / per_entry;
    const int kvh = blockIdx.x % per_entry / a.q_splits, h0 = kvh * a.kv_mul + blockIdx.x % a.q_splits * QH;
    const int n_pos = a.pos[i] + 1, t_begin = blockIdx.y * a.part_len;
    if (n_pos > a.max_pos) {
        v3_refuse<QH>(a, i, h0);
        return;
    }
    if (t_begin >= n_pos)
        return; /* the whole block leaves: this partition is past the sequence */
    const int t_end = min(n_pos, t_begin + a.part_len);
    const int *table = a.block_tables + (long long)a.entry_table[i] * a.max_blocks;
    const T *k_head = k_layer + (long long)kvh * a.head_dim, *v_head = v_layer + (long long)kvh * a.head_dim;

    float q[QH][NV][VEC];
    KvkGroupState<NV, VEC> s[QH];
#pragma unroll
    for (int h = 0; h < QH; h++) {
        const float *q_head = a.q + ((long long)i * a.n_heads + h0 + h) * a.head_dim;
#pragma unroll
        for (int c = 0; c < NV; c++)
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                q[h][c][e] = q_head[(lane + c * LANES) * VEC + e];
                s[h].acc[c][e] = 0.0f;
            }
        s[h].m = -INFINITY;
        s[h].l = 0.0f;
    }
    const float scale = 1.0f / sqrtf((float)a.head_dim);
    for (int c0 = t_begin; c0 < t_end; c0 += V3_CHUNK) {
        const int c1 = min(t_end, c0 + V3_CHUNK), b0 = c0 >> a.shift, nb = ((c1 - 1) >> a.shift) - b0 + 1;
        __syncthreads(); /* nobody reads the previous chunk's ids any more */
        for (int j = threadIdx.x; j < nb; j += blockDim.x)
            chunk_blocks[j] = table[b0 + j];
        __syncthreads();
        for (int t0 = c0; t0 < c1; t0 += TILE)
            v3_tile<T, LANES, NV, QH, KEYS>(s, q, k_head, v_head, a, chunk_blocks, b0, t0 + group, c1, scale);
    }
    float M[QH], L[QH];
    kvk_block_merge<NV, VEC, QH>(s, merge, a.head_dim, LANES, M, L);
    v3_write<QH>(a, merge, i, h0, M, L, GROUPS);
}

/* The lanes of a v3 group and the vectors of a lane, from the 16-byte
 * vectors of a head: v3 is instantiated for these shapes only. */
static int v3_shape(int head_dim, int elem_bytes, int *lanes, int *nv)
{
    if (head_dim <= 0 || head_dim * elem_bytes % 16 != 0)
        return 0;
    int n_vec = head_dim * elem_bytes / 16;
    *lanes = n_vec == 12 ? 4 : n_vec;
    *nv = n_vec == 12 ? 3 : 1;
    /* 12 vectors: a 48-wide f32 head (stories15M); in 16 bits (96 wide) three vectors a lane spill registers */
    return (n_vec == 12 && elem_bytes == 4) || (n_vec <= 32 && (n_vec & (n_vec - 1)) == 0);
}

/* Query heads a v3 block serves: the largest of 4, 3, 2, 1 that divides
 * the GQA group (kv_mul query heads per K/V head). */
static int v3_heads_per_block(int kv_mul)
{
    for (int qh = 4; qh > 1; qh--)
        if (kv_mul % qh == 0)
            return qh;
    return 1;
}

/* Device 0's properties, read once (kvlab opens device 0 only). */
static const cudaDeviceProp *device_props(void)
{
    static cudaDeviceProp props;
    static int read;
    if (!read) {
        if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
            memset(&props, 0, sizeof props);
            cudaGetLastError();
        }
        read = 1;
    }
    return &props;
}

/* Blocks of 128 threads with `shared` bytes of shared memory the GPU
 * holds at once: multiprocessors x the smallest of `per_sm` and what
 * threads, block slots and shared memory allow per multiprocessor (a
 * limit the device does not report, as under the CPU emulator, is not
 * applied). */
static long long resident_blocks(int per_sm, size_t shared)
{
    const cudaDeviceProp *p = device_props();
    if (p->maxThreadsPerMultiProcessor > 0 && p->maxThreadsPerMultiProcessor / KVK_ATTENTION_THREADS < per_sm)
        per_sm = p->maxThreadsPerMultiProcessor / KVK_ATTENTION_THREADS;
    if (p->maxBlocksPerMultiProcessor > 0 && p->maxBlocksPerMultiProcessor < per_sm)
        per_sm = p->maxBlocksPerMultiProcessor;
    /* the runtime keeps 1 KiB of each block's shared memory for itself */
    if (p->sharedMemPerMultiprocessor > 0 && (long long)(p->sharedMemPerMultiprocessor / (shared + 1024)) < per_sm)
        per_sm = (int)(p->sharedMemPerMultiprocessor / (shared + 1024));
    return (long long)(p->multiProcessorCount > 0 ? p->multiProcessorCount : 1) * (per_sm > 0 ? per_sm : 1);
}

/* How v3 runs a call: its template shape and its partitions. */
typedef struct {
    int lanes, nv, qh; /* template parameters */
    int q_splits;      /* blocks per K/V head */
    int part_len;      /* positions per partition */
    int max_parts;     /* partitions of max_pos; 1: no split */
    size_t shared;     /* dynamic shared memory per block */
} V3Plan;

/* The split by occupancy: as many partitions as it takes for the
 * (entry, K/V head, head slice) blocks to fill the blocks the GPU holds at
 * once, but none shorter than one iteration of the block (TILE keys). The
 * plan depends on n and max_pos only, so a CUDA graph can replay it. */
static int v3_plan(Dtype t, KvkHeads h, int n, int max_pos, V3Plan *p)
{
    if (!v3_shape(h.head_dim, (int)dtype_bytes(t), &p->lanes, &p->nv))
        return 0;
    int kv_mul = h.n_heads / h.n_kv_heads, groups = KVK_ATTENTION_THREADS / p->lanes;
    p->qh = v3_heads_per_block(kv_mul);
    int tile = groups * v3_keys(p->lanes, p->nv, p->qh);
    p->q_splits = kv_mul / p->qh;
    p->shared = kvk_merge_floats(groups, p->qh, h.head_dim) * sizeof(float);
    long long blocks = (long long)n * h.n_kv_heads * p->q_splits;
    long long room = resident_blocks(v3_min_blocks(p->qh), p->shared + V3_CHUNK * sizeof(int));
    long long parts = blocks > 0 ? (room + blocks - 1) / blocks : 1;
    long long len = parts > 1 ? (max_pos + parts - 1) / parts : max_pos;
    len = (len + tile - 1) / tile * tile; /* whole iterations */
    if (len >= max_pos) {
        p->part_len = max_pos;
        p->max_parts = 1;
    } else {
        p->part_len = (int)len;
        p->max_parts = (max_pos + p->part_len - 1) / p->part_len;
    }
    return 1;
}

/* ------------------------------------------------------ support, scratch */

extern "C" int kvk_paged_attention_supports(int version, Dtype t, KvkHeads h)
{
    int lanes, vectors;
    if (h.n_heads <= 0 || h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads || (unsigned)t >= DTYPE_COUNT)
        return 0;
    switch (version) {
    case 1:
    case 2: return kvk_group_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors);
    case 3: return v3_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors);
    default: return 0;
    }
}

extern "C" size_t kvk_paged_attention_scratch_floats(int version, Dtype t, int n, int max_pos, KvkHeads h)
{
    size_t per_part = (size_t)n * (size_t)h.n_heads * (size_t)(h.head_dim + 2);
    V3Plan p;
    if (version == 2)
        return per_part * (size_t)max_partitions(max_pos);
    if (version == 3 && v3_plan(t, h, n, max_pos, &p))
        return p.max_parts > 1 ? per_part * (size_t)p.max_parts : 0;
    return 0;
}

extern "C" int kvk_paged_attention_pick(Dtype t, KvkHeads h, int n)
{
    if (kvk_paged_attention_supports(3, t, h))
        return 3;
    if (!kvk_paged_attention_supports(1, t, h))
        return 0;
    /* v1 has one block per (entry, head): split when they would not fill
     * the blocks the GPU holds at once (v1 has no launch bounds; threads
     * and shared memory decide). */
    int lanes = 1, vectors = 1;
    kvk_group_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors);
    size_t shared = kvk_merge_floats(KVK_ATTENTION_THREADS / lanes, 1, h.head_dim) * sizeof(float);
    return (long long)n * h.n_heads < resident_blocks(64, shared) ? 2 : 1;
}

extern "C" size_t kvk_paged_attention_pick_scratch_floats(Dtype t, KvkHeads h, int max_n, int max_pos)
{
    size_t most = 0;
    for (int n = 1; n <= max_n; n++) {
        int v = kvk_paged_attention_pick(t, h, n);
        size_t floats = v ? kvk_paged_attention_scratch_floats(v, t, n, max_pos, h) : 0;
        most = floats > most ? floats : most;
    }
    return most;
}

/* ------------------------------------------------------------ launching */

template <typename T, int NV>
static void launch_paged(int version, const PagedArgs<T> &a, int lanes, cudaStream_t stream)
{
    size_t shared = kvk_merge_floats(KVK_ATTENTION_THREADS / lanes, 1, a.head_dim) * sizeof(float);
    if (version == 1) {
        paged_v1<T, NV><<<a.n * a.n_heads, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
        return;
    }
    dim3 grid((unsigned)(a.n * a.n_heads), (unsigned)a.max_parts);
    paged_v2_partition<T, NV><<<grid, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
}

/* v1 and v2. */
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
    long long pairs = (long long)a.n * a.n_heads;
    kvk_split_reduce<void><<<(unsigned)pairs, kvk_split_reduce_threads(a.head_dim),
                             (size_t)a.max_parts * sizeof(float), stream>>>(a.out, a.part_m, a.part_l, a.part_acc,
                                                                            a.pos, a.n_heads, a.head_dim,
                                                                            a.max_parts, KVK_SPLIT_PARTITION);
    return KVK_CHECK_LAUNCH(err, "paged attention v2 (merge)");
}

template <typename T, int LANES, int NV, int QH>
static void launch_v3(const V3Plan &p, const PagedV3Args &a, const T *k, const T *v, long long blocks,
                      cudaStream_t stream)
{
    dim3 grid((unsigned)blocks, (unsigned)p.max_parts);
    paged_v3<T, LANES, NV, QH><<<grid, KVK_ATTENTION_THREADS, p.shared, stream>>>(a, k, v);
}

template <typename T, int LANES, int NV>
static void launch_v3_heads(const V3Plan &p, const PagedV3Args &a, const T *k, const T *v, long long blocks,
                            cudaStream_t stream)
{
    switch (p.qh) {
    case 1: launch_v3<T, LANES, NV, 1>(p, a, k, v, blocks, stream); break;
    case 2: launch_v3<T, LANES, NV, 2>(p, a, k, v, blocks, stream); break;
    case 3: launch_v3<T, LANES, NV, 3>(p, a, k, v, blocks, stream); break;
    default: launch_v3<T, LANES, NV, 4>(p, a, k, v, blocks, stream); break;
    }
}

template <typename T>
static int v3_launch(const V3Plan &p, const PagedV3Args &a, const T *k, const T *v, int n, cudaStream_t stream,
                     Err *err)
{
    long long blocks = (long long)n * a.n_kv_heads * p.q_splits;
    switch (p.lanes * 10 + p.nv) {
    case 11: launch_v3_heads<T, 1, 1>(p, a, k, v, blocks, stream); break;
    case 21: launch_v3_heads<T, 2, 1>(p, a, k, v, blocks, stream); break;
    case 41: launch_v3_heads<T, 4, 1>(p, a, k, v, blocks, stream); break;
    case 43:
        if constexpr (sizeof(T) == 4) /* v3_shape() takes 12 vectors in f32 only */
            launch_v3_heads<T, 4, 3>(p, a, k, v, blocks, stream);
        break;
    case 81: launch_v3_heads<T, 8, 1>(p, a, k, v, blocks, stream); break;
    case 161: launch_v3_heads<T, 16, 1>(p, a, k, v, blocks, stream); break;
    default: launch_v3_heads<T, 32, 1>(p, a, k, v, blocks, stream); break;
    }
    if (KVK_CHECK_LAUNCH(err, p.max_parts == 1 ? "paged attention v3" : "paged attention v3 (partitions)"))
        return -1;
    if (p.max_parts == 1)
        return 0;
    kvk_split_reduce<void><<<(unsigned)(n * a.n_heads), kvk_split_reduce_threads(a.head_dim),
                             (size_t)p.max_parts * sizeof(float), stream>>>(a.out, a.part_m, a.part_l, a.part_acc,
                                                                            a.pos, a.n_heads, a.head_dim,
                                                                            p.max_parts, p.part_len);
    return KVK_CHECK_LAUNCH(err, "paged attention v3 (merge)");
}

/* The layer's K in block 0, and its V block_size rows later
 * (block_pool_keys(), block_pool_values()), in elements of `elem_bytes`. */
static const char *layer_keys(const void *pool, int layer, KvkBlockTables tables, int kv_dim, size_t elem_bytes)
{
    return (const char *)pool + 2LL * layer * tables.block_size * kv_dim * (long long)elem_bytes;
}

template <typename T>
static int paged_v3_typed(Dtype t, const float *q, float *out, const void *pool, int layer, KvkBlockTables tables,
                          int shift, const int *pos, int n, int max_pos, KvkHeads h, float *scratch,
                          cudaStream_t stream, Err *err)
{
    V3Plan p;
    v3_plan(t, h, n, max_pos, &p);
    if (p.max_parts > 1 && !scratch)
        return err_set(err, "paged attention v3: needs scratch of %zu floats",
                       kvk_paged_attention_scratch_floats(3, t, n, max_pos, h));
    if (p.max_parts > 65535)
        return err_set(err, "paged attention v3: %d partitions is more than a grid holds", p.max_parts);
    PagedV3Args a;
    a.out = out;
    a.q = q;
    a.block_tables = tables.block_tables;
    a.max_blocks = tables.max_blocks;
    a.entry_table = tables.entry_table;
    a.shift = shift;
    a.block_rows = 2LL * tables.n_layers * tables.block_size;
    a.pos = pos;
    a.n_heads = h.n_heads;
    a.n_kv_heads = h.n_kv_heads;
    a.kv_mul = h.n_heads / h.n_kv_heads;
    a.head_dim = h.head_dim;
    a.kv_dim = h.n_kv_heads * h.head_dim;
    a.q_splits = p.q_splits;
    a.max_pos = max_pos;
    a.part_len = p.part_len;
    a.max_parts = p.max_parts;
    long long pairs = (long long)n * h.n_heads;
    a.part_m = scratch;
    a.part_l = scratch ? scratch + pairs * p.max_parts : NULL;
    a.part_acc = scratch ? scratch + 2 * pairs * p.max_parts : NULL;
    const T *k = (const T *)layer_keys(pool, layer, tables, a.kv_dim, sizeof(T));
    return v3_launch<T>(p, a, k, k + (long long)tables.block_size * a.kv_dim, n, stream, err);
}

template <typename T>
static int paged_typed(int version, Dtype t, float *out, const float *q, const void *pool, int layer,
                       KvkBlockTables tables, int shift, const int *pos, int n, int max_pos, KvkHeads h,
                       float *scratch, cudaStream_t stream, Err *err)
{
    if (version == 3)
        return paged_v3_typed<T>(t, q, out, pool, layer, tables, shift, pos, n, max_pos, h, scratch, stream, err);
    PagedArgs<T> a;
    a.out = out;
    a.q = q;
    a.kv_dim = h.n_kv_heads * h.head_dim;
    a.k = (const T *)layer_keys(pool, layer, tables, a.kv_dim, sizeof(T));
    a.v = a.k + (long long)tables.block_size * a.kv_dim;
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
        layer < 0 || layer >= tables.n_layers || !kvk_paged_attention_supports(version, t, h))
        return err_set(err,
                       "paged attention v%d: unsupported shape (n %d, heads %d/%d, head_dim %d, block size %d, "
                       "layer %d of %d, %s)",
                       version, n, h.n_heads, h.n_kv_heads, h.head_dim, bs, layer, tables.n_layers, dtype_name(t));
    if (version == 2 && !scratch)
        return err_set(err, "paged attention v2: needs scratch of %zu floats",
                       kvk_paged_attention_scratch_floats(2, t, n, max_pos, h));
    if ((long long)max_partitions(max_pos) > 65535)
        return err_set(err, "paged attention: %d positions is more partitions than a grid holds", max_pos);
    switch (t) {
    case DTYPE_F32:
        return paged_typed<float>(version, t, out, q, pool, layer, tables, shift, pos, n, max_pos, h, scratch,
                                  stream, err);
    case DTYPE_F16:
        return paged_typed<__half>(version, t, out, q, pool, layer, tables, shift, pos, n, max_pos, h, scratch,
                                   stream, err);
    default:
        return paged_typed<__nv_bfloat16>(version, t, out, q, pool, layer, tables, shift, pos, n, max_pos, h,
                                          scratch, stream, err);
    }
}
