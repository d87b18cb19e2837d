/* kvsim: the capacity simulator's workloads, its numbers on cases small
 * enough to count by hand, and that its no-model runs make exactly the
 * allocation decisions of the chapters' real runs. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching.h"
#include "helpers.h"
#include "kvsim.h"
#include "mem.h"
#include "paged.h"
#include "suites.h"
#include "synth.h"

/* ---------------------------------------------------------- distributions */

START_TEST(dist_parse_and_format)
{
    KvsimDist d;
    Err err = {{0}};
    char buf[64];
    ck_assert(kvsim_dist_parse("fixed:128", &d, &err) == 0 && d.kind == KVSIM_FIXED && d.a == 128);
    ck_assert_str_eq(kvsim_dist_format(buf, sizeof buf, &d), "fixed:128");
    ck_assert(kvsim_dist_parse("uniform:1:999", &d, &err) == 0 && d.kind == KVSIM_UNIFORM && d.a == 1 && d.b == 999);
    ck_assert_str_eq(kvsim_dist_format(buf, sizeof buf, &d), "uniform:1:999");
    ck_assert(kvsim_dist_parse("lognormal:161.31:1", &d, &err) == 0 && d.kind == KVSIM_LOGNORMAL);
    ck_assert_str_eq(kvsim_dist_format(buf, sizeof buf, &d), "lognormal:161.31:1");
    ck_assert(kvsim_dist_parse("gamma:337.99:0.91", &d, &err) == 0 && d.kind == KVSIM_GAMMA && d.b == 0.91);
    ck_assert_str_eq(kvsim_dist_format(buf, sizeof buf, &d), "gamma:337.99:0.91");
    ck_assert(kvsim_dist_parse("weibull:58.45:1", &d, &err) == 0 && d.kind == KVSIM_WEIBULL && d.a == 58.45);
    ck_assert_str_eq(kvsim_dist_format(buf, sizeof buf, &d), "weibull:58.45:1");
    static const char *const bad[] = {"gamma:100:0", "gamma:100:0.01", "gamma:100:5", "gamma:0.5:1", "gamma:100",
                                      "weibull:100:0", "weibull:100:4.5", "weibull:100:-1", "fixed", "fixed:", "fixed:0", "fixed:1.5", "fixed:12x", "uniform:5:4",
                                      "uniform:0:4", "uniform:1", "lognormal:100:0", "lognormal:100", "normal:1:2",
                                      "lognormal:0.5:1", "sharegpt", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(kvsim_dist_parse(bad[i], &d, &err) == -1, "'%s' should be refused", bad[i]);
    KvsimWorkloadPreset w;
    ck_assert(kvsim_workload_preset("ShareGPT", &w) == 0);
    ck_assert_double_eq(w.input.a, 161.31);
    ck_assert_double_eq(w.output.a, 337.99);
    ck_assert(kvsim_workload_preset("alpaca", &w) == 0);
    ck_assert_double_eq(w.input.a, 19.31);
    ck_assert_double_eq(w.output.a, 58.45);
    ck_assert(kvsim_workload_preset("dolly", &w) == -1);
    KvsimGpu g;
    ck_assert(kvsim_gpu_preset("A100-80GB", &g) == 0 && g.bytes == 80000000000ULL);
    ck_assert(kvsim_gpu_preset("h200-141gb", &g) == 0 && g.bytes == 141000000000ULL);
    ck_assert(kvsim_gpu_preset("a100", &g) == -1);
}
END_TEST

START_TEST(draws_follow_their_distribution)
{
    enum { N = 100000 };
    KvsimRng r;
    kvsim_rng_seed(&r, 7);
    KvsimDist fixed = {KVSIM_FIXED, 42, 0}, uni = {KVSIM_UNIFORM, 10, 20}, logn = {KVSIM_LOGNORMAL, 100, 0.5};
    int lo = INT_MAX, hi = 0;
    double sum_u = 0, sum_l = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(kvsim_dist_draw(&fixed, 1, 100, &r), 42);
        int u = kvsim_dist_draw(&uni, 1, 100, &r);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum_u += u;
        sum_l += kvsim_dist_draw(&logn, 1, 100000, &r);
    }
    ck_assert_int_eq(lo, 10);
    ck_assert_int_eq(hi, 20);
    /* Means: 15 exactly in expectation (standard error 0.01); the lognormal
     * is parameterised by its mean, 100 (standard error about 0.17). */
    ck_assert_msg(fabs(sum_u / N - 15.0) < 0.05, "uniform mean %f", sum_u / N);
    ck_assert_msg(fabs(sum_l / N - 100.0) < 1.0, "lognormal mean %f", sum_l / N);
    /* Gamma and Weibull are parameterised by mean and coefficient of
     * variation: 100000 draws of mean 300 and CV 0.9 (untruncated: the
     * window is far beyond the tail) have a mean within 300 +- 3 (about
     * three standard errors) and a CV within 0.9 +- 0.02; a wrong shape
     * (gamma's 1/CV instead of 1/CV^2, say) or scale would miss both. */
    for (int f = 0; f < 2; f++) {
        KvsimDist d = {f == 0 ? KVSIM_GAMMA : KVSIM_WEIBULL, 300, 0.9};
        double s1 = 0, s2 = 0;
        int small = 0;
        for (int i = 0; i < N; i++) {
            double v = kvsim_dist_draw(&d, 0, 1000000, &r);
            s1 += v;
            s2 += v * v;
            small += v < 30;
        }
        double mean = s1 / N, cv = sqrt(s2 / N - mean * mean) / mean;
        ck_assert_msg(fabs(mean - 300.0) < 3.0, "%s mean %f", f ? "weibull" : "gamma", mean);
        ck_assert_msg(fabs(cv - 0.9) < 0.02, "%s cv %f", f ? "weibull" : "gamma", cv);
        /* Unlike a lognormal of the same spread, both keep the short end:
         * gamma of shape 1.23 puts 6.2% under 30, Weibull of shape 1.11 7.0%. */
        ck_assert_msg(small > N / 25 && small < N / 12, "%s: %d under 30", f ? "weibull" : "gamma", small);
    }
    /* Truncation redraws: a window of [90, 110] only ever gives values in it. */
    for (int i = 0; i < 1000; i++) {
        int v = kvsim_dist_draw(&logn, 90, 110, &r);
        ck_assert(v >= 90 && v <= 110);
    }
    /* A window the distribution cannot reach is caught by the check. */
    KvsimWorkload w = {.n_requests = 1, .input = fixed, .output = uni, .max_input = 40, .max_output = 100};
    Err err = {{0}};
    ck_assert_int_eq(kvsim_workload_check(&w, 2048, &err), -1);
    ck_assert_msg(strstr(err.msg, "--input fixed:42"), "%s", err.msg);
    w.max_input = 64;
    ck_assert_int_eq(kvsim_workload_check(&w, 2048, &err), 0);
    w.max_input = 2048;
    ck_assert_int_eq(kvsim_workload_check(&w, 2048, &err), -1);
}
END_TEST

