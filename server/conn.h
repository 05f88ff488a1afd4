/* conn.h — the transport: one client connection's socket and its state between events,
 * the pool that holds a group's connections, carry-over buffers, sending with parking,
 * and closing.
 *
 * The transport knows nothing of HTTP, and includes none of its headers. Whoever opens a
 * connection gives it its event handler and its close hook (conn_open): the only ways the
 * transport calls up. What the layer above keeps between events it keeps in a struct of
 * its own that begins with struct conn (the pool allocates conn_size bytes a connection),
 * and lets go of in the close hook.
 *
 * While a thread processes a connection, its request and response live on that thread's
 * stack. Only what must outlive the event is kept here: unparsed bytes of a request that
 * arrived in pieces (or a pipelined tail), the rest of a response the socket would not
 * take, and the deadline of whatever the connection is waiting for. An idle keep-alive
 * connection holds nothing but this struct.
 */
#ifndef LFHTTPD_CONN_H
#define LFHTTPD_CONN_H

#include <assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "lf_group.h"
#include "out_seg.h"
#include "timer.h"

/* The per-thread read buffer, and a carry-over buffer's capacity: a request head at its
 * largest allowed size plus slack, so that "too large" is always detectable. */
#define CONN_BUF_SIZE (16384 + 1024)

/* Where a connection is between events (read by the deadline sweep from another thread). */
enum conn_state {
    CONN_NEW = 0, /* accepted, no byte yet: header_timeout from accept */
    CONN_IDLE,    /* keep-alive, between requests: keepalive_timeout */
    CONN_HEAD,    /* part of a request head received: header_timeout from its first byte */
    CONN_BODY,    /* skipping or collecting a body: client_body_timeout and _min_rate */
    CONN_SEND,    /* a response is parked, waiting for EPOLLOUT: send_timeout */
    CONN_LINGER,  /* closing: output shut, draining what the client still sends */
    CONN_STREAM,  /* the socket waits out of the set while a process writes its answer: the
                     layer above keeps the deadline itself, and the sweep leaves it be */
    CONN_TIMED,   /* waits for a time, not an event (conn_park): a paced response, a
                     delayed request; the pool's waker makes it ready at wake_ms, and its
                     deadline (a send deadline from then) is the sweep's as CONN_SEND's */
};

struct conn_buf {
    struct conn_buf *next; /* in the pool's free list */
    uint32_t len;
    /* The first request's start (clock_now_us) when it was put aside to run again later,
     * so that $request_time counts the wait, as nginx's; 0: none. */
    int64_t start_us;
    char data[CONN_BUF_SIZE];
};

struct conn_out; /* a parked response: see conn.c */
struct generation;

/* The connections of one thread group: the list the deadline sweep walks, and free lists
 * so that a new connection or buffer rarely costs an allocation. */
struct conn_pool {
    struct lf_group *const *groups; /* the groups serving its connections (a class's) */
    unsigned n_groups;
    size_t conn_size; /* a connection's: struct conn and the layer above's state after it */
    unsigned max_connections; /* 0: no limit of its own (see conn_pool_full) */
    atomic_uint *n_total;     /* every pool's connections together (the server's count) */

    pthread_mutex_t lock; /* guards the lists below; never held across I/O but shutdown() */
    struct conn *conns;   /* open connections */
    struct conn *free_conns;
    unsigned n_free_conns;
    struct conn_buf *free_bufs;
    unsigned n_free_bufs;
    atomic_uint n_conns;
    /* Connections parked until a time (CONN_TIMED), n_timed of cap_timed, in no order
     * (a connection holds no index: an idle one stays small), and the one-shot timer that
     * wakes them (conn_pool_wake), armed to the earliest (wake_armed_ms; 0: not armed). */
    struct conn_timed {
        struct conn *c;
        int64_t wake_ms;
    } *timed;
    unsigned n_timed, cap_timed;
    int64_t wake_armed_ms;
    struct timer *waker; /* NULL: no timed waits (conn_pool_set_waker) */
};

typedef void (*conn_close_fn)(struct conn *c);

