/**
 * @file device_kv.h
 * @brief Where each chapter keeps K and V on the device: implementations of
 *        the device K/V seam (device_forward.h).
 *
 * On the device every chapter stores K and V the same way, one layer at a
 * time: `[layer][rows][kv_dim]` for K and the same for V, one row per token
 * slot (see kernels.h). What differs is which row holds a token and how
 * many rows are reserved:
 *
 * | chapter | store                        | rows per layer               | row of (seq, pos)                         | ledger |
 * |---------|------------------------------|------------------------------|-------------------------------------------|--------|
 * | 1       | device_kv_open_recompute()   | seq_len, one layer reused    | pos                                       | activations |
 * | 2       | device_kv_open_contiguous()  | capacity (seq_len, or grown) | pos                                       | kv |
 * | 3       | device_kv_open_arena()       | the arena's token capacity   | region_start[seq] + pos                   | kv |
 * | 4       | device_kv_open_paged()       | n_blocks x block_size        | table[seq][pos / bs] x bs + pos % bs      | kv (tables: kv_metadata) |
 *
 * Chapters 1 and 2 use these through run_single (the ::DeviceKvOpenFn hook
 * of a single-stream chapter). Chapters 3 and 4 use them through the
 * serving loop (serving_device.h): they keep their allocator on the host
 * (regions, block pool, refcounts) exactly as on the CPU and tell the
 * device store where a sequence lives (device_kv_arena_place(),
 * device_kv_paged_set_table()) before a step; the copies their allocator
 * decides go through device_kv_arena_copy_rows() and
 * device_kv_paged_copy_blocks().
 */
#ifndef KVLAB_DEVICE_KV_H
#define KVLAB_DEVICE_KV_H

#include <stddef.h>

#include "device.h"
#include "device_forward.h"
#include "dtype.h"
#include "err.h"
#include "model.h"

/** A device K/V store: the seam plus what the generation loop asks. */
typedef struct {
    DeviceKvSeam seam; /**< begin_step/store/attend for device_forward() */
    /**
     * Single-stream loop only (may be NULL): as SingleStreamKv.prepare,
     * makes room for n_tokens positions and says how many are stored.
     */
    int (*prepare)(void *ctx, int n_tokens, int *cached, Err *err);
    /** KV bytes reserved and used now (NULL: nothing is kept). */
    void (*usage)(void *ctx, size_t *reserved, size_t *used);
    Dtype kv_type;     /**< element type of the stored K/V */
    int kind;          /**< which store (internal) */
} DeviceKv;

/**
 * Chapter 1: a transient [seq_len][kv_dim] K and V, reused by every layer
 * of every step (charged to activations). prepare() always answers 0
 * cached positions.
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err);

/**
 * Chapter 2: one request's contiguous cache [layer][capacity][kv_dim].
 * With @p grow = 0 the capacity is seq_len from the start (--kv-alloc max);
 * with grow = 1 it starts at the prompt length rounded up to a power of two
 * (at least 16) and doubles when full, copying the stored rows, up to
 * seq_len (--kv-alloc grow). prepare() answers how many positions are
 * stored.
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param grow        0: reserve seq_len; 1: grow by doubling
 * @param n_prompt    prompt length (sizes the first reservation of grow)
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_contiguous(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int grow,
                              int n_prompt, int max_tokens, Err *err);

/** What growing a contiguous cache cost (chapter 2's table). */
typedef struct {
    int capacity;           /**< positions reserved now */
    int initial_capacity;   /**< positions reserved when the store was opened */
    int length;             /**< positions 0..length-1 hold K/V */
    int reallocations;      /**< times the cache moved to a larger one */
    size_t bytes_copied;    /**< K/V bytes copied by those moves */
    size_t peak_held_bytes; /**< most K/V bytes allocated at one moment (old + new during a move) */
} DeviceContiguousStats;

/**
 * Reports the growth of a contiguous store.
 * @param kv     a store from device_kv_open_contiguous()
 * @param stats  receives the numbers
 */
void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats);

/**
 * Chapter 3: one arena [layer][arena_rows][kv_dim] in which each sequence
 * owns a contiguous region of rows (placed by the chapter's allocator).
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param arena_rows  token slots in the arena
 * @param max_seqs    sequence ids are 0..max_seqs-1
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err);

/**
 * Tells an arena store where a sequence's region is (before the steps
 * that use it). A region can move (grow): the chapter copies the rows.
 * @param kv         an arena store
 * @param seq        sequence id
 * @param first_row  first row of the region
 * @param rows       rows in the region (0: the sequence has none)
 * @param err        receives the reason on failure
 * @return 0 on success, -1 if the region leaves the arena
 */
int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err);

/**
 * Copies rows of every layer (K and V) inside an arena: what chapter 3's
 * grow policy does when a region moves to a larger hole.
 * @param kv       an arena store
 * @param src_row  first row to copy
 * @param dst_row  first row of the destination (ranges must not overlap)
 * @param rows     rows to copy
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err);

/**
 * Chapter 4: a block pool [layer][n_blocks x block_size][kv_dim] and a
 * block table per sequence (kept on the host by the chapter, uploaded each
 * step); attention reads through the tables (PagedAttention, one pass or
 * split along long sequences).
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
 * Sets a sequence's block table (the blocks holding positions 0..,
 * block_size positions each).
 * @param kv        a paged store
 * @param seq       sequence id
 * @param blocks    [n] block ids
 * @param n         blocks (0: the sequence has none)
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on a bad id or too many blocks
 */
int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err);

/**
 * Copies blocks (all layers, K and V) for copy-on-write, on the device's
 * stream, before the next step reads them.
 * @param kv       a paged store
 * @param pairs    [n][2] (source, destination) block ids (host)
 * @param n        pairs, at most max_seqs
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_paged_copy_blocks(DeviceKv *kv, const int *pairs, int n, Err *err);

/**
 * Frees a store (any kind).
 * @param kv  an open or zeroed store
 */
void device_kv_close(DeviceKv *kv);

#endif
