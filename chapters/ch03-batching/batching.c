/* Chapter 3: batching over the KV arena, static or continuous: moving and
 * releasing regions, requeues, the schedule of one step, and the K/V seam
 * (placing a region is regions.c's). See batching.h for the rules this code follows (admission,
 * growth, requeues, fragmentation). The two batchings share everything but
 * two decisions, marked "static or continuous" below: when admission runs
 * (batching_schedule()) and when a finished request's region is released
 * (batching_finished()). Whom to admit is the lab: batching_admit(),
 * solutions/ch03/batching_admit.c. */
#include "batching.h"

#include <stdarg.h>
#include <string.h>

#include "ops.h"

/* ------------------------------------------------------------ --batching */

int batching_mode_parse(const char *name, BatchingMode *mode, Err *err)
{
    if (!name || strcmp(name, "static") == 0)
        *mode = BATCHING_STATIC;
    else if (strcmp(name, "continuous") == 0)
        *mode = BATCHING_CONTINUOUS;
    else
        return err_set(err, "--batching: '%s' is not one of static, continuous", name);
    return 0;
}

const char *batching_mode_name(BatchingMode mode)
{
    return mode == BATCHING_CONTINUOUS ? "continuous" : "static";
}

/* ------------------------------------------------------------ telling why */

/* One line on the log, up to BATCHING_LOG_LIMIT of them: a long run under a
 * tight budget refuses thousands of times, and the counters keep the rest. */
