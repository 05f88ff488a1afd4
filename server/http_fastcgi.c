/* http_fastcgi.c — a response from a FastCGI application (fastcgi_pass), relayed to the
 * client: the event side of mod_fastcgi, which writes the request's parameters and reads
 * the head of the answer (module_fastcgi.h).
 *
 * As the reverse proxy's (http_proxy.c), the application's socket is one more handle of
 * the connection in its group, and only it or the client's socket is waited on at a time,
 * so exactly one thread owns the connection at any moment:
 *
 *   the application's socket (CONN_STREAM)  connect, send the request's records
 *                                            (BEGIN_REQUEST, PARAMS, STDIN with the body),
 *                                            read the answer's records as they come, 16 KiB
 *                                            at a time, through an incremental reader
 *                                            (fastcgi_record.h);
 *   the client's socket (CONN_SEND)          the client is slow: what it would not take
 *                                            waits on the connection, and the application
 *                                            is read again only once it is sent.
 *
 * STDOUT is the answer: its head (CGI's, read by mod_fastcgi) and then the body, streamed
 * (chunked when no Content-Length came). STDERR goes to the error log, escaped, as nginx's
 * "FastCGI sent in stderr". END_REQUEST ends the answer. A record an application may not
 * send, a head that is not valid, or a connection that ends without END_REQUEST is 502
 * before the head went out (after trying the next server, as fastcgi_next_upstream
 * allows), and cuts the client's connection after. Deadlines (fastcgi_connect_, _send_,
 * _read_timeout) are the connection's, woken by the sweep as the proxy's are: 504 before
 * the head.
 *
 * Each request has a connection of its own, which the application closes after
 * END_REQUEST, unless `fastcgi_keep_conn on` asks it to keep it (FCGI_KEEP_CONN) and the
 * upstream block keeps idle connections (`keepalive N`): then a connection whose answer
 * ended exactly with its END_REQUEST is kept in the upstream's idle list, watched as the
 * proxy watches its own (a byte or a close from the application drops it), and the next
 * request to that server takes it: the kept state becomes that request's, its socket still
 * registered in the group's set, so waiting on it again costs no epoll_ctl. A kept
 * connection the application closed meanwhile is not its failure: the request goes again
 * on a new one. States are never freed while the
 * server runs (an event of an edge-triggered handle may still name one), and a state on
 * the free list or kept with its connection keeps a buffer up to FCGI_ROOM_KEEP, for the
 * next request; a larger one is freed.
 *
 * A request's body goes with the parameters, read whole first; with
 * fastcgi_request_buffering off it is relayed as it arrives instead (PHASE_UPLOAD: see "the
 * request's body, streamed").
 *
 * With variables (`fastcgi_pass $php;`), the module says per request where it goes
 * (fastcgi_ops.target): an upstream block it names, used as above, or an address or a host
 * name, made a set of its own kept with the state (upstream_lookup.h, shared with the
 * proxy), a name resolved first (PHASE_RESOLVE); connections to those are not kept.
 *
 * uwsgi_pass and scgi_pass (mod_uwsgi.c) go through the same state: their parameters name
 * a struct fastcgi_wire, which frames the request (a uwsgi packet, an SCGI netstring, then
 * the body) in place of the records; their answer is raw bytes, its head a status line or
 * CGI's, and it ends when the application closes (or once its Content-Length came).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fastcgi_record.h"
#include "http_body_stream.h"
#include "http_source.h"
#include "log.h"
#include "module_chain.h"
#include "module_fastcgi.h"
#include "upstream.h"
#include "upstream_lookup.h"
#include "upstream_store.h"
#include "vars_upstream.h"

#define FCGI_HEAD_MAX 16384 /* the answer's head (nginx's fastcgi_buffer_size is 4k or 8k) */
#define FCGI_RELAY 16384    /* read from the application at a time */
#define FCGI_PARAMS_MAX 65536 /* the request's parameters, encoded */
#define FCGI_PARAMS_ROOM 8192 /* ... as most requests' are: a thread's room, no allocation */
/* A state keeps its buffer for the next request (from the free list or, with its socket,
 * in the idle list) when it is at most this large: a request's parameters, head room,
 * relay room and copy of the request all fit, so a warm request allocates nothing; one
 * with a large body gets a buffer of its own, let go of at its end. */
#define FCGI_ROOM_KEEP (96 * 1024)
#define FCGI_REQUEST_ID 1
static_assert(FCGI_RELAY <= HTTP_SOURCE_PIECE, "a piece of the body fits the filter's room");

enum fcgi_phase { PHASE_RESOLVE, PHASE_CONNECT, PHASE_SEND, PHASE_UPLOAD, PHASE_ANSWER };

/* Why an attempt ended without an answer to relay. */
enum fcgi_failure { FAIL_ERROR, FAIL_TIMEOUT, FAIL_INVALID, FAIL_STALE };

struct conn_fcgi {
    struct http_source src; /* first: the source is the state */
    struct lf_handle h;     /* the application's socket (h.fd, -1 without one) */
    bool registered;        /* h is in the handle set of h.group */
    struct upstream_idle idle; /* its place in the upstream's idle list */
    bool watched;              /* idle, and its socket waited on (under the list's lock) */
    struct conn_fcgi *next_free;
    size_t room; /* the bytes req points to (its buffer is kept between requests) */
    struct upstream *up;
    struct upstream_server *server; /* this attempt's */
    /* fastcgi_pass with variables naming an address or a host: the set made of it for the
     * request (kept with the state), and the wait for a name's addresses (PHASE_RESOLVE:
     * h.fd is look.rwait.fd) */
    struct upstream_lookup look;

    const struct fastcgi_params *fp;
    struct http_shared *shared;
    enum fcgi_phase phase;
    enum http_method method;
    bool sent_any;     /* some of the request went to this attempt's application */
    bool attempt_done; /* upstream_done was called for the answer */
    bool ended;        /* END_REQUEST was read */
    bool failed;       /* how the answer ended, for the server's count */
    bool keep_up;      /* the application's connection may be kept for another request */
    bool reused;       /* this attempt's connection was a kept one */
    bool fresh_only;   /* a kept connection failed: the next one is new */
    bool got_any;      /* this attempt received bytes */
    bool intercepted;  /* fastcgi_intercept_errors: the answer is an error_page */
    bool accel;        /* the head named X-Accel-Redirect: the answer is what it names */
    uint64_t tried;    /* the servers tried, a bit each */
    unsigned attempts;
    bool length_known; /* the client's body is framed by Content-Length */
    uint64_t left;     /* then: its bytes still to send */
    int64_t deadline_ms;
    int64_t attempt_us;
    struct fcgi_reader rd;
    /* The request's records (req[0..req_len)), the answer's head being gathered, the
     * bytes read and not yet decoded (in[in_off..in_len)), the saved request: one
     * allocation while in use. */
    char *req;
    size_t req_len, req_off;
    char *head;
    size_t head_len;
    char *in;
    size_t in_off, in_len;
    char *saved_room;
    /* *_request_buffering off (see "the request's body, streamed"): the client's body is
     * read as it comes (body_taken: some of it was, and the request cannot go again),
     * through upload[up_off, up_len) to the application; upload_waits_client: for its bytes,
     * else for room at the application. */
    bool streams_body, body_taken, upload_waits_client;
    char *upload;
    size_t up_off, up_len;
    struct vars_upstream uvars;
    struct vars_upstream_try *try_now, try_spare;

    /* fastcgi_buffering on (see "buffering" below): this answer is read ahead of a slow
     * client into the store, both sockets waited on through `both` while a part is parked,
     * and the application let go of once the answer is read whole (up_ended). */
    bool buffering, up_ended;
    struct upstream_store store;
    struct lf_handle both; /* the set of the two sockets (both.fd, -1 without one) */
};

/* --- states, their sockets and their waits ---------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    struct conn_fcgi *list;
} fcgi_free = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void up_close(struct conn_fcgi *f)
{
    if (f->h.fd < 0)
        return;
    if (f->src.c)
        conn_set_wake_fd(f->src.c, -1, false);
    if (f->registered)
        lf_group_remove(&f->h, true);
    f->registered = false;
    close(f->h.fd);
    f->h.fd = -1;
}

/* Let go of f's buffer unless it is one to keep. */
static void room_trim(struct conn_fcgi *f)
{
    if (f->room > FCGI_ROOM_KEEP) {
        free(f->req);
        f->req = NULL;
        f->room = 0;
    }
    f->head = f->in = f->saved_room = f->upload = NULL;
}

