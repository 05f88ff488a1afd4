/* server.h — the server as a whole: configuration, document root, logs, modules, the
 * services (Leader/Followers groups) and their listeners. One instance, made in main and
 * passed to whatever needs it. */
#ifndef LFHTTPD_SERVER_H
#define LFHTTPD_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "conn.h"
#include "http_parse.h"
#include "lf_group.h"
#include "log.h"
#include "module.h"

#define LFHTTPD_VERSION "0.1.0"

struct listener {
    struct lf_handle h; /* first: the handle is the listener */
    struct service *svc;
    struct config_listen addr; /* as bound (port filled in when 0 was asked) */
    /* Out of descriptors with nothing left to shed with: not re-armed (it would fire again
     * at once and spin); the timer re-arms it on its next tick. */
    atomic_bool paused;
};

/* The timer's tick: re-arm the service's paused listeners, and take back a spare
 * descriptor if shedding used it up. */
void listener_resume_paused(struct server *srv, struct service *svc);

struct server {
    struct config cfg;
    int root_fd;            /* the document root, O_PATH | O_DIRECTORY */
    char root_real[4096];   /* its real path */
    struct http_limits limits;
    struct access_log access_log;
    struct module_chain chain;
    struct service svcs[1 + CONFIG_MAX_CLASSES]; /* [0] is the default class */
    unsigned n_svcs;
    struct listener listeners[CONFIG_MAX_LISTEN * (1 + CONFIG_MAX_CLASSES)];
    unsigned n_listeners;

    pthread_mutex_t spare_lock;
    int spare_fd; /* held open so one can be freed to shed a connection on EMFILE */

    int64_t start_ms;     /* CLOCK_MONOTONIC at start, for uptime */
    atomic_bool stopping; /* SIGTERM/SIGINT: finish what is in flight, take nothing new */
    atomic_uint n_conns;  /* open connections, all services */
};

/* The class a request belongs to by its rules (path prefix, longest first; then Host), or
 * NULL if no class's rule claims it. */
struct service *server_class_for_request(struct server *srv, const char *path, size_t len,
                                         struct http_slice host);
/* The class a new connection belongs to by client address, or NULL. */
struct service *server_class_for_peer(struct server *srv, const struct sockaddr *peer);

/* listener.c */
int listener_open(struct server *srv, struct listener *l, const struct config_listen *addr);
void listener_event(struct lf_handle *h, uint32_t events);

#endif
