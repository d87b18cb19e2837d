/* Block copy for copy-on-write (chapter 4): when a sequence first writes
 * into a block it shares with another (after a fork), the block is copied
 * to a fresh one, in every layer, for K and V. With the device layout
 * [layer][rows][kv_dim], a block of one layer is a contiguous run of
 * block_size rows, so copying a block is 2 x n_layers contiguous copies.
 * CPU reference: kv_block_copy_reference() in kernels/check/kv_ref.c.
 *
 * v1 "memcpy-per-run": one cudaMemcpyAsync per (pair, layer, K/V).
 *    Teaches: simple and correct, but each call costs a few microseconds of
 *    CPU and a separate copy on the GPU; forking a batch of sequences with
 *    many layers makes thousands of them.
 * v2 "one-kernel": a single launch; block b of the grid copies run b with
 *    16-byte loads and stores (bytes one by one when a run is not a
 *    multiple of 16). Teaches: batching many small copies into one kernel
 *    (vLLM's copy_blocks) turns launch overhead into bandwidth, and that
 *    copies that run at the same time must not depend on each other.
 *
 * Chained pairs. The reference and v1 copy the pairs one after the other,
 * so in (a -> b, b -> c) block c receives a's bytes, and (a -> b, b -> a)
 * leaves a as it was. In one launch of v2 every pair runs at once: c would
 * get b's old bytes, new ones or a mix (a race). So v2 cuts the list into
 * waves, one launch each, in order: a wave ends before a pair that reads
 * or writes a block that an earlier pair of the wave writes, or writes one
 * that it reads. Copy-on-write makes independent pairs (each destination a
 * fresh block), so that is one launch. Without the pairs on the host, v2
 * cannot look, and the caller promises that no pair depends on another.
 * (The CPU emulator runs the blocks of a grid one after the other, in
 * order, so it would not show this race: make emu-check cannot.)
 *
 * Both are byte copies: the result is bitwise the reference's. */
#include "kernel_common.cuh"

extern "C" const KvkVersion kvk_block_copy_versions[] = {
    {"memcpy-per-run", "one cudaMemcpyAsync per block, layer and K/V"},
    {"one-kernel", "one launch copies every run with 16-byte accesses"},
};
extern "C" const int kvk_block_copy_n_versions = 2;

/* Run r of the copy: pair r / (2 n_layers), then layer, then K or V. */
__global__ void block_copy_v2(char *k_cache, char *v_cache, const int *pairs, int n_layers, long long layer_bytes,
                              long long run_bytes)
{
    int run = blockIdx.x, pair = run / (2 * n_layers), layer = (run / 2) % n_layers, is_v = run % 2;
    char *base = is_v ? v_cache : k_cache;
    const char *src = base + layer * layer_bytes + (long long)pairs[2 * pair] * run_bytes;
    char *dst = base + layer * layer_bytes + (long long)pairs[2 * pair + 1] * run_bytes;
    if (run_bytes % 16 == 0) {
        const int4 *s4 = reinterpret_cast<const int4 *>(src);
        int4 *d4 = reinterpret_cast<int4 *>(dst);
        for (long long i = threadIdx.x; i < run_bytes / 16; i += blockDim.x)
            d4[i] = s4[i];
    } else {
        for (long long i = threadIdx.x; i < run_bytes; i += blockDim.x)
            dst[i] = src[i];
    }
}

/* Whether pair j depends on one of the pairs [first, j): it reads or
 * writes a block that one of them writes, or writes one that it reads. */
static int depends_on_wave(const int *pairs_host, int first, int j)
{
    int src = pairs_host[2 * j], dst = pairs_host[2 * j + 1];
    for (int i = first; i < j; i++) {
        int s = pairs_host[2 * i], d = pairs_host[2 * i + 1];
        if (src == d || dst == d || dst == s)
            return 1;
    }
    return 0;
}

/* End of the wave that starts at pair `first`: the first pair after it
 * that depends on the wave (n_pairs when none does). */
static int wave_end(const int *pairs_host, int n_pairs, int first)
{
    int end = first + 1;
    while (end < n_pairs && !depends_on_wave(pairs_host, first, end))
        end++;
    return end;
}

extern "C" int kvk_block_copy_waves(const int *pairs_host, int n_pairs)
{
    int waves = 0;
    for (int first = 0; first < n_pairs; first = wave_end(pairs_host, n_pairs, first))
        waves++;
    return waves;
}

static int copy_with_kernel(char *k_cache, char *v_cache, const int *pairs, int n_pairs, int n_layers,
                            long long layer_bytes, long long run_bytes, cudaStream_t stream, Err *err)
{
    long long runs = 2LL * n_pairs * n_layers;
    if (runs > 0x7fffffffLL)
        return err_set(err, "block copy v2: %lld runs is more than a grid holds", runs);
    block_copy_v2<<<(unsigned)runs, 256, 0, stream>>>(k_cache, v_cache, pairs, n_layers, layer_bytes, run_bytes);
    return KVK_CHECK_LAUNCH(err, "block copy v2");
}

static int copy_with_memcpy(char *k_cache, char *v_cache, const int *pairs_host, int n_pairs, int n_layers,
                            long long layer_bytes, long long run_bytes, cudaStream_t stream, Err *err)
{
    for (int p = 0; p < n_pairs; p++)
        for (int l = 0; l < n_layers; l++)
            for (int is_v = 0; is_v < 2; is_v++) {
                char *base = (is_v ? v_cache : k_cache) + l * layer_bytes;
                cudaError_t rc = cudaMemcpyAsync(base + (long long)pairs_host[2 * p + 1] * run_bytes,
                                                 base + (long long)pairs_host[2 * p] * run_bytes, (size_t)run_bytes,
                                                 cudaMemcpyDeviceToDevice, stream);
                if (rc != cudaSuccess)
                    return err_set(err, "%s:%d: block copy v1: cudaMemcpyAsync: %s", __FILE__, __LINE__,
                                   cudaGetErrorString(rc));
            }
    return 0;
}

extern "C" int kvk_block_copy(int version, void *k_cache, void *v_cache, const int *pairs, const int *pairs_host,
                              int n_pairs, int n_layers, long long layer_rows, int block_size, long long row_bytes,
                              cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_block_copy_n_versions, "block copy", err))
        return -1;
    if (n_pairs == 0)
        return 0;
    if (n_pairs < 0 || n_layers <= 0 || block_size <= 0 || row_bytes <= 0 || layer_rows < block_size)
        return err_set(err, "block copy: bad shape (%d pairs, %d layers, %lld rows, block %d)", n_pairs, n_layers,
                       layer_rows, block_size);
    long long layer_bytes = layer_rows * row_bytes, run_bytes = (long long)block_size * row_bytes;
    if (version == 1) {
        if (!pairs_host)
            return err_set(err, "block copy v1: needs the pairs on the host");
        return copy_with_memcpy((char *)k_cache, (char *)v_cache, pairs_host, n_pairs, n_layers, layer_bytes,
                                run_bytes, stream, err);
    }
    if (!pairs)
        return err_set(err, "block copy v2: needs the pairs on the device");
    if (!pairs_host)
        return copy_with_kernel((char *)k_cache, (char *)v_cache, pairs, n_pairs, n_layers, layer_bytes, run_bytes,
                                stream, err);
    for (int first = 0, end; first < n_pairs; first = end) {
        end = wave_end(pairs_host, n_pairs, first);
        if (copy_with_kernel((char *)k_cache, (char *)v_cache, pairs + 2 * first, end - first, n_layers, layer_bytes,
                             run_bytes, stream, err))
            return -1;
    }
    return 0;
}
