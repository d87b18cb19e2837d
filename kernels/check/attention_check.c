/* Kernel check: attention over contiguous rows (kernels/attention.cu, the
 * form of chapters 1 to 3) against attention_reference() of
 * common/cpu/ops.c, per (entry, head), in the shapes of the chapters (the
 * case itself: attention_case.c).
 *
 * Tolerance: 5e-5 of each output's magnitude, sum_t a_t |v_td| with the
 * softmax weights a_t (an output near 0 can come from cancelling terms,
 * and a correct kernel then has a large relative error). For k terms
 * summed in any order the rounding error is at most k u and typically
 * sqrt(k) u (u = 6e-8); a kernel that drops one position of t is off by
 * about 1/t of the magnitude, 2.4e-4 at t = 4096, the longest case: 5e-5
 * is 5x below that. With f16/bf16 caches the reference reads the same
 * rounded K/V, and scores and sums are f32: the same 5e-5. */
#include "attention_case.h"

/* Every version on one case. */
static int contiguous_case(KcaseRun *run, AttnCase *c, Err *err)
{
    double us;
    for (int v = 1; v <= kvk_attention_n_versions; v++)
        TRY(attn_case_version(run, c, 0, v, &us, err));
    return 0;
}

int kcase_check_attention(KcaseRun *run, Err *err)
{
    return attn_case_for_each(run, 0, contiguous_case, err);
}
