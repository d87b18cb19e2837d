/* Chapter 7 lab: spec_rollback(), a table gives back the positions of its
 * rejected proposals.
 * exercises/ch07/spec_rollback.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=7` grades yours. */
#include "lab.h"
#include "scheduler.h"
#include "spec.h"

int spec_rollback(PagedServer *s, ServingRun *run, Request *r, int keep)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int freed = 0;
    // LAB BEGIN(ch07.rollback): keep the blocks that hold positions 0..keep-1 (block_count_for_tokens()); for each block past them, from the last, drop this table's hold (block_pool_release()) and, when that was its last holder, close its history with paged_block_freed(s, &run->breakdown, block, 0) and count it
    int need = block_count_for_tokens(keep, p->shape.block_size);
    while (t->n_blocks > need) {
        int block = t->blocks[--t->n_blocks];
        if (block_pool_release(p, block) == 0) { /* its last holder: back to the pool */
            paged_block_freed(s, &run->breakdown, block, 0);
            freed++;
        }
    }
    // LAB STUB:
    // (void)p; (void)t; (void)run;
    // LAB_TODO("give back the blocks past the accepted positions");
    // LAB END
    r->n_cached = keep;
    return freed;
}
