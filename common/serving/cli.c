#define _GNU_SOURCE /* getopt_long */
#include "cli.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrivals.h"
#include "cost_model.h"
#include "kv_dtype.h"
#include "parse.h"

enum {
    OPT_MODEL = 1000, OPT_TOKENIZER, OPT_PROMPT, OPT_STEPS, OPT_TEMPERATURE, OPT_TOP_P, OPT_SEED, OPT_JSON,
    OPT_THREADS, OPT_QUIET, OPT_KV_ALLOC, OPT_REQUESTS, OPT_OUT, OPT_KV_BUDGET, OPT_MAX_BATCH, OPT_RESERVE,
    OPT_BATCHING, OPT_ARENA, OPT_BLOCK_SIZE, OPT_N, OPT_BEAM, OPT_WATERMARK, OPT_MAX_NUM_BATCHED_TOKENS,
    OPT_MAX_NUM_SEQS, OPT_PREEMPT, OPT_SWAP_SPACE, OPT_DEVICE, OPT_KV_DTYPE, OPT_WEIGHT_DTYPE, OPT_PREFIX_CACHE,
    OPT_TRACE, OPT_SHOW_TABLES, OPT_CHAT, OPT_CLOCK, OPT_MACHINE, OPT_ARRIVAL_RATE, OPT_ARRIVAL, OPT_ARRIVAL_SEED,
    OPT_SLO_TTFT, OPT_SLO_TPOT, OPT_HELP,
    OPT_TOP_K, OPT_MIN_P, OPT_REPETITION_PENALTY, OPT_FREQUENCY_PENALTY, OPT_PRESENCE_PENALTY
};

typedef struct {
    const char *name;
    int id;
    unsigned feature; /* 0: every program */
    const char *arg;  /* metavar, NULL for a flag */
    const char *help;
} OptionSpec;

