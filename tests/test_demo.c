/* The demo driver (build/demo, `make demo`): every chapter on the same
 * requests, one table, the same tokens everywhere, the plot's data. */
#define _GNU_SOURCE /* mkdtemp */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "suites.h"

/* GQA, seq_len 64: 2 layers x 2 KV heads x 8 x 4 B x 2 = 256 B per token. */
static const ModelConfig GQA = {32, 64, 2, 4, 2, 400, 64};

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s was not written", path);
    static char text[1 << 18];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

START_TEST(demo_runs_every_chapter_side_by_side)
{
    char model[PATH_MAX], tok[PATH_MAX], reqs[PATH_MAX], dir[] = "/tmp/kvlab-demo-XXXXXX";
    test_write_synthetic(&GQA, 7, 0, 0, model, tok);
    /* Three requests; the default budget holds 8 x 64 positions, so
     * chapters 3, 4 and 5 run all three at once. */
    const char *text = "10\ta\n20\tthe end\n5\tonce upon\n";
    test_write_temp(text, strlen(text), reqs);
    ck_assert(mkdtemp(dir) != NULL);
    ProgramResult r;
    const char *argv[] = {"demo", "--model", model, "--tokenizer", tok, "--requests", reqs, "--out", dir,
                          "--threads", "1", NULL};
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    static const char *const rows[] = {"| 1 naive (recompute) |", "| 2 KV cache (--kv-alloc max) |",
                                       "| 3 batching (--reserve max) |", "| 4 paged (--block-size 16) |",
                                       "| 5 prefix cache (--prefix-cache hash) |"};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(strstr(r.out, rows[i]), "no row %s in:\n%s", rows[i], r.out);
    ck_assert_msg(strstr(r.out, "same tokens in every chapter: yes (0 of 3 requests differ"), "%s", r.out);
    /* No prompt of these fills a block of 16: nothing to share. */
    ck_assert_msg(strstr(r.out, "chapter 5 found 0 of the "), "%s", r.out);
    const char *legend = strstr(r.out, "What the columns mean"), *table = strstr(r.out, "| chapter |");
    ck_assert_msg(legend && table && legend < table && strstr(legend, "preemptions ") < table,
                  "no legend of the columns before the table:\n%s", r.out);
    /* One request's text from every chapter: the same tokens, the same text. */
    const char *texts = strstr(r.out, "what request 1 ");
    ck_assert_msg(texts != NULL, "no request's text:\n%s", r.out);
    char first[512] = "";
    for (int c = 1; c <= 5; c++) {
        char label[32];
        snprintf(label, sizeof label, "\n  chapter %d: a", c); /* the prompt is "a" */
        const char *line = strstr(texts, label);
        ck_assert_msg(line != NULL, "no text of chapter %d:\n%s", c, texts);
        line += strlen(label) - 1;
        size_t len = strcspn(line, "\n");
        if (c == 1)
            snprintf(first, sizeof first, "%.*s", (int)len, line);
        else
            ck_assert_msg(strlen(first) == len && strncmp(first, line, len) == 0, "chapter %d's text differs:\n%s",
                          c, texts);
    }
    ck_assert_msg(strstr(r.err, "demo: chapter 1 (recompute): 3 of 3 requests"), "no progress on stderr: %s", r.err);
    test_result_free(&r);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/kv-timeline.tsv", dir);
    const char *tsv = read_all(path);
    ck_assert_int_eq(count_of(tsv, "# chapter "), 5);
    /* Chapter 3 reserves the whole default budget at its first step:
     * 3 regions of 64 positions x 256 B = 49,152 B. */
    ck_assert_msg(strstr(tsv, "\n0\t49152\t"), "%s", tsv);
    snprintf(path, sizeof path, "%s/demo.json", dir);
    const char *json = read_all(path);
    ck_assert_msg(strstr(json, "\"requests_with_different_tokens\": 0"), "%s", json);
    ck_assert_int_eq(count_of(json, "\"max_concurrent\": 3"), 3);
    ck_assert_msg(strstr(json, "\"prefix_cache_hit_tokens\": 0"), "%s", json);
    ck_assert_int_eq(count_of(json, "\"max_concurrent\": 1"), 2);
    /* The page's traces: chapters 3 and 4, each a setup line, its steps
     * and an end line (tests/test_trace.c checks what they say). */
    static const char *const traces[] = {"trace-ch03.jsonl", "trace-ch04.jsonl"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, traces[i]);
        const char *trace = read_all(path);
        ck_assert_msg(strncmp(trace, "{\"trace\":\"kvlab\"", 16) == 0 && strstr(trace, "\n{\"end\":true,"), "%s", path);
    }
}
END_TEST

START_TEST(demo_refuses_bad_options)
{
    static const char *const cases[][3] = {{"--out", "/nonexistent/folder", "not a folder"},
                                           {"--kv-budget", "lots", "not a size"},
                                           {"--threads", "0", "--threads"},
                                           {"--requests", "/nonexistent/requests.tsv", "cannot open"},
                                           {"--frobnicate", NULL, "unknown option"},
                                           /* refused before chapter 1 runs, not after it */
                                           {"--kv-budget", "1KiB", "holds no request"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {"demo", cases[i][0], cases[i][1], NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        ck_assert_msg(r.status == 1 && test_count_lines(r.err) == 1 && strstr(r.err, "demo: error: ") == r.err &&
                          strstr(r.err, cases[i][2]) && r.out_len == 0,
                      "%s: expected one line with '%s' and exit 1, got %d:\n%s", cases[i][0], cases[i][2], r.status,
                      r.err);
        test_result_free(&r);
    }
}
END_TEST

Suite *suite_demo(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("demo");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, demo_runs_every_chapter_side_by_side);
    tcase_add_test(tc, demo_refuses_bad_options);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(demo)
