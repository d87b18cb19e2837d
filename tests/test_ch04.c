/* Chapter 4: PagedAttention equals the contiguous reference bit for bit;
 * continuous batching with preemption gives every request its solo tokens
 * for every block size and budget; forks share blocks and copy on write;
 * requests that can never fit are rejected; the scheduler runs without a
 * model (accounting only, as the simulator drives it); the program refuses
 * bad input with one line. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "helpers.h"
#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ fixtures */

/* A paged run, left open so that its server can be inspected. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
} PagedRun;

static void paged_run(PagedRun *pr, const TestModel *f, const char *requests, CliOptions o)
{
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&pr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    pr->o = o;
    ck_assert_msg(serving_run_init(&pr->run, &f->m, &f->t, &pr->o, &pr->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_serve(&pr->run, &pr->server, NULL, &err) == 0, "block size %d, budget %zu: %s",
                  o.block_size, o.kv_budget, err.msg);
}

static PagedServer *server_of(PagedRun *pr)
{
    return pr->server;
}

/* Everything a finished run must leave behind: every block free, the
 * breakdown whole, and nothing leaked once closed. */
static void paged_run_close(PagedRun *pr)
{
    PagedServer *s = server_of(pr);
    ck_assert_msg(s->kv.pool.n_free == s->kv.pool.n_blocks, "%d of %d blocks still held at the end",
                  block_pool_used(&s->kv.pool), s->kv.pool.n_blocks);
    for (int b = 0; b < s->kv.pool.n_blocks; b++)
        if (s->kv.pool.ref_count[b] != 0)
            ck_abort_msg("block %d has refcount %d at the end", b, s->kv.pool.ref_count[b]);
    ck_assert_int_eq(s->n_running, 0);
    double fr[4];
    kv_breakdown_fractions(&pr->run.breakdown, fr);
    ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-9);
    ck_assert_double_eq(fr[3], 0.0); /* any free block serves anyone: no external fragmentation */
    paged_close(pr->server);
    serving_run_free(&pr->run);
    request_file_free(&pr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static CliOptions greedy(int block_size, size_t budget)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = block_size;
    o.kv_budget = budget;
    return o;
}

/* ------------------------------------------------------ PagedAttention */

START_TEST(paged_attention_equals_contiguous_bitwise)
{
    const int layers = 2, kv_heads = 3, head_dim = 8, kv_dim = kv_heads * head_dim, max_pos = 70;
    int sizes[] = {1, 4, 16, 64};
    unsigned long long rng = 12345;
    float *keys = malloc((size_t)max_pos * kv_dim * sizeof(float)); /* [max_pos][kv_dim] of layer 1 */
    float *values = malloc((size_t)max_pos * kv_dim * sizeof(float));
    for (int i = 0; i < max_pos * kv_dim; i++) {
        keys[i] = sampler_random_f32(&rng) * 2.0f - 1.0f;
        values[i] = sampler_random_f32(&rng) * 2.0f - 1.0f;
    }
    float q[8], want[8], got[8], scores[80], scores2[80];
    for (int i = 0; i < head_dim; i++)
        q[i] = sampler_random_f32(&rng) * 3.0f - 1.5f;
    for (int k = 0; k < 4; k++) {
        int bs = sizes[k], n_blocks = block_count_for_tokens(max_pos, bs);
        BlockPool p;
        BlockTables bt;
        Err err = {{0}};
        BlockShape shape = {bs, layers, kv_dim, sizeof(float), 0};
        ck_assert_int_eq(block_pool_init(&p, &shape, n_blocks + 3, 1, &err), 0);
        ck_assert_int_eq(block_tables_init(&bt, 1, n_blocks, &err), 0);
        BlockTable *t = &bt.tables[0];
        /* Scatter the sequence: logical block i in physical block
         * (n_blocks - 1 - i) + 3, so that nothing is in order. */
        t->n_blocks = n_blocks;
        for (int i = 0; i < n_blocks; i++)
            t->blocks[i] = n_blocks - 1 - i + 3;
        for (int pos = 0; pos < max_pos; pos++) {
            int offset, b = block_table_slot(t, pos, bs, &offset);
            memcpy(block_pool_keys(&p, b, 1) + offset * kv_dim, keys + pos * kv_dim, kv_dim * sizeof(float));
            memcpy(block_pool_values(&p, b, 1) + offset * kv_dim, values + pos * kv_dim, kv_dim * sizeof(float));
        }
        int lengths[] = {1, bs, bs + 1, 2 * bs - 1, 37, max_pos};
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            int n_pos = lengths[l] < max_pos ? lengths[l] : max_pos;
            for (int h = 0; h < kv_heads; h++) {
                attention_reference(want, q, keys + h * head_dim, values + h * head_dim, n_pos, kv_dim, head_dim,
                                    scores);
                paged_attention(&p, t, 1, h, head_dim, q, n_pos, got, scores2);
                ck_assert_msg(memcmp(want, got, sizeof want) == 0,
                              "block size %d, %d positions, kv head %d: paged attention differs from the "
                              "contiguous reference",
                              bs, n_pos, h);
            }
        }
        block_tables_free(&bt);
        block_pool_free(&p);
    }
    free(keys);
    free(values);
}
END_TEST