struct conn {
    struct lf_handle h; /* fd, event callback, group: first, so a handle is a conn */
    struct conn_pool *pool;
    struct conn *prev, *next; /* the pool's list of open connections */
    /* Called by conn_close before the socket closes: the layer above lets go of what it
     * hung on the connection. */
    conn_close_fn on_close;

    _Atomic int64_t deadline_ms; /* clock_now_ms(); the sweep acts once it passes */
    _Atomic uint8_t state;       /* enum conn_state */
    _Atomic bool expired;        /* the sweep found the deadline passed and shut the socket */
    /* CONN_STREAM through another descriptor of the connection's (an upstream socket): the
     * sweep wakes it by shutting that descriptor down, when the deadline has passed or the
     * client has closed its side, and sets `woken`. -1: none (the layer above keeps the
     * deadline itself). Written under the pool's lock (conn_set_wake_fd). */
    int wake_fd;
    _Atomic bool woken;
    bool wake_on_peer_close; /* wake it too when the client has closed its side */
    bool registered;             /* in the epoll set yet (ADD once, then MOD) */
    /* CONN_TIMED: its owner has let go of it (set last), so the waker may take it out of
     * the pool's timed list, where it is while this is set, and make its handle ready. */
    _Atomic bool parked;
    /* In this event so far: the socket's last read found it empty (EAGAIN or a short
     * read; TLS: any read of its records did), or a write found it full: the kernel will
     * report more (see lf_group_reactivate). */
    bool rd_drained, wr_blocked;
    bool close_after_send;       /* the parked response is the last one */
    /* TLS (conn_tls.c): the connection's SSL object, or NULL on a plain connection; and
     * where its handshake and closure stand (enum conn_tls_flag bits). */
    uint8_t tls_flags;
    void *tls;

    struct conn_buf *in;  /* carried-over request bytes, or NULL */
    struct conn_out *out; /* the rest of a response, or NULL */
    const struct sockaddr *local; /* the listener's address */
    union {
        struct sockaddr sa;
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } peer;
    /* Its serial number in the process, from 1 (nginx's $connection), set by the layer
     * above: 32 bits in the room the peer's union leaves, so it wraps after 2^32
     * connections where nginx's (a machine word) does not. */
    uint32_t number;
    /* The configuration its requests use (a reference), set and held by the layer above;
     * the transport reads only its send limits (send_min_rate, max_parked_size, sendfile)
     * in it. */
    struct generation *gen;
};

/* The most segments conn_send takes: the head and the body's. */
#define CONN_MAX_SEGS 80

/* An empty pool of connections served by groups[0..n) (the array must outlive the pool),
 * each conn_size bytes (at least sizeof(struct conn): the layer above's state follows). */
void conn_pool_init(struct conn_pool *pool, struct lf_group *const *groups, unsigned n,
                    size_t conn_size, unsigned max_connections, atomic_uint *n_total);
/* After the group's threads have stopped: close every connection and free the lists. */
void conn_pool_fini(struct conn_pool *pool);
/* Is the pool full (its own max_connections)? */
bool conn_pool_full(const struct conn_pool *pool);
/* The pool's open connections by state (enum conn_state), into counts[CONN_STATES]; for a
 * metrics scrape: walks the list under the pool's lock. */
#define CONN_STATES (CONN_TIMED + 1)
void conn_pool_count_states(struct conn_pool *pool, unsigned counts[CONN_STATES]);

/* A new connection on an accepted socket, in `pool`, served by `group` (one of the pool's;
 * NULL: the pool chooses), not yet in the handle set, waiting
 * for its first bytes until deadline_ms; its events go to on_event, and on_close (if set)
 * runs when it closes. NULL if out of memory (fd is then closed). */
struct conn *conn_open(struct conn_pool *pool, struct lf_group *group, int fd,
                       const struct sockaddr *peer, socklen_t peer_len,
                       const struct sockaddr *local, int64_t deadline_ms, lf_event_fn on_event,
                       conn_close_fn on_close);
void conn_close(struct conn *c);
/* Move a connection this thread owns to another pool and one of its groups (not armed). */
void conn_move(struct conn *c, struct conn_pool *to);

