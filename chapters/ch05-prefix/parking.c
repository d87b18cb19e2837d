/* Chapter 5: parking, the third state of a pool block (see parking.h).
 * These three keep the pool's books whole: every block is held, parked,
 * or on the free stack; a parked block leaves parking the way any block
 * is taken or let go, through block_pool_retain() and block_pool_release(). */
#include "parking.h"

void block_pool_park(BlockPool *p, int block)
{
    p->ref_count[block] = 0;
    p->n_parked++;
}

void block_pool_hold_parked(BlockPool *p, int block)
{
    p->n_parked--;
    block_pool_retain(p, block); /* from no holder to one */
}

void block_pool_free_parked(BlockPool *p, int block)
{
    /* Held for a moment, then let go: back on the free stack the way any
     * block goes (block_pool_release()). */
    block_pool_hold_parked(p, block);
    block_pool_release(p, block);
}
