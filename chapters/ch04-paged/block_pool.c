/* Chapter 4 lab: the block allocator.
 *
 * The exercise version of this file (exercises/ch04/block_pool.c) is
 * generated from this one by scripts/make-exercises.sh: each region between
 * LAB BEGIN and LAB END is replaced by its stub. Run `make lab CH=4` to
 * test yours. */
#include "block_pool.h"

#include <string.h>

#include "lab.h"
#include "mem.h"

size_t block_shape_bytes(const BlockShape *s)
{
    return (size_t)s->block_size * (size_t)s->n_layers * 2u * (size_t)s->kv_dim * s->elem_bytes;
}

int block_count_for_tokens(int n_tokens, int block_size)
{
    return (n_tokens + block_size - 1) / block_size;
}

static int valid_shape(const BlockShape *s, int with_storage, Err *err)
{
    int bs = s->block_size;
    if (bs < 1 || bs > BLOCK_SIZE_MAX || (bs & (bs - 1)))
        return err_set(err, "block size %d is not a power of two from 1 to %d", bs, BLOCK_SIZE_MAX);
    if (s->n_layers < 1 || s->kv_dim < 1 || s->elem_bytes < 1)
        return err_set(err, "block shape needs layers, kv_dim and element size > 0");
    if (with_storage && s->elem_bytes != sizeof(float))
        return err_set(err, "K/V storage is f32 on the CPU; %zu-byte elements are for accounting only",
                       s->elem_bytes);
    return 0;
}

