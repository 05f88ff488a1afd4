/* http_stream.c — a response streamed from a pipe (a CGI script's output) to a client.
 *
 * A handler that starts a process returns its output pipe in resp->stream. From then on
 * the connection is driven by two handles in its group, only one of them armed at a time,
 * so exactly one thread owns the connection at any moment:
 *
 *   stream armed (CONN_STREAM)  the stream's own epoll set, which holds the pipe, a timer
 *                               at the deadline and the client's socket (for its hang-up
 *                               only). Output is read as it comes, 16 KiB at a time, and
 *                               sent on: first gathered until the handler's head() parser
 *                               has the head, then as body (chunked when the length is
 *                               unknown);
 *   socket armed (CONN_SEND)    the client is slow: what the socket would not take waits
 *                               on the connection, and the pipe is read again once it is
 *                               sent.
 *
 * The whole response has a deadline (the handler's timeout), kept here and not by the
 * sweep: the thread that owns the stream kills the script's process group and answers 504
 * if no head was sent yet, or cuts the response. A client that hangs up while the script
 * is silent has the script killed at once. Every kill goes through the leader's pidfd,
 * never a number that may have been reused, and only the owning thread kills. Nothing
 * here ever blocks a thread.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "http_source.h"
#include "log.h"

#define STREAM_HEAD_MAX 16384

#ifndef P_PIDFD
#define P_PIDFD 3 /* waitid() on a pidfd: Linux 5.4 */
#endif
#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1U << 2) /* pidfd_send_signal() to its group: Linux 6.9 */
#endif

/* The members of a stream's epoll set, as its events name them. */
enum { STREAM_PIPE = 1u << 0, STREAM_DEADLINE = 1u << 1, STREAM_CLIENT = 1u << 2 };

struct conn_stream {
    struct http_source src; /* first: the source is the stream */
    struct lf_handle h;     /* its epoll set */
    int pipe_fd;            /* the output (rs.fd) */
    int timer_fd;           /* readable once the deadline has passed */
    struct resp_stream rs;
    bool timed_out; /* the deadline passed: the process group was killed */
    uint64_t left;  /* with a known length: body bytes still to come */
    int64_t deadline_ms;
    size_t pending_len;
    char pending[STREAM_HEAD_MAX]; /* output gathered until the head is complete */
    char saved[];                  /* the request as it was answered (its filters') */
};

static struct conn_stream *stream_of(struct lf_handle *h)
{
    return (struct conn_stream *)((char *)h - offsetof(struct conn_stream, h));
}

/* SIGKILL to the script's process group. A process number names whoever has it now:
 * once the leader is reaped (the main thread reaps at once) and the rest of its group is
 * gone, the number may belong to an unrelated group. The leader's pidfd names that
 * process for good; signalling its group through it reaches only the group it led. */
