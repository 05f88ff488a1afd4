/* lf_group.c — a thread group's handle set, shared by one of three strategies.
 *
 * LEADER/FOLLOWERS (the default). A group is N threads and one handle set (an epoll
 * instance). At any moment at most one thread, the leader, waits for events on the set;
 * the others are either processing an event or waiting, as followers, for their turn to
 * lead. When the leader gets an event:
 *
 *   1. the handle is already deactivated: every handle is registered EPOLLONESHOT, so the
 *      kernel disarms it as it reports the event and no other thread can be handed it;
 *   2. the leader promotes a follower to be the next leader, which goes back to epoll;
 *   3. the former leader processes the event itself, on its own stack, with no queue and
 *      no hand-off of the work to another thread;
 *   4. processing ends by reactivating the handle (lf_group_rearm) if it lives on, and the
 *      thread rejoins the group: it leads at once if nobody does, else it follows.
 *
 * Promotion is LIFO by default: followers wait on their own semaphores in a stack, and the
 * most recently active thread, whose cache is warmest, is woken first (the protocol of the
 * Leader/Followers paper). LF_PROMOTE_CONDVAR replaces it with one condition variable, so
 * the benchmark can measure the difference.
 *
 * Batching: a leader asks epoll for up to LF_BATCH events. It takes the first and leaves
 * the rest in the group, under the group's lock, for the next leaders: a handle that is
 * already ready costs no epoll_wait. Each event is still processed by exactly one thread,
 * and the leader still promotes before it processes.
 *
 * HALF-SYNC/HALF-ASYNC. The same handle set, one-shot handles and re-arming, but the
 * roles are fixed: one I/O thread (the asynchronous layer) waits on the set and puts each
 * ready handle, with its events, on a bounded queue (a ring of LF_QUEUE_SIZE under the
 * group's lock); N workers (the synchronous layer) take handles from the queue and process
 * them. The I/O thread does no work on a handle but queue it, and waits for room when
 * the queue is full (it cannot grow past the handles in the set: each is queued at most
 * once until re-armed). Every event crosses the queue: a lock and a wake-up per event,
 * the cost Leader/Followers exists to avoid.
 *
 * THREAD-PER-CONNECTION. The group's own handles (listeners, the timer) are served by one
 * thread running the Leader/Followers loop above. A connection registered with
 * lf_group_add_conn() gets a private handle set (its own epoll instance, holding its
 * socket and the handles added for it later, a CGI pipe say) and a detached thread of its
 * own, with a small stack, that waits on that set and processes what it reports. When the
 * connection is closed or moves to another group, lf_group_detach() marks its set, and
 * the thread leaves after the callback returns, freeing the set, without touching the
 * handle again. The group keeps a list of private sets and a count of running threads.
 *
 * The hand-off of a handle between threads, whatever the strategy: the thread that arms
 * it stores its `handoff` (release), the thread that gets its event loads it (acquire).
 *
 * Shutdown: lf_group_stop() sets the group's stop flag, wakes every waiting thread, and
 * makes a level-triggered eventfd readable. It is in the group's set and in every private
 * set, so whoever waits in epoll_wait returns. Threads that are processing finish their
 * event and then leave; stop() joins the group's threads and waits for the count of
 * connections' threads to reach zero. Events already fetched or queued are dropped: their
 * handles belong to connections the caller closes after the stop.
 */
#include "lf_group.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#define LF_BATCH 32
#define LF_QUEUE_SIZE 1024 /* Half-Sync/Half-Async: ready handles waiting for a worker */
#define LF_CONN_BATCH 4    /* a connection's set: its socket, a pipe, the stop eventfd */

/* A connection's thread: the request path keeps ~17 KiB of buffer on the stack and calls
 * zlib and libmagic (glibc's regex allocas up to a quarter of the stack); AddressSanitizer
 * makes every frame larger. */
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

struct lf_thread {
    struct lf_group *group;
    pthread_t thread;
    sem_t wake;                     /* a follower sleeps here until promoted or stopped */
    struct lf_thread *next_follower; /* the follower stack, most recent on top */
    unsigned index;
};

