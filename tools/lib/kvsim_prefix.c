/* kvsim's prefix-caching scenarios: chapter 5's caches (chapters/ch05-prefix/)
 * on chapter 4's server, driven without a model at 7B and 13B scale on a
 * synthetic multi-turn chat trace. See kvsim_prefix.h. */
#define _GNU_SOURCE /* getopt_long */
#include "kvsim_prefix.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "kvmath.h"
#include "mem.h"
#include "outfile.h"

#define PROGRAM "kvsim"

/* ------------------------------------------------------------ the trace */

/* Token ids: the system prompt's are shared, each user turn has its own,
 * answers hold what a simulated request generates. */
#define SYSTEM_TOKEN_BASE 1000
#define USER_TOKEN_BASE 100000

static int cmp_arrival(const void *a, const void *b)
{
    const KvsimPrefixRequest *x = a, *y = b;
    if (x->spec.arrival_step != y->spec.arrival_step)
        return x->spec.arrival_step < y->spec.arrival_step ? -1 : 1;
    if (x->conversation != y->conversation)
        return x->conversation < y->conversation ? -1 : 1;
    return x->turn - y->turn;
}

/* One conversation's turns: the prompt of turn k is the system prompt and
 * every earlier user turn and answer, then user turn k. */
static int conversation_turns(const KvsimPrefixTrace *t, int seq_len, int c, double start, KvsimRng *rng,
                              KvsimPrefixRequest *out)
{
    int n = 0, history = t->system_tokens;
    double arrival = start;
    for (int k = 0; k < t->turns; k++) {
        int user = kvsim_dist_draw(&t->user, 1, t->max_turn_tokens, rng);
        int answer = kvsim_dist_draw(&t->answer, 1, t->max_turn_tokens, rng);
        int prompt = history + user;
        if (prompt + answer > seq_len)
            break; /* the context is full: the conversation ends */
        out[n++] = (KvsimPrefixRequest){
            .spec = {.prompt_tokens = prompt, .max_new_tokens = answer, .output_tokens = answer,
                     .arrival_step = (long)arrival},
            .conversation = c, .turn = k};
        history = prompt + answer;
        arrival += answer + t->think_steps;
    }
    return n;
}

int kvsim_prefix_make_trace(const KvsimPrefixTrace *t, int seq_len, KvsimPrefixRequest *out)
{
    KvsimRng lengths, starts;
    kvsim_rng_seed(&lengths, t->seed);
    kvsim_rng_seed(&starts, t->seed ^ 0x5851f42d4c957f2dULL);
    int n = 0;
    double start = 0.0;
    for (int c = 0; c < t->conversations; c++) {
        if (c > 0 && t->rate > 0)
            start += -log(1.0 - kvsim_rng_uniform(&starts)) / t->rate;
        n += conversation_turns(t, seq_len, c, start, &lengths, out + n);
    }
    qsort(out, (size_t)n, sizeof *out, cmp_arrival);
    return n;
}

/* Each turn k of the request's conversation, found in the trace, gives
 * its user tokens (up to the end of its prompt) and, before the request's
 * own turn, its answer. */
void kvsim_prefix_write_tokens(const KvsimPrefixTrace *t, const KvsimPrefixRequest *reqs, ServingRun *run)
{
    for (int i = 0; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        if (r->n_prompt == 0)
            continue; /* rejected */
        int *tok = r->tokens, pos = 0;
        tok[pos++] = TOKEN_BOS;
        for (; pos < t->system_tokens && pos < r->n_prompt; pos++)
            tok[pos] = SYSTEM_TOKEN_BASE + pos;
        /* The earlier turns of this conversation, in order: find each in the trace. */
        for (int k = 0; k <= reqs[i].turn; k++) {
            const KvsimPrefixRequest *turn = NULL;
            for (int j = 0; j < run->n_reqs && !turn; j++)
                if (reqs[j].conversation == reqs[i].conversation && reqs[j].turn == k)
                    turn = &reqs[j];
            int user_end = turn->spec.prompt_tokens;
            for (int u = 0; pos < user_end; pos++, u++)
                tok[pos] = USER_TOKEN_BASE + (reqs[i].conversation * 64 + k) * 1024 + u; /* u < max_turn_tokens */
            if (k < reqs[i].turn)
                for (int a = 0; a < turn->spec.output_tokens; a++)
                    tok[pos++] = SERVING_SIM_TOKEN;
        }
    }
}

