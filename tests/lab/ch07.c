/* Chapter 7 lab: the greedy acceptance rule and the rollback of a table
 * (exercises/ch07/, regions ch07.accept and ch07.rollback), first on small
 * cases you can check by hand, then end to end: chapter 4's server with
 * speculation must give every request chapter 4's tokens, with the block
 * tables and reference counts right after every step.
 *
 * Chapter 7 runs on chapter 4's pool: block_pool_alloc(),
 * block_pool_release() and the rest of lab 4 must work first. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "lab/grading.h"
#include "mem.h"
#include "scheduler.h"
#include "serving.h"
#include "spec.h"

/* ------------------------------------------------------------ fixture */

/* Chapter 4's server over a synthetic model, with two requests whose
 * tables the small cases fill by hand; blocks of 4 tokens. */
typedef struct {
    TestModel f;
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
} Lab;

static void lab_open(Lab *lab)
{
    Err err = {{0}};
    const char *requests = "10\tab\n10\tab\n";
    memset(lab, 0, sizeof *lab);
    test_model_synthetic(&lab->f, TEST_SYNTH_GQA, 5);
    ck_assert(request_file_parse(&lab->rf, requests, strlen(requests), "lab", &err) == 0);
    cli_defaults(&lab->o);
    lab->o.block_size = 4;
    ck_assert_msg(serving_run_init(&lab->run, &lab->f.m, &lab->f.t, &lab->o, &lab->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_open(&lab->run, &lab->server, NULL, &err) == 0, "%s", err.msg);
    BlockPool *p = &lab->server->kv.pool;
    int b = block_pool_alloc(p);
    ck_assert_msg(b >= 0 && block_pool_release(p, b) == 0 && p->n_free == p->n_blocks,
                  "expected chapter 4's block_pool_alloc() and block_pool_release() to work; hint: chapter 7 runs on "
                  "chapter 4's pool: finish lab 4 first (make lab CH=4)");
}

static void lab_close(Lab *lab)
{
    for (int i = 0; i < lab->run.n_reqs; i++)
        block_table_release(&lab->server->kv.pool, &lab->server->kv.tables.tables[i], NULL, NULL);
    paged_close(lab->server);
    serving_run_free(&lab->run);
    request_file_free(&lab->rf);
    test_model_free(&lab->f);
}

/* Table @p seq grows to hold @p positions positions (fresh blocks). */
static BlockTable *lab_fill(Lab *lab, int seq, int positions)
{
    BlockTable *t = &lab->server->kv.tables.tables[seq];
    ck_assert(block_table_grow(&lab->server->kv.pool, t, positions) == 0);
    paged_track_table(lab->server, t);
    lab->run.reqs[seq].n_cached = positions;
    return t;
}

/* ------------------------------------------------------------ accept */

START_TEST(accept_keeps_the_matching_prefix)
{
    const int targets[] = {4, 5, 6, 7}, all[] = {4, 5, 6}, two[] = {4, 5, 9}, none[] = {9, 5, 6};
    int got = spec_accept_greedy(targets, all, 3);
    ck_assert_msg(got == 3, "expected 3 proposals accepted when all 3 equal the verifier's choices, got %d; hint: "
                  "spec_accept_greedy() counts proposals[i] == targets[i] from i = 0", got);
    got = spec_accept_greedy(targets, two, 3);
    ck_assert_msg(got == 2, "expected 2 accepted for proposals 4 5 9 against targets 4 5 6 7, got %d; hint: "
                  "spec_accept_greedy() stops at the first proposal that differs", got);
    got = spec_accept_greedy(targets, none, 3);
    ck_assert_msg(got == 0, "expected 0 accepted when the first proposal (9) differs from targets[0] (4), got %d; "
                  "hint: spec_accept_greedy() keeps nothing after a mismatch, even proposals that match later", got);
}
END_TEST

START_TEST(accept_never_passes_the_proposals)
{
    const int targets[] = {4, 5, 6}, proposals[] = {4, 5, 6};
    int got = spec_accept_greedy(targets, proposals, 2);
    ck_assert_msg(got == 2, "expected 2 accepted of 2 proposals (targets[2] is the model's own next token, not a "
                  "proposal), got %d; hint: spec_accept_greedy() accepts at most n", got);
    got = spec_accept_greedy(targets, proposals, 0);
    ck_assert_msg(got == 0, "expected 0 accepted of 0 proposals, got %d; hint: spec_accept_greedy() with n = 0", got);
}
END_TEST

/* ------------------------------------------------------------ rollback */

START_TEST(rollback_returns_private_blocks)
{
    Lab lab;
    lab_open(&lab);
    BlockPool *p = &lab.server->kv.pool;
    int free0 = p->n_free;
    BlockTable *t = lab_fill(&lab, 0, 13); /* 4 blocks: positions 0..12 */
    int kept_last = t->blocks[1];
    int freed = spec_rollback(lab.server, &lab.run, &lab.run.reqs[0], 5); /* keep 0..4: blocks 0 and 1 */
    ck_assert_msg(t->n_blocks == 2 && freed == 2 && p->n_free == free0 - 2,
                  "expected 2 blocks kept (positions 0..4 at 4 per block), 2 freed and %d free, got %d kept, %d freed, "
                  "%d free; hint: spec_rollback() keeps block_count_for_tokens(keep, block_size) blocks",
                  free0 - 2, t->n_blocks, freed, p->n_free);
    ck_assert_msg(t->blocks[1] == kept_last && p->ref_count[kept_last] == 1,
                  "expected block %d (holding the last kept position, 4) still held, got table entry %d with %d "
                  "holders; hint: spec_rollback() must not give back the block of the last accepted position",
                  kept_last, t->blocks[1], p->ref_count[kept_last]);
    ck_assert_msg(lab.run.reqs[0].n_cached == 5, "expected n_cached 5 after keeping 5 positions, got %d; hint: "
                  "spec_rollback() leaves the request's n_cached at keep", lab.run.reqs[0].n_cached);
    freed = spec_rollback(lab.server, &lab.run, &lab.run.reqs[0], 4); /* a whole block: 0..3 */
    ck_assert_msg(t->n_blocks == 1 && freed == 1, "expected 1 block kept for 4 positions and 1 freed, got %d and %d; "
                  "hint: spec_rollback() with keep at a block's end", t->n_blocks, freed);
    lab_close(&lab);
}
END_TEST

START_TEST(rollback_keeps_shared_blocks_for_their_other_holder)
{
    Lab lab;
    lab_open(&lab);
    BlockPool *p = &lab.server->kv.pool;
    int free0 = p->n_free;
    BlockTable *a = lab_fill(&lab, 0, 8), *b = &lab.server->kv.tables.tables[1];
    block_table_fork(p, a, b); /* b shares a's two blocks */
    ck_assert(block_table_grow(p, b, 12) == 0);
    paged_track_table(lab.server, b);
    lab.run.reqs[1].n_cached = 12;
    int shared = a->blocks[1], own = b->blocks[2];
    int freed = spec_rollback(lab.server, &lab.run, &lab.run.reqs[1], 3); /* b keeps block 0 */
    ck_assert_msg(freed == 1 && b->n_blocks == 1,
                  "expected 1 block freed (b's own) and 1 kept, got %d freed, %d kept; hint: spec_rollback() frees "
                  "only a block whose last holder let go", freed, b->n_blocks);
    ck_assert_msg(p->ref_count[shared] == 1 && p->ref_count[own] == 0,
                  "expected the shared block %d held once more (by a) and b's own block %d free, got %d and %d "
                  "holders; hint: spec_rollback() drops this table's hold on every block it gives back "
                  "(block_pool_release()), shared or not", shared, own, p->ref_count[shared], p->ref_count[own]);
    ck_assert_int_eq(p->n_free, free0 - 2);
    lab_close(&lab);
}
END_TEST

/* ------------------------------------------------------------ end to end */

/* Chapter 7's run of @p requests against chapter 4's, with the invariants
 * after every step (spec_step() fails a step that breaks one). */
static void same_tokens_as_chapter_4(SpecMethod method, int k, int block_size)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    const char *requests = "30\tab ab ab\n24\tx y x y x\n20\tq\n";
    Err err = {{0}};
    RequestFile rf;
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "lab", &err) == 0);
    int ref_tokens[3][70], ref_n[3];
    for (int pass = 0; pass < 2; pass++) {
        CliOptions o;
        cli_defaults(&o);
        o.block_size = block_size;
        o.kv_budget = (size_t)70 * model_kv_bytes_per_token(&f.m.cfg, sizeof(float)); /* tight: preemptions */
        ServingRun run;
        PagedServer *server;
        SpecDecoder d;
        SpecOptions so = {.method = pass ? method : SPEC_NONE, .k = k, .ngram_min = 1, .ngram_max = 3,
                          .self_layers = 2, .check = 1};
        ck_assert_msg(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0, "%s", err.msg);
        ck_assert_msg(spec_open(&d, &so, &run, &err) == 0, "%s", err.msg);
        ck_assert_msg(paged_open(&run, &server, NULL, &err) == 0, "%s", err.msg);
        ck_assert_msg(spec_attach(&d, server, &run, &err) == 0, "%s", err.msg);
        while (serving_unfinished(&run)) {
            int status = spec_step(&d, &run, &err);
            ck_assert_msg(status == 0, "expected every step to keep the books, got: %s; hint: spec_rollback() gives "
                          "back exactly the blocks past the accepted positions", err.msg);
        }
        for (int i = 0; i < 3; i++) {
            const Request *r = &run.reqs[i];
            if (pass == 0) {
                ref_n[i] = r->n_tokens;
                memcpy(ref_tokens[i], r->tokens, (size_t)r->n_tokens * sizeof(int));
                continue;
            }
            int same = r->n_tokens == ref_n[i] && memcmp(r->tokens, ref_tokens[i], (size_t)ref_n[i] * sizeof(int)) == 0;
            ck_assert_msg(same, "expected request %d to get chapter 4's %d tokens with --spec-k %d, block size %d, "
                          "got %d tokens%s; hint: spec_accept_greedy() keeps only proposals equal to the model's choices",
                          i, ref_n[i], k, block_size, r->n_tokens, r->n_tokens == ref_n[i] ? " that differ" : "");
        }
        ck_assert_msg(server->kv.pool.n_free == server->kv.pool.n_blocks,
                      "expected every block back in the pool after the run, got %d of %d free; hint: spec_rollback() "
                      "must release what it drops from the table", server->kv.pool.n_free, server->kv.pool.n_blocks);
        spec_close(&d);
        paged_close(server);
        serving_run_free(&run);
    }
    request_file_free(&rf);
    test_model_free(&f);
}

START_TEST(speculation_gives_chapter_4_tokens)
{
    same_tokens_as_chapter_4(SPEC_NGRAM, 4, 4);
    same_tokens_as_chapter_4(SPEC_SELF, 3, 1);
    same_tokens_as_chapter_4(SPEC_SELF, 8, 16);
}
END_TEST

/* What the end-to-end test exercises. */
#define WHOLE_CHAPTER "chapter 7's step with your spec_accept_greedy() and spec_rollback()"

Suite *lab_suite(void)
{
    Suite *s = suite_create("ch07");
    lab_add_test(s, accept_keeps_the_matching_prefix, LAB_UNIT_S, 1, "spec_accept_greedy()");
    lab_add_test(s, accept_never_passes_the_proposals, LAB_UNIT_S, 1, "spec_accept_greedy()");
    lab_add_test(s, rollback_returns_private_blocks, LAB_UNIT_S, 1, "spec_rollback()");
    lab_add_test(s, rollback_keeps_shared_blocks_for_their_other_holder, LAB_UNIT_S, 1, "spec_rollback()");
    lab_add_test(s, speculation_gives_chapter_4_tokens, LAB_RUN_S, 2, WHOLE_CHAPTER);
    return s;
}
