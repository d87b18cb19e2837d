/* Chapter 5 lab: radix_split(), an edge cut in two where a path leaves it.
 * exercises/ch05/radix_split.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "lab.h"
#include "radix_tree.h"

void radix_split(RadixTree *t, int node, int block)
{
    // LAB BEGIN(ch05.radix_split): a new node (radix_new_node()) below node takes block, the rest of the edge and node's children, and becomes node's only child; fix every link and count
    int children = t->nodes[node].first_child;
    int low = radix_new_node(t, node);
    RadixNode *up = &t->nodes[node], *n = &t->nodes[low];
    /* The new node is the only child: node's children move below it. */
    n->next_sibling = -1;
    n->first_child = children;
    up->first_child = low;
    for (int c = children; c >= 0; c = t->nodes[c].next_sibling)
        t->nodes[c].parent = low;
    /* The edge is cut between block's predecessor and block. */
    n->first_block = block;
    n->last_block = up->last_block;
    up->last_block = t->block_prev[block];
    t->block_next[up->last_block] = -1;
    t->block_prev[block] = -1;
    for (int b = block; b >= 0; b = t->block_next[b]) {
        t->block_node[b] = low;
        n->n_blocks++;
    }
    up->n_blocks -= n->n_blocks;
    t->splits++;
    // LAB STUB:
    // (void)t; (void)node; (void)block;
    // LAB_TODO("cut the edge before block: a new node below takes block, the rest and the children");
    // LAB END
}
