/* The serving loop shared by chapters 3 and 4, driven by a deliberately
 * simple chapter (every request admitted at once, each with a full-length
 * contiguous cache); and request files. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "mem.h"
#include "naive.h"
#include "ops.h"
#include "serving.h"
#include "suites.h"
#include "synth.h"

/* ---------------------------------------------------------- observers */

typedef struct {
    char calls[16]; /* the order the observers were called in, one letter each */
    int n_calls;
    int freed;      /* contexts freed by the run */
} ObserverLog;

typedef struct {
    ObserverLog *log;
    char name;
} Observer;

static void note_call(void *ctx, const ServingRun *run)
{
    (void)run;
    Observer *o = ctx;
    o->log->calls[o->log->n_calls++] = o->name;
}

static void free_observer(void *ctx)
{
    Observer *o = ctx;
    o->log->freed++;
    free(o);
}

static Observer *observer(ObserverLog *log, char name)
{
    Observer *o = malloc(sizeof *o);
    *o = (Observer){log, name};
    return o;
}

/* Observers are called newest first; the run frees those it owns (added
 * with a free function), also the one it refuses when full, and never one
 * its adder keeps or took off. */
START_TEST(observers_newest_first_one_ownership)
{
    ServingRun run;
    memset(&run, 0, sizeof run);
    ObserverLog log = {{0}, 0, 0};
    Observer kept = {&log, 'k'};
    Err err = {{0}};
    ck_assert_int_eq(serving_add_observer(&run, note_call, observer(&log, 'a'), free_observer, &err), 0);
    ck_assert_int_eq(serving_add_observer(&run, note_call, &kept, NULL, &err), 0);
    ck_assert_int_eq(serving_add_observer(&run, note_call, observer(&log, 'b'), free_observer, &err), 0);
    serving_step_finished(&run);
    ck_assert_str_eq(log.calls, "bka");
    serving_remove_observer(&run, &kept);
    serving_step_finished(&run);
    ck_assert_str_eq(log.calls, "bkaba");
    for (int i = run.n_observers; i < SERVING_MAX_OBSERVERS; i++)
        ck_assert_int_eq(serving_add_observer(&run, note_call, observer(&log, 'x'), free_observer, &err), 0);
    ck_assert_int_eq(serving_add_observer(&run, note_call, observer(&log, 'y'), free_observer, &err), -1);
    ck_assert_msg(strstr(err.msg, "observers"), "%s", err.msg);
    ck_assert_int_eq(log.freed, 1); /* the refused one, at once */
    serving_run_free(&run);
    ck_assert_int_eq(log.freed, 1 + SERVING_MAX_OBSERVERS);
    ck_assert_int_eq(run.n_observers, 0);
}
END_TEST

/* ---------------------------------------------------------- request files */

static void expect_parse_error(const char *text, const char *word)
{
    RequestFile rf;
    Err err = {{0}};
    ck_assert_int_eq(request_file_parse(&rf, text, strlen(text), "reqs.tsv", &err), -1);
    ck_assert_msg(strstr(err.msg, word) != NULL, "message '%s' lacks '%s'", err.msg, word);
}

START_TEST(request_file_format)
{
    const char *text = "# comment\n\n12\tOnce upon a time\r\n  # indented comment\n3\tThe cat\tsat\n   \n";
    RequestFile rf;
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&rf, text, strlen(text), "t", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rf.count, 2);
    ck_assert_int_eq(rf.items[0].id, 0);
    ck_assert_int_eq(rf.items[0].line, 3);
    ck_assert_int_eq(rf.items[0].max_new_tokens, 12);
    ck_assert_str_eq(rf.items[0].prompt, "Once upon a time");
    ck_assert_int_eq(rf.items[1].id, 1);
    ck_assert_int_eq(rf.items[1].line, 5);
    ck_assert_str_eq(rf.items[1].prompt, "The cat\tsat"); /* only the first tab separates */
    request_file_free(&rf);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(request_file_errors)
{
    expect_parse_error("12 Once upon a time\n", "reqs.tsv:1: expected");
    expect_parse_error("# ok\n5\tfine\nten\tstory\n", "reqs.tsv:3:");
    expect_parse_error("0\tzero tokens\n", "outside");
    expect_parse_error("-4\tnegative\n", "outside");
    expect_parse_error("99999999\thuge\n", "outside");
    expect_parse_error("7\t\n", "prompt is empty");
    expect_parse_error("# only comments\n\n", "no requests");
    expect_parse_error("", "no requests");
    RequestFile rf;
    Err err = {{0}};
    ck_assert_int_eq(request_file_load(&rf, "/nonexistent/reqs.tsv", &err), -1);
    ck_assert_msg(strstr(err.msg, "cannot open"), "%s", err.msg);
    ck_assert_int_eq(request_file_load(&rf, "/tmp", &err), -1);
}
END_TEST

