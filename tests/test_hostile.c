/* Hostile input: every program on inputs meant to hang it, overflow it,
 * exhaust it or leave half-written files behind (issue 13).
 *
 * Each case below is one run of one program, with the expectation written
 * down next to it. There are two kinds of expectation:
 *
 * - REFUSED: exit status 1, stderr is exactly one line "PROGRAM: error: ..."
 *   containing the given words, stdout is empty, and no work was done.
 * - WRITE_FAILED: the run happens, then writing an output fails (the file
 *   size limit, RLIMIT_FSIZE, is hit): exit status 1, the error is the last
 *   line of stderr and the only one with "error:", it names the file and
 *   the reason, the memory table is not printed, the file that was there
 *   before is untouched, and no temporary file is left beside it.
 * - RUNS: a documented success (exit status 0), with the check the case
 *   names (NaN weights do not crash, CRLF is read as LF, ...).
 *
 * Every case has a time limit; a program still running then is killed and
 * the case fails as a hang. The suite runs on the normal build (make test)
 * and on the ASan+UBSan build (make test-sanitize). Files are made in a
 * fresh temporary folder by the project's own synthetic model code. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "forward.h"
#include "helpers.h"
#include "mem.h"
#include "requests.h"
#if __has_include("gguf.h")
#include "gguf.h"
#define HAVE_GGUF 1 /* the GGUF reader is in this tree (branch gguf) */
#endif
#if __has_include("bpe.h")
#include "fuzz/bpe_seed.h" /* the BPE fuzz target's small tokenizer, as GGUF metadata */
#define HAVE_BPE 1
#endif

#include "suites.h"
#include "synth.h"

/* vocab 400 leaves room for the synthetic tokenizer's 354 fixed tokens. */
static const ModelConfig SHAPE = {16, 32, 1, 2, 1, 400, 32};

/* Seconds before a run counts as a hang (the sanitizer build is slow). */
#define CASE_SECONDS 60

typedef enum { REFUSED, WRITE_FAILED, RUNS } Expect;

/* What to check besides the exit status and the lines. */
enum {
    FSIZE_LIMIT = 1 << 0,  /* run with a 1 KiB file size limit, SIGXFSZ ignored */
    OLD_KEPT = 1 << 1,     /* @OLD still holds "old" and nothing else is left in @OUTDIR */
    JSON_UTF8 = 1 << 2,    /* @OUTDIR/out.jsonl exists and is valid UTF-8 with U+FFFD */
    NO_CR = 1 << 3,        /* @OUTDIR/out.jsonl has no \r in any prompt */
    REPLACED = 1 << 4,     /* @OLD was replaced (not "old"), kept mode 0600, nothing else left */
    STDOUT_TEXT = 1 << 5,  /* a RUNS case of a single-stream chapter: stdout is text ending in a newline */
    NOTHING_LEFT = 1 << 6, /* @OUTDIR is empty afterwards: nothing was written */
    NO_STDOUT = 1 << 7,    /* nothing on stdout (kvsim's table comes only after its JSON) */
    REJECTED_LONG = 1 << 8, /* @OUTDIR/out.jsonl: request 1 rejected for its bytes, requests 0 and 2 served */
    HUGE_STACK = 1 << 9,   /* run with a 1 TB stack limit: no thread of default attributes can start */
};

typedef struct {
    const char *what;     /* the hostile input */
    Expect expect;
    const char *words;    /* REFUSED, WRITE_FAILED: words the error line contains */
    unsigned checks;
    const char *argv[20]; /* the program under $KVLAB_BUILD and its arguments; @NAME: a fixture */
} HostileCase;

/* ------------------------------------------------------------ fixtures */

static char dir[64];      /* the fixture folder */
static char outdir[128];  /* a fresh folder for outputs, per case */

/* snprintf into a path buffer, failing the test rather than cutting it. */
#define PATH_PRINTF(out, ...) ck_assert_msg(snprintf(out, PATH_MAX, __VA_ARGS__) < PATH_MAX, "path too long")

static void fixture_path(const char *name, char *out)
{
    PATH_PRINTF(out, "%s/%s", dir, name);
}

