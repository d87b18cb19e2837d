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

typedef struct {
    Model m;
    Tokenizer t;
    void *image, *tok_image; /* synthetic only */
} TestModel;

/* GQA: 4 query heads over 2 KV heads; kv_dim 16, 256 B per position. */
static const ModelConfig GQA = {32, 64, 2, 4, 2, 400, 64};
/* MHA: kv_dim 32, 512 B per position. */
static const ModelConfig MHA = {32, 64, 2, 4, 4, 400, 64};

static void open_synthetic(TestModel *tm, ModelConfig cfg, unsigned long long seed)
{
    memset(tm, 0, sizeof *tm);
    SynthSpec spec = {.cfg = cfg, .shared_classifier = 0, .seed = seed};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &tm->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(cfg.vocab_size, &tm->tok_image, &tok_bytes, &err) == 0);
    ck_assert_msg(model_open_image(&tm->m, tm->image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(&tm->t, tm->tok_image, tok_bytes, cfg.vocab_size, &err) == 0, "%s", err.msg);
}

static int open_stories260k(TestModel *tm)
{
    memset(tm, 0, sizeof *tm);
    const char *mp = test_shared_file("stories260K.bin"), *tp = test_shared_file("tok512.bin");
    if (!mp || !tp)
        return -1;
    Err err = {{0}};
    ck_assert(model_load(&tm->m, mp, &err) == 0);
    ck_assert(tokenizer_load(&tm->t, tp, 512, &err) == 0);
    return 0;
}

static void close_model(TestModel *tm)
{
    tokenizer_free(&tm->t);
    if (tm->image)
        mem_free(tm->image);
    else
        model_free(&tm->m);
    mem_free(tm->tok_image);
}

typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
} TestRun;

/* Loads the requests and encodes them; the run is not started. */
static void prepare_run(TestRun *tr, const TestModel *tm, const char *requests, const char *reserve)
{
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&tr->rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    cli_defaults(&tr->o);
    tr->o.reserve = reserve;
    ck_assert_msg(serving_run_init(&tr->run, &tm->m, &tm->t, &tr->o, &tr->rf, &err) == 0, "%s", err.msg);
}

