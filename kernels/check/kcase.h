/**
 * @file kcase.h
 * @brief What the kernel-check files share: buffers, error measures,
 *        timing and reporting.
 *
 * Each kernel has its own check file, `kernels/check/NAME_check.c`, with
 * its CPU reference, its cases and its tolerance with the reason for it;
 * cases.c lists them.
 *
 * Every case fills its inputs with seeded random numbers, computes the CPU
 * reference, and runs every version of the kernel on the device with its
 * outputs first poisoned (all bits set: NaN), so that an output a kernel
 * forgets to write fails. All outputs are compared, not a sample, in one
 * of three ways:
 *
 * - bitwise (kcase_byte_error(), tolerance 0), for the kernels that do the
 *   reference's rounding operation for operation or only move bytes;
 * - relative to each value (kcase_relative_error()), for elementwise
 *   arithmetic;
 * - relative to the output's magnitude (kcase_scaled_error()), for sums
 *   that can cancel: the sum of the absolute values of the terms, which is
 *   what rounding error is proportional to.
 *
 * A version that passed is then timed (kcase_finish()): two warm-up calls,
 * then each timed call alone between CUDA events, after the L2 cache was
 * cleared by writing a buffer twice its size, so that the inputs come from
 * device memory (HBM) and not from the L2 the previous call filled; the
 * median of the calls is reported.
 *
 * CUDA builds only.
 */
#ifndef KVLAB_KCASE_H
#define KVLAB_KCASE_H

#include <stddef.h>

#include "cases.h"
#include "cuda_check.h"
#include "dtype.h"
#include "kernels.h"

/** A run of the cases: where results go, how many failed, what clears the L2. */
typedef struct {
    const Device *dev;      /**< the device */
    const KcaseOptions *o;  /**< quick, time, repeats */
    KcaseReport report;     /**< told every result */
    void *ctx;              /**< passed to report */
    int failed;             /**< comparisons that failed so far */
    void *l2_scrub;         /**< [l2_scrub_bytes] device bytes written before each timed call, or NULL */
    size_t l2_scrub_bytes;  /**< twice the L2 (1 MiB where the device reports none) */
} KcaseRun;

/** Launches one version once (queued on the device's stream); 0 or -1. */
typedef int (*KcaseLaunch)(void *args, int version, Err *err);

/** One kernel's cases: runs them all (small shapes only when run->o->quick); 0 or -1. */
typedef int (*KcaseKernelFn)(KcaseRun *run, Err *err);

/**
 * The cases of rmsnorm (kernels/check/rmsnorm_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_rmsnorm(KcaseRun *run, Err *err);

/**
 * The cases of rope (kernels/check/rope_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_rope(KcaseRun *run, Err *err);

/**
 * The cases of swiglu (kernels/check/swiglu_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_swiglu(KcaseRun *run, Err *err);

/**
 * The cases of residual (kernels/check/residual_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_residual(KcaseRun *run, Err *err);

/**
 * The cases of embedding (kernels/check/embedding_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_embedding(KcaseRun *run, Err *err);

/**
 * The cases of convert (kernels/check/convert_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_convert(KcaseRun *run, Err *err);

/**
 * The cases of matmul (kernels/check/matmul_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_matmul(KcaseRun *run, Err *err);

/**
 * The cases of kv_write (kernels/check/kv_write_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_kv_write(KcaseRun *run, Err *err);

/**
 * The cases of attention (kernels/check/attention_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_attention(KcaseRun *run, Err *err);

/**
 * The cases of paged_attention (kernels/check/paged_attention_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_paged_attention(KcaseRun *run, Err *err);

/**
 * The cases of block_copy (kernels/check/block_copy_check.c): every version of each.
 * @param run  the run (failed comparisons are counted in run->failed)
 * @param err  receives the reason when a case could not run
 * @return 0 or -1
 */
int kcase_check_block_copy(KcaseRun *run, Err *err);

/* ------------------------------------------------------------ buffers */

/**
 * Fills x with uniform numbers in [lo, hi) from a seeded generator.
 * @param x    [n]
 * @param n    numbers
 * @param lo   lower bound
 * @param hi   upper bound
 * @param rng  the generator's state
 */
