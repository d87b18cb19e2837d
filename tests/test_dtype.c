/* Element types: the host conversions that the CPU references use to see
 * exactly what the device stores (round to nearest even, subnormals,
 * overflow), checked on values whose encodings are known; and the two OFP8
 * formats a CPU K/V cache may store, checked code by code against the
 * formats' definition (OCP 8-bit Floating Point Specification, 2023). */
#include <check.h>
#include <float.h>
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
    ck_assert_uint_eq(dtype_f32_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(dtype_f32_to_bf16(9.183549615799121e-41f), 0x0001); /* 2^-133, the smallest subnormal */
    /* All 65,536: a number comes back as its own code, a NaN as a NaN. */
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = dtype_bf16_to_f32((uint16_t)b);
        if (isnan(f)) {
            ck_assert_msg((b & 0x7f80) == 0x7f80 && (b & 0x7f), "0x%04x decoded to NaN", b);
            ck_assert(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(f))));
            continue;
        }
        ck_assert_msg(dtype_f32_to_bf16(f) == b, "0x%04x does not round-trip", b);
    }
}
END_TEST

/* ------------------------------------------------------------ OFP8 */

/* A format's definition, written independently of dtype.c: sign, then
 * exponent and mantissa fields; exponent 0 is subnormal, (m / 2^M) x
 * 2^(1 - bias); otherwise (1 + m / 2^M) x 2^(e - bias). */
typedef struct {
    const char *name;
    int exponent_bits, mantissa_bits, bias;
    double max;        /* largest finite value */
    int has_infinity;  /* E5M2: the all-ones exponent with mantissa 0 */
    uint8_t (*encode)(float);
    float (*decode)(uint8_t);
} Ofp8;

static const Ofp8 E4M3 = {"e4m3", 4, 3, 7, 448.0, 0, dtype_f32_to_fp8_e4m3, dtype_fp8_e4m3_to_f32};
static const Ofp8 E5M2 = {"e5m2", 5, 2, 15, 57344.0, 1, dtype_f32_to_fp8_e5m2, dtype_fp8_e5m2_to_f32};

/* 0: a number (in *v), 1: an infinity, 2: a NaN, by the definition. */
static int ofp8_define(const Ofp8 *f, unsigned c, double *v)
{
    unsigned m_mask = (1u << f->mantissa_bits) - 1, e_max = (1u << f->exponent_bits) - 1;
    unsigned e = (c >> f->mantissa_bits) & e_max, m = c & m_mask;
    double sign = (c & 0x80) ? -1.0 : 1.0;
    if (f->has_infinity && e == e_max)
        return m == 0 ? 1 : 2;                /* IEEE-like: all-ones exponent */
    if (!f->has_infinity && e == e_max && m == m_mask)
        return 2;                             /* E4M3: S.1111.111 only */
    double frac = (double)m / (double)(m_mask + 1);
    *v = sign * (e == 0 ? ldexp(frac, 1 - f->bias) : ldexp(1.0 + frac, (int)e - f->bias));
    return 0;
}

/* Every one of the 256 codes decodes to what the definition says and
 * converts back to itself: numbers, both zeros, the infinities where the
 * format has them, every NaN (sign and, in E5M2, payload kept). */
static void check_every_code(const Ofp8 *f)
{
    int numbers = 0, infinities = 0, nans = 0;
    for (unsigned c = 0; c < 256; c++) {
        double want = 0.0;
        int kind = ofp8_define(f, c, &want);
        float got = f->decode((uint8_t)c);
        if (kind == 0) {
            ck_assert_msg((double)got == want && !signbit(got) == !(c & 0x80), "%s 0x%02x decodes to %g, want %g",
                          f->name, c, (double)got, want);
            numbers++;
        } else if (kind == 1) {
            ck_assert_msg(isinf(got) && !signbit(got) == !(c & 0x80), "%s 0x%02x should be an infinity", f->name, c);
            infinities++;
        } else {
            ck_assert_msg(isnan(got), "%s 0x%02x should be a NaN, got %g", f->name, c, (double)got);
            nans++;
        }
        ck_assert_msg(f->encode(got) == c, "%s 0x%02x -> %g -> 0x%02x", f->name, c, (double)got, f->encode(got));
    }
    ck_assert_int_eq(numbers + infinities + nans, 256);
    ck_assert_int_eq(infinities, f->has_infinity ? 2 : 0);
    ck_assert_int_eq(nans, f->has_infinity ? 6 : 2);
}

