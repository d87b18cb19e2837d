/**
 * @file serving_device.h
 * @brief `--device cuda` for the serving chapters (3 and 4): the forward
 *        pass and the K/V on the GPU, every decision on the host.
 *
 * On the device a serving run changes where the work happens, never what
 * is decided. The scheduler, the allocator and the memory books of the
 * chapter run on the host exactly as on the CPU, in accounting-only mode
 * (run->no_kv_storage = 1: they keep every book and hold no K/V bytes).
 * Each step then goes:
 *
 * 1. the chapter's schedule on the host, as on the CPU; every copy the
 *    allocator decides (chapter 3 moving a region, chapter 4 copying a
 *    block on write) is queued on the device's stream as it is decided, in
 *    the same order, through the allocator's hook (BatchingState.on_move,
 *    BlockPool.on_copy, whose context is the ::ServingDeviceKv);
 * 2. the device store learns where every running request's K/V are now
 *    (its region, or its block table): chapter 3's step calls
 *    batching_device_sync(); chapter 4's store takes the block tables
 *    itself, in its begin_step (chapters/ch04-paged/ext/device.c);
 * 3. serving_step_forward() runs the step's batch with device_forward():
 *    projections with cuBLAS, K/V written and read through the chapter's
 *    device store;
 * 4. the logits come back to the host, where each request samples and the
 *    books are kept, as on the CPU.
 *
 * So the same request file gives the same admissions, preemptions, moves
 * and copies on both devices, as long as the requests produce the same
 * tokens (which the GPU tests check up to the first near-tie).
 *
 * The books count K/V bytes at the device's element size (`--kv-dtype`):
 * with f16 a budget holds twice as many tokens as with f32.
 */
#ifndef KVLAB_SERVING_DEVICE_H
#define KVLAB_SERVING_DEVICE_H

#include <stdio.h>

#include "device_run.h"
#include "json.h"
#include "serving.h"

/**
 * A chapter's K/V store on the device, kept in step with the chapter's
 * allocator on the host. The host keeps every book exactly as on the CPU
 * (run->no_kv_storage = 1: no K/V bytes on the host); the device store
 * holds the K/V bytes where those books say they are, and repeats every
 * copy the books decide. This is the context of the allocator's hook.
 */
typedef struct {
    DeviceKv *kv;  /**< the store (the chapter's device open fills it) */
    void *chapter; /**< the chapter's state */
    Err fault;     /**< the first failure of a copy repeated from a hook that cannot return one (empty: none) */
} ServingDeviceKv;

/** A serving run's device side. */
typedef struct ServingDevice {
    DeviceRun run;      /**< the device, the weights, the activations; run.kv is the chapter's store */
    ServingDeviceKv kv; /**< how the chapter keeps run.kv in step with its books */
} ServingDevice;

/**
 * Reads `--device`: for cuda, opens the device at once (before any file is
 * read, so that a machine without one answers in one line); on the CPU,
 * refuses the element-type options (device_run_open_if_asked()).
 * @param d          receives the device side (zeroed on the CPU)
 * @param program    the program's name, for the messages
 * @param opts       the options
 * @param on_device  receives 1 for --device cuda
 * @param err        receives one line
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int serving_device_open(ServingDevice *d, const char *program, const CliOptions *opts, int *on_device, Err *err);

/**
 * Makes a run use the device: its steps run there, its chapter keeps books
 * only, and a token's K/V count at the device's element size. Call after
 * serving_run_init() and before the chapter's check or open.
 * @param d    an open device side
 * @param run  an initialised run
 */
void serving_device_attach(ServingDevice *d, ServingRun *run);

/**
 * Uploads the weights and sizes the device activations, once the chapter
 * knows its largest step (serving_open_steps() calls it). The chapter
 * then opens its own device K/V store in d->run.kv (batching_device_open(),
 * paged_device_open()).
 * @param d           the device side of @p run
 * @param run         the run
 * @param max_tokens  most entries of a step
 * @param max_logits  most logits rows of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_device_start(ServingDevice *d, ServingRun *run, int max_tokens, int max_logits, Err *err);

/**
 * Runs this step's batch (run->entries) on the device with
 * device_forward(), once the chapter has synced its store; fails first if
 * a copy the allocator's hook repeated has failed. Allocates nothing.
 * @param d       the device side
 * @param run     the run, with this step planned
 * @param logits  receives [run->n_logits][vocab_size] on the host
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_device_forward(ServingDevice *d, ServingRun *run, const float **logits, Err *err);

/**
 * Takes the closing cudaMemGetInfo reading (before the report).
 * @param d  the device side
 */
void serving_device_finish(ServingDevice *d);

/**
 * Frees everything on the device and closes it.
 * @param d  an open or zeroed device side
 */
void serving_device_close(ServingDevice *d);

/**
 * The device lines of the memory table: the device and its memory
 * readings, the element types, and the chapter's device K/V store.
 * @param f  stream
 * @param d  the device side
 */
void serving_device_report_table(FILE *f, const ServingDevice *d);

/**
 * The device keys of the JSON report (device_run_report_json()).
 * @param j  the writer
 * @param d  the device side
 */
void serving_device_report_json(JsonWriter *j, const ServingDevice *d);

#endif
