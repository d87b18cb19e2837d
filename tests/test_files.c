/* common/base: strict number parsing (parse.h), input files (infile.h) and
 * output files written whole or not at all (outfile.h), in process. The
 * programs' behaviour on the same inputs is in test_hostile.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "infile.h"
#include "outfile.h"
#include "parse.h"
#include "suites.h"

/* ------------------------------------------------------------ numbers */

START_TEST(whole_numbers_are_strict)
{
    long v = 7;
    Err err = {{0}};
    ck_assert_int_eq(parse_long("42", 0, 100, &v, &err), 0);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(parse_long("-5", -10, 10, &v, &err), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(parse_long("007", 0, 10, &v, &err), 0);
    ck_assert_int_eq(v, 7);
    static const char *const malformed[] = {"", " 1", "1 ", "+1", "1x", "0x10", "1e3", "--1", "-", "1.0", "\t2"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        v = 99;
        ck_assert_msg(parse_long(malformed[i], LONG_MIN, LONG_MAX, &v, &err) == -1 && v == 99, "'%s' accepted",
                      malformed[i]);
        ck_assert_msg(strstr(err.msg, "is not a whole number"), "%s", err.msg);
    }
    ck_assert_int_eq(parse_long("101", 0, 100, &v, &err), -1);
    ck_assert_str_eq(err.msg, "101 is out of range [0, 100]");
    ck_assert_int_eq(parse_long("-1", 0, 100, &v, &err), -1);
    ck_assert_str_eq(err.msg, "-1 is out of range [0, 100]");
    ck_assert_int_eq(parse_long("9223372036854775808", LONG_MIN, LONG_MAX, &v, &err), -1);
    ck_assert_int_eq(parse_long("9223372036854775807", LONG_MIN, LONG_MAX, &v, &err), 0);
    ck_assert(v == LONG_MAX);
    ck_assert_int_eq(parse_long("-9223372036854775808", LONG_MIN, LONG_MAX, &v, &err), 0);
    ck_assert(v == LONG_MIN);
}
END_TEST

START_TEST(unsigned_numbers_never_wrap)
{
    uint64_t v = 0;
    Err err = {{0}};
    ck_assert_int_eq(parse_u64("18446744073709551615", UINT64_MAX, &v, &err), 0);
    ck_assert(v == UINT64_MAX);
    ck_assert_int_eq(parse_u64("18446744073709551616", UINT64_MAX, &v, &err), -1);
    ck_assert_int_eq(parse_u64("-1", UINT64_MAX, &v, &err), -1); /* strtoull: 2^64 - 1 */
    ck_assert_msg(strstr(err.msg, "out of range"), "%s", err.msg);
    ck_assert_int_eq(parse_u64(" -1", UINT64_MAX, &v, &err), -1);
    ck_assert_msg(strstr(err.msg, "not a whole number"), "%s", err.msg);
    ck_assert_int_eq(parse_u64("11", 10, &v, &err), -1);
}
END_TEST

START_TEST(decimal_numbers_are_strict)
{
    double v = 0;
    Err err = {{0}};
    static const struct {
        const char *text;
        double value;
    } good[] = {{"0.8", 0.8}, {"1", 1.0}, {".5", 0.5}, {"5.", 5.0}, {"2.5e-3", 2.5e-3}, {"1E2", 100.0}, {"-0.25", -0.25}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(parse_double(good[i].text, -1e9, 1e9, &v, &err) == 0, "'%s': %s", good[i].text, err.msg);
        ck_assert_msg(v == good[i].value, "'%s' read as %g", good[i].text, v);
    }
    static const char *const bad[] = {"", " 1", "+1", "inf", "nan", "0x1p-1", "1e", "1e+", ".", "1.2.3", "1,5", "e5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(parse_double(bad[i], -1e9, 1e9, &v, &err) == -1, "'%s' accepted", bad[i]);
    ck_assert_int_eq(parse_double("1e999", 0, 1e300, &v, &err), -1); /* overflows to inf */
    ck_assert_int_eq(parse_double("2", 0, 1, &v, &err), -1);
}
END_TEST

START_TEST(sizes_are_exact)
{
    uint64_t b = 0;
    Err err = {{0}};
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {{"0", 0},
                {"4096", 4096},
                {"512KiB", 512u << 10},
                {"4MiB", 4u << 20},
                {"1.5GB", 1500000000u},
                {"1.5GiB", 3u << 29},
                {"80GB", 80000000000u},
                {"2k", 2048},
                {"0.5B", 1}, /* rounded to the nearest byte */
                {"0.0001KiB", 0},
                {"18446744073709551615", UINT64_MAX},
                {"16777215.5TiB", UINT64_MAX - (1ull << 39) + 1}, /* 2^64 - 2^39, exactly */
                {"9007199254740993", 9007199254740993u}}; /* 2^53 + 1: a double would round it */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(parse_size(good[i].text, &b, &err) == 0, "'%s': %s", good[i].text, err.msg);
        ck_assert_msg(b == good[i].bytes, "'%s' read as %llu, not %llu", good[i].text, (unsigned long long)b,
                      (unsigned long long)good[i].bytes);
    }
    static const struct {
        const char *text, *words;
    } bad[] = {{"18446744073709551616", "too large"}, {"16777216TiB", "too large"}, {"16777215.99999999999999TiB", "too large"}, {"1e99MiB", "not a size"},
               {"-5KiB", "not a size"},           {" 4MiB", "not a size"},         {"4 MiB", "unknown unit ' MiB'"},
               {"0x10", "not a size"},             {"1.KiB", "not a size"},         {"", "not a size"},
               {"5EiB", "unknown unit 'EiB'"},    {"1.0000000000000000001GB", "digits after the point"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(parse_size(bad[i].text, &b, &err) == -1, "'%s' accepted", bad[i].text);
        ck_assert_msg(strstr(err.msg, bad[i].words), "'%s': '%s' lacks '%s'", bad[i].text, err.msg, bad[i].words);
    }
}
END_TEST

START_TEST(size_arithmetic_refuses_overflow)
{
    size_t out = 1;
    ck_assert_int_eq(size_mul(SIZE_MAX / 2, 2, &out), 0);
    ck_assert_int_eq(size_mul(SIZE_MAX / 2 + 1, 2, &out), -1);
    ck_assert_int_eq(size_mul(0, SIZE_MAX, &out), 0);
    ck_assert_uint_eq(out, 0);
    ck_assert_int_eq(size_add(SIZE_MAX - 1, 1, &out), 0);
    ck_assert_int_eq(size_add(SIZE_MAX, 1, &out), -1);
}
END_TEST

/* ------------------------------------------------------------ files */

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/kvlab-files-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
}

static void path_in_dir(const char *name, char *out)
{
    ck_assert(snprintf(out, PATH_MAX, "%s/%s", dir, name) < PATH_MAX);
}

static void put(const char *name, const char *text, mode_t mode)
{
    char path[PATH_MAX];
    path_in_dir(name, path);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    ck_assert(chmod(path, mode) == 0);
}

static char *get(const char *name)
{
    char path[PATH_MAX];
    path_in_dir(name, path);
    return access(path, F_OK) == 0 ? test_slurp(path) : NULL;
}

/* Entries in the folder, . and .. excluded. */
static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[PATH_MAX];
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            path_in_dir(e->d_name, path);
            unlink(path);
        }
    }
    closedir(d);
    rmdir(dir);
}

