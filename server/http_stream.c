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
#include "http_private.h"
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
    struct lf_handle h; /* its epoll set: first, so the handle is the stream */
    int pipe_fd;        /* the output (rs.fd) */
    int timer_fd;       /* readable once the deadline has passed */
    struct conn *c;
    struct resp_stream rs;
    bool timed_out; /* the deadline passed: the process group was killed */
    bool head_sent;
    bool chunked;    /* the body goes out as chunks */
    bool head_only;  /* HEAD: the script's body is read and dropped */
    bool keep_alive; /* the connection goes on after this response */
    bool http10;
    int status;
    uint64_t left;   /* with a known length: body bytes still to come */
    uint64_t sent;   /* body bytes sent, for the access log */
    int64_t deadline_ms;
    int64_t start_us; /* for the class's service time, recorded when the response ends */
    /* For the access log, written when the response ends: the request is long gone. */
    char request_line[512], referer[256], user_agent[256];
    size_t pending_len;
    char pending[STREAM_HEAD_MAX]; /* output gathered until the head is complete */
};

static size_t copy_slice(char *dst, size_t cap, const char *p, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    if (n)
        memcpy(dst, p, n);
    dst[n] = '\0';
    return n;
}

static struct http_slice slice_of(const char *s)
{
    return (struct http_slice){s, strlen(s)};
}

static void stream_log(struct conn_stream *cs)
{
    struct conn *c = cs->c;
    http_stats_record(&http_host_of(c)->stats, clock_now_us() - cs->start_us, cs->status,
                      cs->sent);
    int64_t now_s;
    http_date_header(&now_s);
    http_conn_log_access(c, slice_of(cs->request_line), slice_of(cs->referer),
                         slice_of(cs->user_agent), cs->status, cs->sent, now_s, NULL);
    struct response resp; /* what the modules' log hooks need to know of it */
    resp_init(&resp);
    resp.status = cs->status;
    resp.content_length = cs->sent;
    http_conn_log_unparsed(c, &resp, now_s);
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
static void stream_free(struct conn *c, bool kill_it, bool timed_out)
{
    struct conn_stream *cs = c->stream;
    c->stream = NULL;
    stream_release(&cs->rs, kill_it, timed_out);
    close(cs->timer_fd);
    close(cs->h.fd);
    free(cs);
}

void http_stream_abort(struct conn *c)
{
    struct conn_stream *cs = c->stream;
    stream_log(cs);
    stream_free(c, true,
                cs->timed_out || atomic_load_explicit(&c->expired, memory_order_relaxed));
}

/* Send what resp holds. Returns SEND_DONE, SEND_ERROR, or SEND_PARKED after arranging
 * to come back through http_stream_resume once the client has taken it. */
static enum send_result stream_send(struct conn_stream *cs, struct response *resp)
{
    struct conn *c = cs->c;
    /* Whether there is a body is the stream's to say (HEAD, 204 and 304 add none). */
    enum send_result r = conn_send(c, resp, true);
    if (r == SEND_PARKED) {
        c->close_after_send = false;
        conn_wait(c, CONN_SEND, EPOLLOUT,
                  clock_now_ms() + c->gen->cfg.send_timeout_ms);
    }
    return r;
}

/* Queue body bytes on resp (as one chunk when chunked). The bytes must outlive the send:
 * the caller's buffer does, and parking copies them. */
static void add_body(struct conn_stream *cs, struct response *resp, const char *p, size_t n,
                     char *chunk_line)
{
    if (n == 0 || cs->head_only)
        return;
    if (cs->left != UINT64_MAX) { /* never send more than the announced length */
        if (n > cs->left)
            n = (size_t)cs->left;
        cs->left -= n;
    }
    if (cs->chunked) {
        int l = snprintf(chunk_line, 24, "%zx\r\n", n);
        resp_body_mem(resp, chunk_line, (size_t)l);
    }
    resp_body_mem(resp, p, n);
    if (cs->chunked)
        resp_body_mem(resp, "\r\n", 2);
    cs->sent += n;
}

/* The end of the output, or a failure (why, or NULL): answer what is still owed, then go
 * on with the connection or close it. */
static void stream_finish(struct conn_stream *cs, const char *failure)
{
    struct conn *c = cs->c;
    bool timed_out = cs->timed_out;
    struct response resp;
    resp_init(&resp);
    resp.status = cs->status; /* the head's, already sent; whether to linger reads it */
    bool ok = !failure && !timed_out;
    bool keep_alive = cs->keep_alive;
    if (!cs->head_sent) {
        cs->status = timed_out ? 504 : 502;
        if (!timed_out) /* the client sees only "Bad Gateway": the log says why */
            log_error("%s: answered 502: %s", cs->rs.name ? cs->rs.name : "stream",
                      failure ? failure : cs->pending_len ? "its output ended inside the head"
                                                          : "no output");
        resp_error(&resp, cs->status);
        resp.head_only = cs->head_only;
        resp.keep_alive = keep_alive;
        resp_finish(&resp, cs->http10);
        cs->sent = resp.head_only ? 0 : resp.content_length;
    } else {
        if (cs->chunked && !cs->head_only && ok)
            resp_body_mem(&resp, "0\r\n\r\n", 5);
        /* A body cut short (a failure, or less than the script announced) must look cut
         * to the client: no last chunk, and the connection closes. */
        if (!ok || (!cs->head_only && cs->left != UINT64_MAX && cs->left > 0))
            keep_alive = false;
    }
    stream_log(cs);
    stream_free(c, false, timed_out); /* (a timed-out one was killed by stream_timeout) */
    resp.keep_alive = keep_alive;
    if (http_conn_send(c, &resp, NULL, 0))
        http_conn_continue(c);
}

/* The head is complete in cs->pending (head_len bytes of it): send it with what follows. */
static enum send_result send_head(struct conn_stream *cs, struct response *resp,
                                  size_t head_len, char *chunk_line)
{
    cs->status = resp->status;
    resp->keep_alive = cs->keep_alive;
    if (resp->no_length) {
        cs->head_only = true; /* 204, 304: no body whatever the script writes */
    } else if (resp->length_known) {
        cs->left = resp->content_length;
    } else if (cs->http10) {
        resp->keep_alive = cs->keep_alive = false; /* the end of the body is the close */
        resp->no_length = true; /* no Content-Length: stream_send sends the body anyway */
    } else {
        resp->chunked = cs->chunked = true;
    }
    resp->n_segs = 0; /* a head() parser adds no body; content_length is the announced one */
    resp_finish(resp, cs->http10);
    cs->head_sent = true;
    add_body(cs, resp, cs->pending + head_len, cs->pending_len - head_len, chunk_line);
    return stream_send(cs, resp);
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
    struct conn_stream *cs = (struct conn_stream *)h;
    struct conn *c = cs->c;
    char buf[16384];
    char chunk_line[24];
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
        if (!cs->head_sent && cs->pending_len == sizeof(cs->pending)) {
            stream_finish(cs, "a head larger than 16k"); /* 502 */
            return;
        }
        char *dst = cs->head_sent ? buf : cs->pending + cs->pending_len;
        size_t cap = cs->head_sent ? sizeof(buf) : sizeof(cs->pending) - cs->pending_len;
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
        if (cs->head_sent) {
            add_body(cs, &resp, buf, (size_t)n, chunk_line);
            if (resp.n_segs)
                r = stream_send(cs, &resp);
        } else {
            cs->pending_len += (size_t)n;
            int used = cs->rs.ops->head(cs->rs.ctx, cs->pending, cs->pending_len, &resp);
            if (used < 0) {
                stream_finish(cs, "its head is not valid (a bad field, or no Content-Type, "
                                  "Location or Status)");
                return;
            }
            if (used > 0)
                r = send_head(cs, &resp, (size_t)used, chunk_line);
        }
        if (r == SEND_PARKED)
            return;
        if (r == SEND_ERROR) { /* the client is gone: so is the script */
            conn_close(c);
            return;
        }
    }
}

