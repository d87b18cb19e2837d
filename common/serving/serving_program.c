#include "serving_program.h"

#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "ops.h"
#include "outfile.h"
#include "report.h"
#include "threads.h"

static int count_finish(const ServingRun *run, RequestFinish f)
{
    int n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        n += run->reqs[i].finish == f;
    return n;
}

/* What the report's hooks need: the run, the chapter's own lines, and the
 * run's latency, summed up once. */
typedef struct {
    const ServingRun *run;
    void (*table)(FILE *f, void *chapter, const ServingRun *run);
    void (*json)(JsonWriter *j, void *chapter, const ServingRun *run);
    void *chapter;
    LatencySummary latency;
    CostCheckSummary check;     /* steps 0: no check (the model clock, or no --machine) */
    CostCheckSummary check_cpu; /* the same against the steps' CPU time */
} ServingReport;

static void latency_table(FILE *f, const void *p)
{
    const ServingReport *sr = p;
    char clock[512];
    latency_print(f, &sr->latency, serving_clock_describe(sr->run, clock, sizeof clock));
    const CostCheckSummary *checks[2] = {&sr->check, &sr->check_cpu};
    const char *against[2] = {"wall time", "CPU time"};
    for (int i = 0; i < 2; i++) {
        const CostCheckSummary *c = checks[i];
        if (c->steps > 0)
            fprintf(f, "  cost model %s / %s, per step: median %.3g (p10 %.3g, p90 %.3g, min %.3g, max %.3g) over "
                    "%ld steps; in total %.3g\n", sr->run->clock.machine.name, against[i], c->median, c->p10, c->p90,
                    c->min, c->max, c->steps, c->total);
    }
}

static void json_machine(JsonWriter *j, const CostMachine *m)
{
    json_begin_object(j, "machine");
    json_string(j, "name", m->name);
    json_double(j, "read_bytes_per_s", m->read_bytes_per_s);
    json_double(j, "fma_flops_per_s", m->fma_flops_per_s);
    json_double(j, "compute_share", m->compute_share);
    json_double(j, "link_bytes_per_s", m->link_bytes_per_s);
    json_double(j, "overhead_s", m->overhead_s);
    json_bool(j, "overlap", m->overlap);
    json_end_object(j);
}

static void json_cost_check(JsonWriter *j, const char *key, const CostCheckSummary *c)
{
    json_begin_object(j, key);
    json_int(j, "steps", c->steps);
    json_double(j, "median", c->median);
    json_double(j, "p10", c->p10);
    json_double(j, "p90", c->p90);
    json_double(j, "min", c->min);
    json_double(j, "max", c->max);
    json_double(j, "total", c->total);
    json_end_object(j);
}

/* "latency": which clock, the cost model's machine, the summary, and the
 * model against the measured steps. */
static void json_latency(JsonWriter *j, const ServingReport *sr)
{
    const RunClock *c = &sr->run->clock;
    json_begin_object(j, "latency");
    json_string(j, "clock", c->model ? "model" : "wall");
    if (c->has_machine)
        json_machine(j, &c->machine);
    latency_json(j, &sr->latency);
    if (sr->check.steps > 0)
        json_cost_check(j, "cost_model_vs_wall", &sr->check);
    if (sr->check_cpu.steps > 0)
        json_cost_check(j, "cost_model_vs_cpu", &sr->check_cpu);
    json_end_object(j);
}

static void serving_table(FILE *f, const void *p)
{
    const ServingReport *sr = p;
    const ServingRun *run = sr->run;
    double fr[4];
    kv_breakdown_fractions(&run->breakdown, fr);
    int rejected = count_finish(run, REQ_FINISH_REJECTED);
    fprintf(f, "requests\n  %d completed, %d rejected, at most %d running at once, %ld steps\n",
            run->n_reqs - rejected, rejected, run->max_concurrent, run->step);
    fprintf(f, "where reserved KV memory went (byte-steps, as in the PagedAttention paper)\n");
    fprintf(f, "  token states %6.1f%%   reserved %6.1f%%   internal frag. %6.1f%%   external frag. %6.1f%%\n",
            100 * fr[0], 100 * fr[1], 100 * fr[2], 100 * fr[3]);
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].finish == REQ_FINISH_REJECTED)
            fprintf(f, "  request %d rejected: %s\n", run->reqs[i].spec->id, run->reqs[i].note);
    if (run->device)
        serving_device_report_table(f, run->device);
    sr->table(f, sr->chapter, run);
}

