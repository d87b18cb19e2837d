/* machine-limits: the two physical limits that bound kvlab's CPU speed on
 * this machine, measured, so that `make bench` can print them beside the
 * chapters' figures. A benchmark, never a test.
 *
 *   build/machine-limits [--threads N] [--mib M] [--passes P] [--read-only]
 *
 * - Read bandwidth: a streaming read of a buffer of M MiB, P passes, each
 *   timed on its own (a pass reads the buffer as many times as make at
 *   least 512 MiB, so that a small buffer's pass is long enough to time).
 *   The default, 1 GiB, is far larger than the caches (this machine's L3
 *   is 260 MiB): memory's bandwidth. One token of single-stream decoding
 *   reads every weight once, so bytes of weights / this bandwidth is the
 *   shortest a token can take. A model smaller than the last-level cache
 *   is read, token after token, partly from the cache: `make bench` also
 *   measures with M = the bytes a token reads, the same access pattern.
 * - FMA throughput: independent chains of vector fused multiply-adds
 *   (AVX-512 or AVX2 intrinsics, whichever the compiler targets), enough
 *   chains to cover the FMA latency on every FMA port, all in registers.
 *   Batched decoding, which reads each weight once for many tokens, is
 *   bound by this instead.
 *
 * kvlab's kernels build with -ffp-contract=off and never fuse a multiply
 * and an add (their bits must not depend on the compiler); this tool asks
 * for FMA explicitly, because the peak it measures is what the hardware can
 * do, the yardstick, not what kvlab's exact kernels do.
 *
 * --read-only skips the FMA measurement.
 *
 * With --threads N every thread reads its own slice of the buffer (touched
 * first by that thread) and runs its own chains; the figures are the totals.
 * Prints "name value" lines (read_gb_s_best, read_gb_s_median,
 * fma_gflop_s_best, fma_gflop_s_median, ...) after '#' comment lines. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "err.h"
#include "mem.h"
#include "threads.h"

#define USAGE                                                                                               \
    "machine-limits [--threads N (1-256, default 1)] [--mib M (1-65536, default 1024)] [--passes P (3-100, " \
    "default 7)] [--read-only]"
#define MAX_PASSES 100

/* The widest vector the compiler targets, and its FMA. */
#if defined(__AVX512F__)
#define ISA "AVX-512"
#define LANES 16
typedef __m512 Vec;
static inline Vec vec_set(float x) { return _mm512_set1_ps(x); }
static inline Vec vec_load(const float *p) { return _mm512_load_ps(p); }
static inline Vec vec_add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
static inline Vec vec_fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vec_sum(Vec a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__) && defined(__FMA__)
#define ISA "AVX2+FMA"
#define LANES 8
typedef __m256 Vec;
static inline Vec vec_set(float x) { return _mm256_set1_ps(x); }
static inline Vec vec_load(const float *p) { return _mm256_load_ps(p); }
static inline Vec vec_add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
static inline Vec vec_fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline float vec_sum(Vec a)
{
    float v[8];
    _mm256_storeu_ps(v, a);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#else
#define ISA "scalar-fmaf"
#define LANES 1
typedef float Vec;
static inline Vec vec_set(float x) { return x; }
static inline Vec vec_load(const float *p) { return *p; }
static inline Vec vec_add(Vec a, Vec b) { return a + b; }
static inline Vec vec_fma(Vec a, Vec b, Vec c) { return fmaf(a, b, c); }
static inline float vec_sum(Vec a) { return a; }
#endif

/* Independent FMA chains per thread: latency (4 cycles) x FMA ports (2),
 * with room to spare, and few enough to stay in registers. */
enum { CHAINS = 12, READ_ACCS = 4 };

/* Keeps results alive, so that the compiler cannot drop the work. */
static volatile float sink;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Sum of n floats (n a multiple of READ_ACCS * LANES), read once in order:
 * one sequential stream, several accumulators so that the adds never make
 * the loads wait. */
static float read_stream(const float *data, size_t n)
{
    Vec acc[READ_ACCS];
    for (int a = 0; a < READ_ACCS; a++)
        acc[a] = vec_set(0.0f);
    for (size_t i = 0; i < n; i += READ_ACCS * LANES)
        for (int a = 0; a < READ_ACCS; a++)
            acc[a] = vec_add(acc[a], vec_load(data + i + (size_t)a * LANES));
    Vec total = acc[0];
    for (int a = 1; a < READ_ACCS; a++)
        total = vec_add(total, acc[a]);
    return vec_sum(total);
}

/* CHAINS independent chains of `iters` FMAs each; returns their sum. */
static float fma_chains(long iters, float mul, float add)
{
    Vec acc[CHAINS], m = vec_set(mul), c = vec_set(add);
    for (int k = 0; k < CHAINS; k++)
        acc[k] = vec_set((float)k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < CHAINS; k++)
            acc[k] = vec_fma(acc[k], m, c);
    Vec total = acc[0];
    for (int k = 1; k < CHAINS; k++)
        total = vec_add(total, acc[k]);
    return vec_sum(total);
}

/* GB/s of each of `passes` timed passes (all threads together, each over
 * its own slice), after one untimed pass. A pass reads the buffer `sweeps`
 * times over. */
static void measure_read(float *data, size_t n, int threads, int passes, double *gb_s)
{
    size_t slice = n / (size_t)threads, bytes = n * sizeof(float);
    int sweeps = bytes >= (512u << 20) ? 1 : (int)((512u << 20) / bytes);
    for (int p = -1; p < passes; p++) {
        double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num();
            float s = 0.0f;
            for (int k = 0; k < sweeps; k++)
                s += read_stream(data + (size_t)t * slice, slice);
#pragma omp atomic
            sink += s;
        }
        double dt = now_seconds() - t0;
        if (p >= 0)
            gb_s[p] = (double)bytes * sweeps / dt / 1e9;
    }
}

