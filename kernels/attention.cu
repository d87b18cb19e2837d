/* Causal attention over K/V rows that are contiguous per sequence: query
 * entry i attends rows base_row[i] .. base_row[i] + pos[i] of the layer.
 * One call serves three chapters, because on the device they differ only
 * in where a sequence's rows start:
 *   chapter 1, the whole sequence: n = t entries of one sequence, base 0,
 *     K/V of this step only (recomputed every step);
 *   chapter 2, a contiguous cache: the new token(s) of one request, base 0
 *     in the request's own [layer][position][kv_dim] cache;
 *   chapter 3, reserved regions: one entry per request of the batch, base =
 *     the first row of the request's region in the shared arena.
 * CPU reference: attention_reference() in common/cpu/ops.c, per (entry, head).
 *
 * v1 "thread-per-head": one thread per (entry, head) runs the CPU code:
 *    scores into a scratch row in global memory, softmax, weighted sum.
 *    Teaches: the transcription works, but a thread walks t keys one after
 *    the other, and the 32 threads of a warp read 32 unrelated rows.
 * v2 "block-softmax": one block per (entry, head). The threads split the
 *    positions to compute the scores into shared memory, find the maximum
 *    and the sum with block reductions, then split the head's elements for
 *    the weighted sum of values. Teaches: the parallel softmax (max, exp,
 *    sum) and shared memory; its limit is that all scores of a row must fit
 *    in shared memory (48 KiB: about 12,000 positions).
 * v3 "online-softmax": one block per (entry, head), groups of lanes that
 *    read whole K/V rows with coalesced 16-byte loads, each group keeping a
 *    running (max, sum, weighted values) and the groups merged at the end
 *    (kvk_group_attend in kernel_common.cuh). One pass over K and V, no
 *    score storage, any length. Teaches: memory-bound kernels want wide,
 *    coalesced loads and a single pass; the online softmax makes that
 *    possible (the idea behind FlashAttention and flash-decoding).
 * v4 "split": v3's loop over partitions of KVK_SPLIT_PARTITION positions,
 *    a block per (entry, head, partition) leaving a partial result in
 *    scratch, then a merge kernel (kvk_split_reduce). The contiguous twin of
 *    PagedAttention v2: with both, kernel-check compares paged with
 *    contiguous split against split, and one-pass (v3) against one-pass
 *    (PagedAttention v1), so that the ratio measures the paging alone.
 *
 * Accumulation is f32 whatever the cache's type; results differ from the
 * reference by rounding only (the tolerance and its reason:
 * kernels/check/attention_check.c). */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_attention_versions[] = {
    {"thread-per-head", "the CPU loop, one thread per (entry, head), scores in global scratch"},
    {"block-softmax", "a block per (entry, head), scores in shared memory, block reductions"},
    {"online-softmax", "a block per (entry, head), one pass, coalesced 16-byte loads, groups merged"},
    {"split", "v3 over partitions of the sequence in parallel, then a merge kernel"},
};
extern "C" const int kvk_attention_n_versions = 4;

/* Everything a kernel needs to find its query, keys, values and output. */
template <typename T> struct AttentionArgs {
    float *out;
    const float *q;
    const T *k;
    const T *v;
    const long long *base_row;
    const int *pos;
    int n, n_heads, kv_mul, head_dim, kv_dim;
    float *scratch;     /* v1: [pairs][max_pos] scores; v4: the partials (kvk_split_reduce) */
    int scratch_stride; /* v1: max_pos */
    int max_parts;      /* v4: partitions of max_pos */
};

template <typename T> __global__ void attention_v1(AttentionArgs<T> a)
{
    int pair = blockIdx.x * blockDim.x + threadIdx.x;
    if (pair >= a.n * a.n_heads)
        return;
    int i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *q = a.q + (long long)i * a.n_heads * hd + h * hd;
    long long offset = a.base_row[i] * a.kv_dim + (long long)(h / a.kv_mul) * hd;
    const T *k = a.k + offset, *v = a.v + offset;
    float *scores = a.scratch + (long long)pair * a.scratch_stride;
    int n_pos = a.pos[i] + 1;
    float max = -INFINITY;
    for (int t = 0; t < n_pos; t++) {
        float s = 0.0f;
        for (int d = 0; d < hd; d++)
            s += q[d] * kvk_to_f32(k[(long long)t * a.kv_dim + d]);
        scores[t] = s / sqrtf((float)hd);
        max = fmaxf(max, scores[t]);
    }
    float sum = 0.0f;
    for (int t = 0; t < n_pos; t++) {
        scores[t] = expf(scores[t] - max);
        sum += scores[t];
    }
    float *out = a.out + (long long)i * a.n_heads * hd + h * hd;
    for (int d = 0; d < hd; d++) {
        float acc = 0.0f;
        for (int t = 0; t < n_pos; t++)
            acc += (scores[t] / sum) * kvk_to_f32(v[(long long)t * a.kv_dim + d]);
        out[d] = acc;
    }
}

