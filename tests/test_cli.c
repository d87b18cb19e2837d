/* build/ch01-naive as a program: every kind of bad input gives exit status
 * 1, exactly one line on stderr that names the problem, and nothing on
 * stdout; --help; the default model; the JSON report and whether its
 * numbers agree with what the run allocated; thread-count independence;
 * both checkpoint formats end to end. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "forward.h"
#include "helpers.h"
#include "mem.h"
#include "model.h"
#include "sampler.h"
#include "suites.h"
#include "synth.h"
#include "tokenizer.h"

#define PROGRAM "ch01-naive"

/* vocab 400 leaves room for the synthetic tokenizer's 354 fixed tokens. */
static const ModelConfig SMALL = {32, 64, 2, 4, 2, 400, 32};

/* ------------------------------------------------------------ helpers */

static size_t file_size(const char *path)
{
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "cannot stat %s", path);
    return (size_t)st.st_size;
}

/* A synthetic image in memory, to corrupt before writing it out. */
static unsigned char *model_image(const ModelConfig *cfg, int ak42, size_t *bytes)
{
    SynthSpec spec = {.cfg = *cfg, .shared_classifier = 1, .ak42 = ak42, .seed = 1};
    void *image;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &image, bytes, &err) == 0, "%s", err.msg);
    unsigned char *copy = malloc(*bytes + 16);
    memcpy(copy, image, *bytes);
    memset(copy + *bytes, 0, 16);
    mem_free(image);
    return copy;
}

static void write_tokenizer(int vocab, char *path)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_tokenizer_image(vocab, &image, &bytes, &err) == 0, "%s", err.msg);
    test_write_temp(image, bytes, path);
    mem_free(image);
}

/* Runs the program and expects the one-line failure: status 1, a single
 * "ch01-naive: error: ..." line containing @p word, empty stdout. */
static void expect_failure(const char *const *argv, const char *word, const char *what)
{
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1, "%s: exit status %d, expected 1; stderr: %s", what, r.status, r.err);
    ck_assert_msg(r.out_len == 0, "%s: stdout must be empty, got '%s'", what, r.out);
    ck_assert_msg(test_count_lines(r.err) == 1, "%s: expected one line on stderr, got %d:\n%s", what,
                  test_count_lines(r.err), r.err);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: error: ", argv[0]);
    ck_assert_msg(strncmp(r.err, prefix, strlen(prefix)) == 0, "%s: the line must start with '%s': %s", what, prefix,
                  r.err);
    ck_assert_msg(strstr(r.err, word) != NULL, "%s: the message does not mention '%s': %s", what, word, r.err);
    test_result_free(&r);
}

