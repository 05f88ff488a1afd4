/* lf_group.h — one thread group: a pool of threads sharing one handle set.
 *
 * The group knows nothing of HTTP. It owns an epoll instance (the handle set) and its
 * threads; handles are anything with a file descriptor and an event callback. How the
 * threads share the set is the group's concurrency strategy: Leader/Followers (the
 * default, lf_leader_followers.c), Half-Sync/Half-Async (lf_half_sync_half_async.c) or
 * Thread-per-Connection (lf_thread_per_connection.c); each file opens with its protocol,
 * and lf_group.c with what they share. Callers see the same interface whichever runs.
 */
#ifndef LFHTTPD_LF_GROUP_H
#define LFHTTPD_LF_GROUP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

struct lf_group;
struct lf_handle;

/* Called on the processing thread with the handle already deactivated: no other thread
 * can be given this handle until the callback reactivates it (lf_group_rearm, or for a
 * connection lf_group_reactivate). After that, the callback must not touch the handle. */
typedef void (*lf_event_fn)(struct lf_handle *h, uint32_t events);

struct lf_handle {
    int fd;
    /* Registered edge-triggered (a connection in a group with LF_REACTIVATE_EDGE): who
     * owns it is `edge_state`, and `armed` what the kernel reports. The owner's only. */
    bool edge;
    uint16_t armed;
    lf_event_fn on_event;
    struct lf_group *group; /* the group whose handle set holds it */
    /* One-shot handles: written (release) when the handle is armed, read (acquire) before
     * its event is processed: what one thread did before re-arming is visible to the next
     * thread that gets the handle. The kernel orders epoll_ctl before the epoll_wait that
     * reports it, but the C memory model (and ThreadSanitizer) cannot see that. */
    atomic_uint handoff;
    /* Edge-triggered handles: owner, events waited for, an event seen while owned, and the
     * handle's incarnation (lf_group.c). Never cleared by whoever reuses the memory. */
    atomic_uint edge_state;
};

/* How the group's threads share its handle set. */
enum lf_strategy {
    /* N threads take turns as the leader waiting on the set; the leader promotes a
     * follower, then processes the event itself: the default. */
    LF_STRATEGY_LEADER_FOLLOWERS = 0,
    /* One I/O thread waits on the set and queues ready handles; N worker threads take
     * them from the queue and process them. N + 1 threads. */
    LF_STRATEGY_HALF_SYNC_HALF_ASYNC,
    /* One thread serves the group's own handles (listeners, timer); each connection
     * added with lf_group_add_conn() gets a handle set and a thread of its own. */
    LF_STRATEGY_THREAD_PER_CONNECTION,
};

/* How a connection's handle is deactivated while a thread processes it, and reactivated
 * after (Leader/Followers only; the group's own handles are always one-shot). */
enum lf_reactivation {
    /* EPOLLONESHOT: the kernel disarms the handle as it reports it; lf_group_rearm()
     * re-arms it with epoll_ctl, one system call per event. */
    LF_REACTIVATE_ONESHOT = 0,
    /* Edge-triggered, registered once: the handle's owner is an atomic state, and
     * reactivation happens in user space (lf_group_reactivate). See lf_group.c. */
    LF_REACTIVATE_EDGE,
};

/* How a new leader is chosen from the waiting followers (Leader/Followers only). */
enum lf_promotion {
    LF_PROMOTE_LIFO = 0, /* the most recently idle thread (warm cache) is woken: the default */
    LF_PROMOTE_CONDVAR,  /* a plain condition variable: whichever thread the kernel wakes */
};

struct lf_group_stats {
    uint64_t events; /* events dispatched */
    /* Hand-offs between threads: promotions of a waiting follower to leader
     * (Leader/Followers), events passed from the I/O thread to the workers through the
     * queue (Half-Sync/Half-Async), connections given a thread of their own
     * (Thread-per-Connection). */
    uint64_t handoffs;
    uint64_t waits;    /* epoll_wait calls made */
    unsigned priority_failures; /* threads that could not take the group's nice value */
};

/* Create a group named `name` with `threads` threads (not started yet), sharing its
 * handle set by `strategy` (`promo` chooses the Leader/Followers promotion), each thread
 * running at the nice value `nice` (0: the process's own). Thread-per-Connection uses one
 * thread for the group's own handles whatever `threads` says. Returns NULL with errno set
 * on failure. */
struct lf_group *lf_group_create(const char *name, unsigned threads, enum lf_strategy strategy,
                                 enum lf_promotion promo, int nice);

/* Number the group's threads from `first` in their names ("<group>-<first>", ...): the
 * groups of one class go on from each other. Before lf_group_start. */
void lf_group_number_threads(struct lf_group *g, unsigned first);
/* How the connections' handles of a Leader/Followers group are reactivated (one-shot by
 * default; other strategies ignore it). Before lf_group_start. */
void lf_group_set_reactivation(struct lf_group *g, enum lf_reactivation react);

/* Register h in the handle set, armed for `events` (EPOLLIN, EPOLLOUT...), one-shot.
 * Returns 0 or -errno. */