START_TEST(workloads_are_seeded_and_arrive_at_the_rate)
{
    enum { N = 20000 };
    KvsimWorkload w = {.n_requests = N, .input = {KVSIM_UNIFORM, 1, 100}, .output = {KVSIM_UNIFORM, 1, 50},
                       .max_input = 100, .max_output = 50, .max_new_tokens = 64, .rate = 0.5, .seed = 3};
    SimRequestSpec *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
    kvsim_make_requests(&w, 2048, NULL, a);
    kvsim_make_requests(&w, 2048, NULL, b);
    ck_assert(memcmp(a, b, N * sizeof *a) == 0);
    ck_assert_int_eq(a[0].arrival_step, 0);
    for (int i = 1; i < N; i++)
        ck_assert(a[i].arrival_step >= a[i - 1].arrival_step);
    for (int i = 0; i < N; i++)
        ck_assert(a[i].max_new_tokens == 64 && a[i].output_tokens >= 1 && a[i].output_tokens <= 50);
    /* Gaps of mean 1 / 0.5 = 2 steps: the last of 20,000 arrives near step
     * 40,000 (standard deviation about 280). */
    ck_assert_msg(labs(a[N - 1].arrival_step - 2 * (N - 1)) < 1500, "last arrival %ld", a[N - 1].arrival_step);
    /* The lengths do not depend on the rate; the oracle asks for its output. */
    w.rate = 0;
    w.max_new_tokens = 0;
    kvsim_make_requests(&w, 2048, NULL, b);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(b[i].prompt_tokens, a[i].prompt_tokens);
        ck_assert_int_eq(b[i].output_tokens, a[i].output_tokens);
        ck_assert_int_eq(b[i].max_new_tokens, b[i].output_tokens);
        ck_assert_int_eq(b[i].arrival_step, 0);
    }
    w.seed = 4;
    kvsim_make_requests(&w, 2048, NULL, b);
    int same = 0;
    for (int i = 0; i < N; i++)
        same += b[i].prompt_tokens == a[i].prompt_tokens;
    ck_assert_msg(same < N / 20, "another seed should give other lengths (%d of %d equal)", same, N);
    free(a);
    free(b);
}
END_TEST

/* ---------------------------------------------------------- by hand */

/* LLaMA-7B's cache in fp16: 2 x 32 layers x 4096 x 2 B = 524,288 B per
 * token; a 2,048-token region is 1 GiB. */
static Model llama7b(void)
{
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    return m;
}

static CliOptions sim_options(const char *reserve, size_t budget, int max_batch)
{
    CliOptions o;
    cli_defaults(&o);
    o.reserve = reserve;
    o.kv_budget = budget;
    o.max_batch = max_batch;
    return o;
}

static void run_sim(ServeChapter ch, const CliOptions *o, const SimRequestSpec *reqs, int n,
                    KvsimResult *res)
{
    Model m = llama7b();
    Err err = {{0}};
    ck_assert_msg(kvsim_run(ch, &m, o, 524288, reqs, n, NULL, res, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    ck_assert_int_eq(mem_live_buffers(), 0);
}

/* Six requests of 100 prompt tokens and 28 new ones (128 positions, of
 * which 127 ever hold K/V: the last token is sampled, never fed), in a
 * budget of exactly four 2,048-token regions (4 GiB).
 *
 * Chapter 3, --reserve max: batches of 4 and 2, each 28 steps (the prompt
 * step gives token 101, step 27 token 128): 56 steps, at most 4 at once,
 * on average (4 x 28 + 2 x 28) / 56 = 3. After step k of a batch a request
 * holds 100 + k positions of its 2,048, k = 0..27, so per request:
 *   token states  100 + ... + 127      =  3,178 position-steps
 *   reserved      2,048 x 28           = 57,344
 *   internal      (2,048 - 127) x 28   = 53,788 (never filled)
 *   for future    57,344 - 3,178 - 53,788 = 378 (= 27 + 26 + ... + 0)
 * and the shares are those of one request. Utilization per step is
 * (100 + k) / 2,048, which averages 113.5 / 2,048 as well. */
START_TEST(chapter3_max_by_hand)
{
    SimRequestSpec reqs[6];
    for (int i = 0; i < 6; i++)
        reqs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 28};
    CliOptions o = sim_options("max", (size_t)4 << 30, 64);
    KvsimResult r;
    run_sim(SERVE_BATCHING, &o, reqs, 6, &r);
    ck_assert_int_eq(r.max_concurrent, 4);
    ck_assert_double_eq_tol(r.avg_concurrent, 3.0, 1e-12);
    ck_assert_int_eq(r.steps, 56);
    ck_assert_int_eq(r.busy_steps, 56);
    ck_assert_int_eq(r.completed, 6);
    ck_assert_int_eq(r.tokens_generated, 6 * 28);
    ck_assert_double_eq_tol(r.breakdown[0], 3178.0 / 57344, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[1], 378.0 / 57344, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[2], 53788.0 / 57344, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[3], 0.0, 1e-12);
    ck_assert_double_eq_tol(r.util_avg, 113.5 / 2048, 1e-12);
    ck_assert_uint_eq(r.peak_reserved, (size_t)4 << 30);
    ck_assert_double_eq_tol(r.served_per_step, 6.0 / 56, 1e-12);
    ck_assert_double_eq_tol(r.held_by_finished, 0.0, 1e-12); /* all of a batch finish together */
    ck_assert_int_eq(r.preemptions, 0);
    /* Batch 1 requests wait 28 steps each, batch 2 56: (4 x 28 + 2 x 56) / 6. */
    ck_assert_double_eq_tol(r.mean_latency, (4 * 28 + 2 * 56) / 6.0, 1e-12);
}
END_TEST

/* The same six in chapter 4 (blocks of 16, 8 MiB each: 512 blocks, 1%
 * watermark = 5 blocks). All six are admitted at step 0 (7 blocks each for
 * their prompts) and run 28 steps together: max and average concurrency 6.
 * After step k a request holds 100 + k positions in ceil((100 + k) / 16)
 * blocks: 7 blocks (112 slots) for k = 0..12, 8 (128) for k = 13..27.
 *   token states  3,178 position-steps as above
 *   reserved      13 x 112 + 15 x 128 = 3,376
 *   internal      the 8th block ends with 15 of 16 rows, held 15 steps: 15
 *   for future    3,376 - 3,178 - 15 = 183
 * Utilization averages (100..112) / 112 over 13 steps and (113..127) / 128
 * over 15: (1,378 / 112 + 1,800 / 128) / 28. */
START_TEST(chapter4_paged_by_hand)
{
    SimRequestSpec reqs[6];
    for (int i = 0; i < 6; i++)
        reqs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 28};
    CliOptions o = sim_options("max", (size_t)4 << 30, 64);
    KvsimResult r;
    run_sim(SERVE_PAGED, &o, reqs, 6, &r);
    ck_assert_int_eq(r.max_concurrent, 6);
    ck_assert_double_eq_tol(r.avg_concurrent, 6.0, 1e-12);
    ck_assert_int_eq(r.steps, 28);
    ck_assert_double_eq_tol(r.breakdown[0], 3178.0 / 3376, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[1], 183.0 / 3376, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[2], 15.0 / 3376, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[3], 0.0, 1e-12);
    ck_assert_double_eq_tol(r.util_avg, (1378.0 / 112 + 1800.0 / 128) / 28, 1e-12);
    ck_assert_uint_eq(r.peak_reserved, (size_t)6 * 8 * (8u << 20));
    ck_assert_int_eq(r.preemptions, 0);
    ck_assert_double_eq_tol(r.mean_latency, 28.0, 1e-12);
}
END_TEST