/* Half-Sync/Half-Async: a handle the I/O thread found ready. */
struct lf_ready {
    struct lf_handle *h;
    uint32_t events;
};

/* A group, or (Thread-per-Connection) a connection's private set: then only name, epfd,
 * nice, strategy and the tpc fields marked "private set" are used. */
struct lf_group {
    char name[32];
    int epfd;
    struct lf_handle stop_handle; /* an eventfd, readable once the group is stopping */
    enum lf_strategy strategy;
    enum lf_promotion promo;
    int nice; /* every thread's priority (a service class's) */
    unsigned n_threads; /* the group's own: leaders/followers, workers, or the acceptor */
    struct lf_thread *threads;
    bool started;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t follow; /* LF_PROMOTE_CONDVAR: followers wait here */
    struct lf_thread *leader; /* the leader, or the follower promoted to be; NULL if none */
    struct lf_thread *followers; /* LF_PROMOTE_LIFO: stack of waiting followers */
    unsigned n_waiting;          /* followers waiting, in either mode */
    bool stopping;
    struct epoll_event events[LF_BATCH]; /* events fetched but not yet taken by a leader */
    int ev_pos, ev_n;
    struct lf_group_stats stats;

    struct { /* Half-Sync/Half-Async (under lock, but the thread itself) */
        pthread_t io_thread;
        bool io_started;
        pthread_cond_t ready;  /* workers wait here for the queue to fill */
        pthread_cond_t room;   /* the I/O thread waits here while it is full */
        struct lf_ready *ring; /* LF_QUEUE_SIZE entries */
        unsigned head, len;
    } hsha;

    struct { /* Thread-per-Connection */
        pthread_attr_t attr;       /* detached, LF_CONN_STACK_BYTES */
        struct lf_group *sets;     /* private sets not freed yet (under lock) */
        atomic_uint running;       /* connections' threads running (changed under lock) */
        unsigned next_index;       /* the number in the next thread's name (under lock) */
        pthread_cond_t left;       /* signalled when a connection's thread leaves */
        atomic_uint_least64_t events, waits; /* counted by the connections' threads */
        /* private set: */
        struct lf_group *parent;     /* the group it belongs to */
        struct lf_group *prev, *next; /* in the parent's list */
        unsigned index;              /* its thread's number */
        bool detached;               /* the connection left: its thread is to leave */
    } tpc;
};

struct lf_group *lf_group_create(const char *name, unsigned threads, enum lf_strategy strategy,
                                 enum lf_promotion promo, int nice)
{
    if (threads == 0) {
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
    g->promo = promo;
    g->nice = nice;
    g->n_threads = threads;
    g->epfd = -1;
    g->stop_handle.fd = -1;
    g->threads = calloc(threads, sizeof(*g->threads));
    if (!g->threads)
        goto fail;
    if (strategy == LF_STRATEGY_HALF_SYNC_HALF_ASYNC &&
        !(g->hsha.ring = calloc(LF_QUEUE_SIZE, sizeof(*g->hsha.ring))))
        goto fail;
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (g->epfd < 0)
        goto fail;
    g->stop_handle.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (g->stop_handle.fd < 0)
        goto fail;
    g->stop_handle.group = g;
    /* Level-triggered on purpose: once written, every leader sees it. */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->stop_handle};
    if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->stop_handle.fd, &ev) < 0)
        goto fail;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->follow, NULL);
    pthread_cond_init(&g->hsha.ready, NULL);
    pthread_cond_init(&g->hsha.room, NULL);
    pthread_cond_init(&g->tpc.left, NULL);
    pthread_attr_init(&g->tpc.attr);
    pthread_attr_setdetachstate(&g->tpc.attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&g->tpc.attr, LF_CONN_STACK_BYTES);
    for (unsigned i = 0; i < threads; i++) {
        g->threads[i].group = g;
        g->threads[i].index = i;
        sem_init(&g->threads[i].wake, 0, 0);
    }
    return g;
fail:;
    int saved = errno;
    if (g->stop_handle.fd >= 0)
        close(g->stop_handle.fd);
    if (g->epfd >= 0)
        close(g->epfd);
    free(g->hsha.ring);
    free(g->threads);
    free(g);
    errno = saved;
    return NULL;
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

