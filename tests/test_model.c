/* Checkpoint loading: both formats, shared and unshared classifiers, GQA,
 * and every way a file can be wrong. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "suites.h"
#include "mem.h"
#include "model.h"
#include "synth.h"

static const ModelConfig TINY_GQA = {32, 64, 2, 4, 2, 400, 16};

/* A synthetic image held in memory, to corrupt at will. */
static unsigned char *make_image(const ModelConfig *cfg, int ak42, int shared, size_t *bytes)
{
    SynthSpec spec = {.cfg = *cfg, .shared_classifier = shared, .ak42 = ak42, .seed = 7};
    void *image;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &image, bytes, &err) == 0, "%s", err.msg);
    unsigned char *copy = malloc(*bytes + 64);
    memcpy(copy, image, *bytes);
    mem_free(image);
    return copy;
}

static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }

/* Loads an image from a file and expects failure with a message containing
 * each of the given words. */
static void expect_load_error(const unsigned char *image, size_t bytes, const char *word)
{
    char path[PATH_MAX];
    test_write_temp(image, bytes, path);
    Model m;
    Err err = {{0}};
    ck_assert_int_eq(model_load(&m, path, &err), -1);
    ck_assert_msg(strstr(err.msg, word) != NULL, "message '%s' lacks '%s'", err.msg, word);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message '%s' does not name the file", err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "message must be one line: '%s'", err.msg);
    ck_assert_int_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 0);
    unlink(path);
}

START_TEST(loads_stories260k)
{
    const char *path = test_shared_file("stories260K.bin");
    if (!path) {
        test_skip("loads_stories260k", TEST_NOT_FOUND("stories260K.bin"));
        return;
    }
    Model m;
    Err err = {{0}};
    ck_assert_msg(model_load(&m, path, &err) == 0, "%s", err.msg);
    ModelConfig want = {64, 172, 5, 8, 4, 512, 512};
    ck_assert_mem_eq(&m.cfg, &want, sizeof want);
    ck_assert_int_eq(m.format, MODEL_FORMAT_LEGACY);
    ck_assert_int_eq(m.shared_classifier, 1);
    ck_assert_ptr_eq(m.w.wcls.data, m.w.token_embedding.data);
    ck_assert_uint_eq(m.weight_bytes, 4u * 260032u); /* the README's weight count */
    ck_assert_uint_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 1056540u);
    /* Mapped, not copied: the weights point into the mapping. */
    ck_assert_ptr_eq((const char *)m.w.token_embedding.data, (const char *)m.map + 28);
    ck_assert_int_eq(m.w.token_embedding.type, WEIGHT_F32);
    ck_assert(m.rope_theta == 10000.0f && m.rms_eps == 1e-5f);
    model_free(&m);
    ck_assert_uint_eq(mem_current(MEM_WEIGHTS, MEM_HOST), 0);
}
END_TEST

