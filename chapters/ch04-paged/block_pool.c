/* Chapter 4: the block pool and the block tables around the lab's
 * block_pool_alloc(), block_pool_release(), block_table_slot() and
 * block_table_make_writable() (solutions/ch04/). */
#include "block_pool.h"

#include <string.h>

#include "mem.h"

size_t block_shape_bytes(const BlockShape *s)
{
    size_t row = (size_t)s->kv_dim * (size_t)s->elem_bytes + (size_t)s->scale_bytes; /* one stored row */
    return (size_t)s->block_size * (size_t)s->n_layers * 2u * row;
}

int block_count_for_tokens(int n_tokens, int block_size)
{
    return (n_tokens + block_size - 1) / block_size;
}

static int valid_shape(const BlockShape *s, Err *err)
{
    int bs = s->block_size;
    if (bs < 1 || bs > BLOCK_SIZE_MAX || (bs & (bs - 1)))
        return err_set(err, "block size %d is not a power of two from 1 to %d", bs, BLOCK_SIZE_MAX);
    if (s->n_layers < 1 || s->kv_dim < 1 || s->elem_bytes < 1 || s->scale_bytes < 0)
        return err_set(err, "block shape needs layers, kv_dim and element size > 0");
    return 0;
}

int block_pool_init(BlockPool *p, const BlockShape *shape, int n_blocks, int with_storage, Err *err)
{
    memset(p, 0, sizeof *p);
    if (valid_shape(shape, err))
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
        p->storage = mem_alloc_array(MEM_KV, (size_t)n_blocks, p->bytes_per_block); /* f32: floats_per_block floats */
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

void block_pool_retain(BlockPool *p, int block)
{
    p->ref_count[block]++;
}

void block_pool_copy(BlockPool *p, int dst, int src)
{
    if (p->on_copy)
        p->on_copy(p->on_copy_ctx, dst, src); /* the device's blocks are copied too */
    if (!p->storage)
        return;
    unsigned char *bytes = (unsigned char *)p->storage; /* [n_blocks][bytes_per_block], whatever the element type */
    memcpy(bytes + (size_t)dst * p->bytes_per_block, bytes + (size_t)src * p->bytes_per_block, p->bytes_per_block);
}

int block_pool_used(const BlockPool *p)
{
    return p->n_blocks - p->n_free - p->n_parked;
}

int block_pool_available(const BlockPool *p)
{
    return p->n_free + p->n_parked;
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

void block_table_fork(BlockPool *p, const BlockTable *parent, BlockTable *child)
{
    for (int i = 0; i < parent->n_blocks; i++) {
        child->blocks[i] = parent->blocks[i];
        if (parent->blocks[i] != BLOCK_HOLE)
            block_pool_retain(p, parent->blocks[i]);
    }
    child->n_blocks = parent->n_blocks;
}

int block_table_release(BlockPool *p, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx)
{
    int status = 0;
    for (int i = 0; i < t->n_blocks; i++) {
        if (t->blocks[i] == BLOCK_HOLE)
            continue;
        int left = block_pool_release(p, t->blocks[i]);
        if (left < 0)
            status = -1;
        else if (left == 0 && on_free)
            on_free(ctx, t->blocks[i]);
    }
    t->n_blocks = 0;
    return status;
}
