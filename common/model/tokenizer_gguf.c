/* The GGUF side of the tokenizer: reads the tokenizer.ggml.* metadata into
 * plain arrays and hands them to tokenizer_open_bpe(). */
#include <stdint.h>
#include <string.h>

#include "mem.h"
#include "tokenizer.h"

/* Temporary arrays, freed before tokenizer_open_gguf() returns. */
#define TOK_MEM MEM_ACTIVATIONS

static int read_string_array(const GgufFile *f, const char *key, BpeString **out, int *count, Err *err)
{
    uint64_t n;
    const GgufKv *kv;
    if (gguf_get_array(f, key, GGUF_STRING, &n, &kv, err))
        return -1;
    if (n > INT32_MAX / 4)
        return err_set(err, "%s has %llu entries, more than kvlab handles", key, (unsigned long long)n);
    *out = mem_alloc_array(TOK_MEM, n > 0 ? (size_t)n : 1, sizeof(BpeString));
    if (!*out)
        return err_set(err, "out of memory for %s (%llu entries)", key, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        GgufString s = gguf_array_string(kv, i);
        (*out)[i] = (BpeString){.data = s.data, .len = (size_t)s.len};
    }
    *count = (int)n;
    return 0;
}

/* Token types: optional; when present, one per token. */
static int read_types(const GgufFile *f, int n_tokens, int32_t **out, Err *err)
{
    *out = NULL;
    const char *key = "tokenizer.ggml.token_type";
    if (!gguf_find(f, key))
        return 0;
    uint64_t n;
    const GgufKv *kv;
    if (gguf_get_array(f, key, GGUF_I32, &n, &kv, err))
        return -1;
    if (n != (uint64_t)n_tokens)
        return err_set(err, "%s has %llu entries for %d tokens", key, (unsigned long long)n, n_tokens);
    *out = mem_alloc_array(TOK_MEM, n > 0 ? (size_t)n : 1, sizeof(int32_t));
    if (!*out)
        return err_set(err, "out of memory for %s", key);
    for (uint64_t i = 0; i < n; i++)
        (*out)[i] = gguf_array_i32(kv, i);
    return 0;
}

/* An optional token id: -1 when the key is absent. */
static int read_optional_id(const GgufFile *f, const char *key, int *out, Err *err)
{
    *out = -1;
    if (!gguf_find(f, key))
        return 0;
    uint32_t v;
    if (gguf_get_u32(f, key, &v, err))
        return -1;
    *out = v > INT32_MAX ? INT32_MAX : (int)v; /* out of range: tokenizer_open_bpe() says so */
    return 0;
}

/* The model and pre-tokenizer names, checked before anything big is read. */
static int read_names(const GgufFile *f, char *pre, size_t pre_size, Err *err)
{
    GgufString model, p;
    if (gguf_get_string(f, "tokenizer.ggml.model", &model, err))
        return -1;
    if (!gguf_string_eq(model, "gpt2"))
        return err_set(err, "tokenizer.ggml.model '%.*s' is not supported (kvlab reads 'gpt2', byte-level BPE)",
                       (int)(model.len > 40 ? 40 : model.len), model.data);
    if (gguf_get_string(f, "tokenizer.ggml.pre", &p, err))
        return -1;
    if (p.len >= pre_size || memchr(p.data, '\0', (size_t)p.len))
        return err_set(err, "tokenizer.ggml.pre is not a pre-tokenizer name");
    memcpy(pre, p.data, (size_t)p.len);
    pre[p.len] = '\0';
    return 0;
}

int tokenizer_open_gguf(Tokenizer *t, const GgufFile *f, Err *err)
{
    memset(t, 0, sizeof *t);
    char pre[64];
    TokenizerBpeSpec spec = {.bos_id = -1, .eos_id = -1};
    BpeString *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    int rc = -1;
    if (read_names(f, pre, sizeof pre, err) ||
        read_string_array(f, "tokenizer.ggml.tokens", &tokens, &spec.bpe.vocab_size, err) ||
        read_types(f, spec.bpe.vocab_size, &types, err) ||
        read_string_array(f, "tokenizer.ggml.merges", &merges, &spec.bpe.n_merges, err) ||
        read_optional_id(f, "tokenizer.ggml.bos_token_id", &spec.bos_id, err) ||
        read_optional_id(f, "tokenizer.ggml.eos_token_id", &spec.eos_id, err))
        goto done;
    const char *add_bos = "tokenizer.ggml.add_bos_token";
    if (gguf_find(f, add_bos) && gguf_get_bool(f, add_bos, &spec.add_bos, err))
        goto done;
    if (gguf_find(f, "tokenizer.chat_template")) {
        GgufString tpl;
        if (gguf_get_string(f, "tokenizer.chat_template", &tpl, err))
            goto done;
        spec.chat_template = (BpeString){.data = tpl.data, .len = (size_t)tpl.len};
    }
    spec.bpe.tokens = tokens;
    spec.bpe.types = types;
    spec.bpe.merges = merges;
    spec.bpe.pre = pre;
    rc = tokenizer_open_bpe(t, &spec, err);
done:
    mem_free(tokens);
    mem_free(merges);
    mem_free(types);
    return rc;
}
