/* build/kernel-check: every version of every kernel, validated against its
 * CPU reference on random inputs, then timed: each call alone after the L2
 * was cleared (so that the bytes come from device memory, not from the L2
 * the previous call filled), and given as GB/s and as a fraction of the
 * device-to-device copy bandwidth measured at the start of the same run.
 *
 *   build/kernel-check                        all kernels, full shapes, timed
 *   build/kernel-check --kernel attention     one kernel (or several: attention,paged_attention)
 *   build/kernel-check --quick --no-time      small shapes, no timing (for compute-sanitizer)
 *   build/kernel-check --markdown FILE        also write the results as a Markdown table
 *
 * Exit status: 0 when every version passed (or there is no CUDA device: a
 * SKIP line says so), 1 when one failed or on error. Performance goals
 * (paged / contiguous attention time) are reported, never failed on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "cases.h"
#include "cli.h"
#include "device.h"
#include "outfile.h"
#include "report.h"

typedef struct {
    const char *markdown;  /* the table's path, or NULL */
    Err markdown_err;      /* the first failure to write it */
    double copy_gbs;       /* the peak the fractions are of (0: not measured) */
    int passed, failed, unsupported, goals_met, goals_missed;
} Tally;

/* Appends one row to the table, through a copy renamed into place: a
 * check that is stopped (a time limit) leaves every row before it, whole. */
static void append_row(Tally *t, const char *row)
{
    OutFile out;
    if (t->markdown_err.msg[0] || outfile_open_append(&out, "--markdown", t->markdown, &t->markdown_err))
        return;
    fputs(row, out.f);
    outfile_commit(&out, &t->markdown_err);
}

static void print_result(const KcaseResult *r, void *ctx)
{
    Tally *t = ctx;
    const char *verdict;
    if (r->goal) {
        verdict = r->passed ? "goal met" : "goal MISSED";
        *(r->passed ? &t->goals_met : &t->goals_missed) += 1;
    } else if (!r->supported) {
        verdict = "n/a";
        t->unsupported++;
    } else {
        verdict = r->passed ? "ok" : "FAIL";
        *(r->passed ? &t->passed : &t->failed) += 1;
    }
    char err_text[32] = "-", gbs[32] = "-", us[32] = "-", peak[32] = "-";
    if (r->goal)
        snprintf(err_text, sizeof err_text, "%.3fx", r->max_error);
    else if (r->supported)
        snprintf(err_text, sizeof err_text, "%.2e", r->max_error);
    if (r->us > 0) {
        snprintf(us, sizeof us, "%.2f", r->us);
        if (r->bytes > 0)
            snprintf(gbs, sizeof gbs, "%.1f", r->bytes / (r->us * 1e3));
        if (r->bytes > 0 && t->copy_gbs > 0)
            snprintf(peak, sizeof peak, "%.2f", r->bytes / (r->us * 1e3) / t->copy_gbs);
    }
    char version[80];
    if (r->goal)
        snprintf(version, sizeof version, "%s", r->version_name);
    else
        snprintf(version, sizeof version, "v%d %s", r->version, r->version_name);
    printf("%-16s %-58s %-5s %-35s %10s %8.3g %-11s %10s %8s %6s\n", r->kernel, r->shape, r->dtype, version, err_text,
           r->tolerance, verdict, us, gbs, peak);
    fflush(stdout);
    if (t->markdown) {
        char row[512];
        snprintf(row, sizeof row, "| %s | %s | %s | %s | %s | %.3g | %s | %s | %s | %s |\n", r->kernel, r->shape,
                 r->dtype, version, err_text, r->tolerance, verdict, us, gbs, peak);
        append_row(t, row);
    }
}

/* What the times stand on, in one line. */
static const char *timing_basis(const KcaseOptions *o, const CopyBandwidth *bw)
{
    static char line[400];
    size_t l2 = kcase_l2_bytes();
    char l2_text[64];
    if (l2)
        snprintf(l2_text, sizeof l2_text, "its %.0f MB L2 cleared (%.0f MB written)", l2 / 1e6, 2.0 * l2 / 1e6);
    else
        snprintf(l2_text, sizeof l2_text, "a 1 MiB buffer written (the device reports no L2 size)");
    snprintf(line, sizeof line,
             "median of %d call%s, each alone after %s, after 2 warm-up calls; GB/s = bytes the call must move "
             "/ time; peak = the device-to-device copy, %.0f GB/s (%d copies of %.0f MB, bytes read and written)",
             o->repeats, o->repeats == 1 ? "" : "s", l2_text, bw->gbs, bw->copies, bw->bytes / 1e6);
    return line;
}

static void write_markdown_header(FILE *f, const Device *dev, const KcaseOptions *o, const CopyBandwidth *bw)
{
    fprintf(f, "Kernels on %s (compute capability %d.%d, %d SMs)\n\n", dev->name, dev->cc_major, dev->cc_minor,
            dev->sm_count);
    if (o->time)
        fprintf(f, "Timing: %s.\n\n", timing_basis(o, bw));
    fprintf(f, "| kernel | case | dtype | version | max error | tolerance | result | us | GB/s | of peak |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
}

static int usage(const char *msg)
{
    fprintf(stderr, "kernel-check: error: %s (usage: kernel-check [--kernel NAME[,NAME...]] [--quick] [--no-time] "
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
        snprintf(msg, sizeof msg, "no kernel '%.200s' (kernels, separated by commas: %s)", kernel,
                 kcase_kernel_names());
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
            printf("Usage: kernel-check [--kernel NAME[,NAME...]] [--quick] [--no-time] [--repeats N] [--markdown FILE]\n"
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
    CopyBandwidth bw = {0};
    if (o.time && copy_bandwidth(&dev, &bw, &err)) {
        device_close(&dev);
        fprintf(stderr, "kernel-check: error: %s\n", err.msg);
        return 1;
    }
    t.copy_gbs = bw.gbs;
    /* The table is written row by row, each time through a copy renamed
     * into place: whatever stops the check, the rows so far stand. */
    if (markdown_path) {
        OutFile markdown;
        if (outfile_open(&markdown, "--markdown", markdown_path, &err)) {
            device_close(&dev);
            return usage(err.msg);
        }
        write_markdown_header(markdown.f, &dev, &o, &bw);
        if (outfile_commit(&markdown, &err)) {
            device_close(&dev);
            fprintf(stderr, "kernel-check: error: %s\n", err.msg);
            return 1;
        }
        t.markdown = markdown_path;
    }
    printf("kernel-check on %s (compute capability %d.%d, %d SMs)%s\n", dev.name, dev.cc_major, dev.cc_minor,
           dev.sm_count, o.quick ? ", quick shapes" : "");
    if (o.time)
        printf("timing: %s\n", timing_basis(&o, &bw));
    printf("%-16s %-58s %-5s %-35s %10s %8s %-11s %10s %8s %6s\n", "kernel", "case", "dtype", "version", "max error",
           "tol", "result", "us", "GB/s", "peak");
    int failed = kcase_run(&dev, kernel, &o, print_result, &t, &err);
    device_close(&dev);
    if (t.markdown_err.msg[0]) {
        fprintf(stderr, "kernel-check: error: %s\n", t.markdown_err.msg);
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
