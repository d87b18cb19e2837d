/* Chapter 4 extension: beam search over the paged KV cache.
 * Adds: W beams a prompt, sharing blocks copy-on-write, the best by score.
 * Option: --beam W. Taught in: book/ch04-paged.md, "Extension: beam
 * search".
 * A scheduler and a step of its own over the core's phases (scheduler.h),
 * the way chapter 6's window_step() runs chapter 4's step with its own
 * seam. See beam.h for the rules; the core calls in here only when --beam
 * is given (paged_check(), paged_open(); then the hooks beam_open() fills). A
 * prompt's W beams are the W consecutive requests of its group, and they
 * are admitted, run and preempted together, so a group's running beams are
 * consecutive in the server's running list too. */
#include "beam.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "scheduler.h"

struct BeamSearch {
    int width;             /* W: requests (slots) per group */
    int n_groups;          /* prompts */
    int vocab;             /* logits per row */
    int first_group;       /* every group before it is done */
    double *cum;           /* [n_reqs] cumulative log probability of each slot's generated tokens */
    double *score;         /* [n_reqs] length-normalised score of a finished hypothesis */
    int *best;             /* [n_groups] request index of the group's best hypothesis; -1 until done */
    int *row_of;           /* [n_reqs] logits row each request was fed for this step; -1: none */
    double *logprobs;      /* [vocab] one row's log softmax */
    BeamCandidate *cands;  /* [W][W] the step's proposals */
    BeamCandidate *chosen; /* [W] the kept ones */
    const float **rows;    /* [W] logits of the proposing beams */
    float *penalized;      /* [W][vocab] those rows after each beam's own penalties; NULL without penalties */
    double *live_cum;      /* [W] their cumulative log probabilities */
    int *live;             /* [W] request index of each live beam, in slot order */
    int *target;           /* [W] live position each kept proposal goes to */
    unsigned char *taken;  /* [W] live positions already given a proposal */
};

int beam_group_size(const CliOptions *o)
{
    return o->beam_width > 0 ? o->beam_width : 1;
}

/* ------------------------------------------------------------ choosing */

/* out = x - log(sum(exp(x))), summed in index order in double. */
static void log_softmax(const float *x, int n, double *out)
{
    double max = x[0], sum = 0.0;
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    for (int i = 0; i < n; i++)
        sum += exp((double)x[i] - max);
    double lse = max + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)x[i] - lse;
}

/* The k largest logits, largest first; among equals the lower id first,
 * as sampler_argmax() picks. */
static void top_tokens(const float *x, int n, int k, BeamCandidate *top)
{
    int have = 0;
    for (int v = 0; v < n; v++) {
        if (have == k && !(x[v] > x[top[k - 1].token]))
            continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && x[v] > x[top[at - 1].token]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at].token = v;
    }
}

/* Whether proposal a ranks before b: higher score, then the lower beam,
 * then the lower token. */
static int ranks_before(const BeamCandidate *a, const BeamCandidate *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    if (a->parent != b->parent)
        return a->parent < b->parent;
    return a->token < b->token;
}

void beam_choose(const float *const *rows, const double *cum, int n_live, int vocab, int keep, double *logprobs,
                 BeamCandidate *cands, BeamCandidate *chosen)
{
    int per_beam = keep < vocab ? keep : vocab, n = 0;
    for (int b = 0; b < n_live; b++) {
        BeamCandidate *top = cands + n;
        top_tokens(rows[b], vocab, per_beam, top);
        log_softmax(rows[b], vocab, logprobs);
        for (int i = 0; i < per_beam; i++) {
            top[i].parent = b;
            top[i].score = cum[b] + logprobs[top[i].token];
        }
        n += per_beam;
    }
    for (int c = 0; c < keep && c < n; c++) { /* selection: the best left, keep times */
        int best = c;
        for (int i = c + 1; i < n; i++)
            if (ranks_before(&cands[i], &cands[best]))
                best = i;
        BeamCandidate t = cands[c];
        cands[c] = cands[best];
        cands[best] = t;
        chosen[c] = cands[c];
    }
}

/* ------------------------------------------------------------ a step's choice */

