/* kvsim --scenario paper-fig19: what a preemption costs when the request
 * is recomputed (FLOPs) and when its blocks are swapped out and back in
 * (bytes over PCIe, one copy per block and tensor), at 7B and 13B scale,
 * and the block size at which the two cross. See kvsim_swap.h. */
#define _GNU_SOURCE /* getopt_long */
#include "kvsim_swap.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "json.h"
#include "outfile.h"
#include "ext/swap.h"
#include "paged.h"

#define SCENARIO "paper-fig19"

/* ------------------------------------------------------------ presets */

static const KvsimSwapGpu GPUS[] = {
    {"a100-40gb", "A100 40 GB SXM4", 312e12, 1555e9, 32e9,
     "NVIDIA A100 datasheet: 312 TFLOP/s FP16 tensor (dense), HBM2 1,555 GB/s, PCIe 4.0 x16 64 GB/s both ways"},
    {"a100-80gb", "A100 80 GB SXM4", 312e12, 2039e9, 32e9,
     "NVIDIA A100 datasheet: 312 TFLOP/s FP16 tensor (dense), HBM2e 2,039 GB/s, PCIe 4.0 x16 64 GB/s both ways"},
    {"h100-80gb", "H100 80 GB SXM5", 989e12, 3350e9, 64e9,
     "NVIDIA H100 datasheet: 989 TFLOP/s FP16 tensor (dense; 1,979 with sparsity), HBM3 3,350 GB/s, PCIe 5.0 x16 "
     "128 GB/s both ways"},
};
#define N_GPUS (sizeof GPUS / sizeof GPUS[0])

int kvsim_swap_gpu(const char *name, KvsimSwapGpu *gpu)
{
    for (size_t i = 0; i < N_GPUS; i++)
        if (strcasecmp(name, GPUS[i].name) == 0) {
            *gpu = GPUS[i];
            return 0;
        }
    return -1;
}

int kvsim_swap_model(const char *name, ModelConfig *cfg)
{
    if (strcasecmp(name, "llama-7b") == 0)
        *cfg = (ModelConfig){4096, 11008, 32, 32, 32, 32000, 2048};
    else if (strcasecmp(name, "llama-13b") == 0)
        *cfg = (ModelConfig){5120, 13824, 40, 40, 40, 32000, 2048};
    else
        return -1;
    return 0;
}

double kvsim_swap_params(const ModelConfig *c)
{
    double dim = c->dim, kv_dim = model_kv_dim(c), hidden = c->hidden_dim;
    double per_layer = 2.0 * dim * dim + 2.0 * dim * kv_dim + 3.0 * dim * hidden;
    return c->n_layers * per_layer + 2.0 * (double)c->vocab_size * dim;
}

/* ------------------------------------------------------------ the model */

void kvsim_swap_cost(const ModelConfig *c, const KvsimSwapGpu *gpu, const KvsimSwapAssumptions *a, long n_tokens,
                     int block_size, KvsimSwapCost *out)
{
    double per_token = 2.0 * c->n_layers * model_kv_dim(c) * a->elem_bytes;
    /* A copy reads one side and writes the other: the slower of the link
     * and HBM sets its rate (HBM is 50 times faster: the link). */
    double link = fmin(gpu->pcie * a->pcie_share, gpu->hbm);
    out->blocks = (n_tokens + block_size - 1) / block_size;
    out->bytes = (double)out->blocks * block_size * per_token; /* whole blocks move, the last one's tail too */
    out->copies_vllm = out->blocks * 2L * c->n_layers;
    out->swap_vllm = (double)out->copies_vllm * a->copy_latency + out->bytes / link;
    out->swap_one_copy = (double)out->blocks * a->copy_latency + out->bytes / link;
    out->flops = paged_recompute_flops(c, n_tokens);
    out->recompute = out->flops / (gpu->flops * a->mfu);
    double weights = kvsim_swap_params(c) * a->elem_bytes / gpu->hbm;
    out->recompute_alone = fmax(out->recompute, weights);
}

