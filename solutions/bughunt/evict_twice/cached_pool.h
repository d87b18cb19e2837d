/**
 * @file cached_pool.h
 * @brief Bug hunt "evict_twice": a pool of blocks whose released blocks
 * stay in a prefix cache until their space is needed, as vLLM's and
 * SGLang's pools keep them.
 *
 * Every block is in exactly one of three states:
 * - free: no holder, no cached content: on the free list;
 * - evictable: no holder, but its content is cached (a later prompt with
 *   the same prefix can take it back): on the LRU list, reused only when
 *   the free list is empty;
 * - held: one or more requests hold it (ref > 0): on no list.
 * So free + evictable + held = the pool, and the free plus the evictable
 * blocks are what an admission may count on.
 */
#ifndef KVLAB_BUGHUNT_CACHED_POOL_H
#define KVLAB_BUGHUNT_CACHED_POOL_H

/** The most blocks of the toy pool. */
#define CPOOL_MAX 32

/** The pool. */
typedef struct {
    int n_blocks;
    int ref[CPOOL_MAX];       /**< [n_blocks]: holders of each block */
    int cached[CPOOL_MAX];    /**< [n_blocks]: 1 when its content is in the prefix cache */
    int free_list[CPOOL_MAX]; /**< [n_free]: free blocks; the next taken is the last */
    int n_free;
    int lru[CPOOL_MAX];       /**< [n_evictable]: evictable blocks, least recently used first */
    int n_evictable;
} CachedPool;

/**
 * A pool of @p n_blocks free blocks.
 * @param p         the pool
 * @param n_blocks  1 .. CPOOL_MAX
 */
void cpool_init(CachedPool *p, int n_blocks);

/**
 * Takes a block for new content: a free one, else the least recently used
 * evictable one (its cached content is dropped).
 * @param p  the pool
 * @return the block (ref 1), or -1 when every block is held
 */
int cpool_alloc(CachedPool *p);

/**
 * Marks a held block's content as cached (its prompt's prefill wrote it).
 * @param p  the pool
 * @param b  a held block
 */
void cpool_mark_cached(CachedPool *p, int b);

/**
 * A prefix-cache hit: one more request holds a cached block, which may be
 * held already or evictable.
 * @param p  the pool
 * @param b  a cached block
 */
void cpool_retain(CachedPool *p, int b);

/**
 * One holder lets go; a block with none left becomes evictable when cached,
 * else free.
 * @param p  the pool
 * @param b  a held block
 */
void cpool_release(CachedPool *p, int b);

/**
 * Blocks an admission may count on: the free and the evictable ones.
 * @param p  the pool
 * @return n_free + n_evictable
 */
int cpool_available(const CachedPool *p);

/**
 * The pool's accounting check, as SGLang runs it when the server is idle.
 * @param p    the pool
 * @param msg  receives what is wrong ("pool memory leak detected! ..."), or ""
 * @param cap  size of msg
 * @return 0 when free + evictable + held = the pool and no block is on a
 *         list twice, else -1
 */
int cpool_check(const CachedPool *p, char *msg, int cap);

#endif
