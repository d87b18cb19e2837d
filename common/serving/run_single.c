#include "run_single.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "ops.h"
#include "report.h"
#include "threads.h"

/* Context lengths at which the step-time table reports: the powers of two
 * from 16, which make linear and quadratic growth easy to tell apart, and
 * the last step run (a request that stops at EOS or --steps ends between
 * two powers of two). */
static int last_step_length(const Generation *g)
{
    int last = 0;
    for (int t = 1; t <= g->n_tokens; t++)
        if (g->step_seconds[t] > 0)
            last = t;
    return last;
}

static int is_reported_length(int t, int last)
{
    return (t >= 16 && (t & (t - 1)) == 0) || t == last;
}

static void step_time_table(FILE *f, const Generation *g)
{
    fprintf(f, "step time by context length t (one step = one new token)\n");
    fprintf(f, "  %8s %12s %12s\n", "t", "ms/step", "tokens/s");
    int last = last_step_length(g);
    for (int t = 1; t <= g->n_tokens; t++)
        if (is_reported_length(t, last) && g->step_seconds[t] > 0)
            fprintf(f, "  %8d %12.4f %12.1f\n", t, 1e3 * g->step_seconds[t], 1.0 / g->step_seconds[t]);
}

/* What the report's hooks need to see. */
typedef struct {
    const Generation *g;
    const DeviceRun *dev; /* NULL on the CPU */
    void (*table)(FILE *f, void *chapter, const Generation *g);
    void (*json)(JsonWriter *j, void *chapter, const Generation *g);
    void *chapter;
} ReportContext;

/* Why generation ended, in words. */
static const char *finish_words(const Generation *g)
{
    switch (g->finish) {
    case FINISH_STOP: return "the model chose a stop token (EOS or BOS; <|im_end|> with --chat), not printed";
    case FINISH_SEQ_LEN: return "the sequence reached the model's context (seq_len)";
    default: return "the number of new tokens asked for (--steps)";
    }
}

static void table_hook(FILE *f, const void *p)
{
    const ReportContext *rc = p;
    fprintf(f, "work\n  %ld token positions run through the model for %d new tokens\n", rc->g->positions_run,
            rc->g->n_tokens - rc->g->n_prompt);
    fprintf(f, "  stopped at     %s\n", finish_words(rc->g));
    step_time_table(f, rc->g);
    if (rc->dev)
        device_run_report_table(f, rc->dev);
    rc->table(f, rc->chapter, rc->g);
}

/* A single stream's latency: it arrives when generation starts, alone, so
 * its queue is empty; its one TPOT is also its mean ITL (latency.h). */
static void latency_hook(FILE *f, const void *p)
{
    const Generation *g = ((const ReportContext *)p)->g;
    fprintf(f, "latency (wall clock; one request, alone, from the start of generation)\n");
    if (g->n_outputs < 1)
        return;
    fprintf(f, "  TTFT           %.4g ms: the prompt's %d tokens and the first sample\n", 1e3 * g->first_output_s,
            g->n_prompt);
    if (g->n_outputs > 1)
        fprintf(f, "  TPOT           %.4g ms: the mean time of each of the %d later samples\n",
                1e3 * (g->last_output_s - g->first_output_s) / (g->n_outputs - 1), g->n_outputs - 1);
    fprintf(f, "  e2e            %.4g ms for %d outputs (new tokens%s)\n", 1e3 * g->last_output_s, g->n_outputs,
            g->finish == FINISH_STOP ? " and the stop token" : "");
}

static void json_latency(JsonWriter *j, const Generation *g)
{
    json_begin_object(j, "latency");
    json_string(j, "clock", "wall");
    json_int(j, "outputs", g->n_outputs);
    json_double(j, "ttft_s", g->n_outputs > 0 ? g->first_output_s : NAN);
    json_double(j, "tpot_s", g->n_outputs > 1 ? (g->last_output_s - g->first_output_s) / (g->n_outputs - 1) : NAN);
    json_double(j, "e2e_s", g->n_outputs > 0 ? g->last_output_s : NAN);
    json_end_object(j);
}

static const char *finish_name(FinishReason r)
{
    return r == FINISH_STOP ? "stop" : r == FINISH_SEQ_LEN ? "seq_len" : "length";
}

static void json_hook(JsonWriter *j, const void *p)
{
    const ReportContext *rc = p;
    const Generation *g = rc->g;
    json_int(j, "prompt_tokens", g->n_prompt);
    json_string(j, "finish", finish_name(g->finish));
    json_int(j, "positions_run", g->positions_run);
    json_begin_object(j, "step_seconds");
    int last = last_step_length(g);
    for (int t = 1; t <= g->n_tokens; t++)
        if (is_reported_length(t, last) && g->step_seconds[t] > 0) {
            char key[16];
            snprintf(key, sizeof key, "%d", t);
            json_double(j, key, g->step_seconds[t]);
        }
    json_end_object(j);
    json_begin_array(j, "tokens");
    int was_pretty = j->pretty;
    j->pretty = 0;
    for (int i = 0; i < g->n_tokens; i++)
        json_int(j, NULL, g->tokens[i]);
    j->pretty = was_pretty;
    json_end_array(j);
    if (rc->dev)
        device_run_report_json(j, rc->dev);
    json_latency(j, g);
    rc->json(j, rc->chapter, g);
}