static void stream_kill(const struct resp_stream *rs)
{
    if (rs->pidfd <= 0) { /* a kernel without pidfds (before 5.3): the number it is */
        if (rs->pgid > 0)
            kill(-rs->pgid, SIGKILL);
        return;
    }
    if (syscall(SYS_pidfd_send_signal, rs->pidfd, SIGKILL, NULL,
                PIDFD_SIGNAL_PROCESS_GROUP) == 0 || errno != EINVAL)
        return;
    /* Before Linux 6.9 a pidfd signals its process only. The group by number, then, but
     * only while the leader is not reaped: until then no other group can have it. */
    siginfo_t si;
    if (waitid((idtype_t)P_PIDFD, (id_t)rs->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
        kill(-rs->pgid, SIGKILL);
}

/* Let go of what resp_stream carried: the process (killed first if kill_it), the
 * handler's state, the pipe and the pidfd. */
static void stream_release(const struct resp_stream *rs, bool kill_it, bool timed_out)
{
    if (kill_it)
        stream_kill(rs);
    rs->ops->done(rs->ctx, timed_out);
    close(rs->fd);
    if (rs->pidfd > 0)
        close(rs->pidfd);
}

/* Release the stream: the handler's state, the pipe, the timer and the stream's set. */
static void stream_free(struct conn_stream *cs, bool kill_it, bool timed_out)
{
    stream_release(&cs->rs, kill_it, timed_out);
    close(cs->timer_fd);
    close(cs->h.fd);
    free(cs);
}

/* The connection is closing: the script goes with it. */
static void stream_abort(struct http_source *s)
{
    struct conn_stream *cs = (struct conn_stream *)s;
    stream_free(cs, true,
                cs->timed_out || atomic_load_explicit(&s->c->expired, memory_order_relaxed));
}

/* The answer has ended (a timed-out script was killed by stream_timeout). */
static void stream_done(struct http_source *s)
{
    struct conn_stream *cs = (struct conn_stream *)s;
    stream_free(cs, false, cs->timed_out);
}

/* Queue body bytes of the script's on resp, never more than the head announced. */
static int add_body(struct conn_stream *cs, struct response *resp, const char *p, size_t n,
                    struct http_piece *pc)
{
    if (cs->src.head_only)
        return 0;
    if (cs->left != UINT64_MAX) { /* never send more than the announced length */
        if (n > cs->left)
            n = (size_t)cs->left;
        cs->left -= n;
    }
    return http_source_body(&cs->src, resp, p, n, pc);
}

/* The end of the output, or a failure (why, or NULL): answer what is still owed, then go
 * on with the connection or close it. */
static void stream_finish(struct conn_stream *cs, const char *failure)
{
    struct http_source *s = &cs->src;
    bool timed_out = cs->timed_out;
    struct http_piece pc;
    struct response resp;
    resp_init(&resp);
    resp.status = s->status; /* the head's, already sent; whether to linger reads it */
    bool ok = !failure && !timed_out;
    bool keep_alive = s->keep_alive;
    if (!s->head_sent) {
        s->status = timed_out ? 504 : 502;
        /* the client sees only "Bad Gateway": the log (the location's) says why */
        const char *why = failure ? failure : cs->pending_len ? "its output ended inside the head"
                                                              : "no output";
        const char *name = cs->rs.name ? cs->rs.name : "stream";
        if (!timed_out && s->has_saved)
            module_log(&s->saved, LOG_LEVEL_ERROR, "%s: answered 502: %s", name, why);
        else if (!timed_out)
            log_error("%s: answered 502: %s", name, why);
        resp_error(&resp, s->status);
        resp.head_only = s->head_only;
        resp.keep_alive = keep_alive;
        resp_finish(&resp, s->http10);
        s->sent = resp.head_only ? 0 : resp.content_length;
    } else {
        if (ok && http_source_body_end(s, &resp, &pc) < 0)
            ok = false;
        /* A body cut short (a failure, or less than the script announced) must look cut
         * to the client: no last chunk, and the connection closes. */
        if (!ok || (!s->head_only && cs->left != UINT64_MAX && cs->left > 0))
            keep_alive = false;
        if (!ok)
            resp_body_clear(&resp);
    }
    http_source_end(s, &resp, keep_alive);
}

/* The head is complete in cs->pending (head_len bytes of it): send it with what follows. */
static enum send_result send_head(struct conn_stream *cs, struct response *resp,
                                  size_t head_len, struct http_piece *pc)
{
    struct http_source *s = &cs->src;
    s->status = resp->status;
    resp->n_segs = 0; /* a head() parser adds no body; content_length is the announced one */
    http_source_filter_head(s, resp, NULL);
    bool coded = resp->body_filter && !resp->no_length; /* (compressed: the length changes) */
    if (!http_source_start_filter(s, resp))
        return SEND_ERROR;
    resp->keep_alive = s->keep_alive;
    if (resp->no_length) {
        s->head_only = true; /* 204, 304: no body whatever the script writes */
    } else {
        if (resp->length_known)
            cs->left = resp->content_length;
        if (resp->length_known && !coded) {
            /* sent with its Content-Length */
        } else if (s->http10 || s->no_chunked) {
            resp->keep_alive = s->keep_alive = false; /* the end of the body is the close */
            resp->no_length = true; /* no Content-Length: the body is sent anyway */
        } else {
            resp->chunked = s->chunked = true;
        }
    }
    resp_finish(resp, s->http10);
    s->head_sent = true;
    if (add_body(cs, resp, cs->pending + head_len, cs->pending_len - head_len, pc) < 0)
        return SEND_ERROR;
    return http_source_send(s, resp);
}

/* Which members of the stream's set are ready (STREAM_*), without waiting. */
static unsigned stream_ready(const struct conn_stream *cs)
{
    struct epoll_event ev[3];
    int n = epoll_wait(cs->h.fd, ev, 3, 0);
    unsigned ready = 0;
    for (int i = 0; i < n; i++)
        ready |= ev[i].data.u32;
    return ready;
}

/* The deadline has passed: the script goes, and the client gets what is still owed. */
static void stream_timeout(struct conn_stream *cs)
{
    cs->timed_out = true;
    stream_kill(&cs->rs);
    stream_finish(cs, NULL);
}

static void stream_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn_stream *cs = stream_of(h);
    struct http_source *s = &cs->src;
    struct conn *c = s->c;
    char buf[HTTP_SOURCE_PIECE];
    struct http_piece pc;
    unsigned ready = stream_ready(cs);
    if (ready & STREAM_CLIENT) { /* the client hung up: the script goes with it */
        conn_close(c);
        return;
    }
    for (;;) {
        struct response resp;
        resp_init(&resp);
        /* Checked each time round too: a script that writes without a pause would keep
         * this loop from ever waiting on the set. */
        if ((ready & STREAM_DEADLINE) || clock_now_ms() >= cs->deadline_ms) {
            stream_timeout(cs);
            return;
        }
        if (!s->head_sent && cs->pending_len == sizeof(cs->pending)) {
            stream_finish(cs, "a head larger than 16k"); /* 502 */
            return;
        }
        char *dst = s->head_sent ? buf : cs->pending + cs->pending_len;
        size_t cap = s->head_sent ? sizeof(buf) : sizeof(cs->pending) - cs->pending_len;
        ssize_t n = read(cs->pipe_fd, dst, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            conn_wait_on(c, h, CONN_STREAM, cs->deadline_ms);
            return;
        }
        if (n <= 0) {
            stream_finish(cs, n < 0 ? strerror(errno) : NULL);
            return;
        }
        enum send_result r = SEND_DONE;
        if (s->head_sent) {
            if (add_body(cs, &resp, buf, (size_t)n, &pc) < 0) {
                stream_finish(cs, "its output could not be compressed");
                return;
            }
            if (resp.n_segs)
                r = http_source_send(s, &resp);
        } else {
            cs->pending_len += (size_t)n;
            int used = cs->rs.ops->head(cs->rs.ctx, cs->pending, cs->pending_len, &resp);
            if (used < 0) {
                stream_finish(cs, "its head is not valid (a bad field, or no Content-Type, "
                                  "Location or Status)");
                return;
            }
            if (used > 0)
                r = send_head(cs, &resp, (size_t)used, &pc);
        }
        if (r == SEND_PARKED)
            return;
        if (r == SEND_ERROR) { /* the client is gone: so is the script */
            conn_close(c);
            return;
        }
    }
}

/* A parked part of the answer went out: read more of the script's output. */
static void stream_resume(struct http_source *s)
{
    struct conn_stream *cs = (struct conn_stream *)s;
    conn_wait_on(s->c, &cs->h, CONN_STREAM, cs->deadline_ms);
}

static const struct http_source_ops stream_ops = {
    .resume = stream_resume,
    .abort = stream_abort,
    .release = stream_done,
};

/* Add fd to the stream's set for events, named `member` in what it reports. */
static bool set_add(int set, int fd, uint32_t events, unsigned member)
{
    struct epoll_event ev = {.events = events, .data.u32 = member};
    return epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) == 0;
}

