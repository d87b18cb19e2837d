/* The sampler's filters and penalties in the chapters: samples forked
 * copy-on-write (--n) keep their own token counts, so each draws what it
 * draws alone, with and without preemption; and every chapter's program
 * gives the same tokens for the same sampled request with min-p, top-k,
 * top-p and the three penalties on. */
#define _GNU_SOURCE /* mkstemp */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "mem.h"
#include "paged.h"
#include "serving.h"
#include "suites.h"

/* The options with every filter and every penalty on, none of them
 * extreme, as a program parses them. */
static void all_on(CliOptions *o)
{
    static const CliProgram prog = {"t", "test", CLI_SAMPLING | CLI_SERVING | CLI_PAGED};
    char *argv[] = {"t", "--temperature", "0.9", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.02",
                    "--repetition-penalty", "1.3", "--frequency-penalty", "0.5", "--presence-penalty", "0.3", NULL};
    Err err = {{0}};
    ck_assert_msg(cli_parse(&prog, 15, argv, o, &err) == CLI_RUN, "%s", err.msg);
}

/* ------------------------------------------------------------ forks */

/* Chapter 4 with --n samples of each line: every sample's tokens are the
 * ones its own sampler (seed --seed + index) draws alone, penalised by
 * its own tokens only. A count shared between the samples of a prompt, or
 * one that missed the tokens of a preempted and recomputed sample, would
 * change the draws. Returns how many samples differ from their solo run
 * without penalties (the penalties must have changed something). */
static int expect_solo_tokens(const TestModel *f, const char *requests, int n_samples, size_t budget,
                              long *preemptions)
{
    RequestFile rf;
    ServingRun run;
    PagedServer *server = NULL;
    Err err = {{0}};
    CliOptions o;
    all_on(&o);
    SamplingParams p = cli_sampling_params(&o), plain = p;
    plain.repetition_penalty = 1.0f;
    plain.frequency_penalty = plain.presence_penalty = 0.0f;
    o.n_samples = n_samples;
    o.block_size = 4;
    o.kv_budget = budget;
    o.watermark = 0;
    o.seed = 7;
    ck_assert(request_file_parse(&rf, requests, strlen(requests), "t", &err) == 0);
    ck_assert_msg(serving_run_init(&run, &f->m, &f->t, &o, &rf, &err) == 0, "%s", err.msg);
    ck_assert_msg(paged_serve(&run, &server, NULL, &err) == 0, "%s", err.msg);
    int changed = 0;
    for (int i = 0; i < run.n_reqs; i++) {
        const Request *r = &run.reqs[i];
        const char *prompt = rf.items[i / n_samples].prompt;
        int steps = rf.items[i / n_samples].max_new_tokens, want[128], without[128];
        int n = test_solo_tokens_params(&f->m, &f->t, prompt, steps, &p, o.seed + (unsigned long long)i, want);
        ck_assert_msg(n == r->n_tokens - r->n_prompt && memcmp(want, r->tokens + r->n_prompt, (size_t)n * sizeof(int)) == 0,
                      "request %d (sample %d, %d preemptions, budget %zu) differs from its solo run", i, r->sample,
                      r->preemptions, budget);
        int m = test_solo_tokens_params(&f->m, &f->t, prompt, steps, &plain, o.seed + (unsigned long long)i, without);
        changed += m != n || memcmp(want, without, (size_t)n * sizeof(int)) != 0;
    }
    *preemptions = server->preemptions;
    ck_assert_int_eq(server->kv.pool.n_free, server->kv.pool.n_blocks);
    paged_close(server);
    serving_run_free(&run);
    request_file_free(&rf);
    return changed;
}

START_TEST(forks_keep_their_own_counts)
{
    TestModel f;
    test_model_synthetic(&f, TEST_SYNTH_GQA, 11);
    long preemptions;
    int changed = expect_solo_tokens(&f, "20\tthe end of it\n15\tab\n", 3, 0, &preemptions);
    ck_assert_msg(changed > 0, "the penalties changed none of the 6 samples: the test shows nothing");
    /* Four samples in 20 blocks of 4: siblings are preempted and recomputed. */
    size_t per_token = model_kv_bytes_per_token(&f.m.cfg, sizeof(float));
    changed = expect_solo_tokens(&f, "40\tthe end of it\n", 4, 20 * 4 * per_token, &preemptions);
    ck_assert_msg(preemptions > 0, "the tight budget preempted nobody: the test wants preemption");
    ck_assert_msg(changed > 0, "the penalties changed none of the 4 samples");
    test_model_free(&f);
}
END_TEST

