/* The kernel checks: the table of kernels, each with its file of cases
 * (kernels/check/NAME_check.c), and running them (cases.h). */
#include "cases.h"

#include <string.h>

#include "kcase.h"

/* Every kernel, in the order kernel-check runs them. The names that
 * --kernel takes and kcase_kernel_names() lists come from here. */
static const struct {
    const char *name;
    KcaseKernelFn run;
} KERNELS[] = {
    {"rmsnorm", kcase_check_rmsnorm},
    {"rope", kcase_check_rope},
    {"swiglu", kcase_check_swiglu},
    {"residual", kcase_check_residual},
    {"embedding", kcase_check_embedding},
    {"convert", kcase_check_convert},
    {"matmul", kcase_check_matmul},
    {"kv_write", kcase_check_kv_write},
    {"attention", kcase_check_attention},
    {"paged_attention", kcase_check_paged_attention},
    {"block_copy", kcase_check_block_copy},
};
#define N_KERNELS (sizeof KERNELS / sizeof KERNELS[0])

const char *kcase_kernel_names(void)
{
    static char names[256];
    if (!names[0])
        for (size_t i = 0; i < N_KERNELS; i++) {
            if (i)
                strncat(names, " ", sizeof names - strlen(names) - 1);
            strncat(names, KERNELS[i].name, sizeof names - strlen(names) - 1);
        }
    return names;
}

/* Whether `name` is one of the comma-separated names of `list`. */
static int in_list(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = list; at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL)
        if (strncmp(at, name, len) == 0 && (at[len] == ',' || at[len] == '\0'))
            return 1;
    return 0;
}

int kcase_kernel_known(const char *names)
{
    for (const char *at = names; at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL) {
        int known = 0;
        for (size_t i = 0; i < N_KERNELS && !known; i++) {
            size_t len = strlen(KERNELS[i].name);
            known = strncmp(at, KERNELS[i].name, len) == 0 && (at[len] == ',' || at[len] == '\0');
        }
        if (!known)
            return 0;
    }
    return 1;
}

size_t kcase_l2_bytes(void)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return prop.l2CacheSize > 0 ? (size_t)prop.l2CacheSize : 0;
}

/* The buffer that clears the L2 before each timed call: twice the L2
 * (1 MiB where the device reports none, as the CPU emulator, so that the
 * path still runs there). */
static int open_scrub(KcaseRun *run, Err *err)
{
    size_t l2 = kcase_l2_bytes();
    run->l2_scrub_bytes = l2 ? 2 * l2 : (size_t)1 << 20;
    return device_alloc(&run->l2_scrub, run->l2_scrub_bytes, MEM_ACTIVATIONS, err);
}

int kcase_run(const Device *dev, const char *kernel, const KcaseOptions *o, KcaseReport report, void *ctx, Err *err)
{
    KcaseRun run = {dev, o, report, ctx, 0, NULL, 0};
    if (kernel && !kcase_kernel_known(kernel))
        return err_set(err, "no kernel '%s' (kernels: %s)", kernel, kcase_kernel_names());
    if (o->time && open_scrub(&run, err))
        return -1;
    int rc = 0;
    for (size_t i = 0; i < N_KERNELS && rc == 0; i++) {
        if (kernel && !in_list(kernel, KERNELS[i].name))
            continue;
        if (KERNELS[i].run(&run, err))
            rc = err_prefix(err, "%s", KERNELS[i].name);
    }
    device_free(run.l2_scrub, NULL);
    return rc ? -1 : run.failed;
}
