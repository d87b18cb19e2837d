/* kvlab-loadgen: replays a request file (or data/requests-demo.tsv) against
 * any OpenAI-compatible server's POST /v1/completions, streaming, and
 * measures what the clients see: TTFT, TPOT, ITL and end-to-end latency
 * at p50/p90/p99, goodput under --slo-ttft/--slo-tpot, and errors. The
 * printout and --json are shaped like vLLM's benchmark_serving, so that
 * figures compare.
 *
 * Open loop: requests arrive at --request-rate (Poisson; --burstiness K
 * draws gamma gaps of shape K, as vLLM does), whatever the server's pace.
 * Closed loop: --max-concurrency C clients, each sending its next request
 * when its last one ends (with the rate left at inf). libcurl's multi
 * interface drives every connection from one thread; the times are taken
 * when the bytes arrive.
 *
 * --expect FILE (chapter 4's --out of the same request file, greedy) asks
 * for vLLM's `return_token_ids` and fails unless every answer has exactly
 * chapter 4's tokens: the engine's identity, over HTTP and under load. */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arrivals.h"
#include "assets.h"
#include "cli.h"
#include "err.h"
#include "loadgen_stats.h"
#include "requests.h"

/** The options. */
typedef struct {
    const char *url;        /* the server, e.g. http://127.0.0.1:8000 */
    const char *model;      /* "model" of every request (NULL: left out) */
    const char *requests;   /* the request file */
    long num_prompts;       /* requests sent (the file's lines, cycled) */
    double rate;            /* requests per second (INFINITY: all at once) */
    double burstiness;      /* gamma shape (1: Poisson) */
    long max_concurrency;   /* requests in flight at most (0: no limit) */
    double temperature;     /* of every request */
    unsigned long long seed;/* arrivals */
    double slo_ttft_s;      /* goodput: TTFT at most (0: none) */
    double slo_tpot_s;      /* goodput: TPOT at most (0: none) */
    const char *json_path;  /* --json */
    const char *expect;     /* --expect: chapter 4's --out */
    long timeout_s;         /* one request at most */
} Options;

/** One request in flight or done. */
typedef struct {
    const RequestSpec *spec; /* its line */
    char *body;              /* the JSON sent */
    double sent_s;           /* when it was sent */
    double first_s;          /* its first text (-1: none yet) */
    double last_s;           /* its latest text */
    double *itl;             /* [cap_itl] gaps between chunks with text */
    long n_itl, cap_itl;
    long output_tokens;      /* usage.completion_tokens (or the token ids counted) */
    long prompt_tokens;      /* usage.prompt_tokens */
    int *ids;                /* token ids (--expect), [cap_ids] */
    long n_ids, cap_ids;
    char *line;              /* the SSE line being received */
    size_t line_len, line_cap;
    int done;                /* saw data: [DONE] */
    char error[200];         /* why it failed ("" : it did not) */
    struct curl_slist *headers;
} Flight;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ the stream */

static int grow(void **p, long *cap, long need, size_t elem)
{
    if (need <= *cap)
        return 0;
    long c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* One `data: ...` line of the stream. */
static void take_event(Flight *f, const char *data, double t)
{
    if (strcmp(data, "[DONE]") == 0) {
        f->done = 1;
        return;
    }
    json_t *root = json_loads(data, 0, NULL);
    if (!root) {
        snprintf(f->error, sizeof f->error, "a chunk that is not JSON");
        return;
    }
    json_t *err = json_object_get(root, "error");
    if (err)
        snprintf(f->error, sizeof f->error, "%s", json_string_value(json_object_get(err, "message")) ?: "error event");
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        f->output_tokens = (long)json_integer_value(json_object_get(usage, "completion_tokens"));
        f->prompt_tokens = (long)json_integer_value(json_object_get(usage, "prompt_tokens"));
    }
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    const char *text = json_string_value(json_object_get(choice, "text"));
    if (text && text[0]) { /* as vLLM's benchmark: a chunk with text is an output */
        if (f->first_s < 0)
            f->first_s = t;
        else if (grow((void **)&f->itl, &f->cap_itl, f->n_itl + 1, sizeof(double)) == 0)
            f->itl[f->n_itl++] = t - f->last_s;
        f->last_s = t;
    }
    size_t i;
    json_t *id;
    json_array_foreach(json_object_get(choice, "token_ids"), i, id) {
        if (grow((void **)&f->ids, &f->cap_ids, f->n_ids + 1, sizeof(int)) == 0)
            f->ids[f->n_ids++] = (int)json_integer_value(id);
    }
    json_decref(root);
}

