/**
 * @file block_pool.h
 * @brief Chapter 4's allocator: K/V memory cut into fixed-size blocks,
 *        handed out from one pool, found through a block table per sequence.
 *
 * This is virtual memory for the KV cache. A process sees a contiguous
 * address space, but its pages live wherever the kernel found a free frame,
 * and a page table maps one to the other. Here a sequence sees positions
 * 0, 1, 2, ..., but its K/V live in whatever blocks the pool had free, and
 * its ::BlockTable maps them: position p sits in logical block
 * p / block_size, which is physical block table[p / block_size], at offset
 * p % block_size. Blocks are allocated one at a time as the sequence grows,
 * so the only memory a sequence holds and does not use is the unfilled tail
 * of its last block.
 *
 * Like pages shared after fork(), a block can belong to several sequences at
 * once (the samples of one prompt share the prompt's blocks). Each block has
 * a reference count; a shared block is copied only when one of its holders
 * writes into it (copy-on-write), and returns to the free list when its last
 * holder lets go.
 *
 * **Layout.** One block holds block_size tokens of every layer, K and V:
 *
 *     storage: [n_blocks][n_layers][2 (K, V)][block_size][kv_dim] floats
 *
 * so a block is one contiguous piece of memory (copy-on-write is one memcpy,
 * and freeing a block frees it for every layer at once), and inside a block
 * the keys of one layer are a small contiguous [block_size][kv_dim] matrix,
 * laid out exactly like a slice of chapter 2's contiguous cache.
 *
 * With `--kv-dtype` other than f32 (ext/dtype.h) the pool holds the same
 * rows in a smaller element type, each row followed by its scales (int8):
 *
 *     storage: [n_blocks][n_layers][2 (K, V)][block_size][row bytes]
 *
 * The pool itself only counts and copies bytes (block_shape_bytes(),
 * block_pool_copy()); block_pool_keys() and block_pool_values() below
 * read f32 rows.
 *
 * The pool knows shapes, never weights: with storage off (accounting-only
 * mode) it keeps every book and allocates no K/V bytes, which is how the
 * capacity simulator runs it at 7B and 13B scale.
 *
 * Memory: the storage is charged to kv; the free list, the reference counts
 * and the block tables to kv_metadata.
 */
#ifndef KVLAB_CH04_BLOCK_POOL_H
#define KVLAB_CH04_BLOCK_POOL_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"

/** Largest block size the chapter accepts (tokens). */
#define BLOCK_SIZE_MAX 256

/**
 * A table entry that names no block: a logical block whose positions were
 * all dropped (a later chapter's sliding window gives such blocks back to
 * the pool). Release, fork and the accounting skip it; chapter 4 itself
 * never makes one.
 */
#define BLOCK_HOLE (-1)

/** What one block holds. */
typedef struct {
    int block_size;    /**< tokens per block, a power of two from 1 to BLOCK_SIZE_MAX */
    int n_layers;      /**< layers of the model */
    int kv_dim;        /**< width of one token's K (or V) row: n_kv_heads * head_dim */
    /**
     * Bytes per stored element: 4 (f32), 2 (f16, bf16), 1 (int8, fp8;
     * `--kv-dtype`, ext/dtype.h). An int, as the other sizes are.
     */
    int elem_bytes;
    /**
     * Bytes stored after each row's kv_dim elements: int8's scales, one f32
     * per KV head (common/cpu/kv_dtype.h); 0 for the other types.
     */
    int scale_bytes;
} BlockShape;

/** The pool: every block of the KV budget, free or held. */
typedef struct {
    BlockShape shape;        /**< what one block holds */
    int n_blocks;            /**< blocks in the pool */
    size_t bytes_per_block;  /**< block_size x n_layers x 2 x (kv_dim x elem_bytes + scale_bytes) */
    size_t floats_per_block; /**< n_layers x 2 x block_size x kv_dim */
    int *free_stack;         /**< [n_blocks] ids of the free blocks; the next one handed out is at n_free - 1 */
    int n_free;              /**< free blocks on the stack */
    /**
     * Free blocks that are not on the free stack: no table holds them, but
     * a cache above the pool (ext/paged_cache.h) keeps them for the K/V
     * they still hold. They count as free (block_pool_available()). Always
     * 0 in chapter 4, where the pool is exactly its free stack; chapter 5
     * parks blocks here.
     */
    int n_parked;
    int *ref_count;          /**< [n_blocks] block tables holding each block; 0 = free */
    float *storage;          /**< [n_blocks][n_layers][2][block_size][kv_dim] (f32; other types: [n_blocks][bytes_per_block] bytes), or NULL (accounting only) */
    /**
     * Told of every block_pool_copy(), with or without storage (NULL:
     * nobody listens): a device store repeats copy-on-write this way
     * (paged_device_open()).
     */
    void (*on_copy)(void *ctx, int dst, int src);
    void *on_copy_ctx;       /**< passed to on_copy */
} BlockPool;

