/* Chapter 3: the KV arena, the reservation policies, static batching over
 * them, where the memory goes, and the program's handling of bad input. */
#define _GNU_SOURCE /* open_memstream */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching.h"
#include "helpers.h"
#include "mem.h"
#include "naive.h"
#include "suites.h"
#include "synth.h"

/* ---------------------------------------------------------- the arena */

static void expect_holes(const KvArena *a, const size_t *pairs, int n)
{
    ck_assert_msg(a->n_holes == n, "expected %d holes, got %d", n, a->n_holes);
    size_t free_bytes = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(a->holes[i].offset == pairs[2 * i] && a->holes[i].bytes == pairs[2 * i + 1],
                      "hole %d: expected [%zu, +%zu), got [%zu, +%zu)", i, pairs[2 * i], pairs[2 * i + 1],
                      a->holes[i].offset, a->holes[i].bytes);
        free_bytes += pairs[2 * i + 1];
    }
    ck_assert_uint_eq(a->free_bytes, free_bytes);
}

START_TEST(arena_first_fit_by_hand)
{
    KvArena a;
    Err err = {{0}};
    size_t off;
    ck_assert(kv_arena_init(&a, 100, 8, &err) == 0);
    ck_assert(kv_arena_alloc(&a, 10, &off) == 0 && off == 0);
    ck_assert(kv_arena_alloc(&a, 20, &off) == 0 && off == 10);
    ck_assert(kv_arena_alloc(&a, 30, &off) == 0 && off == 30);
    expect_holes(&a, (size_t[]){60, 40}, 1);
    ck_assert(kv_arena_release(&a, 10, 20, &err) == 0);
    expect_holes(&a, (size_t[]){10, 20, 60, 40}, 2);
    /* 25 does not fit the first hole (20): first fit moves on to 60. */
    ck_assert(kv_arena_alloc(&a, 25, &off) == 0 && off == 60);
    expect_holes(&a, (size_t[]){10, 20, 85, 15}, 2);
    /* 15 fits both holes; first fit takes the lower address. */
    ck_assert(kv_arena_alloc(&a, 15, &off) == 0 && off == 10);
    expect_holes(&a, (size_t[]){25, 5, 85, 15}, 2);
    /* An exact fit removes the hole. */
    ck_assert(kv_arena_alloc(&a, 5, &off) == 0 && off == 25);
    expect_holes(&a, (size_t[]){85, 15}, 1);
    ck_assert(kv_arena_alloc(&a, 16, &off) == -1);
    ck_assert(kv_arena_alloc(&a, 0, &off) == -1);
    ck_assert_uint_eq(kv_arena_largest_hole(&a), 15);
    kv_arena_free(&a);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(arena_coalesces_and_refuses_double_free)
{
    KvArena a;
    Err err = {{0}};
    size_t off[5];
    ck_assert(kv_arena_init(&a, 50, 8, &err) == 0);
    for (int i = 0; i < 5; i++)
        ck_assert(kv_arena_alloc(&a, 10, &off[i]) == 0 && off[i] == (size_t)(10 * i));
    expect_holes(&a, NULL, 0);
    ck_assert(kv_arena_release(&a, 10, 10, &err) == 0); /* alone */
    ck_assert(kv_arena_release(&a, 30, 10, &err) == 0); /* alone */
    expect_holes(&a, (size_t[]){10, 10, 30, 10}, 2);
    ck_assert(kv_arena_release(&a, 0, 10, &err) == 0); /* touches the right neighbour */
    expect_holes(&a, (size_t[]){0, 20, 30, 10}, 2);
    ck_assert(kv_arena_release(&a, 40, 10, &err) == 0); /* touches the left neighbour */
    expect_holes(&a, (size_t[]){0, 20, 30, 20}, 2);
    /* Freed twice, overlapping a hole, wrong size, outside: refused, books unchanged. */
    ck_assert(kv_arena_release(&a, 10, 10, &err) == -1);
    ck_assert_msg(strstr(err.msg, "overlaps free memory"), "%s", err.msg);
    ck_assert(kv_arena_release(&a, 20, 15, &err) == -1);
    ck_assert(kv_arena_release(&a, 45, 10, &err) == -1);
    ck_assert(kv_arena_release(&a, 60, 10, &err) == -1);
    expect_holes(&a, (size_t[]){0, 20, 30, 20}, 2);
    ck_assert(kv_arena_release(&a, 20, 10, &err) == 0); /* touches both: one hole again */
    expect_holes(&a, (size_t[]){0, 50}, 1);
    kv_arena_free(&a);
}
END_TEST

/* The refusal that paging removes: 4 KiB free, but in two holes of 2 KiB. */
START_TEST(arena_fragmentation_refusal)
{
    KvArena a;
    Err err = {{0}};
    size_t off[5], got;
    ck_assert(kv_arena_init(&a, 10240, 8, &err) == 0);
    for (int i = 0; i < 5; i++) /* A B C D E, 2 KiB each: full */
        ck_assert(kv_arena_alloc(&a, 2048, &off[i]) == 0);
    ck_assert(kv_arena_release(&a, off[1], 2048, &err) == 0); /* B */
    ck_assert(kv_arena_release(&a, off[3], 2048, &err) == 0); /* D */
    ck_assert_uint_eq(a.free_bytes, 4096);
    ck_assert_uint_eq(kv_arena_largest_hole(&a), 2048);
    ck_assert_msg(kv_arena_alloc(&a, 3072, &got) == -1, "3 KiB must not fit in holes of 2 KiB");
    ck_assert_uint_eq(kv_arena_free_in_holes_below(&a, 3072), 4096);
    ck_assert_uint_eq(kv_arena_free_in_holes_below(&a, 2048), 0);
    ck_assert(kv_arena_release(&a, off[2], 2048, &err) == 0); /* C: B+C+D is one 6 KiB hole */
    ck_assert(kv_arena_alloc(&a, 3072, &got) == 0 && got == 2048);
    kv_arena_free(&a);
}
END_TEST

/* Random allocations and releases against a byte map of who owns what. */
START_TEST(arena_random_never_overlaps)
{
    enum { CAP = 4096, SLOTS = 24 };
    unsigned char owner[CAP]; /* 0 free, else slot + 1 */
    size_t off[SLOTS], len[SLOTS];
    int live[SLOTS] = {0};
    KvArena a;
    Err err = {{0}};
    memset(owner, 0, sizeof owner);
    ck_assert(kv_arena_init(&a, CAP, SLOTS, &err) == 0);
    unsigned long long rng = 12345;
    for (int iter = 0; iter < 5000; iter++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int s = (int)((rng >> 33) % SLOTS);
        if (live[s]) {
            ck_assert(kv_arena_release(&a, off[s], len[s], &err) == 0);
            memset(owner + off[s], 0, len[s]);
            live[s] = 0;
        } else {
            len[s] = 1 + (size_t)((rng >> 17) % 700);
            size_t largest = kv_arena_largest_hole(&a);
            int rc = kv_arena_alloc(&a, len[s], &off[s]);
            ck_assert_int_eq(rc == 0, len[s] <= largest);
            if (rc == 0) {
                size_t taken = 0;
                for (size_t i = 0; i < len[s]; i++)
                    taken += owner[off[s] + i] != 0;
                ck_assert_msg(taken == 0, "%zu bytes of [%zu, +%zu) given twice", taken, off[s], len[s]);
                memset(owner + off[s], s + 1, len[s]);
                live[s] = 1;
            }
        }
        /* Holes: sorted, never touching, exactly the bytes nobody owns. */
        size_t free_bytes = 0, prev_end = 0, owned_in_holes = 0;
        for (int h = 0; h < a.n_holes; h++) {
            ck_assert(h == 0 || a.holes[h].offset > prev_end);
            for (size_t i = 0; i < a.holes[h].bytes; i++)
                owned_in_holes += owner[a.holes[h].offset + i] != 0;
            prev_end = a.holes[h].offset + a.holes[h].bytes;
            free_bytes += a.holes[h].bytes;
        }
        ck_assert_msg(owned_in_holes == 0, "%zu bytes are both owned and free", owned_in_holes);
        size_t unowned = 0;
        for (size_t i = 0; i < CAP; i++)
            unowned += owner[i] == 0;
        ck_assert_uint_eq(free_bytes, unowned);
        ck_assert_uint_eq(a.free_bytes, unowned);
    }
    for (int s = 0; s < SLOTS; s++)
        if (live[s])
            ck_assert(kv_arena_release(&a, off[s], len[s], &err) == 0);
    expect_holes(&a, (size_t[]){0, CAP}, 1);
    kv_arena_free(&a);
}
END_TEST

/* ---------------------------------------------------------- policies */

START_TEST(reservation_sizes_by_hand)
{
    /* A request of 5 prompt tokens and max_new_tokens 48: max_tokens 53. */
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_MAX, 5, 53, 512), 512);
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_REQUEST, 5, 53, 512), 53);
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_POW2, 5, 53, 512), 64);
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_GROW, 5, 53, 512), 16); /* at least 16 */
    /* grow holds the prompt and the next token: 15 + 1 = 16, 16 + 1 -> 32 */
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_GROW, 15, 53, 512), 16);
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_GROW, 16, 53, 512), 32);
    /* A requeued request comes back with its generated tokens: 40 + 1 -> 64 */
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_GROW, 40, 53, 512), 64);
    /* Capped at seq_len, which need not be a power of two. */
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_POW2, 25, 300, 300), 300);
    ck_assert_int_eq(reserve_initial_tokens(RESERVE_POW2, 25, 260, 512), 512);
    ck_assert_int_eq(reserve_grown_tokens(16, 17, 512), 32);
    ck_assert_int_eq(reserve_grown_tokens(256, 257, 300), 300);
    ck_assert_int_eq(reserve_grown_tokens(16, 100, 512), 128);
    ck_assert_int_eq(reserve_largest_tokens(RESERVE_GROW, 53, 512), 64);
    ck_assert_int_eq(reserve_largest_tokens(RESERVE_GROW, 6, 512), 16);
    ck_assert_int_eq(reserve_largest_tokens(RESERVE_REQUEST, 53, 512), 53);
    ck_assert_int_eq(reserve_largest_tokens(RESERVE_MAX, 53, 512), 512);
    ck_assert_int_eq(reserve_round_up_pow2(1), 1);
    ck_assert_int_eq(reserve_round_up_pow2(17), 32);
    ReservePolicy p;
    Err err = {{0}};
    ck_assert(reserve_policy_parse("pow2", &p, &err) == 0 && p == RESERVE_POW2);
    ck_assert(reserve_policy_parse("paged", &p, &err) == -1);
    ck_assert_str_eq(reserve_policy_name(RESERVE_GROW), "grow");
}
END_TEST