/* ------------------------------------------------------------ one run */

static void collect(const PrefixCache *c, const PagedServer *s, const ServingRun *run, const KvsimPrefixRequest *reqs,
                    KvsimPrefixResult *res)
{
    memset(res, 0, sizeof *res);
    res->query_tokens = c->query_tokens;
    res->prefill_computed = c->query_tokens - c->hit_tokens;
    res->hit_rate = prefix_cache_hit_rate(c);
    res->evictions = c->mode == PREFIX_CACHE_HASH ? c->hash.evictions : c->mode == PREFIX_CACHE_RADIX ? c->radix.evictions : 0;
    res->cached_free_peak = c->cached_free_peak;
    res->shared_at_peak = c->shared_at_peak;
    res->held_peak = c->held_peak;
    res->preemptions = s->preemptions;
    res->max_concurrent = run->max_concurrent;
    res->steps = run->step;
    double wait = 0, latency = 0;
    int done = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->finish == REQ_FINISH_REJECTED)
            continue;
        done++;
        wait += (double)(r->admitted_step + 1 - r->arrival_step);
        latency += (double)(r->finished_step + 1 - r->arrival_step);
        for (int j = 0; j < run->n_reqs; j++)
            if (reqs[j].conversation == reqs[i].conversation && reqs[j].turn == reqs[i].turn - 1 &&
                run->reqs[j].finished_step >= r->arrival_step)
                res->early_turns++;
    }
    res->mean_wait = done ? wait / done : 0;
    res->mean_latency = done ? latency / done : 0;
}

int kvsim_prefix_run(const Model *shape, const CliOptions *o, size_t kv_bytes_per_token, const KvsimPrefixTrace *t,
                     const KvsimPrefixRequest *reqs, int n, PrefixCacheMode mode, KvsimPrefixResult *res, Err *err)
{
    SimRequestSpec *specs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof *specs);
    if (!specs)
        return err_set(err, "out of memory for %d requests", n);
    for (int i = 0; i < n; i++)
        specs[i] = reqs[i].spec;
    ServingRun run;
    int rc = serving_sim_init(&run, shape, o, kv_bytes_per_token, specs, n, err);
    mem_free(specs);
    if (rc)
        return -1;
    kvsim_prefix_write_tokens(t, reqs, &run);
    PagedServer *server = NULL;
    PrefixCache *cache = NULL;
    KvsimProgress progress = {prefix_cache_mode_name(mode), stderr, 0.0}; /* a line every 5 s of a long run */
    if (serving_add_observer(&run, kvsim_progress, &progress, NULL, err) || paged_check(&run, err) ||
        prefix_serve(&run, mode, &server, &cache, err))
        rc = -1;
    if (rc == 0)
        collect(cache, server, &run, reqs, res);
    prefix_cache_close(cache);
    paged_close(server);
    serving_run_free(&run);
    return rc;
}

/* ------------------------------------------------------------ the scenarios */

typedef struct {
    const char *name;
    const char *what;
    const char *preset;  /* kvmath preset */
    const char *gpu;     /* kvsim GPU preset */
    uint64_t weights;    /* bytes */
    KvsimPrefixTrace trace;
} PrefixScenario;