int kvsim_swap_crossover(const ModelConfig *c, const KvsimSwapGpu *gpu, const KvsimSwapAssumptions *a, long n_tokens,
                         int one_copy, int alone)
{
    for (int bs = 1; bs <= BLOCK_SIZE_MAX; bs *= 2) {
        KvsimSwapCost k;
        kvsim_swap_cost(c, gpu, a, n_tokens, bs, &k);
        double swap = 2.0 * (one_copy ? k.swap_one_copy : k.swap_vllm);
        if (swap < (alone ? k.recompute_alone : k.recompute))
            return bs;
    }
    return 0;
}

/* ------------------------------------------------------------ options */

typedef struct {
    KvsimSwapGpu gpu;
    KvsimSwapAssumptions a;
    long length;
    const char *json_path;
} SwapOptions;

enum { O_SCENARIO = 1000, O_GPU, O_LENGTH, O_COPY_LATENCY, O_PCIE_SHARE, O_MFU, O_DTYPE, O_JSON, O_HELP };

static const struct option LONGOPTS[] = {
    {"scenario", required_argument, NULL, O_SCENARIO}, {"gpu", required_argument, NULL, O_GPU},
    {"length", required_argument, NULL, O_LENGTH},     {"copy-latency", required_argument, NULL, O_COPY_LATENCY},
    {"pcie-share", required_argument, NULL, O_PCIE_SHARE}, {"mfu", required_argument, NULL, O_MFU},
    {"dtype", required_argument, NULL, O_DTYPE},       {"json", required_argument, NULL, O_JSON},
    {"help", no_argument, NULL, O_HELP},               {NULL, 0, NULL, 0}};

int kvsim_swap_requested(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--scenario=" SCENARIO) == 0)
            return 1;
        if (strcmp(argv[i], "--scenario") == 0 && i + 1 < argc && strcmp(argv[i + 1], SCENARIO) == 0)
            return 1;
    }
    return 0;
}

void kvsim_swap_describe(FILE *f)
{
    fprintf(f, "%s\n  recomputing a preempted request against swapping its blocks out and back in (the PagedAttention "
               "paper's Fig. 19), llama-7b and llama-13b, by block size and sequence length\n  = its own options: "
               "kvsim --scenario %s --help\n", SCENARIO, SCENARIO);
}

static void usage(void)
{
    printf("Usage: kvsim --scenario " SCENARIO " [options]\n"
           "What a preemption costs: recomputing the request (FLOPs) against swapping its blocks to the host and\n"
           "back (bytes over PCIe, one copy per block and per K and V tensor of each layer), for llama-7b and\n"
           "llama-13b, by block size; and the block size from which swapping is cheaper, by sequence length.\n\n"
           "  --gpu NAME           a100-40gb (the paper's), a100-80gb, h100-80gb (default a100-40gb)\n"
           "  --length N           tokens the preempted request holds, for the table by block size (default 1024)\n"
           "  --copy-latency US    fixed cost of one host-device copy in microseconds (default 10; an assumption)\n"
           "  --pcie-share PCT     share of the link's bandwidth a copy achieves (default 80; an assumption)\n"
           "  --mfu PCT            share of the peak FLOP/s a recomputation achieves (default 50; an assumption)\n"
           "  --dtype fp16|fp32    K/V and weight element type (default fp16)\n"
           "  --json FILE          the assumptions and every number as JSON\n"
           "  --help               show this help\n");
}

static int parse_number(const char *name, const char *text, double lo, double hi, double *out, Err *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= lo && v <= hi))
        return err_set(err, "--%s: '%s' is not a number from %g to %g", name, text, lo, hi);
    *out = v;
    return 0;
}

