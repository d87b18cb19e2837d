/* GENERATED from solutions/ch04/block_table_make_writable.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: block_table_make_writable(), copy-on-write of a shared block.
 * exercises/ch04/block_table_make_writable.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

int block_table_make_writable(BlockPool *p, BlockTable *t, int pos, int *copied)
{
    int logical = pos / p->shape.block_size;
    *copied = 0;
    // TODO(lab ch04.cow): if the block holding pos has other holders, allocate a fresh block, copy the shared one into it, let go of the shared one, and point the table at the copy
    (void)logical; (void)t;
    LAB_TODO("copy a shared block before it is written (copy-on-write)");
    return 0;
}
