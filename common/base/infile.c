#include "infile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *infile_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    }
    return "not a file";
}

int infile_open(const char *path, uint64_t max_bytes, size_t *size, Err *err)
{
    /* O_NONBLOCK: a FIFO would block the open until a writer comes; for a
     * regular file it changes nothing. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, "%s is not a regular file (%s)", path, infile_kind((unsigned)st.st_mode));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return err_set(err, "%s: %lld bytes is more than the limit of %llu bytes", path, (long long)st.st_size,
                       (unsigned long long)max_bytes);
    }
    *size = (size_t)st.st_size;
    return fd;
}

int infile_read_exact(int fd, void *buf, size_t n, const char *path, Err *err)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = read(fd, (char *)buf + done, n - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return err_set(err, "%s: cannot read: %s", path, strerror(errno));
        if (got == 0)
            return err_set(err, "%s: the file shrank while it was read", path);
        done += (size_t)got;
    }
    return 0;
}
