/**
 * @file paged_cache.h
 * @brief Chapter 4 extension: the hooks a cache of K/V above the pool
 *        fills in (chapter 5's prefix cache).
 *
 * **Adds** a place above the pool where K/V outlive the requests that
 * computed them: at admission a waiting request may find its leading
 * blocks there already, a request that lets go of its blocks may leave
 * them there, and when the free stack runs short the cache gives blocks
 * back.
 *
 * **Turned on by** chapter 5's program (build/ch05-prefix, `--prefix-cache
 * hash|radix|off`), whose prefix_cache_open() sets PagedServer.cache.
 * Chapter 4 alone never sets it: PagedServer.cache is NULL and every hook
 * below is skipped.
 *
 * **Taught in** book/ch04-paged.md, "Extension: the hooks chapter 5
 * fills", and book/ch05-prefix.md.
 *
 * **Where the core calls it** (chapters/ch04-paged/scheduler.c, each call
 * guarded by `if (s->cache)`): paged_cached_prefix() (lookup),
 * paged_take_cached() (admitted), the release of a table (release), and
 * the room for new blocks (reclaim). Chapter 4 cannot name chapter 5's
 * functions (the layout rule), so these are the one set of function
 * pointers the chapter keeps, each with its context.
 */
#ifndef KVLAB_CH04_PAGED_CACHE_H
#define KVLAB_CH04_PAGED_CACHE_H

#include "block_pool.h"
#include "requests.h"
#include "serving.h"

/**
 * What a cache of K/V above the pool found for a waiting request: blocks
 * whose K/V equal those the request's first positions would get.
 */
typedef struct {
    int n_blocks;      /**< leading blocks found: the request's first n_blocks x block_size positions */
    int n_free;        /**< how many of them no table holds now (parked): taking them uses up free blocks */
    const int *blocks; /**< [n_blocks] the blocks in order (the cache's buffer, valid until its next call) */
} PagedCachedPrefix;

/**
 * The hooks of a cache of K/V contents kept above the pool (chapter 5's
 * prefix cache). Chapter 4 has none (PagedServer.cache is NULL), and the
 * scheduler then does exactly what it does without them.
 */
typedef struct PagedCache {
    void *ctx; /**< passed to every function */
    /**
     * At admission: the leading blocks of @p r whose K/V are already in the
     * pool. It changes nothing (a waiting request may be looked up at
     * every step). At least the last position must be left to compute,
     * since its logits are what the request samples from.
     * @param ctx  the cache
     * @param r    a waiting request
     * @return what it found ({0} when nothing)
     */
    PagedCachedPrefix (*lookup)(void *ctx, const Request *r);
    /**
     * @p r is admitted with what lookup() found: its empty table @p t takes
     * those blocks, one holder more each (a parked one leaves the cache's
     * free queue). The scheduler then allocates the rest.
     * @param ctx  the cache
     * @param r    the request
     * @param t    its table, empty
     * @param hit  lookup()'s answer for @p r in this step
     */
    void (*admitted)(void *ctx, Request *r, BlockTable *t, const PagedCachedPrefix *hit);
    /**
     * Instead of block_table_release(): @p r's table lets go of its blocks
     * (the cache may park those it keeps), calling @p on_free for each
     * block no table holds any more, and leaves the table empty.
     * @param ctx          the cache
     * @param r            the request (finished or preempted)
     * @param t            its table
     * @param on_free      as for block_table_release()
     * @param on_free_ctx  passed to @p on_free
     */
    void (*release)(void *ctx, Request *r, BlockTable *t, void (*on_free)(void *ctx, int block), void *on_free_ctx);
    /**
     * The free stack has fewer blocks than the scheduler is about to take:
     * give one parked block back (block_pool_free_parked()), forgetting
     * what it cached.
     * @param ctx  the cache
     * @return 0 when a block went back on the stack, -1 when none is parked
     */
    int (*reclaim)(void *ctx);
} PagedCache;

#endif
