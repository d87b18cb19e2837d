/* Chapter 4's beam search (--beam W, beam.h): the choice of one step by
 * hand; --beam 1 is greedy decoding; every prompt's best beam equals an
 * independent beam search written here over plain contiguous recomputed
 * logits (test_cpu_logits()), for every block size and budget, with
 * preemptions; beams share blocks and the pool is whole at the end; the
 * sharing figures by hand; the program's --out and its refusals. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/beam.h"
#include "helpers.h"
#include "mem.h"
#include "paged.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"

/* ------------------------------------------------------------ one step by hand */

/* Two beams over a vocabulary of 5. Beam 0 (cumulative -1.0) has logits
 * ln(4), ln(2), ln(1), ln(1), -inf-ish; beam 1 (cumulative -0.5) has
 * ln(1) x 4 and a tie. Their log softmax: beam 0: ln(4/8), ln(2/8),
 * ln(1/8), ln(1/8); beam 1: ln(1/4) for tokens 0..3. */
START_TEST(choose_by_hand)
{
    const float huge_negative = -1e30f;
    float r0[5] = {logf(4), logf(2), 0, 0, huge_negative};
    float r1[5] = {0, 0, 0, 0, huge_negative};
    const float *rows[2] = {r0, r1};
    double cum[2] = {-1.0, -0.5};
    double lp[5];
    BeamCandidate cands[4], chosen[2];
    beam_choose(rows, cum, 2, 5, 2, lp, cands, chosen);
    /* Proposals: beam 0: token 0 at -1 + ln(1/2) = -1.693, token 1 at
     * -1 + ln(1/4) = -2.386; beam 1: tokens 0 and 1 (the lower ids of the
     * four equal ones) at -0.5 + ln(1/4) = -1.886. Kept: (0, 0), then
     * (1, 0) before (1, 1) (lower token among equal scores). */
    ck_assert_int_eq(chosen[0].parent, 0);
    ck_assert_int_eq(chosen[0].token, 0);
    ck_assert_double_eq_tol(chosen[0].score, -1.0 + log(0.5), 1e-6);
    ck_assert_int_eq(chosen[1].parent, 1);
    ck_assert_int_eq(chosen[1].token, 0);
    ck_assert_double_eq_tol(chosen[1].score, -0.5 + log(0.25), 1e-6);
    /* The first step: one row (the prompt) proposes all of them, best first. */
    BeamCandidate three[3];
    beam_choose(rows, (double[]){0.0}, 1, 5, 3, lp, cands, three);
    ck_assert_int_eq(three[0].token, 0);
    ck_assert_int_eq(three[1].token, 1);
    ck_assert_int_eq(three[2].token, 2); /* 2 and 3 tie: the lower id */
    ck_assert_double_eq_tol(three[1].score, log(0.25), 1e-6);
    /* Equal scores from two beams: the lower beam first. */
    float same[5] = {1, 0, 0, 0, 0};
    const float *two[2] = {same, same};
    beam_choose(two, (double[]){-2.0, -2.0}, 2, 5, 2, lp, cands, chosen);
    ck_assert(chosen[0].parent == 0 && chosen[0].token == 0 && chosen[1].parent == 1 && chosen[1].token == 0);
}
END_TEST

/* ------------------------------------------------------------ the reference */

enum { MAX_W = 8, MAX_T = 65 };

typedef struct {
    int tokens[MAX_T];
    int n;
    double cum;
    int live; /* 1: still searching; 0: a finished hypothesis */
} Hyp;

/* The penalties as sampler.h defines them, written out again: token v's
 * logit, repetition first (any token of the prompt or the output), then
 * frequency and presence (the output's tokens only). */
static float penalised(const SamplingParams *p, const Hyp *h, int n_prompt, int v, float x)
{
    int in_prompt = 0, count = 0;
    for (int i = 0; i < h->n; i++)
        if (h->tokens[i] == v) {
            in_prompt |= i < n_prompt;
            count += i >= n_prompt;
        }
    if (in_prompt || count)
        x = x > 0.0f ? x / p->repetition_penalty : x * p->repetition_penalty;
    if (count) {
        x -= p->frequency_penalty * (float)count;
        x -= p->presence_penalty;
    }
    return x;
}

/* The log softmax of the next token after hyp, recomputed from scratch,
 * after the penalties of @p p (NULL: none) by hyp's own tokens. */
