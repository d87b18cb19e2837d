/**
 * @file err.h
 * @brief Error reporting for library code: a status plus one line of text.
 *
 * Library functions never print and never exit. They return 0 on success
 * and -1 on failure, after writing a one-line message into an ::Err that the
 * caller passed in. Only a program's main() decides to print it and exit.
 */
#ifndef KVLAB_ERR_H
#define KVLAB_ERR_H

#include <stdarg.h>

/** One error message; empty when nothing went wrong. */
typedef struct {
    char msg[512]; /**< NUL-terminated, no trailing newline */
} Err;

/**
 * Writes a printf-style message into @p err (which may be NULL). The
 * message stays one line: control bytes (a newline in a quoted option
 * value, say) become '?'.
 * @param err  where the message goes, or NULL to drop it
 * @param fmt  printf format
 * @return always -1, so that `return err_set(err, ...);` reads naturally
 */
int err_set(Err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * Prefixes an existing message with context, e.g. the file being read.
 * @param err  the error to extend (may be NULL)
 * @param fmt  printf format of the prefix; ": " is inserted after it
 * @return always -1
 */
int err_prefix(Err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
