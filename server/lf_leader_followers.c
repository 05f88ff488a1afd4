/* lf_leader_followers.c — the Leader/Followers strategy: the default, and the reference.
 *
 * A group is N threads and one handle set (an epoll instance). At any moment at most one
 * thread, the leader, waits for events on the set; each other thread is either
 * processing an event or waiting, as a follower, for its turn to lead. The loop, under the
 * group's lock except where said:
 *
 *   1. A thread that wants to lead leads if nobody does; otherwise it follows (waits) until
 *      a leader promotes it, or the group stops.
 *   2. The leader takes the next event the group already fetched; if there is none, it
 *      calls epoll_wait, without the lock, for up to LF_BATCH events.
 *   3. The event's handle is deactivated: a one-shot handle (EPOLLONESHOT) was disarmed
 *      by the kernel as it reported it; an edge-triggered connection (reactivation edge)
 *      is claimed with one compare-and-swap, or, if a thread owns it already or it waits
 *      for something else, the event is recorded for its owner and the leader goes on to
 *      the next one (lf_group.c). Either way no other thread can be given it until it is
 *      reactivated.
 *   4. The leader promotes a follower to be the next leader (which goes back to 2), then
 *      drops the lock and processes the event itself, on its own stack: no queue, no
 *      hand-off of the work to another thread, no context switch on the event's path.
 *   5. Processing ends with lf_group_rearm() (one epoll_ctl) or, for an edge-triggered
 *      connection, lf_group_reactivate() (no system call) if the handle lives on. If that
 *      kept the handle (an event came meanwhile, or the socket was not read empty), the
 *      callback runs again first. The thread takes the lock and goes back to 1: it leads
 *      at once if nobody does, else it follows.
 *
 * Per event that costs one unlock before the callback and one lock after it, a semaphore
 * post when a follower is waiting, and at most one epoll_wait (none while events fetched
 * earlier remain); the handle's re-arm is one epoll_ctl, or none when edge-triggered.
 *
 * Promotion (enum lf_promotion). LIFO by default: followers wait on their own semaphores,
 * kept in a stack, and the most recently active thread, whose cache is warmest, is woken
 * first, the protocol of the Leader/Followers paper. Leadership passes directly to it
 * (g->lf.leader is set before it wakes), so no other thread can take it meanwhile.
 * LF_PROMOTE_CONDVAR uses one condition variable instead: whichever follower the kernel
 * wakes races the threads coming back from processing; it is there so that the benchmark
 * can measure the difference.
 *
 * Batching: the events one epoll_wait returned stay in the group (g->lf.events), under the
 * lock, for the next leaders: a handle that is already ready costs no epoll_wait. Only the
 * leader touches the array outside the lock, while it waits, and there is one leader. Each
 * event is still processed by exactly one thread, and the leader still promotes before it
 * processes.
 *
 * Stopping: lf_group_stop() sets the group's flag and, through lf_leader_followers_wake(),
 * posts every waiting follower, which sees the flag and leaves; the stop eventfd, level-
 * triggered, returns the leader from epoll_wait. A thread processing an event leaves when
 * it comes back to 1.
 *
 * Thread-per-Connection's acceptor (one thread) runs this same loop.
 */
#include "lf_group_internal.h"

#include <errno.h>

int lf_leader_followers_init(struct lf_group *g)
{
    pthread_cond_init(&g->lf.follow, NULL);
    for (unsigned i = 0; i < g->n_threads; i++)
        sem_init(&g->threads[i].wake, 0, 0);
    return 0;
}

void lf_leader_followers_fini(struct lf_group *g)
{
    for (unsigned i = 0; i < g->n_threads; i++)
        sem_destroy(&g->threads[i].wake);
    pthread_cond_destroy(&g->lf.follow);
}

/* Stopping: every follower wakes, sees the flag and leaves. Lock held. */
void lf_leader_followers_wake(struct lf_group *g)
{
    while (g->lf.followers) {
        struct lf_thread *f = g->lf.followers;
        g->lf.followers = f->next_follower;
        g->lf.n_waiting--;
        sem_post(&f->wake);
    }
    pthread_cond_broadcast(&g->lf.follow);
}

/* Wait, as a follower, until promoted or stopped. Called and returns with the lock held. */
static void lf_follow(struct lf_group *g, struct lf_thread *t)
{
    g->lf.n_waiting++;
    if (g->promo == LF_PROMOTE_CONDVAR) {
        pthread_cond_wait(&g->lf.follow, &g->lock);
        g->lf.n_waiting--;
        return;
    }
    t->next_follower = g->lf.followers;
    g->lf.followers = t;
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
        g->lf.leader = NULL;
        if (g->lf.n_waiting) {
            g->stats.handoffs++;
            pthread_cond_signal(&g->lf.follow);
        }
        return;
    }
    struct lf_thread *f = g->lf.followers;
    if (!f) {
        g->lf.leader = NULL;
        return;
    }
    g->lf.followers = f->next_follower;
    g->lf.n_waiting--;
    g->lf.leader = f; /* leadership passes directly: no other thread can take it meanwhile */
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
        if (g->lf.leader == t)
            return true;
        if (!g->lf.leader) {
            g->lf.leader = t;
            return true;
        }
        lf_follow(g, t);
    }
}

void *lf_leader_followers_main(void *arg)
{
    struct lf_thread *t = arg;
    struct lf_group *g = t->group;
    lf_thread_setup(g, "", (long)t->index);

    pthread_mutex_lock(&g->lock);
    while (lf_lead(g, t)) {
        if (g->lf.ev_pos == g->lf.ev_n) {
            pthread_mutex_unlock(&g->lock);
            int n = epoll_wait(g->epfd, g->lf.events, LF_BATCH, -1);
            pthread_mutex_lock(&g->lock);
            g->stats.waits++;
            g->lf.ev_pos = 0;
            g->lf.ev_n = n > 0 ? n : 0;
            continue;
        }
        struct epoll_event ev = g->lf.events[g->lf.ev_pos++];
        struct lf_handle *h = lf_event_handle(ev.data.u64);
        if (h == &g->stop_handle) {
            g->stopping = true;
            continue;
        }
        if (!lf_edge_claim(ev.data.u64, ev.events))
            continue; /* its owner will see it (edge-triggered handles) */
        g->stats.events++;
        lf_promote(g);
        pthread_mutex_unlock(&g->lock);
        (void)atomic_load_explicit(&h->handoff, memory_order_acquire);
        h->on_event(h, ev.events);
        uint32_t again;
        while (lf_take_again(&h, &again))
            h->on_event(h, again);
        pthread_mutex_lock(&g->lock);
    }
    /* Leaving: if we led, nobody leads now; the followers are being woken by stop. */
    if (g->lf.leader == t)
        g->lf.leader = NULL;
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static int lf_leader_followers_start(struct lf_group *g)
{
    return lf_group_spawn(g, lf_leader_followers_main);
}

static unsigned lf_leader_followers_threads(const struct lf_group *g)
{
    return g->n_threads;
}

const struct lf_strategy_ops lf_leader_followers_ops = {
    .name = "Leader/Followers",
    .init = lf_leader_followers_init,
    .fini = lf_leader_followers_fini,
    .start = lf_leader_followers_start,
    .wake = lf_leader_followers_wake,
    .threads = lf_leader_followers_threads,
};
