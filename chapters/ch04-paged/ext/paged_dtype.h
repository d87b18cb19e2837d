/**
 * @file paged_dtype.h
 * @brief Chapter 4 extension: the block pool with smaller entries
 *        (`--kv-dtype f16|bf16|int8|fp8-e4m3|fp8-e5m2`).
 *
 * **Adds** blocks whose rows hold K and V in a smaller element type
 * (common/cpu/kv_dtype.h), so that a block of the same tokens takes half
 * (f16, bf16) or about a quarter (int8, fp8) of f32's bytes, and the same
 * KV budget holds two to four times the tokens. A block keeps its rows in
 * the core's layout with rows of bytes:
 *
 *     block: [n_layers][2 (K, V)][block_size][row bytes]
 *     row:   [n_kv_heads][head_dim] elements, then (int8) [n_kv_heads] f32 scales
 *
 * so an int8 row's scales, one per (token, KV head), live in the block
 * beside its codes: copy-on-write (one memcpy of the block), swapping
 * (ext/swap.c copies whole blocks) and a cache above the pool (chapter 5)
 * move them with their rows without knowing they are there. The pool
 * counts them (BlockShape.scale_bytes), so the memory table's bytes per
 * token, bytes per block and number of blocks are the stored bytes.
 *
 * PagedAttention over such blocks, paged_attention_typed(), reads the
 * stored type directly: block by block through the table, the query's
 * head of each key row is turned into f32 where it lies and dotted at
 * once; the value heads of a block are turned into f32 a few rows at a
 * time (at most ::PAGED_DTYPE_ROWS, on the stack) and summed with
 * paged_accumulate_rows(). Nothing is gathered into an f32 copy of the
 * cache. Its arithmetic is paged_attention()'s in its order (scores in
 * position order, softmax, values summed in position order), so a
 * request's tokens are exactly those of chapter 2's `--kv-dtype` of the
 * same type: the same values stored, the same sums.
 *
 * int8 rows are written and read by the chapter's lab
 * (paged_int8_store_row(), paged_int8_load_head(), paged_int8_row_bytes());
 * the other types by common/cpu/kv_dtype.h's conversions.
 *
 * **Turned on by** `--kv-dtype` other than f32 on the CPU (with
 * `--device cuda` the device stores its own types: ext/device.c). Without
 * it PagedServer.dtype is NULL and the chapter is exactly its core.
 *
 * **Taught in** book/ch08-kv-dtypes.md.
 *
 * **Where the core calls it**: paged_open() calls paged_dtype_open(),
 * which fills in two hooks: `seam` (paged_server_seam(), the seam
 * paged_step() and ext/beam.c run the model with, then gives
 * paged_dtype_seam()'s) and `close` (paged_dtype_close()).
 * Chapter 6 reads one head of a stored row with paged_dtype_load_head().
 */
#ifndef KVLAB_CH04_PAGED_DTYPE_H
#define KVLAB_CH04_PAGED_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "kv_dtype.h"
#include "paged.h"

/** Value rows turned into f32 at a time inside a block (a 16 KiB stack buffer at head_dim 256). */
#define PAGED_DTYPE_ROWS 16

/** The typed pool's view of the server's store. */
struct PagedDtype {
    PagedKv *kv;      /**< the server's pool (storage [n_blocks][bytes_per_block]) and block tables */
    KvRowFormat row;  /**< one stored row: n_kv_heads heads of head_dim values */
    size_t row_bytes; /**< bytes of one stored row, scales included: BlockShape's kv_dim x elem_bytes + scale_bytes */
};

/**
 * Whether a run stores K/V in the pool in a type other than f32: a CPU
 * run with storage (not the simulator, not the device) and `--kv-dtype`
 * other than f32.
 * @param run  the run
 * @return 1 or 0
 */
int paged_dtype_wanted(const ServingRun *run);

/**
 * Opens the typed store over the server's pool (already made at the
 * stored size by pool.c) and sets PagedServer.dtype.
 * @param s    the server, its pool open
 * @param run  the run
 * @param err  receives the reason on failure (heads too wide: kv_row_format_init())
 * @return 0 on success, -1 on failure
 */
