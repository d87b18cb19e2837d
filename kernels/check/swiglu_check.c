/* Kernel check: SwiGLU (kernels/swiglu.cu) against swiglu() of
 * common/cpu/ops.c, in place.
 *
 * Tolerance: 2e-6 relative to each value. The kernel calls the device's
 * expf (within 2 ulp; glibc's is within 1) and divides; with the division
 * and two products the result is within about 5 ulp = 3e-7. */
#include "kcase.h"

#include "ops.h"

#define TOL_SWIGLU 2e-6

int kcase_check_swiglu(KcaseRun *run, Err *err)
{
    const KcaseMap m = {"swiglu", kvk_swiglu_versions, kvk_swiglu_n_versions, swiglu, kvk_swiglu, TOL_SWIGLU, 13};
    TRY(kcase_inplace_map(run, &m, 1001, err)); /* not a multiple of 4: the tail */
    if (!run->o->quick)
        TRY(kcase_inplace_map(run, &m, 64LL * 2048, err)); /* stories110M's hidden layer, batch 64 */
    return 0;
}