/* GFLOP/s (2 per lane per FMA) of each of `passes` timed passes. */
static void measure_fma(int threads, int passes, double *gflop_s)
{
    const long iters = 20000000L;
    /* mul and add from a volatile, so that nothing is known at compile
     * time; 1 - 2^-20 and a small add keep the values finite. */
    volatile float mul = 0.99999905f, add = 1e-3f;
    for (int p = -1; p < passes; p++) {
        double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
        {
            float s = fma_chains(iters, mul, add);
#pragma omp atomic
            sink += s;
        }
        double dt = now_seconds() - t0;
        if (p >= 0)
            gflop_s[p] = 2.0 * LANES * CHAINS * (double)iters * threads / dt / 1e9;
    }
}

/* Best (largest) and median of v[0..n), printed as NAME_best and NAME_median. */
static void print_figures(const char *name, double *v, int n)
{
    double best = v[0];
    for (int i = 1; i < n; i++)
        best = v[i] > best ? v[i] : best;
    double lo = v[0];
    for (int i = 1; i < n; i++)
        lo = v[i] < lo ? v[i] : lo;
    printf("%s_best %.2f\n%s_median %.2f\n%s_min %.2f\n", name, best, name, median(v, n), name, lo);
}

static int parse_args(int argc, char **argv, long *threads, long *mib, long *passes, int *read_only, Err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i];
        if (strcmp(name, "--read-only") == 0) {
            *read_only = 1;
            continue;
        }
        long *dest = strcmp(name, "--threads") == 0 ? threads
                     : strcmp(name, "--mib") == 0   ? mib
                     : strcmp(name, "--passes") == 0 ? passes
                                                     : NULL;
        if (!dest)
            return err_set(err, "unknown argument '%s'", name);
        if (i + 1 >= argc)
            return err_set(err, "%s needs a value", name);
        long lo = dest == passes ? 3 : 1;
        long hi = dest == threads ? 256 : dest == mib ? 65536 : MAX_PASSES;
        if (cli_parse_long(name + 2, argv[++i], lo, hi, dest, err))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("Usage: " USAGE "\nThis machine's streaming read bandwidth and vector FMA throughput, "
               "best and median of P passes.\n");
        return 0;
    }
    long threads = 1, mib = 1024, passes = 7;
    int read_only = 0;
    Err err = {{0}};
    if (parse_args(argc, argv, &threads, &mib, &passes, &read_only, &err)) {
        fprintf(stderr, "machine-limits: error: %s (usage: " USAGE ")\n", err.msg);
        return 1;
    }
    if (threads_check((int)threads, &err)) {
        fprintf(stderr, "machine-limits: error: %s\n", err.msg);
        return 1;
    }
    /* n floats: a whole number of READ_ACCS * LANES per thread */
    size_t chunk = (size_t)READ_ACCS * LANES * (size_t)threads;
    size_t n = ((size_t)mib << 20) / sizeof(float) / chunk * chunk;
    float *data = mem_alloc_array(MEM_ACTIVATIONS, n, sizeof(float)); /* [n] the stream */
    if (!data) {
        fprintf(stderr, "machine-limits: error: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    /* Each thread writes its own slice first, so that its pages are its own. */
    size_t slice = n / (size_t)threads;
#pragma omp parallel num_threads((int)threads)
    {
        float *mine = data + (size_t)omp_get_thread_num() * slice;
        for (size_t i = 0; i < slice; i++)
            mine[i] = (float)(i & 1023) * 1e-3f;
    }
    double read[MAX_PASSES], fma[MAX_PASSES];
    measure_read(data, n, (int)threads, (int)passes, read);
    mem_free(data);
    if (!read_only)
        measure_fma((int)threads, (int)passes, fma);
    printf("# machine-limits: %ld thread(s), %s (%d floats per vector, %d FMA chains), read buffer %ld MiB, "
           "%ld passes each\n",
           threads, ISA, LANES, CHAINS, mib, passes);
    printf("threads %ld\nisa %s\nread_mib %ld\npasses %ld\n", threads, ISA, mib, passes);
    print_figures("read_gb_s", read, (int)passes);
    if (!read_only)
        print_figures("fma_gflop_s", fma, (int)passes);
    return 0;
}
