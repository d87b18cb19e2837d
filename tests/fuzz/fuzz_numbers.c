/* libFuzzer target: the parsers of what users type on a command line
 * (common/base/parse.c, cli_parse_size(), and cli_parse() on a whole argv,
 * the latency options' arrival processes and objectives among them).
 *
 * Input: text; NUL bytes split it into arguments for cli_parse(), and the
 * first argument also goes through each number parser on its own.
 *
 * Beyond "no crash, no sanitizer report", every accepted number is checked
 * against an independent reading of the same text (strtol, strtoull,
 * strtod, long double arithmetic), and every refusal of a well-formed
 * number must be explained by its range. A parser that accepted " 5",
 * wrapped "-1" round, or rounded 2^64 - 1 through a double fails here. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrivals.h"
#include "cli.h"
#include "mem.h"
#include "parse.h"

#define MAX_TEXT 256
#define MAX_ARGS 16

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* -?[0-9]+ */
static int whole_number_form(const char *s)
{
    if (*s == '-')
        s++;
    if (!is_digit(*s))
        return 0;
    while (is_digit(*s))
        s++;
    return *s == '\0';
}

static void check_long(const char *text, long min, long max)
{
    long v = 12345;
    int rc = parse_long(text, min, max, &v, NULL);
    if (!whole_number_form(text)) {
        if (rc == 0)
            abort(); /* accepted something that is not digits */
        return;
    }
    errno = 0;
    long ref = strtol(text, NULL, 10);
    int in_range = errno != ERANGE && ref >= min && ref <= max;
    if ((rc == 0) != in_range || (rc == 0 && v != ref))
        abort();
}

static void check_u64(const char *text, uint64_t max)
{
    uint64_t v = 0;
    int rc = parse_u64(text, max, &v, NULL);
    if (!whole_number_form(text)) {
        if (rc == 0)
            abort();
        return;
    }
    errno = 0;
    unsigned long long ref = strtoull(text, NULL, 10);
    int in_range = text[0] != '-' && errno != ERANGE && ref <= max;
    if ((rc == 0) != in_range || (rc == 0 && v != ref))
        abort();
}

static void check_double(const char *text)
{
    double v = 0;
    if (parse_double(text, -1e300, 1e300, &v, NULL) != 0)
        return;
    /* Accepted: a decimal number that strtod reads whole, made only of
     * digits, a point, an exponent and signs, starting with a digit, a
     * point or a minus (never white space, '+', "inf", "nan", "0x"). */
    char *end;
    double ref = strtod(text, &end);
    if (*end != '\0' || !(is_digit(text[0]) || text[0] == '.' || text[0] == '-') ||
        text[strspn(text, "0123456789.eE+-")] != '\0' || !isfinite(v) || v != ref)
        abort();
}

/* The size the text means, from long double arithmetic (64-bit mantissa):
 * independent of parse_size()'s integer arithmetic. -1: not a size. */
static int reference_size(const char *text, long double *bytes, int *frac_digits)
{
    static const struct {
        const char *unit;
        long double scale;
    } units[] = {{"", 1}, {"B", 1}, {"K", 1024.0L}, {"k", 1024.0L}, {"KiB", 1024.0L}, {"KB", 1e3L},
                 {"M", 1048576.0L}, {"MiB", 1048576.0L}, {"MB", 1e6L}, {"G", 1073741824.0L},
                 {"GiB", 1073741824.0L}, {"GB", 1e9L}, {"T", 1099511627776.0L}, {"TiB", 1099511627776.0L},
                 {"TB", 1e12L}};
    const char *p = text;
    if (!is_digit(*p))
        return -1;
    while (is_digit(*p))
        p++;
    *frac_digits = 0;
    if (*p == '.') {
        p++;
        if (!is_digit(*p))
            return -1;
        while (is_digit(*p)) {
            p++;
            ++*frac_digits;
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].unit) == 0) {
            char number[MAX_TEXT + 1];
            memcpy(number, text, (size_t)(p - text));
            number[p - text] = '\0';
            *bytes = strtold(number, NULL) * units[i].scale;
            return 0;
        }
    return -1;
}

