/* Unit tests of the thread group, in each of its strategies (also run under
 * ThreadSanitizer). */
#define TEST_MAIN
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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
    bool gated;             /* each event waits, inside its handler, for `released` */
    atomic_int started;     /* a gated event is being processed */
    atomic_int released;
};

/* Long enough for any machine and any sanitizer: only a failing test waits this long. */
enum { PATIENCE_MS = 20000 };

static void wait_for(atomic_int *v, int want, int timeout_ms)
{
    for (int i = 0; i < timeout_ms && atomic_load(v) < want; i++)
        usleep(1000);
}

/* A slow event whose end the test decides: it lasts until the test releases it (or, if
 * the test never does, PATIENCE_MS), not some fixed time a busy machine may outlast. */
static void hold_until_released(struct counter_handle *c)
{
    atomic_store(&c->started, 1);
    wait_for(&c->released, 1, PATIENCE_MS);
}

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
    if (c->gated)
        hold_until_released(c);
    atomic_fetch_or(&c->threads_seen, 1ul << ((unsigned long)pthread_self() % 61));
    int n = atomic_fetch_add(&c->events, (int)v) + (int)v;
    atomic_fetch_sub(&c->in_use, 1);
    if (n < c->target) {
        uint64_t one = 1;
        ssize_t w = write(h->fd, &one, sizeof(one));
        (void)w;
    }
    if (lf_group_rearm(h, EPOLLIN) != 0)
        abort(); /* the handle would never be reported again: the test would hang */
}

