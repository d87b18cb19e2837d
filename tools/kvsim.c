/* kvsim: the capacity simulator. The allocators and schedulers of chapters 3
 * and 4, driven by their own step functions (batching_step(), paged_step()) on
 * runs without a model (no forward pass, no K/V bytes), at the scale of 7B-70B
 * models on real GPUs.
 *
 *   build/kvsim --scenario source-13b-a100-80gb
 *   build/kvsim --scenario paper-13b-a100-40gb
 *   build/kvsim --preset llama-7b --gpu h100-80gb --workload alpaca --rate 0.5
 *   build/kvsim --scenario paper-fig19     (recompute against swap: tools/lib/kvsim_swap.c)
 *   build/kvsim --scenario source-13b-a100-80gb --kv-dtype fp8-e4m3   (smaller K/V entries)
 *
 * For every strategy (chapter 3's four reservation policies with static
 * batching, three of them with continuous batching as the PagedAttention
 * paper's Orca baselines, chapter 4's paged allocator) it prints the
 * maximum and average number of requests
 * running at once, KV utilization, where the reserved KV memory went (the
 * PagedAttention paper's four-way split), preemptions, and requests served
 * per simulated step. See tools/lib/kvsim.h for the workload model and
 * book/side-by-side.md for the scenarios. */
#define _GNU_SOURCE /* getopt_long */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching.h"
#include "cost_model.h"
#include "cli.h"
#include "json.h"
#include "kvmath.h"
#include "kvsim.h"
#include "kvsim_prefix.h"
#include "kvsim_swap.h"
#include "mem.h"
#include "outfile.h"
#include "paged.h"
#include "parse.h"

#define PROGRAM "kvsim"

/* ------------------------------------------------------------ scenarios */

/* ------------------------------------------------------------ strategies */

/* Rows are printed in ORDER; the default set is every strategy but
 * orca-out-pow2, which the paper-fig2 scenario asks for. */
enum {
    S_MAX, S_REQUEST, S_POW2, S_GROW, S_ORCA_MAX, S_CONT_POW2, S_ORCA_ORACLE, S_PAGED, S_ORCA_OUT_POW2, N_STRATEGIES
};
static const char *const STRATEGY_NAMES[N_STRATEGIES] = {"max",         "request",       "pow2",     "grow",
                                                         "orca-max",    "cont-pow2",     "orca-oracle", "paged",
                                                         "orca-out-pow2"};
static const int ORDER[N_STRATEGIES] = {S_MAX,       S_REQUEST,       S_POW2,        S_GROW, S_ORCA_MAX,
                                        S_CONT_POW2, S_ORCA_OUT_POW2, S_ORCA_ORACLE, S_PAGED};
#define STRATEGY_LIST "max, request, pow2, grow, orca-max, cont-pow2, orca-out-pow2, orca-oracle, paged"

/* A number the PagedAttention paper (Kwon et al., SOSP 2023) reports for a
 * strategy: the share of KV memory holding token states (Fig. 2). */
typedef struct {
    int strategy;      /* S_... */
    const char *label; /* the paper's name for it */
    double token_states;
} PaperFigure;

#define N_PAPER_FIGURES 4

/* The paper's Fig. 2 (shares of the whole KV pool, percent) and Fig. 13
 * (average batched requests, ShareGPT at 2 requests/s), as printed. */
typedef struct {
    int strategy;
    const char *key;   /* the JSON key */
    const char *label; /* the paper's name */
    double pool_pct[4]; /* token states, reservation, internal, external & others */
    double batched;
} PaperFig2;

static const PaperFig2 PAPER_FIG2[N_PAPER_FIGURES] = {
    {S_ORCA_MAX, "orca-max", "Orca (Max)", {20.4, 13.3, 57.3, 8.9}, 7.00},
    {S_ORCA_OUT_POW2, "orca-pow2", "Orca (Pow2)", {26.8, 17.9, 13.6, 41.6}, 9.81},
    {S_ORCA_ORACLE, "orca-oracle", "Orca (Oracle)", {38.2, 25.2, 0.0, 36.6}, 13.62},
    {S_PAGED, "vllm", "vLLM", {96.3, -1, -1, -1}, 30.42}, /* -1: the paper prints only the token states */
};

/* A scenario is a list of options, printed as such: nothing is hidden. */
typedef struct {
    const char *name;
    const char *options;
    const char *what;
    PaperFigure paper[N_PAPER_FIGURES]; /* what the paper measured in this setting (label NULL: nothing) */
    int fig2;                           /* 1: the paper's Fig. 2 method and figures (shares of the pool) */
    const char *paper_note;             /* a line after the paper's figures, or NULL */
} Scenario;

static const Scenario SCENARIOS[] = {
    {"source-13b-a100-80gb",
     "--preset llama-13b --dtype fp16 --gpu a100-80gb --weights 26GB --activations 4GB --reserve 2GB "
     "--max-input 1024 --max-output 1024 --max-new 1024 --input lognormal:161.31:1 --output uniform:1:999 "
     "--requests 1000 --rate 0",
     "the source material's case: a 13B model on an A100 80 GB, 26 GB of weights, 4 GB of activations, 2 GB "
     "reserved; requests of at most 1,024 + 1,024 tokens that produce about 500 tokens on average",
     {{0}}, 0, NULL},
    {"paper-13b-a100-40gb",
     "--preset opt-13b --dtype fp16 --gpu a100-40gb --weights 26GB --kv-budget 12GiB --workload sharegpt "
     "--max-input 1024 --max-output 2047 --max-new oracle --requests 1000 --rate 0",
     "like the PagedAttention paper's Fig. 2: OPT-13B on an A100 40 GB with 12 GiB for K/V (Table 1: 15.7K "
     "token slots), ShareGPT-like lengths, and reservations that know each output length (Orca-Oracle)",
     {{S_ORCA_MAX, "Orca-Max", 0.204}, {S_ORCA_ORACLE, "Orca-Oracle", 0.382}, {S_PAGED, "vLLM", 0.963}, {0}}, 0,
     "(the paper's Orca-Pow2 rounds the output up, not the total, and its shares are of the whole pool: "
     "--scenario paper-fig2)"},
    {"paper-fig2",
     "--preset opt-13b --dtype fp16 --gpu a100-40gb --weights 26GB --kv-budget 12GiB --input lognormal:161.31:1 "
     "--output gamma:337.99:0.91 --filter 4:1024:2048 --max-input 1024 --max-output 2044 --requests 7200 "
     "--rate-per-s 2 --step-ms 74 --arena buddy --strategies orca-max,orca-out-pow2,orca-oracle,paged",
     "the PagedAttention paper's Fig. 2 and Fig. 13 (ShareGPT) by its method: OPT-13B, 12 GiB of K/V, a one-hour "
     "trace of Poisson arrivals at 2 requests/s, the paper's mean lengths after vLLM's benchmark filter (prompts "
     "lognormal, sigma 1 assumed; outputs gamma, the exponential-like family of production traces, their CV 0.91 "
     "estimated from the paper's Orca-Max bar, which depends on the lengths alone: "
     "scripts/kvsim-fig2-calibrate.sh), Orca's regions from a buddy allocator, shares of the whole pool; 74 ms per "
     "step is assumed (the paper's Fig. 13 Alpaca run, 132.44 requests batched at 30/s of 59.45 steps each, by "
     "Little's law)",
     {{0}}, 1, NULL},
};