START_TEST(shipped_request_files_parse)
{
    const char *files[] = {"data/requests-short.tsv", "data/requests-long.tsv", "data/requests-mixed.tsv"};
    for (size_t i = 0; i < 3; i++) {
        RequestFile rf;
        Err err = {{0}};
        ck_assert_msg(request_file_load(&rf, files[i], &err) == 0, "%s", err.msg);
        ck_assert_int_ge(rf.count, 5);
        request_file_free(&rf);
    }
}
END_TEST

/* ---------------------------------------------------------- breakdown */

START_TEST(breakdown_by_hand)
{
    /* A request reserves 10 bytes, fills 2, 4, 6 over three steps, ends at
     * 6 bytes, and keeps its reservation one more step (static batching).
     * token states 2+4+6+6 = 18; never used (10-6) x 4 steps = 16;
     * reserved for future = 40 - 18 - 16 = 6 (4 then 2 then 0 then 0). */
    KvReservationTrack t = {0};
    KvBreakdown b = {0};
    kv_track_set_reserved(&t, 10);
    kv_track_step(&t, 2);
    kv_track_step(&t, 4);
    kv_track_step(&t, 6);
    kv_track_step(&t, 6);
    kv_track_close(&t, 6, &b);
    ck_assert_double_eq(b.token_states, 18);
    ck_assert_double_eq(b.internal_fragmentation, 16);
    ck_assert_double_eq(b.reserved, 6);
    b.external_fragmentation = 20;
    double fr[4];
    kv_breakdown_fractions(&b, fr);
    ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-12);
    ck_assert_double_eq_tol(fr[3], 20.0 / 60.0, 1e-12);
    ck_assert_int_eq(t.reserved, 0);
}
END_TEST

START_TEST(breakdown_growth)
{
    /* Grows 4 -> 8 -> 16 bytes, ends at 9: only the last size (16) was
     * ever too big, for the 2 steps it was held. */
    KvReservationTrack t = {0};
    KvBreakdown b = {0};
    kv_track_set_reserved(&t, 4);
    kv_track_step(&t, 3);
    kv_track_set_reserved(&t, 8);
    kv_track_step(&t, 6);
    kv_track_set_reserved(&t, 16);
    kv_track_step(&t, 9);
    kv_track_step(&t, 9);
    kv_track_close(&t, 9, &b);
    ck_assert_double_eq(b.token_states, 27);
    ck_assert_double_eq(b.internal_fragmentation, 14);
    ck_assert_double_eq(b.reserved, (4 + 8 + 16 + 16) - 27 - 14);
}
END_TEST

/* ---------------------------------------------------------- the loop */

/* The simplest serving chapter: every request admitted at step 0, each with
 * its own [layers][seq_len][kv_dim] cache, freed when it finishes. */
typedef struct {
    ModelConfig cfg;
    float **keys, **values; /* [n_reqs] -> [layers][seq_len][kv_dim] */
    int n;
} AllAtOnce;

static float *kv_row(float *base, const ModelConfig *c, int layer, int pos)
{
    return base + ((size_t)layer * c->seq_len + (size_t)pos) * (size_t)model_kv_dim(c);
}

static void all_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    AllAtOnce *s = ctx;
    size_t n = (size_t)model_kv_dim(&s->cfg) * sizeof(float);
    memcpy(kv_row(s->keys[e->seq], &s->cfg, layer, e->pos), k, n);
    memcpy(kv_row(s->values[e->seq], &s->cfg, layer, e->pos), v, n);
}

static void all_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *sc)
{
    AllAtOnce *s = ctx;
    const ModelConfig *c = &s->cfg;
    int off = (head / model_kv_mul(c)) * model_head_dim(c);
    attention_reference(out, q, kv_row(s->keys[e->seq], c, layer, 0) + off,
                        kv_row(s->values[e->seq], c, layer, 0) + off, e->pos + 1, model_kv_dim(c),
                        model_head_dim(c), sc);
}

static AllAtOnce *all_open(ServingRun *run, Err *err)
{
    AllAtOnce *s = calloc(1, sizeof *s);
    s->cfg = run->model->cfg;
    s->n = run->n_reqs;
    s->keys = calloc((size_t)s->n, sizeof(float *));
    s->values = calloc((size_t)s->n, sizeof(float *));
    int max_tokens = 0;
    for (int i = 0; i < run->n_reqs; i++)
        max_tokens += run->reqs[i].n_prompt + 1;
    ck_assert_msg(serving_open_steps(run, max_tokens, run->n_reqs, err) == 0, "%s", err->msg);
    return s;
}

static void all_close(AllAtOnce *s)
{
    for (int i = 0; i < s->n; i++) {
        mem_free(s->keys[i]);
        mem_free(s->values[i]);
    }
    free(s->keys);
    free(s->values);
    free(s);
}

static int all_schedule(AllAtOnce *s, ServingRun *run, Err *err)
{
    size_t floats = (size_t)s->cfg.n_layers * s->cfg.seq_len * model_kv_dim(&s->cfg);
    for (int i = 0; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        if (r->phase == REQ_WAITING) {
            s->keys[i] = mem_alloc_array(MEM_KV, floats, sizeof(float));
            s->values[i] = mem_alloc_array(MEM_KV, floats, sizeof(float));
            kv_track_set_reserved(&r->kv, 2 * floats * sizeof(float));
            serving_admit(run, r);
        }
        if (r->phase == REQ_RUNNING && serving_feed(run, r, err))
            return -1;
    }
    return 0;
}

