#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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
    t->kind = TOKENIZER_LLAMA2C;
    t->bos_id = TOKEN_BOS;
    t->eos_id = TOKEN_EOS;
    t->add_bos = 1;
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
    /* llama2.c's entries are one allocation each; GPT-2's share an arena. */
    if (t->vocab && !t->piece_arena)
        for (int i = 0; i < t->vocab_size; i++)
            mem_free(t->vocab[i]);
    mem_free(t->vocab);
    mem_free(t->piece_arena);
    mem_free(t->piece_len);
    mem_free(t->chat_template);
    if (t->bpe)
        bpe_close(t->bpe);
    mem_free(t->bpe);
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

/* llama2.c's pair rule: a pair merges when the concatenation of the two
 * strings is itself a vocabulary entry; the higher its score, the sooner
 * (key = -score), and merge_tokens() takes the first pair on equal scores,
 * as llama2.c's scan does. A score of -1e10 or less (or NaN) never merges,
 * because llama2.c's scan starts from best = -1e10 and wants more. */
typedef struct {
    const Tokenizer *t;
    char *concat; /* [2 * max_token_length + 1] */
} Llama2cPairs;

static int llama2c_pair_merge(const void *ctx, int left, int right, PairMerge *out)
{
    const Llama2cPairs *p = ctx;
    const char *a = p->t->vocab[left], *b = p->t->vocab[right];
    size_t la = strlen(a), lb = strlen(b);
    memcpy(p->concat, a, la);
    memcpy(p->concat + la, b, lb + 1);
    int id = lookup(p->t, p->concat);
    if (id < 0 || !(p->t->scores[id] > -1e10f))
        return 0;
    out->key = -(double)p->t->scores[id];
    out->merged_id = id;
    return 1;
}

static int llama2c_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
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
    /* BOS stays out of the merging. llama2.c merges it too, which changes
     * nothing for a real vocabulary (no entry starts with "<s>"), but a
     * vocabulary with such an entry would swallow BOS into a text token. */
    int first = bos ? 1 : 0;
    MergeWork work = {0};
    if (merge_work_reserve(&work, n - first, err))
        return -1;
    Llama2cPairs pairs = {.t = t, .concat = t->merge_buf};
    n = first + merge_tokens(&work, tokens + first, n - first, llama2c_pair_merge, &pairs);
    merge_work_free(&work);
    if (eos)
        tokens[n++] = TOKEN_EOS;
    *n_tokens = n;
    return 0;
}

static int gpt2_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
                       Err *err)
{
    int n = 0, m;
    if (bos && t->add_bos && t->bos_id >= 0)
        tokens[n++] = t->bos_id;
    if (bpe_encode(t->bpe, text, strlen(text), tokens + n, &m, err))
        return -1;
    n += m;
    if (eos && t->eos_id >= 0)
        tokens[n++] = t->eos_id;
    *n_tokens = n;
    return 0;
}

int tokenizer_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
                     Err *err)
{
    *n_tokens = 0;
    if (t->kind == TOKENIZER_GPT2)
        return gpt2_encode(t, text, bos, eos, tokens, n_tokens, err);
    return llama2c_encode(t, text, bos, eos, tokens, n_tokens, err);
}

const char *tokenizer_piece(const Tokenizer *t, int prev_token, int token, size_t *len)
{
    *len = 0;
    if (token < 0 || token >= t->vocab_size)
        return "";
    if (t->kind == TOKENIZER_GPT2) {
        *len = (size_t)t->piece_len[token];
        return t->vocab[token];
    }
    const char *piece = t->vocab[token];
    if (prev_token == TOKEN_BOS && piece[0] == ' ')
        piece++;
    unsigned char byte;
    if (sscanf(piece, "<0x%02hhX>", &byte) == 1 && strlen(piece) == 6) {
        *len = 1;
        return (const char *)&t->byte_pieces[2 * byte];
    }
    *len = strlen(piece);
    return piece;
}

