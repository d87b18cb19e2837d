/**
 * @file paged_device.h
 * @brief Chapter 4 extension: the pool's blocks on the device
 *        (`--device cuda`).
 *
 * **Adds** a device store of the same blocks, in the same layout as the
 * CPU pool's storage, [n_blocks][n_layers][2][block_size][kv_dim], in the
 * device's element type: block b on the device holds what block b holds on
 * the CPU, byte for byte once rounded. The chapter keeps only the books on
 * the host (the pool runs without storage); before each forward step the
 * store takes every running request's block table from the server (its
 * begin_step); every copy-on-write the pool makes is repeated on the device
 * as it is made (BlockPool.on_copy), one contiguous copy per block as on
 * the CPU; PagedAttention on the device reads through the tables, and is
 * tested against paged_attention().
 *
 * **Turned on by** `--device cuda` (`--kv-dtype`: the element type).
 *
 * **Taught in** book/ch04-paged.md, "Extension: the blocks on the
 * device", and book/appendix-kernels.md (the kernels).
 *
 * **Where the core calls it**: paged_open() calls paged_device_open()
 * when run->device is set; nothing else.
 */
#ifndef KVLAB_CH04_PAGED_DEVICE_H
#define KVLAB_CH04_PAGED_DEVICE_H

#include "device_kv.h"
#include "paged.h"

/**
 * `--device cuda`: a pool of the same blocks, in the same layout, on the
 * device (device_kv_open_paged()), one block table per request, taken
 * from the server before every forward step; hooks the pool's on_copy to
 * repeat copy-on-write there. paged_open() calls it.
 * @param s    the server
 * @param run  the run (run->device set, the step buffers sized)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_device_open(PagedServer *s, ServingRun *run, Err *err);

/**
 * `--device cuda`: copies one whole block between the device pool and a
 * host buffer, on the device's stream, in the host pool's layout
 * [n_layers][2 (K, V)][block_size][kv_dim] of the device's element type,
 * which is the device block's layout too: one copy of bytes_per_block.
 * Stream order puts the copy after every kernel that
 * wrote the block and before any that reads it or writes it again
 * (ext/swap.c swaps blocks out and in with it).
 * @param run        the run (run->device set, the device pool open)
 * @param block      device block
 * @param host       [bytes_per_block] host buffer
 * @param to_device  1: host to device (swap in); 0: device to host (swap out)
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_device_swap_block(ServingRun *run, int block, void *host, int to_device, Err *err);

/**
 * The device store of this chapter (chapters/ch04-paged/ext/device.c): the
 * pool's blocks in device memory, [n_blocks][n_layers][2 (K, V)]
 * [block_size][kv_dim] of type @p t, the layout of BlockPool.storage, and
 * a block table per sequence (kept on the host by the chapter, uploaded
 * each step); attention reads through the tables (PagedAttention, one pass
 * or split along long sequences).
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param n_blocks    blocks in the pool
 * @param block_size  tokens per block, a power of two
 * @param max_seqs    sequence ids are 0..max_seqs-1
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_paged(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int n_blocks,
                         int block_size, int max_seqs, int max_tokens, Err *err);

/**
 * Sets a sequence's block table in a device store (the blocks holding
 * positions 0.., block_size positions each).
 * @param kv        a store from device_kv_open_paged()
 * @param seq       sequence id
 * @param blocks    [n] block ids
 * @param n         blocks (0: the sequence has none)
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on a bad id or too many blocks
 */
int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err);

/**
 * Copies whole blocks (every layer, K and V: one contiguous run each) for
 * copy-on-write, on the device's stream, before the next step reads them.
 * @param kv       a store from device_kv_open_paged()
 * @param pairs    [n][2] (source, destination) block ids (host)
 * @param n        pairs, at most max_seqs
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_paged_copy_blocks(DeviceKv *kv, const int *pairs, int n, Err *err);

/**
 * The pool's bytes on the device: block b is @p block_bytes bytes from
 * block b - 1, laid out as a block of BlockPool.storage
 * ([n_layers][2][block_size][kv_dim]) in the store's K/V type.
 * @param kv           a store from device_kv_open_paged()
 * @param block_bytes  receives the bytes of one block (may be NULL)
 * @return the device address of block 0, or NULL when @p kv is not a paged
 *         store (or the build has no CUDA)
 */
void *device_kv_paged_blocks(const DeviceKv *kv, size_t *block_bytes);

#endif
