/* ChatML rendering on small vocabularies with hand-written templates: the
 * default system message read from the template (real and escaped
 * newlines, escaped quotes, a variable before the default), no system
 * turn, the exact prompt bytes, and templates and models refused in one
 * line. The SmolLM2 prompts against Jinja2 are in test_tokenizer_gguf.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "mem.h"
#include "suites.h"
#include "synth.h"
#include "tokenizer.h"

/* A vocabulary of the two ChatML control tokens (when @p controls) and
 * the 256 GPT-2 byte characters, with @p tpl as its chat template. */
typedef struct {
    char strings[258][16];
    BpeString tokens[258];
    int32_t types[258];
} ChatVocab;

static int open_with_template(Tokenizer *t, ChatVocab *v, const char *tpl, int controls, Err *err)
{
    memset(v, 0, sizeof *v);
    snprintf(v->strings[0], 16, "<|im_start|>");
    snprintf(v->strings[1], 16, "<|im_end|>");
    v->types[0] = v->types[1] = controls ? BPE_TYPE_CONTROL : BPE_TYPE_NORMAL;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        int cp = keep ? b : 256 + n++;
        char *s = v->strings[2 + b];
        if (cp < 0x80) {
            s[0] = (char)cp;
        } else {
            s[0] = (char)(0xC0 | (cp >> 6));
            s[1] = (char)(0x80 | (cp & 0x3F));
        }
        v->types[2 + b] = BPE_TYPE_NORMAL;
    }
    for (int i = 0; i < 258; i++)
        v->tokens[i] = (BpeString){v->strings[i], strlen(v->strings[i])};
    TokenizerBpeSpec spec = {
        .bpe = {.vocab_size = 258, .tokens = v->tokens, .types = v->types, .n_merges = 0, .merges = NULL,
                .pre = "smollm"},
        .bos_id = 0, .eos_id = 1, .add_bos = 0,
        .chat_template = {tpl, tpl ? strlen(tpl) : 0},
    };
    return tokenizer_open_bpe(t, &spec, err);
}

static void expect_system_message(const char *tpl, const char *want)
{
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert_msg(open_with_template(&t, &v, tpl, 1, &err) == 0, "%s", err.msg);
    ChatTemplate c;
    ck_assert_msg(chat_template_open(&c, &t, &err) == 0, "%s", err.msg);
    if (!want)
        ck_assert_msg(c.system_message == NULL, "template '%s' gave system message '%s', expected none", tpl,
                      c.system_message);
    else
        ck_assert_msg(c.system_message && strcmp(c.system_message, want) == 0,
                      "template '%s' gave system message '%s', expected '%s'", tpl,
                      c.system_message ? c.system_message : "(none)", want);
    ck_assert_int_eq(c.im_start, 0);
    ck_assert_int_eq(chat_end_token(&c), 1);
    chat_template_close(&c);
    tokenizer_free(&t);
}

