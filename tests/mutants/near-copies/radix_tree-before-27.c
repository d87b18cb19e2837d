/* The fixture of the near-copy check's self-test (scripts/near-copies.c,
 * scripts/check-handout.sh): chapters/ch05-prefix/radix_tree.c as it was
 * before issue 27, whose radix_release(), radix_take() and radix_match()
 * were chapter 5's lab answers renamed. Not built; not in the handout. */
/* Chapter 5: the radix tree over token ids whose edges own the blocks
 * (SGLang's RadixAttention on chapter 4's pool). See radix_tree.h. */
#include "radix_tree.h"

#include <string.h>

#include "mem.h"

/* RadixNode.parent of a node not in use. */
#define RADIX_FREE_NODE -2

int radix_init(RadixTree *t, BlockPool *pool, Err *err)
{
    memset(t, 0, sizeof *t);
    int n = pool->n_blocks, bs = pool->shape.block_size;
    t->pool = pool;
    t->block_size = bs;
    t->nodes = mem_alloc_array(MEM_KV_METADATA, (size_t)n + 1, sizeof(RadixNode));
    t->block_node = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    t->block_next = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    t->block_prev = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(int));
    t->tokens = mem_alloc_array(MEM_KV_METADATA, (size_t)n * (size_t)bs, sizeof(int));
    if (!t->nodes || !t->block_node || !t->block_next || !t->block_prev || !t->tokens) {
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
    mem_free(t->nodes);
    mem_free(t->block_node);
    mem_free(t->block_next);
    mem_free(t->block_prev);
    mem_free(t->tokens);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ helpers */

static const int *block_tokens(const RadixTree *t, int block)
{
    return t->tokens + (size_t)block * (size_t)t->block_size;
}

static int same_tokens(const RadixTree *t, int block, const int *tokens)
{
    return memcmp(block_tokens(t, block), tokens, (size_t)t->block_size * sizeof(int)) == 0;
}

/* The child of @p node whose edge starts with @p tokens, or -1. */
static int child_starting_with(const RadixTree *t, int node, const int *tokens)
{
    for (int c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
        if (same_tokens(t, t->nodes[c].first_block, tokens))
            return c;
    return -1;
}

/* The block that follows @p after on a path with @p tokens next, or -1:
 * the next block on the same edge, or the first block of a child edge. */
static int next_on_path(const RadixTree *t, int after, const int *tokens)
{
    if (after >= 0 && t->block_next[after] >= 0)
        return same_tokens(t, t->block_next[after], tokens) ? t->block_next[after] : -1;
    int c = child_starting_with(t, after >= 0 ? t->block_node[after] : RADIX_ROOT, tokens);
    return c >= 0 ? t->nodes[c].first_block : -1;
}

static void touch(RadixTree *t, int node)
{
    t->nodes[node].last_access = ++t->clock;
}

static int new_node(RadixTree *t, int parent)
{
    int n = t->free_nodes;
    t->free_nodes = t->nodes[n].next_sibling;
    t->nodes[n] = (RadixNode){.parent = parent, .first_child = -1, .next_sibling = t->nodes[parent].first_child,
                              .first_block = -1, .last_block = -1, .last_access = t->clock};
    t->nodes[parent].first_child = n;
    t->n_nodes++;
    return n;
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

static void append_block(RadixTree *t, int node, int block, const int *tokens)
{
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
    memcpy(t->tokens + (size_t)block * (size_t)t->block_size, tokens, (size_t)t->block_size * sizeof(int));
    t->n_blocks_in_tree++;
}

/* Splits @p node's edge before @p block: a new node below it takes @p
 * block, the rest of the edge and @p node's children, and becomes its only
 * child. */
static void split_before(RadixTree *t, int node, int block)
{
    int children = t->nodes[node].first_child;
    int low = new_node(t, node);
    RadixNode *up = &t->nodes[node], *n = &t->nodes[low];
    n->next_sibling = -1;
    n->first_child = children;
    up->first_child = low;
    for (int c = children; c >= 0; c = t->nodes[c].next_sibling)
        t->nodes[c].parent = low;
    n->first_block = block;
    n->last_block = up->last_block;
    n->last_access = up->last_access;
    up->last_block = t->block_prev[block];
    t->block_next[up->last_block] = -1;
    t->block_prev[block] = -1;
    for (int b = block; b >= 0; b = t->block_next[b]) {
        t->block_node[b] = low;
        n->n_blocks++;
    }
    up->n_blocks -= n->n_blocks;
    t->splits++;
}

/* ------------------------------------------------------------ lookup */

int radix_match(const RadixTree *t, const int *tokens, int n_tokens, int *blocks)
{
    const int bs = t->block_size;
    int limit = (n_tokens - 1) / bs, n = 0, after = -1;
    while (n < limit) {
        int b = next_on_path(t, after, tokens + (size_t)n * (size_t)bs);
        if (b < 0)
            break;
        blocks[n++] = after = b;
    }
    return n;
}

void radix_take(RadixTree *t, BlockTable *tab, const int *blocks, int n)
{
    for (int i = 0; i < n; i++) {
        int b = blocks[i];
        if (t->pool->ref_count[b] == 0)
            block_pool_hold_parked(t->pool, b); /* a parked block, in use again */
        else
            block_pool_retain(t->pool, b);
        touch(t, t->block_node[b]);
        tab->blocks[tab->n_blocks++] = b;
    }
}

/* ------------------------------------------------------------ insertion */

int radix_insert(RadixTree *t, int after, int block, const int *tokens)
{
    int equal = next_on_path(t, after, tokens);
    if (equal >= 0) {
        touch(t, t->block_node[equal]);
        return equal;
    }
    int node = after >= 0 ? t->block_node[after] : RADIX_ROOT;
    if (after >= 0 && t->block_next[after] >= 0)
        split_before(t, node, t->block_next[after]); /* the path leaves this edge halfway */
    else if (node != RADIX_ROOT && t->nodes[node].first_child < 0) {
        append_block(t, node, block, tokens); /* a leaf grows: edges stay compressed */
        touch(t, node);
        return block;
    }
    int child = new_node(t, node);
    append_block(t, child, block, tokens);
    touch(t, child);
    return block;
}

/* ------------------------------------------------------------ release, eviction */

void radix_release(RadixTree *t, BlockTable *tab, void (*on_free)(void *ctx, int block), void *ctx)
{
    BlockPool *p = t->pool;
    for (int i = tab->n_blocks - 1; i >= 0; i--) { /* tail first, as the hash chain does */
        int b = tab->blocks[i];
        if (t->block_node[b] >= 0 && p->ref_count[b] == 1) {
            block_pool_park(p, b);
            touch(t, t->block_node[b]);
            if (on_free)
                on_free(ctx, b);
        } else if (block_pool_release(p, b) == 0 && on_free) {
            on_free(ctx, b);
        }
    }
    tab->n_blocks = 0;
}

/* The least recently used leaf whose last block is parked, or -1 (ties,
 * which only a split makes, go to the lower node index). */
static int leaf_to_trim(const RadixTree *t)
{
    int best = -1;
    for (int c = 1; c <= t->pool->n_blocks; c++) {
        const RadixNode *n = &t->nodes[c];
        if (n->parent == RADIX_FREE_NODE || n->first_child >= 0 || t->pool->ref_count[n->last_block] != 0)
            continue;
        if (best < 0 || n->last_access < t->nodes[best].last_access)
            best = c;
    }
    return best;
}

int radix_evict(RadixTree *t)
{
    int leaf = leaf_to_trim(t);
    if (leaf < 0)
        return -1;
    RadixNode *n = &t->nodes[leaf];
    int b = n->last_block;
    n->last_block = t->block_prev[b];
    if (n->last_block >= 0)
        t->block_next[n->last_block] = -1;
    else
        n->first_block = -1;
    n->n_blocks--;
    t->block_node[b] = t->block_prev[b] = t->block_next[b] = -1;
    t->n_blocks_in_tree--;
    if (n->n_blocks == 0)
        free_node(t, leaf);
    block_pool_free_parked(t->pool, b);
    t->evictions++;
    return b;
}