static void write_file(const char *name, const void *data, size_t n)
{
    char path[PATH_MAX];
    fixture_path(name, path);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

static void write_text(const char *name, const char *text)
{
    write_file(name, text, strlen(text));
}

/* A checkpoint image whose header field @p field (0 dim .. 6 seq_len) is
 * replaced by @p value. */
static void write_header_variant(const unsigned char *image, size_t bytes, const char *name, int field,
                                 int32_t value)
{
    unsigned char *copy = malloc(bytes);
    memcpy(copy, image, bytes);
    memcpy(copy + 4 * field, &value, 4);
    write_file(name, copy, bytes);
    free(copy);
}

/* A checkpoint whose every weight is @p value (NaN, Inf). */
static void write_weights_all(const unsigned char *image, size_t bytes, const char *name, float value)
{
    unsigned char *copy = malloc(bytes);
    memcpy(copy, image, 28);
    for (size_t at = 28; at + 4 <= bytes; at += 4)
        memcpy(copy + at, &value, 4);
    write_file(name, copy, bytes);
    free(copy);
}

/* n lines of "1\tH", and the text's length. */
static char *many_requests(size_t n, size_t *len)
{
    char *text = malloc(4 * n + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(text + 4 * i, "1\tH\n", 4);
    text[4 * n] = '\0';
    *len = 4 * n;
    return text;
}

static void make_checkpoints(void)
{
    SynthSpec spec = {.cfg = SHAPE, .shared_classifier = 1, .ak42 = 0, .seed = 13};
    void *image, *tok;
    size_t bytes, tok_bytes;
    Err err = {{0}};
    ck_assert_msg(synth_model_image(&spec, &image, &bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(synth_tokenizer_image(SHAPE.vocab_size, &tok, &tok_bytes, &err) == 0, "%s", err.msg);
    write_file("model.bin", image, bytes);
    write_file("tok.bin", tok, tok_bytes);
    write_file("model-truncated.bin", image, bytes - 4);
    write_file("model-oversized.bin", image, bytes); /* then one byte more */
    char path[PATH_MAX];
    fixture_path("model-oversized.bin", path);
    FILE *f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    write_file("model-empty.bin", image, 0);
    write_file("model-header-only.bin", image, 28);
    write_header_variant(image, bytes, "model-dim-huge.bin", 0, INT32_MAX);
    write_header_variant(image, bytes, "model-dim-negative.bin", 0, -16);
    write_header_variant(image, bytes, "model-layers-zero.bin", 2, 0);
    write_header_variant(image, bytes, "model-layers-huge.bin", 2, 1 << 30);
    write_header_variant(image, bytes, "model-heads-odd.bin", 3, 3);
    write_header_variant(image, bytes, "model-kv-heads-more.bin", 4, 4);
    write_header_variant(image, bytes, "model-vocab-min.bin", 5, INT32_MIN);
    write_header_variant(image, bytes, "model-seq-len-huge.bin", 6, INT32_MAX);
    /* every size at its largest plausible value: the product is checked, not wrapped */
    unsigned char *big = malloc(bytes);
    memcpy(big, image, bytes);
    const int32_t largest[7] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 20, 1 << 20};
    memcpy(big, largest, sizeof largest);
    write_file("model-all-largest.bin", big, bytes);
    free(big);
    write_weights_all(image, bytes, "model-nan.bin", NAN);
    write_weights_all(image, bytes, "model-inf.bin", INFINITY);
    write_weights_all(image, bytes, "model-minus-inf.bin", -INFINITY);
    write_file("tok-truncated.bin", tok, tok_bytes / 2);
    write_file("tok-empty.bin", tok, 0);
    unsigned char *bad_tok = malloc(tok_bytes);
    memcpy(bad_tok, tok, tok_bytes);
    const int32_t absurd = 1 << 30; /* max_token_length */
    memcpy(bad_tok, &absurd, 4);
    write_file("tok-absurd-length.bin", bad_tok, tok_bytes);
    free(bad_tok);
    mem_free(image);
    mem_free(tok);
}

static void make_request_files(void)
{
    write_text("req.tsv", "4\tOnce upon a time\n3\tThe cat\n");
    write_text("req-crlf.tsv", "4\tOnce upon a time\r\n# comment\r\n\r\n3\tThe cat\r\n");
    write_file("req-nul.tsv", "4\tOnce\0upon\n", 12);
    write_text("req-utf8.tsv", "4\tcaf\xc3\xa9 \xff\xfe bad \xc0\x80 bytes \xed\xa0\x80\n3\t\x80\x80\x80\n");
    write_text("req-space.tsv", " 4\tleading space\n");
    write_text("req-plus.tsv", "+4\tplus sign\n");
    write_text("req-garbage.tsv", "4x\ttrailing garbage\n");
    write_text("req-huge-number.tsv", "99999999999999999999\thuge\n");
    write_text("req-empty.tsv", "");
    write_text("force.txt", "432 383\n269 261\n"); /* --kv-force ids for req.tsv's two requests */
    write_text("req-comments.tsv", "# nothing\n\n   \n");
    write_text("req-no-tab.tsv", "4 no tab\n");
    write_text("req-arrival-back.tsv", "@2.5s\t4\tlater\n@1s\t4\tearlier\n");
    write_text("req-arrival-mixed.tsv", "@1s\t4\tseconds\n@7\t4\tsteps\n");
    write_text("req-arrival-nan.tsv", "@nans\t4\tnot a number\n");
    /* a line one byte over the limit */
    char *line = malloc(REQUEST_LINE_MAX_BYTES + 4);
    memcpy(line, "1\t", 2);
    memset(line + 2, 'a', REQUEST_LINE_MAX_BYTES - 1);
    line[REQUEST_LINE_MAX_BYTES + 1] = '\n';
    write_file("req-long-line.tsv", line, REQUEST_LINE_MAX_BYTES + 2);
    free(line);
    /* one request more than the limit, and exactly the limit */
    size_t len;
    char *text = many_requests(REQUEST_FILE_MAX_REQUESTS + 1, &len);
    write_file("req-too-many.tsv", text, len);
    write_file("req-most.tsv", text, len - 4);
    free(text);
    /* a file over the size limit: sparse, so it costs no disk */
    char path[PATH_MAX];
    fixture_path("req-too-big.tsv", path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(fd >= 0 && ftruncate(fd, (off_t)REQUEST_FILE_MAX_BYTES + 1) == 0);
    close(fd);
}

static void make_fixtures(void)
{
    snprintf(dir, sizeof dir, "/tmp/kvlab-hostile-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    char path[PATH_MAX];
    fixture_path("fifo", path);
    ck_assert(mkfifo(path, 0600) == 0);
    fixture_path("folder", path);
    ck_assert(mkdir(path, 0700) == 0);
    make_checkpoints();
    make_request_files();
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(path);
}

/* ------------------------------------------------------------ running */

typedef struct {
    int status; /* exit status, 128 + signal, or -1 for a hang */
    char *out, *err;
    double seconds;
} Run;

/* A growing buffer for what a program prints. */
typedef struct {
    char *data;
    size_t len, cap;
} Text;

static void text_append(Text *t, const char *p, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = 2 * (t->len + n + 1);
        t->data = realloc(t->data, t->cap);
        ck_assert(t->data);
    }
    memcpy(t->data + t->len, p, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Reads both pipes until the program closes them or the time is up.
 * Pipes, not files: a file size limit on the program must not cut what it
 * says. Returns 0, or -1 when the time ran out. */
static int drain(int out_fd, int err_fd, Text *out, Text *err, const struct timespec *t0)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    Text *texts[2] = {out, err};
    int open_fds = 2;
    while (open_fds > 0) {
        if (seconds_since(t0) > CASE_SECONDS) {
            for (int i = 0; i < 2; i++)
                if (fds[i].fd >= 0)
                    close(fds[i].fd);
            return -1;
        }
        if (poll(fds, 2, 100) < 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[65536];
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got > 0) {
                text_append(texts[i], buf, (size_t)got);
            } else {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    return 0;
}

/* @NAME or @NAME/rest: NAME is a fixture file (or OUTDIR, the case's
 * output folder, or OLD, a file there that holds "old"). */
/* A 100 KB prompt (the most one argument may be is 128 KiB on Linux). */
static const char *long_prompt(void)
{
    static char text[100 * 1000 + 1];
    if (!text[0])
        for (size_t i = 0; i < sizeof text - 1; i++)
            text[i] = "Once upon a time there was a cat. "[i % 34];
    return text;
}

static const char *expand(const char *arg, char *buf)
{
    if (strcmp(arg, "@LONG_PROMPT") == 0)
        return long_prompt();
    if (arg[0] != '@')
        return arg;
    const char *slash = strchr(arg, '/');
    size_t n = slash ? (size_t)(slash - arg - 1) : strlen(arg + 1);
    if (n == 6 && strncmp(arg + 1, "OUTDIR", 6) == 0)
        PATH_PRINTF(buf, "%s%s", outdir, slash ? slash : "");
    else if (n == 3 && strncmp(arg + 1, "OLD", 3) == 0)
        PATH_PRINTF(buf, "%s/old.json", outdir);
    else
        PATH_PRINTF(buf, "%s/%.*s%s", dir, (int)n, arg + 1, slash ? slash : "");
    return buf;
}

static void run_case(const HostileCase *c, Run *r)
{
    static char bufs[20][PATH_MAX];
    const char *argv[21];
    int argc = 0;
    for (; c->argv[argc]; argc++)
        argv[argc] = expand(c->argv[argc], bufs[argc]);
    argv[argc] = NULL;
    const char *build = getenv("KVLAB_BUILD");
    char program[PATH_MAX];
    PATH_PRINTF(program, "%s/%s", build ? build : "build", argv[0]);
    int out_pipe[2], err_pipe[2];
    ck_assert(pipe(out_pipe) == 0 && pipe(err_pipe) == 0);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        close(out_pipe[0]), close(err_pipe[0]), close(out_pipe[1]), close(err_pipe[1]);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        if (c->checks & FSIZE_LIMIT) {
            /* A write past the limit fails with EFBIG (instead of killing
             * the program with SIGXFSZ): a disk that fills up mid-write. */
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim = {1024, 1024};
            setrlimit(RLIMIT_FSIZE, &lim);
        }
        if (c->checks & HUGE_STACK) {
            struct rlimit lim;
            getrlimit(RLIMIT_STACK, &lim);
            lim.rlim_cur = lim.rlim_max != RLIM_INFINITY && lim.rlim_max < (1ull << 40) ? lim.rlim_max : (1ull << 40);
            setrlimit(RLIMIT_STACK, &lim);
        }
        execv(program, (char *const *)argv);
        fprintf(stderr, "cannot run %s\n", program);
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    Text out = {0}, err = {0};
    text_append(&out, "", 0);
    text_append(&err, "", 0);
    int hung = drain(out_pipe[0], err_pipe[0], &out, &err, &t0);
    int status = 0;
    while (!hung && waitpid(pid, &status, WNOHANG) == 0) {
        if (seconds_since(&t0) > CASE_SECONDS)
            hung = 1;
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
    }
    if (hung) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        r->status = -1;
    } else {
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    r->seconds = seconds_since(&t0);
    r->out = out.data;
    r->err = err.data;
}

/* ------------------------------------------------------------ checking */

static int count_lines_with(const char *text, const char *word)
{
    int n = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = strndup(line, len);
        n += strstr(copy, word) != NULL;
        free(copy);
        line += len + (end != NULL);
    }
    return n;
}

static const char *last_line(const char *text, char *buf, size_t n)
{
    size_t len = strlen(text);
    while (len > 0 && text[len - 1] == '\n')
        len--;
    size_t start = len;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    snprintf(buf, n, "%.*s", (int)(len - start), text + start);
    return buf;
}

/* Files in the case's output folder other than @p keep. */
static int stray_files(const char *keep)
{
    DIR *d = opendir(outdir);
    ck_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!keep || strcmp(e->d_name, keep)))
            n++;
    closedir(d);
    return n;
}

static char *read_output(const char *name)
{
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fclose(f);
    return test_slurp(path);
}

/* Valid UTF-8 (RFC 3629), checked here independently of the JSON writer. */
static int is_valid_utf8(const unsigned char *s)
{
    while (*s) {
        int n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
        if (n == 0 || (n == 2 && s[0] < 0xC2) || (n == 4 && s[0] > 0xF4))
            return 0;
        for (int i = 1; i < n; i++)
            if ((s[i] & 0xC0) != 0x80)
                return 0;
        if ((n == 3 && s[0] == 0xE0 && s[1] < 0xA0) || (n == 3 && s[0] == 0xED && s[1] > 0x9F) ||
            (n == 4 && s[0] == 0xF0 && s[1] < 0x90) || (n == 4 && s[0] == 0xF4 && s[1] > 0x8F))
            return 0;
        s += n;
    }
    return 1;
}

static void check_files(const HostileCase *c)
{
    if (c->checks & NOTHING_LEFT)
        ck_assert_msg(stray_files(NULL) == 0, "%s: a file was left in the output folder", c->what);
    if (c->checks & OLD_KEPT) {
        char *old = read_output("old.json");
        ck_assert_msg(old && strcmp(old, "old\n") == 0, "%s: the previous file changed: '%.60s'", c->what,
                      old ? old : "(gone)");
        free(old);
        ck_assert_msg(stray_files("old.json") == 0, "%s: a temporary file was left beside the output", c->what);
    }
    if (c->checks & REPLACED) {
        char *now = read_output("old.json");
        ck_assert_msg(now && strcmp(now, "old\n") != 0 && now[0], "%s: the file was not replaced", c->what);
        free(now);
        char path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/old.json", outdir);
        struct stat st;
        ck_assert(stat(path, &st) == 0);
        ck_assert_msg((st.st_mode & 0777) == 0600, "%s: mode %o, not the old file's 600", c->what,
                      (unsigned)(st.st_mode & 0777));
        ck_assert_msg(stray_files("old.json") == 0, "%s: a temporary file was left", c->what);
    }
    if (c->checks & REJECTED_LONG) {
        char *jsonl = read_output("out.jsonl");
        ck_assert_msg(jsonl != NULL, "%s: no --out file", c->what);
        const char *second = strchr(jsonl, '\n');
        ck_assert_msg(second && test_count_lines(jsonl) == 3, "%s: expected 3 JSON lines", c->what);
        ck_assert_msg(strstr(second, "\"finish\":\"rejected\"") && strstr(second, "60000 bytes, more than the"),
                      "%s: request 1 was not rejected for its length:\n%.300s", c->what, second);
        ck_assert_msg(strstr(jsonl, "\"finish\":\"rejected\"") == strstr(second, "\"finish\":\"rejected\""),
                      "%s: request 0 was rejected too", c->what);
        free(jsonl);
    }
    if (c->checks & (JSON_UTF8 | NO_CR)) {
        char *jsonl = read_output("out.jsonl");
        ck_assert_msg(jsonl != NULL, "%s: no --out file", c->what);
        if (c->checks & JSON_UTF8)
            ck_assert_msg(is_valid_utf8((const unsigned char *)jsonl) && strstr(jsonl, "\\ufffd"),
                          "%s: --out is not valid UTF-8 with U+FFFD for the bad bytes", c->what);
        if (c->checks & NO_CR)
            ck_assert_msg(!strstr(jsonl, "\\r") && strstr(jsonl, "\"prompt\":\"Once upon a time\""),
                          "%s: a CR was kept in a prompt:\n%s", c->what, jsonl);
        free(jsonl);
    }
}

static void check_case(const HostileCase *c, const Run *r)
{
    const char *program = c->argv[0];
    char prefix[64], line[1024];
    snprintf(prefix, sizeof prefix, "%s: error: ", program);
    ck_assert_msg(r->status != -1, "%s: %s hung (killed after %d s)", c->what, program, CASE_SECONDS);
    switch (c->expect) {
    case REFUSED:
        ck_assert_msg(r->status == 1 && test_count_lines(r->err) == 1 && strncmp(r->err, prefix, strlen(prefix)) == 0 &&
                          strstr(r->err, c->words) && r->out[0] == '\0',
                      "%s: expected exit 1, one line '%s...%s' and no stdout; got exit %d, stdout %zu bytes, "
                      "stderr:\n%s",
                      c->what, prefix, c->words, r->status, strlen(r->out), r->err);
        break;
    case WRITE_FAILED:
        last_line(r->err, line, sizeof line);
        ck_assert_msg(r->status == 1 && strncmp(line, prefix, strlen(prefix)) == 0 && strstr(line, c->words) &&
                          count_lines_with(r->err, "error:") == 1 && !strstr(r->err, "== memory"),
                      "%s: expected exit 1, the last line '%s...%s', no other error and no memory table; got exit "
                      "%d, stderr:\n%s",
                      c->what, prefix, c->words, r->status, r->err);
        break;
    case RUNS:
        ck_assert_msg(r->status == 0 && count_lines_with(r->err, "error") == 0,
                      "%s: expected a successful run; got exit %d, stderr:\n%s", c->what, r->status, r->err);
        if (c->checks & STDOUT_TEXT)
            ck_assert_msg(strlen(r->out) > 0 && r->out[strlen(r->out) - 1] == '\n', "%s: stdout '%s'", c->what,
                          r->out);
        break;
    }
    if (c->checks & NO_STDOUT)
        ck_assert_msg(r->out[0] == '\0', "%s: stdout is not empty:\n%s", c->what, r->out);
    check_files(c);
}

/* In the handout the chapters run the untouched exercises, which say
 * "lab: TODO in FUNCTION: ..." once per unfinished function: not part of
 * what the case checks. */
static void drop_lab_todo_lines(char *text)
{
    char *out = text;
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (strncmp(line, "lab: TODO in ", 13) != 0) {
            memmove(out, line, len);
            out += len;
        }
        line += len;
    }
    *out = '\0';
}

/* A case that needs a chapter (or the simulator, or the demo, which run
 * the chapters' code) to run to the end needs the answers. */
static int needs_answers(const HostileCase *c)
{
    const char *p = c->argv[0];
    return c->expect != REFUSED && (strncmp(p, "ch", 2) == 0 || strcmp(p, "kvsim") == 0 || strcmp(p, "demo") == 0);
}

/* Runs every case of a table, each with a fresh output folder; returns how
 * many ran. */
static int run_table(const HostileCase *cases, size_t n)
{
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (needs_answers(&cases[i]) && !test_lab_answers()) {
            test_skip(cases[i].what, "runs a chapter to the end, and this build has the exercises, not the answers");
            continue;
        }
        ran++;
        ck_assert(snprintf(outdir, sizeof outdir, "%s/out-XXXXXX", dir) < (int)sizeof outdir);
        ck_assert(mkdtemp(outdir) != NULL);
        if (cases[i].checks & (OLD_KEPT | REPLACED)) {
            char path[PATH_MAX * 2];
            snprintf(path, sizeof path, "%s/old.json", outdir);
            FILE *f = fopen(path, "w");
            ck_assert(f && fputs("old\n", f) >= 0 && fclose(f) == 0);
            ck_assert(chmod(path, 0600) == 0);
        }
        Run r;
        run_case(&cases[i], &r);
        if (!test_lab_answers())
            drop_lab_todo_lines(r.err);
        check_case(&cases[i], &r);
        free(r.out);
        free(r.err);
        remove_tree(outdir);
    }
    return ran;
}

/* One table on fresh fixtures, and one line saying how many cases passed. */
#define RUN_TABLE(t)                                                                       \
    do {                                                                                   \
        make_fixtures();                                                                   \
        int n_passed = run_table(t, sizeof(t) / sizeof((t)[0]));                           \
        fprintf(stderr, "hostile: %s: %d cases passed\n", #t, n_passed);                   \
        remove_tree(dir);                                                                  \
    } while (0)

/* ------------------------------------------------------------ the cases */

#define MT "--model", "@model.bin", "--tokenizer", "@tok.bin"

static const HostileCase INPUT_FILES[] = {
    {"a FIFO as --requests (ch03)", REFUSED, "is not a regular file (a FIFO)", 0,
     {"ch03-batching", MT, "--requests", "@fifo"}},
    {"a FIFO as --requests (ch04)", REFUSED, "is not a regular file (a FIFO)", 0,
     {"ch04-paged", MT, "--requests", "@fifo"}},
    {"a FIFO as --requests (demo)", REFUSED, "is not a regular file (a FIFO)", 0,
     {"demo", MT, "--requests", "@fifo", "--out", "@OUTDIR"}},
    {"/dev/zero as --requests", REFUSED, "is not a regular file (a character device)", 0,
     {"ch03-batching", MT, "--requests", "/dev/zero"}},
    {"a folder as --requests", REFUSED, "is not a regular file (a directory)", 0,
     {"ch04-paged", MT, "--requests", "@folder"}},
    {"a FIFO as --model", REFUSED, "is not a regular file (a FIFO)", 0,
     {"ch01-naive", "--model", "@fifo", "--tokenizer", "@tok.bin"}},
    {"/dev/zero as --model", REFUSED, "is not a regular file (a character device)", 0,
     {"ch02-kvcache", "--model", "/dev/zero", "--tokenizer", "@tok.bin"}},
    {"a FIFO as --tokenizer", REFUSED, "is not a regular file (a FIFO)", 0,
     {"ch02-kvcache", "--model", "@model.bin", "--tokenizer", "@fifo"}},
    {"/dev/zero as --tokenizer", REFUSED, "is not a regular file (a character device)", 0,
     {"ch04-paged", "--model", "@model.bin", "--tokenizer", "/dev/zero", "--requests", "@req.tsv"}},
    {"a FIFO as kvcalc --model", REFUSED, "is not a regular file (a FIFO)", 0, {"kvcalc", "--model", "@fifo"}},
    {"a request file over the size limit (16 MiB + 1)", REFUSED, "more than the limit of 16777216 bytes", 0,
     {"ch03-batching", MT, "--requests", "@req-too-big.tsv"}},
    {"a request line over the limit (64 KiB + 1)", REFUSED, "the line is 65537 bytes, more than the limit", 0,
     {"ch04-paged", MT, "--requests", "@req-long-line.tsv"}},
    {"more requests than the limit (1,048,577 lines)", REFUSED, "more than 1048576 requests", 0,
     {"ch03-batching", MT, "--requests", "@req-too-many.tsv"}},
    {"1,048,576 requests x --n 256 (parsed in linear time, then the bookkeeping is refused)", REFUSED,
     "268435456 requests (1048576 lines x --n 256) need", 0,
     {"ch04-paged", MT, "--requests", "@req-most.tsv", "--n", "256", "--temperature", "1"}},
    {"a NUL byte in a request file", REFUSED, "contains a NUL byte", 0,
     {"ch03-batching", MT, "--requests", "@req-nul.tsv"}},
    {"max_new_tokens with a leading space", REFUSED, "max_new_tokens ' 4' is not a whole number", 0,
     {"ch04-paged", MT, "--requests", "@req-space.tsv"}},
    {"max_new_tokens with a '+'", REFUSED, "max_new_tokens '+4' is not a whole number", 0,
     {"ch04-paged", MT, "--requests", "@req-plus.tsv"}},
    {"max_new_tokens with trailing garbage", REFUSED, "max_new_tokens '4x' is not a whole number", 0,
     {"ch03-batching", MT, "--requests", "@req-garbage.tsv"}},
    {"max_new_tokens past 2^64", REFUSED, "is not a whole number", 0,
     {"ch03-batching", MT, "--requests", "@req-huge-number.tsv"}},
    {"an empty request file", REFUSED, "no requests", 0, {"ch03-batching", MT, "--requests", "@req-empty.tsv"}},
    {"a request file of comments only", REFUSED, "no requests", 0,
     {"ch04-paged", MT, "--requests", "@req-comments.tsv"}},
    {"a request line without a tab", REFUSED, ":1: expected 'max_new_tokens<TAB>prompt'", 0,
     {"ch04-paged", MT, "--requests", "@req-no-tab.tsv"}},
    {"arrivals out of file order", REFUSED, ":2: arrives before line 1", 0,
     {"ch04-paged", MT, "--requests", "@req-arrival-back.tsv"}},
    {"arrivals in seconds and in steps in one file", REFUSED, ":2: an arrival in steps, after arrivals in seconds", 0,
     {"ch03-batching", MT, "--requests", "@req-arrival-mixed.tsv"}},
    {"an arrival that is not a number", REFUSED, ":1: the arrival '@nans' is not", 0,
     {"ch04-paged", MT, "--requests", "@req-arrival-nan.tsv"}},
    {"a CRLF request file: read as if LF (documented)", RUNS, NULL, NO_CR,
     {"ch04-paged", MT, "--requests", "@req-crlf.tsv", "--out", "@OUTDIR/out.jsonl", "--quiet"}},
    {"invalid UTF-8 in a request file: byte tokens in, U+FFFD in the JSON (documented)", RUNS, NULL, JSON_UTF8,
     {"ch03-batching", MT, "--requests", "@req-utf8.tsv", "--out", "@OUTDIR/out.jsonl", "--quiet"}},
    {"invalid UTF-8 in --prompt: byte tokens (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch02-kvcache", MT, "--steps", "4", "--quiet", "--prompt", "caf\xc3\xa9 \xff\xfe \xc0\x80 \xed\xa0\x80"}},
    {"a prompt that is one lone continuation byte (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch01-naive", MT, "--steps", "2", "--quiet", "--prompt", "\x80"}},
};

static const HostileCase CHECKPOINTS[] = {
    {"a truncated checkpoint", REFUSED, "truncated", 0, {"ch01-naive", "--model", "@model-truncated.bin",
                                                          "--tokenizer", "@tok.bin"}},
    {"a checkpoint one byte too long", REFUSED, "oversized", 0,
     {"ch02-kvcache", "--model", "@model-oversized.bin", "--tokenizer", "@tok.bin"}},
    {"an empty checkpoint", REFUSED, "too short", 0, {"ch03-batching", "--model", "@model-empty.bin",
                                                       "--tokenizer", "@tok.bin", "--requests", "@req.tsv"}},
    {"a checkpoint that is only its header", REFUSED, "truncated", 0,
     {"ch04-paged", "--model", "@model-header-only.bin", "--tokenizer", "@tok.bin", "--requests", "@req.tsv"}},
    {"dim = 2^31 - 1", REFUSED, "dim is 2147483647", 0,
     {"ch01-naive", "--model", "@model-dim-huge.bin", "--tokenizer", "@tok.bin"}},
    {"dim = -16", REFUSED, "dim is -16", 0, {"ch01-naive", "--model", "@model-dim-negative.bin", "--tokenizer",
                                              "@tok.bin"}},
    {"n_layers = 0", REFUSED, "n_layers is 0", 0, {"ch02-kvcache", "--model", "@model-layers-zero.bin",
                                                    "--tokenizer", "@tok.bin"}},
    {"n_layers = 2^30", REFUSED, "n_layers is 1073741824", 0,
     {"ch02-kvcache", "--model", "@model-layers-huge.bin", "--tokenizer", "@tok.bin"}},
    {"n_heads that does not divide dim", REFUSED, "does not divide", 0,
     {"ch03-batching", "--model", "@model-heads-odd.bin", "--tokenizer", "@tok.bin", "--requests", "@req.tsv"}},
    {"more kv heads than heads", REFUSED, "not a multiple", 0,
     {"ch04-paged", "--model", "@model-kv-heads-more.bin", "--tokenizer", "@tok.bin", "--requests", "@req.tsv"}},
    {"vocab_size = INT32_MIN (legacy's negative = unshared, at its extreme)", REFUSED, "vocab_size", 0,
     {"ch01-naive", "--model", "@model-vocab-min.bin", "--tokenizer", "@tok.bin"}},
    {"seq_len = 2^31 - 1", REFUSED, "seq_len is 2147483647", 0,
     {"ch02-kvcache", "--model", "@model-seq-len-huge.bin", "--tokenizer", "@tok.bin"}},
    {"every size at its largest plausible value (the size product is checked)", REFUSED, "model-all-largest.bin: ", 0,
     {"ch01-naive", "--model", "@model-all-largest.bin", "--tokenizer", "@tok.bin"}},
    {"kvcalc --model with an absurd header", REFUSED, "dim is 2147483647", 0,
     {"kvcalc", "--model", "@model-dim-huge.bin"}},
    {"NaN weights, greedy: must not crash (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch02-kvcache", "--model", "@model-nan.bin", "--tokenizer", "@tok.bin", "--steps", "8"}},
    {"NaN weights, sampled with top-p (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch01-naive", "--model", "@model-nan.bin", "--tokenizer", "@tok.bin", "--steps", "8", "--temperature", "1"}},
    {"+Inf weights, sampled without top-p (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch02-kvcache", "--model", "@model-inf.bin", "--tokenizer", "@tok.bin", "--steps", "8", "--temperature",
      "0.7", "--top-p", "1"}},
    {"-Inf weights, served in batches (documented)", RUNS, NULL, 0,
     {"ch03-batching", "--model", "@model-minus-inf.bin", "--tokenizer", "@tok.bin", "--requests", "@req.tsv",
      "--out", "@OUTDIR/out.jsonl"}},
    {"NaN weights, paged, forks sampled (documented)", RUNS, NULL, 0,
     {"ch04-paged", "--model", "@model-nan.bin", "--tokenizer", "@tok.bin", "--requests", "@req.tsv", "--n", "3",
      "--temperature", "1"}},
    {"a truncated tokenizer", REFUSED, "has only", 0,
     {"ch01-naive", "--model", "@model.bin", "--tokenizer", "@tok-truncated.bin"}},
    {"an empty tokenizer", REFUSED, "empty", 0, {"ch01-naive", "--model", "@model.bin", "--tokenizer",
                                                  "@tok-empty.bin"}},
    {"a tokenizer whose max_token_length is 2^30", REFUSED, "max_token_length 1073741824 is not plausible", 0,
     {"ch02-kvcache", "--model", "@model.bin", "--tokenizer", "@tok-absurd-length.bin"}},
    {"a checkpoint given as the tokenizer", REFUSED, "outside 0..", 0,
     {"ch02-kvcache", "--model", "@model.bin", "--tokenizer", "@model.bin"}},
};