/* ------------------------------------------------------ same tokens */

/* Requests of every kind: shorter than a block, several blocks, one that
 * reaches seq_len (64), prompts of different lengths. */
static const char *SYNTH_REQUESTS = "5\tab\n"
                                    "30\tthe end of it\n"
                                    "12\tx\n"
                                    "70\tlong enough to reach seq len\n"
                                    "20\ta b c d e f g h i j k l m n o p\n"
                                    "9\tzz\n"
                                    "40\tmore words here\n";

/* The reference: each request alone through the shared generation loop
 * with a plain contiguous cache ([layers][seq_len][kv_dim], chapter 2's
 * layout) and attention_reference() (tests/helpers.c). It shares nothing
 * with the paged code. */
static void expect_solo_tokens(const PagedRun *pr, const TestSolo *solo)
{
    char what[64];
    snprintf(what, sizeof what, "block size %d, budget %zu", pr->o.block_size, pr->o.kv_budget);
    test_expect_solo(solo, &pr->run, 0, what);
}

/* Every block size from 1 to 256, with a roomy budget and one so tight
 * that requests are preempted and recomputed again and again. */
static void same_tokens_every_block_size(const TestModel *f, const char *requests, const TestSolo *ss,
                                         int tight_tokens, int expect_preemptions_below)
{
    size_t per_token = model_kv_bytes_per_token(&f->m.cfg, sizeof(float));
    for (int bs = 1; bs <= 256; bs *= 2) {
        /* The tight pool: room for the longest request plus a little, at
         * least one block. */
        int tight_blocks = block_count_for_tokens(tight_tokens, bs);
        size_t budgets[2] = {(size_t)64 * 512 * per_token, (size_t)tight_blocks * (size_t)bs * per_token};
        for (int k = 0; k < 2; k++) {
            PagedRun pr;
            CliOptions o = greedy(bs, budgets[k]);
            o.watermark = 0;
            paged_run(&pr, f, requests, o);
            expect_solo_tokens(&pr, ss);
            if (k == 1 && bs < expect_preemptions_below)
                ck_assert_msg(server_of(&pr)->preemptions >= 3, "block size %d: only %ld preemptions in a tight pool",
                              bs, server_of(&pr)->preemptions);
            if (k == 0)
                ck_assert_int_eq(server_of(&pr)->preemptions, 0);
            paged_run_close(&pr);
        }
    }
}

/* paged_accumulate_rows() keeps its running sums in registers, eight and
 * thirty-two floats at a time, with a scalar rest: at every head width
 * that takes each path (and mixes of them), from a non-zero start, it must
 * give exactly the bits of attention_accumulate() called row by row. */