static int apply(SwapOptions *o, int id, const char *name, const char *arg, Err *err)
{
    double v = 0.0;
    switch (id) {
    case O_SCENARIO:
        return strcmp(arg, SCENARIO) == 0 ? 0 : err_set(err, "--scenario %s cannot be combined with " SCENARIO, arg);
    case O_GPU:
        return kvsim_swap_gpu(arg, &o->gpu) ? err_set(err, "--gpu: '%s' is not one of a100-40gb, a100-80gb, "
                                                      "h100-80gb", arg) : 0;
    case O_LENGTH:
        if (parse_number(name, arg, 1, 1 << 20, &v, err) || v != floor(v))
            return err_set(err, "--length: '%s' is not a whole number of tokens from 1 to %d", arg, 1 << 20);
        o->length = (long)v;
        return 0;
    case O_COPY_LATENCY:
        if (parse_number(name, arg, 0, 1e6, &v, err))
            return -1;
        o->a.copy_latency = v * 1e-6;
        return 0;
    case O_PCIE_SHARE:
    case O_MFU:
        if (parse_number(name, arg, 1, 100, &v, err))
            return -1;
        *(id == O_MFU ? &o->a.mfu : &o->a.pcie_share) = v / 100.0;
        return 0;
    case O_DTYPE:
        if (strcmp(arg, "fp16") && strcmp(arg, "f16") && strcmp(arg, "fp32") && strcmp(arg, "f32"))
            return err_set(err, "--dtype: '%s' is not one of fp16, fp32", arg);
        o->a.elem_bytes = strstr(arg, "16") ? 2 : 4;
        return 0;
    case O_JSON: o->json_path = arg; return 0;
    }
    return err_set(err, "--%s: not handled", name);
}

/* Returns 0, 1 (help printed) or -1. */
static int parse(SwapOptions *o, int argc, char **argv, Err *err)
{
    kvsim_swap_gpu("a100-40gb", &o->gpu);
    o->a = (KvsimSwapAssumptions){.copy_latency = 10e-6, .pcie_share = 0.8, .mfu = 0.5, .elem_bytes = 2};
    o->length = 1024;
    o->json_path = NULL;
    opterr = 0;
    optind = 1;
    for (;;) {
        int index = -1, c = getopt_long(argc, argv, ":h", LONGOPTS, &index);
        if (c == -1)
            break;
        if (c == 'h' || c == O_HELP) {
            usage();
            return 1;
        }
        if (c == ':')
            return err_set(err, "option '%s' needs a value (see --scenario " SCENARIO " --help)", argv[optind - 1]);
        if (c == '?')
            return err_set(err, "'%s' is not an option of --scenario " SCENARIO " (see --scenario " SCENARIO " --help)",
                           argv[optind - 1]);
        if (apply(o, c, LONGOPTS[index].name, optarg, err))
            return -1;
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --)", argv[optind]);
    return 0;
}

/* ------------------------------------------------------------ output */

static const char *const MODELS[] = {"llama-7b", "llama-13b"};
static const long LENGTHS[] = {32, 64, 128, 256, 512, 1024, 2048};
#define N_LENGTHS (sizeof LENGTHS / sizeof LENGTHS[0])

static void print_assumptions(const SwapOptions *o)
{
    const KvsimSwapGpu *g = &o->gpu;
    printf("scenario " SCENARIO ": recomputing a preempted request against swapping its blocks out and back in, as "
           "the\nPagedAttention paper's Fig. 19 (Kwon et al., SOSP 2023, section 7.3), modelled at 7B and 13B "
           "scale\n\n");
    printf("assumptions (--gpu %s, %s)\n", g->name, g->label);
    printf("  datasheet  %s\n", g->source);
    printf("  compute    a recomputation (a prefill) achieves %.0f%% of %.0f TFLOP/s (--mfu: an assumption)\n",
           100 * o->a.mfu, g->flops / 1e12);
    printf("  link       a copy achieves %.0f%% of %.0f GB/s each way = %.1f GB/s (--pcie-share: an assumption); HBM "
           "(%.0f GB/s) is never the limit\n", 100 * o->a.pcie_share, g->pcie / 1e9, g->pcie * o->a.pcie_share / 1e9,
           g->hbm / 1e9);
    printf("  per copy   %.1f us fixed cost of one cudaMemcpyAsync (--copy-latency: an assumption, not measured "
           "here: no GPU)\n", o->a.copy_latency * 1e6);
    printf("  copies     vLLM V0 keeps K and V in a tensor per layer and copies block by block, one cudaMemcpyAsync "
           "per block\n             and tensor (csrc/cache_kernels.cu, swap_blocks): 2 x layers copies per block; "
           "kvlab's blocks are one piece: 1\n");
    printf("  recompute  2 FLOPs per weight and position plus attention (paged_recompute_flops()); in a step: "
           "FLOPs only, since\n             the step reads the weights anyway (vLLM recomputes inside the prefill "
           "batch); alone: at least all\n             weights read once from HBM\n");
    printf("  elements   %d B (K/V and weights)\n\n", o->a.elem_bytes);
}