static size_t on_bytes(char *p, size_t size, size_t n, void *ctx)
{
    Flight *f = ctx;
    double t = now_s();
    size_t bytes = size * n;
    for (size_t i = 0; i < bytes; i++) {
        if (p[i] != '\n') {
            long cap = (long)f->line_cap;
            if (grow((void **)&f->line, &cap, (long)f->line_len + 2, 1))
                return 0;
            f->line_cap = (size_t)cap;
            f->line[f->line_len++] = p[i];
            continue;
        }
        f->line[f->line_len] = '\0';
        if (f->line_len > 6 && strncmp(f->line, "data: ", 6) == 0)
            take_event(f, f->line + 6, t);
        else if (f->line_len > 0 && f->line[0] == '{') /* an error answer, not a stream */
            take_event(f, f->line, t);
        f->line_len = 0;
    }
    return bytes; /* a JSON error body without a newline is read when the transfer ends */
}

/* ------------------------------------------------------------ sending */

static char *request_body(const Options *o, const RequestSpec *s)
{
    json_t *b = json_pack("{s:s, s:i, s:f, s:b, s:{s:b}}", "prompt", s->prompt, "max_tokens", s->max_new_tokens,
                          "temperature", o->temperature, "stream", 1, "stream_options", "include_usage", 1);
    if (b && o->model)
        json_object_set_new(b, "model", json_stringn(o->model, strlen(o->model)));
    if (b && o->expect)
        json_object_set_new(b, "return_token_ids", json_true());
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return text;
}

static CURL *start_flight(CURLM *multi, const Options *o, Flight *f, const char *endpoint)
{
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    f->headers = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, endpoint);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, f->body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_PRIVATE, f);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, o->timeout_s);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    f->sent_s = now_s();
    f->first_s = -1;
    curl_multi_add_handle(multi, c);
    return c;
}

static void end_flight(CURLM *multi, CURL *c, CURLcode rc)
{
    Flight *f = NULL;
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&f);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (f->line_len > 0 && f->line[0] == '{') { /* a last line without its newline */
        f->line[f->line_len] = '\0';
        take_event(f, f->line, now_s());
    }
    if (!f->error[0] && rc != CURLE_OK)
        snprintf(f->error, sizeof f->error, "%s", curl_easy_strerror(rc));
    else if (!f->error[0] && status != 200)
        snprintf(f->error, sizeof f->error, "HTTP status %ld", status);
    else if (!f->error[0] && !f->done)
        snprintf(f->error, sizeof f->error, "the stream ended without data: [DONE]");
    if (!f->output_tokens)
        f->output_tokens = f->n_ids ? f->n_ids : f->n_itl + (f->first_s >= 0);
    curl_multi_remove_handle(multi, c);
    curl_easy_cleanup(c);
    curl_slist_free_all(f->headers);
    f->headers = NULL;
}

/* Sends every request at its arrival (open loop) or as clients free up
 * (closed loop), and waits for all. */
static int run_all(const Options *o, Flight *fl, long n, double *duration_s, Err *err)
{
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s/v1/completions", o->url);
    CURLM *multi = curl_multi_init();
    if (!multi)
        return err_set(err, "libcurl: cannot start");
    double *at = calloc((size_t)n, sizeof *at);
    if (!at)
        return err_set(err, "out of memory");
    if (isfinite(o->rate)) {
        ArrivalStream s;
        ArrivalProcess p = {o->rate, 1.0 / sqrt(o->burstiness)};
        arrival_stream_init(&s, &p, o->seed);
        for (long i = 0; i < n; i++)
            at[i] = arrival_stream_next(&s);
    }
    double start = now_s();
    long next = 0, running = 0, ended = 0;
    while (ended < n) {
        double t = now_s() - start;
        while (next < n && at[next] <= t && (o->max_concurrency == 0 || running < o->max_concurrency)) {
            if (!start_flight(multi, o, &fl[next], endpoint))
                return err_set(err, "libcurl: cannot make a request");
            next++;
            running++;
        }
        int still;
        curl_multi_perform(multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                end_flight(multi, m->easy_handle, m->data.result);
                running--;
                ended++;
            }
        double wait_ms = 100;
        if (next < n && (o->max_concurrency == 0 || running < o->max_concurrency))
            wait_ms = fmax(0.0, (at[next] - (now_s() - start)) * 1000.0);
        curl_multi_poll(multi, NULL, 0, (int)fmin(wait_ms, 100.0), NULL);
    }
    *duration_s = now_s() - start;
    curl_multi_cleanup(multi);
    free(at);
    return 0;
}