/**
 * One sequence's page table: its logical blocks in order, each naming the
 * physical block that holds it.
 */
typedef struct {
    int *blocks;  /**< [capacity] physical block id of logical block i */
    int n_blocks; /**< logical blocks held */
    int capacity; /**< most logical blocks: ceil(seq_len / block_size) */
} BlockTable;

/** The block tables of every sequence of a run, in one allocation. */
typedef struct {
    BlockTable *tables; /**< [count] */
    int *ids;           /**< [count][capacity] the tables' entries */
    int count;          /**< sequences */
    int capacity;       /**< entries per table */
} BlockTables;

/**
 * Bytes one block occupies: block_size x n_layers x 2 x (kv_dim x
 * elem_bytes + scale_bytes): the stored bytes, scales included.
 * @param shape  what a block holds
 * @return bytes per block
 */
size_t block_shape_bytes(const BlockShape *shape);

/**
 * Blocks needed to hold @p n_tokens positions: ceil(n_tokens / block_size).
 * @param n_tokens    positions (0 or more)
 * @param block_size  tokens per block
 * @return blocks
 */
int block_count_for_tokens(int n_tokens, int block_size);

/**
 * Creates a pool of @p n_blocks free blocks.
 * @param p             receives the pool
 * @param shape         what a block holds (block_size a power of two <= BLOCK_SIZE_MAX)
 * @param n_blocks      blocks, at least 1
 * @param with_storage  1: allocate the K/V bytes (any element type: the pool
 *                      only counts and copies them);
 *                      0: accounting only, no K/V bytes
 * @param err           receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int block_pool_init(BlockPool *p, const BlockShape *shape, int n_blocks, int with_storage, Err *err);

/**
 * Frees the pool's memory.
 * @param p  an initialised or zeroed pool
 */
void block_pool_free(BlockPool *p);

/**
 * Takes a block off the free list; its reference count becomes 1.
 * @param p  the pool
 * @return the block's id, or -1 when no block is free
 */
int block_pool_alloc(BlockPool *p);

/**
 * Adds a holder to a held block (a fork).
 * @param p      the pool
 * @param block  a block with reference count >= 1
 */
void block_pool_retain(BlockPool *p, int block);

/**
 * Drops one holder of a block; the block goes back to the free list when
 * its last holder lets go.
 * @param p      the pool
 * @param block  a held block
 * @return holders left (0: the block is free again), or -1 when the block
 *         was already free (a double free: nothing is changed)
 */
int block_pool_release(BlockPool *p, int block);

/**
 * Copies every layer's K and V of block @p src into block @p dst (no-op in
 * accounting-only mode), and tells the pool's on_copy listener.
 * @param p    the pool
 * @param dst  destination block
 * @param src  source block
 */
void block_pool_copy(BlockPool *p, int dst, int src);

/**
 * The keys of one layer inside one block (an f32 pool).
 * @param p      a pool with storage
 * @param block  block id
 * @param layer  layer index
 * @return [block_size][kv_dim] key rows
 */
static inline float *block_pool_keys(const BlockPool *p, int block, int layer)
{
    /* Inline: PagedAttention asks once per block, for every head of every
     * layer of every token; at small shapes a block is little work, and a
     * call would be a visible part of it. */
    size_t rows = (size_t)p->shape.block_size * (size_t)p->shape.kv_dim; /* one [block_size][kv_dim] matrix */
    return p->storage + (size_t)block * p->floats_per_block + (size_t)layer * 2u * rows;
}

/**
 * The values of one layer inside one block (an f32 pool).
 * @param p      a pool with storage
 * @param block  block id
 * @param layer  layer index
 * @return [block_size][kv_dim] value rows
 */
static inline float *block_pool_values(const BlockPool *p, int block, int layer)
{
    size_t rows = (size_t)p->shape.block_size * (size_t)p->shape.kv_dim;
    return p->storage + (size_t)block * p->floats_per_block + ((size_t)layer * 2u + 1u) * rows;
}

/**
 * Blocks held by at least one table.
 * @param p  the pool
 * @return n_blocks - n_free - n_parked
 */
