/* Chapter 3 extension: the steps watched.
 * Adds: a trace of the regions and the regions after one step. Options:
 * --trace FILE, --show-tables STEP. Taught in: book/ch03-batching.md,
 * "Extension: watching the regions".
 * `--trace` writes one JSON line per step with what changed in the regions
 * of the arena (trace.h), and `--show-tables STEP` prints the regions after
 * one step. Both run as an observer of the run, after a step's accounting and
 * before the requests that finished give their regions back, so they show
 * what the step's forward pass used. Nothing here changes what the chapter
 * does. See batching_trace.h. */
#include "batching_trace.h"

#include <string.h>

#include "mem.h"
#include "trace.h"

/* The watcher: for the trace, a copy of what the last line said, so that
 * each line holds only what changed. The run owns it (its observer). */
typedef struct {
    const BatchingState *state; /* the chapter watched (not used after batching_close()) */
    long show_step;             /* --show-tables: the step whose regions are printed, or -1 */
    FILE *show;                 /* where they go */
    int shown;                  /* 1 once they were printed */
    KvRegion *regions;          /* [n_reqs] every region as the last line said */
    int *cached;                /* [n_reqs] positions with K/V, as the last line said */
    int *map_index;             /* [n_reqs] scratch for a delta's indexes */
    long *map_value;            /* [n_reqs] and values */
} BatchingTrace;

/* Offsets and sizes in positions (token slots): every region is a whole
 * number of them, and the page draws one cell per slot. */
static long slot_of(const BatchingState *b, size_t offset)
{
    return (long)(offset / b->bytes_per_token);
}

/* ------------------------------------------------------------ the regions, printed */

void batching_print_regions(FILE *f, const BatchingState *b, const ServingRun *run)
{
    long positions = (long)(b->arena.capacity / b->bytes_per_token), held = 0, filled = 0;
    fprintf(f, "--show-tables %ld: the regions after step %ld's forward pass (an arena of %ld positions, first fit; "
               "--reserve %s, --batching %s)\n",
            run->step, run->step, positions, reserve_policy_name(b->policy), batching_mode_name(b->mode));
    int waiting = 0, done = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        const KvRegion *reg = &b->regions[i];
        if (reg->tokens == 0) {
            waiting += r->phase == REQ_WAITING || r->phase == REQ_PENDING;
            done += r->phase == REQ_DONE;
            continue;
        }
        long at = slot_of(b, reg->offset);
        fprintf(f, "  request %d: prompt %d, tokens %d, cached %d, region [%ld, %ld) of %d positions, %d filled%s\n",
                r->spec->id, r->n_prompt, r->n_tokens, r->n_cached, at, at + reg->tokens, reg->tokens, r->n_cached,
                r->phase != REQ_DONE                 ? ""
                : r->finished_step == run->step      ? " (finished in this step)"
                                                     : " (finished; held until its batch ends)");
        held += reg->tokens;
        filled += r->n_cached;
    }
    fprintf(f, "  arena: regions hold %ld of %ld positions (%ld filled), %ld free in %d holes (the largest %ld); "
               "%d requests wait without a region, %d are done\n",
            held, positions, filled, (long)(b->arena.free_bytes / b->bytes_per_token), b->arena.n_holes,
            slot_of(b, kv_arena_largest_hole(&b->arena)), waiting, done);
}

/* ------------------------------------------------------------ the trace's deltas */

static int same_region(const KvRegion *x, const KvRegion *y)
{
    return x->offset == y->offset && x->tokens == y->tokens;
}

/* A region that was held, and is held somewhere else now: `--reserve grow`
 * moved it, unless the request was requeued in this step and readmitted at
 * once (which happens when it was the only one left running). */
static void note_moves(BatchingTrace *bt, const ServingRun *run)
{
    const BatchingState *b = bt->state;
    for (int i = 0; i < run->n_reqs; i++) {
        const KvRegion *now = &b->regions[i], *was = &bt->regions[i];
        if (was->tokens > 0 && now->tokens > 0 && !same_region(now, was) &&
            !trace_has_event(run->trace, "preempt", i)) {
            long v[4] = {slot_of(b, was->offset), was->tokens, slot_of(b, now->offset), now->tokens};
            trace_event_values(run->trace, "move", i, 4, v);
        }
    }
}