static void fcgi_release(struct conn_fcgi *f)
{
    up_close(f);
    upstream_store_free(&f->store);
    upstream_store_wait_end(&f->both);
    room_trim(f);
    pthread_mutex_lock(&fcgi_free.lock);
    f->next_free = fcgi_free.list;
    fcgi_free.list = f;
    pthread_mutex_unlock(&fcgi_free.lock);
}

static struct conn_fcgi *of_handle(struct lf_handle *h)
{
    return (struct conn_fcgi *)((char *)h - offsetof(struct conn_fcgi, h));
}

/* --- kept connections (as http_proxy.c keeps its own) ---------------------------------- */

static struct conn_fcgi *of_idle(struct upstream_idle *idle)
{
    return (struct conn_fcgi *)((char *)idle - offsetof(struct conn_fcgi, idle));
}

static void idle_close(struct upstream_idle *idle)
{
    fcgi_release(of_idle(idle));
}

/* May a kept connection carry a request? Nothing to read: the application said nothing
 * and did not close it. */
static bool idle_alive(struct conn_fcgi *f)
{
    char b;
    ssize_t n = recv(f->h.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* An event of an idle connection: if the application spoke or closed, it goes. */
static void idle_event(struct lf_handle *h, uint32_t events)
{
    struct conn_fcgi *f = of_handle(h);
    if (!(events & (EPOLLHUP | EPOLLERR)) && idle_alive(f) &&
        lf_group_reactivate(&f->h, EPOLLIN, true) == 0)
        return;
    upstream_idle_drop(f->up, &f->idle);
    f->watched = false;
    fcgi_release(f);
}

static void idle_watch(struct upstream_idle *idle)
{
    struct conn_fcgi *f = of_idle(idle);
    if (!f->registered || !f->h.edge)
        return;
    f->h.on_event = idle_event;
    int rc = lf_group_reactivate(&f->h, EPOLLIN, true);
    if (rc < 0) {
        log_error("fastcgi: epoll: cannot watch a kept connection: %s", strerror(-rc));
        return;
    }
    f->watched = true;
}

/* A socket to keep that was never waited on joins the group's set, to be watched. */
static void idle_register(struct conn_fcgi *f, struct lf_group *g)
{
    if (!lf_group_is_edge(g) || lf_group_add_handle(g, &f->h, 0) < 0)
        return;
    f->registered = true;
    (void)lf_group_claim(&f->h);
}

static bool idle_claim(struct upstream_idle *idle)
{
    struct conn_fcgi *f = of_idle(idle);
    if (f->watched && !lf_group_claim(&f->h))
        return false;
    f->watched = false;
    return true;
}

/* A state from the free list (with the buffer it kept, if any), or new. */
static struct conn_fcgi *fcgi_state(void)
{
    pthread_mutex_lock(&fcgi_free.lock);
    struct conn_fcgi *f = fcgi_free.list;
    if (f)
        fcgi_free.list = f->next_free;
    pthread_mutex_unlock(&fcgi_free.lock);
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f)
            return NULL;
        f->h.fd = f->both.fd = -1;
        f->idle.watch = idle_watch;
        f->idle.claim = idle_claim;
        f->idle.close = idle_close;
        upstream_store_init(&f->store);
    }
    return f;
}

/* Give f (from the free list, or a kept connection's) a buffer of req_cap + save_cap bytes
 * for the request and its copy, and up_cap for a body relayed as it arrives: the one it
 * kept if large enough. false without memory (f is then the caller's to release). */
static bool fcgi_room(struct conn_fcgi *f, size_t req_cap, size_t save_cap, size_t up_cap)
{
    size_t need = req_cap + FCGI_HEAD_MAX + FCGI_RELAY + save_cap + up_cap;
    if (f->room < need) {
        free(f->req);
        f->req = malloc(need);
        f->room = f->req ? need : 0;
        if (!f->req)
            return false;
    }
    f->head = f->req + req_cap;
    f->in = f->head + FCGI_HEAD_MAX;
    f->saved_room = f->in + FCGI_RELAY;
    f->upload = up_cap ? f->saved_room + save_cap : NULL;
    return true;
}

static void set_deadline(struct conn_fcgi *f, int64_t deadline_ms)
{
    f->deadline_ms = deadline_ms;
    atomic_store_explicit(&f->src.c->deadline_ms, deadline_ms, memory_order_relaxed);
}