START_TEST(accumulate_rows_equals_row_by_row_bitwise)
{
    enum { MAX_DIM = 72, MAX_ROWS = 17, PAD = 5 };
    const int widths[] = {1, 3, 7, 8, 9, 16, 31, 32, 33, 40, 64, 72};
    const int row_counts[] = {0, 1, 2, 15, 16, 17};
    unsigned long long rng = 777;
    const int stride = 2 * MAX_DIM + PAD; /* rows wider than the head: the head is a slice */
    float *rows = malloc((size_t)MAX_ROWS * stride * sizeof(float)); /* [MAX_ROWS][stride] */
    float a[MAX_ROWS], start[MAX_DIM], want[MAX_DIM], got[MAX_DIM + 1];
    for (int i = 0; i < MAX_ROWS * stride; i++)
        rows[i] = sampler_random_f32(&rng) * 2.0f - 1.0f;
    for (int j = 0; j < MAX_ROWS; j++)
        a[j] = sampler_random_f32(&rng) / 3.0f;
    for (int i = 0; i < MAX_DIM; i++)
        start[i] = sampler_random_f32(&rng) * 4.0f - 2.0f;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (size_t r = 0; r < sizeof row_counts / sizeof row_counts[0]; r++) {
            int head_dim = widths[w], n_rows = row_counts[r];
            const float *slice = rows + PAD; /* not aligned to a vector */
            memcpy(want, start, sizeof want);
            memcpy(got, start, sizeof want);
            got[head_dim] = 12345.0f; /* one past the head: must stay as it is */
            for (int j = 0; j < n_rows; j++)
                attention_accumulate(want, a[j], slice + (size_t)j * stride, head_dim);
            paged_accumulate_rows(got, a, slice, n_rows, stride, head_dim);
            ck_assert_msg(memcmp(want, got, (size_t)head_dim * sizeof(float)) == 0,
                          "head_dim %d, %d rows: paged_accumulate_rows() differs from attention_accumulate() row "
                          "by row", head_dim, n_rows);
            ck_assert_msg(got[head_dim] == 12345.0f, "head_dim %d, %d rows: wrote past the head", head_dim, n_rows);
        }
    free(rows);
}
END_TEST

START_TEST(same_tokens_as_solo_synthetic_gqa)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    TestSolo solo;
    CliOptions o = greedy(16, 0);
    test_solo_of_requests(&solo, &f.m, &f.t, SYNTH_REQUESTS, &o);
    same_tokens_every_block_size(&f, SYNTH_REQUESTS, &solo, 72, 32);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

START_TEST(same_tokens_as_solo_synthetic_mha)
{
    TestModel f;
    ModelConfig cfg = {32, 64, 2, 4, 4, 380, 64}; /* no GQA */
    test_model_synthetic(&f, cfg, 5);
    TestSolo solo;
    CliOptions o = greedy(16, 0);
    test_solo_of_requests(&solo, &f.m, &f.t, SYNTH_REQUESTS, &o);
    same_tokens_every_block_size(&f, SYNTH_REQUESTS, &solo, 72, 32);
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

START_TEST(same_tokens_as_solo_stories260k)
{
    TestModel f;
    if (!test_model_stories(&f, "same_tokens_as_solo_stories260k"))
        return;
    const char *requests = "60\tOnce upon a time\n"
                           "12\tThe cat sat\n"
                           "90\tTom had a red ball.\n"
                           "25\tLily found a shiny stone\n"
                           "40\tThe sun was hot\n";
    TestSolo solo;
    CliOptions greedy16 = greedy(16, 0);
    test_solo_of_requests(&solo, &f.m, &f.t, requests, &greedy16);
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    int sizes[] = {1, 16, 256};
    for (int k = 0; k < 3; k++) {
        /* Roomy, then just over the longest request (about 100 tokens). */
        size_t budgets[2] = {0, (size_t)block_count_for_tokens(110, sizes[k]) * (size_t)sizes[k] * per_token};
        for (int b = 0; b < 2; b++) {
            PagedRun pr;
            CliOptions o = greedy(sizes[k], budgets[b]);
            paged_run(&pr, &f, requests, o);
            expect_solo_tokens(&pr, &solo);
            if (b == 1 && sizes[k] == 16)
                ck_assert_int_gt(server_of(&pr)->preemptions, 0);
            paged_run_close(&pr);
        }
    }
    test_solo_close(&solo);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------ scheduling */

START_TEST(never_fitting_request_is_rejected_at_once)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    const char *requests = "5\tab\n70\tlong enough to reach seq len\n9\tzz\n";
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    /* 3 blocks of 8 = 24 tokens: the request of 63 cached positions can never fit. */
    PagedRun pr;
    CliOptions o = greedy(8, 3 * 8 * per_token);
    paged_run(&pr, &f, requests, o);
    const Request *r = &pr.run.reqs[1];
    ck_assert_int_eq(r->finish, REQ_FINISH_REJECTED);
    ck_assert_int_eq(r->finished_step, 0);
    ck_assert_int_eq(r->admitted_step, -1);
    ck_assert_msg(strstr(r->note, "needs") || strstr(r->note, "need"), "note: %s", r->note);
    ck_assert_msg(strstr(r->note, "whole pool has 3"), "note: %s", r->note);
    ck_assert_int_eq(pr.run.reqs[0].finish != REQ_FINISH_REJECTED, 1);
    ck_assert_int_eq(pr.run.reqs[2].finish != REQ_FINISH_REJECTED, 1);
    TestSolo solo;
    test_solo_open(&solo, &f.m, &f.t, &pr.run);
    test_expect_solo(&solo, &pr.run, 1, "beside a rejected request");
    test_solo_close(&solo);
    paged_run_close(&pr);
    test_model_free(&f);
}
END_TEST

START_TEST(budget_below_one_block_is_an_error)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    RequestFile rf;
    Err err = {{0}};
    ck_assert(request_file_parse(&rf, "5\tab\n", 5, "t", &err) == 0);
    CliOptions o = greedy(16, 100);
    ServingRun run;
    ck_assert(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0);
    PagedServer *server = NULL;
    ck_assert_int_eq(paged_serve(&run, &server, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "holds no block"), "%s", err.msg);
    paged_close(server);
    serving_run_free(&run);
    request_file_free(&rf);
    test_model_free(&f);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}