int block_pool_init(BlockPool *p, const BlockShape *shape, int n_blocks, int with_storage, Err *err)
{
    memset(p, 0, sizeof *p);
    if (valid_shape(shape, with_storage, err))
        return -1;
    if (n_blocks < 1)
        return err_set(err, "a block pool needs at least one block");
    p->shape = *shape;
    p->n_blocks = n_blocks;
    p->bytes_per_block = block_shape_bytes(shape);
    p->floats_per_block = (size_t)shape->n_layers * 2u * (size_t)shape->block_size * (size_t)shape->kv_dim;
    p->free_stack = mem_alloc_array(MEM_KV_METADATA, (size_t)n_blocks, sizeof(int));
    p->ref_count = mem_alloc_array(MEM_KV_METADATA, (size_t)n_blocks, sizeof(int));
    if (with_storage)
        p->storage = mem_alloc_array(MEM_KV, (size_t)n_blocks, p->floats_per_block * sizeof(float));
    if (!p->free_stack || !p->ref_count || (with_storage && !p->storage)) {
        block_pool_free(p);
        return err_set(err, "out of memory for a pool of %d blocks", n_blocks);
    }
    /* Stacked so that block 0 is handed out first: runs read the same on
     * every machine, and a fresh pool fills from the bottom. */
    for (int i = 0; i < n_blocks; i++)
        p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void block_pool_free(BlockPool *p)
{
    mem_free(p->free_stack);
    mem_free(p->ref_count);
    mem_free(p->storage);
    memset(p, 0, sizeof *p);
}

int block_pool_alloc(BlockPool *p)
{
    // LAB BEGIN(ch04.alloc): pop a block id off the free stack (top at n_free - 1), give it one holder, return it; -1 when none is free
    if (p->n_free == 0)
        return -1;
    int block = p->free_stack[--p->n_free];
    p->ref_count[block] = 1;
    return block;
    // LAB STUB:
    // (void)p;
    // LAB_TODO("take a block off the free stack and set its reference count to 1");
    // return -1;
    // LAB END
}

void block_pool_retain(BlockPool *p, int block)
{
    p->ref_count[block]++;
}

int block_pool_release(BlockPool *p, int block)
{
    // LAB BEGIN(ch04.release): drop one holder; when none is left, push the block back on the free stack; a block with no holder is a double free (-1)
    if (p->ref_count[block] <= 0)
        return -1;
    if (--p->ref_count[block] == 0)
        p->free_stack[p->n_free++] = block;
    return p->ref_count[block];
    // LAB STUB:
    // (void)p; (void)block;
    // LAB_TODO("decrement the reference count and return the block to the free stack when it reaches 0");
    // return 1;
    // LAB END
}

void block_pool_copy(BlockPool *p, int dst, int src)
{
    if (p->on_copy)
        p->on_copy(p->on_copy_ctx, dst, src); /* the device's blocks are copied too */
    if (!p->storage)
        return;
    memcpy(p->storage + (size_t)dst * p->floats_per_block, p->storage + (size_t)src * p->floats_per_block,
           p->floats_per_block * sizeof(float));
}

float *block_pool_keys(const BlockPool *p, int block, int layer)
{
    size_t rows = (size_t)p->shape.block_size * (size_t)p->shape.kv_dim; /* one [block_size][kv_dim] matrix */
    return p->storage + (size_t)block * p->floats_per_block + (size_t)layer * 2u * rows;
}

float *block_pool_values(const BlockPool *p, int block, int layer)
{
    size_t rows = (size_t)p->shape.block_size * (size_t)p->shape.kv_dim;
    return p->storage + (size_t)block * p->floats_per_block + ((size_t)layer * 2u + 1u) * rows;
}

int block_pool_used(const BlockPool *p)
{
    return p->n_blocks - p->n_free;
}

/* ------------------------------------------------------------ block tables */

size_t block_tables_bytes(int count, int capacity)
{
    return (size_t)count * sizeof(BlockTable) + (size_t)count * (size_t)capacity * sizeof(int);
}

int block_tables_init(BlockTables *bt, int count, int capacity, Err *err)
{
    memset(bt, 0, sizeof *bt);
    bt->tables = mem_alloc_array(MEM_KV_METADATA, (size_t)count, sizeof(BlockTable));
    bt->ids = mem_alloc_array(MEM_KV_METADATA, (size_t)count * (size_t)capacity, sizeof(int));
    if (!bt->tables || !bt->ids) {
        block_tables_free(bt);
        return err_set(err, "out of memory for %d block tables of %d entries", count, capacity);
    }
    bt->count = count;
    bt->capacity = capacity;
    for (int i = 0; i < count; i++)
        bt->tables[i] = (BlockTable){.blocks = bt->ids + (size_t)i * capacity, .n_blocks = 0, .capacity = capacity};
    return 0;
}

void block_tables_free(BlockTables *bt)
{
    mem_free(bt->tables);
    mem_free(bt->ids);
    memset(bt, 0, sizeof *bt);
}

int block_table_slot(const BlockTable *t, int pos, int block_size, int *offset)
{
    // LAB BEGIN(ch04.slot): position pos is in logical block pos / block_size at row pos % block_size; the table names its physical block
    *offset = pos % block_size;
    return t->blocks[pos / block_size];
    // LAB STUB:
    // (void)pos; (void)block_size;
    // LAB_TODO("map a position to (physical block, offset) through the block table");
    // *offset = 0;
    // return t->blocks[0];
    // LAB END
}

int block_table_blocks_to_write(const BlockPool *p, const BlockTable *t, int pos)
{
    int logical = pos / p->shape.block_size;
    if (logical >= t->n_blocks)
        return logical + 1 - t->n_blocks;
    return p->ref_count[t->blocks[logical]] > 1;
}

int block_table_grow(BlockPool *p, BlockTable *t, int n_tokens)
{
    int want = block_count_for_tokens(n_tokens, p->shape.block_size);
    if (want <= t->n_blocks)
        return 0;
    if (want > t->capacity || want - t->n_blocks > p->n_free)
        return -1;
    while (t->n_blocks < want) {
        int block = block_pool_alloc(p);
        if (block < 0) /* only an unfinished lab allocator gets here */
            return -1;
        t->blocks[t->n_blocks++] = block;
    }
    return 0;
}

int block_table_make_writable(BlockPool *p, BlockTable *t, int pos, int *copied)
{
    int logical = pos / p->shape.block_size;
    *copied = 0;
    // LAB BEGIN(ch04.cow): if the block holding pos has other holders, allocate a fresh block, copy the shared one into it, let go of the shared one, and point the table at the copy
    int shared = t->blocks[logical];
    if (p->ref_count[shared] <= 1)
        return 0; /* ours alone: write in place */
    int fresh = block_pool_alloc(p);
    if (fresh < 0)
        return -1;
    block_pool_copy(p, fresh, shared);
    block_pool_release(p, shared); /* others still hold it, so it stays allocated */
    t->blocks[logical] = fresh;
    *copied = 1;
    return 0;
    // LAB STUB:
    // (void)logical; (void)t;
    // LAB_TODO("copy a shared block before it is written (copy-on-write)");
    // return 0;
    // LAB END
}

void block_table_fork(BlockPool *p, const BlockTable *parent, BlockTable *child)
{
    for (int i = 0; i < parent->n_blocks; i++) {
        child->blocks[i] = parent->blocks[i];
        block_pool_retain(p, parent->blocks[i]);
    }
    child->n_blocks = parent->n_blocks;
}

int block_table_release(BlockPool *p, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx)
{
    int status = 0;
    for (int i = 0; i < t->n_blocks; i++) {
        int left = block_pool_release(p, t->blocks[i]);
        if (left < 0)
            status = -1;
        else if (left == 0 && on_free)
            on_free(ctx, t->blocks[i]);
    }
    t->n_blocks = 0;
    return status;
}
