/**
 * @file window.h
 * @brief Chapter 6: when one sequence outgrows its memory. A sliding window
 *        with attention sinks, and heavy-hitter (H2O) eviction, on top of
 *        chapter 4's paged server.
 *
 * The KV cache cannot grow without bound: past the memory a sequence may
 * use, some of its history has to go. This chapter keeps, per sequence,
 *
 * - the last N positions (`--kv-window N`): the query at position p sees
 *   positions p-N+1..p;
 * - the first S positions (`--kv-sinks S`, "attention sinks", StreamingLLM):
 *   never evicted;
 * - with `--kv-evict h2o --kv-heavy H`, besides those, the H positions that
 *   have received the most attention so far (H2O's heavy hitters).
 *
 * So a sequence holds at most N + S + H positions (the newest included) in
 * every decode step. A step that runs prompt positions writes all of them
 * before any query attends, so it holds the whole chunk for that step (the
 * prompt, or a --max-num-batched-tokens chunk of it) and evicts afterwards;
 * the report shows that peak on its own line.
 * RoPE positions stay as they were generated: a kept key keeps the rotation
 * of its original position, and a query at position p is rotated for p,
 * never for its rank in the kept set. Every sequence stays within the
 * model's trained context (its positions never pass seq_len).
 *
 * **Eviction in a paged cache.** A sequence's table names its blocks; each
 * logical block has an occupancy mask (one byte per row: held or dropped)
 * and a count of rows held. Dropping a position clears its byte, and
 * attention skips cleared rows. When a block's count reaches 0 the block
 * goes back to the pool at once and its table entry becomes ::BLOCK_HOLE.
 * The sliding window only ever drops whole blocks in the end (the rows
 * between the sinks and the window are dropped in order); H2O leaves holes
 * inside blocks, which hold their memory until the last row goes. Compaction
 * (moving the kept rows together) would give that memory back but costs a
 * copy of every kept row of every layer, and the block table would no longer
 * map position p to row p % block_size: positions would need a table of
 * their own.
 *
 * **Heavy-hitter scores.** For every sequence, the attention probability
 * each position received is summed over the layers and query heads of its
 * sampled token (the decode token, or a prompt's last), kept per query head
 * so that the parallel heads never write the same number, and summed over
 * the heads in head order when eviction chooses: the same bits whatever the
 * thread count. One set of kept positions serves every layer, so that a
 * block is dropped for all layers at once (H2O keeps one per layer and head).
 *
 * Chapter 6 depends on chapter 4 deliberately: its program links chapter 4's
 * folder and lab files (the Makefile's CH_OBJS_6), and it steps chapter 4's
 * scheduler with its own K/V seam (window_step()). Chapter 4 knows only
 * ::BLOCK_HOLE.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: options, open, loop, report | chapters/ch06-window/main.c | main() |
 * | the options, refused in one line | chapters/ch06-window/options.c | window_parse_options() |
 * | one step: schedule, forward, sample, force, account, evict | chapters/ch06-window/window.c | window_step() |
 * | attention over the rows held only: gathered, then chapter 4's paged_attention() | chapters/ch06-window/window.c | window_attention() |
 * | which positions go: window, sinks, heavy hitters | chapters/ch06-window/window.c | window_evict() |
 * | the window's step: what left it goes, the sinks stay (lab 6) | solutions/ch06/window_slide.c | window_slide() |
 * | H2O: the heavy hitters stay (lab 6) | solutions/ch06/window_evict_heavy.c | window_evict_heavy() |
 * | a position goes; a block gives its last row back (lab 6) | solutions/ch06/window_drop_position.c | window_drop_position() |
 * | a block back to the pool; a position's score | chapters/ch06-window/books.c | window_return_block(), window_heavy_score() |
 * | teacher forcing, perplexity, agreement | chapters/ch06-window/window.c | window_force() |
 * | the memory bound, the table and JSON lines | chapters/ch06-window/report.c | window_report_table() |
 */
#ifndef KVLAB_CH06_WINDOW_H
#define KVLAB_CH06_WINDOW_H