void kcase_fill(float *x, size_t n, float lo, float hi, unsigned long long *rng);

/**
 * Host floats from the ledger.
 * @param n  how many (at least one is allocated)
 * @return the buffer, or NULL when out of memory
 */
float *kcase_host_floats(size_t n);

/**
 * Copies host bytes to the device on the device's stream, and waits.
 * @param dst    device memory
 * @param src    host memory
 * @param bytes  bytes
 * @param dev    the device
 * @param err    receives the reason on failure
 * @return 0 or -1
 */
int kcase_upload(void *dst, const void *src, size_t bytes, const Device *dev, Err *err);

/**
 * Copies device bytes to the host on the device's stream, and waits.
 * @param dst    host memory
 * @param src    device memory
 * @param bytes  bytes
 * @param dev    the device
 * @param err    receives the reason on failure
 * @return 0 or -1
 */
int kcase_download(void *dst, const void *src, size_t bytes, const Device *dev, Err *err);

/**
 * Sets every bit of a device buffer (queued): every float is then NaN, so
 * an output a kernel leaves unwritten fails.
 * @param dst    device memory
 * @param bytes  bytes
 * @param dev    the device
 * @param err    receives the reason on failure
 * @return 0 or -1
 */
int kcase_poison(void *dst, size_t bytes, const Device *dev, Err *err);

/**
 * Runs one version on poisoned outputs: poisons `out`, launches, and
 * downloads `out` into `got`.
 * @param run        the run
 * @param launch     the kernel's launcher
 * @param args       its arguments
 * @param version    the version
 * @param out        [out_bytes] the device output
 * @param got        [out_bytes] host memory for it
 * @param out_bytes  bytes of the output
 * @param err        receives the reason on failure
 * @return 0 or -1
 */
int kcase_run_poisoned(KcaseRun *run, KcaseLaunch launch, void *args, int version, void *out, void *got,
                       size_t out_bytes, Err *err);

/**
 * One version of a case whose outputs are n floats: runs it on poisoned
 * outputs, measures its error against `want` (relative to each value, or
 * to `magnitude` when given), then kcase_finish().
 * @param run        the run
 * @param r          the result (kernel, version, tolerance set); receives the error
 * @param launch     the kernel's launcher
 * @param args       its arguments
 * @param out        [n] the device output
 * @param got        [n] host memory for it
 * @param want       [n] the reference output
 * @param magnitude  [n] each output's magnitude, or NULL for relative errors
 * @param n          outputs
 * @param err        receives the reason on failure
 * @return 0 or -1
 */
int kcase_check_floats(KcaseRun *run, KcaseResult *r, KcaseLaunch launch, void *args, float *out, float *got,
                       const float *want, const float *magnitude, size_t n, Err *err);

/**
 * A new device buffer holding a copy of host bytes (or only allocated).
 * @param dst    receives the buffer
 * @param src    host bytes, or NULL for none
 * @param bytes  size
 * @param dev    the device
 * @param err    receives the reason on failure
 * @return 0 or -1
 */
int kcase_device_copy(void **dst, const void *src, size_t bytes, const Device *dev, Err *err);

/**
 * A new device buffer holding n f32 values converted to type t.
 * @param dst  receives the buffer
 * @param src  [n] f32 values
 * @param n    values
 * @param t    the device type
 * @param dev  the device
 * @param err  receives the reason on failure
 * @return 0 or -1
 */
int kcase_upload_typed(void **dst, const float *src, size_t n, Dtype t, const Device *dev, Err *err);

/**
 * Frees device buffers and host buffers (NULLs are fine).
 * @param device_bufs  [n_dev] device buffers
 * @param n_dev        how many
 * @param host_bufs    [n_host] host buffers from the ledger
 * @param n_host       how many
 */
void kcase_release(void **device_bufs, size_t n_dev, void **host_bufs, size_t n_host);

/** kcase_release() of two arrays of buffers. */
#define KCASE_RELEASE(dev_list, host_list)                                                          \
    kcase_release((void **)(dev_list), sizeof(dev_list) / sizeof(void *), (void **)(host_list),     \
                  sizeof(host_list) / sizeof(void *))