/* Runs the program on a model file and the given tokenizer with a prompt. */
static void expect_model_failure(const char *model, const char *tok, const char *word, const char *what)
{
    const char *argv[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--steps", "4", NULL};
    expect_failure(argv, word, what);
}

/* Writes @p image with one int32 header field replaced and expects the
 * program to refuse it. */
static void expect_header_failure(const unsigned char *image, size_t bytes, int field, int32_t value,
                                  const char *tok, const char *word)
{
    unsigned char *bad = malloc(bytes);
    memcpy(bad, image, bytes);
    memcpy(bad + 4 * field, &value, 4);
    char path[PATH_MAX], what[64];
    test_write_temp(bad, bytes, path);
    snprintf(what, sizeof what, "header field %d = %d", field, value);
    expect_model_failure(path, tok, word, what);
    unlink(path);
    free(bad);
}

/* ----------------------------------------------------- a minimal JSON */

/* Where the value of "key" starts in @p json (the first occurrence, after
 * the colon and any spaces), or NULL. Enough for the report's flat keys. */
static const char *json_value(const char *json, const char *key)
{
    char quoted[80];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(json, quoted);
    if (!at)
        return NULL;
    at += strlen(quoted);
    while (*at == ' ' || *at == '\n')
        at++;
    return at;
}

static int json_has_key(const char *json, const char *key)
{
    return json_value(json, key) != NULL;
}

/* The number that "key" holds, or fails the test. */
static double json_number(const char *json, const char *key)
{
    const char *at = json_value(json, key);
    ck_assert_msg(at != NULL, "the JSON report has no key \"%s\"", key);
    char *end;
    double v = strtod(at, &end);
    ck_assert_msg(end != at, "\"%s\" is not followed by a number", key);
    return v;
}

/* The string that "key" holds (without escapes), copied into out. */
static void json_string_value(const char *json, const char *key, char *out, size_t n)
{
    const char *at = json_value(json, key);
    ck_assert_msg(at != NULL && *at == '"', "the JSON report has no string \"%s\"", key);
    at++;
    const char *end = strchr(at, '"');
    ck_assert(end != NULL && (size_t)(end - at) < n);
    memcpy(out, at, (size_t)(end - at));
    out[end - at] = '\0';
}

/* Runs a model to completion with --json, returns the report text. */
static char *run_with_json(const char *model, const char *tok, const char *threads, const char *steps,
                           ProgramResult *r)
{
    char json_path[] = "/tmp/kvlab-json-XXXXXX";
    int fd = mkstemp(json_path);
    ck_assert(fd >= 0);
    close(fd);
    const char *argv[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--steps", steps,
                          "--threads", threads, "--json", json_path, "--prompt", "Once upon a time", NULL};
    ck_assert_int_eq(test_run_program(argv, r), 0);
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    char *json = test_slurp(json_path);
    unlink(json_path);
    return json;
}

/* In the handout the chapters' lab code is the untouched exercises: the
 * tests that need chapter 1 to generate say SKIP there. */
static int skip_without_answers(const char *test)
{
    if (test_lab_answers())
        return 0;
    test_skip(test, "it runs chapter 1, whose lab code here is the untouched exercises (the handout)");
    return 1;
}

/* ------------------------------------------------------ bad input */

START_TEST(bad_files)
{
    char tok[PATH_MAX], model[PATH_MAX];
    write_tokenizer(SMALL.vocab_size, tok);
    expect_model_failure("/nonexistent/model.bin", tok, "cannot open", "missing model");
    expect_model_failure("/tmp", tok, "not a regular file", "a directory as the model");

    size_t bytes;
    unsigned char *image = model_image(&SMALL, 0, &bytes);
    test_write_temp(image, bytes - 3, model);
    expect_model_failure(model, tok, "truncated", "truncated checkpoint");
    unlink(model);
    test_write_temp(image, bytes + 8, model);
    expect_model_failure(model, tok, "oversized", "oversized checkpoint");
    unlink(model);
    test_write_temp(image, 12, model);
    expect_model_failure(model, tok, "too short", "a 12-byte checkpoint");
    unlink(model);
    test_write_temp(image, 0, model);
    expect_model_failure(model, tok, "too short", "an empty checkpoint");
    unlink(model);

    /* A file we may not read (root reads everything, so only as a user). */
    if (geteuid() != 0) {
        test_write_temp(image, bytes, model);
        ck_assert(chmod(model, 0) == 0);
        expect_model_failure(model, tok, "Permission denied", "an unreadable checkpoint");
        unlink(model);
    }

    /* A FIFO would block a plain open() until someone writes to it. */
    char fifo[PATH_MAX + 8];
    snprintf(fifo, sizeof fifo, "%s.fifo", tok);
    ck_assert(mkfifo(fifo, 0600) == 0);
    expect_model_failure(fifo, tok, "not a regular file", "a FIFO as the model");

    /* A valid model with a missing or broken tokenizer. */
    test_write_temp(image, bytes, model);
    expect_model_failure(model, fifo, "not a regular file", "a FIFO as the tokenizer");
    unlink(fifo);
    expect_model_failure(model, "/nonexistent/tok.bin", "cannot open", "missing tokenizer");
    expect_model_failure(model, "/tmp", "not a regular file", "a directory as the tokenizer");
    expect_model_failure(model, "/dev/null", "/dev/null", "/dev/null as the tokenizer");
    unlink(model);
    free(image);
    unlink(tok);
}
END_TEST

START_TEST(bad_header_values)
{
    char tok[PATH_MAX];
    write_tokenizer(SMALL.vocab_size, tok);
    size_t bytes;
    unsigned char *legacy = model_image(&SMALL, 0, &bytes);
    /* fields: 0 dim, 1 hidden_dim, 2 n_layers, 3 n_heads, 4 n_kv_heads, 5 vocab_size, 6 seq_len */
    expect_header_failure(legacy, bytes, 0, 0, tok, "dim is 0");
    expect_header_failure(legacy, bytes, 0, -32, tok, "dim is -32");
    expect_header_failure(legacy, bytes, 1, 0, tok, "hidden_dim is 0");
    expect_header_failure(legacy, bytes, 2, -1, tok, "n_layers is -1");
    expect_header_failure(legacy, bytes, 2, INT32_MAX, tok, "plausible");
    expect_header_failure(legacy, bytes, 3, 0, tok, "n_heads is 0");
    expect_header_failure(legacy, bytes, 4, -2, tok, "n_kv_heads is -2");
    expect_header_failure(legacy, bytes, 5, 0, tok, "vocab_size is 0");
    expect_header_failure(legacy, bytes, 5, INT32_MIN, tok, "vocab_size");
    expect_header_failure(legacy, bytes, 6, 0, tok, "seq_len is 0");
    expect_header_failure(legacy, bytes, 6, 1 << 30, tok, "plausible");
    expect_header_failure(legacy, bytes, 0, 1 << 30, tok, "plausible");
    /* Shapes that no forward pass can run. */
    expect_header_failure(legacy, bytes, 3, 3, tok, "does not divide");   /* 32 % 3 */
    expect_header_failure(legacy, bytes, 4, 3, tok, "not a multiple");    /* 4 heads, 3 kv heads */
    expect_header_failure(legacy, bytes, 4, 8, tok, "not a multiple");    /* more kv heads than heads */
    expect_header_failure(legacy, bytes, 3, 32, tok, "odd");              /* head size 1 */
    /* A header whose values are fine but whose size no longer matches. */
    expect_header_failure(legacy, bytes, 6, 64, tok, "truncated");        /* longer legacy RoPE tables */
    expect_header_failure(legacy, bytes, 2, 1, tok, "oversized");
    free(legacy);

    /* The same checks reach through the ak42 header (values start at byte 8). */
    unsigned char *ak42 = model_image(&SMALL, 1, &bytes);
    expect_header_failure(ak42, bytes, 2, 0, tok, "dim is 0");
    expect_header_failure(ak42, bytes, 5, 3, tok, "does not divide");
    expect_header_failure(ak42, bytes, 1, 2, tok, "version 2");
    free(ak42);
    unlink(tok);
}
END_TEST

START_TEST(tokenizer_vocab_mismatch)
{
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&SMALL, 1, 0, 1, model, tok);
    char small_tok[PATH_MAX], big_tok[PATH_MAX];
    write_tokenizer(SMALL.vocab_size - 40, small_tok);
    write_tokenizer(SMALL.vocab_size + 112, big_tok);
    expect_model_failure(model, small_tok, "has only 360 tokens, the model's vocabulary has 400",
                         "a smaller tokenizer");
    expect_model_failure(model, big_tok, "more tokens than the model's vocabulary of 400", "a larger tokenizer");
    unlink(model), unlink(tok), unlink(small_tok), unlink(big_tok);
}
END_TEST