static void print_by_block_size(const SwapOptions *o, const char *name, const ModelConfig *c)
{
    KvsimSwapCost k;
    kvsim_swap_cost(c, &o->gpu, &o->a, o->length, 1, &k);
    char a[32];
    printf("%s (%d layers, dim %d, %.2f B parameters = %.1f GB): a preempted request of %ld tokens, %s of K/V, "
           "%.2f TFLOP to recompute\n", name, c->n_layers, c->dim, kvsim_swap_params(c) / 1e9,
           kvsim_swap_params(c) * o->a.elem_bytes / 1e9, o->length, cli_format_bytes(a, sizeof a, k.bytes),
           k.flops / 1e12);
    printf("  %5s %8s | %12s %12s | %12s %12s | %10s %10s | %s\n", "block", "copies", "swap out+in", "swap out+in",
           "recompute", "recompute", "vLLM swap", "kvlab swap", "cheaper (in a step)");
    printf("  %5s %8s | %12s %12s | %12s %12s | %10s %10s |\n", "size", "each way", "vLLM (ms)", "1/block (ms)",
           "in a step", "alone (ms)", "/ recomp.", "/ recomp.");
    for (int bs = 1; bs <= BLOCK_SIZE_MAX; bs *= 2) {
        kvsim_swap_cost(c, &o->gpu, &o->a, o->length, bs, &k);
        double vllm = 2 * k.swap_vllm, one = 2 * k.swap_one_copy;
        printf("  %5d %8ld | %12.2f %12.2f | %12.2f %12.2f | %10.2f %10.2f | %s\n", bs, k.copies_vllm, 1e3 * vllm,
               1e3 * one, 1e3 * k.recompute, 1e3 * k.recompute_alone, vllm / k.recompute, one / k.recompute,
               vllm < k.recompute ? "swap" : "recompute");
    }
    printf("\n");
}

static void print_crossovers(const SwapOptions *o)
{
    printf("where they cross: the smallest block size from which swapping out and in costs less than recomputing\n");
    printf("(in a step, or alone; kvlab: one copy per block, in a step; -: recomputing is cheaper at every block "
           "size up to %d)\n", BLOCK_SIZE_MAX);
    printf("  %7s |", "");
    for (size_t m = 0; m < 2; m++)
        printf(" %-35s |", MODELS[m]);
    printf("\n  %7s |", "tokens");
    for (size_t m = 0; m < 2; m++)
        printf(" %15s %11s %7s |", "vLLM, in a step", "vLLM, alone", "kvlab");
    printf("\n");
    for (size_t l = 0; l < N_LENGTHS; l++) {
        printf("  %7ld |", LENGTHS[l]);
        for (size_t m = 0; m < 2; m++) {
            ModelConfig c;
            kvsim_swap_model(MODELS[m], &c);
            int cross[3] = {kvsim_swap_crossover(&c, &o->gpu, &o->a, LENGTHS[l], 0, 0),
                            kvsim_swap_crossover(&c, &o->gpu, &o->a, LENGTHS[l], 0, 1),
                            kvsim_swap_crossover(&c, &o->gpu, &o->a, LENGTHS[l], 1, 0)};
            char t[3][16];
            for (int k = 0; k < 3; k++)
                snprintf(t[k], sizeof t[k], cross[k] ? "%d" : "-", cross[k]);
            printf(" %15s %11s %7s |", t[0], t[1], t[2]);
        }
        printf("\n");
    }
}

/* How the crossover moves with the one number that most decides it. */
static void print_sensitivity(const SwapOptions *o)
{
    static const double latencies[] = {2e-6, 5e-6, 10e-6, 20e-6};
    printf("\nthe fixed cost per copy decides it: crossover (vLLM's layout, in a step) at %ld tokens\n", o->length);
    for (size_t m = 0; m < 2; m++) {
        ModelConfig c;
        kvsim_swap_model(MODELS[m], &c);
        printf("  %-9s", MODELS[m]);
        for (size_t i = 0; i < sizeof latencies / sizeof latencies[0]; i++) {
            KvsimSwapAssumptions a = o->a;
            a.copy_latency = latencies[i];
            int cross = kvsim_swap_crossover(&c, &o->gpu, &a, o->length, 0, 0);
            char t[16];
            snprintf(t, sizeof t, cross ? "%d" : "-", cross);
            printf("   %4.0f us: %4s", latencies[i] * 1e6, t);
        }
        printf("\n");
    }
}