/* "regions": {"i": [first position, positions]} ([0, 0]: none now). */
static void write_regions(BatchingTrace *bt, JsonWriter *j, const ServingRun *run)
{
    const BatchingState *b = bt->state;
    int opened = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const KvRegion *now = &b->regions[i];
        if (same_region(now, &bt->regions[i]))
            continue;
        if (!opened)
            json_begin_object(j, "regions");
        opened = 1;
        char name[24];
        snprintf(name, sizeof name, "%d", i);
        json_begin_array(j, name);
        json_int(j, NULL, now->tokens ? slot_of(b, now->offset) : 0);
        json_int(j, NULL, now->tokens);
        json_end_array(j);
        bt->regions[i] = *now;
    }
    if (opened)
        json_end_object(j);
}

static void write_cached(BatchingTrace *bt, JsonWriter *j, const ServingRun *run)
{
    int changed = 0;
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].n_cached != bt->cached[i]) {
            bt->map_index[changed] = i;
            bt->map_value[changed++] = run->reqs[i].n_cached;
            bt->cached[i] = run->reqs[i].n_cached;
        }
    trace_write_map(j, "cached", bt->map_index, bt->map_value, changed);
}

/* The step's memory figures, whole. */
static void write_kv(const BatchingTrace *bt, JsonWriter *j, const ServingRun *run)
{
    const BatchingState *b = bt->state;
    json_begin_object(j, "kv");
    json_int(j, "reserved", (long long)run->timeline.reserved);
    json_int(j, "used", (long long)run->timeline.used);
    json_int(j, "free", (long long)b->arena.free_bytes);
    json_int(j, "holes", b->arena.n_holes);
    json_int(j, "largest_hole", (long long)kv_arena_largest_hole(&b->arena));
    json_int(j, "external", (long long)b->step_external);
    json_int(j, "batch", b->n_batch);
    json_int(j, "step_tokens", run->n_entries);
    json_end_object(j);
}

static void write_step(BatchingTrace *bt, const ServingRun *run)
{
    note_moves(bt, run);
    JsonWriter *j = trace_step_begin(run->trace, run);
    write_regions(bt, j, run);
    write_cached(bt, j, run);
    write_kv(bt, j, run);
    trace_step_end(run->trace);
}

/* ------------------------------------------------------------ the hook */

static void observe_step(void *ctx, const ServingRun *run)
{
    BatchingTrace *bt = ctx;
    if (run->trace && bt->regions)
        write_step(bt, run);
    if (bt->show_step == run->step) {
        batching_print_regions(bt->show, bt->state, run);
        bt->shown = 1;
    } else if (bt->show_step >= 0 && !bt->shown && run->n_done == run->n_reqs) {
        fprintf(bt->show, "--show-tables %ld: there is no such step; the run ended with step %ld\n", bt->show_step,
                run->step);
        bt->shown = 1;
    }
}

/* ------------------------------------------------------------ open */

static void write_setup(const BatchingState *b, ServingRun *run)
{
    JsonWriter *j = trace_setup_begin(run->trace, run, "arena");
    json_begin_object(j, "arena");
    json_int(j, "bytes", (long long)b->arena.capacity);
    json_int(j, "positions", (long long)(b->arena.capacity / b->bytes_per_token));
    json_string(j, "reserve", reserve_policy_name(b->policy));
    json_string(j, "batching", batching_mode_name(b->mode));
    json_int(j, "max_batch", b->max_batch);
    json_end_object(j);
    trace_setup_end(run->trace, run);
}

static void free_watcher(void *ctx)
{
    BatchingTrace *bt = ctx;
    mem_free(bt->regions);
    mem_free(bt->cached);
    mem_free(bt->map_index);
    mem_free(bt->map_value);
    mem_free(bt);
}

int batching_trace_open(BatchingState *b, ServingRun *run, FILE *log, Err *err)
{
    BatchingTrace *bt = mem_alloc(MEM_ACTIVATIONS, sizeof *bt);
    if (!bt)
        return err_set(err, "out of memory");
    bt->state = b;
    bt->show_step = run->opts->show_tables;
    bt->show = log ? log : stderr;
    /* From here the run owns it, whatever happens next. */
    if (serving_add_observer(run, observe_step, bt, free_watcher, err))
        return -1;
    if (!run->trace)
        return 0;
    size_t n = (size_t)run->n_reqs;
    bt->regions = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(KvRegion));
    bt->cached = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    bt->map_index = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    bt->map_value = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(long));
    if (!bt->regions || !bt->cached || !bt->map_index || !bt->map_value)
        return err_set(err, "--trace: out of memory for the books of %zu requests", n);
    write_setup(b, run);
    return 0;
}