/* Both formats of the same weights must give the same tensors. */
START_TEST(legacy_and_ak42_agree)
{
    for (int shared = 0; shared <= 1; shared++) {
        size_t b_legacy, b_ak42;
        unsigned char *legacy = make_image(&TINY_GQA, 0, shared, &b_legacy);
        unsigned char *ak42 = make_image(&TINY_GQA, 1, shared, &b_ak42);
        Model a, b;
        Err err = {{0}};
        ck_assert_msg(model_open_image(&a, legacy, b_legacy, &err) == 0, "%s", err.msg);
        ck_assert_msg(model_open_image(&b, ak42, b_ak42, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(a.format, MODEL_FORMAT_LEGACY);
        ck_assert_int_eq(b.format, MODEL_FORMAT_AK42_V1);
        ck_assert_int_eq(a.shared_classifier, shared);
        ck_assert_int_eq(b.shared_classifier, shared);
        ck_assert_mem_eq(&a.cfg, &TINY_GQA, sizeof TINY_GQA);
        ck_assert_mem_eq(&b.cfg, &TINY_GQA, sizeof TINY_GQA);
        ck_assert_uint_eq(a.weight_bytes, b.weight_bytes);
        /* Same generator, different order in the file: the values differ,
         * but each tensor must sit at its own offset, so the last tensors
         * of each file must end exactly at the end of the file. */
        const float *end_a = (const float *)(legacy + b_legacy), *end_b = (const float *)(ak42 + b_ak42);
        size_t cls = (size_t)TINY_GQA.vocab_size * TINY_GQA.dim;
        if (!shared) {
            ck_assert_ptr_eq((const float *)a.w.wcls.data + cls, end_a);
            ck_assert_ptr_eq((const float *)b.w.wcls.data + cls, end_b);
        } else {
            ck_assert_ptr_eq(a.w.wcls.data, a.w.token_embedding.data);
            /* ak42 ends with w3; its last layer's matrix ends the file. */
            size_t w3 = (size_t)TINY_GQA.hidden_dim * TINY_GQA.dim;
            ck_assert_ptr_eq((const float *)b.w.layers[TINY_GQA.n_layers - 1].w3.data + w3, end_b);
        }
        free(legacy);
        free(ak42);
    }
}
END_TEST

START_TEST(unshared_classifier_via_negative_vocab)
{
    size_t bytes;
    unsigned char *img = make_image(&TINY_GQA, 0, 0, &bytes);
    int32_t vocab;
    memcpy(&vocab, img + 20, 4);
    ck_assert_int_eq(vocab, -TINY_GQA.vocab_size);
    Model m;
    Err err = {{0}};
    ck_assert_msg(model_open_image(&m, img, bytes, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(m.cfg.vocab_size, TINY_GQA.vocab_size);
    ck_assert_ptr_ne(m.w.wcls.data, m.w.token_embedding.data);
    free(img);
}
END_TEST

START_TEST(missing_file)
{
    Model m;
    Err err = {{0}};
    ck_assert_int_eq(model_load(&m, "/nonexistent/model.bin", &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent/model.bin") && strstr(err.msg, "cannot open"), "%s", err.msg);
}
END_TEST

START_TEST(directory_is_not_a_checkpoint)
{
    Model m;
    Err err = {{0}};
    ck_assert_int_eq(model_load(&m, "/tmp", &err), -1);
    ck_assert_msg(strstr(err.msg, "not a regular file"), "%s", err.msg);
}
END_TEST

START_TEST(truncated_and_oversized)
{
    size_t bytes;
    unsigned char *img = make_image(&TINY_GQA, 0, 1, &bytes);
    expect_load_error(img, bytes - 4, "truncated");
    expect_load_error(img, 10, "too short");
    memset(img + bytes, 0, 8);
    expect_load_error(img, bytes + 8, "oversized");
    free(img);
}
END_TEST

/* Header fields that no forward pass can run, each with the word its
 * message must contain. */
START_TEST(bad_header_values)
{
    static const struct {
        int field;
        int32_t value;
        const char *word;
    } cases[] = {
        {0, 0, "dim"},           {0, -64, "dim"},          {0, 1 << 30, "plausible"},
        {1, 0, "hidden_dim"},    {2, -1, "n_layers"},      {2, 100000, "plausible"},
        {3, 0, "n_heads"},       {3, 3, "does not divide"}, {4, 0, "n_kv_heads"},
        {4, 3, "multiple"},      {6, 0, "seq_len"},        {6, 1 << 30, "plausible"},
        {3, 32, "odd"},
    };
    size_t bytes;
    unsigned char *img = make_image(&TINY_GQA, 0, 1, &bytes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *bad = malloc(bytes);
        memcpy(bad, img, bytes);
        put_i32(bad + 4 * cases[i].field, cases[i].value);
        expect_load_error(bad, bytes, cases[i].word);
        free(bad);
    }
    free(img);
}
END_TEST

START_TEST(bad_ak42_version)
{
    size_t bytes;
    unsigned char *img = make_image(&TINY_GQA, 1, 1, &bytes);
    put_i32(img + 4, 2);
    expect_load_error(img, bytes, "version 2");
    free(img);
}
END_TEST

START_TEST(kv_bytes_per_token_formula)
{
    ModelConfig llama7b = {4096, 11008, 32, 32, 32, 32000, 2048};
    ck_assert_uint_eq(model_kv_bytes_per_token(&llama7b, 2), 2u * 32 * 32 * 128 * 2);
    ModelConfig llama70b = {8192, 28672, 80, 64, 8, 32000, 4096};
    ck_assert_uint_eq(model_kv_bytes_per_token(&llama70b, 2), 2u * 80 * 8 * 128 * 2);
    ck_assert_uint_eq(model_kv_bytes_per_token(&TINY_GQA, 4), 2u * 2 * 2 * 8 * 4);
}
END_TEST

START_TEST(read_config_only)
{
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&TINY_GQA, 3, 1, 1, model, tok);
    ModelConfig cfg;
    Err err = {{0}};
    ck_assert_msg(model_read_config(model, &cfg, &err) == 0, "%s", err.msg);
    ck_assert_mem_eq(&cfg, &TINY_GQA, sizeof cfg);
    unlink(model);
    unlink(tok);
}
END_TEST

Suite *suite_model(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, loads_stories260k);
    tcase_add_test(tc, legacy_and_ak42_agree);
    tcase_add_test(tc, unshared_classifier_via_negative_vocab);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, directory_is_not_a_checkpoint);
    tcase_add_test(tc, truncated_and_oversized);
    tcase_add_test(tc, bad_header_values);
    tcase_add_test(tc, bad_ak42_version);
    tcase_add_test(tc, kv_bytes_per_token_formula);
    tcase_add_test(tc, read_config_only);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(model)
