/* kvquality: what storing K/V in a smaller type costs in quality, measured
 * as chapter 6 measures a bounded cache (teacher forcing).
 *
 *   build/kvquality                                       stories260K, 200 forced steps, greedy agreement too
 *   build/kvquality --model ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf --steps 2000 --temperature 1.0
 *
 * 1. The reference: the f32 cache (chapter 2's contiguous cache) samples
 *    --steps tokens after --prompt at --temperature with --seed (top-p 0.9,
 *    the programs' default), BOS and EOS excluded (chapter 6's --ignore-eos). Sampled, not greedy, as chapter 6
 *    samples SmolLM2's reference: a greedy text falls into a loop that every
 *    cache predicts.
 * 2. For each K/V type, that text is forced through the model with the
 *    cache storing that type: the forced perplexity; the share of steps
 *    whose greedy token is the one the f32 cache chooses at the same step;
 *    and on every --sample-every-th step, the largest error of an attention
 *    output (every layer and head) against attention over the same keys and
 *    values kept in f32, the same query: only the storage differs; beside
 *    it, the root mean square of those f32 outputs, for scale.
 * 3. With --greedy-steps N: each type's own greedy text against f32's, the
 *    share of equal tokens position by position and the first that differs.
 *
 * A benchmark, not a test: the figures are deterministic (the same bits on
 * every machine and thread count), the time is not. */
#define _GNU_SOURCE /* getopt_long */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "cli.h"
#include "forward.h"
#include "generate.h"
#include "kv_dtype.h"
#include "kvcache_dtype.h"
#include "mem.h"
#include "ops.h"
#include "parse.h"
#include "threads.h"
#include "sampler.h"

static const char *PROGRAM = "kvquality";

typedef struct {
    CliOptions cli; /* --model, --tokenizer, --prompt, --threads */
    int steps, sample_every, greedy_steps;
    float temperature;
    uint64_t seed;
} Options;

/* ------------------------------------------------------------ the seam: the cache under test and an f32 twin */

/* Every K/V goes to both caches; attention reads the cache under test, and
 * on a measured step also the f32 twin, for the same query. */
typedef struct {
    KvCacheTyped tested;  /* the type under test */
    KvCacheTyped twin;    /* the same K/V in f32 */
    int measure;          /* 1: this step compares every output with the twin's */
    int n_heads, head_dim;
    float *twin_out;      /* [n_layers][n_heads][head_dim] the twin's outputs of this step */
    float *err_abs;       /* [n_layers][n_heads] largest |tested - twin| of this step */
    double *out_sumsq;    /* [n_layers][n_heads] sum of twin^2 over the head, this step */
} TwinKv;

static void twin_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    TwinKv *t = ctx;
    kv_cache_typed_store(&t->tested, layer, e, k, v);
    kv_cache_typed_store(&t->twin, layer, e, k, v);
}

/* One decode entry per measured step, so each (layer, head) slot has one
 * writer, whichever thread runs it. */
static void twin_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                        float *scores)
{
    TwinKv *t = ctx;
    kv_cache_typed_attend(&t->tested, layer, e, head, q, out, scores);
    if (!t->measure)
        return;
    size_t slot = (size_t)layer * (size_t)t->n_heads + (size_t)head;
    float *ref = t->twin_out + slot * (size_t)t->head_dim;
    kv_cache_typed_attend(&t->twin, layer, e, head, q, ref, scores);
    float err = 0.0f;
    double sumsq = 0.0;
    for (int i = 0; i < t->head_dim; i++) {
        err = fmaxf(err, fabsf(out[i] - ref[i]));
        sumsq += (double)ref[i] * (double)ref[i];
    }
    t->err_abs[slot] = err;
    t->out_sumsq[slot] = sumsq;
}

static int twin_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    TwinKv *t = ctx;
    int twin_cached;
    return kv_cache_typed_prepare(&t->tested, n_tokens, cached, err) ||
           kv_cache_typed_prepare(&t->twin, n_tokens, &twin_cached, err);
}

static int twin_open(TwinKv *t, const ModelConfig *c, KvDtype type, int n_prompt, Err *err)
{
    memset(t, 0, sizeof *t);
    t->n_heads = c->n_heads;
    t->head_dim = model_head_dim(c);
    size_t slots = (size_t)c->n_layers * (size_t)c->n_heads;
    t->twin_out = mem_alloc(MEM_ACTIVATIONS, slots * (size_t)t->head_dim * sizeof(float));
    t->err_abs = mem_alloc(MEM_ACTIVATIONS, slots * sizeof(float));
    t->out_sumsq = mem_alloc(MEM_ACTIVATIONS, slots * sizeof(double));
    if (!t->twin_out || !t->err_abs || !t->out_sumsq)
        return err_set(err, "out of memory for the attention outputs of %zu heads", slots);
    return kv_cache_typed_init(&t->tested, c, KV_ALLOC_MAX, type, n_prompt, err) ||
           kv_cache_typed_init(&t->twin, c, KV_ALLOC_MAX, KV_DTYPE_FP32, n_prompt, err);
}

