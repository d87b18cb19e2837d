/**
 * @file paged_trace.h
 * @brief Chapter 4 extension: the steps watched, `--trace` and
 *        `--show-tables`.
 *
 * **Adds** a watcher of the steps: with `--trace FILE`, one JSON line per
 * step with what changed in the block tables and the pool (the trace's
 * format is common/serving/trace.h's; make demo's page draws it); with
 * `--show-tables STEP`, every block table after that step's forward pass.
 * It runs as one of the run's observers (serving_add_observer()), after a
 * step's accounting and before finished requests let go of their blocks,
 * so it shows what the step's forward pass read. Nothing here changes what
 * the scheduler does.
 *
 * **Turned on by** `--trace FILE` or `--show-tables STEP`.
 *
 * **Taught in** book/ch04-paged.md, "Extension: watching the tables".
 *
 * **Where the core calls it**: paged_open() calls paged_trace_open(), last,
 * when either option is given; nothing else.
 */
#ifndef KVLAB_CH04_PAGED_TRACE_H
#define KVLAB_CH04_PAGED_TRACE_H

#include <stdio.h>

#include "paged.h"

/**
 * Makes the watcher, writes the trace's setup line (the pool, the block
 * size, the requests) and adds it to the run's observers; the run owns it
 * (serving_add_observer()). For the trace it keeps a copy of what the last
 * line said (every block table, every request's cached positions, every
 * block's holders and filled rows) and writes only what changed; it
 * listens to the pool's copies (BlockPool.on_copy, passed on to the
 * listener that was there) to name copy-on-write in the events.
 * @param s    the server (open)
 * @param run  the run (with `--trace`, run->trace set; else `--show-tables`)
 * @param log  where `--show-tables` prints (NULL: stderr)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_trace_open(PagedServer *s, ServingRun *run, FILE *log, Err *err);

/**
 * `--show-tables`: every request that holds blocks, with its block table
 * (`request 0: prompt 5, tokens 53, cached 52, table [0, 44, 52, 19]`;
 * a block that several tables hold is marked with its holders, `7(x2)`),
 * those swapped out, and the pool's totals.
 * @param f    the stream
 * @param s    the server
 * @param run  the run, after a step's accounting
 */
void paged_print_tables(FILE *f, const PagedServer *s, const ServingRun *run);

#endif
