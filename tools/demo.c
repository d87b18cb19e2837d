/* demo: every chapter on the same requests, side by side (`make demo`).
 *
 *   build/demo [--requests FILE] [--model FILE --tokenizer FILE] [--kv-budget SIZE] [--out DIR]
 *
 * One process, one model: chapters 1 and 2 serve the request file one
 * request at a time (they are single-request programs), chapters 3, 4 and
 * 5 serve it as a batch, all through the chapters' own code (the same
 * calls their programs make). The default file, data/requests-demo.tsv,
 * has eight requests that open with the same sentence, so that chapter 5
 * has blocks to share. It prints what each column means, one table (wall
 * time, tokens/s, KV reserved and used, utilization, where the reserved
 * memory went, how many requests ran at once, preemptions), what chapter
 * 5 found cached, the text one request got from every chapter, and checks
 * that every chapter produced the same tokens for every request; it writes DIR/kv-timeline.tsv (KV
 * reserved and used after every step, one block per chapter; chapter 1's
 * block has the K/V it recomputed at each step) for scripts/demo.sh to
 * plot, DIR/demo.json, and the traces of chapters 3 and 4 (trace.h) that
 * the page of `make demo` draws: DIR/trace-ch03.jsonl and
 * DIR/trace-ch04.jsonl of the table's runs, and DIR/trace-tight-ch03.jsonl
 * and DIR/trace-tight-ch04.jsonl of the same requests at a budget where
 * chapter 4 has to preempt (--tight-budget; not in the table). Progress
 * goes to stderr. */
#define _GNU_SOURCE /* getopt_long */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assets.h"
#include "cli.h"
#include "generate.h"
#include "json.h"
#include "kvcache.h"
#include "mem.h"
#include "naive.h"
#include "ops.h"
#include "outfile.h"
#include "parse.h"
#include "threads.h"
#include "prefix.h"
#include "report.h"
#include "serve.h"
#include "serving.h"
#include "trace.h"

#define PROGRAM "demo"

enum { CH_NAIVE, CH_KVCACHE, CH_BATCHING, CH_PAGED, CH_PREFIX, N_CHAPTERS };

/* One row of the table: what one chapter did with the whole file. */
typedef struct {
    const char *name;        /* e.g. "3 batching (--reserve max)" */
    int keeps_kv;            /* 0: chapter 1, which recomputes instead */
    double wall_s;           /* generation loops only (model loading excluded) */
    long tokens;             /* generated, all requests */
    long steps;              /* forward steps, all requests */
    KvTimeline kv;           /* reserved/used after every step (chapters 1-2: per request, steps offset) */
    KvBreakdown breakdown;   /* byte-steps by category */
    int max_concurrent;      /* requests running at once */
    long preemptions;        /* requeues (3) or preemptions (4) */
    int *tokens_of;          /* [n_reqs][seq_len] generated ids, to compare chapters */
    int *n_tokens_of;        /* [n_reqs] how many */
    long prompt_positions;   /* chapter 5: positions its admissions needed K/V for */
    long prompt_hits;        /* chapter 5: of which found cached */
    int *n_prompt_of;        /* [n_reqs] prompt ids (chapter 1: what its first step recomputes) */
    long *steps_of;          /* [n_reqs] steps each request ran alone (chapters 1 and 2) */
} ChapterRun;

typedef struct {
    CliOptions o;            /* model, tokenizer, threads, kv_budget, requests */
    const char *out_dir;
    size_t tight_budget;     /* chapters 3 and 4 again at this budget, for the page (0: not) */
    int tight_given;         /* 1: --tight-budget was given (else an eighth of the budget) */
} DemoOptions;

/* ------------------------------------------------------------ options */

static void usage(void)
{
    printf("Usage: %s [options]\n"
           "Every chapter on the same requests: one side-by-side table, the data of a plot of KV memory over the\n"
           "steps (scripts/demo.sh draws it; `make demo` does both).\n\n"
           "  --requests FILE   request file (default data/requests-demo.tsv)\n"
           "  --model FILE      checkpoint (default: stories260K from models/ or ../shared/models/, else synthetic)\n"
           "  --tokenizer FILE  its tokenizer (default: found next to the model)\n"
           "  --kv-budget SIZE  KV memory of chapters 3, 4 and 5 (default: 8 requests of the model's full length)\n"
           "  --threads N       CPU threads, 1 to 256 (default: the programs' default)\n"
           "  --tight-budget SIZE  chapters 3 and 4 once more at SIZE, for the page's traces only (default: an\n"
           "                    eighth of the budget, where chapter 4 preempts; 0: not)\n"
           "  --out DIR         where kv-timeline.tsv, demo.json and the traces go (default .)\n"
           "  --help            show this help\n", PROGRAM);
}