static const OptionSpec SPECS[] = {
    {"model", OPT_MODEL, CLI_MODEL, "FILE", "checkpoint: llama2.c (legacy or ak42 v1) or GGUF (e.g. SmolLM2-135M-Instruct.Q4_1.gguf, with its own tokenizer); default: stories260K from models/, then ../shared/models/, then a synthetic model"},
    {"tokenizer", OPT_TOKENIZER, CLI_MODEL, "FILE", "llama2.c tokenizer for the model (a GGUF model brings its own); default: found by vocabulary size next to the model"},
    {"prompt", OPT_PROMPT, CLI_PROMPT, "TEXT", "prompt text (default \"Once upon a time\")"},
    {"chat", OPT_CHAT, CLI_CHAT, NULL, "wrap each prompt as one user message in the model's ChatML template, with its default system message; generation stops at <|im_end|>, which is not printed (a model without a chat template is refused)"},
    {"steps", OPT_STEPS, CLI_PROMPT, "N", "new tokens to generate after the prompt (default 256; stops earlier at BOS, EOS or the end of the context)"},
    /* The sampling options in the order the sampler applies them, which is vLLM's (common/model/sampler.h). */
    {"repetition-penalty", OPT_REPETITION_PENALTY, CLI_SAMPLING, "R", "in [0.01, 100]: the logit of every token of the prompt and the output so far is divided by R when positive, multiplied by R otherwise; 1 = off (default 1)"},
    {"frequency-penalty", OPT_FREQUENCY_PENALTY, CLI_SAMPLING, "F", "in [-2, 2]: F x (times a token was generated) is subtracted from its logit; 0 = off (default 0)"},
    {"presence-penalty", OPT_PRESENCE_PENALTY, CLI_SAMPLING, "P", "in [-2, 2]: P is subtracted once from the logit of every token generated so far; 0 = off (default 0)"},
    {"temperature", OPT_TEMPERATURE, CLI_SAMPLING, "T", "0 = greedy, reproducible: the largest logit after the penalties, whatever --min-p, --top-k and --top-p say (default 0)"},
    {"min-p", OPT_MIN_P, CLI_SAMPLING, "P", "in [0,1]: drop tokens less likely than P x the most likely one; 0 = off (default 0, used only when T > 0)"},
    {"top-k", OPT_TOP_K, CLI_SAMPLING, "K", "keep the K most likely tokens (ties: the lower id); 0 = off (default 0, used only when T > 0)"},
    {"top-p", OPT_TOP_P, CLI_SAMPLING, "P", "nucleus sampling threshold in [0,1]: the most likely tokens until they hold P of what min-p and top-k left, the one that crosses P included; 0 or 1 = off (default 0.9, used only when T > 0)"},
    {"seed", OPT_SEED, CLI_SAMPLING, "N", "random seed for sampling (default 42)"},
    {"kv-alloc", OPT_KV_ALLOC, CLI_KV_ALLOC, "max|grow", "reserve the model's seq_len up front, or start small and double (default max)"},
    {"requests", OPT_REQUESTS, CLI_SERVING, "FILE", "request file: one 'max_new_tokens<TAB>prompt' per line, at most 16 MiB, 65536 bytes a line, 1048576 requests (default data/requests-mixed.tsv)"},
    {"out", OPT_OUT, CLI_SERVING, "FILE", "write one JSON object per request (JSON Lines)"},
    {"kv-budget", OPT_KV_BUDGET, CLI_SERVING, "SIZE", "memory for K/V, e.g. 512KiB, 4MiB, 2GiB (default: 8 full-length requests)"},
    {"trace", OPT_TRACE, CLI_SERVING, "FILE", "write one JSON line per step: admissions, finishes, preemptions, what each request holds (changes only) and the step's KV memory (make demo's page draws it)"},
    {"show-tables", OPT_SHOW_TABLES, CLI_SERVING, "STEP", "print on stderr what every request holds after step STEP's forward pass: its region (chapter 3) or block table (chapter 4)"},
    {"max-batch", OPT_MAX_BATCH, CLI_BATCHING, "N", "most requests in one batch (default 64)"},
    {"reserve", OPT_RESERVE, CLI_BATCHING, "max|request|pow2|grow", "how much K/V to reserve per request (default max)"},
    {"batching", OPT_BATCHING, CLI_BATCHING, "static|continuous", "static: a batch runs until its last request ends (FasterTransformer); continuous: a finished request frees its region at once, waiting ones join at every step (Orca) (default static)"},
    {"arena", OPT_ARENA, CLI_BATCHING, "first-fit|buddy", "how regions are placed: exact sizes, first fit; or blocks of a power of two of positions, merged only with their buddy (the PagedAttention paper's Orca) (default first-fit)"},
    {"block-size", OPT_BLOCK_SIZE, CLI_PAGED, "N", "tokens per KV block, a power of two from 1 to 256 (default 16)"},
    {"n", OPT_N, CLI_PAGED, "N", "samples per prompt, sharing the prompt's blocks (default 1; needs --temperature > 0 when > 1)"},
    {"beam", OPT_BEAM, CLI_PAGED, "W", "beam search with W beams per prompt, sharing blocks copy-on-write; --out holds the best beam (greedy, no --temperature or --n; --beam 1 is greedy)"},
    {"watermark", OPT_WATERMARK, CLI_PAGED, "PCT", "percent of blocks kept free when admitting, against thrashing (default 1)"},
    {"max-num-batched-tokens", OPT_MAX_NUM_BATCHED_TOKENS, CLI_PAGED, "N", "tokens one step may run, decodes first, then prompts in chunks that fit the rest (chunked prefill, as vLLM V1); no step exceeds it (default: max(seq_len, 2048) with whole prompts)"},
    {"max-num-seqs", OPT_MAX_NUM_SEQS, CLI_PAGED, "N", "most requests running at once (default: no limit, or --max-num-batched-tokens when that is given, so that every running request's decode fits a step)"},
    {"preempt", OPT_PREEMPT, CLI_PAGED, "recompute|swap", "what preemption does with a request's blocks: free them and recompute later, or copy them to the host swap space and back (default recompute)"},
    {"swap-space", OPT_SWAP_SPACE, CLI_PAGED, "SIZE", "host memory for swapped-out blocks with --preempt swap, e.g. 4MiB (default: as large as --kv-budget); when it is full, preemption recomputes"},
    {"clock", OPT_CLOCK, CLI_SERVING, "wall|model", "the clock of the latency figures: each step's measured time, or its time in the cost model of --machine, the same on any machine and any --threads (default wall; an idle server skips ahead to the next arrival either way)"},
    {"machine", OPT_MACHINE, CLI_SERVING, "NAME|FILE[,K=V]", "the cost model's machine: a100-40gb, a100-80gb, h100-80gb, h200-141gb, kvlab-cpu, or a file of build/machine-limits; ,bw=GB/s ,flops=GFLOP/s ,share=0..1 ,link=GB/s ,overhead=us ,overlap=0|1 change one figure (default kvlab-cpu; with the wall clock, each step's modelled time is compared with its measured one)"},
    {"arrival-rate", OPT_ARRIVAL_RATE, CLI_SERVING, "R", "requests arrive at random, R per second on average (Poisson), in file order from time 0 (default: as the request file says, at the start unless its lines begin @TIME)"},
    {"arrival", OPT_ARRIVAL, CLI_SERVING, "poisson:R|gamma:R:CV", "the same with the gaps' coefficient of variation CV: gamma gaps, burstier above 1 (0.05 to 10)"},
    {"arrival-seed", OPT_ARRIVAL_SEED, CLI_SERVING, "N", "seed of the arrivals (default: --seed)"},
    {"slo-ttft", OPT_SLO_TTFT, CLI_SERVING, "S", "latency objective: time to first token at most S seconds; goodput counts the requests that meet every objective"},
    {"slo-tpot", OPT_SLO_TPOT, CLI_SERVING, "S", "latency objective: time per output token at most S seconds"},
    {"prefix-cache", OPT_PREFIX_CACHE, CLI_PREFIX, "off|hash|radix", "share the K/V of full blocks between requests with the same leading tokens: hash = vLLM's chain of block hashes, radix = SGLang's radix tree, off = chapter 4 (default hash)"},
    {"device", OPT_DEVICE, CLI_DEVICE, "cpu|cuda", "where to run (default cpu)"},
    {"kv-dtype", OPT_KV_DTYPE, CLI_DEVICE, "f32|f16|bf16|int8|fp8-e4m3|fp8-e5m2", "element type of the K/V cache (default f32): every type in chapter 2's CPU cache (int8 with one scale per token and KV head, fp8 saturating), f32, f16 or bf16 on the device"},
    {"weight-dtype", OPT_WEIGHT_DTYPE, CLI_DEVICE, "f32|f16|bf16", "element type of the weights: on the CPU, f32 dequantizes a quantized (GGUF) model at load (default: as the file stores them); on the device, f32 (default), or f16/bf16 with cublasGemmEx"},
    {"threads", OPT_THREADS, CLI_MODEL, "N", "CPU threads, 1 to 1024; 0 or none: OMP_NUM_THREADS for models 256 wide or more when it is set, else 1 (results never depend on it)"},
    {"json", OPT_JSON, CLI_MODEL, "FILE", "write the run report (memory, timing) as one JSON object"},
    {"quiet", OPT_QUIET, CLI_MODEL, NULL, "do not print the memory table on stderr"},
    {"help", OPT_HELP, 0, NULL, "show this help and exit"},
};
#define N_SPECS (sizeof SPECS / sizeof SPECS[0])

