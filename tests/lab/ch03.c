/* Chapter 3 lab: the reservation policies, the first-fit arena, and the
 * admission of a batch, static or continuous (reserve_initial_tokens(),
 * kv_arena_alloc(), kv_arena_release(), batching_admit(): your
 * exercises/ch03/ under `make lab CH=3`).
 *
 * Every test builds its own synthetic model: nothing here needs a download,
 * and nothing depends on the other chapters' labs (the reference tokens come
 * from a plain contiguous cache written below). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "batching.h"
#include "lab/grading.h"
#include "generate.h"
#include "mem.h"
#include "ops.h"
#include "synth.h"

/* ---------------------------------------------------------- reservation */

START_TEST(lab_reserve_sizes)
{
    /* A request with 5 prompt tokens and max_new_tokens 48, seq_len 512. */
    static const struct {
        ReservePolicy policy;
        int n_tokens, max_tokens, seq_len, want;
        const char *hint;
    } cases[] = {
        {RESERVE_MAX, 5, 53, 512, 512, "max reserves the model's seq_len"},
        {RESERVE_REQUEST, 5, 53, 512, 53, "request reserves max_tokens (prompt + max_new_tokens)"},
        {RESERVE_REQUEST, 5, 513, 512, 512,
         "a request may hold seq_len + 1 tokens, but the last is never fed: no region needs more than seq_len"},
        {RESERVE_POW2, 5, 53, 512, 64, "pow2 rounds max_tokens up to a power of two"},
        {RESERVE_POW2, 5, 300, 300, 300, "pow2 never reserves more than seq_len"},
        {RESERVE_GROW, 5, 53, 512, 16, "grow starts at RESERVE_GROW_MIN_TOKENS at least"},
        {RESERVE_GROW, 16, 53, 512, 32, "grow holds n_tokens + 1, rounded up to a power of two"},
        {RESERVE_GROW, 40, 53, 512, 64, "grow holds n_tokens + 1, rounded up to a power of two"},
        {RESERVE_GROW, 40, 53, 48, 48, "grow never reserves more than seq_len"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = reserve_initial_tokens(cases[i].policy, cases[i].n_tokens, cases[i].max_tokens, cases[i].seq_len);
        ck_assert_msg(got == cases[i].want,
                      "reserve_initial_tokens(%s, n_tokens %d, max_tokens %d, seq_len %d): expected %d, got %d; "
                      "hint: %s",
                      reserve_policy_name(cases[i].policy), cases[i].n_tokens, cases[i].max_tokens, cases[i].seq_len,
                      cases[i].want, got, cases[i].hint);
    }
}
END_TEST

/* ---------------------------------------------------------- the arena */

static void expect_holes(const KvArena *a, const size_t *pairs, int n, const char *after)
{
    ck_assert_msg(a->n_holes == n, "after %s: expected %d holes, got %d; hint: holes stay in address order, and "
                  "touching holes are merged", after, n, a->n_holes);
    size_t free_bytes = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(a->holes[i].offset == pairs[2 * i] && a->holes[i].bytes == pairs[2 * i + 1],
                      "after %s: expected hole %d at [%zu, +%zu), got [%zu, +%zu); hint: a region is cut from the "
                      "START of the first hole that is large enough", after, i, pairs[2 * i], pairs[2 * i + 1],
                      a->holes[i].offset, a->holes[i].bytes);
        free_bytes += pairs[2 * i + 1];
    }
    ck_assert_msg(a->free_bytes == free_bytes, "after %s: expected free_bytes %zu, got %zu; hint: keep free_bytes "
                  "equal to the sum of the holes", after, free_bytes, a->free_bytes);
}