/* ---------------------------------------------------------- in-process runs */

/* GQA: 4 query heads over 2 KV heads; kv_dim 16, 256 B per position. */
static const ModelConfig GQA = {32, 64, 2, 4, 2, 400, 64};
/* MHA: kv_dim 32, 512 B per position. */
static const ModelConfig MHA = {32, 64, 2, 4, 4, 400, 64};

typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    BatchingState *state; /* open after run_to_end(), until finish_run() */
} TestRun;

/* Loads the requests and encodes them; the run is not started. */
static void prepare_run(TestRun *tr, const TestModel *tm, const char *requests, const char *reserve)
{
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&tr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    cli_defaults(&tr->o);
    tr->state = NULL;
    tr->o.reserve = reserve;
    ck_assert_msg(serving_run_init(&tr->run, &tm->m, &tm->t, &tr->o, &tr->rf, &err) == 0, "%s", err.msg);
}

static void run_to_end(TestRun *tr, FILE *log)
{
    Err err = {{0}};
    ck_assert_msg(batching_serve(&tr->run, &tr->state, log, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tr->run.n_done, tr->run.n_reqs);
}

static void finish_run(TestRun *tr)
{
    batching_close(tr->state);
    tr->state = NULL;
    serving_run_free(&tr->run);
    request_file_free(&tr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static const BatchingState *state(const TestRun *tr) { return tr->state; }

/* Every request that ran produced exactly its solo tokens (a contiguous
 * cache, tests/helpers.c); a rejected one is left out. */
static void expect_solo_tokens(const TestModel *tm, const TestRun *tr, const char *what)
{
    TestSolo solo;
    test_solo_open(&solo, &tm->m, &tm->t, &tr->run);
    test_expect_solo(&solo, &tr->run, 1, what);
    test_solo_close(&solo);
}

static void expect_breakdown_sums_to_one(const ServingRun *run)
{
    double fr[4];
    kv_breakdown_fractions(&run->breakdown, fr);
    ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-9);
    for (int i = 0; i < 4; i++)
        ck_assert(fr[i] >= -1e-12);
}

/* Largest region of any request under `reserve`, in positions. */
static int largest_region(const TestRun *tr)
{
    ReservePolicy p;
    Err err = {{0}};
    ck_assert(reserve_policy_parse(tr->o.reserve, &p, &err) == 0);
    int most = 0;
    for (int i = 0; i < tr->run.n_reqs; i++) {
        int t = reserve_largest_tokens(p, tr->run.reqs[i].max_tokens, tr->run.model->cfg.seq_len);
        most = t > most ? t : most;
    }
    return most;
}

/* First regions of every request under `reserve`, summed, in positions. */
static long first_regions_sum(const TestRun *tr)
{
    ReservePolicy p;
    Err err = {{0}};
    ck_assert(reserve_policy_parse(tr->o.reserve, &p, &err) == 0);
    long sum = 0;
    for (int i = 0; i < tr->run.n_reqs; i++) {
        const Request *r = &tr->run.reqs[i];
        sum += reserve_initial_tokens(p, r->n_tokens, r->max_tokens, tr->run.model->cfg.seq_len);
    }
    return sum;
}

static const char *const POLICIES[] = {"max", "request", "pow2", "grow"};

/* What the runs of check_every_policy() went through, summed over policies. */
typedef struct {
    long requeues;               /* under grow */
    long refusals_fragmentation; /* placements refused with enough bytes free */
    long joined_running;         /* continuous: admissions into a running batch */
} PolicyRuns;

/* Runs `requests` under every policy with a budget of a few of the largest
 * regions (several batches, requests that wait; under grow, requeues) and
 * checks the tokens. `batching` is "static" or "continuous". */
static PolicyRuns check_every_policy(const TestModel *tm, const char *requests, const char *what,
                                     const char *batching)
{
    PolicyRuns seen = {0};
    TestSolo solo = {0};
    for (int p = 0; p < 4; p++) {
        TestRun tr;
        prepare_run(&tr, tm, requests, POLICIES[p]);
        tr.o.batching = batching;
        if (p == 0)
            test_solo_open(&solo, &tm->m, &tm->t, &tr.run);
        /* Static: 1.5 of the largest region. Continuous: half of all the
         * first reservations (so that half the requests wait, and can join
         * while others run), at least the largest region. */
        size_t positions = (size_t)largest_region(&tr) * 3 / 2;
        if (strcmp(batching, "continuous") == 0) {
            size_t half = (size_t)first_regions_sum(&tr) / 2, largest = (size_t)largest_region(&tr);
            positions = half > largest ? half : largest;
        }
        tr.o.kv_budget = positions * tr.run.kv_bytes_per_token;
        run_to_end(&tr, NULL);
        char label[96];
        snprintf(label, sizeof label, "%s, --batching %s --reserve %s", what, batching, POLICIES[p]);
        test_expect_solo(&solo, &tr.run, 1, label);
        expect_breakdown_sums_to_one(&tr.run);
        const BatchingStats *st = &state(&tr)->stats;
        if (strcmp(batching, "static") == 0) {
            ck_assert_msg(st->batches >= 2, "%s: expected several batches", label);
            ck_assert_msg(st->joined_running == 0, "%s: a static batch admitted %ld requests while running", label,
                          st->joined_running);
        } else {
            ck_assert_msg(st->finished_held_sum == 0, "%s: finished requests held regions", label);
        }
        long waited = st->requeues; /* a requeued request waits to come back */
        for (int i = 0; i < tr.run.n_reqs; i++)
            waited += tr.run.reqs[i].admitted_step > 0;
        ck_assert_msg(waited > 0, "%s: the budget made nobody wait", label);
        for (int i = 0; i < tr.run.n_reqs; i++)
            ck_assert(tr.run.reqs[i].admitted_step >= 0 && tr.run.reqs[i].finished_step >= tr.run.reqs[i].admitted_step);
        seen.requeues += st->requeues;
        seen.refusals_fragmentation += st->refusals_fragmentation;
        seen.joined_running += st->joined_running;
        finish_run(&tr);
    }
    test_solo_close(&solo);
    return seen;
}

static const char *MIXED = "40\ta\n6\tthe end\n62\tb\n12\tx y z\n30\tc\n62\tonce upon\n3\td\n50\tab\n";

START_TEST(every_policy_gives_solo_tokens_synthetic)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 7); /* seed 7 stops some requests early (EOS) */
    long requeues = check_every_policy(&tm, MIXED, "GQA", "static").requeues;
    test_model_free(&tm);
    test_model_synthetic(&tm, MHA, 3);
    requeues += check_every_policy(&tm, MIXED, "MHA", "static").requeues;
    test_model_free(&tm);
    ck_assert_msg(requeues > 0, "the budgets should have forced some requeues under grow (recompute path untested)");
}
END_TEST

