/* lf_group.h — one Leader/Followers group: a pool of threads sharing one handle set.
 *
 * The group knows nothing of HTTP. It owns an epoll instance (the handle set) and N
 * threads; handles are anything with a file descriptor and an event callback. See the
 * comment at the top of lf_group.c for the protocol.
 */
#ifndef LFHTTPD_LF_GROUP_H
#define LFHTTPD_LF_GROUP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

struct lf_group;
struct lf_handle;

/* Called on the processing thread with the handle already deactivated (EPOLLONESHOT):
 * no other thread can be given this handle until the callback reactivates it with
 * lf_group_rearm(). After rearming, the callback must not touch the handle again. */
typedef void (*lf_event_fn)(struct lf_handle *h, uint32_t events);

struct lf_handle {
    int fd;
    lf_event_fn on_event;
    struct lf_group *group; /* the group whose handle set holds it */
    /* Written (release) when the handle is armed, read (acquire) before its event is
     * processed: what one thread did before re-arming is visible to the next thread that
     * gets the handle. The kernel orders epoll_ctl before the epoll_wait that reports it,
     * but the C memory model (and ThreadSanitizer) cannot see that. */
    atomic_uint handoff;
};

/* How a new leader is chosen from the waiting followers. */
enum lf_promotion {
    LF_PROMOTE_LIFO = 0, /* the most recently idle thread (warm cache) is woken: the default */
    LF_PROMOTE_CONDVAR,  /* a plain condition variable: whichever thread the kernel wakes */
};

struct lf_group_stats {
    uint64_t events;   /* events dispatched */
    uint64_t handoffs; /* promotions of a waiting follower to leader */
    uint64_t waits;    /* epoll_wait calls made */
    unsigned priority_failures; /* threads that could not take the group's nice value */
};

/* Create a group named `name` with `threads` threads (not started yet), each running at
 * the nice value `nice` (0: the process's own). Returns NULL with errno set on failure. */
struct lf_group *lf_group_create(const char *name, unsigned threads, enum lf_promotion promo,
                                 int nice);

/* Register h in the handle set, armed for `events` (EPOLLIN, EPOLLOUT...), one-shot. */
int lf_group_add(struct lf_group *g, struct lf_handle *h, uint32_t events);
/* Reactivate h for `events`: the end of processing an event. */
int lf_group_rearm(struct lf_handle *h, uint32_t events);

/* Start the threads. Returns 0 or -errno. */
int lf_group_start(struct lf_group *g);
/* Ask every thread to leave after its current event, and wait for them. */
void lf_group_stop(struct lf_group *g);
void lf_group_destroy(struct lf_group *g);

void lf_group_get_stats(struct lf_group *g, struct lf_group_stats *out);
const char *lf_group_name(const struct lf_group *g);
/* The handle set itself, for removing a handle that moves to another group. */
int lf_group_epoll_fd(const struct lf_group *g);
unsigned lf_group_threads(const struct lf_group *g);

#endif
