/* Synthetic models: the build/synth-model tool (deterministic bytes, the
 * shape asked for, both formats, a matching tokenizer, one-line errors)
 * and the presets, whose files must be exactly as large as the real
 * TinyStories checkpoints they stand in for. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "mem.h"
#include "model.h"
#include "suites.h"
#include "synth.h"
#include "tokenizer.h"

#define TOOL "synth-model"

/* A fresh temporary path that does not exist yet. */
static void temp_path(char *out)
{
    snprintf(out, PATH_MAX, "/tmp/kvlab-synth-XXXXXX");
    int fd = mkstemp(out);
    ck_assert(fd >= 0);
    close(fd);
    unlink(out);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s was not written", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)size + 1);
    ck_assert_int_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

/* Runs the tool with extra arguments plus --out (and --tokenizer-out when
 * tok is not NULL); expects success. */
static void run_tool(const char *const *args, const char *out, const char *tok)
{
    const char *argv[32] = {TOOL};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n++] = "--out";
    argv[n++] = out;
    if (tok) {
        argv[n++] = "--tokenizer-out";
        argv[n++] = tok;
    }
    argv[n] = NULL;
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "synth-model failed (%d): %s", r.status, r.err);
    ck_assert_msg(r.out_len == 0, "synth-model wrote to stdout: %s", r.out);
    test_result_free(&r);
}

static int files_equal(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

START_TEST(same_arguments_same_bytes)
{
    static const char *const variants[][12] = {
        {"--preset", "tiny", NULL},
        {"--dim", "48", "--hidden-dim", "100", "--layers", "3", "--heads", "6", "--kv-heads", "3", NULL},
        {"--preset", "tiny", "--format", "ak42", "--unshared-classifier", "--seed", "99", NULL},
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        char m1[PATH_MAX], m2[PATH_MAX], t1[PATH_MAX], t2[PATH_MAX];
        temp_path(m1), temp_path(m2), temp_path(t1), temp_path(t2);
        run_tool(variants[v], m1, t1);
        run_tool(variants[v], m2, t2);
        ck_assert_msg(files_equal(m1, m2), "variant %zu: two runs wrote different checkpoints", v);
        ck_assert_msg(files_equal(t1, t2), "variant %zu: two runs wrote different tokenizers", v);
        unlink(m1), unlink(m2), unlink(t1), unlink(t2);
    }
    /* The tool writes what the library builds in memory for the same spec. */
    char m[PATH_MAX];
    temp_path(m);
    const char *args[] = {"--preset", "tiny", "--seed", "7", "--format", "ak42", NULL};
    run_tool(args, m, NULL);
    SynthSpec spec = {.shared_classifier = 1, .ak42 = 1, .seed = 7};
    synth_preset("tiny", &spec.cfg);
    void *image;
    size_t bytes, n;
    Err err = {{0}};
    ck_assert(synth_model_image(&spec, &image, &bytes, &err) == 0);
    unsigned char *file = slurp(m, &n);
    ck_assert_msg(n == bytes && memcmp(file, image, n) == 0, "the file differs from synth_model_image()");
    free(file);
    mem_free(image);
    unlink(m);
}
END_TEST

START_TEST(seed_and_format_change_the_bytes)
{
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
    temp_path(a), temp_path(b), temp_path(c);
    const char *seed1[] = {"--seed", "1", NULL}, *seed2[] = {"--seed", "2", NULL};
    const char *ak42[] = {"--seed", "1", "--format", "ak42", NULL};
    run_tool(seed1, a, NULL);
    run_tool(seed2, b, NULL);
    run_tool(ak42, c, NULL);
    ck_assert_msg(!files_equal(a, b), "seeds 1 and 2 wrote the same checkpoint");
    ck_assert_msg(!files_equal(a, c), "legacy and ak42 wrote the same bytes");
    unlink(a), unlink(b), unlink(c);
}
END_TEST

/* Explicit sizes override the preset; the file loads with exactly that
 * shape, format and classifier, and the tokenizer has that vocabulary. */
START_TEST(writes_the_shape_asked_for)
{
    char m[PATH_MAX], t[PATH_MAX];
    temp_path(m), temp_path(t);
    const char *args[] = {"--preset", "stories260K", "--dim", "36", "--heads", "6", "--kv-heads", "2",
                          "--layers", "3", "--hidden-dim", "70", "--vocab", "377", "--seq-len", "40",
                          "--format", "ak42", "--unshared-classifier", NULL};
    run_tool(args, m, t);
    Model model;
    Err err = {{0}};
    ck_assert_msg(model_load(&model, m, &err) == 0, "%s", err.msg);
    const ModelConfig want = {36, 70, 3, 6, 2, 377, 40};
    ck_assert_mem_eq(&model.cfg, &want, sizeof want);
    ck_assert_int_eq(model.format, MODEL_FORMAT_AK42_V1);
    ck_assert_int_eq(model.shared_classifier, 0);
    Tokenizer tok;
    ck_assert_msg(tokenizer_load(&tok, t, 377, &err) == 0, "%s", err.msg);
    tokenizer_free(&tok);
    model_free(&model);

    /* Without --tokenizer-out, no tokenizer is written. */
    unlink(t);
    const char *plain[] = {"--preset", "tiny", NULL};
    run_tool(plain, m, NULL);
    ck_assert_msg(access(t, F_OK) != 0, "a tokenizer appeared without --tokenizer-out");
    ck_assert_msg(model_load(&model, m, &err) == 0, "%s", err.msg);
    ModelConfig tiny;
    synth_preset("tiny", &tiny);
    ck_assert_mem_eq(&model.cfg, &tiny, sizeof tiny);
    ck_assert_int_eq(model.format, MODEL_FORMAT_LEGACY);
    ck_assert_int_eq(model.shared_classifier, 1);
    model_free(&model);
    unlink(m);
}
END_TEST

/* The presets have the real checkpoints' shapes, so a legacy file of each
 * is exactly as large as the real one (sizes from ../shared/models/README.md
 * and the tinyllamas release); stories42M and stories110M are checked by
 * arithmetic, without writing hundreds of megabytes. */
START_TEST(presets_match_the_real_checkpoints)
{
    static const struct {
        const char *preset;
        size_t bytes;
    } real[] = {
        {"stories260K", 1056540},
        {"stories15M", 60816028},
        {"stories42M", 167020572},
        {"stories110M", 438381596},
    };
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        ModelConfig c;
        ck_assert_int_eq(synth_preset(real[i].preset, &c), 0);
        size_t L = (size_t)c.n_layers, dim = (size_t)c.dim, hid = (size_t)c.hidden_dim;
        size_t kv = (size_t)c.n_kv_heads * (dim / (size_t)c.n_heads);
        size_t floats = (size_t)c.vocab_size * dim + 2 * L * dim + 2 * L * dim * dim + 2 * L * kv * dim +
                        3 * L * hid * dim + dim + (size_t)c.seq_len * (dim / (size_t)c.n_heads);
        ck_assert_msg(28 + 4 * floats == real[i].bytes, "%s: the preset implies %zu bytes, the real file has %zu",
                      real[i].preset, 28 + 4 * floats, real[i].bytes);
        if (real[i].bytes < 100000000) { /* and the tool agrees, for the small ones */
            char m[PATH_MAX];
            temp_path(m);
            const char *args[] = {"--preset", real[i].preset, NULL};
            run_tool(args, m, NULL);
            struct stat st;
            ck_assert(stat(m, &st) == 0);
            ck_assert_msg((size_t)st.st_size == real[i].bytes, "%s: wrote %lld bytes", real[i].preset,
                          (long long)st.st_size);
            unlink(m);
        }
    }
    ModelConfig c;
    ck_assert_int_eq(synth_preset("stories1B", &c), -1);
}
END_TEST