/* ------------------------------------------------------------ the report */

typedef LoadgenStats Measure;

static void measure(double *v, long n, Measure *m)
{
    loadgen_stats(v, n, m);
}

/* A title centred in a rule of 50 characters, as vLLM prints them. */
static void rule(const char *title, char fill)
{
    int n = (int)strlen(title), left = (50 - n) / 2, right = 50 - n - left;
    for (int i = 0; i < left; i++)
        putchar(fill);
    fputs(title, stdout);
    for (int i = 0; i < right; i++)
        putchar(fill);
    putchar('\n');
}

static void row(const char *label, double value)
{
    printf("%-40s %-10.2f\n", label, value);
}

static void print_measure(const char *title, const char *name, const Measure *m)
{
    char label[64];
    rule(title, '-');
    snprintf(label, sizeof label, "Mean %s (ms):", name);
    row(label, m->mean * 1e3);
    snprintf(label, sizeof label, "Median %s (ms):", name);
    row(label, m->p50 * 1e3);
    snprintf(label, sizeof label, "P90 %s (ms):", name);
    row(label, m->p90 * 1e3);
    snprintf(label, sizeof label, "P99 %s (ms):", name);
    row(label, m->p99 * 1e3);
}

static void json_measure(json_t *o, const char *name, const Measure *m)
{
    char key[64];
    snprintf(key, sizeof key, "mean_%s_ms", name);
    json_object_set_new(o, key, json_real(m->mean * 1e3));
    snprintf(key, sizeof key, "median_%s_ms", name);
    json_object_set_new(o, key, json_real(m->p50 * 1e3));
    snprintf(key, sizeof key, "std_%s_ms", name);
    json_object_set_new(o, key, json_real(m->std * 1e3));
    snprintf(key, sizeof key, "p90_%s_ms", name);
    json_object_set_new(o, key, json_real(m->p90 * 1e3));
    snprintf(key, sizeof key, "p99_%s_ms", name);
    json_object_set_new(o, key, json_real(m->p99 * 1e3));
}

/** What one run measured. */
typedef struct {
    long completed, failed, good;
    long input_tokens, output_tokens;
    double duration_s;
    Measure ttft, tpot, itl, e2e;
} Summary;

/* TTFT, TPOT ((e2e - TTFT) / (tokens - 1)), every ITL and e2e of the
 * requests that completed; goodput counts those within both objectives. */
static int summarize(const Options *o, const Flight *fl, long n, double duration_s, Summary *s)
{
    long n_itl = 0;
    for (long i = 0; i < n; i++)
        n_itl += fl[i].n_itl;
    double *ttft = calloc((size_t)n + 1, sizeof(double)), *tpot = calloc((size_t)n + 1, sizeof(double));
    double *e2e = calloc((size_t)n + 1, sizeof(double)), *itl = calloc((size_t)n_itl + 1, sizeof(double));
    if (!ttft || !tpot || !e2e || !itl)
        return -1;
    long k = 0, k_tpot = 0, k_itl = 0;
    memset(s, 0, sizeof *s);
    s->duration_s = duration_s;
    for (long i = 0; i < n; i++) {
        const Flight *f = &fl[i];
        if (f->error[0] || f->first_s < 0) {
            s->failed++;
            continue;
        }
        s->completed++;
        s->input_tokens += f->prompt_tokens;
        s->output_tokens += f->output_tokens;
        ttft[k] = f->first_s - f->sent_s;
        e2e[k] = f->last_s - f->sent_s;
        double per_token = f->output_tokens > 1 ? (e2e[k] - ttft[k]) / (double)(f->output_tokens - 1) : 0.0;
        if (f->output_tokens > 1)
            tpot[k_tpot++] = per_token;
        s->good += (o->slo_ttft_s <= 0 || ttft[k] <= o->slo_ttft_s) && (o->slo_tpot_s <= 0 || per_token <= o->slo_tpot_s);
        k++;
        for (long j = 0; j < f->n_itl; j++)
            itl[k_itl++] = f->itl[j];
    }
    measure(ttft, k, &s->ttft);
    measure(tpot, k_tpot, &s->tpot);
    measure(itl, k_itl, &s->itl);
    measure(e2e, k, &s->e2e);
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    return 0;
}

