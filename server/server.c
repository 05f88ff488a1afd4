/* server.c — the server as a whole: starting its services and listeners, stopping them,
 * and what it tells its modules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "server.h"

#include <errno.h>
#include <fcntl.h>

#include "clock.h"
#include "log.h"
#include "module_figures.h"

/* The upper bound (2^i us) of the bucket holding the pct-th percentile. */
static uint64_t percentile(const uint64_t *counts, uint64_t total, unsigned pct)
{
    if (total == 0)
        return 0;
    uint64_t want = (total * pct + 99) / 100, seen = 0;
    for (unsigned b = 0; b < HTTP_LATENCY_BUCKETS; b++) {
        seen += counts[b];
        if (seen >= want)
            return 1ull << b;
    }
    return 1ull << (HTTP_LATENCY_BUCKETS - 1);
}

static bool draining(const struct server *srv)
{
    return atomic_load_explicit(&srv->http.draining, memory_order_relaxed);
}

void module_server_stats(const struct request *req, struct server_stats *out)
{
    const struct server *srv = req->server;
    memset(out, 0, sizeof(*out));
    out->uptime_s = (clock_now_ms() - srv->start_ms) / 1000;
    out->connections = atomic_load_explicit(&srv->http.n_conns, memory_order_relaxed);
    out->generation = atomic_load_explicit(&srv->http.current.number, memory_order_relaxed);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        out->ctx_voluntary = (uint64_t)ru.ru_nvcsw;
        out->ctx_involuntary = (uint64_t)ru.ru_nivcsw;
    }
    for (unsigned i = 0; i < srv->n_svcs && i < SERVER_STATS_GROUPS; i++) {
        const struct service *svc = &srv->svcs[i];
        if (!svc->n_groups)
            continue;
        struct lf_group_stats gs;
        service_group_stats(svc, &gs, &out->groups[i].threads);
        snprintf(out->groups[i].name, sizeof(out->groups[i].name), "%s", svc->name);
        out->groups[i].strategy = lf_strategy_name(lf_group_strategy(svc->groups[0]));
        out->groups[i].connections =
            atomic_load_explicit(&svc->http.pool.n_conns, memory_order_relaxed);
        out->groups[i].events = gs.events;
        out->groups[i].handoffs = gs.handoffs;
        out->groups[i].waits = gs.waits;
        out->groups[i].nice = svc->nice;
        uint64_t counts[HTTP_LATENCY_BUCKETS], total = 0;
        for (unsigned b = 0; b < HTTP_LATENCY_BUCKETS; b++) {
            const atomic_ulong *bucket = &svc->http.stats.latency_us_log2[b];
            counts[b] = atomic_load_explicit(bucket, memory_order_relaxed);
            total += counts[b];
        }
        out->groups[i].requests =
            atomic_load_explicit(&svc->http.stats.requests, memory_order_relaxed);
        out->groups[i].p50_us = percentile(counts, total, 50);
        out->groups[i].p99_us = percentile(counts, total, 99);
        out->n_groups++;
    }
    out->draining = draining(srv);
}

bool module_server_draining(const struct request *req)
{
    return draining(req->server);
}


/* --- start and stop ------------------------------------------------------------------- */

/* Class priorities are nice values relative to the process's own (high -10, normal 0,
 * low 10). Raising a thread above the process's own priority needs CAP_SYS_NICE (or
 * RLIMIT_NICE); without it, every class moves up by the same amount, so that the most
 * urgent runs at the process's own priority and the order between classes is kept.
 * Returns that shift (0 when the priorities can be applied as configured). */
static int priority_shift(const struct config *cfg)
{
    int lowest = 0;
    for (unsigned i = 0; i < cfg->n_classes; i++)
        lowest = cfg->classes[i].nice < lowest ? cfg->classes[i].nice : lowest;
    if (lowest == 0)
        return 0;
    errno = 0;
    int own = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (own == -1 && errno)
        return -lowest;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), own + lowest) == 0) {
        setpriority(PRIO_PROCESS, (id_t)gettid(), own); /* a probe: put ours back */
        return 0;
    }
    log_warn("cannot raise thread priorities (%s: no CAP_SYS_NICE): keeping the order of "
             "the service classes by lowering the others by %d instead",
             strerror(errno), -lowest);
    return -lowest;
}

/* Listen on `a` (one of the class's ls[0 .. n)) for class svc: one socket per group of the
 * class, all bound to the same address with SO_REUSEPORT when there are several (the first
 * one's port is the others' when port 0 was asked) or when `reuseport` shares it with other
 * processes. A wildcard's sockets accept for the addresses of ls that have none. */
