/* server.h — the server as a whole: the HTTP state its connections share (configuration
 * generations, the access log, the stop flag, the connection count), the services (one
 * thread group per class) and their listeners. One instance, made in main and passed to
 * whatever needs it. */
#ifndef LFHTTPD_SERVER_H
#define LFHTTPD_SERVER_H

#include <stdint.h>

#include "config.h"
#include "generation.h"
#include "http_conn.h"
#include "listener.h"
#include "service.h"

#define LFHTTPD_VERSION "0.1.0"

struct server {
    struct http_shared http;
    struct service svcs[1 + CONFIG_MAX_CLASSES]; /* [0] is the default class */
    unsigned n_svcs;
    struct listener *listeners; /* every class's, one per address and group */
    unsigned n_listeners;
    struct listener_spare spare;
    int64_t start_ms; /* clock_now_ms() at start, for uptime */
    /* Called by server_start once every listener is bound and before any thread serves a
     * request (the pid file, dropping root for `user`), or NULL; -1 stops the start. */
    int (*before_serving)(const struct config *cfg);
};

/* Before anything else: an empty server. */
void server_init(struct server *srv);
/* Install generation g (the first), open the logs, create the services and their
 * listeners, call before_serving, and start their threads. Returns 0, or -1 after logging
 * why. */
int server_start(struct server *srv, struct generation *g);
/* After server_start (or its failure), once nothing more is to be served: stop the
 * threads, close every connection and listener, the logs, and let the generation go. */
void server_fini(struct server *srv);

#endif
