/* GENERATED from solutions/ch06/window_evict_heavy.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=6`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 6 lab: window_evict_heavy(), H2O's choice of the heavy hitters
 * to keep. exercises/ch06/window_evict_heavy.c is generated from this file
 * by scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_evict_heavy(WindowCache *w, ServingRun *run, int seq, int window_start, int next)
{
    // TODO(lab ch06.heavy): of the held positions between the sinks and window_start, keep the opt.heavy with the highest window_heavy_score(); drop the others, the lowest first (ties: the earlier goes)
    (void)w; (void)run; (void)seq; (void)window_start; (void)next;
    LAB_TODO("keep the heavy hitters, drop the other positions outside the window");
}