static const PrefixScenario SCENARIOS[] = {
    {"prefix-multiturn-7b",
     "LLaMA-7B in fp16 on an A100 40 GB (14 GB of weights, 4 GB of activations, 2 GB reserved): 300 chat "
     "conversations of up to 6 turns sharing a 400-token system prompt",
     "llama-7b", "a100-40gb", 14 * KVMATH_GB,
     {.conversations = 300, .turns = 6, .system_tokens = 400, .user = {KVSIM_LOGNORMAL, 60, 0.8},
      .answer = {KVSIM_LOGNORMAL, 200, 0.8}, .max_turn_tokens = 600, .think_steps = 50, .rate = 0.03, .seed = 1}},
    {"prefix-multiturn-13b",
     "LLaMA-13B in fp16 on an A100 80 GB (26 GB of weights, 4 GB of activations, 2 GB reserved): 500 chat "
     "conversations of up to 6 turns sharing a 400-token system prompt",
     "llama-13b", "a100-80gb", 26 * KVMATH_GB,
     {.conversations = 500, .turns = 6, .system_tokens = 400, .user = {KVSIM_LOGNORMAL, 60, 0.8},
      .answer = {KVSIM_LOGNORMAL, 200, 0.8}, .max_turn_tokens = 600, .think_steps = 50, .rate = 0.05, .seed = 1}},
};
#define N_SCENARIOS (int)(sizeof SCENARIOS / sizeof SCENARIOS[0])

int kvsim_prefix_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--scenario") == 0 && i + 1 < argc && strncmp(argv[i + 1], "prefix-", 7) == 0)
            return 1;
        if (strncmp(a, "--scenario=prefix-", 18) == 0)
            return 1;
    }
    return 0;
}

typedef struct {
    const PrefixScenario *scenario;
    KvsimPrefixTrace trace;
    int block_size;
    const char *json_path;
} PrefixOptions;

static void usage(void)
{
    printf("Usage: %s --scenario NAME [options]\n"
           "Chapter 5's prefix caches (off, hash, radix) on chapter 4's paged server, their real code in\n"
           "accounting-only mode, on a synthetic multi-turn chat trace at real-model scale.\n\n"
           "  --scenario NAME      prefix-multiturn-7b or prefix-multiturn-13b\n"
           "  --block-size N       tokens per block, a power of two from 1 to %d (default 16)\n"
           "  --conversations N    conversations in the trace (default: the scenario's)\n"
           "  --turns N            most turns per conversation (default: the scenario's)\n"
           "  --rate R             conversations starting per simulated step (default: the scenario's)\n"
           "  --seed N             seeds the trace (default 1)\n"
           "  --json FILE          the setup and every cache's numbers as JSON\n"
           "  --help               show this help\n",
           PROGRAM, BLOCK_SIZE_MAX);
    for (int i = 0; i < N_SCENARIOS; i++)
        printf("\n%s\n  %s\n", SCENARIOS[i].name, SCENARIOS[i].what);
}

static int parse_number(const char *name, const char *text, long lo, long hi, long *out, Err *err)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return err_set(err, "--%s: '%s' is not a whole number from %ld to %ld", name, text, lo, hi);
    *out = v;
    return 0;
}

static const PrefixScenario *find_scenario(const char *name)
{
    for (int i = 0; i < N_SCENARIOS; i++)
        if (strcmp(name, SCENARIOS[i].name) == 0)
            return &SCENARIOS[i];
    return NULL;
}

enum { P_SCENARIO = 2000, P_BLOCK_SIZE, P_CONVERSATIONS, P_TURNS, P_RATE, P_SEED, P_JSON, P_HELP };

