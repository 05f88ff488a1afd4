/* server.h — the server as a whole: configuration, document root, logs, modules, the
 * services (Leader/Followers groups) and their listeners. One instance, made in main and
 * passed to whatever needs it. */
#ifndef LFHTTPD_SERVER_H
#define LFHTTPD_SERVER_H

#include <pthread.h>
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

/* One loaded configuration and what is built from it: the document root, the parser's
 * limits, the module chain. SIGHUP builds a new generation beside the running one; new
 * connections, and each connection's next request, take the new one, while requests in
 * flight finish with the generation they started with. The last reference frees it. */
struct generation {
    atomic_uint refs;      /* the server's (while current) + one per connection */
    unsigned number;       /* 1 at start, then one more per reload */
    struct config cfg;
    int root_fd;           /* the document root, O_PATH | O_DIRECTORY */
    char root_real[4096];  /* its real path */
    struct http_limits limits;
    struct module_chain chain;
    bool chain_ready;      /* module_chain_init succeeded: fini is owed */
};

/* The current generation, with a reference for the caller. */
struct generation *generation_acquire(struct server *srv);
/* Another reference to a generation the caller already holds. */
void generation_hold(struct generation *g);
/* Drop a reference; the last one frees the generation (module fini, root, config). */
void generation_release(struct generation *g);
/* Free an unpublished generation (refs never taken), or the last reference's. */
void generation_free(struct generation *g);
/* Make g current (it arrives with the server's reference) and release the old one. */
void server_install_generation(struct server *srv, struct generation *g);

struct server {
    /* Current generation: read without the lock only to compare pointers, or by the main
     * thread (the only writer); everyone else dereferences it through
     * generation_acquire(). */
    struct generation *_Atomic gen;
    pthread_mutex_t gen_lock;
    atomic_uint gen_number;   /* the current generation's number, for the status page */
    unsigned max_connections; /* from the configuration at start: needs a restart */
    struct access_log access_log;
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
struct service *server_class_for_request(struct server *srv, const struct config *cfg,
                                         const char *path, size_t len, struct http_slice host);
/* The class a new connection belongs to by client address, or NULL. */
struct service *server_class_for_peer(struct server *srv, const struct config *cfg,
                                      const struct sockaddr *peer);

/* listener.c */
int listener_open(struct server *srv, struct listener *l, const struct config_listen *addr);
void listener_event(struct lf_handle *h, uint32_t events);

#endif
