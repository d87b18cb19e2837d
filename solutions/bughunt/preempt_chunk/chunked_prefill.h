/**
 * @file chunked_prefill.h
 * @brief Bug hunt "preempt_chunk": a prompt prefilled in chunks under a
 * token budget, in a pool of blocks, and preempted when the pool runs dry.
 *
 * Each step gives a request the next chunk of its prompt (at most the
 * budget's tokens), after taking the blocks that chunk's rows go into. A
 * request is preempted by recomputation, as chapter 4 does it: its blocks
 * go back to the pool, and it starts again later from what it still has.
 */
#ifndef KVLAB_BUGHUNT_CHUNKED_PREFILL_H
#define KVLAB_BUGHUNT_CHUNKED_PREFILL_H

/** The most blocks in the toy pool, and in one request's table. */
#define CHUNK_MAX_BLOCKS 32

/** A pool of blocks: a stack of free ids. */
typedef struct {
    int free_ids[CHUNK_MAX_BLOCKS]; /* [n_free]: the top is free_ids[n_free - 1] */
    int n_free;
    int n_blocks;
} ChunkPool;

/** One request's prefill. */
typedef struct {
    int n_prompt;                /**< prompt length */
    int n_computed;              /**< leading positions whose K/V rows are written */
    int table[CHUNK_MAX_BLOCKS]; /**< [n_blocks]: logical block -> physical block */
    int n_blocks;                /**< blocks held */
} ChunkSeq;

/** One step's chunk of a prompt: positions first .. first + len - 1. */
typedef struct {
    int first;
    int len;
} Chunk;

/**
 * A pool of @p n_blocks free blocks (ids 0 .. n_blocks - 1).
 * @param p         the pool
 * @param n_blocks  1 .. CHUNK_MAX_BLOCKS
 */
void chunk_pool_init(ChunkPool *p, int n_blocks);

/**
 * Schedules a request's next chunk: at most @p budget positions from where
 * its prefill stands, after taking the blocks they need.
 * @param p           the pool
 * @param s           the request
 * @param budget      tokens this step may compute for it, >= 1
 * @param block_size  tokens per block
 * @param out         receives the chunk
 * @return the chunk's length (0: the prompt is done), or -1 when the pool
 *         has too few free blocks (nothing taken: preempt someone)
 */
int chunk_next(ChunkPool *p, ChunkSeq *s, int budget, int block_size, Chunk *out);

/**
 * Records that the forward pass wrote a chunk's rows.
 * @param s  the request
 * @param c  its chunk, as chunk_next() gave it
 */
void chunk_done(ChunkSeq *s, const Chunk *c);

/**
 * Where position @p pos's K/V row lives.
 * @param s           the request
 * @param pos         a position
 * @param block_size  tokens per block
 * @return the slot (physical block x block_size + offset), or -1 when the
 *         request holds no block for that position
 */
int chunk_slot(const ChunkSeq *s, int pos, int block_size);

/**
 * Preempts a request by recomputation: its blocks go back to the pool, and
 * it will be prefilled again from the start.
 * @param p  the pool
 * @param s  the request
 */
void chunk_preempt(ChunkPool *p, ChunkSeq *s);

#endif
