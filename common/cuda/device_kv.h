/**
 * @file device_kv.h
 * @brief What the device K/V stores share (device_forward.h's seam): the
 *        ::DeviceKv a store hands the forward pass, per-layer storage and
 *        the row store of chapters 1 to 3.
 *
 * Every chapter has its own device store, declared in its own header and
 * defined in its `device.c`; common/ calls none of them:
 *
 * | chapter | store                        | layout                                          | row of (seq, pos)                         | ledger | declared in |
 * |---------|------------------------------|-------------------------------------------------|-------------------------------------------|--------|-------------|
 * | 1       | device_kv_open_recompute()   | [rows][kv_dim] per K and V, one layer reused    | pos                                       | activations | chapters/ch01-naive/naive.h |
 * | 2       | device_kv_open_contiguous()  | [layer][capacity][kv_dim] per K and V           | pos                                       | kv | chapters/ch02-kvcache/kvcache.h |
 * | 3       | device_kv_open_arena()       | [layer][arena rows][kv_dim] per K and V         | region_start[seq] + pos                   | kv | chapters/ch03-batching/batching.h |
 * | 4       | device_kv_open_paged()       | [n_blocks][n_layers][2][block_size][kv_dim]: the CPU pool's (block_pool.h) | row pos % bs of block table[seq][pos / bs] | kv (tables: kv_metadata) | chapters/ch04-paged/paged.h |
 *
 * Chapters 1 to 3 store K and V one layer at a time, `[layer][rows][kv_dim]`
 * (DeviceKvLayers, CUDA builds), one row per token slot, and differ only in which row
 * holds a token and how many rows are reserved; the store in which a
 * sequence's positions are consecutive rows from a first row
 * (DeviceRowStore, CUDA builds) serves all three. Chapter 4 keeps the block layout of
 * its CPU pool instead, so that a block is one contiguous run on both.
 *
 * Chapters 1 and 2 use their stores through run_single (a
 * ::DeviceKvOpenFn). Chapters 3 and 4 keep their allocator on the host
 * (regions, block pool, refcounts) exactly as on the CPU and tell the
 * device store where a sequence lives before a step; the copies their
 * allocator decides are repeated on the device as they are decided.
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
 * Frees a store (any kind: DeviceKv.close).
 * @param kv  an open or zeroed store
 */
void device_kv_close(DeviceKv *kv);

#endif
