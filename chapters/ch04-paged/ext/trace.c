/* Chapter 4 extension: the steps watched.
 * Adds: a trace of the tables and blocks, and the tables after one step.
 * Options: --trace FILE, --show-tables STEP. Taught in: book/ch04-paged.md,
 * "Extension: watching the tables".
 * `--trace` writes one JSON line per step with what changed in the block
 * tables and the pool (trace.h), and `--show-tables STEP` prints the block
 * tables after one step. Both run as an observer of the run, after a step's
 * accounting and before the requests that finished give their blocks back,
 * so they show what the step's forward pass read. Nothing here changes what
 * the scheduler does. See paged_trace.h. */
#include "paged_trace.h"

#include <string.h>

#include "mem.h"
#include "swap.h"
#include "trace.h"

/* The watcher: for the trace, a copy of what the last line said, so that
 * each line holds only what changed. The run owns it (its observer). */
typedef struct {
    const PagedServer *server; /* the server watched (not used after paged_close()) */
    long show_step;            /* --show-tables: the step whose tables are printed, or -1 */
    FILE *show;                /* where they go */
    int shown;                 /* 1 once they were printed */
    int *tables;               /* [n_reqs][capacity] every block table as the last line left it */
    int *table_len;            /* [n_reqs] entries of each */
    int *cached;               /* [n_reqs] positions with K/V, as the last line said */
    int *slots;                /* [n_reqs] host slots held in the swap space (swapped out), as the last line said */
    int *refs;                 /* [n_blocks] holders of each block, as the last line said */
    int *rows;                 /* [n_blocks] rows filled in each block, as the last line said */
    int *copy_dst;             /* [n_blocks] this step's block copies: destination */
    int *copy_src;             /* [n_blocks] and source */
    int n_copies;              /* copies this step */
    int *map_index;            /* [max(n_reqs, n_blocks)] scratch for a delta's indexes */
    long *map_value;           /* [max(n_reqs, n_blocks)] and values */
    void (*prev_on_copy)(void *ctx, int dst, int src); /* the pool's copy listener that was there (the device) */
    void *prev_on_copy_ctx;    /* its context */
} PagedTrace;

/* ------------------------------------------------------------ the tables, printed */

/* A request as --show-tables names it: its id in the file, and its sample
 * when there are several. */
static void print_name(FILE *f, const ServingRun *run, const Request *r)
{
    fprintf(f, "request %d", r->spec->id);
    if (run->opts->n_samples > 1)
        fprintf(f, " sample %d", r->sample);
}

static void print_table(FILE *f, const PagedServer *s, const ServingRun *run, const Request *r)
{
    const BlockTable *t = &s->kv.tables.tables[r->index];
    fprintf(f, "  ");
    print_name(f, run, r);
    fprintf(f, ": prompt %d, tokens %d, cached %d, table [", r->n_prompt, r->n_tokens, r->n_cached);
    for (int k = 0; k < t->n_blocks; k++) {
        int b = t->blocks[k], holders = s->kv.pool.ref_count[b];
        fprintf(f, "%s%d", k ? ", " : "", b);
        if (holders > 1)
            fprintf(f, "(x%d)", holders);
    }
    fprintf(f, "]%s\n", r->phase == REQ_DONE ? " (finished in this step: its blocks go back now)" : "");
}

/* Host slots request i holds in the swap space (--preempt swap, swap.h). */
static int slots_held(const PagedServer *s, int i)
{
    return s->swap ? s->swap->n_blocks[i] : 0;
}

