/**
 * @file run_single.h
 * @brief The main() of a single-request chapter (chapters 1 and 2).
 *
 * Parsing options, opening the model, running the loop, printing the
 * memory table and writing the JSON report are the same in both chapters;
 * only the K/V strategy differs, and that is all a chapter hands in here.
 */
#ifndef KVLAB_RUN_SINGLE_H
#define KVLAB_RUN_SINGLE_H

#include <stdio.h>

#include "cli.h"
#include "device_run.h"
#include "generate.h"
#include "json.h"
#include "model.h"

/** A single-request chapter: its name and its K/V strategy. */
typedef struct {
    CliProgram program; /**< name, summary, accepted options */
    /**
     * Creates the chapter's K/V store.
     * @param m          the model
     * @param opts       the options (e.g. --kv-alloc)
     * @param n_prompt   prompt length in tokens
     * @param kv         receives the strategy
     * @param max_step   receives the most tokens one step will feed
     * @param err        receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*kv_open)(const Model *m, const CliOptions *opts, int n_prompt, SingleStreamKv *kv, int *max_step, Err *err);
    /**
     * Frees the chapter's K/V store.
     * @param kv  the strategy from kv_open
     */
    void (*kv_close)(SingleStreamKv *kv);
    /** Extra lines of the memory table (may be NULL). */
    void (*extra_table)(FILE *f, const SingleStreamKv *kv, const Generation *g);
    /** Extra keys of the JSON report (may be NULL). */
    void (*extra_json)(JsonWriter *j, const SingleStreamKv *kv, const Generation *g);
    int keeps_kv; /**< 0: the table says no KV cache is kept (chapter 1) */
    /**
     * The chapter's K/V store on the device, for --device cuda (NULL: the
     * chapter has no CUDA path yet). See device_run.h.
     */
    DeviceKvOpenFn device_kv_open;
} SingleStreamChapter;

/**
 * Runs a chapter as a program: options, model, generation to stdout, the
 * memory table on stderr, the JSON report. Errors are one line on stderr.
 * @param ch    the chapter
 * @param argc  from main
 * @param argv  from main
 * @return the process exit status (0, or 1 on any error)
 */
int run_single_main(const SingleStreamChapter *ch, int argc, char **argv);

#endif