static void twin_close(TwinKv *t)
{
    kv_cache_typed_free(&t->tested);
    kv_cache_typed_free(&t->twin);
    mem_free(t->twin_out);
    mem_free(t->err_abs);
    mem_free(t->out_sumsq);
}

/* ------------------------------------------------------------ one pass over the text */

typedef struct {
    double nll;           /* sum of -log p(forced token) */
    int agree;            /* steps whose greedy token is f32's */
    float err_abs;        /* largest attention-output error */
    double out_sumsq;     /* sum of the f32 outputs' squares, measured steps */
    long out_count;       /* how many values that sum holds */
} PassResult;

/* -log p(token) under softmax(logits), in double. */
static double neg_log_prob(const float *logits, int vocab, int token)
{
    double top = -INFINITY, sum = 0.0;
    for (int i = 0; i < vocab; i++)
        top = fmax(top, (double)logits[i]);
    for (int i = 0; i < vocab; i++)
        sum += exp((double)logits[i] - top);
    return log(sum) - ((double)logits[token] - top);
}

static void fold_errors(const TwinKv *t, int n_layers, PassResult *r)
{
    for (int s = 0; s < n_layers * t->n_heads; s++) {
        r->err_abs = fmaxf(r->err_abs, t->err_abs[s]);
        r->out_sumsq += t->out_sumsq[s];
        r->out_count += t->head_dim;
    }
}

/* Feeds tokens[0..n_prompt + steps - 2] one step at a time after the
 * prompt. With a sampler (the reference), each step's token is sampled and
 * written to tokens[]; otherwise tokens[] is forced. best[] receives (or,
 * when @p compare, is compared with) each step's greedy token. */
static int run_pass(const Model *m, KvDtype type, int *tokens, int n_prompt, const Options *o, Sampler *sampler,
                    int *best, int compare, PassResult *r, Err *err)
{
    const ModelConfig *c = &m->cfg;
    TwinKv t = {0};
    KvSeam seam = {&t, twin_store, twin_attend};
    ForwardState fs = {0};
    BatchEntry *e = calloc((size_t)n_prompt, sizeof *e); /* [n_prompt] the prompt step; later steps use e[0] */
    int status = -1, cached;
    memset(r, 0, sizeof *r);
    if (!e || twin_open(&t, c, type, n_prompt, err) || forward_state_init(&fs, c, n_prompt, 1, err))
        goto done;
    for (int step = 0; step < o->steps; step++) {
        int first = step == 0 ? 0 : n_prompt + step - 1, n = step == 0 ? n_prompt : 1;
        if (twin_prepare(&t, first + n, &cached, err))
            goto done;
        for (int i = 0; i < n; i++)
            e[i] = (BatchEntry){.pos = first + i, .token = tokens[first + i], .logits_row = i == n - 1 ? 0 : -1};
        t.measure = step > 0 && step % o->sample_every == 0;
        forward(m, &fs, &seam, e, n);
        if (t.measure)
            fold_errors(&t, c->n_layers, r);
        float *logits = fs.logits; /* [vocab] */
        logits[TOKEN_BOS] = logits[TOKEN_EOS] = -INFINITY; /* the text runs to its length */
        int greedy = sampler_argmax(logits, c->vocab_size);
        if (sampler)
            tokens[n_prompt + step] = sampler_sample(sampler, logits);
        r->nll += neg_log_prob(logits, c->vocab_size, tokens[n_prompt + step]);
        if (compare)
            r->agree += greedy == best[step];
        else
            best[step] = greedy;
    }
    status = 0;
done:
    forward_state_free(&fs);
    twin_close(&t);
    free(e);
    return status;
}

/* ------------------------------------------------------------ greedy agreement */

/* Each type's own greedy text of n tokens; returns how many equal f32's,
 * position by position, and the first that differs (0: none). */
static int greedy_text(const Assets *a, KvDtype type, const char *prompt, int steps, Generation *g, Err *err)
{
    const Model *m = &a->model;
    KvCacheTyped cache = {0};
    ForwardState fs = {0};
    Sampler s = {0};
    int status = -1;
    if (generation_init(g, m, &a->tokenizer, prompt, err) ||
        kv_cache_typed_init(&cache, &m->cfg, KV_ALLOC_MAX, type, g->n_prompt, err) ||
        forward_state_init(&fs, &m->cfg, g->n_prompt, 1, err) || sampler_init(&s, m->cfg.vocab_size, 0.0f, 0.9f, 1, err))
        goto done;
    SingleStreamKv kv = kv_cache_typed_strategy(&cache);
    status = generate(g, m, &a->tokenizer, &s, &fs, &kv, steps, NULL, err);
done:
    sampler_free(&s);
    forward_state_free(&fs);
    kv_cache_typed_free(&cache);
    return status;
}