#include <stdio.h>

#include "paged.h"

/** Which positions a sequence keeps besides the window and the sinks. */
typedef enum {
    WINDOW_EVICT_NONE = 0, /**< the window and the sinks only */
    WINDOW_EVICT_H2O       /**< also the H positions with the most attention */
} WindowEvict;

/** The chapter's options (all 0: the full cache, chapter 4's run). */
typedef struct {
    int window;            /**< --kv-window N: recent positions kept (0: all) */
    int sinks;             /**< --kv-sinks S: first positions always kept */
    WindowEvict evict;     /**< --kv-evict none|h2o */
    int heavy;             /**< --kv-heavy H: heavy hitters kept (h2o) */
    const char *force_path;  /**< --kv-force FILE: token ids to feed instead of the sampled ones */
    const char *tokens_path; /**< --kv-tokens FILE: write each request's generated ids */
    const char *argmax_path; /**< --kv-argmax FILE: with --kv-force, write the greedy id of every forced step */
    int ignore_eos;          /**< --ignore-eos: BOS and EOS are never sampled; every request runs to its length */
} WindowOptions;

/** What the chapter keeps beside chapter 4's server. */
typedef struct {
    WindowOptions opt;    /**< the policy */
    PagedServer *server;  /**< chapter 4's server whose tables it trims (set once paged_open() made it) */
    int n_seqs;           /**< requests */
    int seq_len;          /**< positions per sequence at most */
    int n_heads;          /**< query heads */
    int capacity;         /**< logical blocks per table */
    unsigned char *held;  /**< [n_seqs][seq_len] 1 while a position's K/V are kept (the occupancy masks) */
    int *rows_held;       /**< [n_seqs][capacity] rows held in each logical block */
    float *attn;          /**< [n_seqs][n_heads][seq_len] attention received (h2o only, else NULL) */
    int *n_held;          /**< [n_seqs] positions held now */
    int **forced;         /**< [n_seqs] token ids to force (--kv-force), or NULL */
    int *n_forced;        /**< [n_seqs] ids in forced */
    int *force_buf;       /**< all forced ids, one allocation */
    int *argmax_buf;      /**< [as force_buf] the greedy id at each forced step (--kv-argmax), or NULL */
    double nll_sum;       /**< sum of -log p(forced token) over forced steps */
    long forced_steps;    /**< steps whose token was forced */
    long forced_agree;    /**< of which the greedy token was the forced one */
    int *fed;             /**< [n_seqs] positions each sequence fed this step (scratch) */
    float *gather;        /**< [n_gather][capacity][2][block_size][head_dim] the rows a query may see, per thread */
    int n_gather;         /**< scratch pools in gather: the forward pass's threads */
    int *identity;        /**< [capacity] 0, 1, 2, ...: the block table of a scratch pool */
    int peak_positions;   /**< most positions one sequence held in a decode step (after its write) */
    int peak_blocks;      /**< most blocks one sequence held in a decode step */
    int prompt_peak_positions; /**< the same in steps that fed a sequence prompt positions (the whole chunk is held) */
    int prompt_peak_blocks;    /**< the same, in blocks */
    long evicted;         /**< positions dropped */
    long blocks_returned; /**< blocks given back to the pool by eviction */
} WindowCache;

/**
 * Takes the chapter's options out of argv (they are removed, the rest is
 * left for the common parser) and checks them.
 * @param argc  in: argument count; out: what is left
 * @param argv  the arguments (compacted in place)
 * @param o     receives the options
 * @param err   receives one line on failure
 * @return 0 on success, -1 on a bad option
 */
int window_parse_options(int *argc, char **argv, WindowOptions *o, Err *err);

/**
 * Refuses what the chapter cannot combine with a window: `--n` above 1
 * (shared blocks), `--preempt swap`, `--device cuda`, a window with more
 * positions than the model's context, `--kv-force` without greedy sampling;
 * and `--beam` with or without one (chapter 4's beam search has a step of
 * its own, which window_step() is not).
 * @param o    the options
 * @param run  the run (its options and model)
 * @param err  receives one line on failure
 * @return 0 when the run can go ahead, -1 otherwise
 */