static void tell(BatchingState *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tell(BatchingState *b, const char *fmt, ...)
{
    if (!b->log)
        return;
    if (b->log_lines++ == BATCHING_LOG_LIMIT) {
        fprintf(b->log, "ch03-batching: (more refusals and requeues: see the counters in the memory table)\n");
        return;
    }
    if (b->log_lines > BATCHING_LOG_LIMIT)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(b->log, "ch03-batching: ");
    vfprintf(b->log, fmt, ap);
    fputc('\n', b->log);
    va_end(ap);
}

/* ------------------------------------------------------------ regions */

/* Lets a region go: its bytes become a hole again. */
static int release_region(BatchingState *b, Request *r, Err *err)
{
    KvRegion *reg = &b->regions[r->index];
    if (reg->tokens > 0 && batching_give_back_region(b, reg, err))
        return err_prefix(err, "request %d", r->spec->id);
    *reg = (KvRegion){0};
    return 0;
}

/* A finished request lets its region go: the split of its history is final
 * now that its length is known (its last token was sampled, never fed). */
static int release_finished(BatchingState *b, ServingRun *run, Request *r, Err *err)
{
    kv_track_close(&r->kv, (size_t)r->n_cached * b->bytes_per_token, &run->breakdown);
    return release_region(b, r, err);
}

/* Copies the K/V of positions 0..n_pos-1 from one region to another, plane
 * by plane (the planes of different sizes start at different places). */
static void copy_positions(const BatchingState *b, const KvRegion *from, const KvRegion *to, int n_pos)
{
    if (n_pos == 0)
        return;
    if (b->on_move)
        b->on_move(b->on_move_ctx, from, to, n_pos); /* the device's K/V move too */
    if (!b->storage)
        return; /* accounting only: the books say it was copied */
    size_t bytes = (size_t)n_pos * (size_t)model_kv_dim(&b->cfg) * sizeof(float);
    for (int layer = 0; layer < b->cfg.n_layers; layer++)
        for (int which = 0; which < 2; which++)
            memcpy(batching_plane(b, to, layer, which), batching_plane(b, from, layer, which), bytes);
}

/* Moves r's region to a new one of `tokens` positions: allocate, copy,
 * free the old one. Returns 0 when moved, 1 when refused, -1 on error. */
static int move_region(BatchingState *b, ServingRun *run, Request *r, int tokens, Err *err)
{
    KvRegion old = b->regions[r->index], grown;
    if (batching_take_region(b, tokens, &grown) != 0) {
        char action[64];
        snprintf(action, sizeof action, "cannot grow from %d to %d positions", old.tokens, tokens);
        batching_refused(b, run, r, (size_t)arena_region_slots(b->arena_kind, tokens) * b->bytes_per_token, action);
        tell(b, "%s", b->last_refusal);
        return 1;
    }
    copy_positions(b, &old, &grown, r->n_cached);
    if (release_region(b, r, err))
        return -1;
    b->regions[r->index] = grown;
    kv_track_set_reserved(&r->kv, (size_t)grown.slots * b->bytes_per_token);
    b->stats.grow_moves++;
    b->stats.grow_bytes_copied += (double)r->n_cached * (double)b->bytes_per_token;
    return 0;
}

/* ------------------------------------------------------------ the batch */

static int running_members(const BatchingState *b, const ServingRun *run)
{
    int n = 0;
    for (int k = 0; k < b->n_batch; k++)
        n += run->reqs[b->batch[k]].phase == REQ_RUNNING;
    return n;
}

/* The most recently admitted running member after position k, or NULL. */
static Request *newest_running_after(const BatchingState *b, ServingRun *run, int k)
{
    for (int j = b->n_batch - 1; j > k; j--)
        if (run->reqs[b->batch[j]].phase == REQ_RUNNING)
            return &run->reqs[b->batch[j]];
    return NULL;
}

int batching_requeue(BatchingState *b, ServingRun *run, Request *r, const Request *why, Err *err)
{
    if (r == why)
        tell(b, "step %ld: request %d requeues itself (no newer request is left to make room; %d positions to "
                "recompute)", run->step, r->spec->id, r->n_cached);
    else
        tell(b, "step %ld: request %d requeued to make room for request %d (%d positions to recompute)", run->step,
             r->spec->id, why->spec->id, r->n_cached);
    b->stats.requeues++;
    b->stats.positions_recomputed += r->n_cached;
    if (r->index < b->first_waiting)
        b->first_waiting = r->index; /* it waits again, before everyone who waited already */
    /* Its slack was for tokens it will still produce, after readmission. */
    kv_track_close(&r->kv, r->kv.reserved, &run->breakdown);
    if (release_region(b, r, err))
        return -1;
    serving_preempt(run, r);
    return 0;
}

int batching_make_room(BatchingState *b, ServingRun *run, Err *err)
{
    for (int k = 0; k < b->n_batch; k++) {
        Request *r = &run->reqs[b->batch[k]];
        const KvRegion *reg = &b->regions[r->index];
        if (r->phase != REQ_RUNNING || reg->tokens >= r->n_tokens)
            continue;
        if (b->policy != RESERVE_GROW)
            return err_set(err, "request %d needs %d positions but its --reserve %s region holds %d", r->spec->id,
                           r->n_tokens, reserve_policy_name(b->policy), reg->tokens);
        int target = reserve_grown_tokens(reg->tokens, r->n_tokens, b->cfg.seq_len);
        for (;;) {
            int rc = move_region(b, run, r, target, err);
            if (rc < 0)
                return -1;
            if (rc == 0)
                break;
            /* Refused: the newest running request gives way; when none is
             * newer than r, r itself does (see batching.h). */
            Request *victim = newest_running_after(b, run, k);
            if (batching_requeue(b, run, victim ? victim : r, r, err))
                return -1;
            if (!victim)
                break;
        }
    }
    return 0;
}

int batching_end(BatchingState *b, ServingRun *run, Err *err)
{
    for (int k = 0; k < b->n_batch; k++) {
        Request *r = &run->reqs[b->batch[k]];
        if (b->regions[r->index].tokens == 0)
            continue; /* requeued: already released */
        if (release_finished(b, run, r, err))
            return -1;
    }
    b->n_batch = 0;
    return 0;
}

/* Members that hold no region have left the batch: requeued, or (in
 * continuous batching) finished and released. The others keep their
 * admission order, which make_room relies on. */
static void drop_departed(BatchingState *b)
{
    int kept = 0;
    for (int k = 0; k < b->n_batch; k++)
        if (b->regions[b->batch[k]].tokens > 0)
            b->batch[kept++] = b->batch[k];
    b->n_batch = kept;
}

/* Members from..n_batch-1: "0 1 2 3" or "0 1 2 3 4 5 ... 18 19". */
static void list_batch(const BatchingState *b, const ServingRun *run, int from, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = from; k < b->n_batch && used + 16 < n; k++) {
        if (k == from + 6 && b->n_batch - from > 8) {
            k = b->n_batch - 2;
            used += (size_t)snprintf(buf + used, n - used, " ...");
        }
        used += (size_t)snprintf(buf + used, n - used, "%s%d", k > from ? " " : "", run->reqs[b->batch[k]].spec->id);
    }
}

