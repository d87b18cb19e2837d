/* Chapter 5: parking, the third state of a pool block (see parking.h). */
#include "parking.h"

void block_pool_park(BlockPool *p, int block)
{
    p->ref_count[block] = 0;
    p->n_parked++;
}

void block_pool_hold_parked(BlockPool *p, int block)
{
    p->ref_count[block] = 1;
    p->n_parked--;
}

void block_pool_free_parked(BlockPool *p, int block)
{
    p->free_stack[p->n_free++] = block;
    p->n_parked--;
}
