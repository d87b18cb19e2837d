/* Chapter 4 lab: paged_attention(), PagedAttention on the CPU: keys and
 * values read where they live, block by block through the table, never
 * gathered into a contiguous copy.
 * exercises/ch04/paged_attention.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include <string.h>

#include "lab.h"
#include "ops.h"
#include "paged.h"

void paged_attention(const BlockPool *pool, const BlockTable *t, int layer, int kv_head, int head_dim,
                     const float *q, int n_pos, float *out, float *scores)
{
    const int bs = pool->shape.block_size, kv_dim = pool->shape.kv_dim;
    const int n_blocks = block_count_for_tokens(n_pos, bs);
    const size_t head = (size_t)kv_head * (size_t)head_dim; /* the head's slice of each [kv_dim] row */
    // LAB BEGIN(ch04.attend): for each logical block i, read the rows of physical block t->blocks[i]: scores of positions 0..n_pos-1 in order, softmax, then the weighted sum of values in order (attention_score, softmax and attention_accumulate from ops.h give attention_reference's bits)
    for (int i = 0; i < n_blocks; i++) {
        const float *keys = block_pool_keys(pool, t->blocks[i], layer) + head; /* [bs][kv_dim] */
        int rows = n_pos - i * bs < bs ? n_pos - i * bs : bs; /* the last block may be partly filled */
        for (int j = 0; j < rows; j++)
            scores[i * bs + j] = attention_score(q, keys + (size_t)j * kv_dim, head_dim);
    }
    softmax(scores, n_pos);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int i = 0; i < n_blocks; i++) {
        const float *values = block_pool_values(pool, t->blocks[i], layer) + head; /* [bs][kv_dim] */
        int rows = n_pos - i * bs < bs ? n_pos - i * bs : bs;
        /* attention_accumulate() for each row in turn, the sums kept in registers */
        paged_accumulate_rows(out, scores + i * bs, values, rows, kv_dim, head_dim);
    }
    // LAB STUB:
    // (void)t; (void)layer; (void)q; (void)scores; (void)n_blocks; (void)head; (void)kv_dim;
    // memset(out, 0, (size_t)head_dim * sizeof(float));
    // LAB_TODO("attention over positions 0..n_pos-1, reading K and V through the block table");
    // LAB END
}
