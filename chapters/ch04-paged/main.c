/* Chapter 4: a paged KV cache with continuous batching. K/V live in
 * fixed-size blocks from one pool, found through a block table per request;
 * attention reads them through the table; requests join the batch the
 * moment their blocks are free. See paged.h for the idea and where each
 * part of it lives, solutions/ch04/ for the code a student writes. */
#include "paged.h"
#include "serving_program.h"

static const CliProgram PROGRAM = {
    .name = "ch04-paged",
    .summary = "Chapter 4: a paged KV cache (blocks, block tables, PagedAttention), continuous batching, "
               "preemption and copy-on-write forks.",
    .features = CLI_MODEL | CLI_CHAT | CLI_SAMPLING | CLI_SERVING | CLI_PAGED | CLI_DEVICE | CLI_KV_DTYPE,
};

int main(int argc, char **argv)
{
    ServingProgram p; /* options, request file, model, device: serving_program.h */
    PagedServer *server = NULL;
    int ok = serving_program_open(&p, &PROGRAM, argc, argv) == 0 && /* bad input: one line, nothing else */
             paged_check(&p.run, &p.err) == 0 &&                     /* a budget no request fits, likewise */
             serving_program_start(&p) == 0 &&                       /* which model runs */
             paged_open(&p.run, &server, p.log, &p.err) == 0;        /* the pool, the block tables, the queue */
    /* The serving loop, one forward step of every running request at a
     * time until every request is done. paged_step() (server.c) schedules,
     * runs the batch through the model with PagedAttention, samples,
     * accounts, and gives the blocks of finished requests back. */
    while (ok && serving_unfinished(&p.run)) {
        ok = paged_step(server, &p.run, &p.err) == 0;
        serving_show_progress(&p.run, p.log);
    }
    if (ok) /* --out, the memory table with the chapter's lines, --json */
        serving_program_report(&p, paged_report_table, paged_report_json, server);
    paged_close(server);
    return serving_program_close(&p);
}
