#define _GNU_SOURCE /* open_memstream, vsnprintf with format checks */
#include "serving.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrivals.h"
#include "assets.h"
#include "generate.h"
#include "mem.h"
#include "ops.h"
#include "outfile.h"
#include "serving_device.h"
#include "trace.h"

/* ------------------------------------------------------------ breakdown */

void kv_track_set_reserved(KvReservationTrack *t, size_t bytes)
{
    if (bytes != t->reserved)
        t->steps_since_change = 0;
    t->reserved = bytes;
}

void kv_track_step(KvReservationTrack *t, size_t used_bytes)
{
    t->reserved_steps += (double)t->reserved;
    t->used_steps += (double)used_bytes;
    t->steps_since_change++;
}

void kv_track_close(KvReservationTrack *t, size_t final_bytes, KvBreakdown *b)
{
    /* Only the last reservation size can exceed the final length (an
     * earlier one was outgrown, so it was smaller than what came after). */
    double never_used = 0.0;
    if (t->reserved > final_bytes)
        never_used = (double)(t->reserved - final_bytes) * (double)t->steps_since_change;
    b->token_states += t->used_steps;
    b->internal_fragmentation += never_used;
    b->reserved += t->reserved_steps - t->used_steps - never_used;
    memset(t, 0, sizeof *t);
}

void kv_breakdown_fractions(const KvBreakdown *b, double out[4])
{
    double parts[4] = {b->token_states, b->reserved, b->internal_fragmentation, b->external_fragmentation};
    double total = parts[0] + parts[1] + parts[2] + parts[3];
    for (int i = 0; i < 4; i++)
        out[i] = total > 0 ? parts[i] / total : 0.0;
}

/* ------------------------------------------------------------ requests */

int serving_feed(ServingRun *run, Request *r, Err *err)
{
    return serving_feed_upto(run, r, r->n_tokens, err);
}

int serving_feed_upto(ServingRun *run, Request *r, int end, Err *err)
{
    int n = end - r->n_cached;
    if (n <= 0 || end > r->n_tokens)
        return err_set(err, "request %d has no token without K/V to feed up to position %d", r->index, end);
    if (run->n_entries + n > run->max_step_tokens)
        return err_set(err, "step of more than %d tokens (request %d needs %d more)", run->max_step_tokens, r->index,
                       n);
    int last = end == r->n_tokens; /* only the newest token's logits pick a next token */
    if (last && run->n_logits >= run->max_logits)
        return err_set(err, "step wants more than %d logits rows", run->max_logits);
    for (int pos = r->n_cached; pos < end; pos++)
        run->entries[run->n_entries++] =
            (BatchEntry){.seq = r->index, .pos = pos, .token = r->tokens[pos], .logits_row = -1};
    if (!last)
        return 0;
    run->entries[run->n_entries - 1].logits_row = run->n_logits;
    run->taker_row[run->n_takers] = run->n_logits++;
    run->taker_req[run->n_takers++] = r->index;
    return 0;
}

int serving_share_logits(ServingRun *run, const Request *source, Request *taker, Err *err)
{
    for (int i = 0; i < run->n_takers; i++)
        if (run->taker_req[i] == source->index) {
            run->taker_row[run->n_takers] = run->taker_row[i];
            run->taker_req[run->n_takers++] = taker->index;
            return 0;
        }
    return err_set(err, "request %d was not fed this step; request %d cannot share its logits", source->index,
                   taker->index);
}

/* Every change of phase goes through here, so that the counts of running
 * and waiting requests are known at every step without looking at all the
 * requests (a file may hold a million). */
static void set_phase(ServingRun *run, Request *r, RequestPhase phase)
{
    run->n_running -= r->phase == REQ_RUNNING;
    run->n_waiting -= r->phase == REQ_WAITING;
    r->phase = phase;
    run->n_running += phase == REQ_RUNNING;
    run->n_waiting += phase == REQ_WAITING;
}

void serving_admit(ServingRun *run, Request *r)
{
    set_phase(run, r, REQ_RUNNING);
    if (r->admitted_step < 0)
        r->admitted_step = run->step;
    if (run->latency.reqs)
        timeline_admit(&run->latency.reqs[r->index], run->clock.step_begin_s);
    trace_event(run->trace, "admit", r->index, NULL);
}

void serving_preempt(ServingRun *run, Request *r)
{
    trace_event(run->trace, "preempt", r->index, NULL);
    set_phase(run, r, REQ_WAITING);
    r->n_cached = 0;
    r->preemptions++;
}