START_TEST(input_files_must_be_regular)
{
    make_dir();
    char fifo[PATH_MAX], file[PATH_MAX];
    path_in_dir("fifo", fifo);
    ck_assert(mkfifo(fifo, 0600) == 0);
    put("small", "0123456789", 0644);
    path_in_dir("small", file);
    size_t size = 0;
    Err err = {{0}};
    ck_assert_int_eq(infile_open(fifo, UINT64_MAX, &size, &err), -1); /* and it returns: no writer needed */
    ck_assert_msg(strstr(err.msg, "is not a regular file (a FIFO)"), "%s", err.msg);
    ck_assert_int_eq(infile_open("/dev/zero", UINT64_MAX, &size, &err), -1);
    ck_assert_msg(strstr(err.msg, "/dev/zero is not a regular file (a character device)"), "%s", err.msg);
    ck_assert_int_eq(infile_open(dir, UINT64_MAX, &size, &err), -1);
    ck_assert_msg(strstr(err.msg, "(a directory)"), "%s", err.msg);
    ck_assert_int_eq(infile_open(file, 9, &size, &err), -1);
    ck_assert_msg(strstr(err.msg, "10 bytes is more than the limit of 9 bytes"), "%s", err.msg);
    int fd = infile_open(file, 10, &size, &err);
    ck_assert_msg(fd >= 0, "%s", err.msg);
    ck_assert_uint_eq(size, 10);
    char buf[12];
    ck_assert_int_eq(infile_read_exact(fd, buf, 10, file, &err), 0);
    ck_assert(memcmp(buf, "0123456789", 10) == 0);
    ck_assert_int_eq(infile_read_exact(fd, buf, 1, file, &err), -1);
    ck_assert_msg(strstr(err.msg, "shrank"), "%s", err.msg);
    close(fd);
    remove_dir();
}
END_TEST