/* Continuous batching (Orca): the same tokens, with regions that come and
 * go at different times, so the arena fragments under the fixed-size
 * policies too. */
START_TEST(continuous_every_policy_gives_solo_tokens_synthetic)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 7);
    PolicyRuns gqa = check_every_policy(&tm, MIXED, "GQA", "continuous");
    test_model_free(&tm);
    test_model_synthetic(&tm, MHA, 3);
    PolicyRuns mha = check_every_policy(&tm, MIXED, "MHA", "continuous");
    test_model_free(&tm);
    ck_assert_msg(gqa.joined_running > 0 && mha.joined_running > 0, "nobody joined a running batch");
    ck_assert_msg(gqa.requeues + mha.requeues > 0, "the budgets should have forced requeues under grow");
    ck_assert_msg(gqa.refusals_fragmentation + mha.refusals_fragmentation > 0,
                  "the budgets should have refused an admission by fragmentation");
}
END_TEST

START_TEST(every_policy_gives_solo_tokens_stories260k)
{
    TestModel tm;
    if (!test_model_stories(&tm, "every_policy_gives_solo_tokens_stories260k"))
        return;
    static const char *const requests = "40\tOnce upon a time\n12\tThe cat sat\n60\tTom had a red ball.\n"
                                        "20\tLily\n33\tThe sun was hot\n";
    check_every_policy(&tm, requests, "stories260K", "static");
    PolicyRuns seen = check_every_policy(&tm, requests, "stories260K", "continuous");
    ck_assert_msg(seen.joined_running > 0, "stories260K: nobody joined a running batch");
    test_model_free(&tm);
}
END_TEST

/* Where the memory goes, by hand. Two requests of 2 prompt tokens ("a" is
 * BOS + one token), max_new_tokens 4 and 8, in one batch; counts below are
 * in positions x steps (multiply by 256 B for byte-steps).
 *
 * Request 0 holds K/V of 2, 3, 4, 5 positions after steps 0-3 (the 6th
 * token is sampled but never fed), finishes at step 3, and keeps its
 * region until the batch ends after step 7: used 2+3+4+5 + 4x5 = 34.
 * Request 1 holds 2..9 over steps 0-7: used 44. Token states 78 in all.
 * Reserved for future tokens: final length minus used, each step:
 * request 0: 3+2+1+0 = 6; request 1: 7+6+...+0 = 28; together 34.
 * Internal fragmentation: (region - final length) x 8 steps:
 *   request  regions 6, 10   -> (6-5 + 10-9) x 8     =  16, total 128
 *   pow2     regions 8, 16   -> (3 + 7) x 8          =  80, total 192
 *   grow     regions 16, 16  -> (11 + 7) x 8         = 144, total 256
 *   max      regions 64, 64  -> (59 + 55) x 8        = 912, total 1024
 * No hole ever refuses anybody: external fragmentation 0. */
