/* Chapter 4's scheduler options: the token budget with chunked prefill
 * (--max-num-batched-tokens, --max-num-seqs) and preemption by swapping
 * (--preempt swap, --swap-space). Every budget from 1 up, with and
 * without forced preemption, recomputing or swapping, gives every request
 * its solo tokens; no step exceeds the budget; a prompt in chunks samples
 * only after its last chunk; shared blocks are swapped once and keep their
 * reference counts; swapped bytes are blocks x block bytes; the program
 * refuses impossible combinations in one line. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "mem.h"
#include "ext/budget.h"
#include "ext/swap.h"
#include "paged.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ fixtures */

static size_t per_token(const TestModel *f)
{
    return model_kv_bytes_per_token(&f->m.cfg, sizeof(float));
}

static CliOptions options(int block_size, size_t kv_budget, int budget, const char *preempt, size_t swap_space)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = block_size;
    o.kv_budget = kv_budget;
    o.watermark = 0;
    o.max_num_batched_tokens = budget;
    o.preempt = preempt;
    o.swap_space = swap_space;
    return o;
}

/* What every step did, seen by the run's observer after the step's
 * accounting: the largest batch, and per request the logits rows it got
 * and the step of its first one. */
typedef struct {
    int max_entries;
    long steps;
    int rows[16];          /* logits rows each request got */
    long first_row[16];    /* step of its first logits row, or -1 */
    int chunk_steps[16];   /* steps that fed it positions without a logits row */
} StepWatch;

static void watch_step(void *ctx, const ServingRun *run)
{
    StepWatch *w = ctx;
    if (run->n_entries > w->max_entries)
        w->max_entries = run->n_entries;
    w->steps++;
    int fed[16] = {0}, with_row[16] = {0};
    for (int i = 0; i < run->n_entries; i++) {
        const BatchEntry *e = &run->entries[i];
        if (e->seq >= 16)
            continue;
        fed[e->seq] = 1;
        if (e->logits_row >= 0) {
            with_row[e->seq] = 1;
            w->rows[e->seq]++;
            if (w->first_row[e->seq] < 0)
                w->first_row[e->seq] = run->step;
        }
    }
    for (int i = 0; i < 16; i++)
        w->chunk_steps[i] += fed[i] && !with_row[i];
}

/* A run, left open so that its server can be looked at. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    StepWatch watch;
} Run;

static void run_open(Run *r, const TestModel *f, const char *requests, CliOptions o)
{
    Err err = {{0}};
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 16; i++)
        r->watch.first_row[i] = -1;
    ck_assert_msg(request_file_parse(&r->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    r->o = o;
    ck_assert_msg(serving_run_init(&r->run, &f->m, &f->t, &r->o, &r->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(serving_add_observer(&r->run, watch_step, &r->watch, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_serve(&r->run, &r->server, NULL, &err) == 0,
                  "budget %d, block size %d, preempt %s, KV budget %zu: %s", o.max_num_batched_tokens, o.block_size,
                  o.preempt ? o.preempt : "-", o.kv_budget, err.msg);
}

/* Every block back in the pool and in the swap space, nothing leaked. */
static void run_close(Run *r)
{
    PagedServer *s = r->server;
    ck_assert_int_eq(s->kv.pool.n_free, s->kv.pool.n_blocks);
    if (s->swap)
        ck_assert_msg(s->swap->n_free == s->swap->n_slots, "%d of %d swap blocks still held",
                      s->swap->n_slots - s->swap->n_free, s->swap->n_slots);
    paged_close(r->server);
    serving_run_free(&r->run);
    request_file_free(&r->rf);
    for (int p = 0; p < MEM_PLACE_COUNT; p++) {
        ck_assert_uint_eq(mem_current(MEM_KV, (MemPlace)p), 0);
        ck_assert_uint_eq(mem_current(MEM_KV_METADATA, (MemPlace)p), 0);
    }
}

/* Each request's solo tokens (a contiguous cache, nothing of the paged
 * code, tests/helpers.c), greedy. */
static void solo_open(TestSolo *solo, const TestModel *f, const char *requests)
{
    CliOptions greedy = options(4, 0, 0, NULL, 0);
    test_solo_of_requests(solo, &f->m, &f->t, requests, &greedy);
}

/* Prompts from 1 to 26 tokens (BOS included), one that reaches seq_len. */
static const char *REQUESTS = "5\tab\n"
                              "30\tthe end of it\n"
                              "12\tx\n"
                              "70\tlong enough to reach seq len\n"
                              "20\ta b c d e f g h i j k l m n o p\n"
                              "9\tzz\n"
                              "4\tabcdefghijklmnopqrstuvwxyz\n"
                              "40\tmore words here\n";

