/**
 * @file hash_chain.h
 * @brief Chapter 5's first prefix cache, vLLM V1's: every full block is
 *        known by a hash of its tokens chained to the hash of the block
 *        before it, and freed blocks that hold such a block wait in an LRU
 *        queue, still reusable, until the pool needs them.
 *
 * **The key of a block.** Position p's K and V depend on tokens 0..p, not
 * on the tokens of its block alone. So the key of logical block i is
 *
 *     key[0] = hash(HASH_CHAIN_ROOT_KEY, tokens[0 .. bs-1])
 *     key[i] = hash(key[i-1],            tokens[i*bs .. (i+1)*bs-1])
 *
 * and two requests whose key[i] agree agree (up to a hash collision) on
 * every token up to the end of block i, which is what makes the block's
 * K/V reusable. Only full blocks have keys: the last, partly filled block
 * of a sequence is never cached.
 *
 * **No collision can give wrong tokens.** The table keeps, for every
 * registered block, its key, its token ids and the registration number of
 * the block before it in its chain (::HashChainEntry). A lookup accepts a
 * block only when all three agree (hash_chain_find()); by induction from
 * the first block, an accepted run of blocks holds exactly the K/V of the
 * request's own tokens, whatever the hash function does.
 *
 * **Freed but cached.** When the last holder of a registered block lets go
 * (hash_chain_release(), a request's blocks tail first), the block is
 * parked (block_pool_park()): it has no holder and counts as free, but its
 * K/V stay where they are and it joins the newest end of the LRU queue. A
 * hit takes it out again (hash_chain_take()). Only when the pool runs out
 * of never-cached blocks does it evict the oldest (hash_chain_evict()):
 * the block is unregistered and goes back on chapter 4's free stack.
 * Because a finishing request releases its tail first, its tail blocks are
 * older in the queue than its head: a request's prefix, the part others
 * are likeliest to share, is the last of it to go.
 *
 * Memory: the entries, the token ids and the buckets are kv_metadata.
 */
#ifndef KVLAB_CH05_HASH_CHAIN_H
#define KVLAB_CH05_HASH_CHAIN_H

#include <stdint.h>

#include "block_pool.h"
#include "parking.h"
#include "err.h"

/** The "previous key" of a sequence's first block. */
#define HASH_CHAIN_ROOT_KEY 0x6b766c6162u /* "kvlab" */

/** The "previous registration" of a sequence's first block (registration numbers start at 1). */
#define HASH_CHAIN_ROOT_ID 0

/** What the cache knows of one block of the pool. */
typedef struct {
    uint64_t key;   /**< hash of (previous block's key, this block's tokens) */
    long id;        /**< registration number while registered (>= 1); 0: nothing cached here */
    long parent_id; /**< registration number of the block before it in its chain (HASH_CHAIN_ROOT_ID: the first) */
    int next;       /**< next entry of the same hash bucket, or -1 */
    int older;      /**< LRU queue: the entry freed before this one, or -1 */
    int newer;      /**< LRU queue: the entry freed after this one, or -1 */
    int in_queue;   /**< 1 while the block is parked in the LRU queue */
} HashChainEntry;

/** The hash table of full blocks and the LRU queue of the free ones. */
typedef struct {
    BlockPool *pool;          /**< chapter 4's pool, whose blocks these are */
    int block_size;           /**< tokens per block */
    HashChainEntry *entries;  /**< [n_blocks] one per block of the pool */
    int *tokens;              /**< [n_blocks][block_size] token ids of each registered block */
    int *buckets;             /**< [n_buckets] first entry of each bucket, or -1 */
    int n_buckets;            /**< a power of two, at least n_blocks */
    int oldest;               /**< LRU queue: the block evicted next, or -1 */
    int newest;               /**< LRU queue: the block freed last, or -1 */
    int n_queued;             /**< blocks in the queue */
    int n_registered;         /**< blocks registered (held or parked) */
    long next_id;             /**< the next registration number */
    long evictions;           /**< blocks evicted so far */
} HashChain;

/**
 * Creates an empty cache over @p pool (every entry unregistered, the queue
 * empty), charged to kv_metadata.
 * @param h     receives the cache
 * @param pool  the pool (its block size and block count)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 when out of memory
 */
int hash_chain_init(HashChain *h, BlockPool *pool, Err *err);

/**
 * Frees the cache's memory (not the pool).
 * @param h  an initialised or zeroed cache
 */
void hash_chain_free(HashChain *h);

