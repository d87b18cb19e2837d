#include "device.h"

#include <string.h>

#include "parse.h"

#ifdef KVLAB_CUDA

#include "cuda_check.h"
#include "kernels.h"

int device_compiled_in(void) { return 1; }

/* ------------------------------------------------ buffers and the ledger */

/* The live device buffers, so that device_free() knows what to take off
 * the ledger. kvlab allocates few, large buffers (a block pool is one), so
 * a small table searched linearly is enough. */
#define DEVICE_MAX_BUFFERS 4096

typedef struct {
    void *ptr;
    size_t bytes;
    MemCategory cat;
} DeviceBuffer;

static DeviceBuffer buffers[DEVICE_MAX_BUFFERS];
static int n_buffers;
static unsigned long buffer_epoch; /* allocations and frees so far */

int device_alloc_at(void **ptr, size_t bytes, MemCategory cat, const char *file, int line, Err *err)
{
    *ptr = NULL;
    if (bytes == 0)
        return 0;
    if (n_buffers == DEVICE_MAX_BUFFERS)
        return err_set(err, "%s:%d: more than %d device buffers", file, line, DEVICE_MAX_BUFFERS);
    cudaError_t rc = cudaMalloc(ptr, bytes);
    if (rc != cudaSuccess) {
        *ptr = NULL;
        cudaGetLastError(); /* clear it: an out-of-memory is reported, not sticky */
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        char want[32], have[32];
        return err_set(err, "%s:%d: cudaMalloc of %s for %s: %s (%s of device memory free)", file, line,
                       format_bytes(want, sizeof want, (double)bytes), mem_category_name(cat),
                       cudaGetErrorString(rc), format_bytes(have, sizeof have, (double)free_bytes));
    }
    buffers[n_buffers++] = (DeviceBuffer){*ptr, bytes, cat};
    buffer_epoch++;
    mem_track(cat, MEM_DEVICE, bytes);
    return 0;
}

static int find_buffer(const void *ptr)
{
    for (int i = 0; i < n_buffers; i++)
        if (buffers[i].ptr == ptr)
            return i;
    return -1;
}

int device_free(void *ptr, Err *err)
{
    if (!ptr)
        return 0;
    int i = find_buffer(ptr);
    if (i < 0)
        return err_set(err, "device_free: %p is not a live device buffer", ptr);
    mem_untrack(buffers[i].cat, MEM_DEVICE, buffers[i].bytes);
    buffers[i] = buffers[--n_buffers];
    buffer_epoch++;
    CUDA_CHECK(err, cudaFree(ptr));
    return 0;
}

size_t device_buffer_bytes(const void *ptr)
{
    int i = find_buffer(ptr);
    return i < 0 ? 0 : buffers[i].bytes;
}

long device_live_buffers(void) { return n_buffers; }

unsigned long device_buffer_epoch(void) { return buffer_epoch; }

/* ------------------------------------------------------ opening a device */

/* The first CUDA call, turned into a sentence a student can act on. */
static int probe_devices(Err *err)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc == cudaErrorInsufficientDriver || rc == cudaErrorNoDevice || (rc == cudaSuccess && count == 0)) {
        cudaGetLastError();
        if (rc == cudaErrorInsufficientDriver)
            return err_set(err, "no CUDA driver on this machine (libcuda.so.1 is missing or older than the CUDA "
                                "%d.%d runtime this program was built with)",
                           CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return err_set(err, "no CUDA device on this machine");
    }
    if (rc != cudaSuccess)
        return err_set(err, "%s:%d: cudaGetDeviceCount: %s", __FILE__, __LINE__, cudaGetErrorString(rc));
    return 0;
}