void serving_reject(ServingRun *run, Request *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
    set_phase(run, r, REQ_DONE);
    r->finish = REQ_FINISH_REJECTED;
    r->finished_step = run->step;
    run->n_done++;
    trace_event(run->trace, "reject", r->index, r->note);
}

size_t serving_kv_budget(const ServingRun *run)
{
    if (run->opts->kv_budget > 0)
        return run->opts->kv_budget;
    return 8u * (size_t)run->model->cfg.seq_len * run->kv_bytes_per_token;
}

/* One step of request i's reservation; adds its bytes to the step's totals. */
static void account_request(ServingRun *run, int i, size_t *reserved, size_t *used)
{
    Request *r = &run->reqs[i];
    if (r->kv.reserved == 0)
        return;
    size_t u = (size_t)r->n_cached * run->kv_bytes_per_token;
    kv_track_step(&r->kv, u);
    *reserved += r->kv.reserved;
    *used += u;
}

void serving_account_default(ServingRun *run)
{
    size_t reserved = 0, used = 0;
    for (int i = 0; i < run->n_reqs; i++)
        account_request(run, i, &reserved, &used);
    kv_timeline_record(&run->timeline, run->step, reserved, used);
}

void serving_account_holders(ServingRun *run, const int *holders, int n_holders)
{
    size_t reserved = 0, used = 0;
    for (int k = 0; k < n_holders; k++)
        account_request(run, holders[k], &reserved, &used);
    kv_timeline_record(&run->timeline, run->step, reserved, used);
}

/* ------------------------------------------------------------ set-up */

/* The prompt's ids (@p ids: room for its bytes + 3), as one user message
 * in the chat template with --chat. */
static int encode_prompt(const ServingRun *run, const char *prompt, int *ids, int *n_ids, Err *err)
{
    if (!run->chat)
        return tokenizer_encode(run->tokenizer, prompt, 1, 0, ids, n_ids, err);
    char *rendered;
    if (chat_render(&run->chat_template, prompt, &rendered, err))
        return -1;
    int rc = tokenizer_encode(run->tokenizer, rendered, 1, 0, ids, n_ids, err);
    mem_free(rendered);
    return rc;
}

static int init_request(ServingRun *run, Request *r, const RequestSpec *spec, int sample, Err *err)
{
    const ModelConfig *c = &run->model->cfg;
    r->spec = spec;
    r->sample = sample;
    r->admitted_step = r->finished_step = -1;
    r->tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)model_max_tokens(c), sizeof(int));
    /* A prompt too long to fit is rejected before it is tokenized (or,
     * with --chat, rendered). */
    size_t text_len = strlen(spec->prompt), fits = tokenizer_max_text_bytes(run->tokenizer, c->seq_len);
    if (run->chat)
        text_len += chat_overhead_bytes(&run->chat_template);
    int too_long = text_len > fits;
    int *ids = mem_alloc_array(MEM_ACTIVATIONS, too_long ? 1 : text_len + 3, sizeof(int));
    if (!r->tokens || !ids) {
        mem_free(ids);
        return err_set(err, "out of memory for request %d", spec->id);
    }
    int n_ids = 0;
    if (!too_long && encode_prompt(run, spec->prompt, ids, &n_ids, err)) {
        mem_free(ids);
        return err_prefix(err, "request %d (line %d)", spec->id, spec->line);
    }
    const CliOptions *o = run->opts;
    SamplingParams sampling = cli_sampling_params(o);
    if (sampler_init_params(&r->sampler, c->vocab_size, &sampling, o->seed + (unsigned long long)r->index, err)) {
        mem_free(ids);
        return -1;
    }
    if (too_long) {
        serving_reject(run, r, "its prompt is %zu bytes, more than the %zu that the model's seq_len of %d tokens "
                       "can hold", text_len, fits, c->seq_len);
    } else if (n_ids > c->seq_len) {
        serving_reject(run, r, "its prompt is %d tokens; the model's seq_len is %d", n_ids, c->seq_len);
        n_ids = 0;
    }
    memcpy(r->tokens, ids, (size_t)n_ids * sizeof(int));
    mem_free(ids);
    r->n_prompt = r->n_tokens = n_ids;
    long want = (long)n_ids + spec->max_new_tokens;
    r->max_tokens = (int)(want < model_max_tokens(c) ? want : model_max_tokens(c));
    return 0;
}

/* Requests x samples, and the bookkeeping they need (the Request, its
 * token list, its outputs' times, its sampler's scratch), checked before anything is
 * allocated: an int product that wrapped round, or a run that would use
 * up the machine's memory before its first step, gets one line instead. */
