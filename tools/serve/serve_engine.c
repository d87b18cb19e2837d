/* kvlab-serve's engine: chapter 4's serving loop on a thread of its own,
 * with requests that arrive over HTTP placed into its run between steps
 * (serve_engine.h says how, and why this way). */
#include "serve_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "prefix.h"
#include "serve_metrics.h"
#include "serving.h"

/* ------------------------------------------------------------ jobs */

/** One choice of a job: one request of the run. */
typedef struct {
    int slot;           /* its request in the run (-1: not placed yet) */
    int placed;         /* 1 once it has a slot */
    int engine_done;    /* 1 once its request is done and the engine no longer looks at it */
    int *ids;           /* [max_tokens] tokens generated (malloc'ed) */
    int n_ids;          /* tokens in ids */
    char *text;         /* the text so far (malloc'ed; NUL-terminated) */
    size_t len;         /* its bytes */
    size_t cap;         /* room in text */
    size_t safe_len;    /* bytes that can be shown: no stop string can start before this */
    const char *finish; /* "stop", "length", or NULL while it runs */
    double last_token_s;/* when its last token came (for the inter-token latency) */
    DecodeStream ds;    /* tokens to text (mem_alloc'ed: opened and freed on the engine thread) */
    /* The HTTP thread's progress through it. */
    size_t sent;        /* bytes streamed */
    int ids_sent;       /* tokens streamed */
    int started;        /* 1 once its first chunk went */
    int finish_sent;    /* 1 once its finish went */
} ServeChoice;

typedef enum { JOB_SUBMITTED, JOB_QUEUED, JOB_ACTIVE, JOB_FAILED } JobState;