static const Scenario *find_scenario(const char *name)
{
    for (size_t i = 0; i < sizeof SCENARIOS / sizeof SCENARIOS[0]; i++)
        if (strcmp(name, SCENARIOS[i].name) == 0)
            return &SCENARIOS[i];
    return NULL;
}

/* Scenarios with code of their own, recognised before these options are
 * read (tools/lib/kvsim_prefix.c, tools/lib/kvsim_swap.c). */
static const char *const OWN_CODE_SCENARIOS = "prefix-multiturn-7b, prefix-multiturn-13b, paper-fig19";

/* Every scenario's name, for the error that refuses another. */
static const char *scenario_names(char *out, size_t n)
{
    size_t used = 0;
    for (size_t i = 0; i < sizeof SCENARIOS / sizeof SCENARIOS[0] && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s, ", SCENARIOS[i].name);
    if (used < n)
        snprintf(out + used, n - used, "%s", OWN_CODE_SCENARIOS);
    return out;
}

static void list_scenarios(FILE *f)
{
    for (size_t i = 0; i < sizeof SCENARIOS / sizeof SCENARIOS[0]; i++)
        fprintf(f, "%s\n  %s\n  = %s\n", SCENARIOS[i].name, SCENARIOS[i].what, SCENARIOS[i].options);
    kvsim_swap_describe(f);
}

/* ------------------------------------------------------------ options */

typedef struct {
    const Scenario *scenario;
    KvShape shape;
    KvDtype dtype;
    int max_len;              /* the model's context length used (0: the preset's) */
    KvsimGpu gpu;
    KvBudget budget;          /* gpu, weights, activations, reserve */
    uint64_t kv_budget;       /* --kv-budget, or what the GPU leaves */
    int kv_budget_given;      /* 1: --kv-budget, the GPU arithmetic only checks that it fits */
    int block_size;
    int watermark;
    int max_batch;            /* 0: no limit */
    const char *arena;        /* --arena for chapter 3's strategies */
    int use[N_STRATEGIES];
    const char *workload_name; /* the --workload preset, or NULL */
    KvsimWorkload w;
    int max_output_given, max_new_given;
    double rate_per_s, step_ms; /* --rate-per-s, --step-ms: give --rate as requests/s x s/step */
    KvsimFilterFit fit;       /* with --filter: the lengths' parameters */
    const char *json_path;
    int verbose;
    int latency;              /* --latency (or --machine, --slo-*): every step timed by the cost model */
    const char *machine;      /* --machine; NULL: the --gpu's */
    KvsimClock clock;         /* with --latency: the cost model and the objectives */
} Options;

enum {
    OPT_SCENARIO = 1000, OPT_PRESET, OPT_DTYPE, OPT_MAX_LEN, OPT_GPU, OPT_GPU_MEM, OPT_WEIGHTS, OPT_ACTIVATIONS,
    OPT_RESERVE, OPT_KV_BUDGET, OPT_BLOCK_SIZE, OPT_WATERMARK, OPT_MAX_BATCH, OPT_STRATEGIES, OPT_WORKLOAD,
    OPT_INPUT, OPT_OUTPUT, OPT_MAX_INPUT, OPT_MAX_OUTPUT, OPT_MAX_NEW, OPT_REQUESTS, OPT_RATE, OPT_SEED, OPT_JSON,
    OPT_VERBOSE, OPT_HELP, OPT_ARENA, OPT_FILTER, OPT_RATE_PER_S, OPT_STEP_MS, OPT_LATENCY, OPT_MACHINE,
    OPT_SLO_TTFT, OPT_SLO_TPOT
};

static const struct option LONGOPTS[] = {
    {"scenario", required_argument, NULL, OPT_SCENARIO}, {"preset", required_argument, NULL, OPT_PRESET},
    {"dtype", required_argument, NULL, OPT_DTYPE}, {"kv-dtype", required_argument, NULL, OPT_DTYPE},
    {"max-len", required_argument, NULL, OPT_MAX_LEN},
    {"gpu", required_argument, NULL, OPT_GPU}, {"gpu-mem", required_argument, NULL, OPT_GPU_MEM},
    {"weights", required_argument, NULL, OPT_WEIGHTS}, {"activations", required_argument, NULL, OPT_ACTIVATIONS},
    {"reserve", required_argument, NULL, OPT_RESERVE}, {"kv-budget", required_argument, NULL, OPT_KV_BUDGET},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE}, {"watermark", required_argument, NULL, OPT_WATERMARK},
    {"max-batch", required_argument, NULL, OPT_MAX_BATCH}, {"strategies", required_argument, NULL, OPT_STRATEGIES},
    {"workload", required_argument, NULL, OPT_WORKLOAD}, {"input", required_argument, NULL, OPT_INPUT},
    {"output", required_argument, NULL, OPT_OUTPUT}, {"max-input", required_argument, NULL, OPT_MAX_INPUT},
    {"max-output", required_argument, NULL, OPT_MAX_OUTPUT}, {"max-new", required_argument, NULL, OPT_MAX_NEW},
    {"requests", required_argument, NULL, OPT_REQUESTS}, {"rate", required_argument, NULL, OPT_RATE},
    {"seed", required_argument, NULL, OPT_SEED}, {"json", required_argument, NULL, OPT_JSON},
    {"verbose", no_argument, NULL, OPT_VERBOSE}, {"help", no_argument, NULL, OPT_HELP},
    {"arena", required_argument, NULL, OPT_ARENA}, {"filter", required_argument, NULL, OPT_FILTER},
    {"rate-per-s", required_argument, NULL, OPT_RATE_PER_S}, {"step-ms", required_argument, NULL, OPT_STEP_MS},
    {"latency", no_argument, NULL, OPT_LATENCY}, {"machine", required_argument, NULL, OPT_MACHINE},
    {"slo-ttft", required_argument, NULL, OPT_SLO_TTFT}, {"slo-tpot", required_argument, NULL, OPT_SLO_TPOT},
    {NULL, 0, NULL, 0}};