static void greedy_agreement(const Generation *ref, const Generation *g, int *equal, int *first)
{
    *equal = 0;
    *first = 0;
    for (int i = ref->n_prompt; i < ref->n_tokens; i++) {
        int same = i < g->n_tokens && g->tokens[i] == ref->tokens[i];
        *equal += same;
        if (!same && !*first)
            *first = i - ref->n_prompt + 1;
    }
}

/* ------------------------------------------------------------ options */

static void usage(void)
{
    printf("Usage: %s [options]\n"
           "What storing K/V in a smaller type costs in quality: the f32 cache's text (sampled) forced through\n"
           "every --kv-dtype, with the perplexity, the greedy agreement with f32 step by step, and the largest\n"
           "attention-output error against the same keys and values in f32.\n\n"
           "  --model FILE          checkpoint or GGUF file (default: stories260K)\n"
           "  --tokenizer FILE      its tokenizer (default: found as the programs find it)\n"
           "  --prompt TEXT         the prompt (default \"Once upon a time\")\n"
           "  --steps N             tokens of the reference text, forced (default 200)\n"
           "  --temperature T       the reference's sampling temperature; 0 = greedy (default 1.0)\n"
           "  --seed N              the reference's sampling seed (default 1)\n"
           "  --sample-every K      measure the attention outputs every K-th step (default 16)\n"
           "  --greedy-steps N      also each type's own greedy text of N tokens against f32's (default 0: no)\n"
           "  --threads N           CPU threads, 1 to 256 (results never depend on it; default 1)\n"
           "  --help                show this help\n",
           PROGRAM);
}

static int parse_int(const char *name, const char *text, long lo, long hi, int *out, Err *err)
{
    long v;
    if (parse_long(text, lo, hi, &v, NULL))
        return err_set(err, "--%s: '%s' is not a whole number from %ld to %ld", name, text, lo, hi);
    *out = (int)v;
    return 0;
}

/* 0: run, 1: help printed, -1: error in err. */
static int parse_options(int argc, char **argv, Options *o, Err *err)
{
    enum { O_MODEL = 1000, O_TOKENIZER, O_PROMPT, O_STEPS, O_TEMPERATURE, O_SEED, O_SAMPLE, O_GREEDY, O_THREADS,
           O_HELP };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, O_MODEL}, {"tokenizer", required_argument, NULL, O_TOKENIZER},
        {"prompt", required_argument, NULL, O_PROMPT}, {"steps", required_argument, NULL, O_STEPS},
        {"temperature", required_argument, NULL, O_TEMPERATURE}, {"seed", required_argument, NULL, O_SEED},
        {"sample-every", required_argument, NULL, O_SAMPLE}, {"greedy-steps", required_argument, NULL, O_GREEDY},
        {"threads", required_argument, NULL, O_THREADS}, {"help", no_argument, NULL, O_HELP}, {NULL, 0, NULL, 0}};
    cli_defaults(&o->cli);
    o->cli.threads = 1;
    o->steps = 200;
    o->sample_every = 16;
    o->greedy_steps = 0;
    o->temperature = 1.0f;
    o->seed = 1;
    opterr = 0;
    for (;;) {
        int index = -1, c = getopt_long(argc, argv, ":h", longopts, &index);
        if (c == -1)
            break;
        double t;
        int status = 0;
        switch (c) {
        case 'h': case O_HELP: usage(); return 1;
        case ':': return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        case '?': return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        case O_MODEL: o->cli.model_path = optarg; break;
        case O_TOKENIZER: o->cli.tokenizer_path = optarg; break;
        case O_PROMPT: o->cli.prompt = optarg; break;
        case O_STEPS: status = parse_int("steps", optarg, 1, 1 << 20, &o->steps, err); break;
        case O_SAMPLE: status = parse_int("sample-every", optarg, 1, 1 << 20, &o->sample_every, err); break;
        case O_GREEDY: status = parse_int("greedy-steps", optarg, 0, 1 << 20, &o->greedy_steps, err); break;
        case O_THREADS: status = parse_int("threads", optarg, 1, THREADS_MAX, &o->cli.threads, err); break;
        case O_SEED:
            status = parse_u64(optarg, UINT64_MAX, &o->seed, NULL)
                         ? err_set(err, "--seed: '%s' is not a whole number >= 0", optarg) : 0;
            break;
        case O_TEMPERATURE:
            status = parse_double(optarg, 0.0, 100.0, &t, NULL)
                         ? err_set(err, "--temperature: '%s' is not a number from 0 to 100", optarg) : 0;
            o->temperature = (float)t;
            break;
        }
        if (status)
            return -1;
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    return 0;
}

