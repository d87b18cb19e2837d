/* Element types: the host conversions that the CPU references use to see
 * exactly what the device stores (round to nearest even, subnormals,
 * overflow), checked on values whose encodings are known. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "suites.h"

START_TEST(f16_known_encodings)
{
    struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},       {-0.0f, 0x8000},         {1.0f, 0x3c00},    {-2.0f, 0xc000},
        {0.5f, 0x3800},       {65504.0f, 0x7bff},      {65519.0f, 0x7bff}, /* just below the rounding point */
        {65520.0f, 0x7c00},   {1e6f, 0x7c00},          {-1e6f, 0xfc00},   {INFINITY, 0x7c00},
        {6.103515625e-05f, 0x0400},                    /* 2^-14, the smallest normal */
        {5.9604644775390625e-08f, 0x0001},             /* 2^-24, the smallest subnormal */
        {2.98023223876953125e-08f, 0x0000},            /* 2^-25: a tie, to even (0) */
        {8.940696716308594e-08f, 0x0002},              /* 1.5 x 2^-24: a tie, to even (2) */
        {1.0009765625f, 0x3c01},                       /* 1 + 2^-10: exact */
        {1.00048828125f, 0x3c00},                      /* 1 + 2^-11: a tie, to even (down) */
        {1.00146484375f, 0x3c02},                      /* 1 + 3 x 2^-11: a tie, to even (up) */
        {0.1f, 0x2e66},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = dtype_f32_to_f16(cases[i].f);
        ck_assert_msg(h == cases[i].h, "f16(%g) = 0x%04x, want 0x%04x", (double)cases[i].f, h, cases[i].h);
    }
    ck_assert(isnan(dtype_f16_to_f32(dtype_f32_to_f16(NAN))));
}
END_TEST

/* Every one of the 65,536 halves converts to f32 and back unchanged (NaNs
 * stay NaN), and f32 -> f16 is monotonic across each exponent. */
START_TEST(f16_round_trips_every_value)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = dtype_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert_msg((h & 0x7c00) == 0x7c00 && (h & 0x3ff), "0x%04x decoded to NaN", h);
            continue;
        }
        ck_assert_msg(dtype_f32_to_f16(f) == h, "0x%04x -> %g -> 0x%04x", h, (double)f, dtype_f32_to_f16(f));
    }
    /* Halfway between two neighbours rounds to the even one. */
    for (uint16_t h = 0x0001; h < 0x7bff; h += 97) {
        float lo = dtype_f16_to_f32(h), hi = dtype_f16_to_f32((uint16_t)(h + 1));
        float mid = lo + (hi - lo) / 2;
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : h;
        ck_assert_msg(dtype_f32_to_f16(mid) == want, "midpoint after 0x%04x", h);
    }
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(dtype_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(dtype_f32_to_bf16(-2.0f), 0xc000);
    ck_assert_uint_eq(dtype_f32_to_bf16(3.0e38f), 0x7f62);
    ck_assert_uint_eq(dtype_f32_to_bf16(3.4e38f), 0x7f80); /* rounds up to infinity */
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1). 1 + 3 x 2^-8: up. */
    ck_assert_uint_eq(dtype_f32_to_bf16(1.00390625f), 0x3f80);
    ck_assert_uint_eq(dtype_f32_to_bf16(1.01171875f), 0x3f82);
    ck_assert(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(NAN))));
    for (uint32_t b = 0; b < 0x10000; b += 7) {
        float f = dtype_bf16_to_f32((uint16_t)b);
        if (!isnan(f))
            ck_assert_msg(dtype_f32_to_bf16(f) == b, "0x%04x does not round-trip", b);
    }
}
END_TEST

START_TEST(arrays_and_names)
{
    float x[5] = {1.0f, 0.1f, -3.25f, 70000.0f, 1e-9f}, y[5];
    uint16_t h[5];
    dtype_from_f32(h, x, 5, DTYPE_F16);
    dtype_to_f32(y, h, 5, DTYPE_F16);
    float r[5];
    memcpy(r, x, sizeof x);
    dtype_round(r, 5, DTYPE_F16);
    ck_assert_mem_eq(r, y, sizeof y);
    ck_assert(isinf(y[3]));
    dtype_round(r, 5, DTYPE_F32); /* f32: unchanged */
    ck_assert_mem_eq(r, y, sizeof y);
    ck_assert_uint_eq(dtype_bytes(DTYPE_F32), 4);
    ck_assert_uint_eq(dtype_bytes(DTYPE_BF16), 2);
    Dtype t;
    Err err = {{0}};
    ck_assert_int_eq(dtype_parse("bf16", &t, &err), 0);
    ck_assert_int_eq(t, DTYPE_BF16);
    ck_assert_str_eq(dtype_name(t), "bf16");
    ck_assert_int_eq(dtype_parse("fp8", &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "fp8"));
}
END_TEST

Suite *suite_dtype(void)
{
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, f16_known_encodings);
    tcase_add_test(tc, f16_round_trips_every_value);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, arrays_and_names);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(dtype)