static void print_summary(const Options *o, const Summary *s)
{
    rule(" Serving Benchmark Result ", '=');
    printf("%-40s %-10ld\n", "Successful requests:", s->completed);
    printf("%-40s %-10ld\n", "Failed requests:", s->failed);
    if (o->max_concurrency > 0)
        printf("%-40s %-10ld\n", "Maximum request concurrency:", o->max_concurrency);
    if (isfinite(o->rate))
        row("Request rate (req/s):", o->rate);
    row("Benchmark duration (s):", s->duration_s);
    printf("%-40s %-10ld\n", "Total input tokens:", s->input_tokens);
    printf("%-40s %-10ld\n", "Total generated tokens:", s->output_tokens);
    row("Request throughput (req/s):", s->completed / s->duration_s);
    if (o->slo_ttft_s > 0 || o->slo_tpot_s > 0)
        row("Request goodput (req/s):", s->good / s->duration_s);
    row("Output token throughput (tok/s):", s->output_tokens / s->duration_s);
    row("Total Token throughput (tok/s):", (s->input_tokens + s->output_tokens) / s->duration_s);
    print_measure("Time to First Token", "TTFT", &s->ttft);
    print_measure("Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    print_measure("Inter-token Latency", "ITL", &s->itl);
    print_measure("End-to-end Latency", "E2EL", &s->e2e);
    rule("", '=');
}

static int write_json(const Options *o, const Summary *s, const Flight *fl, long n, Err *err)
{
    json_t *j = json_object();
    json_object_set_new(j, "backend", json_stringn("openai", 6));
    json_object_set_new(j, "request_rate", isfinite(o->rate) ? json_real(o->rate) : json_stringn("inf", 3));
    json_object_set_new(j, "burstiness", json_real(o->burstiness));
    json_object_set_new(j, "max_concurrency", o->max_concurrency ? json_integer(o->max_concurrency) : json_null());
    json_object_set_new(j, "duration", json_real(s->duration_s));
    json_object_set_new(j, "completed", json_integer(s->completed));
    json_object_set_new(j, "failed", json_integer(s->failed));
    json_object_set_new(j, "total_input_tokens", json_integer(s->input_tokens));
    json_object_set_new(j, "total_output_tokens", json_integer(s->output_tokens));
    json_object_set_new(j, "request_throughput", json_real(s->completed / s->duration_s));
    json_object_set_new(j, "request_goodput", o->slo_ttft_s > 0 || o->slo_tpot_s > 0
                                                  ? json_real(s->good / s->duration_s) : json_null());
    json_object_set_new(j, "output_throughput", json_real(s->output_tokens / s->duration_s));
    json_object_set_new(j, "total_token_throughput", json_real((s->input_tokens + s->output_tokens) / s->duration_s));
    json_measure(j, "ttft", &s->ttft);
    json_measure(j, "tpot", &s->tpot);
    json_measure(j, "itl", &s->itl);
    json_measure(j, "e2el", &s->e2e);
    json_t *ttfts = json_array(), *outs = json_array(), *errors = json_array();
    for (long i = 0; i < n; i++) {
        json_array_append_new(ttfts, json_real(fl[i].first_s >= 0 ? fl[i].first_s - fl[i].sent_s : 0.0));
        json_array_append_new(outs, json_integer(fl[i].output_tokens));
        json_array_append_new(errors, json_stringn(fl[i].error, strlen(fl[i].error)));
    }
    json_object_set_new(j, "ttfts", ttfts);
    json_object_set_new(j, "output_lens", outs);
    json_object_set_new(j, "errors", errors);
    int rc = json_dump_file(j, o->json_path, JSON_INDENT(1));
    json_decref(j);
    return rc ? err_set(err, "--json: cannot write %s", o->json_path) : 0;
}

/* --expect: line i of chapter 4's --out holds the tokens of request i. */
static int check_identity(const Options *o, const Flight *fl, long n, long lines, Err *err)
{
    FILE *f = fopen(o->expect, "r");
    if (!f)
        return err_set(err, "--expect: cannot read %s", o->expect);
    json_t **want = calloc((size_t)lines, sizeof *want);
    char *line = NULL;
    size_t cap = 0;
    long got = 0;
    while (want && got < lines && getline(&line, &cap, f) > 0) {
        json_t *record = json_loads(line, 0, NULL); /* one request's line of --out */
        if (record && !json_object_get(record, "tokens")) {
            json_decref(record);
            record = NULL;
        }
        want[got++] = record;
    }
    free(line);
    fclose(f);
    long bad = 0, first_bad = -1;
    for (long i = 0; i < n && want; i++) {
        json_t *tokens = i % lines < got && want[i % lines] ? json_object_get(want[i % lines], "tokens") : NULL;
        int same = tokens && (long)json_array_size(tokens) == fl[i].n_ids && !fl[i].error[0];
        for (long k = 0; same && k < fl[i].n_ids; k++)
            same = json_integer_value(json_array_get(tokens, (size_t)k)) == fl[i].ids[k];
        if (!same && bad++ == 0)
            first_bad = i;
    }
    for (long i = 0; want && i < got; i++)
        json_decref(want[i]);
    free(want);
    if (bad)
        return err_set(err, "--expect: %ld of %ld answers differ from %s (the first: request %ld)", bad, n, o->expect,
                       first_bad);
    fprintf(stderr, "kvlab-loadgen: all %ld answers have chapter 4's tokens (%s)\n", n, o->expect);
    return 0;
}

/* ------------------------------------------------------------ options */

static void usage(void)
{
    printf("Usage: kvlab-loadgen --url URL [options]\n"
           "Replays a request file against an OpenAI-compatible server (POST URL/v1/completions, streaming) and\n"
           "reports what the clients measured, shaped like vLLM's benchmark_serving.\n\n"
           "  --url URL              the server, e.g. http://127.0.0.1:8000 (required)\n"
           "  --model NAME           the request's \"model\" (default: left out)\n"
           "  --requests FILE        max_new_tokens<TAB>prompt lines (default: data/requests-demo.tsv)\n"
           "  --num-prompts N        requests to send, the file's lines cycled (default: the file's lines)\n"
           "  --request-rate R       open loop: R requests per second (default inf: all at once)\n"
           "  --burstiness K         gamma gaps of shape K (default 1: Poisson)\n"
           "  --max-concurrency C    at most C in flight; with the rate inf, a closed loop of C clients\n"
           "  --temperature T        of every request (default 0: greedy)\n"
           "  --seed S               the arrivals' seed (default 0)\n"
           "  --slo-ttft S, --slo-tpot S  goodput: requests within these seconds\n"
           "  --json FILE            the results as JSON (vLLM's keys)\n"
           "  --expect FILE          chapter 4's --out of the same requests: fail unless every answer has its tokens\n"
           "  --timeout S            one request at most S seconds (default 600)\n");
}

static int parse_double(const char *name, const char *v, double lo, double *out, Err *err)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= lo) || (!isfinite(x) && strcmp(v, "inf") != 0))
        return err_set(err, "--%s: '%s' is not a number of at least %g", name, v, lo);
    *out = x;
    return 0;
}

