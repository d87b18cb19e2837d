/* Chapter 5 lab: hash_chain_match(), the longest cached run of a
 * sequence's leading blocks.
 * exercises/ch05/hash_chain_match.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "hash_chain.h"
#include "lab.h"

int hash_chain_match(const HashChain *h, const int *tokens, int n_tokens, const uint64_t *keys, int *blocks)
{
    const int bs = h->block_size;
    int n = 0;
    // LAB BEGIN(ch05.match): find blocks 0, 1, ... with hash_chain_find(), each with the registration number (entries[].id) of the block found before it, stopping at the first miss and before a block that holds the last position (it must be computed for its logits)
    int limit = (n_tokens - 1) / bs;
    long parent = HASH_CHAIN_ROOT_ID;
    while (n < limit) {
        int b = hash_chain_find(h, keys[n], parent, tokens + (size_t)n * (size_t)bs);
        if (b < 0)
            break; /* a later block may be cached too, but its K/V belong to another prefix */
        blocks[n++] = b;
        parent = h->entries[b].id;
    }
    // LAB STUB:
    // (void)tokens; (void)n_tokens; (void)keys; (void)blocks; (void)bs;
    // LAB_TODO("the longest run of leading blocks the cache holds");
    // LAB END
    return n;
}