static void json_model(JsonWriter *j, const SwapOptions *o, const char *name, const ModelConfig *c)
{
    json_begin_object(j, NULL);
    json_string(j, "model", name);
    json_double(j, "params", kvsim_swap_params(c));
    json_begin_array(j, "by_block_size");
    for (int bs = 1; bs <= BLOCK_SIZE_MAX; bs *= 2) {
        KvsimSwapCost k;
        kvsim_swap_cost(c, &o->gpu, &o->a, o->length, bs, &k);
        json_begin_object(j, NULL);
        json_int(j, "block_size", bs);
        json_double(j, "bytes_each_way", k.bytes);
        json_int(j, "copies_each_way_vllm", k.copies_vllm);
        json_double(j, "swap_out_in_s_vllm", 2 * k.swap_vllm);
        json_double(j, "swap_out_in_s_one_copy", 2 * k.swap_one_copy);
        json_double(j, "recompute_flops", k.flops);
        json_double(j, "recompute_s", k.recompute);
        json_double(j, "recompute_alone_s", k.recompute_alone);
        json_end_object(j);
    }
    json_end_array(j);
    json_begin_array(j, "crossover");
    for (size_t l = 0; l < N_LENGTHS; l++) {
        json_begin_object(j, NULL);
        json_int(j, "tokens", LENGTHS[l]);
        json_int(j, "vllm", kvsim_swap_crossover(c, &o->gpu, &o->a, LENGTHS[l], 0, 0));
        json_int(j, "vllm_alone", kvsim_swap_crossover(c, &o->gpu, &o->a, LENGTHS[l], 0, 1));
        json_int(j, "one_copy", kvsim_swap_crossover(c, &o->gpu, &o->a, LENGTHS[l], 1, 0));
        json_end_object(j);
    }
    json_end_array(j);
    json_end_object(j);
}

static int write_json(const SwapOptions *o, Err *err)
{
    OutFile out; /* a temporary file, renamed over the path only when complete */
    if (outfile_open(&out, "--json", o->json_path, err))
        return -1;
    JsonWriter j;
    json_init(&j, out.f, 1);
    json_begin_object(&j, NULL);
    json_string(&j, "scenario", SCENARIO);
    json_string(&j, "gpu", o->gpu.name);
    json_double(&j, "gpu_flops", o->gpu.flops);
    json_double(&j, "hbm_bytes_per_s", o->gpu.hbm);
    json_double(&j, "pcie_bytes_per_s_each_way", o->gpu.pcie);
    json_double(&j, "pcie_share", o->a.pcie_share);
    json_double(&j, "copy_latency_s", o->a.copy_latency);
    json_double(&j, "mfu", o->a.mfu);
    json_int(&j, "elem_bytes", o->a.elem_bytes);
    json_int(&j, "length", o->length);
    json_begin_array(&j, "models");
    for (size_t m = 0; m < 2; m++) {
        ModelConfig c;
        kvsim_swap_model(MODELS[m], &c);
        json_model(&j, o, MODELS[m], &c);
    }
    json_end_array(&j);
    json_end_object(&j);
    fputc('\n', out.f);
    return outfile_commit(&out, err);
}

int kvsim_swap_main(int argc, char **argv)
{
    SwapOptions o;
    Err err = {{0}};
    int rc = parse(&o, argc, argv, &err);
    if (rc == 1)
        return 0;
    /* The JSON is written first: nothing is on stdout when it fails. */
    if (rc == 0 && o.json_path)
        rc = write_json(&o, &err);
    if (rc != 0) {
        fprintf(stderr, "kvsim: error: %s\n", err.msg);
        return 1;
    }
    print_assumptions(&o);
    for (size_t m = 0; m < 2; m++) {
        ModelConfig c;
        kvsim_swap_model(MODELS[m], &c);
        print_by_block_size(&o, MODELS[m], &c);
    }
    print_crossovers(&o);
    print_sensitivity(&o);
    return 0;
}
