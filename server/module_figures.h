/* module_figures.h — the running server's figures, as a module may read them for a status
 * page (mod_handlers' /status and readiness probe) or a metrics scrape (mod_metrics): live
 * counts, counters since start, and what the other modules and blocks report. Read-only
 * copies, filled from the core's counters (server.c, server_metrics.c, module_chain.c): a module
 * that includes this still sees no connection, thread or the chain itself.
 */
#ifndef LFHTTPD_MODULE_FIGURES_H
#define LFHTTPD_MODULE_FIGURES_H

#include <stdbool.h>
#include <stdint.h>

#include "module.h"

struct site_set;
struct strbuf;
struct upstream;

/* Live figures of the whole server, for a status page. */
#define SERVER_STATS_GROUPS 8 /* the service classes reported, in their order */
struct server_stats {
    int64_t uptime_s;
    unsigned connections; /* open now, all groups */
    unsigned generation;  /* configuration generation: 1 at start, one more per reload */
    /* The process's context switches since start, every thread's (getrusage): voluntary
     * (a thread waited) and involuntary (preempted). */
    uint64_t ctx_voluntary, ctx_involuntary;
    unsigned n_groups; /* the entries of groups[] that are filled */
    struct {
        char name[32];        /* the class's name */
        const char *strategy; /* "Leader/Followers", "Half-Sync/Half-Async"... (static) */
        unsigned threads;
        unsigned connections; /* open now in this class */
        int nice;             /* its threads' nice value */
        uint64_t events, handoffs, waits; /* the thread group's, since start (lf_group.h) */
        uint64_t requests;
        uint64_t p50_us, p99_us; /* service time percentiles (upper bounds: powers of 2) */
    } groups[SERVER_STATS_GROUPS];
    bool draining; /* in the shutdown_delay after SIGTERM (module_server_draining) */
};
void module_server_stats(const struct request *req, struct server_stats *out);

/* Is the server in its shutdown_delay (SIGTERM received, still serving everything)? A
 * health check answers "not ready" then. One atomic load: cheap enough for every probe. */
bool module_server_draining(const struct request *req);

/* Figures of the whole server for a metrics scrape (mod_metrics), beside server_stats:
 * counters since start, whatever reloads happened. */
#define SERVER_METRICS_STATES 8   /* enum conn_state: new, idle, head, body, send... */
#define SERVER_METRICS_BUCKETS 32 /* the service-time histogram's: times below 2^i us */
struct server_metrics {
    const char *version; /* static */
    unsigned generation;
    uint64_t reloads_ok, reloads_refused; /* SIGHUPs whose configuration served, refused */
    double start_time_s; /* the Unix time the server started */
    uint64_t tls_handshakes, tls_resumed, tls_failed;
    uint64_t accepted, handled; /* connections accepted, and served (not refused), since start */
    unsigned n_classes; /* the entries of classes[] that are filled */
    struct {
        char name[32];
        unsigned connections;                      /* open now */
        unsigned by_state[SERVER_METRICS_STATES];  /* open now, by enum conn_state */
        uint64_t requests, by_status[5];           /* by_status: 1xx..5xx */
        uint64_t bytes_sent, bytes_received;
        uint64_t latency_us_sum;
        uint64_t latency_us_log2[SERVER_METRICS_BUCKETS];
    } classes[SERVER_STATS_GROUPS];
};
void module_server_metrics(const struct request *req, struct server_metrics *out);

/* The connections as nginx's stub_status counts them: open now; reading a request head;
 * writing (a body being read, an answer being sent or made, and the request asking);
 * waiting (the rest: idle between requests, or before the first byte). A walk of the
 * connection lists under their locks: a status page's cost, not a request's. */
struct server_connections {
    uint64_t active, reading, writing, waiting;
};
void module_server_connections(const struct request *req, struct server_connections *out);

/* Every module's upstream sets (their upstreams hooks), up to max into out; how many
 * there are. */
unsigned module_upstreams(const struct request *req, struct upstream **out, unsigned max);

/* Every module's metrics hook, in chain order, into b. */
void module_metrics(const struct request *req, struct strbuf *b);

/* The server blocks of the generation that answers req (site.h), req->site among them;
 * NULL when the configuration has none. */
const struct site_set *module_sites(const struct request *req);

#endif