static int add_listeners(struct server *srv, struct service *svc, const struct config_listen *a,
                         const struct config_listen *ls, unsigned n, int64_t header_timeout_ms)
{
    struct config_listen at = *a;
    if (a->addr.ss_family == AF_UNIX) { /* one socket, in the class's first group */
        struct listener *l = &srv->listeners[srv->n_listeners];
        if (listener_open(l, &srv->spare, a, header_timeout_ms, false) < 0) {
            log_error("listen on %s: %s", a->text, strerror(errno));
            return -1;
        }
        srv->n_listeners++;
        int rc = service_add_listener(svc, l, 0);
        if (rc < 0) {
            log_error("epoll: %s", strerror(-rc));
            return -1;
        }
        log_info("listening on %s (class %s)", a->text, svc->name);
        return 0;
    }
    bool shared = svc->n_groups > 1 || a->reuseport;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a->addr;
    /* Port 0: the kernel picks a port nobody holds (sin6_port sits at sin_port's offset). */
    if (shared && !a->reuseport && a4->sin_port != 0 && listener_claim(a) < 0) {
        log_error("listen on %s: %s", a->text, strerror(errno));
        return -1;
    }
    for (unsigned g = 0; g < svc->n_groups; g++) {
        struct listener *l = &srv->listeners[srv->n_listeners];
        if (listener_open(l, &srv->spare, &at, header_timeout_ms, shared) < 0) {
            log_error("listen on %s: %s", at.text, strerror(errno));
            return -1;
        }
        srv->n_listeners++;
        at = l->addr; /* the port actually bound */
        if (config_listen_is_wildcard(a) && listener_accept_for(l, ls, n) < 0) {
            log_error("out of memory");
            return -1;
        }
        int rc = service_add_listener(svc, l, g);
        if (rc < 0) {
            log_error("epoll: %s", strerror(-rc));
            return -1;
        }
    }
    if (svc->n_groups > 1)
        log_info("listening on %s (class %s, %u sockets: one per thread group)", at.text,
                 svc->name, svc->n_groups);
    else
        log_info("listening on %s (class %s)", at.text, svc->name);
    return 0;
}

/* A class's thread groups: `groups`, 0 meaning one per CPU; never more than threads. Not
 * said: one per CPU for Leader/Followers, one group for the other strategies (as they are
 * described, and compared). */
static unsigned class_groups(unsigned groups, unsigned threads, enum lf_strategy strategy)
{
    if (groups == CONFIG_GROUPS_UNSET)
        groups = strategy == LF_STRATEGY_LEADER_FOLLOWERS ? 0 : 1;
    if (groups == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        groups = n > 0 ? (unsigned)n : 1;
    }
    return groups > threads ? threads : groups;
}

/* Room for every listening socket: one per address and group of each class. */
static int alloc_listeners(struct server *srv, const struct config *cfg, const unsigned *groups)
{
    size_t n = 0;
    for (unsigned i = 0; i <= cfg->n_classes; i++)
        n += (size_t)(i ? cfg->classes[i - 1].n_listen : cfg->n_listen) * groups[i];
    srv->listeners = calloc(n ? n : 1, sizeof(*srv->listeners));
    return srv->listeners ? 0 : -1;
}

/* The text of the wildcard address of a's port and family among ls[0 .. n). */
static const char *wildcard_of(const struct config_listen *ls, unsigned n,
                               const struct config_listen *a)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a->addr;
    for (unsigned i = 0; i < n; i++) {
        const struct sockaddr_in *w4 = (const struct sockaddr_in *)&ls[i].addr;
        if (ls[i].addr.ss_family == a->addr.ss_family && config_listen_is_wildcard(&ls[i]) &&
            w4->sin_port == a4->sin_port) /* sin6_port sits at sin_port's offset */
            return ls[i].text;
    }
    return "the wildcard";
}

