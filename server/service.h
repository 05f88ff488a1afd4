/* service.h — a service class: one thread group, its threads' priority, its limits, the
 * connections it serves and their figures, and its periodic tick. The default class is
 * the server's first service.
 */
#ifndef LFHTTPD_SERVICE_H
#define LFHTTPD_SERVICE_H

#include <stdint.h>

#include "http_conn.h"
#include "lf_group.h"
#include "listener.h"
#include "timer.h"

struct service {
    /* Its connections, its limit (max_connections) and the figures of its requests. Its
     * class's configuration is not kept: it belongs to the generation the service was
     * started with, which a reload frees. What a service needs is copied here. */
    struct http_host http;
    char name[32];
    int nice; /* its threads' priority, as applied */
    struct lf_group *group;
    struct timer tick;            /* the deadline sweep and the chores below */
    struct listener *listeners;   /* its own, linked by `next`: the tick resumes them */
    int64_t last_flush_ms;        /* when the tick last flushed the access log */
};

/* Create the service's group (`threads` threads sharing its set by `strategy`, at nice
 * value `nice`) and its tick; the threads start with lf_group_start. Returns 0, or -1
 * with errno set. */
int service_init(struct service *svc, struct http_shared *shared, const char *name,
                 unsigned threads, enum lf_strategy strategy, enum lf_promotion promo,
                 int nice, unsigned max_connections);
/* Serve a listener's connections in this service: its events join the group's set. */
int service_add_listener(struct service *svc, struct listener *l);
/* After the group's threads have stopped: close every connection and free the group. */
void service_fini(struct service *svc);

#endif