void http_stream_resume(struct conn *c)
{
    struct conn_stream *cs = c->stream;
    conn_wait_on(c, &cs->h, CONN_STREAM, cs->deadline_ms);
}

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

void http_stream_start(struct conn *c, struct response *resp, const struct http_request *h,
                       const char *rest, size_t rest_len)
{
    struct conn_stream *cs = NULL;
    if (http_conn_save_input(c, rest, rest_len) && (cs = malloc(sizeof(*cs)))) {
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
        stream_release(&resp->stream, true, false);
        conn_close(c);
        return;
    }
    cs->h.on_event = stream_event;
    cs->c = c;
    cs->head_only = resp->head_only;
    cs->keep_alive = resp->keep_alive;
    cs->http10 = h->version_minor == 0;
    cs->left = UINT64_MAX;
    cs->deadline_ms = clock_now_ms() + cs->rs.timeout_ms;
    cs->start_us = clock_now_us();
    struct http_slice line = http_request_line(h);
    copy_slice(cs->request_line, sizeof(cs->request_line), line.p, line.len);
    copy_slice(cs->referer, sizeof(cs->referer), h->referer.p, h->referer.len);
    copy_slice(cs->user_agent, sizeof(cs->user_agent), h->user_agent.p, h->user_agent.len);

    c->stream = cs;
    atomic_store_explicit(&c->deadline_ms, cs->deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    /* The last act: from here the stream set's events own the connection. */
    int rc = lf_group_add(c->h.group, &cs->h, EPOLLIN);
    if (rc < 0) {
        log_error("epoll: cannot add a stream's pipe: %s", strerror(-rc));
        conn_close(c); /* aborts the stream */
    }
}