START_TEST(output_replaces_whole_file)
{
    make_dir();
    put("out.json", "old\n", 0640);
    char path[PATH_MAX];
    path_in_dir("out.json", path);
    OutFile o;
    Err err = {{0}};
    ck_assert_int_eq(outfile_check("--json", path, &err), 0);
    ck_assert_int_eq(entries(), 1); /* the check leaves nothing behind */
    ck_assert_msg(outfile_open(&o, "--json", path, &err) == 0, "%s", err.msg);
    fputs("new", o.f);
    char *mid = get("out.json");
    ck_assert_str_eq(mid, "old\n"); /* untouched until the commit */
    free(mid);
    ck_assert_int_eq(entries(), 2);
    ck_assert_msg(outfile_commit(&o, &err) == 0, "%s", err.msg);
    char *now = get("out.json");
    ck_assert_str_eq(now, "new");
    free(now);
    ck_assert_int_eq(entries(), 1);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640); /* the old file's mode */
    /* abort: nothing changes */
    ck_assert(outfile_open(&o, NULL, path, &err) == 0);
    fputs("never", o.f);
    outfile_abort(&o);
    now = get("out.json");
    ck_assert_str_eq(now, "new");
    free(now);
    ck_assert_int_eq(entries(), 1);
    /* a link is followed: its target is replaced, the link stays */
    char link[PATH_MAX];
    path_in_dir("link.json", link);
    ck_assert(symlink(path, link) == 0);
    ck_assert(outfile_write_all("--out", link, "via link", 8, &err) == 0);
    struct stat lst;
    ck_assert(lstat(link, &lst) == 0 && S_ISLNK(lst.st_mode));
    now = get("out.json");
    ck_assert_str_eq(now, "via link");
    free(now);
    remove_dir();
}
END_TEST

START_TEST(output_refuses_what_is_not_a_file)
{
    make_dir();
    char fifo[PATH_MAX], missing[PATH_MAX];
    path_in_dir("fifo", fifo);
    ck_assert(mkfifo(fifo, 0600) == 0);
    path_in_dir("no/such/folder/x.json", missing);
    Err err = {{0}};
    ck_assert_int_eq(outfile_check("--out", fifo, &err), -1);
    ck_assert_msg(strstr(err.msg, "--out ") && strstr(err.msg, "cannot create: it is a FIFO, not a regular file"),
                  "%s", err.msg);
    ck_assert_int_eq(outfile_check("--json", "/dev/full", &err), -1);
    ck_assert_str_eq(err.msg, "--json /dev/full: cannot create: it is a character device, not a regular file");
    ck_assert_int_eq(outfile_check(NULL, dir, &err), -1);
    ck_assert_msg(strstr(err.msg, "it is a directory"), "%s", err.msg);
    ck_assert_int_eq(outfile_check("--out", missing, &err), -1);
    ck_assert_msg(strstr(err.msg, "No such file or directory"), "%s", err.msg);
    ck_assert_int_eq(outfile_check("--out", "", &err), -1);
    ck_assert_int_eq(entries(), 1);
    remove_dir();
}
END_TEST

