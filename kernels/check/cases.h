/**
 * @file cases.h
 * @brief Validation cases for the kernels: random inputs, every version
 *        against its CPU reference, then (only if it passed) timing.
 *
 * Shared by `build/kernel-check` (which prints every result and times the
 * versions) and the GPU test suites (which assert that every version
 * passes). Every output of every version is compared, not a sample. Each
 * kernel's cases are in a file of their own, kernels/check/NAME_check.c,
 * with its CPU reference and its tolerance and the reason for it;
 * kcase.h says how errors are measured and how the versions are timed.
 */
#ifndef KVLAB_KERNEL_CASES_H
#define KVLAB_KERNEL_CASES_H

#include <stddef.h>

#include "device.h"
#include "err.h"

/** The outcome of one version of one kernel on one case. */
typedef struct {
    const char *kernel;       /**< e.g. "rmsnorm" */
    char shape[128];          /**< the case, e.g. "64 rows x 768" */
    const char *dtype;        /**< element type of the cache or weights ("f32" when it does not apply) */
    int version;              /**< 1.. */
    const char *version_name; /**< e.g. "block-reduce" */
    int supported;            /**< 0: this version does not take this shape (not an error) */
    double max_error;         /**< worst error over all outputs (how it is measured: kcase.h) */
    double tolerance;         /**< the case fails above this */
    long long outputs;        /**< numbers compared */
    int passed;               /**< max_error <= tolerance */
    double us;                /**< median time of one call in microseconds, L2 cleared before each (0: not timed) */
    double bytes;             /**< bytes one call must read and write (for GB/s) */
    int goal;                 /**< 1: a performance goal, not a check: max_error holds a time ratio, tolerance the goal */
} KcaseResult;

/** How to run the cases. */
typedef struct {
    int quick;   /**< 1: small shapes only (tests, compute-sanitizer) */
    int time;    /**< 1: time the versions that passed */
    int repeats; /**< timed calls per version (after two warm-up calls), each after the L2 was cleared */
} KcaseOptions;

/** Receives each result as soon as it is known. */
typedef void (*KcaseReport)(const KcaseResult *r, void *ctx);

/**
 * Runs the cases of some kernels, or of all of them.
 * @param dev     an open device
 * @param kernel  names from kcase_kernel_names(), separated by commas
 *                ("attention,paged_attention"), or NULL for all
 * @param o       options
 * @param report  called for every (case, version)
 * @param ctx     passed to report
 * @param err     receives the reason when a case could not run
 * @return the number of failed comparisons (0: all passed), or -1 when a
 *         case could not run (err says why)
 */
int kcase_run(const Device *dev, const char *kernel, const KcaseOptions *o, KcaseReport report, void *ctx,
              Err *err);

/**
 * Whether kcase_run() knows every kernel of a comma-separated list
 * (checked before a device is opened, so that a typo is an error even
 * where there is no GPU).
 * @param names  kernel names, separated by commas
 * @return 1 if every one is known, 0 otherwise
 */
int kcase_kernel_known(const char *names);

/**
 * The kernel names kcase_run() knows, separated by spaces (made from its
 * table of kernels).
 * @return a static string
 */
const char *kcase_kernel_names(void);

/**
 * The size of the device's L2 cache, which kcase_run() clears (by writing
 * twice as many bytes) before every timed call.
 * @return bytes (0 when the device does not say, as under the CPU emulator)
 */
size_t kcase_l2_bytes(void);

#endif
