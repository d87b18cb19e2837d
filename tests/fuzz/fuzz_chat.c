/* libFuzzer target: the chat template reader (common/model/chat.c) on a
 * fuzzed `tokenizer.chat_template`.
 *
 * Input layout: the whole input is the template (cut at its first NUL:
 * a template is a C string, and the loader refuses a NUL in it).
 *
 * 1. chat_template_open() accepts the template or refuses it in one line.
 * 2. When it accepts it, the default system message must be the one a
 *    plain reference finds: for every "<|im_start|>system" in turn, the
 *    text after its newline (real, or the escape \n) up to the next
 *    "<|im_end|>", when no unescaped quote ends the literal first. The
 *    reference restarts its scan at every candidate (quadratic, fine for
 *    fuzzer-sized inputs); chat.c reads the template once, so this checks
 *    that the one-pass shortcuts change no answer.
 * 3. chat_render() lays out the system turn and one user message with
 *    exactly chat_overhead_bytes() around it.
 * Every ledger buffer is freed again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_seed.h"
#include "chat.h"
#include "gguf.h"
#include "mem.h"
#include "tokenizer.h"

static Tokenizer chatml; /* the seed tokenizer: ChatML's control tokens, no template of its own */
static void *chatml_image;
static long chatml_buffers;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    size_t bytes;
    GgufFile f;
    Err err = {{0}};
    if (bpe_seed_gguf(&chatml_image, &bytes, &err) || gguf_parse_image(&f, chatml_image, bytes, &err) ||
        tokenizer_open_gguf(&chatml, &f, &err)) {
        fprintf(stderr, "fuzz_chat: %s\n", err.msg);
        abort();
    }
    gguf_close(&f);
    chatml_buffers = mem_live_buffers();
    return 0;
}

/* The reference: the default system message of @p tpl (malloc'd), or NULL. */
static char *reference_system_message(const char *tpl)
{
    static const char SYSTEM[] = "<|im_start|>system";
    for (const char *at = strstr(tpl, SYSTEM); at; at = strstr(at + 1, SYSTEM)) {
        const char *start = at + strlen(SYSTEM);
        if (start[0] == '\n')
            start += 1;
        else if (start[0] == '\\' && start[1] == 'n')
            start += 2;
        else
            continue;
        const char *end = strstr(start, "<|im_end|>");
        if (!end)
            continue;
        size_t n = (size_t)(end - start), k = 0;
        char *msg = malloc(n + 1);
        if (!msg)
            abort();
        int broken = 0;
        for (size_t i = 0; i < n && !broken; i++) {
            char c = start[i];
            broken = c == '\'' || c == '"';
            if (c == '\\' && i + 1 < n) {
                char e = start[++i];
                c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            }
            msg[k++] = c;
        }
        msg[k] = '\0';
        if (!broken)
            return msg;
        free(msg);
    }
    return NULL;
}

static void check_render(const ChatTemplate *c)
{
    char *prompt;
    Err err = {{0}};
    if (chat_render(c, "hi", &prompt, &err))
        abort();
    if (strlen(prompt) != chat_overhead_bytes(c) + 2)
        abort();
    const char *user = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    size_t skip = 0;
    if (c->system_message) {
        const char *head = "<|im_start|>system\n";
        size_t h = strlen(head), m = strlen(c->system_message);
        if (strncmp(prompt, head, h) || strncmp(prompt + h, c->system_message, m) ||
            strncmp(prompt + h + m, "<|im_end|>\n", 11))
            abort();
        skip = h + m + 11;
    }
    if (strcmp(prompt + skip, user))
        abort();
    mem_free(prompt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *tpl = malloc(size + 1);
    if (!tpl)
        abort();
    memcpy(tpl, data, size);
    tpl[size] = '\0';
    chatml.chat_template = tpl; /* borrowed for this input, handed back below */
    ChatTemplate c;
    Err err = {{0}};
    if (chat_template_open(&c, &chatml, &err) == 0) {
        char *want = reference_system_message(tpl);
        if ((want == NULL) != (c.system_message == NULL) || (want && strcmp(want, c.system_message)))
            abort();
        free(want);
        check_render(&c);
        chat_template_close(&c);
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort();
    }
    chatml.chat_template = NULL;
    free(tpl);
    if (mem_live_buffers() != chatml_buffers)
        abort();
    return 0;
}