static int check_request_count(int lines, int samples, const ModelConfig *c, const SamplingParams *sampling,
                               Err *err)
{
    if (lines > INT_MAX / samples)
        return err_set(err, "%d requests x --n %d is more than %d requests", lines, samples, INT_MAX);
    size_t n = (size_t)lines * (size_t)samples;
    size_t per_request = sizeof(Request) + (size_t)model_max_tokens(c) * (sizeof(int) + sizeof(double)) +
                         sizeof(RequestTimeline) + sampler_scratch_bytes(c->vocab_size, sampling) +
                         5 * MEM_ALIGN; /* the token list, the outputs' times and up to three sampler buffers, each aligned */
    size_t ram = mem_physical_bytes();
    if (ram && n > ram / 2 / per_request) {
        char need[32], have[32];
        return err_set(err, "%zu requests (%d lines x --n %d) need %s of bookkeeping, more than half of this "
                       "machine's %s", n, lines, samples,
                       cli_format_bytes(need, sizeof need, (double)n * (double)per_request),
                       cli_format_bytes(have, sizeof have, (double)ram));
    }
    return 0;
}

/* Each line's arrival: the file's, or drawn by --arrival-rate / --arrival
 * (one draw per line, in file order; the samples of a line arrive
 * together). */
static int set_arrivals(ServingRun *run, const RequestFile *rf, int per_line, Err *err)
{
    const CliOptions *o = run->opts;
    if (o->arrival_rate > 0 && rf->arrivals != REQUEST_ARRIVAL_NONE)
        return err_set(err, "the request file gives arrival %s (@ fields); --arrival-rate and --arrival would replace "
                       "them: give one or the other", rf->arrivals == REQUEST_ARRIVAL_STEPS ? "steps" : "times");
    ArrivalStream stream;
    ArrivalProcess p = {o->arrival_rate, o->arrival_cv};
    if (o->arrival_rate > 0)
        arrival_stream_init(&stream, &p, o->arrival_seed);
    for (int line = 0; line < rf->count; line++) {
        double at = o->arrival_rate > 0 ? arrival_stream_next(&stream) : rf->items[line].arrival_s;
        for (int k = 0; k < per_line; k++) {
            Request *r = &run->reqs[line * per_line + k];
            r->arrival_s = at;
            r->arrival_step = rf->items[line].arrival_step;
        }
    }
    return 0;
}

/* --clock model, or --machine with the wall clock: the cost model of the
 * model as its file stores it. */
static int set_clock(ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    int model_clock = o->clock && strcmp(o->clock, "model") == 0;
    if (!model_clock && !o->machine)
        return 0;
    CostMachine machine;
    if (cost_machine_load(o->machine ? o->machine : COST_MACHINE_DEFAULT, &machine, err))
        return -1;
    CostShape shape;
    cost_shape_init(&run->model->cfg, (double)run->model->weight_bytes, (double)run->kv_bytes_per_token, &shape);
    serving_use_cost_model(run, &machine, &shape, model_clock);
    return 0;
}

int serving_run_init(ServingRun *run, const Model *m, const Tokenizer *t, const CliOptions *opts,
                     const RequestFile *rf, Err *err)
{
    memset(run, 0, sizeof *run);
    run->model = m;
    run->tokenizer = t;
    run->opts = opts;
    run->kv_bytes_per_token = model_kv_bytes_per_token(&m->cfg, sizeof(float));
    /* --n samples or --beam beams of each line, one request each. */
    int n = opts->beam_width > 0 ? opts->beam_width : opts->n_samples > 0 ? opts->n_samples : 1;
    SamplingParams sampling = cli_sampling_params(opts);
    if (check_request_count(rf->count, n, &m->cfg, &sampling, err))
        return -1;
    if (opts->chat) {
        if (chat_template_open(&run->chat_template, t, err))
            return -1;
        run->chat = 1;
    }
    run->n_reqs = rf->count * n;
    run->reqs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(Request));
    if (!run->reqs) {
        serving_run_free(run);
        return err_set(err, "out of memory for %d requests", run->n_reqs);
    }
    for (int i = 0; i < run->n_reqs; i++) {
        run->reqs[i].index = i;
        if (init_request(run, &run->reqs[i], &rf->items[i / n], i % n, err)) {
            serving_run_free(run);
            return -1;
        }
    }
    if (set_arrivals(run, rf, n, err) || set_clock(run, err)) {
        serving_run_free(run);
        return -1;
    }
    run->latency_out = cli_latency_asked(opts) || rf->arrivals != REQUEST_ARRIVAL_NONE;
    return 0;
}

