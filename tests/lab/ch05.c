/* Chapter 5 lab: the hash chain of a prefix cache and its LRU queue
 * (exercises/ch05/, regions ch05.keys, ch05.find, ch05.match, ch05.take,
 * ch05.release, ch05.evict), first on small cases you can check by hand,
 * then end to end: chapter 4's server with the cache above its pool must
 * give every request the tokens it gets alone, and save exactly the
 * prefill positions that shared full blocks allow.
 *
 * Each small case sets up what it needs with the project's own code (keys
 * registered with hash_chain_register(), parked blocks with
 * block_pool_park() and hash_chain_queue_push_newest()), never with another function of this
 * lab, so that its hint can only blame the function it tests (match calls
 * your hash_chain_find(), as it must: its tests say so).
 *
 * Chapter 5 runs on chapter 4's pool: block_pool_alloc() and
 * block_pool_release() from lab 4 must work first (every test says so
 * when they do not). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "lab/grading.h"
#include "mem.h"
#include "prefix.h"
#include "serving.h"
#include "synth.h"

/* ------------------------------------------------------------ fixture */

/* A pool of 8 blocks of 4 tokens (no K/V bytes: the cache never reads
 * them), some tables, and a hash chain over the pool. */
typedef struct {
    BlockPool pool;
    BlockTables bt;
    HashChain h;
} Lab;

static void lab_open(Lab *lab)
{
    Err err = {{0}};
    BlockShape shape = {.block_size = 4, .n_layers = 1, .kv_dim = 2, .elem_bytes = sizeof(float)};
    ck_assert(block_pool_init(&lab->pool, &shape, 8, 0, &err) == 0);
    ck_assert(block_tables_init(&lab->bt, 3, 8, &err) == 0);
    ck_assert(hash_chain_init(&lab->h, &lab->pool, &err) == 0);
    /* Chapter 5 builds on lab 4: without its allocator nothing below means anything. */
    int b = block_pool_alloc(&lab->pool);
    ck_assert_msg(b >= 0 && lab->pool.n_free == 7 && block_pool_release(&lab->pool, b) == 0 && lab->pool.n_free == 8,
                  "expected chapter 4's block_pool_alloc() and block_pool_release() to work, got block %d and %d free; "
                  "hint: chapter 5 runs on chapter 4's pool: finish lab 4 first (make lab CH=4)", b, lab->pool.n_free);
}

static void lab_close(Lab *lab)
{
    hash_chain_free(&lab->h);
    block_tables_free(&lab->bt);
    block_pool_free(&lab->pool);
}

/* Table t takes fresh blocks for n full blocks of @p tokens, each
 * registered in its chain (what the cache does as a request's blocks
 * fill). Returns the table; the keys it registered are in
 * lab->h.entries[block].key. */
static BlockTable *lab_cache_sequence(Lab *lab, int t, const int *tokens, int n)
{
    BlockTable *tab = &lab->bt.tables[t];
    ck_assert(block_table_grow(&lab->pool, tab, 4 * n) == 0);
    uint64_t key = HASH_CHAIN_ROOT_KEY;
    long registered = HASH_CHAIN_ROOT_ID; /* the block before: the chain's root at first */
    for (int i = 0; i < n; i++) {
        key = hash_block_key(key, tokens + 4 * i, 4);
        registered = hash_chain_register(&lab->h, tab->blocks[i], key, registered, tokens + 4 * i);
    }
    return tab;
}

/* The keys of a cached sequence's blocks, as lab_cache_sequence()
 * registered them (not your hash_chain_keys(): a match test must fail for
 * hash_chain_match() only). */
static void registered_keys(const Lab *lab, const BlockTable *t, int n, uint64_t *keys)
{
    for (int i = 0; i < n; i++)
        keys[i] = lab->h.entries[t->blocks[i]].key;
}

/* Parks a held, registered block at the newest end of the queue, as a
 * release does for the last holder (with the project's primitives, not
 * your hash_chain_release()). */
static void park(Lab *lab, int block)
{
    block_pool_park(&lab->pool, block);
    hash_chain_queue_push_newest(&lab->h, block);
}

/* Whether @p block can still be found in its bucket. */
static int in_its_bucket(const HashChain *h, int block)
{
    int first = h->buckets[h->entries[block].key & (uint64_t)(h->n_buckets - 1)];
    for (int b = first; b >= 0; b = h->entries[b].next)
        if (b == block)
            return 1;
    return 0;
}

/* ------------------------------------------------------------ keys */

START_TEST(keys_chain_every_full_block)
{
    int tokens[12] = {1, 5, 9, 2, 7, 7, 3, 8, 4, 4, 6, 0};
    uint64_t keys[4] = {0, 0, 0, 0};
    int n = hash_chain_keys(tokens, 12, 4, keys);
    ck_assert_int_eq(n, 3);
    uint64_t before = HASH_CHAIN_ROOT_KEY;
    for (int i = 0; i < 3; i++) {
        uint64_t want = hash_block_key(before, tokens + 4 * i, 4);
        ck_assert_msg(keys[i] == want,
                      "expected key %d = hash_block_key(key %d, tokens %d..%d, 4) = %016llx, got %016llx; hint: "
                      "hash_chain_keys() chains each key to the one before (HASH_CHAIN_ROOT_KEY for block 0) and "
                      "hashes the block's block_size tokens",
                      i, i - 1, 4 * i, 4 * i + 3, (unsigned long long)want, (unsigned long long)keys[i]);
        before = want;
    }
    uint64_t partial[4] = {0, 0, 0, 0};
    ck_assert_int_eq(hash_chain_keys(tokens, 11, 4, partial), 2);
    ck_assert_msg(partial[2] == 0, "expected no key for the partly filled last block (tokens 8..10), got %016llx; "
                  "hint: hash_chain_keys() keys full blocks only: n_tokens / block_size of them",
                  (unsigned long long)partial[2]);
    /* Same tokens in block 1, different block 0: block 1's K/V differ, so must its key. */
    int other[8] = {1, 5, 9, 3, 7, 7, 3, 8};
    uint64_t k2[2] = {0, 0};
    hash_chain_keys(other, 8, 4, k2);
    ck_assert_msg(k2[1] != keys[1], "expected different keys for block 1 after different blocks 0, got %016llx for "
                  "both; hint: in hash_chain_keys() a block's key depends on the key of the block before it",
                  (unsigned long long)k2[1]);
}
END_TEST