START_TEST(system_message_from_the_template)
{
    /* SmolLM2's own layout: a real newline inside the literal. */
    expect_system_message("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                          "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                          "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
                          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}",
                          "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    /* The escape \n for the newline, and an escaped quote in the message. */
    expect_system_message("{{ '<|im_start|>system\\nIt\\'s a test.<|im_end|>\\n' }}", "It's a test.");
    /* Qwen's layout: the first system turn is built from a variable (its
     * text runs out of the literal), the default comes later. */
    expect_system_message("{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + "
                          "messages[0]['content'] + '<|im_end|>\\n' }}{% else %}{{ '<|im_start|>system\\nYou are "
                          "a helpful assistant<|im_end|>\\n' }}{% endif %}",
                          "You are a helpful assistant");
    /* ChatML without a default system message. */
    expect_system_message("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                          "'<|im_end|>\\n'}}{% endfor %}",
                          NULL);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(renders_one_user_message)
{
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert(open_with_template(&t, &v, "'<|im_start|>system\nBe kind.<|im_end|>\n'", 1, &err) == 0);
    ChatTemplate c;
    ck_assert(chat_template_open(&c, &t, &err) == 0);
    char *prompt;
    ck_assert(chat_render(&c, "Hi!", &prompt, &err) == 0);
    ck_assert_str_eq(prompt, "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                             "<|im_start|>assistant\n");
    ck_assert_uint_eq(strlen(prompt), 3 + chat_overhead_bytes(&c));
    /* Encoded, the markers are control tokens: 0 and 1. */
    int ids[256], n;
    ck_assert(tokenizer_encode(&t, prompt, 1, 0, ids, &n, &err) == 0);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ids[n - 1], 2 + '\n');
    int starts = 0, ends = 0;
    for (int i = 0; i < n; i++) {
        starts += ids[i] == 0;
        ends += ids[i] == 1;
    }
    ck_assert_int_eq(starts, 3);
    ck_assert_int_eq(ends, 2);
    mem_free(prompt);
    chat_template_close(&c);
    tokenizer_free(&t);

    /* Without a system message: the user turn comes first. */
    ck_assert(open_with_template(&t, &v, "{{'<|im_start|>' + role + '\\n' + content + '<|im_end|>'}}", 1, &err) == 0);
    ck_assert(chat_template_open(&c, &t, &err) == 0);
    ck_assert(chat_render(&c, "", &prompt, &err) == 0);
    ck_assert_str_eq(prompt, "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    mem_free(prompt);
    chat_template_close(&c);
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

static void expect_refused(const Tokenizer *t, const char *word)
{
    ChatTemplate c;
    Err err = {{0}};
    ck_assert_msg(chat_template_open(&c, t, &err) == -1, "chat was accepted (%s)", word);
    ck_assert_msg(strstr(err.msg, word), "'%s' lacks '%s'", err.msg, word);
    ck_assert_msg(!strchr(err.msg, '\n'), "not one line: '%s'", err.msg);
}

START_TEST(chat_is_refused_without_chatml)
{
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert(open_with_template(&t, &v, NULL, 1, &err) == 0);
    expect_refused(&t, "the model has no chat template");
    tokenizer_free(&t);
    ck_assert(open_with_template(&t, &v, "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}", 1, &err) == 0);
    expect_refused(&t, "not ChatML");
    tokenizer_free(&t);
    ck_assert(open_with_template(&t, &v, "{{ '<|im_start|>' + role + '<|im_end|>' }}", 0, &err) == 0);
    expect_refused(&t, "not a control token");
    tokenizer_free(&t);
    /* A llama2.c vocabulary has no template at all. */
    void *image;
    size_t bytes;
    ck_assert(synth_tokenizer_image(512, &image, &bytes, &err) == 0);
    ck_assert(tokenizer_open_image(&t, image, bytes, 512, &err) == 0);
    mem_free(image);
    expect_refused(&t, "the model has no chat template");
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* A template of exactly @p bytes: @p head, then @p unit repeated, then
 * @p tail (the repeats fill what the two leave). Freed with free(). */
static char *repeated_template(size_t bytes, const char *head, const char *unit, const char *tail)
{
    char *tpl = malloc(bytes + 1);
    ck_assert(tpl);
    size_t h = strlen(head), u = strlen(unit), tl = strlen(tail), at = h;
    ck_assert(h + tl <= bytes);
    memcpy(tpl, head, h);
    while (at + u <= bytes - tl) {
        memcpy(tpl + at, unit, u);
        at += u;
    }
    memset(tpl + at, ' ', bytes - tl - at);
    memcpy(tpl + bytes - tl, tail, tl);
    tpl[bytes] = '\0';
    return tpl;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Opens @p tpl's template and checks its system message (NULL: none) and
 * that it took under a second. */
static void expect_fast_system_message(const char *what, const char *tpl, const char *want)
{
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert_msg(open_with_template(&t, &v, tpl, 1, &err) == 0, "%s", err.msg);
    ChatTemplate c;
    double t0 = seconds_now();
    ck_assert_msg(chat_template_open(&c, &t, &err) == 0, "%s: %s", what, err.msg);
    double took = seconds_now() - t0;
    ck_assert_msg(took < 1.0, "%s: %zu bytes took %.2f s to read (a linear scan takes milliseconds)", what,
                  strlen(tpl), took);
    if (!want)
        ck_assert_msg(c.system_message == NULL, "%s: system message '%.60s...', expected none", what,
                      c.system_message);
    else
        ck_assert_msg(c.system_message && strcmp(c.system_message, want) == 0, "%s: system message '%.60s', expected '%s'",
                      what, c.system_message ? c.system_message : "(none)", want);
    chat_template_close(&c);
    tokenizer_free(&t);
}

/* A model file is untrusted: a 4 MB template built to make a scan that
 * restarts at every "<|im_start|>system" quadratic (seconds at 1 MB,
 * minutes at 4 MB) is read in one pass, with the right answer. */
START_TEST(a_4_mb_template_is_read_in_linear_time)
{
    const size_t bytes = 4 * 1000 * 1000;
    ck_assert(bytes <= CHAT_TEMPLATE_MAX_BYTES);
    /* Every candidate's literal runs to one quote near the end; after it,
     * a good one. */
    char *tpl = repeated_template(bytes, "", "<|im_start|>system\nx", "'<|im_start|>system\nok<|im_end|>");
    expect_fast_system_message("candidates broken by one far quote", tpl, "ok");
    free(tpl);
    /* Candidates with no "<|im_end|>" after them at all. */
    tpl = repeated_template(bytes, "<|im_end|>", "<|im_start|>system\\n", "");
    expect_fast_system_message("candidates with no end", tpl, NULL);
    free(tpl);
    /* Escaped quotes all the way: one literal of 4 MB is the message. */
    tpl = repeated_template(bytes, "'<|im_start|>system\\n", "\\'", "<|im_end|>'");
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert(open_with_template(&t, &v, tpl, 1, &err) == 0);
    ChatTemplate c;
    ck_assert(chat_template_open(&c, &t, &err) == 0);
    ck_assert(c.system_message && strspn(c.system_message, "' ") == strlen(c.system_message) &&
              strlen(c.system_message) > bytes / 3);
    chat_template_close(&c);
    tokenizer_free(&t);
    free(tpl);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* One byte over the stated limit: refused in one line that gives both sizes. */
START_TEST(a_template_over_the_limit_is_refused)
{
    char *tpl = repeated_template(CHAT_TEMPLATE_MAX_BYTES + 1, "'<|im_start|>system\nhi<|im_end|>'", " ", "");
    Tokenizer t;
    ChatVocab v;
    Err err = {{0}};
    ck_assert(open_with_template(&t, &v, tpl, 1, &err) == 0);
    expect_refused(&t, "chat template is 4194305 bytes, more than the 4 MiB kvlab reads");
    tokenizer_free(&t);
    tpl[CHAT_TEMPLATE_MAX_BYTES] = '\0'; /* exactly the limit: read */
    expect_fast_system_message("a template of exactly the limit", tpl, "hi");
    free(tpl);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

Suite *suite_chat(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("chat");
    tcase_set_timeout(tc, 60); /* the 4 MB templates are built and copied a few times (slow under ASan) */
    tcase_add_test(tc, system_message_from_the_template);
    tcase_add_test(tc, renders_one_user_message);
    tcase_add_test(tc, chat_is_refused_without_chatml);
    tcase_add_test(tc, a_4_mb_template_is_read_in_linear_time);
    tcase_add_test(tc, a_template_over_the_limit_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(chat)
