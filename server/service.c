/* service.c — a service class and its periodic tick. See service.h. */
#include "service.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "generation.h"

#define ACCESS_LOG_FLUSH_MS 1000

/* Every TIMER_TICK_MS, on one of the groups' threads: end the connections whose deadline
 * has passed, re-arm listeners paused for want of descriptors, and write out the access
 * log's buffered lines. */
static void service_tick(struct timer *t)
{
    struct service *svc = (struct service *)((char *)t - offsetof(struct service, tick));
    struct http_shared *shared = svc->http.shared;
    int64_t now = clock_now_ms();
    conn_pool_sweep(&svc->http.pool, now,
                    atomic_load_explicit(&shared->stopping, memory_order_relaxed));
    /* Out of descriptors with none to shed with: an idle keep-alive connection gives its
     * slot back (as nginx reuses idle connections), so that the next tick has a spare. */
    if (listener_resume_paused(svc->listeners))
        conn_pool_close_idle(&svc->http.pool);
    /* Access-log lines wait at most about a second in their thread's buffer. */
    if (now - svc->last_flush_ms >= ACCESS_LOG_FLUSH_MS) {
        svc->last_flush_ms = now;
        access_log_flush(&shared->access_log);
    }
    /* The modules' work due by time: buffered access_log lines. */
    struct generation *g = generation_acquire(&shared->current);
    if (g->chain_ready)
        module_chain_tick(&g->chain, now);
    generation_release(g);
}

/* When the earliest connection parked until a time is due: wake those that are. */
static void service_wake(struct timer *t)
{
    struct service *svc = (struct service *)((char *)t - offsetof(struct service, waker));
    conn_pool_wake(&svc->http.pool, clock_now_us() / 1000);
}

int service_init(struct service *svc, struct http_shared *shared, const char *name,
                 unsigned threads, unsigned n_groups, enum lf_strategy strategy,
                 enum lf_promotion promo, enum lf_reactivation react, int nice,
                 unsigned max_connections)
{
    memset(svc, 0, sizeof(*svc));
    snprintf(svc->name, sizeof(svc->name), "%s", name);
    svc->nice = nice;
    svc->tick.h.fd = -1;
    svc->waker.h.fd = -1;
    n_groups = n_groups < 1 ? 1 : n_groups > threads ? threads : n_groups;
    n_groups = n_groups > CONFIG_MAX_GROUPS ? CONFIG_MAX_GROUPS : n_groups;
    unsigned first = 0;
    for (unsigned i = 0; i < n_groups; i++) {
        unsigned n = threads / n_groups + (i < threads % n_groups);
        struct lf_group *g = lf_group_create(name, n, strategy, promo, nice);
        if (!g) {
            while (svc->n_groups)
                lf_group_destroy(svc->groups[--svc->n_groups]);
            return -1;
        }
        lf_group_set_reactivation(g, react);
        lf_group_number_threads(g, first); /* thread names go on across the groups */
        first += n;
        svc->groups[svc->n_groups++] = g;
    }
    http_service_init(&svc->http, shared, svc->groups, svc->n_groups, max_connections);
    if (timer_start(&svc->waker, svc->groups[0], 0, service_wake) < 0)
        return -1;
    conn_pool_set_waker(&svc->http.pool, &svc->waker);
    return timer_start(&svc->tick, svc->groups[0], TIMER_TICK_MS, service_tick);
}

int service_add_listener(struct service *svc, struct listener *l, unsigned group)
{
    l->svc = &svc->http;
    l->next = svc->listeners;
    svc->listeners = l;
    return lf_group_add(svc->groups[group % svc->n_groups], &l->h, EPOLLIN);
}

int service_start(struct service *svc)
{
    for (unsigned i = 0; i < svc->n_groups; i++) {
        int rc = lf_group_start(svc->groups[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void service_stop(struct service *svc)
{
    for (unsigned i = 0; i < svc->n_groups; i++)
        lf_group_stop(svc->groups[i]);
}

void service_group_stats(const struct service *svc, struct lf_group_stats *out,
                         unsigned *threads)
{
    memset(out, 0, sizeof(*out));
    *threads = 0;
    for (unsigned i = 0; i < svc->n_groups; i++) {
        struct lf_group_stats gs;
        lf_group_get_stats(svc->groups[i], &gs);
        out->events += gs.events;
        out->handoffs += gs.handoffs;
        out->waits += gs.waits;
        out->priority_failures += gs.priority_failures;
        *threads += lf_group_threads(svc->groups[i]);
    }
}

void service_fini(struct service *svc)
{
    if (svc->n_groups)
        http_service_fini(&svc->http);
    timer_stop(&svc->tick);
    timer_stop(&svc->waker);
    for (unsigned i = 0; i < svc->n_groups; i++)
        lf_group_destroy(svc->groups[i]);
    svc->n_groups = 0;
}
