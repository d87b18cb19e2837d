/**
 * @file serving_program.h
 * @brief What a serving chapter's main() does around its loop (chapters 3
 *        and 4): options, request file, model, `--device`, and the report.
 *
 * A serving program reads, in order:
 *
 *     serving_program_open()    options, output files, request file, model, device:
 *                               bad input is refused here, in one line, before any output
 *     chapter_check()           the chapter refuses what can never run (a budget no request fits)
 *     serving_program_start()   one line: which model runs; `--trace` starts
 *     chapter_open()            the chapter's books and step buffers
 *     while (serving_unfinished(&p.run)) chapter_step(...);
 *     serving_program_report()  --out, the memory table (with the chapter's lines), --json
 *     chapter_close()
 *     return serving_program_close();
 *
 * Every function that can fail leaves the reason in ServingProgram.err;
 * serving_program_close() prints it as `program: error: reason` and
 * returns the exit status.
 */
#ifndef KVLAB_SERVING_PROGRAM_H
#define KVLAB_SERVING_PROGRAM_H

#include <stdio.h>

#include "assets.h"
#include "cli.h"
#include "err.h"
#include "json.h"
#include "requests.h"
#include "serving.h"
#include "serving_device.h"
#include "trace.h"

/** Everything a serving program holds outside its chapter. */
typedef struct {
    const CliProgram *program; /**< name, summary, accepted options */
    CliOptions opts;           /**< the parsed options */
    ServingDevice device;      /**< `--device cuda`: the device side (zeroed on the CPU) */
    int on_device;             /**< 1 with --device cuda */
    RequestFile requests;      /**< the request file */
    Assets assets;             /**< model and tokenizer */
    ServingRun run;            /**< the run the chapter serves */
    ServingTrace trace;        /**< `--trace`: the step by step trace (run.trace points here); zeroed without */
    FILE *log;                 /**< where setup and progress lines go: stderr, or NULL with --quiet */
    int help_shown;            /**< 1 after --help: exit 0 */
    Err err;                   /**< why the program stops (empty: it does not) */
} ServingProgram;

/**
 * Parses the options, then (refusing bad input in one line before any
 * output) opens the device with `--device cuda`, checks that --out and
 * --json can be written, loads the request file (data/requests-mixed.tsv
 * by default) and the model, and sets up the run with every request
 * encoded and seeded.
 * @param p        receives the program's state
 * @param program  the program's name, summary and options
 * @param argc     from main
 * @param argv     from main
 * @return 0 to go on, -1 to stop (after --help, or with the reason in p->err)
 */
int serving_program_open(ServingProgram *p, const CliProgram *program, int argc, char **argv);

/**
 * Says which model runs (one line on stderr), once nothing can be refused
 * any more, and with `--trace` starts the trace (run.trace), which the
 * chapter's open() then describes in its setup line.
 * @param p  an open program
 * @return 0, or -1 when the trace cannot be started (the reason in p->err)
 */
int serving_program_start(ServingProgram *p);

/**
 * After the loop: finishes --trace, writes --out (one JSON line per
 * request), prints the memory table on stderr (the shared lines, then
 * @p table's) and writes --json (the shared keys, then @p json's).
 * @param p        the program, its run finished
 * @param table    the chapter's lines of the table
 * @param json     the chapter's keys of the JSON report
 * @param chapter  the chapter's state, passed to @p table and @p json
 * @return 0 on success, -1 with the reason in p->err
 */
int serving_program_report(ServingProgram *p, void (*table)(FILE *f, void *chapter, const ServingRun *run),
                           void (*json)(JsonWriter *j, void *chapter, const ServingRun *run), void *chapter);

/**
 * Frees everything, prints `program: error: reason` when p->err holds one,
 * and gives the exit status.
 * @param p  a program from serving_program_open() (whatever it returned)
 * @return 0, or 1 when p->err holds a reason
 */
int serving_program_close(ServingProgram *p);

#endif
