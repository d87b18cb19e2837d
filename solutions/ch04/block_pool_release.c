/* Chapter 4 lab: block_pool_release(), one holder of a block lets go.
 * exercises/ch04/block_pool_release.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

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
