#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Length of the run of digits at s. */
static size_t digits_at(const char *s)
{
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    return n;
}

/* '-'? DIGITS, and nothing else: the only form strtol may then see, so
 * that its leniency (white space, '+', stopping early) never applies. */
static int is_whole_number(const char *text)
{
    const char *p = text[0] == '-' ? text + 1 : text;
    size_t n = digits_at(p);
    return n > 0 && p[n] == '\0';
}

int parse_long(const char *text, long min, long max, long *out, Err *err)
{
    if (!is_whole_number(text))
        return err_set(err, "'%s' is not a whole number", text);
    errno = 0;
    long v = strtol(text, NULL, 10);
    if (errno == ERANGE || v < min || v > max)
        return err_set(err, "%s is out of range [%ld, %ld]", text, min, max);
    *out = v;
    return 0;
}

int parse_u64(const char *text, uint64_t max, uint64_t *out, Err *err)
{
    if (!is_whole_number(text))
        return err_set(err, "'%s' is not a whole number", text);
    /* A '-' is well-formed but never in range; strtoull would negate it. */
    errno = 0;
    unsigned long long v = text[0] == '-' ? 0 : strtoull(text, NULL, 10);
    if (text[0] == '-' || errno == ERANGE || v > max)
        return err_set(err, "%s is out of range [0, %llu]", text, (unsigned long long)max);
    *out = (uint64_t)v;
    return 0;
}

/* '-'? (DIGITS ('.' DIGITS?)? | '.' DIGITS) ([eE] [+-]? DIGITS)? */
static int is_decimal_number(const char *text)
{
    const char *p = text[0] == '-' ? text + 1 : text;
    size_t whole = digits_at(p);
    p += whole;
    size_t frac = 0;
    if (*p == '.') {
        frac = digits_at(p + 1);
        p += 1 + frac;
    }
    if (whole + frac == 0)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        size_t exp = digits_at(p);
        if (exp == 0)
            return 0;
        p += exp;
    }
    return *p == '\0';
}

int parse_double(const char *text, double min, double max, double *out, Err *err)
{
    if (!is_decimal_number(text))
        return err_set(err, "'%s' is not a number", text);
    errno = 0;
    double v = strtod(text, NULL);
    if (errno == ERANGE || !isfinite(v) || v < min || v > max)
        return err_set(err, "%s is out of range [%g, %g]", text, min, max);
    *out = v;
    return 0;
}

/* The units of a size and their byte counts. */
static int size_unit(const char *unit, uint64_t *scale)
{
    static const struct {
        const char *name;
        uint64_t scale;
    } units[] = {
        {"", 1},           {"B", 1},
        {"K", 1ull << 10}, {"k", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000ull},
        {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000ull},
        {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
        {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(unit, units[i].name) == 0) {
            *scale = units[i].scale;
            return 0;
        }
    return -1;
}

/* Fractions of a size are rounded to a byte; more digits than this could
 * not change the byte unless they sat exactly on a half. */
#define SIZE_MAX_FRACTION_DIGITS 18

int parse_size(const char *text, uint64_t *bytes, Err *err)
{
    static const char *const examples = "examples: 4096, 512KiB, 4MiB, 1.5GB";
    size_t whole = digits_at(text);
    size_t frac = text[whole] == '.' ? digits_at(text + whole + 1) : 0;
    const char *unit = text + whole + (text[whole] == '.' ? 1 + frac : 0);
    uint64_t scale;
    /* A unit is letters: "1e99MiB" and "2.5.1GB" are malformed numbers. */
    if (whole == 0 || (text[whole] == '.' && frac == 0) || unit[strcspn(unit, "0123456789.+-")] != '\0')
        return err_set(err, "'%s' is not a size (%s; no sign, no exponent)", text, examples);
    if (size_unit(unit, &scale))
        return err_set(err, "'%s' has an unknown unit '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", text,
                       unit);
    if (frac > SIZE_MAX_FRACTION_DIGITS)
        return err_set(err, "'%s' has more than %d digits after the point", text, SIZE_MAX_FRACTION_DIGITS);
    /* Whole part x scale, exactly, then the fraction x scale rounded. */
    uint64_t n = 0;
    for (size_t i = 0; i < whole; i++) {
        unsigned d = (unsigned)(text[i] - '0');
        if (n > (UINT64_MAX - d) / 10)
            return err_set(err, "'%s' is too large (at most %llu bytes)", text, (unsigned long long)UINT64_MAX);
        n = 10 * n + d;
    }
    if (n > UINT64_MAX / scale)
        return err_set(err, "'%s' is too large (at most %llu bytes)", text, (unsigned long long)UINT64_MAX);
    n *= scale;
    uint64_t numerator = 0, denominator = 1; /* the fraction: numerator / 10^frac, both below 10^18 */
    for (size_t i = 0; i < frac; i++) {
        numerator = 10 * numerator + (uint64_t)(text[whole + 1 + i] - '0');
        denominator *= 10;
    }
    unsigned __int128 scaled = (unsigned __int128)numerator * scale; /* < 10^18 x 2^40: fits in 128 bits */
    uint64_t frac_bytes = (uint64_t)((scaled + denominator / 2) / denominator);
    if (frac_bytes > UINT64_MAX - n)
        return err_set(err, "'%s' is too large (at most %llu bytes)", text, (unsigned long long)UINT64_MAX);
    *bytes = n + frac_bytes;
    return 0;
}

int size_mul(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return -1;
    *out = a * b;
    return 0;
}

int size_add(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return -1;
    *out = a + b;
    return 0;
}

const char *format_bytes(char *buf, size_t n, double bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f B", bytes);
    else
        snprintf(buf, n, "%.2f %s", bytes, units[u]);
    return buf;
}