/* One service (its thread groups) per class, the default class first. */
static int start_services(struct server *srv, const struct config *cfg)
{
    int shift = priority_shift(cfg);
    errno = 0;
    int own = getpriority(PRIO_PROCESS, (id_t)gettid());
    own = own == -1 && errno ? 0 : own;
    unsigned threads[1 + CONFIG_MAX_CLASSES], groups[1 + CONFIG_MAX_CLASSES];
    for (unsigned i = 0; i <= cfg->n_classes; i++) {
        const struct config_class *k = i ? &cfg->classes[i - 1] : NULL;
        threads[i] = k ? k->threads : cfg->threads;
        if (threads[i] == 0)
            threads[i] = cfg->threads; /* 0: one per CPU, already resolved for the default */
        groups[i] = class_groups(k ? k->groups : cfg->groups, threads[i], cfg->concurrency);
    }
    if (alloc_listeners(srv, cfg, groups) < 0) {
        log_error("out of memory");
        return -1;
    }
    for (unsigned i = 0; i <= cfg->n_classes; i++) {
        const struct config_class *k = i ? &cfg->classes[i - 1] : NULL;
        int nice = (k ? k->nice : 0) + shift;
        nice = nice > 19 ? 19 : nice;
        struct service *svc = &srv->svcs[srv->n_svcs];
        if (service_init(svc, &srv->http, k ? k->name : "default", threads[i], groups[i],
                         cfg->concurrency, cfg->promotion, cfg->reactivation,
                         nice ? own + nice : 0, k ? k->max_connections : 0) < 0) {
            log_error("cannot create the thread groups of class %s: %s",
                      k ? k->name : "default", strerror(errno));
            return -1;
        }
        srv->http.services[srv->n_svcs] = &svc->http;
        srv->n_svcs++;
        srv->http.n_services = srv->n_svcs;
        const struct config_listen *ls = k ? k->listen : cfg->listen;
        unsigned n = k ? k->n_listen : cfg->n_listen;
        for (unsigned j = 0; j < n; j++) {
            if (ls[j].via_wildcard) { /* the wildcard's socket accepts for it */
                log_info("%s: accepted by the socket of %s (no `bind`, as nginx)", ls[j].text,
                         wildcard_of(ls, n, &ls[j]));
                continue;
            }
            if (add_listeners(srv, svc, &ls[j], ls, n, cfg->header_timeout_ms) < 0)
                return -1;
        }
    }
    if (srv->before_serving && srv->before_serving(cfg) < 0)
        return -1;
    for (unsigned i = 0; i < srv->n_svcs; i++) {
        struct service *svc = &srv->svcs[i];
        int rc = service_start(svc);
        if (rc < 0) {
            log_error("cannot start threads: %s", strerror(-rc));
            return -1;
        }
        struct lf_group_stats gs;
        unsigned nthreads;
        service_group_stats(svc, &gs, &nthreads);
        if (svc->n_groups > 1)
            log_info("class %s: %u threads in %u groups at nice %d", svc->name, nthreads,
                     svc->n_groups, svc->nice ? svc->nice : own);
        else
            log_info("class %s: %u threads at nice %d", svc->name, nthreads,
                     svc->nice ? svc->nice : own);
    }
    return 0;
}

static void check_fd_limit(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)want + 64)
        log_warn("open files limited to %llu: fewer than max_connections (%u) can be served",
                 (unsigned long long)rl.rlim_cur, want);
}

void server_init(struct server *srv)
{
    memset(srv, 0, sizeof(*srv));
    generation_current_init(&srv->http.current);
    srv->http.server = srv;
    srv->http.access_log.fd = -1;
    srv->spare.fd = -1;
    srv->start_ms = clock_now_ms();
}

int server_start(struct server *srv, struct generation *g)
{
    generation_install(&srv->http.current, g);
    const struct config *cfg = &g->cfg; /* the server's reference keeps it */
    char where[CONFIG_PATH_MAX + 32];
    if (log_open_error(cfg->error_log, cfg->error_level) < 0) {
        generation_origin(cfg, "error_log", where, sizeof(where));
        fprintf(stderr, "lfhttpd: %serror_log \"%s\": %s\n", where, cfg->error_log,
                strerror(errno));
        return -1;
    }
    if (access_log_open(&srv->http.access_log, cfg->access_log, cfg->access_log_json) < 0) {
        generation_origin(cfg, "access_log", where, sizeof(where));
        log_error("%saccess_log \"%s\": %s", where, cfg->access_log, strerror(errno));
        return -1;
    }
    check_fd_limit(cfg->max_connections);
    srv->http.max_connections = cfg->max_connections;
    http_response_set_server(cfg->server_tokens ? "lfhttpd/" LFHTTPD_VERSION : "lfhttpd");
    listener_spare_init(&srv->spare);
    if (start_services(srv, cfg) < 0)
        return -1;
    const char *promotion = "";
    if (cfg->concurrency == LF_STRATEGY_LEADER_FOLLOWERS)
        promotion = cfg->promotion == LF_PROMOTE_LIFO ? " with LIFO promotion"
                                                      : " with condvar promotion";
    unsigned sites = 0;
    for (const struct conf_node *n = config_next(cfg, "server", NULL); n;
         n = config_next(cfg, "server", n))
        sites++;
    char what[CONFIG_PATH_MAX + 32];
    if (sites)
        snprintf(what, sizeof(what), "%u server block%s", sites, sites == 1 ? "" : "s");
    else
        snprintf(what, sizeof(what), "%s", cfg->root);
    log_info("lfhttpd %s serving %s (%s%s, %u service class%s)", LFHTTPD_VERSION, what,
             lf_strategy_name(cfg->concurrency), promotion, srv->n_svcs,
             srv->n_svcs == 1 ? "" : "es");
    if (g->tls)
        tls_log_path();
    return 0;
}

void server_fini(struct server *srv)
{
    for (unsigned i = 0; i < srv->n_svcs; i++)
        service_stop(&srv->svcs[i]);
    for (unsigned i = 0; i < srv->n_svcs; i++)
        service_fini(&srv->svcs[i]);
    for (unsigned i = 0; i < srv->n_listeners; i++)
        listener_close(&srv->listeners[i]);
    free(srv->listeners);
    srv->listeners = NULL;
    access_log_close(&srv->http.access_log);
    listener_spare_fini(&srv->spare);
    /* Every connection is closed: the server's is the last reference. */
    generation_current_fini(&srv->http.current);
    http_sources_fini();
}

