/* Latency: the recorder and its percentiles (latency.h), arrivals on a
 * clock (arrivals.h, and `@` fields in request files), the cost model
 * (cost_model.h), and the serving loop's clock: under --clock model, TTFT,
 * TPOT and e2e are exact functions of the schedule, worked out by hand
 * below. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrivals.h"
#include "cost_model.h"
#include "helpers.h"
#include "kvsim.h"
#include "latency.h"
#include "mem.h"
#include "ext/swap.h"
#include "paged.h"
#include "serve.h"
#include "serving.h"
#include "suites.h"

/* Whether the chapters' lab functions are the answers (the tests that
 * serve requests through chapters 1 to 4 need them); a SKIP line if not. */
static int have_answers(const char *test)
{
    if (test_lab_answers())
        return 1;
    test_skip(test, "needs the lab answers (the chapters' lab functions)");
    return 0;
}

/* ---------------------------------------------------------- percentiles */

START_TEST(percentiles_are_nearest_rank)
{
    const double four[] = {1, 2, 3, 4};
    ck_assert_double_eq(latency_percentile(four, 4, 0), 1);
    ck_assert_double_eq(latency_percentile(four, 4, 25), 1); /* rank ceil(1.0) = 1 */
    ck_assert_double_eq(latency_percentile(four, 4, 26), 2);
    ck_assert_double_eq(latency_percentile(four, 4, 50), 2); /* not 2.5, as interpolation would give */
    ck_assert_double_eq(latency_percentile(four, 4, 90), 4); /* rank ceil(3.6) = 4 */
    ck_assert_double_eq(latency_percentile(four, 4, 100), 4);
    double hundred[100], ten[10];
    for (int i = 0; i < 100; i++)
        hundred[i] = i + 1;
    for (int i = 0; i < 10; i++)
        ten[i] = i + 1;
    ck_assert_double_eq(latency_percentile(hundred, 100, 50), 50);
    ck_assert_double_eq(latency_percentile(hundred, 100, 90), 90);
    ck_assert_double_eq(latency_percentile(hundred, 100, 99), 99);
    /* 0.9 x 10 is 9.000000000000002 in doubles: its ceiling is not the rank. */
    ck_assert_double_eq(latency_percentile(ten, 10, 90), 9);
    ck_assert_double_eq(latency_percentile(ten, 10, 91), 10);
    const double one = 7.5;
    ck_assert_double_eq(latency_percentile(&one, 1, 99), 7.5);
}
END_TEST

START_TEST(stats_sort_and_average)
{
    double v[] = {4, 1, 3, 2, 10};
    LatencyStats s;
    latency_stats(v, 5, &s);
    ck_assert_int_eq(s.count, 5);
    ck_assert_double_eq(s.mean, 4);
    ck_assert_double_eq(s.p50, 3); /* rank ceil(2.5) = 3 */
    ck_assert_double_eq(s.p90, 10);
    ck_assert_double_eq(s.p99, 10);
    ck_assert_double_eq(s.max, 10);
    ck_assert_double_eq(v[0], 1); /* sorted in place */
    latency_stats(v, 0, &s);
    ck_assert_int_eq(s.count, 0);
    ck_assert_double_eq(s.p99, 0);
}
END_TEST

START_TEST(timeline_by_hand)
{
    double store[4];
    RequestTimeline t;
    timeline_init(&t, store, 4);
    ck_assert_double_eq(timeline_ttft(&t), -1);
    timeline_arrive(&t, 1.0, 3);
    timeline_admit(&t, 1.5);
    timeline_admit(&t, 9.0); /* a readmission after a preemption: the first counts */
    timeline_output(&t, 2.0, 4);
    timeline_output(&t, 2.5, 5);
    timeline_output(&t, 4.0, 6);
    ck_assert_double_eq(timeline_queue(&t), 0.5);
    ck_assert_double_eq(timeline_ttft(&t), 1.0);
    ck_assert_double_eq(timeline_tpot(&t), 1.0);
    ck_assert_double_eq(timeline_e2e(&t), 3.0);
    ck_assert_int_eq(t.first_output_step, 4);
    double gaps[4];
    ck_assert_int_eq(timeline_itls(&t, gaps), 2);
    ck_assert_double_eq(gaps[0], 0.5);
    ck_assert_double_eq(gaps[1], 1.5);
    /* e2e = TTFT + (outputs - 1) x TPOT */
    ck_assert_double_eq(timeline_e2e(&t), timeline_ttft(&t) + 2 * timeline_tpot(&t));
    /* Past its capacity a timeline keeps first and last, and no gaps. */
    RequestTimeline small;
    timeline_init(&small, store, 1);
    timeline_output(&small, 1.0, 0);
    timeline_output(&small, 3.0, 1);
    ck_assert_double_eq(timeline_tpot(&small), 2.0);
    ck_assert_int_eq(timeline_itls(&small, gaps), 0);
}
END_TEST

START_TEST(summary_and_goodput)
{
    /* Three requests: outputs at (arrival 0) 1, 2, 3; (arrival 1) 3, 7;
     * (arrival 2) 6. TTFTs 1, 2, 4; TPOTs 1, 4; e2e 3, 6, 4. */
    double store[6];
    RequestTimeline t[3];
    const double outs[3][3] = {{1, 2, 3}, {3, 7, 0}, {6, 0, 0}};
    const int n_outs[3] = {3, 2, 1}, first[3] = {0, 3, 5};
    for (int i = 0; i < 3; i++) {
        timeline_init(&t[i], store + first[i], n_outs[i]);
        timeline_arrive(&t[i], i, i);
        timeline_admit(&t[i], i + 0.5);
        for (int k = 0; k < n_outs[i]; k++)
            timeline_output(&t[i], outs[i][k], k);
    }
    LatencySlo slo = {2.0, 2.0};
    LatencySummary s;
    Err err = {{0}};
    ck_assert(latency_summarize(t, 3, 8.0, 5, &slo, &s, &err) == 0);
    ck_assert_int_eq(s.requests, 3);
    ck_assert_int_eq(s.outputs, 6);
    ck_assert_double_eq(s.ttft.mean, 7.0 / 3.0);
    ck_assert_double_eq(s.ttft.p50, 2);
    ck_assert_double_eq(s.ttft.p99, 4);
    ck_assert_int_eq(s.tpot.count, 2);
    ck_assert_double_eq(s.tpot.mean, 2.5);
    ck_assert_int_eq(s.itl.count, 3); /* 1, 1, 4 */
    ck_assert_double_eq(s.itl.p50, 1);
    ck_assert_double_eq(s.itl.max, 4);
    ck_assert_double_eq(s.e2e.p50, 4);
    ck_assert_double_eq(s.queue.mean, 0.5);
    /* Request 0 meets both (TTFT 1, TPOT 1); request 1's TPOT is 4;
     * request 2's TTFT is 4, though it has no TPOT. */
    ck_assert_int_eq(s.good, 1);
    ck_assert_double_eq(s.goodput_per_s, 1.0 / 8.0);
    ck_assert_double_eq(s.requests_per_s, 3.0 / 8.0);
    ck_assert_double_eq(s.tokens_per_s, 5.0 / 8.0);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* ---------------------------------------------------------- arrivals */

/* Mean and coefficient of variation of n gaps of a stream. */
static void gap_moments(const ArrivalProcess *p, uint64_t seed, int n, double *mean, double *cv)
{
    ArrivalStream s;
    arrival_stream_init(&s, p, seed);
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; i++) {
        double g = arrival_stream_gap(&s);
        ck_assert(g > 0 && isfinite(g));
        sum += g;
        sum2 += g * g;
    }
    *mean = sum / n;
    *cv = sqrt(sum2 / n - *mean * *mean) / *mean;
}

