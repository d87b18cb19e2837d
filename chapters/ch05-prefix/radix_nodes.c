/* Chapter 5: the radix tree's smallest pieces, which the lab's
 * radix_match() and radix_split() (solutions/ch05/) and radix_tree.c
 * build on: a block's tokens compared, a child found by its first block, a
 * node taken from the free list. Nothing here calls the lab, so the
 * chapter's files call each other in no cycle. See radix_tree.h. */
#include "radix_tree.h"

#include <string.h>

int radix_same_tokens(const RadixTree *t, int block, const int *tokens)
{
    return memcmp(hash_chain_tokens(&t->blocks, block), tokens, (size_t)t->block_size * sizeof(int)) == 0;
}

int radix_child_starting_with(const RadixTree *t, int node, const int *tokens)
{
    for (int c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
        if (radix_same_tokens(t, t->nodes[c].first_block, tokens))
            return c;
    return -1;
}

int radix_new_node(RadixTree *t, int parent)
{
    int n = t->free_nodes;
    t->free_nodes = t->nodes[n].next_sibling;
    t->nodes[n] = (RadixNode){.parent = parent, .first_child = -1, .next_sibling = t->nodes[parent].first_child,
                              .first_block = -1, .last_block = -1};
    t->nodes[parent].first_child = n;
    t->n_nodes++;
    return n;
}