const char *tokenizer_decode(const Tokenizer *t, int prev_token, int token)
{
    size_t len;
    return tokenizer_piece(t, prev_token, token, &len);
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

/* ------------------------------------------------------------ GPT-2 byte-level BPE */

/* Each token's bytes, in one arena: vocab[i] points at token i's bytes,
 * NUL-terminated for the callers that print C strings. */
static int build_pieces(Tokenizer *t, const BpeSpec *spec, Err *err)
{
    size_t total = 0;
    for (int i = 0; i < spec->vocab_size; i++) {
        if (spec->tokens[i].len > (size_t)INT32_MAX / 2 || total > SIZE_MAX / 2)
            return err_set(err, "token %d is %zu bytes long", i, spec->tokens[i].len);
        total += spec->tokens[i].len + 1;
    }
    t->vocab = mem_alloc_array(TOK_MEM, (size_t)spec->vocab_size, sizeof(char *));
    t->piece_len = mem_alloc_array(TOK_MEM, (size_t)spec->vocab_size, sizeof(int));
    t->piece_arena = mem_alloc(TOK_MEM, total);
    if (!t->vocab || !t->piece_len || !t->piece_arena)
        return err_set(err, "out of memory for a vocabulary of %d tokens", spec->vocab_size);
    char *at = t->piece_arena;
    for (int i = 0; i < spec->vocab_size; i++) {
        int32_t type = spec->types ? spec->types[i] : BPE_TYPE_NORMAL;
        size_t n = bpe_token_bytes(spec->tokens[i], type, (unsigned char *)at);
        at[n] = '\0';
        t->vocab[i] = at;
        t->piece_len[i] = (int)n;
        t->max_token_length = (int)n > t->max_token_length ? (int)n : t->max_token_length;
        at += n + 1;
    }
    return 0;
}

static int copy_chat_template(Tokenizer *t, BpeString tpl, Err *err)
{
    if (!tpl.data)
        return 0;
    if (memchr(tpl.data, '\0', tpl.len))
        return err_set(err, "the chat template holds a NUL byte");
    t->chat_template = mem_alloc(TOK_MEM, tpl.len + 1);
    if (!t->chat_template)
        return err_set(err, "out of memory for a chat template of %zu bytes", tpl.len);
    memcpy(t->chat_template, tpl.data, tpl.len);
    t->chat_template[tpl.len] = '\0';
    return 0;
}

static int check_special_id(const char *what, int id, int vocab_size, Err *err)
{
    if (id < -1 || id >= vocab_size)
        return err_set(err, "%s token id %d is outside the vocabulary of %d", what, id, vocab_size);
    return 0;
}

int tokenizer_open_bpe(Tokenizer *t, const TokenizerBpeSpec *spec, Err *err)
{
    memset(t, 0, sizeof *t);
    const BpeSpec *b = &spec->bpe;
    if (b->vocab_size <= 0)
        return err_set(err, "the vocabulary is empty");
    if (check_special_id("BOS", spec->bos_id, b->vocab_size, err) ||
        check_special_id("EOS", spec->eos_id, b->vocab_size, err))
        return -1;
    if (spec->add_bos && spec->bos_id < 0)
        return err_set(err, "add_bos_token is set but there is no BOS token id");
    t->kind = TOKENIZER_GPT2;
    t->vocab_size = b->vocab_size;
    t->bos_id = spec->bos_id;
    t->eos_id = spec->eos_id;
    t->add_bos = spec->add_bos != 0;
    t->bpe = mem_alloc(TOK_MEM, sizeof *t->bpe);
    if (!t->bpe) {
        tokenizer_free(t);
        return err_set(err, "out of memory for the tokenizer");
    }
    memset(t->bpe, 0, sizeof *t->bpe);
    if (build_pieces(t, b, err) || bpe_open(t->bpe, b, t->vocab, t->piece_len, err) ||
        copy_chat_template(t, spec->chat_template, err)) {
        tokenizer_free(t);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ both kinds */

int tokenizer_is_stop(const Tokenizer *t, int token)
{
    if (t->kind == TOKENIZER_GPT2)
        return token >= 0 && token == t->eos_id;
    return token == TOKEN_BOS || token == TOKEN_EOS;
}

int tokenizer_max_piece_bytes(const Tokenizer *t)
{
    if (t->kind == TOKENIZER_GPT2)
        return t->max_token_length > 0 ? t->max_token_length : 1;
    /* A llama2.c entry of n characters stands for n bytes of text (or one,
     * for <0xXX>), so the longest string bounds every token. */
    size_t longest = 1;
    for (int i = 0; i < t->vocab_size; i++) {
        size_t n = strlen(t->vocab[i]);
        longest = n > longest ? n : longest;
    }
    return (int)longest;
}

size_t tokenizer_max_text_bytes(const Tokenizer *t, int max_tokens)
{
    if (max_tokens <= 0)
        return 0;
    size_t per_token = (size_t)tokenizer_max_piece_bytes(t);
    if ((size_t)max_tokens > SIZE_MAX / per_token)
        return SIZE_MAX;
    return (size_t)max_tokens * per_token;
}

/* ------------------------------------------------------------ streaming decode */

int decode_stream_init(DecodeStream *s, const Tokenizer *t, int prev_token, Err *err)
{
    memset(s, 0, sizeof *s);
    s->t = t;
    s->prev_token = prev_token;
    s->out = mem_alloc(TOK_MEM, (size_t)tokenizer_max_piece_bytes(t) + 8);
    if (!s->out)
        return err_set(err, "out of memory for a decode stream");
    return 0;
}

/* Bytes of a UTF-8 character that starts with @p lead; 1 for a byte that
 * starts none (ASCII, or invalid: it is passed on alone). */
static size_t utf8_char_len(unsigned char lead)
{
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 1;
}

/* How many bytes at the end of buf[0..n) begin a character that is not
 * complete yet (0 to 3). */
static size_t incomplete_tail(const unsigned char *buf, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = buf[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: its lead is further back */
        return utf8_char_len(c) > back ? back : 0;
    }
    return 0;
}

const char *decode_stream_push(DecodeStream *s, int token, size_t *len)
{
    size_t n;
    const char *piece = tokenizer_piece(s->t, s->prev_token, token, &n);
    s->prev_token = token;
    if (s->t->kind == TOKENIZER_LLAMA2C) {
        /* What llama2.c prints: C strings, stray control bytes skipped,
         * and never BOS or EOS (they mark sequences). */
        int marker = token == TOKEN_BOS || token == TOKEN_EOS;
        n = !marker && tokenizer_piece_is_printable(piece) ? strlen(piece) : 0;
    }
    unsigned char *out = (unsigned char *)s->out;
    memcpy(out, s->held, (size_t)s->n_held);
    memcpy(out + s->n_held, piece, n);
    size_t total = (size_t)s->n_held + n;
    size_t keep = incomplete_tail(out, total);
    memcpy(s->held, out + total - keep, keep);
    s->n_held = (int)keep;
    out[total - keep] = '\0';
    *len = total - keep;
    return s->out;
}

const char *decode_stream_finish(DecodeStream *s, size_t *len)
{
    memcpy(s->out, s->held, (size_t)s->n_held);
    *len = (size_t)s->n_held;
    s->out[*len] = '\0';
    s->n_held = 0;
    return s->out;
}

void decode_stream_free(DecodeStream *s)
{
    mem_free(s->out);
    memset(s, 0, sizeof *s);
}
