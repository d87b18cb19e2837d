/**
 * @file trace.h
 * @brief `--trace FILE`: what a serving run did, one JSON line per step.
 *
 * The trace is for watching the KV memory step by step (the demo's page,
 * `make demo`, draws it) and for the book, which quotes a few lines of it.
 * It is JSON Lines, written through outfile.h (the file appears complete
 * when the run ends, or not at all):
 *
 * - the **first line** is the static setup: `{"trace": "kvlab", "version":
 *   1, "program": ..., "view": "arena" | "pool", ...}` with the budget, the
 *   allocator's shape (chapter 3's arena, chapter 4's pool and block size)
 *   and every request (`requests[i]` is request index i: its file id,
 *   sample, prompt and lengths). The chapter writes its part between
 *   trace_setup_begin() and trace_setup_end().
 * - then **one line per step** that ran, after the step's accounting and
 *   before the requests that finished let go of their memory (so a step's
 *   line shows what its forward pass used):
 *   `{"step": N, "events": [...], ...}`. Only what changed since the
 *   previous line is written (a request's region or block table, the rows
 *   it has filled, a block's reference count), except the step's memory
 *   figures (`"kv": {...}`), which are written whole. The chapter writes
 *   its part between trace_step_begin() and trace_step_end().
 * - a **last line** with the run's totals (trace_commit()).
 *
 * **Events** are arrays: the kind, the request index, then the kind's
 * numbers and at most one string:
 *
 * | event | written by | meaning |
 * |---|---|---|
 * | `["admit", r]` | serving_admit() | r is running (first admission or readmission) |
 * | `["finish", r, "stop"]` | serving_step_sample() | r ended: `stop` (EOS/BOS) or `length` |
 * | `["preempt", r]` | serving_preempt() | r's K/V were taken back (chapter 3: requeued) |
 * | `["reject", r, "why"]` | serving_reject() | r can never run |
 * | `["fork", parent, child]` | chapter 4 | child's table points at parent's blocks |
 * | `["cow", r, logical, src, dst]` | chapter 4 | r copied shared block src into dst before writing |
 * | `["swap_out", r, slots]` / `["swap_in", r, blocks]` | chapter 4 | `--preempt swap`: r's blocks went to that many host slots, or came back into that many blocks |
 * | `["move", r, from, len, to, len2]` | chapter 3 | `--reserve grow`: the region [from, from + len) moved to [to, to + len2) (positions) |
 *
 * A later chapter adds its own kinds with trace_event_values() (chapter 5
 * might write `["prefix_hit", r, blocks]`); a reader ignores kinds it does
 * not know. Events of a step are kept in a buffer sized when the trace is
 * opened; should a step ever have more, the rest are counted in
 * `"events_dropped"` instead of being lost silently.
 *
 * Every function here does nothing when given a NULL trace, so a hook is
 * one line: `trace_event(run->trace, "fork", parent->index, ...)`.
 * Nothing is allocated after trace_open(): the buffers are sized for the
 * run's requests before the loop starts.
 */
#ifndef KVLAB_TRACE_H
#define KVLAB_TRACE_H

#include "err.h"
#include "json.h"
#include "outfile.h"

/** Most numbers an event carries after its request. */
#define TRACE_EVENT_VALUES 4

/** One thing that happened in a step. */
typedef struct {
    const char *kind;              /**< a static string: "admit", "cow", ... */
    int req;                       /**< request index (ServingRun.reqs) */
    int n_values;                  /**< numbers used in values */
    long values[TRACE_EVENT_VALUES]; /**< the kind's numbers */
    const char *text;              /**< NULL, or a string that outlives the step (a Request's note) */
} TraceEvent;

/** A trace being written. */
typedef struct ServingTrace {
    OutFile out;          /**< the file (a temporary until trace_commit()) */
    JsonWriter j;         /**< one line at a time */
    int is_open;          /**< 1 between trace_open() and trace_commit()/trace_abort() */
    TraceEvent *events;   /**< [max_events] this step's events, in order */
    int n_events;         /**< events so far this step */
    int max_events;       /**< room in events */
    long dropped;         /**< events of this step that found no room */
    long lines;           /**< lines written */
    const char *program;  /**< the program's name, for the setup line */
} ServingTrace;