/* Moves first_waiting past the requests that run or are done, up to the
 * first that waits or has not arrived (n_arrived): a request that left the
 * queue comes back only by a requeue, which moves first_waiting back. So
 * each step looks only at the requests it touches, however long the file. */
static void skip_to_first_waiting(BatchingState *b, const ServingRun *run)
{
    while (b->first_waiting < run->n_arrived && run->reqs[b->first_waiting].phase != REQ_WAITING)
        b->first_waiting++;
}

/* Tells, once, why the head of the queue waits after an admission: the
 * batch is full, or its reservation did not fit (last_refusal). Continuous
 * batching tries the head again at every step; the same wait for the same
 * reason is told only the first time. */
static void tell_head_waits(BatchingState *b, const ServingRun *run)
{
    skip_to_first_waiting(b, run);
    const Request *head = b->first_waiting < run->n_arrived ? &run->reqs[b->first_waiting] : NULL;
    if (!head) {
        b->told_head = -1;
        return;
    }
    int reason = b->n_batch == b->max_batch ? 3 : b->last_refusal_fragmented ? 2 : 1;
    if (head->index == b->told_head && reason == b->told_reason)
        return;
    b->told_head = head->index;
    b->told_reason = (signed char)reason;
    if (reason == 3)
        tell(b, "step %ld: request %d waits: the batch is full (--max-batch %d)", run->step, head->spec->id,
             b->max_batch);
    else
        tell(b, "%s", b->last_refusal);
}

static void note_batch_size(BatchingState *b)
{
    if (b->n_batch > b->stats.largest_batch)
        b->stats.largest_batch = b->n_batch;
}

/* Ends the finished batch and admits the next one into the empty arena. */
static int start_batch(BatchingState *b, ServingRun *run, Err *err)
{
    if (batching_end(b, run, err))
        return -1;
    skip_to_first_waiting(b, run);
    int admitted = batching_admit(b, run);
    if (admitted == 0)
        return err_set(err, "no waiting request could be admitted into an empty arena (%s)",
                       b->last_refusal[0] ? b->last_refusal : "admission admitted nothing");
    b->stats.batches++;
    note_batch_size(b);
    char ids[128], held[32], free_bytes[32];
    list_batch(b, run, 0, ids, sizeof ids);
    tell(b, "step %ld: batch %ld: requests %s (%d), %s reserved, %s free", run->step, b->stats.batches, ids,
         b->n_batch, cli_format_bytes(held, sizeof held, (double)(b->arena.capacity - batching_free_bytes(b))),
         cli_format_bytes(free_bytes, sizeof free_bytes, (double)batching_free_bytes(b)));
    tell_head_waits(b, run);
    return 0;
}

