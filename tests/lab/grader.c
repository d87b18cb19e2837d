/* The lab grader: runs one chapter's graded tests and prints a score.
 *
 *   build/lab-exercises/lab-ch01                   every test of the lab
 *   build/lab-exercises/lab-ch01 attend_gqa ...    only the tests named
 *   options: --title TEXT        first line of the report
 *            --no-fork           run tests in this process (no time limit, no
 *                                crash isolation): for gdb and printf debugging
 *            --expect full       exit 1 unless every test passes (make grade)
 *            --expect incomplete exit 1 if every test passes (CI, on the
 *                                untouched exercises: stubs must fail)
 *            --results FILE      also write the results in the format of
 *                                Gradescope's autograder (results.json):
 *                                top-level score, and each test with its
 *                                name, score, max_score, status and output
 *                                (what was expected, and the hint)
 *
 * Each test runs alone, in a child process (Check's fork mode) with its own
 * time limit, so a crash or a hang in the student's code fails that test
 * only. What the child printed is captured and shown under the test it
 * belongs to. A score is not an error: without --expect the exit status is
 * 0 whatever the score. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "outfile.h"
#include "lab/grading.h"

#define MAX_TESTS 128
#define SHOWN_OUTPUT_LINES 12

/* The graded tests, in the order lab_suite() added them. */
static const char *test_names[MAX_TESTS];
static double test_timeouts[MAX_TESTS];
static int n_tests;
static int registry_frozen; /* lab_suite() is called again for every run */
static int no_fork;         /* --no-fork: run in this process, for a debugger */
static const char *program; /* argv[0], for the hints */

void lab_add_test(Suite *s, const TTest *test, double timeout_s)
{
    TCase *tc = tcase_create(test->name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
    if (registry_frozen)
        return;
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "grader: more than %d lab tests; raise MAX_TESTS in tests/lab/grader.c\n", MAX_TESTS);
        exit(2);
    }
    test_names[n_tests] = test->name;
    test_timeouts[n_tests] = timeout_s;
    n_tests++;
}

float lab_max_abs_diff(const float *a, const float *b, int n, int *where)
{
    float worst = 0.0f;
    int at = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!isfinite(d))
            d = INFINITY;
        if (d > worst || (i == 0 && d == worst)) {
            worst = d;
            at = i;
        }
    }
    if (where)
        *where = at;
    return worst;
}

/* How one test ended. */
typedef struct {
    int rtype;        /* CK_PASS, CK_FAILURE or CK_ERROR */
    char msg[4096];   /* Check's message: the assertion's, or why the child died */
    char where[512];  /* file:line of the failing assertion */
    char *output;     /* what the child printed (malloc'd, NUL-terminated) */
} Outcome;

static char *read_stream(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    rewind(f);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger)
                break;
            buf = bigger;
        }
    }
    buf[n] = '\0';
    return buf;
}

/* The chapter's tests, then the instructor's hidden ones if linked in. */
static Suite *graded_suite(void)
{
    Suite *s = lab_suite();
    if (lab_hidden_tests)
        lab_hidden_tests(s);
    return s;
}

/* Runs one test in a fresh runner, with stdout and stderr of the child
 * going to a temporary file. Returns -1 when the test could not be run. */
static int run_one(const char *name, Outcome *o)
{
    memset(o, 0, sizeof *o);
    FILE *capture = tmpfile();
    if (!capture)
        return -1;
    SRunner *sr = srunner_create(graded_suite());
    srunner_set_fork_status(sr, no_fork ? CK_NOFORK : CK_FORK);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(capture), 1);
    dup2(fileno(capture), 2);
    srunner_run(sr, NULL, name, CK_SILENT);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);

    int status = -1;
    if (srunner_ntests_run(sr) == 1) {
        TestResult **results = srunner_results(sr); /* the array is ours to free */
        TestResult *r = results[0];
        o->rtype = tr_rtype(r);
        snprintf(o->msg, sizeof o->msg, "%s", tr_msg(r) ? tr_msg(r) : "");
        snprintf(o->where, sizeof o->where, "%s:%d", tr_lfile(r) ? tr_lfile(r) : "?", tr_lno(r));
        free(results);
        status = 0;
    }
    o->output = read_stream(capture);
    fclose(capture);
    srunner_free(sr);
    return status;
}