static void check_size(const char *text)
{
    uint64_t bytes = 0;
    int rc = parse_size(text, &bytes, NULL);
    size_t via_cli = 0;
    if ((cli_parse_size(text, &via_cli, NULL) == 0) != (rc == 0) || (rc == 0 && via_cli != bytes))
        abort();
    long double ref;
    int frac_digits;
    if (reference_size(text, &ref, &frac_digits) != 0) {
        if (rc == 0)
            abort(); /* accepted something that is not a size */
        return;
    }
    const long double limit = 18446744073709551615.0L;
    /* Within a byte of the reference (plus the reference's own rounding). */
    long double slack = 1.0L + ref * 0x1p-60L;
    if (rc == 0) {
        if (fabsl((long double)bytes - ref) > slack)
            abort();
    } else if (frac_digits <= 18 && ref < limit - slack) {
        abort(); /* refused a well-formed size that fits */
    }
}

/* The latency options: a rate, if any, in range and with a CV in range;
 * objectives, if any, above 0 and at most a day. */
static int latency_options_in_range(const CliOptions *o)
{
    if (o->arrival_rate != 0 && !(o->arrival_rate >= ARRIVAL_RATE_MIN && o->arrival_rate <= ARRIVAL_RATE_MAX &&
                                  o->arrival_cv >= ARRIVAL_CV_MIN && o->arrival_cv <= ARRIVAL_CV_MAX))
        return 0;
    return o->slo_ttft >= 0 && o->slo_ttft <= 86400 && o->slo_tpot >= 0 && o->slo_tpot <= 86400;
}

/* cli_parse() on a whole argv: no crash; a refusal is one non-empty line;
 * what it accepts is in the documented ranges. */
static void check_cli(char **args, int n)
{
    char *argv[MAX_ARGS + 2];
    argv[0] = "fuzz";
    for (int i = 0; i < n; i++)
        argv[i + 1] = args[i];
    argv[n + 1] = NULL;
    static const CliProgram prog = {"fuzz", "fuzzing", 0xFF};
    CliOptions o;
    Err err = {{0}};
    CliResult r = cli_parse(&prog, n + 1, argv, &o, &err);
    if (r == CLI_ERROR && (err.msg[0] == '\0' || strchr(err.msg, '\n')))
        abort();
    if (r == CLI_RUN &&
        (o.steps < 1 || o.steps > 1 << 20 || o.threads < 0 || o.threads > 1024 || o.max_batch < 1 ||
         o.n_samples < 1 || o.n_samples > 256 || o.block_size < 1 || o.block_size > 256 ||
         (o.block_size & (o.block_size - 1)) || o.watermark < 0 || o.watermark > 50 || !(o.temperature >= 0) ||
         !(o.top_p >= 0 && o.top_p <= 1) || o.top_k < 0 || !(o.min_p >= 0 && o.min_p <= 1) ||
         !(o.repetition_penalty >= 0.01f && o.repetition_penalty <= 100) ||
         !(o.frequency_penalty >= -2 && o.frequency_penalty <= 2) ||
         !(o.presence_penalty >= -2 && o.presence_penalty <= 2) || !latency_options_in_range(&o)))
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* --help prints the usage on stdout: keep the fuzzer's output readable. */
    if (!freopen("/dev/null", "w", stdout))
        return 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_TEXT)
        return 0;
    char text[MAX_TEXT + 1];
    memcpy(text, data, size);
    text[size] = '\0';
    /* The whole input (up to its first NUL) through each number parser,
     * with limits taken from its length so that ranges vary too. */
    long lo = -(long)(size * 1000003u), hi = (long)(size * 7919u);
    check_long(text, LONG_MIN, LONG_MAX);
    check_long(text, lo, hi);
    check_long(text, 0, 1024);
    check_u64(text, UINT64_MAX);
    check_u64(text, (uint64_t)size * 104729u);
    check_double(text);
    check_size(text);
    /* The input as an argv: NUL bytes separate the arguments. */
    char *args[MAX_ARGS];
    int n = 0;
    for (size_t i = 0; i <= size && n < MAX_ARGS;) {
        args[n++] = text + i;
        i += strlen(text + i) + 1;
    }
    check_cli(args, n);
    if (mem_live_buffers() != 0)
        abort(); /* every ledger allocation is freed */
    return 0;
}
