/* `--trace FILE` (common/serving/trace.h) and `--show-tables STEP` of
 * chapters 3 and 4, run as programs: the trace's deltas, replayed here,
 * give at a step exactly the block tables and regions that --show-tables
 * prints at that step; its lines are one per step, numbered in order; its
 * events count what the JSON report counts (preemptions, forks, copies on
 * write, finishes); bad values are refused in one line. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "suites.h"

#define MAX_REQS 64
#define MAX_BLOCKS 64

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* The integer after `"key":` in a JSON text (the first one). */
static long json_long(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    ck_assert_msg(p != NULL, "no %s in %.200s", key, text);
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return strtol(p, NULL, 10);
}

/* Runs a program and returns its stderr; the trace at @p trace. */
static ProgramResult run_ok(const char *const *argv)
{
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "%s exit %d: %s", argv[0], r.status, r.err);
    return r;
}

/* Every line after the first: "step" counts 0, 1, 2 ... and the last line
 * ends the trace with the number of steps. Returns the step lines. */
static int check_lines(const char *trace)
{
    ck_assert_msg(strncmp(trace, "{\"trace\":\"kvlab\",\"version\":1,", 29) == 0, "%.100s", trace);
    int steps = 0;
    const char *line = strchr(trace, '\n') + 1;
    while (*line && strncmp(line, "{\"step\":", 8) == 0) {
        ck_assert_int_eq(strtol(line + 8, NULL, 10), steps);
        steps++;
        line = strchr(line, '\n') + 1;
    }
    ck_assert_msg(strncmp(line, "{\"end\":true,", 12) == 0, "after %d steps: %.100s", steps, line);
    ck_assert_int_eq(json_long(line, "steps"), steps);
    ck_assert_str_eq(strchr(line, '\n'), "\n");
    return steps;
}

/* The line of step @p step (it ends at its newline). */
static const char *step_line(const char *trace, int step)
{
    char pat[48];
    snprintf(pat, sizeof pat, "\n{\"step\":%d,", step);
    const char *p = strstr(trace, pat);
    ck_assert_msg(p != NULL, "no line for step %d", step);
    return p + 1;
}

/* The object member `"key":{` of one line, or NULL. */
static const char *member(const char *line, const char *key)
{
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":{", key);
    const char *end = strchr(line, '\n'), *p = strstr(line, pat);
    return p && p < end ? p + strlen(pat) : NULL;
}

/* Chapter 4: "tables":{"i":[from,[b,...]],...} applied up to and with step. */
static void replay_tables(const char *trace, int step, int tables[MAX_REQS][MAX_BLOCKS], int *len)
{
    memset(len, 0, MAX_REQS * sizeof *len);
    for (int s = 0; s <= step; s++) {
        const char *p = member(step_line(trace, s), "tables");
        while (p && *p == '"') {
            char *q;
            long i = strtol(p + 1, &q, 10);          /* "i" */
            long from = strtol(q + 3, &q, 10);       /* ":[from */
            ck_assert(i >= 0 && i < MAX_REQS && from >= 0 && from <= len[i]);
            len[i] = (int)from;
            q += 2;                                  /* ,[ */
            while (*q != ']') {
                ck_assert(len[i] < MAX_BLOCKS);
                tables[i][len[i]++] = (int)strtol(q, &q, 10);
                if (*q == ',')
                    q++;
            }
            p = q + 2;                               /* ]] */
            if (*p == ',')
                p++;
        }
    }
}

/* Chapter 3: "regions":{"i":[first,positions],...} up to and with step. */
static void replay_regions(const char *trace, int step, long regions[MAX_REQS][2])
{
    memset(regions, 0, MAX_REQS * sizeof regions[0]);
    for (int s = 0; s <= step; s++) {
        const char *p = member(step_line(trace, s), "regions");
        while (p && *p == '"') {
            char *q;
            long i = strtol(p + 1, &q, 10);
            ck_assert(i >= 0 && i < MAX_REQS);
            regions[i][0] = strtol(q + 3, &q, 10);
            regions[i][1] = strtol(q + 1, &q, 10);
            p = q + 1;
            if (*p == ',')
                p++;
        }
    }
}

