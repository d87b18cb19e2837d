#define _GNU_SOURCE /* fopencookie: a stream whose write errors we see with their errno */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infile.h"

/* ------------------------------------------------------------ cleanup on signals */

/* Temporary files that exist right now, so that a SIGINT, SIGTERM or SIGHUP
 * can remove them before the program dies. unlink() is async-signal-safe. */
#define PENDING_MAX 16
static char pending_path[PENDING_MAX][PATH_MAX];
static volatile sig_atomic_t pending_used[PENDING_MAX];

static void remove_pending_and_die(int sig)
{
    for (int i = 0; i < PENDING_MAX; i++)
        if (pending_used[i])
            unlink(pending_path[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Installs the handler once, and only where the program has none of its
 * own (an ignored SIGHUP under nohup stays ignored). */
static void install_signal_cleanup(void)
{
    static int installed;
    if (installed)
        return;
    installed = 1;
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction old;
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = remove_pending_and_die;
            sigemptyset(&sa.sa_mask);
            sigaction(signals[i], &sa, NULL);
        }
    }
}

static void register_pending(const char *path)
{
    install_signal_cleanup();
    for (int i = 0; i < PENDING_MAX; i++)
        if (!pending_used[i]) {
            snprintf(pending_path[i], PATH_MAX, "%s", path);
            pending_used[i] = 1;
            return;
        }
}

static void unregister_pending(const char *path)
{
    for (int i = 0; i < PENDING_MAX; i++)
        if (pending_used[i] && strcmp(pending_path[i], path) == 0)
            pending_used[i] = 0;
}

/* ------------------------------------------------------------ paths */

/* "WHAT PATH" or "PATH", for the front of every message. */
static const char *label(char *buf, size_t n, const char *what, const char *path)
{
    snprintf(buf, n, "%s%s%s", what && what[0] ? what : "", what && what[0] ? " " : "", path);
    return buf;
}

/* The file a write to @p path lands in: a symbolic link is followed, so
 * that the rename replaces its target, not the link. */
static int final_path(const char *path, char *out, const char *shown, Err *err)
{
    struct stat st;
    char resolved[PATH_MAX];
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, resolved))
        path = resolved;
    if (snprintf(out, PATH_MAX, "%s", path) >= PATH_MAX)
        return err_set(err, "%s: the path is too long", shown);
    return 0;
}

/* Splits @p path into its folder ("." when it has none) and its name. */
static int split_path(const char *path, char *dir, const char **name, const char *shown, Err *err)
{
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if ((*name)[0] == '\0' || strcmp(*name, ".") == 0 || strcmp(*name, "..") == 0)
        return err_set(err, "%s: not a file name", shown);
    if (!slash)
        snprintf(dir, PATH_MAX, ".");
    else if (slash == path)
        snprintf(dir, PATH_MAX, "/");
    else
        snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
    return 0;
}

/* The final file must be a writable regular file, or not exist yet. */
static int check_existing(const char *path, mode_t *mode, const char *shown, Err *err)
{
    struct stat st;
    *mode = 0;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, "%s: cannot create: %s", shown, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return err_set(err, "%s: cannot create: it is %s, not a regular file", shown,
                       infile_kind((unsigned)st.st_mode));
    if (access(path, W_OK) != 0)
        return err_set(err, "%s: cannot write: %s", shown, strerror(errno));
    *mode = st.st_mode & 07777;
    return 0;
}

/* Creates a new temporary file beside the final one; returns its fd. */
static int create_temp(const char *dir, const char *name, char *tmp_path, const char *shown, Err *err)
{
    static unsigned counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        /* The name is cut so that the temporary name fits NAME_MAX. */
        if (snprintf(tmp_path, PATH_MAX, "%s/.%.200s.tmp-%ld-%u", dir, name, (long)getpid(), counter++) >= PATH_MAX)
            return err_set(err, "%s: the path is too long", shown);
        int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return err_set(err, "%s: cannot create: %s", shown, strerror(errno));
    }
    return err_set(err, "%s: cannot create a temporary file in %s", shown, dir);
}

/* ------------------------------------------------------------ the stream */

