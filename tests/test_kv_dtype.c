/* Smaller K/V entries (common/cpu/kv_dtype.h): the bytes each type costs,
 * a stored row's layout and int8's scale per (token, KV head), the
 * vectorised conversions back to f32 against dtype.c's definitions for
 * every code, and attention over stored rows against attention_reference()
 * over the values they hold, bit for bit. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "helpers.h"
#include "kv_dtype.h"
#include "ops.h"
#include "suites.h"

static const KvDtype ALL[] = {KV_DTYPE_FP32, KV_DTYPE_FP16, KV_DTYPE_BF16,
                              KV_DTYPE_INT8, KV_DTYPE_FP8_E4M3, KV_DTYPE_FP8_E5M2};
#define N_TYPES (sizeof ALL / sizeof ALL[0])

static KvRowFormat format_of(KvDtype t, int n_heads, int head_dim)
{
    KvRowFormat f;
    Err err = {{0}};
    ck_assert_msg(kv_row_format_init(&f, t, n_heads, head_dim, &err) == 0, "%s", err.msg);
    return f;
}

START_TEST(names_and_bytes_per_token)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        KvDtype t;
        ck_assert_int_eq(kv_dtype_parse(kv_dtype_name(ALL[i]), &t, NULL), 0);
        ck_assert_int_eq(t, ALL[i]);
    }
    KvDtype t = KV_DTYPE_FP32;
    Err err = {{0}};
    ck_assert_int_eq(kv_dtype_parse("fp8", &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "fp8-e4m3"));
    /* stories260K: 5 layers, 4 KV heads of 8. int8 pays 4 B of scale per
     * 8 codes: 2 x 5 x 4 x (8 + 4) = 480 B, not 320. */
    ModelConfig s260 = {64, 172, 5, 8, 4, 512, 512};
    size_t want_260[] = {1280, 640, 640, 480, 320, 320};
    /* SmolLM2-135M: 30 layers, 3 KV heads of 64: 2 x 30 x 3 x (64 + 4) for int8. */
    ModelConfig smol = {576, 1536, 30, 9, 3, 49152, 8192};
    size_t want_smol[] = {46080, 23040, 23040, 12240, 11520, 11520};
    for (size_t i = 0; i < N_TYPES; i++) {
        ck_assert_uint_eq(kv_dtype_bytes_per_token(&s260, ALL[i]), want_260[i]);
        ck_assert_uint_eq(kv_dtype_bytes_per_token(&smol, ALL[i]), want_smol[i]);
    }
    ck_assert_uint_eq(kv_dtype_bytes_per_token(&s260, KV_DTYPE_FP32), model_kv_bytes_per_token(&s260, 4));
    char buf[64];
    ck_assert_str_eq(kv_dtype_head_formula(buf, sizeof buf, KV_DTYPE_INT8, 8), "(8 head_dim x 1 B + 4 B scale)");
    ck_assert_str_eq(kv_dtype_head_formula(buf, sizeof buf, KV_DTYPE_FP16, 64), "64 head_dim x 2 B");
    KvRowFormat f = format_of(KV_DTYPE_INT8, 4, 8);
    ck_assert_uint_eq(kv_row_bytes(&f), 4 * 8 + 4 * 4);
}
END_TEST

START_TEST(device_names_and_wide_heads)
{
    Dtype d;
    ck_assert_int_eq(kv_dtype_to_device(KV_DTYPE_BF16, &d), 0);
    ck_assert_int_eq(d, DTYPE_BF16);
    ck_assert_int_eq(kv_dtype_from_device(DTYPE_F16), KV_DTYPE_FP16);
    ck_assert_int_eq(kv_dtype_to_device(KV_DTYPE_INT8, &d), -1);
    ck_assert_int_eq(kv_dtype_to_device(KV_DTYPE_FP8_E4M3, &d), -1);
    KvRowFormat f;
    Err err = {{0}};
    ck_assert_int_eq(kv_row_format_init(&f, KV_DTYPE_FP16, 1, KV_DTYPE_HEAD_DIM_MAX + 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "--kv-dtype f16"));
    ck_assert_int_eq(kv_row_format_init(&f, KV_DTYPE_FP32, 1, 1024, &err), 0); /* f32 reads in place */
    ck_assert_int_eq(kv_row_format_init(&f, KV_DTYPE_INT8, 0, 8, &err), -1);
}
END_TEST

/* Reads raw codes back through kv_row_load(): each must give exactly the
 * bits dtype.c's definition gives, NaN payloads included. */
