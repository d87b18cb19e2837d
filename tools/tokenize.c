/* tokenize: a model's tokenizer on the command line, text to ids and back.
 *
 *   build/tokenize "Once upon a time"                       stories260K + tok512 (the default model)
 *   build/tokenize --model ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf "Once upon a time"
 *   build/tokenize --model M.gguf --chat "What is the capital of France?"
 *   build/tokenize --model M.gguf --pieces "Hello, world"   one token per line, with its text
 *   build/tokenize --model M.gguf --decode 6403 1980 253 655
 *
 * The ids are exactly what the chapters feed the model for the same
 * prompt: BOS first when the tokenizer uses one (llama2.c's does, SmolLM2's
 * does not). A GGUF model's tokenizer comes from the file's metadata; a
 * llama2.c checkpoint's from --tokenizer, or the file that fits its
 * vocabulary size (tok512.bin, tokenizer.bin), found as the programs find it. */
#define _GNU_SOURCE /* getopt_long */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assets.h"
#include "chat.h"
#include "gguf.h"
#include "mem.h"
#include "tokenizer.h"

#define PROGRAM "tokenize"

/* A --file larger than this is refused: it is a prompt, not a corpus. */
#define MAX_TEXT_BYTES (64L << 20)

typedef enum { OUT_IDS, OUT_COUNT, OUT_PIECES } OutputMode;

typedef struct {
    const char *model_path;     /* NULL: the programs' default model */
    const char *tokenizer_path; /* llama2.c models only */
    const char *text_path;      /* --file; "-" for stdin */
    int chat, decode, info;
    OutputMode mode;
} TokenizeOptions;

/* The tokenizer and where it came from. */
typedef struct {
    Tokenizer *t;
    Assets assets;    /* a llama2.c model and its tokenizer */
    Tokenizer gguf_tokenizer;
    int is_gguf;
} Source;

enum { OPT_MODEL = 1000, OPT_TOKENIZER, OPT_CHAT, OPT_DECODE, OPT_FILE, OPT_COUNT, OPT_PIECES, OPT_INFO, OPT_HELP };

static const struct option LONG_OPTIONS[] = {
    {"model", required_argument, NULL, OPT_MODEL},   {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"chat", no_argument, NULL, OPT_CHAT},           {"decode", no_argument, NULL, OPT_DECODE},
    {"file", required_argument, NULL, OPT_FILE},     {"count", no_argument, NULL, OPT_COUNT},
    {"pieces", no_argument, NULL, OPT_PIECES},       {"info", no_argument, NULL, OPT_INFO},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void print_help(void)
{
    printf("Usage: %s [--model M] [--tokenizer T] [--chat] [--count | --pieces] TEXT\n"
           "       %s [--model M] [--tokenizer T] [--chat] [--count | --pieces] --file FILE\n"
           "       %s [--model M] [--tokenizer T] --decode ID...\n"
           "       %s [--model M] [--tokenizer T] --info\n"
           "Prints the token ids of TEXT on one line, separated by spaces: exactly what the\n"
           "chapters feed the model for that prompt (BOS first when the tokenizer uses one).\n\n"
           "Options:\n"
           "  --model M       a GGUF model (its tokenizer is in the file's metadata) or a llama2.c\n"
           "                  checkpoint; default: stories260K, found as the programs find it\n"
           "  --tokenizer T   llama2.c tokenizer file (default: tok<vocab>.bin next to the model,\n"
           "                  in models/ or ../shared/models/, tokenizer.bin for 32000 tokens)\n"
           "  --chat          wrap TEXT as one user message in the model's ChatML template, with\n"
           "                  the template's default system message (GGUF models with a template)\n"
           "  --file FILE     read the text from FILE (- for stdin) instead of the command line\n"
           "  --count         print only the number of tokens\n"
           "  --pieces        print one token per line: its id and the bytes it stands for\n"
           "  --decode        the arguments are ids: print the text they stand for\n"
           "  --info          describe the tokenizer: kind, vocabulary, special ids, longest token\n"
           "  --help          show this help and exit\n\n"
           "Examples:\n"
           "  %s \"Once upon a time\"                         (prints 1 403 407 261 378)\n"
           "  %s --model SmolLM2-135M-Instruct.Q4_1.gguf --chat \"What is the capital of France?\"\n",
           PROGRAM, PROGRAM, PROGRAM, PROGRAM, PROGRAM, PROGRAM);
}

static int parse_options(int argc, char **argv, TokenizeOptions *o, int *help, Err *err)
{
    memset(o, 0, sizeof *o);
    *help = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", LONG_OPTIONS, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o->model_path = optarg; break;
        case OPT_TOKENIZER: o->tokenizer_path = optarg; break;
        case OPT_CHAT: o->chat = 1; break;
        case OPT_DECODE: o->decode = 1; break;
        case OPT_FILE: o->text_path = optarg; break;
        case OPT_COUNT: o->mode = OUT_COUNT; break;
        case OPT_PIECES: o->mode = OUT_PIECES; break;
        case OPT_INFO: o->info = 1; break;
        case OPT_HELP: *help = 1; return 0;
        default: /* getopt sets optopt to the option's value when its argument is missing */
            if (optopt >= OPT_MODEL)
                return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
            return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    int n_args = argc - optind;
    if (o->info && (o->decode || o->chat || o->text_path || o->mode != OUT_IDS || n_args > 0))
        return err_set(err, "--info takes no text and no other mode");
    if (o->info)
        return 0;
    if (o->decode && (o->chat || o->text_path || o->mode != OUT_IDS))
        return err_set(err, "--decode takes ids only; --chat, --file, --count and --pieces are for text");
    if (o->decode && n_args == 0)
        return err_set(err, "--decode needs at least one token id");
    if (!o->decode && o->text_path && n_args > 0)
        return err_set(err, "give the text either as an argument or with --file, not both");
    if (!o->decode && !o->text_path && n_args != 1)
        return err_set(err, n_args == 0 ? "no text given (see --help)"
                                        : "give the text as one argument (quote it): got %d arguments", n_args);
    return 0;
}

/* ------------------------------------------------------------ the tokenizer */

static int file_is_gguf(const char *path)
{
    unsigned char head[4];
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat st;
    int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, head, 4) == 4 && gguf_has_magic(head, 4);
    close(fd);
    return yes;
}