/* Static batching keeps a finished request's region until its batch ends.
 * Two requests of 100 prompt tokens asking for 4 and 8 new ones under
 * --reserve max (2,048 positions each): request 0 finishes at step 3 and
 * holds its region through steps 4-7, 4 x 2,048 = 8,192 of the
 * 2 x 2,048 x 8 = 32,768 position-steps reserved: 25%. Token states:
 * request 0 holds 100..103 positions in steps 0-3 and 103 in 4-7 (406 +
 * 412), request 1 100..107 (828): 1,646, of which 412 are the finished
 * request's. */
START_TEST(held_by_finished_by_hand)
{
    SimRequestSpec reqs[2] = {{.prompt_tokens = 100, .max_new_tokens = 4}, {.prompt_tokens = 100, .max_new_tokens = 8}};
    CliOptions o = sim_options("max", (size_t)2 << 30, 64);
    KvsimResult r;
    run_sim(SERVE_BATCHING, &o, reqs, 2, &r);
    ck_assert_int_eq(r.steps, 8);
    ck_assert_double_eq_tol(r.held_by_finished, 8192.0 / 32768, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[0], 1646.0 / 32768, 1e-12);
    ck_assert_double_eq_tol(r.live_token_states, 1234.0 / 32768, 1e-12);
    /* Chapter 4 frees at once: nothing is ever held by a finished request. */
    run_sim(SERVE_PAGED, &o, reqs, 2, &r);
    ck_assert_double_eq_tol(r.held_by_finished, 0.0, 1e-12);
    ck_assert_double_eq_tol(r.live_token_states, r.breakdown[0], 1e-12);
}
END_TEST

/* The same kind of case with continuous batching (the paper's Orca-Max):
 * three requests of 100 prompt tokens asking for 4, 8 and 4 new ones,
 * --reserve max (2,048 positions), a budget of two regions (2 GiB). R0 and
 * R1 run from step 0; R0 finishes at step 3 and frees its region, R2 takes
 * it at step 4 and finishes at step 7 with R1: 8 steps, 2 running at every
 * one (static batching: R2 waits for R1, 12 steps). In position-steps:
 *   reserved        2,048 x (4 + 8 + 4)                      = 32,768
 *   token states    R0, R2: 100..103 = 406 each; R1: 100..107 = 828: 1,640
 *   internal        (2,048 - 103) x 4 x 2 + (2,048 - 107) x 8 = 31,088
 *   for future      R0, R2: 3+2+1+0 = 6 each; R1: 7+...+0 = 28: 40
 * Nothing is held by a finished request. Latency: R0 4 steps, R1 and R2 8. */
START_TEST(chapter3_continuous_max_by_hand)
{
    SimRequestSpec reqs[3] = {{.prompt_tokens = 100, .max_new_tokens = 4},
                              {.prompt_tokens = 100, .max_new_tokens = 8},
                              {.prompt_tokens = 100, .max_new_tokens = 4}};
    CliOptions o = sim_options("max", (size_t)2 << 30, 64);
    o.batching = "continuous";
    KvsimResult r;
    run_sim(SERVE_BATCHING, &o, reqs, 3, &r);
    ck_assert_int_eq(r.steps, 8);
    ck_assert_int_eq(r.max_concurrent, 2);
    ck_assert_double_eq_tol(r.avg_concurrent, 2.0, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[0], 1640.0 / 32768, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[1], 40.0 / 32768, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[2], 31088.0 / 32768, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[3], 0.0, 1e-12);
    ck_assert_double_eq_tol(r.held_by_finished, 0.0, 1e-12);
    ck_assert_double_eq_tol(r.live_token_states, r.breakdown[0], 1e-12);
    ck_assert_double_eq_tol(r.served_per_step, 3.0 / 8, 1e-12);
    ck_assert_double_eq_tol(r.mean_latency, 20.0 / 3, 1e-12);
    ck_assert_uint_eq(r.peak_reserved, (size_t)2 << 30);
    /* Static batching on the same requests: 12 steps, R2 from step 8. */
    o.batching = "static";
    run_sim(SERVE_BATCHING, &o, reqs, 3, &r);
    ck_assert_int_eq(r.steps, 12);
    ck_assert_double_eq_tol(r.mean_latency, 24.0 / 3, 1e-12);
    ck_assert_double_eq_tol(r.held_by_finished, 4.0 * 2048 / (2048.0 * 20), 1e-12);
}
END_TEST