static void expect_load_matches(KvDtype t, const void *codes, int n, float (*define)(uint32_t code))
{
    KvRowFormat f = format_of(t, n / KV_DTYPE_HEAD_DIM_MAX, KV_DTYPE_HEAD_DIM_MAX);
    float *got = malloc((size_t)n * sizeof *got);
    ck_assert_ptr_nonnull(got);
    kv_row_load(got, codes, &f);
    for (int i = 0; i < n; i++) {
        float want = define((uint32_t)i);
        ck_assert_msg(memcmp(&got[i], &want, sizeof want) == 0, "%s code 0x%x: %a, want %a", kv_dtype_name(t), i,
                      (double)got[i], (double)want);
    }
    free(got);
}

static float define_f16(uint32_t c) { return dtype_f16_to_f32((uint16_t)c); }
static float define_bf16(uint32_t c) { return dtype_bf16_to_f32((uint16_t)c); }
static float define_e4m3(uint32_t c) { return dtype_fp8_e4m3_to_f32((uint8_t)c); }
static float define_e5m2(uint32_t c) { return dtype_fp8_e5m2_to_f32((uint8_t)c); }

START_TEST(loads_agree_with_the_definitions_for_every_code)
{
    uint16_t *all16 = malloc(65536 * sizeof *all16);
    ck_assert_ptr_nonnull(all16);
    for (uint32_t c = 0; c < 65536; c++)
        all16[c] = (uint16_t)c;
    expect_load_matches(KV_DTYPE_FP16, all16, 65536, define_f16);
    expect_load_matches(KV_DTYPE_BF16, all16, 65536, define_bf16);
    free(all16);
    uint8_t all8[256];
    for (int c = 0; c < 256; c++)
        all8[c] = (uint8_t)c;
    expect_load_matches(KV_DTYPE_FP8_E4M3, all8, 256, define_e4m3);
    expect_load_matches(KV_DTYPE_FP8_E5M2, all8, 256, define_e5m2);
}
END_TEST

/* The element types store what dtype.c's conversions give, element by
 * element (little-endian codes of 1 or 2 bytes). */
static uint32_t code_f16(float x) { return dtype_f32_to_f16(x); }
static uint32_t code_bf16(float x) { return dtype_f32_to_bf16(x); }
static uint32_t code_e4m3(float x) { return dtype_f32_to_fp8_e4m3(x); }
static uint32_t code_e5m2(float x) { return dtype_f32_to_fp8_e5m2(x); }

START_TEST(store_converts_element_by_element)
{
    float x[16] = {1.0f, -0.1f, 3.14159f, 500.0f, -70000.0f, 1e-8f, 0.0f, -0.0f,
                   448.0f, 60000.0f, 1e-3f, -2.5f, 1e30f, 7.0f, -0.3f, 0.7f};
    static const struct {
        KvDtype type;
        uint32_t (*code)(float);
    } types[] = {{KV_DTYPE_FP16, code_f16}, {KV_DTYPE_BF16, code_bf16},
                 {KV_DTYPE_FP8_E4M3, code_e4m3}, {KV_DTYPE_FP8_E5M2, code_e5m2}};
    unsigned char row[16 * 4];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        KvRowFormat f = format_of(types[k].type, 2, 8);
        size_t bytes = kv_dtype_elem_bytes(types[k].type);
        kv_row_store(row, x, &f);
        for (int i = 0; i < 16; i++) {
            uint32_t got = row[bytes * (size_t)i] | (bytes == 2 ? (uint32_t)row[2 * i + 1] << 8 : 0);
            ck_assert_msg(got == types[k].code(x[i]), "%s: %g stored as 0x%x", kv_dtype_name(types[k].type),
                          (double)x[i], got);
        }
    }
    KvRowFormat f = format_of(KV_DTYPE_FP8_E4M3, 2, 8);
    kv_row_store(row, x, &f);
    ck_assert_uint_eq(row[3], 0x7e); /* 500 saturates to 448 */
    f = format_of(KV_DTYPE_FP32, 2, 8);
    kv_row_store(row, x, &f);
    ck_assert_mem_eq(row, x, sizeof x);
}
END_TEST

/* int8 by hand: one scale per head, the largest magnitude to +-127,
 * rounding to nearest (ties to even), and each scale after the codes. */