static void expect_alloc(KvArena *a, size_t bytes, long want)
{
    size_t got = 0;
    int rc = kv_arena_alloc(a, bytes, &got);
    if (want < 0) {
        ck_assert_msg(rc == -1, "kv_arena_alloc(%zu): expected -1 (no hole is large enough), got %d at %zu", bytes,
                      rc, got);
        return;
    }
    ck_assert_msg(rc == 0, "kv_arena_alloc(%zu): expected a region at %ld, got -1; hint: look at every hole, in "
                  "address order", bytes, want);
    ck_assert_msg(got == (size_t)want, "kv_arena_alloc(%zu): expected offset %ld, got %zu; hint: FIRST fit takes the "
                  "lowest hole that holds the request, not the best one", bytes, want, got);
}

static void expect_release(KvArena *a, size_t offset, size_t bytes)
{
    Err err = {{0}};
    ck_assert_msg(kv_arena_release(a, offset, bytes, &err) == 0, "kv_arena_release(%zu, %zu) failed: %s", offset,
                  bytes, err.msg);
}

START_TEST(lab_first_fit)
{
    KvArena a;
    Err err = {{0}};
    ck_assert(kv_arena_init(&a, 100, 8, &err) == 0);
    expect_alloc(&a, 10, 0);
    expect_alloc(&a, 20, 10);
    expect_alloc(&a, 30, 30);
    expect_holes(&a, (size_t[]){60, 40}, 1, "three kv_arena_alloc() of 10, 20, 30");
    a.holes[0] = (KvRange){10, 20}; /* pretend [10, 30) was freed */
    a.holes[1] = (KvRange){60, 40};
    a.n_holes = 2;
    a.free_bytes = 60;
    expect_alloc(&a, 25, 60); /* too big for the first hole */
    expect_holes(&a, (size_t[]){10, 20, 85, 15}, 2, "kv_arena_alloc(25) from the hole [60, +40)");
    expect_alloc(&a, 15, 10); /* both holes fit: the first one wins */
    expect_holes(&a, (size_t[]){25, 5, 85, 15}, 2, "kv_arena_alloc(15), which the first hole holds");
    expect_alloc(&a, 5, 25);  /* an exact fit empties the hole */
    expect_holes(&a, (size_t[]){85, 15}, 1, "kv_arena_alloc() of an exact fit");
    expect_alloc(&a, 16, -1);
    kv_arena_free(&a);
}
END_TEST

START_TEST(lab_coalesce)
{
    KvArena a;
    Err err = {{0}};
    ck_assert(kv_arena_init(&a, 50, 8, &err) == 0);
    /* Five regions of 10 fill it: no hole left (set here, not with your
     * kv_arena_alloc(): this test is about kv_arena_release() alone). */
    a.n_holes = 0;
    a.free_bytes = 0;
    expect_release(&a, 10, 10);
    expect_holes(&a, (size_t[]){10, 10}, 1, "kv_arena_release() of [10, +10) in a full arena");
    expect_release(&a, 30, 10);
    expect_holes(&a, (size_t[]){10, 10, 30, 10}, 2, "kv_arena_release() of [30, +10), which touches no hole");
    expect_release(&a, 0, 10);
    expect_holes(&a, (size_t[]){0, 20, 30, 10}, 2, "kv_arena_release() of [0, +10), which touches the hole after it");
    expect_release(&a, 40, 10);
    expect_holes(&a, (size_t[]){0, 20, 30, 20}, 2, "kv_arena_release() of [40, +10), which touches the hole before it");
    expect_release(&a, 20, 10);
    expect_holes(&a, (size_t[]){0, 50}, 1, "kv_arena_release() of [20, +10), which touches holes on both sides");
    kv_arena_free(&a);
}
END_TEST

START_TEST(lab_fragmentation_refusal)
{
    KvArena a;
    Err err = {{0}};
    ck_assert(kv_arena_init(&a, 10240, 8, &err) == 0);
    for (int i = 0; i < 5; i++)
        expect_alloc(&a, 2048, 2048 * i);
    expect_release(&a, 2048, 2048);
    expect_release(&a, 6144, 2048);
    ck_assert_msg(a.free_bytes == 4096 && kv_arena_largest_hole(&a) == 2048,
                  "expected 4096 B free in two holes of 2048, got %zu B free, largest hole %zu; hint: "
                  "kv_arena_alloc() takes a region's bytes off free_bytes, kv_arena_release() gives them back",
                  a.free_bytes, kv_arena_largest_hole(&a));
    expect_alloc(&a, 3072, -1); /* 4 KiB free, but no hole of 3 KiB: external fragmentation */
    expect_release(&a, 4096, 2048);
    expect_alloc(&a, 3072, 2048); /* one hole of 6 KiB now */
    kv_arena_free(&a);
}
END_TEST

