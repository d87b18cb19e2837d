/* A small GPT-2 byte-level BPE tokenizer as GGUF metadata, for the BPE fuzz
 * target (a well-formed tokenizer when ../shared has no SmolLM2) and for
 * its seeds (tests/fuzz/make-seeds.c). Static functions: included by both.
 *
 * The vocabulary: the 256 bytes as GPT-2's byte-level characters (ids
 * 0..255 in byte order, so every byte can be encoded), a few merged
 * tokens of English, and three control tokens, with SmolLM2's
 * pre-tokenizer ("smollm") and ChatML's control tokens. */
#ifndef KVLAB_FUZZ_BPE_SEED_H
#define KVLAB_FUZZ_BPE_SEED_H

#include <stdio.h>
#include <string.h>

#include "gguf_write.h"

/* GPT-2's byte-to-character table: printable bytes stand for themselves,
 * the other 68 become U+0100 onwards in byte order. */
static unsigned bpe_seed_char_of_byte(unsigned b)
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (printable)
        return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
    return 256 + n;
}

/* The UTF-8 of one byte's character, appended at out; returns its length. */
static int bpe_seed_put_char(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The byte-level string of ASCII text ("Ġthe" for " the"). */
static void bpe_seed_level(const char *text, char *out)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        out += bpe_seed_put_char(bpe_seed_char_of_byte(*p), out);
    *out = '\0';
}

#define BPE_SEED_MERGED 9
#define BPE_SEED_CONTROLS 3
#define BPE_SEED_VOCAB (256 + BPE_SEED_MERGED + BPE_SEED_CONTROLS)

/* The tokenizer as GGUF metadata (no tensors). Returns 0 or -1. */
static int bpe_seed_gguf(void **image, size_t *bytes, Err *err)
{
    /* Each merged token is the merge of two earlier tokens. */
    static const char *const merges[BPE_SEED_MERGED][2] = {
        {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "a"},
        {"o", "n"}, {"e", "r"}, {" a", "n"}, {"in", "g"},
    };
    static const char *const controls[BPE_SEED_CONTROLS] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static char store[BPE_SEED_VOCAB][32], merge_store[BPE_SEED_MERGED][64];
    const char *tokens[BPE_SEED_VOCAB], *merge_list[BPE_SEED_MERGED];
    int32_t types[BPE_SEED_VOCAB];
    for (unsigned b = 0; b < 256; b++) {
        store[b][bpe_seed_put_char(bpe_seed_char_of_byte(b), store[b])] = '\0';
        tokens[b] = store[b];
        types[b] = 1;
    }
    for (int i = 0; i < BPE_SEED_MERGED; i++) {
        char left[32], right[32], joined[64];
        bpe_seed_level(merges[i][0], left);
        bpe_seed_level(merges[i][1], right);
        snprintf(joined, sizeof joined, "%s%s", merges[i][0], merges[i][1]);
        bpe_seed_level(joined, store[256 + i]);
        tokens[256 + i] = store[256 + i];
        types[256 + i] = 1;
        snprintf(merge_store[i], sizeof merge_store[i], "%s %s", left, right);
        merge_list[i] = merge_store[i];
    }
    for (int i = 0; i < BPE_SEED_CONTROLS; i++) {
        tokens[256 + BPE_SEED_MERGED + i] = controls[i];
        types[256 + BPE_SEED_MERGED + i] = 3;
    }
    GgufWriter w;
    gguf_writer_init(&w);
    gguf_writer_string(&w, "general.architecture", "llama");
    gguf_writer_string(&w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_string(&w, "tokenizer.ggml.pre", "smollm");
    gguf_writer_string_array(&w, "tokenizer.ggml.tokens", tokens, BPE_SEED_VOCAB);
    gguf_writer_array32(&w, "tokenizer.ggml.token_type", GGUF_I32, types, BPE_SEED_VOCAB);
    gguf_writer_string_array(&w, "tokenizer.ggml.merges", merge_list, BPE_SEED_MERGED);
    gguf_writer_u32(&w, "tokenizer.ggml.bos_token_id", 256 + BPE_SEED_MERGED);
    gguf_writer_u32(&w, "tokenizer.ggml.eos_token_id", 256 + BPE_SEED_MERGED + 2);
    int rc = gguf_writer_finish(&w, image, bytes, err);
    gguf_writer_free(&w);
    return rc;
}

#endif