/* ------------------------------------------------------------ find */

START_TEST(find_accepts_only_the_exact_block)
{
    Lab lab;
    lab_open(&lab);
    int mine[4] = {3, 1, 4, 1}, theirs[4] = {2, 7, 1, 8};
    /* A deliberate collision: block 2 is registered under the key that
     * `theirs` hashes to, but it holds `mine`. (A 64-bit hash collides
     * rarely, but not never.) */
    uint64_t their_key = hash_block_key(HASH_CHAIN_ROOT_KEY, theirs, 4);
    ck_assert(block_table_grow(&lab.pool, &lab.bt.tables[0], 12) == 0);
    int b = lab.bt.tables[0].blocks[2];
    long id = hash_chain_register(&lab.h, b, their_key, HASH_CHAIN_ROOT_ID, mine);
    int got = hash_chain_find(&lab.h, their_key, HASH_CHAIN_ROOT_ID, theirs);
    ck_assert_msg(got == -1, "expected no block for tokens {2 7 1 8} (a block with their key holds {3 1 4 1}), got "
                  "%d; hint: hash_chain_find() compares the block's token ids, not just its key: a collision must "
                  "never give wrong K/V", got);
    got = hash_chain_find(&lab.h, their_key, HASH_CHAIN_ROOT_ID, mine);
    ck_assert_msg(got == b, "expected block %d for its own key, chain and tokens, got %d; hint: hash_chain_find() "
                  "walks the bucket of key & (n_buckets - 1) through entries[].next", b, got);
    got = hash_chain_find(&lab.h, their_key, id + 7, mine);
    ck_assert_msg(got == -1, "expected no block after another chain (parent %ld, the block's is %ld), got %d; hint: "
                  "hash_chain_find() also compares parent_id: equal tokens after a different prefix have other K/V",
                  id + 7, (long)HASH_CHAIN_ROOT_ID, got);
    /* A second block in the same bucket, registered after (so first in the chain), and the first found behind it. */
    int c = lab.bt.tables[0].blocks[0];
    uint64_t same_bucket = their_key + (uint64_t)lab.h.n_buckets;
    hash_chain_register(&lab.h, c, same_bucket, HASH_CHAIN_ROOT_ID, theirs);
    got = hash_chain_find(&lab.h, their_key, HASH_CHAIN_ROOT_ID, mine);
    ck_assert_msg(got == b, "expected block %d behind block %d in its bucket, got %d; hint: hash_chain_find() follows "
                  "the bucket's chain (entries[b].next) to its end, -1", b, c, got);
    got = hash_chain_find(&lab.h, same_bucket, HASH_CHAIN_ROOT_ID, theirs);
    ck_assert_msg(got == c, "expected block %d, got %d; hint: hash_chain_find()", c, got);
    lab_close(&lab);
}
END_TEST

/* ------------------------------------------------------------ match */

