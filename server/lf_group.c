/* lf_group.c — a thread group: its handle set, its threads, and the strategy they follow.
 *
 * What every strategy shares lives here: creating the handle set (an epoll instance) and
 * the stop eventfd in it, registering and re-arming handles (always EPOLLONESHOT),
 * naming threads and giving them the group's priority, statistics, and the order of
 * start, stop and destroy. How the threads share the set is the strategy's, one file
 * each behind struct lf_strategy_ops (lf_group_internal.h):
 *
 *   lf_leader_followers.c       the default, and the reference: the protocol is there
 *   lf_half_sync_half_async.c   one I/O thread queues ready handles for the workers
 *   lf_thread_per_connection.c  a thread and a private handle set per connection
 *
 * The operations are called at create, start, stop, destroy and when a connection is
 * added, never per event: each strategy's loop calls the handle's callback itself, and
 * lf_group_rearm() is one epoll_ctl whichever strategy runs.
 *
 * The hand-off of a handle between threads, whatever the strategy: the thread that arms
 * it stores its `handoff` (release), the thread that gets its event loads it (acquire).
 *
 * Reactivation without a system call (LF_REACTIVATE_EDGE, Leader/Followers only). A
 * connection's socket is registered once, edge-triggered (EPOLLET, EPOLLIN | EPOLLRDHUP,
 * EPOLLOUT added the first time it is waited for), and never disarmed by the kernel. The
 * pattern's deactivation moves into `edge_state`, one atomic word:
 *
 *   OWNED    a thread is processing the connection (or the connection waits on another of
 *            its handles, a pipe): no event of the socket is given to a thread;
 *   PENDING  an event came while OWNED (or one the connection was not waiting for);
 *   want     what the connection waits for (EPOLLIN, EPOLLOUT), set as it lets go;
 *   incarnation, bumped when the connection closes or leaves the set.
 *
 *   1. The leader gets an event; its data carries the handle and its incarnation. If the
 *      incarnation is not the handle's (the connection closed meanwhile: the memory of a
 *      connection is never freed while the group runs, so reading it is safe), the event
 *      is dropped. If the handle is not OWNED and waits for the event, one compare-and-swap
 *      makes it OWNED and the leader promotes a follower and processes it, as with one-shot
 *      handles. Otherwise the same compare-and-swap sets PENDING and the leader goes on to
 *      the next event: nothing is lost, it is recorded for the owner.
 *   2. Processing ends with lf_group_reactivate(want, drained). A socket that was read to
 *      EAGAIN (or a short read) for EPOLLIN, or written to EAGAIN for EPOLLOUT, will raise a
 *      new edge when more comes; then one compare-and-swap clears OWNED and sets want, and
 *      no system call is made. If it was not drained, or PENDING is set (data came while
 *      the thread worked), the thread keeps the handle, clears PENDING, and runs the
 *      callback again as soon as the current one returns (a read that finds EAGAIN costs
 *      what a re-arm would, and only then). The thread that owns a handle is the only one
 *      that can let it go, so it is never processed by two threads at once.
 *
 * The compare-and-swaps are acquire/release: they order one owner's work before the next
 * owner's, as `handoff` does for one-shot handles.
 *
 * Shutdown: lf_group_stop() sets the group's stop flag, has the strategy wake the threads
 * waiting on its own semaphores or condition variables, and makes the level-triggered
 * stop eventfd readable. It is in the group's set (and in every private set), so whoever
 * waits in epoll_wait returns. Threads that are processing finish their event and then
 * leave; stop() joins the group's threads, then the strategy waits for any others. Events
 * already fetched or queued are dropped: their handles belong to connections the caller
 * closes after the stop.
 */
#include "lf_group_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

/* ThreadSanitizer reads a descriptor in epoll_ctl before the call and sees no ordering
 * between EPOLL_CTL_MOD and the epoll_wait that reports the handle (it models only ADD as
 * a release). So when the next thread closes the socket, it reports a race with a re-arm
 * that the kernel has ordered (the call holds its own reference to the file). TSan ignores
 * the reads of that one call, in lf_group_rearm, and nothing else; other builds have no
 * such call. */
