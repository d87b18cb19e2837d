/**
 * @file cuda_test.h
 * @brief What the GPU test suites share: skipping visibly without a device.
 *
 * Check runs each test in a forked child; CUDA state must be created there,
 * never before the fork. So no CUDA call happens in a suite constructor or
 * the runner: every test probes and opens the device itself.
 *
 * Copies go through cuda_test_upload() and cuda_test_download(), on the
 * device's stream: the kernels run on that stream, which is created
 * non-blocking, so it is not ordered after a plain cudaMemcpy on the
 * legacy stream (from pageable memory such a copy may return before the
 * bytes are on the device): a test that uploaded that way could read its
 * inputs half-written, rarely, on a real GPU, and never under the CPU
 * emulator, which runs every stream in issue order.
 */
#ifndef KVLAB_TESTS_CUDA_TEST_H
#define KVLAB_TESTS_CUDA_TEST_H

#include <stdio.h>

#include "device.h"
#include "helpers.h"

#ifdef KVLAB_CUDA
#include <cuda_runtime_api.h>

/**
 * Copies host bytes to the device on the device's stream and waits for them.
 * @param dev    an open device
 * @param dst    device memory
 * @param src    host memory
 * @param bytes  bytes to copy
 */
static inline void cuda_test_upload(const Device *dev, void *dst, const void *src, size_t bytes)
{
    Err err = {{0}};
    ck_assert(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream) == cudaSuccess);
    ck_assert_msg(device_sync(dev, &err) == 0, "%s", err.msg);
}

/**
 * Copies device bytes to the host once the device's stream has done
 * everything queued before, and waits for them.
 * @param dev    an open device
 * @param dst    host memory
 * @param src    device memory
 * @param bytes  bytes to copy
 */
static inline void cuda_test_download(const Device *dev, void *dst, const void *src, size_t bytes)
{
    Err err = {{0}};
    ck_assert(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream) == cudaSuccess);
    ck_assert_msg(device_sync(dev, &err) == 0, "%s", err.msg);
}
#endif

/**
 * Returns 1 when the test can use a CUDA device; otherwise prints
 * "SKIP: <test>: no CUDA device (<why>)" and returns 0.
 * @param test  the test's name
 * @return 1 if a device is there
 */
static inline int cuda_test_device_present(const char *test)
{
    Err err = {{0}};
    if (device_probe(&err) == 0)
        return 1;
    char why[600];
    snprintf(why, sizeof why, "no CUDA device (%s)", err.msg);
    test_skip(test, why);
    return 0;
}

#endif
