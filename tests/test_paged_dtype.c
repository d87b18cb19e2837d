/* Chapter 4's pool with smaller entries (--kv-dtype, the extension in
 * chapters/ch04-paged/ext/dtype.c), and chapters 5 and 6 on top of it:
 * PagedAttention over typed blocks is, bit for bit, attention over the
 * same stored rows laid out contiguously; every request gets exactly the
 * tokens chapter 2's typed cache gives it alone, whatever the block size
 * and however often it is preempted; chapters 5 and 6 give chapter 4's
 * tokens; the pool and the memory table count the stored bytes, scales
 * included. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext/paged_dtype.h"
#include "generate.h"
#include "helpers.h"
#include "kvcache_dtype.h"
#include "mem.h"
#include "sampler.h"
#include "serving.h"
#include "suites.h"

static const KvDtype TYPES[] = {KV_DTYPE_FP16, KV_DTYPE_BF16, KV_DTYPE_INT8, KV_DTYPE_FP8_E4M3, KV_DTYPE_FP8_E5M2};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

/* ------------------------------------------------------------ PagedAttention over typed rows */

/* The same rows stored twice: into blocks taken in a shuffled order, and
 * into one contiguous array; paged_attention_typed() through the table
 * must give kv_attention_rows()'s bits over the array (chapter 2's typed
 * attention), for every query length and KV head. */
START_TEST(typed_paged_attention_equals_contiguous_rows)
{
    const KvDtype type = TYPES[_i];
    enum { LAYERS = 2, KV_HEADS = 3, HEAD_DIM = 12, BS = 4, MAX_POS = 37 };
    const int n_blocks = (MAX_POS + BS - 1) / BS;
    KvRowFormat f;
    Err err = {{0}};
    ck_assert(kv_row_format_init(&f, type, KV_HEADS, HEAD_DIM, &err) == 0);
    size_t row_bytes = kv_row_bytes(&f);
    BlockShape shape = {.block_size = BS, .n_layers = LAYERS, .kv_dim = KV_HEADS * HEAD_DIM,
                        .elem_bytes = (int)kv_dtype_elem_bytes(type),
                        .scale_bytes = KV_HEADS * (int)kv_dtype_scale_bytes(type)};
    PagedKv kv = {.cfg = {KV_HEADS * HEAD_DIM, 64, LAYERS, KV_HEADS, KV_HEADS, 64, MAX_POS}};
    ck_assert_msg(block_pool_init(&kv.pool, &shape, n_blocks, 1, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(kv.pool.bytes_per_block, (size_t)BS * LAYERS * 2 * row_bytes);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), (size_t)n_blocks * kv.pool.bytes_per_block);
    int order[MAX_POS];
    BlockTable t = {.blocks = order, .n_blocks = n_blocks, .capacity = n_blocks};
    for (int i = 0; i < n_blocks; i++)
        order[i] = (i * 3 + 1) % n_blocks; /* 3 is prime to 10 blocks: a permutation */
    PagedDtype d = {.kv = &kv, .row = f, .row_bytes = row_bytes};
    unsigned char *keys = malloc((size_t)MAX_POS * row_bytes), *values = malloc((size_t)MAX_POS * row_bytes);
    unsigned long long rng = 99 + (unsigned long long)type;
    float x[KV_HEADS * HEAD_DIM], q[HEAD_DIM], want[HEAD_DIM], got[HEAD_DIM], scores[MAX_POS];
    const int layer = 1;
    for (int pos = 0; pos < MAX_POS; pos++)
        for (int which = 0; which < 2; which++) {
            for (int i = 0; i < KV_HEADS * HEAD_DIM; i++)
                x[i] = (sampler_random_f32(&rng) - 0.5f) * (i % 7 == 0 ? 40.0f : 2.0f); /* an outlier channel */
            unsigned char *contiguous = (which ? values : keys) + (size_t)pos * row_bytes;
            kv_row_store(contiguous, x, &f);
            kv_row_store(paged_dtype_row(&d, order[pos / BS], layer, which, pos % BS), x, &f);
        }
    for (int i = 0; i < HEAD_DIM; i++)
        q[i] = sampler_random_f32(&rng) - 0.5f;
    for (int n_pos = 1; n_pos <= MAX_POS; n_pos++)
        for (int head = 0; head < KV_HEADS; head++) {
            kv_attention_rows(want, q, keys, values, n_pos, row_bytes, head, &f, scores);
            paged_attention_typed(&d, &t, layer, head, q, n_pos, got, scores);
            ck_assert_msg(memcmp(want, got, sizeof want) == 0, "%s, %d positions, head %d: differs from the rows",
                          kv_dtype_name(type), n_pos, head);
        }
    free(keys);
    free(values);
    block_pool_free(&kv.pool);
}
END_TEST

/* ------------------------------------------------------------ the same tokens as chapter 2 */

