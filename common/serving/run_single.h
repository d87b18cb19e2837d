/**
 * @file run_single.h
 * @brief What a single-request chapter's main() does around its K/V
 *        (chapters 1 and 2): options, model, prompt, the loop, the report.
 *
 * A single-request program reads, in order:
 *
 *     single_run_open()      options, model and tokenizer, sampler, the prompt encoded:
 *                            bad input is refused here, in one line, before any output
 *     (the chapter opens its K/V store and hands the loop a ::SingleStreamKv)
 *     single_run_start()     activations for the largest step; one line: which model runs
 *     single_run_generate()  the loop (generate(), generate.h): text on stdout
 *     single_run_report()    the memory table (with the chapter's lines), --json
 *     (the chapter frees its store)
 *     return single_run_close();
 *
 * With `--device cuda` the chapter calls single_run_start_device() instead
 * of opening its CPU store and single_run_start(): the weights, the
 * activations and the chapter's device store go to the GPU, and each step
 * runs there. Every function that can fail leaves the reason in
 * SingleRun.err; single_run_close() prints it as `program: error: reason`
 * and returns the exit status.
 */
#ifndef KVLAB_RUN_SINGLE_H
#define KVLAB_RUN_SINGLE_H

#include <stdio.h>

#include "assets.h"
#include "chat.h"
#include "cli.h"
#include "device_run.h"
#include "generate.h"
#include "json.h"
#include "kv_dtype.h"
#include "model.h"
#include "sampler.h"

/** Everything a single-request program holds outside its K/V store. */
typedef struct {
    const CliProgram *program; /**< name, summary, accepted options */
    CliOptions opts;           /**< the parsed options */
    Assets assets;             /**< model and tokenizer */
    Sampler sampler;           /**< the sampling options (cli_sampling_params()) and --seed */
    ChatTemplate chat;         /**< --chat: the model's template (zeroed without --chat) */
    Generation gen;            /**< the prompt, then the generated tokens and what each step cost */
    ForwardState fs;           /**< CPU activations (unused on the device) */
    int on_device;             /**< 1 with --device cuda */
    DeviceRun dev;             /**< --device cuda: device, weights, activations, the chapter's device store */
    int help_shown;            /**< 1 after --help: exit 0 */
    Err err;                   /**< why the program stops (empty: it does not) */
} SingleRun;

/**
 * Parses the options, then (refusing bad input in one line before any
 * output) checks that --json can be written, opens the device with
 * `--device cuda`, loads the model and tokenizer, seeds the sampler and
 * encodes the prompt (with `--chat`, as one user message in the model's
 * chat template: a model without one is refused).
 * @param r        receives the program's state
 * @param program  the program's name, summary and options
 * @param argc     from main
 * @param argv     from main
 * @return 0 to go on, -1 to stop (after --help, or with the reason in r->err)
 */
int single_run_open(SingleRun *r, const CliProgram *program, int argc, char **argv);

/**
 * On the CPU, once the chapter has opened its K/V store: sizes the
 * activations for steps of up to @p max_step_tokens positions and says
 * which model runs.
 * @param r                an open run
 * @param max_step_tokens  most positions one step feeds (seq_len for chapter 1, the prompt for chapter 2)
 * @return 0 on success, -1 with the reason in r->err
 */
int single_run_start(SingleRun *r, int max_step_tokens);

/**
 * `--device cuda`: uploads the weights, opens the chapter's device K/V
 * store with @p open_kv, sizes the device activations, fills @p kv with a
 * strategy whose steps run on the device, and says which model runs.
 * @param r        an open run (r->on_device)
 * @param open_kv  the chapter's device store (naive_device_open(), kv_cache_device_open())
 * @param kv       receives the strategy for the loop
 * @return 0 on success, -1 with the reason in r->err
 */
int single_run_start_device(SingleRun *r, DeviceKvOpenFn open_kv, SingleStreamKv *kv);

/**
 * The generation loop (generate()) with the chapter's K/V strategy: the
 * prompt and each new token on stdout (with `--chat`, the answer only),
 * until --steps new tokens, a stop token (`<|im_end|>` with `--chat`) or
 * the end of the context.
 * @param r   a started run
 * @param kv  the chapter's strategy
 * @return 0 on success, -1 with the reason in r->err
 */
int single_run_generate(SingleRun *r, const SingleStreamKv *kv);

/**
 * After the loop: the memory table on stderr (the shared lines: work, step
 * times, the device; then @p table's) and --json (the shared keys, then
 * @p json's).
 * @param r         the run, generation done
 * @param keeps_kv  0: the table says no KV cache is kept (chapter 1)
 * @param table     the chapter's lines of the table
 * @param json      the chapter's keys of the JSON report
 * @param chapter   passed to @p table and @p json
 * @return 0 on success, -1 with the reason in r->err
 */
int single_run_report(SingleRun *r, int keeps_kv, void (*table)(FILE *f, void *chapter, const Generation *g),
                      void (*json)(JsonWriter *j, void *chapter, const Generation *g), void *chapter);

/**
 * The element type of this run's stored K/V: --kv-dtype's (f32 by
 * default; on the CPU only a chapter that stores other types accepts
 * another, see ::CLI_KV_DTYPE).
 * @param r  an open run
 * @return the type
 */
KvDtype single_run_kv_dtype(const SingleRun *r);

/**
 * Frees everything, prints `program: error: reason` when r->err holds one,
 * and gives the exit status. The chapter frees its own store first.
 * @param r  a run from single_run_open() (whatever it returned)
 * @return 0, or 1 when r->err holds a reason
 */
int single_run_close(SingleRun *r);

#endif
