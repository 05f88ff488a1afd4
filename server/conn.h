/* conn.h — one client connection: its state between events, and the service that owns it.
 *
 * While a thread processes a connection, its request and response live on that thread's
 * stack. Only what must outlive the event is kept here: unparsed bytes of a request that
 * arrived in pieces (or a pipelined tail), the rest of a response the socket would not
 * take, the state of a request body being skipped, and the deadline of whatever the
 * connection is waiting for. An idle keep-alive connection holds nothing but this struct.
 */
#ifndef LFHTTPD_CONN_H
#define LFHTTPD_CONN_H

#include <assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "http_parse.h"
#include "http_response.h"
#include "config.h"
#include "lf_group.h"

struct server;

/* The per-thread read buffer, and a carry-over buffer's capacity: a request head at its
 * largest allowed size plus slack, so that "too large" is always detectable. */
#define CONN_BUF_SIZE (16384 + 1024)

/* Where a connection is between events (read by the deadline sweep from another thread). */
enum conn_state {
    CONN_NEW = 0, /* accepted, no byte yet: header_timeout from accept */
    CONN_IDLE,    /* keep-alive, between requests: keepalive_timeout */
    CONN_HEAD,    /* part of a request head received: header_timeout from its first byte */
    CONN_BODY,    /* skipping or collecting a body: header_timeout since the last bytes */
    CONN_SEND,    /* a response is parked, waiting for EPOLLOUT: send_timeout */
    CONN_LINGER,  /* closing: output shut, draining what the client still sends */
    CONN_STREAM,  /* a response streams from a pipe (CGI): its deadline kills the script */
};

enum conn_body { CONN_BODY_NONE = 0, CONN_BODY_LENGTH, CONN_BODY_CHUNKED };

struct conn_buf {
    struct conn_buf *next; /* in the service's free list */
    uint32_t len;
    char data[CONN_BUF_SIZE];
};

struct conn_out; /* a parked response: see conn.c */

/* A request whose body a handler needs, collected across events: the head, then the body
 * (decoded, if chunked), then raw bytes not yet decoded. */
struct conn_collect {
    size_t head_len;
    size_t body_len; /* decoded body bytes after the head */
    size_t raw_len;  /* valid bytes in data: head + body + pending raw */
    size_t cap;
    char data[];
};

struct service; /* below */

struct conn {
    struct lf_handle h; /* fd, event callback, group: first, so a handle is a conn */
    struct service *svc;
    struct conn *prev, *next; /* the service's list of open connections */

    _Atomic int64_t deadline_ms; /* CLOCK_MONOTONIC ms; the sweep acts once it passes */
    _Atomic uint8_t state;       /* enum conn_state */
    _Atomic bool expired;        /* the sweep found the deadline passed and shut the socket */
    bool registered;             /* in the epoll set yet (ADD once, then MOD) */
    bool close_after_send;       /* the parked response is the last one */
    uint8_t body_mode;           /* enum conn_body: a request body still being skipped */
    uint32_t requests;           /* requests served on this connection */

    uint64_t body_left; /* CONN_BODY_LENGTH: bytes still to skip */
    struct http_chunked chunked; /* CONN_BODY_CHUNKED: decoder state */

    struct conn_buf *in;  /* carried-over request bytes, or NULL */
    struct conn_out *out; /* the rest of a response, or NULL */
    struct conn_collect *collect; /* a request body being read for a handler, or NULL */
    struct conn_stream *stream;   /* a response streaming from a pipe, or NULL */
    _Atomic int stream_pgid;      /* its process group, for the sweep to kill; 0 if none */
    const struct sockaddr *local; /* the listener's address */
    struct service *home;         /* the class chosen at accept: requests no rule claims */
    struct generation *gen;       /* the configuration its requests use (a reference) */

    union {
        struct sockaddr sa;
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } peer;
};

static_assert(sizeof(struct conn) <= 256, "an idle connection should stay small");

#define SERVICE_LATENCY_BUCKETS 32

/* A service class: one Leader/Followers group, its threads' priority, its limits, and
 * the connections it serves. The default class is the server's first service. */
