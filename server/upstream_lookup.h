/* upstream_lookup.h — where a request goes when its `proxy_pass` or `fastcgi_pass`
 * (`uwsgi_pass`, `scgi_pass`) has variables and the value names no `upstream` block: an
 * address, or a host name looked up by the location's `resolver`, made a set of servers of
 * its own (nginx's round-robin over the addresses; nothing kept).
 *
 * Embedded in a source's state and kept with it between requests, so that a warm state
 * allocates nothing. The source drives the wait (its handle on rwait.fd, its deadline,
 * resolver_timeout, through the sweep); this says when the set is ready, and why not in
 * nginx's words ("no resolver defined to resolve HOST", "HOST could not be resolved (3:
 * Host not found)").
 */
#ifndef LFHTTPD_UPSTREAM_LOOKUP_H
#define LFHTTPD_UPSTREAM_LOOKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "lf_group.h"
#include "resolver.h"
#include "upstream.h"

struct upstream_lookup {
    char host[RESOLVER_NAME_MAX]; /* a name, or an IP address (IPv6 without brackets) */
    unsigned port;
    struct upstream *set;         /* made of the addresses (owned, kept for the next) */
    struct resolver_wait rwait;   /* the wait for the answer: its fd the source's handle */
    bool resolving;               /* rwait is in the resolver's lists */
};

enum upstream_lookup_result {
    UPSTREAM_LOOKUP_FAILED = -1, /* why says it: the answer is 502 */
    UPSTREAM_LOOKUP_WAIT = 0,    /* wait for rwait.fd to be readable, then _take */
    UPSTREAM_LOOKUP_READY = 1,   /* l->set holds the addresses */
};

/* Look up l->host (an IP address is used as it is) by r, its sockets in g's handle set. */
enum upstream_lookup_result upstream_lookup_begin(struct upstream_lookup *l,
                                                  struct resolver *r, struct lf_group *g,
                                                  char *why, size_t len);
/* rwait.fd was readable: the answer, if it is in (the source closes rwait.fd). */
enum upstream_lookup_result upstream_lookup_take(struct upstream_lookup *l,
                                                 struct resolver *r, char *why, size_t len);
/* The wait ends without an answer (the request went, or resolver_timeout passed: then
 * why, if not NULL, says nginx's "HOST could not be resolved (110: Operation timed out)").
 * The source closes rwait.fd. */
void upstream_lookup_cancel(struct upstream_lookup *l, struct resolver *r, char *why,
                            size_t len);
/* The set of the addresses addr[0..n) (a unix socket's as it is, the others on l->port). */
enum upstream_lookup_result upstream_lookup_set(struct upstream_lookup *l,
                                                const struct sockaddr_storage *addr,
                                                const socklen_t *addr_len, unsigned n,
                                                char *why, size_t len);
/* Let go of the set (when the state itself goes). */
void upstream_lookup_free(struct upstream_lookup *l);

#endif