/* ------------------------------------------------------------ serving_feed_upto */

START_TEST(a_chunk_gets_no_logits_row)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    RequestFile rf;
    Err err = {{0}};
    const char *text = "4\tabcdefghijklmnopqrstuvwxyz\n";
    ck_assert(request_file_parse(&rf, text, strlen(text), "t", &err) == 0);
    CliOptions o = options(4, 0, 0, NULL, 0);
    ServingRun run;
    ck_assert(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0);
    ck_assert(serving_open_steps(&run, 16, 1, &err) == 0);
    Request *r = &run.reqs[0];
    ck_assert_int_eq(r->n_prompt, 26);
    serving_step_begin(&run);
    r->phase = REQ_RUNNING;
    ck_assert_int_eq(serving_feed_upto(&run, r, 4, &err), 0);
    ck_assert_int_eq(run.n_entries, 4);
    ck_assert_int_eq(run.n_logits, 0);
    ck_assert_int_eq(run.n_takers, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(run.entries[i].logits_row, -1);
    r->n_cached = 4; /* as if the step had run */
    ck_assert_int_eq(serving_feed_upto(&run, r, 9, &err), 0);
    ck_assert_int_eq(run.n_entries, 9);
    ck_assert_int_eq(run.entries[4].pos, 4);
    ck_assert_int_eq(run.entries[8].logits_row, -1);
    ck_assert_int_eq(run.n_takers, 0);
    r->n_cached = 9;
    ck_assert_int_eq(serving_feed_upto(&run, r, 26, &err), -1); /* 17 more do not fit a step of 16 */
    ck_assert_int_eq(serving_feed_upto(&run, r, 16, &err), 0);
    r->n_cached = 16;
    run.n_entries = 0; /* a new step */
    ck_assert_int_eq(serving_feed_upto(&run, r, 26, &err), 0);
    ck_assert_int_eq(run.n_entries, 10);
    ck_assert_int_eq(run.entries[9].pos, 25);
    ck_assert_int_eq(run.entries[9].logits_row, 0); /* the prompt's last position picks the next token */
    ck_assert_int_eq(run.n_takers, 1);
    r->n_cached = 26;
    ck_assert_int_eq(serving_feed_upto(&run, r, 26, &err), -1); /* nothing left without K/V */
    ck_assert_int_eq(serving_feed_upto(&run, r, 27, &err), -1); /* past the request's tokens */
    serving_run_free(&run);
    request_file_free(&rf);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ chunked prefill by hand */

START_TEST(prompt_in_chunks_behind_decodes)
{
    /* Budget 8, block size 4. A: 3-token prompt, 30 new; B: 26-token
     * prompt, 4 new. By hand:
     *   step 0  A's prompt (3) and B's first chunk, positions 0-4 (5)
     *   step 1  A decodes (1); B 5-11 (7)
     *   step 2  A decodes; B 12-18
     *   step 3  A decodes; B 19-25: B's last chunk gets B's first logits row
     *   step 4- A and B decode; B takes its 4th token at step 6, A its 30th at 29.
     * So decodes shared steps 1-3 with 7 prompt positions each; the first
     * token came after 1 step for A, 4 for B; no step over 8 tokens. */
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "30\tab\n4\tabcdefghijklmnopqrstuvwxyz\n";
    TestSolo solo;
    solo_open(&solo, &f, requests);
    Run r;
    run_open(&r, &f, requests, options(4, 0, 8, NULL, 0));
    const Request *a = &r.run.reqs[0], *b = &r.run.reqs[1];
    ck_assert_int_eq(a->n_prompt, 3);
    ck_assert_int_eq(b->n_prompt, 26);
    test_expect_solo(&solo, &r.run, 0, "budget 8");
    ck_assert_int_eq(r.watch.chunk_steps[1], 3);
    ck_assert_int_eq(r.watch.first_row[1], 3);
    ck_assert_int_eq(r.watch.first_row[0], 0);
    ck_assert_int_eq(r.watch.rows[0], 30);
    ck_assert_int_eq(r.watch.rows[1], 4);
    ck_assert_int_eq(b->finished_step, 6);
    ck_assert_int_eq(a->finished_step, 29);
    ck_assert_int_eq(r.watch.max_entries, 8);
    const PagedBudget *sc = r.server->budget;
    ck_assert_ptr_nonnull(sc);
    ck_assert_int_eq(sc->max_step_tokens, 8);
    ck_assert_int_eq(sc->steps_mixed, 3);
    ck_assert_int_eq(sc->max_prompt_beside_decodes, 7);
    /* Step 3: A's decode at position 5 reads 6 positions, B's chunk 19-25
     * reads 20 + ... + 26. */
    ck_assert_int_eq(sc->max_step_kv_reads, 6 + (20 + 26) * 7 / 2);
    long lo, hi;
    double mid;
    ck_assert_int_eq(budget_first_token_steps(r.server, &r.run, &lo, &mid, &hi), 2);
    ck_assert_int_eq(lo, 1);
    ck_assert_int_eq(hi, 4);
    ck_assert_double_eq(mid, 2.5);
    run_close(&r);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

START_TEST(forks_wait_for_the_last_chunk)
{
    /* Two samples of a 26-token prompt, budget 8, block size 4: the prompt
     * runs once, in chunks of 8, 8, 8 and 2 (steps 0-3); the second sample
     * waits, then shares all 7 blocks and samples from the same logits row
     * at step 3. Both write position 26 into the shared 7th block at step
     * 4: one copy-on-write. */
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "6\tabcdefghijklmnopqrstuvwxyz\n";
    CliOptions o = options(4, 0, 8, NULL, 0);
    o.n_samples = 2;
    o.temperature = 0.9f;
    o.seed = 5;
    Run r;
    run_open(&r, &f, requests, o);
    TestSolo solo;
    test_solo_open(&solo, &f.m, &f.t, &r.run);
    test_expect_solo(&solo, &r.run, 0, "--n 2 in chunks of 8");
    test_solo_close(&solo);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(r.run.reqs[k].admitted_step, 0);
    ck_assert_int_eq(r.watch.chunk_steps[0], 3);
    ck_assert_int_eq(r.watch.first_row[0], 3);
    ck_assert_int_eq(r.watch.first_row[1], 4); /* its first own row: its first decode */
    ck_assert_int_eq(r.watch.chunk_steps[1], 0); /* it never fed the prompt */
    ck_assert_int_eq(r.server->cow_copies, 1);
    ck_assert_int_eq(r.server->blocks_saved_peak, 7);
    run_close(&r);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ every budget */

/* Every budget from 1 to 24 and a few larger ones, three block sizes, a
 * roomy pool and one so tight that requests are preempted again and
 * again, recomputing, swapping, and swapping into a swap space too small
 * for all of them: every request its solo tokens, and no step above the
 * budget. */
START_TEST(same_tokens_every_budget)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo;
    solo_open(&solo, &f, REQUESTS);
    static const int block_sizes[] = {1, 4, 16};
    int budgets[40], n_budgets = 0;
    for (int b = 1; b <= 24; b++)
        budgets[n_budgets++] = b;
    budgets[n_budgets++] = 33;
    budgets[n_budgets++] = 64;
    budgets[n_budgets++] = 100;
    budgets[n_budgets++] = 1000;
    long preemptions = 0, swaps = 0, fallbacks = 0;
    for (int k = 0; k < 3; k++) {
        int bs = block_sizes[k];
        size_t tight = (size_t)block_count_for_tokens(72, bs) * (size_t)bs * per_token(&f);
        size_t pools[2] = {(size_t)64 * 16 * per_token(&f), tight};
        for (int b = 0; b < n_budgets; b++)
            for (int p = 0; p < 2; p++)
                for (int mode = 0; mode < 3; mode++) {
                    static const char *const modes[] = {"recompute", "swap", "swap"};
                    size_t swap_space = mode == 2 ? (size_t)bs * 2 * per_token(&f) : 0; /* 2 blocks */
                    Run r;
                    run_open(&r, &f, REQUESTS, options(bs, pools[p], budgets[b], modes[mode], swap_space));
                    char what[96];
                    snprintf(what, sizeof what, "budget %d, block size %d, %s pool, %s%s", budgets[b], bs,
                             p ? "tight" : "roomy", modes[mode], mode == 2 ? " into 2 blocks" : "");
                    test_expect_solo(&solo, &r.run, 0, what);
                    ck_assert_msg(r.watch.max_entries <= budgets[b], "%s: a step of %d tokens", what,
                                  r.watch.max_entries);
                    ck_assert_int_eq(r.server->budget->max_step_tokens, r.watch.max_entries);
                    if (p == 0)
                        ck_assert_int_eq(r.server->preemptions, 0);
                    preemptions += r.server->preemptions;
                    swaps += r.server->swap ? r.server->swap->swaps_out : 0;
                    fallbacks += r.server->swap ? r.server->swap->swap_fallbacks : 0;
                    run_close(&r);
                }
    }
    ck_assert_msg(preemptions > 1000 && swaps > 300 && fallbacks > 300,
                  "the tight pools should preempt often, swap, and fill the small swap space: %ld preemptions, %ld "
                  "swaps, %ld fallbacks", preemptions, swaps, fallbacks);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

START_TEST(budget_caps_running_requests)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo;
    solo_open(&solo, &f, REQUESTS);
    /* A budget of 3 tokens lets 3 requests run (each may need a decode
     * token every step); --max-num-seqs 2 lowers that to 2, and without a
     * budget caps whole-prompt scheduling the same way. */
    int budgets[] = {3, 3, 0}, seqs[] = {0, 2, 2}, expect[] = {3, 2, 2};
    for (int k = 0; k < 3; k++) {
        CliOptions o = options(4, 0, budgets[k], NULL, 0);
        o.max_num_seqs = seqs[k];
        Run r;
        run_open(&r, &f, REQUESTS, o);
        test_expect_solo(&solo, &r.run, 0, "capped");
        ck_assert_int_eq(r.run.max_concurrent, expect[k]);
        ck_assert_int_eq(budget_max_running(r.server, &r.run), expect[k]);
        ck_assert_int_le(r.watch.max_entries, budgets[k] ? budgets[k] : 2048);
        run_close(&r);
    }
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ swapping */

/* The same preemptions, whether they recompute or swap (the budget is not
 * what limits admission here, so both make the same decisions): swapping
 * moves out exactly the blocks recomputation frees, and all of them back;
 * each moved block is one block of bytes; the swap space is its own place
 * in the ledger. */
START_TEST(swap_moves_what_recomputation_frees)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo;
    solo_open(&solo, &f, REQUESTS);
    int bs = 4;
    size_t tight = (size_t)block_count_for_tokens(72, bs) * (size_t)bs * per_token(&f);
    Run r;
    run_open(&r, &f, REQUESTS, options(bs, tight, 0, "recompute", 0));
    test_expect_solo(&solo, &r.run, 0, "recompute");
    PagedBudget a = *r.server->budget; /* its numbers */
    long preemptions = r.server->preemptions;
    run_close(&r);
    ck_assert_int_gt(preemptions, 5);

    run_open(&r, &f, REQUESTS, options(bs, tight, 0, "swap", 0));
    const PagedBudget *b = r.server->budget;
    const SwapSpace *sw = r.server->swap;
    test_expect_solo(&solo, &r.run, 0, "swap");
    ck_assert_int_eq(r.server->preemptions, preemptions);
    ck_assert_int_eq(sw->swaps_out, preemptions);
    ck_assert_int_eq(sw->swaps_in, sw->swaps_out);
    ck_assert_int_eq(sw->swap_fallbacks, 0);
    ck_assert_int_eq(b->recomputed_tokens, 0);
    ck_assert_int_eq(sw->swap_blocks_out, a.recompute_blocks);
    ck_assert_int_eq(sw->swap_blocks_in, sw->swap_blocks_out);
    ck_assert_int_eq(sw->swapped_tokens, a.recomputed_tokens);
    ck_assert_double_eq(sw->swapped_flops, a.recompute_flops);
    /* Recomputation feeds every dropped position again; a swap-in feeds
     * only what was never computed. */
    ck_assert_int_gt(a.max_step_kv_reads, b->max_step_kv_reads);
    /* The default swap space is as large as the KV budget, and it is
     * counted at MEM_SWAP, not on the host. */
    size_t block = r.server->kv.pool.bytes_per_block;
    ck_assert_int_eq(sw->n_slots, r.server->kv.pool.n_blocks);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_SWAP), (size_t)sw->n_slots * block);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), (size_t)r.server->kv.pool.n_blocks * block);
    ck_assert_uint_gt(mem_current(MEM_KV_METADATA, MEM_SWAP), 0);
    run_close(&r);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

