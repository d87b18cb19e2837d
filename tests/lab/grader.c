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
 *                                top-level score and output, and each test
 *                                with its name, score, max_score, status,
 *                                visibility and output (what was expected,
 *                                and the hint)
 *            --note FILE         text for the top-level output of
 *                                results.json (make lab passes the
 *                                compiler's warnings)
 *
 * Each test runs alone, in a child process (Check's fork mode) with its own
 * time limit, so a crash or a hang in the student's code fails that test
 * only. What the child printed is captured and shown under the test it
 * belongs to. A test scores its points when it passes, 0 otherwise; one
 * that was skipped (it printed "SKIP: ...") scores 0 too and says why. A
 * score is not an error: without --expect the exit status is 0 whatever
 * the score. */
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
#define NOTE_MAX (16 * 1024)

/* The graded tests, in the order lab_suite() (then lab_hidden_tests()) added them. */
typedef struct {
    const char *name;
    double timeout_s;
    int points;
    const char *exercises;  /* the function under test, as hints name it */
    const char *visibility; /* Gradescope's */
} GradedInfo;

static GradedInfo tests[MAX_TESTS];
static int n_tests;
static int registry_frozen; /* lab_suite() is called again for every run */
static int no_fork;         /* --no-fork: run in this process, for a debugger */
static const char *program; /* argv[0], for the hints */
static const char *visibility_now = "visible";

void lab_set_visibility(const char *visibility)
{
    static const char *const known[] = {"visible", "hidden", "after_due_date", "after_published"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(visibility, known[i]) == 0) {
            visibility_now = known[i];
            return;
        }
    fprintf(stderr, "grader: lab_set_visibility(\"%s\"): Gradescope knows visible, hidden, after_due_date and "
                    "after_published\n", visibility);
    exit(2);
}

void lab_add_test(Suite *s, const TTest *test, double timeout_s, int points, const char *exercises)
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
    if (points < 1 || !exercises || !*exercises) {
        fprintf(stderr, "grader: test %s: give it 1 point or more and the function it exercises\n", test->name);
        exit(2);
    }
    tests[n_tests++] = (GradedInfo){test->name, timeout_s, points, exercises, visibility_now};
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

/* The chapter's tests, then the instructor's hidden ones if linked in
 * (visible only once the results are published, unless they say). */
static Suite *graded_suite(void)
{
    lab_set_visibility("visible");
    Suite *s = lab_suite();
    if (lab_hidden_tests) {
        lab_set_visibility("after_published");
        lab_hidden_tests(s);
        lab_set_visibility("visible");
    }
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
static void explain_error(FILE *out, const GradedInfo *t, const Outcome *o)
{
    const char *m = o->msg, *f = t->exercises;
    if (strstr(m, "timeout"))
        fprintf(out, "      did not finish within %.0f s\n"
               "      hint: %s never returned: a loop that never ends? check the bounds and the step of every\n"
               "            loop in it (a linked list walked without moving on, a counter that never reaches its end)\n",
               t->timeout_s, f);
    else if (strstr(m, "signal 11") || strstr(m, "signal 7"))
        fprintf(out, "      crashed: %s\n"
               "      hint: in %s, an index outside a buffer? compare the indexing with the shape comments\n"
               "            ([rows][cols]) and the loop bounds; to see where it crashes, run\n"
               "            gdb -ex run --args %s --no-fork %s\n",
               m, f, program, t->name);
    else if (strstr(m, "signal 8"))
        fprintf(out, "      crashed: %s\n      hint: an integer division by zero in %s\n", m, f);
    else if (strstr(m, "Early exit"))
        fprintf(out, "      the test process exited early (%s)\n"
               "      hint: %s must return, never call exit(); a sanitizer report also ends this way\n",
               m, f);
    else
        fprintf(out, "      crashed: %s (in %s)\n", m, f);
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

/* How a test ended, for the score. */
typedef enum { GRADE_FAILED, GRADE_PASSED, GRADE_SKIPPED } Grade;

/* "  [3 points]" after the name of a test worth more than one. */
static void points_note(const GradedInfo *t, char *buf, size_t n)
{
    buf[0] = '\0';
    if (t->points > 1)
        snprintf(buf, n, "  [%d points]", t->points);
}

/* Prints one test's result to @p out. */
static Grade report_one(FILE *out, const GradedInfo *t, const Outcome *o)
{
    char pts[32];
    points_note(t, pts, sizeof pts);
    if (o->rtype == CK_PASS) {
        const char *skip = skip_reason(o->output);
        if (!skip) {
            fprintf(out, "PASS  %s%s\n", t->name, pts);
            return GRADE_PASSED;
        }
        fprintf(out, "SKIP  %s%s  (not run: 0 of %d point%s)\n      why: %.*s\n"
                "      hint: a test that did not run earns nothing; put the file it names in models/ and grade again\n",
                t->name, pts, t->points, t->points == 1 ? "" : "s", (int)strcspn(skip, "\n"), skip);
        return GRADE_SKIPPED;
    }
    if (o->rtype == CK_ERROR) {
        fprintf(out, "FAIL  %s%s  (after %s)\n", t->name, pts, o->where);
        explain_error(out, t, o);
    } else {
        fprintf(out, "FAIL  %s%s  (%s)\n", t->name, pts, o->where);
        print_failure(out, o);
    }
    print_output(out, o->output);
    return GRADE_FAILED;
}

/* One test's result for results.json: the report as printed, each line
 * without its indentation (Gradescope shows the text as it is). */
typedef struct {
    int run;     /* 1 when the test was run */
    Grade grade; /* how it ended */
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

/* results.json as Gradescope's autograder reads it: each test its points
 * when passed (0 when failed or skipped), the score their sum. */
static int write_results(const char *path, const char *output, const GradedTest *g, int score)
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
    json_double(&j, "score", (double)score);
    json_string(&j, "output", output);
    json_begin_array(&j, "tests");
    for (int i = 0; i < n_tests; i++) {
        if (!g[i].run)
            continue;
        char *text = unindented(g[i].text ? g[i].text : "");
        json_begin_object(&j, NULL);
        json_string(&j, "name", tests[i].name);
        json_double(&j, "score", g[i].grade == GRADE_PASSED ? (double)tests[i].points : 0.0);
        json_double(&j, "max_score", (double)tests[i].points);
        json_string(&j, "status", g[i].grade == GRADE_PASSED ? "passed" : "failed");
        json_string(&j, "visibility", tests[i].visibility);
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

/* The top-level output of results.json: the title, the score line, and
 * the note (the compiler's warnings), if any. */
static char *top_output(const char *title, const char *score_line, const char *note_path)
{
    char note[NOTE_MAX] = "";
    if (note_path) {
        FILE *f = fopen(note_path, "r");
        if (f) {
            size_t n = fread(note, 1, sizeof note - 1, f);
            note[n] = '\0';
            fclose(f);
        }
    }
    size_t len = strlen(title) + strlen(score_line) + strlen(note) + 4;
    char *text = malloc(len);
    if (text)
        snprintf(text, len, "%s\n%s%s%s", title, score_line, *note ? "\n" : "", note);
    return text;
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
        if (strcmp(tests[i].name, name) == 0)
            return 1;
    return 0;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f, "usage: %s [--title TEXT] [--expect full|incomplete] [--results FILE] [--note FILE] [--no-fork] "
               "[TEST...]\n", prog);
}

/* Options; returns the index of the first test name, or -1 (exit 2) / -2 (help). */
static int parse_args(int argc, char **argv, const char **title, const char **expect, const char **results,
                      const char **note)
{
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0) {
            usage(stdout, argv[0]);
            return -2;
        }
        if (strcmp(opt, "--no-fork") == 0) {
            no_fork = 1;
            continue;
        }
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = strcmp(opt, "--title") == 0     ? title
                            : strcmp(opt, "--expect") == 0  ? expect
                            : strcmp(opt, "--results") == 0 ? results
                            : strcmp(opt, "--note") == 0    ? note
                                                            : NULL;
        if (!slot || !value) {
            usage(stderr, argv[0]);
            return -1;
        }
        *slot = value;
        i++;
    }
    return i;
}

int main(int argc, char **argv)
{
    const char *title = "lab", *expect = NULL, *results = NULL, *note = NULL;
    program = argv[0];
    int first_test = parse_args(argc, argv, &title, &expect, &results, &note);
    if (first_test < 0)
        return first_test == -2 ? 0 : 2;
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
                fprintf(stderr, " %s", tests[t].name);
            fprintf(stderr, "\n");
            return 2;
        }

    printf("%s\n", title);
    static GradedTest graded[MAX_TESTS];
    int run = 0, passed = 0, skipped = 0, score = 0, max_score = 0;
    for (int i = 0; i < n_tests; i++) {
        if (!wanted(tests[i].name, argc - first_test, argv + first_test))
            continue;
        Outcome o;
        if (run_one(tests[i].name, &o)) {
            fprintf(stderr, "grader: could not run test %s\n", tests[i].name);
            free(o.output);
            return 2;
        }
        run++;
        size_t len = 0;
        FILE *report = open_memstream(&graded[i].text, &len);
        graded[i].run = 1;
        graded[i].grade = report_one(report ? report : stdout, &tests[i], &o);
        passed += graded[i].grade == GRADE_PASSED;
        skipped += graded[i].grade == GRADE_SKIPPED;
        score += graded[i].grade == GRADE_PASSED ? tests[i].points : 0;
        max_score += tests[i].points;
        if (report) {
            fclose(report);
            fputs(graded[i].text, stdout);
        }
        fflush(stdout);
        free(o.output);
    }
    char score_line[256];
    snprintf(score_line, sizeof score_line, "Score: %d/%d", score, max_score);
    printf("%s\n", score_line);
    if (passed < run)
        printf("(%d of %d tests passed%s)\n", passed, run,
               skipped ? "; a skipped test did not run and scores 0, not its points" : "");
    char *output = results ? top_output(title, score_line, note) : NULL;
    int results_failed = results && write_results(results, output ? output : title, graded, score) != 0;
    free(output);
    for (int i = 0; i < n_tests; i++)
        free(graded[i].text);
    if (results_failed)
        return 2;

    if (expect && strcmp(expect, "full") == 0 && score < max_score) {
        fprintf(stderr, "grader: expected full marks, got %d/%d\n", score, max_score);
        return 1;
    }
    if (expect && strcmp(expect, "incomplete") == 0 && score == max_score) {
        fprintf(stderr, "grader: expected a failing score, but all %d tests passed: the lab tests do not catch the stubs\n",
                run);
        return 1;
    }
    return 0;
}