START_TEST(poisson_has_its_rate)
{
    /* 200,000 exponential gaps of mean 0.2 s: the mean's standard error is
     * 0.2 / sqrt(200000) = 0.22%; the tolerance, 1.5%, is about 7 of
     * them. The CV of exponential gaps is 1 (standard error about 0.3%). */
    ArrivalProcess p = {5.0, 1.0};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double mean, cv;
        gap_moments(&p, seed, 200000, &mean, &cv);
        ck_assert_msg(fabs(mean - 0.2) < 0.015 * 0.2, "seed %llu: mean gap %.5f s, expected 0.2 s within 1.5%%",
                      (unsigned long long)seed, mean);
        ck_assert_msg(fabs(cv - 1.0) < 0.02, "seed %llu: CV %.4f, expected 1 within 0.02", (unsigned long long)seed,
                      cv);
    }
    /* Counted the other way: arrivals in the first 10,000 s at 5/s. */
    ArrivalStream s;
    arrival_stream_init(&s, &p, 9);
    long count = 0;
    while (arrival_stream_next(&s) < 10000.0)
        count++;
    ck_assert_msg(labs(count - 50000) < 1000, "%ld arrivals in 10,000 s at 5/s (expected 50,000 within 2%%)", count);
}
END_TEST

START_TEST(gamma_has_its_rate_and_spread)
{
    /* CV 3 (shape 1/9): the mean's standard error is 3 x 0.2 / sqrt(n) =
     * 0.67% at n = 200,000; tolerance 4%. The CV's own error is larger
     * (the gamma's kurtosis is 57): tolerance 5%. CV 0.5 is regular. */
    const double cvs[] = {3.0, 0.5};
    for (int k = 0; k < 2; k++) {
        ArrivalProcess p = {5.0, cvs[k]};
        double mean, cv;
        gap_moments(&p, 11, 200000, &mean, &cv);
        ck_assert_msg(fabs(mean - 0.2) < 0.04 * 0.2, "CV %.1f: mean gap %.5f s, expected 0.2 s", cvs[k], mean);
        ck_assert_msg(fabs(cv - cvs[k]) < 0.05 * cvs[k], "CV %.1f: measured %.4f", cvs[k], cv);
    }
}
END_TEST

START_TEST(arrivals_reproduce_for_a_seed)
{
    ArrivalProcess poisson, gamma1, bursty;
    Err err = {{0}};
    ck_assert(arrival_parse("poisson:2.5", &poisson, &err) == 0);
    ck_assert(arrival_parse("gamma:2.5:1", &gamma1, &err) == 0);
    ck_assert(arrival_parse("gamma:2.5:4", &bursty, &err) == 0);
    ck_assert_double_eq(poisson.rate, 2.5);
    ck_assert_double_eq(bursty.cv, 4);
    ArrivalStream a, b, c, d;
    arrival_stream_init(&a, &poisson, 42);
    arrival_stream_init(&b, &poisson, 42);
    arrival_stream_init(&c, &gamma1, 42);
    arrival_stream_init(&d, &poisson, 43);
    int differs = 0;
    ck_assert_double_eq(arrival_stream_next(&a), 0.0); /* the first arrives at the start */
    arrival_stream_next(&b), arrival_stream_next(&c), arrival_stream_next(&d);
    for (int i = 0; i < 1000; i++) {
        double x = arrival_stream_next(&a);
        ck_assert_double_eq(x, arrival_stream_next(&b));
        ck_assert_double_eq(x, arrival_stream_next(&c)); /* gamma with CV 1 is Poisson, draw for draw */
        differs += x != arrival_stream_next(&d);
    }
    ck_assert_int_gt(differs, 990);
    const char *bad[] = {"poisson", "poisson:", "poisson:0", "poisson:-1", "poisson:5:2", "gamma:5", "gamma:5:0.01",
                         "gamma:5:11", "gamma:5:1:1", "uniform:5", "poisson:1e7", "poisson:nan", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ArrivalProcess p;
        err.msg[0] = '\0';
        ck_assert_msg(arrival_parse(bad[i], &p, &err) == -1, "'%s' was accepted", bad[i]);
        ck_assert_msg(err.msg[0] && !strchr(err.msg, '\n'), "'%s': no one-line reason", bad[i]);
    }
}
END_TEST