static void serving_json(JsonWriter *j, const void *p)
{
    const ServingReport *sr = p;
    const ServingRun *run = sr->run;
    double fr[4];
    kv_breakdown_fractions(&run->breakdown, fr);
    json_begin_object(j, "kv_breakdown");
    json_double(j, "token_states", fr[0]);
    json_double(j, "reserved", fr[1]);
    json_double(j, "internal_fragmentation", fr[2]);
    json_double(j, "external_fragmentation", fr[3]);
    json_end_object(j);
    int rejected = count_finish(run, REQ_FINISH_REJECTED);
    json_int(j, "max_concurrent", run->max_concurrent);
    json_double(j, "avg_concurrent", run->busy_steps ? run->running_sum / (double)run->busy_steps : 0.0);
    json_int(j, "requests_completed", run->n_reqs - rejected);
    json_int(j, "requests_rejected", rejected);
    json_int(j, "steps", run->step);
    if (run->device)
        serving_device_report_json(j, run->device);
    json_latency(j, sr);
    sr->json(j, sr->chapter, run);
}

static int open_requests(const CliOptions *o, RequestFile *rf, Err *err)
{
    if (o->requests_path)
        return request_file_load(rf, o->requests_path, err);
    char path[PATH_MAX];
    if (assets_find_project_file("data/requests-mixed.tsv", path, sizeof path))
        return err_set(err, "no --requests file given and data/requests-mixed.tsv not found");
    return request_file_load(rf, path, err);
}

int serving_program_open(ServingProgram *p, const CliProgram *program, int argc, char **argv)
{
    memset(p, 0, sizeof *p);
    p->program = program;
    CliOptions *o = &p->opts;
    CliResult parsed = cli_parse(program, argc, argv, o, &p->err);
    if (parsed == CLI_EXIT_OK) {
        p->help_shown = 1;
        return -1;
    }
    if (parsed == CLI_ERROR)
        return -1;
    ops_set_threads(o->threads);
    p->log = o->quiet ? NULL : stderr;
    /* Every file of the run is renamed into place together at its end
     * (serving_program_report()), or none is. */
    outfile_hold();
    /* Everything that can be refused is refused before the first line is
     * printed, so that bad input gives exactly one line on stderr. A
     * --device cuda without a device is refused first of all. */
    if (serving_device_open(&p->device, program->name, o, &p->on_device, &p->err) ||
        (o->out_path && report_check_writable("--out", o->out_path, &p->err)) ||
        (o->json_path && report_check_writable("--json", o->json_path, &p->err)) ||
        (o->trace_path && report_check_writable("--trace", o->trace_path, &p->err)) ||
        open_requests(o, &p->requests, &p->err) || assets_open(&p->assets, o, &p->err))
        return -1;
    if (o->threads == 0)
        ops_set_threads(forward_default_threads(&p->assets.model.cfg));
    if (threads_check(ops_threads(), &p->err))
        return -1;
    if (!p->on_device && forward_check_context(&p->assets.model.cfg, ops_threads(), &p->err))
        return -1;
    if (serving_run_init(&p->run, &p->assets.model, &p->assets.tokenizer, o, &p->requests, &p->err))
        return -1;
    if (p->on_device)
        serving_device_attach(&p->device, &p->run);
    return 0;
}

/* Room for the events of one step: a few per request (admitted, finished,
 * preempted, forked, copied), within reason for files of a million lines. */
static int trace_events_per_step(const ServingRun *run)
{
    long n = 4L * run->n_reqs + 64;
    return n > (1L << 20) ? 1 << 20 : (int)n;
}