/* The last act of an event: wait for `events` on the application's socket. */
static void fcgi_wait(struct conn_fcgi *f, uint32_t events, bool drained)
{
    struct conn *c = f->src.c;
    atomic_store_explicit(&c->deadline_ms, f->deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    int rc;
    if (f->registered) {
        rc = lf_group_reactivate(&f->h, events, drained);
    } else {
        f->registered = true; /* said before the add: another thread may have it then */
        rc = lf_group_add_handle(c->h.group, &f->h, events);
        if (rc < 0)
            f->registered = false;
    }
    if (rc < 0) {
        log_error("fastcgi: epoll: cannot wait on an application's socket: %s", strerror(-rc));
        conn_close(c);
    }
    /* From here on another thread may own c: touch nothing. */
}

/* Is some of a streamed body still the client's to send (*_request_buffering off)? */
static bool body_unread(const struct conn_fcgi *f)
{
    return f->streams_body && f->src.c && hc(f->src.c)->body_mode != REQ_BODY_NONE;
}

/* --- ending ------------------------------------------------------------------------------ */

/* The state lets go of the client: the application's connection closed, the attempt
 * counted as the server's failure or not. */
static void fcgi_detach(struct conn_fcgi *f, bool keep_up, bool failed)
{
    struct conn *c = f->src.c;
    if (f->look.resolving)
        upstream_lookup_cancel(&f->look, f->fp->up.resolver, NULL, 0);
    upstream_store_free(&f->store); /* (its file, without a name, goes with it) */
    upstream_store_wait_end(&f->both);
    conn_set_wake_fd(c, -1, false);
    /* A kept socket stays in its group's set; not in a connection's own set. */
    if (f->registered && (!keep_up || lf_group_is_private(f->h.group))) {
        lf_group_remove(&f->h, false);
        f->registered = false;
    }
    if (f->server && !f->attempt_done)
        upstream_done(f->up, f->server, failed, clock_now_ms());
    f->src.c = NULL;
    int64_t now = clock_now_ms();
    if (keep_up && f->h.fd >= 0 && f->server && f->up->keepalive > 0 &&
        upstream_idle_carried(f->up, &f->idle, now)) {
        if (!f->registered)
            idle_register(f, c->h.group);
        room_trim(f); /* kept with its socket, for the request that takes it */
        f->idle.server = f->server;
        f->idle.home = f->registered ? f->h.group : NULL;
        f->server = NULL;
        /* Bounded per group, not in all as the proxy's: an application's worker waits on
         * the connection it keeps, so a connection opened while every worker's is busy
         * waits in its backlog until one is closed. Each group closing what passes its
         * own `keepalive` frees one soon; a bound in all at the workers' count would keep
         * every one and leave it waiting (make bench's PHP row: timeouts). */
        if (upstream_idle_put(f->up, &f->idle, now, 0))
            return; /* another thread may have it now */
    }
    f->server = NULL;
    fcgi_release(f);
}

static void fcgi_abort(struct http_source *s)
{
    fcgi_detach((struct conn_fcgi *)s, false, false);
}

static void fcgi_done(struct http_source *s)
{
    struct conn_fcgi *f = (struct conn_fcgi *)s;
    fcgi_detach(f, f->keep_up, f->failed);
}

/* An error about f's request: to its location's error log. */
#define fcgi_log(f, level, ...)                                                             \
    do {                                                                                    \
        if ((f)->src.has_saved)                                                             \
            module_log(&(f)->src.saved, level, __VA_ARGS__);                                \
        else                                                                                \
            log_error(__VA_ARGS__);                                                         \
    } while (0)

static const char *server_name(const struct conn_fcgi *f)
{
    return f->server ? f->server->text : f->up ? f->up->name : "fastcgi_pass";
}

/* --- the tries' record, for $upstream_* ------------------------------------------------- */

static void try_begin(struct conn_fcgi *f, const char *addr, int64_t now_us)
{
    struct vars_upstream *u = &f->uvars;
    f->try_now = u->n < VARS_UPSTREAM_TRIES ? &u->tries[u->n++] : &f->try_spare;
    *f->try_now = (struct vars_upstream_try){
        .addr = addr, .start_us = now_us, .connect_us = -1, .header_us = -1, .response_us = -1};
}

static void try_end(struct conn_fcgi *f, int status)
{
    struct vars_upstream_try *t = f->try_now;
    if (!t)
        return;
    if (!t->status)
        t->status = status;
    t->response_us = clock_now_us() - t->start_us;
}

static void try_connected(struct conn_fcgi *f)
{
    if (f->try_now && f->try_now->connect_us < 0)
        f->try_now->connect_us = clock_now_us() - f->try_now->start_us;
}

/* The answer is over (failure: why it ended early, or NULL): answer what is still owed,
 * after `tail` (the last of the body, not sent yet, or NULL), then go on with the client's
 * connection or close it. */
/* resp holds the error the client is owed (a 502, a 504): the error_page of the request's
 * block for it answers instead, if it has one, as nginx's; else the plain error, filtered
 * as the block says. */
static void answer_error(struct conn_fcgi *f, struct response *resp,
                         struct http_source_page *pg)
{
    if (!http_source_error_page(&f->src, resp, pg))
        http_source_filter_head(&f->src, resp, &f->fp->up);
}

/* The next line of the application's head f->head[*at..): its name and value (trimmed);
 * false at the head's end. */
static bool raw_head_line(const struct conn_fcgi *f, size_t *at, struct http_slice *name,
                          struct http_slice *value)
{
    while (*at < f->head_len) {
        const char *line = f->head + *at;
        const char *eol = memchr(line, '\n', f->head_len - *at);
        if (!eol)
            return false;
        *at = (size_t)(eol + 1 - f->head);
        const char *end = eol > line && eol[-1] == '\r' ? eol - 1 : eol;
        if (end == line)
            return false; /* the blank line: the head is over */
        const char *colon = memchr(line, ':', (size_t)(end - line));
        if (!colon)
            continue;
        const char *v = colon + 1;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        const char *ve = end;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        *name = (struct http_slice){line, (size_t)(colon - line)};
        *value = (struct http_slice){v, (size_t)(ve - v)};
        return true;
    }
    return false;
}

static bool slice_is(struct http_slice s, const char *name)
{
    return s.len == strlen(name) && strncasecmp(s.p, name, s.len) == 0;
}

/* The value of the application's field `name` (its first), or false. */
static bool raw_head_field(const struct conn_fcgi *f, const char *name, struct http_slice *v)
{
    size_t at = 0;
    struct http_slice n;
    while (raw_head_line(f, &at, &n, v))
        if (slice_is(n, name))
            return true;
    return false;
}

/* The application named X-Accel-Redirect: the saved request is answered where it points
 * (http_source_accel), with the fields of the application's head (its first
 * HTTP_MAX_HEADERS). */
static void answer_accel(struct conn_fcgi *f, struct response *resp, struct http_source_page *pg)
{
    struct http_header fields[HTTP_MAX_HEADERS];
    unsigned n = 0;
    size_t at = 0;
    struct http_slice to = {NULL, 0};
    while (n < HTTP_MAX_HEADERS && raw_head_line(f, &at, &fields[n].name, &fields[n].value)) {
        if (!to.p && slice_is(fields[n].name, "X-Accel-Redirect"))
            to = fields[n].value;
        n++;
    }
    if (!http_source_accel(&f->src, resp, pg, to, fields, n))
        fcgi_log(f, LOG_LEVEL_ERROR,
                 "fastcgi: %s: X-Accel-Redirect to \"%.*s\", a streamed answer: not followed",
                 server_name(f), (int)to.len, to.p);
}

static void fcgi_finish_after(struct conn_fcgi *f, int error_status, const char *failure,
                              struct response *tail)
{
    struct http_source_page page;
    struct http_source *s = &f->src;
    struct http_piece pc;
    struct response own;
    struct response *resp = tail ? tail : &own;
    if (!tail)
        resp_init(&own);
    try_end(f, 0);
    /* answered before the body's end: neither connection goes on (the rest of the body is
     * drained by the linger) */
    bool unread = body_unread(f);
    f->keep_up = f->keep_up && !failure && !error_status && !unread;
    if (!f->keep_up)
        up_close(f); /* the application's part is over: its connection goes now */
    bool keep_alive = s->keep_alive && !unread;
    if (!s->head_sent && f->accel) {
        answer_accel(f, resp, &page);
        resp->head_only = s->head_only;
        resp->keep_alive = keep_alive;
        resp_finish(resp, s->http10);
        s->sent = resp->head_only ? 0 : resp->content_length;
    } else if (!s->head_sent) {
        s->status = error_status ? error_status : 502;
        if (!f->intercepted) { /* an intercepted error is the application's, in resp */
            fcgi_log(f, LOG_LEVEL_ERROR, "fastcgi: %s: answered %d: %s", server_name(f),
                     s->status, failure ? failure : "no answer");
            resp_error(resp, s->status);
        }
        answer_error(f, resp, &page);
        resp->head_only = s->head_only;
        resp->keep_alive = keep_alive;
        resp_finish(resp, s->http10);
        s->sent = resp->head_only ? 0 : resp->content_length;
    } else {
        resp->status = s->status;
        if (!failure && f->length_known && f->left > 0)
            failure = "the application sent less than its Content-Length";
        if (!failure && http_source_body_end(s, resp, &pc) < 0) {
            resp_body_clear(resp);
            failure = "the body filter failed at its end";
        }
        if (failure) {
            fcgi_log(f, LOG_LEVEL_ERROR, "fastcgi: %s: the response was cut: %s",
                     server_name(f), failure);
            keep_alive = false;
        }
    }
    f->failed = failure && error_status != 0;
    resp->no_length = false;
    http_source_end(s, resp, keep_alive);
}

static void fcgi_finish(struct conn_fcgi *f, int error_status, const char *failure)
{
    fcgi_finish_after(f, error_status, failure, NULL);
}

/* --- attempts ---------------------------------------------------------------------------- */

static void fcgi_step(struct conn_fcgi *f);

static bool idempotent(enum http_method m)
{
    return m == HTTP_METHOD_GET || m == HTTP_METHOD_HEAD || m == HTTP_METHOD_PUT ||
           m == HTTP_METHOD_DELETE || m == HTTP_METHOD_OPTIONS || m == HTTP_METHOD_TRACE;
}

static bool up_connect(struct conn_fcgi *f)
{
    const struct upstream_server *s = f->server;
    int fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    if (s->addr.ss_family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    f->h.fd = fd;
    f->registered = false;
    f->idle.born_ms = clock_now_ms();
    f->idle.requests = 0;
    if (connect(fd, (const struct sockaddr *)&s->addr, s->addr_len) == 0) {
        f->phase = PHASE_SEND;
        return true;
    }
    /* A unix socket's EAGAIN is a full backlog, and no connection: the application is
     * overloaded, and nginx answers 502 at once. */
    if (errno == EINPROGRESS) {
        f->phase = PHASE_CONNECT;
        return true;
    }
    int err = errno;
    up_close(f);
    errno = err;
    return false;
}

static void attempt_failed(struct conn_fcgi *f, enum fcgi_failure why, const char *what);

static void attempt_begin(struct conn_fcgi *f, struct upstream_server *s)
{
    f->server = s;
    f->attempt_us = clock_now_us();
    if (!f->fresh_only || !f->try_now) /* (a kept connection's retry is the same try) */
        try_begin(f, s->text, f->attempt_us);
    f->attempts++;
    f->sent_any = f->got_any = false;
    f->ended = false;
    f->keep_up = false;
    f->reused = false;
    f->req_off = 0;
    f->head_len = 0;
    f->in_off = f->in_len = 0;
    f->up_off = f->up_len = 0;
    upstream_store_wait_end(&f->both); /* (a streamed body's wait on the last attempt's) */
    fcgi_reader_init(&f->rd, FCGI_REQUEST_ID);
    struct upstream_idle *idle;
    bool stale = false;
    if (f->h.fd >= 0) {
        /* f is a kept connection to s itself (fcgi_start took it): its socket stays where
         * it is registered, and the next wait is a reactivation. */
        stale = clock_now_ms() - f->idle.since_ms > (int64_t)f->up->keepalive_timeout_ms;
    } else if (!f->fresh_only && f->fp->keep_conn &&
               (idle = upstream_idle_take(f->up, s, f->src.c->h.group))) {
        /* A kept connection to s: its socket is this attempt's, the rest of it goes. */
        struct conn_fcgi *kept = of_idle(idle);
        if (kept->registered)
            lf_group_remove(&kept->h, false);
        kept->registered = false;
        f->h.fd = kept->h.fd;
        f->registered = false;
        stale = clock_now_ms() - kept->idle.since_ms > (int64_t)f->up->keepalive_timeout_ms;
        f->idle.born_ms = kept->idle.born_ms;
        f->idle.requests = kept->idle.requests;
        kept->h.fd = -1;
        fcgi_release(kept);
    }
    f->fresh_only = false;
    /* idle past the block's keepalive_timeout (the tick had not closed it yet): not used */
    if (f->h.fd >= 0 && !stale && idle_alive(f)) {
        f->reused = true;
        f->phase = PHASE_SEND;
    } else {
        up_close(f);
        if (!up_connect(f)) {
            attempt_failed(f, FAIL_ERROR, strerror(errno));
            return;
        }
    }
    conn_set_wake_fd(f->src.c, f->h.fd, true);
    if (f->phase == PHASE_SEND)
        try_connected(f);
    const struct proxy_params *p = &f->fp->up;
    set_deadline(f, clock_now_ms() + (f->phase == PHASE_CONNECT ? p->connect_ms : p->send_ms));
    fcgi_step(f);
}

/* The attempt failed before an answer could be relayed: the next server if allowed, else
 * 502 or 504. */
static void attempt_failed(struct conn_fcgi *f, enum fcgi_failure why, const char *what)
{
    int64_t now = clock_now_ms();
    const struct proxy_params *p = &f->fp->up;
    up_close(f);
    /* not once some of a streamed body was taken from the client (nginx: not once it began
     * to be sent): it cannot be read again */
    bool may_resend = !f->body_taken && (!f->sent_any || idempotent(f->method) ||
                                         (p->next_upstream & PROXY_NEXT_NON_IDEMPOTENT));
    if (why == FAIL_STALE) { /* the kept connection was closed: not the server's fault */
        if (may_resend) {
            f->fresh_only = true;
            f->attempts--;
            attempt_begin(f, f->server);
            return;
        }
        why = FAIL_ERROR;
    }
    try_end(f, why == FAIL_TIMEOUT ? 504 : 502);
    if (f->server) {
        fcgi_log(f, LOG_LEVEL_ERROR, "fastcgi: %s: %s", f->server->text, what);
        upstream_done(f->up, f->server, true, now);
        f->tried |= 1ull << (f->server - f->up->servers);
        f->server = NULL;
    }
    unsigned bit = why == FAIL_TIMEOUT ? PROXY_NEXT_TIMEOUT
                   : why == FAIL_INVALID ? PROXY_NEXT_INVALID : PROXY_NEXT_ERROR;
    if ((p->next_upstream & bit) && may_resend && (p->tries == 0 || f->attempts < p->tries)) {
        struct upstream_server *s = upstream_pick(f->up, now, f->tried, NULL);
        if (s) {
            attempt_begin(f, s);
            return;
        }
    }
    fcgi_finish(f, why == FAIL_TIMEOUT ? 504 : 502, what);
}

/* --- names: fastcgi_pass with variables ------------------------------------------------
 *
 * A value that is an address, or a host name the location's `resolver` answers for, has a
 * set of its own (upstream_lookup.h), as the proxy's: a request whose answer is not cached
 * waits on a descriptor the answer makes readable, its deadline resolver_timeout, through
 * the sweep. */

/* The lookup's answer: the request's set (nginx's round-robin, nothing kept), its first
 * attempt; or 502, why in the log. */
static void look_done(struct conn_fcgi *f, enum upstream_lookup_result rc, const char *why)
{
    if (rc == UPSTREAM_LOOKUP_FAILED) {
        fcgi_finish(f, 502, why);
        return;
    }
    f->up = f->look.set;
    struct upstream_server *s = upstream_pick(f->up, clock_now_ms(), 0, NULL);
    if (!s) {
        fcgi_finish(f, 502, "no live upstreams");
        return;
    }
    attempt_begin(f, s);
}

/* The request's target is the host f->look names: its addresses now, or a wait for them. */
static void resolve_begin(struct conn_fcgi *f)
{
    const struct proxy_params *p = &f->fp->up;
    struct conn *c = f->src.c;
    char why[400];
    enum upstream_lookup_result rc = upstream_lookup_begin(&f->look, p->resolver, c->h.group,
                                                           why, sizeof(why));
    if (rc != UPSTREAM_LOOKUP_WAIT) {
        look_done(f, rc, why);
        return;
    }
    f->h.fd = f->look.rwait.fd;
    f->registered = false;
    f->phase = PHASE_RESOLVE;
    conn_set_wake_fd(c, f->h.fd, true);
    set_deadline(f, clock_now_ms() + p->resolver_timeout_ms);
    fcgi_wait(f, EPOLLIN, false);
}

/* Send what is left of the request's records. 1: all sent; 0: wait for EPOLLOUT; -1. */
static int send_request(struct conn_fcgi *f)
{
    while (f->req_off < f->req_len) {
        ssize_t w = send(f->h.fd, f->req + f->req_off, f->req_len - f->req_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno == EAGAIN ? 0 : -1;
        f->sent_any = true;
        f->req_off += (size_t)w;
        if (f->try_now)
            f->try_now->bytes_sent += (uint64_t)w;
        set_deadline(f, clock_now_ms() + f->fp->up.send_ms);
    }
    return 1;
}

/* --- the answer -------------------------------------------------------------------------- */

/* STDERR's bytes, to the error log: printable ASCII as it is, the rest as \xNN. */
static void log_stderr(struct conn_fcgi *f, const uint8_t *p, size_t n)
{
    char text[1024];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < sizeof(text); i++) {
        unsigned char ch = p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '"')
            text[o++] = (char)ch;
        else
            o += (size_t)snprintf(text + o, sizeof(text) - o, "\\x%02X", ch);
    }
    text[o] = '\0';
    fcgi_log(f, LOG_LEVEL_ERROR, "fastcgi: %s: FastCGI sent in stderr: \"%s\"%s",
             server_name(f), text, o + 5 >= sizeof(text) ? "..." : "");
}

/* Does a piece of STDERR, read before the head, hold one of fastcgi_catch_stderr's strings?
 * As nginx's: searched in the piece as read, up to a NUL, less its trailing line ends,
 * spaces and dots; an empty string is never found. */
static bool stderr_caught(const struct conn_fcgi *f, const uint8_t *p, size_t n)
{
    if (f->fp->n_catch_stderr == 0 || f->src.head_sent)
        return false;
    const uint8_t *nul = memchr(p, 0, n);
    if (nul)
        n = (size_t)(nul - p);
    while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == '.' || p[n - 1] == ' '))
        n--;
    for (unsigned i = 0; i < f->fp->n_catch_stderr; i++) {
        const char *want = f->fp->catch_stderr[i];
        size_t len = strlen(want);
        if (len > 0 && memmem(p, n, want, len))
            return true;
    }
    return false;
}