static void usage(void)
{
    printf("Usage: %s [options]\n"
           "Capacity simulator: chapter 3's reservation policies (static and continuous batching) and chapter 4's\n"
           "paged allocator, their real code in accounting-only mode (no model, no K/V bytes), on real-model shapes\n"
           "and GPU memory sizes.\n\n"
           "  --scenario NAME      a named setting (its options are printed; later options override them):\n"
           "                       source-13b-a100-80gb, paper-13b-a100-40gb, paper-fig2; --scenario list\n"
           "                       describes them; prefix-multiturn-7b, prefix-multiturn-13b: chapter 5's\n"
           "                       prefix caches (own --help)\n"
           "model and GPU\n"
           "  --preset NAME        %s (default llama-13b)\n"
           "  --kv-dtype T         K/V element type: fp16, bf16, fp32, int8 (its scales counted), fp8-e4m3,\n"
           "                       fp8-e5m2 (default fp16); --dtype is the same option\n"
           "  --max-len N          the model's context length (default: the preset's)\n"
           "  --gpu NAME           %s (default a100-80gb; GB = 10^9 B)\n"
           "  --gpu-mem SIZE       GPU memory instead, e.g. 80GB or 80GiB\n"
           "  --weights SIZE       memory of the weights (default: 2 B per parameter of the preset)\n"
           "  --activations SIZE   kept for activations (default 4GB)\n"
           "  --reserve SIZE       kept back for the system (default 2GB)\n"
           "  --kv-budget SIZE     the K/V memory itself, instead of what the GPU leaves\n"
           "serving\n"
           "  --strategies LIST    of max,request,pow2,grow,orca-max,cont-pow2,orca-out-pow2,orca-oracle,paged\n"
           "                       (default all but orca-out-pow2): max..grow: chapter 3's --reserve with static\n"
           "                       batching; orca-max: --reserve max with --batching continuous (the paper's\n"
           "                       Orca-Max); cont-pow2: --reserve pow2, continuous (prompt + --max-new rounded\n"
           "                       up to a power of two; called orca-pow2 before); orca-out-pow2: --reserve\n"
           "                       request, continuous, every request asking for its output length rounded up\n"
           "                       to a power of two (the paper's Orca-Pow2); orca-oracle: the same asking for\n"
           "                       exactly its output length (the paper's Orca-Oracle); paged: chapter 4\n"
           "  --arena NAME         chapter 3's allocator: first-fit (default) or buddy (the paper's Orca)\n"
           "  --block-size N       chapter 4's block size, a power of two from 1 to 256 (default 16)\n"
           "  --watermark PCT      chapter 4's free blocks kept back at admission (default 1)\n"
           "  --max-batch N        chapter 3's most requests per batch (default: no limit)\n"
           "requests\n"
           "  --workload NAME      sharegpt or alpaca: sets --input and --output (means from the PagedAttention paper)\n"
           "  --input DIST         prompt lengths: fixed:N, uniform:LO:HI, lognormal:MEAN:SIGMA, gamma:MEAN:CV or\n"
           "                       weibull:MEAN:CV (CV: standard deviation over mean) (default: sharegpt's)\n"
           "  --output DIST        output lengths, tokens before EOS, the same forms (default: sharegpt's)\n"
           "  --max-input N        longest prompt (default: half the context length)\n"
           "  --max-output N       most new tokens (default: the rest of the context)\n"
           "  --max-new N|oracle   what each request asks for, which `request` and `pow2` reserve\n"
           "                       (default: --max-output; oracle: its true output length)\n"
           "  --requests N         how many (default 1000)\n"
           "  --rate R             Poisson arrivals, requests per simulated step (default 0: all at once)\n"
           "  --rate-per-s R       Poisson arrivals, R requests per second, with --step-ms: the simulated time\n"
           "  --step-ms T          of one step (every step the same), so that --rate is R x T / 1000\n"
           "  --filter MIN:MAXIN:MAXTOTAL  drop and draw again (as a pair) every request with a prompt or output\n"
           "                       under MIN tokens, a prompt over MAXIN or prompt + output over MAXTOTAL, as\n"
           "                       vLLM's benchmark script drops ShareGPT requests (4:1024:2048); lognormal,\n"
           "                       gamma and weibull MEANs are then the means of the kept requests (their scale\n"
           "                       is solved for them)\n"
           "  --seed N             seeds lengths and arrivals (default 1)\n"
           "latency (cost model: common/serving/cost_model.h)\n"
           "  --latency            time every step by the cost model of --machine and report TTFT, TPOT, ITL, e2e\n"
           "                       and goodput; --rate-per-s arrivals are then times on that clock (no --step-ms)\n"
           "  --machine NAME[,K=V] a100-40gb, a100-80gb, h100-80gb, h200-141gb (datasheet rooflines) or kvlab-cpu\n"
           "                       (default: the --gpu's); ,bw= ,flops= ,share= ,link= ,overhead= ,overlap= change one\n"
           "  --slo-ttft S         objective: time to first token at most S seconds (goodput counts who meets all)\n"
           "  --slo-tpot S         objective: time per output token at most S seconds\n"
           "output\n"
           "  --json FILE          the setup and every strategy's numbers as JSON\n"
           "  --verbose            the chapters' setup lines and progress on stderr\n"
           "  --help               show this help\n"
           "\n--scenario paper-fig19 (recomputation against swapping) takes its own options: --scenario paper-fig19 "
           "--help\n",
           PROGRAM, kvmath_preset_names(), kvsim_gpu_names());
}

static int parse_int(const char *name, const char *text, long lo, long hi, int *out, Err *err)
{
    long v;
    if (parse_long(text, lo, hi, &v, NULL))
        return err_set(err, "--%s: '%s' is not a whole number from %ld to %ld", name, text, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_bytes(const char *name, const char *text, uint64_t *out, Err *err)
{
    size_t bytes;
    if (cli_parse_size(text, &bytes, err))
        return err_prefix(err, "--%s", name);
    *out = bytes;
    return 0;
}

static int parse_strategies(const char *text, int use[N_STRATEGIES], Err *err)
{
    memset(use, 0, N_STRATEGIES * sizeof use[0]);
    char buf[160];
    snprintf(buf, sizeof buf, "%s", text);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "orca-pow2") == 0)
            return err_set(err, "--strategies: orca-pow2 was renamed: cont-pow2 is what it was (prompt + --max-new "
                           "rounded up to a power of two); the paper's Orca-Pow2 is orca-out-pow2");
        int k = 0;
        while (k < N_STRATEGIES && strcmp(tok, STRATEGY_NAMES[k]) != 0)
            k++;
        if (k == N_STRATEGIES)
            return err_set(err, "--strategies: '%s' is not one of " STRATEGY_LIST, tok);
        use[k] = 1;
        n++;
    }
    return n ? 0 : err_set(err, "--strategies: give at least one of " STRATEGY_LIST);
}

/* Weights in fp16 when not given: 2 bytes per parameter, as the source
 * material counts (7B: about 14 GB; 13B: 26 GB). */
static uint64_t default_weights(const KvShape *s)
{
    static const struct {
        const char *name;
        double params;
    } sizes[] = {{"llama-7b", 7e9},    {"llama-13b", 13e9},   {"opt-13b", 13e9},
                 {"llama-2-70b", 70e9}, {"smollm2-135m", 134515008.0}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(s->name, sizes[i].name) == 0)
            return (uint64_t)(2.0 * sizes[i].params);
    return 0;
}

static int apply_workload(Options *o, const char *name, Err *err)
{
    KvsimWorkloadPreset p;
    if (kvsim_workload_preset(name, &p))
        return err_set(err, "--workload: '%s' is not one of sharegpt, alpaca", name);
    o->workload_name = p.name;
    o->w.input = p.input;
    o->w.output = p.output;
    return 0;
}

/* An objective in seconds, more than 0. */
static int parse_objective(const char *name, const char *text, double *out, Err *err)
{
    if (parse_double(text, 1e-9, 86400.0, out, NULL))
        return err_set(err, "--%s: '%s' is not a number of seconds above 0 (at most 86400)", name, text);
    return 0;
}

/* MIN:MAXIN:MAXTOTAL, whole numbers with 1 <= MIN <= MAXIN < MAXTOTAL. */
static int parse_filter(const char *text, KvsimFilter *f, Err *err)
{
    long v[3];
    char buf[64];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    int n = 0;
    for (; tok && n < 3; tok = strtok_r(NULL, ":", &save))
        if (parse_long(tok, 1, 1 << 20, &v[n++], NULL))
            n = 4; /* not a number: refused below */
    if (n != 3 || tok || strlen(text) >= sizeof buf || text[0] == ':' || text[strlen(text) - 1] == ':' ||
        strstr(text, "::"))
        return err_set(err, "--filter: '%s' is not MIN:MAXIN:MAXTOTAL (whole numbers, e.g. 4:1024:2048)", text);
    if (v[0] > v[1] || v[1] >= v[2])
        return err_set(err, "--filter %s: needs MIN <= MAXIN < MAXTOTAL", text);
    *f = (KvsimFilter){.min = (int)v[0], .max_input = (int)v[1], .max_total = (int)v[2]};
    return 0;
}

