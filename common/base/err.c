#include "err.h"

#include <stdio.h>
#include <string.h>

int err_set(Err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
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
    return -1;
}
