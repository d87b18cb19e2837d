#include "dtype.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[DTYPE_COUNT] = {"f32", "f16", "bf16"};

size_t dtype_bytes(Dtype t)
{
    return t == DTYPE_F32 ? 4 : 2;
}

const char *dtype_name(Dtype t)
{
    return (unsigned)t < DTYPE_COUNT ? NAMES[t] : "?";
}

int dtype_parse(const char *text, Dtype *out, Err *err)
{
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(text, NAMES[i]) == 0) {
            *out = (Dtype)i;
            return 0;
        }
    return err_set(err, "'%s' is not an element type (f32, f16 or bf16)", text);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t dtype_f32_to_f16(float f)
{
    uint32_t x = bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN: a quiet NaN */
    if (a >= 0x477ff000u)                  /* >= 65520 = 65504 + half an ulp: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* Below 2^-14, halves are subnormal: multiples of 2^-24. Scaling by
         * 2^24 is exact, and nearbyintf rounds to nearest even. A result of
         * 1024 is the smallest normal half, which the encoding gives too. */
        float scaled = float_of(a) * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)nearbyintf(scaled));
    }
    uint32_t exponent = (a >> 23) - 127 + 15; /* 1..30 */
    uint32_t mantissa = a & 0x7fffffu;
    uint32_t h = (exponent << 10) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fffu; /* the 13 bits that do not fit */
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is still the right value */
    return (uint16_t)(sign | h);
}

float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0) {
        float v = (float)mantissa * (1.0f / 16777216.0f); /* exact: mantissa x 2^-24 */
        return sign ? -v : v;
    }
    if (exponent == 31)
        return float_of(sign | 0x7f800000u | (mantissa << 13));
    return float_of(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
    x += 0x7fffu + ((x >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(x >> 16);
}

float dtype_bf16_to_f32(uint16_t b)
{
    return float_of((uint32_t)b << 16);
}

/* The shape of an OFP8 format: what dtype_f32_to_fp8_e4m3() and
 * dtype_f32_to_fp8_e5m2() share. */
typedef struct {
    int mantissa_bits; /* 3 or 2 */
    int bias;          /* 7 or 15 */
    uint8_t max_code;  /* the largest finite value, sign bit clear */
} Fp8Format;

static const Fp8Format E4M3 = {3, 7, 0x7e}, E5M2 = {2, 15, 0x7b};

/* |f| (sign bit clear, finite, not NaN) to the nearest code of the format,
 * ties to even, saturated at max_code. */
static uint8_t fp8_magnitude(uint32_t a, const Fp8Format *fmt)
{
    int m = fmt->mantissa_bits;
    uint32_t min_normal = (uint32_t)(127 + 1 - fmt->bias) << 23; /* 2^(1 - bias) */
    if (a < min_normal) {
        /* Subnormals are multiples of 2^(1 - bias - m). Scaling by the
         * inverse power of two is exact, and nearbyintf rounds to nearest
         * even. A result of 2^m is the smallest normal, whose code it is. */
        float scaled = float_of(a) * float_of((uint32_t)(127 - 1 + fmt->bias + m) << 23);
        return (uint8_t)nearbyintf(scaled);
    }
    uint32_t exponent = (a >> 23) - 127 + (uint32_t)fmt->bias;
    int dropped = 23 - m;
    uint32_t code = (exponent << m) | ((a & 0x7fffffu) >> dropped);
    uint32_t rest = a & ((1u << dropped) - 1), half = 1u << (dropped - 1);
    if (rest > half || (rest == half && (code & 1u)))
        code++; /* a carry into the exponent is still the right value */
    /* Past the largest finite code lie the infinities or NaNs, or nothing
     * (an exponent the format does not have): saturate. */
    return code > fmt->max_code ? fmt->max_code : (uint8_t)code;
}

uint8_t dtype_f32_to_fp8_e4m3(float f)
{
    uint32_t x = bits_of(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)(sign | 0x7fu); /* the format's one NaN */
    if (a == 0x7f800000u)
        return (uint8_t)(sign | E4M3.max_code); /* no infinities: saturate */
    return (uint8_t)(sign | fp8_magnitude(a, &E4M3));
}

float dtype_fp8_e4m3_to_f32(uint8_t c)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t exponent = (c >> 3) & 0xfu, mantissa = c & 0x7u;
    if (exponent == 15 && mantissa == 7)
        return float_of(sign | 0x7fc00000u);
    if (exponent == 0) {
        float v = (float)mantissa * (1.0f / 512.0f); /* exact: mantissa x 2^-9 */
        return sign ? -v : v;
    }
    return float_of(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

uint8_t dtype_f32_to_fp8_e5m2(float f)
{
    uint32_t x = bits_of(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        uint32_t payload = (a >> 21) & 3u; /* the top two bits of the NaN's payload */
        return (uint8_t)(sign | 0x7cu | (payload ? payload : 2u));
    }
    if (a == 0x7f800000u)
        return (uint8_t)(sign | 0x7cu); /* the format has infinities: keep it */
    return (uint8_t)(sign | fp8_magnitude(a, &E5M2));
}

float dtype_fp8_e5m2_to_f32(uint8_t c)
{
    return dtype_f16_to_f32((uint16_t)(c << 8)); /* E5M2 is the top byte of an IEEE half */
}

void dtype_from_f32(void *dst, const float *src, size_t n, Dtype t)
{
    uint16_t *d16 = dst;
    switch (t) {
    case DTYPE_F32: memcpy(dst, src, n * sizeof(float)); return;
    case DTYPE_F16: for (size_t i = 0; i < n; i++) d16[i] = dtype_f32_to_f16(src[i]); return;
    case DTYPE_BF16: for (size_t i = 0; i < n; i++) d16[i] = dtype_f32_to_bf16(src[i]); return;
    default: return;
    }
}

void dtype_to_f32(float *dst, const void *src, size_t n, Dtype t)
{
    const uint16_t *s16 = src;
    switch (t) {
    case DTYPE_F32: memcpy(dst, src, n * sizeof(float)); return;
    case DTYPE_F16: for (size_t i = 0; i < n; i++) dst[i] = dtype_f16_to_f32(s16[i]); return;
    case DTYPE_BF16: for (size_t i = 0; i < n; i++) dst[i] = dtype_bf16_to_f32(s16[i]); return;
    default: return;
    }
}

void dtype_round(float *x, size_t n, Dtype t)
{
    for (size_t i = 0; i < n; i++) {
        if (t == DTYPE_F16)
            x[i] = dtype_f16_to_f32(dtype_f32_to_f16(x[i]));
        else if (t == DTYPE_BF16)
            x[i] = dtype_bf16_to_f32(dtype_f32_to_bf16(x[i]));
    }
}