/* ---------------------------------------------------------- batching */

static const ModelConfig GQA = {32, 64, 2, 4, 2, 400, 64}; /* 256 B per position */

typedef struct {
    Model m;
    Tokenizer t;
    void *image, *tok_image;
} LabModel;

static void open_model(LabModel *lm, unsigned long long seed)
{
    SynthSpec spec = {.cfg = GQA, .shared_classifier = 0, .seed = seed};
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &lm->image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(GQA.vocab_size, &lm->tok_image, &tok_bytes, &err) == 0);
    ck_assert(model_open_image(&lm->m, lm->image, bytes, &err) == 0);
    ck_assert(tokenizer_open_image(&lm->t, lm->tok_image, tok_bytes, GQA.vocab_size, &err) == 0);
}

static void close_model(LabModel *lm)
{
    tokenizer_free(&lm->t);
    mem_free(lm->image);
    mem_free(lm->tok_image);
}

/* One in-process run of chapter 3, as its program steps it. */
typedef struct {
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    BatchingState *state;
} LabRun;

/* Runs chapter 3 in-process with at most @p max_batch requests per batch
 * (0: the default); returns 0, or -1 with the reason in err. */
static int run_chapter_batch_of(const LabModel *lm, const char *requests, const char *reserve, const char *batching,
                                size_t budget, int max_batch, LabRun *lr, Err *err)
{
    ck_assert(request_file_parse(&lr->rf, requests, strlen(requests), "lab", err) == 0);
    cli_defaults(&lr->o);
    lr->o.reserve = reserve;
    lr->o.batching = batching;
    lr->o.kv_budget = budget;
    if (max_batch > 0)
        lr->o.max_batch = max_batch;
    ck_assert(serving_run_init(&lr->run, &lm->m, &lm->t, &lr->o, &lr->rf, err) == 0);
    return batching_serve(&lr->run, &lr->state, NULL, err);
}

static int run_chapter_batching(const LabModel *lm, const char *requests, const char *reserve, const char *batching,
                                size_t budget, LabRun *lr, Err *err)
{
    return run_chapter_batch_of(lm, requests, reserve, batching, budget, 0, lr, err);
}

static int run_chapter(const LabModel *lm, const char *requests, const char *reserve, size_t budget, LabRun *lr,
                       Err *err)
{
    return run_chapter_batching(lm, requests, reserve, "static", budget, lr, err);
}

static void end_chapter(LabRun *lr)
{
    batching_close(lr->state);
    serving_run_free(&lr->run);
    request_file_free(&lr->rf);
}

START_TEST(lab_admission_in_file_order)
{
    /* Under request, "a" (2 prompt tokens) with max_new_tokens 4, 8, 12
     * reserves 6, 10 and 14 positions. A budget of 20 positions holds the
     * first two (16); the third waits for the next batch, which starts when
     * the second finishes (after step 7). */
    LabModel lm;
    open_model(&lm, 3);
    LabRun lr;
    ServingRun *run = &lr.run;
    Err err = {{0}};
    int rc = run_chapter(&lm, "4\ta\n8\tb\n12\tc\n", "request", 20 * 256, &lr, &err);
    ck_assert_msg(rc == 0, "the run failed: %s; hint: batching_admit() must admit at least the first waiting "
                  "request into an empty arena", err.msg);
    static const long want[] = {0, 0, 8};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(run->reqs[i].admitted_step == want[i],
                      "request %d: expected to be admitted at step %ld, got %ld; hint: batching_admit() admits in file order while "
                      "the reservation fits, stop at the first that does not, and start the next batch only when "
                      "the current one has finished", i, want[i], run->reqs[i].admitted_step);
    ck_assert_msg(run->max_concurrent == 2, "expected 2 requests at once, got %d", run->max_concurrent);
    end_chapter(&lr);
    close_model(&lm);
}
END_TEST