#if defined(__SANITIZE_THREAD__)
#define LF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LF_TSAN 1
#endif
#endif
#ifdef LF_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define LF_TSAN_IGNORE_READS_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define LF_TSAN_IGNORE_READS_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define LF_TSAN_IGNORE_READS_BEGIN() ((void)0)
#define LF_TSAN_IGNORE_READS_END() ((void)0)
#endif

/* Indexed by enum lf_strategy. */
static const struct lf_strategy_ops *const lf_strategies[] = {
    [LF_STRATEGY_LEADER_FOLLOWERS] = &lf_leader_followers_ops,
    [LF_STRATEGY_HALF_SYNC_HALF_ASYNC] = &lf_half_sync_half_async_ops,
    [LF_STRATEGY_THREAD_PER_CONNECTION] = &lf_thread_per_connection_ops,
};

static const struct lf_strategy_ops *lf_strategy_ops(enum lf_strategy s)
{
    if ((unsigned)s >= sizeof(lf_strategies) / sizeof(lf_strategies[0]))
        return NULL;
    return lf_strategies[s];
}

/* The handle set with the stop eventfd in it. Returns 0 or -errno. */
static int lf_group_open_set(struct lf_group *g)
{
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (g->epfd < 0)
        return -errno;
    g->stop_handle.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->stop_handle.fd < 0)
        return -errno;
    g->stop_handle.group = g;
    /* Level-triggered on purpose: once written, every waiting thread sees it. */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->stop_handle};
    if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->stop_handle.fd, &ev) < 0)
        return -errno;
    return 0;
}

/* Frees what create allocated, the strategy's part excepted. */
static void lf_group_free(struct lf_group *g)
{
    if (g->stop_handle.fd >= 0)
        close(g->stop_handle.fd);
    if (g->epfd >= 0)
        close(g->epfd);
    free(g->threads);
    free(g);
}

struct lf_group *lf_group_create(const char *name, unsigned threads, enum lf_strategy strategy,
                                 enum lf_promotion promo, int nice)
{
    const struct lf_strategy_ops *ops = lf_strategy_ops(strategy);
    if (threads == 0 || !ops) {
        errno = EINVAL;
        return NULL;
    }
    if (strategy == LF_STRATEGY_THREAD_PER_CONNECTION)
        threads = 1; /* the acceptor: connections bring their own threads */
    struct lf_group *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->strategy = strategy;
    g->ops = ops;
    g->promo = promo;
    g->nice = nice;
    g->n_threads = threads;
    g->epfd = -1;
    g->stop_handle.fd = -1;
    int rc = -ENOMEM;
    g->threads = calloc(threads, sizeof(*g->threads));
    if (!g->threads || (rc = lf_group_open_set(g)) < 0)
        goto fail;
    for (unsigned i = 0; i < threads; i++) {
        g->threads[i].group = g;
        g->threads[i].index = i;
    }
    pthread_mutex_init(&g->lock, NULL);
    rc = ops->init(g);
    if (rc == 0)
        return g;
    pthread_mutex_destroy(&g->lock);
fail:
    lf_group_free(g);
    errno = -rc;
    return NULL;
}

void lf_group_number_threads(struct lf_group *g, unsigned first)
{
    for (unsigned i = 0; i < g->n_threads; i++)
        g->threads[i].index = first + i;
}

void lf_group_set_reactivation(struct lf_group *g, enum lf_reactivation react)
{
    g->react = g->strategy == LF_STRATEGY_LEADER_FOLLOWERS ? react : LF_REACTIVATE_ONESHOT;
}

/* Both read what they need of h before the release store: from then on the next thread
 * may own h (move it to another group, close it), and only what came before the store is
 * ordered before that thread's work. */
int lf_group_add(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    h->group = g;
    int fd = h->fd;
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = h};
    atomic_store_explicit(&h->handoff, 1, memory_order_release);
    return epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int lf_group_rearm(struct lf_handle *h, uint32_t events)
{
    int epfd = h->group->epfd, fd = h->fd;
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = h};
    atomic_store_explicit(&h->handoff, 1, memory_order_release);
    LF_TSAN_IGNORE_READS_BEGIN();
    int rc = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
    LF_TSAN_IGNORE_READS_END();
    return rc;
}