START_TEST(int8_row_codes_and_scales)
{
    /* Head 0's largest magnitude is 127: scale 1, codes are x rounded. */
    float x[16] = {127.0f, -2.5f, 3.5f, 0.49f, -0.5f, 126.5f, -127.0f, 1.6f,
                   /* head 1: largest 0.254, scale 0.002 */
                   0.254f, -0.127f, 0.0f, 0.001f, -0.254f, 0.1f, 0.003f, 0.0101f};
    KvRowFormat f = format_of(KV_DTYPE_INT8, 2, 8);
    unsigned char row[2 * 8 + 2 * 4];
    ck_assert_uint_eq(kv_row_bytes(&f), sizeof row);
    kv_row_store(row, x, &f);
    const int8_t *codes = (const int8_t *)row;
    int8_t want0[8] = {127, -2, 4, 0, 0, 126, -127, 2};
    ck_assert_mem_eq(codes, want0, sizeof want0);
    float scales[2];
    memcpy(scales, row + 16, sizeof scales);
    ck_assert(scales[0] == 1.0f);
    ck_assert(scales[1] == 0.254f / 127.0f); /* head 1's own largest, not head 0's */
    ck_assert_int_eq(codes[8], 127);
    ck_assert_int_eq(codes[12], -127);
    for (int i = 8; i < 16; i++)
        ck_assert_int_eq(codes[i], (int)nearbyintf(x[i] / scales[1]));
    /* Back: code x scale, within half a step of what was stored. */
    float back[16];
    kv_row_load(back, row, &f);
    for (int i = 0; i < 16; i++) {
        ck_assert(back[i] == (float)codes[i] * scales[i / 8]);
        ck_assert_msg(fabsf(back[i] - x[i]) <= 0.5f * scales[i / 8] * 1.0001f, "x[%d] = %g came back as %g", i,
                      (double)x[i], (double)back[i]);
    }
    /* A head of zeros: scale 0, codes 0, values 0 (no division by zero). */
    float zeros[8] = {0};
    KvRowFormat one = format_of(KV_DTYPE_INT8, 1, 8);
    kv_row_store(row, zeros, &one);
    kv_row_load(back, row, &one);
    ck_assert_mem_eq(back, zeros, sizeof zeros);
}
END_TEST

/* Saturation: a value whose code would round past 127 stays at +-127. */
START_TEST(int8_saturates)
{
    ck_assert_int_eq(kv_int8_code(200.0f, 1.0f), 127);
    ck_assert_int_eq(kv_int8_code(-200.0f, 1.0f), -127);
    ck_assert_int_eq(kv_int8_code(127.49f, 1.0f), 127);
    ck_assert_int_eq(kv_int8_code(-1e30f, 1e-10f), -127);
    ck_assert_int_eq(kv_int8_code(1.0f, 0.0f), 127);
    ck_assert_int_eq(kv_int8_code(NAN, 1.0f), 0);
    ck_assert_int_eq(kv_int8_code(2.5f, 1.0f), 2); /* ties to even */
    ck_assert_int_eq(kv_int8_code(-3.5f, 1.0f), -4);
    ck_assert_int_eq(kv_int8_code(2.7f, 1.0f), 3); /* nearest, not truncated */
    /* A head of tiny (subnormal) values: 190 x 2^-149 over 127 rounds to a
     * scale of 2^-149, so its largest value divides to 190, past 127. */
    float tiny[4] = {190 * 0x1p-149f, -190 * 0x1p-149f, 0x1p-149f, 0.0f};
    KvRowFormat f = format_of(KV_DTYPE_INT8, 1, 4);
    unsigned char row[4 + 4];
    kv_row_store(row, tiny, &f);
    float scale;
    memcpy(&scale, row + 4, sizeof scale);
    ck_assert(scale == 0x1p-149f);
    ck_assert_int_eq(((const int8_t *)row)[0], 127);
    ck_assert_int_eq(((const int8_t *)row)[1], -127);
    ck_assert_int_eq(((const int8_t *)row)[2], 1);
}
END_TEST

static uint64_t rng_state;

static float uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* kvsim --kv-dtype: the source's 13B case and the paper's Fig. 2 setting
 * with 1-byte entries say what the same budget holds against fp16. */