/* --- buffering ---------------------------------------------------------------------------
 *
 * fastcgi_buffering on (uwsgi_, scgi_ alike), as the proxy's proxy_buffering
 * (upstream_store.h): while the client takes the answer as fast as it comes, it goes to the
 * client as it is read, as without. Once a part of it is parked on the client's connection,
 * the application is read on into the store instead of waiting for the client, both
 * sockets waited on at once (both_wait); once the answer is read whole, the application's
 * connection is let go of (kept in the idle list by a spare state, when it may be) while
 * the client is served from the store alone. So a slow client does not hold a worker of
 * the application (a PHP-FPM child) for the whole of its send. A full store waits for the
 * client, as streaming does. An answer read whole while nothing is parked ends as without
 * buffering. */

/* Does this answer go through the store? fastcgi_buffering, unless the application's
 * X-Accel-Buffering says otherwise (nginx's rule: "yes" or "no", any case). */
static bool wants_buffering(const struct conn_fcgi *f)
{
    struct http_slice v;
    if (raw_head_field(f, "X-Accel-Buffering", &v)) {
        if (v.len == 3 && strncasecmp(v.p, "yes", 3) == 0)
            return true;
        if (v.len == 2 && strncasecmp(v.p, "no", 2) == 0)
            return false;
    }
    return f->fp->up.buffering;
}

/* Wait for the client to take what is parked on its connection; the last act of the
 * event. */
static void client_wait(struct conn *c)
{
    c->close_after_send = false;
    conn_wait(c, CONN_SEND, EPOLLOUT, clock_now_ms() + hc(c)->limits->send_timeout_ms);
}

static void both_event(struct lf_handle *h, uint32_t events);