START_TEST(full_swap_space_falls_back_to_recomputation)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo;
    solo_open(&solo, &f, REQUESTS);
    int bs = 4;
    size_t tight = (size_t)block_count_for_tokens(72, bs) * (size_t)bs * per_token(&f);
    Run r;
    run_open(&r, &f, REQUESTS, options(bs, tight, 0, "swap", (size_t)3 * bs * per_token(&f)));
    const SwapSpace *sw = r.server->swap;
    test_expect_solo(&solo, &r.run, 0, "swap into 3 blocks");
    ck_assert_int_eq(sw->n_slots, 3);
    ck_assert_int_gt(sw->swaps_out, 0);
    ck_assert_int_gt(sw->swap_fallbacks, 0);
    ck_assert_int_eq(sw->swaps_out + sw->swap_fallbacks, r.server->preemptions);
    ck_assert_int_gt(r.server->budget->recomputed_tokens, 0);
    ck_assert_int_le(sw->swap_blocks_out, 3 * sw->swaps_out);
    run_close(&r);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

/* Fills every row of a table's blocks with a value naming (table, block, row). */
static void fill_blocks(BlockPool *p, const BlockTable *t, float tag)
{
    for (int i = 0; i < t->n_blocks; i++) {
        float *x = p->storage + (size_t)t->blocks[i] * p->floats_per_block;
        for (size_t k = 0; k < p->floats_per_block; k++)
            x[k] = tag + (float)i * 1000.0f + (float)k;
    }
}

