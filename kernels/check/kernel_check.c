/* build/kernel-check: every version of every kernel, validated against its
 * CPU reference on random inputs, then timed.
 *
 *   build/kernel-check                        all kernels, full shapes, timed
 *   build/kernel-check --kernel attention     one kernel
 *   build/kernel-check --quick --no-time      small shapes, no timing (for compute-sanitizer)
 *   build/kernel-check --markdown FILE        also write the results as a Markdown table
 *
 * Exit status: 0 when every version passed (or there is no CUDA device: a
 * SKIP line says so), 1 when one failed or on error. Performance goals
 * (paged / contiguous attention time) are reported, never failed on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "cli.h"
#include "device.h"
#include "outfile.h"
#include "report.h"

typedef struct {
    FILE *markdown;
    int passed, failed, unsupported, goals_met, goals_missed;
} Tally;

static void print_result(const KcaseResult *r, void *ctx)
{
    Tally *t = ctx;
    const char *verdict;
    int goal = r->outputs < 0;
    if (goal) {
        verdict = r->passed ? "goal met" : "goal MISSED";
        *(r->passed ? &t->goals_met : &t->goals_missed) += 1;
    } else if (!r->supported) {
        verdict = "n/a";
        t->unsupported++;
    } else {
        verdict = r->passed ? "ok" : "FAIL";
        *(r->passed ? &t->passed : &t->failed) += 1;
    }
    char err_text[32] = "-", gbs[32] = "-", us[32] = "-";
    if (goal)
        snprintf(err_text, sizeof err_text, "%.3fx", r->max_error);
    else if (r->supported)
        snprintf(err_text, sizeof err_text, "%.2e", r->max_error);
    if (r->us > 0) {
        snprintf(us, sizeof us, "%.2f", r->us);
        if (r->bytes > 0)
            snprintf(gbs, sizeof gbs, "%.1f", r->bytes / (r->us * 1e3));
    }
    printf("%-16s %-58s %-5s v%d %-22s %10s %8.3g %-11s %10s %8s\n", r->kernel, r->shape, r->dtype, r->version,
           r->version_name, err_text, r->tolerance, verdict, us, gbs);
    fflush(stdout);
    if (t->markdown)
        fprintf(t->markdown, "| %s | %s | %s | v%d %s | %s | %.3g | %s | %s | %s |\n", r->kernel, r->shape, r->dtype,
                r->version, r->version_name, err_text, r->tolerance, verdict, us, gbs);
}

static int usage(const char *msg)
{
    fprintf(stderr, "kernel-check: error: %s (usage: kernel-check [--kernel NAME] [--quick] [--no-time] "
                    "[--repeats N] [--markdown FILE])\n", msg);
    return 1;
}

/* Everything on the command line is checked before a device is opened, so
 * that a typo is an error, not a SKIP, on a machine without a GPU. */
static int check_arguments(const char *kernel, const char *markdown_path)
{
    char msg[512];
    Err err = {{0}};
    if (kernel && !kcase_kernel_known(kernel)) {
        snprintf(msg, sizeof msg, "no kernel '%s' (kernels: %s)", kernel, kcase_kernel_names());
        return usage(msg);
    }
    if (markdown_path && report_check_writable("--markdown", markdown_path, &err))
        return usage(err.msg);
    return 0;
}

int main(int argc, char **argv)
{
    KcaseOptions o = {.quick = 0, .time = 1, .repeats = 20};
    const char *kernel = NULL, *markdown_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            o.quick = 1;
        else if (strcmp(argv[i], "--no-time") == 0)
            o.time = 0;
        else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            kernel = argv[++i];
        else if (strcmp(argv[i], "--markdown") == 0 && i + 1 < argc)
            markdown_path = argv[++i];
        else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
            long n;
            Err err = {{0}};
            if (cli_parse_long("repeats", argv[++i], 1, 100000, &n, &err))
                return usage(err.msg);
            o.repeats = (int)n;
        }
        else if (strcmp(argv[i], "--help") == 0) {
            printf("Usage: kernel-check [--kernel NAME] [--quick] [--no-time] [--repeats N] [--markdown FILE]\n"
                   "Kernels: %s\n", kcase_kernel_names());
            return 0;
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "bad argument '%s'", argv[i]);
            return usage(msg);
        }
    }
    if (check_arguments(kernel, markdown_path))
        return 1;
    Device dev;
    Err err = {{0}};
    if (device_open(&dev, &err)) {
        printf("kernel-check: SKIP: no CUDA device: %s\n", err.msg);
        return 0;
    }
    Tally t = {0};
    /* The table goes to a temporary file renamed into place at the end:
     * a failed or interrupted check leaves the previous table whole. */
    OutFile markdown = {0};
    if (markdown_path) {
        if (outfile_open(&markdown, "--markdown", markdown_path, &err)) {
            device_close(&dev);
            return usage(err.msg);
        }
        t.markdown = markdown.f;
        fprintf(t.markdown, "Kernels on %s (compute capability %d.%d, %d SMs)\n\n", dev.name, dev.cc_major,
                dev.cc_minor, dev.sm_count);
        fprintf(t.markdown, "| kernel | case | dtype | version | max error | tolerance | result | us | GB/s |\n"
                            "|---|---|---|---|---|---|---|---|---|\n");
    }
    printf("kernel-check on %s (compute capability %d.%d, %d SMs)%s\n", dev.name, dev.cc_major, dev.cc_minor,
           dev.sm_count, o.quick ? ", quick shapes" : "");
    printf("%-16s %-58s %-5s %-25s %10s %8s %-11s %10s %8s\n", "kernel", "case", "dtype", "version", "max error",
           "tol", "result", "us", "GB/s");
    int failed = kcase_run(&dev, kernel, &o, print_result, &t, &err);
    device_close(&dev);
    if (t.markdown && failed < 0)
        outfile_abort(&markdown);
    else if (t.markdown && outfile_commit(&markdown, &err)) {
        fprintf(stderr, "kernel-check: error: %s\n", err.msg);
        return 1;
    }
    if (failed < 0) {
        fprintf(stderr, "kernel-check: error: %s\n", err.msg);
        return 1;
    }
    printf("kernel-check: %d passed, %d failed, %d not applicable; performance goals: %d met, %d missed\n", t.passed,
           t.failed, t.unsupported, t.goals_met, t.goals_missed);
    return failed == 0 ? 0 : 1;
}