/* The descriptor the sweep shuts down to wake the connection while it waits in
 * CONN_STREAM (see wake_fd), or -1 for none; `woken` is cleared either way. on_peer_close:
 * also when the client has closed its side (not for a tunnel, where a half-close is
 * legitimate). */
void conn_set_wake_fd(struct conn *c, int fd, bool on_peer_close);

/* read() on the connection's socket, noting whether it was read empty; on a TLS
 * connection, SSL_read: -1 with EAGAIN when OpenSSL waits for the socket, 0 at the
 * client's close_notify or end of stream. */
ssize_t conn_read(struct conn *c, void *buf, size_t len);
/* The socket's own bytes, under TLS too (what comes before its handshake: a PROXY protocol
 * header): looked at and left there, or taken (as conn_read notes a drained socket). */
ssize_t conn_peek_raw(struct conn *c, void *buf, size_t len);
ssize_t conn_read_raw(struct conn *c, void *buf, size_t len);
/* A few bytes written at once if the socket takes them (a 100 Continue, a 408): send(),
 * or SSL_write on a TLS connection. -1 with EAGAIN when it would block. */
ssize_t conn_write(struct conn *c, const void *buf, size_t len);

/* --- TLS (conn_tls.c) --- */
enum conn_tls_flag {
    CONN_TLS_PEEKED = 1,   /* its first byte was seen to open a TLS record */
    CONN_TLS_BROKEN = 2,   /* a fatal TLS error: no close_notify is owed */
    CONN_TLS_STARVED = 4,  /* the last read found the socket empty (OpenSSL wants more) */
};
enum conn_tls_step {
    CONN_TLS_DONE,       /* the handshake is complete */
    CONN_TLS_WANT_READ,  /* wait for EPOLLIN, then step again */
    CONN_TLS_WANT_WRITE, /* wait for EPOLLOUT, then step again */
    CONN_TLS_PLAIN,      /* the client speaks plain HTTP on the TLS port */
    CONN_TLS_FAILED,     /* the client left, or the handshake failed (logged at info) */
};
/* Make the connection a TLS one: ssl (an SSL *, not yet bound to a socket) is bound to
 * its socket, and freed with the connection. */
void conn_tls_attach(struct conn *c, void *ssl);
/* Handshakes completed (resumed: of them, with a session resumed) and failed (a client
 * that began one and broke it off or was refused), process-wide since start. */
struct conn_tls_counts {
    uint64_t handshakes, resumed, failed;
};
void conn_tls_counts(struct conn_tls_counts *out);
/* Advance the handshake as far as the socket allows. */
enum conn_tls_step conn_tls_handshake(struct conn *c);
/* Has the handshake of a TLS connection finished? */
bool conn_tls_finished(const struct conn *c);
/* Does OpenSSL hold bytes that no socket event will announce: records read ahead and not
 * yet asked for? Once a read has found the socket empty, what it holds is the start of a
 * record, which the bytes still to come complete and announce: then false. */
bool conn_tls_pending(const struct conn *c);
/* Send close_notify once, unless the connection is broken (before a shutdown or close). */
void conn_tls_shutdown(struct conn *c);
/* Free the SSL object (conn_close does). */
void conn_tls_free(struct conn *c);
/* SSL_read / SSL_write, as conn_read and conn_write say. */
ssize_t conn_tls_read(struct conn *c, void *buf, size_t len);
ssize_t conn_tls_write(struct conn *c, const void *buf, size_t len);

/* Wait for `events` (EPOLLIN/EPOLLOUT) in `state` until deadline; the last act of an event.
 * If the connection cannot be armed it is closed (and the failure logged). */
void conn_wait(struct conn *c, enum conn_state state, uint32_t events, int64_t deadline_ms);
/* Re-arm another handle of the connection's (a pipe it waits on) in `state` until
 * deadline; the last act of an event. If it cannot be armed the connection is closed (and
 * the failure logged). */
void conn_wait_on(struct conn *c, struct lf_handle *h, enum conn_state state,
                  int64_t deadline_ms);