START_TEST(bad_prompts)
{
    char model[PATH_MAX], tok[PATH_MAX];
    ModelConfig short_cfg = SMALL;
    short_cfg.seq_len = 8;
    test_write_synthetic(&short_cfg, 2, 0, 1, model, tok);
    char json[PATH_MAX + 8];
    snprintf(json, sizeof json, "%s.json", model);
    const char *empty[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--prompt", "", "--json", json, NULL};
    expect_failure(empty, "empty", "empty prompt");
    ck_assert_msg(access(json, F_OK) != 0, "a failed run left a report file behind");
    /* BOS, the dummy-prefix space and 8 letters (uppercase never merges in
     * the synthetic vocabulary): 10 ids, more than seq_len 8. */
    const char *longer[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--prompt", "ABCDEFGH", NULL};
    expect_failure(longer, "seq_len is 8", "prompt longer than seq_len");
    /* BOS, space and 7 letters: seq_len + 1 ids, one too many. */
    const char *one_over[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--prompt", "ABCDEFG", NULL};
    expect_failure(one_over, "seq_len is 8", "prompt of seq_len + 1 ids");
    if (skip_without_answers("bad_prompts (its last case, a prompt of seq_len ids)")) {
        unlink(model), unlink(tok);
        return;
    }
    /* BOS, space and 6 letters: exactly seq_len ids fill the context, and
     * the last position still predicts one token (as llama2.c does). */
    const char *exact[] = {PROGRAM, "--model", model, "--tokenizer", tok, "--prompt", "ABCDEF", "--json", json,
                           "--quiet", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(exact, &r), 0);
    ck_assert_msg(r.status == 0, "prompt of seq_len ids: exit %d, stderr %s", r.status, r.err);
    char *report = test_slurp(json);
    ck_assert_msg(report && strstr(report, "\"tokens_generated\": 1,"), "expected one token: %s", report);
    free(report);
    unlink(json);
    test_result_free(&r);
    unlink(model), unlink(tok);
}
END_TEST

START_TEST(bad_options)
{
    static const struct {
        const char *args[4];
        const char *word;
    } cases[] = {
        {{"--steps", "0"}, "--steps"},
        {{"--steps", "abc"}, "not a whole number"},
        {{"--steps", "-5"}, "--steps"},
        {{"--steps", "99999999999999999999"}, "--steps"},
        {{"--steps", "12x"}, "not a whole number"},
        {{"--temperature", "-1"}, "--temperature"},
        {{"--temperature", "nan"}, "--temperature"},
        {{"--temperature", "hot"}, "--temperature"},
        {{"--top-p", "2"}, "--top-p"},
        {{"--top-p", "-0.5"}, "--top-p"},
        {{"--top-k", "-1"}, "--top-k"},
        {{"--top-k", "2.5"}, "not a whole number"},
        {{"--top-k", "99999999999"}, "--top-k"},
        {{"--min-p", "1.5"}, "--min-p"},
        {{"--min-p", "-0.1"}, "--min-p"},
        {{"--min-p", "nan"}, "--min-p"},
        {{"--repetition-penalty", "0"}, "--repetition-penalty"},
        {{"--repetition-penalty", "-1.2"}, "--repetition-penalty"},
        {{"--repetition-penalty", "0.001"}, "--repetition-penalty"},
        {{"--repetition-penalty", "1000"}, "--repetition-penalty"},
        {{"--repetition-penalty", "inf"}, "--repetition-penalty"},
        {{"--frequency-penalty", "2.5"}, "--frequency-penalty"},
        {{"--frequency-penalty", "-2.01"}, "--frequency-penalty"},
        {{"--presence-penalty", "-3"}, "--presence-penalty"},
        {{"--presence-penalty", "some"}, "--presence-penalty"},
        {{"--presence-penalty"}, "needs a value"},
        {{"--seed", "-1"}, "--seed"},
        {{"--seed", "x"}, "--seed"},
        {{"--threads", "-1"}, "--threads"},
        {{"--bogus"}, "unknown option '--bogus'"},
        {{"-x"}, "unknown option '-x'"},
        {{"--kv-alloc", "max"}, "unknown option '--kv-alloc'"}, /* chapter 2's option */
        {{"--steps"}, "needs a value"},
        {{"--prompt"}, "needs a value"},
        {{"stray"}, "unexpected argument 'stray'"},
        {{"--steps", "3", "extra"}, "unexpected argument 'extra'"},
        {{"--json", "/nonexistent/dir/report.json"}, "--json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[6] = {PROGRAM};
        int n = 1;
        for (int k = 0; k < 4 && cases[i].args[k]; k++)
            argv[n++] = cases[i].args[k];
        argv[n] = NULL;
        char what[128];
        snprintf(what, sizeof what, "%s %s", cases[i].args[0], cases[i].args[1] ? cases[i].args[1] : "");
        expect_failure(argv, cases[i].word, what);
    }
}
END_TEST

/* --chat needs the model's ChatML template: a llama2.c tokenizer has none,
 * and every chapter refuses it in one line before printing anything. */
START_TEST(chat_without_template_is_refused)
{
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&SMALL, 2, 0, 1, model, tok);
    static const char *const programs[] = {"ch01-naive", "ch02-kvcache", "ch03-batching", "ch04-paged"};
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        const char *argv[] = {programs[i], "--model", model, "--tokenizer", tok, "--chat", NULL};
        expect_failure(argv, "no chat template", programs[i]);
    }
    unlink(model), unlink(tok);
}
END_TEST

/* The sampling options: parsed into the fields the sampler takes, with
 * neutral defaults, and one refusal line naming the option in every
 * chapter. */
START_TEST(sampling_options_are_parsed)
{
    static const CliProgram prog = {"t", "test", CLI_SAMPLING};
    CliOptions o;
    Err err = {{0}};
    char *none[] = {"t", NULL};
    ck_assert_int_eq(cli_parse(&prog, 1, none, &o, &err), CLI_RUN);
    SamplingParams p = cli_sampling_params(&o);
    ck_assert_msg(p.temperature == 0.0f && p.top_p == 0.9f && p.top_k == 0 && p.min_p == 0.0f &&
                      p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f,
                  "the defaults are not neutral");
    ck_assert(!sampling_params_penalize(&p));
    char *all[] = {"t", "--temperature", "0.7", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
                   "--repetition-penalty", "1.2", "--frequency-penalty", "-0.5", "--presence-penalty", "2", NULL};
    ck_assert_msg(cli_parse(&prog, 15, all, &o, &err) == CLI_RUN, "%s", err.msg);
    p = cli_sampling_params(&o);
    ck_assert_msg(p.temperature == 0.7f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f &&
                      p.repetition_penalty == 1.2f && p.frequency_penalty == -0.5f && p.presence_penalty == 2.0f,
                  "parsed %g %d %g %g %g %g %g", (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p,
                  (double)p.repetition_penalty, (double)p.frequency_penalty, (double)p.presence_penalty);
    ck_assert_int_eq(sampling_params_check(&p, &err), 0);
    /* Temperature 0 with every filter on is accepted: it is greedy. */
    char *greedy[] = {"t", "--temperature", "0", "--top-k", "5", "--min-p", "0.5", NULL};
    ck_assert_int_eq(cli_parse(&prog, 7, greedy, &o, &err), CLI_RUN);
    /* A program without the sampling group refuses the options. */
    static const CliProgram other = {"t", "test", CLI_MODEL};
    char *top_k[] = {"t", "--top-k", "5", NULL};
    ck_assert_int_eq(cli_parse(&other, 3, top_k, &o, &err), CLI_ERROR);
    ck_assert_msg(strstr(err.msg, "unknown option '--top-k'"), "%s", err.msg);
}
END_TEST

START_TEST(every_chapter_refuses_bad_sampling_options)
{
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&SMALL, 2, 0, 1, model, tok);
    static const char *const programs[] = {"ch01-naive",  "ch02-kvcache", "ch03-batching",
                                           "ch04-paged", "ch05-prefix",  "ch06-window"};
    static const char *const bad[][2] = {{"--top-k", "-3"},
                                         {"--min-p", "2"},
                                         {"--repetition-penalty", "0"},
                                         {"--frequency-penalty", "9"},
                                         {"--presence-penalty", "-2.5"}};
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            const char *argv[] = {programs[i], "--model", model, "--tokenizer", tok, bad[k][0], bad[k][1], NULL};
            char what[96];
            snprintf(what, sizeof what, "%s %s %s", programs[i], bad[k][0], bad[k][1]);
            expect_failure(argv, bad[k][0], what);
        }
    unlink(model), unlink(tok);
}
END_TEST

/* ------------------------------------------------------------ runs */

START_TEST(help_goes_to_stdout)
{
    const char *argv[] = {PROGRAM, "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "Usage: " PROGRAM) != NULL, "no usage line on stdout: %s", r.out);
    static const char *const options[] = {"--model", "--tokenizer", "--prompt", "--steps", "--temperature",
                                          "--top-p", "--top-k", "--min-p", "--repetition-penalty",
                                          "--frequency-penalty", "--presence-penalty", "--seed", "--json",
                                          "--threads", "--help"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        ck_assert_msg(strstr(r.out, options[i]) != NULL, "--help does not mention %s", options[i]);
    ck_assert_msg(strstr(r.out, "--kv-alloc") == NULL, "chapter 1 must not offer chapter 2's --kv-alloc");
    ck_assert_msg(strstr(r.out, "--chat") != NULL, "--help does not mention --chat");
    ck_assert_msg(r.err[0] == '\0', "--help wrote to stderr: %s", r.err);
    test_result_free(&r);
}
END_TEST

/* Without --model the program finds stories260K in models/, then in
 * ../shared/models/, else makes a synthetic model, and says which. */
START_TEST(default_model_is_announced)
{
    if (skip_without_answers("default_model_is_announced"))
        return;
    /* The programs also search beside the executable, so what they find
     * depends on the working directory only when that is the project root. */
    if (access("common/model/model.h", F_OK) != 0) {
        test_skip("default_model_is_announced", "not run from the project root");
        return;
    }
    const char *argv[] = {PROGRAM, "--steps", "3", "--quiet", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *want;
    if (access("models/stories260K.bin", R_OK) == 0)
        want = "model models/stories260K.bin";
    else if (access("../shared/models/stories260K.bin", R_OK) == 0)
        want = "model ../shared/models/stories260K.bin";
    else
        want = "synthetic";
    ck_assert_msg(strstr(r.err, want) != NULL, "stderr does not say '%s':\n%s", want, r.err);
    ck_assert_msg(strstr(r.err, "tokenizer ") != NULL, "stderr does not name the tokenizer:\n%s", r.err);
    ck_assert_msg(strncmp(r.out, "Once upon a time", 16) == 0, "stdout does not start with the prompt: %s", r.out);
    test_result_free(&r);
}
END_TEST

/* Every key issue 2 asks for, and whether the numbers agree with the model
 * and with what the run allocated. The expected activation bytes are
 * computed here from the allocation plans (forward_state_bytes(), the
 * transient K/V of chapter 1, the sampler, the generation buffers, and the
 * tokenizer as the ledger measures it in this process), never copied. */
START_TEST(json_report_agrees_with_allocations)
{
    if (skip_without_answers("json_report_agrees_with_allocations"))
        return;
    ModelConfig cfg = {64, 172, 3, 8, 4, 512, 96};
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&cfg, 5, 0, 1, model, tok);
    for (int threads = 1; threads <= 2; threads++) {
        ProgramResult r;
        char threads_arg[16];
        snprintf(threads_arg, sizeof threads_arg, "%d", threads);
        char *json = run_with_json(model, tok, threads_arg, "20", &r);

        static const char *const keys[] = {
            "chapter", "device", "model", "kv_bytes_per_token", "weights_bytes", "activations_bytes",
            "kv_reserved_bytes", "kv_used_bytes", "kv_peak_reserved_bytes", "kv_peak_used_bytes",
            "tokens_generated", "elapsed_s", "tokens_per_s"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            ck_assert_msg(json_has_key(json, keys[i]), "the JSON report lacks \"%s\":\n%s", keys[i], json);
        char text[64];
        json_string_value(json, "chapter", text, sizeof text);
        ck_assert_str_eq(text, PROGRAM);
        json_string_value(json, "device", text, sizeof text);
        ck_assert_str_eq(text, "cpu");

        /* The seven header values, inside "model". */
        const char *m = json_value(json, "model");
        ck_assert_msg(m != NULL && *m == '{', "\"model\" is not an object");
        const int want_cfg[7] = {cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads,
                                 cfg.vocab_size, cfg.seq_len};
        static const char *const names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                             "vocab_size", "seq_len"};
        for (int i = 0; i < 7; i++)
            ck_assert_msg(json_number(m, names[i]) == want_cfg[i], "model.%s is %g, expected %d", names[i],
                          json_number(m, names[i]), want_cfg[i]);

        int head_dim = cfg.dim / cfg.n_heads, kv_dim = cfg.n_kv_heads * head_dim;
        ck_assert_msg(json_number(json, "kv_bytes_per_token") == 2.0 * cfg.n_layers * cfg.n_kv_heads * head_dim * 4,
                      "kv_bytes_per_token is %g", json_number(json, "kv_bytes_per_token"));
        ck_assert_msg(json_number(json, "weights_bytes") == (double)file_size(model), "weights_bytes %g, file %zu",
                      json_number(json, "weights_bytes"), file_size(model));

        /* Chapter 1 keeps no KV: all four KV figures are zero. */
        ck_assert(json_number(json, "kv_reserved_bytes") == 0 && json_number(json, "kv_used_bytes") == 0);
        ck_assert(json_number(json, "kv_peak_reserved_bytes") == 0 && json_number(json, "kv_peak_used_bytes") == 0);

        /* Activations: what the run's allocation plans add up to. */
        Tokenizer t;
        Err err = {{0}};
        size_t before = mem_current(MEM_ACTIVATIONS, MEM_HOST);
        ck_assert_msg(tokenizer_load(&t, tok, cfg.vocab_size, &err) == 0, "%s", err.msg);
        size_t tokenizer_bytes = mem_current(MEM_ACTIVATIONS, MEM_HOST) - before;
        size_t stream_bytes = (size_t)tokenizer_max_piece_bytes(&t) + 8; /* the DecodeStream's text */
        tokenizer_free(&t);
        size_t seq = (size_t)cfg.seq_len;
        size_t expected = forward_state_bytes(&cfg, cfg.seq_len, 1, threads) /* a step of up to seq_len tokens */
                          + 2 * seq * (size_t)kv_dim * sizeof(float)          /* chapter 1's transient K/V */
                          + (size_t)cfg.vocab_size * sizeof(ProbIndex)        /* sampler scratch */
                          + (seq + 1) * sizeof(int)                           /* generation: ids, one past seq_len */
                          + seq * sizeof(BatchEntry)                          /* generation: the step's batch */
                          + (seq + 2) * sizeof(double)                        /* generation: step times */
                          + stream_bytes                                      /* generation: printing */
                          + tokenizer_bytes;
        ck_assert_msg(json_number(json, "activations_bytes") == (double)expected,
                      "threads %d: activations_bytes %.0f, the allocation plans add up to %zu", threads,
                      json_number(json, "activations_bytes"), expected);

        double generated = json_number(json, "tokens_generated");
        ck_assert_msg(generated >= 1 && generated <= 20, "tokens_generated %g", generated);
        ck_assert(json_number(json, "elapsed_s") > 0);
        ck_assert(json_number(json, "tokens_per_s") > 0);
        free(json);
        test_result_free(&r);
    }
    unlink(model), unlink(tok);
}
END_TEST

START_TEST(threads_do_not_change_output)
{
    if (skip_without_answers("threads_do_not_change_output"))
        return;
    /* Wide enough that matmuls and attention take their parallel paths. */
    ModelConfig cfg = {64, 172, 3, 8, 4, 512, 128};
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&cfg, 6, 0, 1, model, tok);
    ProgramResult one, two;
    char *json1 = run_with_json(model, tok, "1", "100", &one);
    char *json2 = run_with_json(model, tok, "2", "100", &two);
    ck_assert_msg(one.out_len == two.out_len && memcmp(one.out, two.out, one.out_len) == 0,
                  "stdout differs between 1 and 2 threads:\n%s\n---\n%s", one.out, two.out);
    const char *t1 = strstr(json1, "\"tokens\":"), *t2 = strstr(json2, "\"tokens\":");
    ck_assert(t1 && t2);
    size_t len1 = strcspn(t1, "]"), len2 = strcspn(t2, "]");
    ck_assert_msg(len1 == len2 && memcmp(t1, t2, len1) == 0, "token ids differ between 1 and 2 threads");
    free(json1), free(json2);
    test_result_free(&one), test_result_free(&two);
    unlink(model), unlink(tok);
}
END_TEST

/* Both formats, shared and unshared classifiers, run end to end; a model
 * with a short seq_len stops there. */
START_TEST(both_formats_run_end_to_end)
{
    if (skip_without_answers("both_formats_run_end_to_end"))
        return;
    for (int ak42 = 0; ak42 <= 1; ak42++)
        for (int shared = 0; shared <= 1; shared++) {
            ModelConfig cfg = SMALL;
            cfg.seq_len = 24;
            char model[PATH_MAX], tok[PATH_MAX];
            test_write_synthetic(&cfg, 40 + (unsigned)(2 * ak42 + shared), ak42, shared, model, tok);
            ProgramResult r;
            char *json = run_with_json(model, tok, "1", "1000", &r);
            ck_assert_msg(strncmp(r.out, "Once upon a time", 16) == 0, "ak42 %d shared %d: stdout '%s'", ak42,
                          shared, r.out);
            ck_assert_msg(r.out_len > 16 && r.out[r.out_len - 1] == '\n', "ak42 %d: stdout must end in a newline",
                          ak42);
            char finish[16];
            json_string_value(json, "finish", finish, sizeof finish);
            double generated = json_number(json, "tokens_generated"), prompt = json_number(json, "prompt_tokens");
            if (strcmp(finish, "seq_len") == 0)
                ck_assert_msg(prompt + generated == cfg.seq_len + 1, "stopped at seq_len with %g + %g tokens",
                              prompt, generated); /* like llama2.c: the token sampled at the last position */
            else
                ck_assert_msg(strcmp(finish, "stop") == 0, "1000 steps cannot finish by length at seq_len 24: %s",
                              finish);
            free(json);
            test_result_free(&r);
            unlink(model), unlink(tok);
        }
}
END_TEST

/* --steps N gives exactly N tokens when nothing stops the run earlier. */
START_TEST(steps_are_honoured)
{
    if (skip_without_answers("steps_are_honoured"))
        return;
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&SMALL, 8, 1, 0, model, tok);
    ProgramResult r;
    char *json = run_with_json(model, tok, "1", "7", &r);
    char finish[16];
    json_string_value(json, "finish", finish, sizeof finish);
    if (strcmp(finish, "length") == 0)
        ck_assert_msg(json_number(json, "tokens_generated") == 7, "finished by length after %g tokens",
                      json_number(json, "tokens_generated"));
    else
        ck_assert_str_eq(finish, "stop");
    free(json);
    test_result_free(&r);
    unlink(model), unlink(tok);
}
END_TEST

Suite *suite_cli(void)
{
    Suite *s = suite_create("cli");
    TCase *bad = tcase_create("bad-input");
    tcase_set_timeout(bad, 120);
    tcase_add_test(bad, bad_files);
    tcase_add_test(bad, bad_header_values);
    tcase_add_test(bad, tokenizer_vocab_mismatch);
    tcase_add_test(bad, bad_prompts);
    tcase_add_test(bad, bad_options);
    tcase_add_test(bad, chat_without_template_is_refused);
    tcase_add_test(bad, sampling_options_are_parsed);
    tcase_add_test(bad, every_chapter_refuses_bad_sampling_options);
    suite_add_tcase(s, bad);
    TCase *runs = tcase_create("runs");
    tcase_set_timeout(runs, 120);
    tcase_add_test(runs, help_goes_to_stdout);
    tcase_add_test(runs, default_model_is_announced);
    tcase_add_test(runs, json_report_agrees_with_allocations);
    tcase_add_test(runs, threads_do_not_change_output);
    tcase_add_test(runs, both_formats_run_end_to_end);
    tcase_add_test(runs, steps_are_honoured);
    suite_add_tcase(s, runs);
    return s;
}

REGISTER_SUITE(cli)