static BlockTable *table_of(PagedServer *s, const Request *r)
{
    return &s->kv.tables.tables[r->index];
}

/* Which live position each kept proposal goes to: its own beam's, if no
 * better proposal took it, else the first position no proposal extends. */
static void place_proposals(BeamSearch *b, int n_live)
{
    memset(b->taken, 0, (size_t)n_live);
    for (int c = 0; c < n_live; c++) {
        int p = b->chosen[c].parent;
        b->target[c] = b->taken[p] ? -1 : p;
        b->taken[p] = 1;
    }
    int next = 0;
    for (int c = 0; c < n_live; c++) {
        if (b->target[c] >= 0)
            continue;
        while (b->taken[next])
            next++;
        b->target[c] = next;
        b->taken[next] = 1;
    }
}

/* A proposal that extends beam p in beam q's slot: q's beam ended (no
 * proposal extends it), so its blocks go; q takes p's tokens and forks
 * p's table, sharing every block until one of them writes. */
static void move_beam(PagedServer *s, ServingRun *run, Request *from, Request *to)
{
    paged_release_table(s, run, to);
    memcpy(to->tokens, from->tokens, (size_t)from->n_tokens * sizeof(int));
    to->n_tokens = from->n_tokens;
    to->n_cached = from->n_cached;
    block_table_fork(&s->kv.pool, table_of(s, from), table_of(s, to));
    paged_track_table(s, table_of(s, to));
}

/* The group's best finished hypothesis: highest score, lower slot first. */
static void pick_best(BeamSearch *b, const ServingRun *run, int g)
{
    int best = -1;
    for (int k = 0; k < b->width; k++) {
        int i = g * b->width + k;
        if (run->reqs[i].finish != REQ_FINISH_REJECTED && (best < 0 || b->score[i] > b->score[best]))
            best = i;
    }
    b->best[g] = best >= 0 ? best : g * b->width;
}

/* The live beams of group g that were fed this step, in slot order; sets
 * *all_prompt when none has generated a token yet (they are all the
 * prompt, and only the first may propose). */
static int live_beams(BeamSearch *b, const ServingRun *run, int g, int *all_prompt)
{
    int n = 0;
    *all_prompt = 1;
    for (int k = 0; k < b->width; k++) {
        const Request *r = &run->reqs[g * b->width + k];
        if (r->phase != REQ_RUNNING || b->row_of[r->index] < 0)
            continue;
        b->live[n++] = r->index;
        *all_prompt &= r->n_tokens == r->n_prompt;
    }
    return n;
}

/* The logits beam @p r proposes from (proposer @p j): its row of the
 * step, or, with --repetition-penalty and the others, a copy penalised by
 * the beam's own tokens (sampler_penalize()), as greedy decoding would. */
static const float *proposal_row(BeamSearch *b, ServingRun *run, Request *r, int j)
{
    const float *row = run->logits + (size_t)b->row_of[r->index] * (size_t)b->vocab;
    if (!b->penalized)
        return row;
    float *copy = b->penalized + (size_t)j * (size_t)b->vocab;
    memcpy(copy, row, (size_t)b->vocab * sizeof(float));
    sampler_penalize(&r->sampler, copy, r->tokens, r->n_prompt, r->n_tokens);
    return copy;
}

static void select_group(PagedServer *s, ServingRun *run, BeamSearch *b, int g)
{
    int all_prompt, n_live = live_beams(b, run, g, &all_prompt);
    if (n_live == 0)
        return;
    int proposers = all_prompt ? 1 : n_live;
    for (int j = 0; j < proposers; j++) {
        b->rows[j] = proposal_row(b, run, &run->reqs[b->live[j]], j);
        b->live_cum[j] = b->cum[b->live[j]];
    }
    beam_choose(b->rows, b->live_cum, proposers, b->vocab, n_live, b->logprobs, b->cands, b->chosen);
    place_proposals(b, n_live);
    /* All moves first, from the beams as they were (a parent's own token
     * is appended only below); beams that are all the prompt share it
     * already. */
    for (int c = 0; c < n_live && !all_prompt; c++)
        if (b->target[c] != b->chosen[c].parent)
            move_beam(s, run, &run->reqs[b->live[b->chosen[c].parent]], &run->reqs[b->live[b->target[c]]]);
    int left = n_live;
    for (int c = 0; c < n_live; c++) {
        Request *r = &run->reqs[b->live[b->target[c]]];
        b->cum[r->index] = b->chosen[c].score;
        if (serving_take_token(run, r, b->chosen[c].token)) { /* a finished hypothesis */
            b->score[r->index] = b->cum[r->index] / (double)r->n_tokens;
            left--;
        }
    }
    if (left == 0)
        pick_best(b, run, g);
}

