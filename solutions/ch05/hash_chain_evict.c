/* Chapter 5 lab: hash_chain_evict(), the least recently freed cached
 * block goes back to the pool.
 * exercises/ch05/hash_chain_evict.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

int hash_chain_evict(HashChain *h)
{
    // LAB BEGIN(ch05.evict): take the oldest block of the LRU queue (-1 when it is empty) out of the queue, unregister it, and give it back to the pool's free stack (block_pool_free_parked()); count the eviction
    int b = h->oldest;
    if (b < 0)
        return -1;
    hash_chain_queue_remove(h, b);
    hash_chain_unregister(h, b); /* its K/V are about to be overwritten: no lookup may find it */
    block_pool_free_parked(h->pool, b);
    h->evictions++;
    return b;
    // LAB STUB:
    // (void)h;
    // LAB_TODO("evict the least recently freed cached block");
    // return -1;
    // LAB END
}
