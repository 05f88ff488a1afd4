/* listener.h — listening sockets and the accept step of the Leader/Followers loop. */
#ifndef LFHTTPD_LISTENER_H
#define LFHTTPD_LISTENER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "http_conn.h"
#include "lf_group.h"

/* A descriptor held open, server-wide, so that one can be freed to answer a connection
 * 503 when the process is out of descriptors (EMFILE). */
struct listener_spare {
    pthread_mutex_t lock;
    int fd; /* -1 when used up: taken back on the next tick */
};

struct listener {
    struct lf_handle h; /* first: the handle is the listener */
    struct http_service *svc;        /* the class its connections go to (but see accept) */
    struct listener_spare *spare;
    struct listener *next;        /* the next listener of the same class */
    struct config_listen addr;    /* as bound (port filled in when 0 was asked) */
    /* A wildcard socket's addresses of its port that have none of their own (no `bind`,
     * config_listen.via_wildcard): a connection to one of them has it as its local address,
     * so that it chooses that address's servers, ssl and proxy_protocol, as nginx's. */
    struct sockaddr_storage *via;
    unsigned n_via;
    /* Out of descriptors with nothing left to shed with, or a failed re-arm: not armed
     * (it would fire again at once and spin); the tick re-arms it. */
    atomic_bool paused;
};

void listener_spare_init(struct listener_spare *spare);
void listener_spare_fini(struct listener_spare *spare);

/* Whether addr is free for a listener of this process alone: a socket without SO_REUSEPORT
 * is bound to it and closed at once. The thread groups' sockets share their address with
 * SO_REUSEPORT, which would let another process of the same user listen there too without
 * an error; a plain `listen` asks this first so that such a process fails with "address
 * already in use" as it does without groups. Returns 0, or -1 with errno set. */
int listener_claim(const struct config_listen *addr);
/* Bind and listen on addr (TCP_DEFER_ACCEPT for up to header_timeout_ms; SO_REUSEPORT if
 * `shared`: several sockets, one per thread group, on one address). A Unix socket
 * (`unix:PATH`) is one socket, `shared` aside, replacing a stale socket file. Returns 0, or -1 with
 * errno set. Its events go to listener_event once it is in a group's set, and the
 * connections it accepts stay in that group (unless a class rule claims them). */
int listener_open(struct listener *l, struct listener_spare *spare,
                  const struct config_listen *addr, int64_t header_timeout_ms, bool shared);
/* l, a wildcard address's socket, accepts for the addresses of ls[0 .. n) with
 * via_wildcard of its family and port too. Returns 0, or -1 (out of memory). */
int listener_accept_for(struct listener *l, const struct config_listen *ls, unsigned n);
/* Close the listening socket (if open); a Unix socket's file is removed, as nginx does. */
void listener_close(struct listener *l);
/* The tick of the listeners' class: re-arm the paused ones (first, first->next, ...), and
 * take back a spare descriptor if shedding used it up. Returns true when there is still no
 * spare (every descriptor is in use: another thread took the one shedding freed), for the
 * caller to free one. */
bool listener_resume_paused(struct listener *first);

#endif