static const char *REQUESTS = "5\tab\n"
                              "30\tthe end of it\n"
                              "12\tx\n"
                              "70\tlong enough to reach seq len\n"
                              "20\ta b c d e f g h i j k l m n o p\n"
                              "40\tmore words here\n";

/* A prompt alone through chapter 2's typed cache (its --kv-dtype
 * extension), greedy: the reference of the paged runs. */
static int ch02_typed_tokens(const Model *m, const Tokenizer *t, const char *prompt, int steps, KvDtype type,
                             int *out)
{
    Generation g;
    Err err = {{0}};
    ck_assert_msg(generation_init(&g, m, t, prompt, &err) == 0, "%s", err.msg);
    KvCacheTyped cache;
    ck_assert_msg(kv_cache_typed_init(&cache, &m->cfg, KV_ALLOC_MAX, type, g.n_prompt, &err) == 0, "%s", err.msg);
    SingleStreamKv strat = kv_cache_typed_strategy(&cache);
    ForwardState fs;
    ck_assert(forward_state_init(&fs, &m->cfg, m->cfg.seq_len, 1, &err) == 0);
    Sampler s;
    SamplingParams p = sampling_params_default(); /* greedy */
    ck_assert_msg(sampler_init_params(&s, m->cfg.vocab_size, &p, 1, &err) == 0, "%s", err.msg);
    ck_assert_msg(generate(&g, m, t, &s, &fs, &strat, steps, NULL, &err) == 0, "%s", err.msg);
    int n = g.n_tokens - g.n_prompt;
    memcpy(out, g.tokens + g.n_prompt, (size_t)n * sizeof(int));
    sampler_free(&s);
    forward_state_free(&fs);
    kv_cache_typed_free(&cache);
    generation_free(&g);
    return n;
}

/* Serves @p requests through chapter 4 with --kv-dtype @p type and checks
 * each request against chapter 2's typed cache alone; returns the
 * preemptions. */
static long paged_typed_run(const TestModel *f, const char *requests, KvDtype type, int bs, size_t budget)
{
    RequestFile rf;
    CliOptions o;
    ServingRun run;
    PagedServer *server = NULL;
    Err err = {{0}};
    cli_defaults(&o);
    o.block_size = bs;
    o.kv_budget = budget;
    o.watermark = 0;
    o.kv_dtype = kv_dtype_name(type);
    ck_assert_msg(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0, "%s", err.msg);
    ck_assert_msg(serving_run_init(&run, &f->m, &f->t, &o, &rf, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(run.kv_bytes_per_token, kv_dtype_bytes_per_token(&f->m.cfg, type));
    ck_assert_msg(paged_serve(&run, &server, NULL, &err) == 0, "%s, block size %d: %s", kv_dtype_name(type), bs,
                  err.msg);
    ck_assert_ptr_nonnull(server->dtype);
    ck_assert_uint_eq(server->kv.pool.bytes_per_block, (size_t)bs * run.kv_bytes_per_token);
    int *want = malloc(sizeof(int) * (size_t)(f->m.cfg.seq_len + 1));
    for (int i = 0; i < run.n_reqs; i++) {
        const Request *r = &run.reqs[i];
        int n = ch02_typed_tokens(&f->m, &f->t, r->spec->prompt, r->spec->max_new_tokens, type, want);
        ck_assert_msg(n == r->n_tokens - r->n_prompt &&
                          memcmp(want, r->tokens + r->n_prompt, (size_t)n * sizeof(int)) == 0,
                      "%s, block size %d: request %d differs from chapter 2's typed cache (%d preemptions)",
                      kv_dtype_name(type), bs, i, r->preemptions);
    }
    free(want);
    long preemptions = server->preemptions;
    paged_close(server);
    serving_run_free(&run);
    request_file_free(&rf);
    ck_assert_uint_eq(mem_current(MEM_KV, MEM_HOST), 0);
    return preemptions;
}

START_TEST(typed_pool_same_tokens_as_ch02_typed)
{
    const KvDtype type = TYPES[_i];
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 21);
    size_t per_token = kv_dtype_bytes_per_token(&f.m.cfg, type);
    const int sizes[] = {1, 16, 64};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int bs = sizes[k];
        ck_assert_int_eq(paged_typed_run(&f, REQUESTS, type, bs, (size_t)64 * 512 * per_token), 0);
        /* Room for the longest request and a little: preempted, recomputed. */
        size_t tight = (size_t)((72 + bs - 1) / bs) * (size_t)bs * per_token;
        long preempted = paged_typed_run(&f, REQUESTS, type, bs, tight);
        if (bs < 64)
            ck_assert_msg(preempted >= 2, "%s, block size %d: only %ld preemptions", kv_dtype_name(type), bs,
                          preempted);
    }
    test_model_free(&f);
}
END_TEST

