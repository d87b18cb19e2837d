#include "quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "dtype.h"

static const char *const NAMES[WEIGHT_TYPE_COUNT] = {"f32", "f16", "bf16", "Q8_0", "Q4_0", "Q4_1"};
static const size_t BLOCK_BYTES[WEIGHT_TYPE_COUNT] = {4, 2, 2, 34, 18, 20};

const char *weight_type_name(WeightType t)
{
    return (unsigned)t < WEIGHT_TYPE_COUNT ? NAMES[t] : "?";
}

int weight_type_block_elems(WeightType t)
{
    return t >= WEIGHT_Q8_0 ? QUANT_BLOCK : 1;
}

size_t weight_type_block_bytes(WeightType t)
{
    return (unsigned)t < WEIGHT_TYPE_COUNT ? BLOCK_BYTES[t] : 0;
}

size_t weight_row_bytes(WeightType t, int cols)
{
    return (size_t)(cols / weight_type_block_elems(t)) * weight_type_block_bytes(t);
}

WeightMatrix weight_matrix(const void *data, WeightType type, int rows, int cols)
{
    return (WeightMatrix){.data = data, .type = type, .rows = rows, .cols = cols,
                          .row_bytes = weight_row_bytes(type, cols)};
}

int weight_type_parse(const char *text, WeightType *out, Err *err)
{
    for (int i = 0; i < WEIGHT_TYPE_COUNT; i++)
        if (strcasecmp(text, NAMES[i]) == 0) {
            *out = (WeightType)i;
            return 0;
        }
    return err_set(err, "'%s' is not a weight type (f32, f16, bf16, Q8_0, Q4_0 or Q4_1)", text);
}

static uint16_t load_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void store_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

/* The 4-bit value of weight j of a block: the low nibbles hold weights
 * 0..15, the high nibbles weights 16..31. */
static int nibble(const unsigned char *qs, int j)
{
    return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

void weight_dequantize_row(const WeightMatrix *w, int r, float *out)
{
    const unsigned char *row = (const unsigned char *)w->data + (size_t)r * w->row_bytes;
    int n = w->cols;
    switch (w->type) {
    case WEIGHT_F32: memcpy(out, row, (size_t)n * sizeof(float)); return;
    case WEIGHT_F16:
        for (int j = 0; j < n; j++)
            out[j] = dtype_f16_to_f32(load_u16(row + 2 * j));
        return;
    case WEIGHT_BF16:
        for (int j = 0; j < n; j++)
            out[j] = dtype_bf16_to_f32(load_u16(row + 2 * j));
        return;
    case WEIGHT_Q8_0:
        for (int b = 0; b < n / QUANT_BLOCK; b++, row += 34) {
            float d = dtype_f16_to_f32(load_u16(row));
            for (int j = 0; j < QUANT_BLOCK; j++)
                out[b * QUANT_BLOCK + j] = (float)(int8_t)row[2 + j] * d;
        }
        return;
    case WEIGHT_Q4_0:
        for (int b = 0; b < n / QUANT_BLOCK; b++, row += 18) {
            float d = dtype_f16_to_f32(load_u16(row));
            for (int j = 0; j < QUANT_BLOCK; j++)
                out[b * QUANT_BLOCK + j] = (float)(nibble(row + 2, j) - 8) * d;
        }
        return;
    case WEIGHT_Q4_1:
        for (int b = 0; b < n / QUANT_BLOCK; b++, row += 20) {
            float d = dtype_f16_to_f32(load_u16(row)), m = dtype_f16_to_f32(load_u16(row + 2));
            for (int j = 0; j < QUANT_BLOCK; j++)
                out[b * QUANT_BLOCK + j] = (float)nibble(row + 4, j) * d + m;
        }
        return;
    default: return;
    }
}

static void quantize_q8_0(const float *x, unsigned char *out)
{
    float amax = 0.0f;
    for (int j = 0; j < QUANT_BLOCK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, dtype_f32_to_f16(d));
    for (int j = 0; j < QUANT_BLOCK; j++) {
        float q = roundf(x[j] * id);
        out[2 + j] = (unsigned char)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
    }
}

static void put_nibbles(unsigned char *qs, const int q[QUANT_BLOCK])
{
    for (int j = 0; j < 16; j++)
        qs[j] = (unsigned char)(q[j] | q[j + 16] << 4);
}

static int clamp_nibble(float v)
{
    int q = (int)v;
    return q < 0 ? 0 : q > 15 ? 15 : q;
}

static void quantize_q4_0(const float *x, unsigned char *out)
{
    float extreme = 0.0f; /* the value of largest magnitude, with its sign */
    for (int j = 0; j < QUANT_BLOCK; j++)
        if (fabsf(x[j]) > fabsf(extreme))
            extreme = x[j];
    float d = extreme / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, dtype_f32_to_f16(d));
    int q[QUANT_BLOCK];
    for (int j = 0; j < QUANT_BLOCK; j++)
        q[j] = clamp_nibble(x[j] * id + 8.5f);
    put_nibbles(out + 2, q);
}

static void quantize_q4_1(const float *x, unsigned char *out)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < QUANT_BLOCK; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, dtype_f32_to_f16(d));
    store_u16(out + 2, dtype_f32_to_f16(lo));
    int q[QUANT_BLOCK];
    for (int j = 0; j < QUANT_BLOCK; j++)
        q[j] = clamp_nibble((x[j] - lo) * id + 0.5f);
    put_nibbles(out + 4, q);
}

void weight_quantize_row(WeightType t, const float *x, int cols, void *out)
{
    unsigned char *o = out;
    switch (t) {
    case WEIGHT_F32: memcpy(out, x, (size_t)cols * sizeof(float)); return;
    case WEIGHT_F16:
        for (int j = 0; j < cols; j++)
            store_u16(o + 2 * j, dtype_f32_to_f16(x[j]));
        return;
    case WEIGHT_BF16:
        for (int j = 0; j < cols; j++)
            store_u16(o + 2 * j, dtype_f32_to_bf16(x[j]));
        return;
    case WEIGHT_Q8_0:
    case WEIGHT_Q4_0:
    case WEIGHT_Q4_1:
        for (int b = 0; b < cols / QUANT_BLOCK; b++) {
            const float *xb = x + b * QUANT_BLOCK;
            unsigned char *ob = o + (size_t)b * weight_type_block_bytes(t);
            if (t == WEIGHT_Q8_0)
                quantize_q8_0(xb, ob);
            else if (t == WEIGHT_Q4_0)
                quantize_q4_0(xb, ob);
            else
                quantize_q4_1(xb, ob);
        }
        return;
    default: return;
    }
}
