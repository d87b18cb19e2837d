/* Chapter 6: the sliding window, the sinks and H2O keep exactly the
 * positions they promise after every step, at every block size; blocks go
 * back to the pool; eviction is deterministic; without the options the
 * program is chapter 4; bad options are refused in one line. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "mem.h"
#include "paged.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"
#include "window.h"

/* ------------------------------------------------------------ fixtures */

/* Three requests that run (with --ignore-eos) to 60, 44 and 20 tokens. */
static const char *REQUESTS = "57\tab\n40\tthe end of it\n18\tx\n";

/* A windowed run, stepped here so that every step can be inspected. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server;
    WindowCache w;
    int steps;
} WinRun;

/* Called after every step with the run: checks what the policy promises. */
typedef void (*StepCheck)(const WinRun *wr);

static void win_open_requests(WinRun *wr, const TestModel *f, CliOptions o, const WindowOptions *wo,
                              const char *requests)
{
    Err err = {{0}};
    memset(wr, 0, sizeof *wr);
    ck_assert_msg(request_file_parse(&wr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    wr->o = o;
    ck_assert_msg(serving_run_init(&wr->run, &f->m, &f->t, &wr->o, &wr->rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(window_check(wo, &wr->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(window_open(&wr->w, wo, &wr->run, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_open(&wr->run, &wr->server, NULL, &err) == 0, "%s", err.msg);
    wr->w.server = wr->server;
}

static void win_open(WinRun *wr, const TestModel *f, CliOptions o, const WindowOptions *wo)
{
    win_open_requests(wr, f, o, wo, REQUESTS);
}

static void win_serve(WinRun *wr, StepCheck check)
{
    Err err = {{0}};
    while (serving_unfinished(&wr->run)) {
        ck_assert_msg(window_step(&wr->w, &wr->run, &err) == 0, "%s", err.msg);
        wr->steps++;
        if (check)
            check(wr);
    }
}

/* Every block back in the pool: the free count of a fresh pool. */
static void win_close(WinRun *wr)
{
    const BlockPool *p = &wr->server->kv.pool;
    ck_assert_msg(p->n_free == p->n_blocks, "%d of %d blocks free after the run", p->n_free, p->n_blocks);
    for (int b = 0; b < p->n_blocks; b++)
        ck_assert_int_eq(p->ref_count[b], 0);
    window_close(&wr->w);
    paged_close(wr->server);
    serving_run_free(&wr->run);
    request_file_free(&wr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static CliOptions options(int block_size)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = block_size;
    o.kv_budget = 1u << 20;
    return o;
}

static WindowOptions policy(int window, int sinks, int heavy)
{
    WindowOptions w = {.window = window, .sinks = sinks, .heavy = heavy, .ignore_eos = 1};
    w.evict = heavy ? WINDOW_EVICT_H2O : WINDOW_EVICT_NONE;
    return w;
}

/* ------------------------------------------------------------ the invariants */

static const unsigned char *held_of(const WinRun *wr, int seq)
{
    return wr->w.held + (size_t)seq * wr->w.seq_len;
}

/* Blocks a table holds (holes left out), and that every hole is a block
 * none of whose rows is held, every held block one with a row held. */
static int blocks_held_checked(const WinRun *wr, int seq)
{
    const BlockTable *t = &wr->server->kv.tables.tables[seq];
    const int bs = wr->server->kv.pool.shape.block_size;
    const unsigned char *held = held_of(wr, seq);
    int n = 0, cached = wr->run.reqs[seq].n_cached;
    for (int i = 0; i < t->n_blocks; i++) {
        int any = 0;
        for (int pos = i * bs; pos < (i + 1) * bs && pos < cached; pos++)
            any |= held[pos];
        if (t->blocks[i] == BLOCK_HOLE)
            ck_assert_msg(!any, "seq %d: block %d is a hole but holds a row", seq, i);
        else
            ck_assert_msg(any || i == t->n_blocks - 1, "seq %d: block %d is held with no row", seq, i);
        n += t->blocks[i] != BLOCK_HOLE;
    }
    return n;
}

/* A position's heavy-hitter score, summed as window.c sums it. */
static double score_of(const WinRun *wr, int seq, int pos)
{
    double sum = 0.0;
    for (int h = 0; h < wr->w.n_heads; h++)
        sum += wr->w.attn[((size_t)seq * wr->w.n_heads + h) * wr->w.seq_len + pos];
    return sum;
}

/* H2O chose the heavy hitters: an evicted position's score froze when it
 * went (nothing attends to it any more), a kept one's only grows, and each
 * eviction took the lowest; so every kept position between the sinks and
 * the window scores at least as much as every evicted one. (A recomputed
 * sequence starts its scores again: checked without preemptions.) */
static void check_heavy_hitters(const WinRun *wr, int seq, int n)
{
    const WindowOptions *o = &wr->w.opt;
    const unsigned char *held = held_of(wr, seq);
    double kept_min = 1e300, evicted_max = -1.0;
    for (int pos = o->sinks; pos <= n - o->window; pos++) {
        double sc = score_of(wr, seq, pos);
        if (held[pos] && sc < kept_min)
            kept_min = sc;
        if (!held[pos] && sc > evicted_max)
            evicted_max = sc;
    }
    ck_assert_msg(kept_min >= evicted_max, "step %d, seq %d: a heavy hitter scores %g, an evicted position %g",
                  wr->steps, seq, kept_min, evicted_max);
}

/* After each step, for every running request that feeds position n next:
 * the sinks and n-N+1..n-1 are all held, at most H others, and the
 * positions and blocks stay within the bound. */
static void check_policy_after_step(const WinRun *wr)
{
    const WindowOptions *o = &wr->w.opt;
    const int bs = wr->server->kv.pool.shape.block_size;
    for (int k = 0; k < wr->server->n_running; k++) {
        int seq = wr->server->running[k], n = wr->run.reqs[seq].n_cached;
        const unsigned char *held = held_of(wr, seq);
        int others = 0, count = 0;
        for (int pos = 0; pos < n; pos++) {
            int sink = pos < o->sinks, recent = pos > n - o->window;
            if (sink)
                ck_assert_msg(held[pos], "step %d: sink %d of seq %d evicted", wr->steps, pos, seq);
            if (recent)
                ck_assert_msg(held[pos], "step %d: recent position %d of seq %d (next %d) evicted", wr->steps, pos,
                              seq, n);
            others += held[pos] && !sink && !recent;
            count += held[pos];
        }
        ck_assert_int_le(others, o->heavy);
        if (o->evict == WINDOW_EVICT_H2O && wr->server->preemptions == 0)
            check_heavy_hitters(wr, seq, n);
        if (o->evict == WINDOW_EVICT_H2O && n - o->window + 1 - o->sinks >= o->heavy)
            ck_assert_int_eq(others, o->heavy); /* H2O keeps H once that many have left the window */
        ck_assert_int_eq(count, wr->w.n_held[seq]);
        ck_assert_int_le(count + 1, window_bound_positions(o)); /* with the next token's row */
        ck_assert_int_le(blocks_held_checked(wr, seq), window_bound_blocks(o, bs));
    }
    ck_assert_int_le(wr->w.peak_positions, window_bound_positions(o));
    ck_assert_int_le(wr->w.peak_blocks, window_bound_blocks(o, bs));
}

START_TEST(window_bound_at_every_block_size)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
    const int shapes[][3] = {{8, 0, 0}, {8, 4, 0}, {13, 3, 0}, {1, 1, 0}, {6, 2, 5}, {9, 0, 3}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            WinRun wr;
            WindowOptions wo = policy(shapes[k][0], shapes[k][1], shapes[k][2]);
            win_open(&wr, &f, options(sizes[s]), &wo);
            win_serve(&wr, check_policy_after_step);
            /* The longest request reached 60 positions: the bound was reached, and
             * the window dropped positions. */
            ck_assert_int_eq(wr.w.peak_positions, window_bound_positions(&wo));
            int longest_prompt = 0; /* a prompt's step holds the prompt, never more */
            for (int i = 0; i < wr.run.n_reqs; i++)
                longest_prompt = wr.run.reqs[i].n_prompt > longest_prompt ? wr.run.reqs[i].n_prompt : longest_prompt;
            ck_assert_int_le(wr.w.prompt_peak_positions, longest_prompt);
            ck_assert_int_gt(wr.w.evicted, 0);
            if (!wo.heavy && sizes[s] <= 8) /* whole blocks left the window */
                ck_assert_int_gt(wr.w.blocks_returned, 0);
            win_close(&wr);
        }
    test_model_free(&f);
}
END_TEST

/* A pool too small for the three requests at once: chapter 4 preempts and
 * recomputes windowed sequences (holes and all), the policy still holds
 * after every step, and every block comes back. */
START_TEST(windowed_run_with_preemptions_returns_every_block)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    const int shapes[][3] = {{6, 2, 5}, {8, 4, 0}};
    const char *eight = "57\tab\n57\tcd\n57\tef\n57\tgh\n57\tij\n57\tkl\n57\tmn\n57\top\n";
    for (int k = 0; k < 2; k++) {
        WinRun wr;
        WindowOptions wo = policy(shapes[k][0], shapes[k][1], shapes[k][2]);
        CliOptions o = options(4);
        o.kv_budget = 16 * 4 * 384; /* 16 blocks of 4 positions x 384 B */
        win_open_requests(&wr, &f, o, &wo, eight);
        win_serve(&wr, check_policy_after_step);
        ck_assert_msg(wr.server->preemptions > 0, "shape %d: no preemption", k);
        win_close(&wr);
    }
    test_model_free(&f);
}
END_TEST

/* The sliding window alone keeps exactly the sinks and the window. */
static void check_exact_window(const WinRun *wr)
{
    const WindowOptions *o = &wr->w.opt;
    for (int k = 0; k < wr->server->n_running; k++) {
        int seq = wr->server->running[k], n = wr->run.reqs[seq].n_cached;
        const unsigned char *held = held_of(wr, seq);
        for (int pos = 0; pos < n; pos++)
            ck_assert_int_eq(held[pos], pos < o->sinks || pos > n - o->window);
    }
}

START_TEST(sliding_window_keeps_exactly_sinks_and_window)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    WinRun wr;
    WindowOptions wo = policy(10, 4, 0);
    win_open(&wr, &f, options(4), &wo);
    win_serve(&wr, check_exact_window);
    win_close(&wr);
    test_model_free(&f);
}
END_TEST

/* Tokens of every request, and the final masks, of one run. */
static void run_tokens(const TestModel *f, CliOptions o, const WindowOptions *wo, int *tokens, unsigned char *held,
                       long *evicted)
{
    WinRun wr;
    win_open(&wr, f, o, wo);
    win_serve(&wr, NULL);
    for (int i = 0; i < wr.run.n_reqs; i++)
        for (int t = 0; t < 64; t++)
            tokens[i * 64 + t] = t < wr.run.reqs[i].n_tokens ? wr.run.reqs[i].tokens[t] : -1;
    if (held)
        memcpy(held, wr.w.held, (size_t)wr.run.n_reqs * (size_t)wr.w.seq_len);
    *evicted = wr.w.evicted;
    win_close(&wr);
}

START_TEST(h2o_eviction_is_deterministic)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    WindowOptions wo = policy(6, 2, 5);
    int a[3 * 64], b[3 * 64];
    unsigned char ha[3 * 64], hb[3 * 64];
    long ea, eb;
    CliOptions one = options(4), two = options(4);
    one.threads = 1;
    two.threads = 2;
    run_tokens(&f, one, &wo, a, ha, &ea);
    run_tokens(&f, two, &wo, b, hb, &eb);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_mem_eq(ha, hb, sizeof ha);
    ck_assert_int_eq(ea, eb);
    /* Another block size: the same positions go (eviction never looks at blocks). */
    CliOptions other = options(16);
    run_tokens(&f, other, &wo, b, hb, &eb);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_mem_eq(ha, hb, sizeof ha);
    test_model_free(&f);
}
END_TEST

/* A policy that drops positions changes what the model sees: H2O and the
 * plain window must not be the same run (a mask that attention ignored
 * would make them equal). */
START_TEST(eviction_changes_what_attention_sees)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    int full[3 * 64], win[3 * 64];
    long e;
    WindowOptions none = {.ignore_eos = 1}, small = policy(2, 0, 0);
    run_tokens(&f, options(4), &none, full, NULL, &e);
    ck_assert_int_eq(e, 0);
    run_tokens(&f, options(4), &small, win, NULL, &e);
    ck_assert_int_gt(e, 0);
    ck_assert_msg(memcmp(full, win, sizeof full) != 0, "a 2-position window gave the full cache's tokens");
    test_model_free(&f);
}
END_TEST

/* Without the options chapter 6 is chapter 4: the same tokens. */
START_TEST(default_run_equals_chapter_4)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 5);
    int sizes[] = {1, 8, 64};
    for (int s = 0; s < 3; s++) {
        int win[3 * 64];
        long e;
        WindowOptions none = {0};
        run_tokens(&f, options(sizes[s]), &none, win, NULL, &e);
        RequestFile rf;
        ServingRun run;
        PagedServer *server = NULL;
        CliOptions o = options(sizes[s]);
        Err err = {{0}};
        ck_assert(request_file_parse(&rf, REQUESTS, strlen(REQUESTS), "t", &err) == 0);
        ck_assert(serving_run_init(&run, &f.m, &f.t, &o, &rf, &err) == 0);
        ck_assert_msg(paged_serve(&run, &server, NULL, &err) == 0, "%s", err.msg);
        for (int i = 0; i < run.n_reqs; i++)
            for (int t = 0; t < 64; t++)
                ck_assert_int_eq(win[i * 64 + t], t < run.reqs[i].n_tokens ? run.reqs[i].tokens[t] : -1);
        paged_close(server);
        serving_run_free(&run);
        request_file_free(&rf);
    }
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the program */

typedef struct {
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX];
} ProgramFiles;

static void program_files(ProgramFiles *pf)
{
    test_write_synthetic(&TEST_SYNTH_GQA, 11, 0, 0, pf->model, pf->tok);
    test_write_temp(REQUESTS, strlen(REQUESTS), pf->reqs);
}

static void program_files_remove(const ProgramFiles *pf)
{
    remove(pf->model);
    remove(pf->tok);
    remove(pf->reqs);
}

static void expect_refusal(const ProgramFiles *pf, const char *const *extra, const char *word)
{
    const char *argv[24] = {"ch06-window", "--model", pf->model, "--tokenizer", pf->tok, "--requests", pf->reqs};
    int n = 7;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1, "exit %d for %s: %s", r.status, word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    ck_assert_msg(strncmp(r.err, "ch06-window: error: ", 20) == 0 && strstr(r.err, word) &&
                      test_count_lines(r.err) == 1,
                  "expected one error line naming '%s': %s", word, r.err);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_options)
{
    ProgramFiles pf;
    program_files(&pf);
    const char *none[] = {"--kv-window", "0", NULL}, *neg[] = {"--kv-window", "-3", NULL},
               *junk[] = {"--kv-window", "8x", NULL}, *sinks[] = {"--kv-sinks", "4", NULL},
               *h2o[] = {"--kv-window", "8", "--kv-evict", "h2o", NULL},
               *heavy[] = {"--kv-window", "8", "--kv-heavy", "4", NULL},
               *evict[] = {"--kv-window", "8", "--kv-evict", "lru", NULL}, *missing[] = {"--kv-window", NULL},
               *big[] = {"--kv-window", "60", "--kv-sinks", "5", NULL},
               *fork[] = {"--kv-window", "8", "--n", "2", "--temperature", "1", NULL},
               *swap[] = {"--kv-window", "8", "--preempt", "swap", NULL},
               *force[] = {"--kv-force", "/nonexistent/tokens", NULL},
               *hot[] = {"--kv-force", pf.reqs, "--temperature", "0.8", NULL},
               *argmax[] = {"--kv-argmax", "/tmp/kvlab-never-written", NULL},
               *beam[] = {"--beam", "2", NULL}, *beam_window[] = {"--kv-window", "8", "--beam", "2", NULL};
    expect_refusal(&pf, none, "--kv-window");
    expect_refusal(&pf, neg, "--kv-window");
    expect_refusal(&pf, junk, "--kv-window");
    expect_refusal(&pf, sinks, "--kv-window");
    expect_refusal(&pf, h2o, "--kv-heavy");
    expect_refusal(&pf, heavy, "--kv-evict h2o");
    expect_refusal(&pf, evict, "lru");
    expect_refusal(&pf, missing, "needs a value");
    expect_refusal(&pf, big, "context");
    expect_refusal(&pf, fork, "--n");
    expect_refusal(&pf, swap, "swap");
    expect_refusal(&pf, force, "/nonexistent/tokens");
    expect_refusal(&pf, hot, "greedy");
    expect_refusal(&pf, argmax, "--kv-argmax needs --kv-force");
    /* Beam search has a step of its own in chapter 4, which window_step()
     * is not: without the refusal --out came out empty. */
    expect_refusal(&pf, beam, "--beam");
    expect_refusal(&pf, beam_window, "--beam");
    program_files_remove(&pf);
}
END_TEST

/* Ids of a --kv-tokens/--kv-argmax file, in order (at most max). */
static int read_ids(const char *path, int *out, int max)
{
    char *text = test_slurp(path);
    int n = 0, off = 0, used;
    while (n < max && sscanf(text + off, "%d%n", &out[n], &used) == 1) {
        off += used;
        n++;
    }
    free(text);
    return n;
}

/* The program's report: the bound, and a forced run of the full cache's
 * own tokens agrees with them at every step: its --kv-argmax file is the
 * tokens file itself, and a window's --kv-argmax file agrees with them in
 * the share that its forced_agreement reports. */
START_TEST(program_reports_bound_and_forced_agreement)
{
    ProgramFiles pf;
    program_files(&pf);
    char tok[PATH_MAX], json[PATH_MAX], full_best[PATH_MAX], window_best[PATH_MAX];
    test_write_temp("", 0, tok);
    test_write_temp("", 0, json);
    test_write_temp("", 0, full_best);
    test_write_temp("", 0, window_best);
    const char *full[] = {"ch06-window", "--model", pf.model, "--tokenizer", pf.tok, "--requests", pf.reqs,
                          "--ignore-eos", "--quiet", "--kv-tokens", tok, NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(full, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    test_result_free(&r);
    const char *forced[] = {"ch06-window", "--model", pf.model, "--tokenizer", pf.tok, "--requests", pf.reqs,
                            "--ignore-eos", "--kv-force", tok, "--kv-argmax", full_best, "--json", json, NULL};
    ck_assert_int_eq(test_run_program(forced, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.err, "greedy token = forced token in 100.00%"), "%s", r.err);
    test_result_free(&r);
    char *tok_text = test_slurp(tok), *best_text = test_slurp(full_best);
    ck_assert_str_eq(best_text, tok_text); /* greedy forced through its own tokens chooses them again */
    free(tok_text);
    free(best_text);
    const char *windowed[] = {"ch06-window", "--model", pf.model, "--tokenizer", pf.tok, "--requests", pf.reqs,
                              "--ignore-eos", "--kv-force", tok, "--kv-window", "8", "--kv-sinks", "4",
                              "--block-size", "4", "--kv-argmax", window_best, "--json", json, NULL};
    ck_assert_int_eq(test_run_program(windowed, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.err, "peak 12 positions held (bound 12 = N + S + H), peak 4 blocks (bound 4)"), "%s",
                  r.err);
    test_result_free(&r);
    char *text = test_slurp(json);
    ck_assert_msg(strstr(text, "\"window_peak_positions\": 12,"), "%s", text);
    ck_assert_msg(strstr(text, "\"forced_steps\": 115,"), "%s", text); /* 57 + 40 + 18 tokens */
    const char *agreement = strstr(text, "\"forced_agreement\": ");
    ck_assert_msg(agreement, "%s", text);
    int want[115], got[115], same = 0;
    ck_assert_int_eq(read_ids(tok, want, 115), 115);
    ck_assert_int_eq(read_ids(window_best, got, 115), 115);
    for (int i = 0; i < 115; i++)
        same += got[i] == want[i];
    ck_assert_msg(same < 115, "a window of 8 + 4 sinks agreed at every step: the comparison cannot fail");
    double reported = strtod(agreement + strlen("\"forced_agreement\": "), NULL);
    ck_assert_msg(fabs(reported - same / 115.0) < 1e-6, "forced_agreement %g, --kv-argmax file %d of 115", reported,
                  same);
    free(text);
    remove(tok);
    remove(json);
    remove(full_best);
    remove(window_best);
    program_files_remove(&pf);
}
END_TEST

Suite *suite_ch06(void)
{
    Suite *s = suite_create("ch06");
    TCase *tc = tcase_create("ch06");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, window_bound_at_every_block_size);
    tcase_add_test(tc, sliding_window_keeps_exactly_sinks_and_window);
    tcase_add_test(tc, windowed_run_with_preemptions_returns_every_block);
    tcase_add_test(tc, h2o_eviction_is_deterministic);
    tcase_add_test(tc, eviction_changes_what_attention_sees);
    tcase_add_test(tc, default_run_equals_chapter_4);
    tcase_add_test(tc, program_refuses_bad_options);
    tcase_add_test(tc, program_reports_bound_and_forced_agreement);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch06)