int window_check(const WindowOptions *o, const ServingRun *run, Err *err);

/**
 * The chapter's books for a run: the occupancy masks, the counts and (h2o)
 * the attention scores, charged to kv_metadata; the forced ids, read (and
 * refused in one line) before anything is printed. Set w->server to
 * chapter 4's server once paged_open() has made it.
 * @param w    receives the books
 * @param o    the options
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (close with window_close() either way)
 */
int window_open(WindowCache *w, const WindowOptions *o, const ServingRun *run, Err *err);

/**
 * Frees the books.
 * @param w  opened or zeroed books
 */
void window_close(WindowCache *w);

/**
 * The K/V seam over chapter 4's paged store with the occupancy masks.
 * @param w  the books
 * @return store = window_store, attend = window_attend
 */
KvSeam window_seam(WindowCache *w);

/**
 * Attention of one query head at position @p qpos over the positions it
 * may see (held, and inside the window or a sink, or any held with h2o),
 * in position order. The mask is applied around chapter 4's
 * paged_attention(), not inside it: the visible rows of the query's KV head
 * are gathered, in order, into a scratch pool of this thread, and
 * paged_attention() runs over them; so the bits are paged_attention()'s
 * over the positions kept, and with nothing dropped, chapter 4's exactly.
 * @param w        the books
 * @param seq      the sequence
 * @param layer    layer index
 * @param head     query head
 * @param q        [head_dim] query
 * @param qpos     the query's position
 * @param out      [head_dim] receives the output
 * @param scores   [seq_len] scratch
 * @param note     1: add the probabilities to the heavy-hitter scores
 */
void window_attention(WindowCache *w, int seq, int layer, int head, const float *q, int qpos, float *out,
                      float *scores, int note);

/**
 * The positions this step's attention reads, over every fed token: for
 * the query at p, those held or written this step (from the request's
 * cached count on) that are a sink or in the window. The cost model
 * charges these (serving_set_attended()), not p + 1 per token. Called
 * after the step is planned, before its forward pass.
 * @param w    the books
 * @param run  the run, with the step's entries
 * @return the sum over the step's entries of the positions each reads
 */
long window_attended(const WindowCache *w, const ServingRun *run);

/**
 * After a step: drops, for every running sequence that will feed position
 * n next, the positions the query at n may not see (outside the sinks and
 * n-N+1..n), keeping with h2o the H of them with the most attention (ties:
 * the later one stays). Blocks left with no row go back to the pool.
 * @param w    the books
 * @param run  the run
 */
void window_evict(WindowCache *w, ServingRun *run);

/* ------------------------------------------------------------ eviction: the lab's functions (`make lab CH=6`) */

/**
 * Drops position @p pos of sequence @p seq: clears its mask byte
 * (WindowCache.held), takes it off WindowCache.n_held and its block's
 * WindowCache.rows_held, counts it in WindowCache.evicted; and when that
 * block holds no row any more, gives it back (window_return_block()),
 * unless it is the block position @p next falls in (written in the next
 * step: it stays, empty or not).
 * @param w     the books
 * @param run   the run
 * @param seq   the sequence
 * @param pos   a held position
 * @param next  the position the sequence writes next (its n_cached)
 */
void window_drop_position(WindowCache *w, ServingRun *run, int seq, int pos, int next);

/**
 * The sliding window's eviction step: drops (window_drop_position()) every
 * held position below @p window_start, from window_start - 1 down, but
 * never the first opt.sinks positions (the attention sinks). The held
 * rows between the sinks and the window are contiguous: once a position
 * below the window is not held, none below it is.
 * @param w             the books
 * @param run           the run
 * @param seq           the sequence
 * @param window_start  the first position the query at @p next sees (above opt.sinks)
 * @param next          the position the sequence writes next
 */
void window_slide(WindowCache *w, ServingRun *run, int seq, int window_start, int next);

