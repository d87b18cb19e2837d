/* Chapter 5: the radix tree over token ids whose edges own the blocks
 * (SGLang's RadixAttention on chapter 4's pool). The tree finds blocks;
 * holding, parking and evicting them is the hash chain's (the lab's
 * functions, on a HashChain of the tree's own). See radix_tree.h. */
#include "radix_tree.h"

#include <string.h>

#include "mem.h"

/* RadixNode.parent of a node not in use. */
#define RADIX_FREE_NODE -2

int radix_init(RadixTree *t, BlockPool *pool, Err *err)
{
    memset(t, 0, sizeof *t);
    int n = pool->n_blocks;
    t->pool = pool;
    t->block_size = pool->shape.block_size;
    if (hash_chain_init(&t->blocks, pool, err))
        return -1;
    t->nodes = mem_alloc_array(MEM_KV_METADATA, (size_t)n + 1, sizeof(RadixNode));
    t->block_node = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    t->block_next = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    t->block_prev = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    if (!t->nodes || !t->block_node || !t->block_next || !t->block_prev) {
        radix_free(t);
        return err_set(err, "out of memory for a radix tree over %d blocks", n);
    }
    for (int b = 0; b < n; b++)
        t->block_node[b] = t->block_next[b] = t->block_prev[b] = -1;
    t->nodes[RADIX_ROOT] = (RadixNode){.parent = -1, .first_child = -1, .next_sibling = -1, .first_block = -1,
                                       .last_block = -1};
    /* Every other node owns a block, so n of them always suffice. */
    t->free_nodes = n >= 1 ? 1 : -1;
    for (int i = 1; i <= n; i++)
        t->nodes[i] = (RadixNode){.parent = RADIX_FREE_NODE, .next_sibling = i < n ? i + 1 : -1};
    t->n_nodes = 1;
    return 0;
}

void radix_free(RadixTree *t)
{
    hash_chain_free(&t->blocks);
    mem_free(t->nodes);
    mem_free(t->block_node);
    mem_free(t->block_next);
    mem_free(t->block_prev);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ helpers
 * (radix_same_tokens(), radix_child_starting_with() and radix_new_node()
 * are in radix_nodes.c; the lab's radix_match() and radix_split() in
 * solutions/ch05/) */

/* The block that follows @p after on a path with @p tokens next, or -1:
 * the next block on the same edge, or the first block of a child edge. */
static int next_on_path(const RadixTree *t, int after, const int *tokens)
{
    if (after >= 0 && t->block_next[after] >= 0)
        return radix_same_tokens(t, t->block_next[after], tokens) ? t->block_next[after] : -1;
    int c = radix_child_starting_with(t, after >= 0 ? t->block_node[after] : RADIX_ROOT, tokens);
    return c >= 0 ? t->nodes[c].first_block : -1;
}

static void unlink_child(RadixTree *t, int node)
{
    int *link = &t->nodes[t->nodes[node].parent].first_child;
    while (*link != node)
        link = &t->nodes[*link].next_sibling;
    *link = t->nodes[node].next_sibling;
}

static void free_node(RadixTree *t, int node)
{
    unlink_child(t, node);
    t->nodes[node].next_sibling = t->free_nodes;
    t->nodes[node].parent = RADIX_FREE_NODE;
    t->free_nodes = node;
    t->n_nodes--;
}

/* @p block joins the end of @p node's edge, registered in the tree's hash
 * chain after @p after (the block before it on its path, or -1). */
static void append_block(RadixTree *t, int node, int after, int block, const int *tokens)
{
    HashChain *h = &t->blocks;
    uint64_t parent_key = after >= 0 ? h->entries[after].key : HASH_CHAIN_ROOT_KEY;
    long parent_id = after >= 0 ? h->entries[after].id : HASH_CHAIN_ROOT_ID;
    hash_chain_register(h, block, hash_block_key(parent_key, tokens, t->block_size), parent_id, tokens);
    RadixNode *n = &t->nodes[node];
    t->block_node[block] = node;
    t->block_prev[block] = n->last_block;
    t->block_next[block] = -1;
    if (n->last_block >= 0)
        t->block_next[n->last_block] = block;
    else
        n->first_block = block;
    n->last_block = block;
    n->n_blocks++;
    t->n_blocks_in_tree++;
}

void radix_take(RadixTree *t, BlockTable *tab, const int *blocks, int n)
{
    hash_chain_take(&t->blocks, tab, blocks, n);
}

/* ------------------------------------------------------------ insertion */

int radix_insert(RadixTree *t, int after, int block, const int *tokens)
{
    if (after >= 0 && t->block_node[after] < 0)
        return -1; /* evicted from above: nothing may hang below it */
    int equal = next_on_path(t, after, tokens);
    if (equal >= 0)
        return equal;
    int node = after >= 0 ? t->block_node[after] : RADIX_ROOT;
    if (after >= 0 && t->block_next[after] >= 0)
        radix_split(t, node, t->block_next[after]); /* the path leaves this edge halfway */
    else if (node != RADIX_ROOT && t->nodes[node].first_child < 0) {
        append_block(t, node, after, block, tokens); /* a leaf grows: edges stay compressed */
        return block;
    }
    append_block(t, radix_new_node(t, node), after, block, tokens);
    return block;
}

/* ------------------------------------------------------------ release, eviction */

void radix_release(RadixTree *t, BlockTable *tab, void (*on_free)(void *ctx, int block), void *ctx)
{
    hash_chain_release(&t->blocks, tab, on_free, ctx);
}

/* Takes every node below @p node, and the blocks of their edges, out of
 * the tree (the blocks stay registered in the hash chain). */
static void drop_subtree_below(RadixTree *t, int node)
{
    while (t->nodes[node].first_child >= 0) {
        int leaf = t->nodes[node].first_child;
        while (t->nodes[leaf].first_child >= 0)
            leaf = t->nodes[leaf].first_child;
        for (int b = t->nodes[leaf].first_block, next; b >= 0; b = next) {
            next = t->block_next[b];
            t->block_node[b] = t->block_next[b] = t->block_prev[b] = -1;
            t->n_blocks_in_tree--;
        }
        free_node(t, leaf);
    }
}

/* An evicted block leaves the tree: the last block of its edge (anything
 * below it goes too, which a least-recently-freed eviction never has). */
static void forget_block(RadixTree *t, int b)
{
    int node = t->block_node[b];
    if (node < 0)
        return;
    if (t->block_next[b] >= 0)
        radix_split(t, node, t->block_next[b]);
    drop_subtree_below(t, node);
    RadixNode *n = &t->nodes[node];
    n->last_block = t->block_prev[b];
    if (n->last_block >= 0)
        t->block_next[n->last_block] = -1;
    else
        n->first_block = -1;
    n->n_blocks--;
    t->block_node[b] = t->block_prev[b] = t->block_next[b] = -1;
    t->n_blocks_in_tree--;
    if (n->n_blocks == 0)
        free_node(t, node);
}

int radix_evict(RadixTree *t)
{
    int b = hash_chain_evict(&t->blocks);
    if (b < 0)
        return -1;
    forget_block(t, b);
    t->evictions++;
    return b;
}
