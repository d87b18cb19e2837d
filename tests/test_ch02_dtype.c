/* Chapter 2 with smaller entries (--kv-dtype, the extension in
 * chapters/ch02-kvcache/kvcache_dtype.c): every step's logits are, bit for
 * bit, those of a plain f32 cache holding the values the typed rows hold,
 * under both allocation policies; the memory table and the ledger count
 * the stored bytes, scales included; f32 stays the core. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate.h"
#include "helpers.h"
#include "kv_dtype.h"
#include "kvcache_dtype.h"
#include "suites.h"

static const KvDtype TYPES[] = {KV_DTYPE_FP16, KV_DTYPE_BF16, KV_DTYPE_INT8, KV_DTYPE_FP8_E4M3, KV_DTYPE_FP8_E5M2};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

/* GQA, multi-query, head_dim 16, head_dim 10 with a seq_len that is not a
 * power of two (chapter 2's own shapes, tests/test_ch02.c). */
static const ModelConfig SHAPES[] = {
    {32, 64, 2, 4, 2, 400, 64},
    {48, 96, 3, 6, 1, 420, 80},
    {64, 128, 2, 4, 4, 512, 96},
    {40, 64, 2, 4, 2, 400, 50},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* ------------------------------------------------------------ logits, bit for bit */

/* The logits after each step, read when the next step is prepared (they
 * are still in the forward state then), and after the last. */
typedef struct {
    SingleStreamKv inner;
    const ForwardState *fs;
    int vocab, steps, cap, prepared;
    float *log; /* [cap][vocab] */
} Recorder;

static Recorder *recording; /* prepare() sees only the store, so the recorder is global */

static void record(Recorder *r)
{
    ck_assert_int_lt(r->steps, r->cap);
    memcpy(r->log + (size_t)r->steps * (size_t)r->vocab, r->fs->logits, sizeof(float) * (size_t)r->vocab);
    r->steps++;
}

static int recording_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    if (recording->prepared++ > 0)
        record(recording);
    return recording->inner.prepare(ctx, n_tokens, cached, err);
}

/* A greedy generation through the typed cache; against the reference: the
 * same tokens fed as one batch through a store that rounds K/V to the type
 * and attends with attention_reference() (tests/helpers.c). */
static void expect_rounded_reference(const TestModel *f, KvDtype type, KvAllocPolicy policy, const char *prompt)
{
    const Model *m = &f->m;
    Err err = {{0}};
    Generation g;
    ck_assert_msg(generation_init(&g, m, &f->t, prompt, &err) == 0, "%s", err.msg);
    KvCacheTyped cache;
    ck_assert_msg(kv_cache_typed_init(&cache, &m->cfg, policy, type, g.n_prompt, &err) == 0, "%s", err.msg);
    ForwardState fs;
    Sampler s;
    ck_assert_int_eq(forward_state_init(&fs, &m->cfg, g.n_prompt, 1, &err), 0);
    ck_assert_int_eq(sampler_init(&s, m->cfg.vocab_size, 0.0f, 0.9f, 42, &err), 0);
    Recorder r = {.inner = kv_cache_typed_strategy(&cache), .fs = &fs, .vocab = m->cfg.vocab_size,
                  .cap = m->cfg.seq_len + 1};
    r.log = malloc(sizeof(float) * (size_t)r.cap * (size_t)r.vocab);
    SingleStreamKv kv = r.inner;
    kv.prepare = recording_prepare;
    recording = &r;
    ck_assert_msg(generate(&g, m, &f->t, &s, &fs, &kv, 1000, NULL, &err) == 0, "%s", err.msg);
    record(&r);
    recording = NULL;
    int fed = g.n_prompt + r.steps - 1; /* the last token is sampled, never fed */
    ck_assert_int_gt(r.steps, 20);
    float *want = test_cpu_logits_kv(m, g.tokens, fed, type);
    for (int step = 0; step < r.steps; step++)
        ck_assert_msg(memcmp(r.log + (size_t)step * (size_t)r.vocab,
                             want + (size_t)(g.n_prompt - 1 + step) * (size_t)r.vocab,
                             sizeof(float) * (size_t)r.vocab) == 0,
                      "--kv-dtype %s, --kv-alloc %s, dim %d: step %d's logits are not the rounded reference's",
                      kv_dtype_name(type), kv_alloc_policy_name(policy), m->cfg.dim, step);
    if (policy == KV_ALLOC_GROW)
        ck_assert_int_gt(cache.book.reallocations, 0); /* the moves kept every stored row */
    free(want);
    free(r.log);
    sampler_free(&s);
    forward_state_free(&fs);
    kv_cache_typed_free(&cache);
    generation_free(&g);
}

