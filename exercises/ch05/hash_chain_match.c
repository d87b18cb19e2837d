/* GENERATED from solutions/ch05/hash_chain_match.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
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
    // TODO(lab ch05.match): find blocks 0, 1, ... with hash_chain_find(), each with the registration number (entries[].id) of the block found before it, stopping at the first miss and before a block that holds the last position (it must be computed for its logits)
    (void)tokens; (void)n_tokens; (void)keys; (void)blocks; (void)bs;
    LAB_TODO("the longest run of leading blocks the cache holds");
    return n;
}