static int same_bytes(const BlockPool *p, int block, const float *want)
{
    return memcmp(p->storage + (size_t)block * p->floats_per_block, want, p->floats_per_block * sizeof(float)) == 0;
}

START_TEST(shared_blocks_swap_once_and_stay_shared)
{
    /* Three tables share three blocks (a prompt and two forks). C, then B
     * go out while A keeps the blocks: C copies all three, B none (the
     * copies are exact). A writes into its last block, then goes out too:
     * only that block is copied again. Coming back, B copies three blocks
     * in, C takes references on them, and A shares the first two and gets
     * its own third: 4 copies in, reference counts 3, 3, 2 and 1, and every
     * byte as it was. */
    BlockShape shape = {4, 2, 4, sizeof(float), 0};
    BlockPool p;
    BlockTables bt;
    SwapSpace sw;
    Err err = {{0}};
    ck_assert(block_pool_init(&p, &shape, 8, 1, &err) == 0);
    ck_assert_uint_eq(p.floats_per_block, 64);
    ck_assert(block_tables_init(&bt, 3, 4, &err) == 0);
    ck_assert(swap_space_init(&sw, &p, 6, 3, 4, 1, &err) == 0);
    BlockTable *a = &bt.tables[0], *b = &bt.tables[1], *c = &bt.tables[2];
    ck_assert(block_table_grow(&p, a, 10) == 0); /* 3 blocks */
    fill_blocks(&p, a, 1.0f);
    block_table_fork(&p, a, b);
    block_table_fork(&p, a, c);
    float before[3][64], written[64]; /* a block: 2 layers x K, V x 4 rows x 4 */
    for (int i = 0; i < 3; i++)
        memcpy(before[i], p.storage + (size_t)a->blocks[i] * p.floats_per_block, sizeof before[i]);
    /* A dummy run: swap_out_table() only asks it whether there is a device. */
    ServingRun run;
    memset(&run, 0, sizeof run);
    int copies;
    ck_assert_int_eq(swap_slots_needed(&sw, c), 3);
    ck_assert(swap_out_table(&sw, &p, c, 2, 10, &run, NULL, NULL, &copies, &err) == 0);
    ck_assert_int_eq(copies, 3);
    ck_assert_int_eq(swap_slots_needed(&sw, b), 0);
    ck_assert(swap_out_table(&sw, &p, b, 1, 10, &run, NULL, NULL, &copies, &err) == 0);
    ck_assert_int_eq(copies, 0);
    ck_assert_int_eq(sw.n_free, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(sw.ref_count[sw.tables[1 * 4 + i]], 2);
        ck_assert_int_eq(p.ref_count[a->blocks[i]], 1);
    }
    /* A writes row 2 of its last block (position 10), in place: its copy
     * on the host is not exact any more. */
    float *row = block_pool_keys(&p, a->blocks[2], 0) + 2 * 4;
    row[0] = -7.0f;
    swap_note_write(&sw, a->blocks[2]);
    memcpy(written, p.storage + (size_t)a->blocks[2] * p.floats_per_block, sizeof written);
    ck_assert_int_eq(swap_slots_needed(&sw, a), 1);
    ck_assert(swap_out_table(&sw, &p, a, 0, 11, &run, NULL, NULL, &copies, &err) == 0);
    ck_assert_int_eq(copies, 1);
    ck_assert_int_eq(p.n_free, 8);
    ck_assert_int_eq(sw.n_free, 2);
    ck_assert_int_eq(sw.ref_count[sw.tables[0]], 3);
    ck_assert_int_eq(sw.ref_count[sw.tables[1]], 3);
    ck_assert_int_eq(sw.ref_count[sw.tables[2]], 1);     /* A's own copy of its written block */
    ck_assert_int_eq(sw.ref_count[sw.tables[4 + 2]], 2); /* B and C: the old third block */
    /* Garbage in the freed device blocks: what comes back must be copied. */
    for (size_t k = 0; k < (size_t)p.n_blocks * p.floats_per_block; k++)
        p.storage[k] = -1.0f;
    Request rb = {.index = 1}, rc = {.index = 2}, ra = {.index = 0};
    ck_assert_int_eq(swap_blocks_needed(&sw, 1), 3);
    ck_assert(swap_in_table(&sw, &p, b, &rb, &run, &copies, &err) == 0);
    ck_assert_int_eq(copies, 3);
    ck_assert_int_eq(rb.n_cached, 10);
    ck_assert_int_eq(swap_blocks_needed(&sw, 2), 0);
    ck_assert(swap_in_table(&sw, &p, c, &rc, &run, &copies, &err) == 0);
    ck_assert_int_eq(copies, 0);
    ck_assert_int_eq(swap_blocks_needed(&sw, 0), 1);
    ck_assert(swap_in_table(&sw, &p, a, &ra, &run, &copies, &err) == 0);
    ck_assert_int_eq(copies, 1);
    ck_assert_int_eq(ra.n_cached, 11);
    ck_assert_int_eq(sw.n_free, 6);
    ck_assert_int_eq(block_pool_used(&p), 4);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(b->blocks[i], c->blocks[i]);
        ck_assert_int_eq(p.ref_count[b->blocks[i]], i < 2 ? 3 : 2);
        ck_assert_msg(same_bytes(&p, b->blocks[i], before[i]), "block %d of B came back changed", i);
    }
    ck_assert_int_eq(a->blocks[0], b->blocks[0]);
    ck_assert_int_eq(a->blocks[1], b->blocks[1]);
    ck_assert_int_ne(a->blocks[2], b->blocks[2]);
    ck_assert_int_eq(p.ref_count[a->blocks[2]], 1);
    ck_assert_msg(same_bytes(&p, a->blocks[2], written), "A's written block came back changed");
    for (int i = 0; i < 3; i++)
        block_table_release(&p, &bt.tables[i], NULL, NULL);
    swap_space_free(&sw);
    block_tables_free(&bt);
    block_pool_free(&p);
}
END_TEST