/* 0: run, 1: help printed, -1: error. */
static int parse_options(int argc, char **argv, DemoOptions *d, Err *err)
{
    enum { O_REQ = 1000, O_MODEL, O_TOK, O_BUDGET, O_THREADS, O_OUT, O_TIGHT, O_HELP };
    static const struct option longopts[] = {
        {"requests", required_argument, NULL, O_REQ}, {"model", required_argument, NULL, O_MODEL},
        {"tokenizer", required_argument, NULL, O_TOK}, {"kv-budget", required_argument, NULL, O_BUDGET},
        {"threads", required_argument, NULL, O_THREADS}, {"out", required_argument, NULL, O_OUT},
        {"tight-budget", required_argument, NULL, O_TIGHT},
        {"help", no_argument, NULL, O_HELP}, {NULL, 0, NULL, 0}};
    cli_defaults(&d->o);
    d->out_dir = ".";
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'h': case O_HELP: usage(); return 1;
        case ':': return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        case '?': return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        case O_REQ: d->o.requests_path = optarg; break;
        case O_MODEL: d->o.model_path = optarg; break;
        case O_TOK: d->o.tokenizer_path = optarg; break;
        case O_OUT: d->out_dir = optarg; break;
        case O_BUDGET:
            if (cli_parse_size(optarg, &d->o.kv_budget, err))
                return err_prefix(err, "--kv-budget");
            if (d->o.kv_budget == 0)
                return err_set(err, "--kv-budget: the budget must be more than 0 bytes");
            break;
        case O_TIGHT:
            if (cli_parse_size(optarg, &d->tight_budget, err))
                return err_prefix(err, "--tight-budget");
            d->tight_given = 1;
            break;
        case O_THREADS: {
            long n;
            if (parse_long(optarg, 1, THREADS_MAX, &n, NULL))
                return err_set(err, "--threads: '%s' is not a number from 1 to %d", optarg, THREADS_MAX);
            d->o.threads = (int)n;
            break;
        }
        }
    }
    if (optind < argc)
        return err_set(err, "unexpected argument '%s' (options start with --; see --help)", argv[optind]);
    struct stat st;
    if (stat(d->out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, "--out %s: not a folder", d->out_dir);
    /* The files it will write, refused now if they cannot be (a FIFO
     * there would block the end of the run forever). */
    static const char *const outputs[] = {"kv-timeline.tsv", "demo.json", "trace-ch03.jsonl", "trace-ch04.jsonl",
                                          "trace-tight-ch03.jsonl", "trace-tight-ch04.jsonl"};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", d->out_dir, outputs[i]);
        if (outfile_check(NULL, path, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ progress */

static void progress(const char *chapter, int done, int total)
{
    static double last;
    int tty = isatty(STDERR_FILENO);
    double now = now_seconds();
    if (done < total && now - last < (tty ? 0.2 : 5.0))
        return;
    last = now;
    fprintf(stderr, "%sdemo: chapter %s: %d of %d requests%s", tty ? "\r" : "", chapter, done, total,
            tty && done < total ? "" : "\n");
    fflush(stderr);
}

/* ------------------------------------------------------------ chapters 1 and 2 */

/* Adds one request's steps to the chapter's timeline (offset by the steps
 * of the requests before it) and its reservation to the breakdown. */
static void add_request_kv(ChapterRun *cr, const Generation *g)
{
    const KvTimeline *t = &g->kv;
    KvReservationTrack track;
    memset(&track, 0, sizeof track);
    size_t last_used = 0;
    for (int i = 0; i < t->n_samples; i++) {
        const KvSample *s = &t->samples[i];
        kv_timeline_record(&cr->kv, cr->steps + s->step, s->reserved, s->used);
        kv_track_set_reserved(&track, s->reserved);
        kv_track_step(&track, s->used);
        last_used = s->used;
    }
    kv_track_close(&track, last_used, &cr->breakdown);
}

/* One request, alone, as chapter 1 or 2's program runs it. */
static int single_request(ChapterRun *cr, int which, const Assets *a, const RequestSpec *spec, ForwardState *fs,
                          int index, Err *err)
{
    const Model *m = &a->model;
    Generation g;
    Sampler s;
    NaiveKv naive;
    KvCache cache;
    SingleStreamKv kv;
    memset(&kv, 0, sizeof kv);
    memset(&g, 0, sizeof g);
    memset(&s, 0, sizeof s);
    memset(&naive, 0, sizeof naive);
    memset(&cache, 0, sizeof cache);
    int rc = generation_init(&g, m, &a->tokenizer, spec->prompt, err);
    if (rc == 0)
        rc = sampler_init(&s, m->cfg.vocab_size, 0.0f, 0.9f, 42, err);
    if (rc == 0 && which == CH_NAIVE && (rc = naive_kv_init(&naive, &m->cfg, err)) == 0)
        kv = naive_strategy(&naive);
    if (rc == 0 && which == CH_KVCACHE && (rc = kv_cache_init(&cache, &m->cfg, KV_ALLOC_MAX, g.n_prompt, err)) == 0)
        kv = kv_cache_strategy(&cache);
    if (rc == 0)
        rc = generate(&g, m, &a->tokenizer, &s, fs, &kv, spec->max_new_tokens, NULL, err);
    if (rc == 0) {
        int n = g.n_tokens - g.n_prompt;
        memcpy(cr->tokens_of + (size_t)index * (size_t)m->cfg.seq_len, g.tokens + g.n_prompt, (size_t)n * sizeof(int));
        cr->n_tokens_of[index] = n;
        cr->wall_s += g.elapsed_s;
        cr->tokens += n;
        if (which == CH_KVCACHE)
            add_request_kv(cr, &g);
        cr->n_prompt_of[index] = g.n_prompt;
        cr->steps_of[index] = g.kv.steps ? g.kv.steps : n + (g.finish == FINISH_STOP);
        cr->steps += cr->steps_of[index];
    }
    if (which == CH_NAIVE)
        naive_kv_free(&naive);
    else
        kv_cache_free(&cache);
    sampler_free(&s);
    generation_free(&g);
    return rc;
}

static int run_single_chapter(ChapterRun *cr, int which, const Assets *a, const RequestFile *rf, Err *err)
{
    ForwardState fs;
    memset(&fs, 0, sizeof fs);
    if (forward_state_init(&fs, &a->model.cfg, a->model.cfg.seq_len, 1, err))
        return -1;
    const char *label = which == CH_NAIVE ? "1 (recompute)" : "2 (KV cache)";
    int rc = 0;
    for (int i = 0; i < rf->count && rc == 0; i++) {
        rc = single_request(cr, which, a, &rf->items[i], &fs, i, err);
        progress(label, i + 1, rf->count);
    }
    cr->max_concurrent = 1;
    forward_state_free(&fs);
    return rc ? err_prefix(err, "chapter %s", label) : 0;
}

/* ------------------------------------------------------------ chapters 3, 4 and 5 */

/* Chapter 5 is chapter 4's server with the hash-chain cache above it
 * (prefix_serve(), what build/ch05-prefix runs). */
static int serve_prefix(ChapterRun *cr, ServingRun *run, Err *err)
{
    PagedServer *server = NULL;
    PrefixCache *cache = NULL;
    int rc = paged_check(run, err) || prefix_serve(run, PREFIX_CACHE_HASH, &server, &cache, err) ? -1 : 0;
    if (rc == 0) {
        cr->prompt_positions = cache->query_tokens;
        cr->prompt_hits = cache->hit_tokens;
    }
    prefix_cache_close(cache);
    paged_close(server);
    return rc;
}

/* The trace a serving chapter's run writes for the page: DIR/trace-chNN.jsonl,
 * or DIR/trace-tight-chNN.jsonl for the run at the tight budget. */
static void trace_path(char *path, size_t n, const char *dir, int which, int tight)
{
    snprintf(path, n, "%s/trace-%sch0%d.jsonl", dir, tight ? "tight-" : "", which == CH_BATCHING ? 3 : which == CH_PAGED ? 4 : 5);
}

/* Runs chapter 3 or 4 on every request, as its program does, with a trace
 * (the same steps: a trace only watches). @p cr (NULL for the tight run,
 * which only the page shows) receives the numbers of the table. */
static int run_serving_chapter(ChapterRun *cr, int which, const Assets *a, const CliOptions *o, const RequestFile *rf,
                               const char *trace_file, Err *err)
{
    const char *label = which == CH_BATCHING ? "3 (batching)" : which == CH_PAGED ? "4 (paged)" : "5 (prefix cache)";
    const char *program = which == CH_BATCHING ? "ch03-batching" : which == CH_PAGED ? "ch04-paged" : "ch05-prefix";
    ServingRun run;
    ServingTrace trace;
    memset(&trace, 0, sizeof trace);
    int rc = serving_run_init(&run, &a->model, &a->tokenizer, o, rf, err);
    if (rc == 0 && which != CH_PREFIX)
        rc = serve_check(which == CH_BATCHING ? SERVE_BATCHING : SERVE_PAGED, &run, err);
    if (rc == 0 && (rc = trace_open(&trace, trace_file, program, 4 * run.n_reqs + 64, err)) == 0)
        run.trace = &trace;
    if (rc == 0) {
        char b[32];
        fprintf(stderr, "demo: chapter %s: %d requests%s%s\n", label, rf->count, cr ? "" : ", for the page at ",
                cr ? "" : cli_format_bytes(b, sizeof b, (double)o->kv_budget));
        rc = which == CH_PREFIX ? serve_prefix(cr, &run, err)
                                : serve_run(which == CH_BATCHING ? SERVE_BATCHING : SERVE_PAGED, &run, NULL, err);
    }
    if (rc == 0)
        rc = trace_commit(&trace, &run, err);
    trace_abort(&trace);
    if (rc == 0 && cr) {
        int seq_len = a->model.cfg.seq_len;
        for (int i = 0; i < run.n_reqs; i++) {
            const Request *r = &run.reqs[i];
            int n = r->n_tokens - r->n_prompt;
            memcpy(cr->tokens_of + (size_t)i * (size_t)seq_len, r->tokens + r->n_prompt, (size_t)n * sizeof(int));
            cr->n_tokens_of[i] = n;
        }
        cr->wall_s = run.elapsed_s;
        cr->tokens = run.tokens_generated;
        cr->steps = run.step;
        cr->kv = run.timeline;
        cr->breakdown = run.breakdown;
        cr->max_concurrent = run.max_concurrent;
        cr->preemptions = serving_preemptions(&run);
    }
    serving_run_free(&run);
    return rc ? err_prefix(err, "chapter %s", label) : 0;
}

/* ------------------------------------------------------------ output */

static const char *mib(char *buf, size_t n, size_t bytes)
{
    snprintf(buf, n, "%.2f MiB", (double)bytes / 1048576.0);
    return buf;
}

/* What each column means, printed before the table (chapter 3 of the book
 * has the four parts of the reserved memory at length). */
static const char *const LEGEND[] = {
    "What the columns mean (every chapter serves the same requests with the same model; the memory columns are",
    "exact, the times vary from run to run):",
    "  wall s, tokens/s    time of the generation loops alone (the model is loaded once, before), and new tokens",
    "                      per second of it",
    "  steps               forward passes; chapters 1 and 2 serve one request at a time, so their steps add up,",
    "                      chapters 3 to 5 serve many requests in each step",
    "  KV reserved (peak)  the most K/V memory held for requests at once: regions (chapter 3), blocks (4, 5),",
    "                      one cache per request (2); chapter 1 keeps none, it recomputes all of it every step",
    "  KV used (peak)      the most of it that held keys and values of tokens at once",
    "  KV util. (avg)      used / reserved, averaged over the steps",
    "  token states ... external frag.   where the reserved memory went, as shares of its byte-steps (bytes",
    "                      times the steps they were held; the four add up to 100%): holding K/V of tokens;",
    "                      reserved for tokens still to come; internal fragmentation: held but never filled;",
    "                      external fragmentation: free, but in holes too small for the request waiting",
    "  max concurrent      the most requests running at once",
    "  preemptions         requests stopped to give their memory back, and later run again from their tokens",
    NULL};

static void print_table(const ChapterRun *cr, FILE *f)
{
    fprintf(f, "| chapter | wall s | tokens/s | steps | KV reserved (peak) | KV used (peak) | KV util. (avg) "
               "| token states | reserved | internal frag. | external frag. | max concurrent | preemptions |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int c = 0; c < N_CHAPTERS; c++) {
        const ChapterRun *r = &cr[c];
        char a[32], b[32];
        fprintf(f, "| %s | %.2f | %.0f | %ld | ", r->name, r->wall_s, r->wall_s > 0 ? r->tokens / r->wall_s : 0.0,
                r->steps);
        if (!r->keeps_kv) {
            fprintf(f, "0 (recomputed) | 0 | - | - | - | - | - | %d | - |\n", r->max_concurrent);
            continue;
        }
        double fr[4];
        kv_breakdown_fractions(&r->breakdown, fr);
        fprintf(f, "%s | %s | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %d | %ld |\n",
                mib(a, sizeof a, r->kv.peak_reserved), mib(b, sizeof b, r->kv.peak_used),
                100 * kv_timeline_avg_utilization(&r->kv), 100 * fr[0], 100 * fr[1], 100 * fr[2], 100 * fr[3],
                r->max_concurrent, r->preemptions);
    }
}

/* Requests whose tokens differ from chapter 1's (the reference). */
static int count_differences(const ChapterRun *cr, int n_reqs, int seq_len)
{
    int differ = 0;
    for (int i = 0; i < n_reqs; i++)
        for (int c = 1; c < N_CHAPTERS; c++) {
            size_t at = (size_t)i * (size_t)seq_len;
            if (cr[c].n_tokens_of[i] != cr[0].n_tokens_of[i] ||
                memcmp(cr[c].tokens_of + at, cr[0].tokens_of + at, (size_t)cr[0].n_tokens_of[i] * sizeof(int))) {
                differ++;
                break;
            }
        }
    return differ;
}

/* Chapter 1 keeps no K/V, but every step computes those of the whole
 * sequence again (one layer at a time, in its activations) and throws them
 * away: a request's step j runs its n_prompt + j positions. The fourth
 * column is those bytes, all layers, K and V. */
static void write_recomputed(FILE *f, const ChapterRun *cr, int n_reqs, size_t bytes_per_token)
{
    long step = 0;
    for (int i = 0; i < n_reqs; i++)
        for (long j = 0; j < cr->steps_of[i]; j++)
            fprintf(f, "%ld\t0\t0\t%zu\n", step++, (size_t)(cr->n_prompt_of[i] + j) * bytes_per_token);
}

/* One block per chapter (gnuplot's `index`): step, reserved, used bytes. */
static int write_timeline(const ChapterRun *cr, int n_reqs, size_t bytes_per_token, const char *dir, Err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kv-timeline.tsv", dir);
    OutFile out;
    if (outfile_open(&out, NULL, path, err))
        return -1;
    FILE *f = out.f;
    for (int c = 0; c < N_CHAPTERS; c++) {
        fprintf(f, "# chapter %s: step\treserved_bytes\tused_bytes%s\n", cr[c].name,
                cr[c].keeps_kv ? "" : "\trecomputed_bytes (K/V computed in the step and thrown away: activations)");
        if (!cr[c].keeps_kv) /* nothing kept: what it computes again at every step */
            write_recomputed(f, &cr[c], n_reqs, bytes_per_token);
        for (int i = 0; i < cr[c].kv.n_samples; i++) {
            const KvSample *s = &cr[c].kv.samples[i];
            fprintf(f, "%ld\t%zu\t%zu\n", s->step, s->reserved, s->used);
        }
        fprintf(f, "\n\n");
    }
    return outfile_commit(&out, err);
}

static int write_json(const ChapterRun *cr, const char *dir, const char *model, const char *requests, size_t budget,
                      int differ, Err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/demo.json", dir);
    OutFile out;
    if (outfile_open(&out, NULL, path, err))
        return -1;
    FILE *f = out.f;
    JsonWriter j;
    json_init(&j, f, 1);
    json_begin_object(&j, NULL);
    json_string(&j, "model", model);
    json_string(&j, "requests", requests);
    json_int(&j, "kv_budget_bytes", (long long)budget);
    json_int(&j, "requests_with_different_tokens", differ);
    json_begin_array(&j, "chapters");
    for (int c = 0; c < N_CHAPTERS; c++) {
        const ChapterRun *r = &cr[c];
        double fr[4];
        kv_breakdown_fractions(&r->breakdown, fr);
        json_begin_object(&j, NULL);
        json_string(&j, "chapter", r->name);
        json_double(&j, "wall_s", r->wall_s);
        json_int(&j, "tokens_generated", r->tokens);
        json_double(&j, "tokens_per_s", r->wall_s > 0 ? r->tokens / r->wall_s : 0.0);
        json_int(&j, "steps", r->steps);
        json_int(&j, "kv_peak_reserved_bytes", (long long)r->kv.peak_reserved);
        json_int(&j, "kv_peak_used_bytes", (long long)r->kv.peak_used);
        json_double(&j, "kv_utilization_avg", kv_timeline_avg_utilization(&r->kv));
        json_begin_object(&j, "kv_breakdown");
        json_double(&j, "token_states", fr[0]);
        json_double(&j, "reserved", fr[1]);
        json_double(&j, "internal_fragmentation", fr[2]);
        json_double(&j, "external_fragmentation", fr[3]);
        json_end_object(&j);
        json_int(&j, "max_concurrent", r->max_concurrent);
        json_int(&j, "preemptions", r->preemptions);
        if (c == CH_PREFIX) {
            json_int(&j, "prefix_cache_query_tokens", r->prompt_positions);
            json_int(&j, "prefix_cache_hit_tokens", r->prompt_hits);
        }
        json_end_object(&j);
    }
    json_end_array(&j);
    json_end_object(&j);
    fputc('\n', f);
    return outfile_commit(&out, err);
}

/* Request @p index's text as a chapter's program prints it: the prompt,
 * then what the generated ids decode to (newlines shown as \n, so that
 * each chapter's text is one line). */
static void print_request_text(FILE *f, const Tokenizer *t, const char *prompt, const int *ids, int n)
{
    int n_prompt = 0, *prompt_ids = mem_alloc_array(MEM_ACTIVATIONS, strlen(prompt) + 3, sizeof(int));
    Err err = {{0}};
    DecodeStream text;
    if (!prompt_ids || tokenizer_encode(t, prompt, 1, 0, prompt_ids, &n_prompt, &err) ||
        decode_stream_init(&text, t, n_prompt > 0 ? prompt_ids[n_prompt - 1] : -1, &err)) {
        fprintf(f, "(cannot decode: %s)", prompt_ids ? err.msg : "out of memory");
        mem_free(prompt_ids);
        return;
    }
    fputs(prompt, f);
    size_t len;
    for (int i = 0; i <= n; i++) {
        const char *piece = i < n ? decode_stream_push(&text, ids[i], &len) : decode_stream_finish(&text, &len);
        for (size_t k = 0; k < len; k++) {
            if (piece[k] == '\n')
                fputs("\\n", f);
            else
                fputc(piece[k], f);
        }
    }
    decode_stream_free(&text);
    mem_free(prompt_ids);
}

/* The text of the first request in every chapter: the same tokens, so the
 * same text, whatever the chapter did with the memory. */
static void print_texts(const ChapterRun *cr, const Assets *a, const RequestFile *rf, FILE *f)
{
    const int index = 0, seq_len = a->model.cfg.seq_len;
    fprintf(f, "\nwhat request %d (up to %d new tokens) got from each chapter:\n", index + 1,
            rf->items[index].max_new_tokens);
    for (int c = 0; c < N_CHAPTERS; c++) {
        fprintf(f, "  chapter %d: ", c + 1);
        print_request_text(f, &a->tokenizer, rf->items[index].prompt, cr[c].tokens_of + (size_t)index * seq_len,
                           cr[c].n_tokens_of[index]);
        fputc('\n', f);
    }
}

/* ------------------------------------------------------------ main */

static int fail(const Err *err)
{
    fprintf(stderr, "%s: error: %s\n", PROGRAM, err->msg);
    return 1;
}

static int open_requests(const CliOptions *o, RequestFile *rf, char *shown, size_t n, Err *err)
{
    char path[PATH_MAX];
    if (o->requests_path)
        snprintf(path, sizeof path, "%s", o->requests_path);
    else if (assets_find_project_file("data/requests-demo.tsv", path, sizeof path))
        return err_set(err, "no --requests file given and data/requests-demo.tsv not found");
    snprintf(shown, n, "%s", path);
    return request_file_load(rf, path, err);
}

/* The options chapters 3 and 4 run with. */
static CliOptions serving_options(const CliOptions *o)
{
    CliOptions serving = *o;
    serving.reserve = "max";
    serving.block_size = 16;
    return serving;
}

/* Chapters 3 and 4 refuse an impossible --kv-budget in their check hook;
 * asked before chapter 1 runs, the refusal is the only line, not one that
 * comes after seconds of work. */
static int check_serving_chapters(const Assets *a, const CliOptions *o, const RequestFile *rf, Err *err)
{
    static const ServeChapter serving_chapters[] = {SERVE_BATCHING, SERVE_PAGED};
    CliOptions serving = serving_options(o);
    for (int i = 0; i < 2; i++) {
        ServingRun run;
        int rc = serving_run_init(&run, &a->model, &a->tokenizer, &serving, rf, err);
        if (rc == 0)
            rc = serve_check(serving_chapters[i], &run, err);
        serving_run_free(&run);
        if (rc)
            return err_prefix(err, "chapter %d", i + 3);
    }
    return 0;
}

/* Chapters 3 and 4 once more, at the tight budget, for the page only. */
static int run_tight(const Assets *a, const DemoOptions *d, const RequestFile *rf, size_t budget, Err *err)
{
    CliOptions tight = serving_options(&d->o);
    tight.kv_budget = budget;
    char path[PATH_MAX];
    static const int chapters[] = {CH_BATCHING, CH_PAGED};
    for (int i = 0; i < 2; i++) {
        trace_path(path, sizeof path, d->out_dir, chapters[i], 1);
        if (run_serving_chapter(NULL, chapters[i], a, &tight, rf, path, err))
            return -1;
    }
    return 0;
}

/* The tight run is refused before anything runs, as the table's are. */
static int check_tight(const Assets *a, const DemoOptions *d, const RequestFile *rf, size_t budget, Err *err)
{
    CliOptions tight = d->o;
    tight.kv_budget = budget;
    return check_serving_chapters(a, &tight, rf, err);
}

static int run_all(ChapterRun *cr, const Assets *a, const DemoOptions *d, const RequestFile *rf, Err *err)
{
    CliOptions serving = serving_options(&d->o);
    char path[PATH_MAX];
    int rc = run_single_chapter(&cr[CH_NAIVE], CH_NAIVE, a, rf, err);
    if (rc == 0)
        rc = run_single_chapter(&cr[CH_KVCACHE], CH_KVCACHE, a, rf, err);
    trace_path(path, sizeof path, d->out_dir, CH_BATCHING, 0);
    if (rc == 0)
        rc = run_serving_chapter(&cr[CH_BATCHING], CH_BATCHING, a, &serving, rf, path, err);
    trace_path(path, sizeof path, d->out_dir, CH_PAGED, 0);
    if (rc == 0)
        rc = run_serving_chapter(&cr[CH_PAGED], CH_PAGED, a, &serving, rf, path, err);
    trace_path(path, sizeof path, d->out_dir, CH_PREFIX, 0);
    if (rc == 0)
        rc = run_serving_chapter(&cr[CH_PREFIX], CH_PREFIX, a, &serving, rf, path, err);
    return rc;
}

int main(int argc, char **argv)
{
    DemoOptions d;
    Err err = {{0}};
    int parsed = parse_options(argc, argv, &d, &err);
    if (parsed)
        return parsed > 0 ? 0 : fail(&err);
    ops_set_threads(d.o.threads);
    RequestFile rf;
    char requests[PATH_MAX];
    if (open_requests(&d.o, &rf, requests, sizeof requests, &err))
        return fail(&err);
    Assets a;
    if (assets_open(&a, &d.o, &err)) {
        request_file_free(&rf);
        return fail(&err);
    }
    if (d.o.threads == 0) /* the programs' default */
        ops_set_threads(forward_default_threads(&a.model.cfg));
    if (threads_check(ops_threads(), &err)) {
        assets_close(&a);
        request_file_free(&rf);
        return fail(&err);
    }
    static const char *const names[N_CHAPTERS] = {"1 naive (recompute)", "2 KV cache (--kv-alloc max)",
                                                  "3 batching (--reserve max)", "4 paged (--block-size 16)",
                                                  "5 prefix cache (--prefix-cache hash)"};
    ChapterRun cr[N_CHAPTERS];
    int seq_len = a.model.cfg.seq_len, status = 0;
    memset(cr, 0, sizeof cr);
    for (int c = 0; c < N_CHAPTERS; c++) {
        cr[c].name = names[c];
        cr[c].keeps_kv = c != CH_NAIVE;
        cr[c].tokens_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rf.count * (size_t)seq_len, sizeof(int));
        cr[c].n_tokens_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rf.count, sizeof(int));
        cr[c].n_prompt_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rf.count, sizeof(int));
        cr[c].steps_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rf.count, sizeof(long));
        if (!cr[c].tokens_of || !cr[c].n_tokens_of || !cr[c].n_prompt_of || !cr[c].steps_of)
            status = err_set(&err, "out of memory for the tokens of %d requests", rf.count);
    }
    char line[PATH_MAX * 2 + 256];
    size_t budget = d.o.kv_budget ? d.o.kv_budget
                                  : 8u * (size_t)seq_len * model_kv_bytes_per_token(&a.model.cfg, sizeof(float));
    size_t tight = d.tight_given ? d.tight_budget : budget / 8;
    if (status == 0)
        status = check_serving_chapters(&a, &d.o, &rf, &err);
    if (status == 0 && tight > 0 && check_tight(&a, &d, &rf, tight, &err)) {
        if (d.tight_given)
            status = err_prefix(&err, "--tight-budget");
        else {
            fprintf(stderr, "demo: no run at an eighth of the budget for the page (%s)\n", err.msg);
            tight = 0;
        }
    }
    outfile_hold(); /* every file of the page is renamed into place at the end, or none is */
    if (status == 0) {
        fprintf(stderr, "demo: %s\n", assets_describe(&a, line, sizeof line));
        status = run_all(cr, &a, &d, &rf, &err);
    }
    if (status == 0 && tight > 0)
        status = run_tight(&a, &d, &rf, tight, &err);
    int differ = status == 0 ? count_differences(cr, rf.count, seq_len) : 0;
    if (status == 0 && (write_timeline(cr, rf.count, model_kv_bytes_per_token(&a.model.cfg, sizeof(float)),
                                       d.out_dir, &err) ||
                        write_json(cr, d.out_dir, a.model_path, requests, budget, differ, &err)))
        status = -1;
    if (status == 0 && outfile_release(&err))
        status = -1;
    if (status)
        outfile_discard();
    if (status == 0) {
        char b[32];
        printf("kvlab demo: %d requests from %s, greedy, on %s (seq_len %d, %zu B of K/V per token);\n"
               "chapters 3, 4 and 5 share a KV budget of %s (8 requests of full length unless --kv-budget)\n\n",
               rf.count, requests, a.model_path, seq_len, model_kv_bytes_per_token(&a.model.cfg, sizeof(float)),
               cli_format_bytes(b, sizeof b, (double)budget));
        for (int i = 0; LEGEND[i]; i++)
            printf("%s\n", LEGEND[i]);
        printf("\n");
        print_table(cr, stdout);
        const ChapterRun *c5 = &cr[CH_PREFIX];
        printf("\nchapter 5 found %ld of the %ld prompt positions it needed cached (%.1f%%) and computed %ld: "
               "only whole blocks of 16 tokens that an earlier request's prompt shares can hit, so its rows differ "
               "from chapter 4's only as far as the prompts share their openings\n",
               c5->prompt_hits, c5->prompt_positions,
               c5->prompt_positions ? 100.0 * (double)c5->prompt_hits / (double)c5->prompt_positions : 0.0,
               c5->prompt_positions - c5->prompt_hits);
        print_texts(cr, &a, &rf, stdout);
        printf("same tokens in every chapter: %s (%d of %d requests differ from chapter 1)\n",
               differ ? "NO" : "yes", differ, rf.count);
    }
    for (int c = 0; c < N_CHAPTERS; c++) {
        mem_free(cr[c].tokens_of);
        mem_free(cr[c].n_tokens_of);
        mem_free(cr[c].n_prompt_of);
        mem_free(cr[c].steps_of);
    }
    assets_close(&a);
    request_file_free(&rf);
    if (status)
        return fail(&err);
    return differ ? 1 : 0;
}