int block_pool_used(const BlockPool *p);

/**
 * Blocks that are free: on the free stack, or kept off it by a cache
 * above the pool until it is asked for the block (BlockPool.n_parked).
 * @param p  the pool
 * @return n_free + n_parked
 */
int block_pool_available(const BlockPool *p);

/**
 * Checks the pool's books against the block tables, block by block, and
 * says which invariant broke on which block. The invariants:
 *
 *  1. every block is free (on the free stack, once), held (reference count
 *     above 0) or cached (parked by a cache above the pool: no holder, off
 *     the stack), and exactly one of them;
 *  2. each block's reference count equals the number of table entries
 *     that name it (BLOCK_HOLE entries name none);
 *  3. free + held + cached == the pool: the blocks found cached are exactly
 *     BlockPool.n_parked (more: a block lost; fewer: one counted twice as
 *     free);
 *  4. with @p all_done, nothing is held.
 *
 * Call it after any step (the lab tests do, after every one); it
 * allocates two arrays of n_blocks for the count, outside the ledger.
 * @param p         the pool
 * @param bt        every table that may hold a block of @p p (NULL: none)
 * @param all_done  1 when every request has finished
 * @param log       receives one line, "paged_check_invariants: broken:
 *                  INVARIANT, at block B: DETAILS", for the first broken
 *                  invariant (NULL: silent)
 * @return 0 when all hold, -1 otherwise
 */
int paged_check_invariants(const BlockPool *p, const BlockTables *bt, int all_done, FILE *log);

/**
 * Allocates @p count empty tables of @p capacity entries (charged to
 * kv_metadata).
 * @param bt        receives the tables
 * @param count     sequences
 * @param capacity  entries per table (ceil(seq_len / block_size))
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when out of memory
 */
int block_tables_init(BlockTables *bt, int count, int capacity, Err *err);

/**
 * Frees the tables (not the blocks they name: release those first).
 * @param bt  initialised or zeroed tables
 */
void block_tables_free(BlockTables *bt);

/**
 * Bytes the tables occupy (what kv_metadata is charged for them).
 * @param count     sequences
 * @param capacity  entries per table
 * @return bytes
 */
size_t block_tables_bytes(int count, int capacity);

/**
 * The slot mapping: where position @p pos of a sequence lives.
 * @param t           the sequence's table; must cover @p pos
 * @param pos         position, from 0
 * @param block_size  tokens per block
 * @param offset      receives the position's row inside the block, 0..block_size-1
 * @return the physical block holding @p pos
 */
int block_table_slot(const BlockTable *t, int pos, int block_size, int *offset);

/**
 * Free blocks a sequence needs before it can write position @p pos: new
 * blocks when @p pos lies past its last block, plus one when the block
 * holding @p pos is shared (copy-on-write).
 * @param p    the pool
 * @param t    the sequence's table
 * @param pos  the position to be written
 * @return blocks needed (0 when the write can happen in place)
 */
int block_table_blocks_to_write(const BlockPool *p, const BlockTable *t, int pos);

/**
 * Grows a table to cover positions 0..n_tokens-1, all or nothing.
 * @param p         the pool
 * @param t         the table
 * @param n_tokens  positions to cover (at most capacity x block_size)
 * @return 0 on success, -1 when too few blocks are free (nothing changed)
 */
int block_table_grow(BlockPool *p, BlockTable *t, int n_tokens);

/**
 * Copy-on-write: makes the block holding position @p pos private to this
 * table before it is written. A block that only this table holds is left
 * alone; a shared one is replaced by a fresh copy, and the table lets go of
 * the original.
 * @param p       the pool
 * @param t       the table; must cover @p pos
 * @param pos     the position about to be written
 * @param copied  receives 1 when a copy was made, else 0
 * @return 0 on success, -1 when a copy is needed and no block is free
 */
int block_table_make_writable(BlockPool *p, BlockTable *t, int pos, int *copied);

/**
 * Fork: @p child gets the same blocks as @p parent, each one more holder.
 * @param p       the pool
 * @param parent  the table to share
 * @param child   an empty table with the same capacity
 */
void block_table_fork(BlockPool *p, const BlockTable *parent, BlockTable *child);

/**
 * Lets go of every block of a table; the table becomes empty.
 * @param p        the pool
 * @param t        the table
 * @param on_free  called with each block that became free (may be NULL)
 * @param ctx      passed to @p on_free
 * @return 0, or -1 when a block was already free (a double free; the
 *         table is emptied anyway)
 */
int block_table_release(BlockPool *p, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx);

#endif
