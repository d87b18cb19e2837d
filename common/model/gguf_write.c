#include "gguf_write.h"

#include <string.h>

#include "mem.h"

#define NAMES_CAP (GGUF_WRITER_MAX_ITEMS * 96)

void gguf_writer_init(GgufWriter *w)
{
    memset(w, 0, sizeof *w);
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->tensors = mem_alloc_array(MEM_WEIGHTS, GGUF_WRITER_MAX_ITEMS, sizeof *w->tensors);
    w->names = mem_alloc(MEM_WEIGHTS, NAMES_CAP);
    if (!w->tensors || !w->names)
        w->failed = 1;
}

void gguf_writer_free(GgufWriter *w)
{
    mem_free(w->meta);
    mem_free(w->tensors);
    mem_free(w->names);
    memset(w, 0, sizeof *w);
}

/* Appends bytes to the metadata, growing it by doubling. */
static void put(GgufWriter *w, const void *p, size_t n)
{
    if (w->failed)
        return;
    if (w->meta_len + n > w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap : 256;
        while (cap < w->meta_len + n)
            cap *= 2;
        unsigned char *grown = mem_alloc(MEM_WEIGHTS, cap);
        if (!grown) {
            w->failed = 1;
            return;
        }
        if (w->meta_len)
            memcpy(grown, w->meta, w->meta_len);
        mem_free(w->meta);
        w->meta = grown;
        w->meta_cap = cap;
    }
    memcpy(w->meta + w->meta_len, p, n);
    w->meta_len += n;
}

static void put_u32(GgufWriter *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    put(w, b, 4);
}

static void put_u64(GgufWriter *w, uint64_t v)
{
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

static void put_string(GgufWriter *w, const char *s)
{
    size_t n = strlen(s);
    put_u64(w, n);
    put(w, s, n);
}

static void begin_kv(GgufWriter *w, const char *key, uint32_t type)
{
    put_string(w, key);
    put_u32(w, type);
    w->n_kv++;
    if (w->n_kv > GGUF_WRITER_MAX_ITEMS)
        w->failed = 1;
}

void gguf_writer_u32(GgufWriter *w, const char *key, uint32_t value)
{
    begin_kv(w, key, GGUF_U32);
    put_u32(w, value);
    if (strcmp(key, "general.alignment") == 0 && value != 0)
        w->alignment = value; /* lay the data out as the file says (even a bad value, for tests) */
}

void gguf_writer_f32(GgufWriter *w, const char *key, float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    begin_kv(w, key, GGUF_F32);
    put_u32(w, bits);
}

void gguf_writer_bool(GgufWriter *w, const char *key, int value)
{
    unsigned char b = (unsigned char)value;
    begin_kv(w, key, GGUF_BOOL);
    put(w, &b, 1);
}

void gguf_writer_string(GgufWriter *w, const char *key, const char *value)
{
    begin_kv(w, key, GGUF_STRING);
    put_string(w, value);
}

void gguf_writer_raw(GgufWriter *w, const char *key, uint32_t type, const void *value, size_t bytes)
{
    begin_kv(w, key, type);
    put(w, value, bytes);
}

void gguf_writer_string_array(GgufWriter *w, const char *key, const char *const *strings, size_t count)
{
    begin_kv(w, key, GGUF_ARRAY);
    put_u32(w, GGUF_STRING);
    put_u64(w, count);
    for (size_t i = 0; i < count; i++)
        put_string(w, strings[i]);
}

void gguf_writer_array32(GgufWriter *w, const char *key, GgufValueType elem, const void *values, size_t count)
{
    begin_kv(w, key, GGUF_ARRAY);
    put_u32(w, elem);
    put_u64(w, count);
    const unsigned char *p = values;
    for (size_t i = 0; i < count; i++) {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        put_u32(w, v);
    }
}

void gguf_writer_tensor(GgufWriter *w, const GgufWriterTensor *t)
{
    size_t n = strlen(t->name) + 1;
    if (w->failed || w->n_tensors >= GGUF_WRITER_MAX_ITEMS || w->names_len + n > NAMES_CAP) {
        w->failed = 1;
        return;
    }
    GgufWriterTensor *dst = &w->tensors[w->n_tensors++];
    *dst = *t;
    memcpy(w->names + w->names_len, t->name, n);
    dst->name = w->names + w->names_len;
    w->names_len += n;
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int gguf_writer_finish(GgufWriter *w, void **image, size_t *bytes, Err *err)
{
    /* Tensor infos go after the metadata in the same buffer, then the
     * whole header+metadata+infos block is copied in front of the data. */
    size_t meta_only = w->meta_len;
    uint64_t offset = 0, end = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const GgufWriterTensor *t = &w->tensors[i];
        put_string(w, t->name);
        put_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++)
            put_u64(w, t->dims[d]);
        put_u32(w, t->type);
        put_u64(w, offset);
        end = offset + t->bytes;
        offset = align_up(end, w->alignment);
    }
    if (w->failed) {
        w->meta_len = meta_only;
        return err_set(err, "out of memory (or over %d items) writing a GGUF image", GGUF_WRITER_MAX_ITEMS);
    }
    size_t head = align_up(24 + w->meta_len, w->alignment);
    /* The file ends with the last tensor's data, no padding after it (as
     * llama.cpp's writer does): every byte of the file is then needed. */
    size_t total = w->n_tensors ? head + (size_t)end : 24 + w->meta_len;
    unsigned char *out = mem_alloc(MEM_WEIGHTS, total);
    if (!out) {
        w->meta_len = meta_only;
        return err_set(err, "out of memory for a GGUF image of %zu bytes", total);
    }
    memcpy(out, "GGUF", 4);
    uint64_t fields[3] = {w->version, w->n_tensors, w->n_kv};
    for (int b = 0; b < 4; b++)
        out[4 + b] = (unsigned char)(fields[0] >> (8 * b));
    for (int b = 0; b < 8; b++) {
        out[8 + b] = (unsigned char)(fields[1] >> (8 * b));
        out[16 + b] = (unsigned char)(fields[2] >> (8 * b));
    }
    memcpy(out + 24, w->meta, w->meta_len);
    uint64_t at = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const GgufWriterTensor *t = &w->tensors[i];
        if (t->bytes)
            memcpy(out + head + at, t->data, t->bytes);
        at = align_up(at + t->bytes, w->alignment);
    }
    w->meta_len = meta_only; /* the writer can be finished again after more changes */
    *image = out;
    *bytes = total;
    return 0;
}