void paged_print_tables(FILE *f, const PagedServer *s, const ServingRun *run)
{
    const BlockPool *p = &s->kv.pool;
    fprintf(f, "--show-tables %ld: the block tables after step %ld's forward pass (block size %d: position p is in "
               "block table[p / %d], row p %% %d)\n",
            run->step, run->step, p->shape.block_size, p->shape.block_size, p->shape.block_size);
    int waiting = 0, done = 0, shared = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (s->kv.tables.tables[i].n_blocks > 0)
            print_table(f, s, run, r);
        else if (slots_held(s, i) > 0) {
            fprintf(f, "  ");
            print_name(f, run, r);
            fprintf(f, ": swapped out, %d blocks in host slots, cached %d when it comes back\n", slots_held(s, i),
                    s->swap->cached[i]);
        } else if (r->phase == REQ_WAITING || r->phase == REQ_PENDING)
            waiting++;
        else if (r->phase == REQ_DONE)
            done++;
    }
    for (int b = 0; b < p->n_blocks; b++)
        shared += p->ref_count[b] > 1;
    fprintf(f, "  pool: %d of %d blocks held (%d of them by more than one table), %d free; %d requests wait "
               "without blocks, %d are done\n",
            block_pool_used(p), p->n_blocks, shared, p->n_blocks - block_pool_used(p), waiting, done);
}

/* ------------------------------------------------------------ the trace's deltas */

/* Index of the first entry where table @p now differs from what the last
 * line said, or -1 when it is the same. */
static int first_change(const PagedTrace *pt, int i, const BlockTable *now)
{
    const int *was = pt->tables + (size_t)i * (size_t)pt->server->kv.tables.capacity;
    int n = now->n_blocks < pt->table_len[i] ? now->n_blocks : pt->table_len[i];
    for (int k = 0; k < n; k++)
        if (now->blocks[k] != was[k])
            return k;
    return now->n_blocks == pt->table_len[i] ? -1 : n;
}

/* Whether this step copied block src into dst. */
static int copied_this_step(const PagedTrace *pt, int src, int dst)
{
    for (int c = 0; c < pt->n_copies; c++)
        if (pt->copy_dst[c] == dst && pt->copy_src[c] == src)
            return 1;
    return 0;
}

/* Events only the state shows: an entry of a table that now names the
 * copy of the block it named (copy-on-write), and a request whose blocks
 * went to the host swap space or came back. */
static void note_state_events(PagedTrace *pt, const ServingRun *run)
{
    const PagedServer *s = pt->server;
    for (int i = 0; i < run->n_reqs; i++) {
        const BlockTable *t = &s->kv.tables.tables[i];
        const int *was = pt->tables + (size_t)i * (size_t)s->kv.tables.capacity;
        int n = t->n_blocks < pt->table_len[i] ? t->n_blocks : pt->table_len[i];
        for (int k = 0; k < n && pt->n_copies > 0; k++)
            if (t->blocks[k] != was[k] && copied_this_step(pt, was[k], t->blocks[k])) {
                long v[3] = {k, was[k], t->blocks[k]};
                trace_event_values(run->trace, "cow", i, 3, v);
            }
        int slots = slots_held(s, i);
        if (slots > 0 && pt->slots[i] == 0) {
            long v[1] = {slots};
            trace_event_values(run->trace, "swap_out", i, 1, v);
        } else if (slots == 0 && pt->slots[i] > 0) {
            long v[1] = {t->n_blocks};
            trace_event_values(run->trace, "swap_in", i, 1, v);
        }
        pt->slots[i] = slots;
    }
}

/* "tables": {"i": [from, [blocks from there on]]}: request i's table is
 * now the last line's first `from` entries, then these. */
static void write_tables(PagedTrace *pt, JsonWriter *j, const ServingRun *run)
{
    const PagedServer *s = pt->server;
    int opened = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const BlockTable *t = &s->kv.tables.tables[i];
        int from = first_change(pt, i, t);
        if (from < 0)
            continue;
        if (!opened)
            json_begin_object(j, "tables");
        opened = 1;
        char name[24];
        snprintf(name, sizeof name, "%d", i);
        json_begin_array(j, name);
        json_int(j, NULL, from);
        json_begin_array(j, NULL);
        int *was = pt->tables + (size_t)i * (size_t)s->kv.tables.capacity;
        for (int k = from; k < t->n_blocks; k++) {
            json_int(j, NULL, t->blocks[k]);
            was[k] = t->blocks[k];
        }
        json_end_array(j);
        json_end_array(j);
        pt->table_len[i] = t->n_blocks;
    }
    if (opened)
        json_end_object(j);
}

