#include "lab.h"

#include <stdio.h>
#include <string.h>

void lab_todo(const char *function, const char *what)
{
    /* Remember which functions have spoken, so that a stub called once per
     * token and layer does not flood the terminal. */
    static const char *seen[64];
    static int n_seen;
    int first = 1;
#pragma omp critical(lab_todo)
    {
        for (int i = 0; i < n_seen && first; i++)
            if (strcmp(seen[i], function) == 0)
                first = 0;
        if (first && n_seen < 64)
            seen[n_seen++] = function;
    }
    if (first)
        fprintf(stderr, "lab: TODO in %s: %s\n", function, what);
}
