/* Chapter 5: the hash chain's table and LRU queue around the lab's
 * hash_chain_keys(), hash_chain_find(), hash_chain_match(),
 * hash_chain_take(), hash_chain_release() and hash_chain_evict()
 * (solutions/ch05/). */
#include "hash_chain.h"

#include <string.h>

#include "mem.h"

/* 64-bit FNV-1a (Fowler, Noll, Vo): xor in a byte, multiply by the prime. */
#define FNV_OFFSET_BASIS 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv_bytes(uint64_t h, uint64_t value, int n_bytes)
{
    for (int i = 0; i < n_bytes; i++) {
        h ^= (value >> (8 * i)) & 0xffu; /* least significant byte first, on every machine */
        h *= FNV_PRIME;
    }
    return h;
}

uint64_t hash_block_key(uint64_t parent_key, const int *tokens, int block_size)
{
    uint64_t h = fnv_bytes(FNV_OFFSET_BASIS, parent_key, 8);
    for (int i = 0; i < block_size; i++)
        h = fnv_bytes(h, (uint32_t)tokens[i], 4);
    return h;
}

/* Buckets: the smallest power of two that is at least the number of
 * blocks, so that a bucket holds about one entry. */
static int bucket_count(int n_blocks)
{
    int n = 1;
    while (n < n_blocks)
        n *= 2;
    return n;
}

int hash_chain_init(HashChain *h, BlockPool *pool, Err *err)
{
    memset(h, 0, sizeof *h);
    int n = pool->n_blocks, bs = pool->shape.block_size;
    h->pool = pool;
    h->block_size = bs;
    h->n_buckets = bucket_count(n);
    h->entries = mem_alloc_array(MEM_KV_METADATA, (size_t)n, sizeof(HashChainEntry));
    h->tokens = mem_alloc_array(MEM_KV_METADATA, (size_t)n * (size_t)bs, sizeof(int));
    h->buckets = mem_alloc_array(MEM_KV_METADATA, (size_t)h->n_buckets, sizeof(int));
    if (!h->entries || !h->tokens || !h->buckets) {
        hash_chain_free(h);
        return err_set(err, "out of memory for a hash chain over %d blocks", n);
    }
    for (int b = 0; b < n; b++)
        h->entries[b] = (HashChainEntry){.next = -1, .older = -1, .newer = -1};
    for (int i = 0; i < h->n_buckets; i++)
        h->buckets[i] = -1;
    h->oldest = h->newest = -1;
    h->next_id = 1;
    return 0;
}

void hash_chain_free(HashChain *h)
{
    mem_free(h->entries);
    mem_free(h->tokens);
    mem_free(h->buckets);
    memset(h, 0, sizeof *h);
}

const int *hash_chain_tokens(const HashChain *h, int block)
{
    return h->tokens + (size_t)block * (size_t)h->block_size;
}

static int *bucket_of(HashChain *h, uint64_t key)
{
    return &h->buckets[key & (uint64_t)(h->n_buckets - 1)];
}

long hash_chain_register(HashChain *h, int block, uint64_t key, long parent_id, const int *tokens)
{
    HashChainEntry *e = &h->entries[block];
    int *bucket = bucket_of(h, key);
    e->key = key;
    e->parent_id = parent_id;
    e->id = h->next_id++;
    e->next = *bucket;
    *bucket = block;
    memcpy(h->tokens + (size_t)block * (size_t)h->block_size, tokens, (size_t)h->block_size * sizeof(int));
    h->n_registered++;
    return e->id;
}

void hash_chain_unregister(HashChain *h, int block)
{
    if (h->entries[block].id == 0)
        return; /* not registered: nothing to forget */
    int *link = bucket_of(h, h->entries[block].key);
    while (*link >= 0 && *link != block)
        link = &h->entries[*link].next;
    if (*link < 0)
        return;
    *link = h->entries[block].next;
    h->entries[block].next = -1;
    h->entries[block].id = 0;
    h->n_registered--;
}

/* ------------------------------------------------------------ the LRU queue */

/* A doubly linked list through the entries, oldest to newest: a hit takes
 * a block out of the middle in O(1), an eviction pops the oldest. */

void hash_chain_queue_push_newest(HashChain *h, int block)
{
    HashChainEntry *e = &h->entries[block];
    if (e->in_queue)
        return; /* a block is in the queue once */
    e->older = h->newest;
    e->newer = -1;
    e->in_queue = 1;
    if (h->newest >= 0)
        h->entries[h->newest].newer = block;
    else
        h->oldest = block;
    h->newest = block;
    h->n_queued++;
}

void hash_chain_queue_remove(HashChain *h, int block)
{
    HashChainEntry *e = &h->entries[block];
    if (!e->in_queue)
        return;
    if (e->older >= 0)
        h->entries[e->older].newer = e->newer;
    else
        h->oldest = e->newer;
    if (e->newer >= 0)
        h->entries[e->newer].older = e->older;
    else
        h->newest = e->older;
    e->older = e->newer = -1;
    e->in_queue = 0;
    h->n_queued--;
}
