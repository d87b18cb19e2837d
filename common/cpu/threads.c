#include "threads.h"

#include <pthread.h>
#include <string.h>

/* The started threads wait here until all of them exist, so that the check
 * holds n threads at once, as an OpenMP team does. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int open;
} Gate;

static void *wait_at_gate(void *arg)
{
    Gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->opened, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

int threads_check(int n, Err *err)
{
    if (n > THREADS_MAX)
        return err_set(err, "cannot start %d threads: kvlab uses at most %d (set --threads or OMP_NUM_THREADS lower)",
                       n, THREADS_MAX);
    pthread_t ids[THREADS_MAX]; /* [n - 1] the threads beside this one */
    Gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    int started = 0, rc = 0;
    while (started < n - 1 && (rc = pthread_create(&ids[started], NULL, wait_at_gate, &g)) == 0)
        started++;
    pthread_mutex_lock(&g.lock);
    g.open = 1;
    pthread_cond_broadcast(&g.opened);
    pthread_mutex_unlock(&g.lock);
    for (int i = 0; i < started; i++)
        pthread_join(ids[i], NULL);
    if (rc)
        return err_set(err, "cannot start %d threads: this machine started only %d (%s); ask for fewer with --threads",
                       n, started + 1, strerror(rc));
    return 0;
}