/* A map of the entries of @p now that differ from @p was (which then
 * takes them): "key": {"index": value, ...}. */
static void write_changes(PagedTrace *pt, JsonWriter *j, const char *key, const int *now, int *was, int n)
{
    int changed = 0;
    for (int i = 0; i < n; i++)
        if (now[i] != was[i]) {
            pt->map_index[changed] = i;
            pt->map_value[changed++] = now[i];
            was[i] = now[i];
        }
    trace_write_map(j, key, pt->map_index, pt->map_value, changed);
}

static void write_cached(PagedTrace *pt, JsonWriter *j, const ServingRun *run)
{
    int changed = 0;
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].n_cached != pt->cached[i]) {
            pt->map_index[changed] = i;
            pt->map_value[changed++] = run->reqs[i].n_cached;
            pt->cached[i] = run->reqs[i].n_cached;
        }
    trace_write_map(j, "cached", pt->map_index, pt->map_value, changed);
}

/* The step's memory figures, whole. */
static void write_kv(const PagedTrace *pt, JsonWriter *j, const ServingRun *run)
{
    const PagedServer *s = pt->server;
    const BlockPool *p = &s->kv.pool;
    int shared = 0, used = block_pool_used(p);
    long logical = 0, rows = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        shared += p->ref_count[b] > 1;
        rows += p->ref_count[b] > 0 ? s->block_filled[b] : 0;
    }
    for (int i = 0; i < run->n_reqs; i++)
        logical += s->kv.tables.tables[i].n_blocks;
    json_begin_object(j, "kv");
    json_int(j, "reserved", (long long)run->timeline.reserved);
    json_int(j, "used", (long long)run->timeline.used);
    json_int(j, "blocks_used", used);
    json_int(j, "blocks_free", p->n_blocks - used);
    json_int(j, "blocks_shared", shared);
    json_int(j, "blocks_saved", logical - used);
    json_int(j, "slack_rows", (long)used * p->shape.block_size - rows);
    json_int(j, "step_tokens", run->n_entries);
    if (s->swap)
        json_int(j, "swap_slots_used", s->swap->n_slots - s->swap->n_free);
    json_end_object(j);
}

static void write_step(PagedTrace *pt, const ServingRun *run)
{
    const PagedServer *s = pt->server;
    note_state_events(pt, run);
    JsonWriter *j = trace_step_begin(run->trace, run);
    write_tables(pt, j, run);
    write_cached(pt, j, run);
    write_changes(pt, j, "refs", s->kv.pool.ref_count, pt->refs, s->kv.pool.n_blocks);
    write_changes(pt, j, "rows", s->block_filled, pt->rows, s->kv.pool.n_blocks);
    write_kv(pt, j, run);
    trace_step_end(run->trace);
}

/* ------------------------------------------------------------ the hooks */

static void observe_step(void *ctx, const ServingRun *run)
{
    PagedTrace *pt = ctx;
    if (run->trace && pt->tables)
        write_step(pt, run);
    if (pt->show_step == run->step) {
        paged_print_tables(pt->show, pt->server, run);
        pt->shown = 1;
    } else if (pt->show_step >= 0 && !pt->shown && run->n_done == run->n_reqs) {
        fprintf(pt->show, "--show-tables %ld: there is no such step; the run ended with step %ld\n", pt->show_step,
                run->step);
        pt->shown = 1;
    }
    pt->n_copies = 0;
}

