/**
 * @file radix_lock.h
 * @brief Bug hunt "radix_refcount": a radix tree of cached prompts whose
 * nodes are locked by the requests that use them, as SGLang's radix cache
 * locks them.
 *
 * A node's edge holds one or more tokens (one K/V row each). A request
 * that matched a prefix locks the deepest node it reached: every node on
 * the way from the root counts it in lock_ref, so that none of them is
 * evicted while the request reads their rows. A match that ends inside an
 * edge splits that node in two first, so that a request can lock exactly
 * the tokens it shares. Eviction takes unlocked leaves, oldest first.
 */
#ifndef KVLAB_BUGHUNT_RADIX_LOCK_H
#define KVLAB_BUGHUNT_RADIX_LOCK_H

/** The most nodes, children per node and tokens per edge of the toy tree. */
#define RADIX_MAX_NODES 64
#define RADIX_MAX_CHILDREN 8
#define RADIX_MAX_EDGE 32

/** One node: an edge of tokens below its parent. */
typedef struct {
    int tokens[RADIX_MAX_EDGE];         /**< [n_tokens]: the edge's tokens */
    int n_tokens;
    int parent;                         /**< node id; -1 for the root */
    int children[RADIX_MAX_CHILDREN];   /**< [n_children]: node ids */
    int n_children;
    int lock_ref;                       /**< requests using this node's rows */
    int last_use;                       /**< tick of the last match or insert */
    int in_use;                         /**< 0: a free slot of the node array */
} RadixNode;

/** The tree: node 0 is the root (no tokens). */
typedef struct {
    RadixNode nodes[RADIX_MAX_NODES];
    int tick;
} RadixTree;

/**
 * An empty tree.
 * @param t  the tree
 */
void radix_init(RadixTree *t);

/**
 * Finds the longest cached prefix of @p tokens, splitting the node where
 * the match ends inside an edge.
 * @param t       the tree
 * @param tokens  [n]
 * @param n       length
 * @param node    receives the deepest node matched whole (0: none)
 * @return the tokens matched, or -1 when a split found no free node
 */
int radix_match(RadixTree *t, const int *tokens, int n, int *node);

/**
 * Caches a sequence: matches it, then hangs what is new under the node
 * reached.
 * @param t       the tree
 * @param tokens  [n], 1 <= n
 * @param n       length; the new part at most RADIX_MAX_EDGE tokens
 * @return the node that ends the sequence, or -1 when the tree is full
 */
int radix_insert(RadixTree *t, const int *tokens, int n);

/**
 * A request starts using a node's rows: the node and every ancestor count it.
 * @param t     the tree
 * @param node  a node id
 */
void radix_lock(RadixTree *t, int node);

/**
 * A request stops using them.
 * @param t     the tree
 * @param node  the node it locked
 */
void radix_unlock(RadixTree *t, int node);

/**
 * Evicts unlocked leaves, least recently used first, until @p n_tokens rows
 * are freed or none is left to evict.
 * @param t         the tree
 * @param n_tokens  rows wanted
 * @return rows freed
 */
int radix_evict(RadixTree *t, int n_tokens);

#endif