START_TEST(breakdown_by_hand)
{
    static const struct {
        const char *policy;
        double internal, total;
    } cases[] = {{"request", 16, 128}, {"pow2", 80, 192}, {"grow", 144, 256}, {"max", 912, 1024}};
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    for (int c = 0; c < 4; c++) {
        TestRun tr;
        prepare_run(&tr, &tm, "4\ta\n8\tb\n", cases[c].policy);
        ck_assert_int_eq(tr.run.reqs[0].n_prompt, 2);
        ck_assert_int_eq(tr.run.reqs[1].n_prompt, 2);
        run_to_end(&tr, NULL);
        const ServingRun *run = &tr.run;
        ck_assert_int_eq(run->reqs[0].finish, REQ_FINISH_LENGTH);
        ck_assert_int_eq(run->reqs[1].finish, REQ_FINISH_LENGTH);
        ck_assert_int_eq(run->reqs[0].finished_step, 3);
        ck_assert_int_eq(run->reqs[1].finished_step, 7);
        ck_assert_int_eq(run->step, 8);
        ck_assert_int_eq(run->max_concurrent, 2);
        const double bpt = 256;
        ck_assert_double_eq_tol(run->breakdown.token_states, 78 * bpt, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.reserved, 34 * bpt, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.internal_fragmentation, cases[c].internal * bpt, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.external_fragmentation, 0, 1e-6);
        double fr[4];
        kv_breakdown_fractions(&run->breakdown, fr);
        ck_assert_double_eq_tol(fr[0], 78 / cases[c].total, 1e-12);
        ck_assert_double_eq_tol(fr[2], cases[c].internal / cases[c].total, 1e-12);
        ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-12);
        /* The reservation is the same at every step, so the utilization
         * averaged over steps is the token-state share: used per step
         * 4, 6, 8, 10, 11, 12, 13, 14 = 78 over 8 steps of (total/8). */
        ck_assert_double_eq_tol(kv_timeline_avg_utilization(&run->timeline), 78 / cases[c].total, 1e-12);
        ck_assert_uint_eq(run->timeline.peak_reserved, (size_t)(cases[c].total / 8 * bpt));
        /* Peak use is the last step's 14 positions. */
        ck_assert_double_eq_tol(run->timeline.util_at_peak, 14 / (cases[c].total / 8), 1e-12);
        finish_run(&tr);
    }
    test_model_free(&tm);
}
END_TEST

/* External fragmentation for real. Four requests of 2 prompt tokens, each
 * running to seq_len 64, under grow, in a budget of 80 positions (256 B
 * each). Their first regions are 16 positions: A B C D at 0, 16, 32, 48;
 * one hole of 16 at 64. At step 15 all four hold 16 positions and need 17:
 * - A needs 32: only 16 free -> D is requeued (newest), A moves to 48..80;
 *   holes: 0..16;
 * - B needs 32: only 16 free -> C is requeued; holes 0..16 and 32..48:
 *   32 positions (8 KiB) free, but the largest hole is 16 (4 KiB) -> the
 *   refusal by fragmentation; external fragmentation 8 KiB at this step;
 *   nobody newer is left, so B requeues itself.
 * From then on every batch starts from an empty arena and each growth
 * fails for lack of space, never again by fragmentation. A needs 64 at
 * step 31 (48 free), requeues itself, and batch 2 is A alone (64
 * positions): re-prefilled with 33 tokens at step 31, it has 34 + (s - 31)
 * after step s, 64 after step 61. Batch 3 is B and C, 32 positions each,
 * from step 62 (17 tokens, one more per step); at step 78 B needs 33
 * positions: C is requeued, B requeues itself, batch 4 is B
 * alone to step 108, batch 5 is C alone to step 139, batch 6 is D from
 * step 140, which requeues itself at step 156 (33 tokens, 48 free) and
 * comes back as batch 7 to step 186. In all: one move (16 positions
 * copied), 7 requeues, 7 batches, 187 steps. */
START_TEST(fragmentation_refusal_on_a_real_run)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    TestRun tr;
    prepare_run(&tr, &tm, "62\ta\n62\tb\n62\tc\n62\td\n", "grow");
    tr.o.kv_budget = 80 * 256;
    char *log_text = NULL;
    size_t log_len = 0;
    FILE *log = open_memstream(&log_text, &log_len);
    run_to_end(&tr, log);
    fclose(log);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(tr.run.reqs[i].n_prompt, 2);
        ck_assert_int_eq(tr.run.reqs[i].finish, REQ_FINISH_LENGTH);
        ck_assert_int_eq(tr.run.reqs[i].n_tokens, 64);
    }
    const char *line = "ch03-batching: step 15: request 1 cannot grow from 16 to 32 positions: needs 8.00 KiB; "
                       "8.00 KiB free in total but the largest hole is 4.00 KiB\n";
    ck_assert_msg(strstr(log_text, line), "the log lacks the refusal line; it was:\n%s", log_text);
    const BatchingStats *s = &state(&tr)->stats;
    ck_assert_int_eq(s->refusals_fragmentation, 1);
    ck_assert_int_eq(s->external_steps, 1);
    ck_assert_double_eq(tr.run.breakdown.external_fragmentation, 8192);
    ck_assert_int_eq(s->grow_moves, 1);
    ck_assert_double_eq(s->grow_bytes_copied, 16 * 256);
    ck_assert_int_eq(s->requeues, 7);
    ck_assert_int_eq(s->batches, 7);
    ck_assert_int_eq(tr.run.step, 187);
    ck_assert_int_eq(tr.run.reqs[3].preemptions, 2); /* D: at step 15, and alone at 33 tokens */
    expect_breakdown_sums_to_one(&tr.run);
    expect_solo_tokens(&tm, &tr, "after requeues");
    free(log_text);
    finish_run(&tr);
    test_model_free(&tm);
}
END_TEST

/* Runs `requests` under --reserve `reserve` and --batching `batching` in a
 * budget of `positions` (256 B each), with the log in *log_text. */
static void run_logged(TestRun *tr, const TestModel *tm, const char *requests, const char *reserve,
                       const char *batching, size_t positions, char **log_text)
{
    prepare_run(tr, tm, requests, reserve);
    tr->o.batching = batching;
    tr->o.kv_budget = positions * 256;
    size_t log_len = 0;
    FILE *log = open_memstream(log_text, &log_len);
    run_to_end(tr, log);
    fclose(log);
}

static void expect_log_line(const char *log_text, const char *line)
{
    ck_assert_msg(strstr(log_text, line), "the log lacks the line\n%s\nit was:\n%s", line, log_text);
}

