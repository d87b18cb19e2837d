/**
 * @file batching_trace.h
 * @brief Chapter 3 extension: the steps watched, `--trace` and
 *        `--show-tables`.
 *
 * **Adds** a watcher of the steps: with `--trace FILE`, one JSON line per
 * step with what changed in the arena's regions (the trace's format is
 * common/serving/trace.h's; make demo's page draws it); with
 * `--show-tables STEP`, every request's region after that step's forward
 * pass. It runs as one of the run's observers (serving_add_observer()),
 * after a step's accounting and before finished requests let go of their
 * regions, so it shows what the step's forward pass used. Nothing here
 * changes what the chapter does.
 *
 * **Turned on by** `--trace FILE` or `--show-tables STEP`.
 *
 * **Taught in** book/ch03-batching.md, "Extension: watching the regions".
 *
 * **Where the core calls it**: batching_open() calls batching_trace_open(),
 * last, when either option is given; nothing else.
 */
#ifndef KVLAB_CH03_BATCHING_TRACE_H
#define KVLAB_CH03_BATCHING_TRACE_H

#include <stdio.h>

#include "batching.h"

/**
 * Makes the watcher, writes the trace's setup line (the arena, the
 * policy, the requests) and adds it to the run's observers; the run owns
 * it (serving_add_observer()). For the trace it keeps a copy of what the
 * last line said (every request's region and cached positions) and writes
 * only what changed.
 * @param b    the chapter (open)
 * @param run  the run (with `--trace`, run->trace set; else `--show-tables`)
 * @param log  where `--show-tables` prints (NULL: stderr)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_trace_open(BatchingState *b, ServingRun *run, FILE *log, Err *err);

/**
 * `--show-tables`: every request that holds a region (`request 0: prompt
 * 5, tokens 53, cached 52, region [0, 512) of 512 positions, 52 filled`),
 * and the arena's totals.
 * @param f    the stream
 * @param b    the chapter
 * @param run  the run, after a step's accounting
 */
void batching_print_regions(FILE *f, const BatchingState *b, const ServingRun *run);

#endif