/* What a child's death means, for someone who did not expect it. */
static void explain_error(FILE *out, const char *name, const Outcome *o, double timeout_s)
{
    const char *m = o->msg;
    if (strstr(m, "timeout"))
        fprintf(out, "      did not finish within %.0f s\n"
               "      hint: a loop that never ends? check the bounds and the step of every loop you wrote\n",
               timeout_s);
    else if (strstr(m, "signal 11") || strstr(m, "signal 7"))
        fprintf(out, "      crashed: %s\n"
               "      hint: an index outside a buffer? compare your indexing with the shape comments\n"
               "            ([rows][cols]) and the loop bounds; to see where it crashes, run\n"
               "            gdb -ex run --args %s --no-fork %s\n",
               m, program, name);
    else if (strstr(m, "signal 8"))
        fprintf(out, "      crashed: %s\n      hint: an integer division by zero\n", m);
    else if (strstr(m, "Early exit"))
        fprintf(out, "      the test process exited early (%s)\n"
               "      hint: library code must return, never call exit(); a sanitizer report also ends this way\n",
               m);
    else
        fprintf(out, "      crashed: %s\n", m);
}

/* Prints n bytes of text indented, also after each newline inside it. */
static void print_indented(FILE *out, const char *text, int n)
{
    fprintf(out, "      ");
    for (int i = 0; i < n && text[i]; i++) {
        fputc(text[i], out);
        if (text[i] == '\n' && i + 1 < n && text[i + 1])
            fprintf(out, "      ");
    }
    fputc('\n', out);
}

/* "expected X, got Y; hint: Z" is printed as two lines. */
static void print_failure(FILE *out, const Outcome *o)
{
    const char *hint = strstr(o->msg, "; hint: ");
    if (hint) {
        print_indented(out, o->msg, (int)(hint - o->msg));
        print_indented(out, hint + 2, (int)strlen(hint + 2));
    } else {
        print_indented(out, o->msg, (int)strlen(o->msg));
    }
}

/* The child's output, each run of repeated lines shown once. */
static void print_output(FILE *out, const char *text)
{
    if (!text || !*text)
        return;
    fprintf(out, "      your code printed:\n");
    int shown = 0, skipped = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        int repeat = prev && prev_len == len && memcmp(prev, line, len) == 0;
        if (!repeat) {
            if (shown < SHOWN_OUTPUT_LINES)
                fprintf(out, "        %.*s\n", (int)len, line);
            else
                skipped++;
            shown++;
        }
        prev = line;
        prev_len = len;
        line = end ? end + 1 : line + len;
    }
    if (skipped)
        fprintf(out, "        ... (%d more lines)\n", skipped);
}

/* A passing test that printed "SKIP: name: why" was skipped, not run. */
static const char *skip_reason(const char *output)
{
    const char *skip = output ? strstr(output, "SKIP: ") : NULL;
    if (!skip)
        return NULL;
    const char *why = strstr(skip, ": ");
    why = why ? strstr(why + 2, ": ") : NULL;
    return why ? why + 2 : skip;
}

/* Prints one test's result to @p out; returns 1 when it passed. */
static int report_one(FILE *out, int i, const Outcome *o)
{
    const char *name = test_names[i];
    if (o->rtype == CK_PASS) {
        const char *skip = skip_reason(o->output);
        if (skip)
            fprintf(out, "PASS  %s (skipped: %.*s)\n", name, (int)strcspn(skip, "\n"), skip);
        else
            fprintf(out, "PASS  %s\n", name);
        return 1;
    }
    if (o->rtype == CK_ERROR) {
        fprintf(out, "FAIL  %s  (after %s)\n", name, o->where);
        explain_error(out, name, o, test_timeouts[i]);
    } else {
        fprintf(out, "FAIL  %s  (%s)\n", name, o->where);
        print_failure(out, o);
    }
    print_output(out, o->output);
    return 0;
}

/* One test's result for results.json: the report as printed, each line
 * without its indentation (Gradescope shows the text as it is). */
typedef struct {
    int run;     /* 1 when the test was run */
    int passed;  /* 1 when it passed */
    char *text;  /* what report_one() printed (malloc'd) */
} GradedTest;

static char *unindented(const char *text)
{
    char *copy = malloc(strlen(text) + 1), *w = copy;
    if (!copy)
        return NULL;
    for (const char *line = text; *line;) {
        while (*line == ' ')
            line++;
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        memcpy(w, line, len);
        w += len;
        line += len;
    }
    *w = '\0';
    return copy;
}

/* results.json as Gradescope's autograder reads it: each graded test one
 * point, the score their sum. */
