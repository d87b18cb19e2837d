/* kvcalc: the memory arithmetic of a KV cache (tools/lib/kvmath.h).
 *
 *   build/kvcalc                                   LLaMA-7B, fp16, 2,048 tokens
 *   build/kvcalc --preset llama-13b --gpu-mem 80GB --weights 26GB --activations 4GB --reserve 2GB
 *   build/kvcalc --model ../shared/models/stories260K.bin --dtype fp32
 *   build/kvcalc --check-source                    re-does the source material's figures exactly
 *   build/kvcalc --preset llama-13b --dtype int8   one 4-byte scale per head of each row counted too
 *
 * After the chosen dtype's figures, a table gives the same figures for every
 * K/V element type kvlab stores (--kv-dtype), so that what a smaller entry
 * buys reads off one screen.
 *
 * Every size is printed in bytes first, then in decimal units (GB = 10^9 B)
 * and binary units (GiB = 2^30 B), because the two differ by 7% at this
 * scale and the source material mixes them. */
#define _GNU_SOURCE /* getopt_long */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvmath.h"
#include "model.h"
#include "parse.h"

static const char *PROGRAM = "kvcalc";

/* ------------------------------------------------------------ formatting */

/* 1073741824 -> "1,073,741,824" */
static const char *grouped(char *buf, size_t n, uint64_t v)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* "1,073,741,824 B = 1.0737 GB = 1.0000 GiB": exact bytes, then the decimal and
 * the binary unit of the same magnitude. */
static const char *sized(char *buf, size_t n, uint64_t bytes)
{
    static const struct {
        double dec, bin;
        const char *dec_name, *bin_name;
    } units[] = {{1e12, 1099511627776.0, "TB", "TiB"}, {1e9, 1073741824.0, "GB", "GiB"},
                 {1e6, 1048576.0, "MB", "MiB"}, {1e3, 1024.0, "KB", "KiB"}};
    char g[32];
    grouped(g, sizeof g, bytes);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if ((double)bytes >= units[i].dec) {
            snprintf(buf, n, "%s B = %.4f %s = %.4f %s", g, (double)bytes / units[i].dec, units[i].dec_name,
                     (double)bytes / units[i].bin, units[i].bin_name);
            return buf;
        }
    snprintf(buf, n, "%s B", g);
    return buf;
}

/* ------------------------------------------------------------ options */

typedef struct {
    KvShape shape;
    KvDtype dtype;
    uint64_t seq_len;
    uint64_t batch;
    int check_source;
    int has_gpu;
    const char *size_text[4]; /* --gpu-mem, --weights, --activations, --reserve as typed */
    KvBudget budget;
} Options;

enum { OPT_PRESET = 1000, OPT_MODEL, OPT_DTYPE, OPT_SEQ_LEN, OPT_BATCH, OPT_GPU, OPT_WEIGHTS, OPT_ACTIVATIONS,
       OPT_RESERVE, OPT_CHECK, OPT_HELP };

static void usage(void)
{
    printf("Usage: %s [options]\n"
           "The memory arithmetic of a KV cache: bytes per token, per request, per batch, and how many\n"
           "full-length requests fit on a GPU. Sizes are printed in bytes, GB (10^9 B) and GiB (2^30 B).\n\n"
           "Options:\n"
           "  --preset NAME        %s (default llama-7b)\n"
           "  --model FILE         read the shape from a checkpoint header instead (default dtype fp32)\n"
           "  --dtype T            fp32, fp16, bf16, int8 (a 4-byte scale per head of each row counted),\n"
           "                       fp8-e4m3 or fp8-e5m2 (default fp16 for presets)\n"
           "  --seq-len N          tokens per request (default: the model's context length)\n"
           "  --batch N            requests in a batch (default 1)\n"
           "  --gpu-mem SIZE       GPU memory, e.g. 80GB (= 80 x 10^9 B) or 80GiB (= 80 x 2^30 B)\n"
           "  --weights SIZE       memory taken by the weights (default 0)\n"
           "  --activations SIZE   memory kept for activations (default 0)\n"
           "  --reserve SIZE       memory kept back for the system (default 0)\n"
           "  --check-source       re-do the source material's figures exactly and say where it is loose\n"
           "  --help               show this help\n",
           PROGRAM, kvmath_preset_names());
}