/* ------------------------------------------------------------ every chapter */

static void temp_path(char *path, const char *pattern)
{
    snprintf(path, PATH_MAX, "%s", pattern);
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
}

/* Runs @p program with the model, the sampling options and @p extra, and
 * returns the generated tokens it reported: from --json (the single-stream
 * chapters: every token, less the prompt's) or from --out (the serving
 * chapters: request 0). */
static int run_chapter(const char *program, const char *const *sampling, const char *model, const char *tok,
                       const char *requests, int *tokens)
{
    char report[PATH_MAX];
    temp_path(report, "/tmp/kvlab-sampling-XXXXXX");
    int single = strcmp(program, "ch01-naive") == 0 || strcmp(program, "ch02-kvcache") == 0;
    const char *argv[40] = {program, "--model", model, "--tokenizer", tok, "--threads", "1", "--quiet"};
    int n = 8;
    if (single) {
        const char *more[] = {"--prompt", "the end of it", "--steps", "30", "--json", report};
        for (int i = 0; i < 6; i++)
            argv[n++] = more[i];
    } else {
        const char *more[] = {"--requests", requests, "--out", report};
        for (int i = 0; i < 4; i++)
            argv[n++] = more[i];
    }
    for (int i = 0; sampling[i]; i++)
        argv[n++] = sampling[i];
    argv[n] = NULL;
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", program, r.status, r.err);
    test_result_free(&r);
    char *text = test_slurp(report);
    unlink(report);
    int all[128], count = test_json_ints(text, "tokens", all, 128), skip = 0;
    if (single) {
        const char *at = strstr(text, "\"prompt_tokens\":");
        ck_assert_msg(at != NULL, "%s: no prompt_tokens in its --json", program);
        skip = atoi(at + strlen("\"prompt_tokens\":"));
    }
    free(text);
    ck_assert_msg(count > skip, "%s generated nothing", program);
    memcpy(tokens, all + skip, (size_t)(count - skip) * sizeof(int));
    return count - skip;
}

START_TEST(every_chapter_same_sampled_tokens)
{
    static const ModelConfig cfg = {32, 64, 2, 4, 2, 400, 64};
    char model[PATH_MAX], tok[PATH_MAX], requests[PATH_MAX];
    test_write_synthetic(&cfg, 19, 0, 1, model, tok);
    const char *line = "30\tthe end of it\n";
    test_write_temp(line, strlen(line), requests);
    static const char *const sampling[] = {"--temperature", "0.8", "--top-k", "40", "--repetition-penalty", "1.2",
                                           "--min-p", "0.02", "--frequency-penalty", "0.3", "--presence-penalty",
                                           "0.2", "--seed", "5", NULL};
    static const char *const programs[] = {"ch01-naive", "ch02-kvcache", "ch03-batching",
                                           "ch04-paged", "ch05-prefix",  "ch06-window"};
    int want[128], got[128];
    int n = run_chapter(programs[0], sampling, model, tok, requests, want);
    for (size_t i = 1; i < sizeof programs / sizeof programs[0]; i++) {
        int m = run_chapter(programs[i], sampling, model, tok, requests, got);
        ck_assert_msg(m == n && memcmp(want, got, (size_t)n * sizeof(int)) == 0,
                      "%s: %d tokens differ from chapter 1's %d (first %d vs %d)", programs[i], m, n, got[0], want[0]);
    }
    /* The options matter: the same temperature and seed without them draw other tokens. */
    static const char *const plain[] = {"--temperature", "0.8", "--seed", "5", NULL};
    int m = run_chapter("ch02-kvcache", plain, model, tok, requests, got);
    ck_assert_msg(m != n || memcmp(want, got, (size_t)n * sizeof(int)) != 0,
                  "the filters and penalties changed none of %d tokens", n);
    unlink(model), unlink(tok), unlink(requests);
}
END_TEST

Suite *suite_sampler_chapters(void)
{
    Suite *s = suite_create("sampler_chapters");
    TCase *tc = tcase_create("chapters");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forks_keep_their_own_counts);
    tcase_add_test(tc, every_chapter_same_sampled_tokens);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(sampler_chapters)