/* The stream's epoll set and its deadline's timer, in cs->h.fd and cs->timer_fd: the
 * pipe, the timer, and the client's socket for a hang-up (EPOLLRDHUP; a request
 * pipelined meanwhile is not an event). false if they cannot be had. */
static bool stream_set_up(struct conn_stream *cs, int socket_fd)
{
    cs->h.fd = epoll_create1(EPOLL_CLOEXEC);
    cs->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct itimerspec at = {.it_value = {.tv_sec = cs->rs.timeout_ms / 1000,
                                         .tv_nsec = cs->rs.timeout_ms % 1000 * 1000000L}};
    if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0)
        at.it_value.tv_nsec = 1; /* zero would disarm it */
    if (cs->h.fd >= 0 && cs->timer_fd >= 0 && timerfd_settime(cs->timer_fd, 0, &at, NULL) == 0 &&
        set_add(cs->h.fd, cs->pipe_fd, EPOLLIN, STREAM_PIPE) &&
        set_add(cs->h.fd, cs->timer_fd, EPOLLIN, STREAM_DEADLINE) &&
        set_add(cs->h.fd, socket_fd, EPOLLRDHUP, STREAM_CLIENT))
        return true;
    log_error("a stream's epoll set: %s", strerror(errno));
    if (cs->h.fd >= 0)
        close(cs->h.fd);
    if (cs->timer_fd >= 0)
        close(cs->timer_fd);
    return false;
}

