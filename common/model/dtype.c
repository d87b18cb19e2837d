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