/* Name the calling thread "<group>-<suffix>" and give it the group's nice value. */
/* Name the calling thread "<group>-<prefix><n>" (n < 0: no number) and give it the
 * group's priority. */
static void lf_thread_setup(struct lf_group *g, const char *prefix, long n)
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

/* --- Leader/Followers ----------------------------------------------------------------- */

/* Wait, as a follower, until promoted or stopped. Called and returns with the lock held. */
static void lf_follow(struct lf_group *g, struct lf_thread *t)
{
    g->n_waiting++;
    if (g->promo == LF_PROMOTE_CONDVAR) {
        pthread_cond_wait(&g->follow, &g->lock);
        g->n_waiting--;
        return;
    }
    t->next_follower = g->followers;
    g->followers = t;
    pthread_mutex_unlock(&g->lock);
    while (sem_wait(&t->wake) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&g->lock);
    /* Whoever posted our semaphore already took us off the stack and counted us out. */
}

/* The leader gives up leadership before it processes an event. Lock held. */
static void lf_promote(struct lf_group *g)
{
    if (g->promo == LF_PROMOTE_CONDVAR) {
        g->leader = NULL;
        if (g->n_waiting) {
            g->stats.handoffs++;
            pthread_cond_signal(&g->follow);
        }
        return;
    }
    struct lf_thread *f = g->followers;
    if (!f) {
        g->leader = NULL;
        return;
    }
    g->followers = f->next_follower;
    g->n_waiting--;
    g->leader = f; /* leadership passes directly: no other thread can take it meanwhile */
    g->stats.handoffs++;
    sem_post(&f->wake);
}

/* Become the leader, waiting as a follower while another thread leads.
 * Returns false when the group is stopping. Lock held throughout (except while waiting). */
static bool lf_lead(struct lf_group *g, struct lf_thread *t)
{
    for (;;) {
        if (g->stopping)
            return false;
        if (g->leader == t)
            return true;
        if (!g->leader) {
            g->leader = t;
            return true;
        }
        lf_follow(g, t);
    }
}

