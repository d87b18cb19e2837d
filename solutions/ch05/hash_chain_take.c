/* Chapter 5 lab: hash_chain_take(), a request takes the blocks it hit.
 * exercises/ch05/hash_chain_take.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

void hash_chain_take(HashChain *h, BlockTable *t, const int *blocks, int n)
{
    for (int i = 0; i < n; i++) {
        int b = blocks[i];
        // LAB BEGIN(ch05.take): a parked block (in_queue) leaves the LRU queue and gets its holder back (block_pool_hold_parked()); a block others hold gets one more (block_pool_retain())
        if (h->entries[b].in_queue) {
            hash_chain_queue_remove(h, b); /* in use again: it must never be evicted now */
            block_pool_hold_parked(h->pool, b);
        } else {
            block_pool_retain(h->pool, b);
        }
        // LAB STUB:
        // (void)h;
        // LAB_TODO("take a cached block: out of the LRU queue if it is parked, one holder more");
        // LAB END
        t->blocks[t->n_blocks++] = b;
    }
}
