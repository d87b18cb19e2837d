/**
 * @file dtype.h
 * @brief Element types of K/V caches and weights on the device (f32, f16,
 *        bf16), the two 8-bit floats a K/V cache may hold (fp8 E4M3 and
 *        E5M2), and exact host conversions between them and f32.
 *
 * The CPU path always computes in f32. The CUDA path may store K/V (and
 * weights) in 16-bit types; to test it, the CPU references round their
 * inputs exactly as the device stores them, with the conversions here
 * (round to nearest, ties to even: what `__float2half_rn` and
 * `__float2bfloat16_rn` do), so that a kernel and its reference see the
 * very same values and differ only in the order of their arithmetic.
 *
 * The CPU's K/V caches may also store 8-bit floats (`--kv-dtype fp8-e4m3`,
 * `fp8-e5m2`; common/cpu/kv_dtype.h): the OCP 8-bit floating point formats
 * (OFP8, Open Compute Project, 2023), which NVIDIA's Hopper tensor cores
 * and vLLM's fp8 K/V cache use.
 *
 * | format | sign, exponent, mantissa bits | bias | largest finite | smallest normal | smallest subnormal | infinities | NaN codes |
 * |---|---|---|---|---|---|---|---|
 * | E4M3 | 1, 4, 3 | 7 | 448 = S.1111.110 | 2^-6 | 2^-9 | none | S.1111.111 (two) |
 * | E5M2 | 1, 5, 2 | 15 | 57344 = S.11110.11 | 2^-14 | 2^-16 | S.11111.00 | S.11111.{01,10,11} (six) |
 *
 * E5M2 is IEEE-like (it is the top byte of an IEEE half); E4M3 gives up
 * its infinities and all but one NaN per sign for one more binade of
 * range. Conversions from f32 round to nearest, ties to even, and
 * **saturate**, as OFP8's saturating mode (and CUDA's `__NV_SATFINITE`)
 * does: a finite value beyond the largest finite one becomes that largest
 * value of its sign, never an infinity or a NaN. That matters for E4M3,
 * whose range ends at 448: a key of 500 stays 448 instead of turning into
 * a NaN that would poison every softmax it enters. An infinity stays an
 * infinity in E5M2, which has them, and saturates in E4M3, which does not;
 * a NaN stays a NaN (its sign, and E5M2's two payload bits, kept).
 */
#ifndef KVLAB_DTYPE_H
#define KVLAB_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/** Element type of a stored tensor. */
typedef enum {
    DTYPE_F32 = 0, /**< IEEE single: 8 exponent bits, 24 significant bits */
    DTYPE_F16,     /**< IEEE half: 5 exponent bits, 11 significant bits, max 65504 */
    DTYPE_BF16,    /**< bfloat16: f32's 8 exponent bits, 8 significant bits */
    DTYPE_COUNT
} Dtype;

/**
 * Bytes of one element.
 * @param t  the type
 * @return 4 or 2
 */
size_t dtype_bytes(Dtype t);

/**
 * Name as the command line spells it: "f32", "f16", "bf16".
 * @param t  the type
 * @return a static string
 */
const char *dtype_name(Dtype t);

/**
 * Parses "f32", "f16" or "bf16".
 * @param text  the name
 * @param out   receives the type
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int dtype_parse(const char *text, Dtype *out, Err *err);

/**
 * f32 to IEEE half, rounding to nearest even; overflow gives infinity,
 * tiny values become subnormals or zero.
 * @param f  the value
 * @return the half's bits
 */
uint16_t dtype_f32_to_f16(float f);

/**
 * IEEE half to f32 (exact).
 * @param h  the half's bits
 * @return the value
 */
float dtype_f16_to_f32(uint16_t h);

/**
 * f32 to bfloat16, rounding to nearest even.
 * @param f  the value
 * @return the bfloat16's bits
 */
uint16_t dtype_f32_to_bf16(float f);

/**
 * bfloat16 to f32 (exact).
 * @param b  the bfloat16's bits
 * @return the value
 */
float dtype_bf16_to_f32(uint16_t b);

/**
 * f32 to OFP8 E4M3, rounding to nearest even and saturating: |f| > 448
 * (infinities included) gives 448 of f's sign, values below 2^-6 become
 * subnormals (multiples of 2^-9) or zero of f's sign, a NaN gives
 * S.1111.111.
 * @param f  the value
 * @return the byte
 */
uint8_t dtype_f32_to_fp8_e4m3(float f);

/**
 * OFP8 E4M3 to f32 (exact): S.1111.111 is a NaN, every other code a number.
 * @param c  the byte
 * @return the value
 */
float dtype_fp8_e4m3_to_f32(uint8_t c);

/**
 * f32 to OFP8 E5M2, rounding to nearest even and saturating: a finite
 * |f| > 57344 gives 57344 of f's sign, an infinity stays an infinity,
 * values below 2^-14 become subnormals (multiples of 2^-16) or zero of
 * f's sign, a NaN stays a NaN with the top two bits of its payload (at
 * least one of them set).
 * @param f  the value
 * @return the byte
 */
uint8_t dtype_f32_to_fp8_e5m2(float f);

/**
 * OFP8 E5M2 to f32 (exact).
 * @param c  the byte
 * @return the value
 */
float dtype_fp8_e5m2_to_f32(uint8_t c);

/**
 * Converts f32 values to a stored type.
 * @param dst  [n] elements of type @p t
 * @param src  [n] f32
 * @param n    count
 * @param t    destination type
 */
void dtype_from_f32(void *dst, const float *src, size_t n, Dtype t);

/**
 * Converts stored values back to f32 (exact).
 * @param dst  [n] f32
 * @param src  [n] elements of type @p t
 * @param n    count
 * @param t    source type
 */
void dtype_to_f32(float *dst, const void *src, size_t n, Dtype t);

/**
 * Rounds f32 values in place to what storing them as @p t keeps
 * (identity for f32).
 * @param x  [n] values
 * @param n  count
 * @param t  storage type
 */
void dtype_round(float *x, size_t n, Dtype t);

#endif