static int parse_options(int argc, char **argv, Options *o, Err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 1;
        }
        if (strncmp(a, "--", 2) != 0 || i + 1 >= argc)
            return err_set(err, "%s: %s", a, strncmp(a, "--", 2) ? "not an option (see --help)" : "needs a value");
        const char *v = argv[++i], *name = a + 2;
        long x;
        int rc = 0;
        if (strcmp(name, "url") == 0)
            o->url = v;
        else if (strcmp(name, "model") == 0)
            o->model = v;
        else if (strcmp(name, "requests") == 0)
            o->requests = v;
        else if (strcmp(name, "json") == 0)
            o->json_path = v;
        else if (strcmp(name, "expect") == 0)
            o->expect = v;
        else if (strcmp(name, "num-prompts") == 0)
            rc = cli_parse_long(name, v, 1, 10000000, &o->num_prompts, err);
        else if (strcmp(name, "max-concurrency") == 0)
            rc = cli_parse_long(name, v, 1, 100000, &o->max_concurrency, err);
        else if (strcmp(name, "timeout") == 0)
            rc = cli_parse_long(name, v, 1, 86400, &o->timeout_s, err);
        else if (strcmp(name, "seed") == 0)
            rc = cli_parse_long(name, v, 0, 0x7fffffffL, &x, err), o->seed = (unsigned long long)x;
        else if (strcmp(name, "request-rate") == 0)
            rc = parse_double(name, v, ARRIVAL_RATE_MIN, &o->rate, err);
        else if (strcmp(name, "burstiness") == 0)
            rc = parse_double(name, v, 0.01, &o->burstiness, err);
        else if (strcmp(name, "temperature") == 0)
            rc = parse_double(name, v, 0.0, &o->temperature, err);
        else if (strcmp(name, "slo-ttft") == 0)
            rc = parse_double(name, v, 0.0, &o->slo_ttft_s, err);
        else if (strcmp(name, "slo-tpot") == 0)
            rc = parse_double(name, v, 0.0, &o->slo_tpot_s, err);
        else
            return err_set(err, "%s: not an option (see --help)", a);
        if (rc)
            return -1;
    }
    if (!o->url)
        return err_set(err, "--url is required (e.g. --url http://127.0.0.1:8000)");
    if (o->expect && o->temperature > 0)
        return err_set(err, "--expect compares greedy answers: it needs --temperature 0");
    return 0;
}