/* Arrivals: three requests of 10 prompt tokens and 5 new ones, arriving at
 * steps 0, 100 and 200. Each runs alone for 5 steps; in between nobody is
 * there and time jumps ahead: 205 steps, 15 of them busy. */
START_TEST(arrivals_leave_idle_steps)
{
    SimRequestSpec reqs[3];
    for (int i = 0; i < 3; i++)
        reqs[i] = (SimRequestSpec){.prompt_tokens = 10, .max_new_tokens = 5, .arrival_step = 100 * i};
    const ServeChapter chapters[] = {SERVE_BATCHING, SERVE_PAGED};
    for (int c = 0; c < 2; c++) {
        Model m = llama7b();
        CliOptions o = sim_options("max", (size_t)4 << 30, 64);
        ServingRun run;
        Err err = {{0}};
        ck_assert(serving_sim_init(&run, &m, &o, 524288, reqs, 3, &err) == 0);
        ck_assert_msg(serve_run(chapters[c], &run, NULL, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(run.step, 205);
        ck_assert_int_eq(run.busy_steps, 15);
        ck_assert_int_eq(run.max_concurrent, 1);
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(run.reqs[i].admitted_step, 100 * i);
            ck_assert_int_eq(run.reqs[i].finished_step, 100 * i + 4);
        }
        serving_run_free(&run);
    }
    /* Arrivals out of file order are refused. */
    reqs[2].arrival_step = 50;
    Model m = llama7b();
    CliOptions o = sim_options("max", (size_t)4 << 30, 64);
    ServingRun run;
    Err err = {{0}};
    ck_assert_int_eq(serving_sim_init(&run, &m, &o, 524288, reqs, 3, &err), -1);
    ck_assert_msg(strstr(err.msg, "arrivals must follow file order"), "%s", err.msg);
}
END_TEST

/* A request that stops before its limit: asked for 10, produces 3 and then
 * "samples" EOS (one more step, no token appended); --reserve request still
 * reserves what it asked for. */
START_TEST(output_shorter_than_the_limit_stops)
{
    SimRequestSpec reqs[1] = {{.prompt_tokens = 20, .max_new_tokens = 10, .output_tokens = 3}};
    Model m = llama7b();
    CliOptions o = sim_options("request", (size_t)1 << 30, 64);
    ServingRun run;
    Err err = {{0}};
    ck_assert(serving_sim_init(&run, &m, &o, 524288, reqs, 1, &err) == 0);
    ck_assert_msg(serve_run(SERVE_BATCHING, &run, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(run.reqs[0].finish, REQ_FINISH_STOP);
    ck_assert_int_eq(run.reqs[0].n_tokens, 23);
    ck_assert_int_eq(run.step, 4);
    ck_assert_int_eq(run.tokens_generated, 3);
    ck_assert_uint_eq(run.timeline.peak_reserved, (size_t)30 * 524288);
    serving_run_free(&run);
}
END_TEST

/* ---------------------------------------------------------- same decisions */

/* What every step of a run fed, recorded by the run's observer (which
 * both the real run and the simulated one call after each step's
 * accounting). */
typedef struct {
    int *items; /* per step: n_entries, then (seq, pos) pairs */
    size_t n, cap;
} StepLog;

static void log_int(StepLog *log, int v)
{
    if (log->n == log->cap) {
        log->cap = log->cap ? 2 * log->cap : 4096;
        log->items = realloc(log->items, log->cap * sizeof(int));
        ck_assert(log->items);
    }
    log->items[log->n++] = v;
}

static void log_step(void *ctx, const ServingRun *run)
{
    StepLog *log = ctx;
    log_int(log, run->n_entries);
    for (int i = 0; i < run->n_entries; i++) {
        log_int(log, run->entries[i].seq);
        log_int(log, run->entries[i].pos);
    }
}

/* GQA: 4 query heads over 2 KV heads, seq_len 64, 256 B per position. */
static const ModelConfig GQA = {32, 64, 2, 4, 2, 400, 64};
static const char *MIXED = "40\ta\n6\tthe end\n62\tb\n12\tx y z\n30\tc\n62\tonce upon\n3\td\n50\tab\n9\tz\n";

typedef struct {
    Model m;
    Tokenizer t;
    void *image, *tok_image;
} Synthetic;

static void synthetic_open(Synthetic *s, unsigned long long seed)
{
    memset(s, 0, sizeof *s);
    SynthSpec spec = {.cfg = GQA, .seed = seed};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &s->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(GQA.vocab_size, &s->tok_image, &tok_bytes, &err) == 0);
    ck_assert_msg(model_open_image(&s->m, s->image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(&s->t, s->tok_image, tok_bytes, GQA.vocab_size, &err) == 0, "%s", err.msg);
}

static void synthetic_close(Synthetic *s)
{
    tokenizer_free(&s->t);
    mem_free(s->image); /* the model is a view into it */
    mem_free(s->tok_image);
}

/* External fragmentation (byte-steps) of the last expect_same_decisions() run. */
static double last_external;

/* Runs the chapter on the model, then the simulator on the lengths that
 * run produced (each request's prompt, what it asked for, and where it
 * stopped), and asks for the same batch at every step and the same
 * admission, finish and preemptions for every request. Returns the
 * preemptions seen. */
static long expect_same_decisions(const Synthetic *s, ServeChapter ch, const CliOptions *o, const char *what)
{
    Err err = {{0}};
    RequestFile rf;
    ck_assert(request_file_parse(&rf, MIXED, strlen(MIXED), "t", &err) == 0);
    ServingRun real;
    ck_assert_msg(serving_run_init(&real, &s->m, &s->t, o, &rf, &err) == 0, "%s", err.msg);
    StepLog real_log = {0}, sim_log = {0};
    ck_assert(serving_add_observer(&real, log_step, &real_log, NULL, &err) == 0);
    ck_assert_msg(serve_run(ch, &real, NULL, &err) == 0, "%s: %s", what, err.msg);

    int n = real.n_reqs;
    SimRequestSpec *specs = calloc((size_t)n, sizeof *specs);
    for (int i = 0; i < n; i++) {
        const Request *r = &real.reqs[i];
        specs[i] = (SimRequestSpec){.prompt_tokens = r->n_prompt, .max_new_tokens = r->spec->max_new_tokens,
                                    .output_tokens = r->finish == REQ_FINISH_STOP ? r->n_tokens - r->n_prompt : 0};
    }
    ServingRun sim;
    ck_assert(serving_sim_init(&sim, &s->m, o, real.kv_bytes_per_token, specs, n, &err) == 0);
    ck_assert(serving_add_observer(&sim, log_step, &sim_log, NULL, &err) == 0);
    ck_assert_msg(serve_run(ch, &sim, NULL, &err) == 0, "%s: %s", what, err.msg);

    ck_assert_msg(sim.step == real.step, "%s: %ld simulated steps, %ld real", what, sim.step, real.step);
    ck_assert_msg(sim_log.n == real_log.n && memcmp(sim_log.items, real_log.items, real_log.n * sizeof(int)) == 0,
                  "%s: the simulated steps fed other tokens than the real ones", what);
    long preemptions = 0;
    for (int i = 0; i < n; i++) {
        const Request *a = &real.reqs[i], *b = &sim.reqs[i];
        ck_assert_msg(a->admitted_step == b->admitted_step && a->finished_step == b->finished_step &&
                          a->preemptions == b->preemptions && a->finish == b->finish && a->n_tokens == b->n_tokens,
                      "%s: request %d: real admitted %ld, finished %ld, %d preemptions, %d tokens; simulated %ld, "
                      "%ld, %d, %d", what, i, a->admitted_step, a->finished_step, a->preemptions, a->n_tokens,
                      b->admitted_step, b->finished_step, b->preemptions, b->n_tokens);
        preemptions += a->preemptions;
    }
    ck_assert_int_eq(sim.max_concurrent, real.max_concurrent);
    ck_assert_double_eq_tol(sim.breakdown.token_states, real.breakdown.token_states, 1e-6);
    ck_assert_double_eq_tol(sim.breakdown.internal_fragmentation, real.breakdown.internal_fragmentation, 1e-6);
    ck_assert_double_eq_tol(sim.breakdown.external_fragmentation, real.breakdown.external_fragmentation, 1e-6);
    ck_assert_uint_eq(sim.timeline.peak_reserved, real.timeline.peak_reserved);
    last_external = real.breakdown.external_fragmentation;
    free(real_log.items);
    free(sim_log.items);
    free(specs);
    serving_run_free(&sim);
    serving_run_free(&real);
    request_file_free(&rf);
    return preemptions;
}

START_TEST(same_decisions_as_chapter3)
{
    Synthetic s;
    synthetic_open(&s, 7); /* seed 7: some requests stop early (EOS) */
    static const char *const policies[] = {"max", "request", "pow2", "grow"};
    static const char *const batchings[] = {"static", "continuous"};
    for (int m = 0; m < 2; m++) {
        long requeues = 0;
        double external = 0;
        for (int p = 0; p < 4; p++) {
            CliOptions o;
            cli_defaults(&o);
            o.reserve = policies[p];
            o.batching = batchings[m];
            o.threads = 1;
            /* Static: 1.5 full-length regions of 64 positions (or what
             * grow starts with): several batches, and requeues under grow.
             * Continuous: 2.5, so that under max one request can join
             * another; requests wait, are refused by fragmentation under
             * request and pow2, and requeued under grow. */
            o.kv_budget = (m == 0 ? 96 : 160) * 256;
            char what[64];
            snprintf(what, sizeof what, "chapter 3, --batching %s --reserve %s", batchings[m], policies[p]);
            requeues += expect_same_decisions(&s, SERVE_BATCHING, &o, what);
            if (p != 3)
                external += last_external; /* fixed-size regions */
        }
        /* Static batches start in an empty arena; continuous ones fragment
         * it under the fixed-size policies too. */
        ck_assert_msg((external > 0) == (m == 1), "--batching %s: external fragmentation %g under max, request "
                      "and pow2", batchings[m], external);
        ck_assert_msg(requeues > 0, "--batching %s: the budget should force requeues under grow (their path "
                      "untested)", batchings[m]);
    }
    synthetic_close(&s);
}
END_TEST

START_TEST(same_decisions_as_chapter4)
{
    Synthetic s;
    synthetic_open(&s, 7);
    static const int block_sizes[] = {1, 4, 16};
    /* Whole prompts, then a token budget with chunked prefill, swapping. */
    static const int budgets[] = {0, 5, 5};
    static const char *const preempts[] = {NULL, NULL, "swap"};
    long preemptions = 0;
    for (int k = 0; k < 9; k++) {
        CliOptions o;
        cli_defaults(&o);
        o.block_size = block_sizes[k % 3];
        o.threads = 1;
        o.kv_budget = 128 * 256; /* two full-length requests: preemptions */
        o.max_num_batched_tokens = budgets[k / 3];
        o.preempt = preempts[k / 3];
        char what[96];
        snprintf(what, sizeof what, "chapter 4, --block-size %d --max-num-batched-tokens %d --preempt %s",
                 o.block_size, o.max_num_batched_tokens, o.preempt ? o.preempt : "recompute");
        preemptions += expect_same_decisions(&s, SERVE_PAGED, &o, what);
    }
    ck_assert_msg(preemptions > 0, "the budget should force preemptions (their path untested)");
    synthetic_close(&s);
}
END_TEST

/* ---------------------------------------------------------- the program */

/* ---------------------------------------------------------- the paper's method */

/* The paper's Fig. 2 shares of the whole pool, by hand. One request: a
 * prompt of 2 and 3 new tokens (it holds 2, 3, 4, 5 positions after steps
 * 0..3 and ends with 5) in a pool of 10 positions of 4 B, seq_len 8.
 * Chapter 3, --reserve max, continuous: it asks for 8 positions.
 *   token states   2 + 3 + 4 + 5           = 14 position-steps
 *   reservation    3 + 2 + 1 + 0           =  6 (filled later)
 *   internal       (8 - 5) x 4             = 12 (never filled)
 *   others         (10 - 8) x 4            =  8
 * of 10 x 4 = 40. Chapter 4, blocks of 2: it asks for its blocks, 2, 4,
 * 4, 6 positions: reservation 0 + 1 + 0 + 0 = 1, internal 0 + 0 + 0 + 1
 * = 1 (the third block's second row is never filled), others 40 - 16. */
START_TEST(pool_shares_by_hand)
{
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){.dim = 2, .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .vocab_size = 1, .seq_len = 8};
    SimRequestSpec req = {.prompt_tokens = 2, .max_new_tokens = 6, .output_tokens = 3};
    CliOptions o;
    cli_defaults(&o);
    o.reserve = "max";
    o.batching = "continuous";
    o.kv_budget = 10 * 4;
    o.block_size = 2;
    o.watermark = 0;
    KvsimResult r;
    Err err = {{0}};
    ck_assert_msg(kvsim_run(SERVE_BATCHING, &m, &o, 4, &req, 1, NULL, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.steps, 4);
    ck_assert_double_eq_tol(r.pool_share[0], 14.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[1], 6.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[2], 12.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[3], 8.0 / 40, 1e-12);
    ck_assert_msg(kvsim_run(SERVE_PAGED, &m, &o, 4, &req, 1, NULL, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.steps, 4);
    ck_assert_double_eq_tol(r.pool_share[0], 14.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[1], 1.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[2], 1.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[3], 24.0 / 40, 1e-12);
    /* With --arena buddy and --reserve request the region of 2 + 6 = 8 is
     * a power of two already: the same shares; asking for 5 new tokens
     * (7 positions, a block of 8) puts the rounding in "others", not in
     * internal fragmentation: internal (7 - 5) x 4 = 8, others 12. */
    o.arena = "buddy";
    o.reserve = "request";
    req.max_new_tokens = 5;
    ck_assert_msg(kvsim_run(SERVE_BATCHING, &m, &o, 4, &req, 1, NULL, &r, &err) == 0, "%s", err.msg);
    ck_assert_double_eq_tol(r.pool_share[2], 8.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.pool_share[3], 12.0 / 40, 1e-12);
    ck_assert_double_eq_tol(r.breakdown[2], (8.0 - 5) * 4 / (8.0 * 4), 1e-12); /* chapter 3's own books: of the block */
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* What the baselines that know the output ask for: Oracle exactly, Pow2
 * the output rounded up to a power of two (25 -> 32, the paper's example). */
START_TEST(knowing_outputs)
{
    SimRequestSpec asked[4] = {{.prompt_tokens = 100, .max_new_tokens = 2044, .output_tokens = 25},
                               {.prompt_tokens = 7, .max_new_tokens = 2044, .output_tokens = 32},
                               {.prompt_tokens = 9, .max_new_tokens = 2044, .output_tokens = 1},
                               {.prompt_tokens = 5, .max_new_tokens = 2044, .output_tokens = 1025}};
    SimRequestSpec oracle[4], pow2[4];
    kvsim_knowing_outputs(asked, 4, oracle, pow2);
    static const int want_pow2[4] = {32, 32, 1, 2048};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(oracle[i].max_new_tokens, asked[i].output_tokens);
        ck_assert_int_eq(pow2[i].max_new_tokens, want_pow2[i]);
        ck_assert_int_eq(pow2[i].prompt_tokens, asked[i].prompt_tokens);
        ck_assert_int_eq(pow2[i].output_tokens, asked[i].output_tokens);
    }
}
END_TEST

/* The filter keeps the means it is given: solved on the exact distribution
 * of rounded lengths, and drawn. By hand first: prompts fixed at 10,
 * outputs uniform in 1..20, filter 4:100:25: outputs 4..15 are kept
 * (12 of 20), mean 9.5. */
START_TEST(filter_keeps_the_means)
{
    KvsimWorkload w = {.n_requests = 200000, .max_input = 1024, .max_output = 2044, .max_new_tokens = 2044,
                       .seed = 3, .filter = {4, 100, 25}};
    w.input = (KvsimDist){KVSIM_FIXED, 10, 0};
    w.output = (KvsimDist){KVSIM_UNIFORM, 1, 20};
    KvsimFilterFit fit;
    Err err = {{0}};
    ck_assert_msg(kvsim_filter_solve(&w, 2048, &fit, &err) == 0, "%s", err.msg);
    ck_assert_double_eq_tol(fit.kept, 12.0 / 20, 1e-12);
    ck_assert_double_eq_tol(fit.mean_input, 10.0, 1e-12);
    ck_assert_double_eq_tol(fit.mean_output, 9.5, 1e-12);
    /* The paper's ShareGPT means after vLLM's filter, sigma 1. */
    w.filter = (KvsimFilter){4, 1024, 2048};
    w.input = (KvsimDist){KVSIM_LOGNORMAL, 161.31, 1.0};
    w.output = (KvsimDist){KVSIM_LOGNORMAL, 337.99, 1.0};
    ck_assert_msg(kvsim_filter_solve(&w, 2048, &fit, &err) == 0, "%s", err.msg);
    ck_assert_double_eq_tol(fit.mean_input, 161.31, 1e-6);
    ck_assert_double_eq_tol(fit.mean_output, 337.99, 1e-6);
    /* Without the correction the filter would lower both means: mu above
     * ln(mean) - sigma^2 / 2. */
    ck_assert(fit.mu_input > log(161.31) - 0.5 && fit.mu_output > log(337.99) - 0.5);
    /* The same solve for gamma and Weibull outputs (their own CDFs, not the
     * lognormal's): the kept means are the given ones, the scale moved up
     * from the untruncated one, and what the sampler draws with that scale
     * keeps the same mean (a CDF that disagreed with the sampler, say a
     * wrong incomplete gamma, would solve to a scale that draws another
     * mean; 50,000 requests: standard error about 1.4 tokens). */
    for (int f = 0; f < 2; f++) {
        KvsimWorkload g = w;
        g.n_requests = 50000;
        g.output = (KvsimDist){f == 0 ? KVSIM_GAMMA : KVSIM_WEIBULL, 337.99, 0.91};
        ck_assert_msg(kvsim_filter_solve(&g, 2048, &fit, &err) == 0, "%s", err.msg);
        ck_assert_double_eq_tol(fit.mean_output, 337.99, 1e-6);
        ck_assert(kvsim_dist_mean_at(&g.output, fit.mu_output) > 337.99);
        SimRequestSpec *drawn = malloc(sizeof *drawn * (size_t)g.n_requests);
        kvsim_make_requests(&g, 2048, &fit, drawn);
        double sum = 0;
        for (int i = 0; i < g.n_requests; i++)
            sum += drawn[i].output_tokens;
        free(drawn);
        ck_assert_msg(fabs(sum / g.n_requests - 337.99) < 6.0, "%s: drawn mean %f", f ? "weibull" : "gamma",
                      sum / g.n_requests);
    }
    ck_assert_msg(kvsim_filter_solve(&w, 2048, &fit, &err) == 0, "%s", err.msg);
    SimRequestSpec *reqs = malloc(sizeof *reqs * (size_t)w.n_requests);
    kvsim_make_requests(&w, 2048, &fit, reqs);
    double in = 0, out = 0;
    for (int i = 0; i < w.n_requests; i++) {
        const SimRequestSpec *q = &reqs[i];
        ck_assert(q->prompt_tokens >= 4 && q->prompt_tokens <= 1024 && q->output_tokens >= 4 &&
                  q->prompt_tokens + q->output_tokens <= 2048);
        in += q->prompt_tokens;
        out += q->output_tokens;
    }
    free(reqs);
    /* Standard errors about 0.5 and 0.8 tokens: five of them. */
    ck_assert_double_eq_tol(in / w.n_requests, 161.31, 2.5);
    ck_assert_double_eq_tol(out / w.n_requests, 337.99, 4.0);
    w.filter = (KvsimFilter){600, 1024, 1200};
    ck_assert_int_eq(kvsim_filter_solve(&w, 2048, &fit, &err), -1);
}
END_TEST

static void run_kvsim(const char *const *args, ProgramResult *r)
{
    const char *argv[40] = {"kvsim"};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_one_line_error(const char *const *args, const char *word)
{
    ProgramResult r;
    run_kvsim(args, &r);
    ck_assert_msg(r.status == 1, "expected exit 1, got %d; stderr: %s", r.status, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected one line on stderr, got:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "kvsim: error: ") == r.err, "%s", r.err);
    ck_assert_msg(strstr(r.err, word), "stderr lacks '%s': %s", word, r.err);
    ck_assert_msg(r.out_len == 0, "nothing should reach stdout, got:\n%s", r.out);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_options)
{
    expect_one_line_error((const char *[]){"--preset", "llama-65b", NULL}, "not one of");
    expect_one_line_error((const char *[]){"--gpu", "a100", NULL}, "a100-40gb");
    expect_one_line_error((const char *[]){"--scenario", "nope", NULL}, "source-13b-a100-80gb");
    expect_one_line_error((const char *[]){"--input", "normal:3:4", NULL}, "not a length distribution");
    expect_one_line_error((const char *[]){"--block-size", "12", NULL}, "power of two");
    expect_one_line_error((const char *[]){"--rate", "-1", NULL}, "--rate");
    expect_one_line_error((const char *[]){"--requests", "0", NULL}, "--requests");
    expect_one_line_error((const char *[]){"--strategies", "max,buddy", NULL}, "buddy");
    expect_one_line_error((const char *[]){"--strategies", "orca-pow2", NULL}, "renamed: cont-pow2");
    expect_one_line_error((const char *[]){"--arena", "best-fit", NULL}, "first-fit, buddy");
    expect_one_line_error((const char *[]){"--filter", "4:1024", NULL}, "MIN:MAXIN:MAXTOTAL");
    expect_one_line_error((const char *[]){"--filter", "4:2048:1024", NULL}, "MAXIN < MAXTOTAL");
    expect_one_line_error((const char *[]){"--filter", "600:1024:1200", "--requests", "5", NULL}, "keeps");
    expect_one_line_error((const char *[]){"--rate-per-s", "2", NULL}, "go together");
    expect_one_line_error((const char *[]){"--step-ms", "0", NULL}, "--step-ms");
    expect_one_line_error((const char *[]){"--rate", "1e-12", "--requests", "5", NULL}, "more than the 1e+12");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig2", "--rate-per-s", "1e-300", NULL},
                          "--rate-per-s x --step-ms");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig2", "--kv-budget", "1GiB", NULL}, "holds no");
    expect_one_line_error((const char *[]){"--weights", "79GB", NULL}, "leaves nothing");
    expect_one_line_error((const char *[]){"--kv-budget", "1MiB", NULL}, "holds no block");
    expect_one_line_error((const char *[]){"--kv-budget", "60GB", NULL}, "do not fit");
    expect_one_line_error((const char *[]){"--kv-budget", "1GiB", "--strategies", "max", NULL}, "holds no request");
    expect_one_line_error((const char *[]){"--input", "fixed:2000", "--max-input", "1024", NULL}, "--input");
    expect_one_line_error((const char *[]){"--json", "/nonexistent/dir/x.json", "--requests", "5", NULL}, "cannot create");
    expect_one_line_error((const char *[]){"--frobnicate", NULL}, "unknown option");
    expect_one_line_error((const char *[]){"extra", NULL}, "unexpected argument");
}
END_TEST

START_TEST(program_source_scenario)
{
    char json[PATH_MAX];
    test_write_temp("", 0, json);
    ProgramResult r;
    /* 48 GB of K/V (80 - 26 - 4 - 2) over 1,677,721,600 B per full-length
     * request: 28 whole requests, so --reserve max runs 28 at once. */
    run_kvsim((const char *[]){"--scenario", "source-13b-a100-80gb", "--requests", "200", "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "48000000000 B") && strstr(r.out, "28 full-length requests"), "%s", r.out);
    static const char *const rows[] = {"ch03 max ", "ch03 request ", "ch03 pow2 ", "ch03 grow ", "ch03 orca-max ",
                                       "ch03 cont-pow2 ", "ch03 orca-oracle ", "ch04 paged/16 "};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        ck_assert_msg(strstr(r.out, rows[i]), "no row '%s' in:\n%s", rows[i], r.out);
    test_result_free(&r);
    FILE *f = fopen(json, "r");
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "\"strategy\": \"ch03 max\",\n      \"max_concurrent\": 28,"), "%s", text);
    ck_assert_msg(strstr(text, "\"kv_budget_bytes\": 48000000000"), "%s", text);
    ck_assert_msg(strstr(text, "\"requests_completed\": 200"), "%s", text);
}
END_TEST

/* The paper's setting prints the paper's figures next to the strategies
 * that replay them (what kvsim measures is in book/side-by-side.md;
 * the test checks the plumbing, not the values). */
START_TEST(program_paper_scenario)
{
    char json[PATH_MAX];
    test_write_temp("", 0, json);
    ProgramResult r;
    run_kvsim((const char *[]){"--scenario", "paper-13b-a100-40gb", "--requests", "100", "--strategies",
                               "cont-pow2,orca-oracle,paged", "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    /* cont-pow2 (called orca-pow2 before) is not the paper's Orca-Pow2:
     * it is not compared with it. */
    static const char *const lines[] = {"against the PagedAttention paper (Fig. 2)",
                                        "  Orca-Oracle   38.2%   ch03 orca-oracle ", "  vLLM          96.3%   ch04 paged/16 ",
                                        "--scenario paper-fig2)"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(r.out, lines[i]), "no '%s' in:\n%s", lines[i], r.out);
    ck_assert_msg(!strstr(r.out, "Orca-Max") && !strstr(r.out, "ch03 max ") && !strstr(r.out, "  Orca-Pow2     26.8%"), "%s",
                  r.out);
    test_result_free(&r);
    FILE *f = fopen(json, "r");
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "\"paper_strategy\": \"Orca-Oracle\",\n      \"paper_token_states\": 0.382"), "%s",
                  text);
    /* The source scenario has no figures from the paper. */
    run_kvsim((const char *[]){"--scenario", "source-13b-a100-80gb", "--requests", "50", "--strategies", "orca-max",
                               NULL}, &r);
    ck_assert_msg(r.status == 0 && !strstr(r.out, "against the PagedAttention paper"), "%s%s", r.out, r.err);
    test_result_free(&r);
}
END_TEST

/* One seed of --scenario paper-fig2 (300 requests, to be quick): the same
 * numbers every run, to the digit the table prints; the JSON holds them;
 * the four shares add up to 100; Orca-Max can never use the 1,392 of the
 * 15,728 positions that no 2,048-position region fits (8.85%). */
START_TEST(program_fig2_scenario)
{
    char json[PATH_MAX];
    test_write_temp("", 0, json);
    ProgramResult r, again;
    const char *const args[] = {"--scenario", "paper-fig2", "--requests", "300", "--seed", "1", "--json", json, NULL};
    run_kvsim(args, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    run_kvsim(args, &again);
    ck_assert_msg(strcmp(r.out, again.out) == 0, "two runs of one seed differ");
    test_result_free(&again);
    static const char *const rows[] = {
        "  Orca (Max)     ch03 orca-max         20.4 |  18.2  13.3 |  11.9  57.3 |  58.2   8.9 |  11.7   7.00 |   6.78",
        "  Orca (Pow2)    ch03 orca-out-pow2    26.8 |  24.8  17.9 |  16.3  13.6 |  14.3  41.6 |  44.6   9.81 |   9.24",
        "  Orca (Oracle)  ch03 orca-oracle      38.2 |  35.0  25.2 |  23.0   0.0 |   0.1  36.6 |  42.0  13.62 |  13.04",
        "  vLLM           ch04 paged/16         96.3 |  74.4     - |   1.3     - |   0.0     - |  24.3  30.42 |  27.71"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        ck_assert_msg(strstr(r.out, rows[i]), "no row\n%s\nin:\n%.2000s", rows[i],
                      strstr(r.out, "against the PagedAttention paper, by") ? strstr(r.out, "against the Paged") : r.out);
    ck_assert_msg(strstr(r.out, "filter: prompts of 4 to 1024 tokens") && strstr(r.out, "2 per second at 74 ms"),
                  "%.2000s", r.out);
    test_result_free(&r);
    char *text = test_slurp(json);
    static const char *const keys[] = {"\"orca-max\": {", "\"orca-pow2\": {", "\"orca-oracle\": {", "\"vllm\": {"};
    const char *fig2 = strstr(text, "\"fig2\": {");
    ck_assert_msg(fig2, "no fig2 in the JSON");
    for (int k = 0; k < 4; k++) {
        const char *at = strstr(fig2, keys[k]);
        ck_assert_msg(at, "no %s in fig2", keys[k]);
        double v[4];
        static const char *const names[4] = {"token_states_pct", "reservation_pct", "internal_fragmentation_pct",
                                             "external_fragmentation_pct"};
        double sum = 0;
        for (int c = 0; c < 4; c++) {
            char key[64];
            snprintf(key, sizeof key, "\"%s\": ", names[c]);
            const char *p = strstr(at, key);
            ck_assert_msg(p, "no %s under %s", names[c], keys[k]);
            v[c] = strtod(p + strlen(key), NULL);
            sum += v[c];
        }
        ck_assert_double_eq_tol(sum, 100.0, 1e-6);
        if (k == 0)
            ck_assert_msg(v[3] >= 100.0 * 1392 / 15728 - 1e-9, "Orca-Max others %.3f%%", v[3]);
    }
    ck_assert_msg(strstr(text, "\"fig13\": {") && strstr(text, "\"avg_batched_requests\": 6.7839"), "fig13: %.300s",
                  strstr(text, "\"fig13\"") ? strstr(text, "\"fig13\"") : "(none)");
    free(text);
    remove(json);
}
END_TEST

Suite *suite_kvsim(void)
{
    Suite *s = suite_create("kvsim");
    TCase *work = tcase_create("workloads");
    tcase_set_timeout(work, 30);
    tcase_add_test(work, dist_parse_and_format);
    tcase_add_test(work, draws_follow_their_distribution);
    tcase_add_test(work, workloads_are_seeded_and_arrive_at_the_rate);
    suite_add_tcase(s, work);
    TCase *hand = tcase_create("by_hand");
    tcase_set_timeout(hand, 30);
    tcase_add_test(hand, chapter3_max_by_hand);
    tcase_add_test(hand, chapter4_paged_by_hand);
    tcase_add_test(hand, held_by_finished_by_hand);
    tcase_add_test(hand, chapter3_continuous_max_by_hand);
    tcase_add_test(hand, arrivals_leave_idle_steps);
    tcase_add_test(hand, output_shorter_than_the_limit_stops);
    tcase_add_test(hand, pool_shares_by_hand);
    tcase_add_test(hand, knowing_outputs);
    tcase_add_test(hand, filter_keeps_the_means);
    suite_add_tcase(s, hand);
    TCase *same = tcase_create("same_decisions");
    tcase_set_timeout(same, 120);
    tcase_add_test(same, same_decisions_as_chapter3);
    tcase_add_test(same, same_decisions_as_chapter4);
    suite_add_tcase(s, same);
    TCase *program = tcase_create("program");
    tcase_set_timeout(program, 60);
    tcase_add_test(program, program_refuses_bad_options);
    tcase_add_test(program, program_source_scenario);
    tcase_add_test(program, program_paper_scenario);
    tcase_add_test(program, program_fig2_scenario);
    suite_add_tcase(s, program);
    return s;
}

REGISTER_LAB_SUITE(kvsim)
