/* Chapter 5 lab: radix_match(), the longest cached path of a prompt, down
 * the radix tree's edges token by token. exercises/ch05/radix_match.c is
 * generated from this file by scripts/make-exercises.sh; `make lab CH=5`
 * grades yours. */
#include "lab.h"
#include "radix_tree.h"

int radix_match(const RadixTree *t, const int *tokens, int n_tokens, int *blocks)
{
    // LAB BEGIN(ch05.radix_match): from the root, take the child whose edge starts with the next block's tokens, follow its blocks while they match; stop at a miss, halfway down an edge, or at (n_tokens - 1) / block_size blocks
    /* Whole blocks before the last position: that one is always computed. */
    const int room = (n_tokens - 1) / t->block_size;
    const size_t bs = (size_t)t->block_size;
    int n = 0, node = RADIX_ROOT;
    while (n < room) {
        node = radix_child_starting_with(t, node, tokens + (size_t)n * bs);
        if (node < 0)
            break;
        int on_edge = 0; /* blocks of this edge the sequence follows */
        for (int b = t->nodes[node].first_block; b >= 0 && n < room; b = t->block_next[b]) {
            if (!radix_same_tokens(t, b, tokens + (size_t)n * bs))
                break;
            blocks[n++] = b;
            on_edge++;
        }
        if (on_edge < t->nodes[node].n_blocks)
            break; /* the sequence leaves this edge halfway: no child can follow */
    }
    return n;
    // LAB STUB:
    // (void)t; (void)tokens; (void)n_tokens; (void)blocks;
    // LAB_TODO("walk down the edges whose blocks hold the prompt's tokens");
    // return 0;
    // LAB END
}
