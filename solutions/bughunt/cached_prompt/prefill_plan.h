/**
 * @file prefill_plan.h
 * @brief Bug hunt "cached_prompt": which positions of a prompt the forward
 * pass computes when the prefix cache already holds some of its blocks.
 *
 * A prompt's full blocks are keyed by a chained hash (a block's key covers
 * every token up to its end), as chapter 5 keys them. The blocks whose keys
 * the cache holds are reused (shared, not copied): their K/V rows are
 * already written. The forward pass computes the rest, and the last
 * position it computes gives the logits the first new token is sampled
 * from.
 */
#ifndef KVLAB_BUGHUNT_PREFILL_PLAN_H
#define KVLAB_BUGHUNT_PREFILL_PLAN_H

#include <stdint.h>

/** The most blocks the toy prefix cache remembers. */
#define PREFIX_CACHE_MAX 64

/** A toy prefix cache: the chained keys of the blocks it holds. */
typedef struct {
    uint64_t keys[PREFIX_CACHE_MAX]; /* [n]: one per cached block */
    int n;
} PrefixCache;

/** How one prompt's prefill runs. */
typedef struct {
    int reused_blocks; /**< leading blocks taken from the cache, shared: their rows are not written */
    int first;         /**< first position computed (= reused_blocks x block size) */
    int count;         /**< positions computed: first .. first + count - 1 */
    int logits_row;    /**< row of the forward pass's logits the first token is sampled from */
} PrefillPlan;

/**
 * The chained key of block @p b of a prompt: it covers tokens 0 .. (b + 1) x block_size - 1.
 * @param tokens      [>= (b + 1) x block_size]
 * @param b           block index
 * @param block_size  tokens per block
 * @return the key
 */
uint64_t prefix_block_key(const int *tokens, int b, int block_size);

/**
 * Remembers the keys of a prompt's full blocks (after its prefill wrote them).
 * @param c           the cache
 * @param tokens      [n]
 * @param n           prompt length
 * @param block_size  tokens per block
 */
void prefix_cache_add(PrefixCache *c, const int *tokens, int n, int block_size);

/**
 * How many leading full blocks of a prompt the cache holds.
 * @param c           the cache
 * @param tokens      [n]
 * @param n           prompt length
 * @param block_size  tokens per block
 * @return 0 .. n / block_size
 */
int prefix_cache_match(const PrefixCache *c, const int *tokens, int n, int block_size);

/**
 * Plans a prompt's prefill: the blocks reused from the cache, the positions
 * computed, and the logits row the first new token is sampled from.
 * @param c           the cache
 * @param tokens      [n]
 * @param n           prompt length, >= 1
 * @param block_size  tokens per block, >= 1
 * @param plan        receives the plan
 * @return 0, or -1 for an empty prompt or a block size below 1
 */
int prefill_plan(const PrefixCache *c, const int *tokens, int n, int block_size, PrefillPlan *plan);

#endif