static int parse_count(const char *name, const char *text, uint64_t max, uint64_t *out, Err *err)
{
    uint64_t v;
    if (parse_u64(text, max, &v, NULL) || v == 0)
        return err_set(err, "--%s: '%s' is not a whole number from 1 to %" PRIu64, name, text, max);
    *out = v;
    return 0;
}

static int load_model_shape(Options *o, const char *path, Err *err)
{
    ModelConfig cfg;
    if (model_read_config(path, &cfg, err))
        return -1;
    o->shape = kvmath_shape_from_config(&cfg, path);
    return 0;
}

static int apply(Options *o, int id, const char *name, const char *arg, int *dtype_given, Err *err)
{
    switch (id) {
    case OPT_PRESET:
        if (kvmath_preset(arg, &o->shape))
            return err_set(err, "--preset: '%s' is not one of %s", arg, kvmath_preset_names());
        return 0;
    case OPT_MODEL:
        if (load_model_shape(o, arg, err))
            return err_prefix(err, "--model");
        if (!*dtype_given)
            o->dtype = KV_DTYPE_FP32; /* what kvlab's CPU chapters store */
        return 0;
    case OPT_DTYPE:
        *dtype_given = 1;
        return kvmath_dtype_parse(arg, &o->dtype, err) ? err_prefix(err, "--dtype") : 0;
    case OPT_SEQ_LEN: return parse_count(name, arg, 1ULL << 32, &o->seq_len, err);
    case OPT_BATCH: return parse_count(name, arg, 1ULL << 24, &o->batch, err);
    case OPT_GPU: case OPT_WEIGHTS: case OPT_ACTIVATIONS: case OPT_RESERVE: {
        uint64_t *slot[] = {&o->budget.gpu_bytes, &o->budget.weights_bytes, &o->budget.activations_bytes,
                            &o->budget.reserve_bytes};
        size_t bytes;
        if (cli_parse_size(arg, &bytes, err))
            return err_prefix(err, "--%s", name);
        *slot[id - OPT_GPU] = bytes;
        o->size_text[id - OPT_GPU] = arg;
        o->has_gpu |= id == OPT_GPU;
        return 0;
    }
    case OPT_CHECK: o->check_source = 1; return 0;
    }
    return err_set(err, "--%s: not handled", name);
}

