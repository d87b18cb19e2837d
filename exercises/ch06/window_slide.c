/* GENERATED from solutions/ch06/window_slide.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=6`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 6 lab: window_slide(), the sliding window's eviction step.
 * exercises/ch06/window_slide.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_slide(WindowCache *w, ServingRun *run, int seq, int window_start, int next)
{
    // TODO(lab ch06.slide): drop (window_drop_position()) every held position below window_start, the sinks kept
    (void)w; (void)run; (void)seq; (void)window_start; (void)next;
    LAB_TODO("drop the positions that left the window, never the sinks");
}