/* In a child with a 16-byte file size limit (SIGXFSZ ignored, so writes
 * fail with EFBIG): the commit fails, says why, and leaves the old file. */
START_TEST(output_write_error_keeps_old_file)
{
    make_dir();
    put("out.json", "old\n", 0644);
    char path[PATH_MAX];
    path_in_dir("out.json", path);
    int pipefd[2];
    ck_assert(pipe(pipefd) == 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {16, 16};
        setrlimit(RLIMIT_FSIZE, &lim);
        OutFile o;
        Err err = {{0}};
        int rc = outfile_open(&o, "--out", path, &err);
        if (rc == 0) {
            for (int i = 0; i < 1000; i++)
                fputs("a line that is longer than sixteen bytes\n", o.f);
            rc = outfile_commit(&o, &err);
        }
        ssize_t ignored = write(pipefd[1], err.msg, strlen(err.msg) + 1);
        (void)ignored;
        _exit(rc == 0 ? 0 : 1);
    }
    close(pipefd[1]);
    char msg[600] = "";
    ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = '\0';
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "the commit did not fail");
    ck_assert_msg(strstr(msg, "--out ") && strstr(msg, "cannot write: File too large"), "%s", msg);
    char *old = get("out.json");
    ck_assert_str_eq(old, "old\n");
    free(old);
    ck_assert_int_eq(entries(), 1);
    remove_dir();
}
END_TEST

/* A SIGTERM while the temporary file exists removes it; the old file stays. */
START_TEST(output_signal_removes_temporary_file)
{
    make_dir();
    put("out.json", "old\n", 0644);
    char path[PATH_MAX];
    path_in_dir("out.json", path);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        /* As in a program: Check's runner has its own SIGTERM handler,
         * which outfile.c leaves alone (it never overrides a program's). */
        signal(SIGTERM, SIG_DFL);
        OutFile o;
        Err err = {{0}};
        if (outfile_open(&o, "--out", path, &err) != 0)
            _exit(2);
        fputs("half of it", o.f);
        fflush(o.f);
        raise(SIGTERM);
        _exit(3); /* not reached */
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "the child did not die of SIGTERM");
    char *old = get("out.json");
    ck_assert_str_eq(old, "old\n");
    free(old);
    ck_assert_int_eq(entries(), 1);
    remove_dir();
}
END_TEST

Suite *suite_files(void)
{
    Suite *s = suite_create("files");
    TCase *numbers = tcase_create("numbers");
    tcase_add_test(numbers, whole_numbers_are_strict);
    tcase_add_test(numbers, unsigned_numbers_never_wrap);
    tcase_add_test(numbers, decimal_numbers_are_strict);
    tcase_add_test(numbers, sizes_are_exact);
    tcase_add_test(numbers, size_arithmetic_refuses_overflow);
    suite_add_tcase(s, numbers);
    TCase *files = tcase_create("files");
    tcase_add_test(files, input_files_must_be_regular);
    tcase_add_test(files, output_replaces_whole_file);
    tcase_add_test(files, output_refuses_what_is_not_a_file);
    tcase_add_test(files, output_write_error_keeps_old_file);
    tcase_add_test(files, output_signal_removes_temporary_file);
    suite_add_tcase(s, files);
    return s;
}

REGISTER_SUITE(files)