void serving_run_free(ServingRun *run)
{
    for (int i = 0; i < run->n_observers; i++)
        if (run->observers[i].free_ctx)
            run->observers[i].free_ctx(run->observers[i].ctx);
    run->n_observers = 0;
    if (run->reqs)
        for (int i = 0; i < run->n_reqs; i++) {
            mem_free(run->reqs[i].tokens);
            sampler_free(&run->reqs[i].sampler);
        }
    mem_free(run->reqs);
    mem_free(run->entries);
    mem_free(run->taker_row);
    mem_free(run->taker_req);
    mem_free(run->finished_now);
    mem_free(run->logits_scratch);
    mem_free(run->sim_specs);
    latency_recorder_free(&run->latency);
    chat_template_close(&run->chat_template);
    forward_state_free(&run->fs);
    memset(run, 0, sizeof *run);
}

/* ------------------------------------------------------------ the loop */

static void finish(ServingRun *run, Request *r, RequestFinish why)
{
    set_phase(run, r, REQ_DONE);
    r->finish = why;
    r->finished_step = run->step;
    run->n_done++;
    trace_event(run->trace, "finish", r->index, why == REQ_FINISH_STOP ? "stop" : "length");
}

/* Whether @p token ends a request: the tokenizer's stop tokens (as in the
 * single-stream chapters), the end of the assistant's turn with --chat; in
 * a simulation (no tokenizer) the llama2.c markers. */
static int is_stop_token(const ServingRun *run, int token)
{
    if (run->simulated || !run->tokenizer)
        return token == TOKEN_BOS || token == TOKEN_EOS;
    return tokenizer_is_stop(run->tokenizer, token) ||
           (run->chat && token == chat_end_token(&run->chat_template));
}

/* Appends `next` to r, or ends r: a stop token stops it, its last allowed
 * token ends it by length. Returns 1 when r finished. */
static int take_token(ServingRun *run, Request *r, int next)
{
    if (run->latency.reqs) /* the stop is an output too: the client waited for this step */
        timeline_output(&run->latency.reqs[r->index], run->clock.outputs_s, run->step);
    if (is_stop_token(run, next)) {
        finish(run, r, REQ_FINISH_STOP);
        return 1;
    }
    r->tokens[r->n_tokens++] = next;
    run->tokens_generated++;
    if (r->n_tokens >= r->max_tokens) {
        finish(run, r, REQ_FINISH_LENGTH);
        return 1;
    }
    return 0;
}

int serving_take_token(ServingRun *run, Request *r, int next)
{
    if (!take_token(run, r, next))
        return 0;
    run->finished_now[run->n_finished++] = r->index;
    return 1;
}

/* Samples the next token of every request that got logits this step
 * (@p logits: [n_logits][vocab_size]). Returns how many finished; their
 * indexes go to run->finished_now. */
static int take_sampled_tokens(ServingRun *run, const float *logits)
{
    int n_done = 0;
    size_t vocab = (size_t)run->model->cfg.vocab_size;
    for (int i = 0; i < run->n_takers; i++) {
        Request *r = &run->reqs[run->taker_req[i]];
        /* Sampling scales the logits in place; a shared row must reach every
         * taker intact, so each samples from its own copy. */
        memcpy(run->logits_scratch, logits + (size_t)run->taker_row[i] * vocab, vocab * sizeof(float));
        int next = sampler_sample_seq(&r->sampler, run->logits_scratch, r->tokens, r->n_prompt, r->n_tokens);
        if (take_token(run, r, next))
            run->finished_now[n_done++] = r->index;
    }
    return n_done;
}

/* The simulator's sampler: a dummy token, or EOS once the request has its
 * predetermined length (stop_at). */
static int take_simulated_tokens(ServingRun *run)
{
    int n_done = 0;
    for (int i = 0; i < run->n_takers; i++) {
        Request *r = &run->reqs[run->taker_req[i]];
        int next = r->stop_at > 0 && r->n_tokens >= r->stop_at ? TOKEN_EOS : SERVING_SIM_TOKEN;
        if (take_token(run, r, next))
            run->finished_now[n_done++] = r->index;
    }
    return n_done;
}

static int count_phase(const ServingRun *run, RequestPhase phase)
{
    int n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        n += run->reqs[i].phase == phase;
    return n;
}

void serving_show_progress(ServingRun *run, FILE *log)
{
    if (!log)
        return;
    double now = now_seconds();
    int tty = isatty(fileno(log));
    if (run->progress_shown_s == 0.0)
        run->progress_shown_s = now; /* the first line comes after a while, not at once */
    if (now - run->progress_shown_s < (tty ? 0.25 : 5.0))
        return;
    run->progress_shown_s = now;
    fprintf(log, "%s[step %ld] running %d, waiting %d, done %d/%d%s", tty ? "\r" : "", run->step,
            run->n_running, run->n_waiting, run->n_done, run->n_reqs, tty ? "" : "\n");
    fflush(log);
}

