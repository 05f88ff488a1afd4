/* http_conn.h — HTTP/1.1 over the transport: what the layers above (the listener, the
 * service, the server) set up and call. The state machine itself is http_conn.c and
 * http_stream.c, which share http_private.h.
 */
#ifndef LFHTTPD_HTTP_CONN_H
#define LFHTTPD_HTTP_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "conn.h"
#include "generation.h"
#include "http_parse.h"
#include "log.h"

#define HTTP_LATENCY_BUCKETS 32

/* Requests answered, and a histogram of their service time (request parsed to response
 * handed to the socket): bucket i counts times below 2^i microseconds. Relaxed atomics,
 * one class's: what /status and /metrics read. */
struct http_stats {
    atomic_ulong requests;
    atomic_ulong latency_us_log2[HTTP_LATENCY_BUCKETS];
    atomic_ulong latency_us_sum;
    atomic_ulong by_status[5]; /* responses 1xx .. 5xx */
    atomic_ulong bytes_sent;   /* body bytes, as the access log counts them */
    atomic_ulong bytes_received; /* request heads and bodies read from clients */
};

struct http_host;
struct server;

/* What the HTTP side of every connection shares, server-wide: set up by the server. */
struct http_shared {
    struct generation_current current; /* the configuration new requests use */
    struct access_log access_log;
    atomic_bool stopping;     /* SIGTERM/SIGINT: finish what is in flight, take nothing new */
    /* SIGTERM with a shutdown_delay, before `stopping`: everything is still served, but the
     * health handler answers 503 and no connection is kept alive, so that a load balancer
     * and clients move to other copies before any connection is refused. */
    atomic_bool draining;
    atomic_uint n_conns;      /* open connections, every host's */
    /* Bytes of request bodies being collected (their buffers), every host's: at most
     * max_body_memory; beyond it a body that needs a buffer is refused with 503. */
    _Atomic uint64_t body_memory;
    unsigned max_connections; /* from the configuration at start: needs a restart */
    /* One host a service class, the default class's first: where a request or a new
     * connection goes by the class rules. */
    struct http_host *hosts[1 + CONFIG_MAX_CLASSES];
    unsigned n_hosts;
    const struct server *server; /* for the modules (module_server_stats) */
};

/* One service class's HTTP side: its connections and the figures of their requests. */
struct http_host {
    struct conn_pool pool;
    struct http_shared *shared;
    struct http_stats stats;
};

/* A host whose connections are served by `groups` (n of them: a connection stays in one);
 * max_connections 0: no limit of its own. */
void http_host_init(struct http_host *host, struct http_shared *shared,
                    struct lf_group *const *groups, unsigned n, unsigned max_connections);
/* After the group's threads have stopped: close every connection. */
void http_host_fini(struct http_host *host);

/* A new connection on an accepted socket, served by `group` (one of the host's; NULL:
 * the host chooses), with generation gen (it takes its own reference); NULL if out of
 * memory (fd is then closed). Not yet in the handle set: start
 * it with http_conn_start, or wait for its first bytes with conn_wait(CONN_NEW). */
struct conn *http_conn_open(struct http_host *host, struct lf_group *group,
                            struct generation *gen, int fd,
                            const struct sockaddr *peer, socklen_t peer_len,
                            const struct sockaddr *local);
/* Process a connection whose socket is readable, outside the handle set (after accept). */
void http_conn_start(struct conn *c);

/* At exit, once every thread group has stopped and every generation is gone: free the
 * reverse proxy's spare states (kept while the groups run: see http_proxy.c). */
void http_proxy_fini(void);

/* The class a request belongs to by its rules (path prefix, longest first; then Host), or
 * NULL if no class's rule claims it. The rules come from the request's generation: a
 * reload may change them (the set of classes itself, one host each, stays as started). */
struct http_host *http_class_for_request(const struct http_shared *shared,
                                         const struct config *cfg, const char *path,
                                         size_t len, struct http_slice host);
/* The class a new connection belongs to by client address, or NULL. */
struct http_host *http_class_for_peer(const struct http_shared *shared,
                                      const struct config *cfg, const struct sockaddr *peer);

#endif
