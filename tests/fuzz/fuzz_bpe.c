/* libFuzzer target: the GPT-2 byte-level BPE tokenizer (common/model/bpe*.c,
 * tokenizer_gguf.c): its loader on fuzzed GGUF metadata, and encode/decode
 * round trips on fuzzed text.
 *
 * Input layout:
 *
 *     text_len u16 (little-endian) | text_len bytes of text | a GGUF image
 *
 * 1. gguf_parse_image() and tokenizer_open_gguf() on the image; if both
 *    accept it, the text is encoded with that tokenizer and decoded again
 *    through a DecodeStream: every id must be in the vocabulary, and
 *    nothing may read out of bounds. A refusal is one line.
 * 2. The text is encoded and decoded with a well-formed tokenizer: SmolLM2's
 *    (../shared/models, when present) or the small one of bpe_seed.h. It
 *    must come back byte for byte, less the bytes the vocabulary has no
 *    token for (SmolLM2 lacks 21; they are dropped, as Hugging Face does),
 *    the ids must fit the room tokenizer_encode() documents, and the text
 *    that produced n tokens must be within tokenizer_max_text_bytes(n)
 *    (counting the bytes that make tokens): the early length check may
 *    never refuse a prompt that would fit.
 *
 * Texts are cut at their first NUL (prompts are C strings). Merging is
 * O(n log n), so inputs of libFuzzer's default maximum length are cheap. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_seed.h"
#include "gguf.h"
#include "mem.h"
#include "tokenizer.h"

#define MAX_TEXT 65536

static Tokenizer good;        /* the well-formed tokenizer of check 2 */
static GgufFile good_file;    /* SmolLM2, when it is used */
static void *good_image;      /* the synthetic one's image, otherwise */
static long good_buffers;     /* ledger buffers those hold */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    Err err = {{0}};
    const char *smollm2 = "../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (gguf_open(&good_file, smollm2, &err) == 0 && tokenizer_open_gguf(&good, &good_file, &err) == 0) {
        fprintf(stderr, "fuzz_bpe: round trips with %s\n", smollm2);
    } else {
        gguf_close(&good_file);
        size_t bytes;
        GgufFile f;
        if (bpe_seed_gguf(&good_image, &bytes, &err) || gguf_parse_image(&f, good_image, bytes, &err) ||
            tokenizer_open_gguf(&good, &f, &err)) {
            fprintf(stderr, "fuzz_bpe: %s\n", err.msg);
            abort();
        }
        gguf_close(&f);
        fprintf(stderr, "fuzz_bpe: round trips with the synthetic tokenizer of bpe_seed.h\n");
    }
    good_buffers = mem_live_buffers();
    return 0;
}

static void check_one_line(const Err *err)
{
    if (err->msg[0] == '\0' || strchr(err->msg, '\n'))
        abort();
}

/* Encodes and decodes; returns the decoded bytes (malloc'd, *len set) or
 * NULL when encoding was refused; *n_ids receives the count. */
static char *round_trip(const Tokenizer *t, const char *text, size_t *len, int *n_ids)
{
    size_t n = strlen(text);
    int *ids = malloc((n + 3) * sizeof(int));
    Err err = {{0}};
    if (!ids)
        abort();
    if (tokenizer_encode(t, text, 0, 0, ids, n_ids, &err) != 0) {
        check_one_line(&err);
        free(ids);
        return NULL;
    }
    if (*n_ids < 0 || (size_t)*n_ids > n + 3)
        abort();
    DecodeStream s;
    if (decode_stream_init(&s, t, -1, &err) != 0)
        abort();
    size_t cap = 16 + (size_t)*n_ids * (size_t)tokenizer_max_piece_bytes(t), at = 0, k;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (int i = 0; i < *n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            abort();
        const char *piece = decode_stream_push(&s, ids[i], &k);
        if (at + k > cap)
            abort();
        memcpy(out + at, piece, k);
        at += k;
    }
    const char *rest = decode_stream_finish(&s, &k);
    if (at + k > cap)
        abort();
    memcpy(out + at, rest, k);
    at += k;
    decode_stream_free(&s);
    free(ids);
    *len = at;
    return out;
}

/* The text less the bytes the vocabulary cannot encode. Control tokens are
 * matched before bytes are dropped, but none of them holds such a byte. */
static size_t keep_encodable(const Tokenizer *t, const char *text, char *out)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (t->bpe->byte_token[*p] >= 0)
            out[n++] = (char)*p;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t text_len = (size_t)(data[0] | data[1] << 8);
    if (text_len > size - 2)
        text_len = size - 2;
    static char text[MAX_TEXT + 1], want[MAX_TEXT + 1];
    size_t n = text_len < MAX_TEXT ? text_len : MAX_TEXT;
    memcpy(text, data + 2, n);
    text[n] = '\0';

    /* 1: a fuzzed tokenizer */
    size_t image_bytes = size - 2 - text_len;
    void *image = mem_alloc(MEM_WEIGHTS, image_bytes);
    if (!image)
        return 0;
    memcpy(image, data + 2 + text_len, image_bytes);
    GgufFile f;
    Err err = {{0}};
    if (gguf_parse_image(&f, image, image_bytes, &err) == 0) {
        Tokenizer t;
        if (tokenizer_open_gguf(&t, &f, &err) == 0) {
            size_t len;
            int n_ids;
            free(round_trip(&t, text, &len, &n_ids));
            tokenizer_free(&t);
        } else {
            check_one_line(&err);
        }
        gguf_close(&f);
    } else {
        check_one_line(&err);
    }
    mem_free(image);

    /* 2: the well-formed tokenizer gives the text back */
    size_t len;
    int n_ids;
    char *back = round_trip(&good, text, &len, &n_ids);
    size_t want_len = keep_encodable(&good, text, want);
    if (!back || len != want_len || memcmp(back, want, len) != 0)
        abort();
    free(back);
    if (want_len > tokenizer_max_text_bytes(&good, n_ids))
        abort(); /* the early length check would refuse a prompt that fits */
    if (mem_live_buffers() != good_buffers)
        abort();
    return 0;
}