/* ------------------------------------------------------------ the table */

static int measure(const Assets *a, const Options *o, Err *err)
{
    const Model *m = &a->model;
    Generation g;
    if (generation_init(&g, m, &a->tokenizer, o->cli.prompt, err))
        return -1;
    int n_prompt = g.n_prompt, status = -1;
    generation_free(&g);
    if (n_prompt + o->steps > m->cfg.seq_len)
        return err_set(err, "a prompt of %d tokens and %d steps do not fit the model's %d positions", n_prompt,
                       o->steps, m->cfg.seq_len);
    int *tokens = calloc((size_t)(n_prompt + o->steps), sizeof *tokens), *best = calloc((size_t)o->steps, sizeof *best);
    Sampler s = {0};
    if (!tokens || !best || generation_init(&g, m, &a->tokenizer, o->cli.prompt, err))
        goto done;
    memcpy(tokens, g.tokens, (size_t)n_prompt * sizeof *tokens);
    generation_free(&g);
    PassResult r;
    if (sampler_init(&s, m->cfg.vocab_size, o->temperature, 0.9f, o->seed, err) ||
        run_pass(m, KV_DTYPE_FP32, tokens, n_prompt, o, &s, best, 0, &r, err))
        goto done;
    printf("%d tokens after a prompt of %d, sampled by the f32 cache at temperature %g, seed %" PRIu64 ", then forced;\n"
           "attention outputs measured every %d steps, every layer and head\n\n",
           o->steps, n_prompt, (double)o->temperature, o->seed, o->sample_every);
    printf("| --kv-dtype | B per token | forced perplexity | greedy token = f32's | largest attention-output error | "
           "RMS of the outputs |\n|---|---:|---:|---:|---:|---:|\n");
    for (int t = 0; t < KV_DTYPE_COUNT; t++) {
        if (run_pass(m, (KvDtype)t, tokens, n_prompt, o, NULL, best, 1, &r, err))
            goto done;
        printf("| %s | %zu | %.4f | %.2f%% | %.3g | %.3g |\n", kv_dtype_name((KvDtype)t),
               kv_dtype_bytes_per_token(&m->cfg, (KvDtype)t), exp(r.nll / o->steps), 100.0 * r.agree / o->steps,
               (double)r.err_abs, r.out_count ? sqrt(r.out_sumsq / (double)r.out_count) : 0.0);
        fflush(stdout);
    }
    status = 0;
done:
    sampler_free(&s);
    free(tokens);
    free(best);
    return status;
}

static int measure_greedy(const Assets *a, const Options *o, Err *err)
{
    Generation ref, g;
    if (greedy_text(a, KV_DTYPE_FP32, o->cli.prompt, o->greedy_steps, &ref, err))
        return -1;
    printf("\ngreedy, %d tokens after the prompt: each type's own text against f32's\n\n"
           "| --kv-dtype | tokens equal to f32's | first that differs |\n|---|---:|---:|\n",
           ref.n_tokens - ref.n_prompt);
    for (int t = 1; t < KV_DTYPE_COUNT; t++) {
        int equal, first;
        if (greedy_text(a, (KvDtype)t, o->cli.prompt, o->greedy_steps, &g, err)) {
            generation_free(&ref);
            return -1;
        }
        greedy_agreement(&ref, &g, &equal, &first);
        char where[16] = "none";
        if (first)
            snprintf(where, sizeof where, "%d", first);
        printf("| %s | %d of %d | %s |\n", kv_dtype_name((KvDtype)t), equal, ref.n_tokens - ref.n_prompt, where);
        generation_free(&g);
    }
    generation_free(&ref);
    return 0;
}

int main(int argc, char **argv)
{
    Options o;
    Assets a = {0};
    Err err = {{0}};
    int parsed = parse_options(argc, argv, &o, &err);
    if (parsed == 1)
        return 0;
    int status = parsed;
    if (status == 0) {
        ops_set_threads(o.cli.threads);
        status = threads_check(ops_threads(), &err);
    }
    if (status == 0)
        status = assets_open(&a, &o.cli, &err);
    if (status == 0)
        status = measure(&a, &o, &err);
    if (status == 0 && o.greedy_steps > 0)
        status = measure_greedy(&a, &o, &err);
    assets_close(&a);
    if (status) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    return 0;
}
