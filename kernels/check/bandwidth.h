/**
 * @file bandwidth.h
 * @brief The device's peak bandwidth as the benchmarks measure it: a
 *        device-to-device copy (build/kernel-check and build/decode-bench
 *        give their figures as a fraction of it, measured in the same run).
 *
 * CUDA builds only.
 */
#ifndef KVLAB_BANDWIDTH_H
#define KVLAB_BANDWIDTH_H

#include "device.h"
#include "err.h"

/** What the copy measured. */
typedef struct {
    double gbs;   /**< bytes read and written per second, / 1e9 */
    size_t bytes; /**< bytes of one copy */
    int copies;   /**< copies timed */
} CopyBandwidth;

/**
 * Times ten device-to-device copies of 256 MiB (a quarter of the free
 * memory at most: at least four times any L2 of today, 60 MB on an H200)
 * after two warm-up copies, counting each byte read and written, as the
 * kernels' bytes are counted.
 * @param dev  an open device
 * @param bw   receives the result
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int copy_bandwidth(const Device *dev, CopyBandwidth *bw, Err *err);

#endif