START_TEST(lab_admission_skips_rejected)
{
    /* Under request, "b" with max_new_tokens 30 would reserve 32 positions,
     * more than the whole budget of 20: it is rejected before the first
     * step (its phase is REQ_DONE). "a" and "c" reserve 6 each, so both
     * start in the first batch; an admission that tries the rejected
     * request stops there, and "c" waits for the next batch (step 4). */
    LabModel lm;
    open_model(&lm, 3);
    LabRun lr;
    ServingRun *run = &lr.run;
    Err err = {{0}};
    int rc = run_chapter(&lm, "4\ta\n30\tb\n4\tc\n", "request", 20 * 256, &lr, &err);
    ck_assert_msg(rc == 0, "the run failed: %s; hint: batching_admit() must admit at least the first waiting "
                  "request into an empty arena", err.msg);
    ck_assert_msg(run->reqs[1].finish == REQ_FINISH_REJECTED, "expected request 1 to be rejected (finish %d)",
                  (int)run->reqs[1].finish);
    static const long want[] = {0, -1, 0};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(run->reqs[i].admitted_step == want[i],
                      "request %d: expected to be admitted at step %ld, got %ld; hint: batching_admit() looks only "
                      "at WAITING requests: a rejected one (REQ_DONE) is not in the queue and must not stop it",
                      i, want[i], run->reqs[i].admitted_step);
    end_chapter(&lr);
    close_model(&lm);
}
END_TEST

START_TEST(lab_continuous_admission)
{
    /* The same admission function, called at every step (--batching
     * continuous). Under request, max_new_tokens 4, 8, 4 reserve 6, 10 and
     * 6 positions; a budget of 16 holds the first two. The first finishes
     * at step 3 and frees its region at once, so the third joins the
     * running batch at step 4 (a static batch would make it wait for step
     * 8). */
    LabModel lm;
    open_model(&lm, 3);
    LabRun lr;
    ServingRun *run = &lr.run;
    Err err = {{0}};
    int rc = run_chapter_batching(&lm, "4\ta\n8\tb\n4\tc\n", "request", "continuous", 16 * 256, &lr, &err);
    ck_assert_msg(rc == 0, "the run failed: %s; hint: batching_admit() must admit at least the first waiting "
                  "request into an empty arena", err.msg);
    static const long want[] = {0, 0, 4};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(run->reqs[i].admitted_step == want[i],
                      "--batching continuous, request %d: expected to be admitted at step %ld, got %ld; hint: "
                      "batching_admit() is called at every step with the running requests already in b->batch: "
                      "admit while b->n_batch < b->max_batch, and look at every WAITING request in file order",
                      i, want[i], run->reqs[i].admitted_step);
    ck_assert_msg(run->step == 8, "expected 8 steps, got %ld", run->step);
    end_chapter(&lr);
    close_model(&lm);
}
END_TEST

START_TEST(lab_admission_never_overtakes)
{
    /* Under request, "a", "b" and "c" (2 prompt tokens each) reserve 10, 14
     * and 4 positions. A budget of 20 holds a; b does not fit beside it
     * (10 left), c would. First come, first served: c waits behind b, and
     * both start in the next batch. */
    LabModel lm;
    open_model(&lm, 3);
    LabRun lr;
    ServingRun *run = &lr.run;
    Err err = {{0}};
    int rc = run_chapter(&lm, "8\ta\n12\tb\n2\tc\n", "request", 20 * 256, &lr, &err);
    ck_assert_msg(rc == 0, "the run failed: %s; hint: batching_admit() must admit at least the first waiting "
                  "request into an empty arena", err.msg);
    const Request *b = &run->reqs[1], *c = &run->reqs[2];
    ck_assert_msg(c->admitted_step >= b->admitted_step && b->admitted_step > 0,
                  "expected request 2 (4 positions) to wait behind request 1 (14 positions, which does not fit at "
                  "step 0), got request 1 admitted at step %ld and request 2 at step %ld; hint: batching_admit() "
                  "stops at the first request whose reservation does not fit: nobody overtakes it, or a long "
                  "request could wait forever", b->admitted_step, c->admitted_step);
    end_chapter(&lr);
    close_model(&lm);
}
END_TEST