int paged_dtype_open(PagedServer *s, const ServingRun *run, Err *err);

/**
 * Frees what paged_dtype_open() allocated.
 * @param s  the server
 */
void paged_dtype_close(PagedServer *s);

/**
 * int8's bytes of one block slot (one token's K or V of one layer): one
 * byte per code and one f32 scale per KV head, the scales counted (the
 * lab, solutions/ch04/paged_int8_row_bytes.c).
 * @param n_heads   KV heads in the row
 * @param head_dim  values per head
 * @return n_heads x head_dim + n_heads x 4
 */
size_t paged_int8_row_bytes(int n_heads, int head_dim);

/**
 * Quantizes one row into its int8 block slot (the lab,
 * solutions/ch04/paged_int8_store_row.c): for each KV head, its scale is
 * its own largest magnitude over ::KV_INT8_MAX, each code is the value
 * over the scale rounded to nearest (ties to even) and saturated to
 * -127..127 (a NaN gives 0); the codes, [n_heads][head_dim], then the
 * scales, [n_heads] f32, after them. The same bytes as kv_row_store()'s
 * int8 row, so chapter 4's int8 tokens are chapter 2's.
 * @param slot      [paged_int8_row_bytes()] receives the row
 * @param x         [n_heads x head_dim] the row's f32 values
 * @param n_heads   KV heads in the row
 * @param head_dim  values per head
 */
void paged_int8_store_row(unsigned char *slot, const float *x, int n_heads, int head_dim);

/**
 * Reads one KV head of an int8 block slot back as f32 (the lab,
 * solutions/ch04/paged_int8_load_head.c): each code times the head's own
 * scale.
 * @param dst       [head_dim] receives the values
 * @param slot      a row stored by paged_int8_store_row()
 * @param head      the KV head
 * @param n_heads   KV heads in the row
 * @param head_dim  values per head
 */
void paged_int8_load_head(float *dst, const unsigned char *slot, int head, int n_heads, int head_dim);

/**
 * One stored row: K (@p which 0) or V (1) of position @p offset of a
 * block, in one layer.
 * @param d       the typed store
 * @param block   physical block
 * @param layer   layer index
 * @param which   0: keys, 1: values
 * @param offset  row inside the block, 0..block_size-1
 * @return [row_bytes] the row
 */
unsigned char *paged_dtype_row(const PagedDtype *d, int block, int layer, int which, int offset);

/**
 * The seam's store: one token's K and V of one layer, converted to the
 * pool's type (kv_row_store(): int8 computes each head's scale and keeps
 * it after the codes), into the slot its block table names.
 * @param ctx    a PagedDtype
 * @param layer  layer index
 * @param e      the token (e->seq: the request)
 * @param k      [kv_dim] key
 * @param v      [kv_dim] value
 */
void paged_dtype_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * PagedAttention over typed blocks: one query head over positions
 * 0..n_pos-1, reading each stored row where it lies in its block, in
 * paged_attention()'s arithmetic and order.
 * @param d        the typed store
 * @param t        the sequence's block table (covers n_pos positions)
 * @param layer    layer index
 * @param kv_head  the KV head this query head reads
 * @param q        [head_dim] query
 * @param n_pos    positions attended
 * @param out      [head_dim] receives the output
 * @param scores   [n_pos] scratch
 */
void paged_attention_typed(const PagedDtype *d, const BlockTable *t, int layer, int kv_head, const float *q,
                           int n_pos, float *out, float *scores);

/**
 * The K/V seam over the typed pool.
 * @param d  the typed store
 * @return store = paged_dtype_store, attend = paged_attention_typed() for the entry's query head
 */
KvSeam paged_dtype_seam(PagedDtype *d);

/**
 * The f32 values one head of a stored K and V row holds (chapter 6
 * gathers the rows a window shows this way).
 * @param d        the typed store
 * @param block    physical block
 * @param layer    layer index
 * @param offset   row inside the block
 * @param kv_head  the head
 * @param k        [head_dim] receives the key's values
 * @param v        [head_dim] receives the value's values
 */
void paged_dtype_load_head(const PagedDtype *d, int block, int layer, int offset, int kv_head, float *k, float *v);

#endif
