/* Kernel check: PagedAttention (kernels/paged_attention.cu, chapter 4's
 * device pool) against chapter 4's own paged_attention() (the lab's
 * answer, solutions/ch04/paged_attention.c) over a chapter 4 block pool
 * holding the same values as the contiguous check's case (attention_case.c:
 * shuffled blocks, NaN wherever no sequence is, two layers).
 *
 * Tolerance: the contiguous kernel's, 5e-5 of each output's magnitude
 * (attention_check.c says why): the reference is checked to give
 * attention_reference()'s bits on the same K/V, so the same bound holds.
 *
 * When it times, it also times the contiguous kernel on the same values
 * and reports, as performance goals (never failures):
 *   - paged v1 / contiguous v3: the same one-pass loop, rows found through
 *     the block table: the cost of paging (goal: at most 1.10);
 *   - paged v2 / contiguous v4: the same split, likewise (goal 1.10);
 *   - paged v3 / paged v1: the fast version against the teaching one
 *     (goal: faster, below 1). */
#include "attention_case.h"

#include <stdio.h>

/* The performance goal of the paged kernels: within 1.10x of the
 * contiguous-cache kernel of the same form, at the same lengths and batch. */
#define GOAL_PAGED_RATIO 1.10

/* Reports time_a / time_b as a goal, when both were timed. */
static void report_ratio(KcaseRun *run, const AttnCase *c, const char *kernel, const char *what, double us_a,
                         double us_b, double goal)
{
    if (us_a <= 0.0 || us_b <= 0.0)
        return;
    char shape[128];
    attn_case_label(c, 1, shape, sizeof shape);
    kcase_report_goal(run, kernel, dtype_name(c->s.t), what, shape, us_a / us_b, goal);
}

/* Every version on one case, then the ratios. */
static int paged_case(KcaseRun *run, AttnCase *c, Err *err)
{
    double paged_us[4] = {0}, one_pass = 0.0, split = 0.0;
    for (int v = 1; v <= kvk_paged_attention_n_versions && v < 4; v++)
        TRY(attn_case_version(run, c, 1, v, &paged_us[v], err));
    if (!run->o->time)
        return 0;
    TRY(attn_case_time_quietly(run, c, 0, 3, &one_pass, err));
    TRY(attn_case_time_quietly(run, c, 0, 4, &split, err));
    report_ratio(run, c, "paged/contiguous", "paged v1 / contig. v3 (one pass)", paged_us[1], one_pass,
                 GOAL_PAGED_RATIO);
    report_ratio(run, c, "paged/contiguous", "paged v2 / contig. v4 (split)", paged_us[2], split, GOAL_PAGED_RATIO);
    report_ratio(run, c, "paged v3/v1", "fast / teaching version", paged_us[3], paged_us[1], 1.0);
    return 0;
}

int kcase_check_paged_attention(KcaseRun *run, Err *err)
{
    return attn_case_for_each(run, 1, paged_case, err);
}
