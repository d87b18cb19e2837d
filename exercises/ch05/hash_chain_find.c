/* GENERATED from solutions/ch05/hash_chain_find.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: hash_chain_find(), one registered block by its key, its
 * chain and its tokens.
 * exercises/ch05/hash_chain_find.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include <string.h>

#include "hash_chain.h"
#include "lab.h"

int hash_chain_find(const HashChain *h, uint64_t key, long parent_id, const int *tokens)
{
    int first = h->buckets[key & (uint64_t)(h->n_buckets - 1)];
    // TODO(lab ch05.find): walk the bucket's chain from `first` (entries[b].next); accept a block only when its key, its parent_id and its token ids (hash_chain_tokens(), block_size of them) all agree
    (void)first; (void)parent_id; (void)tokens;
    LAB_TODO("find the block whose key, chain and tokens all agree");
    return -1;
}
