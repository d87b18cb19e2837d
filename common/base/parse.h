/**
 * @file parse.h
 * @brief Strict parsing of the numbers and sizes that users type.
 *
 * The C library's strtol(), strtoull() and strtod() are lenient in ways
 * that turn typos into surprises: they skip leading white space, accept a
 * sign anywhere (strtoull("-1") is 2^64 - 1), read hexadecimal floats,
 * "inf" and "nan", and stop quietly at the first character they do not
 * understand. These functions accept exactly the text they document and
 * nothing else, and check the range, so `--seed ' -1'`, `--steps 12abc`
 * and `--kv-budget 1e99MiB` are refused with one line instead of running
 * with a number nobody asked for.
 *
 * The messages name the text but not the option: callers put the option
 * in front with err_prefix().
 */
#ifndef KVLAB_PARSE_H
#define KVLAB_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/**
 * Parses a whole decimal number: digits, with one leading '-' for a
 * negative number; no white space, no '+', nothing after the digits.
 * @param text  the text, NUL-terminated
 * @param min   smallest value allowed
 * @param max   largest value allowed
 * @param out   receives the value (untouched on failure)
 * @param err   receives "'TEXT' is not a whole number" or "N is out of range [MIN, MAX]"
 * @return 0 on success, -1 on failure
 */
int parse_long(const char *text, long min, long max, long *out, Err *err);

/**
 * Parses an unsigned whole decimal number (digits only: a '-' is refused
 * as out of range, never wrapped round as strtoull() does).
 * @param text  the text, NUL-terminated
 * @param max   largest value allowed
 * @param out   receives the value (untouched on failure)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int parse_u64(const char *text, uint64_t max, uint64_t *out, Err *err);

/**
 * Parses a decimal number such as 0.8, 1, .5 or 2.5e-3: digits with an
 * optional fraction and exponent, and a leading '-' only for a negative
 * number; no white space, no '+', no hexadecimal, "inf" or "nan".
 * @param text  the text, NUL-terminated
 * @param min   smallest value allowed
 * @param max   largest value allowed
 * @param out   receives the value (untouched on failure)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int parse_double(const char *text, double min, double max, double *out, Err *err);

/**
 * Parses a size in bytes: a whole or decimal number (no sign, no
 * exponent) followed by an optional unit. KiB, MiB, GiB, TiB (and K, k,
 * M, G, T) are powers of 1024; KB, MB, GB, TB powers of 1000; B or no unit
 * means bytes. The arithmetic is exact up to 2^64 - 1 bytes (a fraction is
 * rounded to the nearest byte); anything larger is refused rather than
 * wrapped round or rounded to a double.
 * @param text   the text, e.g. "512KiB", "1.5GB", "4096"
 * @param bytes  receives the size (untouched on failure)
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int parse_size(const char *text, uint64_t *bytes, Err *err);

/**
 * Formats a byte count for people, the inverse of parse_size() in binary
 * units: "1.50 MiB", "512 B".
 * @param buf    output buffer
 * @param n      its size
 * @param bytes  the count
 * @return buf
 */
const char *format_bytes(char *buf, size_t n, double bytes);

/**
 * Multiplies two sizes, refusing a product that does not fit in size_t.
 * @param a    first factor
 * @param b    second factor
 * @param out  receives a x b (untouched on overflow)
 * @return 0 on success, -1 when the product overflows
 */
int size_mul(size_t a, size_t b, size_t *out);

/**
 * Adds two sizes, refusing a sum that does not fit in size_t.
 * @param a    first term
 * @param b    second term
 * @param out  receives a + b (untouched on overflow)
 * @return 0 on success, -1 when the sum overflows
 */
int size_add(size_t a, size_t b, size_t *out);

#endif