int lf_group_add(struct lf_group *g, struct lf_handle *h, uint32_t events);
/* Register a connection's handle: as lf_group_add(), except in a Thread-per-Connection
 * group, where h gets a handle set and a thread of its own, started at once, and
 * h->group becomes that private set (so lf_group_rearm(h) and lf_group_add(h->group, ...)
 * for the connection's other handles land there). The thread leaves when the connection
 * is detached (lf_group_detach). While the group is stopping no thread is started: the
 * handle stays registered, unserved, for its owner to close. */
int lf_group_add_conn(struct lf_group *g, struct lf_handle *h, uint32_t events);
/* Reactivate h for `events`: the end of processing an event. Returns 0, or -errno from
 * epoll_ctl when h could not be reactivated: -ENOMEM, or -ENOENT / -EBADF for a handle
 * that is not in its set or whose descriptor is closed (a bug). Then h stays deactivated:
 * no thread will ever be given it again, not even when its deadline passes, so the caller
 * still owns it and must close it (and log why) rather than leave it stranded. */
int lf_group_rearm(struct lf_handle *h, uint32_t events) __attribute__((warn_unused_result));
/* How many handles one callback may reactivate with lf_group_reactivate() that then run
 * again on its thread: one, as its last act, for each connection whose event it ends (a
 * listener's callback starts up to its accept batch). */
#define LF_AGAIN_MAX 32
/* The end of processing a connection's event: as lf_group_rearm(), but for a handle
 * registered with lf_group_add_conn() in a group with LF_REACTIVATE_EDGE it costs no
 * system call. `drained`: the caller saw the socket empty for each direction it now waits
 * for (a short read or EAGAIN for EPOLLIN, EAGAIN on a write for EPOLLOUT), so the next
 * edge will come from the kernel; otherwise, or if an event came while this thread owned
 * the handle, the thread keeps the handle and its callback runs again with `events` as
 * soon as the current callback returns. Returns 0 or -errno as lf_group_rearm(). */
int lf_group_reactivate(struct lf_handle *h, uint32_t events, bool drained)
    __attribute__((warn_unused_result));
/* A connection's handle leaves its handle set, called by the thread processing it:
 * `closing` just before its descriptor is closed (a no-op but in Thread-per-Connection),
 * otherwise as it moves to another group (the handle is removed from the set). A
 * connection's own thread leaves once the current event's callback returns, without
 * touching the handle again. */
void lf_group_detach(struct lf_handle *h, bool closing);

/* A connection that waits for a time, not an event (its owner's last act): an edge-
 * triggered handle lets go waiting for nothing (events that come are kept as pending, as
 * for an owned one), with EPOLLOUT in what the kernel watches; a one-shot handle stays
 * disarmed. Returns 0 or -errno. */
int lf_group_park(struct lf_handle *h);
/* Make a parked handle ready, from any thread: its group's leader gets an event for it,
 * EPOLLOUT as soon as the socket can take bytes (at once, as a rule), through the usual
 * path. false if it is not parked, or cannot be armed. */
bool lf_group_wake(struct lf_handle *h);

/* Register another handle of a connection's (an upstream socket), called by the thread
 * that owns the connection: as lf_group_add_conn(), edge-triggered in a group with
 * LF_REACTIVATE_EDGE (not owned, waiting for `events`; lf_group_reactivate() then re-arms
 * it without a system call), else one-shot, never with a thread of its own. Its memory
 * must then outlive the groups' threads, as a connection's. Returns 0 or -errno. */
int lf_group_add_handle(struct lf_group *g, struct lf_handle *h, uint32_t events);
/* Take a handle that is not a connection's out of its handle set, called by the thread
 * that owns it: `closing` just before its descriptor is closed, else it is removed and may
 * be added to a set again. Events of it already fetched are dropped. */
void lf_group_remove(struct lf_handle *h, bool closing);
/* Take a handle added with lf_group_add_handle() that waits for events, as if its event had
 * been given to the caller, who then owns it (and lets it go with lf_group_reactivate() or
 * lf_group_remove()): true, or false when a thread has its event now (then that thread owns
 * it). An edge-triggered handle only: a one-shot one that nobody owns must be disarmed
 * already, and the claim is always true. */
bool lf_group_claim(struct lf_handle *h);
/* Are g's connection handles edge-triggered (LF_REACTIVATE_EDGE under Leader/Followers)? */
bool lf_group_is_edge(const struct lf_group *g);
/* Is g a connection's own handle set (Thread-per-Connection), which goes with it? */
bool lf_group_is_private(const struct lf_group *g);

/* Start the threads. Returns 0 or -errno. */
int lf_group_start(struct lf_group *g);
/* Ask every thread to leave after its current event, and wait for them (the threads of
 * connections too). Stopping a stopped group returns at once. */
void lf_group_stop(struct lf_group *g);
/* Stops the group if it runs, and frees it. Handles still in its set are the caller's. */
void lf_group_destroy(struct lf_group *g);

void lf_group_get_stats(struct lf_group *g, struct lf_group_stats *out);
const char *lf_group_name(const struct lf_group *g);
enum lf_strategy lf_group_strategy(const struct lf_group *g);
/* "Leader/Followers", "Half-Sync/Half-Async", "Thread-per-Connection". */
const char *lf_strategy_name(enum lf_strategy s);
/* Threads running now: for Thread-per-Connection, connections' threads included. */
unsigned lf_group_threads(const struct lf_group *g);

#endif