START_TEST(typed_pool_same_tokens_as_ch02_typed_stories260k)
{
    TestModel f;
    if (!test_model_stories(&f, "typed_pool_same_tokens_as_ch02_typed_stories260k"))
        return;
    const char *requests = "60\tOnce upon a time\n"
                           "25\tLily found a shiny stone\n"
                           "40\tThe sun was hot\n";
    for (size_t k = 0; k < N_TYPES; k++)
        paged_typed_run(&f, requests, TYPES[k], 16, 0);
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ the programs */

/* Every request's generated tokens, line by line, from an --out file. */
static int out_tokens(const char *path, int *out, int max)
{
    char *text = test_slurp(path);
    int n = 0;
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        n += test_json_ints(line, "tokens", out + n, max - n);
        out[n++] = -1; /* between requests */
        if (!end)
            break;
    }
    free(text);
    return n;
}

static void run_program(const char *program, const char *model, const char *tok, const char *reqs, const char *dtype,
                        const char *out, const char *json)
{
    const char *argv[] = {program, "--model", model, "--tokenizer", tok, "--requests", reqs, "--kv-dtype", dtype,
                          "--out", out, "--json", json, "--quiet", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "%s --kv-dtype %s exited with %d: %s", program, dtype, r.status, r.err);
    test_result_free(&r);
}

static long long json_int_of(const char *json, const char *key)
{
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(json, quoted);
    ck_assert_msg(p != NULL, "the JSON report has no \"%s\"", key);
    return strtoll(p + strlen(quoted), NULL, 10);
}

/* Chapters 5 (prefix cache) and 6 (no window: the full cache) give chapter
 * 4's tokens in every type; each program's report counts the stored bytes
 * per token and per block. */
START_TEST(chapters_5_and_6_give_chapter_4_tokens)
{
    const KvDtype type = _i < (int)N_TYPES ? TYPES[_i] : KV_DTYPE_FP32;
    const ModelConfig cfg = TEST_SYNTH_GQA;
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX], out[PATH_MAX], json[PATH_MAX];
    test_write_synthetic(&cfg, 33, 0, 0, model, tok);
    const char *lines = "20\tthe same start, then one\n"
                        "30\tthe same start, then two\n"
                        "12\tab\n";
    test_write_temp(lines, strlen(lines), reqs);
    test_write_temp("", 0, out);
    test_write_temp("", 0, json);
    enum { MAX = 256 };
    int want[MAX], got[MAX];
    const char *programs[] = {"ch04-paged", "ch05-prefix", "ch06-window"};
    long long per_token = (long long)kv_dtype_bytes_per_token(&cfg, type);
    int n_want = 0;
    for (int p = 0; p < 3; p++) {
        run_program(programs[p], model, tok, reqs, kv_dtype_name(type), out, json);
        int *into = p == 0 ? want : got;
        int n = out_tokens(out, into, MAX);
        if (p == 0)
            n_want = n;
        else
            ck_assert_msg(n == n_want && memcmp(want, got, (size_t)n * sizeof(int)) == 0,
                          "%s --kv-dtype %s: tokens differ from chapter 4's", programs[p], kv_dtype_name(type));
        char *report = test_slurp(json);
        ck_assert_int_eq(json_int_of(report, "kv_bytes_per_token"), per_token);
        if (p == 0)
            ck_assert_int_eq(json_int_of(report, "bytes_per_block"), 16 * per_token);
        free(report);
    }
    unlink(model);
    unlink(tok);
    unlink(reqs);
    unlink(out);
    unlink(json);
}
END_TEST

/* int8's scales are stored bytes: 4 per KV head of each row. */
START_TEST(int8_counts_its_scales)
{
    const ModelConfig cfg = TEST_SYNTH_GQA;
    int hd = cfg.dim / cfg.n_heads;
    ck_assert_uint_eq(kv_dtype_bytes_per_token(&cfg, KV_DTYPE_INT8),
                      2u * (size_t)cfg.n_layers * (size_t)cfg.n_kv_heads * (size_t)(hd + 4));
}
END_TEST

/* A chapter whose CPU path stores f32 only refuses in one line. */
START_TEST(chapter_3_refuses_in_one_line)
{
    const char *argv[] = {"ch03-batching", "--kv-dtype", "int8", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1 && r.out_len == 0 && test_count_lines(r.err) == 1 && strstr(r.err, "--kv-dtype int8"),
                  "%d: %s", r.status, r.err);
    test_result_free(&r);
}
END_TEST

Suite *suite_paged_dtype(void)
{
    Suite *s = suite_create("paged_dtype");
    TCase *tc = tcase_create("kv-dtype");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, typed_paged_attention_equals_contiguous_rows, 0, (int)N_TYPES);
    tcase_add_loop_test(tc, typed_pool_same_tokens_as_ch02_typed, 0, (int)N_TYPES);
    tcase_add_test(tc, typed_pool_same_tokens_as_ch02_typed_stories260k);
    tcase_add_loop_test(tc, chapters_5_and_6_give_chapter_4_tokens, 0, (int)N_TYPES + 1);
    tcase_add_test(tc, int8_counts_its_scales);
    tcase_add_test(tc, chapter_3_refuses_in_one_line);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(paged_dtype)
