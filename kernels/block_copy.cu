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
 *    (vLLM's copy_blocks) turns launch overhead into bandwidth.
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
    long long runs = 2LL * n_pairs * n_layers;
    if (runs > 0x7fffffffLL)
        return err_set(err, "block copy v2: %lld runs is more than a grid holds", runs);
    block_copy_v2<<<(unsigned)runs, 256, 0, stream>>>((char *)k_cache, (char *)v_cache, pairs, n_layers, layer_bytes,
                                                       run_bytes);
    return KVK_CHECK_LAUNCH(err, "block copy v2");
}
