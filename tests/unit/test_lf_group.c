/* Unit tests of the Leader/Followers group (also run under ThreadSanitizer). */
#define TEST_MAIN
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "lf_group.h"

/* An eventfd handle that counts its events and checks nobody else holds it meanwhile. */
struct counter_handle {
    struct lf_handle h;
    atomic_int in_use;      /* >1 would mean two threads got the same handle at once */
    atomic_int overlaps;
    atomic_int events;
    int target;             /* re-signal itself until this many events */
    int sleep_us;           /* time spent "processing" each event */
    atomic_ulong threads_seen; /* bit set of thread ids (hashed) that processed it */
};

static void counter_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    struct counter_handle *c = (struct counter_handle *)h;
    if (atomic_fetch_add(&c->in_use, 1) != 0)
        atomic_fetch_add(&c->overlaps, 1);
    uint64_t v = 0; /* signals that arrived together are read as one: count them all */
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    if (c->sleep_us)
        usleep((useconds_t)c->sleep_us);
    atomic_fetch_or(&c->threads_seen, 1ul << ((unsigned long)pthread_self() % 61));
    int n = atomic_fetch_add(&c->events, (int)v) + (int)v;
    atomic_fetch_sub(&c->in_use, 1);
    if (n < c->target) {
        uint64_t one = 1;
        ssize_t w = write(h->fd, &one, sizeof(one));
        (void)w;
    }
    lf_group_rearm(h, EPOLLIN);
}

static void wait_for(atomic_int *v, int want, int timeout_ms)
{
    for (int i = 0; i < timeout_ms && atomic_load(v) < want; i++)
        usleep(1000);
}

static void init_handle(struct counter_handle *c, int target, int sleep_us)
{
    memset(c, 0, sizeof(*c));
    c->h.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->h.on_event = counter_event;
    c->target = target;
    c->sleep_us = sleep_us;
}

static void signal_handle(struct counter_handle *c)
{
    uint64_t one = 1;
    ssize_t w = write(c->h.fd, &one, sizeof(one));
    (void)w;
}

static void run_many_handles(enum lf_promotion promo)
{
    enum { HANDLES = 16, EVENTS = 200 };
    struct lf_group *g = lf_group_create("t", 4, promo, 0);
    CHECK(g != NULL);
    static struct counter_handle hs[HANDLES];
    for (int i = 0; i < HANDLES; i++) {
        init_handle(&hs[i], EVENTS, 0);
        CHECK(lf_group_add(g, &hs[i].h, EPOLLIN) == 0);
    }
    CHECK(lf_group_start(g) == 0);
    for (int i = 0; i < HANDLES; i++)
        signal_handle(&hs[i]);
    for (int i = 0; i < HANDLES; i++)
        wait_for(&hs[i].events, EVENTS, 10000);
    lf_group_stop(g);
    for (int i = 0; i < HANDLES; i++) {
        CHECK_EQ_INT(atomic_load(&hs[i].events), EVENTS);
        CHECK_EQ_INT(atomic_load(&hs[i].overlaps), 0);
        close(hs[i].h.fd);
    }
    struct lf_group_stats st;
    lf_group_get_stats(g, &st);
    CHECK(st.events >= (uint64_t)HANDLES * EVENTS);
    lf_group_destroy(g);
}

TEST(every_event_is_processed_by_exactly_one_thread_lifo)
{
    run_many_handles(LF_PROMOTE_LIFO);
}

TEST(every_event_is_processed_by_exactly_one_thread_condvar)
{
    run_many_handles(LF_PROMOTE_CONDVAR);
}

/* The leader promotes a follower before it processes: a slow event on one handle does
 * not stop another handle's events from being processed by the other threads. */
TEST(slow_event_does_not_block_other_handles)
{
    struct lf_group *g = lf_group_create("t", 2, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct counter_handle slow, fast;
    init_handle(&slow, 1, 500000); /* half a second */
    init_handle(&fast, 50, 0);
    CHECK(lf_group_add(g, &slow.h, EPOLLIN) == 0);
    CHECK(lf_group_add(g, &fast.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_handle(&slow);
    usleep(50000); /* the slow one is being processed now */
    signal_handle(&fast);
    wait_for(&fast.events, 50, 300);
    int fast_done = atomic_load(&fast.events);
    int slow_done = atomic_load(&slow.events);
    lf_group_stop(g);
    CHECK_EQ_INT(fast_done, 50);
    CHECK_EQ_INT(slow_done, 0); /* still sleeping when the fast handle finished */
    close(slow.h.fd);
    close(fast.h.fd);
    lf_group_destroy(g);
}

/* When followers are waiting, the leader hands leadership to one before it processes, so
 * events on one handle end up processed by more than one thread. */
TEST(leadership_is_handed_off_to_waiting_followers)
{
    struct lf_group *g = lf_group_create("t", 3, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct counter_handle h;
    init_handle(&h, 0, 1000);
    CHECK(lf_group_add(g, &h.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    usleep(20000); /* every thread is now leader or follower */
    for (int i = 0; i < 20; i++) {
        signal_handle(&h);
        usleep(10000); /* time for the last processor to rejoin the followers */
    }
    wait_for(&h.events, 20, 2000);
    struct lf_group_stats st;
    lf_group_get_stats(g, &st);
    lf_group_stop(g);
    CHECK_EQ_INT(atomic_load(&h.events), 20);
    /* Not every event need find a follower waiting (a busy machine may not have run the
     * last processor back to the stack yet), but leadership must pass between threads. */
    CHECK(st.handoffs > 0);
    CHECK(__builtin_popcountl(atomic_load(&h.threads_seen)) > 1);
    close(h.h.fd);
    lf_group_destroy(g);
}

/* Stopping an idle group (one leader in epoll_wait, the rest followers) returns promptly. */
TEST(stop_wakes_idle_leader_and_followers)
{
    struct lf_group *g = lf_group_create("t", 4, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK(lf_group_start(g) == 0);
    usleep(20000);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    lf_group_stop(g);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    CHECK(ms < 1000);
    lf_group_destroy(g);
}

TEST(create_with_zero_threads_fails)
{
    CHECK(lf_group_create("t", 0, LF_PROMOTE_LIFO, 0) == NULL);
}