static char trace_path[PATH_MAX], json_path[PATH_MAX];

static void temp_paths(void)
{
    test_write_temp("", 0, trace_path);
    test_write_temp("", 0, json_path);
}

static void remove_paths(void)
{
    unlink(trace_path);
    unlink(json_path);
}

START_TEST(trace_ch04_tables_replay_to_show_tables)
{
    temp_paths();
    /* 256 KiB of the default model: 12 blocks for 20 requests, so requests
     * are preempted before step 40 and blocks change hands. */
    const char *argv[] = {"ch04-paged", "--kv-budget", "256KiB", "--quiet", "--trace", trace_path,
                          "--json", json_path, "--show-tables", "40", NULL};
    ProgramResult r = run_ok(argv);
    char *trace = test_slurp(trace_path), *json = test_slurp(json_path);
    int steps = check_lines(trace);
    ck_assert_int_eq(steps, json_long(json, "steps"));
    long preempted = json_long(json, "preemptions");
    ck_assert_msg(preempted > 0, "the budget must preempt for this test");
    ck_assert_int_eq(count_of(trace, "[\"preempt\","), preempted);
    ck_assert_int_eq(json_long(strstr(trace, "{\"end\""), "preemptions"), preempted);
    /* Every request ends once: finished, or rejected (longer than the pool). */
    int rejected = count_of(trace, "[\"reject\",");
    ck_assert_int_eq(count_of(trace, "[\"finish\",") + rejected, 20);
    ck_assert_int_eq(count_of(trace, "[\"admit\","), 20 - rejected + preempted); /* again after each preemption */

    static int tables[MAX_REQS][MAX_BLOCKS];
    int len[MAX_REQS], shown = 0;
    replay_tables(trace, 40, tables, len);
    const char *head = strstr(r.err, "--show-tables 40: the block tables after step 40");
    ck_assert_msg(head != NULL, "%s", r.err);
    for (int i = 0; i < 20; i++) {
        char want[512], pat[32];
        int n = snprintf(want, sizeof want, "table [");
        for (int k = 0; k < len[i]; k++)
            n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", k ? ", " : "", tables[i][k]);
        snprintf(want + n, sizeof want - (size_t)n, "]");
        snprintf(pat, sizeof pat, "  request %d: ", i);
        const char *line = strstr(head, pat);
        if (len[i] == 0) {
            ck_assert_msg(line == NULL || strstr(line, "swapped out") == line + strlen(pat),
                          "request %d holds no block in the trace but --show-tables prints it", i);
            continue;
        }
        ck_assert_msg(line != NULL, "request %d holds %s in the trace, not in --show-tables:\n%s", i, want, head);
        const char *nl = strchr(line, '\n'), *at = strstr(line, want);
        ck_assert_msg(at && at < nl, "request %d: the trace says %s, --show-tables:\n%.*s", i, want,
                      (int)(nl - line), line);
        shown++;
    }
    ck_assert_int_gt(shown, 0);
    free(trace);
    free(json);
    test_result_free(&r);
    remove_paths();
}
END_TEST

START_TEST(trace_ch04_forks_and_copies_on_write)
{
    temp_paths();
    const char *argv[] = {"ch04-paged", "--n", "3", "--temperature", "0.8", "--kv-budget", "512KiB", "--quiet",
                          "--trace", trace_path, "--json", json_path, NULL};
    ProgramResult r = run_ok(argv);
    char *trace = test_slurp(trace_path), *json = test_slurp(json_path);
    check_lines(trace);
    /* 20 prompts, 3 samples each: every prompt's two siblings are forked
     * from it once (readmissions after preemption fork again). */
    ck_assert_int_ge(count_of(trace, "[\"fork\","), 40);
    long cow = json_long(json, "cow_copies");
    ck_assert_msg(cow > 0, "no copy on write to check");
    ck_assert_int_eq(count_of(trace, "[\"cow\","), cow);
    /* A shared block is held by 3 tables right after a fork. */
    ck_assert_msg(strstr(trace, "\"refs\":{") && (strstr(trace, ":3,") || strstr(trace, ":3}")), "no block held by 3");
    free(trace);
    free(json);
    test_result_free(&r);
    remove_paths();
}
END_TEST