static bool stream_answers(const struct response *resp)
{
    return resp->streaming && !resp->proxy;
}

/* Start streaming resp->stream to the client: from then on the pipe's events drive the
 * connection. The handler has had the request's body by now (a CGI script's stdin). */
static void stream_start(struct conn *c, struct response *resp, const struct request *r,
                         const char *rest, size_t rest_len, struct http_collect *body_owner)
{
    struct conn_stream *cs = NULL;
    size_t room = http_source_save_room(r);
    size_t body_room = http_source_body_room(r);
    if (http_save_input(c, rest, rest_len) && (cs = malloc(sizeof(*cs) + room + body_room))) {
        memset(cs, 0, offsetof(struct conn_stream, pending));
        cs->rs = resp->stream;
        cs->pipe_fd = resp->stream.fd;
        if (!stream_set_up(cs, c->h.fd)) {
            free(cs);
            cs = NULL;
        }
    }
    if (!cs) {
        /* Out of memory or descriptors: the process and its pipe go, and so does the
         * connection. */
        if (body_owner)
            http_collect_free(http_service_of(c)->shared, body_owner);
        stream_release(&resp->stream, true, false);
        conn_close(c);
        return;
    }
    http_source_init(&cs->src, &stream_ops, c, resp, r);
    http_source_save_request(&cs->src, r, cs->saved, room);
    http_source_save_body(&cs->src, r, cs->saved + room);
    if (body_owner) /* (the request's head in it is saved) */
        http_collect_free(http_service_of(c)->shared, body_owner);
    cs->h.on_event = stream_event;
    cs->left = UINT64_MAX;
    cs->deadline_ms = clock_now_ms() + cs->rs.timeout_ms;

    atomic_store_explicit(&c->deadline_ms, cs->deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    /* The last act: from here the stream set's events own the connection. */
    int rc = lf_group_add(c->h.group, &cs->h, EPOLLIN);
    if (rc < 0) {
        log_error("epoll: cannot add a stream's pipe: %s", strerror(-rc));
        conn_close(c); /* aborts the stream */
    }
}

const struct http_source_kind http_stream_source = {
    .name = "stream",
    .answers = stream_answers,
    .start = stream_start,
};