static int apply(PrefixOptions *o, int id, const char *name, const char *arg, Err *err)
{
    long v = 0;
    switch (id) {
    case P_SCENARIO:
        if (!(o->scenario = find_scenario(arg)))
            return err_set(err, "--scenario: '%s' is not one of prefix-multiturn-7b, prefix-multiturn-13b", arg);
        return 0;
    case P_BLOCK_SIZE:
        if (parse_number(name, arg, 1, BLOCK_SIZE_MAX, &v, err))
            return -1;
        if (v & (v - 1))
            return err_set(err, "--block-size: %ld is not a power of two from 1 to %d", v, BLOCK_SIZE_MAX);
        o->block_size = (int)v;
        return 0;
    case P_CONVERSATIONS:
        if (parse_number(name, arg, 1, 100000, &v, err))
            return -1;
        o->trace.conversations = (int)v;
        return 0;
    case P_TURNS:
        if (parse_number(name, arg, 1, 64, &v, err))
            return -1;
        o->trace.turns = (int)v;
        return 0;
    case P_RATE: {
        char *end;
        errno = 0;
        double r = strtod(arg, &end);
        if (errno || end == arg || *end || !(r > 0) || r > 1000)
            return err_set(err, "--rate: '%s' is not a number of conversations per step above 0 (at most 1000)", arg);
        o->trace.rate = r;
        return 0;
    }
    case P_SEED:
        if (parse_number(name, arg, 0, 1L << 40, &v, err))
            return -1;
        o->trace.seed = (uint64_t)v;
        return 0;
    case P_JSON: o->json_path = arg; return 0;
    }
    return err_set(err, "--%s: not handled", name);
}

/* Returns 0 to run, 1 after --help, -1 on error. The scenario is applied
 * first, so that the other options override its trace. */