static ssize_t write_to_fd(void *cookie, const char *buf, size_t n)
{
    OutFile *o = cookie;
    if (o->write_errno)
        return 0; /* 0 tells stdio the write failed; the first reason is kept */
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(o->fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            o->write_errno = w < 0 ? errno : EIO;
            return 0;
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

static void close_quietly(OutFile *o)
{
    if (o->f)
        fclose(o->f);
    o->f = NULL;
    if (o->has_fd)
        close(o->fd);
    o->has_fd = 0;
}

/* Both outfile_check() and outfile_open(): validate, make the temp file. */
static int prepare(OutFile *o, const char *what, const char *path, mode_t *mode, Err *err)
{
    memset(o, 0, sizeof *o);
    snprintf(o->what, sizeof o->what, "%s", what ? what : "");
    char shown[PATH_MAX + 40], dir[PATH_MAX];
    label(shown, sizeof shown, what, path);
    const char *name;
    if (path[0] == '\0')
        return err_set(err, "%s: the path is empty", what && what[0] ? what : "output");
    if (final_path(path, o->path, shown, err) || check_existing(o->path, mode, shown, err) ||
        split_path(o->path, dir, &name, shown, err))
        return -1;
    o->fd = create_temp(dir, name, o->tmp_path, shown, err);
    if (o->fd < 0) {
        o->tmp_path[0] = '\0';
        return -1;
    }
    o->has_fd = 1;
    register_pending(o->tmp_path);
    return 0;
}

int outfile_check(const char *what, const char *path, Err *err)
{
    OutFile o;
    mode_t mode;
    if (prepare(&o, what, path, &mode, err))
        return -1;
    outfile_abort(&o);
    return 0;
}

int outfile_open(OutFile *o, const char *what, const char *path, Err *err)
{
    mode_t mode;
    if (prepare(o, what, path, &mode, err))
        return -1;
    if (mode)
        fchmod(o->fd, mode); /* a replaced file keeps its permissions */
    cookie_io_functions_t io = {.read = NULL, .write = write_to_fd, .seek = NULL, .close = NULL};
    o->f = fopencookie(o, "w", io);
    if (!o->f) {
        char shown[PATH_MAX + 40];
        err_set(err, "%s: cannot create: %s", label(shown, sizeof shown, o->what, path), strerror(errno));
        outfile_abort(o);
        return -1;
    }
    return 0;
}

/* Copies the file at o->path (already checked to be a regular file, or
 * absent) into the temporary file: 0, or the errno of the failure. */
static int copy_old_contents(OutFile *o)
{
    FILE *old = fopen(o->path, "rb");
    if (!old)
        return errno == ENOENT ? 0 : errno;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, old)) > 0)
        if (fwrite(buf, 1, n, o->f) != n)
            break;
    int e = ferror(old) ? EIO : ferror(o->f) ? (o->write_errno ? o->write_errno : EIO) : 0;
    fclose(old);
    return e;
}

int outfile_open_append(OutFile *o, const char *what, const char *path, Err *err)
{
    if (outfile_open(o, what, path, err))
        return -1;
    int e = copy_old_contents(o);
    if (e) {
        char shown[PATH_MAX + 40];
        err_set(err, "%s: cannot read the old contents: %s", label(shown, sizeof shown, o->what, o->path),
                strerror(e));
        outfile_abort(o);
        return -1;
    }
    return 0;
}

/* Flush, fsync, close: 0, or the errno of the first step that failed. */
static int finish_writing(OutFile *o)
{
    int flushed = fflush(o->f) == 0 && !ferror(o->f);
    fclose(o->f);
    o->f = NULL;
    if (o->write_errno || !flushed)
        return o->write_errno ? o->write_errno : EIO;
    if (fsync(o->fd) != 0)
        return errno;
    o->has_fd = 0;
    return close(o->fd) != 0 ? errno : 0;
}

/* Renames a finished temporary file over its final path and makes the
 * rename durable by syncing the folder. */
static int publish(const char *what, const char *tmp_path, const char *path, Err *err)
{
    char shown[PATH_MAX + 40];
    label(shown, sizeof shown, what, path);
    if (rename(tmp_path, path) != 0) {
        int e = errno;
        unlink(tmp_path);
        unregister_pending(tmp_path);
        return err_set(err, "%s: cannot replace the file: %s", shown, strerror(e));
    }
    unregister_pending(tmp_path);
    char dir[PATH_MAX];
    const char *name;
    if (split_path(path, dir, &name, shown, NULL) == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

/* Files written whole but not yet renamed, while outfile_hold() is on. */
typedef struct {
    char what[32];
    char path[PATH_MAX];
    char tmp_path[PATH_MAX];
} HeldFile;
static HeldFile held[PENDING_MAX];
static int n_held, holding;

int outfile_commit(OutFile *o, Err *err)
{
    char shown[PATH_MAX + 40];
    label(shown, sizeof shown, o->what, o->path);
    int e = finish_writing(o);
    if (e) {
        outfile_abort(o);
        return err_set(err, "%s: cannot write: %s", shown, strerror(e));
    }
    if (holding && n_held < PENDING_MAX) { /* renamed with the others by outfile_release() */
        HeldFile *h = &held[n_held++];
        snprintf(h->what, sizeof h->what, "%s", o->what);
        snprintf(h->path, sizeof h->path, "%s", o->path);
        snprintf(h->tmp_path, sizeof h->tmp_path, "%s", o->tmp_path);
        o->tmp_path[0] = '\0';
        return 0;
    }
    e = publish(o->what, o->tmp_path, o->path, err);
    o->tmp_path[0] = '\0';
    return e;
}

void outfile_hold(void)
{
    holding = 1;
}

int outfile_release(Err *err)
{
    int rc = 0;
    for (int i = 0; i < n_held; i++) {
        if (rc == 0)
            rc = publish(held[i].what, held[i].tmp_path, held[i].path, err);
        else
            unlink(held[i].tmp_path), unregister_pending(held[i].tmp_path);
    }
    n_held = holding = 0;
    return rc;
}

void outfile_discard(void)
{
    for (int i = 0; i < n_held; i++) {
        unlink(held[i].tmp_path);
        unregister_pending(held[i].tmp_path);
    }
    n_held = holding = 0;
}

void outfile_abort(OutFile *o)
{
    close_quietly(o);
    if (o->tmp_path[0]) {
        unlink(o->tmp_path);
        unregister_pending(o->tmp_path);
        o->tmp_path[0] = '\0';
    }
}

int outfile_write_all(const char *what, const char *path, const void *data, size_t bytes, Err *err)
{
    OutFile o;
    if (outfile_open(&o, what, path, err))
        return -1;
    (void)fwrite(data, 1, bytes, o.f); /* a failure is caught, with its reason, by the commit */
    return outfile_commit(&o, err);
}