template <typename T> __global__ void attention_v2(AttentionArgs<T> a)
{
    extern __shared__ float scores[]; /* [max_pos] */
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    const float *q = a.q + (long long)i * a.n_heads * hd + h * hd;
    long long offset = a.base_row[i] * a.kv_dim + (long long)(h / a.kv_mul) * hd;
    const T *k = a.k + offset, *v = a.v + offset;
    int n_pos = a.pos[i] + 1;

    float local_max = -INFINITY;
    for (int t = threadIdx.x; t < n_pos; t += blockDim.x) {
        float s = 0.0f;
        for (int d = 0; d < hd; d++)
            s += q[d] * kvk_to_f32(k[(long long)t * a.kv_dim + d]);
        scores[t] = s / sqrtf((float)hd);
        local_max = fmaxf(local_max, scores[t]);
    }
    float max = kvk_block_max(local_max);
    float local_sum = 0.0f;
    for (int t = threadIdx.x; t < n_pos; t += blockDim.x) {
        scores[t] = expf(scores[t] - max);
        local_sum += scores[t];
    }
    /* kvk_block_sum's barriers also make every thread's scores visible. */
    float inv_sum = 1.0f / kvk_block_sum(local_sum);
    float *out = a.out + (long long)i * a.n_heads * hd + h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < n_pos; t++)
            acc += (scores[t] * inv_sum) * kvk_to_f32(v[(long long)t * a.kv_dim + d]);
        out[d] = acc;
    }
}

template <typename T, int NV> __global__ void attention_v3(AttentionArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* kvk_merge_floats(groups, 1, head_dim) */
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    long long at = (long long)i * a.n_heads * hd + h * hd, column = (long long)(h / a.kv_mul) * hd;
    KvkContiguousRows rows = {a.base_row[i]};
    kvk_attend_one_pass<T, NV>(a.out + at, a.q + at, a.k + column, a.v + column, a.kv_dim, rows, a.pos[i] + 1, hd,
                               lanes, merge);
}

/* v4: v3 over one partition; the partial results go to scratch
 * (m, l: [pairs][max_parts]; acc: [pairs][max_parts][head_dim]). */
template <typename T, int NV> __global__ void attention_v4_partition(AttentionArgs<T> a, int lanes)
{
    extern __shared__ float merge[]; /* kvk_merge_floats(groups, 1, head_dim) */
    int pair = blockIdx.x, i = pair / a.n_heads, h = pair % a.n_heads, hd = a.head_dim;
    long long at = (long long)i * a.n_heads * hd + h * hd, column = (long long)(h / a.kv_mul) * hd;
    long long slots = (long long)a.n * a.n_heads * a.max_parts;
    KvkContiguousRows rows = {a.base_row[i]};
    kvk_attend_partition<T, NV>(a.scratch, a.scratch + slots, a.scratch + 2 * slots,
                                (long long)pair * a.max_parts + blockIdx.y, a.q + at, a.k + column, a.v + column,
                                a.kv_dim, rows, a.pos[i] + 1, blockIdx.y, hd, lanes, merge);
}

/* Largest dynamic shared memory a block may ask for without opting in. */
#define DEFAULT_SHARED_LIMIT (48 * 1024)

static size_t v3_shared_bytes(int head_dim, int lanes)
{
    return kvk_merge_floats(KVK_ATTENTION_THREADS / lanes, 1, head_dim) * sizeof(float);
}

static int split_partitions(int max_pos)
{
    return (max_pos + KVK_SPLIT_PARTITION - 1) / KVK_SPLIT_PARTITION;
}

extern "C" int kvk_attention_supports(int version, Dtype t, KvkHeads h, int max_pos)
{
    if (h.n_heads <= 0 || h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads || h.head_dim <= 0 || max_pos <= 0 ||
        (unsigned)t >= DTYPE_COUNT)
        return 0;
    int lanes, vectors;
    switch (version) {
    case 1: return 1;
    case 2: /* the scores, plus the reductions' 2 x 32 floats of static shared memory */
        return (size_t)max_pos * sizeof(float) + 64 * sizeof(float) <= DEFAULT_SHARED_LIMIT;
    case 3: return kvk_group_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors);
    case 4: return kvk_group_shape(h.head_dim, (int)dtype_bytes(t), &lanes, &vectors) && split_partitions(max_pos) <= 65535;
    default: return 0;
    }
}

extern "C" size_t kvk_attention_scratch_floats(int version, int n, int max_pos, KvkHeads h)
{
    size_t pairs = (size_t)n * (size_t)h.n_heads;
    if (version == 1)
        return pairs * (size_t)max_pos;
    if (version == 4)
        return pairs * (size_t)split_partitions(max_pos) * (size_t)(h.head_dim + 2);
    return 0;
}

extern "C" int kvk_attention_pick(Dtype t, KvkHeads h, int max_pos)
{
    for (int version = 3; version >= 2; version--)
        if (kvk_attention_supports(version, t, h, max_pos))
            return version;
    return 0;
}

