/* Smaller K/V entries (kv_dtype.h): sizes, a row's conversion, and
 * attention that reads a stored row in place with ops.h's arithmetic.
 *
 * The element conversions from f32 are dtype.c's (the definitions, tested
 * code by code); the conversions back to f32 below are the same functions
 * written so that a loop over a head vectorises (no branch per element),
 * and tests/test_kv_dtype.c holds them to dtype.c's for every code. */
#include "kv_dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

static const char *const NAMES[KV_DTYPE_COUNT] = {"f32", "f16", "bf16", "int8", "fp8-e4m3", "fp8-e5m2"};

const char *kv_dtype_name(KvDtype t)
{
    return (unsigned)t < KV_DTYPE_COUNT ? NAMES[t] : "?";
}

int kv_dtype_parse(const char *text, KvDtype *out, Err *err)
{
    for (int i = 0; i < KV_DTYPE_COUNT; i++)
        if (strcmp(text, NAMES[i]) == 0) {
            *out = (KvDtype)i;
            return 0;
        }
    return err_set(err, "'%s' is not a K/V element type (f32, f16, bf16, int8, fp8-e4m3 or fp8-e5m2)", text);
}

size_t kv_dtype_elem_bytes(KvDtype t)
{
    switch (t) {
    case KV_DTYPE_FP32: return 4;
    case KV_DTYPE_FP16: case KV_DTYPE_BF16: return 2;
    default: return 1;
    }
}

size_t kv_dtype_scale_bytes(KvDtype t)
{
    return t == KV_DTYPE_INT8 ? sizeof(float) : 0;
}

size_t kv_dtype_head_bytes(KvDtype t, int head_dim)
{
    return (size_t)head_dim * kv_dtype_elem_bytes(t) + kv_dtype_scale_bytes(t);
}

size_t kv_dtype_bytes_per_token(const ModelConfig *c, KvDtype t)
{
    return 2u * (size_t)c->n_layers * (size_t)c->n_kv_heads * kv_dtype_head_bytes(t, model_head_dim(c));
}

const char *kv_dtype_head_formula(char *buf, size_t n, KvDtype t, int head_dim)
{
    if (kv_dtype_scale_bytes(t))
        snprintf(buf, n, "(%d head_dim x %zu B + %zu B scale)", head_dim, kv_dtype_elem_bytes(t),
                 kv_dtype_scale_bytes(t));
    else
        snprintf(buf, n, "%d head_dim x %zu B", head_dim, kv_dtype_elem_bytes(t));
    return buf;
}

int kv_dtype_to_device(KvDtype t, Dtype *out)
{
    switch (t) {
    case KV_DTYPE_FP32: *out = DTYPE_F32; return 0;
    case KV_DTYPE_FP16: *out = DTYPE_F16; return 0;
    case KV_DTYPE_BF16: *out = DTYPE_BF16; return 0;
    default: return -1;
    }
}

KvDtype kv_dtype_from_device(Dtype t)
{
    return t == DTYPE_F16 ? KV_DTYPE_FP16 : t == DTYPE_BF16 ? KV_DTYPE_BF16 : KV_DTYPE_FP32;
}

int kv_row_format_init(KvRowFormat *f, KvDtype t, int n_heads, int head_dim, Err *err)
{
    if ((unsigned)t >= KV_DTYPE_COUNT || n_heads < 1 || head_dim < 1)
        return err_set(err, "a K/V row of %d heads of %d values in type %d is not a row", n_heads, head_dim, (int)t);
    if (t != KV_DTYPE_FP32 && head_dim > KV_DTYPE_HEAD_DIM_MAX)
        return err_set(err, "--kv-dtype %s reads heads of at most %d values; this model's have %d", kv_dtype_name(t),
                       KV_DTYPE_HEAD_DIM_MAX, head_dim);
    *f = (KvRowFormat){t, n_heads, head_dim};
    return 0;
}

size_t kv_row_bytes(const KvRowFormat *f)
{
    return (size_t)f->n_heads * kv_dtype_head_bytes(f->type, f->head_dim);
}

