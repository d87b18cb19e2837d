/* Chapter 6 lab: eviction from a paged cache (exercises/ch06/, regions
 * ch06.drop, ch06.slide, ch06.heavy): one position out and its block back
 * to the pool once no row of it is held (window_drop_position()), the
 * sliding window's step with the sinks kept (window_slide()), and H2O's
 * choice of the heavy hitters (window_evict_heavy()); first on one
 * sequence you can follow by hand, then whole runs whose every step must
 * keep exactly what the policy promises, with the pool's books checked
 * after every step (paged_check_invariants()).
 *
 * The small cases run a few steps of chapter 6's server with a window too
 * wide to evict anything yet, then call your function on sequence 0.
 * window_slide() and window_evict_heavy() call your window_drop_position(),
 * as they must: pass its test first.
 *
 * Chapter 6 runs on chapter 4's pool: block_pool_alloc() and
 * block_pool_release() from lab 4 must work first. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "lab/grading.h"
#include "mem.h"
#include "paged.h"
#include "serving.h"
#include "window.h"

/* ------------------------------------------------------------ fixture */

/* Three requests that run (with --ignore-eos) to 60, 44 and 20 tokens. */
static const char *REQUESTS = "57\tab\n40\tthe end of it\n18\tx\n";

typedef struct {
    TestModel f;
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    WindowCache w;
    int steps;
} Win;

