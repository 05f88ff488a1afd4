/* upstream.h — the servers a proxied request may go to, and which one it goes to: nginx's
 * `upstream` block and its balancers, without the event machinery (that is the proxy's).
 *
 *   upstream app {
 *       server 127.0.0.1:3000 weight=2 max_fails=3 fail_timeout=10s;
 *       server 127.0.0.1:3001;
 *       server unix:/run/app.sock backup;
 *       keepalive 32;
 *       least_conn;
 *   }
 *
 * Addresses: IPv4 or IPv6 with an optional port (80 when none), `unix:PATH`, or a host name
 * resolved once at load (each of its addresses a server of its own, as nginx does).
 * Parameters: weight=N (1..1000, default 1), max_fails=N (default 1; 0: never taken out),
 * fail_timeout=TIME (default 10s), backup, down, max_conns=N (0: no limit). Refused as
 * open-source nginx 1.22 refuses them: resolve, service=, slow_start=, route=, drain.
 *
 * Choosing. Weighted round-robin by default: the servers are taken in the order of a
 * smooth weighted schedule built at load (weights 2, 1 give A B A), a shared atomic counter
 * stepping through it, so that no lock is taken and two threads never wait on each other.
 * `least_conn`: the server with the fewest requests in flight per unit of weight, ties
 * broken by the schedule. A server that failed max_fails times within fail_timeout is out
 * for fail_timeout; then one request tries it again, and a success brings it back. A set of
 * one server never takes it out (nginx's rule: there is nowhere else to go). The
 * backup servers are tried only when every primary one is out. When every server is out,
 * the choice fails at once (the proxy answers 502).
 *
 * nginx's other methods choose as nginx does, so that a key goes to the server nginx's
 * would send it to: `ip_hash` (the first three bytes of an IPv4 client address, the
 * sixteen of an IPv6 one), `hash KEY` (CRC-32 of the key, Cache::Memcached's scheme), `hash
 * KEY consistent` (ketama: 160 points a unit of weight on a ring, each the CRC-32 of the
 * server as written, a NUL, its port and the previous point) and `random [two
 * [least_conn]]`. An unavailable server makes them hash again, up to 20 times, then fall
 * back to round-robin, as nginx's. They take no backup servers (nginx refuses them).
 *
 * A set is built once per generation and read by every thread; the live figures (requests
 * in flight, failures, the time a server comes back) are atomics.
 */
#ifndef LFHTTPD_UPSTREAM_H
#define LFHTTPD_UPSTREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "directive.h"
#include "vars.h"

#define UPSTREAM_NAME_MAX 64
#define UPSTREAM_SERVERS_MAX 64
#define UPSTREAM_SCHEDULE_MAX 4096 /* the sum of the weights of one set's primaries */
#define UPSTREAM_HOMES_MAX 16      /* homes counted apart for a per-home bound; more share one */

struct upstream_server {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char text[128];        /* as written (and the address, for a resolved name) */
    unsigned weight;
    unsigned max_fails;    /* 0: failures never take it out */
    unsigned fail_timeout_ms;
    bool backup;
    bool down;             /* `down`: never chosen */
    unsigned max_conns;    /* max_conns=N: in flight at most (0: no limit) */
    char written[128];     /* the server directive's address as written (hash consistent) */
    unsigned line;
    void *tls_session;       /* https: the last TLS session it gave (upstream_tls.h) */
    /* Live */
    atomic_uint active;      /* requests in flight */
    atomic_uint fails;       /* failures in the current window */
    atomic_llong window_ms;  /* when the current failure window started */
    atomic_llong out_until_ms; /* taken out until then (0: in) */
    atomic_ullong requests, failures; /* since load, for /status and metrics */
    atomic_ullong answered, answer_us; /* heads received, and the time they took in all */
};

enum upstream_balance { UPSTREAM_ROUND_ROBIN, UPSTREAM_LEAST_CONN, UPSTREAM_IP_HASH,
                        UPSTREAM_HASH, UPSTREAM_RANDOM };