START_TEST(forks_swap_and_keep_their_tokens)
{
    /* Four samples of one prompt in a pool too small for all of them,
     * whole prompts and in chunks: siblings share the prompt's blocks, are
     * swapped out and in (shared blocks once), and each keeps its own
     * tokens. */
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "40\tthe end of it, and more of it\n";
    static const int budgets[] = {0, 4, 7};
    for (int k = 0; k < 3; k++) {
        CliOptions o = options(4, 20 * 4 * per_token(&f), budgets[k], "swap", 0);
        o.n_samples = 4;
        o.temperature = 1.0f;
        Run r;
        run_open(&r, &f, requests, o);
        const SwapSpace *sw = r.server->swap;
        ck_assert_int_gt(sw->swaps_out, 0);
        ck_assert_int_eq(sw->swap_fallbacks, 0);
        char what[48];
        snprintf(what, sizeof what, "--n 4 swapped, budget %d", budgets[k]);
        TestSolo solo;
        test_solo_open(&solo, &f.m, &f.t, &r.run);
        test_expect_solo(&solo, &r.run, 0, what);
        test_solo_close(&solo);
        run_close(&r);
    }
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ without a model */

START_TEST(accounting_only_with_budget_and_swap)
{
    /* LLaMA-7B shape in f16, no weights, no K/V bytes: 38 blocks of 16,
     * six requests of 100 + 28 tokens, a budget of 48 tokens and swapping.
     * The simulator's run: every request finishes, no step over 48, no
     * swap byte allocated anywhere. */
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    CliOptions o = options(16, (size_t)38 * (8u << 20), 48, "swap", 0);
    SimRequestSpec specs[6];
    for (int i = 0; i < 6; i++)
        specs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 28};
    ServingRun run;
    PagedServer *s = NULL;
    Err err = {{0}};
    ck_assert(serving_sim_init(&run, &m, &o, model_kv_bytes_per_token(&m.cfg, 2), specs, 6, &err) == 0);
    StepWatch w = {0};
    ck_assert(serving_add_observer(&run, watch_step, &w, NULL, &err) == 0);
    ck_assert_msg(paged_serve(&run, &s, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(run.n_done, 6);
    ck_assert_int_le(w.max_entries, 48);
    ck_assert_int_gt(s->preemptions, 0);
    ck_assert_int_eq(s->swap->swaps_out, s->preemptions);
    ck_assert_ptr_null(s->swap->storage);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_SWAP), 0);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    paged_close(s);
    serving_run_free(&run);
}
END_TEST