static int write_results(const char *path, const char *title, const GradedTest *g, int passed)
{
    /* A temporary file renamed into place: an autograder never reads half
     * a results.json, and a failed write leaves the previous one. */
    OutFile out;
    Err err = {{0}};
    if (outfile_open(&out, "--results", path, &err)) {
        fprintf(stderr, "grader: error: %s\n", err.msg);
        return -1;
    }
    FILE *f = out.f;
    JsonWriter j;
    json_init(&j, f, 1);
    json_begin_object(&j, NULL);
    json_double(&j, "score", (double)passed);
    json_string(&j, "output", title);
    json_begin_array(&j, "tests");
    for (int i = 0; i < n_tests; i++) {
        if (!g[i].run)
            continue;
        char *text = unindented(g[i].text ? g[i].text : "");
        json_begin_object(&j, NULL);
        json_string(&j, "name", test_names[i]);
        json_double(&j, "score", g[i].passed ? 1.0 : 0.0);
        json_double(&j, "max_score", 1.0);
        json_string(&j, "status", g[i].passed ? "passed" : "failed");
        json_string(&j, "output", text ? text : "");
        json_end_object(&j);
        free(text);
    }
    json_end_array(&j);
    json_end_object(&j);
    fputc('\n', f);
    if (outfile_commit(&out, &err)) {
        fprintf(stderr, "grader: error: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int wanted(const char *name, int n_selected, char **selected)
{
    if (n_selected == 0)
        return 1;
    for (int i = 0; i < n_selected; i++)
        if (strcmp(selected[i], name) == 0)
            return 1;
    return 0;
}

static int known_test(const char *name)
{
    for (int i = 0; i < n_tests; i++)
        if (strcmp(test_names[i], name) == 0)
            return 1;
    return 0;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s [--title TEXT] [--expect full|incomplete] [--results FILE] [--no-fork] [TEST...]\n", prog);
}

int main(int argc, char **argv)
{
    const char *title = "lab", *expect = NULL, *results = NULL;
    program = argv[0];
    int first_test = 1;
    for (; first_test < argc && strncmp(argv[first_test], "--", 2) == 0; first_test++) {
        const char *opt = argv[first_test];
        if (strcmp(opt, "--help") == 0) {
            usage(stdout, argv[0]);
            return 0;
        }
        if (strcmp(opt, "--no-fork") == 0) {
            no_fork = 1;
            continue;
        }
        if (first_test + 1 == argc || (strcmp(opt, "--title") && strcmp(opt, "--expect") && strcmp(opt, "--results"))) {
            usage(stderr, argv[0]);
            return 2;
        }
        if (strcmp(opt, "--title") == 0)
            title = argv[++first_test];
        else if (strcmp(opt, "--results") == 0)
            results = argv[++first_test];
        else
            expect = argv[++first_test];
    }
    if (expect && strcmp(expect, "full") && strcmp(expect, "incomplete")) {
        fprintf(stderr, "grader: --expect takes full or incomplete, not '%s'\n", expect);
        return 2;
    }
    Err results_err = {{0}};
    if (results && outfile_check("--results", results, &results_err)) { /* a FIFO or a device: before any test */
        fprintf(stderr, "grader: error: %s\n", results_err.msg);
        return 2;
    }

    /* Build the suite once to learn the test names, then once per run. */
    srunner_free(srunner_create(graded_suite()));
    registry_frozen = 1;
    if (n_tests == 0) {
        fprintf(stderr, "grader: lab_suite() added no test with lab_add_test()\n");
        return 2;
    }
    for (int i = first_test; i < argc; i++)
        if (!known_test(argv[i])) {
            fprintf(stderr, "grader: no lab test named '%s'; the tests are:", argv[i]);
            for (int t = 0; t < n_tests; t++)
                fprintf(stderr, " %s", test_names[t]);
            fprintf(stderr, "\n");
            return 2;
        }

    printf("%s\n", title);
    static GradedTest graded[MAX_TESTS];
    int run = 0, passed = 0;
    for (int i = 0; i < n_tests; i++) {
        if (!wanted(test_names[i], argc - first_test, argv + first_test))
            continue;
        Outcome o;
        if (run_one(test_names[i], &o)) {
            fprintf(stderr, "grader: could not run test %s\n", test_names[i]);
            free(o.output);
            return 2;
        }
        run++;
        size_t len = 0;
        FILE *report = open_memstream(&graded[i].text, &len);
        graded[i].run = 1;
        graded[i].passed = report_one(report ? report : stdout, i, &o);
        passed += graded[i].passed;
        if (report) {
            fclose(report);
            fputs(graded[i].text, stdout);
        }
        fflush(stdout);
        free(o.output);
    }
    printf("Score: %d/%d\n", passed, run);
    int results_failed = results && write_results(results, title, graded, passed) != 0;
    for (int i = 0; i < n_tests; i++)
        free(graded[i].text);
    if (results_failed)
        return 2;

    if (expect && strcmp(expect, "full") == 0 && passed < run) {
        fprintf(stderr, "grader: expected full marks, got %d/%d\n", passed, run);
        return 1;
    }
    if (expect && strcmp(expect, "incomplete") == 0 && passed == run) {
        fprintf(stderr, "grader: expected a failing score, but all %d tests passed: the lab tests do not catch the stubs\n",
                run);
        return 1;
    }
    return 0;
}
