/* build/tokenize: ids on one line, --decode, --chat, --count, --pieces,
 * --file, for the llama2.c tokenizer and the GGUF one; bad input gets one
 * line on stderr and exit status 1. Cases that need ../shared/models print
 * SKIP without it. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "suites.h"

#define SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"

static void run(const char *const *argv, ProgramResult *r)
{
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_output(const char *const *argv, const char *want)
{
    ProgramResult r;
    run(argv, &r);
    ck_assert_msg(r.status == 0, "%s %s exited with %d: %s", argv[0], argv[1], r.status, r.err);
    ck_assert_msg(strcmp(r.out, want) == 0, "%s %s printed '%s', expected '%s'", argv[0], argv[1], r.out, want);
    test_result_free(&r);
}

static void expect_error(const char *const *argv, const char *word)
{
    ProgramResult r;
    run(argv, &r);
    ck_assert_msg(r.status == 1, "%s %s exited with %d, expected 1", argv[0], argv[1], r.status);
    ck_assert_msg(r.out_len == 0, "stdout is not empty: '%s'", r.out);
    ck_assert_msg(strncmp(r.err, "tokenize: error: ", 17) == 0 && strstr(r.err, word), "stderr '%s' lacks '%s'",
                  r.err, word);
    ck_assert_msg(test_count_lines(r.err) == 1, "stderr is not one line: '%s'", r.err);
    test_result_free(&r);
}

/* --info prints each of @p lines (NULL-terminated) somewhere. */
static void expect_info(const char *model, const char *const *lines)
{
    ProgramResult r;
    run((const char *const[]){"tokenize", "--model", model, "--info", NULL}, &r);
    ck_assert_msg(r.status == 0, "--info exited with %d: %s", r.status, r.err);
    for (int i = 0; lines[i]; i++)
        ck_assert_msg(strstr(r.out, lines[i]), "--info lacks '%s':\n%s", lines[i], r.out);
    test_result_free(&r);
}

START_TEST(llama2c_ids_and_back)
{
    if (!test_shared_file("stories260K.bin") || !test_shared_file("tok512.bin")) {
        test_skip("llama2c_ids_and_back", TEST_NOT_FOUND("stories260K.bin or tok512.bin"));
        return;
    }
    char model[PATH_MAX], tok[PATH_MAX];
    snprintf(model, sizeof model, "%s", test_shared_file("stories260K.bin"));
    snprintf(tok, sizeof tok, "%s", test_shared_file("tok512.bin"));
    /* The published encoding, with the tokenizer given or found by vocabulary size. */
    expect_output((const char *const[]){"tokenize", "--model", model, "Once upon a time", NULL}, "1 403 407 261 378\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--tokenizer", tok, "Once upon a time", NULL},
                  "1 403 407 261 378\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--count", "Once upon a time", NULL}, "5\n");
    /* BOS prints nothing and the dummy-prefix space after it is dropped, as the programs print. */
    expect_output(
        (const char *const[]){"tokenize", "--model", model, "--decode", "1", "403", "407", "261", "378", NULL},
        "Once upon a time\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--pieces", "Once", NULL},
                  "1\t\"\\n<s>\\n\"\n403\t\" Once\"\n"); /* tok512's BOS is "\n<s>\n" */
    expect_error((const char *const[]){"tokenize", "--model", model, "--chat", "Hi", NULL},
                 "the model has no chat template");
    expect_info(model, (const char *const[]){"llama2.c", "vocabulary       512 tokens", "BOS              1 (added",
                                              "chat template    none", NULL});
    expect_error((const char *const[]){"tokenize", "--model", model, "--decode", "512", NULL},
                 "token id 512 is outside the vocabulary (0..511)");
}
END_TEST

