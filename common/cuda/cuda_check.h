/**
 * @file cuda_check.h
 * @brief Checking every CUDA runtime call, with file and line
 *        (CUDA builds only: include it under `#ifdef KVLAB_CUDA`).
 *
 * Library code returns -1 with a one-line message; the macros write it:
 * @code
 * CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
 * @endcode
 * gives, on failure, "common/device_forward.c:123: cudaMemcpyAsync(...): an
 * illegal memory access was encountered" and returns -1 from the caller.
 * cuBLAS is called only from kernels/matmul.cu, which checks its own calls.
 */
#ifndef KVLAB_CUDA_CHECK_H
#define KVLAB_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "err.h"

/** Returns -1 from the calling function, with file:line, when a CUDA runtime call fails. */
#define CUDA_CHECK(err, call)                                                                           \
    do {                                                                                                \
        cudaError_t cuda_check_rc_ = (call);                                                            \
        if (cuda_check_rc_ != cudaSuccess)                                                              \
            return err_set((err), "%s:%d: %s: %s", __FILE__, __LINE__, #call,                           \
                           cudaGetErrorString(cuda_check_rc_));                                         \
    } while (0)

/** Returns -1 from the calling function when a kvlab call (0 or -1) fails. */
#define TRY(call)              \
    do {                       \
        if ((call) != 0)       \
            return -1;         \
    } while (0)

#endif
