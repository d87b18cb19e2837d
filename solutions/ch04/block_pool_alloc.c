/* Chapter 4 lab: block_pool_alloc(), a block off the free stack.
 * exercises/ch04/block_pool_alloc.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

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