static const HostileCase OUTPUT_FILES[] = {
    {"a FIFO as --json (ch01), before any work", REFUSED, "--json", 0,
     {"ch01-naive", MT, "--json", "@fifo"}},
    {"a FIFO as --json (ch02)", REFUSED, "cannot create: it is a FIFO, not a regular file", 0,
     {"ch02-kvcache", MT, "--json", "@fifo"}},
    {"a FIFO as --json (ch03)", REFUSED, "cannot create: it is a FIFO, not a regular file", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--json", "@fifo"}},
    {"a FIFO as --out (ch03)", REFUSED, "--out", 0, {"ch03-batching", MT, "--requests", "@req.tsv", "--out",
                                                    "@fifo"}},
    {"a FIFO as --out (ch04)", REFUSED, "cannot create: it is a FIFO", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--out", "@fifo"}},
    {"/dev/full as --out (ch04): refused before the run", REFUSED, "it is a character device, not a regular file", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--out", "/dev/full"}},
    {"/dev/full as --json (ch03)", REFUSED, "it is a character device", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--json", "/dev/full"}},
    {"/dev/null as --json (a device too)", REFUSED, "it is a character device", 0,
     {"ch02-kvcache", MT, "--json", "/dev/null"}},
    {"a folder as --json", REFUSED, "it is a directory", 0, {"ch02-kvcache", MT, "--json", "@folder"}},
    {"--json in a folder that does not exist", REFUSED, "No such file or directory", 0,
     {"ch01-naive", MT, "--json", "@folder/missing/r.json"}},
    {"kvsim --json FIFO: nothing on stdout", REFUSED, "cannot create: it is a FIFO", 0,
     {"kvsim", "--requests", "50", "--json", "@fifo"}},
    {"kvsim --json /dev/full: nothing on stdout", REFUSED, "it is a character device", 0,
     {"kvsim", "--requests", "50", "--json", "/dev/full"}},
    {"a FIFO where the demo writes demo.json", REFUSED, "cannot create: it is a FIFO", 0,
     {"demo", MT, "--requests", "@req.tsv", "--out", "@folder-with-fifo"}},
    {"synth-model --out FIFO", REFUSED, "cannot create: it is a FIFO", 0, {"synth-model", "--out", "@fifo"}},
    {"synth-model --tokenizer-out /dev/full (the checkpoint is not written either)", REFUSED,
     "it is a character device", NOTHING_LEFT,
     {"synth-model", "--out", "@OUTDIR/m.bin", "--tokenizer-out", "/dev/full"}},
    {"a write error in --out (ch04): old file kept, no temporary file", WRITE_FAILED,
     "--out ", FSIZE_LIMIT | OLD_KEPT, {"ch04-paged", MT, "--requests", "@req-most-small.tsv", "--out", "@OLD"}},
    {"a write error in --out (ch03)", WRITE_FAILED, "cannot write: File too large", FSIZE_LIMIT | OLD_KEPT,
     {"ch03-batching", MT, "--requests", "@req-most-small.tsv", "--out", "@OLD"}},
    {"a write error in --json (ch02): no memory table first", WRITE_FAILED, "--json ", FSIZE_LIMIT | OLD_KEPT,
     {"ch02-kvcache", MT, "--steps", "200", "--json", "@OLD"}},
    {"a write error in --json (ch04)", WRITE_FAILED, "cannot write: File too large", FSIZE_LIMIT | OLD_KEPT,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--json", "@OLD"}},
    {"a write error in kvsim --json: no table on stdout", WRITE_FAILED, "--json ", FSIZE_LIMIT | OLD_KEPT | NO_STDOUT,
     {"kvsim", "--requests", "300", "--json", "@OLD"}},
    {"a write error in synth-model --out", REFUSED, "cannot write: File too large", FSIZE_LIMIT | OLD_KEPT,
     {"synth-model", "--preset", "stories260K", "--out", "@OLD"}},
    {"a successful --json replaces the old file whole and keeps its mode (documented)", RUNS, NULL, REPLACED,
     {"ch02-kvcache", MT, "--steps", "4", "--quiet", "--json", "@OLD"}},
    {"a successful --out replaces the old file whole (documented)", RUNS, NULL, REPLACED,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--quiet", "--out", "@OLD"}},
    /* issue 36 D: chapter 6's --kv-tokens and --kv-argmax are checked before the run */
    {"ch06 --kv-tokens /dev/full: refused before the run", REFUSED, "--kv-tokens /dev/full: cannot create: it is a "
     "character device", NOTHING_LEFT, {"ch06-window", MT, "--requests", "@req.tsv", "--kv-tokens", "/dev/full"}},
    {"ch06 --kv-tokens a folder", REFUSED, "it is a directory", 0,
     {"ch06-window", MT, "--requests", "@req.tsv", "--kv-tokens", "@folder"}},
    {"ch06 --kv-tokens in a missing folder", REFUSED, "No such file or directory", 0,
     {"ch06-window", MT, "--requests", "@req.tsv", "--kv-tokens", "@folder/missing/t.txt"}},
    {"ch06 --kv-tokens FIFO", REFUSED, "it is a FIFO", 0,
     {"ch06-window", MT, "--requests", "@req.tsv", "--kv-tokens", "@fifo"}},
    {"ch06 a good --kv-argmax and a bad --kv-tokens: no argmax file left", REFUSED, "--kv-tokens", NOTHING_LEFT,
     {"ch06-window", MT, "--requests", "@req.tsv", "--kv-force", "@force.txt", "--kv-argmax", "@OUTDIR/a.txt",
      "--kv-tokens", "/dev/full"}},
    {"ch06 --kv-argmax /dev/full", REFUSED, "--kv-argmax /dev/full", 0,
     {"ch06-window", MT, "--requests", "@req.tsv", "--kv-force", "@force.txt", "--kv-argmax", "/dev/full"}},
    /* issue 36 E: kvsim's scenario tools check --json first, write it whole, and print after it */
    {"kvsim paper-fig19 --json /dev/full: nothing on stdout", REFUSED, "it is a character device", 0,
     {"kvsim", "--scenario", "paper-fig19", "--json", "/dev/full"}},
    {"kvsim paper-fig19 --json a folder", REFUSED, "it is a directory", 0,
     {"kvsim", "--scenario", "paper-fig19", "--json", "@folder"}},
    {"kvsim prefix-multiturn-7b --json /dev/full", REFUSED, "it is a character device", 0,
     {"kvsim", "--scenario", "prefix-multiturn-7b", "--json", "/dev/full"}},
    {"kvsim prefix-multiturn-7b --json in a missing folder", REFUSED, "No such file or directory", 0,
     {"kvsim", "--scenario", "prefix-multiturn-7b", "--json", "@folder/missing/r.json"}},
    {"a write error in kvsim paper-fig19 --json: old file kept, nothing on stdout", WRITE_FAILED,
     "--json ", FSIZE_LIMIT | OLD_KEPT | NO_STDOUT, {"kvsim", "--scenario", "paper-fig19", "--json", "@OLD"}},
    {"a write error in kvsim prefix-multiturn-7b --json: old file kept, nothing on stdout", WRITE_FAILED,
     "--json ", FSIZE_LIMIT | OLD_KEPT | NO_STDOUT,
     {"kvsim", "--scenario", "prefix-multiturn-7b", "--conversations", "8", "--json", "@OLD"}},
    /* issue 36 F: a run that fails at its last file leaves none of its files */
    {"ch04 --out then a failing --json: --out is not replaced", WRITE_FAILED, "--json ", FSIZE_LIMIT | OLD_KEPT,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--out", "@OLD", "--json", "@OUTDIR/r.json"}},
    {"ch06 --kv-tokens then a failing --json: --kv-tokens is not replaced", WRITE_FAILED, "--json ",
     FSIZE_LIMIT | OLD_KEPT, {"ch06-window", MT, "--requests", "@req.tsv", "--kv-tokens", "@OLD", "--json",
                              "@OUTDIR/r.json"}},
    {"ch05 --out, --trace and --json, one of them failing: no file replaced or left", WRITE_FAILED, "cannot write: File too large", FSIZE_LIMIT | OLD_KEPT,
     {"ch05-prefix", MT, "--requests", "@req.tsv", "--out", "@OLD", "--trace", "@OUTDIR/t.jsonl", "--json",
      "@OUTDIR/r.json"}},
};

static const HostileCase NUMBERS[] = {
    {"--seed ' -1' (strtoull wrapped it to 2^64 - 1)", REFUSED, "--seed: ' -1' is not a whole number", 0,
     {"ch02-kvcache", MT, "--seed", " -1"}},
    {"--seed -1", REFUSED, "--seed: -1 is out of range", 0, {"ch01-naive", MT, "--seed", "-1"}},
    {"--seed 2^64", REFUSED, "--seed: 18446744073709551616 is out of range", 0,
     {"ch04-paged", MT, "--seed", "18446744073709551616"}},
    {"--seed 2^64 - 1 (documented: the largest seed)", RUNS, NULL, STDOUT_TEXT,
     {"ch02-kvcache", MT, "--steps", "2", "--quiet", "--temperature", "1", "--seed", "18446744073709551615"}},
    {"--steps ' 3'", REFUSED, "--steps: ' 3' is not a whole number", 0, {"ch01-naive", MT, "--steps", " 3"}},
    {"--steps +3", REFUSED, "--steps: '+3' is not a whole number", 0, {"ch01-naive", MT, "--steps", "+3"}},
    {"--steps 3x", REFUSED, "--steps: '3x' is not a whole number", 0, {"ch02-kvcache", MT, "--steps", "3x"}},
    {"--steps ''", REFUSED, "--steps: '' is not a whole number", 0, {"ch02-kvcache", MT, "--steps", ""}},
    {"--steps with a newline: still one line", REFUSED, "--steps: '1?2' is not a whole number", 0,
     {"ch02-kvcache", MT, "--steps", "1\n2"}},
    {"--max-batch 2^63", REFUSED, "--max-batch: 9223372036854775808 is out of range", 0,
     {"ch03-batching", MT, "--max-batch", "9223372036854775808"}},
    {"--temperature inf", REFUSED, "--temperature: 'inf' is not a number", 0,
     {"ch01-naive", MT, "--temperature", "inf"}},
    {"--temperature nan", REFUSED, "--temperature: 'nan' is not a number", 0,
     {"ch01-naive", MT, "--temperature", "nan"}},
    {"--temperature 0x1p-1 (a hexadecimal float)", REFUSED, "--temperature: '0x1p-1' is not a number", 0,
     {"ch02-kvcache", MT, "--temperature", "0x1p-1"}},
    {"--top-p ' 0.5'", REFUSED, "--top-p: ' 0.5' is not a number", 0, {"ch02-kvcache", MT, "--top-p", " 0.5"}},
    {"--temperature 1e999 (overflows to inf)", REFUSED, "--temperature: 1e999 is out of range", 0,
     {"ch01-naive", MT, "--temperature", "1e999"}},
    {"--kv-budget 1e99MiB", REFUSED, "--kv-budget: '1e99MiB'", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget", "1e99MiB"}},
    {"--kv-budget 2^64 bytes", REFUSED, "--kv-budget: '18446744073709551616' is too large", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--kv-budget", "18446744073709551616"}},
    {"--kv-budget 2^64 - 1 bytes (ch04: more blocks than the pool can index)", REFUSED, "more than", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget", "18446744073709551615"}},
    {"--kv-budget 2^64 - 1 bytes (ch03: more than the machine's memory)", REFUSED, "--kv-budget", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--kv-budget", "18446744073709551615"}},
    {"--kv-budget 16777216TiB (2^64 exactly, with a unit)", REFUSED, "is too large", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget", "16777216TiB"}},
    {"--kv-budget -5KiB", REFUSED, "--kv-budget: '-5KiB' is not a size", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget", "-5KiB"}},
    {"--kv-budget ' 4MiB'", REFUSED, "--kv-budget: ' 4MiB' is not a size", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--kv-budget", " 4MiB"}},
    {"--kv-budget '4 MiB'", REFUSED, "unknown unit ' MiB'", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--kv-budget", "4 MiB"}},
    {"--kv-budget 0x10", REFUSED, "--kv-budget: '0x10'", 0,
     {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget", "0x10"}},
    {"--kv-budget 0", REFUSED, "more than 0 bytes", 0, {"ch04-paged", MT, "--requests", "@req.tsv", "--kv-budget",
                                                        "0"}},
    {"kvsim --gpu-mem 1e99MiB", REFUSED, "--gpu-mem: '1e99MiB'", 0, {"kvsim", "--gpu-mem", "1e99MiB"}},
    {"kvsim --kv-budget -5KiB", REFUSED, "--kv-budget: '-5KiB' is not a size", 0, {"kvsim", "--kv-budget", "-5KiB"}},
    {"kvcalc --weights 18446744073709551616", REFUSED, "is too large", 0,
     {"kvcalc", "--weights", "18446744073709551616"}},
    {"kvsim --seed ' 1'", REFUSED, "--seed", 0, {"kvsim", "--seed", " 1"}},
    {"kvsim --rate inf", REFUSED, "--rate", 0, {"kvsim", "--rate", "inf"}},
    {"kvsim --input 'fixed: 5'", REFUSED, "bad number", 0, {"kvsim", "--input", "fixed: 5"}},
    {"kvcalc --batch ' 2'", REFUSED, "--batch", 0, {"kvcalc", "--batch", " 2"}},
    {"synth-model --dim ' 8'", REFUSED, "--dim: ' 8' is not a whole number", 0,
     {"synth-model", "--dim", " 8", "--out", "@OUTDIR/m.bin"}},
    {"--threads 0: the default (documented)", RUNS, NULL, STDOUT_TEXT,
     {"ch01-naive", MT, "--steps", "3", "--quiet", "--threads", "0"}},
    {"--threads -1", REFUSED, "--threads: -1 is out of range [0, 256]", 0,
     {"ch02-kvcache", MT, "--threads", "-1"}},
    {"--threads 100000", REFUSED, "--threads: 100000 is out of range [0, 256]", 0,
     {"ch04-paged", MT, "--threads", "100000"}},
    {"demo --threads 0 (the demo takes 1 to 256, documented)", REFUSED, "--threads: '0' is not a number from 1 to "
     "256", 0, {"demo", MT, "--threads", "0"}},
    {"demo --threads 100000", REFUSED, "--threads", 0, {"demo", MT, "--threads", "100000"}},
    /* issue 36 H: a stated limit, and a count in range that the system
     * cannot start is refused before the run, not by libgomp mid-run. */
    {"--threads 257: over the stated limit", REFUSED, "--threads: 257 is out of range [0, 256]", 0,
     {"ch03-batching", MT, "--requests", "@req.tsv", "--threads", "257"}},
    {"kvquality --threads 257", REFUSED, "--threads", 0, {"kvquality", MT, "--threads", "257"}},
    {"--threads 4 where no thread can start (1 TB stacks)", REFUSED, "cannot start 4 threads: this machine started "
     "only 1", HUGE_STACK, {"ch04-paged", MT, "--requests", "@req.tsv", "--threads", "4"}},
    {"--threads 2 where no thread can start, single stream", REFUSED, "cannot start 2 threads", HUGE_STACK,
     {"ch01-naive", MT, "--threads", "2"}},
    {"machine-limits --threads 3 where no thread can start", REFUSED, "cannot start 3 threads", HUGE_STACK,
     {"machine-limits", "--threads", "3", "--mib", "1"}},
    /* issue 36 I: stray arguments */
    {"kvsim --scenario list extra", REFUSED, "unexpected argument 'extra'", 0, {"kvsim", "--scenario", "list", "extra"}},
    {"kvsim --scenario list with another option", REFUSED, "--scenario list takes no other option", 0,
     {"kvsim", "--requests", "5", "--scenario", "list"}},
    {"kvsim --scenario paper-fig19 extra", REFUSED, "unexpected argument 'extra'", 0,
     {"kvsim", "--scenario", "paper-fig19", "extra"}},
    {"kvsim --scenario prefix-multiturn-7b extra", REFUSED, "unexpected argument 'extra'", 0,
     {"kvsim", "--scenario", "prefix-multiturn-7b", "extra"}},
    {"ch06 extra", REFUSED, "unexpected argument 'extra'", 0, {"ch06-window", MT, "extra"}},
    {"kvcalc extra", REFUSED, "unexpected argument 'extra'", 0, {"kvcalc", "extra"}},
    {"demo extra", REFUSED, "unexpected argument 'extra'", 0, {"demo", MT, "extra"}},
};

#ifdef HAVE_GGUF
/* GGUF files made by the project's synthetic GGUF writer, then broken. */
static void make_gguf_fixtures(void)
{
    SynthGgufSpec spec = {.cfg = {32, 32, 1, 2, 1, 8, 4}, .shared_classifier = 1, .seed = 5,
                          .matrix_type = WEIGHT_Q8_0, .embedding_type = WEIGHT_F32};
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_gguf_image(&spec, &image, &bytes, &err) == 0, "%s", err.msg);
    unsigned char *b = image;
    write_file("model.gguf", b, bytes);
    write_file("truncated.gguf", b, bytes / 2);
    write_file("header-only.gguf", b, 24);
    unsigned char *copy = malloc(bytes);
    const uint64_t huge = (uint64_t)1 << 62;
    memcpy(copy, b, bytes);
    memcpy(copy + 8, &huge, 8); /* tensor_count */
    write_file("tensor-count-huge.gguf", copy, bytes);
    memcpy(copy, b, bytes);
    memcpy(copy + 16, &huge, 8); /* kv_count */
    write_file("kv-count-huge.gguf", copy, bytes);
    memcpy(copy, b, bytes);
    const uint64_t key_len = UINT64_MAX; /* the first key's length */
    memcpy(copy + 24, &key_len, 8);
    write_file("key-length-max.gguf", copy, bytes);
    free(copy);
    mem_free(image);
    char path[PATH_MAX];
    fixture_path("fifo.gguf", path);
    ck_assert(mkfifo(path, 0600) == 0);
}

static const HostileCase GGUF_FILES[] = {
    {"a FIFO named .gguf as --model", REFUSED, "not a regular file", 0, {"ch01-naive", "--model", "@fifo.gguf"}},
    {"a GGUF file cut in half", REFUSED, "truncated", 0, {"ch02-kvcache", "--model", "@truncated.gguf"}},
    {"a GGUF file that is only its header", REFUSED, "header-only.gguf: ", 0,
     {"ch01-naive", "--model", "@header-only.gguf"}},
    {"a GGUF header claiming 2^62 tensors", REFUSED, "tensors", 0,
     {"ch02-kvcache", "--model", "@tensor-count-huge.gguf"}},
    {"a GGUF header claiming 2^62 metadata entries", REFUSED, "metadata entries", 0,
     {"ch03-batching", "--model", "@kv-count-huge.gguf", "--requests", "@req.tsv"}},
    {"a GGUF key of 2^64 - 1 bytes", REFUSED, "key-length-max.gguf: ", 0,
     {"ch04-paged", "--model", "@key-length-max.gguf", "--requests", "@req.tsv"}},
    {"kvcalc --model on a truncated GGUF", REFUSED, "truncated", 0, {"kvcalc", "--model", "@truncated.gguf"}},
};

START_TEST(hostile_gguf_files)
{
    make_fixtures();
    make_gguf_fixtures();
    int n_passed = run_table(GGUF_FILES, sizeof GGUF_FILES / sizeof GGUF_FILES[0]);
    fprintf(stderr, "hostile: GGUF_FILES: %d cases passed\n", n_passed);
    remove_tree(dir);
}
END_TEST
#endif

#ifdef HAVE_BPE
/* Where @p what (@p n bytes) first occurs in a GGUF image, after its first 8 bytes. */
static size_t find_bytes(const unsigned char *image, size_t bytes, const void *what, size_t n)
{
    for (size_t at = 8; at + n <= bytes; at++)
        if (memcmp(image + at, what, n) == 0)
            return at;
    ck_abort_msg("the tokenizer image has no '%.*s'", (int)n, (const char *)what);
    return 0;
}

/* Where the element count of the array under @p key is in a GGUF image:
 * after the key (u64 length, bytes), its type (u32) and element type (u32). */
static size_t array_count_at(const unsigned char *image, size_t bytes, const char *key)
{
    return find_bytes(image, bytes, key, strlen(key)) + strlen(key) + 8;
}

/* A copy of @p image with @p len bytes at @p at replaced by @p with. */
static void write_patched(const char *name, const unsigned char *image, size_t bytes, size_t at, const void *with,
                          size_t len)
{
    unsigned char *copy = malloc(bytes);
    memcpy(copy, image, bytes);
    memcpy(copy + at, with, len);
    write_file(name, copy, bytes);
    free(copy);
}

/* The fuzz target's byte-level BPE tokenizer (GGUF metadata only, which
 * `tokenize --model` reads; the chapters load a GGUF's weights first),
 * then broken: cut, absurd array counts, a merge of unknown tokens, a BOS
 * id outside the vocabulary. */
static void make_bpe_fixtures(void)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(bpe_seed_gguf(&image, &bytes, &err) == 0, "%s", err.msg);
    const unsigned char *b = image;
    write_file("bpe.gguf", b, bytes);
    write_file("bpe-truncated.gguf", b, bytes / 2);
    const uint64_t huge = (uint64_t)1 << 62;
    write_patched("bpe-tokens-huge.gguf", b, bytes, array_count_at(b, bytes, "tokenizer.ggml.tokens"), &huge, 8);
    write_patched("bpe-merges-huge.gguf", b, bytes, array_count_at(b, bytes, "tokenizer.ggml.merges"), &huge, 8);
    write_patched("bpe-merge-unknown.gguf", b, bytes, find_bytes(b, bytes, "i n", 3), "i q", 3);
    /* A u32 value: after its key and its type (u32). */
    const char *bos = "tokenizer.ggml.bos_token_id";
    const uint32_t far = 100000;
    write_patched("bpe-bos-outside.gguf", b, bytes, find_bytes(b, bytes, bos, strlen(bos)) + strlen(bos) + 4, &far,
                  4);
    mem_free(image);
    char path[PATH_MAX];
    fixture_path("fifo-bpe.gguf", path);
    ck_assert(mkfifo(path, 0600) == 0);
}

static const HostileCase BPE_FILES[] = {
    {"the well-formed BPE tokenizer (the check of the fixtures themselves)", RUNS, NULL, STDOUT_TEXT,
     {"tokenize", "--model", "@bpe.gguf", "Hello"}},
    {"a FIFO as tokenize --model", REFUSED, "is not a regular file (a FIFO)", 0,
     {"tokenize", "--model", "@fifo-bpe.gguf", "Hello"}},
    {"a BPE tokenizer cut in half", REFUSED, "key 'tokenizer.ggml.tokens'", 0,
     {"tokenize", "--model", "@bpe-truncated.gguf", "Hello"}},
    {"a vocabulary claiming 2^62 tokens", REFUSED, "claims 4611686018427387904 elements", 0,
     {"tokenize", "--model", "@bpe-tokens-huge.gguf", "Hello"}},
    {"a merge list claiming 2^62 merges", REFUSED, "claims 4611686018427387904 elements", 0,
     {"tokenize", "--model", "@bpe-merges-huge.gguf", "--info"}},
    {"a merge naming a token that is not in the vocabulary", REFUSED, "is not in the vocabulary", 0,
     {"tokenize", "--model", "@bpe-merge-unknown.gguf", "Hello"}},
    {"a BOS id outside the vocabulary", REFUSED, "BOS token id 100000 is outside the vocabulary", 0,
     {"tokenize", "--model", "@bpe-bos-outside.gguf", "--decode", "1"}},
};

START_TEST(hostile_bpe_files)
{
    make_fixtures();
    make_bpe_fixtures();
    int n_passed = run_table(BPE_FILES, sizeof BPE_FILES / sizeof BPE_FILES[0]);
    fprintf(stderr, "hostile: BPE_FILES: %d cases passed\n", n_passed);
    remove_tree(dir);
}
END_TEST
#endif

/* Prompts too long for the context: refused (or, in a request file, the
 * request rejected) before they are tokenized, whatever merging costs. */
static const HostileCase LONG_PROMPTS[] = {
    {"a 100 KB --prompt (seq_len 32): refused before tokenizing", REFUSED, "the prompt is 100000 bytes", 0,
     {"ch02-kvcache", MT, "--prompt", "@LONG_PROMPT"}},
    {"a 100 KB --prompt in chapter 1", REFUSED, "the prompt is 100000 bytes", 0,
     {"ch01-naive", MT, "--prompt", "@LONG_PROMPT"}},
    {"a 60 KB prompt line: that request rejected before tokenizing, the others served (documented)", RUNS, NULL,
     REJECTED_LONG, {"ch04-paged", MT, "--requests", "@req-long-prompt.tsv", "--out", "@OUTDIR/out.jsonl",
                     "--quiet"}},
    {"a 60 KB prompt line in chapter 3 (documented)", RUNS, NULL, REJECTED_LONG,
     {"ch03-batching", MT, "--requests", "@req-long-prompt.tsv", "--out", "@OUTDIR/out.jsonl", "--quiet"}},
};

START_TEST(hostile_long_prompts)
{
    make_fixtures();
    char *text = malloc(61 * 1000 + 64);
    strcpy(text, "4\tOnce upon a time\n3\t");
    size_t at = strlen(text);
    for (size_t i = 0; i < 60 * 1000; i++)
        text[at++] = "the cat sat on the mat "[i % 23];
    strcpy(text + at, "\n2\tThe end\n");
    write_text("req-long-prompt.tsv", text);
    free(text);
    int n_passed = run_table(LONG_PROMPTS, sizeof LONG_PROMPTS / sizeof LONG_PROMPTS[0]);
    fprintf(stderr, "hostile: LONG_PROMPTS: %d cases passed\n", n_passed);
    remove_tree(dir);
}
END_TEST

/* ------------------------------------------------------------ tests */

START_TEST(hostile_input_files)
{
    RUN_TABLE(INPUT_FILES);
}
END_TEST

START_TEST(hostile_checkpoints)
{
    RUN_TABLE(CHECKPOINTS);
}
END_TEST

/* The output cases need two more fixtures: a folder whose demo.json is a
 * FIFO, and a request file whose --out is larger than the 1 KiB limit. */
static void make_output_fixtures(void)
{
    char path[PATH_MAX];
    fixture_path("folder-with-fifo", path);
    ck_assert(mkdir(path, 0700) == 0);
    fixture_path("folder-with-fifo/demo.json", path);
    ck_assert(mkfifo(path, 0600) == 0);
    /* 60 short requests: their --out is about 15 KB */
    char text[60 * 24 + 1] = "";
    for (int i = 0; i < 60; i++)
        strcat(text, i % 2 ? "4\tOnce upon a time\n" : "4\tThe cat sat\n");
    write_text("req-most-small.tsv", text);
}

START_TEST(hostile_output_files)
{
    make_fixtures();
    make_output_fixtures();
    int n_passed = run_table(OUTPUT_FILES, sizeof OUTPUT_FILES / sizeof OUTPUT_FILES[0]);
    fprintf(stderr, "hostile: OUTPUT_FILES: %d cases passed\n", n_passed);
    remove_tree(dir);
}
END_TEST

START_TEST(hostile_numbers)
{
    RUN_TABLE(NUMBERS);
}
END_TEST

/* The limits themselves, in the library: exactly at a limit is accepted,
 * one past it is refused; and what --help says matches the constants. */
START_TEST(request_file_limits_are_exact)
{
    ck_assert_uint_eq(REQUEST_FILE_MAX_BYTES, 16u << 20);
    ck_assert_uint_eq(REQUEST_LINE_MAX_BYTES, 65536);
    ck_assert_int_eq(REQUEST_FILE_MAX_REQUESTS, 1048576);
    const char *argv[] = {"ch03-batching", "--help", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(strstr(r.out, "at most 16 MiB, 65536 bytes a line, 1048576 requests"),
                  "--help does not state the request-file limits:\n%s", r.out);
    test_result_free(&r);

    size_t n = REQUEST_LINE_MAX_BYTES + 2;
    char *line = malloc(n + 1);
    memcpy(line, "1\t", 2);
    memset(line + 2, 'a', n - 2);
    RequestFile rf;
    Err err = {{0}};
    ck_assert_msg(request_file_parse(&rf, line, REQUEST_LINE_MAX_BYTES, "t", &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(strlen(rf.items[0].prompt), REQUEST_LINE_MAX_BYTES - 2);
    request_file_free(&rf);
    ck_assert_int_eq(request_file_parse(&rf, line, REQUEST_LINE_MAX_BYTES + 1, "t", &err), -1);
    ck_assert_msg(strstr(err.msg, "t:1: the line is 65537 bytes"), "%s", err.msg);
    /* a CR before the newline does not count against the line */
    memcpy(line + REQUEST_LINE_MAX_BYTES, "\r\n", 2);
    ck_assert_int_eq(request_file_parse(&rf, line, REQUEST_LINE_MAX_BYTES + 2, "t", &err), -1);
    free(line);

    size_t len;
    char *text = many_requests(REQUEST_FILE_MAX_REQUESTS, &len);
    ck_assert_msg(request_file_parse(&rf, text, len, "t", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rf.count, REQUEST_FILE_MAX_REQUESTS);
    ck_assert_int_eq(rf.items[rf.count - 1].line, REQUEST_FILE_MAX_REQUESTS);
    request_file_free(&rf);
    free(text);
    text = many_requests(REQUEST_FILE_MAX_REQUESTS + 1, &len);
    ck_assert_int_eq(request_file_parse(&rf, text, len, "t", &err), -1);
    ck_assert_msg(strstr(err.msg, "t:1048577: more than 1048576 requests"), "%s", err.msg);
    free(text);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* ------------------------------------------------------------ issue 36 B */

/* The "tokens":[...] of the JSON line of request @p id in @p jsonl, copied
 * into out (empty when there is none). */
static void tokens_of(const char *jsonl, int id, char *out, size_t n)
{
    char key[32];
    snprintf(key, sizeof key, "{\"id\":%d,", id);
    const char *line = strstr(jsonl, key), *at = line ? strstr(line, "\"tokens\":[") : NULL;
    const char *end = at ? strchr(at, ']') : NULL;
    snprintf(out, n, "%.*s", end ? (int)(end - at + 1) : 0, end ? at : "");
}

/* SmolLM2's byte-level vocabulary has no token for 21 byte values, and the
 * model adds no BOS: a prompt made only of them encodes to no token. The
 * serving chapters refuse such a request alone (one line naming it,
 * "rejected" in --out, the others run and give the tokens they give
 * without it); chapters 1 and 2 refuse the one prompt up front. */
START_TEST(prompts_of_no_token_on_the_real_vocabulary)
{
    TestModel f;
    if (!test_model_smollm2(&f, "prompts_of_no_token_on_the_real_vocabulary"))
        return;
    const char *model = test_shared_file("SmolLM2-135M-Instruct.Q4_1.gguf");
    static const unsigned char missing[21] = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5,
                                              0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF};
    int n_missing = 0;
    for (int b = 1; b < 256; b++) {
        char text[2] = {(char)b, 0};
        int ids[8], n = -1;
        Err err = {{0}};
        ck_assert_msg(tokenizer_encode(&f.t, text, 1, 0, ids, &n, &err) == 0, "%s", err.msg);
        int listed = memchr(missing, b, sizeof missing) != NULL;
        ck_assert_msg((n == 0) == listed, "byte 0x%02X encodes to %d tokens", b, n);
        n_missing += n == 0;
    }
    ck_assert_int_eq(n_missing, 21);
    test_model_free(&f);

    make_fixtures();
    write_text("good.tsv", "3\tOnce upon a time\n3\tThe cat\n");
    write_text("mixed.tsv", "3\tOnce upon a time\n3\t\xff\xfe\x04\n3\tThe cat\n");
    char good[PATH_MAX], mixed[PATH_MAX], out_good[PATH_MAX], out_mixed[PATH_MAX];
    fixture_path("good.tsv", good);
    fixture_path("mixed.tsv", mixed);
    fixture_path("good.jsonl", out_good);
    fixture_path("mixed.jsonl", out_mixed);
    static const char *const chapters[] = {"ch03-batching", "ch04-paged", "ch05-prefix", "ch06-window"};
    for (size_t c = 0; c < sizeof chapters / sizeof chapters[0]; c++) {
        const char *run_good[] = {chapters[c], "--model", model, "--requests", good, "--kv-budget", "400MiB", "--quiet", "--out",
                                  out_good, NULL};
        const char *run_mixed[] = {chapters[c], "--model", model, "--requests", mixed, "--kv-budget", "400MiB", "--quiet",
                                   "--out", out_mixed, NULL};
        ProgramResult g, m;
        ck_assert(test_run_program(run_good, &g) == 0 && test_run_program(run_mixed, &m) == 0);
        ck_assert_msg(g.status == 0 && m.status == 0 && m.out[0] == '\0', "%s: exit %d, stderr:\n%s", chapters[c],
                      m.status, m.err);
        ck_assert_msg(count_lines_with(m.err, "refused") == 1 && count_lines_with(m.err, "error") == 0 &&
                          strstr(m.err, ": request 1 (line 2) refused: its prompt encodes to no token"),
                      "%s: expected one line refusing request 1, got:\n%s", chapters[c], m.err);
        char *jg = test_slurp(out_good), *jm = test_slurp(out_mixed);
        ck_assert_msg(test_count_lines(jm) == 3 && strstr(jm, "{\"id\":1,") &&
                          strstr(strstr(jm, "{\"id\":1,"), "\"finish\":\"rejected\"") &&
                          strstr(jm, "\"finish\":\"rejected\"") == strstr(strstr(jm, "{\"id\":1,"), "\"finish\""),
                      "%s: --out does not mark request 1 alone as rejected:\n%s", chapters[c], jm);
        char a[4096], b[4096];
        for (int k = 0; k < 2; k++) {
            tokens_of(jg, k, a, sizeof a);
            tokens_of(jm, 2 * k, b, sizeof b);
            ck_assert_msg(a[0] && strcmp(a, b) == 0, "%s: request %d gave %s beside the refused one, %s without",
                          chapters[c], 2 * k, b, a);
        }
        free(jg), free(jm);
        test_result_free(&g), test_result_free(&m);
    }
    for (int c = 0; c < 2; c++) {
        const char *argv[] = {c ? "ch02-kvcache" : "ch01-naive", "--model", model, "--prompt", "\xff", NULL};
        ProgramResult r;
        ck_assert(test_run_program(argv, &r) == 0);
        ck_assert_msg(r.status == 1 && r.out[0] == '\0' && test_count_lines(r.err) == 1 &&
                          strstr(r.err, "error: the prompt encodes to no token"),
                      "%s: exit %d, stdout %zu bytes, stderr:\n%s", argv[0], r.status, strlen(r.out), r.err);
        test_result_free(&r);
    }
    remove_tree(dir);
}
END_TEST

/* Issue 36 G: the default budget is stated on the start-up line, and
 * allocating it makes none of it resident: one short request on SmolLM2
 * (default budget 2.81 GiB, or half the memory available) stays far below
 * it. Zeroing the budget up front made every serving chapter 3 GB. */
START_TEST(the_default_budget_is_stated_and_not_resident)
{
    TestModel f;
    if (!test_model_smollm2(&f, "the_default_budget_is_stated_and_not_resident"))
        return;
    test_model_free(&f);
    const char *model = test_shared_file("SmolLM2-135M-Instruct.Q4_1.gguf");
    make_fixtures();
    write_text("one.tsv", "2\tOnce upon a time\n");
    char one[PATH_MAX];
    fixture_path("one.tsv", one);
    const char *argv[] = {"ch04-paged", "--model", model, "--requests", one, "--quiet", NULL};
    ProgramResult r;
    ck_assert(test_run_program(argv, &r) == 0);
    ck_assert_msg(r.status == 0 && strstr(r.err, "; KV budget ") && strstr(r.err, " (the default: "), "%s", r.err);
    test_result_free(&r);
    struct rusage use;
    ck_assert(getrusage(RUSAGE_CHILDREN, &use) == 0);
    ck_assert_msg(use.ru_maxrss < 1024L * 1024, "a run of one short request was %ld KiB resident", use.ru_maxrss);
    remove_tree(dir);
}
END_TEST

/* Issue 36 G: a model that declares a context whose step activations no
 * machine of this size could hold is refused before the run, in one line
 * (it failed at the first step, after the start-up lines); a real one is
 * accepted. The buffers themselves are allocated untouched. */
START_TEST(activations_for_the_declared_context_are_checked_first)
{
    Err err = {{0}};
    ModelConfig wide = {8192, 28672, 1, 64, 8, 32000, 1 << 20};
    ck_assert_int_eq(forward_check_context(&wide, 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "the model declares a context of 1048576 positions: the activations of a step "
                                  "that long take ") && !strchr(err.msg, '\n'), "%s", err.msg);
    ModelConfig stories = {64, 172, 5, 8, 4, 512, 512};
    ck_assert_msg(forward_check_context(&stories, 1, &err) == 0, "%s", err.msg);
}
END_TEST

Suite *suite_hostile(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    /* Each case has its own CASE_SECONDS limit; these bound a whole table. */
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, hostile_input_files);
    tcase_add_test(tc, hostile_checkpoints);
    tcase_add_test(tc, hostile_output_files);
    tcase_add_test(tc, hostile_numbers);
    tcase_add_test(tc, hostile_long_prompts);
    tcase_add_test(tc, request_file_limits_are_exact);
    tcase_add_test(tc, prompts_of_no_token_on_the_real_vocabulary);
    tcase_add_test(tc, the_default_budget_is_stated_and_not_resident);
    tcase_add_test(tc, activations_for_the_declared_context_are_checked_first);
    suite_add_tcase(s, tc);
    /* Cases for code that not every tree has yet, in their own cases so
     * that CK_RUN_CASE can pick them. */
#ifdef HAVE_GGUF
    TCase *gguf = tcase_create("gguf");
    tcase_set_timeout(gguf, 900);
    tcase_add_test(gguf, hostile_gguf_files);
    suite_add_tcase(s, gguf);
#endif
#ifdef HAVE_BPE
    TCase *bpe = tcase_create("bpe");
    tcase_set_timeout(bpe, 900);
    tcase_add_test(bpe, hostile_bpe_files);
    suite_add_tcase(s, bpe);
#endif

    return s;
}

REGISTER_SUITE(hostile)