START_TEST(fp8_every_code_round_trips)
{
    check_every_code(&E4M3);
    check_every_code(&E5M2);
}
END_TEST

/* The nearest finite code to x by brute force over the definition, ties to
 * the even code (mantissa ending in 0), saturated at the largest finite
 * value: what a conversion with round-to-nearest-even and saturation must
 * give. */
static uint8_t nearest_code(const Ofp8 *f, double x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00, best = 0;
    double a = fabs(x), best_gap = INFINITY;
    for (unsigned c = 0; c < 128; c++) {
        double v;
        if (ofp8_define(f, c, &v) != 0)
            continue;
        if (a > f->max && v == f->max)
            return (uint8_t)(sign | c); /* saturation (the gaps would round alike at 2^67) */
        double gap = fabs(v - a);
        if (gap < best_gap || (gap == best_gap && (c & 1) == 0)) {
            best = (uint8_t)c;
            best_gap = gap;
        }
    }
    return (uint8_t)(sign | best);
}

/* f32 values across the whole range (every 16-bit prefix of the bits,
 * with varying low bits), and every midpoint between neighbouring codes,
 * convert to the nearest code, ties to even, saturating. */
static void check_nearest(const Ofp8 *f)
{
    for (uint32_t i = 0; i < 0x10000; i++) {
        uint32_t bits = i << 16 | ((i * 2654435761u) >> 16);
        float x;
        memcpy(&x, &bits, sizeof x);
        if (isnan(x) || isinf(x))
            continue;
        ck_assert_msg(f->encode(x) == nearest_code(f, x), "%s(%a) = 0x%02x, nearest is 0x%02x", f->name, (double)x,
                      f->encode(x), nearest_code(f, x));
    }
    for (unsigned c = 0; c < 127; c++) {
        double lo, hi;
        if (ofp8_define(f, c, &lo) || ofp8_define(f, c + 1, &hi))
            continue;
        float mid = (float)((lo + hi) / 2); /* exact: a few significant bits */
        uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
        ck_assert_msg(f->encode(mid) == even, "%s midpoint of 0x%02x and 0x%02x -> 0x%02x", f->name, c, c + 1,
                      f->encode(mid));
        ck_assert_msg(f->encode(-mid) == (0x80 | even), "%s: -midpoint", f->name);
    }
}

START_TEST(fp8_rounds_to_nearest_even_and_saturates)
{
    check_nearest(&E4M3);
    check_nearest(&E5M2);
}
END_TEST

