/* The GGUF reader: every value type, tensor infos, alignment, the real
 * SmolLM2 file, and every way a file can be broken (each refused with one
 * line, nothing leaked, nothing read out of bounds: the sanitizer build runs
 * these too). */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "helpers.h"
#include "mem.h"
#include "suites.h"

#define SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"

/* A small image with one entry of every type and three tensors. */
static void *sample_image(size_t *bytes)
{
    GgufWriter w;
    gguf_writer_init(&w);
    unsigned char u8 = 200, i8 = 0x80; /* -128 */
    unsigned char u16[2] = {0x34, 0x12}, i16[2] = {0xff, 0xff};
    unsigned char u64[8] = {7, 0, 0, 0, 0, 0, 0, 0}, i64[8] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    double f64 = 0.125;
    gguf_writer_string(&w, "general.architecture", "llama");
    gguf_writer_raw(&w, "t.u8", GGUF_U8, &u8, 1);
    gguf_writer_raw(&w, "t.i8", GGUF_I8, &i8, 1);
    gguf_writer_raw(&w, "t.u16", GGUF_U16, u16, 2);
    gguf_writer_raw(&w, "t.i16", GGUF_I16, i16, 2);
    gguf_writer_u32(&w, "t.u32", 4000000000u);
    int32_t i32 = -5;
    gguf_writer_raw(&w, "t.i32", GGUF_I32, &i32, 4);
    gguf_writer_f32(&w, "t.f32", 1e-5f);
    gguf_writer_bool(&w, "t.bool", 1);
    gguf_writer_raw(&w, "t.u64", GGUF_U64, u64, 8);
    gguf_writer_raw(&w, "t.i64", GGUF_I64, i64, 8);
    gguf_writer_raw(&w, "t.f64", GGUF_F64, &f64, 8);
    const char *words[] = {"", "a", "héllo", "<|im_start|>"};
    gguf_writer_string_array(&w, "t.strings", words, 4);
    int32_t ints[3] = {3, -1, 7};
    gguf_writer_array32(&w, "t.ints", GGUF_I32, ints, 3);
    float floats[2] = {0.5f, -2.0f};
    gguf_writer_array32(&w, "t.floats", GGUF_F32, floats, 2);
    /* An array of two arrays of u8 ([1, 2] and [3]): legal GGUF, stepped over. */
    unsigned char nested[] = {GGUF_ARRAY, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,              /* 2 arrays */
                              GGUF_U8,    0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2,        /* [1, 2] */
                              GGUF_U8,    0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3};          /* [3] */
    gguf_writer_raw(&w, "t.nested", GGUF_ARRAY, nested, sizeof nested);
    gguf_writer_u32(&w, "general.alignment", 64);
    static float norm[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static unsigned char q[2 * 20];
    for (size_t i = 0; i < sizeof q; i++)
        q[i] = (unsigned char)i;
    static uint16_t half[6] = {0x3c00, 0x4000, 0, 0, 0, 0};
    gguf_writer_tensor(&w, &(GgufWriterTensor){"norm", GGUF_TENSOR_F32, 1, {8}, norm, sizeof norm});
    gguf_writer_tensor(&w, &(GgufWriterTensor){"blk.0.q", GGUF_TENSOR_Q4_1, 2, {32, 2}, q, sizeof q});
    gguf_writer_tensor(&w, &(GgufWriterTensor){"h", GGUF_TENSOR_F16, 3, {1, 2, 3}, half, sizeof half});
    void *image;
    Err err = {{0}};
    ck_assert_msg(gguf_writer_finish(&w, &image, bytes, &err) == 0, "%s", err.msg);
    gguf_writer_free(&w);
    return image;
}

START_TEST(every_value_type_reads_back)
{
    size_t bytes;
    void *image = sample_image(&bytes);
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_parse_image(&f, image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.version, 3);
    ck_assert_uint_eq(f.n_kv, 17);
    ck_assert_uint_eq(f.n_tensors, 3);
    uint32_t u;
    ck_assert_int_eq(gguf_get_u32(&f, "t.u8", &u, &err), 0);
    ck_assert_uint_eq(u, 200);
    ck_assert_int_eq(gguf_get_u32(&f, "t.u16", &u, &err), 0);
    ck_assert_uint_eq(u, 0x1234);
    ck_assert_int_eq(gguf_get_u32(&f, "t.u32", &u, &err), 0);
    ck_assert_uint_eq(u, 4000000000u);
    ck_assert_int_eq(gguf_get_u32(&f, "t.u64", &u, &err), 0);
    ck_assert_uint_eq(u, 7);
    /* Negative values are not counts. */
    const char *negative[] = {"t.i8", "t.i16", "t.i32", "t.i64"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(gguf_get_u32(&f, negative[i], &u, &err), -1);
        ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
    }
    float x;
    ck_assert_int_eq(gguf_get_f32(&f, "t.f32", &x, &err), 0);
    ck_assert(x == 1e-5f);
    ck_assert_int_eq(gguf_get_f32(&f, "t.f64", &x, &err), 0);
    ck_assert(x == 0.125f);
    int b;
    ck_assert_int_eq(gguf_get_bool(&f, "t.bool", &b, &err), 0);
    ck_assert_int_eq(b, 1);
    GgufString s;
    ck_assert_int_eq(gguf_get_string(&f, "general.architecture", &s, &err), 0);
    ck_assert(gguf_string_eq(s, "llama"));
    ck_assert(!gguf_string_eq(s, "llam"));
    uint64_t n;
    const GgufKv *kv;
    ck_assert_int_eq(gguf_get_array(&f, "t.strings", GGUF_STRING, &n, &kv, &err), 0);
    ck_assert_uint_eq(n, 4);
    const char *words[] = {"", "a", "héllo", "<|im_start|>"};
    for (int i = 3; i >= 0; i--) /* any order: the index makes each O(1) */
        ck_assert_msg(gguf_string_eq(gguf_array_string(kv, (uint64_t)i), words[i]), "string %d", i);
    ck_assert_int_eq(gguf_get_array(&f, "t.ints", GGUF_I32, &n, &kv, &err), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(gguf_array_i32(kv, 1), -1);
    ck_assert_int_eq(gguf_array_i32(kv, 2), 7);
    ck_assert_int_eq(gguf_get_array(&f, "t.floats", GGUF_F32, &n, &kv, &err), 0);
    ck_assert(gguf_array_f32(kv, 1) == -2.0f);
    ck_assert_int_eq(gguf_get_array(&f, "t.nested", GGUF_ARRAY, &n, &kv, &err), 0);
    ck_assert_uint_eq(n, 2);
    gguf_close(&f);
    mem_free(image);
}
END_TEST

START_TEST(tensor_infos_and_alignment)
{
    size_t bytes;
    unsigned char *image = sample_image(&bytes);
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_parse_image(&f, image, bytes, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.alignment, 64);
    ck_assert_uint_eq(f.data_start % 64, 0);
    const GgufTensor *norm = gguf_find_tensor(&f, "norm");
    const GgufTensor *q = gguf_find_tensor(&f, "blk.0.q");
    const GgufTensor *h = gguf_find_tensor(&f, "h");
    ck_assert_ptr_nonnull(norm);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_null(gguf_find_tensor(&f, "blk.0"));
    ck_assert_uint_eq(norm->n_elements, 8);
    ck_assert_uint_eq(norm->bytes, 32);
    ck_assert_ptr_eq(norm->data, image + f.data_start);
    ck_assert(((const float *)norm->data)[7] == 8.0f);
    ck_assert_int_eq(q->type, GGUF_TENSOR_Q4_1);
    ck_assert_uint_eq(q->dims[0], 32);
    ck_assert_uint_eq(q->dims[1], 2);
    ck_assert_uint_eq(q->bytes, 40);
    ck_assert_uint_eq(q->offset, 64); /* 32 bytes of norm, padded to 64 */
    ck_assert_ptr_eq(q->data, image + f.data_start + 64);
    ck_assert_uint_eq(h->n_dims, 3);
    ck_assert_uint_eq(h->n_elements, 6);
    ck_assert_uint_eq(h->dims[3], 1);
    ck_assert_uint_eq(h->offset, 128);
    ck_assert_str_eq(gguf_tensor_type_name(GGUF_TENSOR_Q8_0), "Q8_0");
    ck_assert_str_eq(gguf_tensor_type_name(99), "unknown");
    gguf_close(&f);
    mem_free(image);
}
END_TEST

START_TEST(getters_say_what_is_wrong)
{
    size_t bytes;
    void *image = sample_image(&bytes);
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_parse_image(&f, image, bytes, &err) == 0, "%s", err.msg);
    uint32_t u;
    float x;
    int b;
    GgufString s;
    uint64_t n;
    const GgufKv *kv;
    ck_assert_ptr_null(gguf_find(&f, "llama.block_count"));
    ck_assert_int_eq(gguf_get_u32(&f, "llama.block_count", &u, &err), -1);
    ck_assert_str_eq(err.msg, "metadata key 'llama.block_count' is missing");
    ck_assert_int_eq(gguf_get_u32(&f, "general.architecture", &u, &err), -1);
    ck_assert_str_eq(err.msg, "metadata key 'general.architecture' is a string, not an integer");
    ck_assert_int_eq(gguf_get_f32(&f, "t.u32", &x, &err), -1);
    ck_assert_str_eq(err.msg, "metadata key 't.u32' is a u32, not a float");
    ck_assert_int_eq(gguf_get_bool(&f, "t.u8", &b, &err), -1);
    ck_assert_int_eq(gguf_get_string(&f, "t.strings", &s, &err), -1);
    ck_assert_str_eq(err.msg, "metadata key 't.strings' is an array of string, not a string");
    ck_assert_int_eq(gguf_get_array(&f, "t.ints", GGUF_F32, &n, &kv, &err), -1);
    ck_assert_str_eq(err.msg, "metadata key 't.ints' is an array of i32, not an array of f32");
    ck_assert_int_eq(gguf_get_array(&f, "t.u8", GGUF_U8, &n, &kv, &err), -1);
    gguf_close(&f);
    mem_free(image);
}
END_TEST

/* Parses a broken image: it must fail with one line containing @p word,
 * and leave nothing allocated. */
static void expect_refused(const void *image, size_t bytes, const char *word, const char *what)
{
    size_t before = mem_current(MEM_WEIGHTS, MEM_HOST);
    GgufFile f;
    Err err = {{0}};
    int rc = gguf_parse_image(&f, image, bytes, &err);
    if (rc == 0)
        gguf_close(&f);
    ck_assert_msg(rc == -1, "%s: accepted", what);
    ck_assert_msg(err.msg[0] != '\0', "%s: no message", what);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "%s: not one line: %s", what, err.msg);
    ck_assert_msg(!word || strstr(err.msg, word), "%s: '%s' lacks '%s'", what, err.msg, word);
    ck_assert_msg(mem_current(MEM_WEIGHTS, MEM_HOST) == before, "%s: leaked", what);
}