END_TEST

START_TEST(continuous_batching_admits_as_blocks_free)
{
    /* Block size 4, 16 blocks, no watermark. A: 3-token prompt, 30 new
     * (at most 32 cached positions: 8 blocks). B, C, D: 26-token prompt
     * (7 blocks), 4 new (8 blocks at most). Worked by hand:
     *   step 0  A, B, C admitted (1 + 7 + 7 = 15 blocks); D waits
     *   step 2  A starts its 2nd block: the last free one
     *   step 3  B needs its 8th block: C (newest) is preempted, B finishes
     *   step 4  C is readmitted (all 29 positions recomputed, 8 blocks)
     *           and finishes; D still does not fit beside it
     *   step 5  D is admitted, while A keeps running until step 29. */
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    const char *requests = "30\tab\n"
                           "4\tabcdefghijklmnopqrstuvwxyz\n"
                           "4\tabcdefghijklmnopqrstuvwxyz\n"
                           "4\tabcdefghijklmnopqrstuvwxyz\n";
    PagedRun pr;
    CliOptions o = greedy(4, 16 * 4 * per_token);
    o.watermark = 0;
    paged_run(&pr, &f, requests, o);
    TestSolo solo;
    test_solo_open(&solo, &f.m, &f.t, &pr.run);
    const Request *a = &pr.run.reqs[0], *b = &pr.run.reqs[1], *c = &pr.run.reqs[2], *d = &pr.run.reqs[3];
    ck_assert_int_eq(a->n_prompt, 3);
    ck_assert_int_eq(b->n_prompt, 26);
    expect_solo_tokens(&pr, &solo);
    test_solo_close(&solo);
    ck_assert_msg(a->admitted_step == 0 && b->admitted_step == 0 && c->admitted_step == 0,
                  "expected A, B, C admitted at step 0, got %ld %ld %ld", a->admitted_step, b->admitted_step,
                  c->admitted_step);
    ck_assert_int_eq(b->finished_step, 3);
    ck_assert_int_eq(c->preemptions, 1);
    ck_assert_int_eq(c->finished_step, 4);
    ck_assert_int_eq(server_of(&pr)->preemptions, 1);
    ck_assert_int_eq(d->admitted_step, 5); /* the step after C gave its blocks back */
    ck_assert_int_eq(a->finished_step, 29);  /* D joined while A was running */
    ck_assert_int_eq(pr.run.max_concurrent, 3);
    paged_run_close(&pr);
    test_model_free(&f);
}
END_TEST