/* --- edge-triggered handles ----------------------------------------------------------- */

#define EDGE_WANT 0xffffu      /* the epoll events waited for (EPOLLRDHUP is 0x2000) */
#define EDGE_OWNED (1u << 16)
#define EDGE_PENDING (1u << 17)
#define EDGE_INC_SHIFT 18      /* the incarnation: the 14 bits above */
#define EDGE_DATA_FLAG (1ull << 62)
#define EDGE_DATA_INC_SHIFT 48 /* a user-space pointer has 47 bits */

/* The callbacks that run again when the current one returns. A callback reactivates one
 * connection as its last act, but one may start several and end each one's event (the
 * listener, an accept batch of them: a proxied request re-arms a kept upstream socket),
 * so every handle kept is remembered, never only the last. */
static _Thread_local struct {
    struct lf_handle *h;
    uint32_t events;
} lf_again[LF_AGAIN_MAX];
static _Thread_local unsigned lf_n_again;

struct lf_handle *lf_event_handle(uint64_t data)
{
    return (struct lf_handle *)(uintptr_t)(data & ((1ull << EDGE_DATA_INC_SHIFT) - 1));
}

bool lf_edge_claim(uint64_t data, uint32_t events)
{
    if (!(data & EDGE_DATA_FLAG))
        return true; /* one-shot: the kernel disarmed it */
    struct lf_handle *h = lf_event_handle(data);
    uint32_t inc = (uint32_t)(data >> EDGE_DATA_INC_SHIFT) & 0x3fffu;
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_acquire);
    for (;;) {
        if (s >> EDGE_INC_SHIFT != inc)
            return false; /* closed, or moved to another set, since */
        uint32_t want = s & EDGE_WANT;
        uint32_t wake = want ? want | EPOLLHUP | EPOLLERR : 0;
        bool take = !(s & EDGE_OWNED) && (events & wake);
        uint32_t n = take ? (s & ~EDGE_PENDING) | EDGE_OWNED : s | EDGE_PENDING;
        if (n == s)
            return false;
        if (atomic_compare_exchange_weak_explicit(&h->edge_state, &s, n, memory_order_acq_rel,
                                                  memory_order_acquire))
            return take;
    }
}

bool lf_take_again(struct lf_handle **h, uint32_t *events)
{
    if (lf_n_again == 0)
        return false;
    lf_n_again--;
    *h = lf_again[lf_n_again].h;
    *events = lf_again[lf_n_again].events;
    return true;
}

/* Keep h to run again. More than LF_AGAIN_MAX in one callback would break lf_group.h's
 * rule (listener.c checks its batch against it): a bug, stopped here rather than left to
 * hang a connection whose handle nobody owns. */
static void keep_again(struct lf_handle *h, uint32_t events)
{
    for (unsigned i = 0; i < lf_n_again; i++)
        if (lf_again[i].h == h) {
            lf_again[i].events = events;
            return;
        }
    if (lf_n_again < LF_AGAIN_MAX) {
        lf_again[lf_n_again].h = h;
        lf_again[lf_n_again].events = events;
        lf_n_again++;
        return;
    }
    abort();
}

/* The mask the kernel watches: EPOLLOUT only once it has been waited for. */
static int edge_arm(struct lf_handle *h, int op, uint32_t events)
{
    h->armed |= (uint16_t)(EPOLLIN | EPOLLRDHUP | (events & EPOLLOUT));
    uint32_t inc = atomic_load_explicit(&h->edge_state, memory_order_relaxed) >> EDGE_INC_SHIFT;
    struct epoll_event ev = {
        .events = h->armed | EPOLLET,
        .data.u64 = (uint64_t)(uintptr_t)h | EDGE_DATA_FLAG |
                    ((uint64_t)inc << EDGE_DATA_INC_SHIFT),
    };
    return epoll_ctl(h->group->epfd, op, h->fd, &ev) < 0 ? -errno : 0;
}