START_TEST(lab_admission_respects_max_batch)
{
    /* Room for all four under request, but at most two per batch: 0 and 1
     * first, 2 and 3 when they have finished. */
    LabModel lm;
    open_model(&lm, 3);
    LabRun lr;
    ServingRun *run = &lr.run;
    Err err = {{0}};
    int rc = run_chapter_batch_of(&lm, "8\ta\n8\tb\n8\tc\n8\td\n", "request", "static", 64 * 256, 2, &lr, &err);
    ck_assert_msg(rc == 0, "the run failed: %s; hint: batching_admit() must admit at least the first waiting "
                  "request into an empty arena", err.msg);
    ck_assert_msg(run->max_concurrent == 2 && run->reqs[2].admitted_step > 0,
                  "--max-batch 2: expected 2 requests at once and request 2 in the second batch, got %d at once, "
                  "request 2 admitted at step %ld; hint: batching_admit() admits while b->n_batch < b->max_batch",
                  run->max_concurrent, run->reqs[2].admitted_step);
    end_chapter(&lr);
    close_model(&lm);
}
END_TEST

/* The reference: one request at a time with a plain contiguous cache. */
typedef struct {
    ModelConfig cfg;
    float *keys, *values; /* [layers][seq_len][kv_dim] */
    int stored;           /* positions whose K/V are in the cache */
} RefCache;

static float *ref_row(float *base, const ModelConfig *c, int layer, int pos)
{
    return base + ((size_t)layer * c->seq_len + (size_t)pos) * (size_t)model_kv_dim(c);
}

static void ref_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    RefCache *rc = ctx;
    size_t n = (size_t)model_kv_dim(&rc->cfg) * sizeof(float);
    memcpy(ref_row(rc->keys, &rc->cfg, layer, e->pos), k, n);
    memcpy(ref_row(rc->values, &rc->cfg, layer, e->pos), v, n);
}

static void ref_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *sc)
{
    RefCache *rc = ctx;
    const ModelConfig *c = &rc->cfg;
    int off = (head / model_kv_mul(c)) * model_head_dim(c);
    attention_reference(out, q, ref_row(rc->keys, c, layer, 0) + off, ref_row(rc->values, c, layer, 0) + off,
                        e->pos + 1, model_kv_dim(c), model_head_dim(c), sc);
}

static int ref_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    RefCache *rc = ctx;
    (void)err;
    *cached = rc->stored;
    rc->stored = n_tokens;
    return 0;
}

static int reference_tokens(const LabModel *lm, const char *prompt, int steps, int *out)
{
    const ModelConfig *c = &lm->m.cfg;
    size_t floats = (size_t)c->n_layers * c->seq_len * model_kv_dim(c);
    RefCache rc = {.cfg = *c, .keys = calloc(floats, sizeof(float)), .values = calloc(floats, sizeof(float))};
    SingleStreamKv kv = {.seam = {.ctx = &rc, .store = ref_store, .attend = ref_attend}, .prepare = ref_prepare};
    Generation g;
    ForwardState fs;
    Sampler s;
    Err err = {{0}};
    ck_assert(generation_init(&g, &lm->m, &lm->t, prompt, &err) == 0);
    ck_assert(forward_state_init(&fs, c, c->seq_len, 1, &err) == 0);
    ck_assert(sampler_init(&s, c->vocab_size, 0.0f, 0.9f, 1, &err) == 0);
    ck_assert_msg(generate(&g, &lm->m, &lm->t, &s, &fs, &kv, steps, NULL, &err) == 0, "%s", err.msg);
    int n = g.n_tokens - g.n_prompt;
    memcpy(out, g.tokens + g.n_prompt, (size_t)n * sizeof(int));
    sampler_free(&s);
    forward_state_free(&fs);
    generation_free(&g);
    free(rc.keys);
    free(rc.values);
    return n;
}

