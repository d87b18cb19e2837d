/* Bug hunt "evict_twice": a pool with cached, evictable blocks
 * (cached_pool.h). */
#include <stdio.h>

#include "cached_pool.h"

void cpool_init(CachedPool *p, int n_blocks)
{
    p->n_blocks = n_blocks;
    p->n_free = n_blocks;
    p->n_evictable = 0;
    for (int b = 0; b < n_blocks; b++) {
        p->ref[b] = 0;
        p->cached[b] = 0;
        p->free_list[b] = n_blocks - 1 - b; /* block 0 is taken first */
    }
}

/* Takes block b off the LRU list, keeping the others' order. */
static void lru_remove(CachedPool *p, int b)
{
    int k = 0;
    for (int i = 0; i < p->n_evictable; i++)
        if (p->lru[i] != b)
            p->lru[k++] = p->lru[i];
    p->n_evictable = k;
}

int cpool_alloc(CachedPool *p)
{
    int b;
    if (p->n_free > 0) {
        b = p->free_list[--p->n_free];
    } else if (p->n_evictable > 0) {
        b = p->lru[0];
        lru_remove(p, b);
        p->cached[b] = 0; /* its content is overwritten: no longer a cache hit */
    } else {
        return -1;
    }
    p->ref[b] = 1;
    return b;
}

void cpool_mark_cached(CachedPool *p, int b)
{
    p->cached[b] = 1;
}

void cpool_retain(CachedPool *p, int b)
{
    // BUG BEGIN(bughunt.evict_twice): a cache hit on an evictable block takes a holder but leaves the block on the LRU list: it is held and evictable at once, and its release puts it there a second time, so it is counted twice (sglang #35270, "pool memory leak detected!")
    if (p->ref[b] == 0)
        lru_remove(p, b);
    // BUG PLANTED:
    // BUG END
    p->ref[b]++;
}

/* Where a block nobody holds goes: the LRU list (most recently used last)
 * when its content is cached, else the free list. */
static void park(CachedPool *p, int b)
{
    if (p->cached[b])
        p->lru[p->n_evictable++] = b;
    else
        p->free_list[p->n_free++] = b;
}

void cpool_release(CachedPool *p, int b)
{
    p->ref[b]--;
    if (p->ref[b] == 0)
        park(p, b);
}

int cpool_available(const CachedPool *p)
{
    return p->n_free + p->n_evictable;
}

int cpool_check(const CachedPool *p, char *msg, int cap)
{
    int held = 0, seen[CPOOL_MAX] = {0};
    msg[0] = '\0';
    for (int b = 0; b < p->n_blocks; b++)
        held += p->ref[b] > 0;
    for (int i = 0; i < p->n_free; i++)
        seen[p->free_list[i]]++;
    for (int i = 0; i < p->n_evictable; i++)
        seen[p->lru[i]]++;
    for (int b = 0; b < p->n_blocks; b++)
        if (seen[b] + (p->ref[b] > 0) != 1) {
            snprintf(msg, (size_t)cap, "pool memory leak detected! block %d is on %d list(s) and %s", b, seen[b],
                     p->ref[b] > 0 ? "held" : "not held");
            return -1;
        }
    if (p->n_free + p->n_evictable + held != p->n_blocks) {
        snprintf(msg, (size_t)cap, "pool memory leak detected! free %d + evictable %d + held %d != %d blocks",
                 p->n_free, p->n_evictable, held, p->n_blocks);
        return -1;
    }
    return 0;
}