/* Where continuous batching admits a request that a static batch keeps
 * waiting. Three requests of 2 prompt tokens asking for 4, 8 and 4 new
 * ones: under --reserve request regions of 6, 10 and 6 positions, in a
 * budget of 16. A and B fill it at step 0; C waits ("needs 1.50 KiB but
 * only 0 B is free"). A finishes at step 3 (2 + 4 = 6 tokens), B at 7.
 *
 * Static: A keeps its region until B is done; C starts a second batch at
 * step 8 and finishes at step 11: 12 steps. Continuous: A's region [0, 6)
 * is free after step 3, and C joins at step 4, first fit at offset 0,
 * finishing at step 7: 8 steps. C is refused once per step before that:
 * steps 0-3 in continuous, only step 0 in static.
 *
 * Breakdown in position-steps (x 256 B). A request of regions R that runs
 * steps s..s+3 holds 2, 3, 4, 5 positions (its 6th token is sampled, never
 * fed): used 14, final length 5.
 *            continuous                          static
 *   A  steps 0-3: used 14, region 6 x 4 = 24     steps 0-7 (held to the end):
 *      internal (6-5) x 4 = 4, future 6             used 14 + 4 x 5 = 34, 48,
 *                                                   internal (6-5) x 8 = 8, future 6
 *   B  steps 0-7: used 2+...+9 = 44, 10 x 8 = 80, internal 1 x 8 = 8, future 80-44-8 = 28 (both)
 *   C  steps 4-7: used 14, 24, internal 4,       steps 8-11: the same
 *      future 6
 *   total token states 72, reserved for future 40, internal 16 of 128 (continuous);
 *         92, 40, 20 of 152 (static), of which A held 4 x 6 = 24 after it finished.
 * Static batching's token states (92/152 = 60.5%) look better than
 * continuous batching's (72/128 = 56.25%) only because A's finished tokens
 * count while nobody reads them. */
START_TEST(continuous_joins_where_static_waits)
{
    static const struct {
        const char *batching;
        long admitted_c, steps, refusals;
        double token_states, future, internal, held_by_finished;
    } cases[] = {{"static", 8, 12, 1, 92, 40, 20, 24}, {"continuous", 4, 8, 4, 72, 40, 16, 0}};
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    for (int c = 0; c < 2; c++) {
        TestRun tr;
        char *log_text = NULL;
        run_logged(&tr, &tm, "4\ta\n8\tb\n4\tc\n", "request", cases[c].batching, 16, &log_text);
        const ServingRun *run = &tr.run;
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(run->reqs[i].n_prompt, 2);
            ck_assert_int_eq(run->reqs[i].finish, REQ_FINISH_LENGTH);
        }
        ck_assert_int_eq(run->reqs[0].admitted_step, 0);
        ck_assert_int_eq(run->reqs[1].admitted_step, 0);
        ck_assert_msg(run->reqs[2].admitted_step == cases[c].admitted_c, "%s: C admitted at step %ld, expected %ld",
                      cases[c].batching, run->reqs[2].admitted_step, cases[c].admitted_c);
        ck_assert_int_eq(run->reqs[0].finished_step, 3);
        ck_assert_int_eq(run->reqs[1].finished_step, 7);
        ck_assert_int_eq(run->reqs[2].finished_step, cases[c].admitted_c + 3);
        ck_assert_int_eq(run->step, cases[c].steps);
        ck_assert_int_eq(run->max_concurrent, 2);
        const BatchingStats *st = &state(&tr)->stats;
        ck_assert_int_eq(st->refusals_no_space, cases[c].refusals);
        ck_assert_int_eq(st->refusals_fragmentation, 0);
        ck_assert_int_eq(st->joined_running, c == 1 ? 1 : 0);
        ck_assert_int_eq(st->batches, c == 1 ? 1 : 2);
        ck_assert_double_eq_tol(run->breakdown.token_states, cases[c].token_states * 256, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.reserved, cases[c].future * 256, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.internal_fragmentation, cases[c].internal * 256, 1e-6);
        ck_assert_double_eq_tol(run->breakdown.external_fragmentation, 0, 1e-6);
        ck_assert_double_eq_tol(st->finished_held_sum, cases[c].held_by_finished * 256, 1e-6);
        expect_log_line(log_text, "ch03-batching: step 0: request 2 waits: needs 1.50 KiB but only 0 B is free\n");
        if (c == 1)
            expect_log_line(log_text, "ch03-batching: step 4: request 2 joins the running batch (2 running now), "
                                      "4.00 KiB reserved, 0 B free\n");
        else
            expect_log_line(log_text, "ch03-batching: step 8: batch 2: requests 2 (1), 1.50 KiB reserved");
        expect_solo_tokens(&tm, &tr, cases[c].batching);
        free(log_text);
        finish_run(&tr);
    }
    test_model_free(&tm);
}
END_TEST

/* A refusal by fragmentation that only continuous batching meets. Six
 * requests of 2 prompt tokens, --reserve request, a budget of 20 positions
 * (5 KiB). A, B, C, D ask for 2, 4, 2, 4 new tokens: regions of 4, 6, 4, 6
 * positions at 0, 4, 10, 14, which fill the arena. E asks for 4 (6
 * positions), F for 2 (4 positions). A and C finish at step 1 (4 tokens)
 * and release [0, 4) and [10, 14): 8 positions (2 KiB) free, the largest
 * hole 4 (1 KiB). At steps 2 and 3 E is refused by fragmentation, and the
 * whole 2 KiB is in holes smaller than it: 2 x 2,048 B of external
 * fragmentation. F would fit either hole, but nobody overtakes E. B and D
 * finish at step 3; at step 4 the arena is empty and E and F start a new
 * batch at 0 and 6. */
START_TEST(continuous_fragmentation_refusal_by_hand)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    TestRun tr;
    char *log_text = NULL;
    run_logged(&tr, &tm, "2\ta\n4\tb\n2\tc\n4\td\n4\te\n2\tf\n", "request", "continuous", 20, &log_text);
    static const long admitted[] = {0, 0, 0, 0, 4, 4}, finished[] = {1, 3, 1, 3, 7, 5};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(tr.run.reqs[i].n_prompt, 2);
        ck_assert_int_eq(tr.run.reqs[i].finish, REQ_FINISH_LENGTH);
        ck_assert_msg(tr.run.reqs[i].admitted_step == admitted[i] && tr.run.reqs[i].finished_step == finished[i],
                      "request %d: admitted at %ld, finished at %ld; expected %ld and %ld", i,
                      tr.run.reqs[i].admitted_step, tr.run.reqs[i].finished_step, admitted[i], finished[i]);
    }
    expect_log_line(log_text, "ch03-batching: step 0: request 4 waits: needs 1.50 KiB but only 0 B is free\n");
    expect_log_line(log_text, "ch03-batching: step 2: request 4 waits: needs 1.50 KiB; 2.00 KiB free in total but "
                              "the largest hole is 1.00 KiB\n");
    ck_assert_msg(!strstr(log_text, "step 3: request 4 waits"), "the same wait is told once:\n%s", log_text);
    expect_log_line(log_text, "ch03-batching: step 4: batch 2: requests 4 5 (2), 2.50 KiB reserved, 2.50 KiB free\n");
    const BatchingStats *st = &state(&tr)->stats;
    ck_assert_int_eq(st->refusals_no_space, 2);       /* steps 0 and 1 */
    ck_assert_int_eq(st->refusals_fragmentation, 2);  /* steps 2 and 3 */
    ck_assert_int_eq(st->external_steps, 2);
    ck_assert_double_eq(tr.run.breakdown.external_fragmentation, 2 * 2048);
    ck_assert_int_eq(st->max_holes, 2);
    ck_assert_int_eq(tr.run.step, 8);
    expect_breakdown_sums_to_one(&tr.run);
    expect_solo_tokens(&tm, &tr, "continuous, fragmented");
    free(log_text);
    finish_run(&tr);
    test_model_free(&tm);
}
END_TEST