/* Wait for the application's bytes and for room at the client at once (a part is parked
 * while the application still sends); the last act of the event. Without a set to be had,
 * the application alone is waited for, and the client written to when its bytes come. */
static void both_wait(struct conn_fcgi *f)
{
    if (upstream_store_wait_both(&f->both, f->h.fd, f->src.c, f->deadline_ms, both_event) == 0)
        fcgi_wait(f, EPOLLIN, true);
}

/* The whole answer is read: the application's connection goes, kept (by a spare state, in
 * the upstream's idle list, for the next request) when it may be, else closed, while f
 * goes on serving the client from the store. */
static void up_let_go(struct conn_fcgi *f)
{
    struct conn *c = f->src.c;
    f->up_ended = true;
    try_end(f, 0);
    f->try_now = NULL; /* $upstream_response_time is the application's, not the client's */
    conn_set_wake_fd(c, -1, false);
    if (f->h.fd < 0)
        return;
    upstream_store_wait_drop(&f->both, f->h.fd);
    struct conn_fcgi *spare = f->keep_up && f->server ? fcgi_state() : NULL;
    if (!spare) {
        up_close(f);
        return;
    }
    if (f->registered)
        lf_group_remove(&f->h, false);
    f->registered = false;
    spare->h.fd = f->h.fd;
    spare->h.on_event = idle_event;
    spare->registered = spare->watched = false;
    spare->up = f->up;
    spare->server = f->server;
    spare->fp = f->fp;
    spare->attempt_done = true; /* (answered: counted) */
    spare->idle.born_ms = f->idle.born_ms; /* (keepalive_time, keepalive_requests) */
    spare->idle.requests = f->idle.requests;
    spare->src.c = c;
    f->h.fd = -1;
    f->server = NULL;
    f->keep_up = false;
    fcgi_detach(spare, true, false);
}

/* The answer cannot be finished: what came of it (tail, if not NULL) goes, and it ends as
 * fcgi_finish_after says, unless a part of it still waits for the client (parked, or in the
 * store): then the connection is cut at once. */
static void body_cut_after(struct conn_fcgi *f, const char *why, struct response *tail)
{
    if (!f->src.c->out && upstream_store_empty(&f->store)) {
        fcgi_finish_after(f, 0, why, tail);
        return;
    }
    fcgi_log(f, LOG_LEVEL_ERROR, "fastcgi: %s: the response was cut: %s", server_name(f), why);
    conn_close(f->src.c);
}

static void body_cut(struct conn_fcgi *f, const char *why)
{
    body_cut_after(f, why, NULL);
}

/* The head is whole in head[]: make the client's head in resp, and put what came after it
 * in out (its length in *out_len). Returns 1 when done, 0 to wait for more of it, -1 after
 * the attempt failed. */
static int take_head(struct conn_fcgi *f, struct response *resp, char *out, size_t *out_len)
{
    const struct fastcgi_params *fp = f->fp;
    resp_init(resp);
    resp->head_only = f->src.head_only;
    int used = fp->ops->head(fp->up.conf, f->src.has_saved ? &f->src.saved : NULL, f->head,
                             f->head_len, resp);
    if (used == 0) {
        if (f->head_len == FCGI_HEAD_MAX) {
            attempt_failed(f, FAIL_INVALID, "upstream sent too big header");
            return -1;
        }
        return 0;
    }
    if (used < 0 || resp_failed(resp)) {
        attempt_failed(f, FAIL_INVALID, "upstream sent invalid header");
        return -1;
    }
    upstream_answered(f->server, clock_now_us() - f->attempt_us);
    if (f->try_now) {
        f->try_now->status = resp->status;
        f->try_now->header_us = clock_now_us() - f->try_now->start_us;
    }
    struct http_slice to;
    if (f->src.has_saved && raw_head_field(f, "X-Accel-Redirect", &to) && to.len > 0) {
        /* nginx's internal redirect: the application's body is not read, its connection
         * not kept; the answer is the one the field names */
        f->keep_up = false;
        f->accel = true;
        fcgi_finish_after(f, 0, NULL, resp);
        return -1;
    }
    if (fp->up.intercept_errors && resp->status >= 300 && f->src.has_saved &&
        module_chain_has_error_page(&f->src.saved, resp->status)) {
        /* fastcgi_intercept_errors: the block's error_page answers; the application's
         * body is not read, its connection not kept */
        int status = resp->status;
        resp_init(resp);
        resp_error(resp, status);
        f->keep_up = false;
        f->intercepted = true;
        fcgi_finish_after(f, status, NULL, resp);
        return -1;
    }
    http_source_filter_head(&f->src, resp, &fp->up);
    if (resp_failed(resp)) {
        fcgi_finish(f, 502, "its head, with the fields added here, is too large");
        return -1;
    }
    f->src.status = resp->status;
    resp->keep_alive = f->src.keep_alive;
    bool coded = resp->body_filter && !resp->no_length;
    if (!http_source_start_filter(&f->src, resp)) {
        fcgi_finish(f, 500, "out of memory for compression");
        return -1;
    }
    f->length_known = false;
    if (resp->status == 204 || resp->status == 304) {
        resp->no_length = true;
        f->src.head_only = true; /* a body the application sent all the same is dropped */
    } else if (f->src.head_only) {
        /* HEAD: the head as it came, its Content-Length if it gave one (nginx's) */
        resp->no_length = !resp->length_known || coded;
    } else if (resp->length_known && !coded && !f->src.trailers_render) {
        f->length_known = true;
        f->left = resp->content_length;
    } else if (f->src.http10 || f->src.no_chunked) {
        resp->keep_alive = f->src.keep_alive = false; /* the body ends with the connection */
        resp->no_length = true;
    } else {
        resp->chunked = f->src.chunked = true;
    }
    resp->keep_alive_header_s = hc(f->src.c)->limits->keepalive_header_s;
    resp->say_keep_alive = hc(f->src.c)->limits->say_keep_alive;
    resp_finish(resp, f->src.http10);
    f->src.head_sent = true;
    f->buffering = !f->src.head_only && wants_buffering(f);
    *out_len = f->head_len - (size_t)used;
    memcpy(out, f->head + used, *out_len);
    return 1;
}

/* uwsgi's and SCGI's answers are not framed: what came is the answer's next bytes. */
static enum fcgi_event raw_read(struct conn_fcgi *f, size_t avail, size_t *used,
                                const uint8_t **data, size_t *len)
{
    *data = (const uint8_t *)f->in + f->in_off;
    *used = *len = avail;
    return FCGI_EV_STDOUT;
}

/* Buffering: send what waits for the client (parked, then the store), and say how much of
 * the application's answer to take now: *want bytes (0: the event is over), *parked when a
 * part still waits for the client. */
static void buffered_turn(struct conn_fcgi *f, size_t *want, bool *parked)
{
    struct conn *c = f->src.c;
    *want = 0;
    enum send_result r = c->out ? conn_send_pending(c) : SEND_DONE;
    while (r == SEND_DONE && !upstream_store_empty(&f->store))
        r = upstream_store_flush(&f->store, c);
    if (r == SEND_ERROR) {
        conn_close(c);
        return;
    }
    *parked = c->out != NULL;
    if (f->up_ended && !*parked) {
        fcgi_finish(f, 0, NULL); /* (the filter's last bytes, the last chunk) */
        return;
    }
    size_t room = f->up_ended ? 0
                  : *parked ? upstream_store_room(&f->store, &f->src, &f->fp->up, FCGI_RELAY)
                            : FCGI_RELAY;
    if (room == 0) { /* the client takes some first: its wait's deadline is its own */
        client_wait(c);
        return;
    }
    *want = room;
}

/* Decode records from in[] and read the socket, sending the answer as it comes (or into
 * the store, buffering), until the event must wait or is handed on. */
