/* kvlab-serve: chapter 4's paged engine (with chapter 5's prefix cache,
 * --prefix-cache) behind an OpenAI-compatible HTTP server. The engine
 * steps on a thread of its own (serve_engine.h); libmicrohttpd's threads
 * take the requests and stream the tokens (serve_http.h). SIGINT and
 * SIGTERM end it cleanly: open streams end with an error event, every
 * block goes back, and it exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "cli.h"
#include "forward.h"
#include "ops.h"
#include "serve_engine.h"
#include "serve_http.h"

static const CliProgram ENGINE = {
    .name = "kvlab-serve",
    .summary = "Chapter 4's paged engine (with chapter 5's prefix cache, --prefix-cache) behind an OpenAI-compatible "
               "HTTP server.",
    .features = CLI_MODEL | CLI_SAMPLING | CLI_SERVING | CLI_PAGED | CLI_PREFIX,
};

/** kvlab-serve's own options (the engine's are cli.h's). */
typedef struct {
    ServeHttpConfig http;
    ServeEngineConfig engine;
    int step_delay_ms;
    char model_name[256];
} ServeOptions;

static void usage(void)
{
    printf("Usage: kvlab-serve [--host ADDR] [--port N] [server options] [engine options]\n"
           "An OpenAI-compatible HTTP server on chapter 4's paged engine: POST /v1/completions,\n"
           "POST /v1/chat/completions (streaming with \"stream\": true), GET /v1/models, /health, /metrics.\n"
           "\n"
           "Server options:\n"
           "  --host ADDR          address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)\n"
           "  --port N             port (default 8000; 0: any free port, printed on stderr)\n"
           "  --served-model-name NAME  the model's name in the API (default: the model file's name)\n"
           "  --max-waiting N      requests waiting at most; more get 503 (default 64)\n"
           "  --max-body BYTES     largest request body; larger gets 413 (default 1MiB)\n"
           "  --timeout S          close a connection idle for S seconds (default 60)\n"
           "  --max-connections N  connections at once, one thread each (default 128)\n"
           "  --slots N            requests per engine run, 16 or more; a fresh run opens when they are used up (default 256)\n"
           "  --step-delay MS      pause MS milliseconds after each engine step, so that a class can watch (default 0)\n"
           "\n"
           "Engine options (those of build/ch04-paged and build/ch05-prefix; the sampling options are the\n"
           "defaults of requests that do not say; --prefix-cache adds chapter 5's cache):\n\n");
}

/** A whole-number option of kvlab-serve's own: its range and where it goes. */
typedef struct {
    const char *name; /**< without the dashes */
    long min, max;    /**< the range accepted */
    int *dest;        /**< receives the value */
} IntOption;

/* The option named by @p name (up to '=' or its end) in @p names, or -1. */
static int option_index(const char *name, size_t len, const char *const *names, int n)
{
    for (int k = 0; k < n; k++)
        if (strlen(names[k]) == len && strncmp(name, names[k], len) == 0)
            return k;
    return -1;
}

/* A text option: --host, --max-body, --served-model-name. */
static int text_option(int which, const char *value, ServeOptions *o, Err *err)
{
    size_t bytes = 0;
    switch (which) {
    case 0:
        o->http.host = value;
        return 1;
    case 1:
        if (cli_parse_size(value, &bytes, err))
            return err_prefix(err, "--max-body");
        if (bytes < 64)
            return err_set(err, "--max-body: %zu bytes cannot hold a request (64 at least)", bytes);
        o->http.max_body = bytes;
        return 1;
    default:
        if (!*value || strlen(value) >= sizeof o->model_name)
            return err_set(err, "--served-model-name: give a name of 1 to %zu bytes", sizeof o->model_name - 1);
        snprintf(o->model_name, sizeof o->model_name, "%s", value);
        return 1;
    }
}

/* Takes one of kvlab-serve's own options at argv[*i] (with its value),
 * or returns 0 when it is not one. -1 with err on a bad value. */
static int own_option(int argc, char **argv, int *i, ServeOptions *o, Err *err)
{
    const IntOption ints[] = {
        {"port", 0, 65535, &o->http.port},
        {"max-waiting", 1, 1 << 20, &o->engine.max_waiting},
        {"timeout", 1, 86400, &o->http.timeout_s},
        {"max-connections", 1, 65536, &o->http.max_connections},
        {"slots", SERVE_MAX_N, 1 << 16, &o->engine.slots}, /* a request's n choices must fit in one run */
        {"step-delay", 0, 10000, &o->step_delay_ms},
    };
    enum { N_INTS = sizeof ints / sizeof ints[0] };
    const char *int_names[N_INTS];
    for (int k = 0; k < N_INTS; k++)
        int_names[k] = ints[k].name;
    static const char *const TEXTS[] = {"host", "max-body", "served-model-name"};
    const char *arg = argv[*i];
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    int as_int = option_index(name, len, int_names, N_INTS), as_text = option_index(name, len, TEXTS, 3);
    if (as_int < 0 && as_text < 0)
        return 0;
    const char *value = name[len] == '=' ? name + len + 1 : NULL;
    if (!value) {
        if (*i + 1 >= argc)
            return err_set(err, "%s needs a value", arg);
        value = argv[++*i];
    }
    if (as_text >= 0)
        return text_option(as_text, value, o, err);
    long x = 0;
    if (cli_parse_long(ints[as_int].name, value, ints[as_int].min, ints[as_int].max, &x, err))
        return -1;
    *ints[as_int].dest = (int)x;
    return 1;
}