/* ------------------------------------------------------------ int8 */

float kv_int8_scale(const float *x, int n)
{
    float max_abs = 0.0f;
    for (int i = 0; i < n; i++)
        max_abs = fabsf(x[i]) > max_abs ? fabsf(x[i]) : max_abs;
    return max_abs / (float)KV_INT8_MAX;
}

int8_t kv_int8_code(float x, float scale)
{
    /* Compared as floats first: converting a float outside int8's range (or
     * a NaN) to an integer is undefined behaviour in C. */
    float r = nearbyintf(x / scale);
    if (isnan(r))
        return 0;
    if (r > (float)KV_INT8_MAX)
        return KV_INT8_MAX;
    if (r < -(float)KV_INT8_MAX)
        return -KV_INT8_MAX;
    return (int8_t)r;
}

/* Codes [n_heads][head_dim], then scales [n_heads]. */
static void store_int8(unsigned char *row, const float *x, const KvRowFormat *f)
{
    int8_t *codes = (int8_t *)row;
    unsigned char *scales = row + (size_t)f->n_heads * (size_t)f->head_dim;
    for (int h = 0; h < f->n_heads; h++) {
        const float *head = x + (size_t)h * (size_t)f->head_dim;
        float scale = kv_int8_scale(head, f->head_dim);
        for (int i = 0; i < f->head_dim; i++)
            codes[(size_t)h * (size_t)f->head_dim + (size_t)i] = kv_int8_code(head[i], scale);
        memcpy(scales + (size_t)h * sizeof scale, &scale, sizeof scale);
    }
}

/* ------------------------------------------------------------ storing a row */

void kv_row_store(void *dst, const float *x, const KvRowFormat *f)
{
    unsigned char *row = dst;
    size_t n = (size_t)f->n_heads * (size_t)f->head_dim;
    switch (f->type) {
    case KV_DTYPE_FP32: memcpy(row, x, n * sizeof(float)); return;
    case KV_DTYPE_FP16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = dtype_f32_to_f16(x[i]);
            memcpy(row + 2 * i, &h, 2);
        }
        return;
    case KV_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t b = dtype_f32_to_bf16(x[i]);
            memcpy(row + 2 * i, &b, 2);
        }
        return;
    case KV_DTYPE_INT8: store_int8(row, x, f); return;
    case KV_DTYPE_FP8_E4M3: for (size_t i = 0; i < n; i++) row[i] = dtype_f32_to_fp8_e4m3(x[i]); return;
    case KV_DTYPE_FP8_E5M2: for (size_t i = 0; i < n; i++) row[i] = dtype_f32_to_fp8_e5m2(x[i]); return;
    default: return;
    }
}

/* ------------------------------------------------------------ reading a head back */