static void next_logprobs(const Model *m, const Hyp *h, int n_prompt, const SamplingParams *p, float *row, double *lp)
{
    int vocab = m->cfg.vocab_size;
    float *all = test_cpu_logits(m, h->tokens, h->n, DTYPE_F32);
    memcpy(row, all + (size_t)(h->n - 1) * vocab, (size_t)vocab * sizeof(float));
    free(all);
    for (int v = 0; p && v < vocab; v++)
        row[v] = penalised(p, h, n_prompt, v, row[v]);
    double max = row[0], sum = 0;
    for (int v = 1; v < vocab; v++)
        max = row[v] > max ? row[v] : max;
    for (int v = 0; v < vocab; v++)
        sum += exp((double)row[v] - max);
    for (int v = 0; v < vocab; v++)
        lp[v] = (double)row[v] - (max + log(sum));
}

typedef struct {
    double score;
    int parent, token;
} Proposal;

static int proposal_order(const void *a, const void *b)
{
    const Proposal *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->parent != y->parent)
        return x->parent - y->parent;
    return x->token - y->token;
}

/* Beam search as beam.h describes it, written out again with the plain
 * reference logits: W slots; each step the live slots, in slot order,
 * propose their best tokens (by logit, lower id first); the best `live`
 * proposals are kept, each in its parent's slot first, else in the first
 * slot nobody extends; EOS or the last allowed token finishes a slot. The
 * best finished hypothesis by sum of log probabilities / length. Each
 * beam's logits are penalised by its own tokens first (@p p; NULL: no
 * penalties). */
static double reference_beam(const Model *m, const int *prompt, int n_prompt, int max_tokens, int w,
                             const SamplingParams *p, Hyp *best)
{
    int vocab = m->cfg.vocab_size;
    Hyp slot[MAX_W], next[MAX_W];
    for (int k = 0; k < w; k++)
        slot[k] = (Hyp){.n = n_prompt, .cum = 0.0, .live = 1};
    for (int k = 0; k < w; k++)
        memcpy(slot[k].tokens, prompt, (size_t)n_prompt * sizeof(int));
    float *row = malloc((size_t)vocab * sizeof(float));
    double *lp = malloc((size_t)vocab * sizeof(double));
    Proposal *props = malloc((size_t)MAX_W * MAX_W * sizeof(Proposal));
    int first = 1;
    for (;;) {
        int live_idx[MAX_W], n_live = 0, n_props = 0;
        for (int k = 0; k < w; k++)
            if (slot[k].live)
                live_idx[n_live++] = k;
        if (n_live == 0)
            break;
        for (int j = 0; j < (first ? 1 : n_live); j++) {
            next_logprobs(m, &slot[live_idx[j]], n_prompt, p, row, lp);
            for (int c = 0; c < n_live; c++) { /* the c-th largest logit, lower id first */
                int pick = -1;
                for (int v = 0; v < vocab; v++) {
                    int used = 0;
                    for (int q = n_props - c; q < n_props; q++)
                        used |= props[q].token == v;
                    if (!used && (pick < 0 || row[v] > row[pick]))
                        pick = v;
                }
                props[n_props++] = (Proposal){slot[live_idx[j]].cum + lp[pick], j, pick};
            }
        }
        first = 0;
        qsort(props, (size_t)n_props, sizeof *props, proposal_order);
        int target[MAX_W], taken[MAX_W] = {0};
        for (int c = 0; c < n_live; c++) {
            target[c] = taken[props[c].parent] ? -1 : props[c].parent;
            taken[props[c].parent] = 1;
        }
        for (int c = 0, free_pos = 0; c < n_live; c++)
            if (target[c] < 0) {
                while (taken[free_pos])
                    free_pos++;
                target[c] = free_pos;
                taken[free_pos] = 1;
            }
        memcpy(next, slot, sizeof slot);
        for (int c = 0; c < n_live; c++) {
            Hyp *h = &next[live_idx[target[c]]];
            *h = slot[live_idx[props[c].parent]];
            h->cum = props[c].score;
            if (props[c].token == TOKEN_EOS || props[c].token == TOKEN_BOS) {
                h->live = 0;
                continue;
            }
            h->tokens[h->n++] = props[c].token;
            if (h->n >= max_tokens)
                h->live = 0;
        }
        memcpy(slot, next, sizeof slot);
    }
    int b = 0;
    for (int k = 1; k < w; k++)
        if (slot[k].cum / slot[k].n > slot[b].cum / slot[b].n)
            b = k;
    *best = slot[b];
    free(row);
    free(lp);
    free(props);
    return slot[b].cum / slot[b].n;
}

