/* server.c — what the server as a whole tells its modules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server.h"

/* The upper bound (2^i us) of the bucket holding the pct-th percentile. */
static uint64_t percentile(const uint64_t *counts, uint64_t total, unsigned pct)
{
    if (total == 0)
        return 0;
    uint64_t want = (total * pct + 99) / 100, seen = 0;
    for (unsigned b = 0; b < SERVICE_LATENCY_BUCKETS; b++) {
        seen += counts[b];
        if (seen >= want)
            return 1ull << b;
    }
    return 1ull << (SERVICE_LATENCY_BUCKETS - 1);
}

void module_server_stats(const struct server *srv, struct server_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->uptime_s = (conn_now_ms() - srv->start_ms) / 1000;
    out->connections = atomic_load_explicit(&srv->n_conns, memory_order_relaxed);
    out->generation = atomic_load_explicit(&srv->gen_number, memory_order_relaxed);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        out->ctx_voluntary = (uint64_t)ru.ru_nvcsw;
        out->ctx_involuntary = (uint64_t)ru.ru_nivcsw;
    }
    for (unsigned i = 0; i < srv->n_svcs && i < SERVER_STATS_GROUPS; i++) {
        const struct service *svc = &srv->svcs[i];
        if (!svc->group)
            continue;
        struct lf_group_stats gs;
        lf_group_get_stats(svc->group, &gs);
        snprintf(out->groups[i].name, sizeof(out->groups[i].name), "%s",
                 lf_group_name(svc->group));
        out->groups[i].strategy = lf_strategy_name(lf_group_strategy(svc->group));
        out->groups[i].threads = lf_group_threads(svc->group);
        out->groups[i].connections = atomic_load_explicit(&svc->n_conns, memory_order_relaxed);
        out->groups[i].events = gs.events;
        out->groups[i].handoffs = gs.handoffs;
        out->groups[i].waits = gs.waits;
        out->groups[i].nice = svc->nice;
        uint64_t counts[SERVICE_LATENCY_BUCKETS], total = 0;
        for (unsigned b = 0; b < SERVICE_LATENCY_BUCKETS; b++) {
            counts[b] = atomic_load_explicit(&svc->latency_us_log2[b], memory_order_relaxed);
            total += counts[b];
        }
        out->groups[i].requests = atomic_load_explicit(&svc->requests, memory_order_relaxed);
        out->groups[i].p50_us = percentile(counts, total, 50);
        out->groups[i].p99_us = percentile(counts, total, 99);
        out->n_groups++;
    }
}

/* The class rules come from the request's generation: a reload may change them (the set
 * of classes itself, one service each, stays as started). */
struct service *server_class_for_request(struct server *srv, const struct config *cfg,
                                         const char *path, size_t len, struct http_slice host)
{
    struct service *best = NULL;
    size_t best_len = 0;
    for (unsigned i = 1; i < srv->n_svcs; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned p = 0; p < k->n_paths; p++) {
            size_t pl = strlen(k->paths[p]);
            if (pl > best_len && pl <= len && memcmp(path, k->paths[p], pl) == 0) {
                best = &srv->svcs[i];
                best_len = pl;
            }
        }
    }
    if (best || host.len == 0)
        return best;
    /* The host without its port: "example.org:8080" -> "example.org", "[::1]:80" -> "[::1]". */
    size_t hl = host.len;
    const char *end = host.p[0] == '[' ? memchr(host.p, ']', host.len) : host.p;
    const char *colon = end ? memchr(end, ':', host.len - (size_t)(end - host.p)) : NULL;
    if (colon)
        hl = (size_t)(colon - host.p);
    for (unsigned i = 1; i < srv->n_svcs; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned h = 0; h < k->n_hosts; h++)
            if (strlen(k->hosts[h]) == hl && strncasecmp(k->hosts[h], host.p, hl) == 0)
                return &srv->svcs[i];
    }
    return NULL;
}

struct service *server_class_for_peer(struct server *srv, const struct config *cfg,
                                      const struct sockaddr *peer)
{
    for (unsigned i = 1; i < srv->n_svcs; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned a = 0; a < k->n_addrs; a++)
            if (config_cidr_match(&k->addrs[a], peer))
                return &srv->svcs[i];
    }
    return NULL;
}

/* --- configuration generations -------------------------------------------------------- */

struct generation *generation_acquire(struct server *srv)
{
    /* Under the lock, so the generation cannot lose its last reference (the server's)
     * between being read and being held. */
    pthread_mutex_lock(&srv->gen_lock);
    struct generation *g = atomic_load_explicit(&srv->gen, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&srv->gen_lock);
    return g;
}

void generation_hold(struct generation *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void generation_release(struct generation *g)
{
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        generation_free(g);
}

void generation_free(struct generation *g)
{
    if (!g)
        return;
    if (g->chain_ready)
        module_chain_fini(&g->chain);
    if (g->root_fd >= 0)
        close(g->root_fd);
    config_free(&g->cfg);
    free(g);
}

void server_install_generation(struct server *srv, struct generation *g)
{
    atomic_store_explicit(&g->refs, 1, memory_order_relaxed);
    pthread_mutex_lock(&srv->gen_lock);
    struct generation *old = atomic_load_explicit(&srv->gen, memory_order_relaxed);
    atomic_store_explicit(&srv->gen, g, memory_order_relaxed);
    pthread_mutex_unlock(&srv->gen_lock);
    atomic_store_explicit(&srv->gen_number, g->number, memory_order_relaxed);
    if (old)
        generation_release(old);
}