/* ------------------------------------------------------------ arrivals */

/* Requests arrive in file order: FCFS among the arrived is then file order,
 * which is what the chapters' queues assume. */
static int check_arrival_order(const ServingRun *run, Err *err)
{
    for (int i = 1; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i], *prev = &run->reqs[i - 1];
        if (r->arrival_step < prev->arrival_step)
            return err_set(err, "request %d arrives at step %ld, before request %d (step %ld): arrivals must follow "
                           "file order", r->spec->id, r->arrival_step, prev->spec->id, prev->arrival_step);
        if (r->arrival_s < prev->arrival_s)
            return err_set(err, "request %d arrives at %.9g s, before request %d (%.9g s): arrivals must follow file "
                           "order", r->spec->id, r->arrival_s, prev->spec->id, prev->arrival_s);
    }
    return 0;
}

/* Whether request r has arrived by now: its step is reached and its time
 * has come. */
static int has_arrived(const ServingRun *run, const Request *r)
{
    return r->arrival_step <= run->step && r->arrival_s <= run->clock.now_s;
}

/* Every request that has arrived by now joins the queue. A request that
 * arrives by step joins at the clock of that step's beginning; one that
 * arrives by time, at its time (it may have waited since, in the middle
 * of a step). */
static void let_arrivals_in(ServingRun *run)
{
    while (run->n_arrived < run->n_reqs && has_arrived(run, &run->reqs[run->n_arrived])) {
        Request *r = &run->reqs[run->n_arrived++];
        if (r->phase == REQ_PENDING)
            set_phase(run, r, REQ_WAITING);
        if (run->latency.reqs)
            timeline_arrive(&run->latency.reqs[r->index], r->arrival_step > 0 ? run->clock.now_s : r->arrival_s,
                            run->step);
    }
}

/* Called once the chapter is open (it has seen, and possibly rejected,
 * every request): those that have not arrived step out of the queue. The
 * counts of running and waiting requests start here, from the phases the
 * requests have (a test may have built them by hand). */
static void hold_until_arrival(ServingRun *run)
{
    run->n_arrived = 0;
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].phase == REQ_WAITING && !has_arrived(run, &run->reqs[i]))
            run->reqs[i].phase = REQ_PENDING;
    run->n_running = count_phase(run, REQ_RUNNING);
    run->n_waiting = count_phase(run, REQ_WAITING);
    let_arrivals_in(run);
}

/* When nobody that has arrived is left to serve, time jumps to the next
 * arrival: those steps run no batch and reserve nothing. */
static void wait_for_arrivals(ServingRun *run)
{
    let_arrivals_in(run);
    if (run->n_done == run->n_reqs || run->n_arrived == run->n_reqs)
        return;
    if (run->n_waiting > 0 || run->n_running > 0)
        return;
    const Request *next = &run->reqs[run->n_arrived];
    if (next->arrival_step > run->step)
        run->step = next->arrival_step;
    if (next->arrival_s > run->clock.now_s)
        run->clock.now_s = next->arrival_s;
    let_arrivals_in(run);
}

/* ------------------------------------------------------------ one step */

static int alloc_step_buffers(ServingRun *run, int max_tokens, int max_logits, int with_forward, Err *err)
{
    run->max_step_tokens = max_tokens;
    run->max_logits = max_logits;
    run->entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)max_tokens, sizeof(BatchEntry));
    run->taker_row = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    run->taker_req = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    run->finished_now = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    if (!run->entries || !run->taker_row || !run->taker_req || !run->finished_now)
        return err_set(err, "out of memory for a step of %d tokens", max_tokens);
    if (!with_forward)
        return 0;
    run->logits_scratch = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->model->cfg.vocab_size, sizeof(float));
    if (!run->logits_scratch)
        return err_set(err, "out of memory for the logits");
    if (run->device)
        return 0; /* the activations are on the device (serving_device_start()) */
    return forward_state_init(&run->fs, &run->model->cfg, max_tokens, max_logits, err);
}

/* The most outputs request i can have: a token for each position up to
 * max_tokens, or (simulated) its tokens up to its stop and the stop
 * itself; a request that stops earlier has fewer (its stop is its last
 * output, in place of a token). Rejected requests have none. */
static int output_capacity(const void *ctx, int i)
{
    const Request *r = &((const ServingRun *)ctx)->reqs[i];
    if (r->finish == REQ_FINISH_REJECTED || r->n_prompt == 0)
        return 0;
    return r->stop_at > 0 ? r->stop_at - r->n_prompt + 1 : r->max_tokens - r->n_prompt;
}