START_TEST(typed_cache_gives_the_rounded_reference_logits)
{
    int i = _i;
    TestModel f;
    test_model_synthetic(&f, SHAPES[i], (unsigned long long)i + 1);
    for (size_t t = 0; t < N_TYPES; t++) {
        expect_rounded_reference(&f, TYPES[t], KV_ALLOC_MAX, "hello world");
        expect_rounded_reference(&f, TYPES[t], KV_ALLOC_GROW, "a b c d e f g h i j k l m n o p q r s t");
    }
    test_model_free(&f);
}
END_TEST

/* The reference rounds: a typed cache is not the f32 one. On stories260K
 * every type changes some logit of the first steps (a test that compared
 * the typed run with itself would not see it). */
START_TEST(typed_logits_differ_from_f32)
{
    TestModel f;
    if (!test_model_stories(&f, "typed_logits_differ_from_f32"))
        return;
    int tokens[40];
    Err err = {{0}};
    Generation g;
    ck_assert_int_eq(generation_init(&g, &f.m, &f.t, "Once upon a time", &err), 0);
    int n = g.n_prompt;
    memcpy(tokens, g.tokens, (size_t)n * sizeof(int));
    for (int i = n; i < 40; i++)
        tokens[i] = 1 + (i * 37) % (f.m.cfg.vocab_size - 1);
    float *f32 = test_cpu_logits_kv(&f.m, tokens, 40, KV_DTYPE_FP32);
    for (size_t t = 0; t < N_TYPES; t++) {
        float *typed = test_cpu_logits_kv(&f.m, tokens, 40, TYPES[t]);
        ck_assert_msg(memcmp(typed, f32, sizeof(float) * 40 * (size_t)f.m.cfg.vocab_size) != 0,
                      "--kv-dtype %s gave f32's logits", kv_dtype_name(TYPES[t]));
        free(typed);
    }
    free(f32);
    generation_free(&g);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the program */

static long long json_int_of(const char *json, const char *key)
{
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(json, quoted);
    ck_assert_msg(p != NULL, "the JSON report has no \"%s\"", key);
    return strtoll(p + strlen(quoted), NULL, 10);
}

/* The ledger's kv row ("memory" -> "host" -> "kv" -> which). */
static long long ledger_kv(const char *json, const char *which)
{
    const char *p = strstr(json, "\"memory\":");
    ck_assert_ptr_nonnull(p);
    p = strstr(p, "\"kv\":");
    ck_assert_ptr_nonnull(p);
    return json_int_of(p, which);
}

/* Runs chapter 2 on a synthetic model; returns its JSON report (malloc'd). */
static char *run_ch02(const char *model, const char *tok, const char *dtype, const char *alloc, ProgramResult *r)
{
    char json_path[PATH_MAX];
    test_write_temp("", 0, json_path);
    const char *argv[] = {"ch02-kvcache", "--model", model, "--tokenizer", tok, "--prompt", "hello", "--steps", "30",
                          "--kv-alloc", alloc, "--kv-dtype", dtype, "--json", json_path, NULL};
    ck_assert_int_eq(test_run_program(argv, r), 0);
    ck_assert_msg(r->status == 0, "ch02-kvcache --kv-dtype %s exited with %d: %s", dtype, r->status, r->err);
    char *json = test_slurp(json_path);
    unlink(json_path);
    return json;
}

/* The table, the JSON and the ledger agree on the stored bytes: 2 x layers
 * x KV heads x (head_dim x element bytes + scale bytes) per position. */
START_TEST(table_and_ledger_count_the_stored_bytes)
{
    const ModelConfig *c = &SHAPES[0]; /* 2 layers, 2 KV heads of 8, seq_len 64 */
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(c, 1, 0, 1, model, tok);
    static const struct {
        const char *name;
        long long per_token;
        const char *formula;
    } want[] = {
        {"f32", 2 * 2 * 2 * 8 * 4, "2 x 2 layers x 2 kv heads x 8 head_dim x 4 B x positions"},
        {"f16", 2 * 2 * 2 * 8 * 2, "2 x 2 layers x 2 kv heads x 8 head_dim x 2 B x positions"},
        {"bf16", 2 * 2 * 2 * 8 * 2, "8 head_dim x 2 B x positions"},
        {"int8", 2 * 2 * 2 * (8 + 4), "2 x 2 layers x 2 kv heads x (8 head_dim x 1 B + 4 B scale) x positions"},
        {"fp8-e4m3", 2 * 2 * 2 * 8, "8 head_dim x 1 B x positions"},
        {"fp8-e5m2", 2 * 2 * 2 * 8, "8 head_dim x 1 B x positions"},
    };
    /* f32 is the core, whose store and attend are the lab's: the handout
     * (the exercises) checks the typed rows only. */
    for (size_t i = test_lab_answers() ? 0 : 1; i < sizeof want / sizeof want[0]; i++) {
        ProgramResult r;
        char *json = run_ch02(model, tok, want[i].name, "max", &r);
        long long per_token = want[i].per_token;
        ck_assert_int_eq(json_int_of(json, "kv_bytes_per_token"), per_token);
        ck_assert_int_eq(json_int_of(json, "kv_reserved_bytes"), per_token * c->seq_len);
        ck_assert_int_eq(ledger_kv(json, "peak"), per_token * c->seq_len); /* what was allocated */
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"kv_dtype\": \"%s\"", want[i].name);
        ck_assert_msg(strstr(json, quoted) != NULL, "no %s in %s", quoted, json);
        ck_assert_msg(strstr(r.err, want[i].formula) != NULL, "the table lacks '%s':\n%s", want[i].formula, r.err);
        ck_assert_msg((strstr(r.err, "element type   --kv-dtype") != NULL) == (i > 0),
                      "--kv-dtype %s: the element-type line %s", want[i].name, i ? "is missing" : "is there for f32");
        free(json);
        test_result_free(&r);
        /* grow: the moves copy stored rows at the stored size. The prompt
         * and 29 fed tokens are 30 to 45 positions: 16 -> 32 -> 64, moves
         * of 16 and 32 rows, the last one holding 32 + 64 at once. */
        json = run_ch02(model, tok, want[i].name, "grow", &r);
        long long stored = json_int_of(json, "prompt_tokens") + 29;
        ck_assert(stored > 32 && stored <= 64 && json_int_of(json, "prompt_tokens") <= 16);
        ck_assert_int_eq(json_int_of(json, "kv_reallocations"), 2);
        ck_assert_int_eq(json_int_of(json, "kv_bytes_copied"), (16 + 32) * per_token);
        ck_assert_int_eq(json_int_of(json, "kv_used_bytes"), stored * per_token);
        ck_assert_int_eq(json_int_of(json, "kv_transient_peak_bytes"), (32 + 64) * per_token);
        ck_assert_int_eq(ledger_kv(json, "peak"), (32 + 64) * per_token);
        free(json);
        test_result_free(&r);
    }
    unlink(model);
    unlink(tok);
}
END_TEST