static void init_handle(struct counter_handle *c, int target, int sleep_us)
{
    memset(c, 0, sizeof(*c));
    c->h.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->h.on_event = counter_event;
    c->target = target;
    c->sleep_us = sleep_us;
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

static void signal_handle(struct counter_handle *c)
{
    signal_fd(c->h.fd);
}

/* Connections' handles are added with lf_group_add_conn (the same as lf_group_add but in
 * Thread-per-Connection, where each gets a thread of its own). */
static void run_many_handles(enum lf_strategy strategy, enum lf_promotion promo)
{
    enum { HANDLES = 16, EVENTS = 200 };
    struct lf_group *g = lf_group_create("t", 4, strategy, promo, 0);
    CHECK(g != NULL);
    static struct counter_handle hs[HANDLES];
    for (int i = 0; i < HANDLES; i++) {
        init_handle(&hs[i], EVENTS, 0);
        CHECK(lf_group_add_conn(g, &hs[i].h, EPOLLIN) == 0);
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
    run_many_handles(LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO);
}

TEST(every_event_is_processed_by_exactly_one_thread_condvar)
{
    run_many_handles(LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_CONDVAR);
}

TEST(every_event_is_processed_by_exactly_one_thread_half_sync_half_async)
{
    run_many_handles(LF_STRATEGY_HALF_SYNC_HALF_ASYNC, LF_PROMOTE_LIFO);
}

TEST(every_event_is_processed_by_exactly_one_thread_thread_per_connection)
{
    run_many_handles(LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO);
}

/* A slow event on one handle does not stop another handle's events from being processed
 * by the other threads: all 50 events of the fast handle are processed while the slow
 * one is still held in its handler, however long that takes on this machine. */
static void run_slow_and_fast(enum lf_strategy strategy)
{
    struct lf_group *g = lf_group_create("t", 2, strategy, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct counter_handle slow, fast;
    init_handle(&slow, 1, 0);
    slow.gated = true;
    init_handle(&fast, 50, 0);
    CHECK(lf_group_add_conn(g, &slow.h, EPOLLIN) == 0);
    CHECK(lf_group_add_conn(g, &fast.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_handle(&slow);
    wait_for(&slow.started, 1, PATIENCE_MS);
    CHECK_EQ_INT(atomic_load(&slow.started), 1);
    signal_handle(&fast);
    wait_for(&fast.events, 50, PATIENCE_MS);
    int fast_done = atomic_load(&fast.events);
    int slow_done = atomic_load(&slow.events);
    atomic_store(&slow.released, 1);
    wait_for(&slow.events, 1, PATIENCE_MS);
    lf_group_stop(g);
    CHECK_EQ_INT(fast_done, 50);
    CHECK_EQ_INT(slow_done, 0); /* the slow one was still held when the fast one finished */
    CHECK_EQ_INT(atomic_load(&slow.events), 1);
    close(slow.h.fd);
    close(fast.h.fd);
    lf_group_destroy(g);
}

/* The leader promotes a follower before it processes. */
TEST(slow_event_does_not_block_other_handles)
{
    run_slow_and_fast(LF_STRATEGY_LEADER_FOLLOWERS);
}

/* The I/O thread queues and goes back to waiting; another worker takes the next event. */
TEST(slow_event_does_not_block_other_handles_half_sync_half_async)
{
    run_slow_and_fast(LF_STRATEGY_HALF_SYNC_HALF_ASYNC);
}

TEST(slow_event_does_not_block_other_handles_thread_per_connection)
{
    run_slow_and_fast(LF_STRATEGY_THREAD_PER_CONNECTION);
}

/* When followers are waiting, the leader hands leadership to one before it processes, so
 * events on one handle end up processed by more than one thread. */
TEST(leadership_is_handed_off_to_waiting_followers)
{
    struct lf_group *g =
        lf_group_create("t", 3, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0);
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

/* Every event crosses the queue: from the I/O thread to a worker, counted as a hand-off. */
TEST(half_sync_half_async_queues_every_event_for_a_worker)
{
    struct lf_group *g =
        lf_group_create("t", 3, LF_STRATEGY_HALF_SYNC_HALF_ASYNC, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK_EQ_INT(lf_group_threads(g), 4); /* the workers and the I/O thread */
    static struct counter_handle h;
    init_handle(&h, 100, 0);
    CHECK(lf_group_add(g, &h.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_handle(&h);
    wait_for(&h.events, 100, 10000);
    lf_group_stop(g);
    struct lf_group_stats st;
    lf_group_get_stats(g, &st);
    CHECK_EQ_INT(atomic_load(&h.events), 100);
    CHECK(st.events >= 1 && st.handoffs == st.events);
    close(h.h.fd);
    lf_group_destroy(g);
}

/* --- hand-off of a handle's state between threads --------------------------------------- */

/* A handle whose state is plain memory, as a connection's is: only the release/acquire
 * of `handoff` orders one thread's writes before the next thread's reads (ThreadSanitizer
 * reports a race otherwise). It moves to `move_to` after `move_after` events, and after
 * `close_after` detaches as a closing connection does (the test closes the descriptor
 * later: a close while the previous thread may still be in epoll_ctl, which TSan builds
 * of lf_group.c tell ThreadSanitizer to ignore, with the reason). */
struct plain_handle {
    struct lf_handle h;
    int events;          /* plain: written by whichever thread has the handle */
    pthread_t last;      /* plain: the thread that processed the last event */
    int thread_changes;  /* plain: events processed by another thread than the last */
    int close_after;     /* 0: never */
    int move_after;      /* 0: never */
    struct lf_group *move_to;
    atomic_int seen;     /* events, for the test's thread to wait on */
    atomic_bool closed;
};

static void plain_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    struct plain_handle *p = (struct plain_handle *)h;
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    /* Signal the next event first: the eventfd would order our writes below before the
     * next reader's reads too, and the point is that the hand-off alone does. */
    if (p->events + 1 != p->close_after)
        signal_fd(h->fd);
    if (p->events > 0 && !pthread_equal(p->last, pthread_self()))
        p->thread_changes++;
    p->last = pthread_self();
    p->events++;
    atomic_store(&p->seen, p->events);
    if (p->events == p->close_after) {
        lf_group_detach(h, true);
        atomic_store(&p->closed, true);
        return;
    }
    if (p->events == p->move_after) {
        lf_group_detach(h, false);
        lf_group_add_conn(p->move_to, h, EPOLLIN);
        return;
    }
    if (lf_group_rearm(h, EPOLLIN) != 0)
        abort(); /* the handle would never be reported again: the test would hang */
}

static void init_plain(struct plain_handle *p, int close_after)
{
    memset(p, 0, sizeof(*p));
    p->h.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->h.on_event = plain_event;
    p->close_after = close_after;
}

static void run_plain_handoff(enum lf_strategy strategy)
{
    enum { EVENTS = 300 };
    struct lf_group *g = lf_group_create("t", 4, strategy, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct plain_handle p;
    init_plain(&p, EVENTS);
    CHECK(lf_group_add_conn(g, &p.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_fd(p.h.fd);
    wait_for(&p.seen, EVENTS, 10000);
    lf_group_stop(g);
    CHECK(atomic_load(&p.closed));
    CHECK_EQ_INT(p.events, EVENTS);
    close(p.h.fd);
    lf_group_destroy(g);
}

TEST(handoff_makes_a_handles_plain_state_visible_to_the_next_thread)
{
    run_plain_handoff(LF_STRATEGY_LEADER_FOLLOWERS);
}

TEST(handoff_makes_a_handles_plain_state_visible_to_the_next_worker)
{
    run_plain_handoff(LF_STRATEGY_HALF_SYNC_HALF_ASYNC);
}

/* --- Thread-per-Connection ------------------------------------------------------------- */

/* Threads of this process whose name starts with prefix (from /proc/self/task). */
static int threads_named(const char *prefix)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof(comm), f) && strncmp(comm, prefix, strlen(prefix)) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static bool wait_for_threads_named(const char *prefix, int want, int timeout_ms)
{
    for (int i = 0; i < timeout_ms; i++) {
        if (threads_named(prefix) == want)
            return true;
        usleep(1000);
    }
    return false;
}

/* One thread for the group's own handles, and one more for each connection. */
TEST(each_connection_gets_a_thread_of_its_own)
{
    enum { CONNS = 8 };
    struct lf_group *g =
        lf_group_create("own", 4, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK(lf_group_start(g) == 0);
    static struct plain_handle ps[CONNS];
    for (int i = 0; i < CONNS; i++) {
        init_plain(&ps[i], 3);
        CHECK(lf_group_add_conn(g, &ps[i].h, EPOLLIN) == 0);
        CHECK(ps[i].h.group != g); /* its private set */
    }
    CHECK_EQ_INT(lf_group_threads(g), 1 + CONNS);
    CHECK(wait_for_threads_named("own-c", CONNS, 5000));
    CHECK(wait_for_threads_named("own-0", 1, 5000));
    for (int i = 0; i < CONNS; i++)
        signal_fd(ps[i].h.fd);
    for (int i = 0; i < CONNS; i++)
        wait_for(&ps[i].seen, 3, 5000);
    lf_group_stop(g);
    for (int i = 0; i < CONNS; i++) {
        CHECK_EQ_INT(ps[i].events, 3);
        CHECK_EQ_INT(ps[i].thread_changes, 0); /* always its own thread */
        close(ps[i].h.fd);
    }
    lf_group_destroy(g);
}

/* A connection detached as it closes ends its thread (and frees its set: LeakSanitizer). */
TEST(detach_ends_a_connections_thread)
{
    struct lf_group *g =
        lf_group_create("det", 1, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK(lf_group_start(g) == 0);
    static struct plain_handle p;
    init_plain(&p, 5);
    CHECK(lf_group_add_conn(g, &p.h, EPOLLIN) == 0);
    CHECK(wait_for_threads_named("det-c", 1, 5000));
    signal_fd(p.h.fd);
    wait_for(&p.seen, 5, 5000);
    CHECK(atomic_load(&p.closed));
    for (int i = 0; i < 5000 && lf_group_threads(g) > 1; i++)
        usleep(1000);
    CHECK_EQ_INT(lf_group_threads(g), 1);
    CHECK(wait_for_threads_named("det-c", 0, 5000));
    lf_group_stop(g);
    close(p.h.fd);
    lf_group_destroy(g);
}

/* A connection moving to another group leaves its thread, and gets one in the new group,
 * which sees everything the old one did (the hand-off through lf_group_add_conn). */
TEST(a_moved_connection_gets_a_new_thread_that_sees_its_state)
{
    struct lf_group *a =
        lf_group_create("mva", 1, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    struct lf_group *b =
        lf_group_create("mvb", 1, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    CHECK(a != NULL && b != NULL);
    CHECK(lf_group_start(a) == 0 && lf_group_start(b) == 0);
    static struct plain_handle p;
    init_plain(&p, 20);
    p.move_after = 10;
    p.move_to = b;
    CHECK(lf_group_add_conn(a, &p.h, EPOLLIN) == 0);
    signal_fd(p.h.fd);
    wait_for(&p.seen, 20, 5000);
    CHECK(atomic_load(&p.closed));
    CHECK(wait_for_threads_named("mva-c", 0, 5000));
    CHECK(wait_for_threads_named("mvb-c", 0, 5000));
    lf_group_stop(a);
    lf_group_stop(b);
    CHECK_EQ_INT(p.events, 20);
    CHECK_EQ_INT(p.thread_changes, 1);
    struct lf_group_stats sa, sb;
    lf_group_get_stats(a, &sa);
    lf_group_get_stats(b, &sb);
    CHECK_EQ_INT(sa.events, 10);
    CHECK_EQ_INT(sb.events, 10);
    close(p.h.fd);
    lf_group_destroy(a);
    lf_group_destroy(b);
}

/* A handle that takes its time, to be stopped in the middle of it. */
static atomic_int slow_started, slow_finished;

static void slow_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    atomic_fetch_add(&slow_started, 1);
    usleep(200000);
    atomic_fetch_add(&slow_finished, 1);
    if (lf_group_rearm(h, EPOLLIN) != 0)
        abort(); /* the handle would never be reported again: the test would hang */
}

/* stop() returns only when every connection's thread has finished its event and left. */
TEST(stop_waits_for_every_connections_thread)
{
    enum { CONNS = 6 };
    struct lf_group *g =
        lf_group_create("stp", 1, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK(lf_group_start(g) == 0);
    static struct counter_handle hs[CONNS];
    for (int i = 0; i < CONNS; i++) {
        init_handle(&hs[i], 0, 0);
        hs[i].h.on_event = slow_event;
        CHECK(lf_group_add_conn(g, &hs[i].h, EPOLLIN) == 0);
        signal_handle(&hs[i]);
    }
    wait_for(&slow_started, CONNS, 5000);
    CHECK_EQ_INT(atomic_load(&slow_started), CONNS);
    lf_group_stop(g);
    CHECK_EQ_INT(atomic_load(&slow_finished), CONNS);
    CHECK_EQ_INT(lf_group_threads(g), 1);
    CHECK(wait_for_threads_named("stp-", 0, 5000)); /* the acceptor too */
    lf_group_destroy(g); /* frees the sets of connections still there */
    for (int i = 0; i < CONNS; i++)
        close(hs[i].h.fd);
}

/* While the group stops, a new connection is registered but gets no thread. */
TEST(a_connection_added_to_a_stopped_group_gets_no_thread)
{
    struct lf_group *g =
        lf_group_create("late", 1, LF_STRATEGY_THREAD_PER_CONNECTION, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    CHECK(lf_group_start(g) == 0);
    lf_group_stop(g);
    static struct plain_handle p;
    init_plain(&p, 0);
    CHECK(lf_group_add_conn(g, &p.h, EPOLLIN) == 0);
    CHECK_EQ_INT(lf_group_threads(g), 1);
    lf_group_detach(&p.h, true); /* as its owner closes it after the stop */
    close(p.h.fd);
    lf_group_destroy(g);
}

TEST(add_conn_is_a_plain_add_in_the_other_strategies)
{
    struct lf_group *g =
        lf_group_create("t", 2, LF_STRATEGY_HALF_SYNC_HALF_ASYNC, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct plain_handle p;
    init_plain(&p, 0);
    CHECK(lf_group_add_conn(g, &p.h, EPOLLIN) == 0);
    CHECK(p.h.group == g);
    CHECK_EQ_INT(lf_group_threads(g), 3);
    lf_group_detach(&p.h, false);
    close(p.h.fd);
    lf_group_destroy(g);
}

/* --- stop ------------------------------------------------------------------------------ */

/* Start an idle group (with one idle connection if given), stop it: the milliseconds
 * stop() took, or -1. */
static long stop_idle_group_ms(enum lf_strategy strategy, struct lf_handle *conn)
{
    struct lf_group *g = lf_group_create("t", 4, strategy, LF_PROMOTE_LIFO, 0);
    if (!g || lf_group_start(g) != 0)
        return -1;
    if (conn && lf_group_add_conn(g, conn, EPOLLIN) != 0)
        return -1;
    usleep(20000); /* every thread is waiting now */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    lf_group_stop(g);
    clock_gettime(CLOCK_MONOTONIC, &b);
    lf_group_destroy(g);
    return (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
}

/* Stopping an idle group (one leader in epoll_wait, the rest followers) returns promptly. */
TEST(stop_wakes_idle_leader_and_followers)
{
    long ms = stop_idle_group_ms(LF_STRATEGY_LEADER_FOLLOWERS, NULL);
    CHECK(ms >= 0 && ms < 1000);
}

/* The I/O thread waits in epoll_wait, the workers on the empty queue. */
TEST(stop_wakes_idle_io_thread_and_workers)
{
    long ms = stop_idle_group_ms(LF_STRATEGY_HALF_SYNC_HALF_ASYNC, NULL);
    CHECK(ms >= 0 && ms < 1000);
}

/* The acceptor and a connection's thread wait in epoll_wait on different sets. */
TEST(stop_wakes_idle_acceptor_and_connection_threads)
{
    static struct plain_handle p;
    init_plain(&p, 0);
    long ms = stop_idle_group_ms(LF_STRATEGY_THREAD_PER_CONNECTION, &p.h);
    CHECK(ms >= 0 && ms < 1000);
    close(p.h.fd);
}

TEST(create_with_zero_threads_fails)
{
    CHECK(lf_group_create("t", 0, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0) == NULL);
}

TEST(create_with_an_unknown_strategy_fails)
{
    errno = 0;
    CHECK(lf_group_create("t", 1, (enum lf_strategy)7, LF_PROMOTE_LIFO, 0) == NULL);
    CHECK_EQ_INT(errno, EINVAL);
}

TEST(each_strategy_is_named)
{
    CHECK(strcmp(lf_strategy_name(LF_STRATEGY_LEADER_FOLLOWERS), "Leader/Followers") == 0);
    CHECK(strcmp(lf_strategy_name(LF_STRATEGY_HALF_SYNC_HALF_ASYNC), "Half-Sync/Half-Async") ==
          0);
    CHECK(strcmp(lf_strategy_name(LF_STRATEGY_THREAD_PER_CONNECTION),
                 "Thread-per-Connection") == 0);
    CHECK(strcmp(lf_strategy_name((enum lf_strategy)7), "?") == 0);
}

/* --- re-arm failures ------------------------------------------------------------------- */

/* A failed re-arm leaves the handle deactivated for good: the caller must learn of it to
 * close the connection, so the error comes back as -errno. */
TEST(rearm_of_a_handle_missing_from_its_set_reports_enoent)
{
    struct lf_group *g =
        lf_group_create("t", 1, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct plain_handle p;
    init_plain(&p, 0);
    CHECK(lf_group_add(g, &p.h, EPOLLIN) == 0);
    lf_group_detach(&p.h, false); /* out of the set, as a connection moving away */
    CHECK_EQ_INT(lf_group_rearm(&p.h, EPOLLIN), -ENOENT);
    close(p.h.fd);
    lf_group_destroy(g);
}

TEST(rearm_of_a_closed_descriptor_reports_ebadf)
{
    struct lf_group *g =
        lf_group_create("t", 1, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct plain_handle p;
    init_plain(&p, 0);
    CHECK(lf_group_add(g, &p.h, EPOLLIN) == 0);
    close(p.h.fd);
    CHECK_EQ_INT(lf_group_rearm(&p.h, EPOLLIN), -EBADF);
    lf_group_destroy(g);
}

TEST(rearm_of_a_registered_handle_succeeds)
{
    struct lf_group *g =
        lf_group_create("t", 1, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct plain_handle p;
    init_plain(&p, 0);
    CHECK(lf_group_add(g, &p.h, EPOLLIN) == 0);
    CHECK_EQ_INT(lf_group_rearm(&p.h, EPOLLIN | EPOLLOUT), 0);
    lf_group_detach(&p.h, true);
    close(p.h.fd);
    lf_group_destroy(g);
}

/* --- edge-triggered reactivation ------------------------------------------------------ */

/* As counter_event, but the handle is a connection's in an edge-triggered group: reading
 * an eventfd empties it, so it is drained, and reactivation is lf_group_reactivate. */
static void edge_counter_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    struct counter_handle *c = (struct counter_handle *)h;
    if (atomic_fetch_add(&c->in_use, 1) != 0)
        atomic_fetch_add(&c->overlaps, 1);
    uint64_t v = 0;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    if (c->sleep_us)
        usleep((useconds_t)c->sleep_us);
    int n = atomic_fetch_add(&c->events, (int)v) + (int)v;
    atomic_fetch_sub(&c->in_use, 1);
    if (n < c->target)
        signal_fd(h->fd); /* while this thread still owns the handle */
    if (lf_group_reactivate(h, EPOLLIN, true) != 0)
        abort();
}

static struct lf_group *edge_group(unsigned threads)
{
    struct lf_group *g =
        lf_group_create("e", threads, LF_STRATEGY_LEADER_FOLLOWERS, LF_PROMOTE_LIFO, 0);
    if (!g)
        abort();
    lf_group_set_reactivation(g, LF_REACTIVATE_EDGE);
    return g;
}

TEST(edge_every_event_is_processed_by_exactly_one_thread)
{
    enum { HANDLES = 16, EVENTS = 200 };
    struct lf_group *g = edge_group(4);
    static struct counter_handle hs[HANDLES];
    for (int i = 0; i < HANDLES; i++) {
        init_handle(&hs[i], EVENTS, 0);
        hs[i].h.on_event = edge_counter_event;
        CHECK(lf_group_add_conn(g, &hs[i].h, EPOLLIN) == 0);
        CHECK(hs[i].h.edge);
    }
    CHECK(lf_group_start(g) == 0);
    for (int i = 0; i < HANDLES; i++)
        signal_handle(&hs[i]);
    for (int i = 0; i < HANDLES; i++) {
        wait_for(&hs[i].events, EVENTS, PATIENCE_MS);
        CHECK_EQ_INT(atomic_load(&hs[i].events), EVENTS);
        CHECK_EQ_INT(atomic_load(&hs[i].overlaps), 0);
    }
    lf_group_destroy(g);
    for (int i = 0; i < HANDLES; i++)
        close(hs[i].h.fd);
}

/* The handle is signalled while its thread owns it and sleeps: the other thread, leading,
 * gets that event and may not process it; it is kept for the owner, whose callback runs
 * again when it lets go. Without that the edge would be lost: no new one ever comes. */
TEST(edge_an_event_that_comes_while_a_thread_owns_the_handle_is_not_lost)
{
    struct lf_group *g = edge_group(2);
    static struct counter_handle c;
    init_handle(&c, 3, 100 * 1000);
    c.h.on_event = edge_counter_event;
    CHECK(lf_group_add_conn(g, &c.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_handle(&c);
    wait_for(&c.events, 3, PATIENCE_MS);
    CHECK_EQ_INT(atomic_load(&c.events), 3);
    CHECK_EQ_INT(atomic_load(&c.overlaps), 0);
    lf_group_destroy(g);
    close(c.h.fd);
}

/* Not drained: the callback runs again with what it waits for, without a new event. */
static atomic_int undrained_runs;
static void undrained_event(struct lf_handle *h, uint32_t ev)
{
    CHECK(ev & EPOLLIN);
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    int n = atomic_fetch_add(&undrained_runs, 1) + 1;
    if (lf_group_reactivate(h, EPOLLIN, n > 1) != 0)
        abort();
}

TEST(edge_a_handle_not_drained_is_processed_again_without_a_new_event)
{
    struct lf_group *g = edge_group(1);
    static struct counter_handle c;
    init_handle(&c, 0, 0);
    c.h.on_event = undrained_event;
    CHECK(lf_group_add_conn(g, &c.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    signal_handle(&c);
    wait_for(&undrained_runs, 2, PATIENCE_MS);
    usleep(50 * 1000); /* and no third time: drained, it waits for the kernel */
    CHECK_EQ_INT(atomic_load(&undrained_runs), 2);
    lf_group_destroy(g);
    close(c.h.fd);
}

/* One callback reactivating several handles that must run again, as the listener does
 * when it starts the connections of one accept batch (each of whose proxied requests may
 * re-arm a kept upstream socket that an event came for): every one of them runs again,
 * not only the last. Held handles: owned after their first event (their callback lets go
 * of nothing, as a kept upstream connection's), then signalled, so that an event waits
 * for each. */
enum { HELD = 5 };
static struct counter_handle held[HELD];
static atomic_int held_runs[HELD];

static void held_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    unsigned i = (unsigned)((struct counter_handle *)h - held);
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    if (atomic_fetch_add(&held_runs[i], 1) == 0)
        return; /* the first time: kept, owned, never reactivated by itself */
    if (lf_group_reactivate(h, EPOLLIN, true) != 0)
        abort();
}

static void reactivate_held_event(struct lf_handle *h, uint32_t ev)
{
    (void)ev;
    uint64_t v;
    ssize_t r = read(h->fd, &v, sizeof(v));
    (void)r;
    for (unsigned i = 0; i < HELD; i++)
        if (lf_group_reactivate(&held[i].h, EPOLLIN, true) != 0)
            abort();
    if (lf_group_reactivate(h, EPOLLIN, true) != 0)
        abort();
}

TEST(edge_every_handle_one_callback_reactivates_with_an_event_waiting_runs_again)
{
    struct lf_group *g = edge_group(1);
    for (unsigned i = 0; i < HELD; i++) {
        init_handle(&held[i], 0, 0);
        held[i].h.on_event = held_event;
        CHECK(lf_group_add_conn(g, &held[i].h, EPOLLIN) == 0);
    }
    static struct counter_handle starter;
    init_handle(&starter, 0, 0);
    starter.h.on_event = reactivate_held_event;
    CHECK(lf_group_add_conn(g, &starter.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    for (unsigned i = 0; i < HELD; i++) {
        signal_handle(&held[i]);
        wait_for(&held_runs[i], 1, PATIENCE_MS);
        CHECK_EQ_INT(atomic_load(&held_runs[i]), 1);
    }
    for (unsigned i = 0; i < HELD; i++)
        signal_handle(&held[i]); /* each owned: its event waits for the owner */
    usleep(50 * 1000);
    signal_handle(&starter);
    for (unsigned i = 0; i < HELD; i++) {
        wait_for(&held_runs[i], 2, PATIENCE_MS / 4);
        CHECK_EQ_INT(atomic_load(&held_runs[i]), 2);
    }
    lf_group_destroy(g);
    for (unsigned i = 0; i < HELD; i++)
        close(held[i].h.fd);
    close(starter.h.fd);
}

TEST(edge_reactivation_is_leader_followers_only)
{
    struct lf_group *g =
        lf_group_create("h", 1, LF_STRATEGY_HALF_SYNC_HALF_ASYNC, LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    lf_group_set_reactivation(g, LF_REACTIVATE_EDGE);
    static struct counter_handle c;
    init_handle(&c, 1, 0);
    CHECK(lf_group_add_conn(g, &c.h, EPOLLIN) == 0);
    CHECK(!c.h.edge);
    lf_group_destroy(g);
    close(c.h.fd);
}

/* A kept upstream connection, idle and waited on, is taken by claiming its handle: the
 * claim makes the taker its owner, so a second claim fails, and letting it go makes it
 * claimable again. */
TEST(edge_a_claimed_handle_is_owned_until_it_is_let_go)
{
    struct lf_group *g = edge_group(1);
    static struct counter_handle c;
    init_handle(&c, 0, 0);
    CHECK(lf_group_add_handle(g, &c.h, EPOLLIN) == 0);
    CHECK(lf_group_is_edge(g));
    CHECK(lf_group_claim(&c.h));
    CHECK(!lf_group_claim(&c.h));
    CHECK(lf_group_reactivate(&c.h, EPOLLIN, true) == 0);
    CHECK(lf_group_claim(&c.h));
    lf_group_remove(&c.h, true);
    lf_group_destroy(g);
    close(c.h.fd);
}

/* While its claimer owns it, an event of the handle is given to no thread. */
TEST(edge_the_event_of_a_claimed_handle_goes_to_no_thread)
{
    struct lf_group *g = edge_group(2);
    static struct counter_handle c;
    init_handle(&c, 1, 0);
    c.h.on_event = edge_counter_event;
    CHECK(lf_group_add_handle(g, &c.h, EPOLLIN) == 0);
    CHECK(lf_group_start(g) == 0);
    CHECK(lf_group_claim(&c.h));
    signal_handle(&c);
    usleep(50 * 1000);
    CHECK_EQ_INT(atomic_load(&c.events), 0);
    lf_group_remove(&c.h, true);
    lf_group_destroy(g);
    close(c.h.fd);
}

TEST(a_one_shot_handle_is_always_claimable)
{
    struct lf_group *g = lf_group_create("o", 1, LF_STRATEGY_LEADER_FOLLOWERS,
                                         LF_PROMOTE_LIFO, 0);
    CHECK(g != NULL);
    static struct counter_handle c;
    init_handle(&c, 0, 0);
    CHECK(lf_group_add_handle(g, &c.h, EPOLLIN) == 0);
    CHECK(!lf_group_is_edge(g));
    CHECK(lf_group_claim(&c.h));
    CHECK(lf_group_claim(&c.h));
    lf_group_destroy(g);
    close(c.h.fd);
}