/* ------------------------------------------------------------ runs */

typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
} BeamRun;

static void beam_run(BeamRun *br, const TestModel *f, const char *requests, CliOptions o)
{
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&br->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    br->o = o;
    ck_assert_msg(serving_run_init(&br->run, &f->m, &f->t, &br->o, &br->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_serve(&br->run, &br->server, NULL, &err) == 0, "beam %d, block size %d, budget %zu: %s",
                  o.beam_width, o.block_size, o.kv_budget, err.msg);
}

/* Every block back in the pool, every refcount 0, nothing leaked. */
static void beam_run_close(BeamRun *br)
{
    PagedServer *s = br->server;
    ck_assert_msg(s->kv.pool.n_free == s->kv.pool.n_blocks, "%d blocks still held", block_pool_used(&s->kv.pool));
    for (int b = 0; b < s->kv.pool.n_blocks; b++)
        ck_assert_msg(s->kv.pool.ref_count[b] == 0, "block %d has refcount %d", b, s->kv.pool.ref_count[b]);
    ck_assert_int_eq(s->n_running, 0);
    paged_close(br->server);
    serving_run_free(&br->run);
    request_file_free(&br->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static CliOptions beams(int w, int block_size, size_t budget)
{
    CliOptions o;
    cli_defaults(&o);
    o.beam_width = w;
    o.block_size = block_size;
    o.kv_budget = budget;
    return o;
}

static const char *REQUESTS = "30\tthe end of it\n12\tab\n40\tonce there was\n25\tx\n";

/* --beam 1 gives every request its greedy tokens: the same as without
 * --beam, and the same as the contiguous solo reference. */
START_TEST(beam_one_is_greedy)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    BeamRun br, plain;
    beam_run(&plain, &f, REQUESTS, beams(0, 4, 0));
    int n_reqs = plain.run.n_reqs, n_tokens[8], finish[8], tokens[8][MAX_T];
    ck_assert_int_le(n_reqs, 8);
    for (int i = 0; i < n_reqs; i++) {
        n_tokens[i] = plain.run.reqs[i].n_tokens;
        finish[i] = plain.run.reqs[i].finish;
        memcpy(tokens[i], plain.run.reqs[i].tokens, (size_t)n_tokens[i] * sizeof(int));
    }
    beam_run_close(&plain);
    beam_run(&br, &f, REQUESTS, beams(1, 4, 0));
    ck_assert_int_eq(br.run.n_reqs, n_reqs);
    for (int i = 0; i < n_reqs; i++) {
        const Request *a = &br.run.reqs[i];
        int want[MAX_T];
        int n = test_solo_tokens(&f.m, &f.t, br.rf.items[i].prompt, br.rf.items[i].max_new_tokens, want);
        ck_assert_msg(a->n_tokens == n_tokens[i] && memcmp(a->tokens, tokens[i], (size_t)a->n_tokens * sizeof(int)) == 0,
                      "request %d: --beam 1 differs from greedy", i);
        ck_assert_msg(n == a->n_tokens - a->n_prompt && memcmp(want, a->tokens + a->n_prompt, (size_t)n * sizeof(int)) == 0,
                      "request %d: --beam 1 differs from the solo reference", i);
        ck_assert_int_eq(a->finish, finish[i]);
        ck_assert_int_eq(beam_best(br.server->beam, i), i);
    }
    beam_run_close(&br);
    test_model_free(&f);
}
END_TEST

/* The best beam of every prompt equals the reference's, tokens and score,
 * and finishes as it does (with the run's penalties, if any). */
static void expect_reference(const TestModel *f, BeamRun *br, int w)
{
    const BeamSearch *b = br->server->beam;
    SamplingParams p = cli_sampling_params(&br->o);
    for (int line = 0; line < br->rf.count; line++) {
        const Request *first = &br->run.reqs[line * w];
        Hyp ref;
        double score = reference_beam(&f->m, first->tokens, first->n_prompt, first->max_tokens, w,
                                      sampling_params_penalize(&p) ? &p : NULL, &ref);
        int i = beam_best(b, line * w);
        ck_assert_msg(i >= line * w && i < line * w + w, "prompt %d: no best beam", line);
        const Request *r = &br->run.reqs[i];
        ck_assert_msg(r->n_tokens == ref.n && memcmp(r->tokens, ref.tokens, (size_t)ref.n * sizeof(int)) == 0,
                      "prompt %d, --beam %d, block size %d, budget %zu: best beam of %d tokens differs from the "
                      "reference's %d", line, w, br->o.block_size, br->o.kv_budget, r->n_tokens, ref.n);
        ck_assert_msg(beam_score(b, i) == score, "prompt %d: score %.17g, reference %.17g", line, beam_score(b, i),
                      score);
    }
}

START_TEST(best_beam_equals_the_reference)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    for (int w = 2; w <= 4; w++) {
        BeamRun br;
        beam_run(&br, &f, REQUESTS, beams(w, 4, 0));
        expect_reference(&f, &br, w);
        /* Beams share blocks: the prompt's, and each other's after forks. */
        ck_assert_int_gt(br.server->blocks_saved_peak, 0);
        ck_assert_int_gt(br.server->cow_copies, 0);
        beam_run_close(&br);
    }
    test_model_free(&f);
}
END_TEST

/* The penalties, each beam by its own tokens: --beam 1 is greedy decoding
 * with the same penalties, and wider beams equal the reference, which
 * penalises every hypothesis by its own tokens (a count carried over
 * from the beam a slot held before a move would differ). */
START_TEST(beams_with_penalties)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    CliOptions o = beams(1, 4, 0);
    o.repetition_penalty = 1.4f;
    o.frequency_penalty = 0.6f;
    o.presence_penalty = 0.3f;
    SamplingParams p = cli_sampling_params(&o), none = sampling_params_default();
    BeamRun br;
    beam_run(&br, &f, REQUESTS, o);
    int changed = 0;
    for (int i = 0; i < br.run.n_reqs; i++) {
        const Request *a = &br.run.reqs[i];
        const char *prompt = br.rf.items[i].prompt;
        int steps = br.rf.items[i].max_new_tokens, want[MAX_T], plain[MAX_T];
        int n = test_solo_tokens_params(&f.m, &f.t, prompt, steps, &p, 1, want);
        ck_assert_msg(n == a->n_tokens - a->n_prompt && memcmp(want, a->tokens + a->n_prompt, (size_t)n * sizeof(int)) == 0,
                      "request %d: --beam 1 with penalties differs from greedy decoding with them", i);
        int m = test_solo_tokens_params(&f.m, &f.t, prompt, steps, &none, 1, plain);
        changed += m != n || memcmp(want, plain, (size_t)n * sizeof(int)) != 0;
    }
    ck_assert_msg(changed > 0, "the penalties changed no request's greedy tokens: the test shows nothing");
    beam_run_close(&br);
    for (int w = 2; w <= 4; w++) {
        o.beam_width = w;
        beam_run(&br, &f, REQUESTS, o);
        expect_reference(&f, &br, w);
        beam_run_close(&br);
    }
    test_model_free(&f);
}
END_TEST

