/* GENERATED from solutions/ch06/window_drop_position.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=6`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 6 lab: window_drop_position(), one position out of the cache,
 * and its block back to the pool once no row of it is held.
 * exercises/ch06/window_drop_position.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_drop_position(WindowCache *w, ServingRun *run, int seq, int pos, int next)
{
    // TODO(lab ch06.drop): clear the position's mask byte and counts; when its block holds no row and is not next's block, return it (window_return_block())
    (void)w; (void)run; (void)seq; (void)pos; (void)next;
    LAB_TODO("drop the position from the masks and give its block back when no row of it is held");
}
