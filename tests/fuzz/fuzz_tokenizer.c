/* libFuzzer target: the llama2.c tokenizer (common/model/tokenizer.c):
 * its loader on a fuzzed file, and encode/decode on fuzzed text.
 *
 * Input layout:
 *
 *     vocab_size u16 (little-endian) | text_len u16 | text_len bytes of text |
 *     the rest: a tokenizer file image
 *
 * 1. tokenizer_open_image() on the image with that vocabulary size; if it
 *    opens, the text is encoded with it and every id decoded: each id must
 *    be in the vocabulary, and nothing may read out of bounds.
 * 2. The text is encoded and decoded with a well-formed tokenizer
 *    (synth_tokenizer_image(), byte fallback for every byte) and must come
 *    back byte for byte: decode(encode(text)) == text, and the encoding
 *    must fit the room tokenizer_encode() documents (strlen + 3 ids).
 *
 * Text is cut at its first NUL (prompts are C strings) and at MAX_TEXT
 * bytes: merging is quadratic in the text until the O(n log n) merge lands,
 * and a fuzzer must not spend its time on one long input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "synth.h"
#include "tokenizer.h"

#define MAX_TEXT 1024
#define MAX_VOCAB 4096

static Tokenizer good;   /* the well-formed tokenizer of check 2 */
static long good_buffers; /* the ledger buffers it holds: every other one must be freed */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    void *image;
    size_t bytes;
    Err err = {{0}};
    if (synth_tokenizer_image(512, &image, &bytes, &err) || tokenizer_open_image(&good, image, bytes, 512, &err)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    mem_free(image);
    good_buffers = mem_live_buffers();
    return 0;
}

/* Encodes, checks the ids, and returns the decoded text (malloc'd) or NULL
 * when encoding was refused. */
static char *encode_decode(const Tokenizer *t, const char *text)
{
    size_t len = strlen(text);
    int *ids = malloc((len + 3) * sizeof(int));
    int n = -1;
    Err err = {{0}};
    if (!ids)
        abort();
    if (tokenizer_encode(t, text, 1, 1, ids, &n, &err) != 0) {
        free(ids);
        if (err.msg[0] == '\0')
            abort();
        return NULL;
    }
    if (n < 2 || (size_t)n > len + 3 || ids[0] != TOKEN_BOS || ids[n - 1] != TOKEN_EOS)
        abort();
    size_t cap = 16 + (size_t)n * ((size_t)t->max_token_length + 1), used = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (int i = 1; i + 1 < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            abort();
        const char *piece = tokenizer_decode(t, ids[i - 1], ids[i]);
        size_t pl = strlen(piece);
        /* A byte token decodes to one byte, possibly NUL (strlen 0). */
        if (used + pl + 1 > cap)
            abort();
        memcpy(out + used, piece, pl);
        used += pl;
    }
    out[used] = '\0';
    free(ids);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    int vocab = (data[0] | data[1] << 8) % MAX_VOCAB + 1;
    size_t text_len = (size_t)(data[2] | data[3] << 8);
    if (text_len > size - 4)
        text_len = size - 4;
    char text[MAX_TEXT + 1];
    size_t n = text_len < MAX_TEXT ? text_len : MAX_TEXT;
    memcpy(text, data + 4, n);
    text[n] = '\0';
    const uint8_t *image = data + 4 + text_len;
    size_t image_bytes = size - 4 - text_len;

    Tokenizer t;
    Err err = {{0}};
    if (tokenizer_open_image(&t, image, image_bytes, vocab, &err) == 0) {
        free(encode_decode(&t, text));
        tokenizer_free(&t);
    } else if (err.msg[0] == '\0') {
        abort();
    }

    char *back = encode_decode(&good, text);
    if (!back || strcmp(back, text) != 0)
        abort(); /* the synthetic vocabulary has a byte token for every byte */
    free(back);
    if (mem_live_buffers() != good_buffers)
        abort();
    return 0;
}