static void expect_tool_failure(const char *const *args, const char *word)
{
    const char *argv[32] = {TOOL};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 1, "'%s ...': exit %d, expected 1: %s", args[0] ? args[0] : "", r.status, r.err);
    ck_assert_msg(r.out_len == 0, "stdout must be empty: %s", r.out);
    ck_assert_msg(test_count_lines(r.err) == 1, "expected one line on stderr, got:\n%s", r.err);
    ck_assert_msg(strncmp(r.err, TOOL ": error: ", strlen(TOOL ": error: ")) == 0, "bad prefix: %s", r.err);
    ck_assert_msg(strstr(r.err, word) != NULL, "'%s' lacks '%s'", r.err, word);
    test_result_free(&r);
}

START_TEST(bad_options_one_line)
{
    char m[PATH_MAX], t[PATH_MAX];
    temp_path(m), temp_path(t);
    const char *no_out[] = {"--preset", "tiny", NULL};
    expect_tool_failure(no_out, "--out");
    const char *cases[][8] = {
        {"--preset", "huge", "--out", m, NULL},
        {"--dim", "abc", "--out", m, NULL},
        {"--dim", "99999999999", "--out", m, NULL},
        {"--dim", "0", "--out", m, NULL},
        {"--dim", "33", "--out", m, NULL},
        {"--kv-heads", "3", "--out", m, NULL},
        {"--heads", "32", "--out", m, NULL},
        {"--seq-len", "-4", "--out", m, NULL},
        {"--seed", "-1", "--out", m, NULL},
        {"--format", "gguf", "--out", m, NULL},
        {"--bogus", "--out", m, NULL},
        {"--out", m, "stray", NULL},
        {"--out", NULL},
        {"--vocab", "300", "--out", m, "--tokenizer-out", t, NULL},
        {"--out", "/nonexistent/dir/model.bin", NULL},
        {"--out", m, "--tokenizer-out", "/nonexistent/dir/tok.bin", NULL},
    };
    static const char *const words[] = {
        "--preset", "not a whole number", "not a whole number", "dim is 0", "does not divide", "multiple",
        "odd", "seq_len is -4", "--seed", "--format", "unknown option", "unexpected argument", "needs a value",
        "354", "cannot create", "--tokenizer-out /nonexistent/dir/tok.bin: cannot create",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_tool_failure(cases[i], words[i]);
        ck_assert_msg(access(m, F_OK) != 0, "case %zu left a checkpoint behind", i);
        ck_assert_msg(access(t, F_OK) != 0, "case %zu left a tokenizer behind", i);
    }
}
END_TEST

START_TEST(help_on_stdout)
{
    const char *argv[] = {TOOL, "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "Usage: " TOOL), "%s", r.out);
    ck_assert_msg(strstr(r.out, "stories110M") && strstr(r.out, "--tokenizer-out"), "%s", r.out);
    ck_assert_msg(r.err[0] == '\0', "stderr: %s", r.err);
    test_result_free(&r);
}
END_TEST

Suite *suite_synth(void)
{
    Suite *s = suite_create("synth");
    TCase *tc = tcase_create("synth-model");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, same_arguments_same_bytes);
    tcase_add_test(tc, seed_and_format_change_the_bytes);
    tcase_add_test(tc, writes_the_shape_asked_for);
    tcase_add_test(tc, presets_match_the_real_checkpoints);
    tcase_add_test(tc, bad_options_one_line);
    tcase_add_test(tc, help_on_stdout);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(synth)
