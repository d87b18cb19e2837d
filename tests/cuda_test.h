/**
 * @file cuda_test.h
 * @brief What the GPU test suites share: skipping visibly without a device.
 *
 * Check runs each test in a forked child; CUDA state must be created there,
 * never before the fork. So no CUDA call happens in a suite constructor or
 * the runner: every test probes and opens the device itself.
 */
#ifndef KVLAB_TESTS_CUDA_TEST_H
#define KVLAB_TESTS_CUDA_TEST_H

#include <stdio.h>

#include "device.h"
#include "helpers.h"

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
