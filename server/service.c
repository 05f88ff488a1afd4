/* service.c — a service class and its periodic tick. See service.h. */
#include "service.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"

#define ACCESS_LOG_FLUSH_MS 1000

/* Every TIMER_TICK_MS, on one of the group's threads: end the connections whose deadline
 * has passed, re-arm listeners paused for want of descriptors, and write out the access
 * log's buffered lines. */
static void service_tick(struct timer *t)
{
    struct service *svc = (struct service *)((char *)t - offsetof(struct service, tick));
    struct http_shared *shared = svc->http.shared;
    int64_t now = clock_now_ms();
    conn_pool_sweep(&svc->http.pool, now,
                    atomic_load_explicit(&shared->stopping, memory_order_relaxed));
    listener_resume_paused(svc->listeners);
    /* Access-log lines wait at most about a second in their thread's buffer. */
    if (now - svc->last_flush_ms >= ACCESS_LOG_FLUSH_MS) {
        svc->last_flush_ms = now;
        access_log_flush(&shared->access_log);
    }
}

int service_init(struct service *svc, struct http_shared *shared, const char *name,
                 unsigned threads, enum lf_strategy strategy, enum lf_promotion promo,
                 int nice, unsigned max_connections)
{
    memset(svc, 0, sizeof(*svc));
    snprintf(svc->name, sizeof(svc->name), "%s", name);
    svc->nice = nice;
    svc->tick.h.fd = -1;
    svc->group = lf_group_create(name, threads, strategy, promo, nice);
    if (!svc->group)
        return -1;
    http_host_init(&svc->http, shared, svc->group, max_connections);
    return timer_start(&svc->tick, svc->group, TIMER_TICK_MS, service_tick);
}

int service_add_listener(struct service *svc, struct listener *l)
{
    l->host = &svc->http;
    l->next = svc->listeners;
    svc->listeners = l;
    return lf_group_add(svc->group, &l->h, EPOLLIN);
}

void service_fini(struct service *svc)
{
    if (svc->group)
        http_host_fini(&svc->http);
    timer_stop(&svc->tick);
    lf_group_destroy(svc->group);
    svc->group = NULL;
}