static void note_copy(void *ctx, int dst, int src)
{
    PagedTrace *pt = ctx;
    if (pt->n_copies < pt->server->kv.pool.n_blocks) {
        pt->copy_dst[pt->n_copies] = dst;
        pt->copy_src[pt->n_copies++] = src;
    }
    if (pt->prev_on_copy)
        pt->prev_on_copy(pt->prev_on_copy_ctx, dst, src);
}

/* ------------------------------------------------------------ open, close */

static void write_setup(const PagedServer *s, ServingRun *run)
{
    const BlockPool *p = &s->kv.pool;
    JsonWriter *j = trace_setup_begin(run->trace, run, "pool");
    json_begin_object(j, "pool");
    json_int(j, "blocks", p->n_blocks);
    json_int(j, "block_size", p->shape.block_size);
    json_int(j, "bytes_per_block", (long long)p->bytes_per_block);
    json_int(j, "table_capacity", s->kv.tables.capacity);
    json_int(j, "watermark_blocks", s->watermark_blocks);
    json_int(j, "max_batched_tokens", s->max_batched_tokens);
    json_string(j, "preempt", s->swap ? "swap" : "recompute");
    json_int(j, "swap_slots", s->swap ? s->swap->n_slots : 0);
    json_end_object(j);
    trace_setup_end(run->trace, run);
}

/* The copies of the last line's state, all empty: nothing held yet. */
static int open_books(PagedTrace *pt, const ServingRun *run, Err *err)
{
    const PagedServer *s = pt->server;
    size_t n = (size_t)run->n_reqs, blocks = (size_t)s->kv.pool.n_blocks, most = n > blocks ? n : blocks;
    pt->tables = mem_alloc_array(MEM_ACTIVATIONS, n * (size_t)s->kv.tables.capacity, sizeof(int));
    pt->table_len = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    pt->cached = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    pt->slots = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(int));
    pt->refs = mem_alloc_array(MEM_ACTIVATIONS, blocks, sizeof(int));
    pt->rows = mem_alloc_array(MEM_ACTIVATIONS, blocks, sizeof(int));
    pt->copy_dst = mem_alloc_array(MEM_ACTIVATIONS, blocks, sizeof(int));
    pt->copy_src = mem_alloc_array(MEM_ACTIVATIONS, blocks, sizeof(int));
    pt->map_index = mem_alloc_array(MEM_ACTIVATIONS, most, sizeof(int));
    pt->map_value = mem_alloc_array(MEM_ACTIVATIONS, most, sizeof(long));
    if (!pt->tables || !pt->table_len || !pt->cached || !pt->slots || !pt->refs || !pt->rows || !pt->copy_dst ||
        !pt->copy_src || !pt->map_index || !pt->map_value)
        return err_set(err, "--trace: out of memory for the books of %zu requests and %zu blocks", n, blocks);
    return 0;
}

static void free_watcher(void *ctx)
{
    PagedTrace *pt = ctx;
    void *bufs[] = {pt->tables, pt->table_len, pt->cached, pt->slots, pt->refs,
                    pt->rows, pt->copy_dst, pt->copy_src, pt->map_index, pt->map_value};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    mem_free(pt);
}

int paged_trace_open(PagedServer *s, ServingRun *run, FILE *log, Err *err)
{
    PagedTrace *pt = mem_alloc(MEM_ACTIVATIONS, sizeof *pt);
    if (!pt)
        return err_set(err, "out of memory");
    pt->server = s;
    pt->show_step = run->opts->show_tables;
    pt->show = log ? log : stderr;
    /* From here the run owns it, whatever happens next. */
    if (serving_add_observer(run, observe_step, pt, free_watcher, err))
        return -1;
    if (!run->trace)
        return 0;
    if (open_books(pt, run, err))
        return -1;
    write_setup(s, run);
    pt->prev_on_copy = s->kv.pool.on_copy;
    pt->prev_on_copy_ctx = s->kv.pool.on_copy_ctx;
    s->kv.pool.on_copy = note_copy;
    s->kv.pool.on_copy_ctx = pt;
    return 0;
}