/* The engine's options that a server has no use for (requests come over
 * HTTP; n is a request's parameter) are refused, not ignored. */
static int refuse_batch_options(const CliOptions *o, Err *err)
{
    const char *bad = o->requests_path ? "--requests" : o->out_path ? "--out" : o->json_path ? "--json"
                      : o->trace_path ? "--trace" : o->show_tables >= 0 ? "--show-tables"
                      : o->arrival_rate > 0 ? "--arrival-rate/--arrival" : o->clock ? "--clock"
                      : o->machine ? "--machine" : o->slo_ttft > 0 ? "--slo-ttft" : o->slo_tpot > 0 ? "--slo-tpot"
                      : o->n_samples > 1 ? "--n" : o->beam_width > 0 ? "--beam" : NULL;
    if (bad)
        return err_set(err, "%s is not an option of the server (requests come over HTTP, with their own n; "
                            "build/kvlab-loadgen makes arrivals and measures latency)", bad);
    return 0;
}

/* The model's file name without folder and extension: the default name served. */
static void default_model_name(const Assets *a, char *out, size_t n)
{
    const char *base = strrchr(a->model_path, '/');
    base = base ? base + 1 : a->model_path;
    const char *name = a->synthetic ? "synthetic" : base;
    size_t len = strnlen(name, n - 1);
    memcpy(out, name, len);
    out[len] = '\0';
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = '\0';
}

/* Splits argv into kvlab-serve's options and the engine's, and parses
 * both. Returns 0 to serve, 1 after --help, -1 with err. */
static int parse_options(int argc, char **argv, ServeOptions *so, CliOptions *opts, char ***rest, Err *err)
{
    *rest = calloc((size_t)argc + 1, sizeof **rest);
    if (!*rest)
        return err_set(err, "out of memory");
    int n = 0;
    (*rest)[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        int rc = own_option(argc, argv, &i, so, err);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            if (strcmp(argv[i], "--prefix-cache") == 0 || strncmp(argv[i], "--prefix-cache=", 15) == 0)
                so->engine.prefix = "given"; /* the value is cli.c's to check */
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
                usage();
            (*rest)[n++] = argv[i];
        }
    }
    CliResult parsed = cli_parse(&ENGINE, n, *rest, opts, err);
    if (parsed == CLI_EXIT_OK)
        return 1;
    if (parsed == CLI_ERROR)
        return -1;
    if (so->engine.prefix)
        so->engine.prefix = opts->prefix_cache;
    return refuse_batch_options(opts, err);
}

/* SIGINT and SIGTERM are blocked in every thread and taken by sigwait()
 * in main: no handler runs in the middle of a step or a write. */
static void block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that went away is an error return, not a signal */
}

int main(int argc, char **argv)
{
    ServeOptions so = {.http = {.host = "127.0.0.1", .port = 8000, .max_body = 1 << 20, .timeout_s = 60,
                                .max_connections = 128},
                       .engine = {.slots = 256, .max_waiting = 64}};
    CliOptions opts;
    Assets assets;
    memset(&assets, 0, sizeof assets);
    Err err = {{0}};
    char **rest = NULL;
    ServeEngine *engine = NULL;
    ServeHttp *http = NULL;
    sigset_t signals;
    block_signals(&signals);
    int parsed = parse_options(argc, argv, &so, &opts, &rest, &err);
    int ok = parsed == 0 && assets_open(&assets, &opts, &err) == 0;
    if (ok) {
        so.engine.threads = opts.threads ? opts.threads : forward_default_threads(&assets.model.cfg);
        ops_set_threads(so.engine.threads);
        if (!so.model_name[0])
            default_model_name(&assets, so.model_name, sizeof so.model_name);
        so.engine.model_name = so.http.model_name = so.model_name;
        so.engine.step_delay_s = so.step_delay_ms / 1000.0;
        ok = serve_engine_open(&engine, &opts, &assets, &so.engine, &err) == 0 &&
             serve_engine_start(engine, &err) == 0 && serve_http_start(&http, &so.http, engine, &err) == 0;
    }
    if (ok) {
        char line[2 * PATH_MAX + 256];
        fprintf(stderr, "kvlab-serve: %s\n", assets_describe(&assets, line, sizeof line));
        fprintf(stderr, "kvlab-serve: serving '%s' on http://%s:%d (%s); Ctrl-C stops\n", so.model_name, so.http.host,
                serve_http_port(http), so.engine.prefix ? "chapter 5's prefix cache" : "chapter 4");
        int sig = 0;
        sigwait(&signals, &sig);
        fprintf(stderr, "kvlab-serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    if (engine)
        serve_engine_stop(engine); /* open streams end with an error event */
    serve_http_stop(http);         /* every connection's thread has ended */
    serve_engine_close(engine);    /* the runs, the pool, the jobs */
    assets_close(&assets);
    free(rest);
    if (parsed < 0 || !ok) {
        if (parsed != 1) {
            fprintf(stderr, "kvlab-serve: error: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}
