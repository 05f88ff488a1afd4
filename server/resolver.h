/* resolver.h — names resolved at run time, for `proxy_pass` with variables: nginx's
 * `resolver ADDRESS[:PORT]... [valid=TIME] [ipv4=on|off] [ipv6=on|off]`.
 *
 * A name is asked for as nginx's resolver asks: A and AAAA (ipv4=, ipv6=), each answer
 * parsed here; an answer that holds a CNAME alone makes the name it points to asked for in
 * turn (8 at most); a SERVFAIL or a refusal is an answer, not a reason to ask elsewhere.
 * The queries are c-ares's, driven from a thread group's handle set: the channel's sockets
 * are handles of the group of the request that asked, processed by whichever thread gets
 * their event, so no thread ever waits on DNS and none is given to it. Answers are cached
 * for their TTL, or for `valid=` when it is given; requests that ask for a name whose query
 * is in flight wait on that query. A request that cannot have its answer at once is
 * parked: it waits on a descriptor of its own (resolver_wait.fd) that the answer makes
 * readable, so it is woken in its own group like any other event; its deadline
 * (resolver_timeout) is the caller's.
 *
 * One resolver per `resolver` directive, shared by the blocks that inherit it, by every
 * thread (a lock), for as long as its generation.
 */
#ifndef LFHTTPD_RESOLVER_H
#define LFHTTPD_RESOLVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "lf_group.h"

#define RESOLVER_ADDRS_MAX 16 /* addresses of one name kept */
#define RESOLVER_NAME_MAX 256

struct resolver;

/* A name's addresses (their ports 0). */
struct resolver_addrs {
    unsigned n;
    struct sockaddr_storage addr[RESOLVER_ADDRS_MAX];
    socklen_t len[RESOLVER_ADDRS_MAX];
};

/* A request waiting for a name, embedded in the caller's state. */
struct resolver_wait {
    struct resolver_wait *next;
    int fd;        /* readable once the answer is in: the caller's, to wait on and close */
    int notify_fd; /* the resolver's end (written once) */
    bool done;     /* under the resolver's lock; then status and addrs are the answer */
    int status;    /* 0, or RESOLVER_E* */
    struct resolver_addrs addrs;
};

/* A lookup's failures, numbered as nginx's resolver logs them ("(3: Host not found)"). */
enum {
    RESOLVER_EFORMERR = 1,
    RESOLVER_EFAIL = 2,
    RESOLVER_ENOTFOUND = 3,
    RESOLVER_ENOTIMP = 4,
    RESOLVER_EREFUSED = 5,
    RESOLVER_ETIMEDOUT = 110,
};

/* A resolver for `servers` ("IP", "IP:PORT", "[IPv6]:PORT"; 53 by default). valid_s:
 * how long an answer is kept (0: its TTL). Returns NULL with the reason in msg. */
struct resolver *resolver_create(const char *const *servers, unsigned n, unsigned valid_s,
                                 bool ipv4, bool ipv6, char *msg, size_t len);
struct conf_node;
/* A resolver for the statement `resolver ADDRESS ... [valid=TIME] [ipv4=on|off]
 * [ipv6=on|off] [status_zone=NAME]` (proxy_pass's, fastcgi_pass's alike). Returns NULL with
 * the reason in msg. */
struct resolver *resolver_read(const struct conf_node *n, char *msg, size_t len);
/* Once no request uses it (its generation has gone). */
void resolver_free(struct resolver *r);

/* Look name up. 1: answered now (from the cache): w->status and w->addrs say it; 0: w is
 * parked until the answer comes (w->fd becomes readable; then resolver_take); -1: could
 * not ask (out of descriptors or memory: w->status says a server failure). g: the group
 * whose handle set takes the query's sockets. */
int resolver_lookup(struct resolver *r, const char *name, struct lf_group *g,
                    struct resolver_wait *w);
/* The parked w's answer (after its fd was readable): true when it is in (w->status,
 * w->addrs), and the resolver's end of the pair is closed. */
bool resolver_take(struct resolver *r, struct resolver_wait *w);
/* w no longer waits (its deadline passed, or its request went): out of the query's list,
 * the resolver's end of the pair closed. */
void resolver_cancel(struct resolver *r, struct resolver_wait *w);

/* nginx's words for a status: "Host not found", "Operation timed out"... */
const char *resolver_strerror(int status);

#endif
