/* Chapter 6 lab: window_evict_heavy(), H2O's choice of the heavy hitters
 * to keep. exercises/ch06/window_evict_heavy.c is generated from this file
 * by scripts/make-exercises.sh; `make lab CH=6` grades yours. */
#include "lab.h"
#include "window.h"

void window_evict_heavy(WindowCache *w, ServingRun *run, int seq, int window_start, int next)
{
    // LAB BEGIN(ch06.heavy): of the held positions between the sinks and window_start, keep the opt.heavy with the highest window_heavy_score(); drop the others, the lowest first (ties: the earlier goes)
    const unsigned char *held = w->held + (size_t)seq * w->seq_len;
    int candidates = 0;
    for (int pos = w->opt.sinks; pos < window_start; pos++)
        candidates += held[pos];
    for (; candidates > w->opt.heavy; candidates--) {
        int lowest = -1;
        double lowest_score = 0.0;
        for (int pos = w->opt.sinks; pos < window_start; pos++) {
            if (!held[pos])
                continue;
            double sc = window_heavy_score(w, seq, pos);
            if (lowest < 0 || sc < lowest_score) {
                lowest = pos;
                lowest_score = sc;
            }
        }
        window_drop_position(w, run, seq, lowest, next);
    }
    // LAB STUB:
    // (void)w; (void)run; (void)seq; (void)window_start; (void)next;
    // LAB_TODO("keep the heavy hitters, drop the other positions outside the window");
    // LAB END
}