void cli_defaults(CliOptions *o)
{
    memset(o, 0, sizeof *o);
    o->prompt = "Once upon a time";
    o->steps = 256;
    o->temperature = 0.0f;
    o->top_p = 0.9f;
    o->top_k = 0;
    o->min_p = 0.0f;
    o->repetition_penalty = 1.0f;
    o->frequency_penalty = 0.0f;
    o->presence_penalty = 0.0f;
    o->seed = 42;
    o->kv_alloc = "max";
    o->max_batch = 64;
    o->reserve = "max";
    o->batching = "static";
    o->arena = "first-fit";
    o->block_size = 16;
    o->n_samples = 1;
    o->watermark = 1;
    o->device = "cpu";
    o->kv_dtype = "f32";
    o->weight_dtype = NULL; /* as stored on the CPU, f32 on the device */
    o->prefix_cache = "hash";
    o->show_tables = -1;
}

static int accepted(const CliProgram *p, const OptionSpec *s)
{
    return s->feature == 0 || (p->features & s->feature);
}

static void print_help(const CliProgram *p)
{
    printf("Usage: %s [options]\n%s\n\nOptions:\n", p->name, p->summary);
    for (size_t i = 0; i < N_SPECS; i++) {
        const OptionSpec *s = &SPECS[i];
        if (!accepted(p, s))
            continue;
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
        printf("  %-30s %s\n", left, s->help);
    }
    if (p->features & CLI_SERVING)
        printf("\nNothing goes to stdout: each request's text goes to --out FILE (JSON Lines); tables and progress "
               "go to stderr.\n");
    else if (p->features & CLI_CHAT)
        printf("\nstdout carries only the text (prompt, generated text, newline; with --chat, the answer and a "
               "newline); tables and progress go to stderr.\n");
    else
        printf("\nstdout carries only the text (prompt, generated text, newline); tables and progress go to stderr.\n");
}

