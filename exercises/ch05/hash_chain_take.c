/* GENERATED from solutions/ch05/hash_chain_take.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: hash_chain_take(), a request takes the blocks it hit.
 * exercises/ch05/hash_chain_take.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

void hash_chain_take(HashChain *h, BlockTable *t, const int *blocks, int n)
{
    for (int i = 0; i < n; i++) {
        int b = blocks[i];
        // TODO(lab ch05.take): a parked block (in_queue) leaves the LRU queue and gets its holder back (block_pool_hold_parked()); a block others hold gets one more (block_pool_retain())
        (void)h;
        LAB_TODO("take a cached block: out of the LRU queue if it is parked, one holder more");
        t->blocks[t->n_blocks++] = b;
    }
}
