/* The bug hunts (exercises/bughunt/NAME/): four working components, each
 * with one planted bug that real engines shipped. Each test below is the
 * symptom as a user met it: run `make lab CH=bughunt` (TEST=name for one),
 * read the failure, find the bug in the component the hint names, fix it.
 * An instructor's hidden tests (book/instructors.md) then grade the fix;
 * the symptom passing is necessary, not sufficient.
 *
 *   cached_prompt   prefill_plan.c      a prompt the prefix cache holds whole
 *   preempt_chunk   chunked_prefill.c   a preemption between a prompt's chunks
 *   radix_refcount  radix_lock.c        two requests sharing a radix tree's node
 *   evict_twice     cached_pool.c       a cache hit on a block nobody holds */
#include <check.h>
#include <string.h>

#include "cached_pool.h"
#include "chunked_prefill.h"
#include "lab/grading.h"
#include "prefill_plan.h"
#include "radix_lock.h"

/* ------------------------------------------------------------ cached_prompt */

START_TEST(cached_prompt_second_identical_request)
{
    /* Two users send the same 8-token prompt. The first one's prefill
     * caches both of its blocks; the second must still get a first token. */
    int prompt[8] = {5, 9, 2, 7, 7, 1, 3, 8};
    PrefixCache cache = {.n = 0};
    PrefillPlan first, second;
    ck_assert(prefill_plan(&cache, prompt, 8, 4, &first) == 0);
    ck_assert_msg(first.count == 8 && first.logits_row == 7,
                  "expected the first request to compute all 8 positions, got %d; hint: prefill_plan()", first.count);
    prefix_cache_add(&cache, prompt, 8, 4);
    ck_assert(prefill_plan(&cache, prompt, 8, 4, &second) == 0);
    ck_assert_msg(second.count >= 1 && second.logits_row >= 0 && second.logits_row < second.count,
                  "expected the second, identical request to compute at least one position, so that its first token "
                  "has logits to be sampled from, got %d positions and logits row %d; hint: prefill_plan() in "
                  "exercises/bughunt/cached_prompt/prefill_plan.c, for a prompt the cache holds whole",
                  second.count, second.logits_row);
}
END_TEST

/* ------------------------------------------------------------ preempt_chunk */

START_TEST(preempt_chunk_resumed_prompt_has_every_row)
{
    /* A 12-token prompt prefilled 4 tokens a step, blocks of 4. After two
     * chunks the request is preempted (another needed the blocks); it then
     * resumes. The engine writes each chunk's rows into their slots; at the
     * end, every position's slot must hold that position's row. */
    enum { BS = 4, N = 12, SLOTS = CHUNK_MAX_BLOCKS * BS };
    int kv[SLOTS]; /* [slot]: the position whose row the slot holds, -1 for none */
    ChunkPool pool;
    ChunkSeq s = {.n_prompt = N};
    Chunk c;
    chunk_pool_init(&pool, 6);
    for (int i = 0; i < SLOTS; i++)
        kv[i] = -1;
    int steps = 0, preempted = 0;
    while (chunk_next(&pool, &s, 4, BS, &c) > 0 && steps++ < 10) {
        for (int pos = c.first; pos < c.first + c.len; pos++) {
            int slot = chunk_slot(&s, pos, BS);
            if (slot >= 0)
                kv[slot] = pos;
        }
        chunk_done(&s, &c);
        if (steps == 2 && !preempted) {
            preempted = 1;
            chunk_preempt(&pool, &s);
            /* Another request takes the freed blocks and overwrites them. */
            for (int i = 0; i < SLOTS; i++)
                kv[i] = -1;
        }
    }
    for (int pos = 0; pos < N; pos++) {
        int slot = chunk_slot(&s, pos, BS);
        ck_assert_msg(slot >= 0 && kv[slot] == pos,
                      "expected position %d's K/V row in its slot once the resumed prompt is done, got %s (slot %d); "
                      "hint: chunk_next(), chunk_done() and chunk_preempt() in "
                      "exercises/bughunt/preempt_chunk/chunked_prefill.c, across a preemption",
                      pos, slot < 0 ? "no slot" : "another row or none", slot);
    }
}
END_TEST

/* ------------------------------------------------------------ radix_refcount */

START_TEST(radix_refcount_shared_prefix_survives_eviction)
{
    /* Request A caches and uses [1 2 3 4]. Request B arrives with [1 2 9]:
     * it matches [1 2] and locks it. A finishes; memory runs short and the
     * cache evicts all it can. B is still running: its [1 2] must stay. */
    RadixTree t;
    radix_init(&t);
    int a[4] = {1, 2, 3, 4}, b[3] = {1, 2, 9};
    int node_a = radix_insert(&t, a, 4);
    ck_assert(node_a > 0);
    radix_lock(&t, node_a);
    int node_b;
    int matched = radix_match(&t, b, 3, &node_b);
    ck_assert_msg(matched == 2, "expected B to match 2 tokens, got %d; hint: radix_match()", matched);
    radix_lock(&t, node_b);
    radix_unlock(&t, node_a);
    radix_evict(&t, 1000);
    int again;
    matched = radix_match(&t, b, 3, &again);
    ck_assert_msg(matched == 2,
                  "expected B's locked prefix [1 2] to survive eviction, got %d of its tokens left in the tree; hint: "
                  "the lock counts of radix_lock.c (radix_lock(), radix_unlock(), and the node a match splits off) in "
                  "exercises/bughunt/radix_refcount/radix_lock.c", matched);
}
END_TEST

/* ------------------------------------------------------------ evict_twice */

START_TEST(evict_twice_same_prompt_twice_then_idle)
{
    /* Request A's 2-block prompt is prefilled and cached, then A finishes.
     * Request B has the same prompt: both blocks are cache hits. B
     * finishes. The server is idle: the pool's check must pass. */
    CachedPool p;
    char msg[200];
    cpool_init(&p, 4);
    int blocks[2];
    for (int i = 0; i < 2; i++) {
        blocks[i] = cpool_alloc(&p);
        cpool_mark_cached(&p, blocks[i]);
    }
    for (int i = 0; i < 2; i++)
        cpool_release(&p, blocks[i]);
    for (int i = 0; i < 2; i++)
        cpool_retain(&p, blocks[i]);
    for (int i = 0; i < 2; i++)
        cpool_release(&p, blocks[i]);
    int rc = cpool_check(&p, msg, (int)sizeof msg);
    ck_assert_msg(rc == 0 && cpool_available(&p) == 4,
                  "expected the idle server's pool check to pass with 4 blocks available, got \"%s\" and %d "
                  "available; hint: cpool_retain(), cpool_release() and cpool_alloc() in "
                  "exercises/bughunt/evict_twice/cached_pool.c, for a cache hit",
                  rc == 0 ? "ok" : msg, cpool_available(&p));
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("bughunt");
    lab_add_test(s, cached_prompt_second_identical_request, LAB_UNIT_S, 1, "prefill_plan()");
    lab_add_test(s, preempt_chunk_resumed_prompt_has_every_row, LAB_UNIT_S, 1, "chunked_prefill.c");
    lab_add_test(s, radix_refcount_shared_prefix_survives_eviction, LAB_UNIT_S, 1, "radix_lock.c");
    lab_add_test(s, evict_twice_same_prompt_twice_then_idle, LAB_UNIT_S, 1, "cached_pool.c");
    return s;
}
