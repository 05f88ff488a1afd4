/* server.c — what the server as a whole tells its modules. */
#include <stdio.h>
#include <string.h>

#include "server.h"

void module_server_stats(const struct server *srv, struct server_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->uptime_s = (conn_now_ms() - srv->start_ms) / 1000;
    out->connections = atomic_load_explicit(&srv->n_conns, memory_order_relaxed);
    const struct service *svcs[] = {&srv->svc};
    for (size_t i = 0; i < sizeof(svcs) / sizeof(svcs[0]) && i < SERVER_STATS_GROUPS; i++) {
        const struct service *svc = svcs[i];
        if (!svc->group)
            continue;
        struct lf_group_stats gs;
        lf_group_get_stats(svc->group, &gs);
        snprintf(out->groups[i].name, sizeof(out->groups[i].name), "%s",
                 lf_group_name(svc->group));
        out->groups[i].threads = lf_group_threads(svc->group);
        out->groups[i].connections = atomic_load_explicit(&svc->n_conns, memory_order_relaxed);
        out->groups[i].events = gs.events;
        out->groups[i].handoffs = gs.handoffs;
        out->groups[i].waits = gs.waits;
        out->n_groups++;
    }
}
