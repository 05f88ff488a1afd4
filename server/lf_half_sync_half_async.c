/* lf_half_sync_half_async.c — the Half-Sync/Half-Async strategy, for comparison.
 *
 * The same handle set, one-shot handles and re-arming as Leader/Followers, but the roles
 * are fixed: one I/O thread (the asynchronous layer) waits on the set and puts each ready
 * handle, with its events, on a bounded queue (a ring of LF_QUEUE_SIZE under the group's
 * lock); N workers (the synchronous layer) take handles from the queue and process them.
 * The I/O thread does no work on a handle but queue it, and waits for room when the queue
 * is full (it cannot grow past the handles in the set: each is queued at most once until
 * re-armed). Every event crosses the queue: a lock and a wake-up per event, the cost
 * Leader/Followers exists to avoid. N + 1 threads.
 */
#include "lf_group_internal.h"

#include <errno.h>
#include <stdlib.h>

static int hsha_init(struct lf_group *g)
{
    g->hsha.ring = calloc(LF_QUEUE_SIZE, sizeof(*g->hsha.ring));
    if (!g->hsha.ring)
        return -ENOMEM;
    pthread_cond_init(&g->hsha.ready, NULL);
    pthread_cond_init(&g->hsha.room, NULL);
    return 0;
}

static void hsha_fini(struct lf_group *g)
{
    pthread_cond_destroy(&g->hsha.room);
    pthread_cond_destroy(&g->hsha.ready);
    free(g->hsha.ring);
}

/* The asynchronous layer: wait on the set, queue what is ready, never process. */
static void *hsha_io_main(void *arg)
{
    struct lf_group *g = arg;
    lf_thread_setup(g, "io", -1);
    struct epoll_event evs[LF_BATCH];
    bool stopping = false;
    while (!stopping) {
        int n = epoll_wait(g->epfd, evs, LF_BATCH, -1);
        pthread_mutex_lock(&g->lock);
        g->stats.waits++;
        for (int i = 0; i < n && !g->stopping; i++) {
            if (evs[i].data.ptr == &g->stop_handle) {
                g->stopping = true;
                pthread_cond_broadcast(&g->hsha.ready);
                break;
            }
            while (g->hsha.len == LF_QUEUE_SIZE && !g->stopping)
                pthread_cond_wait(&g->hsha.room, &g->lock);
            if (g->stopping)
                break;
            unsigned tail = (g->hsha.head + g->hsha.len) % LF_QUEUE_SIZE;
            g->hsha.ring[tail] = (struct lf_ready){evs[i].data.ptr, evs[i].events};
            g->hsha.len++;
            g->stats.handoffs++;
            pthread_cond_signal(&g->hsha.ready);
        }
        stopping = g->stopping;
        pthread_mutex_unlock(&g->lock);
    }
    return NULL;
}

/* The synchronous layer: take a ready handle from the queue and process it. */
static void *hsha_worker_main(void *arg)
{
    struct lf_thread *t = arg;
    struct lf_group *g = t->group;
    lf_thread_setup(g, "", (long)t->index);

    pthread_mutex_lock(&g->lock);
    for (;;) {
        while (g->hsha.len == 0 && !g->stopping)
            pthread_cond_wait(&g->hsha.ready, &g->lock);
        if (g->stopping)
            break;
        struct lf_ready r = g->hsha.ring[g->hsha.head];
        g->hsha.head = (g->hsha.head + 1) % LF_QUEUE_SIZE;
        if (g->hsha.len-- == LF_QUEUE_SIZE)
            pthread_cond_signal(&g->hsha.room);
        g->stats.events++;
        pthread_mutex_unlock(&g->lock);
        (void)atomic_load_explicit(&r.h->handoff, memory_order_acquire);
        r.h->on_event(r.h, r.events);
        pthread_mutex_lock(&g->lock);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* The workers first, then the I/O thread that feeds them. */
static int hsha_start(struct lf_group *g)
{
    int rc = lf_group_spawn(g, hsha_worker_main);
    if (rc < 0)
        return rc;
    rc = pthread_create(&g->hsha.io_thread, NULL, hsha_io_main, g);
    if (rc != 0)
        return -rc;
    g->hsha.io_started = true;
    return 0;
}

/* Stopping, lock held: workers waiting on an empty queue, or the I/O thread on a full one. */
static void hsha_wake(struct lf_group *g)
{
    pthread_cond_broadcast(&g->hsha.ready);
    pthread_cond_broadcast(&g->hsha.room);
}

static void hsha_join(struct lf_group *g)
{
    if (g->hsha.io_started)
        pthread_join(g->hsha.io_thread, NULL);
    g->hsha.io_started = false;
}

static unsigned hsha_threads(const struct lf_group *g)
{
    return g->n_threads + 1; /* the I/O thread */
}

const struct lf_strategy_ops lf_half_sync_half_async_ops = {
    .name = "Half-Sync/Half-Async",
    .init = hsha_init,
    .fini = hsha_fini,
    .start = hsha_start,
    .wake = hsha_wake,
    .join = hsha_join,
    .threads = hsha_threads,
};
