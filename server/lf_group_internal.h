/* lf_group_internal.h — private to lf_group.c and the strategy files (lf_leader_followers.c,
 * lf_half_sync_half_async.c, lf_thread_per_connection.c): the group's struct and the table
 * of operations a strategy provides. lf_group.c says how they fit together; everything
 * else includes lf_group.h only.
 */
#ifndef LFHTTPD_LF_GROUP_INTERNAL_H
#define LFHTTPD_LF_GROUP_INTERNAL_H

#include "lf_group.h"

#include <pthread.h>
#include <semaphore.h>

#define LF_BATCH 32        /* events a leader (or the I/O thread) takes from one epoll_wait */
#define LF_QUEUE_SIZE 1024 /* Half-Sync/Half-Async: ready handles waiting for a worker */
#define LF_CONN_BATCH 4    /* a connection's set: its socket, a pipe, the stop eventfd */

/* One of the group's own threads: a leader/follower, a worker, or the acceptor. */
struct lf_thread {
    struct lf_group *group;
    pthread_t thread;
    sem_t wake;                      /* LF_PROMOTE_LIFO: sleeps here until promoted or stopped */
    struct lf_thread *next_follower; /* the follower stack, most recent on top */
    unsigned index;
};

/* Half-Sync/Half-Async: a handle the I/O thread found ready. */
struct lf_ready {
    struct lf_handle *h;
    uint32_t events;
};

/* What makes a strategy: called by lf_group.c, never on the path of an event. */
struct lf_strategy_ops {
    const char *name; /* lf_strategy_name() */
    /* Set up the strategy's part of a group whose common part is ready (lock, handle set,
     * threads array). Returns 0 or -errno, having undone its own work. */
    int (*init)(struct lf_group *g);
    /* Undo init, on a stopped group, before the common part is freed. */
    void (*fini)(struct lf_group *g);
    /* Start the threads (lf_group_spawn for the group's own). Returns 0 or -errno. */
    int (*start)(struct lf_group *g);
    /* Stopping, lock held, g->stopping already set: wake the threads waiting on the
     * strategy's own semaphores or condition variables (epoll_wait is woken for all). */
    void (*wake)(struct lf_group *g);
    /* Stopping, after the group's own threads are joined: wait for any other thread. */
    void (*join)(struct lf_group *g);
    /* lf_group_add_conn(); NULL: a plain lf_group_add(). */
    int (*add_conn)(struct lf_group *g, struct lf_handle *h, uint32_t events);
    /* lf_group_threads(). */
    unsigned (*threads)(const struct lf_group *g);
};

extern const struct lf_strategy_ops lf_leader_followers_ops;
extern const struct lf_strategy_ops lf_half_sync_half_async_ops;
extern const struct lf_strategy_ops lf_thread_per_connection_ops;

/* A group, or (Thread-per-Connection) a connection's private set: then only name, epfd,
 * nice, strategy, ops and the tpc fields marked "private set" are used. */
struct lf_group {
    char name[32];
    int epfd;
    struct lf_handle stop_handle; /* an eventfd, readable once the group is stopping */
    enum lf_strategy strategy;
    const struct lf_strategy_ops *ops;
    enum lf_promotion promo;
    enum lf_reactivation react; /* its connections' handles (Leader/Followers only) */
    int nice;           /* every thread's priority (a service class's) */
    unsigned n_threads; /* the group's own: leaders/followers, workers, or the acceptor */
    struct lf_thread *threads;
    bool started;

    pthread_mutex_t lock; /* guards everything below */
    bool stopping;
    struct lf_group_stats stats;

    struct { /* Leader/Followers, and Thread-per-Connection's acceptor */
        pthread_cond_t follow;       /* LF_PROMOTE_CONDVAR: followers wait here */
        struct lf_thread *leader;    /* the leader, or the follower promoted to be; NULL if none */
        struct lf_thread *followers; /* LF_PROMOTE_LIFO: stack of waiting followers */
        unsigned n_waiting;          /* followers waiting, in either mode */
        struct epoll_event events[LF_BATCH]; /* fetched but not yet taken by a leader */
        int ev_pos, ev_n;
    } lf;

    struct { /* Half-Sync/Half-Async (under lock, but the thread itself) */
        pthread_t io_thread;
        bool io_started;
        pthread_cond_t ready;  /* workers wait here for the queue to fill */
        pthread_cond_t room;   /* the I/O thread waits here while it is full */
        struct lf_ready *ring; /* LF_QUEUE_SIZE entries */
        unsigned head, len;
    } hsha;

    struct { /* Thread-per-Connection */
        pthread_attr_t attr;   /* detached, LF_CONN_STACK_BYTES */
        struct lf_group *sets; /* private sets not freed yet (under lock) */
        atomic_uint running;   /* connections' threads running (changed under lock) */
        unsigned next_index;   /* the number in the next thread's name (under lock) */
        pthread_cond_t left;   /* signalled when a connection's thread leaves */
        atomic_uint_least64_t events, waits; /* counted by the connections' threads */
        /* private set: */
        struct lf_group *parent;      /* the group it belongs to */
        struct lf_group *prev, *next; /* in the parent's list */
        unsigned index;               /* its thread's number */
        bool detached;                /* the connection left: its thread is to leave */
    } tpc;
};

/* Name the calling thread "<group>-<prefix><n>" (n < 0: no number) and give it the
 * group's priority. */
void lf_thread_setup(struct lf_group *g, const char *prefix, long n);
/* Start the group's own threads, each running fn with its struct lf_thread. On failure
 * only the threads that exist are kept, for stop() to join. Returns 0 or -errno. */
int lf_group_spawn(struct lf_group *g, void *(*fn)(void *));

/* Edge-triggered handles (lf_group.c). The handle an event's data names. */
struct lf_handle *lf_event_handle(uint64_t data);
/* May this thread process the event? Always for a one-shot handle (the kernel disarmed
 * it); for an edge-triggered one, if it makes the handle its own. */
bool lf_edge_claim(uint64_t data, uint32_t events);
/* A handle whose callback is to run again on this thread (lf_group_reactivate kept it), if
 * any is left. Call after every callback, until it says no. */
bool lf_take_again(struct lf_handle **h, uint32_t *events);

/* Leader/Followers' parts, which Thread-per-Connection's acceptor runs too. */
int lf_leader_followers_init(struct lf_group *g);
void lf_leader_followers_fini(struct lf_group *g);
void lf_leader_followers_wake(struct lf_group *g);
void *lf_leader_followers_main(void *arg); /* a thread's loop; arg: its struct lf_thread */

#endif
