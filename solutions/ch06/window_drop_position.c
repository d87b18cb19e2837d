/* Chapter 6 lab: window_drop_position(), one position out of the cache,
 * and its block back to the pool once no row of it is held.
 * exercises/ch06/window_drop_position.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_drop_position(WindowCache *w, ServingRun *run, int seq, int pos, int next)
{
    // LAB BEGIN(ch06.drop): clear the position's mask byte and counts; when its block holds no row and is not next's block, return it (window_return_block())
    int bs = w->server->kv.pool.shape.block_size, logical = pos / bs;
    w->held[(size_t)seq * w->seq_len + pos] = 0;
    w->n_held[seq]--;
    w->evicted++;
    /* The block the next position is written into stays, empty or not. */
    if (--w->rows_held[(size_t)seq * w->capacity + logical] > 0 || logical == next / bs)
        return;
    window_return_block(w, run, seq, logical);
    // LAB STUB:
    // (void)w; (void)run; (void)seq; (void)pos; (void)next;
    // LAB_TODO("drop the position from the masks and give its block back when no row of it is held");
    // LAB END
}