/**
 * The hash of a block: 64-bit FNV-1a over the 8 bytes of @p parent_key and
 * then the 4 bytes of each token id, least significant byte first (so the
 * key is the same on every machine).
 * @param parent_key  the previous block's key, or HASH_CHAIN_ROOT_KEY
 * @param tokens      [block_size] the block's token ids
 * @param block_size  tokens per block
 * @return the key
 */
uint64_t hash_block_key(uint64_t parent_key, const int *tokens, int block_size);

/**
 * The keys of the full blocks of a token sequence, each chained to the
 * one before it (see the file comment).
 * @param tokens      [n_tokens] the sequence
 * @param n_tokens    its length
 * @param block_size  tokens per block
 * @param keys        receives [n_tokens / block_size] keys
 * @return the number of full blocks, n_tokens / block_size
 */
int hash_chain_keys(const int *tokens, int n_tokens, int block_size, uint64_t *keys);

/**
 * The token ids a registered block holds.
 * @param h      the cache
 * @param block  a block id
 * @return [block_size] its tokens (meaningful while it is registered)
 */
const int *hash_chain_tokens(const HashChain *h, int block);

/**
 * Finds the registered block with this key, this chain predecessor and
 * exactly these tokens: a block whose key alone agrees is a collision, not
 * a hit.
 * @param h          the cache
 * @param key        the block's key
 * @param parent_id  registration number of the block before it (HASH_CHAIN_ROOT_ID for the first)
 * @param tokens     [block_size] its token ids
 * @return the block, or -1 when none is registered
 */
int hash_chain_find(const HashChain *h, uint64_t key, long parent_id, const int *tokens);

/**
 * The longest run of leading blocks of a sequence that the cache holds:
 * blocks 0, 1, ... found one after the other with hash_chain_find(), up to
 * the first miss. The run never covers the sequence's last position: that
 * one must be computed, for its logits.
 * @param h         the cache
 * @param tokens    [n_tokens] the sequence
 * @param n_tokens  its length, >= 1
 * @param keys      [n_tokens / block_size] its keys (hash_chain_keys())
 * @param blocks    receives the blocks found, in order
 * @return how many were found, at most (n_tokens - 1) / block_size
 */
int hash_chain_match(const HashChain *h, const int *tokens, int n_tokens, const uint64_t *keys, int *blocks);

/**
 * Registers a full block under @p key (it must not be registered).
 * @param h          the cache
 * @param block      a held block whose K/V are those of @p tokens after the chain of @p parent_id
 * @param key        its key
 * @param parent_id  registration number of the block before it
 * @param tokens     [block_size] its token ids (copied)
 * @return its registration number
 */
long hash_chain_register(HashChain *h, int block, uint64_t key, long parent_id, const int *tokens);

/**
 * Forgets a registered block (it leaves its bucket; not the queue). A
 * block that is not registered is left alone.
 * @param h      the cache
 * @param block  a block
 */
void hash_chain_unregister(HashChain *h, int block);

/**
 * Puts a block at the newest end of the LRU queue (a block already in it
 * stays where it is).
 * @param h      the cache
 * @param block  a block
 */
void hash_chain_queue_push_newest(HashChain *h, int block);

/**
 * Takes a block out of the LRU queue, wherever it is (a block not in it is
 * left alone).
 * @param h      the cache
 * @param block  a block
 */
void hash_chain_queue_remove(HashChain *h, int block);

/**
 * A hit: table @p t takes blocks[0..n-1] from the cache, one holder more
 * each. A parked block leaves the LRU queue and gets its holder back
 * (block_pool_hold_parked()); a block others hold is retained.
 * @param h       the cache
 * @param t       the table (appended to)
 * @param blocks  [n] blocks from hash_chain_match()
 * @param n       how many
 */
void hash_chain_take(HashChain *h, BlockTable *t, const int *blocks, int n);

/**
 * A table lets go of its blocks, last block first. A registered block
 * whose last holder this was is parked at the newest end of the LRU queue
 * (still cached); any other block is released to chapter 4's pool.
 * @param h        the cache
 * @param t        the table; empty afterwards
 * @param on_free  called with each block that no table holds any more, parked or not (may be NULL)
 * @param ctx      passed to @p on_free
 */
void hash_chain_release(HashChain *h, BlockTable *t, void (*on_free)(void *ctx, int block), void *ctx);

/**
 * Evicts the least recently freed parked block: it leaves the queue, is
 * unregistered, and goes back on chapter 4's free stack.
 * @param h  the cache
 * @return the block, or -1 when the queue is empty
 */
int hash_chain_evict(HashChain *h);

#endif
