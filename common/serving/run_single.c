#include "run_single.h"

#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "mem.h"
#include "ops.h"
#include "report.h"

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

/* What the report hooks need to see. */
typedef struct {
    const SingleStreamChapter *ch;
    const SingleStreamKv *kv;
    const Generation *g;
    const DeviceRun *dev; /* NULL on the CPU */
} ReportContext;

static void table_hook(FILE *f, const void *p)
{
    const ReportContext *rc = p;
    fprintf(f, "work\n  %ld token positions run through the model for %d new tokens\n", rc->g->positions_run,
            rc->g->n_tokens - rc->g->n_prompt);
    step_time_table(f, rc->g);
    if (rc->dev)
        device_run_report_table(f, rc->dev);
    if (rc->ch->extra_table)
        rc->ch->extra_table(f, rc->kv, rc->g);
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
    if (rc->ch->extra_json)
        rc->ch->extra_json(j, rc->kv, g);
}

static int fail(const char *program, const Err *err)
{
    fprintf(stderr, "%s: error: %s\n", program, err->msg);
    return 1;
}

/* Everything a run holds, so that one cleanup path frees it all. */
typedef struct {
    Assets assets;
    Sampler sampler;
    Generation gen;
    SingleStreamKv kv;
    int kv_open;
    ForwardState fs;
    int on_device; /* --device cuda: the steps run in dev */
    DeviceRun dev;
} Run;

static void run_close(const SingleStreamChapter *ch, Run *r)
{
    if (r->on_device)
        device_run_close(&r->dev);
    forward_state_free(&r->fs);
    if (r->kv_open)
        ch->kv_close(&r->kv);
    generation_free(&r->gen);
    sampler_free(&r->sampler);
    assets_close(&r->assets);
}

/* --device cuda opens the device before anything else, so that a machine
 * without one says so at once; the CPU path refuses the device options. */
static int device_open_if_asked(const SingleStreamChapter *ch, const CliOptions *o, Run *r, Err *err)
{
    return device_run_open_if_asked(&r->dev, o, ch->program.name, ch->device_kv_open != NULL, &r->on_device, err);
}

static int run_open(const SingleStreamChapter *ch, const CliOptions *o, Run *r, Err *err)
{
    if (device_open_if_asked(ch, o, r, err))
        return -1;
    if (assets_open(&r->assets, o, err))
        return -1;
    const Model *m = &r->assets.model;
    if (o->threads == 0)
        ops_set_threads(forward_default_threads(&m->cfg));
    if (sampler_init(&r->sampler, m->cfg.vocab_size, o->temperature, o->top_p, o->seed, err) ||
        generation_init(&r->gen, m, &r->assets.tokenizer, o->prompt, err))
        return -1;
    if (r->on_device)
        return device_run_start(&r->dev, m, o, ch->device_kv_open, r->gen.n_prompt, &r->kv, err);
    int max_step = 0;
    if (ch->kv_open(m, o, r->gen.n_prompt, &r->kv, &max_step, err))
        return -1;
    r->kv_open = 1;
    if (forward_state_init(&r->fs, &m->cfg, max_step, 1, err))
        return -1;
    /* Only once everything is open: a run that fails prints one line. */
    char line[PATH_MAX * 2 + 256];
    fprintf(stderr, "%s: %s\n", ch->program.name, assets_describe(&r->assets, line, sizeof line));
    return 0;
}

int run_single_main(const SingleStreamChapter *ch, int argc, char **argv)
{
    const char *name = ch->program.name;
    CliOptions o;
    Err err = {{0}};
    CliResult parsed = cli_parse(&ch->program, argc, argv, &o, &err);
    if (parsed == CLI_EXIT_OK)
        return 0;
    if (parsed == CLI_ERROR)
        return fail(name, &err);
    ops_set_threads(o.threads);
    if (o.json_path && report_check_writable("--json", o.json_path, &err))
        return fail(name, &err);

    Run r;
    memset(&r, 0, sizeof r);
    if (run_open(ch, &o, &r, &err) ||
        generate(&r.gen, &r.assets.model, &r.assets.tokenizer, &r.sampler, &r.fs, &r.kv, o.steps, stdout, &err)) {
        run_close(ch, &r);
        return fail(name, &err);
    }

    if (r.on_device)
        device_run_finish(&r.dev);
    ReportContext rc = {ch, &r.kv, &r.gen, r.on_device ? &r.dev : NULL};
    RunReport report = {
        .chapter = name, .device = o.device, .model_path = r.assets.model_path, .cfg = r.assets.model.cfg,
        .model = &r.assets.model,
        .kv_elem_bytes = r.on_device ? dtype_bytes(r.dev.kv_type) : sizeof(float),
        .kv = ch->keeps_kv ? &r.gen.kv : NULL,
        .tokens_generated = r.gen.n_tokens - r.gen.n_prompt, .elapsed_s = r.gen.elapsed_s,
        .extra_table = table_hook, .extra_json = json_hook, .extra = &rc,
    };
    if (!o.quiet)
        report_print(stderr, &report);
    int status = 0;
    if (o.json_path && report_write_json(o.json_path, &report, &err))
        status = fail(name, &err);
    run_close(ch, &r);
    return status;
}
