/* Chapter 3: batching with a contiguous K/V region reserved per request,
 * static (FasterTransformer) or continuous (Orca). See batching.h for the
 * idea and where each part of it lives, kv_arena.h for the allocator, and
 * solutions/ch03/ for the code a student writes. */
#include "batching.h"
#include "serving_program.h"

static const CliProgram PROGRAM = {
    .name = "ch03-batching",
    .summary = "Chapter 3: static or continuous batching, a contiguous K/V region reserved per request, and "
               "where the reserved memory goes.",
    .features = CLI_MODEL | CLI_CHAT | CLI_SAMPLING | CLI_SERVING | CLI_BATCHING | CLI_DEVICE,
};

int main(int argc, char **argv)
{
    ServingProgram p; /* options, request file, model, device: serving_program.h */
    BatchingState *state = NULL;
    int ok = serving_program_open(&p, &PROGRAM, argc, argv) == 0 && /* bad input: one line, nothing else */
             batching_check(&p.run, &p.err) == 0 &&                  /* a budget no request fits, likewise */
             serving_program_start(&p) == 0 &&                       /* which model runs */
             batching_open(&p.run, &state, p.log, &p.err) == 0;      /* the arena, the regions, the batch */
    /* The serving loop, one forward step of the batch at a time until every
     * request is done. batching_step() (server.c) makes room and admits,
     * runs the batch through the model, samples, accounts, and releases
     * what finished requests held (at once, or when their batch ends). */
    while (ok && serving_unfinished(&p.run)) {
        ok = batching_step(state, &p.run, &p.err) == 0;
        serving_show_progress(&p.run, p.log);
    }
    if (ok) /* --out, the memory table with the chapter's lines, --json */
        serving_program_report(&p, batching_report_table, batching_report_json, state);
    batching_close(state);
    return serving_program_close(&p);
}
