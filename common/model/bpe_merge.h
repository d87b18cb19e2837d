/**
 * @file bpe_merge.h
 * @brief Merging neighbouring tokens in O(n log n): a priority queue over
 *        adjacent pairs, shared by both tokenizers.
 *
 * Both BPE tokenizers start from many small tokens (bytes or code points)
 * and repeatedly replace the best neighbouring pair by the token it merges
 * into, until no pair merges. Which pair is best is the tokenizer's rule:
 * GPT-2 byte-level BPE takes the merge of lowest rank, llama2.c the merged
 * token of highest score; on ties both take the leftmost pair.
 *
 * Scanning every pair for the best one after each merge costs O(n) per
 * merge and O(n²) per text: 3 s for a 10 KB prompt. Here the pairs wait in
 * a binary heap ordered by (key, position), lowest first; a merge changes
 * only the two pairs around it, which are pushed anew. Entries that a merge
 * made stale stay in the heap and are skipped when they come up (they are
 * checked against the symbols as they are now), so each merge costs
 * O(log n). The result is the same sequence of merges as the scan: at every
 * step the heap's top valid entry is the lowest (key, position) among the
 * pairs that exist, which is exactly the pair the scan would pick.
 */
#ifndef KVLAB_BPE_MERGE_H
#define KVLAB_BPE_MERGE_H

#include "err.h"

/**
 * What a pair of neighbouring tokens merges into.
 */
typedef struct {
    double key;    /**< priority: lower merges first (a rank, or minus a score) */
    int merged_id; /**< the token that replaces the pair */
} PairMerge;

/**
 * The tokenizer's rule: does the pair (left, right) merge, and how well?
 * @param ctx       the tokenizer's data
 * @param left_id   the left token
 * @param right_id  the token right after it
 * @param out       receives the merge when there is one
 * @return 1 when the pair merges, 0 when it does not
 */
typedef int (*PairMergeFn)(const void *ctx, int left_id, int right_id, PairMerge *out);

/** One token of the sequence being merged, in a doubly linked list. */
typedef struct {
    int id;   /**< current token id; -1 once merged into its left neighbour */
    int prev; /**< index of the symbol before, -1 at the start */
    int next; /**< index of the symbol after, -1 at the end */
} MergeSymbol;

/** A pair waiting in the heap: the symbol at `left` and the one after it. */
typedef struct {
    double key;    /**< the merge's priority when it was pushed */
    int left;      /**< index of the left symbol (its place in the original sequence) */
    int merged_id; /**< what the pair merged into when it was pushed */
} MergeCandidate;

/**
 * Scratch space of merge_tokens(), reused across calls and grown on demand
 * (a tokenizer merges one word after another).
 */
typedef struct {
    MergeSymbol *symbols;  /**< [capacity] */
    MergeCandidate *heap;  /**< [3 * capacity]: n - 1 pairs at the start, at most two per merge */
    int capacity;          /**< longest sequence the buffers hold */
} MergeWork;

/**
 * Makes sure @p work holds a sequence of @p n tokens (a zeroed MergeWork
 * starts empty).
 * @param work  the scratch space
 * @param n     tokens in the sequence to merge
 * @param err   receives the reason on failure
 * @return 0 on success, -1 when memory runs out
 */
int merge_work_reserve(MergeWork *work, int n, Err *err);

/**
 * Frees the scratch space.
 * @param work  a zeroed or reserved MergeWork
 */
void merge_work_free(MergeWork *work);

/**
 * Merges @p ids in place until no neighbouring pair merges, always taking
 * the pair of lowest key, the leftmost on equal keys.
 * @param work   scratch reserved for at least @p n tokens
 * @param ids    [n] the tokens; receives the merged sequence
 * @param n      tokens in @p ids
 * @param merge  the tokenizer's pair rule
 * @param ctx    passed to @p merge
 * @return the number of tokens left in @p ids
 */
int merge_tokens(MergeWork *work, int *ids, int n, PairMergeFn merge, const void *ctx);

#endif
