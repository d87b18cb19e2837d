/* Chapter 6 lab: window_slide(), the sliding window's eviction step.
 * exercises/ch06/window_slide.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_slide(WindowCache *w, ServingRun *run, int seq, int window_start, int next)
{
    // LAB BEGIN(ch06.slide): drop (window_drop_position()) every held position below window_start, the sinks kept
    const unsigned char *held = w->held + (size_t)seq * w->seq_len;
    /* What left the window since the last step: the held rows between
     * the sinks and the window are contiguous, newest first down. */
    for (int pos = window_start - 1; pos >= w->opt.sinks && held[pos]; pos--)
        window_drop_position(w, run, seq, pos, next);
    // LAB STUB:
    // (void)w; (void)run; (void)seq; (void)window_start; (void)next;
    // LAB_TODO("drop the positions that left the window, never the sinks");
    // LAB END
}
