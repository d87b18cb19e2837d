/* GENERATED from solutions/ch05/radix_match.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: radix_match(), the longest cached path of a prompt, down
 * the radix tree's edges token by token. exercises/ch05/radix_match.c is
 * generated from this file by scripts/make-exercises.sh; `make lab CH=5`
 * grades yours. */
#include "lab.h"
#include "radix_tree.h"

int radix_match(const RadixTree *t, const int *tokens, int n_tokens, int *blocks)
{
    // TODO(lab ch05.radix_match): from the root, take the child whose edge starts with the next block's tokens, follow its blocks while they match; stop at a miss, halfway down an edge, or at (n_tokens - 1) / block_size blocks
    (void)t; (void)tokens; (void)n_tokens; (void)blocks;
    LAB_TODO("walk down the edges whose blocks hold the prompt's tokens");
    return 0;
}