/* 0: run, 1: help printed, -1: error in err. */
static int parse_options(int argc, char **argv, Options *o, Err *err)
{
    static const struct option longopts[] = {
        {"preset", required_argument, NULL, OPT_PRESET}, {"model", required_argument, NULL, OPT_MODEL},
        {"dtype", required_argument, NULL, OPT_DTYPE}, {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
        {"batch", required_argument, NULL, OPT_BATCH}, {"gpu-mem", required_argument, NULL, OPT_GPU},
        {"weights", required_argument, NULL, OPT_WEIGHTS}, {"activations", required_argument, NULL, OPT_ACTIVATIONS},
        {"reserve", required_argument, NULL, OPT_RESERVE}, {"check-source", no_argument, NULL, OPT_CHECK},
        {"help", no_argument, NULL, OPT_HELP}, {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    kvmath_preset("llama-7b", &o->shape);
    o->dtype = KV_DTYPE_FP16;
    o->batch = 1;
    int dtype_given = 0, shape_given = 0;
    opterr = 0;
    for (;;) {
        int index = -1, c = getopt_long(argc, argv, ":h", longopts, &index);
        if (c == -1)
            break;
        if (c == 'h' || c == OPT_HELP) {
            usage();
            return 1;
        }
        if (c == ':')
            return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        if (c == '?')
            return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        if ((c == OPT_PRESET || c == OPT_MODEL) && shape_given++)
            return err_set(err, "give one of --preset and --model, once");
        if (apply(o, c, longopts[index].name, optarg, &dtype_given, err))
            return -1;
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    if (!o->has_gpu && (o->budget.weights_bytes || o->budget.activations_bytes || o->budget.reserve_bytes))
        return err_set(err, "--weights, --activations and --reserve need --gpu-mem");
    if (o->seq_len == 0)
        o->seq_len = (uint64_t)o->shape.seq_len;
    /* A request or a batch past 2^64 bytes would wrap round to a small
     * number: refuse it instead (the per-token bytes fit easily). */
    uint64_t per_token = kvmath_bytes_per_token(&o->shape, o->dtype);
    if (o->seq_len > UINT64_MAX / per_token || per_token * o->seq_len > UINT64_MAX / o->batch)
        return err_set(err,
                       "%" PRIu64 " request(s) of %" PRIu64 " tokens at %" PRIu64 " B per token is more than 2^64 "
                       "bytes (16 EiB); kvcalc counts in 64 bits",
                       o->batch, o->seq_len, per_token);
    /* Checked here, before anything is printed: an impossible budget is an
     * error, not a half-printed report. */
    uint64_t left;
    if (o->has_gpu && kvmath_kv_bytes_left(&o->budget, &left, err))
        return -1;
    return 0;
}

/* ------------------------------------------------------------ the calculation */

/* "80GB" -> "80GiB" and back: the same number read in the other unit
 * system. Returns 0 when the text has no decimal or binary unit to swap. */
static int swap_units(const char *text, char *out, size_t n)
{
    static const char *pairs[][2] = {{"TB", "TiB"}, {"GB", "GiB"}, {"MB", "MiB"}, {"KB", "KiB"}};
    size_t len = strlen(text);
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int from = 0; from < 2; from++) {
            size_t sl = strlen(pairs[i][from]);
            if (len > sl && strcmp(text + len - sl, pairs[i][from]) == 0) {
                snprintf(out, n, "%.*s%s", (int)(len - sl), text, pairs[i][!from]);
                return 1;
            }
        }
    return 0;
}

static void print_fit(const KvBudget *b, uint64_t request_bytes, const char *label)
{
    char s1[96], s2[96];
    uint64_t left;
    Err why;
    printf("%s\n", label);
    if (kvmath_kv_bytes_left(b, &left, &why)) {
        printf("  %s\n", why.msg);
        return;
    }
    uint64_t fit = kvmath_requests_that_fit(left, request_bytes);
    printf("  GPU           %s\n", sized(s1, sizeof s1, b->gpu_bytes));
    printf("  weights       %s\n", sized(s1, sizeof s1, b->weights_bytes));
    printf("  activations   %s\n", sized(s1, sizeof s1, b->activations_bytes));
    printf("  reserve       %s\n", sized(s1, sizeof s1, b->reserve_bytes));
    printf("  left for KV   %s\n", sized(s1, sizeof s1, left));
    printf("  full-length requests that fit: %" PRIu64 " (%.2f, rounded down); they take %s, leaving %s\n", fit,
           (double)left / (double)request_bytes, sized(s1, sizeof s1, fit * request_bytes),
           sized(s2, sizeof s2, left - fit * request_bytes));
}

static void print_gpu(const Options *o, uint64_t request_bytes)
{
    print_fit(&o->budget, request_bytes, "GPU, sizes as given (GB = 10^9 B, GiB = 2^30 B)");
    /* The same numbers in the other unit system, if any were in one. */
    KvBudget swapped = o->budget;
    uint64_t *slot[] = {&swapped.gpu_bytes, &swapped.weights_bytes, &swapped.activations_bytes,
                        &swapped.reserve_bytes};
    int any = 0;
    char label[256] = "GPU, the same numbers with GB and GiB swapped:";
    for (int i = 0; i < 4; i++) {
        char text[64];
        size_t bytes;
        if (!o->size_text[i] || !swap_units(o->size_text[i], text, sizeof text) || cli_parse_size(text, &bytes, NULL))
            continue;
        *slot[i] = bytes;
        any = 1;
        snprintf(label + strlen(label), sizeof label - strlen(label), " %s", text);
    }
    if (!any)
        return;
    printf("\n");
    print_fit(&swapped, request_bytes, label);
}

/* Bytes per token, one request, and (with a GPU) the full-length requests
 * that fit, for every K/V element type. */
static void print_by_dtype(const Options *o)
{
    uint64_t left = 0;
    int gpu = o->has_gpu && kvmath_kv_bytes_left(&o->budget, &left, NULL) == 0;
    uint64_t fp16_fit = gpu ? kvmath_requests_that_fit(left, kvmath_bytes_per_request(&o->shape, KV_DTYPE_FP16,
                                                                                        o->seq_len)) : 0;
    char a[32], b[96], formula[64];
    printf("\nby K/V element type (one request = %s tokens%s)\n", grouped(a, sizeof a, o->seq_len),
           gpu ? "; requests: full-length ones that fit, GPU sizes as given" : "");
    printf("  %-9s %-32s %11s  %-*s%s\n", "dtype", "per head", "B per token", gpu ? 46 : 0, "one request",
           gpu ? "  requests" : "");
    for (int t = 0; t < KV_DTYPE_COUNT; t++) {
        uint64_t per_token = kvmath_bytes_per_token(&o->shape, (KvDtype)t);
        uint64_t request = kvmath_bytes_per_request(&o->shape, (KvDtype)t, o->seq_len);
        printf("  %-9s %-32s %11s  %-*s", kvmath_dtype_name((KvDtype)t),
               kv_dtype_head_formula(formula, sizeof formula, (KvDtype)t, o->shape.head_dim),
               grouped(a, sizeof a, per_token), gpu ? 46 : 0, sized(b, sizeof b, request));
        if (gpu) {
            uint64_t fit = kvmath_requests_that_fit(left, request);
            printf("  %" PRIu64 " (%+" PRId64 " against fp16)", fit, (int64_t)fit - (int64_t)fp16_fit);
        }
        printf("\n");
    }
}

static void run_calculator(const Options *o)
{
    const KvShape *s = &o->shape;
    uint64_t per_token = kvmath_bytes_per_token(s, o->dtype);
    uint64_t per_request = kvmath_bytes_per_request(s, o->dtype, o->seq_len);
    char a[96], n1[32], formula[64];
    printf("%s: %d layers, %d query heads, %d KV heads%s, head_dim %d; %s (%u B per element%s)\n\n", s->name,
           s->n_layers, s->n_heads, s->n_kv_heads, s->n_kv_heads < s->n_heads ? " (GQA)" : "", s->head_dim,
           kvmath_dtype_name(o->dtype), kvmath_dtype_bytes(o->dtype),
           kv_dtype_scale_bytes(o->dtype) ? ", and a 4 B scale per head of each row" : "");
    printf("KV bytes per token\n  2 (K,V) x %d layers x %d KV heads x %s = %s\n", s->n_layers, s->n_kv_heads,
           kv_dtype_head_formula(formula, sizeof formula, o->dtype, s->head_dim), sized(a, sizeof a, per_token));
    printf("one request of %s tokens\n  %s\n", grouped(n1, sizeof n1, o->seq_len), sized(a, sizeof a, per_request));
    if (o->batch > 1)
        printf("a batch of %" PRIu64 " such requests\n  %s\n", o->batch, sized(a, sizeof a, per_request * o->batch));
    if (o->has_gpu) {
        printf("\n");
        print_gpu(o, per_request);
    }
    print_by_dtype(o);
}

/* ------------------------------------------------------------ the source material, checked */

static void check_single_requests(void)
{
    KvShape l7, l13;
    kvmath_preset("llama-7b", &l7);
    kvmath_preset("llama-13b", &l13);
    char a[96];
    uint64_t r7 = kvmath_bytes_per_request(&l7, KV_DTYPE_FP16, 2048);
    uint64_t r13 = kvmath_bytes_per_request(&l13, KV_DTYPE_FP16, 2048);
    printf("1. LLaMA-7B (32 layers, 32 heads, head_dim 128), one request of 2,048 tokens, fp16\n");
    printf("   source: 1,073,741,824 bytes, \"about 1.0 GB\"\n");
    printf("   exact:  2 x 32 x 32 x 128 x 2,048 x 2 = %s\n", sized(a, sizeof a, r7));
    printf("   the bytes agree; the rounded figure is exactly 1 GiB, which is 1.07 GB in decimal units\n\n");
    printf("2. LLaMA-13B (40 layers, 40 heads, head_dim 128), one request of 2,048 tokens, fp16\n");
    printf("   source: 1,677,721,600 bytes, \"about 1.56 GB\"\n");
    printf("   exact:  2 x 40 x 40 x 128 x 2,048 x 2 = %s\n", sized(a, sizeof a, r13));
    printf("   the bytes agree; \"1.56 GB\" is in GiB (1.5625 GiB); in decimal units it is 1.68 GB\n\n");
    printf("3. 32 concurrent LLaMA-7B requests of 2,048 tokens\n");
    printf("   source: \"about 32 GB\"\n");
    printf("   exact:  32 x 1,073,741,824 = %s\n", sized(a, sizeof a, 32 * r7));
    printf("   exactly 32 GiB, which is 34.4 GB in decimal units\n\n");
}

static void check_budget(uint64_t r13)
{
    char a[96], b[96];
    KvBudget dec = {80 * KVMATH_GB, 26 * KVMATH_GB, 4 * KVMATH_GB, 2 * KVMATH_GB};
    KvBudget bin = {80 * KVMATH_GIB, 26 * KVMATH_GIB, 4 * KVMATH_GIB, 2 * KVMATH_GIB};
    uint64_t left_dec, left_bin;
    kvmath_kv_bytes_left(&dec, &left_dec, NULL);
    kvmath_kv_bytes_left(&bin, &left_bin, NULL);
    uint64_t fit_dec = kvmath_requests_that_fit(left_dec, r13), fit_bin = kvmath_requests_that_fit(left_bin, r13);
    printf("4. LLaMA-13B on an 80 GB GPU: 26 GB weights + 4 GB activations + 2 GB reserve leave 48 GB\n");
    printf("   source: \"about 30\" full-length (2,048-token) requests\n");
    printf("   GB = 10^9 B:  %s / 1,677,721,600 B = %.2f -> %" PRIu64 " requests\n", sized(a, sizeof a, left_dec),
           (double)left_dec / (double)r13, fit_dec);
    printf("   GiB = 2^30 B: %s / 1,677,721,600 B = %.2f -> %" PRIu64 " requests\n", sized(b, sizeof b, left_bin),
           (double)left_bin / (double)r13, fit_bin);
    /* A third reading: the card's "80 GB" is really 80 GiB (81,920 MiB), while
     * 26 GB of fp16 weights is 13 x 10^9 parameters x 2 B, a decimal figure. */
    KvBudget mixed = {80 * KVMATH_GIB, 26 * KVMATH_GB, 4 * KVMATH_GIB, 2 * KVMATH_GIB};
    uint64_t left_mixed;
    kvmath_kv_bytes_left(&mixed, &left_mixed, NULL);
    printf("   mixed:        80 GiB card, 26 x 10^9 B of weights, 4 + 2 GiB: %s -> %" PRIu64 " requests\n",
           sized(a, sizeof a, left_mixed), kvmath_requests_that_fit(left_mixed, r13));
    printf("   \"about 30\" holds only when every GB is read as GiB (48 / 1.5625 = 30.72); with decimal GB, %" PRIu64
           " fit\n\n",
           fit_dec);
}

static void check_oom_claim(uint64_t r13)
{
    char a[96], b[96];
    uint64_t fifteen = 15 * r13;
    uint64_t others_dec = 32 * KVMATH_GB, others_bin = 32 * KVMATH_GIB; /* weights + activations + reserve */
    uint64_t total_dec = fifteen + others_dec, total_bin = fifteen + others_bin;
    printf("5. \"Beyond 15 concurrent requests the service runs out of memory: 15 x 1.56 GB = 23.4 GB, which with\n"
           "   the 26 GB of weights and the activations is close to the 80 GB limit\"\n");
    printf("   15 x 1,677,721,600 B = %s (the source's 23.4 is in GiB)\n", sized(a, sizeof a, fifteen));
    printf("   with weights, activations and reserve (26 + 4 + 2):\n");
    printf("     GB:  %s of 80 GB = %.1f%%, leaving %s: room for %" PRIu64 " more full-length requests\n",
           sized(a, sizeof a, total_dec), 100.0 * (double)total_dec / (double)(80 * KVMATH_GB),
           sized(b, sizeof b, 80 * KVMATH_GB - total_dec),
           kvmath_requests_that_fit(80 * KVMATH_GB - total_dec, r13));
    printf("     GiB: %s of 80 GiB = %.1f%%, leaving %s: room for %" PRIu64 " more\n", sized(a, sizeof a, total_bin),
           100.0 * (double)total_bin / (double)(80 * KVMATH_GIB), sized(b, sizeof b, 80 * KVMATH_GIB - total_bin),
           kvmath_requests_that_fit(80 * KVMATH_GIB - total_bin, r13));
    printf("   loose: 15 full-length reservations use about 57 GB of 80, not \"close to 80 GB\". The formula alone\n"
           "   does not explain an OOM at 15 requests; something it leaves out (fragmentation of the free\n"
           "   memory, larger activations, another process) must account for the other ~23 GB\n\n");
}

static void check_waste_claim(void)
{
    KvShape l13;
    kvmath_preset("llama-13b", &l13);
    uint64_t per_token = kvmath_bytes_per_token(&l13, KV_DTYPE_FP16);
    char a[96];
    printf("6. \"Real requests average only ~500 tokens, so about 60%% of the reserved memory is wasted\"\n");
    printf("   500 of a 2,048-token reservation used: (2,048 - 500) / 2,048 = 1,548 / 2,048 = %.4f%% unused\n",
           100.0 * kvmath_unused_fraction(500, 2048));
    printf("   500 of the 1,024-token generation budget alone: 524 / 1,024 = %.4f%% unused\n",
           100.0 * kvmath_unused_fraction(500, 1024));
    printf("   60%% unused would mean %.1f of 2,048 tokens used (e.g. a ~319-token prompt plus 500 generated)\n",
           0.4 * 2048.0);
    printf("   per LLaMA-13B request, 1,548 unused positions are %s reserved for nothing\n",
           sized(a, sizeof a, 1548 * per_token));
    printf("   loose: neither reading gives 60%%; for 500 tokens of 2,048 the exact figure is 75.59%%\n");
}

static void check_smaller_entries(void)
{
    KvShape l13;
    kvmath_preset("llama-13b", &l13);
    KvBudget dec = {80 * KVMATH_GB, 26 * KVMATH_GB, 4 * KVMATH_GB, 2 * KVMATH_GB};
    KvBudget bin = {80 * KVMATH_GIB, 26 * KVMATH_GIB, 4 * KVMATH_GIB, 2 * KVMATH_GIB};
    uint64_t left_dec, left_bin;
    kvmath_kv_bytes_left(&dec, &left_dec, NULL);
    kvmath_kv_bytes_left(&bin, &left_bin, NULL);
    static const KvDtype types[] = {KV_DTYPE_FP16, KV_DTYPE_INT8, KV_DTYPE_FP8_E4M3};
    printf("\n7. The 13B case of item 4 with smaller K/V entries (not in the source; kvlab's --kv-dtype)\n");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        uint64_t r = kvmath_bytes_per_request(&l13, types[i], 2048);
        char a[32];
        printf("   %-8s %s B per request: %" PRIu64 " full-length requests fit in 48 GB, %" PRIu64 " in 48 GiB\n",
               kvmath_dtype_name(types[i]), grouped(a, sizeof a, r), kvmath_requests_that_fit(left_dec, r),
               kvmath_requests_that_fit(left_bin, r));
    }
    printf("   int8 counts its scales: 40 x 40 x 2 x 2,048 heads of 128 codes, each with a 4-byte scale (3%%)\n");
}

static void check_source(void)
{
    KvShape l13;
    kvmath_preset("llama-13b", &l13);
    uint64_t r13 = kvmath_bytes_per_request(&l13, KV_DTYPE_FP16, 2048);
    printf("The source material's figures (../shared/reference/kv-cache-and-decoding-basics.zh.txt), re-done exactly.\n"
           "GB = 10^9 bytes, GiB = 2^30 bytes.\n\n");
    check_single_requests();
    check_budget(r13);
    check_oom_claim(r13);
    check_waste_claim();
    check_smaller_entries();
}

int main(int argc, char **argv)
{
    Options o;
    Err err = {{0}};
    int parsed = parse_options(argc, argv, &o, &err);
    if (parsed == 1)
        return 0;
    if (parsed < 0) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    if (o.check_source) {
        check_source();
        return 0;
    }
    run_calculator(&o);
    return 0;
}
