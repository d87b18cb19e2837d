/* Block copy for copy-on-write (chapter 4): when a sequence first writes
 * into a block it shares with another (after a fork), the block is copied
 * to a fresh one, in every layer, for K and V. The device pool has the CPU
 * pool's layout, [n_blocks][n_layers][2][block_size][kv_dim], so a block
 * of every layer is one contiguous run of bytes and a copy is one run, as
 * block_pool_copy() is one memcpy on the CPU.
 * CPU reference: block_pool_copy() in chapters/ch04-paged/block_pool.c.
 *
 * v1 "memcpy-per-block": one cudaMemcpyAsync per pair. Teaches: simple and
 *    correct, but each call costs a few microseconds of CPU and a separate
 *    copy on the GPU; forking a batch of sequences makes one per shared
 *    block.
 * v2 "one-kernel": a single launch; each block of the grid copies one
 *    chunk of KVK_COPY_CHUNK bytes (or the block's last, shorter one) of
 *    one pair, with 16-byte loads and stores (bytes one by one when a block
 *    is not a multiple of 16 bytes). Teaches: batching many small copies
 *    into one kernel (vLLM's copy_blocks) turns launch overhead into
 *    bandwidth, and that copies that run at the same time must not depend
 *    on each other.
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
    {"memcpy-per-block", "one cudaMemcpyAsync per block (every layer, K and V)"},
    {"one-kernel", "one launch copies every block in chunks with 16-byte accesses"},
};
extern "C" const int kvk_block_copy_n_versions = 2;

/* Bytes one block of the grid copies (a multiple of 16). */
#define KVK_COPY_CHUNK 16384

/* Grid block b copies chunk b % chunks of pair b / chunks. */
__global__ void block_copy_v2(char *pool, const int *pairs, long long block_bytes, int chunks)
{
    int pair = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    long long begin = (long long)chunk * KVK_COPY_CHUNK, left = block_bytes - begin;
    long long bytes = left < KVK_COPY_CHUNK ? left : KVK_COPY_CHUNK;
    const char *src = pool + (long long)pairs[2 * pair] * block_bytes + begin;
    char *dst = pool + (long long)pairs[2 * pair + 1] * block_bytes + begin;
    if (block_bytes % 16 == 0) {
        const int4 *s4 = reinterpret_cast<const int4 *>(src);
        int4 *d4 = reinterpret_cast<int4 *>(dst);
        for (long long i = threadIdx.x; i < bytes / 16; i += blockDim.x)
            d4[i] = s4[i];
    } else {
        for (long long i = threadIdx.x; i < bytes; i += blockDim.x)
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

static int copy_with_kernel(char *pool, const int *pairs, int n_pairs, long long block_bytes, cudaStream_t stream,
                            Err *err)
{
    long long chunks = (block_bytes + KVK_COPY_CHUNK - 1) / KVK_COPY_CHUNK, grid = chunks * n_pairs;
    if (grid > 0x7fffffffLL)
        return err_set(err, "block copy v2: %lld chunks is more than a grid holds", grid);
    block_copy_v2<<<(unsigned)grid, 256, 0, stream>>>(pool, pairs, block_bytes, (int)chunks);
    return KVK_CHECK_LAUNCH(err, "block copy v2");
}

static int copy_with_memcpy(char *pool, const int *pairs_host, int n_pairs, long long block_bytes,
                            cudaStream_t stream, Err *err)
{
    for (int p = 0; p < n_pairs; p++) {
        cudaError_t rc = cudaMemcpyAsync(pool + (long long)pairs_host[2 * p + 1] * block_bytes,
                                         pool + (long long)pairs_host[2 * p] * block_bytes, (size_t)block_bytes,
                                         cudaMemcpyDeviceToDevice, stream);
        if (rc != cudaSuccess)
            return err_set(err, "%s:%d: block copy v1: cudaMemcpyAsync: %s", __FILE__, __LINE__,
                           cudaGetErrorString(rc));
    }
    return 0;
}

extern "C" int kvk_block_copy(int version, void *pool, const int *pairs, const int *pairs_host, int n_pairs,
                              long long block_bytes, cudaStream_t stream, Err *err)
{
    if (kvk_check_version(version, kvk_block_copy_n_versions, "block copy", err))
        return -1;
    if (n_pairs == 0)
        return 0;
    if (n_pairs < 0 || block_bytes <= 0)
        return err_set(err, "block copy: bad shape (%d pairs of %lld bytes)", n_pairs, block_bytes);
    if (version == 1) {
        if (!pairs_host)
            return err_set(err, "block copy v1: needs the pairs on the host");
        return copy_with_memcpy((char *)pool, pairs_host, n_pairs, block_bytes, stream, err);
    }
    if (!pairs)
        return err_set(err, "block copy v2: needs the pairs on the device");
    if (!pairs_host)
        return copy_with_kernel((char *)pool, pairs, n_pairs, block_bytes, stream, err);
    for (int first = 0, end; first < n_pairs; first = end) {
        end = wave_end(pairs_host, n_pairs, first);
        if (copy_with_kernel((char *)pool, pairs + 2 * first, end - first, block_bytes, stream, err))
            return -1;
    }
    return 0;
}
