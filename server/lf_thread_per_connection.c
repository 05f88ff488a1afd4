/* lf_thread_per_connection.c — the Thread-per-Connection strategy, for comparison.
 *
 * The group's own handles (listeners, the timer) are served by one thread, the acceptor,
 * running the Leader/Followers loop. A connection registered with lf_group_add_conn() gets
 * a private handle set (its own epoll instance, holding its socket and the handles added
 * for it later, a CGI pipe say) and a detached thread of its own, with a small stack, that
 * waits on that set and processes what it reports: the same non-blocking connection code
 * runs unchanged. A private set is a struct lf_group too, so that h->group, re-arming and
 * lf_group_add(h->group, ...) work as anywhere else.
 *
 * When the connection is closed or moves to another group, lf_group_detach() marks its
 * set, and the thread leaves after the callback returns, freeing the set, without touching
 * the handle again. The group keeps a list of private sets and a count of running threads;
 * stop waits for that count to reach zero (each private set holds the group's stop
 * eventfd, so a thread waiting in epoll_wait returns).
 */
#include "lf_group_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A connection's thread: the request path keeps ~17 KiB of buffer on the stack, matches
 * regex locations with PCRE2's JIT, up to 32 KiB of stack (regex.h), and calls zlib and
 * libmagic; AddressSanitizer makes every frame larger. */
#if defined(__SANITIZE_ADDRESS__)
#define LF_CONN_STACK_BYTES (1024 * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LF_CONN_STACK_BYTES (1024 * 1024)
#endif
#endif
#ifndef LF_CONN_STACK_BYTES
#define LF_CONN_STACK_BYTES (256 * 1024)
#endif

/* A connection's private set, holding the group's stop eventfd (level-triggered). */
static struct lf_group *tpc_set_create(struct lf_group *g)
{
    struct lf_group *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    memcpy(s->name, g->name, sizeof(s->name));
    s->strategy = g->strategy;
    s->ops = g->ops;
    s->nice = g->nice;
    s->n_threads = 1;
    s->stop_handle.fd = -1;
    s->tpc.parent = g;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->stop_handle};
    if (s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, g->stop_handle.fd, &ev) < 0) {
        int saved = errno;
        if (s->epfd >= 0)
            close(s->epfd);
        free(s);
        errno = saved;
        return NULL;
    }
    return s;
}

static void tpc_set_free(struct lf_group *s)
{
    close(s->epfd);
    free(s);
}

/* The parent's list of private sets. Lock held. */
static void tpc_link(struct lf_group *g, struct lf_group *s)
{
    s->tpc.prev = NULL;
    s->tpc.next = g->tpc.sets;
    if (g->tpc.sets)
        g->tpc.sets->tpc.prev = s;
    g->tpc.sets = s;
}

static void tpc_unlink(struct lf_group *g, struct lf_group *s)
{
    if (s->tpc.prev)
        s->tpc.prev->tpc.next = s->tpc.next;
    else
        g->tpc.sets = s->tpc.next;
    if (s->tpc.next)
        s->tpc.next->tpc.prev = s->tpc.prev;
}

/* A connection's thread leaves: counted out, and its set freed if the connection has
 * left it (else the connection still points at it: the group frees it when destroyed).
 * After the unlock nothing of the group is touched: stop() may return at once. */
static void tpc_leave(struct lf_group *s)
{
    struct lf_group *g = s->tpc.parent;
    bool detached = s->tpc.detached;
    pthread_mutex_lock(&g->lock);
    if (detached)
        tpc_unlink(g, s);
    atomic_fetch_sub_explicit(&g->tpc.running, 1, memory_order_relaxed);
    pthread_cond_broadcast(&g->tpc.left);
    pthread_mutex_unlock(&g->lock);
    if (detached)
        tpc_set_free(s);
}