START_TEST(forks_share_prompt_blocks_and_copy_on_write)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    /* "the end of it" and "ab" encode to prompts that do not end on a
     * block boundary of 4 (checked below), so the first write of each
     * sample lands in the shared last prompt block. */
    const char *requests = "20\tthe end of it\n15\tab\n";
    const int n = 3;
    PagedRun pr;
    CliOptions o = greedy(4, 0);
    o.n_samples = n;
    o.temperature = 0.9f;
    o.seed = 7;
    paged_run(&pr, &f, requests, o);
    ck_assert_int_eq(pr.run.n_reqs, 2 * n);
    /* Each sample: the tokens of its own solo run, sampler seeded with
     * --seed + its index, as if it had never shared anything. */
    TestSolo solo;
    test_solo_open(&solo, &f.m, &f.t, &pr.run);
    test_expect_solo(&solo, &pr.run, 0, "--n 3");
    test_solo_close(&solo);
    PagedServer *s = server_of(&pr);
    long expect_copies = 0;
    int expect_saved = 0;
    for (int line = 0; line < 2; line++) {
        const Request *first = &pr.run.reqs[line * n];
        int p = first->n_prompt;
        int all_wrote = 1;
        for (int k = 0; k < n; k++) {
            const Request *r = &pr.run.reqs[line * n + k];
            ck_assert_int_eq(r->admitted_step, 0);
            all_wrote &= r->n_tokens - r->n_prompt >= 2;
        }
        ck_assert_msg(p % 4 != 0, "prompt %d has %d tokens; the test wants a partly filled last block", line, p);
        /* The last prompt block is shared by n; every writer but the last
         * copies it. */
        if (all_wrote)
            expect_copies += n - 1;
        expect_saved += (n - 1) * block_count_for_tokens(p, 4);
    }
    ck_assert_int_eq(s->cow_copies, expect_copies);
    ck_assert_int_ge(s->blocks_saved_peak, expect_saved);
    /* The samples differ from each other (they were sampled, not copied). */
    ck_assert(memcmp(pr.run.reqs[0].tokens, pr.run.reqs[1].tokens, 64 * sizeof(int)) != 0 ||
              memcmp(pr.run.reqs[0].tokens, pr.run.reqs[2].tokens, 64 * sizeof(int)) != 0);
    paged_run_close(&pr);
    test_model_free(&f);
}
END_TEST