/* The same best beams for every block size and budget, including budgets
 * where groups are preempted whole and recomputed. */
START_TEST(same_beams_every_block_size_and_budget)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 23);
    const int w = 3;
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    /* The largest group may need 3 x 64 positions unshared: 192 rows. */
    static const struct {
        int block_size;
        size_t rows;
        int watermark;
    } cases[] = {{1, 0, 1}, {2, 0, 1}, {8, 0, 1}, {16, 0, 1}, {4, 196, 0}, {8, 200, 0}, {16, 208, 0}, {2, 230, 1}};
    long preemptions = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        BeamRun br;
        CliOptions o = beams(w, cases[c].block_size, cases[c].rows * per_token);
        o.watermark = cases[c].watermark;
        beam_run(&br, &f, REQUESTS, o);
        for (int i = 0; i < br.run.n_reqs; i++)
            ck_assert_msg(br.run.reqs[i].finish != REQ_FINISH_REJECTED, "case %zu: request %d rejected: %s", c, i,
                          br.run.reqs[i].note);
        expect_reference(&f, &br, w);
        preemptions += br.server->preemptions;
        beam_run_close(&br);
    }
    ck_assert_msg(preemptions > 0, "no case preempted a group: the budgets are too large to test that");
    test_model_free(&f);
}
END_TEST

/* One new token each: every hypothesis ends in the admission step, while
 * all of them still hold the prompt's blocks (shared W ways): the saving
 * at the peak is (W - 1) / W exactly, for beams and for --n samples. */