int serving_open_steps(ServingRun *run, int max_step_tokens, int max_logits, Err *err)
{
    int with_forward = !run->simulated;
    if (alloc_step_buffers(run, max_step_tokens, max_logits, with_forward, err) ||
        latency_recorder_init(&run->latency, run->n_reqs, output_capacity, run, err))
        return -1;
    hold_until_arrival(run);
    if (with_forward && run->device)
        return serving_device_start(run->device, run, max_step_tokens, max_logits, err);
    return 0;
}

int serving_widen_steps(ServingRun *run, int max_step_tokens, int max_logits, Err *err)
{
    if (run->device)
        return err_set(err, "the step's buffers cannot grow on the device");
    if (max_step_tokens < run->max_step_tokens)
        max_step_tokens = run->max_step_tokens;
    if (max_logits < run->max_logits)
        max_logits = run->max_logits;
    BatchEntry *entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)max_step_tokens, sizeof(BatchEntry));
    if (!entries)
        return err_set(err, "out of memory for a step of %d tokens", max_step_tokens);
    mem_free(run->entries);
    run->entries = entries;
    run->max_step_tokens = max_step_tokens;
    run->max_logits = max_logits;
    if (run->simulated)
        return 0;
    forward_state_free(&run->fs);
    return forward_state_init(&run->fs, &run->model->cfg, max_step_tokens, max_logits, err);
}

int serving_unfinished(const ServingRun *run)
{
    return run->n_done < run->n_reqs;
}

int serving_step_begin(ServingRun *run)
{
    wait_for_arrivals(run);
    if (run->n_done == run->n_reqs)
        return 0;
    run->n_entries = run->n_logits = run->n_takers = run->n_finished = 0;
    RunClock *c = &run->clock;
    c->step_begin_s = c->outputs_s = c->now_s;
    c->step_model_s = 0.0;
    c->work = (StepWork){0};
    c->attended_given = 0;
    if (c->has_machine && !c->model)
        c->step_cpu_started_s = process_cpu_seconds();
    run->step_started_s = now_seconds();
    return 1;
}

/* The step's work, its modelled time, and when its outputs are ready: at
 * the end of its forward pass, on the run's clock. */
static void time_step(ServingRun *run)
{
    RunClock *c = &run->clock;
    c->work.tokens = run->n_entries;
    c->work.logits_rows = run->n_logits;
    if (!c->attended_given) {
        long attended = 0;
        for (int i = 0; i < run->n_entries; i++) /* position p reads positions 0..p */
            attended += run->entries[i].pos + 1;
        c->work.attended = attended;
    }
    if (c->has_machine)
        c->step_model_s = cost_step_seconds(&c->machine, &c->shape, &c->work);
    c->outputs_s = c->step_begin_s + (c->model ? c->step_model_s : now_seconds() - run->step_started_s);
}

int serving_step_forward(ServingRun *run, const KvSeam *seam, Err *err)
{
    if (run->n_entries == 0)
        return err_set(err, "step %ld: no request could run (%d waiting, %d running); the scheduler is stuck",
                       run->step, run->n_waiting, run->n_running);
    int running = run->n_running;
    if (running > run->max_concurrent)
        run->max_concurrent = running;
    run->running_sum += running;
    run->busy_steps++;
    /* The batch through the model: on the CPU through the chapter's seam,
     * or on the device; either way the logits come back to the host. A
     * simulation runs no model. */
    run->logits = NULL;
    if (run->simulated) {
        /* nothing to run: the fed positions only count as cached */
    } else if (run->device) {
        if (serving_device_forward(run->device, run, &run->logits, err))
            return -1;
    } else {
        forward(run->model, &run->fs, seam, run->entries, run->n_entries);
        run->logits = run->fs.logits;
    }
    for (int i = 0; i < run->n_entries; i++) {
        Request *r = &run->reqs[run->entries[i].seq];
        if (run->entries[i].pos + 1 > r->n_cached)
            r->n_cached = run->entries[i].pos + 1;
    }
    time_step(run);
    return 0;
}

void serving_step_sample(ServingRun *run)
{
    run->n_finished = run->simulated ? take_simulated_tokens(run) : take_sampled_tokens(run, run->logits);
}

int serving_step_finished(ServingRun *run)
{
    for (int i = run->n_observers - 1; i >= 0; i--) /* newest first */
        run->observers[i].observe(run->observers[i].ctx, run);
    return run->n_finished;
}