START_TEST(forks_under_preemption_keep_their_tokens)
{
    /* Samples of one prompt in a pool too small for all of them: siblings
     * are preempted and recomputed alone; each still gets its own tokens. */
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    const char *requests = "40\tthe end of it\n";
    const int n = 4;
    PagedRun pr;
    CliOptions o = greedy(4, 20 * 4 * per_token);
    o.n_samples = n;
    o.temperature = 1.0f;
    o.watermark = 0;
    paged_run(&pr, &f, requests, o);
    ck_assert_int_gt(server_of(&pr)->preemptions, 0);
    TestSolo solo;
    test_solo_open(&solo, &f.m, &f.t, &pr.run);
    test_expect_solo(&solo, &pr.run, 0, "--n 4 under preemption");
    test_solo_close(&solo);
    paged_run_close(&pr);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------ accounting only (kvsim) */

/* A run of N requests driven without a model: LLaMA-7B in f16 (32 layers
 * x 4096 x 2 x 2 B = 512 KiB per token, 8 MiB per block of 16), no weights,
 * no K/V bytes. Every request: a 100-token prompt (7 blocks) and 28 new
 * tokens, so at most 127 cached positions (8 blocks). */
enum { SIM_N = 6 };
typedef struct {
    Model m;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
} Sim;

/* One step without a model, the program's own (what kvsim runs): the fed
 * requests get K/V for what they were fed and a dummy token, and end at
 * their length. */
static void simulate_step(Sim *sim)
{
    Err err = {{0}};
    ck_assert_msg(paged_step(sim->server, &sim->run, &err) == 0, "%s", err.msg);
}

static void sim_open(Sim *sim, int n_blocks, int watermark)
{
    memset(sim, 0, sizeof *sim);
    sim->m.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    sim->o = greedy(16, (size_t)n_blocks * (8u << 20));
    sim->o.watermark = watermark;
    SimRequestSpec specs[SIM_N];
    for (int i = 0; i < SIM_N; i++)
        specs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 28};
    Err err = {{0}};
    ck_assert_msg(serving_sim_init(&sim->run, &sim->m, &sim->o, model_kv_bytes_per_token(&sim->m.cfg, 2), specs,
                                   SIM_N, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_open(&sim->run, &sim->server, NULL, &err) == 0, "%s", err.msg);
}

static void sim_close(Sim *sim)
{
    paged_close(sim->server);
    serving_run_free(&sim->run);
}

static int sim_running(const Sim *sim)
{
    int n = 0;
    for (int i = 0; i < SIM_N; i++)
        n += sim->run.reqs[i].phase == REQ_RUNNING;
    return n;
}

START_TEST(accounting_only_at_7b_scale)
{
    Sim sim;
    sim_open(&sim, 38, 0);
    ServingRun *run = &sim.run;
    PagedServer *s = sim.server;
    ck_assert_int_eq(s->kv.pool.n_blocks, 38);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    /* Step 0: five prompts of 7 blocks fit (35 of 38), the sixth waits. */
    simulate_step(&sim);
    ck_assert_int_eq(block_pool_used(&s->kv.pool), 35);
    ck_assert_uint_eq(run->timeline.reserved, (size_t)35 * (8u << 20));
    ck_assert_uint_eq(run->timeline.used, (size_t)500 * (512u << 10));
    ck_assert_int_eq(run->reqs[5].phase, REQ_WAITING);
    /* Steps 1-12 write positions 100-111 into the 7th block. */
    for (int k = 0; k < 12; k++)
        simulate_step(&sim);
    ck_assert_int_eq(s->preemptions, 0);
    /* Step 13: all five start an 8th block; 3 are free: the fourth request
     * preempts the newest (the fifth, 7 blocks back), then gets its block. */
    simulate_step(&sim);
    ck_assert_int_eq(s->preemptions, 1);
    ck_assert_int_eq(run->reqs[4].phase, REQ_WAITING);
    ck_assert_int_eq(run->reqs[4].n_cached, 0);
    ck_assert_int_eq(block_pool_used(&s->kv.pool), 32);
    while (run->n_done < SIM_N)
        simulate_step(&sim);
    ck_assert_int_eq(run->max_concurrent, 5);
    ck_assert_int_eq(s->kv.pool.n_free, 38);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    sim_close(&sim);
}
END_TEST

START_TEST(admission_keeps_the_watermark)
{
    ck_assert_int_eq(paged_can_admit(10, 7, 3), 1); /* exactly the watermark left */
    ck_assert_int_eq(paged_can_admit(10, 8, 3), 0);
    ck_assert_int_eq(paged_can_admit(7, 7, 0), 1);
    ck_assert_int_eq(paged_can_admit(6, 7, 0), 0);
    /* 38 blocks, 7 per prompt: 38 -> 31 -> 24 -> 17 -> 10 -> 3 free. With
     * a watermark of 10% (3 blocks) the fifth leaves exactly 3 and is
     * admitted; at 11% (4 blocks) it is not. */
    int watermarks[] = {10, 11}, admitted[] = {5, 4};
    for (int k = 0; k < 2; k++) {
        Sim sim;
        sim_open(&sim, 38, watermarks[k]);
        PagedServer *s = sim.server;
        ck_assert_int_eq(s->watermark_blocks, 3 + k);
        simulate_step(&sim);
        ck_assert_int_eq(sim_running(&sim), admitted[k]);
        while (sim.run.n_done < SIM_N)
            simulate_step(&sim);
        sim_close(&sim);
    }
}
END_TEST

/* ------------------------------------------------------------ program */

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

/* Runs ch04-paged and expects exit 1 with one error line naming @p word. */
static void expect_refusal(const ProgramFiles *pf, const char *const *extra, const char *word)
{
    const char *argv[24] = {"ch04-paged", "--model", pf->model, "--tokenizer", pf->tok, "--requests", pf->reqs};
    int n = 7;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1, "exit %d for %s: %s", r.status, word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    const char *e = strstr(r.err, "ch04-paged: error: ");
    ck_assert_msg(e && strstr(e, word) && test_count_lines(e) == 1, "expected one error line naming '%s': %s", word,
                  r.err);
    int errors = 0;
    for (const char *x = r.err; (x = strstr(x, "error")) != NULL; x++)
        errors++;
    ck_assert_msg(errors == 1, "expected one error, got: %s", r.err);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected nothing on stderr but the error, got:\n%s", r.err);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_input)
{
    ProgramFiles pf;
    program_files(&pf);
    expect_refusal(&pf, (const char *const[]){"--block-size", "3", NULL}, "power of two");
    expect_refusal(&pf, (const char *const[]){"--block-size", "0", NULL}, "out of range");
    expect_refusal(&pf, (const char *const[]){"--block-size", "512", NULL}, "out of range");
    expect_refusal(&pf, (const char *const[]){"--block-size", "x", NULL}, "not a whole number");
    expect_refusal(&pf, (const char *const[]){"--n", "2", NULL}, "--temperature");
    expect_refusal(&pf, (const char *const[]){"--kv-budget", "1000", NULL}, "holds no block");
    expect_refusal(&pf, (const char *const[]){"--kv-budget", "100TB", NULL}, "more than this pool can index");
    /* 500 GB in blocks of 256 x 384 B: few enough blocks to index, more than the memory of any test machine. */
    expect_refusal(&pf, (const char *const[]){"--block-size", "256", "--kv-budget", "500GB", NULL},
                   "more than this machine's memory");
    /* One block of 4 positions (384 B per token); every request needs more. */
    expect_refusal(&pf, (const char *const[]){"--block-size", "4", "--kv-budget", "1536", NULL},
                   "holds no request");
    /* Output files are checked before the run, not after it. */
    expect_refusal(&pf, (const char *const[]){"--out", "/nonexistent/dir/x.jsonl", NULL}, "--out");
    expect_refusal(&pf, (const char *const[]){"--json", "/", NULL}, "cannot create");
    expect_refusal(&pf, (const char *const[]){"--watermark", "90", NULL}, "out of range");
    expect_refusal(&pf, (const char *const[]){"--reserve", "max", NULL}, "unknown option");
    program_files_remove(&pf);
}
END_TEST

START_TEST(program_reports_blocks_and_writes_requests)
{
    ProgramFiles pf;
    program_files(&pf);
    char json[PATH_MAX + 8], out[PATH_MAX + 8];
    snprintf(json, sizeof json, "%s.json", pf.reqs);
    snprintf(out, sizeof out, "%s.jsonl", pf.reqs);
    const char *argv[] = {"ch04-paged", "--model", pf.model, "--tokenizer", pf.tok, "--requests", pf.reqs,
                          "--block-size", "8", "--kv-budget", "48KiB", "--json", json, "--out", out, NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    /* 48 KiB / (8 tokens x 384 B) = 16 blocks; 64-token requests take 8. */
    ck_assert_msg(strstr(r.err, "16 blocks of 8 tokens x 384 B = 3.00 KiB each"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "max concurrency at the model's full length (64 tokens = 8 blocks): 2;"), "%s",
                  r.err);
    ck_assert_msg(strstr(r.err, "paged KV (block size 8)"), "%s", r.err);
    test_result_free(&r);
    FILE *f = fopen(json, "r");
    ck_assert_ptr_nonnull(f);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    const char *keys[] = {"\"kv_utilization_avg\"", "\"kv_breakdown\"", "\"internal_fragmentation\"",
                          "\"max_concurrent\"", "\"requests_completed\"", "\"preemptions\"", "\"blocks_total\": 16",
                          "\"block_size\": 8", "\"blocks_saved_by_sharing\"", "\"block_table_bytes\"",
                          "\"blocks_timeline\"", "\"kv_metadata\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(buf, keys[i]), "%s missing from the JSON report", keys[i]);
    f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    ck_assert_int_eq(test_count_lines(buf), 3);
    ck_assert_msg(strstr(buf, "\"finish\":\"length\""), "%s", buf);
    remove(json);
    remove(out);
    program_files_remove(&pf);
}
END_TEST

Suite *suite_ch04(void)
{
    Suite *s = suite_create("ch04");
    TCase *tc = tcase_create("ch04");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, paged_attention_equals_contiguous_bitwise);
    tcase_add_test(tc, accumulate_rows_equals_row_by_row_bitwise);
    tcase_add_test(tc, same_tokens_as_solo_synthetic_gqa);
    tcase_add_test(tc, same_tokens_as_solo_synthetic_mha);
    tcase_add_test(tc, same_tokens_as_solo_stories260k);
    tcase_add_test(tc, never_fitting_request_is_rejected_at_once);
    tcase_add_test(tc, budget_below_one_block_is_an_error);
    tcase_add_test(tc, continuous_batching_admits_as_blocks_free);
    tcase_add_test(tc, forks_share_prompt_blocks_and_copy_on_write);
    tcase_add_test(tc, forks_under_preemption_keep_their_tokens);
    tcase_add_test(tc, accounting_only_at_7b_scale);
    tcase_add_test(tc, admission_keeps_the_watermark);
    tcase_add_test(tc, program_refuses_bad_input);
    tcase_add_test(tc, program_reports_blocks_and_writes_requests);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch04)