START_TEST(gguf_ids_chat_and_back)
{
    const char *model = test_shared_file(SMOLLM2);
    if (!model) {
        test_skip("gguf_ids_chat_and_back", TEST_NOT_FOUND(SMOLLM2));
        return;
    }
    expect_output((const char *const[]){"tokenize", "--model", model, "Once upon a time", NULL}, "6403 1980 253 655\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--chat", "--count",
                                        "What is the capital of France?", NULL},
                  "37\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--chat", "Hi", NULL},
                  "1 9690 198 2683 359 253 5356 5646 11173 3365 3511 308 34519 28 7018 411 407 19712 8182 2 198 1 "
                  "4093 198 26843 2 198 1 520 9531 198\n"); /* ids from Hugging Face */
    expect_output((const char *const[]){"tokenize", "--model", model, "--decode", "504", "3575", "282", "4649", "314",
                                        "7042", "30", NULL},
                  "The capital of France is Paris.\n");
    /* The emoji's two tokens, and the control token as its text. */
    expect_output((const char *const[]){"tokenize", "--model", model, "--decode", "1", "40303", "218", NULL},
                  "<|im_start|> \xf0\x9f\x98\x80\n");
    expect_output((const char *const[]){"tokenize", "--model", model, "--pieces", " \xf0\x9f\x98\x80!", NULL},
                  "40303\t\" \\xF0\\x9F\\x98\"\n218\t\"\\x80\"\n17\t\"!\"\n");
    expect_info(model, (const char *const[]){"GPT-2 byte-level BPE", "vocabulary       49152 tokens",
                                              "merges           48900", "control tokens   17", "(not added to prompts)",
                                              "longest token    81 bytes", "ends a turn with token 2",
                                              "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                                              NULL});
    expect_error((const char *const[]){"tokenize", "--model", model, "--tokenizer", "x.bin", "Hi", NULL},
                 "--tokenizer is for llama2.c models");
    expect_error((const char *const[]){"tokenize", "--model", model, "--decode", "49152", NULL},
                 "token id 49152 is outside the vocabulary (0..49151)");
}
END_TEST

START_TEST(text_from_a_file)
{
    const char *model = test_shared_file(SMOLLM2);
    if (!model) {
        test_skip("text_from_a_file", TEST_NOT_FOUND(SMOLLM2));
        return;
    }
    char path[PATH_MAX];
    test_write_temp("Once upon a time", 16, path);
    expect_output((const char *const[]){"tokenize", "--model", model, "--file", path, NULL}, "6403 1980 253 655\n");
    unlink(path);
    test_write_temp("a\0b", 3, path);
    expect_error((const char *const[]){"tokenize", "--model", model, "--file", path, NULL}, "NUL byte at offset 1");
    unlink(path);
    expect_error((const char *const[]){"tokenize", "--model", model, "--file", "/tmp", NULL}, "not a regular file");
    expect_error((const char *const[]){"tokenize", "--model", model, "--file", "/nonexistent/x", NULL},
                 "cannot open");
    char fifo[PATH_MAX];
    snprintf(fifo, sizeof fifo, "/tmp/kvlab-tokenize-fifo-%d", (int)getpid());
    ck_assert(mkfifo(fifo, 0600) == 0);
    expect_error((const char *const[]){"tokenize", "--model", model, "--file", fifo, NULL}, "not a regular file");
    unlink(fifo);
}
END_TEST

START_TEST(bad_command_lines)
{
    expect_error((const char *const[]){"tokenize", NULL}, "no text given");
    expect_error((const char *const[]){"tokenize", "two", "words", NULL}, "as one argument");
    expect_error((const char *const[]){"tokenize", "--bogus", "x", NULL}, "unknown option '--bogus'");
    expect_error((const char *const[]){"tokenize", "x", "--model", NULL}, "'--model' needs a value");
    expect_error((const char *const[]){"tokenize", "--decode", NULL}, "at least one token id");
    expect_error((const char *const[]){"tokenize", "--decode", "12x", NULL}, "'12x' is not a token id");
    expect_error((const char *const[]){"tokenize", "--decode", "-1", NULL}, "unknown option '-1'");
    expect_error((const char *const[]){"tokenize", "--decode", "--", "-1", NULL}, "'-1' is not a token id");
    expect_error((const char *const[]){"tokenize", "--decode", " 5", NULL}, "' 5' is not a token id");
    expect_error((const char *const[]){"tokenize", "--decode", "--chat", "5", NULL}, "--decode takes ids only");
    expect_error((const char *const[]){"tokenize", "--file", "f", "text", NULL}, "not both");
    expect_error((const char *const[]){"tokenize", "--info", "text", NULL}, "--info takes no text");
    expect_error((const char *const[]){"tokenize", "--model", "/nonexistent.gguf", "x", NULL}, "/nonexistent.gguf");
    ProgramResult r;
    run((const char *const[]){"tokenize", "--help", NULL}, &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "Usage: tokenize") && strstr(r.out, "--chat") && strstr(r.out, "--decode"));
    test_result_free(&r);
}
END_TEST

Suite *suite_tokenize_tool(void)
{
    Suite *s = suite_create("tokenize_tool");
    TCase *tc = tcase_create("tokenize_tool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, llama2c_ids_and_back);
    tcase_add_test(tc, gguf_ids_chat_and_back);
    tcase_add_test(tc, text_from_a_file);
    tcase_add_test(tc, bad_command_lines);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(tokenize_tool)
