#include "helpers.h"

#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "assets.h"
#include "mem.h"
#include "synth.h"

const char *test_shared_file(const char *name)
{
    /* A few rotating buffers, so that a test can hold several paths. */
    static char paths[4][PATH_MAX];
    static int next;
    char *path = paths[next++ % 4];
    /* Only ../shared (and the same beside the project root): a models/
     * download must not stand in for the shared golden files. */
    const char *dirs[] = {"../shared/models", "../../shared/models"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, PATH_MAX, "%s/%s", dirs[i], name);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

void test_skip(const char *test, const char *why)
{
    fprintf(stderr, "SKIP: %s: %s\n", test, why);
}

static char *read_all(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            buf = realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int test_run_program(const char *const *argv, ProgramResult *r)
{
    memset(r, 0, sizeof *r);
    const char *build = getenv("KVLAB_BUILD");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", build ? build : "build", argv[0]);
    char out_path[] = "/tmp/kvlab-out-XXXXXX", err_path[] = "/tmp/kvlab-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    if (out_fd < 0 || err_fd < 0)
        return -1;
    unlink(out_path);
    unlink(err_path);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        execv(path, (char *const *)argv);
        fprintf(stderr, "cannot run %s\n", path);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    lseek(out_fd, 0, SEEK_SET);
    lseek(err_fd, 0, SEEK_SET);
    r->out = read_all(out_fd, &r->out_len);
    r->err = read_all(err_fd, NULL);
    close(out_fd);
    close(err_fd);
    return 0;
}

void test_result_free(ProgramResult *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

int test_count_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        if (*p == '\n')
            n++;
    size_t len = strlen(s);
    if (len > 0 && s[len - 1] != '\n')
        n++;
    return n;
}

void test_write_temp(const void *data, size_t n, char *out)
{
    snprintf(out, PATH_MAX, "/tmp/kvlab-test-XXXXXX");
    int fd = mkstemp(out);
    ck_assert_msg(fd >= 0, "cannot create a temporary file");
    ck_assert_msg(write(fd, data, n) == (ssize_t)n, "cannot write a temporary file");
    close(fd);
}

void test_write_synthetic(const ModelConfig *cfg, unsigned long long seed, int ak42, int shared, char *model_out,
                          char *tok_out)
{
    SynthSpec spec = {.cfg = *cfg, .shared_classifier = shared, .ak42 = ak42, .seed = seed};
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &image, &bytes, &err) == 0, "synth_model_image: %s", err.msg);
    test_write_temp(image, bytes, model_out);
    mem_free(image);
    ck_assert_msg(synth_tokenizer_image(cfg->vocab_size, &image, &bytes, &err) == 0, "synth_tokenizer_image: %s",
                  err.msg);
    test_write_temp(image, bytes, tok_out);
    mem_free(image);
}
