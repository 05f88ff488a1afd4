/* http_proxy.c — a response from an upstream HTTP server, relayed to the client (the
 * reverse proxy's event side; mod_proxy writes the request and reads the head's fields).
 *
 * The upstream socket is one more handle of the connection in its group, registered as the
 * connection's own socket is (edge-triggered under Leader/Followers: re-armed by an atomic
 * store, with no system call), and only one of the two is waited on at a time, so exactly
 * one thread owns the connection at any moment:
 *
 *   the upstream socket (CONN_STREAM)  connect, send the request, read the head, read the
 *                                      body as it comes, 16 KiB at a time;
 *   the client's socket (CONN_SEND)    the client is slow: what it would not take waits on
 *                                      the connection, and the upstream is read again only
 *                                      once it is sent. A client that does not read stops
 *                                      the upstream being read: back-pressure, with a fixed
 *                                      buffer.
 *
 * That is proxy_buffering off. With it on (see "buffering" below), a part parked for a
 * slow client does not stop the upstream being read: the answer goes on into memory
 * (proxy_buffers) and a temporary file without a name, both sockets waited on through a
 * set of their own (as a tunnel's) while the client has a part parked, and once the answer
 * is read whole its upstream connection goes to the idle list (with a spare state, which
 * has no buffers) while this state serves the client from what it read.
 *
 * A request's body goes with its head, read whole first; with proxy_request_buffering off
 * it is relayed as it arrives instead (PHASE_UPLOAD: see "the request's body, streamed").
 *
 * Deadlines (proxy_connect_, _send_, _read_timeout) are the connection's, as every other
 * one: the sweep, finding one passed, shuts the upstream socket down (conn_set_wake_fd),
 * which wakes its handle; it does the same when it finds that the client has closed its
 * side, so that a slow answer to a client that left is not waited for.
 *
 * The proxy's state, with its upstream connection, is kept in the upstream's idle list
 * when `keepalive` allows, still registered in its group: a kept-alive request allocates
 * nothing, creates no descriptor and makes no epoll_ctl. An upstream connection is kept
 * only when its response was read to its very end, as framed, and it said nothing against
 * it. The states themselves are never freed while the server runs (an event of an
 * edge-triggered handle may still name one): their buffers are, when they are not kept.
 *
 * Failures before the head went out are answered 502 (504 for a timeout), after trying the
 * next server when proxy_next_upstream allows it and the request may be sent again
 * (idempotent, or never sent); after the head went out, the client's connection is cut, so
 * that a truncated body looks truncated. A kept connection that the upstream closed meanwhile
 * is not the server's failure: the request goes again on a new connection, if it may.
 *
 * A 101 answer to a request that asked for an upgrade turns the connection into a tunnel:
 * an epoll set of its own holds both sockets (the one handle then waited on), bytes go
 * both ways, each way with its own buffer, until both sides have ended, either side fails,
 * or the read timeout passes without a byte.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "http_body_stream.h"
#include "http_source.h"
#include "http_upstream.h"
#include "generation.h"
#include "log.h"
#include "module_chain.h"
#include "upstream_lookup.h"
#include "upstream.h"
#include "upstream_store.h"
#include "upstream_tls.h"
#include "vars_upstream.h"

#define PROXY_HEAD_MAX 16384             /* the upstream's head; then the tunnel's buffer */
/* The request to the upstream (its head, a small body), then a copy of the client's for the
 * filters: room for the largest head twice, and its path. */
#define PROXY_REQ_MAX (2 * CONN_BUF_SIZE + REQUEST_PATH_MAX)
#define PROXY_RELAY 16384                /* read from the upstream at a time */
#define PROXY_KEY_MAX 256 /* `hash`'s key expanded, at most (longer: round-robin) */
#define PROXY_FREE_MAX 1024 /* states without buffers kept for reuse beyond those in use */
/* A piece of the body is at most what one read brings (the first: what came with the head). */
static_assert(PROXY_RELAY <= HTTP_SOURCE_PIECE && PROXY_HEAD_MAX <= HTTP_SOURCE_PIECE,
              "a piece of the body fits the body filter's room");

/* The members of a tunnel's set, as its events name them. */
enum { TUNNEL_UP = 1u << 0, TUNNEL_CLIENT = 1u << 1 };

enum proxy_phase { PHASE_RESOLVE, PHASE_CONNECT, PHASE_HANDSHAKE, PHASE_SEND, PHASE_UPLOAD,
                   PHASE_HEAD, PHASE_BODY, PHASE_TUNNEL };

/* Why an attempt ended without an answer to relay. */
enum proxy_failure { FAIL_ERROR, FAIL_TIMEOUT, FAIL_INVALID, FAIL_STALE };

struct conn_proxy {
    struct http_source src;    /* first: the source is the proxy's state */
    struct lf_handle h;        /* the upstream socket (h.fd, -1 without one) */
    bool registered;           /* h is in the handle set of h.group */
    struct lf_handle tun;      /* a tunnel's set (tun.fd), one-shot in the client's group */
    struct upstream_idle idle; /* its place in the upstream's idle list */
    bool watched;              /* idle, and its socket waited on (under the list's lock) */
    struct conn_proxy *next_free;
    struct upstream *up;
    struct upstream_server *server; /* this attempt's */
    /* proxy_pass with variables: where this request goes, and, for an address or a name
     * resolved, the set made of it (kept with the state) and the wait for a name
     * (PHASE_RESOLVE: h.fd is look.rwait.fd) */
    struct proxy_target target;
    struct upstream_lookup look;
    void *tls;        /* https: the connection's SSL object (upstream_tls.h), kept with it */
    bool tls_ok;      /* and it has failed in nothing (close_notify may be sent) */
    uint32_t tls_want; /* the event a TLS read or write that would block waits for */

    /* This request's (the rest is src's) */
    const struct proxy_params *p;
    struct http_shared *shared;
    enum proxy_phase phase;
    enum http_method method;
    bool reused;      /* this attempt's connection was a kept one */
    bool sent_any;    /* some of the request went to this attempt's upstream */
    bool fresh_only;  /* a kept connection failed: the next one is new */
    bool tunnel_asked;
    bool up_reusable; /* the upstream's answer lets the connection be kept */
    bool request_keeps; /* and so did the request sent (its version and Connection) */
    bool intercepted;   /* proxy_intercept_errors took the upstream's answer */
    const struct http_response_head *intercepted_head; /* its head, while it is answered */
    const struct http_response_head *accel_head; /* an answer with X-Accel-Redirect: its
                                                   * head, while the place it names answers */
    struct upstream_choice choice; /* ip_hash's, hash's: where the next attempt's choice is */
    unsigned char key[PROXY_KEY_MAX]; /* choice.key's bytes */
    bool up_done, client_done; /* the tunnel's two ways: ended */
    bool attempt_done; /* upstream_done was called for the answer that ended */
    bool keep_up, failed; /* how the answer ended (proxy_finish), for proxy_done */
    uint64_t tried;   /* the servers tried, a bit each */
    unsigned attempts;
    enum http_framing framing; /* the upstream's body */
    uint64_t left;             /* LENGTH: bytes of it still to come */
    struct http_chunked dechunk;
    int64_t deadline_ms;
    int64_t attempt_us; /* when this attempt began */
    size_t req_len, req_off;
    const char *body;
    size_t body_len, body_off;
    struct http_collect *body_owner; /* a collected body, freed with http_collect_free */
    size_t head_len;  /* bytes in head[]; the tunnel: upstream-to-client bytes pending */
    size_t head_off;  /* the tunnel: where the pending ones start */
    /* (The request as it was answered, for the answer's head (Location), its filters
     * (add_header) and the log hooks, is src.saved: its slices point into req[] after the
     * request to the upstream, where the client's head, the path and the arguments are
     * kept.) */
    /* Buffers, while in use or kept with a connection: */
    char *head; /* PROXY_HEAD_MAX bytes: the upstream's head; the tunnel's upstream bytes */
    char *req;  /* PROXY_REQ_MAX bytes: the request; the tunnel's client bytes */
    /* The tries, for $upstream_* (the saved request points here): the current one is
     * try_now, an entry of uvars or, past its room, try_spare. */
    struct vars_upstream uvars;
    struct vars_upstream_try *try_now, try_spare;
    char tls_name[256]; /* proxy_ssl_name expanded, without a port */
    bool tls_sni;       /* send it (proxy_ssl_server_name on, and not an IP address) */

    /* proxy_request_buffering off (see "the request's body, streamed"): the client's body
     * is read as it comes (body_taken: some of it was, and the request cannot go again),
     * through head[up_off, up_len) to the upstream; upload_waits_client: for its bytes,
     * else for room at the upstream. */
    bool streams_body, body_taken, upload_waits_client;
    size_t up_off, up_len;

    /* proxy_buffering on (see "buffering" below): this answer is read ahead of the client,
     * into the store, and the upstream let go of once it is read whole (up_ended). */
    bool buffering, up_ended;
    struct upstream_store store;
};

/* --- states, their sockets and their waits ---------------------------------------------- */

