/* GENERATED from solutions/ch05/hash_chain_evict.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: hash_chain_evict(), the least recently freed cached
 * block goes back to the pool.
 * exercises/ch05/hash_chain_evict.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

int hash_chain_evict(HashChain *h)
{
    // TODO(lab ch05.evict): take the oldest block of the LRU queue (-1 when it is empty) out of the queue, unregister it, and give it back to the pool's free stack (block_pool_free_parked()); count the eviction
    (void)h;
    LAB_TODO("evict the least recently freed cached block");
    return -1;
}
