/* Kernel check: the residual add (kernels/residual.cu) against
 * add_inplace() of common/cpu/ops.c.
 *
 * Tolerance: 0 (bitwise). One f32 addition per element, the reference's. */
#include "kcase.h"

#include "ops.h"

#define TOL_EXACT 0.0

int kcase_check_residual(KcaseRun *run, Err *err)
{
    const KcaseMap m = {"residual",  kvk_residual_versions, kvk_residual_n_versions, add_inplace, kvk_residual_add,
                        TOL_EXACT, 14};
    TRY(kcase_inplace_map(run, &m, 1001, err)); /* not a multiple of 4: the tail */
    if (!run->o->quick)
        TRY(kcase_inplace_map(run, &m, 64LL * 768, err)); /* stories110M, batch 64 */
    return 0;
}