const char *cli_option_value(const char *name, int i, int argc, char **argv, int *used, Err *err)
{
    size_t n = strlen(name);
    const char *arg = argv[i];
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=') {
        *used = 1;
        return arg + n + 1;
    }
    if (arg[n] != '\0')
        return NULL;
    if (i + 1 >= argc) {
        err_set(err, "%s needs a value", name);
        *used = -1;
        return NULL;
    }
    *used = 2;
    return argv[i + 1];
}

int cli_take_options(int *argc, char **argv, int (*take)(int i, int argc, char **argv, void *ctx, Err *err), void *ctx,
                     Err *err)
{
    int kept = 1, i = 1;
    while (i < *argc && strcmp(argv[i], "--") != 0) {
        int used = take(i, *argc, argv, ctx, err);
        if (used < 0)
            return -1;
        if (used == 0)
            argv[kept++] = argv[i++];
        else
            i += used;
    }
    while (i < *argc) /* "--" and whatever follows it: never the chapter's */
        argv[kept++] = argv[i++];
    for (int j = kept; j < *argc; j++) /* entries past kept were taken, already read */
        argv[j] = NULL;
    *argc = kept;
    return 0;
}

int cli_parse_long(const char *name, const char *text, long min, long max, long *out, Err *err)
{
    return parse_long(text, min, max, out, err) ? err_prefix(err, "--%s", name) : 0;
}

static int parse_float(const char *name, const char *text, float min, float max, float *out, Err *err)
{
    double v;
    if (parse_double(text, min, max, &v, err))
        return err_prefix(err, "--%s", name);
    *out = (float)v;
    return 0;
}

/* An objective in seconds: more than 0, at most a day. */
static int parse_seconds(const char *name, const char *text, double *out, Err *err)
{
    if (parse_double(text, 0.0, 86400.0, out, err))
        return err_prefix(err, "--%s (seconds)", name);
    if (*out <= 0.0)
        return err_set(err, "--%s: an objective of %s s can never be met; give more than 0 seconds", name, text);
    return 0;
}

static int parse_choice(const char *name, const char *text, const char *const *choices, const char **out, Err *err)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(text, choices[i]) == 0) {
            *out = choices[i];
            return 0;
        }
    char list[128] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return err_set(err, "--%s: '%s' is not one of %s", name, text, list);
}

