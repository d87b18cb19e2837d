/**
 * @file beam.h
 * @brief Chapter 4 extension: beam search (`--beam W`) over the paged KV
 *        cache, the way vLLM's first engine shares memory between beams.
 *
 * **Adds** a scheduler and a step of their own, written over the core's
 * phases (scheduler.h) as chapter 6's window_step() is written over
 * chapter 4's step: the core's pool, forks, copy-on-write, preemption and
 * PagedAttention, unchanged; the choice of tokens and which groups run are
 * this file's.
 *
 * **Turned on by** `--beam W` (greedy; it takes neither `--n`,
 * `--temperature` nor the token budget's options).
 *
 * **Taught in** book/ch04-paged.md, "Extension: beam search".
 *
 * **Where the core calls it** (behind `--beam`): paged_check() calls
 * beam_check() before the model loads, and paged_open() calls beam_open(),
 * which fills in the server's hooks (PagedHooks): step (beam_step()
 * instead of paged_step()'s own), sharing_json (the beam_width key) and a
 * close. The core names nothing else of it.
 *
 * Each prompt runs as a **group** of W requests, one per beam. The prompt
 * runs once and every beam's block table points at its blocks (a fork,
 * block_table_fork()). At every step each live beam proposes its W most
 * likely next tokens; of all proposals, the group keeps as many as it has
 * live beams, by cumulative log probability (the sum of the log softmax of
 * each generated token). A kept proposal that extends beam p goes into p's
 * own slot if p is not taken yet, else into the slot of a beam that no
 * proposal extends, whose blocks are freed; that slot then **forks** p's
 * table. Nothing is copied at the fork: the two beams share every block,
 * and the next write into the shared last block copies it first
 * (copy-on-write, block_table_make_writable()), exactly as `--n` samples
 * share their prompt. Beams that agree on a long prefix share it for as
 * long as they live; that is where beam search saves memory.
 *
 * A kept proposal that is EOS (or that reaches the request's last token)
 * is a **finished hypothesis**: its slot is done, and the group goes on
 * with one beam fewer. When no beam is left, the group has W hypotheses
 * and the best one by length-normalised score wins:
 *
 *     score = (sum of the generated tokens' log probabilities) / length
 *
 * with length = prompt + generated tokens, EOS not counted: vLLM's
 * get_beam_search_score() with length_penalty 1.0. (vLLM keeps W beams
 * alive from 2W proposals and stops by a heuristic; retiring a slot per
 * finished hypothesis instead makes `--beam 1` exactly greedy decoding.)
 * Ties go to the lower token id, then to the lower slot, as greedy
 * sampling's argmax does. With `--repetition-penalty`,
 * `--frequency-penalty` or `--presence-penalty`, each beam's logits are
 * first penalised by that beam's own tokens (sampler_penalize()), as
 * greedy decoding penalises its one sequence, so `--beam 1` stays greedy
 * decoding with the same penalties (Hugging Face's beam search does the
 * same; vLLM's BeamSearchParams takes no penalties).
 *
 * **Scheduling.** A group runs, waits and is preempted as a whole: a
 * step makes room for every live beam of a group before feeding any, and
 * when the pool runs dry the newest running group goes back to the queue
 * (all its beams; their tokens and scores are kept and each beam is
 * recomputed on its own when the group is admitted again). Admission is
 * first come, first served over groups. A group is rejected up front when
 * its W beams could not fit the pool even unshared. The logits, and so the
 * beams, are the same bits whatever the block size, the budget or the
 * preemptions.
 *
 * `--out` holds one line per prompt: its best beam (with "beam_score" and
 * "beam_width"); stdout stays empty, as in every serving chapter.
 */
#ifndef KVLAB_CH04_BEAM_H
#define KVLAB_CH04_BEAM_H

#include "paged.h"

/** One proposal: beam @c parent followed by @c token. */
typedef struct {
    int parent;   /**< which live beam it extends (0 .. live - 1) */
    int token;    /**< the token */
    double score; /**< cumulative log probability with the token */
} BeamCandidate;

/**
 * Requests per prompt: --beam W, or 1 without beam search (--n has its
 * own requests and is never combined with --beam).
 * @param o  the options
 * @return W, or 1
 */
int beam_group_size(const CliOptions *o);

/**
 * One step of one group, on logits alone: each live beam's @p keep most
 * likely tokens (by logit, lower id first among equals), scored by the
 * beam's cumulative log probability plus the token's log softmax; the
 * @p keep best proposals of all beams (lower beam first among equal
 * scores). When the beams are all the prompt (@p n_live rows of the same
 * logits), pass @p n_live = 1: otherwise each proposal would come W times.
 * @param rows      [n_live] each live beam's logits, [vocab] each
 * @param cum       [n_live] each beam's cumulative log probability
 * @param n_live    live beams, >= 1
 * @param vocab     vocabulary size
 * @param keep      proposals to keep, 1 .. n_live x vocab (at most 64)
 * @param logprobs  [vocab] scratch
 * @param cands     [n_live x keep] scratch
 * @param chosen    [keep] receives the kept proposals, best first
 */
void beam_choose(const float *const *rows, const double *cum, int n_live, int vocab, int keep, double *logprobs,
                 BeamCandidate *cands, BeamCandidate *chosen);

/**
 * Sets up beam search for a run (paged_open() calls it with --beam):
 * rejects the groups whose W beams could never fit the pool together
 * (paged_reject_unfitting()), per-request scores, scratch for a step, and
 * the `--out` hooks that keep only each prompt's best beam; raises
 * @p max_step_tokens so that a whole preempted group can be recomputed in
 * one step. Sets s->beam.
 * @param s                the server (s->sharing allocated)
 * @param run              the run (W requests per prompt)
 * @param max_step_tokens  the step's capacity, raised if needed
 * @param err              receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int beam_open(PagedServer *s, ServingRun *run, int *max_step_tokens, Err *err);

/**
 * Frees what beam_open() allocated.
 * @param b  the search, or NULL
 */
void beam_close(BeamSearch *b);

/**
 * Refuses, before anything is printed, a KV budget in which no prompt's W
 * beams fit together (paged_check_fits() with a width of W).
 * @param run  the run (requests initialised)
 * @param err  receives the reason on failure
 * @return 0 when the pool can be made and some group fits, -1 otherwise
 */
int beam_check(const ServingRun *run, Err *err);

/**
 * One step under --beam, instead of paged_step()'s: room for every live
 * beam of each running group (the newest groups preempted whole while the
 * pool is dry), first-come, first-served admission of waiting groups, the
 * batch through the model with paged_seam(), then instead of sampling each
 * group keeps its best proposals (beam_choose()), forks the tables of the
 * beams that continue in another slot, frees those of the beams that
 * ended, and finishes the hypotheses that ended; then paged_account() and
 * the finished requests' blocks back to the pool.
 * @param s    the server (s->beam set)
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success (also when every request is already done), -1 on failure
 */
int beam_step(PagedServer *s, ServingRun *run, Err *err);

/**
 * The search's key of the JSON report: beam_width.
 * @param j  the writer (inside the report object)
 * @param b  the search
 */
void beam_report_json(JsonWriter *j, const BeamSearch *b);

/**
 * The best finished hypothesis of the group of request @p i.
 * @param b  the search
 * @param i  any request of the group
 * @return its request index, or -1 while the group is not done
 */
int beam_best(const BeamSearch *b, int i);

/**
 * The length-normalised score of a finished hypothesis (see the file
 * comment).
 * @param b  the search
 * @param i  a finished request
 * @return the score
 */
double beam_score(const BeamSearch *b, int i);

#endif