/**
 * A random permutation of 0..n-1 (Fisher-Yates).
 * @param ids  [n] receives it
 * @param n    length
 * @param rng  the generator's state
 */
void kcase_shuffle(int *ids, int n, unsigned long long *rng);

/* ------------------------------------------------------------- errors */

/**
 * Largest |got - want| / |want| (0 where both are 0; NaN counts as infinite).
 * @param got   [n]
 * @param want  [n]
 * @param n     values
 * @return the worst relative error
 */
double kcase_relative_error(const float *got, const float *want, size_t n);

/**
 * Largest |got - want| / scale (the magnitude of each output).
 * @param got    [n]
 * @param want   [n]
 * @param scale  [n]
 * @param n      values
 * @return the worst scaled error (NaN counts as infinite)
 */
double kcase_scaled_error(const float *got, const float *want, const float *scale, size_t n);

/**
 * Fraction of bytes that differ.
 * @param got    [bytes]
 * @param want   [bytes]
 * @param bytes  size
 * @return 0 when bitwise equal
 */
double kcase_byte_error(const void *got, const void *want, size_t bytes);

/* ------------------------------------------------------------ results */

/**
 * A result for one version of a kernel on a case.
 * @param kernel     the kernel's name
 * @param versions   its version table, or NULL
 * @param version    1..
 * @param dtype      the type's name
 * @param tolerance  the most error that passes
 * @param bytes      bytes one call must move (for GB/s)
 * @return the result, supported, not yet measured
 */
KcaseResult kcase_result(const char *kernel, const KvkVersion *versions, int version, const char *dtype,
                         double tolerance, double bytes);

/**
 * Records a result: times it if it passed (and the run times), reports
 * it, counts a failure.
 * @param run     the run
 * @param r       the result, its error measured
 * @param launch  the launcher to time, or NULL (not timed)
 * @param args    its arguments
 * @param err     receives the reason when timing failed
 * @return 0 or -1
 */
int kcase_finish(KcaseRun *run, KcaseResult *r, KcaseLaunch launch, void *args, Err *err);

/**
 * Times one version without reporting it: the median of run->o->repeats
 * calls, each alone after the L2 was cleared, after two warm-up calls.
 * @param run      the run
 * @param launch   the launcher
 * @param args     its arguments
 * @param version  the version
 * @param us       receives microseconds
 * @param err      receives the reason on failure
 * @return 0 or -1
 */
int kcase_time(KcaseRun *run, KcaseLaunch launch, void *args, int version, double *us, Err *err);

/**
 * Reports a performance goal: a ratio of two times against a goal (met
 * when ratio <= goal). Never a failure.
 * @param run     the run
 * @param kernel  what the row is about
 * @param dtype   the type's name
 * @param what    the ratio, in words
 * @param shape   the case
 * @param ratio   the ratio measured
 * @param goal    the goal
 */
void kcase_report_goal(KcaseRun *run, const char *kernel, const char *dtype, const char *what,
                       const char *shape, double ratio, double goal);

/* ---------------------------------------------------- elementwise maps */

/** An in-place elementwise kernel a[i] = f(a[i], b[i]) and its reference. */
typedef struct {
    const char *kernel;                                 /**< its name */
    const KvkVersion *versions;                         /**< its versions */
    int n_versions;                                     /**< how many */
    void (*reference)(float *a, const float *b, int n); /**< the CPU function */
    /** the launcher, kvk_swiglu() or kvk_residual_add() */
    int (*launch)(int version, float *a, const float *b, long long n, cudaStream_t stream, Err *err);
    double tolerance;                                   /**< relative to each value */
    unsigned long long seed;                            /**< of the inputs */
} KcaseMap;

/**
 * Every version of an in-place elementwise kernel on n elements (a and b
 * uniform in [-4, 4)), against its reference on the host.
 * @param run  the run
 * @param m    the kernel
 * @param n    elements
 * @param err  receives the reason when the case could not run
 * @return 0 or -1
 */
int kcase_inplace_map(KcaseRun *run, const KcaseMap *m, long long n, Err *err);

#endif