/* Register a connection's handle, edge-triggered, waiting for `events`, not owned. */
static int edge_add(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    h->group = g;
    h->edge = true;
    h->armed = 0;
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
    /* Before the kernel knows it, nobody else can see it: the store publishes h. */
    atomic_store_explicit(&h->edge_state, (s & ~(EDGE_WANT | EDGE_OWNED | EDGE_PENDING)) |
                                              (events & EDGE_WANT),
                          memory_order_release);
    return edge_arm(h, EPOLL_CTL_ADD, events);
}

int lf_group_reactivate(struct lf_handle *h, uint32_t events, bool drained)
{
    if (!h->edge)
        return lf_group_rearm(h, events);
    if ((events & EPOLLOUT) && !(h->armed & EPOLLOUT)) {
        /* Still ours: the kernel also reports what is ready now, seen below as PENDING. */
        int rc = edge_arm(h, EPOLL_CTL_MOD, events);
        if (rc < 0)
            return rc;
    }
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
    for (;;) {
        uint32_t base = s & ~(EDGE_WANT | EDGE_PENDING);
        bool again = !drained || (s & EDGE_PENDING);
        uint32_t n = (again ? base : base & ~EDGE_OWNED) | (events & EDGE_WANT);
        if (atomic_compare_exchange_weak_explicit(&h->edge_state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            if (again)
                keep_again(h, events);
            return 0;
        }
    }
}

int lf_group_park(struct lf_handle *h)
{
    if (!h->edge)
        return 0; /* one-shot: the kernel disarmed it as it reported the event */
    if (!(h->armed & EPOLLOUT)) { /* what the wake's re-arm will report */
        int rc = edge_arm(h, EPOLL_CTL_MOD, EPOLLOUT);
        if (rc < 0)
            return rc;
    }
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&h->edge_state, &s,
                                                  s & ~(EDGE_WANT | EDGE_OWNED),
                                                  memory_order_acq_rel, memory_order_relaxed))
        ;
    return 0;
}

/* An edge-triggered handle is woken by wanting EPOLLOUT and re-registering the same mask:
 * EPOLL_CTL_MOD makes the kernel look at the socket again and report what is ready, as a
 * new edge would. */
bool lf_group_wake(struct lf_handle *h)
{
    if (!h->edge)
        return lf_group_rearm(h, EPOLLOUT) == 0;
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_acquire);
    do {
        if (s & (EDGE_OWNED | EDGE_WANT))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&h->edge_state, &s, s | EPOLLOUT,
                                                    memory_order_acq_rel,
                                                    memory_order_acquire));
    uint32_t inc = s >> EDGE_INC_SHIFT;
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLRDHUP | EPOLLOUT | EPOLLET,
        .data.u64 = (uint64_t)(uintptr_t)h | EDGE_DATA_FLAG |
                    ((uint64_t)inc << EDGE_DATA_INC_SHIFT),
    };
    return epoll_ctl(h->group->epfd, EPOLL_CTL_MOD, h->fd, &ev) == 0;
}

bool lf_group_claim(struct lf_handle *h)
{
    if (!h->edge)
        return true;
    uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
    for (;;) {
        if (s & EDGE_OWNED)
            return false;
        if (atomic_compare_exchange_weak_explicit(&h->edge_state, &s, s | EDGE_OWNED,
                                                  memory_order_acq_rel, memory_order_relaxed))
            return true;
    }
}

/* --- connections ------------------------------------------------------------------------ */

int lf_group_add_conn(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    if (g->react == LF_REACTIVATE_EDGE)
        return edge_add(g, h, events);
    h->edge = false;
    if (!g->ops->add_conn)
        return lf_group_add(g, h, events);
    return g->ops->add_conn(g, h, events);
}

void lf_group_detach(struct lf_handle *h, bool closing)
{
    struct lf_group *g = h->group;
    if (h->edge) { /* events of this incarnation still on their way are dropped */
        uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
        uint32_t inc = ((s >> EDGE_INC_SHIFT) + 1) & 0x3fffu;
        atomic_store_explicit(&h->edge_state, (inc << EDGE_INC_SHIFT) | EDGE_OWNED,
                              memory_order_release);
    }
    if (g->tpc.parent)
        g->tpc.detached = true; /* the private set's thread leaves when this event is done */
    if (!closing)
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, h->fd, NULL);
}