/* ------------------------------------------------------------ costs */

START_TEST(recompute_flops_by_hand)
{
    /* dim 4, kv_dim 2 (2 heads of 2, 1 KV head), hidden 8, 2 layers: per
     * layer and position 2 x (16 + 16 + 2 x 8 + 3 x 32) = 288 FLOPs of
     * projections; attention over positions 0..2 reads 1 + 2 + 3 = 6
     * positions at 4 x 4 FLOPs each. */
    ModelConfig c = {4, 8, 2, 2, 1, 10, 16};
    ck_assert_double_eq(paged_recompute_flops(&c, 0), 0.0);
    ck_assert_double_eq(paged_recompute_flops(&c, 3), 2.0 * (3 * 288.0 + 6 * 16.0));
}
END_TEST

/* ------------------------------------------------------------ the program */

typedef struct {
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX];
} ProgramFiles;

static void program_files(ProgramFiles *pf)
{
    test_write_synthetic(&TEST_SYNTH_GQA, 11, 0, 0, pf->model, pf->tok);
    const char *text = "5\tab\n30\tthe end of it\n12\tx\n";
    test_write_temp(text, strlen(text), pf->reqs);
}

static void program_files_remove(const ProgramFiles *pf)
{
    remove(pf->model);
    remove(pf->tok);
    remove(pf->reqs);
}

