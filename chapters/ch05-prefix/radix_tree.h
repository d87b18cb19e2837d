/**
 * @file radix_tree.h
 * @brief Chapter 5's second prefix cache, SGLang's RadixAttention: a radix
 *        tree over token ids whose edges own the blocks that hold them.
 *
 * The hash chain (hash_chain.h) finds a block by a key that stands for its
 * whole prefix. The tree keeps the prefixes themselves: the path from the
 * root to a node spells a token sequence, every edge is labelled with
 * whole blocks of tokens (a multiple of block_size), and the edge owns the
 * blocks that hold their K/V, in order. A request's cached prefix is the
 * longest path its tokens follow from the root, compared token by token,
 * so there is nothing to collide. Edges are compressed: a chain of blocks
 * that nobody branches from is one edge, split when a sequence leaves it
 * halfway (radix_insert()).
 *
 *     root
 *      |- [Once upon a time, there | was a little girl]     one edge, 2 blocks
 *      |      |- [named Lily. She]                          a request went on here
 *      |      '- [who loved to ...]                         another branched off
 *      '- [The cat sat on the mat]
 *
 * **Built on the hash chain's bookkeeping.** The tree finds blocks; it
 * does not keep its own books of who holds them. Every block that joins
 * the tree is registered in a ::HashChain of its own (hash_chain_register(),
 * under its chained key, so that the registry stays a valid hash chain,
 * although the tree never looks a block up by key), and from then on the
 * lab's functions do the rest: a hit takes its blocks with
 * hash_chain_take(), a table lets go with hash_chain_release() (tail first,
 * a tree block whose last holder this was is parked in the LRU queue), and
 * the pool gets a block back with hash_chain_evict(), which the tree then
 * forgets. What the tree adds is the lookup (radix_match(), token by token
 * down the edges) and where a block may join (radix_insert()).
 *
 * **Eviction at the leaves.** A block's K/V depend on every block above it,
 * so the tree must free from the bottom. It does, with the hash chain's
 * plain LRU queue: a request holds every block on its path, and a block
 * joins the tree only below a block its request holds, so a parked block
 * has nothing held below it, and every block below it was let go before it
 * (a request lets go tail first). The least recently freed parked block is
 * therefore always the last block of a leaf: evicting it trims that edge,
 * an edge that loses its last block disappears, and its parent may become
 * a leaf. The hash chain alone can evict a block in the middle of a cached
 * chain and leave the blocks after it unreachable (it goes on registering
 * after a block computed twice at once, below a block the request does not
 * hold); the tree never does.
 *
 * Memory: the nodes, the links and the hash chain (its entries, token ids
 * and buckets) are kv_metadata.
 */
#ifndef KVLAB_CH05_RADIX_TREE_H
#define KVLAB_CH05_RADIX_TREE_H

#include "block_pool.h"
#include "parking.h"
#include "err.h"
#include "hash_chain.h"

/** The root's node index. */
#define RADIX_ROOT 0

/** One node: the edge from its parent, and where it sits among its siblings. */
typedef struct {
    int parent;       /**< the node above, or -1 for the root */
    int first_child;  /**< first node below, or -1 (a leaf) */
    int next_sibling; /**< next child of the same parent, or -1; links the free nodes too */
    int first_block;  /**< the edge's first block, or -1 (the root has no edge) */
    int last_block;   /**< the edge's last block */
    int n_blocks;     /**< blocks on the edge */
} RadixNode;

/** The tree and the blocks it owns. */
typedef struct {
    BlockPool *pool;   /**< chapter 4's pool, whose blocks the edges own */
    HashChain blocks;  /**< the tree's blocks registered, their token ids, and the LRU queue of the parked ones */
    int block_size;    /**< tokens per block */
    RadixNode *nodes;  /**< [n_blocks + 1] node 0 is the root; every other node owns at least one block */
    int free_nodes;    /**< first unused node (through next_sibling), or -1 */
    int *block_node;   /**< [n_blocks] the node whose edge owns each block, or -1: not in the tree */
    int *block_next;   /**< [n_blocks] the next block along the same edge, or -1 */
    int *block_prev;   /**< [n_blocks] the previous block along the same edge, or -1 */
    int n_nodes;       /**< nodes in use, the root included */
    int n_blocks_in_tree; /**< blocks the edges own */
    long evictions;    /**< blocks evicted so far */
    long splits;       /**< edges split so far */
} RadixTree;

/**
 * Creates a tree with only its root, over @p pool.
 * @param t     receives the tree
 * @param pool  the pool (its block size and block count)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 when out of memory
 */
int radix_init(RadixTree *t, BlockPool *pool, Err *err);

