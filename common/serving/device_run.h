/**
 * @file device_run.h
 * @brief `--device cuda` for the single-request chapters: what run_single
 *        needs to run the generation loop on the GPU.
 *
 * A device run owns the device, the uploaded weights, the device
 * activations and the chapter's device K/V store. It hands the generation
 * loop a ::SingleStreamKv whose `step` runs device_forward(), so
 * common/serving/generate.c drives the CPU and the GPU alike.
 */
#ifndef KVLAB_DEVICE_RUN_H
#define KVLAB_DEVICE_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "device.h"
#include "device_forward.h"
#include "device_kv.h"
#include "dtype.h"
#include "err.h"
#include "generate.h"
#include "json.h"
#include "model.h"

/**
 * A chapter's device K/V store for one request: the device twin of the
 * CPU store the chapter opens (naive_device_open() in chapter 1,
 * kv_cache_device_open() in chapter 2).
 * @param kv        receives the store
 * @param dev       the device
 * @param cfg       model shape
 * @param kv_type   element type asked for with --kv-dtype
 * @param opts      the options (e.g. --kv-alloc)
 * @param n_prompt  prompt length in tokens
 * @param max_step  receives the most tokens one step will feed
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
typedef int (*DeviceKvOpenFn)(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                              const CliOptions *opts, int n_prompt, int *max_step, Err *err);

/** Everything a single-request run holds on the device. */
typedef struct {
    Device dev;            /**< the open device */
    DeviceModel model;     /**< the weights, uploaded */
    DeviceForwardState fs; /**< device activations */
    DeviceKv kv;           /**< the chapter's device K/V store */
    Dtype weight_type;     /**< --weight-dtype */
    Dtype kv_type;         /**< --kv-dtype */
} DeviceRun;

/**
 * Opens the device (first, so that a machine without one fails fast) and
 * parses --kv-dtype and --weight-dtype, refusing in one line a K/V type
 * the device does not store (int8, fp8).
 * @param r     receives the run
 * @param opts  the options
 * @param err   receives one line: no CUDA in this build, no driver, no device
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int device_run_open(DeviceRun *r, const CliOptions *opts, Err *err);

/**
 * `--device` as every program reads it. With `--device cuda` it opens the
 * device at once (device_run_open()), before any file is read, so that a
 * machine without one, or a build without CUDA, answers in one line; a
 * program without a CUDA path says so. On the CPU it refuses
 * `--weight-dtype` other than f32 (the CPU path computes in f32);
 * cli_parse() has already refused a `--kv-dtype` the program's CPU path
 * does not store.
 * @param r              receives the run (zeroed when on the CPU)
 * @param opts           the options
 * @param program        the program's name, for the message
 * @param has_cuda_path  0 when the program has no CUDA path
 * @param on_device      receives 1 for --device cuda, 0 for the CPU
 * @param err            receives one line
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int device_run_open_if_asked(DeviceRun *r, const CliOptions *opts, const char *program, int has_cuda_path,
                             int *on_device, Err *err);

/**
 * Uploads the weights, opens the chapter's device K/V store and the device
 * activations, and fills @p kv with a strategy whose step runs on the device.
 * @param r         an open run
 * @param m         the model
 * @param opts      the options
 * @param open_kv   the chapter's device K/V store
 * @param n_prompt  prompt length in tokens
 * @param kv        receives the strategy for generate()
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure (close the run)
 */
int device_run_start(DeviceRun *r, const Model *m, const CliOptions *opts, DeviceKvOpenFn open_kv, int n_prompt,
                     SingleStreamKv *kv, Err *err);

/**
 * Frees everything on the device and closes it.
 * @param r  an open or zeroed run
 */
void device_run_close(DeviceRun *r);

/**
 * Takes the closing cudaMemGetInfo reading (call before the report).
 * @param r  the run
 */
void device_run_finish(DeviceRun *r);

/**
 * The device lines of the memory table.
 * @param f  stream
 * @param r  the run
 */
void device_run_report_table(FILE *f, const DeviceRun *r);

/**
 * The device keys of the JSON report (plus kv_dtype and weight_dtype).
 * @param j  the writer
 * @param r  the run
 */
void device_run_report_json(JsonWriter *j, const DeviceRun *r);

#endif