START_TEST(match_finds_the_longest_cached_run)
{
    Lab lab;
    lab_open(&lab);
    int s[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    const BlockTable *t = lab_cache_sequence(&lab, 0, s, 4);
    uint64_t keys[4];
    int blocks[5] = {-1, -1, -1, -1, -1};
    registered_keys(&lab, t, 4, keys);
    int n = hash_chain_match(&lab.h, s, 17, keys, blocks);
    ck_assert_msg(n == 4, "expected 4 cached blocks for a 17-token sequence whose 4 full blocks are cached, got %d; "
                  "hint: hash_chain_match() finds block i with keys[i], its tokens, and the registration number "
                  "(entries[].id) of block i - 1 as parent", n);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(blocks[i] == t->blocks[i], "expected block %d at logical block %d, got %d; hint: "
                      "hash_chain_match() writes the blocks in order", t->blocks[i], i, blocks[i]);
    n = hash_chain_match(&lab.h, s, 16, keys, blocks);
    ck_assert_msg(n == 3, "expected 3 blocks for the 16-token sequence, got %d: the 4th holds position 15, the last, "
                  "which must be computed for its logits; hint: hash_chain_match() takes at most "
                  "(n_tokens - 1) / block_size blocks", n);
    n = hash_chain_match(&lab.h, s, 7, keys, blocks);
    ck_assert_msg(n == 1, "expected 1 block for 7 tokens (the 2nd block is not full), got %d; hint: "
                  "hash_chain_match() never takes a partly filled block", n);
    lab_close(&lab);
}
END_TEST

START_TEST(match_stops_at_the_first_miss)
{
    Lab lab;
    lab_open(&lab);
    int s[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    const BlockTable *t = lab_cache_sequence(&lab, 0, s, 3);
    uint64_t keys[3];
    registered_keys(&lab, t, 3, keys);
    /* Block 1 is evicted: block 2 stays registered, but after block 0 the
     * sequence has to compute block 1, and block 2's rows are positions
     * 8-11, not 4-7. */
    int b1 = lab.bt.tables[0].blocks[1];
    hash_chain_unregister(&lab.h, b1);
    int blocks[4] = {-1, -1, -1, -1};
    int n = hash_chain_match(&lab.h, s, 13, keys, blocks);
    ck_assert_msg(n == 1 && blocks[1] == -1, "expected 1 block (the run ends where block 1 is missing), got %d with "
                  "blocks[1] = %d; hint: hash_chain_match() stops at the first block it cannot find", n, blocks[1]);
    /* A different block 0: nothing at all, though later tokens agree. */
    int other[13] = {9, 9, 9, 9, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    keys[0] = hash_block_key(HASH_CHAIN_ROOT_KEY, other, 4); /* later keys do not matter: block 0 misses */
    n = hash_chain_match(&lab.h, other, 13, keys, blocks);
    ck_assert_msg(n == 0, "expected no block for a sequence whose first block differs, got %d; hint: "
                  "hash_chain_match() starts at block 0 with parent HASH_CHAIN_ROOT_ID", n);
    lab_close(&lab);
}
END_TEST

/* ------------------------------------------------------------ release, take, evict */

static int freed[16], n_freed;
static void note_freed(void *ctx, int block)
{
    (void)ctx;
    freed[n_freed++] = block;
}

START_TEST(release_parks_cached_blocks_tail_first)
{
    Lab lab;
    lab_open(&lab);
    int s[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    BlockTable *t = lab_cache_sequence(&lab, 0, s, 3);
    ck_assert(block_table_grow(&lab.pool, t, 14) == 0); /* a 4th block, partly filled: never registered */
    int ids[4];
    memcpy(ids, t->blocks, sizeof ids);
    n_freed = 0;
    hash_chain_release(&lab.h, t, note_freed, NULL);
    ck_assert_msg(t->n_blocks == 0, "expected an empty table, got %d blocks; hint: hash_chain_release()", t->n_blocks);
    ck_assert_msg(lab.pool.n_parked == 3 && lab.h.n_queued == 3,
                  "expected the 3 registered blocks parked in the queue, got %d parked and %d queued; hint: "
                  "hash_chain_release() parks (block_pool_park()) and queues each registered block whose last holder "
                  "lets go", lab.pool.n_parked, lab.h.n_queued);
    ck_assert_msg(lab.pool.n_free == 5 && lab.pool.ref_count[ids[3]] == 0,
                  "expected the unregistered last block back on the free stack (5 free), got %d free; hint: "
                  "hash_chain_release() releases a block that holds nothing cached with block_pool_release()",
                  lab.pool.n_free);
    ck_assert_msg(n_freed == 4, "expected on_free for all 4 blocks, got %d calls; hint: hash_chain_release() calls "
                  "on_free for every block no table holds any more, parked or not", n_freed);
    ck_assert_msg(lab.h.oldest == ids[2] && lab.h.newest == ids[0],
                  "expected the queue oldest to newest: block %d (the tail), %d, %d (the head), got oldest %d and "
                  "newest %d; hint: hash_chain_release() lets go from the last block to the first, so that a "
                  "request's prefix is the last of it to be evicted", ids[2], ids[1], ids[0], lab.h.oldest,
                  lab.h.newest);
    lab_close(&lab);
}
END_TEST

START_TEST(release_keeps_blocks_others_hold)
{
    Lab lab;
    lab_open(&lab);
    int s[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    BlockTable *t = lab_cache_sequence(&lab, 0, s, 2);
    BlockTable *sharer = &lab.bt.tables[1];
    block_table_fork(&lab.pool, t, sharer);
    int b0 = t->blocks[0], b1 = t->blocks[1];
    n_freed = 0;
    hash_chain_release(&lab.h, sharer, note_freed, NULL);
    ck_assert_msg(lab.pool.ref_count[b0] == 1 && lab.pool.ref_count[b1] == 1 && lab.pool.n_parked == 0 &&
                      lab.h.n_queued == 0 && n_freed == 0,
                  "expected blocks the other table still holds to keep 1 holder each, unparked and unqueued, got "
                  "holders %d and %d, %d parked, %d queued, %d on_free calls; hint: hash_chain_release() parks a "
                  "block only when this was its last holder (ref_count 1)", lab.pool.ref_count[b0],
                  lab.pool.ref_count[b1], lab.pool.n_parked, lab.h.n_queued, n_freed);
    hash_chain_release(&lab.h, t, NULL, NULL);
    ck_assert_int_eq(lab.pool.n_parked, 2);
    lab_close(&lab);
}
END_TEST

START_TEST(take_gets_parked_blocks_out_of_the_queue)
{
    Lab lab;
    lab_open(&lab);
    int s[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    BlockTable *t = lab_cache_sequence(&lab, 0, s, 3);
    int ids[3];
    memcpy(ids, t->blocks, sizeof ids);
    for (int i = 2; i >= 0; i--) /* all three parked, tail first, as a release leaves them */
        park(&lab, ids[i]);
    t->n_blocks = 0;
    BlockTable *u = &lab.bt.tables[1];
    hash_chain_take(&lab.h, u, ids, 2); /* a hit on blocks 0 and 1 */
    ck_assert_msg(u->n_blocks == 2 && u->blocks[0] == ids[0] && u->blocks[1] == ids[1],
                  "expected the table to hold blocks %d and %d, got %d blocks; hint: hash_chain_take()", ids[0], ids[1],
                  u->n_blocks);
    ck_assert_msg(lab.pool.ref_count[ids[0]] == 1 && lab.pool.n_parked == 1,
                  "expected the taken blocks held once each and 1 block still parked, got %d holders and %d parked; "
                  "hint: hash_chain_take() gives a parked block its holder back with block_pool_hold_parked()",
                  lab.pool.ref_count[ids[0]], lab.pool.n_parked);
    ck_assert_msg(lab.h.n_queued == 1 && !lab.h.entries[ids[0]].in_queue && !lab.h.entries[ids[1]].in_queue &&
                      lab.h.oldest == ids[2] && lab.h.newest == ids[2],
                  "expected only block %d left in the LRU queue, got %d queued (oldest %d, newest %d); hint: "
                  "hash_chain_take() takes a hit block out of the queue (hash_chain_queue_remove()), or it could be "
                  "evicted while in use", ids[2], lab.h.n_queued, lab.h.oldest, lab.h.newest);
    /* A second request hits the same blocks while the first holds them. */
    BlockTable *w = &lab.bt.tables[2];
    hash_chain_take(&lab.h, w, ids, 2);
    ck_assert_msg(lab.pool.ref_count[ids[0]] == 2 && lab.pool.ref_count[ids[1]] == 2 && lab.pool.n_parked == 1,
                  "expected 2 holders of each block two tables took, got %d and %d (with %d parked); hint: "
                  "hash_chain_take() retains a block others hold (block_pool_retain())", lab.pool.ref_count[ids[0]],
                  lab.pool.ref_count[ids[1]], lab.pool.n_parked);
    ck_assert_msg(lab.h.n_queued == 1 && lab.h.oldest == ids[2],
                  "expected the queue to keep block %d alone, got %d queued; hint: hash_chain_take() leaves the "
                  "queue alone for a block others hold (it is not in it)", ids[2], lab.h.n_queued);
    lab_close(&lab);
}
END_TEST

/* Checks one eviction: @p want (the oldest parked block) went back to the
 * free stack, unregistered and out of the queue. */
static void expect_eviction(Lab *lab, int k, int want)
{
    int parked = lab->pool.n_parked, free_blocks = lab->pool.n_free;
    long evictions = lab->h.evictions;
    int got = hash_chain_evict(&lab->h);
    ck_assert_msg(got == want, "expected eviction %d to take block %d (least recently freed: the oldest end of the "
                  "queue), got %d; hint: hash_chain_evict() takes h->oldest", k, want, got);
    ck_assert_msg(lab->pool.n_parked == parked - 1 && lab->pool.n_free == free_blocks + 1 &&
                      lab->pool.free_stack[lab->pool.n_free - 1] == got,
                  "expected block %d back on the free stack (%d free, %d parked), got %d free, %d parked; hint: "
                  "hash_chain_evict() gives it back with block_pool_free_parked()", got, free_blocks + 1, parked - 1,
                  lab->pool.n_free, lab->pool.n_parked);
    ck_assert_msg(lab->h.entries[got].id == 0 && !in_its_bucket(&lab->h, got) && !lab->h.entries[got].in_queue,
                  "expected block %d unregistered and out of the queue, got id %ld, in queue %d; hint: "
                  "hash_chain_evict() unregisters the block (hash_chain_unregister()): its K/V are about to be "
                  "overwritten, so no lookup may find it", got, lab->h.entries[got].id, lab->h.entries[got].in_queue);
    ck_assert_msg(lab->h.evictions == evictions + 1, "expected %ld evictions counted, got %ld; hint: "
                  "hash_chain_evict() counts each one (h->evictions)", evictions + 1, lab->h.evictions);
}

START_TEST(evict_takes_the_least_recently_freed)
{
    Lab lab;
    lab_open(&lab);
    int a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[4] = {9, 9, 9, 9};
    BlockTable *ta = lab_cache_sequence(&lab, 0, a, 2), *tb = lab_cache_sequence(&lab, 1, b, 1);
    int a0 = ta->blocks[0], a1 = ta->blocks[1], b0 = tb->blocks[0];
    park(&lab, a1); /* a lets go, tail first */
    park(&lab, a0);
    park(&lab, b0); /* b0, freed last */
    ta->n_blocks = tb->n_blocks = 0;
    int want[3] = {a1, a0, b0};
    for (int k = 0; k < 3; k++)
        expect_eviction(&lab, k + 1, want[k]);
    ck_assert_msg(hash_chain_evict(&lab.h) == -1, "expected -1 from an empty queue; hint: hash_chain_evict()");
    lab_close(&lab);
}
END_TEST

/* Frees, hits and evictions interleaved: a block a request took and let go
 * again is freed anew, so it moves to the newest end; evictions always
 * take the oldest end, whatever came in after. */
START_TEST(evict_follows_frees_and_hits)
{
    Lab lab;
    lab_open(&lab);
    int x[4] = {1, 1, 1, 1}, y[4] = {2, 2, 2, 2}, z[4] = {3, 3, 3, 3}, w[4] = {4, 4, 4, 4};
    int bx = lab_cache_sequence(&lab, 0, x, 1)->blocks[0], by = lab_cache_sequence(&lab, 1, y, 1)->blocks[0];
    int bz = lab_cache_sequence(&lab, 2, z, 1)->blocks[0];
    park(&lab, bx);
    park(&lab, by);
    park(&lab, bz); /* queue, oldest first: x y z */
    expect_eviction(&lab, 1, bx);
    /* A hit on y (taken out of the queue, held), then y is let go again. */
    hash_chain_queue_remove(&lab.h, by);
    block_pool_hold_parked(&lab.pool, by);
    park(&lab, by); /* queue: z y */
    lab.bt.tables[0].n_blocks = 0;
    int bw = lab_cache_sequence(&lab, 0, w, 1)->blocks[0];
    park(&lab, bw); /* queue: z y w */
    expect_eviction(&lab, 2, bz);
    expect_eviction(&lab, 3, by);
    expect_eviction(&lab, 4, bw);
    ck_assert_msg(lab.h.oldest == -1 && lab.h.newest == -1 && lab.h.n_queued == 0,
                  "expected an empty queue after evicting every parked block, got oldest %d, newest %d, %d queued; "
                  "hint: hash_chain_evict() takes the block out of the queue (hash_chain_queue_remove())",
                  lab.h.oldest, lab.h.newest, lab.h.n_queued);
    lab_close(&lab);
}
END_TEST

/* ------------------------------------------------------------ radix tree */

/* A radix tree over a pool of 16 blocks of 4 tokens. Its blocks come from
 * your lab 4 block_pool_alloc() and join the tree with radix_insert() (the
 * project's), which splits an edge with your radix_split() only where a
 * path leaves an edge halfway: the first match test never needs one. */
typedef struct {
    BlockPool pool;
    RadixTree t;
} Radix;

static void radix_open(Radix *r)
{
    Err err = {{0}};
    BlockShape shape = {.block_size = 4, .n_layers = 1, .kv_dim = 2, .elem_bytes = sizeof(float)};
    ck_assert(block_pool_init(&r->pool, &shape, 16, 0, &err) == 0);
    ck_assert(radix_init(&r->t, &r->pool, &err) == 0);
    int b = block_pool_alloc(&r->pool);
    ck_assert_msg(b >= 0 && block_pool_release(&r->pool, b) == 0 && r->pool.n_free == 16,
                  "expected chapter 4's block_pool_alloc() and block_pool_release() to work, got block %d and %d free; "
                  "hint: chapter 5 runs on chapter 4's pool: finish lab 4 first (make lab CH=4)", b, r->pool.n_free);
}

static void radix_close(Radix *r)
{
    radix_free(&r->t);
    block_pool_free(&r->pool);
}

/* Token ids of block k of a path: block k of path p holds 100p + 4k .. +3. */
static void path_block(int path, int k, int *out)
{
    for (int i = 0; i < 4; i++)
        out[i] = 100 * path + 4 * k + i;
}

/* Adds block k of @p path after @p after (-1: the root); returns it. */
static int radix_add(Radix *r, int after, int path, int k)
{
    int tokens[4];
    path_block(path, k, tokens);
    int b = block_pool_alloc(&r->pool);
    ck_assert(b >= 0);
    int got = radix_insert(&r->t, after, b, tokens);
    ck_assert_int_eq(got, b);
    return b;
}

/* A query: the blocks (path, k) listed, then one more token. */
static int radix_query(const Radix *r, const int (*blocks)[2], int n, int extra, int *out)
{
    int tokens[64];
    for (int i = 0; i < n; i++)
        path_block(blocks[i][0], blocks[i][1], tokens + 4 * i);
    for (int i = 0; i < extra; i++)
        tokens[4 * n + i] = 999;
    return radix_match(&r->t, tokens, 4 * n + extra, out);
}

static void expect_match(const Radix *r, const char *what, const int (*query)[2], int n, int extra, const int *want,
                         int n_want, const char *hint)
{
    int got[16] = {0};
    int m = radix_query(r, query, n, extra, got);
    int same = m == n_want;
    for (int i = 0; same && i < m; i++)
        same = got[i] == want[i];
    ck_assert_msg(same, "expected %s to match %d blocks (first %d, last %d), got %d (first %d, last %d); hint: %s",
                  what, n_want, n_want ? want[0] : -1, n_want ? want[n_want - 1] : -1, m, m ? got[0] : -1,
                  m ? got[m - 1] : -1, hint);
}

#define RADIX_MATCH_HINT                                                                                            \
    "radix_match() starts at RADIX_ROOT, takes the child whose edge starts with the next block's tokens "         \
    "(radix_child_starting_with()), follows that edge's blocks while they hold the next tokens "                  \
    "(radix_same_tokens()), goes on to a child only after the whole edge, and never covers the last position: "   \
    "(n_tokens - 1) / block_size blocks at most"

START_TEST(radix_match_follows_the_edges_from_the_root)
{
    Radix r;
    radix_open(&r);
    /* Two edges below the root: path 1 (3 blocks), path 2 (2 blocks). */
    int a0 = radix_add(&r, -1, 1, 0), a1 = radix_add(&r, a0, 1, 1), a2 = radix_add(&r, a1, 1, 2);
    int c0 = radix_add(&r, -1, 2, 0), c1 = radix_add(&r, c0, 2, 1);
    ck_assert_msg(r.t.splits == 0 && r.t.n_nodes == 3, "the fixture needs no split");
    expect_match(&r, "path 1's three blocks and one token", (const int[][2]){{1, 0}, {1, 1}, {1, 2}}, 3, 1,
                 (const int[]){a0, a1, a2}, 3, RADIX_MATCH_HINT);
    expect_match(&r, "path 1's three blocks exactly (12 tokens: the last position must be computed)",
                 (const int[][2]){{1, 0}, {1, 1}, {1, 2}}, 3, 0, (const int[]){a0, a1}, 2, RADIX_MATCH_HINT);
    expect_match(&r, "path 1's first two blocks, then path 2's second", (const int[][2]){{1, 0}, {1, 1}, {2, 1}}, 3,
                 1, (const int[]){a0, a1}, 2, RADIX_MATCH_HINT);
    expect_match(&r, "path 2's two blocks and two tokens", (const int[][2]){{2, 0}, {2, 1}}, 2, 2,
                 (const int[]){c0, c1}, 2, RADIX_MATCH_HINT);
    expect_match(&r, "a first block no edge starts with", (const int[][2]){{3, 0}, {1, 1}}, 2, 1, NULL, 0,
                 RADIX_MATCH_HINT);
    expect_match(&r, "path 1's second block first", (const int[][2]){{1, 1}, {1, 2}}, 2, 1, NULL, 0,
                 RADIX_MATCH_HINT);
    radix_close(&r);
}
END_TEST

#define RADIX_SPLIT_HINT                                                                                            \
    "radix_split() takes a new node (radix_new_node()) below node; it gets block and every block after it on the " \
    "edge (their block_node), node's children (their parent), and is node's only child (next_sibling -1); the "   \
    "upper edge ends at block's predecessor (block_next -1, block_prev[block] -1), both n_blocks add up, splits " \
    "counts one more"

/* Node @p n's edge is exactly @p blocks, linked both ways and owned. */
static void expect_edge(const Radix *r, int n, const int *blocks, int count, const char *what)
{
    const RadixTree *t = &r->t;
    const RadixNode *node = &t->nodes[n];
    ck_assert_msg(node->first_block == blocks[0] && node->last_block == blocks[count - 1] && node->n_blocks == count,
                  "expected %s's edge to run from block %d to %d, %d blocks, got %d to %d, %d blocks; hint: "
                  RADIX_SPLIT_HINT, what, blocks[0], blocks[count - 1], count, node->first_block, node->last_block,
                  node->n_blocks);
    for (int i = 0; i < count; i++) {
        int b = blocks[i];
        ck_assert_msg(t->block_node[b] == n && t->block_prev[b] == (i ? blocks[i - 1] : -1) &&
                          t->block_next[b] == (i + 1 < count ? blocks[i + 1] : -1),
                      "expected block %d of %s's edge to be owned by node %d and linked to %d and %d, got node %d, "
                      "links %d and %d; hint: " RADIX_SPLIT_HINT, b, what, n, i ? blocks[i - 1] : -1,
                      i + 1 < count ? blocks[i + 1] : -1, t->block_node[b], t->block_prev[b], t->block_next[b]);
    }
}

/* The children of @p n, as a sorted list, and each one's parent. */
static int children_of(const Radix *r, int n, int *out)
{
    int k = 0;
    for (int c = r->t.nodes[n].first_child; c >= 0 && k < 8; c = r->t.nodes[c].next_sibling) {
        ck_assert_msg(r->t.nodes[c].parent == n, "expected node %d's child %d to have it as parent, got %d; hint: "
                      RADIX_SPLIT_HINT, n, c, r->t.nodes[c].parent);
        out[k++] = c;
    }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return k;
}

START_TEST(radix_split_moves_the_rest_and_the_children)
{
    Radix r;
    radix_open(&r);
    int a0 = radix_add(&r, -1, 1, 0), a1 = radix_add(&r, a0, 1, 1), a2 = radix_add(&r, a1, 1, 2),
        a3 = radix_add(&r, a2, 1, 3);
    int top = r.t.block_node[a0], nodes = r.t.n_nodes;
    radix_split(&r.t, top, a2);
    int kids[8];
    ck_assert_msg(children_of(&r, top, kids) == 1 && r.t.n_nodes == nodes + 1 && r.t.splits == 1,
                  "expected one new node, the only child of the split node, and 1 split, got %d children, %d nodes "
                  "(were %d), %ld splits; hint: " RADIX_SPLIT_HINT, children_of(&r, top, kids), r.t.n_nodes, nodes,
                  r.t.splits);
    int low = kids[0];
    expect_edge(&r, top, (const int[]){a0, a1}, 2, "the upper node");
    expect_edge(&r, low, (const int[]){a2, a3}, 2, "the new lower node");
    /* A path that leaves after a1 hangs below the upper node now. */
    int b2 = radix_add(&r, a1, 2, 2);
    int nb = r.t.block_node[b2];
    /* Split the upper node again, before a1: its two children move down. */
    radix_split(&r.t, top, a1);
    ck_assert_msg(children_of(&r, top, kids) == 1 && r.t.splits == 2,
                  "expected the split node to have one child after a second split, got %d; hint: " RADIX_SPLIT_HINT,
                  children_of(&r, top, kids));
    int mid = kids[0];
    expect_edge(&r, top, (const int[]){a0}, 1, "the upper node after the second split");
    expect_edge(&r, mid, (const int[]){a1}, 1, "the middle node");
    int want[2] = {low < nb ? low : nb, low < nb ? nb : low};
    ck_assert_msg(children_of(&r, mid, kids) == 2 && kids[0] == want[0] && kids[1] == want[1],
                  "expected the middle node to have the split node's two children (nodes %d and %d), got %d children; "
                  "hint: " RADIX_SPLIT_HINT, want[0], want[1], children_of(&r, mid, kids));
    expect_edge(&r, low, (const int[]){a2, a3}, 2, "the lowest node");
    radix_close(&r);
}
END_TEST

START_TEST(radix_match_descends_below_split_edges)
{
    Radix r;
    radix_open(&r);
    /* Path 1: 4 blocks; path 2 leaves it after block 1; path 3 after block 0;
     * path 4: 2 blocks, and path 5 leaves it after block 0. The tree:
     * [a0] -> {[a1] -> {[a2 a3], [b2 b3]}, [d1]}, [g0 g1] ... */
    int a0 = radix_add(&r, -1, 1, 0), a1 = radix_add(&r, a0, 1, 1), a2 = radix_add(&r, a1, 1, 2),
        a3 = radix_add(&r, a2, 1, 3);
    int b2 = radix_add(&r, a1, 2, 2), b3 = radix_add(&r, b2, 2, 3);
    int d1 = radix_add(&r, a0, 3, 1);
    int g0 = radix_add(&r, -1, 4, 0), g1 = radix_add(&r, g0, 4, 1), g2 = radix_add(&r, g1, 4, 2);
    int h2 = radix_add(&r, g1, 5, 2);
    (void)g2;
    const char *hint = RADIX_MATCH_HINT " (this tree was built with your radix_split(): pass its test first)";
    expect_match(&r, "path 1 whole", (const int[][2]){{1, 0}, {1, 1}, {1, 2}, {1, 3}}, 4, 1,
                 (const int[]){a0, a1, a2, a3}, 4, hint);
    expect_match(&r, "path 1's first two blocks, then path 2's last two", (const int[][2]){{1, 0}, {1, 1}, {2, 2},
                 {2, 3}}, 4, 1, (const int[]){a0, a1, b2, b3}, 4, hint);
    expect_match(&r, "path 1's first block, then path 3's", (const int[][2]){{1, 0}, {3, 1}}, 2, 1,
                 (const int[]){a0, d1}, 2, hint);
    expect_match(&r, "path 4's first block, then path 5's third (below the edge [g0 g1], not after g0)",
                 (const int[][2]){{4, 0}, {5, 2}}, 2, 1, (const int[]){g0}, 1, hint);
    expect_match(&r, "path 4's two blocks, then path 5's third", (const int[][2]){{4, 0}, {4, 1}, {5, 2}}, 3, 1,
                 (const int[]){g0, g1, h2}, 3, hint);
    expect_match(&r, "path 1's first two blocks, then path 2's third, then a miss",
                 (const int[][2]){{1, 0}, {1, 1}, {2, 2}, {6, 3}}, 4, 1, (const int[]){a0, a1, b2}, 3, hint);
    radix_close(&r);
}
END_TEST

/* ------------------------------------------------------------ end to end */

typedef struct {
    Model m;
    Tokenizer t;
    void *image, *tok_image;
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    PrefixCache *cache;
} Served;

static const ModelConfig CFG = {48, 96, 3, 6, 2, 400, 64};
static const char *SHARED = "20\tthe quick brown fox jumps over the lazy dog and then\n"
                            "12\tthe quick brown fox jumps over the lazy dog and now\n"
                            "30\tthe quick brown fox jumps over the lazy cat\n"
                            "9\tthe quick brown fox\n"
                            "40\tsomething else entirely\n"
                            "25\tthe quick brown fox jumps over the lazy dog and then\n";

static void serve_mode(Served *sv, int block_size, int blocks, PrefixCacheMode mode)
{
    memset(sv, 0, sizeof *sv);
    SynthSpec spec = {.cfg = CFG, .seed = 11};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &sv->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(CFG.vocab_size, &sv->tok_image, &tok_bytes, &err) == 0);
    ck_assert(model_open_image(&sv->m, sv->image, bytes, &err) == 0);
    ck_assert(tokenizer_open_image(&sv->t, sv->tok_image, tok_bytes, CFG.vocab_size, &err) == 0);
    ck_assert(request_file_parse(&sv->rf, SHARED, strlen(SHARED), "lab", &err) == 0);
    cli_defaults(&sv->o);
    sv->o.block_size = block_size;
    sv->o.watermark = 0;
    sv->o.kv_budget = (size_t)blocks * (size_t)block_size * model_kv_bytes_per_token(&CFG, sizeof(float));
    ck_assert(serving_run_init(&sv->run, &sv->m, &sv->t, &sv->o, &sv->rf, &err) == 0);
    /* prefix_serve(), step by step, the pool's books checked after every
     * step: a broken invariant is printed (paged_check_invariants()). */
    int rc = prefix_check(&sv->run, &err) || paged_open(&sv->run, &sv->server, NULL, &err) ||
             prefix_cache_open(sv->server, &sv->run, mode, &sv->cache, &err);
    while (rc == 0 && serving_unfinished(&sv->run)) {
        rc = paged_step(sv->server, &sv->run, &err);
        const PagedKv *kv = &sv->server->kv;
        ck_assert_msg(rc != 0 || paged_check_invariants(&kv->pool, &kv->tables, 0, stdout) == 0,
                      "expected the pool's books to hold after step %ld (every block free, held or parked), got "
                      "the broken invariant printed above; hint: hash_chain_take() unparks a block, "
                      "hash_chain_release() parks it when its last holder lets go, hash_chain_evict() frees a "
                      "parked one: their tests above name the one at fault", sv->run.step);
    }
    ck_assert_msg(rc == 0, "expected the server to finish every request, got: %s; hint: this test runs the whole "
                  "chapter: hash_chain_take(), hash_chain_release() and hash_chain_evict() keep the pool's books "
                  "(every block held, parked or free); their tests above name the one at fault", err.msg);
}

static void serve(Served *sv, int block_size, int blocks)
{
    serve_mode(sv, block_size, blocks, PREFIX_CACHE_HASH);
}

static void served_close(Served *sv)
{
    const BlockPool *p = &sv->server->kv.pool;
    const HashChain *queue = sv->cache->mode == PREFIX_CACHE_RADIX ? &sv->cache->radix.blocks : &sv->cache->hash;
    ck_assert_msg(p->n_free + p->n_parked == p->n_blocks && p->n_parked == queue->n_queued,
                  "expected every block free or parked in the queue at the end, got %d free, %d parked, %d queued of "
                  "%d; hint: this test runs the whole chapter: a block is parked and queued together, unparked and "
                  "dequeued together (the release, take and evict tests above name the function at fault)",
                  p->n_free, p->n_parked, queue->n_queued, p->n_blocks);
    prefix_cache_close(sv->cache);
    paged_close(sv->server);
    serving_run_free(&sv->run);
    request_file_free(&sv->rf);
    tokenizer_free(&sv->t);
    mem_free(sv->tok_image);
    mem_free(sv->image);
}

/* Each request's tokens when it runs alone: the same at every block size,
 * so computed once per test process. */
static int solo_tokens[8][80], n_solo_tokens[8], solo_known;

static void expect_solo_tokens(const Served *sv)
{
    ck_assert(sv->run.n_reqs <= 8);
    for (int i = 0; i < sv->run.n_reqs; i++) {
        const Request *r = &sv->run.reqs[i];
        if (!(solo_known & (1 << i))) {
            n_solo_tokens[i] = test_solo_tokens(&sv->m, &sv->t, r->spec->prompt, r->spec->max_new_tokens,
                                                solo_tokens[i]);
            solo_known |= 1 << i;
        }
        int n = n_solo_tokens[i];
        int same = n == r->n_tokens - r->n_prompt &&
                   memcmp(solo_tokens[i], r->tokens + r->n_prompt, (size_t)n * sizeof(int)) == 0;
        ck_assert_msg(same, "expected request %d (%d preemptions) to give its solo tokens, got different ones; hint: "
                      "this test runs the whole chapter: a cached block may be used only when its key, chain and "
                      "tokens agree (hash_chain_find(), hash_chain_match()), and never evicted while a table holds "
                      "it (hash_chain_take(), hash_chain_release(), hash_chain_evict()): their tests above name the "
                      "function at fault", r->spec->id, r->preemptions);
    }
}

/* The positions each request should find cached when all are admitted in
 * order at the first step: the full blocks of the longest prefix it
 * shares with an earlier request's prompt, and never its last position. */
static long expected_hits(const ServingRun *run, int bs)
{
    long total = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        int best = 0;
        for (int j = 0; j < i; j++) {
            const Request *q = &run->reqs[j];
            int common = 0;
            while (common < r->n_prompt && common < q->n_prompt && r->tokens[common] == q->tokens[common])
                common++;
            best = common > best ? common : best;
        }
        int blocks = best / bs, most = (r->n_prompt - 1) / bs;
        total += (long)(blocks < most ? blocks : most) * bs;
    }
    return total;
}

START_TEST(server_saves_exactly_the_shared_full_blocks)
{
    for (int bs = 1; bs <= 8; bs *= 2) {
        Served sv;
        serve(&sv, bs, 512 / bs);
        long want = expected_hits(&sv.run, bs), got = sv.cache->hit_tokens;
        ck_assert_msg(got == want, "expected %ld prompt positions found cached at block size %d, got %ld; hint: "
                      "this test runs the whole chapter: every full block an earlier prompt shares must be found, up "
                      "to the first that differs and never the last position (hash_chain_keys(), "
                      "hash_chain_match(); their tests above name the function at fault)", want, bs, got);
        expect_solo_tokens(&sv);
        served_close(&sv);
    }
}
END_TEST

START_TEST(server_gives_solo_tokens_while_evicting)
{
    Served sv;
    serve(&sv, 4, 20); /* 80 positions: room for the longest request and a little */
    ck_assert_msg(sv.cache->hash.evictions > 0 && sv.cache->hit_tokens > 0,
                  "expected hits and evictions in a pool of 20 blocks, got %ld hit positions and %ld evictions; "
                  "hint: this test runs the whole chapter: hash_chain_release() parks cached blocks, "
                  "hash_chain_evict() gives them back",
                  sv.cache->hit_tokens, sv.cache->hash.evictions);
    expect_solo_tokens(&sv);
    served_close(&sv);
}
END_TEST

START_TEST(radix_server_saves_what_the_hash_chain_saves)
{
    for (int bs = 1; bs <= 8; bs *= 2) {
        Served sv;
        serve_mode(&sv, bs, 512 / bs, PREFIX_CACHE_RADIX);
        long want = expected_hits(&sv.run, bs), got = sv.cache->hit_tokens;
        ck_assert_msg(got == want, "expected %ld prompt positions found cached by the radix tree at block size %d, "
                      "got %ld; hint: this test runs the whole chapter with --prefix-cache radix: radix_match() finds "
                      "every full block an earlier prompt shares, radix_split() lets paths branch (their tests above "
                      "name the function at fault)", want, bs, got);
        expect_solo_tokens(&sv);
        served_close(&sv);
    }
    Served sv;
    serve_mode(&sv, 4, 20, PREFIX_CACHE_RADIX); /* with evictions */
    expect_solo_tokens(&sv);
    served_close(&sv);
}
END_TEST

/* What the end-to-end tests exercise. */
#define WHOLE_CHAPTER "chapter 4's server with your hash chain above its pool (every function of the lab)"

Suite *lab_suite(void)
{
    Suite *s = suite_create("ch05");
    lab_add_test(s, keys_chain_every_full_block, LAB_UNIT_S, 1, "hash_chain_keys()");
    lab_add_test(s, find_accepts_only_the_exact_block, LAB_UNIT_S, 1, "hash_chain_find()");
    lab_add_test(s, match_finds_the_longest_cached_run, LAB_UNIT_S, 1,
                 "hash_chain_match() (with your hash_chain_find(): pass its test first)");
    lab_add_test(s, match_stops_at_the_first_miss, LAB_UNIT_S, 1,
                 "hash_chain_match() (with your hash_chain_find(): pass its test first)");
    lab_add_test(s, release_parks_cached_blocks_tail_first, LAB_UNIT_S, 1, "hash_chain_release()");
    lab_add_test(s, release_keeps_blocks_others_hold, LAB_UNIT_S, 1, "hash_chain_release()");
    lab_add_test(s, take_gets_parked_blocks_out_of_the_queue, LAB_UNIT_S, 1, "hash_chain_take()");
    lab_add_test(s, evict_takes_the_least_recently_freed, LAB_UNIT_S, 1, "hash_chain_evict()");
    lab_add_test(s, evict_follows_frees_and_hits, LAB_UNIT_S, 1, "hash_chain_evict()");
    lab_add_test(s, radix_match_follows_the_edges_from_the_root, LAB_UNIT_S, 1, "radix_match()");
    lab_add_test(s, radix_split_moves_the_rest_and_the_children, LAB_UNIT_S, 1, "radix_split()");
    lab_add_test(s, radix_match_descends_below_split_edges, LAB_UNIT_S, 1,
                 "radix_match() (the tree is built with your radix_split(): pass its test first)");
    lab_add_test(s, server_saves_exactly_the_shared_full_blocks, LAB_RUN_S, 2, WHOLE_CHAPTER);
    lab_add_test(s, server_gives_solo_tokens_while_evicting, LAB_RUN_S, 2, WHOLE_CHAPTER);
    lab_add_test(s, radix_server_saves_what_the_hash_chain_saves, LAB_RUN_S, 2,
                 "chapter 4's server with your radix tree above its pool (radix_match(), radix_split())");
    return s;
}