static int open_source(Source *s, const TokenizeOptions *o, Err *err)
{
    memset(s, 0, sizeof *s);
    if (o->model_path && file_is_gguf(o->model_path)) {
        if (o->tokenizer_path)
            return err_set(err, "--tokenizer is for llama2.c models; a GGUF model carries its own tokenizer");
        GgufFile f;
        if (gguf_open(&f, o->model_path, err))
            return -1;
        int rc = tokenizer_open_gguf(&s->gguf_tokenizer, &f, err);
        gguf_close(&f);
        if (rc)
            return err_prefix(err, "%s", o->model_path);
        s->is_gguf = 1;
        s->t = &s->gguf_tokenizer;
        return 0;
    }
    CliOptions cli;
    cli_defaults(&cli);
    cli.model_path = o->model_path;
    cli.tokenizer_path = o->tokenizer_path;
    if (assets_open(&s->assets, &cli, err))
        return -1;
    if (s->assets.synthetic)
        fprintf(stderr, "%s: no stories260K.bin in models/ or ../shared/models/: a synthetic vocabulary, "
                        "whose ids mean nothing\n", PROGRAM);
    s->t = &s->assets.tokenizer;
    return 0;
}

static void close_source(Source *s)
{
    if (s->is_gguf)
        tokenizer_free(&s->gguf_tokenizer);
    else
        assets_close(&s->assets);
}

/* ------------------------------------------------------------ text in */

/* Reads all of fd into a growing buffer, at most MAX_TEXT_BYTES. */
static int read_all(int fd, const char *path, char **out, size_t *n, Err *err)
{
    size_t cap = 1 << 16;
    char *buf = mem_alloc(MEM_ACTIVATIONS, cap);
    *n = 0;
    for (;;) {
        if (!buf)
            return err_set(err, "%s: out of memory", path);
        ssize_t got = read(fd, buf + *n, cap - *n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            mem_free(buf);
            return err_set(err, "%s: cannot read: %s", path, strerror(errno));
        }
        if (got == 0)
            break;
        *n += (size_t)got;
        if (*n > (size_t)MAX_TEXT_BYTES) {
            mem_free(buf);
            return err_set(err, "%s: more than %ld bytes of text", path, MAX_TEXT_BYTES);
        }
        if (*n + 1 == cap) {
            char *bigger = mem_alloc(MEM_ACTIVATIONS, 2 * cap);
            if (bigger)
                memcpy(bigger, buf, *n);
            mem_free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    buf[*n] = '\0';
    *out = buf;
    return 0;
}

/* Reads FILE (or stdin) whole; the tokenizer takes NUL-terminated text. */
static int read_text(const char *path, char **out, Err *err)
{
    int is_stdin = strcmp(path, "-") == 0;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (!is_stdin && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        return err_set(err, "%s is not a regular file", path);
    }
    size_t n;
    int rc = read_all(fd, path, out, &n, err);
    if (!is_stdin)
        close(fd);
    if (rc)
        return -1;
    const char *nul = memchr(*out, '\0', n);
    if (nul) {
        size_t at = (size_t)(nul - *out);
        mem_free(*out);
        return err_set(err, "%s holds a NUL byte at offset %zu; prompts are text", path, at);
    }
    return 0;
}

/* ------------------------------------------------------------ output */

/* A piece as a C-like string literal: printable ASCII and whole UTF-8
 * characters as they are, the rest as escapes. */
static void print_quoted(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c >= 0x20 && c < 0x7F)
            putchar(c);
        else if (c >= 0xC2 && c <= 0xF4 && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
            size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2, k = 1;
            while (k < len && i + k < n && (s[i + k] & 0xC0) == 0x80)
                k++;
            if (k == len) {
                fwrite(s + i, 1, len, stdout);
                i += len - 1;
            } else {
                printf("\\x%02X", c);
            }
        } else
            printf("\\x%02X", c);
    }
    putchar('"');
}

