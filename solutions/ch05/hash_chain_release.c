/* Chapter 5 lab: hash_chain_release(), a table lets go of its blocks,
 * tail first, parking the cached ones.
 * exercises/ch05/hash_chain_release.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

void hash_chain_release(HashChain *h, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx)
{
    BlockPool *p = h->pool;
    // LAB BEGIN(ch05.release): from the last block to the first: a registered block (entries[].id != 0) with one holder left is parked (block_pool_park()) at the newest end of the queue; any other is released to the pool; call on_free for each block no table holds any more
    for (int i = t->n_blocks - 1; i >= 0; i--) { /* the tail queues first, so it is evicted first */
        int b = t->blocks[i];
        if (h->entries[b].id != 0 && p->ref_count[b] == 1) {
            block_pool_park(p, b);
            hash_chain_queue_push_newest(h, b);
            if (on_free)
                on_free(ctx, b);
        } else if (block_pool_release(p, b) == 0 && on_free) {
            on_free(ctx, b);
        }
    }
    // LAB STUB:
    // (void)p; (void)on_free; (void)ctx;
    // LAB_TODO("let go of the table's blocks, last first, parking the cached ones in the LRU queue");
    // LAB END
    t->n_blocks = 0;
}
