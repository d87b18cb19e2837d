/* Bug hunt "preempt_chunk": chunked prefill and preemption by
 * recomputation (chunked_prefill.h). */
#include "chunked_prefill.h"

void chunk_pool_init(ChunkPool *p, int n_blocks)
{
    p->n_blocks = n_blocks;
    p->n_free = n_blocks;
    for (int i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i; /* block 0 on top */
}

int chunk_next(ChunkPool *p, ChunkSeq *s, int budget, int block_size, Chunk *out)
{
    int len = s->n_prompt - s->n_computed;
    if (len > budget)
        len = budget;
    out->first = s->n_computed;
    out->len = len;
    if (len <= 0)
        return 0;
    /* Blocks up to the one holding the chunk's last row. */
    int blocks_needed = (out->first + len + block_size - 1) / block_size;
    if (blocks_needed - s->n_blocks > p->n_free)
        return -1;
    while (s->n_blocks < blocks_needed)
        s->table[s->n_blocks++] = p->free_ids[--p->n_free];
    return len;
}

void chunk_done(ChunkSeq *s, const Chunk *c)
{
    s->n_computed = c->first + c->len;
}

int chunk_slot(const ChunkSeq *s, int pos, int block_size)
{
    int b = pos / block_size;
    if (pos < 0 || b >= s->n_blocks)
        return -1;
    return s->table[b] * block_size + pos % block_size;
}

void chunk_preempt(ChunkPool *p, ChunkSeq *s)
{
    /* Last taken, first back: the pool's stack looks as before. */
    while (s->n_blocks > 0)
        p->free_ids[p->n_free++] = s->table[--s->n_blocks];
    // BUG BEGIN(bughunt.preempt_chunk): preemption frees the blocks but keeps the prefill's progress, so the resumed prompt starts mid-way, in fresh blocks that hold no row of its first chunks (the form of nano-vllm PR #233: state left from before a preemption indexes what is gone)
    s->n_computed = 0;
    // BUG PLANTED:
    // BUG END
}