static int parse_positive(const char *name, const char *arg, double hi, double *out, Err *err)
{
    if (parse_double(arg, 0, hi, out, NULL) || !(*out > 0))
        return err_set(err, "--%s: '%s' is not a number above 0 and at most %g", name, arg, hi);
    return 0;
}

static int apply(Options *o, int id, const char *name, const char *arg, Err *err)
{
    switch (id) {
    case OPT_ARENA: {
        ArenaKind kind;
        if (arena_kind_parse(arg, &kind, err))
            return -1;
        o->arena = arena_kind_name(kind);
        return 0;
    }
    case OPT_FILTER: return parse_filter(arg, &o->w.filter, err);
    case OPT_RATE_PER_S: return parse_positive(name, arg, 1e6, &o->rate_per_s, err);
    case OPT_STEP_MS: return parse_positive(name, arg, 1e6, &o->step_ms, err);
    case OPT_PRESET:
        return kvmath_preset(arg, &o->shape) ? err_set(err, "--preset: '%s' is not one of %s", arg,
                                                       kvmath_preset_names()) : 0;
    case OPT_DTYPE: return kvmath_dtype_parse(arg, &o->dtype, err) ? err_prefix(err, "--%s", name) : 0;
    case OPT_MAX_LEN: return parse_int(name, arg, 2, 1 << 20, &o->max_len, err);
    case OPT_GPU:
        if (kvsim_gpu_preset(arg, &o->gpu))
            return err_set(err, "--gpu: '%s' is not one of %s", arg, kvsim_gpu_names());
        o->budget.gpu_bytes = o->gpu.bytes;
        return 0;
    case OPT_GPU_MEM:
        o->gpu = (KvsimGpu){"custom", arg, 0};
        if (parse_bytes(name, arg, &o->budget.gpu_bytes, err))
            return -1;
        o->gpu.bytes = o->budget.gpu_bytes;
        return 0;
    case OPT_WEIGHTS: return parse_bytes(name, arg, &o->budget.weights_bytes, err);
    case OPT_ACTIVATIONS: return parse_bytes(name, arg, &o->budget.activations_bytes, err);
    case OPT_RESERVE: return parse_bytes(name, arg, &o->budget.reserve_bytes, err);
    case OPT_KV_BUDGET:
        if (parse_bytes(name, arg, &o->kv_budget, err))
            return -1;
        return o->kv_budget ? 0 : err_set(err, "--kv-budget: the budget must be more than 0 bytes");
    case OPT_BLOCK_SIZE:
        if (parse_int(name, arg, 1, BLOCK_SIZE_MAX, &o->block_size, err))
            return -1;
        return (o->block_size & (o->block_size - 1)) == 0
                   ? 0 : err_set(err, "--block-size: %d is not a power of two from 1 to %d", o->block_size,
                                 BLOCK_SIZE_MAX);
    case OPT_WATERMARK: return parse_int(name, arg, 0, 50, &o->watermark, err);
    case OPT_MAX_BATCH: return parse_int(name, arg, 1, 1000000, &o->max_batch, err);
    case OPT_STRATEGIES: return parse_strategies(arg, o->use, err);
    case OPT_WORKLOAD: return apply_workload(o, arg, err);
    case OPT_INPUT: return kvsim_dist_parse(arg, &o->w.input, err) ? err_prefix(err, "--input") : 0;
    case OPT_OUTPUT: return kvsim_dist_parse(arg, &o->w.output, err) ? err_prefix(err, "--output") : 0;
    case OPT_MAX_INPUT: return parse_int(name, arg, 1, 1 << 20, &o->w.max_input, err);
    case OPT_MAX_OUTPUT:
        o->max_output_given = 1;
        return parse_int(name, arg, 1, 1 << 20, &o->w.max_output, err);
    case OPT_MAX_NEW:
        o->max_new_given = 1;
        if (strcmp(arg, "oracle") == 0) {
            o->w.max_new_tokens = 0;
            return 0;
        }
        return parse_int(name, arg, 1, REQUEST_MAX_NEW_TOKENS, &o->w.max_new_tokens, err);
    case OPT_REQUESTS: return parse_int(name, arg, 1, 1000000, &o->w.n_requests, err);
    case OPT_RATE:
        if (parse_double(arg, 0, 1e6, &o->w.rate, NULL))
            return err_set(err, "--rate: '%s' is not a number of requests per step from 0 to 1e6", arg);
        return 0;
    case OPT_SEED: {
        uint64_t v;
        if (parse_u64(arg, UINT64_MAX, &v, NULL))
            return err_set(err, "--seed: '%s' is not a whole number >= 0", arg);
        o->w.seed = v;
        return 0;
    }
    case OPT_JSON: o->json_path = arg; return 0;
    case OPT_VERBOSE: o->verbose = 1; return 0;
    case OPT_LATENCY: o->latency = 1; return 0;
    case OPT_MACHINE: o->latency = 1; o->machine = arg; return 0;
    case OPT_SLO_TTFT: o->latency = 1; return parse_objective(name, arg, &o->clock.slo.ttft_s, err);
    case OPT_SLO_TPOT: o->latency = 1; return parse_objective(name, arg, &o->clock.slo.tpot_s, err);
    case OPT_SCENARIO: return 0; /* applied first, see parse_options() */
    }
    return err_set(err, "--%s: not handled", name);
}

