#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infile.h"
#include "mem.h"

/* Llama 2's 32,000-token file is 434 KB; anything past this is not one. */
#define TOKENIZER_MAX_FILE_BYTES (64L << 20)

/* The tokenizer's own allocations are small, long-lived and not part of the
 * KV story; they are charged to activations so that the ledger stays whole. */
#define TOK_MEM MEM_ACTIVATIONS

static int compare_token_index(const void *a, const void *b)
{
    return strcmp(((const TokenIndex *)a)->str, ((const TokenIndex *)b)->str);
}

static int lookup(const Tokenizer *t, const char *str)
{
    TokenIndex key = {.str = str, .id = 0};
    const TokenIndex *hit = bsearch(&key, t->sorted, (size_t)t->vocab_size, sizeof(TokenIndex), compare_token_index);
    return hit ? hit->id : -1;
}

/* A bounds-checked reader over the file image. */
typedef struct {
    const unsigned char *p, *end;
} Reader;

static int read_bytes(Reader *r, void *out, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return -1;
    memcpy(out, r->p, n);
    r->p += n;
    return 0;
}

int tokenizer_open_image(Tokenizer *t, const void *image, size_t bytes, int vocab_size, Err *err)
{
    memset(t, 0, sizeof *t);
    Reader r = {image, (const unsigned char *)image + bytes};
    if (vocab_size <= 0)
        return err_set(err, "vocab_size %d is not positive", vocab_size);
    int max_len;
    if (read_bytes(&r, &max_len, 4))
        return err_set(err, "file too short for a tokenizer header");
    if (max_len <= 0 || max_len > 4096)
        return err_set(err, "max_token_length %d is not plausible; not a tokenizer file?", max_len);
    t->vocab_size = vocab_size;
    t->max_token_length = max_len;
    t->vocab = mem_alloc_array(TOK_MEM, (size_t)vocab_size, sizeof(char *));
    t->scores = mem_alloc_array(TOK_MEM, (size_t)vocab_size, sizeof(float));
    t->sorted = mem_alloc_array(TOK_MEM, (size_t)vocab_size, sizeof(TokenIndex));
    t->merge_buf = mem_alloc(TOK_MEM, 2 * (size_t)max_len + 3);
    if (!t->vocab || !t->scores || !t->sorted || !t->merge_buf) {
        tokenizer_free(t);
        return err_set(err, "out of memory for a vocabulary of %d tokens", vocab_size);
    }
    for (int i = 0; i < vocab_size; i++) {
        int len;
        if (read_bytes(&r, &t->scores[i], 4) || read_bytes(&r, &len, 4)) {
            tokenizer_free(t);
            return err_set(err, "has only %d tokens, the model's vocabulary has %d", i, vocab_size);
        }
        if (len < 0 || len > max_len) {
            tokenizer_free(t);
            return err_set(err, "token %d has length %d, outside 0..%d", i, len, max_len);
        }
        t->vocab[i] = mem_alloc(TOK_MEM, (size_t)len + 1);
        if (!t->vocab[i] || read_bytes(&r, t->vocab[i], (size_t)len)) {
            tokenizer_free(t);
            return err_set(err, "has only %d tokens, the model's vocabulary has %d", i, vocab_size);
        }
    }
    if (r.p != r.end) {
        tokenizer_free(t);
        return err_set(err, "has more tokens than the model's vocabulary of %d (%zu bytes left over)", vocab_size,
                       (size_t)(r.end - r.p));
    }
    for (int i = 0; i < vocab_size; i++) {
        t->sorted[i].str = t->vocab[i];
        t->sorted[i].id = i;
    }
    qsort(t->sorted, (size_t)vocab_size, sizeof(TokenIndex), compare_token_index);
    for (int i = 0; i < 256; i++)
        t->byte_pieces[2 * i] = (unsigned char)i;
    return 0;
}

int tokenizer_load(Tokenizer *t, const char *path, int vocab_size, Err *err)
{
    memset(t, 0, sizeof *t);
    /* Tokenizer files are small (Llama 2's is 434 KB); read it whole. */
    size_t size;
    int fd = infile_open(path, TOKENIZER_MAX_FILE_BYTES, &size, err);
    if (fd < 0)
        return -1;
    unsigned char *buf = size > 0 ? malloc(size) : NULL;
    int rc = -1;
    if (size == 0)
        err_set(err, "%s: empty file", path);
    else if (!buf)
        err_set(err, "%s: out of memory for %zu bytes", path, size);
    else if (infile_read_exact(fd, buf, size, path, err) == 0) {
        if (tokenizer_open_image(t, buf, size, vocab_size, err) == 0)
            rc = 0;
        else
            err_prefix(err, "%s", path);
    }
    free(buf);
    close(fd);
    return rc;
}

