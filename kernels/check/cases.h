/**
 * @file cases.h
 * @brief Validation cases for the kernels: random inputs, every version
 *        against its CPU reference, then (only if it passed) timing.
 *
 * Shared by `build/kernel-check` (which prints every result and times the
 * versions) and the GPU test suites (which assert that every version
 * passes). Every output of every version is compared, not a sample, and
 * each case states its tolerance, with the reason, next to it in cases.c.
 */
#ifndef KVLAB_KERNEL_CASES_H
#define KVLAB_KERNEL_CASES_H

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
    double max_error;         /**< worst error over all outputs (relative: see cases.c) */
    double tolerance;         /**< the case fails above this */
    long long outputs;        /**< numbers compared */
    int passed;               /**< max_error <= tolerance */
    double us;                /**< mean time of one call in microseconds (0: not timed) */
    double bytes;             /**< bytes one call must read and write (for GB/s) */
} KcaseResult;

/** How to run the cases. */
typedef struct {
    int quick;   /**< 1: small shapes only (tests, compute-sanitizer) */
    int time;    /**< 1: time the versions that passed */
    int repeats; /**< timed calls per version (after two warm-up calls) */
} KcaseOptions;

/** Receives each result as soon as it is known. */
typedef void (*KcaseReport)(const KcaseResult *r, void *ctx);

/**
 * Runs the cases of one kernel, or of all of them.
 * @param dev     an open device
 * @param kernel  a name from kcase_kernel_names(), or NULL for all
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
 * Whether kcase_run() knows a kernel of this name (checked before a device
 * is opened, so that a typo is an error even where there is no GPU).
 * @param name  a kernel name
 * @return 1 if known, 0 otherwise
 */
int kcase_kernel_known(const char *name);

/**
 * The kernel names kcase_run() knows, separated by spaces.
 * @return a static string
 */
const char *kcase_kernel_names(void);

#endif