template <typename T, int NV>
static void launch_v3(int version, const AttentionArgs<T> &a, int lanes, cudaStream_t stream)
{
    size_t shared = v3_shared_bytes(a.head_dim, lanes);
    if (version == 3) {
        attention_v3<T, NV><<<a.n * a.n_heads, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
        return;
    }
    dim3 grid((unsigned)(a.n * a.n_heads), (unsigned)a.max_parts);
    attention_v4_partition<T, NV><<<grid, KVK_ATTENTION_THREADS, shared, stream>>>(a, lanes);
}

template <typename T>
static int attention_launch(int version, AttentionArgs<T> a, int max_pos, cudaStream_t stream, Err *err)
{
    int pairs = a.n * a.n_heads;
    if (version == 1) {
        a.scratch_stride = max_pos;
        attention_v1<T><<<kvk_blocks(pairs, 64), 64, 0, stream>>>(a);
        return KVK_CHECK_LAUNCH(err, "attention v1");
    }
    if (version == 2) {
        attention_v2<T><<<pairs, KVK_ATTENTION_THREADS, (size_t)max_pos * sizeof(float), stream>>>(a);
        return KVK_CHECK_LAUNCH(err, "attention v2");
    }
    int lanes = 0, vectors = 0;
    kvk_group_shape(a.head_dim, (int)sizeof(T), &lanes, &vectors);
    a.max_parts = split_partitions(max_pos);
    switch (vectors) {
    case 1: launch_v3<T, 1>(version, a, lanes, stream); break;
    case 2: launch_v3<T, 2>(version, a, lanes, stream); break;
    case 3: launch_v3<T, 3>(version, a, lanes, stream); break;
    case 4: launch_v3<T, 4>(version, a, lanes, stream); break;
    case 5: launch_v3<T, 5>(version, a, lanes, stream); break;
    case 6: launch_v3<T, 6>(version, a, lanes, stream); break;
    case 7: launch_v3<T, 7>(version, a, lanes, stream); break;
    case 8: launch_v3<T, 8>(version, a, lanes, stream); break;
    default: return err_set(err, "attention v%d: head_dim %d cannot be split into 16-byte vectors", version, a.head_dim);
    }
    if (KVK_CHECK_LAUNCH(err, version == 3 ? "attention v3" : "attention v4 (partitions)"))
        return -1;
    if (version == 3)
        return 0;
    long long slots = (long long)pairs * a.max_parts;
    float *m = a.scratch, *l = a.scratch + slots, *acc = a.scratch + 2 * slots;
    kvk_split_reduce<void><<<(unsigned)pairs, kvk_split_reduce_threads(a.head_dim),
                             (size_t)a.max_parts * sizeof(float), stream>>>(a.out, m, l, acc, a.pos, a.n_heads,
                                                                            a.head_dim, a.max_parts,
                                                                            KVK_SPLIT_PARTITION);
    return KVK_CHECK_LAUNCH(err, "attention v4 (merge)");
}

extern "C" int kvk_attention(int version, Dtype t, float *out, const float *q, const void *k_layer,
                             const void *v_layer, const long long *base_row, const int *pos, int n, int max_pos,
                             KvkHeads h, float *scratch, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_attention_n_versions, "attention", err))
        return -1;
    if (n == 0)
        return 0;
    if (n < 0 || !kvk_attention_supports(version, t, h, max_pos))
        return err_set(err, "attention v%d: unsupported shape (n %d, heads %d/%d, head_dim %d, %d positions, %s)",
                       version, n, h.n_heads, h.n_kv_heads, h.head_dim, max_pos, dtype_name(t));
    if ((version == 1 || version == 4) && !scratch)
        return err_set(err, "attention v%d: needs scratch of %zu floats", version,
                       kvk_attention_scratch_floats(version, n, max_pos, h));
    switch (t) {
    case DTYPE_F32: {
        AttentionArgs<float> a = {out, q, (const float *)k_layer, (const float *)v_layer, base_row, pos, n,
                                  h.n_heads, h.n_heads / h.n_kv_heads, h.head_dim, h.n_kv_heads * h.head_dim,
                                  scratch, 0, 0};
        return attention_launch(version, a, max_pos, stream, err);
    }
    case DTYPE_F16: {
        AttentionArgs<__half> a = {out, q, (const __half *)k_layer, (const __half *)v_layer, base_row, pos, n,
                                   h.n_heads, h.n_heads / h.n_kv_heads, h.head_dim, h.n_kv_heads * h.head_dim,
                                   scratch, 0, 0};
        return attention_launch(version, a, max_pos, stream, err);
    }
    default: {
        AttentionArgs<__nv_bfloat16> a = {out, q, (const __nv_bfloat16 *)k_layer, (const __nv_bfloat16 *)v_layer,
                                          base_row, pos, n, h.n_heads, h.n_heads / h.n_kv_heads, h.head_dim,
                                          h.n_kv_heads * h.head_dim, scratch, 0, 0};
        return attention_launch(version, a, max_pos, stream, err);
    }
    }
}