/* A point of `hash ... consistent`'s ring. */
struct upstream_point {
    uint32_t hash;
    uint16_t server; /* the index of a server written so (any of a resolved name's) */
};

/* A request's choice, across its attempts: the key it hashes, and where hashing is. */
struct upstream_choice {
    const unsigned char *key; /* ip_hash: the address's bytes; hash: the key expanded */
    size_t key_len;
    uint64_t hash;            /* ip_hash's and hash's running value; consistent: the point */
    unsigned rehash, tries;
    bool begun;
};

/* An idle connection to one of the servers, kept for the next request (`keepalive N`).
 * The proxy embeds it in its own connection state and hands down how to watch, claim and
 * close it: the set only keeps the list.
 *
 * While listed, a connection may be watched (its socket waited on, so that a byte or a
 * close from the server drops it at once). Whoever takes it from the list claims it first,
 * under the list's lock; a claim fails while the watch's event is being handled, and that
 * handler, the only one then, drops it from the list (upstream_idle_drop) and closes it. */
struct upstream_idle {
    struct upstream_idle *next;
    struct upstream_server *server; /* the server it is connected to */
    const void *home;               /* where it is registered (the proxy's thread group) */
    int64_t since_ms;               /* idle since */
    int64_t born_ms;                /* connected then (keepalive_time) */
    unsigned requests;              /* carried so far (keepalive_requests) */
    /* Start watching it: called under the list's lock once it is listed. NULL: none. */
    void (*watch)(struct upstream_idle *idle);
    /* Stop the watch and own it, or false if its event is being handled. NULL: always. */
    bool (*claim)(struct upstream_idle *idle);
    void (*close)(struct upstream_idle *idle);
};

struct upstream {
    char name[UPSTREAM_NAME_MAX]; /* "" for the implicit one of a proxy_pass host */
    unsigned line;
    struct upstream_server servers[UPSTREAM_SERVERS_MAX];
    unsigned n_servers;
    unsigned keepalive;            /* idle connections kept, 0: none */
    unsigned keepalive_requests;   /* requests a kept connection carries at most (1000) */
    unsigned keepalive_timeout_ms; /* idle longer: closed, not reused (60s) */
    unsigned keepalive_time_ms;    /* a connection older: not kept again (1h) */
    enum upstream_balance balance;
    bool hash_consistent;          /* `hash KEY consistent` */
    bool random_two;               /* `random two`: the lighter of two random servers */
    struct vars_value *hash_key;   /* `hash`'s KEY, compiled (the proxy expands it); owned */
    struct upstream_point *points; /* consistent hashing's ring, sorted; owned */
    unsigned n_points;
    unsigned total_weight;         /* of the primaries */
    uint8_t schedule[UPSTREAM_SCHEDULE_MAX]; /* primaries, smooth weighted order */
    unsigned n_schedule;
    atomic_uint next;              /* the round-robin position */
    /* The idle connections, newest first, in one list that every thread group takes from,
     * its own first: `keepalive` of them for each group (as nginx keeps them per worker
     * process), bounded in all for the proxy (a group with more requests in flight than its
     * share keeps what another's fewer leave room for, where nginx's busier worker closes
     * them and connects again), per home for an application (upstream_idle_put). */
    pthread_mutex_t idle_lock;
    struct upstream_idle *idle;
    unsigned n_idle;
    struct {
        const void *home;
        unsigned n;
    } homes[UPSTREAM_HOMES_MAX];
};

/* Read an `upstream NAME { ... }` block into u. Messages go to r with their lines.
 * Returns 0 or -1. */
int upstream_read(struct upstream *u, const struct conf_node *block, struct conf_reader *r);

/* A one-server set for `proxy_pass http://HOST[:PORT]`: HOST resolved now (each address a
 * server, round-robin). Returns 0, or -1 with the reason in msg. */
int upstream_from_host(struct upstream *u, const char *hostport, unsigned line, char *msg,
                       size_t len);