static void relay(struct conn_fcgi *f)
{
    for (;;) {
        size_t want = FCGI_RELAY; /* at most: what the decoded bytes may be */
        bool parked = false;
        if (f->buffering) {
            buffered_turn(f, &want, &parked);
            if (want == 0)
                return;
        }
        if (f->in_off == f->in_len && !f->ended) {
            ssize_t n = recv(f->h.fd, f->in, want, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN) {
                if (parked)
                    both_wait(f);
                else
                    fcgi_wait(f, EPOLLIN, true);
                return;
            }
            if (n == 0 && f->fp->wire) {
                f->ended = true; /* uwsgi, SCGI: the answer ends with the connection */
                continue;
            }
            if (n <= 0) {
                const char *why = n < 0 ? strerror(errno)
                                        : "upstream prematurely closed FastCGI stdout";
                if (f->src.head_sent)
                    body_cut(f, why);
                else
                    attempt_failed(f, f->reused && !f->got_any ? FAIL_STALE : FAIL_ERROR, why);
                return;
            }
            f->got_any = true;
            f->in_off = 0;
            f->in_len = (size_t)n;
            if (f->try_now)
                f->try_now->bytes_received += (uint64_t)n;
            set_deadline(f, clock_now_ms() + f->fp->up.read_ms);
        }
        char out[FCGI_RELAY];
        size_t out_len = 0;
        struct response resp;
        bool made_head = false;
        const char *cut = NULL; /* a bad record after the head */
        /* on past the head: what came with it (the rest of the answer, its END_REQUEST)
         * goes out with it, in one send */
        while (f->in_off < f->in_len && !f->ended && out_len < want) {
            size_t room = want - out_len, used, len;
            size_t avail = f->in_len - f->in_off;
            const uint8_t *data;
            enum fcgi_event ev = f->fp->wire ? raw_read(f, avail < room ? avail : room,
                                                        &used, &data, &len)
                                             : fcgi_read(&f->rd, (const uint8_t *)f->in +
                                                         f->in_off, avail < room ? avail : room,
                                                         &used, &data, &len);
            f->in_off += used;
            if (ev == FCGI_EV_ERROR) {
                if (!f->src.head_sent) {
                    attempt_failed(f, FAIL_INVALID, f->rd.why);
                    return;
                }
                cut = f->rd.why; /* what came before it goes first */
                break;
            }
            if (ev == FCGI_EV_STDERR) {
                log_stderr(f, data, len);
                if (stderr_caught(f, data, len)) {
                    attempt_failed(f, FAIL_INVALID, "the application's stderr holds a "
                                                    "fastcgi_catch_stderr string");
                    return;
                }
            } else if (ev == FCGI_EV_END) {
                f->ended = true;
                /* kept only when nothing came after END_REQUEST */
                f->keep_up = f->fp->keep_conn && f->up->keepalive > 0 &&
                             f->in_off == f->in_len;
                if (f->rd.protocol_status != FCGI_REQUEST_COMPLETE && !f->src.head_sent) {
                    attempt_failed(f, FAIL_ERROR, "the application refused the request");
                    return;
                }
            } else if (ev == FCGI_EV_STDOUT && !f->src.head_sent) {
                if (len > FCGI_HEAD_MAX - f->head_len) {
                    attempt_failed(f, FAIL_INVALID, "upstream sent too big header");
                    return;
                }
                memcpy(f->head + f->head_len, data, len);
                f->head_len += len;
                int r = take_head(f, &resp, out, &out_len);
                if (r < 0)
                    return;
                made_head = r > 0;
            } else if (ev == FCGI_EV_STDOUT) {
                memcpy(out + out_len, data, len);
                out_len += len;
            }
        }
        if (!f->src.head_sent) {
            if (f->ended) {
                attempt_failed(f, FAIL_ERROR,
                               f->fp->wire ? "upstream prematurely closed connection while "
                                             "reading response header from upstream"
                                           : "upstream prematurely closed FastCGI stdout");
                return;
            }
            continue;
        }
        if (!made_head)
            resp_init(&resp);
        if (f->length_known) { /* no more than it said: the rest is dropped */
            if (out_len > f->left)
                out_len = (size_t)f->left;
            f->left -= out_len;
            if (f->left == 0 && f->fp->wire)
                f->ended = true; /* all it said it would send came: no wait for the close */
        }
        struct http_piece pc;
        if (out_len > 0 && http_source_body(&f->src, &resp, out, out_len, &pc) < 0) {
            body_cut(f, "the body filter failed");
            return;
        }
        if (cut) {
            body_cut_after(f, cut, &resp);
            return;
        }
        if (f->ended) {
            if (f->server && !f->attempt_done)
                upstream_done(f->up, f->server, false, clock_now_ms());
            f->attempt_done = true;
            if (!parked) {
                fcgi_finish_after(f, 0, NULL, &resp);
                return;
            }
            /* buffering, a part parked: the last of the answer joins the store, and the
             * application is let go of now */
            if (resp.n_segs && upstream_store_put(&f->store, &resp) < 0) {
                body_cut(f, "its temporary file cannot be written");
                return;
            }
            up_let_go(f);
            continue;
        }
        if (f->buffering) { /* the client is not waited for here */
            if ((made_head || resp.n_segs) && !parked &&
                http_send_response(f->src.c, &resp, true) == SEND_ERROR) {
                conn_close(f->src.c);
                return;
            }
            if (resp.n_segs && parked && upstream_store_put(&f->store, &resp) < 0) {
                body_cut(f, "its temporary file cannot be written");
                return;
            }
            continue;
        }
        enum send_result r = made_head || resp.n_segs ? http_source_send(&f->src, &resp)
                                                      : SEND_DONE;
        if (r == SEND_ERROR) {
            conn_close(f->src.c);
            return;
        }
        if (r == SEND_PARKED)
            return;
    }
}

/* --- the request's body, streamed ---------------------------------------------------------
 *
 * *_request_buffering off. Once the parameters went (PHASE_SEND), PHASE_UPLOAD relays the
 * client's body as it arrives (http_body_stream.h) through upload[], a fixed buffer of the
 * state's: a read from the client, framed as an FCGI_STDIN record (uwsgi, SCGI: as it is,
 * their head said CONTENT_LENGTH), then sent, and no read before it all went, so that an
 * application that does not read stops the client being read. A chunked body (FastCGI's
 * alone) is decoded. The body's end is the empty FCGI_STDIN record.
 *
 * While the client is waited for, the application is too: both sockets are one set of their
 * own (both), waited on until client_body_timeout; while the application is (it takes no
 * more), its own handle, for room and for its bytes, until the send timeout. What it sends
 * meanwhile: its STDERR records are logged and the body goes on (PHP sends its warnings so);
 * anything else (its answer, a close; for uwsgi and SCGI any byte) ends the relay, as
 * nginx's ends once the answer's head went: the answer is read and relayed as any, and the
 * client's connection closes after it (the rest of its body is drained by the linger), the
 * application's too. */

/* A read of the client's: room before it for its record's header, after it for the last. */
#define UPLOAD_ROOM (FCGI_RELAY - 2 * FCGI_HEADER_LEN)
static_assert(UPLOAD_ROOM <= FCGI_CONTENT_MAX, "a read of the body is one FCGI_STDIN record");

static void both_event(struct lf_handle *h, uint32_t events);

/* The client's body cannot go on (a chunked one too large or malformed, a timeout): the
 * client is answered `status`, and its connection closes; the attempt is not counted as a
 * failure of the server's. */
static void upload_refused(struct conn_fcgi *f, int status, const char *why)
{
    upstream_store_wait_end(&f->both);
    up_close(f);
    if (f->server && !f->attempt_done)
        upstream_done(f->up, f->server, false, clock_now_ms());
    f->attempt_done = true;
    try_end(f, status);
    fcgi_finish(f, status, why);
}

/* Has the application said anything but STDERR (logged here) while the body goes? Its
 * answer, or a close: then the relay is over, and relay() reads on from in[in_off]. */
