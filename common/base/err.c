#include "err.h"

#include <stdio.h>
#include <string.h>

/* A message is one line even when it quotes what a user typed: a newline
 * or another control byte in an option value or a file name would
 * otherwise split it (or move the cursor). */
static void keep_one_line(char *msg)
{
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7F)
            *p = '?';
}

int err_set(Err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        keep_one_line(err->msg);
    }
    return -1;
}

int err_prefix(Err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256];
    char old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Join in a buffer large enough for both, then keep what fits. */
    char joined[sizeof prefix + sizeof old + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, old);
    memcpy(err->msg, joined, sizeof err->msg - 1);
    err->msg[sizeof err->msg - 1] = '\0';
    keep_one_line(err->msg);
    return -1;
}