/* After the forward pass, instead of sampling: each running group keeps
 * its best proposals (beam_choose()), forks the tables of the beams that
 * continue in another slot, frees those of the beams that ended, and
 * finishes the hypotheses that ended; a group with no beam left picks its
 * best hypothesis. */
static void beam_select(PagedServer *s, ServingRun *run)
{
    BeamSearch *b = s->beam;
    run->n_finished = 0;
    for (int i = 0; i < run->n_reqs; i++)
        b->row_of[i] = -1;
    for (int t = 0; t < run->n_takers; t++)
        b->row_of[run->taker_req[t]] = run->taker_row[t];
    for (int g = b->first_group; g < b->n_groups; g++)
        select_group(s, run, b, g);
    while (b->first_group < b->n_groups && b->best[b->first_group] >= 0)
        b->first_group++;
}

/* ------------------------------------------------------------ scheduling */

static void preempt_group(PagedServer *s, ServingRun *run, const BeamSearch *b, int g)
{
    for (int k = b->width - 1; k >= 0; k--)
        if (run->reqs[g * b->width + k].phase == REQ_RUNNING)
            paged_preempt(s, run, &run->reqs[g * b->width + k]);
}

/* Room for the next token of every running beam of the group at running
 * position k (m beams), newest groups preempted whole while the pool is
 * dry. Returns 1 when the group itself had to go. */
static int make_room_for_group(PagedServer *s, ServingRun *run, const BeamSearch *b, int k, int m, int *preempted)
{
    int g = s->running[k] / b->width;
    for (int j = 0; j < m; j++)
        while (paged_make_room(s, &run->reqs[s->running[k + j]]) != 0) {
            int newest = s->running[s->n_running - 1] / b->width;
            preempt_group(s, run, b, newest);
            *preempted = 1;
            if (newest == g)
                return 1;
        }
    return 0;
}

/* First admission: the prompt once, in the first slot's blocks; every
 * other beam forks them and samples from the same logits. A group that was
 * preempted after it diverged: each live beam recomputed in its own blocks. */
static int admit_group(PagedServer *s, ServingRun *run, const BeamSearch *b, int g, int shared, Err *err)
{
    Request *first = NULL;
    for (int k = 0; k < b->width; k++) {
        Request *r = &run->reqs[g * b->width + k];
        if (r->phase != REQ_WAITING)
            continue;
        if (shared && first) {
            block_table_fork(&s->kv.pool, table_of(s, first), table_of(s, r));
            paged_start_running(s, run, r);
            r->n_cached = r->n_tokens;
            if (serving_share_logits(run, first, r, err))
                return -1;
            continue;
        }
        if (block_table_grow(&s->kv.pool, table_of(s, r), r->n_tokens))
            return err_set(err, "beam group %d: blocks counted free were not", g); /* only a broken lab allocator */
        paged_track_table(s, table_of(s, r));
        paged_start_running(s, run, r);
        if (serving_feed(run, r, err))
            return -1;
        first = r;
    }
    return 0;
}

/* First come, first served over groups: the first waiting group that does
 * not fit (blocks above the watermark, the step's token budget unless the
 * step is empty, logits rows) stops admission, as does the first that has
 * not arrived. The blocks free are the pool's free stack only: a cache
 * above the pool (chapter 5) could reclaim more, which this test does not
 * count. */