static void all_finished(AllAtOnce *s, ServingRun *run, Request *r)
{
    kv_track_close(&r->kv, (size_t)r->n_cached * run->kv_bytes_per_token, &run->breakdown);
    mem_free(s->keys[r->index]);
    mem_free(s->values[r->index]);
    s->keys[r->index] = s->values[r->index] = NULL;
}

/* One step of this test's chapter, written as the chapters write theirs:
 * it exercises the shared step functions without either chapter. */
static int all_step(AllAtOnce *s, ServingRun *run, Err *err)
{
    if (!serving_step_begin(run))
        return 0;
    if (all_schedule(s, run, err))
        return -1;
    KvSeam seam = {.ctx = s, .store = all_store, .attend = all_attend};
    if (serving_step_forward(run, &seam, err))
        return -1;
    serving_step_sample(run);
    serving_account_default(run);
    int n = serving_step_finished(run);
    for (int i = 0; i < n; i++)
        all_finished(s, run, &run->reqs[run->finished_now[i]]);
    serving_step_end(run);
    return 0;
}

static void check_against_solo(const Model *m, const Tokenizer *t, const char *requests)
{
    RequestFile rf;
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    CliOptions o;
    cli_defaults(&o);
    ServingRun run;
    ck_assert_msg(serving_run_init(&run, m, t, &o, &rf, &err) == 0, "%s", err.msg);
    AllAtOnce *s = all_open(&run, &err);
    while (serving_unfinished(&run))
        ck_assert_msg(all_step(s, &run, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(run.n_done, rf.count);
    ck_assert_int_eq(run.max_concurrent, rf.count);
    int *want = malloc((size_t)m->cfg.seq_len * sizeof(int));
    for (int i = 0; i < run.n_reqs; i++) {
        Request *r = &run.reqs[i];
        int n = test_solo_tokens(m, t, rf.items[i].prompt, rf.items[i].max_new_tokens, want);
        ck_assert_int_eq(r->n_tokens - r->n_prompt, n);
        ck_assert_msg(memcmp(r->tokens + r->n_prompt, want, (size_t)n * sizeof(int)) == 0,
                      "request %d differs from its solo run", i);
        ck_assert_int_eq(r->admitted_step, 0);
    }
    double fr[4];
    kv_breakdown_fractions(&run.breakdown, fr);
    ck_assert_double_eq_tol(fr[0] + fr[1] + fr[2] + fr[3], 1.0, 1e-9);
    ck_assert(fr[0] > 0 && fr[2] > 0);
    free(want);
    all_close(s);
    serving_run_free(&run);
    request_file_free(&rf);
    ck_assert_int_eq(mem_current(MEM_KV, MEM_HOST), 0);
}

START_TEST(batched_equals_solo_synthetic)
{
    ModelConfig cfg = {48, 96, 3, 6, 2, 400, 64};
    SynthSpec spec = {.cfg = cfg, .shared_classifier = 0, .seed = 11};
    void *image, *tok_image;
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &image, &bytes, &err) == 0);
    ck_assert(synth_tokenizer_image(cfg.vocab_size, &tok_image, &tok_bytes, &err) == 0);
    Model m;
    Tokenizer t;
    ck_assert_msg(model_open_image(&m, image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(&t, tok_image, tok_bytes, cfg.vocab_size, &err) == 0, "%s", err.msg);
    check_against_solo(&m, &t, "5\tab\n30\tthe end of it\n12\tx\n70\tlong enough to reach seq len\n");
    tokenizer_free(&t);
    mem_free(tok_image);
    mem_free(image);
}
END_TEST

START_TEST(batched_equals_solo_stories260k)
{
    const char *mp = test_shared_file("stories260K.bin"), *tp = test_shared_file("tok512.bin");
    if (!mp || !tp) {
        test_skip("batched_equals_solo_stories260k", TEST_NOT_FOUND("stories260K.bin or tok512.bin"));
        return;
    }
    Model m;
    Tokenizer t;
    Err err = {{0}};
    ck_assert(model_load(&m, mp, &err) == 0);
    ck_assert(tokenizer_load(&t, tp, 512, &err) == 0);
    check_against_solo(&m, &t, "40\tOnce upon a time\n12\tThe cat sat\n60\tTom had a red ball.\n");
    tokenizer_free(&t);
    model_free(&m);
}
END_TEST

Suite *suite_serving(void)
{
    Suite *s = suite_create("serving");
    TCase *tc = tcase_create("serving");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, observers_newest_first_one_ownership);
    tcase_add_test(tc, request_file_format);
    tcase_add_test(tc, request_file_errors);
    tcase_add_test(tc, shipped_request_files_parse);
    tcase_add_test(tc, breakdown_by_hand);
    tcase_add_test(tc, breakdown_growth);
    tcase_add_test(tc, batched_equals_solo_synthetic);
    tcase_add_test(tc, batched_equals_solo_stories260k);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(serving)
