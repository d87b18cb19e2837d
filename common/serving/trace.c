#include "trace.h"

#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "serving.h"

int trace_open(ServingTrace *t, const char *path, const char *program, int max_events, Err *err)
{
    memset(t, 0, sizeof *t);
    if (max_events < 1)
        max_events = 1;
    t->events = mem_alloc_array(MEM_ACTIVATIONS, (size_t)max_events, sizeof(TraceEvent));
    if (!t->events)
        return err_set(err, "--trace: out of memory for %d events a step", max_events);
    if (outfile_open(&t->out, "--trace", path, err)) {
        mem_free(t->events);
        t->events = NULL;
        return -1;
    }
    t->max_events = max_events;
    t->program = program;
    t->is_open = 1;
    json_init(&t->j, t->out.f, 0);
    return 0;
}

static TraceEvent *next_event(ServingTrace *t)
{
    if (t->n_events == t->max_events) {
        t->dropped++;
        return NULL;
    }
    TraceEvent *e = &t->events[t->n_events++];
    memset(e, 0, sizeof *e);
    return e;
}

void trace_event(ServingTrace *t, const char *kind, int req, const char *text)
{
    TraceEvent *e = t && t->is_open ? next_event(t) : NULL;
    if (!e)
        return;
    e->kind = kind;
    e->req = req;
    e->text = text;
}

void trace_event_values(ServingTrace *t, const char *kind, int req, int n, const long *values)
{
    TraceEvent *e = t && t->is_open ? next_event(t) : NULL;
    if (!e)
        return;
    e->kind = kind;
    e->req = req;
    e->n_values = n < TRACE_EVENT_VALUES ? n : TRACE_EVENT_VALUES;
    memcpy(e->values, values, (size_t)e->n_values * sizeof(long));
}

int trace_has_event(const ServingTrace *t, const char *kind, int req)
{
    for (int i = 0; t && t->is_open && i < t->n_events; i++)
        if (t->events[i].req == req && strcmp(t->events[i].kind, kind) == 0)
            return 1;
    return 0;
}

JsonWriter *trace_setup_begin(ServingTrace *t, const ServingRun *run, const char *view)
{
    JsonWriter *j = &t->j;
    json_init(j, t->out.f, 0);
    json_begin_object(j, NULL);
    json_string(j, "trace", "kvlab");
    json_int(j, "version", 1);
    json_string(j, "program", t->program);
    json_string(j, "view", view);
    json_int(j, "kv_budget_bytes", (long long)serving_kv_budget(run));
    json_int(j, "bytes_per_token", (long long)run->kv_bytes_per_token);
    json_int(j, "seq_len", run->model->cfg.seq_len);
    return j;
}

static void end_line(ServingTrace *t)
{
    json_end_object(&t->j);
    fputc('\n', t->out.f);
    t->lines++;
}

void trace_setup_end(ServingTrace *t, const ServingRun *run)
{
    JsonWriter *j = &t->j;
    json_begin_array(j, "requests");
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        json_begin_object(j, NULL);
        json_int(j, "id", r->spec->id);
        json_int(j, "sample", r->sample);
        json_int(j, "prompt_tokens", r->n_prompt);
        json_int(j, "max_tokens", r->max_tokens);
        json_int(j, "arrival_step", r->arrival_step);
        json_string(j, "prompt", r->spec->prompt);
        json_end_object(j);
    }
    json_end_array(j);
    end_line(t);
}

static void write_event(JsonWriter *j, const TraceEvent *e)
{
    json_begin_array(j, NULL);
    json_string(j, NULL, e->kind);
    json_int(j, NULL, e->req);
    for (int i = 0; i < e->n_values; i++)
        json_int(j, NULL, e->values[i]);
    if (e->text)
        json_string(j, NULL, e->text);
    json_end_array(j);
}

JsonWriter *trace_step_begin(ServingTrace *t, const ServingRun *run)
{
    JsonWriter *j = &t->j;
    int phases[4] = {0};
    for (int i = 0; i < run->n_reqs; i++)
        phases[run->reqs[i].phase]++;
    json_init(j, t->out.f, 0);
    json_begin_object(j, NULL);
    json_int(j, "step", run->step);
    json_begin_array(j, "events");
    for (int i = 0; i < t->n_events; i++)
        write_event(j, &t->events[i]);
    json_end_array(j);
    if (t->dropped)
        json_int(j, "events_dropped", t->dropped);
    json_int(j, "running", phases[REQ_RUNNING]);
    json_int(j, "waiting", phases[REQ_WAITING]);
    json_int(j, "done", phases[REQ_DONE]);
    t->n_events = 0;
    t->dropped = 0;
    return j;
}

void trace_step_end(ServingTrace *t)
{
    end_line(t);
}

void trace_write_map(JsonWriter *j, const char *key, const int *index, const long *value, int n)
{
    if (n == 0)
        return;
    json_begin_object(j, key);
    for (int i = 0; i < n; i++) {
        char name[24];
        snprintf(name, sizeof name, "%d", index[i]);
        json_int(j, name, value[i]);
    }
    json_end_object(j);
}

static void write_end(ServingTrace *t, const ServingRun *run)
{
    JsonWriter *j = &t->j;
    json_init(j, t->out.f, 0);
    json_begin_object(j, NULL);
    json_bool(j, "end", 1);
    json_int(j, "steps", run->step);
    json_begin_object(j, "breakdown"); /* byte-steps */
    json_double(j, "token_states", run->breakdown.token_states);
    json_double(j, "reserved", run->breakdown.reserved);
    json_double(j, "internal_fragmentation", run->breakdown.internal_fragmentation);
    json_double(j, "external_fragmentation", run->breakdown.external_fragmentation);
    json_end_object(j);
    json_int(j, "preemptions", serving_preemptions(run));
    json_int(j, "tokens_generated", run->tokens_generated);
    end_line(t);
}

int trace_commit(ServingTrace *t, const ServingRun *run, Err *err)
{
    if (!t->is_open)
        return 0;
    if (run)
        write_end(t, run);
    t->is_open = 0;
    mem_free(t->events);
    t->events = NULL;
    return outfile_commit(&t->out, err);
}

void trace_abort(ServingTrace *t)
{
    if (!t->is_open)
        return;
    t->is_open = 0;
    mem_free(t->events);
    t->events = NULL;
    outfile_abort(&t->out);
}