/**
 * Frees the tree's memory (not the pool).
 * @param t  an initialised or zeroed tree
 */
void radix_free(RadixTree *t);

/**
 * The longest path of whole blocks that a token sequence follows from the
 * root, never covering the sequence's last position (which must be
 * computed, for its logits): down one edge at a time, the child whose
 * first block holds the next tokens, then along its edge while the blocks
 * agree. Changes nothing. Lab 5: solutions/ch05/radix_match.c.
 * @param t         the tree
 * @param tokens    [n_tokens] the sequence
 * @param n_tokens  its length, >= 1
 * @param blocks    receives the blocks of the path, in order
 * @return how many, at most (n_tokens - 1) / block_size
 */
int radix_match(const RadixTree *t, const int *tokens, int n_tokens, int *blocks);

/**
 * A hit: table @p tab takes blocks[0..n-1] from the tree (one holder more
 * each; a parked one leaves the LRU queue and gets its holder back):
 * hash_chain_take() on the tree's blocks.
 * @param t       the tree
 * @param tab     the table (appended to)
 * @param blocks  [n] a path from radix_match()
 * @param n       how many
 */
void radix_take(RadixTree *t, BlockTable *tab, const int *blocks, int n);

/**
 * Adds a full block below @p after: the block that holds the K/V of
 * @p tokens when they follow the path that ends with block @p after.
 * When the tree already has an equal block there (another request
 * computed the same tokens at the same time), nothing changes and that
 * block is returned; the caller's block stays out of the tree.
 * @param t       the tree
 * @param after   the tree block before it on its path, or -1 for a first block
 * @param block   a held block, not in the tree
 * @param tokens  [block_size] its token ids (copied)
 * @return @p block when it joined the tree (registered in t->blocks), else
 *         the equal block already there; -1 when @p after is no longer in
 *         the tree (an eviction took it: nothing may hang below it)
 */
int radix_insert(RadixTree *t, int after, int block, const int *tokens);

/**
 * Splits @p node's edge before @p block (lab 5: solutions/ch05/radix_split.c):
 * a new node below @p node (radix_new_node()) takes @p block, the blocks
 * after it on the edge and @p node's children, and becomes @p node's only
 * child; block_node, block_prev, block_next, both nodes' first_block,
 * last_block and n_blocks, the children's parent and RadixTree.splits
 * are all kept right. radix_insert() splits where a new path leaves an
 * edge halfway; an eviction splits before the block after the one it takes.
 * @param t      the tree
 * @param node   a node whose edge holds @p block, not as its first block
 * @param block  the first block of the new lower edge
 */
void radix_split(RadixTree *t, int node, int block);

/**
 * Whether @p block holds exactly @p tokens (block_size of them).
 * @param t       the tree
 * @param block   a block registered in the tree's hash chain
 * @param tokens  [block_size] token ids
 * @return 1 when equal, 0 otherwise
 */
int radix_same_tokens(const RadixTree *t, int block, const int *tokens);

/**
 * The child of @p node whose edge starts with a block holding @p tokens.
 * @param t       the tree
 * @param node    a node (RADIX_ROOT for the first block of a path)
 * @param tokens  [block_size] token ids
 * @return the child, or -1
 */
int radix_child_starting_with(const RadixTree *t, int node, const int *tokens);

/**
 * Takes a node off the free list and makes it the first child of
 * @p parent, with no edge and no child yet.
 * @param t       the tree (it has a free node: one per block is allocated)
 * @param parent  the node above
 * @return the new node
 */
int radix_new_node(RadixTree *t, int parent);

/**
 * A table lets go of its blocks, last block first: a block of the tree
 * whose last holder this was is parked at the newest end of the LRU queue;
 * any other is released to chapter 4's pool (hash_chain_release() on the
 * tree's blocks).
 * @param t        the tree
 * @param tab      the table; empty afterwards
 * @param on_free  called with each block no table holds any more (may be NULL)
 * @param ctx      passed to @p on_free
 */
void radix_release(RadixTree *t, BlockTable *tab, void (*on_free)(void *ctx, int block), void *ctx);

/**
 * Evicts one block: the least recently freed parked block
 * (hash_chain_evict(), which unregisters it and puts it back on chapter
 * 4's free stack), always the last block of a leaf (see the file comment).
 * It leaves the tree, and its node too when that was its only block. (A
 * block with blocks below it, which only a wrong eviction order could
 * give, takes them out of the tree with it: they stay parked, unreachable,
 * until they are evicted in turn.)
 * @param t  the tree
 * @return the block, or -1 when nothing is parked
 */
int radix_evict(RadixTree *t);

#endif