static void run_to_end(TestRun *tr, FILE *log)
{
    Err err = {{0}};
    ck_assert_msg(serving_run(batching_chapter(), &tr->run, log, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tr->run.n_done, tr->run.n_reqs);
}

static void finish_run(TestRun *tr)
{
    serving_run_close(batching_chapter(), &tr->run);
    serving_run_free(&tr->run);
    request_file_free(&tr->rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    ck_assert_uint_eq(mem_current(MEM_KV_METADATA, MEM_HOST), 0);
}

static const BatchingState *state(const TestRun *tr) { return tr->run.chapter_ctx; }

/* Solo reference: chapter 1's loop on one prompt (recompute everything). */
static int solo_tokens(const Model *m, const Tokenizer *t, const char *prompt, int steps, int *out)
{
    Generation g;
    Err err = {{0}};
    ck_assert_msg(generation_init(&g, m, t, prompt, &err) == 0, "%s", err.msg);
    NaiveKv kv;
    ck_assert(naive_kv_init(&kv, &m->cfg, &err) == 0);
    SingleStreamKv strat = naive_strategy(&kv);
    ForwardState fs;
    ck_assert(forward_state_init(&fs, &m->cfg, m->cfg.seq_len, 1, &err) == 0);
    Sampler s;
    ck_assert(sampler_init(&s, m->cfg.vocab_size, 0.0f, 0.9f, 1, &err) == 0);
    ck_assert_msg(generate(&g, m, t, &s, &fs, &strat, steps, NULL, &err) == 0, "%s", err.msg);
    int n = g.n_tokens - g.n_prompt;
    memcpy(out, g.tokens + g.n_prompt, (size_t)n * sizeof(int));
    sampler_free(&s);
    forward_state_free(&fs);
    naive_kv_free(&kv);
    generation_free(&g);
    return n;
}

/* Solo tokens of every request of a run, computed once per model. */
typedef struct {
    int n_reqs;
    int *count;  /* [n_reqs] tokens generated */
    int *tokens; /* [n_reqs][seq_len] */
} SoloTokens;

static void solo_compute(SoloTokens *st, const TestModel *tm, const ServingRun *run)
{
    int seq_len = tm->m.cfg.seq_len;
    st->n_reqs = run->n_reqs;
    st->count = calloc((size_t)run->n_reqs, sizeof(int));
    st->tokens = calloc((size_t)run->n_reqs * (size_t)seq_len, sizeof(int));
    for (int i = 0; i < run->n_reqs; i++) {
        const RequestSpec *spec = run->reqs[i].spec;
        st->count[i] = solo_tokens(&tm->m, &tm->t, spec->prompt, spec->max_new_tokens,
                                   st->tokens + (size_t)i * (size_t)seq_len);
    }
}

static void solo_free(SoloTokens *st)
{
    free(st->count);
    free(st->tokens);
}

/* Every request that ran produced exactly its solo tokens. */
static void expect_solo(const SoloTokens *st, const TestRun *tr, const char *what)
{
    int seq_len = tr->run.model->cfg.seq_len;
    ck_assert_int_eq(st->n_reqs, tr->run.n_reqs);
    for (int i = 0; i < tr->run.n_reqs; i++) {
        const Request *r = &tr->run.reqs[i];
        if (r->finish == REQ_FINISH_REJECTED)
            continue;
        int n = st->count[i];
        ck_assert_msg(r->n_tokens - r->n_prompt == n, "%s: request %d made %d tokens, solo %d", what, i,
                      r->n_tokens - r->n_prompt, n);
        ck_assert_msg(memcmp(r->tokens + r->n_prompt, st->tokens + (size_t)i * (size_t)seq_len,
                             (size_t)n * sizeof(int)) == 0,
                      "%s: request %d differs from its solo run", what, i);
    }
}

static void expect_solo_tokens(const TestModel *tm, const TestRun *tr, const char *what)
{
    SoloTokens st;
    solo_compute(&st, tm, &tr->run);
    expect_solo(&st, tr, what);
    solo_free(&st);
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

static const char *const POLICIES[] = {"max", "request", "pow2", "grow"};

/* Runs `requests` under every policy with a budget of 1.5 of the largest
 * region (several batches; under grow, requeues) and checks the tokens. */
static long check_every_policy(const TestModel *tm, const char *requests, const char *what)
{
    long requeues = 0;
    SoloTokens solo = {0};
    for (int p = 0; p < 4; p++) {
        TestRun tr;
        prepare_run(&tr, tm, requests, POLICIES[p]);
        if (p == 0)
            solo_compute(&solo, tm, &tr.run);
        tr.o.kv_budget = (size_t)largest_region(&tr) * tr.run.kv_bytes_per_token * 3 / 2;
        run_to_end(&tr, NULL);
        char label[64];
        snprintf(label, sizeof label, "%s, --reserve %s", what, POLICIES[p]);
        expect_solo(&solo, &tr, label);
        expect_breakdown_sums_to_one(&tr.run);
        ck_assert_msg(state(&tr)->stats.batches >= 2, "%s: expected several batches", label);
        for (int i = 0; i < tr.run.n_reqs; i++)
            ck_assert(tr.run.reqs[i].admitted_step >= 0 && tr.run.reqs[i].finished_step >= tr.run.reqs[i].admitted_step);
        requeues += state(&tr)->stats.requeues;
        finish_run(&tr);
    }
    solo_free(&solo);
    return requeues;
}

static const char *MIXED = "40\ta\n6\tthe end\n62\tb\n12\tx y z\n30\tc\n62\tonce upon\n3\td\n50\tab\n";

START_TEST(every_policy_gives_solo_tokens_synthetic)
{
    TestModel tm;
    open_synthetic(&tm, GQA, 7); /* seed 7 stops some requests early (EOS) */
    long requeues = check_every_policy(&tm, MIXED, "GQA");
    close_model(&tm);
    open_synthetic(&tm, MHA, 3);
    requeues += check_every_policy(&tm, MIXED, "MHA");
    close_model(&tm);
    ck_assert_msg(requeues > 0, "the budgets should have forced some requeues under grow (recompute path untested)");
}
END_TEST

START_TEST(every_policy_gives_solo_tokens_stories260k)
{
    TestModel tm;
    if (open_stories260k(&tm)) {
        test_skip("every_policy_gives_solo_tokens_stories260k", "../shared/models is absent");
        return;
    }
    check_every_policy(&tm, "40\tOnce upon a time\n12\tThe cat sat\n60\tTom had a red ball.\n20\tLily\n"
                            "33\tThe sun was hot\n", "stories260K");
    close_model(&tm);
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
    open_synthetic(&tm, GQA, 3);
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
    close_model(&tm);
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
    open_synthetic(&tm, GQA, 3);
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
    close_model(&tm);
}
END_TEST

START_TEST(oversized_request_is_rejected)
{
    TestModel tm;
    open_synthetic(&tm, GQA, 3);
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
    ck_assert_int_eq(serving_run(batching_chapter(), &tr.run, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "holds no request") && strstr(err.msg, "64 positions"), "%s", err.msg);
    finish_run(&tr);
    close_model(&tm);
}
END_TEST

START_TEST(max_batch_limits_the_batch)
{
    TestModel tm;
    open_synthetic(&tm, GQA, 3);
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
    close_model(&tm);
}
END_TEST

/* ---------------------------------------------------------- accounting only */

/* The source material's case: a 13B model (40 layers, 40 heads of 128,
 * fp16: 819,200 B per position, 1,677,721,600 B for 2,048 positions) with
 * 48 GiB for K/V. 40 requests of 100 prompt tokens and 500 new ones, run
 * by the serving core's no-model loop (what kvsim does). */
static void simulate_13b(const char *reserve, ServingRun *run, Model *m, CliOptions *o)
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
    ck_assert_msg(serving_run_simulated(batching_chapter(), run, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
}

static void free_simulated(ServingRun *run)
{
    serving_run_close(batching_chapter(), run);
    serving_run_free(run);
}

START_TEST(accounting_only_13b_scale)
{
    Model m;
    CliOptions o;
    ServingRun run;
    /* max: 48 GiB / 1.5625 GiB = 30.72 -> batches of 30 and 10, 500 steps
     * each. Per request, positions held at step k are 100 + k, k = 0..499:
     * 50,000 + 124,750 = 174,750 of 2,048 x 500 = 1,024,000 reserved:
     * token states 17.07%. Final length 599 (the 600th token is never
     * fed): internal (2048 - 599) x 500 = 724,500; the rest, 124,750, was
     * reserved for tokens still to come. */
    simulate_13b("max", &run, &m, &o);
    ck_assert_int_eq(run.max_concurrent, 30);
    ck_assert_int_eq(run.step, 1000);
    double fr[4];
    kv_breakdown_fractions(&run.breakdown, fr);
    ck_assert_double_eq_tol(fr[0], 174750.0 / 1024000.0, 1e-12);
    ck_assert_double_eq_tol(fr[1], 124750.0 / 1024000.0, 1e-12);
    ck_assert_double_eq_tol(fr[2], 724500.0 / 1024000.0, 1e-12);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    free_simulated(&run);
    /* grow: first regions of 128 (100 + 1, rounded up), then 256, 512,
     * 1024: three moves per request copying 128 + 256 + 512 positions; all
     * 40 fit in one batch (40 x 1024 x 819,200 B = 31.25 GiB). */
    simulate_13b("grow", &run, &m, &o);
    const BatchingStats *s = &((const BatchingState *)run.chapter_ctx)->stats;
    ck_assert_int_eq(run.max_concurrent, 40);
    ck_assert_int_eq(s->requeues, 0);
    ck_assert_int_eq(s->grow_moves, 120);
    ck_assert_double_eq(s->grow_bytes_copied, 40.0 * 896 * 819200);
    ck_assert_uint_eq(mem_peak(MEM_KV, MEM_HOST), 0);
    expect_breakdown_sums_to_one(&run);
    free_simulated(&run);
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
    expect_one_line_error((const char *[]){"--requests", good, "--max-batch", "0", NULL}, "out of range");
    expect_one_line_error((const char *[]){"--requests", good, "--block-size", "16", NULL}, "unknown option");
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
    suite_add_tcase(s, program);
    return s;
}

REGISTER_SUITE(ch03)
