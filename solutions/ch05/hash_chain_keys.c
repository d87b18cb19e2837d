/* Chapter 5 lab: hash_chain_keys(), the chained keys of a sequence's full
 * blocks.
 * exercises/ch05/hash_chain_keys.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

int hash_chain_keys(const int *tokens, int n_tokens, int block_size, uint64_t *keys)
{
    int n_full = n_tokens / block_size; /* a partly filled last block has no key */
    // LAB BEGIN(ch05.keys): key[i] = hash_block_key(key of block i - 1, or HASH_CHAIN_ROOT_KEY for block 0, the block_size tokens of block i)
    uint64_t parent = HASH_CHAIN_ROOT_KEY;
    for (int i = 0; i < n_full; i++) {
        keys[i] = hash_block_key(parent, tokens + (size_t)i * (size_t)block_size, block_size);
        parent = keys[i]; /* the next block's key depends on every token before it */
    }
    // LAB STUB:
    // (void)tokens; (void)keys;
    // LAB_TODO("the chained keys of the full blocks");
    // LAB END
    return n_full;
}