/* Continuous batching: waiting requests join the running batch. */
static void join_batch(BatchingState *b, ServingRun *run)
{
    skip_to_first_waiting(b, run);
    int before = b->n_batch, joined = batching_admit(b, run);
    if (joined > 0) {
        b->stats.joined_running += joined;
        note_batch_size(b);
        char ids[128], held[32], free_bytes[32];
        list_batch(b, run, before, ids, sizeof ids);
        tell(b, "step %ld: request%s %s join%s the running batch (%d running now), %s reserved, %s free", run->step,
             joined > 1 ? "s" : "", ids, joined > 1 ? "" : "s", b->n_batch,
             cli_format_bytes(held, sizeof held, (double)(b->arena.capacity - batching_free_bytes(b))),
             cli_format_bytes(free_bytes, sizeof free_bytes, (double)batching_free_bytes(b)));
    }
    tell_head_waits(b, run);
}

static int feed_batch(BatchingState *b, ServingRun *run, Err *err)
{
    for (int k = 0; k < b->n_batch; k++) {
        Request *r = &run->reqs[b->batch[k]];
        if (r->phase != REQ_RUNNING)
            continue;
        /* Never let the forward pass write outside a region, whatever the
         * reservation code said. */
        if (b->regions[r->index].tokens < r->n_tokens)
            return err_set(err, "request %d needs %d positions but its region holds %d", r->spec->id, r->n_tokens,
                           b->regions[r->index].tokens);
        if (serving_feed(run, r, err))
            return -1;
    }
    return 0;
}

int batching_schedule(BatchingState *b, ServingRun *run, Err *err)
{
    b->step_external = 0;
    b->step_external_seen = 0;
    if (b->fault.msg[0]) {
        *err = b->fault;
        return -1;
    }
    long requeues_before = b->stats.requeues;
    if (batching_make_room(b, run, err))
        return err_prefix(err, "step %ld", run->step);
    drop_departed(b);
    int running = running_members(b, run);
    int requeued = b->stats.requeues != requeues_before;
    /* Static or continuous: WHEN ADMISSION RUNS. A static batch admits only
     * when nobody runs: its last request has finished (or every one was
     * requeued), the batch ends and the next one starts in an empty arena.
     * Continuous batching admits at every step, into the running batch,
     * except at a step that just requeued somebody to make room. Either way
     * a step with nobody running admits: that is what guarantees progress
     * (batching.h). */
    if (running == 0) {
        if (start_batch(b, run, err))
            return err_prefix(err, "step %ld", run->step);
    } else if (b->mode == BATCHING_CONTINUOUS && !requeued) {
        join_batch(b, run);
    }
    return feed_batch(b, run, err);
}

void batching_finished(BatchingState *b, ServingRun *run, Request *r)
{
    /* Static or continuous: WHEN REGIONS ARE RELEASED. Continuous batching
     * frees a finished request's region at once, for the next step's
     * admissions. A static batch keeps it until the batch ends: everybody
     * waits for the longest request. (This hook cannot fail; a bookkeeping
     * error waits in b->fault for the next schedule(), which reports it.) */
    if (b->mode == BATCHING_CONTINUOUS) {
        (void)release_finished(b, run, r, &b->fault);
        return;
    }
    if (running_members(b, run) > 0)
        return;
    (void)batching_end(b, run, &b->fault);
}

/* ------------------------------------------------------------ the seam */

void batching_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    BatchingState *b = ctx;
    const KvRegion *reg = &b->regions[e->seq];
    size_t kv_dim = (size_t)model_kv_dim(&b->cfg);
    memcpy(batching_plane(b, reg, layer, 0) + (size_t)e->pos * kv_dim, k, kv_dim * sizeof(float));
    memcpy(batching_plane(b, reg, layer, 1) + (size_t)e->pos * kv_dim, v, kv_dim * sizeof(float));
}

void batching_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                     float *scores)
{
    BatchingState *b = ctx;
    const ModelConfig *c = &b->cfg;
    const KvRegion *reg = &b->regions[e->seq];
    int head_dim = model_head_dim(c), offset = (head / model_kv_mul(c)) * head_dim;
    attention_reference(out, q, batching_plane(b, reg, layer, 0) + offset, batching_plane(b, reg, layer, 1) + offset,
                        e->pos + 1, model_kv_dim(c), head_dim, scores);
}
