/* Writes the seeds of the GGUF fuzz targets with the project's own GGUF
 * writer (tests/fuzz/make-corpus.sh runs it; the output is committed):
 *
 *   build/fuzz/make-seeds CORPUS_DIR
 *
 *   gguf/   synthetic Llama models (synth_gguf_image()) with matrices of
 *           every stored type, tied and untied, a tokenizer-only file
 *           (bpe_seed.h) and truncations
 *   bpe/    fuzz_bpe.c's layout: prompts in front of the tokenizer-only file
 *   model/  two small GGUF models among the llama2.c checkpoints
 *
 * The same code always writes the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_seed.h"
#include "mem.h"
#include "synth.h"

static void write_bytes(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make-seeds: cannot write %s\n", path);
        exit(1);
    }
}

static void *model_image(WeightType matrices, WeightType embeddings, int tied, size_t *bytes)
{
    SynthGgufSpec spec = {.cfg = {32, 32, 1, 2, 1, 8, 4}, .shared_classifier = tied, .seed = 1,
                          .matrix_type = matrices, .embedding_type = embeddings};
    void *image;
    Err err = {{0}};
    if (synth_gguf_image(&spec, &image, bytes, &err)) {
        fprintf(stderr, "make-seeds: %s\n", err.msg);
        exit(1);
    }
    return image;
}

/* fuzz_bpe.c's layout: u16 text length, the text, the tokenizer file. */
static void write_bpe_seed(const char *dir, const char *name, const char *text, const void *tok, size_t tok_bytes)
{
    size_t n = strlen(text);
    unsigned char *buf = malloc(2 + n + tok_bytes);
    buf[0] = (unsigned char)(n & 0xFF);
    buf[1] = (unsigned char)(n >> 8);
    memcpy(buf + 2, text, n);
    memcpy(buf + 2 + n, tok, tok_bytes);
    write_bytes(dir, name, buf, 2 + n + tok_bytes);
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make-seeds CORPUS_DIR\n");
        return 1;
    }
    char gguf[4096], bpe[4096], model[4096];
    snprintf(gguf, sizeof gguf, "%s/gguf", argv[1]);
    snprintf(bpe, sizeof bpe, "%s/bpe", argv[1]);
    snprintf(model, sizeof model, "%s/model", argv[1]);
    static const struct {
        const char *name;
        WeightType matrices, embeddings;
    } types[] = {{"f32", WEIGHT_F32, WEIGHT_F32}, {"f16", WEIGHT_F16, WEIGHT_F16}, {"bf16", WEIGHT_BF16, WEIGHT_F32},
                 {"q8_0", WEIGHT_Q8_0, WEIGHT_Q8_0}, {"q4_0", WEIGHT_Q4_0, WEIGHT_F32}, {"q4_1", WEIGHT_Q4_1, WEIGHT_Q4_1}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int tied = 0; tied <= 1; tied++) {
            size_t bytes;
            void *image = model_image(types[i].matrices, types[i].embeddings, tied, &bytes);
            char name[64];
            snprintf(name, sizeof name, "llama-%s-%s.gguf", types[i].name, tied ? "tied" : "untied");
            write_bytes(gguf, name, image, bytes);
            if (tied && (types[i].matrices == WEIGHT_Q8_0 || types[i].matrices == WEIGHT_Q4_1))
                write_bytes(model, name, image, bytes);
            if (types[i].matrices == WEIGHT_F32 && tied) {
                write_bytes(gguf, "truncated-in-metadata.gguf", image, 200);
                write_bytes(gguf, "truncated-in-tensors.gguf", image, bytes - 100);
            }
            mem_free(image);
        }
    void *tok;
    size_t tok_bytes;
    Err err = {{0}};
    if (bpe_seed_gguf(&tok, &tok_bytes, &err)) {
        fprintf(stderr, "make-seeds: %s\n", err.msg);
        return 1;
    }
    write_bytes(gguf, "tokenizer-only.gguf", tok, tok_bytes);
    static const char *const texts[] = {
        "", "Once upon a time", "the cat sat on the mat, and then another thing happened",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 naive 123 4567 don't it's", "a\xff\xfe\xc0\x80 bad bytes\x01\x7f",
        "    indented\n\n\ttabs\r\nCRLF", "<|endoftext|><|im_end|><|im_start|",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "text-%zu", i);
        write_bpe_seed(bpe, name, texts[i], tok, tok_bytes);
    }
    write_bpe_seed(bpe, "truncated-tokenizer", "Hi there", tok, tok_bytes / 2);
    mem_free(tok);
    return 0;
}