START_TEST(request_file_arrivals)
{
    RequestFile rf;
    Err err = {{0}};
    const char *seconds = "@0s\t4\tA\n@0.5s\t4\tB\tC\n@0.5s\t2\tD\n";
    ck_assert_msg(request_file_parse(&rf, seconds, strlen(seconds), "t", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rf.arrivals, REQUEST_ARRIVAL_SECONDS);
    ck_assert_double_eq(rf.items[1].arrival_s, 0.5);
    ck_assert_int_eq(rf.items[1].max_new_tokens, 4);
    ck_assert_str_eq(rf.items[1].prompt, "B\tC");
    request_file_free(&rf);
    const char *steps = "4\tA\n@3\t4\tB\n";
    ck_assert_msg(request_file_parse(&rf, steps, strlen(steps), "t", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rf.arrivals, REQUEST_ARRIVAL_STEPS);
    ck_assert_int_eq(rf.items[0].arrival_step, 0);
    ck_assert_int_eq(rf.items[1].arrival_step, 3);
    request_file_free(&rf);
    const char *plain = "4\tA\n";
    ck_assert(request_file_parse(&rf, plain, strlen(plain), "t", &err) == 0);
    ck_assert_int_eq(rf.arrivals, REQUEST_ARRIVAL_NONE);
    request_file_free(&rf);
    static const char *const bad[][2] = {
        {"@1s\t4\tA\n@0.5s\t4\tB\n", "t:2: arrives before line 1"},
        {"@1s\t4\tA\n4\tB\n", "t:2: arrives before line 1"},
        {"@1s\t4\tA\n@2\t4\tB\n", "t:2: an arrival in steps, after arrivals in seconds"},
        {"@-1s\t4\tA\n", "t:1: the arrival '@-1s'"},
        {"@soon\t4\tA\n", "t:1: the arrival"},
        {"@1x\t4\tA\n", "t:1: the arrival"},
        {"@s\t4\tA\n", "t:1: the arrival"},
        {"@1e10s\t4\tA\n", "t:1: the arrival"},
        {"@2 A\n", "t:1: expected '@ARRIVAL<TAB>"},
        {"@2\tA\n", "t:1: expected 'max_new_tokens<TAB>prompt'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        ck_assert_msg(request_file_parse(&rf, bad[i][0], strlen(bad[i][0]), "t", &err) == -1, "accepted: %s",
                      bad[i][0]);
        ck_assert_msg(strstr(err.msg, bad[i][1]) == err.msg, "'%s' for %s (expected '%s')", err.msg, bad[i][0],
                      bad[i][1]);
    }
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* ---------------------------------------------------------- cost model */

START_TEST(cost_model_by_hand)
{
    /* dim 4, kv_dim 2, hidden 8, 2 layers, vocab 10: per token and layer
     * 2 x (16 + 16 + 2 x 8 + 3 x 32) = 288 FLOPs of projections (as
     * paged_recompute_flops() counts them), 4 x 4 = 16 per attended
     * position; 2 x 4 x 10 = 80 per logits row. */
    ModelConfig c = {4, 8, 2, 2, 1, 10, 16};
    CostShape s;
    cost_shape_init(&c, 1000.0, 64.0, &s);
    ck_assert_double_eq(s.flops_per_token, 576);
    ck_assert_double_eq(s.flops_per_attended, 32);
    ck_assert_double_eq(s.flops_per_logits_row, 80);
    ck_assert_double_eq(paged_recompute_flops(&c, 3), 3 * s.flops_per_token + 6 * s.flops_per_attended);
    /* Three tokens at positions 0..2 (attending 6), one logits row, 128
     * bytes swapped: 1000 + 6 x 64 = 1384 bytes; 3 x 576 + 6 x 32 + 80 =
     * 2000 FLOPs. */
    StepWork w = {3, 6, 1, 128.0};
    CostMachine m = {.read_bytes_per_s = 1384.0, .fma_flops_per_s = 4000.0, .compute_share = 0.25,
                     .link_bytes_per_s = 256.0, .overhead_s = 0.125, .overlap = 0};
    /* memory 1 s, compute 2000 / 1000 = 2 s, link 0.5 s */
    ck_assert_double_eq(cost_step_seconds(&m, &s, &w), 0.125 + 1.0 + 2.0 + 0.5);
    m.overlap = 1;
    ck_assert_double_eq(cost_step_seconds(&m, &s, &w), 0.125 + 2.0 + 0.5);
    w.transfer_bytes = 0;
    m.compute_share = 1.0; /* compute 0.5 s: memory bound */
    ck_assert_double_eq(cost_step_seconds(&m, &s, &w), 0.125 + 1.0);
}
END_TEST

START_TEST(machines_load_and_refuse)
{
    CostMachine m;
    Err err = {{0}};
    ck_assert(cost_machine_load("h200-141gb", &m, &err) == 0);
    ck_assert_double_eq(m.read_bytes_per_s, 4800e9);
    ck_assert_int_eq(m.overlap, 1);
    ck_assert(cost_machine_load("a100-80gb,share=0.5,overhead=20,link=16", &m, &err) == 0);
    ck_assert_double_eq(m.read_bytes_per_s, 2039e9);
    ck_assert_double_eq(m.compute_share, 0.5);
    ck_assert_double_eq(m.overhead_s, 20 * 1e-6); /* microseconds */
    ck_assert_double_eq(m.link_bytes_per_s, 16e9);
    char path[PATH_MAX];
    const char *limits = "# machine-limits: 1 thread(s)\nthreads 1\nread_gb_s_best 13.10\nread_gb_s_median 12.50\n"
                         "fma_gflop_s_median 160.00\n";
    test_write_temp(limits, strlen(limits), path);
    char spec[PATH_MAX + 32];
    snprintf(spec, sizeof spec, "%s,overlap=1", path);
    ck_assert_msg(cost_machine_load(spec, &m, &err) == 0, "%s", err.msg);
    ck_assert_double_eq(m.read_bytes_per_s, 12.5e9);
    ck_assert_double_eq(m.fma_flops_per_s, 160e9);
    ck_assert_int_eq(m.overlap, 1);
    unlink(path);
    const char *read_only = "read_gb_s_median 12.50\n";
    test_write_temp(read_only, strlen(read_only), path);
    static const char *const bad[] = {"", "a100", "a100-80gb,share=0", "a100-80gb,share=2", "a100-80gb,bw=-1",
                                      "a100-80gb,overlap=2", "a100-80gb,speed=3", "a100-80gb,bw", "./missing.txt",
                                      "a100-80gb,"};
    for (size_t i = 0; i <= sizeof bad / sizeof bad[0]; i++) {
        const char *b = i < sizeof bad / sizeof bad[0] ? bad[i] : path;
        err.msg[0] = '\0';
        ck_assert_msg(cost_machine_load(b, &m, &err) == -1, "'%s' was accepted", b);
        ck_assert_msg(strstr(err.msg, "--machine") == err.msg && !strchr(err.msg, '\n'), "'%s': %s", b, err.msg);
    }
    unlink(path);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(cost_check_keeps_every_step_in_its_range)
{
    CostCheck *c = calloc(1, sizeof *c);
    for (int i = 1; i <= 5; i++)
        cost_check_add(c, (double)i, 2.0); /* ratios 0.5 .. 2.5 */
    CostCheckSummary s;
    cost_check_summarize(c, &s);
    ck_assert_int_eq(s.steps, 5);
    ck_assert_double_eq(s.median, 1.5);
    ck_assert_double_eq(s.min, 0.5);
    ck_assert_double_eq(s.max, 2.5);
    ck_assert_double_eq(s.total, 15.0 / 10.0);
    /* Past the capacity: one step in a stride, min and max of them all. */
    memset(c, 0, sizeof *c);
    for (int i = 0; i < 3 * COST_CHECK_CAP; i++)
        cost_check_add(c, i == 777 ? 100.0 : 1.0, 1.0);
    ck_assert_int_le(c->n, COST_CHECK_CAP);
    cost_check_summarize(c, &s);
    ck_assert_int_eq(s.steps, 3 * COST_CHECK_CAP);
    ck_assert_double_eq(s.max, 100.0);
    ck_assert_double_eq(s.median, 1.0);
    free(c);
}
END_TEST

/* ---------------------------------------------------------- the clock, by hand */

/* A machine and shape whose arithmetic is exact in binary: a step costs
 * 0.5 s plus 0.25 s per token fed (weights 0.5 B at 1 B/s; 0.25 FLOP per
 * token at 1 FLOP/s; attention and logits free). */
static void simple_clock(ServingRun *run)
{
    CostMachine m = {.name = "hand", .read_bytes_per_s = 1.0, .fma_flops_per_s = 1.0, .compute_share = 1.0,
                     .link_bytes_per_s = 1.0, .overhead_s = 0.0, .overlap = 0};
    CostShape s = {.weight_bytes = 0.5, .flops_per_token = 0.25};
    serving_use_cost_model(run, &m, &s, 1);
}

/* K and V of one position of sim_shape() in f16: 2 x 1 layer x 16. */
#define KVB 64

/* A model shape for simulated runs: its cfg alone counts. */
static Model sim_shape(void)
{
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){16, 32, 1, 2, 2, 8, 64};
    return m;
}

/* Chapter 4 with blocks of 4 positions, @p blocks of them, and a
 * watermark (percent). */
static CliOptions paged_options(int blocks, int watermark)
{
    CliOptions o;
    cli_defaults(&o);
    o.block_size = 4;
    o.watermark = watermark;
    o.kv_budget = (size_t)blocks * 4 * KVB;
    return o;
}

/* Runs @p n simulated requests through chapter @p ch with the simple clock. */
static void run_sim(ServeChapter ch, const CliOptions *o, const SimRequestSpec *reqs, int n, ServingRun *run)
{
    static Model shape;
    shape = sim_shape();
    Err err = {{0}};
    ck_assert_msg(serving_sim_init(run, &shape, o, KVB, reqs, n, &err) == 0, "%s", err.msg);
    simple_clock(run);
    ck_assert_msg(serve_run(ch, run, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(run->n_done, n);
}

static const RequestTimeline *timeline(const ServingRun *run, int i)
{
    return &run->latency.reqs[i];
}

static void expect_outputs(const ServingRun *run, int i, const double *want, int n)
{
    const RequestTimeline *t = timeline(run, i);
    ck_assert_msg(t->n_outputs == n, "request %d: %d outputs, expected %d", i, t->n_outputs, n);
    for (int k = 0; k < n; k++)
        ck_assert_msg(t->output_s[k] == want[k], "request %d output %d at %.17g s, expected %.17g", i, k,
                      t->output_s[k], want[k]);
}

START_TEST(one_request_alone)
{
    if (!have_answers("one_request_alone"))
        return;
    /* Prompt 4, 3 new tokens. Step 0 feeds 4 tokens: 0.5 + 1 = 1.5 s; steps
     * 1 and 2 feed one: 0.75 s each. Outputs at 1.5, 2.25, 3.0. */
    CliOptions o = paged_options(4, 1);
    SimRequestSpec req = {.prompt_tokens = 4, .max_new_tokens = 3};
    ServingRun run;
    run_sim(SERVE_PAGED, &o, &req, 1, &run);
    const double want[] = {1.5, 2.25, 3.0};
    expect_outputs(&run, 0, want, 3);
    const RequestTimeline *t = timeline(&run, 0);
    ck_assert_double_eq(timeline_queue(t), 0);
    ck_assert_double_eq(timeline_ttft(t), 1.5);
    ck_assert_double_eq(timeline_tpot(t), 0.75);
    ck_assert_double_eq(timeline_e2e(t), 3.0);
    LatencySummary s;
    Err err = {{0}};
    ck_assert(serving_latency_summary(&run, &s, &err) == 0);
    ck_assert_double_eq(s.duration_s, 3.0);
    ck_assert_double_eq(s.itl.p50, 0.75);
    ck_assert_double_eq(s.tokens_per_s, 1.0);
    serving_run_free(&run);
}
END_TEST

START_TEST(second_request_queues)
{
    if (!have_answers("second_request_queues"))
        return;
    /* Chapter 3, continuous batching, a region of prompt + max_new (7
     * positions) each, room for one: B waits for A's region. A: steps 0-2,
     * outputs at 1.5, 2.25, 3.0. B is admitted at step 3 (clock 3.0):
     * outputs at 4.5, 5.25, 6.0; queue 3, TTFT 4.5, e2e 6. */
    CliOptions o;
    cli_defaults(&o);
    o.reserve = "request";
    o.batching = "continuous";
    o.kv_budget = 7 * KVB;
    SimRequestSpec reqs[2] = {{.prompt_tokens = 4, .max_new_tokens = 3}, {.prompt_tokens = 4, .max_new_tokens = 3}};
    ServingRun run;
    run_sim(SERVE_BATCHING, &o, reqs, 2, &run);
    ck_assert_int_eq(run.reqs[1].admitted_step, 3);
    const double a[] = {1.5, 2.25, 3.0}, b[] = {4.5, 5.25, 6.0};
    expect_outputs(&run, 0, a, 3);
    expect_outputs(&run, 1, b, 3);
    ck_assert_double_eq(timeline_queue(timeline(&run, 1)), 3.0);
    ck_assert_double_eq(timeline_ttft(timeline(&run, 1)), 4.5);
    ck_assert_double_eq(timeline_tpot(timeline(&run, 1)), 0.75);
    ck_assert_double_eq(timeline_e2e(timeline(&run, 1)), 6.0);
    LatencySummary s;
    Err err = {{0}};
    ck_assert(serving_latency_summary(&run, &s, &err) == 0);
    ck_assert_double_eq(s.ttft.mean, 3.0);
    ck_assert_double_eq(s.ttft.p50, 1.5);
    ck_assert_double_eq(s.ttft.p90, 4.5);
    ck_assert_double_eq(s.queue.max, 3.0);
    ck_assert_int_eq(s.itl.count, 4);
    ck_assert_double_eq(s.itl.max, 0.75);
    ck_assert_double_eq(s.duration_s, 6.0);
    ck_assert_double_eq(s.requests_per_s, 2.0 / 6.0);
    serving_run_free(&run);
}
END_TEST

START_TEST(preemption_stalls_the_preempted)
{
    if (!have_answers("preemption_stalls_the_preempted"))
        return;
    /* Chapter 4, blocks of 4, 3 blocks, no watermark; A and B: prompt 4, 4
     * new tokens each. Step 0 admits both (a block each) and feeds 8
     * tokens: 2.5 s; outputs A1, B1 at 2.5. Step 1: both need a second
     * block, one is free: A takes it, B (the newest) is preempted. A runs
     * alone: 3.25, 4.0, 4.75 (it finishes at step 3, freeing 2 blocks). B,
     * readmitted at step 4, recomputes its 5 positions: 0.5 + 1.25 s, its
     * second output at 6.5; then 7.25, 8.0. */
    CliOptions o = paged_options(3, 0);
    SimRequestSpec reqs[2] = {{.prompt_tokens = 4, .max_new_tokens = 4}, {.prompt_tokens = 4, .max_new_tokens = 4}};
    ServingRun run;
    run_sim(SERVE_PAGED, &o, reqs, 2, &run);
    ck_assert_int_eq(run.reqs[1].preemptions, 1);
    ck_assert_int_eq(run.reqs[0].finished_step, 3);
    ck_assert_int_eq(run.reqs[1].finished_step, 6);
    const double a[] = {2.5, 3.25, 4.0, 4.75}, b[] = {2.5, 6.5, 7.25, 8.0};
    expect_outputs(&run, 0, a, 4);
    expect_outputs(&run, 1, b, 4);
    const RequestTimeline *t = timeline(&run, 1);
    ck_assert_double_eq(timeline_queue(t), 0); /* its first admission */
    ck_assert_double_eq(timeline_ttft(t), 2.5);
    ck_assert_double_eq(timeline_tpot(t), (8.0 - 2.5) / 3);
    ck_assert_double_eq(timeline_e2e(t), 8.0);
    LatencySummary s;
    Err err = {{0}};
    ck_assert(serving_latency_summary(&run, &s, &err) == 0);
    ck_assert_double_eq(s.itl.max, 4.0); /* the stall: 2.5 -> 6.5 */
    ck_assert_double_eq(s.itl.p50, 0.75);
    serving_run_free(&run);
}
END_TEST

START_TEST(arrivals_by_time_and_by_step)
{
    if (!have_answers("arrivals_by_time_and_by_step"))
        return;
    /* B arrives at 1.0 s, inside A's first step (0 to 1.5): it is not
     * admitted in step 0 although there is room, joins step 1 (A's decode
     * and B's prompt: 0.5 + 5 x 0.25 = 1.75 s) and has its first output at
     * 3.25: queue 0.5, TTFT 2.25. */
    CliOptions o = paged_options(64, 1);
    SimRequestSpec reqs[3] = {{.prompt_tokens = 4, .max_new_tokens = 3},
                              {.prompt_tokens = 4, .max_new_tokens = 1, .arrival_s = 1.0},
                              {.prompt_tokens = 4, .max_new_tokens = 1, .arrival_s = 10.0}};
    ServingRun run;
    run_sim(SERVE_PAGED, &o, reqs, 3, &run);
    ck_assert_int_eq(run.reqs[1].admitted_step, 1);
    ck_assert_double_eq(timeline_queue(timeline(&run, 1)), 0.5);
    ck_assert_double_eq(timeline_ttft(timeline(&run, 1)), 2.25);
    /* A: 1.5, then 3.25 (shared step), then 4.0 alone. C arrives at 10 s:
     * the idle server skips to 10, C's prompt takes 1.5 s. */
    const double a[] = {1.5, 3.25, 4.0}, c[] = {11.5};
    expect_outputs(&run, 0, a, 3);
    expect_outputs(&run, 2, c, 1);
    ck_assert_double_eq(timeline_ttft(timeline(&run, 2)), 1.5);
    ck_assert_double_eq(run.clock.now_s, 11.5);
    serving_run_free(&run);
    /* By step: the same C arriving at step 10 joins at the clock of step
     * 10's beginning; the steps nobody served (4 to 9) take no time. */
    reqs[1] = (SimRequestSpec){.prompt_tokens = 4, .max_new_tokens = 1};
    reqs[2] = (SimRequestSpec){.prompt_tokens = 4, .max_new_tokens = 1, .arrival_step = 10};
    run_sim(SERVE_PAGED, &o, reqs, 3, &run);
    ck_assert_int_eq(run.reqs[2].admitted_step, 10);
    /* Step 0: A and B prefill, 0.5 + 8 x 0.25 = 2.5; steps 1, 2: A, 0.75 each. */
    ck_assert_double_eq(timeline(&run, 2)->arrival_s, 4.0);
    ck_assert_double_eq(timeline_ttft(timeline(&run, 2)), 1.5);
    serving_run_free(&run);
}
END_TEST

START_TEST(the_stop_is_an_output)
{
    if (!have_answers("the_stop_is_an_output"))
        return;
    /* Output 2 tokens, then EOS: three outputs (1.5, 2.25, 3.0), two new
     * tokens. */
    CliOptions o = paged_options(4, 1);
    SimRequestSpec req = {.prompt_tokens = 4, .max_new_tokens = 8, .output_tokens = 2};
    ServingRun run;
    run_sim(SERVE_PAGED, &o, &req, 1, &run);
    ck_assert_int_eq(run.tokens_generated, 2);
    const double want[] = {1.5, 2.25, 3.0};
    expect_outputs(&run, 0, want, 3);
    ck_assert_int_eq(run.latency.reqs[0].capacity, 3); /* sized exactly: two tokens and the stop */
    serving_run_free(&run);
}
END_TEST

START_TEST(transfers_and_attention_are_charged)
{
    /* serving_note_transfer() and serving_set_attended() change the step
     * they are called in: 100 bytes at 50 B/s is 2 s more. */
    Model shape = sim_shape();
    CliOptions o = paged_options(4, 1);
    SimRequestSpec req = {.prompt_tokens = 4, .max_new_tokens = 1};
    ServingRun run;
    Err err = {{0}};
    ck_assert(serving_sim_init(&run, &shape, &o, KVB, &req, 1, &err) == 0);
    CostMachine m = {.name = "hand", .read_bytes_per_s = 1.0, .fma_flops_per_s = 1.0, .compute_share = 1.0,
                     .link_bytes_per_s = 50.0, .overlap = 0};
    CostShape s = {.kv_bytes_per_position = 0.125};
    serving_use_cost_model(&run, &m, &s, 1);
    ck_assert(serving_open_steps(&run, 8, 1, &err) == 0);
    ck_assert(serving_step_begin(&run));
    serving_admit(&run, &run.reqs[0]);
    ck_assert(serving_feed(&run, &run.reqs[0], &err) == 0);
    serving_note_transfer(&run, 100.0);
    KvSeam none = {0};
    ck_assert(serving_step_forward(&run, &none, &err) == 0);
    /* Attention read 1 + 2 + 3 + 4 = 10 positions of 0.125 B: 1.25 s. */
    ck_assert_double_eq(run.clock.step_model_s, 2.0 + 1.25);
    serving_step_sample(&run);
    serving_step_finished(&run);
    serving_step_end(&run);
    ck_assert_double_eq(run.clock.now_s, 3.25);
    serving_run_free(&run);
    /* A window that reads 2 positions in all. */
    ck_assert(serving_sim_init(&run, &shape, &o, KVB, &req, 1, &err) == 0);
    serving_use_cost_model(&run, &m, &s, 1);
    ck_assert(serving_open_steps(&run, 8, 1, &err) == 0);
    ck_assert(serving_step_begin(&run));
    serving_admit(&run, &run.reqs[0]);
    ck_assert(serving_feed(&run, &run.reqs[0], &err) == 0);
    serving_set_attended(&run, 2);
    ck_assert(serving_step_forward(&run, &none, &err) == 0);
    ck_assert_double_eq(run.clock.step_model_s, 0.25);
    serving_run_free(&run);
}
END_TEST

/* ---------------------------------------------------------- the programs */

static char model_path[PATH_MAX], tok_path[PATH_MAX];

static void write_model_once(void)
{
    if (!model_path[0])
        test_write_synthetic(&TEST_SYNTH_GQA, 5, 0, 0, model_path, tok_path);
}

/* Runs @p program on the synthetic model with extra arguments. */
static void run_program(const char *program, const char *const *extra, ProgramResult *r)
{
    write_model_once();
    const char *argv[40] = {program, "--model", model_path, "--tokenizer", tok_path};
    int n = 5;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static const char REQUESTS[] = "12\tOnce upon a time\n30\tThe cat sat\n5\tA dog\n20\tThe sun was hot\n";

/* The text of the JSON object after "key": in @p json, up to its closing
 * brace (objects nested in it included). */
static char *json_object(const char *json, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": {", key);
    const char *start = strstr(json, quoted);
    ck_assert_msg(start != NULL, "no %s object in %s", key, json);
    int depth = 0;
    const char *p = strchr(start, '{');
    do {
        depth += *p == '{';
        depth -= *p == '}';
        p++;
    } while (depth > 0 && *p);
    return strndup(start, (size_t)(p - start));
}

START_TEST(model_clock_reproduces_across_runs_and_threads)
{
    if (!have_answers("model_clock_reproduces_across_runs_and_threads"))
        return;
    char reqs[PATH_MAX], json[PATH_MAX + 8], out[PATH_MAX + 8];
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
    snprintf(json, sizeof json, "%s.json", reqs);
    snprintf(out, sizeof out, "%s.jsonl", reqs);
    char *latency[3] = {0}, *lines[3] = {0};
    const char *threads[3] = {"1", "1", "2"};
    for (int k = 0; k < 3; k++) {
        ProgramResult r;
        run_program("ch04-paged", (const char *[]){"--requests", reqs, "--clock", "model", "--arrival-rate", "40",
                                                   "--slo-ttft", "0.01", "--threads", threads[k], "--json", json,
                                                   "--out", out, NULL}, &r);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_msg(strstr(r.err, "latency (model clock, kvlab-cpu"), "%s", r.err);
        ck_assert_msg(strstr(r.err, "  goodput "), "%s", r.err);
        test_result_free(&r);
        char *text = test_slurp(json);
        latency[k] = json_object(text, "latency");
        free(text);
        lines[k] = test_slurp(out);
    }
    for (int k = 1; k < 3; k++) {
        ck_assert_msg(strcmp(latency[0], latency[k]) == 0, "run %d (--threads %s) differs:\n%s\n%s", k, threads[k],
                      latency[0], latency[k]);
        ck_assert_msg(strcmp(lines[0], lines[k]) == 0, "--out of run %d differs", k);
    }
    ck_assert_msg(strstr(lines[0], "\"ttft_s\":") && strstr(lines[0], "\"itl_p99_s\":") &&
                  strstr(lines[0], "\"arrival_s\":0,") && strstr(lines[0], "\"first_token_step\":"), "%s", lines[0]);
    ck_assert_msg(strstr(latency[0], "\"clock\": \"model\"") && strstr(latency[0], "\"goodput_requests_per_s\""),
                  "%s", latency[0]);
    for (int k = 0; k < 3; k++)
        free(latency[k]), free(lines[k]);
    unlink(reqs), unlink(json), unlink(out);
}
END_TEST

START_TEST(without_options_nothing_changes_but_new_lines)
{
    if (!have_answers("without_options_nothing_changes_but_new_lines"))
        return;
    /* The latency block is printed and --json has a "latency" object (wall
     * clock), but --out lines carry no times: they stay reproducible. */
    char reqs[PATH_MAX], json[PATH_MAX + 8], out[PATH_MAX + 8];
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
    snprintf(json, sizeof json, "%s.json", reqs);
    snprintf(out, sizeof out, "%s.jsonl", reqs);
    ProgramResult r;
    run_program("ch04-paged", (const char *[]){"--requests", reqs, "--json", json, "--out", out, NULL}, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    const char *block = strstr(r.err, "latency (wall clock");
    ck_assert_msg(block && strstr(block, "  TTFT ") && strstr(block, "  ITL ") && !strstr(block, "goodput"), "%s",
                  r.err);
    ck_assert_msg(strstr(r.err, "\ntime\n") < block, "the latency block comes after the time line:\n%s", r.err);
    test_result_free(&r);
    char *lines = test_slurp(out), *text = test_slurp(json);
    ck_assert_msg(!strstr(lines, "ttft_s") && !strstr(lines, "arrival_step"), "%s", lines);
    char *latency = json_object(text, "latency");
    ck_assert_msg(strstr(latency, "\"clock\": \"wall\"") && strstr(latency, "\"ttft_s\": {"), "%s", latency);
    free(latency), free(lines), free(text);
    unlink(reqs), unlink(json), unlink(out);
}
END_TEST

START_TEST(wall_clock_against_the_model)
{
    if (!have_answers("wall_clock_against_the_model"))
        return;
    /* --machine with the wall clock compares every step. */
    char reqs[PATH_MAX];
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
    ProgramResult r;
    run_program("ch03-batching", (const char *[]){"--requests", reqs, "--machine", "kvlab-cpu", NULL}, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.err, "latency (wall clock") && strstr(r.err, "cost model kvlab-cpu / wall time, per step: ") && strstr(r.err, "cost model kvlab-cpu / CPU time, per step: "),
                  "%s", r.err);
    test_result_free(&r);
    unlink(reqs);
}
END_TEST

START_TEST(single_stream_latency)
{
    if (!have_answers("single_stream_latency"))
        return;
    const char *programs[] = {"ch01-naive", "ch02-kvcache"};
    char json[PATH_MAX];
    test_write_temp("", 0, json);
    for (int k = 0; k < 2; k++) {
        ProgramResult r;
        run_program(programs[k], (const char *[]){"--steps", "12", "--json", json, NULL}, &r);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_msg(strstr(r.err, "latency (wall clock; one request") && strstr(r.err, "  TTFT ") &&
                      strstr(r.err, "  TPOT "), "%s", r.err);
        test_result_free(&r);
        char *text = test_slurp(json), *latency = json_object(text, "latency");
        const char *ttft = strstr(latency, "\"ttft_s\": "), *tpot = strstr(latency, "\"tpot_s\": "),
                   *e2e = strstr(latency, "\"e2e_s\": "), *outputs = strstr(latency, "\"outputs\": ");
        ck_assert_msg(ttft && tpot && e2e && outputs, "%s", latency);
        double t = atof(ttft + 10), p = atof(tpot + 10), e = atof(e2e + 9);
        int n = atoi(outputs + 11);
        ck_assert_msg(n >= 2 && t > 0 && p > 0, "%s", latency);
        ck_assert_msg(fabs(e - (t + (n - 1) * p)) <= 1e-6 * e, "e2e %g != TTFT %g + %d x TPOT %g", e, t, n - 1, p);
        free(latency), free(text);
    }
    unlink(json);
}
END_TEST

/* The number after "key": in @p json (the first one), or NAN. */
static double json_number(const char *json, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(json, quoted);
    return at ? atof(at + strlen(quoted)) : NAN;
}

/* Chapter 4 (or 6) under the model clock with @p machine; the run's --json
 * text, for the caller to free. */
static char *model_clock_json(const char *program, const char *reqs, const char *machine, const char *const *extra)
{
    char json[PATH_MAX + 8];
    snprintf(json, sizeof json, "%s.json", reqs);
    const char *argv[24] = {"--requests", reqs, "--clock", "model", "--machine", machine, "--json", json};
    int n = 8;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ProgramResult r;
    run_program(program, argv, &r);
    ck_assert_msg(r.status == 0, "%s", r.err);
    test_result_free(&r);
    char *text = test_slurp(json);
    unlink(json);
    return text;
}

START_TEST(chapters_charge_swaps_and_windows)
{
    if (!have_answers("chapters_charge_swaps_and_windows"))
        return;
    char reqs[PATH_MAX];
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
    /* Swapping: only the link's rate changes between the runs, so the run
     * lasts longer by exactly the swapped bytes x (1/slow - 1/fast). */
    const char *swap[] = {"--kv-budget", "30KiB", "--block-size", "8", "--preempt", "swap", NULL};
    char *fast = model_clock_json("ch04-paged", reqs, "kvlab-cpu,link=1000", swap);
    char *slow = model_clock_json("ch04-paged", reqs, "kvlab-cpu,link=0.001", swap);
    double bytes = json_number(fast, "swap_bytes_out") + json_number(fast, "swap_bytes_in");
    ck_assert_msg(bytes > 0, "the run swapped nothing:\n%s", fast);
    double extra = json_number(slow, "duration_s") - json_number(fast, "duration_s");
    double want = bytes / 1e6 - bytes / 1e12;
    /* --json prints 9 significant digits */
    ck_assert_msg(fabs(extra - want) <= 1e-8 * json_number(slow, "duration_s"), "swapping %g bytes added %.12g s, not %.12g s", bytes, extra,
                  want);
    free(fast), free(slow);
    /* Recomputation moves nothing over the link: its rate changes nothing. */
    const char *recompute[] = {"--kv-budget", "30KiB", "--block-size", "8", NULL};
    fast = model_clock_json("ch04-paged", reqs, "kvlab-cpu,link=1000", recompute);
    slow = model_clock_json("ch04-paged", reqs, "kvlab-cpu,link=0.001", recompute);
    ck_assert_double_eq(json_number(slow, "duration_s"), json_number(fast, "duration_s"));
    free(fast), free(slow);
    /* A window as long as the sequences reads every position: chapter 4's
     * times. A short one reads fewer: every request's decode is cheaper. */
    char *paged = model_clock_json("ch04-paged", reqs, "kvlab-cpu", (const char *[]){NULL});
    char *whole = model_clock_json("ch06-window", reqs, "kvlab-cpu", (const char *[]){"--kv-window", "64", NULL});
    char *narrow = model_clock_json("ch06-window", reqs, "kvlab-cpu",
                                    (const char *[]){"--kv-window", "4", "--kv-sinks", "1", NULL});
    char *lat_paged = json_object(paged, "latency"), *lat_whole = json_object(whole, "latency");
    ck_assert_str_eq(lat_paged, lat_whole);
    ck_assert_msg(json_number(narrow, "duration_s") < json_number(whole, "duration_s"), "%s\n%s", narrow, whole);
    free(lat_paged), free(lat_whole), free(paged), free(whole), free(narrow);
    unlink(reqs);
}
END_TEST

static void expect_one_line_error(const char *const *extra, const char *word)
{
    ProgramResult r;
    run_program("ch04-paged", extra, &r);
    ck_assert_msg(r.status == 1, "expected exit 1, got %d; stderr: %s", r.status, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected one line on stderr, got:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "ch04-paged: error: ") == r.err, "%s", r.err);
    ck_assert_msg(strstr(r.err, word), "stderr lacks '%s': %s", word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    test_result_free(&r);
}

START_TEST(options_refuse_bad_values)
{
    char reqs[PATH_MAX], timed[PATH_MAX];
    test_write_temp(REQUESTS, strlen(REQUESTS), reqs);
    const char *with_times = "@0s\t4\tA\n@0.5s\t4\tB\n";
    test_write_temp(with_times, strlen(with_times), timed);
    static const char *const cases[][3] = {
        {"--clock", "sundial", "--clock: 'sundial' is not one of wall, model"},
        {"--machine", "tpu", "--machine: 'tpu' is not one of"},
        {"--machine", "a100-80gb,share=3", "--machine share"},
        {"--machine", "/nonexistent/limits.txt", "--machine: /nonexistent/limits.txt: cannot open"},
        {"--arrival-rate", "0", "--arrival-rate"},
        {"--arrival-rate", "fast", "--arrival-rate"},
        {"--arrival", "gamma:5", "--arrival: 'gamma:5' is not poisson:RATE or gamma:RATE:CV"},
        {"--arrival", "gamma:5:0", "--arrival: the CV"},
        {"--arrival-seed", "-3", "--arrival-seed"},
        {"--slo-ttft", "0", "--slo-ttft: an objective of 0 s can never be met"},
        {"--slo-tpot", "1ms", "--slo-tpot (seconds)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_one_line_error((const char *[]){"--requests", reqs, cases[i][0], cases[i][1], NULL}, cases[i][2]);
    expect_one_line_error((const char *[]){"--requests", reqs, "--arrival-rate", "5", "--arrival", "poisson:3", NULL},
                          "--arrival-rate and --arrival both");
    expect_one_line_error((const char *[]){"--requests", timed, "--arrival-rate", "5", NULL},
                          "the request file gives arrival times");
    unlink(reqs), unlink(timed);
}
END_TEST

START_TEST(kvsim_times_its_runs)
{
    if (!have_answers("kvsim_times_its_runs"))
        return;
    /* A timed run schedules exactly as an untimed one when every request
     * arrives at the start; only the clock is added. */
    Model shape;
    memset(&shape, 0, sizeof shape);
    shape.cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    CliOptions o;
    cli_defaults(&o);
    o.kv_budget = (size_t)64 * 16 * 524288;
    SimRequestSpec reqs[12];
    for (int i = 0; i < 12; i++)
        reqs[i] = (SimRequestSpec){.prompt_tokens = 100 + 37 * i, .max_new_tokens = 200, .output_tokens = 20 + 9 * i};
    KvsimClock clock = {.slo = {0.5, 0.02}};
    ck_assert(cost_machine_preset("a100-80gb", &clock.machine) == 0);
    clock.shape = (CostShape){.weight_bytes = 13.5e9, .kv_bytes_per_position = 524288, .flops_per_token = 13.5e9,
                              .flops_per_attended = 4.0 * 4096 * 32};
    KvsimResult plain, timed, again;
    Err err = {{0}};
    ck_assert_msg(kvsim_run(SERVE_PAGED, &shape, &o, 524288, reqs, 12, NULL, &plain, &err) == 0, "%s", err.msg);
    ck_assert_msg(kvsim_run_timed(SERVE_PAGED, &shape, &o, 524288, reqs, 12, &clock, &timed, &err) == 0, "%s",
                  err.msg);
    ck_assert(kvsim_run_timed(SERVE_PAGED, &shape, &o, 524288, reqs, 12, &clock, &again, &err) == 0);
    ck_assert_int_eq(timed.steps, plain.steps);
    ck_assert_double_eq(timed.util_avg, plain.util_avg);
    ck_assert_int_eq(plain.has_latency, 0);
    ck_assert_int_eq(timed.has_latency, 1);
    ck_assert_int_eq(timed.latency.requests, 12);
    /* A decode step of this 7B reads its 13.5 GB at 2,039 GB/s: at least 6.6 ms. */
    ck_assert_msg(timed.latency.itl.p50 >= 13.5e9 / 2039e9, "ITL p50 %g s", timed.latency.itl.p50);
    ck_assert(memcmp(&timed.latency, &again.latency, sizeof timed.latency) == 0);
    ck_assert_int_le(timed.latency.good, 12);
}
END_TEST

START_TEST(kvsim_program_latency)
{
    if (!have_answers("kvsim_program_latency"))
        return;
    const char *argv[] = {"kvsim", "--scenario", "source-13b-a100-80gb", "--requests", "40", "--latency",
                          "--slo-ttft", "5", NULL};
    ProgramResult a, b;
    ck_assert_int_eq(test_run_program(argv, &a), 0);
    ck_assert_int_eq(test_run_program(argv, &b), 0);
    ck_assert_msg(a.status == 0, "%s", a.err);
    ck_assert_msg(strstr(a.out, "latency on the cost model's clock (a100-80gb: 2039 GB/s"), "%s", a.out);
    ck_assert_msg(strstr(a.out, "goodput/s (met)"), "%s", a.out);
    ck_assert_str_eq(a.out, b.out);
    test_result_free(&a), test_result_free(&b);
    const char *plain[] = {"kvsim", "--scenario", "source-13b-a100-80gb", "--requests", "40", NULL};
    ck_assert_int_eq(test_run_program(plain, &a), 0);
    ck_assert_msg(a.status == 0 && !strstr(a.out, "latency on"), "%s", a.out);
    test_result_free(&a);
    const char *steps[] = {"kvsim", "--latency", "--rate", "0.5", NULL};
    ck_assert_int_eq(test_run_program(steps, &a), 0);
    ck_assert_msg(a.status == 1 && test_count_lines(a.err) == 1 && strstr(a.err, "give --rate-per-s") &&
                  a.out_len == 0, "%d: %s", a.status, a.err);
    test_result_free(&a);
    const char *no_machine[] = {"kvsim", "--machine", "tpu-v9", NULL};
    ck_assert_int_eq(test_run_program(no_machine, &a), 0);
    ck_assert_msg(a.status == 1 && test_count_lines(a.err) == 1 && strstr(a.err, "--machine: 'tpu-v9'"), "%s", a.err);
    test_result_free(&a);
}
END_TEST

Suite *suite_latency(void)
{
    Suite *s = suite_create("latency");
    TCase *unit = tcase_create("recorder");
    tcase_set_timeout(unit, 60); /* the arrival statistics draw 1.3 million gaps: seconds under ASan on a loaded machine */
    tcase_add_test(unit, percentiles_are_nearest_rank);
    tcase_add_test(unit, stats_sort_and_average);
    tcase_add_test(unit, timeline_by_hand);
    tcase_add_test(unit, summary_and_goodput);
    tcase_add_test(unit, poisson_has_its_rate);
    tcase_add_test(unit, gamma_has_its_rate_and_spread);
    tcase_add_test(unit, arrivals_reproduce_for_a_seed);
    tcase_add_test(unit, request_file_arrivals);
    tcase_add_test(unit, cost_model_by_hand);
    tcase_add_test(unit, machines_load_and_refuse);
    tcase_add_test(unit, cost_check_keeps_every_step_in_its_range);
    suite_add_tcase(s, unit);
    TCase *clock = tcase_create("clock");
    tcase_add_test(clock, one_request_alone);
    tcase_add_test(clock, second_request_queues);
    tcase_add_test(clock, preemption_stalls_the_preempted);
    tcase_add_test(clock, arrivals_by_time_and_by_step);
    tcase_add_test(clock, the_stop_is_an_output);
    tcase_add_test(clock, transfers_and_attention_are_charged);
    suite_add_tcase(s, clock);
    TCase *programs = tcase_create("programs");
    tcase_set_timeout(programs, 120);
    tcase_add_test(programs, model_clock_reproduces_across_runs_and_threads);
    tcase_add_test(programs, without_options_nothing_changes_but_new_lines);
    tcase_add_test(programs, wall_clock_against_the_model);
    tcase_add_test(programs, single_stream_latency);
    tcase_add_test(programs, options_refuse_bad_values);
    tcase_add_test(programs, chapters_charge_swaps_and_windows);
    tcase_add_test(programs, kvsim_times_its_runs);
    tcase_add_test(programs, kvsim_program_latency);
    suite_add_tcase(s, programs);
    return s;
}

REGISTER_SUITE(latency)
