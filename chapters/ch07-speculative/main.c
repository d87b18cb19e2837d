/* Chapter 7: speculative decoding on chapter 4's paged cache. A proposer
 * guesses k tokens (--spec ngram|self:L|draft --spec-k K), the model
 * verifies them in one forward pass, the longest agreeing prefix is kept
 * and the cache rolls back the rest. See spec.h for the idea and where
 * each part of it lives. */
#include <stdio.h>

#include "serving_program.h"
#include "spec.h"

static const CliProgram PROGRAM = {
    .name = "ch07-speculative",
    .summary = "Chapter 7: speculative decoding over chapter 4's paged cache. --spec ngram (prompt lookup; "
               "--spec-ngram-min N, --spec-ngram-max N), --spec self:L (the first L layers and the head propose), "
               "--spec draft --draft-model FILE (a smaller model with the same vocabulary); --spec-k K proposals per "
               "step (default 4), verified in one forward pass, greedy or by rejection sampling (--temperature); "
               "the rejected positions are given back to the pool; --spec-check checks the block tables and "
               "reference counts after every step. Without --spec: chapter 4's run.",
    .features = CLI_MODEL | CLI_CHAT | CLI_SAMPLING | CLI_SERVING | CLI_PAGED,
};

int main(int argc, char **argv)
{
    ServingProgram p; /* options, request file, model: serving_program.h */
    PagedServer *server = NULL;
    SpecDecoder d = {0};
    SpecOptions o;
    Err err = {{0}};
    if (spec_parse_options(&argc, argv, &o, &err)) { /* ours first: one line, nothing else */
        fprintf(stderr, "%s: error: %s\n", PROGRAM.name, err.msg);
        return 1;
    }
    int ok = serving_program_open(&p, &PROGRAM, argc, argv) == 0 && /* bad input: one line, nothing else */
             spec_check(&o, &p.run, &p.err) == 0 &&                  /* what speculation cannot be combined with */
             paged_check(&p.run, &p.err) == 0 &&                     /* a budget no request fits */
             spec_open(&d, &o, &p.run, &p.err) == 0 &&               /* the proposer, the draft's cache */
             serving_program_start(&p) == 0 &&
             paged_open(&p.run, &server, NULL, &p.err) == 0 &&       /* chapter 4's pool, tables, queue */
             spec_attach(&d, server, &p.run, &p.err) == 0;           /* a step of k + 1 rows per request */
    if (ok && p.log)
        paged_print_setup(server, &p.run, PROGRAM.name, p.log);      /* under this program's name */
    while (ok && serving_unfinished(&p.run)) {
        ok = spec_step(&d, &p.run, &p.err) == 0;
        serving_show_progress(&p.run, p.log);
    }
    if (ok)
        serving_program_report(&p, spec_report_table, spec_report_json, &d);
    spec_close(&d);
    paged_close(server);
    return serving_program_close(&p);
}