START_TEST(kvsim_takes_kv_dtype)
{
    ProgramResult r;
    /* Chapter 4's pool sizes blocks in whole elements: int8's scales wait
     * for it, refused in one line (before anything runs) rather than miscounted. */
    const char *int8[] = {"kvsim", "--kv-dtype", "int8", NULL};
    ck_assert_int_eq(test_run_program(int8, &r), 0);
    ck_assert_msg(r.status == 1 && test_count_lines(r.err) == 1 && strstr(r.err, "kvsim: error: --kv-dtype int8"),
                  "%s", r.err);
    test_result_free(&r);
    if (!test_lab_answers()) { /* kvsim runs chapters 3 and 4, whose lab code is the exercises here */
        test_skip("kvsim_takes_kv_dtype", "the lab code is the exercises");
        return;
    }
    const char *source[] = {"kvsim", "--scenario", "source-13b-a100-80gb", "--kv-dtype", "fp8-e4m3",
                            "--strategies", "max,paged", "--requests", "100", NULL};
    ck_assert_int_eq(test_run_program(source, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "K/V in fp8-e4m3: 409600 B per token"));
    ck_assert_ptr_nonnull(strstr(r.out, "117187 token slots, 57 full-length requests (fp16: 58593 and 28)"));
    test_result_free(&r);
    const char *fig2[] = {"kvsim", "--scenario", "paper-fig2", "--kv-dtype", "fp8-e5m2", "--requests", "20", NULL};
    ck_assert_int_eq(test_run_program(fig2, &r), 0);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "31457 token slots, 15 full-length requests (fp16: 15728 and 7)"));
    test_result_free(&r);
}
END_TEST

/* kvquality: on stories260K, f32 forced through its own text agrees with
 * itself at every step with no attention error, every smaller type errs
 * somewhere, and f16 less than the 8-bit types; bad options are one line. */
static double table_cell(const char *out, const char *row, int column)
{
    char start[32];
    snprintf(start, sizeof start, "\n| %s |", row);
    const char *p = strstr(out, start);
    ck_assert_msg(p != NULL, "no row %s in:\n%s", row, out);
    p += 1;
    for (int c = 0; c < column; c++)
        p = strchr(p + 1, '|');
    return strtod(p + 1, NULL);
}

START_TEST(kvquality_measures_every_type)
{
    const char *argv[] = {"kvquality", "--steps", "60", "--sample-every", "4", "--greedy-steps", "40", NULL};
    ProgramResult r;
    if (!test_lab_answers()) { /* kvquality runs chapter 2's cache, whose positions are the lab's */
        test_skip("kvquality_measures_every_type", "runs chapter 2's lab code, and this build has the exercises");
        return;
    }
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    if (r.status == 1 && strstr(r.err, "stories260K")) { /* no default model here */
        test_skip("kvquality_measures_every_type", r.err);
        test_result_free(&r);
        return;
    }
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* columns: 1 bytes per token, 2 perplexity, 3 agreement, 4 error, 5 RMS */
    ck_assert_double_eq(table_cell(r.out, "f32", 1), 1280);
    ck_assert_double_eq(table_cell(r.out, "f32", 3), 100.0);
    ck_assert_double_eq(table_cell(r.out, "f32", 4), 0.0);
    ck_assert_double_eq(table_cell(r.out, "int8", 1), 480);
    for (size_t k = 1; k < N_TYPES; k++)
        ck_assert_msg(table_cell(r.out, kv_dtype_name(ALL[k]), 4) > 0.0, "%s: no attention error", kv_dtype_name(ALL[k]));
    ck_assert(table_cell(r.out, "f16", 4) < table_cell(r.out, "int8", 4));
    ck_assert(table_cell(r.out, "f16", 4) < table_cell(r.out, "fp8-e4m3", 4));
    ck_assert_ptr_nonnull(strstr(r.out, "| f16 | 40 of 40 | none |"));
    test_result_free(&r);
    const char *bad[] = {"kvquality", "--steps", "0", NULL};
    ck_assert_int_eq(test_run_program(bad, &r), 0);
    ck_assert_msg(r.status == 1 && test_count_lines(r.err) == 1 && strstr(r.err, "kvquality: error: --steps"), "%s",
                  r.err);
    test_result_free(&r);
}
END_TEST

/* Stored values are close to what was given, as each type's precision says. */
START_TEST(stored_values_keep_their_precision)
{
    /* Half a unit in the last place, relative; and half the smallest
     * subnormal, absolute, below the normal range. */
    static const float relative[] = {0.0f, 0x1p-11f, 0x1p-8f, 0.0f, 0x1p-4f, 0x1p-3f};
    static const float absolute[] = {0.0f, 0x1p-25f, 0x1p-134f, 0.0f, 0x1p-10f, 0x1p-17f};
    enum { HEADS = 3, DIM = 64, N = HEADS * DIM };
    float x[N], back[N];
    unsigned char row[N * 4];
    rng_state = 7;
    for (int i = 0; i < N; i++)
        x[i] = uniform() * (i % 7 == 0 ? 20.0f : 2.0f);
    for (size_t k = 0; k < N_TYPES; k++) {
        KvRowFormat f = format_of(ALL[k], HEADS, DIM);
        kv_row_store(row, x, &f);
        kv_row_load(back, row, &f);
        for (int i = 0; i < N; i++) {
            float bound = ALL[k] == KV_DTYPE_INT8 ? 0.5f * kv_int8_scale(x + (i / DIM) * DIM, DIM) * 1.0001f
                                                  : fmaxf(relative[k] * fabsf(x[i]), absolute[k]);
            ck_assert_msg(fabsf(back[i] - x[i]) <= bound, "%s: %a came back as %a", kv_dtype_name(ALL[k]),
                          (double)x[i], (double)back[i]);
        }
    }
}
END_TEST