START_TEST(sharing_fraction_by_hand)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    for (int w = 2; w <= 4; w++) {
        BeamRun br;
        beam_run(&br, &f, "1\tthe end of it\n", beams(w, 4, 0));
        const PagedSharing *sh = br.server->sharing;
        int blocks = block_count_for_tokens(br.run.reqs[0].n_prompt, 4);
        ck_assert_int_eq(sh->logical_at_peak, w * blocks);
        ck_assert_int_eq(sh->saved_at_peak, (w - 1) * blocks);
        beam_run_close(&br);
        CliOptions o = beams(0, 4, 0);
        o.n_samples = w;
        o.temperature = 1.0f;
        beam_run(&br, &f, "1\tthe end of it\n", o);
        ck_assert_int_eq(br.server->sharing->logical_at_peak, w * blocks);
        ck_assert_int_eq(br.server->sharing->saved_at_peak, (w - 1) * blocks);
        ck_assert_ptr_null(br.server->beam);
        beam_run_close(&br);
    }
    /* Without --n or --beam nothing is kept (the default report is as before). */
    BeamRun br;
    beam_run(&br, &f, "1\tab\n", beams(0, 4, 0));
    ck_assert_ptr_null(br.server->sharing);
    beam_run_close(&br);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the program */

static void run_ch04(const char *const *args, ProgramResult *r)
{
    const char *argv[40] = {"ch04-paged"};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_refusal(const char *const *args, const char *word)
{
    ProgramResult r;
    run_ch04(args, &r);
    ck_assert_msg(r.status == 1, "expected exit 1, got %d: %s", r.status, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1 && strstr(r.err, "ch04-paged: error: ") == r.err, "%s", r.err);
    ck_assert_msg(strstr(r.err, word), "stderr lacks '%s': %s", word, r.err);
    ck_assert_int_eq(r.out_len, 0);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_beams)
{
    expect_refusal((const char *[]){"--beam", "0", NULL}, "--beam");
    expect_refusal((const char *[]){"--beam", "65", NULL}, "--beam");
    expect_refusal((const char *[]){"--beam", "two", NULL}, "--beam");
    expect_refusal((const char *[]){"--beam", "2", "--n", "2", "--temperature", "1", NULL}, "neither --n");
    expect_refusal((const char *[]){"--beam", "2", "--temperature", "0.5", NULL}, "--temperature");
    expect_refusal((const char *[]){"--beam", NULL}, "needs a value");
    expect_refusal((const char *[]){"--beam", "2", "--max-num-batched-tokens", "64", NULL}, "schedules its groups");
    expect_refusal((const char *[]){"--beam", "2", "--preempt", "swap", NULL}, "--swap-space");
    /* 3 blocks hold the smallest request alone (2 blocks), not its 2 beams (4). */
    expect_refusal((const char *[]){"--beam", "2", "--kv-budget", "60KiB", NULL}, "4 blocks of 16 tokens (26 "
                   "positions, for each of 2 beams) but the whole pool has 3");
    ProgramResult r;
    const char *argv[] = {"ch03-batching", "--beam", "2", NULL};
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1 && strstr(r.err, "unknown option '--beam'"), "%s", r.err);
    test_result_free(&r);
}
END_TEST

/* --out holds one line per prompt, its best beam, with its score; stdout
 * stays empty; the JSON report has the sharing figures (and so does --n). */