void tokenizer_free(Tokenizer *t)
{
    if (t->vocab)
        for (int i = 0; i < t->vocab_size; i++)
            mem_free(t->vocab[i]);
    mem_free(t->vocab);
    mem_free(t->scores);
    mem_free(t->sorted);
    mem_free(t->merge_buf);
    memset(t, 0, sizeof *t);
}

/* Appends the id of one UTF-8 code point, or its raw-byte tokens (id = byte
 * + 3) when the vocabulary has no entry for it. */
static int emit_code_point(const Tokenizer *t, const char *cp, size_t len, int *tokens, int *n, Err *err)
{
    int id = lookup(t, cp);
    if (id != -1) {
        tokens[(*n)++] = id;
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        int byte_id = (unsigned char)cp[i] + 3;
        if (byte_id >= t->vocab_size)
            return err_set(err, "byte 0x%02X has no token (vocabulary of %d lacks byte fallback)",
                           (unsigned char)cp[i], t->vocab_size);
        tokens[(*n)++] = byte_id;
    }
    return 0;
}

/* Merges the neighbouring pair whose concatenation is the highest-scoring
 * vocabulary entry (the leftmost on ties). Returns 0 when nothing merges. */
static int merge_best_pair(const Tokenizer *t, int *tokens, int *n)
{
    float best_score = -1e10f;
    int best_id = -1, best_at = -1;
    for (int i = 0; i + 1 < *n; i++) {
        snprintf(t->merge_buf, 2 * (size_t)t->max_token_length + 3, "%s%s", t->vocab[tokens[i]],
                 t->vocab[tokens[i + 1]]);
        int id = lookup(t, t->merge_buf);
        if (id != -1 && t->scores[id] > best_score) {
            best_score = t->scores[id];
            best_id = id;
            best_at = i;
        }
    }
    if (best_at < 0)
        return 0;
    tokens[best_at] = best_id;
    memmove(&tokens[best_at + 1], &tokens[best_at + 2], (size_t)(*n - best_at - 2) * sizeof(int));
    (*n)--;
    return 1;
}

int tokenizer_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
                     Err *err)
{
    int n = 0;
    if (bos)
        tokens[n++] = TOKEN_BOS;
    if (text[0] != '\0') {
        /* SentencePiece treats the text as if it began with a space. */
        int space = lookup(t, " ");
        if (space < 0)
            return err_set(err, "the vocabulary has no token for the space character");
        tokens[n++] = space;
    }
    char cp[5];
    size_t cp_len = 0;
    for (const char *c = text; *c; c++) {
        /* Gather one UTF-8 code point: a lead byte and at most three
         * continuation bytes (10xxxxxx). */
        if ((*c & 0xC0) != 0x80)
            cp_len = 0;
        cp[cp_len++] = *c;
        cp[cp_len] = '\0';
        if ((c[1] & 0xC0) == 0x80 && cp_len < 4)
            continue;
        if (emit_code_point(t, cp, cp_len, tokens, &n, err))
            return -1;
        cp_len = 0;
    }
    while (merge_best_pair(t, tokens, &n))
        ;
    if (eos)
        tokens[n++] = TOKEN_EOS;
    *n_tokens = n;
    return 0;
}

const char *tokenizer_decode(const Tokenizer *t, int prev_token, int token)
{
    if (token < 0 || token >= t->vocab_size)
        return "";
    const char *piece = t->vocab[token];
    if (prev_token == TOKEN_BOS && piece[0] == ' ')
        piece++;
    unsigned char byte;
    if (sscanf(piece, "<0x%02hhX>", &byte) == 1 && strlen(piece) == 6)
        return (const char *)&t->byte_pieces[2 * byte];
    return piece;
}

int tokenizer_piece_is_printable(const char *piece)
{
    if (!piece || !piece[0])
        return 0;
    if (piece[1] == '\0') {
        unsigned char b = (unsigned char)piece[0];
        return isprint(b) || isspace(b);
    }
    return 1;
}