/* One pass of getopt over argv. Returns 0, 1 (help printed) or -1. */
static int parse_argv(Options *o, int argc, char **argv, int scenario_only, Err *err)
{
    opterr = 0;
    optind = 1;
    for (;;) {
        int index = -1, c = getopt_long(argc, argv, ":h", LONGOPTS, &index);
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
        if (scenario_only != (c == OPT_SCENARIO))
            continue;
        if (c == OPT_SCENARIO) {
            if (strcmp(optarg, "list") == 0) {
                list_scenarios(stdout);
                return 1;
            }
            if (!(o->scenario = find_scenario(optarg))) {
                char names[512];
                return err_set(err, "--scenario: '%s' is not one of %s (--help and --scenario list say what they do)",
                               optarg, scenario_names(names, sizeof names));
            }
            continue;
        }
        if (apply(o, c, LONGOPTS[index].name, optarg, err))
            return -1;
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    return 0;
}

/* The scenario's options, as if typed before the others. */
static int apply_scenario(Options *o, Err *err)
{
    char text[1024], *words[64];
    snprintf(text, sizeof text, "%s", o->scenario->options);
    int n = 0;
    words[n++] = (char *)PROGRAM;
    for (char *save = NULL, *tok = strtok_r(text, " ", &save); tok && n < 63; tok = strtok_r(NULL, " ", &save))
        words[n++] = tok;
    words[n] = NULL;
    if (parse_argv(o, n, words, 0, err) != 0)
        return err_prefix(err, "scenario %s", o->scenario->name);
    return 0;
}

static void set_defaults(Options *o)
{
    memset(o, 0, sizeof *o);
    kvmath_preset("llama-13b", &o->shape);
    o->dtype = KV_DTYPE_FP16;
    kvsim_gpu_preset("a100-80gb", &o->gpu);
    o->budget.gpu_bytes = o->gpu.bytes;
    o->budget.activations_bytes = 4 * KVMATH_GB;
    o->budget.reserve_bytes = 2 * KVMATH_GB;
    o->block_size = 16;
    o->watermark = 1;
    o->arena = "first-fit";
    for (int k = 0; k < N_STRATEGIES; k++)
        o->use[k] = k != S_ORCA_OUT_POW2;
    apply_workload(o, "sharegpt", NULL);
    o->workload_name = NULL; /* the default, not chosen */
    o->w.n_requests = 1000;
    o->w.seed = 1;
}

/* --latency: the machine (the --gpu's by default), the model's costs (2
 * FLOPs per fp16 parameter, parameters = weight bytes / 2), and arrivals
 * in seconds on the model's clock. */
static int finish_latency(Options *o, Err *err)
{
    const char *machine = o->machine ? o->machine : o->gpu.name;
    if (!machine || cost_machine_load(machine, &o->clock.machine, err))
        return o->machine ? -1 : err_set(err, "--latency: no cost model for --gpu %s; give --machine (%s)",
                                         o->gpu.name ? o->gpu.name : "(--gpu-mem)", cost_machine_names());
    const KvShape *s = &o->shape;
    double weights = (double)o->budget.weights_bytes;
    o->clock.shape = (CostShape){.weight_bytes = weights,
                                 .kv_bytes_per_position = (double)kvmath_bytes_per_token(s, o->dtype),
                                 .flops_per_token = weights, /* 2 FLOPs x weights / 2 B */
                                 .flops_per_attended = 4.0 * s->n_heads * s->head_dim * s->n_layers};
    if (o->w.rate > 0 && o->rate_per_s == 0)
        return err_set(err, "--latency times arrivals in seconds: give --rate-per-s R instead of --rate");
    if (o->rate_per_s > 0) {
        o->w.rate = o->rate_per_s; /* in "steps" of one second: */
        o->w.seconds_per_step = 1.0;
    }
    return 0;
}

/* Fills in what depends on other options, and refuses what cannot run. */
static int finish_options(Options *o, Err *err)
{
    if (o->max_len)
        o->shape.seq_len = o->max_len;
    int seq_len = o->shape.seq_len;
    if (o->budget.weights_bytes == 0)
        o->budget.weights_bytes = default_weights(&o->shape);
    if (o->w.max_input == 0)
        o->w.max_input = seq_len / 2;
    if (o->w.max_input >= seq_len)
        return err_set(err, "--max-input %d: a prompt must leave room under the context length %d", o->w.max_input,
                       seq_len);
    if (!o->max_output_given)
        o->w.max_output = seq_len - o->w.max_input;
    if (!o->max_new_given)
        o->w.max_new_tokens = o->w.max_output;
    if (o->latency && finish_latency(o, err))
        return -1;
    if (!o->latency && (o->rate_per_s > 0) != (o->step_ms > 0))
        return err_set(err, "--rate-per-s and --step-ms go together: requests per second need the time of a step");
    if (!o->latency && o->rate_per_s > 0)
        o->w.rate = o->rate_per_s * o->step_ms / 1000.0;
    if (kvsim_workload_check(&o->w, seq_len, err))
        return -1;
    if (o->w.filter.max_total > 0 && kvsim_filter_solve(&o->w, seq_len, &o->fit, err))
        return -1;
    o->kv_budget_given = o->kv_budget > 0;
    if (!o->kv_budget_given && kvmath_kv_bytes_left(&o->budget, &o->kv_budget, err))
        return -1;
    if (o->kv_budget_given && o->budget.gpu_bytes < o->budget.weights_bytes + o->kv_budget)
        return err_set(err, "--kv-budget %.2f GB and the weights' %.2f GB do not fit in the GPU's %.2f GB",
                       (double)o->kv_budget / KVMATH_GB, (double)o->budget.weights_bytes / KVMATH_GB,
                       (double)o->budget.gpu_bytes / KVMATH_GB);
    /* Chapter 4's pool sizes its blocks in whole elements; int8's scales
     * (4 B per head of each row) are not yet among them. */
    if (o->dtype == KV_DTYPE_INT8 && o->use[S_PAGED])
        return err_set(err, "--kv-dtype int8: chapter 4's block pool does not count int8's scales yet, so the paged "
                       "strategy cannot run it; use fp8-e4m3 (1 B per element, no scale), or --strategies without paged");
    uint64_t per_token = kvmath_bytes_per_token(&o->shape, o->dtype);
    if (o->kv_budget < per_token * (uint64_t)o->block_size)
        return err_set(err, "a KV budget of %" PRIu64 " B holds no block of %d tokens (%" PRIu64 " B per token)",
                       o->kv_budget, o->block_size, per_token);
    return 0;
}

static int parse_options(Options *o, int argc, char **argv, Err *err)
{
    set_defaults(o);
    int rc = parse_argv(o, argc, argv, 1, err);
    if (rc != 0)
        return rc;
    if (o->scenario && apply_scenario(o, err))
        return -1;
    rc = parse_argv(o, argc, argv, 0, err);
    if (rc != 0)
        return rc;
    return finish_options(o, err);
}

/* ------------------------------------------------------------ the setup */

static const char *gb(char *buf, size_t n, uint64_t bytes)
{
    snprintf(buf, n, "%.2f GB = %.2f GiB", (double)bytes / KVMATH_GB, (double)bytes / KVMATH_GIB);
    return buf;
}

static void print_setup(const Options *o, const SimRequestSpec *reqs)
{
    char a[64], b[64];
    const KvShape *s = &o->shape;
    uint64_t per_token = kvmath_bytes_per_token(s, o->dtype), full = per_token * (uint64_t)s->seq_len;
    if (o->scenario)
        printf("scenario %s: %s\n  = %s\n\n", o->scenario->name, o->scenario->what, o->scenario->options);
    printf("model     %s: %d layers x %d KV heads x %d head_dim, K/V in %s: %" PRIu64 " B per token, %" PRIu64
           " B (%s) per %d-token request\n", s->name, s->n_layers, s->n_kv_heads, s->head_dim,
           kvmath_dtype_name(o->dtype), per_token, full, gb(a, sizeof a, full), s->seq_len);
    if (o->kv_budget_given)
        printf("GPU       %s: %s; weights %.2f GB; K/V as given (--kv-budget), which leaves %.2f GB for "
               "activations and the rest\n", o->gpu.label, gb(a, sizeof a, o->budget.gpu_bytes),
               (double)o->budget.weights_bytes / KVMATH_GB,
               (double)(o->budget.gpu_bytes - o->budget.weights_bytes - o->kv_budget) / KVMATH_GB);
    else
        printf("GPU       %s: %s; weights %.2f GB, activations %.2f GB, reserve %.2f GB\n", o->gpu.label,
               gb(a, sizeof a, o->budget.gpu_bytes), (double)o->budget.weights_bytes / KVMATH_GB,
               (double)o->budget.activations_bytes / KVMATH_GB, (double)o->budget.reserve_bytes / KVMATH_GB);
    printf("KV budget %" PRIu64 " B (%s): %" PRIu64 " token slots, %" PRIu64 " full-length requests", o->kv_budget,
           gb(b, sizeof b, o->kv_budget), o->kv_budget / per_token, o->kv_budget / full);
    if (o->dtype != KV_DTYPE_FP16) { /* what the smaller (or larger) entries changed */
        uint64_t fp16 = kvmath_bytes_per_token(s, KV_DTYPE_FP16);
        printf(" (fp16: %" PRIu64 " and %" PRIu64 ")", o->kv_budget / fp16, o->kv_budget / (fp16 * (uint64_t)s->seq_len));
    }
    printf("\n");
    double in = 0, out = 0, asks = 0;
    for (int i = 0; i < o->w.n_requests; i++) {
        in += reqs[i].prompt_tokens;
        out += reqs[i].output_tokens;
        asks += reqs[i].max_new_tokens;
    }
    int n = o->w.n_requests;
    printf("requests  %d, %s; seed %" PRIu64 "\n", n, o->w.rate > 0 ? "Poisson arrivals" : "all at step 0",
           o->w.seed);
    if (o->latency && o->rate_per_s > 0)
        printf("          %.4g per second on the cost model's clock: the last arrives at %.1f s\n", o->rate_per_s,
               reqs[n - 1].arrival_s);
    else if (o->rate_per_s > 0)
        printf("          %.4g per second at %.4g ms per step: %.4g per step; the last arrives at step %ld (%.0f s)\n",
               o->rate_per_s, o->step_ms, o->w.rate, reqs[n - 1].arrival_step,
               (double)reqs[n - 1].arrival_step * o->step_ms / 1000.0);
    else if (o->w.rate > 0)
        printf("          %.4g per step: the last arrives at step %ld\n", o->w.rate, reqs[n - 1].arrival_step);
    if (o->w.filter.max_total > 0) {
        const KvsimFilter *f = &o->w.filter;
        printf("          filter: prompts of %d to %d tokens, outputs of %d or more, prompt + output at most %d "
               "(others dropped and drawn again)\n", f->min, f->max_input < o->w.max_input ? f->max_input :
               o->w.max_input, f->min, f->max_total);
        printf("          prompts %s, outputs %s: means of the kept requests; before the filter mu = %.4f and %.4f "
               "(means %.1f and %.1f); it keeps %.1f%%\n", kvsim_dist_format(a, sizeof a, &o->w.input),
               kvsim_dist_format(b, sizeof b, &o->w.output), o->fit.mu_input, o->fit.mu_output,
               kvsim_dist_mean_at(&o->w.input, o->fit.mu_input),
               kvsim_dist_mean_at(&o->w.output, o->fit.mu_output), 100.0 * o->fit.kept);
        printf("          drawn: prompts mean %.1f, outputs mean %.1f\n", in / n, out / n);
    } else {
        printf("          prompts %s in [1, %d]: mean %.1f drawn\n", kvsim_dist_format(a, sizeof a, &o->w.input),
               o->w.max_input, in / n);
        printf("          outputs %s in [1, min(%d, context - prompt)]: mean %.1f drawn\n",
               kvsim_dist_format(b, sizeof b, &o->w.output), o->w.max_output, out / n);
    }
    if (o->w.max_new_tokens > 0)
        printf("          each asks for %d new tokens (what `request` and `pow2` reserve)\n", o->w.max_new_tokens);
    else
        printf("          each asks for exactly its output length (oracle: `request` reserves prompt + output)\n");
    if (o->workload_name) {
        KvsimWorkloadPreset p;
        kvsim_workload_preset(o->workload_name, &p);
        printf("          %s\n", p.source);
    }
    printf("\n");
}

/* ------------------------------------------------------------ the runs */

/* The chapter and its options for strategy k: chapter 3's --reserve,
 * --batching and --arena, or chapter 4. */
static ServeChapter strategy_chapter(int k, const Options *o, CliOptions *co)
{
    static const char *const reserve[N_STRATEGIES] = {"max", "request", "pow2", "grow", "max", "pow2", "request",
                                                      NULL, "request"};
    cli_defaults(co);
    co->kv_budget = (size_t)o->kv_budget;
    co->block_size = o->block_size;
    co->watermark = o->watermark;
    co->max_batch = o->max_batch ? o->max_batch : o->w.n_requests;
    if (k == S_PAGED)
        return SERVE_PAGED;
    co->reserve = reserve[k];
    co->batching = k >= S_ORCA_MAX ? "continuous" : "static";
    co->arena = o->arena;
    return SERVE_BATCHING;
}

/* The workload's requests, and the same requests asking for exactly their
 * output (orca-oracle) or for it rounded up to a power of two
 * (orca-out-pow2: "if the true output length is 25, it reserves 32
 * positions for outputs", the paper's Sec. 6.1). */
typedef struct {
    const SimRequestSpec *asked;
    SimRequestSpec *oracle;
    SimRequestSpec *out_pow2;
} RequestSets;

static const SimRequestSpec *strategy_requests(int k, const RequestSets *sets)
{
    return k == S_ORCA_ORACLE ? sets->oracle : k == S_ORCA_OUT_POW2 ? sets->out_pow2 : sets->asked;
}

static void strategy_label(int k, const Options *o, char *buf, size_t n)
{
    if (k == S_PAGED)
        snprintf(buf, n, "ch04 paged/%d", o->block_size);
    else
        snprintf(buf, n, "ch03 %s", STRATEGY_NAMES[k]);
}

/* The label column: 16 wide, or the longest label chosen. */
static int label_width(const Options *o)
{
    int width = 16;
    for (int k = 0; k < N_STRATEGIES; k++) {
        char label[32];
        strategy_label(k, o, label, sizeof label);
        if (o->use[k] && (int)strlen(label) > width)
            width = (int)strlen(label);
    }
    return width;
}

static void print_header(int w)
{
    printf("%-*s %5s %6s %6s | %6s %6s %6s %6s | %6s %6s | %7s %7s %6s %7s\n", w, "strategy", "max", "avg", "KV",
           "token", "reserv", "intern", "extern", "held", "live", "preempt", "served", "steps", "latency");
    printf("%-*s %5s %6s %6s | %6s %6s %6s %6s | %6s %6s | %7s %7s %6s %7s\n", w, "", "conc.", "conc.", "util.",
           "states", "-ed", "frag.", "frag.", "by fin", "tokens", "", "/step", "", "(steps)");
}

static void print_row(int w, const char *label, const KvsimResult *r)
{
    printf("%-*s %5d %6.1f %5.1f%% | %5.1f%% %5.1f%% %5.1f%% %5.1f%% | %5.1f%% %5.1f%% | %7ld %7.4f %6ld %7.0f\n",
           w, label, r->max_concurrent, r->avg_concurrent, 100 * r->util_avg, 100 * r->breakdown[0],
           100 * r->breakdown[1], 100 * r->breakdown[2], 100 * r->breakdown[3], 100 * r->held_by_finished,
           100 * r->live_token_states, r->preemptions, r->served_per_step, r->steps, r->mean_latency);
    if (r->rejected)
        printf("%-*s %d requests rejected (they can never fit)\n", w + 1, "", r->rejected);
}

/* What the scenario's paper measured for strategy k, or NULL. */
static const PaperFigure *paper_figure(const Options *o, int k)
{
    for (int i = 0; o->scenario && i < N_PAPER_FIGURES; i++)
        if (o->scenario->paper[i].label && o->scenario->paper[i].strategy == k)
            return &o->scenario->paper[i];
    return NULL;
}

static void json_result(JsonWriter *j, const char *label, const PaperFigure *paper, int fig2, const KvsimResult *r)
{
    json_begin_object(j, NULL);
    json_string(j, "strategy", label);
    json_int(j, "max_concurrent", r->max_concurrent);
    json_double(j, "avg_concurrent", r->avg_concurrent);
    json_double(j, "kv_utilization_avg", r->util_avg);
    json_double(j, "kv_utilization_at_peak", r->util_at_peak);
    json_begin_object(j, "kv_breakdown");
    json_double(j, "token_states", r->breakdown[0]);
    json_double(j, "reserved", r->breakdown[1]);
    json_double(j, "internal_fragmentation", r->breakdown[2]);
    json_double(j, "external_fragmentation", r->breakdown[3]);
    json_end_object(j);
    json_double(j, "kv_held_by_finished", r->held_by_finished);
    json_double(j, "live_token_states", r->live_token_states);
    json_int(j, "kv_peak_reserved_bytes", (long long)r->peak_reserved);
    json_int(j, "preemptions", r->preemptions);
    json_int(j, "requests_completed", r->completed);
    json_int(j, "requests_rejected", r->rejected);
    json_int(j, "steps", r->steps);
    json_int(j, "busy_steps", r->busy_steps);
    json_int(j, "tokens_generated", r->tokens_generated);
    json_double(j, "requests_per_step", r->served_per_step);
    json_double(j, "mean_latency_steps", r->mean_latency);
    if (paper) {
        json_string(j, "paper_strategy", paper->label);
        json_double(j, "paper_token_states", paper->token_states);
    }
    if (r->has_latency) {
        json_begin_object(j, "latency");
        latency_json(j, &r->latency);
        json_end_object(j);
    }
    if (fig2) {
        json_begin_object(j, "kv_pool_shares");
        json_double(j, "token_states", r->pool_share[0]);
        json_double(j, "reservation", r->pool_share[1]);
        json_double(j, "internal_fragmentation", r->pool_share[2]);
        json_double(j, "external_fragmentation_and_others", r->pool_share[3]);
        json_end_object(j);
    }
    json_end_object(j);
}

static const char *const FIG2_KEYS[4] = {"token_states_pct", "reservation_pct", "internal_fragmentation_pct",
                                         "external_fragmentation_pct"};

/* "fig2": the four shares of the pool of each of the paper's systems;
 * "fig13": their average batched requests. Each with the paper's. */
static void json_fig2(JsonWriter *j, const Options *o, const KvsimResult *results)
{
    json_begin_object(j, "fig2");
    for (int i = 0; i < N_PAPER_FIGURES; i++) {
        const PaperFig2 *p = &PAPER_FIG2[i];
        if (!o->use[p->strategy])
            continue;
        char label[32];
        strategy_label(p->strategy, o, label, sizeof label);
        json_begin_object(j, p->key);
        json_string(j, "strategy", label);
        for (int c = 0; c < 4; c++)
            json_double(j, FIG2_KEYS[c], 100.0 * results[p->strategy].pool_share[c]);
        json_begin_object(j, "paper");
        for (int c = 0; c < 4; c++)
            if (p->pool_pct[c] >= 0)
                json_double(j, FIG2_KEYS[c], p->pool_pct[c]);
        json_end_object(j);
        json_end_object(j);
    }
    json_end_object(j);
    json_begin_object(j, "fig13");
    for (int i = 0; i < N_PAPER_FIGURES; i++) {
        const PaperFig2 *p = &PAPER_FIG2[i];
        if (!o->use[p->strategy])
            continue;
        json_begin_object(j, p->key);
        json_double(j, "avg_batched_requests", results[p->strategy].avg_concurrent);
        json_double(j, "paper", p->batched);
        json_end_object(j);
    }
    json_end_object(j);
}

/* The paper's Fig. 2 and Fig. 13 next to the strategies that replay them
 * by the paper's method. */
static void print_fig2(const Options *o, const KvsimResult *results)
{
    printf("\nagainst the PagedAttention paper, by its method: Fig. 2, shares of the whole KV pool (%%), and Fig. 13,"
           "\naverage batched requests (paper | kvsim)\n");
    printf("  %-14s %-20s %13s %13s %13s %13s %15s\n", "paper", "kvsim", "token states", "reservation",
           "internal", "extern.+other", "batched");
    for (int i = 0; i < N_PAPER_FIGURES; i++) {
        const PaperFig2 *p = &PAPER_FIG2[i];
        if (!o->use[p->strategy])
            continue;
        char label[32];
        strategy_label(p->strategy, o, label, sizeof label);
        const KvsimResult *r = &results[p->strategy];
        printf("  %-14s %-20s", p->label, label);
        for (int c = 0; c < 4; c++) {
            char paper[16];
            snprintf(paper, sizeof paper, p->pool_pct[c] >= 0 ? "%.1f" : "-", p->pool_pct[c]);
            printf(" %5s | %5.1f", paper, 100.0 * r->pool_share[c]);
        }
        printf(" %6.2f | %6.2f\n", p->batched, r->avg_concurrent);
    }
}

/* The scenario's figures from the paper next to the strategies that
 * replay them. */
static void print_paper(const Options *o, const KvsimResult *results)
{
    if (!o->scenario || !o->scenario->paper[0].label)
        return;
    printf("\nagainst the PagedAttention paper (Fig. 2): share of the reserved KV memory holding token states\n");
    printf("  %-12s %6s   %-16s %12s %12s\n", "paper", "", "kvsim", "token states", "live tokens");
    for (int i = 0; i < N_PAPER_FIGURES; i++) {
        const PaperFigure *p = &o->scenario->paper[i];
        if (!p->label || !o->use[p->strategy])
            continue;
        char label[32];
        strategy_label(p->strategy, o, label, sizeof label);
        const KvsimResult *r = &results[p->strategy];
        printf("  %-12s %5.1f%%   %-16s %11.1f%% %11.1f%%\n", p->label, 100 * p->token_states, label,
               100 * r->breakdown[0], 100 * r->live_token_states);
    }
    if (o->scenario->paper_note)
        printf("  %s\n", o->scenario->paper_note);
}

static void json_setup(JsonWriter *j, const Options *o)
{
    char a[64];
    json_string(j, "scenario", o->scenario ? o->scenario->name : "");
    json_string(j, "model", o->shape.name);
    json_string(j, "dtype", kvmath_dtype_name(o->dtype));
    json_int(j, "seq_len", o->shape.seq_len);
    json_int(j, "kv_bytes_per_token", (long long)kvmath_bytes_per_token(&o->shape, o->dtype));
    json_string(j, "gpu", o->gpu.label);
    json_int(j, "gpu_bytes", (long long)o->budget.gpu_bytes);
    json_int(j, "kv_budget_bytes", (long long)o->kv_budget);
    json_int(j, "block_size", o->block_size);
    json_int(j, "requests", o->w.n_requests);
    json_string(j, "input", kvsim_dist_format(a, sizeof a, &o->w.input));
    json_string(j, "output", kvsim_dist_format(a, sizeof a, &o->w.output));
    json_int(j, "max_new_tokens", o->w.max_new_tokens);
    json_double(j, "rate", o->w.rate);
    json_int(j, "seed", (long long)o->w.seed);
    if (o->latency) { /* the rate is then requests per second on the cost model's clock */
        char machine[256];
        json_string(j, "latency_machine", cost_machine_describe(&o->clock.machine, machine, sizeof machine));
    }
}

static Model shape_of(const KvShape *s)
{
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = (ModelConfig){.dim = s->n_heads * s->head_dim, .n_layers = s->n_layers, .n_heads = s->n_heads,
                          .n_kv_heads = s->n_kv_heads, .vocab_size = 1, .seq_len = s->seq_len};
    return m;
}

/* Every chosen strategy's own check, before anything is printed. */
static int check_all(const Options *o, const RequestSets *sets, Err *err)
{
    Model shape = shape_of(&o->shape);
    size_t per_token = (size_t)kvmath_bytes_per_token(&o->shape, o->dtype);
    for (int k = 0; k < N_STRATEGIES; k++) {
        CliOptions co;
        ServeChapter ch = strategy_chapter(k, o, &co);
        if (o->use[k] && kvsim_check(ch, &shape, &co, per_token, strategy_requests(k, sets), o->w.n_requests, err))
            return err_prefix(err, "--strategies %s", STRATEGY_NAMES[k]);
    }
    return 0;
}

/* Runs every chosen strategy; nothing is printed on stdout yet. */
static int run_all(const Options *o, const RequestSets *sets, KvsimResult results[N_STRATEGIES], Err *err)
{
    memset(results, 0, N_STRATEGIES * sizeof results[0]);
    Model shape = shape_of(&o->shape);
    size_t per_token = (size_t)kvmath_bytes_per_token(&o->shape, o->dtype);
    for (int k = 0; k < N_STRATEGIES; k++) {
        if (!o->use[k])
            continue;
        CliOptions co;
        ServeChapter ch = strategy_chapter(k, o, &co);
        char label[32];
        strategy_label(k, o, label, sizeof label);
        if (o->verbose)
            fprintf(stderr, "%s: running %s\n", PROGRAM, label);
        int rc = o->latency ? kvsim_run_timed(ch, &shape, &co, per_token, strategy_requests(k, sets),
                                              o->w.n_requests, &o->clock, &results[k], err)
                            : kvsim_run(ch, &shape, &co, per_token, strategy_requests(k, sets), o->w.n_requests,
                                        o->verbose ? stderr : NULL, &results[k], err);
        if (rc)
            return err_prefix(err, "%s", label);
    }
    return 0;
}

/* --json, through a temporary file renamed into place (outfile.h). */
static int write_json(const Options *o, const KvsimResult results[N_STRATEGIES], Err *err)
{
    OutFile out;
    if (outfile_open(&out, "--json", o->json_path, err))
        return -1;
    int fig2 = o->scenario && o->scenario->fig2;
    JsonWriter j;
    json_init(&j, out.f, 1);
    json_begin_object(&j, NULL);
    json_setup(&j, o);
    json_begin_array(&j, "strategies");
    for (int i = 0; i < N_STRATEGIES; i++) {
        int k = ORDER[i];
        char label[32];
        strategy_label(k, o, label, sizeof label);
        if (o->use[k])
            json_result(&j, label, paper_figure(o, k), fig2, &results[k]);
    }
    json_end_array(&j);
    if (fig2)
        json_fig2(&j, o, results);
    json_end_object(&j);
    fputc('\n', out.f);
    return outfile_commit(&out, err);
}

/* --latency: each strategy's latency on the cost model's clock (ms). */
static void print_latency(const Options *o, const KvsimResult *results)
{
    char machine[256];
    int w = label_width(o), slo = o->clock.slo.ttft_s > 0 || o->clock.slo.tpot_s > 0;
    printf("\nlatency on the cost model's clock (%s)\n",
           cost_machine_describe(&o->clock.machine, machine, sizeof machine));
    printf("%-*s | %9s %9s | %9s %9s | %9s | %9s %9s | %8s %9s%s\n", w, "strategy", "TTFT p50", "TTFT p99",
           "TPOT p50", "TPOT p99", "ITL p99", "e2e p50", "e2e p99", "req/s", "tokens/s", slo ? " | goodput/s (met)" : "");
    for (int i = 0; i < N_STRATEGIES; i++) {
        int k = ORDER[i];
        if (!o->use[k])
            continue;
        char label[32];
        strategy_label(k, o, label, sizeof label);
        const LatencySummary *l = &results[k].latency;
        printf("%-*s | %9.1f %9.1f | %9.1f %9.1f | %9.1f | %9.1f %9.1f | %8.3f %9.1f", w, label, 1e3 * l->ttft.p50,
               1e3 * l->ttft.p99, 1e3 * l->tpot.p50, 1e3 * l->tpot.p99, 1e3 * l->itl.p99, 1e3 * l->e2e.p50,
               1e3 * l->e2e.p99, l->requests_per_s, l->tokens_per_s);
        if (slo)
            printf(" | %9.3f (%d)", l->goodput_per_s, l->good);
        printf("\n");
    }
    printf("milliseconds; percentiles nearest-rank; the simulated run's duration: first arrival to last output\n");
}

static void print_results(const Options *o, const SimRequestSpec *reqs, const KvsimResult results[N_STRATEGIES])
{
    int width = label_width(o);
    print_setup(o, reqs);
    print_header(width);
    for (int i = 0; i < N_STRATEGIES; i++) {
        int k = ORDER[i];
        char label[32];
        strategy_label(k, o, label, sizeof label);
        if (o->use[k])
            print_row(width, label, &results[k]);
    }
    print_paper(o, results);
    if (o->scenario && o->scenario->fig2)
        print_fig2(o, results);
    if (o->latency)
        print_latency(o, results);
}

static int fail(const char *msg)
{
    fprintf(stderr, "%s: error: %s\n", PROGRAM, msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (kvsim_prefix_wanted(argc, argv)) /* chapter 5's caches: tools/lib/kvsim_prefix.c */
        return kvsim_prefix_main(argc, argv);
    if (kvsim_swap_requested(argc, argv)) /* a model of costs, not a run: tools/lib/kvsim_swap.c */
        return kvsim_swap_main(argc, argv);
    Options o;
    Err err = {{0}};
    int rc = parse_options(&o, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc < 0)
        return fail(err.msg);
    /* [n_requests] each: what the workload asks for, exactly the output,
     * the output rounded up to a power of two. */
    SimRequestSpec *reqs = mem_alloc_array(MEM_ACTIVATIONS, 3u * (size_t)o.w.n_requests, sizeof *reqs);
    if (!reqs)
        return fail("out of memory for the requests");
    RequestSets sets = {reqs, reqs + o.w.n_requests, reqs + 2 * (size_t)o.w.n_requests};
    kvsim_make_requests(&o.w, o.shape.seq_len, o.w.filter.max_total > 0 ? &o.fit : NULL, reqs);
    kvsim_knowing_outputs(reqs, o.w.n_requests, sets.oracle, sets.out_pow2);
    /* Everything that can be refused is refused before the work, and the
     * table comes only once the JSON is safely written: a failure is then
     * the one line, with nothing on stdout. */
    if (check_all(&o, &sets, &err) == 0 && o.json_path)
        outfile_check("--json", o.json_path, &err);
    KvsimResult results[N_STRATEGIES];
    rc = err.msg[0] ? -1 : run_all(&o, &sets, results, &err);
    if (rc == 0 && o.json_path)
        rc = write_json(&o, results, &err);
    if (rc == 0)
        print_results(&o, reqs, results);
    mem_free(reqs);
    if (rc)
        return fail(err.msg);
    printf("\nconc.: requests running at once. KV util.: used / reserved, averaged over steps. token states ..\n"
           "extern frag.: the PagedAttention paper's split of reserved KV byte-steps (they add up to 100%%).\n"
           "held by fin: the share reserved by requests that had already finished (chapter 3's static batching\n"
           "frees a batch's regions when the whole batch is done, and counts what they hold as token states; the\n"
           "orca-* rows batch continuously and free a region when its request finishes); live tokens: token\n"
           "states of requests still running. served/step: requests completed per simulated step, idle steps\n"
           "included; latency: mean steps from arrival to finish.\n");
    return 0;
}