/* The edges, by hand. */
START_TEST(fp8_edges_behave_as_specified)
{
    struct {
        const Ofp8 *f;
        float x;
        uint8_t want;
        const char *why;
    } cases[] = {
        {&E4M3, 448.0f, 0x7e, "the largest finite, S.1111.110"},
        {&E4M3, -448.0f, 0xfe, "its negative"},
        {&E4M3, 464.0f, 0x7e, "halfway to 480 (which E4M3 lacks): saturates"},
        {&E4M3, 1e6f, 0x7e, "far past the range: saturates, never NaN"},
        {&E4M3, FLT_MAX, 0x7e, "f32's largest"},
        {&E4M3, INFINITY, 0x7e, "no infinities: saturates"},
        {&E4M3, -INFINITY, 0xfe, "and the negative one"},
        {&E4M3, NAN, 0x7f, "the NaN, S.1111.111"},
        {&E4M3, -NAN, 0xff, "its negative"},
        {&E4M3, 0x1p-6f, 0x08, "the smallest normal"},
        {&E4M3, 0x1.cp-7f, 0x07, "the largest subnormal, 7 x 2^-9"},
        {&E4M3, 0x1p-9f, 0x01, "the smallest subnormal"},
        {&E4M3, 0x1p-10f, 0x00, "half of it: a tie, to even (zero)"},
        {&E4M3, 0x1.8p-9f, 0x02, "1.5 x 2^-9: a tie, to even (2)"},
        {&E4M3, 0x1.000002p-10f, 0x01, "just above half: up"},
        {&E4M3, -0x1p-12f, 0x80, "rounds to zero, keeps its sign"},
        {&E4M3, -0.0f, 0x80, "negative zero"},
        {&E4M3, 1.0625f, 0x38, "1 + 1/16: a tie between 1 and 1.125, to even (1)"},
        {&E4M3, 1.1875f, 0x3a, "1 + 3/16: a tie, to even (1.25)"},
        {&E5M2, 57344.0f, 0x7b, "the largest finite, S.11110.11"},
        {&E5M2, 61440.0f, 0x7b, "halfway to 65536: saturates, not infinity"},
        {&E5M2, 1e9f, 0x7b, "far past the range: saturates"},
        {&E5M2, -1e9f, 0xfb, "and negative"},
        {&E5M2, INFINITY, 0x7c, "an infinity stays one"},
        {&E5M2, -INFINITY, 0xfc, "negative infinity"},
        {&E5M2, NAN, 0x7e, "a quiet NaN"},
        {&E5M2, 0x1p-14f, 0x04, "the smallest normal"},
        {&E5M2, 0x1p-16f, 0x01, "the smallest subnormal"},
        {&E5M2, 0x1p-17f, 0x00, "half of it: to even (zero)"},
        {&E5M2, 0x1.8p-16f, 0x02, "1.5 x 2^-16: to even (2)"},
        {&E5M2, -0.0f, 0x80, "negative zero"},
        {&E5M2, 1.125f, 0x3c, "1 + 1/8: a tie between 1 and 1.25, to even (1)"},
        {&E5M2, 1.375f, 0x3e, "1 + 3/8: a tie, to even (1.5)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got = cases[i].f->encode(cases[i].x);
        ck_assert_msg(got == cases[i].want, "%s(%a) = 0x%02x, want 0x%02x: %s", cases[i].f->name, (double)cases[i].x,
                      got, cases[i].want, cases[i].why);
    }
    ck_assert(dtype_fp8_e4m3_to_f32(0x7e) == 448.0f);
    ck_assert(dtype_fp8_e4m3_to_f32(0x01) == 0x1p-9f);
    ck_assert(isnan(dtype_fp8_e4m3_to_f32(0xff)) && signbit(dtype_fp8_e4m3_to_f32(0xff)));
    ck_assert(dtype_fp8_e4m3_to_f32(0x78) == 256.0f); /* S.1111.000 is a number in E4M3 */
    ck_assert(dtype_fp8_e5m2_to_f32(0x7b) == 57344.0f);
    ck_assert(isinf(dtype_fp8_e5m2_to_f32(0xfc)) && dtype_fp8_e5m2_to_f32(0xfc) < 0);
    ck_assert(signbit(dtype_fp8_e5m2_to_f32(0x80)) && dtype_fp8_e5m2_to_f32(0x80) == 0.0f);
    /* A NaN keeps the top two bits of its payload in E5M2. */
    uint32_t payload_11 = 0x7fe00000u, payload_01 = 0xffa00000u; /* top two payload bits 11; 01, negative */
    float nan_11, nan_01;
    memcpy(&nan_11, &payload_11, sizeof nan_11);
    memcpy(&nan_01, &payload_01, sizeof nan_01);
    ck_assert_uint_eq(dtype_f32_to_fp8_e5m2(nan_11), 0x7f);
    ck_assert_uint_eq(dtype_f32_to_fp8_e5m2(nan_01), 0xfd);
    uint32_t signalling = 0x7f800001u; /* payload bits below the top two: still a NaN, never infinity */
    float snan;
    memcpy(&snan, &signalling, sizeof snan);
    ck_assert_uint_eq(dtype_f32_to_fp8_e5m2(snan), 0x7e);
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
    tcase_add_test(tc, fp8_every_code_round_trips);
    tcase_add_test(tc, fp8_rounds_to_nearest_even_and_saturates);
    tcase_add_test(tc, fp8_edges_behave_as_specified);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(dtype)