int serving_program_start(ServingProgram *p)
{
    char line[PATH_MAX * 2 + 256];
    ServingRun *run = &p->run;
    char a[32], source[160];
    fprintf(stderr, "%s: %s; KV budget %s (%s)\n", p->program->name, assets_describe(&p->assets, line, sizeof line),
            cli_format_bytes(a, sizeof a, (double)serving_kv_budget(run)),
            serving_kv_budget_source(run, source, sizeof source));
    /* Requests refused while they were read (too long, or no token at all):
     * one line each, --quiet or not; the others run, and --out says
     * "rejected" with the same reason. */
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].finish == REQ_FINISH_REJECTED && run->reqs[i].sample == 0)
            fprintf(stderr, "%s: request %d (line %d) refused: %s\n", p->program->name, run->reqs[i].spec->id,
                    run->reqs[i].spec->line, run->reqs[i].note);
    if (!p->opts.trace_path)
        return 0;
    if (trace_open(&p->trace, p->opts.trace_path, p->program->name, trace_events_per_step(run), &p->err))
        return -1;
    run->trace = &p->trace;
    /* Requests refused while they were read: the first step's line says so. */
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].finish == REQ_FINISH_REJECTED)
            trace_event(run->trace, "reject", i, run->reqs[i].note);
    return 0;
}

/* A progress line on a terminal ends without a newline (it overwrites
 * itself); end it before anything else is printed. */
static void end_progress_line(ServingProgram *p)
{
    if (p->log && isatty(fileno(p->log)) && p->run.step > 0)
        fputc('\n', p->log);
    p->log = NULL;
}

int serving_program_report(ServingProgram *p, void (*table)(FILE *f, void *chapter, const ServingRun *run),
                           void (*json)(JsonWriter *j, void *chapter, const ServingRun *run), void *chapter)
{
    const CliOptions *o = &p->opts;
    ServingRun *run = &p->run;
    if (run->device)
        serving_device_finish(run->device);
    end_progress_line(p);
    if (run->trace && trace_commit(run->trace, run, &p->err))
        return -1;
    if (o->out_path && serving_write_jsonl(run, o->out_path, &p->err))
        return -1;
    ServingReport sr = {run, table, json, chapter, {0}, {0}, {0}};
    if (serving_latency_summary(run, &sr.latency, &p->err))
        return -1;
    cost_check_summarize(&run->clock.check, &sr.check);
    cost_check_summarize(&run->clock.check_cpu, &sr.check_cpu);
    RunReport report = {
        .chapter = p->program->name, .device = o->device, .model_path = p->assets.model_path,
        .cfg = p->assets.model.cfg, .model = &p->assets.model,
        .kv_dtype = p->on_device ? kv_dtype_from_device(p->device.run.kv_type) : serving_kv_dtype(run), .kv = &run->timeline,
        .tokens_generated = run->tokens_generated, .elapsed_s = run->elapsed_s, .extra_table = serving_table,
        .latency_table = latency_table, .extra_json = serving_json, .extra = &sr,
    };
    /* The table only once every file is safely written: a failed write
     * is then the one line on stderr. */
    if (o->json_path && report_write_json(o->json_path, &report, &p->err))
        return -1;
    if (outfile_release(&p->err))
        return -1;
    if (!o->quiet)
        report_print(stderr, &report);
    return 0;
}

int serving_program_close(ServingProgram *p)
{
    end_progress_line(p);
    int status = 0;
    if (!p->help_shown && p->err.msg[0]) {
        fprintf(stderr, "%s: error: %s\n", p->program->name, p->err.msg);
        status = 1;
    }
    trace_abort(&p->trace); /* a trace the report did not finish is not left half written */
    outfile_discard(); /* the files of a run that failed (released ones are not held any more) */
    serving_run_free(&p->run);
    request_file_free(&p->requests);
    assets_close(&p->assets);
    serving_device_close(&p->device);
    return status;
}