static void print_tokens(const Tokenizer *t, const int *ids, int n, OutputMode mode)
{
    if (mode == OUT_COUNT) {
        printf("%d\n", n);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (mode == OUT_IDS) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        size_t len;
        /* The piece as the vocabulary has it: llama2.c's dummy-prefix space
         * shows (the programs drop it when they print after BOS). */
        const char *piece = tokenizer_piece(t, -1, ids[i], &len);
        printf("%d\t", ids[i]);
        print_quoted(piece, len);
        putchar('\n');
    }
    if (mode == OUT_IDS)
        putchar('\n');
}

static int encode_text(const Tokenizer *t, const TokenizeOptions *o, char **argv, Err *err)
{
    char *text = NULL, *prompt = NULL;
    if (o->text_path && read_text(o->text_path, &text, err))
        return -1;
    const char *input = text ? text : argv[optind];
    int rc = -1;
    ChatTemplate chat = {0};
    if (o->chat) {
        if (chat_template_open(&chat, t, err) || chat_render(&chat, input, &prompt, err))
            goto done;
        input = prompt;
    }
    size_t len = strlen(input);
    int *ids = mem_alloc_array(MEM_ACTIVATIONS, len + 3, sizeof(int));
    int n;
    if (!ids)
        err_set(err, "out of memory for %zu bytes of text", len);
    else if (tokenizer_encode(t, input, 1, 0, ids, &n, err) == 0) {
        print_tokens(t, ids, n, o->mode);
        rc = 0;
    }
    mem_free(ids);
done:
    chat_template_close(&chat);
    mem_free(prompt);
    mem_free(text);
    return rc;
}

static int decode_ids(const Tokenizer *t, int n, char **args, Err *err)
{
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long id = strtol(args[i], &end, 10);
        if (args[i][0] < '0' || args[i][0] > '9' || *end || errno)
            return err_set(err, "'%s' is not a token id", args[i]);
        if (id >= t->vocab_size)
            return err_set(err, "token id %ld is outside the vocabulary (0..%d)", id, t->vocab_size - 1);
    }
    DecodeStream s;
    if (decode_stream_init(&s, t, -1, err))
        return -1;
    size_t len;
    for (int i = 0; i < n; i++) {
        const char *text = decode_stream_push(&s, (int)strtol(args[i], NULL, 10), &len);
        fwrite(text, 1, len, stdout);
    }
    const char *rest = decode_stream_finish(&s, &len);
    fwrite(rest, 1, len, stdout);
    putchar('\n');
    decode_stream_free(&s);
    return 0;
}

/* What the book quotes: which algorithm, how big, which special ids, and
 * the longest token (the bound of the early length check). */
static int print_info(const Tokenizer *t, Err *err)
{
    int gpt2 = t->kind == TOKENIZER_GPT2;
    printf("kind             %s\n",
           gpt2 ? "GPT-2 byte-level BPE (GGUF metadata)" : "llama2.c (SentencePiece-style BPE)");
    printf("vocabulary       %d tokens\n", t->vocab_size);
    if (gpt2) {
        size_t merges = 0;
        for (size_t i = 0; i < t->bpe->pair_slots; i++)
            merges += t->bpe->pair_keys[i] != UINT64_MAX;
        printf("merges           %zu\n", merges);
        printf("control tokens   %d\n", t->bpe->n_controls);
    }
    printf("BOS              %d%s\n", t->bos_id, t->add_bos ? " (added to prompts)" : " (not added to prompts)");
    printf("EOS              %d\n", t->eos_id);
    printf("longest token    %d bytes: no text of more than %d x N bytes fits N tokens\n",
           tokenizer_max_piece_bytes(t), tokenizer_max_piece_bytes(t));
    if (!t->chat_template) {
        printf("chat template    none\n");
        return 0;
    }
    ChatTemplate chat;
    if (chat_template_open(&chat, t, err)) {
        printf("chat template    present, not usable: %s\n", err->msg);
        return 0;
    }
    printf("chat template    ChatML, ends a turn with token %d; default system message: %s\n", chat_end_token(&chat),
           chat.system_message ? chat.system_message : "(none)");
    chat_template_close(&chat);
    return 0;
}

int main(int argc, char **argv)
{
    TokenizeOptions o;
    Err err = {{0}};
    int help;
    if (parse_options(argc, argv, &o, &help, &err)) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    if (help) {
        print_help();
        return 0;
    }
    Source src;
    if (open_source(&src, &o, &err)) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    int rc = o.info     ? print_info(src.t, &err)
             : o.decode ? decode_ids(src.t, argc - optind, argv + optind, &err)
                        : encode_text(src.t, &o, argv, &err);
    close_source(&src);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        rc = err_set(&err, "cannot write the output: %s", strerror(errno));
    if (rc) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    return 0;
}