/* The arrival and objective options: one per call. */
static int apply_latency_option(int id, const char *name, const char *arg, CliOptions *o, Err *err)
{
    ArrivalProcess p;
    switch (id) {
    case OPT_ARRIVAL_RATE:
        if (parse_double(arg, ARRIVAL_RATE_MIN, ARRIVAL_RATE_MAX, &o->arrival_rate, err))
            return err_prefix(err, "--%s", name);
        o->arrival_cv = 1.0;
        return 0;
    case OPT_ARRIVAL:
        if (arrival_parse(arg, &p, err)) return err_prefix(err, "--%s", name);
        o->arrival_rate = p.rate;
        o->arrival_cv = p.cv;
        return 0;
    case OPT_ARRIVAL_SEED: {
        uint64_t seed;
        if (parse_u64(arg, UINT64_MAX, &seed, err)) return err_prefix(err, "--%s", name);
        o->arrival_seed = seed;
        o->arrival_seed_given = 1;
        return 0;
    }
    case OPT_SLO_TTFT: return parse_seconds(name, arg, &o->slo_ttft, err);
    case OPT_SLO_TPOT: return parse_seconds(name, arg, &o->slo_tpot, err);
    }
    return err_set(err, "--%s: not handled", name);
}

static int apply_option(int id, const char *name, const char *arg, CliOptions *o, Err *err)
{
    static const char *const kv_allocs[] = {"max", "grow", NULL};
    static const char *const reserves[] = {"max", "request", "pow2", "grow", NULL};
    static const char *const batchings[] = {"static", "continuous", NULL};
    static const char *const arenas[] = {"first-fit", "buddy", NULL};
    static const char *const devices[] = {"cpu", "cuda", NULL};
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL};
    static const char *const preempts[] = {"recompute", "swap", NULL};
    static const char *const prefix_caches[] = {"off", "hash", "radix", NULL};
    static const char *const clocks[] = {"wall", "model", NULL};
    long v = 0;
    switch (id) {
    case OPT_MODEL: o->model_path = arg; return 0;
    case OPT_TOKENIZER: o->tokenizer_path = arg; return 0;
    case OPT_PROMPT: o->prompt = arg; return 0;
    case OPT_JSON: o->json_path = arg; return 0;
    case OPT_REQUESTS: o->requests_path = arg; return 0;
    case OPT_OUT: o->out_path = arg; return 0;
    case OPT_TRACE: o->trace_path = arg; return 0;
    case OPT_SHOW_TABLES:
        if (cli_parse_long(name, arg, 0, 1L << 40, &v, err)) return -1;
        o->show_tables = v; return 0;
    case OPT_QUIET: o->quiet = 1; return 0;
    case OPT_CHAT: o->chat = 1; return 0;
    case OPT_STEPS:
        if (cli_parse_long(name, arg, 1, 1 << 20, &v, err)) return -1;
        o->steps = (int)v; return 0;
    case OPT_THREADS:
        if (cli_parse_long(name, arg, 0, 1024, &v, err)) return -1;
        o->threads = (int)v; return 0;
    case OPT_MAX_BATCH:
        if (cli_parse_long(name, arg, 1, 4096, &v, err)) return -1;
        o->max_batch = (int)v; return 0;
    case OPT_N:
        if (cli_parse_long(name, arg, 1, 256, &v, err)) return -1;
        o->n_samples = (int)v; return 0;
    case OPT_BEAM:
        if (cli_parse_long(name, arg, 1, 64, &v, err)) return -1;
        o->beam_width = (int)v; return 0;
    case OPT_WATERMARK:
        if (cli_parse_long(name, arg, 0, 50, &v, err)) return -1;
        o->watermark = (int)v; return 0;
    case OPT_MAX_NUM_BATCHED_TOKENS:
        if (cli_parse_long(name, arg, 1, 1 << 20, &v, err)) return -1;
        o->max_num_batched_tokens = (int)v; return 0;
    case OPT_MAX_NUM_SEQS:
        if (cli_parse_long(name, arg, 1, 1 << 20, &v, err)) return -1;
        o->max_num_seqs = (int)v; return 0;
    case OPT_SWAP_SPACE:
        if (cli_parse_size(arg, &o->swap_space, err)) return err_prefix(err, "--swap-space");
        if (o->swap_space == 0) return err_set(err, "--swap-space: the swap space must be more than 0 bytes");
        return 0;
    case OPT_BLOCK_SIZE:
        if (cli_parse_long(name, arg, 1, 256, &v, err)) return -1;
        if (v & (v - 1))
            return err_set(err, "--block-size: %ld is not a power of two (1, 2, 4, ..., 256)", v);
        o->block_size = (int)v; return 0;
    case OPT_SEED: {
        uint64_t seed;
        if (parse_u64(arg, UINT64_MAX, &seed, err)) return err_prefix(err, "--seed");
        o->seed = seed; return 0;
    }
    case OPT_TEMPERATURE: return parse_float(name, arg, 0.0f, 100.0f, &o->temperature, err);
    case OPT_TOP_P: return parse_float(name, arg, 0.0f, 1.0f, &o->top_p, err);
    case OPT_TOP_K:
        if (cli_parse_long(name, arg, 0, INT32_MAX, &v, err)) return -1;
        o->top_k = (int)v; return 0;
    case OPT_MIN_P: return parse_float(name, arg, 0.0f, 1.0f, &o->min_p, err);
    case OPT_REPETITION_PENALTY: return parse_float(name, arg, 0.01f, 100.0f, &o->repetition_penalty, err);
    case OPT_FREQUENCY_PENALTY: return parse_float(name, arg, -2.0f, 2.0f, &o->frequency_penalty, err);
    case OPT_PRESENCE_PENALTY: return parse_float(name, arg, -2.0f, 2.0f, &o->presence_penalty, err);
    case OPT_KV_BUDGET:
        if (cli_parse_size(arg, &o->kv_budget, err)) return err_prefix(err, "--kv-budget");
        if (o->kv_budget == 0) return err_set(err, "--kv-budget: the budget must be more than 0 bytes");
        return 0;
    case OPT_KV_ALLOC: return parse_choice(name, arg, kv_allocs, &o->kv_alloc, err);
    case OPT_RESERVE: return parse_choice(name, arg, reserves, &o->reserve, err);
    case OPT_BATCHING: return parse_choice(name, arg, batchings, &o->batching, err);
    case OPT_ARENA: return parse_choice(name, arg, arenas, &o->arena, err);
    case OPT_DEVICE: return parse_choice(name, arg, devices, &o->device, err);
    case OPT_PREEMPT: return parse_choice(name, arg, preempts, &o->preempt, err);
    case OPT_KV_DTYPE: {
        KvDtype t;
        if (kv_dtype_parse(arg, &t, err))
            return err_prefix(err, "--%s", name);
        o->kv_dtype = kv_dtype_name(t);
        return 0;
    }
    case OPT_WEIGHT_DTYPE: return parse_choice(name, arg, dtypes, &o->weight_dtype, err);
    case OPT_PREFIX_CACHE: return parse_choice(name, arg, prefix_caches, &o->prefix_cache, err);
    case OPT_CLOCK: return parse_choice(name, arg, clocks, &o->clock, err);
    case OPT_MACHINE: {
        CostMachine m; /* checked now, loaded again when the run starts */
        if (cost_machine_load(arg, &m, err)) return -1;
        o->machine = arg; return 0;
    }
    default: return apply_latency_option(id, name, arg, o, err);
    }
    return err_set(err, "--%s: not handled", name);
}