static void put_u32_at(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64_at(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

START_TEST(truncated_anywhere)
{
    size_t bytes;
    unsigned char *image = sample_image(&bytes);
    /* Every proper prefix: the last tensor's data runs to the end, so each
     * one is missing something the header promises. A copy of exactly
     * that many bytes lets the sanitizer catch any read past it. */
    for (size_t cut = 0; cut < bytes; cut++) {
        unsigned char *prefix = malloc(cut ? cut : 1);
        memcpy(prefix, image, cut);
        char what[64];
        snprintf(what, sizeof what, "cut at %zu of %zu", cut, bytes);
        expect_refused(prefix, cut, NULL, what);
        free(prefix);
    }
    mem_free(image);
}
END_TEST

START_TEST(bad_headers)
{
    size_t bytes;
    unsigned char *image = sample_image(&bytes);
    unsigned char *bad = malloc(bytes);
    struct {
        size_t at;
        int width; /* 4 or 8 */
        uint64_t value;
        const char *word;
    } cases[] = {
        {0, 4, 0x45554747u /* "GGUE" */, "not a GGUF file"},
        {4, 4, 0x03000000u, "big-endian"},
        {4, 4, 1, "version 1"},
        {4, 4, 4, "unknown GGUF version 4"},
        {4, 4, 0, "unknown GGUF version 0"},
        {8, 8, 1ull << 40, "tensors"},
        {8, 8, UINT64_MAX, "tensors"},
        {16, 8, 1ull << 60, "metadata entries"},
        {16, 8, 18, NULL}, /* one entry more than written: the tensor infos read as one */
        {24, 8, 1ull << 62, "longer than"},  /* the first key's length */
        {24, 8, bytes, "longer than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(bad, image, bytes);
        if (cases[i].width == 4)
            put_u32_at(bad + cases[i].at, (uint32_t)cases[i].value);
        else
            put_u64_at(bad + cases[i].at, cases[i].value);
        char what[64];
        snprintf(what, sizeof what, "header case %zu", i);
        expect_refused(bad, bytes, cases[i].word, what);
    }
    /* Version 2 has the same layout: accepted. */
    memcpy(bad, image, bytes);
    put_u32_at(bad + 4, 2);
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_parse_image(&f, bad, bytes, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.version, 2);
    gguf_close(&f);
    free(bad);
    mem_free(image);
}
END_TEST

/* An image with one metadata entry written raw, and one F32 tensor. */
static void *one_entry_image(uint32_t type, const void *value, size_t value_bytes, size_t *bytes)
{
    GgufWriter w;
    gguf_writer_init(&w);
    gguf_writer_raw(&w, "k", type, value, value_bytes);
    static float data[4];
    gguf_writer_tensor(&w, &(GgufWriterTensor){"t", GGUF_TENSOR_F32, 1, {4}, data, sizeof data});
    void *image;
    Err err = {{0}};
    ck_assert_msg(gguf_writer_finish(&w, &image, bytes, &err) == 0, "%s", err.msg);
    gguf_writer_free(&w);
    return image;
}

START_TEST(bad_metadata_values)
{
    struct {
        uint32_t type;
        unsigned char value[24];
        size_t value_bytes;
        const char *word;
    } cases[] = {
        {13, {0}, 4, "unknown value type 13"},
        {GGUF_BOOL, {2}, 1, "not 0 or 1"},
        {GGUF_STRING, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 8, "longer than"},
        /* arrays: element type, count */
        {GGUF_ARRAY, {GGUF_U32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, 12, "claims"},
        {GGUF_ARRAY, {GGUF_STRING, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 12, "claims"},
        {GGUF_ARRAY, {GGUF_ARRAY, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}, 12, "claims"},
        {GGUF_ARRAY, {77, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, 12, "unknown array element type 77"},
        {GGUF_ARRAY, {GGUF_BOOL, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 5}, 14, "not 0 or 1"},
        /* an array of one array of one string whose length exceeds the file */
        {GGUF_ARRAY, {GGUF_ARRAY, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, GGUF_STRING, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
         24, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t bytes;
        void *image = one_entry_image(cases[i].type, cases[i].value, cases[i].value_bytes, &bytes);
        char what[64];
        snprintf(what, sizeof what, "metadata case %zu", i);
        expect_refused(image, bytes, cases[i].word, what);
        mem_free(image);
    }
}
END_TEST

/* An image with one tensor whose info is given. */
static void *one_tensor_image(const GgufWriterTensor *t, size_t *bytes)
{
    GgufWriter w;
    gguf_writer_init(&w);
    gguf_writer_string(&w, "general.architecture", "llama");
    gguf_writer_tensor(&w, t);
    void *image;
    Err err = {{0}};
    ck_assert_msg(gguf_writer_finish(&w, &image, bytes, &err) == 0, "%s", err.msg);
    gguf_writer_free(&w);
    return image;
}

START_TEST(bad_tensor_infos)
{
    static unsigned char data[4096];
    struct {
        GgufWriterTensor t;
        const char *word;
    } cases[] = {
        {{"t", GGUF_TENSOR_F32, 0, {4}, data, 16}, "0 dimensions"},
        {{"t", GGUF_TENSOR_F32, 5, {1, 1, 1, 1}, data, 16}, "5 dimensions"},
        {{"t", GGUF_TENSOR_F32, 2, {4, 0}, data, 16}, "dimension 1 is 0"},
        {{"t", GGUF_TENSOR_F32, 2, {1ull << 40, 1ull << 40}, data, 16}, "more than 2^63 elements"},
        /* a name that would break the one line */
        {{"bad\nname\x01", 99, 1, {4}, data, 16}, "tensor 0 'bad?name?': unknown tensor type 99"},
        {{"t", 99, 1, {4}, data, 16}, "unknown tensor type 99"},
        {{"t", 4, 1, {4}, data, 16}, "unknown tensor type 4"},
        {{"t", GGUF_TENSOR_Q4_1, 2, {33, 2}, data, 40}, "do not split"},
        {{"t", GGUF_TENSOR_F32, 1, {2000}, data, 16}, "outside the file"},
        {{"t", GGUF_TENSOR_Q8_0, 2, {32, 1ull << 40}, data, 16}, "outside the file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t bytes;
        void *image = one_tensor_image(&cases[i].t, &bytes);
        char what[64];
        snprintf(what, sizeof what, "tensor case %zu", i);
        expect_refused(image, bytes, cases[i].word, what);
        mem_free(image);
    }
}
END_TEST

START_TEST(bad_offsets_alignment_and_duplicates)
{
    size_t bytes;
    unsigned char *image = sample_image(&bytes);
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_parse_image(&f, image, bytes, &err) == 0, "%s", err.msg);
    /* Where the offset field of the second tensor ("blk.0.q") is: it
     * follows its name, n_dims, two dims and type. */
    const GgufTensor *q = gguf_find_tensor(&f, "blk.0.q");
    size_t offset_at = (size_t)((const unsigned char *)q->name.data - image) + q->name.len + 4 + 16 + 4;
    gguf_close(&f);
    unsigned char *bad = malloc(bytes);
    uint64_t offsets[] = {65, 1ull << 62, UINT64_MAX - 63, (bytes + 63) / 64 * 64};
    const char *words[] = {"not a multiple", "outside", "outside", "outside"};
    for (int i = 0; i < 4; i++) {
        memcpy(bad, image, bytes);
        put_u64_at(bad + offset_at, offsets[i]);
        expect_refused(bad, bytes, words[i], "tensor offset");
    }
    free(bad);
    mem_free(image);

    GgufWriter w;
    void *img;
    static float data[4];
    for (int c = 0; c < 4; c++) {
        gguf_writer_init(&w);
        gguf_writer_string(&w, "a", "x");
        if (c == 0)
            gguf_writer_string(&w, "a", "y");
        if (c == 2)
            gguf_writer_u32(&w, "general.alignment", 48);
        if (c == 3)
            gguf_writer_string(&w, "general.alignment", "32");
        gguf_writer_tensor(&w, &(GgufWriterTensor){"t", GGUF_TENSOR_F32, 1, {4}, data, sizeof data});
        if (c == 1)
            gguf_writer_tensor(&w, &(GgufWriterTensor){"t", GGUF_TENSOR_F32, 1, {4}, data, sizeof data});
        ck_assert_int_eq(gguf_writer_finish(&w, &img, &bytes, &err), 0);
        gguf_writer_free(&w);
        const char *word[] = {"two metadata keys named 'a'", "two tensors named 't'", "not a power of two",
                              "general.alignment is a string"};
        expect_refused(img, bytes, word[c], word[c]);
        mem_free(img);
    }
}
END_TEST

START_TEST(printable_names)
{
    char buf[64];
    GgufString s = {"ok.name", 7};
    ck_assert_str_eq(gguf_string_printable(s, buf, sizeof buf), "ok.name");
    GgufString ctl = {"a\nb\tc\x7f\xc3\xa9", 8};
    ck_assert_str_eq(gguf_string_printable(ctl, buf, sizeof buf), "a?b?c???");
    char longer[100];
    memset(longer, 'x', sizeof longer);
    GgufString l = {longer, sizeof longer};
    gguf_string_printable(l, buf, sizeof buf);
    ck_assert_uint_eq(strlen(buf), 51);
    ck_assert_str_eq(buf + 48, "...");
    ck_assert_str_eq(gguf_string_printable(l, buf, 5), "xxxx");
}
END_TEST

START_TEST(open_refuses_what_is_not_a_file)
{
    GgufFile f;
    Err err = {{0}};
    ck_assert_int_eq(gguf_open(&f, "/nonexistent/x.gguf", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "cannot open"));
    ck_assert_int_eq(gguf_open(&f, "/tmp", &err), -1);
    ck_assert_str_eq(err.msg, "/tmp is not a regular file (a directory)");
    char path[PATH_MAX];
    test_write_temp("GGUF\3\0\0", 7, path);
    ck_assert_int_eq(gguf_open(&f, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too short for the 24-byte GGUF header"));
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    unlink(path);
    test_write_temp("", 0, path);
    ck_assert_int_eq(gguf_open(&f, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated: 0 bytes"));
    unlink(path);
    test_write_temp("GGML", 4, path);
    ck_assert_int_eq(gguf_open(&f, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a GGUF file"));
    unlink(path);
    ck_assert_int_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 0);
}
END_TEST

/* The facts ../shared/models/README.md states about the file. */
START_TEST(reads_smollm2)
{
    const char *path = test_shared_file(SMOLLM2);
    if (!path) {
        test_skip("reads_smollm2", TEST_NOT_FOUND(SMOLLM2));
        return;
    }
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.version, 3);
    ck_assert_uint_eq(f.n_tensors, 272);
    ck_assert_uint_eq(f.n_kv, 33);
    ck_assert_uint_eq(mem_current(MEM_WEIGHTS, MEM_HOST) >= 98362432, 1);
    uint32_t u;
    ck_assert_int_eq(gguf_get_u32(&f, "llama.block_count", &u, &err), 0);
    ck_assert_uint_eq(u, 30);
    ck_assert_int_eq(gguf_get_u32(&f, "llama.attention.head_count_kv", &u, &err), 0);
    ck_assert_uint_eq(u, 3);
    float theta;
    ck_assert_int_eq(gguf_get_f32(&f, "llama.rope.freq_base", &theta, &err), 0);
    ck_assert(theta == 100000.0f);
    int add_bos = 1;
    ck_assert_int_eq(gguf_get_bool(&f, "tokenizer.ggml.add_bos_token", &add_bos, &err), 0);
    ck_assert_int_eq(add_bos, 0);
    uint64_t n;
    const GgufKv *kv;
    ck_assert_int_eq(gguf_get_array(&f, "tokenizer.ggml.tokens", GGUF_STRING, &n, &kv, &err), 0);
    ck_assert_uint_eq(n, 49152);
    ck_assert(gguf_string_eq(gguf_array_string(kv, 1), "<|im_start|>"));
    ck_assert(gguf_string_eq(gguf_array_string(kv, 2), "<|im_end|>"));
    ck_assert_int_eq(gguf_get_array(&f, "tokenizer.ggml.merges", GGUF_STRING, &n, &kv, &err), 0);
    ck_assert_uint_eq(n, 48900);
    int counts[64] = {0};
    for (uint64_t i = 0; i < f.n_tensors; i++)
        counts[f.tensors[i].type]++;
    ck_assert_int_eq(counts[GGUF_TENSOR_Q4_1], 210);
    ck_assert_int_eq(counts[GGUF_TENSOR_F32], 61);
    ck_assert_int_eq(counts[GGUF_TENSOR_Q8_0], 1);
    ck_assert_ptr_null(gguf_find_tensor(&f, "output.weight"));
    const GgufTensor *emb = gguf_find_tensor(&f, "token_embd.weight");
    ck_assert_uint_eq(emb->dims[0], 576);
    ck_assert_uint_eq(emb->dims[1], 49152);
    ck_assert_uint_eq(emb->bytes, 49152ull * 18 * 34);
    const GgufTensor *last = &f.tensors[f.n_tensors - 1];
    ck_assert_uint_eq(f.data_start + last->offset + last->bytes, f.size);
    gguf_close(&f);
    ck_assert_int_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 0);
}
END_TEST

/* The real file cut at points inside every section: the header, the
 * vocabulary, the merges, the tensor infos and the tensor data. */
START_TEST(smollm2_truncated_anywhere)
{
    const char *path = test_shared_file(SMOLLM2);
    if (!path) {
        test_skip("smollm2_truncated_anywhere", TEST_NOT_FOUND(SMOLLM2));
        return;
    }
    GgufFile f;
    Err err = {{0}};
    ck_assert_msg(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    const unsigned char *image = f.image;
    size_t size = f.size;
    size_t cuts[] = {0, 3, 4, 23, 24, 31, 40, 100, 1000, 5000, 50000, 500000, 1000000, 1500000,
                     (size_t)f.data_start - 1, (size_t)f.data_start, (size_t)f.data_start + 1, size / 2, size - 1};
    /* Plus 40 points spread over the metadata and tensor infos. */
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cuts[i]);
        expect_refused(image, cuts[i], NULL, what);
    }
    for (int i = 1; i <= 40; i++) {
        size_t cut = (size_t)((f.data_start * (uint64_t)i) / 41);
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cut);
        expect_refused(image, cut, NULL, what);
    }
    gguf_close(&f);
}
END_TEST

Suite *suite_gguf(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_value_type_reads_back);
    tcase_add_test(tc, tensor_infos_and_alignment);
    tcase_add_test(tc, getters_say_what_is_wrong);
    tcase_add_test(tc, truncated_anywhere);
    tcase_add_test(tc, bad_headers);
    tcase_add_test(tc, bad_metadata_values);
    tcase_add_test(tc, bad_tensor_infos);
    tcase_add_test(tc, bad_offsets_alignment_and_duplicates);
    tcase_add_test(tc, printable_names);
    tcase_add_test(tc, open_refuses_what_is_not_a_file);
    tcase_add_test(tc, reads_smollm2);
    tcase_add_test(tc, smollm2_truncated_anywhere);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(gguf)
