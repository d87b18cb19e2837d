/* GENERATED from solutions/ch04/block_table_slot.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: block_table_slot(), where a position lives (the slot mapping).
 * exercises/ch04/block_table_slot.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "block_pool.h"
#include "lab.h"

int block_table_slot(const BlockTable *t, int pos, int block_size, int *offset)
{
    // TODO(lab ch04.slot): position pos is in logical block pos / block_size at row pos % block_size; the table names its physical block
    (void)pos; (void)block_size;
    LAB_TODO("map a position to (physical block, offset) through the block table");
    *offset = 0;
    return t->blocks[0];
}