int serving_add_observer(ServingRun *run, void (*observe)(void *ctx, const ServingRun *run), void *ctx,
                         void (*free_ctx)(void *ctx), Err *err)
{
    if (run->n_observers == SERVING_MAX_OBSERVERS) {
        if (free_ctx)
            free_ctx(ctx);
        return err_set(err, "a run watched by more than %d observers", SERVING_MAX_OBSERVERS);
    }
    run->observers[run->n_observers++] = (ServingObserver){.observe = observe, .ctx = ctx, .free_ctx = free_ctx};
    return 0;
}

void serving_remove_observer(ServingRun *run, const void *ctx)
{
    for (int i = 0; i < run->n_observers; i++)
        if (run->observers[i].ctx == ctx) {
            memmove(run->observers + i, run->observers + i + 1,
                    (size_t)(run->n_observers - i - 1) * sizeof run->observers[0]);
            run->n_observers--;
            return;
        }
}

void serving_note_fork(ServingRun *run, const Request *parent, const Request *child)
{
    long child_index = child->index;
    trace_event_values(run->trace, "fork", parent->index, 1, &child_index);
}

void serving_step_end(ServingRun *run)
{
    double measured = now_seconds() - run->step_started_s;
    RunClock *c = &run->clock;
    run->step++;
    run->elapsed_s += measured;
    c->now_s = c->step_begin_s + (c->model ? c->step_model_s : measured);
    if (c->has_machine && !c->model && measured > 0) {
        cost_check_add(&c->check, c->step_model_s, measured);
        double cpu = process_cpu_seconds() - c->step_cpu_started_s;
        if (cpu > 0)
            cost_check_add(&c->check_cpu, c->step_model_s, cpu);
    }
}

void serving_use_cost_model(ServingRun *run, const CostMachine *m, const CostShape *shape, int model_clock)
{
    RunClock *c = &run->clock;
    c->machine = *m;
    c->shape = *shape;
    c->has_machine = 1;
    c->model = model_clock;
}

void serving_note_transfer(ServingRun *run, double bytes)
{
    run->clock.work.transfer_bytes += bytes;
}

void serving_set_attended(ServingRun *run, long attended)
{
    run->clock.work.attended = attended;
    run->clock.attended_given = 1;
}

int serving_latency_summary(const ServingRun *run, LatencySummary *out, Err *err)
{
    const CliOptions *o = run->opts;
    LatencySlo slo = {o ? o->slo_ttft : 0.0, o ? o->slo_tpot : 0.0};
    return latency_summarize(run->latency.reqs, run->latency.n, run->clock.now_s, run->tokens_generated, &slo, out,
                             err);
}

const char *serving_clock_describe(const ServingRun *run, char *buf, size_t n)
{
    if (!run->clock.model) {
        snprintf(buf, n, "wall clock: each step's measured time; an idle server skips ahead to the next arrival");
        return buf;
    }
    char machine[256];
    snprintf(buf, n, "model clock, %s", cost_machine_describe(&run->clock.machine, machine, sizeof machine));
    return buf;
}

/* ------------------------------------------------------------ simulation */

int serving_sim_init(ServingRun *run, const Model *shape, const CliOptions *opts, size_t kv_bytes_per_token,
                     const SimRequestSpec *reqs, int n, Err *err)
{
    memset(run, 0, sizeof *run);
    if (n < 1)
        return err_set(err, "a simulation needs at least one request");
    const int seq_len = shape->cfg.seq_len;
    run->model = shape;
    run->opts = opts;
    run->kv_bytes_per_token = kv_bytes_per_token;
    run->no_kv_storage = 1;
    run->n_reqs = n;
    run->reqs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(Request));
    run->sim_specs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(RequestSpec));
    if (!run->reqs || !run->sim_specs) {
        serving_run_free(run);
        return err_set(err, "out of memory for %d requests", n);
    }
    for (int i = 0; i < n; i++) {
        const SimRequestSpec *q = &reqs[i];
        Request *r = &run->reqs[i];
        run->sim_specs[i] = (RequestSpec){.id = i, .line = i + 1, .max_new_tokens = q->max_new_tokens, .prompt = ""};
        *r = (Request){.spec = &run->sim_specs[i], .index = i, .admitted_step = -1, .finished_step = -1,
                       .arrival_step = q->arrival_step, .arrival_s = q->arrival_s};
        r->tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)model_max_tokens(&shape->cfg), sizeof(int));
        if (!r->tokens) {
            serving_run_free(run);
            return err_set(err, "out of memory for request %d", i);
        }
        if (q->prompt_tokens < 1 || q->prompt_tokens > seq_len || q->max_new_tokens < 1) {
            serving_reject(run, r, "its prompt is %d tokens and it asks for %d more; the model's seq_len is %d",
                           q->prompt_tokens, q->max_new_tokens, seq_len);
            continue;
        }
        for (int k = 0; k < q->prompt_tokens; k++)
            r->tokens[k] = k == 0 ? TOKEN_BOS : SERVING_SIM_TOKEN;
        r->n_prompt = r->n_tokens = q->prompt_tokens;
        long want = (long)q->prompt_tokens + q->max_new_tokens;
        r->max_tokens = (int)(want < model_max_tokens(&shape->cfg) ? want : model_max_tokens(&shape->cfg));
        if (q->output_tokens > 0 && q->prompt_tokens + (long)q->output_tokens < r->max_tokens)
            r->stop_at = q->prompt_tokens + q->output_tokens;
    }
    run->simulated = 1;
    if (check_arrival_order(run, err)) {
        serving_run_free(run);
        return -1;
    }
    return 0;
}

