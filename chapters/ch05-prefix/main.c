/* Chapter 5: automatic prefix caching. Chapter 4's paged server, with a
 * cache above its pool that keeps the K/V of full blocks findable by their
 * tokens, so that requests with the same leading tokens compute them once:
 * a hash chain (vLLM) or a radix tree (SGLang). See prefix.h for the idea,
 * for what comes from chapter 4, and for where each part lives;
 * solutions/ch05/ for the code a student writes. */
#include "prefix.h"
#include "serving_program.h"

static const CliProgram PROGRAM = {
    .name = "ch05-prefix",
    .summary = "Chapter 5: automatic prefix caching on chapter 4's paged KV cache: requests that share leading "
               "tokens share the K/V of their full blocks (a hash chain or a radix tree). CPU only: it takes no "
               "--device.",
    .features = CLI_MODEL | CLI_CHAT | CLI_SAMPLING | CLI_SERVING | CLI_PAGED | CLI_PREFIX | CLI_KV_DTYPE,
};

int main(int argc, char **argv)
{
    ServingProgram p; /* options, request file, model: serving_program.h */
    PagedServer *server = NULL;
    PrefixCache *cache = NULL;
    PrefixCacheMode mode = PREFIX_CACHE_HASH;
    int ok = serving_program_open(&p, &PROGRAM, argc, argv) == 0 &&            /* bad input: one line */
             prefix_cache_mode_parse(p.opts.prefix_cache, &mode) == 0 &&
             prefix_check(&p.run, &p.err) == 0 &&                             /* --preempt swap: chapter 4's */
             paged_check(&p.run, &p.err) == 0 &&                              /* a budget no request fits */
             serving_program_start(&p) == 0 &&                                /* which model runs */
             paged_open(&p.run, &server, NULL, &p.err) == 0 &&                /* chapter 4's pool, tables, queue */
             prefix_cache_open(server, &p.run, mode, &cache, &p.err) == 0;    /* the cache above the pool */
    if (ok && p.log)
        prefix_print_setup(cache, PROGRAM.name, p.log);
    /* Chapter 4's serving loop, unchanged: paged_step() schedules (asking
     * the cache at admission, releasing through it), runs the batch,
     * samples, accounts and releases. */
    while (ok && serving_unfinished(&p.run)) {
        ok = paged_step(server, &p.run, &p.err) == 0;
        serving_show_progress(&p.run, p.log);
    }
    if (ok) /* --out, the memory table with chapters 4's and 5's lines, --json */
        serving_program_report(&p, prefix_report_table, prefix_report_json, cache);
    prefix_cache_close(cache);
    paged_close(server);
    return serving_program_close(&p);
}
