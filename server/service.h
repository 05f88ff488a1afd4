/* service.h — a service class: its thread groups, their threads' priority, its limits, the
 * connections it serves and their figures, and its periodic tick. The default class is
 * the server's first service.
 *
 * A class's threads form one Leader/Followers group, or several (`groups`): each group
 * has its own handle set and its own listening socket on every address of the class
 * (SO_REUSEPORT, so the kernel spreads new connections over them), and a connection stays
 * in the group that accepted it. The threads of a group still take turns leading; what
 * the groups do not share is the handle set, its lock and the connections' state, which
 * then stay on fewer cores.
 */
#ifndef LFHTTPD_SERVICE_H
#define LFHTTPD_SERVICE_H

#include <stdint.h>

#include "config.h"
#include "http_conn.h"
#include "lf_group.h"
#include "listener.h"
#include "timer.h"

struct service {
    /* Its connections, its limit (max_connections) and the figures of its requests. Its
     * class's configuration is not kept: it belongs to the generation the service was
     * started with, which a reload frees. What a service needs is copied here. */
    struct http_service http;
    char name[32];
    int nice; /* its threads' priority, as applied */
    struct lf_group *groups[CONFIG_MAX_GROUPS];
    unsigned n_groups;
    struct timer tick;            /* the deadline sweep and the chores below (groups[0]) */
    struct timer waker;           /* one-shot (groups[0]): wakes connections parked until a
                                     time (conn_park) */
    struct listener *listeners;   /* its own, linked by `next`: the tick resumes them */
    int64_t last_flush_ms;        /* when the tick last flushed the access log */
};

/* Create the service's `n_groups` groups (`threads` threads in all, shared out as evenly
 * as possible, each group sharing its set by `strategy`, at nice value `nice`) and its
 * tick; the threads start with service_start. Returns 0, or -1 with errno set. */
int service_init(struct service *svc, struct http_shared *shared, const char *name,
                 unsigned threads, unsigned n_groups, enum lf_strategy strategy,
                 enum lf_promotion promo, enum lf_reactivation react, int nice,
                 unsigned max_connections);
/* Serve a listener's connections in group `group` of this service. */
int service_add_listener(struct service *svc, struct listener *l, unsigned group);
/* Start every group's threads. Returns 0 or -errno. */
int service_start(struct service *svc);
/* Stop every group's threads (lf_group_stop). */
void service_stop(struct service *svc);
/* The figures of all its groups added up, and its threads. */
void service_group_stats(const struct service *svc, struct lf_group_stats *out,
                         unsigned *threads);
/* After the groups' threads have stopped: close every connection and free the groups. */
void service_fini(struct service *svc);

#endif