long serving_preemptions(const ServingRun *run)
{
    long n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        n += run->reqs[i].preemptions;
    return n;
}

/* ------------------------------------------------------------ output */

static const char *finish_name(RequestFinish f)
{
    switch (f) {
    case REQ_FINISH_LENGTH: return "length";
    case REQ_FINISH_STOP: return "stop";
    case REQ_FINISH_REJECTED: return "rejected";
    default: return "unfinished";
    }
}

static void json_ids(JsonWriter *j, const char *key, const int *ids, int n)
{
    json_begin_array(j, key);
    for (int i = 0; i < n; i++)
        json_int(j, NULL, ids[i]);
    json_end_array(j);
}

/* The request's times, with a latency option (@p scratch: room for its gaps). */
static void json_request_times(JsonWriter *j, const ServingRun *run, const Request *r, double *scratch)
{
    const RequestTimeline *t = &run->latency.reqs[r->index];
    json_int(j, "arrival_step", t->arrival_step);
    json_int(j, "first_token_step", t->first_output_step);
    latency_json_request(j, t, scratch);
}

static void write_request_line(FILE *f, const ServingRun *run, const Request *r, double *scratch)
{
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    DecodeStream stream;
    Err err = {{0}};
    if (mem && decode_stream_init(&stream, run->tokenizer, r->n_prompt > 0 ? r->tokens[r->n_prompt - 1] : -1,
                                  &err) == 0) {
        size_t len;
        for (int i = r->n_prompt; i < r->n_tokens; i++) {
            const char *piece = decode_stream_push(&stream, r->tokens[i], &len);
            fwrite(piece, 1, len, mem);
        }
        const char *rest = decode_stream_finish(&stream, &len);
        fwrite(rest, 1, len, mem);
        decode_stream_free(&stream);
    }
    if (mem)
        fclose(mem);
    JsonWriter j;
    json_init(&j, f, 0);
    json_begin_object(&j, NULL);
    json_int(&j, "id", r->spec->id);
    json_int(&j, "sample", r->sample);
    json_string(&j, "prompt", r->spec->prompt);
    json_ids(&j, "prompt_tokens", r->tokens, r->n_prompt);
    json_ids(&j, "tokens", r->tokens + r->n_prompt, r->n_tokens - r->n_prompt);
    json_string(&j, "text", text ? text : "");
    json_string(&j, "finish", finish_name(r->finish));
    json_int(&j, "admitted_step", r->admitted_step);
    json_int(&j, "finished_step", r->finished_step);
    json_int(&j, "preemptions", r->preemptions);
    if (r->finish == REQ_FINISH_REJECTED)
        json_string(&j, "note", r->note);
    if (run->latency_out && run->latency.reqs && r->finish != REQ_FINISH_REJECTED)
        json_request_times(&j, run, r, scratch);
    if (run->out_extra)
        run->out_extra(run->out_ctx, &j, r);
    json_end_object(&j);
    fputc('\n', f);
    free(text);
}

int serving_write_jsonl(const ServingRun *run, const char *path, Err *err)
{
    double *scratch = NULL; /* [max_capacity] one request's gaps, with the times */
    size_t room = run->latency.max_capacity > 0 ? (size_t)run->latency.max_capacity : 1;
    if (run->latency_out && !(scratch = mem_alloc_array(MEM_ACTIVATIONS, room, sizeof(double))))
        return err_set(err, "out of memory for --out");
    OutFile out;
    if (outfile_open(&out, "--out", path, err)) {
        mem_free(scratch);
        return -1;
    }
    for (int i = 0; i < run->n_reqs; i++)
        if (!run->out_keep || run->out_keep(run->out_ctx, &run->reqs[i]))
            write_request_line(out.f, run, &run->reqs[i], scratch);
    mem_free(scratch);
    return outfile_commit(&out, err);
}