/**
 * H2O's choice: of the held positions from opt.sinks to @p window_start - 1,
 * keeps the opt.heavy with the highest window_heavy_score() and drops the
 * others (window_drop_position()), the lowest score first; of two equal
 * scores the earlier position goes.
 * @param w             the books (with attention scores: opt.evict is h2o)
 * @param run           the run
 * @param seq           the sequence
 * @param window_start  the first position the query at @p next sees (above opt.sinks)
 * @param next          the position the sequence writes next
 */
void window_evict_heavy(WindowCache *w, ServingRun *run, int seq, int window_start, int next);

/**
 * Gives logical block @p logical of @p seq back to the pool: its history
 * closed in the breakdown, block_pool_release(), the table entry a
 * ::BLOCK_HOLE, WindowCache.blocks_returned counted.
 * @param w        the books
 * @param run      the run
 * @param seq      the sequence
 * @param logical  a logical block of its table that no held row is in
 */
void window_return_block(WindowCache *w, ServingRun *run, int seq, int logical);

/**
 * A position's heavy-hitter score: the attention it received, summed over
 * the query heads in head order (the same bits whatever the thread count).
 * @param w    the books (opt.evict is h2o)
 * @param seq  the sequence
 * @param pos  the position
 * @return the score
 */
double window_heavy_score(const WindowCache *w, int seq, int pos);

/**
 * One step of the windowed server: chapter 4's paged_plan(), the batch
 * through the model with window_seam(), teacher forcing (window_force()),
 * sampling, paged_account(), window_evict(), and the finished
 * requests' blocks back to the pool.
 * @param w    the books
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int window_step(WindowCache *w, ServingRun *run, Err *err);

/**
 * Before sampling, with `--kv-force`: adds -log p(forced id) of each
 * request's logits row to the perplexity, counts whether the greedy
 * (argmax) token is the forced one, then makes the forced id the row's
 * largest logit, so that greedy sampling takes it. With `--ignore-eos`
 * first sets BOS and EOS to -infinity (the perplexity is then over the
 * other tokens).
 * @param w    the books
 * @param run  the run, this step sampled
 */
void window_force(WindowCache *w, ServingRun *run);

/**
 * Positions of a window policy's bound: N + S + H (0 without a window).
 * @param o  the options
 * @return the most positions a sequence holds
 */
int window_bound_positions(const WindowOptions *o);

/**
 * Blocks a sequence holds at most: ceil(S / bs) for the sinks, at most
 * ceil((N - 1) / bs) + 1 for N consecutive positions, and one per heavy
 * hitter (a hole each, in the worst case).
 * @param o           the options
 * @param block_size  tokens per block
 * @return the bound in blocks (0 without a window)
 */
int window_bound_blocks(const WindowOptions *o, int block_size);

/**
 * The memory table: chapter 4's lines, then the policy, the peak positions
 * and blocks per sequence against their bounds, what eviction gave back,
 * and with `--kv-force` the perplexity and agreement.
 * @param f    stream
 * @param ctx  the WindowCache
 * @param run  the finished run
 */
void window_report_table(FILE *f, void *ctx, const ServingRun *run);

/**
 * The JSON report: chapter 4's keys, then kv_window, kv_sinks, kv_evict,
 * kv_heavy, window_bound_positions, window_peak_positions,
 * window_peak_blocks, window_bound_blocks, window_peak_kv_bytes,
 * window_evicted, window_blocks_returned, and with `--kv-force`
 * forced_steps, forced_perplexity, forced_agreement.
 * @param j    the writer
 * @param ctx  the WindowCache
 * @param run  the finished run
 */
void window_report_json(JsonWriter *j, void *ctx, const ServingRun *run);

/**
 * With `--kv-tokens FILE`: every request's generated ids, one line each,
 * space-separated (what `--kv-force` reads back); with `--kv-argmax FILE`
 * (and `--kv-force`), in the same form, the greedy id of each forced step:
 * two caches forced through the same text are compared by these.
 * @param w    the books
 * @param run  the finished run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int window_write_tokens(const WindowCache *w, const ServingRun *run, Err *err);

#endif