/**
 * Starts a trace: the temporary output file and the event buffer (charged
 * to activations).
 * @param t           receives the trace
 * @param path        the output path (--trace)
 * @param program     the program's name, written in the setup line
 * @param max_events  room for a step's events (a few per request is plenty)
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to abort)
 */
int trace_open(ServingTrace *t, const char *path, const char *program, int max_events, Err *err);

/**
 * Records an event of the current step (nothing when @p t is NULL).
 * @param t     the trace, or NULL
 * @param kind  a static string
 * @param req   the request index
 * @param text  NULL, or a string that lives until the step's line is written
 */
void trace_event(ServingTrace *t, const char *kind, int req, const char *text);

/**
 * Whether an event of @p kind for request @p req was recorded in the
 * current step (a chapter tells a requeue followed by a readmission from a
 * move this way).
 * @param t     the trace, or NULL (then 0)
 * @param kind  the kind
 * @param req   the request index
 * @return 1 when there is one, else 0
 */
int trace_has_event(const ServingTrace *t, const char *kind, int req);

/**
 * Records an event with numbers (nothing when @p t is NULL).
 * @param t       the trace, or NULL
 * @param kind    a static string
 * @param req     the request index
 * @param n       how many numbers, 0..TRACE_EVENT_VALUES (more are cut)
 * @param values  [n] the numbers
 */
void trace_event_values(ServingTrace *t, const char *kind, int req, int n, const long *values);

struct ServingRun;

/**
 * Starts the setup line: writes `{"trace": "kvlab", "version": 1,
 * "program": ..., "view": VIEW, "kv_budget_bytes": ..., "bytes_per_token":
 * ..., "seq_len": ...` and leaves the object open for the chapter's
 * members.
 * @param t     the trace (open)
 * @param run   the run
 * @param view  how a reader should draw the memory: "arena" or "pool"
 * @return the writer, positioned inside the object
 */
JsonWriter *trace_setup_begin(ServingTrace *t, const struct ServingRun *run, const char *view);

/**
 * Ends the setup line with `"requests": [...]`: for every request index,
 * its `id` (the request file's), `sample`, `prompt_tokens`, `max_tokens`,
 * `arrival_step` and `prompt`.
 * @param t    the trace
 * @param run  the run
 */
void trace_setup_end(ServingTrace *t, const struct ServingRun *run);

/**
 * Starts a step's line: writes `{"step": N, "events": [...], "running":
 * R, "waiting": W, "done": D` (the events recorded since the last line,
 * which it then forgets, and how many requests are in each phase) and
 * leaves the object open for the chapter's members.
 * @param t    the trace (open)
 * @param run  the run, at the end of its step run->step
 * @return the writer, positioned inside the object
 */
JsonWriter *trace_step_begin(ServingTrace *t, const struct ServingRun *run);

/**
 * Ends a step's line.
 * @param t  the trace
 */
void trace_step_end(ServingTrace *t);

/**
 * Writes a member `"key": {"i": v, ...}` of the pairs given, or nothing
 * when @p n is 0 (the deltas' usual form: request or block index to its
 * new value).
 * @param j       the writer, inside an object
 * @param key     the member's name
 * @param index   [n] the indexes
 * @param value   [n] their values
 * @param n       pairs
 */
void trace_write_map(JsonWriter *j, const char *key, const int *index, const long *value, int n);

/**
 * Writes the last line, `{"end": true, "steps": N, "breakdown": {...},
 * "preemptions": P, "tokens_generated": T}` (the run's byte-steps by the
 * four categories of serving.h, final once every request let go of its
 * memory: a reader that replays the steps can check its own sums against
 * them), and finishes the file (renamed into place).
 * @param t    the trace
 * @param run  the finished run (NULL: no end line)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (the old file untouched)
 */
int trace_commit(ServingTrace *t, const struct ServingRun *run, Err *err);

/**
 * Gives up: the temporary file goes, the buffer is freed. Safe on a trace
 * that was committed, aborted, or zeroed and never opened.
 * @param t  the trace
 */
void trace_abort(ServingTrace *t);

#endif