static void win_open(Win *x, int block_size, int window, int sinks, int heavy)
{
    Err err = {{0}};
    memset(x, 0, sizeof *x);
    test_model_synthetic(&x->f, TEST_SYNTH_GQA, 5);
    ck_assert(request_file_parse(&x->rf, REQUESTS, strlen(REQUESTS), "lab", &err) == 0);
    cli_defaults(&x->o);
    x->o.block_size = block_size;
    x->o.kv_budget = 1u << 20;
    WindowOptions wo = {.window = window, .sinks = sinks, .heavy = heavy, .ignore_eos = 1};
    wo.evict = heavy ? WINDOW_EVICT_H2O : WINDOW_EVICT_NONE;
    ck_assert_msg(serving_run_init(&x->run, &x->f.m, &x->f.t, &x->o, &x->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(window_check(&wo, &x->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(window_open(&x->w, &wo, &x->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_open(&x->run, &x->server, NULL, &err) == 0, "%s", err.msg);
    x->w.server = x->server;
    /* Chapter 6 builds on lab 4: without its allocator nothing below means anything. */
    BlockPool *p = &x->server->kv.pool;
    int b = block_pool_alloc(p);
    ck_assert_msg(b >= 0 && block_pool_release(p, b) == 0 && p->n_free == p->n_blocks,
                  "expected chapter 4's block_pool_alloc() and block_pool_release() to work, got block %d and %d "
                  "free of %d; hint: chapter 6 runs on chapter 4's pool: finish lab 4 first (make lab CH=4)",
                  b, p->n_free, p->n_blocks);
}

/* One step, then the pool's books (printed when broken). */
static void win_step(Win *x, const char *function)
{
    Err err = {{0}};
    ck_assert_msg(window_step(&x->w, &x->run, &err) == 0, "expected the step to run, got: %s; hint: %s", err.msg,
                  function);
    x->steps++;
    ck_assert_msg(paged_check_invariants(&x->server->kv.pool, &x->server->kv.tables, 0, stdout) == 0,
                  "expected the pool's books to hold after step %d, got the broken invariant printed above; hint: %s",
                  x->steps, function);
}

/* Steps until sequence 0 will write position @p next next (its n_cached). */
static void step_until(Win *x, int next)
{
    while (x->run.reqs[0].n_cached < next)
        win_step(x, "this happens before your function is called: finish lab 4 first");
    ck_assert_int_eq(x->run.reqs[0].n_cached, next);
}

static void win_close(Win *x)
{
    window_close(&x->w);
    paged_close(x->server);
    serving_run_free(&x->run);
    request_file_free(&x->rf);
    test_model_free(&x->f);
}

static const unsigned char *held_of(const Win *x, int seq)
{
    return x->w.held + (size_t)seq * x->w.seq_len;
}

static int rows_held(const Win *x, int seq, int logical)
{
    return x->w.rows_held[(size_t)seq * x->w.capacity + logical];
}

static int table_entry(const Win *x, int seq, int logical)
{
    return x->server->kv.tables.tables[seq].blocks[logical];
}

/* Checks that sequence 0 holds exactly the positions @p keep says, below @p next. */
static void expect_held(const Win *x, int next, const unsigned char *keep, const char *what, const char *hint)
{
    const unsigned char *held = held_of(x, 0);
    int want_n = 0;
    for (int pos = 0; pos < next; pos++) {
        ck_assert_msg(held[pos] == keep[pos], "expected position %d %s after %s, got it %s; hint: %s", pos,
                      keep[pos] ? "held" : "dropped", what, held[pos] ? "held" : "dropped", hint);
        want_n += keep[pos];
    }
    ck_assert_msg(x->w.n_held[0] == want_n, "expected n_held %d after %s, got %d; hint: %s", want_n, what,
                  x->w.n_held[0], hint);
}

/* ------------------------------------------------------------ drop */

#define DROP_HINT                                                                                                   \
    "window_drop_position() clears held[pos], takes one off n_held and off its block's rows_held, counts "        \
    "evicted, and gives the block back (window_return_block()) once its rows_held reaches 0, unless it is the "   \
    "block position next falls in"

START_TEST(drop_returns_a_block_with_its_last_row)
{
    Win x;
    win_open(&x, 4, 40, 0, 0); /* a window too wide to evict anything before position 40 */
    step_until(&x, 22);        /* positions 0..21 written: blocks 0..5, the last with rows 20, 21 */
    const BlockPool *p = &x.server->kv.pool;
    int free_before = p->n_free, block1 = table_entry(&x, 0, 1);
    long evicted = x.w.evicted, returned = x.w.blocks_returned;
    for (int pos = 4; pos < 7; pos++)
        window_drop_position(&x.w, &x.run, 0, pos, 22);
    unsigned char keep[22];
    memset(keep, 1, sizeof keep);
    keep[4] = keep[5] = keep[6] = 0;
    expect_held(&x, 22, keep, "dropping positions 4, 5 and 6", DROP_HINT);
    ck_assert_msg(rows_held(&x, 0, 1) == 1 && x.w.evicted == evicted + 3,
                  "expected block 1 to hold 1 row and 3 more positions evicted, got %d rows and %ld more; hint: "
                  DROP_HINT, rows_held(&x, 0, 1), x.w.evicted - evicted);
    ck_assert_msg(table_entry(&x, 0, 1) == block1 && p->n_free == free_before,
                  "expected block 1 (row 7 still held) to stay in the table, got entry %d and %d free blocks (were "
                  "%d); hint: " DROP_HINT, table_entry(&x, 0, 1), p->n_free, free_before);
    window_drop_position(&x.w, &x.run, 0, 7, 22);
    ck_assert_msg(table_entry(&x, 0, 1) == BLOCK_HOLE && p->n_free == free_before + 1 &&
                      x.w.blocks_returned == returned + 1 && p->ref_count[block1] == 0,
                  "expected block %d back in the pool and a hole in the table once row 7 went, got entry %d, %d free "
                  "(were %d), %ld returned, reference count %d; hint: " DROP_HINT,
                  block1, table_entry(&x, 0, 1), p->n_free, free_before, x.w.blocks_returned - returned,
                  p->ref_count[block1]);
    /* Block 5 holds rows 20 and 21, and position 22 goes into it next: it stays. */
    window_drop_position(&x.w, &x.run, 0, 20, 22);
    window_drop_position(&x.w, &x.run, 0, 21, 22);
    ck_assert_msg(table_entry(&x, 0, 5) != BLOCK_HOLE && p->n_free == free_before + 1,
                  "expected block 5 to stay when rows 20 and 21 go (position 22 is written into it next), got entry "
                  "%d and %d free; hint: " DROP_HINT, table_entry(&x, 0, 5), p->n_free);
    ck_assert_msg(paged_check_invariants(p, &x.server->kv.tables, 0, stdout) == 0,
                  "expected the pool's books to hold, got the broken invariant above; hint: " DROP_HINT);
    win_close(&x);
}
END_TEST

/* ------------------------------------------------------------ slide */

#define SLIDE_HINT                                                                                                  \
    "window_slide() drops every held position from window_start - 1 down, and stops at the sinks (the first "     \
    "opt.sinks positions stay) or at the first position not held (calls your window_drop_position(): pass "       \
    "drop_returns_a_block_with_its_last_row first)"

START_TEST(slide_drops_what_left_the_window_and_keeps_the_sinks)
{
    Win x;
    win_open(&x, 4, 40, 2, 0);
    step_until(&x, 22);
    const BlockPool *p = &x.server->kv.pool;
    int free_before = p->n_free;
    window_slide(&x.w, &x.run, 0, 14, 22);
    unsigned char keep[22];
    for (int pos = 0; pos < 22; pos++)
        keep[pos] = pos < 2 || pos >= 14;
    expect_held(&x, 22, keep, "window_slide(window_start 14) with 2 sinks", SLIDE_HINT);
    ck_assert_msg(p->n_free == free_before + 2 && table_entry(&x, 0, 1) == BLOCK_HOLE &&
                      table_entry(&x, 0, 2) == BLOCK_HOLE && table_entry(&x, 0, 0) != BLOCK_HOLE,
                  "expected blocks 1 and 2 (rows 4..11) back in the pool and block 0 (the sinks) kept, got %d more "
                  "free; hint: " SLIDE_HINT, p->n_free - free_before);
    /* The window moves on by two: 14 and 15 go, and block 3 with them. */
    window_slide(&x.w, &x.run, 0, 16, 22);
    keep[14] = keep[15] = 0;
    expect_held(&x, 22, keep, "window_slide(window_start 16) after window_slide(window_start 14)", SLIDE_HINT);
    ck_assert_msg(table_entry(&x, 0, 3) == BLOCK_HOLE && p->n_free == free_before + 3,
                  "expected block 3 back in the pool, got %d more free; hint: " SLIDE_HINT, p->n_free - free_before);
    ck_assert_msg(paged_check_invariants(p, &x.server->kv.tables, 0, stdout) == 0,
                  "expected the pool's books to hold, got the broken invariant above; hint: " SLIDE_HINT);
    win_close(&x);
}
END_TEST

/* ------------------------------------------------------------ heavy hitters */

#define HEAVY_HINT                                                                                                  \
    "window_evict_heavy() keeps, of the held positions from opt.sinks to window_start - 1, the opt.heavy with "   \
    "the highest window_heavy_score(), and drops the rest, the lowest first (of a tie the earlier goes, the "      \
    "later stays); it never touches the sinks or the window (calls your window_drop_position(): pass "            \
    "drop_returns_a_block_with_its_last_row first)"

START_TEST(heavy_keeps_the_highest_scores)
{
    Win x;
    win_open(&x, 4, 40, 2, 3);
    step_until(&x, 22);
    /* Scores of positions 2..15, by hand (head 0; the other heads 0):
     * 4 and 6 score highest; 9 and 10 tie for third: 10, the later, stays. */
    static const double scores[16] = {0, 0, 0.5, 0.125, 0.875, 0.25, 0.875, 0.1875,
                                      0.0625, 0.75, 0.75, 0.125, 0.0, 0.375, 0.625, 0.1875};
    for (int h = 0; h < x.w.n_heads; h++)
        for (int pos = 0; pos < x.w.seq_len; pos++)
            x.w.attn[((size_t)0 * x.w.n_heads + h) * x.w.seq_len + pos] = h == 0 && pos < 16 ? (float)scores[pos]
                                                                            : pos < 16 ? 0.0f : 1.0f;
    window_evict_heavy(&x.w, &x.run, 0, 16, 22);
    unsigned char keep[22];
    for (int pos = 0; pos < 22; pos++)
        keep[pos] = pos < 2 || pos >= 16 || pos == 4 || pos == 6 || pos == 10;
    expect_held(&x, 22, keep, "window_evict_heavy(window_start 16) with 2 sinks and 3 heavy hitters", HEAVY_HINT);
    ck_assert_msg(paged_check_invariants(&x.server->kv.pool, &x.server->kv.tables, 0, stdout) == 0,
                  "expected the pool's books to hold, got the broken invariant above; hint: " HEAVY_HINT);
    /* Nothing more to drop: a second call changes nothing. */
    window_evict_heavy(&x.w, &x.run, 0, 16, 22);
    expect_held(&x, 22, keep, "a second window_evict_heavy() with nothing more to drop", HEAVY_HINT);
    win_close(&x);
}
END_TEST

/* ------------------------------------------------------------ whole runs */

/* After a step, every running sequence that writes position n next holds
 * the sinks and n-N+1..n-1, and with @p exact nothing else; with h2o, H
 * others once that many have left the window, and they score at least as
 * much as every evicted one. */
static void expect_policy(const Win *x, int exact, const char *hint)
{
    const WindowOptions *o = &x->w.opt;
    for (int k = 0; k < x->server->n_running; k++) {
        int seq = x->server->running[k], n = x->run.reqs[seq].n_cached, others = 0;
        const unsigned char *held = held_of(x, seq);
        double kept_min = 1e300, evicted_max = -1.0;
        for (int pos = 0; pos < n; pos++) {
            int must = pos < o->sinks || pos > n - o->window;
            ck_assert_msg(held[pos] || !must, "expected step %d to keep position %d of request %d (sinks 0..%d, "
                          "window %d..%d), got it dropped; hint: %s", x->steps, pos, seq, o->sinks - 1,
                          n - o->window + 1, n, hint);
            ck_assert_msg(!exact || !held[pos] || must, "expected step %d to drop position %d of request %d (sinks "
                          "0..%d, window %d..%d), got it held; hint: %s", x->steps, pos, seq, o->sinks - 1,
                          n - o->window + 1, n, hint);
            if (must)
                continue;
            others += held[pos];
            double sc = o->heavy ? window_heavy_score(&x->w, seq, pos) : 0.0;
            if (held[pos] && sc < kept_min)
                kept_min = sc;
            if (!held[pos] && sc > evicted_max)
                evicted_max = sc;
        }
        if (!o->heavy)
            continue;
        int left = n - o->window + 1 - o->sinks; /* positions that left the window so far */
        ck_assert_msg(others == (left < o->heavy ? (left > 0 ? left : 0) : o->heavy),
                      "expected step %d to keep %d heavy hitters of request %d, got %d; hint: %s", x->steps,
                      left < o->heavy ? left : o->heavy, seq, others, hint);
        ck_assert_msg(kept_min >= evicted_max, "expected every heavy hitter kept to score at least as much as every "
                      "position dropped, got %g kept and %g dropped (request %d, step %d); hint: %s", kept_min,
                      evicted_max, seq, x->steps, hint);
    }
}

static void serve_checked(int block_size, int window, int sinks, int heavy, const char *hint)
{
    Win x;
    win_open(&x, block_size, window, sinks, heavy);
    while (serving_unfinished(&x.run)) {
        win_step(&x, hint);
        expect_policy(&x, heavy == 0, hint);
    }
    ck_assert_msg(x.w.evicted > 0 && (heavy || block_size > 4 || x.w.blocks_returned > 0),
                  "expected positions dropped and blocks returned, got %ld and %ld; hint: %s", x.w.evicted,
                  x.w.blocks_returned, hint);
    ck_assert_msg(paged_check_invariants(&x.server->kv.pool, &x.server->kv.tables, 1, stdout) == 0,
                  "expected every block back in the pool at the end, got the broken invariant above; hint: %s", hint);
    win_close(&x);
}

#define WINDOW_RUN                                                                                                  \
    "this test runs the whole chapter: window_slide() and window_drop_position() decide what goes; their tests "  \
    "above name the one at fault"
#define H2O_RUN                                                                                                     \
    "this test runs the whole chapter: window_evict_heavy() and window_drop_position() decide what goes; their "  \
    "tests above name the one at fault"

START_TEST(window_run_keeps_exactly_sinks_and_window)
{
    serve_checked(4, 10, 4, 0, WINDOW_RUN);
    serve_checked(1, 8, 0, 0, WINDOW_RUN);
    serve_checked(8, 13, 3, 0, WINDOW_RUN);
}
END_TEST

START_TEST(h2o_run_keeps_the_heavy_hitters)
{
    serve_checked(4, 6, 2, 5, H2O_RUN);
    serve_checked(2, 9, 0, 3, H2O_RUN);
}
END_TEST

Suite *lab_suite(void)
{
    Suite *s = suite_create("ch06");
    lab_add_test(s, drop_returns_a_block_with_its_last_row, LAB_RUN_S, 1, "window_drop_position()");
    lab_add_test(s, slide_drops_what_left_the_window_and_keeps_the_sinks, LAB_RUN_S, 1, "window_slide()");
    lab_add_test(s, heavy_keeps_the_highest_scores, LAB_RUN_S, 1, "window_evict_heavy()");
    lab_add_test(s, window_run_keeps_exactly_sinks_and_window, LAB_RUN_S, 2,
                 "chapter 6's server with window_slide() and window_drop_position()");
    lab_add_test(s, h2o_run_keeps_the_heavy_hitters, LAB_RUN_S, 2,
                 "chapter 6's server with window_evict_heavy() and window_drop_position()");
    return s;
}