int lf_group_add_handle(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    if (g->react == LF_REACTIVATE_EDGE)
        return edge_add(g, h, events);
    h->edge = false;
    return lf_group_add(g, h, events);
}

void lf_group_remove(struct lf_handle *h, bool closing)
{
    if (h->edge) { /* events of this incarnation still on their way are dropped */
        uint32_t s = atomic_load_explicit(&h->edge_state, memory_order_relaxed);
        uint32_t inc = ((s >> EDGE_INC_SHIFT) + 1) & 0x3fffu;
        atomic_store_explicit(&h->edge_state, (inc << EDGE_INC_SHIFT) | EDGE_OWNED,
                              memory_order_release);
    }
    if (!closing)
        epoll_ctl(h->group->epfd, EPOLL_CTL_DEL, h->fd, NULL);
}

bool lf_group_is_edge(const struct lf_group *g)
{
    return g->react == LF_REACTIVATE_EDGE;
}

bool lf_group_is_private(const struct lf_group *g)
{
    return g->tpc.parent != NULL;
}

void lf_thread_setup(struct lf_group *g, const char *prefix, long n)
{
    char suffix[24], tname[16];
    if (n < 0)
        snprintf(suffix, sizeof(suffix), "%.3s", prefix);
    else
        snprintf(suffix, sizeof(suffix), "%.3s%ld", prefix, n);
    /* Linux allows 15 characters: a long name is cut, on purpose. */
    if (snprintf(tname, sizeof(tname), "%.12s-%s", g->name, suffix) >= 0)
        pthread_setname_np(pthread_self(), tname);
    /* On Linux a nice value belongs to a thread: PRIO_PROCESS with a thread id sets ours. */
    if (g->nice != 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), g->nice) < 0) {
        pthread_mutex_lock(&g->lock);
        g->stats.priority_failures++;
        pthread_mutex_unlock(&g->lock);
    }
}

/* --- the group's life ------------------------------------------------------------------ */

int lf_group_spawn(struct lf_group *g, void *(*fn)(void *))
{
    for (unsigned i = 0; i < g->n_threads; i++) {
        int rc = pthread_create(&g->threads[i].thread, NULL, fn, &g->threads[i]);
        if (rc != 0) {
            g->n_threads = i; /* stop() joins only the threads that exist */
            g->started = i > 0;
            return -rc;
        }
    }
    g->started = true;
    return 0;
}

int lf_group_start(struct lf_group *g)
{
    return g->ops->start(g);
}

void lf_group_stop(struct lf_group *g)
{
    pthread_mutex_lock(&g->lock);
    g->stopping = true;
    g->ops->wake(g);
    pthread_mutex_unlock(&g->lock);
    uint64_t one = 1;
    ssize_t w = write(g->stop_handle.fd, &one, sizeof(one));
    (void)w;
    if (g->started) {
        for (unsigned i = 0; i < g->n_threads; i++)
            pthread_join(g->threads[i].thread, NULL);
        g->started = false;
    }
    if (g->ops->join)
        g->ops->join(g);
}

void lf_group_destroy(struct lf_group *g)
{
    if (!g)
        return;
    lf_group_stop(g); /* at once if stopped already */
    g->ops->fini(g);
    pthread_mutex_destroy(&g->lock);
    lf_group_free(g);
}

/* --- what the group tells ---------------------------------------------------------------- */

void lf_group_get_stats(struct lf_group *g, struct lf_group_stats *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->stats;
    pthread_mutex_unlock(&g->lock);
    out->events += atomic_load_explicit(&g->tpc.events, memory_order_relaxed);
    out->waits += atomic_load_explicit(&g->tpc.waits, memory_order_relaxed);
}

const char *lf_group_name(const struct lf_group *g)
{
    return g->name;
}

enum lf_strategy lf_group_strategy(const struct lf_group *g)
{
    return g->strategy;
}

const char *lf_strategy_name(enum lf_strategy s)
{
    const struct lf_strategy_ops *ops = lf_strategy_ops(s);
    return ops ? ops->name : "?";
}

unsigned lf_group_threads(const struct lf_group *g)
{
    return g->ops->threads(g);
}