static int admit_groups(PagedServer *s, ServingRun *run, const BeamSearch *b, Err *err)
{
    const int bs = s->kv.pool.shape.block_size;
    for (int g = b->first_group; g < b->n_groups; g++) {
        int live = 0, waiting = 0, pending = 0, prompt_only = 1, needed = 0, tokens = 0;
        for (int k = 0; k < b->width; k++) {
            const Request *r = &run->reqs[g * b->width + k];
            if (r->phase == REQ_DONE)
                continue;
            live++;
            pending += r->phase == REQ_PENDING;
            waiting += r->phase == REQ_WAITING;
            prompt_only &= r->n_tokens == r->n_prompt;
            needed += block_count_for_tokens(r->n_tokens, bs);
            tokens += r->n_tokens;
        }
        if (pending)
            break;
        if (waiting == 0)
            continue;
        int shared = prompt_only && live == b->width;
        if (shared) {
            needed = block_count_for_tokens(run->reqs[g * b->width].n_tokens, bs);
            tokens = run->reqs[g * b->width].n_tokens;
        }
        if (!paged_can_admit(s->kv.pool.n_free, needed, s->watermark_blocks) ||
            (run->n_entries > 0 && run->n_entries + tokens > s->max_batched_tokens) ||
            run->n_logits + live > run->max_logits)
            break;
        if (admit_group(s, run, b, g, shared, err))
            return -1;
    }
    return 0;
}

/* Room for every live beam of each running group, oldest group first,
 * preempting the newest groups whole when the pool runs dry; then
 * first-come, first-served admission of waiting groups. */
static int beam_schedule(PagedServer *s, ServingRun *run, Err *err)
{
    const BeamSearch *b = s->beam;
    int preempted = 0;
    for (int k = 0; k < s->n_running;) {
        int m = 1;
        while (k + m < s->n_running && s->running[k + m] / b->width == s->running[k] / b->width)
            m++;
        if (make_room_for_group(s, run, b, k, m, &preempted))
            break; /* the group was the newest: nobody after it runs */
        for (int j = 0; j < m; j++)
            if (serving_feed(run, &run->reqs[s->running[k + j]], err))
                return -1;
        k += m;
    }
    /* A step that had to preempt is short of blocks (as without --beam). */
    return preempted ? 0 : admit_groups(s, run, b, err);
}

int beam_step(PagedServer *s, ServingRun *run, Err *err)
{
    if (!serving_step_begin(run)) /* requests that arrived join the queue; none left: done */
        return 0;
    if (beam_schedule(s, run, err)) /* every live beam's next token, then whole groups admitted */
        return -1;
    KvSeam seam = paged_seam(&s->kv); /* the chapter's PagedAttention, unchanged */
    if (serving_step_forward(run, &seam, err))
        return -1;
    beam_select(s, run);   /* instead of sampling: each group keeps its best continuations */
    paged_account(s, run); /* blocks held, rows filled, what the beams' sharing saves */
    int n_finished = serving_step_finished(run);
    for (int i = 0; i < n_finished; i++)
        paged_finished(s, run, &run->reqs[run->finished_now[i]]);
    serving_step_end(run);
    return 0;
}

/* ------------------------------------------------------------ set-up and --out */

int beam_best(const BeamSearch *b, int i)
{
    return b->best[i / b->width];
}

double beam_score(const BeamSearch *b, int i)
{
    return b->score[i];
}

static int keep_best(void *ctx, const Request *r)
{
    return beam_best(ctx, r->index) == r->index;
}

static void write_beam_keys(void *ctx, JsonWriter *j, const Request *r)
{
    const BeamSearch *b = ctx;
    json_int(j, "beam_width", b->width);
    if (r->finish != REQ_FINISH_REJECTED)
        json_double(j, "beam_score", b->score[r->index]);
}

/* "" for one beam; ", for each of W beams" for W, in the messages. */
static const char *beams_note(int w, char *buf, size_t size)
{
    buf[0] = '\0';
    if (w > 1)
        snprintf(buf, size, ", for each of %d beams", w);
    return buf;
}

int beam_check(const ServingRun *run, Err *err)
{
    char note[48];
    int w = beam_group_size(run->opts);
    return paged_check_fits(run, w, beams_note(w, note, sizeof note), err);
}