int main(int argc, char **argv)
{
    Options o = {.rate = INFINITY, .burstiness = 1.0, .timeout_s = 600};
    Err err = {{0}};
    RequestFile rf = {0};
    Flight *fl = NULL;
    long n = 0;
    char path[4096];
    int rc = parse_options(argc, argv, &o, &err);
    if (rc == 1)
        return 0;
    if (rc == 0 && !o.requests && assets_find_project_file("data/requests-demo.tsv", path, sizeof path) == 0)
        o.requests = path;
    if (rc == 0 && !o.requests)
        rc = err_set(&err, "no --requests file given and data/requests-demo.tsv not found");
    if (rc == 0)
        rc = request_file_load(&rf, o.requests, &err);
    if (rc == 0) {
        n = o.num_prompts ? o.num_prompts : rf.count;
        fl = calloc((size_t)n, sizeof *fl);
        if (!fl || curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
            rc = err_set(&err, "out of memory");
        for (long i = 0; rc == 0 && i < n; i++) {
            fl[i].spec = &rf.items[i % rf.count];
            if (!(fl[i].body = request_body(&o, fl[i].spec)))
                rc = err_set(&err, "out of memory");
        }
    }
    double duration = 0;
    Summary s;
    if (rc == 0)
        rc = run_all(&o, fl, n, &duration, &err);
    if (rc == 0 && summarize(&o, fl, n, duration, &s))
        rc = err_set(&err, "out of memory");
    if (rc == 0) {
        print_summary(&o, &s);
        for (long i = 0, shown = 0; i < n && shown < 3; i++)
            if (fl[i].error[0] && ++shown)
                fprintf(stderr, "kvlab-loadgen: request %ld failed: %s\n", i, fl[i].error);
        if (o.json_path)
            rc = write_json(&o, &s, fl, n, &err);
        if (rc == 0 && o.expect)
            rc = check_identity(&o, fl, n, rf.count, &err);
        if (rc == 0 && s.failed)
            rc = err_set(&err, "%ld of %ld requests failed", s.failed, n);
    }
    for (long i = 0; fl && i < n; i++) {
        free(fl[i].body);
        free(fl[i].itl);
        free(fl[i].ids);
        free(fl[i].line);
    }
    free(fl);
    request_file_free(&rf);
    curl_global_cleanup();
    if (rc) {
        fprintf(stderr, "kvlab-loadgen: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
