/* Chapter 6: when one sequence outgrows its memory. Chapter 4's paged
 * server with a sliding window (--kv-window), attention sinks (--kv-sinks)
 * and heavy-hitter eviction (--kv-evict h2o --kv-heavy). See window.h for
 * the idea and where each part of it lives. */
#include <stdio.h>

#include "serving_program.h"
#include "window.h"

static const CliProgram PROGRAM = {
    .name = "ch06-window",
    .summary = "Chapter 6: a sliding window with attention sinks, or heavy-hitter (H2O) eviction, over chapter 4's "
               "paged cache (--kv-window N --kv-sinks S --kv-evict h2o --kv-heavy H; --kv-tokens FILE writes the "
               "generated ids, --kv-force FILE feeds them back and measures their perplexity, --kv-argmax FILE writes the "
               "greedy id of every forced step).",
    .features = CLI_MODEL | CLI_SAMPLING | CLI_SERVING | CLI_PAGED | CLI_KV_DTYPE,
};

int main(int argc, char **argv)
{
    ServingProgram p; /* options, request file, model: serving_program.h */
    PagedServer *server = NULL;
    WindowCache w = {0};
    WindowOptions o;
    Err err = {{0}};
    if (window_parse_options(&argc, argv, &o, &err)) { /* ours first: one line, nothing else */
        fprintf(stderr, "%s: error: %s\n", PROGRAM.name, err.msg);
        return 1;
    }
    int ok = serving_program_open(&p, &PROGRAM, argc, argv) == 0 && /* bad input: one line, nothing else */
             window_check(&o, &p.run, &p.err) == 0 &&                /* what a window cannot be combined with */
             paged_check(&p.run, &p.err) == 0 &&                     /* a budget no request fits */
             window_open(&w, &o, &p.run, &p.err) == 0 &&             /* the occupancy masks, the forced ids */
             serving_program_start(&p) == 0 &&
             paged_open(&p.run, &server, NULL, &p.err) == 0;         /* chapter 4's pool, tables, queue */
    if (ok && p.log)
        paged_print_setup(server, &p.run, PROGRAM.name, p.log);      /* under this program's name */
    w.server = server;
    while (ok && serving_unfinished(&p.run)) {
        ok = window_step(&w, &p.run, &p.err) == 0;
        serving_show_progress(&p.run, p.log);
    }
    if (ok)
        ok = window_write_tokens(&w, &p.run, &p.err) == 0;
    if (ok)
        serving_program_report(&p, window_report_table, window_report_json, &w);
    window_close(&w);
    paged_close(server);
    return serving_program_close(&p);
}
