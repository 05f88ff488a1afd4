/* http_conn.h — HTTP/1.1 over the transport: what the layers above (the listener, the
 * service, the server) set up and call. The request loop is http_conn.c; what it shares
 * with the late responses (http_stream.c, http_proxy.c) is http_source.h.
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
#include "http_source.h"
#include "log.h"

/* A service class's HTTP side, whose connections are served by `groups` (n of them: a
 * connection stays in one); max_connections 0: no limit of its own. */
void http_service_init(struct http_service *svc, struct http_shared *shared,
                       struct lf_group *const *groups, unsigned n, unsigned max_connections);
/* After the group's threads have stopped: close every connection. */
void http_service_fini(struct http_service *svc);

/* A new connection on an accepted socket, served by `group` (one of the class's; NULL:
 * the class chooses), with generation gen (it takes its own reference); NULL if out of
 * memory (fd is then closed). Not yet in the handle set: start
 * it with http_conn_start, or wait for its first bytes with conn_wait(CONN_NEW). */
struct conn *http_conn_open(struct http_service *svc, struct lf_group *group,
                            struct generation *gen, int fd,
                            const struct sockaddr *peer, socklen_t peer_len,
                            const struct sockaddr *local);
/* Process a connection whose socket is readable, outside the handle set (after accept). */
void http_conn_start(struct conn *c);

/* (At exit, once every thread group has stopped and every generation is gone:
 * http_sources_fini, http_source.h, frees what the sources keep.) */

/* The class a request belongs to by its rules (path prefix, longest first; then Host), or
 * NULL if no class's rule claims it. The rules come from the request's generation: a
 * reload may change them (the set of classes itself, one service each, stays as started). */
struct http_service *http_class_for_request(const struct http_shared *shared,
                                            const struct config *cfg, const char *path,
                                            size_t len, struct http_slice host);
/* The class a new connection belongs to by client address, or NULL. */
struct http_service *http_class_for_peer(const struct http_shared *shared,
                                         const struct config *cfg, const struct sockaddr *peer);

#endif