START_TEST(program_writes_the_best_beams)
{
    if (!test_shared_file("stories260K.bin")) {
        test_skip("program_writes_the_best_beams", TEST_NOT_FOUND("stories260K.bin"));
        return;
    }
    char out[PATH_MAX], json[PATH_MAX], reqs[PATH_MAX];
    const char *file = "20\tOnce upon a time\n12\tThe cat\n";
    test_write_temp(file, strlen(file), reqs);
    test_write_temp("", 0, out);
    test_write_temp("", 0, json);
    ProgramResult r;
    run_ch04((const char *[]){"--requests", reqs, "--beam", "3", "--out", out, "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_int_eq(r.out_len, 0);
    ck_assert_msg(strstr(r.err, "of the blocks the same sequences would hold unshared"), "%s", r.err);
    test_result_free(&r);
    char *lines = test_slurp(out);
    ck_assert_int_eq(test_count_lines(lines), 2);
    ck_assert_msg(strstr(lines, "{\"id\":0,") && strstr(lines, "{\"id\":1,") && strstr(lines, "\"beam_width\":3") &&
                      strstr(lines, "\"beam_score\":-"), "%s", lines);
    free(lines);
    char *report = test_slurp(json);
    ck_assert_msg(strstr(report, "\"sharing_saved_fraction\": ") && strstr(report, "\"beam_width\": 3"), "%s",
                  report);
    free(report);
    run_ch04((const char *[]){"--requests", reqs, "--n", "2", "--temperature", "0.8", "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    test_result_free(&r);
    report = test_slurp(json);
    ck_assert_msg(strstr(report, "\"sharing_saved_fraction\": ") && !strstr(report, "beam_width"), "%s", report);
    free(report);
    run_ch04((const char *[]){"--requests", reqs, "--json", json, NULL}, &r);
    test_result_free(&r);
    report = test_slurp(json);
    ck_assert_msg(!strstr(report, "sharing_saved_fraction"), "the default report changed: %s", report);
    free(report);
    remove(out);
    remove(json);
    remove(reqs);
}
END_TEST

/* Every "tokens":[...] of a --out file, in order, joined by newlines. */
static void all_tokens(const char *jsonl, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *at = strstr(jsonl, "\"tokens\":["); at; at = strstr(at + 1, "\"tokens\":[")) {
        const char *end = strchr(at, ']');
        ck_assert(end);
        int w = snprintf(out + used, n - used, "%.*s\n", (int)(end - at + 1), at);
        ck_assert(w > 0 && (size_t)w < n - used);
        used += (size_t)w;
    }
}

/* Issue 36 A: chapter 5's cache keeps the blocks of finished beams as
 * free cached blocks. Beam admission must count them, as the normal
 * scheduler does (block_pool_available()), and reclaim them: counting the
 * free stack alone left every later group waiting ("the scheduler is
 * stuck") at this tight budget. The beams are the same as with no cache. */
START_TEST(beams_under_the_prefix_cache)
{
    if (!test_shared_file("stories260K.bin")) {
        test_skip("beams_under_the_prefix_cache", TEST_NOT_FOUND("stories260K.bin"));
        return;
    }
    char reqs[PATH_MAX], out[PATH_MAX];
    const char *file = "40\tOnce upon a time\n30\tThe cat\n";
    test_write_temp(file, strlen(file), reqs);
    test_write_temp("", 0, out);
    static char want[8192], got[8192];
    static const char *const modes[] = {"off", "hash", "radix"};
    for (int m = 0; m < 3; m++) {
        const char *argv[] = {"ch05-prefix", "--model", test_shared_file("stories260K.bin"), "--requests", reqs,
                              "--beam", "4", "--kv-budget", "300KiB", "--prefix-cache", modes[m], "--quiet", "--out",
                              out, NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        ck_assert_msg(r.status == 0, "--prefix-cache %s: exit %d: %s", modes[m], r.status, r.err);
        test_result_free(&r);
        char *lines = test_slurp(out);
        all_tokens(lines, m ? got : want, sizeof want);
        free(lines);
        ck_assert_msg(test_count_lines(want) == 2, "%s", want);
        ck_assert_msg(m == 0 || strcmp(want, got) == 0, "--prefix-cache %s gave\n%sand off gave\n%s", modes[m], got,
                      want);
    }
    remove(out);
    remove(reqs);
}
END_TEST

Suite *suite_beam(void)
{
    Suite *s = suite_create("beam");
    TCase *unit = tcase_create("choose");
    tcase_add_test(unit, choose_by_hand);
    suite_add_tcase(s, unit);
    TCase *runs = tcase_create("runs");
    tcase_set_timeout(runs, 120);
    tcase_add_test(runs, beam_one_is_greedy);
    tcase_add_test(runs, best_beam_equals_the_reference);
    tcase_add_test(runs, beams_with_penalties);
    tcase_add_test(runs, same_beams_every_block_size_and_budget);
    tcase_add_test(runs, sharing_fraction_by_hand);
    suite_add_tcase(s, runs);
    TCase *program = tcase_create("program");
    tcase_set_timeout(program, 60);
    tcase_add_test(program, program_refuses_bad_beams);
    tcase_add_test(program, program_writes_the_best_beams);
    tcase_add_test(program, beams_under_the_prefix_cache);
    suite_add_tcase(s, program);
    return s;
}

REGISTER_LAB_SUITE(beam)
