/* Chapter 4 lab: block_table_make_writable(), copy-on-write of a shared block.
 * exercises/ch04/block_table_make_writable.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

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
