/* The bug hunts' hidden tests (tests/lab/bughunt.c has the symptoms the
 * students see): they grade the fix, not the symptom. A fix that only
 * silences the symptom (a fully cached prompt that recomputes one row into
 * a shared block, a lock count set to 1 instead of the split node's, a
 * second LRU entry skipped instead of never made) fails here. The handout
 * leaves this folder out (book/instructors.md). */
#include <check.h>
#include <string.h>

#include "cached_pool.h"
#include "chunked_prefill.h"
#include "lab/grading.h"
#include "prefill_plan.h"
#include "radix_lock.h"

/* ------------------------------------------------------------ cached_prompt */

START_TEST(hidden_cached_prompt_plans_whole_blocks)
{
    /* Every prompt length 1..13, blocks of 4, with none, part or all of
     * its full blocks cached: the computed rows start on a block boundary
     * (never inside a shared block), at least one is computed, and a
     * partly cached prompt reuses every block it can. */
    int prompt[13] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9};
    for (int n = 1; n <= 13; n++)
        for (int cached_blocks = 0; cached_blocks <= n / 4; cached_blocks++) {
            PrefixCache c = {.n = 0};
            prefix_cache_add(&c, prompt, cached_blocks * 4, 4);
            PrefillPlan plan;
            ck_assert(prefill_plan(&c, prompt, n, 4, &plan) == 0);
            int want_reused = cached_blocks * 4 == n ? cached_blocks - 1 : cached_blocks;
            ck_assert_msg(plan.reused_blocks == want_reused && plan.first == want_reused * 4 &&
                              plan.count == n - plan.first && plan.logits_row == plan.count - 1,
                          "expected a %d-token prompt with %d of its blocks cached to reuse %d blocks and compute "
                          "positions %d..%d (logits row %d), got %d blocks, positions %d..%d, row %d; hint: "
                          "prefill_plan()",
                          n, cached_blocks, want_reused, want_reused * 4, n - 1, n - 1 - want_reused * 4,
                          plan.reused_blocks, plan.first, plan.first + plan.count - 1, plan.logits_row);
        }
}
END_TEST

/* ------------------------------------------------------------ preempt_chunk */

START_TEST(hidden_preempt_chunk_restarts_from_nothing)
{
    enum { BS = 4 };
    ChunkPool pool;
    ChunkSeq s = {.n_prompt = 10};
    Chunk c;
    chunk_pool_init(&pool, 4);
    ck_assert(chunk_next(&pool, &s, 6, BS, &c) == 6);
    chunk_done(&s, &c);
    ck_assert(chunk_next(&pool, &s, 6, BS, &c) == 4); /* scheduled, never done: preempted mid-chunk */
    chunk_preempt(&pool, &s);
    ck_assert_msg(s.n_computed == 0 && s.n_blocks == 0 && pool.n_free == 4,
                  "expected a preempted request to hold nothing and have nothing computed, with the pool whole, got "
                  "%d computed, %d blocks, %d free; hint: chunk_preempt()", s.n_computed, s.n_blocks, pool.n_free);
    ck_assert(chunk_next(&pool, &s, 6, BS, &c) == 6);
    ck_assert_msg(c.first == 0 && s.n_blocks == 2,
                  "expected the resumed request's first chunk to start at 0 in 2 new blocks, got %d and %d blocks; "
                  "hint: chunk_preempt()", c.first, s.n_blocks);
}
END_TEST

START_TEST(hidden_preempt_chunk_twice)
{
    /* Preempted after each of its first two chunks, the prompt still ends
     * with every position in its own slot, and the pool whole once freed. */
    enum { BS = 2, N = 7 };
    ChunkPool pool;
    ChunkSeq s = {.n_prompt = N};
    Chunk c;
    int kv[CHUNK_MAX_BLOCKS * BS];
    chunk_pool_init(&pool, 5);
    memset(kv, 0xff, sizeof kv);
    int steps = 0;
    while (chunk_next(&pool, &s, 3, BS, &c) > 0 && steps++ < 12) {
        for (int pos = c.first; pos < c.first + c.len; pos++) {
            int slot = chunk_slot(&s, pos, BS);
            if (slot >= 0)
                kv[slot] = pos;
        }
        chunk_done(&s, &c);
        if (steps <= 2) {
            chunk_preempt(&pool, &s);
            memset(kv, 0xff, sizeof kv);
        }
    }
    for (int pos = 0; pos < N; pos++) {
        int slot = chunk_slot(&s, pos, BS);
        ck_assert_msg(slot >= 0 && kv[slot] == pos,
                      "expected position %d's row in its slot after two preemptions, got slot %d; hint: "
                      "chunk_preempt()", pos, slot);
    }
    chunk_preempt(&pool, &s);
    ck_assert_msg(pool.n_free == 5, "expected all 5 blocks free at the end, got %d; hint: chunk_preempt()",
                  pool.n_free);
}
END_TEST

/* ------------------------------------------------------------ radix_refcount */