struct ServeJob {
    ServeParams p;          /* the request (the prompt rendered) */
    JobState state;         /* where it is */
    ServeError error;       /* why it was refused or failed */
    struct ServeJob *next;  /* in the submitted or queued list */
    int *prompt_ids;        /* [n_prompt] (malloc'ed) */
    int n_prompt;           /* prompt tokens, BOS included */
    int max_tokens;         /* new tokens of each choice at most */
    ServeChoice choice[SERVE_MAX_N];
    int live;               /* choices the engine still serves */
    int finished;           /* choices with a finish */
    int refs;               /* 2 at first: the HTTP thread's and the engine's */
    int cancelled;          /* 1: the client went away */
    double arrived_s;       /* when it was submitted (monotonic seconds) */
    char id[40];            /* cmpl-N / chatcmpl-N */
    long long created;      /* Unix time */
    int usage_sent;         /* the stream's usage chunk went */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void job_free(ServeJob *j)
{
    for (int i = 0; i < j->p.n; i++) {
        free(j->choice[i].ids);
        free(j->choice[i].text);
    }
    free(j->prompt_ids);
    serve_params_free(&j->p);
    free(j);
}

/* Under the lock: one holder lets go. */
static void job_unref(ServeJob *j)
{
    if (--j->refs == 0)
        job_free(j);
}

int serve_buf_put(ServeBuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* ------------------------------------------------------------ the engine */

struct ServeEngine {
    pthread_mutex_t lock;    /* guards everything below that the HTTP threads see */
    pthread_cond_t work;     /* the engine waits on it for jobs */
    pthread_cond_t out;      /* the HTTP threads wait on it for output */
    pthread_t thread;
    int started;             /* 1: the thread runs */
    int stopping;            /* 1: serve_engine_stop() was called */
    ServeEngineConfig cfg;
    const Assets *assets;
    CliOptions opts;         /* the command line; chat set when the model has a template */
    ChatTemplate chat;       /* the model's template (zeroed without one) */
    int has_chat;
    /* The run (one generation) and chapter 4's server on it. */
    RequestSpec *specs;      /* [slots] the run's placeholder requests */
    RequestFile file;        /* over specs */
    ServingRun run;
    PagedServer *server;
    PrefixCache *cache;      /* chapter 5, with --prefix-cache */
    PrefixCacheMode mode;
    int run_open;            /* 1: run and server are open */
    int next_slot;           /* the next request of the run an HTTP request takes */
    ServeJob **slot_job;     /* [slots] the job of each placed request */
    int *slot_choice;        /* [slots] and which of its choices */
    long generation;         /* runs opened so far */
    /* Jobs between the HTTP threads and the run. */
    ServeJob *submitted, *submitted_tail; /* not yet tokenized */
    ServeJob *queued, *queued_tail;       /* accepted, waiting for slots */
    int waiting_choices;     /* choices of submitted and queued jobs */
    long next_id;            /* for the ids */
    /* What /metrics shows. */
    ServeMetrics metrics;
    long preemptions_before; /* of the runs closed */
    long prefix_queries_before, prefix_hits_before;
};

const char *serve_engine_system_message(const ServeEngine *e)
{
    return e->has_chat ? e->chat.system_message : NULL;
}

int serve_engine_has_chat(const ServeEngine *e)
{
    return e->has_chat;
}

int serve_engine_context(const ServeEngine *e)
{
    return e->assets->model.cfg.seq_len;
}

/* ------------------------------------------------------------ one run (a generation) */

/* Every request of a fresh run is a placeholder that has not arrived: an
 * empty prompt, room for the model's whole length (so that its outputs'
 * times fit any request), REQ_PENDING so that chapter 4 neither admits
 * nor rejects it, and no arrival time until an HTTP request takes it. */
static void park_placeholders(ServingRun *run)
{
    for (int i = 0; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        if (r->phase == REQ_WAITING)
            r->phase = REQ_PENDING;
        r->arrival_s = INFINITY;
        r->arrival_step = 0;
    }
}

static int open_run(ServeEngine *e, Err *err)
{
    const Assets *a = e->assets;
    if (serving_run_init(&e->run, &a->model, &a->tokenizer, &e->opts, &e->file, err))
        return -1;
    park_placeholders(&e->run);
    e->run_open = 1;
    e->next_slot = 0;
    e->generation++;
    if (e->cfg.prefix)
        return prefix_check(&e->run, err) || paged_check(&e->run, err) ||
               paged_open(&e->run, &e->server, NULL, err) ||
               prefix_cache_open(e->server, &e->run, e->mode, &e->cache, err);
    return paged_check(&e->run, err) || paged_open(&e->run, &e->server, NULL, err);
}

static void close_run(ServeEngine *e)
{
    if (e->cache) {
        e->prefix_queries_before += e->cache->query_tokens;
        e->prefix_hits_before += e->cache->hit_tokens;
    }
    if (e->server)
        e->preemptions_before += e->server->preemptions;
    prefix_cache_close(e->cache);
    paged_close(e->server);
    e->cache = NULL;
    e->server = NULL;
    if (e->run_open)
        serving_run_free(&e->run);
    e->run_open = 0;
}

int serve_engine_open(ServeEngine **out, const CliOptions *opts, const Assets *assets, const ServeEngineConfig *cfg,
                      Err *err)
{
    ServeEngine *e = calloc(1, sizeof *e);
    *out = e;
    if (!e)
        return err_set(err, "out of memory");
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->out, NULL);
    e->cfg = *cfg;
    e->assets = assets;
    e->opts = *opts;
    serve_metrics_init(&e->metrics);
    if (cfg->prefix && prefix_cache_mode_parse(cfg->prefix, &e->mode))
        return err_set(err, "--prefix-cache: '%s' is not off, hash or radix", cfg->prefix);
    /* A model with a chat template serves /v1/chat/completions, and the end
     * of the assistant's turn stops every request (as --chat does). */
    Err no_chat = {{0}};
    if (chat_template_open(&e->chat, &assets->tokenizer, &no_chat) == 0) {
        e->has_chat = 1;
        e->opts.chat = 1;
    }
    e->specs = calloc((size_t)cfg->slots, sizeof *e->specs);
    e->slot_job = calloc((size_t)cfg->slots, sizeof *e->slot_job);
    e->slot_choice = calloc((size_t)cfg->slots, sizeof *e->slot_choice);
    if (!e->specs || !e->slot_job || !e->slot_choice)
        return err_set(err, "out of memory for %d slots", cfg->slots);
    for (int i = 0; i < cfg->slots; i++)
        e->specs[i] = (RequestSpec){.id = i, .line = i + 1, .max_new_tokens = assets->model.cfg.seq_len, .prompt = ""};
    e->file = (RequestFile){.items = e->specs, .count = cfg->slots, .arrivals = REQUEST_ARRIVAL_NONE};
    return open_run(e, err);
}

/* ------------------------------------------------------------ placing a choice */

/* The sampler of a choice: the command line's settings, with what the
 * request gives instead; seeded with its seed + choice, or the run's. */
static int choice_sampler(ServeEngine *e, const ServeJob *j, int k, Request *r, Err *err)
{
    SamplingParams sp = cli_sampling_params(&e->opts);
    if (j->p.has_temperature)
        sp.temperature = j->p.temperature;
    if (j->p.has_top_p)
        sp.top_p = j->p.top_p >= 1.0f ? 0.0f : j->p.top_p;
    if (j->p.has_presence)
        sp.presence_penalty = j->p.presence_penalty;
    if (j->p.has_frequency)
        sp.frequency_penalty = j->p.frequency_penalty;
    unsigned long long seed = j->p.has_seed ? (unsigned long long)j->p.seed + (unsigned long long)k
                                            : e->opts.seed + (unsigned long long)r->index +
                                                  (unsigned long long)e->generation * (unsigned long long)e->cfg.slots;
    sampler_free(&r->sampler);
    return sampler_init_params(&r->sampler, e->assets->model.cfg.vocab_size, &sp, seed, err);
}

/* Choice k of job j takes the run's next request: its prompt, its limit,
 * its sampler, and an arrival now, so that the next step lets it in. */
static int place_choice(ServeEngine *e, ServeJob *j, int k, Err *err)
{
    ServingRun *run = &e->run;
    int slot = e->next_slot++;
    Request *r = &run->reqs[slot];
    ServeChoice *c = &j->choice[k];
    memcpy(r->tokens, j->prompt_ids, (size_t)j->n_prompt * sizeof(int));
    r->n_prompt = r->n_tokens = j->n_prompt;
    r->n_cached = 0;
    r->max_tokens = j->n_prompt + j->max_tokens;
    r->arrival_s = run->clock.now_s;
    r->arrival_step = run->step;
    e->slot_job[slot] = j;
    e->slot_choice[slot] = k;
    c->slot = slot;
    c->placed = 1;
    if (choice_sampler(e, j, k, r, err) ||
        decode_stream_init(&c->ds, &e->assets->tokenizer, j->prompt_ids[j->n_prompt - 1], err))
        return -1;
    return 0;
}

/* Ends a choice's request early (client gone, stop string): chapter 4
 * rejects one that is not running; a running one takes one more token as
 * its last, and finishes, and frees its blocks, in the next step. */
static void cancel_slot(ServeEngine *e, int slot)
{
    Request *r = &e->run.reqs[slot];
    if (r->phase == REQ_RUNNING)
        r->max_tokens = r->n_tokens + 1;
    else if (r->phase == REQ_WAITING || r->phase == REQ_PENDING)
        serving_reject(&e->run, r, "cancelled");
}

/* ------------------------------------------------------------ accepting jobs */

/* Tokenizes a job's prompt and checks that it fits the model's context
 * and the pool (outside the lock: only the engine thread uses the
 * tokenizer's scratch). Returns 0, or -1 with j->error set. */
static int accept_job(ServeEngine *e, ServeJob *j)
{
    const ModelConfig *cfg = &e->assets->model.cfg;
    size_t bytes = strlen(j->p.prompt);
    Err err = {{0}};
    int n = 0;
    if (bytes > tokenizer_max_text_bytes(&e->assets->tokenizer, cfg->seq_len) + 0)
        return serve_error(&j->error, 400, j->p.kind == SERVE_CHAT ? "messages" : "prompt",
                           "This model's maximum context length is %d tokens; the prompt (%zu bytes) is longer",
                           cfg->seq_len, bytes);
    j->prompt_ids = malloc((bytes + 3) * sizeof(int));
    if (!j->prompt_ids)
        return serve_error(&j->error, 500, NULL, "out of memory");
    if (tokenizer_encode(&e->assets->tokenizer, j->p.prompt, 1, 0, j->prompt_ids, &n, &err))
        return serve_error(&j->error, 400, "prompt", "the prompt cannot be tokenized: %s", err.msg);
    j->n_prompt = n;
    int room = model_max_tokens(cfg) - n;
    if (room < 1)
        return serve_error(&j->error, 400, j->p.kind == SERVE_CHAT ? "messages" : "prompt",
                           "This model's maximum context length is %d tokens. However, your prompt is %d tokens",
                           cfg->seq_len, n);
    if (j->p.max_tokens > room)
        return serve_error(&j->error, 400, "max_tokens",
                           "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in "
                           "the prompt, %d in the completion)", cfg->seq_len, n + j->p.max_tokens - 1, n - 1,
                           j->p.max_tokens);
    int wanted = j->p.max_tokens ? j->p.max_tokens : j->p.kind == SERVE_CHAT ? room : 16;
    j->max_tokens = wanted < room ? wanted : room;
    const PagedServer *s = e->server;
    int need = block_count_for_tokens(n + j->max_tokens - 1, s->kv.pool.shape.block_size);
    int usable = s->kv.pool.n_blocks - s->watermark_blocks;
    if (need > usable)
        return serve_error(&j->error, 400, "max_tokens",
                           "the prompt and max_tokens need %d blocks of %d tokens, but the KV pool has %d above its "
                           "watermark (--kv-budget)", need, s->kv.pool.shape.block_size, usable);
    for (int k = 0; k < j->p.n; k++) {
        ServeChoice *c = &j->choice[k];
        c->cap = (size_t)j->max_tokens * (size_t)tokenizer_max_piece_bytes(&e->assets->tokenizer) + 16;
        c->text = malloc(c->cap);
        c->ids = malloc((size_t)j->max_tokens * sizeof(int));
        if (!c->text || !c->ids)
            return serve_error(&j->error, 500, NULL, "out of memory");
        c->text[0] = '\0';
        c->slot = -1;
    }
    return 0;
}

static void push_queued(ServeEngine *e, ServeJob *j)
{
    j->next = NULL;
    if (e->queued_tail)
        e->queued_tail->next = j;
    else
        e->queued = j;
    e->queued_tail = j;
}

/* Takes the submitted jobs, tokenizes and checks them outside the lock,
 * and queues or refuses each; the lock is held on entry and on return. */
static void accept_submitted(ServeEngine *e)
{
    ServeJob *list = e->submitted;
    e->submitted = e->submitted_tail = NULL;
    pthread_mutex_unlock(&e->lock);
    for (ServeJob *j = list; j; j = j->next)
        if (accept_job(e, j))
            j->state = JOB_FAILED;
    pthread_mutex_lock(&e->lock);
    for (ServeJob *j = list, *next; j; j = next) {
        next = j->next;
        if (j->state == JOB_FAILED) {
            e->waiting_choices -= j->p.n;
            job_unref(j);
        } else {
            j->state = JOB_QUEUED;
            push_queued(e, j);
        }
    }
    pthread_cond_broadcast(&e->out);
}

/* Queued jobs take slots of the run, first come first served, while the
 * run has room for all the choices of the next one. */
static int place_queued(ServeEngine *e, Err *err)
{
    while (e->queued) {
        ServeJob *j = e->queued;
        if (j->cancelled) {
            e->queued = j->next;
            e->waiting_choices -= j->p.n;
            job_unref(j);
        } else if (e->next_slot + j->p.n <= e->cfg.slots) {
            e->queued = j->next;
            e->waiting_choices -= j->p.n;
            j->state = JOB_ACTIVE;
            j->live = j->p.n;
            for (int k = 0; k < j->p.n; k++)
                if (place_choice(e, j, k, err))
                    return -1;
        } else {
            break;
        }
        if (!e->queued)
            e->queued_tail = NULL;
    }
    return 0;
}

/* ------------------------------------------------------------ after a step */

/* Where the first stop string starts in the text, or -1; the bytes no
 * stop string can start before are safe to show. */
static long find_stop(const ServeJob *j, const ServeChoice *c, size_t from, size_t *safe)
{
    size_t longest = 0;
    long at = -1;
    for (int s = 0; s < j->p.n_stop; s++) {
        size_t n = strlen(j->p.stop[s]);
        longest = n > longest ? n : longest;
        size_t start = from >= n ? from - n + 1 : 0;
        const char *hit = c->len >= start ? strstr(c->text + start, j->p.stop[s]) : NULL;
        if (hit && (at < 0 || hit - c->text < at))
            at = hit - c->text;
    }
    *safe = c->len >= longest ? c->len - (longest ? longest - 1 : 0) : 0;
    return at;
}

static void finish_choice(ServeEngine *e, ServeJob *j, ServeChoice *c, const char *why, double t)
{
    if (c->finish)
        return;
    c->finish = why;
    c->safe_len = c->len;
    j->finished++;
    ServeMetrics *m = &e->metrics;
    if (strcmp(why, "stop") == 0)
        m->finished_stop++;
    else
        m->finished_length++;
    m->prompt_tokens += j->n_prompt;
    serve_histogram_add(&m->e2e, t - j->arrived_s);
}

/* The new tokens of choice c (request r) since the last step: their text,
 * the latencies, a stop string. */
static void take_new_tokens(ServeEngine *e, ServeJob *j, ServeChoice *c, const Request *r, double t)
{
    int produced = r->n_tokens - r->n_prompt;
    size_t from = c->len, len;
    for (; c->n_ids < produced && !c->finish; c->n_ids++) {
        const char *piece = decode_stream_push(&c->ds, r->tokens[r->n_prompt + c->n_ids], &len);
        if (c->len + len + 1 > c->cap)
            len = c->cap - c->len - 1; /* cannot happen: cap holds max_tokens of the longest piece */
        memcpy(c->text + c->len, piece, len);
        c->len += len;
        c->text[c->len] = '\0';
        c->ids[c->n_ids] = r->tokens[r->n_prompt + c->n_ids];
        serve_histogram_add(c->n_ids == 0 ? &e->metrics.ttft : &e->metrics.itl,
                            t - (c->n_ids == 0 ? j->arrived_s : c->last_token_s));
        c->last_token_s = t;
        e->metrics.generation_tokens++;
    }
    if (c->finish)
        return;
    long stop = find_stop(j, c, from, &c->safe_len);
    if (stop >= 0) {
        c->len = (size_t)stop;
        c->text[c->len] = '\0';
        finish_choice(e, j, c, "stop", t);
        cancel_slot(e, c->slot);
    }
}

/* A choice's request is done: the rest of its text, its finish, and the
 * engine lets go of it (and of the job, with its last choice). */
static void let_go(ServeEngine *e, ServeJob *j, ServeChoice *c, const Request *r, double t)
{
    size_t len;
    const char *rest = decode_stream_finish(&c->ds, &len);
    if (!c->finish && c->len + len < c->cap) {
        memcpy(c->text + c->len, rest, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
    decode_stream_free(&c->ds);
    if (!c->finish && !j->cancelled)
        finish_choice(e, j, c, r->finish == REQ_FINISH_STOP ? "stop" : "length", t);
    if (j->cancelled && !c->finish)
        e->metrics.cancelled++;
    c->engine_done = 1;
    e->slot_job[c->slot] = NULL;
    if (--j->live == 0)
        job_unref(j);
}

/* Under the lock, after a step: every placed choice's new tokens, the
 * cancellations, the choices that ended; then the gauges. */
static void deliver(ServeEngine *e)
{
    double t = now_s();
    for (int slot = 0; slot < e->next_slot; slot++) {
        ServeJob *j = e->slot_job[slot];
        if (!j)
            continue;
        ServeChoice *c = &j->choice[e->slot_choice[slot]];
        const Request *r = &e->run.reqs[slot];
        if (!j->cancelled)
            take_new_tokens(e, j, c, r, t);
        else
            cancel_slot(e, slot);
        if (r->phase == REQ_DONE)
            let_go(e, j, c, r, t);
    }
    ServeMetrics *m = &e->metrics;
    const BlockPool *p = &e->server->kv.pool;
    m->running = e->run.n_running;
    m->waiting = e->run.n_waiting + e->waiting_choices;
    m->blocks_total = p->n_blocks;
    m->blocks_used = block_pool_used(p);
    m->preemptions = e->preemptions_before + e->server->preemptions;
    m->prefix_queries = e->prefix_queries_before + (e->cache ? e->cache->query_tokens : 0);
    m->prefix_hits = e->prefix_hits_before + (e->cache ? e->cache->hit_tokens : 0);
    pthread_cond_broadcast(&e->out);
}

/* ------------------------------------------------------------ the loop */

/* Requests placed that chapter 4 still has to serve (PENDING ones have
 * arrived for it: the next step lets them in). */
static int run_has_work(const ServeEngine *e)
{
    return e->run.n_done < e->next_slot;
}

/* Whether the next queued job waits for a fresh run: this one has no
 * slots left for it, and nothing left to serve. */
static int needs_new_run(const ServeEngine *e)
{
    return e->queued && e->next_slot + e->queued->p.n > e->cfg.slots && !run_has_work(e);
}

/* One turn of the loop, the lock held: new jobs in, cancelled ones out,
 * a fresh run when this one is used up, then a step (without the lock)
 * and its output. Returns -1 on an engine failure. */
static int engine_turn(ServeEngine *e, Err *err)
{
    if (e->submitted)
        accept_submitted(e);
    if (needs_new_run(e)) {
        close_run(e);
        if (open_run(e, err))
            return -1;
    }
    if (place_queued(e, err))
        return -1;
    for (int slot = 0; slot < e->next_slot; slot++) /* cancellations reach the run before its step */
        if (e->slot_job[slot] && e->slot_job[slot]->cancelled)
            cancel_slot(e, slot);
    if (!run_has_work(e)) {
        deliver(e); /* a choice cancelled before it ran ends here */
        if (!e->submitted && !e->stopping)
            pthread_cond_wait(&e->work, &e->lock);
        return 0;
    }
    pthread_mutex_unlock(&e->lock);
    int rc = paged_step(e->server, &e->run, err);
    if (e->cfg.step_delay_s > 0) {
        double whole = floor(e->cfg.step_delay_s);
        struct timespec pause = {(time_t)whole, (long)((e->cfg.step_delay_s - whole) * 1e9)};
        nanosleep(&pause, NULL);
    }
    pthread_mutex_lock(&e->lock);
    if (rc == 0)
        deliver(e);
    return rc;
}

static void fail_all(ServeEngine *e, const char *why);

static void *engine_main(void *arg)
{
    ServeEngine *e = arg;
    Err err = {{0}};
    /* OpenMP's thread count is a setting of each thread: the forward
     * pass's scratch was sized for the main thread's (forward.c). */
    ops_set_threads(e->cfg.threads);
    pthread_mutex_lock(&e->lock);
    while (!e->stopping)
        if (engine_turn(e, &err)) {
            fprintf(stderr, "kvlab-serve: error: %s\n", err.msg);
            fail_all(e, err.msg);
            break;
        }
    /* Jobs accepted while serve_engine_stop() failed the others (the
     * engine had them out of the lists, tokenizing) fail now. */
    fail_all(e, err.msg[0] ? err.msg : "the server is shutting down");
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

int serve_engine_start(ServeEngine *e, Err *err)
{
    if (pthread_create(&e->thread, NULL, engine_main, e))
        return err_set(err, "cannot start the engine thread");
    e->started = 1;
    return 0;
}

static void fail_job(ServeJob *j, const char *why)
{
    serve_error(&j->error, 503, NULL, "%s", why);
    j->state = JOB_FAILED;
}

/* Under the lock: every job not finished fails with 503 and @p why. */
static void fail_all(ServeEngine *e, const char *why)
{
    for (ServeJob *j = e->submitted; j; j = j->next)
        fail_job(j, why);
    for (ServeJob *j = e->queued; j; j = j->next)
        fail_job(j, why);
    for (int slot = 0; slot < e->next_slot; slot++) {
        ServeJob *j = e->slot_job[slot];
        if (j && j->finished < j->p.n && j->state != JOB_FAILED)
            fail_job(j, why);
    }
    e->stopping = 1;
    pthread_cond_broadcast(&e->out);
}

void serve_engine_stop(ServeEngine *e)
{
    pthread_mutex_lock(&e->lock);
    fail_all(e, "the server is shutting down");
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->lock);
    if (e->started)
        pthread_join(e->thread, NULL);
    e->started = 0;
}

/* Drops the engine's reference to every job on @p list. */
static void unref_list(ServeJob *list)
{
    for (ServeJob *j = list, *next; j; j = next) {
        next = j->next;
        job_unref(j);
    }
}

void serve_engine_close(ServeEngine *e)
{
    if (!e)
        return;
    if (e->started)
        serve_engine_stop(e);
    unref_list(e->submitted);
    unref_list(e->queued);
    for (int slot = 0; e->slot_job && slot < e->next_slot; slot++) {
        ServeJob *j = e->slot_job[slot];
        if (!j)
            continue;
        ServeChoice *c = &j->choice[e->slot_choice[slot]];
        decode_stream_free(&c->ds);
        e->slot_job[slot] = NULL;
        if (--j->live == 0)
            job_unref(j);
    }
    close_run(e);
    chat_template_close(&e->chat);
    free(e->specs);
    free(e->slot_job);
    free(e->slot_choice);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->out);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* ------------------------------------------------------------ the HTTP side */

int serve_submit(ServeEngine *e, ServeParams *params, ServeJob **out, ServeError *error)
{
    *out = NULL;
    ServeJob *j = calloc(1, sizeof *j);
    if (!j)
        return serve_error(error, 500, NULL, "out of memory");
    j->p = *params;
    memset(params, 0, sizeof *params);
    j->refs = 2;
    j->arrived_s = now_s();
    j->created = (long long)time(NULL);
    pthread_mutex_lock(&e->lock);
    int full = e->waiting_choices + j->p.n > e->cfg.max_waiting;
    if (e->stopping || full) {
        pthread_mutex_unlock(&e->lock);
        job_free(j);
        return e->stopping ? serve_error(error, 503, NULL, "the server is shutting down")
                           : serve_error(error, 503, NULL, "too many requests waiting (--max-waiting %d); try again",
                                         e->cfg.max_waiting);
    }
    snprintf(j->id, sizeof j->id, "%s-%ld", j->p.kind == SERVE_CHAT ? "chatcmpl" : "cmpl", ++e->next_id);
    e->waiting_choices += j->p.n;
    if (e->submitted_tail)
        e->submitted_tail->next = j;
    else
        e->submitted = j;
    e->submitted_tail = j;
    pthread_cond_signal(&e->work);
    while (j->state == JOB_SUBMITTED)
        pthread_cond_wait(&e->out, &e->lock);
    int refused = j->state == JOB_FAILED;
    if (refused) {
        *error = j->error;
        job_unref(j);
    } else {
        *out = j;
    }
    pthread_mutex_unlock(&e->lock);
    return refused ? -1 : 0;
}

static ServeResponseHead head_of(const ServeEngine *e, const ServeJob *j)
{
    int completion = 0;
    for (int k = 0; k < j->p.n; k++)
        completion += j->choice[k].n_ids;
    return (ServeResponseHead){.kind = j->p.kind, .id = j->id, .created = j->created, .model = e->cfg.model_name,
                               .prompt_tokens = j->n_prompt, .completion_tokens = completion};
}

int serve_job_streams(const ServeJob *j)
{
    return j->p.stream;
}

/* "data: JSON\n\n" (the JSON freed). */
static int put_event(ServeBuf *out, char *json)
{
    if (!json)
        return -1;
    int rc = serve_buf_put(out, "data: ", 6) || serve_buf_put(out, json, strlen(json)) ||
             serve_buf_put(out, "\n\n", 2);
    free(json);
    return rc ? -1 : 0;
}

/* Whether the stream of a job has something to write now. */
static int stream_due(const ServeJob *j)
{
    if (j->state == JOB_FAILED || j->finished == j->p.n)
        return 1;
    for (int k = 0; k < j->p.n; k++)
        if (j->choice[k].safe_len > j->choice[k].sent || (j->choice[k].finish && !j->choice[k].finish_sent))
            return 1;
    return 0;
}

static void deadline_in(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_REALTIME, ts);
    double whole = floor(s);
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The chunks of choice k that are due. */
static int stream_choice(const ServeEngine *e, ServeJob *j, int k, ServeBuf *out)
{
    ServeChoice *c = &j->choice[k];
    ServeResponseHead h = head_of(e, j);
    if (c->safe_len > c->sent || !c->started) {
        ServeChoiceView v = {.text = c->text + c->sent, .len = c->safe_len - c->sent,
                             .token_ids = j->p.return_token_ids ? c->ids + c->ids_sent : NULL,
                             .n_token_ids = c->n_ids - c->ids_sent};
        if (put_event(out, serve_chunk_json(&h, k, &v, !c->started)))
            return -1;
        c->started = 1;
        c->sent = c->safe_len;
        c->ids_sent = c->n_ids;
    }
    if (c->finish && !c->finish_sent && c->sent == c->len) {
        ServeChoiceView v = {.text = "", .len = 0, .finish = c->finish};
        if (put_event(out, serve_chunk_json(&h, k, &v, 0)))
            return -1;
        c->finish_sent = 1;
    }
    return 0;
}

int serve_job_stream(ServeEngine *e, ServeJob *j, ServeBuf *out, double wait_s)
{
    struct timespec deadline;
    deadline_in(&deadline, wait_s);
    pthread_mutex_lock(&e->lock);
    int rc = 0;
    while (!stream_due(j) && rc == 0)
        rc = pthread_cond_timedwait(&e->out, &e->lock, &deadline);
    int status = 0;
    if (j->state == JOB_FAILED) {
        status = put_event(out, serve_error_json(&j->error)) || serve_buf_put(out, "data: [DONE]\n\n", 14) ? -1 : 1;
    } else if (!stream_due(j)) {
        status = serve_buf_put(out, ": keep-alive\n\n", 14);
    } else {
        for (int k = 0; k < j->p.n && status == 0; k++)
            status = stream_choice(e, j, k, out);
        if (status == 0 && j->finished == j->p.n) {
            ServeResponseHead h = head_of(e, j);
            if (j->p.include_usage && !j->usage_sent && put_event(out, serve_usage_chunk_json(&h)))
                status = -1;
            else
                status = serve_buf_put(out, "data: [DONE]\n\n", 14) ? -1 : 1;
            j->usage_sent = 1;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return status;
}

char *serve_job_response(ServeEngine *e, ServeJob *j, int *status)
{
    pthread_mutex_lock(&e->lock);
    while (j->finished < j->p.n && j->state != JOB_FAILED)
        pthread_cond_wait(&e->out, &e->lock);
    char *json;
    if (j->state == JOB_FAILED) {
        *status = j->error.status;
        json = serve_error_json(&j->error);
    } else {
        ServeChoiceView views[SERVE_MAX_N];
        for (int k = 0; k < j->p.n; k++) {
            const ServeChoice *c = &j->choice[k];
            views[k] = (ServeChoiceView){.text = c->text, .len = c->len, .finish = c->finish,
                                         .token_ids = j->p.return_token_ids ? c->ids : NULL, .n_token_ids = c->n_ids};
        }
        ServeResponseHead h = head_of(e, j);
        *status = 200;
        json = serve_response_json(&h, views, j->p.n);
    }
    pthread_mutex_unlock(&e->lock);
    return json;
}

void serve_job_release(ServeEngine *e, ServeJob *j)
{
    pthread_mutex_lock(&e->lock);
    if (j->finished < j->p.n) {
        j->cancelled = 1;
        pthread_cond_signal(&e->work);
    }
    job_unref(j);
    pthread_mutex_unlock(&e->lock);
}

char *serve_engine_metrics(ServeEngine *e)
{
    pthread_mutex_lock(&e->lock);
    ServeMetrics m = e->metrics;
    pthread_mutex_unlock(&e->lock);
    return serve_metrics_text(&m, e->cfg.model_name);
}
