/* GENERATED from solutions/ch04/block_pool_alloc.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: block_pool_alloc(), a block off the free stack.
 * exercises/ch04/block_pool_alloc.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

int block_pool_alloc(BlockPool *p)
{
    // TODO(lab ch04.alloc): pop a block id off the free stack (top at n_free - 1), give it one holder, return it; -1 when none is free
    (void)p;
    LAB_TODO("take a block off the free stack and set its reference count to 1");
    return -1;
}