START_TEST(lab_same_tokens_every_policy)
{
    static const char *const policies[] = {"max", "request", "pow2", "grow"};
    /* Budgets of a few regions: several batches under every policy, and
     * regions that must move (and requests that must be requeued) under
     * grow. Seed 7 also stops some requests early. */
    static const size_t budgets[] = {160 * 256, 100 * 256, 100 * 256, 100 * 256};
    const char *requests = "40\ta\n6\tthe end\n62\tb\n12\tx y z\n30\tc\n62\tonce upon\n3\td\n50\tab\n";
    LabModel lm;
    open_model(&lm, 7);
    int want[64];
    for (int p = 0; p < 4; p++) {
        LabRun lr;
        ServingRun *run = &lr.run;
        Err err = {{0}};
        int rc = run_chapter(&lm, requests, policies[p], budgets[p], &lr, &err);
        ck_assert_msg(rc == 0, "--reserve %s: the run failed: %s; hint: check the reservation size, first fit, "
                      "the hole merging and the admission loop", policies[p], err.msg);
        for (int i = 0; i < run->n_reqs; i++) {
            const Request *r = &run->reqs[i];
            int n = reference_tokens(&lm, r->spec->prompt, r->spec->max_new_tokens, want);
            int got = r->n_tokens - r->n_prompt;
            ck_assert_msg(got == n && memcmp(r->tokens + r->n_prompt, want, (size_t)n * sizeof(int)) == 0,
                          "--reserve %s, request %d: expected the %d tokens of its solo run, got %d different ones; "
                          "hint: every request must keep its own region for all its positions", policies[p], i, n,
                          got);
        }
        ck_assert_msg(run->max_concurrent >= 2, "--reserve %s: expected at least 2 requests at once, got %d",
                      policies[p], run->max_concurrent);
        end_chapter(&lr);
    }
    close_model(&lm);
}
END_TEST

/* What the admission tests exercise: they run chapter 3 whole. */
#define ADMISSION "batching_admit(), in a whole run of chapter 3 (which needs your arena and reserve_initial_tokens(): " \
                  "pass their tests first)"

Suite *lab_suite(void)
{
    Suite *s = suite_create("lab ch03");
    lab_add_test(s, lab_reserve_sizes, LAB_UNIT_S, 1, "reserve_initial_tokens()");
    lab_add_test(s, lab_first_fit, LAB_UNIT_S, 1, "kv_arena_alloc()");
    lab_add_test(s, lab_coalesce, LAB_UNIT_S, 1, "kv_arena_release()");
    lab_add_test(s, lab_fragmentation_refusal, LAB_UNIT_S, 1, "kv_arena_alloc() and kv_arena_release()");
    lab_add_test(s, lab_admission_in_file_order, LAB_RUN_S, 1, ADMISSION);
    lab_add_test(s, lab_admission_skips_rejected, LAB_RUN_S, 1, ADMISSION);
    lab_add_test(s, lab_continuous_admission, LAB_RUN_S, 1, ADMISSION);
    lab_add_test(s, lab_admission_never_overtakes, LAB_RUN_S, 1, ADMISSION);
    lab_add_test(s, lab_admission_respects_max_batch, LAB_RUN_S, 1, ADMISSION);
    lab_add_test(s, lab_same_tokens_every_policy, LAB_RUN_S, 2,
                 "chapter 3 whole, with your reserve_initial_tokens(), kv_arena_alloc(), kv_arena_release() and "
                 "batching_admit()");
    return s;
}