static void run_ch04(const ProgramFiles *pf, const char *const *extra, ProgramResult *r)
{
    const char *argv[32] = {"ch04-paged", "--model", pf->model, "--tokenizer", pf->tok, "--requests", pf->reqs};
    int n = 7;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

/* Exit 1, nothing on stdout, and exactly one line on stderr, naming @p word. */
static void expect_refusal(const ProgramFiles *pf, const char *const *extra, const char *word)
{
    ProgramResult r;
    run_ch04(pf, extra, &r);
    ck_assert_msg(r.status == 1, "exit %d for %s: %s", r.status, word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    ck_assert_msg(strncmp(r.err, "ch04-paged: error: ", 19) == 0 && strstr(r.err, word) && test_count_lines(r.err) == 1,
                  "expected one error line naming '%s', got:\n%s", word, r.err);
    test_result_free(&r);
}

START_TEST(program_refuses_impossible_options)
{
    ProgramFiles pf;
    program_files(&pf);
    expect_refusal(&pf, (const char *const[]){"--max-num-batched-tokens", "0", NULL}, "out of range");
    expect_refusal(&pf, (const char *const[]){"--max-num-batched-tokens", "8x", NULL}, "not a whole number");
    expect_refusal(&pf, (const char *const[]){"--max-num-seqs", "-1", NULL}, "out of range");
    expect_refusal(&pf, (const char *const[]){"--max-num-batched-tokens", "4", "--max-num-seqs", "8", NULL},
                   "--max-num-seqs 8 is more than --max-num-batched-tokens 4");
    expect_refusal(&pf, (const char *const[]){"--max-num-batched-tokens", "2", "--n", "3", "--temperature", "1", NULL},
                   "--n 3");
    expect_refusal(&pf, (const char *const[]){"--max-num-seqs", "2", "--n", "3", "--temperature", "1", NULL},
                   "--max-num-seqs");
    expect_refusal(&pf, (const char *const[]){"--preempt", "evict", NULL}, "not one of recompute, swap");
    expect_refusal(&pf, (const char *const[]){"--swap-space", "1MiB", NULL}, "--swap-space needs --preempt swap");
    expect_refusal(&pf, (const char *const[]){"--preempt", "swap", "--swap-space", "0", NULL}, "more than 0 bytes");
    expect_refusal(&pf, (const char *const[]){"--preempt", "swap", "--swap-space", "10", NULL}, "holds no block");
    expect_refusal(&pf, (const char *const[]){"--preempt", "swap", "--swap-space", "lots", NULL}, "--swap-space");
    expect_refusal(&pf, (const char *const[]){"--preempt", "swap", "--swap-space", "900TB", NULL},
                   "more than the swap space can index");
    /* 500 GB in blocks of 256 x 384 B: few enough to index, more than any test machine's memory. */
    expect_refusal(&pf,
                   (const char *const[]){"--block-size", "256", "--preempt", "swap", "--swap-space", "500GB", NULL},
                   "more than this machine's memory");
    program_files_remove(&pf);
}
END_TEST

/* The number after "key": in a JSON text (the test fails when it is missing). */
static long json_number(const char *text, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *p = strstr(text, quoted);
    ck_assert_msg(p, "%s missing from the JSON report", key);
    return strtol(p + strlen(quoted), NULL, 10);
}

START_TEST(program_reports_budget_and_swaps)
{
    ProgramFiles pf;
    program_files(&pf);
    /* Three requests that grow to about 44 positions (11 blocks of 4)
     * each, in 16 blocks: preempted and swapped. */
    const char *text3 = "30\tthe end of it\n30\tmore words here\n30\tand then\n";
    remove(pf.reqs);
    test_write_temp(text3, strlen(text3), pf.reqs);
    char json[PATH_MAX + 8];
    snprintf(json, sizeof json, "%s.json", pf.reqs);
    ProgramResult r;
    run_ch04(&pf, (const char *const[]){"--block-size", "4", "--kv-budget", "24KiB", "--max-num-batched-tokens", "6",
                                        "--preempt", "swap", "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *lines[] = {("scheduler: a budget of 6 tokens a step, decodes first, then prompts in chunks; at most 3 "
                            "running; preemption swaps to 16 host blocks (24.00 KiB)"),
                           "swap now    swap peak", "token budget   6 a step", "largest step   6 tokens",
                           "first token    after", "preemption     swap: ", "swap traffic   out ",
                           "cost           swapping moved"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(r.err, lines[i]), "'%s' missing from:\n%s", lines[i], r.err);
    test_result_free(&r);
    char *text = test_slurp(json);
    const char *keys[] = {"\"max_step_tokens\": 6", "\"max_num_batched_tokens\": 6", "\"chunked_prefill\": true",
                          "\"max_num_seqs\": 3", "\"preempt\": \"swap\"", "\"steps_decodes_behind_prompt\"",
                          "\"max_step_kv_reads\"", "\"first_token_steps\"", "\"swaps_out\"", "\"swaps_in\"",
                          "\"swap_bytes_out\"", "\"swap_bytes_in\"", "\"recomputed_tokens\"", "\"swap\": {"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(text, keys[i]), "%s missing from the JSON report", keys[i]);
    static const char *const moves[2][2] = {{"swap_blocks_out", "swap_bytes_out"}, {"swap_blocks_in", "swap_bytes_in"}};
    for (int k = 0; k < 2; k++) {
        long blocks = json_number(text, moves[k][0]), bytes = json_number(text, moves[k][1]);
        ck_assert_msg(blocks > 0, "%s: %ld", moves[k][0], blocks);
        ck_assert_int_eq(bytes, blocks * 4 * 384); /* blocks x (4 tokens x 384 B) */
    }
    free(text);
    /* Without the options: no scheduler lines, no swap place. */
    run_ch04(&pf, (const char *const[]){"--block-size", "4", "--kv-budget", "24KiB", "--json", json, NULL}, &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_null(strstr(r.err, "scheduler"));
    ck_assert_ptr_null(strstr(r.err, "swap now"));
    test_result_free(&r);
    text = test_slurp(json);
    ck_assert_ptr_null(strstr(text, "\"swap\""));
    ck_assert_ptr_null(strstr(text, "max_step_tokens"));
    free(text);
    remove(json);
    program_files_remove(&pf);
}
END_TEST

START_TEST(help_documents_the_options)
{
    const char *argv[] = {"ch04-paged", "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_int_eq(r.status, 0);
    const char *options[] = {"--max-num-batched-tokens N", "--max-num-seqs N", "--preempt recompute|swap",
                             "--swap-space SIZE"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        ck_assert_msg(strstr(r.out, options[i]), "--help does not document %s", options[i]);
    test_result_free(&r);
}
END_TEST

Suite *suite_ch04_budget(void)
{
    Suite *s = suite_create("ch04_budget");
    TCase *tc = tcase_create("ch04_budget");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, a_chunk_gets_no_logits_row);
    tcase_add_test(tc, prompt_in_chunks_behind_decodes);
    tcase_add_test(tc, forks_wait_for_the_last_chunk);
    tcase_add_test(tc, same_tokens_every_budget);
    tcase_add_test(tc, budget_caps_running_requests);
    tcase_add_test(tc, swap_moves_what_recomputation_frees);
    tcase_add_test(tc, full_swap_space_falls_back_to_recomputation);
    tcase_add_test(tc, shared_blocks_swap_once_and_stay_shared);
    tcase_add_test(tc, forks_swap_and_keep_their_tokens);
    tcase_add_test(tc, accounting_only_with_budget_and_swap);
    tcase_add_test(tc, recompute_flops_by_hand);
    tcase_add_test(tc, program_refuses_impossible_options);
    tcase_add_test(tc, program_reports_budget_and_swaps);
    tcase_add_test(tc, help_documents_the_options);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch04_budget)