static void *lf_thread_main(void *arg)
{
    struct lf_thread *t = arg;
    struct lf_group *g = t->group;
    lf_thread_setup(g, "", (long)t->index);

    pthread_mutex_lock(&g->lock);
    while (lf_lead(g, t)) {
        if (g->ev_pos == g->ev_n) {
            /* Only the leader touches the event array outside the lock, and there is one. */
            pthread_mutex_unlock(&g->lock);
            int n = epoll_wait(g->epfd, g->events, LF_BATCH, -1);
            pthread_mutex_lock(&g->lock);
            g->stats.waits++;
            g->ev_pos = 0;
            g->ev_n = n > 0 ? n : 0;
            continue;
        }
        struct epoll_event ev = g->events[g->ev_pos++];
        struct lf_handle *h = ev.data.ptr;
        if (h == &g->stop_handle) {
            g->stopping = true;
            continue;
        }
        g->stats.events++;
        lf_promote(g);
        pthread_mutex_unlock(&g->lock);
        (void)atomic_load_explicit(&h->handoff, memory_order_acquire);
        h->on_event(h, ev.events);
        pthread_mutex_lock(&g->lock);
    }
    /* Leaving: if we led, nobody leads now; the followers are being woken by stop. */
    if (g->leader == t)
        g->leader = NULL;
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* --- Half-Sync/Half-Async -------------------------------------------------------------- */

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

/* --- Thread-per-Connection ------------------------------------------------------------- */

/* A connection's private set, holding the group's stop eventfd (level-triggered). */
static struct lf_group *tpc_set_create(struct lf_group *g)
{
    struct lf_group *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    memcpy(s->name, g->name, sizeof(s->name));
    s->strategy = g->strategy;
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

int lf_group_add_conn(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    if (g->strategy != LF_STRATEGY_THREAD_PER_CONNECTION || g->tpc.parent)
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

void lf_group_detach(struct lf_handle *h, bool closing)
{
    struct lf_group *g = h->group;
    if (g->tpc.parent)
        g->tpc.detached = true; /* the set's thread leaves when this event is done */
    if (!closing)
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, h->fd, NULL);
}

/* --- the group's life ------------------------------------------------------------------ */

int lf_group_start(struct lf_group *g)
{
    bool hsha = g->strategy == LF_STRATEGY_HALF_SYNC_HALF_ASYNC;
    for (unsigned i = 0; i < g->n_threads; i++) {
        int rc = pthread_create(&g->threads[i].thread, NULL,
                                hsha ? hsha_worker_main : lf_thread_main, &g->threads[i]);
        if (rc != 0) {
            g->n_threads = i; /* stop() joins only the threads that exist */
            g->started = i > 0;
            return -rc;
        }
    }
    g->started = true;
    if (hsha) {
        int rc = pthread_create(&g->hsha.io_thread, NULL, hsha_io_main, g);
        if (rc != 0)
            return -rc;
        g->hsha.io_started = true;
    }
    return 0;
}

void lf_group_stop(struct lf_group *g)
{
    pthread_mutex_lock(&g->lock);
    g->stopping = true;
    while (g->followers) {
        struct lf_thread *f = g->followers;
        g->followers = f->next_follower;
        g->n_waiting--;
        sem_post(&f->wake);
    }
    pthread_cond_broadcast(&g->follow);
    pthread_cond_broadcast(&g->hsha.ready);
    pthread_cond_broadcast(&g->hsha.room);
    pthread_mutex_unlock(&g->lock);
    uint64_t one = 1;
    ssize_t w = write(g->stop_handle.fd, &one, sizeof(one));
    (void)w;
    if (g->started) {
        for (unsigned i = 0; i < g->n_threads; i++)
            pthread_join(g->threads[i].thread, NULL);
        if (g->hsha.io_started)
            pthread_join(g->hsha.io_thread, NULL);
        g->hsha.io_started = false;
        g->started = false;
    }
    /* Connections' threads are detached: wait for the last to count itself out. */
    pthread_mutex_lock(&g->lock);
    while (atomic_load_explicit(&g->tpc.running, memory_order_relaxed) > 0)
        pthread_cond_wait(&g->tpc.left, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void lf_group_destroy(struct lf_group *g)
{
    if (!g)
        return;
    if (g->started || atomic_load(&g->tpc.running) > 0)
        lf_group_stop(g);
    while (g->tpc.sets) { /* sets whose connections were there at the stop */
        struct lf_group *s = g->tpc.sets;
        g->tpc.sets = s->tpc.next;
        tpc_set_free(s);
    }
    for (unsigned i = 0; i < g->n_threads; i++)
        sem_destroy(&g->threads[i].wake);
    pthread_attr_destroy(&g->tpc.attr);
    pthread_cond_destroy(&g->tpc.left);
    pthread_cond_destroy(&g->hsha.room);
    pthread_cond_destroy(&g->hsha.ready);
    pthread_cond_destroy(&g->follow);
    pthread_mutex_destroy(&g->lock);
    close(g->stop_handle.fd);
    close(g->epfd);
    free(g->hsha.ring);
    free(g->threads);
    free(g);
}

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
    switch (s) {
    case LF_STRATEGY_LEADER_FOLLOWERS: return "Leader/Followers";
    case LF_STRATEGY_HALF_SYNC_HALF_ASYNC: return "Half-Sync/Half-Async";
    case LF_STRATEGY_THREAD_PER_CONNECTION: return "Thread-per-Connection";
    }
    return "?";
}

unsigned lf_group_threads(const struct lf_group *g)
{
    switch (g->strategy) {
    case LF_STRATEGY_HALF_SYNC_HALF_ASYNC: return g->n_threads + 1; /* the I/O thread */
    case LF_STRATEGY_THREAD_PER_CONNECTION:
        return g->n_threads + atomic_load_explicit(&g->tpc.running, memory_order_relaxed);
    default: return g->n_threads;
    }
}

int lf_group_epoll_fd(const struct lf_group *g)
{
    return g->epfd;
}
