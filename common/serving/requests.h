/**
 * @file requests.h
 * @brief Request files: the workload of the serving chapters (3 and 4).
 *
 * One request per line, `max_new_tokens<TAB>prompt`. Lines that are blank or
 * whose first non-blank character is `#` are ignored.
 *
 * A line may start with its arrival, one more tab-separated field:
 * `@1.25s<TAB>max_new_tokens<TAB>prompt` arrives 1.25 s after the run
 * starts (on the run's clock, serving.h), `@12<TAB>...` at step 12 (the
 * first step it may join). A line without one arrives at the start. A
 * file gives its arrivals in seconds or in steps, not both, and in file
 * order (never earlier than the line before): serving is first come,
 * first served, in file order. A line that does not
 * fit the format is refused with its line number, and the whole file with
 * it: a server that silently skipped a request would make every measurement
 * that follows wrong. A line may end in CRLF (files written on Windows).
 *
 * Request files come from users, so reading one is bounded and linear: the
 * file must be a regular file (a FIFO or /dev/zero would never end) of at
 * most ::REQUEST_FILE_MAX_BYTES, each line at most ::REQUEST_LINE_MAX_BYTES,
 * at most ::REQUEST_FILE_MAX_REQUESTS requests, and no NUL byte; the text
 * is read once and cut into lines in place, in one pass.
 */
#ifndef KVLAB_REQUESTS_H
#define KVLAB_REQUESTS_H

#include <stddef.h>

#include "err.h"

/** Largest max_new_tokens a request may ask for. */
#define REQUEST_MAX_NEW_TOKENS (1 << 20)

/** Largest request file read (16 MiB: about a million short requests). */
#define REQUEST_FILE_MAX_BYTES (16u << 20)

/** Longest line of a request file, newline excluded (64 KiB: far more text
 *  than the context of any model kvlab runs holds). */
#define REQUEST_LINE_MAX_BYTES (64u << 10)

/** Most requests in one file. */
#define REQUEST_FILE_MAX_REQUESTS (1 << 20)

/** Latest arrival a request file may give, in seconds (about 31 years). */
#define REQUEST_MAX_ARRIVAL_S 1e9

/** Latest arrival a request file may give, in steps. */
#define REQUEST_MAX_ARRIVAL_STEP (1L << 40)

/** How a file gives its arrivals. */
typedef enum {
    REQUEST_ARRIVAL_NONE,    /**< every request arrives at the start */
    REQUEST_ARRIVAL_STEPS,   /**< `@N`: the first step each may join */
    REQUEST_ARRIVAL_SECONDS  /**< `@Xs`: seconds after the start */
} RequestArrivalKind;

/** One line of a request file. */
typedef struct {
    int id;             /**< 0-based position among the file's requests */
    int line;           /**< 1-based line number in the file */
    int max_new_tokens; /**< most tokens to generate after the prompt */
    const char *prompt; /**< NUL-terminated UTF-8, points into RequestFile.text */
    long arrival_step;  /**< `@N`: the first step it may join (0: the first) */
    double arrival_s;   /**< `@Xs`: when it arrives, seconds after the start (0: at the start) */
} RequestSpec;

/** A parsed request file. */
typedef struct {
    RequestSpec *items; /**< [count] in file order */
    int count;          /**< number of requests */
    char *text;         /**< [bytes + 1] the file's text, lines cut in place */
    RequestArrivalKind arrivals; /**< whether its lines give arrivals, and in what */
} RequestFile;

/**
 * Reads and parses a request file.
 * @param rf    receives the requests
 * @param path  the file: a regular file (see infile_open()) of at most
 *              ::REQUEST_FILE_MAX_BYTES
 * @param err   receives "PATH:LINE: reason" on a malformed line, or why the
 *              file cannot be read
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int request_file_load(RequestFile *rf, const char *path, Err *err);

/**
 * Parses request-file text (copied; @p name is used in messages).
 * @param rf    receives the requests
 * @param text  the contents
 * @param len   their length in bytes
 * @param name  what to call the source in messages
 * @param err   receives "NAME:LINE: reason" on a malformed line
 * @return 0 on success, -1 on failure
 */
int request_file_parse(RequestFile *rf, const char *text, size_t len, const char *name, Err *err);

/**
 * Frees a parsed file.
 * @param rf  from request_file_load() or request_file_parse(), or zeroed
 */
void request_file_free(RequestFile *rf);

#endif