/* The heart of it: attention over stored rows, read in place, is
 * attention_reference() over an f32 copy of the values they hold, bit for
 * bit, for every type, head and length; with keys in the thousands too,
 * which E4M3 saturates. */
static void check_attention(KvDtype t, int n_heads, int head_dim, int n_pos, float key_range)
{
    KvRowFormat f = format_of(t, n_heads, head_dim);
    size_t row_bytes = kv_row_bytes(&f), kv_dim = (size_t)n_heads * (size_t)head_dim;
    unsigned char *keys = malloc((size_t)n_pos * row_bytes), *values = malloc((size_t)n_pos * row_bytes);
    float *k32 = malloc((size_t)n_pos * kv_dim * sizeof(float)), *v32 = malloc((size_t)n_pos * kv_dim * sizeof(float));
    float *x = malloc(kv_dim * sizeof(float)), *scores = malloc((size_t)n_pos * sizeof(float));
    float q[KV_DTYPE_HEAD_DIM_MAX], got[KV_DTYPE_HEAD_DIM_MAX], want[KV_DTYPE_HEAD_DIM_MAX];
    ck_assert(keys && values && k32 && v32 && x && scores);
    rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(t * 131 + head_dim);
    for (int p = 0; p < n_pos; p++) {
        for (size_t i = 0; i < kv_dim; i++)
            x[i] = uniform() * key_range;
        kv_row_store(keys + (size_t)p * row_bytes, x, &f);
        for (size_t i = 0; i < kv_dim; i++)
            x[i] = uniform() * 3.0f;
        kv_row_store(values + (size_t)p * row_bytes, x, &f);
        kv_row_load(k32 + (size_t)p * kv_dim, keys + (size_t)p * row_bytes, &f);
        kv_row_load(v32 + (size_t)p * kv_dim, values + (size_t)p * row_bytes, &f);
    }
    for (int h = 0; h < n_heads; h++) {
        for (int i = 0; i < head_dim; i++)
            q[i] = uniform();
        kv_attention_rows(got, q, keys, values, n_pos, row_bytes, h, &f, scores);
        attention_reference(want, q, k32 + (size_t)h * (size_t)head_dim, v32 + (size_t)h * (size_t)head_dim, n_pos,
                            (int)kv_dim, head_dim, scores);
        ck_assert_msg(memcmp(got, want, (size_t)head_dim * sizeof(float)) == 0,
                      "%s, %d heads of %d, %d positions, head %d: %a, want %a", kv_dtype_name(t), n_heads, head_dim,
                      n_pos, h, (double)got[0], (double)want[0]);
    }
    free(keys), free(values), free(k32), free(v32), free(x), free(scores);
}

START_TEST(attention_over_stored_rows_is_the_reference_bit_for_bit)
{
    static const int shapes[][3] = {{4, 8, 37}, {3, 64, 300}, {2, 10, 5}, {1, 256, 64}, {1, 2, 1}};
    for (size_t k = 0; k < N_TYPES; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_attention(ALL[k], shapes[s][0], shapes[s][1], shapes[s][2], 2.0f);
    for (size_t k = 0; k < N_TYPES; k++)
        check_attention(ALL[k], 2, 64, 50, 2000.0f);
}
END_TEST

Suite *suite_kv_dtype(void)
{
    Suite *s = suite_create("kv_dtype");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, names_and_bytes_per_token);
    tcase_add_test(tc, device_names_and_wide_heads);
    tcase_add_test(tc, loads_agree_with_the_definitions_for_every_code);
    tcase_add_test(tc, store_converts_element_by_element);
    tcase_add_test(tc, int8_row_codes_and_scales);
    tcase_add_test(tc, int8_saturates);
    tcase_add_test(tc, stored_values_keep_their_precision);
    tcase_add_test(tc, attention_over_stored_rows_is_the_reference_bit_for_bit);
    tcase_add_test(tc, kvsim_takes_kv_dtype);
    tcase_add_test(tc, kvquality_measures_every_type);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(kv_dtype)
