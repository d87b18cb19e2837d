/**
 * @file device_kv.h
 * @brief Where each chapter keeps K and V on the device: what the device
 *        K/V stores share, and the stores themselves (device_forward.h's seam).
 *
 * On the device every chapter stores K and V the same way, one layer at a
 * time: `[layer][rows][kv_dim]` for K and the same for V, one row per token
 * slot (see kernels.h). What differs is which row holds a token and how
 * many rows are reserved:
 *
 * | chapter | store                        | rows per layer               | row of (seq, pos)                         | ledger | defined in |
 * |---------|------------------------------|------------------------------|-------------------------------------------|--------|------------|
 * | 1       | device_kv_open_recompute()   | seq_len, one layer reused    | pos                                       | activations | chapters/ch01-naive/device.c |
 * | 2       | device_kv_open_contiguous()  | capacity (seq_len, or grown) | pos                                       | kv | chapters/ch02-kvcache/device.c |
 * | 3       | device_kv_open_arena()       | the arena's token capacity   | region_start[seq] + pos                   | kv | chapters/ch03-batching/device.c |
 * | 4       | device_kv_open_paged()       | n_blocks x block_size        | table[seq][pos / bs] x bs + pos % bs      | kv (tables: kv_metadata) | chapters/ch04-paged/device.c |
 *
 * Each chapter's store lives in its chapter folder; this header declares
 * them so that the kernel checks and the CUDA tests, which exercise all of
 * them, reach them in one place (common/ itself calls none of them). What
 * is common is here and in device_kv.c: the ::DeviceKv a store hands the
 * forward pass, the per-layer storage (DeviceKvLayers, CUDA builds), and
 * the store of chapters 1 to 3 in which a sequence's positions are
 * consecutive rows from a first row (DeviceRowStore, CUDA builds).
 *
 * Chapters 1 and 2 use their stores through run_single (a
 * ::DeviceKvOpenFn). Chapters 3 and 4 keep their allocator on the host
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
    DeviceKvSeam seam; /**< begin_step/store/attend for device_forward(); seam.ctx is the store */
    /**
     * Single-stream loop only (may be NULL): as SingleStreamKv.prepare,
     * makes room for n_tokens positions and says how many are stored.
     */
    int (*prepare)(void *ctx, int n_tokens, int *cached, Err *err);
    /** KV bytes reserved and used now (NULL: nothing is kept). */
    void (*usage)(void *ctx, size_t *reserved, size_t *used);
    /**
     * Frees the store (seam.ctx); device_kv_close() calls it. It also names
     * the kind of store: a chapter's functions check it before they look
     * inside.
     */
    void (*close)(void *ctx);
    Dtype kv_type;     /**< element type of the stored K/V */
} DeviceKv;

#ifdef KVLAB_CUDA
#include "kernels.h"

/** K and V of the stored layers: [layers][rows][kv_dim] each, in device memory. */
typedef struct {
    Dtype type;      /**< element type */
    int kv_dim;      /**< elements per row */
    int layers;      /**< layers stored (1 when every layer reuses one) */
    long long rows;  /**< token slots per layer */
    MemCategory cat; /**< ledger category of the bytes */
    void *k;         /**< [layers][rows][kv_dim] of type */
    void *v;         /**< same */
} DeviceKvLayers;

/**
 * Allocates K and V (charged to c->cat on the device).
 * @param c    the shape; receives k and v
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (nothing allocated)
 */
int device_kv_layers_alloc(DeviceKvLayers *c, Err *err);

/**
 * Frees K and V.
 * @param c  allocated or zeroed layers
 */
void device_kv_layers_free(DeviceKvLayers *c);

/**
 * Bytes of one row (one token slot of one layer).
 * @param c  the layers
 * @return kv_dim x element bytes
 */
size_t device_kv_row_bytes(const DeviceKvLayers *c);

/**
 * Bytes of one layer.
 * @param c  the layers
 * @return rows x row bytes
 */
size_t device_kv_layer_bytes(const DeviceKvLayers *c);

/**
 * One layer of K or V.
 * @param c      the layers
 * @param base   c->k or c->v
 * @param layer  layer index
 * @return the layer's [rows][kv_dim]
 */
void *device_kv_layer(const DeviceKvLayers *c, void *base, int layer);

/**
 * The head counts the attention kernels take.
 * @param cfg  model shape
 * @return heads, KV heads, head_dim
 */
KvkHeads device_kv_heads(const ModelConfig *cfg);

/**
 * The kv_write kernel version for rows of @p kv_dim elements.
 * @param kv_dim  elements per row
 * @return the version (vectorised when kv_dim is a multiple of 4)
 */
int device_kv_write_version(int kv_dim);

/**
 * The store of chapters 1 to 3: a sequence's positions are consecutive
 * rows from a first row: row 0 for the one sequence of chapters 1 and 2,
 * its region's first row in chapter 3's arena. A chapter that needs more
 * fields puts this first in its own struct and asks for the larger size.
 */
typedef struct {
    const char *kind;         /**< which chapter's store: "recompute", "contiguous" or "arena" */
    const Device *dev;        /**< the device */
    ModelConfig cfg;          /**< model shape */
    DeviceKvLayers cache;     /**< the K/V */
    int attention;            /**< kvk_attention version */
    int max_tokens;           /**< most entries of a step */
    long long *step_host;     /**< [2][max_tokens] slots, then base rows (host staging) */
    long long *step_dev;      /**< the same on the device */
    int stored;               /**< positions 0..stored-1 hold K/V (one sequence) */
    int max_seqs;             /**< 0: one sequence from row 0; else sequences 0..max_seqs-1 with regions */
    long long *region_first;  /**< [max_seqs] first row of each sequence's region */
    long long *region_rows;   /**< [max_seqs] rows of the region (0: none) */
} DeviceRowStore;

/**
 * Opens a row store of @p store_bytes (at least sizeof(::DeviceRowStore),
 * zeroed beyond it) and makes @p kv its seam; kv->close frees it.
 * @param kv           receives the store
 * @param store_bytes  size of the chapter's struct that starts with a ::DeviceRowStore
 * @param kind         what DeviceRowStore.kind says
 * @param dev          the device
 * @param cfg          model shape
 * @param t            element type of K/V
 * @param layers       layers stored (1: every layer reuses the one, chapter 1)
 * @param rows         token slots per layer
 * @param cat          ledger category of the K/V bytes
 * @param max_tokens   most entries of a step
 * @param max_seqs     0 for one sequence from row 0, else the number of regions
 * @param err          receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_row_store_open(DeviceKv *kv, size_t store_bytes, const char *kind, const Device *dev,
                          const ModelConfig *cfg, Dtype t, int layers, long long rows, MemCategory cat,
                          int max_tokens, int max_seqs, Err *err);

/**
 * The row store behind @p kv, when it is one of @p kind.
 * @param kv    a store
 * @param kind  the kind asked for
 * @return the store, or NULL for another kind of store
 */
DeviceRowStore *device_row_store_of(const DeviceKv *kv, const char *kind);
#endif

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
 * Frees a store (any kind: DeviceKv.close).
 * @param kv  an open or zeroed store
 */
void device_kv_close(DeviceKv *kv);

#endif