void beam_report_json(JsonWriter *j, const BeamSearch *b)
{
    json_int(j, "beam_width", b->width);
}

/* The core's hooks: the JSON report's key, and the state freed. */
static void write_beam_width(JsonWriter *j, const PagedServer *s)
{
    beam_report_json(j, s->beam);
}

static void close_beams(PagedServer *s)
{
    beam_close(s->beam);
    s->beam = NULL;
}

int beam_open(PagedServer *s, ServingRun *run, int *max_step_tokens, Err *err)
{
    const int w = run->opts->beam_width, n = run->n_reqs;
    /* Beams fork, so the core keeps the books of what sharing saves. */
    if (!s->sharing && !(s->sharing = mem_alloc(MEM_ACTIVATIONS, sizeof *s->sharing)))
        return err_set(err, "out of memory");
    if (run->simulated)
        return err_set(err, "--beam needs a model: beams are chosen from logits");
    if (w < 1 || n % w != 0)
        return err_set(err, "--beam %d: %d requests are not whole groups of beams", w, n);
    if (w > run->model->cfg.vocab_size)
        return err_set(err, "--beam %d: more beams than the vocabulary's %d tokens", w, run->model->cfg.vocab_size);
    char note[48];
    paged_reject_unfitting(s, run, w, beams_note(w, note, sizeof note)); /* a group runs whole, or never */
    BeamSearch *b = mem_alloc(MEM_ACTIVATIONS, sizeof *b);
    if (!b)
        return err_set(err, "out of memory for beam search");
    s->beam = b;
    s->hooks.close[s->hooks.n_close++] = close_beams; /* also when the rest of the opening fails */
    s->hooks.step = beam_step;
    s->hooks.sharing_json = write_beam_width;
    s->sharing->note = " (beams fork and share)";
    b->width = w;
    b->n_groups = n / w;
    b->vocab = run->model->cfg.vocab_size;
    b->cum = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(double));
    b->score = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(double));
    b->best = mem_alloc_array(MEM_ACTIVATIONS, (size_t)b->n_groups, sizeof(int));
    b->row_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    b->logprobs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)b->vocab, sizeof(double));
    b->cands = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w * (size_t)w, sizeof(BeamCandidate));
    b->chosen = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, sizeof(BeamCandidate));
    b->rows = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, sizeof(float *));
    b->live_cum = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, sizeof(double));
    b->live = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, sizeof(int));
    b->target = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, sizeof(int));
    b->taken = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w, 1);
    SamplingParams sampling = cli_sampling_params(run->opts);
    if (sampling_params_penalize(&sampling) &&
        !(b->penalized = mem_alloc_array(MEM_ACTIVATIONS, (size_t)w * (size_t)b->vocab, sizeof(float))))
        return err_set(err, "out of memory for beam search's penalised logits");
    if (!b->cum || !b->score || !b->best || !b->row_of || !b->logprobs || !b->cands || !b->chosen || !b->rows ||
        !b->live_cum || !b->live || !b->target || !b->taken)
        return err_set(err, "out of memory for beam search over %d requests", n);
    for (int g = 0; g < b->n_groups; g++) /* a group rejected up front has its first slot's line */
        b->best[g] = run->reqs[g * w].finish == REQ_FINISH_REJECTED ? g * w : -1;
    /* A preempted group is recomputed in one step, every beam in full. */
    for (int i = 0; i < n; i++)
        if ((long)w * (run->reqs[i].max_tokens - 1) > *max_step_tokens)
            *max_step_tokens = w * (run->reqs[i].max_tokens - 1);
    run->out_keep = keep_best;
    run->out_extra = write_beam_keys;
    run->out_ctx = b;
    return 0;
}

void beam_close(BeamSearch *b)
{
    if (!b)
        return;
    mem_free(b->cum);
    mem_free(b->score);
    mem_free(b->best);
    mem_free(b->row_of);
    mem_free(b->logprobs);
    mem_free(b->cands);
    mem_free(b->chosen);
    mem_free(b->rows);
    mem_free(b->penalized);
    mem_free(b->live_cum);
    mem_free(b->live);
    mem_free(b->target);
    mem_free(b->taken);
    mem_free(b);
}