/* Growing under continuous batching, and the progress rule. Two requests
 * of 2 prompt tokens running to seq_len 64 (62 new), --reserve grow, a
 * budget of 64 positions: first regions of 16, A at 0, B at 16. A request
 * has 3 + s tokens after step s while it runs.
 * - Step 15: A needs 17 positions: moves to a region of 32 at [32, 64)
 *   (16 positions copied). B needs 32 too, only 16 are free, nobody is
 *   newer: B requeues itself (16 positions to recompute). A step that
 *   requeued admits nobody.
 * - Step 16: B (17 tokens) joins again with 32 positions in the hole
 *   [0, 32) and is re-prefilled; it has s + 2 tokens after step s.
 * - Step 31: A needs 33 (64 positions), nothing is free: B is requeued
 *   (31 positions); 32 free is still not 64, so A requeues itself (32).
 *   Nobody runs: a new batch starts in the empty arena with A (33 tokens,
 *   64 positions); B (32 tokens, 64 positions) waits.
 * - A finishes at step 61 (34 + 30 = 64 tokens); B starts a third batch at
 *   step 62 and finishes at step 93 (33 + 31): 94 steps, 3 requeues.
 * Static batching cannot take B back at step 16: B starts at step 62 with
 * 32 positions, requeues itself at step 78 and ends at step 108. */
START_TEST(continuous_grow_requeues_by_hand)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    static const struct {
        const char *batching;
        long steps, requeues, joined, batches, recomputed;
    } cases[] = {{"continuous", 94, 3, 1, 3, 16 + 31 + 32}, {"static", 109, 3, 0, 4, 16 + 32 + 32}};
    for (int c = 0; c < 2; c++) {
        TestRun tr;
        char *log_text = NULL;
        run_logged(&tr, &tm, "62\ta\n62\tb\n", "grow", cases[c].batching, 64, &log_text);
        for (int i = 0; i < 2; i++) {
            ck_assert_int_eq(tr.run.reqs[i].finish, REQ_FINISH_LENGTH);
            ck_assert_int_eq(tr.run.reqs[i].n_tokens, 64);
        }
        const BatchingStats *st = &state(&tr)->stats;
        ck_assert_msg(tr.run.step == cases[c].steps, "%s: %ld steps, expected %ld", cases[c].batching, tr.run.step,
                      cases[c].steps);
        ck_assert_int_eq(st->requeues, cases[c].requeues);
        ck_assert_int_eq(st->positions_recomputed, cases[c].recomputed);
        ck_assert_int_eq(st->joined_running, cases[c].joined);
        ck_assert_int_eq(st->batches, cases[c].batches);
        ck_assert_int_eq(st->grow_moves, 1);
        ck_assert_double_eq(st->grow_bytes_copied, 16 * 256);
        ck_assert_int_eq(tr.run.reqs[0].finished_step, 61);
        expect_log_line(log_text, "ch03-batching: step 15: request 1 requeues itself (no newer request is left to "
                                  "make room; 16 positions to recompute)\n");
        if (c == 0) {
            ck_assert_int_eq(tr.run.reqs[0].preemptions, 1);
            ck_assert_int_eq(tr.run.reqs[1].preemptions, 2);
            expect_log_line(log_text, "ch03-batching: step 16: request 1 joins the running batch (2 running now), "
                                      "16.00 KiB reserved, 0 B free\n");
            expect_log_line(log_text, "ch03-batching: step 31: request 1 requeued to make room for request 0 (31 "
                                      "positions to recompute)\n");
            expect_log_line(log_text, "ch03-batching: step 31: request 0 requeues itself (no newer request is left "
                                      "to make room; 32 positions to recompute)\n");
            expect_log_line(log_text, "ch03-batching: step 62: batch 3: requests 1 (1)");
        }
        expect_breakdown_sums_to_one(&tr.run);
        expect_solo_tokens(&tm, &tr, cases[c].batching);
        free(log_text);
        finish_run(&tr);
    }
    test_model_free(&tm);
}
END_TEST

START_TEST(oversized_request_is_rejected)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    TestRun tr;
    /* request: 2 + 62 = 64 positions; 2 + 5 = 7; the budget holds 20. */
    prepare_run(&tr, &tm, "62\ta\n5\tb\n", "request");
    tr.o.kv_budget = 20 * 256;
    run_to_end(&tr, NULL);
    const Request *big = &tr.run.reqs[0], *small = &tr.run.reqs[1];
    ck_assert_int_eq(big->finish, REQ_FINISH_REJECTED);
    ck_assert_msg(strstr(big->note, "64 positions") && strstr(big->note, "budget is 5.00 KiB"), "%s", big->note);
    ck_assert_int_eq(small->finish, REQ_FINISH_LENGTH);
    ck_assert_int_eq(small->n_tokens, 7);
    expect_solo_tokens(&tm, &tr, "beside a rejected request");
    finish_run(&tr);
    /* When nothing fits at all, the run is refused outright. */
    prepare_run(&tr, &tm, "62\ta\n5\tb\n", "max");
    tr.o.kv_budget = 20 * 256;
    Err err = {{0}};
    ck_assert_int_eq(batching_serve(&tr.run, &tr.state, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "holds no request") && strstr(err.msg, "64 positions"), "%s", err.msg);
    finish_run(&tr);
    test_model_free(&tm);
}
END_TEST

START_TEST(max_batch_limits_the_batch)
{
    TestModel tm;
    test_model_synthetic(&tm, GQA, 3);
    TestRun tr;
    /* Room for all four under request, but at most two per batch: 0 and 1
     * from step 0 to 7 (max_new_tokens 8), then 2 and 3 from step 8. */
    prepare_run(&tr, &tm, "8\ta\n8\tb\n8\tc\n8\td\n", "request");
    tr.o.max_batch = 2;
    char *log_text = NULL;
    size_t log_len = 0;
    FILE *log = open_memstream(&log_text, &log_len);
    run_to_end(&tr, log);
    fclose(log);
    ck_assert_int_eq(tr.run.max_concurrent, 2);
    ck_assert_int_eq(state(&tr)->stats.batches, 2);
    static const long admitted[] = {0, 0, 8, 8};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(tr.run.reqs[i].admitted_step, admitted[i]);
    ck_assert_msg(strstr(log_text, "step 0: request 2 waits: the batch is full (--max-batch 2)"), "%s", log_text);
    free(log_text);
    finish_run(&tr);
    test_model_free(&tm);
}
END_TEST