static void *tpc_conn_main(void *arg)
{
    struct lf_group *s = arg;
    struct lf_group *g = s->tpc.parent;
    lf_thread_setup(g, "c", (long)s->tpc.index);

    struct epoll_event evs[LF_CONN_BATCH];
    for (;;) {
        int n = epoll_wait(s->epfd, evs, LF_CONN_BATCH, -1);
        atomic_fetch_add_explicit(&g->tpc.waits, 1, memory_order_relaxed);
        for (int i = 0; i < n; i++) {
            struct lf_handle *h = evs[i].data.ptr;
            if (h == &g->stop_handle)
                goto leave;
            atomic_fetch_add_explicit(&g->tpc.events, 1, memory_order_relaxed);
            (void)atomic_load_explicit(&h->handoff, memory_order_acquire);
            h->on_event(h, evs[i].events);
            /* The connection may be closed and freed, or served by another thread now:
             * only our set tells whether it is still ours. */
            if (s->tpc.detached)
                goto leave;
        }
    }
leave:
    tpc_leave(s);
    return NULL;
}

/* A connection's handle gets a private set and a thread; a handle added to a private set
 * (a connection's CGI pipe) is a plain add. */
static int tpc_add_conn(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    if (g->tpc.parent)
        return lf_group_add(g, h, events);
    struct lf_group *s = tpc_set_create(g);
    if (!s)
        return -errno;
    int rc = lf_group_add(s, h, events); /* h->group = s: set before the thread sees h */
    if (rc < 0) {
        h->group = g;
        tpc_set_free(s);
        return rc;
    }
    pthread_mutex_lock(&g->lock);
    tpc_link(g, s);
    bool stopping = g->stopping;
    if (!stopping) {
        s->tpc.index = g->tpc.next_index++;
        atomic_fetch_add_explicit(&g->tpc.running, 1, memory_order_relaxed);
        g->stats.handoffs++;
    }
    pthread_mutex_unlock(&g->lock);
    if (stopping)
        return 0; /* registered, unserved: the owner closes it after the stop */
    pthread_t tid;
    rc = pthread_create(&tid, &g->tpc.attr, tpc_conn_main, s);
    if (rc == 0)
        return 0;
    pthread_mutex_lock(&g->lock);
    tpc_unlink(g, s);
    atomic_fetch_sub_explicit(&g->tpc.running, 1, memory_order_relaxed);
    g->stats.handoffs--;
    pthread_cond_broadcast(&g->tpc.left);
    pthread_mutex_unlock(&g->lock);
    h->group = g;
    tpc_set_free(s);
    return -rc;
}

static int tpc_init(struct lf_group *g)
{
    pthread_cond_init(&g->tpc.left, NULL);
    pthread_attr_init(&g->tpc.attr);
    pthread_attr_setdetachstate(&g->tpc.attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&g->tpc.attr, LF_CONN_STACK_BYTES);
    return lf_leader_followers_init(g); /* the acceptor */
}

/* On a stopped group: frees the sets whose connections were there at the stop. */
static void tpc_fini(struct lf_group *g)
{
    while (g->tpc.sets) {
        struct lf_group *s = g->tpc.sets;
        g->tpc.sets = s->tpc.next;
        tpc_set_free(s);
    }
    lf_leader_followers_fini(g);
    pthread_attr_destroy(&g->tpc.attr);
    pthread_cond_destroy(&g->tpc.left);
}

static int tpc_start(struct lf_group *g)
{
    return lf_group_spawn(g, lf_leader_followers_main);
}

/* Connections' threads are detached: wait for the last to count itself out. */
static void tpc_join(struct lf_group *g)
{
    pthread_mutex_lock(&g->lock);
    while (atomic_load_explicit(&g->tpc.running, memory_order_relaxed) > 0)
        pthread_cond_wait(&g->tpc.left, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static unsigned tpc_threads(const struct lf_group *g)
{
    return g->n_threads + atomic_load_explicit(&g->tpc.running, memory_order_relaxed);
}

const struct lf_strategy_ops lf_thread_per_connection_ops = {
    .name = "Thread-per-Connection",
    .init = tpc_init,
    .fini = tpc_fini,
    .start = tpc_start,
    .wake = lf_leader_followers_wake,
    .join = tpc_join,
    .add_conn = tpc_add_conn,
    .threads = tpc_threads,
};