CliResult cli_parse(const CliProgram *prog, int argc, char **argv, CliOptions *opts, Err *err)
{
    cli_defaults(opts);
    struct option longopts[N_SPECS + 1];
    int n = 0;
    for (size_t i = 0; i < N_SPECS; i++) {
        if (!accepted(prog, &SPECS[i]))
            continue;
        longopts[n] = (struct option){SPECS[i].name, SPECS[i].arg ? required_argument : no_argument, NULL,
                                      SPECS[i].id};
        n++;
    }
    longopts[n] = (struct option){0, 0, 0, 0};
    int seen_arrival_rate = 0, seen_arrival = 0;
    opterr = 0; /* our own one-line messages instead of getopt's */
    optind = 1;
    for (;;) {
        int index = -1;
        int c = getopt_long(argc, argv, ":h", longopts, &index);
        if (c == -1)
            break;
        if (c == 'h' || c == OPT_HELP) {
            print_help(prog);
            return CLI_EXIT_OK;
        }
        if (c == ':') {
            err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
            return CLI_ERROR;
        }
        if (c == '?') {
            /* optopt names a bad short option; a bad long one is the
             * argument getopt just stepped over. */
            if (optopt > 0 && optopt < 256)
                err_set(err, "unknown option '-%c' (see --help)", optopt);
            else
                err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
            return CLI_ERROR;
        }
        const char *name = index >= 0 ? longopts[index].name : "?";
        seen_arrival_rate += c == OPT_ARRIVAL_RATE;
        seen_arrival += c == OPT_ARRIVAL;
        if (apply_option(c, name, optarg, opts, err))
            return CLI_ERROR;
    }
    if (optind < argc) {
        err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
        return CLI_ERROR;
    }
    if (opts->beam_width > 0 && (opts->n_samples > 1 || opts->temperature > 0.0f)) {
        err_set(err, "--beam %d searches deterministically: it takes neither --n nor --temperature > 0",
                opts->beam_width);
        return CLI_ERROR;
    }
    if (opts->beam_width > 0 && (opts->max_num_batched_tokens || opts->max_num_seqs || opts->preempt ||
                                 opts->swap_space)) {
        err_set(err, "--beam %d schedules its groups of beams itself (whole prompts, recomputed when preempted): it "
                "takes no --max-num-batched-tokens, --max-num-seqs, --preempt or --swap-space", opts->beam_width);
        return CLI_ERROR;
    }
    int arrivals = (seen_arrival_rate != 0) + (seen_arrival != 0);
    if (arrivals > 1) {
        err_set(err, "--arrival-rate and --arrival both say how requests arrive: give one");
        return CLI_ERROR;
    }
    if (!opts->arrival_seed_given)
        opts->arrival_seed = opts->seed;
    if (strcmp(opts->device, "cpu") == 0 && strcmp(opts->kv_dtype, "f32") != 0 && !(prog->features & CLI_KV_DTYPE)) {
        err_set(err, "--kv-dtype %s: %s stores K/V in f32 on the CPU (chapter 2 stores every type; --device cuda "
                "stores f16 and bf16)", opts->kv_dtype, prog->name);
        return CLI_ERROR;
    }
    if (opts->n_samples > 1 && opts->temperature <= 0.0f) {
        err_set(err, "--n %d needs --temperature > 0: greedy samples of one prompt would all be the same",
                opts->n_samples);
        return CLI_ERROR;
    }
    return CLI_RUN;
}

SamplingParams cli_sampling_params(const CliOptions *o)
{
    return (SamplingParams){.temperature = o->temperature, .top_p = o->top_p, .top_k = o->top_k, .min_p = o->min_p,
                            .repetition_penalty = o->repetition_penalty,
                            .frequency_penalty = o->frequency_penalty, .presence_penalty = o->presence_penalty};
}

int cli_latency_asked(const CliOptions *o)
{
    return o->clock || o->machine || o->arrival_rate > 0 || o->slo_ttft > 0 || o->slo_tpot > 0;
}

int cli_parse_size(const char *text, size_t *bytes, Err *err)
{
    _Static_assert(sizeof(size_t) == sizeof(uint64_t), "sizes are 64-bit");
    uint64_t b;
    if (parse_size(text, &b, err))
        return -1;
    *bytes = (size_t)b;
    return 0;
}

const char *cli_format_bytes(char *buf, size_t n, double bytes)
{
    return format_bytes(buf, n, bytes);
}