/* The deadline sweep, run on a timer's tick: every connection of the pool whose deadline
 * has passed (or that is idle while `stopping`) is marked expired and its socket shut
 * down (reading side only, so a 408 can still be written; both sides for a stalled send),
 * which wakes it in the handle set as usual, and the thread that then gets it closes it.
 * One whose process writes its answer (CONN_STREAM) is left alone: its deadline is the
 * layer above's (a flag set without a socket shut would wake nothing, and outlive it);
 * unless it waits through a wake_fd, which is shut down (and `woken` set) when its deadline
 * has passed or when the client has closed its side (a peek finds the end of its input).
 * The sweep itself never closes or frees a connection, so it cannot race the connection's
 * owner. */
void conn_pool_sweep(struct conn_pool *pool, int64_t now_ms, bool stopping);

/* Out of descriptors: end one idle keep-alive connection of the pool as the sweep ends an
 * expired one (its owner closes it). Returns false if none is idle. */
bool conn_pool_close_idle(struct conn_pool *pool);

/* The timer (one-shot, in one of the pool's groups) whose tick calls conn_pool_wake. */
void conn_pool_set_waker(struct conn_pool *pool, struct timer *waker);
/* The waker's tick: every parked connection whose wake_ms has come is taken out of the
 * timed list and its handle made ready (lf_group_wake): the connection's own group runs its
 * callback as for an EPOLLOUT, through the usual leader/follower path. One whose owner has
 * not let go yet is tried again a millisecond later. Re-arms the waker to the next. */
void conn_pool_wake(struct conn_pool *pool, int64_t now_ms);

/* Wait, out of the handle set's notice, until wake_ms; then (at the latest deadline_ms)
 * the callback runs as for an event, in state CONN_TIMED. The last act of an event, as
 * conn_wait. A client that closes meanwhile is noticed when it wakes. A stop (the sweep
 * while stopping) wakes it at once, expired. */
void conn_park(struct conn *c, int64_t wake_ms, int64_t deadline_ms);

/* Carry-over buffers, from the pool's free list. */
struct conn_buf *conn_buf_get(struct conn_pool *pool);
void conn_buf_put(struct conn_pool *pool, struct conn_buf *b);

enum send_result { SEND_DONE = 0, SEND_PARKED = 1, SEND_ERROR = -1 };

/* Pacing (limit_rate, the message's rate fields), nginx's: a response may have sent, since
 * its request's start, at most rate * (whole seconds elapsed + 1) bytes beyond its first
 * rate_after; after each write of n paced bytes it waits n / rate seconds. conn_send writes
 * what the budget allows and parks the rest (SEND_PARKED, as for a full socket), and
 * conn_wait(CONN_SEND) then parks the connection until the budget allows more (conn_park)
 * instead of waiting for EPOLLOUT: its send deadline runs from that time, and
 * send_min_rate does not apply to a paced response. */

/* Send the message's head and body segments (at most CONN_MAX_SEGS - 1). If the socket
 * would block, what is left is copied onto the connection (the file descriptor moves with
 * it: m->file_fd becomes -1) and SEND_PARKED is returned: the caller then waits for
 * EPOLLOUT and calls conn_send_pending. The memory of m's segments is free once it returns
 * (sent, or copied).
 *
 * Two limits hold for parked responses (the connection's generation's settings):
 * max_parked_size bounds the memory bytes parked on all connections of the server
 * together: a response whose copy would pass it is not parked, SEND_ERROR is returned and
 * the caller closes the connection (logged at most every 10 s). send_min_rate: while
 * parked, conn_wait(CONN_SEND) brings the deadline forward to when the response will
 * have gone out slower than that rate since it was parked, after a grace of the first
 * wait's send_timeout; the sweep then ends it as any passed send deadline. */
enum send_result conn_send(struct conn *c, struct out_msg *m);
enum send_result conn_send_pending(struct conn *c);

/* Close after a response: shut our side, and drain the client's remaining bytes for a
 * moment so that a close with unread input does not reset the response away. */
void conn_linger(struct conn *c);
void conn_linger_event(struct conn *c);

#endif