static int open_context(Device *d, Err *err)
{
    struct cudaDeviceProp prop;
    d->ordinal = 0;
    CUDA_CHECK(err, cudaSetDevice(d->ordinal));
    CUDA_CHECK(err, cudaFree(NULL)); /* creates the context now, so that the readings below exclude it */
    CUDA_CHECK(err, cudaGetDeviceProperties(&prop, d->ordinal));
    snprintf(d->name, sizeof d->name, "%s", prop.name);
    d->cc_major = prop.major;
    d->cc_minor = prop.minor;
    d->sm_count = prop.multiProcessorCount;
    CUDA_CHECK(err, cudaMemGetInfo(&d->mem_free_at_open, &d->mem_total));
    d->mem_free_now = d->mem_free_at_open;
    cudaStream_t stream;
    CUDA_CHECK(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    d->stream = stream;
    return 0;
}

/* cuBLAS would otherwise allocate its workspace behind the ledger's back.
 * NVIDIA recommends 32 MiB on Hopper and 4 MiB before it. */
static int open_blas(Device *d, Err *err)
{
    d->blas_workspace_bytes = (size_t)(d->cc_major >= 9 ? 32 : 4) << 20;
    if (device_alloc(&d->blas_workspace, d->blas_workspace_bytes, MEM_ACTIVATIONS, err))
        return -1;
    return kvk_blas_create(&d->blas, d->stream, d->blas_workspace, d->blas_workspace_bytes, err);
}

int device_probe(Err *err)
{
    return probe_devices(err);
}

int device_open(Device *d, Err *err)
{
    memset(d, 0, sizeof *d);
    if (probe_devices(err))
        return -1;
    if (open_context(d, err) || open_blas(d, err)) {
        device_close(d);
        return -1;
    }
    d->is_open = 1;
    return 0;
}

void device_close(Device *d)
{
    kvk_blas_destroy(d->blas);
    device_free(d->blas_workspace, NULL);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    memset(d, 0, sizeof *d);
}

int device_sync(const Device *d, Err *err)
{
    CUDA_CHECK(err, cudaStreamSynchronize(d->stream));
    return 0;
}

int device_mem_refresh(Device *d, Err *err)
{
    size_t total;
    CUDA_CHECK(err, cudaMemGetInfo(&d->mem_free_now, &total));
    return 0;
}

#else /* built without CUDA */

int device_compiled_in(void) { return 0; }

#define NO_CUDA "this build has no CUDA support (built without nvcc, without a GPU, or with CUDA=0; make CUDA=1 builds it)"

int device_probe(Err *err)
{
    return err_set(err, NO_CUDA);
}

int device_open(Device *d, Err *err)
{
    memset(d, 0, sizeof *d);
    return err_set(err, NO_CUDA);
}

void device_close(Device *d) { memset(d, 0, sizeof *d); }

int device_sync(const Device *d, Err *err)
{
    (void)d;
    return err_set(err, NO_CUDA);
}

int device_alloc_at(void **ptr, size_t bytes, MemCategory cat, const char *file, int line, Err *err)
{
    (void)bytes, (void)cat;
    *ptr = NULL;
    return err_set(err, "%s:%d: %s", file, line, NO_CUDA);
}

int device_free(void *ptr, Err *err)
{
    return ptr ? err_set(err, NO_CUDA) : 0;
}

size_t device_buffer_bytes(const void *ptr)
{
    (void)ptr;
    return 0;
}

long device_live_buffers(void) { return 0; }

unsigned long device_buffer_epoch(void) { return 0; }

int device_mem_refresh(Device *d, Err *err)
{
    (void)d;
    return err_set(err, NO_CUDA);
}

#endif

/* --------------------------------------------------------------- report */

void device_report_table(FILE *f, const Device *d)
{
    char a[32], b[32], c[32], e[32];
    double taken = (double)d->mem_free_at_open - (double)d->mem_free_now;
    size_t ledger = 0;
    for (int i = 0; i < MEM_CATEGORY_COUNT; i++)
        ledger += mem_current((MemCategory)i, MEM_DEVICE);
    fprintf(f, "device\n  %s (compute capability %d.%d, %d multiprocessors)\n", d->name, d->cc_major, d->cc_minor,
            d->sm_count);
    fprintf(f, "  cudaMemGetInfo free %s of %s after the CUDA context was created, %s now\n",
            format_bytes(a, sizeof a, (double)d->mem_free_at_open), format_bytes(b, sizeof b,
                                                                                           (double)d->mem_total),
            format_bytes(c, sizeof c, (double)d->mem_free_now));
    fprintf(f, "  taken since     %s, of which the ledger holds %s now (the rest: cuBLAS's own buffers and\n"
               "                  the allocator's rounding)\n",
            format_bytes(a, sizeof a, taken > 0 ? taken : 0.0), format_bytes(e, sizeof e, (double)ledger));
}

void device_report_json(JsonWriter *j, const Device *d)
{
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    json_string(j, "device_name", d->name);
    json_string(j, "device_compute_capability", cc);
    json_int(j, "device_memory_total_bytes", (long long)d->mem_total);
    json_int(j, "device_memory_free_at_start_bytes", (long long)d->mem_free_at_open);
    json_int(j, "device_memory_free_at_end_bytes", (long long)d->mem_free_now);
}