int single_run_open(SingleRun *r, const CliProgram *program, int argc, char **argv)
{
    memset(r, 0, sizeof *r);
    r->program = program;
    CliOptions *o = &r->opts;
    CliResult parsed = cli_parse(program, argc, argv, o, &r->err);
    if (parsed == CLI_EXIT_OK) {
        r->help_shown = 1;
        return -1;
    }
    if (parsed == CLI_ERROR)
        return -1;
    ops_set_threads(o->threads);
    /* --device cuda opens the device before anything else, so that a
     * machine without one says so at once; the CPU path refuses the device
     * options. */
    if ((o->json_path && report_check_writable("--json", o->json_path, &r->err)) ||
        device_run_open_if_asked(&r->dev, o, program->name, 1, &r->on_device, &r->err) ||
        assets_open(&r->assets, o, &r->err))
        return -1;
    const Model *m = &r->assets.model;
    if (o->threads == 0)
        ops_set_threads(forward_default_threads(&m->cfg));
    if (threads_check(ops_threads(), &r->err))
        return -1;
    if (!r->on_device && forward_check_context(&m->cfg, ops_threads(), &r->err))
        return -1;
    SamplingParams sampling = cli_sampling_params(o);
    if (sampler_init_params(&r->sampler, m->cfg.vocab_size, &sampling, o->seed, &r->err))
        return -1;
    const Tokenizer *t = &r->assets.tokenizer;
    if (!o->chat)
        return generation_init(&r->gen, m, t, o->prompt, &r->err);
    if (chat_template_open(&r->chat, t, &r->err))
        return -1;
    return generation_init_chat(&r->gen, m, t, &r->chat, o->prompt, &r->err);
}

/* Only once everything is open: a run that fails prints one line. */
static void say_which_model(const SingleRun *r)
{
    char line[PATH_MAX * 2 + 256];
    fprintf(stderr, "%s: %s\n", r->program->name, assets_describe(&r->assets, line, sizeof line));
}

int single_run_start(SingleRun *r, int max_step_tokens)
{
    if (forward_state_init(&r->fs, &r->assets.model.cfg, max_step_tokens, 1, &r->err))
        return -1;
    say_which_model(r);
    return 0;
}

int single_run_start_device(SingleRun *r, DeviceKvOpenFn open_kv, SingleStreamKv *kv)
{
    if (device_run_start(&r->dev, &r->assets.model, &r->opts, open_kv, r->gen.n_prompt, kv, &r->err))
        return -1;
    say_which_model(r);
    return 0;
}

int single_run_generate(SingleRun *r, const SingleStreamKv *kv)
{
    return generate(&r->gen, &r->assets.model, &r->assets.tokenizer, &r->sampler, &r->fs, kv, r->opts.steps, stdout,
                    &r->err);
}

KvDtype single_run_kv_dtype(const SingleRun *r)
{
    KvDtype t = KV_DTYPE_FP32;
    if (r->on_device)
        return kv_dtype_from_device(r->dev.kv_type);
    kv_dtype_parse(r->opts.kv_dtype, &t, NULL); /* cli_parse() checked the name */
    return t;
}

int single_run_report(SingleRun *r, int keeps_kv, void (*table)(FILE *f, void *chapter, const Generation *g),
                      void (*json)(JsonWriter *j, void *chapter, const Generation *g), void *chapter)
{
    if (r->on_device)
        device_run_finish(&r->dev);
    ReportContext rc = {&r->gen, r->on_device ? &r->dev : NULL, table, json, chapter};
    RunReport report = {
        .chapter = r->program->name, .device = r->opts.device, .model_path = r->assets.model_path,
        .cfg = r->assets.model.cfg, .model = &r->assets.model, .kv_dtype = single_run_kv_dtype(r),
        .kv = keeps_kv ? &r->gen.kv : NULL, .tokens_generated = r->gen.n_tokens - r->gen.n_prompt,
        .elapsed_s = r->gen.elapsed_s, .extra_table = table_hook, .latency_table = latency_hook,
        .extra_json = json_hook, .extra = &rc,
    };
    /* The table only once the report file is safely written: a failed
     * write is then the one line on stderr. */
    if (r->opts.json_path && report_write_json(r->opts.json_path, &report, &r->err))
        return -1;
    if (!r->opts.quiet)
        report_print(stderr, &report);
    return 0;
}

int single_run_close(SingleRun *r)
{
    int status = 0;
    if (!r->help_shown && r->err.msg[0]) {
        fprintf(stderr, "%s: error: %s\n", r->program->name, r->err.msg);
        status = 1;
    }
    if (r->on_device)
        device_run_close(&r->dev);
    forward_state_free(&r->fs);
    generation_free(&r->gen);
    chat_template_close(&r->chat);
    sampler_free(&r->sampler);
    assets_close(&r->assets);
    return status;
}