/* States not in use and not kept with a connection, without their buffers. */
static struct {
    pthread_mutex_t lock;
    struct conn_proxy *list;
    unsigned n;
} proxy_free = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The upstream socket goes: out of the wake (first: the sweep must never shut a number
 * down once it is closed, and maybe another's), out of its set, closed. */
static void up_close(struct conn_proxy *px)
{
    if (px->h.fd < 0)
        return;
    if (px->src.c)
        conn_set_wake_fd(px->src.c, -1, false);
    if (px->registered)
        lf_group_remove(&px->h, true);
    px->registered = false;
    upstream_tls_close(px->tls, px->tls_ok);
    px->tls = NULL;
    px->tls_ok = false;
    close(px->h.fd);
    px->h.fd = -1;
}

static void tunnel_close(struct conn_proxy *px)
{
    if (px->tun.fd >= 0)
        close(px->tun.fd); /* (which takes it out of its group's set) */
    px->tun.fd = -1;
}

/* Head and request buffers let go of, kept for the next state that needs some, so that a
 * warm server allocates none even when an upstream connection is kept by a spare state
 * (up_let_go); stores' memory is kept the same way (upstream_store.h). */
#define PROXY_BUFS_SIZE (PROXY_HEAD_MAX + PROXY_REQ_MAX)
static struct upstream_spares proxy_spares = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A state goes back to the free list, its connection closed and its buffers freed. Never
 * freed itself while the server runs: an event fetched for its handle may still name it. */
static void proxy_release(struct conn_proxy *px)
{
    up_close(px);
    tunnel_close(px);
    upstream_store_free(&px->store);
    upstream_spare_put(&proxy_spares, px->head, PROXY_BUFS_SIZE);
    px->head = px->req = NULL;
    pthread_mutex_lock(&proxy_free.lock);
    px->next_free = proxy_free.list;
    proxy_free.list = px;
    proxy_free.n++;
    pthread_mutex_unlock(&proxy_free.lock);
}

/* --- kept connections ------------------------------------------------------------------
 *
 * A kept connection has no request on it: any byte or close from the upstream is stale
 * (the late body of an answer that had none, a keep-alive timeout) and must never be read
 * as the next request's answer. So, edge-triggered, its socket stays waited on for input
 * while it is idle, and an event closes it at once; whoever takes it from the list claims
 * its handle first (upstream.h), and checks the socket once more before a request goes on
 * it (idle_alive). One-shot handles are disarmed while idle: the check alone covers them. */

static struct conn_proxy *of_handle(struct lf_handle *h)
{
    return (struct conn_proxy *)((char *)h - offsetof(struct conn_proxy, h));
}

static struct conn_proxy *of_idle(struct upstream_idle *idle)
{
    return (struct conn_proxy *)((char *)idle - offsetof(struct conn_proxy, idle));
}

static void idle_close(struct upstream_idle *idle)
{
    proxy_release(of_idle(idle));
}

static bool idle_alive(struct conn_proxy *px);

/* An event of an idle connection: if the upstream spoke (or closed), it goes. The edge may
 * also be one of input read before it was kept (it came while the answer was being read),
 * or of room to write: then it is waited on again. */
static void idle_event(struct lf_handle *h, uint32_t events)
{
    struct conn_proxy *px = of_handle(h);
    if (!(events & (EPOLLHUP | EPOLLERR)) && idle_alive(px) &&
        lf_group_reactivate(&px->h, EPOLLIN, true) == 0)
        return; /* (listed all along: under its handle's claim, nobody took it) */
    upstream_idle_drop(px->up, &px->idle);
    px->watched = false;
    proxy_release(px);
}

static void idle_watch(struct upstream_idle *idle)
{
    struct conn_proxy *px = of_idle(idle);
    if (!px->registered || !px->h.edge)
        return;
    px->h.on_event = idle_event;
    /* Drained: nothing was left unread of the answer. A byte that came since is PENDING,
     * and idle_event runs on this thread once the current callback returns. */
    int rc = lf_group_reactivate(&px->h, EPOLLIN, true);
    if (rc < 0) { /* (it makes no system call for EPOLLIN) */
        log_error("proxy: epoll: cannot watch a kept upstream socket: %s", strerror(-rc));
        return;
    }
    px->watched = true;
}

/* A socket to keep that was never waited on (its answer came at once) joins the group's set,
 * to be watched: owned, as if its event were being handled, until the watch lets it go. */
static void idle_register(struct conn_proxy *px, struct lf_group *g)
{
    if (!lf_group_is_edge(g) || lf_group_add_handle(g, &px->h, 0) < 0)
        return;
    px->registered = true;
    (void)lf_group_claim(&px->h); /* waiting for nothing, nobody else can have it */
}

static bool idle_claim(struct upstream_idle *idle)
{
    struct conn_proxy *px = of_idle(idle);
    if (px->watched && !lf_group_claim(&px->h))
        return false;
    px->watched = false;
    return true;
}

/* A state without buffers (to keep an upstream connection in the idle list): from the free
 * list, or new. */
static struct conn_proxy *proxy_spare(void)
{
    pthread_mutex_lock(&proxy_free.lock);
    struct conn_proxy *px = proxy_free.list;
    if (px) {
        proxy_free.list = px->next_free;
        proxy_free.n--;
    }
    pthread_mutex_unlock(&proxy_free.lock);
    if (!px) {
        px = calloc(1, sizeof(*px));
        if (!px)
            return NULL;
        px->h.fd = px->tun.fd = -1;
        px->idle.watch = idle_watch;
        px->idle.claim = idle_claim;
        px->idle.close = idle_close;
        upstream_store_init(&px->store);
    }
    return px;
}

/* px's buffers, if it has none (a spare state that kept a connection has none). */
static bool proxy_buffers(struct conn_proxy *px)
{
    if (px->head)
        return true;
    px->head = upstream_spare_get(&proxy_spares, PROXY_BUFS_SIZE);
    if (!px->head)
        return false;
    px->req = px->head + PROXY_HEAD_MAX;
    return true;
}

/* A state with its buffers: from the free list, or new. */
static struct conn_proxy *proxy_new(void)
{
    struct conn_proxy *px = proxy_spare();
    if (px && !proxy_buffers(px)) {
        proxy_release(px);
        return NULL;
    }
    return px;
}


/* The deadline is now deadline_ms: the sweep reads the connection's. */
static void set_deadline(struct conn_proxy *px, int64_t deadline_ms)
{
    px->deadline_ms = deadline_ms;
    atomic_store_explicit(&px->src.c->deadline_ms, deadline_ms, memory_order_relaxed);
}

/* The last act of an event: wait for `events` on the upstream socket until the deadline.
 * drained: the socket was found empty (read) or full (written) for them, or nothing can
 * have come since it was. */
static void proxy_wait(struct conn_proxy *px, uint32_t events, bool drained)
{
    struct conn *c = px->src.c;
    atomic_store_explicit(&c->deadline_ms, px->deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    if (px->tls_want) { /* a TLS read that must write first, or the other way round */
        events = px->tls_want;
        px->tls_want = 0;
    }
    int rc;
    if (px->registered) {
        rc = lf_group_reactivate(&px->h, events, drained);
    } else {
        /* Said before the add: once added, another thread of the group may have it. */
        px->registered = true;
        rc = lf_group_add_handle(c->h.group, &px->h, events);
        if (rc < 0)
            px->registered = false;
    }
    if (rc < 0) {
        log_error("proxy: epoll: cannot wait on an upstream socket: %s", strerror(-rc));
        conn_close(c);
    }
    /* From here on another thread may own c: touch nothing. */
}

/* Is some of a streamed body still the client's to send (proxy_request_buffering off)? */
static bool body_unread(const struct conn_proxy *px)
{
    return px->streams_body && px->src.c && hc(px->src.c)->body_mode != REQ_BODY_NONE;
}

/* --- ending ------------------------------------------------------------------------------ */

static void body_release(struct conn_proxy *px)
{
    if (px->body_owner)
        http_collect_free(px->shared, px->body_owner);
    px->body_owner = NULL;
    px->body = NULL;
    px->body_len = 0;
}

/* The proxy lets go of the client: out of the group and the set, its buffers freed. The
 * upstream connection is kept (keep_up, when the upstream allows it) or closed; the
 * attempt is counted as the server's failure or not. */
static void proxy_detach(struct conn_proxy *px, bool keep_up, bool failed)
{
    struct conn *c = px->src.c;
    body_release(px);
    tunnel_close(px);
    upstream_store_free(&px->store);
    if (px->look.resolving)
        upstream_lookup_cancel(&px->look, px->p->resolver, NULL, 0);
    conn_set_wake_fd(c, -1, false);
    /* A kept socket stays in its group's set for the next request there; not in a
     * connection's own set (thread-per-connection), which goes with the connection. */
    if (px->registered && (!keep_up || lf_group_is_private(px->h.group))) {
        lf_group_remove(&px->h, false);
        px->registered = false;
    }
    if (px->server && !px->attempt_done)
        upstream_done(px->up, px->server, failed, clock_now_ms());
    px->src.c = NULL;
    int64_t now = clock_now_ms();
    if (keep_up && px->h.fd >= 0 && px->up->keepalive > 0 &&
        upstream_idle_carried(px->up, &px->idle, now)) {
        if (!px->registered)
            idle_register(px, c->h.group);
        px->idle.server = px->server;
        px->idle.home = px->registered ? px->h.group : NULL;
        px->server = NULL;
        if (upstream_idle_put(px->up, &px->idle, now, c->pool->n_groups))
            return; /* another thread may have it now */
    }
    proxy_release(px);
}

/* The connection is closing: the upstream connection goes, not counted as a failure. */
static void proxy_abort(struct http_source *s)
{
    proxy_detach((struct conn_proxy *)s, false, false);
}

/* The answer has ended: the upstream connection is kept or not, as proxy_finish said. */
static void proxy_done(struct http_source *s)
{
    struct conn_proxy *px = (struct conn_proxy *)s;
    proxy_detach(px, px->keep_up, px->failed);
}

/* An error about px's request: to its location's error log (nginx's error_log there). */
#define proxy_log(px, ...)                                                                  \
    do {                                                                                    \
        if ((px)->src.has_saved)                                                            \
            module_log(&(px)->src.saved, LOG_LEVEL_ERROR, __VA_ARGS__);                     \
        else                                                                                \
            log_error(__VA_ARGS__);                                                         \
    } while (0)

/* --- the tries' record, for $upstream_* ------------------------------------------------- */

/* A try at addr begins (now_us: clock_now_us()). */
static void try_begin(struct conn_proxy *px, const char *addr, int64_t now_us)
{
    struct vars_upstream *u = &px->uvars;
    px->try_now = u->n < VARS_UPSTREAM_TRIES ? &u->tries[u->n++] : &px->try_spare;
    *px->try_now = (struct vars_upstream_try){
        .addr = addr, .start_us = now_us, .connect_us = -1, .header_us = -1, .response_us = -1};
    u->head = NULL;
}

/* The current try has ended: status, if it has none yet (0: leave it), and its time. (A
 * body's reads set the time so far, for an answer whose client leaves before its end.) */
static void try_end(struct conn_proxy *px, int status)
{
    struct vars_upstream_try *t = px->try_now;
    if (!t)
        return;
    if (!t->status)
        t->status = status;
    t->response_us = clock_now_us() - t->start_us;
}

static void try_connected(struct conn_proxy *px)
{
    if (px->try_now && px->try_now->connect_us < 0)
        px->try_now->connect_us = clock_now_us() - px->try_now->start_us;
}

/* The response is over (failure: why it ended early, or NULL): answer what is still owed,
 * after `tail` (the last of the body, not sent yet, in memory that is not px's; or NULL),
 * then go on with the client's connection or close it. The upstream connection is let go
 * of (kept or closed) before anything is sent: a client that has its whole answer may ask
 * again at once, on another connection, and finds it kept. */
/* The request as it was answered, again, with room for an error page's path and file: the
 * page's answer may name them until it is sent. */
/* An intercepted 401 answered 401 keeps every challenge of the upstream's, as nginx: the
 * error page kept the first; the others follow it. */
static void add_challenges(struct conn_proxy *px, struct response *resp)
{
    const struct http_response_head *uh = px->intercepted_head;
    if (!uh || uh->status != 401 || resp->status != 401)
        return;
    bool first = true;
    for (unsigned i = 0; i < uh->n_headers; i++) {
        if (!http_slice_eq(uh->headers[i].name, "www-authenticate"))
            continue;
        if (!first)
            resp_header_n(resp, "WWW-Authenticate", 16, uh->headers[i].value.p,
                          uh->headers[i].value.len);
        first = false;
    }
}

/* resp holds the error the client is owed (a 502, a 504, an upstream's error that
 * proxy_intercept_errors takes): the error_page of the request's block for it answers
 * instead, if it has one, as nginx's; else the plain error, with the location's add_header
 * ... always. pg: room for the page's request, alive until resp is sent. */
static void answer_error(struct conn_proxy *px, struct response *resp,
                         struct http_source_page *pg)
{
    if (http_source_error_page(&px->src, resp, pg))
        add_challenges(px, resp);
    else
        http_source_filter_head(&px->src, resp, px->p);
}

/* Whom an error is about: the server tried, the set, or the name not resolved. */
static const char *where(const struct conn_proxy *px)
{
    return px->server ? px->server->text : px->up ? px->up->name : px->target.host;
}

/* The upstream's X-Accel-Redirect (its first), or an empty slice. */
static struct http_slice accel_target(const struct http_response_head *uh)
{
    for (unsigned i = 0; i < uh->n_headers; i++)
        if (http_slice_eq(uh->headers[i].name, "x-accel-redirect"))
            return uh->headers[i].value;
    return (struct http_slice){NULL, 0};
}

/* The upstream named X-Accel-Redirect: the saved request is answered where it points
 * (http_source_accel), with the fields of the upstream's head nginx keeps. */
static void answer_accel(struct conn_proxy *px, struct response *resp,
                         struct http_source_page *pg)
{
    const struct http_response_head *uh = px->accel_head;
    struct http_slice to = accel_target(uh);
    if (!http_source_accel(&px->src, resp, pg, to, uh->headers, uh->n_headers))
        proxy_log(px, "proxy: %s: X-Accel-Redirect to \"%.*s\", a streamed answer: not "
                      "followed", where(px), (int)to.len, to.p);
}

static void proxy_finish_after(struct conn_proxy *px, int error_status, const char *failure,
                               struct response *tail)
{
    struct http_source *s = &px->src;
    struct http_piece pc;
    struct response own;
    struct response *resp = tail ? tail : &own;
    struct http_source_page page;
    if (!tail)
        resp_init(&own);
    try_end(px, 0);
    bool keep_alive = s->keep_alive && !body_unread(px);
    if (!s->head_sent && px->accel_head) {
        answer_accel(px, resp, &page);
        resp->head_only = s->head_only;
        resp->keep_alive = keep_alive;
        resp_finish(resp, s->http10);
        s->sent = resp->head_only ? 0 : resp->content_length;
    } else if (!s->head_sent) {
        s->status = error_status ? error_status : 502;
        if (px->intercepted) { /* the upstream's own error, made in resp */
            s->status = resp->status;
        } else {
            proxy_log(px, "proxy: %s: answered %d: %s", where(px), s->status,
                      failure ? failure : "no answer");
            resp_error(resp, s->status);
        }
        answer_error(px, resp, &page);
        resp->head_only = s->head_only;
        resp->keep_alive = keep_alive;
        resp_finish(resp, s->http10);
        s->sent = resp->head_only ? 0 : resp->content_length;
    } else {
        resp->status = s->status;
        if (!failure && http_source_body_end(s, resp, &pc) < 0) {
            resp_body_clear(resp);
            failure = "the body filter failed at its end";
        }
        if (failure) {
            proxy_log(px, "proxy: %s: the response was cut: %s", where(px), failure);
            keep_alive = false; /* cut: no last chunk, and the connection closes */
        }
    }
    px->keep_up = !failure && s->head_sent && px->up_reusable;
    px->failed = failure && error_status != 0;
    /* A tail's head, if it has one, is made: what no_length said of it is said (a body that
     * ends with the connection); its body pieces are what goes, and go. */
    resp->no_length = false;
    http_source_end(s, resp, keep_alive);
}

static void proxy_finish(struct conn_proxy *px, int error_status, const char *failure)
{
    proxy_finish_after(px, error_status, failure, NULL);
}

/* --- attempts ---------------------------------------------------------------------------- */

static void proxy_step(struct conn_proxy *px);

/* May the request go to another server? Not once some of a streamed body was taken from
 * the client (nginx: not once it began to be sent): it cannot be read again. */
static bool body_resendable(const struct conn_proxy *px)
{
    return !px->body_taken;
}

static bool idempotent(enum http_method m)
{
    return m == HTTP_METHOD_GET || m == HTTP_METHOD_HEAD || m == HTTP_METHOD_PUT ||
           m == HTTP_METHOD_DELETE || m == HTTP_METHOD_OPTIONS || m == HTTP_METHOD_TRACE;
}

/* May a kept connection carry a request? Asked of the socket, without waiting, every time:
 * it must have nothing to read (the upstream said nothing, and did not close it). A byte
 * there would be taken for the answer, and every answer after it would go to the request
 * after its own. */
static bool idle_alive(struct conn_proxy *px)
{
    if (px->tls)
        return upstream_tls_idle_alive(px->tls, px->h.fd);
    char b;
    ssize_t n = recv(px->h.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* The upstream's bytes, as recv: through TLS for https (px->tls_want then says what a
 * read that would block waits for; EPOLLIN is what the callers wait for anyway). */
static ssize_t up_recv(struct conn_proxy *px, void *buf, size_t len)
{
    if (!px->tls)
        return recv(px->h.fd, buf, len, 0);
    uint32_t want = EPOLLIN;
    ssize_t n = upstream_tls_read(px->tls, buf, len, &want);
    if (n < 0 && errno == EAGAIN)
        px->tls_want = want == EPOLLIN ? 0 : want;
    else if (n < 0)
        px->tls_ok = false;
    return n;
}

/* The first part left of the request (iov[0]) over TLS, which has no writev: as send. */
static ssize_t up_send_tls(struct conn_proxy *px, const struct iovec *iov)
{
    uint32_t want = EPOLLOUT;
    ssize_t w = upstream_tls_write(px->tls, iov->iov_base, iov->iov_len, &want);
    if (w < 0 && errno == EAGAIN)
        px->tls_want = want == EPOLLOUT ? 0 : want;
    else if (w < 0)
        px->tls_ok = false;
    return w;
}

/* A new connection to px->server, connecting; false if it failed at once. */
static bool up_connect(struct conn_proxy *px)
{
    const struct upstream_server *s = px->server;
    int fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    if (s->addr.ss_family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    px->h.fd = fd;
    px->registered = false;
    px->idle.born_ms = clock_now_ms();
    px->idle.requests = 0;
    if (connect(fd, (const struct sockaddr *)&s->addr, s->addr_len) == 0) {
        px->phase = px->p->tls_ctx ? PHASE_HANDSHAKE : PHASE_SEND;
        return true;
    }
    if (errno == EINPROGRESS || errno == EAGAIN) { /* (EAGAIN: a unix socket's backlog) */
        px->phase = PHASE_CONNECT;
        return true;
    }
    int err = errno;
    up_close(px);
    errno = err;
    return false;
}

static void attempt_failed(struct conn_proxy *px, enum proxy_failure why, const char *what);

/* Begin an attempt on server s (counted in flight by upstream_pick): a kept connection to
 * it if there is one, else a new one. */
static void attempt_begin(struct conn_proxy *px, struct upstream_server *s)
{
    int64_t now = clock_now_ms();
    px->server = s;
    px->attempt_us = clock_now_us();
    if (!px->fresh_only || !px->try_now) /* (a kept connection's retry is the same try) */
        try_begin(px, s->text, px->attempt_us);
    px->attempts++;
    px->sent_any = false;
    px->req_off = px->body_off = 0;
    px->head_len = 0;
    px->reused = false;
    struct upstream_idle *idle;
    if (px->h.fd < 0 && !px->fresh_only &&
        (idle = upstream_idle_take(px->up, s, px->src.c->h.group))) {
        /* Another state kept a connection to s: take its socket over (out of that state's
         * handle set first), and let the rest of it go. */
        struct conn_proxy *kept = of_idle(idle);
        if (kept->registered)
            lf_group_remove(&kept->h, false);
        kept->registered = false;
        px->h.fd = kept->h.fd;
        px->tls = kept->tls;
        px->tls_ok = kept->tls_ok;
        kept->tls = NULL;
        px->registered = false;
        px->idle.since_ms = kept->idle.since_ms;
        px->idle.born_ms = kept->idle.born_ms;
        px->idle.requests = kept->idle.requests;
        kept->h.fd = -1;
        proxy_release(kept);
    }
    px->fresh_only = false;
    /* idle past the upstream's keepalive_timeout: closed, not used */
    /* and a connection made for other TLS settings (or none), not either */
    const void *ctx = px->tls ? upstream_tls_ctx_of(px->tls) : NULL;
    if (px->h.fd >= 0 && now - px->idle.since_ms <= (int64_t)px->up->keepalive_timeout_ms &&
        ctx == px->p->tls_ctx && idle_alive(px)) {
        px->reused = true;
        px->phase = PHASE_SEND;
    } else {
        up_close(px);
        if (!up_connect(px)) {
            attempt_failed(px, FAIL_ERROR, strerror(errno));
            return;
        }
    }
    conn_set_wake_fd(px->src.c, px->h.fd, true);
    if (px->phase == PHASE_SEND || px->phase == PHASE_HANDSHAKE)
        try_connected(px);
    set_deadline(px, now + (px->phase == PHASE_SEND ? px->p->send_ms : px->p->connect_ms));
    proxy_step(px);
}

/* The attempt failed before an answer could be relayed: try the next server if allowed,
 * else answer 502 or 504. */
static void attempt_failed(struct conn_proxy *px, enum proxy_failure why, const char *what)
{
    int64_t now = clock_now_ms();
    const struct proxy_params *p = px->p;
    up_close(px);
    bool may_resend = body_resendable(px) && (!px->sent_any || idempotent(px->method) ||
                                              (p->next_upstream & PROXY_NEXT_NON_IDEMPOTENT));
    if (why == FAIL_STALE) { /* the kept connection was closed: not the server's fault */
        if (may_resend) {
            px->fresh_only = true;
            px->attempts--;
            attempt_begin(px, px->server);
            return;
        }
        why = FAIL_ERROR;
    }
    try_end(px, why == FAIL_TIMEOUT ? 504 : 502);
    if (px->server) {
        upstream_done(px->up, px->server, true, now);
        px->tried |= 1ull << (px->server - px->up->servers);
        px->server = NULL;
    }
    unsigned bit = why == FAIL_TIMEOUT ? PROXY_NEXT_TIMEOUT
                   : why == FAIL_INVALID ? PROXY_NEXT_INVALID : PROXY_NEXT_ERROR;
    if ((p->next_upstream & bit) && may_resend && (p->tries == 0 || px->attempts < p->tries)) {
        struct upstream_server *s = upstream_pick(px->up, now, px->tried, &px->choice);
        if (s) {
            attempt_begin(px, s);
            return;
        }
    }
    proxy_finish(px, why == FAIL_TIMEOUT ? 504 : 502, what);
}

/* --- names: proxy_pass with variables ---------------------------------------------------
 *
 * A host that names no upstream block is an address, used as it is, or a name, resolved
 * by the location's `resolver`. A request whose answer is not cached waits as it waits for
 * an upstream's connect: its handle is one end of a socket pair the answer makes readable
 * (resolver.h, upstream_lookup.h, shared with fastcgi_pass), its deadline resolver_timeout,
 * through the sweep. */

/* The lookup's answer: the request's set (nginx's round-robin over the addresses, no
 * keepalive), its first attempt; or 502, why in the log. */
static void look_done(struct conn_proxy *px, enum upstream_lookup_result rc, const char *why)
{
    if (rc == UPSTREAM_LOOKUP_FAILED) {
        proxy_finish(px, 502, why);
        return;
    }
    px->up = px->look.set;
    snprintf(px->up->name, sizeof(px->up->name), "%.*s", (int)sizeof(px->up->name) - 1,
             px->target.proxy_host); /* (what the log names once no server is tried) */
    struct upstream_server *s = upstream_pick(px->up, clock_now_ms(), 0, &px->choice);
    if (!s) {
        proxy_finish(px, 502, "every server is out");
        return;
    }
    attempt_begin(px, s);
}

/* The request's target is a host (px->target): its address now, or a wait for it. */
static void resolve_begin(struct conn_proxy *px)
{
    const struct proxy_params *p = px->p;
    struct conn *c = px->src.c;
    snprintf(px->look.host, sizeof(px->look.host), "%s", px->target.host);
    px->look.port = px->target.port;
    char why[400];
    enum upstream_lookup_result rc = upstream_lookup_begin(&px->look, p->resolver, c->h.group,
                                                           why, sizeof(why));
    if (rc != UPSTREAM_LOOKUP_WAIT) {
        look_done(px, rc, why);
        return;
    }
    px->h.fd = px->look.rwait.fd;
    px->registered = false;
    px->phase = PHASE_RESOLVE;
    conn_set_wake_fd(c, px->h.fd, true);
    set_deadline(px, clock_now_ms() + p->resolver_timeout_ms);
    proxy_wait(px, EPOLLIN, false);
}

/* --- sending the request ----------------------------------------------------------------- */

/* Send what is left of the request. 1: all sent; 0: wait for EPOLLOUT; -1: failed. */
static int send_request(struct conn_proxy *px)
{
    for (;;) {
        struct iovec iov[2];
        int n = 0;
        if (px->req_off < px->req_len)
            iov[n++] = (struct iovec){px->req + px->req_off, px->req_len - px->req_off};
        if (px->body_off < px->body_len)
            iov[n++] = (struct iovec){(char *)px->body + px->body_off,
                                      px->body_len - px->body_off};
        if (n == 0)
            return 1;
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = px->tls ? up_send_tls(px, iov) : sendmsg(px->h.fd, &msg, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno == EAGAIN ? 0 : -1;
        px->sent_any = true;
        if (px->try_now)
            px->try_now->bytes_sent += (uint64_t)w;
        set_deadline(px, clock_now_ms() + px->p->send_ms); /* between two writes (nginx) */
        size_t in_head = px->req_len - px->req_off;
        if ((size_t)w <= in_head) {
            px->req_off += (size_t)w;
        } else {
            px->req_off = px->req_len;
            px->body_off += (size_t)w - in_head;
        }
    }
}

/* --- the request's body, streamed ---------------------------------------------------------
 *
 * proxy_request_buffering off. Once the request's head went (PHASE_SEND), PHASE_UPLOAD
 * relays the client's body as it arrives, through head[] (which the answer's head needs
 * only once the body is over): a read from the client, then its bytes to the upstream, and
 * no read before they all went, so that an upstream that does not take them stops the
 * client being read. A chunked body is decoded and chunked again (its trailers dropped, as
 * nginx's). Where the body stands is the connection's (hc(c)->body_mode, body_left,
 * chunked), as for a body the core skips: the bytes that came with the head wait in c->in,
 * and what follows a chunked body's end goes back there, the next request's.
 *
 * While the client is waited for, the upstream is too, for an answer that comes before
 * the body's end: both sockets are one set of their own (as both_wait's), the one handle
 * waited on, until client_body_timeout; while the upstream is (it takes no more), its own
 * handle, for room and for an answer, until proxy_send_timeout. An answer that comes first
 * ends the relay: it is read and relayed as any, and the client's connection closes after
 * it (the rest of its body is drained by the linger), the upstream's too. */

#define UPLOAD_PREFIX 24 /* room before a chunk's data for its size line */
#define UPLOAD_SUFFIX 8  /* and after it, for its CRLF and the last chunk, "0" CRLF CRLF */

static void upload_event(struct lf_handle *h, uint32_t events);

/* The client's body cannot go on (a chunked one too large or malformed, a timeout): the
 * client is answered `status`, and its connection closes; the upstream's attempt is not
 * counted as a failure of the server's. */
static void upload_refused(struct conn_proxy *px, int status, const char *why)
{
    tunnel_close(px);
    up_close(px);
    if (px->server && !px->attempt_done)
        upstream_done(px->up, px->server, false, clock_now_ms());
    px->attempt_done = true;
    try_end(px, status);
    proxy_finish(px, status, why);
}

/* Has the upstream said anything yet (an answer, a close) while the body goes? */
static bool up_spoke(struct conn_proxy *px)
{
    if (px->tls)
        return upstream_tls_spoke(px->tls, px->h.fd);
    char b;
    ssize_t n = recv(px->h.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

/* Body bytes to the upstream, as send (through TLS for https). */
static ssize_t up_write(struct conn_proxy *px, const char *p, size_t n)
{
    if (px->tls) {
        struct iovec iov = {(void *)p, n};
        return up_send_tls(px, &iov);
    }
    return send(px->h.fd, p, n, MSG_NOSIGNAL);
}

/* n raw body bytes read at data (head + UPLOAD_PREFIX): made what goes upstream, in
 * head[up_off, up_len). false when the body is refused (answered) or the connection closed. */
static bool upload_frame(struct conn_proxy *px, char *data, size_t n, bool from_in)
{
    struct conn *c = px->src.c;
    bool chunked = hc(c)->body_mode == REQ_BODY_CHUNKED;
    size_t out, used;
    enum http_body_take r = http_body_stream_take(&px->src, data, n, from_in, &out, &used);
    if (r == HTTP_BODY_INVALID || r == HTTP_BODY_TOO_LARGE) {
        px->src.saved.request_length += n;
        upload_refused(px, r == HTTP_BODY_INVALID ? 400 : 413,
                       r == HTTP_BODY_INVALID ? "client sent invalid chunked body"
                                              : "client intended to send too large chunked "
                                                "body");
        return false;
    }
    if (r == HTTP_BODY_NO_ROOM) {
        conn_close(c);
        return false;
    }
    px->src.saved.request_length += used; /* $request_length: as the client sent it */
    if (!chunked) {
        px->up_off = UPLOAD_PREFIX;
        px->up_len = UPLOAD_PREFIX + out;
        return true;
    }
    size_t start = UPLOAD_PREFIX, end = UPLOAD_PREFIX;
    if (out > 0) {
        char line[UPLOAD_PREFIX];
        int k = snprintf(line, sizeof(line), "%zx\r\n", out);
        start -= (size_t)k;
        memcpy(px->head + start, line, (size_t)k);
        end += out;
        memcpy(px->head + end, "\r\n", 2);
        end += 2;
    }
    if (hc(c)->body_mode == REQ_BODY_NONE) {
        memcpy(px->head + end, "0\r\n\r\n", 5);
        end += 5;
    }
    px->up_off = start;
    px->up_len = end;
    return true;
}

/* Wait for the client's bytes, and for the upstream's answer: the last act of the event. */
static void upload_wait_client(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    px->upload_waits_client = true;
    set_deadline(px, clock_now_ms() + hc(c)->limits->client_body_timeout_ms);
    http_body_stream_wait(&px->tun, px->h.fd, c, px->deadline_ms, upload_event);
}

/* The relay is over (the body went whole, or the upstream spoke first): the answer's head
 * is read next, into head[]. */
static void upload_end(struct conn_proxy *px)
{
    tunnel_close(px); /* (both_wait makes a set of its own, for other events) */
    px->upload_waits_client = false;
    px->up_off = px->up_len = 0;
    px->head_len = 0;
    px->phase = PHASE_HEAD;
    set_deadline(px, clock_now_ms() + px->p->read_ms);
}

/* Relay the body as far as both sides allow. true: go on (to the answer's head); false:
 * the event is over (waiting, answered or closed). */
static bool upload(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    if (up_spoke(px)) {
        upload_end(px);
        return true;
    }
    for (;;) {
        if (px->up_off < px->up_len) {
            ssize_t w = up_write(px, px->head + px->up_off, px->up_len - px->up_off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && errno == EAGAIN) {
                px->upload_waits_client = false;
                proxy_wait(px, EPOLLOUT | EPOLLIN, true);
                return false;
            }
            if (w < 0) {
                attempt_failed(px, FAIL_ERROR, strerror(errno));
                return false;
            }
            px->sent_any = true;
            if (px->try_now)
                px->try_now->bytes_sent += (uint64_t)w;
            px->up_off += (size_t)w;
            set_deadline(px, clock_now_ms() + px->p->send_ms); /* between two writes */
            continue;
        }
        if (hc(c)->body_mode == REQ_BODY_NONE) {
            upload_end(px);
            return true;
        }
        bool from_in;
        char *data = px->head + UPLOAD_PREFIX;
        ssize_t n = http_body_stream_read(c, data,
                                          PROXY_HEAD_MAX - UPLOAD_PREFIX - UPLOAD_SUFFIX,
                                          &from_in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            upload_wait_client(px);
            return false;
        }
        if (n <= 0) { /* nginx: "client prematurely closed connection" */
            px->src.status = 400;
            proxy_log(px, "proxy: %s: the client closed its connection inside the body",
                      where(px));
            conn_close(c);
            return false;
        }
        px->body_taken = true;
        if (!upload_frame(px, data, (size_t)n, from_in))
            return false;
    }
}

/* --- the answer -------------------------------------------------------------------------- */

/* The upstream's answer has ended, as framed: what is left is to send its last part. The
 * server's attempt ends now, before the client can have it all and ask again (least_conn
 * counts requests in flight). */
static void answered(struct conn_proxy *px)
{
    px->framing = HTTP_BODY_NONE;
    if (px->server)
        upstream_done(px->up, px->server, false, clock_now_ms());
    px->attempt_done = true;
}

/* Why take_body failed. */
#define BODY_MALFORMED (-1)
#define BODY_FILTER_FAILED (-2)

/* Queue body bytes on resp: filtered, framed. 0, or BODY_FILTER_FAILED. */
static int add_body(struct conn_proxy *px, struct response *resp, const char *p, size_t n,
                    struct http_piece *pc)
{
    return http_source_body(&px->src, resp, p, n, pc) < 0 ? BODY_FILTER_FAILED : 0;
}

/* Why the answer was cut, for a take_body result below 0. */
static const char *body_failure(int r)
{
    return r == BODY_MALFORMED ? "a malformed chunked body" : "the body filter failed";
}

/* Body bytes from the upstream in buf[0..n), as framed: decode, queue what is the body's.
 * Returns 1 when the body has ended, 0 to read more, BODY_MALFORMED when its framing is
 * broken, BODY_FILTER_FAILED when the body filter failed. */
static int take_body(struct conn_proxy *px, struct response *resp, char *buf, size_t n,
                     struct http_piece *pc)
{
    switch (px->framing) {
    case HTTP_BODY_LENGTH: {
        size_t take = n < px->left ? n : (size_t)px->left;
        if (take < n)
            px->up_reusable = false; /* more than it framed: out of step */
        px->left -= take;
        if (add_body(px, resp, buf, take, pc) < 0)
            return BODY_FILTER_FAILED;
        return px->left == 0;
    }
    case HTTP_BODY_CHUNKED: {
        size_t used = 0, out = 0;
        enum http_chunked_result r = http_chunked_decode(&px->dechunk, buf, n, 0, &used, &out);
        if (r == HTTP_CHUNKED_ERROR || r == HTTP_CHUNKED_TOO_LARGE)
            return BODY_MALFORMED;
        if (add_body(px, resp, buf, out, pc) < 0)
            return BODY_FILTER_FAILED;
        if (r == HTTP_CHUNKED_DONE) {
            if (used < n)
                px->up_reusable = false;
            return 1;
        }
        return 0;
    }
    case HTTP_BODY_CLOSE:
        return add_body(px, resp, buf, n, pc);
    default:
        if (n > 0)
            px->up_reusable = false;
        return 1;
    }
}

/* --- buffering ---------------------------------------------------------------------------
 *
 * proxy_buffering on. While the client takes the answer as fast as it comes, it goes to the
 * client as it is read, as without. Once a part of it is parked on the client's connection,
 * the upstream is read on into the store (proxy_buffers' memory, then a temporary file:
 * upstream_store.h, shared with FastCGI's) instead of waiting for the client, both sockets waited on at once (both_wait), and the
 * client is written to at every event of either. Once the answer is read
 * whole, the upstream connection is let go of at once (kept, when it may be) and the client
 * is served from the store alone. A full store (no file, or the file at its largest) waits
 * for the client, as streaming does. One handle is waited on at a time, as ever: the
 * upstream's, the client's, or a set of the two. */

/* The whole answer is read: the upstream connection goes, kept (by a spare state, in the
 * upstream's idle list, for the next request) when it may be, else closed, while px goes
 * on serving the client from the store. */
static void up_let_go(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    try_end(px, 0);
    px->try_now = NULL; /* $upstream_response_time is the upstream's, not the client's */
    conn_set_wake_fd(c, -1, false);
    if (px->h.fd < 0)
        return;
    upstream_store_wait_drop(&px->tun, px->h.fd); /* (both_wait's set: never again) */
    struct conn_proxy *spare = NULL;
    if (px->up_reusable && px->up != px->look.set && px->up->keepalive > 0)
        spare = proxy_spare();
    if (!spare) {
        up_close(px);
        return;
    }
    if (px->registered)
        lf_group_remove(&px->h, false);
    px->registered = false;
    spare->h.fd = px->h.fd;
    spare->h.on_event = idle_event;
    spare->registered = spare->watched = spare->look.resolving = false;
    spare->tls = px->tls;
    spare->tls_ok = px->tls_ok;
    spare->idle.born_ms = px->idle.born_ms;
    spare->idle.since_ms = px->idle.since_ms;
    spare->idle.requests = px->idle.requests;
    spare->up = px->up;
    spare->server = px->server;
    spare->p = px->p;
    spare->body_owner = NULL;
    spare->attempt_done = true; /* (answered: counted) */
    spare->src.c = c;
    px->h.fd = -1;
    px->tls = NULL;
    px->tls_ok = false;
    px->server = NULL;
    proxy_detach(spare, true, false);
}

/* The upstream's answer has ended, read whole. */
static void up_end(struct conn_proxy *px)
{
    answered(px);
    px->up_ended = true;
    up_let_go(px);
}

/* The answer cannot be finished: as proxy_finish says, unless a part of it still waits for
 * the client (parked, or in the store): then the connection is cut at once. */
static void body_cut(struct conn_proxy *px, const char *why)
{
    if (!px->src.c->out && upstream_store_empty(&px->store)) {
        proxy_finish(px, 0, why);
        return;
    }
    proxy_log(px, "proxy: %s: the response was cut: %s", where(px), why);
    conn_close(px->src.c);
}

/* Does this answer go through the store? proxy_buffering, unless the upstream's
 * X-Accel-Buffering says otherwise (nginx's rule: "yes" or "no", any case). */
static bool wants_buffering(const struct conn_proxy *px, const struct http_response_head *uh)
{
    for (unsigned i = 0; i < uh->n_headers; i++) {
        if (!http_slice_eq(uh->headers[i].name, "x-accel-buffering"))
            continue;
        struct http_slice v = uh->headers[i].value;
        if (v.len == 3 && strncasecmp(v.p, "yes", 3) == 0)
            return true;
        if (v.len == 2 && strncasecmp(v.p, "no", 2) == 0)
            return false;
    }
    return px->p->buffering;
}

/* Wait for the client to take what is parked on its connection; the last act of the
 * event. */
static void client_wait(struct conn *c)
{
    c->close_after_send = false;
    conn_wait(c, CONN_SEND, EPOLLOUT, clock_now_ms() + hc(c)->limits->send_timeout_ms);
}

static void buffered_event(struct lf_handle *h, uint32_t events);

/* Wait for the upstream's bytes and for room at the client at once: the upstream is still
 * sending while a part waits for the client. The two sockets are one set of their own
 * (as a tunnel's, made once for the answer), which is the one handle waited on; the
 * last act of the event. Without it (no set to be had, or a TLS upstream that waits for
 * another event) the upstream alone is waited for, and the client written to when its
 * bytes come. */
static void both_wait(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    if (px->tls_want) {
        proxy_wait(px, EPOLLIN, true);
        return;
    }
    if (upstream_store_wait_both(&px->tun, px->h.fd, c, px->deadline_ms, buffered_event) == 0)
        proxy_wait(px, EPOLLIN, true);
}

/* The body with proxy_buffering on: see above. The last act of the event. */
static void buffered_relay(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    char buf[PROXY_RELAY];
    struct http_piece pc;
    for (;;) {
        enum send_result r = c->out ? conn_send_pending(c) : SEND_DONE;
        while (r == SEND_DONE && !upstream_store_empty(&px->store))
            r = upstream_store_flush(&px->store, c);
        if (r == SEND_ERROR) {
            conn_close(c);
            return;
        }
        bool parked = c->out != NULL;
        if (px->up_ended && !parked) {
            proxy_finish(px, 0, NULL); /* (the filter's last bytes, the last chunk) */
            return;
        }
        size_t want = px->up_ended  ? 0
                      : parked ? upstream_store_room(&px->store, &px->src, px->p, PROXY_RELAY)
                               : PROXY_RELAY;
        if (want == 0) { /* the client takes some first: its wait's deadline is its own */
            client_wait(c);
            return;
        }
        ssize_t n = up_recv(px, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (parked)
                both_wait(px);
            else
                proxy_wait(px, EPOLLIN, true);
            return;
        }
        if (n <= 0) {
            if (n == 0 && px->framing == HTTP_BODY_CLOSE) {
                px->up_reusable = false;
                up_end(px);
                continue;
            }
            body_cut(px, n < 0 ? strerror(errno) : "the upstream closed early");
            return;
        }
        set_deadline(px, clock_now_ms() + px->p->read_ms);
        if (px->try_now) {
            px->try_now->bytes_received += (uint64_t)n;
            px->try_now->response_length += (uint64_t)n;
            px->try_now->response_us = clock_now_us() - px->try_now->start_us;
        }
        struct response resp;
        resp_init(&resp);
        int done = take_body(px, &resp, buf, (size_t)n, &pc);
        if (done < 0) {
            body_cut(px, body_failure(done));
            return;
        }
        if (resp.n_segs && !parked) {
            r = http_send_response(c, &resp, true);
            if (r == SEND_ERROR) {
                conn_close(c);
                return;
            }
        } else if (resp.n_segs && upstream_store_put(&px->store, &resp) < 0) {
            body_cut(px, "its temporary file cannot be written");
            return;
        }
        if (done)
            up_end(px);
    }
}

/* A 101: the head's bytes after `used` are the upstream's first in the tunnel, and what
 * the client sent after its request (kept on the connection) the client's. */
static void tunnel_begin(struct conn_proxy *px, size_t used)
{
    struct conn *c = px->src.c;
    conn_set_wake_fd(c, px->h.fd, false); /* a half-closed client may still read */
    px->uvars.head = NULL; /* the buffer is the tunnel's now */
    px->head_off = used;
    px->head_len -= used;
    px->req_off = px->req_len = 0;
    http_source_keep_body(&px->src, NULL, 0); /* (it was in req[]) */
    if (c->in) {
        memcpy(px->req, c->in->data, c->in->len);
        px->req_len = c->in->len;
        conn_buf_put(c->pool, c->in);
        c->in = NULL;
    }
}

/* proxy_intercept_errors: the upstream's error (uh, 300 or more) has an error_page, which
 * answers instead, with the upstream's WWW-Authenticate if a 401 (as nginx keeps it). The
 * upstream's body is not read: its connection closes. */
static void intercept(struct conn_proxy *px, const struct http_response_head *uh,
                      struct response *resp)
{
    body_release(px);
    upstream_answered(px->server, clock_now_us() - px->attempt_us);
    resp_error(resp, uh->status);
    for (unsigned i = 0; uh->status == 401 && i < uh->n_headers; i++)
        if (http_slice_eq(uh->headers[i].name, "www-authenticate")) {
            resp_header_n(resp, "WWW-Authenticate", 16, uh->headers[i].value.p,
                          uh->headers[i].value.len);
            break; /* the first; add_challenges the others, after the page */
        }
    px->up_reusable = false;
    px->intercepted = true;
    px->intercepted_head = uh;
    px->src.status = uh->status;
    proxy_finish_after(px, uh->status, NULL, resp);
}

/* The upstream's final head is complete in head[0..used): make the client's response and
 * send it with whatever of the body came along. Returns as proxy_step's steps do: true to
 * go on reading, false when the event has handed the connection on. */
static bool relay_head(struct conn_proxy *px, const struct http_response_head *uh, size_t used)
{
    struct http_piece pc;
    struct response resp;
    resp_init(&resp);
    resp.head_only = px->src.head_only;
    px->uvars.head = px->head; /* $upstream_http_NAME, for add_header and the log */
    px->uvars.head_len = used;
    if (px->try_now)
        px->try_now->response_length += px->head_len - used;
    if (px->src.has_saved && accel_target(uh).len > 0) {
        /* nginx's internal redirect: the upstream's body is not read, its connection
         * closes; the answer is the one the field names */
        body_release(px);
        upstream_answered(px->server, clock_now_us() - px->attempt_us);
        px->up_reusable = false;
        px->accel_head = uh;
        px->src.status = uh->status;
        proxy_finish_after(px, 0, NULL, &resp);
        return false;
    }
    if (px->p->intercept_errors && uh->status >= 300 && px->src.has_saved &&
        module_chain_has_error_page(&px->src.saved, uh->status)) {
        intercept(px, uh, &resp);
        return false;
    }
    if (px->p->ops->head(px->p->conf, px->src.has_saved ? &px->src.saved : NULL, uh, &resp) < 0 ||
        resp_failed(&resp)) {
        attempt_failed(px, FAIL_INVALID, "its head cannot be relayed (too large?)");
        return false;
    }
    body_release(px); /* sent, and never sent again */
    upstream_answered(px->server, clock_now_us() - px->attempt_us);
    resp.length_known = uh->framing == HTTP_BODY_LENGTH ||
                        (uh->framing == HTTP_BODY_NONE && uh->has_content_length);
    resp.content_length = resp.length_known ? uh->content_length : 0;
    if (resp.status != 101)
        http_source_filter_head(&px->src, &resp, px->p);
    if (resp_failed(&resp)) {
        proxy_finish(px, 502, "its head, with the fields added here, is too large");
        return false;
    }
    px->src.status = resp.status;
    px->framing = uh->framing;
    px->left = uh->content_length;
    if (body_unread(px)) { /* answered before the body's end: neither connection goes on */
        px->src.keep_alive = false;
        px->request_keeps = false;
    }
    px->up_reusable = uh->keep_alive && px->request_keeps;
    http_chunked_init(&px->dechunk);
    resp.keep_alive = px->src.keep_alive;
    bool coded = resp.body_filter && !resp.no_length; /* (compressed: the length changes) */
    if (!http_source_start_filter(&px->src, &resp)) {
        proxy_finish(px, 500, "out of memory for compression");
        return false;
    }
    if (resp.status == 101) {
        resp.no_length = true;
        resp.keep_alive = true; /* no "Connection: close": head() said "upgrade" */
        px->framing = HTTP_BODY_NONE;
    } else if (uh->framing == HTTP_BODY_NONE && !coded) {
        /* 204, 304, an answer to HEAD: the upstream's Content-Length, if any, is the one a
         * GET would have had (no_length statuses drop it in resp_finish). */
        resp.content_length = uh->has_content_length ? uh->content_length : 0;
        if (resp.status == 204 || resp.status == 304 || resp.status < 200)
            resp.no_length = true;
    } else if (uh->framing == HTTP_BODY_LENGTH && !coded && !px->src.trailers_render) {
        resp.content_length = uh->content_length;
    } else if (px->src.http10 || px->src.no_chunked) {
        resp.keep_alive = px->src.keep_alive = false; /* the body ends with the connection */
        resp.no_length = true;
    } else {
        resp.chunked = px->src.chunked = true;
    }
    resp.keep_alive_header_s = hc(px->src.c)->limits->keepalive_header_s;
    resp.say_keep_alive = hc(px->src.c)->limits->say_keep_alive;
    resp_finish(&resp, px->src.http10);
    px->src.head_sent = true;
    px->phase = resp.status == 101 ? PHASE_TUNNEL : PHASE_BODY;
    px->buffering = px->phase == PHASE_BODY && !px->src.head_only && wants_buffering(px, uh);
    int done = 0;
    /* A body that may end here is taken from a copy: the answer then goes out after the
     * upstream connection is let go of (proxy_finish_after), and px's buffer may be
     * another request's by then. */
    char body[PROXY_HEAD_MAX];
    const char *from = px->head + used;
    size_t n = px->head_len - used;
    bool may_end = px->framing != HTTP_BODY_CLOSE &&
                   !(px->framing == HTTP_BODY_LENGTH && px->left > n);
    if (px->phase == PHASE_BODY && may_end && n > 0) {
        memcpy(body, from, n);
        from = body;
    }
    if (px->phase == PHASE_BODY)
        done = take_body(px, &resp, (char *)from, n, &pc);
    else
        tunnel_begin(px, used);
    if (done < 0) {
        proxy_finish(px, 0, body_failure(done));
        return false;
    }
    if (done) {
        answered(px);
        proxy_finish_after(px, 0, NULL, &resp);
        return false;
    }
    /* Buffering, a part parked does not stop the upstream being read: the client is not
     * waited for here. */
    enum send_result r = px->buffering ? http_send_response(px->src.c, &resp, true)
                                       : http_source_send(&px->src, &resp);
    if (r == SEND_ERROR) {
        conn_close(px->src.c);
        return false;
    }
    return px->buffering || r == SEND_DONE;
}

/* Read the upstream's head. Returns true to go on, false when the event is over (waiting,
 * or the connection handed on). */
static bool read_head(struct conn_proxy *px)
{
    for (;;) {
        if (px->head_len == PROXY_HEAD_MAX) {
            attempt_failed(px, FAIL_INVALID, "a head larger than 16k");
            return false;
        }
        ssize_t n = up_recv(px, px->head + px->head_len, PROXY_HEAD_MAX - px->head_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            proxy_wait(px, EPOLLIN, true);
            return false;
        }
        if (n <= 0) {
            bool nothing = px->head_len == 0;
            attempt_failed(px, px->reused && nothing ? FAIL_STALE : FAIL_ERROR,
                           n < 0 ? strerror(errno)
                                 : nothing ? "closed without an answer" : "closed inside the head");
            return false;
        }
        px->head_len += (size_t)n;
        if (px->try_now)
            px->try_now->bytes_received += (uint64_t)n;
        set_deadline(px, clock_now_ms() + px->p->read_ms);
        for (;;) {
            static const struct http_limits lim = {PROXY_HEAD_MAX, HTTP_MAX_HEADERS};
            struct http_response_head uh;
            int used = http_parse_response(px->head, px->head_len, &lim, px->method, &uh);
            if (used == 0)
                break;
            if (used < 0) {
                attempt_failed(px, FAIL_INVALID, "its head is not valid HTTP/1.1");
                return false;
            }
            if (uh.te_and_length) { /* RFC 9112 6.3: "ought to be handled as an error" */
                attempt_failed(px, FAIL_INVALID, "Transfer-Encoding and Content-Length both");
                return false;
            }
            if (uh.status >= 100 && uh.status < 200 && uh.status != 101) {
                /* 100, 102, 103: not relayed; the final head follows */
                memmove(px->head, px->head + used, px->head_len - (size_t)used);
                px->head_len -= (size_t)used;
                continue;
            }
            if (uh.status == 101 && (!px->tunnel_asked || uh.upgrade.len == 0)) {
                attempt_failed(px, FAIL_INVALID, "101 to a request that asked no upgrade, "
                                                 "or without Upgrade");
                return false;
            }
            if (px->try_now) {
                px->try_now->status = uh.status;
                px->try_now->header_us = clock_now_us() - px->try_now->start_us;
            }
            unsigned bit = uh.status == 502 ? PROXY_NEXT_502
                           : uh.status == 503 ? PROXY_NEXT_503
                           : uh.status == 504 ? PROXY_NEXT_504
                           : uh.status == 500 ? PROXY_NEXT_500
                           : uh.status == 403 ? PROXY_NEXT_403
                           : uh.status == 404 ? PROXY_NEXT_404
                           : uh.status == 429 ? PROXY_NEXT_429 : 0;
            struct upstream_server *next = NULL;
            if (bit && (px->p->next_upstream & bit) && body_resendable(px) &&
                (idempotent(px->method) || (px->p->next_upstream & PROXY_NEXT_NON_IDEMPOTENT)) &&
                (px->p->tries == 0 || px->attempts < px->p->tries)) {
                uint64_t tried = px->tried | 1ull << (px->server - px->up->servers);
                next = upstream_pick(px->up, clock_now_ms(), tried, &px->choice);
            }
            if (next) { /* this answer is an error, and another server may do better */
                try_end(px, 0);
                up_close(px);
                /* a 403 or 404 is never the server's failure (nginx's rule) */
                upstream_done(px->up, px->server,
                              !(bit & (PROXY_NEXT_403 | PROXY_NEXT_404)), clock_now_ms());
                px->tried |= 1ull << (px->server - px->up->servers);
                attempt_begin(px, next);
                return false;
            }
            return relay_head(px, &uh, (size_t)used);
        }
    }
}

/* Relay body bytes until the upstream has no more for now, the client is full, or the
 * body has ended. */
static void relay_body(struct conn_proxy *px)
{
    char buf[PROXY_RELAY];
    struct http_piece pc;
    if (px->buffering) {
        buffered_relay(px);
        return;
    }
    for (;;) {
        if (px->framing == HTTP_BODY_NONE) { /* ended, the last part parked meanwhile */
            proxy_finish(px, 0, NULL);
            return;
        }
        ssize_t n = up_recv(px, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            proxy_wait(px, EPOLLIN, true);
            return;
        }
        if (n <= 0) {
            if (n == 0 && px->framing == HTTP_BODY_CLOSE) {
                px->up_reusable = false;
                proxy_finish(px, 0, NULL);
            } else {
                proxy_finish(px, 0, n < 0 ? strerror(errno) : "the upstream closed early");
            }
            return;
        }
        set_deadline(px, clock_now_ms() + px->p->read_ms);
        if (px->try_now) {
            px->try_now->bytes_received += (uint64_t)n;
            px->try_now->response_length += (uint64_t)n;
            px->try_now->response_us = clock_now_us() - px->try_now->start_us;
        }
        struct response resp;
        resp_init(&resp);
        int done = take_body(px, &resp, buf, (size_t)n, &pc);
        if (done < 0) {
            proxy_finish(px, 0, body_failure(done));
            return;
        }
        if (done) { /* the last of it goes out after the upstream connection is let go of */
            answered(px);
            proxy_finish_after(px, 0, NULL, &resp);
            return;
        }
        enum send_result r = resp.n_segs ? http_source_send(&px->src, &resp) : SEND_DONE;
        if (r == SEND_ERROR) {
            conn_close(px->src.c);
            return;
        }
        if (r == SEND_PARKED)
            return;
    }
}

/* --- the tunnel -------------------------------------------------------------------------- */

/* One end of a tunnel: a socket, or the client's connection when it speaks TLS (its bytes
 * go through OpenSSL; what OpenSSL has read ahead is read before the socket is waited on,
 * as each way reads until it would block). */
struct tunnel_end {
    int fd;
    struct conn *tls; /* the client's connection over TLS, else NULL */
    void *up_tls;     /* the upstream's TLS (an https upstream), else NULL */
};

/* A tunnel's write to `to`, as send. */
static ssize_t end_write(struct tunnel_end to, const char *buf, size_t len)
{
    uint32_t want;
    if (to.up_tls)
        return upstream_tls_write(to.up_tls, buf, len, &want);
    return to.tls ? conn_write(to.tls, buf, len) : send(to.fd, buf, len, MSG_NOSIGNAL);
}

/* A tunnel's read from `from`, as recv. */
static ssize_t end_read(struct tunnel_end from, char *buf, size_t cap)
{
    uint32_t want;
    if (from.up_tls)
        return upstream_tls_read(from.up_tls, buf, cap, &want);
    return from.tls ? conn_read(from.tls, buf, cap) : recv(from.fd, buf, cap, 0);
}

/* Move bytes one way: from `from` into buf (pending at *off, *len), then to `to`. Returns
 * the events `from` (low half) and `to` (high half) now wait for, and sets *ended when from
 * has ended and all its bytes went; -1 on a failure. */
static int tunnel_way(struct tunnel_end from, struct tunnel_end to, char *buf, size_t cap,
                      size_t *off, size_t *len, bool *ended, bool *moved)
{
    for (;;) {
        if (*len > 0) {
            ssize_t w = end_write(to, buf + *off, *len);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && errno == EAGAIN)
                return EPOLLOUT << 16;
            if (w < 0)
                return -1;
            *off += (size_t)w;
            *len -= (size_t)w;
            *moved = true;
            continue;
        }
        *off = 0;
        if (*ended)
            return 0;
        ssize_t n = end_read(from, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return EPOLLIN;
        if (n < 0)
            return -1;
        if (n == 0) {
            *ended = true;
            if (to.tls)
                conn_tls_shutdown(to.tls);
            if (to.up_tls)
                upstream_tls_shutdown(to.up_tls);
            shutdown(to.fd, SHUT_WR);
            return 0;
        }
        *len = (size_t)n;
        *moved = true;
    }
}

static void tunnel_event(struct lf_handle *h, uint32_t events);

static void tunnel(struct conn_proxy *px)
{
    struct conn *c = px->src.c;
    bool moved = false;
    size_t req_off = px->req_off;
    struct tunnel_end up = {px->h.fd, NULL, px->tls}, client = {c->h.fd, c->tls ? c : NULL, NULL};
    int down = tunnel_way(up, client, px->head, PROXY_HEAD_MAX, &px->head_off, &px->head_len,
                          &px->up_done, &moved);
    int upw = down < 0 ? -1
                       : tunnel_way(client, up, px->req, PROXY_REQ_MAX, &req_off,
                                    &px->req_len, &px->client_done, &moved);
    px->req_off = req_off;
    if (down < 0 || upw < 0 || (px->up_done && px->client_done)) {
        px->src.keep_alive = false;
        proxy_finish(px, 0, NULL);
        return;
    }
    if (moved)
        set_deadline(px, clock_now_ms() + px->p->read_ms);
    uint32_t up_ev = (uint32_t)(down & 0xffff) | ((uint32_t)upw >> 16);
    uint32_t client_ev = (uint32_t)(upw & 0xffff) | ((uint32_t)down >> 16);
    bool first = px->tun.fd < 0;
    if (first && (px->tun.fd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        log_error("proxy: a tunnel's epoll set: %s", strerror(errno));
        conn_close(c);
        return;
    }
    int op = first ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    struct epoll_event ue = {.events = up_ev, .data.u32 = TUNNEL_UP};
    struct epoll_event ce = {.events = client_ev, .data.u32 = TUNNEL_CLIENT};
    if (epoll_ctl(px->tun.fd, op, px->h.fd, &ue) < 0 ||
        epoll_ctl(px->tun.fd, op, c->h.fd, &ce) < 0) {
        log_error("proxy: a tunnel's epoll set: %s", strerror(errno));
        conn_close(c);
        return;
    }
    if (!first) {
        conn_wait_on(c, &px->tun, CONN_STREAM, px->deadline_ms);
        return;
    }
    /* The upstream socket's own handle stays ours, never re-armed: the set speaks for it. */
    px->tun.on_event = tunnel_event;
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    int rc = lf_group_add(c->h.group, &px->tun, EPOLLIN);
    if (rc < 0) {
        log_error("proxy: epoll: cannot add a tunnel's set: %s", strerror(-rc));
        conn_close(c);
    }
}

static void tunnel_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_proxy *px = (struct conn_proxy *)((char *)h - offsetof(struct conn_proxy, tun));
    if (atomic_load_explicit(&px->src.c->woken, memory_order_relaxed)) {
        px->src.keep_alive = false; /* idle past proxy_read_timeout, or the client has gone */
        proxy_finish(px, 0, NULL);
        return;
    }
    tunnel(px);
}

/* --- the event --------------------------------------------------------------------------- */

/* https: the TLS handshake, begun or going on. true once it is done; false when the event
 * is over (waiting, or the attempt failed). */
static bool handshake(struct conn_proxy *px)
{
    if (!px->tls) {
        px->tls = upstream_tls_new(px->p->tls_ctx, px->h.fd, px->tls_sni ? px->tls_name : NULL,
                                   px->p->tls_verify ? px->tls_name : NULL,
                                   &px->server->tls_session);
        if (!px->tls) {
            attempt_failed(px, FAIL_ERROR, "cannot make an SSL object");
            return false;
        }
    }
    uint32_t want = EPOLLIN;
    char why[512];
    int rc = upstream_tls_handshake(px->tls, &want, why, sizeof(why));
    if (rc > 0) {
        px->tls_ok = true;
        return true;
    }
    if (rc == 0) {
        proxy_wait(px, want, true);
        return false;
    }
    proxy_log(px, "proxy: %s: %s", px->server->text, why);
    attempt_failed(px, FAIL_ERROR, why);
    return false;
}

/* Do what the phase asks until the event must wait or is handed on. */
static void proxy_step(struct conn_proxy *px)
{
    for (;;) {
        switch (px->phase) {
        case PHASE_RESOLVE: {
            char why[400];
            enum upstream_lookup_result rc = upstream_lookup_take(&px->look, px->p->resolver,
                                                                  why, sizeof(why));
            if (rc == UPSTREAM_LOOKUP_WAIT) {
                proxy_wait(px, EPOLLIN, true); /* (not the answer: wait on) */
                return;
            }
            up_close(px);
            look_done(px, rc, why);
            return;
        }
        case PHASE_CONNECT: {
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(px->h.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            if (err == 0) {
                struct sockaddr_storage peer;
                socklen_t pl = sizeof(peer);
                if (getpeername(px->h.fd, (struct sockaddr *)&peer, &pl) == 0) {
                    try_connected(px);
                    if (px->p->tls_ctx) { /* the handshake has the connect's time left */
                        px->phase = PHASE_HANDSHAKE;
                        continue;
                    }
                    px->phase = PHASE_SEND;
                    set_deadline(px, clock_now_ms() + px->p->send_ms);
                    continue;
                }
                if (errno != ENOTCONN) {
                    err = errno;
                } else { /* not yet */
                    proxy_wait(px, EPOLLOUT, true);
                    return;
                }
            }
            attempt_failed(px, FAIL_ERROR, strerror(err));
            return;
        }
        case PHASE_HANDSHAKE:
            if (!handshake(px))
                return;
            px->phase = PHASE_SEND;
            set_deadline(px, clock_now_ms() + px->p->send_ms);
            continue;
        case PHASE_SEND: {
            int r = send_request(px);
            if (r < 0) {
                attempt_failed(px, px->reused && !px->sent_any ? FAIL_STALE : FAIL_ERROR,
                               strerror(errno));
                return;
            }
            if (r == 0) {
                proxy_wait(px, EPOLLOUT, true);
                return;
            }
            if (body_unread(px)) {
                px->phase = PHASE_UPLOAD;
                continue;
            }
            px->phase = PHASE_HEAD;
            set_deadline(px, clock_now_ms() + px->p->read_ms);
            /* The answer has not come yet: no read to try. The socket held nothing unread
             * (a kept one was read to the end; anything since is an edge still to come). */
            proxy_wait(px, EPOLLIN, true);
            return;
        }
        case PHASE_UPLOAD:
            if (!upload(px))
                return;
            continue;
        case PHASE_HEAD:
            if (!read_head(px))
                return;
            continue;
        case PHASE_BODY:
            relay_body(px);
            return;
        case PHASE_TUNNEL:
            tunnel(px);
            return;
        }
    }
}

/* The deadline has passed. */
static void proxy_timeout(struct conn_proxy *px)
{
    switch (px->phase) {
    case PHASE_RESOLVE: {
        char why[400];
        upstream_lookup_cancel(&px->look, px->p->resolver, why, sizeof(why));
        up_close(px);
        proxy_finish(px, 502, why);
        return;
    }
    case PHASE_CONNECT:
        attempt_failed(px, FAIL_TIMEOUT, "connect timed out");
        return;
    case PHASE_HANDSHAKE:
        attempt_failed(px, FAIL_TIMEOUT, "upstream timed out while SSL handshaking to upstream");
        return;
    case PHASE_SEND:
        attempt_failed(px, FAIL_TIMEOUT, "send timed out");
        return;
    case PHASE_UPLOAD:
        if (px->upload_waits_client)
            upload_refused(px, 408, "client timed out while sending the request body");
        else
            attempt_failed(px, FAIL_TIMEOUT, "send timed out");
        return;
    case PHASE_HEAD:
        attempt_failed(px, FAIL_TIMEOUT, "no answer within proxy_read_timeout");
        return;
    case PHASE_BODY:
        body_cut(px, "read timed out");
        return;
    case PHASE_TUNNEL:
        px->src.keep_alive = false;
        proxy_finish(px, 0, NULL);
        return;
    }
}

/* Was the event the sweep's? It shut the upstream socket down: its deadline passed, or the
 * client closed its side (then nobody is left to answer). If so, that is dealt with. */
static bool swept(struct conn_proxy *px)
{
    if (!atomic_load_explicit(&px->src.c->woken, memory_order_relaxed))
        return false;
    if (clock_now_ms() >= px->deadline_ms)
        proxy_timeout(px);
    else
        conn_close(px->src.c);
    return true;
}

static void proxy_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_proxy *px = of_handle(h);
    if (!swept(px))
        proxy_step(px);
}

/* An event of both_wait's set: the upstream's bytes, or room at the client. */
static void buffered_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_proxy *px = (struct conn_proxy *)((char *)h - offsetof(struct conn_proxy, tun));
    if (!swept(px))
        buffered_relay(px);
}

/* An event of a streamed body's set: the client's bytes, or the upstream's answer. */
static void upload_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_proxy *px = (struct conn_proxy *)((char *)h - offsetof(struct conn_proxy, tun));
    if (!swept(px))
        proxy_step(px);
}

/* A parked part of the answer went out: read more of it, or end it. */
static void proxy_resume(struct http_source *s)
{
    struct conn_proxy *px = (struct conn_proxy *)s;
    if (px->phase == PHASE_BODY && px->buffering) {
        /* (the upstream was not read meanwhile: proxy_read_timeout starts again) */
        if (!px->up_ended)
            set_deadline(px, clock_now_ms() + px->p->read_ms);
        buffered_relay(px);
        return;
    }
    if (px->phase == PHASE_BODY && px->framing == HTTP_BODY_NONE) {
        proxy_finish(px, 0, NULL); /* the last part went out */
        return;
    }
    set_deadline(px, clock_now_ms() + px->p->read_ms);
    proxy_step(px);
}

/* --- starting ---------------------------------------------------------------------------- */

/* Does the request ask for another protocol (Upgrade, and "upgrade" in Connection)? */
static bool asks_upgrade(const struct http_request *h)
{
    bool upgrade = false, named = false;
    for (unsigned i = 0; i < h->n_headers; i++) {
        const struct http_header *f = &h->headers[i];
        if (http_slice_eq(f->name, "upgrade") && f->value.len > 0) {
            upgrade = true;
        } else if (http_slice_eq(f->name, "connection")) {
            struct http_slice rest = f->value, e;
            while (http_list_next(&rest, &e))
                named |= http_slice_eq(e, "upgrade");
        }
    }
    return upgrade && named && h->version_minor > 0; /* (none in HTTP/1.0: RFC 9110 7.8) */
}

/* Keep the request's body for sending: after the head in req[] when it fits (a collected
 * one is then the caller's to free, once the request's head in it has been saved), else
 * where it is (a collected body, owned from now on); *kept: where it is kept. */
static bool keep_body(struct conn_proxy *px, const struct request *r, void *owner,
                      const char **kept)
{
    *kept = NULL;
    if (r->body_len == 0)
        return true;
    if (r->body_len <= PROXY_REQ_MAX - px->req_len) {
        *kept = px->req + px->req_len;
        memcpy(px->req + px->req_len, r->body, r->body_len);
        px->req_len += r->body_len;
        return true;
    }
    if (owner) {
        px->body_owner = owner;
        *kept = px->body = r->body;
        px->body_len = r->body_len;
        return true;
    }
    return false; /* (a body in the read buffer always fits: it is smaller than req[]) */
}

static const struct http_source_ops proxy_ops = {
    .resume = proxy_resume,
    .abort = proxy_abort,
    .release = proxy_done,
};

static bool proxy_answers(const struct response *resp)
{
    return resp->proxy != NULL;
}

/* The choice a request starts with: for ip_hash, the client's address's bytes (three of an
 * IPv4 one, as nginx's), for hash, the key expanded into key[0..cap). */
static struct upstream_choice choice_for(const struct upstream *u, const struct request *r,
                                         unsigned char *key, size_t cap)
{
    struct upstream_choice ch = {.key = key};
    if (u->balance == UPSTREAM_IP_HASH && r->peer) {
        const struct sockaddr *sa = r->peer;
        const void *bytes = NULL;
        if (sa->sa_family == AF_INET) {
            bytes = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
            ch.key_len = 3;
        } else if (sa->sa_family == AF_INET6) {
            bytes = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
            ch.key_len = 16;
        } else { /* a unix socket's client: nginx's pseudo-address */
            static const unsigned char pseudo[3] = {0, 0, 0};
            bytes = pseudo;
            ch.key_len = 3;
        }
        memcpy(key, bytes, ch.key_len);
    } else if (u->balance == UPSTREAM_HASH && u->hash_key) {
        struct vars_source src;
        module_vars_source(r, &src);
        long n = vars_expand(u->hash_key, &src, (char *)key, cap);
        ch.key_len = n > 0 ? (size_t)n : 0;
    }
    return ch;
}

/* proxy_ssl_name (default $proxy_host) for r, without its port, into px->tls_name; sent
 * as SNI only with proxy_ssl_server_name on, and never an IP address (RFC 6066). */
static void tls_name_for(struct conn_proxy *px, const struct request *r)
{
    const struct proxy_params *p = px->p;
    char *name = px->tls_name;
    size_t cap = sizeof(px->tls_name);
    size_t n;
    if (p->tls_name) {
        struct vars_source src;
        module_vars_source(r, &src);
        src.proxy_host = p->tls_host;
        long len = vars_expand(p->tls_name, &src, name, cap);
        n = len > 0 && (size_t)len < cap ? (size_t)len : 0;
    } else {
        n = p->tls_host.len < cap ? p->tls_host.len : 0;
        memcpy(name, p->tls_host.p, n);
    }
    name[n] = '\0';
    if (name[0] == '[') { /* [IPv6]:PORT */
        char *close = strchr(name, ']');
        if (close) {
            *close = '\0';
            memmove(name, name + 1, strlen(name + 1) + 1);
        }
    } else {
        char *colon = strchr(name, ':');
        if (colon && !strchr(colon + 1, ':'))
            *colon = '\0';
    }
    unsigned char addr[sizeof(struct in6_addr)];
    px->tls_sni = p->tls_server_name && name[0] && inet_pton(AF_INET, name, addr) != 1 &&
                  inet_pton(AF_INET6, name, addr) != 1;
}

/* Start relaying the answer of an upstream server (resp->proxy) for request r: the last
 * act of the event. A collected body is sent on from where it lies (the proxy owns it). */
static void proxy_start(struct conn *c, struct response *resp, const struct request *r,
                        const char *rest, size_t rest_len, struct http_collect *body_owner)
{
    const struct proxy_params *p = resp->proxy;
    const struct http_request *h = r->http;
    struct http_shared *shared = http_service_of(c)->shared;
    int64_t now = clock_now_ms();
    struct conn_proxy *px = NULL;
    struct upstream *u = p->upstream;
    int target_rc = 0;
    if (p->dynamic) { /* proxy_pass with variables: an upstream block, or a host */
        px = proxy_new();
        if (px) {
            target_rc = p->ops->target(p->conf, r, &px->target);
            u = target_rc == 0 ? px->target.upstream : NULL;
        }
    }
    unsigned char key[PROXY_KEY_MAX];
    struct upstream_choice choice = {.key = key};
    if (u)
        choice = choice_for(u, r, key, sizeof(key));
    struct upstream_server *s = u ? upstream_pick(u, now, 0, &choice) : NULL;
    if (s && !px) {
        struct upstream_idle *idle = upstream_idle_take(u, s, c->h.group);
        px = idle ? of_idle(idle) : proxy_new();
        if (px && !proxy_buffers(px)) { /* kept by a spare state (up_let_go) */
            proxy_release(px);
            px = NULL;
        }
    }
    if (!http_save_input(c, rest, rest_len) || (s && !px) || (p->dynamic && !px)) {
        if (s)
            upstream_done(u, s, false, now);
        if (px)
            proxy_release(px);
        if (body_owner)
            http_collect_free(shared, body_owner);
        conn_close(c);
        return;
    }
    if (!px) { /* every server is out: 502 at once */
        px = proxy_new();
        if (!px) {
            if (body_owner)
                http_collect_free(shared, body_owner);
            conn_close(c);
            return;
        }
    }
    http_source_init(&px->src, &proxy_ops, c, resp, r);
    px->h.on_event = proxy_event;
    px->p = p;
    px->up = u;
    px->look.resolving = false;
    px->shared = shared;
    px->method = h->method;
    px->tried = 0;
    px->attempts = 0;
    px->fresh_only = false;
    px->server = NULL;
    px->body_owner = NULL;
    px->body = NULL;
    px->body_len = px->body_off = 0;
    px->tunnel_asked = false;
    px->intercepted = false;
    px->intercepted_head = NULL;
    px->choice = choice;
    memcpy(px->key, key, choice.key_len);
    px->choice.key = px->key;
    px->up_done = px->client_done = false;
    px->attempt_done = false;
    px->uvars.n = 0;
    px->uvars.head = NULL;
    px->try_now = NULL;
    px->tls_want = 0;
    px->buffering = px->up_ended = false;
    px->streams_body = r->body_streams;
    px->body_taken = px->upload_waits_client = false;
    px->up_off = px->up_len = 0;
    if (p->tls_ctx)
        tls_name_for(px, r);

    if (target_rc < 0) { /* nginx: "invalid URL prefix" */
        if (body_owner)
            http_collect_free(shared, body_owner);
        px->src.head_sent = false;
        char why[320];
        snprintf(why, sizeof(why), "invalid URL prefix in \"%s\"", px->target.host);
        snprintf(px->target.host, sizeof(px->target.host), "proxy_pass");
        proxy_finish(px, 500, why);
        return;
    }
    bool keeps = u && u->keepalive > 0;
    long len = p->ops->request(p->conf, r, p->dynamic ? &px->target : NULL, &keeps, px->req,
                               PROXY_REQ_MAX);
    if (len < 0) {
        if (body_owner)
            http_collect_free(shared, body_owner);
        if (s)
            upstream_done(u, s, false, now);
        px->server = NULL;
        px->src.head_sent = false;
        proxy_finish(px, 500, "the request's head is too large to forward");
        return;
    }
    px->req_len = (size_t)len;
    px->request_keeps = keeps;
    px->tunnel_asked = asks_upgrade(h);
    const char *kept = NULL; /* (a streamed body's first bytes stay on the connection) */
    if (!r->body_streams && !keep_body(px, r, body_owner, &kept)) {
        if (s)
            upstream_done(u, s, false, now);
        proxy_finish(px, 500, "no room for the request's body");
        return;
    }
    http_source_save_request(&px->src, r, px->req + px->req_len, PROXY_REQ_MAX - px->req_len);
    px->src.saved.upstream = &px->uvars;
    http_source_keep_body(&px->src, kept, kept ? r->body_len : 0); /* for $request_body */
    /* A collected body not kept where it lies goes now: the head (in it too) is saved. */
    if (body_owner && px->body_owner != body_owner)
        http_collect_free(shared, body_owner);
    /* A socket kept in another group's set leaves it: this request's group has it now. */
    if (px->registered && px->h.group != c->h.group) {
        lf_group_remove(&px->h, false);
        px->registered = false;
    }
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    if (!u) { /* proxy_pass with variables, to a host */
        resolve_begin(px);
        return;
    }
    if (!s) { /* nginx's "no live upstreams": the upstream's name stands for a try */
        try_begin(px, px->up->name, clock_now_us());
        try_end(px, 502);
        proxy_finish(px, 502, "every server is out");
        return;
    }
    /* A kept connection came with px: its socket is the attempt's. */
    attempt_begin(px, s);
}

/* At exit, once every thread group has stopped and every generation is gone: free the
 * spare states (kept while the groups run: see the top of this file). */
static void proxy_fini(void)
{
    pthread_mutex_lock(&proxy_free.lock);
    struct conn_proxy *list = proxy_free.list;
    proxy_free.list = NULL;
    proxy_free.n = 0;
    pthread_mutex_unlock(&proxy_free.lock);
    while (list) {
        struct conn_proxy *next = list->next_free;
        upstream_lookup_free(&list->look);
        free(list);
        list = next;
    }
    upstream_spares_free(&proxy_spares);
    upstream_store_fini();
}

const struct http_source_kind http_proxy_source = {
    .name = "proxy",
    .answers = proxy_answers,
    .start = proxy_start,
    .fini = proxy_fini,
};
