/**
 * @file outfile.h
 * @brief Output files that are either the old file or the complete new
 *        one, never half of it.
 *
 * Every file kvlab writes (`--json`, `--out`, the demo's data, kvsim's
 * JSON, synthetic checkpoints) goes through this module:
 *
 * 1. outfile_check(), before any work: the path must name a regular file
 *    or nothing yet, in a folder where a file can be created. A FIFO would
 *    block the writer forever, a device (/dev/full) would fail only after
 *    all the work: both are refused in one line before anything runs.
 * 2. outfile_open(): the text is written to a new temporary file in the
 *    same folder (`.NAME.tmp-PID-N`), so that the final rename stays
 *    inside one file system.
 * 3. outfile_commit(): flush, fsync(), close, and rename() over the final
 *    path. rename() replaces the old file in one step: a reader sees the
 *    old file or the new one. If any step fails (a full disk, a file size
 *    limit, an I/O error), the temporary file is removed, the old file is
 *    left as it was, and the message says which file and why:
 *    "--json r.json: cannot write: No space left on device".
 *
 * outfile_abort() removes the temporary file on any other failure; a
 * SIGINT, SIGTERM or SIGHUP while a temporary file exists removes it too
 * before the program dies. Only SIGKILL (or a power cut) can leave one
 * behind, and never in place of the real file.
 */
#ifndef KVLAB_OUTFILE_H
#define KVLAB_OUTFILE_H

#include <limits.h>
#include <stdio.h>

#include "err.h"

#ifndef PATH_MAX
/** Longest path (Linux's value, where <limits.h> does not say). */
#define PATH_MAX 4096
#endif

/** An output file being written. Do not copy or move it while it is open:
 *  its stream keeps a pointer to it. */
typedef struct {
    FILE *f;                   /**< write the contents here */
    int fd;                    /**< the temporary file's descriptor (valid while has_fd) */
    int has_fd;                /**< 1 while the temporary file is open */
    int write_errno;           /**< the first error of a write (0: none) */
    char what[32];             /**< what named the file, for messages ("--json"); may be empty */
    char path[PATH_MAX];       /**< the final path (symbolic links resolved) */
    char tmp_path[PATH_MAX];   /**< the temporary file beside it */
} OutFile;

/**
 * Checks, before any work, that @p path can become an output file: it is
 * a regular file (writable) or does not exist, and a file can be created
 * in its folder. Nothing is changed (a probe file is created and removed).
 * @param what  what named the file, for messages ("--json"), or NULL
 * @param path  the output path
 * @param err   receives "WHAT PATH: cannot create: it is a FIFO, not a
 *              regular file", "WHAT PATH: cannot create: REASON" and the like
 * @return 0 when the file can be written, -1 otherwise
 */
int outfile_check(const char *what, const char *path, Err *err);

/**
 * Starts writing @p path: makes the temporary file and a stream to it.
 * Does the checks of outfile_check() again (the path may have changed).
 * @param o     receives the open file; must stay where it is until
 *              outfile_commit() or outfile_abort()
 * @param what  what named the file, for messages, or NULL
 * @param path  the output path
 * @param err   receives the reason on failure
 * @return 0 on success (write to o->f), -1 on failure (nothing to abort)
 */
int outfile_open(OutFile *o, const char *what, const char *path, Err *err);

/**
 * Starts appending to @p path the safe way: as outfile_open(), then the
 * temporary file gets the current contents of @p path (when it exists), so
 * that after outfile_commit() the file is its old contents followed by what
 * was written, and after a failure it is exactly the old contents (an
 * append in place would leave half a line on a full disk).
 * @param o     receives the open file (as outfile_open())
 * @param what  what named the file, for messages, or NULL
 * @param path  the output path
 * @param err   receives the reason on failure ("WHAT PATH: cannot read the old contents: REASON")
 * @return 0 on success (write what to append to o->f), -1 on failure (nothing to abort)
 */
int outfile_open_append(OutFile *o, const char *what, const char *path, Err *err);

/**
 * Finishes the file: flush, fsync, close, rename over the final path.
 * On failure the temporary file is removed and the old file, if any, is
 * untouched. Either way @p o is closed afterwards.
 * @param o    from outfile_open()
 * @param err  receives "WHAT PATH: cannot write: REASON" on failure
 * @return 0 on success, -1 on failure
 */
int outfile_commit(OutFile *o, Err *err);

/**
 * Holds every file committed from now on: outfile_commit() finishes it
 * (flush, fsync, close) and checks it was written whole, but leaves it
 * under its temporary name until outfile_release() renames them all or
 * outfile_discard() removes them all. A program that writes several files
 * (`--out`, `--json`, `--trace`, chapter 6's `--kv-tokens`) calls it before
 * the first: a run that fails at its last file then leaves none of its
 * files behind, and every older file of those names as it was, so no file
 * on disk can be mistaken for the failed run's. (Only a failing rename,
 * in a folder checked writable before the run, could leave the files that
 * were renamed before it.) At most 16 files are held; a later one is
 * committed at once.
 */
void outfile_hold(void);

/**
 * Renames every held file over its final path, in the order they were
 * committed, and stops holding.
 * @param err  receives "WHAT PATH: cannot replace the file: REASON" on failure
 * @return 0 on success, -1 when a rename failed (the files not yet renamed are removed)
 */
int outfile_release(Err *err);

/**
 * Removes every held file (the final paths are untouched) and stops holding.
 */
void outfile_discard(void);

/**
 * Gives up: closes and removes the temporary file; the final path is
 * untouched. Safe on a file that was never opened or is already closed,
 * if it was zeroed first.
 * @param o  the file
 */
void outfile_abort(OutFile *o);

/**
 * Writes a whole file in one go through outfile_open() and
 * outfile_commit().
 * @param what   what named the file, for messages, or NULL
 * @param path   the output path
 * @param data   [bytes] the contents
 * @param bytes  their length
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure (the old file untouched)
 */
int outfile_write_all(const char *what, const char *path, const void *data, size_t bytes, Err *err);

#endif
