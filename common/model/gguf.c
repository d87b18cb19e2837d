#include "gguf.h"
#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem.h"

#define GGUF_MAGIC_BYTES "GGUF"
#define HEADER_BYTES 24u /* magic, version, tensor_count, kv_count */

/* The fewest bytes one metadata entry or tensor info can take: they bound
 * the counts a file of a given size can really hold, so an absurd count is
 * refused before anything is allocated for it. */
#define MIN_KV_BYTES 13u     /* key length u64, value type u32, one byte of value */
#define MIN_TENSOR_BYTES 32u /* name length u64, n_dims u32, one dim u64, type u32, offset u64 */

/* Arrays of arrays are legal GGUF; no converter writes them deeper than this. */
#define MAX_ARRAY_DEPTH 4

/* ------------------------------------------------------------ types */

static const char *const VALUE_TYPE_NAMES[GGUF_VALUE_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

static const char *value_type_name(uint32_t t)
{
    return t < GGUF_VALUE_TYPE_COUNT ? VALUE_TYPE_NAMES[t] : "unknown";
}

/* Bytes of a fixed-size value type; 0 for string and array. */
static uint64_t scalar_bytes(uint32_t t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

typedef struct {
    uint32_t type;
    const char *name;
    uint32_t block_elems, block_bytes;
} TensorTypeInfo;

static const TensorTypeInfo TENSOR_TYPES[] = {
    {GGUF_TENSOR_F32, "F32", 1, 4},       {GGUF_TENSOR_F16, "F16", 1, 2},
    {GGUF_TENSOR_Q4_0, "Q4_0", 32, 18},   {GGUF_TENSOR_Q4_1, "Q4_1", 32, 20},
    {GGUF_TENSOR_Q5_0, "Q5_0", 32, 22},   {GGUF_TENSOR_Q5_1, "Q5_1", 32, 24},
    {GGUF_TENSOR_Q8_0, "Q8_0", 32, 34},   {GGUF_TENSOR_Q2_K, "Q2_K", 256, 84},
    {GGUF_TENSOR_Q3_K, "Q3_K", 256, 110}, {GGUF_TENSOR_Q4_K, "Q4_K", 256, 144},
    {GGUF_TENSOR_Q5_K, "Q5_K", 256, 176}, {GGUF_TENSOR_Q6_K, "Q6_K", 256, 210},
    {GGUF_TENSOR_Q8_K, "Q8_K", 256, 292}, {GGUF_TENSOR_I8, "I8", 1, 1},
    {GGUF_TENSOR_I16, "I16", 1, 2},       {GGUF_TENSOR_I32, "I32", 1, 4},
    {GGUF_TENSOR_I64, "I64", 1, 8},       {GGUF_TENSOR_F64, "F64", 1, 8},
    {GGUF_TENSOR_BF16, "BF16", 1, 2},
};

static const TensorTypeInfo *tensor_type_info(uint32_t type)
{
    for (size_t i = 0; i < sizeof TENSOR_TYPES / sizeof TENSOR_TYPES[0]; i++)
        if (TENSOR_TYPES[i].type == type)
            return &TENSOR_TYPES[i];
    return NULL;
}

const char *gguf_tensor_type_name(uint32_t type)
{
    const TensorTypeInfo *t = tensor_type_info(type);
    return t ? t->name : "unknown";
}

int gguf_tensor_type_block(uint32_t type, uint64_t *block_elems, uint64_t *block_bytes)
{
    const TensorTypeInfo *t = tensor_type_info(type);
    if (!t)
        return -1;
    *block_elems = t->block_elems;
    *block_bytes = t->block_bytes;
    return 0;
}

/* ------------------------------------------------------------ reading bytes */

static uint32_t le_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le_u64(const unsigned char *p)
{
    return (uint64_t)le_u32(p) | (uint64_t)le_u32(p + 4) << 32;
}

/* A read position in the image. Every read goes through need(), which
 * compares against the bytes left (never pos + n, which could wrap). */
typedef struct {
    const unsigned char *image;
    size_t size;
    size_t pos;
    Err *err;
} Cursor;

static uint64_t left(const Cursor *c) { return (uint64_t)(c->size - c->pos); }

static int need(Cursor *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return err_set(c->err, "truncated: %s at byte %zu needs %llu bytes, the file has %llu left", what, c->pos,
                       (unsigned long long)n, (unsigned long long)left(c));
    return 0;
}

static int read_u32(Cursor *c, uint32_t *out, const char *what)
{
    if (need(c, 4, what))
        return -1;
    *out = le_u32(c->image + c->pos);
    c->pos += 4;
    return 0;
}

static int read_u64(Cursor *c, uint64_t *out, const char *what)
{
    if (need(c, 8, what))
        return -1;
    *out = le_u64(c->image + c->pos);
    c->pos += 8;
    return 0;
}

static int read_string(Cursor *c, GgufString *s, const char *what)
{
    uint64_t len;
    if (read_u64(c, &len, what))
        return -1;
    if (len > left(c))
        return err_set(c->err, "%s at byte %zu claims %llu bytes, longer than the %llu left in the file", what,
                       c->pos - 8, (unsigned long long)len, (unsigned long long)left(c));
    s->data = (const char *)c->image + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* Names from the file go into error messages: they must not break the one
 * line (a corrupt name may hold a newline) or run on for pages. */
const char *gguf_string_printable(GgufString s, char *buf, size_t n)
{
    if (n == 0)
        return buf;
    size_t keep = s.len > 48 ? 48 : (size_t)s.len, at = 0;
    for (size_t i = 0; i < keep && at + 1 < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        buf[at++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    for (const char *dots = s.len > keep ? "..." : ""; *dots && at + 1 < n; dots++)
        buf[at++] = *dots;
    buf[at] = '\0';
    return buf;
}

/* ------------------------------------------------------------ metadata */

/* Checks (and steps over) the elements of an array whose type and count
 * have been read. Fixed-size elements are checked in one comparison, so a
 * count of 2^60 costs nothing before it is refused. */
static int skip_array_elements(Cursor *c, uint32_t elem, uint64_t count, int depth);

static int skip_value(Cursor *c, uint32_t type, int depth)
{
    if (type >= GGUF_VALUE_TYPE_COUNT)
        return err_set(c->err, "unknown value type %u at byte %zu", type, c->pos);
    uint64_t fixed = scalar_bytes(type);
    if (fixed) {
        if (need(c, fixed, "a value"))
            return -1;
        if (type == GGUF_BOOL && c->image[c->pos] > 1)
            return err_set(c->err, "a bool at byte %zu is %u, not 0 or 1", c->pos, c->image[c->pos]);
        c->pos += (size_t)fixed;
        return 0;
    }
    if (type == GGUF_STRING) {
        GgufString s;
        return read_string(c, &s, "a string");
    }
    uint32_t elem;
    uint64_t count;
    if (read_u32(c, &elem, "an array's element type") || read_u64(c, &count, "an array's length"))
        return -1;
    return skip_array_elements(c, elem, count, depth + 1);
}

static int skip_array_elements(Cursor *c, uint32_t elem, uint64_t count, int depth)
{
    if (depth > MAX_ARRAY_DEPTH)
        return err_set(c->err, "arrays nested deeper than %d at byte %zu", MAX_ARRAY_DEPTH, c->pos);
    if (elem >= GGUF_VALUE_TYPE_COUNT)
        return err_set(c->err, "unknown array element type %u at byte %zu", elem, c->pos);
    uint64_t fixed = scalar_bytes(elem);
    uint64_t min_elem = fixed ? fixed : elem == GGUF_STRING ? 8 : 12;
    if (count > left(c) / min_elem)
        return err_set(c->err, "an array at byte %zu claims %llu elements of type %s, more than the %llu bytes left hold",
                       c->pos, (unsigned long long)count, value_type_name(elem), (unsigned long long)left(c));
    if (fixed && elem != GGUF_BOOL) {
        c->pos += (size_t)(count * fixed);
        return 0;
    }
    for (uint64_t i = 0; i < count; i++)
        if (skip_value(c, elem, depth))
            return -1;
    return 0;
}

/* Fills the offsets of a string array's elements (already checked). */
static void index_strings(const GgufKv *kv, uint64_t *offsets)
{
    uint64_t at = 0;
    for (uint64_t i = 0; i < kv->count; i++) {
        offsets[i] = at;
        at += 8 + le_u64(kv->value + at);
    }
}

/* One metadata entry. With kv NULL it is only checked; otherwise recorded.
 * *strings grows by the elements of a string array. */
static int parse_kv(Cursor *c, GgufKv *kv, uint64_t *strings)
{
    GgufString key;
    uint32_t type;
    if (read_string(c, &key, "the key") || read_u32(c, &type, "the value type"))
        return -1;
    if (key.len == 0)
        return err_set(c->err, "empty key at byte %zu", c->pos - 12);
    char name[64];
    if (type >= GGUF_VALUE_TYPE_COUNT)
        return err_set(c->err, "key '%s' has unknown value type %u", gguf_string_printable(key, name, sizeof name),
                       type);
    GgufKv e = {.key = key, .type = (GgufValueType)type, .elem_type = (GgufValueType)type, .count = 1};
    if (type == GGUF_ARRAY) {
        uint32_t elem;
        if (read_u32(c, &elem, "an array's element type") || read_u64(c, &e.count, "an array's length"))
            goto fail;
        e.elem_type = (GgufValueType)elem;
        e.value = c->image + c->pos;
        if (skip_array_elements(c, elem, e.count, 1))
            goto fail;
        if (elem == GGUF_STRING)
            *strings += e.count;
    } else {
        e.value = c->image + c->pos;
        if (skip_value(c, type, 0))
            goto fail;
    }
    if (kv)
        *kv = e;
    return 0;
fail:
    return err_prefix(c->err, "key '%s'", gguf_string_printable(key, name, sizeof name));
}

/* ------------------------------------------------------------ tensors */

static int parse_tensor(Cursor *c, GgufTensor *t, uint64_t index)
{
    GgufTensor e = {0};
    uint32_t type;
    if (read_string(c, &e.name, "the name") || read_u32(c, &e.n_dims, "the number of dimensions"))
        goto fail;
    if (e.n_dims == 0 || e.n_dims > GGUF_MAX_DIMS) {
        err_set(c->err, "%u dimensions (1 to %d allowed)", e.n_dims, GGUF_MAX_DIMS);
        goto fail;
    }
    e.n_elements = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        e.dims[d] = 1;
        if (d < e.n_dims && read_u64(c, &e.dims[d], "a dimension"))
            goto fail;
        if (e.dims[d] == 0) {
            err_set(c->err, "dimension %u is 0", d);
            goto fail;
        }
        if (e.dims[d] > UINT64_MAX / 2 / e.n_elements) {
            err_set(c->err, "its dimensions multiply to more than 2^63 elements");
            goto fail;
        }
        e.n_elements *= e.dims[d];
    }
    if (read_u32(c, &type, "the type") || read_u64(c, &e.offset, "the data offset"))
        goto fail;
    uint64_t block_elems, block_bytes;
    if (gguf_tensor_type_block(type, &block_elems, &block_bytes)) {
        err_set(c->err, "unknown tensor type %u", type);
        goto fail;
    }
    e.type = (GgufTensorType)type;
    if (e.dims[0] % block_elems != 0) {
        err_set(c->err, "rows of %llu elements do not split into %s blocks of %llu", (unsigned long long)e.dims[0],
                gguf_tensor_type_name(type), (unsigned long long)block_elems);
        goto fail;
    }
    uint64_t blocks = e.n_elements / block_elems;
    if (blocks > UINT64_MAX / block_bytes) {
        err_set(c->err, "%llu elements are too many bytes", (unsigned long long)e.n_elements);
        goto fail;
    }
    e.bytes = blocks * block_bytes;
    if (t)
        *t = e;
    return 0;
fail:
    if (e.name.data) {
        char name[64];
        return err_prefix(c->err, "tensor %llu '%s'", (unsigned long long)index,
                          gguf_string_printable(e.name, name, sizeof name));
    }
    return err_prefix(c->err, "tensor %llu", (unsigned long long)index);
}

/* ------------------------------------------------------------ the whole file */

static int parse_header(Cursor *c, GgufFile *f)
{
    if (c->size > 0 && memcmp(c->image, GGUF_MAGIC_BYTES, c->size < 4 ? c->size : 4) != 0)
        return err_set(c->err, "not a GGUF file (it does not start with the bytes 'GGUF')");
    if (c->size < HEADER_BYTES)
        return err_set(c->err, "truncated: %zu bytes, too short for the 24-byte GGUF header", c->size);
    f->version = le_u32(c->image + 4);
    if (f->version == 0x02000000u || f->version == 0x03000000u)
        return err_set(c->err, "a big-endian GGUF file; kvlab reads little-endian ones only");
    if (f->version == 1)
        return err_set(c->err, "GGUF version 1 (32-bit counts) is not supported; versions 2 and 3 are");
    if (f->version != 2 && f->version != 3)
        return err_set(c->err, "unknown GGUF version %u (versions 2 and 3 are read)", f->version);
    f->n_tensors = le_u64(c->image + 8);
    f->n_kv = le_u64(c->image + 16);
    c->pos = HEADER_BYTES;
    if (f->n_kv > left(c) / MIN_KV_BYTES)
        return err_set(c->err, "the header claims %llu metadata entries; %llu bytes cannot hold them",
                       (unsigned long long)f->n_kv, (unsigned long long)left(c));
    if (f->n_tensors > left(c) / MIN_TENSOR_BYTES)
        return err_set(c->err, "the header claims %llu tensors; %llu bytes cannot hold them",
                       (unsigned long long)f->n_tensors, (unsigned long long)left(c));
    return 0;
}

/* Reads metadata and tensor infos; with store 0 only checks them and
 * counts what the tables need, with store 1 fills the tables. Two passes
 * keep allocation proportional to what the file really contains. */
static int parse_sections(Cursor *c, GgufFile *f, int store, uint64_t *strings)
{
    c->pos = HEADER_BYTES;
    *strings = 0;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (parse_kv(c, store ? &f->kv[i] : NULL, strings))
            return err_prefix(c->err, "metadata entry %llu", (unsigned long long)i);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (parse_tensor(c, store ? &f->tensors[i] : NULL, i))
            return -1;
    return 0;
}

static int read_alignment(GgufFile *f, Err *err)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKv *kv = gguf_find(f, "general.alignment");
    if (!kv)
        return 0;
    if (kv->type != GGUF_U32)
        return err_set(err, "general.alignment is a %s, not a u32", value_type_name(kv->type));
    f->alignment = le_u32(kv->value);
    if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) != 0)
        return err_set(err, "general.alignment is %u, not a power of two", f->alignment);
    return 0;
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

int gguf_check_no_overlap(const GgufFile *f, Err *err)
{
    /* [n_tensors] scratch, freed before the model runs: counted with the
     * activations, so that the weights' peak stays the weights' bytes. */
    const GgufTensor **order = mem_alloc_array(MEM_ACTIVATIONS, (size_t)f->n_tensors, sizeof *order);
    if (!order)
        return err_set(err, "out of memory for %llu tensor infos", (unsigned long long)f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_tensor_offset);
    int status = 0;
    for (uint64_t i = 1; i < f->n_tensors && status == 0; i++) {
        const GgufTensor *before = order[i - 1], *t = order[i];
        if (before->offset + before->bytes > t->offset) {
            char a[64], b[64];
            gguf_string_printable(before->name, a, sizeof a);
            gguf_string_printable(t->name, b, sizeof b);
            status = err_set(err, "tensors '%s' and '%s' overlap (data offsets %llu and %llu, %llu bytes)", a, b,
                             (unsigned long long)before->offset, (unsigned long long)t->offset,
                             (unsigned long long)before->bytes);
        }
    }
    mem_free(order);
    return status;
}

/* Where the data section starts, and every tensor inside it. */
static int place_tensors(GgufFile *f, size_t end_of_infos, Err *err)
{
    uint64_t a = f->alignment;
    f->data_start = ((uint64_t)end_of_infos + a - 1) / a * a;
    if (f->n_tensors == 0)
        return 0;
    if (f->data_start > f->size)
        return err_set(err, "truncated: the tensor data would start at byte %llu, the file has %zu",
                       (unsigned long long)f->data_start, f->size);
    uint64_t room = f->size - f->data_start;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        GgufTensor *t = &f->tensors[i];
        char name[64];
        gguf_string_printable(t->name, name, sizeof name);
        if (t->offset % a != 0)
            return err_set(err, "tensor '%s': data offset %llu is not a multiple of the alignment %llu", name,
                           (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > room || t->bytes > room - t->offset)
            return err_set(err, "tensor '%s': its %llu bytes at data offset %llu lie outside the file "
                                "(%llu bytes of data)", name, (unsigned long long)t->bytes,
                           (unsigned long long)t->offset, (unsigned long long)room);
        t->data = f->image + f->data_start + t->offset;
    }
    return 0;
}

static const GgufString *sort_base_key(const void *p) { return &((const GgufKv *)p)->key; }
static const GgufString *sort_base_name(const void *p) { return &((const GgufTensor *)p)->name; }

static int string_cmp(const GgufString *a, const GgufString *b)
{
    uint64_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, (size_t)n) : 0;
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int cmp_kv_ptr(const void *a, const void *b)
{
    return string_cmp(sort_base_key(*(const void *const *)a), sort_base_key(*(const void *const *)b));
}

static int cmp_tensor_ptr(const void *a, const void *b)
{
    return string_cmp(sort_base_name(*(const void *const *)a), sort_base_name(*(const void *const *)b));
}

/* Two entries with one name would make lookups ambiguous: refuse them.
 * Sorting pointers keeps this O(n log n) whatever the counts. */
static int check_unique(const void *items, uint64_t n, size_t item_bytes, int (*cmp)(const void *, const void *),
                        const GgufString *(*name_of)(const void *), const char *what, Err *err)
{
    if (n < 2)
        return 0;
    const void **order = mem_alloc_array(MEM_WEIGHTS, (size_t)n, sizeof *order);
    if (!order)
        return err_set(err, "out of memory checking %llu %s names", (unsigned long long)n, what);
    for (uint64_t i = 0; i < n; i++)
        order[i] = (const char *)items + i * item_bytes;
    qsort(order, (size_t)n, sizeof *order, cmp);
    int rc = 0;
    for (uint64_t i = 1; i < n && rc == 0; i++)
        if (cmp(&order[i - 1], &order[i]) == 0) {
            char name[64];
            rc = err_set(err, "two %s named '%s'", what, gguf_string_printable(*name_of(order[i]), name, sizeof name));
        }
    mem_free(order);
    return rc;
}

static int build_string_index(GgufFile *f, uint64_t strings, Err *err)
{
    f->string_index = mem_alloc_array(MEM_WEIGHTS, (size_t)(strings ? strings : 1), sizeof(uint64_t));
    if (!f->string_index)
        return err_set(err, "out of memory for the index of %llu strings", (unsigned long long)strings);
    uint64_t at = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        GgufKv *kv = &f->kv[i];
        if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
            continue;
        kv->string_at = f->string_index + at;
        index_strings(kv, f->string_index + at);
        at += kv->count;
    }
    return 0;
}

int gguf_parse_image(GgufFile *f, const void *image, size_t size, Err *err)
{
    memset(f, 0, sizeof *f);
    f->image = image;
    f->size = size;
    Cursor c = {.image = image, .size = size, .err = err};
    uint64_t strings;
    if (parse_header(&c, f) || parse_sections(&c, f, 0, &strings))
        return -1;
    f->kv = mem_alloc_array(MEM_WEIGHTS, (size_t)(f->n_kv ? f->n_kv : 1), sizeof *f->kv);
    f->tensors = mem_alloc_array(MEM_WEIGHTS, (size_t)(f->n_tensors ? f->n_tensors : 1), sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        gguf_close(f);
        return err_set(err, "out of memory for %llu metadata entries and %llu tensors", (unsigned long long)f->n_kv,
                       (unsigned long long)f->n_tensors);
    }
    if (parse_sections(&c, f, 1, &strings) || build_string_index(f, strings, err) ||
        check_unique(f->kv, f->n_kv, sizeof *f->kv, cmp_kv_ptr, sort_base_key, "metadata keys", err) ||
        check_unique(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_tensor_ptr, sort_base_name, "tensors", err) ||
        read_alignment(f, err) || place_tensors(f, c.pos, err)) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

int gguf_has_magic(const void *head, size_t bytes)
{
    return bytes >= 4 && memcmp(head, GGUF_MAGIC_BYTES, 4) == 0;
}

int gguf_open(GgufFile *f, const char *path, Err *err)
{
    memset(f, 0, sizeof *f);
    /* infile_open refuses FIFOs and devices without waiting on them. */
    size_t size;
    int fd = infile_open(path, UINT64_MAX, &size, err);
    if (fd < 0)
        return -1;
    if (size < HEADER_BYTES) {
        /* Too short to map usefully (an empty file cannot be mapped at
         * all): parse what there is, which names the problem. */
        unsigned char head[HEADER_BYTES];
        ssize_t got = pread(fd, head, size, 0);
        close(fd);
        GgufFile tiny;
        if (gguf_parse_image(&tiny, head, got > 0 ? (size_t)got : 0, err) == 0)
            gguf_close(&tiny); /* cannot happen: 24 bytes are the minimum */
        return err_prefix(err, "%s", path);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return err_set(err, "%s: cannot map: %s", path, strerror(errno));
    if (gguf_parse_image(f, map, size, err)) {
        munmap(map, size);
        return err_prefix(err, "%s", path);
    }
    f->map = map;
    f->map_bytes = size;
    mem_track(MEM_WEIGHTS, MEM_HOST, size);
    return 0;
}

void gguf_close(GgufFile *f)
{
    mem_free(f->kv);
    mem_free(f->tensors);
    mem_free(f->string_index);
    if (f->map) {
        munmap(f->map, f->map_bytes);
        mem_untrack(MEM_WEIGHTS, MEM_HOST, f->map_bytes);
    }
    memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------ lookups */

int gguf_string_eq(GgufString s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.data, c, n) == 0;
}

const GgufKv *gguf_find(const GgufFile *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_string_eq(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

static const GgufKv *find_or_fail(const GgufFile *f, const char *key, Err *err)
{
    const GgufKv *kv = gguf_find(f, key);
    if (!kv)
        err_set(err, "metadata key '%s' is missing", key);
    return kv;
}

static int wrong_type(const GgufKv *kv, const char *key, const char *wanted, Err *err)
{
    if (kv->type == GGUF_ARRAY)
        return err_set(err, "metadata key '%s' is an array of %s, not %s", key, value_type_name(kv->elem_type), wanted);
    return err_set(err, "metadata key '%s' is a %s, not %s", key, value_type_name(kv->type), wanted);
}

int gguf_get_u32(const GgufFile *f, const char *key, uint32_t *out, Err *err)
{
    const GgufKv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    const unsigned char *p = kv->value;
    int64_t v;
    switch (kv->type) {
    case GGUF_U8: v = p[0]; break;
    case GGUF_I8: v = (int8_t)p[0]; break;
    case GGUF_U16: v = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_I16: v = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_U32: v = le_u32(p); break;
    case GGUF_I32: v = (int32_t)le_u32(p); break;
    case GGUF_U64: v = le_u64(p) > UINT32_MAX ? -1 : (int64_t)le_u64(p); break;
    case GGUF_I64: v = (int64_t)le_u64(p); break;
    default: return wrong_type(kv, key, "an integer", err);
    }
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return err_set(err, "metadata key '%s' is out of range for a count or id", key);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const GgufFile *f, const char *key, float *out, Err *err)
{
    const GgufKv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    if (kv->type == GGUF_F32) {
        uint32_t bits = le_u32(kv->value);
        memcpy(out, &bits, sizeof *out);
        return 0;
    }
    if (kv->type == GGUF_F64) {
        uint64_t bits = le_u64(kv->value);
        double d;
        memcpy(&d, &bits, sizeof d);
        *out = (float)d;
        return 0;
    }
    return wrong_type(kv, key, "a float", err);
}

int gguf_get_bool(const GgufFile *f, const char *key, int *out, Err *err)
{
    const GgufKv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    if (kv->type != GGUF_BOOL)
        return wrong_type(kv, key, "a bool", err);
    *out = kv->value[0];
    return 0;
}

int gguf_get_string(const GgufFile *f, const char *key, GgufString *out, Err *err)
{
    const GgufKv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    if (kv->type != GGUF_STRING)
        return wrong_type(kv, key, "a string", err);
    out->len = le_u64(kv->value);
    out->data = (const char *)kv->value + 8;
    return 0;
}

int gguf_get_array(const GgufFile *f, const char *key, GgufValueType elem, uint64_t *count, const GgufKv **kv_out,
                   Err *err)
{
    const GgufKv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    if (kv->type != GGUF_ARRAY || kv->elem_type != elem) {
        char wanted[32];
        snprintf(wanted, sizeof wanted, "an array of %s", value_type_name(elem));
        return wrong_type(kv, key, wanted, err);
    }
    *count = kv->count;
    *kv_out = kv;
    return 0;
}

GgufString gguf_array_string(const GgufKv *kv, uint64_t i)
{
    const unsigned char *p = kv->value + kv->string_at[i];
    return (GgufString){.data = (const char *)p + 8, .len = le_u64(p)};
}

int32_t gguf_array_i32(const GgufKv *kv, uint64_t i)
{
    return (int32_t)le_u32(kv->value + 4 * i);
}

float gguf_array_f32(const GgufKv *kv, uint64_t i)
{
    uint32_t bits = le_u32(kv->value + 4 * i);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

const GgufTensor *gguf_find_tensor(const GgufFile *f, const char *name)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_string_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}