static bool up_spoke(struct conn_fcgi *f)
{
    if (f->fp->wire) {
        char b;
        ssize_t n = recv(f->h.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }
    for (;;) {
        if (f->in_off == f->in_len) {
            ssize_t n = recv(f->h.fd, f->in, FCGI_RELAY, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return false;
            if (n <= 0)
                return true; /* (relay() finds the close again) */
            f->got_any = true;
            f->in_off = 0;
            f->in_len = (size_t)n;
            if (f->try_now)
                f->try_now->bytes_received += (uint64_t)n;
        }
        /* Read on a copy of the reader: a record that is not STDERR is left, whole, to
         * relay(). */
        struct fcgi_reader probe = f->rd;
        size_t used, len;
        const uint8_t *data;
        enum fcgi_event ev = fcgi_read(&probe, (const uint8_t *)f->in + f->in_off,
                                       f->in_len - f->in_off, &used, &data, &len);
        if (ev != FCGI_EV_STDERR && ev != FCGI_EV_NEED)
            return true;
        if (ev == FCGI_EV_STDERR && stderr_caught(f, data, len))
            return true; /* (relay() reads it again, logs it and ends the attempt) */
        f->rd = probe;
        f->in_off += used;
        if (ev == FCGI_EV_STDERR)
            log_stderr(f, data, len);
    }
}

/* n raw body bytes read at data (upload + FCGI_HEADER_LEN): made what goes to the
 * application, in upload[up_off, up_len). false when the body is refused (answered) or the
 * connection closed. */
static bool upload_frame(struct conn_fcgi *f, char *data, size_t n, bool from_in)
{
    struct conn *c = f->src.c;
    size_t out, used;
    enum http_body_take r = http_body_stream_take(&f->src, data, n, from_in, &out, &used);
    if (r == HTTP_BODY_INVALID || r == HTTP_BODY_TOO_LARGE) {
        f->src.saved.request_length += n;
        upload_refused(f, r == HTTP_BODY_INVALID ? 400 : 413,
                       r == HTTP_BODY_INVALID ? "client sent invalid chunked body"
                                              : "client intended to send too large chunked "
                                                "body");
        return false;
    }
    if (r == HTTP_BODY_NO_ROOM) {
        conn_close(c);
        return false;
    }
    f->src.saved.request_length += used; /* $request_length: as the client sent it */
    f->up_off = f->up_len = FCGI_HEADER_LEN;
    if (f->fp->wire) {
        f->up_len += out;
        return true;
    }
    if (out > 0) {
        fcgi_header((uint8_t *)f->upload, FCGI_STDIN, FCGI_REQUEST_ID, (uint16_t)out, 0);
        f->up_off = 0;
        f->up_len += out;
    }
    if (hc(c)->body_mode == REQ_BODY_NONE) { /* the stream's end */
        fcgi_header((uint8_t *)f->upload + f->up_len, FCGI_STDIN, FCGI_REQUEST_ID, 0, 0);
        f->up_len += FCGI_HEADER_LEN;
    }
    return true;
}

/* Wait for the client's bytes, and for the application's: the last act of the event. */
static void upload_wait_client(struct conn_fcgi *f)
{
    struct conn *c = f->src.c;
    f->upload_waits_client = true;
    set_deadline(f, clock_now_ms() + hc(c)->limits->client_body_timeout_ms);
    http_body_stream_wait(&f->both, f->h.fd, c, f->deadline_ms, both_event);
}

/* The relay is over (the body went whole, or the application answered first): the answer
 * is read next. */
static void upload_end(struct conn_fcgi *f)
{
    upstream_store_wait_end(&f->both); /* (both_wait makes a set of its own) */
    f->upload_waits_client = false;
    f->up_off = f->up_len = 0;
    f->phase = PHASE_ANSWER;
    set_deadline(f, clock_now_ms() + f->fp->up.read_ms);
}

/* Relay the body as far as both sides allow. true: go on (to the answer); false: the event
 * is over (waiting, answered or closed). */
static bool upload(struct conn_fcgi *f)
{
    struct conn *c = f->src.c;
    if (up_spoke(f)) {
        upload_end(f);
        return true;
    }
    for (;;) {
        if (f->up_off < f->up_len) {
            ssize_t w = send(f->h.fd, f->upload + f->up_off, f->up_len - f->up_off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                f->upload_waits_client = false;
                fcgi_wait(f, EPOLLOUT | EPOLLIN, true);
                return false;
            }
            if (w < 0) { /* it closed: what it said before, if anything, is the answer */
                upload_end(f);
                return true;
            }
            f->sent_any = true;
            if (f->try_now)
                f->try_now->bytes_sent += (uint64_t)w;
            f->up_off += (size_t)w;
            set_deadline(f, clock_now_ms() + f->fp->up.send_ms); /* between two writes */
            continue;
        }
        if (hc(c)->body_mode == REQ_BODY_NONE) {
            upload_end(f);
            return true;
        }
        bool from_in;
        char *data = f->upload + FCGI_HEADER_LEN;
        ssize_t n = http_body_stream_read(c, data, UPLOAD_ROOM, &from_in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            upload_wait_client(f);
            return false;
        }
        if (n <= 0) { /* nginx: "client prematurely closed connection" */
            f->src.status = 400;
            fcgi_log(f, LOG_LEVEL_ERROR,
                     "fastcgi: %s: the client closed its connection inside the body",
                     server_name(f));
            conn_close(c);
            return false;
        }
        f->body_taken = true;
        if (!upload_frame(f, data, (size_t)n, from_in))
            return false;
    }
}

/* --- the event --------------------------------------------------------------------------- */

static void fcgi_step(struct conn_fcgi *f)
{
    for (;;) {
        switch (f->phase) {
        case PHASE_RESOLVE: {
            char why[400];
            enum upstream_lookup_result rc = upstream_lookup_take(&f->look, f->fp->up.resolver,
                                                                  why, sizeof(why));
            if (rc == UPSTREAM_LOOKUP_WAIT) {
                fcgi_wait(f, EPOLLIN, true); /* (not the answer: wait on) */
                return;
            }
            up_close(f);
            look_done(f, rc, why);
            return;
        }
        case PHASE_CONNECT: {
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(f->h.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            if (err == 0) {
                struct sockaddr_storage peer;
                socklen_t pl = sizeof(peer);
                if (getpeername(f->h.fd, (struct sockaddr *)&peer, &pl) == 0) {
                    f->phase = PHASE_SEND;
                    try_connected(f);
                    set_deadline(f, clock_now_ms() + f->fp->up.send_ms);
                    continue;
                }
                if (errno != ENOTCONN) {
                    err = errno;
                } else {
                    fcgi_wait(f, EPOLLOUT, true);
                    return;
                }
            }
            attempt_failed(f, FAIL_ERROR, strerror(err));
            return;
        }
        case PHASE_SEND: {
            int r = send_request(f);
            if (r < 0) {
                attempt_failed(f, f->reused && !f->sent_any ? FAIL_STALE : FAIL_ERROR,
                               strerror(errno));
                return;
            }
            if (r == 0) {
                fcgi_wait(f, EPOLLOUT, true);
                return;
            }
            if (body_unread(f)) {
                f->phase = PHASE_UPLOAD;
                continue;
            }
            f->phase = PHASE_ANSWER;
            set_deadline(f, clock_now_ms() + f->fp->up.read_ms);
            fcgi_wait(f, EPOLLIN, true);
            return;
        }
        case PHASE_UPLOAD:
            if (!upload(f))
                return;
            continue;
        case PHASE_ANSWER:
            relay(f);
            return;
        }
    }
}

static void fcgi_timeout(struct conn_fcgi *f)
{
    switch (f->phase) {
    case PHASE_RESOLVE: {
        char why[400];
        upstream_lookup_cancel(&f->look, f->fp->up.resolver, why, sizeof(why));
        up_close(f);
        fcgi_finish(f, 502, why);
        return;
    }
    case PHASE_CONNECT:
        attempt_failed(f, FAIL_TIMEOUT, "connect timed out");
        return;
    case PHASE_SEND:
        attempt_failed(f, FAIL_TIMEOUT, "send timed out");
        return;
    case PHASE_UPLOAD:
        if (f->upload_waits_client)
            upload_refused(f, 408, "client timed out while sending the request body");
        else
            attempt_failed(f, FAIL_TIMEOUT, "send timed out");
        return;
    case PHASE_ANSWER:
        if (f->src.head_sent)
            body_cut(f, "read timed out");
        else
            attempt_failed(f, FAIL_TIMEOUT, "upstream timed out (no answer within "
                                            "fastcgi_read_timeout)");
        return;
    }
}

/* Did the sweep wake the connection (a deadline passed, or the client has gone)? Then it
 * is handled here. */
static bool swept(struct conn_fcgi *f)
{
    if (!atomic_load_explicit(&f->src.c->woken, memory_order_relaxed))
        return false;
    if (clock_now_ms() >= f->deadline_ms)
        fcgi_timeout(f);
    else
        conn_close(f->src.c); /* the client has gone */
    return true;
}

static void fcgi_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_fcgi *f = of_handle(h);
    if (!swept(f))
        fcgi_step(f);
}

/* An event of both_wait's set (the application's bytes, or room at the client), or of
 * upload_wait_client's (the client's bytes, or the application's). */
static void both_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_fcgi *f = (struct conn_fcgi *)((char *)h - offsetof(struct conn_fcgi, both));
    if (!swept(f))
        fcgi_step(f);
}

static void fcgi_resume(struct http_source *s)
{
    struct conn_fcgi *f = (struct conn_fcgi *)s;
    /* (buffering, the application was not read meanwhile: its read timeout starts again;
     * once it is let go of, the deadline is the client's) */
    if (!f->up_ended)
        set_deadline(f, clock_now_ms() + f->fp->up.read_ms);
    fcgi_step(f);
}

/* --- starting ---------------------------------------------------------------------------- */

/* Records of `type` carrying p[0..n) (none when n is 0), at out: their length. */
static size_t put_stream(char *out, enum fcgi_type type, const char *p, size_t n)
{
    size_t o = 0;
    while (n > 0) {
        size_t take = n < FCGI_CONTENT_MAX ? n : FCGI_CONTENT_MAX;
        fcgi_header((uint8_t *)out + o, type, FCGI_REQUEST_ID, (uint16_t)take, 0);
        memcpy(out + o + FCGI_HEADER_LEN, p, take);
        o += FCGI_HEADER_LEN + take;
        p += take;
        n -= take;
    }
    return o;
}

/* What put_stream writes for n bytes, and the empty record that ends the stream. */
static size_t stream_size(size_t n)
{
    return n + (n + FCGI_CONTENT_MAX - 1) / FCGI_CONTENT_MAX * FCGI_HEADER_LEN +
           FCGI_HEADER_LEN;
}

static const struct http_source_ops fcgi_ops = {
    .resume = fcgi_resume,
    .abort = fcgi_abort,
    .release = fcgi_done,
};

static bool fcgi_answers(const struct response *resp)
{
    return fastcgi_params_of(resp->proxy) != NULL;
}

static void fcgi_start(struct conn *c, struct response *resp, const struct request *r,
                       const char *rest, size_t rest_len, struct http_collect *body_owner)
{
    const struct fastcgi_params *fp = fastcgi_params_of(resp->proxy);
    struct http_shared *shared = http_service_of(c)->shared;
    /* The parameters are encoded first (their length decides the buffer's): into a
     * thread's own room, used only until they are copied, or when they do not fit there,
     * into one as large as they may be. */
    static _Thread_local char room[FCGI_PARAMS_ROOM];
    char *params = room, *big = NULL;
    long plen = fp->ops->params(fp->up.conf, r, params, sizeof(room));
    if (plen < 0 && (big = malloc(FCGI_PARAMS_MAX)) != NULL) {
        params = big;
        plen = fp->ops->params(fp->up.conf, r, params, FCGI_PARAMS_MAX);
    }
    /* A streamed body goes after the parameters, as it arrives (what came with the head
     * is in rest, kept on the connection); else the whole body goes with them. */
    bool streams = r->body_streams;
    const char *body = streams ? NULL : r->body;
    size_t body_len = streams ? 0 : r->body_len;
    size_t req_cap = fp->wire ? fp->wire->size(plen > 0 ? (size_t)plen : 0, body_len)
                              : 16 + stream_size(plen > 0 ? (size_t)plen : 0) +
                                    (streams ? 0 : stream_size(body_len));
    /* The server first: a connection kept to it is the state itself (its registration in
     * the group's set stays), else a state from the free list. */
    struct upstream *u = fp->up.upstream;
    struct fastcgi_target t; /* with variables: an upstream block, or an address */
    int target_rc = fp->up.dynamic ? fp->ops->target(fp->up.conf, r, &t) : 0;
    if (fp->up.dynamic)
        u = target_rc == 0 ? t.upstream : NULL;
    bool to_addr = fp->up.dynamic && target_rc == 0 && !u && t.addr_len > 0;
    bool to_name = fp->up.dynamic && target_rc == 0 && !u && t.addr_len == 0;
    int64_t now = clock_now_ms();
    struct upstream_server *s = plen >= 0 && u ? upstream_pick(u, now, 0, NULL) : NULL;
    struct upstream_idle *idle = s && fp->keep_conn ? upstream_idle_take(u, s, c->h.group) : NULL;
    struct conn_fcgi *f = idle ? of_idle(idle) : NULL;
    if (!http_save_input(c, rest, rest_len)) {
        if (f)
            fcgi_release(f);
        f = NULL;
    } else if (!f) {
        f = fcgi_state();
    }
    if (f && !fcgi_room(f, req_cap, http_source_save_room(r) + http_source_body_room(r),
                        streams ? FCGI_RELAY : 0)) {
        fcgi_release(f);
        f = NULL;
    }
    if (f && to_addr) { /* a set of the one address, not kept (nginx's) */
        char why[64];
        f->look.port = t.port;
        if (upstream_lookup_set(&f->look, &t.addr, &t.addr_len, 1, why, sizeof(why)) < 0) {
            fcgi_release(f);
            f = NULL;
        } else {
            u = f->look.set;
            s = plen >= 0 ? upstream_pick(u, now, 0, NULL) : NULL;
        }
    }
    if (!f) {
        if (s)
            upstream_done(u, s, false, now);
        free(big);
        if (body_owner)
            http_collect_free(shared, body_owner);
        conn_close(c);
        return;
    }
    http_source_init(&f->src, &fcgi_ops, c, resp, r);
    f->h.on_event = fcgi_event;
    f->fp = fp;
    f->up = u;
    f->shared = shared;
    f->method = r->http->method;
    f->tried = 0;
    f->attempts = 0;
    f->server = NULL;
    f->attempt_done = f->failed = false;
    f->keep_up = f->fresh_only = f->reused = false;
    f->intercepted = f->accel = false; /* (a state from the free list had its own) */
    f->buffering = f->up_ended = false;
    f->streams_body = streams;
    f->body_taken = f->upload_waits_client = false;
    f->up_off = f->up_len = 0;
    f->uvars.n = 0;
    f->uvars.head = NULL;
    f->try_now = NULL;
    f->look.resolving = false;
    f->phase = PHASE_CONNECT;
    if (plen >= 0 && fp->wire) {
        f->req_len = fp->wire->frame(fp, f->req, req_cap, params, (size_t)plen, body, body_len,
                                     streams ? r->http->content_length : body_len);
        if (f->req_len == 0)
            plen = -1; /* (uwsgi's parameters are 64 KiB at most) */
    } else if (plen >= 0) {
        bool keep = fp->keep_conn && u && u->keepalive > 0;
        fcgi_begin_request((uint8_t *)f->req, FCGI_REQUEST_ID, keep ? FCGI_KEEP_CONN : 0);
        size_t o = 16;
        o += put_stream(f->req + o, FCGI_PARAMS, params, (size_t)plen);
        fcgi_header((uint8_t *)f->req + o, FCGI_PARAMS, FCGI_REQUEST_ID, 0, 0);
        o += FCGI_HEADER_LEN;
        if (!streams) {
            o += put_stream(f->req + o, FCGI_STDIN, body, body_len);
            fcgi_header((uint8_t *)f->req + o, FCGI_STDIN, FCGI_REQUEST_ID, 0, 0);
            o += FCGI_HEADER_LEN;
        }
        f->req_len = o;
    }
    free(big);
    http_source_save_request(&f->src, r, f->saved_room, http_source_save_room(r));
    http_source_save_body(&f->src, r, f->saved_room + http_source_save_room(r));
    f->src.saved.upstream = &f->uvars;
    if (body_owner)
        http_collect_free(shared, body_owner);
    /* A socket kept in another group's set leaves it: this request's group has it now. */
    if (f->registered && f->h.group != c->h.group) {
        lf_group_remove(&f->h, false);
        f->registered = false;
    }
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    if (target_rc < 0) {
        fcgi_finish(f, t.status, t.why);
        return;
    }
    if (plen < 0) {
        if (s) /* (uwsgi's framing refused the parameters: the server was not tried) */
            upstream_done(u, s, false, now);
        fcgi_finish(f, 500, "the request's parameters are too large");
        return;
    }
    if (to_name) {
        snprintf(f->look.host, sizeof(f->look.host), "%s", t.host);
        f->look.port = t.port;
        resolve_begin(f);
        return;
    }
    if (!s) {
        try_begin(f, f->up->name, clock_now_us());
        try_end(f, 502);
        fcgi_finish(f, 502, "no live upstreams");
        return;
    }
    attempt_begin(f, s);
}

static void fcgi_fini(void)
{
    pthread_mutex_lock(&fcgi_free.lock);
    struct conn_fcgi *list = fcgi_free.list;
    fcgi_free.list = NULL;
    pthread_mutex_unlock(&fcgi_free.lock);
    while (list) {
        struct conn_fcgi *next = list->next_free;
        free(list->req);
        upstream_lookup_free(&list->look);
        free(list);
        list = next;
    }
}

const struct http_source_kind http_fastcgi_source = {
    .name = "fastcgi",
    .answers = fcgi_answers,
    .start = fcgi_start,
    .fini = fcgi_fini,
};
