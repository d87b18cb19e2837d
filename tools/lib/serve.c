#include "serve.h"

#include "batching.h"
#include "paged.h"

int serve_check(ServeChapter ch, const ServingRun *run, Err *err)
{
    return ch == SERVE_PAGED ? paged_check(run, err) : batching_check(run, err);
}

int serve_run(ServeChapter ch, ServingRun *run, FILE *log, Err *err)
{
    if (ch == SERVE_PAGED) {
        PagedServer *server = NULL;
        int rc = paged_serve(run, &server, log, err);
        paged_close(server);
        return rc;
    }
    BatchingState *state = NULL;
    int rc = batching_serve(run, &state, log, err);
    batching_close(state);
    return rc;
}