static inline float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* An IEEE half to f32 without a branch (dtype_f16_to_f32()'s values): the
 * exponent and mantissa move into f32's places and the exponent is
 * rebiased by adding 112 (= 127 - 15) to it, integer work only. A subnormal
 * (exponent 0) comes out as 1.m x 2^-14 that way, from which 2^-14 is
 * subtracted: m x 2^-24, exactly. An all-ones exponent (infinity, NaN)
 * gets 112 more, to f32's all-ones. No step touches a subnormal f32, whose
 * arithmetic costs x86 a microcode assist of a hundred cycles or more. */
static inline float half_bits_to_f32(uint32_t h)
{
    uint32_t o = ((h & 0x7fffu) << 13) + (112u << 23);
    uint32_t e = h & 0x7c00u;
    uint32_t subnormal = bits_of(float_of(o + (1u << 23)) - 0x1p-14f);
    o = e == 0 ? subnormal : o;
    o = e == 0x7c00u ? o + (112u << 23) : o;
    return float_of(o | (h & 0x8000u) << 16);
}

/* OFP8 E4M3 to f32 the same way: exponent + 120 (= 127 - 7); a subnormal
 * is 1.m x 2^-6 - 2^-6; S.1111.111 is the NaN. dtype_fp8_e4m3_to_f32()'s
 * values, without a branch. */
static inline float e4m3_bits_to_f32(uint32_t c)
{
    uint32_t o = ((c & 0x7fu) << 20) + (120u << 23);
    uint32_t subnormal = bits_of(float_of(o + (1u << 23)) - 0x1p-6f);
    o = (c & 0x78u) == 0 ? subnormal : o;
    o = (c & 0x7fu) == 0x7fu ? 0x7fc00000u : o;
    return float_of(o | (c & 0x80u) << 24);
}

void kv_row_load_head(float *dst, const unsigned char *row, int head, const KvRowFormat *f)
{
    int n = f->head_dim;
    size_t first = (size_t)head * (size_t)n; /* the head's first element */
    switch (f->type) {
    case KV_DTYPE_FP32: memcpy(dst, row + first * sizeof(float), (size_t)n * sizeof(float)); return;
    case KV_DTYPE_FP16: case KV_DTYPE_BF16: {
        uint16_t e[KV_DTYPE_HEAD_DIM_MAX];
        memcpy(e, row + 2 * first, (size_t)n * 2);
        if (f->type == KV_DTYPE_FP16)
            for (int i = 0; i < n; i++) dst[i] = half_bits_to_f32(e[i]);
        else
            for (int i = 0; i < n; i++) dst[i] = float_of((uint32_t)e[i] << 16);
        return;
    }
    case KV_DTYPE_INT8: {
        const int8_t *codes = (const int8_t *)row + first;
        float scale;
        memcpy(&scale, row + (size_t)f->n_heads * (size_t)n + (size_t)head * sizeof scale, sizeof scale);
        for (int i = 0; i < n; i++) dst[i] = (float)codes[i] * scale;
        return;
    }
    case KV_DTYPE_FP8_E4M3: for (int i = 0; i < n; i++) dst[i] = e4m3_bits_to_f32(row[first + (size_t)i]); return;
    case KV_DTYPE_FP8_E5M2:
        for (int i = 0; i < n; i++) dst[i] = half_bits_to_f32((uint32_t)row[first + (size_t)i] << 8);
        return;
    default: memset(dst, 0, (size_t)n * sizeof(float)); return;
    }
}

void kv_row_load(float *x, const void *row, const KvRowFormat *f)
{
    for (int h = 0; h < f->n_heads; h++)
        kv_row_load_head(x + (size_t)h * (size_t)f->head_dim, row, h, f);
}

/* ------------------------------------------------------------ attention over stored rows */

float kv_attention_score(const float *q, const void *row, int head, const KvRowFormat *f)
{
    if (f->type == KV_DTYPE_FP32)
        return attention_score(q, (const float *)row + (size_t)head * (size_t)f->head_dim, f->head_dim);
    float k[KV_DTYPE_HEAD_DIM_MAX]; /* one head, in registers and L1: never the cache */
    kv_row_load_head(k, row, head, f);
    return attention_score(q, k, f->head_dim);
}

void kv_attention_accumulate(float *out, float a, const void *row, int head, const KvRowFormat *f)
{
    if (f->type == KV_DTYPE_FP32) {
        attention_accumulate(out, a, (const float *)row + (size_t)head * (size_t)f->head_dim, f->head_dim);
        return;
    }
    float v[KV_DTYPE_HEAD_DIM_MAX];
    kv_row_load_head(v, row, head, f);
    attention_accumulate(out, a, v, f->head_dim);
}

void kv_attention_rows(float *out, const float *q, const unsigned char *keys, const unsigned char *values, int n_pos,
                       size_t stride, int head, const KvRowFormat *f, float *scores)
{
    for (int t = 0; t < n_pos; t++)
        scores[t] = kv_attention_score(q, keys + (size_t)t * stride, head, f);
    softmax(scores, n_pos);
    /* attention_reference() sums each output in position order from zero,
     * as these calls do one position at a time. */
    memset(out, 0, (size_t)f->head_dim * sizeof(float));
    for (int t = 0; t < n_pos; t++)
        kv_attention_accumulate(out, scores[t], values + (size_t)t * stride, head, f);
}
