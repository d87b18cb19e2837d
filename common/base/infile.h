/**
 * @file infile.h
 * @brief Opening the files kvlab reads (checkpoints, tokenizers, request
 *        files) so that a hostile path cannot hang or exhaust the program.
 *
 * Every input file must be a regular file. The check is made with fstat()
 * on the descriptor that was opened, not with stat() on the path before
 * opening it, so the file that is checked is the file that is read. The
 * open itself uses O_NONBLOCK: opening a FIFO for reading would otherwise
 * wait for a writer forever, before any check could run. A FIFO, a device
 * (/dev/zero never ends) or a directory is refused with one line:
 * "PATH is not a regular file (a FIFO)".
 *
 * A size limit is checked from the same fstat(), before anything is
 * allocated or read.
 */
#ifndef KVLAB_INFILE_H
#define KVLAB_INFILE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/**
 * What a file mode is, in words, for messages ("a FIFO", "a directory",
 * "a character device", ...).
 * @param mode  st_mode from stat() or fstat()
 * @return a static string
 */
const char *infile_kind(unsigned mode);

/**
 * Opens a regular file for reading.
 * @param path       the file
 * @param max_bytes  the largest size accepted (UINT64_MAX: no limit)
 * @param size       receives the file's size in bytes
 * @param err        receives "PATH: cannot open: REASON", "PATH is not a
 *                   regular file (KIND)" or "PATH: N bytes is more than the
 *                   limit of MAX bytes"
 * @return an open descriptor (close it with close()), or -1 on failure
 */
int infile_open(const char *path, uint64_t max_bytes, size_t *size, Err *err);

/**
 * Reads exactly @p n bytes from @p fd (looping over short reads and
 * interrupted ones).
 * @param fd    from infile_open()
 * @param buf   [n] receives the bytes
 * @param n     how many to read
 * @param path  the file, for messages
 * @param err   receives "PATH: cannot read: REASON" or "PATH: the file
 *              shrank while it was read"
 * @return 0 on success, -1 on failure
 */
int infile_read_exact(int fd, void *buf, size_t n, const char *path, Err *err);

#endif
