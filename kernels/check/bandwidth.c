/* The device-to-device copy bandwidth (bandwidth.h). */
#include "bandwidth.h"

#include "cuda_check.h"

/* Records the events around the timed copies. */
static int timed_copies(const Device *dev, void *dst, const void *src, size_t bytes, int copies, float *ms, Err *err)
{
    cudaEvent_t start = NULL, stop = NULL;
    int rc = 0;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess)
        rc = err_set(err, "%s:%d: cudaEventCreate failed", __FILE__, __LINE__);
    for (int i = 0; i < copies + 2 && rc == 0; i++) {
        if (i == 2 && cudaEventRecord(start, dev->stream) != cudaSuccess)
            rc = err_set(err, "%s:%d: cudaEventRecord failed", __FILE__, __LINE__);
        if (rc == 0 && cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dev->stream) != cudaSuccess)
            rc = err_set(err, "%s:%d: cudaMemcpyAsync failed", __FILE__, __LINE__);
    }
    if (rc == 0 && (cudaEventRecord(stop, dev->stream) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
                    cudaEventElapsedTime(ms, start, stop) != cudaSuccess))
        rc = err_set(err, "timing the copy failed: %s", cudaGetErrorString(cudaGetLastError()));
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    return rc;
}

int copy_bandwidth(const Device *dev, CopyBandwidth *bw, Err *err)
{
    /* 256 MiB, at least four times any L2 of today (60 MB on an H200), so
     * that the copy streams from and to device memory */
    bw->bytes = (size_t)256 << 20;
    bw->copies = 10;
    if (dev->mem_free_now / 4 < bw->bytes)
        bw->bytes = dev->mem_free_now / 4;
    void *a = NULL, *b = NULL;
    if (device_alloc(&a, bw->bytes, MEM_ACTIVATIONS, err) || device_alloc(&b, bw->bytes, MEM_ACTIVATIONS, err)) {
        device_free(a, NULL);
        return -1;
    }
    float ms = 0.0f;
    int rc = timed_copies(dev, b, a, bw->bytes, bw->copies, &ms, err);
    device_free(a, NULL);
    device_free(b, NULL);
    bw->gbs = rc == 0 && ms > 0.0f ? 2.0 * (double)bw->bytes * bw->copies / ((double)ms * 1e6) : 0.0;
    return rc;
}
