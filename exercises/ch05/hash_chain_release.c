/* GENERATED from solutions/ch05/hash_chain_release.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: hash_chain_release(), a table lets go of its blocks,
 * tail first, parking the cached ones.
 * exercises/ch05/hash_chain_release.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

void hash_chain_release(HashChain *h, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx)
{
    BlockPool *p = h->pool;
    // TODO(lab ch05.release): from the last block to the first: a registered block (entries[].id != 0) with one holder left is parked (block_pool_park()) at the newest end of the queue; any other is released to the pool; call on_free for each block no table holds any more
    (void)p; (void)on_free; (void)ctx;
    LAB_TODO("let go of the table's blocks, last first, parking the cached ones in the LRU queue");
    t->n_blocks = 0;
}
