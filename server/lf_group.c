/* lf_group.c — the Leader/Followers protocol on epoll.
 *
 * A group is N threads and one handle set (an epoll instance). At any moment at most one
 * thread, the leader, waits for events on the set; the others are either processing an
 * event or waiting, as followers, for their turn to lead. When the leader gets an event:
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
 * Shutdown: lf_group_stop() sets the group's stop flag, wakes every follower, and makes a
 * level-triggered eventfd in the set readable so that the leader returns from epoll_wait.
 * Threads that are processing finish their event and then leave.
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

struct lf_thread {
    struct lf_group *group;
    pthread_t thread;
    sem_t wake;                     /* a follower sleeps here until promoted or stopped */
    struct lf_thread *next_follower; /* the follower stack, most recent on top */
    unsigned index;
};

struct lf_group {
    char name[32];
    int epfd;
    struct lf_handle stop_handle; /* an eventfd, readable once the group is stopping */
    enum lf_promotion promo;
    int nice; /* every thread's priority (a service class's) */
    unsigned n_threads;
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
};

struct lf_group *lf_group_create(const char *name, unsigned threads, enum lf_promotion promo,
                                 int nice)
{
    if (threads == 0) {
        errno = EINVAL;
        return NULL;
    }
    struct lf_group *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->promo = promo;
    g->nice = nice;
    g->n_threads = threads;
    g->epfd = -1;
    g->stop_handle.fd = -1;
    g->threads = calloc(threads, sizeof(*g->threads));
    if (!g->threads)
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
    free(g->threads);
    free(g);
    errno = saved;
    return NULL;
}

int lf_group_add(struct lf_group *g, struct lf_handle *h, uint32_t events)
{
    h->group = g;
    atomic_store_explicit(&h->handoff, 1, memory_order_release);
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = h};
    return epoll_ctl(g->epfd, EPOLL_CTL_ADD, h->fd, &ev) < 0 ? -errno : 0;
}

int lf_group_rearm(struct lf_handle *h, uint32_t events)
{
    atomic_store_explicit(&h->handoff, 1, memory_order_release);
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = h};
    return epoll_ctl(h->group->epfd, EPOLL_CTL_MOD, h->fd, &ev) < 0 ? -errno : 0;
}

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
    char tname[16];
    snprintf(tname, sizeof(tname), "%.12s-%u", g->name, t->index); /* 15 chars at most */
    pthread_setname_np(pthread_self(), tname);
    /* On Linux a nice value belongs to a thread: PRIO_PROCESS with a thread id sets ours. */
    if (g->nice != 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), g->nice) < 0) {
        pthread_mutex_lock(&g->lock);
        g->stats.priority_failures++;
        pthread_mutex_unlock(&g->lock);
    }

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

int lf_group_start(struct lf_group *g)
{
    for (unsigned i = 0; i < g->n_threads; i++) {
        int rc = pthread_create(&g->threads[i].thread, NULL, lf_thread_main, &g->threads[i]);
        if (rc != 0) {
            g->n_threads = i; /* stop() joins only the threads that exist */
            g->started = i > 0;
            return -rc;
        }
    }
    g->started = true;
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
    pthread_mutex_unlock(&g->lock);
    uint64_t one = 1;
    ssize_t w = write(g->stop_handle.fd, &one, sizeof(one));
    (void)w;
    if (!g->started)
        return;
    for (unsigned i = 0; i < g->n_threads; i++)
        pthread_join(g->threads[i].thread, NULL);
    g->started = false;
}

void lf_group_destroy(struct lf_group *g)
{
    if (!g)
        return;
    if (g->started)
        lf_group_stop(g);
    for (unsigned i = 0; i < g->n_threads; i++)
        sem_destroy(&g->threads[i].wake);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->follow);
    close(g->stop_handle.fd);
    close(g->epfd);
    free(g->threads);
    free(g);
}

void lf_group_get_stats(struct lf_group *g, struct lf_group_stats *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->stats;
    pthread_mutex_unlock(&g->lock);
}

const char *lf_group_name(const struct lf_group *g)
{
    return g->name;
}

unsigned lf_group_threads(const struct lf_group *g)
{
    return g->n_threads;
}

int lf_group_epoll_fd(const struct lf_group *g)
{
    return g->epfd;
}