/* A set for a name resolved at run time (proxy_pass with variables), or an address named
 * so (fastcgi_pass with variables): its addresses (addrs[i], len[i]) on `port` (a unix
 * socket's as it is), round-robin, no keepalive, as nginx's. Returns 0 or -1. */
int upstream_from_addrs(struct upstream *u, const struct sockaddr_storage *addrs,
                        const socklen_t *len, unsigned n, unsigned port);

/* A target named at run time (fastcgi_pass, uwsgi_pass, scgi_pass with variables), read
 * as nginx reads one (ngx_parse_url, no name resolved): `unix:PATH`, IPv4[:PORT],
 * [IPv6][:PORT], or NAME[:PORT] (an `upstream` block's name, or a host to resolve). */
enum upstream_addr_kind { UPSTREAM_ADDR_UNIX, UPSTREAM_ADDR_IP, UPSTREAM_ADDR_NAME };
struct upstream_addr {
    enum upstream_addr_kind kind;
    struct sockaddr_storage addr; /* UNIX, IP: the address (its port, if one was given) */
    socklen_t addr_len;
    const char *host; /* a slice of the text: the host ([IPv6] with its brackets), the path */
    size_t host_len;
    unsigned port;    /* 0: none was given */
};

/* Read text[0..len) into *a: 0, or -1 with nginx's words for what is wrong in *err ("no
 * host", "invalid host", "invalid port", "invalid IPv6 address", "no path in the unix
 * domain socket", "too long path in the unix domain socket"). */
int upstream_addr_parse(const char *text, size_t len, struct upstream_addr *a, const char **err);

/* Let go of what u owns (not u itself, nor its idle connections). */
void upstream_release(struct upstream *u);

/* A server for the next attempt, skipping those in tried (a bit per index); NULL when
 * none may be tried (every one out, down or tried). Counts it in flight: end the attempt
 * with upstream_done. ch: the request's choice (its key set, begun false before the
 * first), for the hashing methods; NULL for the others. */
struct upstream_server *upstream_pick(struct upstream *u, int64_t now_ms, uint64_t tried,
                                      struct upstream_choice *ch);

/* An attempt ended: failed (could not connect, timed out, a broken answer) or not. */
void upstream_done(struct upstream *u, struct upstream_server *s, bool failed,
                   int64_t now_ms);

/* Count the request a connection to be kept has carried: false when it was its
 * keepalive_requests-th, or the connection was made keepalive_time ago (nginx's: closed,
 * not kept). */
bool upstream_idle_carried(const struct upstream *u, struct upstream_idle *idle, int64_t now_ms);

/* Keep an idle connection, and watch it: false when `keepalive` times `groups` (the thread
 * groups of the class whose request let it go) are kept already, or with groups 0 when
 * `keepalive` are kept already for its home (the caller closes it). Once it is kept,
 * another thread may have it. */
bool upstream_idle_put(struct upstream *u, struct upstream_idle *idle, int64_t now_ms,
                       unsigned groups);
/* An idle connection to server s that could be claimed, newest first, one whose home is
 * `home` if there is one (it then needs no moving), or NULL. */
struct upstream_idle *upstream_idle_take(struct upstream *u, const struct upstream_server *s,
                                         const void *home);
/* The watch of a listed connection saw an event: out of the list (the caller closes it). */
void upstream_idle_drop(struct upstream *u, struct upstream_idle *idle);
/* Close every idle connection (their close hooks): when the set is let go of. One whose
 * watch is handling an event is waited for: that handler closes it. */
void upstream_idle_close_all(struct upstream *u);
/* Close the idle connections kept longer than the block's keepalive_timeout (as nginx's
 * timer does: an application server such as PHP-FPM gives a kept connection a worker of
 * its own until it closes). Those whose watch is handling an event are left to it. */
void upstream_idle_expire(struct upstream *u, int64_t now_ms);

/* An attempt on s received its answer's head `us` microseconds after it began. */
void upstream_answered(struct upstream_server *s, int64_t us);

/* Is the server out (taken out by its failures, or `down`) now? */
bool upstream_server_out(const struct upstream_server *s, int64_t now_ms);

#endif