START_TEST(trace_ch03_regions_replay_to_show_tables)
{
    temp_paths();
    const char *argv[] = {"ch03-batching", "--reserve", "grow", "--batching", "continuous", "--kv-budget", "1MiB",
                          "--quiet", "--trace", trace_path, "--json", json_path, "--show-tables", "30", NULL};
    ProgramResult r = run_ok(argv);
    char *trace = test_slurp(trace_path), *json = test_slurp(json_path);
    ck_assert_int_eq(check_lines(trace), json_long(json, "steps"));
    ck_assert_msg(count_of(trace, "[\"move\",") > 0, "--reserve grow moves no region here");
    static long regions[MAX_REQS][2];
    replay_regions(trace, 30, regions);
    const char *head = strstr(r.err, "--show-tables 30: the regions after step 30");
    ck_assert_msg(head != NULL, "%s", r.err);
    int held = 0;
    for (int i = 0; i < 20; i++) {
        char pat[32], want[96];
        snprintf(pat, sizeof pat, "  request %d: ", i);
        const char *line = strstr(head, pat);
        if (regions[i][1] == 0) {
            ck_assert_msg(line == NULL, "request %d holds no region in the trace", i);
            continue;
        }
        snprintf(want, sizeof want, "region [%ld, %ld) of %ld positions", regions[i][0], regions[i][0] + regions[i][1],
                 regions[i][1]);
        ck_assert_msg(line && strstr(line, want) && strstr(line, want) < strchr(line, '\n'),
                      "request %d: the trace says %s:\n%s", i, want, head);
        held++;
    }
    ck_assert_int_gt(held, 0);
    free(trace);
    free(json);
    test_result_free(&r);
    remove_paths();
}
END_TEST

START_TEST(trace_refuses_bad_values_in_one_line)
{
    static const char *const cases[][4] = {
        {"ch04-paged", "--trace", "/nonexistent/folder/t.jsonl", "--trace"},
        {"ch03-batching", "--trace", "/nonexistent/folder/t.jsonl", "--trace"},
        {"ch04-paged", "--show-tables", "-1", "--show-tables"},
        {"ch03-batching", "--show-tables", "many", "--show-tables"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {cases[i][0], cases[i][1], cases[i][2], "--quiet", NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        ck_assert_msg(r.status == 1 && test_count_lines(r.err) == 1 && strstr(r.err, ": error: ") &&
                          strstr(r.err, cases[i][3]),
                      "%s %s %s: exit %d:\n%s", cases[i][0], cases[i][1], cases[i][2], r.status, r.err);
        test_result_free(&r);
    }
    /* A step the run never reaches is said, once. */
    const char *argv[] = {"ch04-paged", "--show-tables", "1000000", "--quiet", NULL};
    ProgramResult r = run_ok(argv);
    ck_assert_int_eq(count_of(r.err, "--show-tables 1000000: there is no such step; the run ended with step"), 1);
    test_result_free(&r);
}
END_TEST

Suite *suite_trace(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, trace_ch04_tables_replay_to_show_tables);
    tcase_add_test(tc, trace_ch04_forks_and_copies_on_write);
    tcase_add_test(tc, trace_ch03_regions_replay_to_show_tables);
    tcase_add_test(tc, trace_refuses_bad_values_in_one_line);
    suite_add_tcase(s, tc);
    return s;
}
REGISTER_LAB_SUITE(trace)
