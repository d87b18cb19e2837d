/**
 * @file serve.h
 * @brief The serving chapters by number, for the tools that run both
 *        (demo, kvsim) and their tests.
 *
 * A chapter program steps its own chapter by name (chapters/ch03-batching/
 * main.c, chapters/ch04-paged/main.c). A tool that compares the two picks
 * one per run; these two functions are that choice and nothing more: the
 * chapter's own check, and its whole run (batching_serve() or
 * paged_serve(), the same steps its program takes).
 */
#ifndef KVLAB_TOOLS_SERVE_H
#define KVLAB_TOOLS_SERVE_H

#include <stdio.h>

#include "err.h"
#include "serving.h"

/** A serving chapter. */
typedef enum {
    SERVE_BATCHING = 3, /**< chapter 3 (batching.h): a contiguous region reserved per request */
    SERVE_PAGED = 4     /**< chapter 4 (paged.h): blocks, block tables, PagedAttention */
} ServeChapter;

/**
 * The chapter's own refusal of a run that can never work (batching_check(),
 * paged_check()), before anything is printed.
 * @param ch   the chapter
 * @param run  an initialised run
 * @param err  receives the reason
 * @return 0 when the run can go ahead, -1 otherwise
 */
int serve_check(ServeChapter ch, const ServingRun *run, Err *err);

/**
 * Serves a run to the end with chapter @p ch, stepped as its program does,
 * then closes the chapter (the run keeps every number: timeline, breakdown,
 * requests).
 * @param ch   the chapter
 * @param run  an initialised run (serving_run_init(), or serving_sim_init() for no model)
 * @param log  where the chapter's setup lines go, or NULL
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serve_run(ServeChapter ch, ServingRun *run, FILE *log, Err *err);

#endif