struct service {
    struct server *srv;
    char name[32];
    /* Its class's configuration is not kept: it belongs to the generation the service
     * was started with, which a reload frees. What a service needs is copied here. */
    unsigned max_connections;       /* 0: only the server-wide limit */
    int nice;                       /* its threads' priority, as applied */
    struct lf_group *group;
    struct lf_handle timer; /* a timerfd in the group's set: the deadline sweep */

    pthread_mutex_t lock; /* guards the lists below; never held across I/O but shutdown() */
    struct conn *conns;   /* open connections */
    struct conn *free_conns;
    unsigned n_free_conns;
    struct conn_buf *free_bufs;
    unsigned n_free_bufs;
    atomic_uint n_conns;
    int64_t last_flush_ms; /* when the sweep last flushed the access log */

    /* Requests answered, and a histogram of their service time (request parsed to
     * response handed to the socket): bucket i counts times below 2^i microseconds. */
    atomic_ulong requests;
    atomic_ulong latency_us_log2[SERVICE_LATENCY_BUCKETS];
};

/* Count one request served in `us` microseconds. */
void service_record(struct service *svc, int64_t us);

int service_init(struct service *svc, struct server *srv, const char *name, unsigned threads,
                 int nice, const struct config_class *cls);
/* Is the class full (its own max_connections)? */
bool service_full(const struct service *svc);
/* Move a connection this thread owns to another service's list and group (not armed). */
void service_move(struct conn *c, struct service *to);
/* After the group's threads have stopped: close every connection and free the pools. */
void service_fini(struct service *svc);

/* A new connection on an accepted socket, using generation gen (it takes its own
 * reference); NULL if out of memory (fd is then closed). */
struct conn *conn_open(struct service *svc, struct generation *gen, int fd,
                       const struct sockaddr *peer, socklen_t peer_len,
                       const struct sockaddr *local);
void conn_close(struct conn *c);
/* Between requests: move to the server's current generation if a reload made another. */
void conn_renew_generation(struct conn *c);

/* Wait for `events` (EPOLLIN/EPOLLOUT) in `state` until deadline; the last act of an event. */
void conn_wait(struct conn *c, enum conn_state state, uint32_t events, int64_t deadline_ms);

/* Carry-over buffers, from the service's free list. */
struct conn_buf *conn_buf_get(struct service *svc);
void conn_buf_put(struct service *svc, struct conn_buf *b);

enum send_result { SEND_DONE = 0, SEND_PARKED = 1, SEND_ERROR = -1 };

/* Send the response's head and body. If the socket would block, what is left is copied
 * onto the connection (the file descriptor moves with it) and SEND_PARKED is returned:
 * the caller then waits for EPOLLOUT and calls conn_send_pending. */
enum send_result conn_send_response(struct conn *c, struct response *r);
enum send_result conn_send_pending(struct conn *c);

/* Close after a response: shut our side, and drain the client's remaining bytes for a
 * moment so that a close with unread input does not reset the response away. */
void conn_linger(struct conn *c);
void conn_linger_event(struct conn *c);

int64_t conn_now_ms(void);
int64_t conn_now_us(void); /* CLOCK_MONOTONIC, precise: for measuring */

/* Streams (http_stream.c): start streaming resp->stream to the client (the last act of
 * the event: from then on the pipe's events drive the connection); go on after a parked
 * part of it was sent; abort it (the connection is closing). */
struct http_request;
void http_stream_start(struct conn *c, struct response *resp, const struct http_request *h);
void http_stream_resume(struct conn *c);
void http_stream_abort(struct conn *c);

/* For http_stream.c: send a finished response and go on with the connection (true), or
 * it was handed off: parked, lingering or closed (false). */
bool http_conn_send(struct conn *c, struct response *resp, const char *rest, size_t rest_len);
/* Run the modules' log hooks for a response whose request is no longer at hand (not
 * parsed, or streamed): they see an empty request (no fields, method unknown, path ""). */
void http_conn_log_unparsed(struct conn *c, const struct response *resp, int64_t now_s);
/* Go on reading and answering requests on a connection this thread owns. */
void http_conn_continue(struct conn *c);

/* The event callback of every connection (http_conn.c). */
void http_conn_event(struct lf_handle *h, uint32_t events);
/* Process a connection whose socket is readable, outside the handle set (after accept). */
void http_conn_start(struct conn *c);

#endif