static int parse_options(PrefixOptions *o, int argc, char **argv, Err *err)
{
    static const struct option longopts[] = {
        {"scenario", required_argument, NULL, P_SCENARIO}, {"block-size", required_argument, NULL, P_BLOCK_SIZE},
        {"conversations", required_argument, NULL, P_CONVERSATIONS}, {"turns", required_argument, NULL, P_TURNS},
        {"rate", required_argument, NULL, P_RATE},
        {"seed", required_argument, NULL, P_SEED}, {"json", required_argument, NULL, P_JSON},
        {"help", no_argument, NULL, P_HELP}, {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    o->block_size = 16;
    for (int pass = 0; pass < 2; pass++) {
        opterr = 0;
        optind = 1;
        for (;;) {
            int index = -1, c = getopt_long(argc, argv, ":h", longopts, &index);
            if (c == -1)
                break;
            if (c == 'h' || c == P_HELP) {
                usage();
                return 1;
            }
            if (c == ':')
                return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
            if (c == '?')
                return err_set(err, "unknown option '%s' for the prefix scenarios (see --scenario %s --help)",
                               argv[optind - 1], SCENARIOS[0].name);
            if ((pass == 0) != (c == P_SCENARIO))
                continue;
            if (apply(o, c, longopts[index].name, optarg, err))
                return -1;
            if (c == P_SCENARIO)
                o->trace = o->scenario->trace;
        }
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (see --help)", argv[optind]);
    return o->scenario ? 0 : err_set(err, "--scenario: give prefix-multiturn-7b or prefix-multiturn-13b");
}

/* ------------------------------------------------------------ the program */

static void print_setup(const PrefixOptions *o, const KvShape *s, uint64_t kv_budget, const KvsimPrefixRequest *reqs,
                        int n)
{
    const KvsimPrefixTrace *t = &o->trace;
    uint64_t per_token = kvmath_bytes_per_token(s, KV_DTYPE_FP16), block = per_token * (uint64_t)o->block_size;
    long prompts = 0, answers = 0;
    for (int i = 0; i < n; i++) {
        prompts += reqs[i].spec.prompt_tokens;
        answers += reqs[i].spec.output_tokens;
    }
    char a[64], b[64];
    printf("scenario %s: %s\n\n", o->scenario->name, o->scenario->what);
    printf("model     %s: %d layers x %d KV heads x %d head_dim, fp16: %" PRIu64 " B per token; context %d\n", s->name,
           s->n_layers, s->n_kv_heads, s->head_dim, per_token, s->seq_len);
    printf("KV budget %" PRIu64 " B (%.2f GB): %" PRIu64 " blocks of %d tokens (%s each)\n", kv_budget,
           (double)kv_budget / KVMATH_GB, kv_budget / block, o->block_size,
           cli_format_bytes(a, sizeof a, (double)block));
    printf("trace     %d conversations x up to %d turns = %d requests (seed %" PRIu64 "), starting at %.3g per step;\n"
           "          a %d-token system prompt shared by all; user turns %s, answers %s tokens (at most %d);\n"
           "          each turn repeats its conversation so far and arrives %d steps after the last answer would end\n"
           "          prompts %ld tokens in all (mean %.0f), answers %ld (mean %.0f)\n\n",
           t->conversations, t->turns, n, t->seed, t->rate, t->system_tokens, kvsim_dist_format(a, sizeof a, &t->user),
           kvsim_dist_format(b, sizeof b, &t->answer), t->max_turn_tokens, t->think_steps, prompts,
           (double)prompts / n, answers, (double)answers / n);
}

static void print_row(const char *label, const KvsimPrefixResult *r)
{
    printf("%-6s %10ld %10ld %6.1f%% %9ld %8d %7d %8ld %6d %7ld %8.1f %8.1f %6d\n", label, r->query_tokens,
           r->prefill_computed, 100 * r->hit_rate, r->evictions, r->cached_free_peak, r->shared_at_peak,
           r->preemptions, r->max_concurrent, r->steps, r->mean_wait, r->mean_latency, r->early_turns);
}

static void json_row(JsonWriter *j, const char *label, const KvsimPrefixResult *r)
{
    json_begin_object(j, NULL);
    json_string(j, "prefix_cache", label);
    json_int(j, "prefix_cache_query_tokens", r->query_tokens);
    json_int(j, "prefill_tokens_computed", r->prefill_computed);
    json_double(j, "prefix_cache_hit_rate", r->hit_rate);
    json_int(j, "prefix_cache_evictions", r->evictions);
    json_int(j, "cached_free_blocks_peak", r->cached_free_peak);
    json_int(j, "blocks_shared_at_peak", r->shared_at_peak);
    json_int(j, "blocks_held_peak", r->held_peak);
    json_int(j, "preemptions", r->preemptions);
    json_int(j, "max_concurrent", r->max_concurrent);
    json_int(j, "steps", r->steps);
    json_double(j, "mean_wait_steps", r->mean_wait);
    json_double(j, "mean_latency_steps", r->mean_latency);
    json_int(j, "turns_before_previous_answer", r->early_turns);
    json_end_object(j);
}

static int fail(const char *msg)
{
    fprintf(stderr, "%s: error: %s\n", PROGRAM, msg);
    return 1;
}

/* The budget: what the scenario's GPU leaves after weights, 4 GB of
 * activations and 2 GB reserved, as kvsim's other scenarios count. */
static int scenario_budget(const PrefixScenario *sc, uint64_t *kv, Err *err)
{
    KvsimGpu gpu;
    kvsim_gpu_preset(sc->gpu, &gpu);
    KvBudget b = {.gpu_bytes = gpu.bytes, .weights_bytes = sc->weights, .activations_bytes = 4 * KVMATH_GB,
                  .reserve_bytes = 2 * KVMATH_GB};
    return kvmath_kv_bytes_left(&b, kv, err);
}

static const PrefixCacheMode MODES[3] = {PREFIX_CACHE_OFF, PREFIX_CACHE_HASH, PREFIX_CACHE_RADIX};

/* Runs the trace under each cache mode into results[3]; nothing printed. */
static int run_all(const PrefixOptions *o, const KvShape *s, uint64_t kv_budget, const KvsimPrefixRequest *reqs, int n,
                   KvsimPrefixResult results[3], Err *err)
{
    Model shape;
    memset(&shape, 0, sizeof shape);
    shape.cfg = (ModelConfig){.dim = s->n_heads * s->head_dim, .n_layers = s->n_layers, .n_heads = s->n_heads,
                              .n_kv_heads = s->n_kv_heads, .vocab_size = 1, .seq_len = s->seq_len};
    CliOptions co;
    cli_defaults(&co);
    co.kv_budget = (size_t)kv_budget;
    co.block_size = o->block_size;
    for (int m = 0; m < 3; m++)
        if (kvsim_prefix_run(&shape, &co, (size_t)kvmath_bytes_per_token(s, KV_DTYPE_FP16), &o->trace, reqs, n,
                             MODES[m], &results[m], err))
            return err_prefix(err, "--prefix-cache %s", prefix_cache_mode_name(MODES[m]));
    return 0;
}

/* --json: written to a temporary file and renamed only when complete. */
static int write_json(const PrefixOptions *o, const KvShape *s, uint64_t kv_budget, int n,
                      const KvsimPrefixResult results[3], Err *err)
{
    OutFile out;
    if (outfile_open(&out, "--json", o->json_path, err))
        return -1;
    JsonWriter j;
    json_init(&j, out.f, 1);
    json_begin_object(&j, NULL);
    json_string(&j, "scenario", o->scenario->name);
    json_string(&j, "model", s->name);
    json_int(&j, "kv_budget_bytes", (long long)kv_budget);
    json_int(&j, "block_size", o->block_size);
    json_int(&j, "requests", n);
    json_begin_array(&j, "caches");
    for (int m = 0; m < 3; m++)
        json_row(&j, prefix_cache_mode_name(MODES[m]), &results[m]);
    json_end_array(&j);
    json_end_object(&j);
    fputc('\n', out.f);
    return outfile_commit(&out, err);
}

static void print_table(const KvsimPrefixResult results[3])
{
    printf("%-6s %10s %10s %7s %9s %8s %7s %8s %6s %7s %8s %8s %6s\n", "cache", "prefill", "prefill", "hit",
           "evicted", "cached", "shared", "preempt", "max", "steps", "wait", "latency", "early");
    printf("%-6s %10s %10s %7s %9s %8s %7s %8s %6s %7s %8s %8s %6s\n", "", "needed", "computed", "rate", "blocks",
           "free pk", "at peak", "", "conc.", "", "(steps)", "(steps)", "turns");
    for (int m = 0; m < 3; m++)
        print_row(prefix_cache_mode_name(MODES[m]), &results[m]);
}

int kvsim_prefix_main(int argc, char **argv)
{
    PrefixOptions o;
    Err err = {{0}};
    int rc = parse_options(&o, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc < 0 || (o.json_path && outfile_check("--json", o.json_path, &err)))
        return fail(err.msg);
    KvShape s;
    kvmath_preset(o.scenario->preset, &s);
    uint64_t kv_budget;
    if (scenario_budget(o.scenario, &kv_budget, &err))
        return fail(err.msg);
    int cap = o.trace.conversations * o.trace.turns;
    KvsimPrefixRequest *reqs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)cap, sizeof *reqs);
    if (!reqs)
        return fail("out of memory for the trace");
    int n = kvsim_prefix_make_trace(&o.trace, s.seq_len, reqs);
    /* Everything is computed and the JSON safely written before the first
     * line on stdout: a failure is then the one line on stderr. */
    KvsimPrefixResult results[3];
    rc = run_all(&o, &s, kv_budget, reqs, n, results, &err);
    if (rc == 0 && o.json_path)
        rc = write_json(&o, &s, kv_budget, n, results, &err);
    if (rc) {
        mem_free(reqs);
        return fail(err.msg);
    }
    print_setup(&o, &s, kv_budget, reqs, n);
    print_table(results);
    mem_free(reqs);
    printf("\nprefill needed: positions the admissions needed K/V for (prompts, and whole sequences again after a\n"
           "preemption); computed: those not found cached. evicted: cached blocks given back to the pool. cached free\n"
           "pk: most blocks no request held that still held cached K/V. shared at peak: blocks held by two or more\n"
           "requests when the most blocks were held. wait: steps from arrival to the first token; latency: to the\n"
           "last. early turns: turns that arrived before their conversation's previous answer was complete (the\n"
           "trace fixes arrivals in advance), which can find only what was cached by then.\n");
    return 0;
}