/* f32 is the core: --kv-dtype f32 prints what no option prints. */
START_TEST(f32_is_the_default_and_unchanged)
{
    TestModel f;
    if (!test_lab_answers()) { /* the core's store and attend are the lab's */
        test_skip("f32_is_the_default_and_unchanged", "the lab code is the exercises");
        return;
    }
    if (!test_model_stories(&f, "f32_is_the_default_and_unchanged"))
        return;
    test_model_free(&f);
    const char *plain[] = {"ch02-kvcache", "--steps", "80", "--quiet", NULL};
    const char *f32[] = {"ch02-kvcache", "--steps", "80", "--quiet", "--kv-dtype", "f32", NULL};
    ProgramResult a, b;
    ck_assert_int_eq(test_run_program(plain, &a), 0);
    ck_assert_int_eq(test_run_program(f32, &b), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_int_eq(b.status, 0);
    ck_assert_str_eq(a.out, b.out);
    test_result_free(&a);
    test_result_free(&b);
}
END_TEST

START_TEST(bad_kv_dtypes_are_one_line)
{
    /* A head wider than the typed reads take (one attention head of 512). */
    ModelConfig wide = {512, 64, 1, 1, 1, 400, 16};
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&wide, 1, 0, 1, model, tok);
    const char *cases[][10] = {
        {"ch02-kvcache", "--kv-dtype", "int4", NULL},
        {"ch02-kvcache", "--kv-dtype", "fp8", NULL},
        {"ch02-kvcache", "--kv-dtype", NULL},
        {"ch02-kvcache", "--model", model, "--tokenizer", tok, "--kv-dtype", "f16", NULL},
    };
    const char *words[] = {"'int4' is not a K/V element type", "fp8-e4m3 or fp8-e5m2", "needs a value",
                           "--kv-dtype f16 reads heads of at most 256 values; this model's have 512"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ProgramResult r;
        ck_assert_int_eq(test_run_program(cases[i], &r), 0);
        ck_assert_msg(r.status == 1 && r.out_len == 0 && test_count_lines(r.err) == 1, "case %zu: %d, %s", i,
                      r.status, r.err);
        ck_assert_msg(strstr(r.err, "ch02-kvcache: error: ") == r.err && strstr(r.err, words[i]), "case %zu: %s", i,
                      r.err);
        test_result_free(&r);
    }
    unlink(model);
    unlink(tok);
}
END_TEST

Suite *suite_ch02_dtype(void)
{
    Suite *s = suite_create("ch02_dtype");
    TCase *tc = tcase_create("kv-dtype");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, typed_cache_gives_the_rounded_reference_logits, 0, (int)N_SHAPES);
    tcase_add_test(tc, typed_logits_differ_from_f32);
    tcase_add_test(tc, table_and_ledger_count_the_stored_bytes);
    tcase_add_test(tc, f32_is_the_default_and_unchanged);
    tcase_add_test(tc, bad_kv_dtypes_are_one_line);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch02_dtype) /* the typed cache keeps its positions with the lab's kv_cache_prepare() */