/* Every node's lock count must be the number of locks held at it or below. */
static void expect_lock_counts(const RadixTree *t, const int *locked, int n_locked, const char *when)
{
    for (int id = 1; id < RADIX_MAX_NODES; id++) {
        if (!t->nodes[id].in_use)
            continue;
        int want = 0;
        for (int i = 0; i < n_locked; i++)
            for (int up = locked[i]; up > 0; up = t->nodes[up].parent)
                want += up == id;
        ck_assert_msg(t->nodes[id].lock_ref == want,
                      "expected node %d (first token %d, %d tokens) to count %d lock(s) %s, got %d; hint: the lock "
                      "counts in radix_lock.c, where a node is split (split(), called by radix_match())",
                      id, t->nodes[id].tokens[0], t->nodes[id].n_tokens, want, when, t->nodes[id].lock_ref);
    }
}

START_TEST(hidden_radix_refcount_splits_keep_counts)
{
    RadixTree t;
    radix_init(&t);
    int a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {1, 2, 3, 9}, c[3] = {1, 7, 7};
    int locked[3], n_locked = 0, node;
    locked[n_locked] = radix_insert(&t, a, 6);
    radix_lock(&t, locked[n_locked++]);
    radix_lock(&t, locked[0]); /* A's two samples both hold it */
    locked[n_locked++] = locked[0];
    ck_assert(radix_match(&t, b, 4, &node) == 3);
    radix_lock(&t, node);
    locked[n_locked++] = node;
    expect_lock_counts(&t, locked, n_locked, "after one split");
    ck_assert(radix_match(&t, c, 3, &node) == 1); /* splits [1 2 3] after [1] */
    expect_lock_counts(&t, locked, n_locked, "after a second split above the first");
    radix_unlock(&t, locked[0]);
    radix_unlock(&t, locked[1]);
    expect_lock_counts(&t, locked + 2, 1, "after A's samples unlocked");
    radix_evict(&t, 1000);
    ck_assert_msg(radix_match(&t, b, 4, &node) == 3,
                  "expected the locked [1 2 3] to survive eviction; hint: the lock counts in radix_lock.c");
    radix_unlock(&t, locked[2]);
    expect_lock_counts(&t, NULL, 0, "once every request unlocked");
    ck_assert_msg(radix_evict(&t, 1000) == 3, "expected the 3 unlocked tokens left to be evicted; hint: radix_evict()");
}
END_TEST

/* ------------------------------------------------------------ evict_twice */

/* The pool's check after a step, with the step named. */
static void expect_pool_ok(const CachedPool *p, const char *step)
{
    char msg[200];
    ck_assert_msg(cpool_check(p, msg, (int)sizeof msg) == 0,
                  "expected the pool's accounting to hold %s, got \"%s\"; hint: cpool_retain() and cpool_release() "
                  "in cached_pool.c", step, msg);
}

START_TEST(hidden_evict_twice_hit_takes_block_off_the_lru)
{
    CachedPool p;
    cpool_init(&p, 3);
    int a = cpool_alloc(&p), b = cpool_alloc(&p);
    cpool_mark_cached(&p, a);
    cpool_mark_cached(&p, b);
    cpool_release(&p, a);
    cpool_release(&p, b);
    expect_pool_ok(&p, "after two cached blocks were released");
    cpool_retain(&p, a); /* a cache hit on an evictable block */
    expect_pool_ok(&p, "after a cache hit on an evictable block");
    ck_assert_msg(p.n_evictable == 1 && cpool_available(&p) == 2,
                  "expected a cache hit to take its block off the evictable list (1 left, 2 available), got %d and %d; "
                  "hint: cpool_retain()", p.n_evictable, cpool_available(&p));
    cpool_retain(&p, a); /* a second holder of a held block */
    expect_pool_ok(&p, "after a second holder took a held block");
    /* Every other block taken: the held one must never be handed out. */
    int x = cpool_alloc(&p), y = cpool_alloc(&p), z = cpool_alloc(&p);
    ck_assert_msg(x != a && y != a && z == -1,
                  "expected the two blocks not held, then -1, from a pool whose block %d is held, got %d, %d, %d; "
                  "hint: cpool_retain() and cpool_alloc()", a, x, y, z);
    cpool_release(&p, x);
    cpool_release(&p, y);
    cpool_release(&p, a);
    cpool_release(&p, a);
    expect_pool_ok(&p, "when every holder let go");
    ck_assert_msg(cpool_available(&p) == 3, "expected all 3 blocks available at the end, got %d; hint: cpool_release()",
                  cpool_available(&p));
}
END_TEST

void lab_hidden_tests(Suite *s)
{
    lab_add_test(s, hidden_cached_prompt_plans_whole_blocks, LAB_UNIT_S, 2, "prefill_plan()");
    lab_add_test(s, hidden_preempt_chunk_restarts_from_nothing, LAB_UNIT_S, 1, "chunk_preempt()");
    lab_add_test(s, hidden_preempt_chunk_twice, LAB_UNIT_S, 1, "chunk_preempt()");
    lab_add_test(s, hidden_radix_refcount_splits_keep_counts, LAB_UNIT_S, 2, "radix_lock.c");
    lab_add_test(s, hidden_evict_twice_hit_takes_block_off_the_lru, LAB_UNIT_S, 2, "cpool_retain()");
}
