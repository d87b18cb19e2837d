/* libFuzzer target: the GGUF reader (common/model/gguf.c) and, when the
 * reader accepts a file, the Llama loader on top of it (model_open_image():
 * the llama.* keys, every tensor's presence, shape and type).
 *
 * Input: the bytes of a GGUF file. When gguf_parse_image() accepts them,
 * every view it hands out must lie inside the image: the first and last
 * byte of every key, string value, array element and tensor's data are
 * read (ASan catches a view past the end), every string array element is
 * fetched through its O(1) index, every tensor's element count must be
 * the product of its dims and its data must start at a multiple of the
 * alignment. The getters are called on every key with every type and must
 * either succeed or say why in one line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "mem.h"
#include "model.h"

static volatile unsigned char sink;

static void touch(const void *p, uint64_t n)
{
    if (n) {
        sink ^= ((const unsigned char *)p)[0];
        sink ^= ((const unsigned char *)p)[n - 1];
    }
}

static void check_one_line(const Err *err)
{
    if (err->msg[0] == '\0' || strchr(err->msg, '\n'))
        abort();
}

static void check_kv(const GgufFile *f, const GgufKv *kv)
{
    touch(kv->key.data, kv->key.len);
    if (kv->type == GGUF_STRING) {
        GgufString s;
        memcpy(&s.len, kv->value, 8);
        touch(kv->value + 8, s.len);
    }
    if (kv->type == GGUF_ARRAY && kv->elem_type == GGUF_STRING)
        for (uint64_t i = 0; i < kv->count; i++) {
            GgufString s = gguf_array_string(kv, i);
            if ((const unsigned char *)s.data < f->image || (const unsigned char *)s.data + s.len > f->image + f->size)
                abort();
            touch(s.data, s.len);
        }
    if (kv->type == GGUF_ARRAY && kv->count > 0 && kv->elem_type == GGUF_I32)
        sink ^= (unsigned char)gguf_array_i32(kv, kv->count - 1);
    if (kv->type == GGUF_ARRAY && kv->count > 0 && kv->elem_type == GGUF_F32) {
        /* Its bytes, not (int) of it: a float beyond int's range may not be converted. */
        float last = gguf_array_f32(kv, kv->count - 1);
        unsigned char bytes[sizeof last];
        memcpy(bytes, &last, sizeof last);
        sink ^= bytes[0];
    }
    /* Every getter on every key: a value or one line that says why not. */
    char key[256];
    if (kv->key.len >= sizeof key)
        return;
    memcpy(key, kv->key.data, kv->key.len);
    key[kv->key.len] = '\0';
    if (memchr(key, '\0', kv->key.len))
        return; /* such a key cannot be asked for by name */
    Err err = {{0}};
    uint32_t u;
    float x;
    int b;
    GgufString s;
    uint64_t count;
    const GgufKv *found;
    if (gguf_get_u32(f, key, &u, &err)) check_one_line(&err);
    if (gguf_get_f32(f, key, &x, &err)) check_one_line(&err);
    if (gguf_get_bool(f, key, &b, &err)) check_one_line(&err);
    if (gguf_get_string(f, key, &s, &err)) check_one_line(&err);
    else touch(s.data, s.len);
    if (gguf_get_array(f, key, GGUF_STRING, &count, &found, &err)) check_one_line(&err);
    if (gguf_find(f, key) == NULL)
        abort(); /* a key the file has must be found (the first of that name) */
}

static void check_tensor(const GgufFile *f, const GgufTensor *t)
{
    touch(t->name.data, t->name.len);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->dims[d]; /* the reader checked this product for overflow */
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || n != t->n_elements || t->offset % f->alignment != 0 ||
        (const unsigned char *)t->data < f->image || t->bytes > f->size ||
        (const unsigned char *)t->data + t->bytes > f->image + f->size)
        abort();
    touch(t->data, t->bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A ledger buffer of exactly the input's size: a read past the end is
     * an ASan report. 64-byte aligned, like a mapping. */
    void *image = mem_alloc(MEM_WEIGHTS, size);
    if (!image)
        return 0;
    memcpy(image, data, size);
    GgufFile f;
    Err err = {{0}};
    if (gguf_parse_image(&f, image, size, &err) == 0) {
        for (uint64_t i = 0; i < f.n_kv; i++)
            check_kv(&f, &f.kv[i]);
        for (uint64_t i = 0; i < f.n_tensors; i++)
            check_tensor(&f, &f.tensors[i]);
        gguf_close(&f);
        /* The loader on top: a Llama model, or one line saying what is missing. */
        Model m;
        if (model_open_image(&m, image, size, &err) == 0)
            model_free(&m);
        else
            check_one_line(&err);
    } else {
        check_one_line(&err);
    }
    mem_free(image);
    if (mem_live_buffers() != 0)
        abort();
    return 0;
}