/* ---------------------------------------------------------- accounting only */

/* The source material's case: a 13B model (40 layers, 40 heads of 128,
 * fp16: 819,200 B per position, 1,677,721,600 B for 2,048 positions) with
 * 48 GiB for K/V. 40 requests of 100 prompt tokens and 500 new ones, run
 * by the serving core's no-model loop (what kvsim does). */
static void simulate_13b(const char *reserve, ServingRun *run, BatchingState **state, Model *m, CliOptions *o)
{
    memset(m, 0, sizeof *m);
    m->cfg = (ModelConfig){5120, 13824, 40, 40, 40, 32000, 2048};
    cli_defaults(o);
    o->reserve = reserve;
    o->kv_budget = (size_t)48 << 30;
    SimRequestSpec specs[40];
    for (int i = 0; i < 40; i++)
        specs[i] = (SimRequestSpec){.prompt_tokens = 100, .max_new_tokens = 500};
    Err err = {{0}};
    ck_assert_msg(serving_sim_init(run, m, o, model_kv_bytes_per_token(&m->cfg, 2), specs, 40, &err) == 0, "%s",
                  err.msg);
    ck_assert_uint_eq(run->kv_bytes_per_token, 819200);
    ck_assert_msg(batching_serve(run, state, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
}

static void free_simulated(ServingRun *run, BatchingState *state)
{
    batching_close(state);
    serving_run_free(run);
}

START_TEST(accounting_only_13b_scale)
{
    Model m;
    CliOptions o;
    ServingRun run;
    BatchingState *state;
    /* max: 48 GiB / 1.5625 GiB = 30.72 -> batches of 30 and 10, 500 steps
     * each. Per request, positions held at step k are 100 + k, k = 0..499:
     * 50,000 + 124,750 = 174,750 of 2,048 x 500 = 1,024,000 reserved:
     * token states 17.07%. Final length 599 (the 600th token is never
     * fed): internal (2048 - 599) x 500 = 724,500; the rest, 124,750, was
     * reserved for tokens still to come. */
    simulate_13b("max", &run, &state, &m, &o);
    ck_assert_int_eq(run.max_concurrent, 30);
    ck_assert_int_eq(run.step, 1000);
    double fr[4];
    kv_breakdown_fractions(&run.breakdown, fr);
    ck_assert_double_eq_tol(fr[0], 174750.0 / 1024000.0, 1e-12);
    ck_assert_double_eq_tol(fr[1], 124750.0 / 1024000.0, 1e-12);
    ck_assert_double_eq_tol(fr[2], 724500.0 / 1024000.0, 1e-12);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    free_simulated(&run, state);
    /* grow: first regions of 128 (100 + 1, rounded up), then 256, 512,
     * 1024: three moves per request copying 128 + 256 + 512 positions; all
     * 40 fit in one batch (40 x 1024 x 819,200 B = 31.25 GiB). */
    simulate_13b("grow", &run, &state, &m, &o);
    const BatchingStats *s = &state->stats;
    ck_assert_int_eq(run.max_concurrent, 40);
    ck_assert_int_eq(s->requeues, 0);
    ck_assert_int_eq(s->grow_moves, 120);
    ck_assert_double_eq(s->grow_bytes_copied, 40.0 * 896 * 819200);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    expect_breakdown_sums_to_one(&run);
    free_simulated(&run, state);
}
END_TEST

/* ---------------------------------------------------------- the program */

static char model_path[PATH_MAX], tok_path[PATH_MAX];

static void write_model_once(void)
{
    if (!model_path[0])
        test_write_synthetic(&GQA, 7, 0, 0, model_path, tok_path);
}

/* Runs ch03-batching on the synthetic model with extra arguments. */
static void run_program(const char *const *extra, ProgramResult *r)
{
    write_model_once();
    const char *argv[32] = {"ch03-batching", "--model", model_path, "--tokenizer", tok_path, "--threads", "1"};
    int n = 7;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_one_line_error(const char *const *extra, const char *word)
{
    ProgramResult r;
    run_program(extra, &r);
    ck_assert_msg(r.status == 1, "expected exit 1, got %d; stderr: %s", r.status, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected one line on stderr, got:\n%s", r.err);
    ck_assert_msg(strstr(r.err, "ch03-batching: error: ") == r.err, "%s", r.err);
    ck_assert_msg(strstr(r.err, word), "stderr lacks '%s': %s", word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    test_result_free(&r);
}

START_TEST(program_refuses_bad_input)
{
    char bad[PATH_MAX], good[PATH_MAX];
    const char *malformed = "# two fine lines, then a bad one\n5\ta\n6\tb\nsix\tc\n";
    test_write_temp(malformed, strlen(malformed), bad);
    const char *fine = "5\ta\n6\tb\n";
    test_write_temp(fine, strlen(fine), good);
    expect_one_line_error((const char *[]){"--requests", bad, NULL}, ":4:");
    expect_one_line_error((const char *[]){"--requests", "/nonexistent/requests.tsv", NULL}, "cannot open");
    expect_one_line_error((const char *[]){"--requests", good, "--kv-budget", "0", NULL}, "more than 0 bytes");
    expect_one_line_error((const char *[]){"--requests", good, "--kv-budget", "lots", NULL}, "not a size");
    expect_one_line_error((const char *[]){"--requests", good, "--kv-budget", "12XB", NULL}, "unknown unit");
    /* Below one request: a full-length region is 64 x 256 B = 16 KiB. */
    expect_one_line_error((const char *[]){"--requests", good, "--kv-budget", "15KiB", NULL}, "holds no request");
    expect_one_line_error((const char *[]){"--requests", good, "--kv-budget", "1KiB", "--reserve", "request", NULL},
                          "holds no request");
    expect_one_line_error((const char *[]){"--requests", good, "--reserve", "paged", NULL}, "not one of");
    expect_one_line_error((const char *[]){"--requests", good, "--batching", "dynamic", NULL},
                          "--batching: 'dynamic' is not one of static, continuous");
    expect_one_line_error((const char *[]){"--requests", good, "--max-batch", "0", NULL}, "out of range");
    expect_one_line_error((const char *[]){"--requests", good, "--block-size", "16", NULL}, "unknown option");
    /* Output files are checked before the run, not after it. */
    expect_one_line_error((const char *[]){"--requests", good, "--out", "/nonexistent/dir/x.jsonl", NULL},
                          "--out /nonexistent/dir/x.jsonl: cannot create");
    expect_one_line_error((const char *[]){"--requests", good, "--json", "/", NULL}, "--json /: cannot create");
}
END_TEST

static int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

START_TEST(program_writes_json_lines_and_report)
{
    char reqs[PATH_MAX], out[PATH_MAX], json[PATH_MAX];
    /* 2 + 62 = 64 positions; under request the budget of 10 KiB (40
     * positions) rejects request 1 and runs the others. */
    const char *text = "5\ta\n62\tb\n12\tthe end\n";
    test_write_temp(text, strlen(text), reqs);
    test_write_temp("", 0, out);
    test_write_temp("", 0, json);
    ProgramResult r;
    run_program((const char *[]){"--requests", reqs, "--reserve", "request", "--kv-budget", "10KiB", "--out", out,
                                 "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "request 1 rejected"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "static batching (--reserve request"), "%s", r.err);
    ck_assert_msg(r.out_len == 0, "stdout must stay empty (the texts go to --out), got: %s", r.out);
    test_result_free(&r);
    /* --help says where the texts go: not to stdout, as the one-request chapters do. */
    run_program((const char *[]){"--help", NULL}, &r);
    ck_assert_msg(r.status == 0 && strstr(r.out, "Nothing goes to stdout") && !strstr(r.out, "stdout carries only"),
                  "--help must say that stdout stays empty: %s", r.out);
    test_result_free(&r);
    FILE *f = fopen(out, "r");
    char line[8192];
    int n = 0;
    static const char *const keys[] = {"\"id\":", "\"prompt\":", "\"prompt_tokens\":[", "\"tokens\":[", "\"text\":",
                                       "\"finish\":", "\"admitted_step\":", "\"finished_step\":"};
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(line[0] == '{' && strstr(line, "}\n"), "not one object per line: %s", line);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(strstr(line, keys[k]), "line %d lacks %s: %s", n, keys[k], line);
        char id[32];
        snprintf(id, sizeof id, "{\"id\":%d,", n);
        ck_assert_msg(strncmp(line, id, strlen(id)) == 0, "line %d: %s", n, line);
        if (n == 1) {
            ck_assert_msg(strstr(line, "\"finish\":\"rejected\"") && strstr(line, "\"note\":"), "%s", line);
            ck_assert_msg(strstr(line, "\"tokens\":[]"), "%s", line);
        } else {
            ck_assert_msg(!strstr(line, "rejected") && strstr(line, "\"admitted_step\":0,"), "%s", line);
        }
        n++;
    }
    fclose(f);
    ck_assert_int_eq(n, 3);
    /* request 0 runs 5 tokens: the prompt tokens + 5 ids make 2 + 5 numbers */
    f = fopen(json, "r");
    static char report[1 << 20];
    size_t len = fread(report, 1, sizeof report - 1, f);
    report[len] = '\0';
    fclose(f);
    static const char *const report_keys[] = {"\"kv_utilization_avg\":", "\"kv_breakdown\":", "\"token_states\":",
                                              "\"reserved\":", "\"internal_fragmentation\":",
                                              "\"external_fragmentation\":", "\"max_concurrent\": 2",
                                              "\"requests_completed\": 2", "\"requests_rejected\": 1",
                                              "\"kv_timeline\":", "\"reserve\": \"request\""};
    for (size_t k = 0; k < sizeof report_keys / sizeof report_keys[0]; k++)
        ck_assert_msg(strstr(report, report_keys[k]), "the report lacks %s:\n%s", report_keys[k], report);
    ck_assert_int_eq(count_char(report, '{'), count_char(report, '}'));
    ck_assert_msg(strstr(report, "\"batching\": \"static\""), "%s", report);
}
END_TEST

/* --batching continuous through the program: the table says so, and C (see
 * continuous_joins_where_static_waits) joins at step 4. */
START_TEST(program_continuous_batching)
{
    char reqs[PATH_MAX], out[PATH_MAX], json[PATH_MAX];
    const char *text = "4\ta\n8\tb\n4\tc\n";
    test_write_temp(text, strlen(text), reqs);
    test_write_temp("", 0, out);
    test_write_temp("", 0, json);
    ProgramResult r;
    run_program((const char *[]){"--requests", reqs, "--reserve", "request", "--kv-budget", "4KiB", "--batching",
                                 "continuous", "--out", out, "--json", json, NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "--batching continuous, --reserve request"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "continuous batching (--reserve request"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "1 admissions joined a running batch"), "%s", r.err);
    ck_assert_msg(strstr(r.err, "step 4: request 2 joins the running batch"), "%s", r.err);
    test_result_free(&r);
    FILE *f = fopen(out, "r");
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (n++ == 2)
            ck_assert_msg(strstr(line, "\"admitted_step\":4,\"finished_step\":7"), "%s", line);
    fclose(f);
    ck_assert_int_eq(n, 3);
    f = fopen(json, "r");
    static char report[1 << 20];
    size_t len = fread(report, 1, sizeof report - 1, f);
    report[len] = '\0';
    fclose(f);
    ck_assert_msg(strstr(report, "\"batching\": \"continuous\"") && strstr(report, "\"joined_running\": 1") &&
                      strstr(report, "\"steps\": 8,"), "%s", report);
}
END_TEST

Suite *suite_ch03(void)
{
    Suite *s = suite_create("ch03");
    TCase *arena = tcase_create("arena");
    tcase_set_timeout(arena, 30);
    tcase_add_test(arena, arena_first_fit_by_hand);
    tcase_add_test(arena, arena_coalesces_and_refuses_double_free);
    tcase_add_test(arena, arena_fragmentation_refusal);
    tcase_add_test(arena, arena_random_never_overlaps);
    tcase_add_test(arena, reservation_sizes_by_hand);
    suite_add_tcase(s, arena);
    TCase *batching = tcase_create("batching");
    tcase_set_timeout(batching, 120);
    tcase_add_test(batching, every_policy_gives_solo_tokens_synthetic);
    tcase_add_test(batching, every_policy_gives_solo_tokens_stories260k);
    tcase_add_test(batching, continuous_every_policy_gives_solo_tokens_synthetic);
    tcase_add_test(batching, continuous_joins_where_static_waits);
    tcase_add_test(batching, continuous_fragmentation_refusal_by_hand);
    tcase_add_test(batching, continuous_grow_requeues_by_hand);
    tcase_add_test(batching, breakdown_by_hand);
    tcase_add_test(batching, fragmentation_refusal_on_a_real_run);
    tcase_add_test(batching, oversized_request_is_rejected);
    tcase_add_test(batching, max_batch_limits_the_batch);
    tcase_add_test(batching, accounting_only_13b_scale);
    suite_add_tcase(s, batching);
    TCase *program = tcase_create("program");
    tcase_set_timeout(program, 60);
    tcase_add_test(program, program_refuses_bad_input);
    tcase_add_test(program, program_writes_json_lines_and_report);
    tcase_add_test(program, program_continuous_batching);
    suite_add_tcase(s, program);
    return s;
}

REGISTER_LAB_SUITE(ch03)
