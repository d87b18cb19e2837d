#include "chat.h"

#include <string.h>

#include "mem.h"

/* Small and long-lived, like the tokenizer's tables. */
#define CHAT_MEM MEM_ACTIVATIONS

static const char IM_START[] = "<|im_start|>";
static const char IM_END[] = "<|im_end|>";

/* The id of a control token by its text, -1 when there is none. */
static int control_id(const Tokenizer *t, const char *text)
{
    if (t->kind != TOKENIZER_GPT2)
        return -1;
    for (int i = 0; i < t->bpe->n_controls; i++) {
        const BpeControl *c = &t->bpe->controls[i];
        if (c->len == strlen(text) && memcmp(c->text, text, c->len) == 0)
            return c->id;
    }
    return -1;
}

/* The first quote (' or ") of raw[0..n) that no backslash escapes, read
 * as Jinja reads a string literal (a backslash takes the next character
 * with it); NULL when there is none. */
static const char *first_unescaped_quote(const char *raw, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == '\'' || raw[i] == '"')
            return raw + i;
        if (raw[i] == '\\' && i + 1 < n)
            i++;
    }
    return NULL;
}

/* Copies the Jinja string-literal text raw[0..n), which holds no unescaped
 * quote, into out, undoing the escapes (\n, \t, \', \", \\). */
static void unescape_literal(const char *raw, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = raw[i];
        if (c == '\\' && i + 1 < n) {
            char e = raw[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
        out[k++] = c;
    }
    out[k] = '\0';
}

/* The first place at or after @p from where @p word starts, or NULL: a
 * plain scan, linear in the text it passes over. (strstr() called again
 * and again on a long tail is not, under AddressSanitizer: its check
 * measures the whole remaining string on every call.) */
static const char *find_word(const char *from, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = from; *p; p++)
        if (*p == word[0] && strncmp(p, word, len) == 0)
            return p;
    return NULL;
}

/* The first "<|im_start|>system" + newline (real, or the escape \n) whose
 * text up to "<|im_end|>" lies inside one string literal (no unescaped
 * quote ends it: as in "' + system_message + '").
 *
 * One pass, linear in the template (a model file is untrusted input, and
 * rescanning to the end for every candidate was quadratic):
 * - the candidates come in order, so the next "<|im_end|>" is searched
 *   again only when a candidate starts past the one already found;
 * - a quote that broke one candidate breaks every later candidate that
 *   starts before it and ends at the same "<|im_end|>": a candidate starts
 *   after "system\n" or "system\\n", where a reading from an earlier
 *   candidate is between two characters too, so both readings see the
 *   same escapes from there on. The text is read again only past it. */
static int find_system_message(const char *tpl, char **out, Err *err)
{
    static const char SYSTEM[] = "<|im_start|>system";
    const char *end = NULL;   /* the first "<|im_end|>" at or after the candidate */
    const char *quote = NULL; /* the quote that broke the last candidate read */
    *out = NULL;
    for (const char *at = find_word(tpl, SYSTEM); at; at = find_word(at + strlen(SYSTEM), SYSTEM)) {
        const char *start = at + strlen(SYSTEM);
        if (start[0] == '\n')
            start += 1;
        else if (start[0] == '\\' && start[1] == 'n')
            start += 2;
        else
            continue;
        if (!end || end < start)
            end = find_word(start, IM_END);
        if (!end)
            return 0; /* no "<|im_end|>" after this candidate, so none after any later one */
        if (quote && quote >= start && quote < end)
            continue;
        size_t n = (size_t)(end - start);
        quote = first_unescaped_quote(start, n);
        if (quote)
            continue;
        char *msg = mem_alloc(CHAT_MEM, n + 1);
        if (!msg)
            return err_set(err, "out of memory for the system message");
        unescape_literal(start, n, msg);
        *out = msg;
        return 0;
    }
    return 0;
}

int chat_template_open(ChatTemplate *c, const Tokenizer *t, Err *err)
{
    memset(c, 0, sizeof *c);
    if (!t->chat_template)
        return err_set(err, "the model has no chat template (tokenizer.chat_template), so --chat cannot be used");
    size_t bytes = strlen(t->chat_template);
    if (bytes > CHAT_TEMPLATE_MAX_BYTES)
        return err_set(err, "the model's chat template is %zu bytes, more than the %d MiB kvlab reads", bytes,
                       CHAT_TEMPLATE_MAX_BYTES >> 20);
    if (!strstr(t->chat_template, IM_START) || !strstr(t->chat_template, IM_END))
        return err_set(err, "the model's chat template is not ChatML (it never writes %s and %s)", IM_START, IM_END);
    c->im_start = control_id(t, IM_START);
    c->im_end = control_id(t, IM_END);
    if (c->im_start < 0 || c->im_end < 0)
        return err_set(err, "the chat template is ChatML but %s or %s is not a control token of the vocabulary",
                       IM_START, IM_END);
    return find_system_message(t->chat_template, &c->system_message, err);
}

void chat_template_close(ChatTemplate *c)
{
    mem_free(c->system_message);
    memset(c, 0, sizeof *c);
}

/* The parts of the prompt, in order; the user's message goes at USER_AT. */
#define N_PARTS 7
#define USER_AT 4
static void prompt_parts(const ChatTemplate *c, const char *user, const char *parts[N_PARTS])
{
    int sys = c->system_message != NULL;
    parts[0] = sys ? "<|im_start|>system\n" : "";
    parts[1] = sys ? c->system_message : "";
    parts[2] = sys ? "<|im_end|>\n" : "";
    parts[3] = "<|im_start|>user\n";
    parts[USER_AT] = user;
    parts[5] = "<|im_end|>\n";
    parts[6] = "<|im_start|>assistant\n";
}

size_t chat_overhead_bytes(const ChatTemplate *c)
{
    const char *parts[N_PARTS];
    prompt_parts(c, "", parts);
    size_t n = 0;
    for (int i = 0; i < N_PARTS; i++)
        n += strlen(parts[i]);
    return n;
}

int chat_render(const ChatTemplate *c, const char *user, char **out, Err *err)
{
    const char *parts[N_PARTS];
    prompt_parts(c, user, parts);
    size_t n = chat_overhead_bytes(c) + strlen(user);
    *out = mem_alloc(CHAT_MEM, n + 1);
    if (!*out)
        return err_set(err, "out of memory for a chat prompt of %zu bytes", n);
    char *at = *out;
    for (int i = 0; i < N_PARTS; i++) {
        size_t len = strlen(parts[i]);
        memcpy(at, parts[i], len);
        at += len;
    }
    *at = '\0';
    return 0;
}

int chat_end_token(const ChatTemplate *c)
{
    return c->im_end;
}
